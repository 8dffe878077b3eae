//! Kubernetes manifests as `validate` input: find the ConfigMaps (in any document, and inside a
//! `kind: List`) and check their `data.config`, the key upstream's DaemonSet mounts as
//! `/etc/config/ip-masq-agent`, reporting positions inside the manifest itself.

use super::merge::{self, Part};
use super::yaml::{Budget, Stream};
use super::yaml::{Documents, Location, Style, Value, YamlError, YamlNode};
use super::{check_text_within, Checked, Code, Diagnostic, Options};
use std::path::Path;

/// The ConfigMap data key that the DaemonSet mounts as the agent's config file.
pub const CONFIG_KEY: &str = "config";
/// The ConfigMap name upstream's manifest uses.
pub const CONFIGMAP_NAME: &str = "ip-masq-agent";

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
/// mounts it as the config file), and its keys starting with `ip-masq` (ip-masq-agent-v2
/// projects each as one file of a `--config-dir`), which are merged as `--config-dir` merges
/// them, across every ConfigMap of the stream. `binaryData` keys count the same (kubelet
/// mounts them alike). A ConfigMap named `ip-masq-agent` with none of these is an error.
/// Diagnostics are located in the manifest's own text.
pub fn check_manifest(
    source: &str,
    stream: &Stream,
    options: &Options,
) -> Result<Vec<ConfigMapResult>, Diagnostic> {
    let mut manifest = read_manifest(source, stream, options)?;
    if !manifest.parts.is_empty() {
        manifest
            .config_maps
            .push(merge_parts(&manifest.parts, options));
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
}

/// One `ip-masq*` key of a ConfigMap, checked as one file of a merge.
#[derive(Clone)]
pub struct ManifestPart {
    /// Where the key is (its `key` is the file name it is mounted as, which orders the merge).
    pub source: MergedKey,
    pub part: Part,
}

/// Reads every ConfigMap of a manifest stream (see [`check_manifest`]) without merging the
/// `ip-masq*` keys; an error when it holds no config at all. Each config is parsed within
/// what the manifest's tree left of the file's budget.
pub fn read_manifest(
    source: &str,
    stream: &Stream,
    options: &Options,
) -> Result<Manifest, Diagnostic> {
    let documents = &stream.documents[..];
    let mut results = Vec::new();
    let mut parts: Vec<ManifestPart> = Vec::new();
    for (index, doc) in documents.iter().enumerate() {
        let mut objects = Vec::new();
        collect_objects(doc, &mut objects);
        for object in objects {
            if object.get("kind").and_then(YamlNode::as_str) != Some("ConfigMap") {
                continue;
            }
            let metadata = object.get("metadata");
            let field = |key: &str| {
                metadata
                    .and_then(|m| m.get(key))
                    .and_then(YamlNode::as_str)
                    .map(str::to_string)
            };
            let name = field("name");
            let keys = config_keys(object);
            let twice = keys_in_both_sections(object);
            if !twice.is_empty() && (!keys.is_empty() || name.as_deref() == Some(CONFIGMAP_NAME)) {
                results.push(ConfigMapResult {
                    namespace: field("namespace"),
                    name: name.clone(),
                    document: index + 1,
                    checked: Checked::rejected(twice),
                    merged: Vec::new(),
                });
            }
            for key in keys.iter().filter(|k| !in_both_sections(&keys, &k.name)) {
                let checked = key.check(source, options, stream.left);
                if key.name == CONFIG_KEY {
                    results.push(ConfigMapResult {
                        namespace: field("namespace"),
                        name: name.clone(),
                        document: index + 1,
                        checked,
                        merged: Vec::new(),
                    });
                } else {
                    let part = format!(
                        "ConfigMap {}/{}",
                        name.as_deref().unwrap_or("(unnamed)"),
                        key.name
                    );
                    parts.push(ManifestPart {
                        source: MergedKey {
                            file: None,
                            namespace: field("namespace"),
                            name: name.clone(),
                            key: key.name.clone(),
                            document: index + 1,
                        },
                        part: Part {
                            name: part.into(),
                            checked,
                        },
                    });
                }
            }
            if keys.is_empty() && name.as_deref() == Some(CONFIGMAP_NAME) {
                results.push(ConfigMapResult {
                    namespace: field("namespace"),
                    name: name.clone(),
                    document: index + 1,
                    checked: without_config(object, name.as_deref()),
                    merged: Vec::new(),
                });
            }
        }
    }
    if results.is_empty() && parts.is_empty() {
        return Err(Diagnostic::error(
            Code::NoConfigMap,
            format!(
                "this Kubernetes manifest holds no ConfigMap with `data.{CONFIG_KEY}` or `ip-masq*` keys (nor one named {CONFIGMAP_NAME})"
            ),
        )
        .at_opt(documents.first().map(|d| d.location))
        .hint("pass the agent's config file, or the manifest holding its ConfigMap"));
    }
    Ok(Manifest {
        config_maps: results,
        parts,
    })
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
    fn check(&self, source: &str, options: &Options, budget: Budget) -> Checked {
        let options = Options {
            merging: self.name != CONFIG_KEY,
            ..*options
        };
        let section = if self.binary { "binaryData" } else { "data" };
        let mut checked = if self.binary {
            check_binary(self.value, &self.name, &options, budget)
        } else {
            check_embedded(source, self.value, &self.name, &options, budget)
        };
        if options.merging {
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
    checked.edit_diagnostics(|diagnostics| {
        for diag in diagnostics {
            if let Some(inner) = diag.location {
                diag.message = format!(
                    "{} (line {}, column {} of binaryData.{key}, decoded)",
                    diag.message, inner.line, inner.column
                );
            }
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
    checked.edit_diagnostics(|diagnostics| {
        for diag in diagnostics {
            if let Some(inner) = diag.location {
                let (outer, exact) = map.to_outer(source, inner);
                diag.location = Some(outer);
                if !exact {
                    diag.message = format!(
                        "{} (line {}, column {} of data.{key})",
                        diag.message, inner.line, inner.column
                    );
                }
            } else {
                diag.location = Some(value.location);
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

    const OPTS: Options = Options {
        enable_ipv6: false,
        enable_ipv6_given: false,
        nomasq_all_reserved_ranges: false,
        merging: false,
        default_resync_interval: None,
    };

    fn run(src: &str) -> Result<Vec<ConfigMapResult>, Diagnostic> {
        let stream = parse_stream(src, MANIFEST_OR_CONFIG).unwrap();
        check_manifest(src, &stream, &OPTS)
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
