//! How the API inputs wait after a failed LIST, watch or GET: from about a second, doubling,
//! with jitter, to a cap chosen by the kind of failure, and back to a second only once the
//! input has been healthy for a while (never on kube-runtime's `Init`, which comes before
//! every LIST and is no sign of health).
//!
//! Two caps: an answer that will not change soon (`404`: a CRD that is not served) is asked
//! again at most every [`ANSWERED_CAP`]; anything else (connection refused, a deadline passed,
//! `5xx`, `429`, and `401`/`403`, which an API server also answers while it starts, before its
//! RBAC is loaded) is tried again at most every [`UNANSWERED_CAP`], so the
//! agent hears an API server that is back within that cap while a fleet's retries stay at one
//! per input per cap.

use std::time::Duration;
use tokio::time::Instant;

/// The first wait after a failure.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest wait after an answer that will not change soon (404: a CRD not served).
pub const ANSWERED_CAP: Duration = Duration::from_secs(300);
/// The longest wait after no answer (connection refused, a deadline, 5xx).
pub const UNANSWERED_CAP: Duration = Duration::from_secs(30);
/// How long an input must go without a failure after its wait before the next failure starts
/// from [`FIRST`] again.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// What kind of failure an input met, for its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API answered and will answer the same for a while: 404.
    Answered,
    /// No usable answer: the connection, a deadline, 5xx, 429, 401, 403.
    Unanswered,
}

impl Failure {
    /// The kind of a failure with the HTTP status `code` (None: no answer at all).
    pub fn of_code(code: Option<u16>) -> Failure {
        match code {
            Some(404) => Failure::Answered,
            _ => Failure::Unanswered,
        }
    }

    /// The kind of a kube client error.
    pub fn of_client(err: &kube::Error) -> Failure {
        match err {
            kube::Error::Api(status) => Failure::of_code(Some(status.code)),
            _ => Failure::Unanswered,
        }
    }

    /// The kind of a watcher error.
    pub fn of_watcher(err: &kube::runtime::watcher::Error) -> Failure {
        use kube::runtime::watcher::Error;
        match err {
            Error::InitialListFailed(err)
            | Error::WatchStartFailed(err)
            | Error::WatchFailed(err) => Failure::of_client(err),
            Error::WatchError(status) => Failure::of_code(Some(status.code)),
            _ => Failure::Unanswered,
        }
    }

    fn cap(self) -> Duration {
        match self {
            Failure::Answered => ANSWERED_CAP,
            Failure::Unanswered => UNANSWERED_CAP,
        }
    }
}

/// One input's backoff: the waits grow while failures follow each other, and start again
/// from [`FIRST`] after [`HEALTHY_AFTER`] without one.
#[derive(Debug, Default)]
pub struct ApiBackoff {
    /// How many failures in a row (since the last healthy stretch).
    streak: u32,
    /// When the last wait ends (the earliest the input could be healthy from).
    waited_until: Option<Instant>,
}

impl ApiBackoff {
    /// How long to wait after a `failure` at `now`, with `jitter` in `[0, 1)` (a fleet's
    /// agents spread apart): `min(FIRST · 2^streak, cap) · (1 + jitter/4)`. The jitter comes
    /// after the cap, so agents that failed together stay apart once they reach it, and no
    /// wait is shorter than the cap once there (at most a quarter longer).
    pub fn after(&mut self, failure: Failure, now: Instant, jitter: f64) -> Duration {
        if self
            .waited_until
            .is_some_and(|until| now.saturating_duration_since(until) >= HEALTHY_AFTER)
        {
            self.streak = 0;
        }
        let doubled = FIRST.saturating_mul(1 << self.streak.min(16));
        let wait = doubled
            .min(failure.cap())
            .mul_f64(1.0 + jitter.clamp(0.0, 1.0) / 4.0);
        self.streak = self.streak.saturating_add(1);
        self.waited_until = Some(now + wait);
        wait
    }

    /// Failures in a row so far.
    pub fn streak(&self) -> u32 {
        self.streak
    }

    /// Waits as [`ApiBackoff::after`] says, with a random jitter.
    pub async fn wait(&mut self, failure: Failure) {
        let wait = self.after(failure, Instant::now(), jitter());
        tokio::time::sleep(wait).await;
    }
}

/// A random number in `[0, 1)` from the kernel (no seeded generator shared by a fleet).
pub fn jitter() -> f64 {
    let mut bytes = [0u8; 4];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).is_err() {
        return 0.5;
    }
    f64::from(u32::from_ne_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attempts of an input that fails every time, in the first `window` from `start`.
    fn attempts(failure: Failure, window: Duration, jitter: f64) -> Vec<Duration> {
        let start = Instant::now();
        let mut backoff = ApiBackoff::default();
        let mut at = start;
        let mut attempts = Vec::new();
        while at - start < window {
            attempts.push(at - start);
            at += backoff.after(failure, at, jitter);
        }
        attempts
    }

    #[tokio::test(start_paused = true)]
    async fn a_crd_not_served_is_asked_at_most_20_times_in_the_first_hour_then_12_an_hour() {
        for jitter in [0.0, 0.5, 0.999] {
            let first_hour = attempts(Failure::Answered, Duration::from_secs(3600), jitter);
            assert!(first_hour.len() <= 20, "{jitter}: {first_hour:?}");
            let two_hours = attempts(Failure::Answered, Duration::from_secs(7200), jitter);
            assert!(
                two_hours.len() - first_hour.len() <= 12,
                "{jitter}: {two_hours:?}"
            );
        }
        let waits: Vec<u64> = attempts(Failure::Answered, Duration::from_secs(900), 0.0)
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_api_that_does_not_answer_is_tried_at_most_every_30_s_after_the_first_minute() {
        for jitter in [0.0, 0.999] {
            let tries = attempts(Failure::Unanswered, Duration::from_secs(600), jitter);
            let later: Vec<_> = tries.iter().filter(|t| t.as_secs() >= 60).collect();
            for pair in later.windows(2) {
                assert!(
                    *pair[1] - *pair[0] >= Duration::from_secs(30) * 9 / 10,
                    "{tries:?}"
                );
            }
            assert!(tries
                .windows(2)
                .all(|w| w[1] - w[0] <= UNANSWERED_CAP * 5 / 4));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_backoff_starts_again_only_after_a_healthy_stretch() {
        let mut backoff = ApiBackoff::default();
        let mut now = Instant::now();
        for _ in 0..5 {
            now += backoff.after(Failure::Unanswered, now, 0.0);
        }
        assert_eq!(backoff.streak(), 5);
        // Another failure right after the wait (an Init, then the LIST fails): longer.
        assert_eq!(
            backoff.after(Failure::Unanswered, now, 0.0),
            Duration::from_secs(30)
        );
        now += Duration::from_secs(30) + HEALTHY_AFTER;
        assert_eq!(
            backoff.after(Failure::Unanswered, now, 0.0),
            FIRST,
            "a minute without a failure after the wait: from the start"
        );
    }
}
