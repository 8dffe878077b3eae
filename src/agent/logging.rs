//! Log set-up for the agent: tracing to stderr, text or JSON, with klog's `--v` mapped onto
//! levels (0-1 info, 2-4 debug, 5+ trace; the libraries' events only from 6). Under systemd,
//! when stderr is the journal, text lines carry their priority as a `<N>` prefix (journald
//! reads it: `journalctl -p err` finds a rejected config) and no timestamp of their own (the journal stamps every line). In text,
//! the message is always quoted, and so is a field's value holding a space, `=`, `"` or a
//! control character (`holder="agent pid 7"`), with Rust's string escapes: a line splits into
//! fields the way logfmt readers split it, and no text from a config (a key called
//! `x level=ERROR`) can forge a field or break the line.

use std::io::IsTerminal;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Log line format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The tracing level for a klog verbosity.
pub fn level_for(verbosity: u8) -> Level {
    match verbosity {
        0 | 1 => Level::INFO,
        2..=4 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// The syslog priority journald reads from a line's `<N>` prefix.
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// Text lines for the journal: the priority prefix, then the usual line without its time.
struct JournalFormat {
    inner: Format<Full, ()>,
}

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.inner.format_event(context, writer, event)
    }
}

fn journal_format() -> JournalFormat {
    JournalFormat {
        inner: Format::default()
            .without_time()
            .with_target(false)
            .with_ansi(false),
    }
}

/// Whether `stream` (`JOURNAL_STREAM`'s `DEVICE:INODE`) names the file behind `fd`: systemd
/// sets it for a service whose stderr is connected to the journal.
fn is_journal(stream: Option<&str>, fd: impl std::os::fd::AsFd) -> bool {
    let Some((device, inode)) = stream.and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(fd) else {
        return false;
    };
    device.parse::<u64>().ok() == Some(stat.st_dev)
        && inode.parse::<u64>().ok() == Some(stat.st_ino)
}

/// Text fields: the message first, always quoted; then `name=value`, a string value always
/// quoted and any other value quoted when it holds a space, `=`, `"` or a control character,
/// with Rust's string escapes.
struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(
        &self,
        writer: Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes one event's (or span's) fields, space-delimited.
struct TextVisitor<'writer> {
    writer: Writer<'writer>,
    result: std::fmt::Result,
    first: bool,
}

/// Whether a value's text can stand unquoted in a line: not empty, and nothing that splits
/// or ends a field (whitespace, `=`, `"`) or that a terminal would act on.
fn bare(text: &str) -> bool {
    !text.is_empty()
        && !text.contains(|c: char| c.is_whitespace() || c.is_control() || c == '=' || c == '"')
}

impl TextVisitor<'_> {
    fn write(&mut self, name: &str, text: &str, quoted: bool) {
        if self.result.is_err() {
            return;
        }
        let separator = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        self.result = match (name, quoted) {
            ("message", _) => write!(self.writer, "{separator}{text:?}"),
            (name, false) => write!(self.writer, "{separator}{name}={text}"),
            (name, true) => write!(self.writer, "{separator}{name}={text:?}"),
        };
    }
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field.name(), value, true);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        self.write(field.name(), &text, !bare(&text));
    }
}

fn text_fields() -> TextFields {
    TextFields
}

/// From this klog verbosity on, the libraries' own events are logged too (the Kubernetes
/// client's requests, as client-go logs HTTP at `--v=6`); below it only ipmasq's: what the
/// agent says about the API (once per error, with what stays in force) is its own, and a
/// client's line per retry during an API outage would repeat it every backoff.
pub const LIBRARY_VERBOSITY: u8 = 6;

/// Which events are logged at `verbosity`: ipmasq's at [`level_for`], the libraries' only
/// from [`LIBRARY_VERBOSITY`] on.
pub fn targets(verbosity: u8) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let libraries = if verbosity >= LIBRARY_VERBOSITY {
        LevelFilter::from_level(level_for(verbosity))
    } else {
        LevelFilter::OFF
    };
    Targets::new()
        .with_target(env!("CARGO_CRATE_NAME"), level_for(verbosity))
        .with_default(libraries)
}

/// Installs the global subscriber; a second call is a no-op.
pub fn init(format: LogFormat, verbosity: u8) {
    use tracing_subscriber::layer::SubscriberExt;
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level_for(verbosity))
        .with_target(false);
    let journal = is_journal(
        std::env::var("JOURNAL_STREAM").ok().as_deref(),
        std::io::stderr(),
    );
    let filter = targets(verbosity);
    let _ = match format {
        LogFormat::Json => tracing::subscriber::set_global_default(
            builder.json().flatten_event(true).finish().with(filter),
        ),
        LogFormat::Text if journal => tracing::subscriber::set_global_default(
            builder
                .fmt_fields(text_fields())
                .event_format(journal_format())
                .finish()
                .with(filter),
        ),
        LogFormat::Text => tracing::subscriber::set_global_default(
            builder
                .fmt_fields(text_fields())
                .with_ansi(std::io::stderr().is_terminal())
                .finish()
                .with(filter),
        ),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn the_libraries_log_only_from_verbosity_6() {
        use tracing_subscriber::layer::SubscriberExt;
        let buffer = Buffer::default();
        for (verbosity, want) in [(0u8, 1usize), (4, 1), (6, 2)] {
            let writer = buffer.clone();
            buffer.0.lock().unwrap().clear();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_max_level(Level::TRACE)
                .finish()
                .with(targets(verbosity));
            tracing::subscriber::with_default(subscriber, || {
                tracing::error!("ours");
                tracing::error!(target: "kube_client::client", "failed with error client error (Connect)");
            });
            let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
            assert_eq!(text.lines().count(), want, "--v={verbosity}: {text}");
            assert!(text.contains("ours"));
        }
    }

    #[test]
    fn klog_verbosity_maps_to_levels() {
        assert_eq!(level_for(0), Level::INFO);
        assert_eq!(level_for(2), Level::DEBUG);
        assert_eq!(level_for(9), Level::TRACE);
    }

    /// A writer into a shared buffer, for one subscriber of a test.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn journal_lines_carry_their_priority_and_no_timestamp() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(Level::DEBUG)
            .fmt_fields(text_fields())
            .event_format(journal_format())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let holder = "agent pid 7";
            tracing::error!(
                config = "/etc/ipmasq/config.yaml",
                %holder,
                elapsed_ms = 8.0,
                chain = %"IP-MASQ-AGENT",
                "invalid config rejected"
            );
            tracing::warn!("a warning");
            tracing::info!("rules installed");
            tracing::debug!("pass done");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(
            lines[0],
            "<3>ERROR \"invalid config rejected\" config=\"/etc/ipmasq/config.yaml\" holder=\"agent pid 7\" elapsed_ms=8.0 chain=IP-MASQ-AGENT",
            "the message and values with spaces are quoted, others are not"
        );
        assert!(lines[1].starts_with("<4> WARN \"a warning\""), "{text}");
        assert!(
            lines[2].starts_with("<6> INFO \"rules installed\""),
            "{text}"
        );
        assert!(lines[3].starts_with("<7>DEBUG \"pass done\""), "{text}");
        assert!(!text.contains("Z "), "no timestamp of our own: {text}");
    }

    /// A line's fields as a logfmt reader splits them: the quoted message, then `name=value`
    /// pairs, a quoted value read back through Rust's escapes.
    fn fields_of(line: &str) -> (String, Vec<(String, String)>) {
        fn quoted(rest: &str) -> (String, &str) {
            let mut out = String::new();
            let mut chars = rest[1..].char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '"' => return (out, &rest[i + 2..]),
                    '\\' => match chars.next().map(|(_, e)| e) {
                        Some('n') => out.push('\n'),
                        Some('u') => {
                            let hex: String = chars
                                .by_ref()
                                .map(|(_, h)| h)
                                .take_while(|h| *h != '}')
                                .filter(|h| *h != '{')
                                .collect();
                            out.push(
                                char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap(),
                            );
                        }
                        Some(other) => out.push(other),
                        None => panic!("a dangling escape: {rest}"),
                    },
                    c => out.push(c),
                }
            }
            panic!("an unterminated quote: {rest}")
        }
        let rest = line.trim_start().split_once(' ').unwrap().1.trim_start();
        assert!(rest.starts_with('"'), "the message is quoted: {line}");
        let (message, mut rest) = quoted(rest);
        let mut fields = Vec::new();
        while let Some(next) = rest.strip_prefix(' ') {
            let (name, value) = next.split_once('=').unwrap();
            let (value, after) = if value.starts_with('"') {
                quoted(value)
            } else {
                let end = value.find(' ').unwrap_or(value.len());
                (value[..end].to_string(), &value[end..])
            };
            fields.push((name.to_string(), value));
            rest = after;
        }
        assert!(rest.is_empty(), "{line}");
        (message, fields)
    }

    /// No text can forge a field or break the line: a config key `x level=ERROR` in the
    /// message or a value, a value that starts with a quote, a newline, a terminal escape.
    #[test]
    fn config_text_cannot_forge_a_field() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .fmt_fields(text_fields())
            .finish();
        let key = "x level=ERROR";
        let sneaky = "\"x\" level=ERROR";
        let broken = "a\n2026-01-01T00:00:00Z ERROR forged=1";
        let escape = "a\u{1b}[2Jb";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(config = "/c", "unknown key `{key}` is ignored");
            tracing::warn!(key = %sneaky, other = %broken, term = %escape, plain = %"p", "x");
            tracing::warn!(key = ?sneaky, "debug-formatted");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
        let (message, fields) = fields_of(lines[0]);
        assert_eq!(message, "unknown key `x level=ERROR` is ignored");
        assert_eq!(fields, [("config".to_string(), "/c".to_string())]);
        let (message, fields) = fields_of(lines[1]);
        assert_eq!(message, "x");
        let expected: Vec<(String, String)> = [
            ("key", sneaky),
            ("other", broken),
            ("term", escape),
            ("plain", "p"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(fields, expected, "{}", lines[1]);
        assert!(lines[1].contains(" plain=p"), "a plain value stays bare");
        let (_, fields) = fields_of(lines[2]);
        assert_eq!(fields, [("key".to_string(), format!("{sneaky:?}"))]);
    }

    #[test]
    fn the_journal_is_recognised_by_device_and_inode() {
        use std::os::unix::fs::MetadataExt;
        let path = std::env::temp_dir().join(format!("ipmasq-journal-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let meta = file.metadata().unwrap();
        let stream = format!("{}:{}", meta.dev(), meta.ino());
        assert!(is_journal(Some(&stream), &file));
        assert!(!is_journal(Some("1:2"), &file));
        assert!(!is_journal(None, &file));
        assert!(!is_journal(Some("garbage"), &file));
        let _ = std::fs::remove_file(path);
    }
}
