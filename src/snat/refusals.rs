//! The pod share's refusals in the SNAT log: every backend's refusing rule copies the refused
//! packet to NFLOG group [`SHARE_LOG_GROUP`] with its limit's prefix; this thread binds the
//! group while the config in force sets a share (and lets it go when none does, so without a
//! share the agent holds nothing of NFLOG), tallies the copies by pod address, protocol,
//! destination and limit, and every [`WINDOW`] queues one `refused` line per tally for the
//! log's writer (naming the pod in API mode). Times are when the agent read the copy: the
//! kernel gathers copies for up to 0.1 s. Memory is bounded: past [`DESTINATIONS_PER_POD`]
//! destinations in a window a pod's further ones are tallied together (`dst` `*`), and past
//! [`MAX_TALLIES`] tallies a window's new ones are counted and said, not kept. Another program
//! holding the group costs the log its refusals (said, and tried again), never the refusal.

use super::line::{self, Refusals, RefusedTo};
use super::pods::PodNames;
use super::{Sayer, SnatStats};
use crate::netlink::nflog::{LogGroup, Logged, LoggedPacket};
use crate::plan::live::{ShareLimit, SHARE_LOG_GROUP, SHARE_LOG_SNAPLEN};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tracing::{info, warn};

/// How long a line's refusals are gathered: a pod refused without pause gets a line a second
/// per destination.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Destinations of one pod in a window before its further ones share one tally (`*`).
const DESTINATIONS_PER_POD: usize = 64;
/// Tallies of a window, all pods together: at most this many lines a second.
const MAX_TALLIES: usize = 1024;
/// The copies' socket buffer: some 30,000 copies, a second and a half of a 20,000/s flood.
const RECEIVE_BUFFER: usize = 8 << 20;
/// How long the thread sleeps waiting for copies: a stop and a window's end are seen within it.
const WAIT: Duration = Duration::from_millis(100);
/// At a stop, copies still queued are read for at most this long.
const FINAL_READ: Duration = Duration::from_millis(500);
/// How often a group that could not be bound is tried again while a share is in force.
const BIND_AGAIN: Duration = Duration::from_secs(30);

/// What one tally is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct TallyKey {
    source: IpAddr,
    protocol: u8,
    to: RefusedTo,
    limit: ShareLimit,
}

/// A tally's count and times.
#[derive(Clone, Copy, Debug)]
struct Counted {
    first: SystemTime,
    last: SystemTime,
    count: u64,
}

/// One window's refusals.
#[derive(Debug, Default)]
pub struct Tally {
    counted: HashMap<TallyKey, Counted>,
    /// Destinations tallied apart, by pod address.
    destinations: HashMap<IpAddr, usize>,
    /// Copies not kept: the window held [`MAX_TALLIES`] tallies.
    pub untallied: u64,
}

impl Tally {
    /// Counts one copy read at `now`; a copy no rule of ours logged is passed over.
    pub fn count(&mut self, packet: &LoggedPacket<'_>, now: SystemTime) {
        let Some(limit) = ShareLimit::of_log_prefix(packet.prefix) else {
            return;
        };
        let source = packet.source.to_canonical();
        let mut key = TallyKey {
            source,
            protocol: packet.protocol,
            to: RefusedTo::One {
                address: packet.destination.to_canonical(),
                port: packet.destination_port,
            },
            limit,
        };
        if !self.counted.contains_key(&key) {
            let apart = self.destinations.get(&source).copied().unwrap_or(0);
            if apart >= DESTINATIONS_PER_POD {
                key.to = RefusedTo::Several;
            }
            if !self.counted.contains_key(&key) {
                if self.counted.len() >= MAX_TALLIES {
                    self.untallied += 1;
                    return;
                }
                if key.to != RefusedTo::Several {
                    *self.destinations.entry(source).or_default() += 1;
                }
            }
        }
        let counted = self.counted.entry(key).or_insert(Counted {
            first: now,
            last: now,
            count: 0,
        });
        counted.last = now;
        counted.count += 1;
    }

    /// The window's refusals, the earliest first, and the tally emptied.
    pub fn take(&mut self) -> Vec<Refusals> {
        self.destinations.clear();
        let mut all: Vec<Refusals> = self
            .counted
            .drain()
            .map(|(key, counted)| Refusals {
                first: counted.first,
                last: counted.last,
                protocol: key.protocol,
                source: key.source,
                to: key.to,
                limit: key.limit,
                count: counted.count,
            })
            .collect();
        all.sort_by(|a, b| {
            (a.first, a.source, a.to, a.limit, a.protocol)
                .cmp(&(b.first, b.source, b.to, b.limit, b.protocol))
        });
        all
    }
}

/// Where the thread's lines go, and what names their pods.
pub struct RefusalsTo {
    pub queue: SyncSender<String>,
    pub pods: Option<PodNames>,
}

/// Starts the thread (which binds the group only while a share is in force); a thread that
/// cannot be started is said, and the log goes on without refusals.
pub fn start(to: RefusalsTo, stats: Arc<SnatStats>, stopping: Arc<AtomicBool>) {
    let reader = Reader {
        to,
        stats,
        group: None,
        tried_at: None,
        tally: Tally::default(),
        window_ends: Instant::now() + WINDOW,
        losses: Sayer::new(),
        drops: Sayer::new(),
    };
    let stats = reader.stats.clone();
    let spawned = std::thread::Builder::new()
        .name("snat-refusals".into())
        .spawn(move || reader.run(&stopping));
    match spawned {
        Ok(handle) => {
            let _ = stats.refusals_thread.set(handle.thread().clone());
        }
        Err(err) => {
            warn!(error = %err, "cannot start the thread of the pod share's refusals: the SNAT log will not name the pods refused")
        }
    }
}

/// The thread's state: the group while bound, the window's tally, and what it has said.
struct Reader {
    to: RefusalsTo,
    stats: Arc<SnatStats>,
    group: Option<LogGroup>,
    /// When a bind was last tried (None: not since the share came into force).
    tried_at: Option<Instant>,
    tally: Tally,
    window_ends: Instant,
    losses: Sayer,
    drops: Sayer,
}

impl Reader {
    /// Until the stop: follows the share in force (binding or letting go of the group), reads
    /// copies, and queues each window's lines at its end; at the stop, reads what is queued
    /// (for at most [`FINAL_READ`]) and queues the last window's lines.
    fn run(mut self, stopping: &AtomicBool) {
        loop {
            let last = stopping.load(Ordering::Relaxed);
            self.follow_the_share(last);
            let read = match self.group.as_mut() {
                Some(group) => {
                    if !last {
                        group.wait(WAIT);
                    }
                    let deadline = last.then(|| Instant::now() + FINAL_READ);
                    let (tally, losses) = (&mut self.tally, &mut self.losses);
                    group.drain(deadline, |logged| take(logged, tally, losses))
                }
                None if last => Ok(()),
                None => {
                    // Woken at once when a share comes into force.
                    std::thread::park_timeout(WAIT);
                    Ok(())
                }
            };
            if let Err(err) = read {
                warn!(error = %err, "reading the pod share's refusals failed; binding the group again");
                self.group = None;
            }
            if last || Instant::now() >= self.window_ends {
                self.queue_window();
                self.window_ends = Instant::now() + WINDOW;
            }
            if last {
                return;
            }
        }
    }

    /// Binds the group when a share came into force (again at most every [`BIND_AGAIN`] while
    /// it cannot be), lets it go when none is in force any more.
    fn follow_the_share(&mut self, stopping: bool) {
        let wanted = self.stats.share_in_force.load(Ordering::Relaxed) && !stopping;
        if !wanted {
            if self.group.take().is_some() {
                info!(
                    group = SHARE_LOG_GROUP,
                    "no pod share is in force: the NFLOG group of its refusals is let go"
                );
            }
            self.tried_at = None;
            return;
        }
        if self.group.is_some() || self.tried_at.is_some_and(|at| at.elapsed() < BIND_AGAIN) {
            return;
        }
        let first_try = self.tried_at.is_none();
        self.tried_at = Some(Instant::now());
        match LogGroup::bind(SHARE_LOG_GROUP, SHARE_LOG_SNAPLEN, RECEIVE_BUFFER) {
            Ok(group) => {
                self.group = Some(group);
                info!(
                    group = SHARE_LOG_GROUP,
                    "the SNAT log names the pods the pod share refuses"
                );
            }
            Err(err) if first_try => {
                let why = if err.raw_os_error() == Some(libc::EPERM) {
                    "another program holds it (or the agent lacks CAP_NET_ADMIN)".to_string()
                } else {
                    err.to_string()
                };
                warn!(group = SHARE_LOG_GROUP, %why, "cannot bind the NFLOG group of the pod share's refusals: the SNAT log will not name the pods refused until it can (tried again every 30 s; the share refuses them all the same, and ipmasq_pod_egress_limited_total counts them)");
            }
            Err(_) => {}
        }
    }

    /// Queues one line per tally of the window (dropped, and counted, when the writer is
    /// behind).
    fn queue_window(&mut self) {
        if self.tally.untallied > 0 {
            warn!(copies = self.tally.untallied, "more than {MAX_TALLIES} tallies of refusals in one second: refusals past them are not in the SNAT log");
            self.tally.untallied = 0;
        }
        for refusals in self.tally.take() {
            let text = line_of(&refusals, self.to.pods.as_ref());
            super::enqueue(&self.to.queue, text, &self.stats, &mut self.drops);
        }
    }
}

/// One thing read from the group: a copy tallied, or a loss said (at most every 10 s).
fn take(logged: Logged<'_>, tally: &mut Tally, losses: &mut Sayer) {
    match logged {
        Logged::Packet(packet) => tally.count(&packet, SystemTime::now()),
        Logged::Lost => {
            if let Some(lost) = losses.count() {
                warn!(times = lost, "copies of the pod share's refusals were lost (NFLOG's socket buffer overflowed): the SNAT log's refused counts are short");
            }
        }
    }
}

/// The `refused` line of `refusals`; in API mode naming the pod that held the address at the
/// first refusal.
fn line_of(refusals: &Refusals, pods: Option<&PodNames>) -> String {
    let mut text = String::with_capacity(256);
    let Some(names) = pods else {
        line::render_refusals(&mut text, refusals, None);
        return text;
    };
    let pod = names
        .directory
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .at(refusals.source, line::micros_of(refusals.first));
    super::with_origin(pod.as_deref(), &names.node, |origin| {
        line::render_refusals(&mut text, refusals, Some(origin))
    });
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Family;

    fn copy(prefix: &str, source: &str, destination: &str, port: u16) -> LoggedPacket<'static> {
        LoggedPacket {
            prefix: Box::leak(prefix.to_string().into_boxed_str()),
            family: Family::V4,
            protocol: 6,
            source: source.parse().unwrap(),
            destination: destination.parse().unwrap(),
            destination_port: Some(port),
        }
    }

    #[test]
    fn copies_are_tallied_by_pod_destination_and_limit_and_others_passed_over() {
        let mut tally = Tally::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_694_584);
        let connections = ShareLimit::Connections.log_prefix();
        for i in 0..3800u64 {
            let at = t0 + Duration::from_micros(i * 100);
            tally.count(&copy(connections, "192.168.1.5", "203.0.113.2", 80), at);
        }
        tally.count(
            &copy(
                ShareLimit::Rate.log_prefix(),
                "192.168.1.5",
                "203.0.113.2",
                80,
            ),
            t0,
        );
        tally.count(&copy("someone-else", "192.168.1.6", "203.0.113.2", 80), t0);
        let lines = tally.take();
        assert_eq!(lines.len(), 2, "{lines:?}");
        let refused = lines
            .iter()
            .find(|r| r.limit == ShareLimit::Connections)
            .unwrap();
        assert_eq!(refused.count, 3800);
        assert_eq!(refused.first, t0);
        assert_eq!(refused.last, t0 + Duration::from_micros(379_900));
        assert!(tally.take().is_empty(), "a window is taken once");
    }

    /// A pod scanning thousands of destinations gets its own destinations' worth of tallies
    /// and one for the rest; its neighbours' refusals are still tallied apart; the whole stays
    /// within [`MAX_TALLIES`], what it cannot hold counted.
    #[test]
    fn a_scanning_pod_is_bounded_and_hides_no_neighbour() {
        let mut tally = Tally::default();
        let now = SystemTime::now();
        let prefix = ShareLimit::Rate.log_prefix();
        for port in 1..=5000u16 {
            tally.count(&copy(prefix, "192.168.1.5", "203.0.113.2", port), now);
        }
        tally.count(&copy(prefix, "192.168.1.6", "203.0.113.9", 443), now);
        let lines = tally.take();
        let scanner: Vec<&Refusals> = lines
            .iter()
            .filter(|r| r.source.to_string() == "192.168.1.5")
            .collect();
        assert_eq!(scanner.len(), DESTINATIONS_PER_POD + 1);
        let several = scanner.iter().find(|r| r.to == RefusedTo::Several).unwrap();
        assert_eq!(several.count, 5000 - DESTINATIONS_PER_POD as u64);
        assert!(lines.iter().any(|r| r.source.to_string() == "192.168.1.6"
            && r.to
                == RefusedTo::One {
                    address: "203.0.113.9".parse().unwrap(),
                    port: Some(443)
                }));
        for i in 0..3000u32 {
            let source = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            tally.count(&copy(prefix, &source, "203.0.113.9", 1), now);
        }
        let untallied = tally.untallied;
        let lines = tally.take();
        assert_eq!(lines.len(), MAX_TALLIES);
        let kept: u64 = lines.iter().map(|r| r.count).sum();
        assert_eq!(kept + untallied, 3000, "every copy is kept or counted");
    }
}
