//! A config the running agent refuses, told as it is: the agent records the rejection in its
//! state file (cleared when a good config is applied), `show` says REJECTED with the
//! diagnostics and `ipmasq validate PATH` and exits 1, `explain` says it judges by the config
//! in force and that the file on disk was rejected, and `/readyz` answers what
//! docs/reference/endpoints.md (generated from the same text as ipmasq-agent(8)) says.

use super::health::{get, ADDR};
use super::netns::{wait_until, Netns};
use crate::util::Scratch;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(20);
const GOOD: &str = "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n";
/// Invalid, and with the good file's only CIDR on another line: a line explain cites from the
/// config in force is not this file's.
const INVALID: &str = "resyncInterval: 1s\n\nnonMasqueradeCIDRs:\n  - 10.1.2.3/8\n";

/// The agent's state file in `dir`, parsed (None before it is written).
fn agent_state(dir: &std::path::Path) -> Option<serde_json::Value> {
    let entries = std::fs::read_dir(dir).ok()?;
    let path = entries.flatten().map(|e| e.path()).find(|p| {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        name.starts_with("agent-net") && name.ends_with(".json") && !name.ends_with("-config.json")
    })?;
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The status docs/reference/endpoints.md gives `/readyz` while a rejected config leaves the
/// last good one in force.
fn documented_readyz_status_when_rejected() -> u16 {
    let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/endpoints.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let readyz = text
        .split("## `/readyz`")
        .nth(1)
        .expect("a /readyz section");
    let row = readyz
        .lines()
        .find(|l| l.starts_with("| a rejected config"))
        .expect("a row for a rejected config");
    row.split('|').nth(2).unwrap().trim().parse().unwrap()
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_rejected_config_is_told_by_show_explain_and_readyz() {
    let mut ns = Netns::new("rejected");
    let dir = Scratch::new("rejected");
    let config = dir.write("config", GOOD);
    let path = config.display().to_string();
    let log = dir.path.join("agent.log");
    let pid = ns.spawn_ipmasq(
        &[
            "agent",
            "--iptables-mode=nft",
            &format!("--config={path}"),
            &format!("--metrics-addr={ADDR}"),
        ],
        &log,
    );
    let state_dir = ns.state_dir();
    let agent_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(PATIENCE, || agent_state(&state_dir)
            .is_some_and(|s| s["configRead"].is_object())),
        "no config recorded: {}",
        agent_log()
    );
    let run = ns.ipmasq(&["show"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("in sync"), "{}", run.stdout);
    assert!(!run.stdout.contains("REJECTED"), "{}", run.stdout);

    std::fs::write(&config, INVALID).unwrap();
    assert!(
        wait_until(PATIENCE, || agent_state(&state_dir)
            .is_some_and(|s| s["configRejected"].is_object())),
        "no rejection recorded: {}",
        agent_log()
    );
    let state = agent_state(&state_dir).unwrap();
    let rejected = &state["configRejected"];
    assert_eq!(rejected["path"], path.as_str());
    assert_eq!(
        rejected["digest"],
        ipmasq::config::digest::sha256_hex(INVALID.as_bytes()).as_str()
    );
    let diagnostic = rejected["diagnostics"][0].as_str().unwrap();
    assert!(
        diagnostic.starts_with(&format!("{path}:4:")) && diagnostic.contains("[cidr-not-aligned]"),
        "{diagnostic}"
    );
    assert!(rejected["rejectedAt"].as_str().unwrap().ends_with('Z'));

    // show: REJECTED, why, what stays in force, the command to run; exit 1.
    let run = ns.ipmasq(&["show"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for needle in [
        "REJECTED:",
        &format!("the agent refused {path}"),
        diagnostic,
        "the last good config stays in force",
        &format!("next: ipmasq validate {path}"),
    ] {
        assert!(run.stdout.contains(needle), "{needle} in:\n{}", run.stdout);
    }
    let run = ns.ipmasq(&["show", "-o", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["configRejected"]["diagnostics"][0], diagnostic);
    // At COLUMNS=80, every line of it fits.
    let text = super::fits_terminal::show_fits(&ns, &[], 1);
    assert!(text.contains("REJECTED:"), "{text}");

    // explain: judged by the config in force (its digest), the file on disk rejected.
    let good_digest = ipmasq::config::digest::sha256_hex(GOOD.as_bytes());
    let run = ns.ipmasq(&["explain", "10.1.1.1", "--no-live"]);
    assert_eq!(run.code, 10, "{}\n{}", run.stdout, run.stderr);
    for needle in [
        format!("sha256 {}", &good_digest[..12]),
        "decided by 10.0.0.0/8 in nonMasqueradeCIDRs (line 1".to_string(),
        format!("the agent REJECTED the file now at {path}"),
    ] {
        assert!(run.stdout.contains(&needle), "{needle} in:\n{}", run.stdout);
    }
    let run = ns.ipmasq(&["explain", "10.1.1.1", "--no-live", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["configFile"]["state"], "rejected");
    assert_eq!(report["configFile"]["diagnostics"][0], diagnostic);

    // /readyz answers what the docs say (and says why after its status line).
    let (code, body) = get(&ns, "/readyz");
    assert_eq!(code, documented_readyz_status_when_rejected(), "{body}");
    assert!(
        body.contains("config rejected, the last good config stays in force"),
        "{body}"
    );

    // A good config again clears the rejection.
    std::fs::write(&config, GOOD).unwrap();
    assert!(
        wait_until(PATIENCE, || agent_state(&state_dir)
            .is_some_and(|s| s.get("configRejected").is_none())),
        "the rejection stayed: {}",
        agent_log()
    );
    let run = ns.ipmasq(&["show"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stdout.contains("REJECTED"), "{}", run.stdout);
    super::netns::kill(pid, "TERM");
    assert_eq!(ns.wait_daemon(pid, PATIENCE), Some(0));
}

/// An agent that has refused every config it read enforces none: show says REJECTED and that
/// no rules are installed (exit 3, not installed), and judges by no file.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_config_rejected_at_start_is_told_by_show() {
    let mut ns = Netns::new("rejectedstart");
    let dir = Scratch::new("rejectedstart");
    let config = dir.write("config", INVALID);
    let path = config.display().to_string();
    let log = dir.path.join("agent.log");
    let pid = ns.spawn_ipmasq(
        &["agent", "--iptables-mode=nft", &format!("--config={path}")],
        &log,
    );
    let state_dir = ns.state_dir();
    assert!(
        wait_until(PATIENCE, || agent_state(&state_dir)
            .is_some_and(|s| s["configRejected"].is_object())),
        "no rejection recorded: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let run = ns.ipmasq(&["show", "--iptables-mode=nft"]);
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    for needle in [
        "REJECTED:",
        "no config is in force: no rules are installed until it is fixed",
        &format!("next: ipmasq validate {path}"),
    ] {
        assert!(run.stdout.contains(needle), "{needle} in:\n{}", run.stdout);
    }
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    super::netns::kill(pid, "TERM");
    assert_eq!(ns.wait_daemon(pid, PATIENCE), Some(0));
}
