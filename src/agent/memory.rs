//! The memory the agent may use: its cgroup's limit (cgroup v2 `memory.max`, v1
//! `memory.limit_in_bytes`, the lowest on the way up the hierarchy), against which a config's
//! estimated peak is checked before it is applied, so a list too long for the DaemonSet's limit
//! is refused with a clear error instead of an OOM kill on every start.

use std::path::{Path, PathBuf};

/// A v1 "no limit" is the largest page-aligned i64; anything this large is no limit.
const NO_LIMIT: u64 = 1 << 62;

/// The share of the limit a config's estimated peak may take: the rest is headroom for what
/// the estimate does not see (the runtime's own pages, a slow kernel reclaim).
pub const USABLE_PERCENT: u64 = 90;

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
fn lowest_limit(root: &Path, dir: &Path, file: &str) -> Option<u64> {
    let mut lowest: Option<u64> = None;
    let mut at = Some(dir);
    while let Some(d) = at {
        if let Some(limit) = std::fs::read_to_string(d.join(file))
            .ok()
            .as_deref()
            .and_then(parse_limit)
        {
            lowest = Some(lowest.map_or(limit, |l| l.min(limit)));
        }
        if d == root {
            break;
        }
        at = d.parent().filter(|p| p.starts_with(root));
    }
    lowest
}

/// The memory limit that applies to this process, in bytes; None when there is none (or no
/// memory controller to ask).
pub fn limit() -> Option<u64> {
    let (root, v2) = hierarchy()?;
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
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
    lowest_limit(&root, &dir, file)
}

/// Bytes shown as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
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
        let _ = std::fs::remove_dir_all(&root);
    }
}
