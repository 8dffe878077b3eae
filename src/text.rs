//! Text for people, shared by the config's diagnostics, every applet's output and the logs, and
//! depending on none of them: what comes from outside (a rule's comment, a config's bytes)
//! made safe for a terminal, durations as log fields print them, and the calendar date of a
//! day for the times the state file and the SNAT log write.

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

/// The proleptic Gregorian date of a day number counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
