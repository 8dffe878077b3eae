//! The native nftables backend against the real kernel: every golden script passes
//! `nft --check`, an untouched table costs no `nft` process per pass, every kind of drift is
//! healed at the next pass, both backends give the same verdicts, foreign tables and
//! iptables-nft rules stay byte-identical, and switching backends leaves no leftovers.

use super::netns::{executable, wait_until, Netns};
use crate::util::Scratch;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(30);

/// Every script of the golden file is valid nft input (checked, not applied).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn golden_nft_scripts_pass_nft_check() {
    let ns = Netns::new("nftcheck");
    for (file, expected) in [
        ("nft-scripts.txt", 48),
        ("nft-scripts-extensions.txt", 48),
        ("nft-scripts-egress.txt", 12),
        ("nft-scripts-share.txt", 6),
    ] {
        let golden = std::fs::read_to_string(crate::util::data(&format!("golden/{file}"))).unwrap();
        let mut checked = 0;
        for section in golden.split("### ").filter(|s| !s.is_empty()) {
            let (title, script) = section.split_once('\n').unwrap();
            let path = super::netns::scratch_file("nft-check", script);
            let run = ns.exec("nft", &["--check", "-f", &path.display().to_string()]);
            let _ = std::fs::remove_file(path);
            assert_eq!(run.code, 0, "{file}: {title}: {}", run.stderr);
            checked += 1;
        }
        assert_eq!(checked, expected, "{file}");
    }
}

/// A running agent on the nftables backend with a fake `nft` first on PATH that counts its
/// runs: the agent's log, the count file and the namespace.
struct Agent {
    ns: Netns,
    dir: Scratch,
    pid: u32,
}

impl Agent {
    fn start_with(tag: &str, config: &str, extra: &[&str]) -> Agent {
        let mut ns = Netns::new(tag);
        let dir = Scratch::new(&format!("nft-{tag}"));
        std::fs::write(dir.path.join("config"), config).unwrap();
        executable(
            &dir.path.join("nft"),
            &format!(
                "#!/bin/sh\necho run >> '{}'\nexec /usr/sbin/nft \"$@\"\n",
                dir.path.join("nft-runs").display()
            ),
        );
        let config_flag = format!("--config={}", dir.path.join("config").display());
        let child = ns
            .ipmasq_with_path(
                &dir.path,
                &[
                    &[
                        "agent",
                        "--backend=nftables",
                        &config_flag,
                        "--v=2",
                        "--metrics-addr=off",
                    ],
                    extra,
                ]
                .concat(),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path.join("log")).unwrap())
            .spawn()
            .unwrap();
        let pid = child.id();
        ns.adopt(child);
        Agent { ns, dir, pid }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path.join("log")).unwrap_or_default()
    }

    fn passes(&self) -> usize {
        self.log().matches("pass done").count()
    }

    fn nft_runs(&self) -> usize {
        std::fs::read_to_string(self.dir.path.join("nft-runs")).map_or(0, |t| t.lines().count())
    }

    /// The table as nft lists it; empty while it does not exist.
    fn table(&self, family: &str) -> String {
        self.ns
            .exec("nft", &["list", "table", family, "ipmasq"])
            .stdout
    }

    fn elements(&self) -> String {
        self.ns.sh("nft -j list set ip ipmasq nomasq")
    }
}

/// After the first apply, passes over an untouched table read only the generation id: no
/// `nft` process at all. Then every kind of drift is healed at the next pass. The tables are
/// left unheld (a held one refuses every damage: root::neighbour_flush).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn steady_passes_spawn_nothing_and_drift_is_healed() {
    let agent = Agent::start_with(
        "nftdrift",
        "nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16, fd00::/8]\nresyncInterval: 100ms\n",
        &["--enable-ipv6", "--nftables-table-owner=false"],
    );
    assert!(
        wait_until(PATIENCE, || agent.passes() >= 2),
        "{}",
        agent.log()
    );
    let installed_v4 = agent.table("ip");
    let installed_v6 = agent.table("ip6");
    assert!(installed_v4.contains("10.0.0.0/8"), "{installed_v4}");
    assert!(installed_v6.contains("fd00::/8"), "{installed_v6}");
    let runs = agent.nft_runs();
    let passes = agent.passes();
    assert!(wait_until(PATIENCE, || agent.passes() >= passes + 20));
    let steady = agent.nft_runs() - runs;
    eprintln!("20+ steady passes on an untouched table: {steady} nft processes");
    assert_eq!(steady, 0, "a steady pass must not run nft");
    let ns = &agent.ns;
    let handle = |family: &str, needle: &str| -> String {
        let listing = ns.sh(&format!("nft -a list chain {family} ipmasq postrouting"));
        let line = listing
            .lines()
            .find(|l| l.contains(needle))
            .unwrap()
            .to_string();
        line.rsplit("# handle ").next().unwrap().trim().to_string()
    };
    // Each damage is worked out when it is done: handles change with every repair.
    type Damage<'a> = Box<dyn Fn() -> String + 'a>;
    let fixed = |text: &'static str| -> Damage { Box::new(move || text.to_string()) };
    let drifts: Vec<(&str, Damage)> = vec![
        (
            "element added",
            fixed("nft add element ip ipmasq nomasq '{ 203.0.113.0/24 }'"),
        ),
        (
            "element deleted",
            fixed("nft delete element ip ipmasq nomasq '{ 10.0.0.0/8 }'"),
        ),
        (
            "rule deleted",
            Box::new(|| {
                format!(
                    "nft delete rule ip ipmasq postrouting handle {}",
                    handle("ip", "@nomasq")
                )
            }),
        ),
        (
            "rule changed",
            Box::new(|| {
                format!(
                    "nft replace rule ip ipmasq postrouting handle {} counter masquerade",
                    handle("ip", "fully-random")
                )
            }),
        ),
        (
            "chain flushed",
            fixed("nft flush chain ip ipmasq postrouting"),
        ),
        ("set flushed", fixed("nft flush set ip ipmasq nomasq")),
        ("table deleted", fixed("nft delete table ip ipmasq")),
        ("ipv6 table deleted", fixed("nft delete table ip6 ipmasq")),
    ];
    let strip = |t: String| -> String {
        // Counters and handles differ after a repair; the content may not.
        t.lines()
            .map(|l| {
                let l = match l.find(" counter packets") {
                    Some(i) => {
                        let rest = &l[i + 1..];
                        let after = rest.find(" masquerade").map_or("", |j| &rest[j..]);
                        format!("{} counter{}", &l[..i], after)
                    }
                    None => l.to_string(),
                };
                format!("{l}\n")
            })
            .collect()
    };
    for (what, damage) in drifts {
        ns.sh(&damage());
        assert!(
            wait_until(PATIENCE, || strip(agent.table("ip"))
                == strip(installed_v4.clone())
                && strip(agent.table("ip6")) == strip(installed_v6.clone())),
            "{what}: not healed:\n{}\nlog:\n{}",
            agent.table("ip"),
            agent.log()
        );
    }
    assert!(agent.elements().contains("\"addr\": \"10.0.0.0\""));
    assert_eq!(
        agent.nft_runs(),
        0,
        "the nftables backend runs no nft at all: first apply, reads and repairs go over netlink"
    );
    let _ = agent.pid;
}

/// The same config through both backends, read back from the kernel and walked rule by rule
/// as the kernel does: the same verdict for ~50 destinations around overlapping and adjacent
/// CIDRs, and the verdict `decide` gives.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn both_backends_give_the_same_verdicts() {
    let dir = Scratch::new("verdicts");
    let config = dir.write(
        "config",
        "nonMasqueradeCIDRs: [10.0.0.0/8, 10.1.0.0/16, 10.2.0.0/24, 10.2.1.0/24, 172.16.0.0/12, 172.32.0.0/12, 192.168.1.0/24, 192.168.1.128/25, 100.64.0.0/10]\nmasqLinkLocal: true\n",
    );
    let config_flag = format!("--config={}", config.display());
    let destinations = [
        "10.0.0.1",
        "10.1.2.3",
        "10.2.0.255",
        "10.2.1.0",
        "10.2.2.0",
        "10.255.255.255",
        "11.0.0.0",
        "9.255.255.255",
        "172.15.255.255",
        "172.16.0.0",
        "172.31.255.255",
        "172.32.0.1",
        "172.47.255.255",
        "172.48.0.0",
        "192.168.0.255",
        "192.168.1.0",
        "192.168.1.127",
        "192.168.1.128",
        "192.168.1.255",
        "192.168.2.0",
        "100.63.255.255",
        "100.64.0.0",
        "100.127.255.255",
        "100.128.0.0",
        "169.254.169.254",
        "8.8.8.8",
        "1.1.1.1",
        "203.0.113.5",
        "198.51.100.7",
        "224.0.0.1",
        "255.255.255.255",
        "0.0.0.1",
        "127.0.0.2",
        "10.3.0.0",
        "10.2.0.0",
        "10.1.255.255",
        "10.1.0.0",
        "172.20.1.1",
        "172.40.0.0",
        "192.168.1.1",
        "192.168.1.200",
        "100.100.100.100",
        "100.64.0.1",
        "172.16.255.255",
        "10.128.0.0",
        "11.255.255.255",
        "12.0.0.0",
        "192.167.255.255",
        "192.169.0.0",
        "100.0.0.0",
    ];
    let mut verdicts = Vec::new();
    for (backend, args) in [
        ("iptables", vec!["--iptables-mode=nft"]),
        ("nftables", vec!["--backend=nftables"]),
    ] {
        let ns = Netns::new("verdicts");
        let mut agent_args = vec!["agent", "--once", config_flag.as_str()];
        agent_args.extend(&args);
        let run = ns.ipmasq(&agent_args);
        assert_eq!(run.code, 0, "{backend}: {}", run.stderr);
        let mut show_args = vec!["show", "-o", "json"];
        show_args.extend(&args);
        let show = ns.ipmasq(&show_args);
        assert_eq!(show.code, 0, "{backend}: {}", show.stderr);
        let report: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
        let rules = report["families"][0]["rules"].as_array().unwrap().clone();
        let verdict = |dst: &str| -> &'static str {
            let dst: std::net::IpAddr = dst.parse().unwrap();
            for rule in &rules {
                let matches = match rule["destination"].as_str() {
                    None => true,
                    Some(cidr) => cidr.parse::<ipnet::IpNet>().unwrap().contains(&dst),
                };
                if matches {
                    return if rule["action"] == "RETURN" {
                        "keep"
                    } else {
                        "masquerade"
                    };
                }
            }
            "untouched"
        };
        verdicts.push(destinations.iter().map(|d| verdict(d)).collect::<Vec<_>>());
    }
    // What the plan says, by the one `decide` (through `ipmasq`'s own view: a keep CIDR that
    // holds the destination, as listed in the config).
    let listed: Vec<ipnet::IpNet> = [
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.2.0.0/24",
        "10.2.1.0/24",
        "172.16.0.0/12",
        "172.32.0.0/12",
        "192.168.1.0/24",
        "192.168.1.128/25",
        "100.64.0.0/10",
    ]
    .iter()
    .map(|c| c.parse().unwrap())
    .collect();
    for (i, dst) in destinations.iter().enumerate() {
        let dst_ip: std::net::IpAddr = dst.parse().unwrap();
        let planned = if listed.iter().any(|n| n.contains(&dst_ip)) {
            "keep"
        } else {
            "masquerade"
        };
        assert_eq!(verdicts[0][i], planned, "iptables, {dst}");
        assert_eq!(verdicts[1][i], planned, "nftables, {dst}");
    }
    assert_eq!(verdicts[0], verdicts[1]);
}

/// Foreign nftables tables and kube-proxy-like iptables-nft rules stay byte-identical; a
/// switch of backend removes the other backend's rules; cleanup removes our tables, and a
/// second cleanup finds nothing, which is success.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn coexistence_switching_and_cleanup() {
    let ns = Netns::new("nftcoexist");
    ns.sh("nft add table inet foreign && nft add set inet foreign big '{ type ipv4_addr; flags interval; }' && nft add element inet foreign big '{ 10.9.0.0/16, 10.10.0.0/16 }' && nft add chain inet foreign out '{ type filter hook output priority 0; }' && nft add rule inet foreign out ip daddr @big counter accept");
    ns.sh("iptables-nft -t nat -N KUBE-POSTROUTING && iptables-nft -t nat -A POSTROUTING -j KUBE-POSTROUTING && iptables-nft -t nat -A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE");
    let foreign = || ns.sh("nft list table inet foreign");
    let kube = || {
        ns.save("nft", false, None)
            .lines()
            .filter(|l| l.contains("KUBE"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (foreign_before, kube_before) = (foreign(), kube());
    // First the iptables backend, then a switch to nftables: the iptables chain goes.
    assert_eq!(
        ns.ipmasq(&[
            "agent",
            "--once",
            "--iptables-mode=nft",
            "--config=/nonexistent/x"
        ])
        .code,
        0
    );
    assert!(ns
        .save("nft", false, Some("nat"))
        .contains(":IP-MASQ-AGENT"));
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--backend=nftables",
        "--config=/nonexistent/x",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // iptables-nft's chain lives in nf_tables: taken over in our first install's transaction.
    assert!(
        run.stderr.contains(
            "removed iptables-nft's chain and jumps in the same transaction as this table's first install"
        ),
        "{}",
        run.stderr
    );
    assert!(!ns.save("nft", false, Some("nat")).contains("IP-MASQ-AGENT"));
    assert!(ns.sh("nft list tables").contains("table ip ipmasq"));
    // And back: the nftables table goes.
    let run = ns.ipmasq(&[
        "agent",
        "--once",
        "--iptables-mode=nft",
        "--config=/nonexistent/x",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!ns.sh("nft list tables").contains("ipmasq"));
    assert_eq!(
        ns.ipmasq(&[
            "agent",
            "--once",
            "--backend=nftables",
            "--config=/nonexistent/x"
        ])
        .code,
        0
    );
    let run = ns.ipmasq(&["cleanup", "--backend=nftables", "--all-variants=false"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(!ns.sh("nft list tables").contains("ipmasq"));
    let run = ns.ipmasq(&["cleanup", "--backend=nftables", "--all-variants=false"]);
    assert_eq!(run.code, 0, "nothing to remove is success: {}", run.stdout);
    assert_eq!(foreign(), foreign_before, "the foreign table is untouched");
    assert_eq!(kube(), kube_before, "kube-proxy's rules are untouched");
}

/// A neighbour committing to nf_tables back to back (as kube-proxy's nftables mode does on a
/// busy cluster) moves the generation id before nearly every pass. The change notifications
/// say those commits touched nothing of ours: passes neither read the table nor run nft.
/// A commit that does touch our table is still seen and healed.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_neighbours_commits_cost_no_read() {
    let cidrs: Vec<String> = (0..2_000)
        .map(|i| format!("10.{}.{}.0/24", i / 128, i % 128 * 2))
        .collect();
    // Unheld, so the touch of our table at the end lands (a held table refuses it).
    let mut agent = Agent::start_with(
        "nftchurn",
        &format!(
            "cidrLimit: 5000\nnonMasqueradeCIDRs: [{}]\nresyncInterval: 100ms\n",
            cidrs.join(", ")
        ),
        &["--enable-ipv6", "--nftables-table-owner=false"],
    );
    assert!(
        wait_until(PATIENCE, || agent.passes() >= 2),
        "{}",
        agent.log()
    );
    agent
        .ns
        .sh("nft add table ip neighbour && nft add set ip neighbour s '{ type ipv4_addr; }'");
    let commits = agent.dir.path.join("neighbour-commits");
    let stop = agent.dir.path.join("neighbour-stop");
    // Commits as fast as nft can run, up to 20,000, until told to stop.
    let neighbour = agent
        .ns
        .command(
            std::path::Path::new("sh"),
            &[
                "-c",
                &format!(
                    "i=0; while [ ! -e '{stop}' ] && [ $i -lt 20000 ]; do i=$((i+1)); nft add element ip neighbour s \"{{ 198.51.$((i / 256 % 256)).$((i % 256)) }}\"; echo $i > '{commits}.tmp' && mv '{commits}.tmp' '{commits}'; done",
                    stop = stop.display(),
                    commits = commits.display()
                ),
            ],
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed with the namespace if the test fails.
    agent.ns.adopt(neighbour);
    let committed = || -> u64 {
        std::fs::read_to_string(&commits)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(wait_until(PATIENCE, || committed() >= 10));
    let full_reads = |agent: &Agent| agent.log().matches("sync phases").count();
    let (reads, runs, passes, commits_before) = (
        full_reads(&agent),
        agent.nft_runs(),
        agent.passes(),
        committed(),
    );
    // Thirty passes and thirty of the neighbour's commits, whichever comes last: how fast
    // each comes is the machine's, not the test's.
    assert!(
        wait_until(PATIENCE, || agent.passes() >= passes + 30
            && committed() >= commits_before + 30),
        "30 passes and 30 of the neighbour's commits: {} passes, {} commits",
        agent.passes() - passes,
        committed().saturating_sub(commits_before)
    );
    let during = (
        full_reads(&agent) - reads,
        agent.nft_runs() - runs,
        committed().saturating_sub(commits_before),
    );
    eprintln!(
        "30 passes while a neighbour committed {} times: {} full reads, {} nft processes",
        during.2, during.0, during.1
    );
    assert_eq!(during.0, 0, "no pass read the table: {during:?}");
    assert_eq!(during.1, 0, "no pass ran nft: {during:?}");
    // A touch of our own table amid the churn: seen and healed at the next pass.
    agent
        .ns
        .sh("nft delete element ip ipmasq nomasq '{ 10.0.6.0/24 }'");
    assert!(
        wait_until(PATIENCE, || agent.elements().contains("\"10.0.6.0\"")),
        "not healed: {}",
        agent.log()
    );
    std::fs::write(&stop, "").unwrap();
}

/// `enableIPv6: true` written into the config turns the ip6 table on (the file's change
/// alone: an hour-long resync); written back off, the ip6 table goes and the ip one stays.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn enable_ipv6_from_the_file_alone() {
    let agent = Agent::start_with(
        "v6file",
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
        &[],
    );
    let config = agent.dir.path.join("config");
    let write = |text: &str| {
        let fresh = agent.dir.path.join("config.new");
        std::fs::write(&fresh, text).unwrap();
        std::fs::rename(&fresh, &config).unwrap();
    };
    assert!(wait_until(PATIENCE, || agent
        .table("ip")
        .contains("10.0.0.0/8")));
    assert_eq!(agent.table("ip6"), "");
    write("enableIPv6: true\nnonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8']\nresyncInterval: 1h\n");
    assert!(
        wait_until(PATIENCE, || agent.table("ip6").contains("fd00::/8")),
        "{}",
        agent.log()
    );
    assert!(agent.table("ip6").contains("fe80::/10"));
    write("nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n");
    assert!(
        wait_until(PATIENCE, || agent.table("ip6").is_empty()),
        "{}",
        agent.log()
    );
    assert!(agent.table("ip").contains("10.0.0.0/8"));
    assert!(agent
        .log()
        .contains("family no longer enabled by the config"));
}

/// Only a table we made is ours to delete. A neighbour's `table ip6 ipmasq`, made with `nft`
/// (a chain and a rule of its own), survives `cleanup` byte for byte, and `cleanup` says why it
/// left it, while our own `table ip ipmasq`, marked with its comment, goes (and so does an
/// unmarked one holding exactly what an ipmasq before the mark wrote). A sync makes an
/// unmarked `table ip ipmasq` (a neighbour's, or one an ipmasq before the mark made) anew,
/// marked, in one transaction.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn cleanup_deletes_only_the_table_it_made() {
    let ns = Netns::new("neighbour6");
    ns.sh("nft add table ip6 ipmasq && nft add chain ip6 ipmasq theirs '{ type filter hook output priority 0; }' && nft add rule ip6 ipmasq theirs counter accept");
    let neighbour = || ns.exec("nft", &["list", "table", "ip6", "ipmasq"]);
    let before = neighbour();
    assert_eq!(before.code, 0, "{}", before.stderr);
    let once = || {
        ns.ipmasq(&[
            "agent",
            "--once",
            "--backend=nftables",
            "--config=/nonexistent/x",
        ])
    };
    let ours = || ns.exec("nft", &["list", "table", "ip", "ipmasq"]);
    let run = once();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ours().code, 0, "{}", run.stderr);

    let run = ns.ipmasq(&["cleanup", "--backend=nftables"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let after = neighbour();
    assert_eq!(
        (after.code, &after.stdout),
        (0, &before.stdout),
        "the neighbour's table is untouched; cleanup said:\n{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("nftables ipv6: left table ip6 ipmasq: not ours (it lacks our mark, the comment \"managed by ipmasq\"; it has no comment), so it was left"),
        "{}",
        run.stdout
    );
    assert_ne!(ours().code, 0, "our table is removed: {}", ours().stdout);

    // Ours carries the mark; the JSON report names what it left, and why.
    let run = once();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        ours().stdout.contains("comment \"managed by ipmasq\""),
        "{}",
        ours().stdout
    );
    let dry = ns.ipmasq(&["cleanup", "--backend=nftables", "--dry-run", "-o", "json"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let report: serde_json::Value = serde_json::from_str(&dry.stdout).unwrap();
    let steps = report["steps"].as_array().unwrap();
    let step = |family: &str| {
        steps
            .iter()
            .find(|s| s["backend"] == "nftables" && s["family"] == family)
            .unwrap_or_else(|| panic!("no {family} step: {}", dry.stdout))
    };
    assert_eq!(
        step("ipv4")["removed"][0]["kind"],
        "table",
        "{}",
        dry.stdout
    );
    assert_eq!(
        step("ipv6")["removed"],
        serde_json::json!([]),
        "{}",
        dry.stdout
    );
    assert!(
        step("ipv6")["left"][0]
            .as_str()
            .is_some_and(|l| l.starts_with("table ip6 ipmasq: not ours")),
        "{}",
        dry.stdout
    );
    assert!(step("ipv4").get("left").is_none(), "{}", dry.stdout);
    let run = ns.ipmasq(&["cleanup", "--backend=nftables"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_ne!(ours().code, 0);

    // A table as an ipmasq before the mark wrote it (no comment, our hook, our rules): ours,
    // and removed.
    let earlier = super::netns::scratch_file(
        "earlier-ipmasq",
        "add table ip ipmasq\n\
         add chain ip ipmasq postrouting { type nat hook postrouting priority srcnat + 10 ; policy accept ; }\n\
         add rule ip ipmasq postrouting fib daddr type local return comment \"ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain\"\n\
         add rule ip ipmasq postrouting counter masquerade fully-random comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\"\n",
    );
    let loaded = ns.exec("nft", &["-f", &earlier.display().to_string()]);
    assert_eq!(loaded.code, 0, "{}", loaded.stderr);
    let run = ns.ipmasq(&["cleanup", "--backend=nftables"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_ne!(
        ours().code,
        0,
        "an earlier ipmasq's table is removed: {}",
        run.stdout
    );
    assert_eq!(neighbour().stdout, before.stdout);

    // An unmarked table with our name in a family we sync is made anew, marked.
    ns.sh("nft add table ip ipmasq");
    let run = once();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let listed = ours().stdout;
    assert!(
        listed.contains("comment \"managed by ipmasq\"") && listed.contains("masquerade"),
        "{listed}"
    );
    assert_eq!(neighbour().stdout, before.stdout);
}
