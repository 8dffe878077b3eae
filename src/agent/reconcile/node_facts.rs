//! The node-facts stage of a pass: what the plan needs to know about this node besides the
//! config and the flags — the memory limit, read once at start, and the output addresses the
//! config names, resolved against the node's addresses (read again only when a change that
//! matters was reported). An input to the plan, never written into the flags.

use crate::backend::BackendError;
use crate::config::egress::EgressTarget;
use crate::config::Config;
use crate::plan::{Family, ResolvedEgress};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tracing::{debug, info, warn};

/// What this node holds that the plan depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The output addresses resolved on this node.
    pub egress: ResolvedEgress,
    /// The memory the agent may use (its cgroup's limit); None: no limit.
    pub memory_limit: Option<u64>,
}

/// Reads the node facts, and keeps what the last read found.
pub struct NodeReader {
    facts: NodeFacts,
    /// Bumped whenever the resolved output addresses change (the plan is made again).
    generation: u64,
    /// What reading the memory limit found (logged once at start).
    pub memory_limit_found: crate::agent::memory::Limit,
    /// The last read of the node's addresses was interrupted: read them again soon.
    pub reread_soon: bool,
    /// Set by the event loop while it is subscribed to address changes: then a resolution
    /// stands until a change that matters is reported, and a steady pass reads no address.
    pub address_events: Arc<AtomicBool>,
    /// The output addresses the resolution in force was read for (None: none read yet).
    read_for: Option<Vec<EgressTarget>>,
    /// A change that matters was reported (or an operator asked, SIGHUP): read at the next pass.
    due: bool,
    /// Each managed family whose config names an output address, with why it masquerades
    /// instead while the node holds no address in that value (None: SNAT to it).
    pub fallbacks: BTreeMap<Family, Option<String>>,
}

impl NodeReader {
    /// Reads the memory limit; the addresses are read at the first pass that needs them.
    pub fn new() -> NodeReader {
        let memory_limit_found = crate::agent::memory::read_limit();
        NodeReader {
            facts: NodeFacts {
                egress: ResolvedEgress::default(),
                memory_limit: memory_limit_found.bytes(),
            },
            generation: 0,
            memory_limit_found,
            reread_soon: false,
            address_events: Arc::default(),
            read_for: None,
            due: true,
            fallbacks: BTreeMap::new(),
        }
    }

    pub fn facts(&self) -> &NodeFacts {
        &self.facts
    }

    /// Changes whenever the facts the plan depends on do.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// For tests: the agent as if its cgroup had this limit.
    #[cfg(test)]
    pub fn set_memory_limit(&mut self, limit: Option<u64>) {
        self.facts.memory_limit = limit;
    }

    /// An address change that can move the output address was reported, or an operator asked
    /// for a fresh look (SIGHUP): the next pass reads the node's addresses.
    pub fn addresses_may_have_changed(&mut self) {
        self.due = true;
    }

    /// Resolves `config`'s output addresses (those of the managed `families`) against the
    /// node's addresses now. A family whose configured value the node holds no address of
    /// falls back to masquerade (said once, in a WARN, in the status and the metrics) until
    /// one is back. A read that concurrent changes interrupted every time keeps the
    /// resolution in force and asks for another pass soon.
    pub fn resolve_egress(
        &mut self,
        config: Option<&Config>,
        families: &[Family],
    ) -> Result<(), BackendError> {
        let targets = config.map_or_else(Vec::new, |config| {
            crate::plan::egress::targets(config, families)
        });
        if !self.due
            && self.read_for.as_ref() == Some(&targets)
            && self.address_events.load(Ordering::Acquire)
        {
            // Nothing that can move the output address was reported since the last read.
            return Ok(());
        }
        let uses_node_addresses = config
            .is_some_and(|config| crate::plan::egress::names_output_address(config, families));
        let resolved = match config {
            Some(config) if uses_node_addresses => {
                let resolver = crate::plan::egress::Resolver::new(config, families);
                debug!("reading this node's addresses for the output address");
                match crate::addresses::resolve_output_addresses(&resolver) {
                    Ok(resolution) => {
                        self.note_fallbacks(&resolver.families(), &resolution.lost);
                        resolution.egress
                    }
                    Err(err) if crate::addresses::is_interrupted(&err) => {
                        self.reread_soon = true;
                        self.due = true;
                        debug!(error = %err, "this node's addresses change too fast to read; the output address in force stays, read again shortly");
                        return Ok(());
                    }
                    Err(err) => {
                        return Err(BackendError::Node(format!(
                            "cannot read this node's addresses: {err}"
                        )))
                    }
                }
            }
            _ => {
                self.fallbacks.clear();
                ResolvedEgress::default()
            }
        };
        self.reread_soon = false;
        self.due = false;
        self.read_for = Some(targets);
        if resolved != self.facts.egress {
            if resolved.v4.is_some() || resolved.v6.is_some() {
                info!(
                    ipv4 = %resolved.v4.map_or("masquerade".to_string(), |a| a.to_string()),
                    ipv6 = %resolved.v6.map_or("masquerade".to_string(), |a| a.to_string()),
                    "output address resolved on this node"
                );
            }
            self.facts.egress = resolved;
            self.generation += 1;
        }
        Ok(())
    }

    /// Records which families masquerade because the node lacks their output address: a WARN
    /// when a family starts to, an INFO when it stops (its address is back).
    fn note_fallbacks(
        &mut self,
        families: &[Family],
        lost: &[(Family, crate::plan::egress::EgressError)],
    ) {
        let before = std::mem::take(&mut self.fallbacks);
        for family in families {
            let reason = lost
                .iter()
                .find(|(f, _)| f == family)
                .map(|(_, err)| crate::plan::egress::fallback_reason(*family, err));
            let was = before.get(family).cloned().flatten();
            match (&was, &reason) {
                (None, Some(reason)) => {
                    warn!(family = %family, reason = %reason, "output address not on this node: masquerading instead");
                }
                (Some(_), None) => {
                    info!(family = %family, "output address back on this node: SNAT to it again");
                }
                _ => {}
            }
            self.fallbacks.insert(*family, reason);
        }
    }
}
