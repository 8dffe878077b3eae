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

/// Stable identifiers of findings; part of the documented JSON report, never renamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Code {
    // Errors.
    Io,
    YamlSyntax,
    NotAMapping,
    UnsupportedKey,
    WrongType,
    InvalidCidr,
    CidrNotAligned,
    Ipv4MappedCidr,
    Ipv6NotEnabled,
    CidrLimitExceeded,
    NegativeCidrLimit,
    InvalidDuration,
    NonPositiveDuration,
    /// A resync interval below the floor; the floor is used.
    ResyncBelowFloor,
    LinkLocalConflict,
    NoConfigMap,
    ConfigMapWithoutConfig,
    // Warnings.
    UnknownKey,
    KeyCase,
    DuplicateKey,
    ExtraDocument,
    Yaml11Boolean,
    DuplicateCidr,
    CoveredCidr,
    PaddedPrefix,
    EmptyCidrList,
    DeprecatedLinkLocal,
    /// A forced CIDR that lies in no non-masquerade range changes nothing.
    ForcedWithoutEffect,
    /// `masqueradeSourceCIDRs` is given but empty: every source is considered.
    EmptySourceList,
    /// `masqueradeSourceCIDRs` has no range of a managed family: that family is not scoped.
    SourceFamilyUnscoped,
    /// The same CIDR is both forced and non-masquerade (in one file or across merged files).
    ForcedAndKept,
    /// A directory of configs holds no `ip-masq*` file: upstream's defaults apply.
    NoConfigFiles,
    // Infos.
    /// A key upstream ip-masq-agent does not read.
    IpmasqExtension,
}

impl Code {
    /// Every code, in documentation order.
    pub const ALL: [Code; 33] = [
        Code::Io,
        Code::YamlSyntax,
        Code::NotAMapping,
        Code::UnsupportedKey,
        Code::WrongType,
        Code::InvalidCidr,
        Code::CidrNotAligned,
        Code::Ipv4MappedCidr,
        Code::Ipv6NotEnabled,
        Code::CidrLimitExceeded,
        Code::NegativeCidrLimit,
        Code::InvalidDuration,
        Code::NonPositiveDuration,
        Code::LinkLocalConflict,
        Code::ForcedAndKept,
        Code::NoConfigMap,
        Code::ConfigMapWithoutConfig,
        Code::ResyncBelowFloor,
        Code::UnknownKey,
        Code::KeyCase,
        Code::DuplicateKey,
        Code::ExtraDocument,
        Code::Yaml11Boolean,
        Code::DuplicateCidr,
        Code::CoveredCidr,
        Code::PaddedPrefix,
        Code::EmptyCidrList,
        Code::DeprecatedLinkLocal,
        Code::ForcedWithoutEffect,
        Code::EmptySourceList,
        Code::SourceFamilyUnscoped,
        Code::NoConfigFiles,
        Code::IpmasqExtension,
    ];

    /// The severity a finding with this code has (before `validate --strict`), and what it
    /// means, for the manual.
    pub fn describe(self) -> (Severity, &'static str) {
        use Severity::{Error, Info, Warning};
        match self {
            Code::Io => (Error, "the file or directory cannot be read (missing when named explicitly, a FIFO, a directory, over 8 MiB, not UTF-8)"),
            Code::YamlSyntax => (Error, "not YAML or JSON"),
            Code::NotAMapping => (Error, "the document is not a mapping of keys to values"),
            Code::UnsupportedKey => (Error, "a key that is not a plain string"),
            Code::WrongType => (Error, "a value of the wrong type (a quoted boolean, a CIDR that is not a string, a list written as a scalar)"),
            Code::InvalidCidr => (Error, "a CIDR that does not parse"),
            Code::CidrNotAligned => (Error, "a CIDR with host bits set; the hint names the aligned block"),
            Code::Ipv4MappedCidr => (Error, "an IPv4-mapped IPv6 CIDR; the hint names the IPv4 form"),
            Code::Ipv6NotEnabled => (Error, "an IPv6 CIDR without --enable-ipv6"),
            Code::CidrLimitExceeded => (Error, "more CIDRs (non-masquerade plus forced) than cidrLimit"),
            Code::NegativeCidrLimit => (Error, "a negative cidrLimit"),
            Code::InvalidDuration => (Error, "a resyncInterval that is not a Go duration"),
            Code::NonPositiveDuration => (Error, "a zero or negative resyncInterval"),
            Code::LinkLocalConflict => (Error, "linkLocal contradicts masqLinkLocal"),
            Code::ForcedAndKept => (Error, "one CIDR both in forceMasqueradeCIDRs and nonMasqueradeCIDRs (also across merged files)"),
            Code::NoConfigMap => (Error, "a manifest without a ConfigMap"),
            Code::ConfigMapWithoutConfig => (Error, "a ConfigMap without data.config"),
            Code::ResyncBelowFloor => (Warning, "a resyncInterval under 100ms; 100ms is used"),
            Code::UnknownKey => (Warning, "a key the agent does not read (ignored, as upstream); the hint suggests the closest known key"),
            Code::KeyCase => (Warning, "a key spelt in another case than the canonical one"),
            Code::DuplicateKey => (Warning, "a key given twice; the last wins"),
            Code::ExtraDocument => (Warning, "more than one YAML document; only the first is read"),
            Code::Yaml11Boolean => (Warning, "a YAML 1.1 boolean such as yes or on"),
            Code::DuplicateCidr => (Warning, "a CIDR listed twice"),
            Code::CoveredCidr => (Warning, "a CIDR inside another listed one"),
            Code::PaddedPrefix => (Warning, "a prefix length with a leading zero"),
            Code::EmptyCidrList => (Warning, "nonMasqueradeCIDRs is empty: everything but link-local is masqueraded"),
            Code::DeprecatedLinkLocal => (Warning, "non-masquerade-daemon's linkLocal key"),
            Code::ForcedWithoutEffect => (Warning, "a forced CIDR in no non-masquerade range: it changes nothing"),
            Code::EmptySourceList => (Warning, "masqueradeSourceCIDRs is empty: every source is considered"),
            Code::SourceFamilyUnscoped => (Warning, "masqueradeSourceCIDRs has no range of a managed family: that family is not scoped"),
            Code::NoConfigFiles => (Warning, "a --config-dir without ip-masq* files: the defaults apply"),
            Code::IpmasqExtension => (Info, "a key upstream ip-masq-agent does not read (forceMasqueradeCIDRs, masqueradeSourceCIDRs)"),
        }
    }

    /// The code as it appears in text and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Io => "io",
            Code::YamlSyntax => "yaml-syntax",
            Code::NotAMapping => "not-a-mapping",
            Code::UnsupportedKey => "unsupported-key",
            Code::WrongType => "wrong-type",
            Code::InvalidCidr => "invalid-cidr",
            Code::CidrNotAligned => "cidr-not-aligned",
            Code::Ipv4MappedCidr => "ipv4-mapped-cidr",
            Code::Ipv6NotEnabled => "ipv6-not-enabled",
            Code::CidrLimitExceeded => "cidr-limit-exceeded",
            Code::NegativeCidrLimit => "negative-cidr-limit",
            Code::InvalidDuration => "invalid-duration",
            Code::NonPositiveDuration => "non-positive-duration",
            Code::ResyncBelowFloor => "resync-below-floor",
            Code::LinkLocalConflict => "link-local-conflict",
            Code::NoConfigMap => "no-configmap",
            Code::ConfigMapWithoutConfig => "configmap-without-config",
            Code::UnknownKey => "unknown-key",
            Code::KeyCase => "key-case",
            Code::DuplicateKey => "duplicate-key",
            Code::ExtraDocument => "extra-document",
            Code::Yaml11Boolean => "yaml11-boolean",
            Code::DuplicateCidr => "duplicate-cidr",
            Code::CoveredCidr => "covered-cidr",
            Code::PaddedPrefix => "padded-prefix",
            Code::EmptyCidrList => "empty-cidr-list",
            Code::DeprecatedLinkLocal => "deprecated-link-local",
            Code::ForcedWithoutEffect => "forced-without-effect",
            Code::EmptySourceList => "empty-source-list",
            Code::SourceFamilyUnscoped => "source-family-unscoped",
            Code::ForcedAndKept => "forced-and-kept",
            Code::NoConfigFiles => "no-config-files",
            Code::IpmasqExtension => "ipmasq-extension",
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
}

impl Diagnostic {
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            location: None,
            hint: None,
            file: None,
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

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
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
