//! `explain DEST`'s SNAT port use, with packets: the agent's `--once` pass installs the
//! masquerade rule in a node namespace, the pod opens counted UDP flows (one socket each) to
//! two ports of a masqueraded outside address and to a kept one, and `explain` counts exactly
//! the source-NATed flows toward its destination, per translated address and protocol,
//! against MASQUERADE's usable range; a kept destination shows none and keeps its document;
//! run without CAP_NET_ADMIN, explain says the table was not read and answers the rest.

use super::netns::{scratch_file, wait_until};
use super::packets::{install_once, start_receiver_in, Topology};
use std::time::Duration;

const POD: &str = "192.168.77.2";
const MASQUERADED: &str = "203.0.113.2";
const KEPT: &str = "198.51.100.2";
const NODE_OUT: &str = "203.0.113.1";
const CONFIG: &str = "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n";
const BUSY_PORT: u16 = 7000;
const QUIET_PORT: u16 = 7001;
const BUSY_FLOWS: usize = 24;
const QUIET_FLOWS: usize = 5;
const KEPT_FLOWS: usize = 3;

/// `explain DEST -o json` (and the text) on the node, after the flows are tracked.
fn explain(
    topo: &Topology,
    backend: &str,
    config: &std::path::Path,
    dest: &str,
) -> (serde_json::Value, String) {
    let args = |output: &str| {
        vec![
            "explain".to_string(),
            backend.to_string(),
            "-o".into(),
            output.into(),
            format!("--config={}", config.display()),
            format!("--from={POD}"),
            dest.to_string(),
        ]
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
fn tracked(topo: &Topology, dest: &str) -> usize {
    let run = topo
        .node
        .exec("conntrack", &["-L", "-p", "udp", "-s", POD, "-d", dest]);
    run.stdout.lines().filter(|l| l.contains("udp")).count()
}

fn port_use_is_counted(backend: &str) {
    super::netns::require_root();
    let topo = Topology::new();
    let config = scratch_file("snat-ports-config", CONFIG);
    install_once(&topo, backend, &config);
    // Receivers on both outside addresses, so every flow is answered by nothing but kept.
    let (mut receiver, ready) = start_receiver_in(
        &topo.outside,
        &format!(
            "import socket,select\n\
             s=[]\n\
             for a,p in (('{MASQUERADED}',{BUSY_PORT}),('{MASQUERADED}',{QUIET_PORT}),('{KEPT}',{BUSY_PORT})):\n\
             \x20   k=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); k.bind((a,p)); s.append(k)\n\
             open('READY','w').close()\n\
             while True:\n\
             \x20   for k in select.select(s,[],[])[0]: k.recvfrom(100)\n"
        ),
    );
    // One socket a flow: each its own source port, so its own conntrack entry.
    let sender = format!(
        "import socket\n\
         keep=[]\n\
         for dest,port,n in (('{MASQUERADED}',{BUSY_PORT},{BUSY_FLOWS}),('{MASQUERADED}',{QUIET_PORT},{QUIET_FLOWS}),('{KEPT}',{BUSY_PORT},{KEPT_FLOWS})):\n\
         \x20   for _ in range(n):\n\
         \x20       k=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); k.sendto(b'x',(dest,port)); keep.append(k)\n"
    );
    let sent = topo.pod.exec(super::netns::PYTHON, &["-c", &sender]);
    assert_eq!(sent.code, 0, "sender: {}", sent.stderr);
    assert!(
        wait_until(Duration::from_secs(10), || tracked(&topo, MASQUERADED)
            == BUSY_FLOWS + QUIET_FLOWS
            && tracked(&topo, KEPT) == KEPT_FLOWS),
        "conntrack does not hold the flows sent: {} and {}",
        tracked(&topo, MASQUERADED),
        tracked(&topo, KEPT)
    );

    let (doc, text) = explain(&topo, backend, &config, MASQUERADED);
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
    assert_eq!(usage["translatedAddress"], NODE_OUT);
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
    let expected = format!(
        "ports   {} flows udp source-NATed to {NODE_OUT}: {BUSY_FLOWS} of 64512 usable ports (0.0 %) toward {MASQUERADED}:{BUSY_PORT}, range 1024-65535",
        BUSY_FLOWS + QUIET_FLOWS
    );
    assert!(text.contains(&expected), "{expected:?} not in:\n{text}");

    // A kept destination: its flows are tracked, none source-NATed: no port use at all.
    let (kept, kept_text) = explain(&topo, backend, &config, KEPT);
    assert_eq!(kept["outcome"], "keep-source", "{kept:#}");
    assert!(
        kept["conntrack"]["toDestination"].as_u64() >= Some(KEPT_FLOWS as u64),
        "{kept:#}"
    );
    assert!(kept["conntrack"].get("snatPorts").is_none(), "{kept:#}");
    assert!(!kept_text.contains("ports "), "{kept_text}");

    // Without CAP_NET_ADMIN the table cannot be read: explain says so and answers the rest.
    let nobody = topo.node.exec(
        "setpriv",
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            crate::util::binary().to_str().unwrap(),
            "explain",
            backend,
            "-o",
            "json",
            &format!("--config={}", config.display()),
            &format!("--from={POD}"),
            MASQUERADED,
        ],
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

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explain_counts_the_snat_ports_toward_a_destination_nftables() {
    port_use_is_counted("--backend=nftables");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explain_counts_the_snat_ports_toward_a_destination_iptables_nft() {
    port_use_is_counted("--iptables-mode=nft");
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn explain_counts_the_snat_ports_toward_a_destination_iptables_legacy() {
    port_use_is_counted("--iptables-mode=legacy");
}
