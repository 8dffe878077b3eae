//! Findings about a config: errors (the config is rejected) and warnings (accepted, but worth a
//! look), each with a stable code, a location in the source and an optional hint.

use super::yaml::Location;
use serde::Serialize;

/// How serious a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    /// Worth knowing, never a problem (not even with `validate --strict`).
    Info,
}

/// Makes, from one list, the enum [`Code`], [`Code::ALL`] (in the list's order, the manual's),
/// the one spelling of each code ([`Code::as_str`], which text, JSON and YAML all print) and
/// its severity and meaning ([`Code::describe`], for the manual) and what to do about it
/// ([`Code::action`]): a new code is one new entry in the list, so no output can spell it
/// another way and no listing (the manuals, docs/reference/diagnostics.md) can miss it.
macro_rules! codes {
    ($($(#[$doc:meta])* $code:ident = $text:literal, $severity:ident, $meaning:expr, $action:expr;)*) => {
        /// Stable identifiers of findings; part of the documented JSON report, never renamed.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Code {
            $($(#[$doc])* $code,)*
        }

        impl Code {
            /// Every code, in documentation order.
            pub const ALL: [Code; [$(stringify!($code)),*].len()] = [$(Code::$code),*];

            /// The severity a finding with this code has (before `validate --strict`), and
            /// what it means, for the manual.
            pub fn describe(self) -> (Severity, &'static str) {
                match self {
                    $(Code::$code => (Severity::$severity, $meaning),)*
                }
            }

            /// What to do about a finding with this code, for the reference of codes.
            pub fn action(self) -> &'static str {
                match self {
                    $(Code::$code => $action,)*
                }
            }

            /// The code as text, JSON and YAML output, the README and the manual spell it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$code => $text,)*
                }
            }
        }
    };
}

codes! {
    Io = "io", Error,
        "the file or directory cannot be read (missing when named explicitly, a FIFO, a directory, over 8 MiB, not UTF-8)",
        "check the path, its permissions and its type (a regular UTF-8 file under 8 MiB); in a pipe, check the command before it";
    YamlSyntax = "yaml-syntax", Error,
        "not YAML or JSON",
        "fix the syntax at the position shown (indentation, an unclosed bracket or quote)";
    NotAMapping = "not-a-mapping", Error,
        "the document is not a mapping of keys to values",
        "start the config with a key, e.g. `nonMasqueradeCIDRs: [10.0.0.0/8]`";
    UnsupportedKey = "unsupported-key", Error,
        "a key that is not a plain string",
        "write the key as a plain string";
    WrongType = "wrong-type", Error,
        "a value of the wrong type (a quoted boolean, a CIDR that is not a string, a list written as a scalar)",
        "write the value as the key expects: unquoted true or false, CIDRs as strings in a list, resyncInterval with a unit (60s)";
    InvalidCidr = "invalid-cidr", Error,
        "a CIDR that does not parse",
        "write an address and a prefix length, e.g. 10.0.0.0/8, without leading zeros";
    CidrNotAligned = "cidr-not-aligned", Error,
        "a CIDR with host bits set; the hint names the aligned block",
        "write the aligned block the hint names (host bits zero)";
    Ipv4MappedCidr = "ipv4-mapped-cidr", Error,
        "an IPv4-mapped IPv6 CIDR; the hint names the IPv4 form",
        "write the IPv4 form the hint names";
    Ipv6NotEnabled = "ipv6-not-enabled", Error,
        "an IPv6 CIDR without --enable-ipv6 or enableIPv6: true",
        "start the agent with --enable-ipv6 (or set enableIPv6: true), or delete the IPv6 CIDR";
    CidrLimitExceeded = "cidr-limit-exceeded", Error,
        "more CIDRs (non-masquerade plus forced) than cidrLimit",
        "merge ranges, or raise cidrLimit";
    NegativeCidrLimit = "negative-cidr-limit", Error,
        "a negative cidrLimit",
        "set cidrLimit to 0 or more (64 is the default)";
    InvalidDuration = "invalid-duration", Error,
        "a resyncInterval that is not a Go duration",
        "write a Go duration: a number with a unit, e.g. 60s or 1m30s";
    NonPositiveDuration = "non-positive-duration", Error,
        "a zero or negative resyncInterval",
        "write a positive duration, e.g. 60s";
    LinkLocalConflict = "link-local-conflict", Error,
        "linkLocal contradicts masqLinkLocal",
        "delete linkLocal and keep masqLinkLocal";
    /// An `outputAddress[IPv6]` that is no address or prefix of its family.
    InvalidOutputAddress = "invalid-output-address", Error,
        "an outputAddress or outputAddressIPv6 that is not an address or aligned prefix of its family",
        "write one address, or an aligned prefix, of the key's family";
    /// An `outputInterfaces` entry that is no interface name or pattern.
    InvalidInterface = "invalid-interface", Error,
        "an outputInterfaces entry that is not an interface name, with an optional trailing + or * wildcard",
        "write an interface name of at most 15 bytes, without / or : or white space, optionally ending in + or *";
    /// A pod share's count or rate outside its bounds.
    PodShareOutOfRange = "pod-share-out-of-range", Error,
        "podConnectionLimit, podNewConnectionRate or podNewConnectionBurst outside its bounds (1 to 1,000,000 connections; 1/s to 100,000/s; a burst of 1 to 100,000)",
        "write a count within the bounds the message names, or delete the key for no limit";
    /// A burst or a per-destination scope without the rate it shapes.
    PodShareWithoutRate = "pod-share-without-rate", Error,
        "podNewConnectionBurst or podNewConnectionRatePerDestination without podNewConnectionRate: they shape a rate that is not there",
        "add podNewConnectionRate (e.g. \"200/s\"), or delete the key";
    /// Merged files (or a pool and its base) give different pod shares.
    PodShareConflict = "pod-share-conflict", Error,
        "merged files, or a node pool and its base, that give different pod shares (podConnectionLimit, podNewConnectionRate and its burst and scope)",
        "give the pod share's keys in one file of the directory, or in the base or one pool only";
    /// Merged files name different output addresses of one family.
    OutputAddressConflict = "output-address-conflict", Error,
        "merged files that name different output addresses of one family",
        "name one output address per family across the merged files";
    /// The same CIDR is both forced and non-masquerade (in one file or across merged files).
    ForcedAndKept = "forced-and-kept", Error,
        "one CIDR both in forceMasqueradeCIDRs and nonMasqueradeCIDRs (also across merged files)",
        "keep the CIDR in one of the two lists only";
    NoConfigMap = "no-configmap", Error,
        "a manifest named on the command line (or on stdin) with no ConfigMap holding data.config or ip-masq* keys, nor one named ip-masq-agent; in a directory such a manifest is skipped",
        "pass the agent's config file, or the manifest holding its ConfigMap";
    ConfigMapWithoutConfig = "configmap-without-config", Error,
        "a ConfigMap without data.config",
        "put the config under data.config, the key the DaemonSet mounts";
    /// A ConfigMap with one key in both `data` and `binaryData`.
    ConfigMapKeyTwice = "configmap-key-twice", Error,
        "a ConfigMap with one key in both data and binaryData, which the API server refuses",
        "keep the key in data or in binaryData, not both";
    /// A node pool's `ipmasq.io/node-selector` that is no Kubernetes label selector.
    InvalidNodeSelector = "invalid-node-selector", Error,
        "a pool ConfigMap's ipmasq.io/node-selector annotation that is not a Kubernetes label selector (kubectl -l's syntax); the message says the column and what was expected",
        "write the selector as kubectl -l takes it, e.g. pool=gpu";
    /// An EgressNATPolicy that is not GKE's shape (destinations as strings, no spec...).
    EgressNatPolicyShape = "egress-nat-policy-shape", Error,
        "an EgressNATPolicy not in GKE's shape: no spec, action or destinations, or destinations written as strings (destinations: [10.0.0.0/8]) instead of objects ([{cidr: 10.0.0.0/8}])",
        "write GKE's shape: spec.action NoSNAT and spec.destinations as [{cidr: 10.0.0.0/8}]";
    /// An EgressNATPolicy action other than NoSNAT.
    EgressNatPolicyAction = "egress-nat-policy-action", Error,
        "an EgressNATPolicy whose action is not NoSNAT, the only one GKE's policy has",
        "write action: NoSNAT";
    /// Nothing at all to check (an empty pipe: the command before it failed).
    EmptyInput = "empty-input", Error,
        "nothing on standard input (did the command before the pipe fail?)",
        "check the command that feeds the pipe (set -o pipefail), or pass the file itself";
    /// `ipmasq.io/node-selector` on a ConfigMap that cannot be a pool: the agent ignores it.
    IgnoredNodeSelector = "ignored-node-selector", Warning,
        "ipmasq.io/node-selector on a ConfigMap not named ip-masq-agent-*: it is no node pool, and the agent ignores the annotation (the base ConfigMap ip-masq-agent applies to every node)",
        "put the pool's config in a ConfigMap named ip-masq-agent-<pool> with the annotation, or delete the annotation";
    /// An `ipmasq.io/rollout-*` annotation of the next config's ConfigMap that the agents cannot
    /// read: they keep the base, and the rollout never starts.
    RolloutAnnotation = "rollout-annotation", Error,
        "an ipmasq.io/rollout-* annotation of ip-masq-agent-next (a rollout in waves) is missing or not what it must be: the agents ignore the rollout and keep the base",
        "write the rollout with `ipmasq fleet rollout start`, or fix the annotation as the message says (waves like 1,10,50,100; soak like 10m; start in RFC 3339)";
    /// A resync interval below the floor; the floor is used.
    ResyncBelowFloor = "resync-below-floor", Warning,
        "a resyncInterval under 100ms; 100ms is used",
        "write a resyncInterval of 100ms or more";
    UnknownKey = "unknown-key", Warning,
        "a key the agent does not read: ignored, as upstream ignores it, so the config applies without it and a key not given keeps its default; the hint suggests the closest known key",
        "fix the spelling as the hint suggests, or delete the key";
    KeyCase = "key-case", Warning,
        "a key spelt in another case than the canonical one",
        "write the key as the hint spells it";
    DuplicateKey = "duplicate-key", Warning,
        "a key given twice; the last wins",
        "delete the earlier entry";
    ExtraDocument = "extra-document", Warning,
        "more than one YAML document; only the first is read",
        "delete from the `---` or `...` that ends the first document to the end of the file, or merge the documents";
    Yaml11Boolean = "yaml11-boolean", Warning,
        "a YAML 1.1 boolean such as yes or on",
        "write true or false";
    DuplicateCidr = "duplicate-cidr", Warning,
        "a CIDR listed twice",
        "delete the repeated entry";
    CoveredCidr = "covered-cidr", Warning,
        "a CIDR inside another listed one",
        "delete the narrower entry: the wider one decides the same for all of it";
    PaddedPrefix = "padded-prefix", Warning,
        "a prefix length with a leading zero",
        "drop the leading zero of the prefix length";
    EmptyCidrList = "empty-cidr-list", Warning,
        "nonMasqueradeCIDRs is empty: everything but link-local is masqueraded",
        "list the ranges to keep, or delete the key to keep the defaults";
    DeprecatedLinkLocal = "deprecated-link-local", Warning,
        "non-masquerade-daemon's linkLocal key",
        "write masqLinkLocal as the hint shows, and delete linkLocal";
    /// A forced CIDR that lies in no non-masquerade range changes nothing.
    ForcedWithoutEffect = "forced-without-effect", Warning,
        "a forced CIDR in no non-masquerade range: it changes nothing",
        "delete the forced CIDR, or list the non-masquerade range it is meant to carve out of";
    /// `masqueradeSourceCIDRs` is given but empty: every source is considered.
    EmptySourceList = "empty-source-list", Warning,
        "masqueradeSourceCIDRs is empty: every source is considered",
        "list the pod ranges to masquerade from, or delete the key";
    /// `masqueradeSourceCIDRs` has no range of a managed family: that family is not scoped.
    SourceFamilyUnscoped = "source-family-unscoped", Warning,
        "masqueradeSourceCIDRs has no range of a managed family: that family is not scoped",
        "add a range of that family, if its sources should be scoped too";
    Ipv6FlagOverridesFile = "ipv6-flag-overrides-file", Warning,
        "enableIPv6 in the file says otherwise than an explicit --enable-ipv6, which wins",
        "make enableIPv6 agree with --enable-ipv6, or drop one of them";
    /// A directory of configs holds no `ip-masq*` file: upstream's defaults apply.
    NoConfigFiles = "no-config-files", Warning,
        "a --config-dir without ip-masq* files: the defaults apply",
        "put an ip-masq* file in the directory, or accept the defaults";
    /// Input ipmasq reads but upstream ip-masq-agent rejects (a file starting with `{` that is
    /// not strict JSON): after a rollback to upstream that node installs no rules.
    UpstreamRejects = "upstream-rejects", Warning,
        "a file upstream ip-masq-agent rejects: it starts with `{`, so upstream parses it as strict JSON (a YAML flow map, a trailing comma, a comment, a cidrLimit of 64.0 or 1e2)",
        "write block YAML or strict JSON, so a node rolled back to upstream keeps its rules";
    /// `outputInterfaces` is given but empty: traffic leaving every interface is considered.
    EmptyInterfaceList = "empty-interface-list", Warning,
        "outputInterfaces is empty: traffic leaving every interface is considered",
        "list the interfaces, or delete the key";
    /// `outputAddressIPv6` without IPv6 managed: it has no effect.
    OutputAddressUnused = "output-address-unused", Warning,
        "outputAddressIPv6 while IPv6 is not managed: it has no effect",
        "enable IPv6 (--enable-ipv6), or delete outputAddressIPv6";
    /// An interface pattern inside another listed one.
    CoveredInterface = "covered-interface", Warning,
        "an outputInterfaces entry inside another listed pattern",
        "delete the narrower pattern";
    /// `validate` on a node: this node holds no address the output address names.
    OutputAddressNotHere = "output-address-not-here", Info,
        "validate on a node: this node holds no address the output address names (the agent would refuse the config here)",
        "check that the address is this node's; on a CI runner, pass --no-node-checks";
    /// `validate` on a node: the output address is on no listed interface's subnet.
    OutputAddressOffInterfaces = "output-address-off-interfaces", Warning,
        "validate on a node: the output address is on none of the listed interfaces",
        "pick an address on one of the listed interfaces, or list its interface";
    /// A key upstream ip-masq-agent does not read.
    IpmasqExtension = "ipmasq-extension", Info,
        "a key upstream ip-masq-agent does not read (forceMasqueradeCIDRs, masqueradeSourceCIDRs, enableIPv6, outputAddress, outputAddressIPv6, outputInterfaces)",
        "nothing, unless the config must also work with upstream ip-masq-agent, which ignores the key";
    /// A ConfigMap key read as one file of a `--config-dir` merge (ip-masq-agent-v2).
    ConfigDirKey = "config-dir-key", Info,
        "a ConfigMap key starting with ip-masq, read as one file of a --config-dir merge (ip-masq-agent-v2); upstream's v1 DaemonSet mounts only data.config",
        "nothing with ip-masq-agent-v2 or ipmasq agent --config-dir; upstream's v1 DaemonSet reads only data.config";
    /// `validate` on a node: an `outputInterfaces` entry matches no interface here.
    InterfaceNotHere = "interface-not-here", Info,
        "validate on a node: an outputInterfaces entry matches no interface here (nodes differ)",
        "nothing when other nodes have it; on a CI runner, pass --no-node-checks";
}

impl Serialize for Code {
    /// The one spelling, [`Code::as_str`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Findings of one code listed before the rest are folded into one line ("and N more"): a
/// file with 52,000 duplicate keys makes 10 warnings and a count, not 52,000 log lines.
pub const SHOWN_PER_CODE: usize = 10;
/// The longest message or hint kept, in characters: text quoted from the file (a key, a
/// CIDR) is cut there, so a 100 kB key never makes a 100 kB log line.
pub const MAX_TEXT_CHARS: usize = 240;

/// `text` with control characters escaped (a key in the file cannot drive the terminal that
/// shows the finding), cut to [`MAX_TEXT_CHARS`] characters, marked with an ellipsis and how
/// much was cut.
pub fn clip(text: String) -> String {
    let text = match crate::text::printable(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
    };
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        None => text,
        Some((end, _)) => {
            let cut = text.len() - end;
            format!("{}… ({cut} more bytes)", &text[..end])
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    pub location: Option<Location>,
    pub hint: Option<String>,
    /// The file the location is in, when one report covers several files (a merged dir).
    pub file: Option<std::sync::Arc<str>>,
    /// When this line stands for findings that were not listed (see [`fold_repeats`]): how
    /// many. 0 for an ordinary finding.
    pub folded: usize,
    /// The line of the same text that the message cites as [`cite_line`] spells it (the
    /// first of two duplicate keys): moved with the finding's own position when a config
    /// embedded in a manifest is placed in the manifest (see [`Diagnostic::relocate`]). A line
    /// number, not a [`Location`], keeps a finding small: it is an `Err` in many results.
    pub cited_line: Option<std::num::NonZeroU32>,
}

/// How a message cites another line of the text it is about: `line 12`. Every finding that
/// names a line spells it so, and records the place in [`Diagnostic::cited`], so the line can
/// be placed in the file that embeds the text.
pub fn cite_line(location: Location) -> String {
    format!("line {}", location.line)
}

impl Diagnostic {
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: clip(message.into()),
            location: None,
            hint: None,
            file: None,
            folded: 0,
            cited_line: None,
        }
    }

    pub fn warning(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    pub fn info(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Info,
            ..Diagnostic::error(code, message)
        }
    }

    /// Names the file the location is in.
    pub fn in_file(mut self, file: std::sync::Arc<str>) -> Self {
        self.file = Some(file);
        self
    }

    pub fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }

    pub fn at_opt(mut self, location: Option<Location>) -> Self {
        self.location = location;
        self
    }

    /// Records the place its message cites with [`cite_line`].
    pub fn cites(mut self, location: Option<Location>) -> Self {
        self.cited_line = location
            .and_then(|l| u32::try_from(l.line).ok())
            .and_then(std::num::NonZeroU32::new);
        self
    }

    /// Places the finding in the text that embeds the one it was found in: its position, and
    /// the line its message cites, through `place` (the outer position, and whether it is
    /// exact: when not, the message says where inside `inner_name` it is).
    pub fn relocate(&mut self, inner_name: &str, place: impl Fn(Location) -> (Location, bool)) {
        if let Some(line) = self.cited_line {
            let inner = Location {
                line: line.get() as usize,
                column: 1,
                ..Location::default()
            };
            let (outer, exact) = place(inner);
            let old = cite_line(inner);
            let new = if exact {
                cite_line(outer)
            } else {
                format!("{old} of {inner_name}")
            };
            if let Some(at) = self.message.rfind(&old) {
                self.message.replace_range(at..at + old.len(), &new);
            }
            if exact {
                self.cited_line = u32::try_from(outer.line)
                    .ok()
                    .and_then(std::num::NonZeroU32::new);
            }
        }
        if let Some(inner) = self.location {
            let (outer, exact) = place(inner);
            self.location = Some(outer);
            if !exact {
                self.message = format!(
                    "{} (line {}, column {} of {inner_name})",
                    self.message, inner.line, inner.column
                );
            }
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(clip(hint.into()));
        self
    }

    /// How many findings this line counts for: itself, or the ones it folds.
    pub fn count(&self) -> usize {
        self.folded.max(1)
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// `line:col: [code] message` (no position when it has none) for one-line logs.
    pub fn one_line(&self) -> String {
        let code = self.code.as_str();
        let file = self
            .file
            .as_deref()
            .map(|f| format!("{f}:"))
            .unwrap_or_default();
        let mut out = match self.location {
            Some(l) => format!("{file}{}:{}: [{code}] {}", l.line, l.column, self.message),
            None => format!("{file}[{code}] {}", self.message),
        };
        if let Some(hint) = &self.hint {
            out.push_str(" (");
            out.push_str(hint);
            out.push(')');
        }
        out
    }
}

/// How long a list of findings may grow before its repeats are folded while checking.
const FOLD_AT: usize = 1024;

/// Adds a finding; when the list has grown long, folds its repeats at once, so a file with
/// 200,000 bad entries never holds 200,000 findings (amortised: one linear fold per 1,024
/// findings added at the most, and a fold leaves far fewer).
pub fn push_finding(diagnostics: &mut Vec<Diagnostic>, finding: Diagnostic) {
    diagnostics.push(finding);
    if diagnostics.len() >= FOLD_AT {
        fold_repeats(diagnostics);
    }
}

/// Keeps the first [`SHOWN_PER_CODE`] findings of each code and folds the rest of that code into
/// one line that says how many there were (at the first one left out, with its severity), so
/// validity and counts are unchanged. Lines folded before are folded again, never twice.
/// One pass, linear in the number of findings.
pub fn fold_repeats(diagnostics: &mut Vec<Diagnostic>) {
    use std::collections::HashMap;
    let mut shown: HashMap<Code, usize> = HashMap::new();
    // Per code: the first finding left out (or an earlier fold) and how many are left out.
    let mut left_out: HashMap<Code, (Diagnostic, usize)> = HashMap::new();
    let mut order = Vec::new();
    diagnostics.retain(|d| {
        let listed = shown.entry(d.code).or_default();
        if d.folded == 0 && *listed < SHOWN_PER_CODE {
            *listed += 1;
            return true;
        }
        match left_out.get_mut(&d.code) {
            Some((first, n)) => {
                *n += d.count();
                if d.severity < first.severity {
                    first.severity = d.severity;
                }
            }
            None => {
                order.push(d.code);
                left_out.insert(d.code, (d.clone(), d.count()));
            }
        }
        false
    });
    for code in order {
        let Some((first, n)) = left_out.remove(&code) else {
            continue;
        };
        let mut line = Diagnostic {
            message: format!(
                "and {n} more [{}] finding{} like the ones above, not listed",
                code.as_str(),
                if n == 1 { "" } else { "s" }
            ),
            hint: Some(format!(
                "only the first {SHOWN_PER_CODE} of each kind are listed; fix those and check again"
            )),
            folded: n,
            ..first
        };
        if line.folded == 0 {
            line.folded = 1;
        }
        diagnostics.push(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_fold_into_one_counted_line() {
        let mut diags: Vec<Diagnostic> = (0..52_422)
            .map(|i| Diagnostic::warning(Code::DuplicateKey, format!("dup {i}")))
            .chain(std::iter::once(Diagnostic::error(Code::InvalidCidr, "bad")))
            .collect();
        fold_repeats(&mut diags);
        assert_eq!(diags.len(), SHOWN_PER_CODE + 2);
        let total: usize = diags.iter().map(Diagnostic::count).sum();
        assert_eq!(total, 52_423);
        let fold = diags.last().unwrap();
        assert_eq!(fold.code, Code::DuplicateKey);
        assert!(
            fold.message.starts_with("and 52412 more"),
            "{}",
            fold.message
        );
        // Folding again changes nothing.
        let before = diags.clone();
        fold_repeats(&mut diags);
        assert_eq!(diags, before);
    }

    #[test]
    fn long_text_is_clipped() {
        let d = Diagnostic::warning(Code::UnknownKey, "k".repeat(100_000)).hint("h".repeat(5_000));
        assert!(
            d.message.chars().count() < MAX_TEXT_CHARS + 40,
            "{}",
            d.message.len()
        );
        assert!(
            d.message.ends_with("(99760 more bytes)"),
            "{}",
            &d.message[200..]
        );
        assert!(d.hint.unwrap().len() < MAX_TEXT_CHARS + 40);
        let short = Diagnostic::warning(Code::UnknownKey, "short");
        assert_eq!(short.message, "short");
    }
}
