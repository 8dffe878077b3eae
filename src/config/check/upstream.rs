//! Inputs ipmasq reads but upstream ip-masq-agent rejects. Upstream hands a file whose first
//! non-space character is `{` straight to Go's `encoding/json` (apimachinery's `yaml.ToJSON`
//! passes such a file through unchanged), so a YAML flow map (`{nonMasqueradeCIDRs: [...]}`),
//! a trailing comma or a comment there fails to load; ipmasq reads it as the YAML it is. A
//! fleet that may roll back to upstream would install no rules from it, hence the warning.

use super::super::diagnostic::{Code, Diagnostic};
use super::super::yaml::Location;

/// A warning when `text` starts like JSON (as Go's `unicode.IsSpace` and apimachinery see it)
/// but is not strict JSON, placed where a JSON parser stops.
pub(super) fn strict_json_warning(text: &str) -> Option<Diagnostic> {
    if !text
        .trim_start_matches(char::is_whitespace)
        .starts_with('{')
    {
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
