//! nft's canonical rule text (the form `nf_tables::statement` writes) taken apart into the
//! neutral matches and verdict, for the rules of any table: ours (the nftables backend) and
//! the nat chains of others that run before ours (`nat_before`).

use super::{AddressMatch, Counters, Matches, RuleVerdict, Weight};
use crate::netlink::nf_tables::read::RuleReading;
use crate::netlink::nf_tables::statement::{self, Stmt};
use ipnet::IpNet;

/// One rule as read: canonical statements, comment, counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LiveRuleSpec {
    pub statements: String,
    pub comment: Option<String>,
    pub counters: Option<Counters>,
}

/// A rule read back: its canonical text and counters.
pub(crate) fn live_rule(rule: &RuleReading) -> LiveRuleSpec {
    let counters = rule.stmts.iter().find_map(|s| match s {
        Stmt::Counter { packets, bytes } => Some(Counters {
            packets: *packets,
            bytes: *bytes,
        }),
        _ => None,
    });
    LiveRuleSpec {
        statements: statement::text(&rule.stmts),
        comment: rule.comment.clone(),
        counters,
    }
}

/// A rewrite, before its details are read.
const REWRITES: RuleVerdict = RuleVerdict::Masquerade {
    snat_to: None,
    ports: None,
    weight: None,
    fully_random: false,
};

/// `"eth0"`, `"eth*"`: an interface pattern as nft quotes it.
fn quoted_interface(word: &str) -> Option<crate::config::egress::InterfacePattern> {
    let name = word.strip_prefix('"')?.strip_suffix('"')?;
    crate::config::egress::InterfacePattern::parse(name).ok()
}

/// A rule's canonical statements taken apart.
pub(crate) struct Described {
    pub matches: Matches,
    pub verdict: RuleVerdict,
    /// `daddr @nomasq`: the rule stands for one rule per element of that set of ours.
    pub set_lookup: Option<String>,
}

/// `10.0.0.0/8`, `{ 10.0.0.0/8, 192.168.0.1 }` (bare addresses are host prefixes); the words
/// taken, or None when they are not addresses.
fn addresses(words: &[&str]) -> Option<(Vec<IpNet>, usize)> {
    let parse = crate::backend::net_or_host;
    if words.first() != Some(&"{") {
        return Some((vec![parse(words.first()?)?], 1));
    }
    let end = words.iter().position(|w| *w == "}")?;
    let nets = words[1..end]
        .iter()
        .map(|w| w.trim_end_matches(','))
        .filter(|w| !w.is_empty())
        .map(parse)
        .collect::<Option<Vec<_>>>()?;
    Some((nets, end + 1))
}

/// Takes canonical statements apart (the form `statements` writes and `render` plans).
// Long: one left-to-right walk of the statement words: each arm of the match advances the one
// cursor and fills the one partial rule, and the verdict found last decides what it was.
pub(crate) fn describe(statements: &str, is_our_set: &dyn Fn(&str) -> bool) -> Described {
    let words: Vec<&str> = statements.split_whitespace().collect();
    let mut matches = Matches::default();
    let mut verdict = None;
    let mut set_lookup = None;
    let (mut ports, mut weight, mut fully_random) = (None, None, false);
    let mut snat_to = None;
    let mut i = 0;
    while i < words.len() {
        let rest = &words[i..];
        let taken = match rest {
            ["ip" | "ip6", side @ ("saddr" | "daddr"), tail @ ..] => {
                match address_match(tail, is_our_set) {
                    Some((AddressWords::SetLookup(name), used)) if *side == "daddr" => {
                        set_lookup = Some(name);
                        Some(2 + used)
                    }
                    Some((AddressWords::Match(found), used)) => {
                        if *side == "saddr" {
                            matches.source = Some(found);
                        } else {
                            matches.destination = Some(found);
                        }
                        Some(2 + used)
                    }
                    _ => None,
                }
            }
            ["meta", "l4proto", tail @ ..] => {
                let (protocols, used) = protocol_list(tail);
                matches.protocols = protocols;
                Some(2 + used)
            }
            ["numgen", "random", "mod", of, "<", taken, ..] => match (of.parse(), taken.parse()) {
                (Ok(of), Ok(taken)) => {
                    weight = Some(Weight { taken, of });
                    Some(6)
                }
                _ => None,
            },
            ["counter", ..] => Some(1),
            ["return", ..] => {
                verdict = Some(RuleVerdict::Keep);
                Some(1)
            }
            ["oifname", name, ..] => quoted_interface(name).map(|pattern| {
                matches.output_interface = Some(pattern);
                2
            }),
            ["snat", "to", target, ..] => {
                crate::backend::address_and_ports(target).map(|(address, range)| {
                    (snat_to, ports) = (Some(address), range);
                    verdict = Some(REWRITES);
                    3
                })
            }
            ["masquerade", ..] => {
                verdict = Some(REWRITES);
                Some(1)
            }
            ["to", range, ..] if verdict.is_some() => {
                ports = crate::backend::port_range(range.trim_start_matches(':'));
                Some(2)
            }
            ["fully-random", ..] => {
                fully_random = true;
                Some(1)
            }
            _ => None,
        };
        match taken {
            Some(n) => i += n,
            None if verdict.is_none() && is_statement(words[i]) => {
                verdict = Some(RuleVerdict::Foreign(words[i..].join(" ")));
                break;
            }
            None => {
                matches.unjudged.push(words[i].to_string());
                i += 1;
            }
        }
    }
    let verdict = match verdict {
        Some(RuleVerdict::Masquerade { .. }) => RuleVerdict::Masquerade {
            snat_to,
            ports,
            weight,
            fully_random,
        },
        Some(verdict) => verdict,
        None => RuleVerdict::Foreign("no verdict".into()),
    };
    Described {
        matches,
        verdict,
        set_lookup,
    }
}

/// What follows `ip saddr` / `ip daddr`.
enum AddressWords {
    Match(AddressMatch),
    /// `@nomasq`, `@nomasq_1`, ...: a set of ours.
    SetLookup(String),
}

/// `[!=] (CIDR | { CIDR, ... } | @nomasq...)`, and how many words it took.
fn address_match(
    tail: &[&str],
    is_our_set: &dyn Fn(&str) -> bool,
) -> Option<(AddressWords, usize)> {
    let negated = tail.first() == Some(&"!=");
    let tail = &tail[usize::from(negated)..];
    let ours = tail
        .first()
        .and_then(|w| w.strip_prefix('@'))
        .filter(|name| is_our_set(name));
    if let (false, Some(name)) = (negated, ours) {
        return Some((AddressWords::SetLookup(name.to_string()), 1));
    }
    let (nets, used) = addresses(tail)?;
    Some((
        AddressWords::Match(AddressMatch { negated, nets }),
        usize::from(negated) + used,
    ))
}

/// `{ tcp, udp, sctp }` or `tcp`, and how many words it took.
fn protocol_list(tail: &[&str]) -> (Vec<String>, usize) {
    let (list, used) = if tail.first() == Some(&"{") {
        let end = tail.iter().position(|w| *w == "}").unwrap_or(tail.len());
        (&tail[1..end], end + 1)
    } else {
        (&tail[..tail.len().min(1)], 1)
    };
    let protocols = list
        .iter()
        .map(|w| w.trim_end_matches(',').to_string())
        .filter(|w| !w.is_empty())
        .collect();
    (protocols, used)
}

/// Words that begin a statement which decides (or rewrites) rather than matches.
fn is_statement(word: &str) -> bool {
    matches!(
        word,
        "snat" | "dnat" | "accept" | "drop" | "jump" | "goto" | "reject" | "redirect" | "notrack"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_lookup_is_ours_only_where_the_caller_says_so() {
        let ours = describe("ip daddr @nomasq return", &|name| name == "nomasq");
        assert_eq!(ours.set_lookup.as_deref(), Some("nomasq"));
        assert!(ours.matches.unjudged.is_empty(), "{:?}", ours.matches);
        assert_eq!(ours.verdict, RuleVerdict::Keep);

        // Another table's set of the same name is none of ours: its words stay unjudged.
        let theirs = describe("ip daddr @nomasq return", &|_| false);
        assert_eq!(theirs.set_lookup, None);
        assert_eq!(theirs.matches.unjudged, ["ip", "daddr", "@nomasq"]);
        assert_eq!(theirs.verdict, RuleVerdict::Keep);
    }
}
