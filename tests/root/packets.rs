//! Masquerading proven with packets: pod, node and outside namespaces joined by veths, the
//! agent in the node namespace, UDP from the pod to an outside address in a non-masquerade
//! CIDR (must keep the pod's address) and to one outside it (must carry the node's address),
//! over IPv4 and IPv6. A control run without the agent shows the second check would fail.

use super::netns::{scratch_file, wait_until, Netns};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

const POD_V4: &str = "192.168.77.2";
const POD_V6: &str = "2001:db8:77::2";
/// Outside addresses: the first of each pair is in a non-masquerade CIDR.
const KEEP_V4: &str = "198.51.100.2";
const MASQ_V4: &str = "203.0.113.2";
const NODE_OUT_V4: &str = "203.0.113.1";
const KEEP_V6: &str = "2001:db8:f1::2";
const MASQ_V6: &str = "2001:db8:f0::2";
const NODE_OUT_V6: &str = "2001:db8:f0::1";
const CONFIG: &str = "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n  - 2001:db8:f1::/64\n";
/// The same list without IPv6 (for tests that run without --enable-ipv6).
const CONFIG_V4: &str = "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n";

static PORT: AtomicU16 = AtomicU16::new(40000);

/// The three namespaces, wired.
pub(super) struct Topology {
    pub(super) pod: Netns,
    pub(super) node: Netns,
    pub(super) outside: Netns,
}

impl Topology {
    pub(super) fn new() -> Topology {
        let pod = Netns::new("pod");
        let node = Netns::new("node");
        let outside = Netns::new("out");
        // Interfaces are created in the node namespace and one end moved out.
        node.sh(&format!(
            "ip link add vpod type veth peer name eth0 netns {pod} && \
             ip link add vout type veth peer name eth0 netns {out} && \
             ip addr add 192.168.77.1/24 dev vpod && ip addr add 2001:db8:77::1/64 dev vpod nodad && \
             ip addr add {NODE_OUT_V4}/24 dev vout && ip addr add 198.51.100.1/24 dev vout && \
             ip addr add {NODE_OUT_V6}/64 dev vout nodad && ip addr add 2001:db8:f1::1/64 dev vout nodad && \
             ip link set vpod up && ip link set vout up && \
             sysctl -qw net.ipv4.ip_forward=1 && sysctl -qw net.ipv6.conf.all.forwarding=1",
            pod = pod.name,
            out = outside.name
        ));
        pod.sh(&format!(
            "ip addr add {POD_V4}/24 dev eth0 && ip addr add {POD_V6}/64 dev eth0 nodad && \
             ip link set eth0 up && ip route add default via 192.168.77.1 && \
             ip -6 route add default via 2001:db8:77::1"
        ));
        outside.sh(&format!(
            "ip addr add {MASQ_V4}/24 dev eth0 && ip addr add {KEEP_V4}/24 dev eth0 && \
             ip addr add {MASQ_V6}/64 dev eth0 nodad && ip addr add {KEEP_V6}/64 dev eth0 nodad && \
             ip link set eth0 up"
        ));
        Topology { pod, node, outside }
    }

    /// Starts a Python receiver in the outside namespace and waits until it has bound: the
    /// script gets `READY`, a path it must create once its sockets are bound.
    fn start_receiver(&self, script: &str) -> (std::process::Child, std::path::PathBuf) {
        start_receiver_in(&self.outside, script)
    }

    /// Sends UDP from the pod to `dest` and returns the source address the outside saw.
    fn source_seen(&self, dest: &str) -> String {
        self.source_seen_from(dest, None)
    }

    /// Like `source_seen`, sending from the pod's address `from` (it must have it).
    fn source_seen_from(&self, dest: &str, from: Option<&str>) -> String {
        source_seen_between(&self.pod, &self.outside, dest, from)
    }
}

/// Starts a Python receiver in `outside` and waits until it has bound: the script gets
/// `READY`, a path it must create once its sockets are bound.
pub(super) fn start_receiver_in(
    outside: &Netns,
    script: &str,
) -> (std::process::Child, std::path::PathBuf) {
    let ready = scratch_file("ready", "");
    std::fs::remove_file(&ready).unwrap();
    let script = script.replace("READY", &ready.display().to_string());
    let listener = Command::new("ip")
        .args([
            "netns",
            "exec",
            &outside.name,
            super::netns::PYTHON,
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start receiver");
    assert!(
        wait_until(Duration::from_secs(10), || ready.exists()),
        "receiver did not bind"
    );
    (listener, ready)
}

/// Sends UDP from `pod` (from its address `from`, if given) to `dest`, an address of
/// `outside`, and returns the source address `outside` saw.
pub(super) fn source_seen_between(
    pod: &Netns,
    outside: &Netns,
    dest: &str,
    from: Option<&str>,
) -> String {
    let port = PORT.fetch_add(1, Ordering::SeqCst);
    let family = if dest.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let receiver = format!(
        "import socket,sys\n\
         s=socket.socket(socket.{family},socket.SOCK_DGRAM)\n\
         s.bind(('{dest}',{port}))\n\
         open('READY','w').close()\n\
         s.settimeout(10)\n\
         d,a=s.recvfrom(100)\n\
         print(a[0])\n"
    );
    let (listener, ready) = start_receiver_in(outside, &receiver);
    let bind = from.map_or(String::new(), |a| format!("s.bind(('{a}',0))\n"));
    let sender = format!(
        "import socket,time\n\
         s=socket.socket(socket.{family},socket.SOCK_DGRAM)\n\
         {bind}\
         for _ in range(20):\n    s.sendto(b'ping',('{dest}',{port}))\n    time.sleep(0.05)\n"
    );
    let send = pod.exec(super::netns::PYTHON, &["-c", &sender]);
    assert_eq!(send.code, 0, "sender: {}", send.stderr);
    let out = listener.wait_with_output().expect("receiver output");
    let _ = std::fs::remove_file(&ready);
    assert!(
        out.status.success(),
        "nothing arrived at {dest}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn masquerading_with_packets(variant: &str) {
    let topo = Topology::new();
    // Control: no agent, so nothing is masqueraded; the masquerade check below would fail.
    assert_eq!(topo.source_seen(MASQ_V4), POD_V4, "control run (IPv4)");
    assert_eq!(topo.source_seen(MASQ_V6), POD_V6, "control run (IPv6)");

    let config = scratch_file("packets-config", CONFIG);
    let run = topo.node.ipmasq(&[
        "agent",
        "--once",
        "--enable-ipv6",
        &format!("--iptables-mode={variant}"),
        &format!("--config={}", config.display()),
    ]);
    let _ = std::fs::remove_file(&config);
    assert_eq!(run.code, 0, "{}", run.stderr);

    assert_eq!(
        topo.source_seen(KEEP_V4),
        POD_V4,
        "non-masquerade CIDR keeps the pod address"
    );
    assert_eq!(
        topo.source_seen(MASQ_V4),
        NODE_OUT_V4,
        "other destinations get the node address"
    );
    assert_eq!(
        topo.source_seen(KEEP_V6),
        POD_V6,
        "IPv6 non-masquerade CIDR"
    );
    assert_eq!(topo.source_seen(MASQ_V6), NODE_OUT_V6, "IPv6 masquerade");

    // `show` reports the traffic that crossed the node in its counters.
    let mode = format!("--iptables-mode={variant}");
    let json = topo.node.ipmasq(&["show", "-o", "json", &mode]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("show JSON");
    let families = report["families"].as_array().unwrap();
    assert_eq!(families.len(), 2, "ipv4 and ipv6: {report}");
    for family in families {
        let rules = family["rules"].as_array().unwrap();
        let counted = |pick: &dyn Fn(&serde_json::Value) -> bool| {
            rules
                .iter()
                .filter(|r| pick(r))
                .map(|r| r["packets"].as_u64().unwrap())
                .sum::<u64>()
        };
        let masq = counted(&|r| r["action"] == "MASQUERADE");
        let kept = counted(&|r| {
            r["destination"] == "198.51.100.0/24" || r["destination"] == "2001:db8:f1::/64"
        });
        assert!(masq > 0, "MASQUERADE counted no packets: {family}");
        assert!(kept > 0, "RETURN counted no packets: {family}");
    }
    let text = topo.node.ipmasq(&["show", &mode]);
    assert_eq!(text.code, 0);
    eprintln!("ipmasq show after traffic ({variant}):\n{}", text.stdout);
    eprintln!(
        "ipmasq show -o json after traffic ({variant}):\n{}",
        json.stdout
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn masquerading_with_packets_nft() {
    masquerading_with_packets("nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn masquerading_with_packets_legacy() {
    masquerading_with_packets("legacy");
}

/// The same proof with the native nftables backend, IPv4 and IPv6.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn masquerading_with_packets_nftables() {
    let topo = Topology::new();
    assert_eq!(topo.source_seen(MASQ_V4), POD_V4, "control run (IPv4)");
    let config = scratch_file("packets-config-nft", CONFIG);
    let run = topo.node.ipmasq(&[
        "agent",
        "--once",
        "--enable-ipv6",
        "--backend=nftables",
        &format!("--config={}", config.display()),
    ]);
    let _ = std::fs::remove_file(&config);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(topo.source_seen(KEEP_V4), POD_V4, "kept (IPv4)");
    assert_eq!(topo.source_seen(MASQ_V4), NODE_OUT_V4, "masqueraded (IPv4)");
    assert_eq!(topo.source_seen(KEEP_V6), POD_V6, "kept (IPv6)");
    assert_eq!(topo.source_seen(MASQ_V6), NODE_OUT_V6, "masqueraded (IPv6)");
    let json = topo
        .node
        .ipmasq(&["show", "-o", "json", "--backend=nftables"]);
    assert_eq!(json.code, 0, "{}{}", json.stdout, json.stderr);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("show JSON");
    for family in report["families"].as_array().unwrap() {
        let masq: u64 = family["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "MASQUERADE")
            .filter_map(|r| r["packets"].as_u64())
            .sum();
        assert!(masq > 0, "the masquerade rule counted no packets: {family}");
    }
    let text = topo.node.ipmasq(&["show", "--backend=nftables"]);
    eprintln!(
        "ipmasq show --backend=nftables after traffic:\n{}",
        text.stdout
    );
}

impl Topology {
    /// Sends one UDP datagram per flow from the pod to `dest` (distinct destination ports, so
    /// every one is a new connection) and returns the source ports the outside saw.
    fn source_ports_seen(&self, dest: &str, flows: u16) -> Vec<u16> {
        let base = PORT.fetch_add(flows + 1, Ordering::SeqCst);
        let receiver = format!(
            "import socket, select\n\
             socks = []\n\
             for p in range({base}, {base} + {flows}):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{dest}', p)); socks.append(s)\n\
             open('READY', 'w').close()\n\
             seen = []\n\
             while len(seen) < {flows}:\n    r, _, _ = select.select(socks, [], [], 10)\n    if not r: break\n    for s in r:\n        d, a = s.recvfrom(100); seen.append(a[1])\n\
             print(' '.join(map(str, seen)))\n"
        );
        let (listener, ready) = self.start_receiver(&receiver);
        let sender = format!(
            "import socket\n\
             for p in range({base}, {base} + {flows}):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('{dest}', p)); s.close()\n"
        );
        let send = self.pod.exec(super::netns::PYTHON, &["-c", &sender]);
        assert_eq!(send.code, 0, "sender: {}", send.stderr);
        let out = listener.wait_with_output().expect("receiver output");
        let _ = std::fs::remove_file(&ready);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect()
    }
}

/// `--to-ports 1024-29999,32768-65535` splits new flows between the ranges in proportion to
/// their sizes (28,976 : 32,768, so 46.9 % to the first), with packets, on both backends.
fn port_ranges_split_in_proportion(backend_args: &[&str]) {
    let topo = Topology::new();
    let config = scratch_file("ports-config", CONFIG);
    let mut args = vec![
        "agent",
        "--once",
        "--enable-ipv6",
        "--to-ports=1024-29999,32768-65535",
    ];
    let config_flag = format!("--config={}", config.display());
    args.push(&config_flag);
    args.extend_from_slice(backend_args);
    let run = topo.node.ipmasq(&args);
    let _ = std::fs::remove_file(&config);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let flows = 600;
    let ports = topo.source_ports_seen(MASQ_V4, flows);
    assert!(
        ports.len() as u16 >= flows * 9 / 10,
        "only {} of {flows} flows arrived",
        ports.len()
    );
    assert!(
        ports
            .iter()
            .all(|p| (1024..=29999).contains(p) || (32768..=65535).contains(p)),
        "a source port outside both ranges: {ports:?}"
    );
    let first = ports.iter().filter(|p| **p <= 29999).count() as f64 / ports.len() as f64;
    eprintln!(
        "{backend_args:?}: {:.1} % of {} flows took 1024-29999 (planned 46.9 %)",
        first * 100.0,
        ports.len()
    );
    // 600 flows: one standard deviation is 2 points; 8 points is four.
    assert!(
        (first - 0.469).abs() < 0.08,
        "{:.3} of flows in the first range",
        first
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn port_ranges_split_in_proportion_nftables() {
    port_ranges_split_in_proportion(&["--backend=nftables"]);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn port_ranges_split_in_proportion_iptables() {
    port_ranges_split_in_proportion(&["--iptables-mode=nft"]);
}

/// The extensions with packets, IPv4 and IPv6: inside the non-masquerade range
/// 198.51.100.0/24 (2001:db8:f1::/64) the forced 198.51.100.128/25 (2001:db8:f1:0:8000::/65)
/// is masqueraded, the nested 198.51.100.192/26 (2001:db8:f1:0:c000::/66) inside that is kept
/// again; and a second pod address outside `masqueradeSourceCIDRs` is not masqueraded even to
/// an outside destination. Two IPv4 source ranges make iptables write the complement form.
fn extensions_with_packets(backend_args: &[&str]) {
    const FORCED_V4: &str = "198.51.100.130";
    const NESTED_V4: &str = "198.51.100.200";
    const FORCED_V6: &str = "2001:db8:f1:0:8000::2";
    const NESTED_V6: &str = "2001:db8:f1:0:c000::2";
    const UNSCOPED_V4: &str = "192.168.77.3";
    const UNSCOPED_V6: &str = "2001:db8:77::3";
    let topo = Topology::new();
    topo.outside.sh(&format!(
        "ip addr add {FORCED_V4}/24 dev eth0 && ip addr add {NESTED_V4}/24 dev eth0 && \
         ip addr add {FORCED_V6}/64 dev eth0 nodad && ip addr add {NESTED_V6}/64 dev eth0 nodad"
    ));
    topo.pod.sh(&format!(
        "ip addr add {UNSCOPED_V4}/24 dev eth0 && ip addr add {UNSCOPED_V6}/64 dev eth0 nodad"
    ));
    let config = scratch_file(
        "packets-extensions",
        "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n  - 198.51.100.192/26\n  - 2001:db8:f1::/64\n  - 2001:db8:f1:0:c000::/66\n\
         forceMasqueradeCIDRs:\n  - 198.51.100.128/25\n  - 2001:db8:f1:0:8000::/65\n\
         masqueradeSourceCIDRs:\n  - 192.168.77.2/32\n  - 10.244.0.0/16\n  - 2001:db8:77::2/128\n",
    );
    let mut args = vec!["agent", "--once", "--enable-ipv6"];
    args.extend_from_slice(backend_args);
    let config_arg = format!("--config={}", config.display());
    args.push(&config_arg);
    let run = topo.node.ipmasq(&args);
    let _ = std::fs::remove_file(&config);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let what = backend_args.join(" ");
    assert_eq!(
        topo.source_seen_from(KEEP_V4, Some(POD_V4)),
        POD_V4,
        "{what}: kept range (IPv4)"
    );
    // Masquerade takes the node's address on the route to the destination: here the one in
    // 198.51.100.0/24.
    assert_eq!(
        topo.source_seen_from(FORCED_V4, Some(POD_V4)),
        "198.51.100.1",
        "{what}: forced inside the kept range (IPv4)"
    );
    assert_eq!(
        topo.source_seen_from(NESTED_V4, Some(POD_V4)),
        POD_V4,
        "{what}: kept inside the forced range (IPv4)"
    );
    assert_eq!(
        topo.source_seen_from(MASQ_V4, Some(POD_V4)),
        NODE_OUT_V4,
        "{what}: outside (IPv4)"
    );
    assert_eq!(
        topo.source_seen_from(MASQ_V4, Some(UNSCOPED_V4)),
        UNSCOPED_V4,
        "{what}: a source outside masqueradeSourceCIDRs (IPv4)"
    );
    assert_eq!(
        topo.source_seen_from(KEEP_V6, Some(POD_V6)),
        POD_V6,
        "{what}: kept range (IPv6)"
    );
    assert_eq!(
        topo.source_seen_from(FORCED_V6, Some(POD_V6)),
        "2001:db8:f1::1",
        "{what}: forced (IPv6)"
    );
    assert_eq!(
        topo.source_seen_from(NESTED_V6, Some(POD_V6)),
        POD_V6,
        "{what}: nested kept (IPv6)"
    );
    assert_eq!(
        topo.source_seen_from(MASQ_V6, Some(POD_V6)),
        NODE_OUT_V6,
        "{what}: outside (IPv6)"
    );
    assert_eq!(
        topo.source_seen_from(MASQ_V6, Some(UNSCOPED_V6)),
        UNSCOPED_V6,
        "{what}: a source outside masqueradeSourceCIDRs (IPv6)"
    );
    // A second sync finds the rules as written: nothing to apply (the live reading of the
    // source matches and forced rules equals the plan).
    let mut dry = vec!["agent", "--dry-run", "--enable-ipv6"];
    dry.extend_from_slice(backend_args);
    let config = scratch_file(
        "packets-extensions-again",
        "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n  - 198.51.100.192/26\n  - 2001:db8:f1::/64\n  - 2001:db8:f1:0:c000::/66\n\
         forceMasqueradeCIDRs:\n  - 198.51.100.128/25\n  - 2001:db8:f1:0:8000::/65\n\
         masqueradeSourceCIDRs:\n  - 192.168.77.2/32\n  - 10.244.0.0/16\n  - 2001:db8:77::2/128\n",
    );
    let config_arg = format!("--config={}", config.display());
    dry.push(&config_arg);
    let again = topo.node.ipmasq(&dry);
    let _ = std::fs::remove_file(&config);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        again.stdout.matches("in sync, nothing to apply").count(),
        2,
        "{what}: {}",
        again.stdout
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn extensions_with_packets_iptables_nft() {
    extensions_with_packets(&["--iptables-mode=nft"]);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn extensions_with_packets_iptables_legacy() {
    extensions_with_packets(&["--iptables-mode=legacy"]);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn extensions_with_packets_nftables() {
    extensions_with_packets(&["--backend=nftables"]);
}

/// `nft monitor` in a namespace, counting the commits (new generations) after it started.
struct CommitWatch {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl CommitWatch {
    /// Starts the monitor and waits until it is seen to listen: a marker commit shows up.
    fn start(ns: &Netns) -> CommitWatch {
        let out = scratch_file("monitor", "");
        let child = ns
            .command(std::path::Path::new("nft"), &["monitor"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("nft monitor");
        let watch = CommitWatch { child, out };
        let read = || std::fs::read_to_string(&watch.out).unwrap_or_default();
        assert!(wait_until(Duration::from_secs(10), || {
            ns.sh("nft add table ip commitwatch && nft delete table ip commitwatch");
            read().contains("delete table ip commitwatch")
        }));
        watch
    }

    /// Commits after the start marker, once an end marker shows they have all been printed.
    fn commits_since_start(mut self, ns: &Netns) -> usize {
        ns.sh("nft add table ip commitwatch-end");
        let read = || std::fs::read_to_string(&self.out).unwrap_or_default();
        assert!(wait_until(Duration::from_secs(10), || read()
            .contains("add table ip commitwatch-end")));
        let _ = self.child.kill();
        let _ = self.child.wait();
        ns.sh("nft delete table ip commitwatch-end");
        let text = read();
        let _ = std::fs::remove_file(&self.out);
        let start = text
            .rfind("delete table ip commitwatch\n")
            .expect("start marker");
        let end = text
            .find("add table ip commitwatch-end")
            .expect("end marker");
        // The start marker's own generation line follows it; the end marker's comes after.
        text[start..end].matches("# new generation").count() - 1
    }
}

/// A switch of backend while a pod opens about 1,000 new flows a second to an outside address:
/// the new agent installs its rules before it removes the other backend's, so no flow leaves
/// with the pod's address. Three switches: iptables-nft → nftables, back, and iptables-legacy
/// (upstream's rules) → nftables.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_backend_switch_leaks_no_flow() {
    let topo = Topology::new();
    let config = scratch_file("switch-config", "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    let config_flag = format!("--config={}", config.display());
    let switches: [(&[&str], &[&str]); 3] = [
        (&["--iptables-mode=nft"], &["--backend=nftables"]),
        (&["--backend=nftables"], &["--iptables-mode=nft"]),
        (&["--iptables-mode=legacy"], &["--backend=nftables"]),
    ];
    for (from, to) in switches {
        let once = |backend: &[&str]| {
            let mut args = vec!["agent", "--once", config_flag.as_str()];
            args.extend_from_slice(backend);
            let run = topo.node.ipmasq(&args);
            assert_eq!(run.code, 0, "{backend:?}: {}", run.stderr);
            run.stderr
        };
        // The old backend's rules, as an agent of that kind left them.
        topo.node
            .sh("nft flush ruleset; iptables-legacy -t nat -F; iptables-legacy -t nat -X");
        once(from);
        let port = PORT.fetch_add(1, Ordering::SeqCst);
        let receiver = format!(
            "import socket,json\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.setsockopt(socket.SOL_SOCKET,getattr(socket,'SO_RCVBUFFORCE',33),8<<20)\n\
             s.bind(('{MASQ_V4}',{port}))\n\
             open('READY','w').close()\n\
             s.settimeout(30)\n\
             seen={{}}\n\
             while True:\n    d,a=s.recvfrom(100)\n    if d==b'stop': break\n    seen[a[0]]=seen.get(a[0],0)+1\n\
             print(json.dumps(seen))\n"
        );
        let (listener, ready) = topo.start_receiver(&receiver);
        let count = scratch_file("switch-count", "0");
        let stop = scratch_file("switch-stop", "");
        std::fs::remove_file(&stop).unwrap();
        // A new socket, so a new flow (and a new NAT decision), every millisecond.
        let sender = format!(
            "import socket,time,os\n\
             n=0\n\
             deadline=time.time()+60\n\
             while not os.path.exists('{stop}') and time.time()<deadline:\n    s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n    s.sendto(b'flow',('{MASQ_V4}',{port}))\n    s.close()\n    n+=1\n    if n%100==0: open('{count}','w').write(str(n))\n    time.sleep(0.001)\n\
             for _ in range(5):\n    socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b'stop',('{MASQ_V4}',{port}))\n    time.sleep(0.05)\n",
            stop = stop.display(),
            count = count.display()
        );
        let mut flows = topo
            .pod
            .command(std::path::Path::new(super::netns::PYTHON), &["-c", &sender])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the flows");
        let sent = || -> u64 {
            std::fs::read_to_string(&count)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0)
        };
        assert!(wait_until(Duration::from_secs(20), || sent() >= 300));
        // iptables-nft → nftables: both live in nf_tables, so ours are installed and theirs
        // deleted in one transaction: `nft monitor` sees exactly one new generation.
        let one_batch = from == ["--iptables-mode=nft"];
        let monitor = one_batch.then(|| CommitWatch::start(&topo.node));
        let log = once(to);
        if let Some(monitor) = monitor {
            assert!(log.contains("in the same transaction"), "{log}");
            assert_eq!(
                monitor.commits_since_start(&topo.node),
                1,
                "one transaction: {log}"
            );
        } else {
            assert!(
                log.contains("removed the rules another backend left behind"),
                "{to:?}: {log}"
            );
        }
        assert!(
            !topo
                .node
                .save("nft", false, Some("nat"))
                .contains("IP-MASQ-AGENT")
                && !topo
                    .node
                    .save("legacy", false, Some("nat"))
                    .contains("IP-MASQ-AGENT")
                || to != ["--backend=nftables"],
            "no iptables chain is left"
        );
        let after = sent();
        assert!(wait_until(Duration::from_secs(20), || sent() >= after + 300));
        std::fs::write(&stop, "").unwrap();
        let _ = flows.wait();
        let out = listener.wait_with_output().expect("receiver output");
        let _ = std::fs::remove_file(&ready);
        let _ = std::fs::remove_file(&count);
        let _ = std::fs::remove_file(&stop);
        let seen: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("receiver: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(
            seen.get(POD_V4),
            None,
            "{from:?} → {to:?}: flows left with the pod's address: {seen}"
        );
        // The receiver's buffer holds 8 MiB (a receiver starved of CPU once dropped 195 of
        // 600 here); the kernel's UDP counters say whether it still overflowed.
        assert!(
            seen[NODE_OUT_V4].as_u64().unwrap_or(0) >= 600,
            "{from:?} → {to:?}: {seen}; the outside's UDP counters:\n{}",
            topo.outside.sh("grep ^Udp: /proc/net/snmp")
        );
        eprintln!("{from:?} → {to:?}: sources seen {seen}");
    }
    let _ = std::fs::remove_file(&config);
}

/// What `explain` says the live rules do with traffic from the pod to `dest`, with `config`.
fn explained(
    topo: &Topology,
    backend: &str,
    config: &std::path::Path,
    dest: &str,
) -> serde_json::Value {
    let run = topo.node.ipmasq(&[
        "explain",
        backend,
        "-o",
        "json",
        &format!("--config={}", config.display()),
        &format!("--from={POD_V4}"),
        dest,
    ]);
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", run.stdout, run.stderr))
}

/// One pass of the agent in the node namespace with `backend` and `config`.
fn install_once(topo: &Topology, backend: &str, config: &std::path::Path) {
    let run = topo.node.ipmasq(&[
        "agent",
        "--once",
        backend,
        &format!("--config={}", config.display()),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// Whether the outside's view agrees with a live verdict: a kept source is the pod's, a
/// rewritten one is any of the node's (masquerade picks the address of the outgoing route).
fn agrees(live_action: &serde_json::Value, seen: &str) -> bool {
    match live_action.as_str() {
        Some("masquerade") => seen != POD_V4 && [NODE_OUT_V4, "198.51.100.1"].contains(&seen),
        Some("keep-source") => seen == POD_V4,
        other => panic!("live action {other:?}"),
    }
}

/// A hand-made change to the node's tables.
type Damage<'a> = &'a dyn Fn(&Topology);

/// Damaged nftables tables, each explained and then proven with packets: `explain`'s live
/// verdict is what the outside namespace sees. The local skip deleted by hand no longer reads
/// as "nothing sends traffic to our rules" (the chain is still hooked; traffic to 203.0.113.2
/// is still masqueraded); a deleted set element and a hand-inserted rule are walked as the
/// kernel walks them.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn damaged_nftables_tables_are_explained_as_packets_see_them() {
    let topo = Topology::new();
    let config = scratch_file("damaged-config", CONFIG_V4);
    let backend = "--backend=nftables";
    let install = |topo: &Topology| install_once(topo, backend, &config);
    let handle_of = |topo: &Topology, needle: &str| -> String {
        let listed = topo.node.sh("nft -a list chain ip ipmasq postrouting");
        let line = listed
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} in {listed}"));
        line.rsplit("# handle ").next().unwrap().trim().to_string()
    };
    let damages: [(&str, Damage); 4] = [
        ("local skip deleted", &|topo| {
            let handle = handle_of(topo, "fib daddr type local return");
            topo.node.sh(&format!(
                "nft delete rule ip ipmasq postrouting handle {handle}"
            ));
        }),
        ("set element deleted", &|topo| {
            topo.node
                .sh("nft delete element ip ipmasq nomasq '{ 198.51.100.0/24 }'");
        }),
        ("foreign rule inserted first", &|topo| {
            topo.node
                .sh("nft insert rule ip ipmasq postrouting ip daddr 203.0.113.2 return");
        }),
        // Another table's nat chain at a priority that runs before ours rewrites traffic our
        // rules keep.
        ("foreign snat table runs first", &|topo| {
            topo.node.sh(&format!(
                "nft add table ip foreign && \
                 nft add chain ip foreign post '{{ type nat hook postrouting priority 50; }}' && \
                 nft add rule ip foreign post ip daddr {KEEP_V4} snat to {NODE_OUT_V4}"
            ));
        }),
    ];
    for (damage, apply) in damages {
        let _ = topo.node.exec("nft", &["delete", "table", "ip", "ipmasq"]);
        install(&topo);
        apply(&topo);
        for dest in [KEEP_V4, MASQ_V4] {
            let answer = explained(&topo, backend, &config, dest);
            let live = &answer["live"];
            let seen = topo.source_seen(dest);
            eprintln!(
                "{damage}: {dest}: live {} ({}), config {}, seen {seen}",
                live["action"], live["reason"], answer["config"]["action"]
            );
            assert!(
                agrees(&live["action"], &seen),
                "{damage}, {dest}: seen {seen}: {answer}"
            );
            if damage == "local skip deleted" && dest == MASQ_V4 {
                assert_eq!(answer["outcome"], "masquerade", "still hooked: {answer}");
            }
            if damage == "foreign snat table runs first" && dest == KEEP_V4 {
                assert_eq!(live["reason"], "decided-before", "{answer}");
                assert_eq!(
                    live["decidedBefore"]["place"],
                    "table ip foreign chain post"
                );
                assert_eq!(answer["outcome"], "disagreement", "{answer}");
            }
        }
    }
    let show = topo.node.ipmasq(&["show", backend, "--color=never"]);
    assert!(
        show.stdout
            .contains("runs first: table ip foreign chain post (priority 50), 1 rule"),
        "{}",
        show.stdout
    );
    let _ = std::fs::remove_file(&config);
}

/// An iptables POSTROUTING rule above our jump that SNATs traffic our rules keep: `explain`
/// names it as deciding first, and the packets agree; kube-proxy's jump to its own chain
/// (marks this tool cannot judge) is named as one that may decide first.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn rules_above_our_jump_are_explained_as_packets_see_them() {
    let topo = Topology::new();
    let config = scratch_file("above-config", CONFIG_V4);
    let backend = "--iptables-mode=nft";
    install_once(&topo, backend, &config);
    topo.node.sh(&format!(
        "iptables-nft -t nat -N KUBE-POSTROUTING && \
         iptables-nft -t nat -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN && \
         iptables-nft -t nat -I POSTROUTING 1 -j KUBE-POSTROUTING && \
         iptables-nft -t nat -I POSTROUTING 2 -d {KEEP_V4} -j SNAT --to-source {NODE_OUT_V4}"
    ));
    for dest in [KEEP_V4, MASQ_V4] {
        let answer = explained(&topo, backend, &config, dest);
        let live = &answer["live"];
        let seen = topo.source_seen(dest);
        eprintln!(
            "{dest}: live {} ({}), seen {seen}",
            live["action"], live["reason"]
        );
        assert!(
            agrees(&live["action"], &seen),
            "{dest}: seen {seen}: {answer}"
        );
        assert_eq!(
            live["mayDecideFirst"][0]["text"], "-A POSTROUTING -j KUBE-POSTROUTING",
            "{answer}"
        );
        if dest == KEEP_V4 {
            assert_eq!(live["reason"], "decided-before", "{answer}");
            assert_eq!(live["decidedBefore"]["number"], 2, "{answer}");
        }
    }
    let show = topo.node.ipmasq(&["show", backend, "--color=never"]);
    assert!(
        show.stdout.contains("runs first: POSTROUTING, 2 rules"),
        "{}",
        show.stdout
    );
    let _ = std::fs::remove_file(&config);
}

/// With an iptables backend, another table's nf_tables nat chain at an earlier priority runs
/// before iptables' own POSTROUTING: `explain` reads it too (through `nft`), and the packets
/// agree.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn nft_chains_before_iptables_are_explained_as_packets_see_them() {
    let topo = Topology::new();
    let config = scratch_file("nft-before-config", CONFIG_V4);
    for backend in ["--iptables-mode=nft", "--iptables-mode=legacy"] {
        let _ = topo.node.exec("nft", &["delete", "table", "ip", "foreign"]);
        install_once(&topo, backend, &config);
        topo.node.sh(&format!(
            "nft add table ip foreign && \
             nft add chain ip foreign post '{{ type nat hook postrouting priority 50; }}' && \
             nft add rule ip foreign post ip daddr {KEEP_V4} snat to {NODE_OUT_V4}"
        ));
        let answer = explained(&topo, backend, &config, KEEP_V4);
        let live = &answer["live"];
        let seen = topo.source_seen(KEEP_V4);
        assert!(
            agrees(&live["action"], &seen),
            "{backend}: seen {seen}: {answer}"
        );
        assert_eq!(live["reason"], "decided-before", "{backend}: {answer}");
        assert_eq!(
            live["decidedBefore"]["place"],
            "table ip foreign chain post"
        );
        let run = topo
            .node
            .ipmasq(&["cleanup", "--all-variants=false", backend]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let _ = std::fs::remove_file(&config);
}

/// A list too long for one set (40,000 blocks and 198.51.100.0/24) is spread over four
/// sets, with packets: the kept range keeps the pod's address, another is masqueraded. Then
/// the kept range is swapped for 203.0.113.0/24: the change is an element repair of the
/// sets holding the two ranges only (what `--dry-run` prints), and the packets follow it.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_list_spread_over_sets_masquerades_as_one_set() {
    let blocks: String = (0..40_000u32)
        .map(|i| {
            let base =
                std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 0, 0, 0)) + i * 8);
            format!("  - {base}/30\n")
        })
        .collect();
    let topo = Topology::new();
    let config = scratch_file(
        "spread-config",
        &format!("cidrLimit: 50000\nnonMasqueradeCIDRs:\n{blocks}  - 198.51.100.0/24\n"),
    );
    let backend = "--backend=nftables";
    install_once(&topo, backend, &config);
    let sets = topo.node.sh("nft list sets ip");
    let names: Vec<&str> = sets
        .lines()
        .filter_map(|l| l.trim().strip_prefix("set "))
        .map(|l| l.trim_end_matches(" {"))
        .collect();
    assert_eq!(
        names,
        ["nomasq", "nomasq_1", "nomasq_2", "nomasq_3"],
        "{sets}"
    );
    assert_eq!(topo.source_seen(KEEP_V4), POD_V4, "kept range");
    assert_eq!(topo.source_seen(MASQ_V4), NODE_OUT_V4, "masqueraded range");

    std::fs::write(
        &config,
        format!("cidrLimit: 50000\nnonMasqueradeCIDRs:\n{blocks}  - 203.0.113.0/24\n"),
    )
    .unwrap();
    let dry = topo.node.ipmasq(&[
        "agent",
        "--once",
        "--dry-run",
        backend,
        &format!("--config={}", config.display()),
    ]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let batch: Vec<&str> = dry
        .stdout
        .lines()
        .filter(|l| l.starts_with("add ") || l.starts_with("delete ") || l.starts_with("flush "))
        .collect();
    assert_eq!(batch.len(), 2, "{}", dry.stdout);
    assert!(
        batch[0].starts_with("delete element ip ipmasq nomasq")
            && batch[0].ends_with("{ 198.51.100.0/24 }"),
        "{batch:?}"
    );
    assert!(
        batch[1].starts_with("add element ip ipmasq nomasq")
            && batch[1].ends_with("{ 203.0.113.0/24 }"),
        "{batch:?}"
    );
    install_once(&topo, backend, &config);
    assert_eq!(topo.source_seen(MASQ_V4), POD_V4, "now kept");
    assert!(
        [NODE_OUT_V4, "198.51.100.1"].contains(&topo.source_seen(KEEP_V4).as_str()),
        "now masqueraded"
    );
    let _ = std::fs::remove_file(&config);
}
