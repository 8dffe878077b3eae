//! Reading our table back over netlink: the chain's hook, the set's type and elements, and
//! every rule as the same canonical text the desired model uses, with its counters. Also the
//! neutral [`Inspection`] made from it.

use super::render::{set_index, set_name, CHAIN, TABLE};
use crate::backend::nfnetlink::read::{self, RuleReading};
use crate::backend::nfnetlink::statement::{self, Stmt};
use crate::backend::nfnetlink::{Failure, Transport};
use crate::backend::{
    AddressMatch, Before, Counters, EntryJump, Inspection, LiveRule, Matches, Verdict, Weight,
};
use crate::plan::Family;
use ipnet::IpNet;

/// The base chain's declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChainHook {
    pub kind: String,
    pub hook: String,
    pub priority: i64,
    pub policy: String,
}

/// One live rule: canonical statements, comment, counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LiveRuleSpec {
    pub statements: String,
    pub comment: Option<String>,
    pub counters: Option<Counters>,
}

/// One of our sets as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LiveSet {
    pub name: String,
    /// Key type and flags as nft names them.
    pub kind: String,
    pub flags: Vec<String>,
    /// Sorted.
    pub elements: Vec<IpNet>,
    /// Elements in a form we do not write (ranges; kept for the report).
    pub odd_elements: Vec<String>,
}

/// What our table holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LiveTable {
    pub table_exists: bool,
    /// The table's comment: [`super::render::OWNER_MARK`] on a table we created.
    pub comment: Option<String>,
    pub chain: Option<ChainHook>,
    /// Our sets (`nomasq`, `nomasq_1`, ...; other sets of the table are not ours to read),
    /// in index order.
    pub sets: Vec<LiveSet>,
    pub rules: Vec<LiveRuleSpec>,
}

/// A rule read back: its canonical text and counters.
fn live_rule(rule: &RuleReading) -> LiveRuleSpec {
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

/// Reads our table of `family`: a missing table (or chain, or set) is an empty part.
pub(super) fn read_table(t: &mut dyn Transport, family: Family) -> Result<LiveTable, Failure> {
    let mut live = LiveTable::default();
    let Some(table) = read::table(t, family, TABLE)? else {
        return Ok(live);
    };
    live.table_exists = true;
    live.comment = table.comment;
    if let Some(chain) = read::chain(t, family, TABLE, CHAIN)? {
        live.chain = chain.base.map(|(kind, hook, priority, policy)| ChainHook {
            kind,
            hook,
            priority,
            policy,
        });
        let proto = crate::backend::nfnetlink::wire::nfproto(family);
        live.rules = read::rules(t, proto, TABLE, CHAIN)?
            .iter()
            .map(live_rule)
            .collect();
    }
    live.sets = read::sets(t, family, TABLE, |name| set_index(name).is_some())?
        .into_iter()
        .map(|(name, set)| LiveSet {
            name,
            kind: set.key_type,
            flags: set.flags,
            elements: set.nets,
            odd_elements: set.odd,
        })
        .collect();
    live.sets.sort_by_key(|s| set_index(&s.name));
    Ok(live)
}

impl LiveTable {
    /// Whether the table carries our mark: a table we created, not a neighbour's of the same
    /// name.
    pub fn marked(&self) -> bool {
        self.table_exists && self.comment.as_deref() == Some(super::render::OWNER_MARK)
    }

    /// Whether an unmarked table is one an ipmasq before the mark made: no comment, our base
    /// chain hooked as we hook it, every rule carrying one of our comments and the last our
    /// masquerade (or SNAT) rule, which says it must be last. `cleanup` removes such a table
    /// too; a neighbour's table that merely has our name is not one.
    pub fn made_by_an_earlier_ipmasq(&self) -> bool {
        use super::render::{MASQ_COMMENT, PRIORITY_VALUE, SNAT_COMMENT};
        let hooked_as_ours = self.chain.as_ref().is_some_and(|c| {
            c.kind == "nat"
                && c.hook == "postrouting"
                && c.priority == PRIORITY_VALUE
                && c.policy == "accept"
        });
        let ours = |rule: &LiveRuleSpec| {
            rule.comment
                .as_deref()
                .is_some_and(|c| c.starts_with("ip-masq-agent: ") || c.starts_with("ipmasq: "))
        };
        let ends_as_ours = self.rules.last().is_some_and(|rule| {
            matches!(rule.comment.as_deref(), Some(c) if c == MASQ_COMMENT || c == SNAT_COMMENT)
        });
        self.table_exists
            && self.comment.is_none()
            && hooked_as_ours
            && self.rules.iter().all(ours)
            && ends_as_ours
    }

    /// The table as we wrote it (what nft would list right after our own commit).
    pub fn written(table: &super::render::DesiredTable) -> Self {
        LiveTable {
            table_exists: true,
            comment: Some(super::render::OWNER_MARK.into()),
            chain: Some(ChainHook {
                kind: "nat".into(),
                hook: "postrouting".into(),
                priority: super::render::PRIORITY_VALUE,
                policy: "accept".into(),
            }),
            sets: table
                .set_elements()
                .into_iter()
                .enumerate()
                .map(|(index, elements)| LiveSet {
                    name: set_name(index),
                    kind: super::render::address_type(table.family).into(),
                    flags: vec!["interval".into()],
                    elements,
                    odd_elements: Vec::new(),
                })
                .collect(),
            rules: table
                .rules
                .iter()
                .map(|r| LiveRuleSpec {
                    statements: r.statements.clone(),
                    comment: Some(r.comment.clone()),
                    counters: None,
                })
                .collect(),
        }
    }

    /// The set named `name`, when we read it.
    pub fn set(&self, name: &str) -> Option<&LiveSet> {
        self.sets.iter().find(|s| s.name == name)
    }

    /// The neutral view: the chain's postrouting hook is the way in, with the local skip
    /// when `fib daddr type local return` is the first rule; one keep rule per element of
    /// the set a lookup names; the other rules typed. The reading itself goes along for `compare`.
    pub fn inspection(&self) -> Inspection {
        let hooked = self.table_exists
            && self
                .chain
                .as_ref()
                .is_some_and(|c| c.kind == "nat" && c.hook == "postrouting");
        let is_local_skip = |r: &LiveRuleSpec| r.statements.starts_with(LOCAL_SKIP);
        let skip = self.rules.first().filter(|r| is_local_skip(r));
        let mut entry_jumps = Vec::new();
        if let (true, Some(chain)) = (hooked, &self.chain) {
            entry_jumps.push(EntryJump {
                position: None,
                text: format!(
                    "type {} hook {} priority {}",
                    chain.kind, chain.hook, chain.priority
                ),
                counters: skip.and_then(|r| r.counters),
                skips_local: skip.is_some(),
            });
        }
        let mut rules = Vec::new();
        let owned = self.rules.iter().skip(usize::from(skip.is_some()));
        for rule in owned {
            let described = describe(&rule.statements);
            if let Some(name) = &described.set_lookup {
                let elements = self.set(name).map_or(&[][..], |s| &s.elements[..]);
                for element in elements {
                    let mut matches = described.matches.clone();
                    matches.destination = Some(AddressMatch {
                        negated: false,
                        nets: vec![*element],
                    });
                    rules.push(LiveRule {
                        number: rules.len() + 1,
                        matches,
                        verdict: described.verdict.clone(),
                        comment: rule.comment.clone(),
                        counters: None,
                        text: format!("element {element} of set {name}"),
                    });
                }
                continue;
            }
            rules.push(LiveRule {
                number: rules.len() + 1,
                matches: described.matches,
                verdict: described.verdict,
                comment: rule.comment.clone(),
                counters: rule.counters,
                text: rule.statements.clone(),
            });
        }
        Inspection {
            installed: self.table_exists && self.chain.is_some(),
            rules,
            entry_jumps,
            hook_rules: self.rules.len(),
            reading: Some(std::sync::Arc::new(self.clone())),
            before: Vec::new(),
        }
    }
}

/// The rule that lets local destinations leave before our other rules.
pub(super) const LOCAL_SKIP: &str = "fib daddr type local return";

/// A rewrite, before its details are read.
const REWRITES: Verdict = Verdict::Masquerade {
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
struct Described {
    matches: Matches,
    verdict: Verdict,
    /// `daddr @nomasq`: the rule stands for one rule per element of that set of ours.
    set_lookup: Option<String>,
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
fn describe(statements: &str) -> Described {
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
            ["ip" | "ip6", side @ ("saddr" | "daddr"), tail @ ..] => match address_match(tail) {
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
            },
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
                verdict = Some(Verdict::Keep);
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
                verdict = Some(Verdict::Foreign(words[i..].join(" ")));
                break;
            }
            None => {
                matches.unjudged.push(words[i].to_string());
                i += 1;
            }
        }
    }
    let verdict = match verdict {
        Some(Verdict::Masquerade { .. }) => Verdict::Masquerade {
            snat_to,
            ports,
            weight,
            fully_random,
        },
        Some(verdict) => verdict,
        None => Verdict::Foreign("no verdict".into()),
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
fn address_match(tail: &[&str]) -> Option<(AddressWords, usize)> {
    let negated = tail.first() == Some(&"!=");
    let tail = &tail[usize::from(negated)..];
    let ours = tail
        .first()
        .and_then(|w| w.strip_prefix('@'))
        .filter(|name| set_index(name).is_some());
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

/// Another table's nat postrouting base chain: its rules typed (what this tool cannot judge
/// stays as it reads).
pub(super) fn foreign_chain(place: String, priority: i64, rules: &[RuleReading]) -> Before {
    let rules = rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let spec = live_rule(rule);
            let described = describe(&spec.statements);
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
