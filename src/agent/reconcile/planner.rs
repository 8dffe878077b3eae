//! The plan stage of a pass: the config in force, the flags and the node facts become one
//! ruleset per managed family (by the pure [`crate::plan`]), made again only when the config
//! or the node facts changed, each checked for what the plan could not resolve before the
//! enforce stage may take it.

use super::enforce::{Enforceable, Unresolved};
use super::node_facts::NodeFacts;
use crate::config::Config;
use crate::plan::PlanOptions;

/// One family's plan: a ruleset the enforce stage may write, or what keeps it from one.
pub type Planned = Result<Enforceable, Unresolved>;

/// The plan of the config and node facts in force, made once per change of either.
#[derive(Default)]
pub struct Planner {
    /// The generations of the config and of the node facts the plan was made from, and it.
    made: Option<((u64, u64), Vec<Planned>)>,
}

/// What a plan is made from: the config in force and the node facts, each with the
/// generation that says when it changed, and the flags.
pub struct PlanInputs<'a> {
    pub config: (&'a Config, u64),
    pub node: (&'a NodeFacts, u64),
    pub flags: &'a PlanOptions,
}

impl Planner {
    /// The plan of `inputs`: the one made before when neither the config nor the node facts
    /// changed since (a steady pass copies no plan).
    pub fn plan(&mut self, inputs: &PlanInputs) -> &[Planned] {
        let made_from = (inputs.config.1, inputs.node.1);
        let fresh = !matches!(&self.made, Some((from, _)) if *from == made_from);
        if fresh {
            let rulesets = crate::plan::plan(inputs.config.0, inputs.flags, &inputs.node.0.egress)
                .into_iter()
                .map(Enforceable::check)
                .collect();
            self.made = Some((made_from, rulesets));
        }
        self.made.as_ref().map_or(&[], |(_, rulesets)| rulesets)
    }
}
