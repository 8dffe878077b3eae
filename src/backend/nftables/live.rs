//! Reading our table back over netlink: the chain's hook, the set's type and elements, and
//! every rule as the same canonical text the desired model uses, with its counters. Also the
//! neutral [`Inspection`] made from it.

use super::render::{set_index, set_name, CHAIN, TABLE};
pub(super) use crate::backend::nft_rule::LiveRuleSpec;
use crate::backend::nft_rule::{describe, live_rule};
use crate::backend::{AddressMatch, EntryJump, Inspected, Inspection, LiveRule, Reading};
use crate::netlink::nf_tables::read;
use crate::netlink::nf_tables::{Failure, Transport};
use crate::plan::Family;
use ipnet::IpNet;

/// The base chain's declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChainHook {
    pub(super) kind: String,
    pub(super) hook: String,
    pub(super) priority: i64,
    pub(super) policy: String,
}

/// One of our sets as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LiveSet {
    pub(super) name: String,
    /// Key type and flags as nft names them.
    pub(super) kind: String,
    pub(super) flags: Vec<String>,
    /// Sorted.
    pub(super) elements: Vec<IpNet>,
    /// Elements in a form we do not write (ranges; kept for the report).
    pub(super) odd_elements: Vec<String>,
}

/// What our table holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveTable {
    pub(super) table_exists: bool,
    /// The table's comment: [`super::render::OWNER_MARK`] on a table we created.
    pub(super) comment: Option<String>,
    /// The table's flags (`owner`, `persist`: [`super::hold`]) and the port of the socket
    /// that holds it, while one does.
    pub(super) flags: netlink_packet_netfilter::nftables::TableFlags,
    pub(super) owner: Option<u32>,
    pub(super) chain: Option<ChainHook>,
    /// Our sets (`nomasq`, `nomasq_1`, ...; other sets of the table are not ours to read),
    /// in index order.
    pub(super) sets: Vec<LiveSet>,
    pub(super) rules: Vec<LiveRuleSpec>,
    /// The pod share's chains and sets.
    pub(super) share: super::share::LiveShare,
}

/// Reads our table of `family`: a missing table (or chain, or set) is an empty part.
pub(super) fn read_table(t: &mut dyn Transport, family: Family) -> Result<LiveTable, Failure> {
    let mut live = LiveTable::default();
    let Some(table) = read::table(t, family, TABLE)? else {
        return Ok(live);
    };
    live.table_exists = true;
    live.comment = table.comment;
    live.flags = table.flags;
    live.owner = table.owner;
    if let Some(chain) = read::chain(t, family, TABLE, CHAIN)? {
        live.chain = chain.base.map(|(kind, hook, priority, policy)| ChainHook {
            kind,
            hook,
            priority,
            policy,
        });
        let proto = crate::netlink::nf_tables::wire::nfproto(family);
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
    live.share = super::share::read_share(t, family)?;
    Ok(live)
}

impl LiveTable {
    /// Whether the table carries our mark: a table we created, not a neighbour's of the same
    /// name.
    pub(super) fn marked(&self) -> bool {
        self.table_exists && self.comment.as_deref() == Some(super::render::OWNER_MARK)
    }

    /// Whether an unmarked table is one an ipmasq before the mark made: no comment, our base
    /// chain hooked as we hook it, every rule carrying one of our comments and the last our
    /// masquerade (or SNAT) rule, which says it must be last. `cleanup` removes such a table
    /// too; a neighbour's table that merely has our name is not one.
    pub(super) fn made_by_an_earlier_ipmasq(&self) -> bool {
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
    pub(super) fn written(table: &super::render::DesiredTable) -> Self {
        LiveTable {
            table_exists: true,
            comment: Some(super::render::OWNER_MARK.into()),
            flags: match table.held_by {
                Some(_) => super::hold::held_flags(),
                None => Default::default(),
            },
            owner: table.held_by,
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
            share: super::share::LiveShare::written(table.share.as_ref()),
        }
    }

    /// The set named `name`, when we read it.
    pub(super) fn set(&self, name: &str) -> Option<&LiveSet> {
        self.sets.iter().find(|s| s.name == name)
    }

    /// The neutral view: the chain's postrouting hook is the way in, with the local skip
    /// when `fib daddr type local return` is the first rule; one keep rule per element of
    /// the set a lookup names; the other rules typed.
    pub(super) fn inspection(&self) -> Inspection {
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
            let described = describe(&rule.statements, &|name| set_index(name).is_some());
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
            before: Vec::new(),
            pod_share: self.share.view(),
        }
    }
}

impl LiveTable {
    /// The neutral view with this reading behind it, for [`super::Nftables`]'s `compare`
    /// (what runs before our table is left to the caller).
    pub(super) fn inspected(self) -> Inspected {
        Inspected {
            inspection: self.inspection(),
            reading: Reading::Table(Box::new(self)),
        }
    }
}

/// The rule that lets local destinations leave before our other rules.
pub(super) const LOCAL_SKIP: &str = "fib daddr type local return";
