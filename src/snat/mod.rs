//! The SNAT log and SNAT port pressure (`--snat-log`, `--snat-port-pressure`): who was behind
//! the node's address. The agent joins conntrack's new and destroy event groups (ctnetlink
//! multicast) on a thread of its own, keeps the flows that were source-NATed, and hands each
//! one's line to a writer thread over a bounded queue; a full queue drops the line (counted
//! and said), so neither the kernel's datapath nor the reconcile pass ever waits on the log.
//! The pod share's refusals reach the same writer from a thread of their own ([`refusals`]).
//!
//! Which flows are kept ([`translated_by_masquerade`]): those whose source was rewritten (the
//! reply tuple's destination differs from the original source) and whose destination was not
//! (no DNAT: the reply comes from the original destination). Our rules masquerade what leaves
//! for a destination outside nonMasqueradeCIDRs, and judge the address after any DNAT; kube-
//! proxy masquerades too, but only flows it DNATs first (Services, NodePorts: `KUBE-MARK-MASQ`
//! then `KUBE-POSTROUTING`), which are left out. A flow to a non-masquerade CIDR keeps its
//! source and is not kept. What cannot be told from an event is which rule rewrote the source:
//! another source NAT of an un-DNATed flow on the node (a CNI's own outgoing masquerade) is
//! kept too.
//!
//! The events carry no time: a line's `time` is when the agent read the event, within
//! milliseconds of it unless the receive buffer was backed up. When the kernel's buffer for
//! the events overflows (ENOBUFS: events were lost), the loss is counted and said (the first
//! one as it is, the next ones at most every [`SAY_EVERY`] with their count since the last
//! message, and any not yet said at the stop), the socket is opened anew, and port pressure
//! is seeded again from a dump.
//!
//! At the agent's stop ([`Stop`]) nothing already read is lost: the event thread reads what
//! the socket still holds (for at most [`FINAL_READ`]), as the refusals' thread does its
//! group's copies, and each lets go of the queue, which closes when both have; the writer
//! writes every line queued, flushes and fsyncs the file, and says so; the agent waits for
//! that within its stop deadline, never longer.

pub mod line;
pub mod pods;
pub mod pressure;
pub mod refusals;
pub mod sizing;
pub mod writer;

use crate::netlink::conntrack::{self as ctnetlink, Event, Flow};
use crate::netlink::Queued;
use crate::plan::Family;
use pressure::Pressure;
use sizing::Sizing;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tracing::{error, info, warn};
use writer::{Destination, LogWriter, Rotation};

/// The events socket's receive buffer asked for (SO_RCVBUFFORCE; the kernel doubles it): about
/// 100,000 events' worth. This memory is not charged to the agent's memory cgroup (v1; v2 was
/// not measured), so it cannot bring the pod to its limit: it is the node's, and only while the
/// agent is that far behind (the figures: docs/benchmarks.md).
const RECEIVE_BUFFER: usize = 64 << 20;
/// A test knob, read only here and documented only here: the events socket's receive buffer in
/// bytes instead of [`RECEIVE_BUFFER`], so a root test can make conntrack's own event queue
/// overflow (ENOBUFS) with a burst of a few thousand flows. Not a setting: no flag, no docs.
const TEST_RECEIVE_BUFFER_ENV: &str = "IPMASQ_TEST_SNAT_RECEIVE_BUFFER";

/// The events socket's receive buffer: [`RECEIVE_BUFFER`], or the test knob's bytes.
fn receive_buffer() -> usize {
    std::env::var(TEST_RECEIVE_BUFFER_ENV)
        .ok()
        .and_then(|bytes| bytes.parse().ok())
        .unwrap_or(RECEIVE_BUFFER)
}

/// A run of drops or write errors is said at most this often.
const SAY_EVERY: Duration = Duration::from_secs(10);
/// How long the event thread sleeps waiting for events: a stop is seen within this.
const WAIT: Duration = Duration::from_millis(100);
/// At a stop, the events still queued on the socket are read for at most this long, well
/// inside the stop deadline: a full queue holds some 105,000 events, and the release build
/// logs 50,000 a second with 22-65 % of one core (scripts/bench), so a second or two for a
/// full one. What arrives after the stop may be read in that time too; the read ends as soon
/// as the socket is empty.
const FINAL_READ: Duration = Duration::from_secs(5);

/// What `--snat-log` and its companions ask for.
#[derive(Clone, Debug)]
pub struct SnatOptions {
    /// Where the lines go (None: no log, port pressure only).
    pub log: Option<Destination>,
    pub rotation: Rotation,
    /// The agent's `--to-ports`: the ports its rules translate TCP, UDP and SCTP to, against
    /// which the busiest destination's share is counted.
    pub to_ports: crate::plan::ToPorts,
    /// The agent's memory limit in bytes (None: none, or none could be read), from which the
    /// queue and the flows tracked are sized.
    pub memory_limit: Option<u64>,
    /// API mode: the pods the lines name, and the node (None: the lines name no pod).
    pub pods: Option<pods::PodNames>,
}

/// What the metrics read: counters, and the port pressure the event thread keeps.
#[derive(Debug, Default)]
pub struct SnatStats {
    /// Conntrack events read from the socket (each family, new and end, kept or not).
    pub events: AtomicU64,
    /// Lines queued for the writer.
    pub queued: AtomicU64,
    /// Lines written.
    pub written: AtomicU64,
    /// Lines dropped because the writer's queue was full.
    pub dropped: AtomicU64,
    /// Times the kernel reported events lost (ENOBUFS).
    pub overflows: AtomicU64,
    /// Lines that could not be written (the file system refused).
    pub write_errors: AtomicU64,
    /// Files rotated.
    pub rotations: AtomicU64,
    pub pressure: Mutex<Pressure>,
    /// The agent's `--to-ports` (empty: MASQUERADE's own range), fixed at the start.
    pub to_ports: crate::plan::ToPorts,
    /// The config in force sets a pod share: the refusals' thread binds its NFLOG group
    /// ([`refusals`]); set by the agent after each pass ([`SnatStats::set_share_in_force`]).
    pub share_in_force: AtomicBool,
    /// The refusals' thread, woken when the share comes or goes.
    pub refusals_thread: std::sync::OnceLock<std::thread::Thread>,
}

impl SnatStats {
    /// Says whether the config in force sets a pod share; a change wakes the refusals' thread,
    /// so the group is bound before the first refusal can come.
    pub fn set_share_in_force(&self, in_force: bool) {
        if self.share_in_force.swap(in_force, Ordering::Relaxed) != in_force {
            if let Some(thread) = self.refusals_thread.get() {
                thread.unpark();
            }
        }
    }

    pub fn pressure(&self) -> std::sync::MutexGuard<'_, Pressure> {
        self.pressure.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `flow` is one our rules translated: its source rewritten, its destination not.
pub fn translated_by_masquerade(flow: &Flow) -> bool {
    flow.rewritten_to().is_some() && flow.reply_source == flow.destination
}

/// A started SNAT log: the counters the metrics read, and its stop.
pub struct Running {
    pub stats: Arc<SnatStats>,
    pub stop: Stop,
}

/// The stop of the SNAT log's threads, with nothing already read lost: [`Stop::begin`] at
/// the signal, [`Stop::finish_by`] before the process exits.
pub struct Stop {
    stopping: Arc<AtomicBool>,
    /// Said by the writer once every line is written and synced (None: no log, only port
    /// pressure, nothing to drain).
    written: Option<mpsc::Receiver<()>>,
    stats: Arc<SnatStats>,
}

impl Stop {
    /// Tells the event and refusals threads to read what is queued and then let go of the
    /// writer's queue.
    pub fn begin(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Waits until the writer has written and synced every line queued, or `deadline`
    /// passed (then says what may be missing), and says what the log holds.
    pub fn finish_by(self, deadline: Instant) {
        self.begin();
        let Some(written) = self.written else {
            return;
        };
        let drained = written.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let (queued, lines) = (count(&self.stats.queued), count(&self.stats.written));
        match drained {
            Ok(()) => info!(
                events = count(&self.stats.events),
                lines,
                dropped = count(&self.stats.dropped),
                "the SNAT log is drained: every line queued is written and synced"
            ),
            Err(mpsc::RecvTimeoutError::Timeout) => warn!(
                queued,
                lines,
                "the stop deadline passed before the SNAT log was drained: lines queued and not written are lost"
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => warn!(
                queued,
                lines,
                "the SNAT log's writer ended before the stop: lines queued and not written are lost"
            ),
        }
    }
}

/// Starts the writer (which opens the log on its own thread, see [`Sink`]) and the event
/// subscription, seeds the port pressure from a dump of both families, and starts the event
/// thread; the queue and the flows tracked are sized from the agent's memory limit
/// ([`Sizing`]). An error (ctnetlink refused) stops nothing else; the caller decides. A log
/// that cannot be opened is no error here: it is said, its lines are counted as not written,
/// and it is tried again.
pub fn start(options: SnatOptions) -> std::io::Result<Running> {
    let stats = Arc::new(SnatStats {
        to_ports: options.to_ports.clone(),
        ..SnatStats::default()
    });
    let stopping = Arc::new(AtomicBool::new(false));
    let sizing = Sizing::for_limit(options.memory_limit);
    *stats.pressure() = Pressure::with_limit(sizing.tracked_flows);
    let (queue, written) = match options.log.clone() {
        Some(destination) => {
            // Opened on the writer's thread (never on the caller's: the masquerade never
            // waits for the log), and again while it cannot be.
            let sink = Sink::new(destination, options.rotation);
            let (sender, receiver) = mpsc::sync_channel::<String>(sizing.queue_lines);
            let (done, written) = mpsc::channel();
            let writer_stats = stats.clone();
            std::thread::Builder::new()
                .name("snat-log-writer".into())
                .spawn(move || {
                    write_lines(sink, receiver, &writer_stats);
                    let _ = done.send(());
                })?;
            (Some(sender), Some(written))
        }
        None => (None, None),
    };
    let socket = ctnetlink::events(receive_buffer())?;
    // After the subscription, which can fail the start: the refusals' thread holds the
    // writer's queue open until the stop.
    if let Some(queue) = &queue {
        let to = refusals::RefusalsTo {
            queue: queue.clone(),
            pods: options.pods.clone(),
        };
        refusals::start(to, stats.clone(), stopping.clone());
    }
    let filtered_in_the_kernel = filter_in_the_kernel(&socket);
    let reader_stats = stats.clone();
    let reader_stopping = stopping.clone();
    let namer = options
        .pods
        .clone()
        .filter(|_| queue.is_some())
        .map(|names| pods::Namer::new(names, sizing.tracked_flows));
    // Seeded on the event thread, after the subscription (so no flow falls between them),
    // never on the caller's: a large table's dump does not delay the first pass.
    let spawned = std::thread::Builder::new()
        .name("snat-events".into())
        .spawn(move || {
            seed(&reader_stats);
            read_events(socket, queue, namer, &reader_stats, &reader_stopping)
        });
    if let Err(err) = spawned {
        // The refusals' thread ends, and with it the writer's queue.
        stopping.store(true, Ordering::Relaxed);
        return Err(err);
    }
    info!(
        log = %options.log.as_ref().map_or_else(|| "none".to_string(), ToString::to_string),
        max_size = options.rotation.max_size,
        keep = options.rotation.keep,
        tracked_at_most = sizing.tracked_flows,
        queue = sizing.queue_lines,
        at_most_bytes = sizing.bytes(),
        memory_limit = ?options.memory_limit,
        filtered_in_the_kernel,
        "following conntrack's new and destroy events for source-NATed flows"
    );
    Ok(Running {
        stop: Stop {
            stopping,
            written,
            stats: stats.clone(),
        },
        stats,
    })
}

/// Attaches the kernel's filter to the events socket, so the events of flows that were not
/// source-NATed are dropped before they are queued; whether it could. Without it (a kernel
/// that refuses the program), every event is read and judged here, as the filter's flows are.
fn filter_in_the_kernel(socket: &crate::netlink::Socket) -> bool {
    match ctnetlink::filter_to_source_nat(socket) {
        Ok(()) => true,
        Err(err) => {
            warn!(error = %err, "cannot filter conntrack's events in the kernel; every event is read and judged here");
            false
        }
    }
}

/// Port pressure from scratch: every translated flow of both families, from a dump, counted
/// apart and swapped in (a scrape never waits for a dump).
fn seed(stats: &SnatStats) {
    let mut fresh = Pressure::with_limit(stats.pressure().limit());
    for family in Family::ALL {
        let seeded = ctnetlink::entries(family, |event| {
            if translated_by_masquerade(&event.flow) {
                fresh.apply(&event);
            }
        });
        if let Err(err) = seeded {
            warn!(%family, error = %err, "cannot read the conntrack table to seed the SNAT port pressure; it counts the flows from now on");
        }
    }
    let mut pressure = stats.pressure();
    fresh.untracked += pressure.untracked;
    *pressure = fresh;
}

/// Says a growing count at most every [`SAY_EVERY`].
struct Sayer {
    said_at: Option<Instant>,
    since: u64,
}

impl Sayer {
    fn new() -> Self {
        Sayer {
            said_at: None,
            since: 0,
        }
    }

    /// Counts one; returns how many to say now, if it is time.
    fn count(&mut self) -> Option<u64> {
        self.since += 1;
        if self.said_at.is_some_and(|at| at.elapsed() < SAY_EVERY) {
            return None;
        }
        self.said_at = Some(Instant::now());
        Some(std::mem::take(&mut self.since))
    }

    /// The count not said yet (the rate limit held it back), taken: the last word at a stop.
    fn unsaid(&mut self) -> u64 {
        std::mem::take(&mut self.since)
    }
}

/// The text of the first loss of conntrack events; the next ones are [`LOST_AGAIN`].
const LOST_FIRST: &str = "conntrack events were lost (the kernel's receive buffer for them overflowed: ENOBUFS); flows of the moment are missing from the SNAT log; subscribing again and re-reading the table for port pressure (counted in ipmasq_snat_events_lost_total; later losses are said at most every 10 s)";
/// The text of the losses after the first, said with their count since the last message.
const LOST_AGAIN: &str = "the kernel's receive buffer for conntrack events overflowed again (ENOBUFS): more flows are missing from the SNAT log (ipmasq_snat_events_lost_total)";

/// How a loss of conntrack events is said: the first at once with [`LOST_FIRST`], the next
/// ones with [`LOST_AGAIN`] at most every [`SAY_EVERY`], counted in between.
struct Losses {
    sayer: Sayer,
    said_first: bool,
}

/// What to say of a loss, if anything now.
#[derive(Debug, PartialEq, Eq)]
enum LossMessage {
    First,
    /// Losses since the last message (this one included).
    Again(u64),
}

impl Losses {
    fn new() -> Self {
        Losses {
            sayer: Sayer::new(),
            said_first: false,
        }
    }

    /// Counts one loss; what to say now, if it is time.
    fn count(&mut self) -> Option<LossMessage> {
        let losses = self.sayer.count()?;
        if std::mem::replace(&mut self.said_first, true) {
            Some(LossMessage::Again(losses))
        } else {
            Some(LossMessage::First)
        }
    }

    /// At the stop: the losses not said yet (one during the final read included), said now
    /// whatever the rate limit.
    fn at_stop(&mut self, lost_in_the_final_read: bool) -> Option<LossMessage> {
        let losses = self.sayer.unsaid() + u64::from(lost_in_the_final_read);
        match (losses, self.said_first) {
            (0, _) => None,
            (_, false) if losses == 1 => {
                self.said_first = true;
                Some(LossMessage::First)
            }
            (losses, _) => {
                self.said_first = true;
                Some(LossMessage::Again(losses))
            }
        }
    }
}

fn say_loss(message: Option<LossMessage>) {
    match message {
        Some(LossMessage::First) => warn!("{LOST_FIRST}"),
        Some(LossMessage::Again(losses)) => warn!(losses, "{LOST_AGAIN}"),
        None => {}
    }
}

/// The event thread: reads every event, keeps the translated flows' pressure and queues their
/// lines; on a loss, counts it, says so ([`Losses`]), and subscribes again. At a stop, reads
/// what is still queued (for at most [`FINAL_READ`]), says any loss not said yet (one in that
/// read included) and returns, letting go of the writer's queue.
fn read_events(
    mut socket: crate::netlink::Socket,
    queue: Option<SyncSender<String>>,
    mut namer: Option<pods::Namer>,
    stats: &SnatStats,
    stopping: &AtomicBool,
) {
    let mut buffer = vec![0u8; 256 * 1024];
    let mut drops = Sayer::new();
    let mut losses = Losses::new();
    let mut lost = false;
    loop {
        let last = stopping.load(Ordering::Relaxed);
        if !last {
            socket.wait_readable(WAIT);
        }
        let deadline = last.then(|| Instant::now() + FINAL_READ);
        let drained = socket.drain_by(&mut buffer, deadline, |queued| match queued {
            Queued::Datagram(datagram) => {
                let now = SystemTime::now();
                for event in ctnetlink::events_of(datagram) {
                    stats.events.fetch_add(1, Ordering::Relaxed);
                    let to = LineTo {
                        queue: queue.as_ref(),
                        namer: namer.as_mut(),
                    };
                    take(&event, now, to, stats, &mut drops);
                }
            }
            Queued::Lost => lost = true,
        });
        if last {
            if lost {
                stats.overflows.fetch_add(1, Ordering::Relaxed);
            }
            say_loss(losses.at_stop(lost));
            return;
        }
        if let Err(err) = drained {
            warn!(error = %err, "reading conntrack events failed; subscribing again");
            lost = true;
            std::thread::sleep(Duration::from_millis(100));
        }
        if std::mem::take(&mut lost) {
            stats.overflows.fetch_add(1, Ordering::Relaxed);
            say_loss(losses.count());
            match ctnetlink::events(receive_buffer()) {
                Ok(fresh) => {
                    filter_in_the_kernel(&fresh);
                    socket = fresh;
                }
                Err(err) => {
                    warn!(error = %err, "cannot subscribe to conntrack events again; keeping the old subscription")
                }
            }
            seed(stats);
            if let Some(namer) = namer.as_mut() {
                namer.forget_flows();
            }
        }
    }
}

/// Where an event's line goes: the writer's queue (None: no log), and in API mode who names
/// its pod.
struct LineTo<'a> {
    queue: Option<&'a SyncSender<String>>,
    namer: Option<&'a mut pods::Namer>,
}

/// One event: pressure, then the line (dropped when the writer is behind).
fn take(event: &Event, now: SystemTime, to: LineTo<'_>, stats: &SnatStats, drops: &mut Sayer) {
    if !translated_by_masquerade(&event.flow) {
        return;
    }
    stats.pressure().apply(event);
    let Some(queue) = to.queue else {
        return;
    };
    let mut text = String::with_capacity(256);
    match to.namer {
        Some(namer) => {
            let pod = namer.pod_of(event, line::micros_of(now));
            with_origin(pod.as_deref(), &namer.names.node, |origin| {
                line::render(&mut text, now, event, Some(origin))
            });
        }
        None => line::render(&mut text, now, event, None),
    }
    enqueue(queue, text, stats, drops);
}

/// API mode's origin of a line: `pod` (when known) in the line's words, and `node`, handed
/// to `render`.
fn with_origin<R>(
    pod: Option<&pods::PodIdentity>,
    node: &str,
    render: impl FnOnce(line::Origin<'_>) -> R,
) -> R {
    let qualified = pod.map(|pod| pod.qualified());
    let origin = line::Origin {
        pod: pod
            .zip(qualified.as_deref())
            .map(|(pod, qualified)| line::PodWords {
                qualified,
                uid: &pod.uid,
            }),
        node,
    };
    render(origin)
}

/// Queues a line for the writer: dropped, counted and said (at most every [`SAY_EVERY`]) when
/// the writer is behind.
fn enqueue(queue: &SyncSender<String>, text: String, stats: &SnatStats, drops: &mut Sayer) {
    match queue.try_send(text) {
        Ok(()) => {
            stats.queued.fetch_add(1, Ordering::Relaxed);
        }
        Err(TrySendError::Full(_)) => {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            if let Some(dropped) = drops.count() {
                warn!(dropped, "the SNAT log's writer is behind: lines dropped (ipmasq_snat_log_dropped_total)");
            }
        }
        Err(TrySendError::Disconnected(_)) => {}
    }
}

/// How long the writer lets lines gather once it has drained the queue, before it looks
/// again: one wake-up and one `write` per interval under load instead of one per line (at
/// 50,000 flows a second, waking per line cost the writer a fifth of a core and preempted
/// the events thread about a million times a minute). A line reaches the file at most this
/// much later; the queue holds far more than an interval brings.
const GATHER: Duration = Duration::from_millis(20);
/// How often the writer tries again to open a log that could not be opened, and how long it
/// waits for a line before it looks at the log's path anyway (a removed log is replaced
/// within this even while no flow comes).
const LOOK_AGAIN: Duration = Duration::from_millis(500);

/// The writer's end of the log: opened on the writer's thread, tried again every
/// [`LOOK_AGAIN`] while it cannot be (its lines meanwhile counted as not written, and said),
/// and its path followed when someone else removes or renames the file.
struct Sink {
    destination: Destination,
    rotation: Rotation,
    log: Option<LogWriter>,
    tried_at: Option<Instant>,
    open_errors: Sayer,
    errors: Sayer,
}

impl Sink {
    fn new(destination: Destination, rotation: Rotation) -> Sink {
        Sink {
            destination,
            rotation,
            log: None,
            tried_at: None,
            open_errors: Sayer::new(),
            errors: Sayer::new(),
        }
    }

    /// Makes the log ready for a batch of lines: opens it when it is not open (at most every
    /// [`LOOK_AGAIN`]), else opens its path anew when the file there is no longer the live one.
    fn ready(&mut self, stats: &SnatStats) {
        let Some(log) = self.log.as_mut() else {
            self.open();
            return;
        };
        match log.follow_path() {
            Ok(false) => {}
            Ok(true) => info!(
                log = %self.destination,
                "the SNAT log's file was removed or renamed by someone else: writing to a new file at its path (the old one is left as it is)"
            ),
            Err(err) => {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                if let Some(failed) = self.errors.count() {
                    warn!(error = %err, failed, "the SNAT log's file was removed or renamed by someone else, and its path cannot be opened again: writing on to the old file");
                }
            }
        }
    }

    fn open(&mut self) {
        if self.tried_at.is_some_and(|at| at.elapsed() < LOOK_AGAIN) {
            return;
        }
        self.tried_at = Some(Instant::now());
        match LogWriter::open(self.destination.clone(), self.rotation) {
            Ok(log) => {
                if self.open_errors.said_at.is_some() {
                    info!(log = %self.destination, "the SNAT log is open: its lines are written from now on");
                }
                self.log = Some(log);
            }
            Err(err) => {
                if let Some(tries) = self.open_errors.count() {
                    error!(log = %self.destination, error = %err, tries, "cannot open the SNAT log: its lines are not written (counted in ipmasq_snat_log_write_errors_total) and it is tried again twice a second; the masquerade goes on");
                }
            }
        }
    }

    fn write(&mut self, text: &str, stats: &SnatStats) {
        let Some(log) = &mut self.log else {
            stats.write_errors.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match log.write_line(text) {
            Ok(()) => {
                stats.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                if let Some(failed) = self.errors.count() {
                    warn!(error = %err, failed, "cannot write the SNAT log");
                }
            }
        }
    }

    fn flush(&mut self, stats: &SnatStats) {
        let Some(log) = &mut self.log else {
            return;
        };
        if let Err(err) = log.flush() {
            stats.write_errors.fetch_add(1, Ordering::Relaxed);
            if let Some(failed) = self.errors.count() {
                warn!(error = %err, failed, "cannot write the SNAT log");
            }
        }
        stats.rotations.store(log.rotations, Ordering::Relaxed);
    }

    fn sync(&mut self, stats: &SnatStats) {
        let Some(log) = &mut self.log else {
            return;
        };
        if let Err(err) = log.sync() {
            stats.write_errors.fetch_add(1, Ordering::Relaxed);
            warn!(error = %err, "cannot sync the SNAT log at the stop");
        }
    }
}

/// The writer thread: opens the log, writes what is queued, and flushes whenever the queue is
/// empty; once the queue is closed (the agent stops) and empty, syncs the file and returns.
fn write_lines(mut sink: Sink, lines: mpsc::Receiver<String>, stats: &SnatStats) {
    sink.ready(stats);
    // Waits only while idle (and looks at the log every LOOK_AGAIN); under load it drains,
    // flushes, then sleeps for GATHER.
    'idle: loop {
        let first = match lines.recv_timeout(LOOK_AGAIN) {
            Ok(text) => text,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                sink.ready(stats);
                continue 'idle;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break 'idle,
        };
        let mut next = Some(first);
        loop {
            sink.ready(stats);
            while let Some(text) = next {
                sink.write(&text, stats);
                next = lines.try_recv().ok();
            }
            sink.flush(stats);
            std::thread::sleep(GATHER);
            match lines.try_recv() {
                Ok(text) => next = Some(text),
                Err(mpsc::TryRecvError::Empty) => continue 'idle,
                Err(mpsc::TryRecvError::Disconnected) => break 'idle,
            }
        }
    }
    sink.sync(stats);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `take` of `event` now, its line (if any) into `queue`, no pod named (file mode).
    fn take_into(event: &Event, queue: &SyncSender<String>, stats: &SnatStats, drops: &mut Sayer) {
        let to = LineTo {
            queue: Some(queue),
            namer: None,
        };
        take(event, SystemTime::now(), to, stats, drops);
    }

    fn flow(source: &str, destination: &str, reply_source: &str, reply_destination: &str) -> Flow {
        Flow {
            family: Family::V4,
            protocol: 6,
            source: source.parse().unwrap(),
            destination: destination.parse().unwrap(),
            source_port: Some(40000),
            destination_port: Some(443),
            reply_source: reply_source.parse().unwrap(),
            reply_destination: reply_destination.parse().unwrap(),
            reply_destination_port: Some(40000),
            icmp_id: None,
            reply_icmp_id: None,
            id: 1,
        }
    }

    #[test]
    fn only_source_nated_flows_without_dnat_are_ours() {
        let pod = "192.168.1.5";
        let outside = "198.51.100.9";
        let node = "203.0.113.1";
        assert!(translated_by_masquerade(&flow(pod, outside, outside, node)));
        // A non-masquerade CIDR: the source kept.
        assert!(!translated_by_masquerade(&flow(pod, outside, outside, pod)));
        // kube-proxy: a Service's address DNATed to a backend, then masqueraded.
        assert!(!translated_by_masquerade(&flow(
            pod,
            "10.96.0.10",
            "192.168.2.7",
            node
        )));
    }

    #[test]
    fn a_stop_waits_for_a_stuck_writer_no_longer_than_its_deadline() {
        let (_never_said, written) = mpsc::channel::<()>();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Stop {
            stopping: stopping.clone(),
            written: Some(written),
            stats: Arc::default(),
        };
        let started = Instant::now();
        stop.finish_by(started + Duration::from_millis(50));
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(stopping.load(Ordering::Relaxed), "the event thread is told");
    }

    #[test]
    fn a_full_queue_drops_the_line_and_counts_it_and_the_pressure_still_counts_the_flow() {
        let (queue, lines) = mpsc::sync_channel::<String>(1);
        let stats = SnatStats::default();
        let mut drops = Sayer::new();
        let node = "203.0.113.1";
        for port in [40_000u16, 40_001, 40_002] {
            let mut translated = flow("192.168.1.5", "198.51.100.9", "198.51.100.9", node);
            translated.source_port = Some(port);
            translated.reply_destination_port = Some(port);
            let event = Event {
                kind: ctnetlink::EventKind::New,
                flow: translated,
                counters: None,
            };
            take_into(&event, &queue, &stats, &mut drops);
        }
        assert_eq!(stats.queued.load(Ordering::Relaxed), 1);
        assert_eq!(
            stats.dropped.load(Ordering::Relaxed),
            2,
            "the writer is behind"
        );
        assert_eq!(
            drops.since, 1,
            "the first drop said at once, the next one counted"
        );
        assert!(lines
            .try_recv()
            .unwrap()
            .contains("\"src\":\"192.168.1.5:40000\""));
        assert_eq!(
            stats.pressure().tracked(),
            3,
            "a dropped line's flow holds its port"
        );
        // A kept flow (its source not rewritten) is neither queued nor counted.
        let kept = Event {
            kind: ctnetlink::EventKind::New,
            flow: flow("192.168.1.5", "10.0.0.9", "10.0.0.9", "192.168.1.5"),
            counters: None,
        };
        take_into(&kept, &queue, &stats, &mut drops);
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(stats.pressure().tracked(), 3);
    }

    #[test]
    fn every_loss_of_events_is_said_the_first_at_once_the_next_ones_per_interval() {
        let mut losses = Losses::new();
        assert_eq!(losses.count(), Some(LossMessage::First));
        assert_eq!(losses.count(), None, "within the interval: counted");
        assert_eq!(losses.count(), None);
        losses.sayer.said_at = Some(Instant::now() - SAY_EVERY);
        assert_eq!(
            losses.count(),
            Some(LossMessage::Again(3)),
            "the count since the last message"
        );
        assert_eq!(losses.count(), None);
        // At the stop, the one held back and one in the final read are said at once.
        assert_eq!(losses.at_stop(true), Some(LossMessage::Again(2)));
        assert_eq!(losses.at_stop(false), None, "nothing left to say");
    }

    #[test]
    fn a_loss_in_the_final_read_alone_is_said_as_the_first() {
        let mut losses = Losses::new();
        assert_eq!(losses.at_stop(false), None);
        assert_eq!(losses.at_stop(true), Some(LossMessage::First));
        let mut held_back = Losses::new();
        assert_eq!(held_back.count(), Some(LossMessage::First));
        assert_eq!(held_back.at_stop(true), Some(LossMessage::Again(1)));
    }

    #[test]
    fn a_run_of_drops_is_said_once_per_interval_with_its_count() {
        let mut sayer = Sayer::new();
        assert_eq!(sayer.count(), Some(1));
        assert_eq!(sayer.count(), None);
        assert_eq!(sayer.count(), None);
        sayer.said_at = Some(Instant::now() - SAY_EVERY);
        assert_eq!(sayer.count(), Some(3));
    }
}
