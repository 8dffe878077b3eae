//! API mode's inputs inside the memory model, the agent in a memory cgroup of the test's own
//! (the shipped DaemonSet's 64 MiB): a last-known-good file under its size cap but too large
//! for the memory is refused before it is read (said, the file kept), never OOM-killed at boot.

use super::egress::{count_in_log, log_of};
use super::memory_limit::MemoryCgroup;
use super::netns::{wait_until, Netns};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(30);

/// A kubeconfig whose API server is never there (nothing listens on port 1): the agent
/// starts from its last-known-good, as on a node booting while the API is away.
pub(super) fn kubeconfig_of_an_absent_api(dir: &crate::util::Scratch) -> std::path::PathBuf {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "away", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": true}}],
        "users": [{"name": "agent", "user": {"token": "not-a-token"}}],
        "contexts": [{"name": "away", "context": {"cluster": "away", "user": "agent"}}],
        "current-context": "away",
    });
    dir.write("away.kubeconfig", &config.to_string())
}

/// A last-known-good of `policies` EgressNATPolicies of 1 MiB of text each (valid JSON of
/// schema 2, for the base ConfigMap the agent watches).
fn last_known_good(policies: usize) -> String {
    let padding = "#".repeat(1 << 20);
    let policies: Vec<serde_json::Value> = (0..policies)
        .map(|n| serde_json::json!({"name": format!("policy-{n}"), "text": padding}))
        .collect();
    serde_json::json!({
        "schemaVersion": 2,
        "configmap": "kube-system/ip-masq-agent",
        "provenance": "configmap kube-system/ip-masq-agent key config (resourceVersion 1)",
        "savedAt": "2026-11-28T00:00:00Z",
        "text": "nonMasqueradeCIDRs: [10.0.0.0/8]\n",
        "policies": policies,
    })
    .to_string()
}

/// Today's code read the 40 MiB file whole and decoded it (under its 48 MiB cap), and was
/// OOM-killed at boot in 64 MiB, on every start.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_last_known_good_that_cannot_fit_64_mib_is_refused_not_oom_killed() {
    super::netns::require_root();
    let group = MemoryCgroup::new("lkg-64mib", 64 << 20);
    let mut ns = Netns::new("lkgmem");
    let dir = crate::util::Scratch::new("lkg-64mib");
    let state = ns.state_dir();
    std::fs::create_dir_all(&state).unwrap();
    // The namespace's state directory is its last-known-good's too (see `Netns::command`).
    let saved = state.join("last-known-good.json");
    let text = last_known_good(40);
    std::fs::write(&saved, &text).unwrap();
    let kubeconfig = kubeconfig_of_an_absent_api(&dir).display().to_string();
    let daemon_log = dir.path.join("agent.log");
    let args = super::cluster::api_agent_args(
        &["--backend=nftables"],
        &kubeconfig,
        "node-a",
        "--metrics-addr=127.0.0.1:9733",
    );
    let pid = group.spawn(&mut ns, &args, &daemon_log);
    assert!(
        wait_until(DEADLINE, || count_in_log(
            &daemon_log,
            "refusing the last-known-good config"
        ) >= 1
            || group.oom_kills() > 0),
        "{}",
        log_of(&daemon_log)
    );
    let said = log_of(&daemon_log);
    assert_eq!(group.oom_kills(), 0, "OOM-killed:\n{said}");
    for needle in [
        "a last-known-good config",
        "memory limit of 64.0 MiB",
        "raise the container's memory limit",
    ] {
        assert!(said.contains(needle), "{needle:?} missing:\n{said}");
    }
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the agent goes on, waiting for the API:\n{said}"
    );
    assert_eq!(
        std::fs::metadata(&saved).unwrap().len(),
        text.len() as u64,
        "the file kept"
    );
}

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const POLICIES: &str = "/apis/networking.gke.io/v1/egressnatpolicies";
/// Policies created, and /32 destinations in each (about 1 MiB of JSON a policy).
const POLICY_COUNT: usize = 7;
const DESTINATIONS: usize = 40_000;
/// Policies created after: a list past the 64 MiB agent's answer cap (8.6 MiB).
const MORE_POLICIES: usize = 6;

/// Creates the policy `policy-N` with [`DESTINATIONS`] /32 destinations (about 1 MiB of JSON).
fn create_policy(cluster: &super::cluster::LocalCluster, dir: &crate::util::Scratch, n: usize) {
    let destinations: Vec<serde_json::Value> = (0..DESTINATIONS)
        .map(|i| {
            serde_json::json!({"cidr": format!("100.{}.{}.{}/32", n, i / 256 % 256, i % 256 + (i / 65536))})
        })
        .collect();
    let policy = serde_json::json!({
        "apiVersion": "networking.gke.io/v1",
        "kind": "EgressNATPolicy",
        "metadata": {"name": format!("policy-{n}")},
        "spec": {"action": "NoSNAT", "destinations": destinations},
    });
    // Too large for an argument: curl reads the body from a file (`@PATH`).
    let body = dir.write(&format!("policy-{n}.json"), &policy.to_string());
    let (status, answer) = cluster.admin("POST", POLICIES, Some(&format!("@{}", body.display())));
    assert_eq!(
        status,
        201,
        "create policy {n}: {}",
        &answer[..answer.len().min(500)]
    );
}

/// How many EgressNATPolicies a list from the watch cache (`resourceVersion=0`) returns.
fn policies_in_watch_cache(cluster: &super::cluster::LocalCluster) -> usize {
    let (status, answer) = cluster.admin("GET", &format!("{POLICIES}?resourceVersion=0"), None);
    if status != 200 {
        return 0;
    }
    serde_json::from_str::<serde_json::Value>(&answer)
        .ok()
        .and_then(|list| list["items"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// EgressNATPolicies through the real API whose text together cannot be read and checked in
/// 64 MiB: listed, then refused with the reason before their text is handed on, 0 OOM kills.
/// Then more of them, until their list is longer than the agent's memory allows one answer
/// to be: cut off as it arrives, refused with the reason; still 0 OOM kills.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn egress_nat_policies_that_cannot_fit_64_mib_are_refused_not_oom_killed() {
    super::netns::require_root();
    let group = MemoryCgroup::new("policies-64mib", 64 << 20);
    let mut ns = Netns::new("polmem");
    let cluster = super::cluster::LocalCluster::up(&ns);
    let crd = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/egressnatpolicy-crd.json"),
    )
    .expect("the CRD's manifest");
    let (status, answer) = cluster.admin("POST", CRDS, Some(&crd));
    assert_eq!(status, 201, "create the CRD: {answer}");
    assert!(
        wait_until(DEADLINE, || cluster.admin("GET", POLICIES, None).0 == 200),
        "the CRD is never served"
    );
    cluster.put_base_config("nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let dir = crate::util::Scratch::new("policies-64mib");
    for n in 0..POLICY_COUNT {
        create_policy(&cluster, &dir, n);
    }
    // The agent lists from the watch cache, which can lag the last create: start it only once
    // the cache holds every policy, so the count it says is the count created.
    assert!(
        wait_until(DEADLINE, || policies_in_watch_cache(&cluster)
            == POLICY_COUNT),
        "the watch cache never holds the {POLICY_COUNT} policies"
    );
    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let daemon_log = dir.path.join("agent.log");
    let args = super::cluster::api_agent_args(
        &["--backend=nftables"],
        &kubeconfig,
        "node-a",
        "--metrics-addr=127.0.0.1:9734",
    );
    let pid = group.spawn(&mut ns, &args, &daemon_log);
    let said = said_alive_and_not_oom_killed(
        &group,
        pid,
        &daemon_log,
        "more than this agent's memory limit allows",
    );
    assert!(
        said.contains(&format!("the {POLICY_COUNT} EgressNATPolicies hold")),
        "{said}"
    );
    for n in POLICY_COUNT..POLICY_COUNT + MORE_POLICIES {
        create_policy(&cluster, &dir, n);
    }
    // The store dropped each time, listed again on the slow schedule: the list cut off.
    said_alive_and_not_oom_killed(
        &group,
        pid,
        &daemon_log,
        "longer than this agent's memory limit allows one answer to be",
    );
    cluster.down();
}

/// Waits (60 s at most) until the agent's log says `needle` or the group counts an OOM kill,
/// then asserts none and that the agent still runs; the log, with its peak RSS printed.
fn said_alive_and_not_oom_killed(
    group: &MemoryCgroup,
    pid: u32,
    log: &std::path::Path,
    needle: &str,
) -> String {
    assert!(
        wait_until(Duration::from_secs(60), || count_in_log(log, needle) >= 1
            || group.oom_kills() > 0),
        "{needle:?} never said:\n{}",
        log_of(log)
    );
    let said = log_of(log);
    eprintln!(
        "after {needle:?}: OOM kills {}; the agent's peak RSS {} KiB",
        group.oom_kills(),
        super::api_configmaps::proc_field(pid, "status", "VmHWM:")
    );
    assert_eq!(group.oom_kills(), 0, "OOM-killed:\n{said}");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the agent goes on:\n{said}"
    );
    said
}
