//! The health of the node's conntrack table as the kernel counts it: how full the table is
//! and how often it failed a flow (an insert that lost a race, a packet dropped because the
//! table was full, an entry evicted early to make room). Read over ctnetlink for `/metrics`
//! (each scrape) and `show`; the alerts and runbooks read the same figures.

pub use crate::netlink::conntrack_stats::{ConntrackStatistics, CpuCounters, StatCounter};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

/// The fill at which the table counts as nearly full: the alert `IpmasqConntrackTableFilling`
/// fires there, and `show` warns.
pub const NEARLY_FULL: f64 = 0.8;

/// Scrapes this close together share one read of the kernel.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// What `/metrics` serves of the table: its fill, and each counter's running total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConntrackFigures {
    pub entries: u32,
    pub max_entries: Option<u32>,
    /// By [`StatCounter::ALL`]'s order: counters that never go backwards.
    pub totals: [u64; StatCounter::ALL.len()],
}

impl ConntrackFigures {
    pub fn total(&self, counter: StatCounter) -> u64 {
        self.totals[counter.index()]
    }
}

/// The agent's running totals of the per-CPU counters. Each CPU's counter is 32 bits in the
/// kernel and wraps (on a busy node `found` and `insert` within hours), so their sum would go
/// backwards, which Prometheus takes for a reset; the totals start at the first read's sums
/// and add each CPU's change since the last read, modulo 2^32, so they only grow (a wrap
/// between two reads is seen as long as each CPU counts fewer than 2^32 in between).
#[derive(Debug)]
pub struct CounterTotals {
    last: BTreeMap<u16, CpuCounters>,
    totals: [u64; StatCounter::ALL.len()],
    cached: Option<(Instant, ConntrackFigures)>,
}

impl CounterTotals {
    pub const fn new() -> CounterTotals {
        CounterTotals {
            last: BTreeMap::new(),
            totals: [0; StatCounter::ALL.len()],
            cached: None,
        }
    }

    /// Folds a read into the totals.
    pub fn fold(&mut self, statistics: &ConntrackStatistics) -> ConntrackFigures {
        for (cpu, counters) in &statistics.per_cpu {
            let before = self.last.insert(*cpu, *counters);
            for (i, now) in counters.iter().enumerate() {
                self.totals[i] += u64::from(match before {
                    Some(before) => now.wrapping_sub(before[i]),
                    None => *now,
                });
            }
        }
        ConntrackFigures {
            entries: statistics.entries,
            max_entries: statistics.max_entries,
            totals: self.totals,
        }
    }

    /// The figures for a scrape: read from the kernel and folded in, or the last ones when
    /// they are less than a second old (scrapes close together cost one read).
    pub fn read_for_scrape(&mut self) -> io::Result<ConntrackFigures> {
        if let Some((at, figures)) = &self.cached {
            if at.elapsed() < FRESH_FOR {
                return Ok(figures.clone());
            }
        }
        let figures = self.fold(&read()?);
        self.cached = Some((Instant::now(), figures.clone()));
        Ok(figures)
    }
}

impl Default for CounterTotals {
    fn default() -> Self {
        CounterTotals::new()
    }
}

/// Reads the statistics of the caller's network namespace (two netlink requests, each
/// within a deadline of a second or two).
pub fn read() -> io::Result<ConntrackStatistics> {
    crate::netlink::conntrack_stats::read()
}

/// What `show` reports of the table.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConntrackHealth {
    pub entries: u32,
    /// `nf_conntrack_max`; absent before Linux 4.19, 0 when unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u32>,
    /// `entries / maxEntries`, when there is a limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<f64>,
    /// Each per-CPU counter summed over the CPUs since boot, by `conntrack -S`'s names.
    pub counters: BTreeMap<&'static str, u64>,
}

impl From<&ConntrackStatistics> for ConntrackHealth {
    fn from(statistics: &ConntrackStatistics) -> Self {
        ConntrackHealth {
            entries: statistics.entries,
            max_entries: statistics.max_entries,
            fill: fill(statistics),
            counters: StatCounter::ALL
                .into_iter()
                .map(|counter| (counter.name(), statistics.sum(counter)))
                .collect(),
        }
    }
}

/// The table's fill, 0 to 1, when the kernel says its limit and there is one.
pub fn fill(statistics: &ConntrackStatistics) -> Option<f64> {
    let max = statistics.max_entries.filter(|max| *max > 0)?;
    Some(f64::from(statistics.entries) / f64::from(max))
}

impl ConntrackHealth {
    fn counter(&self, counter: StatCounter) -> u64 {
        self.counters.get(counter.name()).copied().unwrap_or(0)
    }

    /// Whether the table is nearly full (the counters since boot are not: a node up for
    /// months has some failures; the alert on their rate says when they matter).
    pub fn nearly_full(&self) -> bool {
        self.fill.is_some_and(|fill| fill >= NEARLY_FULL)
    }

    /// The fill for people: `10 of 1000 entries (1.0 % full)`.
    pub fn fill_text(&self) -> String {
        match (self.max_entries, self.fill) {
            (Some(max), Some(fill)) => format!(
                "{} of {} entries ({:.1} % full)",
                self.entries,
                max,
                fill * 100.0
            ),
            _ => format!("{} entries (no limit known)", self.entries),
        }
    }

    /// The failures since boot for people.
    pub fn failures_text(&self) -> String {
        format!(
            "{} insert failed, {} dropped, {} early-dropped since boot",
            self.counter(StatCounter::InsertFailed),
            self.counter(StatCounter::Drop),
            self.counter(StatCounter::EarlyDrop),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statistics(entries: u32, max: Option<u32>, drops: u64) -> ConntrackStatistics {
        let mut statistics = ConntrackStatistics {
            entries,
            max_entries: max,
            ..Default::default()
        };
        let mut counters = CpuCounters::default();
        counters[StatCounter::Drop.index()] = u32::try_from(drops).expect("a test's drops");
        statistics.per_cpu.push((0, counters));
        statistics
    }

    #[test]
    fn nearly_full_is_said_and_the_figures_are_worded() {
        let calm = ConntrackHealth::from(&statistics(10, Some(1000), 0));
        assert!(!calm.nearly_full());
        assert_eq!(calm.fill_text(), "10 of 1000 entries (1.0 % full)");
        assert_eq!(
            calm.failures_text(),
            "0 insert failed, 0 dropped, 0 early-dropped since boot"
        );
        assert!(ConntrackHealth::from(&statistics(800, Some(1000), 0)).nearly_full());
        assert!(!ConntrackHealth::from(&statistics(799, Some(1000), 0)).nearly_full());
        assert!(!ConntrackHealth::from(&statistics(1, Some(1000), 1)).nearly_full());
    }

    /// A CPU's counter that wraps between two reads still adds its change: the total grows.
    #[test]
    fn totals_never_go_backwards_when_a_cpus_counter_wraps() {
        let read = |cpu0: u32, cpu1: u32| {
            let mut statistics = ConntrackStatistics::default();
            let at = StatCounter::Found.index();
            for (cpu, value) in [(0u16, cpu0), (1, cpu1)] {
                let mut counters = CpuCounters::default();
                counters[at] = value;
                statistics.per_cpu.push((cpu, counters));
            }
            statistics
        };
        let mut totals = CounterTotals::new();
        let first = totals.fold(&read(u32::MAX - 5, 10));
        assert_eq!(first.total(StatCounter::Found), u64::from(u32::MAX) + 5);
        let wrapped = totals.fold(&read(4, 12));
        assert_eq!(
            wrapped.total(StatCounter::Found),
            u64::from(u32::MAX) + 5 + 10 + 2
        );
        assert_eq!(wrapped.total(StatCounter::Drop), 0);
    }

    #[test]
    fn no_limit_is_no_fill() {
        for max in [None, Some(0)] {
            let health = ConntrackHealth::from(&statistics(5, max, 0));
            assert_eq!(health.fill, None);
            assert_eq!(health.fill_text(), "5 entries (no limit known)");
        }
    }
}
