//! Node pools: further ConfigMaps named `ip-masq-agent-*` with the annotation
//! `ipmasq.io/node-selector` (a label selector) whose `config` applies to the nodes whose
//! labels match, merged after the base config in name order with the rules of merged files
//! (`--config-dir`, see [`super::merge`]). Pure: plain values in, a checked config out, so the
//! API source and `validate` share it.
//!
//! What the base contributes to a merge is its effective config, as a node without a pool
//! enforces it: a base that lists no `nonMasqueradeCIDRs` contributes upstream's defaults, so a
//! pool that adds one range keeps the defaults too (a `--config-dir` part that lists none would
//! add none). A node that no pool selects gets the base exactly as the file mode reads it (its
//! repeats kept); a pool's config is checked as one part of a merge (its own `cidrLimit`, the
//! checks across lists on the merged config). A pool whose selector does not parse selects no
//! node, and is an error for `validate`.

use super::merge::{self, Part};
use super::selector::{Labels, Selector, SelectorError};
use super::{check_text, Checked, Options};
use std::path::Path;
use std::sync::Arc;

/// The annotation that makes an `ip-masq-agent-*` ConfigMap a node pool.
pub const NODE_SELECTOR_ANNOTATION: &str = "ipmasq.io/node-selector";
/// The name prefix of a pool ConfigMap (the base is `ip-masq-agent` itself).
pub const POOL_NAME_PREFIX: &str = "ip-masq-agent-";

/// Whether a ConfigMap of this name becomes a pool when it has the annotation.
pub fn is_pool_name(name: &str) -> bool {
    name.len() > POOL_NAME_PREFIX.len() && name.starts_with(POOL_NAME_PREFIX)
}

/// One pool: its ConfigMap's name, its selector (as written, and parsed), and its config
/// checked as one part of a merge.
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub selector_text: String,
    pub selector: Result<Selector, SelectorError>,
    pub part: Part,
}

impl Pool {
    /// A pool from its ConfigMap's values: the name, the annotation's text and the `config`
    /// key's text (None when it has none: an empty part, which adds nothing).
    pub fn from_values(
        name: &str,
        selector: &str,
        config: Option<&str>,
        options: &Options,
    ) -> Pool {
        let merging = Options {
            merging: true,
            ..*options
        };
        Pool::new(name, selector, check_text(config.unwrap_or(""), &merging))
    }

    /// A pool whose config was checked already (as a merge part: `Options::merging`).
    pub fn new(name: &str, selector: &str, checked: Checked) -> Pool {
        Pool {
            name: name.to_string(),
            selector_text: selector.to_string(),
            selector: Selector::parse(selector),
            part: Part {
                name: pool_part_name(name),
                checked,
            },
        }
    }

    /// Whether this pool applies to a node with these labels (never, when its selector is
    /// invalid).
    pub fn selects(&self, labels: &Labels) -> bool {
        self.selector.as_ref().is_ok_and(|s| s.matches(labels))
    }
}

/// How a merge names a pool's part in its findings.
fn pool_part_name(name: &str) -> Arc<str> {
    format!("ConfigMap {name}").into()
}

/// The pools that apply to a node, in name order (the merge order).
pub fn pools_for_node<'a>(pools: &'a [Pool], labels: &Labels) -> Vec<&'a Pool> {
    let mut matching: Vec<&Pool> = pools.iter().filter(|p| p.selects(labels)).collect();
    matching.sort_by(|a, b| a.name.cmp(&b.name));
    matching
}

/// The base's part in a merge: its effective config, the defaults of a key it leaves out
/// included (see the module's comment).
pub fn base_part(base_name: &str, base: &Checked) -> Part {
    let (config, diagnostics) = base.clone().into_parts();
    let checked = match config {
        Some(mut config) => {
            config.provenance.gave_non_masquerade_cidrs = true;
            Checked::new(config, diagnostics)
        }
        None => Checked::rejected(diagnostics),
    };
    Part {
        name: format!("ConfigMap {base_name}").into(),
        checked,
    }
}

/// The ordered list to merge for a node: the base first, then the matching pools in name
/// order.
pub fn parts_for_node(base: &Part, pools: &[Pool], labels: &Labels) -> Vec<Part> {
    std::iter::once(base.clone())
        .chain(
            pools_for_node(pools, labels)
                .into_iter()
                .map(|p| p.part.clone()),
        )
        .collect()
}

/// A node's config: the base alone when no pool selects it (exactly as the file mode reads
/// it), else the base and its pools merged; and the names of the pools that apply.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub checked: Checked,
    pub pools: Vec<String>,
}

/// The config a node with these labels enforces (see [`NodeConfig`]). `base_name` names the
/// base ConfigMap in findings (`kube-system/ip-masq-agent`).
pub fn config_for_node(
    base_name: &str,
    base: &Checked,
    pools: &[Pool],
    labels: &Labels,
    options: &Options,
) -> NodeConfig {
    let applied: Vec<String> = pools_for_node(pools, labels)
        .iter()
        .map(|p| p.name.clone())
        .collect();
    if applied.is_empty() {
        return NodeConfig {
            checked: base.clone(),
            pools: applied,
        };
    }
    let parts = parts_for_node(&base_part(base_name, base), pools, labels);
    NodeConfig {
        checked: merge::merge(Path::new("the node's ConfigMaps"), &parts, options),
        pools: applied,
    }
}

#[cfg(test)]
mod tests;
