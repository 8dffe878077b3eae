//! `explain DEST`'s SNAT port use, with packets (per backend, IPv4 and IPv6): the agent's `--once` pass installs the
//! masquerade rule in a node namespace, the pod opens counted UDP flows (one socket each) to
//! two ports of a masqueraded outside address and to a kept one, and `explain` counts exactly
//! the source-NATed flows toward its destination, per translated address and protocol,
//! against MASQUERADE's usable range; a kept destination shows none and keeps its document;
//! run without CAP_NET_ADMIN, explain says the table was not read and answers the rest.

use super::netns::{scratch_file, wait_until};
use super::packets::{start_receiver_in, Topology};
use std::time::Duration;

/// One family's addresses (those of `packets::Topology`).
struct Family {
    pod: &'static str,
    masqueraded: &'static str,
    kept: &'static str,
    node_out: &'static str,
    socket: &'static str,
    /// The agent's and explain's flag for the family (none for IPv4).
    flag: Option<&'static str>,
    /// The config: the kept address's range is a non-masquerade CIDR.
    config: &'static str,
}

const V4: Family = Family {
    pod: "192.168.77.2",
    masqueraded: "203.0.113.2",
    kept: "198.51.100.2",
    node_out: "203.0.113.1",
    socket: "AF_INET",
    flag: None,
    config: "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n",
};

const V6: Family = Family {
    pod: "2001:db8:77::2",
    masqueraded: "2001:db8:f0::2",
    kept: "2001:db8:f1::2",
    node_out: "2001:db8:f0::1",
    socket: "AF_INET6",
    flag: Some("--enable-ipv6"),
    config: "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n  - 2001:db8:f1::/64\n",
};

const BUSY_PORT: u16 = 7000;
const QUIET_PORT: u16 = 7001;
const BUSY_FLOWS: usize = 24;
const QUIET_FLOWS: usize = 5;
const KEPT_FLOWS: usize = 3;

/// `explain DEST -o json` (and the text) on the node, after the flows are tracked.
fn explain(
    topo: &Topology,
    (backend, family): (&str, &Family),
    config: &std::path::Path,
    dest: &str,
) -> (serde_json::Value, String) {
    let args = |output: &str| {
        let mut args = vec![
            "explain".to_string(),
            backend.to_string(),
            "-o".into(),
            output.into(),
            format!("--config={}", config.display()),
            format!("--from={}", family.pod),
            dest.to_string(),
        ];
        args.extend(family.flag.map(String::from));
        args
    };
    let json_args = args("json");
    let run = topo
        .node
        .ipmasq(&json_args.iter().map(String::as_str).collect::<Vec<_>>());
    let doc = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", run.stdout, run.stderr));
    let text_args = args("text");
    let text = topo
        .node
        .ipmasq(&text_args.iter().map(String::as_str).collect::<Vec<_>>());
    (doc, text.stdout)
}

/// How many tracked UDP flows go from the pod to `dest` (the `conntrack` tool's count).
fn tracked(topo: &Topology, family: &Family, dest: &str) -> usize {
    let run = topo.node.exec(
        "conntrack",
        &["-L", "-p", "udp", "-s", family.pod, "-d", dest],
    );
    run.stdout.lines().filter(|l| l.contains("udp")).count()
}

fn port_use_is_counted(backend: &str, family: &Family) {
    super::netns::require_root();
    let topo = Topology::new();
    let config = scratch_file("snat-ports-config", family.config);
    let mut agent = vec![
        "agent".to_string(),
        "--once".into(),
        backend.into(),
        format!("--config={}", config.display()),
    ];
    agent.extend(family.flag.map(String::from));
    let once = topo
        .node
        .ipmasq(&agent.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(once.code, 0, "{}", once.stderr);
    let (pod, masqueraded, kept, node_out, socket) = (
        family.pod,
        family.masqueraded,
        family.kept,
        family.node_out,
        family.socket,
    );
    // Receivers on both outside addresses, so every flow is answered by nothing but kept.
    let (mut receiver, ready) = start_receiver_in(
        &topo.outside,
        &format!(
            "import socket,select\n\
             s=[]\n\
             for a,p in (('{masqueraded}',{BUSY_PORT}),('{masqueraded}',{QUIET_PORT}),('{kept}',{BUSY_PORT})):\n\
             \x20   k=socket.socket(socket.{socket},socket.SOCK_DGRAM); k.bind((a,p)); s.append(k)\n\
             open('READY','w').close()\n\
             while True:\n\
             \x20   for k in select.select(s,[],[])[0]: k.recvfrom(100)\n"
        ),
    );
    // One socket a flow: each its own source port, so its own conntrack entry.
    let sender = format!(
        "import socket\n\
         keep=[]\n\
         for dest,port,n in (('{masqueraded}',{BUSY_PORT},{BUSY_FLOWS}),('{masqueraded}',{QUIET_PORT},{QUIET_FLOWS}),('{kept}',{BUSY_PORT},{KEPT_FLOWS})):\n\
         \x20   for _ in range(n):\n\
         \x20       k=socket.socket(socket.{socket},socket.SOCK_DGRAM); k.sendto(b'x',(dest,port)); keep.append(k)\n"
    );
    let sent = topo.pod.exec(super::netns::PYTHON, &["-c", &sender]);
    assert_eq!(sent.code, 0, "sender: {}", sent.stderr);
    assert!(
        wait_until(Duration::from_secs(10), || tracked(
            &topo,
            family,
            masqueraded
        ) == BUSY_FLOWS + QUIET_FLOWS
            && tracked(&topo, family, kept) == KEPT_FLOWS),
        "conntrack does not hold the flows sent: {} and {}",
        tracked(&topo, family, masqueraded),
        tracked(&topo, family, kept)
    );

    let (doc, text) = explain(&topo, (backend, family), &config, masqueraded);
    assert_eq!(doc["outcome"], "masquerade", "{doc:#}");
    let uses = doc["conntrack"]["snatPorts"]
        .as_array()
        .unwrap_or_else(|| panic!("no snatPorts: {doc:#}"));
    assert_eq!(
        uses.len(),
        1,
        "one translated address, one protocol: {doc:#}"
    );
    let usage = &uses[0];
    assert_eq!(usage["translatedAddress"], node_out);
    assert_eq!(usage["protocol"], "udp");
    assert_eq!(
        usage["flows"],
        BUSY_FLOWS + QUIET_FLOWS,
        "the kept flows are not counted"
    );
    assert_eq!(usage["busiestDestinationPort"], BUSY_PORT);
    assert_eq!(usage["busiestPortsInUse"], BUSY_FLOWS);
    assert_eq!(usage["usableRange"], "1024-65535");
    assert_eq!(usage["usablePorts"], 64512);
    let toward = if masqueraded.contains(':') {
        format!("[{masqueraded}]:{BUSY_PORT}")
    } else {
        format!("{masqueraded}:{BUSY_PORT}")
    };
    let expected = format!(
        "ports   {} flows udp source-NATed to {node_out}: {BUSY_FLOWS} of 64512 usable ports (0.0 %) toward {toward}, range 1024-65535",
        BUSY_FLOWS + QUIET_FLOWS
    );
    assert!(text.contains(&expected), "{expected:?} not in:\n{text}");

    // A kept destination: its flows are tracked, none source-NATed: no port use at all.
    let (kept_doc, kept_text) = explain(&topo, (backend, family), &config, kept);
    assert_eq!(kept_doc["outcome"], "keep-source", "{kept_doc:#}");
    assert!(
        kept_doc["conntrack"]["toDestination"].as_u64() >= Some(KEPT_FLOWS as u64),
        "{kept_doc:#}"
    );
    assert!(
        kept_doc["conntrack"].get("snatPorts").is_none(),
        "{kept_doc:#}"
    );
    assert!(!kept_text.contains("ports "), "{kept_text}");

    // Without CAP_NET_ADMIN the table cannot be read: explain says so and answers the rest.
    let binary = crate::util::binary();
    let mut unprivileged_args = vec![
        "--reuid=65534".to_string(),
        "--regid=65534".into(),
        "--clear-groups".into(),
        binary.display().to_string(),
        "explain".into(),
        backend.into(),
        "-o".into(),
        "json".into(),
        format!("--config={}", config.display()),
        format!("--from={pod}"),
        masqueraded.into(),
    ];
    unprivileged_args.extend(family.flag.map(String::from));
    let nobody = topo.node.exec(
        "setpriv",
        &unprivileged_args
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let unprivileged: serde_json::Value = serde_json::from_str(&nobody.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", nobody.stdout, nobody.stderr));
    assert_eq!(
        unprivileged["config"]["action"], "masquerade",
        "{unprivileged:#}"
    );
    assert!(unprivileged.get("conntrack").is_none(), "{unprivileged:#}");
    let why = unprivileged["conntrackUnavailable"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("the conntrack table was not read"),
        "{unprivileged:#}"
    );

    let _ = receiver.kill();
    let _ = receiver.wait();
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_file(&config);
}

macro_rules! per_backend {
    ($($name:ident => $backend:expr),* $(,)?) => {
        $(
            mod $name {
                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn explain_counts_the_snat_ports_toward_a_destination_v4() {
                    super::port_use_is_counted($backend, &super::V4);
                }

                #[test]
                #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
                fn explain_counts_the_snat_ports_toward_a_destination_v6() {
                    super::port_use_is_counted($backend, &super::V6);
                }
            }
        )*
    };
}

per_backend! {
    nftables => "--backend=nftables",
    iptables_nft => "--iptables-mode=nft",
    iptables_legacy => "--iptables-mode=legacy",
}
