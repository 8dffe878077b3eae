//! The decoders of the pod share: `podConnectionLimit`, `podNewConnectionRate`,
//! `podNewConnectionBurst` and `podNewConnectionRatePerDestination`, each with its findings,
//! and the share they make together.

use super::decode::{decode_bool, decode_int, wrong_type, IntValue};
use super::keys::{
    Assigned, KEY_POD_CONNECTION_LIMIT, KEY_POD_NEW_CONNECTION_BURST, KEY_POD_NEW_CONNECTION_RATE,
    KEY_POD_RATE_PER_DESTINATION,
};
use crate::config::diagnostic::{push_finding, Code, Diagnostic};
use crate::config::pod_share::{
    default_burst, parse_rate, NewConnectionRate, PodShare, MAX_CONNECTION_LIMIT, MAX_RATE,
};
use crate::config::yaml::Resolved;

/// The four keys' assignments, as the document gave them.
pub(super) struct ShareKeys<'g, 'a> {
    pub limit: Option<&'g Assigned<'a>>,
    pub rate: Option<&'g Assigned<'a>>,
    pub burst: Option<&'g Assigned<'a>>,
    pub per_destination: Option<&'g Assigned<'a>>,
}

/// The share the keys make; a refused value leaves its part unlimited (the config is refused
/// anyway, so nothing is enforced from it).
pub(super) fn decode_share(keys: &ShareKeys, diags: &mut Vec<Diagnostic>) -> PodShare {
    let connection_limit = keys.limit.and_then(|a| {
        decode_count(
            a,
            KEY_POD_CONNECTION_LIMIT,
            MAX_CONNECTION_LIMIT,
            "512",
            diags,
        )
    });
    let burst = keys
        .burst
        .and_then(|a| decode_count(a, KEY_POD_NEW_CONNECTION_BURST, MAX_RATE, "20", diags));
    let per_destination = keys.per_destination.and_then(|a| decode_bool(a, diags));
    // A null rate is no rate: what shapes it is refused as without one.
    let rate = keys
        .rate
        .filter(|a| a.value.as_scalar().map(|s| s.resolve()) != Some(Resolved::Null));
    let Some(rate_key) = rate else {
        for (given, key) in [
            (
                keys.burst.map(|a| a.key.location),
                KEY_POD_NEW_CONNECTION_BURST,
            ),
            (
                keys.per_destination.map(|a| a.key.location),
                KEY_POD_RATE_PER_DESTINATION,
            ),
        ] {
            if let Some(location) = given {
                push_finding(
                    diags,
                    Diagnostic::error(
                        Code::PodShareWithoutRate,
                        format!("`{key}` is given without `{KEY_POD_NEW_CONNECTION_RATE}`, so it limits nothing"),
                    )
                    .at(location)
                    .hint(format!("add `{KEY_POD_NEW_CONNECTION_RATE}: \"200/s\"` (new connections a second per pod), or delete `{key}`")),
                );
            }
        }
        return PodShare {
            connection_limit,
            new_connection_rate: None,
        };
    };
    let new_connection_rate = decode_rate(rate_key, diags).map(|per_second| NewConnectionRate {
        per_second,
        burst: burst.unwrap_or(default_burst(per_second)),
        per_destination: per_destination.unwrap_or(false),
    });
    PodShare {
        connection_limit,
        new_connection_rate,
    }
}

/// A whole number from 1 to `max`; null leaves the part unlimited.
fn decode_count(
    a: &Assigned,
    key: &str,
    max: u32,
    example: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<u32> {
    match decode_int(a.value) {
        IntValue::Absent => None,
        IntValue::Int(v) if (1..=i64::from(max)).contains(&v) => Some(v as u32),
        IntValue::Int(v) => {
            push_finding(
                diags,
                Diagnostic::error(
                    Code::PodShareOutOfRange,
                    format!("`{key}` must be from 1 to {max}, got {v}"),
                )
                .at(a.value.location)
                .hint(format!(
                    "write a count, e.g. `{key}: {example}`; delete the key for no limit"
                )),
            );
            None
        }
        IntValue::Invalid => {
            push_finding(
                diags,
                wrong_type(a, "a whole number")
                    .hint(format!("write a count, e.g. `{key}: {example}`")),
            );
            None
        }
    }
}

/// `podNewConnectionRate`: `"<count>/s"`; null leaves the rate unlimited.
fn decode_rate(a: &Assigned, diags: &mut Vec<Diagnostic>) -> Option<u32> {
    let key = KEY_POD_NEW_CONNECTION_RATE;
    let Some(text) = a.value.as_str() else {
        if a.value.as_scalar().map(|s| s.resolve()) == Some(Resolved::Null) {
            return None;
        }
        push_finding(
            diags,
            wrong_type(a, "a rate string").hint(format!("write `{key}: \"200/s\"`")),
        );
        return None;
    };
    match parse_rate(text) {
        Ok(rate) => Some(rate),
        Err(err) => {
            let code = match err {
                crate::config::pod_share::RateError::Syntax => Code::WrongType,
                crate::config::pod_share::RateError::OutOfRange => Code::PodShareOutOfRange,
            };
            push_finding(
                diags,
                Diagnostic::error(code, format!("`{key}: {text}` {err}"))
                    .at(a.value.location)
                    .hint(format!(
                        "write new connections a second per pod, e.g. `{key}: \"200/s\"` (at most {MAX_RATE}/s)"
                    )),
            );
            None
        }
    }
}
