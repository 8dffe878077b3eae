//! Kubernetes manifests as `validate` input: find the ConfigMaps (in any document, and inside a
//! `kind: List`) and check their `data.config`, the key upstream's DaemonSet mounts as
//! `/etc/config/ip-masq-agent`, reporting positions inside the manifest itself.

use super::egress_nat::{self, Policy};
use super::merge::{self, Part};
use super::pool::{self, Pool, NODE_SELECTOR_ANNOTATION};
use super::yaml::{Budget, Stream};
use super::yaml::{Documents, Location, Style, Value, YamlError, YamlNode};
use super::{check_text_within, Checked, Code, Config, Diagnostic, Options};
use std::path::Path;

/// The ConfigMap data key that the DaemonSet mounts as the agent's config file.
pub const CONFIG_KEY: &str = "config";
/// The ConfigMap name upstream's manifest uses.
pub const CONFIGMAP_NAME: &str = "ip-masq-agent";

/// Which ConfigMaps of a manifest are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every ConfigMap with a `config` or `ip-masq*` key: a file named on the command line (or
    /// stdin) is said to hold the agent's ConfigMap, whatever its name; but a stream that
    /// holds one of the agent's own ([`is_agents_configmap`]) is judged on those alone, as
    /// [`Scope::AgentsOnly`] (a `kubectl kustomize` stream holds other applications' too).
    Named,
    /// Only the agent's own ([`is_agents_configmap`]): a directory of a repository holds other
    /// applications' ConfigMaps too, which are none of ours to judge.
    AgentsOnly,
}

/// Whether a ConfigMap is the agent's: named `ip-masq*` (upstream's `ip-masq-agent`, the
/// default of `agent --configmap`; a node pool's `ip-masq-agent-*`; ip-masq-agent-v2's), or
/// holding an `ip-masq*` key (a `--config-dir` part), or a `data.config` whose text is a
/// mapping with a config key or one close to it (a typo is still ours).
pub fn is_agents_configmap(object: &YamlNode) -> bool {
    let named = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(YamlNode::as_str)
        .is_some_and(|name| name.starts_with(merge::PREFIX));
    let part_key = ["data", "binaryData"].iter().any(|section| {
        object
            .get(section)
            .and_then(YamlNode::as_mapping)
            .is_some_and(|entries| {
                entries
                    .iter()
                    .any(|(k, _)| k.as_str().is_some_and(|k| k.starts_with(merge::PREFIX)))
            })
    });
    let config_text = object
        .get("data")
        .and_then(|d| d.get(CONFIG_KEY))
        .and_then(YamlNode::as_str);
    named
        || part_key
        || config_text.is_some_and(|text| {
            super::yaml::parse_stream(text, Documents::First)
                .ok()
                .and_then(|s| s.documents.into_iter().next())
                .is_some_and(|doc| super::names_a_config_key(&doc))
        })
}

/// Whether a document is a Kubernetes object rather than an agent config.
pub fn is_manifest(doc: &YamlNode) -> bool {
    doc.get("apiVersion").and_then(YamlNode::as_str).is_some()
        && doc.get("kind").and_then(YamlNode::as_str).is_some()
}

/// How `validate` reads a file that may be a manifest: every document of a manifest (its
/// ConfigMaps may be in any of them), only the first of a config file (as upstream).
pub const MANIFEST_OR_CONFIG: Documents = Documents::AllWhen(is_manifest);

/// Whether a YAML stream is a Kubernetes manifest: its first document that holds anything is
/// an object with `apiVersion` and `kind`. Empty documents before it are skipped, as
/// `helm template` starts with one (`---` and a `# Source:` comment).
pub fn is_manifest_stream(documents: &[YamlNode]) -> bool {
    documents
        .iter()
        .find(|d| !d.is_null())
        .is_some_and(is_manifest)
}

/// The error for a manifest whose later document could not be read (a syntax error, or the
/// file's parse budget spent): what it held, perhaps a ConfigMap, is unknown.
pub fn unreadable_document(err: &YamlError) -> Diagnostic {
    Diagnostic::error(
        Code::YamlSyntax,
        format!(
            "a later document of this manifest cannot be read, so a ConfigMap there cannot be checked: {}",
            err.message
        ),
    )
    .at(err.location)
}

/// One ConfigMap found in a manifest, with the result of checking its config; or, for the
/// `ip-masq*` keys merged as `--config-dir` merges them, the merge (`namespace` and `name`
/// unset, `merged` naming every key that took part).
#[derive(Debug)]
pub struct ConfigMapResult {
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// 1-based index of the YAML document it was found in.
    pub document: usize,
    pub checked: Checked,
    /// For a merge: where each merged key came from, in merge order.
    pub merged: Vec<MergedKey>,
}

/// One key of a merge: its ConfigMap (none for a plain `ip-masq*` file of `validate --merged
/// DIR`), the key, and the input file when a run merges several.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MergedKey {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub key: String,
    pub document: usize,
}

/// Checks every ConfigMap of a manifest stream: its `data.config` (upstream's DaemonSet
/// mounts it as the config file; a node pool's is merged after its base, see [`check_pool`]),
/// and its keys starting with `ip-masq` (ip-masq-agent-v2 projects each as one file of a
/// `--config-dir`), which are merged as `--config-dir` merges them, across every ConfigMap of the stream. `binaryData` keys count the same (kubelet
/// mounts them alike). A ConfigMap named `ip-masq-agent` with none of these is an error.
/// Diagnostics are located in the manifest's own text.
pub fn check_manifest(
    source: &str,
    stream: &Stream,
    options: &Options,
) -> Result<Vec<ConfigMapResult>, Diagnostic> {
    let mut manifest = read_manifest(source, stream, options, Scope::Named)?;
    if !manifest.parts.is_empty() {
        manifest
            .config_maps
            .push(merge_parts(&manifest.parts, options));
    }
    let bases: Vec<PoolBase> = manifest
        .config_maps
        .iter()
        .filter(|cm| cm.merged.is_empty() && cm.name.as_deref() == Some(CONFIGMAP_NAME))
        .map(|cm| PoolBase {
            namespace: cm.namespace.clone(),
            checked: cm.checked.clone(),
        })
        .collect();
    for found in &manifest.pools {
        let result = check_pool(found, &bases, options);
        manifest.config_maps.push(ConfigMapResult {
            namespace: result.namespace,
            name: Some(result.name),
            document: result.document,
            checked: result.checked,
            merged: Vec::new(),
        });
    }
    Ok(manifest.config_maps)
}

/// What a manifest holds: the `data.config` of each ConfigMap, checked on its own, and the
/// `ip-masq*` keys, checked as parts of a `--config-dir` merge that the caller makes (a
/// validate run merges those of all its inputs, as ip-masq-agent-v2 projects them into one
/// directory).
pub struct Manifest {
    pub config_maps: Vec<ConfigMapResult>,
    pub parts: Vec<ManifestPart>,
    /// The node pools (`ip-masq-agent-*` ConfigMaps with `ipmasq.io/node-selector`), checked
    /// on their own; [`check_pool`] merges each after its base.
    pub pools: Vec<ManifestPool>,
    /// GKE's EgressNATPolicy objects.
    pub policies: Vec<ManifestPolicy>,
}

/// A node pool found in a manifest: where it is, the pool, and the findings about its
/// annotation (an invalid selector, a selector that is no string).
#[derive(Clone, Debug)]
pub struct ManifestPool {
    pub namespace: Option<String>,
    pub document: usize,
    pub pool: Pool,
    pub findings: Vec<Diagnostic>,
}

/// An EgressNATPolicy found in a manifest.
#[derive(Clone, Debug)]
pub struct ManifestPolicy {
    pub document: usize,
    pub policy: Policy,
}

/// A pool checked as a node it selects would read it: merged after its base (the ConfigMap
/// `ip-masq-agent` of its namespace, or the defaults when the run has no valid one), with the base's
/// own findings left to the base's result.
#[derive(Debug)]
pub struct PoolResult {
    pub namespace: Option<String>,
    pub name: String,
    pub document: usize,
    pub selector: String,
    /// How the base is named (`kube-system/ip-masq-agent`), or None for the defaults.
    pub base: Option<String>,
    pub checked: Checked,
}

/// A base ConfigMap (`ip-masq-agent`, key `config`) of a run, for its pools.
#[derive(Clone, Debug)]
pub struct PoolBase {
    pub namespace: Option<String>,
    pub checked: Checked,
}

impl PoolBase {
    /// Whether this base is the one of a pool in `namespace` (an unnamed namespace is any).
    fn serves(&self, namespace: Option<&str>) -> bool {
        match (self.namespace.as_deref(), namespace) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }

    fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{CONFIGMAP_NAME}"),
            None => CONFIGMAP_NAME.to_string(),
        }
    }
}

/// Checks a pool against the first valid base that serves its namespace (see [`PoolResult`]).
pub fn check_pool(found: &ManifestPool, bases: &[PoolBase], options: &Options) -> PoolResult {
    let base = bases
        .iter()
        .find(|b| b.serves(found.namespace.as_deref()) && b.checked.config().is_some());
    let base_name = base.map(PoolBase::label);
    let base_checked = base.map_or_else(
        || Checked::new(Config::defaults(options), Vec::new()),
        |b| b.checked.clone(),
    );
    let base_part = pool::base_part(
        base_name.as_deref().unwrap_or("(the defaults)"),
        &base_checked,
    );
    let parts = [base_part.clone(), found.pool.part.clone()];
    let mut checked = merge::merge(Path::new("the node's ConfigMaps"), &parts, options);
    let own = found.pool.part.name.clone();
    checked.edit_diagnostics(|d| {
        d.retain(|d| {
            d.file.as_deref() != Some(&*base_part.name)
                || d.code == Code::ForcedAndKept
                || d.code == Code::OutputAddressConflict
        });
        for finding in d.iter_mut().filter(|f| f.file.as_deref() == Some(&*own)) {
            finding.file = None;
        }
        d.extend(found.findings.iter().cloned());
    });
    checked.edit_places(|place| {
        if place.file.as_deref() == Some(&*own) {
            place.file = None;
        }
    });
    PoolResult {
        namespace: found.namespace.clone(),
        name: found.pool.name.clone(),
        document: found.document,
        selector: found.pool.selector_text.clone(),
        base: base_name,
        checked,
    }
}

/// One `ip-masq*` key of a ConfigMap, checked as one file of a merge.
#[derive(Clone)]
pub struct ManifestPart {
    /// Where the key is (its `key` is the file name it is mounted as, which orders the merge).
    pub source: MergedKey,
    pub part: Part,
}

/// Reads every ConfigMap of a manifest stream (see [`check_manifest`]) without merging the
/// `ip-masq*` keys, and its node pools and EgressNATPolicy objects; an error when it holds
/// none of these. Each config is parsed within what the manifest's tree left of the file's
/// budget.
pub fn read_manifest(
    source: &str,
    stream: &Stream,
    options: &Options,
    scope: Scope,
) -> Result<Manifest, Diagnostic> {
    let documents = &stream.documents[..];
    // A stream that holds one of the agent's own ConfigMaps (`kubectl kustomize` of an
    // overlay holds other applications' too) is judged on the agent's alone, as a directory.
    let scope = if scope == Scope::Named && holds_agents_configmap(documents) {
        Scope::AgentsOnly
    } else {
        scope
    };
    let mut manifest = Manifest {
        config_maps: Vec::new(),
        parts: Vec::new(),
        pools: Vec::new(),
        policies: Vec::new(),
    };
    for (index, doc) in documents.iter().enumerate() {
        let mut objects = Vec::new();
        collect_objects(doc, &mut objects);
        for object in objects {
            if egress_nat::is_policy(object) {
                manifest.policies.push(ManifestPolicy {
                    document: index + 1,
                    policy: egress_nat::read_policy(object),
                });
            } else if object.get("kind").and_then(YamlNode::as_str) == Some("ConfigMap")
                && (scope == Scope::Named || is_agents_configmap(object))
            {
                let found = ConfigMapFound {
                    source,
                    budget: stream.left,
                    object,
                    document: index + 1,
                };
                found.read_into(options, &mut manifest);
            }
        }
    }
    if manifest.config_maps.is_empty()
        && manifest.parts.is_empty()
        && manifest.pools.is_empty()
        && manifest.policies.is_empty()
    {
        return Err(Diagnostic::error(
            Code::NoConfigMap,
            format!(
                "this Kubernetes manifest holds no ConfigMap with `data.{CONFIG_KEY}` or `ip-masq*` keys (nor one named {CONFIGMAP_NAME})"
            ),
        )
        .at_opt(documents.first().map(|d| d.location))
        .hint("pass the agent's config file, or the manifest holding its ConfigMap"));
    }
    Ok(manifest)
}

/// Whether any document of a stream holds one of the agent's own ConfigMaps
/// ([`is_agents_configmap`]).
fn holds_agents_configmap(documents: &[YamlNode]) -> bool {
    documents.iter().any(|doc| {
        let mut objects = Vec::new();
        collect_objects(doc, &mut objects);
        objects.into_iter().any(|object| {
            object.get("kind").and_then(YamlNode::as_str) == Some("ConfigMap")
                && is_agents_configmap(object)
        })
    })
}

/// One ConfigMap of a manifest, being read.
struct ConfigMapFound<'a> {
    source: &'a str,
    budget: Budget,
    object: &'a YamlNode,
    document: usize,
}

impl ConfigMapFound<'_> {
    fn field(&self, key: &str) -> Option<String> {
        self.object
            .get("metadata")
            .and_then(|m| m.get(key))
            .and_then(YamlNode::as_str)
            .map(str::to_string)
    }

    fn result(&self, checked: Checked) -> ConfigMapResult {
        ConfigMapResult {
            namespace: self.field("namespace"),
            name: self.field("name"),
            document: self.document,
            checked,
            merged: Vec::new(),
        }
    }

    /// Its `config` key (a pool's, or one checked on its own), its `ip-masq*` keys (parts of
    /// the run's merge), and the findings about its keys and its node selector.
    fn read_into(&self, options: &Options, manifest: &mut Manifest) {
        let name = self.field("name");
        let keys = config_keys(self.object);
        let twice = keys_in_both_sections(self.object);
        if !twice.is_empty() && (!keys.is_empty() || name.as_deref() == Some(CONFIGMAP_NAME)) {
            manifest
                .config_maps
                .push(self.result(Checked::rejected(twice)));
        }
        let selector = self
            .object
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(NODE_SELECTOR_ANNOTATION));
        let next_name = super::rollout::next_name(CONFIGMAP_NAME);
        let is_next = name.as_deref() == Some(next_name.as_str());
        let pool_name = name
            .as_deref()
            .filter(|n| pool::is_pool_name(n) && !is_next);
        let mut rollout_findings = if is_next {
            rollout_findings(self.object)
        } else {
            Vec::new()
        };
        if let (Some(selector), Some(pool_name)) = (selector, pool_name) {
            manifest
                .pools
                .push(self.pool(pool_name, selector, &keys, options));
        }
        let ignored = selector
            .filter(|_| pool_name.is_none())
            .map(|node| ignored_selector(node, name.as_deref()));
        let mut config_seen = false;
        for key in keys.iter().filter(|k| !in_both_sections(&keys, &k.name)) {
            if key.name == CONFIG_KEY && pool_name.is_some() && selector.is_some() {
                continue;
            }
            let mut checked = key.check(self.source, options, self.budget, false);
            if key.name == CONFIG_KEY {
                config_seen = true;
                if let Some(finding) = &ignored {
                    checked.edit_diagnostics(|d| d.push(finding.clone()));
                }
                let findings = std::mem::take(&mut rollout_findings);
                if !findings.is_empty() {
                    checked.edit_diagnostics(|d| d.extend(findings));
                }
                manifest.config_maps.push(self.result(checked));
            } else {
                manifest.parts.push(self.part(key, checked));
            }
        }
        if is_next && !config_seen {
            // A rollout without its `config` key is no rollout: the agents keep the base.
            rollout_findings.push(
                Diagnostic::error(
                    Code::RolloutAnnotation,
                    format!("ConfigMap {next_name} has no `data.{CONFIG_KEY}` key: the agents take it for no rollout and keep the base"),
                )
                .at(self.object.location)
                .hint(format!("put the next config under `data.{CONFIG_KEY}`")),
            );
        }
        if !rollout_findings.is_empty() {
            manifest
                .config_maps
                .push(self.result(Checked::rejected(rollout_findings)));
        }
        if keys.is_empty() && name.as_deref() == Some(CONFIGMAP_NAME) {
            let mut checked = without_config(self.object, name.as_deref());
            if let Some(finding) = &ignored {
                checked.edit_diagnostics(|d| d.push(finding.clone()));
            }
            manifest.config_maps.push(self.result(checked));
        } else if !config_seen && name.as_deref() == Some(CONFIGMAP_NAME) {
            // Only `ip-masq*` keys: the annotation's warning goes with the first of them.
            if let (Some(finding), Some(part)) = (&ignored, manifest.parts.last_mut()) {
                part.part
                    .checked
                    .edit_diagnostics(|d| d.push(finding.clone()));
            }
        }
    }

    fn part(&self, key: &ConfigKey<'_>, checked: Checked) -> ManifestPart {
        let name = self.field("name");
        let label = format!(
            "ConfigMap {}/{}",
            name.as_deref().unwrap_or("(unnamed)"),
            key.name
        );
        ManifestPart {
            source: MergedKey {
                file: None,
                namespace: self.field("namespace"),
                name,
                key: key.name.clone(),
                document: self.document,
            },
            part: Part {
                name: label.into(),
                checked,
            },
        }
    }

    /// A pool: its `config` key checked as one part of a merge, its selector parsed.
    fn pool(
        &self,
        name: &str,
        selector: &YamlNode,
        keys: &[ConfigKey<'_>],
        options: &Options,
    ) -> ManifestPool {
        let config = keys
            .iter()
            .find(|k| k.name == CONFIG_KEY && !in_both_sections(keys, &k.name));
        let checked = match config {
            Some(key) => key.check(self.source, options, self.budget, true),
            None => Checked::rejected(vec![Diagnostic::error(
                Code::ConfigMapWithoutConfig,
                format!("node pool ConfigMap {name} has no `data.{CONFIG_KEY}` key: a pool's config is that key"),
            )
            .at(self.object.location)
            .hint(format!("add `data.{CONFIG_KEY}` holding the config this pool's nodes merge after the base"))]),
        };
        let text = selector.as_str().unwrap_or_default();
        let pool = Pool::new(name, text, checked);
        let mut findings = Vec::new();
        if selector.as_str().is_none() {
            findings.push(
                Diagnostic::error(
                    Code::WrongType,
                    format!("annotation {NODE_SELECTOR_ANNOTATION} must be a string (a label selector), got {}", selector.kind_name()),
                )
                .at(selector.location)
                .hint("quote it: an annotation's value is always a string"),
            );
        } else if let Err(err) = &pool.selector {
            findings.push(
                Diagnostic::error(
                    Code::InvalidNodeSelector,
                    format!("node selector {text:?} of ConfigMap {name} is not a Kubernetes label selector: {err}"),
                )
                .at(selector.location)
                .hint("write it as kubectl -l takes it, e.g. `pool=gpu`, `pool in (gpu,tpu),!spot` or `topology.kubernetes.io/zone!=a`"),
            );
        }
        ManifestPool {
            namespace: self.field("namespace"),
            document: self.document,
            pool,
            findings,
        }
    }
}

/// The findings on the `ipmasq.io/rollout-*` annotations of the next config's ConfigMap, each
/// at its annotation (a missing one at the ConfigMap's metadata).
fn rollout_findings(object: &YamlNode) -> Vec<Diagnostic> {
    let metadata = object.get("metadata");
    let annotations = metadata.and_then(|m| m.get("annotations"));
    let mut texts = std::collections::BTreeMap::new();
    let mut findings = Vec::new();
    let mut located = std::collections::BTreeMap::new();
    for (key, value) in annotations
        .and_then(YamlNode::as_mapping)
        .unwrap_or_default()
    {
        let Some(key) = key.as_str().filter(|k| k.starts_with("ipmasq.io/rollout-")) else {
            continue;
        };
        located.insert(key.to_string(), value.location);
        match value.as_str() {
            Some(text) => {
                texts.insert(key.to_string(), text.to_string());
            }
            None => findings.push(
                Diagnostic::error(
                    Code::RolloutAnnotation,
                    format!(
                        "annotation {key} must be a string, got {}",
                        value.kind_name()
                    ),
                )
                .at(value.location),
            ),
        }
    }
    if !findings.is_empty() {
        return findings;
    }
    let Err(errors) = super::rollout::Rollout::from_annotations(&texts) else {
        return findings;
    };
    let fallback = annotations.or(metadata).map(|node| node.location);
    errors
        .into_iter()
        .map(|error| {
            let finding = Diagnostic::error(Code::RolloutAnnotation, format!("annotation {error}"));
            match located.get(error.annotation).copied().or(fallback) {
                Some(location) => finding.at(location),
                None => finding,
            }
        })
        .collect()
}

/// The warning for `ipmasq.io/node-selector` on a ConfigMap that cannot be a pool.
fn ignored_selector(node: &YamlNode, name: Option<&str>) -> Diagnostic {
    let name = name.unwrap_or("(unnamed)");
    let why = if name == CONFIGMAP_NAME {
        "the base ConfigMap applies to every node"
    } else if name == super::rollout::next_name(CONFIGMAP_NAME) {
        "the next config of a rollout is no pool: ipmasq.io/rollout-node-selector chooses its nodes"
    } else {
        "only a ConfigMap named ip-masq-agent-* is a node pool"
    };
    Diagnostic::warning(
        Code::IgnoredNodeSelector,
        format!("annotation {NODE_SELECTOR_ANNOTATION} on ConfigMap {name} is ignored: {why}"),
    )
    .at(node.location)
    .hint("put the pool's config in a ConfigMap named ip-masq-agent-<pool> with this annotation")
}

/// The `ip-masq*` keys of one or more manifests merged as `--config-dir` merges the files a
/// projected volume makes of them: in key (file name) order.
pub fn merge_parts(parts: &[ManifestPart], options: &Options) -> ConfigMapResult {
    let mut ordered: Vec<&ManifestPart> = parts.iter().collect();
    ordered.sort_by(|a, b| a.source.key.cmp(&b.source.key));
    let merged: Vec<Part> = ordered.iter().map(|p| p.part.clone()).collect();
    let mut checked = merge::merge(Path::new("the manifest"), &merged, options);
    checked.edit_diagnostics(|d| d.retain(|d| d.code != Code::NoConfigFiles));
    ConfigMapResult {
        namespace: None,
        name: None,
        document: parts.iter().map(|p| p.source.document).min().unwrap_or(1),
        checked,
        merged: ordered.iter().map(|p| p.source.clone()).collect(),
    }
}

/// Whether `name` is a key of both `data` and `binaryData`.
fn in_both_sections(keys: &[ConfigKey<'_>], name: &str) -> bool {
    keys.iter().any(|k| k.name == name && k.binary)
        && keys.iter().any(|k| k.name == name && !k.binary)
}

/// An error for each key a ConfigMap has in both `data` and `binaryData`: the API server
/// refuses such a ConfigMap, so it never reaches a node.
fn keys_in_both_sections(object: &YamlNode) -> Vec<Diagnostic> {
    let section = |name: &str| object.get(name).and_then(YamlNode::as_mapping);
    let (Some(data), Some(binary)) = (section("data"), section("binaryData")) else {
        return Vec::new();
    };
    binary
        .iter()
        .filter_map(|(key, _)| key.as_str().map(|name| (key, name)))
        .filter(|(_, name)| data.iter().any(|(k, _)| k.as_str() == Some(*name)))
        .map(|(key, name)| {
            Diagnostic::error(
                Code::ConfigMapKeyTwice,
                format!(
                    "key `{name}` is in both data and binaryData: the API server refuses this ConfigMap (a key may be in only one of them)"
                ),
            )
            .at(key.location)
            .hint(format!("keep `{name}` in data or in binaryData, not both"))
        })
        .collect()
}

/// A ConfigMap key that holds a config: `config`, or one starting with `ip-masq`.
struct ConfigKey<'a> {
    name: String,
    key: &'a YamlNode,
    value: &'a YamlNode,
    /// From `binaryData`: base64 of the config.
    binary: bool,
}

impl ConfigKey<'_> {
    /// Checks the key's config: an `ip-masq*` key as one file of a `--config-dir` merge (with
    /// an info saying so), a pool's `config` as one part of a merge too.
    fn check(&self, source: &str, options: &Options, budget: Budget, pool: bool) -> Checked {
        let dir_part = self.name != CONFIG_KEY;
        let options = Options {
            merging: dir_part || pool,
            ..*options
        };
        let section = if self.binary { "binaryData" } else { "data" };
        let mut checked = if self.binary {
            check_binary(self.value, &self.name, &options, budget)
        } else {
            check_embedded(source, self.value, &self.name, &options, budget)
        };
        if dir_part {
            checked.edit_diagnostics(|d| {
                d.push(
                    Diagnostic::info(
                        Code::ConfigDirKey,
                        format!(
                            "`{section}.{}` is read as one file of a --config-dir merge (ip-masq-agent-v2, `ipmasq agent --config-dir`)",
                            self.name
                        ),
                    )
                    .at(self.key.location)
                    .hint(format!("upstream's v1 DaemonSet mounts only `data.{CONFIG_KEY}`")),
                )
            });
        }
        checked
    }
}

/// The keys of a ConfigMap that hold a config, from `data` and `binaryData`.
fn config_keys(object: &YamlNode) -> Vec<ConfigKey<'_>> {
    let mut keys = Vec::new();
    for (section, binary) in [("data", false), ("binaryData", true)] {
        let Some(entries) = object.get(section).and_then(YamlNode::as_mapping) else {
            continue;
        };
        for (key, value) in entries {
            let Some(name) = key.as_str() else { continue };
            if name == CONFIG_KEY || name.starts_with(merge::PREFIX) {
                keys.push(ConfigKey {
                    name: name.to_string(),
                    key,
                    value,
                    binary,
                });
            }
        }
    }
    keys
}

/// The finding for a ConfigMap named for the agent that holds no config key.
fn without_config(object: &YamlNode, name: Option<&str>) -> Checked {
    let keys: Vec<String> = object
        .get("data")
        .and_then(YamlNode::as_mapping)
        .map(|m| {
            m.iter()
                .filter_map(|(k, _)| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let hint = match keys.as_slice() {
        [] => format!("add `data.{CONFIG_KEY}` holding the agent's YAML config"),
        [only] => format!("rename data key `{only}` to `{CONFIG_KEY}`"),
        _ => format!(
            "the agent reads only `data.{CONFIG_KEY}`; found {}",
            keys.join(", ")
        ),
    };
    Checked::rejected(vec![Diagnostic::error(
        Code::ConfigMapWithoutConfig,
        format!(
            "ConfigMap {} has no `data.{CONFIG_KEY}` key, which the DaemonSet mounts as the agent's config",
            name.unwrap_or("(unnamed)")
        ),
    )
    .at(object.location)
    .hint(hint)])
}

/// A `binaryData` key: base64 of the config text, checked, its findings placed at the value
/// (with where inside the decoded text).
fn check_binary(value: &YamlNode, key: &str, options: &Options, budget: Budget) -> Checked {
    let decoded = value
        .as_str()
        .and_then(base64_decode)
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let Some(text) = decoded else {
        return Checked::rejected(vec![Diagnostic::error(
            Code::WrongType,
            format!("`binaryData.{key}` must be base64 of UTF-8 config text"),
        )
        .at(value.location)
        .hint(format!(
            "encode it with `base64 -w0`, or move it to `data.{key}`"
        ))]);
    };
    let mut checked = check_text_within(&text, options, budget);
    let inner_name = format!("binaryData.{key}, decoded");
    checked.edit_diagnostics(|diagnostics| {
        for diag in diagnostics {
            diag.relocate(&inner_name, |_| (value.location, false));
            diag.location = Some(value.location);
        }
    });
    checked.edit_places(|place| place.location = place.location.map(|_| value.location));
    checked
}

/// Standard base64 (RFC 4648, with or without padding; whitespace ignored).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The objects of a document: itself, or the items of a `kind: List` (or `ConfigMapList`...).
fn collect_objects<'a>(doc: &'a YamlNode, out: &mut Vec<&'a YamlNode>) {
    if doc
        .get("kind")
        .and_then(YamlNode::as_str)
        .is_some_and(|k| k.ends_with("List"))
    {
        if let Some(Value::Sequence(items)) = doc.get("items").map(|n| &n.value) {
            for item in items {
                collect_objects(item, out);
            }
        }
        return;
    }
    out.push(doc);
}

/// Checks the embedded config text and maps its positions back into the manifest.
fn check_embedded(
    source: &str,
    value: &YamlNode,
    key: &str,
    options: &Options,
    budget: Budget,
) -> Checked {
    let Some(text) = value.as_str() else {
        return Checked::rejected(vec![Diagnostic::error(
            Code::WrongType,
            format!(
                "`data.{key}` must be a string holding the agent's YAML config, got {}",
                value.kind_name()
            ),
        )
        .at(value.location)
        .hint(format!(
            "write it as a block scalar: `{CONFIG_KEY}: |` followed by the indented config"
        ))]);
    };
    let mut checked = check_text_within(text, options, budget);
    let map = PositionMap::for_scalar(value);
    let inner_name = format!("data.{key}");
    checked.edit_diagnostics(|diagnostics| {
        for diag in diagnostics {
            if diag.location.is_none() {
                diag.location = Some(value.location);
            } else {
                diag.relocate(&inner_name, |inner| map.to_outer(source, inner));
            }
        }
    });
    checked.edit_places(|place| {
        place.location = place.location.map(|inner| map.to_outer(source, inner).0);
    });
    checked
}

/// How positions inside an embedded scalar relate to the manifest's text.
enum PositionMap {
    /// A literal block (`|`): inner line n is outer line `first_line + n - 1`, shifted right
    /// by `indent` columns.
    Literal { first_line: usize, indent: usize },
    /// Any other style: positions cannot be mapped exactly; use the scalar's own position.
    Whole(Location),
}

impl PositionMap {
    fn for_scalar(value: &YamlNode) -> Self {
        let Some(scalar) = value.as_scalar() else {
            return PositionMap::Whole(value.location);
        };
        if scalar.style != Style::Literal {
            return PositionMap::Whole(value.location);
        }
        // The parser places a literal block at its first non-blank content line, at the
        // block's indentation; leading blank lines are part of the content.
        let leading_blank_lines = scalar.text.chars().take_while(|&c| c == '\n').count();
        let first_line = value.location.line.saturating_sub(leading_blank_lines);
        let indent = value.location.column.saturating_sub(1);
        PositionMap::Literal { first_line, indent }
    }

    /// The outer location, and whether it is exact.
    fn to_outer(&self, source: &str, inner: Location) -> (Location, bool) {
        match *self {
            PositionMap::Whole(location) => (location, false),
            PositionMap::Literal { first_line, indent } => {
                let line = first_line + inner.line - 1;
                let column = inner.column + indent;
                let offset = offset_of(source, line, column);
                let width = inner.end_offset.saturating_sub(inner.offset);
                (
                    Location {
                        line,
                        column,
                        offset,
                        end_offset: offset + width,
                    },
                    true,
                )
            }
        }
    }
}

/// Byte offset of a 1-based line and column (columns in characters).
fn offset_of(source: &str, line: usize, column: usize) -> usize {
    let mut start = 0;
    for (i, l) in source.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return start
                + l.char_indices()
                    .nth(column.saturating_sub(1))
                    .map_or(l.len(), |(b, _)| b);
        }
        start += l.len();
    }
    source.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml::parse_stream;

    fn run(src: &str) -> Result<Vec<ConfigMapResult>, Diagnostic> {
        let stream = parse_stream(src, MANIFEST_OR_CONFIG).unwrap();
        check_manifest(src, &stream, &Options::default())
    }

    #[test]
    fn literal_block_positions_map_into_the_manifest() {
        let src = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\n  namespace: kube-system\ndata:\n  config: |\n    nonMasqueradeCIDRs:\n      - 10.1.2.3/16\n";
        let results = run(src).unwrap();
        assert_eq!(results.len(), 1);
        let r = &results[0];
        assert_eq!(r.name.as_deref(), Some("ip-masq-agent"));
        assert_eq!(r.namespace.as_deref(), Some("kube-system"));
        let d = &r.checked.diagnostics[0];
        assert_eq!(d.code, Code::CidrNotAligned);
        let l = d.location.unwrap();
        assert_eq!((l.line, l.column), (9, 9));
        assert_eq!(&src[l.offset..l.end_offset], "10.1.2.3/16");
    }

    #[test]
    fn finds_configmaps_in_lists_and_later_documents() {
        let src = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data:\n    config: \"masqLinkLocal: true\\n\"\n";
        let results = run(src).unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].document, 2);
        assert!(results[0].checked.config.as_ref().unwrap().masq_link_local);
    }

    #[test]
    fn non_literal_positions_point_at_the_value_and_say_where_inside() {
        let src = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent}\ndata:\n  config: \"resyncInterval: 1d\\n\"\n";
        let results = run(src).unwrap();
        let d = &results[0].checked.diagnostics[0];
        assert_eq!(d.location.unwrap().line, 5);
        assert!(
            d.message.ends_with("(line 1, column 17 of data.config)"),
            "{}",
            d.message
        );
    }

    #[test]
    fn configmap_named_for_the_agent_without_config_key_is_an_error() {
        let src = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent}\ndata:\n  agent-config: |\n    cidrLimit: 3\n";
        let results = run(src).unwrap();
        let d = &results[0].checked.diagnostics[0];
        assert_eq!(d.code, Code::ConfigMapWithoutConfig);
        assert_eq!(
            d.hint.as_deref(),
            Some("rename data key `agent-config` to `config`")
        );
    }

    /// ip-masq-agent-v2's ConfigMaps: every `ip-masq*` key of every ConfigMap in the stream is
    /// one file of a `--config-dir` merge, checked as the merge checks it, found wherever it is.
    #[test]
    fn v2_configmaps_merge_as_the_config_dir_does() {
        let cloud = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent-cloud}\ndata:\n  ip-masq-agent-cloud: |\n    nonMasqueradeCIDRs: [10.0.0.0/8]\n";
        let user = |cidr: &str| {
            format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ip-masq-agent-user}}\ndata:\n  ip-masq-agent-user: |\n    nonMasqueradeCIDRs:\n      - {cidr}\n")
        };
        let src = format!("{cloud}{}", user("100.64.0.0/10"));
        let results = run(&src).unwrap();
        assert_eq!(results.len(), 1, "one merged result");
        let merged = results[0].checked.config().expect("valid");
        assert_eq!(
            merged.non_masquerade_cidrs,
            [
                "10.0.0.0/8".parse().unwrap(),
                "100.64.0.0/10".parse().unwrap()
            ]
        );
        assert!(results[0]
            .checked
            .diagnostics()
            .iter()
            .any(|d| d.code == Code::ConfigDirKey));
        // An invalid CIDR in the user's ConfigMap rejects the merge, located in the manifest.
        let src = format!("{cloud}{}", user("10.1.2.3/16"));
        let results = run(&src).unwrap();
        let error = results[0].checked.errors().next().expect("an error");
        assert_eq!(error.code, Code::CidrNotAligned);
        let at = error.location.unwrap();
        assert_eq!(&src[at.offset..at.end_offset], "10.1.2.3/16");
        assert!(results[0].checked.config().is_none());
    }

    #[test]
    fn binary_data_is_read_as_kubelet_mounts_it() {
        // base64 of "nonMasqueradeCIDRs: [10.0.0.0/8]\n"
        let encoded = "bm9uTWFzcXVlcmFkZUNJRFJzOiBbMTAuMC4wLjAvOF0K";
        let src = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ip-masq-agent}}\nbinaryData:\n  config: {encoded}\n");
        let results = run(&src).unwrap();
        let config = results[0].checked.config().expect("valid");
        assert_eq!(config.non_masquerade_cidrs, ["10.0.0.0/8".parse().unwrap()]);
        let src = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent}\nbinaryData:\n  config: '%%%'\n";
        let results = run(src).unwrap();
        assert_eq!(
            results[0].checked.errors().next().unwrap().code,
            Code::WrongType
        );
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(base64_decode("aGk").unwrap(), b"hi");
    }

    /// The API server refuses a ConfigMap with a key in both `data` and `binaryData`: an
    /// error naming the key, at the `binaryData` one, for any key of the agent's ConfigMaps.
    #[test]
    fn a_key_in_data_and_binary_data_is_an_error() {
        let src = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent, namespace: kube-system}\ndata:\n  config: \"cidrLimit: 3\\n\"\n  notes: x\nbinaryData:\n  notes: eA==\n";
        let results = run(src).unwrap();
        let refused = results
            .iter()
            .find(|r| r.checked.config().is_none())
            .expect("a refused ConfigMap");
        assert_eq!(refused.name.as_deref(), Some("ip-masq-agent"));
        assert_eq!(refused.namespace.as_deref(), Some("kube-system"));
        let d = &refused.checked.diagnostics()[0];
        assert_eq!(d.code, Code::ConfigMapKeyTwice);
        assert!(d.message.contains("`notes`"), "{}", d.message);
        assert_eq!(d.location.unwrap().line, 8);
        // Another application's ConfigMap is not ours to judge.
        let other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata:\n  notes: x\nbinaryData:\n  notes: eA==\n";
        assert_eq!(run(other).unwrap_err().code, Code::NoConfigMap);
    }

    /// A pool's `config` is merged after its base and reported apart; its selector is
    /// checked; the annotation on the base is ignored with a warning; a policy alone is a
    /// manifest with something to check.
    #[test]
    fn pools_and_policies_are_read_from_the_stream() {
        let base = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\n  annotations: {ipmasq.io/node-selector: x}\ndata:\n  config: 'nonMasqueradeCIDRs: [10.0.0.0/8]'\n";
        let pool = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent-gpu\n  annotations: {ipmasq.io/node-selector: 'gpu in (a b)'}\ndata:\n  config: 'nonMasqueradeCIDRs: [100.64.0.0/10]'\n  ip-masq-agent-gpu: 'masqLinkLocal: true'\n";
        let src = format!("{base}{pool}");
        let stream = parse_stream(&src, MANIFEST_OR_CONFIG).unwrap();
        let read = read_manifest(&src, &stream, &Options::default(), Scope::Named).unwrap();
        assert_eq!(
            read.config_maps.len(),
            1,
            "the pool's config is no result of its own"
        );
        let warning = &read.config_maps[0].checked.diagnostics()[0];
        assert_eq!(warning.code, Code::IgnoredNodeSelector);
        assert_eq!(warning.location.unwrap().line, 5);
        assert_eq!(
            read.parts.len(),
            1,
            "a pool's ip-masq* keys are still --config-dir parts"
        );
        assert_eq!(read.pools.len(), 1);
        let found = &read.pools[0];
        assert_eq!(found.findings[0].code, Code::InvalidNodeSelector);
        assert_eq!(found.findings[0].location.unwrap().line, 13);
        let results = run(&src).unwrap();
        let pool_result = results
            .iter()
            .find(|r| r.name.as_deref() == Some("ip-masq-agent-gpu"))
            .unwrap();
        assert_eq!(
            pool_result.checked.errors().next().unwrap().code,
            Code::InvalidNodeSelector
        );
        // A valid selector: the pool merged after the base.
        let src = src.replace("gpu in (a b)", "gpu in (a,b)");
        let results = run(&src).unwrap();
        let pool_result = results
            .iter()
            .find(|r| r.name.as_deref() == Some("ip-masq-agent-gpu"))
            .unwrap();
        let merged = pool_result.checked.config().expect("valid");
        assert_eq!(merged.non_masquerade_cidrs.len(), 2);
        let policy = "apiVersion: networking.gke.io/v1\nkind: EgressNATPolicy\nmetadata: {name: p}\nspec: {action: NoSNAT, destinations: [{cidr: 10.0.0.0/8}]}\n";
        let stream = parse_stream(policy, MANIFEST_OR_CONFIG).unwrap();
        let read = read_manifest(policy, &stream, &Options::default(), Scope::Named).unwrap();
        assert_eq!(read.policies.len(), 1);
        assert!(read.policies[0].policy.is_valid());
    }

    #[test]
    fn manifest_without_configmap_is_an_error() {
        let src = "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n";
        assert_eq!(run(src).unwrap_err().code, Code::NoConfigMap);
    }

    #[test]
    fn detects_manifests() {
        let docs = parse_stream("apiVersion: v1\nkind: ConfigMap\n", MANIFEST_OR_CONFIG)
            .unwrap()
            .documents;
        assert!(is_manifest(&docs[0]));
        let docs = parse_stream("nonMasqueradeCIDRs: []\n", MANIFEST_OR_CONFIG)
            .unwrap()
            .documents;
        assert!(!is_manifest(&docs[0]));
    }
}
