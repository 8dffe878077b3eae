//! GKE's `EgressNATPolicy` (`networking.gke.io/v1`, cluster-scoped): `spec.action: NoSNAT`
//! and `spec.destinations: [{cidr: 10.0.0.0/8}, ...]`, the destinations for which a pod keeps
//! its own source address. Read from a manifest's tree (or the API's JSON, which is YAML too)
//! into the CIDRs it keeps, with located findings; the widespread malformed shape
//! `destinations: [10.0.0.0/8]` (strings instead of `{cidr: ...}` objects) is an error that
//! shows the right shape.
//!
//! How the policies combine with a config ([`keep_destinations`]): GKE documents
//! EgressNATPolicy for Autopilot clusters, which do not offer the ip-masq-agent ConfigMap, and
//! documents no rule for combining the two (what we could find: several policies each add
//! NoSNAT destinations, GKE's own `default` policy holding the usual non-masquerade ranges). So
//! ipmasq takes the conservative reading: the union. Every policy's destination keeps the pod's
//! source address in addition to the config's `nonMasqueradeCIDRs` (its defaults when it lists
//! none); the policies are not held to the config's `cidrLimit`; a destination the config
//! forces to be masqueraded (`forceMasqueradeCIDRs`) is the contradiction it is in one file,
//! an error; an IPv6 destination needs IPv6 managed.

use super::check::check_across_lists;
use super::cidr::parse_cidr;
use super::yaml::{Value, YamlNode};
use super::{Checked, Code, Config, Diagnostic, Options, Place};
use ipnet::IpNet;
use std::collections::HashSet;

/// The API group of GKE's `EgressNATPolicy`.
pub const API_GROUP: &str = "networking.gke.io";
/// The kind.
pub const KIND: &str = "EgressNATPolicy";
/// The one action GKE's policy has: keep the pod's address.
pub const NO_SNAT: &str = "NoSNAT";

/// The right shape, for hints.
const SHAPE: &str =
    "spec: {action: NoSNAT, destinations: [{cidr: 10.0.0.0/8}, {cidr: 172.16.0.0/12}]}";

/// Whether a manifest object is an EgressNATPolicy (of GKE's API group).
pub fn is_policy(object: &YamlNode) -> bool {
    object.get("kind").and_then(YamlNode::as_str) == Some(KIND)
        && object
            .get("apiVersion")
            .and_then(YamlNode::as_str)
            .is_some_and(|v| v.split('/').next() == Some(API_GROUP))
}

/// One policy as read: its name, the destinations it keeps (with where each was written), and
/// every finding; `destinations` is meaningful only when no finding is an error.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub name: Option<String>,
    pub destinations: Vec<IpNet>,
    pub places: Vec<Place>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Policy {
    /// Whether the policy can be applied: no finding is an error.
    pub fn is_valid(&self) -> bool {
        !self.diagnostics.iter().any(Diagnostic::is_error)
    }

    fn error(&mut self, finding: Diagnostic) {
        self.diagnostics.push(finding);
    }
}

/// Reads one EgressNATPolicy object (see the module's comment for what it must hold).
pub fn read_policy(object: &YamlNode) -> Policy {
    let mut policy = Policy {
        name: object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(YamlNode::as_str)
            .map(str::to_string),
        ..Policy::default()
    };
    let Some(spec) = object.get("spec").filter(|s| s.as_mapping().is_some()) else {
        let at = object.get("spec").map_or(object.location, |s| s.location);
        policy.error(shape_error("an EgressNATPolicy needs a `spec` mapping").at(at));
        return policy;
    };
    read_action(spec, &mut policy);
    match spec.get("destinations") {
        None => policy.error(
            shape_error("`spec.destinations` is missing: a NoSNAT policy lists the destinations that keep the pod's address")
                .at(spec.location),
        ),
        Some(node) => match &node.value {
            Value::Sequence(entries) => {
                for (index, entry) in entries.iter().enumerate() {
                    read_destination(index, entry, &mut policy);
                }
            }
            _ => policy.error(
                shape_error(&format!(
                    "`spec.destinations` must be a list of `{{cidr: ...}}` objects, got {}",
                    node.kind_name()
                ))
                .at(node.location),
            ),
        },
    }
    policy
}

/// Reads one EgressNATPolicy from its text (JSON as the API serves it, or YAML): for the API
/// source, which holds the object's bytes. Text that is not one object is a syntax or shape
/// error of the policy.
pub fn read_policy_text(text: &str) -> Policy {
    match super::yaml::parse_stream(text, super::yaml::Documents::First) {
        Ok(stream) => match stream.documents.first() {
            Some(object) if is_policy(object) => read_policy(object),
            other => Policy {
                diagnostics: vec![shape_error(
                    "the text is not an EgressNATPolicy of networking.gke.io",
                )
                .at_opt(other.map(|o| o.location))],
                ..Policy::default()
            },
        },
        Err(err) => Policy {
            diagnostics: vec![Diagnostic::error(Code::YamlSyntax, err.message).at(err.location)],
            ..Policy::default()
        },
    }
}

fn shape_error(message: &str) -> Diagnostic {
    Diagnostic::error(Code::EgressNatPolicyShape, message).hint(format!("write {SHAPE}"))
}

fn read_action(spec: &YamlNode, policy: &mut Policy) {
    let Some(node) = spec.get("action") else {
        policy.error(
            shape_error(&format!(
                "`spec.action` is missing: GKE's EgressNATPolicy takes `action: {NO_SNAT}`"
            ))
            .at(spec.location),
        );
        return;
    };
    match node.as_str() {
        Some(NO_SNAT) => {}
        Some(other) => policy.error(
            Diagnostic::error(
                Code::EgressNatPolicyAction,
                format!("action {other:?} is not GKE's: an EgressNATPolicy's only action is {NO_SNAT} (keep the pod's address for the destinations)"),
            )
            .at(node.location)
            .hint(format!("write `action: {NO_SNAT}` (Google Distributed Cloud's egress NAT gateway, action SNAT with a gateway, is another API that ipmasq does not implement)")),
        ),
        None => policy.error(
            shape_error(&format!("`spec.action` must be the string {NO_SNAT}, got {}", node.kind_name()))
                .at(node.location),
        ),
    }
}

fn read_destination(index: usize, entry: &YamlNode, policy: &mut Policy) {
    let position = index + 1;
    if let Some(text) = entry.as_str() {
        policy.error(
            Diagnostic::error(
                Code::EgressNatPolicyShape,
                format!("destination {position} is the string {text:?}: each destination is an object `{{cidr: ...}}`, and the API server refuses a list of strings"),
            )
            .at(entry.location)
            .hint(format!("write `- cidr: {text}` (destinations: [{{cidr: {text}}}])")),
        );
        return;
    }
    let Some(fields) = entry.as_mapping() else {
        policy.error(
            shape_error(&format!(
                "destination {position} must be an object `{{cidr: ...}}`, got {}",
                entry.kind_name()
            ))
            .at(entry.location),
        );
        return;
    };
    for (key, _) in fields {
        let name = key.as_str().unwrap_or_default();
        if name != "cidr" {
            policy.diagnostics.push(
                Diagnostic::warning(
                    Code::UnknownKey,
                    format!("destination {position}: key {name:?} is not part of an EgressNATPolicy destination (the API server drops it)"),
                )
                .at(key.location)
                .hint("a destination holds only `cidr`"),
            );
        }
    }
    let Some(node) = entry.get("cidr") else {
        policy.error(
            shape_error(&format!("destination {position} has no `cidr`")).at(entry.location),
        );
        return;
    };
    let Some(text) = node.as_str() else {
        policy.error(
            shape_error(&format!(
                "destination {position}: `cidr` must be a string, got {}",
                node.kind_name()
            ))
            .at(node.location),
        );
        return;
    };
    match parse_cidr(text) {
        Ok(net) => {
            policy.destinations.push(net);
            policy.places.push(Place {
                file: None,
                location: Some(node.location),
            });
        }
        Err(err) => {
            let (code, hint) = crate::config::check::cidr_problem(&err);
            policy.error(
                Diagnostic::error(code, err.to_string())
                    .at(node.location)
                    .hint(hint),
            );
        }
    }
}

/// The config with every valid policy's destinations added to its non-masquerade CIDRs (see
/// the module's comment), policies taken in name order, each place named by its policy. A
/// policy with an error rejects the result, as one invalid file rejects a merge. The findings
/// are the config's, the policies', and those the union makes (a destination forced in the
/// config, an IPv6 destination without IPv6).
pub fn keep_destinations(checked: &Checked, policies: &[Policy], options: &Options) -> Checked {
    let mut diagnostics = checked.diagnostics().to_vec();
    let mut ordered: Vec<&Policy> = policies.iter().collect();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    for policy in &ordered {
        diagnostics.extend(
            policy
                .diagnostics
                .iter()
                .cloned()
                .map(|d| d.in_file(policy_label(policy).into())),
        );
    }
    let Some(config) = checked
        .config()
        .filter(|_| ordered.iter().all(|p| p.is_valid()))
    else {
        return Checked::rejected(diagnostics);
    };
    let mut merged: Config = config.clone();
    let mut seen: HashSet<IpNet> = merged.non_masquerade_cidrs.iter().copied().collect();
    // The defaults have no place: the places stay parallel to the list.
    let listed = merged.non_masquerade_cidrs.len();
    merged
        .provenance
        .non_masquerade
        .resize(listed, Place::default());
    let mut found = Vec::new();
    for policy in &ordered {
        let file: std::sync::Arc<str> = policy_label(policy).into();
        for (net, place) in policy.destinations.iter().zip(&policy.places) {
            let place = Place {
                file: Some(file.clone()),
                location: place.location,
            };
            if net.addr().is_ipv6() && !merged.enable_ipv6 {
                found.push(
                    Diagnostic::error(Code::Ipv6NotEnabled, format!("IPv6 destination {net} while IPv6 is not managed"))
                        .at_opt(place.location)
                        .in_file(file.clone())
                        .hint("set enableIPv6: true in the config (or pass --enable-ipv6), or remove the IPv6 destination"),
                );
            }
            if seen.insert(*net) {
                merged.non_masquerade_cidrs.push(*net);
                merged.provenance.non_masquerade.push(place);
            }
        }
    }
    let mut across = Vec::new();
    check_across_lists(&merged, options, &mut across);
    found.extend(across.into_iter().filter(|d| !diagnostics.contains(d)));
    diagnostics.extend(found);
    Checked::new(merged, diagnostics)
}

/// How findings name a policy.
pub fn policy_label(policy: &Policy) -> String {
    format!(
        "EgressNATPolicy {}",
        policy.name.as_deref().unwrap_or("(unnamed)")
    )
}

#[cfg(test)]
mod tests;
