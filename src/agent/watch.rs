//! Watching the config file's directory with inotify. A ConfigMap volume updates by swapping
//! its `..data` symlink, so a watch on the file itself misses every update after the first;
//! the directory sees the swap. The directory's own entry is watched too, in its parent: when
//! the directory is removed, recreated, or is a symlink that is swapped, the watch follows at
//! once instead of waiting for the resync timer. Bursts of events settle into one trigger.

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tracing::debug;

/// The directory events that can change what the config path resolves to.
fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// The parent's events that can replace the config directory's entry. Only directory
/// events: an event the kernel reports about children (ATTRIB, MODIFY, OPEN, ...) makes adding
/// the watch mark every cached entry of the parent (its cost: docs/benchmarks.md), and the
/// directory's own watch already reports its attribute changes.
fn parent_mask() -> WatchMask {
    WatchMask::CREATE | WatchMask::DELETE | WatchMask::MOVED_TO | WatchMask::MOVED_FROM
}

/// A watch on one directory (and on its entry in its parent); re-armed whenever the directory
/// appears or is replaced.
pub struct DirWatch {
    dir: PathBuf,
    /// The config file's name in `dir`; events on other names are ignored, except kubelet's
    /// `..data`-style entries (so a log file next to the config cannot trigger reloads).
    file_name: OsString,
    /// `file_name` is a prefix: every file whose name starts with it counts (a merged dir).
    prefix: bool,
    /// The directory's parent and the directory's name in it.
    parent: Option<(PathBuf, OsString)>,
    fd: Option<AsyncFd<Inotify>>,
    dir_watch: Option<WatchDescriptor>,
    parent_watch: Option<WatchDescriptor>,
    buffer: Vec<u8>,
    /// The config file was modified and not closed since: a writer is still at it.
    writing: bool,
    /// The last change ended in a rename into place (kubelet's `..data` swap, or an atomic
    /// write): complete as it is, nothing to wait for.
    renamed_into_place: bool,
}

/// Whether an event on `name` (None: the directory itself) can change the config.
fn relevant(name: Option<&OsStr>, file_name: &OsStr, prefix: bool) -> bool {
    match name {
        None => true,
        Some(name) => {
            name == file_name
                || (prefix
                    && name
                        .as_encoded_bytes()
                        .starts_with(file_name.as_encoded_bytes()))
                || name.as_encoded_bytes().starts_with(b"..")
        }
    }
}

impl DirWatch {
    /// Watches the directory that holds `config_path` (armed lazily if it does not exist yet).
    pub fn new(config_path: &Path) -> Self {
        let dir = config_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let file_name = config_path.file_name().unwrap_or_default().to_os_string();
        let parent = dir.parent().zip(dir.file_name()).map(|(p, n)| {
            let p = if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            };
            (p.to_path_buf(), n.to_os_string())
        });
        let mut watch = DirWatch {
            dir,
            file_name,
            prefix: false,
            parent,
            fd: None,
            dir_watch: None,
            parent_watch: None,
            buffer: vec![0; 4096],
            writing: false,
            renamed_into_place: false,
        };
        watch.arm();
        watch
    }

    /// Watches `dir` for every file whose name starts with `ip-masq` (`--config-dir`).
    pub fn for_parts(dir: &Path) -> Self {
        let mut watch = DirWatch::new(&dir.join(crate::config::merge::PREFIX));
        watch.prefix = true;
        watch
    }

    /// Whether a watch on the directory is in place.
    #[cfg(test)]
    pub fn is_armed(&self) -> bool {
        self.dir_watch.is_some()
    }

    /// Creates the inotify instance and adds the watches that are missing.
    pub fn arm(&mut self) {
        if self.fd.is_none() {
            let registered = Inotify::init()
                .and_then(|inotify| crate::netlink::register(inotify, Interest::READABLE));
            match registered {
                Ok(fd) => self.fd = Some(fd),
                Err(err) => {
                    debug!(error = %err, "cannot create an inotify instance");
                    return;
                }
            }
        }
        let Some(fd) = self.fd.as_mut() else { return };
        if self.parent_watch.is_none() {
            if let Some((parent, _)) = &self.parent {
                if let Ok(wd) = fd.get_mut().watches().add(parent, parent_mask()) {
                    self.parent_watch = Some(wd);
                }
            }
        }
        if self.dir_watch.is_none() && self.dir.is_dir() {
            match fd.get_mut().watches().add(&self.dir, mask()) {
                Ok(wd) => {
                    debug!(dir = %self.dir.display(), "watching config directory");
                    self.dir_watch = Some(wd);
                }
                Err(err) => {
                    debug!(dir = %self.dir.display(), error = %err, "cannot watch config directory")
                }
            }
        }
    }

    /// Drops the directory's watch so the next `arm` adds it again for what the path names now.
    fn rearm_dir(&mut self) {
        if let (Some(fd), Some(wd)) = (self.fd.as_mut(), self.dir_watch.take()) {
            let _ = fd.get_mut().watches().remove(wd);
        }
        self.arm();
    }

    /// Waits for a change; never returns while no watch is armed.
    pub async fn changed(&mut self) {
        loop {
            self.arm();
            let Some(fd) = self.fd.as_mut() else {
                std::future::pending::<()>().await;
                return;
            };
            let Ok(mut guard) = fd.readable_mut().await else {
                self.fd = None;
                self.dir_watch = None;
                self.parent_watch = None;
                continue;
            };
            let buffer = &mut self.buffer;
            let file_name = &self.file_name;
            let prefix = self.prefix;
            let dir_name = self.parent.as_ref().map(|(_, n)| n.clone());
            let dir_watch = self.dir_watch.clone();
            let parent_watch = self.parent_watch.clone();
            match guard.try_io(|inner| {
                let events = inner.get_mut().read_events(buffer)?;
                let mut found = Found::default();
                for e in events {
                    if Some(&e.wd) == parent_watch.as_ref() {
                        // The directory's entry changed: it was removed, created or replaced.
                        if e.name == dir_name.as_deref() {
                            found.dir_replaced = true;
                        }
                    } else if Some(&e.wd) == dir_watch.as_ref() {
                        if e.mask.intersects(
                            EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED,
                        ) {
                            found.dir_replaced = true;
                        } else if relevant(e.name, file_name, prefix) {
                            found.relevant = true;
                            // In order: a write opens a rewrite, closing the file ends it.
                            if e.mask.contains(EventMask::MODIFY) {
                                found.writing = Some(true);
                            }
                            if e.mask.intersects(
                                EventMask::CLOSE_WRITE | EventMask::MOVED_TO | EventMask::DELETE,
                            ) {
                                found.writing = Some(false);
                            }
                            // A rename into place completes the change; a later write reopens it.
                            if e.mask.contains(EventMask::MOVED_TO) {
                                found.renamed_into_place = true;
                            } else if e.mask.contains(EventMask::MODIFY) {
                                found.renamed_into_place = false;
                            }
                        }
                    }
                }
                Ok(found)
            }) {
                Ok(Ok(found)) => {
                    if let Some(writing) = found.writing {
                        self.writing = writing;
                    }
                    self.renamed_into_place = found.renamed_into_place && !self.writing;
                    if found.dir_replaced {
                        self.writing = false;
                        debug!(dir = %self.dir.display(), "config directory replaced; re-arming the watch");
                        self.rearm_dir();
                        return;
                    }
                    if found.relevant {
                        return;
                    }
                    // Only unrelated files changed: keep waiting.
                }
                Ok(Err(err)) => {
                    debug!(error = %err, "config watch failed; re-arming");
                    self.fd = None;
                    self.dir_watch = None;
                    self.parent_watch = None;
                }
                Err(_would_block) => continue,
            }
        }
    }

    /// Whether a writer has modified the config file and not yet closed it.
    pub fn writing(&self) -> bool {
        self.writing
    }

    /// Whether the last change ended in a rename into place (read at once, no quiet wait).
    pub fn renamed_into_place(&self) -> bool {
        self.renamed_into_place
    }

    /// Forgets a writer that kept the file open past its deadline (the file is read as is).
    pub fn forget_writer(&mut self) {
        self.writing = false;
    }
}

/// A config change waiting to settle before it is read: a burst of events must go quiet, and a
/// writer that has the file open must close it (or outlast its deadline).
#[derive(Clone, Copy, Debug)]
pub struct Settling {
    started: tokio::time::Instant,
    last_event: tokio::time::Instant,
    /// The last event put a complete config in place (a rename): no quiet wait.
    complete: bool,
}

impl Settling {
    pub fn new(now: tokio::time::Instant) -> Self {
        Settling {
            started: now,
            last_event: now,
            complete: false,
        }
    }

    /// Another event of the same change; `complete` when it renamed the config into place (a
    /// later event, such as kubelet removing the old data directory, does not undo that).
    pub fn saw_event(&mut self, now: tokio::time::Instant, complete: bool) {
        self.last_event = now;
        self.complete |= complete;
    }

    /// When the change is to be read: at once when its last event renamed a complete config
    /// into place (kubelet's `..data` swap), else `quiet` after its last event (a burst is cut
    /// off after `quiet * 10`), or, while a writer has the file open, at `writer_deadline`
    /// after the change began (a close is an event, which brings it back to `quiet`).
    pub fn deadline(
        &self,
        writing: bool,
        quiet: Duration,
        writer_deadline: Duration,
    ) -> tokio::time::Instant {
        if writing {
            self.started + writer_deadline
        } else if self.complete {
            self.last_event
        } else {
            (self.last_event + quiet).min(self.started + quiet * 10)
        }
    }
}

/// What a batch of events means.
#[derive(Default)]
struct Found {
    relevant: bool,
    dir_replaced: bool,
    /// The batch renamed a complete config into place (and wrote nothing after).
    renamed_into_place: bool,
    /// Whether the batch leaves a writer at the file (its last modify or close).
    writing: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// The parent's watch asks for no event the kernel reports about children, so adding it
    /// walks none of the parent's entries; the directory's own watch sees its attributes.
    #[test]
    fn the_parent_watch_asks_for_directory_events_only() {
        let about_children = WatchMask::ACCESS
            | WatchMask::MODIFY
            | WatchMask::ATTRIB
            | WatchMask::CLOSE_WRITE
            | WatchMask::CLOSE_NOWRITE
            | WatchMask::OPEN;
        assert!(!parent_mask().intersects(about_children));
        assert!(mask().contains(WatchMask::ATTRIB));
    }

    #[test]
    fn only_the_config_and_kubelet_entries_are_relevant() {
        let file = OsStr::new("ip-masq-agent");
        assert!(relevant(Some(OsStr::new("ip-masq-agent")), file, false));
        assert!(relevant(Some(OsStr::new("..data")), file, false));
        assert!(relevant(
            Some(OsStr::new("..2026_11_21_00_00_00.1")),
            file,
            false
        ));
        assert!(relevant(None, file, false));
        assert!(!relevant(Some(OsStr::new("agent.log")), file, false));
        assert!(!relevant(
            Some(OsStr::new(".ip-masq-agent.swp")),
            file,
            false
        ));
    }

    /// The config directory removed and made again, and a symlinked directory swapped: each
    /// wakes the watch at once, and the watch then follows the new directory.
    #[test]
    fn watch_follows_a_recreated_or_swapped_directory() {
        let root = std::env::temp_dir().join(format!("ipmasq-watch2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        std::os::unix::fs::symlink("a", root.join("config")).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let wait = |watch: &mut DirWatch| {
            runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), watch.changed())
                    .await
                    .is_ok()
            })
        };
        let mut watch = {
            let _inside = runtime.enter();
            DirWatch::new(&root.join("config").join("ip-masq-agent"))
        };
        assert!(watch.is_armed());
        // Swap the symlink to b (atomically, as kubelet swaps ..data).
        std::os::unix::fs::symlink("b", root.join("config.tmp")).unwrap();
        std::fs::rename(root.join("config.tmp"), root.join("config")).unwrap();
        assert!(
            wait(&mut watch),
            "swapping the directory's symlink must wake the watch"
        );
        // Now a write in b (not a) must be seen.
        std::fs::write(root.join("b/ip-masq-agent"), "x").unwrap();
        assert!(wait(&mut watch), "the watch must follow the symlink to b");
        // Remove the directory and make it again as a plain directory.
        std::fs::remove_file(root.join("config")).unwrap();
        assert!(
            wait(&mut watch),
            "removing the directory must wake the watch"
        );
        std::fs::create_dir(root.join("config")).unwrap();
        assert!(wait(&mut watch), "recreating it must wake the watch");
        std::fs::write(root.join("config/ip-masq-agent"), "y").unwrap();
        assert!(
            wait(&mut watch),
            "a write in the recreated directory must be seen"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A rewrite in place (truncate, write in pieces, close): the watch knows a writer has
    /// the file open until it closes it, and the change settles only then.
    #[test]
    fn a_writer_is_known_until_it_closes_the_file() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("ipmasq-watch3-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config"), "nonMasqueradeCIDRs: [10.0.0.0/8]\n").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut watch = DirWatch::new(&dir.join("config"));
            let mut writer = std::fs::File::create(dir.join("config")).unwrap();
            writer.write_all(b"nonMasqueradeCIDRs: [10.0").unwrap();
            tokio::time::timeout(Duration::from_secs(10), watch.changed())
                .await
                .expect("the truncation wakes the watch");
            while tokio::time::timeout(Duration::from_millis(50), watch.changed())
                .await
                .is_ok()
            {}
            assert!(watch.writing(), "modified and still open");
            writer.write_all(b".0.0/8]\n").unwrap();
            drop(writer);
            while watch.writing() {
                tokio::time::timeout(Duration::from_secs(10), watch.changed())
                    .await
                    .expect("closing the file is an event");
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_change_settles_after_quiet_or_when_the_writer_deadline_passes() {
        let t0 = tokio::time::Instant::now();
        let quiet = Duration::from_millis(20);
        let writer = Duration::from_secs(5);
        let mut s = Settling::new(t0);
        assert_eq!(s.deadline(false, quiet, writer), t0 + quiet);
        s.saw_event(t0 + Duration::from_millis(15), false);
        assert_eq!(
            s.deadline(false, quiet, writer),
            t0 + Duration::from_millis(35)
        );
        s.saw_event(t0 + Duration::from_secs(1), false);
        assert_eq!(
            s.deadline(false, quiet, writer),
            t0 + quiet * 10,
            "a burst is cut off"
        );
        assert_eq!(s.deadline(true, quiet, writer), t0 + writer);
        // A rename into place (kubelet's ..data swap) is read at once.
        s.saw_event(t0 + Duration::from_millis(40), true);
        assert_eq!(
            s.deadline(false, quiet, writer),
            t0 + Duration::from_millis(40)
        );
    }

    #[test]
    fn watch_wakes_for_the_config_but_not_for_neighbours() {
        let dir = std::env::temp_dir().join(format!("ipmasq-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut watch = DirWatch::new(&dir.join("config"));
            assert!(watch.is_armed());
            std::fs::write(dir.join("other.log"), "x").unwrap();
            let woke = tokio::time::timeout(Duration::from_millis(200), watch.changed()).await;
            assert!(woke.is_err(), "a neighbour file must not wake the watch");
            std::fs::write(dir.join("config"), "cidrLimit: 3\n").unwrap();
            let woke = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await;
            assert!(woke.is_ok(), "writing the config must wake the watch");
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
