//! The source stage of a pass: where the config comes from (a file or a directory of files
//! today), read only when its bytes changed and only once a writer is done with them. It
//! yields the bytes it read ([`config::SourceText`]), never a parsed config: parsing and
//! checking them is admission's.

use crate::config::{self, ConfigOrigin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// How long a config file that was emptied must stay empty before its emptiness is taken as
/// "use the defaults": a writer that truncates and then writes (`cat > file`) leaves it empty
/// for a moment, and upstream's defaults in that moment would masquerade what the config keeps.
pub const BLANK_GRACE: Duration = Duration::from_secs(2);

/// Where the passes read their config: one variant per kind of source (step 18 adds the
/// Kubernetes API next to the files).
pub enum Source {
    /// `--config` (one file) or `--config-dir` (files merged).
    Files(FileSource),
}

/// What the source stage hands to admission.
pub enum SourceRead {
    /// Nothing new to judge: the config in force and every note about it stand.
    Nothing,
    /// The source cannot be read, and why.
    Unreadable(String),
    /// New bytes: the file's (or its absence), or the directory's files; not yet parsed.
    Read(config::SourceText),
}

impl Source {
    pub fn new(source: config::ConfigSource) -> Source {
        Source::Files(FileSource {
            source,
            cache: None,
            parses_skipped: 0,
            in_flux: Arc::default(),
            had_content: false,
            blank_since: None,
        })
    }

    /// How log lines name the source (`config = ...`).
    pub fn label(&self) -> String {
        match self {
            Source::Files(files) => files.source.to_string(),
        }
    }

    /// Reads the config's bytes, when there is something new to read.
    pub fn read(&mut self) -> SourceRead {
        match self {
            Source::Files(files) => files.read(),
        }
    }

    /// How soon the source must be read again whatever the triggers (None: no sooner than
    /// the interval).
    pub fn read_again_within(&self) -> Option<Duration> {
        match self {
            Source::Files(files) => files.read_again_within(),
        }
    }
}

/// The config file or directory, with what the last read found.
pub struct FileSource {
    source: config::ConfigSource,
    /// What the last read found: unchanged bytes are not handed on (so never parsed again).
    cache: Option<config::ReadCache>,
    /// Config parses skipped because the bytes had not changed (for tests and debugging).
    pub parses_skipped: u64,
    /// Set while a writer has the config file open (the directory watch sees it modified and
    /// not yet closed): the file is not read until it is whole.
    pub in_flux: Arc<AtomicBool>,
    /// The last file read had content (so an empty one now is likely a rewrite in progress).
    had_content: bool,
    /// Since when the file has been seen empty after having content.
    pub blank_since: Option<Instant>,
}

impl FileSource {
    fn read(&mut self) -> SourceRead {
        let path = self.source.to_string();
        if self.in_flux.load(Ordering::Acquire) {
            debug!(config = %path, "the config file is being written; it is read once the writer closes it");
            return SourceRead::Nothing;
        }
        let text = match config::read_source_unless_unchanged(&self.source, &mut self.cache) {
            Ok(Some(text)) => text,
            Ok(None) => {
                self.parses_skipped += 1;
                return SourceRead::Nothing;
            }
            Err(err) => {
                self.cache = None;
                return SourceRead::Unreadable(err.to_string());
            }
        };
        let blank = text.is_blank();
        if blank && self.had_content {
            let since = *self.blank_since.get_or_insert_with(|| {
                info!(config = %path, grace_s = BLANK_GRACE.as_secs_f64(), "the config file was emptied; keeping the config in force unless it stays empty (a writer may be rewriting it in place)");
                Instant::now()
            });
            if since.elapsed() < BLANK_GRACE {
                // Read it again next pass, even if its stamp is unchanged.
                self.cache = None;
                return SourceRead::Nothing;
            }
        }
        self.blank_since = None;
        self.had_content = text.origin() == ConfigOrigin::File && !blank;
        SourceRead::Read(text)
    }

    /// Look again when the grace of an emptied file ends.
    fn read_again_within(&self) -> Option<Duration> {
        self.blank_since.map(|since| {
            BLANK_GRACE
                .saturating_sub(since.elapsed())
                .max(Duration::from_millis(10))
        })
    }
}
