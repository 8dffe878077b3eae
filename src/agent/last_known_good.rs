//! Last-known-good in API mode: the text of the config the agent last applied from the API,
//! with its provenance, kept in the state directory (written atomically, read without
//! following a symlink, size-capped), so an agent that starts while the API is unreachable
//! applies it at once instead of waiting for the API.
//!
//! It is only this node's, for this ConfigMap, unaltered: the file names the node that saved
//! it and carries a seal, the SHA-256 of everything else it holds (text, pools, policies,
//! digest, provenance, the ConfigMap and the node), checked at load. A file of another node
//! (a disk image cloned with it, a state directory moved), of another ConfigMap, or altered
//! since it was saved is refused with the reason, left in place for inspection, and the agent
//! waits for the API. A file without a seal was saved by an agent before seals (the same
//! schema 2, so a rollback still reads the sealed ones): it is applied, with a warning that it
//! cannot be verified, because refusing it would take away the last-known-good exactly on the
//! first start after an upgrade during an API outage; the next read of the API saves it sealed.

use super::state;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What the last-known-good file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastKnownGood {
    pub schema_version: u32,
    /// The ConfigMap it came from (`NAMESPACE/NAME`): a file of another ConfigMap is not used.
    pub configmap: String,
    /// Where the text came from, as log lines name it
    /// (`configmap NS/NAME key config (resourceVersion N)`).
    pub provenance: String,
    /// SHA-256 of the text (`sha256sum` of the same bytes as a file); none for the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When it was saved (RFC 3339, UTC).
    pub saved_at: String,
    /// The base ConfigMap's data key's text; null when the ConfigMap or its key did not exist
    /// (upstream's defaults, as for a missing file).
    pub text: Option<String>,
    /// The node pools that selected the node, in name order (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<crate::config::composed::PoolText>,
    /// The EgressNATPolicies, in name order (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<crate::config::composed::PolicyText>,
    /// The node whose agent saved it (none: an agent without a node name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `sha256:` and the SHA-256 of the file's JSON without this field (see the module's
    /// documentation); set by [`write`], none in files saved before seals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

impl LastKnownGood {
    /// The seal of this content and provenance: the SHA-256 of its JSON without a seal.
    pub fn seal_of(&self) -> String {
        let unsealed = LastKnownGood {
            seal: None,
            ..self.clone()
        };
        let json = serde_json::to_string(&unsealed).unwrap_or_default();
        format!(
            "sha256:{}",
            crate::config::digest::sha256_hex(json.as_bytes())
        )
    }

    /// Saved before seals: applied, but nothing in it can be verified.
    pub fn unsealed(&self) -> bool {
        self.seal.is_none()
    }
}

/// The schema this binary writes: 2 added `pools` and `policies` (an agent that reads only 1
/// refuses a file of 2 rather than apply its base alone).
pub const SCHEMA_VERSION: u32 = 2;
/// The oldest schema this binary reads (1: the base ConfigMap alone).
pub const OLDEST_SCHEMA_VERSION: u32 = 1;

/// The largest last-known-good file read: a config of [`crate::config::MAX_CONFIG_BYTES`]
/// escaped as JSON (at most six bytes per byte) and its few fields.
pub const MAX_LAST_KNOWN_GOOD_BYTES: u64 = 6 * crate::config::MAX_CONFIG_BYTES + (64 << 10);

/// Where the last-known-good lives unless `--last-known-good-dir` (or
/// `IPMASQ_LAST_KNOWN_GOOD_DIR`) says otherwise: a directory that survives a reboot, unlike the
/// state directory, so a rebooted node applies it before the API answers.
pub const DEFAULT_DIR: &str = "/var/lib/ipmasq";
/// The environment variable that moves the last-known-good's directory.
pub const DIR_ENV: &str = "IPMASQ_LAST_KNOWN_GOOD_DIR";
/// The file's name in its directory: one agent's, whatever network namespace it runs in (a
/// rebooted node's namespace is a new one).
pub const FILE_NAME: &str = "last-known-good.json";

/// The last-known-good's directory: the flag, else the environment, else [`DEFAULT_DIR`].
pub fn dir(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os(DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// The last-known-good file in `dir`. Unlike the state file it stays when the agent exits:
/// it is what the next agent starts from.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Where agents before the reboot guard kept it: in the state directory, named by the network
/// namespace (read when the directory above has none, so an upgrade during an API outage
/// still starts from it; never written).
pub fn earlier_path(state_dir: &Path) -> PathBuf {
    let inode = state::netns_inode("self").unwrap_or_else(|| "unknown".into());
    state_dir.join(format!("agent-net{inode}-last-known-good.json"))
}

/// Whether `dir` can hold a last-known-good that the next boot may trust: a directory (a
/// symlink is never followed), ours or root's, writable by no one else. A missing one passes
/// (nothing to read; [`write`] makes it).
pub fn check_directory(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(format!("{}: {err}", dir.display())),
    };
    let euid = rustix::process::geteuid().as_raw();
    let why = if meta.file_type().is_symlink() {
        "is a symlink, not followed".to_string()
    } else if !meta.is_dir() {
        "is not a directory".to_string()
    } else if meta.uid() != euid && meta.uid() != 0 {
        format!("belongs to uid {} (we are uid {euid})", meta.uid())
    } else if meta.mode() & 0o022 != 0 {
        format!(
            "is writable by others than its owner (mode {:o})",
            meta.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(format!(
        "{} {why}: a last-known-good there could be another's; give --last-known-good-dir a directory of root's, mode 0755",
        dir.display()
    ))
}

/// Writes `saved` atomically (an exclusive temporary file renamed into place).
pub fn write(dir: &Path, saved: &LastKnownGood) -> std::io::Result<PathBuf> {
    let sealed = LastKnownGood {
        seal: Some(saved.seal_of()),
        ..saved.clone()
    };
    let text = serde_json::to_string(&sealed).map_err(std::io::Error::other)?;
    // What `read` would refuse is not saved: the file on disk stays the last one it can read.
    if text.len() as u64 + 1 > MAX_LAST_KNOWN_GOOD_BYTES {
        return Err(std::io::Error::other(format!(
            "the config's inputs take {} bytes as JSON, more than the {MAX_LAST_KNOWN_GOOD_BYTES} a last-known-good config can be; the one saved before is kept",
            text.len() + 1
        )));
    }
    make_directory(dir)?;
    let path = path(dir);
    state::write_atomically(dir, &path, (text + "\n").as_bytes())?;
    Ok(path)
}

/// Makes `dir` (0755) when it is missing, and refuses one [`check_directory`] refuses.
fn make_directory(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    check_directory(dir).map_err(std::io::Error::other)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    check_directory(dir).map_err(std::io::Error::other)
}

/// Reads the last-known-good of `configmap` saved on `node`: None when there is none; an error
/// (to log; the file stays) when the file is not a regular file, too large, unreadable, of
/// another schema, of another ConfigMap or node, or altered since it was sealed.
pub fn read(
    dir: &Path,
    configmap: &str,
    node: Option<&str>,
) -> Result<Option<LastKnownGood>, String> {
    check_directory(dir)?;
    read_at(&path(dir), configmap, node)
}

/// Reads the file an agent before the reboot guard saved in `state_dir` (see
/// [`earlier_path`]), with the same checks as [`read`].
pub fn read_earlier(
    state_dir: &Path,
    configmap: &str,
    node: Option<&str>,
) -> Result<Option<LastKnownGood>, String> {
    read_at(&earlier_path(state_dir), configmap, node)
}

fn read_at(
    path: &Path,
    configmap: &str,
    node: Option<&str>,
) -> Result<Option<LastKnownGood>, String> {
    let file = match state::CappedFile::open(
        path,
        MAX_LAST_KNOWN_GOOD_BYTES,
        "a last-known-good config",
    ) {
        Ok(file) => file,
        Err(state::CappedOpenError::Missing(_)) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    fits_memory(path, file.size(), super::memory::read_limit().bytes())?;
    let saved: LastKnownGood = file.json()?;
    if !(OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&saved.schema_version) {
        return Err(format!(
            "{}: schema version {}, this agent reads {OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION}",
            path.display(),
            saved.schema_version
        ));
    }
    if saved.configmap != configmap {
        return Err(format!(
            "{} is the last-known-good of configmap {}, not of {configmap}",
            path.display(),
            saved.configmap
        ));
    }
    check_provenance(&saved, node).map_err(|why| format!("{}: {why}", path.display()))?;
    Ok(Some(saved))
}

/// Whether a last-known-good file of `size` bytes can be read and checked within the memory
/// limit `limit`, judged before it is read (a file under its cap can still be too large for
/// a small pod): an error naming the file and what fits when it cannot (the agent then waits
/// for the API, as without a file).
fn fits_memory(path: &Path, size: u64, limit: Option<u64>) -> Result<(), String> {
    let what = format!("{} (a last-known-good config)", path.display());
    match super::memory::input_too_large(&what, size, limit) {
        Some(reason) => Err(format!("not read: {reason}")),
        None => Ok(()),
    }
}

/// Whether a file read is this node's and unaltered (a file without a seal passes: see the
/// module's documentation).
fn check_provenance(saved: &LastKnownGood, node: Option<&str>) -> Result<(), String> {
    let Some(seal) = &saved.seal else {
        return Ok(());
    };
    if *seal != saved.seal_of() {
        return Err(format!(
            "its seal {seal} does not match its content ({}): altered since it was saved",
            saved.seal_of()
        ));
    }
    if saved.node.as_deref() != node {
        return Err(format!(
            "saved by the agent of node {}, not of {}: another node's config",
            saved.node.as_deref().unwrap_or("(none)"),
            node.unwrap_or("(none)")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: Option<&str> = Some("node-a");

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ipmasq-lkg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn sample(text: Option<&str>) -> LastKnownGood {
        LastKnownGood {
            schema_version: SCHEMA_VERSION,
            configmap: "kube-system/ip-masq-agent".into(),
            provenance: "configmap kube-system/ip-masq-agent key config (resourceVersion 5)".into(),
            digest: text.map(|t| crate::config::digest::sha256_hex(t.as_bytes())),
            saved_at: "2026-01-01T00:00:00Z".into(),
            text: text.map(str::to_string),
            pools: Vec::new(),
            policies: Vec::new(),
            node: Some("node-a".into()),
            seal: None,
        }
    }

    fn sealed(saved: &LastKnownGood) -> LastKnownGood {
        LastKnownGood {
            seal: Some(saved.seal_of()),
            ..saved.clone()
        }
    }

    #[test]
    fn written_then_read_back_for_its_configmap_only() {
        let dir = dir("roundtrip");
        assert_eq!(read(&dir, "kube-system/ip-masq-agent", NODE), Ok(None));
        for saved in [
            sample(Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n")),
            sample(None),
        ] {
            write(&dir, &saved).unwrap();
            assert_eq!(
                read(&dir, "kube-system/ip-masq-agent", NODE),
                Ok(Some(sealed(&saved)))
            );
        }
        let other = read(&dir, "other/ip-masq-agent", NODE).unwrap_err();
        assert!(other.contains("not of other/ip-masq-agent"), "{other}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_planted_symlink_or_an_oversized_file_is_not_read() {
        let dir = dir("planted");
        let target = dir.join("elsewhere.json");
        std::fs::write(
            &target,
            serde_json::to_string(&sample(Some("cidrLimit: 3"))).unwrap(),
        )
        .unwrap();
        std::os::unix::fs::symlink(&target, path(&dir)).unwrap();
        assert!(read(&dir, "kube-system/ip-masq-agent", NODE).is_err());
        // Writing replaces the link; it never writes through it.
        write(&dir, &sample(Some("cidrLimit: 4"))).unwrap();
        assert!(std::fs::read_to_string(&target)
            .unwrap()
            .contains("cidrLimit: 3"));
        std::fs::remove_file(path(&dir)).unwrap();
        let big = std::fs::File::create(path(&dir)).unwrap();
        big.set_len(MAX_LAST_KNOWN_GOOD_BYTES + 1).unwrap();
        let err = read(&dir, "kube-system/ip-masq-agent", NODE).unwrap_err();
        assert!(err.contains("more than"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_that_cannot_fit_the_memory_limit_is_refused_before_it_is_read() {
        let path = Path::new("/state/agent-net1-last-known-good.json");
        let limit = Some(64 << 20);
        assert_eq!(fits_memory(path, 40 << 20, None), Ok(()), "no limit");
        assert_eq!(fits_memory(path, 1 << 20, limit), Ok(()));
        let err = fits_memory(path, 40 << 20, limit).unwrap_err();
        assert!(
            err.starts_with(
                "not read: /state/agent-net1-last-known-good.json (a last-known-good config): "
            ),
            "{err}"
        );
        assert!(err.contains("memory limit of 64.0 MiB"), "{err}");
    }

    #[test]
    fn what_read_would_refuse_is_not_saved_and_the_last_save_stays() {
        let dir = dir("oversized-save");
        let kept = sample(Some("cidrLimit: 3"));
        write(&dir, &kept).unwrap();
        // Pools that make the file larger than `read` takes (each ConfigMap fits the API; many
        // of them together do not fit the cap).
        let mut big = sample(Some("cidrLimit: 4"));
        let pool_text = "#".repeat(1 << 20);
        let pools = (MAX_LAST_KNOWN_GOOD_BYTES >> 20) + 1;
        big.pools = (0..pools)
            .map(|n| crate::config::composed::PoolText {
                name: format!("ip-masq-agent-{n}"),
                selector: "pool=a".into(),
                text: Some(pool_text.clone()),
            })
            .collect();
        let err = write(&dir, &big).unwrap_err().to_string();
        assert!(err.contains("the one saved before is kept"), "{err}");
        assert_eq!(
            read(&dir, "kube-system/ip-masq-agent", NODE),
            Ok(Some(sealed(&kept)))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_nodes_or_an_altered_file_is_refused_and_left_in_place() {
        let dir = dir("provenance");
        let configmap = "kube-system/ip-masq-agent";
        write(&dir, &sample(Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"))).unwrap();
        let err = read(&dir, configmap, Some("node-b")).unwrap_err();
        assert!(
            err.contains("saved by the agent of node node-a, not of node-b"),
            "{err}"
        );
        // One byte of the text changed on disk, the seal kept.
        let text = std::fs::read_to_string(path(&dir)).unwrap();
        let altered = text.replace("10.0.0.0/8", "10.0.0.0/9");
        assert_ne!(text, altered);
        std::fs::write(path(&dir), &altered).unwrap();
        let err = read(&dir, configmap, NODE).unwrap_err();
        assert!(err.contains("altered since it was saved"), "{err}");
        // The node name changed on disk, to pass as node-b's: the seal says no.
        let moved = text.replace("\"node\":\"node-a\"", "\"node\":\"node-b\"");
        std::fs::write(path(&dir), &moved).unwrap();
        let err = read(&dir, configmap, Some("node-b")).unwrap_err();
        assert!(err.contains("altered since it was saved"), "{err}");
        assert!(path(&dir).exists(), "the file stays for inspection");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_saved_before_seals_is_read_and_said_unsealed() {
        let dir = dir("unsealed");
        let mut old = sample(Some("cidrLimit: 3"));
        old.node = None;
        std::fs::write(path(&dir), serde_json::to_string(&old).unwrap()).unwrap();
        let read_back = read(&dir, "kube-system/ip-masq-agent", NODE)
            .unwrap()
            .expect("read");
        assert!(read_back.unsealed());
        assert_eq!(read_back, old);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_that_is_a_symlink_or_writable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let real = dir("dir-real");
        let configmap = "kube-system/ip-masq-agent";
        write(&real, &sample(Some("cidrLimit: 3"))).unwrap();
        let link = real.with_file_name(format!(
            "{}-link",
            real.file_name().unwrap().to_string_lossy()
        ));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = read(&link, configmap, NODE).unwrap_err();
        assert!(err.contains("is a symlink, not followed"), "{err}");
        let err = write(&link, &sample(Some("cidrLimit: 4")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a symlink, not followed"), "{err}");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = read(&real, configmap, NODE).unwrap_err();
        assert!(
            err.contains("writable by others than its owner (mode 777)"),
            "{err}"
        );
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(read(&real, configmap, NODE).unwrap().is_some());
        let missing = real.join("made-at-first-save");
        assert_eq!(read(&missing, configmap, NODE), Ok(None));
        write(&missing, &sample(Some("cidrLimit: 5"))).unwrap();
        assert!(read(&missing, configmap, NODE).unwrap().is_some());
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&real);
    }

    #[test]
    fn the_file_an_agent_kept_in_the_state_directory_before_is_still_read() {
        let state = dir("earlier");
        let saved = sealed(&sample(Some("cidrLimit: 3")));
        std::fs::write(earlier_path(&state), serde_json::to_string(&saved).unwrap()).unwrap();
        assert_eq!(
            read_earlier(&state, "kube-system/ip-masq-agent", NODE),
            Ok(Some(saved))
        );
        let _ = std::fs::remove_dir_all(&state);
    }
}
