//! What the agent's token can do to the cluster with the shipped RBAC alone
//! (packaging/kubernetes/api-mode/rbac.yaml, no admission policy: the local 1.20 server cannot
//! run packaging/kubernetes/admission), tried against the real kube-apiserver as a compromised
//! agent on node-a would: every forgery's outcome (applied, accepted but ignored, refused),
//! asserted as one exact list, so this file documents what a cluster without the policy grants;
//! and with the read-only overlay's roles, every one refused.

use super::cluster::LocalCluster;
use super::netns::Netns;
use serde_json::{json, Value};
use std::process::Command;

const STRATEGIC: &str = "application/strategic-merge-patch+json";
const JSON: &str = "application/json";
const FORGED: &str = "203.0.113.66";

/// What became of one forgery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Answered 2xx, and the server now holds it.
    Applied,
    /// Answered 2xx, but the server kept the old value (the status subresource resets the spec).
    Ignored,
    /// Answered 403 by RBAC.
    Refused,
}

/// One request the token should not be able to make, and how to see whether it took effect.
struct Forgery {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Value,
    /// Whether the server holds the change, asked as the admin afterwards.
    took: fn(&LocalCluster) -> bool,
}

/// A request with a bearer token and a content type of our choice (curl in the cluster's
/// namespace): (status, body).
fn send(cluster: &LocalCluster, forgery: &Forgery) -> (u16, String) {
    let url = format!("{}{}", cluster.env["API_URL"], forgery.path);
    let out = Command::new("ip")
        .args(["netns", "exec", cluster.netns(), "curl", "-sS"])
        .args(["--max-time", "10", "--cacert", &cluster.env["CA_FILE"]])
        .args(["-X", forgery.method, "-w", "\n%{http_code}"])
        .args([
            "-H",
            &format!("Authorization: Bearer {}", cluster.env["TOKEN"]),
        ])
        .args(["-H", &format!("Content-Type: {}", forgery.content_type)])
        .args(["--data-binary", &forgery.body.to_string()])
        .arg(&url)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_string())
}

fn node(cluster: &LocalCluster, name: &str) -> Value {
    let (status, body) = cluster.admin("GET", &format!("/api/v1/nodes/{name}"), None);
    assert_eq!(status, 200, "GET node {name}: {body}");
    serde_json::from_str(&body).expect("a Node")
}

fn condition(node: &Value, kind: &str) -> Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind).cloned())
        .unwrap_or(Value::Null)
}

fn exists(cluster: &LocalCluster, path: &str) -> bool {
    cluster.admin("GET", path, None).0 == 200
}

/// Two Nodes as a kubelet leaves them: labels, addresses, capacity, a Ready condition.
fn create_nodes(cluster: &LocalCluster) {
    for name in ["node-a", "node-b"] {
        let body = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}});
        let (status, answer) = cluster.admin("POST", "/api/v1/nodes", Some(&body.to_string()));
        assert_eq!(status, 201, "create {name}: {answer}");
        let status_body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "192.0.2.2"}],
                "capacity": {"cpu": "4", "pods": "110"},
                "allocatable": {"cpu": "4", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let (status, answer) = cluster.admin(
            "PUT",
            &format!("/api/v1/nodes/{name}/status"),
            Some(&status_body.to_string()),
        );
        assert_eq!(status, 200, "set {name}'s status: {answer}");
    }
}

/// A core Event about `about`. The server takes one about a cluster-scoped object (a Node) only
/// in `default` without `eventTime` (as the kubelet writes its own), only in kube-system with it;
/// one about a namespaced object only in that object's namespace.
fn event(namespace: &str, name: &str, about: &Value) -> Value {
    let mut event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": about, "reason": "Forged", "message": "forged", "type": "Warning",
        "source": {"component": "ipmasq", "host": "node-a"}});
    if namespace != "default" {
        event["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
        event["action"] = json!("Forge");
        event["reportingComponent"] = json!("ipmasq");
        event["reportingInstance"] = json!("node-a");
    }
    event
}

/// node-b's status, patched under the agent's own field manager name (any client may give any).
const NODE_B_STATUS: &str = "/api/v1/nodes/node-b/status?fieldManager=ipmasq";

fn managed_by_ipmasq(node: &Value) -> bool {
    node["metadata"]["managedFields"]
        .as_array()
        .is_some_and(|all| all.iter().any(|m| m["manager"] == "ipmasq"))
}

/// node-a's token against node-b's status subresource.
fn status_forgeries() -> Vec<Forgery> {
    let on_b = |what, body, took| Forgery {
        what,
        method: "PATCH",
        path: NODE_B_STATUS.to_string(),
        content_type: STRATEGIC,
        body,
        took,
    };
    vec![
        on_b(
            "node-b's IPMasqAgentReady, written as the agent's field manager",
            json!({"status": {"conditions": [{"type": "IPMasqAgentReady", "status": "True",
                "reason": "InSync", "message": "forged"}]}}),
            |c| {
                let b = node(c, "node-b");
                condition(&b, "IPMasqAgentReady")["message"] == "forged" && managed_by_ipmasq(&b)
            },
        ),
        on_b(
            "node-b's kubelet condition Ready=False",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Forged"}]}}),
            |c| condition(&node(c, "node-b"), "Ready")["status"] == "False",
        ),
        on_b(
            "node-b's allocatable pods and CPU zeroed",
            json!({"status": {"allocatable": {"pods": "0", "cpu": "0"}}}),
            |c| node(c, "node-b")["status"]["allocatable"]["pods"] == "0",
        ),
        on_b(
            "node-b's capacity zeroed",
            json!({"status": {"capacity": {"pods": "0"}}}),
            |c| node(c, "node-b")["status"]["capacity"]["pods"] == "0",
        ),
        on_b(
            "node-b's addresses rewritten",
            json!({"status": {"addresses": [{"type": "InternalIP", "address": FORGED}]}}),
            |c| node(c, "node-b")["status"]["addresses"][0]["address"] == FORGED,
        ),
        on_b(
            "node-b's labels, through the status subresource",
            json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": "forged"}}}),
            |c| {
                node(c, "node-b")["metadata"]["labels"]["node-role.kubernetes.io/control-plane"]
                    == "forged"
            },
        ),
        on_b(
            "node-b's annotations, through the status subresource",
            json!({"metadata": {"annotations": {"forged": "yes"}}}),
            |c| node(c, "node-b")["metadata"]["annotations"]["forged"] == "yes",
        ),
        on_b(
            "node-b unschedulable, through the status subresource",
            json!({"spec": {"unschedulable": true}}),
            |c| node(c, "node-b")["spec"]["unschedulable"] == true,
        ),
        on_b(
            "node-b tainted, through the status subresource",
            json!({"spec": {"taints": [{"key": "forged", "effect": "NoSchedule"}]}}),
            |c| {
                node(c, "node-b")["spec"]["taints"]
                    .as_array()
                    .is_some_and(|taints| taints.iter().any(|t| t["key"] == "forged"))
            },
        ),
    ]
}

/// node-a's token against node-b itself, then its own condition (what the agent does).
fn node_forgeries() -> Vec<Forgery> {
    vec![
        Forgery {
            what: "node-b unschedulable, on the Node itself",
            method: "PATCH",
            path: "/api/v1/nodes/node-b".to_string(),
            content_type: STRATEGIC,
            body: json!({"spec": {"unschedulable": true}}),
            took: |c| node(c, "node-b")["spec"]["unschedulable"] == true,
        },
        Forgery {
            what: "node-b tainted, on the Node itself (the grant --node-taint needs)",
            method: "PATCH",
            path: "/api/v1/nodes/node-b".to_string(),
            content_type: STRATEGIC,
            body: json!({"spec": {"taints": [{"key": "forged", "effect": "NoExecute"}]}}),
            took: |c| {
                node(c, "node-b")["spec"]["taints"]
                    .as_array()
                    .is_some_and(|taints| taints.iter().any(|t| t["key"] == "forged"))
            },
        },
        Forgery {
            what: "node-b deleted",
            method: "DELETE",
            path: "/api/v1/nodes/node-b".to_string(),
            content_type: JSON,
            body: json!({}),
            took: |c| !exists(c, "/api/v1/nodes/node-b"),
        },
        Forgery {
            what: "its own Node's IPMasqAgentReady (what the agent does)",
            method: "PATCH",
            path: "/api/v1/nodes/node-a/status".to_string(),
            content_type: STRATEGIC,
            body: json!({"status": {"conditions": [{"type": "IPMasqAgentReady", "status": "True",
                "reason": "InSync", "message": "ours"}]}}),
            took: |c| condition(&node(c, "node-a"), "IPMasqAgentReady")["message"] == "ours",
        },
    ]
}

/// The Event forgeries: RBAC sees the namespace and the API group, never what an Event is about.
fn event_forgeries() -> Vec<Forgery> {
    let node_b = json!({"apiVersion": "v1", "kind": "Node", "name": "node-b"});
    let pod = |namespace: &str| json!({"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "etcd"});
    let core = |what, namespace: &str, name: &str, about: &Value, took| Forgery {
        what,
        method: "POST",
        path: format!("/api/v1/namespaces/{namespace}/events"),
        content_type: JSON,
        body: event(namespace, name, about),
        took,
    };
    vec![
        core(
            "a Warning Event in default about node-b",
            "default",
            "forged-1",
            &node_b,
            |c| exists(c, "/api/v1/namespaces/default/events/forged-1"),
        ),
        core(
            "a Warning Event in kube-public about a Pod",
            "kube-public",
            "forged-2",
            &pod("kube-public"),
            |c| exists(c, "/api/v1/namespaces/kube-public/events/forged-2"),
        ),
        core(
            "a Warning Event in kube-system about node-b",
            "kube-system",
            "forged-3",
            &node_b,
            |c| exists(c, "/api/v1/namespaces/kube-system/events/forged-3"),
        ),
        core(
            "a Warning Event in kube-system about a Pod",
            "kube-system",
            "forged-4",
            &pod("kube-system"),
            |c| exists(c, "/api/v1/namespaces/kube-system/events/forged-4"),
        ),
        Forgery {
            what: "an events.k8s.io Event in kube-system about node-b",
            method: "POST",
            path: "/apis/events.k8s.io/v1/namespaces/kube-system/events".to_string(),
            content_type: JSON,
            body: json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "forged-5", "namespace": "kube-system"},
                "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "ipmasq",
                "reportingInstance": "node-a", "action": "Forge", "reason": "Forged",
                "regarding": {"apiVersion": "v1", "kind": "Node", "name": "node-b"}, "type": "Warning"}),
            took: |c| exists(c, "/api/v1/namespaces/kube-system/events/forged-5"),
        },
    ]
}

/// Tries one forgery: 403 is Refused; a 2xx is Applied when the server holds the change,
/// Ignored when it does not; any other answer fails the test (it would say nothing).
fn attempt(cluster: &LocalCluster, forgery: &Forgery) -> Outcome {
    let (status, body) = send(cluster, forgery);
    match status {
        403 => Outcome::Refused,
        200..=299 if (forgery.took)(cluster) => Outcome::Applied,
        200..=299 => Outcome::Ignored,
        _ => panic!(
            "{}: {} {} answered {status}: {body}",
            forgery.what, forgery.method, forgery.path
        ),
    }
}

fn all_forgeries() -> Vec<Forgery> {
    status_forgeries()
        .into_iter()
        .chain(node_forgeries())
        .chain(event_forgeries())
        .collect()
}

/// Each forgery's outcome, in order (printed: the test's output is the list).
fn attempt_all<'a>(cluster: &LocalCluster, forgeries: &'a [Forgery]) -> Vec<(&'a str, Outcome)> {
    let got: Vec<(&str, Outcome)> = forgeries
        .iter()
        .map(|forgery| (forgery.what, attempt(cluster, forgery)))
        .collect();
    for (what, outcome) in &got {
        eprintln!("{outcome:?}: {what}");
    }
    got
}

/// Replaces the roles `scripts/local-cluster up` made from rbac.yaml by the read-only
/// overlay's (packaging/kubernetes/api-mode-readonly/rbac-readonly.yaml), as the admin.
fn apply_read_only_roles(cluster: &LocalCluster) {
    let path = "packaging/kubernetes/api-mode-readonly/rbac-readonly.yaml";
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .expect("read the read-only roles");
    for role in serde_saphyr::from_multiple::<Value>(&text).expect("YAML") {
        let name = role["metadata"]["name"].as_str().expect("a name");
        let url = match role["kind"].as_str() {
            Some("Role") => {
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles/{name}")
            }
            Some("ClusterRole") => {
                format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
            }
            other => panic!("{path}: unexpected kind {other:?}"),
        };
        let (status, body) = cluster.admin("PUT", &url, Some(&role.to_string()));
        assert_eq!(status, 200, "replace {url}: {body}");
    }
}

/// With the read-only overlay's roles (--node-status=false), the same token forges nothing:
/// every write above, the agent's own condition included, is refused.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_read_only_roles_refuse_every_forgery() {
    let ns = Netns::new("read-only");
    let cluster = LocalCluster::up(&ns);
    create_nodes(&cluster);
    apply_read_only_roles(&cluster);
    let own = node_forgeries()
        .into_iter()
        .find(|forgery| forgery.what.starts_with("its own Node"))
        .expect("the agent's own write is among the forgeries");
    assert!(
        super::netns::wait_until(std::time::Duration::from_secs(30), || send(&cluster, &own)
            .0
            == 403),
        "the read-only roles never took effect"
    );
    let forgeries = all_forgeries();
    let got = attempt_all(&cluster, &forgeries);
    let want: Vec<(&str, Outcome)> = forgeries
        .iter()
        .map(|f| (f.what, Outcome::Refused))
        .collect();
    assert_eq!(got, want, "what the read-only roles let the token forge");
}

/// The forgeries of Step 21 against the real server, the agent's token with rbac.yaml alone.
/// Applied: another Node's condition (under our field manager's name), its kubelet's Ready,
/// allocatable and capacity, addresses, labels and annotations (the status subresource takes
/// metadata), and Events in kube-system about anything. Ignored: the spec through the status
/// subresource (unschedulable, taints: the server resets it). Refused: the Node itself, its
/// deletion, Events in any other namespace or through events.k8s.io. Where the admission policy
/// runs (packaging/kubernetes/admission, Kubernetes 1.30+), every Applied one but the agent's
/// own condition is refused: scripts/check-admission-policy evaluates it over these cases.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_agent_token_forges_what_rbac_alone_allows() {
    use Outcome::{Applied, Ignored, Refused};
    let ns = Netns::new("forgeries");
    let cluster = LocalCluster::up(&ns);
    create_nodes(&cluster);
    let forgeries = all_forgeries();
    let got = attempt_all(&cluster, &forgeries);
    // The Node itself is patchable since --node-taint (rbac.yaml: nodes patch): node-b
    // cordoned and tainted; deleting it stays refused.
    let want = [
        Applied, Applied, Applied, Applied, Applied, Applied, Applied, Ignored, Ignored, Applied,
        Applied, Refused, Applied, Refused, Refused, Applied, Applied, Refused,
    ];
    let want: Vec<(&str, Outcome)> = forgeries.iter().map(|f| f.what).zip(want).collect();
    assert_eq!(
        got, want,
        "what the agent's token can forge with the shipped RBAC alone"
    );
}
