//! API mode: the brake of a rollout in waves (see [`crate::config::rollout`]). While this node
//! runs the next config, each pass is judged: a config refused by admission, a transaction the
//! kernel refused, or an invariant the live rules break (judged as `explain` judges a packet)
//! halts the rollout. The halt is written on the `-next` ConfigMap itself (the annotation
//! `ipmasq.io/rollout-halted`, against the resource version the node read: the first node to
//! write wins), and every agent's ConfigMap watch then puts its node back on the base. As the
//! mirror does, the reconcile thread never waits for the API: its [`BrakeSink`] hands the halt
//! over and one [`BrakeWriter`] task on the agent's runtime writes it, at once (a halt is never
//! paced), retrying with a backoff until it lands or the rollout it is for changes.

use super::reconcile::{ApiSettings, OnNext, Pass, Reconciler, RolloutLatch};
use super::sinks::{PassDone, StatusSink};
use crate::cluster::configmap::ConfigMapRef;
use crate::cluster::Credentials;
use crate::config::rollout::{self, Expect, Halt, Invariant};
use crate::plan::{Action, Family};
use k8s_openapi::api::core::v1::ConfigMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

/// The first retry of a failed halt write comes this soon, then twice as late, up to
/// [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// What the writer is to write: a halt of the rollout at the `-next` ConfigMap's resource
/// version the node judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaltRequest {
    pub resource_version: String,
    pub halt: Halt,
}

/// Passes in a row on the next config whose transaction failed before the kernel's refusal
/// counts (one failure may be a moment's contention: the retry comes after a second).
pub const KERNEL_FAILURES: u32 = 2;
/// Passes in a row, after the one that applied the next config, that found the rules changed
/// under it and repaired them: this many and the next config does not settle on the node.
pub const UNSETTLED_PASSES: u32 = 3;

/// The brake of an agent in API mode with a node name.
pub struct Brake {
    requests: Arc<watch::Sender<Option<HaltRequest>>>,
    node: String,
    /// The writer, when the agent writes to the API (`--node-status`); a read-only agent
    /// latches its own node back onto the base and writes nothing.
    writer: Option<BrakeWriter>,
}

/// Judges each pass on the next config (the reconcile thread's side): on a failure it latches
/// the rollout (this node goes back to the base at once, whatever the API does) and hands the
/// halt to the writer.
pub struct BrakeSink {
    requests: Arc<watch::Sender<Option<HaltRequest>>>,
    node: String,
    writes: bool,
    latch: RolloutLatch,
    judging: Judging,
}

/// Writes halts on the `-next` ConfigMap (the runtime's side).
pub struct BrakeWriter {
    credentials: Credentials,
    node: String,
    target: ConfigMapRef,
    requests: watch::Receiver<Option<HaltRequest>>,
}

impl Brake {
    /// The brake in API mode with a node name (None otherwise: no node, no wave).
    pub fn new(api: Option<&ApiSettings>) -> Option<Brake> {
        let api = api?;
        let node = api.node_name.clone()?;
        if std::env::var_os(NO_BRAKE).is_some() {
            warn!("{NO_BRAKE} is set: a rollout's next config that fails on this node is kept and halts nothing (a test's switch; unset it)");
        }
        let (requests, requests_rx) = watch::channel(None);
        let writer = api.status.enabled.then(|| BrakeWriter {
            credentials: api.credentials.clone(),
            node: node.clone(),
            target: api.configmap.clone(),
            requests: requests_rx,
        });
        Some(Brake {
            requests: Arc::new(requests),
            node,
            writer,
        })
    }

    /// The sink the reconcile thread publishes each pass to, latching through `latch` (the
    /// API source's).
    pub fn sink(&self, latch: Option<RolloutLatch>) -> Option<BrakeSink> {
        Some(BrakeSink {
            requests: self.requests.clone(),
            node: self.node.clone(),
            writes: self.writer.is_some(),
            latch: latch?,
            judging: Judging::default(),
        })
    }

    /// Spawns the writer on the current runtime (once; later calls do nothing).
    pub fn spawn_writer(&mut self) {
        if let Some(writer) = self.writer.take() {
            tokio::spawn(writer.run());
        }
    }
}

/// The switch the root tests prove the brake with, by its absence.
const NO_BRAKE: &str = "IPMASQ_TEST_NO_BRAKE";

/// Why this node cannot keep the next config: a reason word and what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub diagnostic: String,
}

/// What the passes on one attempt of a rollout (its [`OnNext::key`]) have shown so far.
#[derive(Debug, Default)]
pub struct Judging {
    key: String,
    /// A pass synced the next config (the one that applied it, or found it applied).
    applied: bool,
    /// The invariants were judged on the rules as they are (none written since).
    invariants_judged: bool,
    /// Passes in a row whose transaction failed.
    failures: u32,
    /// Passes in a row since the first sync that repaired a drift.
    repairing: u32,
}

impl Judging {
    /// Notes a pass on the attempt `key`: the kernel's refusal once [`KERNEL_FAILURES`] passes
    /// in a row failed, `NotSettled` once [`UNSETTLED_PASSES`] passes in a row after the first
    /// repaired something; whether the invariants are to be judged now (after a pass that
    /// wrote, or never yet).
    #[cfg(test)]
    pub fn note(&mut self, key: &str, pass: &Pass) -> (Option<Failure>, bool) {
        self.note_woken(key, pass, false)
    }

    /// [`Judging::note`], for a pass woken by a neighbour's commit to our rules when
    /// `by_neighbour`: its repair is that neighbour's doing, not the next config's, so it
    /// neither adds to nor ends the streak of repairing passes (a fight has its own alert).
    pub fn note_woken(
        &mut self,
        key: &str,
        pass: &Pass,
        by_neighbour: bool,
    ) -> (Option<Failure>, bool) {
        if self.key != key {
            *self = Judging {
                key: key.to_string(),
                ..Judging::default()
            };
        }
        let reports = match pass {
            Pass::Failed(err) => {
                self.failures += 1;
                let failure = (self.failures >= KERNEL_FAILURES).then(|| Failure {
                    reason: "KernelRefused",
                    diagnostic: err.to_string(),
                });
                return (failure, false);
            }
            Pass::NoValidConfig => return (None, false),
            Pass::Synced(reports) => reports,
        };
        self.failures = 0;
        let wrote = reports.iter().any(|r| r.transaction.is_some());
        let judge = wrote || !self.invariants_judged;
        self.invariants_judged = true;
        if !self.applied {
            self.applied = true;
            return (None, judge);
        }
        if by_neighbour {
            return (None, judge);
        }
        let repairs: Vec<&str> = reports.iter().flat_map(|r| r.repairs()).collect();
        if repairs.is_empty() {
            self.repairing = 0;
            return (None, judge);
        }
        self.repairing += 1;
        let failure = (self.repairing >= UNSETTLED_PASSES).then(|| Failure {
            reason: "NotSettled",
            diagnostic: format!(
                "the rules on the next config were changed under the agent and repaired in {} passes in a row (last: {})",
                self.repairing,
                repairs.join(", ")
            ),
        });
        (failure, judge)
    }
}

/// The first invariant the live rules break, each family read once (None: all hold, or the
/// rules could not be read: that is no verdict, said at debug, judged again next pass).
fn broken_invariant(reconciler: &Reconciler, invariants: &[Invariant]) -> Option<Failure> {
    let mut read: Vec<(Family, crate::backend::Inspection)> = Vec::new();
    for invariant in invariants {
        let family = if invariant.destination.addr().is_ipv4() {
            Family::V4
        } else {
            Family::V6
        };
        if !read.iter().any(|(f, _)| *f == family) {
            match reconciler.inspect(family) {
                Ok(inspection) => read.push((family, inspection)),
                Err(err) => {
                    debug!(%family, error = %err, "the live rules could not be read for the rollout's invariants; judged at the next pass");
                    return None;
                }
            }
        }
        let inspection = &read.iter().find(|(f, _)| *f == family)?.1;
        if let Some(failure) = broken(reconciler, inspection, invariant, family) {
            return Some(failure);
        }
    }
    None
}

/// Whether `inspection` (the live rules of `family`) breaks `invariant`, and how.
fn broken(
    reconciler: &Reconciler,
    inspection: &crate::backend::Inspection,
    invariant: &Invariant,
    family: Family,
) -> Option<Failure> {
    let source = invariant.from.unwrap_or_else(|| {
        reconciler
            .config_in_force()
            .map(|config| crate::plan::assumed_source(config, family))
            .unwrap_or_else(|| unspecified(family))
    });
    let expected = match invariant.expect {
        Expect::Keep => Action::KeepSource,
        Expect::Masquerade => Action::Masquerade,
    };
    invariant.judged_at().into_iter().find_map(|destination| {
        let verdict =
            inspection.evaluate_leaving(source, destination, false, invariant.via.as_deref());
        (verdict.action != expected).then(|| Failure {
            reason: "InvariantBroken",
            diagnostic: format!(
                "{invariant}: the live rules {} {destination} from {source} ({:?})",
                match verdict.action {
                    Action::KeepSource => "keep the source to",
                    Action::Masquerade => "masquerade",
                },
                verdict.reason
            ),
        })
    })
}

/// The most of a diagnostic the halt carries (an annotation shares 256 KiB with the others).
pub const DIAGNOSTIC_MAX: usize = 1_000;

/// `text` cut to [`DIAGNOSTIC_MAX`] bytes at a character boundary, marked when cut.
fn bounded(text: &str) -> String {
    if text.len() <= DIAGNOSTIC_MAX {
        return text.to_string();
    }
    let mut end = DIAGNOSTIC_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} …", &text[..end])
}

fn unspecified(family: Family) -> std::net::IpAddr {
    match family {
        Family::V4 => std::net::Ipv4Addr::UNSPECIFIED.into(),
        Family::V6 => std::net::Ipv6Addr::UNSPECIFIED.into(),
    }
}

impl BrakeSink {
    /// The failure this pass shows on the next config, if any.
    fn failure(&mut self, done: &PassDone, place: &OnNext) -> Option<Failure> {
        if let Some(rejection) = done.reconciler.rejection() {
            return Some(Failure {
                reason: "ConfigRejected",
                diagnostic: format!("{}: {}", rejection.source, rejection.diagnostic),
            });
        }
        let by_neighbour = matches!(done.trigger, super::Trigger::ForeignChange);
        let (failure, judge_invariants) =
            self.judging.note_woken(&place.key, done.pass, by_neighbour);
        failure.or_else(|| {
            judge_invariants
                .then(|| broken_invariant(done.reconciler, &place.invariants))
                .flatten()
        })
    }
}

impl StatusSink for BrakeSink {
    fn publish(&mut self, done: &PassDone) {
        let Some(place) = done.reconciler.on_next() else {
            return;
        };
        if place.promoting || std::env::var_os(NO_BRAKE).is_some() {
            // Promote claimed the rollout: the next config is about to be the base anyway.
            return;
        }
        let Some(failure) = self.failure(done, place) else {
            return;
        };
        *self.latch.lock().unwrap_or_else(|e| e.into_inner()) = Some(place.key.clone());
        warn!(
            reason = failure.reason,
            diagnostic = %failure.diagnostic,
            wave = place.wave + 1,
            writes = self.writes,
            "this node cannot keep the rollout's next config: back to the base, and halting the rollout (every node goes back to the base)"
        );
        if !self.writes {
            return;
        }
        let request = HaltRequest {
            resource_version: place.resource_version.clone(),
            halt: Halt {
                node: self.node.clone(),
                reason: failure.reason.to_string(),
                diagnostic: bounded(&crate::text::printable(&failure.diagnostic)),
                wave: place.wave,
                at: crate::config::digest::rfc3339_utc(std::time::SystemTime::now()),
            },
        };
        self.requests.send_if_modified(|current| {
            if current
                .as_ref()
                .is_some_and(|c| c.resource_version == request.resource_version)
            {
                return false;
            }
            *current = Some(request);
            true
        });
    }
}

/// How a halt write ended.
enum Written {
    /// The annotation is on the ConfigMap.
    Halted,
    /// The ConfigMap changed or went since the node read it: the watch brings what it is now.
    Overtaken(String),
    /// Refused for good (403: the RBAC does not grant the patch; 422: the object would be
    /// invalid): retrying would not help. The node itself is back on the base already.
    Refused(String),
}

impl BrakeWriter {
    /// Until the agent stops: each halt handed over written, retried with a backoff until it
    /// lands, is overtaken, or a newer one replaces it.
    pub async fn run(mut self) {
        let manners = crate::cluster::Manners::writer_for(&self.node);
        let mut failures: u32 = 0;
        let mut client = None;
        loop {
            let request = self.requests.borrow_and_update().clone();
            let retry = match request {
                None => None,
                Some(request) => match self.write(&mut client, &manners, &request).await {
                    Ok(Written::Halted) => {
                        failures = 0;
                        info!(configmap = %self.next(), node = %request.halt.node, reason = %request.halt.reason, "the rollout is halted");
                        None
                    }
                    Ok(Written::Overtaken(why)) => {
                        failures = 0;
                        info!(configmap = %self.next(), "not halted by this node: {why}");
                        None
                    }
                    Ok(Written::Refused(why)) => {
                        failures = 0;
                        error!(configmap = %self.next(), error = %why, "cannot halt the rollout: the API refuses the patch for good; this node stays on the base, the other nodes go on with the rollout. The RBAC must grant patch on configmaps named <--configmap's name>-next (packaging/kubernetes/api-mode/rbac.yaml names ip-masq-agent-next)");
                        None
                    }
                    Err(err) => {
                        failures = failures.saturating_add(1);
                        let wait = FIRST_RETRY
                            .saturating_mul(1 << failures.saturating_sub(1).min(8))
                            .min(LAST_RETRY);
                        warn!(configmap = %self.next(), error = %err, retry_in_s = wait.as_secs_f64(), "cannot write the rollout's halt; retrying");
                        Some(wait)
                    }
                },
            };
            let changed = async {
                match retry {
                    Some(wait) => {
                        let _ = tokio::time::timeout(wait, self.requests.changed()).await;
                        Ok(())
                    }
                    None => self.requests.changed().await,
                }
            };
            if changed.await.is_err() {
                return;
            }
        }
    }

    fn next(&self) -> String {
        format!("{}/{}", self.target.namespace, self.target.next_name())
    }

    /// One write of the halt: a merge patch of the annotation naming the resource version the
    /// node judged (a newer version, or another node's halt first, answers 409).
    async fn write(
        &self,
        client: &mut Option<kube::Client>,
        manners: &crate::cluster::Manners,
        request: &HaltRequest,
    ) -> Result<Written, String> {
        if client.is_none() {
            *client = Some(
                crate::cluster::client_with(&self.credentials, manners)
                    .await
                    .map_err(|err| err.to_string())?,
            );
        }
        let api: kube::Api<ConfigMap> =
            kube::Api::namespaced(client.clone().expect("made above"), &self.target.namespace);
        let halt = serde_json::to_string(&request.halt).map_err(|err| err.to_string())?;
        let body = serde_json::json!({
            "metadata": {
                "resourceVersion": request.resource_version,
                "annotations": {rollout::HALTED: halt},
            }
        });
        let params = kube::api::PatchParams {
            field_manager: Some("ipmasq".into()),
            ..Default::default()
        };
        let name = self.target.next_name();
        match crate::cluster::within(api.patch(&name, &params, &kube::api::Patch::Merge(&body)))
            .await
        {
            Ok(_) => Ok(Written::Halted),
            Err(crate::cluster::CallError::Api(kube::Error::Api(status)))
                if status.code == 409 =>
            {
                Ok(Written::Overtaken(
                    "the next config changed since this node read it (another node's halt, an abort or an edit)".into(),
                ))
            }
            Err(crate::cluster::CallError::Api(kube::Error::Api(status)))
                if status.code == 403 || status.code == 422 =>
            {
                Ok(Written::Refused(format!("{} {}", status.code, status.message)))
            }
            Err(crate::cluster::CallError::Api(kube::Error::Api(status)))
                if status.code == 404 =>
            {
                Ok(Written::Overtaken("the rollout is gone (promoted or removed)".into()))
            }
            Err(err) => Err(err.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Difference, DriftKind, SyncReport};

    fn synced(repairs: bool) -> Pass {
        let differences = if repairs {
            vec![Difference {
                family: Family::V4,
                kind: DriftKind::MissingRule,
                position: Some(1),
                detail: "a rule deleted by someone".into(),
            }]
        } else {
            Vec::new()
        };
        Pass::Synced(vec![SyncReport {
            family: Family::V4,
            differences,
            transaction: None,
            rules: 3,
        }])
    }

    #[test]
    fn a_long_diagnostic_is_cut_at_a_character() {
        let long = "é".repeat(DIAGNOSTIC_MAX);
        let cut = bounded(&long);
        assert!(cut.len() <= DIAGNOSTIC_MAX + " …".len());
        assert!(cut.ends_with(" …"));
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn repairs_a_neighbours_commits_woke_never_halt_nor_end_a_streak() {
        let mut judging = Judging::default();
        assert_eq!(judging.note("7", &synced(true)).0, None, "applied");
        for _ in 0..10 {
            assert_eq!(judging.note_woken("7", &synced(true), true).0, None);
        }
        // The streak of the passes that came by themselves goes on across them.
        assert_eq!(judging.note("7", &synced(true)).0, None);
        assert_eq!(judging.note_woken("7", &synced(true), true).0, None);
        assert_eq!(judging.note("7", &synced(true)).0, None);
        let (failure, _) = judging.note("7", &synced(true));
        assert_eq!(failure.expect("three in a row").reason, "NotSettled");
    }

    #[test]
    fn the_next_config_settles_unless_passes_in_a_row_repair_it() {
        let mut judging = Judging::default();
        assert_eq!(
            judging.note("7", &synced(true)),
            (None, true),
            "the pass that applies it"
        );
        assert_eq!(judging.note("7", &synced(true)).0, None);
        assert_eq!(
            judging.note("7", &synced(false)),
            (None, false),
            "settled: the count restarts, and nothing written: the invariants stand"
        );
        assert_eq!(judging.note("7", &synced(true)).0, None);
        assert_eq!(judging.note("7", &synced(true)).0, None);
        let (failure, _) = judging.note("7", &synced(true));
        let failure = failure.expect("three repairs in a row");
        assert_eq!(failure.reason, "NotSettled");
        assert!(
            failure.diagnostic.contains("a rule deleted by someone")
                || failure.diagnostic.contains("3 passes in a row"),
            "{}",
            failure.diagnostic
        );
        assert_eq!(
            judging.note("8", &synced(true)),
            (None, true),
            "another attempt counts anew"
        );
        assert_eq!(judging.note("8", &Pass::NoValidConfig), (None, false));
    }

    #[test]
    fn one_failed_transaction_is_no_refusal_two_in_a_row_are() {
        let failed = || {
            Pass::Failed(crate::backend::BackendError::Run(
                "iptables-restore: injected".into(),
            ))
        };
        let mut judging = Judging::default();
        assert_eq!(
            judging.note("7", &failed()).0,
            None,
            "a moment's contention"
        );
        assert_eq!(judging.note("7", &synced(true)).0, None);
        assert_eq!(judging.note("7", &failed()).0, None, "the count restarted");
        let (failure, judge) = judging.note("7", &failed());
        assert_eq!(failure.map(|f| f.reason), Some("KernelRefused"));
        assert!(!judge, "no invariant is judged on a failed pass");
    }
}
