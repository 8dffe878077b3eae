//! The factory: a neutral backend choice becomes a backend plus the reason it was chosen.
//! A new backend is one folder under `src/backend/` and one arm here.

use super::iptables::{detect_variant, Iptables, Variant};
use super::nftables::Nftables;
use super::{Backend, BackendId};
use crate::plan::Family;

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

/// The backend `id` whose tools each get at most `timeout`: what a stop uses to clean up
/// within its deadline.
pub fn by_id_with_timeout(id: BackendId, timeout: std::time::Duration) -> Box<dyn Backend> {
    match id {
        BackendId::Nftables => Box::new(Nftables::new().with_timeout(timeout)),
        BackendId::IptablesLegacy => Box::new(Iptables::new(Variant::Legacy).with_timeout(timeout)),
        _ => Box::new(Iptables::new(Variant::Nft).with_timeout(timeout)),
    }
}

/// The choice that rebuilds a backend from its id (as the state file records it).
pub fn choice_of(id: BackendId) -> Choice {
    match id {
        BackendId::Nftables => Choice::Nftables,
        BackendId::IptablesLegacy => Choice::Iptables(IptablesVariant::Legacy),
        _ => Choice::Iptables(IptablesVariant::Nft),
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

/// Visits every family of every backend given whose tools are installed, collecting what
/// `visit` returns: the one sweep over the node behind `show`'s leftovers, `cleanup`, and the
/// agent's removal of another backend's rules.
pub fn sweep<T>(
    backends: &[Box<dyn Backend>],
    mut visit: impl FnMut(&dyn Backend, Family) -> Option<T>,
) -> Vec<T> {
    let mut found = Vec::new();
    for backend in backends {
        for family in Family::ALL {
            if backend.family_available(family) {
                found.extend(visit(backend.as_ref(), family));
            }
        }
    }
    found
}
