//! `--snat-log` under stress: conntrack's own event queue overflowing (ENOBUFS, provoked with
//! the agent's test-only receive-buffer knob and a burst of thousands of UDP flows; on
//! nftables, iptables-nft and iptables-legacy), and an
//! agent restarted while a pod keeps opening flows at a steady rate, and an agent stopped
//! right after a burst (every flow conntrack holds is in the log after the exit).

use super::egress::{count_in_log, log_of, with_backend};
use super::netns::{kill, wait_until, PYTHON};
use super::packets::{start_receiver_in, Topology, CONFIG, MASQ_V4, NODE_OUT_V4, POD_V4};
use super::snat_log::{
    endpoint, log_lines, receiver, sample, start_agent, wait_for_rules_installed, PORT,
};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A deadline for what a loaded machine may take; never waited out when all goes well.
const DEADLINE: Duration = Duration::from_secs(60);
const METRICS: &str = "127.0.0.1:9731";
/// The agent's test knob (src/snat/mod.rs): the events socket's receive buffer in bytes.
const RECEIVE_BUFFER_KNOB: &str = "IPMASQ_TEST_SNAT_RECEIVE_BUFFER";
/// UDP flows sent in one go to overflow the small buffer.
const BURST: usize = 5000;
/// The steady sender's flows per second.
const RATE: usize = 200;

fn scrape(topo: &Topology) -> String {
    let run = topo.node.exec(
        PYTHON,
        &[
            "-c",
            &format!("import urllib.request;print(urllib.request.urlopen('http://{METRICS}/metrics',timeout=5).read().decode())"),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
}

fn ports_in_use_v4_udp(topo: &Topology) -> Option<f64> {
    sample(
        &scrape(topo),
        &format!("ipmasq_snat_ports_in_use{{translated_address=\"{NODE_OUT_V4}\",proto=\"udp\"}}"),
    )
}

/// The truth, read apart from the agent: distinct reply destination ports of the node's UDP
/// entries translated to NODE_OUT_V4, from `conntrack -L` in the node's namespace.
fn conntrack_ports_v4_udp(topo: &Topology) -> usize {
    let run = topo
        .node
        .exec("conntrack", &["-L", "-f", "ipv4", "-p", "udp"]);
    assert_eq!(run.code, 0, "conntrack -L: {}", run.stderr);
    let mut ports = BTreeSet::new();
    for line in run.stdout.lines() {
        let values = |key: &str| -> Vec<String> {
            line.split_whitespace()
                .filter_map(|word| word.strip_prefix(key))
                .map(str::to_string)
                .collect()
        };
        let (sources, destinations, dports) = (values("src="), values("dst="), values("dport="));
        if destinations.len() == 2
            && dports.len() == 2
            && sources[0] == POD_V4
            && destinations[1] == NODE_OUT_V4
        {
            ports.insert(dports[1].clone());
        }
    }
    ports.len()
}

/// The pod ports of the log's `new` UDP lines from the pod (IPv4).
fn logged_pod_ports(log: &Path) -> HashSet<u16> {
    let prefix = format!("{POD_V4}:");
    log_lines(log)
        .iter()
        .filter(|l| l["event"] == "new" && l["proto"] == "udp")
        .filter_map(|l| l["src"].as_str()?.strip_prefix(&prefix)?.parse().ok())
        .collect()
}

fn overflow_of_conntrack_events(backend: &str) {
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new(&format!("snat-overflow-{backend}"));
    let config = dir.write("config", CONFIG);
    let log = dir.path.join("snat.log");
    let daemon_log = dir.path.join("agent.log");
    // Unreplied UDP entries live 30 s by default: long enough here, but a loaded machine
    // must not see the burst's entries end while the truth is compared.
    topo.node
        .sh("sysctl -qw net.netfilter.nf_conntrack_udp_timeout=600 || true");
    let args = with_backend(
        vec![
            "agent".into(),
            "--enable-ipv6".into(),
            format!("--config={}", config.display()),
            format!("--metrics-addr={METRICS}"),
            format!("--snat-log={}", log.display()),
        ],
        backend,
    );
    let file = std::fs::File::create(&daemon_log).expect("create daemon log");
    let child = topo
        .node
        .command(
            &crate::util::binary(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .env(RECEIVE_BUFFER_KNOB, "4096")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("spawn the agent");
    let pid = child.id();
    topo.node.adopt(child);
    assert!(
        wait_until(DEADLINE, || count_in_log(
            &daemon_log,
            "following conntrack's new and destroy events"
        ) >= 1
            && count_in_log(&daemon_log, "serving /healthz") >= 1
            && count_in_log(&daemon_log, "rules installed") >= 1),
        "the agent did not start its SNAT log:\n{}",
        log_of(&daemon_log)
    );

    // The burst: BURST UDP flows from fresh ports, as fast as one python process opens them.
    let burst = format!(
        "import socket\n\
         for i in range({BURST}):\n\
         \x20   u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.bind(('',20000+i))\n\
         \x20   u.sendto(b'x',('{MASQ_V4}',{PORT})); u.close()\n"
    );
    let run = topo.pod.exec(PYTHON, &["-c", &burst]);
    assert_eq!(run.code, 0, "burst: {}", run.stderr);
    let lost = || sample(&scrape(&topo), "ipmasq_snat_events_lost_total").unwrap_or(0.0);
    assert!(
        wait_until(DEADLINE, || lost() > 0.0),
        "no overflow counted after {BURST} flows with a 4 KiB receive buffer:\n{}",
        log_of(&daemon_log)
    );
    eprintln!("conntrack events lost {} times", lost());

    // Flows after the overflow are logged: one at a time, each awaited in the log.
    for i in 0..5u16 {
        let port = 40000 + i;
        let one = format!(
            "import socket\n\
             u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.bind(('',{port}))\n\
             u.sendto(b'x',('{MASQ_V4}',{PORT})); u.close()\n"
        );
        let run = topo.pod.exec(PYTHON, &["-c", &one]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            wait_until(DEADLINE, || logged_pod_ports(&log).contains(&port)),
            "the flow from {POD_V4}:{port}, opened after the overflow, is not in the log (no resubscription?):\n{}",
            log_of(&daemon_log)
        );
    }

    // Port pressure after the re-seed equals what conntrack holds.
    let truth = conntrack_ports_v4_udp(&topo);
    assert!(
        truth >= BURST,
        "conntrack holds {truth} of the {BURST} flows"
    );
    let mut gauge = None;
    assert!(
        wait_until(DEADLINE, || {
            gauge = ports_in_use_v4_udp(&topo);
            gauge == Some(conntrack_ports_v4_udp(&topo) as f64)
        }),
        "ports in use {gauge:?}, conntrack holds {} ports:\n{}",
        conntrack_ports_v4_udp(&topo),
        log_of(&daemon_log)
    );
    eprintln!("ports in use after the re-seed: {gauge:?} (conntrack -L: {truth})");
    let lost_before_the_stop = lost();
    kill(pid, "TERM");
    assert!(
        topo.node.wait_daemon(pid, DEADLINE).is_some(),
        "the agent did not stop"
    );
    // Every loss is said: the first with its own text (once), the next ones with their count
    // since the last message, and what the rate limit held back at the stop.
    assert_eq!(
        count_in_log(&daemon_log, "conntrack events were lost"),
        1,
        "the first loss is said once, in its own words:\n{}",
        log_of(&daemon_log)
    );
    let said_again: f64 = log_of(&daemon_log)
        .lines()
        .filter(|line| line.contains("overflowed again"))
        .map(|line| {
            let after = line
                .split("losses=")
                .nth(1)
                .unwrap_or_else(|| panic!("no count in {line:?}"));
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<f64>().expect("a count of losses")
        })
        .sum();
    eprintln!("losses said: 1 + {said_again}; counted before the stop: {lost_before_the_stop}");
    assert!(
        1.0 + said_again >= lost_before_the_stop,
        "{lost_before_the_stop} losses counted, 1 + {said_again} said:\n{}",
        log_of(&daemon_log)
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_survives_an_overflow_of_conntrack_events_nftables() {
    overflow_of_conntrack_events("nftables");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_survives_an_overflow_of_conntrack_events_iptables_nft() {
    overflow_of_conntrack_events("nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_survives_an_overflow_of_conntrack_events_iptables_legacy() {
    overflow_of_conntrack_events("legacy");
}

/// UDP flows opened just before an immediate stop.
const STOP_BURST: u16 = 20_000;
/// Their destination ports on the outside: one flow each, all from one pod port.
const STOP_BURST_FIRST_PORT: u16 = 10_000;

/// Entries in the node namespace's conntrack table (its own count, unconfirmed included).
fn conntrack_count(topo: &Topology) -> usize {
    let run = topo
        .node
        .exec("cat", &["/proc/sys/net/netfilter/nf_conntrack_count"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout.trim().parse().expect("a count")
}

/// The destination ports of the log's `new` UDP lines toward MASQ_V4.
fn logged_destination_ports(log: &Path) -> HashSet<u16> {
    let prefix = format!("{MASQ_V4}:");
    log_lines(log)
        .iter()
        .filter(|l| l["event"] == "new" && l["proto"] == "udp")
        .filter_map(|l| l["dst"].as_str()?.strip_prefix(&prefix)?.parse().ok())
        .collect()
}

/// A burst of flows, then SIGTERM as soon as conntrack holds them all (their events are on
/// the agent's socket by then, or read already): after the exit, every one is in the log.
fn drained_on_stop(backend: &str) {
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new(&format!("snat-drain-{backend}"));
    let config = dir.write("config", CONFIG);
    let log = dir.path.join("snat.log");
    let daemon_log = dir.path.join("agent.log");
    topo.node
        .sh("sysctl -qw net.netfilter.nf_conntrack_udp_timeout=600 || true");
    let args: Vec<String> = vec![
        "agent".into(),
        "--enable-ipv6".into(),
        format!("--config={}", config.display()),
        format!("--snat-log={}", log.display()),
    ];
    let pid = start_agent(&mut topo, backend, &args, &daemon_log);
    wait_for_rules_installed(&daemon_log, 1);
    let before = conntrack_count(&topo);
    let burst = format!(
        "import socket\n\
         u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.bind(('',30000))\n\
         for p in range({STOP_BURST_FIRST_PORT},{STOP_BURST_FIRST_PORT}+{STOP_BURST}):\n\
         \x20   u.sendto(b'x',('{MASQ_V4}',p))\n"
    );
    let run = topo.pod.exec(PYTHON, &["-c", &burst]);
    assert_eq!(run.code, 0, "burst: {}", run.stderr);
    assert!(
        wait_until(DEADLINE, || conntrack_count(&topo)
            >= before + usize::from(STOP_BURST)),
        "conntrack holds {} entries, {before} before a burst of {STOP_BURST}",
        conntrack_count(&topo)
    );
    let logged_at_stop = logged_destination_ports(&log).len();
    kill(pid, "TERM");
    assert!(
        topo.node.wait_daemon(pid, DEADLINE).is_some(),
        "the agent did not stop"
    );
    let logged = logged_destination_ports(&log);
    let missing: Vec<u16> = (STOP_BURST_FIRST_PORT..STOP_BURST_FIRST_PORT + STOP_BURST)
        .filter(|port| !logged.contains(port))
        .collect();
    eprintln!(
        "{STOP_BURST} flows; {logged_at_stop} in the log when SIGTERM was sent, {} after the exit",
        logged.len()
    );
    assert!(
        missing.is_empty(),
        "{} of the {STOP_BURST} flows missing from the log after the stop (first {:?}):\n{}",
        missing.len(),
        &missing[..missing.len().min(10)],
        log_of(&daemon_log)
    );
    assert_eq!(
        count_in_log(&daemon_log, "the SNAT log is drained"),
        1,
        "{}",
        log_of(&daemon_log)
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_is_drained_on_stop_nftables() {
    drained_on_stop("nftables");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_is_drained_on_stop_iptables_nft() {
    drained_on_stop("nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_is_drained_on_stop_iptables_legacy() {
    drained_on_stop("legacy");
}

/// Seconds since the epoch of an agent log line's leading RFC 3339 time (colours stripped).
fn time_of(line: &str) -> f64 {
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let stamp = plain.split_whitespace().next().unwrap_or_default();
    let number = |range: std::ops::Range<usize>| -> i64 {
        stamp
            .get(range)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no time at the start of {line:?}"))
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds: f64 = stamp
        .get(17..)
        .map(|s| s.trim_end_matches('Z'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no seconds in {stamp:?}"));
    (days * 86_400 + number(11..13) * 3_600 + number(14..16) * 60) as f64 + seconds
}

/// The time of the first line of `daemon_log` that holds `needle`.
fn logged_at(daemon_log: &Path, needle: &str) -> f64 {
    let text = log_of(daemon_log);
    let line = text
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in:\n{text}"));
    time_of(line)
}

/// The steady sender's records: pod port to the wall-clock time it sent the flow.
fn sent(record: &Path) -> HashMap<u16, f64> {
    log_of(record)
        .lines()
        .filter_map(|l| {
            let (time, port) = l.split_once(' ')?;
            Some((port.parse().ok()?, time.parse().ok()?))
        })
        .collect()
}

fn restart_mid_stream(backend: &str) {
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new(&format!("snat-stream-{backend}"));
    let config = dir.write("config", CONFIG);
    let seen_record = dir.write("seen", "");
    let sent_record = dir.write("sent", "");
    let stop = dir.path.join("stop");
    let log = dir.path.join("snat.log");
    let args: Vec<String> = vec![
        "agent".into(),
        "--enable-ipv6".into(),
        format!("--config={}", config.display()),
        format!("--snat-log={}", log.display()),
    ];
    let first_log = dir.path.join("agent-1.log");
    let pid = start_agent(&mut topo, backend, &args, &first_log);
    wait_for_rules_installed(&first_log, 1);
    topo.outside
        .sh("ip route add 192.168.77.0/24 via 198.51.100.1");
    let (listener, _ready) = start_receiver_in(&topo.outside, &receiver(&seen_record));
    topo.outside.adopt(listener);

    // RATE flows a second, each from its own port (never reused: a reused tuple would be
    // conntrack's old entry, with no new event), until the stop file appears.
    let script = format!(
        "import socket,time,os\n\
         out=open('{sent}','a'); start=time.time(); i=0\n\
         while not os.path.exists('{stop}') and i<30000:\n\
         \x20   d=start+i/{RATE}-time.time()\n\
         \x20   if d>0: time.sleep(d)\n\
         \x20   u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.bind(('',20000+i)); p=u.getsockname()[1]\n\
         \x20   now=time.time(); u.sendto(str(p).encode(),('{MASQ_V4}',{PORT})); u.close()\n\
         \x20   out.write('%.6f %d\\n'%(now,p)); out.flush(); i+=1\n",
        sent = sent_record.display(),
        stop = stop.display(),
    );
    let sender = Command::new("ip")
        .args(["netns", "exec", &topo.pod.name, PYTHON, "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the sender");
    let sender_pid = sender.id();
    topo.pod.adopt(sender);
    assert!(
        wait_until(DEADLINE, || sent(&sent_record).len() >= RATE),
        "the sender did not get going"
    );

    // The restart, mid-stream.
    kill(pid, "TERM");
    assert!(
        topo.node.wait_daemon(pid, DEADLINE).is_some(),
        "the agent did not stop"
    );
    let second_log = dir.path.join("agent-2.log");
    let pid = start_agent(&mut topo, backend, &args, &second_log);
    let at_restart = sent(&sent_record).len();
    assert!(
        wait_until(DEADLINE, || sent(&sent_record).len() >= at_restart + RATE),
        "the sender stalled"
    );
    std::fs::write(&stop, "").expect("the stop file");
    assert_eq!(
        topo.pod.wait_daemon(sender_pid, DEADLINE),
        Some(0),
        "the sender failed"
    );
    let sent = sent(&sent_record);

    // Every flow the outside saw, with the port it saw.
    let mut seen: Vec<(u16, String)> = Vec::new();
    assert!(
        wait_until(DEADLINE, || {
            seen = log_of(&seen_record)
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v[0] == "udp")
                .map(|v| {
                    let translated = endpoint(
                        v[1].as_str().unwrap_or_default(),
                        v[2].as_u64().unwrap_or_default() as u16,
                    );
                    (v[4].as_u64().unwrap_or_default() as u16, translated)
                })
                .collect();
            seen.len() == sent.len()
        }),
        "the outside saw {} of the {} flows sent",
        seen.len(),
        sent.len()
    );

    // The window no agent listened in: from the old agent's word that it stops to the new
    // agent's word that it follows the events (said after it subscribed).
    let window_start = logged_at(&first_log, "\"stopping");
    let window_end = logged_at(&second_log, "following conntrack's new and destroy events");
    assert!(window_start < window_end, "{window_start} {window_end}");
    let missing = |logged: &HashSet<(String, String)>| -> Vec<(u16, String)> {
        seen.iter()
            .filter(|(pod_port, translated)| {
                !logged.contains(&(endpoint(POD_V4, *pod_port), translated.clone()))
            })
            .cloned()
            .collect()
    };
    let logged = || -> HashSet<(String, String)> {
        log_lines(&log)
            .iter()
            .filter(|l| l["event"] == "new" && l["proto"] == "udp")
            .map(|l| {
                let field = |k: &str| l[k].as_str().unwrap_or_default().to_string();
                (field("src"), field("translated"))
            })
            .collect()
    };
    let outside_window = |flows: &[(u16, String)]| -> Vec<(u16, String, f64)> {
        flows
            .iter()
            .map(|(port, translated)| (*port, translated.clone(), sent[port]))
            .filter(|(_, _, at)| *at < window_start || *at > window_end)
            .collect()
    };
    // The log's writer may still be behind the last flows: wait for every flow outside the
    // window to be there.
    let mut not_logged = Vec::new();
    let complete = wait_until(DEADLINE, || {
        not_logged = missing(&logged());
        outside_window(&not_logged).is_empty()
    });
    assert!(
        complete,
        "flows missing from the log outside the window {window_start:.6}..{window_end:.6}: {:?}",
        outside_window(&not_logged)
    );
    let after = seen
        .iter()
        .filter(|(port, _)| sent[port] > window_end)
        .count();
    assert!(
        after >= RATE,
        "only {after} flows after the new agent subscribed"
    );
    eprintln!(
        "{} flows sent at {RATE}/s; the window without an agent lasted {:.3} s; {} flows missing from the log, all in it; {after} flows after it, all logged",
        seen.len(),
        window_end - window_start,
        not_logged.len()
    );
    kill(pid, "TERM");
    let _ = topo.node.wait_daemon(pid, DEADLINE);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_restart_mid_stream_nftables() {
    restart_mid_stream("nftables");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_restart_mid_stream_iptables_nft() {
    restart_mid_stream("nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_restart_mid_stream_iptables_legacy() {
    restart_mid_stream("legacy");
}
