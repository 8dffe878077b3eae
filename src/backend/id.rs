//! Which backend, as one typed value from the flags to the report: `iptables-nft`,
//! `iptables-legacy` or `nftables`, with one spelling (logs, metrics labels, the state file,
//! JSON) and one parser, the flag that chooses it, and whether it writes an iptables chain.

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

    /// Whether the backend writes an iptables chain and its POSTROUTING jumps (either
    /// variant), rather than an nftables table: what `show` words its report by, and what a
    /// switch of `--backend` (not of the variant) changes.
    pub fn is_iptables(self) -> bool {
        match self {
            BackendId::IptablesNft | BackendId::IptablesLegacy => true,
            BackendId::Nftables => false,
            #[cfg(test)]
            BackendId::Fake => true,
        }
    }

    /// The flag that chooses this backend, for the commands the tools suggest: every
    /// suggested command must parse.
    pub fn flag(self) -> &'static str {
        match self {
            BackendId::Nftables => "--backend=nftables",
            BackendId::IptablesLegacy => "--iptables-mode=legacy",
            BackendId::IptablesNft => "--iptables-mode=nft",
            #[cfg(test)]
            BackendId::Fake => "(no flag chooses the fake backend)",
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
