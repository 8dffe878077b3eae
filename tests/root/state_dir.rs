//! The state directory: files planted there are not followed and never block, and a killed
//! agent's state file is stale whatever process now holds its pid.

use super::netns::Netns;
use std::time::Duration;

/// How long a test waits for an observable event before failing.
const PATIENCE: Duration = Duration::from_secs(20);

/// The state file of the one agent in `ns`, once it has written it.
fn state_file(ns: &Netns) -> Option<std::path::PathBuf> {
    std::fs::read_dir(ns.state_dir())
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("agent-net") && n.ends_with(".json") && !n.ends_with("-config.json")
            })
        })
}

/// Files planted in the state directory by whoever can write it: a symlink at the lock's name
/// is not followed (its target keeps its bytes) but replaced by our own lock file, which the
/// agent holds (it never runs unlocked), a FIFO in place of the state file makes neither
/// `show`, `explain` nor the agent's SIGTERM hang, and a sparse 2 GiB state file is not read.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn planted_state_files_are_not_followed_and_never_block() {
    let mut ns = Netns::new("planted");
    let dir = ns.state_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let inode = ns.sh("stat -L -c %i /proc/self/ns/net");
    let lock = dir.join(format!("agent-net{}-IP-MASQ-AGENT.lock", inode.trim()));
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        "--config=/nonexistent/x",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("replaced what was planted at the node lock's path with our own lock file")
            && run.stderr.contains("planted=\"a symlink\""),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("cannot take the node lock"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(
        std::fs::symlink_metadata(&lock).is_err(),
        "the lock file the run made and held is removed as it exits"
    );

    let log = dir.join("agent.log");
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            "--config=/nonexistent/x",
            "--metrics-addr=off",
        ],
        &log,
    );
    assert!(
        super::netns::wait_until(PATIENCE, || state_file(&ns).is_some()),
        "no state file; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let state = state_file(&ns).unwrap();
    std::fs::remove_file(&state).unwrap();
    ns.sh(&format!("mkfifo {}", state.display()));
    for args in [
        &["show", "--iptables-mode=nft"][..],
        &["explain", "203.0.113.7", "--iptables-mode=nft"][..],
    ] {
        // `timeout` ends a hang with 124: the applet must answer long before.
        let program = crate::util::binary();
        let mut full = vec!["10", program.to_str().unwrap()];
        full.extend_from_slice(args);
        let run = ns.exec("timeout", &full);
        assert_ne!(run.code, 124, "{args:?} hung on a FIFO state file");
        assert!(
            run.code == 0 || run.code == 10,
            "{args:?}: {}{}",
            run.stdout,
            run.stderr
        );
    }
    super::netns::kill(pid, "TERM");
    assert_eq!(
        ns.wait_daemon(pid, PATIENCE),
        Some(0),
        "SIGTERM with a FIFO as the state file; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    std::fs::remove_file(&state).unwrap();
    let big = std::fs::File::create(&state).unwrap();
    big.set_len(2 << 30).unwrap();
    let (run, peak) = crate::util::ipmasq_peak_rss_in(
        &ns.name,
        &ns.state_dir(),
        &["show", "--iptables-mode=nft"],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        peak < 64 << 10,
        "show read the 2 GiB state file: peak {peak} KiB"
    );
}

/// An agent killed outright (SIGKILL, or an OOM kill at the DaemonSet's limit) leaves its state
/// file behind. Its recorded pid may be alive in this network namespace (a pod's pid 1 is the
/// host's init): the node lock, which died with the agent, says it is stale, and `show` no
/// longer judges the live rules against a dead agent's settings.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_killed_agents_state_is_stale_whatever_its_pid() {
    let mut ns = Netns::new("stale");
    let dir = crate::util::Scratch::new("stale");
    let config = dir.write("ip-masq-agent", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let log = dir.path.join("agent.log");
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            &format!("--config={}", config.display()),
            "--metrics-addr=off",
        ],
        &log,
    );
    assert!(super::netns::wait_until(PATIENCE, || state_file(&ns).is_some()));
    let agent_of = |ns: &Netns| -> serde_json::Value {
        let run = ns.ipmasq(&["show", "-o", "json", "--iptables-mode=nft"]);
        let report: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", run.stdout, run.stderr));
        report["agent"].clone()
    };
    assert_eq!(agent_of(&ns)["pid"], pid);
    super::netns::kill(pid, "KILL");
    ns.wait_daemon(pid, PATIENCE).expect("killed");
    let state = state_file(&ns).expect("a killed agent leaves its state file");
    // A process alive in this namespace takes the recorded pid's place.
    let sleeper = ns
        .command(std::path::Path::new("sleep"), &["600"])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let alive = sleeper.id();
    ns.adopt(sleeper);
    let text = std::fs::read_to_string(&state).unwrap();
    let mut recorded: serde_json::Value = serde_json::from_str(&text).unwrap();
    recorded["pid"] = alive.into();
    std::fs::write(&state, recorded.to_string()).unwrap();
    assert!(std::path::Path::new(&format!("/proc/{alive}")).exists());
    assert_eq!(
        agent_of(&ns),
        serde_json::Value::Null,
        "a dead agent is not running"
    );
}
