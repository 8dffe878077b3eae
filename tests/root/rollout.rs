//! Rollouts in waves (`ipmasq fleet rollout`, `config::rollout`) against a real control plane
//! with several agents, each in a network namespace of its own that reaches the API server over
//! a bridge: a rollout that reaches every wave and a promote that changes no rule, one halted
//! by a broken invariant and then aborted, one halted by a node's refused transaction and then
//! resumed, and nodes that join mid-rollout. Each asserts every node's kernel, not only the
//! conditions. The halts fail with the brake off (`IPMASQ_TEST_NO_BRAKE=1` in the environment
//! of `cargo test`: the agents inherit it).

use super::api_mode::PATIENCE;
use super::cluster::{api_agent_args, LocalCluster};
use super::health::ADDR;
use super::netns::{executable, wait_until, Netns};
use crate::util::{Run, Scratch};
use ipmasq::config::rollout::bucket;
use std::path::PathBuf;
use std::process::Stdio;

/// The API server's address on the bridge the nodes hang on.
const BRIDGE_ADDRESS: &str = "10.250.0.1";
const NEXT: &str = "/api/v1/namespaces/kube-system/configmaps/ip-masq-agent-next";
const BASE_CONFIG: &str = "nonMasqueradeCIDRs: [10.0.0.0/8, 198.51.100.0/24]\n";
const NEXT_CONFIG: &str = "nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\n";
/// A next config that masquerades the cluster's 10.0.0.0/8: `keep 10.0.0.0/8` breaks on it.
const BAD_NEXT_CONFIG: &str = "nonMasqueradeCIDRs: [100.64.0.0/10]\n";
/// A range only the base keeps, and one only the next config keeps.
const BASE_ONLY: &str = "198.51.100.0/24";
const NEXT_ONLY: &str = "100.64.0.0/10";
/// What an agent logs when its node takes the next config.
const TAKES_NEXT: &str = "taking the next config";

/// How a node's agent enforces.
enum Enforce {
    Nftables,
    /// nftables, the agent writing nothing to the API (`--node-status=false`).
    NftablesReadOnly,
    /// iptables-nft, through an `iptables-nft-restore` that refuses any transaction naming
    /// [`NEXT_ONLY`] while this file says `fail`.
    RefusingNext(PathBuf),
}

/// One node: its namespace (its own kernel), its agent and the agent's log.
struct Node {
    name: String,
    ns: Netns,
    log: PathBuf,
    iptables: bool,
    /// The agent's pid and arguments (nftables agents), for a restart.
    agent: Option<(u32, Vec<String>)>,
}

impl Node {
    /// Our rules as the node's kernel lists them.
    fn rules(&self) -> String {
        if self.iptables {
            self.ns.save("nft", false, Some("nat"))
        } else {
            self.ns
                .exec("nft", &["-a", "list", "table", "ip", "ipmasq"])
                .stdout
        }
    }

    fn on_base(&self) -> bool {
        let rules = self.rules();
        rules.contains(BASE_ONLY) && !rules.contains(NEXT_ONLY)
    }

    fn on_next(&self) -> bool {
        let rules = self.rules();
        rules.contains(NEXT_ONLY) && !rules.contains(BASE_ONLY)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The agent's passes so far (`ipmasq_syncs_total`, every result).
    fn passes(&self) -> f64 {
        let (_, metrics) = super::health::get(&self.ns, "/metrics");
        metrics
            .lines()
            .filter(|line| line.starts_with("ipmasq_syncs_total"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Stops the agent (SIGTERM: its rules stay) and starts it again, logging to a new file.
    fn restart(&mut self) {
        let (pid, args) = self.agent.take().expect("an nftables agent runs");
        super::netns::kill(pid, "TERM");
        assert_eq!(
            self.ns.wait_daemon(pid, PATIENCE),
            Some(0),
            "the agent exits on SIGTERM"
        );
        self.log = self.log.with_extension("restarted.log");
        let borrowed: Vec<&str> = args.iter().map(String::as_str).collect();
        let pid = self.ns.spawn_ipmasq(&borrowed, &self.log);
        self.agent = Some((pid, args));
    }

    /// Waits until the kernel holds what `condition` wants; fails with the rules and the log.
    fn wait(&self, what: &str, condition: impl Fn(&Node) -> bool) {
        assert!(
            wait_until(PATIENCE, || condition(self)),
            "{}: {what}: rules\n{}\nlog\n{}",
            self.name,
            self.rules(),
            self.log()
        );
    }
}

/// A control plane in its own namespace with a bridge, and the nodes on it.
struct Fleet {
    nodes: Vec<Node>,
    cluster: LocalCluster,
    api: Netns,
    dir: Scratch,
    /// The agents' kubeconfig, naming the server by its bridge address.
    kubeconfig: PathBuf,
}

impl Fleet {
    fn new(tag: &str) -> Fleet {
        let api = Netns::new(tag);
        api.sh(&format!(
            "ip link add br0 type bridge && ip addr add {BRIDGE_ADDRESS}/24 dev br0 && ip link set br0 up"
        ));
        let cluster = LocalCluster::up_reachable(&api, BRIDGE_ADDRESS);
        cluster.put_base_config(BASE_CONFIG);
        let dir = Scratch::new(&format!("rollout-{}", api.name));
        let port = cluster.env["API_URL"]
            .rsplit(':')
            .next()
            .expect("API_URL has a port")
            .to_string();
        let text = std::fs::read_to_string(cluster.agent_kubeconfig()).expect("agent.kubeconfig");
        let mut kubeconfig: serde_json::Value =
            serde_json::from_str(&text).expect("agent.kubeconfig is JSON");
        kubeconfig["clusters"][0]["cluster"]["server"] =
            format!("https://{BRIDGE_ADDRESS}:{port}").into();
        let path = dir.path.join("agent.kubeconfig");
        std::fs::write(&path, kubeconfig.to_string()).expect("write the agents' kubeconfig");
        Fleet {
            nodes: Vec::new(),
            cluster,
            api,
            dir,
            kubeconfig: path,
        }
    }

    /// [`Fleet::spawn_node`], then waits for the base's rules there.
    fn add_node(&mut self, name: &str, enforce: Enforce) -> &Node {
        let node = self.spawn_node(name, enforce);
        node.wait("the base's rules", Node::on_base);
        node
    }

    /// A Node object, a namespace on the bridge and an agent in API mode for it; returns once
    /// the agent was spawned.
    fn spawn_node(&mut self, name: &str, enforce: Enforce) -> &Node {
        let body =
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        let (status, answer) = self
            .cluster
            .admin("POST", "/api/v1/nodes", Some(&body.to_string()));
        assert_eq!(status, 201, "create the Node {name}: {answer}");
        let index = self.nodes.len();
        let mut ns = Netns::new("rollout-node");
        self.api.sh(&format!(
            "ip link add rv{index} type veth peer name eth0 netns {} && ip link set rv{index} master br0 up",
            ns.name
        ));
        ns.sh(&format!(
            "ip addr add 10.250.0.{}/24 dev eth0 && ip link set eth0 up",
            10 + index
        ));
        let log = self.dir.path.join(format!("{name}.log"));
        let kubeconfig = self.kubeconfig.display().to_string();
        let metrics = format!("--metrics-addr={ADDR}");
        let nftables = ["--backend=nftables"];
        let iptables = ["--backend=iptables", "--iptables-mode=nft"];
        let backend: &[&str] = match enforce {
            Enforce::Nftables | Enforce::NftablesReadOnly => &nftables,
            Enforce::RefusingNext(_) => &iptables,
        };
        let mut args = api_agent_args(backend, &kubeconfig, name, &metrics);
        args.push("--status-spread=0s");
        if matches!(enforce, Enforce::NftablesReadOnly) {
            args.push("--node-status=false");
        }
        let mut agent = None;
        match &enforce {
            Enforce::Nftables | Enforce::NftablesReadOnly => {
                let pid = ns.spawn_ipmasq(&args, &log);
                agent = Some((pid, args.iter().map(|a| a.to_string()).collect()));
            }
            Enforce::RefusingNext(mode) => {
                let fakes = self.dir.path.join(format!("fakes-{name}"));
                std::fs::create_dir_all(&fakes).unwrap();
                executable(
                    &fakes.join("iptables-nft-restore"),
                    &format!(
                        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in\n  *{NEXT_ONLY}*) if [ \"$(cat '{}')\" = fail ]; then echo 'iptables-restore: injected refusal of the next config' >&2; exit 1; fi;;\nesac\nprintf '%s\\n' \"$input\" | exec /usr/sbin/iptables-nft-restore \"$@\"\n",
                        mode.display()
                    ),
                );
                let child = ns
                    .ipmasq_with_path(&fakes, &args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .expect("spawn the agent");
                ns.adopt(child);
            }
        }
        self.nodes.push(Node {
            name: name.to_string(),
            ns,
            log,
            iptables: matches!(enforce, Enforce::RefusingNext(_)),
            agent,
        });
        self.nodes.last().unwrap()
    }

    fn node(&self, name: &str) -> &Node {
        self.nodes.iter().find(|n| n.name == name).expect("a node")
    }

    /// `ipmasq fleet rollout ARGS` as the admin, from the control plane's namespace.
    fn rollout(&self, args: &[&str]) -> Run {
        let admin = self.cluster.kubeconfig().display().to_string();
        let mut full = vec!["fleet", "rollout"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--kubeconfig", &admin]);
        self.api.ipmasq(&full)
    }

    /// `status -o json`, with its exit code.
    fn status(&self) -> (i32, serde_json::Value) {
        let run = self.rollout(&["status", "-o", "json"]);
        let json = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|err| panic!("status -o json: {err}: {}\n{}", run.stdout, run.stderr));
        (run.code, json)
    }

    /// Starts a rollout of `config` with `flags`; fails unless it started.
    fn start(&self, config: &str, flags: &[&str]) {
        let file = self.dir.path.join("next.yaml");
        std::fs::write(&file, config).unwrap();
        let file = file.display().to_string();
        let mut args = vec!["start", file.as_str()];
        args.extend_from_slice(flags);
        let run = self.rollout(&args);
        assert_eq!(run.code, 0, "rollout start: {}{}", run.stdout, run.stderr);
    }

    /// The rollout's annotations as the API holds them.
    fn annotations(&self) -> serde_json::Value {
        let (status, answer) = self.cluster.admin("GET", NEXT, None);
        assert_eq!(status, 200, "get the rollout: {answer}");
        let object: serde_json::Value = serde_json::from_str(&answer).unwrap();
        object["metadata"]["annotations"].clone()
    }

    /// Moves the rollout's start `hours` into the past (a GET and a PUT of the object, as
    /// read): the waves it covers start at once.
    fn start_hours_ago(&self, hours: i64) {
        let (status, answer) = self.cluster.admin("GET", NEXT, None);
        assert_eq!(status, 200, "get the rollout: {answer}");
        let mut object: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let start = k8s_openapi::jiff::Timestamp::now()
            - k8s_openapi::jiff::SignedDuration::from_hours(hours);
        object["metadata"]["annotations"][ipmasq::config::rollout::START] =
            start.to_string().into();
        let (status, answer) = self.cluster.admin("PUT", NEXT, Some(&object.to_string()));
        assert_eq!(status, 200, "move the rollout's start: {answer}");
    }

    /// The halt as the rollout's ConfigMap holds it, once written.
    fn wait_halt(&self) -> serde_json::Value {
        let mut halt = None;
        assert!(
            wait_until(PATIENCE, || {
                halt = self.annotations()[ipmasq::config::rollout::HALTED]
                    .as_str()
                    .map(|text| serde_json::from_str(text).expect("the halt is JSON"));
                halt.is_some()
            }),
            "no halt written; logs:\n{}",
            self.logs()
        );
        halt.unwrap()
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- {}\n{}", n.name, n.log()))
            .collect()
    }
}

/// `count` node names whose bucket is in `range` (so a test knows which wave holds each).
fn names_in(range: std::ops::Range<u32>, count: usize, prefix: &str) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|name| range.contains(&bucket(name)))
        .take(count)
        .collect()
}

fn names(json: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = json
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Three nodes, one per wave of 34, 67 and 100 %: each wave reaches its node and no other (the
/// waves moved on by moving the start into the past), status says who is on which config, and
/// promote leaves every rule where it was (the same nft handles on every node).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_rollout_reaches_each_wave_and_promote_changes_no_rule() {
    let mut fleet = Fleet::new("rollout-done");
    let a = names_in(0..3_400, 1, "wave1").remove(0);
    let b = names_in(3_400..6_700, 1, "wave2").remove(0);
    let c = names_in(6_700..10_000, 1, "wave3").remove(0);
    for name in [&a, &b, &c] {
        fleet.add_node(name, Enforce::Nftables);
    }
    fleet.start(
        NEXT_CONFIG,
        &[
            "--waves",
            "34,67,100",
            "--soak",
            "1h",
            "--invariant",
            "keep 10.0.0.0/8",
            "--invariant",
            "masquerade 8.8.8.8",
        ],
    );
    fleet
        .node(&a)
        .wait("wave 1 takes the next config", Node::on_next);
    assert!(fleet.node(&b).on_base() && fleet.node(&c).on_base());
    let again = fleet.rollout(&["start", "/dev/null"]);
    assert_eq!(
        again.code, 1,
        "a second rollout is refused: {}",
        again.stderr
    );
    assert!(
        again.stderr.contains("a rollout is running already"),
        "{}",
        again.stderr
    );
    assert!(
        wait_until(PATIENCE, || {
            let (code, json) = fleet.status();
            code == 0
                && json["state"] == "running"
                && json["wave"] == 1
                && names(&json["nodes"]["next"]) == [a.clone()]
                && names(&json["nodes"]["base"]) == {
                    let mut v = vec![b.clone(), c.clone()];
                    v.sort();
                    v
                }
                && names(&json["nextWave"]["nodes"]) == [b.clone()]
        }),
        "status: {}",
        fleet.rollout(&["status"]).stdout
    );
    fleet.start_hours_ago(1);
    fleet
        .node(&b)
        .wait("wave 2 takes the next config", Node::on_next);
    assert!(fleet.node(&c).on_base(), "wave 3 has not started");
    fleet.start_hours_ago(3);
    fleet
        .node(&c)
        .wait("wave 3 takes the next config", Node::on_next);
    assert!(
        wait_until(PATIENCE, || {
            let (code, json) = fleet.status();
            code == 0 && json["state"] == "done" && names(&json["nodes"]["next"]).len() == 3
        }),
        "status: {}",
        fleet.rollout(&["status"]).stdout
    );
    let before: Vec<String> = fleet.nodes.iter().map(Node::rules).collect();
    let run = fleet.rollout(&["promote"]);
    assert_eq!(run.code, 0, "promote: {}{}", run.stdout, run.stderr);
    for node in &fleet.nodes {
        assert!(
            wait_until(PATIENCE, || node
                .log()
                .contains("not on a rollout's next config")),
            "{} never saw the promote:\n{}",
            node.name,
            node.log()
        );
    }
    let after: Vec<String> = fleet.nodes.iter().map(Node::rules).collect();
    assert_eq!(
        before, after,
        "promote changes no rule (nft handles included)"
    );
    assert_eq!(fleet.rollout(&["status"]).code, 3, "no rollout any more");
    for node in &fleet.nodes {
        assert!(
            !node.log().contains("halting the rollout"),
            "{}",
            node.log()
        );
    }
}

/// A next config that breaks `keep 10.0.0.0/8`: the node of the first wave applies it, judges
/// its live rules, halts the rollout and goes back to the base; the node outside the wave never
/// takes it. Abort then ends the rollout.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_broken_invariant_halts_the_rollout_and_the_wave_goes_back() {
    let mut fleet = Fleet::new("rollout-invariant");
    let a = names_in(0..5_000, 1, "in").remove(0);
    let b = names_in(5_000..10_000, 1, "out").remove(0);
    fleet.add_node(&a, Enforce::Nftables);
    fleet.add_node(&b, Enforce::Nftables);
    fleet.start(
        BAD_NEXT_CONFIG,
        &[
            "--waves",
            "50,100",
            "--soak",
            "1h",
            "--invariant",
            "keep 10.0.0.0/8",
        ],
    );
    let halt = fleet.wait_halt();
    assert_eq!(halt["node"], a.as_str(), "{halt}");
    assert_eq!(halt["reason"], "InvariantBroken", "{halt}");
    assert!(
        halt["diagnostic"]
            .as_str()
            .is_some_and(|d| d.contains("keep 10.0.0.0/8")),
        "{halt}"
    );
    let node_a = fleet.node(&a);
    node_a.wait("back on the base after the halt", |n| {
        n.rules().contains(BASE_ONLY) && n.rules().contains("10.0.0.0/8")
    });
    assert!(node_a.log().contains(TAKES_NEXT), "{}", node_a.log());
    // Every wave's start in the past: a halted rollout holds its wave, so the node of the
    // second wave still never takes the next config (seen after a pass that read the change).
    let node_b = fleet.node(&b);
    let passes = node_b.passes();
    fleet.start_hours_ago(5);
    assert!(
        wait_until(PATIENCE, || node_b.passes() > passes),
        "no pass after the rollout's change:\n{}",
        node_b.log()
    );
    assert!(node_b.on_base());
    assert!(
        !node_b.log().contains(TAKES_NEXT),
        "outside the wave, never the next config:\n{}",
        node_b.log()
    );
    let (code, json) = fleet.status();
    assert_eq!(code, 1, "a halted rollout exits 1: {json}");
    assert_eq!(json["state"], "halted");
    assert_eq!(json["halted"]["node"], a.as_str());
    assert!(names(&json["nodes"]["failed"]).contains(&a), "{json}");
    let run = fleet.rollout(&["promote"]);
    assert_eq!(
        run.code, 1,
        "a halted rollout is not promoted: {}",
        run.stderr
    );
    let run = fleet.rollout(&["abort"]);
    assert_eq!(run.code, 0, "abort: {}", run.stderr);
    let (code, json) = fleet.status();
    assert_eq!((code, json["state"].as_str()), (1, Some("aborted")));
    assert!(fleet.node(&a).rules().contains("10.0.0.0/8"));
    let run = fleet.rollout(&["start", "/dev/null"]);
    assert_eq!(
        run.code, 0,
        "an aborted rollout can be replaced: {}",
        run.stderr
    );
}

/// One node's transactions naming the next config are refused (a failing iptables-nft-restore
/// there): the rollout halts with `KernelRefused`, the node keeps the base, the other is never
/// touched; once the node is mended, `resume` starts the wave again and the node takes it.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_kernel_refusal_halts_the_rollout_and_resume_starts_the_wave_again() {
    let mut fleet = Fleet::new("rollout-refusal");
    let mode = fleet.dir.path.join("mode");
    std::fs::write(&mode, "fail").unwrap();
    let a = names_in(0..5_000, 1, "in").remove(0);
    let b = names_in(5_000..10_000, 1, "out").remove(0);
    fleet.add_node(&a, Enforce::RefusingNext(mode.clone()));
    fleet.add_node(&b, Enforce::Nftables);
    fleet.start(NEXT_CONFIG, &["--waves", "50,100", "--soak", "1h"]);
    let halt = fleet.wait_halt();
    assert_eq!(halt["node"], a.as_str(), "{halt}");
    assert_eq!(halt["reason"], "KernelRefused", "{halt}");
    assert!(
        halt["diagnostic"]
            .as_str()
            .is_some_and(|d| d.contains("injected refusal")),
        "{halt}"
    );
    assert!(fleet.node(&a).on_base(), "the refused config never landed");
    assert!(!fleet.node(&b).log().contains(TAKES_NEXT));
    let run = fleet.rollout(&["resume"]);
    assert_eq!(run.code, 0, "resume before the mend: {}", run.stderr);
    let halt_again = fleet.wait_halt();
    assert_eq!(
        halt_again["node"],
        a.as_str(),
        "still refused: halted again"
    );
    std::fs::write(&mode, "ok").unwrap();
    let run = fleet.rollout(&["resume"]);
    assert_eq!(run.code, 0, "resume: {}", run.stderr);
    fleet
        .node(&a)
        .wait("the mended node takes the next config", Node::on_next);
    assert!(fleet.node(&b).on_base(), "the second wave has not started");
    let (code, json) = fleet.status();
    assert_eq!(code, 0, "{json}");
    assert_eq!(
        (json["state"].as_str(), json["wave"].as_u64()),
        (Some("running"), Some(1))
    );
    assert!(json["halted"].is_null(), "{json}");
}

/// Nodes that join while a rollout runs follow the function from their first rules: one whose
/// place is in the wave takes the next config, one outside it the base; abort puts every node
/// back on the base.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn nodes_joining_mid_rollout_follow_the_waves_and_abort_puts_all_back() {
    let mut fleet = Fleet::new("rollout-join");
    let ins = names_in(0..5_000, 2, "in");
    let out = names_in(5_000..10_000, 1, "out").remove(0);
    fleet.add_node(&ins[0], Enforce::Nftables);
    fleet.start(NEXT_CONFIG, &["--waves", "50,100", "--soak", "1h"]);
    fleet.node(&ins[0]).wait("wave 1", Node::on_next);
    let joining = fleet.spawn_node(&ins[1], Enforce::Nftables);
    joining.wait(
        "a joining node in the wave takes the next config",
        Node::on_next,
    );
    let log = joining.log();
    let first = log
        .lines()
        .find(|line| line.contains("config accepted"))
        .unwrap_or_default();
    assert!(
        first.contains(NEXT_ONLY) && !first.contains(BASE_ONLY),
        "its first config is the next one, never the base first:\n{log}"
    );
    fleet.add_node(&out, Enforce::Nftables);
    assert!(!fleet.node(&out).log().contains(TAKES_NEXT));
    let run = fleet.rollout(&["abort"]);
    assert_eq!(run.code, 0, "abort: {}", run.stderr);
    for node in &fleet.nodes {
        node.wait("back on the base after abort", Node::on_base);
    }
}

/// A rollout limited to the nodes labelled `rollout=yes`: a node whose place is in the wave
/// stays on the base until it is labelled, takes the next config then, keeps it across an agent
/// restart (the last-known-good applied at start is the next config: not one rule rewritten),
/// and goes back to the base when the label goes.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_relabelled_node_reevaluates_and_a_restart_keeps_the_next_config() {
    let mut fleet = Fleet::new("rollout-relabel");
    let a = names_in(0..5_000, 1, "in").remove(0);
    fleet.add_node(&a, Enforce::Nftables);
    fleet.start(
        NEXT_CONFIG,
        &[
            "--waves",
            "50,100",
            "--soak",
            "1h",
            "--node-selector",
            "rollout=yes",
        ],
    );
    let (code, json) = fleet.status();
    assert_eq!((code, json["state"].as_str()), (0, Some("running")));
    assert!(
        !fleet.node(&a).log().contains(TAKES_NEXT),
        "not selected yet"
    );
    fleet.label(&a, serde_json::json!({"rollout": "yes"}));
    fleet
        .node(&a)
        .wait("labelled into the rollout", Node::on_next);
    // The rules are in before the pass saves them as last-known-good: a restart before the
    // save would start from the older one (the base), which this test is not about.
    let saved_next = |node: &Node| {
        node.log()
            .lines()
            .any(|l| l.contains("last-known-good config saved") && l.contains("ip-masq-agent-next"))
    };
    assert!(
        wait_until(PATIENCE, || saved_next(fleet.node(&a))),
        "the next config was never saved as last-known-good:\n{}",
        fleet.node(&a).log()
    );
    let before = fleet.node(&a).rules();
    let node = fleet.nodes.iter_mut().find(|n| n.name == a).unwrap();
    node.restart();
    assert!(
        wait_until(PATIENCE, || node.log().contains(
            "the API's config is the last-known-good already in force"
        )),
        "the restarted agent never took the API's view:\n{}",
        node.log()
    );
    assert_eq!(node.rules(), before, "a restart rewrites no rule");
    assert!(node
        .log()
        .contains("applying the last-known-good config at once"));
    fleet.label(&a, serde_json::json!({}));
    fleet
        .node(&a)
        .wait("labelled out of the rollout: the base", Node::on_base);
}

impl Fleet {
    /// Replaces the Node's labels (an update of the whole object, as read).
    fn label(&self, name: &str, labels: serde_json::Value) {
        let path = format!("/api/v1/nodes/{name}");
        let (status, answer) = self.cluster.admin("GET", &path, None);
        assert_eq!(status, 200, "read the Node: {answer}");
        let mut object: serde_json::Value = serde_json::from_str(&answer).unwrap();
        object["metadata"]["labels"] = labels;
        let (status, answer) = self.cluster.admin("PUT", &path, Some(&object.to_string()));
        assert_eq!(status, 200, "relabel the Node: {answer}");
    }
}

/// A next config the agents refuse (a CIDR that is not aligned), written by hand with its
/// schedule (`start` would have refused it): the node of the wave keeps the base, never a rule
/// of the next config, and halts the rollout with `ConfigRejected` and the diagnostic.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_rejected_next_config_halts_the_rollout() {
    let mut fleet = Fleet::new("rollout-rejected");
    let a = names_in(0..10_000, 1, "any").remove(0);
    fleet.add_node(&a, Enforce::Nftables);
    let rollout = ipmasq::config::rollout::Rollout {
        waves: vec![100],
        soak: std::time::Duration::from_secs(3600),
        start: k8s_openapi::jiff::Timestamp::now(),
        selector: None,
        invariants: Vec::new(),
        halted: None,
        aborted: None,
    };
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "ip-masq-agent-next",
            "namespace": "kube-system",
            "annotations": rollout.annotations(),
        },
        "data": {"config": "nonMasqueradeCIDRs: [100.64.0.1/10]\n"},
    });
    let (status, answer) = fleet.cluster.admin(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        Some(&body.to_string()),
    );
    assert_eq!(status, 201, "create the rollout by hand: {answer}");
    let halt = fleet.wait_halt();
    assert_eq!(halt["node"], a.as_str(), "{halt}");
    assert_eq!(halt["reason"], "ConfigRejected", "{halt}");
    assert!(
        halt["diagnostic"]
            .as_str()
            .is_some_and(|d| d.contains("100.64.0.1/10")),
        "{halt}"
    );
    let node = fleet.node(&a);
    assert!(
        node.on_base(),
        "the refused config never reached the kernel"
    );
    assert!(!node.rules().contains("100.64.0.0/10"));
}

/// A node whose agent writes nothing (`--node-status=false`) breaks an invariant: no halt
/// reaches the API, yet the node goes back to the base at once and stays there for that
/// attempt of the rollout (the brake's latch), while the rollout itself runs on.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_failing_node_goes_back_to_the_base_even_when_it_cannot_halt() {
    let mut fleet = Fleet::new("rollout-latch");
    let a = names_in(0..5_000, 1, "in").remove(0);
    fleet.add_node(&a, Enforce::NftablesReadOnly);
    fleet.start(
        BAD_NEXT_CONFIG,
        &[
            "--waves",
            "50,100",
            "--soak",
            "1h",
            "--invariant",
            "keep 10.0.0.0/8",
        ],
    );
    let node = fleet.node(&a);
    assert!(
        wait_until(PATIENCE, || node.log().contains("back to the base")),
        "the brake never judged:\n{}",
        node.log()
    );
    node.wait("back on the base without a halt", |n| {
        n.rules().contains(BASE_ONLY) && n.rules().contains("10.0.0.0/8")
    });
    // SIGHUP: a pass that reads the inputs again, which still hold the same rollout.
    let passes = node.passes();
    super::netns::kill(node.agent.as_ref().expect("an agent").0, "HUP");
    assert!(
        wait_until(PATIENCE, || node.passes() > passes),
        "no pass after SIGHUP:\n{}",
        node.log()
    );
    assert!(
        node.rules().contains(BASE_ONLY),
        "latched: the node stays on the base"
    );
    assert!(
        fleet.annotations()[ipmasq::config::rollout::HALTED].is_null(),
        "a read-only agent writes no halt"
    );
    let (code, json) = fleet.status();
    assert_eq!(
        (code, json["state"].as_str()),
        (0, Some("running")),
        "{json}"
    );
}
