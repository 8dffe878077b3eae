//! `--snat-log` with packets: TCP and UDP flows from a pod namespace through the node to an
//! outside namespace, IPv4 and IPv6; the outside records each source address and port it saw
//! (and the pod's own port, sent in the payload), and every masqueraded flow is in the log
//! with the pod's source, the translated address:port the outside saw and the destination.
//! A flow to a non-masquerade CIDR (IPv4 or IPv6) is not logged; the log rotates by size; an agent
//! restarted between two batches appends the second; `ipmasq_snat_ports_in_use` equals the
//! count of distinct translated ports the outside saw, and the busiest destination's share
//! is that count over MASQUERADE's 64,512 ports. The kernel's filter on the events socket
//! keeps the events of flows not source-NATed (and the node's own traffic) from the agent,
//! the ends of the masqueraded ones included; an end carries `packets` and `bytes` (both
//! directions, exactly what was sent) only with conntrack accounting on. With `--snat-log=-`
//! the agent's stdout holds the lines and nothing else, and `who --log -` reads them. An ICMP
//! echo is logged with its ids in place of ports.

use super::egress::{count_in_log, log_of, spawn_ipmasq_on};
use super::netns::{kill, wait_until, PYTHON};
use super::packets::{
    start_receiver_in, Topology, CONFIG, KEEP_V4, KEEP_V6, MASQ_V4, MASQ_V6, NODE_OUT_V4,
    NODE_OUT_V6, POD_V4, POD_V6,
};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flows per protocol and destination in a batch.
const FLOWS: usize = 10;
pub(super) const PORT: u16 = 5001;
const METRICS: &str = "127.0.0.1:9731";
const MAX_SIZE: u64 = 4096;
const KEEP: u32 = 5;
/// A deadline for what a loaded machine may take; never waited out when all goes well.
const DEADLINE: Duration = Duration::from_secs(30);

/// The outside's receiver: TCP and UDP on every outside address, each flow recorded as a
/// JSON line `[proto, seen address, seen port, destination, pod port]` and answered `ok`.
pub(super) fn receiver(record: &Path) -> String {
    let mut binds = String::new();
    for address in [MASQ_V4, MASQ_V6, KEEP_V4, KEEP_V6] {
        let family = if address.contains(':') {
            "AF_INET6"
        } else {
            "AF_INET"
        };
        binds.push_str(&format!(
            "t=socket.socket(socket.{family},socket.SOCK_STREAM); t.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); t.bind(('{address}',{PORT})); t.listen(128); sel.register(t,selectors.EVENT_READ,('tcp','{address}'))\n\
             u=socket.socket(socket.{family},socket.SOCK_DGRAM); u.bind(('{address}',{PORT})); sel.register(u,selectors.EVENT_READ,('udp','{address}'))\n"
        ));
    }
    format!(
        "import socket,selectors,json\n\
         sel=selectors.DefaultSelector()\n\
         {binds}\
         out=open('{record}','a')\n\
         open('READY','w').close()\n\
         while True:\n\
         \x20   for key,_ in sel.select():\n\
         \x20       proto,dst=key.data\n\
         \x20       if proto=='tcp':\n\
         \x20           c,a=key.fileobj.accept(); c.settimeout(5); d=c.recv(16); c.sendall(b'ok'); c.close()\n\
         \x20       else:\n\
         \x20           d,a=key.fileobj.recvfrom(16); key.fileobj.sendto(b'ok',a)\n\
         \x20       out.write(json.dumps([proto,a[0],a[1],dst,int(d)])+'\\n'); out.flush()\n",
        record = record.display()
    )
}

/// The pod's sender: FLOWS TCP connections and FLOWS UDP exchanges to each destination, each
/// from a fresh port that it sends as the payload.
fn sender() -> String {
    format!(
        "import socket\n\
         for dst in ['{MASQ_V4}','{MASQ_V6}','{KEEP_V4}','{KEEP_V6}']:\n\
         \x20   fam=socket.AF_INET6 if ':' in dst else socket.AF_INET\n\
         \x20   for i in range({FLOWS}):\n\
         \x20       s=socket.socket(fam,socket.SOCK_STREAM); s.settimeout(10); s.connect((dst,{PORT}))\n\
         \x20       s.sendall(str(s.getsockname()[1]).encode()); assert s.recv(2)==b'ok'; s.close()\n\
         \x20       u=socket.socket(fam,socket.SOCK_DGRAM); u.settimeout(1); u.bind(('',0))\n\
         \x20       for attempt in range(10):\n\
         \x20           u.sendto(str(u.getsockname()[1]).encode(),(dst,{PORT}))\n\
         \x20           try:\n\
         \x20               if u.recv(2)==b'ok': break\n\
         \x20           except socket.timeout: pass\n\
         \x20       else: raise SystemExit('no answer over UDP from '+dst)\n\
         \x20       u.close()\n"
    )
}

/// Whether `destination` is an outside address in a non-masquerade CIDR (IPv4 or IPv6).
fn kept(destination: &str) -> bool {
    destination == KEEP_V4 || destination == KEEP_V6
}

/// The address of a log line's `address:port` or `[address]:port`.
fn dst_address(endpoint: &str) -> String {
    let (address, _port) = endpoint.rsplit_once(':').expect("address:port");
    address.trim_matches(['[', ']']).to_string()
}

/// The kept flows' answers go back to the pod's own addresses, IPv4 and IPv6.
fn route_kept_answers(topo: &Topology) {
    topo.outside
        .sh("ip route add 192.168.77.0/24 via 198.51.100.1 && \
         ip -6 route add 2001:db8:77::/64 via 2001:db8:f1::1");
}

/// One flow as the outside saw it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Seen {
    proto: String,
    seen: String,
    seen_port: u16,
    destination: String,
    pod_port: u16,
}

fn recorded(path: &Path) -> Vec<Seen> {
    log_of(path)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a record");
            Seen {
                proto: v[0].as_str().unwrap().to_string(),
                seen: v[1].as_str().unwrap().to_string(),
                seen_port: v[2].as_u64().unwrap() as u16,
                destination: v[3].as_str().unwrap().to_string(),
                pod_port: v[4].as_u64().unwrap() as u16,
            }
        })
        .collect()
}

pub(super) fn endpoint(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// The live log and its rotated files, oldest first.
fn log_files(log: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (1..=KEEP)
        .rev()
        .map(|n| PathBuf::from(format!("{}.{n}", log.display())))
        .filter(|p| p.exists())
        .collect();
    files.push(log.to_path_buf());
    files
}

/// Every line of the log and its rotated files, parsed (a line that does not parse fails).
pub(super) fn log_lines(log: &Path) -> Vec<serde_json::Value> {
    log_files(log)
        .iter()
        .flat_map(|file| {
            log_of(file)
                .lines()
                .map(|line| {
                    serde_json::from_str::<serde_json::Value>(line)
                        .unwrap_or_else(|e| panic!("{}: {line:?}: {e}", file.display()))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The masqueraded flows of `seen` missing from the log's `new` lines.
fn missing(log: &Path, seen: &[Seen]) -> Vec<Seen> {
    let logged: HashSet<(String, String, String, String)> = log_lines(log)
        .iter()
        .filter(|l| l["event"] == "new")
        .map(|l| {
            let field = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (
                field("proto"),
                field("src"),
                field("translated"),
                field("dst"),
            )
        })
        .collect();
    seen.iter()
        .filter(|s| !kept(&s.destination))
        .filter(|s| {
            let pod = if s.destination.contains(':') {
                POD_V6
            } else {
                POD_V4
            };
            !logged.contains(&(
                s.proto.clone(),
                endpoint(pod, s.pod_port),
                endpoint(&s.seen, s.seen_port),
                endpoint(&s.destination, PORT),
            ))
        })
        .cloned()
        .collect()
}

/// Sends a batch from the pod; the records the outside added.
fn batch(topo: &Topology, record: &Path) -> Vec<Seen> {
    let before = recorded(record).len();
    let run = topo.pod.exec(PYTHON, &["-c", &sender()]);
    assert_eq!(run.code, 0, "sender: {}", run.stderr);
    let all = recorded(record);
    assert_eq!(
        all.len() - before,
        8 * FLOWS,
        "every flow reached the outside"
    );
    all[before..].to_vec()
}

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

pub(super) fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Waits until the agent whose output goes to `daemon_log` has installed its rules in
/// `families` families, or fails with its log.
pub(super) fn wait_for_rules_installed(daemon_log: &Path, families: usize) {
    assert!(
        wait_until(DEADLINE, || count_in_log(daemon_log, "rules installed")
            >= families),
        "the agent did not install its rules in {families} families:\n{}",
        log_of(daemon_log)
    );
}

pub(super) fn start_agent(
    topo: &mut Topology,
    backend: &str,
    args: &[String],
    daemon_log: &Path,
) -> u32 {
    let pid = spawn_ipmasq_on(&mut topo.node, backend, args.to_vec(), daemon_log);
    assert!(
        wait_until(DEADLINE, || count_in_log(
            daemon_log,
            "following conntrack's new and destroy events"
        ) >= 1
            && count_in_log(daemon_log, "serving /healthz") >= 1),
        "the agent did not start its SNAT log:\n{}",
        log_of(daemon_log)
    );
    pid
}

/// The pod's address and port behind a flow the outside saw.
fn pod_endpoint(s: &Seen) -> String {
    let pod = if s.destination.contains(':') {
        POD_V6
    } else {
        POD_V4
    };
    endpoint(pod, s.pod_port)
}

/// The flows `ipmasq who ... -o json` answered with; it must have found some (exit 0).
fn who_flows(answer: &crate::util::Run, asked: &str) -> Vec<serde_json::Value> {
    assert_eq!(
        answer.code, 0,
        "who {asked}: {} {}",
        answer.stdout, answer.stderr
    );
    let json: serde_json::Value = serde_json::from_str(&answer.stdout).expect("who's JSON");
    json["flows"].as_array().cloned().unwrap_or_default()
}

fn snat_log_with_packets(backend: &str) {
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new(&format!("snat-log-{backend}"));
    let config = dir.write("config", CONFIG);
    let record = dir.write("record", "");
    let log = dir.path.join("snat.log");
    let args: Vec<String> = vec![
        "agent".into(),
        "--enable-ipv6".into(),
        format!("--config={}", config.display()),
        format!("--metrics-addr={METRICS}"),
        format!("--snat-log={}", log.display()),
        format!("--snat-log-max-size={MAX_SIZE}"),
        format!("--snat-log-keep={KEEP}"),
    ];
    let daemon_log = dir.path.join("agent-1.log");
    let pid = start_agent(&mut topo, backend, &args, &daemon_log);
    wait_for_rules_installed(&daemon_log, 2);
    route_kept_answers(&topo);
    let (receiver, _ready) = start_receiver_in(&topo.outside, &receiver(&record));
    topo.outside.adopt(receiver);

    let first = batch(&topo, &record);
    for s in &first {
        let (pod, node) = if s.destination.contains(':') {
            (POD_V6, NODE_OUT_V6)
        } else {
            (POD_V4, NODE_OUT_V4)
        };
        let expected = if kept(&s.destination) { pod } else { node };
        assert_eq!(s.seen, expected, "the outside saw {s:?}");
    }
    assert!(
        wait_until(DEADLINE, || missing(&log, &first).is_empty()),
        "flows missing from the log: {:?}\n{}",
        missing(&log, &first),
        log_of(&daemon_log)
    );
    // Port pressure against the counted flows (all of them still tracked: TCP in TIME_WAIT,
    // UDP for 30 s or more).
    let metrics = scrape(&topo);
    for (translated, proto) in [
        (NODE_OUT_V4, "tcp"),
        (NODE_OUT_V4, "udp"),
        (NODE_OUT_V6, "tcp"),
        (NODE_OUT_V6, "udp"),
    ] {
        let ports: BTreeSet<u16> = first
            .iter()
            .filter(|s| s.seen == translated && s.proto == proto)
            .map(|s| s.seen_port)
            .collect();
        assert_eq!(ports.len(), FLOWS, "{translated} {proto}: {first:?}");
        let labels = format!("{{translated_address=\"{translated}\",proto=\"{proto}\"}}");
        assert_eq!(
            sample(&metrics, &format!("ipmasq_snat_ports_in_use{labels}")),
            Some(FLOWS as f64),
            "{metrics}"
        );
        let share = sample(
            &metrics,
            &format!("ipmasq_snat_busiest_destination_port_share{labels}"),
        )
        .unwrap_or_else(|| panic!("no share for {labels}:\n{metrics}"));
        assert!((share - FLOWS as f64 / 64_512.0).abs() < 1e-9, "{share}");
    }
    assert_eq!(
        sample(&metrics, "ipmasq_snat_log_dropped_total"),
        Some(0.0),
        "{metrics}"
    );

    // A restart appends: the first batch stays, the second is logged by the new agent.
    kill(pid, "TERM");
    assert!(
        topo.node.wait_daemon(pid, DEADLINE).is_some(),
        "the agent did not stop"
    );
    let daemon_log = dir.path.join("agent-2.log");
    let pid = start_agent(&mut topo, backend, &args, &daemon_log);
    let second = batch(&topo, &record);
    assert!(
        wait_until(DEADLINE, || missing(&log, &second).is_empty()),
        "flows of the second batch missing from the log: {:?}\n{}",
        missing(&log, &second),
        log_of(&daemon_log)
    );
    assert!(
        missing(&log, &first).is_empty(),
        "the restart lost the first batch"
    );

    // `ipmasq who` reads this agent's log (rotated files included) and names the pod behind
    // each translated address and port the outside saw; a kept flow's address is no answer.
    for s in &second {
        let asked = endpoint(&s.seen, s.seen_port);
        let log_arg = log.display().to_string();
        let args = [
            "who",
            asked.as_str(),
            "--log",
            &log_arg,
            "--proto",
            &s.proto,
            "-o",
            "json",
        ];
        let answer = crate::util::ipmasq(&args);
        if kept(&s.destination) {
            assert_eq!(
                answer.code, 1,
                "a kept flow has no SNAT: {} {}",
                answer.stdout, answer.stderr
            );
            continue;
        }
        let flows = who_flows(&answer, &asked);
        let want = pod_endpoint(s);
        assert!(
            flows.iter().any(|f| f["src"] == want.as_str()
                && f["dst"] == endpoint(&s.destination, PORT).as_str()),
            "who {asked} should name {want}: {}",
            answer.stdout
        );
    }

    // No flow to the non-masquerade CIDR is logged; every line keeps the key order.
    let lines = log_lines(&log);
    assert!(
        lines
            .iter()
            .all(|l| !kept(&dst_address(l["dst"].as_str().unwrap()))),
        "a kept flow was logged"
    );
    for file in log_files(&log) {
        for line in log_of(&file).lines() {
            assert!(
                line.starts_with("{\"time\":\"") && line.contains("\",\"event\":\""),
                "{line}"
            );
        }
    }
    // Rotated by size: more than one file, none past the maximum, at most KEEP rotated.
    let files = log_files(&log);
    eprintln!("{} SNAT log lines in {} files", lines.len(), files.len());
    assert!(files.len() >= 3, "no rotation: {files:?}");
    for file in &files {
        let size = std::fs::metadata(file).unwrap().len();
        assert!(size <= MAX_SIZE, "{}: {size} bytes", file.display());
    }
    assert!(!PathBuf::from(format!("{}.{}", log.display(), KEEP + 1)).exists());
    kill(pid, "TERM");
    let _ = topo.node.wait_daemon(pid, DEADLINE);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_with_packets_nftables() {
    snat_log_with_packets("nftables");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_with_packets_iptables_nft() {
    snat_log_with_packets("nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_with_packets_iptables_legacy() {
    snat_log_with_packets("legacy");
}

/// `--snat-log=-`: the lines go to the agent's standard output (here a file, as a collector's
/// pipe would take them), and nothing else does: the agent's own log is on stderr, so every
/// line of stdout is a log line in the contract's key order; `ipmasq who --log -` reads them
/// from its standard input and names the pod behind each translated address:port the outside
/// saw.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_log_to_standard_output_nftables() {
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new("snat-log-stdout");
    let config = dir.write("config", CONFIG);
    let record = dir.write("record", "");
    let stdout = dir.path.join("stdout");
    let daemon_log = dir.path.join("agent.log");
    let args = super::egress::with_backend(
        vec![
            "agent".into(),
            "--enable-ipv6".into(),
            format!("--config={}", config.display()),
            "--snat-log=-".into(),
        ],
        "nftables",
    );
    let child = topo
        .node
        .command(
            &crate::util::binary(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("create stdout"))
        .stderr(std::fs::File::create(&daemon_log).expect("create daemon log"))
        .spawn()
        .expect("spawn the agent");
    let pid = child.id();
    topo.node.adopt(child);
    assert!(
        wait_until(DEADLINE, || count_in_log(
            &daemon_log,
            "following conntrack's new and destroy events"
        ) >= 1),
        "the agent did not start its SNAT log:\n{}",
        log_of(&daemon_log)
    );
    wait_for_rules_installed(&daemon_log, 2);
    route_kept_answers(&topo);
    let (receiver, _ready) = start_receiver_in(&topo.outside, &receiver(&record));
    topo.outside.adopt(receiver);
    let flows = batch(&topo, &record);
    assert!(
        wait_until(DEADLINE, || missing(&stdout, &flows).is_empty()),
        "flows missing from the agent's stdout: {:?}\n{}",
        missing(&stdout, &flows),
        log_of(&daemon_log)
    );
    kill(pid, "TERM");
    assert!(
        topo.node.wait_daemon(pid, DEADLINE).is_some(),
        "the agent did not stop"
    );
    assert_eq!(
        count_in_log(&daemon_log, "the SNAT log is drained"),
        1,
        "the agent's own log is on stderr:\n{}",
        log_of(&daemon_log)
    );
    // Every line of stdout is a log line (log_lines fails on one that does not parse).
    let text = log_of(&stdout);
    let lines = log_lines(&stdout);
    assert_eq!(lines.len(), text.lines().count());
    for line in text.lines() {
        assert!(
            line.starts_with("{\"time\":\"") && line.contains("\",\"event\":\""),
            "not a SNAT log line on stdout: {line:?}"
        );
    }
    let masqueraded: Vec<&Seen> = flows.iter().filter(|s| !kept(&s.destination)).collect();
    for s in &masqueraded {
        let asked = endpoint(&s.seen, s.seen_port);
        let answer = crate::util::ipmasq_with_stdin(
            &[
                "who", &asked, "--log", "-", "--proto", &s.proto, "-o", "json",
            ],
            &text,
        );
        let flows = who_flows(&answer, &format!("{asked} --log -"));
        let want = pod_endpoint(s);
        assert!(
            flows.iter().any(|f| f["src"] == want.as_str()),
            "who {asked} --log - should name {want}: {}",
            answer.stdout
        );
    }
    eprintln!(
        "{} lines on the agent's stdout; who --log - named the pod behind all {} masqueraded flows",
        lines.len(),
        masqueraded.len()
    );
}

/// ICMP echoes through the node: each one's identifier plays the port's role, in the log's
/// `src` (the pod's id) and `translated` (the id the flow left with, as conntrack holds it in
/// the reply tuple) and in `ipmasq_snat_ports_in_use{proto="icmp"}`: three echoes with three
/// ids from one pod to one destination hold three, not one.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn icmp_echoes_are_logged_with_their_ids_nftables() {
    const IDS: [u16; 3] = [0x1111, 0x2222, 0x3333];
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new("snat-icmp");
    let config = dir.write("config", CONFIG);
    let log = dir.path.join("snat.log");
    let args: Vec<String> = vec![
        "agent".into(),
        "--enable-ipv6".into(),
        format!("--config={}", config.display()),
        format!("--metrics-addr={METRICS}"),
        format!("--snat-log={}", log.display()),
    ];
    let daemon_log = dir.path.join("agent.log");
    let pid = start_agent(&mut topo, "nftables", &args, &daemon_log);
    wait_for_rules_installed(&daemon_log, 2);
    // One echo request per id on a raw socket, each awaited (its reply comes back with the
    // pod's id, the node having translated it back).
    let script = format!(
        "import socket,struct\n\
         def checksum(b):\n\
         \x20   s=sum(struct.unpack('!%dH'%(len(b)//2),b)); s=(s>>16)+(s&0xffff); s+=s>>16\n\
         \x20   return ~s&0xffff\n\
         r=socket.socket(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_ICMP); r.settimeout(10)\n\
         for ident in {IDS:?}:\n\
         \x20   body=struct.pack('!BBHHH',8,0,0,ident,1)+b'ipmasq!!'\n\
         \x20   body=body[:2]+struct.pack('!H',checksum(body))+body[4:]\n\
         \x20   r.sendto(body,('{MASQ_V4}',0))\n\
         \x20   while True:\n\
         \x20       packet=r.recv(1500); icmp=packet[(packet[0]&15)*4:]\n\
         \x20       if icmp[0]==0 and struct.unpack('!H',icmp[4:6])[0]==ident: break\n"
    );
    let run = topo.pod.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "echoes: {}", run.stderr);
    // The ids the flows left with: the reply tuple's, as conntrack -L prints them.
    let listed = topo
        .node
        .sh("conntrack -L -p icmp -s 192.168.77.2 2>/dev/null");
    let translated_ids: BTreeSet<String> = listed
        .lines()
        .filter_map(|line| {
            let ids: Vec<&str> = line
                .split_whitespace()
                .filter_map(|field| field.strip_prefix("id="))
                .collect();
            ids.get(1).map(|id| id.to_string())
        })
        .collect();
    assert_eq!(translated_ids.len(), IDS.len(), "conntrack -L: {listed}");
    let icmp_lines = || -> Vec<serde_json::Value> {
        log_lines(&log)
            .into_iter()
            .filter(|l| l["event"] == "new" && l["proto"] == "icmp")
            .collect()
    };
    assert!(
        wait_until(DEADLINE, || icmp_lines().len() >= IDS.len()),
        "{} ICMP lines of {}:\n{}",
        icmp_lines().len(),
        IDS.len(),
        log_of(&daemon_log)
    );
    let lines = icmp_lines();
    let field = |key: &str| -> BTreeSet<String> {
        lines
            .iter()
            .map(|l| l[key].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        field("src"),
        IDS.iter().map(|id| endpoint(POD_V4, *id)).collect(),
        "{lines:?}"
    );
    assert_eq!(
        field("translated"),
        translated_ids
            .iter()
            .map(|id| format!("{NODE_OUT_V4}:{id}"))
            .collect(),
        "{lines:?}\nconntrack -L: {listed}"
    );
    assert_eq!(field("dst"), BTreeSet::from([endpoint(MASQ_V4, 0)]));
    let metrics = scrape(&topo);
    assert_eq!(
        sample(
            &metrics,
            &format!(
                "ipmasq_snat_ports_in_use{{translated_address=\"{NODE_OUT_V4}\",proto=\"icmp\"}}"
            )
        ),
        Some(IDS.len() as f64),
        "{metrics}"
    );
    eprintln!("ICMP echoes logged with their ids: {lines:?}");
    kill(pid, "TERM");
    let _ = topo.node.wait_daemon(pid, DEADLINE);
}

/// `count` UDP exchanges with the outside's receiver at `destination`, each from a fresh pod
/// port, each answered.
fn exchanges(topo: &Topology, destination: &str, count: usize) {
    let script = format!(
        "import socket\n\
         for i in range({count}):\n\
         \x20   u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(1); u.bind(('',0))\n\
         \x20   for attempt in range(10):\n\
         \x20       u.sendto(str(u.getsockname()[1]).encode(),('{destination}',{PORT}))\n\
         \x20       try:\n\
         \x20           if u.recv(2)==b'ok': break\n\
         \x20       except socket.timeout: pass\n\
         \x20   else: raise SystemExit('no answer from {destination}')\n\
         \x20   u.close()\n"
    );
    let run = topo.pod.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "exchanges with {destination}: {}", run.stderr);
}

/// The log's lines of `event` for UDP flows from the pod (IPv4) to MASQ_V4.
fn masqueraded_udp_lines(log: &Path, event: &str) -> usize {
    log_lines(log)
        .iter()
        .filter(|l| l["event"] == event && l["proto"] == "udp")
        .filter(|l| {
            l["dst"]
                .as_str()
                .is_some_and(|d| d == endpoint(MASQ_V4, PORT))
        })
        .count()
}

/// The kernel's filter on the events socket: flows to a non-masquerade CIDR and the node's
/// own traffic (each metrics scrape is a TCP flow on the node's loopback) are no event the
/// agent reads, at their start or their end; a masqueraded flow is, at both (a destroy
/// event's status carries IPS_SRC_NAT too). Events arrive in order, so once a masqueraded
/// flow sent after the others is logged, every earlier event would have been read.
fn kernel_filter(backend: &str) {
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new(&format!("snat-filter-{backend}"));
    let config = dir.write("config", CONFIG);
    let record = dir.write("record", "");
    let log = dir.path.join("snat.log");
    let args: Vec<String> = vec![
        "agent".into(),
        "--enable-ipv6".into(),
        format!("--config={}", config.display()),
        format!("--metrics-addr={METRICS}"),
        format!("--snat-log={}", log.display()),
    ];
    let daemon_log = dir.path.join("agent.log");
    // Accounting off (a namespace's default, said here): no counters on an end.
    topo.node.sh("sysctl -qw net.netfilter.nf_conntrack_acct=0");
    let pid = start_agent(&mut topo, backend, &args, &daemon_log);
    wait_for_rules_installed(&daemon_log, 2);
    assert_eq!(
        count_in_log(&daemon_log, "filtered_in_the_kernel=true"),
        1,
        "{}",
        log_of(&daemon_log)
    );
    route_kept_answers(&topo);
    let (receiver, _ready) = start_receiver_in(&topo.outside, &receiver(&record));
    topo.outside.adopt(receiver);
    let read = || {
        sample(&scrape(&topo), "ipmasq_snat_events_read_total")
            .unwrap_or_else(|| panic!("no ipmasq_snat_events_read_total"))
    };
    let logged = |event: &str, count: usize| {
        assert!(
            wait_until(DEADLINE, || masqueraded_udp_lines(&log, event) >= count),
            "{} of {count} masqueraded flows' {event} lines logged:\n{}",
            masqueraded_udp_lines(&log, event),
            log_of(&daemon_log)
        );
    };
    let start = read();

    // Flows kept (a non-masquerade CIDR), then one masqueraded flow: its event alone is read.
    exchanges(&topo, KEEP_V4, FLOWS);
    exchanges(&topo, MASQ_V4, 1);
    logged("new", 1);
    let after_kept = read();
    eprintln!("{backend}: events read {start} at the start, {after_kept} after {FLOWS} kept flows and 1 masqueraded (and the scrapes)");
    assert_eq!(
        after_kept,
        start + 1.0,
        "kept flows or scrapes read as events"
    );

    // Masqueraded flows: each one's new event is read.
    exchanges(&topo, MASQ_V4, FLOWS);
    logged("new", FLOWS + 1);
    assert_eq!(read(), after_kept + FLOWS as f64);

    // Their ends (deleted from the table): read, and logged; the kept flows' ends are not.
    let run = topo.node.exec(
        "conntrack",
        &["-D", "-p", "udp", "-s", POD_V4, "-d", KEEP_V4],
    );
    assert_eq!(run.code, 0, "conntrack -D (kept): {}", run.stderr);
    let run = topo.node.exec(
        "conntrack",
        &["-D", "-p", "udp", "-s", POD_V4, "-d", MASQ_V4],
    );
    assert_eq!(run.code, 0, "conntrack -D (masqueraded): {}", run.stderr);
    logged("end", FLOWS + 1);
    assert_eq!(
        read(),
        after_kept + (2 * FLOWS + 1) as f64,
        "the masqueraded flows' ends, and nothing else, read"
    );
    let ends = log_lines(&log);
    let ends: Vec<_> = ends.iter().filter(|l| l["event"] == "end").collect();
    assert!(
        ends.iter()
            .all(|l| l.get("packets").is_none() && l.get("bytes").is_none()),
        "counters on an end with accounting off: {ends:?}"
    );

    // Accounting on: each end carries both directions' packets and bytes.
    accounted_ends(&topo, &log, &daemon_log);
    kill(pid, "TERM");
    let _ = topo.node.wait_daemon(pid, DEADLINE);
}

/// Masqueraded UDP flows with accounting on: flow `k` (1..=ACCOUNTED) sends `k` datagrams,
/// each answered with `ok` and awaited (never resent), so its entry counts exactly `2k`
/// packets and `k` times both IPv4+UDP headers (28 bytes each) with the payload and `ok`;
/// deleted from the table, each one's `end` line carries that.
fn accounted_ends(topo: &Topology, log: &Path, daemon_log: &Path) {
    const ACCOUNTED: usize = 5;
    topo.node.sh("sysctl -qw net.netfilter.nf_conntrack_acct=1");
    let script = format!(
        "import socket,json\n\
         sent={{}}\n\
         for k in range(1,{ACCOUNTED}+1):\n\
         \x20   u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(10); u.bind(('',0))\n\
         \x20   payload=str(u.getsockname()[1]).encode()\n\
         \x20   for i in range(k):\n\
         \x20       u.sendto(payload,('{MASQ_V4}',{PORT})); assert u.recv(2)==b'ok'\n\
         \x20   sent[u.getsockname()[1]]=[2*k,k*(28+len(payload))+k*(28+2)]\n\
         \x20   u.close()\n\
         print(json.dumps(sent))\n"
    );
    // The earlier flows' lines are not these flows': an ephemeral port can come round again.
    let earlier = log_lines(log).len();
    let run = topo.pod.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "accounted flows: {}", run.stderr);
    let sent: std::collections::HashMap<u16, (u64, u64)> =
        serde_json::from_str(run.stdout.trim()).expect("the sender's counts");
    let run = topo.node.exec(
        "conntrack",
        &["-D", "-p", "udp", "-s", POD_V4, "-d", MASQ_V4],
    );
    assert_eq!(run.code, 0, "conntrack -D (accounted): {}", run.stderr);
    let end_of = |port: u16| {
        let src = endpoint(POD_V4, port);
        log_lines(log)
            .into_iter()
            .skip(earlier)
            .find(|l| l["event"] == "end" && l["src"] == src.as_str())
    };
    for (&port, &(packets, bytes)) in &sent {
        assert!(
            wait_until(DEADLINE, || end_of(port).is_some()),
            "no end line for {POD_V4}:{port}:\n{}",
            log_of(daemon_log)
        );
        let line = end_of(port).expect("the end line");
        assert_eq!(
            (line["packets"].as_u64(), line["bytes"].as_u64()),
            (Some(packets), Some(bytes)),
            "{POD_V4}:{port} sent {packets} packets, {bytes} bytes (both directions): {line}"
        );
    }
    eprintln!(
        "{} accounted flows' ends carry their packets and bytes: {sent:?}",
        sent.len()
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_events_are_filtered_in_the_kernel_nftables() {
    kernel_filter("nftables");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_events_are_filtered_in_the_kernel_iptables_nft() {
    kernel_filter("nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn snat_events_are_filtered_in_the_kernel_iptables_legacy() {
    kernel_filter("legacy");
}
