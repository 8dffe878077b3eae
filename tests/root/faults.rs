//! The fault suite: the xtables lock held by someone else, iptables-restore failing
//! then hanging, drift of every kind, SIGKILL in the middle of a 10,000-rule transaction, a
//! storm of ConfigMap swaps and a soak of 10,000 passes; both iptables variants where the
//! fault exists in both. Each test waits for observable events, never for time to pass.

use super::agent::configmap_dir;
use super::netns::{kill, wait_until, Netns, PYTHON};
use crate::util::Scratch;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(30);
const CHAIN: &str = "IP-MASQ-AGENT";

fn jumps(ns: &Netns, variant: &str) -> usize {
    ns.save(variant, false, Some("nat"))
        .lines()
        .filter(|l| l.starts_with("-A POSTROUTING") && l.ends_with(&format!("-j {CHAIN}")))
        .count()
}

fn our_rules(ns: &Netns, variant: &str) -> Vec<String> {
    ns.save(variant, false, Some("nat"))
        .lines()
        .filter(|l| l.starts_with(&format!("-A {CHAIN} ")))
        .map(str::to_string)
        .collect()
}

/// VmRSS in KiB and the number of open fds of a process.
fn rss_and_fds(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss, fds)
}

/// A metric sample read with Python's urllib inside the namespace.
fn metric(ns: &Netns, name: &str) -> Option<f64> {
    let script = "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:9723/metrics', timeout=5).read().decode())";
    let run = ns.exec(PYTHON, &["-c", script]);
    run.stdout
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l[name.len()..].trim().parse().ok())
}

/// The xtables lock held by another process for 10 s (legacy takes it; nft ignores it): the
/// agent's restore waits for it, fails after its 5 s wait, retries with backoff, and applies
/// once the lock is free, with exactly one jump.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn xtables_lock_held_elsewhere_delays_but_does_not_break() {
    let mut ns = Netns::new("xtlock");
    let dir = Scratch::new("xtlock");
    // A private lock file, so the machine's own /run/xtables.lock is never held.
    let lock = dir.path.join("xtables.lock");
    let mut holder = Command::new("flock")
        .arg(&lock)
        .args(["-c", "echo held; sleep 10"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("flock");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "held");
    let log = dir.path.join("agent.log");
    let config = format!("--config={}", dir.path.join("config").display());
    let child = ns
        .command(
            &crate::util::binary(),
            &[
                "agent",
                "--iptables-mode=legacy",
                &config,
                "--metrics-addr=off",
            ],
        )
        .env("XTABLES_LOCKFILE", &lock)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    ns.adopt(child);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(PATIENCE, || text().contains("sync failed; will retry")),
        "the held lock must fail the first restore: {}",
        text()
    );
    assert_eq!(
        jumps(&ns, "legacy"),
        0,
        "nothing applied while the lock is held"
    );
    let _ = holder.wait();
    let freed = Instant::now();
    assert!(
        wait_until(PATIENCE, || jumps(&ns, "legacy") == 1),
        "{}",
        text()
    );
    let took = freed.elapsed();
    eprintln!("xtables lock: applied {took:?} after it was freed");
    assert!(
        took < Duration::from_secs(12),
        "backoff is bounded: {took:?}"
    );
    assert!(wait_until(PATIENCE, || text().contains("sync recovered")));
    assert_eq!(jumps(&ns, "legacy"), 1, "exactly one jump");
    assert_eq!(our_rules(&ns, "legacy").len(), 5);
}

/// iptables-restore failing, then hanging, then working again: the rules that are there stay,
/// /readyz and the metrics report the failure and the backoff, the hang never blocks
/// /healthz, and the agent recovers on its own.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn restore_failing_then_hanging_then_recovering() {
    let mut ns = Netns::new("restorefault");
    let dir = Scratch::new("restorefault");
    let mode = dir.path.join("mode");
    std::fs::write(&mode, "ok").unwrap();
    let fake = dir.path.join("iptables-nft-restore");
    super::netns::executable(
        &fake,
        &format!(
            "#!/bin/sh\ncase \"$(cat '{}')\" in\n  fail) echo 'iptables-restore: injected failure' >&2; exit 1;;\n  hang) sleep 20; exit 1;;\nesac\nexec /usr/sbin/iptables-nft-restore \"$@\"\n",
            mode.display()
        ),
    );
    std::fs::write(dir.path.join("config"), "resyncInterval: 1h\n").unwrap();
    let log = dir.path.join("agent.log");
    let config = format!("--config={}", dir.path.join("config").display());
    let child = ns
        .ipmasq_with_path(&dir.path, &["agent", "--iptables-mode=nft", &config])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    ns.adopt(child);
    assert!(wait_until(PATIENCE, || jumps(&ns, "nft") == 1));
    let installed = our_rules(&ns, "nft");
    // Fail: a drift the agent cannot repair.
    std::fs::write(&mode, "fail").unwrap();
    ns.sh(&format!("iptables-nft -t nat -D {CHAIN} 2"));
    let damaged = our_rules(&ns, "nft");
    kill(pid, "HUP");
    assert!(wait_until(PATIENCE, || metric(
        &ns,
        "ipmasq_consecutive_sync_failures"
    )
    .is_some_and(|n| n >= 2.0)));
    assert_eq!(
        our_rules(&ns, "nft"),
        damaged,
        "a failed repair changes nothing"
    );
    assert_eq!(jumps(&ns, "nft"), 1);
    assert_eq!(metric(&ns, "ipmasq_ready"), Some(0.0));
    assert!(metric(&ns, "ipmasq_sync_retry_backoff_seconds").is_some_and(|s| s >= 1.0));
    // Hang: /healthz still answers at once.
    std::fs::write(&mode, "hang").unwrap();
    let failures = metric(&ns, "ipmasq_consecutive_sync_failures").unwrap();
    let started = Instant::now();
    let health = ns.exec(
        PYTHON,
        &["-c", "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:9723/healthz', timeout=5).status)"],
    );
    assert_eq!(health.stdout.trim(), "200");
    assert!(started.elapsed() < Duration::from_secs(2));
    // Work again: the next retry repairs.
    std::fs::write(&mode, "ok").unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || our_rules(&ns, "nft")
            == installed),
        "recovered after {failures} failures: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(wait_until(PATIENCE, || metric(&ns, "ipmasq_ready") == Some(1.0)));
    assert_eq!(metric(&ns, "ipmasq_consecutive_sync_failures"), Some(0.0));
}

both_variants!(
    every_kind_of_drift_is_healed,
    sigkill_during_a_large_transaction
);

/// A rule deleted, and the whole nat table flushed with every user chain deleted (one
/// `iptables-restore` of an empty `*nat`, as `-F` then `-X` would, in one commit: with
/// iptables-nft the agent repairs between two commands, and `-X` then finds our chain in use):
/// healed at the next pass. (Foreign rules in our
/// chain, a flushed chain, a deleted jump and a deleted chain: `agent::drift_is_healed...`.)
fn every_kind_of_drift_is_healed(variant: &'static str) {
    let mut ns = Netns::new("drift2");
    let dir = Scratch::new(&format!("drift2-{variant}"));
    std::fs::write(dir.path.join("config"), "resyncInterval: 200ms\n").unwrap();
    let config = format!("--config={}", dir.path.join("config").display());
    let mode = format!("--iptables-mode={variant}");
    ns.spawn_ipmasq(
        &["agent", &mode, &config, "--metrics-addr=off"],
        &dir.path.join("log"),
    );
    assert!(wait_until(PATIENCE, || jumps(&ns, variant) == 1));
    let installed = our_rules(&ns, variant);
    let tool = format!("iptables-{variant}");
    for (what, damage) in [
        ("a rule deleted", format!("{tool} -t nat -D {CHAIN} 3")),
        (
            "nat flushed and user chains deleted",
            format!("printf '*nat\\nCOMMIT\\n' | {tool}-restore"),
        ),
    ] {
        ns.sh(&damage);
        assert!(
            wait_until(PATIENCE, || our_rules(&ns, variant) == installed
                && jumps(&ns, variant) == 1),
            "{what}: not healed"
        );
    }
}

/// SIGKILL while a 10,000-rule transaction is being applied, then a restart: the chain and its
/// jump never disappear (polled as fast as one process at a time allows), and the restarted
/// agent ends with exactly one jump and exactly the planned rules.
fn sigkill_during_a_large_transaction(variant: &'static str) {
    let mut ns = Netns::new("sigkill");
    let dir = Scratch::new(&format!("sigkill-{variant}"));
    let cidrs = |third: u32| -> String {
        let list: Vec<String> = (0..10_000)
            .map(|i| format!("10.{}.{}.0/24", third + i / 256, i % 256))
            .collect();
        format!(
            "cidrLimit: 10000\nresyncInterval: 1h\nnonMasqueradeCIDRs: [{}]\n",
            list.join(", ")
        )
    };
    let config_path = dir.path.join("config");
    std::fs::write(&config_path, cidrs(0)).unwrap();
    let config = format!("--config={}", config_path.display());
    let mode = format!("--iptables-mode={variant}");
    let once = ns.ipmasq(&["agent", "--once", &mode, &config]);
    assert_eq!(once.code, 0, "{}", once.stderr);
    assert_eq!(jumps(&ns, variant), 1);
    // Poll the jump (its presence means the chain exists) as fast as we can.
    let stop = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicUsize::new(0));
    let missing = Arc::new(AtomicUsize::new(0));
    let poller = {
        let (stop, polls, missing) = (stop.clone(), polls.clone(), missing.clone());
        let name = ns.name.clone();
        let tool = format!("iptables-{variant}");
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &name,
                        &tool,
                        "-w",
                        "-t",
                        "nat",
                        "-S",
                        "POSTROUTING",
                    ])
                    .output()
                    .unwrap();
                polls.fetch_add(1, Ordering::Relaxed);
                if !String::from_utf8_lossy(&out.stdout).contains(&format!("-j {CHAIN}")) {
                    missing.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // A new list: the agent starts its transaction; kill it while iptables-restore runs.
    std::fs::write(&config_path, cidrs(100)).unwrap();
    let started = Instant::now();
    let pid = ns.spawn_ipmasq(
        &["agent", &mode, &config, "--metrics-addr=off"],
        &dir.path.join("first.log"),
    );
    let restoring = || {
        let out = Command::new("pgrep")
            .args(["-P", &pid.to_string()])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    let caught = wait_until(PATIENCE, restoring);
    kill(pid, "KILL");
    let _ = ns.wait_daemon(pid, PATIENCE);
    // Whatever the orphaned restore did, restart and converge.
    let pid = ns.spawn_ipmasq(
        &["agent", &mode, &config, "--metrics-addr=off", "--v=2"],
        &dir.path.join("second.log"),
    );
    let planned = 10_000 + 2;
    assert!(wait_until(Duration::from_secs(60), || {
        let rules = our_rules(&ns, variant);
        rules.len() == planned && rules.iter().any(|r| r.contains(" -d 10.100.0.0/24 "))
    }));
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    poller.join().unwrap();
    let polls = polls.load(Ordering::Relaxed);
    eprintln!(
        "{variant}: SIGKILL during the transaction (caught the restore running: {caught}); {polls} polls in {elapsed:?} ({:.0}/s), {} without the jump",
        polls as f64 / elapsed.as_secs_f64(),
        missing.load(Ordering::Relaxed)
    );
    assert_eq!(
        missing.load(Ordering::Relaxed),
        0,
        "a moment without our chain"
    );
    assert_eq!(jumps(&ns, variant), 1, "exactly one jump");
    kill(pid, "TERM");
    let _ = ns.wait_daemon(pid, PATIENCE);
}

/// 1,000 ConfigMap-style swaps as fast as they can be written: the agent ends on the last
/// config, and its RSS and open fds stay bounded.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_storm_of_configmap_swaps_ends_on_the_last_config() {
    let mut ns = Netns::new("storm");
    let dir = Scratch::new("storm");
    let volume = dir.path.join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    configmap_dir(
        &volume,
        0,
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    let config = format!("--config={}", volume.join("ip-masq-agent").display());
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            &config,
            "--metrics-addr=off",
        ],
        &dir.path.join("log"),
    );
    assert!(wait_until(PATIENCE, || jumps(&ns, "nft") == 1));
    let (rss_before, fds_before) = rss_and_fds(pid);
    let started = Instant::now();
    for version in 1..=1000u32 {
        let cidr = format!("10.{}.{}.0/24", version / 256, version % 256);
        configmap_dir(
            &volume,
            version,
            &format!("nonMasqueradeCIDRs: [{cidr}]\nresyncInterval: 1h\n"),
        );
        // kubelet removes old versions; so do we, or the directory grows without bound.
        if version > 1 {
            let _ = std::fs::remove_dir_all(volume.join(format!(
                "..2026_11_21_00_00_0{}.{}",
                version - 2,
                version - 2
            )));
        }
    }
    let swapping = started.elapsed();
    let last = "-d 10.3.232.0/24 ";
    assert!(
        wait_until(PATIENCE, || our_rules(&ns, "nft")
            .iter()
            .any(|r| r.contains(last))),
        "did not end on the last config"
    );
    assert_eq!(our_rules(&ns, "nft").len(), 3);
    let (rss_after, fds_after) = rss_and_fds(pid);
    eprintln!(
        "1,000 swaps in {swapping:?}: RSS {rss_before} -> {rss_after} KiB, fds {fds_before} -> {fds_after}"
    );
    assert!(rss_after < 32 * 1024, "RSS {rss_after} KiB");
    assert!(
        fds_after <= fds_before + 2,
        "fds {fds_before} -> {fds_after}"
    );
}

/// 10,000 passes back to back (each triggered by SIGHUP and counted on /metrics, so the test
/// never waits on a clock): RSS and open fds stay flat.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_soak_of_ten_thousand_passes_keeps_rss_and_fds_flat() {
    let mut ns = Netns::new("soak");
    let dir = Scratch::new("soak");
    std::fs::write(dir.path.join("config"), "resyncInterval: 1h\n").unwrap();
    let config = format!("--config={}", dir.path.join("config").display());
    let pid = ns.spawn_ipmasq(
        &["agent", "--iptables-mode=nft", &config],
        &dir.path.join("log"),
    );
    assert!(wait_until(PATIENCE, || metric(&ns, "ipmasq_ready") == Some(1.0)));
    let driver = format!(
        "import os, signal, urllib.request, time\n\
         def passes():\n    t = urllib.request.urlopen('http://127.0.0.1:9723/metrics', timeout=5).read().decode()\n    return int(float(next(l.split()[1] for l in t.splitlines() if l.startswith('ipmasq_syncs_total{{result=\"success\"}}'))))\n\
         def usage():\n    rss = next(int(l.split()[1]) for l in open('/proc/{pid}/status') if l.startswith('VmRSS:'))\n    return rss, len(os.listdir('/proc/{pid}/fd'))\n\
         start = passes(); t0 = time.monotonic()\n\
         for i in range(10000):\n    n = passes()\n    os.kill({pid}, signal.SIGHUP)\n    while passes() <= n: pass\n    if i in (99, 9999): print(i + 1, *usage(), flush=True)\n\
         print('elapsed', time.monotonic() - t0)\n"
    );
    let run = ns.exec(PYTHON, &["-c", &driver]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows: Vec<Vec<f64>> = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with("elapsed"))
        .map(|l| l.split_whitespace().map(|w| w.parse().unwrap()).collect())
        .collect();
    eprintln!(
        "soak (passes, RSS KiB, fds): {rows:?}; {}",
        run.stdout.lines().last().unwrap_or("")
    );
    let (after_100, after_10k) = (&rows[0], &rows[1]);
    assert!(after_10k[1] <= after_100[1] + 1024.0, "RSS grew: {rows:?}");
    // A sample may catch one connection or netlink socket in flight; a leak would be
    // thousands after 10,000 passes.
    assert!(after_10k[2] <= after_100[2] + 2.0, "fds grew: {rows:?}");
}
