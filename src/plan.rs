//! Pure planning: a validated [`Config`] plus the agent's flags become a backend-neutral
//! [`Ruleset`] per IP family. Nothing here touches the system, so every flag combination is
//! unit-tested without root.

use crate::config::{Config, LINK_LOCAL_V4, LINK_LOCAL_V6};
use ipnet::IpNet;
use std::fmt;

/// The chain upstream owns by default.
pub const DEFAULT_CHAIN: &str = "IP-MASQ-AGENT";
/// iptables' limit: XT_EXTENSION_MAXNAMELEN (29) including the terminating NUL.
pub const MAX_CHAIN_NAME_LEN: usize = 28;
/// Names a user chain must not take: built-in chains and targets of the nat table.
const RESERVED_CHAIN_NAMES: [&str; 12] = [
    "PREROUTING",
    "INPUT",
    "OUTPUT",
    "POSTROUTING",
    "FORWARD",
    "ACCEPT",
    "DROP",
    "RETURN",
    "QUEUE",
    "MASQUERADE",
    "SNAT",
    "DNAT",
];

/// An IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    /// The link-local block of the family.
    pub fn link_local(self) -> IpNet {
        match self {
            Family::V4 => LINK_LOCAL_V4.parse().expect("constant"),
            Family::V6 => LINK_LOCAL_V6.parse().expect("constant"),
        }
    }

    fn holds(self, net: &IpNet) -> bool {
        match self {
            Family::V4 => net.addr().is_ipv4(),
            Family::V6 => net.addr().is_ipv6(),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated chain name: safe to place unquoted in an iptables-restore script.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChainName(String);

/// Why a chain name is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainNameError {
    #[error("chain name is empty")]
    Empty,
    #[error("chain name {0:?} is longer than iptables' limit of {MAX_CHAIN_NAME_LEN} characters")]
    TooLong(String),
    #[error(
        "chain name {0:?} may hold only printable ASCII without spaces, quotes or backslashes"
    )]
    BadCharacter(String),
    #[error("chain name {0:?} must not start with '-' or '!'")]
    BadStart(String),
    #[error("chain name {0:?} is a built-in chain or target")]
    Reserved(String),
}

impl ChainName {
    pub fn new(name: &str) -> Result<Self, ChainNameError> {
        if name.is_empty() {
            return Err(ChainNameError::Empty);
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\'))
        {
            return Err(ChainNameError::BadCharacter(name.to_string()));
        }
        if name.len() > MAX_CHAIN_NAME_LEN {
            return Err(ChainNameError::TooLong(name.to_string()));
        }
        if name.starts_with(['-', '!']) {
            return Err(ChainNameError::BadStart(name.to_string()));
        }
        if RESERVED_CHAIN_NAMES.contains(&name) {
            return Err(ChainNameError::Reserved(name.to_string()));
        }
        Ok(ChainName(name.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for ChainName {
    fn default() -> Self {
        ChainName(DEFAULT_CHAIN.to_string())
    }
}

impl fmt::Display for ChainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for ChainName {
    type Err = ChainNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ChainName::new(s)
    }
}

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
    #[error("--to-ports: port {0} is outside 1-65535")]
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

/// Transport protocols `--to-ports` applies to, in the order rules are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// A probability as the `statistic` match stores it: a 31-bit fixed-point fraction. Keeping
/// the stored form makes our rules compare equal to what iptables-save prints back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probability(u32);

impl Probability {
    const SCALE: f64 = 2_147_483_648.0; // 0x80000000

    /// `numerator / denominator`, rounded as iptables' `lround(0x80000000 * p)`.
    pub fn ratio(numerator: u32, denominator: u32) -> Self {
        let p = f64::from(numerator) / f64::from(denominator);
        Probability((p * Self::SCALE).round() as u32)
    }

    pub fn value(self) -> f64 {
        f64::from(self.0) / Self::SCALE
    }
}

impl fmt::Display for Probability {
    /// The text iptables-save prints (`%.11f`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.11}", self.value())
    }
}

/// One rule of our chain, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Traffic to this destination keeps its source address.
    NoMasquerade { destination: IpNet },
    /// Everything reaching this rule is masqueraded.
    Masquerade(Masquerade),
}

/// A MASQUERADE rule: the catch-all, or one `--to-ports` range for one protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Masquerade {
    pub protocol: Option<Protocol>,
    pub to_ports: Option<PortRange>,
    /// Taken with this probability (the earlier ranges of a multi-range `--to-ports`).
    pub probability: Option<Probability>,
    pub random_fully: bool,
}

/// The desired content of our chain for one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ruleset {
    pub family: Family,
    pub chain: ChainName,
    pub rules: Vec<Rule>,
}

impl Ruleset {
    /// Non-masquerade CIDRs in rule order (link-local first when present).
    pub fn non_masquerade(&self) -> impl Iterator<Item = &IpNet> {
        self.rules.iter().filter_map(|r| match r {
            Rule::NoMasquerade { destination } => Some(destination),
            Rule::Masquerade(_) => None,
        })
    }
}

/// The agent flags that shape the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    pub chain: ChainName,
    /// `--random-fully`, already reduced to what the installed iptables supports.
    pub random_fully: bool,
    pub to_ports: ToPorts,
    pub enable_ipv6: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            chain: ChainName::default(),
            random_fully: true,
            to_ports: ToPorts::default(),
            enable_ipv6: false,
        }
    }
}

/// The families the agent manages.
pub fn families(options: &PlanOptions) -> Vec<Family> {
    if options.enable_ipv6 {
        vec![Family::V4, Family::V6]
    } else {
        vec![Family::V4]
    }
}

/// Plans one family's chain, in upstream's order: link-local RETURN (unless masqueraded),
/// one RETURN per CIDR of the family in config order (duplicates kept), then MASQUERADE.
pub fn plan_family(config: &Config, options: &PlanOptions, family: Family) -> Ruleset {
    let mut rules = Vec::new();
    let masq_link_local = match family {
        Family::V4 => config.masq_link_local,
        Family::V6 => config.masq_link_local_ipv6,
    };
    if !masq_link_local {
        rules.push(Rule::NoMasquerade {
            destination: family.link_local(),
        });
    }
    rules.extend(
        config
            .non_masquerade_cidrs
            .iter()
            .filter(|c| family.holds(c))
            .map(|c| Rule::NoMasquerade { destination: *c }),
    );
    rules.extend(masquerade_rules(options));
    Ruleset {
        family,
        chain: options.chain.clone(),
        rules,
    }
}

/// Plans every managed family.
pub fn plan(config: &Config, options: &PlanOptions) -> Vec<Ruleset> {
    families(options)
        .into_iter()
        .map(|f| plan_family(config, options, f))
        .collect()
}

/// The MASQUERADE rules: with `--to-ports`, for each protocol one rule per range, each but the
/// last taken with probability size / (size of this and the later ranges), so the ranges are
/// used in proportion to their sizes; then the catch-all for every other protocol.
fn masquerade_rules(options: &PlanOptions) -> Vec<Rule> {
    let ranges = &options.to_ports.0;
    let mut rules = Vec::new();
    for protocol in Protocol::ALL {
        for (i, range) in ranges.iter().enumerate() {
            let remaining: u32 = ranges[i..].iter().map(|r| r.size()).sum();
            let probability =
                (i + 1 < ranges.len()).then(|| Probability::ratio(range.size(), remaining));
            rules.push(Rule::Masquerade(Masquerade {
                protocol: Some(protocol),
                to_ports: Some(*range),
                probability,
                random_fully: options.random_fully,
            }));
        }
    }
    rules.push(Rule::Masquerade(Masquerade {
        protocol: None,
        to_ports: None,
        probability: None,
        random_fully: options.random_fully,
    }));
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Options;

    #[test]
    fn chain_names_are_checked() {
        assert!(ChainName::new("IP-MASQ-AGENT").is_ok());
        assert!(ChainName::new(&"A".repeat(28)).is_ok());
        assert!(matches!(
            ChainName::new(&"A".repeat(29)),
            Err(ChainNameError::TooLong(_))
        ));
        for bad in ["", "A B", "A\"B", "A'B", "A\\B", "A\nB", "Ä", "-X", "!X"] {
            assert!(ChainName::new(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(
            ChainName::new("POSTROUTING"),
            Err(ChainNameError::Reserved(_))
        ));
    }

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
    fn probability_matches_iptables_saved_form() {
        // The contract's example: 28976 / (28976 + 32768).
        assert_eq!(
            Probability::ratio(28976, 61744).to_string(),
            "0.46929256292"
        );
        assert_eq!(Probability::ratio(1, 2).to_string(), "0.50000000000");
        assert_eq!(Probability::ratio(1, 3).to_string(), "0.33333333349");
    }

    #[test]
    fn default_plan_is_upstreams_order() {
        let config = Config::defaults(&Options::default());
        let sets = plan(&config, &PlanOptions::default());
        assert_eq!(sets.len(), 1);
        let dests: Vec<String> = sets[0].non_masquerade().map(ToString::to_string).collect();
        assert_eq!(
            dests,
            [
                "169.254.0.0/16",
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16"
            ]
        );
        assert!(matches!(sets[0].rules.last(), Some(Rule::Masquerade(m)) if m.protocol.is_none()));
    }

    #[test]
    fn families_split_the_list_and_link_local_flags_apply_per_family() {
        let mut config = Config::defaults(&Options::default());
        config.non_masquerade_cidrs = vec![
            "fd00::/8".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ];
        config.masq_link_local = true;
        let options = PlanOptions {
            enable_ipv6: true,
            ..PlanOptions::default()
        };
        let sets = plan(&config, &options);
        let v4: Vec<String> = sets[0].non_masquerade().map(ToString::to_string).collect();
        let v6: Vec<String> = sets[1].non_masquerade().map(ToString::to_string).collect();
        assert_eq!(v4, ["10.0.0.0/8", "10.0.0.0/8"]);
        assert_eq!(v6, ["fe80::/10", "fd00::/8"]);
    }

    #[test]
    fn to_ports_rules_per_protocol_and_range() {
        let options = PlanOptions {
            to_ports: "1024-29999,32768-65535".parse().unwrap(),
            ..PlanOptions::default()
        };
        let rules = masquerade_rules(&options);
        assert_eq!(rules.len(), 7);
        let Rule::Masquerade(first) = &rules[0] else {
            panic!()
        };
        assert_eq!(first.protocol, Some(Protocol::Tcp));
        assert_eq!(first.probability.unwrap().to_string(), "0.46929256292");
        let Rule::Masquerade(second) = &rules[1] else {
            panic!()
        };
        assert_eq!(second.probability, None);
        assert_eq!(second.to_ports.unwrap().to_string(), "32768-65535");
    }
}
