//! `--to-ports`: the source port ranges MASQUERADE picks from, and the share of new flows each
//! range gets (in proportion to its size), as neutral numbers every backend renders its own way.

use std::fmt;

/// An inclusive port range (a single port when `first == last`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub fn size(self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// `--to-ports`: the source port ranges MASQUERADE picks from, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToPorts(pub Vec<PortRange>);

/// Why a `--to-ports` value is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToPortsError {
    #[error("--to-ports: {0:?} is not a port or a range like 1024-65535")]
    Syntax(String),
    #[error("--to-ports: port {0} is outside 1-65535 (upstream ip-masq-agent passes it to iptables-restore, which refuses it at every resync and leaves its chain empty, so nothing is masqueraded; ipmasq refuses it at once)")]
    OutOfRange(String),
    #[error("--to-ports: range {0} is reversed; write the lower port first")]
    Reversed(String),
}

impl std::str::FromStr for ToPorts {
    type Err = ToPortsError;

    /// Parses `1024-29999,32768-65535` or `2000`; the empty string means no `--to-ports`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Ok(ToPorts::default());
        }
        let port = |text: &str| -> Result<u16, ToPortsError> {
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ToPortsError::Syntax(s.to_string()));
            }
            match text.parse::<u32>() {
                Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
                _ => Err(ToPortsError::OutOfRange(text.to_string())),
            }
        };
        let mut ranges = Vec::new();
        for part in s.split(',') {
            let range = match part.split_once('-') {
                Some((a, b)) => {
                    let (first, last) = (port(a)?, port(b)?);
                    if first > last {
                        return Err(ToPortsError::Reversed(part.to_string()));
                    }
                    PortRange { first, last }
                }
                None => {
                    let p = port(part)?;
                    PortRange { first: p, last: p }
                }
            };
            ranges.push(range);
        }
        Ok(ToPorts(ranges))
    }
}

impl fmt::Display for ToPorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// One `--to-ports` range and its share: a flow that reaches it takes it with probability
/// `taken / of` (`of` is the size of this and every later range, so the last one always
/// takes what reaches it and the ranges are used in proportion to their sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortShare {
    pub range: PortRange,
    pub taken: u32,
    pub of: u32,
}

impl PortShare {
    /// Whether this range takes every flow that reaches it (no random choice is rendered).
    pub fn is_certain(self) -> bool {
        self.taken == self.of
    }
}

impl ToPorts {
    /// The ranges with their shares, in order.
    pub fn shares(&self) -> Vec<PortShare> {
        let ranges = &self.0;
        ranges
            .iter()
            .enumerate()
            .map(|(i, range)| {
                let of: u32 = ranges[i..].iter().map(|r| r.size()).sum();
                // The last range takes the rest, whatever its size.
                let taken = if i + 1 == ranges.len() {
                    of
                } else {
                    range.size()
                };
                PortShare {
                    range: *range,
                    taken,
                    of,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_ports_parse_and_reject() {
        let ports: ToPorts = "1024-29999,32768-65535".parse().unwrap();
        assert_eq!(ports.0.len(), 2);
        assert_eq!(ports.to_string(), "1024-29999,32768-65535");
        assert_eq!("2000".parse::<ToPorts>().unwrap().to_string(), "2000");
        assert_eq!("".parse::<ToPorts>().unwrap(), ToPorts::default());
        assert!(matches!(
            "0".parse::<ToPorts>(),
            Err(ToPortsError::OutOfRange(_))
        ));
        assert!(matches!(
            "65536".parse::<ToPorts>(),
            Err(ToPortsError::OutOfRange(_))
        ));
        assert!(matches!(
            "2000-1000".parse::<ToPorts>(),
            Err(ToPortsError::Reversed(_))
        ));
        for bad in ["a", "1-", "-1", "1,,2", " 1", "1-2-3"] {
            assert!(bad.parse::<ToPorts>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shares_are_proportional_to_range_sizes() {
        let ports: ToPorts = "1024-29999,32768-65535".parse().unwrap();
        let shares = ports.shares();
        assert_eq!((shares[0].taken, shares[0].of), (28976, 61744));
        assert!(!shares[0].is_certain());
        assert!(shares[1].is_certain());
        // The overall share of each range equals its size over the total.
        let three: ToPorts = "1-10,11-30,31-60".parse().unwrap();
        let mut reach = 1.0;
        for share in three.shares() {
            let p = f64::from(share.taken) / f64::from(share.of);
            let overall = reach * p;
            assert!((overall - f64::from(share.range.size()) / 60.0).abs() < 1e-12);
            reach *= 1.0 - p;
        }
    }
}
