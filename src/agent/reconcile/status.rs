//! The status stage of a pass: what the other stages report, gathered into the [`Status`]
//! that health and metrics serve, and the readiness and retry wait that follow from the pass.

use super::admission::Admission;
use super::enforce::EnforceCounts;
use super::Pass;
use crate::plan::Family;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Histogram of sync durations (seconds), 1 ms to about 16 s.
#[derive(Clone, Debug)]
pub struct SyncTimes(pub prometheus_client::metrics::histogram::Histogram);

impl Default for SyncTimes {
    fn default() -> Self {
        SyncTimes(prometheus_client::metrics::histogram::Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 15),
        ))
    }
}

/// Counters and facts about the agent, for health and metrics.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub sync_duration: SyncTimes,
    pub syncs_ok: u64,
    pub syncs_failed: u64,
    pub configs_accepted: u64,
    pub configs_rejected: u64,
    pub drift_repairs: BTreeMap<&'static str, u64>,
    /// Syncs that rewrote the rules because the plan changed (not drift).
    pub config_changes_applied: u64,
    pub last_pass: Option<Instant>,
    pub last_success: Option<Instant>,
    /// Whether the config in force is the one on disk (false while a bad file is ignored).
    pub config_current: bool,
    /// Rules in our chain per family after the last successful sync.
    pub rules: BTreeMap<Family, usize>,
    /// The reason the agent is not ready, if it is not.
    pub not_ready: Option<String>,
    /// Why the config the source holds is refused, while the last good one stays in force
    /// (`/readyz` says it after its `ok`).
    pub config_rejected: Option<String>,
    /// Failed syncs since the last successful one (drives the retry backoff).
    pub consecutive_failures: u32,
    /// How long the loop waits before the next pass (shorter than the interval while a
    /// failed sync is retried).
    pub next_pass_in: Duration,
    pub non_masquerade_cidrs: usize,
    /// Conntrack entries deleted so their flows follow a change.
    pub conntrack_entries_reset: u64,
    /// Changes after which the conntrack reset failed (the rules were applied).
    pub conntrack_resets_failed: u64,
    /// Each managed family whose config names an output address, with why it masquerades
    /// instead while the node holds no address in that value (None: SNAT to it).
    pub egress_fallback: BTreeMap<Family, Option<String>>,
}

/// What one pass reports to the status stage.
pub struct PassReport<'a> {
    pub pass: &'a Pass,
    /// When the sync (node facts, plan, enforce) started and when the pass ended.
    pub timing: (Instant, Instant),
    pub admission: &'a Admission,
    pub enforce: &'a EnforceCounts,
    pub egress_fallback: &'a BTreeMap<Family, Option<String>>,
}

impl Status {
    /// Takes in what one pass did (the wait before the next is set by the caller).
    pub fn record(&mut self, report: &PassReport) {
        let (started, now) = report.timing;
        let counts = &report.admission.counts;
        self.configs_accepted = counts.configs_accepted;
        self.configs_rejected = counts.configs_rejected;
        self.config_current = counts.config_current;
        self.config_rejected = report.admission.rejection().map(|rejection| {
            // With the file's path, as `show` and the log say it (`PATH:1:22: [code] …`).
            if rejection.located.is_empty() {
                rejection.diagnostic.clone()
            } else {
                rejection.located.join("; ")
            }
        });
        self.non_masquerade_cidrs = counts.non_masquerade_cidrs;
        self.drift_repairs.clone_from(&report.enforce.drift_repairs);
        self.config_changes_applied = report.enforce.config_changes_applied;
        self.conntrack_entries_reset = report.enforce.conntrack_entries_reset;
        self.conntrack_resets_failed = report.enforce.conntrack_resets_failed;
        self.egress_fallback.clone_from(report.egress_fallback);
        if !matches!(report.pass, Pass::NoValidConfig) {
            self.sync_duration
                .0
                .observe(now.duration_since(started).as_secs_f64());
        }
        self.last_pass = Some(now);
        let memory_refusal = report.admission.memory_refusal();
        match report.pass {
            Pass::Synced(families) => {
                self.syncs_ok += 1;
                self.consecutive_failures = 0;
                self.last_success = Some(now);
                // Synced with the last good config; a config refused for memory is not ready.
                self.not_ready = memory_refusal.cloned();
                for f in families {
                    self.rules.insert(f.family, f.rules);
                }
            }
            Pass::NoValidConfig => {
                self.not_ready = Some(
                    memory_refusal
                        .cloned()
                        .unwrap_or_else(|| "no valid config has been applied yet".to_string()),
                );
            }
            Pass::Failed(err) => {
                self.syncs_failed += 1;
                self.consecutive_failures += 1;
                self.not_ready = Some(format!("last sync failed: {err}"));
            }
        }
    }
}
