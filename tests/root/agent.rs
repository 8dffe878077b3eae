//! The agent against the real iptables (nft and legacy variants) in throwaway namespaces:
//! the exact saved rules, the config edge cases, drift healing, counters, duplicate jumps,
//! foreign rules, the ConfigMap `..data` swap, signals, `--once` and `--dry-run`.

use super::netns::{kill, wait_until, Netns};
use crate::util::Scratch;
use std::path::PathBuf;
use std::time::Duration;

const CHAIN: &str = "IP-MASQ-AGENT";
/// Generous bound for anything the agent does "within one resync"; tests poll, never sleep.
const PATIENCE: Duration = Duration::from_secs(20);

/// `iptables-save -t nat` of our chain after a default sync: the compatibility contract.
const DEFAULT_SAVED: &str = "\
:IP-MASQ-AGENT - [0:0]
-A POSTROUTING -m comment --comment \"ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain\" -m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT
-A IP-MASQ-AGENT -d 169.254.0.0/16 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -d 10.0.0.0/8 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -d 172.16.0.0/12 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -d 192.168.0.0/16 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --random-fully
";

/// Rules a node already has: kube-proxy- and CNI-like, in nat and filter.
const FOREIGN_V4: &str = "\
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:CNI-5f0e3a - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A POSTROUTING -s 10.244.1.0/24 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"5f0e3a\\\"\" -j CNI-5f0e3a
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-MARK-MASQ
-A CNI-5f0e3a -d 10.244.1.0/24 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"5f0e3a\\\"\" -j ACCEPT
-A CNI-5f0e3a ! -d 224.0.0.0/4 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"5f0e3a\\\"\" -j MASQUERADE
COMMIT
*filter
:KUBE-FIREWALL - [0:0]
-A INPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -m comment --comment \"kubernetes firewall for dropping marked packets\" -m mark --mark 0x8000/0x8000 -j DROP
COMMIT
";

/// A node namespace with a config directory, driving one iptables variant.
struct IptablesNode {
    ns: Netns,
    variant: &'static str,
    dir: Scratch,
}

impl IptablesNode {
    fn new(variant: &'static str, tag: &str) -> IptablesNode {
        IptablesNode {
            ns: Netns::new(tag),
            variant,
            dir: Scratch::new(&format!("{tag}-{variant}")),
        }
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path.join("config")
    }

    fn write_config(&self, text: &str) {
        std::fs::write(self.config_path(), text).expect("write config");
    }

    fn agent_args<'a>(&'a self, config: &'a str, extra: &[&'a str]) -> Vec<String> {
        let mut args = vec![
            "agent".to_string(),
            format!("--iptables-mode={}", self.variant),
            format!("--config={config}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    fn once(&self, extra: &[&str]) -> crate::util::Run {
        let config = self.config_path().display().to_string();
        let args = self.agent_args(&config, extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut full = refs.clone();
        full.insert(1, "--once");
        self.ns.ipmasq(&full)
    }

    /// `agent --once` in `mode` with `tools` first on PATH (fakes that wrap or count the
    /// iptables programs).
    fn once_with_tools(&self, tools: &std::path::Path, mode: &str) -> std::process::Output {
        let config = self.config_path().display().to_string();
        self.ns
            .ipmasq_with_path(
                tools,
                &[
                    "agent",
                    "--once",
                    &format!("--iptables-mode={mode}"),
                    &format!("--config={config}"),
                ],
            )
            .output()
            .unwrap()
    }

    fn spawn(&mut self, extra: &[&str]) -> (u32, PathBuf) {
        let config = self.config_path().display().to_string();
        let args = self.agent_args(&config, extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = self.dir.path.join("agent.log");
        let pid = self.ns.spawn_ipmasq(&refs, &log);
        (pid, log)
    }

    fn nat(&self, v6: bool) -> String {
        self.ns.save(self.variant, v6, Some("nat"))
    }

    /// Our lines of the nat table: the chain declaration, the jumps and the chain's rules.
    fn ours(&self, v6: bool) -> String {
        ours(&self.nat(v6))
    }

    /// The destinations of our RETURN rules, in order.
    fn returns(&self, v6: bool) -> Vec<String> {
        self.nat(v6)
            .lines()
            .filter(|l| l.starts_with(&format!("-A {CHAIN} -d ")))
            .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
            .collect()
    }

    /// Everything but our lines, all tables.
    fn foreign(&self) -> String {
        not_ours(&self.ns.save(self.variant, false, None))
    }
}

fn is_ours(line: &str) -> bool {
    line.starts_with(&format!(":{CHAIN} "))
        || line.starts_with(&format!("-A {CHAIN} "))
        || (line.starts_with("-A POSTROUTING ") && line.ends_with(&format!("-j {CHAIN}")))
}

fn ours(saved: &str) -> String {
    saved
        .lines()
        .filter(|l| is_ours(l))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn not_ours(saved: &str) -> String {
    saved
        .lines()
        .filter(|l| !is_ours(l))
        .map(|l| format!("{l}\n"))
        .collect()
}

both_variants!(
    default_sync_writes_exactly_upstreams_rules,
    config_edge_cases_through_the_agent,
    ipv6_chain_with_enable_ipv6,
    in_sync_resync_writes_nothing_and_keeps_counters,
    duplicate_and_stale_jumps_leave_exactly_one,
    foreign_rules_stay_byte_for_byte,
    drift_is_healed_within_one_resync,
    configmap_data_swap_applies_without_waiting_for_the_timer,
    enable_ipv6_from_the_configmap_alone,
    invalid_config_keeps_the_last_good_rules,
    sigterm_keeps_rules_and_cleanup_on_exit_removes_them,
    dry_run_prints_and_touches_nothing,
    to_ports_and_random_fully_flags_round_trip,
);

fn default_sync_writes_exactly_upstreams_rules(variant: &'static str) {
    let node = IptablesNode::new(variant, "default");
    let run = node.once(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(node.ours(false), DEFAULT_SAVED);
    assert!(run.stderr.contains("rules installed"), "{}", run.stderr);
    // ip6tables is not touched without --enable-ipv6.
    assert_eq!(node.ours(true), "");
}

fn config_edge_cases_through_the_agent(variant: &'static str) {
    let rfc1918 = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];
    let ll = "169.254.0.0/16";
    /// (config, extra flags, expected RETURN destinations or None when rejected)
    type Case<'a> = (&'a str, &'a [&'a str], Option<Vec<&'a str>>);
    let cases: Vec<Case> = vec![
        ("", &[], Some([&[ll][..], &rfc1918].concat())),
        ("nonMasqueradeCIDRs: []\n", &[], Some(vec![ll])),
        ("nonMasqueradeCIDRs: null\n", &[], Some(vec![ll])),
        ("masqLinkLocal: true\n", &[], Some(rfc1918.to_vec())),
        ("MASQLINKLOCAL: yes\n", &[], Some(rfc1918.to_vec())),
        (
            "nonMasqueradeCIDRs: [10.0.0.0/8, 10.0.0.0/8, 192.168.0.0/16]\n",
            &[],
            Some(vec![ll, "10.0.0.0/8", "10.0.0.0/8", "192.168.0.0/16"]),
        ),
        (
            "{\"nonMasqueradeCIDRs\": [\"100.64.0.0/10\"], \"masqLinkLocal\": false}",
            &[],
            Some(vec![ll, "100.64.0.0/10"]),
        ),
        (
            "nonMasqueradeCIDRs: [10.0.0.0/8]\nbogusKey: 1\n---\nnonMasqueradeCIDRs: [1.0.0.0/8]\n",
            &[],
            Some(vec![ll, "10.0.0.0/8"]),
        ),
        (
            "",
            &["--nomasq-all-reserved-ranges"],
            Some(vec![
                ll,
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "100.64.0.0/10",
                "192.0.0.0/24",
                "192.0.2.0/24",
                "192.88.99.0/24",
                "198.18.0.0/15",
                "198.51.100.0/24",
                "203.0.113.0/24",
                "240.0.0.0/4",
            ]),
        ),
        (
            "nonMasqueradeCIDRs: [10.0.0.0/8]\n",
            &["-nomasq-all-reserved-ranges"],
            Some(vec![ll, "10.0.0.0/8"]),
        ),
        ("nonMasqueradeCIDRs: [10.1.2.3/16]\n", &[], None),
        ("nonMasqueradeCIDRs: [010.0.0.0/8]\n", &[], None),
        ("nonMasqueradeCIDRs: ['fd00::/8']\n", &[], None),
        ("cidrLimit: 2\n", &[], None),
        ("resyncInterval: 0s\n", &[], None),
        ("resyncInterval: 60\n", &[], None),
        ("masqLinkLocal: \"true\"\n", &[], None),
    ];
    for (config, flags, expected) in cases {
        let node = IptablesNode::new(variant, "edge");
        node.write_config(config);
        let run = node.once(flags);
        match expected {
            Some(want) => {
                assert_eq!(run.code, 0, "{config:?} {flags:?}: {}", run.stderr);
                assert_eq!(node.returns(false), want, "{config:?} {flags:?}");
            }
            None => {
                assert_eq!(run.code, 1, "{config:?} must be rejected: {}", run.stderr);
                assert!(
                    run.stderr.contains("invalid config rejected"),
                    "{}",
                    run.stderr
                );
                assert_eq!(node.ours(false), "", "{config:?}: nothing installed");
            }
        }
    }
}

fn ipv6_chain_with_enable_ipv6(variant: &'static str) {
    let node = IptablesNode::new(variant, "v6");
    node.write_config("nonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8', '2001:db8::/32']\n");
    let run = node.once(&["--enable-ipv6"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(node.returns(false), ["169.254.0.0/16", "10.0.0.0/8"]);
    assert_eq!(
        node.returns(true),
        ["fe80::/10", "fd00::/8", "2001:db8::/32"]
    );
    assert!(node.ours(true).contains("-j IP-MASQ-AGENT\n"));

    node.write_config("nonMasqueradeCIDRs: ['fd00::/8']\nmasqLinkLocalIPv6: true\n");
    assert_eq!(node.once(&["-enable-ipv6"]).code, 0);
    assert_eq!(node.returns(true), ["fd00::/8"]);
    assert_eq!(node.returns(false), ["169.254.0.0/16"]);
}

fn in_sync_resync_writes_nothing_and_keeps_counters(variant: &'static str) {
    let node = IptablesNode::new(variant, "counters");
    assert_eq!(node.once(&[]).code, 0);
    let tool = format!("iptables-{variant}");
    node.ns.sh(&format!(
        "{tool} -t nat -R {CHAIN} 2 -c 7 700 -d 10.0.0.0/8 -m comment --comment 'ip-masq-agent: local traffic is not subject to MASQUERADE' -j RETURN"
    ));
    let run = node.once(&[]);
    assert_eq!(run.code, 0);
    assert!(!run.stderr.contains("repaired"), "{}", run.stderr);
    let counted = node
        .ns
        .exec(&format!("iptables-{variant}-save"), &["-c", "-t", "nat"]);
    assert!(
        counted
            .stdout
            .contains("[7:700] -A IP-MASQ-AGENT -d 10.0.0.0/8"),
        "{}",
        counted.stdout
    );
}

fn duplicate_and_stale_jumps_leave_exactly_one(variant: &'static str) {
    let node = IptablesNode::new(variant, "dupes");
    let canonical = DEFAULT_SAVED.lines().nth(1).unwrap();
    // v2.10.0-v2.12.1 wrote the comment with literal quotes inside it.
    let stale = canonical.replace(
        "--comment \"ip-masq-agent: ensure",
        "--comment \"\\\"ip-masq-agent: ensure",
    );
    let stale = stale.replace(" chain\" -m addrtype", " chain\\\"\" -m addrtype");
    node.ns.restore(
        variant,
        false,
        &format!("*nat\n:{CHAIN} - [0:0]\n{canonical}\n{stale}\n{canonical}\nCOMMIT\n"),
    );
    assert_eq!(node.ours(false).matches("-A POSTROUTING").count(), 3);
    let run = node.once(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("jump_stale"), "{}", run.stderr);
    assert_eq!(node.ours(false), DEFAULT_SAVED);
}

fn foreign_rules_stay_byte_for_byte(variant: &'static str) {
    let mut node = IptablesNode::new(variant, "foreign");
    node.ns.restore(variant, false, FOREIGN_V4);
    let before = node.foreign();
    assert!(before.contains("KUBE-POSTROUTING"));
    node.write_config("nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 200ms\n");
    assert_eq!(node.once(&[]).code, 0);
    assert_eq!(node.foreign(), before, "after the first sync");
    // Our jump was appended after the existing POSTROUTING rules.
    let nat = node.nat(false);
    let postrouting: Vec<&str> = nat
        .lines()
        .filter(|l| l.starts_with("-A POSTROUTING"))
        .collect();
    assert!(postrouting.last().unwrap().ends_with("-j IP-MASQ-AGENT"));
    // A running agent with rewrites (drift) keeps them intact too.
    let (pid, log) = node.spawn(&["--cleanup-on-exit"]);
    assert!(wait_until(PATIENCE, || std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("config accepted")));
    node.ns.sh(&format!("iptables-{variant} -t nat -F {CHAIN}"));
    assert!(wait_until(PATIENCE, || node.returns(false).len() == 2));
    assert_eq!(node.foreign(), before, "after a drift repair");
    kill(pid, "TERM");
    assert_eq!(node.ns.wait_daemon(pid, PATIENCE), Some(0));
    assert_eq!(node.ours(false), "", "cleanup removed ours");
    assert_eq!(node.foreign(), before, "after exit with cleanup");
}

fn drift_is_healed_within_one_resync(variant: &'static str) {
    let mut node = IptablesNode::new(variant, "drift");
    node.write_config("resyncInterval: 300ms\n");
    let (_pid, log) = node.spawn(&[]);
    assert!(
        wait_until(PATIENCE, || node.ours(false) == DEFAULT_SAVED),
        "first sync"
    );
    let jump = DEFAULT_SAVED
        .lines()
        .nth(1)
        .unwrap()
        .replacen("-A POSTROUTING ", "", 1);
    // Each drift is one atomic change, as another agent on the node would make it.
    let drifts = [
        (
            "foreign rule in our chain",
            format!("*nat\n-I {CHAIN} 1 -d 1.2.3.4/32 -j ACCEPT\nCOMMIT\n"),
        ),
        ("flushed chain", format!("*nat\n:{CHAIN} - [0:0]\nCOMMIT\n")),
        (
            "deleted jump",
            format!("*nat\n-D POSTROUTING {jump}\nCOMMIT\n"),
        ),
        (
            "deleted chain",
            format!("*nat\n-D POSTROUTING {jump}\n:{CHAIN} - [0:0]\n-X {CHAIN}\nCOMMIT\n"),
        ),
    ];
    let repairs = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.matches("rules repaired").count() + text.matches("rules installed").count()
    };
    for (what, script) in drifts {
        let before = repairs();
        node.ns.restore(variant, false, &script);
        assert!(
            wait_until(PATIENCE, || repairs() > before
                && node.ours(false) == DEFAULT_SAVED),
            "{what}: not healed; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let log = std::fs::read_to_string(&log).unwrap();
    for kind in ["rules_differ", "jump_missing", "chain_missing"] {
        assert!(log.contains(kind), "log names {kind}:\n{log}");
    }
}

/// Lays out a directory as kubelet does for a ConfigMap volume: the file is a symlink through
/// `..data`, which an update swaps atomically.
pub(super) fn configmap_dir(dir: &std::path::Path, version: u32, config: &str) {
    let data = dir.join(format!("..2026_11_21_00_00_0{version}.{version}"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("ip-masq-agent"), config).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(data.file_name().unwrap(), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    let link = dir.join("ip-masq-agent");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("..data/ip-masq-agent", &link).unwrap();
    }
}

fn configmap_data_swap_applies_without_waiting_for_the_timer(variant: &'static str) {
    let mut node = IptablesNode::new(variant, "swap");
    let volume = node.dir.path.join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    // An hour-long resync: only the directory watch can explain a prompt reload.
    configmap_dir(
        &volume,
        1,
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    let config = volume.join("ip-masq-agent").display().to_string();
    let args = node.agent_args(&config, &[]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = node.dir.path.join("swap.log");
    node.ns.spawn_ipmasq(&refs, &log);
    assert!(wait_until(PATIENCE, || node.returns(false)
        == ["169.254.0.0/16", "10.0.0.0/8"]));
    for (version, cidr) in [(2, "172.16.0.0/12"), (3, "192.168.0.0/16")] {
        let started = std::time::Instant::now();
        configmap_dir(
            &volume,
            version,
            &format!("nonMasqueradeCIDRs: [{cidr}]\nresyncInterval: 1h\n"),
        );
        assert!(
            wait_until(PATIENCE, || node.returns(false) == ["169.254.0.0/16", cidr]),
            "swap {version} not applied; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        eprintln!(
            "..data swap {version} applied after {:?}",
            started.elapsed()
        );
    }
}

/// `enableIPv6: true` in a swapped ConfigMap turns the IPv6 chain on without a flag or a
/// restart (hour-long resync: the swap alone explains it); swapped back off, the agent
/// removes its IPv6 rules and keeps the IPv4 ones.
fn enable_ipv6_from_the_configmap_alone(variant: &'static str) {
    let mut node = IptablesNode::new(variant, "v6file");
    let volume = node.dir.path.join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    let v4_only = "nonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8']\nresyncInterval: 1h\n";
    configmap_dir(
        &volume,
        1,
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    let config = volume.join("ip-masq-agent").display().to_string();
    let args = node.agent_args(&config, &["--v=2"]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = node.dir.path.join("v6file.log");
    node.ns.spawn_ipmasq(&refs, &log);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(wait_until(PATIENCE, || node.returns(false)
        == ["169.254.0.0/16", "10.0.0.0/8"]));
    assert_eq!(node.ours(true), "", "no IPv6 rules before the file asks");
    // IPv6 CIDRs without enableIPv6: rejected, the last good rules stay.
    configmap_dir(&volume, 2, v4_only);
    assert!(
        wait_until(PATIENCE, || text().contains("ipv6-not-enabled")),
        "{}",
        text()
    );
    assert_eq!(node.ours(true), "");
    configmap_dir(&volume, 3, &format!("enableIPv6: true\n{v4_only}"));
    assert!(
        wait_until(PATIENCE, || node.returns(true) == ["fe80::/10", "fd00::/8"]),
        "IPv6 not turned on by the file:\n{}",
        text()
    );
    assert!(node.ours(true).contains("-j IP-MASQ-AGENT\n"));
    assert_eq!(node.returns(false), ["169.254.0.0/16", "10.0.0.0/8"]);
    configmap_dir(
        &volume,
        4,
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    assert!(
        wait_until(PATIENCE, || node.ours(true).is_empty()),
        "IPv6 rules left after the file turned IPv6 off:\n{}\n{}",
        node.ours(true),
        text()
    );
    assert_eq!(node.returns(false), ["169.254.0.0/16", "10.0.0.0/8"]);
    // The agent says so after the removal: the rules can be gone a moment before the line.
    assert!(
        wait_until(PATIENCE, || text()
            .contains("family no longer enabled by the config")),
        "{}",
        text()
    );
}

fn invalid_config_keeps_the_last_good_rules(variant: &'static str) {
    let mut node = IptablesNode::new(variant, "invalid");
    node.write_config("nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 200ms\n");
    // --v=2 logs every pass, so the test can count passes instead of sleeping.
    let (_pid, log) = node.spawn(&["--v=2"]);
    assert!(wait_until(PATIENCE, || node.returns(false)
        == ["169.254.0.0/16", "10.0.0.0/8"]));
    node.write_config("nonMasqueradeCIDRs: [10.1.2.3/8]\nresyncInterval: 200ms\n");
    assert!(wait_until(PATIENCE, || std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("invalid config rejected")));
    // Still healing with the last good config.
    node.ns.sh(&format!("iptables-{variant} -t nat -F {CHAIN}"));
    assert!(wait_until(PATIENCE, || node.returns(false)
        == ["169.254.0.0/16", "10.0.0.0/8"]));
    // Several resyncs later the error was logged once, not once per resync.
    let passes = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("pass done")
            .count()
    };
    let seen = passes();
    assert!(wait_until(PATIENCE, || passes() >= seen + 3));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("invalid config rejected").count(), 1, "{text}");
    // Removing the file means defaults.
    std::fs::remove_file(node.config_path()).unwrap();
    assert!(wait_until(PATIENCE, || node.returns(false).len() == 4));
}

fn sigterm_keeps_rules_and_cleanup_on_exit_removes_them(variant: &'static str) {
    for (cleanup, expect_rules) in [(false, true), (true, false)] {
        let mut node = IptablesNode::new(variant, "sigterm");
        let extra: &[&str] = if cleanup { &["--cleanup-on-exit"] } else { &[] };
        let (pid, _log) = node.spawn(extra);
        assert!(wait_until(PATIENCE, || node.ours(false) == DEFAULT_SAVED));
        kill(pid, "TERM");
        assert_eq!(
            node.ns.wait_daemon(pid, PATIENCE),
            Some(0),
            "exit 0 on SIGTERM"
        );
        assert_eq!(
            node.ours(false) == DEFAULT_SAVED,
            expect_rules,
            "cleanup={cleanup}"
        );
        if cleanup {
            assert_eq!(node.ours(false), "");
        }
    }
    // SIGINT too.
    let mut node = IptablesNode::new(variant, "sigint");
    let (pid, _log) = node.spawn(&[]);
    assert!(wait_until(PATIENCE, || node.ours(false) == DEFAULT_SAVED));
    kill(pid, "INT");
    assert_eq!(node.ns.wait_daemon(pid, PATIENCE), Some(0));
}

fn dry_run_prints_and_touches_nothing(variant: &'static str) {
    let node = IptablesNode::new(variant, "dry");
    let config = node.config_path().display().to_string();
    let args = node.agent_args(&config, &["--dry-run"]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = node.ns.ipmasq(&refs);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "# ipv4 (iptables-{variant}): would apply (chain_missing, jump_missing)\n*nat\n{DEFAULT_SAVED}COMMIT\n"
        )
    );
    assert_eq!(node.ours(false), "");
    assert_eq!(node.once(&[]).code, 0);
    let run = node.ns.ipmasq(&refs);
    assert!(
        run.stdout.contains("in sync, nothing to apply"),
        "{}",
        run.stdout
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn auto_mode_follows_iptables_wrappers() {
    let cases: [(&str, &str, &str); 4] = [
        ("nothing anywhere", "", "nft"),
        ("legacy holds rules", "iptables-legacy -t nat -A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE", "legacy"),
        (
            "kubelet's hint in nft wins over more legacy rules",
            "iptables-legacy -t nat -A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE && iptables-nft -t mangle -N KUBE-IPTABLES-HINT",
            "nft",
        ),
        (
            "kubelet's canary in legacy",
            "iptables-legacy -t mangle -N KUBE-KUBELET-CANARY && iptables-nft -t nat -A POSTROUTING -j ACCEPT && iptables-nft -t nat -A POSTROUTING -j ACCEPT",
            "legacy",
        ),
    ];
    for (what, setup, expected) in cases {
        let node = IptablesNode::new("nft", "auto");
        if !setup.is_empty() {
            node.ns.sh(setup);
        }
        let config = node.config_path().display().to_string();
        let run = node
            .ns
            .ipmasq(&["agent", "--once", &format!("--config={config}")]);
        assert_eq!(run.code, 0, "{what}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("backend=iptables-{expected}")),
            "{what}: {}",
            run.stderr
        );
        let other = if expected == "nft" { "legacy" } else { "nft" };
        assert!(
            ours(&node.ns.save(expected, false, Some("nat"))).contains(":IP-MASQ-AGENT"),
            "{what}"
        );
        assert!(
            !ours(&node.ns.save(other, false, Some("nat"))).contains(":IP-MASQ-AGENT"),
            "{what}"
        );
    }
}

fn to_ports_and_random_fully_flags_round_trip(variant: &'static str) {
    let node = IptablesNode::new(variant, "ports");
    let run = node.once(&["--to-ports=1024-29999,32768-65535", "--random-fully=false"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ours = node.ours(false);
    assert_eq!(
        ours.matches("--probability 0.46929256292").count(),
        3,
        "{ours}"
    );
    assert_eq!(
        ours.matches("--to-ports 32768-65535\n").count(),
        3,
        "{ours}"
    );
    assert!(!ours.contains("--random-fully"));
    assert!(ours.ends_with(
        "-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE\n"
    ));
    // Saved and planned forms agree: a second sync changes nothing, for uneven ranges too.
    let run = node.once(&["--to-ports=1024-29999,32768-65535", "--random-fully=false"]);
    assert!(!run.stderr.contains("repaired"), "{}", run.stderr);
    let three = "--to-ports=1024-2047,4096-8191,32768-65535";
    assert!(node.once(&[three]).stderr.contains("rules repaired"));
    let run = node.once(&[three]);
    assert_eq!(run.code, 0);
    assert!(!run.stderr.contains("repaired"), "{}", run.stderr);
    assert_eq!(
        node.ours(false)
            .matches("--probability 0.11111111101")
            .count(),
        3
    );
    // Bad values are start-up errors.
    for bad in [
        "--to-ports=0-10",
        "--to-ports=2000-1000",
        "--to-ports=70000",
        "--masq-chain=THIS-NAME-IS-FAR-TOO-LONG-FOR-IPTABLES",
        "--masq-chain=A\"B",
    ] {
        // Upstream's agent exits 1 when it refuses a flag's value.
        let run = node.once(&[bad]);
        assert_eq!(run.code, 1, "{bad}: {}", run.stderr);
    }
}

/// Auto mode weighs the variants from the kernel, not by running their `-save`: the rule
/// counts it logs are exactly what `iptables-legacy-save` and `iptables-nft-save` print for
/// both families (user chains, several tables, both directions of the comparison).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn auto_mode_counts_rules_as_the_save_tools_do() {
    let setups = [
        "iptables-legacy -N CUSTOM && iptables-legacy -A CUSTOM -s 10.1.0.0/16 -j ACCEPT && iptables-legacy -A INPUT -j CUSTOM && iptables-legacy -t nat -N MINE && iptables-legacy -t nat -A MINE -j RETURN && iptables-legacy -t nat -A POSTROUTING -j MINE && ip6tables-legacy -A FORWARD -s fd00::/8 -j DROP && iptables-legacy -t mangle -A OUTPUT -j MARK --set-mark 1 && iptables-nft -A INPUT -j ACCEPT",
        "iptables-nft -N CUSTOM && iptables-nft -A CUSTOM -j ACCEPT && iptables-nft -A INPUT -j CUSTOM && ip6tables-nft -t nat -A POSTROUTING -j MASQUERADE && iptables-nft -t raw -A PREROUTING -j NOTRACK && iptables-legacy -t nat -A POSTROUTING -j ACCEPT",
    ];
    for setup in setups {
        let node = IptablesNode::new("nft", "auto");
        node.ns.sh(setup);
        let count = |variant: &str| -> usize {
            [false, true]
                .iter()
                .map(|v6| {
                    node.ns
                        .save(variant, *v6, None)
                        .lines()
                        .filter(|l| l.starts_with("-A"))
                        .count()
                })
                .sum()
        };
        let (legacy, nft) = (count("legacy"), count("nft"));
        assert_ne!(legacy, nft, "{setup}");
        let config = node.config_path().display().to_string();
        let run = node.ns.ipmasq(&[
            "agent",
            "--once",
            "--dry-run",
            &format!("--config={config}"),
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let expected = if legacy > nft {
            format!("iptables-legacy holds more rules ({legacy} vs {nft})")
        } else {
            format!("iptables-nft holds at least as many rules ({nft} vs {legacy})")
        };
        assert!(run.stderr.contains(&expected), "{expected}\n{}", run.stderr);
    }
}

/// An iptables too old for `--random-fully` (before 1.6.2) is told by its restore refusing the
/// option, not by running `iptables --version` at every start: the agent says so once and
/// writes plain MASQUERADE in the same pass.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn an_iptables_without_random_fully_gets_plain_masquerade() {
    let node = IptablesNode::new("nft", "nft");
    let fakes = crate::util::Scratch::new("old-iptables");
    super::netns::executable(
        &fakes.path.join("iptables-nft-restore"),
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *--random-fully*) echo 'iptables-restore v1.6.1: unknown option \"--random-fully\"' >&2; exit 2;; esac\nprintf '%s\\n' \"$input\" | exec /usr/sbin/iptables-nft-restore \"$@\"\n",
    );
    let out = node.once_with_tools(&fakes.path, "nft");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("lacks --random-fully").count(),
        1,
        "{stderr}"
    );
    let saved = node.ns.save("nft", false, Some("nat"));
    assert!(saved.contains("-j MASQUERADE"), "{saved}");
    assert!(!saved.contains("--random-fully"), "{saved}");
}

/// Start-up without a crowd: on a fresh node the first sync of either variant is one
/// `iptables-restore` (auto mode's evidence comes from the kernel, `--random-fully` is not
/// probed); with a nat table in nf_tables, iptables-nft reads it first (a rule there may be
/// one iptables cannot show), so two.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_first_sync_on_a_fresh_node_is_one_restore() {
    for (mode, setup, expected) in [
        ("auto", "", vec!["iptables-nft-restore"]),
        ("legacy", "", vec!["iptables-legacy-restore"]),
        (
            "nft",
            "iptables-nft -t nat -A POSTROUTING -s 10.9.0.0/16 -j ACCEPT",
            vec!["iptables-nft-save", "iptables-nft-restore"],
        ),
    ] {
        let node = IptablesNode::new("nft", mode);
        if !setup.is_empty() {
            node.ns.sh(setup);
        }
        let fakes = crate::util::Scratch::new("count-tools");
        let runs = fakes.path.join("runs");
        for tool in [
            "iptables-nft-save",
            "iptables-nft-restore",
            "iptables-legacy-save",
            "iptables-legacy-restore",
            "iptables-nft",
            "iptables-legacy",
        ] {
            // Not the system `iptables`: where its links point is what auto mode reads.
            super::netns::executable(
                &fakes.path.join(tool),
                &format!(
                    "#!/bin/sh\necho {tool} >> '{}'\nexec /usr/sbin/{tool} \"$@\"\n",
                    runs.display()
                ),
            );
        }
        let out = node.once_with_tools(&fakes.path, mode);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{mode}: {stderr}");
        let ran = std::fs::read_to_string(&runs).unwrap_or_default();
        assert_eq!(
            ran.lines().collect::<Vec<_>>(),
            expected,
            "{mode}: {stderr}"
        );
        let variant = if mode == "legacy" { "legacy" } else { "nft" };
        assert!(ours(&node.ns.save(variant, false, Some("nat"))).contains(":IP-MASQ-AGENT"));
    }
}
