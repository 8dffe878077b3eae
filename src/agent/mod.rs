//! The agent: the reconcile loop and what triggers it (the resync timer, a change in the
//! config directory, SIGHUP). Passes run on their own thread, so the current-thread tokio
//! runtime always serves health, metrics and signals, whatever a sync is doing (a wedged
//! `iptables-restore` included). SIGTERM and SIGINT end it, after removing our rules from the
//! backend in use when asked to.

pub(crate) mod endpoints;
mod foreign_changes;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod last_known_good;
pub(crate) mod logging;
pub(crate) mod memory;
pub(crate) mod metrics;
mod mirror_sink;
pub(crate) mod reconcile;
mod rollout_brake;
mod sinks;
pub(crate) mod state;
pub(crate) mod systemd;
mod taint_sink;
pub(crate) mod watch;

use crate::backend::Backend;
use crate::plan::Names;
use reconcile::{Pass, Reconciler};
use sinks::{HealthSink, LastKnownGoodSink, LogSink, PassDone, StateFileSink, StatusSink};
use state::AgentState;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{debug, error, info, warn};
use watch::DirWatch;

/// How long a burst of config-directory events must be quiet before one reload.
const SETTLE: Duration = Duration::from_millis(20);
/// How long address changes must be quiet before the pass they call for, and the most a
/// burst of them (an address flapping, interfaces created by the thousand) delays it: the
/// pass comes within this of the first change, and a burst costs one pass.
const ADDRESS_QUIET: Duration = Duration::from_millis(30);
const ADDRESS_SETTLE: Duration = Duration::from_millis(200);
/// With `--cleanup-on-exit`, the whole stop (the running pass, then the cleanup) ends within
/// this, well inside kubelet's default grace period of 30 s: what is not removed by then is
/// reported and left in place.
pub const STOP_DEADLINE: Duration = Duration::from_secs(20);
/// How long a stop waits for a running pass before killing the tool it waits on.
const PASS_GRACE: Duration = Duration::from_secs(5);

/// How the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// A signal asked us to stop; cleanup (if requested) succeeded.
    Stopped,
    /// Cleanup on exit failed for at least one family.
    CleanupFailed,
    /// The runtime or signal handling could not be set up.
    SetupFailed(String),
}

/// Why a pass was triggered.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    Timer,
    ConfigChanged,
    Hangup,
    /// An address of this node came or went (worth a pass only with `outputAddress`).
    AddressChanged,
    /// The API watcher saw the config ConfigMap's text change (API mode).
    ApiChanged,
    /// Another process's commit changed the rules we own (nf_tables notifications).
    ForeignChange,
}

impl Trigger {
    /// Whether this trigger can follow a change of the config file (or the API's config);
    /// an address change and a neighbour's commit cannot.
    fn may_follow_a_config_change(self) -> bool {
        !matches!(self, Trigger::AddressChanged | Trigger::ForeignChange)
    }
}

/// What the event loop asks of the reconcile thread.
enum Command {
    Pass(Trigger),
    Stop,
}

/// How the agent runs besides its reconciler.
pub struct RunOptions {
    pub cleanup_on_exit: bool,
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The SNAT log and port pressure, started once the node lock is ours.
    pub snat: Option<crate::snat::SnatOptions>,
    /// API mode: how old an input's view may be before the Node condition says
    /// `ApiViewStale` (`--api-view-stale-after`).
    pub api_view_stale_after: std::time::Duration,
    /// Where the state file goes, and its content (config source is kept current).
    pub state_dir: PathBuf,
    pub state: AgentState,
    /// How long a writer may keep the config file open (modified, not closed) before the file
    /// is read as it is (`--config-writer-deadline`).
    pub config_writer_deadline: Duration,
}

/// Runs the reconcile loop until SIGTERM/SIGINT, serving health and metrics on
/// `metrics_addr` when given.
pub fn run_forever(reconciler: Reconciler, options: RunOptions) -> Ending {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => return Ending::SetupFailed(format!("cannot start the runtime: {err}")),
    };
    let state_dir = options.state_dir.clone();
    let instance = options.state.instance.clone();
    let held = HeldLock::default();
    let ending = runtime.block_on(run_loop(reconciler, options, held.clone()));
    // The runtime goes first, and the health listener with it: a successor takes the port
    // as soon as it has the lock.
    drop(runtime);
    // A clean exit leaves no trace: the state files, then the lock (its file unlinked while
    // still held, so a successor waiting on it takes a fresh one).
    state::remove(&state_dir, &instance);
    if let Some(lock) = held.lock().unwrap_or_else(|e| e.into_inner()).take() {
        lock.release();
    }
    ending
}

/// The node lock once the reconcile thread has it: held until the process has cleaned up
/// (a successor must not start before `--cleanup-on-exit` is done with the rules).
type HeldLock = Arc<Mutex<Option<state::NodeLock>>>;

/// What the reconcile thread starts with: the reconciler, its commands and where it reports,
/// the state it records, and the node lock it takes and hands back.
struct ThreadStart {
    reconciler: Reconciler,
    commands: mpsc::Receiver<Command>,
    shared: http::Shared,
    passes_done: tokio::sync::mpsc::UnboundedSender<()>,
    state: AgentState,
    state_dir: PathBuf,
    /// Where the node lock is kept once taken, for the stop to release.
    held: HeldLock,
    /// Told when the lock is taken.
    lock_taken: tokio::sync::oneshot::Sender<()>,
    /// API mode: where the writers about this node hear of each pass.
    writer_sinks: WriterSinks,
}

/// The reconcile thread: a pass, then wait for a command or the interval, until stopped.
/// Returns the reconciler so a stop can clean up with the backend in use.
fn reconcile_thread(start: ThreadStart) -> Reconciler {
    let ThreadStart {
        mut reconciler,
        commands,
        shared,
        passes_done,
        state,
        state_dir,
        held,
        lock_taken,
        writer_sinks,
    } = start;
    let Some(node_lock) = take_node_lock_or_wait(&state_dir, &state.rules.masq_chain, &commands)
    else {
        return reconciler;
    };
    *held.lock().unwrap_or_else(|e| e.into_inner()) = Some(node_lock);
    let _ = lock_taken.send(());
    // The first pass waits for the endpoint: a port that cannot be served stops the agent
    // before it touches a rule.
    if !matches!(commands.recv(), Ok(Command::Pass(_))) {
        return reconciler;
    }
    reconciler.take_over_leftovers();
    let mut trigger = Trigger::Timer;
    let mut leftovers_checked = false;
    let api = reconciler.settings.api.is_some();
    let mut sinks: Vec<Box<dyn StatusSink>> =
        vec![Box::new(HealthSink(shared.clone())), Box::new(LogSink)];
    if let Some(api) = &reconciler.settings.api {
        sinks.push(Box::new(LastKnownGoodSink::new(api)));
    }
    sinks.push(Box::new(StateFileSink::new(state, state_dir, api)));
    sinks.extend(writer_sinks.into_sinks());
    loop {
        let started = Instant::now();
        lock(&shared).running_since = Some(started);
        if matches!(trigger, Trigger::AddressChanged | Trigger::Hangup) {
            reconciler.addresses_may_have_changed();
        }
        let pass = reconciler.pass();
        let first_sync = !leftovers_checked && matches!(pass, Pass::Synced(_));
        if first_sync {
            // Our rules are in force and we hold the lock: the other kind's may go now.
            leftovers_checked = true;
            remove_leftovers_of_other_backends(
                reconciler.backend_id(),
                &reconciler.settings.plan.names(),
            );
        }
        let done = PassDone {
            reconciler: &reconciler,
            pass: &pass,
            trigger,
            started,
        };
        for sink in &mut sinks {
            sink.publish(&done);
        }
        if first_sync {
            release_start_up_pages();
        }
        let _ = passes_done.send(());
        match next_trigger(&mut reconciler, &commands) {
            Some(next) => trigger = next,
            None => return reconciler,
        }
    }
}

/// Waits for the next trigger (None: stop); a burst of commands makes one pass. An address
/// change matters only to a config that names an output address; a burst that no config
/// change can have started leaves the config file unread.
fn next_trigger(
    reconciler: &mut Reconciler,
    commands: &mpsc::Receiver<Command>,
) -> Option<Trigger> {
    // Asked again after the sinks: the brake may have latched a rollout (a pass at once).
    let wait_until = Instant::now() + reconciler.status.next_pass_in.min(reconciler.next_wait());
    let trigger = loop {
        let left = wait_until.saturating_duration_since(Instant::now());
        match commands.recv_timeout(left) {
            Ok(Command::Pass(Trigger::AddressChanged)) if !reconciler.uses_node_addresses() => {}
            Ok(Command::Pass(t)) => break t,
            Err(RecvTimeoutError::Timeout) => break Trigger::Timer,
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return None,
        }
    };
    let mut config_may_have_changed = trigger.may_follow_a_config_change();
    loop {
        match commands.try_recv() {
            Ok(Command::Pass(also)) => {
                config_may_have_changed |= also.may_follow_a_config_change();
                if matches!(also, Trigger::AddressChanged | Trigger::Hangup) {
                    reconciler.addresses_may_have_changed();
                }
            }
            Ok(Command::Stop) => return None,
            Err(_) => break,
        }
    }
    if !config_may_have_changed {
        reconciler.keep_the_config_file_unread();
    }
    Some(trigger)
}

/// After the first sync: the binary's read-only pages that start-up alone used (argument
/// parsing, the config's first read, the backend's probe, the relocation table) leave the
/// resident set; what the next passes run maps again from the page cache.
fn release_start_up_pages() {
    match crate::netlink::image::release_read_only_pages() {
        Ok(bytes) => debug!(bytes, "released the start-up pages of the binary"),
        Err(err) => debug!(error = %err, "could not release the start-up pages of the binary"),
    }
}

/// How long an agent that could not take the node lock waits before trying again.
const LOCK_RETRY: Duration = Duration::from_secs(5);

/// Takes the node lock for `chain`, waiting (and saying so) while another agent holds it.
/// Something planted at the lock's name is replaced, with a warning; when the lock cannot be
/// taken at all the error says why, and the caller touches no rule (never runs unlocked).
pub fn take_node_lock(dir: &std::path::Path, chain: &str) -> Result<state::NodeLock, String> {
    let acquired = state::acquire_lock(dir, chain, |holder| {
        let holder = holder.map_or("another agent".to_string(), |pid| {
            format!("agent pid {pid}")
        });
        warn!(chain, %holder, "{holder} holds the node lock for this chain: two agents on one node are not supported (a DaemonSet must roll with maxSurge: 0); waiting for it to exit before touching the rules or serving health");
    });
    match acquired {
        Ok(lock) => {
            if let Some(planted) = &lock.replaced {
                warn!(path = %lock.path.display(), planted = %planted, "replaced what was planted at the node lock's path with our own lock file (the name was unlinked; nothing it pointed to was opened)");
            }
            debug!(path = %lock.path.display(), "node lock taken");
            Ok(lock)
        }
        Err(err) => Err(format!(
            "cannot take the node lock in {}: {err}",
            dir.display()
        )),
    }
}

/// The node lock for the reconcile thread: tried again every [`LOCK_RETRY`] until taken
/// (the error logged once), or None when a stop comes first. Until then the agent touches no
/// rule and serves no endpoint, so it is not ready.
fn take_node_lock_or_wait(
    dir: &std::path::Path,
    chain: &str,
    commands: &mpsc::Receiver<Command>,
) -> Option<state::NodeLock> {
    let mut said: Option<String> = None;
    loop {
        match take_node_lock(dir, chain) {
            Ok(lock) => {
                if said.is_some() {
                    info!(path = %lock.path.display(), "node lock taken at last");
                }
                return Some(lock);
            }
            Err(err) => {
                if said.as_deref() != Some(err.as_str()) {
                    error!(
                        retry_in_s = LOCK_RETRY.as_secs(),
                        "{err}; touching no rule and not ready until it is taken"
                    );
                    said = Some(err);
                }
            }
        }
        match commands.recv_timeout(LOCK_RETRY) {
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return None,
            Ok(Command::Pass(_)) | Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

fn lock(shared: &http::Shared) -> std::sync::MutexGuard<'_, health::Snapshot> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The streams of SIGTERM, SIGINT and SIGHUP.
fn agent_signals() -> Option<(
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
)> {
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    );
    match signals {
        (Ok(t), Ok(i), Ok(h)) => Some((t, i, h)),
        _ => None,
    }
}

/// What the agent starts once the wait for the node lock has ended.
struct LockHolder<'a> {
    options: &'a RunOptions,
    shared: &'a http::Shared,
    commands: &'a mpsc::Sender<Command>,
}

/// API mode: what the agent writes about itself, each made at start, its writer spawned once
/// the node lock is ours: each pass mirrored onto this Node, the Node's taint following what
/// the agent can enforce (--node-taint), and the halt of a rollout in waves this node failed.
struct NodeWriters {
    mirror: Option<mirror_sink::Mirror>,
    taint: Option<taint_sink::NodeTaint>,
    brake: Option<rollout_brake::Brake>,
}

/// Where those writers hear of each pass: sinks for the reconcile thread.
struct WriterSinks {
    mirror: Option<mirror_sink::MirrorSink>,
    taint: Option<taint_sink::TaintSink>,
    brake: Option<rollout_brake::BrakeSink>,
}

impl NodeWriters {
    fn new(reconciler: &Reconciler) -> (NodeWriters, WriterSinks) {
        let api = reconciler.settings.api.as_ref();
        let mirror = mirror_sink::Mirror::new(api, reconciler.backend_id());
        let taint = taint_sink::NodeTaint::new(api);
        let brake = rollout_brake::Brake::new(api);
        let sinks = WriterSinks {
            mirror: mirror.as_ref().map(|m| m.sink(reconciler.api_feed())),
            taint: taint.as_ref().map(|t| t.sink(reconciler.api_feed())),
            brake: brake
                .as_ref()
                .and_then(|b| b.sink(reconciler.rollout_latch())),
        };
        (
            NodeWriters {
                mirror,
                taint,
                brake,
            },
            sinks,
        )
    }

    /// Spawns every writer (once).
    fn spawn(&mut self) {
        if let Some(mirror) = &mut self.mirror {
            mirror.spawn_writer();
        }
        if let Some(taint) = &mut self.taint {
            taint.spawn_writer();
        }
        if let Some(brake) = &mut self.brake {
            brake.spawn_writer();
        }
    }

    /// Those that tell the API, at a stop, that the rules are gone.
    fn told_at_stop(&self) -> StopWriters<'_> {
        StopWriters {
            mirror: self.mirror.as_ref(),
            taint: self.taint.as_ref(),
        }
    }
}

impl WriterSinks {
    fn into_sinks(self) -> Vec<Box<dyn StatusSink>> {
        let mut sinks: Vec<Box<dyn StatusSink>> = Vec::new();
        sinks.extend(self.mirror.map(|m| Box::new(m) as Box<dyn StatusSink>));
        sinks.extend(self.taint.map(|t| Box::new(t) as Box<dyn StatusSink>));
        sinks.extend(self.brake.map(|b| Box::new(b) as Box<dyn StatusSink>));
        sinks
    }
}

impl LockHolder<'_> {
    /// Once the node lock is ours (`taken`; else only the first pass's go-ahead, which then
    /// waits no more): the SNAT log, the endpoint and the first pass, the API watch and the
    /// Node's writer. The SNAT log's stop when it runs; the ending when the agent cannot go on.
    async fn start(
        &self,
        taken: bool,
        api: Option<(
            reconcile::ApiSettings,
            crate::cluster::configmap::ConfigMapFeed,
        )>,
        writers: &mut NodeWriters,
    ) -> Result<Option<crate::snat::Stop>, Ending> {
        let mut snat_stop = None;
        if let (true, Some(snat)) = (taken, self.options.snat.clone()) {
            // Before the first pass, and never waiting on the log: the file is opened on the
            // writer's thread (a log that cannot be opened is said and tried again; the
            // masquerade goes on). Only ctnetlink refusing the subscription stops the agent
            // before it touches a rule.
            match crate::snat::start(snat) {
                Ok(running) => {
                    lock(self.shared).snat = Some(running.stats);
                    snat_stop = Some(running.stop);
                }
                Err(err) => {
                    let _ = self.commands.send(Command::Stop);
                    return Err(Ending::SetupFailed(format!(
                        "cannot start the SNAT log: {err}"
                    )));
                }
            }
        }
        serve_then_pass(taken, self.options.metrics_addr, self.shared, self.commands).await?;
        // The API is watched by the holder of the node lock only, once it serves.
        if let (true, Some((settings, feed))) = (taken, api) {
            let view = api_view(self.shared, &settings, self.options.api_view_stale_after);
            let pods = self.options.snat.as_ref().and_then(|s| s.pods.clone());
            tokio::spawn(watch_the_api(
                settings,
                feed,
                self.commands.clone(),
                view,
                pods,
            ));
        }
        if taken {
            writers.spawn();
        }
        Ok(snat_stop)
    }
}

async fn run_loop(reconciler: Reconciler, options: RunOptions, held: HeldLock) -> Ending {
    let Some((mut sigterm, mut sigint, mut sighup)) = agent_signals() else {
        return Ending::SetupFailed("cannot install signal handlers".into());
    };
    let shared: http::Shared = Arc::new(Mutex::new(health::Snapshot::new(reconciler.backend_id())));
    // In API mode no file is read, so none is watched: the ConfigMap watcher wakes the passes.
    let mut api = reconciler.settings.api.clone().zip(reconciler.api_feed());
    let mut files = FileTrigger::new(&reconciler, options.config_writer_deadline);
    let names = reconciler.settings.plan.names();
    let backend_id = reconciler.backend_id();
    let address_events = reconciler.address_events();
    let (mut writers, writer_sinks) = NodeWriters::new(&reconciler);
    let (commands, command_rx) = mpsc::channel();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let thread_shared = shared.clone();
    let state = options.state.clone();
    let state_dir = options.state_dir.clone();
    // Health and metrics are served once the node lock is ours: an agent still exiting holds
    // the port until then, and a second agent is not a second endpoint.
    let (lock_taken, mut lock_taken_rx) = tokio::sync::oneshot::channel();
    let mut awaiting_lock = true;
    let worker = std::thread::Builder::new()
        .name("reconcile".into())
        .spawn(move || {
            reconcile_thread(ThreadStart {
                reconciler,
                commands: command_rx,
                shared: thread_shared,
                passes_done: done_tx,
                state,
                state_dir,
                held,
                lock_taken,
                writer_sinks,
            })
        });
    let worker = match worker {
        Ok(handle) => handle,
        Err(err) => {
            return Ending::SetupFailed(format!("cannot start the reconcile thread: {err}"))
        }
    };
    let mut addresses = AddressTrigger::new(shared.clone(), &address_events);
    let mut foreign = foreign_changes::ForeignTrigger::new(
        backend_id.announced_ownership(&names),
        shared.clone(),
    );
    let mut snat_stop: Option<crate::snat::Stop> = None;
    let signal_name = loop {
        tokio::select! {
            taken = &mut lock_taken_rx, if awaiting_lock => {
                awaiting_lock = false;
                let holder = LockHolder { options: &options, shared: &shared, commands: &commands };
                match holder.start(taken.is_ok(), api.take(), &mut writers).await {
                    Ok(stop) => snat_stop = stop,
                    Err(ending) => return ending,
                }
            }
            _ = done_rx.recv() => files.arm(),
            () = files.settled() => drop(commands.send(Command::Pass(Trigger::ConfigChanged))),
            () = addresses.settled() => drop(commands.send(Command::Pass(Trigger::AddressChanged))),
            () = foreign.repair_due(), if !awaiting_lock => drop(commands.send(Command::Pass(Trigger::ForeignChange))),
            _ = sighup.recv() => {
                info!("SIGHUP: re-reading the config and re-syncing");
                let _ = commands.send(Command::Pass(Trigger::Hangup));
            }
            _ = sigterm.recv() => break "SIGTERM",
            _ = sigint.recv() => break "SIGINT",
        }
    };
    let holds_lock = !awaiting_lock;
    let cleanup = Cleanup {
        on_exit: options.cleanup_on_exit,
        holds_lock,
        backend_id,
        names,
    };
    let stopping = stop(
        signal_name,
        cleanup,
        commands,
        worker,
        writers.told_at_stop(),
    );
    stop_draining_the_snat_log(snat_stop, stopping).await
}

/// `stopping` (the stop), while the SNAT log (once it runs) drains: it is done (written and
/// synced) within the stop deadline and before the lock goes, so a successor never appends
/// to a file still being written.
async fn stop_draining_the_snat_log(
    snat_stop: Option<crate::snat::Stop>,
    stopping: impl std::future::Future<Output = Ending>,
) -> Ending {
    let drain_by = std::time::Instant::now() + STOP_DEADLINE;
    if let Some(snat_stop) = &snat_stop {
        snat_stop.begin();
    }
    let ending = stopping.await;
    if let Some(snat_stop) = snat_stop {
        let _ = tokio::task::spawn_blocking(move || snat_stop.finish_by(drain_by)).await;
    }
    ending
}

/// The config file's (or directory's) changes: the directory watch, a change waiting to
/// settle (the loop keeps serving signals meanwhile), and the in-flux flag the source reads
/// while a writer has the file open. API mode has no watch: the ConfigMap watcher wakes the
/// passes instead.
struct FileTrigger {
    watch: Option<DirWatch>,
    settling: Option<watch::Settling>,
    in_flux: Arc<std::sync::atomic::AtomicBool>,
    /// How long a writer may keep the file open before it is read as it is.
    writer_deadline: Duration,
}

impl FileTrigger {
    fn new(reconciler: &Reconciler, writer_deadline: Duration) -> Self {
        let watch = match (&reconciler.settings.api, &reconciler.settings.config) {
            (Some(_), _) => None,
            (None, crate::config::ConfigSource::File(path)) => Some(DirWatch::new(path)),
            (None, crate::config::ConfigSource::Dir(dir)) => Some(DirWatch::for_parts(dir)),
        };
        FileTrigger {
            watch,
            settling: None,
            in_flux: reconciler.config_in_flux(),
            writer_deadline,
        }
    }

    /// Adds the watches that are missing (after a pass: the directory may have appeared).
    fn arm(&mut self) {
        if let Some(watch) = self.watch.as_mut() {
            watch.arm();
        }
    }

    fn writing(&self) -> bool {
        self.watch.as_ref().is_some_and(DirWatch::writing)
    }

    /// Returns once a change has settled: a burst of events quiet for [`SETTLE`], a writer
    /// done (or past its deadline). Cancel-safe: the change waiting is kept here.
    async fn settled(&mut self) {
        use std::sync::atomic::Ordering;
        loop {
            let writing = self.writing();
            let deadline = self
                .settling
                .map(|s| s.deadline(writing, SETTLE, self.writer_deadline));
            let due = async move {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                renamed_into_place = config_changed(&mut self.watch) => {
                    let now = tokio::time::Instant::now();
                    self.settling
                        .get_or_insert_with(|| watch::Settling::new(now))
                        .saw_event(now, renamed_into_place);
                    // While a writer has the file open, no pass (timer or signal) reads it.
                    let writing = self.writing();
                    let was = self.in_flux.swap(writing, Ordering::AcqRel);
                    if writing && !was {
                        info!("the config file is being rewritten in place; waiting for the writer to close it");
                    }
                }
                () = due => {
                    if let Some(watch) = self.watch.as_mut().filter(|w| w.writing()) {
                        warn!(deadline_s = self.writer_deadline.as_secs_f64(), "a writer has kept the config file open past the deadline; reading it as it is");
                        watch.forget_writer();
                    }
                    self.settling = None;
                    self.in_flux.store(false, Ordering::Release);
                    return;
                }
            }
        }
    }
}

/// Returns once the config directory's watch saw a change, with whether it ended in a rename
/// into place (never, without a watch: API mode).
async fn config_changed(watch: &mut Option<DirWatch>) -> bool {
    match watch {
        Some(watch) => {
            watch.changed().await;
            watch.renamed_into_place()
        }
        None => std::future::pending().await,
    }
}

/// API mode: the view of the inputs' age, kept in `shared` for `/metrics`.
fn api_view(
    shared: &http::Shared,
    settings: &reconcile::ApiSettings,
    stale_after: std::time::Duration,
) -> crate::cluster::age::ApiView {
    let view = crate::cluster::age::ApiView::new(
        Default::default(),
        settings.node_name.is_some(),
        stale_after,
    );
    lock(shared).api_view = Some(view.clone());
    view
}

/// API mode: a client (its User-Agent naming the node, each input's answers noted in `view`,
/// which the feed keeps for the mirror), then the ConfigMap watcher for as long as the agent runs, each
/// change of the text waking a pass. Without a client (its kubeconfig unreadable since start)
/// the config in force (the last-known-good, if any) stays, and the error is logged. With
/// `pods` (`--snat-log` in API mode), this node's Pods are watched too, for the log's names.
async fn watch_the_api(
    api: reconcile::ApiSettings,
    feed: crate::cluster::configmap::ConfigMapFeed,
    commands: mpsc::Sender<Command>,
    view: crate::cluster::age::ApiView,
    pods: Option<crate::snat::pods::PodNames>,
) {
    crate::cluster::configmap::lock(&feed).view = Some(view.clone());
    let limit = memory::read_limit().bytes();
    let answer_cap = memory::answer_cap(limit);
    let manners = crate::cluster::Manners {
        node: api.node_name.clone(),
        clock: Some(view.clock),
        answer_cap,
    };
    let client = match crate::cluster::client_with(&api.credentials, &manners).await {
        Ok(client) => client,
        Err(err) => {
            error!(configmap = %api.configmap, error = %err, "cannot make a Kubernetes client; no config is read from the API (the config in force stays)");
            return;
        }
    };
    info!(configmap = %api.configmap, key = crate::cluster::configmap::CONFIG_KEY, node = api.node_name.as_deref().unwrap_or("unknown"), "watching the config ConfigMap and the node pools (the namespace's ConfigMaps), the Node's labels and the EgressNATPolicies (list, then watch)");
    let waker = move || {
        let commands = commands.clone();
        move || drop(commands.send(Command::Pass(Trigger::ApiChanged)))
    };
    // The three watchers share the feed; nothing is applied before each has listed once.
    if let Some(node) = api.node_name.clone() {
        tokio::spawn(crate::cluster::inputs::watch_node(
            client.clone(),
            node,
            feed.clone(),
            waker(),
        ));
    }
    if let Some(pods) = pods {
        tokio::spawn(crate::cluster::pods::watch_pods(
            client.clone(),
            pods.node,
            pods.directory,
        ));
    }
    tokio::spawn(crate::cluster::inputs::watch_policies(
        client.clone(),
        memory::input_text_cap(limit),
        feed.clone(),
        waker(),
    ));
    crate::cluster::configmap::watch(client, api.configmap, feed, waker()).await;
}

/// The subscription to this node's address changes, registered with the runtime; None (with
/// a warning) when the kernel refuses it.
fn subscribe_to_address_changes(
) -> Option<tokio::io::unix::AsyncFd<crate::addresses::AddressEvents>> {
    match crate::addresses::AddressEvents::registered() {
        Ok(events) => Some(events),
        Err(err) => {
            warn!(error = %err, "cannot subscribe to address changes; an outputAddress is re-resolved at each resync only");
            None
        }
    }
}

/// The address changes that can move the output address, coalesced: a burst of them (an
/// address flapping, interfaces created by the thousand) makes one pass.
struct AddressTrigger {
    events: Option<tokio::io::unix::AsyncFd<crate::addresses::AddressEvents>>,
    /// The agent's snapshot, whose `egress_targets` say which changes matter.
    shared: http::Shared,
    /// When the first and the last change of the burst waiting to settle came.
    burst: Option<(tokio::time::Instant, tokio::time::Instant)>,
}

impl AddressTrigger {
    /// Subscribes; `subscribed` tells the reconcile thread whether it may trust a resolution
    /// until a change is reported (without a subscription every pass reads the addresses).
    fn new(shared: http::Shared, subscribed: &std::sync::atomic::AtomicBool) -> Self {
        let events = subscribe_to_address_changes();
        subscribed.store(events.is_some(), std::sync::atomic::Ordering::Release);
        AddressTrigger {
            events,
            shared,
            burst: None,
        }
    }

    /// Returns once a burst of changes that matter has settled: [`ADDRESS_QUIET`] after its
    /// last change, and never later than [`ADDRESS_SETTLE`] after its first. Cancel-safe:
    /// the burst is kept here between calls.
    async fn settled(&mut self) {
        loop {
            let deadline = self
                .burst
                .map(|(first, last)| (last + ADDRESS_QUIET).min(first + ADDRESS_SETTLE));
            let due = async move {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = address_changed(&self.events, &self.shared) => {
                    let now = tokio::time::Instant::now();
                    self.burst = Some(self.burst.map_or((now, now), |(first, _)| (first, now)));
                }
                () = due => {
                    self.burst = None;
                    return;
                }
            }
        }
    }
}

/// Returns once an address inside one of the configured output addresses (the snapshot's
/// `egress_targets`) came, went or changed state, having read every pending notification
/// (never, without a subscription): then a pass re-resolves `outputAddress` once the burst
/// settles, not at the next resync. Any other address change is read and dropped here.
async fn address_changed(
    events: &Option<tokio::io::unix::AsyncFd<crate::addresses::AddressEvents>>,
    shared: &http::Shared,
) {
    let Some(events) = events else {
        return std::future::pending().await;
    };
    loop {
        let Ok(mut guard) = events.readable().await else {
            return std::future::pending().await;
        };
        let any = guard.get_inner().drain(|address| {
            lock(shared)
                .egress_targets
                .iter()
                .any(|target| target.admits(address))
        });
        guard.clear_ready();
        if any {
            debug!("an address this node may send from as its output address changed");
            return;
        }
    }
}

/// What a stop may remove, and how: `--cleanup-on-exit`, whether this agent held the node
/// lock (only then are the rules its to remove), and the backend and names of the rules.
struct Cleanup {
    on_exit: bool,
    holds_lock: bool,
    backend_id: crate::backend::BackendId,
    names: Names,
}

/// The stop on SIGTERM/SIGINT. With --cleanup-on-exit, our rules go, but only if this agent
/// holds the node lock (one still waiting for it would remove the running agent's rules) and
/// systemd is not restarting the unit (the next agent takes the rules over in place: removing
/// them would leave new flows unmasqueraded until it has synced).
/// Without, at once, and no tool of ours outlives the lock: a pass in flight is cut before its
/// commit (it applies nothing), and none starts after this.
async fn stop(
    signal_name: &str,
    cleanup: Cleanup,
    commands: mpsc::Sender<Command>,
    worker: std::thread::JoinHandle<Reconciler>,
    told: StopWriters<'_>,
) -> Ending {
    let Cleanup {
        on_exit: cleanup_on_exit,
        holds_lock,
        backend_id,
        names,
    } = cleanup;
    let reason = if cleanup_on_exit && holds_lock {
        tokio::task::spawn_blocking(systemd::stop_reason)
            .await
            .unwrap_or(systemd::StopReason::Stop)
    } else {
        systemd::StopReason::Stop
    };
    if let systemd::StopReason::Restart { unit } = &reason {
        info!(signal = signal_name, %unit, "stopping for a restart of the unit; rules stay in place for the next agent (--cleanup-on-exit removes them on a stop)");
    } else if cleanup_on_exit && holds_lock {
        info!(
            signal = signal_name,
            "stopping; removing rules (--cleanup-on-exit)"
        );
        return stop_and_clean_up(commands, worker, backend_id, names, told).await;
    } else if cleanup_on_exit {
        info!(signal = signal_name, "stopping; removing nothing: this agent never held the node lock, so the rules are the running agent's");
    } else {
        info!(signal = signal_name, "stopping; rules stay in place");
        let _ = commands.send(Command::Stop);
        crate::backend::runner::stop_all();
        // Only the agent whose rules these are (its taint writer runs once it holds the lock).
        if holds_lock {
            told.rules_staying(STOP_DEADLINE / 2).await;
        }
        return Ending::Stopped;
    }
    let _ = commands.send(Command::Stop);
    crate::backend::runner::stop_all();
    Ending::Stopped
}

/// Once the node lock is ours: the endpoint, then the go-ahead for the first pass (or, when
/// the port cannot be served, a stop before any rule is touched).
async fn serve_then_pass(
    lock_taken: bool,
    metrics_addr: Option<std::net::SocketAddr>,
    shared: &http::Shared,
    commands: &mpsc::Sender<Command>,
) -> Result<(), Ending> {
    if let (true, Some(addr)) = (lock_taken, metrics_addr) {
        if let Err(ending) = serve_health(addr, shared).await {
            let _ = commands.send(Command::Stop);
            return Err(ending);
        }
    }
    let _ = commands.send(Command::Pass(Trigger::Timer));
    Ok(())
}

/// Serves `/healthz`, `/readyz` and `/metrics` on `addr` from the shared snapshot.
async fn serve_health(addr: std::net::SocketAddr, shared: &http::Shared) -> Result<(), Ending> {
    match http::bind(addr).await {
        Ok(listener) => {
            info!(address = %addr, "serving /healthz, /readyz and /metrics");
            tokio::spawn(http::serve(listener, shared.clone()));
            Ok(())
        }
        Err(err) => Err(Ending::SetupFailed(format!(
            "cannot listen on {addr} for health and metrics: {err} (choose another --metrics-addr, or off)"
        ))),
    }
}

/// What tells the API, at a stop, that the rules are gone: the Node's condition and its taint
/// (API mode; each when the agent writes it).
struct StopWriters<'a> {
    mirror: Option<&'a mirror_sink::Mirror>,
    taint: Option<&'a taint_sink::NodeTaint>,
}

impl StopWriters<'_> {
    /// Before `--cleanup-on-exit` removes the rules: the taint back (no pod may start while
    /// they go), within `within` (best effort).
    async fn rules_going(&self, within: std::time::Duration) {
        if let Some(taint) = self.taint {
            taint.rules_going(within).await;
        }
    }

    /// A stop that leaves the rules: the taint back if the host is shutting down, within
    /// `within` (best effort).
    async fn rules_staying(&self, within: std::time::Duration) {
        if let Some(taint) = self.taint {
            taint.rules_staying(within).await;
        }
    }

    /// Once they are removed: `NotReady`, within `within` (best effort).
    async fn rules_removed(&self, within: std::time::Duration) {
        if let Some(mirror) = self.mirror {
            mirror.rules_removed(within).await;
        }
    }
}

/// `--cleanup-on-exit`: ends the running pass (killing a wedged tool after a grace), then
/// removes our rules within the stop deadline, with a backend whose tools share the time left.
async fn stop_and_clean_up(
    commands: mpsc::Sender<Command>,
    worker: std::thread::JoinHandle<Reconciler>,
    backend_id: crate::backend::BackendId,
    names: Names,
    told: StopWriters<'_>,
) -> Ending {
    let stopping = tokio::time::Instant::now();
    // The running pass (if any) ends first, so cleanup never races a sync.
    end_running_pass(&commands, worker).await;
    // The taint first, on a third of the time left at most: the removal needs the rest.
    told.rules_going(STOP_DEADLINE.saturating_sub(stopping.elapsed()) / 3)
        .await;
    let remaining = STOP_DEADLINE.saturating_sub(stopping.elapsed());
    // A backend of the same kind whose every tool gets a share of the time left.
    let mut backend = crate::backend::select::by_id_with_timeout(backend_id, remaining / 3);
    let cleaning = tokio::task::spawn_blocking(move || cleanup(backend.as_mut(), &names));
    let left = match tokio::time::timeout(remaining, cleaning).await {
        Ok(Ok(left)) => left,
        Ok(Err(_)) => vec!["every family (the cleanup panicked)".to_string()],
        Err(_) => {
            crate::backend::runner::kill_running();
            vec![format!(
                "whatever was not removed when the {}s stop deadline passed",
                STOP_DEADLINE.as_secs()
            )]
        }
    };
    if left.is_empty() {
        told.rules_removed(STOP_DEADLINE.saturating_sub(stopping.elapsed()))
            .await;
        return Ending::Stopped;
    }
    error!(
        backend = %backend_id,
        left = %left.join(", "),
        deadline_s = STOP_DEADLINE.as_secs_f64(),
        "--cleanup-on-exit: rules left in place; remove them with `ipmasq cleanup`"
    );
    Ending::CleanupFailed
}

/// Stops the reconcile thread once its running pass (if any) is done, so nothing writes after
/// this; a pass wedged in a tool is ended by killing that tool after a grace.
async fn end_running_pass(
    commands: &mpsc::Sender<Command>,
    worker: std::thread::JoinHandle<Reconciler>,
) {
    let _ = commands.send(Command::Stop);
    let mut worker = tokio::task::spawn_blocking(move || worker.join());
    if tokio::time::timeout(PASS_GRACE, &mut worker).await.is_err() {
        let killed = crate::backend::runner::kill_running();
        warn!(
            killed,
            grace_s = PASS_GRACE.as_secs_f64(),
            "the running pass did not finish in time; stopped the firewall tool it waited on"
        );
        let _ = tokio::time::timeout(PASS_GRACE, &mut worker).await;
    }
}

/// After a switch of `--backend`, the other kind's rules would still act on traffic (an
/// iptables chain masquerades what our nftables set exempts): remove them, in both families,
/// and say so once. Called only by the holder of the node lock, once its own rules are in
/// force, so a switch leaves no moment without masquerading, and an agent waiting for the
/// lock (a rollout's new pod) never removes what the old one still maintains.
pub fn remove_leftovers_of_other_backends(in_use: crate::backend::BackendId, names: &Names) {
    use crate::backend::select::{every_backend, sweep};
    let mut others: Vec<Box<dyn Backend>> = every_backend()
        .into_iter()
        .filter(|other| other.id().is_iptables() != in_use.is_iptables())
        .collect();
    sweep(&mut others, |other, family| {
        let holds = other.id().may_hold_ours(family, names)
            && other
                .inspect(family, names)
                .is_ok_and(|live| live.inspection.holds_anything());
        if !holds {
            return None::<()>;
        }
        match other.cleanup(family, names, false) {
            Ok(done) if done.removed.is_empty() => {
                for left in &done.left {
                    info!(backend = %other.name(), %family, "{left}");
                }
            }
            Ok(_) => {
                info!(backend = %other.name(), %family, now = %in_use, "removed the rules another backend left behind")
            }
            Err(err) => {
                warn!(backend = %other.name(), %family, error = %err, "cannot remove the rules another backend left behind; they still act on traffic")
            }
        }
        None
    });
}

fn pass_name(pass: &Pass) -> &'static str {
    match pass {
        Pass::Synced(_) => "synced",
        Pass::NoValidConfig => "no-valid-config",
        Pass::Failed(_) => "failed",
    }
}

/// Removes our rules from the backend in use, from every family whose tools are installed
/// (an IPv6 chain of an earlier `--enable-ipv6` run is ours too). Returns what could not be
/// removed, one entry per family.
pub fn cleanup(backend: &mut dyn Backend, names: &Names) -> Vec<String> {
    let mut left = Vec::new();
    for family in crate::plan::Family::ALL {
        if !backend.family_available(family) {
            continue;
        }
        match backend.cleanup(family, names, false) {
            Ok(done) if done.transaction.is_some() => info!(
                backend = %backend.name(),
                family = %family,
                removed = %crate::backend::Removed::words(&done.removed),
                "rules removed"
            ),
            Ok(done) => {
                for not_ours in &done.left {
                    info!(backend = %backend.name(), family = %family, "{not_ours}");
                }
            }
            Err(err) => {
                left.push(format!(
                    "{} rules of {family}",
                    backend.id().location(names)
                ));
                error!(backend = %backend.name(), family = %family, error = %err, "cleanup failed");
            }
        }
    }
    left
}
