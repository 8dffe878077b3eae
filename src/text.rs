//! Text from outside (a rule's comment, a config's bytes) made safe for a terminal: shared by
//! the config's diagnostics and every applet's output, and depending on neither.

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
