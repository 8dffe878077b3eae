//! The API-mode overlay (`packaging/kubernetes/api-mode`), as a user deploys it: rendered by
//! `kubectl kustomize` (the `kubectl` on `$PATH`, or `$KUBECTL`; scripts/test installs Debian 12's
//! kubernetes-client, kubectl 1.20, whose kustomize is the oldest still shipped), its DaemonSet
//! held to the base's with exactly the API-mode changes, everything applied with `kubectl apply -k
//! --server-side` to a real kube-apiserver (which validates it), and the token of the service
//! account the overlay creates held to rbac.yaml's grants.

use super::cluster::{assert_token_reads_only_what_rbac_yaml_grants, LocalCluster};
use super::netns::{wait_until, Netns};
use crate::util::Scratch;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const OVERLAY: &str = "packaging/kubernetes/api-mode";
const BASE: &str = "packaging/kubernetes";
const DAEMONSET: &str = "/apis/apps/v1/namespaces/kube-system/daemonsets/ip-masq-agent";
const SERVICE_ACCOUNT: &str = "/api/v1/namespaces/kube-system/serviceaccounts/ip-masq-agent";
/// What `scripts/local-cluster up` created from rbac.yaml; the test deletes them so that the
/// overlay creates them again.
const RBAC_OBJECTS: [&str; 5] = [
    SERVICE_ACCOUNT,
    "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles/ip-masq-agent",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/ip-masq-agent",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/ip-masq-agent",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/ip-masq-agent",
];

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `$KUBECTL`, else `kubectl` from `$PATH`; a missing kubectl is a set-up error, never a pass.
fn kubectl() -> PathBuf {
    let kubectl = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubectl"));
    let version = Command::new(&kubectl)
        .args(["version", "--client"])
        .output();
    match version {
        Ok(out) if out.status.success() => {
            eprintln!(
                "root::deploy uses {}: {}",
                kubectl.display(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
            kubectl
        }
        _ => panic!(
            "no working {} (`kubectl version --client`): install Debian's kubernetes-client \
             (scripts/test does) or name one with $KUBECTL",
            kubectl.display()
        ),
    }
}

/// `kubectl kustomize DIR`, parsed: every object it renders.
fn render(kubectl: &Path, dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(repository().join(dir))
        .output()
        .expect("run kubectl kustomize");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&stdout)
        .unwrap_or_else(|e| panic!("kubectl kustomize {dir} printed no YAML ({e}):\n{stdout}"))
        .into_iter()
        .filter(|object| !object.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|object| object["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} among {objects:#?}"))
}

/// The base's DaemonSet with exactly what API mode changes: the service account and its token,
/// NODE_NAME from the downward API, `--config-source=api --node-taint` after the base's
/// arguments, no ConfigMap volume (the config comes from the API), and the host's
/// /var/lib/ipmasq for the last-known-good. Volumes and mounts are in name order (kustomize
/// versions place an added one differently).
fn in_api_mode(base: &Value) -> Value {
    let mut daemonset = base.clone();
    let pod = &mut daemonset["spec"]["template"]["spec"];
    pod["serviceAccountName"] = json!("ip-masq-agent");
    pod["automountServiceAccountToken"] = json!(true);
    let volumes = pod["volumes"].as_array_mut().expect("the base has volumes");
    let before = volumes.len();
    volumes.retain(|volume| volume["name"] != "config");
    assert_eq!(
        volumes.len(),
        before - 1,
        "the base has one volume `config`"
    );
    let container = &mut pod["containers"][0];
    container["env"] =
        json!([{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]);
    container["args"]
        .as_array_mut()
        .expect("the base has args")
        .extend([json!("--config-source=api"), json!("--node-taint")]);
    let mounts = container["volumeMounts"]
        .as_array_mut()
        .expect("the base has volume mounts");
    let before = mounts.len();
    mounts.retain(|mount| mount["name"] != "config");
    assert_eq!(mounts.len(), before - 1, "the base mounts `config` once");
    mounts.push(json!({"name": "ipmasq-last-known-good", "mountPath": "/var/lib/ipmasq"}));
    pod["volumes"].as_array_mut().expect("volumes").push(json!({
        "name": "ipmasq-last-known-good",
        "hostPath": {"path": "/var/lib/ipmasq", "type": "DirectoryOrCreate"}
    }));
    in_name_order(daemonset)
}

/// `daemonset` with its pod's volumes and its first container's mounts sorted by name.
fn in_name_order(mut daemonset: Value) -> Value {
    let pod = &mut daemonset["spec"]["template"]["spec"];
    let by_name = |a: &Value, b: &Value| a["name"].as_str().cmp(&b["name"].as_str());
    if let Some(volumes) = pod["volumes"].as_array_mut() {
        volumes.sort_by(by_name);
    }
    if let Some(mounts) = pod["containers"][0]["volumeMounts"].as_array_mut() {
        mounts.sort_by(by_name);
    }
    daemonset
}

/// `kubectl apply -k packaging/kubernetes/api-mode --server-side` with the admin's kubeconfig,
/// inside the cluster's namespace.
fn apply(kubectl: &Path, cluster: &LocalCluster, cache: &Scratch) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", cluster.netns()])
        .arg(kubectl)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(["--cache-dir", cache.path_str()])
        .args(["apply", "--server-side", "-k"])
        .arg(repository().join(OVERLAY))
        .output()
        .expect("run kubectl apply");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "kubectl apply -k {OVERLAY} --server-side: {stdout}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        cluster.log("kube-apiserver")
    );
    stdout
}

fn get(cluster: &LocalCluster, path: &str) -> Value {
    let (status, body) = cluster.admin("GET", path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("the server answers JSON")
}

fn uid(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .expect("an object has a uid")
        .to_string()
}

/// The overlay renders with `kubectl kustomize`: rbac.yaml's objects and the base's DaemonSet
/// with exactly the API-mode changes. The server accepts everything it renders (`kubectl apply -k
/// --server-side`, the admin's kubeconfig) and stores the DaemonSet with those fields; the
/// service account it creates gets a token that reads the ConfigMaps of kube-system and Nodes
/// (200), and no Secret nor ConfigMap of another namespace (403).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_api_mode_overlay_renders_applies_and_its_token_reads_only_what_rbac_grants() {
    let kubectl = kubectl();
    let rendered = render(&kubectl, OVERLAY);
    let mut kinds: Vec<&str> = rendered
        .iter()
        .map(|object| object["kind"].as_str().unwrap_or("?"))
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet",
            "Role",
            "RoleBinding",
            "ServiceAccount"
        ],
        "the overlay renders rbac.yaml's objects and the DaemonSet, and no ConfigMap"
    );
    let rbac = std::fs::read_to_string(repository().join(OVERLAY).join("rbac.yaml"))
        .expect("read rbac.yaml");
    for object in serde_saphyr::from_multiple::<Value>(&rbac).expect("rbac.yaml is YAML") {
        let kind = object["kind"].as_str().expect("a kind");
        assert_eq!(find(&rendered, kind), &object, "{kind} is rbac.yaml's");
    }
    let base = render(&kubectl, BASE);
    let daemonset = find(&rendered, "DaemonSet");
    assert_eq!(
        in_name_order(daemonset.clone()),
        in_api_mode(find(&base, "DaemonSet")),
        "the overlay's DaemonSet is the base's with the API-mode changes alone"
    );

    let ns = Netns::new("overlay");
    let cluster = LocalCluster::up(&ns);
    // `up` created the service account and roles from rbac.yaml: delete them, so that what the
    // token below may do comes from the overlay's objects. Their old token stops working.
    let mut deleted = Vec::new();
    for path in RBAC_OBJECTS {
        deleted.push(uid(&get(&cluster, path)));
        let (status, body) = cluster.admin("DELETE", path, None);
        assert_eq!(status, 200, "DELETE {path}: {body}");
    }
    assert!(
        wait_until(Duration::from_secs(30), || cluster
            .as_agent("GET", "/api/v1/namespaces/kube-system/configmaps", None)
            .0
            == 401),
        "the deleted account's token still authenticates"
    );

    let cache = Scratch::new("kubectl-cache");
    let applied = apply(&kubectl, &cluster, &cache);
    eprintln!("{applied}");
    assert_eq!(
        applied.matches("serverside-applied").count(),
        6,
        "{applied}"
    );
    for (path, old) in RBAC_OBJECTS.iter().zip(&deleted) {
        assert_ne!(
            &uid(&get(&cluster, path)),
            old,
            "{path} is not the overlay's"
        );
    }
    let stored = get(&cluster, DAEMONSET);
    let pod = &stored["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ip-masq-agent", "{pod:#}");
    assert_eq!(pod["automountServiceAccountToken"], true, "{pod:#}");
    let container = &pod["containers"][0];
    assert_eq!(
        container["env"],
        json!([{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}]),
        "{container:#}"
    );
    assert_eq!(
        container["args"],
        json!([
            "--masq-chain=IP-MASQ-AGENT",
            "--metrics-addr=127.0.0.1:9723",
            "--config-source=api",
            "--node-taint"
        ]),
        "{container:#}"
    );
    assert!(
        pod["volumes"]
            .as_array()
            .is_some_and(|volumes| volumes.iter().all(|v| v["configMap"].is_null())),
        "no ConfigMap volume: {pod:#}"
    );

    let (status, body) = cluster.admin(
        "POST",
        &format!("{SERVICE_ACCOUNT}/token"),
        Some(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}"#),
    );
    assert_eq!(status, 201, "a token for the overlay's account: {body}");
    let answer: Value = serde_json::from_str(&body).expect("a TokenRequest");
    let token = answer["status"]["token"].as_str().expect("a token");
    assert_token_reads_only_what_rbac_yaml_grants(&cluster, token);
}
