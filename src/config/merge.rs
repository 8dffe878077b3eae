//! Several config files merged into one (`--config-dir DIR`), ip-masq-agent-v2's convention:
//! every regular file in DIR whose name starts with `ip-masq` (a projected volume of a
//! cloud-managed and a user-managed ConfigMap), read in name order. As v2 merges them: the
//! lists start empty and are unions in that order without repeats (so files that list no
//! CIDRs leave `nonMasqueradeCIDRs` empty; only a directory without such files means the
//! defaults), booleans are OR'd, and each file is held to its own `cidrLimit` (v2's fixed 64
//! per file), never the merged lists. Beyond v2: the shortest `resyncInterval` wins, and the
//! largest `cidrLimit` given is the one reported; one invalid file rejects the whole merge.

use super::check::check_across_lists;
use super::{
    check_text, default_cidrs, Checked, Code, Config, Diagnostic, Options, Place, Provenance,
    ReadError,
};
use ipnet::IpNet;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The name prefix of the files that take part.
pub const PREFIX: &str = "ip-masq";

/// One file's checked contents, under the name reports use for it.
#[derive(Clone, Debug)]
pub struct Part {
    pub name: Arc<str>,
    pub checked: Checked,
}

/// The files of `dir` that take part, in name order: names starting with `ip-masq` that are
/// regular files once symlinks are followed (a ConfigMap volume is all symlinks). A missing
/// directory has none.
pub fn part_paths(dir: &Path) -> Result<Vec<PathBuf>, ReadError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ReadError::Other {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .starts_with(PREFIX.as_bytes())
        })
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    Ok(paths)
}

/// Reads and checks every part of `dir` as one part of a merge; a file that cannot be read
/// becomes an error of that file (and so rejects the merge).
pub fn read_parts(
    paths: &[PathBuf],
    texts: &[Result<String, String>],
    options: &Options,
) -> Vec<Part> {
    let options = Options {
        merging: true,
        ..*options
    };
    paths
        .iter()
        .zip(texts)
        .map(|(path, text)| {
            let name: Arc<str> = path.display().to_string().into();
            let checked = match text {
                Ok(text) => check_text(text, &options),
                Err(reason) => Checked::rejected(vec![Diagnostic::error(Code::Io, reason.clone())]),
            };
            Part { name, checked }
        })
        .collect()
}

/// A part's place, named by its file.
fn in_file(mut place: Place, file: &Arc<str>) -> Place {
    place.file = Some(file.clone());
    place
}

/// Files that name another output address of a family than the one the merge took (the first
/// file's): an error naming both places.
fn output_address_conflicts(configs: &[(&Arc<str>, &Config)], merged: &Config) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    for v6 in [false, true] {
        let Some(taken) = merged.output_address_of(v6) else {
            continue;
        };
        let taken_at = if v6 {
            &merged.provenance.output_address_ipv6
        } else {
            &merged.provenance.output_address
        };
        let key = if v6 {
            "outputAddressIPv6"
        } else {
            "outputAddress"
        };
        for (file, config) in configs {
            let Some(other) = config.output_address_of(v6).filter(|o| *o != taken) else {
                continue;
            };
            let place = if v6 {
                &config.provenance.output_address_ipv6
            } else {
                &config.provenance.output_address
            };
            let first = taken_at.clone().unwrap_or_default();
            found.push(
                Diagnostic::error(
                    Code::OutputAddressConflict,
                    format!("{key}: {other} here contradicts {taken} at {first}"),
                )
                .at_opt(place.as_ref().and_then(|p| p.location))
                .in_file((*file).clone())
                .hint(format!("give {key} in one file of the directory only")),
            );
        }
    }
    found
}

/// The output address of each family from the first file that gives one (a different one
/// elsewhere is an error reported by `merge`).
fn take_first_output_addresses(
    config: &Config,
    file: &Arc<str>,
    merged: &mut Config,
    provenance: &mut Provenance,
) {
    for v6 in [false, true] {
        let (value, place) = if v6 {
            (
                config.output_address_ipv6,
                &config.provenance.output_address_ipv6,
            )
        } else {
            (config.output_address, &config.provenance.output_address)
        };
        let (slot, slot_place) = if v6 {
            (
                &mut merged.output_address_ipv6,
                &mut provenance.output_address_ipv6,
            )
        } else {
            (&mut merged.output_address, &mut provenance.output_address)
        };
        if slot.is_none() && value.is_some() {
            *slot = value;
            *slot_place = place.clone().map(|p| in_file(p, file));
        }
    }
}

/// Files that give another pod share than the one the merge took (the first file's): an error
/// naming both places. A share is whole (its limit, rate, burst and scope): parts from several
/// files would make a share nobody wrote.
fn pod_share_conflicts(configs: &[(&Arc<str>, &Config)], merged: &Config) -> Vec<Diagnostic> {
    let taken = merged.pod_share;
    if !taken.is_limited() {
        return Vec::new();
    }
    let first = merged.provenance.pod_share.clone().unwrap_or_default();
    configs
        .iter()
        .filter(|(_, config)| config.pod_share.is_limited() && config.pod_share != taken)
        .map(|(file, config)| {
            Diagnostic::error(
                Code::PodShareConflict,
                format!(
                    "the pod share here ({}) contradicts the one at {first} ({taken})",
                    config.pod_share
                ),
            )
            .at_opt(config.provenance.pod_share.as_ref().and_then(|p| p.location))
            .in_file((*file).clone())
            .hint("give the pod share's keys in one file only (for a pool of nodes: in that pool, not in the base)")
        })
        .collect()
}

/// Appends `nets` (with their places) to a union, skipping what it holds already.
fn union_into(
    nets: &[IpNet],
    places: &[Place],
    file: &Arc<str>,
    seen: &mut HashSet<IpNet>,
    out: &mut Vec<IpNet>,
    out_places: &mut Vec<Place>,
) {
    for (i, net) in nets.iter().enumerate() {
        if seen.insert(*net) {
            out.push(*net);
            let mut place = places.get(i).cloned().unwrap_or_default();
            place.file = Some(file.clone());
            out_places.push(place);
        }
    }
}

/// The configs of the parts as one: lists as unions in file order without repeats (each
/// entry's file and place kept), starting empty as v2's do (the defaults only when there is
/// no part at all), booleans OR'd, the largest `cidrLimit` and the shortest `resyncInterval`
/// given, the first file's pod share.
// Long: one pass over the parts in file order keeps every list's order, its first place and
// its repeats together; split per field, each list would walk the parts again.
fn merge_configs(configs: &[(&Arc<str>, &Config)], options: &Options) -> Config {
    let mut merged = Config::defaults(options);
    let mut provenance = Provenance::default();
    let (mut kept, mut forced, mut sources) = (Vec::new(), Vec::new(), Vec::new());
    let (mut seen_kept, mut seen_forced, mut seen_sources) =
        (HashSet::new(), HashSet::new(), HashSet::new());
    let mut limit: Option<i64> = None;
    let mut resync = None;
    for (file, config) in configs {
        let given = &config.provenance;
        if given.gave_non_masquerade_cidrs {
            provenance.gave_non_masquerade_cidrs = true;
            union_into(
                &config.non_masquerade_cidrs,
                &given.non_masquerade,
                file,
                &mut seen_kept,
                &mut kept,
                &mut provenance.non_masquerade,
            );
        }
        union_into(
            &config.force_masquerade_cidrs,
            &given.force,
            file,
            &mut seen_forced,
            &mut forced,
            &mut provenance.force,
        );
        union_into(
            &config.masquerade_source_cidrs,
            &given.sources,
            file,
            &mut seen_sources,
            &mut sources,
            &mut provenance.sources,
        );
        merged.masq_link_local |= config.masq_link_local;
        merged.masq_link_local_ipv6 |= config.masq_link_local_ipv6;
        merged.enable_ipv6 |= config.enable_ipv6;
        for pattern in &config.output_interfaces {
            if !merged.output_interfaces.contains(pattern) {
                merged.output_interfaces.push(pattern.clone());
            }
        }
        if provenance.output_interfaces.is_none() {
            provenance.output_interfaces =
                given.output_interfaces.clone().map(|p| in_file(p, file));
        }
        take_first_output_addresses(config, file, &mut merged, &mut provenance);
        // The first file that gives a share wins; a different one elsewhere is an error
        // reported by `merge`.
        if config.pod_share.is_limited() && !merged.pod_share.is_limited() {
            merged.pod_share = config.pod_share;
            provenance.pod_share = given.pod_share.clone().map(|p| in_file(p, file));
        }
        if given.gave_cidr_limit {
            provenance.gave_cidr_limit = true;
            limit = Some(limit.map_or(config.cidr_limit, |l: i64| l.max(config.cidr_limit)));
        }
        if given.gave_resync_interval {
            provenance.gave_resync_interval = true;
            resync = Some(
                resync.map_or(config.resync_interval, |r: super::GoDuration| {
                    r.min(config.resync_interval)
                }),
            );
        }
    }
    merged.non_masquerade_cidrs = if configs.is_empty() {
        default_cidrs(options)
    } else {
        kept
    };
    merged.output_interfaces.sort();
    merged.force_masquerade_cidrs = forced;
    merged.masquerade_source_cidrs = sources;
    if let Some(limit) = limit {
        merged.cidr_limit = limit;
    }
    if let Some(resync) = resync {
        merged.resync_interval = resync;
    }
    merged.provenance = provenance;
    merged
}

/// Merges checked parts. Every finding of every part is kept, named by its file; the merge
/// has a config only when no part and no check of the merged lists has an error.
pub fn merge(dir: &Path, parts: &[Part], options: &Options) -> Checked {
    let mut diagnostics: Vec<Diagnostic> = Vec::new();
    for part in parts {
        diagnostics.extend(
            part.checked
                .diagnostics()
                .iter()
                .cloned()
                .map(|d| d.in_file(part.name.clone())),
        );
    }
    if parts.is_empty() {
        diagnostics.push(
            Diagnostic::warning(
                Code::NoConfigFiles,
                format!(
                    "{} holds no file whose name starts with `{PREFIX}`: upstream's defaults apply",
                    dir.display()
                ),
            )
            .hint("mount the ConfigMaps there (their keys must start with `ip-masq`)"),
        );
    }
    let configs: Vec<(&Arc<str>, &Config)> = parts
        .iter()
        .filter_map(|p| p.checked.config().map(|c| (&p.name, c)))
        .collect();
    if configs.len() < parts.len() {
        return Checked::rejected(diagnostics);
    }
    let merged = merge_configs(&configs, options);
    let mut found = Vec::new();
    if !configs.is_empty() && !merged.provenance.gave_non_masquerade_cidrs {
        found.push(
            Diagnostic::warning(
                Code::EmptyCidrList,
                format!(
                    "no file of {} lists nonMasqueradeCIDRs: as in ip-masq-agent-v2, the merged list starts empty, so everything but link-local is masqueraded (upstream's defaults apply only when no `{PREFIX}*` file is there)",
                    dir.display()
                ),
            )
            .hint("list the ranges to keep (e.g. your pod and service CIDRs) in one of the files"),
        );
    }
    check_across_lists(&merged, options, &mut found);
    found.extend(output_address_conflicts(&configs, &merged));
    found.extend(pod_share_conflicts(&configs, &merged));
    diagnostics.extend(found);
    Checked::new(merged, diagnostics)
}

/// Checks every part of a directory's read (`paths` and their `texts`) and merges them.
pub fn check_parts(
    dir: &Path,
    paths: &[PathBuf],
    texts: &[Result<String, String>],
    options: &Options,
) -> Checked {
    merge(dir, &read_parts(paths, texts, options), options)
}

/// The digest of a directory's read: of `sha256sum`'s lines for its parts.
pub fn listing_digest(paths: &[PathBuf], texts: &[Result<String, String>]) -> String {
    let listing: String = paths
        .iter()
        .zip(texts)
        .map(|(path, text)| {
            let bytes = text.as_deref().unwrap_or_default().as_bytes();
            format!("{}  {}\n", super::digest::sha256_hex(bytes), path.display())
        })
        .collect();
    super::digest::sha256_hex(listing.as_bytes())
}

#[cfg(test)]
mod tests;
