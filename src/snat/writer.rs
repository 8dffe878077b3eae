//! Where the SNAT log's lines go: standard output (`-`, for a log collector; never rotated),
//! or a file opened in append mode (a restarted agent continues it) and rotated by size: when
//! a line would take the live file `PATH` past the maximum, `PATH.K-1` becomes `PATH.K` (the
//! oldest, `PATH.K` before it, is replaced), ... `PATH` becomes `PATH.1`, and a new `PATH`
//! is started. Files are renamed, never compressed.
//!
//! The log records who talked to whom: a file is created readable by its owner only (0600),
//! and a file found with wider permissions (left by an operator, or a tool's umask) is
//! tightened to 0600 with a warning naming its old mode, never kept world-readable in silence.
//!
//! The file is opened as the state directory's files are ([`open_log_file`]): a symlink at
//! the path is never followed (`O_NOFOLLOW`), the open never blocks (`O_NONBLOCK`: a FIFO
//! without a reader is refused at once, not waited on), and what is found there is used only
//! when it is a regular file owned by the agent's user; anything else is refused with the
//! path and what to do. The file is the path's, not the open descriptor's: before each batch
//! of lines the writer looks at the path ([`LogWriter::follow_path`]), and when the file there
//! is gone (removed, or renamed by another rotation tool) or another one, it opens the path
//! anew; the file it wrote before is left as it is. A rotation happens only while the path
//! still names the live file, so a removed log never shifts (and so destroys) rotated files.

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

impl std::fmt::Display for Destination {
    /// As `--snat-log` takes it: `-` for standard output, else the file's path.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Stdout => f.write_str("-"),
            Destination::File(path) => write!(f, "{}", path.display()),
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
    /// Which file the live one is (None for standard output).
    live: Option<FileId>,
    /// Bytes in the live file (written or found there).
    size: u64,
    /// Files rotated since the start.
    pub rotations: u64,
    /// Times the path was found to name another file, or none, and opened anew.
    pub reopened: u64,
}

/// The permissions of the log's files.
const PRIVATE: u32 = 0o600;

/// A file's identity: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    device: u64,
    inode: u64,
}

impl FileId {
    fn of(metadata: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            device: metadata.dev(),
            inode: metadata.ino(),
        }
    }
}

/// Why what is at the log's path is not used, in words that name the path and what to do.
fn refused(path: &Path, what: &str) -> io::Error {
    io::Error::other(format!(
        "{}: {what}; the SNAT log is written only to a regular file owned by the agent's user: remove it, or give --snat-log another path",
        path.display()
    ))
}

/// Opens (or creates, 0600) the log at `path` for appending, as the state directory's files
/// are opened: no symlink followed, never blocking, and only a regular file owned by this
/// process's effective user. A FIFO without a reader is refused at once (ENXIO), one with a
/// reader by its type; a symlink by `O_NOFOLLOW` (ELOOP).
pub fn open_log_file(path: &Path) -> io::Result<File> {
    let opened = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(err) => {
            let what = match err.raw_os_error() {
                Some(libc::ELOOP) => "it is a symbolic link, and the SNAT log never follows one",
                Some(libc::ENXIO) => "it is a FIFO (or a socket) without a reader, not a file",
                _ => {
                    return Err(io::Error::new(
                        err.kind(),
                        format!("{}: {err}", path.display()),
                    ))
                }
            };
            return Err(refused(path, what));
        }
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(refused(
            path,
            "it is not a regular file (a FIFO, a device or a socket)",
        ));
    }
    use std::os::unix::fs::MetadataExt;
    let euid = rustix::process::geteuid().as_raw();
    if metadata.uid() != euid {
        return Err(refused(
            path,
            &format!(
                "it is owned by uid {}, not by the agent's uid {euid}",
                metadata.uid()
            ),
        ));
    }
    if metadata.nlink() != 1 {
        // A hard link planted at the path names someone else's file too: appending to it
        // and making it private would change that file.
        return Err(refused(
            path,
            &format!(
                "it has {} names (a hard link to another file)",
                metadata.nlink()
            ),
        ));
    }
    Ok(file)
}

fn open_append(path: &Path) -> io::Result<(File, u64)> {
    // It records who talked to whom: readable by its owner only.
    let file = open_log_file(path)?;
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

/// What the log's path names now, against the live file.
#[derive(Debug, PartialEq, Eq)]
enum AtPath {
    /// The live file.
    Live,
    /// Nothing, or another file (or a link, a FIFO...): the live file was removed or renamed.
    Other,
}

fn at_path(path: &Path, live: Option<FileId>) -> AtPath {
    match std::fs::symlink_metadata(path) {
        Ok(found) if Some(FileId::of(&found)) == live => AtPath::Live,
        _ => AtPath::Other,
    }
}

impl LogWriter {
    pub fn open(destination: Destination, rotation: Rotation) -> io::Result<LogWriter> {
        let mut log = LogWriter {
            destination,
            rotation,
            out: BufWriter::with_capacity(64 * 1024, Box::new(io::sink())),
            file: None,
            live: None,
            size: 0,
            rotations: 0,
            reopened: 0,
        };
        match &log.destination {
            Destination::Stdout => {
                log.out = BufWriter::with_capacity(64 * 1024, Box::new(io::stdout()));
            }
            Destination::File(path) => {
                let path = path.clone();
                log.start_file(&path)?;
            }
        }
        Ok(log)
    }

    /// Opens `path` and makes it the live file.
    fn start_file(&mut self, path: &Path) -> io::Result<()> {
        let (file, size) = open_append(path)?;
        self.live = Some(FileId::of(&file.metadata()?));
        self.out = BufWriter::with_capacity(64 * 1024, Box::new(file.try_clone()?));
        self.file = Some(file);
        self.size = size;
        Ok(())
    }

    /// Looks at the path: when it no longer names the live file (removed, or renamed by
    /// someone else's rotation), flushes what is buffered into the old file and opens the
    /// path anew (a new file, or the one found there if it may be used); the old file is left
    /// as it is. Whether it opened anew; an error when what is at the path is refused (the
    /// lines then go on to the old file, and the next call tries again).
    pub fn follow_path(&mut self) -> io::Result<bool> {
        let Destination::File(path) = &self.destination else {
            return Ok(false);
        };
        if at_path(path, self.live) == AtPath::Live {
            return Ok(false);
        }
        let path = path.clone();
        self.out.flush()?;
        self.start_file(&path)?;
        self.reopened += 1;
        Ok(true)
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

    /// Shifts the rotated files and starts a new live file, only while the path still names
    /// the live file; otherwise (someone removed or renamed it) starts a new file at the path
    /// and shifts nothing, so no rotated file is replaced for a file that is not ours to move.
    fn rotate(&mut self) -> io::Result<()> {
        let Destination::File(path) = &self.destination else {
            return Ok(());
        };
        let path = path.clone();
        self.out.flush()?;
        if at_path(&path, self.live) == AtPath::Other {
            self.start_file(&path)?;
            self.reopened += 1;
            return Ok(());
        }
        for n in (1..self.rotation.keep).rev() {
            match std::fs::rename(rotated(&path, n), rotated(&path, n + 1)) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        std::fs::rename(&path, rotated(&path, 1))?;
        self.start_file(&path)?;
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

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ipmasq-snat-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const ROOMY: Rotation = Rotation {
        max_size: 1 << 20,
        keep: 2,
    };

    #[test]
    fn a_symlink_at_the_path_is_refused_and_its_target_untouched() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = dir.join("snat.log");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = LogWriter::open(Destination::File(path.clone()), ROOMY)
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("symbolic link"), "{text}");
        assert!(text.contains("remove it"), "{text}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "its mode untouched");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hard_link_at_the_path_is_refused_and_the_other_name_untouched() {
        let dir = scratch("hardlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = dir.join("snat.log");
        std::fs::hard_link(&victim, &path).unwrap();
        let err = open_log_file(&path).expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("hard link"), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "its mode untouched");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_at_the_path_is_refused_at_once_with_or_without_a_reader() {
        let dir = scratch("fifo");
        let path = dir.join("snat.log");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        // No reader: a blocking open would wait for ever.
        let err = open_log_file(&path).expect_err("refused");
        assert!(err.to_string().contains("FIFO"), "{err}");
        // A reader: opened, then refused by its type.
        let _reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        let err = open_log_file(&path).expect_err("refused");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_of_another_user_is_refused() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: only root can give a file to another user");
            return;
        }
        let dir = scratch("owner");
        let path = dir.join("snat.log");
        std::fs::write(&path, "theirs\n").unwrap();
        std::os::unix::fs::chown(&path, Some(65_534), None).unwrap();
        let err = open_log_file(&path).expect_err("refused");
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "theirs\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Removed by someone else: a new file at the path, the old lines where they were, and
    /// a rotation after that shifts the rotated files once, as it would have.
    #[test]
    fn a_removed_log_is_started_anew_and_the_rotated_files_are_kept() {
        let dir = scratch("removed");
        let path = dir.join("snat.log");
        let rotation = Rotation {
            max_size: 25,
            keep: 2,
        };
        std::fs::write(rotated(&path, 1), "rotated one\n").unwrap();
        std::fs::write(rotated(&path, 2), "rotated two\n").unwrap();
        let mut log = LogWriter::open(Destination::File(path.clone()), rotation).unwrap();
        log.write_line("line 0001\n").unwrap();
        log.flush().unwrap();
        assert!(!log.follow_path().unwrap(), "the path is the live file");
        std::fs::remove_file(&path).unwrap();
        // Lines written before the writer looks go to the old file; a rotation then starts
        // the new file without shifting anything.
        log.write_line("line 0002\n").unwrap();
        log.write_line("line 0003\n").unwrap();
        log.flush().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&path), "line 0003\n");
        assert_eq!(read(&rotated(&path, 1)), "rotated one\n");
        assert_eq!(read(&rotated(&path, 2)), "rotated two\n");
        assert_eq!((log.rotations, log.reopened), (0, 1));
        // Removed again; the writer looks before its next batch.
        std::fs::remove_file(&path).unwrap();
        assert!(log.follow_path().unwrap(), "opened anew");
        assert!(path.exists(), "a new file at once");
        for n in 4..=6 {
            log.write_line(&format!("line {n:04}\n")).unwrap();
        }
        log.flush().unwrap();
        assert_eq!(read(&path), "line 0006\n");
        assert_eq!(read(&rotated(&path, 1)), "line 0004\nline 0005\n");
        assert_eq!(read(&rotated(&path, 2)), "rotated one\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the new file is private");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Rotated by someone else (logrotate's rename): the new file at the path is used, the
    /// renamed one left as it is.
    #[test]
    fn a_log_renamed_by_someone_else_is_followed_to_its_path() {
        let dir = scratch("renamed");
        let path = dir.join("snat.log");
        let mut log = LogWriter::open(Destination::File(path.clone()), ROOMY).unwrap();
        log.write_line("before\n").unwrap();
        log.flush().unwrap();
        let theirs = dir.join("snat.log-20261128");
        std::fs::rename(&path, &theirs).unwrap();
        assert!(log.follow_path().unwrap());
        log.write_line("after\n").unwrap();
        log.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "before\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after\n");
        // A symlink planted in its place is refused; the lines go on to the file open.
        std::fs::rename(&path, dir.join("moved")).unwrap();
        std::os::unix::fs::symlink(&theirs, &path).unwrap();
        assert!(log.follow_path().is_err());
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "before\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
