//! One node, two viewpoints: the agent runs as a DaemonSet pod would (the node's network
//! namespace, its own PID and mount namespaces, its config on a mount the host cannot see, the
//! state directory shared), and `show`, `explain` and `cleanup` run on the host. They judge
//! against exactly what the agent enforces, say where it came from, notice a dead agent, and a
//! clean exit leaves no file behind.

use super::netns::{kill, wait_until, Netns};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(20);

/// The pod's config: not upstream's defaults (100.64.0.0/10 is kept), so judging against the
/// defaults would report drift.
const POD_CONFIG: &str =
    "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 100.64.0.0/10\nresyncInterval: 1h\n";

/// An agent started like a DaemonSet pod: `unshare --pid --mount --fork`, so it is pid 1 of
/// its own PID namespace; a tmpfs over `pod_etc` (empty on the host) holds its config.
struct Pod {
    pid: u32,
    pod_etc: PathBuf,
    log: PathBuf,
}

impl Pod {
    fn start(ns: &mut Netns, backend: &str, tag: &str) -> Pod {
        let pod_etc = std::env::temp_dir().join(format!("{}-{tag}-pod-etc", ns.name));
        std::fs::create_dir_all(&pod_etc).unwrap();
        let log = std::env::temp_dir().join(format!("{}-{tag}-pod.log", ns.name));
        let script = format!(
            "mount -t tmpfs pod-config '{etc}' && printf '%s' '{config}' > '{etc}/ip-masq-agent' && exec '{bin}' agent {backend} --config='{etc}/ip-masq-agent' --metrics-addr=off",
            config = if tag == "m" { MATRIX_CONFIG } else { POD_CONFIG },
            etc = pod_etc.display(),
            bin = crate::util::binary().display(),
        );
        let child = ns
            .command(
                Path::new("unshare"),
                // --kill-child: when unshare is killed (the test's clean-up), so is the pod.
                &[
                    "--pid",
                    "--mount",
                    "--fork",
                    "--kill-child",
                    "sh",
                    "-c",
                    &script,
                ],
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn unshare");
        let pid = child.id();
        ns.adopt(child);
        Pod { pid, pod_etc, log }
    }

    /// The agent's pid as the host sees it (the child of `unshare`, pid 1 in the pod).
    fn host_pid(&self) -> u32 {
        let children = format!("/proc/{0}/task/{0}/children", self.pid);
        let mut found = None;
        assert!(
            wait_until(PATIENCE, || {
                found = std::fs::read_to_string(&children)
                    .ok()
                    .and_then(|t| t.split_whitespace().next()?.parse().ok());
                found.is_some()
            }),
            "unshare's child"
        );
        found.unwrap()
    }

    /// Waits until the agent has recorded the config it enforces.
    fn wait_recorded(&self, ns: &Netns) {
        assert!(
            wait_until(PATIENCE, || state(ns)
                .is_some_and(|s| s["configRead"].is_object())),
            "the agent recorded its config:\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_dir(&self.pod_etc);
    }
}

fn state_files(ns: &Netns) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(ns.state_dir())
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("agent-net"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn state(ns: &Netns) -> Option<Value> {
    let name = state_files(ns)
        .into_iter()
        .find(|n| n.ends_with(".json") && !n.ends_with("-config.json"))?;
    let text = std::fs::read_to_string(ns.state_dir().join(name)).ok()?;
    serde_json::from_str(&text).ok()
}

fn json(run: &crate::util::Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr))
}

/// The pod's agent as the host sees it: pid 1 recorded, its config recorded, and `show` and
/// `explain` on the host judging against that config — in sync, 100.64.1.1 kept, agreeing —
/// where judging against the host's (absent) file would report drift. Then SIGKILL (an OOM
/// kill): the state is stale and both tools say so; a restarted pod ends with SIGTERM and
/// leaves no state, applied-config or lock file.
fn a_pods_agent_is_judged_on_the_host(backend: &str) {
    let mut ns = Netns::new("pod");
    let pod = Pod::start(&mut ns, backend, "a");
    pod.wait_recorded(&ns);
    let recorded = state(&ns).unwrap();
    assert_eq!(recorded["pid"], 1, "a pod's agent is pid 1: {recorded}");
    let pod_config = format!("{}/ip-masq-agent", pod.pod_etc.display());
    assert_eq!(recorded["configRead"]["path"], pod_config.as_str());
    let digest = recorded["configRead"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let expected_digest = ns.sh(&format!(
        "printf '%s' '{POD_CONFIG}' | sha256sum | cut -d' ' -f1"
    ));
    assert_eq!(
        digest,
        expected_digest.trim(),
        "sha256sum of the pod's file"
    );
    assert!(
        !Path::new(&pod_config).exists(),
        "the host cannot see the pod's config"
    );

    let show = ns.ipmasq(&["show", backend, "--color=never"]);
    eprintln!(
        "show on the host ({backend}):\n{}{}",
        show.stdout, show.stderr
    );
    assert_eq!(show.code, 0, "{}{}", show.stdout, show.stderr);
    let verdict = show
        .stdout
        .lines()
        .find(|l| l.starts_with("sync with"))
        .expect("a verdict line");
    assert!(
        verdict.starts_with(&format!("sync with {pod_config} (as the agent read it at "))
            && verdict.contains(&format!("sha256 {}", &digest[..12]))
            && verdict.ends_with("): in sync"),
        "{verdict}"
    );
    let report = json(&ns.ipmasq(&["show", backend, "-o", "json"]));
    assert_eq!(report["agent"]["pid"], 1);
    assert_eq!(report["sync"]["inSync"], true, "{report}");

    let explain = ns.ipmasq(&["explain", backend, "100.64.1.1", "-o", "json"]);
    let answer = json(&explain);
    assert_eq!(explain.code, 10, "kept: {answer}");
    assert_eq!(answer["outcome"], "keep-source");
    assert_eq!(answer["agree"], true);
    assert_eq!(answer["config"]["decision"]["cidr"], "100.64.0.0/10");
    assert_eq!(
        answer["config"]["decision"]["written"], "line 3, column 5",
        "the place in the pod's file: {answer}"
    );

    // SIGKILL (an OOM kill): pid 1 of the pod is gone; the host's pid 1 lives on.
    kill(pod.host_pid(), "KILL");
    assert!(ns.wait_daemon(pod.pid, PATIENCE).is_some());
    assert!(state(&ns).is_some(), "a killed agent leaves its state");
    let show = ns.ipmasq(&["show", backend, "--color=never"]);
    assert!(
        show.stdout
            .contains("agent:   no agent running (stale state of an agent that died: pid 1, "),
        "{}",
        show.stdout
    );
    assert!(!show.stdout.contains("sync with"), "{}", show.stdout);
    let explain = ns.ipmasq(&["explain", backend, "100.64.1.1"]);
    let host_has_a_config = Path::new("/etc/config/ip-masq-agent").exists();
    assert!(
        host_has_a_config
            || explain
                .stderr
                .contains("no agent running (stale state of an agent that died: pid 1, ")
                && explain.stderr.contains(
                    "no file at /etc/config/ip-masq-agent: judging against upstream's defaults"
                ),
        "{}",
        explain.stderr
    );

    // A new pod takes over; SIGTERM ends it cleanly, leaving nothing in the state directory.
    let second = Pod::start(&mut ns, backend, "b");
    assert!(
        wait_until(PATIENCE, || state(&ns).is_some_and(|s| s["configRead"]
            .is_object()
            && s["instance"] != recorded["instance"])),
        "{}",
        second.log()
    );
    assert_eq!(state_files(&ns).len(), 3, "{:?}", state_files(&ns));
    kill(second.host_pid(), "TERM");
    assert_eq!(
        ns.wait_daemon(second.pid, PATIENCE),
        Some(0),
        "{}",
        second.log()
    );
    assert_eq!(
        state_files(&ns),
        Vec::<String>::new(),
        "a clean exit removes the state, the applied config and the lock"
    );
}

/// The recorded config unreadable (removed by hand) while the agent runs: the host cannot see
/// the agent's path either, and says so instead of judging against the defaults.
fn a_missing_record_is_said_not_replaced_by_defaults(backend: &str) {
    let mut ns = Netns::new("podgone");
    let pod = Pod::start(&mut ns, backend, "c");
    pod.wait_recorded(&ns);
    let applied = state_files(&ns)
        .into_iter()
        .find(|n| n.ends_with("-config.json"))
        .unwrap();
    std::fs::remove_file(ns.state_dir().join(applied)).unwrap();
    for applet in ["show", "explain"] {
        let mut args = vec![applet, backend];
        if applet == "explain" {
            args.push("100.64.1.1");
        }
        let run = ns.ipmasq(&args);
        assert_eq!(run.code, 2, "{applet}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "the running agent (pid 1) reads {}/ip-masq-agent where it runs",
                pod.pod_etc.display()
            )) && run
                .stderr
                .contains("does not exist here. Judge against a copy with --config FILE"),
            "{applet}: {}",
            run.stderr
        );
    }
    // --config still overrides.
    let copy = crate::util::Scratch::new("podcopy");
    let file = copy.write("ip-masq-agent", POD_CONFIG);
    let run = ns.ipmasq(&["show", backend, &format!("--config={}", file.display())]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
}

macro_rules! every_backend {
    ($($name:ident),* $(,)?) => {
        mod iptables_nft {
            $(#[test] #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"] fn $name() { super::$name("--iptables-mode=nft") })*
        }
        mod iptables_legacy {
            $(#[test] #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"] fn $name() { super::$name("--iptables-mode=legacy") })*
        }
        mod nftables {
            $(#[test] #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"] fn $name() { super::$name("--backend=nftables") })*
        }
    };
}

every_backend!(
    a_pods_agent_is_judged_on_the_host,
    a_missing_record_is_said_not_replaced_by_defaults,
);

/// How the agent runs in the matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Deployment {
    /// On the host (a systemd unit): its config path is the host's.
    Host,
    /// As a DaemonSet pod: its own PID and mount namespaces, its config where the host
    /// cannot see it.
    Pod,
}

/// One damage done by hand to the live rules, as the nft or iptables CLI would.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Case {
    InSync,
    MasqueradeRuleDeleted,
    SetElementDeleted,
    LocalSkipDeleted,
    EntryDeleted,
    RecordedConfigMissing,
    StaleState,
}

/// The matrix's config: 10.0.0.0/8 and 100.64.0.0/10 kept, an hour between passes. A damage
/// is done with the agent stopped (SIGSTOP), which would otherwise hear the commit and repair
/// at once, so it stays while the tools look at it; SIGCONT and a SIGHUP repair it.
const MATRIX_CONFIG: &str =
    "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 100.64.0.0/10\nresyncInterval: 1h\n";

fn damage(ns: &Netns, backend: &str, case: Case) {
    let nft = backend == "--backend=nftables";
    let tool = if backend.ends_with("legacy") {
        "iptables-legacy"
    } else {
        "iptables-nft"
    };
    let script = match (case, nft) {
        (Case::MasqueradeRuleDeleted, true) => {
            "nft -a list chain ip ipmasq postrouting | grep 'masquerade' | sed 's/.*# handle //' | \
             while read h; do nft delete rule ip ipmasq postrouting handle $h; done"
                .to_string()
        }
        (Case::MasqueradeRuleDeleted, false) => format!(
            "{tool} -t nat -S IP-MASQ-AGENT | grep -- '-j MASQUERADE' | sed 's/^-A/-D/' | \
             while read r; do eval {tool} -t nat $r; done"
        ),
        (Case::SetElementDeleted, true) => {
            "nft delete element ip ipmasq nomasq '{ 10.0.0.0/8 }'".to_string()
        }
        (Case::SetElementDeleted, false) => format!(
            "{tool} -t nat -S IP-MASQ-AGENT | grep -- '-d 10.0.0.0/8' | sed 's/^-A/-D/' | \
             while read r; do eval {tool} -t nat $r; done"
        ),
        (Case::LocalSkipDeleted, true) => {
            "h=$(nft -a list chain ip ipmasq postrouting | grep 'fib daddr type local return' | \
             sed 's/.*# handle //'); nft delete rule ip ipmasq postrouting handle $h"
                .to_string()
        }
        (Case::LocalSkipDeleted, false) => format!(
            "{tool} -t nat -S POSTROUTING | grep -- '-j IP-MASQ-AGENT' | sed 's/^-A/-D/' | \
             while read r; do eval {tool} -t nat $r; done; {tool} -t nat -A POSTROUTING -j IP-MASQ-AGENT"
        ),
        (Case::EntryDeleted, true) => {
            "nft flush chain ip ipmasq postrouting && nft delete chain ip ipmasq postrouting".to_string()
        }
        (Case::EntryDeleted, false) => format!(
            "{tool} -t nat -S POSTROUTING | grep -- '-j IP-MASQ-AGENT' | sed 's/^-A/-D/' | \
             while read r; do eval {tool} -t nat $r; done"
        ),
        _ => return,
    };
    ns.sh(&script);
}

/// What the tools must say in one case: `show`'s exit and the end of its verdict line (None:
/// no verdict line), and `explain`'s exit and verdict for 203.0.113.9 and 10.1.2.3.
struct Expected {
    show: (i32, Option<&'static str>),
    outside: (i32, &'static str),
    kept: (i32, &'static str),
}

fn expected(case: Case, deployment: Deployment, nft: bool) -> Expected {
    const MASQ: (i32, &str) = (0, "verdict: masqueraded");
    const KEPT: (i32, &str) = (10, "verdict: source kept");
    const DISAGREE: (i32, &str) = (11, "verdict: DISAGREEMENT");
    const USAGE: (i32, &str) = (2, "");
    let drifted = |n: &'static str| (1, Some(n));
    match case {
        Case::InSync => Expected {
            show: (0, Some(": in sync")),
            outside: MASQ,
            kept: KEPT,
        },
        Case::MasqueradeRuleDeleted => Expected {
            show: drifted(": drifted (1 difference)"),
            outside: DISAGREE,
            kept: KEPT,
        },
        // iptables has no set: the RETURN rule for 10.0.0.0/8 is deleted.
        Case::SetElementDeleted => Expected {
            show: drifted(": drifted (1 difference)"),
            outside: MASQ,
            kept: DISAGREE,
        },
        // iptables: the planned jump is missing and one of another spelling is there.
        Case::LocalSkipDeleted => Expected {
            show: drifted(if nft {
                ": drifted (1 difference)"
            } else {
                ": drifted (2 differences)"
            }),
            outside: MASQ,
            kept: KEPT,
        },
        Case::EntryDeleted => Expected {
            show: if nft {
                (3, Some(": drifted (2 differences)"))
            } else {
                drifted(": drifted (1 difference)")
            },
            outside: DISAGREE,
            kept: KEPT,
        },
        Case::RecordedConfigMissing => match deployment {
            Deployment::Host => Expected {
                show: (0, Some(": in sync")),
                outside: MASQ,
                kept: KEPT,
            },
            Deployment::Pod => Expected {
                show: (2, None),
                outside: USAGE,
                kept: USAGE,
            },
        },
        // No agent: nothing to judge `show` against; explain falls back to upstream's defaults
        // at the default path (10.1.2.3 is in them too).
        Case::StaleState => Expected {
            show: (0, None),
            outside: MASQ,
            kept: KEPT,
        },
    }
}

/// Runs every `ipmasq …` command `output` suggests: each must parse.
fn run_suggested(ns: &Netns, output: &crate::util::Run) {
    for command in suggested_commands(&format!("{}{}", output.stdout, output.stderr)) {
        let words: Vec<&str> = command.split_whitespace().skip(1).collect();
        let ran = ns.ipmasq(&words);
        assert_ne!(
            ran.code, 2,
            "suggested `{command}` must parse: {}",
            ran.stderr
        );
    }
}

/// Every `ipmasq …` command an output suggests between backticks.
fn suggested_commands(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with("ipmasq "))
        .map(str::to_string)
        .collect()
}

fn matrix(backend: &'static str, deployment: Deployment) -> Vec<String> {
    let nft = backend == "--backend=nftables";
    let mut ns = Netns::new("matrix");
    // One directory per test thread: the matrix runs its backends in parallel.
    let tag = format!(
        "matrix-{}-{deployment:?}",
        backend.trim_start_matches("--").replace('=', "-")
    );
    let host_dir = crate::util::Scratch::new(&tag);
    let host_config = host_dir.write("ip-masq-agent", MATRIX_CONFIG);
    // The damages are a neighbour's commits while the agent is stopped, not gone: its socket
    // would still hold an nftables table, which refuses them (root::neighbour_flush proves
    // that); here the table is left unheld so that they land.
    let mut flags = vec![backend];
    if backend == "--backend=nftables" {
        flags.push("--nftables-table-owner=false");
    }
    let (agent_pid, pod) = match deployment {
        Deployment::Host => {
            let log = host_dir.path.join("agent.log");
            let config_flag = format!("--config={}", host_config.display());
            let args = [
                &["agent"][..],
                &flags,
                &[&config_flag, "--metrics-addr=off"],
            ]
            .concat();
            let pid = ns.spawn_ipmasq(&args, &log);
            (pid, None)
        }
        Deployment::Pod => {
            let pod = Pod::start(&mut ns, &flags.join(" "), "m");
            (pod.host_pid(), Some(pod))
        }
    };
    assert!(wait_until(PATIENCE, || state(&ns)
        .is_some_and(|s| s["configRead"].is_object())));
    let mut table = Vec::new();
    let cases = [
        Case::InSync,
        Case::MasqueradeRuleDeleted,
        Case::SetElementDeleted,
        Case::LocalSkipDeleted,
        Case::EntryDeleted,
        Case::RecordedConfigMissing,
        Case::StaleState,
    ];
    for case in cases {
        match case {
            Case::RecordedConfigMissing => {
                let applied = state_files(&ns)
                    .into_iter()
                    .find(|n| n.ends_with("-config.json"))
                    .unwrap();
                std::fs::remove_file(ns.state_dir().join(applied)).unwrap();
            }
            Case::StaleState => {
                kill(agent_pid, "KILL");
                // Dead once its node lock is free (a killed child stays a zombie until reaped).
                assert!(wait_until(PATIENCE, || ns
                    .ipmasq(&["show", backend])
                    .stdout
                    .contains("no agent running (stale state")));
            }
            _ => {
                kill(agent_pid, "STOP");
                damage(&ns, backend, case);
            }
        }
        let want = expected(case, deployment, nft);
        let show = ns.ipmasq(&["show", backend, "--color=never"]);
        let verdict_line = show
            .stdout
            .lines()
            .find(|l| l.starts_with("sync with "))
            .map(str::to_string);
        assert_eq!(
            show.code, want.show.0,
            "{case:?} show: {}{}",
            show.stdout, show.stderr
        );
        match want.show.1 {
            Some(end) => assert!(
                verdict_line.as_deref().is_some_and(|l| l.ends_with(end)),
                "{case:?}: {verdict_line:?}\n{}",
                show.stdout
            ),
            None => assert_eq!(verdict_line, None, "{case:?}: {}", show.stdout),
        }
        let mut row = format!(
            "| {backend} | {deployment:?} | {case:?} | show {} `{}` |",
            show.code,
            verdict_line
                .as_deref()
                .map_or("-", |l| l.rsplit(": ").next().unwrap_or(l))
        );
        for (dest, (code, line)) in [("203.0.113.9", want.outside), ("10.1.2.3", want.kept)] {
            let run = ns.ipmasq(&["explain", backend, dest, "--color=never"]);
            assert_eq!(
                run.code, code,
                "{case:?} explain {dest}: {}{}",
                run.stdout, run.stderr
            );
            if !line.is_empty() {
                assert!(
                    run.stdout.lines().any(|l| l.starts_with(line)),
                    "{case:?} {dest}: {}",
                    run.stdout
                );
            }
            row.push_str(&format!(" explain {dest} {code} |"));
            run_suggested(&ns, &run);
        }
        let cleanup = ns.ipmasq(&["cleanup", "--dry-run", "--all-variants=false", backend]);
        assert_eq!(
            cleanup.code, 0,
            "{case:?} cleanup: {}{}",
            cleanup.stdout, cleanup.stderr
        );
        let would = cleanup
            .stdout
            .lines()
            .find(|l| l.contains("ipv4:"))
            .unwrap_or_default()
            .to_string();
        let words = if nft {
            "would remove table ip ipmasq"
        } else if case == Case::EntryDeleted {
            "would remove chain IP-MASQ-AGENT"
        } else {
            "would remove 1 jump from POSTROUTING and chain IP-MASQ-AGENT"
        };
        assert!(
            would.ends_with(words),
            "{case:?} cleanup: {}",
            cleanup.stdout
        );
        row.push_str(&format!(
            " cleanup `{}` |",
            would.split(": ").nth(1).unwrap_or("-")
        ));
        run_suggested(&ns, &show);
        table.push(row);
        // Repair (the agent goes on, and a SIGHUP makes it pass) before the next damage.
        if !matches!(case, Case::RecordedConfigMissing | Case::StaleState) {
            kill(agent_pid, "CONT");
            kill(agent_pid, "HUP");
            assert!(
                wait_until(PATIENCE, || ns.ipmasq(&["show", backend]).code == 0),
                "{case:?}: the agent did not repair"
            );
        }
    }
    drop(pod);
    table
}

fn matrix_test(backend: &'static str) {
    let mut rows = Vec::new();
    for deployment in [Deployment::Host, Deployment::Pod] {
        rows.extend(matrix(backend, deployment));
    }
    eprintln!("{}", rows.join("\n"));
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn matrix_iptables_nft() {
    matrix_test("--iptables-mode=nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn matrix_iptables_legacy() {
    matrix_test("--iptables-mode=legacy");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn matrix_nftables() {
    matrix_test("--backend=nftables");
}
