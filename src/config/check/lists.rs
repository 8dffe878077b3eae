//! The CIDR lists: parsed and aligned, against `cidrLimit` and the flags, overlaps and
//! repeats reported, and the checks that need every list at once.

use super::keys::{KEY_CIDRS, KEY_CIDR_LIMIT, KEY_FORCE, KEY_SOURCES};

use crate::config::cidr::{has_padded_prefix, parse_cidr, CidrError};
use crate::config::diagnostic::{push_finding, Code, Diagnostic};
use crate::config::yaml::{Location, Node, Resolved, Value};
use crate::config::{default_cidrs, Config, ListName, Options, Place};
use ipnet::IpNet;

/// The entries of a list with repeats dropped (the first place of each kept), for the lists
/// whose order and repeats write nothing of their own.
pub(super) fn dedup(nets: impl Iterator<Item = IpNet>, places: &mut Vec<Place>) -> Vec<IpNet> {
    let mut seen = std::collections::HashSet::new();
    let mut kept_places = Vec::new();
    let mut out = Vec::new();
    for (i, net) in nets.enumerate() {
        if seen.insert(net) {
            out.push(net);
            kept_places.push(places.get(i).cloned().unwrap_or_default());
        }
    }
    *places = kept_places;
    out
}

/// The checks that need every list at once (of one file, or of a merged directory):
/// a CIDR both forced and kept is an error naming both places; a forced CIDR that no
/// non-masquerade range holds changes nothing and is reported; a source list without a range
/// of a managed family leaves that family unscoped.
pub(in crate::config) fn check_across_lists(
    config: &Config,
    options: &Options,
    diags: &mut Vec<Diagnostic>,
) {
    let at = |d: Diagnostic, place: &Place| {
        let d = d.at_opt(place.location);
        match &place.file {
            Some(file) => d.in_file(file.clone()),
            None => d,
        }
    };
    let kept: std::collections::HashMap<IpNet, usize> = config
        .non_masquerade_cidrs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, n)| (*n, i))
        .collect();
    for (i, forced) in config.force_masquerade_cidrs.iter().enumerate() {
        let place = config.place(ListName::Force, i);
        if let Some(&k) = kept.get(forced) {
            let other = config.place(ListName::NonMasquerade, k);
            push_finding(diags, at(
                Diagnostic::error(
                    Code::ForcedAndKept,
                    format!(
                        "{forced} is in {KEY_FORCE} and also in {KEY_CIDRS} ({other}): it cannot be both masqueraded and kept"
                    ),
                ),
                &place,
            )
            .hint("delete it from one of the lists; to masquerade part of a range, force a narrower CIDR"));
            continue;
        }
        let link_local_kept = match forced {
            IpNet::V4(_) => !config.masq_link_local,
            IpNet::V6(_) => !config.masq_link_local_ipv6,
        };
        let family_link_local: IpNet = match forced {
            IpNet::V4(_) => super::super::LINK_LOCAL_V4.parse().expect("constant"),
            IpNet::V6(_) => super::super::LINK_LOCAL_V6.parse().expect("constant"),
        };
        let inside_kept = config
            .non_masquerade_cidrs
            .iter()
            .any(|k| k.contains(forced) && k != forced)
            || (link_local_kept && family_link_local.contains(forced));
        if !inside_kept {
            push_finding(diags, at(
                Diagnostic::warning(
                    Code::ForcedWithoutEffect,
                    format!(
                        "{forced} lies in no non-masquerade range: it is masqueraded anyway, so forcing it changes nothing"
                    ),
                ),
                &place,
            )
            .hint(format!("delete it, or add the range it belongs to to {KEY_CIDRS}")));
        }
    }
    if !config.masquerade_source_cidrs.is_empty() {
        let families: &[(&str, bool)] = if options.enable_ipv6 {
            &[("IPv4", false), ("IPv6", true)]
        } else {
            &[("IPv4", false)]
        };
        for (name, v6) in families {
            if !config
                .masquerade_source_cidrs
                .iter()
                .any(|n| n.addr().is_ipv6() == *v6)
            {
                push_finding(diags, at(
                    Diagnostic::warning(
                        Code::SourceFamilyUnscoped,
                        format!(
                            "{KEY_SOURCES} has no {name} range: {name} traffic from every source is considered, as upstream does"
                        ),
                    ),
                    &config.place(ListName::Sources, 0),
                )
                .hint(format!("add your {name} pod range to scope {name} as well")));
            }
        }
    }
}

/// The CIDR list (the file's, or the defaults when it has none) against `cidrLimit` (which
/// also counts the `forced` entries: each writes a rule) and the flags: upstream's limit
/// first, then every entry; returns the entries that parsed, with where they were written.
pub(super) fn check_cidrs(
    nodes: Option<&[&Node]>,
    cidr_limit: i64,
    limit_location: Option<Location>,
    forced: usize,
    options: &Options,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(IpNet, Option<Location>)> {
    let count = nodes.map_or_else(|| default_cidrs(options).len(), <[&Node]>::len);
    if !options.merging {
        check_cidr_limit(count, forced, cidr_limit, limit_location, diags);
    }
    match nodes {
        Some(nodes) => {
            let parsed = parse_cidr_nodes(nodes, KEY_CIDRS, options, diags);
            overlap_warnings(&parsed, diags);
            parsed
        }
        None => default_cidrs(options)
            .into_iter()
            .map(|c| (c, None))
            .collect(),
    }
}

/// Upstream's `cidrLimit` check (with the forced CIDRs counted, when there are any).
pub(in crate::config) fn check_cidr_limit(
    count: usize,
    forced: usize,
    cidr_limit: i64,
    limit_location: Option<Location>,
    diags: &mut Vec<Diagnostic>,
) {
    let total = count + forced;
    if cidr_limit < 0 {
        push_finding(
            diags,
            Diagnostic::error(
                Code::NegativeCidrLimit,
                format!("{KEY_CIDR_LIMIT} must not be negative, got {cidr_limit}"),
            )
            .at_opt(limit_location)
            .hint(format!(
                "remove it to use the default of {}",
                super::super::DEFAULT_CIDR_LIMIT
            )),
        );
    } else if total as i64 > cidr_limit {
        let counted = if forced > 0 {
            format!(" ({count} in {KEY_CIDRS} and {forced} in {KEY_FORCE}: each writes a rule)")
        } else {
            String::new()
        };
        push_finding(diags,
            Diagnostic::error(
                Code::CidrLimitExceeded,
                format!(
                    "the daemon can only accept up to {cidr_limit} CIDRs (excluding link-local), but got {total} CIDRs (excluding link local){counted}"
                ),
            )
            .at_opt(limit_location)
            .hint(format!(
                "raise `{KEY_CIDR_LIMIT}` to at least {total}, or merge CIDRs; long lists are fine with `--backend nftables` (one set lookup per new connection, however long the list), while iptables walks one rule per CIDR"
            )),
        );
    }
}

/// Every entry of a CIDR list: a string that parses as an aligned CIDR of an enabled family.
pub(super) fn parse_cidr_nodes(
    nodes: &[&Node],
    key: &str,
    options: &Options,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(IpNet, Option<Location>)> {
    let mut written: Vec<(String, Option<Location>)> = Vec::new();
    for node in nodes {
        match &node.value {
            Value::Scalar(s) if s.resolve() == Resolved::Str => {
                written.push((s.text.clone(), Some(node.location)))
            }
            // Go unmarshals null into "" and then fails to parse it.
            Value::Scalar(s) if s.resolve() == Resolved::Null => {
                written.push((String::new(), Some(node.location)))
            }
            _ => push_finding(
                diags,
                Diagnostic::error(
                    Code::WrongType,
                    format!(
                        "each {key} entry must be a CIDR string, got {}",
                        node.kind_name()
                    ),
                )
                .at(node.location)
                .hint("quote it if it is meant as text, e.g. \"10.0.0.0/8\""),
            ),
        }
    }
    let mut parsed: Vec<(IpNet, Option<Location>)> = Vec::with_capacity(written.len());
    for (text, location) in &written {
        match parse_cidr(text) {
            Ok(net) => {
                if has_padded_prefix(text) {
                    push_finding(
                        diags,
                        Diagnostic::warning(
                            Code::PaddedPrefix,
                            format!("prefix length of {text:?} has a leading zero"),
                        )
                        .at_opt(*location)
                        .hint(format!("write {net}")),
                    );
                }
                if net.addr().is_ipv6() && !options.enable_ipv6 {
                    push_finding(diags,
                        Diagnostic::error(
                            Code::Ipv6NotEnabled,
                            format!(
                                "ipv6 is not enabled, but ipv6 cidr {text} provided. Enable ipv6 using --enable-ipv6 agent flag"
                            ),
                        )
                        .at_opt(*location)
                        .hint("pass --enable-ipv6 (to the agent and to validate), or remove the IPv6 CIDR"),
                    );
                }
                parsed.push((net, *location));
            }
            Err(err) => {
                let (code, hint) = match &err {
                    CidrError::NotAligned { network, .. } => {
                        (Code::CidrNotAligned, format!("did you mean {network}?"))
                    }
                    CidrError::Ipv4Mapped { ipv4, .. } => {
                        (Code::Ipv4MappedCidr, format!("did you mean {ipv4}?"))
                    }
                    CidrError::Unparsable { .. } => (
                        Code::InvalidCidr,
                        "write an address and a prefix length, e.g. 10.0.0.0/8 or fd00::/8"
                            .to_string(),
                    ),
                };
                push_finding(
                    diags,
                    Diagnostic::error(code, err.to_string())
                        .at_opt(*location)
                        .hint(hint),
                );
            }
        }
    }
    parsed
}

/// Warns about exact duplicates and about CIDRs inside another listed CIDR. Sorting makes this
/// O(n log n): CIDR blocks either nest or are disjoint, so a stack of open blocks suffices.
pub(super) fn overlap_warnings(parsed: &[(IpNet, Option<Location>)], diags: &mut Vec<Diagnostic>) {
    let mut order: Vec<usize> = (0..parsed.len()).collect();
    order.sort_by(|&a, &b| {
        let (na, nb) = (&parsed[a].0, &parsed[b].0);
        (na.addr().is_ipv6(), na.network(), na.prefix_len(), a).cmp(&(
            nb.addr().is_ipv6(),
            nb.network(),
            nb.prefix_len(),
            b,
        ))
    });
    let mut found: Vec<(usize, Diagnostic)> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut previous: Option<usize> = None;
    for &i in &order {
        let net = parsed[i].0;
        if let Some(p) = previous.filter(|&p| parsed[p].0 == net) {
            found.push((
                i,
                Diagnostic::warning(
                    Code::DuplicateCidr,
                    format!("{net} is listed more than once{}", line_of(parsed[p].1)),
                )
                .at_opt(parsed[i].1)
                .hint("delete the repeated entry; each one costs a rule"),
            ));
            continue;
        }
        while let Some(&top) = open.last() {
            if parsed[top].0.contains(&net) {
                break;
            }
            open.pop();
        }
        if let Some(&outer) = open.last() {
            found.push((
                i,
                Diagnostic::warning(
                    Code::CoveredCidr,
                    format!(
                        "{net} is already covered by {}{}",
                        parsed[outer].0,
                        line_of(parsed[outer].1)
                    ),
                )
                .at_opt(parsed[i].1)
                .hint("delete the narrower entry; it never matches first"),
            ));
        }
        open.push(i);
        previous = Some(i);
    }
    found.sort_by_key(|(i, _)| *i);
    diags.extend(found.into_iter().map(|(_, d)| d));
}

pub(super) fn line_of(location: Option<Location>) -> String {
    location.map_or(String::new(), |l| format!(" (line {})", l.line))
}
