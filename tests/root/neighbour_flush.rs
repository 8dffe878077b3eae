//! A neighbour's flush of our jump or table, repaired as soon as the kernel announces the
//! commit, not at the next resync (an hour here): proven with packets (a new flow after each
//! flush leaves with the node's address again), counted in `/metrics`, and a neighbour that
//! keeps deleting our rules every 10 ms paced and said, its fight ended with our rules in.

use super::egress::{count_in_log, log_of};
use super::netns::{kill, wait_until, Netns, PYTHON};
use super::packets::{source_seen_between, start_receiver_in, Topology, MASQ_V4, NODE_OUT_V4};
use super::snat_log::sample;
use std::time::{Duration, Instant};

/// Far inside the hour's resync: a repair within it came from the notification.
const PATIENCE: Duration = Duration::from_secs(20);
const METRICS: &str = "127.0.0.1:9741";
const CONFIG: &str = "resyncInterval: 1h\nnonMasqueradeCIDRs: [198.51.100.0/24]\n";

/// A backend, how a neighbour damages its rules, and how to tell they are in.
struct Case {
    /// For the scratch directory.
    tag: &'static str,
    flags: &'static [&'static str],
    /// Each neighbour's damage, by name.
    damages: &'static [(&'static str, &'static str)],
    /// A fighting neighbour: one long-lived process that reads `fight_step` lines from its
    /// stdin and commits each as it comes (no process spawned per step, so the pace holds on
    /// a loaded machine).
    fighter: &'static str,
    fight_step: &'static str,
    /// Prints our rules; they are in when it succeeds and names the masquerade.
    list: &'static str,
    /// What a TCP connection opened in the gap (the first damage) prints at the outside: its
    /// peer, and how many of its two lines (one in the gap, one after the repair) arrived.
    /// None: not asserted (what the kernel does is not stable, below).
    tcp_in_the_gap: Option<&'static str>,
}

/// The table left unheld (`--nftables-table-owner=false`, as on a kernel before 6.9): a held
/// one refuses the neighbour ([`a_held_table_refuses_a_neighbour_and_outlives_its_agent`]).
const NFTABLES: Case = Case {
    tag: "neighbour-flush-nftables",
    flags: &["--backend=nftables", "--nftables-table-owner=false"],
    damages: &[
        ("our table deleted", "nft delete table ip ipmasq"),
        ("the whole ruleset flushed", "nft flush ruleset"),
    ],
    fighter: "nft -i",
    fight_step: "delete table ip ipmasq\\n",
    list: "nft list table ip ipmasq",
    // Not asserted: with our whole table deleted and put back, the kernel on 6.18 mostly stopped
    // the connection once the table was back (its second line never arrived; seen with `nft`
    // alone too), but in some runs the client never connected during the gap at all. Not
    // understood; the guide says so.
    tcp_in_the_gap: None,
};

const IPTABLES_NFT: Case = Case {
    tag: "neighbour-flush-iptables-nft",
    flags: &["--iptables-mode=nft"],
    damages: &[
        ("POSTROUTING flushed", "iptables-nft -t nat -F POSTROUTING"),
        (
            "nat flushed and user chains deleted",
            // One commit, as `-F` then `-X` would do: the agent repairs between two commands.
            "printf '*nat\\nCOMMIT\\n' | iptables-nft-restore",
        ),
    ],
    fighter: "iptables-nft-restore --noflush",
    fight_step: "*nat\\n-F POSTROUTING\\nCOMMIT\\n",
    list: "iptables-nft -t nat -S POSTROUTING && iptables-nft -t nat -S IP-MASQ-AGENT",
    // POSTROUTING's hook stays: the connection goes on with the pod's address.
    tcp_in_the_gap: Some("192.168.77.2 2"),
};

fn rules_in(node: &Netns, case: &Case) -> bool {
    let run = node.exec("sh", &["-c", case.list]);
    run.code == 0
        && run.stdout.contains("masquerade") | run.stdout.contains("MASQUERADE")
        && (case.flags[0] == "--backend=nftables" || run.stdout.contains("-j IP-MASQ-AGENT"))
}

fn scrape(node: &Netns) -> String {
    let run = node.exec(
        PYTHON,
        &[
            "-c",
            &format!("import urllib.request;print(urllib.request.urlopen('http://{METRICS}/metrics',timeout=5).read().decode())"),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
}

/// The agent's CPU time so far (user + system), from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the agent's stat");
    let after_name = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn a_neighbours_flush_is_repaired_before_the_resync(case: &Case) {
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new(case.tag);
    let config = dir.write("config", CONFIG);
    let log = dir.path.join("agent.log");
    let config_flag = format!("--config={}", config.display());
    let metrics_flag = format!("--metrics-addr={METRICS}");
    let mut args = vec!["agent", config_flag.as_str(), metrics_flag.as_str()];
    args.extend_from_slice(case.flags);
    let pid = topo.node.spawn_ipmasq(&args, &log);
    assert!(
        wait_until(PATIENCE, || rules_in(&topo.node, case)),
        "never installed:\n{}",
        log_of(&log)
    );
    let masqueraded =
        |topo: &Topology| source_seen_between(&topo.pod, &topo.outside, MASQ_V4, None);
    assert_eq!(
        masqueraded(&topo),
        NODE_OUT_V4,
        "masqueraded before any flush"
    );
    for (count, (what, damage)) in case.damages.iter().enumerate() {
        topo.node.sh(damage);
        let flushed = Instant::now();
        assert!(
            wait_until(PATIENCE, || rules_in(&topo.node, case)),
            "{what}: not repaired within {PATIENCE:?} (the resync is an hour):\n{}",
            log_of(&log)
        );
        eprintln!(
            "{what}: rules back, seen {:?} after the flush",
            flushed.elapsed()
        );
        assert_eq!(
            masqueraded(&topo),
            NODE_OUT_V4,
            "{what}: a new flow after the repair"
        );
        let metrics = scrape(&topo.node);
        let commits = sample(&metrics, "ipmasq_foreign_commits_total").unwrap_or(0.0);
        assert!(
            commits >= (count + 1) as f64,
            "{what}: {commits} foreign commits counted"
        );
    }
    assert!(
        count_in_log(
            &log,
            "a commit not known to be ours changed the rules we own: checking them now"
        ) >= 1,
        "{}",
        log_of(&log)
    );
    a_flow_started_in_the_gap_is_masqueraded_after_the_repair(&topo, case, pid, &log);
    a_fighting_neighbour_is_paced_and_said(&topo, case, pid, &log);
    kill(pid, "TERM");
}

/// A UDP flow that starts while our rules are flushed leaves with the pod's address and its
/// conntrack entry keeps that; the repair resets it (`--conntrack-reset=connectionless`, the
/// default), so the flow's next datagram leaves with the node's. The gap is held open by
/// stopping the agent (SIGSTOP) before the flush; SIGCONT lets it hear the commit.
fn a_flow_started_in_the_gap_is_masqueraded_after_the_repair(
    topo: &Topology,
    case: &Case,
    pid: u32,
    log: &std::path::Path,
) {
    let receiver = "import socket\n\
        s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
        s.bind(('MASQ',40998))\n\
        open('READY','w').close()\n\
        s.settimeout(20)\n\
        for _ in range(2):\n    d,a=s.recvfrom(100)\n    print(a[0],flush=True)\n"
        .replace("MASQ", MASQ_V4);
    let (listener, ready) = start_receiver_in(&topo.outside, &receiver);
    // The same source port each time: the same flow, the same conntrack entry.
    let send_one = || {
        let sender = format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             s.bind(('0.0.0.0',40997))\ns.sendto(b'x',('{MASQ_V4}',40998))\n"
        );
        let run = topo.pod.exec(PYTHON, &["-c", &sender]);
        assert_eq!(run.code, 0, "sender: {}", run.stderr);
    };
    let repairs =
        || count_in_log(log, "\"rules installed\"") + count_in_log(log, "\"rules repaired\"");
    let repairs_before = repairs();
    kill(pid, "STOP");
    topo.node.sh(case.damages[0].1);
    send_one();
    let tcp = case.tcp_in_the_gap.map(|_| TcpAcrossTheGap::open(topo));
    kill(pid, "CONT");
    assert!(
        wait_until(PATIENCE, || rules_in(&topo.node, case)
            && repairs() > repairs_before),
        "not repaired after SIGCONT:\n{}",
        log_of(log)
    );
    send_one();
    if let (Some(tcp), Some(want)) = (tcp, case.tcp_in_the_gap) {
        assert_eq!(
            tcp.finish(),
            want,
            "a TCP connection opened in the gap, after the repair:\n{}",
            log_of(log)
        );
    }
    let out = listener.wait_with_output().expect("receiver output");
    let _ = std::fs::remove_file(&ready);
    let sources = String::from_utf8_lossy(&out.stdout).to_string();
    let sources: Vec<&str> = sources.lines().collect();
    assert_eq!(
        sources,
        [super::packets::POD_V4, NODE_OUT_V4],
        "the flow's first datagram leaked in the gap; after the repair its entry is reset:\n{}",
        log_of(log)
    );
}

/// A TCP connection opened while our rules are flushed: the outside prints its peer and how many
/// of the client's two lines arrived, one sent in the gap and one after the repair (5 s at most
/// for them, once connected).
struct TcpAcrossTheGap {
    server: std::process::Child,
    ready: std::path::PathBuf,
    client: std::process::Child,
    /// Holds the client's files: `one` once its first line is sent, `two` to send the second.
    files: crate::util::Scratch,
}

impl TcpAcrossTheGap {
    /// The server, then the client's connection and first line (waited for). The outside is
    /// given a route back to the pods, as a peer that answers a pod's own address would need.
    fn open(topo: &Topology) -> TcpAcrossTheGap {
        topo.outside.sh(&format!(
            "ip route replace 192.168.77.0/24 via {NODE_OUT_V4}"
        ));
        let server = format!(
            "import socket\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_STREAM)\n\
             s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             s.bind(('{MASQ_V4}',40995))\ns.listen(1)\n\
             open('READY','w').close()\n\
             s.settimeout(30)\nc,a=s.accept()\nc.settimeout(5)\n\
             data=b''\n\
             try:\n\
             \x20   while data.count(b'\\n')<2:\n\
             \x20       d=c.recv(100)\n\
             \x20       if not d: break\n\
             \x20       data+=d\n\
             except OSError:\n    pass\n\
             print(a[0],data.count(b'\\n'))\n"
        );
        let (server, ready) = start_receiver_in(&topo.outside, &server);
        let connected = crate::util::Scratch::new("tcp-gap");
        let said_one = connected.path.join("one");
        let go_on = connected.path.join("two");
        let client = format!(
            "import os,socket,time\n\
             c=socket.create_connection(('{MASQ_V4}',40995),timeout=10)\n\
             c.sendall(b'one\\n')\nopen('{one}','w').close()\n\
             while not os.path.exists('{two}'): time.sleep(0.01)\n\
             c.sendall(b'two\\n')\nc.close()\n",
            one = said_one.display(),
            two = go_on.display()
        );
        let client = topo
            .pod
            .command(std::path::Path::new(PYTHON), &["-c", &client])
            .spawn()
            .expect("the TCP client");
        assert!(
            wait_until(PATIENCE, || said_one.exists()),
            "the TCP client never connected"
        );
        TcpAcrossTheGap {
            server,
            ready,
            client,
            files: connected,
        }
    }

    /// The second line sent; what the server printed: its peer and the lines that arrived.
    fn finish(mut self) -> String {
        std::fs::write(self.files.path.join("two"), "").expect("the go-on file");
        let _ = self.client.wait();
        let out = self.server.wait_with_output().expect("the TCP server");
        let _ = std::fs::remove_file(&self.ready);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// A neighbour deleting our rules every 10 ms for 3 s (one process, fed a step every 10 ms): the agent says once that it paces its
/// repairs, counts the commits heard while pacing, and has its rules in after the fight.
fn a_fighting_neighbour_is_paced_and_said(
    topo: &Topology,
    case: &Case,
    pid: u32,
    log: &std::path::Path,
) {
    let before = cpu_time(pid);
    let started = Instant::now();
    topo.node.sh(&format!(
        "i=0; while [ $i -lt 300 ]; do printf '{}'; sleep 0.01; i=$((i+1)); done | {} >/dev/null 2>&1; true",
        case.fight_step, case.fighter
    ));
    let fought = started.elapsed();
    assert!(
        wait_until(PATIENCE, || rules_in(&topo.node, case)),
        "not repaired after the fight:\n{}",
        log_of(log)
    );
    let used = cpu_time(pid).saturating_sub(before);
    eprintln!(
        "a neighbour fighting every 10 ms for {fought:?}: the agent used {used:?} of CPU ({:.1} % of a core)",
        100.0 * used.as_secs_f64() / fought.as_secs_f64()
    );
    assert_eq!(
        count_in_log(log, "a neighbour keeps changing the rules we own"),
        1,
        "{}",
        log_of(log)
    );
    let metrics = scrape(&topo.node);
    let paced = sample(&metrics, "ipmasq_foreign_commits_paced_total").unwrap_or(0.0);
    assert!(paced > 0.0, "no commit heard while paced:\n{metrics}");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_neighbours_flush_is_repaired_before_the_resync_nftables() {
    super::netns::require_root();
    a_neighbours_flush_is_repaired_before_the_resync(&NFTABLES);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_neighbours_flush_is_repaired_before_the_resync_iptables_nft() {
    super::netns::require_root();
    a_neighbours_flush_is_repaired_before_the_resync(&IPTABLES_NFT);
}

/// Our rules' handles in the nat chain: unchanged when a table is claimed, not rewritten.
fn chain_handles(node: &Netns) -> Vec<String> {
    node.sh("nft -a list chain ip ipmasq postrouting")
        .lines()
        .filter_map(|l| l.split("# handle ").nth(1).map(str::to_string))
        .collect()
}

/// Whether this kernel keeps an owned table past its owner (`persist`, Linux 6.9).
fn kernel_keeps_orphaned_tables() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release.trim().split(['.', '-']).map(|n| n.parse::<u32>());
    matches!((numbers.next(), numbers.next()), (Some(Ok(major)), Some(Ok(minor))) if (major, minor) >= (6, 9))
}

/// 300 new UDP flows from the pod, 10 ms apart, each from a fresh socket, while a neighbour
/// deletes our table every 10 ms: how many reached the outside from the pod's own address and
/// how many from the node's.
fn flows_during_a_fight(topo: &Topology) -> (usize, usize) {
    let receiver = "import socket\n\
        s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
        s.bind(('MASQ',40990))\n\
        open('READY','w').close()\n\
        s.settimeout(3)\n\
        seen={}\n\
        try:\n\
        \x20   while True:\n\
        \x20       d,a=s.recvfrom(100)\n\
        \x20       seen[a[0]]=seen.get(a[0],0)+1\n\
        except OSError:\n    pass\n\
        for k,v in seen.items(): print(k,v)\n"
        .replace("MASQ", MASQ_V4);
    let (listener, ready) = start_receiver_in(&topo.outside, receiver.as_str());
    let sender = format!(
        "import socket,time\n\
         for i in range(300):\n\
         \x20   s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         \x20   s.sendto(b'x',('{MASQ_V4}',40990))\n\
         \x20   s.close()\n\
         \x20   time.sleep(0.01)\n"
    );
    let sending = topo
        .pod
        .command(std::path::Path::new(PYTHON), &["-c", &sender])
        .spawn()
        .expect("the pod's sender");
    topo.node.sh(
        "i=0; while [ $i -lt 300 ]; do printf 'delete table ip ipmasq\\n'; sleep 0.01; i=$((i+1)); done | nft -i >/dev/null 2>&1; true",
    );
    let sent = sending.wait_with_output().expect("the sender");
    assert!(sent.status.success(), "the pod's sender failed");
    let out = listener.wait_with_output().expect("the receiver");
    let _ = std::fs::remove_file(&ready);
    let mut from_pod = 0;
    let mut from_node = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut words = line.split_whitespace();
        let (Some(source), Some(count)) = (words.next(), words.next()) else {
            continue;
        };
        let count: usize = count.parse().unwrap_or(0);
        match source {
            super::packets::POD_V4 => from_pod += count,
            NODE_OUT_V4 => from_node += count,
            other => panic!("a flow from {other}"),
        }
    }
    (from_pod, from_node)
}

/// On Linux 6.9 and later the agent holds its nftables table (`owner`, `persist`): a table an
/// earlier, unheld agent made is made anew held; a neighbour's `nft delete table` is refused
/// and `nft flush ruleset` passes over it, so flows started during a neighbour deleting it
/// every 10 ms all leave masqueraded; a SIGKILLed agent leaves the table, still masquerading,
/// and the next agent claims it without rewriting a rule; `cleanup` names the holder while
/// an agent runs; an agent with holding off makes the orphan anew without `persist` and
/// repairs a dormant table; cleanup removes the table once no agent runs.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_held_table_refuses_a_neighbour_and_outlives_its_agent() {
    super::netns::require_root();
    if !kernel_keeps_orphaned_tables() {
        eprintln!(
            "SKIPPED a_held_table_refuses_a_neighbour_and_outlives_its_agent: this kernel is older than 6.9 (no nf_tables persist flag), so the table is not held"
        );
        return;
    }
    let mut topo = Topology::new();
    let dir = crate::util::Scratch::new("held-table");
    let config = dir.write("config", CONFIG);
    let config_flag = format!("--config={}", config.display());
    let once = topo.node.ipmasq(&[
        "agent",
        "--once",
        "--backend=nftables",
        "--nftables-table-owner=false",
        &config_flag,
    ]);
    assert_eq!(once.code, 0, "{}", once.stderr);
    let log = dir.path.join("agent.log");
    let args = [
        "agent",
        "--backend=nftables",
        &config_flag,
        "--metrics-addr=off",
    ];
    let pid = topo.node.spawn_ipmasq(&args, &log);
    let held = |topo: &Topology| {
        topo.node
            .sh("nft list table ip ipmasq")
            .contains("flags owner")
    };
    assert!(
        wait_until(PATIENCE, || held(&topo)),
        "never held:\n{}",
        log_of(&log)
    );
    assert_eq!(
        count_in_log(
            &log,
            "our table was made without the persist flag; making it anew"
        ),
        1,
        "{}",
        log_of(&log)
    );
    let neighbour = topo.node.exec("nft", &["delete", "table", "ip", "ipmasq"]);
    assert_ne!(neighbour.code, 0, "the neighbour's delete went through");
    assert!(
        neighbour.stderr.contains("Operation not permitted"),
        "{}",
        neighbour.stderr
    );
    topo.node.sh("nft flush ruleset");
    assert!(rules_in(&topo.node, &NFTABLES), "flushed with the ruleset");
    let (from_pod, from_node) = flows_during_a_fight(&topo);
    eprintln!("flows during a neighbour deleting our table every 10 ms: {from_node} masqueraded, {from_pod} with the pod's address");
    assert_eq!(from_pod, 0, "flows left unmasqueraded during the fight");
    assert!(from_node > 0, "no flow arrived");
    let handles = chain_handles(&topo.node);
    kill(pid, "KILL");
    assert!(
        wait_until(PATIENCE, || !std::path::Path::new(&format!("/proc/{pid}"))
            .exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z"))),
        "the agent outlived SIGKILL"
    );
    assert!(
        rules_in(&topo.node, &NFTABLES),
        "the table went with its agent"
    );
    assert_eq!(
        source_seen_between(&topo.pod, &topo.outside, MASQ_V4, None),
        NODE_OUT_V4,
        "no agent: a new flow is still masqueraded"
    );
    let log2 = dir.path.join("agent2.log");
    let pid = topo.node.spawn_ipmasq(&args, &log2);
    assert!(
        wait_until(PATIENCE, || count_in_log(
            &log2,
            "claiming our orphaned table"
        ) == 1),
        "the next agent did not claim the table:\n{}",
        log_of(&log2)
    );
    assert!(held(&topo), "claimed, but not held");
    assert_eq!(
        chain_handles(&topo.node),
        handles,
        "a claim rewrites no rule"
    );
    let neighbour = topo.node.exec("nft", &["delete", "table", "ip", "ipmasq"]);
    assert_ne!(
        neighbour.code, 0,
        "the neighbour's delete went through after the claim"
    );
    let cleanup = topo.node.ipmasq(&["cleanup", "--backend=nftables"]);
    assert_ne!(cleanup.code, 0, "cleanup past a running agent");
    let said = format!("{}{}", cleanup.stdout, cleanup.stderr);
    assert!(
        said.contains("held by another process's netlink socket")
            && said.contains("stop that agent first"),
        "{said}"
    );
    // Once the agent has exited, the table is orphaned. An agent with holding off makes it
    // anew without `persist` (nft 1.0.6 could not even declare it), and repairs a neighbour's
    // `flags dormant` (every chain unhooked) as soon as it hears it.
    kill(pid, "TERM");
    let log3 = dir.path.join("agent3.log");
    let unheld = [&args[..], &["--nftables-table-owner=false"]].concat();
    let pid = topo.node.spawn_ipmasq(&unheld, &log3);
    assert!(
        wait_until(PATIENCE, || count_in_log(&log3, "making it anew, unheld")
            == 1),
        "the orphaned table was not made anew unheld:\n{}",
        log_of(&log3)
    );
    assert!(
        wait_until(PATIENCE, || topo
            .node
            .exec("nft", &["add", "table", "ip", "ipmasq"])
            .code
            == 0),
        "nft cannot declare the unheld table:\n{}",
        log_of(&log3)
    );
    topo.node.sh("nft add table ip ipmasq '{ flags dormant; }'");
    assert!(
        wait_until(PATIENCE, || !topo
            .node
            .sh("nft list table ip ipmasq")
            .contains("dormant")),
        "the dormant table was not repaired:\n{}",
        log_of(&log3)
    );
    assert_eq!(
        source_seen_between(&topo.pod, &topo.outside, MASQ_V4, None),
        NODE_OUT_V4,
        "masqueraded again after the dormant table's repair"
    );
    kill(pid, "TERM");
    assert!(
        wait_until(PATIENCE, || topo
            .node
            .ipmasq(&["cleanup", "--backend=nftables"])
            .code
            == 0),
        "cleanup after the agent stopped"
    );
    assert!(!topo.node.sh("nft list tables").contains("ipmasq"));
}
