//! The CIDR lists: parsed and aligned, against `cidrLimit` and the flags, overlaps and
//! repeats reported, and the checks that need every list at once.

use super::keys::{KEY_CIDRS, KEY_CIDR_LIMIT, KEY_FORCE, KEY_SOURCES};

use crate::config::cidr::{has_padded_prefix, parse_cidr, CidrError};
use crate::config::diagnostic::{cite_line, push_finding, Code, Diagnostic};
use crate::config::yaml::{Location, Resolved, Value, YamlNode};
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
/// of a managed family leaves that family unscoped; an entry whose deletion changes no verdict
/// is covered.
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
    forced_warnings(config, diags, &at);
    covered_warnings(config, diags, &at);
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
    nodes: Option<&[&YamlNode]>,
    cidr_limit: i64,
    limit_location: Option<Location>,
    forced: usize,
    options: &Options,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(IpNet, Option<Location>)> {
    // In a merge (ip-masq-agent-v2), each file is held to its own limit, as v2 checks each
    // file it reads; a file that lists no CIDRs adds none.
    let count = match (nodes, options.merging) {
        (Some(nodes), _) => nodes.len(),
        (None, true) => 0,
        (None, false) => default_cidrs(options).len(),
    };
    let before = diags.len();
    check_cidr_limit(count, forced, cidr_limit, limit_location, diags);
    if let Some(over) = diags
        .get_mut(before)
        .filter(|d| options.merging && d.code == Code::CidrLimitExceeded)
    {
        over.message.push_str(
            " in this file (as ip-masq-agent-v2, each file is limited, never the merged list)",
        );
        over.hint = Some(format!(
            "move some CIDRs into another `ip-masq*` file (v2 allows 64 in each and reads no `{KEY_CIDR_LIMIT}`), or raise `{KEY_CIDR_LIMIT}` in this file for ipmasq alone"
        ));
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
fn check_cidr_limit(
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

/// The error for a null entry (`[10.0.0.0/8, ~]`), saying what upstream makes of it. Go's
/// `encoding/json` decodes a JSON array into the slice already there element by element, and
/// null into a string leaves it as it was: upstream (v1) decodes into its defaults, so a null
/// where a default stands keeps that default, and one past them is `""`, which fails its CIDR
/// check; ip-masq-agent-v2 decodes every file into an empty config, so it is always `""`.
/// ipmasq rejects every null entry: a list that silently holds a CIDR nobody wrote there is
/// not a config to guess at.
fn null_entry(key: &str, index: usize, options: &Options) -> Diagnostic {
    let position = index + 1;
    let kept = (key == KEY_CIDRS && !options.merging)
        .then(|| default_cidrs(options).get(index).copied())
        .flatten();
    let (upstream, hint) = match kept {
        Some(default) => (
            format!("upstream ip-masq-agent keeps its default {default} there (Go decodes the list over its defaults, and null leaves an element as it was)"),
            format!("write the CIDR you mean there (`{default}` is what upstream used), or delete the entry"),
        ),
        None if key == KEY_CIDRS => (
            "upstream ip-masq-agent reads it as \"\" and rejects the file (CIDR \"\" could not be parsed)".to_string(),
            "write the CIDR you mean there, or delete the entry".to_string(),
        ),
        None => (
            "upstream ip-masq-agent does not read this key".to_string(),
            "write the CIDR you mean there, or delete the entry".to_string(),
        ),
    };
    Diagnostic::error(
        Code::InvalidCidr,
        format!("entry {position} of {key} is null: ipmasq rejects it; {upstream}"),
    )
    .hint(hint)
}

/// Every entry of a CIDR list: a string that parses as an aligned CIDR of an enabled family.
pub(super) fn parse_cidr_nodes(
    nodes: &[&YamlNode],
    key: &str,
    options: &Options,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(IpNet, Option<Location>)> {
    let mut written: Vec<(String, Option<Location>)> = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        match &node.value {
            Value::Scalar(s) if s.resolve() == Resolved::Str => {
                written.push((s.text.clone(), Some(node.location)))
            }
            Value::Scalar(s) if s.resolve() == Resolved::Null => {
                push_finding(diags, null_entry(key, index, options).at(node.location))
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
                        .hint("set enableIPv6: true in the config (or pass --enable-ipv6 to the agent and to validate), or remove the IPv6 CIDR"),
                    );
                }
                parsed.push((net, *location));
            }
            Err(err) => {
                let (code, hint) = cidr_problem(&err);
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

/// Warns about exact duplicates within one list (sorting makes this O(n log n)). Entries
/// inside another one are judged across the lists, by [`covered_warnings`].
/// The code and hint of a CIDR that does not parse, wherever a CIDR is written.
pub(in crate::config) fn cidr_problem(err: &CidrError) -> (Code, String) {
    match err {
        CidrError::NotAligned { network, .. } => {
            (Code::CidrNotAligned, format!("did you mean {network}?"))
        }
        CidrError::Ipv4Mapped { ipv4, .. } => {
            (Code::Ipv4MappedCidr, format!("did you mean {ipv4}?"))
        }
        CidrError::Unparsable { .. } => (
            Code::InvalidCidr,
            "write an address and a prefix length, e.g. 10.0.0.0/8 or fd00::/8".to_string(),
        ),
    }
}

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
                .cites(parsed[p].1)
                .at_opt(parsed[i].1)
                .hint("delete the repeated entry; each one costs a rule"),
            ));
            continue;
        }
        previous = Some(i);
    }
    found.sort_by_key(|(i, _)| *i);
    diags.extend(found.into_iter().map(|(_, d)| d));
}

pub(super) fn line_of(location: Option<Location>) -> String {
    location.map_or(String::new(), |l| format!(" ({})", cite_line(l)))
}

/// A forced CIDR also kept is an error; one that no kept range holds (or that is the
/// link-local range, kept first) changes nothing and is reported.
fn forced_warnings(
    config: &Config,
    diags: &mut Vec<Diagnostic>,
    at: &dyn Fn(Diagnostic, &Place) -> Diagnostic,
) {
    if config.force_masquerade_cidrs.is_empty() {
        return;
    }
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
            // In the same text, cited as a line (placed with the finding when embedded).
            let (written, cited) = match (&other.file, other.location) {
                (None, Some(l)) => (cite_line(l), Some(l)),
                _ => (other.to_string(), None),
            };
            push_finding(diags, at(
                Diagnostic::error(
                    Code::ForcedAndKept,
                    format!(
                        "{forced} is in {KEY_FORCE} and also in {KEY_CIDRS} ({written}): it cannot be both masqueraded and kept"
                    ),
                )
                .cites(cited),
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
        if link_local_kept && *forced == family_link_local {
            push_finding(diags, at(
                Diagnostic::warning(
                    Code::ForcedWithoutEffect,
                    format!(
                        "{forced} is the link-local range, which is kept before any forced range unless masqLinkLocal{} is true: forcing it changes nothing",
                        if forced.addr().is_ipv6() { "IPv6" } else { "" }
                    ),
                ),
                &place,
            )
            .hint(format!(
                "delete it, and set masqLinkLocal{}: true to masquerade link-local traffic",
                if forced.addr().is_ipv6() { "IPv6" } else { "" }
            )));
        } else if !inside_kept {
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
}

/// One listed destination range for [`covered_warnings`]: where it is and what it decides.
struct Listed {
    net: IpNet,
    masquerade: bool,
    /// `None` for the implicit link-local range (kept unless `masqLinkLocal*`).
    list: Option<(ListName, usize)>,
}

/// Warns about a `nonMasqueradeCIDRs` or `forceMasqueradeCIDRs` entry whose deletion changes no
/// verdict: the nearest listed range strictly holding it (across both lists, with the implicit
/// link-local range) decides the same. With forced CIDRs the longest prefix wins, so a kept
/// range inside a forced one inside a kept one is not redundant, and no hint says to delete it.
/// CIDR blocks either nest or are disjoint: sorted, a stack of open blocks finds each nearest
/// holder in O(n log n). Repeats of one range are left to the duplicate warning.
fn covered_warnings(
    config: &Config,
    diags: &mut Vec<Diagnostic>,
    at: &dyn Fn(Diagnostic, &Place) -> Diagnostic,
) {
    let mut destinations: Vec<Listed> = Vec::new();
    for (net, masq_link_local) in [
        (super::super::LINK_LOCAL_V4, config.masq_link_local),
        (super::super::LINK_LOCAL_V6, config.masq_link_local_ipv6),
    ] {
        if !masq_link_local {
            let net = net.parse().expect("constant");
            destinations.push(Listed {
                net,
                masquerade: false,
                list: None,
            });
        }
    }
    fn listed(
        list: ListName,
        nets: &[IpNet],
        masquerade: bool,
    ) -> impl Iterator<Item = Listed> + '_ {
        nets.iter().enumerate().map(move |(i, net)| Listed {
            net: *net,
            masquerade,
            list: Some((list, i)),
        })
    }
    destinations.extend(listed(
        ListName::NonMasquerade,
        &config.non_masquerade_cidrs,
        false,
    ));
    destinations.extend(listed(
        ListName::Force,
        &config.force_masquerade_cidrs,
        true,
    ));
    nearest_holder_warnings(destinations, config, diags, at);
    // Sources only select: a range inside another one selects nothing more.
    let sources = listed(ListName::Sources, &config.masquerade_source_cidrs, false).collect();
    nearest_holder_warnings(sources, config, diags, at);
}

/// [`covered_warnings`] for one set of ranges.
fn nearest_holder_warnings(
    mut listed: Vec<Listed>,
    config: &Config,
    diags: &mut Vec<Diagnostic>,
    at: &dyn Fn(Diagnostic, &Place) -> Diagnostic,
) {
    // Families apart, then by network, wider first; among equal ranges the one the plan
    // consults first, so a repeat sees the entry that decides for it as the open block.
    listed.sort_by_key(|l| {
        let n = l.net;
        // What the plan does with equal ranges: link-local is kept before any forced range.
        let rank = match l.list {
            Some((ListName::NonMasquerade, i)) => (0, i),
            None => (1, 0),
            Some((_, i)) => (2, i),
        };
        (n.addr().is_ipv6(), n.network(), n.prefix_len(), rank)
    });
    let mut open: Vec<usize> = Vec::new();
    let mut found: Vec<((ListName, usize), Diagnostic)> = Vec::new();
    for (i, entry) in listed.iter().enumerate() {
        while let Some(&top) = open.last() {
            if listed[top].net.contains(&entry.net) {
                break;
            }
            open.pop();
        }
        let holder = open.last().map(|&top| &listed[top]);
        if holder.is_some_and(|h| h.net == entry.net) {
            continue;
        }
        open.push(i);
        let (Some(holder), Some(place)) = (holder, entry.list) else {
            continue;
        };
        let Some(holder_place) = holder.list else {
            continue;
        };
        if holder.masquerade != entry.masquerade {
            continue;
        }
        let outer = config.place(holder_place.0, holder_place.1);
        let written = match (&outer.file, outer.location) {
            (None, Some(location)) => line_of(Some(location)),
            (Some(_), _) => format!(" ({outer})"),
            (None, None) => String::new(),
        };
        let cited = outer.location.filter(|_| outer.file.is_none());
        let d = Diagnostic::warning(
            Code::CoveredCidr,
            format!(
                "{} is already covered by {}{written}",
                entry.net, holder.net
            ),
        )
        .cites(cited)
        .hint(format!(
            "delete the narrower entry; {} decides the same for all of it",
            holder.net
        ));
        found.push((place, at(d, &config.place(place.0, place.1))));
    }
    found.sort_by_key(|(place, _)| (place.0 != ListName::NonMasquerade, place.1));
    diags.extend(found.into_iter().map(|(_, d)| d));
}
