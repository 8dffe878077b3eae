//! API mode against a real control plane (`scripts/local-cluster` in the test's own network
//! namespace): the agent runs there with `--config-source=api` and the agent's kubeconfig, and
//! the tests edit the ConfigMap as an admin and read the kernel with `nft` / `iptables-save`:
//! changes, an invalid edit, a deletion, the latency of 20 edits, the API stopped (rules,
//! `/healthz` and `/readyz` stay; a restarted agent applies the last-known-good at once).

use super::cluster::{api_agent_args, LocalCluster};
use super::health::{get, ADDR};
use super::netns::{kill, wait_until, Netns};
use crate::util::Scratch;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long anything may take to be seen (generous: tests must not depend on speed).
pub(super) const PATIENCE: Duration = Duration::from_secs(30);
const CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/ip-masq-agent";
/// What a missing ConfigMap means: upstream's defaults (172.16.0.0/12 is one of them).
const A_DEFAULT: &str = "172.16.0.0/12";

/// The backend an agent runs with, and how the tests read its rules.
#[derive(Clone, Copy)]
pub(super) enum Backend {
    Nftables,
    IptablesNft,
}

impl Backend {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Backend::Nftables => &["--backend=nftables"],
            Backend::IptablesNft => &["--backend=iptables", "--iptables-mode=nft"],
        }
    }

    /// Our rules as the kernel lists them (empty when there are none).
    fn rules(self, ns: &Netns) -> String {
        match self {
            Backend::Nftables => ns.exec("nft", &["list", "table", "ip", "ipmasq"]).stdout,
            Backend::IptablesNft => ns.save("nft", false, Some("nat")),
        }
    }
}

/// A control plane and an agent in API mode in one namespace (the cluster is stopped before
/// the namespace, its processes and the agent go).
pub(super) struct ApiNode {
    pub(super) cluster: LocalCluster,
    pub(super) ns: Netns,
    backend: Backend,
    logs: Scratch,
    agent: Option<(u32, PathBuf)>,
    starts: usize,
}

impl ApiNode {
    pub(super) fn new(tag: &str, backend: Backend) -> ApiNode {
        ApiNode::with_apiserver_flags(tag, backend, &[])
    }

    fn with_apiserver_flags(tag: &str, backend: Backend, flags: &[&str]) -> ApiNode {
        let ns = Netns::new(tag);
        let cluster = LocalCluster::up_with(&ns, flags);
        // Named by the namespace: tests with the same tag run at once in one process.
        let logs = Scratch::new(&format!("logs-{}", ns.name));
        ApiNode {
            cluster,
            ns,
            backend,
            logs,
            agent: None,
            starts: 0,
        }
    }

    /// Starts an agent (`--config-source=api` with the agent's kubeconfig); returns when it
    /// was spawned.
    pub(super) fn start_agent(&mut self) -> Instant {
        self.starts += 1;
        let log = self.logs.path.join(format!("agent-{}.log", self.starts));
        let kubeconfig = self.cluster.agent_kubeconfig().display().to_string();
        let metrics = format!("--metrics-addr={ADDR}");
        let args = api_agent_args(self.backend.flags(), &kubeconfig, "node-a", &metrics);
        let started = Instant::now();
        let pid = self.ns.spawn_ipmasq(&args, &log);
        self.agent = Some((pid, log));
        started
    }

    /// Stops the agent with SIGTERM (its rules stay) and waits for it to exit.
    fn stop_agent(&mut self) {
        let (pid, _) = self.agent.take().expect("an agent runs");
        kill(pid, "TERM");
        assert_eq!(
            self.ns.wait_daemon(pid, PATIENCE),
            Some(0),
            "the agent exits on SIGTERM"
        );
    }

    pub(super) fn log(&self) -> String {
        self.agent
            .as_ref()
            .map(|(_, log)| std::fs::read_to_string(log).unwrap_or_default())
            .unwrap_or_default()
    }

    pub(super) fn rules(&self) -> String {
        self.backend.rules(&self.ns)
    }

    /// Waits until the rules satisfy `condition`; fails with them and the log otherwise.
    pub(super) fn wait_rules(&self, what: &str, condition: impl Fn(&str) -> bool) {
        assert!(
            wait_until(PATIENCE, || condition(&self.rules())),
            "{what}: rules\n{}\nlog\n{}",
            self.rules(),
            self.log()
        );
    }

    pub(super) fn wait_log(&self, what: &str) {
        assert!(
            wait_until(PATIENCE, || self.log().contains(what)),
            "the log never said {what:?}:\n{}",
            self.log()
        );
    }

    /// Creates the ConfigMap, or replaces its data, with `text` under the key `config`.
    pub(super) fn put_config(&self, text: &str) {
        self.cluster.put_base_config(text);
    }

    fn delete_config(&self) {
        let (status, answer) = self.cluster.admin("DELETE", CONFIGMAP, None);
        assert_eq!(status, 200, "delete the ConfigMap: {answer}");
    }

    /// The last-known-good file the agent keeps (the namespace's state directory is its
    /// last-known-good's too: see `Netns::command`).
    pub(super) fn last_known_good(&self) -> Option<String> {
        std::fs::read_to_string(self.ns.state_dir().join("last-known-good.json")).ok()
    }
}

/// Creating the ConfigMap puts its CIDRs in the kernel; an edit the new ones; an invalid edit
/// leaves the last good rules (the diagnostic logged, the agent still ready); deleting it is
/// the missing file (upstream's defaults), as before it was created.
fn configmap_changes_reach_the_kernel(backend: Backend) {
    let mut node = ApiNode::new("api-changes", backend);
    node.start_agent();
    node.wait_log("watching the config ConfigMap");
    node.wait_rules("no ConfigMap: the defaults", |r| r.contains(A_DEFAULT));
    assert!(wait_until(PATIENCE, || get(&node.ns, "/readyz").0 == 200));

    node.put_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    node.wait_rules("created", |r| {
        r.contains("198.51.100.0/24") && !r.contains(A_DEFAULT)
    });
    node.wait_log("configmap kube-system/ip-masq-agent key config (resourceVersion ");
    // --dry-run reads the ConfigMap once and prints what it would apply: nothing, in sync.
    let kubeconfig = node.cluster.agent_kubeconfig().display().to_string();
    let mut dry = vec![
        "agent",
        "--dry-run",
        "--config-source=api",
        "--kubeconfig",
        &kubeconfig,
    ];
    dry.extend_from_slice(backend.flags());
    let run = node.ns.ipmasq(&dry);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("in sync, nothing to apply"),
        "{}",
        run.stdout
    );

    node.put_config("nonMasqueradeCIDRs: [203.0.113.0/24]\n");
    node.wait_rules("edited", |r| {
        r.contains("203.0.113.0/24") && !r.contains("198.51.100.0/24")
    });

    node.put_config("nonMasqueradeCIDRs: [203.0.113.7/24]\n");
    node.wait_log("invalid config rejected; keeping the last good config in force");
    assert!(node.rules().contains("203.0.113.0/24"), "{}", node.rules());
    assert_eq!(
        get(&node.ns, "/readyz").0,
        200,
        "the last good config is in force"
    );

    node.delete_config();
    node.wait_rules("deleted: the defaults", |r| {
        r.contains(A_DEFAULT) && !r.contains("203.0.113.0/24")
    });
    // The pass saves it once it has applied the rules.
    assert!(
        wait_until(PATIENCE, || node.last_known_good().is_some_and(|saved| {
            saved.contains("\"text\":null") && saved.contains("(not found)")
        })),
        "the deletion is the last-known-good: {:?}",
        node.last_known_good()
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn configmap_changes_reach_the_kernel_on_nftables() {
    configmap_changes_reach_the_kernel(Backend::Nftables);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn configmap_changes_reach_the_kernel_on_iptables_nft() {
    configmap_changes_reach_the_kernel(Backend::IptablesNft);
}

/// `nft monitor` inside the namespace: each line it prints, with when it was read.
pub(super) fn nft_monitor(ns: &mut Netns) -> mpsc::Receiver<(Instant, String)> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.name, "stdbuf", "-oL", "nft", "monitor"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run nft monitor");
    let stdout = child.stdout.take().expect("nft monitor's stdout");
    ns.adopt(child);
    let (lines, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    receiver
}

/// Seconds between the first log lines holding `from` and `to`, by their timestamps
/// (`2026-01-01T10:00:00.123456Z ...`).
pub(super) fn seconds_between(log: &str, from: &str, to: &str) -> f64 {
    let at = |what: &str| -> f64 {
        let line = log
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no log line with {what:?}:\n{log}"));
        let time = line
            .split_whitespace()
            .next()
            .and_then(|stamp| stamp.split_once('T'))
            .map(|(_, time)| time.trim_end_matches('Z'))
            .unwrap_or_else(|| panic!("no timestamp: {line}"));
        time.split(':')
            .map(|part| part.parse::<f64>().expect("a timestamp's number"))
            .fold(0.0, |total, part| total * 60.0 + part)
    };
    at(to) - at(from)
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// 20 edits: from the API write (the admin's request answered) to the element in the kernel
/// (`nft monitor` prints it). Each must arrive within the deadline; p50 and p99 are reported.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn twenty_edits_reach_the_kernel_and_their_latency_is_reported() {
    let mut node = ApiNode::new("api-latency", Backend::Nftables);
    node.put_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    node.start_agent();
    node.wait_rules("created", |r| r.contains("198.51.100.0/24"));
    let monitor = nft_monitor(&mut node.ns);
    // The monitor is listening once it reports a commit made after it started: commit a probe
    // table until it does.
    assert!(
        wait_until(PATIENCE, || {
            node.ns
                .sh("nft add table ip probe && nft delete table ip probe");
            std::iter::from_fn(|| monitor.recv_timeout(Duration::from_millis(100)).ok())
                .any(|(_, line)| line.contains("probe"))
        }),
        "nft monitor never reported a commit"
    );
    // From the request sent (curl spawned) and from its answer read, to the element listed.
    let (mut from_sent, mut from_answer) = (Vec::new(), Vec::new());
    for edit in 1..=20 {
        let address = format!("203.0.113.{edit}");
        let sent = Instant::now();
        node.put_config(&format!("nonMasqueradeCIDRs: [{address}/32]\n"));
        let written = Instant::now();
        let deadline = written + PATIENCE;
        let seen = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match monitor.recv_timeout(left) {
                Ok((at, line)) if line.contains("element") && line.contains(&address) => break at,
                Ok(_) => {}
                Err(_) => panic!(
                    "edit {edit} ({address}) never reached the kernel:\n{}\n{}",
                    node.rules(),
                    node.log()
                ),
            }
        };
        from_sent.push(seen.saturating_duration_since(sent));
        from_answer.push(seen.saturating_duration_since(written));
    }
    assert!(node.rules().contains("203.0.113.20"), "{}", node.rules());
    for (latencies, from) in [
        (
            &mut from_sent,
            "request sent (curl spawned in the namespace)",
        ),
        (
            &mut from_answer,
            "answer read (0 when the element came first)",
        ),
    ] {
        latencies.sort();
        eprintln!(
            "API mode, 20 ConfigMap edits, {from} -> element in the kernel (nft monitor): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            percentile(latencies, 50).as_secs_f64() * 1e3,
            percentile(latencies, 99).as_secs_f64() * 1e3,
            latencies[latencies.len() - 1].as_secs_f64() * 1e3,
        );
    }
}

/// The API stopped: the rules, `/healthz` and `/readyz` stay as they were; an agent started
/// while it is down applies the last-known-good config at once and is ready.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_api_down_changes_nothing_and_a_restart_applies_the_last_known_good() {
    let mut node = ApiNode::new("api-down", Backend::Nftables);
    node.put_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    node.start_agent();
    node.wait_rules("created", |r| r.contains("198.51.100.0/24"));
    assert!(wait_until(PATIENCE, || node
        .last_known_good()
        .is_some_and(|saved| saved.contains("198.51.100.0/24"))));
    assert!(wait_until(PATIENCE, || get(&node.ns, "/readyz").0 == 200));
    let before = node.rules();

    node.cluster.down();
    node.wait_log("cannot read the config ConfigMap from the API");
    assert!(
        !node.log().contains("failed with error"),
        "no line of the client's per retry (--v below 6):\n{}",
        node.log()
    );
    // For a while after the outage is noticed, every probe answers as before.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        assert_eq!(get(&node.ns, "/healthz").0, 200, "{}", node.log());
        assert_eq!(get(&node.ns, "/readyz").0, 200, "{}", node.log());
    }
    assert_eq!(node.rules(), before, "an outage changes no rule");

    // Restarted with the API down and the rules gone: the last-known-good comes back at once.
    node.stop_agent();
    node.ns.sh("nft delete table ip ipmasq");
    let started = node.start_agent();
    let mut logged = None;
    let mut in_kernel = None;
    assert!(
        wait_until(PATIENCE, || {
            if logged.is_none() && node.log().contains("applying the last-known-good config") {
                logged = Some(started.elapsed());
            }
            if in_kernel.is_none() && node.rules().contains("198.51.100.0/24") {
                in_kernel = Some(started.elapsed());
            }
            logged.is_some() && in_kernel.is_some()
        }),
        "the last-known-good was not applied:\n{}\n{}",
        node.rules(),
        node.log()
    );
    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    let log = node.log();
    let own_clock = seconds_between(&log, "ipmasq agent starting", "rules installed");
    eprintln!(
        "API down at start: by the agent's log, {:.1} ms from its first line to the last-known-good's rules installed; from the spawn (ip netns exec), logged within {:.1} ms, rules seen in the kernel within {:.1} ms (polled)",
        own_clock * 1e3,
        ms(logged),
        ms(in_kernel)
    );
    // The first pass does not wait for the API, which the watcher finds unreachable meanwhile.
    node.wait_log("cannot read the config ConfigMap from the API");
    assert!(wait_until(PATIENCE, || get(&node.ns, "/readyz").0 == 200));
    assert_eq!(node.rules(), before, "the same rules as before the restart");
}

/// The etcd of `cluster`, as its kube-apiserver was told (`--etcd-servers=URL`).
fn etcd_url(cluster: &LocalCluster) -> String {
    let pid = std::fs::read_to_string(cluster.dir.path.join("kube-apiserver.pid"))
        .expect("kube-apiserver.pid");
    let command_line = std::fs::read(format!("/proc/{}/cmdline", pid.trim()))
        .expect("the apiserver's command line");
    String::from_utf8_lossy(&command_line)
        .split('\0')
        .find_map(|arg| arg.strip_prefix("--etcd-servers=").map(str::to_string))
        .expect("--etcd-servers")
}

/// etcd's v3 HTTP gateway inside the namespace: POST `path` with `body`, the answer's JSON.
fn etcd(ns: &Netns, url: &str, path: &str, body: &str) -> serde_json::Value {
    let run = ns.exec(
        "curl",
        &[
            "-sS",
            "--max-time",
            "10",
            "-X",
            "POST",
            "--data-binary",
            body,
            &format!("{url}{path}"),
        ],
    );
    assert_eq!(run.code, 0, "etcd {path}: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("etcd {path}: {e}: {}", run.stdout))
}

/// More than 100 writes while the agent is stopped (SIGSTOP), etcd compacted past all of them,
/// the agent's connection cut: after SIGCONT the agent catches up to the last write and applies
/// it once. With the server's watch cache (sized by its last 75 s of events, out of reach of
/// etcd's compaction) the watch resumes; without it (`configmaps#0`) the resumed watch reaches
/// the compacted etcd, gets `410 Gone`, and the agent lists again.
fn writes_missed_while_stopped_are_caught_up(watch_cache: bool) {
    let flags: &[&str] = if watch_cache {
        &[]
    } else {
        &["--watch-cache-sizes=configmaps#0"]
    };
    let tag = if watch_cache {
        "api-resume"
    } else {
        "api-relist"
    };
    let mut node = ApiNode::with_apiserver_flags(tag, Backend::Nftables, flags);
    node.put_config("nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    node.start_agent();
    node.wait_rules("created", |r| r.contains("198.51.100.0/24"));
    node.wait_log("watching the config ConfigMap");
    let (pid, _) = node.agent.clone().expect("an agent runs");
    kill(pid, "STOP");
    // The server would keep the stopped agent's watch and send it every event: its connections
    // are cut (ss -K) first, so its watch must start again from the version it had.
    let sockets = node.ns.sh("ss -tnpH state established");
    let ports: Vec<&str> = sockets
        .lines()
        .filter(|line| line.contains(&format!("pid={pid},")))
        .filter_map(|line| line.split_whitespace().nth(2)?.rsplit_once(':'))
        .map(|(_, port)| port)
        .collect();
    assert!(!ports.is_empty(), "the agent's connections:\n{sockets}");
    for port in ports {
        node.ns
            .sh(&format!("ss -K state established '( sport = :{port} )'"));
    }
    let writes = 120;
    for write in 1..=writes {
        node.put_config(&format!(
            "nonMasqueradeCIDRs: [203.0.113.{}/32]\n",
            write % 200
        ));
    }
    node.put_config("nonMasqueradeCIDRs: [198.51.100.77/32]\n");
    let url = etcd_url(&node.cluster);
    let revision = etcd(&node.ns, &url, "/v3/kv/range", r#"{"key":"AA=="}"#)["header"]["revision"]
        .as_str()
        .expect("etcd's revision")
        .to_string();
    etcd(
        &node.ns,
        &url,
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{revision}","physical":true}}"#),
    );
    kill(pid, "CONT");
    node.wait_rules("the last write", |r| {
        r.contains("198.51.100.77") && !r.contains("198.51.100.0/24")
    });
    let log = node.log();
    let lists = log.matches("listing the config ConfigMap").count();
    let last_accepted = log
        .lines()
        .filter(|l| l.contains("config accepted") && l.contains("198.51.100.77/32"))
        .count();
    let accepted = log.matches("config accepted").count();
    eprintln!(
        "{writes} writes while stopped, etcd compacted at revision {revision}: {lists} lists in all, {accepted} configs accepted, the last once: {}",
        last_accepted == 1
    );
    let relisted = log.contains("410 Gone") && lists >= 2;
    eprintln!(
        "{}",
        if relisted {
            "the watch's version had expired (410 Gone): listed again"
        } else {
            "the watch resumed from the server's watch cache (no 410)"
        }
    );
    assert_eq!(relisted, !watch_cache, "{log}");
    assert_eq!(last_accepted, 1, "the last write is applied once:\n{log}");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn writes_missed_while_stopped_are_caught_up_from_the_watch_cache() {
    writes_missed_while_stopped_are_caught_up(true);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn writes_missed_while_stopped_are_caught_up_by_a_relist_after_410_gone() {
    writes_missed_while_stopped_are_caught_up(false);
}
