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
mod nftables;
mod notify;
pub(crate) mod runner;
pub mod select;

pub use id::BackendId;

use crate::plan::{Action, Family, Names, Ruleset};
use ipnet::IpNet;

/// The peak memory of the agent and the tools it runs, as `scripts/bench` measures it in a
/// memory cgroup (first apply or a one-CIDR change, whichever is worse): a base plus a slope
/// per 10,000 CIDRs, both rounded up from the measurements so the estimate is never below them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryModel {
    pub base_mib: u64,
    pub per_10k_cidrs_mib: u64,
}

impl MemoryModel {
    /// Estimated peak bytes with `cidrs` CIDRs in the list.
    pub fn peak(&self, cidrs: usize) -> u64 {
        let mib = self.base_mib as f64 + self.per_10k_cidrs_mib as f64 * cidrs as f64 / 10_000.0;
        (mib * 1_048_576.0).ceil() as u64
    }

    /// The most CIDRs whose estimated peak fits in `bytes`.
    pub fn ceiling(&self, bytes: u64) -> usize {
        let mib = bytes as f64 / 1_048_576.0 - self.base_mib as f64;
        if mib <= 0.0 || self.per_10k_cidrs_mib == 0 {
            return 0;
        }
        (mib / self.per_10k_cidrs_mib as f64 * 10_000.0).floor() as usize
    }
}

/// What every backend does. All methods are blocking; the agent calls them off its runtime.
pub trait Backend: Send {
    /// Which backend this is.
    fn id(&self) -> BackendId;
    /// Its name for logs and metrics, e.g. `iptables-nft` (the id's one spelling).
    fn name(&self) -> String {
        self.id().to_string()
    }
    /// Whether this backend can install rules under `names` (e.g. iptables' 28-character
    /// chain limit); the reason when it cannot.
    fn accepts(&self, names: &Names) -> Result<(), String>;
    /// Whether MASQUERADE can randomise ports fully here.
    fn supports_random_fully(&self) -> Result<bool, BackendError> {
        Ok(true)
    }
    /// Called once by the holder of the node lock before its first sync: where this backend
    /// can remove another backend's leftovers in the same transaction as its own first
    /// install, it does so then (nftables takes over iptables-nft's chain and jumps).
    fn take_over_at_first_install(&self) {}
    /// What a cleanup of `family` removed (or would remove), in this backend's own words:
    /// `1 jump from POSTROUTING and chain IP-MASQ-AGENT`, `table ip ipmasq`.
    fn removed_words(&self, report: &CleanupReport, names: &Names) -> String {
        let mut parts = Vec::new();
        if report.jumps_removed > 0 {
            let s = if report.jumps_removed == 1 { "" } else { "s" };
            parts.push(format!("{} jump{s} from POSTROUTING", report.jumps_removed));
        }
        if report.chain_removed {
            parts.push(format!("chain {}", names.chain));
        }
        parts.join(" and ")
    }
    /// How much memory applying a list takes with this backend (see [`MemoryModel`]).
    fn memory_model(&self) -> MemoryModel;
    /// Where our rules live, for people: `IP-MASQ-AGENT in table nat`.
    fn location(&self, names: &Names) -> String {
        format!("{} in table nat", names.chain)
    }
    /// What an entry jump is called in this backend, for people.
    fn entry_phrase(&self) -> &'static str {
        "POSTROUTING jumps here"
    }
    /// Whether the tools for `family` are installed (IPv6 may lack them).
    fn family_available(&self, _family: Family) -> bool {
        true
    }
    /// Observes the live state, compares it with `desired` and, when they differ and this is
    /// not a dry run, applies ONE transaction that touches only what we own.
    fn sync(&self, desired: &Ruleset, dry_run: bool) -> Result<SyncReport, BackendError>;
    /// Reads what we own, with counters, without creating anything.
    fn inspect(&self, family: Family, names: &Names) -> Result<Inspection, BackendError>;
    /// Every difference between `desired` and an inspection, in the vocabulary `sync` repairs.
    fn compare(&self, desired: &Ruleset, live: &Inspection) -> Vec<Difference>;
    /// Removes what we own for `family` in one transaction; nothing to remove is success.
    fn cleanup(
        &self,
        family: Family,
        names: &Names,
        dry_run: bool,
    ) -> Result<CleanupReport, BackendError>;
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
    #[error("{0}")]
    Unsupported(String),
    /// The live state could not be read completely; nothing is written on such a reading.
    #[error("{program} cannot show the {table} table: {detail}")]
    Unreadable {
        program: String,
        table: String,
        detail: String,
    },
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
        }
    }

    /// The repair this difference needs, as the metrics' `kind` label and the logs name it
    /// (documented since step 4: a rule-level difference is repaired by `rules_differ`).
    pub fn repair(self) -> &'static str {
        match self {
            DriftKind::ChainMissing => "chain_missing",
            DriftKind::MissingRule | DriftKind::ExtraRule | DriftKind::OutOfOrder => "rules_differ",
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
}

/// Packet and byte counters of a rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
}

/// One live rule taken apart for display.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleView {
    /// The verdict: `RETURN`, `MASQUERADE`, or whatever a foreign rule does.
    pub action: String,
    /// Source match: CIDRs joined by `,`, with a leading `!` when negated (`!10.0.0.0/8`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub destination: Option<String>,
    pub protocol: Option<String>,
    pub to_ports: Option<String>,
    pub random_fully: bool,
    pub probability: Option<String>,
    pub comment: Option<String>,
    /// Options we do not write ourselves (a foreign or hand-edited rule), as the backend
    /// prints them.
    pub other: Vec<String>,
}

/// A live rule mapped back to a plan decision, where it is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveDecision {
    /// None for a rule that matches every destination (the masquerade catch-all).
    pub destination: Option<IpNet>,
    pub action: Action,
}

/// One rule of what we own, as it is live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveRule {
    /// 1-based position.
    pub number: usize,
    pub view: RuleView,
    pub decision: Option<LiveDecision>,
    pub counters: Option<Counters>,
    /// The rule in the backend's own text.
    pub text: String,
}

/// A rule of the hook (POSTROUTING) that sends traffic to what we own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryJump {
    /// 1-based position in the hook.
    pub position: usize,
    /// The rule in the backend's own text.
    pub text: String,
    pub counters: Option<Counters>,
}

/// What one family holds of ours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    pub installed: bool,
    pub rules: Vec<LiveRule>,
    pub entry_jumps: Vec<EntryJump>,
    /// How many rules the hook holds in all.
    pub hook_rules: usize,
    /// The backend's own full reading, when `compare` needs more than the rules above.
    pub raw: Option<String>,
}

/// What the live rules do with one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveVerdict {
    pub action: Action,
    /// Index into `Inspection::rules` of the rule that decided; None when the packet never
    /// entered (nothing installed, no entry jump) or fell off the end.
    pub rule: Option<usize>,
    pub reason: LiveReason,
    /// Rules with matches this walk cannot judge (foreign options), taken as not matching.
    pub unjudged: Vec<usize>,
}

/// Why the live rules gave their verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LiveReason {
    NotInstalled,
    NoEntryJump,
    RuleMatched,
    FellThrough,
}

/// Whether `addr` satisfies a [`RuleView::source`] match (absent: every source does).
fn source_holds(spec: Option<&str>, addr: std::net::IpAddr) -> bool {
    let Some(spec) = spec else { return true };
    let (negated, list) = match spec.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let inside = list.split(',').any(|item| {
        item.trim()
            .parse::<IpNet>()
            .or_else(|_| item.trim().parse::<std::net::IpAddr>().map(IpNet::from))
            .is_ok_and(|net| net.contains(&addr))
    });
    inside != negated
}

impl Inspection {
    /// Walks the live rules as the kernel does for a packet from `src` to a non-local `dst`:
    /// first match wins, RETURN keeps the source, MASQUERADE rewrites it; a port-range rule
    /// counts as MASQUERADE whatever its protocol or probability (every such rule masquerades).
    pub fn evaluate(&self, src: std::net::IpAddr, dst: std::net::IpAddr) -> LiveVerdict {
        let outcome = |action, rule, reason, unjudged| LiveVerdict {
            action,
            rule,
            reason,
            unjudged,
        };
        if !self.installed {
            return outcome(
                Action::KeepSource,
                None,
                LiveReason::NotInstalled,
                Vec::new(),
            );
        }
        if self.entry_jumps.is_empty() {
            return outcome(
                Action::KeepSource,
                None,
                LiveReason::NoEntryJump,
                Vec::new(),
            );
        }
        let mut unjudged = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let view = &rule.view;
            let action = match view.action.as_str() {
                "RETURN" => Action::KeepSource,
                "MASQUERADE" => Action::Masquerade,
                _ => {
                    unjudged.push(index);
                    continue;
                }
            };
            if !view.other.is_empty() {
                unjudged.push(index);
                continue;
            }
            let destination_holds = match &view.destination {
                None => true,
                Some(text) => match text.parse::<IpNet>() {
                    Ok(net) => net.contains(&dst),
                    Err(_) => text.parse::<std::net::IpAddr>().is_ok_and(|a| a == dst),
                },
            };
            if destination_holds && source_holds(view.source.as_deref(), src) {
                return outcome(action, Some(index), LiveReason::RuleMatched, unjudged);
            }
        }
        outcome(Action::KeepSource, None, LiveReason::FellThrough, unjudged)
    }

    /// Whether anything of ours is there.
    pub fn holds_anything(&self) -> bool {
        self.installed || !self.entry_jumps.is_empty()
    }
}

/// The result of removing what we own for one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanupReport {
    pub family: Family,
    pub jumps_removed: usize,
    pub chain_removed: bool,
    /// The transaction that was (or would be) applied; None when there was nothing.
    pub transaction: Option<String>,
}
