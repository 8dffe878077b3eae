//! SNAT port pressure, kept from the same new and end events as the log (no periodic dump):
//! the source ports in use on each translated address, and the share of the usable port
//! range taken toward the busiest destination. Toward one destination address and port every
//! flow from one translated address needs a source port of its own, so that share reaching 1
//! is exhaustion: the next connection there fails (Cilium #35621).
//!
//! The usable range is MASQUERADE's (and SNAT's) without `--to-ports`: for an original
//! source port of 1024 or more the kernel picks the translated one in 1024–65535 (in 1–511
//! or 600–1023 below it), whatever `ip_local_port_range` says: `nf_nat_l4proto_unique_tuple()`
//! in net/netfilter/nf_nat_core.c (Linux 5.x–6.x). Our rules masquerade `--random-fully` (as
//! upstream's do where supported), so the port is drawn at random in that range rather than
//! the original port kept first. That is 64,512 ports for TCP, UDP, SCTP, DCCP and UDP-Lite,
//! and 65,536 ICMP ids. With the agent's `--to-ports`, TCP, UDP and SCTP take their ports
//! from the ranges given, and the share is of those ([`usable_range`]). Memory is bounded: at most [`TRACKED_FLOWS`] flows are tracked, fewer
//! under a memory limit ([`super::sizing`]); beyond that a new flow is counted in `untracked`
//! and left out, so the gauges are then a lower bound.

use crate::netlink::conntrack::{Event, EventKind};
use crate::plan::ToPorts;
use std::collections::HashMap;
use std::net::IpAddr;

/// Most flows tracked at once: what the cap costs in RSS (the maps' final tables and, while
/// one grows, its old table beside the new; each flow to its own destination port, so the map
/// by destination is as large as the map of flows) is measured in docs/benchmarks.md.
pub const TRACKED_FLOWS: usize = 131_072;
/// MASQUERADE's source ports for an original port of 1024 or more: 1024–65535.
pub const PORT_RANGE: u32 = 65_535 - 1024 + 1;
/// ICMP and ICMPv6 ids: 0–65535.
const ID_RANGE: u32 = 65_536;

/// How many translated ports (or ids) `protocol` can use: the agent's `--to-ports` ranges for
/// TCP, UDP and SCTP when it gives any, else MASQUERADE's own range.
pub fn usable_range(protocol: u8, to_ports: &ToPorts) -> u32 {
    if takes_to_ports(protocol, to_ports) {
        return to_ports.0.iter().map(|range| range.size()).sum();
    }
    match protocol {
        1 | 58 => ID_RANGE,
        _ => PORT_RANGE,
    }
}

/// Whether `protocol`'s translated ports come from `to_ports`: it gives ranges, and the
/// protocol is TCP, UDP or SCTP (the ones our rules apply `--to-ports` to).
pub fn takes_to_ports(protocol: u8, to_ports: &ToPorts) -> bool {
    const TCP: u8 = 6;
    const UDP: u8 = 17;
    const SCTP: u8 = 132;
    !to_ports.0.is_empty() && matches!(protocol, TCP | UDP | SCTP)
}

/// A translated address and protocol: one pool of source ports.
type Pool = (IpAddr, u8);

/// A flow's original direction: protocol, source and port, destination and port (unique
/// among the entries alive, unlike conntrack's 32-bit ids).
pub(super) type OriginalTuple = (u8, IpAddr, u16, IpAddr, u16);

pub(super) fn original_tuple(flow: &crate::netlink::conntrack::Flow) -> OriginalTuple {
    (
        flow.protocol,
        flow.source,
        flow.source_port_or_id().unwrap_or(0),
        flow.destination,
        flow.destination_port.unwrap_or(0),
    )
}

/// What a tracked flow holds.
#[derive(Clone, Copy, Debug)]
struct Held {
    pool: Pool,
    port: u16,
    destination: (IpAddr, u16),
}

/// The flows tracked and what they hold.
#[derive(Debug)]
pub struct Pressure {
    limit: usize,
    /// By original tuple, unique among the entries alive (conntrack's 32-bit ids are hashes:
    /// among 100,000 flows two share one about once).
    flows: HashMap<OriginalTuple, Held>,
    /// Flows per translated port.
    ports: HashMap<(Pool, u16), u32>,
    /// Distinct translated ports per pool.
    in_use: HashMap<Pool, u64>,
    /// Flows per pool and destination address and port.
    toward: HashMap<(Pool, (IpAddr, u16)), u32>,
    /// New flows left out because [`TRACKED_FLOWS`] were tracked already.
    pub untracked: u64,
}

impl Default for Pressure {
    fn default() -> Self {
        Pressure::with_limit(TRACKED_FLOWS)
    }
}

/// One pool's pressure, as the metrics show it.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolPressure {
    pub translated: IpAddr,
    pub protocol: u8,
    pub ports_in_use: u64,
    /// The busiest destination address and port, and the share of the usable range taken
    /// toward it.
    pub busiest: (IpAddr, u16),
    pub busiest_share: f64,
}

impl Pressure {
    pub fn with_limit(limit: usize) -> Self {
        Pressure {
            limit,
            flows: HashMap::new(),
            ports: HashMap::new(),
            in_use: HashMap::new(),
            toward: HashMap::new(),
            untracked: 0,
        }
    }

    /// The most flows tracked at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Flows tracked now.
    pub fn tracked(&self) -> usize {
        self.flows.len()
    }

    /// Takes in one event of a translated flow: a new flow holds its port, an ended one
    /// frees it. A new event for a flow already tracked (the seed dump and the events overlap)
    /// replaces it.
    pub fn apply(&mut self, event: &Event) {
        let flow = &event.flow;
        let key = original_tuple(flow);
        match event.kind {
            EventKind::End => {
                if let Some(held) = self.flows.remove(&key) {
                    self.release(held);
                }
            }
            EventKind::New => {
                let held = Held {
                    pool: (flow.reply_destination, flow.protocol),
                    port: flow.translated_port_or_id().unwrap_or(0),
                    destination: (flow.destination, flow.destination_port.unwrap_or(0)),
                };
                if let Some(before) = self.flows.remove(&key) {
                    self.release(before);
                } else if self.flows.len() >= self.limit {
                    self.untracked += 1;
                    return;
                }
                self.flows.insert(key, held);
                let port = self.ports.entry((held.pool, held.port)).or_insert(0);
                *port += 1;
                if *port == 1 {
                    *self.in_use.entry(held.pool).or_insert(0) += 1;
                }
                *self
                    .toward
                    .entry((held.pool, held.destination))
                    .or_insert(0) += 1;
            }
        }
    }

    fn release(&mut self, held: Held) {
        let key = (held.pool, held.port);
        if let Some(port) = self.ports.get_mut(&key) {
            *port -= 1;
            if *port == 0 {
                self.ports.remove(&key);
                if let Some(in_use) = self.in_use.get_mut(&held.pool) {
                    *in_use -= 1;
                    if *in_use == 0 {
                        self.in_use.remove(&held.pool);
                    }
                }
            }
        }
        let key = (held.pool, held.destination);
        if let Some(toward) = self.toward.get_mut(&key) {
            *toward -= 1;
            if *toward == 0 {
                self.toward.remove(&key);
            }
        }
    }

    /// Every pool with a flow, its ports in use and its busiest destination (its share of
    /// the ports usable under `to_ports`, the agent's `--to-ports`), in address and protocol
    /// order. Walks the destinations once (at a scrape, not per event).
    pub fn pools(&self, to_ports: &ToPorts) -> Vec<PoolPressure> {
        let mut busiest: HashMap<Pool, ((IpAddr, u16), u32)> = HashMap::new();
        for (&(pool, destination), &flows) in &self.toward {
            let best = busiest.entry(pool).or_insert((destination, 0));
            if flows > best.1 || (flows == best.1 && destination < best.0) {
                *best = (destination, flows);
            }
        }
        let mut out: Vec<PoolPressure> = self
            .in_use
            .iter()
            .map(|(&(translated, protocol), &ports_in_use)| {
                let (destination, flows) = busiest
                    .get(&(translated, protocol))
                    .copied()
                    .unwrap_or(((translated, 0), 0));
                PoolPressure {
                    translated,
                    protocol,
                    ports_in_use,
                    busiest: destination,
                    busiest_share: f64::from(flows)
                        / f64::from(usable_range(protocol, to_ports).max(1)),
                }
            })
            .collect();
        out.sort_by_key(|pool| (pool.translated, pool.protocol));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::conntrack::Flow;
    use crate::plan::Family;

    fn event(kind: EventKind, id: u32, port: u16, destination: &str) -> Event {
        let destination: IpAddr = destination.parse().unwrap();
        Event {
            kind,
            counters: None,
            flow: Flow {
                family: Family::V4,
                protocol: 17,
                source: "192.168.1.5".parse().unwrap(),
                destination,
                source_port: Some(10_000 + id as u16),
                destination_port: Some(53),
                reply_source: destination,
                reply_destination: "203.0.113.1".parse().unwrap(),
                reply_destination_port: Some(port),
                icmp_id: None,
                reply_icmp_id: None,
                id,
            },
        }
    }

    #[test]
    fn ports_and_the_busiest_share_follow_new_and_end_events() {
        let mut pressure = Pressure::default();
        for id in 0..100u32 {
            pressure.apply(&event(
                EventKind::New,
                id,
                40_000 + id as u16,
                "198.51.100.9",
            ));
        }
        // The same ports toward another destination: more flows, no more ports.
        for id in 100..110u32 {
            pressure.apply(&event(
                EventKind::New,
                id,
                40_000 + (id - 100) as u16,
                "198.51.100.10",
            ));
        }
        // The seed and the events overlap: a repeated new counts once.
        pressure.apply(&event(EventKind::New, 5, 40_005, "198.51.100.9"));
        let pools = pressure.pools(&ToPorts::default());
        assert_eq!(pools.len(), 1);
        assert_eq!(pools[0].ports_in_use, 100);
        assert_eq!(pools[0].busiest, ("198.51.100.9".parse().unwrap(), 53));
        assert_eq!(pools[0].busiest_share, 100.0 / 64_512.0);
        for id in 0..100u32 {
            pressure.apply(&event(
                EventKind::End,
                id,
                40_000 + id as u16,
                "198.51.100.9",
            ));
        }
        let pools = pressure.pools(&ToPorts::default());
        assert_eq!(pools[0].ports_in_use, 10);
        assert_eq!(pools[0].busiest, ("198.51.100.10".parse().unwrap(), 53));
        for id in 100..110u32 {
            pressure.apply(&event(EventKind::End, id, 0, "198.51.100.10"));
        }
        assert!(pressure.pools(&ToPorts::default()).is_empty());
        assert_eq!(pressure.tracked(), 0);
        assert!(pressure.ports.is_empty() && pressure.toward.is_empty());
    }

    #[test]
    fn icmp_echoes_hold_their_translated_ids_as_ports() {
        let mut pressure = Pressure::default();
        let echo = |kind, id: u16, translated_id: u16| {
            let mut echo = event(kind, u32::from(id), 0, "198.51.100.9");
            echo.flow.protocol = 1;
            (echo.flow.source_port, echo.flow.destination_port) = (None, None);
            echo.flow.reply_destination_port = None;
            (echo.flow.icmp_id, echo.flow.reply_icmp_id) = (Some(id), Some(translated_id));
            echo
        };
        // Three pings from one pod to one destination: three flows, three ids.
        for id in 1..=3u16 {
            pressure.apply(&echo(EventKind::New, id, 100 + id));
        }
        let pools = pressure.pools(&ToPorts::default());
        assert_eq!(pools.len(), 1);
        assert_eq!(pools[0].ports_in_use, 3, "one id each, not one per address");
        assert_eq!(pools[0].busiest_share, 3.0 / 65_536.0);
        pressure.apply(&echo(EventKind::End, 2, 102));
        assert_eq!(pressure.pools(&ToPorts::default())[0].ports_in_use, 2);
    }

    #[test]
    fn flows_are_told_apart_by_their_tuple_not_their_id() {
        let mut pressure = Pressure::default();
        // Two live flows whose 32-bit ids collide.
        let mut second = event(EventKind::New, 7, 40_001, "198.51.100.9");
        second.flow.source_port = Some(20_000);
        pressure.apply(&event(EventKind::New, 7, 40_000, "198.51.100.9"));
        pressure.apply(&second);
        assert_eq!(pressure.tracked(), 2);
        pressure.apply(&event(EventKind::End, 7, 40_000, "198.51.100.9"));
        assert_eq!(pressure.tracked(), 1);
        assert_eq!(pressure.pools(&ToPorts::default())[0].ports_in_use, 1);
    }

    #[test]
    fn the_share_is_of_the_to_ports_ranges_when_the_agent_gives_them() {
        let mut pressure = Pressure::default();
        for id in 0..85u32 {
            pressure.apply(&event(
                EventKind::New,
                id,
                30_000 + id as u16,
                "198.51.100.9",
            ));
        }
        // 100 ports in two ranges: 85 flows toward one destination are 85 % of them.
        let narrow: ToPorts = "30000-30049,31000-31049".parse().unwrap();
        assert_eq!(pressure.pools(&narrow)[0].busiest_share, 0.85);
        assert_eq!(
            pressure.pools(&ToPorts::default())[0].busiest_share,
            85.0 / 64_512.0
        );
        assert_eq!(usable_range(1, &narrow), 65_536, "ICMP ids: no --to-ports");
        assert_eq!(usable_range(6, &narrow), 100);
    }

    #[test]
    fn beyond_the_cap_new_flows_are_counted_not_tracked() {
        let mut pressure = Pressure::with_limit(3);
        for id in 0..5u32 {
            pressure.apply(&event(EventKind::New, id, 1000 + id as u16, "198.51.100.9"));
        }
        assert_eq!(pressure.tracked(), 3);
        assert_eq!(pressure.untracked, 2);
        // An untracked flow's end changes nothing.
        pressure.apply(&event(EventKind::End, 4, 1004, "198.51.100.9"));
        assert_eq!(pressure.pools(&ToPorts::default())[0].ports_in_use, 3);
    }
}
