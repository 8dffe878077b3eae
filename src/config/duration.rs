//! A faithful port of Go's `time.ParseDuration` and `time.Duration.String`, so that
//! `resyncInterval` accepts exactly what upstream ip-masq-agent accepts and prints the same way.
//!
//! Durations are signed nanosecond counts in an `i64`, as in Go. Error texts match Go's, because
//! operators grep logs for them.

use std::fmt;

/// A Go `time.Duration`: signed nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub i64);

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// 1<<63, the magnitude bound Go checks against.
const LIMIT: u64 = 1 << 63;

/// Why Go would reject a duration string; the `Display` text is Go's error text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("time: invalid duration {}", go_quote(.0))]
    Invalid(String),
    #[error("time: missing unit in duration {}", go_quote(.0))]
    MissingUnit(String),
    #[error("time: unknown unit {} in duration {}", go_quote(.unit), go_quote(.input))]
    UnknownUnit { unit: String, input: String },
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => NANOSECOND,
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU are both accepted by Go.
        "us" | "\u{b5}s" | "\u{3bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

/// Consumes a leading `[0-9]*`; `None` on overflow past 1<<63, as Go's `leadingInt`.
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > LIMIT {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Consumes a leading `[0-9]*` after a decimal point, dropping precision instead of failing on
/// overflow, as Go's `leadingFraction`.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let mut x: u64 = 0;
    let mut scale = 1.0_f64;
    let mut overflow = false;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if x > (LIMIT - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(s[i] - b'0');
                if y > LIMIT {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, &s[i..])
}

/// Parses a duration string exactly as Go's `time.ParseDuration` does: a possibly signed
/// sequence of decimal numbers, each with optional fraction and a unit suffix, such as
/// "300ms", "-1.5h" or "2h45m". Valid units are "ns", "us" (or "µs"), "ms", "s", "m", "h".
pub fn parse_go_duration(input: &str) -> Result<GoDuration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let mut s = input.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first() {
        if c == b'-' || c == b'+' {
            neg = c == b'-';
            s = &s[1..];
        }
    }
    if s == b"0" {
        return Ok(GoDuration(0));
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let (mut value, rest) = leading_int(s).ok_or_else(invalid)?;
        s = rest;
        let had_integer = before != s.len();

        let mut fraction = 0_u64;
        let mut scale = 1.0_f64;
        let mut had_fraction = false;
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let before = s.len();
            let (f, sc, rest) = leading_fraction(s);
            fraction = f;
            scale = sc;
            s = rest;
            had_fraction = before != s.len();
        }
        if !had_integer && !had_fraction {
            return Err(invalid());
        }

        let unit_len = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let unit_bytes = &s[..unit_len];
        s = &s[unit_len..];
        let unit_text = String::from_utf8_lossy(unit_bytes);
        let unit = match std::str::from_utf8(unit_bytes).ok().and_then(unit_nanos) {
            Some(unit) => unit,
            None => {
                return Err(DurationError::UnknownUnit {
                    unit: unit_text.into_owned(),
                    input: input.to_string(),
                })
            }
        };
        if value > LIMIT / unit {
            return Err(invalid());
        }
        value *= unit;
        if fraction > 0 {
            // Go converts through float64 here; so do we, to round identically.
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        // Go adds in uint64 and lets the sum wrap (1<<63 + 1<<63 is 0 and passes the check
        // below); wrapping on purpose keeps Go's result instead of panicking.
        total = total.wrapping_add(value);
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        // total <= 1<<63 here, so the negation always fits.
        return Ok(GoDuration((total as i64).wrapping_neg()));
    }
    if total > LIMIT - 1 {
        return Err(invalid());
    }
    Ok(GoDuration(total as i64))
}

/// Go's `time` package quoting: ASCII printable characters as they are (with `"` and `\`
/// escaped), every other byte as `\xNN`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c.is_ascii() && !c.is_ascii_control() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        } else {
            let mut buf = [0_u8; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{byte:02x}"));
            }
        }
    }
    out.push('"');
    out
}

impl GoDuration {
    /// The duration as a std `Duration`, or `None` when it is negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// Builds a duration from a std `Duration`, saturating at Go's maximum.
    pub fn from_std(d: std::time::Duration) -> Self {
        GoDuration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

/// Writes `v / 10^prec` with trailing zeros of the fraction dropped, as Go's `fmtFrac` + `fmtInt`.
fn push_fraction(out: &mut String, whole: u64, frac: u64, prec: u32) {
    out.push_str(&whole.to_string());
    if frac == 0 {
        return;
    }
    let digits = format!("{:0width$}", frac, width = prec as usize);
    out.push('.');
    out.push_str(digits.trim_end_matches('0'));
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String`: "72h3m0.5s", "1.5ms", "0s".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let u = self.0.unsigned_abs();
        let mut out = String::new();
        if neg {
            out.push('-');
        }
        if u < SECOND {
            if u == 0 {
                return f.write_str("0s");
            }
            let (divisor, prec, unit) = if u < MICROSECOND {
                (1, 0, "ns")
            } else if u < MILLISECOND {
                (MICROSECOND, 3, "µs")
            } else {
                (MILLISECOND, 6, "ms")
            };
            push_fraction(&mut out, u / divisor, u % divisor, prec);
            out.push_str(unit);
        } else {
            let hours = u / HOUR;
            let minutes = (u / MINUTE) % 60;
            let seconds = (u / SECOND) % 60;
            let nanos = u % SECOND;
            if hours > 0 {
                out.push_str(&format!("{hours}h"));
            }
            if hours > 0 || minutes > 0 {
                out.push_str(&format!("{minutes}m"));
            }
            push_fraction(&mut out, seconds, nanos, 9);
            out.push('s');
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> i64 {
        match parse_go_duration(s) {
            Ok(d) => d.0,
            Err(e) => panic!("{s:?} should parse, got {e}"),
        }
    }

    const S: i64 = 1_000_000_000;
    const MS: i64 = 1_000_000;
    const US: i64 = 1_000;
    const MIN: i64 = 60 * S;
    const H: i64 = 60 * MIN;

    /// The valid cases of Go's own `parseDurationTests` (src/time/time_test.go).
    #[test]
    fn a_sum_that_wraps_past_two_to_the_64_keeps_gos_result() {
        // 1<<63 + 1<<63 wraps to 0 in Go's uint64 sum; the trailing 1s is what remains.
        assert_eq!(
            ok("9223372036854775808ns9223372036854775808ns1s"),
            1_000_000_000
        );
    }

    #[test]
    fn go_valid_cases() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600 * MS),
            ("5.s", 5 * S),
            (".5s", 500 * MS),
            ("1.0s", S),
            ("1.00s", S),
            ("1.004s", S + 4 * MS),
            ("1.0040s", S + 4 * MS),
            ("100.00100s", 100 * S + MS),
            ("10ns", 10),
            ("11us", 11 * US),
            ("12µs", 12 * US),
            ("12μs", 12 * US),
            ("13ms", 13 * MS),
            ("14s", 14 * S),
            ("15m", 15 * MIN),
            ("16h", 16 * H),
            ("3h30m", 3 * H + 30 * MIN),
            ("10.5s4m", 4 * MIN + 10 * S + 500 * MS),
            ("-2m3.4s", -(2 * MIN + 3 * S + 400 * MS)),
            ("1h2m3s4ms5us6ns", H + 2 * MIN + 3 * S + 4 * MS + 5 * US + 6),
            ("39h9m14.425s", 39 * H + 9 * MIN + 14 * S + 425 * MS),
            ("52763797000ns", 52763797000),
            ("0.3333333333333333333h", 20 * MIN),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("-9223372036s854ms775us808ns", i64::MIN),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * MIN),
            ("0.830103483285477580700h", 49 * MIN + 48 * S + 372539827),
        ];
        for &(input, want) in cases {
            assert_eq!(ok(input), want, "{input:?}");
        }
    }

    /// The invalid cases of Go's `parseDurationErrorTests`, with Go's exact messages.
    #[test]
    fn go_invalid_cases() {
        let cases: &[(&str, &str)] = &[
            ("", r#"time: invalid duration """#),
            ("3", r#"time: missing unit in duration "3""#),
            ("-", r#"time: invalid duration "-""#),
            ("s", r#"time: invalid duration "s""#),
            (".", r#"time: invalid duration ".""#),
            ("-.", r#"time: invalid duration "-.""#),
            (".s", r#"time: invalid duration ".s""#),
            ("+.s", r#"time: invalid duration "+.s""#),
            ("1d", r#"time: unknown unit "d" in duration "1d""#),
            (
                "9223372036854775808ns",
                r#"time: invalid duration "9223372036854775808ns""#,
            ),
            (
                "9223372036854775.808us",
                r#"time: invalid duration "9223372036854775.808us""#,
            ),
            (
                "9223372036854ms775us808ns",
                r#"time: invalid duration "9223372036854ms775us808ns""#,
            ),
            (
                "-9223372036854775809ns",
                r#"time: invalid duration "-9223372036854775809ns""#,
            ),
            (
                "9223372036s854ms775us808ns",
                r#"time: invalid duration "9223372036s854ms775us808ns""#,
            ),
        ];
        for &(input, want) in cases {
            let err = parse_go_duration(input).expect_err(input);
            assert_eq!(err.to_string(), want, "{input:?}");
        }
    }

    /// The examples the ip-masq-agent contract names explicitly.
    #[test]
    fn resync_interval_examples() {
        assert_eq!(ok("1m30s"), 90 * S);
        assert_eq!(ok("500ms"), 500 * MS);
        assert_eq!(ok("1.5h"), 90 * MIN);
        assert_eq!(ok("2562047h"), 2562047 * H);
        assert!(parse_go_duration("2562048h").is_err());
        for bad in ["60", "1min", "1d", " 1s", "1s ", "1 s", "1S", "1sec"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn non_ascii_units_are_quoted_like_go() {
        let err = parse_go_duration("1é").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"time: unknown unit "\xc3\xa9" in duration "1\xc3\xa9""#
        );
    }

    #[test]
    fn display_matches_go_duration_string() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1100, "1.1µs"),
            (2200 * US, "2.2ms"),
            (3300 * MS, "3.3s"),
            (4 * MIN + 5 * S, "4m5s"),
            (4 * MIN + 5001 * MS, "4m5.001s"),
            (5 * H + 6 * MIN + 7001 * MS, "5h6m7.001s"),
            (8 * MIN + 1, "8m0.000000001s"),
            (60 * S, "1m0s"),
            (H, "1h0m0s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (-1500 * MS, "-1.5s"),
        ];
        for &(nanos, want) in cases {
            assert_eq!(GoDuration(nanos).to_string(), want);
        }
    }

    #[test]
    fn round_trips_through_display() {
        for s in ["1m30s", "500ms", "1h30m0s", "2562047h0m0s", "1.5µs", "7ns"] {
            let d = parse_go_duration(s).unwrap();
            assert_eq!(parse_go_duration(&d.to_string()).unwrap(), d);
        }
    }
}
