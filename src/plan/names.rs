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

/// What a ruleset is installed under.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Names {
    /// `--masq-chain`: the chain (iptables) we own.
    pub chain: ChainName,
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
