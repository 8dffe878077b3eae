//! With packets, per backend (iptables-nft, iptables-legacy, nftables), IPv4 and IPv6:
//! existing flows follow a change. A pod sends UDP every 50 ms to an outside address whose
//! range a ConfigMap swap flips between masqueraded and kept, 20 times; the outside sees the
//! new source after each swap (the distribution is printed), while a second flow whose
//! decision never changes keeps its conntrack entry (its id, read with the `conntrack` tool,
//! is unchanged). With `--conntrack-reset=off`, the running flow keeps its old source while a
//! new flow gets the new one. An output address that moves to another address of the node
//! takes the running flow with it.

use super::egress::{count_in_log, ipmasq_on, log_of, spawn_ipmasq_on, ConfigFile};
use super::netns::{scratch_file, wait_until, Netns, PYTHON};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The addresses of one family's lab.
struct Addresses {
    pod: &'static str,
    pod_prefix: &'static str,
    pod_gateway: &'static str,
    /// The node's address towards the outside (what masquerade picks for `flipped`).
    node_out: &'static str,
    node_other: &'static str,
    /// The outside address whose range flips.
    flipped: &'static str,
    flipped_range: &'static str,
    /// The outside address of the flow whose decision never changes (always masqueraded).
    other: &'static str,
    out_prefix: &'static str,
}

const V4: Addresses = Addresses {
    pod: "192.168.77.2",
    pod_prefix: "24",
    pod_gateway: "192.168.77.1",
    node_out: "203.0.113.1",
    node_other: "198.51.100.1",
    flipped: "203.0.113.2",
    flipped_range: "203.0.113.0/24",
    other: "198.51.100.2",
    out_prefix: "24",
};

const V6: Addresses = Addresses {
    pod: "2001:db8:77::2",
    pod_prefix: "64",
    pod_gateway: "2001:db8:77::1",
    node_out: "2001:db8:f0::1",
    node_other: "2001:db8:f1::1",
    flipped: "2001:db8:f0::2",
    flipped_range: "2001:db8:f0::/64",
    other: "2001:db8:f1::2",
    out_prefix: "64",
};

/// How long a process started by a test (Python, the agent) may take to do its first thing
/// on a loaded machine: a deadline, never waited out when all goes well.
const STARTING: Duration = Duration::from_secs(30);

const FLIPPED_PORT: u16 = 5001;
const OTHER_PORT: u16 = 5002;

/// A conntrack entry: its id, and the packets it counted in the original direction.
#[derive(Debug)]
struct TrackedEntry {
    id: String,
    packets: u64,
}

/// Pod, node and outside; the pod's flows running, the outside logging the flipped flow's
/// packets (`monotonic-seconds source` a line).
struct Lab {
    pod: Netns,
    node: Netns,
    out: Netns,
    addresses: &'static Addresses,
    seen: PathBuf,
}

impl Lab {
    fn new(addresses: &'static Addresses) -> Lab {
        let a = addresses;
        let pod = Netns::new("ct-pod");
        let node = Netns::new("ct-node");
        let mut out = Netns::new("ct-out");
        let nodad = if a.pod.contains(':') { " nodad" } else { "" };
        node.sh(&format!(
            "ip link add vpod type veth peer name eth0 netns {pod} && \
             ip link add vout type veth peer name eth0 netns {out} && \
             ip addr add {gw}/{pp} dev vpod{nodad} && \
             ip addr add {n1}/{op} dev vout{nodad} && ip addr add {n2}/{op} dev vout{nodad} && \
             ip link set vpod up && ip link set vout up && \
             sysctl -qw net.ipv4.ip_forward=1 && sysctl -qw net.ipv6.conf.all.forwarding=1 && \
             sysctl -qw net.netfilter.nf_conntrack_acct=1",
            pod = pod.name,
            out = out.name,
            gw = a.pod_gateway,
            pp = a.pod_prefix,
            n1 = a.node_out,
            n2 = a.node_other,
            op = a.out_prefix,
        ));
        pod.sh(&format!(
            "ip addr add {}/{}{nodad} dev eth0 && ip link set eth0 up && ip {} route add default via {}",
            a.pod,
            a.pod_prefix,
            if nodad.is_empty() { "-4" } else { "-6" },
            a.pod_gateway
        ));
        out.sh(&format!(
            "ip addr add {}/{op}{nodad} dev eth0 && ip addr add {}/{op}{nodad} dev eth0 && ip link set eth0 up",
            a.flipped,
            a.other,
            op = a.out_prefix
        ));
        let seen = scratch_file("ct-seen", "");
        let ready = scratch_file("ct-ready", "");
        std::fs::remove_file(&ready).unwrap();
        let family = if nodad.is_empty() {
            "AF_INET"
        } else {
            "AF_INET6"
        };
        let receiver = format!(
            "import socket,select,time\n\
             f=socket.socket(socket.{family},socket.SOCK_DGRAM); f.bind(('{}',{FLIPPED_PORT}))\n\
             o=socket.socket(socket.{family},socket.SOCK_DGRAM); o.bind(('{}',{OTHER_PORT}))\n\
             open('{}','w').close()\n\
             log=open('{}','a',buffering=1)\n\
             while True:\n\
             \x20   for s in select.select([f,o],[],[])[0]:\n\
             \x20       d,addr=s.recvfrom(100)\n\
             \x20       if s is f: log.write('%.6f %s\\n' % (time.monotonic(), addr[0]))\n",
            a.flipped,
            a.other,
            ready.display(),
            seen.display(),
        );
        out.adopt(python_in(&out, &receiver));
        assert!(
            wait_until(STARTING, || ready.exists()),
            "the receiver did not bind"
        );
        let _ = std::fs::remove_file(&ready);
        Lab {
            pod,
            node,
            out,
            addresses,
            seen,
        }
    }

    /// Starts the pod's two flows (one socket a flow: the same 5-tuple all along, as a
    /// long-lived UDP client has).
    fn start_flows(&mut self) {
        let a = self.addresses;
        let family = if a.pod.contains(':') {
            "AF_INET6"
        } else {
            "AF_INET"
        };
        let sender = format!(
            "import socket,time\n\
             f=socket.socket(socket.{family},socket.SOCK_DGRAM); f.bind(('{pod}',40001))\n\
             o=socket.socket(socket.{family},socket.SOCK_DGRAM); o.bind(('{pod}',40002))\n\
             while True:\n\
             \x20   f.sendto(b'f',('{}',{FLIPPED_PORT})); o.sendto(b'o',('{}',{OTHER_PORT})); time.sleep(0.05)\n",
            a.flipped,
            a.other,
            pod = a.pod,
        );
        let child = python_in(&self.pod, &sender);
        self.pod.adopt(child);
    }

    /// The packets of the flipped flow seen so far: `(monotonic seconds, source)`.
    fn seen(&self) -> Vec<(f64, String)> {
        std::fs::read_to_string(&self.seen)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (at, source) = l.split_once(' ')?;
                Some((at.parse().ok()?, source.to_string()))
            })
            .collect()
    }

    /// Without a reset: a new flow to the flipped address leaves from `new_flow` (the rules
    /// in force are live), while the running flow's next 10 packets all still leave from
    /// `running`.
    fn assert_running_flow_stays(&self, new_flow: &str, running: &str) {
        let flipped = self.addresses.flipped;
        assert_eq!(
            super::packets::source_seen_between(&self.pod, &self.out, flipped, None),
            new_flow,
            "a new flow under the rules in force"
        );
        let after = monotonic();
        let next = || -> Vec<String> {
            self.seen()
                .into_iter()
                .filter(|(at, _)| *at >= after)
                .map(|(_, source)| source)
                .collect()
        };
        assert!(
            wait_until(Duration::from_secs(5), || next().len() >= 10),
            "the running flow stopped: {:?}",
            next()
        );
        let sources = next();
        assert!(
            sources.iter().all(|s| s == running),
            "without a reset the running flow keeps its source {running}: {sources:?}"
        );
    }

    /// When the flipped flow was first seen from `source` at or after `since`.
    fn first_from_since(&self, source: &str, since: f64) -> Option<f64> {
        self.seen()
            .into_iter()
            .find(|(at, s)| *at >= since && s == source)
            .map(|(at, _)| at)
    }

    /// The conntrack id of the pod's flow to `port`, read with the `conntrack` tool.
    fn conntrack_id(&self, port: u16) -> Option<String> {
        self.conntrack_entry(port).map(|entry| entry.id)
    }

    /// The pod's flow to `port` as the `conntrack` tool lists it. The id alone cannot tell a
    /// re-created entry (the kernel hashes the entry's memory and original tuple: a new entry
    /// in the freed slot has the old id); the packet count can (it counts from creation).
    fn conntrack_entry(&self, port: u16) -> Option<TrackedEntry> {
        let family = if self.addresses.pod.contains(':') {
            "ipv6"
        } else {
            "ipv4"
        };
        let port = port.to_string();
        let run = self.node.exec(
            "conntrack",
            &[
                "-L", "-f", family, "-p", "udp", "--dport", &port, "-o", "id",
            ],
        );
        let line = run
            .stdout
            .lines()
            .find(|l| l.contains(&format!("dport={port}")))?;
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .map(str::to_string)
        };
        Some(TrackedEntry {
            id: field("id=")?,
            packets: field("packets=")?.parse().ok()?,
        })
    }

    /// The config: the flipped range kept or not.
    fn config(&self, kept: bool) -> String {
        let a = self.addresses;
        let six = a.pod.contains(':');
        let mut cidrs = vec!["10.0.0.0/8".to_string()];
        if six {
            cidrs.push("fd00::/8".into());
        }
        if kept {
            cidrs.push(a.flipped_range.into());
        }
        let quoted: Vec<String> = cidrs.iter().map(|c| format!("\"{c}\"")).collect();
        format!(
            "{}nonMasqueradeCIDRs: [{}]\nresyncInterval: 1h\n",
            if six { "enableIPv6: true\n" } else { "" },
            quoted.join(", ")
        )
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.seen);
    }
}

fn python_in(ns: &Netns, script: &str) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", &ns.name, PYTHON, "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python")
}

/// CLOCK_MONOTONIC in seconds: the clock Python's `time.monotonic()` reads.
fn monotonic() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

fn start_agent(lab: &mut Lab, backend: &str, config: &ConfigFile, extra: &[&str]) -> PathBuf {
    let log = scratch_file("ct-log", "");
    let mut args = vec![
        "agent".to_string(),
        "--v=4".into(),
        "--metrics-addr=127.0.0.1:9723".into(),
        format!("--config={}", config.path().display()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    spawn_ipmasq_on(&mut lab.node, backend, args, &log);
    assert!(
        wait_until(STARTING, || count_in_log(&log, "rules installed")
            >= if lab.addresses.pod.contains(':') {
                2
            } else {
                1
            }),
        "the agent did not install its rules:\n{}",
        log_of(&log)
    );
    log
}

/// The agent's `ipmasq_conntrack_entries_reset_total`, read from its metrics endpoint.
fn entries_reset(lab: &Lab) -> u64 {
    let run = lab.node.exec(
        PYTHON,
        &[
            "-c",
            "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9723/metrics',timeout=5).read().decode())",
        ],
    );
    run.stdout
        .lines()
        .find_map(|l| l.strip_prefix("ipmasq_conntrack_entries_reset_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no reset counter in the metrics:\n{}{}",
                run.stdout, run.stderr
            )
        })
}

/// `explain FLIPPED --from POD -o json` on the node.
fn explain(lab: &Lab, backend: &str) -> serde_json::Value {
    let a = lab.addresses;
    let args = vec![
        "explain".to_string(),
        a.flipped.into(),
        format!("--from={}", a.pod),
        "-o".into(),
        "json".into(),
    ];
    let run = ipmasq_on(&lab.node, backend, args);
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|_| panic!("explain: {}{}", run.stdout, run.stderr))
}

/// A lab whose agent runs (with `extra` flags) on the config that masquerades the flipped
/// range, its flows started after the rules were installed and seen masqueraded.
fn masquerading(
    backend: &str,
    addresses: &'static Addresses,
    extra: &[&str],
) -> (Lab, ConfigFile, PathBuf) {
    let mut lab = Lab::new(addresses);
    let config = ConfigFile::new(&lab.config(false));
    let log = start_agent(&mut lab, backend, &config, extra);
    lab.start_flows();
    assert!(
        wait_until(STARTING, || lab
            .first_from_since(addresses.node_out, 0.0)
            .is_some()),
        "the flow was never masqueraded: {:?}\n{}",
        lab.seen(),
        log_of(&log)
    );
    (lab, config, log)
}

const FLIPS: usize = 20;

fn flows_follow_a_change(backend: &str, addresses: &'static Addresses) {
    let (lab, config, log) = masquerading(backend, addresses, &[]);
    let a = addresses;
    // The unrelated flow's first datagram leaves a moment after the flipped flow's: wait for
    // its entry as for any other event.
    let mut unrelated = None;
    wait_until(STARTING, || {
        unrelated = lab.conntrack_entry(OTHER_PORT);
        unrelated.is_some()
    });
    let unrelated = unrelated.expect("the unrelated flow is tracked");
    let mut latencies = Vec::new();
    let mut stale_packets = 0;
    let mut kept = false;
    for flip in 0..FLIPS {
        kept = !kept;
        let expected = if kept { a.pod } else { a.node_out };
        // Each flip starts just after a packet was seen; a different offset each time spreads
        // the swaps over the sender's 50 ms period (a phase, not a wait for anything).
        std::thread::sleep(Duration::from_millis((flip as u64 * 17) % 50));
        let swapped = monotonic();
        config.replace(&lab.config(kept));
        let mut seen_at = None;
        assert!(
            wait_until(Duration::from_secs(5), || {
                seen_at = lab.first_from_since(expected, swapped);
                seen_at.is_some()
            }),
            "flip {flip}: the running flow never came from {expected}: {:?}\n{}",
            lab.seen().iter().rev().take(10).collect::<Vec<_>>(),
            log_of(&log)
        );
        let seen_at = seen_at.unwrap();
        latencies.push(((seen_at - swapped) * 1000.0).max(0.0));
        stale_packets += lab
            .seen()
            .iter()
            .filter(|(at, source)| *at >= swapped && *at < seen_at && source != expected)
            .count();
    }
    // The unrelated flow sends in step with the flipped one: an entry never replaced has
    // counted (nearly) every packet the outside saw of the flipped flow.
    let sent = lab.seen().len() as u64;
    let now = lab
        .conntrack_entry(OTHER_PORT)
        .expect("the unrelated flow is tracked");
    assert!(
        now.id == unrelated.id && now.packets + 2 >= sent && now.packets > unrelated.packets,
        "the unrelated flow's conntrack entry was replaced: {unrelated:?} then {now:?}, {sent} packets sent"
    );
    // The running flow is on the decision the rules make now: explain finds nothing wrong.
    let report = explain(&lab, backend);
    assert_eq!(report["conntrack"]["contradictingTotal"], 0, "{report}");
    assert!(
        report["conntrack"]["toDestination"].as_u64() >= Some(1),
        "{report}"
    );
    let reset = entries_reset(&lab);
    assert!(
        reset >= FLIPS as u64,
        "ipmasq_conntrack_entries_reset_total {reset}"
    );
    assert!(
        log_of(&log).contains("conntrack: flows on a NAT decision this change made wrong reset")
    );
    latencies.sort_by(f64::total_cmp);
    eprintln!(
        "{backend} {}: swap -> new source over {FLIPS} flips (ms): min {:.0}, median {:.0}, p90 {:.0}, max {:.0}; all: {:?}; packets with the old source after a swap: {stale_packets}; entries reset {reset}",
        if a.pod.contains(':') { "ipv6" } else { "ipv4" },
        latencies[0],
        latencies[FLIPS / 2],
        latencies[FLIPS * 9 / 10],
        latencies[FLIPS - 1],
        latencies.iter().map(|l| l.round() as u64).collect::<Vec<_>>()
    );
    drop(lab);
    let _ = std::fs::remove_file(&log);
}

/// The control: with `--conntrack-reset=off` the running flow keeps the source it had, while
/// a flow started after the change gets the new decision (the rules are in force).
fn flows_keep_their_decision_without_reset(backend: &str, addresses: &'static Addresses) {
    let (lab, config, log) = masquerading(backend, addresses, &["--conntrack-reset=off"]);
    let a = addresses;
    // A dry run of the kept config lists the running flow and deletes nothing.
    let before = lab
        .conntrack_id(FLIPPED_PORT)
        .expect("the running flow is tracked");
    let dry = ConfigFile::new(&lab.config(true));
    let args = vec![
        "agent".to_string(),
        "--dry-run".into(),
        format!("--config={}", dry.path().display()),
    ];
    let run = ipmasq_on(&lab.node, backend, args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("conntrack: 1 of ") && run.stdout.contains("would be reset"),
        "{}",
        run.stdout
    );
    let listed = format!("reset: udp src={} dst={} sport=40001 dport={FLIPPED_PORT} id={before}: source rewritten to {}", a.pod, a.flipped, a.node_out);
    assert!(run.stdout.contains(&listed), "{listed}\n{}", run.stdout);
    assert_eq!(
        lab.conntrack_id(FLIPPED_PORT),
        Some(before),
        "a dry run deleted the entry"
    );
    let accepted = count_in_log(&log, "config accepted");
    config.replace(&lab.config(true));
    assert!(
        wait_until(Duration::from_secs(10), || count_in_log(
            &log,
            "config accepted"
        ) > accepted),
        "{}",
        log_of(&log)
    );
    lab.assert_running_flow_stays(a.pod, a.node_out);
    assert_eq!(entries_reset(&lab), 0);
    // explain names the running flow: its entry holds the node's address, the rules keep.
    let report = explain(&lab, backend);
    let flows = &report["conntrack"];
    assert_eq!(flows["contradictingTotal"], 1, "{report}");
    let flow = &flows["contradicting"][0];
    assert_eq!(flow["sourcePort"], 40001, "{report}");
    assert_eq!(flow["rewrittenTo"], a.node_out, "{report}");
    assert_eq!(flow["rulesNow"], "keep the source", "{report}");
    assert_eq!(
        Some(flow["id"].to_string()),
        lab.conntrack_id(FLIPPED_PORT),
        "explain and the conntrack tool name the same entry"
    );
    drop(lab);
    let _ = std::fs::remove_file(&log);
}

/// An output address that moves (the node's address inside the prefix changes) moves the
/// running flow with it: its entry SNATs to the old address, which the node no longer holds.
fn flows_follow_the_output_address(backend: &str) {
    let mut lab = Lab::new(&V4);
    lab.node.sh("ip addr add 203.0.113.9/24 dev vout");
    let config = ConfigFile::new(
        "outputAddress: 203.0.113.8/29\nnonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    let log = start_agent(&mut lab, backend, &config, &[]);
    lab.start_flows();
    assert!(
        wait_until(STARTING, || lab
            .first_from_since("203.0.113.9", 0.0)
            .is_some()),
        "the flow was never SNATed to 203.0.113.9: {:?}\n{}",
        lab.seen(),
        log_of(&log)
    );
    let moved = monotonic();
    lab.node
        .sh("ip addr add 203.0.113.10/24 dev vout && ip addr del 203.0.113.9/24 dev vout");
    let mut seen_at = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            seen_at = lab.first_from_since("203.0.113.10", moved);
            seen_at.is_some()
        }),
        "the running flow stayed on the old address: {:?}\n{}",
        lab.seen().iter().rev().take(10).collect::<Vec<_>>(),
        log_of(&log)
    );
    eprintln!(
        "{backend}: address moved -> running flow from the new address in {:.0} ms",
        (seen_at.unwrap() - moved) * 1000.0
    );
    assert!(entries_reset(&lab) >= 1);
    drop(lab);
    let _ = std::fs::remove_file(&log);
}

/// Flows older than the rules: the node already NATs (a foreign nat chain masquerading
/// marked packets, as kube-proxy's does, hooks conntrack in), so the pod's flows are tracked,
/// unmasqueraded, before the agent starts. Its install from nothing resets them (`reset`),
/// and they leave from the node's address; with `--conntrack-reset=off` they keep the pod's
/// address while a new flow is masqueraded.
fn flows_older_than_the_rules(backend: &str, addresses: &'static Addresses, reset: bool) {
    let mut lab = Lab::new(addresses);
    let a = addresses;
    let family = if a.pod.contains(':') { "ip6" } else { "ip" };
    lab.node.sh(&format!(
        "nft add table {family} foreign-nat && \
         nft add chain {family} foreign-nat postrouting '{{ type nat hook postrouting priority srcnat + 10; }}' && \
         nft add rule {family} foreign-nat postrouting 'meta mark & 0x4000 == 0x4000 masquerade'"
    ));
    lab.start_flows();
    assert!(
        wait_until(STARTING, || lab.first_from_since(a.pod, 0.0).is_some()),
        "the flow never arrived: {:?}",
        lab.seen()
    );
    let tracked = lab
        .conntrack_id(FLIPPED_PORT)
        .expect("the flow is tracked before the agent starts");
    let config = ConfigFile::new(&lab.config(false));
    let extra: &[&str] = if reset {
        &[]
    } else {
        &["--conntrack-reset=off"]
    };
    let started = monotonic();
    let log = start_agent(&mut lab, backend, &config, extra);
    if reset {
        let mut seen_at = None;
        assert!(
            wait_until(Duration::from_secs(5), || {
                seen_at = lab.first_from_since(a.node_out, started);
                seen_at.is_some()
            }),
            "the flow older than the rules kept the pod's address: {:?}\n{}",
            lab.seen().iter().rev().take(10).collect::<Vec<_>>(),
            log_of(&log)
        );
        // Both flows: each was tracked unmasqueraded.
        let reset = entries_reset(&lab);
        assert!(reset >= 2, "ipmasq_conntrack_entries_reset_total {reset}");
        eprintln!(
            "{backend} {family}: agent started -> flow older than the rules from the node's address in {:.0} ms",
            (seen_at.unwrap() - started) * 1000.0
        );
    } else {
        lab.assert_running_flow_stays(a.node_out, a.pod);
        assert_eq!(lab.conntrack_id(FLIPPED_PORT), Some(tracked));
        assert_eq!(entries_reset(&lab), 0);
    }
    drop(lab);
    let _ = std::fs::remove_file(&log);
}

macro_rules! per_backend {
    ($($name:ident => $backend:expr),* $(,)?) => {
        $(
            mod $name {
                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn a_running_udp_flow_follows_20_flips_and_others_keep_their_entries_v4() {
                    super::flows_follow_a_change($backend, &super::V4);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn a_running_udp_flow_follows_20_flips_and_others_keep_their_entries_v6() {
                    super::flows_follow_a_change($backend, &super::V6);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn without_reset_a_running_flow_keeps_its_old_source() {
                    super::flows_keep_their_decision_without_reset($backend, &super::V4);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn a_running_flow_follows_a_moved_output_address() {
                    super::flows_follow_the_output_address($backend);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn flows_older_than_the_rules_follow_the_first_install_v4() {
                    super::flows_older_than_the_rules($backend, &super::V4, true);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn flows_older_than_the_rules_follow_the_first_install_v6() {
                    super::flows_older_than_the_rules($backend, &super::V6, true);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn without_reset_flows_older_than_the_rules_keep_the_pod_address() {
                    super::flows_older_than_the_rules($backend, &super::V4, false);
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
