//! `ipmasq fleet` and the mirror against a real API server (`scripts/local-cluster` in a
//! throwaway namespace): Nodes carrying every kind of `IPMasqAgentReady` condition read back as
//! a table, as JSON and as an exit status; `mirror::publish` with the agent's own token;
//! refusals and an unreachable server; 5,000 Nodes.

use super::cluster::LocalCluster;
use super::netns::{Netns, PYTHON};
use ipmasq::cluster::mirror::{self, AgentStatus, Outcome};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Creates the Node objects of stdin (one JSON document a line) as the admin, over four
/// keep-alive connections: set-up, not the measurement. Nodes take their status on create,
/// under the agent's field manager (`ipmasq`): fleet trusts only a condition it wrote.
const CREATE_NODES: &str = r#"
import http.client, re, ssl, sys, threading
d = sys.argv[1]
url = re.search(r"API_URL='https://([^:]+):(\d+)'", open(d + "/env").read())
context = ssl.create_default_context(cafile=d + "/pki/ca.crt")
context.load_cert_chain(d + "/pki/admin.crt", d + "/pki/admin.key")
lines = sys.stdin.read().splitlines()
errors = []
def create(chunk):
    connection = http.client.HTTPSConnection(url.group(1), int(url.group(2)), context=context, timeout=30)
    for body in chunk:
        connection.request("POST", "/api/v1/nodes?fieldManager=ipmasq", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        if response.status != 201:
            errors.append("%d %s" % (response.status, answer[:300]))
threads = [threading.Thread(target=create, args=(lines[i::4],)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
if errors:
    sys.exit("%d of %d Nodes not created: %s" % (len(errors), len(lines), errors[:3]))
print(len(lines))
"#;

const DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const OTHER_DIGEST: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

/// A Node object with the kubelet's Ready condition, and ours when given.
fn node(name: &str, labels: serde_json::Value, ours: Option<serde_json::Value>) -> String {
    node_ready(name, labels, ("True", "KubeletReady"), ours)
}

/// A Node object whose Ready condition has this status and reason, and ours when given.
fn node_ready(
    name: &str,
    labels: serde_json::Value,
    (ready, reason): (&str, &str),
    ours: Option<serde_json::Value>,
) -> String {
    let mut conditions = vec![serde_json::json!({
        "type": "Ready", "status": ready, "reason": reason,
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z",
    })];
    conditions.extend(ours);
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "192.168.7.10"}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        },
    })
    .to_string()
}

/// Our condition as an agent writes it (`mirror::condition`), `age` before now.
fn ours(outcome: Outcome, digest: &str, age: Duration) -> serde_json::Value {
    let when = Timestamp::now() - SignedDuration::try_from(age).expect("an age");
    let status = AgentStatus {
        outcome,
        digest: Some(digest.to_string()),
        backend: Some("nftables".to_string()),
        last_sync: when,
        words: None,
    };
    serde_json::to_value(mirror::condition(&status, None)).expect("a condition serializes")
}

fn create_nodes(ns: &Netns, cluster: &LocalCluster, nodes: &[String]) {
    let mut child = ns
        .command(
            std::path::Path::new(PYTHON),
            &["-c", CREATE_NODES, &cluster.dir.path.display().to_string()],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(nodes.join("\n").as_bytes())
        .expect("write the Nodes");
    drop(stdin);
    let out = child.wait_with_output().expect("wait for python3");
    assert!(
        out.status.success(),
        "creating {} Nodes: {}{}",
        nodes.len(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `fleet` judging by the conditions alone (these clusters run no agent pods).
fn fleet(ns: &Netns, kubeconfig: &std::path::Path, args: &[&str]) -> crate::util::Run {
    let mut all = vec!["--agent-pods=false"];
    all.extend_from_slice(args);
    fleet_with_pods(ns, kubeconfig, &all)
}

/// `fleet` as an operator runs it: the agents' pods read too.
fn fleet_with_pods(ns: &Netns, kubeconfig: &std::path::Path, args: &[&str]) -> crate::util::Run {
    let path = kubeconfig.display().to_string();
    let mut all = vec!["fleet", "--kubeconfig", &path, "--color=never"];
    all.extend_from_slice(args);
    ns.ipmasq(&all)
}

fn json(run: &crate::util::Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("fleet -o json: {e}\n{}{}", run.stdout, run.stderr))
}

/// Seven Nodes, one per status (and a second config), read back by `fleet` as a table, as JSON
/// (also page by page, and with the agent's own token), by label, and as exit statuses.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn fleet_reads_every_kind_of_node() {
    let ns = Netns::new("fleet");
    let cluster = LocalCluster::up(&ns);
    let minute = Duration::from_secs(60);
    let pool = |name: &str| serde_json::json!({ "pool": name });
    let by_hand = serde_json::json!({
        "type": "IPMasqAgentReady", "status": "False", "reason": "Drifted",
        "message": format!("digest=sha256:{DIGEST} backend=iptables-nft lastSync={}; 2 rules missing, repair failed: iptables-restore exited 4", mirror::rfc3339_seconds(Timestamp::now())),
    });
    create_nodes(
        &ns,
        &cluster,
        &[
            node(
                "a-in-sync",
                pool("good"),
                Some(ours(Outcome::InSync, DIGEST, 48 * 60 * minute)),
            ),
            node(
                "b-in-sync-other",
                pool("good"),
                Some(ours(Outcome::InSync, OTHER_DIGEST, minute)),
            ),
            node("c-drifted", pool("bad"), Some(by_hand)),
            node(
                "d-rejected",
                pool("bad"),
                Some(ours(Outcome::Rejected, DIGEST, minute)),
            ),
            node("e-no-condition", pool("bad"), None),
            node_ready(
                "f-stale",
                pool("bad"),
                ("Unknown", "NodeStatusUnknown"),
                Some(ours(Outcome::InSync, DIGEST, 120 * minute)),
            ),
            node(
                "g-not-ready",
                pool("bad"),
                Some(ours(Outcome::NotReady, DIGEST, minute)),
            ),
        ],
    );

    let run = fleet(&ns, &cluster.kubeconfig(), &["-o", "json"]);
    assert_eq!(
        run.code, 1,
        "some nodes are not in sync: {}{}",
        run.stdout, run.stderr
    );
    let report = json(&run);
    let nodes = report["nodes"].as_array().expect("nodes");
    let seen: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or(""),
                n["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("a-in-sync", "in-sync"),
            ("b-in-sync-other", "in-sync"),
            ("c-drifted", "drifted"),
            ("d-rejected", "rejected"),
            ("e-no-condition", "unknown"),
            ("f-stale", "stale"),
            ("g-not-ready", "not-ready"),
        ]
    );
    assert_eq!(nodes[0]["configDigest"], format!("sha256:{DIGEST}"));
    assert_eq!(nodes[0]["backend"], "nftables");
    assert_eq!(
        nodes[2]["backend"], "iptables-nft",
        "the hand-written message reads too"
    );
    assert!(nodes[0]["lastSync"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    assert_eq!(
        nodes[4],
        serde_json::json!({"name": "e-no-condition", "status": "unknown", "configDigest": null, "backend": null, "lastSync": null, "writers": [], "agent": null})
    );
    assert_eq!(nodes[0]["writers"], serde_json::json!(["ipmasq"]));
    for node in nodes {
        assert_eq!(node.as_object().map(|o| o.len()), Some(7), "{node}");
    }

    // Page by page (limit 2: four pages), and with the agent's token: the same document.
    let paged = fleet(
        &ns,
        &cluster.kubeconfig(),
        &["-o", "json", "--page-size", "2"],
    );
    assert_eq!(json(&paged), report);
    let as_agent = fleet(&ns, &cluster.agent_kubeconfig(), &["-o", "json"]);
    assert_eq!(as_agent.code, 1, "{}", as_agent.stderr);
    assert_eq!(
        json(&as_agent),
        report,
        "the agent's ClusterRole may list Nodes"
    );

    // At 80 columns, as on a classic terminal: a reason too long for its line wraps under it.
    let text: crate::util::Run = ns
        .command(
            &crate::util::binary(),
            &[
                "fleet",
                "--kubeconfig",
                &cluster.kubeconfig().display().to_string(),
                "--color=never",
                "--agent-pods=false",
            ],
        )
        .env("COLUMNS", "80")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run fleet")
        .into();
    assert_eq!(text.code, 1, "{}", text.stderr);
    let short = &DIGEST[..12];
    let other = &OTHER_DIGEST[..12];
    for line in [
        "STATUS     CONFIG        BACKEND       NODES  OLDEST SYNC",
        &format!("in-sync    {short}  nftables      1"),
        &format!("in-sync    {other}  nftables      1"),
        &format!("drifted    {short}  iptables-nft  1"),
        &format!("rejected   {short}  nftables      1"),
        &format!("not-ready  {short}  nftables      1"),
        &format!("stale      {short}  nftables      1"),
        "unknown    -             -             1      -",
        "Not in sync:",
        "  drifted    c-drifted       2 rules missing, repair failed: iptables-restore\n    exited 4\n",
        "  rejected   d-rejected      the newest config was rejected; the last good\n    config stays in force\n",
        "  unknown    e-no-condition  no IPMasqAgentReady condition",
        "7 nodes: 2 in sync, 5 not",
    ] {
        assert!(
            text.stdout.contains(line),
            "{line:?} missing:\n{}",
            text.stdout
        );
    }
    assert!(
        text.stdout.lines().any(|l| l
            .starts_with("  stale      f-stale         node Ready=Unknown (NodeStatusUnknown)")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        text.stdout
    );

    // One pool in sync (one of its nodes last synced two days ago: age is no staleness, a
    // steady agent writes nothing): exit 0.
    let good = fleet(&ns, &cluster.kubeconfig(), &["-l", "pool=good"]);
    assert_eq!(good.code, 0, "{}{}", good.stdout, good.stderr);
    assert!(
        good.stdout.ends_with("all 2 nodes in sync\n"),
        "{}",
        good.stdout
    );
    let none = fleet(&ns, &cluster.kubeconfig(), &["-l", "pool=none"]);
    assert_eq!((none.code, none.stdout.as_str()), (0, "no Nodes\n"));
}

/// `mirror::publish` with the agent's own token (as the agent will call it): server-side apply
/// to `nodes/status` under the field manager `ipmasq` keeps the kubelet's condition, a change
/// replaces ours, and the ConfigRejected Event is created about the Node; `fleet` reads back
/// exactly what was written.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn publish_applies_the_condition_with_the_agents_token() {
    let ns = Netns::new("mirror");
    let cluster = LocalCluster::up(&ns);
    create_nodes(
        &ns,
        &cluster,
        &[node("worker-1", serde_json::json!({}), None)],
    );
    let kubeconfig = cluster.agent_kubeconfig();
    let netns = cluster.netns().to_string();
    let now = Timestamp::from_second(Timestamp::now().as_second()).expect("now");
    let (first, second, event) = in_netns(&netns, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let credentials = ipmasq::cluster::Credentials::Kubeconfig(kubeconfig);
            let client = ipmasq::cluster::client(&credentials)
                .await
                .expect("a client");
            let mut status = AgentStatus {
                outcome: Outcome::InSync,
                digest: Some(DIGEST.to_string()),
                backend: Some("nftables".to_string()),
                last_sync: now,
                words: None,
            };
            let condition = mirror::condition(&status, None);
            let first = mirror::publish(client.clone(), "worker-1", &condition)
                .await
                .expect("the agent's token may apply its condition");
            status.outcome = Outcome::Rejected;
            let rejected = mirror::condition(&status, mirror::ours(&first));
            assert!(mirror::write_needed(mirror::ours(&first), &rejected));
            let second = mirror::publish(client.clone(), "worker-1", &rejected)
                .await
                .expect("a second apply");
            let uid = second.metadata.uid.clone();
            let about = mirror::EventAbout {
                namespace: "kube-system".into(),
                node: "worker-1".into(),
                node_uid: uid,
            };
            let event = mirror::rejection_event(
                &about,
                "config:2:5: error[cidr-not-aligned]: CIDR \"10.1.2.3/16\" is not aligned",
                now,
            );
            let event = mirror::publish_event(client, &event)
                .await
                .expect("the agent's token may create Events");
            (first, second, event)
        })
    });
    let conditions = |node: &k8s_openapi::api::core::v1::Node| -> Vec<(String, String)> {
        node.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.type_, c.reason.unwrap_or_default()))
            .collect()
    };
    assert_eq!(
        conditions(&first),
        [
            ("Ready".to_string(), "KubeletReady".to_string()),
            ("IPMasqAgentReady".to_string(), "InSync".to_string())
        ]
    );
    assert_eq!(
        conditions(&second),
        [
            ("Ready".to_string(), "KubeletReady".to_string()),
            ("IPMasqAgentReady".to_string(), "ConfigRejected".to_string())
        ],
        "the apply replaced our condition and kept the kubelet's"
    );
    let written = mirror::ours(&second).expect("our condition");
    assert_eq!(written.status, "False");
    assert_eq!(
        written.message.as_deref(),
        Some(&*format!(
            "digest=sha256:{DIGEST} backend=nftables lastSync={}; the newest config was rejected; the last good config stays in force",
            mirror::rfc3339_seconds(now)
        ))
    );
    let managers: Vec<(String, String)> = second
        .metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("ipmasq".to_string(), "Apply".to_string())),
        "{managers:?}"
    );

    let (status, body) = cluster.admin(
        "GET",
        "/api/v1/namespaces/kube-system/events?fieldSelector=reason%3DConfigRejected",
        None,
    );
    assert_eq!(status, 200, "{body}");
    let events: serde_json::Value = serde_json::from_str(&body).expect("events");
    let items = events["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{body}");
    assert_eq!(
        items[0]["metadata"]["name"],
        event.metadata.name.clone().unwrap_or_default()
    );
    assert_eq!(items[0]["involvedObject"]["kind"], "Node");
    assert_eq!(items[0]["involvedObject"]["name"], "worker-1");
    assert_eq!(
        items[0]["involvedObject"]["uid"],
        second.metadata.uid.clone().unwrap_or_default()
    );
    assert_eq!(items[0]["type"], "Warning");
    assert!(
        items[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("error[cidr-not-aligned]")),
        "{body}"
    );

    // The token may patch Nodes and their status and create Events, and no more: not delete a
    // Node, not read or delete Events. (A patch of the Node itself is RBAC's since
    // --node-taint; what it reaches without the admission policy: root::forgeries.)
    for (method, path, body) in [
        ("DELETE", "/api/v1/nodes/worker-1", ""),
        ("GET", "/api/v1/namespaces/default/events", ""),
        (
            "DELETE",
            &format!(
                "/api/v1/namespaces/kube-system/events/{}",
                event.metadata.name.clone().unwrap_or_default()
            ),
            "",
        ),
    ] {
        let (status, answer) = cluster.as_agent(method, path, Some(body).filter(|b| !b.is_empty()));
        assert_eq!(
            status, 403,
            "{method} {path} with the agent's token: {answer}"
        );
    }

    let run = fleet(&ns, &cluster.kubeconfig(), &["-o", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        json(&run),
        serde_json::json!({"nodes": [{
            "name": "worker-1", "status": "rejected", "configDigest": format!("sha256:{DIGEST}"),
            "backend": "nftables", "lastSync": mirror::rfc3339_seconds(now),
            "writers": ["ipmasq"], "agent": null,
        }]})
    );
}

/// Runs `work` on a thread of its own inside network namespace `name` (the thread's sockets
/// are the namespace's; the test's other threads stay where they are).
pub(super) fn in_netns<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{name}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open the namespace");
        // SAFETY: setns on this thread alone, with a valid descriptor of a network namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        work()
    })
    .join()
    .expect("the namespace's thread")
}

/// Refusals and failures exit 2 with what to do: a token without `list nodes` (403), a server
/// nobody listens on, a deadline that passes.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn fleet_says_what_to_do_when_the_api_refuses_or_is_away() {
    let ns = Netns::new("fleet-refused");
    let cluster = LocalCluster::up(&ns);
    let (status, body) = cluster.admin(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(r#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"nobody"}}"#),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = cluster.admin(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/nobody/token",
        Some(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#),
    );
    assert_eq!(status, 201, "{body}");
    let token: serde_json::Value = serde_json::from_str(&body).expect("a TokenRequest");
    let token = token["status"]["token"].as_str().expect("a token");
    let agent = std::fs::read_to_string(cluster.agent_kubeconfig()).expect("agent.kubeconfig");
    let mut nobody: serde_json::Value = serde_json::from_str(&agent).expect("JSON kubeconfig");
    nobody["users"][0]["user"]["token"] = token.into();
    let nobody_path = cluster.dir.write("nobody.kubeconfig", &nobody.to_string());
    let run = fleet(&ns, &nobody_path, &[]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    let url = &cluster.env["API_URL"];
    for needle in [
        &format!("ipmasq fleet: the API server at {url}/ refused to list Nodes: 403 Forbidden"),
        "kubectl auth can-i list nodes",
        "--kubeconfig PATH",
    ] {
        assert!(
            run.stderr.contains(needle),
            "{needle:?} missing: {}",
            run.stderr
        );
    }

    let mut away = nobody.clone();
    away["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1".into();
    let away_path = cluster.dir.write("away.kubeconfig", &away.to_string());
    let run = fleet(&ns, &away_path, &[]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .starts_with("ipmasq fleet: cannot reach the API server at https://127.0.0.1:1/")
            && run.stderr.contains("Is the cluster up"),
        "{}",
        run.stderr
    );

    // 1 ns: the listing needs several round trips, so the deadline always passes first.
    let run = fleet(&ns, &cluster.kubeconfig(), &["--timeout", "1ns"]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("took longer than --timeout=1ns (0 nodes in 0 pages read)"),
        "{}",
        run.stderr
    );
}

/// 5,000 Nodes (4,990 in sync, 10 drifted): `fleet -o json` lists them all. The wall time is
/// printed for the record (the issue's figure is 5 s); only a generous deadline is asserted.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn fleet_lists_five_thousand_nodes() {
    let ns = Netns::new("fleet-5000");
    let cluster = LocalCluster::up(&ns);
    let condition = ours(Outcome::InSync, DIGEST, Duration::from_secs(60));
    let drifted = ours(Outcome::Drifted, DIGEST, Duration::from_secs(60));
    let nodes: Vec<String> = (0..5_000)
        .map(|i| {
            let ours = if i % 500 == 7 { &drifted } else { &condition };
            node(
                &format!("node-{i:05}"),
                serde_json::json!({"pool": format!("pool-{}", i % 10), "kubernetes.io/os": "linux"}),
                Some(ours.clone()),
            )
        })
        .collect();
    let started = Instant::now();
    create_nodes(&ns, &cluster, &nodes);
    eprintln!(
        "set-up: 5,000 Nodes created in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let run = fleet(&ns, &cluster.kubeconfig(), &["-o", "json"]);
    let json_time = started.elapsed();
    assert_eq!(run.code, 1, "10 drifted nodes: {}", run.stderr);
    let report = json(&run);
    let listed = report["nodes"].as_array().expect("nodes");
    assert_eq!(listed.len(), 5_000);
    let drifted_count = listed.iter().filter(|n| n["status"] == "drifted").count();
    assert_eq!(drifted_count, 10);
    assert!(listed
        .iter()
        .all(|n| n["status"] == "in-sync" || n["status"] == "drifted"));
    let started = Instant::now();
    let text = fleet(&ns, &cluster.kubeconfig(), &[]);
    let text_time = started.elapsed();
    assert_eq!(text.code, 1, "{}", text.stderr);
    assert!(
        text.stdout.contains("5,000 nodes: 4,990 in sync, 10 not"),
        "{}",
        text.stdout
    );
    eprintln!(
        "fleet over 5,000 Nodes (pages of 500): -o json {:.2} s, table {:.2} s",
        json_time.as_secs_f64(),
        text_time.as_secs_f64()
    );
    assert!(
        json_time < Duration::from_secs(60),
        "fleet -o json over 5,000 Nodes took {json_time:?}"
    );
}

/// An agent pod in kube-system on `node` (as the DaemonSet's: its label), created by hand (the
/// local cluster has no kubelet), then given `status` through the status subresource.
fn agent_pod(cluster: &LocalCluster, node: &str, status: serde_json::Value) {
    let name = format!("ip-masq-agent-{node}");
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"k8s-app": "ip-masq-agent"}},
        "spec": {
            "nodeName": node,
            "serviceAccountName": "fleet-test",
            "automountServiceAccountToken": false,
            "containers": [{"name": "ip-masq-agent", "image": "ipmasq:test"}],
        },
    });
    let (code, body) = cluster.admin(
        "POST",
        "/api/v1/namespaces/kube-system/pods",
        Some(&pod.to_string()),
    );
    assert_eq!(code, 201, "create the pod of {node}: {body}");
    let mut created: serde_json::Value = serde_json::from_str(&body).expect("a pod");
    created["status"] = status;
    let (code, body) = cluster.admin(
        "PUT",
        &format!("/api/v1/namespaces/kube-system/pods/{name}/status"),
        Some(&created.to_string()),
    );
    assert_eq!(code, 200, "the status of the pod of {node}: {body}");
}

/// A crash-looping agent whose condition still says InSync, a node with no agent pod, and a
/// condition written by another field manager: `fleet` (reading the agents' pods, one list)
/// calls each what it is, in the table and the JSON, and exits 1.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn fleet_sees_a_dead_agent_and_a_condition_someone_else_wrote() {
    let ns = Netns::new("fleet-pods");
    let cluster = LocalCluster::up(&ns);
    let minute = Duration::from_secs(60);
    let insync = || Some(ours(Outcome::InSync, DIGEST, minute));
    create_nodes(
        &ns,
        &cluster,
        &[
            node("a-healthy", serde_json::json!({}), insync()),
            node("b-looping", serde_json::json!({}), insync()),
            node("c-orphan", serde_json::json!({}), insync()),
        ],
    );
    // Written by someone else (an admin's kubectl, another controller): not the agent's word.
    let (code, body) = cluster.admin(
        "POST",
        "/api/v1/nodes?fieldManager=kubectl-edit",
        Some(&node("d-forged", serde_json::json!({}), insync())),
    );
    assert_eq!(code, 201, "{body}");
    let (code, body) = cluster.admin(
        "POST",
        "/api/v1/namespaces/kube-system/serviceaccounts",
        Some(r#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"fleet-test"}}"#),
    );
    assert_eq!(code, 201, "{body}");
    let now = Timestamp::now();
    let ago = |seconds: i64| mirror::rfc3339_seconds(now - SignedDuration::from_secs(seconds));
    let running = serde_json::json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "ip-masq-agent", "ready": true, "restartCount": 0,
            "image": "ipmasq:test", "imageID": "", "state": {"running": {"startedAt": ago(3600)}}}],
    });
    agent_pod(&cluster, "a-healthy", running.clone());
    agent_pod(&cluster, "d-forged", running);
    agent_pod(
        &cluster,
        "b-looping",
        serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "ip-masq-agent", "ready": false, "restartCount": 6,
                "image": "ipmasq:test", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 2m40s"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                    "startedAt": ago(75), "finishedAt": ago(70)}}}],
        }),
    );

    let run = fleet_with_pods(&ns, &cluster.kubeconfig(), &["-o", "json"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.is_empty(), "the pods were read: {}", run.stderr);
    let report = json(&run);
    let nodes = report["nodes"].as_array().expect("nodes");
    let seen: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or(""),
                n["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("a-healthy", "in-sync"),
            ("b-looping", "agent-down"),
            ("c-orphan", "no-agent"),
            ("d-forged", "untrusted"),
        ],
        "{report}"
    );
    assert_eq!(nodes[1]["agent"]["pod"], "ip-masq-agent-b-looping");
    assert_eq!(nodes[1]["agent"]["state"], "down");
    assert_eq!(nodes[1]["agent"]["restarts"], 6);
    assert_eq!(nodes[0]["writers"], serde_json::json!(["ipmasq"]));
    assert_eq!(nodes[3]["writers"], serde_json::json!(["kubectl-edit"]));

    let text = fleet_with_pods(&ns, &cluster.kubeconfig(), &[]);
    assert_eq!(text.code, 1, "{}", text.stderr);
    for line in [
        "  agent-down  b-looping  agent CrashLoopBackOff, 6 restarts",
        "  no-agent    c-orphan   no agent pod on the node",
        "  untrusted   d-forged   condition written by kubectl-edit",
        "4 nodes: 1 in sync, 3 not",
    ] {
        assert!(
            text.stdout.contains(line),
            "{line:?} missing:\n{}",
            text.stdout
        );
    }
    assert!(
        text.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        text.stdout
    );
    // Without the pods, the dead agent's last word fools the reader: what this list adds.
    let blind = json(&fleet(&ns, &cluster.kubeconfig(), &["-o", "json"]));
    assert_eq!(blind["nodes"][1]["status"], "in-sync", "{blind}");
}
