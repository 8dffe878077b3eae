//! At the kernel: a config the checker rejects never reaches the rules, a wedged sync
//! never blocks health or SIGTERM, auto mode follows the host's `iptables` when no variant
//! holds rules, and `show` / `cleanup` see the whole node and the running agent.

use super::netns::{kill, scratch_file, wait_until, Netns};
use crate::util::{Run, Scratch};
use std::process::Stdio;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(20);
const CHAIN: &str = "IP-MASQ-AGENT";

fn has_chain(ns: &Netns, variant: &str) -> bool {
    ns.save(variant, false, Some("nat"))
        .lines()
        .any(|l| l.starts_with(&format!(":{CHAIN} ")))
}

/// A YAML key that is a sequence is an error for `validate`, and so for the agent: nothing is
/// installed (the bug was that the agent accepted and applied it).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn complex_key_config_is_rejected_by_agent_once() {
    let ns = Netns::new("complexkey");
    let config = scratch_file("complex-key", "? [a, b]\n: 1\n");
    let flag = format!("--config={}", config.display());
    let run = ns.ipmasq(&["agent", "--once", "--iptables-mode=nft", &flag]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("invalid config rejected"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("unsupported-key"), "{}", run.stderr);
    assert!(!has_chain(&ns, "nft"), "nothing may be installed");
    let run = ns.ipmasq(&["agent", "--dry-run", "--iptables-mode=nft", &flag]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(!run.stderr.contains("config accepted"), "{}", run.stderr);
    let _ = std::fs::remove_file(config);
}

/// GET inside the namespace with curl-like python; returns (status, seconds taken).
fn timed_get(ns: &Netns, path: &str) -> (u16, f64) {
    let script = format!(
        "import time, urllib.request, urllib.error\n\
         t = time.monotonic()\n\
         try:\n    c = urllib.request.urlopen('http://127.0.0.1:9723{path}', timeout=5).status\n\
         except urllib.error.HTTPError as e:\n    c = e.code\n\
         print(c, time.monotonic() - t)\n"
    );
    let run = ns.exec(super::netns::PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "GET {path}: {}", run.stderr);
    let mut parts = run.stdout.split_whitespace();
    let code = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let took = parts
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(f64::MAX);
    (code, took)
}

/// An iptables-restore that hangs for 10 s: the probes still answer at once, and SIGTERM
/// ends the agent without waiting for the pass, killing that tool before its commit.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_blocked_pass_blocks_neither_health_nor_sigterm() {
    let mut ns = Netns::new("blocked");
    let fakes = Scratch::new("blocked-fakes");
    let marker = fakes.path.join("restore-started");
    let restore = fakes.path.join("iptables-nft-restore");
    super::netns::executable(
        &restore,
        &format!(
            "#!/bin/sh\necho $$ > '{}'\nsleep 10\nexec /usr/sbin/iptables-nft-restore \"$@\"\n",
            marker.display()
        ),
    );
    let log = fakes.path.join("agent.log");
    let config = format!("--config={}", fakes.path.join("config").display());
    let child = ns
        .ipmasq_with_path(
            &fakes.path,
            &[
                "agent",
                "--iptables-mode=nft",
                &config,
                "--metrics-addr=127.0.0.1:9723",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    ns.adopt(child);
    assert!(
        wait_until(PATIENCE, || marker.exists()),
        "the first sync never reached iptables-restore: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The pass is now blocked in the restore for about 10 s.
    let started = Instant::now();
    let mut worst: f64 = 0.0;
    for path in ["/healthz", "/readyz", "/metrics", "/healthz"] {
        let (code, took) = timed_get(&ns, path);
        assert_ne!(code, 0, "{path} did not answer");
        worst = worst.max(took);
    }
    assert_eq!(timed_get(&ns, "/healthz").0, 200);
    assert!(
        worst < 1.0,
        "a probe took {worst:.3}s while a pass was blocked"
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the probes must be answered inside the blocked window"
    );
    eprintln!("probes during a blocked pass: worst {:.1} ms", worst * 1e3);
    let asked = Instant::now();
    kill(pid, "TERM");
    // The agent's own process ends at once; the wrapper that exec'd it is that process.
    let code = ns.wait_daemon(pid, Duration::from_secs(5));
    assert_eq!(code, Some(0), "SIGTERM during a blocked pass");
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
    eprintln!("SIGTERM during a blocked pass: exited after {took:?}");
    // The tool it waited on went with it, before its commit: nothing of ours writes once the
    // node lock is free for a successor.
    let tool: u32 = std::fs::read_to_string(&marker)
        .unwrap_or_default()
        .trim()
        .parse()
        .expect("the tool wrote its pid");
    let tool_runs = || {
        std::fs::read_to_string(format!("/proc/{tool}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
    };
    assert!(
        wait_until(Duration::from_secs(5), || !tool_runs()),
        "iptables-restore (pid {tool}) outlived the agent"
    );
}

/// A directory whose `iptables` is the given variant's, to stand for the host's alternative.
fn system_iptables(variant: &str) -> Scratch {
    let dir = Scratch::new(&format!("system-iptables-{variant}"));
    std::os::unix::fs::symlink(
        format!("/usr/sbin/iptables-{variant}"),
        dir.path.join("iptables"),
    )
    .unwrap();
    dir
}

/// With no rules in either variant, auto mode uses what the system's `iptables` is, so an
/// admin's `iptables -t nat -L` shows our chain.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn auto_mode_on_an_empty_host_follows_the_system_iptables() {
    for (variant, other) in [("legacy", "nft"), ("nft", "legacy")] {
        let ns = Netns::new("emptyauto");
        let system = system_iptables(variant);
        let run: Run = ns
            .ipmasq_with_path(
                &system.path,
                &["agent", "--once", "--config=/nonexistent/ipmasq"],
            )
            .stdin(Stdio::null())
            .output()
            .unwrap()
            .into();
        assert_eq!(run.code, 0, "{variant}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("backend=iptables-{variant}")),
            "{variant}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("the system's iptables is"),
            "the reason is logged: {}",
            run.stderr
        );
        assert!(has_chain(&ns, variant), "{variant}");
        assert!(!has_chain(&ns, other), "{variant}: nothing in {other}");
    }
}

/// Our chain in both variants (two agents, or a changed mode) is the classic broken node:
/// `show` says so in text and JSON and exits non-zero.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn show_reports_a_chain_in_both_variants() {
    let ns = Netns::new("bothvariants");
    for variant in ["nft", "legacy"] {
        let mode = format!("--iptables-mode={variant}");
        let run = ns.ipmasq(&["agent", "--once", "--config=/nonexistent/x", &mode]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let run = ns.ipmasq(&["show", "--iptables-mode=nft"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("also exists in iptables-legacy (ipv4)"),
        "{}",
        run.stdout
    );
    let run = ns.ipmasq(&["show", "--iptables-mode=legacy", "-o", "json"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["alsoInstalledIn"][0]["backend"], "iptables-nft");
    assert_eq!(report["alsoInstalledIn"][0]["families"][0], "ipv4");
    // Once the stale copy is gone, show is content again.
    let run = ns.ipmasq(&["cleanup", "--all-variants=false", "--iptables-mode=legacy"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(ns.ipmasq(&["show", "--iptables-mode=nft"]).code, 0);
}

/// `show` judges against the running agent's settings (from its state file), names a flag
/// given by hand that differs, refuses a --config that does not exist; `cleanup` warns that
/// the agent will put back what it removes.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn show_and_cleanup_know_the_running_agent() {
    let mut ns = Netns::new("knowagent");
    let dir = Scratch::new("knowagent");
    let config = dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let log = dir.path.join("agent.log");
    let config_flag = format!("--config={}", config.display());
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=legacy",
            "--random-fully=false",
            &config_flag,
        ],
        &log,
    );
    let state_dir = ns.state_dir();
    let state_written = || {
        std::fs::read_dir(&state_dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".json"))
            })
            .unwrap_or(false)
    };
    assert!(
        wait_until(PATIENCE, state_written),
        "no state file: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(wait_until(PATIENCE, || has_chain(&ns, "legacy")));
    // No flags: the agent's backend, config and flags, and in sync.
    let run = ns.ipmasq(&["show"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("backend: iptables-legacy (the running agent's backend)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("in sync"), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("pid {pid}")), "{}", run.stdout);
    // The same config with a default flag the agent does not use: drifted, and the flag named.
    let run = ns.ipmasq(&["show", &config_flag]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("--random-fully is true here but false in the running agent"),
        "{}",
        run.stdout
    );
    let run = ns.ipmasq(&["show", "-o", "json", &config_flag]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        report["sync"]["flagsDifferFromAgent"][0]["flag"],
        "--random-fully"
    );
    assert_eq!(report["agent"]["pid"], pid);
    // A --config that does not exist is an error, not silently the defaults.
    let run = ns.ipmasq(&["show", "--config=/nonexistent/ip-masq-agent"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(run.stderr.contains("no such file"), "{}", run.stderr);
    // A dry run warns as well (it is how one asks what cleanup would do), and removes nothing.
    let run = ns.ipmasq(&["cleanup", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "an agent is running (pid {pid}, iptables-legacy) and would put these rules back"
        )),
        "{}",
        run.stderr
    );
    assert!(has_chain(&ns, "legacy"), "a dry run removed the chain");
    // cleanup removes, and warns that the agent will put it back.
    let run = ns.ipmasq(&["cleanup"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("an agent is running (pid {pid}")),
        "{}",
        run.stderr
    );
    // SIGTERM removes the state file.
    kill(pid, "TERM");
    assert_eq!(ns.wait_daemon(pid, PATIENCE), Some(0));
    assert!(!state_written(), "state file left behind");
}

/// An explicit `--backend` or `--iptables-mode` wins over the running agent's backend: with an
/// agent on nftables and a copy of our chain in iptables-nft, `show` and `explain` without
/// flags read nftables, with `--backend=iptables` (or `--iptables-mode=nft`) read iptables;
/// `cleanup --backend=iptables` removes the iptables chain and leaves the agent's nftables
/// table, and `cleanup --backend=nftables` touches nothing else.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explicit_backend_flags_win_over_the_running_agents() {
    let mut ns = Netns::new("explicitbackend");
    let dir = Scratch::new("explicitbackend");
    let config = dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let log = dir.path.join("agent.log");
    let config_flag = format!("--config={}", config.display());
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--backend=nftables",
            "--metrics-addr=off",
            &config_flag,
        ],
        &log,
    );
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let table = |ns: &Netns| ns.exec("nft", &["list", "table", "ip", "ipmasq"]).code == 0;
    assert!(wait_until(PATIENCE, || table(&ns)), "{}", read());
    let shown = |ns: &Netns| ns.ipmasq(&["show", "-o", "json"]).stdout;
    assert!(
        wait_until(PATIENCE, || shown(&ns).contains("\"pid\"")),
        "the agent is not seen running: {}",
        read()
    );
    // A copy of our chain in iptables-nft, as an earlier iptables agent would have left it.
    ns.sh(&format!(
        "iptables-nft -t nat -N {CHAIN} && iptables-nft -t nat -A {CHAIN} -j MASQUERADE && iptables-nft -t nat -A POSTROUTING -j {CHAIN}"
    ));
    let json = |args: &[&str]| -> serde_json::Value {
        let run = ns.ipmasq(args);
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}{}", run.stdout, run.stderr))
    };
    let report = json(&["show", "-o", "json"]);
    assert_eq!(report["backend"], "nftables", "{report}");
    assert_eq!(report["backendChoice"], "the running agent's backend");
    for flags in [&["--backend=iptables"][..], &["--iptables-mode=nft"][..]] {
        let report = json(&[&["show", "-o", "json"][..], flags].concat());
        assert_eq!(report["backend"], "iptables-nft", "{flags:?}: {report}");
        assert_ne!(
            report["backendChoice"], "the running agent's backend",
            "{flags:?}: {report}"
        );
        let explained = json(&[&["explain", "203.0.113.7", "-o", "json"][..], flags].concat());
        assert_eq!(
            explained["live"]["backend"], "iptables-nft",
            "{flags:?}: {explained}"
        );
    }
    let explained = json(&["explain", "203.0.113.7", "-o", "json"]);
    assert_eq!(explained["live"]["backend"], "nftables", "{explained}");

    let dry = json(&["cleanup", "--backend=nftables", "--dry-run", "-o", "json"]);
    let backends: Vec<&str> = dry["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["backend"].as_str())
        .collect();
    assert_eq!(backends, ["nftables", "nftables"], "{dry}");
    let run = ns.ipmasq(&["cleanup", "--backend=iptables"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(!run.stdout.contains("nftables"), "{}", run.stdout);
    assert!(!has_chain(&ns, "nft"), "{}", run.stdout);
    assert!(
        table(&ns),
        "the agent's nftables table stays: {}",
        run.stdout
    );
    kill(pid, "TERM");
    assert_eq!(ns.wait_daemon(pid, PATIENCE), Some(0), "{}", read());
}

/// `explain` walks the whole node as the kernel does: a stale copy of our chain in the other
/// iptables variant masquerades what ours keep (both nat hooks run), so the live answer is
/// masquerade, a disagreement; the command it prints removes that copy, and then config and
/// live rules agree. Without --from, a source-scoped MASQUERADE above our jump is named.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explain_walks_a_stale_copy_and_rules_for_other_sources() {
    let ns = Netns::new("explainstale");
    let dir = Scratch::new("explainstale");
    let ours = dir.write("ours", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let stale = dir.write("stale", "nonMasqueradeCIDRs: [192.168.0.0/16]\n");
    let ours_flag = format!("--config={}", ours.display());
    let stale_flag = format!("--config={}", stale.display());
    for (mode, config) in [
        ("--iptables-mode=legacy", &stale_flag),
        ("--iptables-mode=nft", &ours_flag),
    ] {
        let run = ns.ipmasq(&["agent", "--once", mode, config]);
        assert_eq!(run.code, 0, "{mode}: {}", run.stderr);
    }
    let explain = |extra: &[&str]| {
        let args = [
            &["explain", "10.200.0.5", "--iptables-mode=nft", &ours_flag][..],
            extra,
        ]
        .concat();
        ns.ipmasq(&args)
    };
    let text = explain(&["--color=never"]);
    assert_eq!(
        text.code, 11,
        "a disagreement: {}{}",
        text.stdout, text.stderr
    );
    assert!(
        text.stdout
            .contains("but the stale copy in iptables-legacy masquerades it")
            && text.stdout.contains("iptables-legacy also holds our rules"),
        "{}",
        text.stdout
    );
    let json = explain(&["-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(report["live"]["action"], "masquerade", "{report}");
    assert_eq!(
        report["live"]["masqueradedByStaleCopy"], "iptables-legacy",
        "{report}"
    );
    let cleanup = report["live"]["staleCopies"][0]["cleanup"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.stdout.contains(&cleanup), "{}", text.stdout);
    // The suggested command, as printed, removes the copy and nothing else.
    let words: Vec<&str> = cleanup.split_whitespace().collect();
    assert_eq!(words[0], "ipmasq", "{cleanup}");
    let run = ns.ipmasq(&words[1..]);
    assert_eq!(run.code, 0, "{cleanup}: {}{}", run.stdout, run.stderr);
    assert!(!has_chain(&ns, "legacy") && has_chain(&ns, "nft"));
    let text = explain(&["--color=never"]);
    assert_eq!(
        text.code, 10,
        "kept, config and live agree: {}",
        text.stdout
    );
    assert!(
        !text.stdout.contains("also holds our rules"),
        "{}",
        text.stdout
    );

    // A source-scoped MASQUERADE above our jump decides first for the sources it names.
    let run = ns.exec(
        "iptables-nft",
        &[
            "-t",
            "nat",
            "-I",
            "POSTROUTING",
            "1",
            "-s",
            "10.1.0.0/16",
            "-j",
            "MASQUERADE",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = explain(&["--color=never"]);
    assert_eq!(
        text.code, 10,
        "the assumed source is not 10.1/16: {}",
        text.stdout
    );
    assert!(
        text.stdout.contains("POSTROUTING rule 1 runs first and rewrites the source of this traffic from the sources it names"),
        "{}",
        text.stdout
    );
    let from = explain(&["--color=never", "--from=10.1.2.3"]);
    assert_eq!(from.code, 11, "{}", from.stdout);
    assert!(
        from.stdout
            .contains("decided before our rules, by POSTROUTING rule 1"),
        "{}",
        from.stdout
    );
    assert!(
        !from.stdout.contains("from the sources it names"),
        "{}",
        from.stdout
    );
}
