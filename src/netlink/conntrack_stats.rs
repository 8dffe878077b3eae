//! ctnetlink's statistics of this network namespace's conntrack table: the per-CPU counters
//! (`IPCTNL_MSG_CT_GET_STATS_CPU`, a dump of one message per CPU, what `conntrack -S` prints)
//! summed over the CPUs, and the table's entries and limit (`IPCTNL_MSG_CT_GET_STATS`: the
//! namespace's `nf_conntrack_count` and the kernel's `nf_conntrack_max`). Two small requests,
//! each within a deadline; nothing kept between reads.

use super::conntrack::NFNL_SUBSYS_CTNETLINK;
use super::dump::{self, Deadlines};
use super::framing::{self, NLMSG_ERROR, NLM_F_ACK, NLM_F_DUMP};
use super::{Sequences, Socket, NETLINK_NETFILTER};
use std::io;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

const IPCTNL_MSG_CT_GET_STATS_CPU: u16 = 4;
const IPCTNL_MSG_CT_GET_STATS: u16 = 5;
const CTA_STATS_GLOBAL_ENTRIES: u16 = 1;
const CTA_STATS_GLOBAL_MAX_ENTRIES: u16 = 2;
const NFGENMSG_LEN: usize = 4;
/// A machine has a few hundred CPUs at most: each answers at once.
const DEADLINES: Deadlines = Deadlines {
    quiet: Duration::from_secs(1),
    overall: Duration::from_secs(2),
};

/// One per-CPU counter, by its ctnetlink attribute (`enum ctattr_stats_cpu`); the counters
/// the kernel no longer keeps (searched, new, ignore, delete, delete_list) are left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatCounter {
    Found = 2,
    Invalid = 4,
    Insert = 8,
    InsertFailed = 9,
    Drop = 10,
    EarlyDrop = 11,
    Error = 12,
    SearchRestart = 13,
    ClashResolve = 14,
    ChainTooLong = 15,
}

impl StatCounter {
    pub const ALL: [StatCounter; 10] = [
        StatCounter::Found,
        StatCounter::Invalid,
        StatCounter::Insert,
        StatCounter::InsertFailed,
        StatCounter::Drop,
        StatCounter::EarlyDrop,
        StatCounter::Error,
        StatCounter::SearchRestart,
        StatCounter::ClashResolve,
        StatCounter::ChainTooLong,
    ];

    /// The counter's name as `conntrack -S` prints it.
    pub fn name(self) -> &'static str {
        match self {
            StatCounter::Found => "found",
            StatCounter::Invalid => "invalid",
            StatCounter::Insert => "insert",
            StatCounter::InsertFailed => "insert_failed",
            StatCounter::Drop => "drop",
            StatCounter::EarlyDrop => "early_drop",
            StatCounter::Error => "error",
            StatCounter::SearchRestart => "search_restart",
            StatCounter::ClashResolve => "clash_resolve",
            StatCounter::ChainTooLong => "chaintoolong",
        }
    }

    fn of_attribute(kind: u16) -> Option<StatCounter> {
        StatCounter::ALL.into_iter().find(|c| *c as u16 == kind)
    }

    pub fn index(self) -> usize {
        StatCounter::ALL
            .iter()
            .position(|c| *c == self)
            .expect("every counter is in ALL")
    }
}

/// One CPU's counters, in the order of [`StatCounter::ALL`] (32 bits each, as the kernel
/// keeps them: they wrap).
pub type CpuCounters = [u32; StatCounter::ALL.len()];

/// The kernel's conntrack statistics for this network namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConntrackStatistics {
    /// Each CPU's counters, by the CPU's number.
    pub per_cpu: Vec<(u16, CpuCounters)>,
    /// Entries in the table (`nf_conntrack_count`).
    pub entries: u32,
    /// The table's limit (`nf_conntrack_max`; 0 is no limit); absent before Linux 4.19.
    pub max_entries: Option<u32>,
}

impl ConntrackStatistics {
    /// `counter` summed over the CPUs.
    pub fn sum(&self, counter: StatCounter) -> u64 {
        self.per_cpu
            .iter()
            .map(|(_, counters)| u64::from(counters[counter.index()]))
            .sum()
    }

    /// Adds CPU `cpu`'s message (the attributes after the nfgenmsg).
    fn add_cpu(&mut self, cpu: u16, attributes: &[u8]) {
        let mut counters = CpuCounters::default();
        for (kind, value) in framing::attributes(attributes) {
            if let (Some(counter), Some(n)) = (StatCounter::of_attribute(kind), be_u32(value)) {
                counters[counter.index()] = n;
            }
        }
        self.per_cpu.push((cpu, counters));
    }

    /// Reads the global message's entries and limit.
    fn set_global(&mut self, attributes: &[u8]) {
        for (kind, value) in framing::attributes(attributes) {
            match kind {
                CTA_STATS_GLOBAL_ENTRIES => self.entries = be_u32(value).unwrap_or(0),
                CTA_STATS_GLOBAL_MAX_ENTRIES => self.max_entries = be_u32(value),
                _ => {}
            }
        }
    }
}

fn be_u32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

fn message_kind(message: u16) -> u16 {
    (NFNL_SUBSYS_CTNETLINK << 8) | message
}

fn request(message: u16, flags: u16, seq: u32) -> Vec<u8> {
    let mut out = framing::request(message_kind(message), flags, seq, 32);
    out.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    framing::finish(&mut out);
    out
}

/// Reads the statistics of the caller's network namespace.
pub(crate) fn read() -> io::Result<ConntrackStatistics> {
    let socket = Socket::request(NETLINK_NETFILTER)?;
    let mut statistics = ConntrackStatistics::default();
    let seq = super::sequence(1);
    let per_cpu = request(IPCTNL_MSG_CT_GET_STATS_CPU, NLM_F_DUMP, seq);
    dump::dump_each(&socket, &per_cpu, seq, DEADLINES, |kind, payload| {
        if kind == message_kind(IPCTNL_MSG_CT_GET_STATS_CPU) {
            // The nfgenmsg's res_id is the CPU's number, big-endian.
            let cpu = payload
                .get(2..4)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
            statistics.add_cpu(cpu, payload.get(NFGENMSG_LEN..).unwrap_or_default());
        }
        Ok(())
    })?;
    read_global(&socket, &mut statistics)?;
    Ok(statistics)
}

/// The global message, then the kernel's acknowledgement.
fn read_global(socket: &Socket, statistics: &mut ConntrackStatistics) -> io::Result<()> {
    let seq = super::sequence(1);
    socket.send(&request(IPCTNL_MSG_CT_GET_STATS, NLM_F_ACK, seq))?;
    let mut buffer = vec![0u8; 4096];
    let deadline = Instant::now() + DEADLINES.overall;
    let sequences = Sequences {
        first: seq,
        count: 1,
    };
    socket.answers(sequences, deadline, &mut buffer, |framed| {
        if framed.kind == message_kind(IPCTNL_MSG_CT_GET_STATS) {
            let payload = &framed.bytes[framing::NLMSG_HDRLEN..];
            statistics.set_global(payload.get(NFGENMSG_LEN..).unwrap_or_default());
            ControlFlow::Continue(())
        } else if framed.kind == NLMSG_ERROR {
            ControlFlow::Break(framing::acknowledged(framed))
        } else {
            ControlFlow::Continue(())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(kind: u16, value: u32) -> Vec<u8> {
        let mut out = Vec::new();
        framing::put_attribute(&mut out, kind, &value.to_be_bytes());
        out
    }

    #[test]
    fn each_cpus_counters_are_summed_by_name_and_unknown_ones_ignored() {
        let mut statistics = ConntrackStatistics::default();
        for (number, (insert_failed, drop)) in [(3, 0), (4, 7)].into_iter().enumerate() {
            let mut cpu = attribute(StatCounter::InsertFailed as u16, insert_failed);
            cpu.extend(attribute(StatCounter::Drop as u16, drop));
            cpu.extend(attribute(1, 99)); // searched: no longer kept
            cpu.extend(attribute(40, 99)); // a counter of a later kernel
            statistics.add_cpu(number as u16, &cpu);
        }
        assert_eq!(statistics.per_cpu.len(), 2);
        assert_eq!(statistics.per_cpu[1].1[StatCounter::Drop.index()], 7);
        assert_eq!(statistics.sum(StatCounter::InsertFailed), 7);
        assert_eq!(statistics.sum(StatCounter::Drop), 7);
        assert_eq!(statistics.sum(StatCounter::Found), 0);
        let all: u64 = StatCounter::ALL.iter().map(|c| statistics.sum(*c)).sum();
        assert_eq!(all, 14);
    }

    #[test]
    fn the_global_message_gives_entries_and_the_limit() {
        let mut statistics = ConntrackStatistics::default();
        let mut global = attribute(CTA_STATS_GLOBAL_ENTRIES, 12);
        global.extend(attribute(CTA_STATS_GLOBAL_MAX_ENTRIES, 262_144));
        statistics.set_global(&global);
        assert_eq!(
            (statistics.entries, statistics.max_entries),
            (12, Some(262_144))
        );
        let mut old_kernel = ConntrackStatistics::default();
        old_kernel.set_global(&attribute(CTA_STATS_GLOBAL_ENTRIES, 5));
        assert_eq!((old_kernel.entries, old_kernel.max_entries), (5, None));
    }

    #[test]
    fn names_are_conntrack_s_spellings_and_attributes_round_trip() {
        for counter in StatCounter::ALL {
            assert_eq!(StatCounter::of_attribute(counter as u16), Some(counter));
            assert!(counter
                .name()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_'));
        }
        assert_eq!(StatCounter::ChainTooLong.name(), "chaintoolong");
    }
}
