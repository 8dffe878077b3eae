//! The running agent's effective settings (backend, flags, config path and source), kept in a
//! small JSON file under `/run/ipmasq/` while the agent runs, so `show` judges the live rules
//! against what the agent really enforces and `cleanup` can warn that an agent will put back
//! what it removes. One file per network namespace (`agent-net<inode>.json`): agents in other
//! namespaces of the same host never share one.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the state file lives unless `--state-dir` (or `IPMASQ_STATE_DIR`) says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/run/ipmasq";
/// The environment variable that overrides the default state directory.
pub const STATE_DIR_ENV: &str = "IPMASQ_STATE_DIR";

/// The agent flags that shape the rules, as the agent runs with them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSettings {
    pub masq_chain: String,
    #[serde(rename = "enableIPv6")]
    pub enable_ipv6: bool,
    pub nomasq_all_reserved_ranges: bool,
    /// `--random-fully` as asked for (the backend may lack it).
    pub random_fully: bool,
    pub to_ports: String,
}

impl RuleSettings {
    /// `(flag, ours, theirs)` for every flag that differs from `other`.
    pub fn differences(&self, other: &RuleSettings) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        let mut check = |flag, a: String, b: String| {
            if a != b {
                out.push((flag, a, b));
            }
        };
        check(
            "--masq-chain",
            self.masq_chain.clone(),
            other.masq_chain.clone(),
        );
        check(
            "--enable-ipv6",
            self.enable_ipv6.to_string(),
            other.enable_ipv6.to_string(),
        );
        check(
            "--nomasq-all-reserved-ranges",
            self.nomasq_all_reserved_ranges.to_string(),
            other.nomasq_all_reserved_ranges.to_string(),
        );
        check(
            "--random-fully",
            self.random_fully.to_string(),
            other.random_fully.to_string(),
        );
        check("--to-ports", self.to_ports.clone(), other.to_ports.clone());
        out
    }
}

/// What the state file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentState {
    pub schema_version: u32,
    pub pid: u32,
    pub version: String,
    /// The backend in use (`iptables-nft`, `iptables-legacy`, `nftables`).
    pub backend: crate::backend::BackendId,
    pub backend_choice: String,
    pub config: String,
    /// `--config-dir`, when the agent merges a directory instead of reading `config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_dir: Option<String>,
    /// `file` or `defaults` (no file at the path), as of the last accepted config.
    pub config_source: String,
    pub rules: RuleSettings,
    /// Who this agent is, whatever its pid: a DaemonSet pod is pid 1 in every rollout, so
    /// only this token tells one agent's files from its successor's.
    #[serde(default)]
    pub instance: String,
    /// The config in force as the agent read it, when it has accepted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_read: Option<ConfigRecord>,
    /// The config the agent refused (invalid, unreadable, too large for its memory) while the
    /// last good one, if any, stays in force; cleared when a config is accepted. An optional
    /// field of schema 1: older readers ignore it, and a file without it means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_rejected: Option<RejectedRecord>,
}

/// A config the agent refused, as it recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedRecord {
    /// The file, directory or ConfigMap the agent read, as the agent names it.
    pub path: String,
    /// SHA-256 of the refused bytes; none when they could not be read (or a directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Why: one `FILE:LINE:COLUMN: [code] reason` per problem.
    pub diagnostics: Vec<String>,
    /// When the agent first refused these bytes for this reason (RFC 3339, UTC).
    pub rejected_at: String,
}

/// Where the config in force came from, as the agent saw it (its path is in the agent's own
/// mount namespace: a pod's `/etc/config` is not the host's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRecord {
    /// The file or directory the agent read, as the agent names it.
    pub path: String,
    /// `file`, `defaults` (no file at the path) or `merged files`.
    pub source: String,
    /// SHA-256 of the bytes read (`sha256sum` of the file); none for the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When it was read (RFC 3339, UTC).
    pub read_at: String,
    /// The file next to the state file that holds the checked config itself.
    pub applied: String,
}

/// The checked config the agent enforces, as the applied-config file holds it: the config in
/// the config file's own keys (so it is checked again by the same code when read back) and
/// where each list entry was written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedConfig {
    pub schema_version: u32,
    pub digest: Option<String>,
    pub config: serde_json::Value,
    /// Per list key, one `[file or null, line, column]` (or null) per entry.
    #[serde(default)]
    pub places: std::collections::BTreeMap<String, Vec<Option<RecordedPlace>>>,
}

/// Where one list entry was written: `(file, line, column)`.
pub type RecordedPlace = (Option<String>, usize, usize);

impl AppliedConfig {
    /// The record of `config`, read with digest `digest`.
    pub fn of(config: &crate::config::Config, digest: Option<String>) -> Self {
        use crate::config::ListName;
        let mut places = std::collections::BTreeMap::new();
        for (list, entries) in [
            (ListName::NonMasquerade, &config.provenance.non_masquerade),
            (ListName::Force, &config.provenance.force),
            (ListName::Sources, &config.provenance.sources),
        ] {
            let recorded: Vec<Option<RecordedPlace>> = entries
                .iter()
                .map(|p| {
                    p.location
                        .map(|l| (p.file.as_deref().map(str::to_string), l.line, l.column))
                })
                .collect();
            if !recorded.is_empty() {
                places.insert(list.key().to_string(), recorded);
            }
        }
        AppliedConfig {
            schema_version: 1,
            digest,
            config: serde_json::to_value(config).unwrap_or(serde_json::Value::Null),
            places,
        }
    }

    /// The config again, checked by this binary's own checker with `options`, its entries'
    /// places restored; the reason when this binary cannot take it (another version's keys).
    pub fn restore(
        &self,
        options: &crate::config::Options,
    ) -> Result<crate::config::Config, String> {
        use crate::config::{ListName, Place};
        let text = self.config.to_string();
        let checked = crate::config::check_text(&text, options);
        let Some(mut config) = checked.config().cloned() else {
            let problems: Vec<String> = checked
                .errors()
                .map(crate::config::Diagnostic::one_line)
                .collect();
            return Err(problems.join("; "));
        };
        let restore = |list: ListName, into: &mut Vec<Place>| {
            let Some(recorded) = self.places.get(list.key()) else {
                return;
            };
            if recorded.len() != into.len() {
                return;
            }
            for (place, recorded) in into.iter_mut().zip(recorded) {
                *place = match recorded {
                    Some((file, line, column)) => Place {
                        file: file.as_deref().map(std::sync::Arc::from),
                        location: Some(crate::config::yaml::Location {
                            line: *line,
                            column: *column,
                            ..Default::default()
                        }),
                    },
                    None => Place::default(),
                };
            }
        };
        let provenance = &mut config.provenance;
        restore(ListName::NonMasquerade, &mut provenance.non_masquerade);
        restore(ListName::Force, &mut provenance.force);
        restore(ListName::Sources, &mut provenance.sources);
        Ok(config)
    }
}

/// A token no other agent has: 16 random bytes from the kernel, as hex (the pid and the time
/// when the kernel cannot give them).
pub fn new_instance() -> String {
    let mut bytes = [0u8; 16];
    let filled = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    if filled.is_ok_and(|filled| filled == bytes.len()) {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    } else {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{}-{nanos}", std::process::id())
    }
}

/// The state directory in force: the flag, else the environment, else the default.
pub fn state_dir(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os(STATE_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// The inode of a process's network namespace (`/proc/PID/ns/net` → `net:[4026531840]`).
pub(crate) fn netns_inode(pid: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    let text = link.to_string_lossy();
    let inode = text.strip_prefix("net:[")?.strip_suffix(']')?;
    Some(inode.to_string())
}

/// The state file of this network namespace in `dir`.
pub fn state_path(dir: &Path) -> PathBuf {
    let inode = netns_inode("self").unwrap_or_else(|| "unknown".into());
    dir.join(format!("agent-net{inode}.json"))
}

/// The largest state file read: a real one is under 1 KiB, so anything larger (a sparse 2 GiB
/// file planted in the directory) is not ours and is not read.
pub const MAX_STATE_BYTES: u64 = 64 << 10;

/// Opens a file under the state directory without following a symlink at its name (someone
/// with write access to the directory cannot redirect our writes to another file), and
/// without blocking on a FIFO; only a regular file is returned.
pub(crate) fn open_state_file(
    path: &Path,
    options: &mut std::fs::OpenOptions,
) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file; remove it",
            path.display()
        )));
    }
    Ok(file)
}

/// A JSON file of the state directory, opened as [`open_state_file`] opens one and checked
/// against its size cap before a byte is read: the one read of the state file, the applied
/// config and the last-known-good.
pub(crate) struct CappedFile {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    cap: u64,
}

/// Why a state directory's file was not opened.
pub(crate) enum CappedOpenError {
    /// Nothing at the path (said as the system says it).
    Missing(String),
    /// Not a regular file, unreadable, or larger than its cap: the reason, path first.
    Refused(String),
}

impl From<CappedOpenError> for String {
    fn from(err: CappedOpenError) -> String {
        match err {
            CappedOpenError::Missing(why) | CappedOpenError::Refused(why) => why,
        }
    }
}

impl CappedFile {
    /// Opens `path`, refused when larger than `cap` bytes (`what`: what such a file is, for the
    /// reason: "an applied config").
    pub(crate) fn open(path: &Path, cap: u64, what: &str) -> Result<CappedFile, CappedOpenError> {
        let file = match open_state_file(path, std::fs::OpenOptions::new().read(true)) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(CappedOpenError::Missing(format!(
                    "{}: {err}",
                    path.display()
                )))
            }
            Err(err) => {
                return Err(CappedOpenError::Refused(format!(
                    "{}: {err}",
                    path.display()
                )))
            }
        };
        let size = file
            .metadata()
            .map_err(|e| CappedOpenError::Refused(e.to_string()))?
            .len();
        if size > cap {
            return Err(CappedOpenError::Refused(format!(
                "{}: {size} bytes, more than the {cap} {what} can be",
                path.display()
            )));
        }
        let path = path.to_path_buf();
        Ok(CappedFile {
            path,
            file,
            size,
            cap,
        })
    }

    /// Its size when opened, in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Its JSON, read up to its cap (a file grown past it meanwhile is cut there and refused
    /// by the parser).
    pub(crate) fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, String> {
        use std::io::Read;
        let mut text = String::new();
        self.file
            .take(self.cap)
            .read_to_string(&mut text)
            .map_err(|err| format!("{}: {err}", self.path.display()))?;
        serde_json::from_str(&text).map_err(|err| format!("{}: {err}", self.path.display()))
    }
}

/// Writes the state atomically: an exclusive temporary file (never an existing name, never
/// through a symlink), renamed into place (a rename replaces a planted symlink, it does not
/// follow it).
pub fn write(dir: &Path, state: &AgentState) -> std::io::Result<PathBuf> {
    let text = serde_json::to_string_pretty(state).map_err(std::io::Error::other)?;
    let path = state_path(dir);
    write_atomically(dir, &path, (text + "\n").as_bytes())?;
    Ok(path)
}

/// The applied-config file of this network namespace in `dir`.
pub fn applied_path(dir: &Path) -> PathBuf {
    let inode = netns_inode("self").unwrap_or_else(|| "unknown".into());
    dir.join(format!("agent-net{inode}-config.json"))
}

/// Writes the checked config in force next to the state file (see [`AppliedConfig`]).
pub fn write_applied(dir: &Path, applied: &AppliedConfig) -> std::io::Result<PathBuf> {
    let text = serde_json::to_string(applied).map_err(std::io::Error::other)?;
    let path = applied_path(dir);
    write_atomically(dir, &path, (text + "\n").as_bytes())?;
    Ok(path)
}

/// The largest applied-config file read: the checked form of the largest config the agent
/// takes ([`crate::config::MAX_CONFIG_BYTES`]) with a place per entry stays well below it.
pub const MAX_APPLIED_BYTES: u64 = 48 << 20;

/// Reads the applied config the state names, when it is there and this binary can read it.
pub fn read_applied(dir: &Path, record: &ConfigRecord) -> Result<AppliedConfig, String> {
    let name = Path::new(&record.applied).file_name().ok_or_else(|| {
        format!(
            "the state names no applied-config file ({:?})",
            record.applied
        )
    })?;
    let path = dir.join(name);
    let applied: AppliedConfig =
        CappedFile::open(&path, MAX_APPLIED_BYTES, "an applied config")?.json()?;
    if applied.digest != record.digest {
        return Err(format!(
            "{} holds another config than the state file names (being rewritten?); run again",
            path.display()
        ));
    }
    Ok(applied)
}

/// Writes `bytes` to `path` (in `dir`) through an exclusive temporary file renamed into place.
pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let mut extension = path
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    extension.push_str(&format!(".{}.tmp", std::process::id()));
    let temporary = path.with_extension(extension);
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode_0644()
            .open_nofollow(&temporary)
    };
    let mut file = match create() {
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            // Left by an earlier agent with our pid, or planted: unlink the name (never what
            // it points to) and create our own.
            std::fs::remove_file(&temporary)?;
            create()?
        }
        other => other?,
    };
    let written = file.write_all(bytes);
    drop(file);
    if let Err(err) = written.and_then(|()| std::fs::rename(&temporary, path)) {
        let _ = std::fs::remove_file(&temporary);
        return Err(err);
    }
    Ok(())
}

/// Creating files under the state directory: mode and no-follow in one place.
trait StateFileOptions {
    fn mode_0644(&mut self) -> &mut Self;
    fn open_nofollow(&mut self, path: &Path) -> std::io::Result<std::fs::File>;
}

impl StateFileOptions for std::fs::OpenOptions {
    fn mode_0644(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o644)
    }

    fn open_nofollow(&mut self, path: &Path) -> std::io::Result<std::fs::File> {
        open_state_file(path, self)
    }
}

/// Removes this namespace's state file and applied config if they are this agent's (by its
/// instance token: a pod's successor is pid 1 too).
pub fn remove(dir: &Path, instance: &str) {
    let path = state_path(dir);
    if read_file(&path).is_some_and(|s| s.instance == instance) {
        let _ = std::fs::remove_file(applied_path(dir));
        let _ = std::fs::remove_file(path);
    }
}

/// Reads a state file: a regular file (no symlink followed, a FIFO never waited on) of at most
/// [`MAX_STATE_BYTES`].
fn read_file(path: &Path) -> Option<AgentState> {
    CappedFile::open(path, MAX_STATE_BYTES, "a state file")
        .ok()?
        .json()
        .ok()
}

/// What the state directory says about an agent in this network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentLookup {
    /// An agent holds the node lock: this is what it enforces.
    Running(AgentState),
    /// A state file nobody's lock backs: an agent that died (SIGKILL, an OOM kill).
    Stale(AgentState),
    /// No state file.
    Absent,
}

impl AgentLookup {
    /// The running agent, if one is.
    pub fn running(&self) -> Option<&AgentState> {
        match self {
            AgentLookup::Running(state) => Some(state),
            _ => None,
        }
    }
}

/// Looks for the agent of this network namespace. The node lock says whether it runs: it is
/// held exactly while the agent lives, whatever PID or mount namespace the agent runs in (a
/// DaemonSet pod's pid 1 is the host's init, always alive), so a state file left by an agent
/// that was killed is stale. Only without a lock file (an agent that could not take it) does
/// the recorded pid decide.
pub fn find_agent(dir: &Path) -> AgentLookup {
    let Some(state) = read_file(&state_path(dir)) else {
        return AgentLookup::Absent;
    };
    let alive = match lock_held(dir, &state.rules.masq_chain) {
        Some(held) => held,
        None => netns_inode("self")
            .zip(netns_inode(&state.pid.to_string()))
            .is_some_and(|(ours, theirs)| ours == theirs),
    };
    if alive {
        AgentLookup::Running(state)
    } else {
        AgentLookup::Stale(state)
    }
}

/// The state of the agent running in this network namespace, if one is (see [`find_agent`]).
pub fn running_agent(dir: &Path) -> Option<AgentState> {
    match find_agent(dir) {
        AgentLookup::Running(state) => Some(state),
        _ => None,
    }
}

/// Whether an agent holds the node lock for `chain` in this network namespace; None when
/// there is no lock file to ask. (A shared lock taken and dropped at once: it never blocks
/// an agent for longer than that.)
pub fn lock_held(dir: &Path, chain: &str) -> Option<bool> {
    let file = open_state_file(
        &lock_path(dir, chain),
        std::fs::OpenOptions::new().read(true),
    )
    .ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            Some(false)
        }
        Err(std::fs::TryLockError::WouldBlock) => Some(true),
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// The node lock: while held, no other agent for the same chain in this network namespace
/// writes. A second agent (a rolling update's surge pod, a hand-started copy) waits for it, so
/// two agents never both "repair" each other's jump away.
pub struct NodeLock {
    file: std::fs::File,
    pub path: PathBuf,
    /// What stood at the lock's name and was unlinked to make room for our own lock file (a
    /// planted symlink, FIFO, hard link or foreign file), said once in the log.
    pub replaced: Option<String>,
}

impl NodeLock {
    /// Gives the lock up on a clean exit, removing its file first: the name is unlinked while
    /// still held, and a waiter that then gets the lock on the unlinked file sees that and
    /// opens the name afresh (see [`acquire_lock`]), so two agents never both hold it.
    pub fn release(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

/// Whether `file` is still the file at `path` (not unlinked or replaced since it was opened).
fn still_at(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
        _ => false,
    }
}

/// The lock file for `chain` in this network namespace.
pub fn lock_path(dir: &Path, chain: &str) -> PathBuf {
    let inode = netns_inode("self").unwrap_or_else(|| "unknown".into());
    dir.join(format!("agent-net{inode}-{chain}.lock"))
}

/// How many times a planted name is replaced before the lock is refused: whoever plants
/// faster than we unlink keeps the agent from running, never runs it unlocked.
const LOCK_REPLACEMENTS: usize = 3;

/// Why the entry `meta` at the lock's name is not a lock file an agent made, if it is not:
/// only a regular file with one link, owned by our effective user, is one. (No symlink is
/// followed and no FIFO opened; a hard link to another file is never truncated.)
fn not_a_lock_file(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Some("a symlink".into());
    }
    if kind.is_fifo() {
        return Some("a FIFO".into());
    }
    if kind.is_socket() {
        return Some("a socket".into());
    }
    if kind.is_block_device() || kind.is_char_device() {
        return Some("a device node".into());
    }
    if meta.nlink() != 1 {
        return Some(format!("a file with {} hard links", meta.nlink()));
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Some(format!("a file of uid {} (we are uid {euid})", meta.uid()));
    }
    None
}

/// What stands at `path` and is not a lock file, and whether it is a directory (never
/// removed); None when the name is free or holds a lock file.
fn planted_at(path: &Path) -> std::io::Result<Option<(String, bool)>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(Some(("a directory".into(), true))),
        Ok(meta) => Ok(not_a_lock_file(&meta).map(|what| (what, false))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Opens the lock file at `path`: creates it, or opens the one an agent made. Anything else
/// at the name (see [`not_a_lock_file`]) is unlinked (the name, never what it points to) and
/// our own file created exclusively in its place; what was replaced is returned. Refused with
/// an error for a directory at the name, or when the name is planted again each time.
fn open_lock_file(path: &Path) -> std::io::Result<(std::fs::File, Option<String>)> {
    let mut replaced: Option<String> = None;
    for _ in 0..=LOCK_REPLACEMENTS {
        if let Some((what, is_dir)) = planted_at(path)? {
            if is_dir {
                return Err(std::io::Error::other(format!(
                    "{} is a directory, not a lock file; remove it",
                    path.display()
                )));
            }
            std::fs::remove_file(path)?;
            replaced = Some(what);
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode_0644()
                .open_nofollow(path)
            {
                Ok(file) => return Ok((file, replaced)),
                // Planted again between the unlink and the create: look again.
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(err),
            }
        }
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode_0644()
            .open_nofollow(path);
        match opened {
            // The file opened is the one checked (a swap after the check is seen here).
            Ok(file)
                if file
                    .metadata()
                    .ok()
                    .and_then(|m| not_a_lock_file(&m))
                    .is_none() =>
            {
                return Ok((file, replaced))
            }
            Ok(_) => continue,
            // A symlink (ELOOP) or a non-regular file planted after the check: look again.
            Err(_) if planted_at(path).is_ok_and(|p| p.is_some()) => continue,
            Err(err) => return Err(err),
        }
    }
    Err(std::io::Error::other(format!(
        "something keeps planting {} at {} (replaced {} times); refusing to run without the node lock",
        replaced.as_deref().unwrap_or("a file that is not a lock file"),
        path.display(),
        LOCK_REPLACEMENTS
    )))
}

/// Makes the state directory (0755) when it is missing, and refuses one where a lock could
/// not be kept: owned by another user than us or root, or writable by everyone without the
/// sticky bit (anyone could then unlink our lock file while we hold it, and a second agent
/// take a fresh one).
fn lock_directory(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    let euid = rustix::process::geteuid().as_raw();
    let refuse = |why: String| {
        Err(std::io::Error::other(format!(
            "{} {why}; a node lock there could be removed under us",
            dir.display()
        )))
    };
    if meta.uid() != euid && meta.uid() != 0 {
        return refuse(format!("belongs to uid {} (we are uid {euid})", meta.uid()));
    }
    if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 {
        return refuse(format!(
            "is writable by everyone without the sticky bit (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Takes the node lock, waiting as long as another agent holds it; `on_wait` is told once,
/// with the holder's pid when known, before the wait begins. A planted name is replaced (see
/// [`open_lock_file`]); an error means no lock, and the caller must not touch the rules.
pub fn acquire_lock(
    dir: &Path,
    chain: &str,
    on_wait: impl FnOnce(Option<u32>),
) -> std::io::Result<NodeLock> {
    use std::io::{Read, Seek, Write};
    lock_directory(dir)?;
    let path = lock_path(dir, chain);
    let mut on_wait = Some(on_wait);
    let mut replaced = None;
    loop {
        let (mut file, planted) = open_lock_file(&path)?;
        replaced = planted.or(replaced);
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = (&mut file).take(32).read_to_string(&mut holder);
                if let Some(tell) = on_wait.take() {
                    tell(holder.trim().parse().ok());
                }
                file.lock()?;
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(err),
        }
        // The holder removed the file as it exited: this lock is on a name nobody else
        // will open; take the new one.
        if !still_at(&file, &path) {
            continue;
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        return Ok(NodeLock {
            file,
            path,
            replaced,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32) -> AgentState {
        AgentState {
            schema_version: 1,
            pid,
            version: "0".into(),
            backend: crate::backend::BackendId::IptablesNft,
            backend_choice: "auto".into(),
            config: "/etc/config/ip-masq-agent".into(),
            config_dir: None,
            config_source: "defaults".into(),
            rules: RuleSettings {
                masq_chain: "IP-MASQ-AGENT".into(),
                enable_ipv6: false,
                nomasq_all_reserved_ranges: false,
                random_fully: true,
                to_ports: String::new(),
            },
            instance: format!("test-{pid}"),
            config_read: None,
            config_rejected: None,
        }
    }

    #[test]
    fn written_state_is_found_while_its_process_lives_and_removed_by_it() {
        let dir = std::env::temp_dir().join(format!("ipmasq-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = sample(std::process::id());
        let path = write(&dir, &state).unwrap();
        assert!(path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("agent-net"));
        assert_eq!(running_agent(&dir), Some(state.clone()));
        // Another agent with the same pid (a pod's successor, pid 1 too) leaves it alone.
        remove(&dir, "another instance");
        assert_eq!(running_agent(&dir), Some(state.clone()));
        remove(&dir, &state.instance);
        assert_eq!(running_agent(&dir), None);
        // A file left by a process that is gone is not a running agent.
        write(&dir, &sample(u32::MAX - 1)).unwrap();
        assert_eq!(running_agent(&dir), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_node_lock_is_exclusive_and_says_who_holds_it() {
        let dir = std::env::temp_dir().join(format!("ipmasq-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = acquire_lock(&dir, "IP-MASQ-AGENT", |_| panic!("free: no wait")).unwrap();
        let (told, waited) = std::sync::mpsc::channel();
        let dir2 = dir.clone();
        let second = std::thread::spawn(move || {
            acquire_lock(&dir2, "IP-MASQ-AGENT", |holder| {
                told.send(holder).unwrap();
            })
            .map(|_| ())
        });
        // The second waits, naming the holder, until the first is dropped.
        let holder = waited.recv().unwrap();
        assert_eq!(holder, Some(std::process::id()));
        drop(first);
        second.join().unwrap().unwrap();
        // Another chain is another lock.
        let _a = acquire_lock(&dir, "A", |_| panic!("no wait")).unwrap();
        let _b = acquire_lock(&dir, "B", |_| panic!("no wait")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Whatever is planted at the lock's name (a symlink, a hard link to another file, a
    /// FIFO) is replaced by our own lock file, which we then hold: what it pointed to keeps
    /// its bytes, and the lock is never skipped. A directory there is refused, not removed.
    #[test]
    fn a_planted_lock_name_is_replaced_and_the_lock_taken() {
        let dir = std::env::temp_dir().join(format!("ipmasq-planted-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let lock = lock_path(&dir, "IP-MASQ-AGENT");
        let plants: [(&str, &dyn Fn()); 3] = [
            ("a symlink", &|| {
                std::os::unix::fs::symlink(&victim, &lock).unwrap()
            }),
            ("a file with 2 hard links", &|| {
                std::fs::hard_link(&victim, &lock).unwrap()
            }),
            ("a FIFO", &|| {
                let made = std::process::Command::new("mkfifo").arg(&lock).status();
                assert!(made.unwrap().success());
            }),
        ];
        for (what, plant) in plants {
            plant();
            let held = acquire_lock(&dir, "IP-MASQ-AGENT", |_| panic!("nobody holds it"))
                .unwrap_or_else(|err| panic!("{what}: {err}"));
            assert_eq!(held.replaced.as_deref(), Some(what));
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
            let meta = std::fs::symlink_metadata(&lock).unwrap();
            assert!(
                meta.is_file(),
                "{what}: the lock's name is our regular file now"
            );
            assert_eq!(lock_held(&dir, "IP-MASQ-AGENT"), Some(true), "{what}");
            held.release();
        }
        // Our own lock file, left by an agent that died, is simply taken again.
        drop(acquire_lock(&dir, "IP-MASQ-AGENT", |_| {}).unwrap());
        let again = acquire_lock(&dir, "IP-MASQ-AGENT", |_| {}).unwrap();
        assert_eq!(again.replaced, None);
        again.release();
        std::fs::create_dir(&lock).unwrap();
        let refused = acquire_lock(&dir, "IP-MASQ-AGENT", |_| {}).err().unwrap();
        assert!(refused.to_string().contains("is a directory"), "{refused}");
        assert!(lock.is_dir());
        std::fs::remove_dir(&lock).unwrap();
        // A directory anyone may unlink in is refused; with the sticky bit (as /tmp) it is not.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = acquire_lock(&dir, "IP-MASQ-AGENT", |_| {}).err().unwrap();
        assert!(
            refused.to_string().contains("writable by everyone"),
            "{refused}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        acquire_lock(&dir, "IP-MASQ-AGENT", |_| {})
            .unwrap()
            .release();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A symlink planted at the temporary file's name is never followed: the file it points
    /// to keeps its content; a FIFO or a huge file as the state file is not read (and
    /// nothing blocks).
    #[test]
    fn planted_files_in_the_state_directory_are_not_followed_or_read() {
        let dir = std::env::temp_dir().join(format!("ipmasq-planted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let path = state_path(&dir);
        let temporary = path.with_extension(format!("json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &temporary).unwrap();
        write(&dir, &sample(std::process::id())).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(!temporary.exists());
        // The state file itself as a symlink to a valid state: not followed.
        let elsewhere = dir.join("elsewhere.json");
        std::fs::rename(&path, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(read_file(&path), None);
        std::fs::remove_file(&path).unwrap();
        // A FIFO: refused at once, never opened for a blocking read.
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(running_agent(&dir), None);
        std::fs::remove_file(&path).unwrap();
        // A sparse 2 GiB file: not read.
        let big = std::fs::File::create(&path).unwrap();
        big.set_len(2 << 30).unwrap();
        assert_eq!(read_file(&path), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The node lock, not the pid, says whether the agent lives: a state file whose pid is
    /// alive (ours here, as a DaemonSet pod's pid 1 always is on the host) but whose lock
    /// nobody holds is stale.
    #[test]
    fn liveness_is_the_node_lock_not_the_pid() {
        let dir = std::env::temp_dir().join(format!("ipmasq-live-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = sample(std::process::id());
        write(&dir, &state).unwrap();
        let lock = acquire_lock(&dir, "IP-MASQ-AGENT", |_| panic!("free")).unwrap();
        assert_eq!(lock_held(&dir, "IP-MASQ-AGENT"), Some(true));
        assert_eq!(running_agent(&dir), Some(state.clone()));
        drop(lock);
        // Another test of this binary may fork while the lock is open: its child shares the
        // lock until its exec closes the descriptor. Wait for that, never for long.
        let probe_dir = dir.clone();
        assert!(
            becomes_true(move || lock_held(&probe_dir, "IP-MASQ-AGENT") == Some(false)),
            "the lock is still held after its holder dropped it"
        );
        assert_eq!(
            running_agent(&dir),
            None,
            "the agent died: its state is stale"
        );
        // Asking never leaves the lock taken: an exclusive lock is granted afterwards.
        let (granted, got) = std::sync::mpsc::channel();
        let lock_dir = dir.clone();
        std::thread::spawn(move || {
            let again = acquire_lock(&lock_dir, "IP-MASQ-AGENT", |_| {});
            let _ = granted.send(again.map(drop).is_ok());
        });
        assert_eq!(
            got.recv_timeout(std::time::Duration::from_secs(10)),
            Ok(true),
            "asking whether the lock is held left it taken"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Whether `condition` holds within ten seconds, polled every millisecond.
    fn becomes_true(condition: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if condition() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        condition()
    }

    /// `configRejected` is optional both ways: a state file without it (an older agent's)
    /// reads as no rejection, and readers ignore fields they do not know (as an older `show`
    /// ignores `configRejected`: no `deny_unknown_fields`).
    #[test]
    fn the_rejection_is_optional_both_ways() {
        let mut state = sample(1);
        let older = serde_json::to_string(&state).unwrap();
        assert!(!older.contains("configRejected"), "{older}");
        assert_eq!(serde_json::from_str::<AgentState>(&older).unwrap(), state);
        state.config_rejected = Some(RejectedRecord {
            path: "/etc/config/ip-masq-agent".into(),
            digest: Some("ab".repeat(32)),
            diagnostics: vec!["/etc/config/ip-masq-agent:4:5: [cidr-not-aligned] x".into()],
            rejected_at: "2026-11-26T10:00:00Z".into(),
        });
        let newer = serde_json::to_value(&state).unwrap();
        assert_eq!(
            newer["configRejected"]["rejectedAt"],
            "2026-11-26T10:00:00Z"
        );
        let mut future = newer.clone();
        future["aFieldOfALaterVersion"] = serde_json::json!({"x": 1});
        assert_eq!(serde_json::from_value::<AgentState>(future).unwrap(), state);
    }

    #[test]
    fn differing_flags_are_named() {
        let a = sample(1).rules;
        let mut b = a.clone();
        b.enable_ipv6 = true;
        b.to_ports = "1024-2047".into();
        let diffs = a.differences(&b);
        assert_eq!(diffs.len(), 2);
        assert_eq!(diffs[0], ("--enable-ipv6", "false".into(), "true".into()));
        assert_eq!(diffs[1].0, "--to-ports");
    }
}
