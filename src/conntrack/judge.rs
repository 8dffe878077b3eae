//! Which tracked flows a rules change left on a wrong NAT decision: pure logic over a flow's
//! two tuples and the rules before and after the change, so the reset is tested without a
//! kernel. The kernel decides NAT on a flow's first packet and keeps that decision in the
//! flow's conntrack entry; a flow is reset only when the change alters the decision for its
//! source and destination *and* its entry holds what the rules in force no longer decide.

use crate::plan::live::{Inspection, LiveReason, RuleVerdict};
use crate::plan::{intervals, Action, Egress, Ruleset};
use std::net::IpAddr;

pub use crate::netlink::conntrack::Flow;

/// What NAT a flow should get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The source address is kept.
    Keep,
    /// MASQUERADE: the outgoing interface's address.
    Masquerade,
    /// SNAT to this address.
    Snat(IpAddr),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Keep => f.write_str("keep the source"),
            Outcome::Masquerade => f.write_str("masquerade"),
            Outcome::Snat(to) => write!(f, "SNAT to {to}"),
        }
    }
}

/// Rules that decide NAT: a planned ruleset, or what is live.
pub trait Decides {
    /// What these rules do with a flow from `source` to `destination` (not an address of
    /// this node) leaving `interface`; None when they cannot tell (a rule scoped to
    /// interfaces and no interface given, rules this reading cannot judge, NAT decided by a
    /// rule that is not ours).
    fn outcome(
        &self,
        source: IpAddr,
        destination: IpAddr,
        interface: Option<&str>,
    ) -> Option<Outcome>;
}

/// No NAT rules of ours in force: every flow keeps its source. What decided the flows tracked
/// before the agent installed its rules from nothing (a fresh node, after a cleanup).
pub struct NoRulesOfOurs;

impl Decides for NoRulesOfOurs {
    fn outcome(&self, _: IpAddr, _: IpAddr, _: Option<&str>) -> Option<Outcome> {
        Some(Outcome::Keep)
    }
}

/// A planned ruleset, judged by address ranges: a binary search a flow, whatever the number
/// of CIDRs (the same verdicts as `plan::decide`, which walks the decisions).
pub struct PlannedRules<'a> {
    ruleset: &'a Ruleset,
    kept: Vec<(u128, u128)>,
}

impl<'a> PlannedRules<'a> {
    pub fn new(ruleset: &'a Ruleset) -> Self {
        PlannedRules {
            ruleset,
            kept: intervals::kept_ranges(ruleset.family, &ruleset.decisions),
        }
    }
}

impl Decides for PlannedRules<'_> {
    fn outcome(
        &self,
        source: IpAddr,
        destination: IpAddr,
        interface: Option<&str>,
    ) -> Option<Outcome> {
        let ruleset = self.ruleset;
        let sources = &ruleset.entry.source_ranges;
        if !ruleset.family.holds_addr(destination)
            || (!sources.is_empty() && !sources.iter().any(|net| net.contains(&source)))
            || intervals::ranges_hold(&self.kept, intervals::number(destination))
        {
            return Some(Outcome::Keep);
        }
        if !ruleset.entry.output_interfaces.is_empty()
            && !ruleset.entry.selects_interface(interface?)
        {
            return Some(Outcome::Keep);
        }
        match ruleset.masquerade.egress {
            Egress::Masquerade => Some(Outcome::Masquerade),
            Egress::Snat(to) => Some(Outcome::Snat(to)),
            Egress::Unresolved(_) => None,
        }
    }
}

impl Decides for Inspection {
    fn outcome(
        &self,
        source: IpAddr,
        destination: IpAddr,
        interface: Option<&str>,
    ) -> Option<Outcome> {
        let verdict = self.evaluate_leaving(source, destination, false, interface);
        if !verdict.unjudged.is_empty() || !verdict.may_decide_first.is_empty() {
            return None;
        }
        match (verdict.action, verdict.reason) {
            (_, LiveReason::DecidedBefore) => None,
            (Action::KeepSource, _) => Some(Outcome::Keep),
            (Action::Masquerade, _) => match &self.rules[verdict.rule?].verdict {
                RuleVerdict::Masquerade {
                    snat_to: Some(to), ..
                } => Some(Outcome::Snat(*to)),
                RuleVerdict::Masquerade { snat_to: None, .. } => Some(Outcome::Masquerade),
                _ => None,
            },
        }
    }
}

/// Whether `flow`'s entry holds what `expected` decides. A masquerade keeps a source that is
/// already an address of this node (`is_node_address`) as it is.
pub fn consistent(
    flow: &Flow,
    expected: Outcome,
    is_node_address: impl Fn(IpAddr) -> bool,
) -> bool {
    match expected {
        Outcome::Keep => flow.rewritten_to().is_none(),
        Outcome::Snat(to) => flow.reply_destination == to,
        Outcome::Masquerade => flow.rewritten_to().is_some() || is_node_address(flow.source),
    }
}

/// Which flows a reset may delete. Deleting a TCP (or SCTP, DCCP) entry ends that
/// connection: its next packet is out of window for the new NAT, or reaches the peer from
/// another address. Left alone, a connection keeps its old decision until it closes, and new
/// connections get the new one. Datagram flows (UDP, ICMP, ...) never close: without a reset
/// they keep the old decision for as long as packets keep coming.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResetScope {
    /// Delete no entry: every flow keeps its old decision until it ends
    Off,
    /// Delete the entries of connectionless flows (UDP, UDP-Lite, ICMP, ICMPv6, GRE, any
    /// protocol but TCP, SCTP and DCCP)
    #[default]
    Connectionless,
    /// Delete every contradicting entry, TCP, SCTP and DCCP included (their connections
    /// break and are made again under the new decision)
    All,
}

impl ResetScope {
    /// Whether entries of `protocol` may be deleted.
    pub fn covers(self, protocol: u8) -> bool {
        match self {
            ResetScope::Off => false,
            ResetScope::Connectionless => !connection_oriented(protocol),
            ResetScope::All => true,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ResetScope::Off => "off",
            ResetScope::Connectionless => "connectionless",
            ResetScope::All => "all",
        }
    }
}

/// TCP, DCCP and SCTP: protocols whose flows are connections with state at both ends.
pub fn connection_oriented(protocol: u8) -> bool {
    matches!(protocol, 6 | 33 | 132)
}

/// What a reset does with one flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// The change does not alter its decision, or its entry already holds the new one.
    Untouched,
    /// Its entry holds a decision the new rules no longer make: delete it.
    Reset { now: Outcome },
    /// Like `Reset`, but its protocol is outside the reset scope: it keeps the old decision.
    Left { now: Outcome },
}

/// What a reset knows of the node beyond the rules.
pub struct ResetContext<'a> {
    pub is_node_address: &'a dyn Fn(IpAddr) -> bool,
    /// The interface traffic to an address leaves by (asked only when an outcome depends on
    /// it).
    pub interface_to: &'a mut dyn FnMut(IpAddr) -> Option<String>,
    pub scope: ResetScope,
}

/// Judges one flow across a change from `before` to `after`.
pub fn dispose(
    flow: &Flow,
    before: &dyn Decides,
    after: &dyn Decides,
    node: &mut ResetContext<'_>,
) -> Disposition {
    let destination = flow.judged_destination();
    // Traffic to the node itself never reaches our rules.
    if (node.is_node_address)(destination) {
        return Disposition::Untouched;
    }
    // The route is asked only when an outcome depends on the interface.
    let judged = |interface: Option<&str>| {
        Some((
            before.outcome(flow.source, destination, interface)?,
            after.outcome(flow.source, destination, interface)?,
        ))
    };
    let outcomes = judged(None).or_else(|| {
        let interface = (node.interface_to)(destination)?;
        judged(Some(&interface))
    });
    let Some((was, now)) = outcomes else {
        return Disposition::Untouched;
    };
    if was == now || consistent(flow, now, node.is_node_address) {
        return Disposition::Untouched;
    }
    if node.scope.covers(flow.protocol) {
        Disposition::Reset { now }
    } else {
        Disposition::Left { now }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Options};
    use crate::plan::{plan_family, Family, PlanOptions};

    fn ruleset(yaml: &str, egress: Option<IpAddr>) -> Ruleset {
        let config = crate::config::check_text(yaml, &Options::default())
            .into_config()
            .expect("a valid config");
        let egress = crate::plan::ResolvedEgress {
            v4: egress,
            ..Default::default()
        };
        plan_family(&config, &PlanOptions::default(), &egress, Family::V4)
    }

    fn flow(protocol: u8, source: &str, destination: &str, reply_destination: &str) -> Flow {
        Flow {
            family: Family::V4,
            protocol,
            source: source.parse().unwrap(),
            destination: destination.parse().unwrap(),
            source_port: Some(40000),
            destination_port: Some(53),
            reply_source: destination.parse().unwrap(),
            reply_destination: reply_destination.parse().unwrap(),
            reply_destination_port: Some(40000),
            icmp_id: None,
            reply_icmp_id: None,
            id: 7,
        }
    }

    const NODE: &str = "203.0.113.1";

    fn dispose_with(
        flow: &Flow,
        before: &Ruleset,
        after: &Ruleset,
        scope: ResetScope,
    ) -> Disposition {
        dispose_between(flow, &PlannedRules::new(before), after, scope)
    }

    fn dispose_between(
        flow: &Flow,
        before: &dyn Decides,
        after: &Ruleset,
        scope: ResetScope,
    ) -> Disposition {
        let node_address = |a: IpAddr| a == NODE.parse::<IpAddr>().unwrap();
        let mut route = |_: IpAddr| Some("eth0".to_string());
        let mut node = ResetContext {
            is_node_address: &node_address,
            interface_to: &mut route,
            scope,
        };
        dispose(flow, before, &PlannedRules::new(after), &mut node)
    }

    #[test]
    fn after_an_install_from_nothing_only_flows_the_rules_now_rewrite_are_reset() {
        let after = ruleset("nonMasqueradeCIDRs: [10.0.0.0/8]\n", None);
        let unmasqueraded = flow(17, "192.168.1.2", "198.51.100.7", "192.168.1.2");
        assert_eq!(
            dispose_between(
                &unmasqueraded,
                &NoRulesOfOurs,
                &after,
                ResetScope::Connectionless
            ),
            Disposition::Reset {
                now: Outcome::Masquerade
            }
        );
        assert_eq!(
            dispose_between(&unmasqueraded, &NoRulesOfOurs, &after, ResetScope::Off),
            Disposition::Left {
                now: Outcome::Masquerade
            }
        );
        // Kept by the rules as by their absence; rewritten by a neighbour's rule (the
        // CNI's, kube-proxy's): not ours to judge.
        let private = flow(17, "192.168.1.2", "10.9.9.9", "192.168.1.2");
        let rewritten = flow(17, "192.168.1.2", "10.9.9.9", NODE);
        let masqueraded = flow(17, "192.168.1.2", "198.51.100.7", NODE);
        for untouched in [&private, &rewritten, &masqueraded] {
            assert_eq!(
                dispose_between(untouched, &NoRulesOfOurs, &after, ResetScope::All),
                Disposition::Untouched,
                "{untouched:?}"
            );
        }
    }

    #[test]
    fn a_destination_moved_to_kept_resets_its_masqueraded_udp_flow_only() {
        let before = ruleset("nonMasqueradeCIDRs: [10.0.0.0/8]\n", None);
        let after = ruleset("nonMasqueradeCIDRs: [10.0.0.0/8, 198.51.100.0/24]\n", None);
        let moved = flow(17, "192.168.1.2", "198.51.100.7", NODE);
        assert_eq!(
            dispose_with(&moved, &before, &after, ResetScope::Connectionless),
            Disposition::Reset { now: Outcome::Keep }
        );
        // TCP keeps its connection under the default; `all` resets it.
        let tcp = flow(6, "192.168.1.2", "198.51.100.7", NODE);
        assert_eq!(
            dispose_with(&tcp, &before, &after, ResetScope::Connectionless),
            Disposition::Left { now: Outcome::Keep }
        );
        assert_eq!(
            dispose_with(&tcp, &before, &after, ResetScope::All),
            Disposition::Reset { now: Outcome::Keep }
        );
        assert_eq!(
            dispose_with(&moved, &before, &after, ResetScope::Off),
            Disposition::Left { now: Outcome::Keep }
        );
        // A destination the change did not touch is left, whatever its entry holds.
        let elsewhere = flow(17, "192.168.1.2", "203.0.113.50", NODE);
        assert_eq!(
            dispose_with(&elsewhere, &before, &after, ResetScope::All),
            Disposition::Untouched
        );
        let odd = flow(17, "192.168.1.2", "10.1.2.3", NODE);
        assert_eq!(
            dispose_with(&odd, &before, &after, ResetScope::All),
            Disposition::Untouched
        );
        // Already as the new rules decide (made after the change): untouched.
        let fresh = flow(17, "192.168.1.2", "198.51.100.7", "192.168.1.2");
        assert_eq!(
            dispose_with(&fresh, &before, &after, ResetScope::All),
            Disposition::Untouched
        );
    }

    #[test]
    fn a_destination_moved_to_masqueraded_resets_its_kept_flow() {
        let before = ruleset("nonMasqueradeCIDRs: [10.0.0.0/8, 198.51.100.0/24]\n", None);
        let after = ruleset("nonMasqueradeCIDRs: [10.0.0.0/8]\n", None);
        let kept = flow(17, "192.168.1.2", "198.51.100.7", "192.168.1.2");
        assert_eq!(
            dispose_with(&kept, &before, &after, ResetScope::Connectionless),
            Disposition::Reset {
                now: Outcome::Masquerade
            }
        );
        // The node's own traffic is masqueraded to itself: nothing to reset.
        let own = flow(17, NODE, "198.51.100.7", NODE);
        assert_eq!(
            dispose_with(&own, &before, &after, ResetScope::All),
            Disposition::Untouched
        );
        // Traffic to the node never meets the rules.
        let to_node = flow(17, "192.168.1.2", NODE, "192.168.1.2");
        assert_eq!(
            dispose_with(&to_node, &before, &after, ResetScope::All),
            Disposition::Untouched
        );
    }

    #[test]
    fn a_new_output_address_resets_flows_rewritten_to_the_old_one() {
        let old: IpAddr = "203.0.113.9".parse().unwrap();
        let new: IpAddr = "203.0.113.10".parse().unwrap();
        let before = ruleset("outputAddress: 203.0.113.8/29\n", Some(old));
        let after = ruleset("outputAddress: 203.0.113.8/29\n", Some(new));
        let stale = flow(17, "192.168.1.2", "198.51.100.7", "203.0.113.9");
        assert_eq!(
            dispose_with(&stale, &before, &after, ResetScope::Connectionless),
            Disposition::Reset {
                now: Outcome::Snat(new)
            }
        );
        let current = flow(17, "192.168.1.2", "198.51.100.7", "203.0.113.10");
        assert_eq!(
            dispose_with(&current, &before, &after, ResetScope::All),
            Disposition::Untouched
        );
        let private = flow(17, "192.168.1.2", "10.9.9.9", "192.168.1.2");
        assert_eq!(
            dispose_with(&private, &before, &after, ResetScope::All),
            Disposition::Untouched
        );
    }

    #[test]
    fn interface_scope_is_judged_by_the_route() {
        let before = ruleset("nonMasqueradeCIDRs: [10.0.0.0/8]\n", None);
        let after = ruleset(
            "nonMasqueradeCIDRs: [10.0.0.0/8]\noutputInterfaces: [vout]\n",
            None,
        );
        let flow = flow(17, "192.168.1.2", "198.51.100.7", NODE);
        let node_address = |_: IpAddr| false;
        for (route, expected) in [
            (Some("vout"), Disposition::Untouched),
            (Some("vside"), Disposition::Reset { now: Outcome::Keep }),
            (None, Disposition::Untouched),
        ] {
            let mut lookup = |_: IpAddr| route.map(str::to_string);
            let mut node = ResetContext {
                is_node_address: &node_address,
                interface_to: &mut lookup,
                scope: ResetScope::Connectionless,
            };
            assert_eq!(
                dispose(
                    &flow,
                    &PlannedRules::new(&before),
                    &PlannedRules::new(&after),
                    &mut node
                ),
                expected,
                "{route:?}"
            );
        }
    }

    /// `PlannedRules` (a binary search over kept ranges) says what `plan::decide` (a walk of the
    /// decisions) says, on random configs with forced and kept CIDRs nested.
    #[test]
    fn planned_outcomes_agree_with_decide() {
        use crate::plan::decide::tests::Rng;
        let mut rng = Rng(0x5eed_c0de);
        for _ in 0..300 {
            let mut config = Config::defaults(&Options::default());
            config.non_masquerade_cidrs = (0..rng.below(12)).map(|_| rng.net(Family::V4)).collect();
            config.force_masquerade_cidrs =
                (0..rng.below(6)).map(|_| rng.net(Family::V4)).collect();
            let ruleset = plan_family(
                &config,
                &PlanOptions::default(),
                &crate::plan::ResolvedEgress::default(),
                Family::V4,
            );
            let planned = PlannedRules::new(&ruleset);
            for _ in 0..50 {
                let (src, dst) = (rng.addr(Family::V4), rng.addr(Family::V4));
                let expected = match crate::plan::decide(&ruleset, src, dst).action {
                    Action::KeepSource => Outcome::Keep,
                    Action::Masquerade => Outcome::Masquerade,
                };
                assert_eq!(
                    planned.outcome(src, dst, None),
                    Some(expected),
                    "{dst} in {config:?}"
                );
            }
        }
    }
}
