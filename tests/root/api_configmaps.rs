//! What the agent receives of the ConfigMaps of its namespace in API mode: a kube-system of 200
//! ConfigMaps of 100 KiB each, one of them (unrelated to the agent) updated 50 times. The
//! agent watches their metadata only: the unrelated updates fetch nothing and wake no pass
//! (the GETs counted in the API server's audit log), and the bytes the agent receives (the
//! `bytes_received` of its TCP connections, TLS included) and its peak RSS up to its first
//! pass are printed.
//! `IPMASQ_MEASURE_BINARY=/path/to/ipmasq` runs another build of the agent to compare (its
//! GETs are then not asserted, said so). And a GET that fails is logged and retried with a
//! backoff until the change it was for is applied.

use super::cluster::{agent_audit_events, api_agent_args, LocalCluster};
use super::health::{successful_syncs, ADDR};
use super::netns::{kill, wait_until, Netns};
use crate::util::Scratch;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);
const CONFIGMAPS: &str = "/api/v1/namespaces/kube-system/configmaps";
const FILLERS: usize = 200;
const FILLER_BYTES: usize = 100 * 1024;
const UPDATES: usize = 50;
/// A long resync: every pass in the test is one an input woke.
const BASE: &str = "nonMasqueradeCIDRs: [198.51.100.0/24]\nresyncInterval: 10m\n";
const FENCE: &str = "nonMasqueradeCIDRs: [203.0.113.0/24]\nresyncInterval: 10m\n";

fn configmap_json(name: &str, key: &str, value: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "kube-system"},
        "data": {key: value},
    })
    .to_string()
}

/// The agent's GETs of ConfigMaps in the audit log, by name.
fn configmap_gets(audit_log: &Path) -> Vec<String> {
    agent_audit_events(audit_log)
        .into_iter()
        .filter(|event| event["verb"] == "get" && event["objectRef"]["resource"] == "configmaps")
        .map(|event| {
            event["objectRef"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// The bytes received so far on the agent's TCP connections (`ss -tinp`'s `bytes_received`
/// of each socket of `pid`, in the namespace): what the API server sent it, TLS included.
fn bytes_received(ns: &Netns, pid: u32) -> u64 {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "ss", "-tinpH"])
        .output()
        .expect("run ss");
    let text = String::from_utf8_lossy(&out.stdout);
    let owner = format!("pid={pid},");
    let mut total = 0;
    let mut mine = false;
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            if mine {
                total += line
                    .split_whitespace()
                    .find_map(|field| field.strip_prefix("bytes_received:"))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        } else {
            mine = line.contains(&owner);
        }
    }
    total
}

/// A field of `/proc/PID/FILE` (`name:` then a number).
pub(super) fn proc_field(pid: u32, file: &str, name: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn an_unrelated_configmap_updated_fifty_times_is_not_fetched_and_wakes_no_pass() {
    let mut ns = Netns::new("cm-meta");
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
    let filler = "x".repeat(FILLER_BYTES);
    for index in 0..FILLERS {
        let (status, body) = cluster.admin(
            "POST",
            CONFIGMAPS,
            Some(&configmap_json(&format!("filler-{index}"), "data", &filler)),
        );
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = cluster.admin(
        "POST",
        CONFIGMAPS,
        Some(&configmap_json("ip-masq-agent", "config", BASE)),
    );
    assert_eq!(status, 201, "{body}");

    let foreign = std::env::var_os("IPMASQ_MEASURE_BINARY").map(PathBuf::from);
    let binary = foreign.clone().unwrap_or_else(crate::util::binary);
    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let metrics = format!("--metrics-addr={ADDR}");
    let log = logs.path.join("agent.log");
    let child = ns
        .command(
            &binary,
            &api_agent_args(&["--backend=nftables"], &kubeconfig, "node-a", &metrics),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("agent log"))
        .spawn()
        .expect("spawn the agent");
    let pid = child.id();
    ns.adopt(child);
    let agent_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(PATIENCE, || successful_syncs(&ns) >= 1),
        "the first pass: {}",
        agent_log()
    );
    let first_syncs = successful_syncs(&ns);
    let peak_rss_kib = proc_field(pid, "status", "VmHWM:");
    let read_before = bytes_received(&ns, pid);
    if foreign.is_none() {
        // The audit log is written once each answer is sent: wait for the base's GET.
        wait_until(PATIENCE, || !configmap_gets(&audit_log).is_empty());
    }
    let gets_before = configmap_gets(&audit_log);

    for update in 0..UPDATES {
        let (status, body) = cluster.admin(
            "PUT",
            &format!("{CONFIGMAPS}/filler-0"),
            Some(&configmap_json(
                "filler-0",
                "data",
                &format!("{update:03}{}", &filler[3..]),
            )),
        );
        assert_eq!(status, 200, "{body}");
    }
    // A fence: the base's change comes on the same watch after the 50 updates.
    let (status, body) = cluster.admin(
        "PUT",
        &format!("{CONFIGMAPS}/ip-masq-agent"),
        Some(&configmap_json("ip-masq-agent", "config", FENCE)),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        wait_until(PATIENCE, || successful_syncs(&ns) > first_syncs),
        "the fence's pass: {}",
        agent_log()
    );
    let read_bytes = bytes_received(&ns, pid) - read_before;
    eprintln!(
        "agent {}: up to the first pass received {read_before} bytes, peak RSS {peak_rss_kib} KiB; \
         then received {read_bytes} bytes \
         while one unrelated ConfigMap of {FILLERS} ({FILLER_BYTES} bytes each) was updated \
         {UPDATES} times (and the base once)",
        binary.display()
    );
    assert_eq!(
        successful_syncs(&ns),
        first_syncs + 1,
        "only the base's change woke a pass: {}",
        agent_log()
    );
    kill(pid, "TERM");
    if foreign.is_some() {
        eprintln!(
            "IPMASQ_MEASURE_BINARY is set: the GETs of another build are not asserted (skipped)"
        );
        return;
    }
    wait_until(PATIENCE, || {
        configmap_gets(&audit_log).len() > gets_before.len()
    });
    let gets_after = configmap_gets(&audit_log);
    assert!(
        !gets_before.iter().any(|name| name.starts_with("filler-")),
        "the first list fetched no unrelated ConfigMap: {gets_before:?}"
    );
    assert_eq!(
        gets_before,
        ["ip-masq-agent"],
        "the first list fetched the base only"
    );
    assert_eq!(
        gets_after[gets_before.len()..],
        ["ip-masq-agent"],
        "the unrelated updates fetched nothing, the fence fetched the base"
    );
    assert!(
        read_bytes < (FILLER_BYTES * UPDATES / 10) as u64,
        "the unrelated updates' data was not received: {read_bytes} bytes read"
    );
}

const ROLE: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles/ip-masq-agent";

fn role_json(verbs: &[&str]) -> String {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "ip-masq-agent", "namespace": "kube-system"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}],
    })
    .to_string()
}

/// A GET of the base that fails (the Role without `get` for a while) is the config ConfigMap's
/// trouble, logged, and retried with a backoff: the change is applied once the GET answers,
/// with no further event.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_failed_get_is_logged_and_retried_until_the_change_is_applied() {
    let mut ns = Netns::new("cm-get");
    let logs = Scratch::new(&format!("logs-{}", ns.name));
    let cluster = LocalCluster::up(&ns);
    let (status, body) = cluster.admin(
        "POST",
        CONFIGMAPS,
        Some(&configmap_json("ip-masq-agent", "config", BASE)),
    );
    assert_eq!(status, 201, "{body}");
    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let metrics = format!("--metrics-addr={ADDR}");
    let log = logs.path.join("agent.log");
    let pid = ns.spawn_ipmasq(
        &api_agent_args(&["--backend=nftables"], &kubeconfig, "node-a", &metrics),
        &log,
    );
    let agent_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(PATIENCE, || successful_syncs(&ns) >= 1),
        "the first pass: {}",
        agent_log()
    );
    let first_syncs = successful_syncs(&ns);
    let (status, body) = cluster.admin("PUT", ROLE, Some(&role_json(&["list", "watch"])));
    assert_eq!(status, 200, "{body}");
    let (status, body) = cluster.admin(
        "PUT",
        &format!("{CONFIGMAPS}/ip-masq-agent"),
        Some(&configmap_json("ip-masq-agent", "config", FENCE)),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        wait_until(PATIENCE, || agent_log()
            .contains("cannot read the config ConfigMap from the API")),
        "the failed GET is logged: {}",
        agent_log()
    );
    assert_eq!(
        successful_syncs(&ns),
        first_syncs,
        "nothing applied without the data"
    );
    let (status, body) = cluster.admin("PUT", ROLE, Some(&role_json(&["get", "list", "watch"])));
    assert_eq!(status, 200, "{body}");
    assert!(
        wait_until(PATIENCE, || successful_syncs(&ns) > first_syncs),
        "the retried GET applies the change: {}",
        agent_log()
    );
    let ruleset = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "nft", "list", "ruleset"])
        .output()
        .expect("run nft");
    let ruleset = String::from_utf8_lossy(&ruleset.stdout);
    assert!(
        ruleset.contains("203.0.113.0/24"),
        "the fence's config is in force: {ruleset}"
    );
    kill(pid, "TERM");
}
