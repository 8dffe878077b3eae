//! API mode's other inputs against a real control plane: node pools (`ip-masq-agent-*`
//! ConfigMaps with `ipmasq.io/node-selector`) apply on a node whose labels match only, a pool
//! present at start is in the first rules applied (never the base alone first), relabelling the
//! Node moves it (the latency from the update answered to the kernel reported); GKE's
//! EgressNATPolicy (its CRD created by the test after the agent started, from
//! tests/data/egressnatpolicy-crd.json) keeps its destinations' source address, proven with
//! packets from a pod namespace through the node to an outside namespace, and its deletion
//! masquerades again.

use super::api_mode::{nft_monitor, ApiNode, Backend, PATIENCE};
use super::netns::{wait_until, Netns};
use super::packets::source_seen_between;
use std::time::{Duration, Instant};

const NODES: &str = "/api/v1/nodes";
const NODE: &str = "/api/v1/nodes/node-a";
const CONFIGMAPS: &str = "/api/v1/namespaces/kube-system/configmaps";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const POLICIES: &str = "/apis/networking.gke.io/v1/egressnatpolicies";

/// Creates the Node `node-a` (the agent's `--node-name`) with `labels`.
fn create_node(node: &ApiNode, labels: serde_json::Value) {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-a", "labels": labels},
    });
    let (status, answer) = node.cluster.admin("POST", NODES, Some(&body.to_string()));
    assert_eq!(status, 201, "create the Node: {answer}");
}

/// Replaces the Node's labels (an update of the whole object, as read).
fn relabel_node(node: &ApiNode, labels: serde_json::Value) {
    let (status, answer) = node.cluster.admin("GET", NODE, None);
    assert_eq!(status, 200, "read the Node: {answer}");
    let mut object: serde_json::Value = serde_json::from_str(&answer).expect("the Node's JSON");
    object["metadata"]["labels"] = labels;
    let (status, answer) = node.cluster.admin("PUT", NODE, Some(&object.to_string()));
    assert_eq!(status, 200, "relabel the Node: {answer}");
}

/// Creates the pool ConfigMap `name` selecting `selector` with `config`.
fn create_pool(node: &ApiNode, name: &str, selector: &str, config: &str) {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "annotations": {"ipmasq.io/node-selector": selector},
        },
        "data": {"config": config},
    });
    let (status, answer) = node
        .cluster
        .admin("POST", CONFIGMAPS, Some(&body.to_string()));
    assert_eq!(status, 201, "create the pool {name}: {answer}");
}

/// A pool present when the agent starts is in the first config it accepts (the Node, the
/// ConfigMaps and the policies listed first); another pool's selector does not match the node
/// and stays out. Relabelling the Node moves it from one pool to the other: the time from the
/// update answered to the element in the kernel (`nft monitor`) is reported, within the
/// suite's deadline. The provenance and the last-known-good name the pool in force.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_pool_applies_on_its_nodes_only_from_the_first_rules_and_a_relabel_moves_it() {
    let mut node = ApiNode::new("api-pools", Backend::Nftables);
    node.put_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    create_pool(
        &node,
        "ip-masq-agent-gpu",
        "pool=gpu",
        "nonMasqueradeCIDRs: [203.0.113.0/24]\n",
    );
    create_pool(
        &node,
        "ip-masq-agent-cpu",
        "pool in (cpu)",
        "nonMasqueradeCIDRs: [100.64.0.0/10]\n",
    );
    create_node(&node, serde_json::json!({"pool": "gpu"}));
    node.start_agent();
    node.wait_rules("the base and the gpu pool", |r| {
        r.contains("198.51.100.0/24") && r.contains("203.0.113.0/24")
    });
    let log = node.log();
    let accepted: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("config accepted"))
        .collect();
    assert_eq!(
        accepted.len(),
        1,
        "one config accepted, the base with its pool, never the base alone first:\n{log}"
    );
    assert!(
        accepted[0].contains("203.0.113.0/24") && accepted[0].contains("+ pools ip-masq-agent-gpu"),
        "{log}"
    );
    assert!(!node.rules().contains("100.64.0.0/10"), "{}", node.rules());

    let monitor = nft_monitor(&mut node.ns);
    assert!(
        wait_until(PATIENCE, || {
            node.ns
                .sh("nft add table ip probe && nft delete table ip probe");
            std::iter::from_fn(|| monitor.recv_timeout(Duration::from_millis(100)).ok())
                .any(|(_, line)| line.contains("probe"))
        }),
        "nft monitor never reported a commit"
    );
    let sent = Instant::now();
    relabel_node(&node, serde_json::json!({"pool": "cpu"}));
    let answered = Instant::now();
    let deadline = answered + PATIENCE;
    let seen = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match monitor.recv_timeout(left) {
            Ok((at, line)) if line.contains("element") && line.contains("100.64.0.0/10") => {
                break at
            }
            Ok(_) => {}
            Err(_) => panic!(
                "the relabelled node never got the cpu pool:\n{}\n{}",
                node.rules(),
                node.log()
            ),
        }
    };
    eprintln!(
        "API mode, Node relabelled (pool=gpu -> pool=cpu): {:.1} ms from the update sent, {:.1} ms from its answer read, to the pool's element in the kernel (nft monitor)",
        seen.saturating_duration_since(sent).as_secs_f64() * 1e3,
        seen.saturating_duration_since(answered).as_secs_f64() * 1e3,
    );
    node.wait_rules("the gpu pool gone", |r| {
        !r.contains("203.0.113.0/24") && r.contains("198.51.100.0/24")
    });
    node.wait_log("+ pools ip-masq-agent-cpu");
    assert!(
        wait_until(PATIENCE, || node.last_known_good().is_some_and(|saved| {
            saved.contains("\"name\":\"ip-masq-agent-cpu\"")
        })),
        "the last-known-good keeps the pool: {:?}",
        node.last_known_good()
    );
    // The state file names every input and holds the digest a user recomputes with
    // sha256sum (docs/guide/api-mode.md: the digest of the config in force).
    let recomputed = node.ns.sh(
        "h() { sha256sum | cut -d' ' -f1; }; \
         { printf '%s  configmaps/kube-system/ip-masq-agent\\n' \"$(printf 'nonMasqueradeCIDRs: [198.51.100.0/24]\\n' | h)\"; \
           printf '%s  configmaps/kube-system/ip-masq-agent-cpu\\n' \"$(printf 'nonMasqueradeCIDRs: [100.64.0.0/10]\\n' | h)\"; } | h",
    );
    let names_the_pool = |record: &serde_json::Value| {
        record["path"].as_str().is_some_and(|p| {
            p.contains("(resourceVersion ") && p.ends_with("+ pools ip-masq-agent-cpu")
        })
    };
    assert!(
        wait_until(PATIENCE, || names_the_pool(&config_read(&node.ns))),
        "the state file never named the pool: {}",
        config_read(&node.ns)
    );
    let record = config_read(&node.ns);
    assert_eq!(record["digest"], recomputed.trim(), "{record}");
    // No pool selects the node any more: the base alone.
    relabel_node(&node, serde_json::json!({}));
    node.wait_rules("the base alone", |r| {
        !r.contains("100.64.0.0/10") && r.contains("198.51.100.0/24")
    });
}

/// The state file's `configRead` (where the config in force came from, and its digest).
fn config_read(ns: &Netns) -> serde_json::Value {
    let path = std::fs::read_dir(ns.state_dir())
        .expect("the state directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("agent-net") && n.ends_with(".json") && !n.ends_with("-config.json")
            })
        })
        .expect("the agent's state file");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read the state file"))
            .expect("the state file's JSON");
    state["configRead"].clone()
}

/// The pod, node and outside namespaces wired as in packets.rs (IPv4): the node's own
/// namespace is the control plane's and the agent's.
struct Wires {
    pod: Netns,
    outside: Netns,
}

const POD: &str = "192.168.77.2";
const OUTSIDE_KEEP: &str = "198.51.100.2";
const NODE_ON_KEEP: &str = "198.51.100.1";

impl Wires {
    fn new(node: &Netns) -> Wires {
        let pod = Netns::new("pod");
        let outside = Netns::new("out");
        node.sh(&format!(
            "ip link add vpod type veth peer name eth0 netns {pod} && \
             ip link add vout type veth peer name eth0 netns {out} && \
             ip addr add 192.168.77.1/24 dev vpod && \
             ip addr add 203.0.113.1/24 dev vout && ip addr add {NODE_ON_KEEP}/24 dev vout && \
             ip link set vpod up && ip link set vout up && sysctl -qw net.ipv4.ip_forward=1",
            pod = pod.name,
            out = outside.name
        ));
        pod.sh(&format!(
            "ip addr add {POD}/24 dev eth0 && ip link set eth0 up && \
             ip route add default via 192.168.77.1"
        ));
        outside.sh(&format!(
            "ip addr add 203.0.113.2/24 dev eth0 && ip addr add {OUTSIDE_KEEP}/24 dev eth0 && \
             ip link set eth0 up"
        ));
        Wires { pod, outside }
    }

    fn source_seen(&self) -> String {
        source_seen_between(&self.pod, &self.outside, OUTSIDE_KEEP, None)
    }
}

/// Without the CRD the agent starts ("listed, none"); the CRD created afterwards is found by
/// the watcher's retries, and a policy keeping 198.51.100.0/24 makes the pod's packets to
/// 198.51.100.2 keep the pod's address; the policy deleted, they carry the node's again.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn an_egress_nat_policy_keeps_its_destinations_source_and_its_deletion_masquerades_again() {
    let mut node = ApiNode::new("api-egressnat", Backend::Nftables);
    let wires = Wires::new(&node.ns);
    node.put_config("nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    create_node(&node, serde_json::json!({}));
    node.start_agent();
    node.wait_log("the EgressNATPolicy CRD is not served");
    node.wait_rules("the base", |r| r.contains("10.0.0.0/8"));
    assert_eq!(wires.source_seen(), NODE_ON_KEEP, "no policy: masqueraded");

    let crd = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/egressnatpolicy-crd.json"),
    )
    .expect("the CRD's manifest");
    let (status, answer) = node.cluster.admin("POST", CRDS, Some(&crd));
    assert_eq!(status, 201, "create the CRD: {answer}");
    assert!(
        wait_until(PATIENCE, || node.cluster.admin("GET", POLICIES, None).0
            == 200),
        "the CRD is never served"
    );
    let policy = serde_json::json!({
        "apiVersion": "networking.gke.io/v1",
        "kind": "EgressNATPolicy",
        "metadata": {"name": "keep-documentation-net"},
        "spec": {"action": "NoSNAT", "destinations": [{"cidr": "198.51.100.0/24"}]},
    });
    let (status, answer) = node
        .cluster
        .admin("POST", POLICIES, Some(&policy.to_string()));
    assert_eq!(status, 201, "create the policy: {answer}");
    let created = Instant::now();
    // The watcher looks again with its backoff (at most a minute between tries, with its jitter; the
    // CRD is created a few seconds after the agent started, when the tries are seconds apart): the
    // longest gap the backoff can reach, twice, and the suite's patience.
    assert!(
        wait_until(Duration::from_secs(120) + PATIENCE, || node
            .rules()
            .contains("198.51.100.0/24")),
        "the policy never reached the kernel:\n{}\n{}",
        node.rules(),
        node.log()
    );
    eprintln!(
        "API mode, EgressNATPolicy CRD created after the agent started: its policy in the kernel {:.1} s after the policy was created (the watcher's retry)",
        created.elapsed().as_secs_f64()
    );
    node.wait_log("+ egressnatpolicies keep-documentation-net");
    assert_eq!(
        wires.source_seen(),
        POD,
        "the policy keeps the pod's address"
    );

    let (status, answer) = node.cluster.admin(
        "DELETE",
        &format!("{POLICIES}/keep-documentation-net"),
        None,
    );
    assert_eq!(status, 200, "delete the policy: {answer}");
    node.wait_rules("the policy gone", |r| !r.contains("198.51.100.0/24"));
    assert_eq!(
        wires.source_seen(),
        NODE_ON_KEEP,
        "the policy deleted: masqueraded again"
    );
}
