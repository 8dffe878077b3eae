//! Inputs ipmasq reads but upstream ip-masq-agent rejects. Upstream hands a file whose first
//! non-space character is `{` straight to Go's `encoding/json` (apimachinery's `yaml.ToJSON`
//! passes such a file through unchanged), so a YAML flow map (`{nonMasqueradeCIDRs: [...]}`),
//! a trailing comma or a comment there fails to load, and so does a `cidrLimit` written with a
//! fraction or an exponent (`64.0`, `1e2`: Go's `int` takes only an integer literal); ipmasq
//! reads it as the YAML it is, where those are the integers they equal (so does upstream, for a
//! file that does not start with `{`). A fleet that may roll back to upstream would install no
//! rules from it, hence the warning.

use super::super::diagnostic::{Code, Diagnostic};
use super::super::yaml::{Location, Resolved, YamlNode};
use super::decode::{decode_int, IntValue};
use super::keys::{key_text, Field, KEY_CIDR_LIMIT};

/// Whether upstream decodes `text` as JSON rather than YAML: apimachinery's `hasJSONPrefix`,
/// `bytes.HasPrefix(bytes.TrimLeftFunc(buf, unicode.IsSpace), "{")`, on the file's bytes as
/// they are. Go's `unicode.IsSpace` is Unicode's White_Space, as Rust's `char::is_whitespace`;
/// a byte order mark (U+FEFF) is not white space, so a file starting with one goes to yaml.v2,
/// which drops it and reads the `{` as YAML.
pub(super) fn takes_json_path(text: &str) -> bool {
    text.trim_start_matches(char::is_whitespace)
        .starts_with('{')
}

/// A warning when `text` takes upstream's JSON path but is not strict JSON, placed where a
/// JSON parser stops.
pub(super) fn strict_json_warning(text: &str) -> Option<Diagnostic> {
    if !takes_json_path(text) {
        return None;
    }
    let err = serde_json::from_str::<serde::de::IgnoredAny>(text).err()?;
    // Go's decoder nests 10,000 levels deep; serde_json stops at 128. Deeper than that is no
    // evidence either way, so say nothing.
    if err.to_string().contains("recursion limit") {
        return None;
    }
    let location = location_of(text, err.line(), err.column());
    let reason = err.to_string();
    let reason = reason
        .rsplit_once(" at line ")
        .map_or(reason.as_str(), |(head, _)| head);
    Some(
        Diagnostic::warning(
            Code::UpstreamRejects,
            format!(
                "upstream ip-masq-agent reads a file starting with `{{` as strict JSON and would reject this one ({reason}); ipmasq reads it as YAML"
            ),
        )
        .at(location)
        .hint("write it as block YAML (`nonMasqueradeCIDRs:` then `  - 10.0.0.0/8` lines) or as strict JSON (quoted keys, no trailing comma, no comments), so a node rolled back to upstream keeps its rules"),
    )
}

/// Warnings for the integer keys of a file that takes upstream's JSON path: there Go's
/// `encoding/json` stores a number into `cidrLimit` (an `int`) with `strconv.ParseInt(literal,
/// 10, 64)`, so `64.0` or `1e2` fails the whole load, though YAML (ipmasq, and upstream for a
/// file not starting with `{`) reads it as 64 or 100. Every occurrence counts: Go decodes each
/// duplicate and fails on any. Values ipmasq itself rejects are its own errors already.
pub(super) fn json_integer_warnings(text: &str, root: &YamlNode) -> Vec<Diagnostic> {
    if !takes_json_path(text) {
        return Vec::new();
    }
    let Some(entries) = root.as_mapping() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|(key, _)| key_text(key).and_then(Field::from_key) == Some(Field::CidrLimit))
        .filter_map(|(key, value)| {
            let scalar = value.as_scalar()?;
            if !matches!(scalar.resolve(), Resolved::Float(_)) {
                return None;
            }
            let IntValue::Int(equal) = decode_int(value) else {
                return None;
            };
            let key = key_text(key).unwrap_or(KEY_CIDR_LIMIT);
            Some(
                Diagnostic::warning(
                    Code::UpstreamRejects,
                    format!(
                        "upstream ip-masq-agent reads a file starting with `{{` as strict JSON, where `{key}` must be an integer literal: `{}` fails the whole load (cannot unmarshal number {} into Go's int); ipmasq reads it as YAML, as {equal}",
                        scalar.text, scalar.text
                    ),
                )
                .at(value.location)
                .hint(format!("write `{equal}`, so a node rolled back to upstream keeps its rules")),
            )
        })
        .collect()
}

/// The [`Location`] of serde_json's 1-based line and byte column (0 at the very end).
fn location_of(text: &str, line: usize, column: usize) -> Location {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let line_text = text[line_start..].split('\n').next().unwrap_or("");
    let mut within = column.saturating_sub(1).min(line_text.len());
    while !line_text.is_char_boundary(within) {
        within -= 1;
    }
    let offset = line_start + within;
    let end_offset = line_text[within..]
        .chars()
        .next()
        .map_or(offset, |c| offset + c.len_utf8());
    Location {
        line: line.max(1),
        column: line_text[..within].chars().count() + 1,
        offset,
        end_offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_flow_map_is_flagged_at_its_first_unquoted_key() {
        let d = strict_json_warning("{nonMasqueradeCIDRs: [10.0.0.0/8]}\n").expect("warning");
        assert_eq!(d.code, Code::UpstreamRejects);
        let at = d.location.expect("location");
        assert_eq!((at.line, at.column), (1, 2));
        assert!(d.message.contains("key must be a string"), "{}", d.message);
    }

    #[test]
    fn a_trailing_comma_is_flagged_where_json_stops() {
        let text = "{\n  \"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"],\n}\n";
        let at = strict_json_warning(text)
            .expect("warning")
            .location
            .expect("location");
        assert_eq!(at.line, 3);
        assert_eq!(&text[at.offset..at.end_offset], "}");
    }

    #[test]
    fn strict_json_block_yaml_and_deep_nesting_are_not_flagged() {
        assert!(strict_json_warning("{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"]}").is_none());
        assert!(strict_json_warning(" \n\t{}\n").is_none());
        assert!(strict_json_warning("nonMasqueradeCIDRs: [10.0.0.0/8]\n").is_none());
        assert!(strict_json_warning("# a comment first\n{a: 1}\n").is_none());
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(strict_json_warning(&deep).is_none());
    }

    /// apimachinery's `hasJSONPrefix`: Go's `unicode.IsSpace` (Unicode White_Space) skipped,
    /// then `{`. A byte order mark, a zero-width space or a word joiner is not white space.
    #[test]
    fn the_json_path_is_chosen_as_apimachinery_chooses_it() {
        for json in [
            "{",
            " \t\r\n\u{b}\u{c}{",
            "\u{85}{",
            "\u{a0}{",
            "\u{1680}{",
            "\u{2000}{",
            "\u{200a}{",
            "\u{2028}{",
            "\u{2029}{",
            "\u{202f}{",
            "\u{205f}{",
            "\u{3000}{",
        ] {
            assert!(takes_json_path(json), "{json:?}");
        }
        for yaml in [
            "\u{feff}{",
            "\u{200b}{",
            "\u{2060}{",
            "\u{180e}{",
            "a: {",
            "# c\n{",
            "[{}]",
            "",
        ] {
            assert!(!takes_json_path(yaml), "{yaml:?}");
        }
    }

    fn integer_warnings(text: &str) -> Vec<Diagnostic> {
        let stream = crate::config::yaml::parse_stream(text, crate::config::yaml::Documents::First)
            .expect("parses");
        json_integer_warnings(text, &stream.documents[0])
    }

    /// On the JSON path Go's `int` takes an integer literal only: `strconv.ParseInt(literal,
    /// 10, 64)`, so `64.0`, `1e2`, `6.4E1`, `100e-2` fail upstream's whole load.
    #[test]
    fn json_numbers_with_a_fraction_or_exponent_for_an_int_are_flagged() {
        for (text, literal, equal) in [
            ("{\"cidrLimit\": 64.0}", "64.0", "64"),
            ("{\"cidrLimit\": 1e2}", "1e2", "100"),
            ("{\"CIDRLimit\": 6.4E1}", "6.4E1", "64"),
            ("\n {\"cidrLimit\": 100e-2}", "100e-2", "1"),
            ("{\"cidrLimit\": -0.0}", "-0.0", "0"),
        ] {
            let found = integer_warnings(text);
            assert_eq!(found.len(), 1, "{text}");
            assert_eq!(found[0].code, Code::UpstreamRejects);
            let at = found[0].location.expect("located");
            assert_eq!(&text[at.offset..at.end_offset], literal);
            assert!(
                found[0].message.contains(&format!("as {equal}")),
                "{}",
                found[0].message
            );
        }
        // Every occurrence counts: Go decodes each duplicate and fails on any.
        assert_eq!(
            integer_warnings("{\"cidrLimit\": 1.0, \"cidrLimit\": 64}").len(),
            1
        );
        // Integer literals, null, values ipmasq rejects itself, other keys, the YAML path.
        for quiet in [
            "{\"cidrLimit\": 64}",
            "{\"cidrLimit\": -0}",
            "{\"cidrLimit\": null}",
            "{\"cidrLimit\": 64.5}",
            "{\"cidrLimit\": \"64\"}",
            "{\"other\": 1.0}",
            "cidrLimit: 64.0\n",
            "\u{feff}{\"cidrLimit\": 64.0}",
        ] {
            assert!(integer_warnings(quiet).is_empty(), "{quiet}");
        }
    }

    #[test]
    fn a_comment_and_a_column_after_multibyte_text_are_placed_on_characters() {
        let text = "{\"é\": 1, # note\n}";
        let at = strict_json_warning(text)
            .expect("warning")
            .location
            .expect("location");
        assert_eq!((at.line, at.column), (1, 10));
        assert_eq!(&text[at.offset..at.end_offset], "#");
    }
}
