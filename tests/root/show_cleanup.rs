//! `ipmasq show` and `ipmasq cleanup` against the real iptables (both variants): installed,
//! drifted and missing chains, exit codes, JSON, and cleanup that leaves every other rule be.

use super::netns::{scratch_file, Netns};
use std::process::Command;

const CHAIN: &str = "IP-MASQ-AGENT";

both_variants!(
    show_installed_drifted_and_missing,
    cleanup_after_agent_duplicates_and_twice,
    cleanup_keeps_foreign_rules,
);

/// Syncs the default config with the agent, in `variant`.
fn sync(ns: &Netns, variant: &str, extra: &[&str]) {
    let mut args = vec!["agent", "--once", "--config=/nonexistent/ipmasq"];
    let mode = format!("--iptables-mode={variant}");
    args.push(&mode);
    args.extend_from_slice(extra);
    let run = ns.ipmasq(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

fn ours(saved: &str) -> String {
    saved
        .lines()
        .filter(|l| l.contains(CHAIN))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn show_installed_drifted_and_missing(variant: &'static str) {
    let ns = Netns::new("show");
    let mode = format!("--iptables-mode={variant}");

    let run = ns.ipmasq(&["show", &mode]);
    assert_eq!(run.code, 3, "missing chain: {}", run.stdout);
    assert!(
        run.stdout.contains("ip-masq-agent rules are not installed"),
        "{}",
        run.stdout
    );
    let run = ns.ipmasq(&["show", "-o", "json", &mode]);
    assert_eq!(run.code, 3);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["installed"], false);

    sync(&ns, variant, &[]);
    let run = ns.ipmasq(&["show", &mode]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!("backend: iptables-{variant}")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("POSTROUTING jumps here at rule 1 of 1"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("192.168.0.0/16"), "{}", run.stdout);
    assert!(
        run.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        run.stdout
    );
    eprintln!("ipmasq show ({variant}):\n{}", run.stdout);

    let run = ns.ipmasq(&["show", "-o", "json", &mode]);
    assert_eq!(run.code, 0);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["schemaVersion"], 1);
    assert_eq!(report["chain"], CHAIN);
    let v4 = &report["families"][0];
    assert_eq!(v4["family"], "ipv4");
    assert_eq!(v4["jump"]["copies"], 1);
    assert_eq!(v4["jump"]["positions"], serde_json::json!([1]));
    let rules = v4["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 5);
    assert_eq!(rules[1]["action"], "RETURN");
    assert_eq!(rules[1]["destination"], "10.0.0.0/8");
    assert_eq!(rules[4]["action"], "MASQUERADE");
    assert_eq!(rules[4]["randomFully"], true);
    assert_eq!(rules[4]["packets"], 0);
    eprintln!("ipmasq show -o json ({variant}):\n{}", run.stdout);

    let run = ns.ipmasq(&["show", "-o", "yaml", &mode]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("schemaVersion: 1"), "{}", run.stdout);

    let config = scratch_file("show-config", "");
    let config_flag = format!("--config={}", config.display());
    let run = ns.ipmasq(&["show", &mode, &config_flag]);
    assert_eq!(run.code, 0, "in sync: {}", run.stdout);
    assert!(run.stdout.contains("in sync"), "{}", run.stdout);

    // Drift: a rule deleted, a foreign one added, a duplicate jump.
    let jump = ours(&ns.save(variant, false, Some("nat")))
        .lines()
        .find(|l| l.starts_with("-A POSTROUTING"))
        .unwrap()
        .replacen("-A POSTROUTING ", "", 1);
    ns.restore(
        variant,
        false,
        &format!("*nat\n-D {CHAIN} 3\n-A {CHAIN} -d 1.2.3.4/32 -j ACCEPT\n-A POSTROUTING {jump}\nCOMMIT\n"),
    );
    let run = ns.ipmasq(&["show", &mode, &config_flag]);
    assert_eq!(run.code, 1, "drifted: {}", run.stdout);
    for expected in [
        "drifted (3 differences)",
        "missing-rule: rule 3 missing: RETURN 172.16.0.0/12",
        "extra-rule: rule 5 not planned: ACCEPT 1.2.3.4/32",
        "jump-duplicated",
    ] {
        assert!(run.stdout.contains(expected), "{expected}:\n{}", run.stdout);
    }
    let run = ns.ipmasq(&["show", "-o", "json", &mode, &config_flag]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["sync"]["inSync"], false);
    assert_eq!(report["sync"]["differences"].as_array().unwrap().len(), 3);

    // An invalid --config is a usage error with the config's diagnostics.
    std::fs::write(&config, "nonMasqueradeCIDRs: [10.1.2.3/8]\n").unwrap();
    let run = ns.ipmasq(&["show", &mode, &config_flag]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cidr-not-aligned"), "{}", run.stderr);
    let _ = std::fs::remove_file(config);
}

fn cleanup_after_agent_duplicates_and_twice(variant: &'static str) {
    let ns = Netns::new("cleanup");
    sync(&ns, variant, &["--enable-ipv6"]);
    // A hand-made duplicate jump.
    let tool = format!("iptables-{variant}");
    ns.sh(&format!("{tool} -t nat -A POSTROUTING -j {CHAIN}"));
    let run = ns.ipmasq(&["cleanup", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "iptables-{variant} ipv4: would remove 2 jumps from POSTROUTING and chain {CHAIN}"
        )),
        "{}",
        run.stdout
    );
    assert_ne!(
        ours(&ns.save(variant, false, Some("nat"))),
        "",
        "dry run removed nothing"
    );

    let run = ns.ipmasq(&["cleanup"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains(&format!("iptables-{variant} ipv6: removed 1 jump")),
        "{}",
        run.stdout
    );
    assert_eq!(ours(&ns.save(variant, false, Some("nat"))), "");
    assert_eq!(ours(&ns.save(variant, true, Some("nat"))), "");

    let run = ns.ipmasq(&["cleanup"]);
    assert_eq!(run.code, 0, "idempotent: {}", run.stderr);
    assert!(run.stdout.contains("nothing to remove"), "{}", run.stdout);
    let run = ns.ipmasq(&["cleanup", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["removedAnything"], false);
}

fn cleanup_keeps_foreign_rules(variant: &'static str) {
    let ns = Netns::new("cleanforeign");
    ns.restore(
        variant,
        false,
        "*nat\n:KUBE-POSTROUTING - [0:0]\n-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\nCOMMIT\n*filter\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n",
    );
    let before = ns.save(variant, false, None);
    sync(&ns, variant, &[]);
    ns.sh(&format!(
        "iptables-{variant} -t nat -A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE"
    ));
    let with_later_rule = ns.save(variant, false, None);
    let run = ns.ipmasq(&["cleanup"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let after = ns.save(variant, false, None);
    let expected: String = with_later_rule
        .lines()
        .filter(|l| !l.contains(CHAIN))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(after, expected, "only our lines are gone");
    assert!(after.contains("-A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE"));
    assert!(
        before.lines().all(|l| after.contains(l)),
        "every earlier rule survives"
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn show_without_permission_says_so() {
    let ns = Netns::new("perm");
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(crate::util::binary())
        .args(["show", "--iptables-mode=nft"])
        .output()
        .expect("run setpriv");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("needs CAP_NET_ADMIN (try sudo)"),
        "{stderr}"
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn show_and_cleanup_without_iptables_say_so() {
    let ns = Netns::new("notools");
    let empty = std::env::temp_dir().join(format!("ipmasq-empty-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    for (applet, code) in [("show", 5), ("cleanup", 5)] {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "env",
                &format!("PATH={}", empty.display()),
            ])
            .arg(crate::util::binary())
            .args([applet, "--iptables-mode=nft"])
            .output()
            .expect("run without iptables");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{applet}: {stderr}");
        assert!(stderr.contains("install iptables"), "{applet}: {stderr}");
    }
    let _ = std::fs::remove_dir(empty);
}

/// The command `show` suggests for a stale copy in another backend, run as printed: it must
/// parse and remove that copy (before, it read `--iptables-mode=nftables`, which clap
/// rejects). An nftables table seen from iptables, and an iptables-legacy chain seen from
/// iptables-nft.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_suggested_cleanup_command_parses_and_removes_the_stale_copy() {
    let cases: [(&str, &str, &str); 2] = [
        (
            "--backend=nftables",
            "--iptables-mode=nft",
            "--backend=nftables",
        ),
        (
            "--iptables-mode=legacy",
            "--iptables-mode=nft",
            "--iptables-mode=legacy",
        ),
    ];
    for (stale, current, flag) in cases {
        let ns = Netns::new("suggest");
        // Unheld: nft 1.0.6 lists an orphaned held table's `persist` as an empty `flags` line,
        // which it cannot read back, and the copy below goes through `nft list` and `nft -f`.
        let run = ns.ipmasq(&[
            "agent",
            "--once",
            "--config=/nonexistent/x",
            "--nftables-table-owner=false",
            stale,
        ]);
        assert_eq!(run.code, 0, "{stale}: {}", run.stderr);
        // An agent of another backend removes our table at its first sync: keep a copy to
        // put back, as a node with two agents would have it.
        let table = ns.exec("nft", &["list", "table", "ip", "ipmasq"]).stdout;
        let run = ns.ipmasq(&["agent", "--once", "--config=/nonexistent/x", current]);
        assert_eq!(run.code, 0, "{current}: {}", run.stderr);
        if stale == "--backend=nftables" {
            let copy = super::netns::scratch_file("stale-table", &table);
            ns.sh(&format!("nft -f {}", copy.display()));
            let _ = std::fs::remove_file(copy);
        }
        let run = ns.ipmasq(&["show", current, "--color=never"]);
        let line = run
            .stdout
            .lines()
            .find(|l| l.contains("remove the stale copy with"))
            .unwrap_or_else(|| panic!("no suggestion: {}", run.stdout));
        let command = line
            .split('`')
            .nth(1)
            .unwrap_or_else(|| panic!("no command in: {line}"));
        assert_eq!(
            command,
            format!("ipmasq cleanup --all-variants=false {flag}"),
            "{line}"
        );
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        let cleaned = ns.ipmasq(&args);
        assert_eq!(
            cleaned.code, 0,
            "{command}: {}{}",
            cleaned.stdout, cleaned.stderr
        );
        // Each backend's removal in its own words.
        let said = if flag == "--backend=nftables" {
            "nftables ipv4: removed table ip ipmasq\n"
        } else {
            "iptables-legacy ipv4: removed 1 jump from POSTROUTING and chain IP-MASQ-AGENT\n"
        };
        assert!(cleaned.stdout.contains(said), "{}", cleaned.stdout);
        let again = ns.ipmasq(&["show", current, "--color=never"]);
        assert!(
            !again.stdout.contains("remove the stale copy"),
            "{command} left it: {}",
            again.stdout
        );
        assert_eq!(again.code, 0, "ours stays: {}", again.stdout);
    }
}
