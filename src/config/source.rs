//! Reading a config file safely: a missing file is "use defaults" (as upstream), and a file
//! that is too large, a directory, a symlink loop, unreadable or not UTF-8 is a clear error.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest config accepted: a ConfigMap is capped near 1 MiB, but a file on a bare-metal host
/// may list 100,000 CIDRs for the nftables backend (about 2 MiB).
pub const MAX_CONFIG_BYTES: u64 = 8 << 20;

/// The text of a config source, byte for byte (a leading byte order mark included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigText {
    pub text: String,
}

impl ConfigText {
    /// Nothing but white space (after a byte order mark, if any).
    pub fn is_blank(&self) -> bool {
        self.text
            .trim_start_matches(BYTE_ORDER_MARK)
            .trim()
            .is_empty()
    }
}

/// U+FEFF, which an editor may write at the start of a UTF-8 file.
pub const BYTE_ORDER_MARK: char = '\u{feff}';

/// Why a config source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: is a directory, not a config file", .0.display())]
    Directory(PathBuf),
    #[error("{}: too many levels of symbolic links (a symlink loop?)", .0.display())]
    SymlinkLoop(PathBuf),
    #[error("{}: larger than the {} byte limit for a config", .0.display(), MAX_CONFIG_BYTES)]
    TooLarge(PathBuf),
    #[error("{}: permission denied (run as a user that can read it)", .0.display())]
    PermissionDenied(PathBuf),
    #[error("{}: not valid UTF-8 (byte {offset}); save the file as UTF-8", path.display())]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("{}: not found", .0.display())]
    NotFound(PathBuf),
    #[error("{}: is a {kind}, not a regular file; the agent reads only regular files (a FIFO or a device would block it)", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{}: {source}", path.display())]
    Other {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// ELOOP on Linux.
const ELOOP: i32 = 40;

fn classify(path: &Path, err: std::io::Error) -> ReadError {
    use std::io::ErrorKind;
    let path = path.to_path_buf();
    if err.raw_os_error() == Some(ELOOP) {
        return ReadError::SymlinkLoop(path);
    }
    match err.kind() {
        ErrorKind::NotFound => ReadError::NotFound(path),
        ErrorKind::PermissionDenied => ReadError::PermissionDenied(path),
        ErrorKind::IsADirectory => ReadError::Directory(path),
        _ => ReadError::Other { path, source: err },
    }
}

/// What identifies a file's current content without reading it: device, inode, size and
/// modification time of what the path resolves to (a ConfigMap update swaps in a new file,
/// so its inode changes; an edit in place changes the time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// The stamp of the regular file at `path`, if there is one.
pub fn file_stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)?;
    Some(FileStamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

/// Reads a config file, following symlinks (a ConfigMap volume is all symlinks).
/// `Ok(None)` when nothing exists at the path: the agent then runs on defaults.
pub fn read_config_source(path: &Path) -> Result<Option<ConfigText>, ReadError> {
    let metadata = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(err) => {
            return match classify(path, err) {
                ReadError::NotFound(_) => Ok(None),
                other => Err(other),
            }
        }
    };
    if metadata.is_dir() {
        return Err(ReadError::Directory(path.to_path_buf()));
    }
    // Opening a FIFO blocks until a writer comes; a non-blocking open never does, and the
    // type of what was opened (the path may have been swapped since) is checked on the file.
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(|e| classify(path, e))?;
    let opened = file.metadata().map_err(|e| classify(path, e))?;
    if !opened.is_file() {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            kind: file_kind(&opened.file_type()),
        });
    }
    if opened.len() > MAX_CONFIG_BYTES {
        return Err(ReadError::TooLarge(path.to_path_buf()));
    }
    read_limited(file, path).map(Some)
}

/// `O_NONBLOCK` on Linux (asm-generic and x86).
const O_NONBLOCK: i32 = 0o4000;

/// A file type in words, for errors.
fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "directory"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// Reads at most [`MAX_CONFIG_BYTES`] from `reader` (a file or stdin) as UTF-8 config text.
pub fn read_limited(reader: impl Read, path: &Path) -> Result<ConfigText, ReadError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| classify(path, e))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ReadError::TooLarge(path.to_path_buf()));
    }
    // A UTF-8 byte order mark stays: upstream decides JSON or YAML on the bytes as they are
    // (a BOM is not white space, so `\u{FEFF}{` is YAML there), and the YAML parser drops it
    // as yaml.v2 does.
    let text = String::from_utf8(bytes).map_err(|e| ReadError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    Ok(ConfigText { text })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ipmasq-source-{}-{}", std::process::id(), name));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = scratch("fifo");
        let fifo = dir.join("config");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        // Nobody writes to it: a blocking open would hang this test forever.
        let err = read_config_source(&fifo).unwrap_err();
        assert!(
            matches!(err, ReadError::NotRegular { kind: "FIFO", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn missing_file_means_defaults() {
        let dir = scratch("missing");
        assert!(read_config_source(&dir.join("nope")).unwrap().is_none());
        assert!(read_config_source(&dir.join("no/such/dir"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn directory_is_an_error() {
        let dir = scratch("dir");
        assert!(matches!(
            read_config_source(&dir),
            Err(ReadError::Directory(_))
        ));
    }

    #[test]
    fn symlink_loop_is_an_error() {
        let dir = scratch("loop");
        let a = dir.join("a");
        let b = dir.join("b");
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let err = read_config_source(&a).unwrap_err();
        assert!(matches!(err, ReadError::SymlinkLoop(_)), "{err}");
    }

    #[test]
    fn oversized_file_is_an_error() {
        let dir = scratch("big");
        let path = dir.join("big");
        std::fs::write(&path, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            read_config_source(&path),
            Err(ReadError::TooLarge(_))
        ));
        std::fs::write(&path, vec![b'#'; MAX_CONFIG_BYTES as usize]).unwrap();
        assert!(read_config_source(&path).unwrap().is_some());
    }

    #[test]
    fn invalid_utf8_is_an_error_and_bom_is_kept() {
        let dir = scratch("utf8");
        let path = dir.join("c");
        std::fs::write(&path, b"a: \xff\n").unwrap();
        let err = read_config_source(&path).unwrap_err();
        assert!(matches!(err, ReadError::NotUtf8 { offset: 3, .. }), "{err}");
        std::fs::write(&path, b"\xEF\xBB\xBFa: 1\n").unwrap();
        let text = read_config_source(&path).unwrap().unwrap();
        assert_eq!(text.text, "\u{feff}a: 1\n");
        assert!(!text.is_blank());
        std::fs::write(&path, b"\xEF\xBB\xBF \n").unwrap();
        assert!(read_config_source(&path).unwrap().unwrap().is_blank());
    }

    #[test]
    fn follows_configmap_style_symlinks() {
        let dir = scratch("configmap");
        std::fs::create_dir(dir.join("..2026_11_21")).unwrap();
        std::fs::write(dir.join("..2026_11_21/config"), "cidrLimit: 3\n").unwrap();
        std::os::unix::fs::symlink("..2026_11_21", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/config", dir.join("config")).unwrap();
        let text = read_config_source(&dir.join("config")).unwrap().unwrap();
        assert_eq!(text.text, "cidrLimit: 3\n");
    }
}
