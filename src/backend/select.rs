//! The factory: a neutral backend choice becomes a backend plus the reason it was chosen.
//! A new backend is one folder under `src/backend/` and one arm here.

use super::iptables::{detect_variant, Iptables, Variant};
use super::nftables::Nftables;
use super::Backend;

/// Which backend to drive, as the user chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// iptables, in one of its variants.
    Iptables(IptablesVariant),
    /// The native nftables backend (tables `ip ipmasq` and `ip6 ipmasq`).
    Nftables,
}

/// Which iptables variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IptablesVariant {
    /// The variant that already holds the node's rules (iptables-wrappers' rules).
    Auto,
    /// iptables-nft (the nf_tables kernel API through the iptables tools).
    Nft,
    /// iptables-legacy (the x_tables kernel API).
    Legacy,
}

/// A chosen backend and why.
pub struct Selected {
    pub backend: Box<dyn Backend>,
    pub reason: String,
}

/// Builds the chosen backend.
pub fn select(choice: Choice) -> Selected {
    let (variant, reason) = match choice {
        Choice::Nftables => {
            return Selected {
                backend: Box::new(Nftables::new()),
                reason: "--backend=nftables".to_string(),
            }
        }
        Choice::Iptables(IptablesVariant::Nft) => (Variant::Nft, "--iptables-mode=nft".to_string()),
        Choice::Iptables(IptablesVariant::Legacy) => {
            (Variant::Legacy, "--iptables-mode=legacy".to_string())
        }
        Choice::Iptables(IptablesVariant::Auto) => {
            let detection = detect_variant();
            (detection.variant, format!("auto: {}", detection.reason))
        }
    };
    Selected {
        backend: Box::new(Iptables::new(variant)),
        reason,
    }
}

/// The backend of `name` (as [`Backend::name`] spells it) whose tools each get at most
/// `timeout`: what a stop uses to clean up within its deadline.
pub fn by_name_with_timeout(name: &str, timeout: std::time::Duration) -> Option<Box<dyn Backend>> {
    Some(match choice_by_name(name)? {
        Choice::Nftables => Box::new(Nftables::new().with_timeout(timeout)),
        Choice::Iptables(IptablesVariant::Legacy) => {
            Box::new(Iptables::new(Variant::Legacy).with_timeout(timeout))
        }
        Choice::Iptables(_) => Box::new(Iptables::new(Variant::Nft).with_timeout(timeout)),
    })
}

/// The flag that chooses the backend named `name` (as [`Backend::name`] spells it), for the
/// commands the tools suggest: every suggested command must parse.
pub fn flag_for(name: &str) -> Option<&'static str> {
    Some(match choice_by_name(name)? {
        Choice::Nftables => "--backend=nftables",
        Choice::Iptables(IptablesVariant::Legacy) => "--iptables-mode=legacy",
        Choice::Iptables(_) => "--iptables-mode=nft",
    })
}

/// The choice that rebuilds a backend from its name (as the state file records it).
pub fn choice_by_name(name: &str) -> Option<Choice> {
    match name {
        "iptables-nft" => Some(Choice::Iptables(IptablesVariant::Nft)),
        "iptables-legacy" => Some(Choice::Iptables(IptablesVariant::Legacy)),
        "nftables" => Some(Choice::Nftables),
        _ => None,
    }
}

/// Every backend that can hold our rules on a node, whichever the agent uses: what `show`
/// looks through for leftovers and `cleanup` removes from.
pub fn every_backend() -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(Iptables::new(Variant::Nft)),
        Box::new(Iptables::new(Variant::Legacy)),
        Box::new(Nftables::new()),
    ]
}

/// Whether two backend names are of the same kind (the iptables variants are one kind): a
/// backend of another kind holding our rules is a leftover of a switch.
pub fn same_kind(a: &str, b: &str) -> bool {
    a.starts_with("iptables") == b.starts_with("iptables")
}
