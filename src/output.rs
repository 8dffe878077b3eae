//! Rendering shared by the applets: colour decisions, compiler-style diagnostics with the
//! offending source line, and JSON documents.

use crate::cli::ColorChoice;
use crate::config::{Diagnostic, Severity};
use std::io::IsTerminal;

/// Applies ANSI styles when colour is on, and nothing otherwise.
#[derive(Clone, Copy, Debug)]
pub struct Styler {
    enabled: bool,
}

impl Styler {
    /// Colour only on a terminal (and not when NO_COLOR is set), unless forced.
    pub fn for_stdout(choice: ColorChoice) -> Self {
        let enabled = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        };
        Styler { enabled }
    }

    pub fn plain() -> Self {
        Styler { enabled: false }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }
    pub fn error(&self, text: &str) -> String {
        self.paint("1;31", text)
    }
    pub fn warning(&self, text: &str) -> String {
        self.paint("1;33", text)
    }
    pub fn success(&self, text: &str) -> String {
        self.paint("1;32", text)
    }
    pub fn hint(&self, text: &str) -> String {
        self.paint("36", text)
    }
    pub fn gutter(&self, text: &str) -> String {
        self.paint("1;34", text)
    }
}

/// Renders one diagnostic in compiler style:
///
/// ```text
/// config.yaml:3:5: error[cidr-not-aligned]: CIDR "10.1.2.3/16" is not aligned ...
///    3 |   - 10.1.2.3/16
///      |     ^^^^^^^^^^^
///      = hint: did you mean 10.1.0.0/16?
/// ```
pub fn render_diagnostic(
    style: &Styler,
    path: &str,
    source: Option<&str>,
    diag: &Diagnostic,
) -> String {
    let severity = match diag.severity {
        Severity::Error => style.error(&format!("error[{}]", diag.code.as_str())),
        Severity::Warning => style.warning(&format!("warning[{}]", diag.code.as_str())),
        Severity::Info => style.hint(&format!("info[{}]", diag.code.as_str())),
    };
    // A finding of another file (a merged directory) is named by that file, without a
    // snippet of a source we do not hold.
    let (path, source) = match &diag.file {
        Some(file) if &**file != path => (&**file, None),
        _ => (path, source),
    };
    let position = match diag.location {
        Some(l) => format!("{path}:{}:{}", l.line, l.column),
        None => path.to_string(),
    };
    let mut out = format!(
        "{}: {severity}: {}\n",
        style.bold(&position),
        style.bold(&diag.message)
    );
    let gutter_width = diag.location.map_or(1, |l| l.line.to_string().len());
    let pad = " ".repeat(gutter_width);
    if let (Some(location), Some(source)) = (diag.location, source) {
        if let Some(line_text) = source.lines().nth(location.line.saturating_sub(1)) {
            let line_text = line_text.trim_end_matches('\r');
            let prefix: String = line_text
                .chars()
                .take(location.column.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            let covered = source
                .get(location.offset..location.end_offset)
                .filter(|t| !t.contains('\n'))
                .map_or(1, |t| t.chars().count().max(1));
            out.push_str(&format!(
                "{} {line_text}\n",
                style.gutter(&format!("{:>gutter_width$} |", location.line))
            ));
            let carets = "^".repeat(covered);
            let carets = match diag.severity {
                Severity::Error => style.error(&carets),
                Severity::Warning => style.warning(&carets),
                Severity::Info => style.hint(&carets),
            };
            out.push_str(&format!(
                "{} {prefix}{carets}\n",
                style.gutter(&format!("{pad} |"))
            ));
        }
    }
    if let Some(hint) = &diag.hint {
        out.push_str(&format!(
            "{} {}\n",
            style.gutter(&format!("{pad} =")),
            style.hint(&format!("hint: {hint}"))
        ));
    }
    out
}

/// Pretty JSON with a trailing newline.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    text.push('\n');
    text
}

/// The same document as YAML (for support bundles), with a trailing newline.
pub fn to_yaml<T: serde::Serialize>(value: &T) -> String {
    serde_saphyr::to_string(value).unwrap_or_else(|e| format!("# cannot render YAML: {e}\n"))
}

/// "1 error", "2 warnings".
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Text from the live system (a rule's comment, a foreign option) made safe for a terminal:
/// control characters are shown as escapes, so a hostile comment cannot move the cursor,
/// recolour or retitle the terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{check_text, Options};

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("plain text"), "plain text");
        assert_eq!(
            printable("a\u{1b}]0;owned\u{7}b\nc\u{9b}d"),
            "a\\x1b]0;owned\\x07b\\nc\\x9bd"
        );
    }

    #[test]
    fn renders_the_line_carets_and_hint() {
        let source = "nonMasqueradeCIDRs:\n  - 10.1.2.3/16\n";
        let checked = check_text(source, &Options::default());
        let text = render_diagnostic(
            &Styler::plain(),
            "c.yaml",
            Some(source),
            &checked.diagnostics()[0],
        );
        assert_eq!(
            text,
            "c.yaml:2:5: error[cidr-not-aligned]: CIDR \"10.1.2.3/16\" is not aligned to a CIDR block, ip: \"10.1.2.3\" network: \"10.1.0.0/16\"\n\
             2 |   - 10.1.2.3/16\n\
            \x20 |     ^^^^^^^^^^^\n\
            \x20 = hint: did you mean 10.1.0.0/16?\n"
        );
    }

    #[test]
    fn colour_is_only_added_when_enabled() {
        let on = Styler::for_stdout(ColorChoice::Always);
        assert!(on.error("x").contains("\x1b["));
        assert_eq!(Styler::for_stdout(ColorChoice::Never).error("x"), "x");
    }
}
