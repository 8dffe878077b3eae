//! `--node-taint` against the real API server (`scripts/local-cluster`, an audit log of the
//! agent's requests) and the kernel: a Node registered with `node.ipmasq.io/agent-not-ready`
//! keeps it while the agent has no usable config; a stand-in scheduler starts the pod's traffic only
//! once the taint is gone, and not one packet leaves with the pod's address; the Node's other
//! taint and another Node's taint are never touched (the audit log: the agent patches its own
//! Node only); a stop with `--cleanup-on-exit` puts the taint back; a SIGKILL and a restart
//! leave the rules (a pod sending across them: no datagram with its address) and write no
//! taint (no flap).

use super::cluster::{agent_requests, api_agent_args, LocalCluster};
use super::egress::{count_in_log, log_of};
use super::netns::{kill, wait_until, PYTHON};
use super::packets::{start_receiver_in, Topology, MASQ_V4, NODE_OUT_V4, POD_V4};
use crate::util::Scratch;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(30);
const TAINT: &str = "node.ipmasq.io/agent-not-ready";
const METRICS: &str = "--metrics-addr=127.0.0.1:9742";
const CONFIG: &str = "nonMasqueradeCIDRs: [198.51.100.0/24]\n";
/// Refused (host bits set): with no config before it, the agent has nothing to enforce.
const INVALID: &str = "nonMasqueradeCIDRs: [203.0.113.7/24]\n";

/// A Node as the kubelet registers it with `--register-with-taints`: ours, and another.
pub(super) fn register(cluster: &LocalCluster, name: &str) {
    let body = json!({"apiVersion": "v1", "kind": "Node",
    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    "spec": {"taints": [
        {"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"},
        {"key": TAINT, "effect": "NoSchedule"},
    ]}});
    let (status, answer) = cluster.admin("POST", "/api/v1/nodes", Some(&body.to_string()));
    assert_eq!(status, 201, "register {name}: {answer}");
}

fn taint_keys(cluster: &LocalCluster, name: &str) -> Vec<String> {
    let (status, answer) = cluster.admin("GET", &format!("/api/v1/nodes/{name}"), None);
    assert_eq!(status, 200, "{answer}");
    let node: Value = serde_json::from_str(&answer).expect("a Node");
    node["spec"]["taints"]
        .as_array()
        .map(|taints| {
            taints
                .iter()
                .map(|t| t["key"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn tainted(cluster: &LocalCluster, name: &str) -> bool {
    taint_keys(cluster, name).iter().any(|key| key == TAINT)
}

/// The agent's writes in the audit log: (verb, resource[/subresource], name).
fn agent_writes(audit_log: &Path) -> Vec<(String, String, String)> {
    agent_requests(audit_log)
        .into_iter()
        .filter(|(verb, _, _)| ["create", "update", "patch", "delete"].contains(&verb.as_str()))
        .collect()
}

fn taint_patches(audit_log: &Path) -> usize {
    agent_writes(audit_log)
        .iter()
        .filter(|(verb, resource, _)| verb == "patch" && resource == "nodes")
        .count()
}

/// The pod's traffic as a stand-in scheduler would allow it: one datagram to a masqueraded
/// destination a millisecond while `sending` exists; the outside prints each source.
pub(super) struct PodTraffic {
    receiver: std::process::Child,
    ready: PathBuf,
    flag: PathBuf,
}

impl PodTraffic {
    pub(super) fn start(topo: &Topology, dir: &Scratch) -> PodTraffic {
        let receiver = format!(
            "import socket,collections\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.bind(('{MASQ_V4}',40996))\n\
             open('READY','w').close()\n\
             s.settimeout(3)\n\
             seen=collections.Counter()\n\
             try:\n    while True:\n        d,a=s.recvfrom(16)\n        seen[a[0]]+=1\n\
             except socket.timeout:\n    pass\n\
             print(' '.join(f'{{k}}={{v}}' for k,v in seen.items()))\n"
        );
        let (receiver, ready) = start_receiver_in(&topo.outside, &receiver);
        let flag = dir.write("sending", "");
        let sender = format!(
            "import os,socket,time\n\
             while os.path.exists('{flag}'):\n\
             \x20   s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             \x20   s.sendto(b'x',('{MASQ_V4}',40996))\n\
             \x20   s.close()\n\
             \x20   time.sleep(0.001)\n",
            flag = flag.display()
        );
        let child = topo
            .pod
            .command(Path::new(PYTHON), &["-c", &sender])
            .spawn()
            .expect("the pod's sender");
        drop(child);
        PodTraffic {
            receiver,
            ready,
            flag,
        }
    }

    /// Stops sending; the sources the outside saw, with their counts.
    pub(super) fn stop(self) -> String {
        let _ = std::fs::remove_file(&self.flag);
        let out = self.receiver.wait_with_output().expect("the receiver");
        let _ = std::fs::remove_file(&self.ready);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_node_is_tainted_until_its_rules_are_in_and_only_its_own_taint_moves() {
    super::netns::require_root();
    let mut topo = Topology::new();
    let dir = Scratch::new("node-taint");
    let audit_log = dir.path.join("audit.log");
    let policy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/audit-policy.yaml");
    let cluster = LocalCluster::up_with(
        &topo.node,
        &[
            &format!("--audit-policy-file={}", policy.display()),
            &format!("--audit-log-path={}", audit_log.display()),
        ],
    );
    register(&cluster, "node-a");
    register(&cluster, "node-b");
    // What the Node holds besides ours (the API server's admission adds node.kubernetes.io/
    // not-ready to a Node registered without a Ready condition).
    let others: Vec<String> = taint_keys(&cluster, "node-a")
        .into_iter()
        .filter(|key| key != TAINT)
        .collect();
    assert!(
        others.iter().any(|key| key == "example.com/gpu"),
        "{others:?}"
    );
    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let mut args = api_agent_args(&["--backend=nftables"], &kubeconfig, "node-a", METRICS);
    args.push("--node-taint");
    let log = dir.path.join("agent-1.log");
    // A config it refuses, and none before it: nothing to enforce, the taint stays.
    cluster.put_base_config(INVALID);
    let pid = topo.node.spawn_ipmasq(&args, &log);
    assert!(
        wait_until(PATIENCE, || count_in_log(&log, "the Node is tainted") >= 1),
        "the agent never said it keeps the taint:\n{}",
        log_of(&log)
    );
    assert!(tainted(&cluster, "node-a"), "untainted without a config");
    // The config arrives: the stand-in scheduler waits for the taint to go, then the pod sends.
    cluster.put_base_config(CONFIG);
    assert!(
        wait_until(PATIENCE, || !tainted(&cluster, "node-a")),
        "the taint never went:\n{}",
        log_of(&log)
    );
    let traffic = PodTraffic::start(&topo, &dir);
    std::thread::sleep(Duration::from_secs(1));
    let seen = traffic.stop();
    assert!(
        seen.contains(&format!("{NODE_OUT_V4}=")) && !seen.contains(POD_V4),
        "sources seen at the outside once the taint went: {seen}"
    );
    assert_eq!(
        taint_keys(&cluster, "node-a"),
        others,
        "the other taints kept"
    );
    eprintln!("{}", timeline(&log));

    // A stop with --cleanup-on-exit removes the rules and puts the taint back.
    stopped(&mut topo, pid, &log);
    let mut cleanup_args = args.clone();
    cleanup_args.push("--cleanup-on-exit");
    let log = dir.path.join("agent-2.log");
    let pid = topo.node.spawn_ipmasq(&cleanup_args, &log);
    said(&log, "the Node is untainted");
    stopped(&mut topo, pid, &log);
    assert!(
        tainted(&cluster, "node-a"),
        "the taint is back:\n{}",
        log_of(&log)
    );

    // A restart removes it again; a SIGKILL and a restart then write no taint at all.
    let log = dir.path.join("agent-3.log");
    let pid = topo.node.spawn_ipmasq(&args, &log);
    assert!(
        wait_until(PATIENCE, || !tainted(&cluster, "node-a")),
        "{}",
        log_of(&log)
    );
    // The pod sends across the crash and the restart: the rules stay, no datagram leaks.
    let traffic = PodTraffic::start(&topo, &dir);
    kill(pid, "KILL");
    let _ = topo.node.wait_daemon(pid, PATIENCE);
    let patches = taint_patches(&audit_log);
    let log = dir.path.join("agent-4.log");
    let pid = topo.node.spawn_ipmasq(&args, &log);
    said(&log, "the Node is untainted");
    let seen = traffic.stop();
    assert!(
        seen.contains(&format!("{NODE_OUT_V4}=")) && !seen.contains(POD_V4),
        "sources seen at the outside across the crash and restart: {seen}"
    );
    assert!(!tainted(&cluster, "node-a"));
    assert_eq!(
        taint_patches(&audit_log),
        patches,
        "no taint written after a crash and restart"
    );
    kill(pid, "TERM");
    let _ = topo.node.wait_daemon(pid, PATIENCE);

    // node-b was never written: the agent's writes name node-a alone.
    assert!(tainted(&cluster, "node-b"));
    let writes = agent_writes(&audit_log);
    assert!(
        writes
            .iter()
            .all(|(_, resource, name)| !resource.starts_with("nodes") || name == "node-a"),
        "{writes:?}"
    );
    assert!(
        writes.iter().any(|(verb, resource, name)| verb == "patch"
            && resource == "nodes"
            && name == "node-a"),
        "{writes:?}"
    );
    cluster.down();
}

/// Waits until the agent's log says `needle`.
pub(super) fn said(log: &Path, needle: &str) {
    assert!(
        wait_until(PATIENCE, || count_in_log(log, needle) >= 1),
        "{needle:?} never said:\n{}",
        log_of(log)
    );
}

/// SIGTERM, and a clean exit.
pub(super) fn stopped(topo: &mut Topology, pid: u32, log: &Path) {
    kill(pid, "TERM");
    assert_eq!(
        topo.node.wait_daemon(pid, PATIENCE),
        Some(0),
        "{}",
        log_of(log)
    );
}

/// The agent's first sync that wrote, and the taint's removal, from its log's timestamps.
fn timeline(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let at = |needle: &str| {
        text.lines()
            .find(|line| line.contains(needle))
            .and_then(|line| line.split_whitespace().next())
            .map(str::to_string)
            .unwrap_or_default()
    };
    format!(
        "rules installed at {}; untainted (the patch answered) at {}",
        at("\"rules installed\""),
        at("the Node is untainted")
    )
}
