//! A pod's fair share with packets, on both iptables variants and nftables: a pod address floods new
//! connections to one outside destination at up to 20,000 a second while a neighbour pod
//! address on the same node opens its own. With `podConnectionLimit` the flooder holds exactly
//! its limit and is refused the rest at once (a TCP reset), the neighbour loses nothing; with
//! `podNewConnectionRate` the flooder's accepted flows are its burst plus its rate over the
//! flood's length, within 1 %, the neighbour's all arrive. A control run without the keys
//! shows every flood connection accepted (the check would fail without the step's rules).

use super::netns::{scratch_file, wait_until, Netns, PYTHON};
use super::packets::{Topology, MASQ_V4};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The flooding pod's address (the topology's pod) and its neighbour's, on the same veth.
const FLOODER: &str = "192.168.77.2";
const NEIGHBOUR: &str = "192.168.77.3";
const PORT: u16 = 8080;

/// A process in a namespace, killed when the test ends (pass or fail) unless waited for.
struct Background(Option<Child>);

impl Background {
    /// Waits for the process to end by itself and returns its standard output.
    fn output(mut self) -> String {
        let child = self.0.take().expect("waited once");
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn_in(ns: &Netns, script: &str) -> Background {
    Background(Some(
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", ns.name))
            .args([PYTHON, "-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start python"),
    ))
}

/// The node with the neighbour's address added and wide port ranges, so that every new flow
/// of the flood is a new conntrack entry.
fn topology() -> Topology {
    let topo = Topology::new();
    topo.pod.sh(&format!(
        "ip addr add {NEIGHBOUR}/24 dev eth0 && sysctl -qw net.ipv4.ip_local_port_range='1024 65535'"
    ));
    topo.outside
        .sh("sysctl -qw net.core.somaxconn=8192 && sysctl -qw net.core.rmem_max=33554432");
    topo
}

/// A backend as the agent's flags choose it, and how the test names it.
#[derive(Clone, Copy, Debug)]
enum Backend {
    IptablesLegacy,
    IptablesNft,
    Nftables,
}

impl Backend {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Backend::IptablesLegacy => &["--backend=iptables", "--iptables-mode=legacy"],
            Backend::IptablesNft => &["--backend=iptables", "--iptables-mode=nft"],
            Backend::Nftables => &["--backend=nftables"],
        }
    }

    /// The rules of the share as the backend's own tool lists them.
    fn listing(self, node: &Netns) -> String {
        match self {
            Backend::IptablesLegacy => node.save("legacy", false, Some("filter")),
            Backend::IptablesNft => node.save("nft", false, Some("filter")),
            Backend::Nftables => node.sh("nft list ruleset"),
        }
    }

    /// How the listing spells the connection limit of `limit`.
    fn connection_limit_text(self, limit: u64) -> String {
        match self {
            Backend::IptablesLegacy | Backend::IptablesNft => {
                format!("--connlimit-above {limit}")
            }
            Backend::Nftables => format!("ct count over {limit}"),
        }
    }

    /// A word of the share's rules that its listing holds only while the share is there.
    fn share_mark(self) -> &'static str {
        match self {
            Backend::IptablesLegacy | Backend::IptablesNft => "IP-MASQ-AGENT",
            Backend::Nftables => "hook forward",
        }
    }
}

fn apply(topo: &Topology, backend: Backend, config: &str) {
    let path = scratch_file("share-config", config);
    let config_flag = format!("--config={}", path.display());
    let mut args = vec!["agent", "--once", &config_flag];
    args.extend_from_slice(backend.flags());
    let run = topo.node.ipmasq(&args);
    let _ = std::fs::remove_file(&path);
    assert_eq!(run.code, 0, "agent --once: {}", run.stderr);
}

/// The outside's TCP listener: handshakes complete into its backlog, nothing is accepted, so
/// every connection the pod opens stays open.
fn tcp_listener(topo: &Topology) -> Background {
    let ready = scratch_file("share-ready", "");
    std::fs::remove_file(&ready).unwrap();
    let listener = spawn_in(
        &topo.outside,
        &format!(
            "import socket, time\n\
             s = socket.socket()\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('{MASQ_V4}', {PORT}))\n\
             s.listen(8192)\n\
             open('{ready}', 'w').close()\n\
             time.sleep(120)\n",
            ready = ready.display()
        ),
    );
    assert!(
        wait_until(Duration::from_secs(10), || ready.exists()),
        "listener did not bind"
    );
    let _ = std::fs::remove_file(&ready);
    listener
}

/// What the TCP flood saw: connections established and refused, per address, and the rate
/// the attempts were made at.
#[derive(Debug, serde::Deserialize)]
struct TcpOutcome {
    flooder_established: u64,
    flooder_refused: u64,
    flooder_other: u64,
    neighbour_established: u64,
    neighbour_failed: u64,
    attempts_per_second: f64,
}

/// `attempts` non-blocking connects from the flooder, paced at 20,000 a second, and every
/// 40th a connect from the neighbour; then each one's outcome, within 20 s.
fn tcp_flood(pod: &Netns, attempts: u32) -> TcpOutcome {
    let script = format!(
        r#"
import errno, json, resource, select, socket, time
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
mine, theirs = [], []
start = time.monotonic()
for i in range({attempts}):
    while time.monotonic() < start + i / 20000.0:
        pass
    for src, into in [('{FLOODER}', mine)] + ([('{NEIGHBOUR}', theirs)] if i % 40 == 0 else []):
        s = socket.socket()
        s.setblocking(False)
        s.bind((src, 0))
        try:
            s.connect(('{MASQ_V4}', {PORT}))
        except BlockingIOError:
            pass
        into.append(s)
rate = {attempts} / (time.monotonic() - start)
def outcome(socks):
    ok = refused = other = 0
    poll = select.poll()
    left = {{s.fileno(): s for s in socks}}
    for fd in left:
        poll.register(fd, select.POLLOUT)
    deadline = time.monotonic() + 20
    while left and time.monotonic() < deadline:
        for fd, _ in poll.poll(1000):
            s = left.pop(fd)
            poll.unregister(fd)
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err == 0:
                ok += 1
            elif err == errno.ECONNREFUSED:
                refused += 1
            else:
                other += 1
    return ok, refused, other + len(left)
a = outcome(mine)
b = outcome(theirs)
print(json.dumps(dict(flooder_established=a[0], flooder_refused=a[1], flooder_other=a[2],
    neighbour_established=b[0], neighbour_failed=b[1] + b[2], attempts_per_second=rate)))
"#
    );
    let run = pod.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "flood: {}", run.stderr);
    serde_json::from_str(run.stdout.trim()).expect("flood outcome")
}

/// The outside's UDP receiver: counts datagrams by their first byte (`A` the flooder's, `B`
/// the neighbour's) until the neighbour's `E` and a quiet 0.2 s, then prints the counts.
fn udp_receiver(topo: &Topology) -> Background {
    let ready = scratch_file("share-ready", "");
    std::fs::remove_file(&ready).unwrap();
    let receiver = spawn_in(
        &topo.outside,
        &format!(
            "import json, select, socket, time\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)\n\
             s.bind(('{MASQ_V4}', {PORT}))\n\
             open('{ready}', 'w').close()\n\
             seen = {{'A': 0, 'B': 0}}\n\
             ended = False\n\
             deadline = time.monotonic() + 60\n\
             while time.monotonic() < deadline:\n\
             \x20   if not select.select([s], [], [], 0.2 if ended else 5)[0]:\n\
             \x20       if ended:\n\
             \x20           break\n\
             \x20       continue\n\
             \x20   data = s.recv(16)\n\
             \x20   if data == b'E':\n\
             \x20       ended = True\n\
             \x20   else:\n\
             \x20       seen[data[:1].decode()] += 1\n\
             print(json.dumps(seen))\n",
            ready = ready.display()
        ),
    );
    assert!(
        wait_until(Duration::from_secs(10), || ready.exists()),
        "receiver did not bind"
    );
    let _ = std::fs::remove_file(&ready);
    receiver
}

/// What the UDP flood sent: the flooder's flows and the time from its first to its last.
#[derive(Debug, serde::Deserialize)]
struct UdpFlood {
    flooder_flows: u64,
    neighbour_flows: u64,
    seconds: f64,
}

/// New UDP flows (one datagram from a port of its own each) from the flooder for `seconds`,
/// paced at 20,000 a second, every 40th one from the neighbour too; then the neighbour's end.
fn udp_flood(pod: &Netns, seconds: f64) -> UdpFlood {
    let script = format!(
        r#"
import json, socket, time
dst = ('{MASQ_V4}', {PORT})
sent = theirs = 0
start = time.monotonic()
i = 0
while True:
    now = time.monotonic()
    if now >= start + {seconds}:
        break
    while time.monotonic() < start + i / 20000.0:
        pass
    for src, tag in [('{FLOODER}', b'A')] + ([('{NEIGHBOUR}', b'B')] if i % 40 == 0 else []):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src, 1024 + i % 64000))
        try:
            s.sendto(tag, dst)
        except OSError:
            pass
        s.close()
        if tag == b'A':
            sent += 1
            last = time.monotonic()
        else:
            theirs += 1
    i += 1
first = start
e = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
e.bind(('{NEIGHBOUR}', 0))
e.sendto(b'E', dst)
print(json.dumps(dict(flooder_flows=sent, neighbour_flows=theirs, seconds=last - first)))
"#
    );
    let run = pod.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "flood: {}", run.stderr);
    serde_json::from_str(run.stdout.trim()).expect("flood outcome")
}

/// The receiver's counts: the flooder's datagrams and the neighbour's.
fn received(receiver: Background) -> (u64, u64) {
    let text = receiver.output();
    let seen: std::collections::BTreeMap<String, u64> =
        serde_json::from_str(text.trim()).unwrap_or_else(|_| panic!("receiver: {text}"));
    (seen["A"], seen["B"])
}

const LIMIT: u64 = 200;
const RATE: f64 = 2000.0;
/// The default burst at that rate: a fiftieth of it.
const BURST: f64 = 40.0;

/// The connection limit: the flooder holds exactly its limit, the neighbour all its own.
fn connection_limit(variant: Backend) {
    let topo = topology();
    let _listener = tcp_listener(&topo);
    apply(
        &topo,
        variant,
        &format!("nonMasqueradeCIDRs: [198.51.100.0/24]\npodConnectionLimit: {LIMIT}\n"),
    );
    let outcome = tcp_flood(&topo.pod, 4000);
    eprintln!(
        "{variant:?}: podConnectionLimit {LIMIT}: 4000 attempts at {:.0}/s: {outcome:?}",
        outcome.attempts_per_second
    );
    assert_eq!(outcome.neighbour_failed, 0, "{outcome:?}");
    assert_eq!(outcome.neighbour_established, 100, "{outcome:?}");
    assert_eq!(outcome.flooder_established, LIMIT, "{outcome:?}");
    assert_eq!(
        outcome.flooder_other, 0,
        "refused at once, never timed out: {outcome:?}"
    );
    assert_eq!(outcome.flooder_refused, 4000 - LIMIT, "{outcome:?}");
    let listing = variant.listing(&topo.node);
    assert!(
        listing.contains(&variant.connection_limit_text(LIMIT)),
        "{listing}"
    );
}

/// The rate: the flooder's accepted flows are its burst plus the rate over the flood.
fn new_connection_rate(variant: Backend) {
    new_connection_rate_with(variant, "");
}

/// The rate with `keys` besides it (the flood goes to one destination address and port, so
/// a rate per destination holds the flooder as a rate per pod does).
fn new_connection_rate_with(variant: Backend, keys: &str) {
    let topo = topology();
    apply(
        &topo,
        variant,
        &format!("nonMasqueradeCIDRs: [198.51.100.0/24]\npodNewConnectionRate: {RATE}/s\n{keys}"),
    );
    let receiver = udp_receiver(&topo);
    let flood = udp_flood(&topo.pod, 2.0);
    let (accepted, neighbour) = received(receiver);
    let expected = BURST + RATE * flood.seconds;
    let offered = flood.flooder_flows as f64 / flood.seconds;
    eprintln!(
        "{variant:?}: podNewConnectionRate {RATE}/s burst {BURST}: {} flows offered in {:.3} s ({offered:.0}/s), {accepted} accepted (expected {expected:.0}, {:+.2} %), neighbour {neighbour} of {}",
        flood.flooder_flows,
        flood.seconds,
        (accepted as f64 / expected - 1.0) * 100.0,
        flood.neighbour_flows
    );
    assert_eq!(neighbour, flood.neighbour_flows, "the neighbour lost flows");
    assert!(
        (accepted as f64 - expected).abs() <= expected * 0.01,
        "{accepted} accepted, {expected:.0} expected"
    );
}

/// The control: without the keys every flood connection is established (the limit's check
/// above fails without the step's rules), and nothing of the share is left in the filter table.
fn unlimited(variant: Backend) {
    let topo = topology();
    let _listener = tcp_listener(&topo);
    apply(
        &topo,
        variant,
        &format!("nonMasqueradeCIDRs: [198.51.100.0/24]\npodConnectionLimit: {LIMIT}\n"),
    );
    apply(&topo, variant, "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
    let listing = variant.listing(&topo.node);
    assert!(
        !listing.contains(variant.share_mark()),
        "left behind:\n{listing}"
    );
    let outcome = tcp_flood(&topo.pod, 1000);
    assert_eq!(outcome.flooder_established, 1000, "{outcome:?}");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn connection_limit_iptables_legacy() {
    connection_limit(Backend::IptablesLegacy);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn connection_limit_iptables_nft() {
    connection_limit(Backend::IptablesNft);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn new_connection_rate_iptables_legacy() {
    new_connection_rate(Backend::IptablesLegacy);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn new_connection_rate_iptables_nft() {
    new_connection_rate(Backend::IptablesNft);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn without_the_keys_nothing_is_limited_and_nothing_left() {
    unlimited(Backend::IptablesLegacy);
    unlimited(Backend::IptablesNft);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn connection_limit_nftables() {
    connection_limit(Backend::Nftables);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn new_connection_rate_nftables() {
    new_connection_rate(Backend::Nftables);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn without_the_keys_nothing_is_limited_and_nothing_left_nftables() {
    unlimited(Backend::Nftables);
}

/// The per-destination key (`ip saddr . ip daddr . th dport`) in the kernel: the flood's one
/// destination is held to the rate.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn new_connection_rate_per_destination_nftables() {
    new_connection_rate_with(
        Backend::Nftables,
        "podNewConnectionRatePerDestination: true\n",
    );
}

/// Every key of the share in both families, with output interfaces and source CIDRs, reads
/// back from the kernel as written: the next pass (a dry run) finds nothing to apply. (The
/// kernel names a 32-bit register at the start of a 16-byte one by the 16-byte one's number.)
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn every_key_reads_back_in_sync_in_both_families_nftables() {
    let ns = super::netns::Netns::new("share-sync");
    let path = scratch_file(
        "share-config",
        "nonMasqueradeCIDRs: [198.51.100.0/24, fd00::/8]\n\
         masqueradeSourceCIDRs: [10.244.0.0/16, fd00:244::/48]\n\
         outputInterfaces: [eth*, ens5]\n\
         podConnectionLimit: 200\n\
         podNewConnectionRate: 100/s\n\
         podNewConnectionRatePerDestination: true\n",
    );
    let config_flag = format!("--config={}", path.display());
    let args = [
        "agent",
        "--once",
        "--enable-ipv6",
        "--backend=nftables",
        &config_flag,
    ];
    let run = ns.ipmasq(&args);
    assert_eq!(run.code, 0, "agent --once: {}", run.stderr);
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let run = ns.ipmasq(&dry);
    let _ = std::fs::remove_file(&path);
    assert_eq!(run.code, 0, "agent --once --dry-run: {}", run.stderr);
    let text = format!("{}{}", run.stdout, run.stderr);
    for family in ["ipv4", "ipv6"] {
        assert!(
            text.contains(&format!("# {family} (nftables): in sync, nothing to apply")),
            "{text}"
        );
    }
}
