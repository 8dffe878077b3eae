//! With packets, per backend (iptables-nft, iptables-legacy, nftables), IPv4 and IPv6:
//! `outputAddress` SNATs to the chosen address of a node with two (by address, then by a
//! prefix holding only it); an address that leaves the node makes its family masquerade
//! within a second of the event (said once, in the gauge, /readyz, `show` and `explain`),
//! and one that comes back is SNATed to again on the address event; a deprecated IPv6
//! address is not chosen over a preferred one; `outputInterfaces` rewrites only traffic
//! leaving a listed interface.

use super::netns::{scratch_file, wait_until, Netns};
use super::packets::source_seen_between;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const POD_V4: &str = "192.168.77.2";
const POD_V6: &str = "2001:db8:77::2";
/// The outside reached over the node's `vout` (two node addresses on it).
const OUT_V4: &str = "203.0.113.2";
const OUT_V6: &str = "2001:db8:f0::2";
const NODE_FIRST_V4: &str = "203.0.113.1";
const NODE_SECOND_V4: &str = "203.0.113.9";
const NODE_SECOND_V6: &str = "2001:db8:f0::9";
/// The outside reached over the node's `vside`.
const SIDE_V4: &str = "198.51.100.2";
const SIDE_V6: &str = "2001:db8:f1::2";
const NODE_SIDE_V4: &str = "198.51.100.1";
const NODE_SIDE_V6: &str = "2001:db8:f1::1";

/// Pod, node and two outsides, wired: the node reaches `out` over `vout` and `side` over
/// `vside`.
struct Topology {
    pod: Netns,
    node: Netns,
    out: Netns,
    side: Netns,
}

impl Topology {
    fn new() -> Topology {
        let pod = Netns::new("pod");
        let node = Netns::new("node");
        let out = Netns::new("out");
        let side = Netns::new("side");
        node.sh(&format!(
            "ip link add vpod type veth peer name eth0 netns {pod} && \
             ip link add vout type veth peer name eth0 netns {out} && \
             ip link add vside type veth peer name eth0 netns {side} && \
             ip addr add 192.168.77.1/24 dev vpod && ip addr add 2001:db8:77::1/64 dev vpod nodad && \
             ip addr add {NODE_FIRST_V4}/24 dev vout && ip addr add {NODE_SECOND_V4}/24 dev vout && \
             ip addr add 2001:db8:f0::1/64 dev vout nodad && ip addr add {NODE_SECOND_V6}/64 dev vout nodad && \
             ip addr add {NODE_SIDE_V4}/24 dev vside && ip addr add {NODE_SIDE_V6}/64 dev vside nodad && \
             ip link set vpod up && ip link set vout up && ip link set vside up && \
             sysctl -qw net.ipv4.ip_forward=1 && sysctl -qw net.ipv6.conf.all.forwarding=1",
            pod = pod.name,
            out = out.name,
            side = side.name,
        ));
        pod.sh(&format!(
            "ip addr add {POD_V4}/24 dev eth0 && ip addr add {POD_V6}/64 dev eth0 nodad && \
             ip link set eth0 up && ip route add default via 192.168.77.1 && \
             ip -6 route add default via 2001:db8:77::1"
        ));
        out.sh(&format!(
            "ip addr add {OUT_V4}/24 dev eth0 && ip addr add {OUT_V6}/64 dev eth0 nodad && ip link set eth0 up"
        ));
        side.sh(&format!(
            "ip addr add {SIDE_V4}/24 dev eth0 && ip addr add {SIDE_V6}/64 dev eth0 nodad && ip link set eth0 up"
        ));
        Topology {
            pod,
            node,
            out,
            side,
        }
    }

    fn seen_out(&self, dest: &str) -> String {
        source_seen_between(&self.pod, &self.out, dest, None)
    }

    fn seen_side(&self, dest: &str) -> String {
        source_seen_between(&self.pod, &self.side, dest, None)
    }
}

/// Runs `ipmasq ARGS` in `ns` with the flags that choose `backend` appended.
pub(super) fn ipmasq_on(ns: &Netns, backend: &str, args: Vec<String>) -> crate::util::Run {
    let args = with_backend(args, backend);
    ns.ipmasq(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Starts `ipmasq ARGS` in `ns` (the flags that choose `backend` appended), logging to `log`.
pub(super) fn spawn_ipmasq_on(ns: &mut Netns, backend: &str, args: Vec<String>, log: &Path) -> u32 {
    let args = with_backend(args, backend);
    ns.spawn_ipmasq(&args.iter().map(String::as_str).collect::<Vec<_>>(), log)
}

/// `args` and the flags that choose a backend under test (`nftables`, or an iptables mode).
pub(super) fn with_backend(mut args: Vec<String>, backend: &str) -> Vec<String> {
    match backend {
        "nftables" => args.push("--backend=nftables".into()),
        variant => {
            args.push("--backend=iptables".into());
            args.push(format!("--iptables-mode={variant}"));
        }
    }
    args
}

/// A config file in a directory of its own, replaced atomically (as a ConfigMap is).
pub(super) struct ConfigFile {
    dir: PathBuf,
}

impl ConfigFile {
    pub(super) fn new(text: &str) -> ConfigFile {
        let dir = scratch_file("egress-config-dir", "");
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        let file = ConfigFile { dir };
        file.replace(text);
        file
    }

    pub(super) fn path(&self) -> PathBuf {
        self.dir.join("ip-masq-agent")
    }

    pub(super) fn replace(&self, text: &str) {
        let staged = self.dir.join(".staged");
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, self.path()).unwrap();
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// How many times `needle` is in the log.
pub(super) fn count_in_log(path: &Path, needle: &str) -> usize {
    log_of(path).matches(needle).count()
}

/// The rewrite actions `show -o json` reports for a family (`SNAT 203.0.113.9`, `MASQUERADE`).
fn rewrites(topo: &Topology, backend: &str, family: &str) -> Vec<String> {
    let args = vec!["show".to_string(), "-o".into(), "json".into()];
    let run = ipmasq_on(&topo.node, backend, args);
    // 1: the rules differ from what the config means here (while the address is gone).
    assert!(run.code == 0 || run.code == 1, "show: {}", run.stderr);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("show JSON");
    report["families"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["family"] == family)
        .flat_map(|f| f["rules"].as_array().unwrap().clone())
        .filter(|r| r["verdict"] == "masquerade")
        .map(|r| r["action"].as_str().unwrap().to_string())
        .collect()
}

/// `show -o json` in the node's namespace.
fn show_json(topo: &Topology, backend: &str) -> serde_json::Value {
    let args = vec!["show".to_string(), "-o".into(), "json".into()];
    let run = ipmasq_on(&topo.node, backend, args);
    serde_json::from_str(&run.stdout).unwrap_or_else(|_| panic!("show: {}", run.stderr))
}

/// The status and body of GET `path` on the agent's endpoint inside `ns`.
fn http_status(ns: &Netns, path: &str) -> (u16, String) {
    let run = ns.exec(
        super::netns::PYTHON,
        &[
            "-c",
            &format!("import urllib.request,urllib.error\ntry:\n    r=urllib.request.urlopen('http://127.0.0.1:9723{path}',timeout=5); print(r.status); print(r.read().decode(), end='')\nexcept urllib.error.HTTPError as e:\n    print(e.code); print(e.read().decode(), end='')"),
        ],
    );
    let mut lines = run.stdout.splitn(2, '\n');
    let code = lines.next().unwrap_or("0").trim().parse().unwrap_or(0);
    (
        code,
        lines.next().unwrap_or_default().trim_end().to_string(),
    )
}

fn readyz(ns: &Netns) -> (u16, String) {
    http_status(ns, "/readyz")
}

fn http_get(ns: &Netns, path: &str) -> String {
    http_status(ns, path).1
}

fn egress_address(backend: &str) {
    let mut topo = Topology::new();
    let config = ConfigFile::new(
        "enableIPv6: true\noutputAddress: 203.0.113.9\noutputAddressIPv6: \"2001:db8:f0::9\"\n",
    );
    let log = scratch_file("egress-log", "");
    let args = vec![
        "agent".to_string(),
        "--v=2".into(),
        format!("--config={}", config.path().display()),
    ];
    let pid = spawn_ipmasq_on(&mut topo.node, backend, args, &log);
    assert!(
        wait_until(Duration::from_secs(20), || count_in_log(
            &log,
            "rules installed"
        ) >= 2),
        "the agent did not install both families:\n{}",
        log_of(&log)
    );
    assert_eq!(topo.seen_out(OUT_V4), NODE_SECOND_V4, "outputAddress");
    assert_eq!(topo.seen_out(OUT_V6), NODE_SECOND_V6, "outputAddressIPv6");

    // A prefix holding only the second address names the same source on this node.
    let accepted = count_in_log(&log, "config accepted");
    config.replace(
        "enableIPv6: true\noutputAddress: 203.0.113.8/29\noutputAddressIPv6: \"2001:db8:f0::8/125\"\n",
    );
    assert!(
        wait_until(Duration::from_secs(10), || count_in_log(
            &log,
            "config accepted"
        ) > accepted),
        "the prefix config was not read:\n{}",
        log_of(&log)
    );
    assert_eq!(
        topo.seen_out(OUT_V4),
        NODE_SECOND_V4,
        "outputAddress prefix"
    );
    assert_eq!(
        topo.seen_out(OUT_V6),
        NODE_SECOND_V6,
        "outputAddressIPv6 prefix"
    );

    // The addresses leave the node for good (or move to another host, as a VIP does): SNAT to
    // them would black-hole every new flow. Within a second of the address event each family
    // masquerades instead, traffic keeps flowing from the interface's address, and the agent
    // says so: one WARN per family, the gauge, /readyz (still ready), `show` and `explain`.
    let removed = Instant::now();
    topo.node.sh(&format!(
        "ip addr del {NODE_SECOND_V4}/24 dev vout && ip addr del {NODE_SECOND_V6}/64 dev vout"
    ));
    assert!(
        wait_until(Duration::from_secs(10), || {
            rewrites(&topo, backend, "ipv4") == ["MASQUERADE"]
                && rewrites(&topo, backend, "ipv6") == ["MASQUERADE"]
        }),
        "the agent did not fall back to MASQUERADE:\n{}",
        log_of(&log)
    );
    let took = removed.elapsed();
    eprintln!("{backend}: address removed -> MASQUERADE in {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(topo.seen_out(OUT_V4), NODE_FIRST_V4, "masqueraded (IPv4)");
    assert_eq!(
        topo.seen_out(OUT_V6),
        "2001:db8:f0::1",
        "masqueraded (IPv6)"
    );
    let (code, body) = readyz(&topo.node);
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("output address fallback: outputAddress 203.0.113.8/29: this node holds no address inside that prefix")
            && body.contains("outputAddressIPv6 2001:db8:f0::8/125"),
        "{body}"
    );
    let metrics = http_get(&topo.node, "/metrics");
    for family in ["ipv4", "ipv6"] {
        let line = format!("ipmasq_output_address_fallback{{family=\"{family}\"}} 1");
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
    let show = show_json(&topo, backend);
    assert_eq!(show["sync"]["inSync"], true, "{show}");
    let fallback = show["sync"]["outputAddressFallback"].to_string();
    assert!(
        fallback.contains("203.0.113.8/29") && fallback.contains("2001:db8:f0::8/125"),
        "{show}"
    );
    for (dest, from) in [(OUT_V4, POD_V4), (OUT_V6, POD_V6)] {
        let args = vec![
            "explain".to_string(),
            dest.into(),
            format!("--from={from}"),
            format!("--config={}", config.path().display()),
            "-o".into(),
            "json".into(),
        ];
        let run = ipmasq_on(&topo.node, backend, args);
        let report: serde_json::Value =
            serde_json::from_str(&run.stdout).unwrap_or_else(|_| panic!("explain: {}", run.stderr));
        assert_eq!(report["outcome"], "masquerade", "{report}");
        assert_eq!(report["agree"], true, "{report}");
        assert!(report["config"]["snatTo"].is_null(), "{report}");
        assert!(
            report["config"]["outputAddressFallback"]
                .as_str()
                .is_some_and(|r| r.contains("this node holds no address inside that prefix")),
            "{report}"
        );
    }
    // Said once: a pass that finds the addresses still gone warns no more.
    let passes = count_in_log(&log, "pass done");
    super::netns::kill(pid, "HUP");
    assert!(
        wait_until(Duration::from_secs(10), || count_in_log(&log, "pass done")
            > passes),
        "no pass after SIGHUP:\n{}",
        log_of(&log)
    );
    assert_eq!(
        count_in_log(&log, "output address not on this node"),
        2,
        "one WARN per family:\n{}",
        log_of(&log)
    );

    // Another address inside the prefixes comes: applied on the address event.
    let added = Instant::now();
    topo.node
        .sh("ip addr add 203.0.113.10/24 dev vout && ip addr add 2001:db8:f0::a/64 dev vout nodad");
    assert!(
        wait_until(Duration::from_secs(10), || {
            rewrites(&topo, backend, "ipv4")
                .iter()
                .all(|a| a == "SNAT 203.0.113.10")
                && rewrites(&topo, backend, "ipv6")
                    .iter()
                    .all(|a| a == "SNAT 2001:db8:f0::a")
        }),
        "the new address was not applied:\n{}",
        log_of(&log)
    );
    let took = added.elapsed();
    eprintln!("{backend}: address added -> rules applied in {took:?}");
    assert!(
        log_of(&log).contains("trigger=AddressChanged"),
        "no pass on the address event:\n{}",
        log_of(&log)
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(topo.seen_out(OUT_V4), "203.0.113.10");
    assert_eq!(topo.seen_out(OUT_V6), "2001:db8:f0::a");
    assert_eq!(readyz(&topo.node), (200, "ok".to_string()));
    let metrics = http_get(&topo.node, "/metrics");
    assert!(
        metrics.contains("ipmasq_output_address_fallback{family=\"ipv4\"} 0"),
        "{metrics}"
    );
    assert_eq!(count_in_log(&log, "output address back on this node"), 2);

    // A deprecated IPv6 address (past its preferred lifetime) is never chosen while a
    // preferred one is in the value, though it is the lowest.
    topo.node
        .sh("ip addr add 2001:db8:f0::8/64 dev vout nodad preferred_lft 0");
    let passes = count_in_log(&log, "pass done");
    super::netns::kill(pid, "HUP");
    assert!(wait_until(Duration::from_secs(10), || count_in_log(
        &log,
        "pass done"
    ) > passes));
    assert_eq!(rewrites(&topo, backend, "ipv6"), ["SNAT 2001:db8:f0::a"]);
    assert_eq!(topo.seen_out(OUT_V6), "2001:db8:f0::a");
    let _ = std::fs::remove_file(&log);
}

fn interface_scope(backend: &str) {
    let topo = Topology::new();
    let unscoped = scratch_file("scope-config", "enableIPv6: true\n");
    let scoped = scratch_file(
        "scope-config",
        "enableIPv6: true\noutputInterfaces: [\"vou+\"]\n",
    );
    let once = |config: &Path| {
        let args = vec![
            "agent".to_string(),
            "--once".into(),
            format!("--config={}", config.display()),
        ];
        let run = ipmasq_on(&topo.node, backend, args);
        assert_eq!(run.code, 0, "{}", run.stderr);
    };
    // Control: unscoped, traffic leaving either interface is masqueraded.
    once(&unscoped);
    assert_eq!(topo.seen_side(SIDE_V4), NODE_SIDE_V4, "control (IPv4)");
    assert_eq!(topo.seen_side(SIDE_V6), NODE_SIDE_V6, "control (IPv6)");
    // Scoped to vout (as `vou+`): out of vout masqueraded, out of vside untouched.
    once(&scoped);
    assert_eq!(topo.seen_out(OUT_V4), NODE_FIRST_V4, "leaving vout (IPv4)");
    let v6 = topo.seen_out(OUT_V6);
    assert!(
        v6 == "2001:db8:f0::1" || v6 == NODE_SECOND_V6,
        "leaving vout (IPv6): {v6}"
    );
    assert_eq!(topo.seen_side(SIDE_V4), POD_V4, "leaving vside (IPv4)");
    assert_eq!(topo.seen_side(SIDE_V6), POD_V6, "leaving vside (IPv6)");
    // `explain` tells both apart with --out-interface, and without it from the kernel's
    // route; the config and the live rules agree.
    for ((dest, interface, outcome), flagged) in [
        (SIDE_V4, "vside", "keep-source"),
        (OUT_V4, "vout", "masquerade"),
        (SIDE_V6, "vside", "keep-source"),
        (OUT_V6, "vout", "masquerade"),
    ]
    .into_iter()
    .flat_map(|case| [(case, true), (case, false)])
    {
        let from = if dest.contains(':') { POD_V6 } else { POD_V4 };
        let mut args = vec![
            "explain".to_string(),
            dest.into(),
            format!("--from={from}"),
            format!("--config={}", scoped.display()),
            "-o".into(),
            "json".into(),
        ];
        if flagged {
            args.push(format!("--out-interface={interface}"));
        }
        let run = ipmasq_on(&topo.node, backend, args);
        let report: serde_json::Value =
            serde_json::from_str(&run.stdout).unwrap_or_else(|_| panic!("explain: {}", run.stderr));
        assert_eq!(
            report["outcome"], outcome,
            "{dest} via {interface}: {report}"
        );
        assert_eq!(report["agree"], true, "{dest} via {interface}: {report}");
        assert_eq!(report["outInterface"], interface, "{report}");
        assert_eq!(
            report["outInterfaceFrom"],
            if flagged { "flag" } else { "route" },
            "{report}"
        );
    }
    let _ = std::fs::remove_file(unscoped);
    let _ = std::fs::remove_file(scoped);
}

macro_rules! per_backend {
    ($($name:ident => $backend:expr),* $(,)?) => {
        $(
            mod $name {
                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn egress_address_is_the_chosen_one_and_follows_address_events() {
                    super::egress_address($backend);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn only_traffic_leaving_a_listed_interface_is_rewritten() {
                    super::interface_scope($backend);
                }
            }
        )*
    };
}

per_backend! {
    iptables_nft => "nft",
    iptables_legacy => "legacy",
    nftables => "nftables",
}
