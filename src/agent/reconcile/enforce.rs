//! The enforce stage of a pass: each family's planned ruleset synced by the backend (one
//! transaction when it drifted), the conntrack entries a change made wrong reset so their
//! flows follow, and the rules of a family the config no longer manages removed. It takes
//! only [`Enforceable`] rulesets: a value the plan could not resolve never reaches a backend.

use super::planner::Planned;
use super::{Pass, Settings};
use crate::backend::{Backend, BackendError, SyncReport};
use crate::config::egress::EgressTarget;
use crate::plan::{Egress, Family, Ruleset};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// A family's ruleset whose every value was resolved on this node: the only kind the enforce
/// stage hands to a backend. Made by [`Enforceable::check`] alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enforceable(Ruleset);

/// A family's ruleset that names an output address the plan could not resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved {
    pub family: Family,
    pub target: EgressTarget,
}

impl Enforceable {
    /// The ruleset, when the plan resolved every value in it.
    pub fn check(ruleset: Ruleset) -> Result<Enforceable, Unresolved> {
        match ruleset.masquerade.egress {
            Egress::Unresolved(target) => Err(Unresolved {
                family: ruleset.family,
                target,
            }),
            Egress::Masquerade | Egress::Snat(_) => Ok(Enforceable(ruleset)),
        }
    }

    pub fn ruleset(&self) -> &Ruleset {
        &self.0
    }
}

fn family_of(planned: &Planned) -> Family {
    match planned {
        Ok(enforceable) => enforceable.0.family,
        Err(unresolved) => unresolved.family,
    }
}

/// What a failure's log line says about the retry (computed before the failure is counted).
pub struct RetryNote {
    /// `retry_in_s`: none for a single pass, which does not retry.
    pub retry_in_s: Option<f64>,
    /// How the message ends: that it will be retried, unless this is the only pass.
    pub will_retry: &'static str,
}

/// What the enforce stage reports to the status stage.
#[derive(Clone, Debug, Default)]
pub struct EnforceCounts {
    pub drift_repairs: BTreeMap<&'static str, u64>,
    /// Syncs that wrote because the plan changed (a new config, or a node fact it names such
    /// as an egress address): not drift.
    pub config_changes_applied: u64,
    /// Conntrack entries deleted so their flows follow a change.
    pub conntrack_entries_reset: u64,
    /// Changes after which the conntrack reset failed (the rules were applied).
    pub conntrack_resets_failed: u64,
}

/// Whether packets may have missed our rules before a sync: the jump was missing, or the rules
/// drifted (a sync that wrote; under an unchanged plan that is a neighbour's doing).
#[derive(Clone, Copy, Debug, Default)]
pub struct Bypassed {
    pub jump_missing: bool,
    pub drifted: bool,
}

/// What a conntrack reset judges the tracked flows' old decisions by.
#[derive(Debug, PartialEq)]
pub(super) enum ResetBasis {
    /// The ruleset this agent had in force before the change.
    Previous(Ruleset),
    /// The rules were installed from nothing: no rules of ours decided the flows.
    NoRulesOfOurs,
    /// A dry run: the rules live in the kernel (nothing is deleted).
    Live,
}

/// Why a sync wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteCause {
    /// The plan differs from what this agent had in force: a config change.
    PlanChanged,
    /// The plan is unchanged (or this agent's first): the live rules drifted.
    Drift,
}

/// The backend and what this agent has put in force through it.
pub struct Enforcer {
    backend: Box<dyn Backend>,
    /// The families the last synced plan held: one the config no longer turns on
    /// (`enableIPv6: false` after true) has its rules removed.
    synced_families: Vec<Family>,
    /// The last failure logged (at error), so a repeat is logged at debug.
    last_error: Option<String>,
    /// The rulesets this agent last synced, per family: a change from one of them resets the
    /// conntrack entries it made wrong.
    in_force: Vec<Ruleset>,
    /// What the conntrack reset of the last pass did (a dry run: would do), per family.
    pub conntrack_reports: Vec<(Family, crate::conntrack::ResetReport)>,
    pub counts: EnforceCounts,
}

/// The log of one conntrack reset: a summary at info, each flow named at debug.
fn log_reset(
    family: Family,
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

impl Enforcer {
    pub fn new(backend: Box<dyn Backend>) -> Enforcer {
        Enforcer {
            backend,
            synced_families: Vec::new(),
            last_error: None,
            in_force: Vec::new(),
            conntrack_reports: Vec::new(),
            counts: EnforceCounts::default(),
        }
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// The backend, to change its state (see [`Backend::take_over_at_first_install`]).
    pub fn backend_mut(&mut self) -> &mut dyn Backend {
        self.backend.as_mut()
    }

    /// The config cannot be used on this node (its addresses cannot be read): logged once
    /// per distinct error, nothing is written.
    pub fn node_unusable(&mut self, err: BackendError, retry: &RetryNote) -> Pass {
        let message = err.to_string();
        let retry_in_s = retry.retry_in_s;
        if self.last_error.as_deref() != Some(&message) {
            error!(error = %err, retry_in_s, "cannot use the config on this node{}", retry.will_retry);
            self.last_error = Some(message);
        } else {
            debug!(error = %err, retry_in_s, "cannot use the config on this node, still");
        }
        Pass::Failed(err)
    }

    /// Brings every planned family in line, then removes the rules of the families no longer
    /// planned.
    pub fn enforce(&mut self, planned: &[Planned], settings: &Settings, retry: &RetryNote) -> Pass {
        let result = self.sync_all(planned, settings, retry);
        if matches!(result, Pass::Synced(_)) {
            self.drop_unplanned_families(planned, settings, retry);
        }
        result
    }

    /// Removes the rules of a family the agent managed until the config turned it off
    /// (`enableIPv6: false`), once the families still planned are in sync.
    fn drop_unplanned_families(
        &mut self,
        planned: &[Planned],
        settings: &Settings,
        retry: &RetryNote,
    ) {
        let planned: Vec<_> = planned.iter().map(family_of).collect();
        let names = settings.plan.names();
        for family in std::mem::take(&mut self.synced_families) {
            if planned.contains(&family) || settings.dry_run {
                continue;
            }
            match self.backend.cleanup(family, &names, false) {
                Ok(done) => {
                    self.in_force.retain(|r| r.family != family);
                    info!(
                    backend = %self.backend.name(),
                    family = %family,
                    removed = %crate::backend::Removed::words(&done.removed),
                    "family no longer enabled by the config: its rules removed"
                    )
                }
                Err(err) => {
                    error!(backend = %self.backend.name(), family = %family, error = %err, "cannot remove the rules of a family no longer enabled{}", retry.will_retry);
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

    fn sync_all(&mut self, planned: &[Planned], settings: &Settings, retry: &RetryNote) -> Pass {
        let mut done = Vec::with_capacity(planned.len());
        for family_plan in planned {
            let synced = match family_plan {
                Ok(enforceable) => {
                    let ruleset = enforceable.ruleset();
                    let started = Instant::now();
                    self.backend
                        .sync(ruleset, settings.dry_run)
                        .map(|report| (ruleset, report, started))
                }
                Err(unresolved) => Err(BackendError::unresolved(unresolved.target)),
            };
            match synced {
                Ok((ruleset, report, started)) => {
                    if !report.in_sync() && !settings.dry_run {
                        let why = self.why_written(ruleset);
                        self.log_write(&report, why, started.elapsed(), settings);
                    }
                    let bypassed = Bypassed {
                        jump_missing: report.rules_were_bypassed(),
                        drifted: !report.in_sync(),
                    };
                    self.follow_flows(ruleset, bypassed, settings);
                    done.push(report);
                }
                Err(err) => {
                    let family = family_of(family_plan);
                    let message = format!("{family}: {err}");
                    let retry_in_s = retry.retry_in_s;
                    if self.last_error.as_deref() != Some(&message) {
                        error!(backend = %self.backend.name(), family = %family, error = %err, retry_in_s, "sync failed{}", retry.will_retry);
                        self.last_error = Some(message);
                    } else {
                        debug!(family = %family, error = %err, retry_in_s, "sync failed again");
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
    pub(super) fn reset_basis(
        &mut self,
        ruleset: &Ruleset,
        bypassed: Bypassed,
        settings: &Settings,
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
        if settings.conntrack_reset == crate::conntrack::judge::ResetScope::Off {
            return None;
        }
        if settings.dry_run {
            return changed.then_some(ResetBasis::Live);
        }
        if bypassed.jump_missing || (bypassed.drifted && !changed) {
            // No jump to our rules was in the kernel (a fresh node, a cleanup, a neighbour's
            // flush of POSTROUTING or of our table), or they drifted under an unchanged plan (a
            // neighbour flushed our chain, deleted a rule): the flows tracked meanwhile may have
            // been decided without them. Only an entry holding the pod's address where the rules
            // now rewrite it is reset; those they decided are judged untouched.
            return Some(ResetBasis::NoRulesOfOurs);
        }
        before.map(ResetBasis::Previous)
    }

    /// Whether every ruleset in force is in the kernel as planned, read back now.
    pub fn rules_read_back(&self) -> bool {
        !self.in_force.is_empty()
            && self.in_force.iter().all(|ruleset| {
                match self.backend.inspect(ruleset.family, &ruleset.names) {
                    Ok(live) => self.backend.compare(ruleset, &live).is_empty(),
                    Err(err) => {
                        warn!(family = %ruleset.family, error = %err, "cannot read the rules back");
                        false
                    }
                }
            })
    }

    /// After `ruleset` is in force: when it changed what this agent had in force for its
    /// family, or packets bypassed our rules before this sync (`bypassed`: the jump was
    /// missing), the conntrack entries whose
    /// NAT the change made wrong are deleted (within `--conntrack-reset`), so their flows
    /// follow. A dry run compares with the live rules and deletes nothing. A failure is
    /// logged and counted; the rules stay applied.
    fn follow_flows(&mut self, ruleset: &Ruleset, bypassed: Bypassed, settings: &Settings) {
        use crate::conntrack::judge::{NoRulesOfOurs, PlannedRules};
        let Some(basis) = self.reset_basis(ruleset, bypassed, settings) else {
            return;
        };
        let (family, scope) = (ruleset.family, settings.conntrack_reset);
        let after = PlannedRules::new(ruleset);
        let outcome = match basis {
            ResetBasis::Previous(before) => {
                crate::conntrack::reset(family, &PlannedRules::new(&before), &after, scope, false)
            }
            ResetBasis::NoRulesOfOurs => {
                crate::conntrack::reset(family, &NoRulesOfOurs, &after, scope, false)
            }
            ResetBasis::Live => match self.backend.inspect(family, &ruleset.names) {
                Ok(live) => crate::conntrack::reset(family, &live.inspection, &after, scope, true),
                Err(err) => Err(std::io::Error::other(err.to_string())),
            },
        };
        match outcome {
            Ok(report) => {
                self.counts.conntrack_entries_reset += report.reset as u64;
                log_reset(family, scope, &report, settings.dry_run);
                self.conntrack_reports.retain(|(f, _)| *f != family);
                self.conntrack_reports.push((family, report));
            }
            Err(err) => {
                self.counts.conntrack_resets_failed += 1;
                warn!(family = %family, error = %err, "cannot reset the conntrack entries this change made wrong; their flows keep the old NAT until they end");
            }
        }
    }

    /// Why a sync of `ruleset` that wrote did so: the plan changed from what this agent had
    /// in force for its family, or the live rules drifted from an unchanged plan (or this
    /// agent had put nothing in force yet: a start, which adopts or repairs what it finds).
    fn why_written(&self, ruleset: &Ruleset) -> WriteCause {
        let before = self.in_force.iter().find(|r| r.family == ruleset.family);
        match before {
            Some(before) if before != ruleset => WriteCause::PlanChanged,
            _ => WriteCause::Drift,
        }
    }

    /// Logs and counts a sync that wrote: `rules installed` (from nothing), `config applied`
    /// (the plan changed: counted apart, its rule differences are the change itself, only
    /// other kinds count as drift), else `rules repaired` (drift, counted by kind).
    fn log_write(
        &mut self,
        report: &SyncReport,
        why: WriteCause,
        took: Duration,
        settings: &Settings,
    ) {
        let elapsed_ms = crate::text::millis(took);
        for d in &report.differences {
            debug!(family = %d.family, kind = d.kind.as_str(), detail = %d.detail, "difference");
        }
        if why == WriteCause::PlanChanged && !report.installed_fresh() {
            self.counts.config_changes_applied += 1;
            let drift: Vec<&'static str> = report
                .repairs()
                .into_iter()
                .filter(|label| *label != crate::backend::DriftKind::MissingRule.repair())
                .collect();
            for label in &drift {
                *self.counts.drift_repairs.entry(label).or_default() += 1;
            }
            info!(backend = %self.backend.name(), family = %report.family, rules = report.rules, also_repaired = %drift.join(","), elapsed_ms, "config applied");
            return;
        }
        self.log_repair(report, elapsed_ms, settings);
    }

    fn log_repair(&mut self, report: &SyncReport, elapsed_ms: f64, settings: &Settings) {
        let repairs = report.repairs();
        for label in &repairs {
            *self.counts.drift_repairs.entry(label).or_default() += 1;
        }
        if report.installed_fresh() {
            info!(backend = %self.backend.name(), family = %report.family, rules = report.rules, location = %self.backend.id().location(&settings.plan.names()), drift = %repairs.join(","), elapsed_ms, "rules installed");
        } else {
            info!(backend = %self.backend.name(), family = %report.family, rules = report.rules, repaired = %repairs.join(","), elapsed_ms, "rules repaired");
        }
    }
}
