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

/// The non-masquerade CIDRs of our nat chain, in order.
fn kept(ns: &Netns) -> Vec<String> {
    ns.save("nft", false, Some("nat"))
        .lines()
        .filter(|l| l.starts_with("-A IP-MASQ-AGENT -d "))
        .map(|l| l.split_whitespace().nth(3).unwrap_or("").to_string())
        .collect()
}

/// An agent on `config` (which holds 10.0.0.0/8 and 100.64.0.0/10) with the writer deadline
/// given, once its first config is in; returns its pid.
fn agent_on(
    ns: &mut Netns,
    config: &std::path::Path,
    log: &std::path::Path,
    deadline: &str,
) -> u32 {
    let config_flag = format!("--config={}", config.display());
    let deadline_flag = format!("--config-writer-deadline={deadline}");
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            &config_flag,
            &deadline_flag,
            "--metrics-addr=off",
        ],
        log,
    );
    assert!(
        super::netns::wait_until(PATIENCE, || kept(ns)
            == ["169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10"]),
        "first config not applied; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    pid
}

/// The config rewritten in place (`cat > file`: truncate, then write) by a writer that pauses
/// mid-way: the agent neither applies upstream's defaults from the empty file nor the half
/// written one; it keeps the config in force and takes the new one when the writer closes it.
/// The writer deadline is an hour, so a slow machine cannot make the pause outlast it.
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
    let pid = agent_on(&mut ns, &config, &log, "1h");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
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

/// A writer that keeps the file open past `--config-writer-deadline`: the agent reads the file
/// as it is, says why, and a half-written file is rejected with the rules in force kept.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_writer_past_its_deadline_is_read_as_it_is_and_a_half_file_keeps_the_rules() {
    use std::io::Write;
    let mut ns = Netns::new("stuckwr");
    let dir = crate::util::Scratch::new("stuck-writer");
    let config = dir.write(
        "ip-masq-agent",
        "nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\nresyncInterval: 1h\n",
    );
    let log = dir.path.join("agent.log");
    agent_on(&mut ns, &config, &log, "1s");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Truncate and write half; the writer keeps the file open until the end of the test.
    let mut writer = std::fs::File::create(&config).unwrap();
    writer.write_all(b"nonMasqueradeCIDRs: [100.64").unwrap();
    writer.flush().unwrap();
    assert!(
        super::netns::wait_until(PATIENCE, || log_text().contains("invalid config rejected")),
        "the half-written file was not read past the deadline; log:\n{}",
        log_text()
    );
    let text = log_text();
    let waited = text
        .find("being rewritten in place; waiting for the writer")
        .expect("the agent saw the writer");
    let gave_up = text
        .find("a writer has kept the config file open past the deadline")
        .expect("the deadline is logged");
    assert!(waited < gave_up, "{text}");
    assert!(
        gave_up < text.find("invalid config rejected").unwrap(),
        "{text}"
    );
    assert_eq!(kept(&ns), ["169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10"]);
    drop(writer);
}
