//! What the nftables ruleset generation id (`NFT_MSG_GETGEN`, read by [`crate::netlink::nf_tables`]:
//! one request and one reply of a few bytes, microseconds at any ruleset size) vouches for. Every nftables commit in the
//! network namespace (ours, kube-proxy's, iptables-nft's) moves it, so an unchanged id means
//! nothing changed since it was read. Both the nftables backend and the iptables-nft variant
//! gate their passes on it; iptables-legacy's writes do not move it.

/// What a backend knows to be live for one family: the generation id after its own last
/// apply (or last full comparison) and the ruleset that was in sync then.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gate {
    known: [Option<(u32, crate::plan::Ruleset, usize)>; 2],
}

fn slot(family: crate::plan::Family) -> usize {
    match family {
        crate::plan::Family::V4 => 0,
        crate::plan::Family::V6 => 1,
    }
}

impl Gate {
    /// Whether `desired` is known to be live at generation `now`: nothing to read or write.
    pub fn in_sync(&self, now: Option<u32>, desired: &crate::plan::Ruleset) -> bool {
        self.known_at(now, desired.family)
            .is_some_and(|(ruleset, _)| ruleset == desired)
    }

    /// The ruleset known to be live at generation `now`, if nothing committed since we knew.
    pub fn known_at(
        &self,
        now: Option<u32>,
        family: crate::plan::Family,
    ) -> Option<(&crate::plan::Ruleset, usize)> {
        match (now, &self.known[slot(family)]) {
            (Some(now), Some((generation, ruleset, rules))) if *generation == now => {
                Some((ruleset, *rules))
            }
            _ => None,
        }
    }

    /// Records the state after a pass: `before` was read before the observation; `after`,
    /// when we applied a transaction, after it. Our own commit moves the id by exactly one;
    /// anything else means another writer came in between, so nothing is recorded.
    pub fn record(
        &mut self,
        desired: &crate::plan::Ruleset,
        rules: usize,
        before: Option<u32>,
        after: Option<Option<u32>>,
    ) {
        let generation = match after {
            None => before,
            Some(after) => match (before, after) {
                (Some(b), Some(a)) if a == b.wrapping_add(1) => Some(a),
                _ => None,
            },
        };
        self.known[slot(desired.family)] = generation.map(|g| (g, desired.clone(), rules));
    }

    /// The generation the family's known ruleset was live at.
    pub fn generation(&self, family: crate::plan::Family) -> Option<u32> {
        self.known[slot(family)].as_ref().map(|(g, _, _)| *g)
    }

    /// Moves the family's knowledge to generation `to`: the commits since changed nothing of
    /// ours (the change notifications say so).
    pub fn advance(&mut self, family: crate::plan::Family, to: u32) {
        if let Some((generation, _, _)) = &mut self.known[slot(family)] {
            *generation = to;
        }
    }

    /// Forgets a family (after a cleanup).
    pub fn forget(&mut self, family: crate::plan::Family) {
        self.known[slot(family)] = None;
    }
}

/// The generation id, or None when netlink cannot tell (then every pass compares fully).
pub(crate) fn current() -> Option<u32> {
    match crate::netlink::nf_tables::generation() {
        Ok(id) => Some(id),
        Err(err) => {
            tracing::debug!(error = %err, "cannot read the nftables generation id");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_trusts_only_our_own_single_commit() {
        let ruleset = crate::plan::plan(
            &crate::config::Config::defaults(&crate::config::Options::default()),
            &crate::plan::PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
        )
        .remove(0);
        let mut gate = Gate::default();
        assert!(!gate.in_sync(Some(5), &ruleset));
        gate.record(&ruleset, 5, Some(5), Some(Some(6)));
        assert!(gate.in_sync(Some(6), &ruleset));
        assert!(!gate.in_sync(Some(7), &ruleset), "someone committed since");
        gate.record(&ruleset, 5, Some(7), Some(Some(9)));
        assert!(
            !gate.in_sync(Some(9), &ruleset),
            "another commit slipped in"
        );
        gate.record(&ruleset, 5, Some(9), None);
        assert!(gate.in_sync(Some(9), &ruleset), "compared in sync at 9");
        let mut other = ruleset.clone();
        other.decisions = ruleset.decisions[1..].into();
        assert!(!gate.in_sync(Some(9), &other), "a new plan is compared");
        assert!(!gate.in_sync(None, &ruleset), "no id, no trust");
        gate.forget(ruleset.family);
        assert!(!gate.in_sync(Some(9), &ruleset));
    }
}
