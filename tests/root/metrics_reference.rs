//! A live agent's /metrics against docs/reference/metrics.md (written from the exporter's
//! list): every family the binary serves is in the reference with its type, and every family
//! the reference says is served always, or after the first successful sync, is served.

use super::health::get;
use super::netns::{wait_until, Netns};
use crate::util::Scratch;
use std::collections::BTreeMap;
use std::time::Duration;

/// The reference's table: metric name → (type, when served).
fn reference() -> BTreeMap<String, (String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/metrics.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let rows: BTreeMap<String, (String, String)> = text
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let name = cells[0]
                .trim_start_matches("| ")
                .trim_matches('`')
                .to_string();
            (name, (cells[1].to_string(), cells[3].to_string()))
        })
        .collect();
    assert!(
        rows.len() >= 20,
        "{} rows in {}",
        rows.len(),
        path.display()
    );
    rows
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_live_agent_serves_the_families_of_the_reference() {
    let mut ns = Netns::new("metrics-ref");
    let dir = Scratch::new("metrics-reference");
    let config = dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let log = dir.path.join("agent.log");
    let config_flag = format!("--config={}", config.display());
    let addr_flag = format!("--metrics-addr={}", super::health::ADDR);
    ns.spawn_ipmasq(
        &["agent", "--iptables-mode=nft", &config_flag, &addr_flag],
        &log,
    );
    // Served from the first successful sync on.
    assert!(
        wait_until(Duration::from_secs(20), || get(&ns, "/metrics")
            .1
            .contains("\nipmasq_last_successful_sync_age_seconds ")),
        "no successful sync: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // As Prometheus scrapes it by default: the text format, counters named with `_total`.
    let (code, body) = get(&ns, "/metrics");
    assert_eq!(code, 200);
    let served: BTreeMap<&str, &str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let reference = reference();
    for (name, kind) in &served {
        let listed = reference.get(*name).unwrap_or_else(|| {
            panic!("the agent serves {name}, which docs/reference/metrics.md lacks:\n{body}")
        });
        assert_eq!(listed.0, *kind, "{name}'s type");
    }
    for (name, (_, when)) in &reference {
        if when == "always" || when == "after the first successful sync" {
            assert!(
                served.contains_key(name.as_str()),
                "docs/reference/metrics.md says {name} is served {when}; the agent does not:\n{body}"
            );
        }
    }
}
