//! A node's config in API mode, composed of its inputs: the base ConfigMap's `config` text,
//! the node pools that select the node (in name order, see [`super::pool`]) and every
//! EgressNATPolicy (see [`super::egress_nat`]). Pure: the texts in, a checked config and its
//! digest out, so the agent, its last-known-good and a user recomputing the digest agree.
//!
//! **The digest** of a composed config ([`ComposedText::digest`]):
//! - no pool selects the node and no policy exists: the SHA-256 of the base's `config` text
//!   (`sha256sum` of the same bytes; none when the base or its key is missing), as for one file;
//! - otherwise: the SHA-256 of a listing in `sha256sum`'s format, one line per input in this
//!   order: the base, the pools in name order, the policies in name order:
//!   ```text
//!   <sha256 of the base's config text>  configmaps/<namespace>/<base name>
//!   <sha256 of the pool's config text>  configmaps/<namespace>/<pool name>
//!   <sha256 of the policy's destinations>  egressnatpolicies/<policy name>
//!   ```
//!   where a missing text (no base, no `config` key) counts as empty, and a policy's
//!   destinations are its `spec.destinations[].cidr` as written, each followed by a newline.
//!
//! With kubectl (`ns=kube-system`; each `sha256sum` line ends in `  -`, replaced by the name):
//! ```text
//! h() { sha256sum | cut -d' ' -f1; }
//! { printf '%s  configmaps/%s/%s\n' "$(kubectl -n $ns get cm ip-masq-agent -o jsonpath='{.data.config}' | h)" $ns ip-masq-agent
//!   # ...the same line for each pool that selects the node, in name order...
//!   printf '%s  egressnatpolicies/%s\n' "$(kubectl get egressnatpolicy NAME -o jsonpath='{range .spec.destinations[*]}{.cidr}{"\n"}{end}' | h)" NAME
//! } | sha256sum
//! ```

use super::digest::sha256_hex;
use super::egress_nat;
use super::pool::{self, Pool};
use super::yaml::{self, Value, YamlNode};
use super::{check_text, merge, Checked, Config, Options};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// One node pool that selects the node: its ConfigMap's name, its selector as written, and its
/// `config` text (None: no such key, an empty part).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolText {
    pub name: String,
    pub selector: String,
    pub text: Option<String>,
}

/// One EgressNATPolicy: its name and the object's text (JSON or YAML; the API's object holds
/// `apiVersion`, `kind`, `metadata.name` and `spec`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyText {
    pub name: String,
    pub text: String,
}

/// The inputs of a node's config in API mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComposedText {
    /// The namespace of the ConfigMaps.
    pub namespace: String,
    /// The base ConfigMap's name.
    pub base_name: String,
    /// Its `config` text; None when the ConfigMap or its key does not exist (the defaults).
    pub base: Option<Arc<String>>,
    /// The pools that select the node (put in name order by [`ComposedText::new`]).
    pub pools: Vec<PoolText>,
    /// Every policy (put in name order by [`ComposedText::new`]).
    pub policies: Vec<PolicyText>,
}

impl ComposedText {
    /// The inputs, pools and policies sorted by name.
    pub fn new(
        namespace: &str,
        base_name: &str,
        base: Option<Arc<String>>,
        mut pools: Vec<PoolText>,
        mut policies: Vec<PolicyText>,
    ) -> ComposedText {
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        ComposedText {
            namespace: namespace.to_string(),
            base_name: base_name.to_string(),
            base,
            pools,
            policies,
        }
    }

    /// Bytes of text in all the inputs together (the base's, the pools' and the policies'),
    /// by which their memory is judged before they are parsed.
    pub fn text_bytes(&self) -> u64 {
        let base = self.base.as_deref().map_or(0, String::len);
        let pools: usize = self
            .pools
            .iter()
            .filter_map(|p| p.text.as_deref())
            .map(str::len)
            .sum();
        let policies: usize = self.policies.iter().map(|p| p.text.len()).sum();
        (base + pools + policies) as u64
    }

    /// Whether only the base takes part (then the config and digest are the base's alone).
    pub fn is_base_only(&self) -> bool {
        self.pools.is_empty() && self.policies.is_empty()
    }

    /// The base's config checked as a file's (upstream's defaults when missing), merged with
    /// the pools' (as [`pool::config_for_node`] merges them), then the policies' destinations
    /// kept (as [`egress_nat::keep_destinations`]).
    pub fn check(&self, options: &Options) -> Checked {
        let base = match &self.base {
            Some(text) => check_text(text, options),
            None => Checked::new(Config::defaults(options), Vec::new()),
        };
        let merged = if self.pools.is_empty() {
            base
        } else {
            let base_label = format!("{}/{}", self.namespace, self.base_name);
            let parts: Vec<merge::Part> = std::iter::once(pool::base_part(&base_label, &base))
                .chain(self.pools.iter().map(|p| {
                    Pool::from_values(&p.name, &p.selector, p.text.as_deref(), options).part
                }))
                .collect();
            merge::merge(Path::new("the node's ConfigMaps"), &parts, options)
        };
        if self.policies.is_empty() {
            return merged;
        }
        let policies: Vec<egress_nat::Policy> = self
            .policies
            .iter()
            .map(|p| {
                let mut policy = egress_nat::read_policy_text(&p.text);
                policy.name.get_or_insert_with(|| p.name.clone());
                policy
            })
            .collect();
        egress_nat::keep_destinations(&merged, &policies, options)
    }

    /// The digest of the composed config (see the module's comment); None for the defaults
    /// alone.
    pub fn digest(&self) -> Option<String> {
        if self.is_base_only() {
            return self.base.as_deref().map(|text| sha256_hex(text.as_bytes()));
        }
        Some(sha256_hex(self.digest_listing().as_bytes()))
    }

    /// The listing whose SHA-256 is the digest of a composed config.
    pub fn digest_listing(&self) -> String {
        let text_hash = |text: Option<&str>| sha256_hex(text.unwrap_or_default().as_bytes());
        let mut listing = format!(
            "{}  configmaps/{}/{}\n",
            text_hash(self.base.as_deref().map(String::as_str)),
            self.namespace,
            self.base_name
        );
        for pool in &self.pools {
            listing.push_str(&format!(
                "{}  configmaps/{}/{}\n",
                text_hash(pool.text.as_deref()),
                self.namespace,
                pool.name
            ));
        }
        for policy in &self.policies {
            listing.push_str(&format!(
                "{}  egressnatpolicies/{}\n",
                sha256_hex(destinations_as_written(&policy.text).as_bytes()),
                policy.name
            ));
        }
        listing
    }

    /// How log lines and the state file name the inputs: the base's provenance, then `+ pools
    /// A, B` and `+ egressnatpolicies C, D` when there are any.
    pub fn provenance(&self, base: &str) -> String {
        let mut text = base.to_string();
        if !self.pools.is_empty() {
            let names: Vec<&str> = self.pools.iter().map(|p| p.name.as_str()).collect();
            text.push_str(&format!(" + pools {}", names.join(", ")));
        }
        if !self.policies.is_empty() {
            let names: Vec<&str> = self.policies.iter().map(|p| p.name.as_str()).collect();
            text.push_str(&format!(" + egressnatpolicies {}", names.join(", ")));
        }
        text
    }
}

/// A policy's `spec.destinations[].cidr` as written, each followed by a newline (what
/// kubectl's jsonpath `{range .spec.destinations[*]}{.cidr}{"\n"}{end}` prints); entries
/// that are not `{cidr: TEXT}` are left out (such a policy rejects the config anyway).
fn destinations_as_written(text: &str) -> String {
    let Ok(stream) = yaml::parse_stream(text, yaml::Documents::First) else {
        return String::new();
    };
    let Some(destinations) = stream
        .documents
        .first()
        .and_then(|o| o.get("spec"))
        .and_then(|s| s.get("destinations"))
    else {
        return String::new();
    };
    let Value::Sequence(entries) = &destinations.value else {
        return String::new();
    };
    entries
        .iter()
        .filter_map(|e| e.get("cidr").and_then(YamlNode::as_str))
        .map(|cidr| format!("{cidr}\n"))
        .collect()
}

#[cfg(test)]
mod tests;
