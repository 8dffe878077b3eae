//! The one list of metrics the agent exports: each family's name as a query spells it, its
//! type, labels, help and when an agent serves it. `/metrics` registers every family through
//! this list (health.rs), a test checks a rendering against it, and `ipmasq generate` writes
//! the agent page's metrics and docs/reference/metrics.md from it.

use prometheus_client::registry::Registry;

/// The prefix of every family (the registry's).
pub const PREFIX: &str = "ipmasq";

/// A family's type, as `# TYPE` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

impl MetricType {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// When an agent's `/metrics` carries samples of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    Always,
    /// From the first successful sync on.
    AfterFirstSync,
    /// One series per kind of drift, from the first repair of that kind on.
    AfterDriftRepair,
    /// While the config in force names an output address (outputAddress[IPv6]).
    WithOutputAddress,
    /// With --snat-log or --snat-port-pressure.
    WithSnat,
    /// With --snat-log or --snat-port-pressure, one series per translated address and
    /// protocol seen in a translated flow.
    WithSnatFlows,
    /// In API mode (--config-source=api), one series per input watched.
    InApiMode,
    /// In API mode while a rollout in waves (`NAME-next`) exists.
    InRollout,
    /// When the kernel answers ctnetlink's statistics request at the scrape.
    WithConntrackStatistics,
    /// As `WithConntrackStatistics`, when the kernel also says the table's limit (4.19+).
    WithConntrackLimit,
    /// While the config in force limits a pod's share, one series per family and limit
    /// the backend holds.
    WithPodShare,
}

impl Served {
    /// The condition in words, for the man page and the reference.
    pub fn describe(self) -> &'static str {
        match self {
            Served::Always => "always",
            Served::AfterFirstSync => "after the first successful sync",
            Served::AfterDriftRepair => "once a drift of that kind was repaired",
            Served::WithOutputAddress => "while the config names an output address",
            Served::WithSnat => "with --snat-log or --snat-port-pressure",
            Served::WithSnatFlows => {
                "with --snat-log or --snat-port-pressure, once a translated flow is seen"
            }
            Served::InApiMode => "in API mode, once the API is watched, one series per input",
            Served::InRollout => {
                "in API mode while a rollout in waves (the ConfigMap NAME-next) exists"
            }
            Served::WithConntrackStatistics => {
                "when the kernel's conntrack statistics can be read at the scrape (ctnetlink)"
            }
            Served::WithConntrackLimit => {
                "when the kernel's conntrack statistics, with the table's limit (Linux 4.19+), can be read at the scrape"
            }
            Served::WithPodShare => {
                "while the config in force sets podConnectionLimit or podNewConnectionRate, once the backend holds its rules"
            }
        }
    }
}

/// One family of `/metrics`.
#[derive(Debug)]
pub struct ExportedMetric {
    /// The name a query uses: a counter's samples end in `_total`; a histogram's are this
    /// name with `_bucket`, `_sum` and `_count`.
    pub name: &'static str,
    pub kind: MetricType,
    /// Label names, in the order the samples carry them (a histogram's `le` not counted).
    pub labels: &'static [&'static str],
    /// `# HELP`'s text (the exposition adds a full stop).
    pub help: &'static str,
    /// More for the docs than the help holds (label values, limits); empty when none.
    pub note: &'static str,
    pub served: Served,
}

impl ExportedMetric {
    /// The name given to the registry: without the prefix, and without a counter's `_total`
    /// (the exposition adds it).
    pub fn registered_name(&self) -> &'static str {
        let bare = self
            .name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_prefix('_'))
            .unwrap_or(self.name);
        match self.kind {
            MetricType::Counter => bare.strip_suffix("_total").unwrap_or(bare),
            MetricType::Gauge | MetricType::Histogram => bare,
        }
    }

    #[cfg(test)]
    /// The family's name in the OpenMetrics text (`# TYPE` there): a counter's without `_total`.
    pub fn family_name(&self) -> String {
        format!("{PREFIX}_{}", self.registered_name())
    }

    #[cfg(test)]
    /// Every sample name the family's series carry.
    pub fn sample_names(&self) -> Vec<String> {
        match self.kind {
            MetricType::Counter | MetricType::Gauge => vec![self.name.to_string()],
            MetricType::Histogram => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|suffix| format!("{}{suffix}", self.name))
                .collect(),
        }
    }

    /// Registers `metric` as this family.
    pub fn register(
        &self,
        registry: &mut Registry,
        metric: impl prometheus_client::registry::Metric,
    ) {
        registry.register(self.registered_name(), self.help, metric);
    }
}

pub const SYNCS: ExportedMetric = ExportedMetric {
    name: "ipmasq_syncs_total",
    kind: MetricType::Counter,
    labels: &["result"],
    help: "Reconcile passes that synced the rules, by result",
    note: "`result` is `success` or `failure`.",
    served: Served::Always,
};
pub const SYNC_DURATION: ExportedMetric = ExportedMetric {
    name: "ipmasq_sync_duration_seconds",
    kind: MetricType::Histogram,
    labels: &[],
    help: "Time to observe, diff and (when drifted) repair the rules of all families",
    note: "",
    served: Served::Always,
};
pub const DRIFT_REPAIRS: ExportedMetric = ExportedMetric {
    name: "ipmasq_drift_repairs_total",
    kind: MetricType::Counter,
    labels: &["kind"],
    help: "Drift repaired, by kind (chain_missing, rules_differ, jump_missing, jump_duplicate, jump_stale)",
    note: "Each kind is the repair one of `ipmasq show`'s differences calls for: `missing-rule`, `extra-rule`, `out-of-order` and the other rule-level differences are repaired as `rules_differ`.",
    served: Served::AfterDriftRepair,
};
pub const CONFIG_CHANGES_APPLIED: ExportedMetric = ExportedMetric {
    name: "ipmasq_config_changes_applied_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Syncs that rewrote the rules because the plan changed (a new config, or a node fact it names such as an egress address): not drift",
    note: "Logged as `config applied`. Its rule differences are the change itself and are not counted in `ipmasq_drift_repairs_total`; a missing jump or chain found at the same time still is.",
    served: Served::Always,
};
pub const CONFIG_RELOADS: ExportedMetric = ExportedMetric {
    name: "ipmasq_config_reloads_total",
    kind: MetricType::Counter,
    labels: &["result"],
    help: "Config changes seen, by result (an invalid file is counted once per change)",
    note: "`result` is `accepted` or `rejected`.",
    served: Served::Always,
};
pub const CONFIG_CURRENT: ExportedMetric = ExportedMetric {
    name: "ipmasq_config_current",
    kind: MetricType::Gauge,
    labels: &[],
    help: "1 when the config in force is the file on disk, 0 while an invalid file is ignored",
    note: "",
    served: Served::Always,
};
pub const LAST_SUCCESSFUL_SYNC_AGE: ExportedMetric = ExportedMetric {
    name: "ipmasq_last_successful_sync_age_seconds",
    kind: MetricType::Gauge,
    labels: &[],
    help: "Seconds since the last successful sync",
    note: "",
    served: Served::AfterFirstSync,
};
pub const LAST_SUCCESSFUL_SYNC_TIME: ExportedMetric = ExportedMetric {
    name: "ipmasq_last_successful_sync_timestamp_seconds",
    kind: MetricType::Gauge,
    labels: &[],
    help: "Unix time of the last successful sync",
    note: "",
    served: Served::AfterFirstSync,
};
pub const RULES: ExportedMetric = ExportedMetric {
    name: "ipmasq_rules",
    kind: MetricType::Gauge,
    labels: &["family", "backend"],
    help: "Rules in the masquerade chain after the last successful sync, by family and backend",
    note: "",
    served: Served::AfterFirstSync,
};
pub const NON_MASQUERADE_CIDRS: ExportedMetric = ExportedMetric {
    name: "ipmasq_non_masquerade_cidrs",
    kind: MetricType::Gauge,
    labels: &[],
    help: "Non-masquerade CIDRs in the config in force (link-local not counted)",
    note: "",
    served: Served::Always,
};
pub const OUTPUT_ADDRESS_FALLBACK: ExportedMetric = ExportedMetric {
    name: "ipmasq_output_address_fallback",
    kind: MetricType::Gauge,
    labels: &["family"],
    help: "1 while a family whose config names an output address masquerades because this node holds no address in it, 0 while it SNATs to one; by family",
    note: "",
    served: Served::WithOutputAddress,
};
pub const BUILD_INFO: ExportedMetric = ExportedMetric {
    name: "ipmasq_build_info",
    kind: MetricType::Gauge,
    labels: &["version", "backend"],
    help: "Always 1; labels carry the version and backend",
    note: "",
    served: Served::Always,
};
pub const CONSECUTIVE_SYNC_FAILURES: ExportedMetric = ExportedMetric {
    name: "ipmasq_consecutive_sync_failures",
    kind: MetricType::Gauge,
    labels: &[],
    help: "Failed syncs since the last successful one (0 when the last sync succeeded)",
    note: "",
    served: Served::Always,
};
pub const SYNC_RETRY_BACKOFF: ExportedMetric = ExportedMetric {
    name: "ipmasq_sync_retry_backoff_seconds",
    kind: MetricType::Gauge,
    labels: &[],
    help: "Seconds until a failed sync is retried (doubling from 1 up to the resync interval); 0 when the last sync succeeded",
    note: "",
    served: Served::Always,
};
pub const CONNTRACK_ENTRIES_RESET: ExportedMetric = ExportedMetric {
    name: "ipmasq_conntrack_entries_reset_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Conntrack entries deleted because a change made their NAT decision wrong (--conntrack-reset)",
    note: "",
    served: Served::Always,
};
pub const CONNTRACK_RESETS_FAILED: ExportedMetric = ExportedMetric {
    name: "ipmasq_conntrack_resets_failed_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Changes after which the conntrack table could not be read or its entries deleted",
    note: "",
    served: Served::Always,
};
pub const CONNTRACK_TABLE_ENTRIES: ExportedMetric = ExportedMetric {
    name: "ipmasq_conntrack_table_entries",
    kind: MetricType::Gauge,
    labels: &[],
    help: "Entries in the conntrack table of the agent's network namespace (nf_conntrack_count), read at the scrape",
    note: "",
    served: Served::WithConntrackStatistics,
};
pub const CONNTRACK_TABLE_LIMIT: ExportedMetric = ExportedMetric {
    name: "ipmasq_conntrack_table_limit",
    kind: MetricType::Gauge,
    labels: &[],
    help: "The conntrack table's limit (nf_conntrack_max; 0 is none): a full table drops the packets of new flows",
    note: "",
    served: Served::WithConntrackLimit,
};
pub const CONNTRACK_STAT: ExportedMetric = ExportedMetric {
    name: "ipmasq_conntrack_stat_total",
    kind: MetricType::Counter,
    labels: &["stat"],
    help: "The kernel's per-CPU conntrack statistics summed over the CPUs, as conntrack -S names them (insert_failed, drop, early_drop, ...): since boot, each CPU's 32-bit count followed across its wraps",
    note: "`stat` is one of `found`, `invalid`, `insert`, `insert_failed` (an entry lost a race to insert, its packet dropped), `drop` (a packet dropped because the table was full), `early_drop` (an unreplied entry evicted to make room), `error`, `search_restart`, `clash_resolve` and `chaintoolong`.",
    served: Served::WithConntrackStatistics,
};
pub const POD_EGRESS_LIMITED: ExportedMetric = ExportedMetric {
    name: "ipmasq_pod_egress_limited_total",
    kind: MetricType::Counter,
    labels: &["family", "limit"],
    help: "Packets of new masqueraded connections refused because their pod was over its share (podNewConnectionRate or podConnectionLimit), read from the refusing rule's counter at the scrape",
    note: "`limit` is `rate` or `connections`. A packet of a connection conntrack still calls new: a TCP connect's SYN (and its retries), each datagram of a UDP flow that was never answered. No per-pod label: `ipmasq show` names the pods holding the most connections. The count restarts from 0 when a config change rewrites the rule (Prometheus' `rate()` and `increase()` take that as a reset).",
    served: Served::WithPodShare,
};
pub const FOREIGN_COMMITS: ExportedMetric = ExportedMetric {
    name: "ipmasq_foreign_commits_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Commits not known to be the agent's that changed the rules it owns (its nftables table, or with iptables-nft its chain and POSTROUTING), heard from the kernel's nf_tables notifications; they wake a repair pass",
    note: "Lost notifications count as one. The agent knows a commit as its own only when it can see the committing thread's id: in a process namespace of its own (a DaemonSet without hostPID) its own commits count too, and iptables-nft-restore's (its child) always do, each costing a pass that finds nothing to repair. Always 0 with iptables-legacy, whose changes the kernel announces to no one: there a neighbour's flush is repaired at the next resync.",
    served: Served::Always,
};
pub const FOREIGN_COMMITS_PACED: ExportedMetric = ExportedMetric {
    name: "ipmasq_foreign_commits_paced_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Of ipmasq_foreign_commits_total, those heard while repairs were paced (5 at once, then 3 a second): a neighbour fighting over the agent's rules",
    note: "Rising means a neighbour keeps rewriting our rules: the agent logs it once per fight (`a neighbour keeps changing the rules we own`) and the alert IpmasqRulesFought fires; `nft monitor` names the committing process.",
    served: Served::Always,
};
pub const SNAT_LOG_LINES: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_log_lines_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Lines written to the SNAT log (--snat-log)",
    note: "",
    served: Served::WithSnat,
};
pub const SNAT_LOG_DROPPED: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_log_dropped_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "SNAT log lines dropped because the writer was behind (its queue full)",
    note: "The writer's queue holds at most 32,768 lines; fewer under a memory limit (5 % of it, at 256 bytes a line).",
    served: Served::WithSnat,
};
pub const SNAT_LOG_WRITE_ERRORS: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_log_write_errors_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "SNAT log lines or flushes the file system refused",
    note: "",
    served: Served::WithSnat,
};
pub const SNAT_LOG_ROTATIONS: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_log_rotations_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "SNAT log files rotated (--snat-log-max-size)",
    note: "",
    served: Served::WithSnat,
};
pub const SNAT_EVENTS_READ: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_events_read_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Conntrack events the agent read for the SNAT log and port pressure (new and end, both families): with the kernel's filter, only those of source-NATed flows",
    note: "",
    served: Served::WithSnat,
};
pub const SNAT_EVENTS_LOST: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_events_lost_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Times conntrack's events overflowed the agent's receive buffer (ENOBUFS): flows of the moment missing from the SNAT log",
    note: "",
    served: Served::WithSnat,
};
pub const SNAT_PORTS_IN_USE: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_ports_in_use",
    kind: MetricType::Gauge,
    labels: &["translated_address", "proto"],
    help: "Source ports in use on a translated address, by protocol, from conntrack's new and end events",
    note: "",
    served: Served::WithSnatFlows,
};
pub const SNAT_BUSIEST_DESTINATION_PORT_SHARE: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_busiest_destination_port_share",
    kind: MetricType::Gauge,
    labels: &["translated_address", "proto"],
    help: "Share of the usable source-port range (1024-65535, or the agent's --to-ports for TCP, UDP and SCTP; ICMP ids 0-65535) a translated address uses toward its busiest destination address and port: 1 is exhaustion",
    note: "",
    served: Served::WithSnatFlows,
};
pub const SNAT_TRACKED_FLOWS: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_tracked_flows",
    kind: MetricType::Gauge,
    labels: &[],
    help: "Translated flows the port pressure counts (at most 131072)",
    note: "",
    served: Served::WithSnat,
};
pub const SNAT_UNTRACKED_FLOWS: ExportedMetric = ExportedMetric {
    name: "ipmasq_snat_untracked_flows_total",
    kind: MetricType::Counter,
    labels: &[],
    help: "Translated flows left out of the port pressure because 131072 were tracked already: the gauges are then a lower bound",
    note: "",
    served: Served::WithSnat,
};
pub const API_VIEW_AGE: ExportedMetric = ExportedMetric {
    name: "ipmasq_api_view_age_seconds",
    kind: MetricType::Gauge,
    labels: &["input"],
    help: "Seconds since the API server last answered for this input (configmap, node, egressnatpolicy): a list, a GET, a watch started or renewed, each event or bookmark it delivers; a healthy idle watch hears a bookmark about once a minute (Kubernetes 1.27+) or is renewed after 115 s of silence, so a healthy view stays below about 2 minutes",
    note: "",
    served: Served::InApiMode,
};
pub const ROLLOUT_STATE: ExportedMetric = ExportedMetric {
    name: "ipmasq_rollout_state",
    kind: MetricType::Gauge,
    labels: &["state"],
    help: "1 for the state the rollout in waves is in as this agent sees it (running, halted, aborted, done), 0 for the others",
    note: "A halted rollout has every node back on the base until `ipmasq fleet rollout resume` or `abort`; the halt's node, reason and diagnostic are on the ConfigMap (`ipmasq fleet rollout status`).",
    served: Served::InRollout,
};
pub const ROLLOUT_ON_NEXT: ExportedMetric = ExportedMetric {
    name: "ipmasq_rollout_on_next",
    kind: MetricType::Gauge,
    labels: &[],
    help: "1 while this node runs the rollout's next config (its wave has started and the rollout is neither halted nor aborted)",
    note: "",
    served: Served::InRollout,
};
pub const RESYNC_INTERVAL: ExportedMetric = ExportedMetric {
    name: "ipmasq_resync_interval_seconds",
    kind: MetricType::Gauge,
    labels: &[],
    help:
        "The resync interval in force (resyncInterval): a healthy agent syncs at least this often",
    note: "",
    served: Served::Always,
};
pub const READY: ExportedMetric = ExportedMetric {
    name: "ipmasq_ready",
    kind: MetricType::Gauge,
    labels: &[],
    help: "1 when /readyz would answer 200",
    note: "",
    served: Served::Always,
};

/// Every family, in the order `/metrics` serves them.
pub const ALL: [&ExportedMetric; 37] = [
    &SYNCS,
    &SYNC_DURATION,
    &DRIFT_REPAIRS,
    &CONFIG_CHANGES_APPLIED,
    &CONFIG_RELOADS,
    &CONFIG_CURRENT,
    &LAST_SUCCESSFUL_SYNC_AGE,
    &LAST_SUCCESSFUL_SYNC_TIME,
    &RULES,
    &NON_MASQUERADE_CIDRS,
    &OUTPUT_ADDRESS_FALLBACK,
    &BUILD_INFO,
    &CONSECUTIVE_SYNC_FAILURES,
    &SYNC_RETRY_BACKOFF,
    &CONNTRACK_ENTRIES_RESET,
    &CONNTRACK_RESETS_FAILED,
    &CONNTRACK_TABLE_ENTRIES,
    &CONNTRACK_TABLE_LIMIT,
    &CONNTRACK_STAT,
    &POD_EGRESS_LIMITED,
    &FOREIGN_COMMITS,
    &FOREIGN_COMMITS_PACED,
    &SNAT_LOG_LINES,
    &SNAT_LOG_DROPPED,
    &SNAT_LOG_WRITE_ERRORS,
    &SNAT_LOG_ROTATIONS,
    &SNAT_EVENTS_READ,
    &SNAT_EVENTS_LOST,
    &SNAT_PORTS_IN_USE,
    &SNAT_BUSIEST_DESTINATION_PORT_SHARE,
    &SNAT_TRACKED_FLOWS,
    &SNAT_UNTRACKED_FLOWS,
    &API_VIEW_AGE,
    &ROLLOUT_STATE,
    &ROLLOUT_ON_NEXT,
    &RESYNC_INTERVAL,
    &READY,
];

#[cfg(test)]
/// The listed family a sample or family name belongs to (`ipmasq_syncs_total`, `ipmasq_syncs`,
/// `ipmasq_sync_duration_seconds_bucket` ...), if any.
pub fn family_of(name: &str) -> Option<&'static ExportedMetric> {
    ALL.iter().copied().find(|metric| {
        metric.name == name
            || metric.family_name() == name
            || metric.sample_names().iter().any(|sample| sample == name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::health::{metrics_text, prometheus_text, sample_snat_stats, Snapshot};
    use crate::plan::Family;
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};
    use std::time::SystemTime;

    /// What an agent has been through: each condition a family's `served` names.
    #[derive(Clone, Copy, Debug, Default)]
    struct Seen {
        synced: bool,
        drift_repaired: bool,
        output_address: bool,
        snat: bool,
        snat_flows: bool,
        api: bool,
        rollout: bool,
        conntrack: bool,
        pod_share: bool,
    }

    impl Seen {
        const EVERYTHING: Seen = Seen {
            synced: true,
            drift_repaired: true,
            output_address: true,
            snat: true,
            snat_flows: true,
            api: true,
            rollout: true,
            conntrack: true,
            pod_share: true,
        };

        fn serves(self, served: Served) -> bool {
            match served {
                Served::Always => true,
                Served::AfterFirstSync => self.synced,
                Served::AfterDriftRepair => self.drift_repaired,
                Served::WithOutputAddress => self.output_address,
                Served::WithSnat => self.snat,
                Served::WithSnatFlows => self.snat_flows,
                Served::InApiMode => self.api,
                Served::InRollout => self.rollout,
                Served::WithConntrackStatistics | Served::WithConntrackLimit => self.conntrack,
                Served::WithPodShare => self.pod_share,
            }
        }

        /// The snapshot of an agent that has been through this.
        fn snapshot(self) -> Snapshot {
            let mut s = Snapshot::new(crate::backend::BackendId::ALL[0]);
            s.status.last_pass = Some(s.started);
            if self.synced {
                s.status.syncs_ok = 1;
                s.status.last_success = Some(s.started);
                s.status.rules.insert(Family::V4, 5);
                s.status.sync_duration.0.observe(0.01);
            }
            if self.drift_repaired {
                s.status.drift_repairs.insert("jump_missing", 1);
            }
            if self.output_address {
                s.status.egress_fallback.insert(Family::V4, None);
            }
            if self.snat_flows {
                s.snat = Some(sample_snat_stats());
            } else if self.snat {
                s.snat = Some(std::sync::Arc::default());
            }
            if self.api {
                s.api_view = Some(crate::cluster::age::ApiView::new(
                    Default::default(),
                    true,
                    std::time::Duration::from_secs(180),
                ));
            }
            if self.conntrack {
                s.conntrack = Some(crate::conntrack::health::ConntrackFigures {
                    entries: 10,
                    max_entries: Some(262_144),
                    ..Default::default()
                });
            }
            if self.rollout {
                let annotations = [
                    (crate::config::rollout::WAVES, "1,100"),
                    (crate::config::rollout::SOAK, "10m"),
                    (crate::config::rollout::START, "2026-11-29T12:00:00Z"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
                s.rollout = Some(crate::agent::reconcile::RolloutSeen {
                    rollout: crate::config::rollout::Rollout::from_annotations(&annotations)
                        .expect("a rollout"),
                    on_next: true,
                });
            }
            if self.pod_share {
                use crate::plan::live::{ShareLimit, ShareRefusals};
                s.pod_share_refused = vec![crate::agent::health::FamilyRefusals {
                    family: crate::plan::Family::V4,
                    refusals: vec![ShareRefusals {
                        limit: ShareLimit::Connections,
                        refused: 3,
                    }],
                }];
            }
            s
        }

        /// Its `/metrics` as a Prometheus scrape reads it (the Prometheus text format).
        fn scrape(self) -> BTreeMap<String, ServedFamily> {
            let s = self.snapshot();
            parse(&prometheus_text(&metrics_text(
                &s,
                s.started,
                SystemTime::now(),
            )))
        }
    }

    /// A family as an exposition serves it.
    #[derive(Debug, Default)]
    struct ServedFamily {
        kind: String,
        help: String,
        labels: BTreeSet<String>,
        samples: usize,
    }

    /// The label names of a sample line's `{a="x",b="y"}` (values may hold escaped quotes).
    fn label_names(labels: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = labels;
        while let Some((name, after)) = rest.split_once("=\"") {
            names.push(name.trim_start_matches(',').to_string());
            let mut escaped = false;
            let end = after
                .char_indices()
                .find(|&(_, c)| {
                    let closes = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    closes
                })
                .map_or(after.len(), |(i, _)| i + 1);
            rest = &after[end..];
        }
        names
    }

    /// The families of an exposition: `# HELP`, `# TYPE`, and their samples' labels.
    fn parse(text: &str) -> BTreeMap<String, ServedFamily> {
        let mut families: BTreeMap<String, ServedFamily> = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                families.entry(name.into()).or_default().help = help.into();
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                families.entry(name.into()).or_default().kind = kind.into();
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap();
                let sample = &line[..end];
                let family = ["", "_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| {
                        let name = sample.strip_suffix(suffix)?;
                        families.contains_key(name).then(|| name.to_string())
                    })
                    .unwrap_or_else(|| panic!("sample {sample} of no family in:\n{text}"));
                let entry = families.get_mut(&family).unwrap();
                entry.samples += 1;
                if line[end..].starts_with('{') {
                    let close = line.rfind('}').unwrap();
                    entry.labels.extend(
                        label_names(&line[end + 1..close])
                            .into_iter()
                            .filter(|l| l != "le"),
                    );
                }
            }
        }
        families
    }

    /// An agent that has been through everything serves every family of the list, as the
    /// list describes it, and nothing else.
    #[test]
    fn metrics_serves_exactly_the_listed_families_as_listed() {
        let served = Seen::EVERYTHING.scrape();
        let listed: BTreeSet<&str> = ALL.iter().map(|m| m.name).collect();
        let names: BTreeSet<&str> = served.keys().map(String::as_str).collect();
        assert_eq!(
            names, listed,
            "/metrics serves families the list (src/agent/metrics.rs) lacks, or the list holds families it never serves"
        );
        for metric in ALL {
            let family = &served[metric.name];
            assert_eq!(family.kind, metric.kind.as_str(), "{}", metric.name);
            assert_eq!(family.help, format!("{}.", metric.help), "{}", metric.name);
            let labels: BTreeSet<String> = metric.labels.iter().map(|l| l.to_string()).collect();
            assert_eq!(family.labels, labels, "{}", metric.name);
            assert!(family.samples > 0, "{} has no sample", metric.name);
        }
        assert_eq!(ALL.len(), 37);
    }

    /// Each family has samples exactly when its `served` says: with nothing seen, with each
    /// condition alone, and with all.
    #[test]
    fn each_family_is_served_when_the_list_says() {
        let none = Seen::default();
        let alone = [
            Seen {
                synced: true,
                ..none
            },
            Seen {
                drift_repaired: true,
                ..none
            },
            Seen {
                output_address: true,
                ..none
            },
            Seen { snat: true, ..none },
            Seen {
                snat: true,
                snat_flows: true,
                ..none
            },
            Seen {
                rollout: true,
                ..none
            },
            Seen {
                conntrack: true,
                ..none
            },
            Seen {
                pod_share: true,
                ..none
            },
        ];
        for seen in [none, Seen::EVERYTHING].into_iter().chain(alone) {
            let served: BTreeSet<String> = seen
                .scrape()
                .into_iter()
                .filter(|(_, family)| family.samples > 0)
                .map(|(name, _)| name)
                .collect();
            let expected: BTreeSet<String> = ALL
                .iter()
                .filter(|m| seen.serves(m.served))
                .map(|m| m.name.to_string())
                .collect();
            assert_eq!(served, expected, "{seen:?}");
        }
    }

    /// The OpenMetrics text (a scraper that asks for it) names the same families, a
    /// counter's without `_total`.
    #[test]
    fn openmetrics_names_the_listed_families() {
        let s = Seen::EVERYTHING.snapshot();
        let text = metrics_text(&s, s.started, SystemTime::now());
        let families: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        let listed: BTreeSet<String> = ALL.iter().map(|m| m.family_name()).collect();
        assert_eq!(families, listed);
    }

    /// The texts that name values the code defines say them as the code does.
    #[test]
    fn help_and_notes_name_values_as_the_code_does() {
        for kind in crate::backend::DriftKind::REPAIRS {
            assert!(
                DRIFT_REPAIRS.help.contains(kind),
                "{kind} missing from the help"
            );
        }
        let queue = crate::snat::sizing::MAX_QUEUE_LINES;
        let spelled = format!("{},{:03}", queue / 1000, queue % 1000);
        assert!(SNAT_LOG_DROPPED.note.contains(&spelled), "{spelled}");
        let s = Seen::EVERYTHING.snapshot();
        let text = metrics_text(&s, s.started, SystemTime::now());
        for (metric, values) in [
            (&SYNCS, ["success", "failure"]),
            (&CONFIG_RELOADS, ["accepted", "rejected"]),
        ] {
            for value in values {
                assert!(
                    metric.note.contains(&format!("`{value}`")),
                    "{}",
                    metric.name
                );
                assert!(
                    text.contains(&format!("{}{{result=\"{value}\"}}", metric.name)),
                    "{} {value}:\n{text}",
                    metric.name
                );
            }
        }
    }

    fn repository() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// The metric names (PREFIX, an underscore, then name characters) a text mentions.
    fn mentioned(text: &str) -> Vec<String> {
        let start = format!("{PREFIX}_");
        let mut names = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(&start) {
            let preceded = rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            // A metric name goes on with a letter; `ipmasq_0.1.0_amd64.deb` is a package.
            let metric_like = name[start.len()..].starts_with(|c: char| c.is_ascii_alphabetic());
            if !preceded && metric_like {
                names.push(name);
            }
        }
        names
    }

    /// Every metric a shipped alert, the dashboard or a runbook queries is a sample name a
    /// listed family serves (a counter's with `_total`, a histogram's `_bucket`...).
    #[test]
    fn alerts_dashboard_and_runbooks_query_only_served_names() {
        let mut files: Vec<PathBuf> = [
            "prometheus-rule.yaml",
            "prometheus-rule.test.yaml",
            "grafana-dashboard.json",
        ]
        .iter()
        .map(|f| repository().join("packaging/kubernetes/monitoring").join(f))
        .collect();
        files.extend(markdown_under(&repository().join("docs/runbooks")));
        let samples: BTreeSet<String> = ALL.iter().flat_map(|m| m.sample_names()).collect();
        let mut checked = 0;
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for name in mentioned(&text) {
                assert!(
                    samples.contains(&name),
                    "{} queries {name}, which /metrics does not serve (see src/agent/metrics.rs)",
                    file.display()
                );
                checked += 1;
            }
        }
        assert!(checked >= 20, "only {checked} metric names found");
    }

    fn markdown_under(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return found;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.extend(markdown_under(&path));
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
        found
    }

    fn rust_under(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.extend(rust_under(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
        found
    }

    /// Every metric name the code's messages and help (src/, the SNAT log's warnings
    /// included) and the documentation mention is a listed family or one of its samples.
    #[test]
    fn code_and_docs_mention_only_listed_metrics() {
        let mut files = rust_under(&repository().join("src"));
        files.extend(markdown_under(&repository().join("docs")));
        files.push(repository().join("README.md"));
        let mut checked = 0;
        for file in &files {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            for name in mentioned(&text) {
                assert!(
                    family_of(&name).is_some(),
                    "{} mentions {name}, which is not a metric of src/agent/metrics.rs",
                    file.display()
                );
                checked += 1;
            }
        }
        assert!(checked >= 40, "only {checked} metric names found");
    }
}
