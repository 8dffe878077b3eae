//! Step 7 at the kernel: a hostile node. A nat table iptables cannot show, a config path that
//! is a FIFO or unreadable: each is a clear error, nothing is written, nothing hangs.

use super::netns::Netns;
use crate::util::Scratch;
use std::time::{Duration, Instant};

/// POSTROUTING jumps to our chain, counted with nft (which can show what iptables cannot).
fn jumps_in_nft(ns: &Netns) -> usize {
    ns.sh("nft list chain ip nat POSTROUTING")
        .lines()
        .filter(|l| l.contains("jump IP-MASQ-AGENT"))
        .count()
}

/// A rule iptables-nft cannot translate makes `iptables-nft-save` print "table is
/// incompatible" and no nat section. That is a failed observation: the agent writes nothing
/// (before the fix it appended one more jump every pass while reporting success), and `show`
/// and `cleanup` say why instead of "not installed" / "nothing to remove".
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn an_incompatible_nat_table_is_a_failed_observation() {
    let ns = Netns::new("incompatible");
    ns.sh("nft add table ip nat && nft add chain ip nat POSTROUTING '{ type nat hook postrouting priority 100; }' && nft add rule ip nat POSTROUTING ct state new counter");
    let before = ns.sh("nft list table ip nat");
    for _ in 0..3 {
        let run = ns.ipmasq(&[
            "agent",
            "--once",
            "--iptables-mode=nft",
            "--config=/nonexistent/x",
        ]);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(run.stderr.contains("is incompatible"), "{}", run.stderr);
        assert!(run.stderr.contains("sync failed"), "{}", run.stderr);
    }
    assert_eq!(jumps_in_nft(&ns), 0, "no jump may be written");
    assert_eq!(
        ns.sh("nft list table ip nat"),
        before,
        "the table is untouched"
    );
    let run = ns.ipmasq(&["show", "--iptables-mode=nft"]);
    assert_ne!(run.code, 0);
    assert_ne!(run.code, 3, "not 'not installed': {}", run.stdout);
    assert!(
        run.stderr.contains("cannot show the nat table"),
        "{}",
        run.stderr
    );
    let run = ns.ipmasq(&["cleanup", "--all-variants=false", "--iptables-mode=nft"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("is incompatible"), "{}", run.stdout);
}

/// A FIFO as the config: refused at once without blocking, nothing installed.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_fifo_config_is_refused_without_hanging() {
    let ns = Netns::new("fifo");
    let dir = Scratch::new("fifo-config");
    let fifo = dir.path.join("config");
    ns.sh(&format!("mkfifo {}", fifo.display()));
    let started = Instant::now();
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        &format!("--config={}", fifo.display()),
    ]);
    let took = started.elapsed();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("not a regular file"), "{}", run.stderr);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // A read error with no good config yet says that nothing is installed, not that the
    // rules of a last good config are kept.
    assert!(
        run.stderr
            .contains("no rules are installed until it can be read"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("last good config"), "{}", run.stderr);
    let run = ns.ipmasq(&["validate", &fifo.display().to_string()]);
    assert_eq!(run.code, 2, "{}", run.stdout);
}
