//! `who`: the pod source(s) behind a translated address and port, read from the agent's SNAT
//! log (`agent --snat-log`) and its rotated files, streamed with bounded memory.
//!
//! The log holds one JSON object per line, `new` when conntrack created a flow our rules
//! translated and `end` when it went away:
//! `{"time":"…Z","event":"new","proto":"tcp","src":"192.168.1.5:40002","translated":"203.0.113.1:40002","dst":"198.51.100.9:443"}`.
//! A flow is a `new` line and the later `end` line of the same proto, src, translated and dst.
//! What the log may lack, and how it is answered:
//!
//! * no `new` (the log began, or its older files were rotated away, while the flow lived): the
//!   flow started before the log: its start is unknown (`null`), it covers any time up to its end;
//! * no `end` (the flow is still open, or its end was lost to an agent restart or a dropped
//!   event): if a later `new` of the same proto, translated and dst appears, the flow was over
//!   by then (conntrack holds one flow per reply tuple), and that time is its end, marked
//!   inferred; otherwise it is open: it covers any time from its start on.
//!
//! At most [`MAX_FLOWS`] flows are kept, the newest; the rest are counted (`omittedFlows`).
//! At most [`MAX_OPEN`] flows wait for their end at once (a log of flows that never ended holds
//! one per destination): past that, the longest-waiting are taken as open, and an `end` that
//! comes for one later is shown as a flow of its own, its start unknown (`unpairedOpenFlows`
//! counts them). A log path that is not a regular file (a FIFO, a device) is refused, never
//! waited on: `--log -` reads a pipe.
//!
//! With `--pod`, the pod's `refused` lines (the pod share refused its new connections) are
//! answered too, apart from its flows: at most [`MAX_FLOWS`], the newest.
//!
//! Speed: only the lines holding `"ADDRESS:PORT"` (quoted, so `:4000` never matches `:40002`)
//! are parsed; the bytes in between are searched with memchr's memmem and never decoded.

use crate::cli::{OutputFormat, WhoArgs};
use crate::cmd::Exit;
use crate::output::{printable, Styler};
use crate::snat::line::{endpoint_text, show_time, time_of, Micros, Record, REFUSED};
use serde::Serialize;
use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `--log -`: the log on standard input (an agent run with `--snat-log -` writes it to its
/// standard output, for a log collector: `kubectl logs … | ipmasq who … --log -`).
pub const STDIN: &str = "-";

/// A line longer than this is no line of the log: skipped (and counted) without being held.
pub const MAX_LINE: usize = 64 << 10;

/// The most flows an answer holds (the newest): memory stays bounded when a port was used a
/// million times and no `--at` narrows it.
pub const MAX_FLOWS: usize = 1000;

/// The most flows waiting for their `end` line at once (see the module's documentation).
pub const MAX_OPEN: usize = 10_000;

/// The read size: large enough that the search, not the system calls, sets the pace.
const CHUNK: usize = 1 << 20;

/// The most rotated files looked for (`PATH.1` … `PATH.N`); the agent keeps far fewer.
const MAX_ROTATED: usize = 1000;

/// A span of time, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub from: Micros,
    pub to: Micros,
}

impl Window {
    /// `at`, give or take `tolerance`.
    pub fn around(at: Micros, tolerance: Micros) -> Window {
        Window {
            from: at.saturating_sub(tolerance),
            to: at.saturating_add(tolerance),
        }
    }
}

/// Whose flows: those through one translated address and port, or those of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The translated address and port, as the outside saw it.
    Translated(SocketAddr),
    /// `NAMESPACE/NAME`, as an agent in API mode names the pod in the log.
    Pod(String),
}

impl Target {
    /// The bytes every line of the target holds: the address quoted (so `:4000` never
    /// matches `:40002`), or the pod's key and quoted name.
    fn needle(&self) -> String {
        match self {
            Target::Translated(address) => format!("\"{}\"", endpoint_text(*address)),
            Target::Pod(pod) => format!("\"pod\":\"{pod}\""),
        }
    }

    /// The target as the text report names it.
    fn words(&self) -> String {
        match self {
            Target::Translated(address) => endpoint_text(*address),
            Target::Pod(pod) => format!("pod {pod}"),
        }
    }
}

/// What to look for.
#[derive(Debug, Clone)]
pub struct Query {
    pub target: Target,
    /// Only flows of this protocol (`tcp`, `udp`, …), else any.
    pub proto: Option<String>,
    /// Only flows whose lifetime meets this window (inclusive), else every flow.
    pub window: Option<Window>,
}

/// One flow through the translated address and port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FoundFlow {
    pub proto: String,
    /// The pod's address and port.
    pub src: String,
    pub translated: String,
    pub dst: String,
    /// API mode: the pod (`namespace/name`), its uid and the node, as the log names them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The `new` line's time; `None` when the log holds no `new` (it began before the log).
    pub start: Option<String>,
    /// The `end` line's time; `None` while no end is known (still open, or lost).
    pub end: Option<String>,
    /// The end is the time of a later flow on the same reply tuple, not an `end` line.
    pub end_inferred: bool,
    #[serde(skip)]
    start_micros: Option<Micros>,
    #[serde(skip)]
    end_micros: Option<Micros>,
}

impl FoundFlow {
    /// Whether the flow's lifetime meets `[from, to]`: an unknown start is before any time,
    /// an unknown end after any time.
    fn meets(&self, window: Window) -> bool {
        self.start_micros.is_none_or(|start| start <= window.to)
            && self.end_micros.is_none_or(|end| end >= window.from)
    }
}

/// New connections of the pod the pod share refused, as one `refused` line counts them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FoundRefusals {
    pub proto: String,
    /// The pod's address.
    pub src: String,
    /// The destination, or `*` for several.
    pub dst: String,
    /// `rate` or `connections`.
    pub limit: String,
    pub refused: u64,
    /// The first and the last refusal the line counts.
    pub first: String,
    pub last: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip)]
    first_micros: Micros,
    #[serde(skip)]
    last_micros: Micros,
}

/// The answer to a query over the log's files.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The files read, oldest first.
    pub files: Vec<String>,
    /// The first and last record's times in the files read (what the log covers).
    pub log_start: Option<String>,
    pub log_end: Option<String>,
    pub flows: Vec<FoundFlow>,
    /// With `--pod`: its new connections the pod share refused (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<FoundRefusals>,
    /// Lines naming the address that could not be read (not JSON, a field missing, a bad
    /// time, longer than [`MAX_LINE`]), and lines too long to hold wherever they are.
    pub skipped_lines: u64,
    /// Older flows that answer too but are left out: at most [`MAX_FLOWS`] are kept.
    pub omitted_flows: u64,
    /// Older refused lines left out, as flows are (absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub omitted_refusals: u64,
    /// Flows taken as open before their end could be read: more than [`MAX_OPEN`] waited at
    /// once. Absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub unpaired_open_flows: u64,
    #[serde(skip)]
    pub first_skipped: Option<String>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// Why the log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WhoError {
    #[error("no SNAT log at {path} (nor {path}.1): is the agent run with --snat-log? (--log names another file)")]
    NoLog { path: String },
    #[error(
        "{path} is {kind}, not a log file: to read a stream, pipe it into `ipmasq who … --log -`"
    )]
    NotAFile { path: String, kind: &'static str },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// The files of the log at `path`, oldest first: `PATH.N` … `PATH.1`, then `PATH` (each that
/// exists; the numbering stops at the first gap).
pub fn log_files(path: &Path) -> Result<Vec<PathBuf>, WhoError> {
    if path == Path::new(STDIN) {
        return Ok(vec![path.to_path_buf()]);
    }
    let numbered = |n: usize| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    let mut files: Vec<PathBuf> = (1..=MAX_ROTATED)
        .map(numbered)
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    if path.exists() {
        files.push(path.to_path_buf());
    }
    if files.is_empty() {
        return Err(WhoError::NoLog {
            path: path.display().to_string(),
        });
    }
    for file in &files {
        refuse_unless_regular(file)?;
    }
    Ok(files)
}

/// A log file is a regular file (a symlink to one is followed): opening a FIFO would wait for
/// a writer, and a device may never end.
fn refuse_unless_regular(path: &Path) -> Result<(), WhoError> {
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::metadata(path)
        .map_err(|source| WhoError::Read {
            path: path.display().to_string(),
            source,
        })?
        .file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(WhoError::NotAFile {
        path: path.display().to_string(),
        kind: what,
    })
}

/// A reply tuple as the log names it: conntrack holds one flow per reply tuple: the
/// protocol, the translated address and the destination say which.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ReplyTuple {
    proto: String,
    translated: String,
    dst: String,
}

/// The flows pairing in progress: the open flow of each reply tuple, and the answers.
struct Pairing<'q> {
    query: &'q Query,
    /// The query's translated address as the log spells it (None: a pod's flows).
    translated: Option<String>,
    open: HashMap<ReplyTuple, FoundFlow>,
    /// At most this many in `open` (twice, amortised): [`MAX_OPEN`] but in tests.
    open_cap: usize,
    answer: Answer,
    /// The earliest and latest time of the records read (the log's span when its first or
    /// last line is unreadable).
    earliest: Option<(Micros, String)>,
    latest: Option<(Micros, String)>,
}

impl<'q> Pairing<'q> {
    fn new(query: &'q Query) -> Self {
        Pairing {
            query,
            translated: match &query.target {
                Target::Translated(address) => Some(endpoint_text(*address)),
                Target::Pod(_) => None,
            },
            open: HashMap::new(),
            open_cap: MAX_OPEN,
            answer: Answer::default(),
            earliest: None,
            latest: None,
        }
    }

    fn skip(&mut self, file: &Path, offset: u64, why: &str) {
        self.answer.skipped_lines += 1;
        if self.answer.first_skipped.is_none() {
            self.answer.first_skipped = Some(format!("{} at byte {offset}: {why}", file.display()));
        }
    }

    /// Keeps a finished flow if it answers the query.
    fn finish(&mut self, flow: FoundFlow) {
        if self.query.window.is_none_or(|window| flow.meets(window)) {
            self.answer.flows.push(flow);
            if self.answer.flows.len() >= 2 * MAX_FLOWS {
                // Keep the newest: the flows finished first go (amortised, at most twice the cap).
                self.answer.flows.drain(..MAX_FLOWS);
                self.answer.omitted_flows += MAX_FLOWS as u64;
            }
        }
    }

    /// One line that holds the needle.
    fn line(&mut self, file: &Path, offset: u64, line: &[u8]) {
        let record = match Record::read(line) {
            Ok(record) => record,
            Err(err) => return self.skip(file, offset, &format!("not a log record ({err})")),
        };
        if record.event == REFUSED {
            return self.refused(file, offset, &record);
        }
        let Some(translated) = record.translated.as_deref() else {
            return self.skip(file, offset, "a flow's line without translated");
        };
        let answers = match (&self.translated, &self.query.target) {
            (Some(asked), _) => translated == asked,
            (None, Target::Pod(pod)) => record.pod.as_deref() == Some(pod.as_str()),
            (None, Target::Translated(_)) => false,
        };
        if !answers {
            return; // the needle is in this line's src, dst or another key: another flow's
        }
        let Some(proto) = self.proto_asked(file, offset, &record) else {
            return;
        };
        let Some(micros) = time_of(&record.time) else {
            return self.skip(file, offset, "time is not RFC 3339");
        };
        if self.earliest.as_ref().is_none_or(|(t, _)| micros < *t) {
            self.earliest = Some((micros, record.time.to_string()));
        }
        if self.latest.as_ref().is_none_or(|(t, _)| micros > *t) {
            self.latest = Some((micros, record.time.to_string()));
        }
        let key = ReplyTuple {
            proto: proto.clone(),
            translated: translated.to_string(),
            dst: record.dst.to_string(),
        };
        let owned = |field: &Option<std::borrow::Cow<'_, str>>| field.as_deref().map(String::from);
        let flow = FoundFlow {
            proto,
            src: record.src.to_string(),
            translated: translated.to_string(),
            dst: record.dst.to_string(),
            pod: owned(&record.pod),
            uid: owned(&record.uid),
            node: owned(&record.node),
            start: None,
            end: None,
            end_inferred: false,
            start_micros: None,
            end_micros: None,
        };
        let time = record.time.to_string();
        match &*record.event {
            "new" => self.started(key, flow, time, micros),
            "end" => self.ended(key, flow, time, micros),
            other => self.skip(file, offset, &format!("unknown event {other:?}")),
        }
    }

    /// The record's protocol as the log names it, when it is the one asked for (None: another,
    /// or neither a name nor a number, then skipped and counted).
    fn proto_asked(&mut self, file: &Path, offset: u64, record: &Record<'_>) -> Option<String> {
        let proto = match &record.proto {
            serde_json::Value::String(name) => name.clone(),
            serde_json::Value::Number(number) => number.to_string(),
            _ => {
                self.skip(file, offset, "proto is neither a name nor a number");
                return None;
            }
        };
        self.query
            .proto
            .as_ref()
            .is_none_or(|p| *p == proto)
            .then_some(proto)
    }

    /// A `refused` line: kept when a pod is asked and it is the pod's, of the protocol asked,
    /// and within the window.
    fn refused(&mut self, file: &Path, offset: u64, record: &Record<'_>) {
        let Target::Pod(pod) = &self.query.target else {
            return; // no address is translated on a refused line
        };
        if record.pod.as_deref() != Some(pod.as_str()) {
            return;
        }
        let Some(proto) = self.proto_asked(file, offset, record) else {
            return;
        };
        let last = record.last.as_deref().unwrap_or(&record.time);
        let (Some(first_micros), Some(last_micros)) = (time_of(&record.time), time_of(last)) else {
            return self.skip(file, offset, "time or last is not RFC 3339");
        };
        let (Some(limit), Some(refused)) = (record.limit.as_deref(), record.refused) else {
            return self.skip(file, offset, "a refused line without its limit or count");
        };
        let window = self.query.window.unwrap_or(Window {
            from: Micros::MIN,
            to: Micros::MAX,
        });
        if first_micros > window.to || last_micros < window.from {
            return;
        }
        self.answer.refusals.push(FoundRefusals {
            proto,
            src: record.src.to_string(),
            dst: record.dst.to_string(),
            limit: limit.to_string(),
            refused,
            first: record.time.to_string(),
            last: last.to_string(),
            node: record.node.as_deref().map(String::from),
            first_micros,
            last_micros,
        });
        if self.answer.refusals.len() >= 2 * MAX_FLOWS {
            self.answer.refusals.drain(..MAX_FLOWS);
            self.answer.omitted_refusals += MAX_FLOWS as u64;
        }
    }

    /// A `new` line's flow, which waits for its end.
    fn started(&mut self, key: ReplyTuple, mut flow: FoundFlow, time: String, micros: Micros) {
        if let Some(mut earlier) = self.open.remove(&key) {
            // conntrack holds one flow per reply tuple: the earlier one was over.
            earlier.end = Some(time.clone());
            earlier.end_micros = Some(micros);
            earlier.end_inferred = true;
            self.finish(earlier);
        }
        flow.start = Some(time);
        flow.start_micros = Some(micros);
        self.keep_open(key, flow);
    }

    /// An `end` line's flow, joined to its `new` when that is the open flow of its reply
    /// tuple (another pod's stays open: its own end may still come).
    fn ended(&mut self, key: ReplyTuple, mut flow: FoundFlow, time: String, micros: Micros) {
        let started = match self.open.get(&key) {
            Some(open) if open.src == flow.src => self.open.remove(&key),
            _ => None,
        };
        if let Some(open) = started {
            // The pod its `new` named, if it did: resolved when the flow began.
            if open.pod.is_some() {
                (flow.pod, flow.uid, flow.node) = (open.pod, open.uid, open.node);
            }
            flow.start = open.start;
            flow.start_micros = open.start_micros;
        }
        flow.end = Some(time);
        flow.end_micros = Some(micros);
        self.finish(flow);
    }

    /// Waits for `flow`'s end; past twice the cap, the longest-waiting half is taken as open
    /// (amortised: one sort per cap's worth of flows).
    fn keep_open(&mut self, key: ReplyTuple, flow: FoundFlow) {
        self.open.insert(key, flow);
        if self.open.len() < 2 * self.open_cap {
            return;
        }
        let mut waiting: Vec<(ReplyTuple, FoundFlow)> = self.open.drain().collect();
        waiting.sort_by_key(|(_, flow)| flow.start_micros);
        let newest = waiting.split_off(waiting.len() - self.open_cap);
        self.answer.unpaired_open_flows += waiting.len() as u64;
        for (_, flow) in waiting {
            self.finish(flow);
        }
        self.open.extend(newest);
    }

    fn done(mut self) -> Answer {
        let open: Vec<FoundFlow> = self.open.drain().map(|(_, flow)| flow).collect();
        for flow in open {
            self.finish(flow);
        }
        let mut answer = self.answer;
        answer.flows.sort_by(|a, b| {
            a.start_micros
                .cmp(&b.start_micros)
                .then(a.end_micros.is_none().cmp(&b.end_micros.is_none()))
                .then(a.end_micros.cmp(&b.end_micros))
                .then(a.src.cmp(&b.src))
        });
        if answer.flows.len() > MAX_FLOWS {
            let older = answer.flows.len() - MAX_FLOWS;
            answer.flows.drain(..older);
            answer.omitted_flows += older as u64;
        }
        answer
            .refusals
            .sort_by_key(|r| (r.first_micros, r.last_micros));
        if answer.refusals.len() > MAX_FLOWS {
            let older = answer.refusals.len() - MAX_FLOWS;
            answer.refusals.drain(..older);
            answer.omitted_refusals += older as u64;
        }
        answer
    }
}

/// A file's first and last complete line, if any.
type Ends = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Streams `reader` in chunks, calling `on_match` with each complete line (and its offset)
/// holding `finder`'s needle, and `on_overlong` for each line longer than [`MAX_LINE`] that
/// holds it or that is too long to keep between two reads (such a line is dropped unread).
/// Returns the first and the last complete line (for the log's time span; each at most
/// [`MAX_LINE`] bytes). Memory: one chunk plus one line, whatever the input.
fn scan(
    reader: &mut impl Read,
    finder: &memchr::memmem::Finder,
    mut on_match: impl FnMut(u64, &[u8]),
    mut on_overlong: impl FnMut(u64),
) -> std::io::Result<Ends> {
    let mut buffer = vec![0u8; CHUNK + MAX_LINE];
    let mut kept = 0usize; // bytes of an unfinished line at the buffer's start
    let mut kept_offset = 0u64; // its offset in the input
    let mut skipping = false; // inside an overlong line, until its newline
    let mut first: Option<Vec<u8>> = None;
    let mut last: Option<Vec<u8>> = None;
    loop {
        let read = match reader.read(&mut buffer[kept..]) {
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        let filled = kept + read;
        let at_end = read == 0;
        let mut start = 0usize;
        if skipping {
            match memchr::memchr(b'\n', &buffer[..filled]) {
                Some(newline) => {
                    start = newline + 1;
                    skipping = false;
                }
                None if at_end => break,
                None => {
                    kept_offset += filled as u64;
                    kept = 0;
                    continue;
                }
            }
        }
        // The complete lines: up to the last newline (or everything, at the end).
        let complete_end = match memchr::memrchr(b'\n', &buffer[start..filled]) {
            Some(newline) => start + newline + 1,
            None if at_end => filled,
            None => start,
        };
        let region = &buffer[start..complete_end];
        let region_offset = kept_offset + start as u64;
        if !region.is_empty() {
            if first.is_none() {
                let end = memchr::memchr(b'\n', region).unwrap_or(region.len());
                first = Some(region[..end.min(MAX_LINE)].to_vec());
            }
            let body = region.strip_suffix(b"\n").unwrap_or(region);
            let from = memchr::memrchr(b'\n', body).map_or(0, |n| n + 1);
            if !body[from..].is_empty() {
                last = Some(body[from..].to_vec());
            }
        }
        let mut at = 0usize;
        while let Some(hit) = finder.find(&region[at..]) {
            let hit = at + hit;
            let line_start = memchr::memrchr(b'\n', &region[..hit]).map_or(0, |n| n + 1);
            let line_end = memchr::memchr(b'\n', &region[hit..]).map_or(region.len(), |n| hit + n);
            let line = &region[line_start..line_end];
            if line.len() > MAX_LINE {
                on_overlong(region_offset + line_start as u64);
            } else {
                on_match(region_offset + line_start as u64, line);
            }
            at = line_end.saturating_add(1).min(region.len());
            if at >= region.len() {
                break;
            }
        }
        if at_end {
            break;
        }
        // Keep the unfinished line for the next read, unless it is already too long.
        let rest = filled - complete_end;
        let rest_offset = kept_offset + complete_end as u64;
        if rest > MAX_LINE {
            on_overlong(rest_offset);
            skipping = true;
            kept = 0;
            kept_offset = rest_offset + rest as u64;
        } else {
            buffer.copy_within(complete_end..filled, 0);
            kept = rest;
            kept_offset = rest_offset;
        }
    }
    Ok((first, last))
}

/// The answer to `query` over `files` (oldest first).
pub fn search(files: &[PathBuf], query: &Query) -> Result<Answer, WhoError> {
    let needle = query.target.needle();
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut pairing = Pairing::new(query);
    let mut log_start: Option<String> = None;
    let mut log_end: Option<String> = None;
    let record_time = |line: &[u8]| {
        #[derive(serde::Deserialize)]
        struct TimeOnly {
            time: String,
        }
        serde_json::from_slice::<TimeOnly>(line)
            .ok()
            .map(|t| t.time)
            .filter(|t| time_of(t).is_some())
    };
    for path in files {
        let read_error = |source| WhoError::Read {
            path: path.display().to_string(),
            source,
        };
        let mut input: Box<dyn Read> = if path == Path::new(STDIN) {
            Box::new(std::io::stdin().lock())
        } else {
            Box::new(std::fs::File::open(path).map_err(read_error)?)
        };
        let mut overlong = Vec::new();
        let (first, last) = scan(
            &mut input,
            &finder,
            |offset, line| pairing.line(path, offset, line),
            |offset| overlong.push(offset),
        )
        .map_err(read_error)?;
        for offset in overlong {
            pairing.skip(
                path,
                offset,
                &format!("a line longer than {MAX_LINE} bytes"),
            );
        }
        if log_start.is_none() {
            log_start = first.as_deref().and_then(record_time);
        }
        if let Some(time) = last.as_deref().and_then(record_time) {
            log_end = Some(time);
        }
    }
    let earliest = pairing.earliest.take().map(|(_, time)| time);
    let latest = pairing.latest.take().map(|(_, time)| time);
    let mut answer = pairing.done();
    answer.files = files.iter().map(|p| p.display().to_string()).collect();
    let by_time = |time: &Option<String>| time.as_deref().and_then(time_of);
    answer.log_start = [log_start, earliest]
        .into_iter()
        .flatten()
        .min_by_key(|t| time_of(t));
    answer.log_end = [log_end, latest].into_iter().max_by_key(by_time).flatten();
    Ok(answer)
}

/// The JSON and YAML document.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    /// The translated address asked for (null with --pod).
    address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a str>,
    at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<String>,
    tolerance: String,
    proto: Option<&'a str>,
    #[serde(flatten)]
    answer: &'a Answer,
}

/// The time asked about, for the heading.
fn when_words(args: &WhoArgs) -> String {
    match (args.at, args.since, args.until) {
        (Some(at), _, _) => format!(" at {} (± {})", show_time(at), args.tolerance),
        (None, Some(since), Some(until)) => {
            format!(" from {} to {}", show_time(since), show_time(until))
        }
        (None, Some(since), None) => format!(" since {}", show_time(since)),
        (None, None, Some(until)) => format!(" until {}", show_time(until)),
        (None, None, None) => String::new(),
    }
}

/// The table's optional columns: the pod when an address is asked and the log names pods,
/// the translated address when a pod is asked.
struct Columns {
    pod: bool,
    translated: bool,
}

impl Columns {
    fn for_answer(target: &Target, answer: &Answer) -> Columns {
        let by_pod = matches!(target, Target::Pod(_));
        Columns {
            pod: !by_pod && answer.flows.iter().any(|f| f.pod.is_some()),
            translated: by_pod,
        }
    }

    fn header(&self) -> Vec<String> {
        let mut header = vec!["PROTO", "POD SOURCE"];
        if self.pod {
            header.push("POD");
        }
        if self.translated {
            header.push("TRANSLATED");
        }
        header.extend(["DESTINATION", "FROM", "UNTIL"]);
        header.into_iter().map(String::from).collect()
    }

    fn row(&self, flow: &FoundFlow, start: String, end: String) -> Vec<String> {
        let mut row = vec![flow.proto.clone(), flow.src.clone()];
        if self.pod {
            row.push(flow.pod.clone().unwrap_or_else(|| "-".into()));
        }
        if self.translated {
            row.push(flow.translated.clone());
        }
        row.extend([flow.dst.clone(), start, end]);
        row
    }
}

fn to_text(target: &Target, args: &WhoArgs, answer: &Answer, style: &Styler) -> String {
    let mut out = flows_text(target, args, answer, style);
    out.push_str(&refusals_text(answer, style));
    out
}

/// The pod's refused connections, a row per `refused` line (nothing when there are none).
fn refusals_text(answer: &Answer, style: &Styler) -> String {
    if answer.refusals.is_empty() {
        return String::new();
    }
    let total: u64 = answer.refusals.iter().map(|r| r.refused).sum();
    let mut out = style.bold(&format!(
        "refused by the pod share: {} new connections",
        total
    ));
    out.push('\n');
    let mut records = vec![[
        "PROTO",
        "POD ADDRESS",
        "DESTINATION",
        "LIMIT",
        "REFUSED",
        "FROM",
        "UNTIL",
    ]
    .map(String::from)
    .to_vec()];
    for r in &answer.refusals {
        records.push(vec![
            r.proto.clone(),
            r.src.clone(),
            r.dst.clone(),
            r.limit.clone(),
            r.refused.to_string(),
            r.first.clone(),
            r.last.clone(),
        ]);
    }
    out.push_str(&crate::cmd::fleet::plain_table(records));
    if answer.omitted_refusals > 0 {
        out.push_str(&style.warning(&format!(
            "… and {} older (the newest {MAX_FLOWS} are shown; narrow with --since or --proto)",
            crate::output::plural(answer.omitted_refusals as usize, "refused line")
        )));
        out.push('\n');
    }
    out
}

/// The flows found, as a table (or what the log covers when there are none).
fn flows_text(target: &Target, args: &WhoArgs, answer: &Answer, style: &Styler) -> String {
    let address = target.words();
    let when = when_words(args);
    let proto = args
        .proto
        .as_deref()
        .map(|p| format!(" {p}"))
        .unwrap_or_default();
    let mut out = String::new();
    if answer.flows.is_empty() {
        out.push_str(&style.warning(&format!(
            "no{proto} flow through {address}{when} in the log"
        )));
        out.push('\n');
        let span = match (&answer.log_start, &answer.log_end) {
            (Some(start), Some(end)) => format!("it covers {start} to {end}"),
            _ => "it holds no record".to_string(),
        };
        out.push_str(&format!(
            "{span}, in {}: {}\n",
            crate::output::plural(answer.files.len(), "file"),
            answer.files.join(", ")
        ));
        return out;
    }
    out.push_str(&style.bold(&format!(
        "{address}{when}: {}",
        crate::output::plural(answer.flows.len(), "flow")
    )));
    out.push('\n');
    let columns = Columns::for_answer(target, answer);
    let mut records = vec![columns.header()];
    for flow in &answer.flows {
        let start = flow
            .start
            .clone()
            .unwrap_or_else(|| "(before the log)".into());
        let end = match (&flow.end, flow.end_inferred) {
            (Some(end), false) => end.clone(),
            (Some(end), true) => format!("{end} at the latest (port reused)"),
            (None, _) => "(no end logged: open, or lost)".into(),
        };
        records.push(columns.row(flow, start, end));
    }
    out.push_str(&crate::cmd::fleet::plain_table(records));
    if answer.omitted_flows > 0 {
        out.push_str(&style.warning(&format!(
            "… and {} older (the newest {MAX_FLOWS} are shown; narrow with --at or --proto)",
            crate::output::plural(answer.omitted_flows as usize, "flow")
        )));
        out.push('\n');
    }
    if answer.unpaired_open_flows > 0 {
        out.push_str(&style.warning(&format!(
            "{} taken as open before their end was read (more than {MAX_OPEN} waited at once): an end logged later for one is shown apart, its start unknown",
            crate::output::plural(answer.unpaired_open_flows as usize, "flow")
        )));
        out.push('\n');
    }
    out
}

/// Whose flows the arguments ask for.
fn target_of(args: &WhoArgs) -> Option<Target> {
    match (&args.address, &args.pod) {
        (Some(address), _) => Some(Target::Translated(*address)),
        (None, Some(pod)) => Some(Target::Pod(pod.clone())),
        (None, None) => None,
    }
}

/// The time the arguments narrow to: `--at` give or take `--tolerance`, or from `--since` to
/// `--until` (either end open); None: every flow.
fn window_of(args: &WhoArgs) -> Option<Window> {
    let tolerance = args.tolerance.0 / 1000; // ns to µs
    match (args.at, args.since, args.until) {
        (Some(at), _, _) => Some(Window::around(at, tolerance)),
        (None, None, None) => None,
        (None, since, until) => Some(Window {
            from: since.unwrap_or(Micros::MIN),
            to: until.unwrap_or(Micros::MAX),
        }),
    }
}

/// Runs `ipmasq who`.
pub fn run(args: &WhoArgs) -> Exit {
    let files = match log_files(&args.log) {
        Ok(files) => files,
        Err(err) => {
            eprintln!("ipmasq who: {}", printable(&err.to_string()));
            return Exit::Usage;
        }
    };
    let Some(target) = target_of(args) else {
        eprintln!("ipmasq who: give ADDRESS:PORT or --pod NAMESPACE/NAME");
        return Exit::Usage;
    };
    if let (Some(since), Some(until)) = (args.since, args.until) {
        if since > until {
            eprintln!(
                "ipmasq who: --since {} is after --until {}: no flow could meet that span",
                show_time(since),
                show_time(until)
            );
            return Exit::Usage;
        }
    }
    let query = Query {
        target,
        proto: args.proto.clone(),
        window: window_of(args),
    };
    let answer = match search(&files, &query) {
        Ok(answer) => answer,
        Err(err) => {
            eprintln!("ipmasq who: {}", printable(&err.to_string()));
            return Exit::Usage;
        }
    };
    if let Some(first) = &answer.first_skipped {
        eprintln!(
            "ipmasq who: skipped {} (first: {})",
            crate::output::plural(answer.skipped_lines as usize, "unreadable line"),
            printable(first)
        );
    }
    let at = args.at.map(show_time);
    let report = || Report {
        address: args.address.map(endpoint_text),
        pod: args.pod.as_deref(),
        at: at.clone(),
        since: args.since.map(show_time),
        until: args.until.map(show_time),
        tolerance: args.tolerance.to_string(),
        proto: args.proto.as_deref(),
        answer: &answer,
    };
    let text = match args.output {
        OutputFormat::Json => crate::output::to_json(&report()),
        OutputFormat::Yaml => crate::output::to_yaml(&report()),
        OutputFormat::Text => to_text(
            &query.target,
            args,
            &answer,
            &Styler::for_stdout(args.color),
        ),
    };
    {
        use std::io::Write;
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }
    if answer.flows.is_empty() && answer.refusals.is_empty() {
        Exit::Failure
    } else {
        Exit::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snat::line::parse_time;

    /// A directory of its own under the temp dir, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let path =
                std::env::temp_dir().join(format!("ipmasq-who-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }
        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
        fn log(&self) -> PathBuf {
            self.0.join("snat.log")
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A line as the agent writes it (`snat::line::render`), at `time` (UTC) on the day all
    /// these tests' lines share.
    fn line(
        time: &str,
        event: &str,
        proto: &str,
        src: &str,
        translated: &str,
        dst: &str,
    ) -> String {
        use crate::netlink::conntrack::{Event, EventKind, Flow};
        let at = parse_time(&format!("2026-11-26T{time}Z")).unwrap();
        let kind = match event {
            "new" => EventKind::New,
            "end" => EventKind::End,
            other => panic!("the agent writes no {other:?} event"),
        };
        let [src, translated, dst]: [SocketAddr; 3] =
            [src, translated, dst].map(|text| text.parse().unwrap());
        let flow = Flow {
            family: if src.is_ipv4() {
                crate::plan::Family::V4
            } else {
                crate::plan::Family::V6
            },
            protocol: match proto {
                "tcp" => 6,
                "udp" => 17,
                other => panic!("no test speaks {other}"),
            },
            source: src.ip(),
            destination: dst.ip(),
            source_port: Some(src.port()),
            destination_port: Some(dst.port()),
            reply_source: dst.ip(),
            reply_destination: translated.ip(),
            reply_destination_port: Some(translated.port()),
            icmp_id: None,
            reply_icmp_id: None,
            id: 1,
        };
        let mut out = String::new();
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_micros(at as u64);
        crate::snat::line::render(
            &mut out,
            time,
            &Event {
                kind,
                counters: None,
                flow,
            },
            None,
        );
        out
    }

    const NODE: &str = "203.0.113.1:40002";

    /// `who`'s arguments for a text report: an address or a pod, and `--since`.
    fn text_args(address: Option<SocketAddr>, pod: Option<&str>, since: Option<Micros>) -> WhoArgs {
        WhoArgs {
            address,
            pod: pod.map(String::from),
            at: None,
            since,
            until: None,
            tolerance: crate::config::GoDuration(1_000_000_000),
            proto: None,
            log: PathBuf::from("snat.log"),
            output: OutputFormat::Text,
            color: crate::output::ColorChoice::Never,
        }
    }

    fn query(at: Option<&str>, tolerance_micros: i64) -> Query {
        Query {
            target: Target::Translated(NODE.parse().unwrap()),
            proto: None,
            window: at.map(|at| Window::around(parse_time(at).unwrap(), tolerance_micros)),
        }
    }

    fn sources(answer: &Answer) -> Vec<&str> {
        answer.flows.iter().map(|f| f.src.as_str()).collect()
    }

    fn ask(dir: &Dir, query: &Query) -> Answer {
        search(&log_files(&dir.log()).unwrap(), query).unwrap()
    }

    #[test]
    fn a_flow_answers_for_the_times_it_lived_and_not_outside() {
        let dir = Dir::new("window");
        dir.write(
            "snat.log",
            &[
                line(
                    "12:03:01.000000",
                    "new",
                    "tcp",
                    "192.168.1.5:1",
                    NODE,
                    "198.51.100.9:443",
                ),
                line(
                    "12:03:09.000000",
                    "end",
                    "tcp",
                    "192.168.1.5:1",
                    NODE,
                    "198.51.100.9:443",
                ),
            ]
            .concat(),
        );
        for (at, found) in [
            ("2026-11-26T12:03:01Z", true),
            ("2026-11-26T12:03:05.5Z", true),
            ("2026-11-26T12:03:09Z", true),
            ("2026-11-26T12:03:00.999999Z", false),
            ("2026-11-26T12:03:09.000001Z", false),
            ("2026-11-26T13:03:05+01:00", true),
        ] {
            let answer = ask(&dir, &query(Some(at), 0));
            assert_eq!(answer.flows.len(), usize::from(found), "{at}");
        }
        let tolerant = ask(&dir, &query(Some("2026-11-26T12:03:10Z"), 1_000_000));
        assert_eq!(
            sources(&tolerant),
            ["192.168.1.5:1"],
            "within the tolerance"
        );
        let answer = ask(&dir, &query(Some("2026-11-26T12:03:05Z"), 0));
        assert_eq!(
            answer.flows[0].start.as_deref(),
            Some("2026-11-26T12:03:01.000000Z")
        );
        assert_eq!(
            answer.flows[0].end.as_deref(),
            Some("2026-11-26T12:03:09.000000Z")
        );
        assert!(!answer.flows[0].end_inferred);
    }

    #[test]
    fn rotated_files_are_read_oldest_first_and_pair_across_files() {
        let dir = Dir::new("rotation");
        // The flow begins in the oldest file and ends in the live one; .1 is in between.
        dir.write(
            "snat.log.2",
            &line(
                "12:00:00.000000",
                "new",
                "udp",
                "192.168.1.7:53",
                NODE,
                "198.51.100.1:53",
            ),
        );
        dir.write(
            "snat.log.1",
            &line(
                "12:05:00.000000",
                "new",
                "tcp",
                "192.168.1.8:9",
                "203.0.113.1:1",
                "198.51.100.1:80",
            ),
        );
        dir.write(
            "snat.log",
            &line(
                "12:10:00.000000",
                "end",
                "udp",
                "192.168.1.7:53",
                NODE,
                "198.51.100.1:53",
            ),
        );
        let files = log_files(&dir.log()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["snat.log.2", "snat.log.1", "snat.log"]);
        let answer = ask(&dir, &query(Some("2026-11-26T12:07:00Z"), 0));
        assert_eq!(sources(&answer), ["192.168.1.7:53"]);
        assert_eq!(
            answer.flows[0].start.as_deref(),
            Some("2026-11-26T12:00:00.000000Z")
        );
        assert_eq!(
            answer.log_start.as_deref(),
            Some("2026-11-26T12:00:00.000000Z")
        );
        assert_eq!(
            answer.log_end.as_deref(),
            Some("2026-11-26T12:10:00.000000Z")
        );
    }

    #[test]
    fn only_rotated_files_still_answer_and_no_file_at_all_is_an_error() {
        let dir = Dir::new("rotated-only");
        assert!(matches!(log_files(&dir.log()), Err(WhoError::NoLog { .. })));
        dir.write(
            "snat.log.1",
            &line(
                "12:00:00.000000",
                "new",
                "tcp",
                "192.168.1.5:1",
                NODE,
                "198.51.100.9:443",
            ),
        );
        assert_eq!(sources(&ask(&dir, &query(None, 0))), ["192.168.1.5:1"]);
    }

    #[test]
    fn a_flow_without_new_began_before_the_log() {
        let dir = Dir::new("no-new");
        dir.write(
            "snat.log",
            &line(
                "12:03:09.000000",
                "end",
                "tcp",
                "192.168.1.5:1",
                NODE,
                "198.51.100.9:443",
            ),
        );
        let answer = ask(&dir, &query(Some("2026-11-20T00:00:00Z"), 0));
        assert_eq!(
            sources(&answer),
            ["192.168.1.5:1"],
            "alive at any time before its end"
        );
        assert_eq!(answer.flows[0].start, None);
        assert!(ask(&dir, &query(Some("2026-11-26T12:03:10Z"), 0))
            .flows
            .is_empty());
    }

    #[test]
    fn a_flow_without_end_is_open_until_its_reply_tuple_is_taken_again() {
        let dir = Dir::new("no-end");
        dir.write(
            "snat.log",
            &[
                // Its end was lost (an agent restart); the port to the same destination is reused.
                line(
                    "12:00:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.5:1",
                    NODE,
                    "198.51.100.9:443",
                ),
                line(
                    "12:30:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.6:2",
                    NODE,
                    "198.51.100.9:443",
                ),
                // Another destination: its own reply tuple, no effect on the others.
                line(
                    "12:10:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.7:3",
                    NODE,
                    "198.51.100.10:443",
                ),
            ]
            .concat(),
        );
        let at = |time: &str| ask(&dir, &query(Some(time), 0));
        assert_eq!(
            sources(&at("2026-11-26T12:20:00Z")),
            ["192.168.1.5:1", "192.168.1.7:3"]
        );
        let reused = &at("2026-11-26T12:20:00Z").flows[0];
        assert_eq!(reused.end.as_deref(), Some("2026-11-26T12:30:00.000000Z"));
        assert!(reused.end_inferred);
        assert_eq!(
            sources(&at("2026-11-26T13:00:00Z")),
            ["192.168.1.7:3", "192.168.1.6:2"]
        );
        assert_eq!(at("2026-11-26T13:00:00Z").flows[1].end, None, "still open");
    }

    #[test]
    fn the_end_of_another_pods_flow_leaves_the_open_one_open() {
        let dir = Dir::new("other-end");
        dir.write(
            "snat.log",
            &[
                line(
                    "12:00:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.5:1",
                    NODE,
                    "198.51.100.9:443",
                ),
                // An end whose new was lost, of another pod, on the same reply tuple.
                line(
                    "12:05:00.000000",
                    "end",
                    "tcp",
                    "192.168.1.6:2",
                    NODE,
                    "198.51.100.9:443",
                ),
            ]
            .concat(),
        );
        let answer = ask(&dir, &query(Some("2026-11-26T12:10:00Z"), 0));
        assert_eq!(sources(&answer), ["192.168.1.5:1"]);
        assert_eq!(answer.flows[0].end, None);
    }

    #[test]
    fn ipv6_addresses_are_matched_as_the_log_writes_them() {
        let dir = Dir::new("ipv6");
        let node = "[2001:db8::1]:40002";
        dir.write(
            "snat.log",
            &[
                line(
                    "12:00:00.000000",
                    "new",
                    "udp",
                    "[fd00::5]:5353",
                    node,
                    "[2001:db8:1::9]:53",
                ),
                line(
                    "12:00:01.000000",
                    "end",
                    "udp",
                    "[fd00::5]:5353",
                    node,
                    "[2001:db8:1::9]:53",
                ),
            ]
            .concat(),
        );
        let query = Query {
            target: Target::Translated("[2001:0db8:0:0::1]:40002".parse().unwrap()),
            proto: Some("udp".into()),
            window: None,
        };
        let answer = ask(&dir, &query);
        assert_eq!(sources(&answer), ["[fd00::5]:5353"]);
        assert_eq!(answer.flows[0].translated, node);
        let tcp = Query {
            proto: Some("tcp".into()),
            ..query
        };
        assert!(ask(&dir, &tcp).flows.is_empty(), "--proto filters");
    }

    #[test]
    fn a_longer_port_or_the_address_as_a_destination_is_no_match() {
        let dir = Dir::new("near-misses");
        dir.write(
            "snat.log",
            &[
                // A port longer than any (no agent writes it): the needle's text alone is tried.
                line(
                    "12:00:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.5:1",
                    NODE,
                    "198.51.100.9:443",
                )
                .replace(&format!("\"{NODE}\""), "\"203.0.113.1:400021\""),
                line(
                    "12:00:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.5:1",
                    "203.0.113.1:4000",
                    "198.51.100.9:443",
                ),
                line(
                    "12:00:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.5:1",
                    "203.0.113.2:5",
                    NODE,
                ),
            ]
            .concat(),
        );
        let answer = ask(&dir, &query(None, 0));
        assert!(answer.flows.is_empty(), "{:?}", answer.flows);
        assert_eq!(answer.skipped_lines, 0);
    }

    #[test]
    fn malformed_lines_are_counted_and_skipped_and_the_rest_still_answers() {
        let dir = Dir::new("malformed");
        dir.write(
            "snat.log",
            &[
                format!("not json at all \"{NODE}\"\n"),
                format!("{{\"time\":\"yesterday\",\"event\":\"new\",\"proto\":\"tcp\",\"src\":\"a\",\"translated\":\"{NODE}\",\"dst\":\"b\"}}\n"),
                format!("{{\"time\":\"2026-11-26T12:00:00Z\",\"event\":\"new\",\"translated\":\"{NODE}\"}}\n"),
                line("12:00:00.000000", "new", "tcp", "192.168.1.5:1", NODE, "198.51.100.9:443")
                    .replace("\"new\"", "\"begin\""),
                "\u{0}\u{ff}garbage without the address\n".into(),
                line("12:00:00.000000", "new", "tcp", "192.168.1.5:1", NODE, "198.51.100.9:443"),
                // A truncated last line (the writer was cut mid-line).
                format!("{{\"time\":\"2026-11-26T12:00:01Z\",\"event\":\"end\",\"translated\":\"{NODE}\""),
            ]
            .concat(),
        );
        let answer = ask(&dir, &query(None, 0));
        assert_eq!(sources(&answer), ["192.168.1.5:1"]);
        assert_eq!(answer.skipped_lines, 5);
        assert!(answer
            .first_skipped
            .as_deref()
            .unwrap()
            .contains("at byte 0"));
    }

    #[test]
    fn numbered_protocols_and_unknown_keys_are_read() {
        let dir = Dir::new("numbers");
        dir.write(
            "snat.log",
            &format!("{{\"time\":\"2026-11-26T12:00:00.000000Z\",\"event\":\"end\",\"proto\":132,\"src\":\"192.168.1.5:1\",\"translated\":\"{NODE}\",\"dst\":\"198.51.100.9:9\",\"packets\":4,\"bytes\":400,\"future\":{{\"x\":1}}}}\n"),
        );
        let answer = ask(&dir, &query(None, 0));
        assert_eq!(answer.flows[0].proto, "132");
    }

    #[test]
    fn the_newest_flows_are_kept_when_there_are_too_many() {
        let dir = Dir::new("many");
        let text: String = (0..MAX_FLOWS * 3 + 7)
            .map(|i| {
                let time = format!(
                    "12:{:02}:{:02}.{:06}",
                    i / 60_000 % 60,
                    i / 1000 % 60,
                    i % 1000
                );
                line(
                    &time,
                    "end",
                    "udp",
                    &format!("192.168.1.5:{i}"),
                    NODE,
                    "198.51.100.9:53",
                )
            })
            .collect();
        dir.write("snat.log", &text);
        let answer = ask(&dir, &query(None, 0));
        assert_eq!(answer.flows.len(), MAX_FLOWS);
        assert_eq!(answer.omitted_flows, (MAX_FLOWS * 2 + 7) as u64);
        let newest = format!("192.168.1.5:{}", MAX_FLOWS * 3 + 6);
        assert_eq!(
            answer.flows.last().map(|f| f.src.as_str()),
            Some(newest.as_str())
        );
    }

    #[test]
    fn huge_lines_are_skipped_without_being_held() {
        let dir = Dir::new("huge");
        let huge_with = format!(
            "{{\"time\":\"{}\",\"translated\":\"{NODE}\"}}\n",
            "x".repeat(MAX_LINE * 3)
        );
        let huge_without = format!("{}\n", "y".repeat(CHUNK * 3));
        dir.write(
            "snat.log",
            &[
                huge_with,
                huge_without,
                line(
                    "12:00:00.000000",
                    "new",
                    "tcp",
                    "192.168.1.5:1",
                    NODE,
                    "198.51.100.9:443",
                ),
            ]
            .concat(),
        );
        let answer = ask(&dir, &query(None, 0));
        assert_eq!(sources(&answer), ["192.168.1.5:1"]);
        assert_eq!(answer.skipped_lines, 2);
    }

    /// Reads of every size (a pipe, a short read) give the same lines as one big read.
    #[test]
    fn lines_across_read_boundaries_are_whole() {
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.1.min(out.len()).min(self.0.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let text: String = (0..500)
            .map(|i| {
                line(
                    "12:00:00.000000",
                    "new",
                    "tcp",
                    &format!("192.168.1.5:{i}"),
                    NODE,
                    &format!("198.51.100.9:{i}"),
                )
            })
            .collect();
        let finder = memchr::memmem::Finder::new(b"\"203.0.113.1:40002\"");
        for step in [1, 7, 100, 4096, CHUNK] {
            let mut seen = Vec::new();
            let (first, last) = scan(
                &mut Trickle(text.as_bytes(), step),
                &finder,
                |offset, line| seen.push((offset, line.to_vec())),
                |_| panic!("no line is long"),
            )
            .unwrap();
            assert_eq!(seen.len(), 500, "step {step}");
            for (offset, line) in &seen {
                let offset = *offset as usize;
                assert_eq!(&text.as_bytes()[offset..offset + line.len()], &line[..]);
                assert_eq!(line.last(), Some(&b'}'));
            }
            assert_eq!(first.unwrap(), seen[0].1);
            assert_eq!(last.unwrap(), seen[499].1);
        }
    }

    #[test]
    fn flows_that_never_end_wait_for_it_up_to_the_cap_and_are_then_taken_as_open() {
        let q = query(None, 0);
        let mut pairing = Pairing::new(&q);
        pairing.open_cap = 4;
        let file = Path::new("snat.log");
        let dst = |i: usize| format!("198.51.100.{}:443", 1 + i);
        let mut most_waiting = 0;
        for i in 0..20 {
            let at = format!("12:00:{i:02}.000000");
            let text = line(
                &at,
                "new",
                "tcp",
                &format!("192.168.1.5:{}", 1000 + i),
                NODE,
                &dst(i),
            );
            pairing.line(file, 0, text.trim_end().as_bytes());
            most_waiting = most_waiting.max(pairing.open.len());
        }
        assert!(most_waiting < 2 * 4, "{most_waiting} waited at once");
        // The end of the oldest flow (taken as open long ago), and of the newest (still waiting).
        for i in [0, 19] {
            let text = line(
                "12:01:00.000000",
                "end",
                "tcp",
                &format!("192.168.1.5:{}", 1000 + i),
                NODE,
                &dst(i),
            );
            pairing.line(file, 0, text.trim_end().as_bytes());
        }
        let answer = pairing.done();
        assert_eq!(
            answer.unpaired_open_flows, 16,
            "taken as open: 4 twice, then 8"
        );
        let of = |i: usize| -> Vec<&FoundFlow> {
            answer.flows.iter().filter(|f| f.dst == dst(i)).collect()
        };
        let oldest = of(0);
        assert_eq!(oldest.len(), 2, "{oldest:?}");
        assert!(oldest.iter().any(|f| f.start.is_some() && f.end.is_none()));
        assert!(oldest.iter().any(|f| f.start.is_none() && f.end.is_some()));
        let newest = of(19);
        assert_eq!(newest.len(), 1, "{newest:?}");
        assert!(newest[0].start.is_some() && newest[0].end.is_some());
        let args = text_args(Some(NODE.parse().unwrap()), None, None);
        let target = Target::Translated(NODE.parse().unwrap());
        let text = to_text(&target, &args, &answer, &Styler::plain());
        assert!(
            text.contains("16 flows taken as open before their end was read"),
            "{text}"
        );
    }

    /// An API-mode log: one address held by pod a, then reused by pod b a second later. By
    /// address, each flow names its own pod; by pod, each pod's flows only, on any translated
    /// address, and a pod whose name is the other's prefix is not the other.
    #[test]
    fn pods_are_named_by_address_and_found_by_name() {
        let dir = Dir::new("pods");
        let line = |time: &str, event: &str, translated: &str, pod: &str| {
            format!(
                "{{\"time\":\"2026-11-26T12:00:{time}Z\",\"event\":\"{event}\",\"proto\":\"tcp\",\"src\":\"192.168.1.5:5000\",\"translated\":\"{translated}\",\"dst\":\"198.51.100.9:443\",\"pod\":\"default/{pod}\",\"uid\":\"uid-{pod}\",\"node\":\"node-a\"}}\n"
            )
        };
        let other = "203.0.113.1:40003";
        dir.write(
            "snat.log",
            &[
                line("01.000000", "new", NODE, "a"),
                line("02.000000", "end", NODE, "a"),
                line("02.500000", "new", other, "a"),
                line("03.000000", "new", NODE, "b"),
                line("04.000000", "end", NODE, "b"),
                line("05.000000", "new", other, "a-1"),
            ]
            .concat(),
        );
        let by_address = ask(&dir, &query(None, 0));
        let pods: Vec<_> = by_address.flows.iter().map(|f| f.pod.as_deref()).collect();
        assert_eq!(pods, [Some("default/a"), Some("default/b")]);
        assert_eq!(by_address.flows[1].uid.as_deref(), Some("uid-b"));
        assert_eq!(by_address.flows[1].node.as_deref(), Some("node-a"));
        let by_pod = |pod: &str, window: Option<Window>| {
            ask(
                &dir,
                &Query {
                    target: Target::Pod(pod.into()),
                    proto: None,
                    window,
                },
            )
        };
        let a = by_pod("default/a", None);
        let translated: Vec<_> = a.flows.iter().map(|f| f.translated.as_str()).collect();
        assert_eq!(translated, [NODE, other]);
        assert!(a
            .flows
            .iter()
            .all(|f| f.pod.as_deref() == Some("default/a")));
        let since = parse_time("2026-11-26T12:00:02.200000Z").unwrap();
        let later = by_pod(
            "default/a",
            Some(Window {
                from: since,
                to: Micros::MAX,
            }),
        );
        assert_eq!(later.flows.len(), 1, "{later:?}");
        assert_eq!(later.flows[0].translated, other);
        let args = text_args(None, Some("default/a"), Some(since));
        let text = to_text(
            &Target::Pod("default/a".into()),
            &args,
            &later,
            &Styler::plain(),
        );
        assert!(
            text.starts_with("pod default/a since 2026-11-26T12:00:02.2Z: 1 flow"),
            "{text}"
        );
        assert!(
            text.contains("TRANSLATED") && text.contains(other),
            "{text}"
        );
        assert!(by_pod("default/b", None).flows.len() == 1);
        assert!(by_pod("default/c", None).flows.is_empty());
    }

    /// A pod's `refused` lines, as the agent renders them, are answered by pod apart from its
    /// flows, within the window; by address they are neither answers nor unreadable.
    #[test]
    fn a_pods_refused_connections_are_found_by_pod_and_pass_unread_by_address() {
        use crate::snat::line::{render_refusals, sample_refusals, Origin, PodWords};
        let dir = Dir::new("refused");
        let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_694_400);
        let refused = |pod: &str, seconds: u64, count: u64| {
            let mut out = String::new();
            let first = t0 + std::time::Duration::from_secs(seconds);
            let refusals = sample_refusals(first, count);
            let origin = Origin {
                pod: Some(PodWords {
                    qualified: pod,
                    uid: "u",
                }),
                node: "node-a",
            };
            render_refusals(&mut out, &refusals, Some(origin));
            out
        };
        let flow = format!(
            "{{\"time\":\"2026-11-26T12:00:01.000000Z\",\"event\":\"new\",\"proto\":\"tcp\",\"src\":\"192.168.1.5:5000\",\"translated\":\"{NODE}\",\"dst\":\"198.51.100.9:443\",\"pod\":\"default/a\",\"uid\":\"u\",\"node\":\"node-a\"}}\n"
        );
        dir.write(
            "snat.log",
            &[
                flow,
                refused("default/a", 2, 3800),
                refused("default/b", 3, 7),
                refused("default/a", 60, 5),
                "{\"time\":\"2026-11-26T12:00:09.000000Z\",\"event\":\"new\",\"proto\":\"tcp\",\"src\":\"192.168.1.5:5001\",\"dst\":\"198.51.100.9:443\",\"pod\":\"default/a\"}\n".to_string(),
            ]
            .concat(),
        );
        let by_pod = |window: Option<Window>| {
            ask(
                &dir,
                &Query {
                    target: Target::Pod("default/a".into()),
                    proto: None,
                    window,
                },
            )
        };
        let a = by_pod(None);
        assert_eq!(a.flows.len(), 1);
        let counts: Vec<u64> = a.refusals.iter().map(|r| r.refused).collect();
        assert_eq!(counts, [3800, 5]);
        assert_eq!(a.refusals[0].limit, "connections");
        assert_eq!(a.refusals[0].dst, "198.51.100.9:443");
        assert_eq!(a.skipped_lines, 1, "a flow's line without translated");
        let early = by_pod(Some(Window {
            from: Micros::MIN,
            to: parse_time("2026-11-26T12:00:30Z").unwrap(),
        }));
        assert_eq!(early.refusals.len(), 1);
        let args = text_args(None, Some("default/a"), None);
        let text = to_text(
            &Target::Pod("default/a".into()),
            &args,
            &a,
            &Styler::plain(),
        );
        assert!(
            text.contains("refused by the pod share: 3805 new connections"),
            "{text}"
        );
        assert!(text.contains("connections  3800"), "{text}");
        let by_address = ask(&dir, &query(None, 0));
        assert_eq!(by_address.flows.len(), 1);
        assert!(by_address.refusals.is_empty());
        assert_eq!(by_address.skipped_lines, 0);
    }

    #[test]
    fn a_fifo_or_a_directory_as_the_log_is_refused_not_waited_on() {
        let dir = Dir::new("fifo");
        let fifo = dir.0.join("snat.log");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let err = log_files(&fifo).unwrap_err().to_string();
        assert!(err.contains("is a FIFO, not a log file"), "{err}");
        assert!(err.contains("--log -"), "{err}");
        std::fs::remove_file(&fifo).unwrap();
        std::fs::create_dir(&fifo).unwrap();
        let err = log_files(&fifo).unwrap_err().to_string();
        assert!(err.contains("is a directory, not a log file"), "{err}");
    }
}
