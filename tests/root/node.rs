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
            "mount -t tmpfs pod-config '{etc}' && printf '%s' '{POD_CONFIG}' > '{etc}/ip-masq-agent' && exec '{bin}' agent {backend} --config='{etc}/ip-masq-agent' --metrics-addr=off",
            etc = pod_etc.display(),
            bin = crate::util::binary().display(),
        );
        let child = ns
            .command(
                Path::new("unshare"),
                &["--pid", "--mount", "--fork", "sh", "-c", &script],
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
    assert!(
        wait_until(PATIENCE, || state(&ns)
            .is_some_and(|s| s["configRead"].is_object())),
        "the agent recorded its config:\n{}",
        pod.log()
    );
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
    assert!(
        wait_until(PATIENCE, || state(&ns)
            .is_some_and(|s| s["configRead"].is_object())),
        "{}",
        pod.log()
    );
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
