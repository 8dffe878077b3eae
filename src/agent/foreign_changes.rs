//! A neighbour's changes to the rules we own, heard as they commit: a pass at once, so a flush
//! of our jump or table is repaired in milliseconds, not at the next resync; paced against a
//! neighbour that keeps changing them (a fight the agent cannot win by speed), and said.

use crate::netlink::nf_tables::foreign::{Committer, ForeignCommits, Heard, Owned};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Repairs at once before pacing starts: a few flushes in a row are repaired as they come.
const BURST: f64 = 5.0;
/// Repairs a second while paced: what a neighbour that fights costs (docs/benchmarks.md).
pub const PACED_PER_SECOND: f64 = 3.0;
/// A fight is over after this long without a foreign commit: the next one is news again.
const FIGHT_OVER: Duration = Duration::from_secs(10);

/// What the agent's counters say of foreign commits (`/metrics`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ForeignCounts {
    /// Commits by another process that changed what we own (or notifications lost).
    pub commits: u64,
    /// Of them, those heard while repairs were paced.
    pub paced: u64,
}

/// A neighbour changing our rules again and again, from its first commit.
#[derive(Debug)]
struct Fight {
    since: Instant,
    last: Instant,
    commits: u64,
    warned: bool,
}

/// When repairs run: a token bucket ([`BURST`] at once, then [`PACED_PER_SECOND`]), and the
/// fight it tells, for the log. Pure: times are given, so it is tested without waiting.
#[derive(Debug)]
pub struct RepairPacer {
    tokens: f64,
    refilled: Instant,
    fight: Option<Fight>,
}

/// What the pacer says of one foreign commit.
#[derive(Debug, PartialEq, Eq)]
pub enum Heed {
    /// The first of a quiet spell: say it.
    News,
    /// One more of a fight: repairs are paced from now on, said once per fight.
    Paced { commits: u64, over: Duration },
    /// One more, already said.
    Quiet,
}

impl RepairPacer {
    pub fn new(now: Instant) -> Self {
        RepairPacer {
            tokens: BURST,
            refilled: now,
            fight: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * PACED_PER_SECOND).min(BURST);
        self.refilled = now;
    }

    /// A foreign commit heard at `now`.
    pub fn heard(&mut self, now: Instant) -> Heed {
        self.refill(now);
        let fight = match &mut self.fight {
            Some(fight) if now.saturating_duration_since(fight.last) < FIGHT_OVER => fight,
            _ => {
                self.fight = Some(Fight {
                    since: now,
                    last: now,
                    commits: 1,
                    warned: false,
                });
                return Heed::News;
            }
        };
        fight.last = now;
        fight.commits += 1;
        if self.tokens < 1.0 && !fight.warned {
            fight.warned = true;
            return Heed::Paced {
                commits: fight.commits,
                over: now.saturating_duration_since(fight.since),
            };
        }
        Heed::Quiet
    }

    /// Whether repairs are paced at `now` (no repair may run at once).
    pub fn pacing(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens < 1.0
    }

    /// When the next repair may run, at `now` or later.
    pub fn next_repair(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.tokens >= 1.0 {
            return now;
        }
        now + Duration::from_secs_f64((1.0 - self.tokens) / PACED_PER_SECOND)
    }

    /// A repair ran at `now`.
    pub fn spend(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens - 1.0).max(0.0);
    }
}

/// The trigger of the event loop: returns when a pass should look at the rules a neighbour
/// changed. Cancel-safe: what was heard is kept here between calls.
pub struct ForeignTrigger {
    events: Option<AsyncFd<ForeignCommits>>,
    pacer: RepairPacer,
    /// When the repair waiting for its turn runs.
    due: Option<Instant>,
    /// The agent's snapshot, whose counters this keeps.
    shared: super::http::Shared,
}

impl ForeignTrigger {
    /// Subscribes to the commits that change `owned` (None: nothing to hear, said once).
    pub fn new(owned: Option<Owned>, shared: super::http::Shared) -> Self {
        let events = match owned {
            None => {
                info!("iptables-legacy announces no changes: a neighbour's flush of our rules is repaired at the next resync (--resync-interval)");
                None
            }
            Some(owned) => match ForeignCommits::registered(owned) {
                Ok(events) => Some(events),
                Err(err) => {
                    warn!(error = %err, "cannot subscribe to nf_tables changes: a neighbour's flush of our rules is repaired at the next resync only");
                    None
                }
            },
        };
        ForeignTrigger {
            events,
            pacer: RepairPacer::new(Instant::now()),
            due: None,
            shared,
        }
    }

    /// Returns when a repair pass is due: at once after a foreign commit, or at the pacer's
    /// next turn while a neighbour fights.
    pub async fn repair_due(&mut self) {
        loop {
            let due = self.due;
            let wait = async move {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                heard = foreign_commits(&mut self.events) => self.note(&heard),
                () = wait => {
                    self.due = None;
                    self.pacer.spend(Instant::now());
                    return;
                }
            }
        }
    }

    fn note(&mut self, heard: &Heard) {
        let now = Instant::now();
        let paced = self.pacer.pacing(now);
        for _ in 0..heard.foreign.max(u32::from(heard.lost)) {
            match self.pacer.heard(now) {
                Heed::News => say_news(heard.last.as_ref(), heard.lost),
                Heed::Paced { commits, over } => {
                    say_fight(commits, over, heard.last.as_ref());
                }
                Heed::Quiet => {}
            }
        }
        let n = u64::from(heard.foreign.max(u32::from(heard.lost)));
        let mut snapshot = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        snapshot.foreign.commits += n;
        if paced {
            snapshot.foreign.paced += n;
        }
        drop(snapshot);
        if self.due.is_none() {
            self.due = Some(self.pacer.next_repair(now));
        }
    }
}

fn committer_words(by: Option<&Committer>) -> String {
    match by {
        Some(by) if by.pid != 0 => format!("{} (thread id {})", by.name, by.pid),
        _ => "an unnamed process".to_string(),
    }
}

fn say_news(by: Option<&Committer>, lost: bool) {
    if lost {
        info!("nf_tables notifications were lost: checking the rules we own now");
    } else {
        info!(
            by = %committer_words(by),
            "a commit not known to be ours changed the rules we own: checking them now"
        );
    }
}

fn say_fight(commits: u64, over: Duration, by: Option<&Committer>) {
    warn!(
        commits,
        seconds = over.as_secs_f64(),
        by = %committer_words(by),
        "a neighbour keeps changing the rules we own: repairs are paced to {PACED_PER_SECOND} a second while it goes on; find it with `nft monitor` and stop it from touching our rules (ipmasq_foreign_commits_paced_total counts its commits)"
    );
}

/// Returns what the next notifications said once they say a foreign change (never, without a
/// subscription). Commits that change nothing of ours are read and dropped here.
async fn foreign_commits(events: &mut Option<AsyncFd<ForeignCommits>>) -> Heard {
    let Some(events) = events else {
        return std::future::pending().await;
    };
    loop {
        let Ok(mut guard) = events.readable_mut().await else {
            return std::future::pending().await;
        };
        // `drain` reads until the queue is empty: readiness is spent.
        let heard = guard.get_inner_mut().drain();
        guard.clear_ready();
        if heard.worth_a_pass() {
            debug!(?heard, "a foreign commit changed the rules we own");
            return heard;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_a_second_is_always_repaired_at_once() {
        let start = Instant::now();
        let mut pacer = RepairPacer::new(start);
        for second in 0..60 {
            let now = start + Duration::from_secs(second);
            let heed = pacer.heard(now);
            assert_eq!(
                heed,
                if second == 0 { Heed::News } else { Heed::Quiet },
                "second {second}"
            );
            assert_eq!(pacer.next_repair(now), now, "second {second}");
            pacer.spend(now);
        }
    }

    #[test]
    fn a_neighbour_fighting_every_10_ms_gets_the_paced_rate_and_one_warning() {
        let start = Instant::now();
        let mut pacer = RepairPacer::new(start);
        let mut repairs = 0;
        let mut due: Option<Instant> = None;
        let mut warnings = 0;
        // A commit every tick of 10 ms for 1,000 ticks; each repair when it is due, as in the trigger.
        for tick in 0..1_000u64 {
            let now = start + Duration::from_millis(tick * 10);
            if due.is_some_and(|at| at <= now) {
                pacer.spend(now);
                repairs += 1;
                due = None;
            }
            if let Heed::Paced { commits, .. } = pacer.heard(now) {
                warnings += 1;
                assert!(commits > BURST as u64, "{commits}");
            }
            due.get_or_insert_with(|| pacer.next_repair(now));
        }
        assert_eq!(warnings, 1);
        // The burst, then the paced rate for the rest of the 10 s.
        let most = BURST as u64 + 10 * PACED_PER_SECOND as u64;
        assert!((most - 2..=most).contains(&repairs), "{repairs} repairs");
        // Quiet for the fight's end: the next commit is news, and repaired at once.
        let later = start + Duration::from_secs(10) + FIGHT_OVER;
        assert_eq!(pacer.heard(later), Heed::News);
        assert_eq!(pacer.next_repair(later), later);
    }
}
