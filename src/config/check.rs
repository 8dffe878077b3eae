//! Decoding a YAML/JSON document into a [`Config`] with upstream's semantics (Go's yaml.v2 +
//! `encoding/json`: case-insensitive keys, unknown keys ignored, last duplicate wins, an absent
//! key keeps its default) and validating it, collecting every error and warning on the way.

use super::cidr::{has_padded_prefix, parse_cidr, CidrError};
use super::diagnostic::{push_finding, Code, Diagnostic};
use super::duration::{parse_go_duration, GoDuration};
use super::yaml::{parse_stream, Location, Node, Resolved, Stream, Value, YamlError};
use super::{default_cidrs, Checked, Config, ListName, Options, Place, Provenance};
use ipnet::IpNet;

/// The keys upstream reads, spelled as upstream's JSON tags spell them.
const KEY_CIDRS: &str = "nonMasqueradeCIDRs";
const KEY_CIDR_LIMIT: &str = "cidrLimit";
const KEY_MASQ_LINK_LOCAL: &str = "masqLinkLocal";
const KEY_MASQ_LINK_LOCAL_V6: &str = "masqLinkLocalIPv6";
const KEY_RESYNC: &str = "resyncInterval";
/// non-masquerade-daemon's key, the inverse of `masqLinkLocal`; accepted with a warning.
const KEY_LEGACY_LINK_LOCAL: &str = "linkLocal";
/// ipmasq extensions (upstream ignores them as unknown keys).
const KEY_FORCE: &str = "forceMasqueradeCIDRs";
const KEY_SOURCES: &str = "masqueradeSourceCIDRs";

/// The keys we suggest and list in hints: every field but the deprecated `linkLocal`.
fn supported_keys() -> impl Iterator<Item = &'static str> {
    Field::ALL
        .into_iter()
        .filter(|f| *f != Field::LegacyLinkLocal)
        .map(Field::canonical)
}

/// Parses and checks a config text (YAML 1.1 or JSON).
pub fn check_text(text: &str, options: &Options) -> Checked {
    check_parsed(&parse_stream(text), options)
}

/// Checks an already-parsed stream (its first document is the config).
pub fn check_parsed(parsed: &Result<Stream, YamlError>, options: &Options) -> Checked {
    let stream = match parsed {
        Ok(stream) => stream,
        Err(err) => {
            return Checked::rejected(vec![Diagnostic::error(
                Code::YamlSyntax,
                err.message.clone(),
            )
            .at(err.location)])
        }
    };
    let mut diagnostics = Vec::new();
    if let Some(extra) = stream.documents.get(1) {
        diagnostics.push(
            Diagnostic::warning(
                Code::ExtraDocument,
                format!(
                    "only the first YAML document is read; {} more ignored",
                    stream.documents.len() - 1
                ),
            )
            .at(extra.location)
            .hint("remove the `---` separator and everything after it, or merge the documents"),
        );
    }
    if let Some(err) = &stream.trailing_error {
        diagnostics.push(
            Diagnostic::warning(
                Code::ExtraDocument,
                format!(
                    "{} (in a later document, which the agent ignores)",
                    err.message
                ),
            )
            .at(err.location),
        );
    }
    let empty = Node {
        value: Value::Scalar(super::yaml::Scalar {
            text: String::new(),
            style: super::yaml::Style::Plain,
            tag: None,
        }),
        location: Location {
            line: 1,
            column: 1,
            ..Location::default()
        },
    };
    let root = stream.documents.first().unwrap_or(&empty);
    let mut checked = check_document(root, options);
    checked.edit_diagnostics(|found| {
        diagnostics.append(found);
        // Report in reading order; findings without a position first.
        diagnostics.sort_by_key(|d| d.location.map(|l| (l.line, l.column)));
        std::mem::swap(found, &mut diagnostics);
    });
    checked
}

/// Which known field a key selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Cidrs,
    CidrLimit,
    MasqLinkLocal,
    MasqLinkLocalV6,
    Resync,
    LegacyLinkLocal,
    Force,
    Sources,
}

impl Field {
    /// Every field the config file has: the one list of them.
    const ALL: [Field; 8] = [
        Field::Cidrs,
        Field::CidrLimit,
        Field::MasqLinkLocal,
        Field::MasqLinkLocalV6,
        Field::Resync,
        Field::LegacyLinkLocal,
        Field::Force,
        Field::Sources,
    ];

    /// What an ipmasq extension does, for the note that upstream ignores it.
    fn extension(self) -> Option<&'static str> {
        match self {
            Field::Force => Some("with upstream's image these destinations keep the pod's address"),
            Field::Sources => {
                Some("with upstream's image traffic from every source is masqueraded")
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
        }
    }

    /// Go's `encoding/json` matches field names case-insensitively.
    fn from_key(key: &str) -> Option<Field> {
        let folded = key.to_lowercase();
        Field::ALL
            .into_iter()
            .find(|f| f.canonical().to_lowercase() == folded)
    }
}

/// The value a key was given, and where.
struct Assigned<'a> {
    key: &'a Node,
    value: &'a Node,
    /// Brought in by a YAML merge key (`<<: *anchor`).
    from_merge: bool,
}

/// Expands YAML merge keys as yaml.v2 does when upstream reads the file: `<<: {map}` or
/// `<<: [map, ...]` splices the merged entries in place (of a list, the earlier maps win),
/// so with last-wins a key after the merge overrides it and one before it is overridden.
fn expand_merge_keys(entries: &[(Node, Node)]) -> Result<Vec<(&Node, &Node, bool)>, Diagnostic> {
    fn is_merge(key: &Node) -> bool {
        key.as_scalar()
            .is_some_and(|s| s.text == "<<" && s.style == super::yaml::Style::Plain)
    }
    fn splice<'a>(
        value: &'a Node,
        out: &mut Vec<(&'a Node, &'a Node, bool)>,
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
fn key_text(key: &Node) -> Option<&str> {
    key.as_scalar().map(|s| s.text.as_str())
}

/// Checks one already-parsed document (a config file's first document or a ConfigMap's
/// embedded `data.config`).
pub fn check_document(root: &Node, options: &Options) -> Checked {
    let mut diags = Vec::new();
    let entries: &[(Node, Node)] = match &root.value {
        Value::Mapping(entries) => entries,
        Value::Scalar(s) if s.resolve() == Resolved::Null => &[],
        _ => {
            push_finding(
                &mut diags,
                Diagnostic::error(
                    Code::NotAMapping,
                    format!(
                        "the config must be a mapping of keys to values, but this document is {}",
                        root.kind_name()
                    ),
                )
                .at(root.location)
                .hint("start with a key, e.g. `nonMasqueradeCIDRs: [10.0.0.0/8]`"),
            );
            return Checked::rejected(diags);
        }
    };

    let entries = match expand_merge_keys(entries) {
        Ok(entries) => entries,
        Err(d) => {
            push_finding(&mut diags, d);
            return Checked::rejected(diags);
        }
    };

    // Last occurrence of each field wins; remember every spelling's first position for messages.
    let mut assigned: Vec<(Field, Assigned)> = Vec::new();
    for (key, value, from_merge) in entries {
        let Some(text) = key_text(key) else {
            push_finding(
                &mut diags,
                Diagnostic::error(
                    Code::UnsupportedKey,
                    format!("a key must be a plain string, not {}", key.kind_name()),
                )
                .at(key.location),
            );
            continue;
        };
        let Some(field) = Field::from_key(text) else {
            let mut d =
                Diagnostic::warning(Code::UnknownKey, format!("unknown key `{text}` is ignored"))
                    .at(key.location);
            if let Some(suggestion) = suggest_key(text) {
                d = d.hint(format!("did you mean {suggestion}?"));
            } else {
                d = d.hint(format!(
                    "known keys: {}",
                    supported_keys().collect::<Vec<_>>().join(", ")
                ));
            }
            push_finding(&mut diags, d);
            continue;
        };
        if text != field.canonical() {
            push_finding(
                &mut diags,
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
                &mut diags,
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
                    &mut diags,
                    Diagnostic::warning(
                        Code::DuplicateKey,
                        format!(
                            "`{}` is given again (first at line {}); the last value wins",
                            field.canonical(),
                            earlier.key.location.line
                        ),
                    )
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
    let get = |field: Field| assigned.iter().find(|(f, _)| *f == field).map(|(_, a)| a);

    // One decoder per field; each reports its own findings. Validity is not book-kept here:
    // `Checked::new` keeps the config exactly when no finding is an error.
    let mut config = Config::defaults(options);
    let cidr_nodes = get(Field::Cidrs).and_then(|a| decode_cidr_list(a, &mut diags));
    if let Some(limit) = get(Field::CidrLimit).and_then(|a| decode_cidr_limit(a, &mut diags)) {
        config.cidr_limit = limit;
    }
    if let Some(v) = get(Field::MasqLinkLocal).and_then(|a| decode_bool(a, &mut diags)) {
        config.masq_link_local = v;
    }
    if let Some(v) = get(Field::MasqLinkLocalV6).and_then(|a| decode_bool(a, &mut diags)) {
        config.masq_link_local_ipv6 = v;
    }
    if let Some(a) = get(Field::LegacyLinkLocal) {
        if let Some(v) = decode_legacy_link_local(a, get(Field::MasqLinkLocal), &mut diags) {
            config.masq_link_local = v;
        }
    }
    if let Some(d) = get(Field::Resync).and_then(|a| decode_resync(a, &mut diags)) {
        config.resync_interval = d;
    }
    let force_nodes = get(Field::Force).and_then(|a| decode_list(a, KEY_FORCE, None, &mut diags));
    let source_nodes = get(Field::Sources).and_then(|a| {
        let empty = Diagnostic::warning(
            Code::EmptySourceList,
            format!("`{KEY_SOURCES}` is empty: traffic from every source is considered, as without the key"),
        )
        .at(a.key.location)
        .hint("list your pod ranges, or remove the key");
        decode_list(a, KEY_SOURCES, Some(empty), &mut diags)
    });
    let force = force_nodes
        .as_deref()
        .map(|nodes| parse_cidr_nodes(nodes, KEY_FORCE, options, &mut diags))
        .unwrap_or_default();
    let sources = source_nodes
        .as_deref()
        .map(|nodes| parse_cidr_nodes(nodes, KEY_SOURCES, options, &mut diags))
        .unwrap_or_default();
    for list in [&force, &sources] {
        overlap_warnings(list, &mut diags);
    }
    // Cross-field: the CIDR list against the limit and the flags.
    let limit_location = get(Field::CidrLimit)
        .map(|a| a.value.location)
        .or_else(|| get(Field::Cidrs).map(|a| a.key.location));
    let non_masquerade = check_cidrs(
        cidr_nodes.as_deref(),
        config.cidr_limit,
        limit_location,
        force.len(),
        options,
        &mut diags,
    );
    let given = cidr_nodes.is_some();
    let places = |list: &[(IpNet, Option<Location>)]| -> Vec<Place> {
        list.iter()
            .map(|(_, location)| Place {
                file: None,
                location: *location,
            })
            .collect()
    };
    config.provenance = Provenance {
        non_masquerade: if given {
            places(&non_masquerade)
        } else {
            Vec::new()
        },
        force: places(&force),
        sources: places(&sources),
        gave_non_masquerade_cidrs: given,
        gave_cidr_limit: get(Field::CidrLimit).is_some(),
        gave_resync_interval: get(Field::Resync).is_some(),
    };
    config.non_masquerade_cidrs = non_masquerade.into_iter().map(|(n, _)| n).collect();
    config.force_masquerade_cidrs = dedup(
        force.into_iter().map(|(n, _)| n),
        &mut config.provenance.force,
    );
    config.masquerade_source_cidrs = dedup(
        sources.into_iter().map(|(n, _)| n),
        &mut config.provenance.sources,
    );
    if !options.merging {
        check_across_lists(&config, options, &mut diags);
    }
    Checked::new(config, diags)
}

/// The entries of a list with repeats dropped (the first place of each kept), for the lists
/// whose order and repeats write nothing of their own.
fn dedup(nets: impl Iterator<Item = IpNet>, places: &mut Vec<Place>) -> Vec<IpNet> {
    let mut seen = std::collections::HashSet::new();
    let mut kept_places = Vec::new();
    let mut out = Vec::new();
    for (i, net) in nets.enumerate() {
        if seen.insert(net) {
            out.push(net);
            kept_places.push(places.get(i).cloned().unwrap_or_default());
        }
    }
    *places = kept_places;
    out
}

/// The checks that need every list at once (of one file, or of a merged directory):
/// a CIDR both forced and kept is an error naming both places; a forced CIDR that no
/// non-masquerade range holds changes nothing and is reported; a source list without a range
/// of a managed family leaves that family unscoped.
pub(super) fn check_across_lists(config: &Config, options: &Options, diags: &mut Vec<Diagnostic>) {
    let at = |d: Diagnostic, place: &Place| {
        let d = d.at_opt(place.location);
        match &place.file {
            Some(file) => d.in_file(file.clone()),
            None => d,
        }
    };
    let kept: std::collections::HashMap<IpNet, usize> = config
        .non_masquerade_cidrs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, n)| (*n, i))
        .collect();
    for (i, forced) in config.force_masquerade_cidrs.iter().enumerate() {
        let place = config.place(ListName::Force, i);
        if let Some(&k) = kept.get(forced) {
            let other = config.place(ListName::NonMasquerade, k);
            push_finding(diags, at(
                Diagnostic::error(
                    Code::ForcedAndKept,
                    format!(
                        "{forced} is in {KEY_FORCE} and also in {KEY_CIDRS} ({other}): it cannot be both masqueraded and kept"
                    ),
                ),
                &place,
            )
            .hint("delete it from one of the lists; to masquerade part of a range, force a narrower CIDR"));
            continue;
        }
        let link_local_kept = match forced {
            IpNet::V4(_) => !config.masq_link_local,
            IpNet::V6(_) => !config.masq_link_local_ipv6,
        };
        let family_link_local: IpNet = match forced {
            IpNet::V4(_) => super::LINK_LOCAL_V4.parse().expect("constant"),
            IpNet::V6(_) => super::LINK_LOCAL_V6.parse().expect("constant"),
        };
        let inside_kept = config
            .non_masquerade_cidrs
            .iter()
            .any(|k| k.contains(forced) && k != forced)
            || (link_local_kept && family_link_local.contains(forced));
        if !inside_kept {
            push_finding(diags, at(
                Diagnostic::warning(
                    Code::ForcedWithoutEffect,
                    format!(
                        "{forced} lies in no non-masquerade range: it is masqueraded anyway, so forcing it changes nothing"
                    ),
                ),
                &place,
            )
            .hint(format!("delete it, or add the range it belongs to to {KEY_CIDRS}")));
        }
    }
    if !config.masquerade_source_cidrs.is_empty() {
        let families: &[(&str, bool)] = if options.enable_ipv6 {
            &[("IPv4", false), ("IPv6", true)]
        } else {
            &[("IPv4", false)]
        };
        for (name, v6) in families {
            if !config
                .masquerade_source_cidrs
                .iter()
                .any(|n| n.addr().is_ipv6() == *v6)
            {
                push_finding(diags, at(
                    Diagnostic::warning(
                        Code::SourceFamilyUnscoped,
                        format!(
                            "{KEY_SOURCES} has no {name} range: {name} traffic from every source is considered, as upstream does"
                        ),
                    ),
                    &config.place(ListName::Sources, 0),
                )
                .hint(format!("add your {name} pod range to scope {name} as well")));
            }
        }
    }
}

/// A list-valued extension key: a list, or null (nothing); `empty` is reported for `[]`.
fn decode_list<'a>(
    a: &Assigned<'a>,
    key: &str,
    empty: Option<Diagnostic>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Vec<&'a Node>> {
    match &a.value.value {
        Value::Sequence(items) => {
            if items.is_empty() {
                diags.extend(empty);
            }
            Some(items.iter().collect())
        }
        Value::Scalar(s) if s.resolve() == Resolved::Null => Some(Vec::new()),
        _ => {
            let mut d = wrong_type(a, "a list of CIDR strings");
            if let Some(text) = a.value.as_str() {
                d = d.hint(format!("write it as a list: `{key}: [{text}]`"));
            }
            push_finding(diags, d);
            None
        }
    }
}

/// `nonMasqueradeCIDRs`: a list replaces the defaults; null or [] means an empty list. The
/// entries themselves are checked with the limit, in `check_cidrs`.
fn decode_cidr_list<'a>(a: &Assigned<'a>, diags: &mut Vec<Diagnostic>) -> Option<Vec<&'a Node>> {
    match &a.value.value {
        Value::Scalar(s) if s.resolve() == Resolved::Null => {
            push_finding(diags, empty_list_warning(a.key.location));
            Some(Vec::new())
        }
        _ => decode_list(
            a,
            KEY_CIDRS,
            Some(empty_list_warning(a.key.location)),
            diags,
        ),
    }
}

/// `cidrLimit`: an integer; null keeps the default.
fn decode_cidr_limit(a: &Assigned, diags: &mut Vec<Diagnostic>) -> Option<i64> {
    match decode_int(a.value) {
        IntValue::Absent => None,
        IntValue::Int(v) => Some(v),
        IntValue::Invalid => {
            push_finding(diags, wrong_type(a, "an integer"));
            None
        }
    }
}

/// non-masquerade-daemon's `linkLocal` (the inverse of `masqLinkLocal`): the value it stands
/// for, unless `masqLinkLocal` is also given (then only a contradiction is reported).
fn decode_legacy_link_local(
    a: &Assigned,
    masq_link_local: Option<&Assigned>,
    diags: &mut Vec<Diagnostic>,
) -> Option<bool> {
    let mut note = Diagnostic::warning(
        Code::DeprecatedLinkLocal,
        format!(
            "`{KEY_LEGACY_LINK_LOCAL}` is non-masquerade-daemon's deprecated key (true = do not masquerade link-local)"
        ),
    )
    .at(a.key.location);
    let mut result = None;
    if let Some(non_masq) = decode_bool(a, diags) {
        let replacement = !non_masq;
        note = note.hint(format!(
            "write `{KEY_MASQ_LINK_LOCAL}: {replacement}` instead"
        ));
        match masq_link_local {
            Some(m) => {
                if let Some(masq) = decode_bool(m, &mut Vec::new()) {
                    if masq != replacement {
                        push_finding(diags,
                            Diagnostic::error(
                                Code::LinkLocalConflict,
                                format!(
                                    "`{KEY_LEGACY_LINK_LOCAL}: {non_masq}` contradicts `{KEY_MASQ_LINK_LOCAL}: {masq}` (line {})",
                                    m.key.location.line
                                ),
                            )
                            .at(a.key.location)
                            .hint(format!("delete `{KEY_LEGACY_LINK_LOCAL}`; `{KEY_MASQ_LINK_LOCAL}` is the supported key")),
                        );
                    }
                }
            }
            None => result = Some(replacement),
        }
    }
    push_finding(diags, note);
    result
}

/// `resyncInterval`: a positive Go duration string.
fn decode_resync(a: &Assigned, diags: &mut Vec<Diagnostic>) -> Option<GoDuration> {
    let Some(text) = a.value.as_str() else {
        let got = match a.value.as_scalar() {
            Some(s) if s.resolve() == Resolved::Null => "null".to_string(),
            Some(s) => s.text.clone(),
            None => a.value.kind_name().to_string(),
        };
        let mut d = Diagnostic::error(
            Code::WrongType,
            format!("expected string value for unmarshal to field of type Duration, got {got:?}"),
        )
        .at(a.value.location);
        d = if matches!(
            a.value.as_scalar().map(|s| s.resolve()),
            Some(Resolved::Int(_) | Resolved::Float(_))
        ) {
            d.hint(format!("add a unit: `{KEY_RESYNC}: {got}s`"))
        } else {
            d.hint("write a Go duration such as `60s`")
        };
        push_finding(diags, d);
        return None;
    };
    match parse_go_duration(text) {
        Ok(d) if d.0 > 0 && d < super::MIN_RESYNC_INTERVAL => {
            let floor = super::MIN_RESYNC_INTERVAL;
            push_finding(diags,
                Diagnostic::warning(
                    Code::ResyncBelowFloor,
                    format!("{KEY_RESYNC} {d} is below the floor of {floor}; {floor} is used"),
                )
                .at(a.value.location)
                .hint(format!(
                    "a pass every {d} would burn a core; write `{floor}` or more (upstream's default is 60s)"
                )),
            );
            Some(floor)
        }
        Ok(d) if d.0 > 0 => Some(d),
        Ok(d) => {
            push_finding(
                diags,
                Diagnostic::error(
                    Code::NonPositiveDuration,
                    format!("{KEY_RESYNC} must be positive, got {d}"),
                )
                .at(a.value.location)
                .hint("use e.g. `60s`; a zero interval would resync in a busy loop"),
            );
            None
        }
        Err(err) => {
            push_finding(diags,
                Diagnostic::error(Code::InvalidDuration, err.to_string())
                    .at(a.value.location)
                    .hint("write a Go duration: a number and a unit (ns, us, ms, s, m, h), e.g. `60s`, `1m30s`"),
            );
            None
        }
    }
}

/// The CIDR list (the file's, or the defaults when it has none) against `cidrLimit` (which
/// also counts the `forced` entries: each writes a rule) and the flags: upstream's limit
/// first, then every entry; returns the entries that parsed, with where they were written.
fn check_cidrs(
    nodes: Option<&[&Node]>,
    cidr_limit: i64,
    limit_location: Option<Location>,
    forced: usize,
    options: &Options,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(IpNet, Option<Location>)> {
    let count = nodes.map_or_else(|| default_cidrs(options).len(), <[&Node]>::len);
    if !options.merging {
        check_cidr_limit(count, forced, cidr_limit, limit_location, diags);
    }
    match nodes {
        Some(nodes) => {
            let parsed = parse_cidr_nodes(nodes, KEY_CIDRS, options, diags);
            overlap_warnings(&parsed, diags);
            parsed
        }
        None => default_cidrs(options)
            .into_iter()
            .map(|c| (c, None))
            .collect(),
    }
}

/// Upstream's `cidrLimit` check (with the forced CIDRs counted, when there are any).
pub(super) fn check_cidr_limit(
    count: usize,
    forced: usize,
    cidr_limit: i64,
    limit_location: Option<Location>,
    diags: &mut Vec<Diagnostic>,
) {
    let total = count + forced;
    if cidr_limit < 0 {
        push_finding(
            diags,
            Diagnostic::error(
                Code::NegativeCidrLimit,
                format!("{KEY_CIDR_LIMIT} must not be negative, got {cidr_limit}"),
            )
            .at_opt(limit_location)
            .hint(format!(
                "remove it to use the default of {}",
                super::DEFAULT_CIDR_LIMIT
            )),
        );
    } else if total as i64 > cidr_limit {
        let counted = if forced > 0 {
            format!(" ({count} in {KEY_CIDRS} and {forced} in {KEY_FORCE}: each writes a rule)")
        } else {
            String::new()
        };
        push_finding(diags,
            Diagnostic::error(
                Code::CidrLimitExceeded,
                format!(
                    "the daemon can only accept up to {cidr_limit} CIDRs (excluding link-local), but got {total} CIDRs (excluding link local){counted}"
                ),
            )
            .at_opt(limit_location)
            .hint(format!(
                "raise `{KEY_CIDR_LIMIT}` to at least {total}, or merge CIDRs; long lists are fine with `--backend nftables` (one set lookup per new connection, however long the list), while iptables walks one rule per CIDR"
            )),
        );
    }
}

/// Every entry of a CIDR list: a string that parses as an aligned CIDR of an enabled family.
fn parse_cidr_nodes(
    nodes: &[&Node],
    key: &str,
    options: &Options,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(IpNet, Option<Location>)> {
    let mut written: Vec<(String, Option<Location>)> = Vec::new();
    for node in nodes {
        match &node.value {
            Value::Scalar(s) if s.resolve() == Resolved::Str => {
                written.push((s.text.clone(), Some(node.location)))
            }
            // Go unmarshals null into "" and then fails to parse it.
            Value::Scalar(s) if s.resolve() == Resolved::Null => {
                written.push((String::new(), Some(node.location)))
            }
            _ => push_finding(
                diags,
                Diagnostic::error(
                    Code::WrongType,
                    format!(
                        "each {key} entry must be a CIDR string, got {}",
                        node.kind_name()
                    ),
                )
                .at(node.location)
                .hint("quote it if it is meant as text, e.g. \"10.0.0.0/8\""),
            ),
        }
    }
    let mut parsed: Vec<(IpNet, Option<Location>)> = Vec::with_capacity(written.len());
    for (text, location) in &written {
        match parse_cidr(text) {
            Ok(net) => {
                if has_padded_prefix(text) {
                    push_finding(
                        diags,
                        Diagnostic::warning(
                            Code::PaddedPrefix,
                            format!("prefix length of {text:?} has a leading zero"),
                        )
                        .at_opt(*location)
                        .hint(format!("write {net}")),
                    );
                }
                if net.addr().is_ipv6() && !options.enable_ipv6 {
                    push_finding(diags,
                        Diagnostic::error(
                            Code::Ipv6NotEnabled,
                            format!(
                                "ipv6 is not enabled, but ipv6 cidr {text} provided. Enable ipv6 using --enable-ipv6 agent flag"
                            ),
                        )
                        .at_opt(*location)
                        .hint("pass --enable-ipv6 (to the agent and to validate), or remove the IPv6 CIDR"),
                    );
                }
                parsed.push((net, *location));
            }
            Err(err) => {
                let (code, hint) = match &err {
                    CidrError::NotAligned { network, .. } => {
                        (Code::CidrNotAligned, format!("did you mean {network}?"))
                    }
                    CidrError::Ipv4Mapped { ipv4, .. } => {
                        (Code::Ipv4MappedCidr, format!("did you mean {ipv4}?"))
                    }
                    CidrError::Unparsable { .. } => (
                        Code::InvalidCidr,
                        "write an address and a prefix length, e.g. 10.0.0.0/8 or fd00::/8"
                            .to_string(),
                    ),
                };
                push_finding(
                    diags,
                    Diagnostic::error(code, err.to_string())
                        .at_opt(*location)
                        .hint(hint),
                );
            }
        }
    }
    parsed
}

fn empty_list_warning(location: Location) -> Diagnostic {
    Diagnostic::warning(
        Code::EmptyCidrList,
        format!("`{KEY_CIDRS}` is empty: all traffic except link-local will be masqueraded, even to pod and node ranges"),
    )
    .at(location)
    .hint("list your cluster's pod, service and node ranges, or remove the key to use the RFC 1918 defaults")
}

fn wrong_type(a: &Assigned, expected: &str) -> Diagnostic {
    Diagnostic::error(
        Code::WrongType,
        format!(
            "`{}` must be {expected}, got {}",
            key_text(a.key).unwrap_or_default(),
            a.value.kind_name()
        ),
    )
    .at(a.value.location)
}

enum IntValue {
    Absent,
    Int(i64),
    Invalid,
}

/// Go's `int` from JSON: integers, and floats with no fractional part (yaml.v2 turns `64.0`
/// into the JSON number `64`); null leaves the default.
fn decode_int(node: &Node) -> IntValue {
    match node.as_scalar().map(|s| s.resolve()) {
        Some(Resolved::Null) => IntValue::Absent,
        Some(Resolved::Int(v)) => i64::try_from(v).map_or(IntValue::Invalid, IntValue::Int),
        Some(Resolved::Float(f))
            if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 =>
        {
            IntValue::Int(f as i64)
        }
        _ => IntValue::Invalid,
    }
}

/// A boolean; null keeps the default (None), and so does a wrong value (reported).
fn decode_bool(a: &Assigned, diags: &mut Vec<Diagnostic>) -> Option<bool> {
    let Some(scalar) = a.value.as_scalar() else {
        push_finding(diags, wrong_type(a, "true or false"));
        return None;
    };
    match scalar.resolve() {
        Resolved::Null => None,
        Resolved::Bool(v) => {
            if scalar.is_yaml11_only_bool() {
                push_finding(
                    diags,
                    Diagnostic::warning(
                        Code::Yaml11Boolean,
                        format!("`{}` is read as {v} (a YAML 1.1 boolean)", scalar.text),
                    )
                    .at(a.value.location)
                    .hint(format!(
                        "write `{v}`; YAML 1.2 tools read `{}` as a string",
                        scalar.text
                    )),
                );
            }
            Some(v)
        }
        Resolved::Str => {
            let mut d = wrong_type(a, "true or false");
            if matches!(
                scalar.text.to_lowercase().as_str(),
                "true" | "false" | "yes" | "no"
            ) {
                d = d.hint(format!("remove the quotes: `{}`", scalar.text));
            }
            push_finding(diags, d);
            None
        }
        _ => {
            push_finding(diags, wrong_type(a, "true or false"));
            None
        }
    }
}

/// Warns about exact duplicates and about CIDRs inside another listed CIDR. Sorting makes this
/// O(n log n): CIDR blocks either nest or are disjoint, so a stack of open blocks suffices.
fn overlap_warnings(parsed: &[(IpNet, Option<Location>)], diags: &mut Vec<Diagnostic>) {
    let mut order: Vec<usize> = (0..parsed.len()).collect();
    order.sort_by(|&a, &b| {
        let (na, nb) = (&parsed[a].0, &parsed[b].0);
        (na.addr().is_ipv6(), na.network(), na.prefix_len(), a).cmp(&(
            nb.addr().is_ipv6(),
            nb.network(),
            nb.prefix_len(),
            b,
        ))
    });
    let mut found: Vec<(usize, Diagnostic)> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut previous: Option<usize> = None;
    for &i in &order {
        let net = parsed[i].0;
        if let Some(p) = previous.filter(|&p| parsed[p].0 == net) {
            found.push((
                i,
                Diagnostic::warning(
                    Code::DuplicateCidr,
                    format!("{net} is listed more than once{}", line_of(parsed[p].1)),
                )
                .at_opt(parsed[i].1)
                .hint("delete the repeated entry; each one costs a rule"),
            ));
            continue;
        }
        while let Some(&top) = open.last() {
            if parsed[top].0.contains(&net) {
                break;
            }
            open.pop();
        }
        if let Some(&outer) = open.last() {
            found.push((
                i,
                Diagnostic::warning(
                    Code::CoveredCidr,
                    format!(
                        "{net} is already covered by {}{}",
                        parsed[outer].0,
                        line_of(parsed[outer].1)
                    ),
                )
                .at_opt(parsed[i].1)
                .hint("delete the narrower entry; it never matches first"),
            ));
        }
        open.push(i);
        previous = Some(i);
    }
    found.sort_by_key(|(i, _)| *i);
    diags.extend(found.into_iter().map(|(_, d)| d));
}

fn line_of(location: Option<Location>) -> String {
    location.map_or(String::new(), |l| format!(" (line {})", l.line))
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

#[cfg(test)]
mod tests;
