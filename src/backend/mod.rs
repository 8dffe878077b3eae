//! Firewall backends: a narrow trait (observe our chain, apply one transaction), the iptables
//! implementation with its legacy and nft variants, the process runner, and an in-memory fake
//! for unit tests of the reconcile logic (never a substitute for the root tests).

pub mod fake;
pub mod iptables;
pub mod runner;

use crate::plan::{ChainName, Family, Ruleset};
pub use iptables::LiveChain;

/// What a backend can do.
pub trait Backend {
    /// A short name for logs and metrics, e.g. `iptables-nft`.
    fn name(&self) -> String;
    /// Reads our chain and the jumps to it: one reader process per call.
    fn observe(&self, family: Family, chain: &ChainName) -> Result<LiveChain, BackendError>;
    /// Applies one transaction (an iptables-restore script) atomically.
    fn apply(&self, family: Family, script: &str) -> Result<(), BackendError>;
    /// Like `observe`, with counters, and without creating any table that does not exist.
    fn inspect(&self, family: Family, chain: &ChainName) -> Result<LiveChain, BackendError> {
        self.observe(family, chain)
    }
}

impl Backend for iptables::Iptables {
    fn name(&self) -> String {
        iptables::Iptables::name(self)
    }
    fn observe(&self, family: Family, chain: &ChainName) -> Result<LiveChain, BackendError> {
        iptables::Iptables::observe(self, family, chain)
    }
    fn inspect(&self, family: Family, chain: &ChainName) -> Result<LiveChain, BackendError> {
        iptables::Iptables::inspect(self, family, chain)
    }
    fn apply(&self, family: Family, script: &str) -> Result<(), BackendError> {
        self.restore(family, script)
    }
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
}

/// What differs between the live state and the plan, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DriftKind {
    /// Our chain does not exist.
    ChainMissing,
    /// Our chain exists but its rules differ (foreign, missing, extra or reordered rules).
    RulesDiffer,
    /// No POSTROUTING jump to our chain.
    JumpMissing,
    /// More than one identical jump.
    JumpDuplicate,
    /// A jump to our chain with another spelling (e.g. an older comment).
    JumpStale,
}

impl DriftKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DriftKind::ChainMissing => "chain_missing",
            DriftKind::RulesDiffer => "rules_differ",
            DriftKind::JumpMissing => "jump_missing",
            DriftKind::JumpDuplicate => "jump_duplicate",
            DriftKind::JumpStale => "jump_stale",
        }
    }
}

/// The difference for one family, and what the repair transaction must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    pub family: Family,
    pub kinds: Vec<DriftKind>,
    pub rewrite_chain: bool,
    /// Saved specs of jumps to delete.
    pub delete_jumps: Vec<String>,
    pub add_jump: bool,
}

impl Drift {
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}

/// The result of syncing one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilySync {
    pub family: Family,
    /// Empty when live already matched the plan (nothing was written).
    pub drift: Drift,
    /// The transaction that was (or, in a dry run, would be) applied.
    pub transaction: Option<String>,
    /// Rules in our chain after the sync.
    pub rules: usize,
}

/// Observes, diffs and, when they differ, applies one transaction for one family.
pub fn sync_family(
    backend: &dyn Backend,
    ruleset: &Ruleset,
    dry_run: bool,
) -> Result<FamilySync, BackendError> {
    let started = std::time::Instant::now();
    let desired = iptables::Rendered::new(ruleset);
    let rendered = started.elapsed();
    let live = backend.observe(ruleset.family, &ruleset.chain)?;
    let observed = started.elapsed();
    let drift = iptables::diff(&desired, &live);
    let transaction = (!drift.is_empty()).then(|| iptables::transaction(&desired, &drift));
    let planned = started.elapsed();
    if let (Some(script), false) = (&transaction, dry_run) {
        backend.apply(ruleset.family, script)?;
    }
    tracing::debug!(
        family = %ruleset.family,
        render_ms = rendered.as_secs_f64() * 1e3,
        observe_ms = (observed - rendered).as_secs_f64() * 1e3,
        diff_ms = (planned - observed).as_secs_f64() * 1e3,
        apply_ms = (started.elapsed() - planned).as_secs_f64() * 1e3,
        "sync phases"
    );
    Ok(FamilySync {
        family: ruleset.family,
        drift,
        transaction,
        rules: ruleset.rules.len(),
    })
}

/// The result of removing our chain for one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyCleanup {
    pub family: Family,
    pub jumps_removed: usize,
    pub chain_removed: bool,
    pub transaction: Option<String>,
}

/// Removes every jump to our chain and the chain itself in one transaction.
pub fn cleanup_family(
    backend: &dyn Backend,
    family: Family,
    chain: &ChainName,
    dry_run: bool,
) -> Result<FamilyCleanup, BackendError> {
    let live = backend.inspect(family, chain)?;
    let transaction = iptables::cleanup_transaction(chain, &live);
    if let (Some(script), false) = (&transaction, dry_run) {
        backend.apply(family, script)?;
    }
    Ok(FamilyCleanup {
        family,
        jumps_removed: live.jumps.len(),
        chain_removed: live.chain_exists,
        transaction,
    })
}

/// One family of one iptables variant, as cleaned (or not) by [`cleanup_everywhere`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanupStep {
    pub backend: String,
    pub family: Family,
    pub outcome: Result<FamilyCleanup, BackendError>,
}

/// Removes our chain and jumps from both families of every given variant whose tools are
/// installed: one transaction per variant and family. Failures are collected, not fatal, so
/// every leftover that can be removed is.
pub fn cleanup_everywhere(
    chain: &ChainName,
    variants: &[iptables::Variant],
    dry_run: bool,
) -> Vec<CleanupStep> {
    let mut steps = Vec::new();
    for &variant in variants {
        let backend = iptables::Iptables::new(variant);
        for family in [Family::V4, Family::V6] {
            if !backend.installed(family) {
                continue;
            }
            steps.push(CleanupStep {
                backend: backend.name(),
                family,
                outcome: cleanup_family(&backend, family, chain, dry_run),
            });
        }
    }
    steps
}
