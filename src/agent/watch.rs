//! Watching the config file's directory with inotify. A ConfigMap volume updates by swapping
//! its `..data` symlink, so a watch on the file itself misses every update after the first;
//! the directory sees the swap. Bursts of events settle into one trigger.

use inotify::{EventMask, Inotify, WatchMask};
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

/// A watch on one directory; re-armed when the directory appears or is replaced.
pub struct DirWatch {
    dir: PathBuf,
    /// The config file's name in `dir`; events on other names are ignored, except kubelet's
    /// `..data`-style entries (so a log file next to the config cannot trigger reloads).
    file_name: std::ffi::OsString,
    fd: Option<AsyncFd<Inotify>>,
    buffer: Vec<u8>,
}

/// Whether an event on `name` (None: the directory itself) can change the config.
fn relevant(name: Option<&std::ffi::OsStr>, file_name: &std::ffi::OsStr) -> bool {
    match name {
        None => true,
        Some(name) => name == file_name || name.as_encoded_bytes().starts_with(b".."),
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
        let mut watch = DirWatch {
            dir,
            file_name,
            fd: None,
            buffer: vec![0; 4096],
        };
        watch.arm();
        watch
    }

    /// Whether a watch is in place.
    #[cfg(test)]
    pub fn is_armed(&self) -> bool {
        self.fd.is_some()
    }

    /// Adds the watch if it is missing and the directory exists.
    pub fn arm(&mut self) {
        if self.fd.is_some() || !self.dir.is_dir() {
            return;
        }
        let armed = Inotify::init().and_then(|inotify| {
            inotify.watches().add(&self.dir, mask())?;
            // SAFETY: `Inotify` owns its descriptor for its whole life and always reports the
            // same one; the AsyncFd takes ownership of it, so the fd outlives the registration.
            // (tokio deprecated the safe-looking `with_interest` as unsound for exactly this
            // reason and points here.)
            let registered =
                unsafe { AsyncFd::register_with_interest(inotify, Interest::READABLE) };
            registered.map_err(std::io::Error::from)
        });
        match armed {
            Ok(fd) => {
                debug!(dir = %self.dir.display(), "watching config directory");
                self.fd = Some(fd);
            }
            Err(err) => {
                debug!(dir = %self.dir.display(), error = %err, "cannot watch config directory")
            }
        }
    }

    /// Waits for a change; never returns while no watch is armed.
    pub async fn changed(&mut self) {
        loop {
            let Some(fd) = self.fd.as_mut() else {
                std::future::pending::<()>().await;
                return;
            };
            let Ok(mut guard) = fd.readable_mut().await else {
                self.fd = None;
                continue;
            };
            let buffer = &mut self.buffer;
            let file_name = &self.file_name;
            match guard.try_io(|inner| {
                let events = inner.get_mut().read_events(buffer)?;
                Ok(events.fold((0usize, false), |(n, gone), e| {
                    let dir_gone = e.mask.intersects(
                        EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED,
                    );
                    let counts = dir_gone || relevant(e.name, file_name);
                    (n + usize::from(counts), gone || dir_gone)
                }))
            }) {
                Ok(Ok((count, gone))) => {
                    if gone {
                        // The directory itself went away: re-arm on the next pass.
                        self.fd = None;
                    }
                    if count > 0 {
                        return;
                    }
                    // Only unrelated files changed: keep waiting.
                }
                Ok(Err(err)) => {
                    debug!(error = %err, "config watch failed; re-arming");
                    self.fd = None;
                }
                Err(_would_block) => continue,
            }
        }
    }

    /// Lets a burst of events settle: returns once no event came for `quiet` (at most
    /// `quiet * 10` in all).
    pub async fn settle(&mut self, quiet: Duration) {
        let deadline = tokio::time::Instant::now() + quiet * 10;
        loop {
            let wait = quiet.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            if wait.is_zero() || tokio::time::timeout(wait, self.changed()).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn only_the_config_and_kubelet_entries_are_relevant() {
        let file = OsStr::new("ip-masq-agent");
        assert!(relevant(Some(OsStr::new("ip-masq-agent")), file));
        assert!(relevant(Some(OsStr::new("..data")), file));
        assert!(relevant(Some(OsStr::new("..2026_11_21_00_00_00.1")), file));
        assert!(relevant(None, file));
        assert!(!relevant(Some(OsStr::new("agent.log")), file));
        assert!(!relevant(Some(OsStr::new(".ip-masq-agent.swp")), file));
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
