//! Conntrack health against the kernel's own tool: a node namespace's conntrack table filled
//! past `nf_conntrack_max` with UDP flows (the kernel then evicts unreplied entries,
//! `early_drop`), and the agent's `/metrics` and `show -o json` agree with `conntrack -S` and
//! `conntrack -C`, counter by counter, with the table's limit, and `show` warns.

use super::health::get;
use super::netns::{wait_until, Netns, PYTHON};
use crate::util::Scratch;
use std::collections::BTreeMap;
use std::time::Duration;

/// `conntrack -S`'s counters summed over the CPUs: `name=value` fields after `cpu=N`.
fn conntrack_s(ns: &Netns) -> BTreeMap<String, u64> {
    let run = ns.exec("conntrack", &["-S"]);
    assert_eq!(run.code, 0, "conntrack -S: {}", run.stderr);
    let mut sums = BTreeMap::new();
    for field in run.stdout.split_whitespace() {
        let Some((name, value)) = field.split_once('=') else {
            continue;
        };
        if name == "cpu" {
            continue;
        }
        *sums.entry(name.to_string()).or_insert(0) += value.parse::<u64>().unwrap();
    }
    assert!(sums.contains_key("early_drop"), "{}", run.stdout);
    sums
}

fn conntrack_count(ns: &Netns) -> u64 {
    let run = ns.exec("conntrack", &["-C"]);
    assert_eq!(run.code, 0, "conntrack -C: {}", run.stderr);
    run.stdout.trim().parse().unwrap()
}

/// The `ipmasq_conntrack_*` samples of a scrape: `stat` label value (or the gauge's name) →
/// value.
fn scraped(ns: &Netns) -> BTreeMap<String, u64> {
    let (code, body) = get(ns, "/metrics");
    assert_eq!(code, 200, "{body}");
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let key = if let Some(stat) = name.strip_prefix("ipmasq_conntrack_stat_total{stat=\"") {
            stat.trim_end_matches("\"}").to_string()
        } else if name.starts_with("ipmasq_conntrack_table_") {
            name.to_string()
        } else {
            continue;
        };
        out.insert(key, value.parse::<f64>().unwrap() as u64);
    }
    out
}

/// Sends `flows` UDP datagrams, each a flow of its own (127.0.0.1 to 127.0.0.200, every
/// port), from one socket: each leaves an unreplied conntrack entry.
fn open_udp_flows(ns: &Netns, flows: u64) {
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         sent = 0\n\
         for host in range(1, 201):\n\
         \x20   for port in range(1, 65536):\n\
         \x20       if sent == {flows}:\n\
         \x20           raise SystemExit(0)\n\
         \x20       try:\n\
         \x20           s.sendto(b'x', ('127.0.0.%d' % host, port))\n\
         \x20       except OSError:\n\
         \x20           pass\n\
         \x20       sent += 1\n"
    );
    let run = ns.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn metrics_and_show_agree_with_conntrack_s_over_a_full_table() {
    let mut ns = Netns::new("cthealth");
    let dir = Scratch::new("conntrack-health");
    let limit: u64 = ns
        .sh("cat /proc/sys/net/netfilter/nf_conntrack_max")
        .trim()
        .parse()
        .unwrap();
    if limit > 2_000_000 {
        eprintln!(
            "SKIPPED metrics_and_show_agree_with_conntrack_s_over_a_full_table: nf_conntrack_max is {limit}, too many flows to fill in a test"
        );
        return;
    }
    // The scrapes' own connections (over lo, port 9723) stay out of the table they measure.
    ns.sh("nft add table ip scrape && \
         nft add chain ip scrape out '{ type filter hook output priority raw; }' && \
         nft add chain ip scrape pre '{ type filter hook prerouting priority raw; }' && \
         nft add rule ip scrape out tcp dport 9723 notrack && \
         nft add rule ip scrape out tcp sport 9723 notrack && \
         nft add rule ip scrape pre tcp dport 9723 notrack && \
         nft add rule ip scrape pre tcp sport 9723 notrack");
    let config = dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let config_flag = format!("--config={}", config.display());
    let addr_flag = format!("--metrics-addr={}", super::health::ADDR);
    let log = dir.path.join("agent.log");
    ns.spawn_ipmasq(
        &["agent", "--backend=nftables", &config_flag, &addr_flag],
        &log,
    );
    // The agent's nat chain turns conntrack on in the namespace.
    assert!(
        wait_until(Duration::from_secs(20), || scraped(&ns)
            .contains_key("ipmasq_conntrack_table_entries")),
        "no conntrack figures: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(scraped(&ns)["ipmasq_conntrack_table_limit"], limit);

    open_udp_flows(&ns, limit + 5_000);

    let before = conntrack_count(&ns);
    let kernel = conntrack_s(&ns);
    // Scrapes less than a second apart share one read: wait for one made after the flows.
    let mut metrics = scraped(&ns);
    wait_until(Duration::from_secs(10), || {
        metrics = scraped(&ns);
        kernel
            .iter()
            .all(|(name, value)| metrics.get(name) == Some(value))
    });
    let shown = ns.ipmasq(&["show", "--backend=nftables", "-o", "json"]);
    let text = ns.ipmasq(&["show", "--backend=nftables"]);
    let after_kernel = conntrack_s(&ns);
    let after = conntrack_count(&ns);
    assert_eq!(
        kernel, after_kernel,
        "the counters moved while read: no test traffic should"
    );
    assert!(
        kernel["early_drop"] >= 4_000,
        "a full table evicts unreplied entries: {kernel:?}"
    );
    let report: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    let conntrack = &report["conntrack"];
    for (name, value) in &kernel {
        assert_eq!(
            metrics.get(name),
            Some(value),
            "/metrics' {name}: {metrics:?}"
        );
        assert_eq!(
            conntrack["counters"][name].as_u64(),
            Some(*value),
            "show's {name}: {conntrack}"
        );
    }
    for entries in [
        metrics["ipmasq_conntrack_table_entries"],
        conntrack["entries"].as_u64().unwrap(),
    ] {
        assert!(
            (after..=before).contains(&entries),
            "{entries} entries, conntrack -C said {before} then {after}"
        );
    }
    assert!(
        before + 10 >= limit,
        "{before} entries of {limit}: not full"
    );
    assert_eq!(conntrack["maxEntries"].as_u64(), Some(limit));
    assert!(conntrack["fill"].as_f64().unwrap() > 0.99, "{conntrack}");
    let line = text
        .stdout
        .lines()
        .find(|l| l.starts_with("conntrack:"))
        .unwrap_or_else(|| panic!("no conntrack line:\n{}", text.stdout));
    assert!(
        line.contains(&format!("of {limit} entries")) && line.contains("% full"),
        "{line}"
    );
    eprintln!(
        "..conntrack -S early_drop {} drop {} insert_failed {}; {line}",
        kernel["early_drop"], kernel["drop"], kernel["insert_failed"]
    );
}
