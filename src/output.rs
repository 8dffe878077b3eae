//! Rendering shared by the applets: colour decisions, compiler-style diagnostics with the
//! offending source line, and JSON documents.

use crate::config::{Diagnostic, Severity};
pub use crate::text::{plural, printable};
use std::io::IsTerminal;

/// When to colour text output.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorChoice {
    /// Only when writing to a terminal and NO_COLOR is unset
    Auto,
    Always,
    Never,
}

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
        if let Some(line_text) = line_at(source, location) {
            // A byte order mark is not shown, and columns do not count it (the parser's don't).
            let line_text = line_text
                .trim_end_matches('\r')
                .trim_start_matches(crate::config::BYTE_ORDER_MARK);
            let covered = source
                .get(location.offset..location.end_offset)
                .filter(|t| !t.contains('\n'))
                .map_or(1, |t| t.chars().count().max(1));
            let snippet = Snippet::of(line_text, location.column.saturating_sub(1), covered);
            out.push_str(&format!(
                "{} {}\n",
                style.gutter(&format!("{:>gutter_width$} |", location.line)),
                snippet.text
            ));
            let carets = "^".repeat(snippet.carets);
            let carets = match diag.severity {
                Severity::Error => style.error(&carets),
                Severity::Warning => style.warning(&carets),
                Severity::Info => style.hint(&carets),
            };
            out.push_str(&format!(
                "{} {}{carets}\n",
                style.gutter(&format!("{pad} |")),
                snippet.caret_prefix
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

/// The source line a location is on, found from its byte offset (no scan from the top, so
/// rendering many findings of a large file stays linear); by line number when the offset does
/// not point into the text.
fn line_at(source: &str, location: crate::config::yaml::Location) -> Option<&str> {
    let offset = location.offset;
    if location.line > 0 && offset <= source.len() && source.is_char_boundary(offset) {
        let start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
        let end = source[offset..]
            .find('\n')
            .map_or(source.len(), |i| offset + i);
        let counted = location.line == 1 || start > 0;
        if counted {
            return Some(&source[start..end]);
        }
    }
    source.lines().nth(location.line.saturating_sub(1))
}

/// Widest source line shown under a finding, in characters; a longer line is shown as a
/// window around the finding, so a 4 MB one-line file prints a short snippet, not 4 MB per
/// finding.
const SNIPPET_CHARS: usize = 120;
/// How much of the line before the finding the window keeps.
const SNIPPET_LEAD: usize = 40;

/// A window of one source line and where the carets go under it.
struct Snippet {
    text: String,
    /// Blanks (tabs kept, so carets line up) up to the finding.
    caret_prefix: String,
    carets: usize,
}

impl Snippet {
    fn of(line: &str, column: usize, covered: usize) -> Snippet {
        let total = line.chars().count();
        let (skip, ellipsis_before) = if total <= SNIPPET_CHARS || column <= SNIPPET_LEAD {
            (0, false)
        } else {
            (column - SNIPPET_LEAD, true)
        };
        let window: String = line.chars().skip(skip).take(SNIPPET_CHARS).collect();
        let ellipsis_after = skip + SNIPPET_CHARS < total;
        let mut text = String::with_capacity(window.len() + 8);
        let mut caret_prefix = String::new();
        if ellipsis_before {
            text.push('…');
            caret_prefix.push(' ');
        }
        // Control characters in the file are shown escaped (a config cannot recolour the
        // terminal of whoever validates it); tabs stay, so the carets line up under them.
        for (i, c) in window.chars().enumerate() {
            let shown = if c == '\t' {
                std::borrow::Cow::Borrowed("\t")
            } else {
                printable(c.encode_utf8(&mut [0; 4])).into_owned().into()
            };
            if i < column - skip {
                if c == '\t' {
                    caret_prefix.push('\t');
                } else {
                    caret_prefix.extend(std::iter::repeat_n(' ', shown.chars().count()));
                }
            }
            text.push_str(&shown);
        }
        if ellipsis_after {
            text.push('…');
        }
        let room = SNIPPET_CHARS.saturating_sub(column - skip).max(1);
        Snippet {
            text,
            caret_prefix,
            carets: covered.min(room),
        }
    }
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
    fn a_long_line_is_shown_as_a_window_around_the_finding() {
        let line = format!(
            "nonMasqueradeCIDRs: [{}]",
            vec!["10.1.2.3/8"; 20_000].join(", ")
        );
        let text = format!("{line}\n");
        let d = check_text(&text, &Options::default());
        let out = d
            .diagnostics()
            .iter()
            .map(|diag| render_diagnostic(&Styler::plain(), "c.yaml", Some(&text), diag))
            .collect::<String>();
        assert!(out.len() < 10_000, "{} bytes", out.len());
        assert!(out.contains("more [cidr-not-aligned] findings"), "{out}");
        // The carets still sit under the finding they mark.
        let later = d.diagnostics()[5].location.unwrap();
        let one = render_diagnostic(&Styler::plain(), "c.yaml", Some(&text), &d.diagnostics()[5]);
        let lines: Vec<&str> = one.lines().collect();
        let caret_at = lines[2].chars().position(|c| c == '^').unwrap();
        let shown: String = lines[1].chars().skip(caret_at).collect();
        assert!(
            shown.starts_with("10.1.2.3/8"),
            "{shown:?} (column {})",
            later.column
        );
    }

    #[test]
    fn colour_is_only_added_when_enabled() {
        let on = Styler::for_stdout(ColorChoice::Always);
        assert!(on.error("x").contains("\x1b["));
        assert_eq!(Styler::for_stdout(ColorChoice::Never).error("x"), "x");
    }
}
