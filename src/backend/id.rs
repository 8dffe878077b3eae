//! Which backend, as one typed value from the flags to the report: `iptables-nft`,
//! `iptables-legacy` or `nftables`, with one spelling (logs, metrics labels, the state file,
//! JSON) and one parser, the flag that chooses it, and whether it writes an iptables chain;
//! and what a backend answers by its identity alone, without state or a kernel to ask: the
//! names it accepts, where its rules live, what a plan costs it.

use super::{iptables, nftables, Footprint, MemoryModel};
use crate::netlink::nf_tables::foreign::Owned;
use crate::plan::{Family, Names, Ruleset};
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

/// What a backend answers by its identity alone.
impl BackendId {
    /// Whether this backend can install rules under `names` (e.g. iptables' 28-character
    /// chain limit); the reason when it cannot.
    pub fn accepts(self, names: &Names) -> Result<(), String> {
        match self.iptables_variant() {
            Some(_) => iptables::accepts(names),
            None => Ok(()),
        }
    }

    /// Where our rules live, for people: `IP-MASQ-AGENT in table nat`.
    pub fn location(self, names: &Names) -> String {
        match self {
            BackendId::Nftables => nftables::location(),
            _ => format!("{} in table nat", names.chain),
        }
    }

    /// How much memory applying a plan takes with this backend (see [`MemoryModel`]).
    pub fn memory_model(self) -> MemoryModel {
        match self {
            BackendId::IptablesNft => iptables::Variant::Nft.memory_model(),
            BackendId::IptablesLegacy => iptables::Variant::Legacy.memory_model(),
            BackendId::Nftables => nftables::memory_model(),
            #[cfg(test)]
            BackendId::Fake => super::fake::memory_model(),
        }
    }

    /// The rules and set elements this backend writes for `ruleset`, counted without
    /// rendering them: what [`MemoryModel::peak`] estimates from.
    pub fn footprint(self, ruleset: &Ruleset) -> Footprint {
        match self {
            BackendId::IptablesNft | BackendId::IptablesLegacy => iptables::footprint(ruleset),
            BackendId::Nftables => nftables::footprint(ruleset),
            #[cfg(test)]
            BackendId::Fake => super::fake::footprint(ruleset),
        }
    }

    /// Whether our rules may be in `family` at all, told by the kernel without running a
    /// tool (true when it cannot tell): a sweep for leftovers skips the rest.
    pub fn may_hold_ours(self, family: Family, names: &Names) -> bool {
        self.iptables_variant()
            .is_none_or(|variant| variant.may_hold_ours(family, names))
    }

    /// What this backend owns in nf_tables, for hearing a neighbour change it: the nftables
    /// table, or with iptables-nft our chain and the `POSTROUTING` that jumps to it in `nat`.
    /// None for iptables-legacy, whose changes the kernel announces to no one.
    pub fn announced_ownership(self, names: &Names) -> Option<Owned> {
        match self {
            BackendId::Nftables => Some(Owned::Table(nftables::TABLE.to_string())),
            BackendId::IptablesNft => Some(Owned::Chains {
                table: "nat".to_string(),
                chains: vec![names.chain.to_string(), "POSTROUTING".to_string()],
            }),
            BackendId::IptablesLegacy => None,
            #[cfg(test)]
            BackendId::Fake => None,
        }
    }

    /// The iptables variant this backend runs, if it is one.
    fn iptables_variant(self) -> Option<iptables::Variant> {
        match self {
            BackendId::IptablesNft => Some(iptables::Variant::Nft),
            BackendId::IptablesLegacy => Some(iptables::Variant::Legacy),
            _ => None,
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
