//! The node lock: a second agent waits for it and takes over without a gap, a waiting agent
//! stopped touches nothing, a lock that cannot be taken means no rule touched and not ready,
//! and a rollout's switch of backend waits for it and leaves no old chain.

use super::foreign_nat_rules::jumps_in;
use super::netns::Netns;
use crate::util::Scratch;
use std::time::Duration;

/// How long a test waits for an observable event before failing.
const PATIENCE: Duration = Duration::from_secs(20);

/// The agent flags of the two-agent tests (nft, config in `dir`, no endpoint), plus `extra`.
fn lock_test_args(dir: &Scratch, extra: &[&str]) -> Vec<String> {
    let config = format!("--config={}", dir.path.join("config").display());
    let mut args: Vec<String> = [
        "agent",
        "--iptables-mode=nft",
        &config,
        "--metrics-addr=off",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Starts the first agent and waits for its jump.
fn start_first_agent(ns: &mut Netns, dir: &Scratch) -> u32 {
    let args = lock_test_args(dir, &[]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = ns.spawn_ipmasq(&refs, &dir.path.join("first.log"));
    assert!(super::netns::wait_until(
        Duration::from_secs(20),
        || jumps_in(ns, "nft") == 1
    ));
    first
}

/// Starts a second agent (with `extra` flags) and waits until it says that `first` holds the
/// node lock; returns its pid and log.
fn start_waiting_agent(
    ns: &mut Netns,
    dir: &Scratch,
    first: u32,
    extra: &[&str],
) -> (u32, std::path::PathBuf) {
    let args = lock_test_args(dir, extra);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let log_path = dir.path.join("second.log");
    let second = ns.spawn_ipmasq(&refs, &log_path);
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        super::netns::wait_until(Duration::from_secs(20), || log()
            .contains(&format!("agent pid {first} holds the node lock"))),
        "{}",
        log()
    );
    (second, log_path)
}

/// A second agent for the same chain waits for the first one's node lock (saying so), and
/// takes over when it goes: the rules are never removed in between.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_second_agent_waits_for_the_node_lock() {
    let mut ns = Netns::new("lock");
    let dir = Scratch::new("lock");
    let first = start_first_agent(&mut ns, &dir);
    let (second, second_log) = start_waiting_agent(&mut ns, &dir, first, &[]);
    let log = || std::fs::read_to_string(&second_log).unwrap_or_default();
    super::netns::kill(first, "KILL");
    assert!(ns.wait_daemon(first, Duration::from_secs(10)).is_some());
    assert_eq!(
        jumps_in(&ns, "nft"),
        1,
        "the rules stay while the lock changes hands"
    );
    // The second agent now holds the lock and heals drift.
    ns.sh("iptables-nft -t nat -F IP-MASQ-AGENT");
    ns.sh(&format!("kill -HUP {second}"));
    assert!(
        super::netns::wait_until(Duration::from_secs(20), || log().contains("rules repaired")),
        "{}",
        log()
    );
    assert_eq!(jumps_in(&ns, "nft"), 1);
}

/// A second agent with --cleanup-on-exit (the systemd unit's flag) stopped while it still
/// waits for the node lock removes nothing: the rules are the running agent's.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_waiting_agent_stopped_with_cleanup_on_exit_removes_nothing() {
    let mut ns = Netns::new("waitclean");
    let dir = Scratch::new("waitclean");
    let first = start_first_agent(&mut ns, &dir);
    let installed = ns.save("nft", false, Some("nat"));
    let (second, second_log) = start_waiting_agent(&mut ns, &dir, first, &["--cleanup-on-exit"]);
    let log = || std::fs::read_to_string(&second_log).unwrap_or_default();
    super::netns::kill(second, "TERM");
    assert_eq!(
        ns.wait_daemon(second, Duration::from_secs(10)),
        Some(0),
        "{}",
        log()
    );
    assert!(
        log().contains("removing nothing: this agent never held the node lock"),
        "{}",
        log()
    );
    assert_eq!(
        ns.save("nft", false, Some("nat")),
        installed,
        "the running agent's rules stay"
    );
    super::netns::kill(first, "TERM");
    assert_eq!(ns.wait_daemon(first, Duration::from_secs(10)), Some(0));
}

/// A node lock that cannot be taken (here a directory planted at its name, which is never
/// removed) is never skipped: `agent --once` fails touching no rule, and the long-running
/// agent touches no rule and is not ready (no endpoint), saying why once, until the lock can
/// be taken; then it takes it, installs its rules and serves /readyz.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn an_untakable_node_lock_means_no_rule_touched_and_not_ready() {
    let mut ns = Netns::new("nolock");
    let dir = ns.state_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let inode = ns.sh("stat -L -c %i /proc/self/ns/net");
    let lock = dir.join(format!("agent-net{}-IP-MASQ-AGENT.lock", inode.trim()));
    std::fs::create_dir(&lock).unwrap();
    let ours = |ns: &Netns| ns.save("nft", false, Some("nat")).contains("IP-MASQ-AGENT");
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        "--config=/nonexistent/x",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot take the node lock") && run.stderr.contains("is a directory"),
        "{}",
        run.stderr
    );
    assert!(!ours(&ns), "--once without the lock wrote rules");
    assert!(
        lock.is_dir(),
        "a directory at the lock's name is never removed"
    );

    let log = dir.join("agent.log");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let metrics_flag = format!("--metrics-addr={}", super::health::ADDR);
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            "--config=/nonexistent/x",
            &metrics_flag,
        ],
        &log,
    );
    assert!(
        super::netns::wait_until(PATIENCE, || read().contains("not ready until it is taken")),
        "{}",
        read()
    );
    assert_eq!(super::health::readyz_status(&ns), None, "{}", read());
    assert!(
        !ours(&ns),
        "an agent without the lock wrote rules: {}",
        read()
    );
    std::fs::remove_dir(&lock).unwrap();
    assert!(
        super::netns::wait_until(PATIENCE, || super::health::readyz_status(&ns) == Some(200)),
        "the lock was free again, the agent did not take it: {}",
        read()
    );
    assert!(ours(&ns), "{}", read());
    assert_eq!(
        read().matches("cannot take the node lock").count(),
        1,
        "said once: {}",
        read()
    );
    super::netns::kill(pid, "TERM");
    assert_eq!(ns.wait_daemon(pid, PATIENCE), Some(0), "{}", read());
}

/// A rollout: the new agent (nftables) starts while the old one (iptables-nft) still runs. The
/// new one waits for the node lock and removes nothing meanwhile; once the old one has gone
/// (its rules left in place, as without --cleanup-on-exit), the new one installs its rules,
/// then removes the old chain, and a later config change is never overridden by it.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_rollout_switch_waits_for_the_lock_and_leaves_no_old_chain() {
    let mut ns = Netns::new("rollout");
    let dir = crate::util::Scratch::new("rollout");
    let config = dir.write(
        "ip-masq-agent",
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    let config_flag = format!("--config={}", config.display());
    let old_log = dir.path.join("old.log");
    let new_log = dir.path.join("new.log");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let old = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            &config_flag,
            "--metrics-addr=off",
        ],
        &old_log,
    );
    let iptables_chain = |ns: &Netns| {
        ns.save("nft", false, Some("nat"))
            .contains(":IP-MASQ-AGENT")
    };
    assert!(super::netns::wait_until(PATIENCE, || iptables_chain(&ns)));
    let new = ns.spawn_ipmasq(
        &[
            "agent",
            "--backend=nftables",
            &config_flag,
            "--metrics-addr=off",
        ],
        &new_log,
    );
    assert!(
        super::netns::wait_until(PATIENCE, || read(&new_log).contains("holds the node lock")),
        "{}",
        read(&new_log)
    );
    let took_over = "removed iptables-nft's chain and jumps in the same transaction";
    assert!(iptables_chain(&ns), "a waiting agent removes nothing");
    assert!(!read(&new_log).contains(took_over));
    assert!(!read(&new_log).contains("removed the rules another backend"));
    super::netns::kill(old, "TERM");
    assert_eq!(ns.wait_daemon(old, PATIENCE), Some(0), "{}", read(&old_log));
    // Ours installed and theirs deleted in one transaction, once the lock is ours.
    assert!(
        super::netns::wait_until(PATIENCE, || read(&new_log).contains("rules installed")),
        "{}",
        read(&new_log)
    );
    assert!(read(&new_log).contains(took_over), "{}", read(&new_log));
    assert!(!iptables_chain(&ns), "the old chain is gone");
    // A config change now: applied, and no chain of the old agent overrides it.
    std::fs::write(
        &config,
        "nonMasqueradeCIDRs: [10.0.0.0/8, 203.0.113.0/24]\nresyncInterval: 1h\n",
    )
    .unwrap();
    assert!(
        super::netns::wait_until(PATIENCE, || ns
            .sh("nft list set ip ipmasq nomasq")
            .contains("203.0.113.0/24")),
        "{}",
        read(&new_log)
    );
    assert!(!iptables_chain(&ns));
    super::netns::kill(new, "TERM");
    assert_eq!(ns.wait_daemon(new, PATIENCE), Some(0));
}
