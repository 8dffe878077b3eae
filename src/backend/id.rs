//! Which backend, as one typed value: `iptables-nft`, `iptables-legacy` or `nftables`, with
//! one spelling (logs, metrics labels, the state file, JSON) and one parser, the flag that
//! chooses it, and its kind (the iptables variants are one kind).

use serde::{Deserialize, Serialize};

/// A backend's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendId {
    IptablesNft,
    IptablesLegacy,
    Nftables,
    /// The in-memory backend of unit tests.
    #[cfg(test)]
    Fake,
}

/// What kind of rules a backend writes: an iptables chain and its jumps, or an nftables table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Iptables,
    Nftables,
}

impl BackendId {
    /// Every backend that can hold our rules on a node.
    pub const ALL: [BackendId; 3] = [
        BackendId::IptablesNft,
        BackendId::IptablesLegacy,
        BackendId::Nftables,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BackendId::IptablesNft => "iptables-nft",
            BackendId::IptablesLegacy => "iptables-legacy",
            BackendId::Nftables => "nftables",
            #[cfg(test)]
            BackendId::Fake => "fake",
        }
    }

    pub fn kind(self) -> BackendKind {
        match self {
            BackendId::Nftables => BackendKind::Nftables,
            _ => BackendKind::Iptables,
        }
    }

    /// The flag that chooses this backend, for the commands the tools suggest: every
    /// suggested command must parse.
    pub fn flag(self) -> &'static str {
        match self {
            BackendId::Nftables => "--backend=nftables",
            BackendId::IptablesLegacy => "--iptables-mode=legacy",
            _ => "--iptables-mode=nft",
        }
    }
}

impl std::fmt::Display for BackendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BackendId {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        BackendId::ALL
            .into_iter()
            .find(|id| id.as_str() == name)
            .ok_or_else(|| {
                format!("unknown backend {name:?} (iptables-nft, iptables-legacy or nftables)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling_parses_back_and_serializes_the_same() {
        for id in BackendId::ALL {
            assert_eq!(id.to_string().parse::<BackendId>(), Ok(id));
            assert_eq!(
                serde_json::to_string(&id).unwrap(),
                format!("\"{id}\""),
                "JSON and Display agree"
            );
        }
        assert!("iptables".parse::<BackendId>().is_err());
    }
}
