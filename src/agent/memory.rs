//! The memory the agent may use: its cgroup's limit (cgroup v2 `memory.max`, v1
//! `memory.limit_in_bytes`, the lowest on the way up the hierarchy), against which a config's
//! estimated peak is checked before it is applied, so a list too long for the DaemonSet's limit
//! is refused with a clear error instead of an OOM kill on every start.

use crate::backend::USABLE_PERCENT;
use crate::text::mib;
use std::path::{Path, PathBuf};

/// A v1 "no limit" is the largest page-aligned i64; anything this large is no limit.
const NO_LIMIT: u64 = 1 << 62;

/// Where the memory controller's hierarchy is mounted, and whether it is v2.
fn hierarchy() -> Option<(PathBuf, bool)> {
    let unified = Path::new("/sys/fs/cgroup");
    if unified.join("cgroup.controllers").exists() {
        return Some((unified.to_path_buf(), true));
    }
    let v1 = unified.join("memory");
    v1.join("memory.limit_in_bytes")
        .exists()
        .then_some((v1, false))
}

/// This process's cgroup path in the memory hierarchy, from `/proc/self/cgroup` text.
fn own_path(proc_cgroup: &str, v2: bool) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let matches = if v2 {
            id == "0" && controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == "memory")
        };
        matches.then(|| path.to_string())
    })
}

/// Parses a limit file's content; None for no limit.
fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|&v| v < NO_LIMIT)
}

/// The lowest limit from `dir` up to `root` (a parent's limit binds its children too).
#[cfg(test)]
fn lowest_limit(root: &Path, dir: &Path, file: &str) -> Option<u64> {
    lowest_limit_read(root, dir, file).ok().flatten()
}

/// The lowest limit from `dir` up to `root` (a parent's limit binds its children too); None
/// when every file says none, Err when not one file on the way could be read.
fn lowest_limit_read(root: &Path, dir: &Path, file: &str) -> Result<Option<u64>, ()> {
    let mut lowest: Option<u64> = None;
    let mut read_any = false;
    let mut at = Some(dir);
    while let Some(d) = at {
        if let Ok(text) = std::fs::read_to_string(d.join(file)) {
            read_any = true;
            if let Some(limit) = parse_limit(&text) {
                lowest = Some(lowest.map_or(limit, |l| l.min(limit)));
            }
        }
        if d == root {
            break;
        }
        at = d.parent().filter(|p| p.starts_with(root));
    }
    if read_any {
        Ok(lowest)
    } else {
        Err(())
    }
}

/// What the agent could learn of its memory limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// This many bytes: a config whose estimated peak does not fit is refused.
    Bytes(u64),
    /// The cgroup sets none (no limit from `dir` up to the hierarchy's root).
    Unlimited { dir: PathBuf },
    /// None could be read (no memory controller mounted, as under `ip netns exec`, which
    /// mounts a fresh /sys): the reason.
    Unreadable(String),
}

impl Limit {
    /// The limit in bytes, when there is one.
    pub fn bytes(&self) -> Option<u64> {
        match self {
            Limit::Bytes(bytes) => Some(*bytes),
            _ => None,
        }
    }
}

/// The memory limit that applies to this process, or why there is none.
pub fn read_limit() -> Limit {
    let Some((root, v2)) = hierarchy() else {
        return Limit::Unreadable(
            "no memory cgroup is mounted at /sys/fs/cgroup (neither v2's cgroup.controllers nor v1's memory/memory.limit_in_bytes)".into(),
        );
    };
    let text = match std::fs::read_to_string("/proc/self/cgroup") {
        Ok(text) => text,
        Err(err) => return Limit::Unreadable(format!("cannot read /proc/self/cgroup: {err}")),
    };
    let path = own_path(&text, v2).unwrap_or_default();
    let mut dir = root.join(path.trim_start_matches('/'));
    // In a container without its own cgroup namespace the path names the host's view; the
    // container sees its own cgroup at the mount's root.
    if !dir.is_dir() {
        dir = root.clone();
    }
    let file = if v2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    match lowest_limit_read(&root, &dir, file) {
        Ok(Some(bytes)) => Limit::Bytes(bytes),
        Ok(None) => Limit::Unlimited { dir },
        // cgroup v2's root has no memory.max: nothing limits a process there.
        Err(()) if v2 && dir == root => Limit::Unlimited { dir },
        Err(()) => Limit::Unreadable(format!("cannot read {file} in {} or above", dir.display())),
    }
}

/// The limit to suggest to a container whose config needs `needed` bytes at the peak: the
/// smallest whole MiB whose usable share holds it, and always above `limit` (the one it has),
/// so the agent never suggests the limit it already runs with.
pub fn suggested_limit(needed: u64, limit: u64) -> u64 {
    const MIB: u128 = 1 << 20;
    let total = (u128::from(needed) * 100).div_ceil(u128::from(USABLE_PERCENT));
    let mib = total.div_ceil(MIB).max(u128::from(limit) / MIB + 1);
    u64::try_from(mib * MIB).unwrap_or(u64::MAX)
}

/// What the text of a config's inputs costs the agent while it is held and checked, per byte
/// of text, where it is not parsed against a file's own budget: the text as received, its
/// decoded and handed-on copies (the source's, the last-known-good's), and the tree it is
/// parsed into (a long CIDR list takes about 7 bytes of tree per byte of text, see
/// `config::yaml`). EgressNATPolicies, node pools and a last-known-good file are judged by it
/// before they are parsed; the config they make is then judged by its rules as a file's is.
pub const INPUT_BYTES_PER_TEXT_BYTE: u64 = 10;

/// Why inputs of `bytes` bytes of text (`what`: how the log names them) cannot be held and
/// checked within the memory limit `limit` (None: no limit, everything fits), if they cannot.
pub fn input_too_large(what: &str, bytes: u64, limit: Option<u64>) -> Option<String> {
    let limit = limit?;
    let usable = limit / 100 * USABLE_PERCENT;
    let needed = bytes.saturating_mul(INPUT_BYTES_PER_TEXT_BYTE);
    if needed <= usable {
        return None;
    }
    Some(format!(
        "{what}: {bytes} bytes of text, about {} while read and checked ({INPUT_BYTES_PER_TEXT_BYTE} bytes per byte of text), more than {USABLE_PERCENT}% of this agent's memory limit of {} (at most about {} of text fit); raise the container's memory limit to at least {}, or make the inputs shorter",
        mib(needed),
        mib(limit),
        mib(usable / INPUT_BYTES_PER_TEXT_BYTE),
        mib(suggested_limit(needed, limit)),
    ))
}

/// The most text of inputs [`input_too_large`] lets through within the memory limit `limit`
/// (None: no limit): a store of API objects that holds more is refused before it is handed on.
pub fn input_text_cap(limit: Option<u64>) -> Option<u64> {
    let limit = limit?;
    Some(limit / 100 * USABLE_PERCENT / INPUT_BYTES_PER_TEXT_BYTE)
}

/// The most one answer of the API's EgressNATPolicy list may hold within the memory limit
/// `limit` (None: no limit, no cap): half as much again as [`input_text_cap`] (a list holds
/// each policy's metadata beside its text), so a list that could never be admitted is cut off
/// as it arrives (it is held as text, copied and decoded beside it) instead of growing the
/// agent past its limit.
pub fn answer_cap(limit: Option<u64>) -> Option<u64> {
    input_text_cap(limit).map(|text| text / 2 * 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup_path_is_found_in_either_version() {
        let v1 = "12:pids:/a\n5:memory:/kubepods/pod1/c1\n0::/\n";
        assert_eq!(own_path(v1, false).as_deref(), Some("/kubepods/pod1/c1"));
        let joined = "7:cpu,memory:/x\n";
        assert_eq!(own_path(joined, false).as_deref(), Some("/x"));
        let v2 = "0::/system.slice/ipmasq.service\n";
        assert_eq!(
            own_path(v2, true).as_deref(),
            Some("/system.slice/ipmasq.service")
        );
    }

    #[test]
    fn limits_parse_and_the_lowest_on_the_way_up_wins() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("67108864\n"), Some(64 << 20));
        let root = std::env::temp_dir().join(format!("ipmasq-cg-{}", std::process::id()));
        let leaf = root.join("pod/container");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(root.join("memory.max"), "max\n").unwrap();
        std::fs::write(root.join("pod/memory.max"), "50331648\n").unwrap();
        std::fs::write(leaf.join("memory.max"), "67108864\n").unwrap();
        assert_eq!(lowest_limit(&root, &leaf, "memory.max"), Some(48 << 20));
        assert_eq!(lowest_limit(&root, &root, "memory.max"), None);
        assert_eq!(lowest_limit_read(&root, &root, "memory.max"), Ok(None));
        assert_eq!(lowest_limit_read(&root, &leaf, "memory.high"), Err(()));
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The suggestion is always above the limit the agent has: a peak just over 90 % of
    /// 64 MiB once made "raise the container's memory limit to at least 64.0 MiB".
    #[test]
    fn the_suggested_limit_is_never_the_one_the_agent_has() {
        let limit = 64 << 20;
        let usable = limit / 100 * USABLE_PERCENT;
        for needed in [usable + 1, usable + 4096, limit - 1, limit, limit + 1] {
            let suggested = suggested_limit(needed, limit);
            assert!(suggested > limit, "{needed}: {suggested}");
            assert_eq!(suggested % (1 << 20), 0, "whole MiB");
            assert!(
                suggested / 100 * USABLE_PERCENT >= needed,
                "{needed}: {suggested}"
            );
        }
        assert_eq!(suggested_limit(usable + 1, limit), 65 << 20);
        assert_eq!(suggested_limit(90 << 20, limit), 100 << 20);
    }

    /// A last-known-good under its size cap can still be too large for a small pod: inputs
    /// are judged by their text before they are read into memory.
    #[test]
    fn inputs_too_large_for_the_limit_are_refused_with_what_fits() {
        let limit = 64u64 << 20;
        assert_eq!(input_too_large("x", 40 << 20, None), None, "no limit");
        assert_eq!(input_too_large("x", 1 << 20, Some(limit)), None);
        let usable = limit / 100 * USABLE_PERCENT;
        let most = usable / INPUT_BYTES_PER_TEXT_BYTE;
        assert_eq!(input_too_large("x", most, Some(limit)), None, "just fits");
        let reason = input_too_large("the policies", most + 1, Some(limit)).unwrap();
        assert!(reason.starts_with("the policies: "), "{reason}");
        assert!(reason.contains("memory limit of 64.0 MiB"), "{reason}");
        assert!(
            reason.contains("raise the container's memory limit"),
            "{reason}"
        );
        let reason = input_too_large("lkg", 40 << 20, Some(limit)).unwrap();
        assert!(reason.contains("at least 445.0 MiB"), "{reason}");
        assert!(input_too_large("x", u64::MAX, Some(limit)).is_some());
    }
}
