//! Decoding a YAML/JSON document into a [`Config`] with upstream's semantics (Go's yaml.v2 +
//! `encoding/json`: case-insensitive keys, unknown keys ignored, last duplicate wins, an absent
//! key keeps its default) and validating it, collecting every error and warning on the way.

mod decode;
mod egress;
mod keys;
mod lists;
mod share;
mod upstream;

use super::diagnostic::{push_finding, Code, Diagnostic};
use super::yaml::{
    parse_stream, parse_stream_within, Budget, Documents, Location, Resolved, Stream, Value,
    YamlError, YamlNode,
};
use super::{Checked, Config, Options, Place, Provenance};
use decode::*;
use ipnet::IpNet;
use keys::*;
pub use keys::{names_a_config_key, suggest_key, supported_keys};
use lists::*;
pub(super) use lists::{check_across_lists, cidr_problem};

/// Parses and checks a config text (YAML 1.1 or JSON): its first document, the one upstream
/// reads (the others are counted, never built).
pub fn check_text(text: &str, options: &Options) -> Checked {
    check_parsed(text, &parse_stream(text, Documents::First), options)
}

/// [`check_text`] for a config inside another file (a ConfigMap's key), whose tree may cost
/// only what is left of that file's `budget`.
pub fn check_text_within(text: &str, options: &Options, budget: Budget) -> Checked {
    check_parsed(
        text,
        &parse_stream_within(text, Documents::First, budget),
        options,
    )
}

/// Checks `text`, already parsed into `parsed` (its first document is the config).
pub fn check_parsed(text: &str, parsed: &Result<Stream, YamlError>, options: &Options) -> Checked {
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
    let not_strict_json = upstream::strict_json_warning(text);
    let strict_json = not_strict_json.is_none();
    let mut diagnostics: Vec<Diagnostic> = not_strict_json.into_iter().collect();
    if let Some((more, second)) = stream.later_documents() {
        diagnostics.push(
            Diagnostic::warning(
                Code::ExtraDocument,
                format!("only the first YAML document is read; {more} more ignored"),
            )
            .at(second)
            .hint(format!(
                "the agent reads only what comes before line {}: delete from the `---` or `...` that ends the first document to the end of the file, or merge the documents",
                second.line
            )),
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
    let empty = YamlNode {
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
    if strict_json {
        // Strict JSON (or not upstream's JSON path at all): what else that path refuses.
        diagnostics.extend(upstream::json_integer_warnings(text, root));
    }
    let mut checked = check_document(root, options);
    checked.edit_diagnostics(|found| {
        diagnostics.append(found);
        // Report in reading order; findings without a position first.
        diagnostics.sort_by_key(|d| d.location.map(|l| (l.line, l.column)));
        std::mem::swap(found, &mut diagnostics);
    });
    checked
}

/// Checks one already-parsed document (a config file's first document or a ConfigMap's
/// embedded `data.config`).
pub fn check_document(root: &YamlNode, options: &Options) -> Checked {
    let mut diags = Vec::new();
    let entries: &[(YamlNode, YamlNode)] = match &root.value {
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
    let assigned = assign_fields(entries, &mut diags);
    let get = |field: Field| assigned.iter().find(|(f, _)| *f == field).map(|(_, a)| a);
    // One decoder per field; each reports its own findings. Validity is not book-kept here:
    // `Checked::new` keeps the config exactly when no finding is an error.
    let mut config = Config::defaults(options);
    decode_scalars(&get, &mut config, &mut diags);
    config.enable_ipv6 = ipv6_enabled(get(Field::EnableIpv6), options, &mut diags);
    // The lists are judged with IPv6 as the file (or the flag that wins) turns it.
    let options = &Options {
        enable_ipv6: config.enable_ipv6,
        ..*options
    };
    decode_lists(&get, options, &mut config, &mut diags);
    decode_egress(&get, &mut config, &mut diags);
    decode_pod_share(&get, &mut config, &mut diags);
    if !options.merging {
        check_across_lists(&config, options, &mut diags);
    }
    Checked::new(config, diags)
}

/// Whether IPv6 is managed: an explicit `--enable-ipv6` wins (with a warning when the
/// file's `enableIPv6` says otherwise); else the file's value; else the flag's default.
fn ipv6_enabled(given: Option<&Assigned>, options: &Options, diags: &mut Vec<Diagnostic>) -> bool {
    let Some(assigned) = given else {
        return options.enable_ipv6;
    };
    let Some(file) = decode_bool(assigned, diags) else {
        return options.enable_ipv6;
    };
    if !options.enable_ipv6_given {
        return file;
    }
    if file != options.enable_ipv6 {
        push_finding(
            diags,
            Diagnostic::warning(
                Code::Ipv6FlagOverridesFile,
                format!(
                    "{KEY_ENABLE_IPV6}: {file} is overridden by --enable-ipv6={}",
                    options.enable_ipv6
                ),
            )
            .at(assigned.value.location)
            .hint("drop --enable-ipv6 from the agent's arguments to let the file decide, or make them agree"),
        );
    }
    options.enable_ipv6
}

/// A field's assignment, if the document gave it.
type Lookup<'g, 'a> = dyn Fn(Field) -> Option<&'g Assigned<'a>> + 'g;

/// The scalar fields: `cidrLimit`, the link-local flags (and the legacy `linkLocal`),
/// `resyncInterval`.
fn decode_scalars(get: &Lookup<'_, '_>, config: &mut Config, diags: &mut Vec<Diagnostic>) {
    if let Some(limit) = get(Field::CidrLimit).and_then(|a| decode_cidr_limit(a, diags)) {
        config.cidr_limit = limit;
    }
    if let Some(v) = get(Field::MasqLinkLocal).and_then(|a| decode_bool(a, diags)) {
        config.masq_link_local = v;
    }
    if let Some(v) = get(Field::MasqLinkLocalV6).and_then(|a| decode_bool(a, diags)) {
        config.masq_link_local_ipv6 = v;
    }
    if let Some(a) = get(Field::LegacyLinkLocal) {
        if let Some(v) = decode_legacy_link_local(a, get(Field::MasqLinkLocal), diags) {
            config.masq_link_local = v;
        }
    }
    if let Some(d) = get(Field::Resync).and_then(|a| decode_resync(a, diags)) {
        config.resync_interval = d;
    }
}

/// `outputAddress`, `outputAddressIPv6` and `outputInterfaces`, with where each was written.
fn decode_egress(get: &Lookup<'_, '_>, config: &mut Config, diags: &mut Vec<Diagnostic>) {
    let place = |a: &Assigned| Place {
        file: None,
        location: Some(a.key.location),
    };
    let ipv6 = config.enable_ipv6;
    if let Some(a) = get(Field::OutputAddress) {
        config.output_address = egress::decode_output_address(a, false, ipv6, diags);
        config.provenance.output_address = Some(place(a));
    }
    if let Some(a) = get(Field::OutputAddressV6) {
        config.output_address_ipv6 = egress::decode_output_address(a, true, ipv6, diags);
        config.provenance.output_address_ipv6 = Some(place(a));
    }
    if let Some(a) = get(Field::OutputInterfaces) {
        config.output_interfaces = egress::decode_output_interfaces(a, diags).unwrap_or_default();
        config.provenance.output_interfaces = Some(place(a));
    }
}

/// The pod share's four keys, with where the first of them was written.
fn decode_pod_share(get: &Lookup<'_, '_>, config: &mut Config, diags: &mut Vec<Diagnostic>) {
    let keys = share::ShareKeys {
        limit: get(Field::PodConnectionLimit),
        rate: get(Field::PodNewConnectionRate),
        burst: get(Field::PodNewConnectionBurst),
        per_destination: get(Field::PodRatePerDestination),
    };
    config.pod_share = share::decode_share(&keys, diags);
    config.provenance.pod_share = [keys.limit, keys.rate, keys.burst, keys.per_destination]
        .into_iter()
        .flatten()
        .map(|a| a.key.location)
        .min_by_key(|l| (l.line, l.column))
        .map(|location| Place {
            file: None,
            location: Some(location),
        });
}

/// The three lists, checked against the limit and the flags, with where each entry was
/// written.
fn decode_lists(
    get: &Lookup<'_, '_>,
    options: &Options,
    config: &mut Config,
    diags: &mut Vec<Diagnostic>,
) {
    let cidr_nodes = get(Field::Cidrs).and_then(|a| decode_cidr_list(a, diags));
    let force_nodes = get(Field::Force).and_then(|a| decode_list(a, KEY_FORCE, None, diags));
    let source_nodes = get(Field::Sources).and_then(|a| {
        let empty = Diagnostic::warning(
            Code::EmptySourceList,
            format!("`{KEY_SOURCES}` is empty: traffic from every source is considered, as without the key"),
        )
        .at(a.key.location)
        .hint("list your pod ranges, or remove the key");
        decode_list(a, KEY_SOURCES, Some(empty), diags)
    });
    let force = force_nodes
        .as_deref()
        .map(|nodes| parse_cidr_nodes(nodes, KEY_FORCE, options, diags))
        .unwrap_or_default();
    let sources = source_nodes
        .as_deref()
        .map(|nodes| parse_cidr_nodes(nodes, KEY_SOURCES, options, diags))
        .unwrap_or_default();
    for list in [&force, &sources] {
        overlap_warnings(list, diags);
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
        diags,
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
        ..Provenance::default()
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
}

#[cfg(test)]
mod tests;
