//! Where the SNAT log's lines go: standard output (`-`, for a log collector; never rotated),
//! or a file opened in append mode (a restarted agent continues it) and rotated by size: when
//! a line would take the live file `PATH` past the maximum, `PATH.K-1` becomes `PATH.K` (the
//! oldest, `PATH.K` before it, is replaced), ... `PATH` becomes `PATH.1`, and a new `PATH`
//! is started. Files are renamed, never compressed.
//!
//! The log records who talked to whom: a file is created readable by its owner only (0600),
//! and a file found with wider permissions (left by an operator, or a tool's umask) is
//! tightened to 0600 with a warning naming its old mode, never kept world-readable in silence.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tracing::warn;

/// Where the log goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

impl Destination {
    /// `-` is standard output; anything else a file's path.
    pub fn parse(text: &std::ffi::OsStr) -> Destination {
        if text == "-" {
            Destination::Stdout
        } else {
            Destination::File(PathBuf::from(text))
        }
    }
}

/// When the live file is rotated, and how many rotated files are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub max_size: u64,
    pub keep: u32,
}

/// The open log.
pub struct LogWriter {
    destination: Destination,
    rotation: Rotation,
    out: BufWriter<Box<dyn Write + Send>>,
    /// The live file, for an fsync (None for standard output).
    file: Option<File>,
    /// Bytes in the live file (written or found there).
    size: u64,
    /// Files rotated since the start.
    pub rotations: u64,
}

/// The permissions of the log's files.
const PRIVATE: u32 = 0o600;

fn open_append(path: &Path) -> io::Result<(File, u64)> {
    // It records who talked to whom: readable by its owner only.
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE)
        .open(path)?;
    match make_private(&file) {
        Ok(Some(old)) => warn!(
            path = %path.display(),
            old_mode = format!("{old:04o}"),
            "the SNAT log was readable or writable by others; its mode is now 0600"
        ),
        Ok(None) => {}
        Err(err) => warn!(
            path = %path.display(),
            error = %err,
            "the SNAT log is readable or writable by others and its mode cannot be set to 0600"
        ),
    }
    let size = file.metadata()?.len();
    Ok((file, size))
}

/// Sets `file`'s permissions to 0600 when its group or others have any; its old mode (the
/// permission bits) when it did.
fn make_private(file: &File) -> io::Result<Option<u32>> {
    let mode = file.metadata()?.permissions().mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(None);
    }
    file.set_permissions(std::fs::Permissions::from_mode(PRIVATE))?;
    Ok(Some(mode))
}

/// `PATH.n`.
pub fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

impl LogWriter {
    pub fn open(destination: Destination, rotation: Rotation) -> io::Result<LogWriter> {
        let (out, file, size): (Box<dyn Write + Send>, _, u64) = match &destination {
            Destination::Stdout => (Box::new(io::stdout()), None, 0),
            Destination::File(path) => {
                let (file, size) = open_append(path)?;
                (Box::new(file.try_clone()?), Some(file), size)
            }
        };
        Ok(LogWriter {
            destination,
            rotation,
            out: BufWriter::with_capacity(64 * 1024, out),
            file,
            size,
            rotations: 0,
        })
    }

    /// Writes one line (its `\n` included), rotating first when it would take the live file
    /// past the maximum (a line longer than the maximum goes alone in its file).
    pub fn write_line(&mut self, line: &str) -> io::Result<()> {
        let length = line.len() as u64;
        if self.size > 0 && self.size + length > self.rotation.max_size {
            self.rotate()?;
        }
        self.out.write_all(line.as_bytes())?;
        self.size += length;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes, then asks the file system to put the live file's data on disk (standard
    /// output is only flushed): the last word of a stopping agent.
    pub fn sync(&mut self) -> io::Result<()> {
        self.out.flush()?;
        match &self.file {
            Some(file) => file.sync_data(),
            None => Ok(()),
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        let Destination::File(path) = &self.destination else {
            return Ok(());
        };
        self.out.flush()?;
        for n in (1..self.rotation.keep).rev() {
            match std::fs::rename(rotated(path, n), rotated(path, n + 1)) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        std::fs::rename(path, rotated(path, 1))?;
        let (file, size) = open_append(path)?;
        self.out = BufWriter::with_capacity(64 * 1024, Box::new(file.try_clone()?));
        self.file = Some(file);
        self.size = size;
        self.rotations += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_rotate_by_size_newest_first_and_keep_k() {
        let dir = std::env::temp_dir().join(format!("ipmasq-snat-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snat.log");
        std::fs::write(&path, "old\n").unwrap();
        let rotation = Rotation {
            max_size: 20,
            keep: 2,
        };
        let mut log = LogWriter::open(Destination::File(path.clone()), rotation).unwrap();
        // Appended after what was there: 4 + 10 bytes.
        log.write_line("line 0001\n").unwrap();
        for n in 2..=7 {
            log.write_line(&format!("line {n:04}\n")).unwrap();
        }
        log.flush().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&path), "line 0006\nline 0007\n");
        assert_eq!(read(&rotated(&path, 1)), "line 0004\nline 0005\n");
        assert_eq!(read(&rotated(&path, 2)), "line 0002\nline 0003\n");
        assert!(!rotated(&path, 3).exists(), "only K rotated files are kept");
        assert_eq!(log.rotations, 3);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "a new live file is private");
        drop(log);
        // A restart appends to the live file.
        let larger = Rotation {
            max_size: 100,
            keep: 2,
        };
        let mut log = LogWriter::open(Destination::File(path.clone()), larger).unwrap();
        log.write_line("line 0008\n").unwrap();
        log.flush().unwrap();
        assert_eq!(read(&path), "line 0006\nline 0007\nline 0008\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_log_readable_by_others_is_made_private_and_kept() {
        let dir = std::env::temp_dir().join(format!("ipmasq-snat-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snat.log");
        std::fs::write(&path, "old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let file = OpenOptions::new().append(true).open(&path).unwrap();
        assert_eq!(make_private(&file).unwrap(), Some(0o644), "its old mode");
        assert_eq!(make_private(&file).unwrap(), None, "private already");
        drop(file);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let rotation = Rotation {
            max_size: 100,
            keep: 1,
        };
        let mut log = LogWriter::open(Destination::File(path.clone()), rotation).unwrap();
        log.write_line("new\n").unwrap();
        log.flush().unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o600, "tightened at the open");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "old\nnew\n",
            "its lines kept"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
