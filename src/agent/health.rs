//! What `/healthz`, `/readyz` and `/metrics` report, computed from a snapshot of the agent's
//! status taken after every pass. Pure functions of (snapshot, now), so every state is
//! unit-tested; the HTTP plumbing lives in `http.rs`.

use super::metrics;
use super::reconcile::Status;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime};

/// Liveness tolerates this many missed resyncs before failing.
const MISSED_RESYNCS: u32 = 3;
/// ...and never less than this.
const MIN_STALL: Duration = Duration::from_secs(60);

/// What the endpoints see of the agent: published by the loop after every pass.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub status: Status,
    /// The resync interval in force.
    pub interval: Duration,
    pub started: Instant,
    pub backend: crate::backend::BackendId,
    /// When the pass under way started (None between passes).
    pub running_since: Option<Instant>,
    /// The output addresses the config in force names: only an address change inside one of
    /// them is worth a pass.
    pub egress_targets: Vec<crate::config::egress::EgressTarget>,
    /// The SNAT log's counters and port pressure (`--snat-log`, `--snat-port-pressure`).
    pub snat: Option<std::sync::Arc<crate::snat::SnatStats>>,
    /// API mode: when the API last answered for each input (`ipmasq_api_view_age_seconds`).
    pub api_view: Option<crate::cluster::age::ApiView>,
    /// API mode: the rollout in waves the API holds, as the last pass saw it.
    pub rollout: Option<super::reconcile::RolloutSeen>,
    /// A neighbour's commits to the rules we own, as the foreign-change trigger heard them.
    pub foreign: super::foreign_changes::ForeignCounts,
    /// The kernel's conntrack figures, read for a scrape (none between scrapes, or when the
    /// kernel did not answer).
    pub conntrack: Option<crate::conntrack::health::ConntrackFigures>,
    /// The pod share in force, whose refusals a scrape reads (None: the config sets none).
    pub pod_share: Option<ShareInForce>,
    /// The pod share's refusals, read for a scrape (empty between scrapes, or unread).
    pub pod_share_refused: Vec<FamilyRefusals>,
}

/// What a scrape needs to read the pod share's counters: the names its rules are under and
/// the families the agent manages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareInForce {
    pub names: crate::plan::Names,
    pub families: Vec<crate::plan::Family>,
}

/// One family's pod share refusals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyRefusals {
    pub family: crate::plan::Family,
    pub refusals: Vec<crate::plan::live::ShareRefusals>,
}

impl Snapshot {
    pub fn new(backend: crate::backend::BackendId) -> Self {
        Snapshot {
            status: Status::default(),
            interval: Duration::from_secs(60),
            started: Instant::now(),
            backend,
            running_since: None,
            egress_targets: Vec::new(),
            snat: None,
            api_view: None,
            rollout: None,
            foreign: Default::default(),
            conntrack: None,
            pod_share: None,
            pod_share_refused: Vec::new(),
        }
    }
}

/// How long the loop may go without finishing a pass before it counts as stuck.
pub fn stall_limit(interval: Duration) -> Duration {
    (interval * MISSED_RESYNCS).max(MIN_STALL)
}

/// `/healthz`: Ok while the reconcile loop is alive. An invalid config does not fail it (a
/// restart would not fix a config).
pub fn liveness(snapshot: &Snapshot, now: Instant) -> Result<String, String> {
    let limit = stall_limit(snapshot.interval);
    if let Some(running) = snapshot.running_since {
        let age = now.saturating_duration_since(running);
        if age > limit {
            return Err(format!(
                "reconcile pass overran: running for {}s (limit {}s)",
                age.as_secs(),
                limit.as_secs()
            ));
        }
    }
    let since = snapshot.status.last_pass.unwrap_or(snapshot.started);
    let age = now.saturating_duration_since(since);
    if age > limit {
        Err(format!(
            "reconcile loop stuck: no pass finished for {}s (limit {}s)",
            age.as_secs(),
            limit.as_secs()
        ))
    } else {
        Ok("ok".to_string())
    }
}

/// `/readyz`: Ok once a valid config has been applied and the last sync succeeded. A family
/// masquerading because the node lacks its output address is ready (its traffic flows, as
/// upstream's would) and says why, one line each, after the `ok`. A config rejected while
/// the last good one stays in force is ready too, and said after the `ok`: readiness is
/// "rules of a valid config are in force", and they are; making every pod of a DaemonSet
/// unready over one bad ConfigMap would stall unrelated rollouts and page on every node,
/// while `ipmasq_config_current` and the IpmasqConfigRejected alert report it (the full
/// reasoning, and every answer, is the text of [`super::endpoints::ENDPOINTS`]).
pub fn readiness(snapshot: &Snapshot) -> Result<String, String> {
    if snapshot.status.last_pass.is_none() {
        return Err("starting: no sync has run yet".to_string());
    }
    match &snapshot.status.not_ready {
        Some(reason) => Err(reason.clone()),
        None => {
            let mut text = "ok".to_string();
            if let Some(reason) = &snapshot.status.config_rejected {
                text.push_str("\nconfig rejected, the last good config stays in force: ");
                text.push_str(reason);
            }
            for reason in snapshot.status.egress_fallback.values().flatten() {
                text.push_str("\noutput address fallback: ");
                text.push_str(reason);
            }
            Ok(text)
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InputLabel {
    input: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RulesLabel {
    family: &'static str,
    backend: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabel {
    translated_address: String,
    proto: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FamilyLabel {
    family: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatLabel {
    stat: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: &'static str,
    backend: &'static str,
}

fn seconds_gauge(value: f64) -> Gauge<f64, AtomicU64> {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(value);
    g
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// The rollout's state (one series per state, 1 for the one it is in at `wall`) and whether
/// this node runs its next config.
fn register_rollout(
    registry: &mut Registry,
    seen: &super::reconcile::RolloutSeen,
    wall: SystemTime,
) {
    use crate::config::rollout::State;
    let seconds = wall
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let now = k8s_openapi::jiff::Timestamp::from_second(i64::try_from(seconds).unwrap_or(0))
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let in_force = seen.rollout.state(now);
    let states = Family::<StateLabel, Gauge<i64>>::default();
    for (state, word) in [
        (State::Running, "running"),
        (State::Halted, "halted"),
        (State::Aborted, "aborted"),
        (State::Done, "done"),
    ] {
        states
            .get_or_create(&StateLabel { state: word })
            .set(i64::from(state == in_force));
    }
    metrics::ROLLOUT_STATE.register(registry, states);
    let on_next = Gauge::<i64>::default();
    on_next.set(i64::from(seen.on_next));
    metrics::ROLLOUT_ON_NEXT.register(registry, on_next);
}

/// `/metrics`: the Prometheus (OpenMetrics) text exposition of the snapshot.
pub fn metrics_text(snapshot: &Snapshot, now: Instant, wall: SystemTime) -> String {
    let status = &snapshot.status;
    let mut registry = Registry::with_prefix(metrics::PREFIX);
    register_syncs(&mut registry, status);
    register_config(&mut registry, status);
    register_last_success(&mut registry, status, now, wall);
    register_rules(&mut registry, snapshot);
    register_failures(&mut registry, status);
    register_conntrack(&mut registry, status);
    if let Some(statistics) = &snapshot.conntrack {
        register_conntrack_health(&mut registry, statistics);
    }
    if !snapshot.pod_share_refused.is_empty() {
        register_pod_share(&mut registry, &snapshot.pod_share_refused);
    }
    register_foreign(&mut registry, &snapshot.foreign);
    if let Some(snat) = &snapshot.snat {
        register_snat(&mut registry, snat);
    }
    if let Some(view) = &snapshot.api_view {
        let ages = Family::<InputLabel, Gauge<f64, AtomicU64>>::default();
        for (input, age) in view.ages(tokio::time::Instant::from_std(now)) {
            ages.get_or_create(&InputLabel {
                input: input.label(),
            })
            .set(age.as_secs_f64());
        }
        metrics::API_VIEW_AGE.register(&mut registry, ages);
    }
    if let Some(seen) = &snapshot.rollout {
        register_rollout(&mut registry, seen, wall);
    }
    metrics::RESYNC_INTERVAL.register(
        &mut registry,
        seconds_gauge(snapshot.interval.as_secs_f64()),
    );
    let up = Gauge::<i64>::default();
    up.set(i64::from(readiness(snapshot).is_ok()));
    metrics::READY.register(&mut registry, up);

    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
        text = "# EOF\n".to_string();
    }
    text
}

/// The same metrics in the Prometheus text format (0.0.4), for clients that do not ask for
/// OpenMetrics: no `# EOF` and no `# UNIT`, and a counter's HELP and TYPE name its `_total`
/// sample, as Prometheus' text parser and `promtool check metrics` expect.
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Passes by result, their duration, and drift repaired by kind.
fn register_syncs(registry: &mut Registry, status: &Status) {
    let syncs = Family::<ResultLabel, Counter>::default();
    syncs
        .get_or_create(&ResultLabel { result: "success" })
        .inc_by(status.syncs_ok);
    syncs
        .get_or_create(&ResultLabel { result: "failure" })
        .inc_by(status.syncs_failed);
    metrics::SYNCS.register(registry, syncs);

    metrics::SYNC_DURATION.register(registry, status.sync_duration.0.clone());

    let repairs = Family::<KindLabel, Counter>::default();
    for (kind, n) in &status.drift_repairs {
        repairs.get_or_create(&KindLabel { kind }).inc_by(*n);
    }
    metrics::DRIFT_REPAIRS.register(registry, repairs);

    let applied = Counter::<u64>::default();
    applied.inc_by(status.config_changes_applied);
    metrics::CONFIG_CHANGES_APPLIED.register(registry, applied);
}

/// A neighbour's commits to the rules we own, and those heard while repairs were paced.
fn register_foreign(registry: &mut Registry, counts: &super::foreign_changes::ForeignCounts) {
    let commits = Counter::<u64>::default();
    commits.inc_by(counts.commits);
    metrics::FOREIGN_COMMITS.register(registry, commits);
    let paced = Counter::<u64>::default();
    paced.inc_by(counts.paced);
    metrics::FOREIGN_COMMITS_PACED.register(registry, paced);
}

/// Conntrack entries deleted so existing flows follow a change, and resets that failed.
fn register_conntrack(registry: &mut Registry, status: &Status) {
    let reset = Counter::<u64>::default();
    reset.inc_by(status.conntrack_entries_reset);
    metrics::CONNTRACK_ENTRIES_RESET.register(registry, reset);
    let failed = Counter::<u64>::default();
    failed.inc_by(status.conntrack_resets_failed);
    metrics::CONNTRACK_RESETS_FAILED.register(registry, failed);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShareLabel {
    family: &'static str,
    limit: &'static str,
}

/// The pod share's refusals, per family and limit.
fn register_pod_share(registry: &mut Registry, refused: &[FamilyRefusals]) {
    let counters = Family::<ShareLabel, Counter>::default();
    for family in refused {
        for r in &family.refusals {
            counters
                .get_or_create(&ShareLabel {
                    family: family.family.as_str(),
                    limit: r.limit.as_str(),
                })
                .inc_by(r.refused);
        }
    }
    metrics::POD_EGRESS_LIMITED.register(registry, counters);
}

/// The kernel's conntrack table: its fill and its per-CPU counters summed.
fn register_conntrack_health(
    registry: &mut Registry,
    statistics: &crate::conntrack::health::ConntrackFigures,
) {
    use crate::conntrack::health::StatCounter;
    let entries = Gauge::<i64>::default();
    entries.set(statistics.entries.into());
    metrics::CONNTRACK_TABLE_ENTRIES.register(registry, entries);
    if let Some(max) = statistics.max_entries {
        let limit = Gauge::<i64>::default();
        limit.set(max.into());
        metrics::CONNTRACK_TABLE_LIMIT.register(registry, limit);
    }
    let counters = Family::<StatLabel, Counter>::default();
    for counter in StatCounter::ALL {
        counters
            .get_or_create(&StatLabel {
                stat: counter.name(),
            })
            .inc_by(statistics.total(counter));
    }
    metrics::CONNTRACK_STAT.register(registry, counters);
}

/// Stats of an SNAT log holding one flow: the metrics of `--snat-log` all rendered (the
/// tests of the list and of the alerts read them).
#[cfg(test)]
pub(crate) fn sample_snat_stats() -> std::sync::Arc<crate::snat::SnatStats> {
    use crate::netlink::conntrack::{Event, EventKind, Flow};
    let stats = crate::snat::SnatStats::default();
    let destination: std::net::IpAddr = [198, 51, 100, 9].into();
    stats.pressure().apply(&Event {
        kind: EventKind::New,
        counters: None,
        flow: Flow {
            family: crate::plan::Family::V4,
            protocol: 6,
            source: [192, 168, 1, 5].into(),
            destination,
            source_port: Some(40002),
            destination_port: Some(443),
            reply_source: destination,
            reply_destination: [203, 0, 113, 1].into(),
            reply_destination_port: Some(40002),
            icmp_id: None,
            reply_icmp_id: None,
            id: 1,
        },
    });
    std::sync::Arc::new(stats)
}

fn counter_of(value: &std::sync::atomic::AtomicU64) -> Counter {
    let counter = Counter::<u64>::default();
    counter.inc_by(value.load(std::sync::atomic::Ordering::Relaxed));
    counter
}

/// The SNAT log's lines, drops and lost events, and the port pressure of each translated
/// address and protocol.
fn register_snat(registry: &mut Registry, snat: &crate::snat::SnatStats) {
    metrics::SNAT_LOG_LINES.register(registry, counter_of(&snat.written));
    metrics::SNAT_LOG_DROPPED.register(registry, counter_of(&snat.dropped));
    metrics::SNAT_LOG_WRITE_ERRORS.register(registry, counter_of(&snat.write_errors));
    metrics::SNAT_LOG_ROTATIONS.register(registry, counter_of(&snat.rotations));
    metrics::SNAT_EVENTS_READ.register(registry, counter_of(&snat.events));
    metrics::SNAT_EVENTS_LOST.register(registry, counter_of(&snat.overflows));
    let pressure = snat.pressure();
    let in_use = Family::<PoolLabel, Gauge>::default();
    let share = Family::<PoolLabel, Gauge<f64, AtomicU64>>::default();
    for pool in pressure.pools(&snat.to_ports) {
        let label = PoolLabel {
            translated_address: pool.translated.to_string(),
            proto: crate::snat::line::protocol_name(pool.protocol),
        };
        in_use
            .get_or_create(&label)
            .set(i64::try_from(pool.ports_in_use).unwrap_or(i64::MAX));
        share.get_or_create(&label).set(pool.busiest_share);
    }
    metrics::SNAT_PORTS_IN_USE.register(registry, in_use);
    metrics::SNAT_BUSIEST_DESTINATION_PORT_SHARE.register(registry, share);
    let tracked = Gauge::<i64>::default();
    tracked.set(i64::try_from(pressure.tracked()).unwrap_or(i64::MAX));
    metrics::SNAT_TRACKED_FLOWS.register(registry, tracked);
    let untracked = Counter::<u64>::default();
    untracked.inc_by(pressure.untracked);
    metrics::SNAT_UNTRACKED_FLOWS.register(registry, untracked);
}

/// Config changes by result, and whether the file on disk is in force.
fn register_config(registry: &mut Registry, status: &Status) {
    let reloads = Family::<ResultLabel, Counter>::default();
    reloads
        .get_or_create(&ResultLabel { result: "accepted" })
        .inc_by(status.configs_accepted);
    reloads
        .get_or_create(&ResultLabel { result: "rejected" })
        .inc_by(status.configs_rejected);
    metrics::CONFIG_RELOADS.register(registry, reloads);

    let current = Gauge::<i64>::default();
    current.set(i64::from(status.config_current));
    metrics::CONFIG_CURRENT.register(registry, current);
}

/// The age and time of the last successful sync, once there was one.
fn register_last_success(registry: &mut Registry, status: &Status, now: Instant, wall: SystemTime) {
    if let Some(last) = status.last_success {
        let age = now.saturating_duration_since(last).as_secs_f64();
        metrics::LAST_SUCCESSFUL_SYNC_AGE.register(registry, seconds_gauge(age));
        let epoch = wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
            - age;
        metrics::LAST_SUCCESSFUL_SYNC_TIME.register(registry, seconds_gauge(epoch));
    }
}

/// Rules by family and backend, the list's size, and the build.
fn register_rules(registry: &mut Registry, snapshot: &Snapshot) {
    let status = &snapshot.status;
    let rules = Family::<RulesLabel, Gauge>::default();
    for (family, n) in &status.rules {
        rules
            .get_or_create(&RulesLabel {
                family: family.as_str(),
                backend: snapshot.backend.as_str(),
            })
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    metrics::RULES.register(registry, rules);

    let cidrs = Gauge::<i64>::default();
    cidrs.set(i64::try_from(status.non_masquerade_cidrs).unwrap_or(i64::MAX));
    metrics::NON_MASQUERADE_CIDRS.register(registry, cidrs);

    let fallback = Family::<FamilyLabel, Gauge>::default();
    for (family, reason) in &status.egress_fallback {
        fallback
            .get_or_create(&FamilyLabel {
                family: family.as_str(),
            })
            .set(i64::from(reason.is_some()));
    }
    metrics::OUTPUT_ADDRESS_FALLBACK.register(registry, fallback);

    let info = Family::<BuildLabel, Gauge>::default();
    info.get_or_create(&BuildLabel {
        version: env!("CARGO_PKG_VERSION"),
        backend: snapshot.backend.as_str(),
    })
    .set(1);
    metrics::BUILD_INFO.register(registry, info);
}

/// Failures in a row and the back-off before the next try.
fn register_failures(registry: &mut Registry, status: &Status) {
    let failures = Gauge::<i64>::default();
    failures.set(i64::from(status.consecutive_failures));
    metrics::CONSECUTIVE_SYNC_FAILURES.register(registry, failures);
    let retry = if status.consecutive_failures > 0 {
        status.next_pass_in.as_secs_f64()
    } else {
        0.0
    };
    metrics::SYNC_RETRY_BACKOFF.register(registry, seconds_gauge(retry));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        Snapshot::new(crate::backend::BackendId::IptablesNft)
    }

    #[test]
    fn liveness_allows_three_intervals_or_a_minute() {
        let mut s = snapshot();
        s.interval = Duration::from_secs(10);
        let start = s.started;
        assert!(liveness(&s, start + Duration::from_secs(59)).is_ok());
        assert!(liveness(&s, start + Duration::from_secs(61)).is_err());
        s.interval = Duration::from_secs(600);
        s.status.last_pass = Some(start);
        assert!(liveness(&s, start + Duration::from_secs(1799)).is_ok());
        let err = liveness(&s, start + Duration::from_secs(1801)).unwrap_err();
        assert!(err.contains("stuck"), "{err}");
    }

    #[test]
    fn a_pass_that_overruns_fails_liveness_and_says_so() {
        let mut s = snapshot();
        s.interval = Duration::from_secs(10);
        let start = s.started;
        s.status.last_pass = Some(start);
        s.running_since = Some(start + Duration::from_secs(5));
        assert!(liveness(&s, start + Duration::from_secs(60)).is_ok());
        let err = liveness(&s, start + Duration::from_secs(70)).unwrap_err();
        assert!(err.contains("pass overran: running for 65s"), "{err}");
    }

    #[test]
    fn invalid_config_does_not_fail_liveness_but_fails_readiness_until_applied() {
        let mut s = snapshot();
        assert!(readiness(&s).unwrap_err().contains("starting"));
        s.status.last_pass = Some(s.started);
        s.status.not_ready = Some("no valid config has been applied yet".into());
        assert!(liveness(&s, s.started).is_ok());
        assert!(readiness(&s).unwrap_err().contains("no valid config"));
        s.status.not_ready = None;
        assert_eq!(readiness(&s), Ok("ok".into()));
    }

    /// A family masquerading because its output address left the node is ready (its traffic
    /// flows) and says why in `/readyz` and in the gauge; the other family reads 0.
    #[test]
    fn an_output_address_fallback_is_ready_says_why_and_is_a_gauge() {
        let mut s = snapshot();
        s.status.last_pass = Some(s.started);
        s.status.egress_fallback.insert(
            crate::plan::Family::V4,
            Some("outputAddress 203.0.113.9: this node does not hold that address".into()),
        );
        s.status
            .egress_fallback
            .insert(crate::plan::Family::V6, None);
        let text = readiness(&s).unwrap();
        assert_eq!(
            text,
            "ok\noutput address fallback: outputAddress 203.0.113.9: this node does not hold that address"
        );
        let metrics = metrics_text(&s, s.started, SystemTime::now());
        for needle in [
            "ipmasq_output_address_fallback{family=\"ipv4\"} 1",
            "ipmasq_output_address_fallback{family=\"ipv6\"} 0",
            "ipmasq_ready 1",
        ] {
            assert!(
                metrics.contains(needle),
                "{needle} missing from:\n{metrics}"
            );
        }
        s.status.egress_fallback.clear();
        assert_eq!(readiness(&s), Ok("ok".into()));
        let metrics = metrics_text(&s, s.started, SystemTime::now());
        assert!(
            !metrics.contains("ipmasq_output_address_fallback{"),
            "{metrics}"
        );
    }

    #[test]
    fn metrics_follow_prometheus_conventions() {
        let mut s = snapshot();
        s.status.syncs_ok = 3;
        s.status.last_pass = Some(s.started);
        s.status.last_success = Some(s.started);
        s.status.drift_repairs.insert("jump_missing", 2);
        s.status.rules.insert(crate::plan::Family::V4, 5);
        s.status.conntrack_entries_reset = 7;
        let text = metrics_text(&s, s.started + Duration::from_secs(2), SystemTime::now());
        for needle in [
            "# TYPE ipmasq_syncs counter",
            "ipmasq_syncs_total{result=\"success\"} 3",
            "ipmasq_drift_repairs_total{kind=\"jump_missing\"} 2",
            "# TYPE ipmasq_sync_duration_seconds histogram",
            "ipmasq_rules{family=\"ipv4\",backend=\"iptables-nft\"} 5",
            "ipmasq_last_successful_sync_age_seconds 2.0",
            "ipmasq_build_info{version=\"",
            "ipmasq_ready 1",
            "# TYPE ipmasq_conntrack_entries_reset counter",
            "ipmasq_conntrack_entries_reset_total 7",
            "ipmasq_conntrack_resets_failed_total 0",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn the_resync_interval_in_force_is_exported() {
        let mut s = snapshot();
        s.interval = Duration::from_secs(30 * 60);
        let text = metrics_text(&s, s.started, SystemTime::now());
        assert!(
            text.contains("# TYPE ipmasq_resync_interval_seconds gauge"),
            "{text}"
        );
        assert!(
            text.contains("\nipmasq_resync_interval_seconds 1800.0\n"),
            "{text}"
        );
    }

    #[test]
    fn the_text_format_names_counter_samples_and_ends_without_eof() {
        let s = Snapshot::new(crate::backend::BackendId::IptablesNft);
        let open = metrics_text(&s, s.started, SystemTime::now());
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(open.contains("# TYPE ipmasq_syncs counter"), "{open}");
        let text = prometheus_text(&open);
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
        assert!(text.contains("# TYPE ipmasq_syncs_total counter"), "{text}");
        assert!(text.contains("# HELP ipmasq_syncs_total "), "{text}");
        assert!(
            text.contains("ipmasq_syncs_total{result=\"success\"} 0"),
            "{text}"
        );
        // Every sample of the OpenMetrics text is there, unchanged.
        let samples = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(samples(&open), samples(&text));
    }
}
