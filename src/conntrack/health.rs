//! The health of the node's conntrack table as the kernel counts it: how full the table is
//! and how often it failed a flow (an insert that lost a race, a packet dropped because the
//! table was full, an entry evicted early to make room). Read over ctnetlink for `/metrics`
//! (each scrape) and `show`; the alerts and runbooks read the same figures.

pub use crate::netlink::conntrack_stats::{ConntrackStatistics, StatCounter};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;

/// The fill at which the table counts as nearly full: the alert `IPMasqConntrackTableFilling`
/// fires there, and `show` warns.
pub const NEARLY_FULL: f64 = 0.8;

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

    /// Whether flows are at risk: the table nearly full, or the kernel has failed inserts or
    /// dropped packets for want of room.
    pub fn troubled(&self) -> bool {
        self.fill.is_some_and(|fill| fill >= NEARLY_FULL)
            || [StatCounter::InsertFailed, StatCounter::Drop]
                .into_iter()
                .any(|counter| self.counter(counter) > 0)
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
        let at = StatCounter::ALL
            .iter()
            .position(|c| *c == StatCounter::Drop)
            .expect("drop is a counter");
        statistics.sums[at] = drops;
        statistics
    }

    #[test]
    fn nearly_full_or_dropping_is_trouble_and_says_the_figures() {
        let calm = ConntrackHealth::from(&statistics(10, Some(1000), 0));
        assert!(!calm.troubled());
        assert_eq!(calm.fill_text(), "10 of 1000 entries (1.0 % full)");
        assert_eq!(
            calm.failures_text(),
            "0 insert failed, 0 dropped, 0 early-dropped since boot"
        );
        assert!(ConntrackHealth::from(&statistics(800, Some(1000), 0)).troubled());
        assert!(!ConntrackHealth::from(&statistics(799, Some(1000), 0)).troubled());
        assert!(ConntrackHealth::from(&statistics(1, Some(1000), 1)).troubled());
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
