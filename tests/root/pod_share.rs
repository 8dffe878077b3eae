//! A pod's fair share with packets, on both iptables variants and nftables: a pod address floods new
//! connections to one outside destination at up to 20,000 a second while a neighbour pod
//! address on the same node opens its own. With `podConnectionLimit` the flooder holds exactly
//! its limit and is refused the rest at once (a TCP reset), the neighbour loses nothing; with
//! `podNewConnectionRate` the flooder's accepted flows are its burst plus its rate over the
//! flood's length, within 1 %, the neighbour's all arrive. A control run without the keys
//! shows every flood connection accepted (the check would fail without the step's rules).

use super::health::get;
use super::netns::{scratch_file, wait_until, Netns, PYTHON};
use super::packets::{Topology, MASQ_V4};
use crate::util::Scratch;
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

    /// The IPv4 connection limit's refusals by its two rules, from their counters: the count's
    /// (which remembers the pod it finds over) and the remembered pods'.
    fn refused_by_count_and_memory(self, node: &Netns) -> (u64, u64) {
        let listing = match self {
            Backend::IptablesLegacy => node.sh("iptables-legacy-save -c -t filter"),
            Backend::IptablesNft => node.sh("iptables-nft-save -c -t filter"),
            Backend::Nftables => node.sh("nft list table ip ipmasq"),
        };
        let counted = |marker: &str| {
            let line = listing
                .lines()
                .find(|l| l.contains(marker))
                .unwrap_or_else(|| panic!("no rule with {marker}:\n{listing}"));
            let packets = match self {
                Backend::Nftables => line
                    .split("counter packets ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next()),
                _ => line
                    .strip_prefix('[')
                    .and_then(|rest| rest.split(':').next()),
            };
            packets
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no count in {line}"))
        };
        match self {
            Backend::Nftables => (counted("add @pod_conn"), counted("saddr @pod_full")),
            _ => (counted("--connlimit-above"), counted("--rcheck")),
        }
    }

    /// How the listing spells a rate of `per_second`.
    fn rate_text(self, per_second: u32) -> String {
        match self {
            Backend::IptablesLegacy | Backend::IptablesNft => {
                format!("--hashlimit-above {per_second}/sec")
            }
            Backend::Nftables => format!("limit rate over {per_second}/second"),
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

/// The agent as a daemon in the node namespace, serving `/metrics` and writing a SNAT log,
/// once it is ready (its first sync done); the scratch directory holds its config and logs.
fn start_agent(topo: &mut Topology, backend: Backend, config: &str) -> Scratch {
    // One directory per namespace: the tests run side by side in one process.
    let dir = Scratch::new(&format!("pod-share-{}", topo.node.name));
    let config = dir.write("config", config);
    let config_flag = format!("--config={}", config.display());
    let addr_flag = format!("--metrics-addr={}", super::health::ADDR);
    let snat_flag = format!("--snat-log={}", dir.path.join("snat.log").display());
    let mut args = vec!["agent", "--v=4", &config_flag, &addr_flag, &snat_flag];
    args.extend_from_slice(backend.flags());
    let log = dir.path.join("agent.log");
    topo.node.spawn_ipmasq(&args, &log);
    assert!(
        wait_until(Duration::from_secs(20), || get(&topo.node, "/readyz").0
            == 200),
        "the agent did not get ready: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    dir
}

/// The lines of the agent's log that speak of the pod share or a failure.
fn agent_log(dir: &Scratch) -> String {
    std::fs::read_to_string(dir.path.join("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("share") || l.contains("ERROR") || l.contains("WARN"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The new connections from `source` the SNAT log's `refused` lines count for `limit`, and
/// whether every such line names the one destination the floods use.
fn logged_refusals(dir: &Scratch, source: &str, limit: &str) -> (u64, bool) {
    let log = std::fs::read_to_string(dir.path.join("snat.log")).unwrap_or_default();
    let mut total = 0;
    let mut one_destination = true;
    for line in log.lines() {
        let record: serde_json::Value = serde_json::from_str(line).expect(line);
        if record["event"] == "refused" && record["src"] == source && record["limit"] == limit {
            total += record["refused"].as_u64().expect(line);
            one_destination &= record["dst"] == format!("{MASQ_V4}:{PORT}").as_str();
        }
    }
    (total, one_destination)
}

/// Waits until the SNAT log counts `expected` refusals of the flooder for `limit` (the
/// agent writes a window's lines each second), and checks they name the flood's destination
/// and that the neighbour has none.
fn assert_logged_refusals(dir: &Scratch, limit: &str, expected: u64) {
    let mut logged = (0, true);
    wait_until(Duration::from_secs(10), || {
        logged = logged_refusals(dir, FLOODER, limit);
        logged.0 >= expected
    });
    assert_eq!(logged, (expected, true), "the SNAT log's refused lines");
    assert_eq!(
        logged_refusals(dir, NEIGHBOUR, limit).0,
        0,
        "the neighbour was refused nothing"
    );
}

/// Waits until the agent says it binds the share's NFLOG group (a share came into force), so
/// that no refusal of a flood comes before it.
fn await_refusals_bound(dir: &Scratch) {
    let said = "the SNAT log names the pods the pod share refuses";
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(
            dir.path.join("agent.log")
        )
        .unwrap_or_default()
        .contains(said)),
        "the agent did not bind the group: {}",
        agent_log(dir)
    );
}

/// What the kernel answers a bind of the pod share's NFLOG group (7373) from a socket of its
/// own in `node`: 0 when it was free (the socket is closed at once, freeing it again), minus
/// EPERM (-1) when another socket holds it.
fn nflog_group_bind(node: &Netns) -> i32 {
    let script = r#"
import socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
s.bind((0, 0))
attr = struct.pack("=HHB3x", 5, 1, 1)
payload = struct.pack("=BB", 0, 0) + struct.pack(">H", 7373) + attr
s.send(struct.pack("=IHHII", 16 + len(payload), (4 << 8) | 1, 1 | 4, 1, 0) + payload)
print(struct.unpack("=i", s.recv(4096)[16:20])[0])
"#;
    let run = node.exec(PYTHON, &["-c", script]);
    assert_eq!(run.code, 0, "bind: {}", run.stderr);
    run.stdout.trim().parse().expect(&run.stdout)
}

/// `ipmasq_pod_egress_limited_total`'s IPv4 sample for `limit`, if served.
fn limited(node: &Netns, limit: &str) -> Option<u64> {
    let (code, body) = get(node, "/metrics");
    assert_eq!(code, 200, "{body}");
    let series = format!("ipmasq_pod_egress_limited_total{{family=\"ipv4\",limit=\"{limit}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.trim().parse::<f64>().unwrap() as u64)
}

/// `show -o json`'s IPv4 family.
fn shown_ipv4(node: &Netns, backend: Backend) -> serde_json::Value {
    let mut args = vec!["show", "-o", "json"];
    args.extend_from_slice(backend.flags());
    let run = node.ipmasq(&args);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect(&run.stdout);
    json["families"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["family"] == "ipv4"))
        .unwrap_or_else(|| panic!("no ipv4 in {json}"))
        .clone()
}

/// `show -o json`'s pod share refusals of IPv4 for `limit`.
fn shown_refusals(node: &Netns, backend: Backend, limit: &str) -> u64 {
    let family = shown_ipv4(node, backend);
    let share = &family["podShare"];
    assert_eq!(share["installed"], true, "{family}");
    share["refusals"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["limit"] == limit))
        .and_then(|r| r["refused"].as_u64())
        .unwrap_or_else(|| panic!("no {limit} refusals in {share}"))
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

/// What the UDP flood sent: the flooder's flows, the time from its first to its last, and
/// when each was sent (seconds from the start).
#[derive(Debug, serde::Deserialize)]
struct UdpFlood {
    flooder_flows: u64,
    neighbour_flows: u64,
    seconds: f64,
    times: Vec<f64>,
}

impl UdpFlood {
    /// The flows a token bucket of `rate` a second and depth `burst`, full at the start,
    /// lets through at the times they were sent: what the share should accept of this flood,
    /// however evenly the sender (on a busy machine) managed to send.
    fn bucket_accepts(&self, rate: f64, burst: f64) -> f64 {
        let (mut tokens, mut last, mut accepted) = (burst, 0.0, 0.0);
        for &t in &self.times {
            tokens = (tokens + (t - last) * rate).min(burst);
            last = t;
            if tokens >= 1.0 {
                tokens -= 1.0;
                accepted += 1.0;
            }
        }
        accepted
    }
}

/// New UDP flows (one datagram from a port of its own each) from the flooder for `seconds`,
/// paced at 20,000 a second, every 100th one from the neighbour too (200 a second, well under
/// either rate: an unreplied UDP flow's every datagram is NEW to conntrack, so the neighbour's
/// own share counts them all); then the neighbour's end.
fn udp_flood(pod: &Netns, seconds: f64) -> UdpFlood {
    let script = format!(
        r#"
import json, socket, time
dst = ('{MASQ_V4}', {PORT})
sent = theirs = 0
times = []
start = time.monotonic()
i = 0
while True:
    now = time.monotonic()
    if now >= start + {seconds}:
        break
    while time.monotonic() < start + i / 20000.0:
        pass
    for src, tag in [('{FLOODER}', b'A')] + ([('{NEIGHBOUR}', b'B')] if i % 100 == 0 else []):
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
            times.append(last - start)
        else:
            theirs += 1
    i += 1
first = start
e = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
e.bind(('{NEIGHBOUR}', 0))
e.sendto(b'E', dst)
print(json.dumps(dict(flooder_flows=sent, neighbour_flows=theirs, seconds=last - first, times=times)))
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

/// The connection limit: the flooder holds exactly its limit, the neighbour all its own, and
/// the agent's metric and `show` count every refusal the flooder saw.
fn connection_limit(variant: Backend) {
    let mut topo = topology();
    let _listener = tcp_listener(&topo);
    let agent = start_agent(
        &mut topo,
        variant,
        &format!("nonMasqueradeCIDRs: [198.51.100.0/24]\npodConnectionLimit: {LIMIT}\n"),
    );
    await_refusals_bound(&agent);
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
    // The count refused the first over it and remembered the pod: the rest of the flood was
    // refused by the lookup, without a recount.
    let (recounted, remembered) = variant.refused_by_count_and_memory(&topo.node);
    assert!(
        recounted >= 1 && remembered >= 1,
        "recounted {recounted}, remembered {remembered}"
    );
    assert_eq!(recounted + remembered, outcome.flooder_refused);
    let mut scraped = None;
    wait_until(Duration::from_secs(10), || {
        scraped = limited(&topo.node, "connections");
        scraped == Some(outcome.flooder_refused)
    });
    assert_eq!(scraped, Some(outcome.flooder_refused), "the metric");
    assert_eq!(limited(&topo.node, "rate"), None, "no rate configured");
    assert_logged_refusals(&agent, "connections", outcome.flooder_refused);
    assert_eq!(
        nflog_group_bind(&topo.node),
        -1,
        "the agent holds the group while a share is in force"
    );
    assert_eq!(
        shown_refusals(&topo.node, variant, "connections"),
        outcome.flooder_refused,
        "show"
    );
    // The flooder's and the neighbour's flows are still tracked (closing): the busiest first.
    let busiest = &shown_ipv4(&topo.node, variant)["busiestPods"]["pods"];
    assert_eq!(
        busiest,
        &serde_json::json!([
            {"address": FLOODER, "connections": LIMIT},
            {"address": NEIGHBOUR, "connections": 100},
        ]),
        "show's busiest pods"
    );
    let explained = topo.node.ipmasq(
        &["explain", MASQ_V4, "--from", FLOODER]
            .into_iter()
            .chain(variant.flags().iter().copied())
            .collect::<Vec<_>>(),
    );
    assert!(
        explained.stdout.contains("at most 200 connections at once")
            && explained.stdout.contains(&format!(
                "busiest pods (masqueraded flows tracked): {FLOODER} 200"
            )),
        "{}",
        explained.stdout
    );
    // The share taken out of the config: the agent lets the group go.
    let next = agent.path.join("config.next");
    std::fs::write(&next, "nonMasqueradeCIDRs: [198.51.100.0/24]\n").unwrap();
    std::fs::rename(&next, agent.path.join("config")).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || nflog_group_bind(&topo.node)
            == 0),
        "the NFLOG group is still held without a share: {}",
        agent_log(&agent)
    );
}

/// The rate: the flooder's accepted flows are its burst plus the rate over the flood, and the
/// metric counts every flow refused; then the rate is lowered on the running node, and the
/// kernel enforces the new one (a hashlimit table keeps the settings it was made with, so a
/// rewritten rule under the old table's name would still let the old rate through).
fn new_connection_rate(variant: Backend) {
    new_connection_rate_with(variant, "");
}

/// The rate with `keys` besides it (the flood goes to one destination address and port, so
/// a rate per destination holds the flooder as a rate per pod does).
fn new_connection_rate_with(variant: Backend, keys: &str) {
    let mut topo = topology();
    let agent = start_agent(
        &mut topo,
        variant,
        &format!("nonMasqueradeCIDRs: [198.51.100.0/24]\npodNewConnectionRate: {RATE}/s\n{keys}"),
    );
    await_refusals_bound(&agent);
    let first = flood_at_rate(&topo, variant, &agent, RATE, BURST);
    assert_logged_refusals(&agent, "rate", first);
    let lower = RATE / 2.0;
    let config = agent.path.join("config");
    let next = agent.path.join("config.next");
    std::fs::write(
        &next,
        format!("nonMasqueradeCIDRs: [198.51.100.0/24]\npodNewConnectionRate: {lower}/s\n{keys}"),
    )
    .unwrap();
    std::fs::rename(&next, &config).unwrap();
    let saved = variant.rate_text(lower as u32);
    assert!(
        wait_until(Duration::from_secs(20), || variant
            .listing(&topo.node)
            .contains(&saved)),
        "the lower rate was not applied: {}",
        agent_log(&agent)
    );
    let second = flood_at_rate(
        &topo,
        variant,
        &agent,
        lower,
        (lower / 50.0).ceil().max(5.0),
    );
    assert_logged_refusals(&agent, "rate", first + second);
}

/// One UDP flood of 2 s at 20,000 flows a second; the flooder's accepted flows within 1 % of
/// the token bucket `rate`/`burst` replayed over its send times, the neighbour's all through,
/// and the metric equal to the flows refused; returns how many were.
fn flood_at_rate(topo: &Topology, variant: Backend, agent: &Scratch, rate: f64, burst: f64) -> u64 {
    let receiver = udp_receiver(topo);
    let flood = udp_flood(&topo.pod, 2.0);
    let (accepted, neighbour) = received(receiver);
    let expected = flood.bucket_accepts(rate, burst);
    let offered = flood.flooder_flows as f64 / flood.seconds;
    eprintln!(
        "{variant:?}: podNewConnectionRate {rate}/s burst {burst}: {} flows offered in {:.3} s ({offered:.0}/s), {accepted} accepted (expected {expected:.0}, {:+.2} %), neighbour {neighbour} of {}",
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
    let refused = flood.flooder_flows - accepted;
    let mut scraped = None;
    wait_until(Duration::from_secs(10), || {
        scraped = limited(&topo.node, "rate");
        scraped == Some(refused)
    });
    assert_eq!(
        scraped,
        Some(refused),
        "the metric (the rule's counter, from 0 when the rule was written); the agent's log:\n{}",
        agent_log(agent)
    );
    refused
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

/// Both families with every key: the rules read back as written (show finds the node in sync,
/// a second pass writes nothing), and cleanup leaves nothing of them in either filter table.
fn both_families_round_trip_and_clean_up(variant: Backend) {
    let topo = topology();
    let config = "nonMasqueradeCIDRs: [198.51.100.0/24, '2001:db8:f1::/64']\npodConnectionLimit: 300\npodNewConnectionRate: 7/s\npodNewConnectionBurst: 3\npodNewConnectionRatePerDestination: true\n";
    let path = scratch_file("share-config", config);
    let config_flag = format!("--config={}", path.display());
    let mut args = vec!["agent", "--once", "--enable-ipv6", &config_flag];
    args.extend_from_slice(variant.flags());
    let first = topo.node.ipmasq(&args);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let mut dry = args.clone();
    dry.push("--dry-run");
    let second = topo.node.ipmasq(&dry);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        !second.stdout.contains("*filter") && !second.stderr.contains("*filter"),
        "a second pass would write the share again:\n{}\n{}",
        second.stdout,
        second.stderr
    );
    // A neighbour deletes the FORWARD jump and flushes the limit chain: the next pass repairs
    // both, and only them.
    let tool = match variant {
        Backend::IptablesLegacy => "iptables-legacy",
        Backend::IptablesNft => "iptables-nft",
        Backend::Nftables => unreachable!("an iptables test"),
    };
    topo.node.sh(&format!(
        "{tool} -D FORWARD 1 && {tool} -F IP-MASQ-AGENT-LIMIT"
    ));
    let repair = topo.node.ipmasq(&args);
    assert_eq!(repair.code, 0, "{}", repair.stderr);
    assert!(
        repair.stderr.contains("rules repaired"),
        "the repair is said: {}",
        repair.stderr
    );
    let listing = variant.listing(&topo.node);
    assert!(
        listing.contains("-A FORWARD -m comment") && listing.contains("--connlimit-above 300"),
        "{listing}"
    );
    let mut show = vec!["show", "-o", "json", "--enable-ipv6", &config_flag];
    show.extend_from_slice(variant.flags());
    let shown = topo.node.ipmasq(&show);
    let json: serde_json::Value = serde_json::from_str(&shown.stdout)
        .unwrap_or_else(|_| panic!("show: {} {}", shown.stdout, shown.stderr));
    let _ = std::fs::remove_file(&path);
    assert_eq!(json["sync"]["inSync"], true, "{json}");
    for family in json["families"].as_array().unwrap() {
        assert_eq!(family["podShare"]["installed"], true, "{family}");
    }
    let mut cleanup = vec!["cleanup"];
    cleanup.extend_from_slice(variant.flags());
    let run = topo.node.ipmasq(&cleanup);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let tool = match variant {
        Backend::IptablesLegacy => "legacy",
        Backend::IptablesNft => "nft",
        Backend::Nftables => unreachable!("an iptables test"),
    };
    for v6 in [false, true] {
        let saved = topo.node.save(tool, v6, Some("filter"));
        assert!(!saved.contains("IP-MASQ-AGENT"), "left behind:\n{saved}");
    }
}

/// A Python `attempt()` (the script imports `socket`): one TCP connection from the flooder to
/// the outside's listener, the socket when established, None (the socket closed) when refused.
fn python_attempt() -> String {
    format!(
        "def attempt():\n\
         \x20   s = socket.socket()\n\
         \x20   s.bind(('{FLOODER}', 0))\n\
         \x20   try:\n\
         \x20       s.connect(('{MASQ_V4}', {PORT}))\n\
         \x20       return s\n\
         \x20   except OSError:\n\
         \x20       s.close()\n\
         \x20       return None\n"
    )
}

/// A pod limited to 5 connections by `variant`, and a listener outside to hold them with.
struct LimitedTo5 {
    /// Declared first, so stopped before the namespaces go.
    _listener: Background,
    topo: Topology,
}

fn limited_to_5_connections(variant: Backend) -> LimitedTo5 {
    let topo = topology();
    let listener = tcp_listener(&topo);
    apply(
        &topo,
        variant,
        "nonMasqueradeCIDRs: [198.51.100.0/24]\npodConnectionLimit: 5\n",
    );
    LimitedTo5 {
        _listener: listener,
        topo,
    }
}

/// What the docs say of `connlimit` and a neighbour's rewrite of the filter table, proven: a
/// pod holds its limit of 5; another program then adds a rule to the filter table; with
/// iptables-legacy (the whole table replaced) the pod opens 5 more, with iptables-nft (our rule
/// untouched) none (the pods remembered over the count emptied first: that memory outlives
/// either rewrite).
fn count_after_a_neighbours_rewrite(variant: Backend) -> u64 {
    let limited = limited_to_5_connections(variant);
    let topo = &limited.topo;
    let go = scratch_file("share-go", "");
    std::fs::remove_file(&go).unwrap();
    let held = scratch_file("share-held", "");
    std::fs::remove_file(&held).unwrap();
    let holder = spawn_in(
        &topo.pod,
        &format!(
            "import os, socket, time\n\
             {attempt}\
             first = [attempt() for _ in range(7)]\n\
             open('{held}', 'w').write(str(sum(s is not None for s in first)))\n\
             while not os.path.exists('{go}'):\n\
             \x20   time.sleep(0.01)\n\
             second = [attempt() for _ in range(7)]\n\
             print(sum(s is not None for s in first), sum(s is not None for s in second))\n",
            attempt = python_attempt(),
            held = held.display(),
            go = go.display()
        ),
    );
    assert!(
        wait_until(Duration::from_secs(20), || std::fs::read_to_string(&held)
            .is_ok_and(|t| !t.is_empty())),
        "the pod never held its connections"
    );
    let tool = match variant {
        Backend::IptablesLegacy => "iptables-legacy",
        Backend::IptablesNft => "iptables-nft",
        Backend::Nftables => unreachable!("an iptables test"),
    };
    topo.node
        .sh(&format!("{tool} -A INPUT -p udp --dport 9 -j ACCEPT"));
    // The pod the count found over is remembered a second (refused without a recount): the
    // memory emptied, the count alone decides the second round.
    topo.node
        .sh("echo / > /proc/net/xt_recent/IP-MASQ-AGENT-FULL");
    std::fs::write(&go, "").unwrap();
    let out = holder.output();
    let _ = std::fs::remove_file(&go);
    let _ = std::fs::remove_file(&held);
    let counts: Vec<u64> = out.split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(counts[0], 5, "{variant:?}: the limit held at first: {out}");
    counts[1]
}

/// The memory of a pod over its count lapses: a pod at its limit of 5, refused a sixth (and
/// so remembered), resets one of its connections; its next attempts are refused while it is
/// remembered (up to the memory's 100 ms with nftables, 1 s with iptables), then one goes
/// through: the freed slot is the pod's again. Returns the connections held at first, whether
/// the pod got its slot back, and the attempts refused in between.
fn a_freed_slot_after_the_memory(variant: Backend) -> (u64, bool, u64) {
    let limited = limited_to_5_connections(variant);
    let topo = &limited.topo;
    let run = topo.pod.exec(
        PYTHON,
        &[
            "-c",
            &format!(
                "import socket, struct, time\n\
                 {attempt}\
                 first = [attempt() for _ in range(6)]\n\
                 held = [s for s in first if s is not None]\n\
                 held[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n\
                 held[0].close()\n\
                 refused, back, deadline = 0, None, time.monotonic() + 20\n\
                 while back is None and time.monotonic() < deadline:\n\
                 \x20   back = attempt()\n\
                 \x20   if back is None:\n\
                 \x20       refused += 1\n\
                 \x20       time.sleep(0.005)\n\
                 print(len(held), int(back is not None), refused)\n",
                attempt = python_attempt()
            ),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let n: Vec<u64> = run
        .stdout
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    (n[0], n[1] == 1, n[2])
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_pod_remembered_over_its_count_gets_a_freed_slot_back() {
    for variant in [
        Backend::IptablesLegacy,
        Backend::IptablesNft,
        Backend::Nftables,
    ] {
        let (held, back, refused) = a_freed_slot_after_the_memory(variant);
        eprintln!("{variant:?}: held {held}, back {back}, refused meanwhile {refused}");
        assert_eq!(held, 5, "{variant:?}: the limit held");
        assert!(back, "{variant:?}: the freed slot never came back");
    }
}

/// A filter table iptables-nft cannot show (a rule nft wrote in a form iptables cannot print)
/// is a failed observation of the share: the pass fails and says why, and nothing is written
/// (before, every pass inserted another FORWARD jump into a table it could not read).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn an_incompatible_filter_table_is_a_failed_observation() {
    let topo = topology();
    topo.node.sh(
        "nft add table ip filter && nft add chain ip filter FORWARD '{ type filter hook forward priority 0; }' && nft add rule ip filter FORWARD ct state new counter",
    );
    let before = topo.node.sh("nft list table ip filter");
    for _ in 0..2 {
        let path = scratch_file(
            "share-config",
            "nonMasqueradeCIDRs: [198.51.100.0/24]\npodConnectionLimit: 10\n",
        );
        let config_flag = format!("--config={}", path.display());
        let mut args = vec!["agent", "--once", &config_flag];
        args.extend_from_slice(Backend::IptablesNft.flags());
        let run = topo.node.ipmasq(&args);
        let _ = std::fs::remove_file(&path);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(
            run.stderr.contains("cannot show the filter table")
                && run.stderr.contains("is incompatible"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(
        topo.node.sh("nft list table ip filter"),
        before,
        "the table is untouched"
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_neighbours_rewrite_restarts_the_count_with_legacy_only() {
    assert_eq!(
        count_after_a_neighbours_rewrite(Backend::IptablesLegacy),
        5,
        "legacy forgets the count"
    );
    assert_eq!(
        count_after_a_neighbours_rewrite(Backend::IptablesNft),
        0,
        "iptables-nft keeps it"
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn both_families_round_trip_and_clean_up_iptables() {
    both_families_round_trip_and_clean_up(Backend::IptablesLegacy);
    both_families_round_trip_and_clean_up(Backend::IptablesNft);
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
