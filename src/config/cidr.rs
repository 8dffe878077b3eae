//! Strict CIDR parsing with upstream's semantics (Go's `net.ParseCIDR` plus the alignment check)
//! and the clearer messages we add on top: the aligned form for a misaligned block, and a
//! refusal of IPv4-mapped IPv6 blocks that upstream accepts and iptables then rejects.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv6Addr};

/// Why a CIDR string is not acceptable as a non-masquerade range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// Not a CIDR at all (Go: `CIDR %q could not be parsed, invalid CIDR address: %s`).
    #[error("CIDR {input:?} could not be parsed, invalid CIDR address: {input}{}", reason_suffix(.reason))]
    Unparsable { input: String, reason: &'static str },
    /// A valid address and prefix whose host bits are not zero.
    #[error("CIDR {input:?} is not aligned to a CIDR block, ip: {ip:?} network: {network:?}")]
    NotAligned {
        input: String,
        ip: String,
        network: String,
    },
    /// `::ffff:a.b.c.d/n`: Go treats it as IPv4 and writes an IPv6 literal into iptables.
    #[error(
        "CIDR {input:?} is an IPv4-mapped IPv6 block, which iptables cannot match; write the IPv4 block {ipv4} instead"
    )]
    Ipv4Mapped { input: String, ipv4: String },
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    }
}

/// Parses one CIDR the way the agent must accept it.
///
/// Accepts what Go's `net.ParseCIDR` accepts (no leading zeros in IPv4 octets, no whitespace,
/// no zone, a decimal prefix within the family's bit length), then requires the address to be
/// the network address of the block.
pub fn parse_cidr(input: &str) -> Result<IpNet, CidrError> {
    let unparsable = |reason: &'static str| CidrError::Unparsable {
        input: input.to_string(),
        reason,
    };
    let (addr_text, prefix_text) = input
        .split_once('/')
        .ok_or_else(|| unparsable("missing /prefix"))?;
    if addr_text.contains('%') {
        return Err(unparsable("zones are not allowed"));
    }
    let addr: IpAddr = addr_text
        .parse()
        .map_err(|_| unparsable("not an IP address"))?;
    let max_prefix: u32 = if addr.is_ipv4() { 32 } else { 128 };
    if prefix_text.is_empty() || !prefix_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unparsable("prefix must be a decimal number"));
    }
    // Go's dtoi: leading zeros are tolerated, values past 0xFFFFFF fail.
    let prefix: u32 = prefix_text
        .parse()
        .ok()
        .filter(|&p| p <= max_prefix)
        .ok_or_else(|| {
            if addr.is_ipv4() {
                unparsable("IPv4 prefix length must be 0-32")
            } else {
                unparsable("IPv6 prefix length must be 0-128")
            }
        })?;
    let prefix = prefix as u8;

    let net = match addr {
        IpAddr::V4(v4) => IpNet::V4(Ipv4Net::new(v4, prefix).expect("prefix checked above")),
        IpAddr::V6(v6) => {
            if let Some(v4) = ipv4_mapped(&v6) {
                let v4_prefix = prefix.saturating_sub(96);
                let ipv4 = if prefix >= 96 {
                    Ipv4Net::new(v4, v4_prefix)
                        .expect("prefix checked above")
                        .trunc()
                        .to_string()
                } else {
                    "(none: the block is wider than the IPv4-mapped range)".to_string()
                };
                return Err(CidrError::Ipv4Mapped {
                    input: input.to_string(),
                    ipv4,
                });
            }
            IpNet::V6(Ipv6Net::new(v6, prefix).expect("prefix checked above"))
        }
    };
    if net.addr() != net.network() {
        return Err(CidrError::NotAligned {
            input: input.to_string(),
            ip: net.addr().to_string(),
            network: net.trunc().to_string(),
        });
    }
    Ok(net)
}

/// Go's `To4()`: true for `::ffff:a.b.c.d` (the IPv4-mapped form), which Go then treats as IPv4.
fn ipv4_mapped(v6: &Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    v6.to_ipv4_mapped()
}

/// Whether the prefix was written in a non-canonical way Go tolerates (`10.0.0.0/08`).
pub fn has_padded_prefix(input: &str) -> bool {
    input
        .split_once('/')
        .is_some_and(|(_, p)| p.len() > 1 && p.starts_with('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_aligned_blocks_of_both_families() {
        for (input, canon) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("192.168.1.1/32", "192.168.1.1/32"),
            ("fd00::/8", "fd00::/8"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("2001:0db8:0000::/32", "2001:db8::/32"),
            ("::/0", "::/0"),
            ("10.0.0.0/08", "10.0.0.0/8"),
        ] {
            assert_eq!(parse_cidr(input).unwrap().to_string(), canon, "{input}");
        }
    }

    #[test]
    fn misaligned_block_names_the_aligned_form() {
        let err = parse_cidr("10.1.2.3/16").unwrap_err();
        assert_eq!(
            err,
            CidrError::NotAligned {
                input: "10.1.2.3/16".into(),
                ip: "10.1.2.3".into(),
                network: "10.1.0.0/16".into(),
            }
        );
        assert_eq!(
            err.to_string(),
            r#"CIDR "10.1.2.3/16" is not aligned to a CIDR block, ip: "10.1.2.3" network: "10.1.0.0/16""#
        );
        assert!(matches!(
            parse_cidr("fd00::1/8"),
            Err(CidrError::NotAligned { network, .. }) if network == "fd00::/8"
        ));
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in [
            "",
            "10.0.0.0",
            "010.0.0.0/8",
            "10.0.0.00/8",
            " 10.0.0.0/8",
            "10.0.0.0/8 ",
            "10.0.0.0/ 8",
            "10.0.0.0/33",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/",
            "10.0.0/8",
            "256.0.0.0/8",
            "fd00::/129",
            "fe80::%eth0/64",
            "10.0.0.0/8/8",
            "hello",
        ] {
            assert!(
                matches!(parse_cidr(bad), Err(CidrError::Unparsable { .. })),
                "{bad:?} must be unparsable, got {:?}",
                parse_cidr(bad)
            );
        }
    }

    #[test]
    fn rejects_ipv4_mapped_ipv6_with_the_ipv4_alternative() {
        let err = parse_cidr("::ffff:172.16.0.0/108").unwrap_err();
        assert_eq!(
            err,
            CidrError::Ipv4Mapped {
                input: "::ffff:172.16.0.0/108".into(),
                ipv4: "172.16.0.0/12".into()
            }
        );
        assert!(err
            .to_string()
            .contains("write the IPv4 block 172.16.0.0/12"));
    }

    #[test]
    fn detects_padded_prefix() {
        assert!(has_padded_prefix("10.0.0.0/08"));
        assert!(!has_padded_prefix("10.0.0.0/8"));
        assert!(!has_padded_prefix("0.0.0.0/0"));
    }
}
