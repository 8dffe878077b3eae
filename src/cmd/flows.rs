//! `explain`'s look at the conntrack table: the tracked flows to the destination whose NAT
//! contradicts the rules in force (flows that began before a change and were not reset: made
//! before the agent ran, or outside its `--conntrack-reset` scope). The kernel keeps a flow's
//! first decision until the flow ends, so these flows do not get the verdict `explain` gives.
//!
//! From the same dump, the SNAT port use toward the destination: the flows whose original
//! destination is DEST and whose source NAT rewrote, per translated address and protocol,
//! against the source ports MASQUERADE may pick (see [`usable_ports`]).

use crate::conntrack::judge::{consistent, Decides};
use crate::output::{printable, Styler};
use crate::plan::Family;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// What the conntrack table holds for the destination.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowsAnswer {
    /// Entries of the family read.
    examined: usize,
    /// Tracked flows to the destination (before or after DNAT).
    to_destination: usize,
    /// How many of them hold a NAT decision the rules in force do not make.
    contradicting_total: usize,
    /// The first of those (at most `crate::conntrack::LISTED`).
    contradicting: Vec<FlowAnswer>,
    /// The source-NATed flows to the destination, per translated address and protocol; left
    /// out (not an empty list) when there are none, so the document is as before.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    snat_ports: Vec<PortUse>,
}

/// The source ports taken toward the destination on one translated address and protocol.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortUse {
    pub translated_address: IpAddr,
    pub protocol: String,
    /// Source-NATed flows to the destination (each holds one translated port per
    /// destination port).
    pub flows: usize,
    /// The destination port most of them go to (none for ICMP), and how many ports they take:
    /// the kernel needs a free translated port per (destination address, destination port),
    /// so this is the count that runs out.
    pub busiest_destination_port: Option<u16>,
    pub busiest_ports_in_use: usize,
    /// The source ports (ICMP: ids) MASQUERADE picks from for a source port of 1024 and above,
    /// and how many there are.
    pub usable_range: String,
    pub usable_ports: u32,
    /// busiest_ports_in_use / usable_ports.
    pub share: f64,
}

/// The translated ports (ICMP: ids) MASQUERADE picks from, for a flow whose own source port is
/// 1024 or above (every ephemeral port): the kernel's `nf_nat_l4proto_unique_tuple`
/// (net/netfilter/nf_nat_core.c) keeps a source port's class when no range is given — below
/// 512 maps to 1–511, 512–1023 to 600–1023, 1024 and above to 1024–65535 (64,512 ports) — and
/// takes ICMP ids from 0–65535; with `--to-ports` (tcp, udp, sctp) it is the ranges given. The
/// kernel also stops searching after a bounded number of tries when the range is nearly full,
/// so failures start somewhat before the last port.
pub fn usable_ports(protocol: u8, to_ports: &crate::plan::ToPorts) -> (String, u32) {
    use crate::snat::pressure::{takes_to_ports, usable_range};
    let range = match protocol {
        _ if takes_to_ports(protocol, to_ports) => to_ports.to_string(),
        1 | 58 => "0-65535".to_string(),
        _ => "1024-65535".to_string(),
    };
    (range, usable_range(protocol, to_ports))
}

/// Counts the source-NATed flows to one destination.
#[derive(Default)]
struct PortTally {
    /// (translated address, protocol number) → destination port → flows.
    by_translation: BTreeMap<(IpAddr, u8), BTreeMap<Option<u16>, usize>>,
}

impl PortTally {
    fn add(&mut self, flow: &crate::conntrack::judge::Flow, destination: IpAddr) {
        if flow.destination != destination {
            return;
        }
        let Some(translated) = flow.rewritten_to() else {
            return;
        };
        *self
            .by_translation
            .entry((translated, flow.protocol))
            .or_default()
            .entry(flow.destination_port)
            .or_default() += 1;
    }

    fn uses(&self, to_ports: &crate::plan::ToPorts) -> Vec<PortUse> {
        self.by_translation
            .iter()
            .map(|(&(translated, protocol), by_port)| {
                let (busiest_destination_port, busiest_ports_in_use) = by_port
                    .iter()
                    .max_by_key(|(port, count)| (**count, std::cmp::Reverse(**port)))
                    .map(|(port, count)| (*port, *count))
                    .unwrap_or((None, 0));
                let (usable_range, usable_ports) = usable_ports(protocol, to_ports);
                PortUse {
                    translated_address: translated,
                    protocol: protocol_name(protocol),
                    flows: by_port.values().sum(),
                    busiest_destination_port,
                    busiest_ports_in_use,
                    usable_range,
                    usable_ports,
                    share: busiest_ports_in_use as f64 / f64::from(usable_ports.max(1)),
                }
            })
            .collect()
    }
}

/// The protocol's name as `conntrack -L` prints it.
fn protocol_name(protocol: u8) -> String {
    crate::conntrack::judge::Flow {
        family: Family::V4,
        protocol,
        source: IpAddr::from([0, 0, 0, 0]),
        destination: IpAddr::from([0, 0, 0, 0]),
        source_port: None,
        destination_port: None,
        reply_source: IpAddr::from([0, 0, 0, 0]),
        reply_destination: IpAddr::from([0, 0, 0, 0]),
        reply_destination_port: None,
        icmp_id: None,
        reply_icmp_id: None,
        id: 0,
    }
    .protocol_name()
}

/// One contradicting flow.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowAnswer {
    protocol: String,
    source: IpAddr,
    destination: IpAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    destination_port: Option<u16>,
    /// The source it leaves with, when NAT rewrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    rewritten_to: Option<IpAddr>,
    /// The conntrack entry's id (`conntrack -L -o id`).
    id: u32,
    /// What the rules in force decide for it now.
    rules_now: String,
    /// The flow in `conntrack -L`'s words.
    text: String,
}

/// Reads the conntrack table of `family` and finds the flows to `destination` whose entry
/// contradicts `rules` (for traffic leaving `interface`), and the SNAT port use toward it
/// (against `to_ports`, the agent's `--to-ports`).
pub fn contradicting(
    family: Family,
    destination: IpAddr,
    rules: &dyn Decides,
    interface: Option<&str>,
    to_ports: &crate::plan::ToPorts,
) -> std::io::Result<FlowsAnswer> {
    let node = crate::addresses::node_address_set()?;
    let mut answer = FlowsAnswer {
        examined: 0,
        to_destination: 0,
        contradicting_total: 0,
        contradicting: Vec::new(),
        snat_ports: Vec::new(),
    };
    let mut tally = PortTally::default();
    let (examined, _) = crate::conntrack::each_flow(family, |flow| {
        tally.add(flow, destination);
        let judged = flow.judged_destination();
        if judged != destination && flow.destination != destination {
            return;
        }
        answer.to_destination += 1;
        if node.contains(&judged) {
            return;
        }
        let Some(now) = rules.outcome(flow.source, judged, interface) else {
            return;
        };
        if consistent(flow, now, |a| node.contains(&a)) {
            return;
        }
        answer.contradicting_total += 1;
        if answer.contradicting.len() < crate::conntrack::LISTED {
            answer.contradicting.push(FlowAnswer {
                protocol: flow.protocol_name(),
                source: flow.source,
                destination: flow.destination,
                source_port: flow.source_port,
                destination_port: flow.destination_port,
                rewritten_to: flow.rewritten_to(),
                id: flow.id,
                rules_now: now.to_string(),
                text: flow.describe(),
            });
        }
    })?;
    answer.examined = examined;
    answer.snat_ports = tally.uses(to_ports);
    Ok(answer)
}

/// The text section: nothing when no flow goes to the destination.
pub fn text(answer: &FlowsAnswer, destination: IpAddr, style: &Styler) -> String {
    if answer.to_destination == 0 {
        return String::new();
    }
    let mut out = contradiction_text(answer, destination, style);
    out.push_str(&ports_text(&answer.snat_ports, destination, style));
    out
}

/// One line per translated address and protocol: the ports the busiest destination port of
/// DEST takes, against those MASQUERADE may pick; nothing when no flow was source-NATed.
fn ports_text(uses: &[PortUse], destination: IpAddr, style: &Styler) -> String {
    let mut out = String::new();
    for (index, usage) in uses.iter().enumerate() {
        let label = if index == 0 {
            style.bold("ports")
        } else {
            " ".repeat(5)
        };
        let toward = match usage.busiest_destination_port {
            Some(port) => match destination {
                IpAddr::V4(_) => format!("{destination}:{port}"),
                IpAddr::V6(_) => format!("[{destination}]:{port}"),
            },
            None => destination.to_string(),
        };
        let percent = usage.share * 100.0;
        let line = format!(
            "{} {} source-NATed to {}: {} of {} usable {} ({percent:.1} %) toward {toward}",
            crate::output::plural(usage.flows, "flow"),
            usage.protocol,
            usage.translated_address,
            usage.busiest_ports_in_use,
            usage.usable_ports,
            if matches!(usage.protocol.as_str(), "icmp" | "icmpv6") {
                "ids"
            } else {
                "ports"
            },
        );
        let line = format!("{line}, range {}", usage.usable_range);
        let line = if usage.share >= 0.8 {
            style.warning(&format!("{line}: near exhaustion, new flows will fail"))
        } else {
            line
        };
        out.push_str(&format!("{label}   {line}\n"));
    }
    out
}

fn contradiction_text(answer: &FlowsAnswer, destination: IpAddr, style: &Styler) -> String {
    let label = style.bold("flows");
    if answer.contradicting_total == 0 {
        return format!(
            "{label}   {} to {destination}, each on the decision the rules make now\n",
            crate::output::plural(answer.to_destination, "tracked flow"),
        );
    }
    let mut out = format!(
        "{label}   {} of {} to {destination} {} a NAT decision the rules in force no longer make:\n",
        answer.contradicting_total,
        crate::output::plural(answer.to_destination, "tracked flow"),
        if answer.contradicting_total == 1 { "holds" } else { "hold" },
    );
    for flow in &answer.contradicting {
        out.push_str(&format!(
            "          {} (the rules now: {})\n",
            printable(&flow.text),
            flow.rules_now
        ));
    }
    if answer.contradicting_total > answer.contradicting.len() {
        out.push_str(&format!(
            "          ... and {} more\n",
            answer.contradicting_total - answer.contradicting.len()
        ));
    }
    out.push_str(&format!(
        "        {}\n",
        style.warning(
            "they keep it until they end; the agent resets such flows when a change of its own makes them wrong (--conntrack-reset)"
        )
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usable_range_is_the_kernels_unless_to_ports_gives_one() {
        let none = crate::plan::ToPorts::default();
        assert_eq!(usable_ports(6, &none), ("1024-65535".into(), 64_512));
        assert_eq!(usable_ports(17, &none), ("1024-65535".into(), 64_512));
        assert_eq!(usable_ports(1, &none), ("0-65535".into(), 65_536));
        let given: crate::plan::ToPorts = "1024-29999,32768-65535".parse().unwrap();
        assert_eq!(
            usable_ports(17, &given),
            ("1024-29999,32768-65535".into(), 28_976 + 32_768)
        );
        assert_eq!(
            usable_ports(1, &given).1,
            65_536,
            "ICMP ids: --to-ports does not apply"
        );
    }

    #[test]
    fn port_use_is_said_only_when_there_is_some_and_warns_near_exhaustion() {
        let destination: IpAddr = "198.51.100.9".parse().unwrap();
        assert_eq!(ports_text(&[], destination, &Styler::plain()), "");
        let usage = PortUse {
            translated_address: "203.0.113.1".parse().unwrap(),
            protocol: "tcp".into(),
            flows: 52_000,
            busiest_destination_port: Some(443),
            busiest_ports_in_use: 51_700,
            usable_range: "1024-65535".into(),
            usable_ports: 64_512,
            share: 51_700.0 / 64_512.0,
        };
        let text = ports_text(&[usage], destination, &Styler::plain());
        assert_eq!(
            text,
            "ports   52000 flows tcp source-NATed to 203.0.113.1: 51700 of 64512 usable ports (80.1 %) toward 198.51.100.9:443, range 1024-65535: near exhaustion, new flows will fail\n"
        );
    }
}
