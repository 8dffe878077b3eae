//! The width text reports fit: `COLUMNS`, else the terminal's, else a classic terminal's
//! (output piped to a file, a pager or a mail reads as it would on one), and the word wrap
//! that fits a line to it, ANSI styles counted as no width.

use std::io::IsTerminal;

/// The widest a table of `show` is drawn, whatever the terminal: a classic terminal.
pub const CLASSIC_WIDTH: usize = 80;

/// The narrowest width wrapped to: below it a wrap helps nobody.
const NARROWEST: usize = 20;

/// The width to fit text output to: `COLUMNS` when it holds a number, else the width of the
/// terminal stdout is, else [`CLASSIC_WIDTH`] (not a terminal: a file, a pipe, a mail).
/// Scripts read `-o json`, whose lines no width touches.
pub fn output_width() -> usize {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    if let Some(columns) = columns {
        return columns;
    }
    if !std::io::stdout().is_terminal() {
        return CLASSIC_WIDTH;
    }
    terminal_size::terminal_size().map_or(CLASSIC_WIDTH, |(width, _)| usize::from(width.0))
}

/// The width of `text` on a terminal: its characters, less ANSI escape sequences (CSI).
pub fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, up to the final byte (@ to ~).
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
            continue;
        }
        width += 1;
    }
    width
}

/// Every line of `text` longer than `width` wrapped at spaces; a command in backticks is a
/// word (it moves to the next line whole, so it can be copied), and a word longer than a
/// line is cut. A continuation line is indented by `hang` when its line starts at the margin
/// (past the label of a labelled report line), else two more than its line.
pub fn fit(text: &str, width: usize, hang: usize) -> String {
    let width = width.max(NARROWEST);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if visible_width(body) <= width {
            out.push_str(line);
            continue;
        }
        out.push_str(&wrap_line(body, width, hang));
        out.push_str(newline);
    }
    out
}

/// One line wrapped to `width` (see [`fit`]), its lines joined by newlines.
fn wrap_line(line: &str, width: usize, hang: usize) -> String {
    let leading = line.len() - line.trim_start_matches(' ').len();
    let indent = if leading == 0 { hang } else { leading + 2 }.min(width / 2);
    let mut lines: Vec<String> = Vec::new();
    let mut current = " ".repeat(leading.min(width / 2));
    let mut current_width = visible_width(&current);
    let mut fresh = true;
    for word in words(&line[leading..]) {
        let word_width = visible_width(word);
        if !fresh && current_width + 1 + word_width > width {
            lines.push(std::mem::take(&mut current));
            current = " ".repeat(indent);
            current_width = indent;
            fresh = true;
        }
        if fresh && word.is_empty() {
            continue;
        }
        if !fresh {
            current.push(' ');
            current_width += 1;
        }
        let mut rest = word;
        while current_width + visible_width(rest) > width {
            let (head, tail) = split_at_width(rest, width - current_width);
            current.push_str(head);
            lines.push(std::mem::take(&mut current));
            current = " ".repeat(indent);
            current_width = indent;
            rest = tail;
        }
        current.push_str(rest);
        current_width += visible_width(rest);
        fresh = false;
    }
    lines.push(current);
    lines.join("\n")
}

/// The words of `text` split at single spaces, a span from an opening backtick to its closing
/// one kept as one word (an unclosed backtick opens no span).
fn words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = 0;
    let mut in_quote = false;
    for (at, c) in text.char_indices() {
        match c {
            '`' => {
                // Opens only when it has a partner ahead.
                in_quote = !in_quote && text[at + 1..].contains('`');
            }
            ' ' if !in_quote => {
                words.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    words.push(&text[start..]);
    words
}

/// `text` cut after `columns` visible characters (at least one, so a cut always advances).
fn split_at_width(text: &str, columns: usize) -> (&str, &str) {
    let columns = columns.max(1);
    let mut seen = 0;
    let mut in_escape = false;
    for (at, c) in text.char_indices() {
        if in_escape {
            if ('@'..='~').contains(&c) && c != '[' {
                in_escape = false;
            }
            continue;
        }
        if c == '\u{1b}' {
            in_escape = true;
            continue;
        }
        if seen == columns {
            return text.split_at(at);
        }
        seen += 1;
    }
    (text, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widest(text: &str) -> usize {
        text.lines().map(visible_width).max().unwrap_or(0)
    }

    #[test]
    fn long_lines_wrap_at_spaces_with_a_hanging_indent() {
        let line = "config  /etc/config/ip-masq-agent (as the agent read it at 2026-11-26T10:29:37Z, sha256 0ca32e249249): keep the source address\n";
        let text = fit(line, 80, 8);
        assert!(widest(&text) <= 80, "{text}");
        assert!(
            text.starts_with("config  /etc/config/ip-masq-agent"),
            "{text}"
        );
        assert!(
            text.lines().skip(1).all(|l| l.starts_with("        ")),
            "{text}"
        );
        assert_eq!(
            text.split_whitespace().collect::<Vec<_>>(),
            line.split_whitespace().collect::<Vec<_>>()
        );
        // An indented line continues two further in.
        let text = fit(&format!("        {}", "word ".repeat(30)), 40, 8);
        assert!(
            text.lines().skip(1).all(|l| l.starts_with("          w")),
            "{text}"
        );
        // Short lines: unchanged.
        assert_eq!(fit("short\n", 80, 8), "short\n");
    }

    #[test]
    fn a_command_in_backticks_moves_to_the_next_line_whole() {
        let line = "IP-MASQ-AGENT also exists in iptables-legacy (ipv4): remove the stale copy with `ipmasq cleanup --all-variants=false --iptables-mode=legacy`\n";
        let text = fit(line, 80, 0);
        assert!(widest(&text) <= 80, "{text}");
        assert!(
            text.lines().any(|l| l
                .trim_start()
                .starts_with("`ipmasq cleanup --all-variants=false --iptables-mode=legacy`")),
            "{text}"
        );
        assert_eq!(
            text.split_whitespace().collect::<Vec<_>>(),
            line.split_whitespace().collect::<Vec<_>>()
        );
        // Longer than a line: cut like any word. Unclosed: words as usual.
        let long = format!("see `{}`\n", "x ".repeat(60));
        assert!(widest(&fit(&long, 40, 2)) <= 40);
        assert_eq!(words("a `b c"), ["a", "`b", "c"]);
        assert_eq!(words("a `b c` d"), ["a", "`b c`", "d"]);
    }

    #[test]
    fn a_word_longer_than_the_line_is_cut_and_styles_take_no_width() {
        let text = fit(&format!("rule 1: {}\n", "x".repeat(200)), 80, 8);
        assert!(widest(&text) <= 80, "{text}");
        assert_eq!(text.matches('x').count(), 200);
        let styled = format!("\u{1b}[1m{}\u{1b}[0m {}", "bold", "plain ".repeat(20));
        assert_eq!(visible_width("\u{1b}[1;31mred\u{1b}[0m"), 3);
        let text = fit(&styled, 40, 2);
        assert!(widest(&text) <= 40, "{text}");
        assert!(text.contains("\u{1b}[1mbold\u{1b}[0m"), "{text:?}");
    }
}
