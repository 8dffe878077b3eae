//! How the agent reads its config file: a path that is a FIFO is refused without hanging, and
//! a file rewritten in place is read only once it is whole.

use super::netns::Netns;
use crate::util::Scratch;
use std::time::{Duration, Instant};

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

/// How long a test waits for an observable event before failing.
const PATIENCE: Duration = Duration::from_secs(20);

/// The config rewritten in place (`cat > file`: truncate, then write) by a writer that pauses
/// mid-way: the agent neither applies upstream's defaults from the empty file nor the half
/// written one; it keeps the config in force and takes the new one when the writer closes it.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_config_rewritten_in_place_is_read_only_when_whole() {
    use std::io::Write;
    let mut ns = Netns::new("inplace");
    let dir = crate::util::Scratch::new("inplace");
    let config = dir.write(
        "ip-masq-agent",
        "nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\nresyncInterval: 1h\n",
    );
    let log = dir.path.join("agent.log");
    let config_flag = format!("--config={}", config.display());
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            &config_flag,
            "--metrics-addr=off",
        ],
        &log,
    );
    let kept = |ns: &Netns| -> Vec<String> {
        ns.save("nft", false, Some("nat"))
            .lines()
            .filter(|l| l.starts_with("-A IP-MASQ-AGENT -d "))
            .map(|l| l.split_whitespace().nth(3).unwrap_or("").to_string())
            .collect()
    };
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        super::netns::wait_until(PATIENCE, || kept(&ns)
            == ["169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10"]),
        "first config not applied; log:\n{}",
        log_text()
    );
    // Truncate and write half; the writer keeps the file open.
    let mut writer = std::fs::File::create(&config).unwrap();
    writer.write_all(b"nonMasqueradeCIDRs: [100.64").unwrap();
    writer.flush().unwrap();
    assert!(
        super::netns::wait_until(PATIENCE, || log_text()
            .contains("being rewritten in place; waiting for the writer")),
        "the agent did not see the writer; log:\n{}",
        log_text()
    );
    // A signal-driven pass meanwhile reads nothing: the config in force stays.
    super::netns::kill(pid, "HUP");
    assert!(super::netns::wait_until(PATIENCE, || log_text().contains("SIGHUP: re-reading")));
    assert_eq!(kept(&ns), ["169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10"]);
    writer.write_all(b".0.0/10]\nresyncInterval: 1h\n").unwrap();
    drop(writer);
    assert!(
        super::netns::wait_until(PATIENCE, || kept(&ns)
            == ["169.254.0.0/16", "100.64.0.0/10"]),
        "the finished config was not applied; log:\n{}",
        log_text()
    );
    let text = log_text();
    assert!(!text.contains("invalid config rejected"), "{text}");
    assert_eq!(
        text.matches("config accepted").count(),
        2,
        "only the first and the finished config: {text}"
    );
}
