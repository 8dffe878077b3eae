//! Step 11 at the kernel: a hostile node, second round. Terminal controls planted in the nat
//! table, files planted in the state directory, a config rewritten in place, a stop during a
//! hanging tool: each is contained, bounded and said clearly.

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
