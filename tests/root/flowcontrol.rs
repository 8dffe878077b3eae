//! The agents' FlowSchema and PriorityLevelConfiguration (packaging/kubernetes/flowcontrol) on the
//! local 1.20 kube-apiserver, which serves flowcontrol.apiserver.k8s.io/v1beta1: the v1beta1
//! rendering applied, every request of the agent's token is classified into them (the
//! `X-Kubernetes-PF-*` response headers), the admin's is not, the server's debug dump lists the
//! level, and a real agent's own requests are dispatched there (the server's APF metrics).

use super::cluster::LocalCluster;
use super::health::ADDR;
use super::netns::{kill, wait_until, Netns};
use crate::util::Scratch;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(30);
const RENDERING: &str = "packaging/kubernetes/flowcontrol/v1beta1/flowcontrol.yaml";
const API: &str = "/apis/flowcontrol.apiserver.k8s.io/v1beta1";
const FLOW_SCHEMA: &str = "X-Kubernetes-PF-FlowSchema-UID";
const PRIORITY_LEVEL: &str = "X-Kubernetes-PF-PriorityLevel-UID";

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Who asks: the agent's token or the admin's client certificate.
#[derive(Clone, Copy)]
enum Who {
    Agent,
    Admin,
}

/// The APF headers of the answer to `GET /api/v1/nodes`: (flow schema uid, priority level uid).
fn classified(cluster: &LocalCluster, who: Who) -> (String, String) {
    let pki = cluster.dir.path.join("pki");
    let mut command = Command::new("ip");
    command
        .args([
            "netns",
            "exec",
            cluster.netns(),
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-D",
            "-",
        ])
        .args(["--max-time", "10", "--cacert", &cluster.env["CA_FILE"]]);
    match who {
        Who::Agent => command.args([
            "-H",
            &format!("Authorization: Bearer {}", cluster.env["TOKEN"]),
        ]),
        Who::Admin => command
            .arg("--cert")
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key")),
    };
    let out = command
        .arg(format!("{}/api/v1/nodes", cluster.env["API_URL"]))
        .output()
        .expect("run curl");
    let headers = String::from_utf8_lossy(&out.stdout).to_string();
    let header = |name: &str| {
        headers
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no {name} header in the answer:\n{headers}"))
    };
    (header(FLOW_SCHEMA), header(PRIORITY_LEVEL))
}

/// Creates each object of the v1beta1 rendering as the admin; returns (flow schema uid,
/// priority level uid) as the server assigned them.
fn apply_rendering(cluster: &LocalCluster) -> (String, String) {
    let text = std::fs::read_to_string(repository().join(RENDERING)).expect("read the rendering");
    let mut uids = (String::new(), String::new());
    for object in serde_saphyr::from_multiple::<Value>(&text).expect("the rendering is YAML") {
        let plural = match object["kind"].as_str() {
            Some("FlowSchema") => "flowschemas",
            Some("PriorityLevelConfiguration") => "prioritylevelconfigurations",
            other => panic!("{RENDERING}: unexpected kind {other:?}"),
        };
        let (status, body) = cluster.admin(
            "POST",
            &format!("{API}/{plural}"),
            Some(&object.to_string()),
        );
        assert_eq!(status, 201, "create the {plural} of {RENDERING}: {body}");
        let created: Value = serde_json::from_str(&body).expect("the server answers JSON");
        let uid = created["metadata"]["uid"]
            .as_str()
            .expect("a uid")
            .to_string();
        match plural {
            "flowschemas" => uids.0 = uid,
            _ => uids.1 = uid,
        }
    }
    uids
}

/// The server's count of requests dispatched for the agents' flow schema and level.
fn dispatched(cluster: &LocalCluster) -> u64 {
    let (status, body) = cluster.admin("GET", "/metrics", None);
    assert_eq!(status, 200, "GET /metrics: {body}");
    body.lines()
        .filter(|line| line.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
        .filter(|line| {
            line.contains("flow_schema=\"ip-masq-agent\"")
                && line.contains("priority_level=\"ip-masq-agent\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|count| count as u64)
        .sum()
}

/// Before: the agent's token falls under the default schema of kube-system's service accounts
/// (priority level workload-high, shared with the controllers). After the v1beta1 rendering is
/// created: its requests carry our schema's and level's uids, the admin's do not, the debug dump
/// lists the level, and a real agent in API mode makes the dispatched count grow.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_agents_requests_are_queued_in_their_own_priority_level() {
    let mut ns = Netns::new("flowcontrol");
    let cluster = LocalCluster::up(&ns);
    let (before, _) = classified(&cluster, Who::Agent);
    let default = format!("{API}/flowschemas/kube-system-service-accounts");
    let (status, default) = cluster.admin("GET", &default, None);
    assert_eq!(
        status, 200,
        "the default schema of kube-system's accounts: {default}"
    );
    let default: Value = serde_json::from_str(&default).expect("a FlowSchema");
    assert_eq!(
        default["metadata"]["uid"],
        before.as_str(),
        "without ours, the agent's requests fall under kube-system-service-accounts"
    );
    let (schema, level) = apply_rendering(&cluster);
    let mut last = (String::new(), String::new());
    assert!(
        wait_until(PATIENCE, || {
            last = classified(&cluster, Who::Agent);
            last == (schema.clone(), level.clone())
        }),
        "the agent's requests are not classified as ip-masq-agent ({schema}, {level}): {last:?}"
    );
    let (admin_schema, admin_level) = classified(&cluster, Who::Admin);
    assert!(
        admin_schema != schema && admin_level != level,
        "the admin's request is classified as the agents'"
    );
    let (status, dump) = cluster.admin(
        "GET",
        "/debug/api_priority_and_fairness/dump_priority_levels",
        None,
    );
    assert_eq!(status, 200, "the debug dump: {dump}");
    eprintln!("{dump}");
    assert!(
        dump.lines().any(|line| line.starts_with("ip-masq-agent")),
        "the dump lists no ip-masq-agent level:\n{dump}"
    );

    let counted = dispatched(&cluster);
    assert!(
        counted > 0,
        "the curl requests above were not counted for ip-masq-agent"
    );
    cluster.put_base_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    let logs = Scratch::new("flowcontrol-agent");
    let log = logs.path.join("agent.log");
    let kubeconfig = cluster.agent_kubeconfig().display().to_string();
    let metrics = format!("--metrics-addr={ADDR}");
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--backend=nftables",
            "--config-source=api",
            "--kubeconfig",
            &kubeconfig,
            "--node-name",
            "node-a",
            &metrics,
        ],
        &log,
    );
    let grew = wait_until(PATIENCE, || dispatched(&cluster) > counted);
    kill(pid, "TERM");
    ns.wait_daemon(pid, PATIENCE);
    assert!(
        grew,
        "the agent's own requests were not dispatched as ip-masq-agent ({counted} before):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
