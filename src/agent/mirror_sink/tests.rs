//! Unit tests of the mirror sink: which condition each kind of pass makes, and that only a
//! change of state reaches the writer.

use super::*;
use crate::backend::BackendError;

const DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn now() -> Timestamp {
    "2026-11-26T05:00:00Z".parse().expect("a test time")
}

fn facts<'a>(pass: &'a Pass, rejection: Option<&'a Rejection>) -> PassFacts<'a> {
    PassFacts {
        pass,
        ever_synced: true,
        rejection,
        last_known_good: false,
        stale_view: None,
        digest: Some(DIGEST),
        backend: "nftables",
    }
}

#[test]
fn each_kind_of_pass_makes_its_condition() {
    let synced = Pass::Synced(Vec::new());
    let Condition { status, diagnostic } = outcome_of(&facts(&synced, None), now());
    assert_eq!(status.outcome, Outcome::InSync);
    assert_eq!(status.digest.as_deref(), Some(DIGEST));
    assert_eq!(status.backend.as_deref(), Some("nftables"));
    assert_eq!(status.last_sync, now());
    assert_eq!(diagnostic, None);

    let from_disk = PassFacts {
        last_known_good: true,
        ..facts(&synced, None)
    };
    assert_eq!(
        outcome_of(&from_disk, now()).status.outcome,
        Outcome::LastKnownGood
    );

    let rejection = Rejection {
        digest: Some("ab".repeat(32)),
        diagnostic: "config:3:5: error[cidr-not-aligned]: CIDR \"10.1.2.3/16\" is not aligned"
            .into(),
        source: "configmap kube-system/ip-masq-agent key config (resourceVersion 7)".into(),
        located: Vec::new(),
    };
    let Condition { status, diagnostic } = outcome_of(&facts(&synced, Some(&rejection)), now());
    assert_eq!(status.outcome, Outcome::Rejected);
    assert_eq!(
        status.digest.as_deref(),
        Some(DIGEST),
        "the digest in force, not the refused one"
    );
    assert_eq!(
        status.words.as_deref(),
        Some("the config sha256:abababababab was rejected, the last good one stays in force: config:3:5: error[cidr-not-aligned]: CIDR \"10.1.2.3/16\" is not aligned")
    );
    assert_eq!(
        diagnostic,
        Some(format!(
            "configmap kube-system/ip-masq-agent key config (resourceVersion 7): {}",
            rejection.diagnostic
        ))
    );

    let nothing = Pass::NoValidConfig;
    let none_yet = PassFacts {
        digest: None,
        ever_synced: false,
        ..facts(&nothing, None)
    };
    assert_eq!(
        outcome_of(&none_yet, now()).status.outcome,
        Outcome::NotReady
    );
    let refused_first = PassFacts {
        rejection: Some(&rejection),
        ..none_yet
    };
    let Condition { status, .. } = outcome_of(&refused_first, now());
    assert_eq!(status.outcome, Outcome::Rejected);
    assert!(status
        .words
        .is_some_and(|w| w.contains("no rules are installed")));

    let failed = Pass::Failed(BackendError::Run("nft exited 1".into()));
    let Condition { status, .. } = outcome_of(&facts(&failed, Some(&rejection)), now());
    assert_eq!(
        status.outcome,
        Outcome::Drifted,
        "a failed repair outranks a refused config"
    );
    assert_eq!(
        status.words.as_deref(),
        Some("the last sync failed, retrying: nft exited 1")
    );
    let first_failed = PassFacts {
        ever_synced: false,
        ..facts(&failed, None)
    };
    assert_eq!(
        outcome_of(&first_failed, now()).status.outcome,
        Outcome::NotReady
    );
}

#[test]
fn only_a_change_of_state_reaches_the_writer() {
    let api = ApiSettings {
        configmap: crate::cluster::configmap::ConfigMapRef {
            namespace: "kube-system".into(),
            name: "ip-masq-agent".into(),
        },
        credentials: Credentials::InCluster,
        node_name: Some("node-a".into()),
        last_known_good: None,
        last_known_good_dir: "/nonexistent".into(),
        last_known_good_in_dir: false,
        status: Default::default(),
    };
    let mirror = Mirror::new(Some(&api), crate::backend::BackendId::Nftables).expect("a mirror");
    let mut receiver = mirror.reports.subscribe();
    let sink = mirror.sink(None);
    let report = |outcome: Outcome, minute: u32| {
        let synced = Pass::Synced(Vec::new());
        let mut facts = facts(&synced, None);
        let failed = Pass::Failed(BackendError::Run("x".into()));
        if outcome == Outcome::Drifted {
            facts.pass = &failed;
        }
        let time = format!("2026-11-26T05:{minute:02}:00Z")
            .parse()
            .expect("time");
        outcome_of(&facts, time)
    };
    let send = |state| hand_over(&sink.reports, state, None);
    assert!(send(report(Outcome::InSync, 0)));
    assert!(receiver.has_changed().unwrap_or(false));
    receiver.borrow_and_update();
    assert!(!send(report(Outcome::InSync, 1)), "a steady pass");
    assert!(!receiver.has_changed().unwrap_or(true));
    let kept = receiver.borrow().clone().expect("a report");
    assert_eq!(
        kept.status.last_sync,
        "2026-11-26T05:00:00Z".parse::<Timestamp>().expect("time"),
        "lastSync: the pass that reached the state"
    );
    assert!(send(report(Outcome::Drifted, 2)));
    assert_eq!(receiver.borrow().as_ref().map(|r| r.seq), Some(2));
    assert!(Mirror::new(None, crate::backend::BackendId::Nftables).is_none());
    let nameless = ApiSettings {
        node_name: None,
        ..api
    };
    assert!(Mirror::new(Some(&nameless), crate::backend::BackendId::Nftables).is_none());
}

#[test]
fn an_event_refused_for_good_is_not_retried_but_an_outage_is() {
    let refused = |code: u16| mirror::MirrorError::Event {
        node: "node-a".into(),
        source: kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        })),
    };
    for code in [403, 404, 422] {
        assert!(refused_for_good(&refused(code)), "{code}");
    }
    for code in [429, 500, 503] {
        assert!(!refused_for_good(&refused(code)), "{code}");
    }
    let no_answer = mirror::MirrorError::NoAnswer {
        what: "creating the Event".into(),
        after: std::time::Duration::from_secs(30),
    };
    assert!(!refused_for_good(&no_answer));
}

fn report(seq: u64, urgent: bool) -> Report {
    Report {
        status: AgentStatus {
            outcome: if seq.is_multiple_of(2) {
                Outcome::InSync
            } else {
                Outcome::Rejected
            },
            digest: None,
            backend: None,
            last_sync: now(),
            words: Some(format!("state {seq}")),
        },
        diagnostic: None,
        seq,
        node_uid: None,
        urgent,
    }
}

/// The rounds a paced writer makes while `edits` states arrive every `every`, then for a
/// while after: the times (from the start) at which it wrote.
async fn rounds_under(pacing: Pacing, edits: u64, every: Duration) -> Vec<Duration> {
    let start = Instant::now();
    let (tx, mut rx) = watch::channel(None);
    let mut pacer = Pacer::new(pacing, WallAnchor::now());
    // The first state, written at once (the first write at start).
    tx.send_replace(Some(report(1, false)));
    let editor = tokio::spawn(async move {
        for seq in 2..edits + 2 {
            tokio::time::sleep(every).await;
            tx.send_replace(Some(report(seq, false)));
        }
        // Held open a while, so the writer can write the last state.
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
    // The first round, at start (written at once).
    let mut rounds = vec![start.elapsed()];
    let mut seen = rx.borrow_and_update().as_ref().map(|r| r.seq);
    pacer.attempted(Instant::now(), rx.borrow().as_ref());
    while pacer.wait(&mut rx, None).await.is_ok() {
        let latest = rx.borrow_and_update().clone();
        rounds.push(start.elapsed());
        seen = latest.as_ref().map(|r| r.seq);
        pacer.attempted(Instant::now(), latest.as_ref());
    }
    editor.await.expect("the editor");
    assert_eq!(
        seen,
        Some(edits + 1),
        "the latest state is written in the end"
    );
    rounds
}

#[tokio::test(start_paused = true)]
async fn an_edit_storm_makes_one_round_per_interval_with_the_latest_state() {
    // 20 edits/s for 10 s, every node writing at once (no spread).
    let pacing = Pacing {
        interval: WRITE_INTERVAL,
        window: Duration::ZERO,
        offset: Duration::ZERO,
    };
    let rounds = rounds_under(pacing, 200, Duration::from_millis(50)).await;
    // At most ceil(10 s / 5 s) rounds, plus the first and the last state.
    assert!(rounds.len() <= 4, "{} rounds: {rounds:?}", rounds.len());
    for pair in rounds.windows(2) {
        assert!(pair[1] - pair[0] >= WRITE_INTERVAL, "{rounds:?}");
    }
}

/// A pacer whose node has its slot 17 s into cycles of 30 s, with the wall clock at a cycle's
/// start now, and that anchor.
fn pacer_at_a_cycle_start() -> (Pacer, WallAnchor) {
    let pacing = Pacing {
        interval: WRITE_INTERVAL,
        window: Duration::from_secs(30),
        offset: Duration::from_secs(17),
    };
    let anchor = WallAnchor {
        at: Instant::now(),
        wall_ms: 1_800_000_000_000 / 30_000 * 30_000,
    };
    (Pacer::new(pacing, anchor), anchor)
}

#[tokio::test(start_paused = true)]
async fn a_change_waits_the_nodes_slot_in_the_spread_but_a_stop_does_not() {
    let (tx, mut rx) = watch::channel(None);
    let (mut pacer, anchor) = pacer_at_a_cycle_start();
    // The Node read at start, with nothing to write yet (the API not listed).
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    // The first state, a second later: at once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    tx.send_replace(Some(report(1, false)));
    pacer.wait(&mut rx, None).await.expect("open");
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the first write at start waits nothing"
    );
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    // A change 61 s in (1 s into a cycle) waits for its slot, 17 s into the cycle: 16 s.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let changed = Instant::now();
    tx.send_replace(Some(report(2, false)));
    pacer.wait(&mut rx, None).await.expect("open");
    assert_eq!(changed.elapsed(), Duration::from_secs(16));
    // Changes every second after it are written once a cycle, each at the slot.
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    let mut written = vec![anchor.at.elapsed()];
    for seq in 3..6 {
        let editor = tx.clone();
        let waiting = tokio::spawn(async move {
            for n in 0..40 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                editor.send_replace(Some(report(seq * 100 + n, false)));
            }
        });
        pacer.wait(&mut rx, None).await.expect("open");
        written.push(anchor.at.elapsed());
        pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
        waiting.abort();
    }
    assert!(
        written.iter().all(|at| at.as_secs() % 30 == 17),
        "each at the slot: {written:?}"
    );
    assert!(
        written
            .windows(2)
            .all(|pair| pair[1] - pair[0] == Duration::from_secs(30)),
        "once a cycle: {written:?}"
    );
    // A stop's NotReady, right after: at once, interval or not.
    let stopping = Instant::now();
    tx.send_replace(Some(report(1000, true)));
    pacer.wait(&mut rx, None).await.expect("open");
    assert_eq!(stopping.elapsed(), Duration::ZERO);
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    // A failed round is retried at its time, but not before the interval.
    let failed = Instant::now();
    pacer
        .wait(&mut rx, Some(failed + Duration::from_secs(1)))
        .await
        .expect("open");
    assert_eq!(failed.elapsed(), WRITE_INTERVAL);
}

/// A failed write is retried in the node's slot, as a change is (a fleet whose writes the API
/// refused all at once retries N / window a second, not all together), never before its
/// backoff; a stop's NotReady is retried when its backoff and the interval end.
#[tokio::test(start_paused = true)]
async fn a_failed_write_is_retried_in_the_nodes_slot_but_a_stop_at_its_backoff() {
    let (tx, mut rx) = watch::channel(None);
    let (mut pacer, anchor) = pacer_at_a_cycle_start();
    // The first write at start failed, with a backoff of 1 s: retried at the slot, 17 s in.
    tx.send_replace(Some(report(1, false)));
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    let backoff_end = Instant::now() + Duration::from_secs(1);
    assert_eq!(
        pacer.retry_due(backoff_end, Some(&report(1, false))),
        anchor.at + Duration::from_secs(17)
    );
    pacer.wait(&mut rx, Some(backoff_end)).await.expect("open");
    assert_eq!(anchor.at.elapsed(), Duration::from_secs(17));
    // It failed again, with a backoff of 40 s (57 s in): the next slot after it, 77 s in.
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    let backoff_end = Instant::now() + Duration::from_secs(40);
    pacer.wait(&mut rx, Some(backoff_end)).await.expect("open");
    assert_eq!(anchor.at.elapsed(), Duration::from_secs(77));
    // A stop's NotReady failed with a backoff of 1 s: retried when the interval ends, 5 s on.
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    tx.send_replace(Some(report(2, true)));
    pacer.wait(&mut rx, None).await.expect("open");
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    let failed = Instant::now();
    pacer
        .wait(&mut rx, Some(failed + Duration::from_secs(1)))
        .await
        .expect("open");
    assert_eq!(failed.elapsed(), WRITE_INTERVAL);
}

#[test]
fn the_spread_is_a_stable_even_hash_of_the_node_name() {
    let window = Duration::from_secs(30);
    assert_eq!(
        spread_offset("node-a", window),
        spread_offset("node-a", window)
    );
    assert_eq!(spread_offset("node-a", Duration::ZERO), Duration::ZERO);
    // 5,000 nodes over 30 s: every 3-second tenth of the window holds 500 of them, give or take
    // (the writes of a fleet-wide change arrive at about 5,000 / 30 s = 167 a second).
    let mut tenths = [0usize; 10];
    for n in 0..5000 {
        let offset = spread_offset(&format!("node-{n}"), window);
        assert!(offset < window);
        tenths[(offset.as_millis() / 3000) as usize] += 1;
    }
    for count in tenths {
        assert!((400..=600).contains(&count), "{tenths:?}");
    }
}

#[test]
fn node_status_false_makes_no_mirror() {
    let api = ApiSettings {
        configmap: crate::cluster::configmap::ConfigMapRef {
            namespace: "kube-system".into(),
            name: "ip-masq-agent".into(),
        },
        credentials: Credentials::InCluster,
        node_name: Some("node-a".into()),
        last_known_good: None,
        last_known_good_dir: "/nonexistent".into(),
        last_known_good_in_dir: false,
        status: crate::agent::reconcile::StatusWrites {
            enabled: false,
            spread: Duration::ZERO,
            node_taint: false,
        },
    };
    assert!(Mirror::new(Some(&api), crate::backend::BackendId::Nftables).is_none());
}

/// A rejected config replaced by a valid one before the writer's round is still handed to
/// the round (its Event is created; the condition says the latest state).
#[tokio::test(start_paused = true)]
async fn a_rejection_replaced_before_the_round_is_still_said() {
    let pacing = Pacing {
        interval: WRITE_INTERVAL,
        window: Duration::ZERO,
        offset: Duration::ZERO,
    };
    let (tx, mut rx) = watch::channel(None);
    let mut pacer = Pacer::new(pacing, WallAnchor::now());
    tx.send_replace(Some(report(2, false)));
    pacer.attempted(Instant::now(), rx.borrow_and_update().as_ref());
    let editor = tokio::spawn(async move {
        let mut rejected = report(3, false);
        rejected.diagnostic = Some("config: error[cidr-invalid]".into());
        tokio::time::sleep(Duration::from_secs(1)).await;
        tx.send_replace(Some(rejected));
        tokio::time::sleep(Duration::from_millis(50)).await;
        tx.send_replace(Some(report(4, false)));
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    pacer.wait(&mut rx, None).await.expect("open");
    assert_eq!(rx.borrow().as_ref().map(|r| r.seq), Some(4), "the latest");
    let said = pacer.take_rejected_meanwhile().expect("the rejection seen");
    assert_eq!(said.seq, 3);
    assert!(pacer.take_rejected_meanwhile().is_none(), "taken once");
    pacer.keep_rejected_meanwhile(Some(said));
    assert!(
        pacer.take_rejected_meanwhile().is_some(),
        "given back after a failure"
    );
    editor.abort();
}
