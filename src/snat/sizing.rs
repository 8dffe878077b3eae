//! How much of the agent's memory the SNAT log and port pressure may hold, from its memory
//! limit: the writer's queue of lines and the flows tracked for port pressure are sized so
//! that both full stay within a fixed share of the limit, and a flood then loses lines
//! (dropped, counted, said) or leaves flows untracked (counted) instead of bringing the agent
//! to its limit. Without a limit (or none readable) they keep their largest sizes.
//!
//! The events socket's receive buffer is not counted: the kernel does not charge it to the
//! agent's memory cgroup (see [`super::RECEIVE_BUFFER`]).

use super::pressure::TRACKED_FLOWS;

/// Lines queued for the writer at most, whatever the limit.
pub const MAX_QUEUE_LINES: usize = 32_768;
/// Bytes one queued line may cost: its text (rendered with a capacity of 192 bytes, rounded
/// up by the allocator) and its slot in the queue.
pub const LINE_BYTES: u64 = 256;
/// Bytes one tracked flow may cost at the peak, across the four maps of [`super::pressure`]:
/// their entries, the free slots of a table grown by doubling, and, while one grows, its old
/// table beside the new (the measurement it rests on is in docs/benchmarks.md, the SNAT
/// log's peak RSS at the tracking cap).
pub const FLOW_BYTES: u64 = 640;
/// The share of the memory limit, in percent, that the queue may take when full.
pub const QUEUE_PERCENT: u64 = 5;
/// The share of the memory limit, in percent, that the flows tracked may take.
pub const FLOWS_PERCENT: u64 = 25;
/// The fewest lines queued and flows tracked, however small the limit.
pub const MIN_QUEUE_LINES: usize = 1_024;
pub const MIN_TRACKED_FLOWS: usize = 4_096;

/// The sizes the SNAT log runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Lines the writer's queue holds; a line beyond is dropped (counted, said).
    pub queue_lines: usize,
    /// Flows port pressure tracks; a new flow beyond is left out (counted as untracked).
    pub tracked_flows: usize,
}

impl Sizing {
    /// The sizes for a memory limit of `limit` bytes (None: no limit).
    pub fn for_limit(limit: Option<u64>) -> Sizing {
        let Some(limit) = limit else {
            return Sizing {
                queue_lines: MAX_QUEUE_LINES,
                tracked_flows: TRACKED_FLOWS,
            };
        };
        let share = |percent: u64, each: u64, min: usize, max: usize| {
            let count = limit / 100 * percent / each;
            usize::try_from(count).unwrap_or(max).clamp(min, max)
        };
        Sizing {
            queue_lines: share(QUEUE_PERCENT, LINE_BYTES, MIN_QUEUE_LINES, MAX_QUEUE_LINES),
            tracked_flows: share(FLOWS_PERCENT, FLOW_BYTES, MIN_TRACKED_FLOWS, TRACKED_FLOWS),
        }
    }

    /// The most the queue and the flows tracked may take together, in bytes.
    pub fn bytes(&self) -> u64 {
        self.queue_lines as u64 * LINE_BYTES + self.tracked_flows as u64 * FLOW_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_limit_the_largest_sizes() {
        let sizing = Sizing::for_limit(None);
        assert_eq!(sizing.queue_lines, MAX_QUEUE_LINES);
        assert_eq!(sizing.tracked_flows, TRACKED_FLOWS);
    }

    /// The shipped pod's 64 MiB: both full take at most 30 % of it, so a flood leaves the
    /// agent room (the largest sizes alone would fill it).
    #[test]
    fn in_64_mib_both_full_stay_within_their_share() {
        let limit = 64u64 << 20;
        let sizing = Sizing::for_limit(Some(limit));
        assert!(sizing.queue_lines < MAX_QUEUE_LINES, "{sizing:?}");
        assert!(sizing.tracked_flows < TRACKED_FLOWS, "{sizing:?}");
        assert!(
            sizing.bytes() <= limit / 100 * (QUEUE_PERCENT + FLOWS_PERCENT),
            "{sizing:?}: {} bytes",
            sizing.bytes()
        );
        assert_eq!(sizing.queue_lines, 13_107);
        assert_eq!(sizing.tracked_flows, 26_214);
    }

    #[test]
    fn sizes_grow_with_the_limit_up_to_the_largest_and_never_below_the_fewest() {
        let mut last = Sizing::for_limit(Some(0));
        assert_eq!(last.queue_lines, MIN_QUEUE_LINES);
        assert_eq!(last.tracked_flows, MIN_TRACKED_FLOWS);
        for mib in [16u64, 32, 64, 128, 256, 512, 1024, 4096] {
            let sizing = Sizing::for_limit(Some(mib << 20));
            assert!(sizing.queue_lines >= last.queue_lines, "{mib} MiB");
            assert!(sizing.tracked_flows >= last.tracked_flows, "{mib} MiB");
            last = sizing;
        }
        assert_eq!(last, Sizing::for_limit(None), "4 GiB: the largest sizes");
        assert_eq!(Sizing::for_limit(Some(u64::MAX)), Sizing::for_limit(None));
    }
}
