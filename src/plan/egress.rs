//! Which address the egress keys name on this node: `outputAddress[IPv6]` resolved against
//! the node's own addresses (an address the node must hold, or the lowest of its addresses
//! inside a prefix). Pure: the agent reads the addresses, this decides.

use super::Family;
use crate::config::egress::EgressTarget;
use crate::config::Config;
use std::net::IpAddr;

/// One address of this node, on an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddress {
    pub interface: String,
    pub address: IpAddr,
    pub prefix_len: u8,
    /// An IPv6 address past its preferred lifetime: still held (its flows go on), chosen
    /// only when no preferred address is in the configured value.
    pub deprecated: bool,
}

/// The address each family's traffic is SNATed to; None: masquerade (or not resolved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResolvedEgress {
    pub v4: Option<IpAddr>,
    pub v6: Option<IpAddr>,
    /// IPv4's configured address is not on this node: IPv4 is masqueraded until it is back.
    pub fallback_v4: bool,
    /// The same for IPv6.
    pub fallback_v6: bool,
}

impl ResolvedEgress {
    pub fn of(&self, family: Family) -> Option<IpAddr> {
        match family {
            Family::V4 => self.v4,
            Family::V6 => self.v6,
        }
    }

    /// Whether `family` masquerades because the node does not hold its configured address.
    pub fn falls_back(&self, family: Family) -> bool {
        match family {
            Family::V4 => self.fallback_v4,
            Family::V6 => self.fallback_v6,
        }
    }

    fn set(&mut self, family: Family, address: Option<IpAddr>) {
        match family {
            Family::V4 => (self.v4, self.fallback_v4) = (address, address.is_none()),
            Family::V6 => (self.v6, self.fallback_v6) = (address, address.is_none()),
        }
    }
}

/// Why the config's output address cannot be used on this node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error("{key} {target}: this node does not hold that address (it holds {held})")]
    AddressNotHeld {
        key: &'static str,
        target: EgressTarget,
        held: String,
    },
    #[error("{key} {target}: this node holds no address inside that prefix (it holds {held})")]
    NoAddressInPrefix {
        key: &'static str,
        target: EgressTarget,
        held: String,
    },
}

/// The best address for one configured value among those offered so far: the lowest
/// preferred one it admits, else the lowest deprecated one. Constant memory, so the node's
/// addresses can be streamed through it however many there are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    preferred: Option<IpAddr>,
    deprecated: Option<IpAddr>,
}

impl Choice {
    /// Considers one address of the node for `target`.
    pub fn offer(&mut self, target: EgressTarget, address: IpAddr, deprecated: bool) {
        if !target.admits(address) {
            return;
        }
        let slot = if deprecated {
            &mut self.deprecated
        } else {
            &mut self.preferred
        };
        *slot = Some(slot.map_or(address, |held| held.min(address)));
    }

    /// The address chosen: a deprecated one only while no preferred one is admitted.
    pub fn best(&self) -> Option<IpAddr> {
        self.preferred.or(self.deprecated)
    }
}

/// Why `family` masquerades although the config names an output address: said alike by the
/// agent (log, `/readyz`), `show` and `explain`.
pub fn fallback_reason(family: Family, err: &EgressError) -> String {
    format!(
        "{err}: {family} traffic is masqueraded (the outgoing interface's address) until an address in that value is on this node"
    )
}

/// The address `target` names among `addresses`: itself when the node holds it, else the
/// lowest address inside the prefix (stable whatever order the kernel lists them in); a
/// deprecated IPv6 address only when no preferred one is inside.
pub fn pick(target: EgressTarget, addresses: &[NodeAddress]) -> Option<IpAddr> {
    let mut choice = Choice::default();
    for a in addresses {
        choice.offer(target, a.address, a.deprecated);
    }
    choice.best()
}

/// Whether the config names an output address for one of `families`.
pub fn names_output_address(config: &Config, families: &[Family]) -> bool {
    families
        .iter()
        .any(|f| config.output_address_of(*f == Family::V6).is_some())
}

/// The configured output addresses of `families`: what an address change must fall inside
/// to be able to change the resolution.
pub fn targets(config: &Config, families: &[Family]) -> Vec<EgressTarget> {
    families
        .iter()
        .filter_map(|f| config.output_address_of(*f == Family::V6))
        .collect()
}

/// How many of a family's addresses an error names.
const NAMED_IN_ERRORS: usize = 8;

/// One family's output address being resolved.
#[derive(Clone, Debug)]
struct Pending {
    family: Family,
    target: EgressTarget,
    choice: Choice,
    /// The first few addresses of the family, for the error when none is admitted.
    sample: Vec<String>,
}

/// The config's output addresses resolved from the node's addresses, offered one at a time
/// (a streamed dump keeps nothing else): what `finish` returns is the same whatever the
/// order and number of the addresses.
#[derive(Clone, Debug)]
pub struct Resolver {
    pending: Vec<Pending>,
}

/// The outcome of a resolution: the addresses to SNAT to, and for each family whose value the
/// node holds no address of, why (that family masquerades meanwhile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    pub egress: ResolvedEgress,
    pub lost: Vec<(Family, EgressError)>,
}

impl Resolver {
    pub fn new(config: &Config, families: &[Family]) -> Resolver {
        let pending = families
            .iter()
            .filter_map(|family| {
                let target = config.output_address_of(*family == Family::V6)?;
                Some(Pending {
                    family: *family,
                    target,
                    choice: Choice::default(),
                    sample: Vec::new(),
                })
            })
            .collect();
        Resolver { pending }
    }

    /// The families whose addresses must be read.
    pub fn families(&self) -> Vec<Family> {
        self.pending.iter().map(|p| p.family).collect()
    }

    /// Considers one address of the node; `interface` names its interface, asked only when
    /// an error may name it.
    pub fn offer(&mut self, address: IpAddr, deprecated: bool, interface: impl FnOnce() -> String) {
        let mut interface = Some(interface);
        for pending in &mut self.pending {
            if !pending.family.holds_addr(address) {
                continue;
            }
            pending.choice.offer(pending.target, address, deprecated);
            if pending.sample.len() < NAMED_IN_ERRORS {
                if let Some(name) = interface.take().map(|f| f()) {
                    pending.sample.push(format!("{address} on {name}"));
                }
            }
        }
    }

    /// What the addresses offered so far resolve to.
    pub fn chosen(&self) -> ResolvedEgress {
        let mut egress = ResolvedEgress::default();
        for pending in &self.pending {
            egress.set(pending.family, pending.choice.best());
        }
        egress
    }

    pub fn finish(self) -> Resolution {
        let mut egress = ResolvedEgress::default();
        let mut lost = Vec::new();
        for pending in self.pending {
            let best = pending.choice.best();
            egress.set(pending.family, best);
            if best.is_some() {
                continue;
            }
            let key = if pending.family == Family::V6 {
                "outputAddressIPv6"
            } else {
                "outputAddress"
            };
            let mut held = pending.sample;
            if held.is_empty() {
                held.push(format!("no {} address", pending.family.as_str()));
            }
            let (target, held) = (pending.target, held.join(", "));
            lost.push((
                pending.family,
                if target.is_address() {
                    EgressError::AddressNotHeld { key, target, held }
                } else {
                    EgressError::NoAddressInPrefix { key, target, held }
                },
            ));
        }
        Resolution { egress, lost }
    }
}

/// The config's output addresses on a node holding `addresses`: SNAT to the chosen address
/// of each family that has one, masquerade (with the reason) for a family that has none. The
/// node's reader feeds a `Resolver` from its dump as it streams; the tests feed it a list.
#[cfg(test)]
pub fn on_node(config: &Config, families: &[Family], addresses: &[NodeAddress]) -> Resolution {
    let mut resolver = Resolver::new(config, families);
    for a in addresses {
        resolver.offer(a.address, a.deprecated, || a.interface.clone());
    }
    resolver.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Options;

    /// The output address of every managed family that the config sets, from the node's
    /// addresses; an error when the node holds none that the config names.
    fn resolve(
        config: &Config,
        families: &[Family],
        addresses: &[NodeAddress],
    ) -> Result<ResolvedEgress, EgressError> {
        let resolution = on_node(config, families, addresses);
        match resolution.lost.into_iter().next() {
            Some((_, err)) => Err(err),
            None => Ok(resolution.egress),
        }
    }

    fn on(interface: &str, address: &str) -> NodeAddress {
        NodeAddress {
            interface: interface.into(),
            address: address.parse().unwrap(),
            prefix_len: 24,
            deprecated: false,
        }
    }

    #[test]
    fn a_prefix_names_the_lowest_address_inside_it_and_an_address_must_be_held() {
        let node = [
            on("eth0", "10.0.0.9"),
            on("eth0", "10.0.0.5"),
            on("eth1", "10.1.0.5"),
            on("eth0", "fd00::5"),
        ];
        let mut config = Config::defaults(&Options::default());
        config.output_address = Some(EgressTarget::parse("10.0.0.0/24").unwrap());
        let got = resolve(&config, &[Family::V4, Family::V6], &node).unwrap();
        assert_eq!(got.v4, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(got.v6, None, "no outputAddressIPv6: masquerade");
        config.output_address = Some(EgressTarget::parse("10.1.0.5").unwrap());
        assert_eq!(
            resolve(&config, &[Family::V4], &node).unwrap().v4,
            Some("10.1.0.5".parse().unwrap())
        );
        config.output_address = Some(EgressTarget::parse("10.1.0.6").unwrap());
        let err = resolve(&config, &[Family::V4], &node).unwrap_err();
        assert!(matches!(err, EgressError::AddressNotHeld { .. }));
        assert!(err.to_string().contains("10.0.0.5 on eth0"), "{err}");
        config.output_address = None;
        config.output_address_ipv6 = Some(EgressTarget::parse("fd01::/64").unwrap());
        assert!(
            resolve(&config, &[Family::V4], &node).is_ok(),
            "IPv6 not managed"
        );
        assert!(matches!(
            resolve(&config, &[Family::V4, Family::V6], &node),
            Err(EgressError::NoAddressInPrefix { .. })
        ));
    }
}

/// What `validate` can say about the egress keys on the node it runs on (nodes differ, so a
/// pattern without a match here is worth knowing, not wrong): an output address this node does
/// not hold, one that is on none of the listed interfaces, a pattern that matches no interface.
pub fn node_findings(
    config: &Config,
    addresses: &[NodeAddress],
    interfaces: &[String],
) -> Vec<crate::config::Diagnostic> {
    use crate::config::{Code, Diagnostic};
    let mut found = Vec::new();
    let at = |d: Diagnostic, place: &Option<crate::config::Place>| {
        let place = place.clone().unwrap_or_default();
        let d = d.at_opt(place.location);
        match place.file {
            Some(file) => d.in_file(file),
            None => d,
        }
    };
    for v6 in [false, true] {
        let Some(target) = config.output_address_of(v6) else {
            continue;
        };
        let (key, place) = if v6 {
            ("outputAddressIPv6", &config.provenance.output_address_ipv6)
        } else {
            ("outputAddress", &config.provenance.output_address)
        };
        let Some(address) = pick(target, addresses) else {
            found.push(at(
                Diagnostic::info(
                    Code::OutputAddressNotHere,
                    format!("{key} {target}: this node holds no such address; an agent here masquerades that family (the interface's address) until the address is here"),
                ),
                place,
            ).hint("fine when this is not one of the nodes the config is for; on a node, add the address or correct the value"));
            continue;
        };
        if config.output_interfaces.is_empty() {
            continue;
        }
        let on_listed = addresses.iter().any(|a| {
            a.address == address
                && config
                    .output_interfaces
                    .iter()
                    .any(|p| p.matches(&a.interface))
        });
        if !on_listed {
            let held_on: Vec<&str> = addresses
                .iter()
                .filter(|a| a.address == address)
                .map(|a| a.interface.as_str())
                .collect();
            found.push(at(
                Diagnostic::warning(
                    Code::OutputAddressOffInterfaces,
                    format!(
                        "{key} {target} is {address} here, on {}, which outputInterfaces does not list: replies to it arrive on another interface than the traffic leaves",
                        held_on.join(", ")
                    ),
                ),
                place,
            ).hint("list that interface in outputInterfaces, or name an address of a listed interface"));
        }
    }
    for pattern in &config.output_interfaces {
        if !interfaces.iter().any(|name| pattern.matches(name)) {
            found.push(at(
                Diagnostic::info(
                    Code::InterfaceNotHere,
                    format!("outputInterfaces: {pattern} matches no interface of this node"),
                ),
                &config.provenance.output_interfaces,
            ));
        }
    }
    found
}

#[cfg(test)]
mod fallback_tests {
    use super::*;
    use crate::config::Options;

    fn at(address: &str, deprecated: bool) -> NodeAddress {
        NodeAddress {
            interface: "vout".into(),
            address: address.parse().unwrap(),
            prefix_len: 64,
            deprecated,
        }
    }

    /// A deprecated IPv6 address is chosen only while no preferred one is in the value,
    /// whatever the order the kernel lists them in.
    #[test]
    fn a_deprecated_address_is_never_chosen_while_a_preferred_one_exists() {
        let target = EgressTarget::parse("2001:db8:f0::/64").unwrap();
        let mut node = vec![at("2001:db8:f0::5", false), at("2001:db8:f0::3", true)];
        assert_eq!(pick(target, &node), Some("2001:db8:f0::5".parse().unwrap()));
        node.reverse();
        assert_eq!(pick(target, &node), Some("2001:db8:f0::5".parse().unwrap()));
        node.retain(|a| a.deprecated);
        assert_eq!(
            pick(target, &node),
            Some("2001:db8:f0::3".parse().unwrap()),
            "only a deprecated one: still held, still chosen"
        );
        let exact = EgressTarget::parse("2001:db8:f0::3").unwrap();
        assert_eq!(pick(exact, &node), Some("2001:db8:f0::3".parse().unwrap()));
    }

    /// A family whose value the node holds no address of masquerades (and says why); the
    /// other family still SNATs; the plan never holds an address the node lacks.
    #[test]
    fn a_lost_output_address_falls_back_to_masquerade_for_its_family_only() {
        let mut config = Config::defaults(&Options::default());
        config.enable_ipv6 = true;
        config.output_address = Some(EgressTarget::parse("203.0.113.9").unwrap());
        config.output_address_ipv6 = Some(EgressTarget::parse("2001:db8:f0::/64").unwrap());
        let families = [Family::V4, Family::V6];
        let node = [at("203.0.113.1", false), at("2001:db8:f0::9", false)];
        let resolution = on_node(&config, &families, &node);
        assert_eq!(resolution.egress.v4, None);
        assert!(resolution.egress.falls_back(Family::V4));
        assert_eq!(
            resolution.egress.v6,
            Some("2001:db8:f0::9".parse().unwrap())
        );
        assert!(!resolution.egress.falls_back(Family::V6));
        assert_eq!(resolution.lost.len(), 1);
        let (family, err) = &resolution.lost[0];
        assert_eq!(*family, Family::V4);
        assert!(err.to_string().contains("203.0.113.1 on vout"), "{err}");
        let options = crate::plan::PlanOptions {
            enable_ipv6: true,
            ..Default::default()
        };
        let v4 = crate::plan::plan_family(&config, &options, &resolution.egress, Family::V4);
        assert_eq!(v4.masquerade.egress, crate::plan::Egress::Masquerade);
        let v6 = crate::plan::plan_family(&config, &options, &resolution.egress, Family::V6);
        assert_eq!(
            v6.masquerade.egress,
            crate::plan::Egress::Snat("2001:db8:f0::9".parse().unwrap())
        );
        // The address is back: SNAT again, no fallback.
        let back = [at("203.0.113.9", false), at("2001:db8:f0::9", false)];
        let resolution = on_node(&config, &families, &back);
        assert!(resolution.lost.is_empty());
        assert_eq!(resolution.egress.v4, Some("203.0.113.9".parse().unwrap()));
        assert!(!resolution.egress.falls_back(Family::V4));
    }

    /// Streamed through a resolver, the node's addresses cost the same memory however many:
    /// 100,000 addresses outside the value resolve to the one inside it.
    #[test]
    fn a_resolver_streams_any_number_of_addresses() {
        let mut config = Config::defaults(&Options::default());
        config.output_address = Some(EgressTarget::parse("203.0.113.0/24").unwrap());
        let mut resolver = Resolver::new(&config, &[Family::V4]);
        let mut named = 0;
        for i in 0..100_000u32 {
            let address = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            resolver.offer(address.into(), false, || {
                named += 1;
                "dummy0".into()
            });
        }
        resolver.offer("203.0.113.7".parse().unwrap(), false, || "vout".into());
        let resolution = resolver.finish();
        assert_eq!(resolution.egress.v4, Some("203.0.113.7".parse().unwrap()));
        assert_eq!(
            named, NAMED_IN_ERRORS,
            "interfaces named only for an error's list"
        );
    }
}

#[cfg(test)]
mod node_tests {
    use super::*;
    use crate::config::{Code, Options};

    #[test]
    fn node_findings_name_what_this_node_lacks() {
        let node = [NodeAddress {
            interface: "eth1".into(),
            address: "10.0.0.5".parse().unwrap(),
            prefix_len: 24,
            deprecated: false,
        }];
        let names = ["eth1".to_string(), "lo".to_string()];
        let mut config = Config::defaults(&Options::default());
        config.output_address = Some(EgressTarget::parse("10.0.0.0/24").unwrap());
        assert!(node_findings(&config, &node, &names).is_empty());
        config.output_interfaces = vec![
            crate::config::egress::InterfacePattern::parse("eth0").unwrap(),
            crate::config::egress::InterfacePattern::parse("ens+").unwrap(),
        ];
        let codes: Vec<Code> = node_findings(&config, &node, &names)
            .iter()
            .map(|d| d.code)
            .collect();
        assert_eq!(
            codes,
            [
                Code::OutputAddressOffInterfaces,
                Code::InterfaceNotHere,
                Code::InterfaceNotHere
            ]
        );
        config.output_interfaces =
            vec![crate::config::egress::InterfacePattern::parse("eth+").unwrap()];
        config.output_address = Some(EgressTarget::parse("10.9.0.1").unwrap());
        let found = node_findings(&config, &node, &names);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].code, Code::OutputAddressNotHere);
        assert!(!found[0].is_error());
    }
}
