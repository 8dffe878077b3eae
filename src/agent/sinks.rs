//! Where the outcome of each pass goes, in order: the snapshot health and metrics serve, the
//! log's "pass done", and the state file with the config in force next to it. The reconcile
//! thread publishes each pass to a list of [`StatusSink`]s; in API mode the config applied is
//! also saved as last-known-good, and the outcome mirrored onto the Node (`mirror_sink`).

use super::last_known_good::{self, LastKnownGood};
use super::reconcile::{ActiveRead, ApiSettings, Pass, Reconciler, LAST_KNOWN_GOOD};
use super::state::{self, AgentState};
use super::{http, lock, pass_name, Trigger};
use std::path::PathBuf;
use std::time::Instant;
use tracing::{debug, warn};

/// One pass done, as the sinks see it.
pub struct PassDone<'a> {
    pub reconciler: &'a Reconciler,
    pub pass: &'a Pass,
    pub trigger: Trigger,
    pub started: Instant,
}

/// Somewhere the outcome of a pass is published.
pub trait StatusSink: Send {
    fn publish(&mut self, done: &PassDone);
}

/// The snapshot `/healthz`, `/readyz` and `/metrics` serve.
pub struct HealthSink(pub http::Shared);

impl StatusSink for HealthSink {
    fn publish(&mut self, done: &PassDone) {
        let reconciler = done.reconciler;
        let mut snapshot = lock(&self.0);
        snapshot.status = reconciler.status.clone();
        snapshot.interval = reconciler.interval();
        snapshot.running_since = None;
        snapshot.egress_targets = reconciler.egress_targets();
        snapshot.pod_share = reconciler.share_in_force();
        if let Some(snat) = &snapshot.snat {
            snat.set_share_in_force(snapshot.pod_share.is_some());
        }
        snapshot.rollout = reconciler.rollout_seen();
    }
}

/// The log's line for each pass (at debug).
pub struct LogSink;

impl StatusSink for LogSink {
    fn publish(&mut self, done: &PassDone) {
        debug!(
            trigger = ?done.trigger,
            elapsed_ms = crate::text::millis(done.started.elapsed()),
            outcome = pass_name(done.pass),
            "pass done"
        );
    }
}

/// API mode: the config in force, once a pass applied it, saved as last-known-good (only
/// when it changed; never the last-known-good itself again).
pub struct LastKnownGoodSink {
    dir: PathBuf,
    configmap: String,
    /// The node it is saved for (the seal names it).
    node: Option<String>,
    /// The digest and provenance last saved (or found at start).
    saved: Option<(Option<String>, String)>,
    /// The error of the last failed write, logged once.
    failed: Option<String>,
}

impl LastKnownGoodSink {
    pub fn new(api: &ApiSettings) -> LastKnownGoodSink {
        LastKnownGoodSink {
            dir: api.last_known_good_dir.clone(),
            configmap: api.configmap.to_string(),
            node: api.node_name.clone(),
            saved: api
                .last_known_good
                .as_ref()
                .filter(|_| api.last_known_good_in_dir)
                .map(|saved| (saved.digest.clone(), saved.provenance.clone())),
            failed: None,
        }
    }
}

impl StatusSink for LastKnownGoodSink {
    fn publish(&mut self, done: &PassDone) {
        if !matches!(done.pass, Pass::Synced(_)) {
            return;
        }
        let Some(read) = done.reconciler.config_read() else {
            return;
        };
        let key = (read.digest.clone(), read.label.clone());
        if read.label.starts_with(LAST_KNOWN_GOOD) || self.saved.as_ref() == Some(&key) {
            return;
        }
        let saved = LastKnownGood {
            schema_version: last_known_good::SCHEMA_VERSION,
            configmap: self.configmap.clone(),
            provenance: read.label.clone(),
            digest: read.digest.clone(),
            saved_at: crate::config::digest::rfc3339_utc(read.at),
            text: read.text.as_deref().cloned(),
            pools: read
                .composed
                .as_ref()
                .map(|c| c.pools.clone())
                .unwrap_or_default(),
            policies: read
                .composed
                .as_ref()
                .map(|c| c.policies.clone())
                .unwrap_or_default(),
            node: self.node.clone(),
            seal: None,
        };
        match last_known_good::write(&self.dir, &saved) {
            Ok(path) => {
                debug!(path = %path.display(), config = %read.label, "last-known-good config saved");
                self.saved = Some(key);
                self.failed = None;
            }
            Err(err) => {
                let err = err.to_string();
                if self.failed.as_ref() != Some(&err) {
                    warn!(dir = %self.dir.display(), error = %err, "cannot save the last-known-good config; an agent started while the API is away will wait for it");
                    self.failed = Some(err);
                }
            }
        }
    }
}

/// The state file under the state directory, and the config in force recorded next to it;
/// each written only when it changed.
pub struct StateFileSink {
    state: AgentState,
    dir: PathBuf,
    /// API mode: the config comes from a ConfigMap, recorded by its provenance.
    api: bool,
    /// The state last written.
    written: Option<AgentState>,
    /// The read of the config last recorded.
    recorded: Option<ActiveRead>,
}

impl StateFileSink {
    pub fn new(state: AgentState, dir: PathBuf, api: bool) -> StateFileSink {
        StateFileSink {
            state,
            dir,
            api,
            written: None,
            recorded: None,
        }
    }

    /// Records the config in force next to the state file when it is newly read: the checked
    /// config itself (so `show` and `explain` on the host judge against exactly it) and, in
    /// the state, where and when it was read. A steady pass compares and writes nothing.
    fn record_config(&mut self, reconciler: &Reconciler) {
        let (Some(config), Some(read)) = (reconciler.config_in_force(), reconciler.config_read())
        else {
            return;
        };
        if self.recorded.as_ref() == Some(read) {
            return;
        }
        let (state, state_dir) = (&mut self.state, &self.dir);
        let read_at = crate::config::digest::rfc3339_utc(read.at);
        let applied = state::AppliedConfig::of(config, read.digest.clone());
        match state::write_applied(state_dir, &applied) {
            Ok(path) => {
                state.config_read = Some(state::ConfigRecord {
                    path: if self.api {
                        read.label.clone()
                    } else {
                        state
                            .config_dir
                            .clone()
                            .unwrap_or_else(|| state.config.clone())
                    },
                    source: state.config_source.clone(),
                    digest: read.digest.clone(),
                    read_at,
                    applied: path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                });
                self.recorded = Some(read.clone());
            }
            Err(err) => {
                warn!(dir = %state_dir.display(), error = %err, "cannot record the config in force; `ipmasq show` and `explain` will read the config path themselves");
                state.config_read = None;
            }
        }
    }
}

impl StateFileSink {
    /// Records the config the agent refuses, while it does (cleared once one is accepted),
    /// so `show` says REJECTED instead of judging by a file the agent ignores. The time is
    /// when these bytes were first refused for this reason: a steady pass writes nothing.
    fn record_rejection(&mut self, reconciler: &Reconciler) {
        let rejected = reconciler.rejection().map(|rejection| {
            let same = self.state.config_rejected.as_ref().filter(|before| {
                before.digest == rejection.digest && before.diagnostics == rejection.located
            });
            state::RejectedRecord {
                path: rejection.source.clone(),
                digest: rejection.digest.clone(),
                diagnostics: rejection.located.clone(),
                rejected_at: same.map_or_else(
                    || crate::config::digest::rfc3339_utc(std::time::SystemTime::now()),
                    |before| before.rejected_at.clone(),
                ),
            }
        });
        self.state.config_rejected = rejected;
    }
}

impl StatusSink for StateFileSink {
    fn publish(&mut self, done: &PassDone) {
        let reconciler = done.reconciler;
        if let Some(origin) = reconciler.config_origin() {
            self.state.config_source = match origin {
                crate::config::ConfigOrigin::Defaults => "defaults".into(),
                crate::config::ConfigOrigin::File if self.api => "configmap".into(),
                crate::config::ConfigOrigin::File => "file".into(),
                crate::config::ConfigOrigin::Dir => "merged files".into(),
                crate::config::ConfigOrigin::Composed => "configmaps".into(),
            };
        }
        self.state.rules.enable_ipv6 = reconciler.ipv6_managed();
        self.record_config(reconciler);
        self.record_rejection(reconciler);
        if self.written.as_ref() != Some(&self.state) {
            match state::write(&self.dir, &self.state) {
                Ok(path) => debug!(path = %path.display(), "state file written"),
                Err(err) => {
                    warn!(dir = %self.dir.display(), error = %err, "cannot write the state file; `ipmasq show` will not know this agent's settings")
                }
            }
            self.written = Some(self.state.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_with(found_in_dir: bool) -> ApiSettings {
        ApiSettings {
            configmap: crate::cluster::configmap::ConfigMapRef {
                namespace: "kube-system".into(),
                name: "ip-masq-agent".into(),
            },
            credentials: crate::cluster::Credentials::InCluster,
            node_name: Some("node-a".into()),
            last_known_good: Some(LastKnownGood {
                schema_version: last_known_good::SCHEMA_VERSION,
                configmap: "kube-system/ip-masq-agent".into(),
                provenance: "configmap kube-system/ip-masq-agent key config (resourceVersion 5)"
                    .into(),
                digest: Some("d".into()),
                saved_at: "2026-01-01T00:00:00Z".into(),
                text: Some("cidrLimit: 3".into()),
                pools: Vec::new(),
                policies: Vec::new(),
                node: Some("node-a".into()),
                seal: None,
            }),
            last_known_good_dir: "/nonexistent".into(),
            last_known_good_in_dir: found_in_dir,
            status: Default::default(),
        }
    }

    #[test]
    fn a_last_known_good_found_where_earlier_agents_kept_it_is_saved_again_in_the_directory() {
        let found_in_dir = LastKnownGoodSink::new(&api_with(true));
        assert!(
            found_in_dir.saved.is_some(),
            "the same config is not saved again"
        );
        let found_earlier = LastKnownGoodSink::new(&api_with(false));
        assert_eq!(
            found_earlier.saved, None,
            "the next config applied is saved in --last-known-good-dir, even unchanged"
        );
    }
}
