//! The reboot guard, against the real API server and the kernel: the last-known-good is saved
//! on a host path (`--last-known-good-dir`), the taint goes back when the kubelet says the node
//! is shutting down (and not at a stop that leaves the node up), and after a simulated reboot
//! (new network namespaces, the host path kept, the API away) the boot guard's pass
//! (`--once --offline`, without credentials) puts the rules in before the already-bound pod sends, so not one
//! datagram leaves with the pod's address; the agent started alone applies the same rules at
//! once.

use super::api_memory::kubeconfig_of_an_absent_api;
use super::cluster::{api_agent_args, LocalCluster};
use super::egress::log_of;
use super::netns::wait_until;
use super::node_taint::{register, said, stopped, tainted, PodTraffic};
use super::packets::{Topology, NODE_OUT_V4, POD_V4};
use crate::util::Scratch;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(30);
const METRICS: &str = "--metrics-addr=127.0.0.1:9743";
const CONFIG: &str = "nonMasqueradeCIDRs: [198.51.100.0/24]\n";
const NODE: &str = "node-a";

/// What the kubelet's graceful node shutdown writes first: the Node not Ready, "node is
/// shutting down" (the agent's own condition kept; read again when its write came between).
fn kubelet_says_shutting_down(cluster: &LocalCluster) {
    let path = format!("/api/v1/nodes/{NODE}");
    let mut answers = Vec::new();
    for _ in 0..5 {
        let (status, answer) = cluster.admin("GET", &path, None);
        assert_eq!(status, 200, "{answer}");
        let mut node: Value = serde_json::from_str(&answer).expect("a Node");
        let mut conditions: Vec<Value> = node["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions.retain(|c| c["type"] != "Ready");
        conditions.push(json!({
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "node is shutting down",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }));
        node["status"]["conditions"] = json!(conditions);
        let (status, answer) =
            cluster.admin("PUT", &format!("{path}/status"), Some(&node.to_string()));
        if status == 200 {
            return;
        }
        answers.push(format!("{status} {answer}"));
        if status != 409 {
            break;
        }
    }
    panic!("the Node's status was not written: {answers:?}");
}

fn ruleset(topo: &Topology) -> String {
    topo.node.exec("nft", &["list", "ruleset"]).stdout
}

/// Before the reboot: the last-known-good saved on the host path; a stop that leaves the node
/// up leaves the Node untainted; the kubelet's shutdown, then the stop, taints it.
fn before_the_reboot(dir: &Scratch, saved_dir: &str) {
    let mut topo = Topology::new();
    let cluster = LocalCluster::up(&topo.node);
    register(&cluster, NODE);
    cluster.put_base_config(CONFIG);
    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let mut args = api_agent_args(&["--backend=nftables"], &kubeconfig, NODE, METRICS);
    args.extend(["--node-taint", "--last-known-good-dir", saved_dir]);
    let log = dir.path.join("before-1.log");
    let pid = topo.node.spawn_ipmasq(&args, &log);
    let saved = Path::new(saved_dir).join("last-known-good.json");
    assert!(
        wait_until(PATIENCE, || !tainted(&cluster, NODE)
            && std::fs::read_to_string(&saved)
                .is_ok_and(|s| s.contains("198.51.100.0/24"))),
        "untainted, with the last-known-good on the host path:\n{}",
        log_of(&log)
    );
    // A stop of the pod alone (a rollout): the node stays up, so does the Node's state.
    stopped(&mut topo, pid, &log);
    assert!(!tainted(&cluster, NODE), "{}", log_of(&log));
    let log = dir.path.join("before-2.log");
    let pid = topo.node.spawn_ipmasq(&args, &log);
    said(&log, "the Node is untainted");
    kubelet_says_shutting_down(&cluster);
    stopped(&mut topo, pid, &log);
    said(&log, "the Node is tainted again: the node is shutting down");
    assert!(tainted(&cluster, NODE), "{}", log_of(&log));
    cluster.down();
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_rebooted_node_has_its_rules_from_the_host_path_before_its_pods_send() {
    super::netns::require_root();
    super::cluster::require_built();
    let dir = Scratch::new("reboot-guard");
    let saved_dir = dir.path.join("var-lib-ipmasq").display().to_string();
    before_the_reboot(&dir, &saved_dir);

    // The reboot: new namespaces (the kernel's rules gone, a new namespace inode), the host
    // path kept, the API not reachable yet.
    let mut topo = Topology::new();
    assert!(!ruleset(&topo).contains("ipmasq"), "a fresh namespace");
    let away = kubeconfig_of_an_absent_api(&dir).display().to_string();
    // No kubeconfig and no service account: `--offline` makes no client.
    let from_the_host_path = [
        "--backend=nftables",
        "--config-source=api",
        "--node-name",
        NODE,
        "--last-known-good-dir",
        &saved_dir,
    ];
    // The boot guard's unit, before the kubelet.
    let mut guard = vec!["agent", "--once", "--offline"];
    guard.extend(from_the_host_path);
    let started = Instant::now();
    let run = topo
        .node
        .command(&crate::util::binary(), &guard)
        .output()
        .expect("run the boot guard");
    let guard_took = started.elapsed();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "the boot guard failed:\n{stderr}");
    assert!(
        stderr.contains("applying the last-known-good config"),
        "{stderr}"
    );
    assert!(ruleset(&topo).contains("198.51.100.0/24"), "{stderr}");
    // The kubelet starts the pod already bound to the node: every datagram is masqueraded.
    let traffic = PodTraffic::start(&topo, &dir);
    std::thread::sleep(Duration::from_secs(1));
    let seen = traffic.stop();
    assert!(
        seen.contains(&format!("{NODE_OUT_V4}=")) && !seen.contains(POD_V4),
        "sources seen at the outside after the boot guard: {seen}"
    );

    // The agent alone (a DaemonSet's earliest start): the same rules at once, the API away.
    topo.node.sh("nft delete table ip ipmasq");
    let mut agent = api_agent_args(&["--backend=nftables"], &away, NODE, METRICS);
    agent.extend(["--last-known-good-dir", &saved_dir, "--node-taint"]);
    let log = dir.path.join("after.log");
    let started = Instant::now();
    let pid = topo.node.spawn_ipmasq(&agent, &log);
    let mut in_kernel = None;
    assert!(
        wait_until(PATIENCE, || {
            in_kernel = ruleset(&topo)
                .contains("198.51.100.0/24")
                .then(|| started.elapsed());
            in_kernel.is_some()
        }),
        "{}",
        log_of(&log)
    );
    said(&log, "applying the last-known-good config");
    stopped(&mut topo, pid, &log);
    let own_clock =
        super::api_mode::seconds_between(&log_of(&log), "ipmasq agent starting", "rules installed");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "after the reboot: the boot guard's pass took {:.1} ms from its spawn (ip netns exec) to its exit, rules in; the agent alone: {:.1} ms from its first log line to the rules installed, in the kernel {:.1} ms after its spawn (polled)",
        ms(guard_took),
        own_clock * 1e3,
        in_kernel.map_or(f64::NAN, ms)
    );
    // Without the boot guard's directory, the pass has nothing to apply and says so.
    let empty = dir.path.join("empty").display().to_string();
    let mut nothing = vec!["agent", "--once", "--offline"];
    nothing.extend(&from_the_host_path[..4]);
    nothing.extend(["--last-known-good-dir", &empty]);
    let run = topo
        .node
        .command(&crate::util::binary(), &nothing)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains("--offline: no last-known-good config to apply in"),
        "{stderr}"
    );
}
