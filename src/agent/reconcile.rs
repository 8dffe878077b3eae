//! One reconcile pass: load the config, keep the last good one when the new one is invalid,
//! plan, and bring each family's chain in line with one transaction when it drifted. Also the
//! agent's status (what health and metrics report), updated by every pass.

use crate::backend::{Backend, BackendError, SyncReport};
use crate::config::{self, Config, Diagnostic, Origin};
use crate::plan::{plan, Family, PlanOptions};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// How long a config file that was emptied must stay empty before its emptiness is taken as
/// "use the defaults": a writer that truncates and then writes (`cat > file`) leaves it empty
/// for a moment, and upstream's defaults in that moment would masquerade what the config keeps.
pub const BLANK_GRACE: Duration = Duration::from_secs(2);

/// The first retry after a failed sync comes this soon (then 2 s, 4 s, ... up to the interval).
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The wait after `failures` failed syncs in a row: the interval when there is none, else
/// [`FIRST_RETRY`] doubled per further failure, capped at the interval.
fn backoff(failures: u32, interval: Duration) -> Duration {
    match failures {
        0 => interval,
        n => FIRST_RETRY
            .saturating_mul(1 << (n - 1).min(16))
            .min(interval),
    }
}

/// What the agent was started with.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: config::ConfigSource,
    pub options: config::Options,
    pub plan: PlanOptions,
    pub dry_run: bool,
    /// One pass and out (`--once`, `--dry-run`): a failure is not retried, and its log line
    /// does not say it will be.
    pub single_pass: bool,
    /// Which conntrack entries a change deletes (`--conntrack-reset`).
    pub conntrack_reset: crate::conntrack::judge::ResetScope,
}

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
    pub last_pass: Option<Instant>,
    pub last_success: Option<Instant>,
    /// Whether the config in force is the one on disk (false while a bad file is ignored).
    pub config_current: bool,
    /// Rules in our chain per family after the last successful sync.
    pub rules: BTreeMap<Family, usize>,
    /// The reason the agent is not ready, if it is not.
    pub not_ready: Option<String>,
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

/// The outcome of one pass.
#[derive(Debug)]
pub enum Pass {
    /// Rules checked (and repaired where needed) for every family.
    Synced(Vec<SyncReport>),
    /// No valid config has been seen yet: nothing is installed.
    NoValidConfig,
    /// The backend failed; the previous rules stay as they are.
    Failed(BackendError),
}

/// When the bytes of the config in force were read, and their digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveRead {
    pub digest: Option<String>,
    pub at: std::time::SystemTime,
}

/// The reconcile loop's state.
pub struct Reconciler {
    pub settings: Settings,
    backend: Box<dyn Backend>,
    /// The last valid config: enforced even while the file on disk is invalid.
    pub active: Option<Config>,
    /// Where the active config came from.
    pub active_origin: Option<Origin>,
    /// The digest of the active config's bytes and when they were read.
    pub active_read: Option<ActiveRead>,
    /// Fingerprint of the last config problem logged, so each is logged once per change.
    last_config_note: Option<u64>,
    /// The last file read and its result: unchanged bytes are not parsed again.
    config_cache: Option<config::SourceCache>,
    /// Config parses skipped because the file had not changed (for tests and debugging).
    pub config_parses_skipped: u64,
    /// The plan of the active config, made once per config.
    planned: Option<Vec<crate::plan::Ruleset>>,
    /// The families the last synced plan held: one the config no longer turns on
    /// (`enableIPv6: false` after true) has its rules removed.
    synced_families: Vec<crate::plan::Family>,
    last_error: Option<String>,
    pub status: Status,
    /// Set while a writer has the config file open (the directory watch sees it modified and
    /// not yet closed): the file is not read until it is whole.
    pub config_in_flux: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The last file read had content (so an empty one now is likely a rewrite in progress).
    had_content: bool,
    /// Since when the file has been seen empty after having content.
    blank_since: Option<Instant>,
    /// The memory the agent may use (its cgroup's limit), read at start; None: no limit.
    pub memory_limit: Option<u64>,
    /// What reading the limit found (logged once at start).
    pub memory_limit_found: super::memory::Limit,
    /// Why the config on disk was refused for memory, while it is: the agent is not ready.
    memory_refusal: Option<String>,
    /// The rulesets this agent last synced, per family: a change from one of them resets the
    /// conntrack entries it made wrong.
    in_force: Vec<crate::plan::Ruleset>,
    /// What the conntrack reset of the last pass did (a dry run: would do), per family.
    pub conntrack_reports: Vec<(crate::plan::Family, crate::conntrack::ResetReport)>,
    /// The last read of the node's addresses was interrupted: read them again soon.
    egress_reread: bool,
    /// Set by the event loop while it is subscribed to address changes: then a resolution
    /// stands until a change that matters is reported, and a steady pass reads no address.
    pub address_events: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The output addresses the resolution in force was read for (None: none read yet).
    egress_read_for: Option<Vec<crate::config::egress::EgressTarget>>,
    /// A change that matters was reported (or an operator asked, SIGHUP): read at the next pass.
    addresses_due: bool,
}

/// Most CIDRs of one list named in a log line; the rest are counted.
const LOGGED_CIDRS: usize = 20;

/// A list for a log line: the first [`LOGGED_CIDRS`] entries and how many more (a 25,000-CIDR
/// list is one short line, not 360 kB).
fn join(nets: &[ipnet::IpNet]) -> String {
    let mut text = nets
        .iter()
        .take(LOGGED_CIDRS)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if nets.len() > LOGGED_CIDRS {
        text.push_str(&format!(",... ({} in all)", nets.len()));
    }
    text
}

/// What a conntrack reset judges the tracked flows' old decisions by.
#[derive(Debug, PartialEq)]
enum ResetBasis {
    /// The ruleset this agent had in force before the change.
    Previous(crate::plan::Ruleset),
    /// The rules were installed from nothing: no rules of ours decided the flows.
    NoRulesOfOurs,
    /// A dry run: the rules live in the kernel (nothing is deleted).
    Live,
}

/// The log of one conntrack reset: a summary at info, each flow named at debug.
fn log_reset(
    family: crate::plan::Family,
    scope: crate::conntrack::judge::ResetScope,
    report: &crate::conntrack::ResetReport,
    dry_run: bool,
) {
    if report.reset == 0 && report.left == 0 && report.gone == 0 {
        debug!(family = %family, examined = report.examined, took_ms = %crate::text::millis(report.took), "conntrack: no tracked flow holds a decision this change made wrong");
        return;
    }
    info!(
        family = %family,
        examined = report.examined,
        reset = report.reset,
        already_gone = report.gone,
        left_connection_oriented = report.left,
        conntrack_reset = scope.as_str(),
        dry_run,
        interrupted = report.interrupted,
        took_ms = %crate::text::millis(report.took),
        "conntrack: flows on a NAT decision this change made wrong {}",
        if dry_run { "would be reset" } else { "reset" }
    );
    for flow in &report.listed {
        debug!(family = %family, flow = %flow, "conntrack entry {}", if dry_run { "to reset" } else { "reset" });
    }
    for flow in &report.listed_left {
        debug!(family = %family, flow = %flow, "conntrack entry left on its old decision (--conntrack-reset=all resets it)");
    }
}

fn fingerprint(diagnostics: &[Diagnostic]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for d in diagnostics {
        d.one_line().hash(&mut hasher);
    }
    hasher.finish()
}

impl Reconciler {
    pub fn new(settings: Settings, backend: Box<dyn Backend>) -> Self {
        let memory_limit_found = super::memory::read_limit();
        Reconciler {
            settings,
            backend,
            active: None,
            active_origin: None,
            active_read: None,
            last_config_note: None,
            config_cache: None,
            config_parses_skipped: 0,
            planned: None,
            synced_families: Vec::new(),
            last_error: None,
            status: Status::default(),
            config_in_flux: Default::default(),
            had_content: false,
            blank_since: None,
            memory_limit: memory_limit_found.bytes(),
            memory_limit_found,
            memory_refusal: None,
            in_force: Vec::new(),
            conntrack_reports: Vec::new(),
            egress_reread: false,
            address_events: Default::default(),
            egress_read_for: None,
            addresses_due: true,
        }
    }

    pub fn backend_name(&self) -> String {
        self.backend.name()
    }

    pub fn backend_id(&self) -> crate::backend::BackendId {
        self.backend.id()
    }

    /// The resync interval of the config in force (upstream's 60s before any is valid).
    pub fn interval(&self) -> Duration {
        self.active
            .as_ref()
            .map_or(Duration::from_secs(60), Config::resync)
    }

    /// Re-reads the config file; the active config changes only to a valid one.
    pub fn reload_config(&mut self) {
        let path = self.settings.config.to_string();
        if self
            .config_in_flux
            .load(std::sync::atomic::Ordering::Acquire)
        {
            debug!(config = %path, "the config file is being written; it is read once the writer closes it");
            return;
        }
        let loaded = match config::load_source_unless_unchanged(
            &self.settings.config,
            &self.settings.options,
            &mut self.config_cache,
        ) {
            Ok(Some(loaded)) => loaded,
            Ok(None) => {
                // The same bytes as last time: the config in force and every note stand.
                self.config_parses_skipped += 1;
                return;
            }
            Err(err) => {
                self.config_cache = None;
                let message = err.to_string();
                let kept = (
                    "keeping the rules of the last good config",
                    "no rules are installed until it can be read",
                );
                self.refuse_for(&message, kept, |kept| {
                    error!(config = %path, error = %message, "cannot read config; {kept}");
                });
                return;
            }
        };
        if loaded.blank && self.had_content {
            let since = *self.blank_since.get_or_insert_with(|| {
                info!(config = %path, grace_s = BLANK_GRACE.as_secs_f64(), "the config file was emptied; keeping the config in force unless it stays empty (a writer may be rewriting it in place)");
                Instant::now()
            });
            if since.elapsed() < BLANK_GRACE {
                // Read it again next pass, even if its stamp is unchanged.
                self.config_cache = None;
                return;
            }
        }
        self.blank_since = None;
        self.had_content = loaded.origin == Origin::File && !loaded.blank;
        let checked = loaded.checked;
        let refusal = checked.config().and_then(|c| self.too_large_for_memory(c));
        if refusal.is_none() {
            self.memory_refusal = None;
        }
        if let Some(reason) = refusal {
            let kept = (
                "keeping the last good config in force",
                "no rules are installed until it fits",
            );
            self.refuse_for(&reason, kept, |kept| {
                error!(config = %path, reason = %reason, "config refused: it cannot fit the memory this agent has; {kept}");
            });
            self.memory_refusal = Some(reason);
            return;
        }
        match checked.config().cloned() {
            None => {
                let note = fingerprint(checked.diagnostics());
                self.refuse(note, |enforcing| {
                    let problems: Vec<String> =
                        checked.errors().map(Diagnostic::one_line).collect();
                    let kept = if enforcing {
                        "keeping the last good config in force"
                    } else {
                        "no rules are installed until it is fixed"
                    };
                    error!(config = %path, errors = %problems.join("; "), "invalid config rejected; {kept}");
                });
            }
            Some(new) => self.accept(new, &checked, (loaded.origin, loaded.digest)),
        }
    }

    /// Takes a valid config into force; logs it when it changed (and its warnings when they
    /// did), and notes where and when its bytes were read.
    fn accept(
        &mut self,
        new: Config,
        checked: &config::Checked,
        (origin, digest): (Origin, Option<String>),
    ) {
        let path = self.settings.config.to_string();
        let note = fingerprint(checked.diagnostics());
        let changed = self.active.as_ref() != Some(&new);
        if changed || self.last_config_note != Some(note) {
            if changed {
                self.status.configs_accepted += 1;
                let source = match origin {
                    Origin::Defaults => "defaults (no config file)",
                    Origin::File => "file",
                    Origin::Dir => "merged files",
                };
                info!(
                    config = %path,
                    source,
                    nonMasqueradeCIDRs = %join(&new.non_masquerade_cidrs),
                    forceMasqueradeCIDRs = %join(&new.force_masquerade_cidrs),
                    masqueradeSourceCIDRs = %join(&new.masquerade_source_cidrs),
                    masqLinkLocal = new.masq_link_local,
                    masqLinkLocalIPv6 = new.masq_link_local_ipv6,
                    enableIPv6 = new.enable_ipv6,
                    resyncInterval = %new.resync_interval,
                    "config accepted"
                );
            }
            for warning in checked.warnings() {
                warn!(config = %path, "{}", warning.one_line());
            }
            self.last_config_note = Some(note);
        }
        self.status.non_masquerade_cidrs = new.non_masquerade_cidrs.len();
        if changed {
            self.planned = None;
        }
        self.active = Some(new);
        self.active_origin = Some(origin);
        self.active_read = Some(ActiveRead {
            digest,
            at: std::time::SystemTime::now(),
        });
        self.status.config_current = true;
    }

    /// [`Self::refuse`] for one reason: `log` gets the words for what stays in force, the
    /// first of `kept` while a good config is enforced, the second before there is one.
    fn refuse_for(&mut self, reason: &str, kept: (&str, &str), log: impl FnOnce(&str)) {
        let note = fingerprint(&[Diagnostic::error(config::Code::Io, reason.to_string())]);
        self.refuse(note, |enforcing| {
            log(if enforcing { kept.0 } else { kept.1 })
        });
    }

    /// A config that cannot be taken (unreadable, invalid, too large): counted and logged
    /// once per distinct reason (`note`), by `log`, told whether a good config is still in
    /// force; the config in force stays.
    fn refuse(&mut self, note: u64, log: impl FnOnce(bool)) {
        if self.last_config_note != Some(note) {
            self.last_config_note = Some(note);
            self.status.configs_rejected += 1;
            log(self.active.is_some());
        }
        self.status.config_current = false;
    }

    /// The node lock is ours: the backend may take over another's leftovers at its first
    /// install (see [`Backend::take_over_at_first_install`]).
    pub fn take_over_leftovers(&self) {
        if !self.settings.dry_run {
            self.backend.take_over_at_first_install();
        }
    }

    /// How many rules (iptables) or set elements (nftables) fit the usable share of `limit`
    /// with this backend, in its words (`16500 rules`).
    pub fn what_fits(&self, limit: u64) -> String {
        let model = self.backend.memory_model();
        model
            .unit
            .words(model.ceiling(limit / 100 * super::memory::USABLE_PERCENT))
    }

    /// Why `config` cannot be applied within the agent's memory limit, if it cannot: its
    /// estimated peak (agent and tools, with this backend, from the rules and set elements
    /// its plan renders) above the usable share of the limit.
    fn too_large_for_memory(&self, config: &Config) -> Option<String> {
        let limit = self.memory_limit?;
        let usable = limit / 100 * super::memory::USABLE_PERCENT;
        let rulesets = plan(config, &self.settings.plan);
        let estimate = crate::backend::Estimate::of(self.backend.as_ref(), &rulesets);
        if estimate.peak <= usable {
            return None;
        }
        let nftables = crate::backend::BackendId::Nftables;
        let lighter = if self.backend.id() == nftables {
            String::new()
        } else {
            crate::backend::select::every_backend()
                .iter()
                .find(|b| b.id() == nftables)
                .map(|b| crate::backend::Estimate::of(b.as_ref(), &rulesets))
                .filter(|e| e.peak <= usable)
                .map(|e| {
                    format!(
                        ", or use --backend=nftables (it writes {}: about {})",
                        e.footprint,
                        super::memory::mib(e.peak)
                    )
                })
                .unwrap_or_default()
        };
        Some(format!(
            "for this config ({} CIDRs listed) the {} backend writes {}: about {} at the peak, more than {}% of this agent's memory limit of {} (at most about {} fit); raise the container's memory limit to at least {}, shorten the lists{lighter}",
            config.non_masquerade_cidrs.len()
                + config.force_masquerade_cidrs.len()
                + config.masquerade_source_cidrs.len(),
            self.backend.name(),
            estimate.footprint,
            super::memory::mib(estimate.peak),
            super::memory::USABLE_PERCENT,
            super::memory::mib(limit),
            self.what_fits(limit),
            super::memory::mib(super::memory::suggested_limit(estimate.peak, limit)),
        ))
    }

    /// One full pass: reload the config, then sync every family against it.
    pub fn pass(&mut self) -> Pass {
        self.reload_config();
        let started = Instant::now();
        let result = self.sync();
        let now = Instant::now();
        if !matches!(result, Pass::NoValidConfig) {
            self.status
                .sync_duration
                .0
                .observe(now.duration_since(started).as_secs_f64());
        }
        self.status.last_pass = Some(now);
        match &result {
            Pass::Synced(families) => {
                self.status.syncs_ok += 1;
                self.status.consecutive_failures = 0;
                self.status.last_success = Some(now);
                // Synced with the last good config; a config refused for memory is not ready.
                self.status.not_ready = self.memory_refusal.clone();
                for f in families {
                    self.status.rules.insert(f.family, f.rules);
                }
            }
            Pass::NoValidConfig => {
                self.status.not_ready = Some(
                    self.memory_refusal
                        .clone()
                        .unwrap_or_else(|| "no valid config has been applied yet".to_string()),
                );
            }
            Pass::Failed(err) => {
                self.status.syncs_failed += 1;
                self.status.consecutive_failures += 1;
                self.status.not_ready = Some(format!("last sync failed: {err}"));
            }
        }
        self.status.next_pass_in = self.next_wait();
        result
    }

    /// How long to wait before the next pass: the resync interval, or, after failed syncs, a
    /// backoff from [`FIRST_RETRY`] doubling per failure, never longer than the interval.
    pub fn next_wait(&self) -> Duration {
        let mut wait = backoff(self.status.consecutive_failures, self.interval());
        if self.egress_reread {
            wait = wait.min(FIRST_RETRY);
        }
        match self.blank_since {
            // Look again when the grace of an emptied file ends.
            Some(since) => wait.min(
                BLANK_GRACE
                    .saturating_sub(since.elapsed())
                    .max(Duration::from_millis(10)),
            ),
            None => wait,
        }
    }

    /// Whether the active config names an output address: then the node's addresses are
    /// read at every pass, and an address change is worth a pass.
    pub fn uses_node_addresses(&self) -> bool {
        self.active.as_ref().is_some_and(|config| {
            let families = crate::plan::families(&self.settings.plan, config);
            crate::plan::egress::names_output_address(config, &families)
        })
    }

    /// The output addresses the active config names for the managed families: only an
    /// address change inside one of them can change what a pass resolves.
    pub fn egress_targets(&self) -> Vec<crate::config::egress::EgressTarget> {
        self.active.as_ref().map_or_else(Vec::new, |config| {
            let families = crate::plan::families(&self.settings.plan, config);
            crate::plan::egress::targets(config, &families)
        })
    }

    /// Resolves the active config's output addresses against the node's addresses now; a new
    /// resolution makes a new plan. A family whose configured value the node holds no address
    /// of falls back to masquerade (said once, in a WARN, in the status and the metrics) until
    /// one is back. A read that concurrent changes interrupted every time keeps the
    /// resolution in force and asks for another pass soon.
    fn resolve_egress(&mut self) -> Result<(), BackendError> {
        let targets = self.egress_targets();
        if !self.addresses_due
            && self.egress_read_for.as_ref() == Some(&targets)
            && self
                .address_events
                .load(std::sync::atomic::Ordering::Acquire)
        {
            // Nothing that can move the output address was reported since the last read.
            return Ok(());
        }
        let resolved = match &self.active {
            Some(config) if self.uses_node_addresses() => {
                let families = crate::plan::families(&self.settings.plan, config);
                let resolver = crate::plan::egress::Resolver::new(config, &families);
                debug!("reading this node's addresses for the output address");
                match crate::addresses::resolve_output_addresses(&resolver) {
                    Ok(resolution) => {
                        self.note_fallbacks(&resolver.families(), &resolution.lost);
                        resolution.egress
                    }
                    Err(err) if crate::addresses::is_interrupted(&err) => {
                        self.egress_reread = true;
                        self.addresses_due = true;
                        debug!(error = %err, "this node's addresses change too fast to read; the output address in force stays, read again shortly");
                        return Ok(());
                    }
                    Err(err) => {
                        return Err(BackendError::Node(format!(
                            "cannot read this node's addresses: {err}"
                        )))
                    }
                }
            }
            _ => {
                self.status.egress_fallback.clear();
                crate::plan::ResolvedEgress::default()
            }
        };
        self.egress_reread = false;
        self.addresses_due = false;
        self.egress_read_for = Some(targets);
        if resolved != self.settings.plan.egress {
            if resolved.v4.is_some() || resolved.v6.is_some() {
                info!(
                    ipv4 = %resolved.v4.map_or("masquerade".to_string(), |a| a.to_string()),
                    ipv6 = %resolved.v6.map_or("masquerade".to_string(), |a| a.to_string()),
                    "output address resolved on this node"
                );
            }
            self.settings.plan.egress = resolved;
            self.planned = None;
        }
        Ok(())
    }

    /// An address change that can move the output address was reported, or an operator asked
    /// for a fresh look (SIGHUP): the next pass reads the node's addresses.
    pub fn addresses_may_have_changed(&mut self) {
        self.addresses_due = true;
    }

    /// Records which families masquerade because the node lacks their output address: a WARN
    /// when a family starts to, an INFO when it stops (its address is back).
    fn note_fallbacks(
        &mut self,
        families: &[Family],
        lost: &[(Family, crate::plan::egress::EgressError)],
    ) {
        let before = std::mem::take(&mut self.status.egress_fallback);
        for family in families {
            let reason = lost
                .iter()
                .find(|(f, _)| f == family)
                .map(|(_, err)| crate::cmd::fallback_reason(*family, err));
            let was = before.get(family).cloned().flatten();
            match (&was, &reason) {
                (None, Some(reason)) => {
                    warn!(family = %family, reason = %reason, "output address not on this node: masquerading instead");
                }
                (Some(_), None) => {
                    info!(family = %family, "output address back on this node: SNAT to it again");
                }
                _ => {}
            }
            self.status.egress_fallback.insert(*family, reason);
        }
    }

    fn sync(&mut self) -> Pass {
        if self.active.is_none() {
            return Pass::NoValidConfig;
        }
        if let Err(err) = self.resolve_egress() {
            let message = err.to_string();
            let retry_in_s = self.retry_in_s();
            if self.last_error.as_deref() != Some(&message) {
                error!(error = %err, retry_in_s, "cannot use the config on this node{}", self.will_retry());
                self.last_error = Some(message);
            } else {
                debug!(error = %err, retry_in_s, "cannot use the config on this node, still");
            }
            return Pass::Failed(err);
        }
        let Some(active) = &self.active else {
            return Pass::NoValidConfig;
        };
        // Taken out for the pass and put back after, so a steady pass copies no plan.
        let rulesets = match self.planned.take() {
            Some(rulesets) => rulesets,
            None => plan(active, &self.settings.plan),
        };
        let result = self.sync_rulesets(&rulesets);
        if matches!(result, Pass::Synced(_)) {
            self.drop_unplanned_families(&rulesets);
        }
        self.planned = Some(rulesets);
        result
    }

    /// Removes the rules of a family the agent managed until the config turned it off
    /// (`enableIPv6: false`), once the families still planned are in sync.
    fn drop_unplanned_families(&mut self, rulesets: &[crate::plan::Ruleset]) {
        let planned: Vec<_> = rulesets.iter().map(|r| r.family).collect();
        let names = self.settings.plan.names();
        for family in std::mem::take(&mut self.synced_families) {
            if planned.contains(&family) || self.settings.dry_run {
                continue;
            }
            match self.backend.cleanup(family, &names, false) {
                Ok(done) => {
                    self.in_force.retain(|r| r.family != family);
                    info!(
                    backend = %self.backend.name(),
                    family = %family,
                    removed = %crate::output::removed_words(&done.removed),
                    "family no longer enabled by the config: its rules removed"
                    )
                }
                Err(err) => {
                    error!(backend = %self.backend.name(), family = %family, error = %err, "cannot remove the rules of a family no longer enabled{}", self.will_retry());
                    self.synced_families.push(family);
                }
            }
        }
        for family in planned {
            if !self.synced_families.contains(&family) {
                self.synced_families.push(family);
            }
        }
    }

    /// Whether IPv6 is managed now (the flag, or the active config's `enableIPv6`).
    pub fn ipv6_managed(&self) -> bool {
        self.active
            .as_ref()
            .map_or(self.settings.plan.enable_ipv6, |config| {
                crate::plan::families(&self.settings.plan, config)
                    .contains(&crate::plan::Family::V6)
            })
    }

    fn sync_rulesets(&mut self, rulesets: &[crate::plan::Ruleset]) -> Pass {
        let mut done = Vec::with_capacity(rulesets.len());
        for ruleset in rulesets {
            let started = Instant::now();
            match self.backend.sync(ruleset, self.settings.dry_run) {
                Ok(report) => {
                    if !report.in_sync() && !self.settings.dry_run {
                        self.log_repair(&report, started.elapsed());
                    }
                    self.follow_flows(ruleset, report.installed_fresh());
                    done.push(report);
                }
                Err(err) => {
                    let message = format!("{}: {err}", ruleset.family);
                    if self.last_error.as_deref() != Some(&message) {
                        let retry_in_s = self.retry_in_s();
                        error!(backend = %self.backend.name(), family = %ruleset.family, error = %err, retry_in_s, "sync failed{}", self.will_retry());
                        self.last_error = Some(message);
                    } else {
                        let retry_in_s = self.retry_in_s();
                        debug!(family = %ruleset.family, error = %err, retry_in_s, "sync failed again");
                    }
                    return Pass::Failed(err);
                }
            }
        }
        if self.last_error.take().is_some() {
            info!(backend = %self.backend.name(), "sync recovered");
        }
        Pass::Synced(done)
    }

    /// What the flows tracked now are judged against, once `ruleset` is in force (and
    /// recorded as such). None when no flow can have been made wrong: a steady pass (it
    /// copies nothing), resets turned off, or the first rules this agent syncs where rules
    /// of ours were there already (a restart: what decided the flows is unknown).
    fn reset_basis(
        &mut self,
        ruleset: &crate::plan::Ruleset,
        installed_fresh: bool,
    ) -> Option<ResetBasis> {
        let family = ruleset.family;
        let (changed, before) = match self.in_force.iter().position(|r| r.family == family) {
            Some(i) if self.in_force[i] == *ruleset => (false, None),
            Some(i) => (
                true,
                Some(std::mem::replace(&mut self.in_force[i], ruleset.clone())),
            ),
            None => {
                self.in_force.push(ruleset.clone());
                (true, None)
            }
        };
        if self.settings.conntrack_reset == crate::conntrack::judge::ResetScope::Off {
            return None;
        }
        if self.settings.dry_run {
            return changed.then_some(ResetBasis::Live);
        }
        if installed_fresh {
            // Nothing of ours was in the kernel (a fresh node, a cleanup, a chain deleted
            // under the agent): the flows tracked so far, started before the rules or while
            // they were being put back, were decided without rules of ours.
            return Some(ResetBasis::NoRulesOfOurs);
        }
        before.map(ResetBasis::Previous)
    }

    /// After `ruleset` is in force: when it changed what this agent had in force for its
    /// family, or was installed from nothing (`installed_fresh`), the conntrack entries whose
    /// NAT the change made wrong are deleted (within `--conntrack-reset`), so their flows
    /// follow. A dry run compares with the live rules and deletes nothing. A failure is
    /// logged and counted; the rules stay applied.
    fn follow_flows(&mut self, ruleset: &crate::plan::Ruleset, installed_fresh: bool) {
        use crate::conntrack::judge::{NoRulesOfOurs, Planned};
        let Some(basis) = self.reset_basis(ruleset, installed_fresh) else {
            return;
        };
        let (family, scope) = (ruleset.family, self.settings.conntrack_reset);
        let after = Planned::new(ruleset);
        let outcome = match basis {
            ResetBasis::Previous(before) => {
                crate::conntrack::reset(family, &Planned::new(&before), &after, scope, false)
            }
            ResetBasis::NoRulesOfOurs => {
                crate::conntrack::reset(family, &NoRulesOfOurs, &after, scope, false)
            }
            ResetBasis::Live => match self.backend.inspect(family, &ruleset.names) {
                Ok(live) => crate::conntrack::reset(family, &live, &after, scope, true),
                Err(err) => Err(std::io::Error::other(err.to_string())),
            },
        };
        match outcome {
            Ok(report) => {
                self.status.conntrack_entries_reset += report.reset as u64;
                log_reset(family, scope, &report, self.settings.dry_run);
                self.conntrack_reports.retain(|(f, _)| *f != family);
                self.conntrack_reports.push((family, report));
            }
            Err(err) => {
                self.status.conntrack_resets_failed += 1;
                warn!(family = %family, error = %err, "cannot reset the conntrack entries this change made wrong; their flows keep the old NAT until they end");
            }
        }
    }

    /// The backoff the failure being handled will lead to (it is not counted yet).
    fn retry_after_this_failure(&self) -> Duration {
        backoff(self.status.consecutive_failures + 1, self.interval())
    }

    /// The `retry_in_s` of a failure's log line: none for a single pass, which does not retry.
    fn retry_in_s(&self) -> Option<f64> {
        (!self.settings.single_pass).then(|| self.retry_after_this_failure().as_secs_f64())
    }

    /// How a failure's log message ends: that it will be retried, unless this is the only pass.
    fn will_retry(&self) -> &'static str {
        if self.settings.single_pass {
            ""
        } else {
            "; will retry"
        }
    }

    fn log_repair(&mut self, report: &SyncReport, took: Duration) {
        let elapsed_ms = crate::text::millis(took);
        let repairs = report.repairs();
        for label in &repairs {
            *self.status.drift_repairs.entry(label).or_default() += 1;
        }
        for d in &report.differences {
            debug!(family = %d.family, kind = d.kind.as_str(), detail = %d.detail, "difference");
        }
        if report.installed_fresh() {
            info!(backend = %self.backend.name(), family = %report.family, rules = report.rules, location = %self.backend.location(&self.settings.plan.names()), drift = %repairs.join(","), elapsed_ms, "rules installed");
        } else {
            info!(backend = %self.backend.name(), family = %report.family, rules = report.rules, repaired = %repairs.join(","), elapsed_ms, "rules repaired");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::{FakeBackend, FakeFamily};

    struct Fixture {
        dir: std::path::PathBuf,
        fake: FakeBackend,
        reconciler: Reconciler,
    }

    fn fixture(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("ipmasq-rec-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fake = FakeBackend::default();
        let settings = Settings {
            config: config::ConfigSource::File(dir.join("config")),
            options: config::Options::default(),
            plan: PlanOptions::default(),
            dry_run: false,
            single_pass: false,
            // The fake backend's rules are in no kernel: a reset would read (and delete from)
            // the conntrack table of the namespace the tests run in.
            conntrack_reset: crate::conntrack::judge::ResetScope::Off,
        };
        let reconciler = Reconciler::new(settings, Box::new(fake.clone()));
        Fixture {
            dir,
            fake,
            reconciler,
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn write(f: &Fixture, text: &str) {
        std::fs::write(f.dir.join("config"), text).unwrap();
    }

    /// The non-masquerade CIDRs of the installed IPv4 ruleset.
    fn cidr_rules(f: &Fixture) -> Vec<String> {
        f.fake
            .live(Family::V4)
            .ruleset
            .map(|r| r.non_masquerade().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    #[test]
    fn missing_file_installs_defaults_then_steady_state_writes_nothing() {
        let mut f = fixture("defaults");
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(
            cidr_rules(&f),
            [
                "169.254.0.0/16",
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16"
            ]
        );
        assert_eq!(f.fake.state().applies, 1);
        for _ in 0..3 {
            f.reconciler.pass();
        }
        assert_eq!(f.fake.state().applies, 1, "in sync: no writes");
        assert_eq!(f.fake.state().syncs, 4, "one sync per family and pass");
        assert_eq!(f.reconciler.status.syncs_ok, 4);
    }

    #[test]
    fn invalid_config_keeps_the_last_good_one_and_keeps_healing() {
        let mut f = fixture("keep");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        write(&f, "nonMasqueradeCIDRs: [10.1.2.3/8]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        assert!(!f.reconciler.status.config_current);
        assert_eq!(f.reconciler.status.configs_rejected, 1);
        // Drift while the file is bad is still repaired with the last good config.
        f.fake.set_live(Family::V4, FakeFamily::default());
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        assert_eq!(
            f.reconciler.status.configs_rejected, 1,
            "counted once per change"
        );
        // Fixing the file applies the new config.
        write(&f, "nonMasqueradeCIDRs: [192.168.0.0/16]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "192.168.0.0/16"]);
        assert!(f.reconciler.status.config_current);
    }

    #[test]
    fn a_config_with_an_unsupported_key_is_rejected_not_applied() {
        let mut f = fixture("complex-key");
        write(&f, "? [a, b]\n: 1\n");
        assert!(matches!(f.reconciler.pass(), Pass::NoValidConfig));
        assert_eq!(f.fake.state().applies, 0);
        assert_eq!(f.reconciler.status.configs_rejected, 1);
    }

    #[test]
    fn an_unchanged_file_is_not_parsed_again() {
        let mut f = fixture("cache");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        f.reconciler.pass();
        f.reconciler.pass();
        assert_eq!(f.reconciler.config_parses_skipped, 2);
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\n");
        f.reconciler.pass();
        assert_eq!(f.reconciler.config_parses_skipped, 2, "a change is parsed");
        assert_eq!(cidr_rules(&f).len(), 3);
    }

    #[test]
    fn invalid_at_start_installs_nothing_until_fixed() {
        let mut f = fixture("start");
        write(&f, "resyncInterval: 1d\n");
        assert!(matches!(f.reconciler.pass(), Pass::NoValidConfig));
        assert_eq!(f.fake.state().applies, 0);
        assert!(f.reconciler.status.not_ready.is_some());
        write(&f, "resyncInterval: 5s\n");
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(f.reconciler.interval(), Duration::from_secs(5));
        assert!(f.reconciler.status.not_ready.is_none());
    }

    /// `cat > file` leaves the file empty for a moment: the config in force stays until the
    /// file has stayed empty for [`BLANK_GRACE`]; an empty file at start is the defaults.
    #[test]
    fn an_emptied_file_is_the_defaults_only_once_it_stays_empty() {
        let mut f = fixture("emptied");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\n");
        f.reconciler.pass();
        write(&f, "");
        f.reconciler.pass();
        assert_eq!(
            cidr_rules(&f),
            ["169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10"]
        );
        assert!(f.reconciler.next_wait() <= BLANK_GRACE);
        // The writer finishes: its config, never the defaults in between.
        write(&f, "nonMasqueradeCIDRs: [100.64.0.0/10]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "100.64.0.0/10"]);
        assert_eq!(f.reconciler.status.configs_accepted, 2);
        // Emptied for good: the defaults once the grace has passed.
        write(&f, "");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "100.64.0.0/10"]);
        f.reconciler.blank_since = Some(Instant::now() - BLANK_GRACE);
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4, "the defaults");
        // While a writer holds the file, it is not read at all.
        f.reconciler
            .config_in_flux
            .store(true, std::sync::atomic::Ordering::Release);
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4);
        assert_eq!(f.reconciler.status.configs_rejected, 0);
    }

    /// Writes a config of `count` distinct /24s inside 10.0.0.0/8 (and a `cidrLimit` that
    /// admits them).
    fn write_distinct_cidrs(f: &Fixture, count: u32) {
        let many: Vec<String> = (0..count)
            .map(|i| format!("10.{}.{}.0/24", i >> 8 & 0xff, i & 0xff))
            .collect();
        write(
            f,
            &format!(
                "cidrLimit: 100000\nnonMasqueradeCIDRs: [{}]\n",
                many.join(",")
            ),
        );
    }

    /// A list whose estimated peak exceeds the memory limit is refused: the last good config
    /// stays in force, the agent is not ready, and a list that fits is taken again.
    #[test]
    fn a_config_that_cannot_fit_the_memory_limit_is_refused() {
        let mut f = fixture("memory");
        f.reconciler.memory_limit = Some(64 << 20);
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        assert!(f.reconciler.status.not_ready.is_none());
        // The fake's model: 8 MiB + 10 MiB per 10,000 CIDRs; 57.6 MiB usable of 64.
        write_distinct_cidrs(&f, 60_000);
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        let reason = f.reconciler.status.not_ready.clone().unwrap();
        assert!(
            reason.contains("more than 90% of this agent's memory limit of 64.0 MiB"),
            "{reason}"
        );
        assert!(
            reason.contains(
                "for this config (60000 CIDRs listed) the fake backend writes 60002 rules: about 68.0 MiB at the peak"
            ),
            "{reason}"
        );
        assert!(reason.contains("at most about 49599 rules fit"), "{reason}");
        assert!(
            reason.contains("raise the container's memory limit to at least 76.0 MiB"),
            "{reason}"
        );
        assert_eq!(f.reconciler.status.configs_rejected, 1);
        assert!(!f.reconciler.status.config_current);
        f.reconciler.pass();
        assert_eq!(
            f.reconciler.status.configs_rejected, 1,
            "counted once per change"
        );
        write(&f, "nonMasqueradeCIDRs: [192.168.0.0/16]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "192.168.0.0/16"]);
        assert!(f.reconciler.status.not_ready.is_none());
    }

    /// A peak just over the usable share of 64 MiB: the limit suggested is above the one the
    /// agent has (it once said "raise the container's memory limit to at least 64.0 MiB" to
    /// an agent with 64 MiB, as 90 % of the limit was rounded down and the suggestion too).
    #[test]
    fn a_peak_just_over_the_limit_never_suggests_the_limit_the_agent_has() {
        let mut f = fixture("memory-edge");
        f.reconciler.memory_limit = Some(64 << 20);
        // The fake's model: 8 MiB + 1 MiB per 1,000 rules; 49,600 CIDRs and more are over the
        // 57.6 MiB usable.
        write_distinct_cidrs(&f, 49_600);
        f.reconciler.pass();
        let reason = f.reconciler.status.not_ready.clone().unwrap();
        assert!(
            !reason.contains("at least 64.0 MiB"),
            "suggests the limit the agent has: {reason}"
        );
        assert!(
            reason.contains("raise the container's memory limit to at least 65.0 MiB"),
            "{reason}"
        );
    }

    #[test]
    fn an_empty_file_at_start_is_the_defaults() {
        let mut f = fixture("empty-start");
        write(&f, "");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4);
    }

    #[test]
    fn removed_file_means_defaults() {
        let mut f = fixture("removed");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        std::fs::remove_file(f.dir.join("config")).unwrap();
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4);
    }

    #[test]
    fn apply_failure_is_reported_and_retried() {
        let mut f = fixture("fail");
        f.fake.state().fail_apply = Some("boom".into());
        assert!(matches!(f.reconciler.pass(), Pass::Failed(_)));
        assert_eq!(f.reconciler.status.syncs_failed, 1);
        assert!(f
            .reconciler
            .status
            .not_ready
            .as_deref()
            .unwrap()
            .contains("boom"));
        f.fake.state().fail_apply = None;
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(
            f.reconciler.status.drift_repairs.get("chain_missing"),
            Some(&1)
        );
        assert_eq!(
            f.reconciler.status.drift_repairs.get("jump_missing"),
            Some(&1)
        );
    }

    #[test]
    fn failed_syncs_are_retried_with_a_bounded_exponential_backoff() {
        let mut f = fixture("backoff");
        write(&f, "resyncInterval: 10s\n");
        f.fake.state().fail_apply = Some("locked".into());
        let mut waits = Vec::new();
        for _ in 0..6 {
            assert!(matches!(f.reconciler.pass(), Pass::Failed(_)));
            waits.push(f.reconciler.status.next_pass_in.as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        f.fake.state().fail_apply = None;
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(f.reconciler.status.consecutive_failures, 0);
        assert_eq!(f.reconciler.status.next_pass_in, Duration::from_secs(10));
    }

    #[test]
    fn injected_drift_is_counted_by_repair_kind() {
        let mut f = fixture("drift");
        f.reconciler.pass();
        let mut live = f.fake.live(Family::V4);
        live.jumps = 3;
        f.fake.set_live(Family::V4, live);
        let Pass::Synced(reports) = f.reconciler.pass() else {
            panic!("should sync")
        };
        assert_eq!(reports[0].repairs(), ["jump_duplicate"]);
        assert_eq!(
            f.reconciler.status.drift_repairs.get("jump_duplicate"),
            Some(&1)
        );
    }

    #[test]
    fn dry_run_writes_nothing_but_reports_the_transaction() {
        let mut f = fixture("dry");
        f.reconciler.settings.dry_run = true;
        let Pass::Synced(reports) = f.reconciler.pass() else {
            panic!("dry run should plan")
        };
        assert_eq!(f.fake.state().applies, 0);
        assert!(reports[0].transaction.is_some());
        assert_eq!(reports[0].repairs(), ["chain_missing", "jump_missing"]);
    }

    fn v4_ruleset(cidrs: &str) -> crate::plan::Ruleset {
        let config = config::check_text(
            &format!("nonMasqueradeCIDRs: [{cidrs}]"),
            &config::Options::default(),
        )
        .into_config()
        .expect("a valid config");
        crate::plan::plan_family(&config, &PlanOptions::default(), Family::V4)
    }

    #[test]
    fn a_reset_judges_flows_by_the_rules_they_were_decided_by() {
        use crate::conntrack::judge::ResetScope;
        let mut f = fixture("basis");
        let (one, two) = (
            v4_ruleset("10.0.0.0/8"),
            v4_ruleset("10.0.0.0/8, 203.0.113.0/24"),
        );
        let rec = &mut f.reconciler;
        rec.settings.conntrack_reset = ResetScope::Connectionless;
        // A restart: rules of ours were there, what decided the tracked flows is unknown.
        assert_eq!(rec.reset_basis(&one, false), None);
        // A steady pass.
        assert_eq!(rec.reset_basis(&one, false), None);
        // A change: the flows were decided by the rules in force before.
        assert_eq!(
            rec.reset_basis(&two, false),
            Some(ResetBasis::Previous(one.clone()))
        );
        // The chain and jump deleted under the agent and put back, the same rules: the flows
        // of the gap were decided without rules of ours.
        assert_eq!(rec.reset_basis(&two, true), Some(ResetBasis::NoRulesOfOurs));
        // A fresh node (or after a cleanup): the same.
        let mut fresh = fixture("basis-fresh");
        fresh.reconciler.settings.conntrack_reset = ResetScope::All;
        assert_eq!(
            fresh.reconciler.reset_basis(&one, true),
            Some(ResetBasis::NoRulesOfOurs)
        );
        // Turned off: never, and what is in force is still recorded.
        rec.settings.conntrack_reset = ResetScope::Off;
        assert_eq!(rec.reset_basis(&one, true), None);
        rec.settings.conntrack_reset = ResetScope::Connectionless;
        assert_eq!(rec.reset_basis(&one, false), None);
        // A dry run compares what changed with the live rules.
        rec.settings.dry_run = true;
        assert_eq!(rec.reset_basis(&two, true), Some(ResetBasis::Live));
        assert_eq!(rec.reset_basis(&two, true), None);
    }
}
