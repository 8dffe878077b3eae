//! Text for people, shared by the config's diagnostics, every applet's output and the logs, and
//! depending on none of them: what comes from outside (a rule's comment, a config's bytes)
//! made safe for a terminal, durations as log fields print them, and the
//! words for counts and sizes (`plural`, `mib`).

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

/// A duration in milliseconds for a log field, to the microsecond (`8.002`, never
/// `8.002054999999999`).
pub fn millis(duration: std::time::Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

/// "1 error", "2 warnings".
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Bytes shown as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_print_to_the_microsecond() {
        let d = std::time::Duration::from_nanos(8_002_054_999);
        assert_eq!(millis(d).to_string(), "8002.055");
        let d = std::time::Duration::from_nanos(8_002_055);
        assert_eq!(millis(d).to_string(), "8.002");
    }
}
