//! `ipmasq validate`: checks config files, stdin, or ConfigMap manifests exactly as the agent
//! would read them, and reports in compiler style or as a stable JSON document.
//!
//! JSON report (schemaVersion 1; fields are only ever added; every field is described in
//! docs/reference/validate-json.md, which a test holds to the values below):
//! `{schemaVersion, valid, errors, warnings, results: [{path, kind, outcome, configMap?,
//! configMaps?, valid, errors, warnings, diagnostics: [{severity, code, message, line?,
//! column?, hint?}], effective, peakMemoryMiB?, rendered?}], skipped?: [{path, reason}]}`
//! where `kind` is `config`, `configmap`, `defaults` (no file: upstream defaults apply),
//! `merged` (a directory with `--merged`) or `unreadable`; `configMap` is `{namespace, name,
//! document}`, and a merge of `ip-masq*` ConfigMap keys has `configMaps` instead: `[{file?,
//! namespace?, name?, key, document}]` in merge order; `effective` is the config after
//! defaults, or null when invalid; a valid config also has `peakMemoryMiB` (the agent's
//! estimated peak per backend) and `rendered` (`{rules, setElements}` each backend writes for
//! it, what the estimate is made from). A merged result also has `entries`: every list entry with
//! its `list`, `cidr`, `file`, `line` and `column`; a diagnostic of a merged result has `file`.
//! A node pool's result (an `ip-masq-agent-*` ConfigMap with `ipmasq.io/node-selector`) also
//! has `pool: {selector, base}` (`base` null: merged after the defaults); an EgressNATPolicy's
//! has kind `egressnatpolicy` and `egressNATPolicy: {name, document, destinations}`; with
//! `--node-labels`, a result of kind `merged` per namespace has `node: {labels, base, pools,
//! egressNATPolicies}`.
//! `outcome` is `valid`, `invalid` or `unreadable`; `skipped` lists the files of a directory
//! that are not the agent's configs (see [`super::validate_scope`]).
//! Severity `info` marks ipmasq extensions; it never fails a check, not even with --strict.

use super::{validate_scope, Exit};
use crate::cli::{OutputFormat, ValidateArgs};
use crate::config::selector::Labels;
use crate::config::yaml::parse_stream;
use crate::config::{
    check_parsed, manifest, read_config_source, read_limited, Checked, Code, Config, Diagnostic,
    Options, ReadError, Severity, DEFAULT_CONFIG_PATH,
};
use crate::output::{plural, render_diagnostic, to_json, Styler};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Version of the JSON report's shape.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// Display name of standard input in reports.
const STDIN_NAME: &str = "<stdin>";

/// The whole report, as `-o json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub schema_version: u32,
    pub valid: bool,
    pub errors: usize,
    pub warnings: usize,
    pub results: Vec<ConfigReport>,
    /// The files of a directory that are not the agent's configs, and why (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<validate_scope::Skipped>,
}

/// The verdict on one result, the word its text line starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// No error (warnings and infos may be there).
    Valid,
    /// An error, or with `--strict` a warning: the agent would refuse it (exit 1).
    Invalid,
    /// It could not be read (exit 2).
    Unreadable,
}

/// What a result describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputKind {
    Config,
    Configmap,
    Defaults,
    Merged,
    Unreadable,
    /// GKE's EgressNATPolicy.
    Egressnatpolicy,
}

/// One list entry of a merged config and where it was written.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MergedEntry {
    pub list: crate::config::ListName,
    pub cidr: String,
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl MergedEntry {
    /// Every list entry of `config`, list by list.
    fn of(config: &Config) -> Vec<MergedEntry> {
        use crate::config::ListName;
        let mut out = Vec::new();
        for (list, nets) in [
            (ListName::NonMasquerade, &config.non_masquerade_cidrs),
            (ListName::Force, &config.force_masquerade_cidrs),
            (ListName::Sources, &config.masquerade_source_cidrs),
        ] {
            for (i, net) in nets.iter().enumerate() {
                let place = config.place(list, i);
                out.push(MergedEntry {
                    list,
                    cidr: net.to_string(),
                    file: place.file.as_deref().map(str::to_string),
                    line: place.location.map(|l| l.line),
                    column: place.location.map(|l| l.column),
                });
            }
        }
        out
    }
}

/// Which ConfigMap of a manifest a result is about: its document and the names it gives, as
/// written (either may be missing); `cluster::configmap::ConfigMapRef` is the one the agent
/// watches.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfigMap {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub document: usize,
}

/// What a node pool's result is about: its `ipmasq.io/node-selector` as written, and the
/// base ConfigMap it is merged after (None: the defaults, as no valid base is in the run).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    pub selector: String,
    pub base: Option<String>,
}

/// `--node-labels`: the node, the base ConfigMap (None: the defaults) and the pools that
/// apply to it, in merge order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRef {
    pub labels: crate::config::selector::Labels,
    pub base: Option<String>,
    pub pools: Vec<String>,
    /// The run's EgressNATPolicy objects, whose destinations the node keeps too.
    #[serde(rename = "egressNATPolicies")]
    pub egress_nat_policies: Vec<String>,
}

/// Which EgressNATPolicy a result is about, and the destinations it keeps (when valid).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    pub name: Option<String>,
    pub document: usize,
    pub destinations: Vec<String>,
}

/// The verdict on one config.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReport {
    pub path: String,
    pub kind: InputKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ManifestConfigMap>,
    /// For the `ip-masq*` keys of ConfigMaps merged as `--config-dir` merges them: each key
    /// with its ConfigMap's namespace and name, in merge order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_maps: Option<Vec<manifest::MergedKey>>,
    /// For a node pool's ConfigMap: its selector and the base it is merged after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolRef>,
    /// With `--node-labels`: the node's labels, the base and the pools that apply to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeRef>,
    /// For an EgressNATPolicy: its name, document and the destinations it keeps.
    #[serde(rename = "egressNATPolicy", skip_serializing_if = "Option::is_none")]
    pub egress_nat_policy: Option<PolicyRef>,
    pub outcome: Outcome,
    pub valid: bool,
    pub errors: usize,
    pub warnings: usize,
    pub diagnostics: Vec<JsonDiagnostic>,
    pub effective: Option<Config>,
    /// Estimated peak memory of the agent and its tools applying this config, per backend
    /// (MiB), from the benchmark's measurements; set for a valid config.
    #[serde(rename = "peakMemoryMiB", skip_serializing_if = "Option::is_none")]
    pub peak_memory_mib: Option<std::collections::BTreeMap<String, f64>>,
    /// What each backend writes for this config (the estimate's basis): `{rules,
    /// setElements}` by backend; set for a valid config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rendered: Option<std::collections::BTreeMap<String, crate::backend::Footprint>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<MergedEntry>>,
    #[serde(skip)]
    source: Option<std::rc::Rc<String>>,
    #[serde(skip)]
    raw: Vec<Diagnostic>,
}

/// A diagnostic as the JSON report spells it.
#[derive(Debug, Serialize)]
pub struct JsonDiagnostic {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// On a line that stands for findings not listed (repeats of one code): how many.
    #[serde(skip_serializing_if = "is_zero")]
    pub folded: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl From<&Diagnostic> for JsonDiagnostic {
    fn from(d: &Diagnostic) -> Self {
        JsonDiagnostic {
            file: d.file.as_deref().map(str::to_string),
            severity: d.severity,
            code: d.code,
            message: d.message.clone(),
            line: d.location.map(|l| l.line),
            column: d.location.map(|l| l.column),
            hint: d.hint.clone(),
            folded: d.folded,
        }
    }
}

impl ConfigReport {
    fn new(
        path: &str,
        kind: InputKind,
        checked: Checked,
        strict: bool,
        source: Option<std::rc::Rc<String>>,
    ) -> Self {
        let (config, mut diagnostics) = checked.into_parts();
        if let Some(config) = &config {
            diagnostics.extend(node_findings(config));
        }
        if strict {
            for d in diagnostics
                .iter_mut()
                .filter(|d| d.severity == Severity::Warning)
            {
                d.severity = Severity::Error;
            }
        }
        let errors = diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(Diagnostic::count)
            .sum();
        let warnings = diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .map(Diagnostic::count)
            .sum();
        let valid = errors == 0 && config.is_some();
        let estimated = config.as_ref().filter(|_| valid).map(estimates);
        let outcome = match (kind, valid) {
            (InputKind::Unreadable, _) => Outcome::Unreadable,
            (_, true) => Outcome::Valid,
            (_, false) => Outcome::Invalid,
        };
        ConfigReport {
            path: path.to_string(),
            kind,
            config_map: None,
            config_maps: None,
            pool: None,
            node: None,
            egress_nat_policy: None,
            outcome,
            valid,
            errors,
            warnings,
            diagnostics: diagnostics.iter().map(JsonDiagnostic::from).collect(),
            peak_memory_mib: estimated.as_ref().map(|e| {
                e.iter()
                    .map(|(b, e)| (b.clone(), report_mib(e.peak)))
                    .collect()
            }),
            rendered: estimated
                .as_ref()
                .map(|e| e.iter().map(|(b, e)| (b.clone(), e.footprint)).collect()),
            effective: if valid { config } else { None },
            entries: None,
            source,
            raw: diagnostics,
        }
    }

    fn unreadable(path: &str, err: &ReadError) -> Self {
        let message = err.to_string();
        let reason = message
            .strip_prefix(&format!("{path}: "))
            .unwrap_or(&message);
        let checked = Checked::rejected(vec![Diagnostic::error(Code::Io, reason)]);
        ConfigReport::new(path, InputKind::Unreadable, checked, false, None)
    }
}

/// What each backend writes for `config` (with the agent's default flags) and the agent's
/// estimated peak memory applying it, by backend name.
fn estimates(config: &Config) -> std::collections::BTreeMap<String, crate::backend::Estimate> {
    let rulesets = crate::plan::plan(
        config,
        &crate::plan::PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
    );
    crate::backend::BackendId::ALL
        .into_iter()
        .map(|id| (id.to_string(), crate::backend::Estimate::of(id, &rulesets)))
        .collect()
}

/// Bytes as MiB with one decimal, for the report.
fn report_mib(bytes: u64) -> f64 {
    (bytes as f64 / 1_048_576.0 * 10.0).round() / 10.0
}

/// Configs that make at least this many rules or set elements with some backend get the
/// memory estimate in the text report too.
const MEMORY_NOTE_FROM: usize = 1_000;

/// One thing to validate.
enum Input {
    Stdin,
    File {
        path: PathBuf,
        explicit: bool,
        /// Found in a directory named on the command line: judged only when it is the agent's
        /// (see [`validate_scope`]).
        in_directory: bool,
    },
    /// A directory whose `ip-masq*` files are merged (`--merged`).
    Merged(PathBuf),
}

/// How deep `validate DIR` looks into subfolders (a repository's `k8s/prod/...`).
const MAX_DIRECTORY_DEPTH: usize = 16;

/// What `validate DIR` finds under a folder: its regular files, and the folders that could
/// not be read (each its own error; the rest is still read).
#[derive(Default)]
struct FolderWalk {
    files: Vec<PathBuf>,
    unreadable: Vec<(PathBuf, std::io::Error)>,
}

impl FolderWalk {
    /// The regular files under `dir` and its subfolders: dot-files and dot-folders skipped (a
    /// mounted ConfigMap volume's `..data` and timestamped folders hold the same files as its
    /// top level), a symlink to a file followed (a mounted key is one), a symlink to a folder
    /// not (no loop), at most [`MAX_DIRECTORY_DEPTH`] folders deep.
    fn walk(&mut self, dir: &Path, depth: usize) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) => return self.unreadable.push((dir.to_path_buf(), err)),
        };
        for entry in entries.filter_map(Result::ok) {
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let path = entry.path();
            let is_real_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_real_dir && depth < MAX_DIRECTORY_DEPTH {
                self.walk(&path, depth + 1);
            } else if !is_real_dir && path.is_file() {
                self.files.push(path);
            }
        }
    }
}

/// The inputs named on the command line: the default path when none, directories expanded to
/// the regular files in them and their subfolders (sorted, dot-files skipped).
fn expand_inputs(files: &[PathBuf], merged: bool) -> Vec<Result<Input, (String, ReadError)>> {
    if files.is_empty() {
        return vec![Ok(Input::File {
            path: PathBuf::from(DEFAULT_CONFIG_PATH),
            explicit: false,
            in_directory: false,
        })];
    }
    let mut inputs = Vec::new();
    for file in files {
        if file.as_os_str() == "-" {
            inputs.push(Ok(Input::Stdin));
            continue;
        }
        if file.is_dir() && merged {
            inputs.push(Ok(Input::Merged(file.clone())));
            continue;
        }
        if file.is_dir() {
            let mut walk = FolderWalk::default();
            walk.walk(file, 0);
            walk.files.sort();
            inputs.extend(walk.files.into_iter().map(|path| {
                Ok(Input::File {
                    path,
                    explicit: true,
                    in_directory: true,
                })
            }));
            inputs.extend(walk.unreadable.into_iter().map(|(path, err)| {
                Err((
                    path.display().to_string(),
                    ReadError::Other { path, source: err },
                ))
            }));
            continue;
        }
        inputs.push(Ok(Input::File {
            path: file.clone(),
            explicit: true,
            in_directory: false,
        }));
    }
    inputs
}

/// What one input gave: its entries, and the `ip-masq*` keys of its ConfigMaps, which the
/// run merges across all its inputs (ip-masq-agent-v2 projects them into one directory).
struct SourceFindings {
    entries: Vec<ConfigReport>,
    parts: Vec<manifest::ManifestPart>,
    /// Its node pools, checked once the run's bases are known.
    pools: Vec<manifest::ManifestPool>,
    /// Its base ConfigMaps, for the pools of the run.
    bases: Vec<manifest::PoolBase>,
    /// Its EgressNATPolicy objects, for `--node-labels`.
    policies: Vec<crate::config::egress_nat::Policy>,
    source: std::rc::Rc<String>,
}

/// What came of one text: its findings, or, for a file of a directory, why it is none of
/// the agent's (see [`validate_scope`]).
enum Judged {
    Checked(SourceFindings),
    Skipped(String),
}

/// Validates one text (a config or a manifest) into one or more entries; with
/// [`manifest::Scope::AgentsOnly`] (a file of a directory) a text that is not the agent's
/// config, or a manifest without its ConfigMaps, is skipped instead.
fn check_source(
    path: &str,
    text: String,
    options: &Options,
    strict: bool,
    scope: manifest::Scope,
) -> Judged {
    let parsed = parse_stream(&text, manifest::MANIFEST_OR_CONFIG);
    if scope == manifest::Scope::AgentsOnly {
        if let Some(reason) = validate_scope::by_content(Path::new(path), &text, &parsed) {
            return Judged::Skipped(reason);
        }
    }
    let source = std::rc::Rc::new(text);
    let mut found = SourceFindings {
        entries: Vec::new(),
        parts: Vec::new(),
        pools: Vec::new(),
        bases: Vec::new(),
        policies: Vec::new(),
        source: source.clone(),
    };
    if let Ok(stream) = parsed.as_ref() {
        let documents = &stream.documents[..];
        if manifest::is_manifest_stream(documents) {
            // Every document of a manifest counts: one that cannot be read (broken, or past the
            // file's parse budget) may hold a ConfigMap, so the file cannot be called valid.
            if let Some(err) = &stream.trailing_error {
                found.entries.push(ConfigReport::new(
                    path,
                    InputKind::Configmap,
                    Checked::rejected(vec![manifest::unreadable_document(err)]),
                    strict,
                    Some(source.clone()),
                ));
            }
            match manifest::read_manifest(&source, stream, options, scope) {
                Ok(read) => {
                    found.parts = read.parts;
                    found.pools = read.pools;
                    found.bases = pool_bases(&read.config_maps);
                    found.entries.extend(
                        read.config_maps
                            .into_iter()
                            .map(|cm| configmap_entry(path, cm, strict, Some(source.clone()))),
                    );
                    found.policies = read.policies.iter().map(|p| p.policy.clone()).collect();
                    found.entries.extend(
                        read.policies
                            .into_iter()
                            .map(|p| policy_entry(path, p, strict, Some(source.clone()))),
                    );
                }
                // A manifest of a directory with none of the agent's objects, and no broken
                // document that might hold one (it would name the agent).
                Err(_)
                    if scope == manifest::Scope::AgentsOnly
                        && (stream.trailing_error.is_none()
                            || !validate_scope::mentions_the_agent(&source)) =>
                {
                    return Judged::Skipped(validate_scope::manifest_reason(stream));
                }
                // The unreadable document said it already: no second error for what it hid.
                Err(_) if !found.entries.is_empty() => {}
                Err(diag) => {
                    let checked = Checked::rejected(vec![diag]);
                    found.entries = vec![ConfigReport::new(
                        path,
                        InputKind::Configmap,
                        checked,
                        strict,
                        Some(source),
                    )];
                }
            }
            return Judged::Checked(found);
        }
    }
    let checked = check_parsed(&source, &parsed, options);
    found.entries = vec![ConfigReport::new(
        path,
        InputKind::Config,
        checked,
        strict,
        Some(source),
    )];
    Judged::Checked(found)
}

fn configmap_entry(
    path: &str,
    cm: manifest::ConfigMapResult,
    strict: bool,
    source: Option<std::rc::Rc<String>>,
) -> ConfigReport {
    let mut entry = ConfigReport::new(path, InputKind::Configmap, cm.checked, strict, source);
    if cm.merged.is_empty() {
        entry.config_map = Some(ManifestConfigMap {
            namespace: cm.namespace,
            name: cm.name,
            document: cm.document,
        });
    } else {
        entry.config_maps = Some(cm.merged);
    }
    entry
}

/// Labels as `--node-labels` takes them: `k=v,k2=v2` (`no labels` when there are none).
fn node_label_text(labels: &Labels) -> String {
    if labels.is_empty() {
        return "with no labels".to_string();
    }
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}

/// An EgressNATPolicy's entry: its findings, and the destinations it keeps when valid (no
/// effective config: a policy is added to one, see [`crate::config::egress_nat`]).
fn policy_entry(
    path: &str,
    found: manifest::ManifestPolicy,
    strict: bool,
    source: Option<std::rc::Rc<String>>,
) -> ConfigReport {
    let policy = found.policy;
    let checked = if policy.is_valid() {
        Checked::new(
            Config::defaults(&Options::default()),
            policy.diagnostics.clone(),
        )
    } else {
        Checked::rejected(policy.diagnostics.clone())
    };
    let mut entry = ConfigReport::new(path, InputKind::Egressnatpolicy, checked, strict, source);
    entry.effective = None;
    entry.peak_memory_mib = None;
    entry.rendered = None;
    entry.egress_nat_policy = Some(PolicyRef {
        name: policy.name.clone(),
        document: found.document,
        destinations: if policy.is_valid() {
            policy
                .destinations
                .iter()
                .map(ToString::to_string)
                .collect()
        } else {
            Vec::new()
        },
    });
    entry
}

/// A node pool's entry: the pool merged after its base (see [`manifest::check_pool`]).
fn pool_entry(
    path: &str,
    found: &manifest::ManifestPool,
    bases: &[manifest::PoolBase],
    options: &Options,
    strict: bool,
    source: Option<std::rc::Rc<String>>,
) -> ConfigReport {
    let result = manifest::check_pool(found, bases, options);
    let mut entry = ConfigReport::new(path, InputKind::Configmap, result.checked, strict, source);
    entry.config_map = Some(ManifestConfigMap {
        namespace: result.namespace,
        name: Some(result.name),
        document: result.document,
    });
    entry.pool = Some(PoolRef {
        selector: result.selector,
        base: result.base,
    });
    entry
}

/// The base ConfigMaps (`ip-masq-agent`, key `config`) among a manifest's results.
fn pool_bases(config_maps: &[manifest::ConfigMapResult]) -> Vec<manifest::PoolBase> {
    config_maps
        .iter()
        .filter(|cm| cm.merged.is_empty() && cm.name.as_deref() == Some(manifest::CONFIGMAP_NAME))
        .map(|cm| manifest::PoolBase {
            namespace: cm.namespace.clone(),
            checked: cm.checked.clone(),
        })
        .collect()
}

/// The `ip-masq*` keys of every manifest of a run, merged into one entry placed after the
/// last input that gave some. Parts from several files are named with their file.
/// The node pools of a run are checked after their base, which may be in another input: each
/// pool's entry is placed after its own input's entries.
#[derive(Default)]
struct RunParts {
    inputs: Vec<InputParts>,
    bases: Vec<manifest::PoolBase>,
    policies: Vec<crate::config::egress_nat::Policy>,
}

/// The `ip-masq*` keys and the node pools one input gave.
struct InputParts {
    path: String,
    source: std::rc::Rc<String>,
    parts: Vec<manifest::ManifestPart>,
    pools: Vec<manifest::ManifestPool>,
    /// Where in the results its entries end.
    results_end: usize,
}

impl RunParts {
    fn add(&mut self, path: &str, found: SourceFindings, results: &mut Vec<ConfigReport>) {
        results.extend(found.entries);
        self.bases.extend(found.bases);
        self.policies.extend(found.policies);
        if !found.parts.is_empty() || !found.pools.is_empty() {
            self.inputs.push(InputParts {
                path: path.to_string(),
                source: found.source,
                parts: found.parts,
                pools: found.pools,
                results_end: results.len(),
            });
        }
    }

    /// `--node-labels`: the config of such a node in each namespace that has a base or a
    /// pool in the run: the base and the pools that select it, merged, and the run's
    /// EgressNATPolicy destinations added.
    fn node_entries(&self, labels: &Labels, options: &Options, strict: bool) -> Vec<ConfigReport> {
        let pools: Vec<&manifest::ManifestPool> =
            self.inputs.iter().flat_map(|i| &i.pools).collect();
        let mut namespaces: Vec<Option<String>> = self
            .bases
            .iter()
            .map(|b| b.namespace.clone())
            .chain(pools.iter().map(|p| p.namespace.clone()))
            .collect();
        namespaces.sort();
        namespaces.dedup();
        if namespaces.is_empty() && !self.policies.is_empty() {
            namespaces.push(None);
        }
        namespaces
            .into_iter()
            .map(|namespace| {
                let serves =
                    |ns: &Option<String>| ns.is_none() || namespace.is_none() || *ns == namespace;
                let base = self
                    .bases
                    .iter()
                    .find(|b| serves(&b.namespace) && b.checked.config().is_some())
                    .or_else(|| self.bases.iter().find(|b| serves(&b.namespace)));
                let base_name = base.map(|b| match &b.namespace {
                    Some(ns) => format!("{ns}/{}", manifest::CONFIGMAP_NAME),
                    None => manifest::CONFIGMAP_NAME.to_string(),
                });
                let base_checked = base.map_or_else(
                    || Checked::new(Config::defaults(options), Vec::new()),
                    |b| b.checked.clone(),
                );
                let in_namespace: Vec<crate::config::pool::Pool> = pools
                    .iter()
                    .filter(|p| serves(&p.namespace))
                    .map(|p| p.pool.clone())
                    .collect();
                let node = crate::config::pool::config_for_node(
                    base_name.as_deref().unwrap_or("(the defaults)"),
                    &base_checked,
                    &in_namespace,
                    labels,
                    options,
                );
                let checked = crate::config::egress_nat::keep_destinations(
                    &node.checked,
                    &self.policies,
                    options,
                );
                let path = format!("node {}", node_label_text(labels));
                let mut entry = ConfigReport::new(&path, InputKind::Merged, checked, strict, None);
                entry.entries = entry.effective.as_ref().map(MergedEntry::of);
                let mut policies: Vec<String> = self
                    .policies
                    .iter()
                    .map(|p| p.name.clone().unwrap_or_else(|| "(unnamed)".to_string()))
                    .collect();
                policies.sort();
                entry.node = Some(NodeRef {
                    labels: labels.clone(),
                    base: base_name,
                    pools: node.pools,
                    egress_nat_policies: policies,
                });
                entry
            })
            .collect()
    }

    /// Every pool's entry after its input's entries, then the merge of the `ip-masq*` keys.
    fn merge_into(mut self, results: &mut Vec<ConfigReport>, options: &Options, strict: bool) {
        for input in self.inputs.iter().rev() {
            let entries = input.pools.iter().map(|pool| {
                let source = Some(input.source.clone());
                pool_entry(&input.path, pool, &self.bases, options, strict, source)
            });
            let at = input.results_end;
            results.splice(at..at, entries.collect::<Vec<_>>());
        }
        let mut shift = 0;
        for input in &mut self.inputs {
            shift += input.pools.len();
            input.results_end += shift;
        }
        self.inputs.retain(|i| !i.parts.is_empty());
        let Some(at) = self.inputs.last().map(|i| i.results_end) else {
            return;
        };
        let single = self.inputs.len() == 1;
        let paths: Vec<&str> = self.inputs.iter().map(|i| i.path.as_str()).collect();
        let label = paths.join(" + ");
        let mut parts = Vec::new();
        for input in &self.inputs {
            parts.extend(input.parts.iter().cloned().map(|mut p| {
                if !single {
                    p.part.name = format!("{}: {}", input.path, p.part.name).into();
                    p.source.file = Some(input.path.clone());
                }
                p
            }));
        }
        let merged = manifest::merge_parts(&parts, options);
        let source = single.then(|| self.inputs[0].source.clone());
        results.insert(at, configmap_entry(&label, merged, strict, source));
    }
}

/// `--merged DIR` where DIR holds Kubernetes manifests (a repository's, not a mounted
/// volume): the `ip-masq*` keys of their ConfigMaps and the `ip-masq*` plain config files,
/// merged as the agent's `--config-dir` merges the files a projected volume makes of them.
/// `None` when no file there is a manifest: the directory is read exactly as the agent does.
fn merged_manifests(
    dir: &Path,
    options: &Options,
    strict: bool,
    skipped: &mut Vec<validate_scope::Skipped>,
) -> Option<Vec<ConfigReport>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut texts = Vec::new();
    for path in files {
        if let Ok(Some(text)) = read_config_source(&path) {
            let parsed = parse_stream(&text.text, manifest::MANIFEST_OR_CONFIG);
            let is_manifest = parsed
                .as_ref()
                .is_ok_and(|s| manifest::is_manifest_stream(&s.documents));
            texts.push((path, text.text, is_manifest));
        }
    }
    if !texts.iter().any(|(_, _, is_manifest)| *is_manifest) {
        return None;
    }
    let label = dir.display().to_string();
    let mut results = Vec::new();
    let mut parts = Vec::new();
    let (mut bases, mut pools) = (Vec::new(), Vec::new());
    let merging = Options {
        merging: true,
        ..*options
    };
    for (path, text, is_manifest) in texts {
        let name = path.display().to_string();
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if is_manifest {
            let found = match check_source(&name, text, options, strict, AGENTS_ONLY) {
                Judged::Checked(found) => found,
                Judged::Skipped(reason) => {
                    skipped.push(validate_scope::Skipped { path: name, reason });
                    continue;
                }
            };
            results.extend(found.entries);
            bases.extend(found.bases);
            pools.extend(
                found
                    .pools
                    .into_iter()
                    .map(|p| (name.clone(), found.source.clone(), p)),
            );
            parts.extend(found.parts.into_iter().map(|mut p| {
                p.part.name = format!("{name}: {}", p.part.name).into();
                p.source.file = Some(name.clone());
                p
            }));
        } else if let Some(key) = file_name.filter(|n| n.starts_with(crate::config::merge::PREFIX))
        {
            let checked = crate::config::check_text(&text, &merging);
            parts.push(manifest::ManifestPart {
                source: manifest::MergedKey {
                    file: Some(name.clone()),
                    namespace: None,
                    name: None,
                    key,
                    document: 1,
                },
                part: crate::config::merge::Part {
                    name: name.into(),
                    checked,
                },
            });
        }
    }
    for (name, source, pool) in &pools {
        let source = Some(source.clone());
        results.push(pool_entry(name, pool, &bases, options, strict, source));
    }
    let merged = manifest::merge_parts(&parts, options);
    let mut entry = ConfigReport::new(&label, InputKind::Merged, merged.checked, strict, None);
    entry.entries = entry.effective.as_ref().map(MergedEntry::of);
    results.push(entry);
    Some(results)
}

/// How the files found in a directory are judged.
const AGENTS_ONLY: manifest::Scope = manifest::Scope::AgentsOnly;

/// Nothing on standard input: in `kubectl get cm … | ipmasq validate -` that is a failed
/// kubectl, never a valid config.
fn empty_input(strict: bool) -> ConfigReport {
    let finding = crate::config::Diagnostic::error(
        crate::config::Code::EmptyInput,
        "no input — did the command before the pipe fail?",
    )
    .hint("check the command that feeds `ipmasq validate -` (with `set -o pipefail` its failure fails the pipe), or pass the file itself");
    ConfigReport::new(
        STDIN_NAME,
        InputKind::Config,
        Checked::rejected(vec![finding]),
        strict,
        None,
    )
}

/// This machine's addresses and interface names, read once per report when a config names
/// an output address or interfaces (None: node checks are off, or they cannot be read).
type NodeView = Option<crate::addresses::NodeView>;

thread_local! {
    /// Whether this report checks configs against this machine (`--no-node-checks` turns it
    /// off), and what it read of the machine.
    static NODE: std::cell::RefCell<(bool, Option<NodeView>)> = const { std::cell::RefCell::new((false, None)) };
}

/// The findings about a valid config's egress keys on this machine (see
/// [`crate::plan::egress::node_findings`]); none with `--no-node-checks`, none when the
/// config has no egress key.
fn node_findings(config: &Config) -> Vec<Diagnostic> {
    if config.output_address.is_none()
        && config.output_address_ipv6.is_none()
        && config.output_interfaces.is_empty()
    {
        return Vec::new();
    }
    NODE.with(|node| {
        let mut node = node.borrow_mut();
        if !node.0 {
            return Vec::new();
        }
        match node
            .1
            .get_or_insert_with(|| crate::addresses::node_view().ok())
        {
            Some(view) => {
                crate::plan::egress::node_findings(config, &view.addresses, &view.interfaces)
            }
            None => Vec::new(),
        }
    })
}

/// What a run has found so far: its results, the `ip-masq*` keys and pools it merges at the
/// end, and the files of its directories that were skipped.
struct Collected {
    options: Options,
    strict: bool,
    results: Vec<ConfigReport>,
    parts: RunParts,
    skipped: Vec<validate_scope::Skipped>,
}

impl Collected {
    /// Adds what came of one text named `name`.
    fn judged(&mut self, name: &str, judged: Judged) {
        match judged {
            Judged::Checked(found) => self.parts.add(name, found, &mut self.results),
            Judged::Skipped(reason) => self.skipped.push(validate_scope::Skipped {
                path: name.to_string(),
                reason,
            }),
        }
    }

    /// One file: named on the command line (`explicit`; else the default path), or found in
    /// a directory named there (judged only when it is the agent's, see [`validate_scope`]).
    fn file(&mut self, path: PathBuf, explicit: bool, in_directory: bool) {
        let name = path.display().to_string();
        if let Some(reason) = validate_scope::by_name(&path).filter(|_| in_directory) {
            return self.judged(&name, Judged::Skipped(reason));
        }
        let scope = if in_directory {
            AGENTS_ONLY
        } else {
            manifest::Scope::Named
        };
        match read_config_source(&path) {
            Ok(Some(text)) => {
                let judged = check_source(&name, text.text, &self.options, self.strict, scope);
                self.judged(&name, judged);
            }
            Ok(None) if !explicit => {
                let checked = Checked::new(Config::defaults(&self.options), Vec::new());
                self.results.push(ConfigReport::new(
                    &name,
                    InputKind::Defaults,
                    checked,
                    false,
                    None,
                ));
            }
            Ok(None) => self
                .results
                .push(ConfigReport::unreadable(&name, &ReadError::NotFound(path))),
            Err(err) => match validate_scope::by_read_error(&path, &err) {
                Some(reason) if in_directory => self.judged(&name, Judged::Skipped(reason)),
                _ => self.results.push(ConfigReport::unreadable(&name, &err)),
            },
        }
    }

    /// A directory merged as `agent --config-dir` merges it (`--merged`).
    fn merged(&mut self, dir: PathBuf) {
        let name = dir.display().to_string();
        if let Some(entries) = merged_manifests(&dir, &self.options, self.strict, &mut self.skipped)
        {
            self.results.extend(entries);
            return;
        }
        let source = crate::config::ConfigSource::Dir(dir);
        match crate::config::load_source(&source, &self.options) {
            Ok(loaded) => {
                let mut entry =
                    ConfigReport::new(&name, InputKind::Merged, loaded.checked, self.strict, None);
                entry.entries = entry.effective.as_ref().map(MergedEntry::of);
                self.results.push(entry);
            }
            Err(err) => self.results.push(ConfigReport::unreadable(&name, &err)),
        }
    }

    /// Standard input (`-`).
    fn stdin(&mut self) {
        match read_limited(std::io::stdin().lock(), Path::new(STDIN_NAME)) {
            Ok(text) if text.is_blank() => self.results.push(empty_input(self.strict)),
            Ok(text) => {
                let scope = manifest::Scope::Named;
                let judged = check_source(STDIN_NAME, text.text, &self.options, self.strict, scope);
                self.judged(STDIN_NAME, judged);
            }
            Err(err) => self
                .results
                .push(ConfigReport::unreadable(STDIN_NAME, &err)),
        }
    }
}

/// Builds the report for the given arguments (reads the inputs, writes nothing).
pub fn build_report(args: &ValidateArgs) -> Report {
    NODE.with(|node| *node.borrow_mut() = (!args.no_node_checks, None));
    let options = args.config.options();
    let mut run = Collected {
        options,
        strict: args.strict,
        results: Vec::new(),
        parts: RunParts::default(),
        skipped: Vec::new(),
    };
    for input in expand_inputs(&args.files, args.merged) {
        match input {
            Err((name, err)) => run.results.push(ConfigReport::unreadable(&name, &err)),
            Ok(Input::Merged(dir)) => run.merged(dir),
            Ok(Input::Stdin) => run.stdin(),
            Ok(Input::File {
                path,
                explicit,
                in_directory,
            }) => run.file(path, explicit, in_directory),
        }
    }
    let Collected {
        mut results,
        parts,
        skipped,
        ..
    } = run;
    let nodes = args
        .node_labels
        .as_ref()
        .map(|labels| parts.node_entries(labels, &options, args.strict))
        .unwrap_or_default();
    parts.merge_into(&mut results, &options, args.strict);
    results.extend(nodes);
    let errors = results.iter().map(|r| r.errors).sum();
    let warnings = results.iter().map(|r| r.warnings).sum();
    Report {
        schema_version: REPORT_SCHEMA_VERSION,
        valid: results.iter().all(|r| r.valid),
        errors,
        warnings,
        results,
        skipped,
    }
}

impl Report {
    /// 2 when an input could not be read, 1 when any is invalid, else 0.
    pub fn exit(&self) -> Exit {
        if self.results.iter().any(|r| r.kind == InputKind::Unreadable) {
            Exit::Usage
        } else if self.valid {
            Exit::Ok
        } else {
            Exit::Failure
        }
    }

    /// The compiler-style text report; `verbose` lists the skipped files of a directory.
    pub fn to_text(&self, style: &Styler, print_effective: bool, verbose: bool) -> String {
        let mut out = String::new();
        for entry in &self.results {
            let label = entry_label(entry);
            for diag in &entry.raw {
                out.push_str(&render_diagnostic(
                    style,
                    &entry.path,
                    entry.source.as_deref().map(String::as_str),
                    diag,
                ));
            }
            out.push_str(&format!(
                "{}: {}\n",
                style.bold(&label),
                verdict(entry, style)
            ));
            out.push_str(&memory_note(entry));
            if let Some(policy) = entry.egress_nat_policy.as_ref().filter(|_| entry.valid) {
                out.push_str(&format!(
                    "  keeps the pod's address (NoSNAT) for: {}\n",
                    policy.destinations.join(", ")
                ));
            }
            out.push_str(&merged_listing(entry, &label));
            if print_effective {
                if let Some(config) = &entry.effective {
                    out.push_str(&format!("# effective config of {label}\n"));
                    out.push_str(&config.to_yaml());
                }
            }
        }
        if verbose {
            for skipped in &self.skipped {
                out.push_str(&format!(
                    "{}: skipped, {}\n",
                    style.bold(&skipped.path),
                    skipped.reason
                ));
            }
        }
        if self.results.len() > 1 || !self.skipped.is_empty() {
            let valid = self.results.iter().filter(|r| r.valid).count();
            out.push_str(&format!(
                "{} checked: {valid} valid, {} invalid{}\n",
                plural(self.results.len(), "config"),
                self.results.len() - valid,
                skipped_note(self.skipped.len(), verbose)
            ));
        }
        out
    }
}

/// The summary's word on skipped files: how many, and where the reasons are.
fn skipped_note(skipped: usize, verbose: bool) -> String {
    match (skipped, verbose) {
        (0, _) => String::new(),
        (n, true) => format!(
            "; {} skipped (not ip-masq-agent configs)",
            plural(n, "file")
        ),
        (n, false) => format!(
            "; {} skipped (not ip-masq-agent configs; -v says which and why)",
            plural(n, "file")
        ),
    }
}

/// How an entry is named in the report: its path, and the ConfigMap and document it is.
fn entry_label(entry: &ConfigReport) -> String {
    if let Some(keys) = &entry.config_maps {
        let names: Vec<String> = keys
            .iter()
            .map(|k| match &k.name {
                Some(name) => format!(
                    "{}{name} key {}",
                    k.namespace
                        .as_deref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default(),
                    k.key
                ),
                None => k.file.clone().unwrap_or_else(|| k.key.clone()),
            })
            .collect();
        return format!(
            "{} (ConfigMap {} merged as --config-dir merges them)",
            entry.path,
            names.join(" + ")
        );
    }
    if let Some(node) = &entry.node {
        let mut merged: Vec<String> = node.base.iter().map(|b| format!("ConfigMap {b}")).collect();
        if node.base.is_none() {
            merged.push("the defaults".to_string());
        }
        merged.extend(node.pools.iter().map(|p| format!("pool {p}")));
        merged.extend(
            node.egress_nat_policies
                .iter()
                .map(|p| format!("EgressNATPolicy {p}")),
        );
        return format!("{} ({})", entry.path, merged.join(" + "));
    }
    if let Some(policy) = &entry.egress_nat_policy {
        return format!(
            "{} (EgressNATPolicy {}, document {})",
            entry.path,
            policy.name.as_deref().unwrap_or("(unnamed)"),
            policy.document
        );
    }
    let pool = entry.pool.as_ref().map(|p| {
        format!(
            ", node pool `{}` merged after {}",
            p.selector,
            p.base.as_deref().map_or(
                "the defaults (no valid ConfigMap ip-masq-agent in this run)".to_string(),
                |b| format!("ConfigMap {b}")
            )
        )
    });
    match &entry.config_map {
        Some(cm) => format!(
            "{} (ConfigMap {}{}, document {}{})",
            entry.path,
            cm.namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            cm.name.as_deref().unwrap_or("(unnamed)"),
            cm.document,
            pool.unwrap_or_default()
        ),
        None => entry.path.clone(),
    }
}

/// `valid`, `valid (2 warnings)`, `invalid (1 error, 0 warnings)`, `unreadable`.
fn verdict(entry: &ConfigReport, style: &Styler) -> String {
    match (entry.kind, entry.valid) {
        (InputKind::Defaults, _) => format!(
            "{} (no file: the agent runs on upstream defaults)",
            style.success("valid")
        ),
        (_, true) if entry.warnings == 0 => style.success("valid"),
        (_, true) => format!(
            "{} ({})",
            style.success("valid"),
            plural(entry.warnings, "warning")
        ),
        (InputKind::Unreadable, false) => style.error("unreadable"),
        (_, false) => format!(
            "{} ({}, {})",
            style.error("invalid"),
            plural(entry.errors, "error"),
            plural(entry.warnings, "warning")
        ),
    }
}

/// The agent's estimated peak memory per backend, from what each writes, for configs that
/// make enough rules or set elements to matter (a short list of sources can make thousands).
fn memory_note(entry: &ConfigReport) -> String {
    let (Some(peaks), Some(rendered)) = (&entry.peak_memory_mib, &entry.rendered) else {
        return String::new();
    };
    if !rendered
        .values()
        .any(|f| f.rules.max(f.set_elements) >= MEMORY_NOTE_FROM)
    {
        return String::new();
    }
    let each: Vec<String> = peaks
        .iter()
        .filter_map(|(b, m)| Some(format!("{b} {m:.1} MiB ({})", rendered.get(b)?)))
        .collect();
    format!(
        "  peak memory of the agent applying this config (estimate, from what each backend writes): {}; the shipped DaemonSet allows 64 MiB\n",
        each.join(", ")
    )
}

/// `--merged`: every entry of the merged config with the file and line it came from.
fn merged_listing(entry: &ConfigReport, label: &str) -> String {
    let mut out = String::new();
    if let Some(entries) = &entry.entries {
        out.push_str(&format!("# merged config of {label}, entry by entry\n"));
        let mut current = None;
        for e in entries {
            if current != Some(e.list) {
                out.push_str(&format!("{}:\n", e.list.key()));
                current = Some(e.list);
            }
            let place = crate::config::Place {
                file: e.file.as_deref().map(Into::into),
                location: e.line.map(|line| crate::config::yaml::Location {
                    line,
                    column: e.column.unwrap_or(1),
                    ..Default::default()
                }),
            };
            out.push_str(&format!("  - {:<20} # {place}\n", e.cidr));
        }
        if entry.entries.as_ref().is_some_and(|e| {
            !e.iter()
                .any(|x| x.list == crate::config::ListName::NonMasquerade)
        }) {
            out.push_str("nonMasqueradeCIDRs: [] # no file lists any\n");
        }
        if let Some(config) = &entry.effective {
            let kept_from_defaults = !config.provenance.gave_non_masquerade_cidrs
                && !config.non_masquerade_cidrs.is_empty();
            if kept_from_defaults {
                out.push_str(
                    "# nonMasqueradeCIDRs above are upstream's defaults: no ip-masq* file is there\n",
                );
            }
            out.push_str(&format!(
                "cidrLimit: {}\nmasqLinkLocal: {}\nmasqLinkLocalIPv6: {}\nresyncInterval: {}\n",
                config.cidr_limit,
                config.masq_link_local,
                config.masq_link_local_ipv6,
                config.resync_interval
            ));
        }
    }
    out
}

/// Runs `ipmasq validate`.
pub fn run(args: &ValidateArgs) -> Exit {
    let report = build_report(args);
    let text = match args.output {
        OutputFormat::Json => to_json(&report),
        OutputFormat::Yaml => crate::output::to_yaml(&report),
        OutputFormat::Text => report.to_text(
            &Styler::for_stdout(args.color),
            args.print_effective,
            args.verbose,
        ),
    };
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return Exit::Usage;
    }
    report.exit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values docs/reference/validate-json.md lists for `field`: the first backquoted
    /// word of each line under its `- `FIELD`: one of` item.
    fn documented_values(doc: &str, field: &str) -> std::collections::BTreeSet<String> {
        let head = format!("- `{field}`: one of");
        let mut lines = doc.lines().skip_while(|l| !l.starts_with(&head));
        assert!(
            lines.next().is_some(),
            "validate-json.md has no `{head}` item"
        );
        lines
            .take_while(|l| l.starts_with("  `"))
            .filter_map(|l| l.split('`').nth(1))
            .map(str::to_string)
            .collect()
    }

    /// How the report spells `value` (a unit enum).
    fn spelt<T: Serialize>(value: T) -> String {
        serde_json::to_value(value)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .expect("a string")
    }

    /// docs/reference/validate-json.md lists exactly the values the report's closed fields
    /// can hold: each `outcome`, `kind` and `severity`. The matches below are exhaustive, so a
    /// new variant does not compile until it is added to its list here, and then this test
    /// fails until the reference lists it.
    #[test]
    fn the_json_reference_lists_every_outcome_kind_and_severity() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/reference/validate-json.md"
        ))
        .expect("docs/reference/validate-json.md");
        let outcomes = [Outcome::Valid, Outcome::Invalid, Outcome::Unreadable];
        for o in outcomes {
            match o {
                Outcome::Valid | Outcome::Invalid | Outcome::Unreadable => {}
            }
        }
        let kinds = [
            InputKind::Config,
            InputKind::Configmap,
            InputKind::Defaults,
            InputKind::Merged,
            InputKind::Unreadable,
            InputKind::Egressnatpolicy,
        ];
        for k in kinds {
            match k {
                InputKind::Config
                | InputKind::Configmap
                | InputKind::Defaults
                | InputKind::Merged
                | InputKind::Unreadable
                | InputKind::Egressnatpolicy => {}
            }
        }
        let severities = [Severity::Error, Severity::Warning, Severity::Info];
        for s in severities {
            match s {
                Severity::Error | Severity::Warning | Severity::Info => {}
            }
        }
        let in_code = |values: Vec<String>| values.into_iter().collect();
        let cases: [(&str, std::collections::BTreeSet<String>); 3] = [
            ("results[].outcome", in_code(outcomes.map(spelt).to_vec())),
            ("results[].kind", in_code(kinds.map(spelt).to_vec())),
            (
                "results[].diagnostics[].severity",
                in_code(severities.map(spelt).to_vec()),
            ),
        ];
        for (field, values) in cases {
            assert_eq!(
                documented_values(&doc, field),
                values,
                "docs/reference/validate-json.md lists other values of {field} than the code has"
            );
        }
    }

    /// Every diagnostic code, taken from the one list that defines them, is spelt one way in
    /// the text report, the agent's log line, the JSON and YAML reports, the reference of
    /// codes and the manual; and no two codes share a spelling.
    #[test]
    fn every_code_has_one_spelling_everywhere() {
        let reference = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/reference/diagnostics.md"
        ))
        .expect("docs/reference/diagnostics.md");
        let manual = crate::cli::config_page::config_page("test");
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            let spelling = code.as_str();
            assert!(seen.insert(spelling), "{spelling} spelt by two codes");
            assert!(
                !spelling.is_empty()
                    && spelling
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{spelling}: not kebab-case"
            );
            let finding = Diagnostic::error(code, "m");
            let text = render_diagnostic(&crate::output::Styler::plain(), "c.yaml", None, &finding);
            assert!(text.contains(&format!("[{spelling}]")), "text: {text}");
            assert!(finding.one_line().contains(&format!("[{spelling}]")));
            let json = to_json(&JsonDiagnostic::from(&finding));
            assert!(
                json.contains(&format!("\"code\": \"{spelling}\"")),
                "JSON spells {spelling} otherwise: {json}"
            );
            let yaml = crate::output::to_yaml(&JsonDiagnostic::from(&finding));
            assert!(
                yaml.lines().any(|l| l == format!("code: {spelling}")),
                "YAML spells {spelling} otherwise: {yaml}"
            );
            assert!(
                reference.contains(&format!("| `{spelling}` |")),
                "docs/reference/diagnostics.md does not list `{spelling}` (run `cargo run -- generate .`)"
            );
            assert!(
                manual.contains(&crate::cli::docs::roff_text(spelling)),
                "ipmasq-config(5) does not list {spelling}"
            );
        }
    }
}
