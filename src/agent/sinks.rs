//! Where the outcome of each pass goes, in order: the snapshot health and metrics serve, the
//! log's "pass done", and the state file with the config in force next to it. The reconcile
//! thread publishes each pass to a list of [`StatusSink`]s (step 18 adds the Node object).

use super::reconcile::{ActiveRead, Pass, Reconciler};
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

/// The state file under the state directory, and the config in force recorded next to it;
/// each written only when it changed.
pub struct StateFileSink {
    state: AgentState,
    dir: PathBuf,
    /// The state last written.
    written: Option<AgentState>,
    /// The read of the config last recorded.
    recorded: Option<ActiveRead>,
}

impl StateFileSink {
    pub fn new(state: AgentState, dir: PathBuf) -> StateFileSink {
        StateFileSink {
            state,
            dir,
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
                    path: state
                        .config_dir
                        .clone()
                        .unwrap_or_else(|| state.config.clone()),
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

impl StatusSink for StateFileSink {
    fn publish(&mut self, done: &PassDone) {
        let reconciler = done.reconciler;
        if let Some(origin) = reconciler.config_origin() {
            self.state.config_source = match origin {
                crate::config::ConfigOrigin::Defaults => "defaults".into(),
                crate::config::ConfigOrigin::File => "file".into(),
                crate::config::ConfigOrigin::Dir => "merged files".into(),
            };
        }
        self.state.rules.enable_ipv6 = reconciler.ipv6_managed();
        self.record_config(reconciler);
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
