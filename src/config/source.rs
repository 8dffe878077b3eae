//! Reading a config file safely: a missing file is "use defaults" (as upstream), and a file
//! that is too large, a directory, a symlink loop, unreadable or not UTF-8 is a clear error.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
        is_blank(&self.text)
    }
}

/// Nothing but white space (after a byte order mark, if any).
fn is_blank(text: &str) -> bool {
    text.trim_start_matches(BYTE_ORDER_MARK).trim().is_empty()
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

/// What a config source held when it was read: its bytes, not yet parsed (parsing and
/// checking them is the reader's business: [`SourceText::check`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceText {
    /// Nothing at the file's path: upstream's defaults.
    Missing,
    /// The file's text, byte for byte (shared with the read cache, never copied).
    File(Arc<String>),
    /// A directory's `ip-masq*` files in name order, each with its text or why it could not
    /// be read (which rejects the merge).
    Dir {
        dir: PathBuf,
        paths: Arc<[PathBuf]>,
        texts: Arc<[Result<String, String>]>,
    },
    /// API mode: the base ConfigMap's text, the pools that select the node and the
    /// EgressNATPolicies, when any pool or policy takes part.
    Composed(Arc<super::composed::ComposedText>),
}

impl SourceText {
    /// Where a config made of these bytes comes from.
    pub fn origin(&self) -> super::ConfigOrigin {
        match self {
            SourceText::Missing => super::ConfigOrigin::Defaults,
            SourceText::File(_) => super::ConfigOrigin::File,
            SourceText::Dir { .. } => super::ConfigOrigin::Dir,
            SourceText::Composed(_) => super::ConfigOrigin::Composed,
        }
    }

    /// A file that exists but holds nothing but white space (see [`ConfigText::is_blank`]).
    pub fn is_blank(&self) -> bool {
        match self {
            SourceText::File(text) => is_blank(text),
            SourceText::Missing | SourceText::Dir { .. } | SourceText::Composed(_) => false,
        }
    }
}

/// What the last read of a source found, to tell unchanged bytes: the same stamps mean the
/// same bytes, unread; new stamps over the same bytes are nothing new either.
#[derive(Clone, Debug)]
pub struct ReadCache {
    stamps: Vec<Option<FileStamp>>,
    text: SourceText,
}

/// Reads `source` (a file, or a directory's `ip-masq*` files), `Ok(None)` when its bytes are
/// those of the last read through `cache`: a steady resync reads the files' stamps (and
/// compares bytes when a stamp moved), and copies nothing. A missing file resets the cache;
/// so must the caller after a read error (the next readable bytes are then new).
pub fn read_source_unless_unchanged(
    source: &super::ConfigSource,
    cache: &mut Option<ReadCache>,
) -> Result<Option<SourceText>, ReadError> {
    match source {
        super::ConfigSource::File(path) => read_file_unless_unchanged(path, cache),
        super::ConfigSource::Dir(dir) => read_dir_unless_unchanged(dir, cache),
    }
}

/// Reads `source` afresh (see [`read_source_unless_unchanged`]).
pub fn read_source(source: &super::ConfigSource) -> Result<SourceText, ReadError> {
    match source {
        super::ConfigSource::File(path) => Ok(read_config_source(path)?
            .map_or(SourceText::Missing, |read| {
                SourceText::File(Arc::new(read.text))
            })),
        super::ConfigSource::Dir(dir) => {
            let paths = super::merge::part_paths(dir)?;
            let texts = read_parts(&paths);
            Ok(SourceText::Dir {
                dir: dir.to_path_buf(),
                paths: paths.into(),
                texts: texts.into(),
            })
        }
    }
}

/// Each part's text, or why it could not be read.
fn read_parts(paths: &[PathBuf]) -> Vec<Result<String, String>> {
    paths
        .iter()
        .map(|p| match read_config_source(p) {
            Ok(Some(text)) => Ok(text.text),
            Ok(None) => Err("the file disappeared while the directory was read".to_string()),
            Err(err) => Err(err.to_string()),
        })
        .collect()
}

fn read_file_unless_unchanged(
    path: &Path,
    cache: &mut Option<ReadCache>,
) -> Result<Option<SourceText>, ReadError> {
    let stamp = file_stamp(path);
    if stamp.is_some()
        && cache
            .as_ref()
            .is_some_and(|c| matches!(c.text, SourceText::File(_)) && c.stamps == [stamp])
    {
        return Ok(None);
    }
    let Some(read) = read_config_source(path)? else {
        *cache = None;
        return Ok(Some(SourceText::Missing));
    };
    if let Some(c) = cache
        .as_mut()
        .filter(|c| matches!(&c.text, SourceText::File(text) if **text == *read.text))
    {
        c.stamps = vec![stamp];
        return Ok(None);
    }
    let text = SourceText::File(Arc::new(read.text));
    *cache = Some(ReadCache {
        stamps: vec![stamp],
        text: text.clone(),
    });
    Ok(Some(text))
}

fn read_dir_unless_unchanged(
    dir: &Path,
    cache: &mut Option<ReadCache>,
) -> Result<Option<SourceText>, ReadError> {
    let paths = super::merge::part_paths(dir)?;
    let stamps: Vec<Option<FileStamp>> = paths.iter().map(|p| file_stamp(p)).collect();
    let same_paths =
        |text: &SourceText| matches!(text, SourceText::Dir { paths: last, .. } if **last == *paths);
    if let Some(c) = cache.as_ref() {
        if same_paths(&c.text) && c.stamps == stamps && stamps.iter().all(Option::is_some) {
            return Ok(None);
        }
    }
    let texts = read_parts(&paths);
    if let Some(c) = cache.as_mut() {
        let same_texts = matches!(&c.text, SourceText::Dir { texts: last, .. } if **last == *texts);
        if same_paths(&c.text) && same_texts {
            c.stamps = stamps;
            return Ok(None);
        }
    }
    let text = SourceText::Dir {
        dir: dir.to_path_buf(),
        paths: paths.into(),
        texts: texts.into(),
    };
    *cache = Some(ReadCache {
        stamps,
        text: text.clone(),
    });
    Ok(Some(text))
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
    // UTF-16 with a byte order mark (what PowerShell 5's `Out-File` writes) is read as
    // yaml.v2 reads it: decoded, its BOM kept as the first character, as a UTF-8 file's is.
    if let Some(text) = utf16_with_bom(&bytes) {
        return text
            .map(|text| ConfigText { text })
            .map_err(|offset| ReadError::NotUtf8 {
                path: path.to_path_buf(),
                offset,
            });
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

/// The text of `bytes` if they start with a UTF-16 byte order mark (little- or big-endian):
/// Ok with the decoded text (its BOM the first character), or Err with the byte offset of the
/// first unit that is not UTF-16 (a lone surrogate, an odd last byte). None: not UTF-16.
fn utf16_with_bom(bytes: &[u8]) -> Option<Result<String, usize>> {
    let little = match bytes {
        [0xFF, 0xFE, ..] => true,
        [0xFE, 0xFF, ..] => false,
        _ => return None,
    };
    let units = bytes.chunks(2).map(|pair| match (pair, little) {
        ([low, high], true) | ([high, low], false) => Some(u16::from_le_bytes([*low, *high])),
        _ => None,
    });
    let mut text = String::with_capacity(bytes.len() / 2);
    let mut offset = 0;
    let mut pending = Vec::new();
    for unit in units {
        let Some(unit) = unit else {
            return Some(Err(offset));
        };
        pending.push(unit);
        match char::decode_utf16(pending.iter().copied()).next() {
            Some(Ok(c)) => {
                text.push(c);
                offset += 2 * pending.len();
                pending.clear();
            }
            // A high surrogate waits for its low half.
            Some(Err(_)) if pending.len() == 1 && (0xD800..0xDC00).contains(&unit) => {}
            _ => return Some(Err(offset)),
        }
    }
    if pending.is_empty() {
        Some(Ok(text))
    } else {
        Some(Err(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_with_a_byte_order_mark_is_read_as_yaml_v2_reads_it() {
        let text = "\u{feff}nonMasqueradeCIDRs: [10.0.0.0/8] # 🙂\n";
        let le: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let be: Vec<u8> = text.encode_utf16().flat_map(u16::to_be_bytes).collect();
        for bytes in [le, be] {
            let read = read_limited(&bytes[..], Path::new("c")).unwrap();
            assert_eq!(read.text, text);
        }
        let mut odd: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        odd.push(b'x');
        let err = read_limited(&odd[..], Path::new("c")).unwrap_err();
        assert!(matches!(err, ReadError::NotUtf8 { .. }), "{err}");
        // A lone high surrogate, then an ASCII unit.
        let lone = [0xFF, 0xFE, 0x61, 0x00, 0x00, 0xD8, 0x62, 0x00];
        let err = read_limited(&lone[..], Path::new("c")).unwrap_err();
        assert!(matches!(err, ReadError::NotUtf8 { offset: 4, .. }), "{err}");
        assert!(
            utf16_with_bom(b"a: 1\n").is_none(),
            "UTF-8 is not looked at"
        );
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ipmasq-source-{}-{}", std::process::id(), name));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_is_handed_on_only_when_its_bytes_changed() {
        let dir = scratch("unchanged");
        let path = dir.join("config");
        let source = crate::config::ConfigSource::File(path.clone());
        let mut cache = None;
        let mut read = || read_source_unless_unchanged(&source, &mut cache).unwrap();
        assert_eq!(read(), Some(SourceText::Missing));
        std::fs::write(&path, "masqLinkLocal: true\n").unwrap();
        assert_eq!(
            read(),
            Some(SourceText::File(Arc::new("masqLinkLocal: true\n".into())))
        );
        assert_eq!(read(), None, "same stamp: nothing new");
        // Rewritten with the same bytes (a new inode, so a new stamp): nothing new either.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "masqLinkLocal: true\n").unwrap();
        assert_eq!(read(), None, "same bytes: nothing new");
        std::fs::write(&path, "  \n").unwrap();
        let blank = read().expect("new bytes");
        assert!(blank.is_blank());
        assert_eq!(blank.origin(), crate::config::ConfigOrigin::File);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(read(), Some(SourceText::Missing));
        let _ = std::fs::remove_dir_all(dir);
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
