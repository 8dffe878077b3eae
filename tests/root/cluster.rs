//! A real Kubernetes control plane (etcd and kube-apiserver from `scripts/local-cluster`) inside
//! a test's own network namespace, on its loopback: the API-mode tests talk to it as an agent
//! talks to a cluster, and `down` stops it when the test ends, even on failure.

use super::netns::Netns;
use crate::util::Scratch;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

/// The repository's root (scripts/ and target/ are found from it).
fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `scripts/local-cluster build` has made the server (scripts/test does so first).
pub fn built() -> bool {
    let bin = repository().join("target/local-cluster/bin");
    bin.join("kube-apiserver").is_file() && bin.join("etcd").is_file()
}

/// Fails the test unless the control plane is built: a missing server is a set-up error, never
/// a quiet pass.
pub fn require_built() {
    assert!(
        built(),
        "target/local-cluster/bin has no kube-apiserver or etcd: run `scripts/local-cluster build` \
         (scripts/test does)"
    );
}

/// A running control plane; `down` on drop.
pub struct LocalCluster {
    /// Where `up` wrote its kubeconfigs, env, certificates, logs and pids.
    pub dir: Scratch,
    netns: String,
    /// `API_URL`, `TOKEN`, `CA_FILE` from `DIR/env`.
    pub env: HashMap<String, String>,
}

/// The agent's identity in the API server's audit log (the service account of rbac.yaml).
pub const AGENT_USER: &str = "system:serviceaccount:kube-system:ip-masq-agent";
/// The base ConfigMap of the agent, and its namespace's ConfigMaps.
pub const BASE_CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/ip-masq-agent";
pub const KUBE_SYSTEM_CONFIGMAPS: &str = "/api/v1/namespaces/kube-system/configmaps";

/// The arguments of an agent in API mode as the tests start it: `agent`, the backend's flags,
/// `--config-source=api`, the kubeconfig, the Node's name, `metrics` (`--metrics-addr=…`) and
/// `--v=2`; a caller may add more.
pub fn api_agent_args<'a>(
    backend: &[&'a str],
    kubeconfig: &'a str,
    node: &'a str,
    metrics: &'a str,
) -> Vec<&'a str> {
    let mut args = vec!["agent"];
    args.extend_from_slice(backend);
    args.extend_from_slice(&[
        "--config-source=api",
        "--kubeconfig",
        kubeconfig,
        "--node-name",
        node,
        metrics,
        "--v=2",
    ]);
    args
}

/// The agent's requests in an audit log of the API server (one JSON event per line).
pub fn agent_audit_events(audit_log: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(audit_log).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["user"]["username"] == AGENT_USER)
        .collect()
}

/// The audit log's requests by the agent: (verb, resource/subresource, name).
pub fn agent_requests(audit_log: &std::path::Path) -> Vec<(String, String, String)> {
    agent_audit_events(audit_log)
        .into_iter()
        .map(|event| {
            let object = &event["objectRef"];
            let resource = match object["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", object["resource"].as_str().unwrap_or("")),
                None => object["resource"].as_str().unwrap_or("").to_string(),
            };
            (
                event["verb"].as_str().unwrap_or("").to_string(),
                resource,
                object["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

impl LocalCluster {
    /// Creates the base ConfigMap, or replaces its data, with `text` under the key `config`.
    pub fn put_base_config(&self, text: &str) {
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ip-masq-agent", "namespace": "kube-system"},
            "data": {"config": text},
        })
        .to_string();
        let (status, answer) = self.admin("PUT", BASE_CONFIGMAP, Some(&body));
        if status == 404 {
            let (status, answer) = self.admin("POST", KUBE_SYSTEM_CONFIGMAPS, Some(&body));
            assert_eq!(status, 201, "create the ConfigMap: {answer}");
        } else {
            assert_eq!(status, 200, "replace the ConfigMap: {answer}");
        }
    }

    /// Starts etcd and kube-apiserver inside `ns` (on its loopback) and waits for `/readyz`.
    pub fn up(ns: &Netns) -> LocalCluster {
        LocalCluster::up_with(ns, &[])
    }

    /// [`LocalCluster::up`] with more flags for kube-apiserver.
    pub fn up_with(ns: &Netns, apiserver_flags: &[&str]) -> LocalCluster {
        LocalCluster::up_serving(ns, apiserver_flags, None)
    }

    /// [`LocalCluster::up`] serving on every address of `ns` too, its certificate naming
    /// `address`: agents in other namespaces reach it there (a veth or a bridge).
    pub fn up_reachable(ns: &Netns, address: &str) -> LocalCluster {
        LocalCluster::up_serving(ns, &["--bind-address=0.0.0.0"], Some(address))
    }

    fn up_serving(ns: &Netns, apiserver_flags: &[&str], address: Option<&str>) -> LocalCluster {
        require_built();
        let dir = Scratch::new(&format!("cluster-{}", ns.name));
        let out = ns
            .command(
                &repository().join("scripts/local-cluster"),
                &["up", &dir.path.display().to_string()],
            )
            .env("LOCAL_CLUSTER_APISERVER_FLAGS", apiserver_flags.join(" "))
            .env("LOCAL_CLUSTER_SERVER_IPS", address.unwrap_or_default())
            .output()
            .expect("run scripts/local-cluster up");
        let mut cluster = LocalCluster {
            env: HashMap::new(),
            netns: ns.name.clone(),
            dir,
        };
        assert!(
            out.status.success(),
            "scripts/local-cluster up failed: {}\netcd's log:\n{}\nkube-apiserver's log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            cluster.log("etcd"),
            cluster.log("kube-apiserver")
        );
        let env = std::fs::read_to_string(cluster.dir.path.join("env")).expect("read DIR/env");
        cluster.env = env
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
            .collect();
        cluster
    }

    /// `DIR/kubeconfig`: the admin's (a client certificate of system:masters).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path.join("kubeconfig")
    }

    /// `DIR/agent.kubeconfig`: the agent's service account token, inline.
    pub fn agent_kubeconfig(&self) -> PathBuf {
        self.dir.path.join("agent.kubeconfig")
    }

    /// The network namespace the control plane runs in.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Stops the control plane now (the API unreachable); drop stops nothing more.
    pub fn down(&self) {
        let out = Command::new(repository().join("scripts/local-cluster"))
            .arg("down")
            .arg(&self.dir.path)
            .output()
            .expect("run scripts/local-cluster down");
        assert!(
            out.status.success(),
            "scripts/local-cluster down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The last lines of one of the control plane's logs, for a failure message.
    pub fn log(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.path.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// An HTTPS request to the server as the admin (`curl` inside the namespace): (status, body).
    pub fn admin(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let pki = self.dir.path.join("pki");
        self.curl(
            method,
            path,
            body,
            &[
                "--cert",
                &pki.join("admin.crt").display().to_string(),
                "--key",
                &pki.join("admin.key").display().to_string(),
            ],
        )
    }

    /// The same request with the agent's token.
    pub fn as_agent(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        self.with_token(&self.env["TOKEN"], method, path, body)
    }

    /// The same request with a bearer token.
    pub fn with_token(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let header = format!("Authorization: Bearer {token}");
        self.curl(method, path, body, &["-H", &header])
    }

    fn curl(&self, method: &str, path: &str, body: Option<&str>, auth: &[&str]) -> (u16, String) {
        let url = format!("{}{path}", self.env["API_URL"]);
        let mut command = Command::new("ip");
        command
            .args([
                "netns",
                "exec",
                &self.netns,
                "curl",
                "-sS",
                "--max-time",
                "10",
            ])
            .args(["--cacert", &self.env["CA_FILE"], "-X", method])
            .args([
                "-w",
                "\n%{http_code}",
                "-H",
                "Content-Type: application/json",
            ])
            .args(auth);
        if let Some(body) = body {
            command.args(["--data-binary", body]);
        }
        let out = command.arg(&url).output().expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (status.trim().parse().unwrap_or(0), body.to_string())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = Command::new(repository().join("scripts/local-cluster"))
            .arg("down")
            .arg(&self.dir.path)
            .output();
    }
}

/// The agent's token reaches what packaging/kubernetes/api-mode/rbac.yaml grants and nothing
/// else: ConfigMaps of kube-system and Nodes, but no Secret and no ConfigMap of another
/// namespace (the server answers 403).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_agent_token_reads_only_what_its_roles_grant() {
    let ns = Netns::new("rbac");
    let cluster = LocalCluster::up(&ns);
    assert_token_reads_only_what_rbac_yaml_grants(&cluster, &cluster.env["TOKEN"]);
}

/// What rbac.yaml's roles give a token of the service account `kube-system/ip-masq-agent`, asked
/// of the server: 200 for the ConfigMaps of kube-system and for Nodes; 403 for Secrets (there and
/// cluster-wide), for the ConfigMaps of another namespace (a list and one that exists), for
/// writing a ConfigMap and patching the base; not 403 for patching the rollout's
/// (`ip-masq-agent-next`). Also used for the token of the account the API-mode overlay creates.
pub fn assert_token_reads_only_what_rbac_yaml_grants(cluster: &LocalCluster, token: &str) {
    let (status, body) = cluster.admin(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"elsewhere"},"data":{"config":"cidrLimit: 3"}}"#),
    );
    assert!(
        status == 201 || (status == 409 && body.contains("AlreadyExists")),
        "{status}: {body}"
    );
    for (path, want) in [
        ("/api/v1/namespaces/kube-system/configmaps", 200),
        ("/api/v1/nodes", 200),
        ("/api/v1/namespaces/kube-system/secrets", 403),
        ("/api/v1/secrets", 403),
        ("/api/v1/namespaces/default/configmaps", 403),
        ("/api/v1/namespaces/default/configmaps/elsewhere", 403),
    ] {
        let (status, body) = cluster.with_token(token, "GET", path, None);
        assert_eq!(status, want, "GET {path} with the agent's token: {body}");
    }
    let (status, body) = cluster.with_token(
        token,
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"planted"}}"#),
    );
    assert_eq!(status, 403, "the agent may not write ConfigMaps: {body}");
    // The one write on a ConfigMap: a patch of the rollout's (the halt), of no other.
    let patch = Some(r#"{"metadata":{"annotations":{"x":"y"}}}"#);
    let (status, body) = cluster.with_token(token, "PATCH", BASE_CONFIGMAP, patch);
    assert_eq!(status, 403, "the agent may not patch the base: {body}");
    let next = format!("{BASE_CONFIGMAP}-next");
    let (status, body) = cluster.with_token(token, "PATCH", &next, patch);
    assert_ne!(
        status, 403,
        "the agent may patch the rollout's ConfigMap: {body}"
    );
}
