//! The pod's name in the SNAT log, against the real kube-apiserver and with packets: an agent
//! in API mode with `--snat-log` watches its node's Pods; pod `a` holds the pod namespace's
//! address and sends flows, is deleted, and pod `b` gets the same address at once and sends
//! flows too; then every flow's entry is deleted, so a's `end`s come after b holds the
//! address. Every line names the right pod (namespace/name and uid) and the node; `who`
//! names the pod of a translated address, and `who --pod` finds each pod's flows and no
//! other's. The Pods read is the ClusterRole's of packaging/kubernetes/api-mode/rbac.yaml.

use super::cluster::{agent_audit_events, api_agent_args, LocalCluster};
use super::egress::{count_in_log, log_of};
use super::netns::{wait_until, PYTHON};
use super::packets::{Topology, MASQ_V4, POD_V4};
use crate::util::Scratch;
use std::path::Path;
use std::time::{Duration, Instant};

const METRICS: &str = "--metrics-addr=127.0.0.1:9741";
const NODE: &str = "node-a";
/// A deadline for what a loaded machine may take; never waited out when all goes well.
const DEADLINE: Duration = Duration::from_secs(30);
/// Flows each pod sends.
const FLOWS: u16 = 20;

const PODS: &str = "/api/v1/namespaces/default/pods";

/// The namespace's `default` ServiceAccount, which the ServiceAccount admission plugin
/// looks up for every Pod (no controller manager runs here to make it).
fn default_service_account(cluster: &LocalCluster) {
    let body = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": "default"},
    });
    let path = "/api/v1/namespaces/default/serviceaccounts";
    let (status, answer) = cluster.admin("POST", path, Some(&body.to_string()));
    assert!(status == 201 || status == 409, "{answer}");
}

/// Creates pod `name` on this node and gives it the pod namespace's address (the kubelet's
/// status update: a PUT of the status); its uid.
fn pod_with_the_address(cluster: &LocalCluster, name: &str) -> String {
    let body = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "example.invalid/c"}]},
    });
    let (status, answer) = cluster.admin("POST", PODS, Some(&body.to_string()));
    assert_eq!(status, 201, "create pod {name}: {answer}");
    let mut pod: serde_json::Value = serde_json::from_str(&answer).unwrap();
    pod["status"] = serde_json::json!({
        "phase": "Running", "podIP": POD_V4, "podIPs": [{"ip": POD_V4}],
    });
    let path = format!("{PODS}/{name}/status");
    let (status, answer) = cluster.admin("PUT", &path, Some(&pod.to_string()));
    assert_eq!(status, 200, "status of pod {name}: {answer}");
    pod["metadata"]["uid"].as_str().unwrap().to_string()
}

/// Sends one UDP datagram from each of `ports` of the pod namespace to the outside: each a
/// masqueraded flow of its own.
fn flows_from(topo: &Topology, ports: std::ops::Range<u16>) {
    let script = format!(
        "import socket\n\
         for port in range({}, {}):\n\
         \x20   s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         \x20   s.bind(('{POD_V4}', port)); s.sendto(b'x', ('{MASQ_V4}', 5001)); s.close()\n",
        ports.start, ports.end
    );
    let run = topo.pod.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// The log's lines of one event (`new` or `end`).
fn lines_of(log: &Path, event: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["event"] == event)
        .collect()
}

fn pod_port(line: &serde_json::Value) -> u16 {
    let src = line["src"].as_str().unwrap();
    src.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// `who ARGS --log LOG -o json`'s flows.
fn who(topo: &Topology, log: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let log_flag = format!("--log={}", log.display());
    let mut full = vec!["who"];
    full.extend_from_slice(args);
    full.extend_from_slice(&[&log_flag, "-o", "json"]);
    let run = topo.node.ipmasq(&full);
    assert_eq!(run.code, 0, "who {args:?}: {} {}", run.stdout, run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    json["flows"].as_array().cloned().unwrap_or_default()
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn every_line_names_its_pod_across_an_address_reused_at_once() {
    let mut topo = Topology::new();
    let dir = Scratch::new("pod-names");
    let audit_log = dir.path.join("audit.log");
    let policy =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/audit-policy.yaml");
    let cluster = LocalCluster::up_with(
        &topo.node,
        &[
            &format!("--audit-policy-file={}", policy.display()),
            &format!("--audit-log-path={}", audit_log.display()),
        ],
    );
    cluster.put_base_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    let log = dir.path.join("snat.log");
    let daemon_log = dir.path.join("agent.log");
    default_service_account(&cluster);
    let uid_a = pod_with_the_address(&cluster, "a");

    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let log_flag = format!("--snat-log={}", log.display());
    let mut args = api_agent_args(&["--backend=nftables"], &kubeconfig, NODE, METRICS);
    args.push(&log_flag);
    topo.node.spawn_ipmasq(&args, &daemon_log);
    let heard = |pod: &str| {
        let line = format!("pod=default/{pod} ");
        let daemon_log = &daemon_log;
        move || {
            log_of(daemon_log)
                .lines()
                .any(|l| l.contains(&line) && l.contains(POD_V4))
        }
    };
    assert!(
        wait_until(DEADLINE, || count_in_log(&daemon_log, "rules installed")
            >= 1)
            && wait_until(DEADLINE, heard("a")),
        "the agent neither installed its rules nor heard of pod a:\n{}",
        log_of(&daemon_log)
    );

    flows_from(&topo, 20_000..20_000 + FLOWS);
    // The address changes hands: a goes (as a kubelet's final delete), b gets it at once.
    let reused = Instant::now();
    let (status, answer) = cluster.admin(
        "DELETE",
        &format!("{PODS}/a"),
        Some(r#"{"gracePeriodSeconds":0}"#),
    );
    assert_eq!(status, 200, "delete pod a: {answer}");
    let uid_b = pod_with_the_address(&cluster, "b");
    let gap = reused.elapsed();
    assert!(
        wait_until(DEADLINE, heard("b")),
        "the agent did not hear of pod b:\n{}",
        log_of(&daemon_log)
    );
    flows_from(&topo, 20_100..20_100 + FLOWS);
    assert!(
        wait_until(DEADLINE, || lines_of(&log, "new").len()
            >= 2 * FLOWS as usize),
        "{} new lines:\n{}",
        lines_of(&log, "new").len(),
        log_of(&daemon_log)
    );
    // Every flow ends now (its entry deleted): a's ends come after b took the address.
    topo.node.sh(&format!(
        "conntrack -D -p udp -s {POD_V4} >/dev/null 2>&1 || true"
    ));
    assert!(
        wait_until(DEADLINE, || lines_of(&log, "end").len()
            >= 2 * FLOWS as usize),
        "{} end lines:\n{}",
        lines_of(&log, "end").len(),
        log_of(&daemon_log)
    );

    let lines = lines_of(&log, "new");
    assert_eq!(lines.len(), 2 * FLOWS as usize);
    let ends = lines_of(&log, "end");
    assert_eq!(ends.len(), 2 * FLOWS as usize);
    for line in lines.iter().chain(&ends) {
        let (pod, uid) = if pod_port(line) < 20_100 {
            ("default/a", &uid_a)
        } else {
            ("default/b", &uid_b)
        };
        assert_eq!(line["pod"], pod, "{line}");
        assert_eq!(line["uid"], uid.as_str(), "{line}");
        assert_eq!(line["node"], NODE, "{line}");
    }
    // By address: one of b's translated ports names b.
    let of_b = lines.iter().find(|l| l["pod"] == "default/b").unwrap();
    let found = who(&topo, &log, &[of_b["translated"].as_str().unwrap()]);
    assert!(
        found
            .iter()
            .any(|f| f["pod"] == "default/b" && f["src"] == of_b["src"]),
        "{found:?}"
    );
    // By pod: each pod's flows, and no other's.
    for (pod, ports) in [("default/a", 20_000..20_100), ("default/b", 20_100..20_200)] {
        let flows = who(&topo, &log, &["--pod", pod]);
        assert_eq!(flows.len(), FLOWS as usize, "{pod}: {flows:?}");
        assert!(
            flows.iter().all(|f| ports.contains(&pod_port(f))
                && !f["start"].is_null()
                && !f["end"].is_null()),
            "{pod}: {flows:?}"
        );
    }
    // Only this node's Pods: every read of Pods is a list or a watch with its field selector
    // (the audit log shows a watch once it ends; the list that starts it is there).
    let pod_reads: Vec<String> = agent_audit_events(&audit_log)
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "pods")
        .map(|e| {
            let verb = e["verb"].as_str().unwrap_or("");
            format!("{verb} {}", e["requestURI"].as_str().unwrap_or(""))
        })
        .collect();
    let selector = format!("fieldSelector=spec.nodeName%3D{NODE}");
    assert_eq!(
        pod_reads.iter().filter(|r| r.starts_with("list ")).count(),
        1,
        "{pod_reads:?}"
    );
    assert!(
        pod_reads
            .iter()
            .all(|r| (r.starts_with("list ") || r.starts_with("watch ")) && r.contains(&selector)),
        "{pod_reads:?}"
    );
    eprintln!("..the agent's reads of Pods: {pod_reads:?}");
    eprintln!(
        "..address reused after {gap:?} (delete a, create b, b's status); {} new and {} end lines, each naming its pod",
        lines.len(),
        ends.len()
    );
}
