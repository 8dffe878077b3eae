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
}

/// The address each family's traffic is SNATed to; None: masquerade (or not resolved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResolvedEgress {
    pub v4: Option<IpAddr>,
    pub v6: Option<IpAddr>,
}

impl ResolvedEgress {
    pub fn of(&self, family: Family) -> Option<IpAddr> {
        match family {
            Family::V4 => self.v4,
            Family::V6 => self.v6,
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

/// The address `target` names among `addresses`: itself when the node holds it, else the
/// lowest address inside the prefix (stable whatever order the kernel lists them in).
pub fn pick(target: EgressTarget, addresses: &[NodeAddress]) -> Option<IpAddr> {
    addresses
        .iter()
        .map(|a| a.address)
        .filter(|a| target.admits(*a))
        .min()
}

/// Whether the config names an output address for one of `families`.
pub fn names_output_address(config: &Config, families: &[Family]) -> bool {
    families
        .iter()
        .any(|f| config.output_address_of(*f == Family::V6).is_some())
}

/// The output address of each of `families` that the config sets and the node holds (a family
/// whose address the node does not hold stays None).
pub fn held(config: &Config, families: &[Family], addresses: &[NodeAddress]) -> ResolvedEgress {
    let mut resolved = ResolvedEgress::default();
    for family in families {
        let picked = config
            .output_address_of(*family == Family::V6)
            .and_then(|target| pick(target, addresses));
        match family {
            Family::V4 => resolved.v4 = picked,
            Family::V6 => resolved.v6 = picked,
        }
    }
    resolved
}

/// The output address of every managed family that the config sets, from the node's
/// addresses; an error when the node holds none that the config names.
pub fn resolve(
    config: &Config,
    families: &[Family],
    addresses: &[NodeAddress],
) -> Result<ResolvedEgress, EgressError> {
    let resolved = held(config, families, addresses);
    for family in families {
        let v6 = *family == Family::V6;
        let Some(target) = config.output_address_of(v6) else {
            continue;
        };
        if resolved.of(*family).is_some() {
            continue;
        }
        let key = if v6 {
            "outputAddressIPv6"
        } else {
            "outputAddress"
        };
        let mut held: Vec<String> = addresses
            .iter()
            .filter(|a| family.holds_addr(a.address))
            .map(|a| format!("{} on {}", a.address, a.interface))
            .collect();
        if held.is_empty() {
            held.push(format!("no {} address", family.as_str()));
        }
        held.truncate(8);
        let held = held.join(", ");
        return Err(if target.is_address() {
            EgressError::AddressNotHeld { key, target, held }
        } else {
            EgressError::NoAddressInPrefix { key, target, held }
        });
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Options;

    fn on(interface: &str, address: &str) -> NodeAddress {
        NodeAddress {
            interface: interface.into(),
            address: address.parse().unwrap(),
            prefix_len: 24,
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
                    format!("{key} {target}: this node holds no such address; an agent here would keep its last good rules and report not ready"),
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
mod node_tests {
    use super::*;
    use crate::config::{Code, Options};

    #[test]
    fn node_findings_name_what_this_node_lacks() {
        let node = [NodeAddress {
            interface: "eth1".into(),
            address: "10.0.0.5".parse().unwrap(),
            prefix_len: 24,
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
