//! What our nftables table should hold for a [`Ruleset`], as a model that both the script we
//! apply and the comparison with the live table are made from. One table per family
//! (`ip ipmasq`, `ip6 ipmasq`) with one interval set of the CIDRs that keep their source and
//! one nat chain hooked at postrouting.

use crate::backend::nfnetlink::statement::{
    self, Side, Stmt, Verdict, NAT_RANGE_PROTO_RANDOM_FULLY,
};
use crate::backend::nfnetlink::wire::{self, BaseChain, Batch, Finished, Keys, SetRef};
use crate::backend::BackendError;
use crate::plan::{Action, ChainName, Family, Ruleset};
use ipnet::IpNet;
use netlink_packet_netfilter::nftables::InetHookNumber;

/// Our table's name, in both families.
pub(crate) const TABLE: &str = "ipmasq";
/// The base chain.
pub(super) const CHAIN: &str = "postrouting";
/// The interval set of non-masquerade CIDRs.
pub(super) const SET: &str = "nomasq";
/// `srcnat + 10`, not `srcnat`: at equal priority the most recently loaded base chain runs
/// first, so the order against kube-proxy's masquerade would flip with restarts; at +10 ours
/// always runs after it, as upstream's jump appended to POSTROUTING does.
pub(super) const PRIORITY: &str = "srcnat + 10";
/// The same priority as nft reports it (srcnat is 100).
pub(super) const PRIORITY_VALUE: i64 = 110;
/// The l4 protocols a port range applies to: tcp, udp, sctp.
const PORTED_PROTOCOLS: [u8; 3] = [6, 17, 132];
/// Comments: upstream's texts, so greps and runbooks find our rules in either backend.
pub(super) const NON_MASQ_COMMENT: &str =
    "ip-masq-agent: local traffic is not subject to MASQUERADE";
/// Comment of the rule that leaves traffic from outside `masqueradeSourceCIDRs` alone.
pub(super) const SOURCE_COMMENT: &str =
    "ipmasq: traffic from outside masqueradeSourceCIDRs is not subject to MASQUERADE";
pub(super) const MASQ_COMMENT: &str =
    "ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)";

pub(super) fn entry_comment(chain: &ChainName) -> String {
    format!(
        "ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom {chain} chain"
    )
}

/// `ip` or `ip6`: the table family and the payload protocol of `daddr`.
pub(super) fn family_word(family: Family) -> &'static str {
    match family {
        Family::V4 => "ip",
        Family::V6 => "ip6",
    }
}

pub(super) fn address_type(family: Family) -> &'static str {
    match family {
        Family::V4 => "ipv4_addr",
        Family::V6 => "ipv6_addr",
    }
}

fn key_type(family: Family) -> u32 {
    match family {
        Family::V4 => wire::TYPE_IPV4_ADDR,
        Family::V6 => wire::TYPE_IPV6_ADDR,
    }
}

/// One rule of our chain: its typed statements, their canonical text (also what live rules
/// are read back into) and its comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RuleSpec {
    pub stmts: Vec<Stmt>,
    pub statements: String,
    pub comment: String,
}

impl RuleSpec {
    fn new(stmts: Vec<Stmt>, comment: impl Into<String>) -> Self {
        RuleSpec {
            statements: statement::text(&stmts),
            stmts,
            comment: comment.into(),
        }
    }
}

/// What a first install also deletes: iptables-nft's chain of ours and its jumps (rule
/// handles in nat POSTROUTING), in the same transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Leftovers {
    pub chain: Option<String>,
    pub jumps: Vec<u64>,
}

/// The desired table of one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DesiredTable {
    pub family: Family,
    /// Non-overlapping, sorted ([`aggregate`]): an interval set refuses overlapping
    /// elements, and the listed elements then equal these exactly.
    pub elements: Vec<IpNet>,
    pub rules: Vec<RuleSpec>,
}

impl DesiredTable {
    pub fn new(ruleset: &Ruleset) -> Result<Self, BackendError> {
        if !ruleset.entry.skip_local_destinations {
            return Err(BackendError::Unsupported(
                "the nftables backend always exempts local destinations".into(),
            ));
        }
        let family = ruleset.family;
        // Sorted, as nft lists them back and as the diff's merge expects. With forced CIDRs
        // the set holds what the longest prefix keeps: disjoint intervals, one lookup.
        let elements = if ruleset
            .decisions
            .iter()
            .any(|d| d.action == Action::Masquerade)
        {
            crate::plan::intervals::kept_by_longest_prefix(family, &ruleset.decisions)
        } else {
            aggregate(ruleset.non_masquerade().copied())
        };
        let v6 = family == Family::V6;
        let mut rules = vec![RuleSpec::new(
            vec![Stmt::FibDaddrLocal, Stmt::Verdict(Verdict::Return)],
            entry_comment(&ruleset.names.chain),
        )];
        let sources = aggregate(ruleset.entry.source_ranges.iter().copied());
        if !sources.is_empty() {
            rules.push(RuleSpec::new(
                vec![
                    Stmt::Address {
                        v6,
                        side: Side::Source,
                        negated: true,
                        nets: sources,
                    },
                    Stmt::Verdict(Verdict::Return),
                ],
                SOURCE_COMMENT,
            ));
        }
        rules.push(RuleSpec::new(
            vec![
                Stmt::SetLookup {
                    v6,
                    side: Side::Destination,
                    negated: false,
                    set: SET.into(),
                },
                Stmt::Verdict(Verdict::Return),
            ],
            NON_MASQ_COMMENT,
        ));
        let request = &ruleset.masquerade;
        let flags = if request.random_fully {
            NAT_RANGE_PROTO_RANDOM_FULLY
        } else {
            0
        };
        let counter = Stmt::Counter {
            packets: 0,
            bytes: 0,
        };
        for share in &request.ports {
            let mut stmts = vec![Stmt::Protocols(PORTED_PROTOCOLS.to_vec())];
            if !share.is_certain() {
                stmts.push(Stmt::Numgen {
                    modulus: share.of,
                    below: share.taken,
                });
            }
            stmts.push(counter.clone());
            stmts.push(Stmt::Masquerade {
                ports: Some((share.range.first, share.range.last)),
                flags,
            });
            rules.push(RuleSpec::new(stmts, MASQ_COMMENT));
        }
        rules.push(RuleSpec::new(
            vec![counter, Stmt::Masquerade { ports: None, flags }],
            MASQ_COMMENT,
        ));
        Ok(DesiredTable {
            family,
            elements,
            rules,
        })
    }

    /// ONE transaction that makes the table this: the skeleton is declared (a no-op when it
    /// exists), the chain flushed, the set deleted and declared again with every element, and
    /// the rules added. The table and its hooked chain are kept (counters of the hook
    /// survive), unless `recreate`: then the table is deleted first (the hook or the set type
    /// changed, which cannot be altered in place). `leftovers` of iptables-nft go in the same
    /// transaction.
    pub fn batch(&self, recreate: bool, leftovers: &Leftovers) -> Result<Finished, BackendError> {
        let family = self.family;
        let mut b = Batch::new(crate::backend::nfnetlink::sequence(4096));
        b.add_table(family, TABLE);
        if recreate {
            b.delete_table(family, TABLE);
            b.add_table(family, TABLE);
        }
        let base = BaseChain {
            kind: "nat".into(),
            hook: InetHookNumber::PostRouting,
            priority: PRIORITY_VALUE as i32,
        };
        b.add_base_chain(family, TABLE, CHAIN, &base);
        b.add_set(family, TABLE, SET, key_type(family), true);
        b.flush_chain(family, TABLE, CHAIN);
        b.delete_set(family, TABLE, SET);
        let set = b.add_set(family, TABLE, SET, key_type(family), true);
        if !self.elements.is_empty() {
            b.elements(
                family,
                TABLE,
                &set,
                &Keys::Nets(self.elements.clone()),
                true,
            );
        }
        for rule in &self.rules {
            b.add_rule(family, (TABLE, CHAIN), &rule.stmts, Some(&rule.comment))
                .map_err(BackendError::Unsupported)?;
        }
        for handle in &leftovers.jumps {
            b.delete_rule(family, "nat", "POSTROUTING", *handle);
        }
        if let Some(chain) = &leftovers.chain {
            b.flush_chain(family, "nat", chain);
            b.delete_chain(family, "nat", chain);
        }
        Ok(b.finish())
    }

    /// A transaction that changes only the set's elements: deletions first (an aggregated
    /// element may replace the ones it now covers), then additions.
    pub fn element_batch(&self, remove: &[IpNet], add: &[IpNet]) -> Finished {
        let mut b = Batch::new(crate::backend::nfnetlink::sequence(4096));
        let set = SetRef {
            name: SET.into(),
            id: None,
        };
        if !remove.is_empty() {
            b.elements(
                self.family,
                TABLE,
                &set,
                &Keys::Nets(remove.to_vec()),
                false,
            );
        }
        if !add.is_empty() {
            b.elements(self.family, TABLE, &set, &Keys::Nets(add.to_vec()), true);
        }
        b.finish()
    }
}

/// The transaction that removes our table of `family`.
pub(super) fn removal(family: Family) -> Finished {
    let mut b = Batch::new(crate::backend::nfnetlink::sequence(16));
    b.delete_table(family, TABLE);
    b.finish()
}

/// The smallest sorted list of CIDRs for a set of CIDRs: what the interval set holds.
pub(super) use crate::plan::intervals::aggregate;
