//! The factory: a neutral backend choice becomes a backend plus the reason it was chosen.
//! A new backend is one folder under `src/backend/` and one arm here.

use super::iptables::{detect_variant, Iptables, Variant};
use super::nftables::Nftables;
use super::{Backend, BackendId};
use crate::plan::Family;
use std::time::Duration;

/// Which backend to drive, as the user chose it: one backend by its identity, or iptables
/// in whichever variant already holds the node's rules (`--iptables-mode=auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Exactly this backend.
    Backend(BackendId),
    /// iptables, the variant that already holds the node's rules (iptables-wrappers' rule).
    DetectedIptables,
}

impl Choice {
    /// Whether a backend `id` answers this choice: the one named, or either iptables variant
    /// for a detected one.
    pub fn admits(self, id: BackendId) -> bool {
        match self {
            Choice::Backend(chosen) => chosen == id,
            Choice::DetectedIptables => id.is_iptables(),
        }
    }
}

/// A chosen backend and why.
pub struct Selected {
    pub backend: Box<dyn Backend>,
    pub reason: String,
}

/// Builds the chosen backend.
pub fn select(choice: Choice) -> Selected {
    match choice {
        Choice::Backend(id) => Selected {
            backend: build(id, None),
            reason: id.flag().to_string(),
        },
        Choice::DetectedIptables => {
            let detection = detect_variant();
            Selected {
                backend: Box::new(Iptables::new(detection.variant)),
                reason: format!("auto: {}", detection.reason),
            }
        }
    }
}

/// The factory: one arm per backend, each with its own deadline for every tool it runs or
/// reply it awaits, or `timeout`.
fn build(id: BackendId, timeout: Option<Duration>) -> Box<dyn Backend> {
    match id {
        BackendId::IptablesNft => Box::new(deadline(
            Iptables::new(Variant::Nft),
            timeout,
            Iptables::with_timeout,
        )),
        BackendId::IptablesLegacy => Box::new(deadline(
            Iptables::new(Variant::Legacy),
            timeout,
            Iptables::with_timeout,
        )),
        BackendId::Nftables => Box::new(deadline(Nftables::new(), timeout, Nftables::with_timeout)),
        #[cfg(test)]
        BackendId::Fake => Box::new(super::fake::FakeBackend::default()),
    }
}

/// `backend` with `timeout` set, when one is given.
fn deadline<B>(backend: B, timeout: Option<Duration>, set: fn(B, Duration) -> B) -> B {
    match timeout {
        Some(timeout) => set(backend, timeout),
        None => backend,
    }
}

/// The backend `id` whose tools each get at most `timeout`: what a stop uses to clean up
/// within its deadline.
pub fn by_id_with_timeout(id: BackendId, timeout: Duration) -> Box<dyn Backend> {
    build(id, Some(timeout))
}

/// Every backend that can hold our rules on a node, whichever the agent uses: what `show`
/// looks through for leftovers and `cleanup` removes from.
pub fn every_backend() -> Vec<Box<dyn Backend>> {
    BackendId::ALL
        .into_iter()
        .map(|id| build(id, None))
        .collect()
}

/// Visits every family of every backend given whose tools are installed, collecting what
/// `visit` returns: the one sweep over the node behind `show`'s leftovers, `cleanup`, and the
/// agent's removal of another backend's rules.
pub fn sweep<T>(
    backends: &mut [Box<dyn Backend>],
    mut visit: impl FnMut(&mut dyn Backend, Family) -> Option<T>,
) -> Vec<T> {
    let mut found = Vec::new();
    for backend in backends {
        for family in Family::ALL {
            if backend.family_available(family) {
                found.extend(visit(backend.as_mut(), family));
            }
        }
    }
    found
}
