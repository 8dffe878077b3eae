//! The agent's configuration: upstream ip-masq-agent's file model (keys, defaults, YAML 1.1 and
//! JSON), read once and checked into a typed [`Config`] plus diagnostics. `agent` and
//! `validate` share this one path, so they can never disagree about a file.

mod check;
pub mod cidr;
pub mod composed;
mod diagnostic;
pub mod digest;
pub mod duration;
pub mod egress;
pub mod egress_nat;
pub mod manifest;
pub mod merge;
pub mod pod_share;
pub mod pool;
pub mod rollout;
pub mod selector;
mod source;
pub mod yaml;

pub use check::{
    check_document, check_parsed, check_text, check_text_within, names_a_config_key, suggest_key,
    supported_keys,
};
pub use diagnostic::{Code, Diagnostic, Severity};
pub use duration::{parse_go_duration, GoDuration};
pub use source::{
    file_stamp, read_config_source, read_limited, read_source, read_source_unless_unchanged,
    ConfigText, FileStamp, ReadCache, ReadError, SourceText, BYTE_ORDER_MARK, MAX_CONFIG_BYTES,
};

use ipnet::IpNet;
use serde::Serialize;
use std::path::Path;

/// Where upstream's DaemonSet mounts the ConfigMap key `config`.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/config/ip-masq-agent";
/// IPv4 link-local, non-masquerade unless `masqLinkLocal: true`.
pub const LINK_LOCAL_V4: &str = "169.254.0.0/16";
/// IPv6 link-local (RFC 4291), non-masquerade unless `masqLinkLocalIPv6: true`.
pub const LINK_LOCAL_V6: &str = "fe80::/10";
/// RFC 1918 private ranges: the default non-masquerade list.
pub const RFC1918_RANGES: [&str; 3] = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];
/// Added to the defaults by `--nomasq-all-reserved-ranges`, in upstream's order.
pub const RESERVED_RANGES: [&str; 8] = [
    "100.64.0.0/10",   // RFC 6598
    "192.0.0.0/24",    // RFC 6890
    "192.0.2.0/24",    // RFC 5737
    "192.88.99.0/24",  // RFC 7526
    "198.18.0.0/15",   // RFC 6815
    "198.51.100.0/24", // RFC 5737
    "203.0.113.0/24",  // RFC 5737
    "240.0.0.0/4",     // RFC 5735, former class E
];
/// Default `cidrLimit`.
pub const DEFAULT_CIDR_LIMIT: i64 = 64;
/// The shortest `resyncInterval` the agent uses (a shorter one is raised to it, with a
/// warning): below it a pass would run back to back and burn a core.
pub const MIN_RESYNC_INTERVAL: GoDuration = GoDuration(100_000_000);
/// Default `resyncInterval`: 60s.
pub const DEFAULT_RESYNC_INTERVAL: GoDuration = GoDuration(60_000_000_000);

/// The agent flags that change how a config is judged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `--enable-ipv6`: IPv6 CIDRs are allowed (and ip6tables is managed).
    pub enable_ipv6: bool,
    /// `--enable-ipv6` was given on the command line: it wins over `enableIPv6` in the file
    /// (otherwise the file's value, when it has one, decides).
    pub enable_ipv6_given: bool,
    /// `--nomasq-all-reserved-ranges`: the default list also holds the reserved ranges.
    pub nomasq_all_reserved_ranges: bool,
    /// The file is one part of a merged directory: `cidrLimit` and the checks across lists
    /// run on the merged config instead.
    pub merging: bool,
    /// `--resync-interval` (ip-masq-agent-v2's flag): the interval when no config sets one.
    pub default_resync_interval: Option<GoDuration>,
}

/// A validated configuration: every CIDR parsed and aligned, limits respected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// In config order, duplicates kept as written (upstream writes one rule per entry).
    #[serde(rename = "nonMasqueradeCIDRs")]
    pub non_masquerade_cidrs: Vec<IpNet>,
    pub cidr_limit: i64,
    pub masq_link_local: bool,
    #[serde(rename = "masqLinkLocalIPv6")]
    pub masq_link_local_ipv6: bool,
    #[serde(serialize_with = "serialize_go_duration")]
    pub resync_interval: GoDuration,
    /// ipmasq extension: destinations masqueraded even inside a non-masquerade range (the
    /// longest matching prefix across both lists wins). In config order, duplicates dropped.
    #[serde(rename = "forceMasqueradeCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub force_masquerade_cidrs: Vec<IpNet>,
    /// ipmasq extension: when not empty, only traffic from these ranges is masqueraded.
    #[serde(
        rename = "masqueradeSourceCIDRs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub masquerade_source_cidrs: Vec<IpNet>,
    /// ipmasq extension: IPv6 is managed, from `enableIPv6` in the file or `--enable-ipv6`
    /// (an explicit flag wins). Written out only when on.
    #[serde(rename = "enableIPv6", skip_serializing_if = "std::ops::Not::not")]
    pub enable_ipv6: bool,
    /// ipmasq extension: IPv4 traffic that would be masqueraded is SNATed to this address (or
    /// to the node's own address inside this prefix) instead.
    #[serde(rename = "outputAddress", skip_serializing_if = "Option::is_none")]
    pub output_address: Option<egress::EgressTarget>,
    /// ipmasq extension: the same for IPv6.
    #[serde(rename = "outputAddressIPv6", skip_serializing_if = "Option::is_none")]
    pub output_address_ipv6: Option<egress::EgressTarget>,
    /// ipmasq extension: when not empty, only traffic leaving these interfaces is masqueraded.
    /// Sorted, without repeats.
    #[serde(rename = "outputInterfaces", skip_serializing_if = "Vec::is_empty")]
    pub output_interfaces: Vec<egress::InterfacePattern>,
    /// ipmasq extension: each pod address's share of the node's egress (`podConnectionLimit`,
    /// `podNewConnectionRate`, ...). Written out only when it limits something.
    #[serde(flatten)]
    pub pod_share: pod_share::PodShare,
    /// Where every entry was written and which keys were given.
    #[serde(skip)]
    pub provenance: Provenance,
}

/// Where a list entry was written: a file (when several are merged) and a position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    pub file: Option<std::sync::Arc<str>>,
    pub location: Option<yaml::Location>,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, self.location) {
            (Some(file), Some(l)) => write!(f, "{file}:{}:{}", l.line, l.column),
            (Some(file), None) => write!(f, "{file}"),
            (None, Some(l)) => write!(f, "line {}, column {}", l.line, l.column),
            (None, None) => f.write_str("the defaults"),
        }
    }
}

/// Which keys a config source set itself (a merge takes the others from the other files or
/// from the defaults), and where each list entry came from (parallel to the lists). A note
/// about a config, not part of it: two configs with the same values are equal wherever their
/// entries were written (moving a line changes no rule and is no new config).
#[derive(Clone, Debug, Default)]
pub struct Provenance {
    pub non_masquerade: Vec<Place>,
    pub force: Vec<Place>,
    pub sources: Vec<Place>,
    pub gave_non_masquerade_cidrs: bool,
    pub gave_cidr_limit: bool,
    pub gave_resync_interval: bool,
    /// Where `outputAddress`, `outputAddressIPv6` and `outputInterfaces` were written.
    pub output_address: Option<Place>,
    pub output_address_ipv6: Option<Place>,
    pub output_interfaces: Option<Place>,
    /// Where the first of the pod share's keys was written.
    pub pod_share: Option<Place>,
}

impl PartialEq for Provenance {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Provenance {}

/// Which list of the config an entry is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ListName {
    #[serde(rename = "nonMasqueradeCIDRs")]
    NonMasquerade,
    #[serde(rename = "forceMasqueradeCIDRs")]
    Force,
    #[serde(rename = "masqueradeSourceCIDRs")]
    Sources,
}

impl ListName {
    pub fn key(self) -> &'static str {
        match self {
            ListName::NonMasquerade => "nonMasqueradeCIDRs",
            ListName::Force => "forceMasqueradeCIDRs",
            ListName::Sources => "masqueradeSourceCIDRs",
        }
    }
}

impl Config {
    /// The egress value of a family (`outputAddress`, `outputAddressIPv6`).
    pub fn output_address_of(&self, v6: bool) -> Option<egress::EgressTarget> {
        if v6 {
            self.output_address_ipv6
        } else {
            self.output_address
        }
    }

    /// Where entry `index` of `list` was written.
    pub fn place(&self, list: ListName, index: usize) -> Place {
        let places = match list {
            ListName::NonMasquerade => &self.provenance.non_masquerade,
            ListName::Force => &self.provenance.force,
            ListName::Sources => &self.provenance.sources,
        };
        places.get(index).cloned().unwrap_or_default()
    }
}

fn serialize_go_duration<S: serde::Serializer>(d: &GoDuration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// The default non-masquerade CIDRs for these options.
pub fn default_cidrs(options: &Options) -> Vec<IpNet> {
    let extra: &[&str] = if options.nomasq_all_reserved_ranges {
        &RESERVED_RANGES
    } else {
        &[]
    };
    RFC1918_RANGES
        .iter()
        .chain(extra)
        .map(|c| c.parse().expect("built-in CIDRs are valid"))
        .collect()
}

impl Config {
    /// Upstream's defaults: what a missing or empty file means.
    pub fn defaults(options: &Options) -> Self {
        Config {
            non_masquerade_cidrs: default_cidrs(options),
            cidr_limit: DEFAULT_CIDR_LIMIT,
            masq_link_local: false,
            masq_link_local_ipv6: false,
            resync_interval: options
                .default_resync_interval
                .unwrap_or(DEFAULT_RESYNC_INTERVAL),
            force_masquerade_cidrs: Vec::new(),
            masquerade_source_cidrs: Vec::new(),
            enable_ipv6: options.enable_ipv6,
            output_address: None,
            output_address_ipv6: None,
            output_interfaces: Vec::new(),
            pod_share: pod_share::PodShare::default(),
            provenance: Provenance::default(),
        }
    }

    /// The resync interval as a std duration (always positive once validated).
    pub fn resync(&self) -> std::time::Duration {
        self.resync_interval
            .to_std()
            .unwrap_or(std::time::Duration::from_secs(60))
    }

    /// The effective config as YAML with upstream's key names, for `--print-effective`.
    pub fn to_yaml(&self) -> String {
        // List items indented under their key, as the README and upstream's docs write them.
        let mut options = serde_saphyr::SerializerOptions::default();
        options.compact_list_indent = false;
        serde_saphyr::to_string_with_options(self, options)
            .unwrap_or_else(|e| format!("# cannot render YAML: {e}\n"))
    }
}

/// The outcome of checking one config: the config exactly when no finding is an error (by
/// construction: there is no other way to make one), and every finding.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    config: Option<Config>,
    diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// A decoded config and the findings on the way: kept only if none is an error.
    pub fn new(candidate: Config, mut diagnostics: Vec<Diagnostic>) -> Self {
        diagnostic::fold_repeats(&mut diagnostics);
        let valid = !diagnostics.iter().any(Diagnostic::is_error);
        Checked {
            config: valid.then_some(candidate),
            diagnostics,
        }
    }

    /// No config: `diagnostics` must say why (an error is added if none does).
    pub fn rejected(mut diagnostics: Vec<Diagnostic>) -> Self {
        if !diagnostics.iter().any(Diagnostic::is_error) {
            diagnostics.push(Diagnostic::error(
                Code::Io,
                "the config was rejected without a reason (a bug in ipmasq)",
            ));
        }
        diagnostic::fold_repeats(&mut diagnostics);
        Checked {
            config: None,
            diagnostics,
        }
    }

    /// The config, present exactly when no diagnostic is an error.
    pub fn config(&self) -> Option<&Config> {
        self.config.as_ref()
    }

    pub fn into_config(self) -> Option<Config> {
        self.config
    }

    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    pub fn into_parts(self) -> (Option<Config>, Vec<Diagnostic>) {
        (self.config, self.diagnostics)
    }

    /// Rewrites the findings (positions, messages, order); an error added here rejects the
    /// config, so the invariant holds afterwards too.
    pub fn edit_diagnostics(&mut self, edit: impl FnOnce(&mut Vec<Diagnostic>)) {
        edit(&mut self.diagnostics);
        diagnostic::fold_repeats(&mut self.diagnostics);
        if self.diagnostics.iter().any(Diagnostic::is_error) {
            self.config = None;
        }
    }

    /// Rewrites where the config's list entries were written (a ConfigMap maps the positions
    /// inside its embedded config onto the manifest's text).
    pub fn edit_places(&mut self, mut edit: impl FnMut(&mut Place)) {
        if let Some(config) = &mut self.config {
            let provenance = &mut config.provenance;
            for place in provenance
                .non_masquerade
                .iter_mut()
                .chain(&mut provenance.force)
                .chain(&mut provenance.sources)
                .chain(provenance.output_address.as_mut())
                .chain(provenance.output_address_ipv6.as_mut())
                .chain(provenance.output_interfaces.as_mut())
            {
                edit(place);
            }
        }
    }

    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| !d.is_error())
    }
}

/// Where a loaded config came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// No file at the path: upstream's defaults.
    Defaults,
    /// The file's contents.
    File,
    /// The merged files of a directory.
    Dir,
    /// API mode: the base ConfigMap with the node pools that select the node and the
    /// EgressNATPolicies ([`composed::ComposedText`]).
    Composed,
}

/// Where the agent reads its config: upstream's one file, or a directory of `ip-masq*` files
/// merged (`--config-dir`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    File(std::path::PathBuf),
    Dir(std::path::PathBuf),
}

impl ConfigSource {
    pub fn path(&self) -> &Path {
        match self {
            ConfigSource::File(p) | ConfigSource::Dir(p) => p,
        }
    }
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "{}", p.display()),
            ConfigSource::Dir(p) => write!(f, "{}/{}*", p.display(), merge::PREFIX),
        }
    }
}

impl SourceText {
    /// Parses and checks what a source held, as the agent does: upstream's defaults for a
    /// missing file, a file's text checked (within the per-file parse budget of `options`),
    /// a directory's files each checked and then merged.
    pub fn check(&self, options: &Options) -> Loaded {
        match self {
            SourceText::Missing => Loaded {
                origin: ConfigOrigin::Defaults,
                checked: Checked::new(Config::defaults(options), Vec::new()),
                blank: false,
                digest: None,
            },
            SourceText::File(text) => Loaded {
                origin: ConfigOrigin::File,
                checked: check_text(text, options),
                blank: self.is_blank(),
                digest: Some(digest::sha256_hex(text.as_bytes())),
            },
            SourceText::Dir { dir, paths, texts } => Loaded {
                origin: ConfigOrigin::Dir,
                checked: merge::check_parts(dir, paths, texts, options),
                blank: false,
                digest: Some(merge::listing_digest(paths, texts)),
            },
            SourceText::Composed(composed) => Loaded {
                origin: ConfigOrigin::Composed,
                checked: composed.check(options),
                blank: false,
                digest: composed.digest(),
            },
        }
    }
}

/// Loads a source as the agent does: read (see [`read_source`]), then checked (see
/// [`SourceText::check`]).
pub fn load_source(source: &ConfigSource, options: &Options) -> Result<Loaded, ReadError> {
    Ok(read_source(source)?.check(options))
}

/// A config loaded from a path the way the agent loads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub origin: ConfigOrigin,
    pub checked: Checked,
    /// The file exists but holds nothing but white space: what a writer that truncates and
    /// then writes (`cat > file`) leaves for a moment.
    pub blank: bool,
    /// The SHA-256 of the bytes read (`sha256sum FILE`); for a merged directory, of
    /// `sha256sum`'s lines for its parts; for API mode's composed inputs, see
    /// [`composed::ComposedText::digest`]; None for the defaults.
    pub digest: Option<String>,
}
