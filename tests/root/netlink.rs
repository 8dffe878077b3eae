//! The nftables backend speaks netlink only, against the real kernel: it works with
//! no `nft` on PATH, its dry run is exactly what its apply sends, and a batch the kernel
//! refuses fails the pass with the object and the errno named, leaves the table as it was,
//! and the next pass repairs.

use super::netns::{path_without_nft, wait_until, Netns};
use crate::util::Scratch;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(30);
const CONFIG: &str = "nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16, 203.0.113.7/32, fd00::/8]\nmasqueradeSourceCIDRs: [10.244.0.0/16, 10.245.0.1/32, fd00:244::/48]\n";

/// `nft list ruleset` without the lines that differ between two equal rulesets.
/// The ruleset as nft lists it, without what says which process holds our table (its `flags`
/// line, `# progname`): an agent holds it while it runs and leaves it orphaned when it exits
/// (`root::neighbour_flush`), and a dry run's text, replayed with `nft -f`, holds nothing.
/// Blank lines go too: nft sets the table's header apart with one when it has flags.
fn ruleset(ns: &Netns) -> String {
    ns.sh("nft list ruleset")
        .lines()
        .filter(|l| !l.starts_with("\tflags") && !l.is_empty())
        .map(|l| format!("{}\n", l.trim_end_matches(" # progname ipmasq")))
        .collect()
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_nftables_backend_needs_no_nft_on_path() {
    let ns = Netns::new("nonft");
    let path = path_without_nft();
    let found = ns.exec(
        "env",
        &[
            &format!("PATH={}", path.display()),
            "sh",
            "-c",
            "command -v nft",
        ],
    );
    assert_ne!(found.code, 0, "the PATH still has nft: {}", found.stdout);
    let dir = Scratch::new("nonft");
    let config = dir.write("config", CONFIG);
    let config_flag = format!("--config={}", config.display());
    let common = ["--backend=nftables", "--enable-ipv6", &config_flag];
    let run = ns.ipmasq(&[&["agent", "--once"][..], &common[..]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let listed = ruleset(&ns);
    assert!(
        listed.contains("ip saddr != { 10.244.0.0/16, 10.245.0.1 } return"),
        "{listed}"
    );
    assert!(
        listed.contains("elements = { 10.0.0.0/8, 169.254.0.0/16,"),
        "{listed}"
    );
    let show = ns.ipmasq(&["show", "--backend=nftables", "--enable-ipv6", "-o", "json"]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains("\"installed\": true"),
        "{}",
        show.stdout
    );
    let explain = ns.ipmasq(&[&["explain", "203.0.113.7"][..], &common[..]].concat());
    // Exit 10: the source is kept (explain's code for that verdict).
    assert_eq!(explain.code, 10, "{}", explain.stderr);
    assert!(
        explain.stdout.contains("verdict: source kept"),
        "{}",
        explain.stdout
    );
    let again = ns.ipmasq(&[&["agent", "--once", "--dry-run"][..], &common[..]].concat());
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(!again.stdout.contains("add "), "in sync: {}", again.stdout);
    let cleanup = ns.ipmasq(&["cleanup", "--backend=nftables", "--all-variants=false"]);
    assert_eq!(cleanup.code, 0, "{}", cleanup.stderr);
    assert!(!ruleset(&ns).contains("ipmasq"));
}

/// What `--dry-run` prints, applied with nft in one namespace, makes the same ruleset as the
/// agent's own apply in another: the printed text is the batch that is sent.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_dry_run_is_what_the_apply_sends() {
    let dir = Scratch::new("dryrun");
    let config = dir.write("config", CONFIG);
    let config_flag = format!("--config={}", config.display());
    let args = [
        "--backend=nftables",
        "--enable-ipv6",
        "--to-ports=1024-29999,32768-65535",
        &config_flag,
    ];
    let printed_in = Netns::new("dryprint");
    let run = printed_in.ipmasq(&[&["agent", "--once", "--dry-run"][..], &args[..]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let script: String = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(script.contains("add table ip6 ipmasq"), "{script}");
    let file = dir.write("printed.nft", &script);
    printed_in.sh(&format!("nft -f {}", file.display()));
    let applied_in = Netns::new("dryapply");
    let run = applied_in.ipmasq(&[&["agent", "--once"][..], &args[..]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (printed, applied) = (ruleset(&printed_in), ruleset(&applied_in));
    assert!(applied.contains("numgen random mod"), "{applied}");
    assert_eq!(printed, applied);
}

/// A chain of someone else's in our table holds on to our set, so the batch that deletes and
/// declares the set again is refused: the pass fails naming `delete set` and the kernel's
/// words, the table is exactly as it was (one transaction), and the next pass makes the table
/// anew.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_refused_batch_changes_nothing_and_the_next_pass_repairs() {
    let mut ns = Netns::new("nlrefuse");
    let dir = Scratch::new("nlrefuse");
    let config = dir.write(
        "config",
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 200ms\n",
    );
    let config_flag = format!("--config={}", config.display());
    let args = ["--backend=nftables", config_flag.as_str()];
    let run = ns.ipmasq(&[&["agent", "--once"][..], &args[..]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let healthy = ruleset(&ns);
    // The damage: a chain of ours emptied, and a chain we do not read using our set.
    ns.sh("nft add chain ip ipmasq holder && nft add rule ip ipmasq holder ip daddr @nomasq accept && nft flush chain ip ipmasq postrouting");
    let damaged = ruleset(&ns);
    let run = ns.ipmasq(&[&["agent", "--once"][..], &args[..]].concat());
    assert_ne!(run.code, 0, "the refused pass fails: {}", run.stderr);
    assert!(
        run.stderr
            .contains("nf_tables refused `delete set ip ipmasq nomasq`")
            && run.stderr.contains("Device or resource busy"),
        "{}",
        run.stderr
    );
    assert_eq!(ruleset(&ns), damaged, "nothing half-done");
    // A running agent: its first pass is refused the same way, its next one recreates.
    let log = dir.path.join("log");
    ns.spawn_ipmasq(
        &[&["agent", "--metrics-addr=off"][..], &args[..]].concat(),
        &log,
    );
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(PATIENCE, || ruleset(&ns) == healthy),
        "not repaired:\n{}\nlog:\n{}",
        ruleset(&ns),
        read()
    );
    assert!(read().contains("making it anew"), "{}", read());
}

/// Bytes a running agent sends to the kernel over netlink during `passes` SIGHUP passes over
/// an untouched table (strace attached after its first pass), per pass.
fn steady_netlink_bytes_per_pass(tag: &str, backend: &[&str], passes: usize) -> usize {
    let mut ns = Netns::new(tag);
    let dir = Scratch::new(tag);
    let config = dir.write(
        "config",
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    let log = dir.path.join("log");
    let config_flag = format!("--config={}", config.display());
    let args = [
        &["agent", &config_flag, "--v=2", "--metrics-addr=off"][..],
        backend,
    ]
    .concat();
    let pid = ns.spawn_ipmasq(&args, &log);
    let done = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("pass done")
            .count()
    };
    assert!(wait_until(PATIENCE, || done() >= 1), "no first pass");
    let trace = dir.path.join("trace");
    let mut tracer = std::process::Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-yy",
            "-s",
            "0",
            "-e",
            "trace=sendto,sendmsg",
            "-o",
        ])
        .arg(&trace)
        .args(["-p", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("strace (scripts/test installs it)");
    let traced = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
    };
    assert!(wait_until(PATIENCE, traced), "strace did not attach");
    for pass in 0..passes {
        let before = done();
        super::netns::kill(pid, "HUP");
        assert!(
            wait_until(PATIENCE, || done() > before),
            "pass {pass} not done"
        );
    }
    let _ = tracer.kill();
    let _ = tracer.wait();
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    let sent: usize = text
        .lines()
        .filter(|l| l.contains("<NETLINK:"))
        .filter_map(|l| l.rsplit("= ").next()?.trim().parse::<usize>().ok())
        .sum();
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("rules repaired"),
        "the table was untouched"
    );
    sent / passes
}

/// A steady pass of the gated backends sends one 20-byte generation request and nothing
/// else over netlink: iptables-nft asks whether a nat table exists only when the gate does
/// not vouch for it.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_steady_pass_sends_one_generation_request() {
    for (tag, backend) in [
        ("bytes-nft", &["--iptables-mode=nft"][..]),
        ("bytes-nftables", &["--backend=nftables"][..]),
    ] {
        let bytes = steady_netlink_bytes_per_pass(tag, backend, 5);
        eprintln!("{tag}: {bytes} bytes over netlink per steady pass");
        assert_eq!(bytes, 20, "{tag}");
    }
}
