//! Decoders of the egress keys: `outputAddress`, `outputAddressIPv6` (one string each) and
//! `outputInterfaces` (a list of interface names or patterns), with their findings.

use super::decode::{decode_list, wrong_type};
use super::keys::{Assigned, KEY_OUTPUT_ADDRESS, KEY_OUTPUT_ADDRESS_V6, KEY_OUTPUT_INTERFACES};
use crate::config::diagnostic::{push_finding, Code, Diagnostic};
use crate::config::egress::{EgressTarget, InterfacePattern, MAX_OUTPUT_INTERFACES};
use crate::config::yaml::Resolved;

/// `outputAddress` (`v6` false) or `outputAddressIPv6`: an address or prefix of the key's
/// family; null leaves it unset. `ipv6_managed` tells whether the IPv6 one has any effect.
pub(super) fn decode_output_address(
    a: &Assigned,
    v6: bool,
    ipv6_managed: bool,
    diags: &mut Vec<Diagnostic>,
) -> Option<EgressTarget> {
    let key = if v6 {
        KEY_OUTPUT_ADDRESS_V6
    } else {
        KEY_OUTPUT_ADDRESS
    };
    let text = match a.value.as_scalar() {
        Some(s) if s.resolve() == Resolved::Null => return None,
        Some(s) if s.resolve() == Resolved::Str => s.text.as_str(),
        _ => {
            push_finding(
                diags,
                wrong_type(a, "an address or CIDR prefix string").hint(format!(
                    "e.g. `{key}: {}`",
                    if v6 { "2001:db8::/64" } else { "10.0.0.0/24" }
                )),
            );
            return None;
        }
    };
    let invalid = |message: String| {
        Diagnostic::error(Code::InvalidOutputAddress, message).at(a.value.location)
    };
    let target = match EgressTarget::parse(text) {
        Ok(target) => target,
        Err(reason) => {
            push_finding(diags, invalid(format!("{key}: {reason}")).hint(
                "write one address (`10.0.0.5`) or a prefix meaning this node's address inside it (`10.0.0.0/24`)",
            ));
            return None;
        }
    };
    if target.is_ipv6() != v6 {
        let (other, family) = if v6 {
            (KEY_OUTPUT_ADDRESS, "an IPv4")
        } else {
            (KEY_OUTPUT_ADDRESS_V6, "an IPv6")
        };
        push_finding(
            diags,
            invalid(format!("{key} holds {family} value {text:?}"))
                .hint(format!("write it under `{other}`")),
        );
        return None;
    }
    if v6 && !ipv6_managed {
        push_finding(
            diags,
            Diagnostic::warning(
                Code::OutputAddressUnused,
                format!("{key} has no effect: IPv6 is not managed"),
            )
            .at(a.key.location)
            .hint("set enableIPv6: true (or pass --enable-ipv6), or remove the key"),
        );
    }
    Some(target)
}

/// `outputInterfaces`: a list of names or patterns, sorted and without repeats; an entry inside
/// another listed pattern is reported (it adds nothing). Null or [] leaves it unscoped.
// Long: a list's decode, its per-entry checks and the covered-entry pass report against the
// same entries and locations, in the order a reader meets them in the file.
pub(super) fn decode_output_interfaces(
    a: &Assigned,
    diags: &mut Vec<Diagnostic>,
) -> Option<Vec<InterfacePattern>> {
    let empty = Diagnostic::warning(
        Code::EmptyInterfaceList,
        format!("`{KEY_OUTPUT_INTERFACES}` is empty: traffic leaving every interface is considered, as without the key"),
    )
    .at(a.key.location)
    .hint("list the node's uplink interfaces (e.g. [eth0] or [eth+]), or remove the key");
    if let Some(text) = a.value.as_str() {
        push_finding(
            diags,
            wrong_type(a, "a list of interface names").hint(format!(
                "write it as a list: `{KEY_OUTPUT_INTERFACES}: [{text}]`"
            )),
        );
        return None;
    }
    let nodes = decode_list(a, KEY_OUTPUT_INTERFACES, Some(empty), diags)?;
    if nodes.len() > MAX_OUTPUT_INTERFACES {
        push_finding(
            diags,
            Diagnostic::error(
                Code::InvalidInterface,
                format!(
                    "{KEY_OUTPUT_INTERFACES} lists {} entries, more than the {MAX_OUTPUT_INTERFACES} allowed",
                    nodes.len()
                ),
            )
            .at(a.key.location)
            .hint("use a wildcard such as `eth+` for a family of interfaces"),
        );
        return None;
    }
    let mut patterns: Vec<(InterfacePattern, crate::config::yaml::Location)> = Vec::new();
    for node in nodes {
        let Some(text) = node
            .as_scalar()
            .filter(|s| s.resolve() == Resolved::Str)
            .map(|s| s.text.as_str())
        else {
            push_finding(
                diags,
                Diagnostic::error(
                    Code::WrongType,
                    format!(
                        "each {KEY_OUTPUT_INTERFACES} entry must be an interface name, got {}",
                        node.kind_name()
                    ),
                )
                .at(node.location)
                .hint("quote it, e.g. \"eth0\""),
            );
            continue;
        };
        match InterfacePattern::parse(text) {
            Ok(pattern) => patterns.push((pattern, node.location)),
            Err(reason) => push_finding(
                diags,
                Diagnostic::error(Code::InvalidInterface, format!("{KEY_OUTPUT_INTERFACES}: {reason}"))
                    .at(node.location)
                    .hint("write a name such as `eth0`, or a prefix with a wildcard such as `eth+` (or `eth*`)"),
            ),
        }
    }
    let mut kept: Vec<InterfacePattern> = Vec::new();
    for (i, (pattern, location)) in patterns.iter().enumerate() {
        let wider = patterns.iter().enumerate().find(|(j, (other, _))| {
            *j != i && pattern.within(other) && (pattern != other || *j < i)
        });
        match wider {
            Some((_, (other, _))) => push_finding(
                diags,
                Diagnostic::warning(
                    Code::CoveredInterface,
                    if other == pattern {
                        format!("{KEY_OUTPUT_INTERFACES} lists {pattern} twice")
                    } else {
                        format!("{KEY_OUTPUT_INTERFACES}: {pattern} is inside {other}, also listed")
                    },
                )
                .at(*location)
                .hint(format!("delete {pattern}")),
            ),
            None => kept.push(pattern.clone()),
        }
    }
    kept.sort();
    Some(kept)
}
