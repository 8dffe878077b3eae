//! Untrusted text on its way out: terminal controls planted in the nat table are escaped by
//! `explain` and `cleanup`, and a config's repeated findings make a bounded log.

use super::memory_limit::tail;
use super::netns::Netns;

/// A comment holding terminal controls, as a pod owner with CAP_NET_ADMIN on the node could
/// write: an OSC title change, a bell and a screen clear.
const HOSTILE_COMMENT: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J";

fn assert_no_controls(what: &str, text: &str) {
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{what} printed a control character: {text:?}"
    );
}

/// `explain` names the live rule that decides, and `cleanup --dry-run` prints what it would
/// delete: both carry text from the kernel, and both show it escaped.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explain_and_cleanup_escape_terminal_controls_from_the_kernel() {
    let ns = Netns::new("controls");
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        "--config=/nonexistent/x",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let insert = ns.exec(
        "iptables-nft",
        &[
            "-t",
            "nat",
            "-I",
            "IP-MASQ-AGENT",
            "1",
            "-d",
            "203.0.113.0/24",
            "-m",
            "comment",
            "--comment",
            HOSTILE_COMMENT,
            "-j",
            "RETURN",
        ],
    );
    assert_eq!(insert.code, 0, "{}", insert.stderr);
    let jump = ns.exec(
        "iptables-nft",
        &[
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-m",
            "comment",
            "--comment",
            HOSTILE_COMMENT,
            "-j",
            "IP-MASQ-AGENT",
        ],
    );
    assert_eq!(jump.code, 0, "{}", jump.stderr);

    let run = ns.ipmasq(&[
        "explain",
        "203.0.113.7",
        "--iptables-mode=nft",
        "--color=never",
    ]);
    // The planted rule keeps the source where the config masquerades: a disagreement.
    assert_eq!(run.code, 11, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("\\x1b]0;owned\\x07"), "{}", run.stdout);
    assert_no_controls("explain", &run.stdout);
    assert_no_controls("explain (stderr)", &run.stderr);

    let run = ns.ipmasq(&[
        "cleanup",
        "--dry-run",
        "--all-variants=false",
        "--iptables-mode=nft",
        "--color=never",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("\\x1b[2J"), "{}", run.stdout);
    assert_no_controls("cleanup --dry-run", &run.stdout);
}

/// Log amplification: 52,422 duplicate keys make ten warnings and one counted line per load,
/// not 52,422; 200,000 misaligned CIDRs on one line make a short error, not 29.5 MB.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn repeated_findings_make_a_bounded_log() {
    let ns = Netns::new("logamp");
    let dir = crate::util::Scratch::new("logamp");
    let dups = dir.write("dups", &"cidrLimit: 64\n".repeat(52_422));
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        &format!("--config={}", dups.display()),
    ]);
    assert_eq!(run.code, 0, "{}", tail(&run.stderr));
    // The config's findings; `ip netns exec` hides the cgroup, which the agent warns of once.
    let unreadable_limit = "cannot read this agent's memory limit";
    let warnings = run
        .stderr
        .lines()
        .filter(|l| l.contains(" WARN ") && !l.contains(unreadable_limit))
        .count();
    assert_eq!(warnings, 11, "{}", tail(&run.stderr));
    assert_eq!(run.stderr.matches(unreadable_limit).count(), 1);
    assert!(run
        .stderr
        .contains("and 52411 more [duplicate-key] findings"));
    let misaligned = dir.write(
        "misaligned",
        &format!(
            "cidrLimit: 300000\nnonMasqueradeCIDRs: [{}]\n",
            vec!["10.1.2.3/8"; 200_000].join(", ")
        ),
    );
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        &format!("--config={}", misaligned.display()),
    ]);
    assert_eq!(run.code, 1);
    let longest = run.stderr.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 8_000, "a log line of {longest} bytes");
    assert!(
        run.stderr.contains("more [cidr-not-aligned] findings"),
        "{}",
        tail(&run.stderr)
    );
}
