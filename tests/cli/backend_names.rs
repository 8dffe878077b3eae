//! Where backends are named. Adding a backend is one folder under `src/backend/`, its variant
//! in `src/backend/id.rs` and one arm of the factory (`src/backend/select.rs`); every other
//! place in the program's code that names a particular backend is listed here, so that a new
//! one is a decision and not an accident. And no backend reads through another: what several
//! need (the nat chains a packet meets before ours) is read by neutral code.

use super::code_shape::rust_files;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Folders under `src/backend/` that are no backend (none: the protocol plumbing any backend
/// may use lives in `src/netlink/`).
const NEUTRAL_FOLDERS: &[&str] = &[];

/// Every file outside a backend's own folder whose code (tests aside) names a particular
/// backend, and why it must.
const PLACES_THAT_NAME_A_BACKEND: &[(&str, &str)] = &[
    (
        "src/backend/id.rs",
        "the identity: each backend's spelling, its flag, whether it writes an iptables chain",
    ),
    ("src/backend/select.rs", "the factory: one arm per backend"),
    (
        "src/backend/mod.rs",
        "declares each backend's folder as a module",
    ),
    (
        "src/cli/mod.rs",
        "the flags' spelling turned into an identity (`BackendFlags::choice`)",
    ),
    (
        "src/agent/reconcile/admission.rs",
        "a config too large for the memory limit suggests nftables, the lighter backend",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `src/...` with forward slashes.
fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// The backends: the folders under `src/backend/` other than the neutral ones.
fn backend_folders() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(root().join("src/backend"))
        .expect("read src/backend")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .filter_map(|p| Some(p.file_name()?.to_str()?.to_string()))
        .filter(|name| !NEUTRAL_FOLDERS.contains(&name.as_str()))
        .collect();
    found.sort();
    found
}

/// Whether the module in `file` is declared under `#[cfg(test)]` (or inside such a module).
fn test_only(file: &Path) -> bool {
    let Some(name) = file.file_stem().and_then(|s| s.to_str()) else {
        return false;
    };
    let dir = file.parent().expect("a parent");
    let (declared_as, parent) = if name == "mod" {
        let Some(module) = dir.file_name().and_then(|s| s.to_str()) else {
            return false;
        };
        let above = dir.parent().expect("a parent");
        (module.to_string(), parent_module(above))
    } else {
        (name.to_string(), parent_module(dir))
    };
    let Some(parent) = parent else {
        return false;
    };
    let text = std::fs::read_to_string(&parent).unwrap_or_default();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let declared = lines.iter().position(|l| {
        l.trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ")
            .strip_prefix("mod ")
            .is_some_and(|rest| rest == format!("{declared_as};"))
    });
    match declared {
        Some(at) if at > 0 && lines[at - 1] == "#[cfg(test)]" => true,
        Some(_) => test_only(&parent),
        None => false,
    }
}

/// The file that declares the modules of folder `dir`: its `mod.rs`, `lib.rs` for `src/`, or
/// the sibling `dir.rs` (`src/cluster/mirror.rs` declares `src/cluster/mirror/tests.rs`).
fn parent_module(dir: &Path) -> Option<PathBuf> {
    ["mod.rs", "lib.rs"]
        .iter()
        .map(|f| dir.join(f))
        .chain([dir.with_extension("rs")])
        .find(|p| p.is_file())
}

/// The code of `text` a scan reads: comment lines and the trailing `#[cfg(test)] mod tests`
/// left out.
fn production_code(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]"
            && lines
                .get(i + 1)
                .is_some_and(|next| next.trim().starts_with("mod tests {"))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push((i + 1, line.to_string()));
    }
    code
}

/// The backends' spellings (`"iptables-nft"`, ...), read from `BackendId::as_str`.
fn spellings() -> Vec<String> {
    let id = std::fs::read_to_string(root().join("src/backend/id.rs")).expect("read id.rs");
    let body = id
        .split("pub fn as_str(self)")
        .nth(1)
        .expect("BackendId::as_str")
        .split("\n    }\n")
        .next()
        .expect("its body");
    let lines: Vec<&str> = body.lines().collect();
    lines
        .iter()
        .enumerate()
        // The test-only fake is no backend of the program.
        .filter(|(i, _)| *i == 0 || lines[i - 1].trim() != "#[cfg(test)]")
        .filter_map(|(_, l)| l.split_once("=> \"")?.1.split_once('"'))
        .map(|(spelling, _)| format!("\"{spelling}\""))
        .collect()
}

/// What in `line` names a particular backend: a `BackendId` variant, a backend's spelling, or
/// a path into a backend's folder.
fn names_a_backend(line: &str, backends: &[String], spellings: &[String]) -> Option<String> {
    let after_id = line.split("BackendId::").skip(1).find_map(|rest| {
        let variant: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (variant != "ALL" && variant.starts_with(|c: char| c.is_uppercase()))
            .then(|| format!("BackendId::{variant}"))
    });
    after_id
        .or_else(|| {
            spellings
                .iter()
                .find(|s| line.contains(s.as_str()))
                .cloned()
        })
        .or_else(|| {
            backends
                .iter()
                .find(|b| reaches_module(line, b))
                .map(|b| format!("the module `{b}`"))
        })
}

/// Whether `code` reaches into module `module` of `src/backend/`: `super::module`,
/// `backend::module`, `mod module;`, or a `{...}` import group of `super::`/`backend::` naming it.
fn reaches_module(code: &str, module: &str) -> bool {
    let word = |rest: &str| {
        rest.strip_prefix(module)
            .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
    };
    for prefix in ["super::", "backend::", "mod "] {
        if code.split(prefix).skip(1).any(word) {
            return true;
        }
    }
    ["super::{", "backend::{"].iter().any(|group| {
        code.split(group).skip(1).any(|rest| {
            let inside = rest.split('}').next().unwrap_or("");
            inside
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == module)
        })
    })
}

/// Every file of `src/` outside the backends' folders whose code names a backend, with the
/// first line that does.
fn places_that_name_a_backend() -> BTreeMap<String, String> {
    let backends = backend_folders();
    let spellings = spellings();
    assert!(
        backends.len() >= 2 && spellings.len() >= 3,
        "the scan found backends {backends:?} spelled {spellings:?}"
    );
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut found = BTreeMap::new();
    for file in files {
        let name = relative(&file);
        let own_folder = backends
            .iter()
            .any(|b| name.starts_with(&format!("src/backend/{b}/")));
        if own_folder || test_only(&file) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read");
        let first = production_code(&text).into_iter().find_map(|(n, line)| {
            names_a_backend(&line, &backends, &spellings).map(|what| format!("line {n}: {what}"))
        });
        if let Some(first) = first {
            found.insert(name, first);
        }
    }
    found
}

#[test]
fn every_place_that_names_a_backend_is_listed() {
    let found = places_that_name_a_backend();
    let listed: BTreeMap<&str, &str> = PLACES_THAT_NAME_A_BACKEND.iter().copied().collect();
    let unlisted: Vec<String> = found
        .iter()
        .filter(|(file, _)| !listed.contains_key(file.as_str()))
        .map(|(file, first)| format!("{file} ({first})"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "these files name a particular backend outside its folder: {unlisted:#?}\n\
         a backend is one folder under src/backend/ and one arm in src/backend/select.rs; \
         ask the backend (BackendId::is_iptables, a Backend method) instead, or add the file \
         to PLACES_THAT_NAME_A_BACKEND in tests/cli/backend_names.rs with the reason"
    );
    let stale: Vec<&str> = listed
        .keys()
        .filter(|file| !found.contains_key(**file))
        .copied()
        .collect();
    assert!(
        stale.is_empty(),
        "listed in PLACES_THAT_NAME_A_BACKEND but naming no backend any more: {stale:?}"
    );
}

#[test]
fn no_backend_imports_another() {
    let backends = backend_folders();
    let mut crossings = Vec::new();
    for backend in &backends {
        let mut files = Vec::new();
        rust_files(&root().join("src/backend").join(backend), &mut files);
        assert!(!files.is_empty(), "no files in src/backend/{backend}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read");
            let code: Vec<String> = text
                .lines()
                .filter(|l| !l.trim().starts_with("//"))
                .map(str::to_string)
                .collect();
            let code = code.join("\n");
            for other in backends.iter().filter(|o| *o != backend) {
                if reaches_module(&code, other) {
                    crossings.push(format!("{} reaches into {other}", relative(&file)));
                }
            }
        }
    }
    assert!(
        crossings.is_empty(),
        "a backend reads through another: {crossings:#?}\n\
         move what both need to neutral code under src/backend/ (see nat_before.rs)"
    );
}

#[test]
fn the_scans_see_what_they_look_for() {
    let backends = vec!["iptables".to_string(), "nftables".to_string()];
    let spellings = vec!["\"nftables\"".to_string()];
    let names = |line: &str| names_a_backend(line, &backends, &spellings);
    assert_eq!(
        names("if id == BackendId::Nftables {").as_deref(),
        Some("BackendId::Nftables")
    );
    assert_eq!(names("for id in BackendId::ALL {"), None);
    assert_eq!(
        names("let n = super::nftables::nat_chains_before(f);").as_deref(),
        Some("the module `nftables`")
    );
    assert!(names("use super::{iptables::Variant, Backend};").is_some());
    assert!(names("use netlink_packet_netfilter::nftables::RuleMessage;").is_none());
    assert!(names("let kind = \"nftables\";").is_some());
    assert!(reaches_module(
        "use crate::backend::{\n    nftables,\n    Backend,\n};",
        "nftables"
    ));
    assert!(!reaches_module(
        "use super::nftables_leftovers;",
        "nftables"
    ));
}
