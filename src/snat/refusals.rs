//! The pod share's refusals in the SNAT log: every backend's refusing rule copies the refused
//! packet to NFLOG group [`SHARE_LOG_GROUP`] with its limit's prefix; this thread binds the
//! group, tallies the copies by pod address, protocol, destination and limit, and every
//! [`WINDOW`] queues one `refused` line per tally for the log's writer (naming the pod in API
//! mode). Memory is bounded: past [`MAX_DESTINATIONS`] tallies in a window a pod's further
//! destinations are tallied together (`dst` `*`), and past twice that a window's new tallies
//! are counted and said, not kept. Another program holding the group costs the log its
//! refusals (said once), never the refusal itself.

use super::line::{self, Origin, PodWords, Refusals, RefusedTo};
use super::pods::PodNames;
use super::{Sayer, SnatStats};
use crate::netlink::nflog::{LogGroup, Logged, LoggedPacket};
use crate::plan::live::{ShareLimit, SHARE_LOG_GROUP, SHARE_LOG_SNAPLEN};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};
use tracing::{info, warn};

/// How long a line's refusals are gathered: a pod refused without pause gets a line a second
/// per destination.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Tallies of a window before a pod's further destinations share one (`*`).
const MAX_DESTINATIONS: usize = 1024;
/// The copies' socket buffer: some 30,000 copies, a second and a half of a 20,000/s flood.
const RECEIVE_BUFFER: usize = 8 << 20;
/// How long the thread sleeps waiting for copies: a stop and a window's end are seen within it.
const WAIT: Duration = Duration::from_millis(100);
/// At a stop, copies still queued are read for at most this long.
const FINAL_READ: Duration = Duration::from_millis(500);

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
    /// Copies not kept: the window held too many tallies.
    pub untallied: u64,
}

impl Tally {
    /// Counts one copy read at `now`; a copy no rule of ours logged is passed over.
    pub fn count(&mut self, packet: &LoggedPacket<'_>, now: SystemTime) {
        let Some(limit) = ShareLimit::of_log_prefix(packet.prefix) else {
            return;
        };
        let mut key = TallyKey {
            source: packet.source.to_canonical(),
            protocol: packet.protocol,
            to: RefusedTo::One {
                address: packet.destination.to_canonical(),
                port: packet.destination_port,
            },
            limit,
        };
        if !self.counted.contains_key(&key) && self.counted.len() >= MAX_DESTINATIONS {
            key.to = RefusedTo::Several;
            if !self.counted.contains_key(&key) && self.counted.len() >= 2 * MAX_DESTINATIONS {
                self.untallied += 1;
                return;
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

/// Binds the group and starts the thread; a group that cannot be bound is said, and the log
/// goes on without refusals.
pub fn start(
    to: RefusalsTo,
    stats: std::sync::Arc<SnatStats>,
    stopping: std::sync::Arc<AtomicBool>,
) {
    let group = match LogGroup::bind(SHARE_LOG_GROUP, SHARE_LOG_SNAPLEN, RECEIVE_BUFFER) {
        Ok(group) => group,
        Err(err) => {
            let why = if err.raw_os_error() == Some(libc::EBUSY) {
                "another program holds it".to_string()
            } else {
                err.to_string()
            };
            warn!(group = SHARE_LOG_GROUP, %why, "cannot bind the NFLOG group of the pod share's refusals: the SNAT log will not name the pods refused (the share refuses them all the same; ipmasq_pod_egress_limited_total counts them)");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("snat-refusals".into())
        .spawn(move || read_refusals(group, &to, &stats, &stopping));
    match spawned {
        Ok(_) => info!(
            group = SHARE_LOG_GROUP,
            "the SNAT log names the pods the pod share refuses"
        ),
        Err(err) => {
            warn!(error = %err, "cannot start the thread of the pod share's refusals: the SNAT log will not name the pods refused")
        }
    }
}

/// The thread: reads copies, tallies them, and queues a window's lines at its end; at a stop,
/// reads what is queued (for at most [`FINAL_READ`]) and queues the last window's lines.
fn read_refusals(mut group: LogGroup, to: &RefusalsTo, stats: &SnatStats, stopping: &AtomicBool) {
    let mut tally = Tally::default();
    let mut window_ends = Instant::now() + WINDOW;
    let mut losses = Sayer::new();
    let mut drops = Sayer::new();
    loop {
        let last = stopping.load(Ordering::Relaxed);
        if !last {
            group.wait(WAIT);
        }
        let deadline = last.then(|| Instant::now() + FINAL_READ);
        let read = group.drain(deadline, |logged| match logged {
            Logged::Packet(packet) => tally.count(&packet, SystemTime::now()),
            Logged::Lost => {
                if let Some(lost) = losses.count() {
                    warn!(times = lost, "copies of the pod share's refusals were lost (NFLOG's socket buffer overflowed): the SNAT log's refused counts are short");
                }
            }
        });
        if let Err(err) = read {
            warn!(error = %err, "reading the pod share's refusals failed; the SNAT log names no more refused pods");
            return;
        }
        if last || Instant::now() >= window_ends {
            queue_window(&mut tally, to, stats, &mut drops);
            window_ends = Instant::now() + WINDOW;
        }
        if last {
            return;
        }
    }
}

/// Queues one line per tally of the window (dropped, and counted, when the writer is behind).
fn queue_window(tally: &mut Tally, to: &RefusalsTo, stats: &SnatStats, drops: &mut Sayer) {
    if tally.untallied > 0 {
        warn!(copies = tally.untallied, "more than {} tallies of refusals in one second: refusals past them are not in the SNAT log", 2 * MAX_DESTINATIONS);
        tally.untallied = 0;
    }
    for refusals in tally.take() {
        let text = line_of(&refusals, to.pods.as_ref());
        match to.queue.try_send(text) {
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
    let qualified = pod.as_ref().map(|pod| pod.qualified());
    let origin = Origin {
        pod: pod
            .as_ref()
            .zip(qualified.as_deref())
            .map(|(pod, qualified)| PodWords {
                qualified,
                uid: &pod.uid,
            }),
        node: &names.node,
    };
    line::render_refusals(&mut text, refusals, Some(origin));
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

    #[test]
    fn a_scan_of_many_destinations_is_bounded() {
        let mut tally = Tally::default();
        let now = SystemTime::now();
        let prefix = ShareLimit::Rate.log_prefix();
        for port in 1..=5000u16 {
            tally.count(&copy(prefix, "192.168.1.5", "203.0.113.2", port), now);
        }
        for i in 0..3000u32 {
            let source = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            tally.count(&copy(prefix, &source, "203.0.113.9", 1), now);
        }
        let untallied = tally.untallied;
        let lines = tally.take();
        assert!(lines.len() <= 2 * MAX_DESTINATIONS, "{}", lines.len());
        let several = lines
            .iter()
            .find(|r| r.source.to_string() == "192.168.1.5" && r.to == RefusedTo::Several)
            .unwrap();
        assert_eq!(several.count, 5000 - MAX_DESTINATIONS as u64);
        let kept: u64 = lines.iter().map(|r| r.count).sum();
        assert_eq!(kept + untallied, 8000, "every copy is kept or counted");
        assert!(untallied > 0);
    }
}
