//! The mirror written by a real agent in API mode (`--config-source=api`) against a real API
//! server (`scripts/local-cluster` in the test's own network namespace, with an audit log of
//! the agent's requests): `IPMasqAgentReady` on its own Node, the `ConfigRejected` Event, what
//! `ipmasq fleet` reads of it, no API write in a steady minute (counted on the server), none
//! after a restart into the same state, and `NotReady` once `--cleanup-on-exit` removed the
//! rules; an edit storm coalesced into a few writes and one Event in the agent's namespace,
//! counted as config changes, not drift; `--node-status=false` writing nothing.

use super::cluster::{agent_requests, api_agent_args, LocalCluster};
use super::health::{get, successful_syncs, ADDR};
use super::netns::{kill, wait_until, Netns};
use crate::util::Scratch;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long anything may take to be seen (generous: tests must not depend on speed).
const PATIENCE: Duration = Duration::from_secs(30);
/// The steady state observed for API writes.
const STEADY: Duration = Duration::from_secs(60);
const NODE: &str = "node-a";
/// The agent's identity, as the server names it.
/// The verbs that change something.
const MUTATING: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
/// Passes every 5 s, so the steady minute holds about a dozen.
const GOOD: &str = "nonMasqueradeCIDRs: [198.51.100.0/24]\nresyncInterval: 5s\n";
const INVALID: &str = "nonMasqueradeCIDRs: [203.0.113.7/24]\nresyncInterval: 5s\n";
const FIXED: &str = "nonMasqueradeCIDRs: [203.0.113.0/24]\nresyncInterval: 5s\n";

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn writes(requests: &[(String, String, String)]) -> Vec<&(String, String, String)> {
    requests
        .iter()
        .filter(|(verb, _, _)| MUTATING.contains(&verb.as_str()))
        .collect()
}

struct MirrorNode {
    cluster: LocalCluster,
    ns: Netns,
    logs: Scratch,
    audit_log: PathBuf,
    agent: Option<(u32, PathBuf)>,
    starts: usize,
}

impl MirrorNode {
    fn new() -> MirrorNode {
        let ns = Netns::new("mirror-agent");
        let logs = Scratch::new(&format!("logs-{}", ns.name));
        let audit_log = logs.path.join("audit.log");
        let policy = repository().join("tests/data/audit-policy.yaml");
        let cluster = LocalCluster::up_with(
            &ns,
            &[
                &format!("--audit-policy-file={}", policy.display()),
                &format!("--audit-log-path={}", audit_log.display()),
            ],
        );
        MirrorNode {
            cluster,
            ns,
            logs,
            audit_log,
            agent: None,
            starts: 0,
        }
    }

    fn start_agent(&mut self, extra: &[&str]) {
        self.starts += 1;
        let log = self.logs.path.join(format!("agent-{}.log", self.starts));
        let kubeconfig = self.cluster.agent_kubeconfig().display().to_string();
        let metrics = format!("--metrics-addr={ADDR}");
        let mut args = api_agent_args(&["--backend=nftables"], &kubeconfig, NODE, &metrics);
        args.extend_from_slice(extra);
        let pid = self.ns.spawn_ipmasq(&args, &log);
        self.agent = Some((pid, log));
    }

    fn stop_agent(&mut self) {
        let (pid, _) = self.agent.clone().expect("an agent runs");
        kill(pid, "TERM");
        assert_eq!(
            self.ns.wait_daemon(pid, PATIENCE),
            Some(0),
            "the agent exits on SIGTERM:\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        self.agent
            .as_ref()
            .map(|(_, log)| std::fs::read_to_string(log).unwrap_or_default())
            .unwrap_or_default()
    }

    fn wait_log(&self, what: &str) {
        assert!(
            wait_until(PATIENCE, || self.log().contains(what)),
            "the log never said {what:?}:\n{}",
            self.log()
        );
    }

    fn put_config(&self, text: &str) {
        self.cluster.put_base_config(text);
    }

    /// Our condition on the Node: (status, reason, message).
    fn condition(&self) -> Option<(String, String, String)> {
        let (status, body) = self
            .cluster
            .admin("GET", &format!("/api/v1/nodes/{NODE}"), None);
        assert_eq!(status, 200, "read the Node: {body}");
        let node: serde_json::Value = serde_json::from_str(&body).ok()?;
        let found = node["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "IPMasqAgentReady")?
            .clone();
        let text = |key: &str| found[key].as_str().unwrap_or_default().to_string();
        Some((text("status"), text("reason"), text("message")))
    }

    /// Waits until our condition has this status and reason, and its message holds `has`.
    fn wait_condition(&self, status: &str, reason: &str, has: &[&str]) -> String {
        let mut last = None;
        let seen = wait_until(PATIENCE, || {
            last = self.condition();
            last.as_ref().is_some_and(|(s, r, m)| {
                s == status && r == reason && has.iter().all(|h| m.contains(h))
            })
        });
        assert!(
            seen,
            "the condition never became {status}/{reason} with {has:?}: {last:?}\nlog\n{}",
            self.log()
        );
        last.map(|(_, _, m)| m).unwrap_or_default()
    }

    fn fleet(&self) -> crate::util::Run {
        let kubeconfig = self.cluster.kubeconfig().display().to_string();
        // No agent pods in this cluster (no kubelet): the conditions alone.
        self.ns.ipmasq(&[
            "fleet",
            "--kubeconfig",
            &kubeconfig,
            "-o",
            "json",
            "--color=never",
            "--agent-pods=false",
        ])
    }

    fn fleet_says(&self, want_code: i32, want_status: &str) {
        let run = self.fleet();
        assert_eq!(run.code, want_code, "{}{}", run.stdout, run.stderr);
        let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("fleet -o json");
        assert_eq!(report["nodes"][0]["name"], NODE, "{report}");
        assert_eq!(report["nodes"][0]["status"], want_status, "{report}");
    }

    fn agent_writes(&self) -> usize {
        writes(&agent_requests(&self.audit_log)).len()
    }

    /// Registers the Node (as its kubelet would, Ready).
    fn create_node(&self) {
        let (status, body) = self.cluster.admin(
            "POST",
            "/api/v1/nodes",
            Some(
                &serde_json::json!({
                    "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
                })
                .to_string(),
            ),
        );
        assert_eq!(status, 201, "create the Node: {body}");
    }

    /// The ConfigRejected Events in `namespace`.
    fn events_in(&self, namespace: &str) -> Vec<serde_json::Value> {
        let (status, body) = self.cluster.admin(
            "GET",
            &format!("/api/v1/namespaces/{namespace}/events?fieldSelector=reason%3DConfigRejected"),
            None,
        );
        assert_eq!(status, 200, "{body}");
        let list: serde_json::Value = serde_json::from_str(&body).expect("an event list");
        list["items"].as_array().cloned().unwrap_or_default()
    }
}

/// The agent mirrors each state onto its Node once (a missing Node said once, and retried):
/// InSync with the ConfigMap text's digest
/// and its backend; nothing written in a steady minute of passes (the server's audit log
/// counts the agent's requests); an invalid edit is ConfigRejected with the old digest and an
/// Event carrying the diagnostic; fixed, InSync again; `fleet` reads each; a restart into the
/// same state writes nothing; a stop that removes the rules leaves NotReady.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_agent_mirrors_its_state_and_writes_nothing_when_steady() {
    let mut node = MirrorNode::new();
    node.put_config(GOOD);
    // The Node does not exist yet: the writer says so once, and retries.
    // Written at once after each change (the spread is tested on its own).
    node.start_agent(&["--status-spread=0"]);
    node.wait_log("cannot keep the Node's condition current");
    let (status, body) = node.cluster.admin(
        "POST",
        "/api/v1/nodes",
        Some(
            &serde_json::json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
            })
            .to_string(),
        ),
    );
    assert_eq!(status, 201, "create the Node: {body}");
    node.wait_log("the Node's condition is written again");
    assert_eq!(
        node.log()
            .matches("cannot keep the Node's condition current")
            .count(),
        1,
        "one warning for the same error, however many retries:\n{}",
        node.log()
    );

    let good = ipmasq::config::digest::sha256_hex(GOOD.as_bytes());
    let message = node.wait_condition(
        "True",
        "InSync",
        &[&format!("digest=sha256:{good}"), "backend=nftables"],
    );
    assert!(message.contains("lastSync="), "{message}");
    node.fleet_says(0, "in-sync");

    // The steady minute: passes run (every 5 s), the agent writes nothing.
    let before = node.agent_writes();
    let requests = agent_requests(&node.audit_log);
    eprintln!(
        "the agent's writes before the steady minute: {:?}",
        writes(&requests)
    );
    assert!(
        before > 0,
        "the counter counts: the condition's write is in the audit log: {requests:?}"
    );
    assert!(
        requests.iter().any(|(verb, resource, name)| verb == "patch"
            && resource == "nodes/status"
            && name == NODE),
        "{requests:?}"
    );
    let syncs_before = successful_syncs(&node.ns);
    // An observation window, not a wait for an event: nothing is to happen in it.
    std::thread::sleep(STEADY);
    let syncs_during = successful_syncs(&node.ns) - syncs_before;
    let during = node.agent_writes() - before;
    eprintln!(
        "agent API writes: {before} before the steady minute, {during} during it ({syncs_during} passes)"
    );
    assert!(syncs_during >= 5, "the minute held passes: {syncs_during}");
    assert_eq!(
        during,
        0,
        "no API write in a steady minute: {:?}",
        writes(&agent_requests(&node.audit_log))
    );

    // Invalid: ConfigRejected, the old digest in force, an Event with the diagnostic.
    node.put_config(INVALID);
    let rejected = node.wait_condition(
        "False",
        "ConfigRejected",
        &[&format!("digest=sha256:{good}")],
    );
    let invalid = ipmasq::config::digest::sha256_hex(INVALID.as_bytes());
    assert!(
        rejected.contains(&format!("sha256:{}", &invalid[..12])),
        "{rejected}"
    );
    // In the agent's own namespace (the ConfigMap's), where the RBAC grants events create.
    let events = || node.events_in("kube-system");
    assert!(
        wait_until(PATIENCE, || !events().is_empty()),
        "no ConfigRejected Event\n{}",
        node.log()
    );
    let found = events();
    assert_eq!(found.len(), 1, "one Event per rejected config: {found:?}");
    let event = &found[0];
    assert_eq!(event["involvedObject"]["name"], NODE);
    assert_eq!(event["type"], "Warning");
    let said = event["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("configmap kube-system/ip-masq-agent key config (resourceVersion ")
            && said.contains("[cidr-not-aligned]")
            && said.contains("203.0.113.7/24"),
        "the Event carries the diagnostic: {said}"
    );
    node.fleet_says(1, "rejected");

    // Fixed: InSync with the new digest.
    node.put_config(FIXED);
    let fixed = ipmasq::config::digest::sha256_hex(FIXED.as_bytes());
    node.wait_condition("True", "InSync", &[&format!("digest=sha256:{fixed}")]);
    node.fleet_says(0, "in-sync");
    assert_eq!(events().len(), 1, "no second Event");

    // A restart into the same state: the Node is read, nothing is written.
    node.stop_agent();
    let before_restart = node.agent_writes();
    node.start_agent(&["--cleanup-on-exit", "--status-spread=0"]);
    node.wait_log("the Node's condition is current already: nothing to write");
    assert!(wait_until(PATIENCE, || get(&node.ns, "/readyz").0 == 200));
    assert_eq!(
        node.agent_writes(),
        before_restart,
        "a restart into the same state writes nothing: {:?}",
        writes(&agent_requests(&node.audit_log))
    );

    // The Node deleted and registered again (a new object, without our condition): the agent
    // writes its condition onto the new one.
    let (status, body) = node
        .cluster
        .admin("DELETE", &format!("/api/v1/nodes/{NODE}"), None);
    assert_eq!(status, 200, "delete the Node: {body}");
    assert_eq!(
        node.cluster
            .admin("GET", &format!("/api/v1/nodes/{NODE}"), None)
            .0,
        404,
        "the Node is gone"
    );
    let (status, body) = node.cluster.admin(
        "POST",
        "/api/v1/nodes",
        Some(
            &serde_json::json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
            })
            .to_string(),
        ),
    );
    assert_eq!(status, 201, "register the Node again: {body}");
    node.wait_condition("True", "InSync", &[&format!("digest=sha256:{fixed}")]);
    node.fleet_says(0, "in-sync");

    // A stop that removes the rules: NotReady, saying so.
    node.stop_agent();
    node.wait_condition("False", "NotReady", &["removed its rules"]);
    node.fleet_says(1, "not-ready");
}

/// Edits the base ConfigMap `count` times, `every_ms` apart (by a schedule, over one
/// keep-alive connection), alternating a valid config (a new CIDR each time) and an invalid
/// one, ending on a valid one; prints the seconds it took.
const EDIT_STORM: &str = r#"
import http.client, json, re, ssl, sys, time
d, count, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1000
url = re.search(r"API_URL='https://([^:]+):(\d+)'", open(d + "/env").read())
context = ssl.create_default_context(cafile=d + "/pki/ca.crt")
context.load_cert_chain(d + "/pki/admin.crt", d + "/pki/admin.key")
connection = http.client.HTTPSConnection(url.group(1), int(url.group(2)), context=context, timeout=30)
path = "/api/v1/namespaces/kube-system/configmaps/ip-masq-agent"
start = time.monotonic()
for i in range(count):
    if i % 2 == 0:
        text = "nonMasqueradeCIDRs: [198.51.%d.0/24]\nresyncInterval: 5s\n" % (i % 250)
    else:
        text = "nonMasqueradeCIDRs: [203.0.113.7/24]\nresyncInterval: 5s\n"
    if i == count - 1:
        text = "nonMasqueradeCIDRs: [192.0.2.0/24]\nresyncInterval: 5s\n"
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ip-masq-agent", "namespace": "kube-system"}, "data": {"config": text}})
    connection.request("PUT", path, body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200:
        sys.exit("edit %d: %d %s" % (i, response.status, answer[:300]))
    pause = start + (i + 1) * every - time.monotonic()
    if pause > 0:
        time.sleep(pause)
print("%.3f" % (time.monotonic() - start))
"#;

/// The last text of [`EDIT_STORM`].
const STORM_LAST: &str = "nonMasqueradeCIDRs: [192.0.2.0/24]\nresyncInterval: 5s\n";

/// A metric's value from the agent's `/metrics` (0 when absent).
fn metric(ns: &Netns, name: &str) -> f64 {
    let (_, body) = get(ns, "/metrics");
    body.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0)
}

/// An edit storm (200 edits, 20 a second, valid and invalid alternating) against a running
/// agent: its rules follow (the last config in force at once), its status writes are
/// coalesced to about one round per 5 s (the server's audit log counts them), its Events to
/// one per distinct diagnostic, in its own namespace (kube-system) and none in `default`; and
/// the valid edits count as config changes applied, not as drift repairs.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn an_edit_storm_makes_a_few_status_writes_and_one_event() {
    let mut node = MirrorNode::new();
    node.create_node();
    node.put_config(GOOD);
    node.start_agent(&["--status-spread=2s"]);
    let good = ipmasq::config::digest::sha256_hex(GOOD.as_bytes());
    node.wait_condition("True", "InSync", &[&format!("digest=sha256:{good}")]);
    let drift_before = metric(
        &node.ns,
        "ipmasq_drift_repairs_total{kind=\"rules_differ\"}",
    );
    let before = agent_requests(&node.audit_log).len();

    let storm = node
        .ns
        .command(
            Path::new(super::netns::PYTHON),
            &[
                "-c",
                EDIT_STORM,
                &node.cluster.dir.path.display().to_string(),
                "200",
                "50",
            ],
        )
        .output()
        .expect("run the edit storm");
    assert!(
        storm.status.success(),
        "the storm: {}",
        String::from_utf8_lossy(&storm.stderr)
    );
    let took: f64 = String::from_utf8_lossy(&storm.stdout)
        .trim()
        .parse()
        .expect("the storm's seconds");
    let last = ipmasq::config::digest::sha256_hex(STORM_LAST.as_bytes());
    node.wait_condition("True", "InSync", &[&format!("digest=sha256:{last}")]);

    let during: Vec<(String, String, String)> = agent_requests(&node.audit_log).split_off(before);
    let patches = during
        .iter()
        .filter(|(verb, resource, _)| verb == "patch" && resource == "nodes/status")
        .count();
    let created_events = during
        .iter()
        .filter(|(verb, resource, _)| verb == "create" && resource == "events")
        .count();
    let rounds = (took / 5.0).ceil() as usize;
    eprintln!(
        "edit storm: 200 edits in {took:.1} s; the agent made {patches} status patches and {created_events} Events ({} writes in all)",
        writes(&during).len()
    );
    assert!(
        patches <= rounds + 2,
        "{patches} status patches for a {took:.1} s storm (at most one round per 5 s): {:?}",
        writes(&during)
    );
    assert!(
        (1..=2).contains(&created_events),
        "{created_events} Events for one invalid config flipping in and out: {:?}",
        writes(&during)
    );
    assert_eq!(
        node.events_in("kube-system").len(),
        created_events,
        "the Events are in the agent's own namespace"
    );
    assert!(node.events_in("default").is_empty(), "none in default");
    assert_eq!(
        writes(&during).len(),
        patches + created_events,
        "nothing else written: {:?}",
        writes(&during)
    );

    // The right words: the valid edits were config changes applied, not drift repaired.
    assert!(node.log().contains("config applied"), "{}", node.log());
    assert!(metric(&node.ns, "ipmasq_config_changes_applied_total") >= 1.0);
    assert_eq!(
        metric(
            &node.ns,
            "ipmasq_drift_repairs_total{kind=\"rules_differ\"}"
        ),
        drift_before,
        "a config change is not a drift repair"
    );
}

/// `--node-status=false`: the agent follows the ConfigMap (valid, then invalid) and writes
/// nothing to the API at all, counted on the server's audit log.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn node_status_false_writes_nothing() {
    let mut node = MirrorNode::new();
    node.create_node();
    node.put_config(GOOD);
    node.start_agent(&["--node-status=false", "--status-spread=0"]);
    node.wait_log("--node-status=false");
    assert!(wait_until(PATIENCE, || get(&node.ns, "/readyz").0 == 200));
    node.put_config(INVALID);
    node.wait_log("invalid config rejected");
    node.put_config(FIXED);
    assert!(wait_until(PATIENCE, || metric(
        &node.ns,
        "ipmasq_config_reloads_total{result=\"accepted\"}"
    ) >= 2.0));
    let requests = agent_requests(&node.audit_log);
    assert!(
        !requests.is_empty(),
        "the agent read the API: the counter counts"
    );
    assert_eq!(
        writes(&requests),
        Vec::<&(String, String, String)>::new(),
        "no write with --node-status=false"
    );
    assert_eq!(node.condition(), None, "no condition on the Node");
    assert!(node.events_in("kube-system").is_empty());
    assert!(node.events_in("default").is_empty());
}
