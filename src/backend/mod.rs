//! Firewall backends behind one narrow seam: only the plan's neutral [`Ruleset`] goes in, and
//! only neutral reports come out ([`SyncReport`], [`Inspection`], [`CleanupReport`], drift in
//! one vocabulary: [`DriftKind`]). Everything a backend spells its own way (iptables' saved
//! form, its transactions, its limits) is private to its folder. `select` turns a neutral
//! choice into a backend; `fake` is an in-memory backend for unit tests only.

#[cfg(test)]
pub(crate) mod fake;
mod generation;
#[cfg(test)]
pub(crate) mod golden;
mod id;
mod iptables;
mod nat_before;
mod nft_rule;
mod nftables;
pub(crate) use nftables::hold_tables;
pub(crate) mod runner;
pub mod select;
#[cfg(test)]
pub(crate) mod tests;

pub use crate::plan::live::{
    AddressMatch, Before, Counters, EntryJump, HookStatus, Inspection, LiveReason, LiveRule,
    LiveVerdict, Matches, RuleVerdict, Weight,
};
pub use id::BackendId;

use crate::plan::{Family, Names, Ruleset};
use ipnet::IpNet;

/// What a backend writes for a plan: the rules of our chain and the elements of our sets (an
/// nftables anonymous set's too). The memory of applying a config follows these, not the
/// CIDRs it lists: 2,000 `masqueradeSourceCIDRs` are one nftables rule but tens of thousands
/// of iptables rules (one per block of their complement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Footprint {
    pub rules: usize,
    pub set_elements: usize,
    /// The rules as the text a tool is fed (iptables-restore's input; 0 for nftables, which
    /// sends netlink): iptables-nft's memory follows it more than the rule count.
    pub rule_text_bytes: usize,
}

impl std::ops::Add for Footprint {
    type Output = Footprint;
    fn add(self, other: Footprint) -> Footprint {
        Footprint {
            rules: self.rules + other.rules,
            set_elements: self.set_elements + other.set_elements,
            rule_text_bytes: self.rule_text_bytes + other.rule_text_bytes,
        }
    }
}

impl std::iter::Sum for Footprint {
    fn sum<I: Iterator<Item = Footprint>>(iter: I) -> Footprint {
        iter.fold(Footprint::default(), |a, b| a + b)
    }
}

impl std::fmt::Display for Footprint {
    /// `39908 rules, 5.7 MiB as text`, or `4 rules and 2004 set elements`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::text::plural(self.rules, "rule"))?;
        if self.rule_text_bytes > 0 {
            write!(
                f,
                ", {} as text",
                crate::text::mib(self.rule_text_bytes as u64)
            )?;
        }
        if self.set_elements > 0 {
            let elements = crate::text::plural(self.set_elements, "set element");
            write!(f, " and {elements}")?;
        }
        Ok(())
    }
}

/// What grows with a plain list of one backend: one rule per CIDR (iptables) or one set
/// element (nftables). How many fit a limit is said in this unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListUnit {
    Rules,
    SetElements,
}

impl ListUnit {
    /// The unit's words for `count` of it.
    pub fn words(self, count: usize) -> String {
        match self {
            ListUnit::Rules => crate::text::plural(count, "rule"),
            ListUnit::SetElements => crate::text::plural(count, "set element"),
        }
    }
}

/// The share of the limit a config's estimated peak may take: the rest is headroom for what
/// the estimate does not see (the runtime's own pages, a slow kernel reclaim).
pub const USABLE_PERCENT: u64 = 90;

/// The peak memory of the agent and the tools it runs, as `scripts/bench --only memory`
/// measures it in a memory cgroup (the worst of first apply and a one-CIDR change, over plain
/// lists and the hostile shapes of `tests/hostile/long-source-lists.py`): a base plus slopes
/// per 10,000 rules, per MiB of rule text and per 10,000 set elements the backend writes
/// ([`Footprint`]), rounded up from the measurements so the estimate is never below them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryModel {
    pub base_mib: u64,
    pub per_10k_rules_mib: u64,
    pub per_mib_of_rule_text_mib: u64,
    pub per_10k_set_elements_mib: u64,
    /// What a plain list's CIDR adds.
    pub unit: ListUnit,
}

impl MemoryModel {
    /// Estimated peak bytes of applying what `footprint` counts.
    pub fn peak(&self, footprint: Footprint) -> u64 {
        let mib = self.base_mib as f64
            + self.per_10k_rules_mib as f64 * footprint.rules as f64 / 10_000.0
            + self.per_mib_of_rule_text_mib as f64 * footprint.rule_text_bytes as f64 / 1_048_576.0
            + self.per_10k_set_elements_mib as f64 * footprint.set_elements as f64 / 10_000.0;
        (mib * 1_048_576.0).ceil() as u64
    }

    /// The most of [`Self::unit`] (rules, or set elements) of a plain list whose estimated
    /// peak fits in `bytes`: a plain list's rule is `-d CIDR`, its comment and `-j RETURN`.
    pub fn ceiling(&self, bytes: u64) -> usize {
        /// The text of one plain rule of the default chain (a /32 of 10.0.0.0/8).
        const PLAIN_RULE_TEXT_BYTES: f64 = 126.0;
        let mib = bytes as f64 / 1_048_576.0 - self.base_mib as f64;
        let per_unit_mib = match self.unit {
            ListUnit::Rules => {
                self.per_10k_rules_mib as f64 / 10_000.0
                    + self.per_mib_of_rule_text_mib as f64 * PLAIN_RULE_TEXT_BYTES / 1_048_576.0
            }
            ListUnit::SetElements => self.per_10k_set_elements_mib as f64 / 10_000.0,
        };
        if mib <= 0.0 || per_unit_mib <= 0.0 {
            return 0;
        }
        (mib / per_unit_mib).floor() as usize
    }
}

/// A plan's estimated cost with one backend: what it writes and the peak memory that takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    pub footprint: Footprint,
    /// Bytes, agent and tools together ([`MemoryModel::peak`]).
    pub peak: u64,
}

impl Estimate {
    /// What backend `id` writes for every family of a plan, and its peak.
    pub fn of(id: BackendId, rulesets: &[Ruleset]) -> Estimate {
        let footprint = rulesets.iter().map(|r| id.footprint(r)).sum();
        Estimate {
            footprint,
            peak: id.memory_model().peak(footprint),
        }
    }
}

/// What every backend must answer about the node, and nothing its identity already tells
/// ([`BackendId`] answers the rest: names it accepts, where its rules live, its memory model
/// and footprint, whether a family may hold ours). All methods are blocking; the agent calls
/// them off its runtime. A backend's state between passes (what it wrote, what the kernel
/// refused) is its own, changed only by the calls that take `&mut self`.
pub trait Backend: Send {
    /// Which backend this is.
    fn id(&self) -> BackendId;
    /// Whether the tools for `family` are installed (IPv6 may lack them).
    fn family_available(&self, _family: Family) -> bool {
        true
    }
    /// Called once by the holder of the node lock before its first sync: where this backend
    /// can remove another backend's leftovers in the same transaction as its own first
    /// install, it does so then (nftables takes over iptables-nft's chain and jumps).
    fn take_over_at_first_install(&mut self) {}
    /// Observes the live state, compares it with `desired` and, when they differ and this is
    /// not a dry run, applies ONE transaction that touches only what we own.
    fn sync(&mut self, desired: &Ruleset, dry_run: bool) -> Result<SyncReport, BackendError>;
    /// Reads what we own, with counters, without creating anything.
    fn inspect(&self, family: Family, names: &Names) -> Result<Inspected, BackendError>;
    /// Every difference between `desired` and what `inspect` read, in the vocabulary `sync`
    /// repairs.
    fn compare(&self, desired: &Ruleset, live: &Inspected) -> Vec<Difference>;
    /// New connections each part of the pod share refused in `family` (its rules' counters),
    /// read without creating anything; empty when the backend holds no share of ours.
    fn pod_share_refusals(
        &self,
        _family: Family,
        _names: &Names,
    ) -> Result<Vec<crate::plan::live::ShareRefusals>, BackendError> {
        Ok(Vec::new())
    }
    /// Removes what we own for `family` in one transaction; nothing to remove is success.
    fn cleanup(
        &mut self,
        family: Family,
        names: &Names,
        dry_run: bool,
    ) -> Result<CleanupReport, BackendError>;
}

impl dyn Backend + '_ {
    /// Its name for logs and metrics, e.g. `iptables-nft` (the id's one spelling).
    pub fn name(&self) -> String {
        self.id().to_string()
    }
}

/// What [`Backend::inspect`] read of one family: the neutral [`Inspection`] every reader
/// judges by, and the backend's own reading that its [`Backend::compare`] needs.
#[derive(Clone, Debug, Default)]
pub struct Inspected {
    pub inspection: Inspection,
    pub(crate) reading: Reading,
}

impl Inspected {
    /// An inspection whose backend compares from it alone (the fake).
    #[cfg(test)]
    pub(crate) fn neutral(inspection: Inspection) -> Inspected {
        Inspected {
            inspection,
            reading: Reading::Neutral,
        }
    }
}

/// A backend's own reading behind an inspection, typed per backend.
#[derive(Clone, Debug, Default)]
pub(crate) enum Reading {
    /// Nothing beyond the inspection (iptables rebuilds its chain from the rules it lists);
    /// also what a family never read holds.
    #[default]
    Neutral,
    /// nftables: the table as read, its set elements and rules in its own form.
    Table(Box<nftables::LiveTable>),
    /// iptables: the pod share's chains as the filter table lists them (the nat chain is
    /// rebuilt from the inspection).
    FilterShare(Box<iptables::SavedShare>),
}

/// Why the backend could not read or write the rules.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("{program} not found: install iptables (Debian: apt-get install iptables)")]
    Missing { program: String },
    #[error("{program}: permission denied; needs CAP_NET_ADMIN (try sudo): {detail}")]
    Permission { program: String, detail: String },
    #[error("{program} failed (exit {}): {detail}", code.map_or("signal".to_string(), |c| c.to_string()))]
    Failed {
        program: String,
        code: Option<i32>,
        detail: String,
    },
    #[error("{0}")]
    Run(String),
    /// nf_tables (over netlink) refused a request or did not answer in time.
    #[error("{0}")]
    Netlink(String),
    #[error("{0}")]
    Unsupported(String),
    /// This node cannot serve the config (an output address it does not hold): nothing is
    /// written, the last good rules stay.
    #[error("{0}")]
    Node(String),
    /// The live state could not be read completely; nothing is written on such a reading.
    #[error("{program} cannot show the {table} table: {detail}")]
    Unreadable {
        program: String,
        table: String,
        detail: String,
    },
}

impl BackendError {
    /// A plan whose output address names no address of this node: never written.
    pub(crate) fn unresolved(target: crate::config::egress::EgressTarget) -> Self {
        BackendError::Unsupported(format!(
            "the output address {target} is not resolved to an address of this node"
        ))
    }
}

/// One kind of difference between the live state and the plan: the one vocabulary of the
/// repair, the logs, the metrics, `show` and its JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DriftKind {
    /// What we own (the chain) does not exist.
    ChainMissing,
    /// A planned rule is not there.
    MissingRule,
    /// A rule is there that the plan does not have (foreign or stale).
    ExtraRule,
    /// The planned rules are all there, in another order.
    OutOfOrder,
    /// Nothing sends traffic to what we own.
    JumpMissing,
    /// More than one identical entry jump.
    JumpDuplicated,
    /// An entry jump with another spelling (e.g. an older comment).
    JumpStale,
    /// Hooked, but local destinations do not leave first (nftables' `fib daddr type local
    /// return` missing or not first): traffic to the node's own addresses is masqueraded.
    LocalSkipMissing,
    /// Our base chain is hooked elsewhere (type, hook, priority or policy).
    HookDiffers,
    /// Our set has another type or flags.
    SetDiffers,
    /// A table with our name that does not carry our mark (a neighbour's, or made by an
    /// ipmasq before the mark): made anew, marked.
    TableUnmarked,
    /// The pod share's rules (their chains, or the forward hook's jump to them) are not the
    /// plan's: apart from the masquerade's own kinds, so a share added or repaired never
    /// reads as a fresh install or a bypass of the masquerade.
    ShareDiffers,
}

impl DriftKind {
    /// The name `show` prints and its JSON carries.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftKind::ChainMissing => "chain-missing",
            DriftKind::MissingRule => "missing-rule",
            DriftKind::ExtraRule => "extra-rule",
            DriftKind::OutOfOrder => "out-of-order",
            DriftKind::JumpMissing => "jump-missing",
            DriftKind::JumpDuplicated => "jump-duplicated",
            DriftKind::JumpStale => "jump-stale",
            DriftKind::LocalSkipMissing => "local-skip-missing",
            DriftKind::HookDiffers => "hook-differs",
            DriftKind::SetDiffers => "set-differs",
            DriftKind::TableUnmarked => "table-unmarked",
            DriftKind::ShareDiffers => "share-differs",
        }
    }

    /// The repair this difference needs, as the metrics' `kind` label and the logs name it
    /// (documented since the metrics shipped: a rule-level difference is repaired by
    /// `rules_differ`).
    pub fn repair(self) -> &'static str {
        match self {
            DriftKind::ChainMissing => "chain_missing",
            DriftKind::MissingRule
            | DriftKind::ExtraRule
            | DriftKind::OutOfOrder
            | DriftKind::LocalSkipMissing
            | DriftKind::HookDiffers
            | DriftKind::SetDiffers
            | DriftKind::TableUnmarked
            | DriftKind::ShareDiffers => "rules_differ",
            DriftKind::JumpMissing => "jump_missing",
            DriftKind::JumpDuplicated => "jump_duplicate",
            DriftKind::JumpStale => "jump_stale",
        }
    }

    /// Every repair label, for metric help texts and docs.
    pub const REPAIRS: [&'static str; 5] = [
        "chain_missing",
        "rules_differ",
        "jump_missing",
        "jump_duplicate",
        "jump_stale",
    ];
}

/// One way the live state differs from the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub family: Family,
    pub kind: DriftKind,
    /// Rule number (in the plan for a missing rule, live otherwise), or entry-jump position.
    pub position: Option<usize>,
    pub detail: String,
}

/// The outcome of syncing one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncReport {
    pub family: Family,
    /// Empty when live already matched the plan (nothing was written).
    pub differences: Vec<Difference>,
    /// The transaction that was (or, in a dry run, would be) applied, in the backend's text.
    pub transaction: Option<String>,
    /// Rules in what we own after the sync.
    pub rules: usize,
}

impl SyncReport {
    pub fn in_sync(&self) -> bool {
        self.differences.is_empty()
    }

    /// The repairs this sync made (or would make), each once, in the order found.
    pub fn repairs(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for d in &self.differences {
            let label = d.kind.repair();
            if !out.contains(&label) {
                out.push(label);
            }
        }
        out
    }

    /// Whether this sync installed from nothing (rather than repaired).
    pub fn installed_fresh(&self) -> bool {
        let has = |k| self.differences.iter().any(|d| d.kind == k);
        has(DriftKind::ChainMissing) && has(DriftKind::JumpMissing)
    }

    /// Whether, before this sync, no packet reached our rules: the jump was missing (a fresh
    /// node, or a neighbour's flush of `POSTROUTING` or of our table). Flows tracked in that
    /// gap were decided without our rules.
    pub fn rules_were_bypassed(&self) -> bool {
        self.differences
            .iter()
            .any(|d| d.kind == DriftKind::JumpMissing)
    }
}

/// A prefix or a bare address (a host prefix) as both backends print them.
pub(crate) fn net_or_host(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .ok()
}

/// One address with an optional port range, as both backends print SNAT's target:
/// `10.0.0.5`, `10.0.0.5:1024-2000`, `fd00::5`, `[fd00::5]:1024-2000`. None for anything
/// else (an address range, a map).
pub(crate) fn address_and_ports(text: &str) -> Option<(std::net::IpAddr, Option<(u16, u16)>)> {
    if let Ok(address) = text.parse() {
        return Some((address, None));
    }
    let (address, range) = match text.strip_prefix('[') {
        Some(rest) => rest.split_once("]:")?,
        None => text.rsplit_once(':')?,
    };
    Some((address.parse().ok()?, Some(port_range(range)?)))
}

/// A port range as both backends print it: `1024-29999`, or one port (`80`).
pub(crate) fn port_range(text: &str) -> Option<(u16, u16)> {
    match text.split_once('-') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => {
            let port = text.parse().ok()?;
            Some((port, port))
        }
    }
}

/// One object a cleanup removed (or would remove), typed, so each backend is described in its
/// own words by the one who prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Removed {
    /// An iptables chain of the nat table, with the POSTROUTING jumps to it.
    Chain { chain: String, jumps: usize },
    /// Jumps from POSTROUTING to a chain that does not exist.
    Jumps { chain: String, jumps: usize },
    /// An nftables table (`ip ipmasq`), with everything in it.
    Table { family: String, table: String },
}

/// One removed object in its backend's own words: `1 jump from POSTROUTING and chain
/// IP-MASQ-AGENT`, `table ip ipmasq`.
impl std::fmt::Display for Removed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let jumps = |n: usize| crate::text::plural(n, "jump") + " from POSTROUTING";
        match self {
            Removed::Chain { chain, jumps: 0 } => write!(f, "chain {chain}"),
            Removed::Chain { chain, jumps: n } => write!(f, "{} and chain {chain}", jumps(*n)),
            Removed::Jumps { jumps: n, .. } => f.write_str(&jumps(*n)),
            Removed::Table { family, table } => write!(f, "table {family} {table}"),
        }
    }
}

impl Removed {
    /// What a cleanup removed (or would remove), each object in its backend's words, joined
    /// with commas.
    pub fn words(removed: &[Removed]) -> String {
        let words: Vec<String> = removed.iter().map(Removed::to_string).collect();
        words.join(", ")
    }
}

/// The result of removing what we own for one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanupReport {
    pub family: Family,
    /// Empty when there was nothing to remove.
    pub removed: Vec<Removed>,
    /// What carries our name but not our mark, left in place, each with why (a neighbour's
    /// nftables table called `ipmasq`).
    pub left: Vec<String>,
    /// The transaction that was (or would be) applied; None when there was nothing.
    pub transaction: Option<String>,
}
