//! API mode: the brake of a rollout in waves (see [`crate::config::rollout`]). While this node
//! runs the next config, each pass is judged: a config refused by admission, a transaction the
//! kernel refused, or an invariant the live rules break (judged as `explain` judges a packet)
//! halts the rollout. The halt is written on the `-next` ConfigMap itself (the annotation
//! `ipmasq.io/rollout-halted`, against the resource version the node read: the first node to
//! write wins), and every agent's ConfigMap watch then puts its node back on the base. As the
//! mirror does, the reconcile thread never waits for the API: its [`BrakeSink`] hands the halt
//! over and one [`BrakeWriter`] task on the agent's runtime writes it, at once (a halt is never
//! paced), retrying with a backoff until it lands or the rollout it is for changes.

use super::reconcile::{ApiSettings, OnNext, Pass, Reconciler};
use super::sinks::{PassDone, StatusSink};
use crate::cluster::configmap::ConfigMapRef;
use crate::cluster::Credentials;
use crate::config::rollout::{self, Expect, Halt, Invariant};
use crate::plan::{Action, Family};
use k8s_openapi::api::core::v1::ConfigMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

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

/// The brake of an agent in API mode that writes to the API.
pub struct Brake {
    requests: Arc<watch::Sender<Option<HaltRequest>>>,
    writer: Option<BrakeWriter>,
}

/// Hands each failure on the next config to the writer (the reconcile thread's side).
pub struct BrakeSink {
    requests: Arc<watch::Sender<Option<HaltRequest>>>,
    node: String,
    settling: Settling,
}

/// Passes in a row, after the one that applied the next config, that found the rules changed
/// under it and repaired them: this many and the next config does not settle on the node.
pub const UNSETTLED_PASSES: u32 = 3;

/// Whether the rules stay put on the next config: each pass of one rollout (its resource
/// version) counted once the next config is applied.
#[derive(Debug, Default)]
pub struct Settling {
    /// The rollout's resource version the counts are for.
    resource_version: String,
    /// A pass of that version synced (the one that applied the next config, or found it).
    applied: bool,
    /// Passes in a row since then that repaired a drift.
    repairing: u32,
}

impl Settling {
    /// Notes a pass on the next config of `resource_version`; `NotSettled` once
    /// [`UNSETTLED_PASSES`] passes in a row after the first repaired something.
    pub fn note(&mut self, resource_version: &str, pass: &Pass) -> Option<Failure> {
        if self.resource_version != resource_version {
            *self = Settling {
                resource_version: resource_version.to_string(),
                ..Settling::default()
            };
        }
        let Pass::Synced(reports) = pass else {
            return None;
        };
        if !self.applied {
            self.applied = true;
            return None;
        }
        let repairs: Vec<&str> = reports.iter().flat_map(|r| r.repairs()).collect();
        if repairs.is_empty() {
            self.repairing = 0;
            return None;
        }
        self.repairing += 1;
        (self.repairing >= UNSETTLED_PASSES).then(|| Failure {
            reason: "NotSettled",
            diagnostic: format!(
                "the rules on the next config were changed under the agent and repaired in {} passes in a row (last: {})",
                self.repairing,
                repairs.join(", ")
            ),
        })
    }
}

/// Writes halts on the `-next` ConfigMap (the runtime's side).
pub struct BrakeWriter {
    credentials: Credentials,
    node: String,
    target: ConfigMapRef,
    requests: watch::Receiver<Option<HaltRequest>>,
}

impl Brake {
    /// The brake in API mode with status writes (`--node-status`) and a node name; None
    /// otherwise (a read-only agent follows a halt, it writes none).
    pub fn new(api: Option<&ApiSettings>) -> Option<Brake> {
        let api = api?;
        if !api.status.enabled {
            return None;
        }
        let node = api.node_name.clone()?;
        let (requests, requests_rx) = watch::channel(None);
        Some(Brake {
            requests: Arc::new(requests),
            writer: Some(BrakeWriter {
                credentials: api.credentials.clone(),
                node,
                target: api.configmap.clone(),
                requests: requests_rx,
            }),
        })
    }

    /// The sink the reconcile thread publishes each pass to.
    pub fn sink(&self) -> Option<BrakeSink> {
        let node = self.writer.as_ref()?.node.clone();
        Some(BrakeSink {
            requests: self.requests.clone(),
            node,
            settling: Settling::default(),
        })
    }

    /// Spawns the writer on the current runtime (once; later calls do nothing).
    pub fn spawn_writer(&mut self) {
        if let Some(writer) = self.writer.take() {
            tokio::spawn(writer.run());
        }
    }
}

/// Why this node cannot keep the next config: a reason word and what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub diagnostic: String,
}

/// Judges a pass on the next config: the config refused, the kernel's refusal, or the first
/// invariant the live rules break (None: the node keeps the next config).
pub fn judge(reconciler: &Reconciler, pass: &Pass, place: &OnNext) -> Option<Failure> {
    if let Some(rejection) = reconciler.rejection() {
        return Some(Failure {
            reason: "ConfigRejected",
            diagnostic: format!("{}: {}", rejection.source, rejection.diagnostic),
        });
    }
    match pass {
        Pass::Failed(err) => Some(Failure {
            reason: "KernelRefused",
            diagnostic: err.to_string(),
        }),
        Pass::NoValidConfig => None,
        Pass::Synced(_) => place
            .invariants
            .iter()
            .find_map(|invariant| broken(reconciler, invariant)),
    }
}

/// Whether the live rules break `invariant`, and how.
fn broken(reconciler: &Reconciler, invariant: &Invariant) -> Option<Failure> {
    let family = if invariant.destination.addr().is_ipv4() {
        Family::V4
    } else {
        Family::V6
    };
    let inspection = match reconciler.inspect(family) {
        Ok(inspection) => inspection,
        Err(err) => {
            return Some(Failure {
                reason: "InvariantBroken",
                diagnostic: format!(
                    "{invariant}: the live {family} rules could not be read: {err}"
                ),
            })
        }
    };
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

impl StatusSink for BrakeSink {
    fn publish(&mut self, done: &PassDone) {
        let Some(place) = done.reconciler.on_next() else {
            return;
        };
        if std::env::var_os("IPMASQ_TEST_NO_BRAKE").is_some() {
            // Tests prove the brake by its absence: with it off, a bad config stays.
            return;
        }
        let settled = self.settling.note(&place.resource_version, done.pass);
        let Some(failure) = judge(done.reconciler, done.pass, place).or(settled) else {
            return;
        };
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
        let handed = self.requests.send_if_modified(|current| {
            if current
                .as_ref()
                .is_some_and(|c| c.resource_version == request.resource_version)
            {
                return false;
            }
            *current = Some(request.clone());
            true
        });
        if handed {
            warn!(
                reason = failure.reason,
                diagnostic = %request.halt.diagnostic,
                wave = place.wave + 1,
                "this node cannot keep the rollout's next config: halting the rollout (every node goes back to the base)"
            );
        }
    }
}

/// How a halt write ended.
enum Written {
    /// The annotation is on the ConfigMap.
    Halted,
    /// The ConfigMap changed or went since the node read it: the watch brings what it is now.
    Overtaken(String),
}

impl BrakeWriter {
    /// Until the agent stops: each halt handed over written, retried with a backoff until it
    /// lands, is overtaken, or a newer one replaces it.
    pub async fn run(mut self) {
        let manners = crate::cluster::Manners {
            node: Some(self.node.clone()),
            clock: None,
            answer_cap: None,
        };
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
    fn the_next_config_settles_unless_passes_in_a_row_repair_it() {
        let mut settling = Settling::default();
        assert_eq!(
            settling.note("7", &synced(true)),
            None,
            "the pass that applies it"
        );
        assert_eq!(settling.note("7", &synced(true)), None);
        assert_eq!(
            settling.note("7", &synced(false)),
            None,
            "settled: the count restarts"
        );
        assert_eq!(settling.note("7", &synced(true)), None);
        assert_eq!(settling.note("7", &synced(true)), None);
        let failure = settling
            .note("7", &synced(true))
            .expect("three repairs in a row");
        assert_eq!(failure.reason, "NotSettled");
        assert!(
            failure.diagnostic.contains("missing_rule") || failure.diagnostic.contains("rule"),
            "{}",
            failure.diagnostic
        );
        assert_eq!(
            settling.note("8", &synced(true)),
            None,
            "another version of the rollout counts anew"
        );
        assert_eq!(settling.note("8", &Pass::NoValidConfig), None);
    }
}
