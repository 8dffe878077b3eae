//! The values of the egress keys: `outputAddress`/`outputAddressIPv6` (an address, or a prefix
//! standing for this node's own address inside it) and `outputInterfaces` (interface names,
//! with iptables' `eth+` or nft's `eth*` wildcard), parsed once and spelled per backend.

use ipnet::IpNet;
use std::net::IpAddr;

/// The most `outputInterfaces` entries: each one copies the masquerade rules, once per pattern.
pub const MAX_OUTPUT_INTERFACES: usize = 16;
/// The longest interface name the kernel takes (IFNAMSIZ - 1). A pattern's spelling must fit
/// too: iptables (`xtables_parse_interface`) refuses `-o` values of 16 bytes or more, the `+`
/// included, and nft refuses `oifname "…*"` past 15 bytes alike.
pub const MAX_INTERFACE_NAME: usize = 15;

/// Whether the kernel counts `byte` as white space in a name (`dev_valid_name` uses its own
/// `isspace`, which is Latin-1's: 0xA0 too, a byte inside UTF-8 such as `à`).
fn kernel_space(byte: u8) -> bool {
    matches!(byte, b'\t'..=b'\r' | b' ' | 0xA0)
}

/// `outputAddress`: one address (a host prefix), or a prefix meaning "the node's own address
/// inside it", so one ConfigMap serves nodes that each hold another address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EgressTarget(pub IpNet);

impl EgressTarget {
    /// Parses `10.0.0.5`, `10.0.0.0/24` or `fd00::/64`: a bare address, or an aligned prefix.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Ok(addr) = text.parse::<IpAddr>() {
            return Self::checked(IpNet::from(addr), text);
        }
        match crate::config::cidr::parse_cidr(text) {
            Ok(net) => Self::checked(net, text),
            Err(crate::config::cidr::CidrError::NotAligned { ip, network, .. }) => Err(format!(
                "{text:?} is an address with a prefix length: write `{ip}` for that address, or `{network}` for the node's address inside that prefix"
            )),
            Err(_) => Err(format!(
                "{text:?} is neither an IP address nor a CIDR prefix"
            )),
        }
    }

    fn checked(net: IpNet, text: &str) -> Result<Self, String> {
        let addr = net.addr();
        if net.prefix_len() == 0 {
            return Err(format!(
                "{text:?} holds every address: name the node's address or the prefix it is in"
            ));
        }
        if addr.is_loopback() || addr.is_multicast() || addr.is_unspecified() {
            return Err(format!(
                "{text:?} is a loopback, multicast or unspecified address, never a source for egress"
            ));
        }
        if let IpAddr::V6(v6) = addr {
            if v6.to_ipv4_mapped().is_some() {
                return Err(format!(
                    "{text:?} is an IPv4-mapped IPv6 address: write the IPv4 address in outputAddress"
                ));
            }
        }
        Ok(EgressTarget(net))
    }

    /// Whether the value names one address (not a prefix).
    pub fn is_address(&self) -> bool {
        self.0.prefix_len() == self.0.max_prefix_len()
    }

    pub fn is_ipv6(&self) -> bool {
        self.0.addr().is_ipv6()
    }

    /// Whether `addr` is what this value names (the address itself, or one inside the prefix).
    pub fn admits(&self, addr: IpAddr) -> bool {
        self.0.contains(&addr)
    }
}

impl std::fmt::Display for EgressTarget {
    /// A bare address for one address, `a.b.c.d/n` for a prefix.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_address() {
            write!(f, "{}", self.0.addr())
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl serde::Serialize for EgressTarget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One `outputInterfaces` entry: a name, or a name prefix with a wildcard (`eth+`, `eth*`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InterfacePattern {
    /// The name, or the part before the wildcard.
    pub name: String,
    pub wildcard: bool,
}

impl InterfacePattern {
    /// Parses an interface name as the kernel accepts it (1–15 bytes, no `/`, `:` or white
    /// space, not `.` or `..`), with an optional trailing `+` or `*`; a pattern as every
    /// backend takes it: its spelling (`eth+`, `eth*`) is at most 15 bytes too, since
    /// iptables and nft refuse a longer one (a 15-byte stem would match only the name itself).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, wildcard) = match text.strip_suffix(['+', '*']) {
            Some(stem) => (stem, true),
            None => (text, false),
        };
        if name.is_empty() {
            return Err(if wildcard {
                format!("{text:?} matches every interface: remove outputInterfaces to act on traffic leaving any interface")
            } else {
                "an interface name cannot be empty".to_string()
            });
        }
        if name.len() > MAX_INTERFACE_NAME {
            return Err(format!(
                "{text:?} is longer than the {MAX_INTERFACE_NAME} bytes an interface name can have"
            ));
        }
        if wildcard && name.len() == MAX_INTERFACE_NAME {
            return Err(format!(
                "{text:?} is a pattern of {} bytes: iptables (`-o {name}+`) and nft (`oifname \"{name}*\"`) refuse one longer than the {MAX_INTERFACE_NAME} bytes of an interface name; a {MAX_INTERFACE_NAME}-byte stem matches only `{name}`: write that name",
                name.len() + 1
            ));
        }
        if let Some(bad) = name.chars().find(|c| {
            matches!(c, '/' | ':' | '+' | '*' | '"' | '\'') || c.is_whitespace() || c.is_control()
        }) {
            return Err(format!(
                "{text:?} holds {bad:?}, which no interface name has (a wildcard goes only at the end)"
            ));
        }
        if let Some(bad) = name.chars().find(|c| {
            let mut utf8 = [0; 4];
            c.encode_utf8(&mut utf8).bytes().any(kernel_space)
        }) {
            return Err(format!(
                "{text:?} holds {bad:?}, whose UTF-8 has the byte 0xA0, white space to the kernel: no interface name has it"
            ));
        }
        if name == "." || name == ".." {
            return Err(format!("{text:?} is not an interface name"));
        }
        Ok(InterfacePattern {
            name: name.to_string(),
            wildcard,
        })
    }

    /// Whether an interface of this name matches.
    pub fn matches(&self, interface: &str) -> bool {
        if self.wildcard {
            interface.starts_with(&self.name)
        } else {
            interface == self.name
        }
    }

    /// As iptables spells it (`-o eth+`).
    pub fn iptables(&self) -> String {
        if self.wildcard {
            format!("{}+", self.name)
        } else {
            self.name.clone()
        }
    }

    /// As nft spells it (`oifname "eth*"`).
    pub fn nft(&self) -> String {
        if self.wildcard {
            format!("{}*", self.name)
        } else {
            self.name.clone()
        }
    }

    /// Whether every interface this one matches is matched by `other` too.
    pub fn within(&self, other: &InterfacePattern) -> bool {
        if other.wildcard {
            self.name.starts_with(&other.name)
        } else {
            !self.wildcard && self.name == other.name
        }
    }
}

impl std::fmt::Display for InterfacePattern {
    /// iptables' spelling (`eth+`), which the ConfigMaps of this family's users write.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.iptables())
    }
}

impl serde::Serialize for InterfacePattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_targets_are_addresses_or_aligned_prefixes() {
        let one = EgressTarget::parse("10.0.0.5").unwrap();
        assert!(one.is_address());
        assert_eq!(one.to_string(), "10.0.0.5");
        let prefix = EgressTarget::parse("10.0.0.0/24").unwrap();
        assert!(!prefix.is_address());
        assert!(prefix.admits("10.0.0.9".parse().unwrap()));
        assert!(!prefix.admits("10.0.1.9".parse().unwrap()));
        assert_eq!(
            EgressTarget::parse("fd00::7").unwrap().to_string(),
            "fd00::7"
        );
        let misaligned = EgressTarget::parse("10.0.0.5/24").unwrap_err();
        assert!(misaligned.contains("`10.0.0.5`") && misaligned.contains("`10.0.0.0/24`"));
        for bad in [
            "",
            "eth0",
            "127.0.0.1",
            "0.0.0.0/0",
            "224.0.0.1",
            "::ffff:10.0.0.1",
            "::",
        ] {
            assert!(EgressTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn interface_patterns_take_both_wildcards_and_match_by_prefix() {
        let plus = InterfacePattern::parse("eth+").unwrap();
        let star = InterfacePattern::parse("eth*").unwrap();
        assert_eq!(plus, star);
        assert_eq!(
            (plus.iptables(), plus.nft()),
            ("eth+".into(), "eth*".into())
        );
        assert!(plus.matches("eth0") && plus.matches("eth") && !plus.matches("ens3"));
        let exact = InterfacePattern::parse("eth0").unwrap();
        assert!(exact.matches("eth0") && !exact.matches("eth01"));
        assert!(exact.within(&plus) && !plus.within(&exact));
        assert!(InterfacePattern::parse("abcdefghijklmno").is_ok());
        assert!(InterfacePattern::parse("abcdefghijklmn+").is_ok());
        assert!(InterfacePattern::parse("abcdefghijklmn*").is_ok());
        let long = InterfacePattern::parse("abcdefghijklmno+").unwrap_err();
        assert!(long.contains("write that name"), "{long}");
        for odd in ["!eth0", "-eth0", "eth#0", "e%d", "eth\\0", "é", "eth,0"] {
            assert!(InterfacePattern::parse(odd).is_ok(), "{odd:?}");
        }
        for bad in [
            "",
            "+",
            "*",
            "abcdefghijklmnop",
            "eth 0",
            "e+th",
            "a/b",
            "a:b",
            ".",
            "..",
            "eth\"0",
            "abcdefghijklmno+",
            "abcdefghijklmno*",
            "eth\u{a0}0",
            "ethà",
            "eth\u{b}0",
        ] {
            assert!(InterfacePattern::parse(bad).is_err(), "{bad:?}");
        }
    }
}
