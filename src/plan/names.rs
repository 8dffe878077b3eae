//! The names a ruleset is installed under. Only what every backend needs is checked here (a
//! name that is safe to place unquoted in any rule script); each backend adds its own limits
//! (iptables' chain length and reserved targets live in the iptables backend).

use std::fmt;

/// The chain upstream owns by default.
pub const DEFAULT_CHAIN: &str = "IP-MASQ-AGENT";

/// A validated chain name: printable ASCII without spaces, quotes or backslashes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChainName(String);

/// Why a chain name is refused by every backend.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainNameError {
    #[error("chain name is empty")]
    Empty,
    #[error(
        "chain name {0:?} may hold only printable ASCII without spaces, quotes or backslashes"
    )]
    BadCharacter(String),
    #[error("chain name {0:?} must not start with '-' or '!'")]
    BadStart(String),
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
        if name.starts_with(['-', '!']) {
            return Err(ChainNameError::BadStart(name.to_string()));
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

/// The rules' comments, one text for every backend, so greps and runbooks find our rules in
/// either: upstream's ip-masq-agent texts byte for byte where upstream writes the rule,
/// ipmasq's own in upstream's words where it writes none.
///
/// Comment of every non-masquerade rule (upstream's text, byte for byte).
pub const NON_MASQ_COMMENT: &str = "ip-masq-agent: local traffic is not subject to MASQUERADE";
/// Comment of every MASQUERADE rule (upstream's text, byte for byte).
pub const MASQ_COMMENT: &str =
    "ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)";
/// Comment of every SNAT rule (`outputAddress`): ours, in upstream's words.
pub const SNAT_COMMENT: &str =
    "ipmasq: outbound traffic is subject to SNAT to the output address (must be last in chain)";
/// Comment of the rules that leave traffic from outside `masqueradeSourceCIDRs` alone.
pub const SOURCE_COMMENT: &str =
    "ipmasq: traffic from outside masqueradeSourceCIDRs is not subject to MASQUERADE";

/// The entry rule of the pod share (new connections, in the forward hook). No quote in it:
/// iptables-save escapes one, and the rule would never read back as written.
pub const POD_SHARE_COMMENT: &str =
    "ipmasq: new masqueraded connections are held to a share per pod";
/// The rule that refuses a pod over `podNewConnectionRate`.
pub const POD_RATE_COMMENT: &str = "ipmasq: a pod over podNewConnectionRate is refused";
/// The rule that refuses a pod over `podConnectionLimit`.
pub const POD_CONNECTIONS_COMMENT: &str = "ipmasq: a pod over podConnectionLimit is refused";

/// The POSTROUTING jump's comment (nftables: the entry chain's rule); upstream puts the chain
/// name in it.
pub fn jump_comment(chain: &ChainName) -> String {
    format!(
        "ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom {chain} chain"
    )
}

/// What a ruleset is installed under.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Names {
    /// `--masq-chain`: the chain (iptables) we own.
    pub chain: ChainName,
}

impl Names {
    /// The names of the rules `--masq-chain` names: the one constructor every applet, the plan
    /// and the tests use.
    pub fn new(chain: ChainName) -> Self {
        Names { chain }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_names_are_checked() {
        assert!(ChainName::new("IP-MASQ-AGENT").is_ok());
        assert!(
            ChainName::new(&"A".repeat(40)).is_ok(),
            "length is a backend limit"
        );
        for bad in ["", "A B", "A\"B", "A'B", "A\\B", "A\nB", "Ä", "-X", "!X"] {
            assert!(ChainName::new(bad).is_err(), "{bad:?}");
        }
    }
}
