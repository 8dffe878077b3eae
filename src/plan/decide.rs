//! What a ruleset does with one packet. This is the single source of truth for a verdict:
//! backends are tested to agree with it, and `explain` reports through it.
#![cfg_attr(not(test), allow(dead_code))]

use super::{Action, Ruleset};
use std::net::IpAddr;

/// Why a packet got its verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The packet is of the other IP family: this ruleset does not see it.
    OtherFamily,
    /// The source is outside the entry condition's source ranges.
    SourceNotSelected,
    /// A destination decision matched (the first in order).
    DecisionMatched,
    /// No decision matched: the masquerade request applies.
    NoDecisionMatched,
    /// The destination is an address of this node: it never enters the ruleset (the
    /// kernel's check, not `decide`'s; `explain` asks the kernel).
    LocalDestination,
    /// The packet would be rewritten, but it leaves an interface `outputInterfaces` does not
    /// list: no rule of ours rewrites it.
    InterfaceNotSelected,
}

/// The source a packet is judged from when none is given (`explain` without `--from`, a
/// rollout's invariant without `from`): a pod address of the family's first
/// `masqueradeSourceCIDRs` range (the traffic the scoping is for), else the family's
/// unspecified address (any source).
pub fn assumed_source(config: &crate::config::Config, family: super::Family) -> IpAddr {
    config
        .masquerade_source_cidrs
        .iter()
        .find(|n| family.holds(n))
        .map(|n| n.hosts().next().unwrap_or(n.addr()))
        .unwrap_or(match family {
            super::Family::V4 => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            super::Family::V6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        })
}

/// The verdict for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanVerdict {
    pub action: Action,
    /// Index into `ruleset.decisions` of the decision that decided, if one did.
    pub decision: Option<usize>,
    pub reason: Reason,
}

/// [`decide`] for a packet leaving `interface`: a rewrite becomes a keep when the ruleset is
/// scoped to interfaces that do not match it.
pub fn decide_leaving(ruleset: &Ruleset, src: IpAddr, dst: IpAddr, interface: &str) -> PlanVerdict {
    let verdict = decide(ruleset, src, dst);
    if verdict.action == Action::Masquerade && !ruleset.entry.selects_interface(interface) {
        return PlanVerdict {
            action: Action::KeepSource,
            decision: verdict.decision,
            reason: Reason::InterfaceNotSelected,
        };
    }
    verdict
}

/// The verdict of `ruleset` for a packet from `src` to `dst`, where `dst` is not an address
/// of this node (local destinations never enter the ruleset: that check is the kernel's),
/// leaving an interface the ruleset selects (see [`decide_leaving`]).
pub fn decide(ruleset: &Ruleset, src: IpAddr, dst: IpAddr) -> PlanVerdict {
    let untouched = |reason| PlanVerdict {
        action: Action::KeepSource,
        decision: None,
        reason,
    };
    if !ruleset.family.holds_addr(dst) {
        return untouched(Reason::OtherFamily);
    }
    let sources = &ruleset.entry.source_ranges;
    if !sources.is_empty() && !sources.iter().any(|net| net.contains(&src)) {
        return untouched(Reason::SourceNotSelected);
    }
    match ruleset
        .decisions
        .iter()
        .position(|d| d.destination.contains(&dst))
    {
        Some(index) => PlanVerdict {
            action: ruleset.decisions[index].action,
            decision: Some(index),
            reason: Reason::DecisionMatched,
        },
        None => PlanVerdict {
            action: Action::Masquerade,
            decision: None,
            reason: Reason::NoDecisionMatched,
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::{Config, Options};
    use crate::plan::{plan, Family, PlanOptions};
    use ipnet::{IpNet, Ipv4Net, Ipv6Net};
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// A small deterministic generator (xorshift64*), so property tests need no dependency
    /// and every failure is reproducible from its seed.
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// An address, biased towards a few small neighbourhoods so CIDRs overlap often.
        pub(crate) fn addr(&mut self, family: Family) -> IpAddr {
            let base = self.below(4) as u32;
            let noise = self.next() as u32 & 0x00ff_ffff;
            match family {
                Family::V4 => IpAddr::V4(Ipv4Addr::from((base << 24 | noise) ^ 0x0a00_0000)),
                Family::V6 => {
                    let high = 0xfd00_u128 << 112 | u128::from(base) << 100;
                    IpAddr::V6(Ipv6Addr::from(high | u128::from(noise)))
                }
            }
        }

        pub(crate) fn net(&mut self, family: Family) -> IpNet {
            let addr = self.addr(family);
            match addr {
                IpAddr::V4(a) => {
                    let len = 4 + self.below(29) as u8;
                    IpNet::V4(Ipv4Net::new(a, len).unwrap().trunc())
                }
                IpAddr::V6(a) => {
                    let len = 4 + self.below(125) as u8;
                    IpNet::V6(Ipv6Net::new(a, len).unwrap().trunc())
                }
            }
        }
    }

    /// The golden files' config with the extension keys: forced CIDRs nested both ways (a
    /// kept block inside a forced one inside a kept one) and one inside link-local.
    pub(crate) fn extension_config() -> Config {
        let mut config = Config::defaults(&Options::default());
        config.non_masquerade_cidrs.extend(
            ["fd00::/8", "10.8.1.0/24", "fd00:8:1::/48"].map(|c| c.parse::<IpNet>().unwrap()),
        );
        config.force_masquerade_cidrs = ["10.8.0.0/16", "fd00:8::/32", "169.254.169.254/32"]
            .map(|c| c.parse().unwrap())
            .to_vec();
        config
    }

    /// One of the golden files' egress cases: what it is planned from.
    pub(crate) struct EgressCase {
        pub label: String,
        pub config: Config,
        /// The flags (IPv6 on).
        pub options: PlanOptions,
        /// The output addresses as a node holding them resolves them.
        pub egress: crate::plan::ResolvedEgress,
    }

    /// The golden files' egress cases (`outputAddress` resolved on a node, `outputInterfaces`,
    /// both; over the extension config, with and without `--to-ports`).
    pub(crate) fn egress_cases() -> Vec<EgressCase> {
        let snat = crate::plan::ResolvedEgress {
            v4: Some("203.0.113.9".parse().unwrap()),
            v6: Some("2001:db8:f0::9".parse().unwrap()),
            ..Default::default()
        };
        let interfaces: Vec<crate::config::egress::InterfacePattern> = ["bond+", "eth0"]
            .iter()
            .map(|p| crate::config::egress::InterfacePattern::parse(p).unwrap())
            .collect();
        let mut cases = Vec::new();
        for (label, resolved, scoped) in [
            ("outputAddress", snat, false),
            (
                "outputInterfaces",
                crate::plan::ResolvedEgress::default(),
                true,
            ),
            ("outputAddress+outputInterfaces", snat, true),
        ] {
            for to_ports in ["", "1024-29999,32768-65535"] {
                let mut config = extension_config();
                if resolved.v4.is_some() {
                    config.output_address =
                        Some(crate::config::egress::EgressTarget::parse("203.0.113.8/29").unwrap());
                    config.output_address_ipv6 =
                        Some(crate::config::egress::EgressTarget::parse("2001:db8:f0::9").unwrap());
                }
                if scoped {
                    config.output_interfaces = interfaces.clone();
                }
                let options = PlanOptions {
                    to_ports: to_ports.parse().unwrap(),
                    enable_ipv6: true,
                    ..PlanOptions::default()
                };
                cases.push(EgressCase {
                    label: format!("{label} to-ports={to_ports:?}"),
                    config,
                    options,
                    egress: resolved,
                });
            }
        }
        cases
    }

    /// A random config for `family`'s property tests: non-masquerade and forced lists with
    /// overlaps, nesting and repeats (never one CIDR in both: the config refuses that),
    /// sometimes source ranges, random link-local flags.
    pub(crate) fn random_config(rng: &mut Rng, family: Family) -> Config {
        let mut config = Config::defaults(&Options {
            enable_ipv6: true,
            ..Options::default()
        });
        let count = rng.below(12) as usize;
        config.non_masquerade_cidrs = (0..count).map(|_| rng.net(family)).collect();
        if rng.below(3) == 0 && count > 0 {
            let again = config.non_masquerade_cidrs[0];
            config.non_masquerade_cidrs.push(again);
        }
        let mut forced: Vec<IpNet> = Vec::new();
        for _ in 0..rng.below(8) {
            // Often a narrower block inside a kept one, so nesting three deep happens.
            let net = match config.non_masquerade_cidrs.get(rng.below(16) as usize) {
                Some(outer) if outer.prefix_len() < outer.max_prefix_len() => {
                    let len = outer.prefix_len()
                        + 1
                        + rng.below(u64::from(outer.max_prefix_len() - outer.prefix_len())) as u8;
                    // A random address of `outer`: its network bits, random host bits.
                    let shifted = match (outer.network(), outer.hostmask(), rng.addr(family)) {
                        (IpAddr::V4(n), IpAddr::V4(h), IpAddr::V4(r)) => {
                            IpAddr::V4(Ipv4Addr::from(u32::from(n) | (u32::from(r) & u32::from(h))))
                        }
                        (IpAddr::V6(n), IpAddr::V6(h), IpAddr::V6(r)) => IpAddr::V6(
                            Ipv6Addr::from(u128::from(n) | (u128::from(r) & u128::from(h))),
                        ),
                        (n, _, _) => n,
                    };
                    IpNet::new(shifted, len).unwrap().trunc()
                }
                _ => rng.net(family),
            };
            if !config.non_masquerade_cidrs.contains(&net) && !forced.contains(&net) {
                forced.push(net);
            }
        }
        // Nested keeps inside forced blocks come from the list above by chance; add one.
        if let Some(f) = forced
            .first()
            .filter(|f| f.prefix_len() + 2 <= f.max_prefix_len())
        {
            let inner = IpNet::new(f.addr(), f.prefix_len() + 2).unwrap().trunc();
            if !forced.contains(&inner) && rng.below(2) == 0 {
                config.non_masquerade_cidrs.push(inner);
            }
        }
        config.force_masquerade_cidrs = forced;
        if rng.below(3) == 0 {
            config.masquerade_source_cidrs =
                (0..1 + rng.below(3)).map(|_| rng.net(family)).collect();
        }
        config.masq_link_local = rng.below(2) == 0;
        config.masq_link_local_ipv6 = rng.below(2) == 0;
        if rng.below(3) == 0 {
            let count = 1 + rng.below(2) as usize;
            config.output_interfaces = (0..count)
                .map(|_| {
                    let pick =
                        INTERFACE_PATTERNS[rng.below(INTERFACE_PATTERNS.len() as u64) as usize];
                    crate::config::egress::InterfacePattern::parse(pick).unwrap()
                })
                .collect();
            config.output_interfaces.sort();
            config.output_interfaces.dedup();
        }
        if rng.below(3) == 0 {
            let address = rng.addr(family);
            let target = crate::config::egress::EgressTarget(IpNet::from(address));
            match family {
                Family::V4 => config.output_address = Some(target),
                Family::V6 => config.output_address_ipv6 = Some(target),
            }
        }
        config
    }

    /// Patterns the random configs scope to, and the interfaces packets leave by.
    const INTERFACE_PATTERNS: [&str; 4] = ["eth0", "eth+", "ens*", "wlan0"];
    const INTERFACES: [&str; 5] = ["eth0", "eth1", "ens3", "wlan0", "bond0"];

    /// The output addresses a random config names, as a node holding them resolves them.
    pub(crate) fn node_egress(config: &Config) -> crate::plan::ResolvedEgress {
        crate::plan::ResolvedEgress {
            v4: config.output_address.map(|t| t.0.addr()),
            v6: config.output_address_ipv6.map(|t| t.0.addr()),
            ..Default::default()
        }
    }

    /// The reference verdict for a packet leaving `interface`: the longest prefix's, and a
    /// rewrite only when the interface is listed (or none is).
    pub(crate) fn reference_verdict(
        config: &Config,
        src: IpAddr,
        dst: IpAddr,
        interface: &str,
    ) -> Action {
        match longest_prefix_verdict(config, src, dst) {
            Action::Masquerade
                if !config.output_interfaces.is_empty()
                    && !config
                        .output_interfaces
                        .iter()
                        .any(|p| p.matches(interface)) =>
            {
                Action::KeepSource
            }
            action => action,
        }
    }

    /// The verdict by definition: outside the source ranges nothing happens; otherwise the
    /// longest prefix across the kept (link-local included) and forced lists decides.
    pub(crate) fn longest_prefix_verdict(config: &Config, src: IpAddr, dst: IpAddr) -> Action {
        let sources: Vec<&IpNet> = config
            .masquerade_source_cidrs
            .iter()
            .filter(|n| n.addr().is_ipv4() == dst.is_ipv4())
            .collect();
        if !sources.is_empty() && !sources.iter().any(|n| n.contains(&src)) {
            return Action::KeepSource;
        }
        let link_local = match dst {
            IpAddr::V4(_) if !config.masq_link_local => Some(Family::V4.link_local()),
            IpAddr::V6(_) if !config.masq_link_local_ipv6 => Some(Family::V6.link_local()),
            _ => None,
        };
        let kept = config
            .non_masquerade_cidrs
            .iter()
            .chain(link_local.as_ref());
        let best_kept = kept
            .filter(|n| n.contains(&dst))
            .map(|n| n.prefix_len())
            .max();
        let best_forced = config
            .force_masquerade_cidrs
            .iter()
            .filter(|n| n.contains(&dst))
            .map(|n| n.prefix_len())
            .max();
        match (best_kept, best_forced) {
            (Some(k), Some(f)) if k > f => Action::KeepSource,
            (Some(_), None) => Action::KeepSource,
            _ => Action::Masquerade,
        }
    }

    /// A source address: half the time inside a listed source range, if there are any.
    pub(crate) fn random_source(rng: &mut Rng, config: &Config, family: Family) -> IpAddr {
        let inside: Vec<&IpNet> = config
            .masquerade_source_cidrs
            .iter()
            .filter(|n| family.holds(n))
            .collect();
        match inside.get(rng.below(2 * inside.len().max(1) as u64) as usize) {
            Some(net) => net.hosts().next().unwrap_or(net.addr()),
            None => rng.addr(family),
        }
    }

    /// Walks `packets` random packets of `set`'s family through `live` (a backend's reading of
    /// the rules it wrote) and asserts every walk is fully judged and gives both `decide`'s
    /// verdict and the longest prefix's.
    pub(crate) fn assert_live_walk_agrees(
        rng: &mut Rng,
        config: &Config,
        set: &Ruleset,
        live: &crate::plan::live::Inspection,
        round: usize,
        packets: usize,
    ) {
        for _ in 0..packets {
            let dst = rng.addr(set.family);
            let src = random_source(rng, config, set.family);
            let interface = INTERFACES[rng.below(INTERFACES.len() as u64) as usize];
            let walked = live.evaluate_leaving(src, dst, false, Some(interface));
            assert!(walked.unjudged.is_empty(), "round {round}: {walked:?}");
            assert_eq!(
                walked.action,
                decide_leaving(set, src, dst, interface).action,
                "round {round}: {src} -> {dst} via {interface}"
            );
            assert_eq!(
                walked.action,
                reference_verdict(config, src, dst, interface),
                "round {round}: {src} -> {dst} via {interface} with {config:?}"
            );
            if let Some(rule) = walked.rule.filter(|_| walked.action == Action::Masquerade) {
                let crate::plan::live::RuleVerdict::Masquerade { snat_to, .. } =
                    live.rules[rule].verdict
                else {
                    panic!("round {round}: a rewrite by a rule that does not rewrite");
                };
                let expected = match set.masquerade.egress {
                    crate::plan::Egress::Snat(address) => Some(address),
                    _ => None,
                };
                assert_eq!(snat_to, expected, "round {round}: the rewrite's source");
            }
        }
    }

    #[test]
    fn property_decide_is_the_longest_prefix_across_both_lists() {
        let mut rng = Rng(0x5eed_0009_f0ce_d00d);
        let (mut by_forced, mut kept_inside_forced, mut outside_sources) = (0, 0, 0);
        let mut other_interface = 0;
        for round in 0..600 {
            let family = if round % 2 == 0 {
                Family::V4
            } else {
                Family::V6
            };
            let config = random_config(&mut rng, family);
            let options = PlanOptions {
                enable_ipv6: true,
                ..PlanOptions::default()
            };
            let set = plan(&config, &options, &node_egress(&config))
                .into_iter()
                .find(|s| s.family == family)
                .unwrap();
            for _ in 0..60 {
                let dst = rng.addr(family);
                let src = random_source(&mut rng, &config, family);
                let verdict = decide(&set, src, dst);
                assert_eq!(
                    verdict.action,
                    longest_prefix_verdict(&config, src, dst),
                    "round {round}: {src} -> {dst} with {config:?}"
                );
                let interface = INTERFACES[rng.below(INTERFACES.len() as u64) as usize];
                let leaving = decide_leaving(&set, src, dst, interface);
                assert_eq!(
                    leaving.action,
                    reference_verdict(&config, src, dst, interface),
                    "round {round}: {src} -> {dst} via {interface}"
                );
                if leaving.reason == Reason::InterfaceNotSelected {
                    other_interface += 1;
                }
                let forced_holds = config
                    .force_masquerade_cidrs
                    .iter()
                    .any(|f| f.contains(&dst));
                match verdict.decision.map(|i| &set.decisions[i]) {
                    Some(d) if d.action == Action::Masquerade => by_forced += 1,
                    Some(_) if forced_holds => kept_inside_forced += 1,
                    _ => {}
                }
                if verdict.reason == Reason::SourceNotSelected {
                    outside_sources += 1;
                }
            }
        }
        // The cases the property is about did occur (counts from this fixed seed).
        assert!(by_forced > 500, "{by_forced} verdicts by a forced CIDR");
        assert!(
            kept_inside_forced > 50,
            "{kept_inside_forced} kept inside a forced CIDR"
        );
        assert!(
            outside_sources > 500,
            "{outside_sources} from outside the sources"
        );
        assert!(
            other_interface > 500,
            "{other_interface} leaving an interface not listed"
        );
    }

    fn default_v4() -> Ruleset {
        plan(
            &Config::defaults(&Options::default()),
            &PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
        )
        .remove(0)
    }

    #[test]
    fn verdicts_of_the_default_plan() {
        let set = default_v4();
        let v = |dst: &str| decide(&set, "10.244.1.5".parse().unwrap(), dst.parse().unwrap());
        assert_eq!(v("8.8.8.8").action, Action::Masquerade);
        assert_eq!(v("8.8.8.8").reason, Reason::NoDecisionMatched);
        assert_eq!(v("10.1.2.3").action, Action::KeepSource);
        assert_eq!(v("10.1.2.3").decision, Some(1));
        assert_eq!(v("169.254.169.254").decision, Some(0));
        assert_eq!(v("192.168.255.255").decision, Some(3));
        assert_eq!(v("fd00::1").reason, Reason::OtherFamily);
    }

    #[test]
    fn source_ranges_limit_what_enters() {
        let mut set = default_v4();
        set.entry.source_ranges = vec!["10.244.0.0/16".parse().unwrap()];
        let pod = "10.244.3.4".parse().unwrap();
        let host = "172.20.0.9".parse().unwrap();
        let out = "8.8.8.8".parse().unwrap();
        assert_eq!(decide(&set, pod, out).action, Action::Masquerade);
        let other = decide(&set, host, out);
        assert_eq!(other.action, Action::KeepSource);
        assert_eq!(other.reason, Reason::SourceNotSelected);
    }

    /// For random CIDR lists (overlaps and duplicates included) and random addresses, the
    /// verdict is "keep" exactly when some listed CIDR holds the destination, and the deciding
    /// decision is the first such one.
    #[test]
    fn property_verdict_is_membership_with_first_match() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for round in 0..400 {
            let family = if round % 2 == 0 {
                Family::V4
            } else {
                Family::V6
            };
            let mut config = Config::defaults(&Options {
                enable_ipv6: true,
                ..Options::default()
            });
            let count = rng.below(12) as usize;
            config.non_masquerade_cidrs = (0..count).map(|_| rng.net(family)).collect();
            if rng.below(3) == 0 && count > 0 {
                let again = config.non_masquerade_cidrs[0];
                config.non_masquerade_cidrs.push(again);
            }
            config.masq_link_local = rng.below(2) == 0;
            config.masq_link_local_ipv6 = rng.below(2) == 0;
            let options = PlanOptions {
                enable_ipv6: true,
                ..PlanOptions::default()
            };
            let set = plan(&config, &options, &crate::plan::ResolvedEgress::default())
                .into_iter()
                .find(|s| s.family == family)
                .unwrap();
            for _ in 0..50 {
                let dst = rng.addr(family);
                let verdict = decide(&set, rng.addr(family), dst);
                let first = set
                    .decisions
                    .iter()
                    .position(|d| d.destination.contains(&dst));
                assert_eq!(verdict.decision, first, "seed round {round}, {dst}");
                let kept = set.non_masquerade().any(|n| n.contains(&dst));
                assert_eq!(
                    verdict.action == Action::KeepSource,
                    kept,
                    "round {round}: {dst} with {:?}",
                    config.non_masquerade_cidrs
                );
            }
        }
    }
}
