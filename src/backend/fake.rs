//! An in-memory backend for unit tests of the reconcile logic (knftables' fake is the model):
//! it stores the typed rulesets it was given, compares them with the neutral vocabulary, and
//! lets a test inject drift or failures. Root tests against the real tools remain the evidence.

use super::{
    Backend, BackendError, CleanupReport, Difference, DriftKind, Inspected, Inspection, SyncReport,
};
use crate::plan::{Family, Names, Ruleset};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What the fake holds for one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FakeFamily {
    /// The installed ruleset, if any.
    pub ruleset: Option<Ruleset>,
    /// How many entry jumps point at it.
    pub jumps: usize,
}

/// The fake's state and counters, shared so a test keeps a handle while the agent owns it.
#[derive(Clone, Debug, Default)]
pub(crate) struct FakeBackend {
    pub inner: Arc<Mutex<FakeState>>,
}

#[derive(Debug, Default)]
pub(crate) struct FakeState {
    pub families: HashMap<Family, FakeFamily>,
    pub syncs: usize,
    pub applies: usize,
    /// When set, every write fails with this message.
    pub fail_apply: Option<String>,
}

impl FakeBackend {
    pub fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn live(&self, family: Family) -> FakeFamily {
        self.state()
            .families
            .get(&family)
            .cloned()
            .unwrap_or_default()
    }

    pub fn set_live(&self, family: Family, live: FakeFamily) {
        self.state().families.insert(family, live);
    }

    fn differences(desired: &Ruleset, live: &FakeFamily) -> Vec<Difference> {
        let family = desired.family;
        let diff = |kind, detail: &str| Difference {
            family,
            kind,
            position: None,
            detail: detail.to_string(),
        };
        let mut out = Vec::new();
        match &live.ruleset {
            None => out.push(diff(DriftKind::ChainMissing, "nothing installed")),
            Some(installed) if installed != desired => {
                out.push(diff(DriftKind::MissingRule, "installed ruleset differs"))
            }
            Some(_) => {}
        }
        match live.jumps {
            0 => out.push(diff(DriftKind::JumpMissing, "no entry jump")),
            1 => {}
            _ => out.push(diff(DriftKind::JumpDuplicated, "several entry jumps")),
        }
        out
    }
}

/// How much memory the fake says a plan takes: rules alone.
pub(crate) fn memory_model() -> super::MemoryModel {
    super::MemoryModel {
        base_mib: 8,
        per_10k_rules_mib: 10,
        per_mib_of_rule_text_mib: 0,
        per_10k_set_elements_mib: 0,
        unit: super::ListUnit::Rules,
    }
}

/// One rule per decision, per source range and the catch-all.
pub(crate) fn footprint(ruleset: &Ruleset) -> super::Footprint {
    super::Footprint {
        rules: ruleset.decisions.len() + ruleset.entry.source_ranges.len() + 1,
        set_elements: 0,
        rule_text_bytes: 0,
    }
}

impl Backend for FakeBackend {
    fn id(&self) -> super::BackendId {
        super::BackendId::Fake
    }

    fn sync(&mut self, desired: &Ruleset, dry_run: bool) -> Result<SyncReport, BackendError> {
        let mut state = self.state();
        state.syncs += 1;
        let live = state
            .families
            .get(&desired.family)
            .cloned()
            .unwrap_or_default();
        let differences = Self::differences(desired, &live);
        let transaction = (!differences.is_empty()).then(|| format!("{desired:#?}"));
        if transaction.is_some() && !dry_run {
            if let Some(message) = state.fail_apply.clone() {
                return Err(BackendError::Failed {
                    program: "fake-apply".into(),
                    code: Some(1),
                    detail: message,
                });
            }
            state.applies += 1;
            state.families.insert(
                desired.family,
                FakeFamily {
                    ruleset: Some(desired.clone()),
                    jumps: 1,
                },
            );
        }
        Ok(SyncReport {
            family: desired.family,
            differences,
            transaction,
            rules: desired.decisions.len() + 1,
        })
    }

    fn inspect(&self, family: Family, _names: &Names) -> Result<Inspected, BackendError> {
        let live = self.live(family);
        Ok(Inspected::neutral(Inspection {
            installed: live.ruleset.is_some(),
            ..Inspection::default()
        }))
    }

    fn compare(&self, desired: &Ruleset, _live: &Inspected) -> Vec<Difference> {
        Self::differences(desired, &self.live(desired.family))
    }

    fn cleanup(
        &mut self,
        family: Family,
        _names: &Names,
        dry_run: bool,
    ) -> Result<CleanupReport, BackendError> {
        let live = self.live(family);
        let anything = live.ruleset.is_some() || live.jumps > 0;
        if anything && !dry_run {
            self.state().families.remove(&family);
        }
        Ok(CleanupReport {
            family,
            removed: if anything {
                vec![super::Removed::Chain {
                    chain: "fake".into(),
                    jumps: live.jumps,
                }]
            } else {
                Vec::new()
            },
            left: Vec::new(),
            transaction: anything.then(|| "remove".to_string()),
        })
    }
}
