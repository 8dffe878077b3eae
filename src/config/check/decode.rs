//! One decoder per field: each reads its value as upstream does and reports its own
//! findings (wrong types, empty lists, durations, the legacy `linkLocal`).

use super::keys::{
    key_text, Assigned, KEY_CIDRS, KEY_LEGACY_LINK_LOCAL, KEY_MASQ_LINK_LOCAL, KEY_RESYNC,
};

use crate::config::diagnostic::{cite_line, push_finding, Code, Diagnostic};
use crate::config::duration::{parse_go_duration, GoDuration};
use crate::config::yaml::{Location, Resolved, Value, YamlNode};

/// A list-valued extension key: a list, or null (nothing); `empty` is reported for `[]`.
pub(super) fn decode_list<'a>(
    a: &Assigned<'a>,
    key: &str,
    empty: Option<Diagnostic>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Vec<&'a YamlNode>> {
    match &a.value.value {
        Value::Sequence(items) => {
            if items.is_empty() {
                diags.extend(empty);
            }
            Some(items.iter().collect())
        }
        Value::Scalar(s) if s.resolve() == Resolved::Null => Some(Vec::new()),
        _ => {
            let mut d = wrong_type(a, "a list of CIDR strings");
            if let Some(text) = a.value.as_str() {
                d = d.hint(format!("write it as a list: `{key}: [{text}]`"));
            }
            push_finding(diags, d);
            None
        }
    }
}

/// `nonMasqueradeCIDRs`: a list replaces the defaults; null or [] means an empty list. The
/// entries themselves are checked with the limit, in `check_cidrs`.
pub(super) fn decode_cidr_list<'a>(
    a: &Assigned<'a>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Vec<&'a YamlNode>> {
    match &a.value.value {
        Value::Scalar(s) if s.resolve() == Resolved::Null => {
            push_finding(diags, empty_list_warning(a.key.location));
            Some(Vec::new())
        }
        _ => decode_list(
            a,
            KEY_CIDRS,
            Some(empty_list_warning(a.key.location)),
            diags,
        ),
    }
}

/// `cidrLimit`: an integer; null keeps the default.
pub(super) fn decode_cidr_limit(a: &Assigned, diags: &mut Vec<Diagnostic>) -> Option<i64> {
    match decode_int(a.value) {
        IntValue::Absent => None,
        IntValue::Int(v) => Some(v),
        IntValue::Invalid => {
            push_finding(diags, wrong_type(a, "an integer"));
            None
        }
    }
}

/// non-masquerade-daemon's `linkLocal` (the inverse of `masqLinkLocal`): the value it stands
/// for, unless `masqLinkLocal` is also given (then only a contradiction is reported).
pub(super) fn decode_legacy_link_local(
    a: &Assigned,
    masq_link_local: Option<&Assigned>,
    diags: &mut Vec<Diagnostic>,
) -> Option<bool> {
    let mut note = Diagnostic::warning(
        Code::DeprecatedLinkLocal,
        format!(
            "`{KEY_LEGACY_LINK_LOCAL}` is non-masquerade-daemon's deprecated key (true = do not masquerade link-local)"
        ),
    )
    .at(a.key.location);
    let mut result = None;
    if let Some(non_masq) = decode_bool(a, diags) {
        let replacement = !non_masq;
        note = note.hint(format!(
            "write `{KEY_MASQ_LINK_LOCAL}: {replacement}` instead"
        ));
        match masq_link_local {
            Some(m) => {
                if let Some(masq) = decode_bool(m, &mut Vec::new()) {
                    if masq != replacement {
                        push_finding(diags,
                            Diagnostic::error(
                                Code::LinkLocalConflict,
                                format!(
                                    "`{KEY_LEGACY_LINK_LOCAL}: {non_masq}` contradicts `{KEY_MASQ_LINK_LOCAL}: {masq}` ({})",
                                    cite_line(m.key.location)
                                ),
                            )
                            .cites(Some(m.key.location))
                            .at(a.key.location)
                            .hint(format!("delete `{KEY_LEGACY_LINK_LOCAL}`; `{KEY_MASQ_LINK_LOCAL}` is the supported key")),
                        );
                    }
                }
            }
            None => result = Some(replacement),
        }
    }
    push_finding(diags, note);
    result
}

/// `resyncInterval`: a positive Go duration string.
pub(super) fn decode_resync(a: &Assigned, diags: &mut Vec<Diagnostic>) -> Option<GoDuration> {
    let Some(text) = a.value.as_str() else {
        let got = match a.value.as_scalar() {
            Some(s) if s.resolve() == Resolved::Null => "null".to_string(),
            Some(s) => s.text.clone(),
            None => a.value.kind_name().to_string(),
        };
        let mut d = Diagnostic::error(
            Code::WrongType,
            format!("expected string value for unmarshal to field of type Duration, got {got:?}"),
        )
        .at(a.value.location);
        d = if matches!(
            a.value.as_scalar().map(|s| s.resolve()),
            Some(Resolved::Int(_) | Resolved::Float(_))
        ) {
            d.hint(format!("add a unit: `{KEY_RESYNC}: {got}s`"))
        } else {
            d.hint("write a Go duration such as `60s`")
        };
        push_finding(diags, d);
        return None;
    };
    match parse_go_duration(text) {
        Ok(d) if d.0 > 0 && d < super::super::MIN_RESYNC_INTERVAL => {
            let floor = super::super::MIN_RESYNC_INTERVAL;
            push_finding(diags,
                Diagnostic::warning(
                    Code::ResyncBelowFloor,
                    format!("{KEY_RESYNC} {d} is below the floor of {floor}; {floor} is used"),
                )
                .at(a.value.location)
                .hint(format!(
                    "a pass every {d} would burn a core; write `{floor}` or more (upstream's default is 60s)"
                )),
            );
            Some(floor)
        }
        Ok(d) if d.0 > 0 => Some(d),
        Ok(d) => {
            push_finding(
                diags,
                Diagnostic::error(
                    Code::NonPositiveDuration,
                    format!("{KEY_RESYNC} must be positive, got {d}"),
                )
                .at(a.value.location)
                .hint("use e.g. `60s`; a zero interval would resync in a busy loop"),
            );
            None
        }
        Err(err) => {
            push_finding(diags,
                Diagnostic::error(Code::InvalidDuration, err.to_string())
                    .at(a.value.location)
                    .hint("write a Go duration: a number and a unit (ns, us, ms, s, m, h), e.g. `60s`, `1m30s`"),
            );
            None
        }
    }
}

pub(super) fn empty_list_warning(location: Location) -> Diagnostic {
    Diagnostic::warning(
        Code::EmptyCidrList,
        format!("`{KEY_CIDRS}` is empty: all traffic except link-local will be masqueraded, even to pod and node ranges"),
    )
    .at(location)
    .hint("list your cluster's pod, service and node ranges, or remove the key to use the RFC 1918 defaults")
}

pub(super) fn wrong_type(a: &Assigned, expected: &str) -> Diagnostic {
    Diagnostic::error(
        Code::WrongType,
        format!(
            "`{}` must be {expected}, got {}",
            key_text(a.key).unwrap_or_default(),
            a.value.kind_name()
        ),
    )
    .at(a.value.location)
}

pub(super) enum IntValue {
    Absent,
    Int(i64),
    Invalid,
}

/// Go's `int` as upstream's YAML path fills it: integers, and floats with no fractional part
/// (sigs.k8s.io/yaml marshals yaml.v2's float 64.0 as the JSON number `64`, and `1e16` as
/// `10000000000000000`: Go's `encoding/json` writes every float under 1e21 without an
/// exponent, and `strconv.ParseInt` takes it when it fits 64 bits); null leaves the default.
/// (A file on the JSON path takes only integer literals: `json_integer_warnings`.)
pub(super) fn decode_int(node: &YamlNode) -> IntValue {
    /// 2^63: the first float `ParseInt` refuses as out of range.
    const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;
    match node.as_scalar().map(|s| s.resolve()) {
        Some(Resolved::Null) => IntValue::Absent,
        Some(Resolved::Int(v)) => i64::try_from(v).map_or(IntValue::Invalid, IntValue::Int),
        Some(Resolved::Float(f))
            if f.is_finite() && f.fract() == 0.0 && (-TWO_TO_63..TWO_TO_63).contains(&f) =>
        {
            IntValue::Int(f as i64)
        }
        _ => IntValue::Invalid,
    }
}

/// A boolean; null keeps the default (None), and so does a wrong value (reported).
pub(super) fn decode_bool(a: &Assigned, diags: &mut Vec<Diagnostic>) -> Option<bool> {
    let Some(scalar) = a.value.as_scalar() else {
        push_finding(diags, wrong_type(a, "true or false"));
        return None;
    };
    match scalar.resolve() {
        Resolved::Null => None,
        Resolved::Bool(v) => {
            if scalar.is_yaml11_only_bool() {
                push_finding(
                    diags,
                    Diagnostic::warning(
                        Code::Yaml11Boolean,
                        format!("`{}` is read as {v} (a YAML 1.1 boolean)", scalar.text),
                    )
                    .at(a.value.location)
                    .hint(format!(
                        "write `{v}`; YAML 1.2 tools read `{}` as a string",
                        scalar.text
                    )),
                );
            }
            Some(v)
        }
        Resolved::Str => {
            let mut d = wrong_type(a, "true or false");
            if matches!(
                scalar.text.to_lowercase().as_str(),
                "true" | "false" | "yes" | "no"
            ) {
                d = d.hint(format!("remove the quotes: `{}`", scalar.text));
            }
            push_finding(diags, d);
            None
        }
        _ => {
            push_finding(diags, wrong_type(a, "true or false"));
            None
        }
    }
}
