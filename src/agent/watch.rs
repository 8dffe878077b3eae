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
    fd: Option<AsyncFd<Inotify>>,
    buffer: Vec<u8>,
}

impl DirWatch {
    /// Watches the directory that holds `config_path` (armed lazily if it does not exist yet).
    pub fn new(config_path: &Path) -> Self {
        let dir = config_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let mut watch = DirWatch {
            dir,
            fd: None,
            buffer: vec![0; 4096],
        };
        watch.arm();
        watch
    }

    /// Whether a watch is in place.
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
            match guard.try_io(|inner| {
                let events = inner.get_mut().read_events(buffer)?;
                Ok(events
                    .map(|e| e.mask)
                    .fold((0usize, false), |(n, gone), m| {
                        (
                            n + 1,
                            gone || m.intersects(
                                EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED,
                            ),
                        )
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
