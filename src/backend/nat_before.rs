//! The nat chains a packet meets before ours: every other nf_tables nat postrouting base chain
//! at our priority or earlier, with its rules typed. Read once, here, for every backend (the
//! iptables variants and nftables alike), so that no backend reads through another.

use super::nft_rule::{describe, live_rule};
use super::{Before, LiveRule};
use crate::netlink::nf_tables::read::{self, RuleReading};
use crate::netlink::nf_tables::{self, wire, Transport};
use crate::plan::Family;

/// nft's word for the table family of `family`.
fn family_word(family: Family) -> &'static str {
    match family {
        Family::V4 => "ip",
        Family::V6 => "ip6",
    }
}

/// Where our rules stand in nat postrouting: their priority and the table that holds them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OurPlace<'a> {
    pub priority: i64,
    pub table: &'a str,
}

/// Every nat postrouting base chain of `family` (and of `inet`) at our priority or an earlier
/// one (the same priority: whose order nobody promises), other than our own table of
/// `family`, in the order a packet meets them, with their rules typed. Empty when nf_tables
/// cannot be read (the observation then has what the backend itself reads).
pub(crate) fn nat_chains_before(family: Family, ours: OurPlace<'_>) -> Vec<Before> {
    nf_tables::with_kernel(|t| Ok(chains_before_over(t, family, ours))).unwrap_or_default()
}

fn chains_before_over(t: &mut dyn Transport, family: Family, place: OurPlace<'_>) -> Vec<Before> {
    let OurPlace {
        priority: limit,
        table: own,
    } = place;
    let Ok(chains) = read::base_chains(t) else {
        return Vec::new();
    };
    let ours = wire::nfproto(family);
    let inet = netlink_packet_netfilter::NetfilterProtoFamily::Inet;
    let mut found: Vec<(i64, String, String, String, _)> = chains
        .into_iter()
        .filter_map(|(chain_family, table, chain)| {
            let (kind, hook, priority, _) = chain.base?;
            let before = hook == "postrouting"
                && kind == "nat"
                && (chain_family == ours || chain_family == inet)
                && !(chain_family == ours && table == own);
            if !before || priority > limit {
                return None;
            }
            let word = if chain_family == inet {
                "inet"
            } else {
                family_word(family)
            };
            Some((priority, word.to_string(), table, chain.name, chain_family))
        })
        .collect();
    found.sort_by(|a, b| (a.0, &a.1, &a.2, &a.3).cmp(&(b.0, &b.1, &b.2, &b.3)));
    found
        .into_iter()
        .filter_map(|(priority, word, table, name, chain_family)| {
            let rules = read::rules(t, chain_family, &table, &name).ok()?;
            Some(foreign_chain(
                format!("table {word} {table} chain {name}"),
                priority,
                &rules,
            ))
        })
        .collect()
}

/// Another table's nat postrouting base chain: its rules typed (what this tool cannot judge
/// stays as it reads).
fn foreign_chain(place: String, priority: i64, rules: &[RuleReading]) -> Before {
    let rules = rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let spec = live_rule(rule);
            // Another table's set is none of ours: its lookups stay unjudged words.
            let described = describe(&spec.statements, &|_| false);
            LiveRule {
                number: i + 1,
                matches: described.matches,
                verdict: described.verdict,
                comment: spec.comment,
                counters: spec.counters,
                text: spec.statements,
            }
        })
        .collect();
    Before {
        place,
        priority: Some(priority),
        rules,
        keep_ends_walk: false,
    }
}
