//! The step-9 extensions on a real node: a `--config-dir` of two ConfigMap-style files
//! (kubelet's AtomicWriter layout) merged and applied within a second of either change, an
//! invalid file keeping the last good merge; and `explain` against the live rules, including
//! a disagreement made by hand.

use super::netns::{scratch_file, wait_until, Netns};
use crate::util::Scratch;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(20);
const CHAIN: &str = "IP-MASQ-AGENT";

/// Writes a projected volume the way kubelet does: every file into a new timestamped
/// directory, `..data` swapped to it in one rename, and one symlink per file through `..data`.
fn projected_volume(dir: &Path, version: u32, files: &[(&str, &str)]) {
    let data = dir.join(format!("..2026_11_22_09_00_{version:02}.{version}"));
    std::fs::create_dir_all(&data).unwrap();
    for (name, contents) in files {
        std::fs::write(data.join(name), contents).unwrap();
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(data.file_name().unwrap(), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for (name, _) in files {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).unwrap();
        }
    }
}

/// The destinations of our RETURN rules in the IPv4 nat table, in order.
fn returns(ns: &Netns) -> Vec<String> {
    ns.save("nft", false, Some("nat"))
        .lines()
        .filter(|l| l.starts_with(&format!("-A {CHAIN} -d ")) && l.ends_with("-j RETURN"))
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
        .collect()
}

fn destinations(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn merged_config_dir_applies_either_change_within_a_second() {
    let mut ns = Netns::new("merge");
    let scratch = Scratch::new("merge-volume");
    let volume = scratch.path.join("config");
    std::fs::create_dir_all(&volume).unwrap();
    // The cloud's file and the user's file; an hour-long resync, so only the watch can
    // explain a prompt apply.
    let cloud_v1 = "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n";
    let user_v1 = "nonMasqueradeCIDRs: [172.16.0.0/12]\n";
    projected_volume(
        &volume,
        1,
        &[("ip-masq-agent", cloud_v1), ("ip-masq-agent-user", user_v1)],
    );
    let log = scratch.path.join("agent.log");
    let dir_arg = format!("--config-dir={}", volume.display());
    let pid = ns.spawn_ipmasq(&["agent", "--iptables-mode=nft", &dir_arg, "--v=2"], &log);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(PATIENCE, || returns(&ns)
            == destinations(&["169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12"])),
        "first merge not applied: {:?}\n{}",
        returns(&ns),
        read_log()
    );
    let mut took = Vec::new();
    // The user's ConfigMap changes, then the cloud's: each applied within a second.
    let user_v2 = "nonMasqueradeCIDRs: [172.16.0.0/12, 192.168.0.0/16]\nforceMasqueradeCIDRs: [10.8.0.0/16]\n";
    let cloud_v3 = "nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\nresyncInterval: 1h\n";
    for (version, cloud, user, want) in [
        (
            2,
            cloud_v1,
            user_v2,
            vec![
                "169.254.0.0/16",
                "192.168.0.0/16",
                "172.16.0.0/12",
                "10.0.0.0/8",
            ],
        ),
        (
            3,
            cloud_v3,
            user_v2,
            vec![
                "169.254.0.0/16",
                "192.168.0.0/16",
                "172.16.0.0/12",
                "100.64.0.0/10",
                "10.0.0.0/8",
            ],
        ),
    ] {
        let started = Instant::now();
        projected_volume(
            &volume,
            version,
            &[("ip-masq-agent", cloud), ("ip-masq-agent-user", user)],
        );
        assert!(
            wait_until(PATIENCE, || returns(&ns) == destinations(&want)),
            "update {version} not applied: {:?}\n{}",
            returns(&ns),
            read_log()
        );
        took.push(started.elapsed());
    }
    eprintln!("merged updates applied after {took:?}");
    assert!(took.iter().all(|t| *t < Duration::from_secs(1)), "{took:?}");
    let saved = ns.save("nft", false, Some("nat"));
    assert!(
        saved.contains(&format!("-A {CHAIN} -d 10.8.0.0/16 ")),
        "{saved}"
    );
    // An invalid user file: the merge is rejected, the error names the file, line and
    // column, and the last good rules stay.
    let before = ns.save("nft", false, Some("nat"));
    projected_volume(
        &volume,
        4,
        &[
            ("ip-masq-agent", cloud_v3),
            (
                "ip-masq-agent-user",
                "nonMasqueradeCIDRs:\n  - 10.1.2.3/8\n",
            ),
        ],
    );
    assert!(wait_until(PATIENCE, || read_log().contains("invalid config rejected")));
    let text = read_log();
    assert!(
        text.contains(&format!(
            "{}/ip-masq-agent-user:2:5: [cidr-not-aligned]",
            volume.display()
        )),
        "{text}"
    );
    // Drift is still healed with the last good merge.
    ns.sh(&format!("iptables-nft -t nat -F {CHAIN}"));
    super::netns::kill(pid, "HUP");
    assert!(wait_until(PATIENCE, || ns.save("nft", false, Some("nat")) == before));
}

fn explain_json(ns: &Netns, args: &[&str]) -> (i32, Value) {
    let mut full = vec!["explain", "-o", "json"];
    full.extend_from_slice(args);
    let run = ns.ipmasq(&full);
    let value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", run.stdout, run.stderr));
    (run.code, value)
}

/// `explain` reads the live rules of the backend in use and agrees with the config; after a
/// rule (iptables) or a set element (nftables) is removed by hand, it reports the
/// disagreement with exit status 11.
fn explain_against_live_rules(backend: &str) {
    let ns = Netns::new("explain");
    let config = scratch_file(
        "explain-config",
        "nonMasqueradeCIDRs: [10.0.0.0/8, 10.8.1.0/24]\nforceMasqueradeCIDRs: [10.8.0.0/16]\n",
    );
    let config_arg = format!("--config={}", config.display());
    let run = ns.ipmasq(&["agent", "--once", backend, &config_arg]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (code, forced) = explain_json(&ns, &["10.8.3.4", backend, &config_arg]);
    assert_eq!(code, 0, "{forced}");
    assert_eq!(forced["agree"], true, "{forced}");
    assert_eq!(forced["live"]["action"], "masquerade");
    let (code, nested) = explain_json(&ns, &["10.8.1.9", backend, &config_arg]);
    assert_eq!(code, 10, "{nested}");
    assert_eq!(nested["live"]["action"], "keep-source", "{nested}");
    assert!(
        nested["live"]["rule"]["text"]
            .as_str()
            .unwrap()
            .contains("10.8.1.0/24"),
        "{nested}"
    );
    let (code, outside) = explain_json(&ns, &["8.8.8.8", backend, &config_arg]);
    assert_eq!(code, 0, "{outside}");
    // The hand-made disagreement.
    if backend.contains("nftables") {
        ns.sh("nft delete element ip ipmasq nomasq '{ 10.8.1.0/24 }'");
    } else {
        let rule = nested["live"]["rule"]["number"].as_u64().unwrap();
        ns.sh(&format!("iptables-nft -t nat -D {CHAIN} {rule}"));
    }
    let (code, report) = explain_json(&ns, &["10.8.1.9", backend, &config_arg]);
    assert_eq!(code, 11, "{report}");
    assert_eq!(report["outcome"], "disagreement");
    assert_eq!(report["config"]["action"], "keep-source");
    assert_eq!(report["live"]["action"], "masquerade");
    let text = ns.ipmasq(&["explain", "10.8.1.9", backend, &config_arg, "--color=never"]);
    assert_eq!(text.code, 11);
    assert!(text.stdout.contains("DISAGREEMENT"), "{}", text.stdout);
    eprintln!(
        "explain after the hand-made disagreement ({backend}):\n{}",
        text.stdout
    );
    let _ = std::fs::remove_file(&config);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explain_against_live_rules_iptables() {
    explain_against_live_rules("--iptables-mode=nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explain_against_live_rules_nftables() {
    explain_against_live_rules("--backend=nftables");
}

/// A `--config-dir` merges as ip-masq-agent-v2 does: files that list no CIDRs leave the list
/// empty (only link-local is kept), each file is limited to 64 CIDRs but the merged list is
/// not (two files of 40 install 80 RETURN rules); and a `--to-ports` above 65535, which
/// upstream hands to iptables-restore at every resync (its chain stays empty), stops the agent
/// at start, saying so, before it writes anything.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn merged_config_dir_follows_ip_masq_agent_v2() {
    let ns = Netns::new("v2-merge");
    let scratch = Scratch::new("v2-merge-volume");
    let volume = scratch.path.join("config");
    std::fs::create_dir_all(&volume).unwrap();
    let dir_arg = format!("--config-dir={}", volume.display());
    let once = || ns.ipmasq(&["agent", "--once", "--iptables-mode=nft", &dir_arg]);
    projected_volume(
        &volume,
        1,
        &[
            ("ip-masq-agent-cloud", "masqLinkLocal: false\n"),
            ("ip-masq-agent-user", "resyncInterval: 1h\n"),
        ],
    );
    let run = once();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        returns(&ns),
        destinations(&["169.254.0.0/16"]),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("[empty-cidr-list]"), "{}", run.stderr);
    let forty = |second: u8| {
        let list: Vec<String> = (0..40).map(|i| format!("10.{second}.{i}.0/24")).collect();
        format!("nonMasqueradeCIDRs: [{}]\n", list.join(", "))
    };
    let (cloud, user) = (forty(1), forty(2));
    projected_volume(
        &volume,
        2,
        &[
            ("ip-masq-agent-cloud", &cloud),
            ("ip-masq-agent-user", &user),
        ],
    );
    let run = once();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(returns(&ns).len(), 81, "link-local and 80 merged CIDRs");
    let cleanup = ns.ipmasq(&["cleanup", "--iptables-mode=nft"]);
    assert_eq!(cleanup.code, 0, "{}", cleanup.stderr);
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        "--to-ports=1024-70000",
        &dir_arg,
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("port 70000 is outside 1-65535")
            && run.stderr.contains("upstream ip-masq-agent"),
        "{}",
        run.stderr
    );
    assert!(returns(&ns).is_empty(), "nothing written");
}
