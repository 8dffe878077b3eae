//! API mode: the outcome of each pass mirrored onto the agent's own Node, as the condition
//! `IPMasqAgentReady` and an Event per rejected config (the format is `cluster::mirror`'s).
//! The reconcile thread never waits for the API: its [`MirrorSink`] hands the state over
//! (the latest wins, and only a change wakes the writer), and one [`Writer`] task on the
//! agent's runtime writes it when it differs from what the Node holds, retrying with a backoff.
//!
//! The writer is paced ([`Pacer`]): one round of writes (the condition, and an Event) at most
//! every [`WRITE_INTERVAL`] whatever the edit rate, the state written being the latest; a
//! change waits for this node's slot in cycles of `--status-spread` on the wall clock (its
//! place in each cycle a hash of its name), so each node writes at most once a cycle and a
//! fleet's writes come at about N / window a second however often the config changes; an
//! Event with the same words is not created again within [`EVENT_REPEAT`], and a rejected
//! config replaced by a later state before the round still gets its Event. Two writes do not
//! wait: the first at start (starts are
//! already paced by the DaemonSet's rollout, a restart into the same state writes nothing,
//! and the word a restart finds may be its predecessor's, to be put right), and the
//! `NotReady` of a stop (it must land within the stop deadline). The rules never wait for any
//! of this.

use super::reconcile::{ApiSettings, Pass, Rejection, LAST_KNOWN_GOOD};
use super::sinks::{PassDone, StatusSink};
use crate::cluster::configmap::ConfigMapFeed;
use crate::cluster::mirror::{self, AgentStatus, Message, Outcome};
use crate::cluster::Credentials;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

/// The first retry of a failed write comes this soon, then twice as late each time, up to
/// [`LAST_RETRY`], each at this node's next place in the spread after it ([`Pacer::retry_due`]).
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(60);
/// The least time between two rounds of writes of one agent.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(5);
/// An Event with the same words (the rejected config's digest and diagnostic) is not created
/// again within this time.
pub const EVENT_REPEAT: Duration = Duration::from_secs(10 * 60);
/// How many Events' words are remembered for [`EVENT_REPEAT`].
const EVENTS_REMEMBERED: usize = 32;
/// The words of the condition an agent writes once it has removed its rules on a stop.
pub const RULES_REMOVED: &str =
    "the agent stopped and removed its rules (--cleanup-on-exit); nothing is enforced";

/// What the writer is to put on the Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub status: AgentStatus,
    /// A rejected config's source and diagnostic: the Event's message.
    pub diagnostic: Option<String>,
    /// Counts the states handed over, so a stop can wait for its own to be written.
    pub seq: u64,
    /// The uid of the Node as the API watchers last saw it: a new one (the Node registered
    /// again, without our condition) makes the writer read the Node again.
    pub node_uid: Option<String>,
    /// Written at once, not paced: the `NotReady` of a stop.
    pub urgent: bool,
}

impl Report {
    /// The diagnostic of a rejected config, the Event's message (None: not a rejection).
    pub fn rejection_diagnostic(&self) -> Option<&str> {
        self.diagnostic
            .as_deref()
            .filter(|_| self.status.outcome == Outcome::Rejected)
    }

    /// The same state but for the time of the pass (and the count).
    fn same_state(&self, other: &Report) -> bool {
        let time_free = |r: &Report| {
            (
                r.status.outcome,
                r.status.digest.clone(),
                r.status.backend.clone(),
                r.status.words.clone(),
                r.diagnostic.clone(),
                r.node_uid.clone(),
            )
        };
        time_free(self) == time_free(other)
    }
}

/// What a pass knows that the condition says.
pub struct PassFacts<'a> {
    pub pass: &'a Pass,
    /// Some pass has installed the rules since the agent started.
    pub ever_synced: bool,
    /// The config the source holds, while it is refused.
    pub rejection: Option<&'a Rejection>,
    /// The config in force is the last-known-good from the state directory, and the API
    /// cannot be read.
    pub last_known_good: bool,
    /// Why the API's view is stale (an input it has not answered for too long), while it is.
    pub stale_view: Option<String>,
    /// The SHA-256 of the config in force.
    pub digest: Option<&'a str>,
    pub backend: &'a str,
}

/// The condition a pass makes: the status to write on the Node, and the diagnostic an Event
/// carries (a rejected config's) with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub status: AgentStatus,
    pub diagnostic: Option<String>,
}

impl Condition {
    /// A status with no Event.
    fn alone(status: AgentStatus) -> Condition {
        Condition {
            status,
            diagnostic: None,
        }
    }
}

/// The condition's state after a pass (its time is the caller's), and a rejection's
/// diagnostic. A failed sync is `Drifted` once rules were ever installed (they stay, and the
/// repair is retried), else `NotReady`; then a refused config (the last good one stays in
/// force); then no config yet; then the last-known-good while the API is not read; else in sync.
pub fn outcome_of(facts: &PassFacts, now: Timestamp) -> Condition {
    let with = |outcome, words: Option<String>| AgentStatus {
        outcome,
        digest: facts.digest.map(str::to_string),
        backend: Some(facts.backend.to_string()),
        last_sync: now,
        words,
    };
    if let Pass::Failed(err) = facts.pass {
        return if facts.ever_synced {
            let words = format!("the last sync failed, retrying: {err}");
            Condition::alone(with(Outcome::Drifted, Some(words)))
        } else {
            let words = format!("the first sync failed, retrying: {err}");
            Condition::alone(with(Outcome::NotReady, Some(words)))
        };
    }
    if let Some(rejection) = facts.rejection {
        let which = match &rejection.digest {
            Some(hex) => format!(
                "the config sha256:{}",
                hex.chars().take(12).collect::<String>()
            ),
            None => "the config".to_string(),
        };
        let kept = if facts.digest.is_some() || matches!(facts.pass, Pass::Synced(_)) {
            "the last good one stays in force"
        } else {
            "no rules are installed"
        };
        let words = format!("{which} was rejected, {kept}: {}", rejection.diagnostic);
        return Condition {
            status: with(Outcome::Rejected, Some(words)),
            diagnostic: Some(format!("{}: {}", rejection.source, rejection.diagnostic)),
        };
    }
    match facts.pass {
        Pass::NoValidConfig => Condition::alone(with(Outcome::NotReady, None)),
        _ if facts.last_known_good => Condition::alone(with(Outcome::LastKnownGood, None)),
        _ if facts.stale_view.is_some() => {
            Condition::alone(with(Outcome::ApiViewStale, facts.stale_view.clone()))
        }
        _ => Condition::alone(with(Outcome::InSync, None)),
    }
}

/// The mirror of one agent: made at start in API mode (with a node name), its sink handed to
/// the reconcile thread, its writer spawned once the node lock is taken.
pub struct Mirror {
    reports: Arc<watch::Sender<Option<Report>>>,
    written: watch::Receiver<u64>,
    writer: Option<Writer>,
    backend: String,
}

/// When the writer may write: its pace, and this node's slot in the spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// The least time between two rounds of writes ([`WRITE_INTERVAL`]).
    pub interval: Duration,
    /// `--status-spread`: the length of the cycle the fleet's writes are spread over (zero:
    /// no spread).
    pub window: Duration,
    /// This node's place in each cycle: a change is written at the next time the wall clock
    /// is this far into a cycle.
    pub offset: Duration,
}

impl Pacing {
    pub fn for_node(node: &str, spread: Duration) -> Pacing {
        Pacing {
            interval: WRITE_INTERVAL,
            window: spread,
            offset: spread_offset(node, spread),
        }
    }
}

/// `node`'s place in a window of `spread`: the first 8 bytes of the SHA-256 of its name, modulo
/// the window in milliseconds (the same on every machine and version, spread evenly).
pub fn spread_offset(node: &str, spread: Duration) -> Duration {
    let window = u64::try_from(spread.as_millis()).unwrap_or(u64::MAX);
    if window == 0 {
        return Duration::ZERO;
    }
    let hex = crate::config::digest::sha256_hex(node.as_bytes());
    let hash = u64::from_str_radix(&hex[..16], 16).unwrap_or_default();
    Duration::from_millis(hash % window)
}

/// The fleet's shared time: the wall clock (every node's is kept near the others' by NTP) read
/// once, then carried forward on the monotonic clock, so cycles of the spread line up across
/// nodes while the writer's waits stay monotonic.
#[derive(Clone, Copy, Debug)]
pub struct WallAnchor {
    /// A monotonic instant ...
    pub at: Instant,
    /// ... and the wall clock then, in milliseconds since the Unix epoch.
    pub wall_ms: u64,
}

impl WallAnchor {
    /// Now, on both clocks.
    pub fn now() -> WallAnchor {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        WallAnchor {
            at: Instant::now(),
            wall_ms: u64::try_from(wall.as_millis()).unwrap_or_default(),
        }
    }

    /// The wall clock's milliseconds at `at`.
    fn wall_ms_at(&self, at: Instant) -> u64 {
        let since = u64::try_from(at.saturating_duration_since(self.at).as_millis()).unwrap_or(0);
        self.wall_ms.saturating_add(since)
    }
}

/// Paces the writer's rounds (see the module's documentation).
pub struct Pacer {
    pacing: Pacing,
    anchor: WallAnchor,
    /// When the last round was tried.
    last_attempt: Option<Instant>,
    /// The `seq` of the report the last round wrote (or tried to).
    attempted_seq: u64,
    /// A report was written (or tried) since the start: the next ones are paced.
    started: bool,
    /// The last rejected config seen while waiting, though a later state replaced it before
    /// the round: its Event is still created (the condition says only the latest state).
    rejected_meanwhile: Option<Report>,
}

impl Pacer {
    pub fn new(pacing: Pacing, anchor: WallAnchor) -> Pacer {
        Pacer {
            pacing,
            anchor,
            last_attempt: None,
            attempted_seq: 0,
            started: false,
            rejected_meanwhile: None,
        }
    }

    /// The rejected config seen since the last round, if any (taken: the round says it).
    pub fn take_rejected_meanwhile(&mut self) -> Option<Report> {
        self.rejected_meanwhile.take()
    }

    /// Gives back a rejection a failed round could not say, unless a newer one was seen.
    pub fn keep_rejected_meanwhile(&mut self, report: Option<Report>) {
        if self.rejected_meanwhile.is_none() {
            self.rejected_meanwhile = report;
        }
    }

    /// Notes the state now in the channel, if it is a rejected config.
    fn saw(&mut self, latest: Option<&Report>) {
        if let Some(report) = latest.filter(|r| r.rejection_diagnostic().is_some()) {
            self.rejected_meanwhile = Some(report.clone());
        }
    }

    /// This node's first slot at or after `at`: the time the wall clock is `offset` into a
    /// cycle of `window`. Every node writes at most once a cycle, each at its own place, so a
    /// fleet's writes come at about N / window a second however often the config changes.
    pub fn slot_at_or_after(&self, at: Instant) -> Instant {
        let window = u64::try_from(self.pacing.window.as_millis()).unwrap_or(u64::MAX);
        if window == 0 {
            return at;
        }
        let offset = u64::try_from(self.pacing.offset.as_millis()).unwrap_or(0) % window;
        let phase = self.anchor.wall_ms_at(at) % window;
        at + Duration::from_millis((offset + window - phase) % window)
    }

    /// A round was tried at `at` with `report`.
    pub fn attempted(&mut self, at: Instant, report: Option<&Report>) {
        self.last_attempt = Some(at);
        if let Some(report) = report {
            self.attempted_seq = report.seq;
            self.started = true;
        }
    }

    /// When the round for `latest`, pending since `since`, is due (`retry_at`: the last round
    /// failed, retry then).
    pub fn due(
        &self,
        latest: Option<&Report>,
        since: Instant,
        retry_at: Option<Instant>,
    ) -> Instant {
        let unwritten = latest.is_some_and(|r| r.seq > self.attempted_seq);
        if unwritten && latest.is_some_and(|r| r.urgent) {
            return since;
        }
        if let Some(retry) = retry_at {
            return self.retry_due(retry, latest);
        }
        let paced = self.paced(since);
        if unwritten && !self.started {
            return since;
        }
        self.slot_at_or_after(since.max(paced))
    }

    /// The earliest time of the next round by the interval alone: `first` before any round.
    fn paced(&self, first: Instant) -> Instant {
        self.last_attempt
            .map_or(first, |last| last + self.pacing.interval)
    }

    /// When a failed round is tried again: once its backoff ends (`backoff_end`) and not
    /// before the interval, in this node's slot as a change is (when the API refuses a whole
    /// fleet's writes at once, their retries still come about N / window a second), but for a
    /// stop's `NotReady`, which must land within the stop's deadline.
    pub fn retry_due(&self, backoff_end: Instant, latest: Option<&Report>) -> Instant {
        let at = backoff_end.max(self.paced(backoff_end));
        if latest.is_some_and(|r| r.urgent) {
            at
        } else {
            self.slot_at_or_after(at)
        }
    }

    /// Waits until the next round is due: after a success, for a new state and then its
    /// time; after a failure (`retry_at`), for the retry's time. Err when the agent stops.
    pub async fn wait(
        &mut self,
        reports: &mut watch::Receiver<Option<Report>>,
        retry_at: Option<Instant>,
    ) -> Result<(), watch::error::RecvError> {
        let since = match retry_at {
            Some(_) => Instant::now(),
            None => {
                reports.changed().await?;
                Instant::now()
            }
        };
        loop {
            let latest = reports.borrow().clone();
            self.saw(latest.as_ref());
            let due = self.due(latest.as_ref(), since, retry_at);
            tokio::select! {
                () = tokio::time::sleep_until(due) => return Ok(()),
                changed = reports.changed() => changed?,
            }
        }
    }
}

impl Mirror {
    /// The mirror in API mode; None in file mode, and (said once) without a node name.
    pub fn new(api: Option<&ApiSettings>, backend: crate::backend::BackendId) -> Option<Mirror> {
        let api = api?;
        if !api.status.enabled {
            info!(
                "--node-status=false: no {} condition and no Event are written; the API is only read",
                mirror::CONDITION_TYPE
            );
            return None;
        }
        let Some(node) = api.node_name.clone() else {
            warn!("no node name (--node-name, $NODE_NAME, the host name): the {} condition is not written", mirror::CONDITION_TYPE);
            return None;
        };
        let (reports, reports_rx) = watch::channel(None);
        let (written_tx, written) = watch::channel(0);
        Some(Mirror {
            reports: Arc::new(reports),
            written,
            writer: Some(Writer {
                credentials: api.credentials.clone(),
                pacing: Pacing::for_node(&node, api.status.spread),
                namespace: mirror::event_namespace(&api.configmap.namespace),
                node,
                reports: reports_rx,
                written: written_tx,
            }),
            backend: backend.as_str().to_string(),
        })
    }

    /// The sink the reconcile thread publishes each pass to.
    pub fn sink(&self, feed: Option<ConfigMapFeed>) -> MirrorSink {
        MirrorSink {
            reports: self.reports.clone(),
            feed,
        }
    }

    /// Spawns the writer on the current runtime (once; later calls do nothing).
    pub fn spawn_writer(&mut self) {
        if let Some(writer) = self.writer.take() {
            tokio::spawn(writer.run());
        }
    }

    /// After `--cleanup-on-exit` removed the rules: `NotReady` saying so, written within
    /// `within` at most (best effort: the stop goes on either way).
    pub async fn rules_removed(&self, within: Duration) {
        let mut seq = 0;
        self.reports.send_modify(|current| {
            seq = current.as_ref().map_or(0, |r| r.seq) + 1;
            *current = Some(Report {
                status: AgentStatus {
                    outcome: Outcome::NotReady,
                    digest: None,
                    backend: Some(self.backend.clone()),
                    last_sync: Timestamp::now(),
                    words: Some(RULES_REMOVED.to_string()),
                },
                diagnostic: None,
                seq,
                node_uid: current.as_ref().and_then(|r| r.node_uid.clone()),
                urgent: true,
            });
        });
        let mut written = self.written.clone();
        let confirmed = tokio::time::timeout(within, written.wait_for(|done| *done >= seq))
            .await
            .is_ok_and(|answer| answer.is_ok());
        if confirmed {
            info!(
                condition = mirror::CONDITION_TYPE,
                "the Node's condition says NotReady: the rules are removed"
            );
        } else {
            warn!(
                condition = mirror::CONDITION_TYPE,
                within_s = within.as_secs_f64(),
                "could not write NotReady before the stop deadline; the Node's condition still says what the agent last wrote"
            );
        }
    }
}

/// Hands each pass's state to the writer, only when it changed: a steady pass wakes nothing.
pub struct MirrorSink {
    reports: Arc<watch::Sender<Option<Report>>>,
    /// What the API watchers publish: whether every input has been listed yet.
    feed: Option<ConfigMapFeed>,
}

/// Where the API stands for the config's watcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApiState {
    /// Every input listed: the config in force is the API's (or was refused against it).
    Read,
    /// Not listed yet, and no error so far: starting.
    Starting,
    /// Not listed, and the watcher cannot read it.
    Unreachable,
}

impl MirrorSink {
    /// Where the API stands, and the uid of the Node as its watcher last saw it.
    fn api_state(&self) -> (ApiState, Option<String>) {
        let Some(feed) = &self.feed else {
            return (ApiState::Read, None);
        };
        let state = feed.lock().unwrap_or_else(|e| e.into_inner());
        let api = match (state.listed(), state.trouble()) {
            (true, _) => ApiState::Read,
            (false, None) => ApiState::Starting,
            (false, Some(_)) => ApiState::Unreachable,
        };
        (api, state.node_uid.clone())
    }
}

impl MirrorSink {
    /// Why the API's view is stale, while an input's is older than allowed.
    fn stale_view(&self) -> Option<String> {
        let feed = self.feed.as_ref()?;
        let state = feed.lock().unwrap_or_else(|e| e.into_inner());
        state.view.as_ref()?.stale(tokio::time::Instant::now())
    }
}

impl StatusSink for MirrorSink {
    fn publish(&mut self, done: &PassDone) {
        let reconciler = done.reconciler;
        let read = reconciler.config_read();
        let backend = reconciler.backend_id();
        let saved_in_force = read.is_some_and(|r| r.label.starts_with(LAST_KNOWN_GOOD));
        let (api, node_uid) = self.api_state();
        if api == ApiState::Starting {
            // Before the API's first list (or its first failure) the agent knows nothing of
            // the cluster's config: say nothing yet (after a restart, the saved config in
            // force, the API's word is usually the same, and nothing is written at all).
            return;
        }
        if saved_in_force && api == ApiState::Read && reconciler.rejection().is_none() {
            // The last-known-good is in force and the API was listed since this pass read its
            // source: the pass that reads the API's config follows at once (it takes the
            // config into force, or names the saved one by its API source). Saying InSync now
            // would vouch for a config the API may not hold.
            return;
        }
        let facts = PassFacts {
            pass: done.pass,
            ever_synced: reconciler.status.last_success.is_some(),
            rejection: reconciler.rejection(),
            last_known_good: saved_in_force && api == ApiState::Unreachable,
            stale_view: self.stale_view(),
            digest: read.and_then(|r| r.digest.as_deref()),
            backend: backend.as_str(),
        };
        hand_over(
            &self.reports,
            outcome_of(&facts, Timestamp::now()),
            node_uid,
        );
    }
}

/// Hands a state to the writer unless it is the one it holds already (its time aside: the
/// kept `lastSync` is the pass that reached the state). Never waits. Whether it was new.
fn hand_over(
    reports: &watch::Sender<Option<Report>>,
    condition: Condition,
    node_uid: Option<String>,
) -> bool {
    let Condition { status, diagnostic } = condition;
    reports.send_if_modified(|current| {
        let next = Report {
            status,
            diagnostic,
            seq: current.as_ref().map_or(0, |r| r.seq) + 1,
            node_uid,
            urgent: false,
        };
        if current.as_ref().is_some_and(|c| c.same_state(&next)) {
            return false;
        }
        *current = Some(next);
        true
    })
}

/// The one task that writes to the API for the mirror.
pub struct Writer {
    credentials: Credentials,
    node: String,
    /// Where its Events go: the agent's own namespace (the ConfigMap's).
    namespace: String,
    pacing: Pacing,
    reports: watch::Receiver<Option<Report>>,
    /// The `seq` of the last report the Node holds.
    written: watch::Sender<u64>,
}

/// What the writer knows of the Node.
#[derive(Default)]
struct OnNode {
    /// Read once (GET) at start; then what each write returned.
    read: bool,
    /// A state has been compared with the Node's condition since the start.
    compared: bool,
    uid: Option<String>,
    condition: Option<NodeCondition>,
    /// The words of the rejection whose Event was created (also read back from a
    /// `ConfigRejected` condition at start: a restart does not repeat the Event).
    event_for: Option<String>,
    /// The words of the Events created lately, and when: one is not repeated within
    /// [`EVENT_REPEAT`] (a config flipping between valid and invalid).
    recent_events: std::collections::VecDeque<(String, Instant)>,
}

impl OnNode {
    /// Whether an Event with these words was created within [`EVENT_REPEAT`].
    fn event_recent(&mut self, key: &str, now: Instant) -> bool {
        self.recent_events
            .retain(|(_, at)| now.saturating_duration_since(*at) < EVENT_REPEAT);
        self.recent_events.iter().any(|(words, _)| words == key)
    }

    fn event_created(&mut self, key: String, now: Instant) {
        if self.recent_events.len() >= EVENTS_REMEMBERED {
            self.recent_events.pop_front();
        }
        self.recent_events.push_back((key, now));
    }
}

/// A failure logged once until it changes or the writes succeed again.
#[derive(Default)]
struct Said(Option<String>);

impl Said {
    fn failed(&mut self, error: String, retry_in: Duration) {
        if self.0.as_ref() != Some(&error) {
            warn!(condition = mirror::CONDITION_TYPE, retry_in_s = retry_in.as_secs_f64(), error = %error, "cannot keep the Node's condition current; retrying after a backoff, in this node's place of the status spread (the rules are not affected)");
            self.0 = Some(error);
        }
    }

    fn succeeded(&mut self) {
        if self.0.take().is_some() {
            info!(
                condition = mirror::CONDITION_TYPE,
                "the Node's condition is written again"
            );
        }
    }
}

/// The wait before retry number `failures`.
fn retry_in(failures: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(LAST_RETRY)
}

impl Writer {
    /// Until the agent stops: the client, the Node read once, then each new state written when
    /// the Node does not already hold it.
    pub async fn run(mut self) {
        let mut said = Said::default();
        let mut failures = 0;
        let client = loop {
            let manners = crate::cluster::Manners::writer_for(&self.node);
            match crate::cluster::client_with(&self.credentials, &manners).await {
                Ok(client) => {
                    failures = 0;
                    break client;
                }
                Err(err) => {
                    failures += 1;
                    said.failed(err.to_string(), retry_in(failures));
                    tokio::time::sleep(retry_in(failures)).await;
                }
            }
        };
        let mut on_node = OnNode::default();
        let mut pacer = Pacer::new(self.pacing, WallAnchor::now());
        loop {
            let report = self.reports.borrow_and_update().clone();
            let meanwhile = pacer.take_rejected_meanwhile();
            let result = self
                .write(&client, &mut on_node, report.as_ref(), meanwhile.as_ref())
                .await;
            if result.is_err() {
                pacer.keep_rejected_meanwhile(meanwhile);
            }
            pacer.attempted(Instant::now(), report.as_ref());
            let retry_at = match result {
                Ok(()) => {
                    failures = 0;
                    said.succeeded();
                    if let Some(report) = report {
                        self.written.send_replace(report.seq);
                    }
                    None
                }
                Err(err) => {
                    failures += 1;
                    let now = Instant::now();
                    let backoff_end = now + retry_in(failures);
                    let due = pacer.retry_due(backoff_end, report.as_ref());
                    said.failed(err.to_string(), due.saturating_duration_since(now));
                    Some(backoff_end)
                }
            };
            if pacer.wait(&mut self.reports, retry_at).await.is_err() {
                return;
            }
        }
    }

    /// Reads the Node once, then writes `report` (if any) where the Node says otherwise, and
    /// the Event of a rejection not yet reported: `report`'s, or else one seen `meanwhile` (a
    /// rejected config a later state replaced before this round).
    async fn write(
        &self,
        client: &kube::Client,
        on_node: &mut OnNode,
        report: Option<&Report>,
        meanwhile: Option<&Report>,
    ) -> Result<(), mirror::MirrorError> {
        // Read the Node at start, and again when it was registered again (a new uid: a new
        // object, without our condition).
        let registered_again = report.is_some_and(|r| {
            r.node_uid.is_some() && on_node.uid.is_some() && r.node_uid != on_node.uid
        });
        if !on_node.read || registered_again {
            let node = mirror::read_node(client.clone(), &self.node).await?;
            on_node.uid.clone_from(&node.metadata.uid);
            on_node.condition = mirror::ours(&node).cloned();
            on_node.event_for = on_node
                .condition
                .as_ref()
                .filter(|c| c.reason.as_deref() == Some(Outcome::Rejected.reason()))
                .map(|c| Message::parse(c.message.as_deref().unwrap_or_default()).words);
            on_node.read = true;
        }
        let Some(report) = report else {
            return Ok(());
        };
        let next = mirror::condition(&report.status, on_node.condition.as_ref());
        let first = !on_node.compared;
        on_node.compared = true;
        if !mirror::write_needed(on_node.condition.as_ref(), &next) && first {
            info!(
                condition = mirror::CONDITION_TYPE,
                reason = next.reason.as_deref().unwrap_or_default(),
                "the Node's condition is current already: nothing to write"
            );
        }
        if mirror::write_needed(on_node.condition.as_ref(), &next) {
            let node = mirror::publish(client.clone(), &self.node, &next).await?;
            on_node.uid.clone_from(&node.metadata.uid);
            on_node.condition = mirror::ours(&node).cloned();
            info!(
                condition = mirror::CONDITION_TYPE,
                status = %next.status,
                reason = next.reason.as_deref().unwrap_or_default(),
                "the Node's condition written"
            );
        }
        if report.rejection_diagnostic().is_some() {
            return self.say_rejected(client, on_node, report, true).await;
        }
        on_node.event_for = None;
        match meanwhile {
            Some(rejected) => self.say_rejected(client, on_node, rejected, false).await,
            None => Ok(()),
        }
    }

    /// Creates the Event of the rejected config `report` unless one with its words was made
    /// for the condition in force or within [`EVENT_REPEAT`]; `current`: the condition says
    /// this rejection.
    async fn say_rejected(
        &self,
        client: &kube::Client,
        on_node: &mut OnNode,
        report: &Report,
        current: bool,
    ) -> Result<(), mirror::MirrorError> {
        let Some(diagnostic) = report.rejection_diagnostic() else {
            return Ok(());
        };
        let key = Message::of(&report.status).words;
        if on_node.event_for.as_ref() != Some(&key) && !on_node.event_recent(&key, Instant::now()) {
            let about = mirror::EventAbout {
                namespace: self.namespace.clone(),
                node: self.node.clone(),
                node_uid: on_node.uid.clone(),
            };
            let event = mirror::rejection_event(&about, diagnostic, Timestamp::now());
            match mirror::publish_event(client.clone(), &event).await {
                Ok(_) => {}
                // Refused for good (RBAC without events create, no such namespace): said once,
                // not retried, so a rejected config costs no request per backoff; the
                // condition carries the rejection either way.
                Err(err) if refused_for_good(&err) => {
                    warn!(error = %err, "the ConfigRejected Event is refused; not retried (the condition says the config was rejected)");
                }
                Err(err) => return Err(err),
            }
            on_node.event_created(key.clone(), Instant::now());
            if current {
                on_node.event_for = Some(key);
            }
        }
        Ok(())
    }
}

/// Whether the API refused an Event in a way a retry cannot change (forbidden, no such
/// namespace, invalid).
fn refused_for_good(err: &mirror::MirrorError) -> bool {
    matches!(
        err,
        mirror::MirrorError::Event {
            source: kube::Error::Api(status),
            ..
        } if matches!(status.code, 403 | 404 | 422)
    )
}

#[cfg(test)]
mod tests;
