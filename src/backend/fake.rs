//! An in-memory backend for unit tests of the reconcile logic: it keeps our chain and the
//! POSTROUTING jumps per family and interprets the few restore commands our transactions use.
//! Root tests against the real iptables remain the evidence; this only makes logic testable.

use super::iptables::{jump_target, Jump, LiveChain, POSTROUTING};
use super::{Backend, BackendError};
use crate::plan::{ChainName, Family};
use std::cell::RefCell;
use std::collections::HashMap;

/// The fake's state and counters.
#[derive(Debug, Default)]
pub struct FakeBackend {
    pub state: RefCell<HashMap<Family, LiveChain>>,
    pub observes: RefCell<usize>,
    pub applies: RefCell<Vec<String>>,
    /// When set, every apply fails with this message.
    pub fail_apply: RefCell<Option<String>>,
}

impl FakeBackend {
    pub fn live(&self, family: Family) -> LiveChain {
        self.state
            .borrow()
            .get(&family)
            .cloned()
            .unwrap_or_default()
    }

    pub fn set_live(&self, family: Family, live: LiveChain) {
        self.state.borrow_mut().insert(family, live);
    }
}

impl Backend for FakeBackend {
    fn name(&self) -> String {
        "fake".to_string()
    }

    fn observe(&self, family: Family, _chain: &ChainName) -> Result<LiveChain, BackendError> {
        *self.observes.borrow_mut() += 1;
        Ok(self.live(family))
    }

    fn apply(&self, family: Family, script: &str) -> Result<(), BackendError> {
        if let Some(message) = self.fail_apply.borrow().clone() {
            return Err(BackendError::Failed {
                program: "fake-restore".into(),
                code: Some(1),
                detail: message,
            });
        }
        self.applies.borrow_mut().push(script.to_string());
        let mut live = self.live(family);
        for line in script.lines() {
            if let Some(rest) = line.strip_prefix(':') {
                live.chain_exists = true;
                let name = rest.split_whitespace().next().unwrap_or_default();
                live.rules
                    .retain(|r| !r.starts_with(&format!("-A {name} ")));
            } else if let Some(spec) = line.strip_prefix(&format!("-D {POSTROUTING} ")) {
                if let Some(i) = live.jumps.iter().position(|j| j.spec == spec) {
                    live.jumps.remove(i);
                }
            } else if let Some(spec) = line.strip_prefix(&format!("-A {POSTROUTING} ")) {
                if jump_target(spec).is_some() {
                    live.jumps.push(Jump {
                        position: live.postrouting_rules + 1,
                        spec: spec.to_string(),
                        counters: None,
                    });
                    live.postrouting_rules += 1;
                }
            } else if line.starts_with("-A ") {
                live.rules.push(line.to_string());
                live.counters.push(None);
            } else if line.starts_with("-X ") {
                live.chain_exists = false;
                live.rules.clear();
                live.counters.clear();
            }
        }
        self.set_live(family, live);
        Ok(())
    }
}
