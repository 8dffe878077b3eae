//! The pod share in our nftables table: a filter chain hooked at forward whose one rule sends
//! new connections to `share`, the nat chain's walk (the same source gate and `@nomasq`
//! lookups, so a CIDR change touches only the sets' elements) with `goto share_limit` where
//! the nat chain would translate; `share_limit` keeps each pod's state in dynamic sets keyed
//! by its source address (`update @pod_rate { ip saddr limit rate over ... }`, then
//! `add @pod_conn { ip saddr ct count over N }`; a pod found over its count is remembered in
//! `@pod_full` for a moment and refused without a recount), each rule counting what it sends to
//! `share_refuse` (a TCP reset, else ICMP administratively prohibited) and copying it to
//! NFLOG for the SNAT log (`log prefix` naming the limit, the plan's group and snaplen). Part
//! of the table's one transaction; the limit chain and its sets are rewritten only when they
//! change (their elements are the pods' counts), and a share no longer planned goes with the
//! table made anew.

use super::live::{ChainHook, LiveRuleSpec};
use super::render::{RuleSpec, NON_MASQ_COMMENT, SOURCE_COMMENT};
use crate::backend::{Difference, DriftKind};
use crate::netlink::nf_tables::read;
use crate::netlink::nf_tables::statement::{
    Limiter, NflogCopy, NftVerdict, Reject, ShareKey, Stmt,
};
use crate::netlink::nf_tables::wire::{self, BaseChain, Batch, DynamicSet};
use crate::netlink::nf_tables::{Failure, Transport};
use crate::plan::live::{ShareLimit, SHARE_LOG_GROUP, SHARE_LOG_SNAPLEN};
use crate::plan::POD_SHARE_COMMENT;
use crate::plan::{Family, Ruleset};
use netlink_packet_netfilter::nftables::{InetHookNumber, SetFlags};

/// The base chain hooked at forward.
pub(super) const FORWARD: &str = "forward";
/// The walk, the limits and the refusal.
pub(super) const WALK: &str = "share";
pub(super) const LIMIT: &str = "share_limit";
pub(super) const REFUSE: &str = "share_refuse";
/// The chains in the order they are declared (a chain before the rules that jump to it).
pub(super) const CHAINS: [&str; 4] = [FORWARD, WALK, LIMIT, REFUSE];
/// The dynamic sets of the rate and of the connection count, and the pods found over their
/// count.
pub(super) const RATE_SET: &str = "pod_rate";
pub(super) const CONN_SET: &str = "pod_conn";
pub(super) const FULL_SET: &str = "pod_full";
/// The share's sets, as read back.
const SETS: [&str; 3] = [RATE_SET, CONN_SET, FULL_SET];
/// `priority filter`: the forward hook's filter chains' place.
pub(super) const FORWARD_PRIORITY: i64 = 0;
/// A pod (or pod and destination) not seen for this long leaves the rate's set: a bucket
/// refills in far less (burst / rate), as `hashlimit`'s expiry in the iptables backends.
const RATE_TIMEOUT_MS: u64 = 10_000;
/// How long a pod found over its connection limit is refused without a recount. The kernel
/// recounts a pod's list by walking all of it and looking each connection up in the conntrack
/// table (once a tick while new connections come); a pod flooding at its limit would pay that
/// walk on every tick, in the softirq of the CPU it sends from. Remembered, it pays a set
/// lookup instead, and a connection it closes is counted out within this long.
const FULL_TIMEOUT_MS: u64 = 100;
/// The most elements either set holds (pods, or pod-destination pairs): as `hashlimit`'s
/// table. A full set cannot add an element, and the rule then does not match: a pod it
/// cannot hold is not limited (not refused), so it is sized for a node.
const SET_SIZE: u32 = 131_072;
/// The refusal's rules' comment.
const REFUSE_COMMENT: &str = "ipmasq: a pod over its share is refused";

/// The share's part of the desired table: each chain's rules (in [`CHAINS`]' order) and the
/// dynamic sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DesiredShare {
    pub chains: [Vec<RuleSpec>; 4],
    pub sets: Vec<DynamicSet>,
}

fn address(family: Family) -> (u32, u32) {
    match family {
        Family::V4 => (wire::TYPE_IPV4_ADDR, 4),
        Family::V6 => (wire::TYPE_IPV6_ADDR, 16),
    }
}

impl DesiredShare {
    /// The share of `ruleset`, None when it limits nothing; `nat_rules` are the nat chain's,
    /// whose source gate and set lookups the walk repeats.
    pub fn new(ruleset: &Ruleset, nat_rules: &[RuleSpec]) -> Option<Self> {
        if !ruleset.pod_share.is_limited() {
            return None;
        }
        let v6 = ruleset.family == Family::V6;
        let forward = vec![RuleSpec::new(
            vec![
                Stmt::CtStateNew,
                Stmt::Verdict(NftVerdict::Jump(WALK.into())),
            ],
            POD_SHARE_COMMENT,
        )];
        let (limit, sets) = limits(ruleset);
        let refuse = vec![
            RuleSpec::new(
                vec![Stmt::Protocols(vec![6]), Stmt::Reject(Reject::TcpReset)],
                REFUSE_COMMENT,
            ),
            RuleSpec::new(
                vec![Stmt::Reject(Reject::AdminProhibited { v6 })],
                REFUSE_COMMENT,
            ),
        ];
        Some(DesiredShare {
            chains: [forward, walk(ruleset, nat_rules), limit, refuse],
            sets,
        })
    }

    /// How many rules it plans.
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(Vec::len).sum()
    }

    /// Its first messages in the table's batch, before the nat chain's sets are made anew
    /// (the walk looks them up): the chains declared, the forward and walk chains flushed,
    /// and, when `fresh_limits`, the limit and refusal chains flushed and their sets made
    /// anew (declared first, so the deletion finds them).
    pub fn clear(&self, b: &mut Batch, family: Family, fresh_limits: bool) {
        let table = super::render::TABLE;
        let base = BaseChain {
            kind: "filter".into(),
            hook: InetHookNumber::Forward,
            priority: FORWARD_PRIORITY as i32,
        };
        b.add_base_chain(family, table, FORWARD, &base);
        for chain in &CHAINS[1..] {
            b.add_chain(family, table, chain);
        }
        for chain in &CHAINS[..rewritten(fresh_limits)] {
            b.flush_chain(family, table, chain);
        }
        if fresh_limits {
            for set in &self.sets {
                b.add_dynamic_set(family, table, set);
                b.delete_set(family, table, &set.name);
                b.add_dynamic_set(family, table, set);
            }
        }
    }

    /// Its rules, after the nat chain's: the refusal before the limits that go to it, the
    /// walk before the hook's jump (the limit and refusal chains only when `fresh_limits`).
    pub fn fill(&self, b: &mut Batch, family: Family, fresh_limits: bool) -> Result<(), String> {
        for index in (0..rewritten(fresh_limits)).rev() {
            for rule in &self.chains[index] {
                b.add_rule(
                    family,
                    super::render::TABLE,
                    CHAINS[index],
                    &rule.stmts,
                    Some(&rule.comment),
                )?;
            }
        }
        Ok(())
    }
}

/// The walk: the nat chain's source gate and set lookups, then `goto share_limit` where the
/// nat chain translates (per output-interface pattern, or once).
fn walk(ruleset: &Ruleset, nat_rules: &[RuleSpec]) -> Vec<RuleSpec> {
    let mut walk: Vec<RuleSpec> = nat_rules
        .iter()
        .filter(|r| r.comment == SOURCE_COMMENT || r.comment == NON_MASQ_COMMENT)
        .cloned()
        .collect();
    let to_limit = Stmt::Verdict(NftVerdict::Goto(LIMIT.into()));
    if ruleset.entry.output_interfaces.is_empty() {
        walk.push(RuleSpec::new(vec![to_limit.clone()], POD_SHARE_COMMENT));
    }
    for pattern in &ruleset.entry.output_interfaces {
        walk.push(RuleSpec::new(
            vec![Stmt::OutputInterface(pattern.clone()), to_limit.clone()],
            POD_SHARE_COMMENT,
        ));
    }
    walk
}

/// The set, key and limiter of one limit's rule, which limit it is, and the set a pod it
/// finds over is remembered in (None: not remembered).
struct LimitRule<'a> {
    set: &'a str,
    key: ShareKey,
    limiter: Limiter,
    limit: ShareLimit,
    remember_in: Option<&'a str>,
}

/// A refusal by `limit`: counted, copied to NFLOG with the limit's prefix (for the SNAT log)
/// and sent to the refusal chain; the statements that end each of the limit chain's rules.
fn refusal(limit: ShareLimit) -> [Stmt; 3] {
    [
        Stmt::Counter {
            packets: 0,
            bytes: 0,
        },
        Stmt::Log(NflogCopy {
            prefix: limit.log_prefix().to_string(),
            group: SHARE_LOG_GROUP,
            snaplen: SHARE_LOG_SNAPLEN,
        }),
        Stmt::Verdict(NftVerdict::Goto(REFUSE.into())),
    ]
}

/// A limit's rule: the set's update with its limiter (then, when remembered, the pod's key
/// into that set), and the refusal.
fn counted_refusal(rule: LimitRule<'_>) -> RuleSpec {
    let mut stmts = vec![Stmt::SetUpdate {
        set: rule.set.to_string(),
        key: rule.key,
        limiter: rule.limiter,
    }];
    if let Some(memory) = rule.remember_in {
        stmts.push(Stmt::SetUpdate {
            set: memory.to_string(),
            key: rule.key,
            limiter: Limiter::KeyOnly,
        });
    }
    stmts.extend(refusal(rule.limit));
    RuleSpec::new(stmts, rule.limit.rule_comment())
}

/// A pod remembered over `limit` (`ip saddr @pod_full`), refused as the rule that found it
/// over refuses.
fn remembered_refusal(v6: bool, limit: ShareLimit) -> RuleSpec {
    let mut stmts = vec![Stmt::SetLookup {
        v6,
        side: crate::netlink::nf_tables::statement::Side::Source,
        negated: false,
        set: FULL_SET.into(),
    }];
    stmts.extend(refusal(limit));
    RuleSpec::new(stmts, limit.rule_comment())
}

/// The limit chain's rules (the rate first: a connection it refuses is never counted; then a
/// pod remembered over its count, then the count, which remembers a pod it finds over) and
/// the sets they keep their state in.
fn limits(ruleset: &Ruleset) -> (Vec<RuleSpec>, Vec<DynamicSet>) {
    let share = ruleset.pod_share;
    let v6 = ruleset.family == Family::V6;
    let (address_type, address_len) = address(ruleset.family);
    let mut limit = Vec::new();
    let mut sets = Vec::new();
    if let Some(rate) = share.new_connection_rate {
        let key = ShareKey {
            v6,
            per_destination: rate.per_destination,
        };
        let limiter = Limiter::RateOver {
            per_second: rate.per_second,
            burst: rate.burst,
        };
        limit.push(counted_refusal(LimitRule {
            set: RATE_SET,
            key,
            limiter,
            limit: ShareLimit::Rate,
            remember_in: None,
        }));
        let (key_type, key_len) = if rate.per_destination {
            let types = [address_type, address_type, wire::TYPE_INET_SERVICE];
            (wire::concat_type(&types), 2 * address_len + 4)
        } else {
            (address_type, address_len)
        };
        sets.push(DynamicSet {
            name: RATE_SET.into(),
            key_type,
            key_len,
            timeout_ms: Some(RATE_TIMEOUT_MS),
            size: SET_SIZE,
        });
    }
    if let Some(count) = share.connection_limit {
        let key = ShareKey {
            v6,
            per_destination: false,
        };
        limit.push(remembered_refusal(v6, ShareLimit::Connections));
        limit.push(counted_refusal(LimitRule {
            set: CONN_SET,
            key,
            limiter: Limiter::CountOver(count),
            limit: ShareLimit::Connections,
            remember_in: Some(FULL_SET),
        }));
        for (name, timeout_ms) in [(CONN_SET, None), (FULL_SET, Some(FULL_TIMEOUT_MS))] {
            sets.push(DynamicSet {
                name: name.into(),
                key_type: address_type,
                key_len: address_len,
                timeout_ms,
                size: SET_SIZE,
            });
        }
    }
    (limit, sets)
}

/// How many of [`CHAINS`] a rewrite flushes and fills: the hook's and the walk, and the limit
/// and refusal chains when their state is made anew.
fn rewritten(fresh_limits: bool) -> usize {
    if fresh_limits {
        4
    } else {
        2
    }
}

/// The share as our table holds it: the forward chain's hook, each chain's rules (None: the
/// chain does not exist) and the share's sets' declarations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveShare {
    pub(super) hook: Option<ChainHook>,
    pub(super) chains: [Option<Vec<LiveRuleSpec>>; 4],
    pub(super) sets: Vec<(DynamicSet, u32)>,
}

impl LiveShare {
    pub(super) fn is_empty(&self) -> bool {
        self.hook.is_none() && self.chains.iter().all(Option::is_none) && self.sets.is_empty()
    }

    /// Packets each limit sent to the refusal, by its rules' counters (a rule told by its
    /// comment, so a rule of an older ipmasq, without the log, is counted too).
    pub(crate) fn refused(&self) -> Vec<crate::plan::live::ShareRefusals> {
        use crate::plan::live::ShareRefusals;
        let rules = self.chains[2].as_deref().unwrap_or_default();
        let mut refused: Vec<ShareRefusals> = Vec::new();
        for rule in rules {
            let Some(comment) = rule.comment.as_deref() else {
                continue;
            };
            let Some(limit) = ShareLimit::ALL
                .into_iter()
                .find(|limit| limit.rule_comment() == comment)
            else {
                continue;
            };
            ShareRefusals::tally(&mut refused, limit, rule.counters.map_or(0, |c| c.packets));
        }
        refused
    }

    /// The neutral view: None when nothing of the share is in the table.
    pub(crate) fn view(&self) -> Option<crate::plan::live::LiveShare> {
        (!self.is_empty()).then(|| crate::plan::live::LiveShare {
            installed: self.hook.is_some() && self.chains.iter().all(Option::is_some),
            refusals: self.refused(),
        })
    }

    /// The share as we write it (what nft would list right after our own commit).
    pub(super) fn written(share: Option<&DesiredShare>) -> Self {
        let Some(share) = share else {
            return LiveShare::default();
        };
        let rules = |specs: &Vec<RuleSpec>| {
            specs
                .iter()
                .map(|r| LiveRuleSpec {
                    statements: r.statements.clone(),
                    comment: Some(r.comment.clone()),
                    counters: None,
                })
                .collect()
        };
        LiveShare {
            hook: Some(planned_hook()),
            chains: share.chains.each_ref().map(|c| Some(rules(c))),
            sets: share
                .sets
                .iter()
                .map(|s| (s.clone(), planned_flags(s)))
                .collect(),
        }
    }
}

fn planned_hook() -> ChainHook {
    ChainHook {
        kind: "filter".into(),
        hook: "forward".into(),
        priority: FORWARD_PRIORITY,
        policy: "accept".into(),
    }
}

fn planned_flags(set: &DynamicSet) -> u32 {
    let mut flags = SetFlags::Eval;
    if set.timeout_ms.is_some() {
        flags |= SetFlags::Timeout;
    }
    flags.bits()
}

/// Reads the share's chains and sets of our table of `family`.
pub(super) fn read_share(t: &mut dyn Transport, family: Family) -> Result<LiveShare, Failure> {
    let table = super::render::TABLE;
    let mut live = LiveShare::default();
    let proto = wire::nfproto(family);
    for (index, name) in CHAINS.iter().enumerate() {
        let Some(chain) = read::chain(t, family, table, name)? else {
            continue;
        };
        if index == 0 {
            live.hook = chain.base.map(|(kind, hook, priority, policy)| ChainHook {
                kind,
                hook,
                priority,
                policy,
            });
        }
        let rules = read::rules(t, proto, table, name)?;
        live.chains[index] = Some(
            rules
                .iter()
                .map(crate::backend::nft_rule::live_rule)
                .collect(),
        );
    }
    live.sets = read::dynamic_sets(t, family, table, |n| SETS.contains(&n))?
        .into_iter()
        .map(|(set, flags)| (set, flags.bits()))
        .collect();
    Ok(live)
}

/// How the share differs: the differences, whether the table must be made anew (a share no
/// longer planned, another hook, a set declared otherwise or not planned), whether the
/// walk or hook chain must be rewritten, and whether the limits must be made anew.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ShareDrift {
    pub differences: Vec<Difference>,
    pub recreate: bool,
    pub rewrite: bool,
    pub fresh_limits: bool,
}

impl ShareDrift {
    /// A difference of the share: whatever part differs, its kind is `ShareDiffers`, apart
    /// from the masquerade's own kinds (`_part` says which it would be there).
    fn push(&mut self, family: Family, _part: DriftKind, detail: String) {
        self.differences.push(Difference {
            family,
            kind: DriftKind::ShareDiffers,
            position: None,
            detail,
        });
    }

    /// The forward chain's hook: another one needs the table made anew.
    fn hook(&mut self, family: Family, live: Option<&ChainHook>) {
        match live {
            Some(hook) if *hook == planned_hook() => {}
            Some(hook) => {
                self.recreate = true;
                self.push(
                    family,
                    DriftKind::HookDiffers,
                    format!(
                        "chain {FORWARD} hooked as type {} hook {} priority {} policy {}, planned filter forward {FORWARD_PRIORITY} accept",
                        hook.kind, hook.hook, hook.priority, hook.policy
                    ),
                );
            }
            None => {
                self.rewrite = true;
                self.push(
                    family,
                    DriftKind::JumpMissing,
                    format!(
                        "no forward hook of ours (chain {FORWARD}): the pod share is not enforced"
                    ),
                );
            }
        }
    }

    /// Each chain's rules, in order; a limit or refusal chain that differs makes the limits
    /// anew.
    fn chains(&mut self, family: Family, desired: &DesiredShare, live: &LiveShare) {
        for (index, name) in CHAINS.iter().enumerate() {
            let want: Vec<(&str, &str)> = desired.chains[index]
                .iter()
                .map(|r| (r.statements.as_str(), r.comment.as_str()))
                .collect();
            let have: Option<Vec<(&str, &str)>> = live.chains[index].as_ref().map(|rules| {
                rules
                    .iter()
                    .map(|r| (r.statements.as_str(), r.comment.as_deref().unwrap_or("")))
                    .collect()
            });
            if have.as_ref() == Some(&want) {
                continue;
            }
            self.fresh_limits |= index >= 2;
            self.rewrite = true;
            let detail = match have {
                None => format!("chain {name} does not exist"),
                Some(have) => {
                    let missing: Vec<&str> = want
                        .iter()
                        .filter(|w| !have.contains(w))
                        .map(|w| w.0)
                        .collect();
                    let extra: Vec<&str> = have
                        .iter()
                        .filter(|h| !want.contains(h))
                        .map(|h| h.0)
                        .collect();
                    format!("chain {name}: rules missing {missing:?}, not planned {extra:?} (or in another order)")
                }
            };
            let kind = if index == 0 {
                DriftKind::JumpMissing
            } else {
                DriftKind::MissingRule
            };
            self.push(family, kind, detail);
        }
    }

    /// The sets: a missing one made with the limits, one declared otherwise or not planned
    /// made anew with the table.
    fn sets(&mut self, family: Family, desired: &DesiredShare, live: &LiveShare) {
        for set in &desired.sets {
            match live.sets.iter().find(|(s, _)| s.name == set.name) {
                None => {
                    self.rewrite = true;
                    self.fresh_limits = true;
                    let detail = format!("set {} does not exist", set.name);
                    self.push(family, DriftKind::MissingRule, detail);
                }
                Some((s, flags)) if s != set || *flags != planned_flags(set) => {
                    self.recreate = true;
                    let detail = format!(
                        "set {} is type {} flags {flags:#x}, planned type {}",
                        set.name,
                        wire::key_type_name(s.key_type),
                        wire::key_type_name(set.key_type)
                    );
                    self.push(family, DriftKind::SetDiffers, detail);
                }
                Some(_) => {}
            }
        }
        for (set, _) in &live.sets {
            if !desired.sets.iter().any(|s| s.name == set.name) {
                self.recreate = true;
                let detail = format!("set {} is not planned", set.name);
                self.push(family, DriftKind::ExtraRule, detail);
            }
        }
    }
}

/// How the share of `live` differs from `desired` (None: no share planned).
pub(super) fn diff(family: Family, desired: Option<&DesiredShare>, live: &LiveShare) -> ShareDrift {
    let mut drift = ShareDrift::default();
    let Some(desired) = desired else {
        if !live.is_empty() {
            drift.recreate = true;
            drift.push(
                family,
                DriftKind::ExtraRule,
                "the pod share's chains or sets are not planned (podConnectionLimit and podNewConnectionRate are unset)".into(),
            );
        }
        return drift;
    };
    drift.hook(family, live.hook.as_ref());
    drift.chains(family, desired, live);
    drift.sets(family, desired, live);
    drift
}
