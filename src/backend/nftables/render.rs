//! What our nftables table should hold for a [`Ruleset`], as a model that both the script we
//! apply and the comparison with the live table are made from. One table per family
//! (`ip ipmasq`, `ip6 ipmasq`) with one interval set of the CIDRs that keep their source and
//! one nat chain hooked at postrouting.

use crate::backend::BackendError;
use crate::config::egress::InterfacePattern;
use crate::netlink::nf_tables::statement::{
    self, NftVerdict, Side, Stmt, NAT_RANGE_PROTO_RANDOM_FULLY,
};
use crate::netlink::nf_tables::wire::{self, BaseChain, Batch, Finished, Keys, SetRef};
use crate::plan::{Action, Egress, Family, Ruleset};
use ipnet::IpNet;
use netlink_packet_netfilter::nftables::InetHookNumber;

/// Our table's name, in both families.
pub(crate) const TABLE: &str = "ipmasq";
/// The comment every table we create carries: the mark that makes it ours. `cleanup` (and an
/// agent removing a family or another backend's leftovers) deletes only a table with it, so a
/// neighbour's table that happens to be called `ipmasq` survives; a sync makes an unmarked
/// table of that name anew, marked (one transaction).
pub(crate) const OWNER_MARK: &str = "managed by ipmasq";
/// The base chain.
pub(super) const CHAIN: &str = "postrouting";
/// The interval set of non-masquerade CIDRs (the first one, when the list is spread over
/// several: [`set_name`]).
pub(super) const SET: &str = "nomasq";
/// The most elements one set is planned to hold; a longer list is spread over a power of two
/// of sets. The kernel rebuilds an interval set's whole lookup structure in every commit that
/// touches it, so a one-CIDR change costs what the size of its set costs (measured on 6.18 with
/// `nft add element`: 12–27 ms in one set of 100,000 elements, 1.5–4 ms in one of eight sets of
/// 12,500). Lists up to this size keep the one set `nomasq`.
pub(super) const SET_CAPACITY: usize = 16_384;

/// How many sets hold `elements` elements: one up to [`SET_CAPACITY`], else the power of two
/// that keeps each at about that size or less. A power of two, so that crossing a size only
/// doubles (or halves) the count, and an element's set then keeps the low bits of its hash.
pub(super) fn set_count(elements: usize) -> usize {
    elements.div_ceil(SET_CAPACITY).max(1).next_power_of_two()
}

/// The name of set `index`: `nomasq`, then `nomasq_1`, `nomasq_2`, ...
pub(super) fn set_name(index: usize) -> String {
    if index == 0 {
        SET.to_string()
    } else {
        format!("{SET}_{index}")
    }
}

/// The index of a set name of ours ([`set_name`]'s inverse); None for another name.
pub(super) fn set_index(name: &str) -> Option<usize> {
    if name == SET {
        return Some(0);
    }
    let digits = name.strip_prefix(SET)?.strip_prefix('_')?;
    let index: usize = digits.parse().ok()?;
    (index > 0 && set_name(index) == name).then_some(index)
}

/// Which of `sets` sets holds `net`: a hash of the element alone, so adding or removing one
/// CIDR moves no other element, and a change touches only the sets of the elements it
/// changes. (splitmix64's finaliser over the address and prefix length: stable across
/// releases and platforms, unlike std's hasher.)
pub(super) fn set_of(net: &IpNet, sets: usize) -> usize {
    if sets <= 1 {
        return 0;
    }
    let folded: u64 = match net {
        IpNet::V4(n) => u64::from(u32::from(n.network())),
        IpNet::V6(n) => {
            let bits = u128::from(n.network());
            (bits >> 64) as u64 ^ (bits as u64).rotate_left(29)
        }
    };
    let mut z = folded ^ (u64::from(net.prefix_len()) << 56);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z as usize) & (sets - 1)
}

/// The elements one set should hold, and the ones it should no longer: a repair that touches
/// only elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SetChange {
    pub set: String,
    pub remove: Vec<IpNet>,
    pub add: Vec<IpNet>,
}
/// `srcnat + 10`, not `srcnat`: at equal priority the most recently loaded base chain runs
/// first, so the order against kube-proxy's masquerade would flip with restarts; at +10 ours
/// always runs after it, as upstream's jump appended to POSTROUTING does.
pub(super) const PRIORITY: &str = "srcnat + 10";
/// The same priority as nft reports it (srcnat is 100).
pub(super) const PRIORITY_VALUE: i64 = 110;
/// The l4 protocols a port range applies to: tcp, udp, sctp.
const PORTED_PROTOCOLS: [u8; 3] = [6, 17, 132];
pub(super) use crate::plan::{
    jump_comment as entry_comment, MASQ_COMMENT, NON_MASQ_COMMENT, SNAT_COMMENT, SOURCE_COMMENT,
};

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
    pub(super) fn new(stmts: Vec<Stmt>, comment: impl Into<String>) -> Self {
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
    /// How many sets hold them ([`set_count`]); each has a lookup rule.
    pub sets: usize,
    pub rules: Vec<RuleSpec>,
    /// The pod share's chains and sets, when the config limits a pod.
    pub share: Option<super::share::DesiredShare>,
    /// The netlink port to hold the table by ([`super::hold`]): every batch declares the
    /// table with `owner` and `persist`. None: the table is written unheld.
    pub held_by: Option<u32>,
}

/// How a batch makes the table's content: with the table deleted first, and with the pod
/// share's limits (their chains and the sets that hold each pod's state) made anew.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Remake {
    pub recreate: bool,
    pub fresh_limits: bool,
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
            vec![Stmt::FibDaddrLocal, Stmt::Verdict(NftVerdict::Return)],
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
                    Stmt::Verdict(NftVerdict::Return),
                ],
                SOURCE_COMMENT,
            ));
        }
        let sets = set_count(elements.len());
        for index in 0..sets {
            rules.push(RuleSpec::new(
                vec![
                    Stmt::SetLookup {
                        v6,
                        side: Side::Destination,
                        negated: false,
                        set: set_name(index),
                    },
                    Stmt::Verdict(NftVerdict::Return),
                ],
                NON_MASQ_COMMENT,
            ));
        }
        rules.extend(rewrite_rules(ruleset)?);
        let share = super::share::DesiredShare::new(ruleset, &rules);
        Ok(DesiredTable {
            family,
            elements,
            sets,
            rules,
            share,
            held_by: None,
        })
    }

    /// The elements of each set, by index, each list sorted.
    pub fn set_elements(&self) -> Vec<Vec<IpNet>> {
        let mut split = vec![Vec::new(); self.sets];
        for net in &self.elements {
            split[set_of(net, self.sets)].push(*net);
        }
        split
    }

    /// ONE transaction that makes the table this: the skeleton is declared (a no-op when it
    /// exists), the chain flushed, the planned sets deleted and declared again with their
    /// elements, and the rules added. The table and its hooked chain are kept (counters of the
    /// hook survive), unless `recreate`: then the table is deleted first (the hook or a set's
    /// type changed, which cannot be altered in place, or a set of ours is no longer planned). `leftovers` of iptables-nft go in the same
    /// transaction. The pod share's chains come along ([`super::share`]), its limits only
    /// when `remake` says so.
    pub fn batch(&self, remake: Remake, leftovers: &Leftovers) -> Result<Finished, BackendError> {
        let family = self.family;
        let recreate = remake.recreate;
        let fresh_limits = recreate || remake.fresh_limits;
        let mut b = Batch::new(crate::netlink::nf_tables::sequence(4096));
        if recreate {
            // Declared first only so that the delete finds it: without flags, which the kernel
            // would take as an update of the table being replaced (refused when that one was
            // made without `persist`).
            b.add_table(family, TABLE, Some(OWNER_MARK), None)
                .map_err(BackendError::Unsupported)?;
            b.delete_table(family, TABLE);
        }
        self.declare_table(&mut b)?;
        let base = BaseChain {
            kind: "nat".into(),
            hook: InetHookNumber::PostRouting,
            priority: PRIORITY_VALUE as i32,
        };
        b.add_base_chain(family, TABLE, CHAIN, &base);
        let names: Vec<String> = (0..self.sets).map(set_name).collect();
        for name in &names {
            b.add_set(family, TABLE, name, key_type(family), true);
        }
        b.flush_chain(family, TABLE, CHAIN);
        if let Some(share) = &self.share {
            share.clear(&mut b, family, fresh_limits);
        }
        for name in &names {
            b.delete_set(family, TABLE, name);
        }
        for (name, elements) in names.iter().zip(self.set_elements()) {
            let set = b.add_set(family, TABLE, name, key_type(family), true);
            if !elements.is_empty() {
                b.elements(family, TABLE, &set, &Keys::Nets(elements), true);
            }
        }
        for rule in &self.rules {
            b.add_rule(family, TABLE, CHAIN, &rule.stmts, Some(&rule.comment))
                .map_err(BackendError::Unsupported)?;
        }
        if let Some(share) = &self.share {
            share
                .fill(&mut b, family, fresh_limits)
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

    /// Declares our table, marked, and held when it is to be: on a held table a no-op, on an
    /// orphaned one its claim.
    fn declare_table(&self, b: &mut Batch) -> Result<(), BackendError> {
        let flags = self.held_by.map(|_| super::hold::held_flags());
        b.add_table(self.family, TABLE, Some(OWNER_MARK), flags)
            .map_err(BackendError::Unsupported)
    }

    /// The claim of our orphaned table alone: its declaration with our flags.
    pub fn claim_batch(&self) -> Result<Finished, BackendError> {
        let mut b = Batch::new(crate::netlink::nf_tables::sequence(4096));
        self.declare_table(&mut b)?;
        Ok(b.finish())
    }

    /// A transaction that changes only sets' elements: every deletion first (an aggregated
    /// element may replace ones it now covers, in this set or another), then the additions.
    /// A held table is declared first (claimed, should it have been orphaned meanwhile).
    pub fn element_batch(&self, changes: &[SetChange]) -> Result<Finished, BackendError> {
        let mut b = Batch::new(crate::netlink::nf_tables::sequence(4096));
        if self.held_by.is_some() {
            self.declare_table(&mut b)?;
        }
        for add in [false, true] {
            for change in changes {
                let nets = if add { &change.add } else { &change.remove };
                if nets.is_empty() {
                    continue;
                }
                let set = SetRef {
                    name: change.set.clone(),
                    id: None,
                };
                b.elements(self.family, TABLE, &set, &Keys::Nets(nets.clone()), add);
            }
        }
        Ok(b.finish())
    }
}

/// The rules that rewrite the source: per interface pattern (or once, unscoped), one per
/// `--to-ports` range, then the catch-all; MASQUERADE, or SNAT to the output address.
fn rewrite_rules(ruleset: &Ruleset) -> Result<Vec<RuleSpec>, BackendError> {
    let request = &ruleset.masquerade;
    let flags = if request.random_fully {
        NAT_RANGE_PROTO_RANDOM_FULLY
    } else {
        0
    };
    let (to, comment) = match request.egress {
        Egress::Masquerade => (None, MASQ_COMMENT),
        Egress::Snat(to) => (Some(to), SNAT_COMMENT),
        Egress::Unresolved(target) => return Err(BackendError::unresolved(target)),
    };
    let rewrite = |ports| match to {
        Some(to) => Stmt::Snat { to, ports, flags },
        None => Stmt::Masquerade { ports, flags },
    };
    let counter = Stmt::Counter {
        packets: 0,
        bytes: 0,
    };
    let scopes: Vec<Option<&InterfacePattern>> = if ruleset.entry.output_interfaces.is_empty() {
        vec![None]
    } else {
        ruleset.entry.output_interfaces.iter().map(Some).collect()
    };
    let mut rules = Vec::new();
    for scope in scopes {
        let interface: Vec<Stmt> = scope
            .map(|p| Stmt::OutputInterface(p.clone()))
            .into_iter()
            .collect();
        for share in &request.ports {
            let mut stmts = interface.clone();
            stmts.push(Stmt::Protocols(PORTED_PROTOCOLS.to_vec()));
            if !share.is_certain() {
                stmts.push(Stmt::Numgen {
                    modulus: share.of,
                    below: share.taken,
                });
            }
            stmts.push(counter.clone());
            stmts.push(rewrite(Some((share.range.first, share.range.last))));
            rules.push(RuleSpec::new(stmts, comment));
        }
        let mut stmts = interface;
        stmts.push(counter.clone());
        stmts.push(rewrite(None));
        rules.push(RuleSpec::new(stmts, comment));
    }
    Ok(rules)
}

/// The rules and set elements [`DesiredTable::new`] plans for `ruleset` (the source ranges'
/// anonymous set counted as elements too), without building its rules; for an unresolved
/// output address (which `new` refuses) as if it were resolved.
pub(crate) fn footprint(ruleset: &Ruleset) -> crate::backend::Footprint {
    let family = ruleset.family;
    let elements = if ruleset
        .decisions
        .iter()
        .any(|d| d.action == Action::Masquerade)
    {
        crate::plan::intervals::kept_by_longest_prefix(family, &ruleset.decisions).len()
    } else {
        aggregate(ruleset.non_masquerade().copied()).len()
    };
    let sources = aggregate(ruleset.entry.source_ranges.iter().copied()).len();
    let scopes = ruleset.entry.output_interfaces.len().max(1);
    let rewrites = scopes * (ruleset.masquerade.ports.len() + 1);
    let share = if ruleset.pod_share.is_limited() {
        // The hook's jump, the walk (the gate, the lookups, a goto per scope), the limits
        // (the connection limit's two: the pods remembered over it, the count) and the two
        // refusals.
        let limits = 2 * usize::from(ruleset.pod_share.connection_limit.is_some())
            + usize::from(ruleset.pod_share.new_connection_rate.is_some());
        1 + usize::from(sources > 0) + set_count(elements) + scopes + limits + 2
    } else {
        0
    };
    crate::backend::Footprint {
        rules: 1 + usize::from(sources > 0) + set_count(elements) + rewrites + share,
        set_elements: elements + sources,
        rule_text_bytes: 0,
    }
}

/// The transaction that removes our table of `family`.
pub(super) fn removal(family: Family) -> Finished {
    let mut b = Batch::new(crate::netlink::nf_tables::sequence(16));
    b.delete_table(family, TABLE);
    b.finish()
}

/// The smallest sorted list of CIDRs for a set of CIDRs: what the interval set holds.
pub(super) use crate::plan::intervals::aggregate;
