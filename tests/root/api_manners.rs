//! How an agent in API mode treats a real kube-apiserver (`scripts/local-cluster`, with an
//! audit log of the agent's requests): every request names ipmasq, its version and the node in
//! its User-Agent; the EgressNATPolicy CRD, which this cluster does not serve, is asked about
//! on a doubling schedule (not about once a second); the config's GETs name the watch event's
//! resourceVersion and the lists ask for `resourceVersion=0`, so the watch cache answers them,
//! not etcd.

use super::cluster::{agent_audit_events, api_agent_args, LocalCluster, BASE_CONFIGMAP};
use super::health::{successful_syncs, ADDR};
use super::netns::{wait_until, Netns};
use crate::util::Scratch;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(30);
/// The window the CRD's requests are counted over, from the agent's start.
const WINDOW: Duration = Duration::from_secs(60);

/// The apiserver's count of etcd reads of ConfigMaps (`etcd_request_duration_seconds_count`
/// of operation `get`, type `*core.ConfigMap` on 1.20), from its /metrics.
fn etcd_configmap_gets(cluster: &LocalCluster) -> f64 {
    let (status, text) = cluster.admin("GET", "/metrics", None);
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|line| {
            line.starts_with("etcd_request_duration_seconds_count{")
                && line.contains("operation=\"get\"")
                && line.contains("type=\"*core.ConfigMap\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_agent_names_itself_reads_from_the_watch_cache_and_backs_off_a_missing_crd() {
    let mut ns = Netns::new("api-manners");
    let logs = Scratch::new(&format!("logs-{}", ns.name));
    let audit_log = logs.path.join("audit.log");
    let policy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/audit-policy.yaml");
    let cluster = LocalCluster::up_with(
        &ns,
        &[
            &format!("--audit-policy-file={}", policy.display()),
            &format!("--audit-log-path={}", audit_log.display()),
        ],
    );
    cluster.put_base_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let metrics = format!("--metrics-addr={ADDR}");
    let log = logs.path.join("agent.log");
    let started = Instant::now();
    let child = ns
        .command(
            &crate::util::binary(),
            &api_agent_args(&["--backend=nftables"], &kubeconfig, "node-a", &metrics),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("agent log"))
        .spawn()
        .expect("spawn the agent");
    ns.adopt(child);
    let agent_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(PATIENCE, || successful_syncs(&ns) >= 1),
        "the first pass: {}",
        agent_log()
    );
    let rules = || ns.exec("nft", &["list", "table", "ip", "ipmasq"]).stdout;
    let etcd_before = etcd_configmap_gets(&cluster);
    for (index, cidr) in ["203.0.113.0/24", "192.0.2.0/24", "198.51.100.0/24"]
        .iter()
        .enumerate()
    {
        cluster.put_base_config(&format!("nonMasqueradeCIDRs: [{cidr}]\n"));
        assert!(
            wait_until(PATIENCE, || rules().contains(cidr)),
            "edit {index}: {}\n{}",
            rules(),
            agent_log()
        );
    }
    let etcd_after = etcd_configmap_gets(&cluster);
    assert!(
        etcd_after > 0.0,
        "the apiserver counts its etcd reads of ConfigMaps"
    );
    eprintln!(
        "etcd gets of configmaps during 3 edits (the admin's PUTs included): {}",
        etcd_after - etcd_before
    );
    assert_eq!(
        etcd_after - etcd_before,
        0.0,
        "the agent's GETs are answered by the watch cache: no etcd read per edit"
    );
    std::thread::sleep(WINDOW.saturating_sub(started.elapsed()));

    let events = agent_audit_events(&audit_log);
    assert!(!events.is_empty(), "no audit events");
    let version = env!("CARGO_PKG_VERSION");
    let agents: std::collections::BTreeSet<&str> = events
        .iter()
        .map(|e| e["userAgent"].as_str().unwrap_or(""))
        .collect();
    let crd_lists = events
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "egressnatpolicies")
        .count();
    eprintln!("in {WINDOW:?}: {crd_lists} requests for the CRD not served; user agents {agents:?}");
    assert_eq!(
        agents.into_iter().collect::<Vec<_>>(),
        [format!("ipmasq/{version} (node node-a)")],
        "every request names ipmasq, its version and the node"
    );
    let uris = |resource: &str, verb: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["objectRef"]["resource"] == resource && e["verb"] == verb)
            .map(|e| e["requestURI"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let crd = uris("egressnatpolicies", "list");
    assert!(
        (2..=8).contains(&crd.len()),
        "the CRD that is not served, asked {} times in {WINDOW:?} (0, 1, 3, 7, 15, 31 s ...): {crd:?}",
        crd.len()
    );
    let gets: Vec<String> = uris("configmaps", "get")
        .into_iter()
        .filter(|uri| uri.starts_with(BASE_CONFIGMAP))
        .collect();
    assert!(
        gets.len() >= 4,
        "the first list's GET and one per edit: {gets:?}"
    );
    assert!(
        gets.iter()
            .all(|uri| uri.contains("resourceVersion=") && !uri.contains("resourceVersion=0")),
        "each GET names the event's resourceVersion: {gets:?}"
    );
    assert!(
        agent_log().contains("source=configmap"),
        "the provenance is the ConfigMap: {}",
        agent_log()
    );
    for resource in ["configmaps", "nodes"] {
        let lists = uris(resource, "list");
        assert!(!lists.is_empty(), "{resource}");
        assert!(
            lists.iter().all(|uri| uri.contains("resourceVersion=0")),
            "{resource}: the first list from the watch cache: {lists:?}"
        );
        let watches = uris(resource, "watch");
        assert!(
            watches
                .iter()
                .all(|uri| uri.contains("allowWatchBookmarks=true")
                    && uri.contains("timeoutSeconds=290")),
            "{resource}: {watches:?}"
        );
    }
}
