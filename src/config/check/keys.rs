//! The keys of a config document: which field each selects (case-insensitively, as Go's
//! `encoding/json`), merge keys expanded as yaml.v2 does, and each field assigned once with a
//! finding for every unknown, mis-cased, extension or repeated key.

use crate::config::diagnostic::{cite_line, push_finding, Code, Diagnostic};
use crate::config::yaml::{Value, YamlNode};

/// The keys upstream reads, spelled as upstream's JSON tags spell them.
pub(super) const KEY_CIDRS: &str = "nonMasqueradeCIDRs";
pub(super) const KEY_CIDR_LIMIT: &str = "cidrLimit";
pub(super) const KEY_MASQ_LINK_LOCAL: &str = "masqLinkLocal";
pub(super) const KEY_MASQ_LINK_LOCAL_V6: &str = "masqLinkLocalIPv6";
pub(super) const KEY_RESYNC: &str = "resyncInterval";
/// non-masquerade-daemon's key, the inverse of `masqLinkLocal`; accepted with a warning.
pub(super) const KEY_LEGACY_LINK_LOCAL: &str = "linkLocal";
/// ipmasq extensions (upstream ignores them as unknown keys).
pub(super) const KEY_FORCE: &str = "forceMasqueradeCIDRs";
pub(super) const KEY_SOURCES: &str = "masqueradeSourceCIDRs";
/// ipmasq extension (ip-masq-agent #53, #86): turns IPv6 on from the file.
pub(super) const KEY_ENABLE_IPV6: &str = "enableIPv6";
/// ipmasq extensions (ip-masq-agent PR #103's names): SNAT to a chosen address, and the
/// interfaces whose outgoing traffic is acted on.
pub(super) const KEY_OUTPUT_ADDRESS: &str = "outputAddress";
pub(super) const KEY_OUTPUT_ADDRESS_V6: &str = "outputAddressIPv6";
pub(super) const KEY_OUTPUT_INTERFACES: &str = "outputInterfaces";
/// ipmasq extensions (Step 25): each pod address's share of the node's egress.
pub(super) const KEY_POD_CONNECTION_LIMIT: &str = "podConnectionLimit";
pub(super) const KEY_POD_NEW_CONNECTION_RATE: &str = "podNewConnectionRate";
pub(super) const KEY_POD_NEW_CONNECTION_BURST: &str = "podNewConnectionBurst";
pub(super) const KEY_POD_RATE_PER_DESTINATION: &str = "podNewConnectionRatePerDestination";

/// The keys we suggest and list in hints: every field but the deprecated `linkLocal`.
pub fn supported_keys() -> impl Iterator<Item = &'static str> {
    Field::ALL
        .into_iter()
        .filter(|f| *f != Field::LegacyLinkLocal)
        .map(Field::canonical)
}

/// Which known field a key selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Cidrs,
    CidrLimit,
    MasqLinkLocal,
    MasqLinkLocalV6,
    Resync,
    LegacyLinkLocal,
    Force,
    Sources,
    EnableIpv6,
    OutputAddress,
    OutputAddressV6,
    OutputInterfaces,
    PodConnectionLimit,
    PodNewConnectionRate,
    PodNewConnectionBurst,
    PodRatePerDestination,
}

impl Field {
    /// Every field the config file has: the one list of them.
    const ALL: [Field; 16] = [
        Field::Cidrs,
        Field::CidrLimit,
        Field::MasqLinkLocal,
        Field::MasqLinkLocalV6,
        Field::Resync,
        Field::LegacyLinkLocal,
        Field::Force,
        Field::Sources,
        Field::EnableIpv6,
        Field::OutputAddress,
        Field::OutputAddressV6,
        Field::OutputInterfaces,
        Field::PodConnectionLimit,
        Field::PodNewConnectionRate,
        Field::PodNewConnectionBurst,
        Field::PodRatePerDestination,
    ];

    /// What an ipmasq extension does, for the note that upstream ignores it.
    fn extension(self) -> Option<&'static str> {
        match self {
            Field::Force => Some("with upstream's image these destinations keep the pod's address"),
            Field::Sources => {
                Some("with upstream's image traffic from every source is masqueraded")
            }
            Field::EnableIpv6 => Some("with upstream's image only --enable-ipv6 turns IPv6 on"),
            Field::OutputAddress | Field::OutputAddressV6 => Some(
                "with upstream's image traffic is masqueraded to the outgoing interface's address",
            ),
            Field::OutputInterfaces => {
                Some("with upstream's image traffic leaving every interface is masqueraded")
            }
            Field::PodConnectionLimit
            | Field::PodNewConnectionRate
            | Field::PodNewConnectionBurst
            | Field::PodRatePerDestination => {
                Some("with upstream's image a pod may open connections without limit")
            }
            _ => None,
        }
    }

    fn canonical(self) -> &'static str {
        match self {
            Field::Cidrs => KEY_CIDRS,
            Field::CidrLimit => KEY_CIDR_LIMIT,
            Field::MasqLinkLocal => KEY_MASQ_LINK_LOCAL,
            Field::MasqLinkLocalV6 => KEY_MASQ_LINK_LOCAL_V6,
            Field::Resync => KEY_RESYNC,
            Field::LegacyLinkLocal => KEY_LEGACY_LINK_LOCAL,
            Field::Force => KEY_FORCE,
            Field::Sources => KEY_SOURCES,
            Field::EnableIpv6 => KEY_ENABLE_IPV6,
            Field::OutputAddress => KEY_OUTPUT_ADDRESS,
            Field::OutputAddressV6 => KEY_OUTPUT_ADDRESS_V6,
            Field::OutputInterfaces => KEY_OUTPUT_INTERFACES,
            Field::PodConnectionLimit => KEY_POD_CONNECTION_LIMIT,
            Field::PodNewConnectionRate => KEY_POD_NEW_CONNECTION_RATE,
            Field::PodNewConnectionBurst => KEY_POD_NEW_CONNECTION_BURST,
            Field::PodRatePerDestination => KEY_POD_RATE_PER_DESTINATION,
        }
    }

    /// Go's `encoding/json` matches field names case-insensitively, by Unicode simple case
    /// folding (`bytes.EqualFold`): besides ASCII case, `ſ` (U+017F) is an `s` and the Kelvin
    /// sign (U+212A) a `k`, the only characters that fold to an ASCII letter.
    pub(super) fn from_key(key: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| {
            key.chars()
                .map(go_fold)
                .eq(f.canonical().chars().map(go_fold))
        })
    }
}

/// A character as Go's `encoding/json` compares field names: ASCII letters without case, and
/// the two characters outside ASCII whose simple case folding reaches an ASCII letter.
fn go_fold(c: char) -> char {
    match c {
        '\u{17f}' => 's',
        '\u{212a}' => 'k',
        c => c.to_ascii_lowercase(),
    }
}

/// The value a key was given, and where.
pub(super) struct Assigned<'a> {
    pub key: &'a YamlNode,
    pub value: &'a YamlNode,
    /// Brought in by a YAML merge key (`<<: *anchor`).
    pub from_merge: bool,
}

/// Expands YAML merge keys as yaml.v2 does when upstream reads the file: `<<: {map}` or
/// `<<: [map, ...]` splices the merged entries in place (of a list, the earlier maps win),
/// so with last-wins a key after the merge overrides it and one before it is overridden.
pub(super) fn expand_merge_keys(
    entries: &[(YamlNode, YamlNode)],
) -> Result<Vec<(&YamlNode, &YamlNode, bool)>, Diagnostic> {
    fn is_merge(key: &YamlNode) -> bool {
        key.as_scalar()
            .is_some_and(|s| s.text == "<<" && s.style == super::super::yaml::Style::Plain)
    }
    fn splice<'a>(
        value: &'a YamlNode,
        out: &mut Vec<(&'a YamlNode, &'a YamlNode, bool)>,
        depth: usize,
    ) -> Result<(), Diagnostic> {
        let wrong = || {
            Diagnostic::error(
                Code::WrongType,
                "a merge key (<<) must be followed by a mapping or a list of mappings",
            )
            .at(value.location)
        };
        if depth > 16 {
            return Err(wrong());
        }
        match &value.value {
            Value::Mapping(entries) => {
                for (k, v) in entries {
                    if is_merge(k) {
                        splice(v, out, depth + 1)?;
                    } else {
                        out.push((k, v, true));
                    }
                }
                Ok(())
            }
            Value::Sequence(items) => {
                for item in items.iter().rev() {
                    if !matches!(item.value, Value::Mapping(_)) {
                        return Err(wrong());
                    }
                    splice(item, out, depth + 1)?;
                }
                Ok(())
            }
            Value::Scalar(_) => Err(wrong()),
        }
    }
    let mut out = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        if is_merge(key) {
            splice(value, &mut out, 0)?;
        } else {
            out.push((key, value, false));
        }
    }
    Ok(out)
}

/// The key's text as Go would see it after yaml.v2 → JSON (non-string scalars stringified).
pub(super) fn key_text(key: &YamlNode) -> Option<&str> {
    key.as_scalar().map(|s| s.text.as_str())
}

/// The fields given, each once (the last occurrence of a key wins, as in Go), with a finding
/// for every key that is not a plain string, unknown, spelled in another case, an ipmasq
/// extension, or given again.
// Long: every key is classified in one pass that must see the keys given before it (repeats,
// case); the typo hints wait for the pass's end, when every key given is known.
pub(super) fn assign_fields<'a>(
    entries: Vec<(&'a YamlNode, &'a YamlNode, bool)>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(Field, Assigned<'a>)> {
    // Remember every spelling's first position for messages.
    let mut assigned: Vec<(Field, Assigned)> = Vec::new();
    // Said once every key is known: whether the key a typo was meant for is given after all.
    let mut unknown: Vec<(&str, crate::config::yaml::Location)> = Vec::new();
    for (key, value, from_merge) in entries {
        let Some(text) = key_text(key) else {
            push_finding(
                diags,
                Diagnostic::error(
                    Code::UnsupportedKey,
                    format!("a key must be a plain string, not {}", key.kind_name()),
                )
                .at(key.location),
            );
            continue;
        };
        let Some(field) = Field::from_key(text) else {
            unknown.push((text, key.location));
            continue;
        };
        if text != field.canonical() {
            push_finding(
                diags,
                Diagnostic::warning(
                    Code::KeyCase,
                    format!(
                        "key `{text}` is read as `{}` (keys match case-insensitively)",
                        field.canonical()
                    ),
                )
                .at(key.location)
                .hint(format!("write `{}`", field.canonical())),
            );
        }
        if let Some(effect) = field.extension() {
            push_finding(
                diags,
                Diagnostic::info(
                    Code::IpmasqExtension,
                    format!(
                        "`{}` is an ipmasq extension, not understood by upstream ip-masq-agent",
                        field.canonical()
                    ),
                )
                .at(key.location)
                .hint(effect),
            );
        }
        if let Some((_, earlier)) = assigned.iter().find(|(f, _)| *f == field) {
            // Overriding a value brought in by a merge key (`<<`) is what merges are for.
            if !(from_merge || earlier.from_merge) {
                push_finding(
                    diags,
                    Diagnostic::warning(
                        Code::DuplicateKey,
                        format!(
                            "`{}` is given again (first at {}); the last value wins",
                            field.canonical(),
                            cite_line(earlier.key.location)
                        ),
                    )
                    .cites(Some(earlier.key.location))
                    .at(key.location)
                    .hint("delete the earlier entry"),
                );
            }
            assigned.retain(|(f, _)| *f != field);
        }
        assigned.push((
            field,
            Assigned {
                key,
                value,
                from_merge,
            },
        ));
    }
    for (text, location) in unknown {
        let given = |key: &str| {
            assigned
                .iter()
                .any(|(f, _)| Field::from_key(key) == Some(*f))
        };
        push_finding(diags, unknown_key(text, given).at(location));
    }
    assigned
}

/// The warning for a key the agent does not read. Upstream decodes the file into its config
/// struct with Go's `encoding/json`, which drops a key no field has; every field not given
/// keeps the default it was initialised with. So does ipmasq: the message says so, naming the
/// key a typo was meant for when one is close.
fn unknown_key(text: &str, given: impl Fn(&str) -> bool) -> Diagnostic {
    const IGNORED: &str = "is ignored, as upstream ip-masq-agent ignores it";
    match suggest_key(text) {
        Some(meant) if given(meant) => Diagnostic::warning(
            Code::UnknownKey,
            format!("unknown key `{text}` {IGNORED} (`{meant}` is given in this file too)"),
        )
        .hint(format!("did you mean {meant}? If so, delete this one")),
        Some(meant) => Diagnostic::warning(
            Code::UnknownKey,
            format!(
                "unknown key `{text}` {IGNORED}: `{meant}` is not given, so its default applies"
            ),
        )
        .hint(format!("did you mean {meant}?")),
        None => Diagnostic::warning(
            Code::UnknownKey,
            format!("unknown key `{text}` {IGNORED}: every key not given keeps its default"),
        )
        .hint(format!(
            "known keys: {}",
            supported_keys().collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Whether a document looks like the agent's config: a mapping with at least one key that is
/// a config key (in any case) or close enough to one for [`suggest_key`] to name it.
pub fn names_a_config_key(root: &YamlNode) -> bool {
    root.as_mapping().is_some_and(|entries| {
        entries.iter().any(|(key, _)| {
            key_text(key)
                .is_some_and(|text| Field::from_key(text).is_some() || suggest_key(text).is_some())
        })
    })
}

/// The known key closest to a misspelt one, if any is close enough to be a likely typo.
pub fn suggest_key(key: &str) -> Option<&'static str> {
    let folded = key.to_lowercase();
    supported_keys()
        .map(|known| {
            let k = known.to_lowercase();
            (strsim::levenshtein(&folded, &k), known, k)
        })
        .filter(|(distance, _, k)| {
            let longest = folded.chars().count().max(k.chars().count());
            *distance <= (longest / 3).max(2)
                || (folded.len() >= 5 && (k.starts_with(&folded) || folded.starts_with(k.as_str())))
        })
        .min_by_key(|(distance, _, _)| *distance)
        .map(|(_, known, _)| known)
}
