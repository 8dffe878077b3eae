//! `explain`'s look at the conntrack table: the tracked flows to the destination whose NAT
//! contradicts the rules in force (flows that began before a change and were not reset: made
//! before the agent ran, or outside its `--conntrack-reset` scope). The kernel keeps a flow's
//! first decision until the flow ends, so these flows do not get the verdict `explain` gives.

use crate::conntrack::judge::{consistent, Decides};
use crate::output::{printable, Styler};
use crate::plan::Family;
use serde::Serialize;
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
/// contradicts `rules` (for traffic leaving `interface`).
pub fn contradicting(
    family: Family,
    destination: IpAddr,
    rules: &dyn Decides,
    interface: Option<&str>,
) -> std::io::Result<FlowsAnswer> {
    let node = crate::addresses::node_address_set()?;
    let mut answer = FlowsAnswer {
        examined: 0,
        to_destination: 0,
        contradicting_total: 0,
        contradicting: Vec::new(),
    };
    let (examined, _) = crate::conntrack::each_flow(family, |flow| {
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
    Ok(answer)
}

/// The text section: nothing when no flow goes to the destination.
pub fn text(answer: &FlowsAnswer, destination: IpAddr, style: &Styler) -> String {
    if answer.to_destination == 0 {
        return String::new();
    }
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
