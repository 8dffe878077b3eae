//! A located YAML tree built from the saphyr-family event parser (granit-parser, re-exported by
//! serde-saphyr), with scalars resolved by YAML 1.1 rules as Go's yaml.v2 resolves them.
//!
//! Why not plain serde deserialisation: upstream reads the file with yaml.v2 into a generic
//! value, converts it to JSON and lets Go's `encoding/json` match keys case-insensitively,
//! letting the last duplicate win. Reproducing that, and reporting every key, duplicate and
//! value with its line and column (and mapping positions inside a ConfigMap's block scalar),
//! needs the tree itself, not a struct.

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, ScanError, Span as ParserSpan};

/// Most nodes one file may expand to, all its documents and aliases included (an alias bomb
/// stops here).
const MAX_NODES: usize = 300_000;
/// What the trees of one file may cost together, in bytes: every node's own size plus its
/// text, charged again at every alias that copies it, at most this many times the source's
/// size (one budget per file, never per document: fifty documents must not cost fifty
/// budgets) ...
const TREE_BYTES_PER_SOURCE_BYTE: usize = 32;
/// ... plus this much, so a short file may still use a few aliases. A 100,000-CIDR list costs
/// about 7 bytes of tree per byte of source, a mapping of one-letter keys about 40; a scalar
/// alias bomb (one long string referenced
/// many times) is refused long before it costs more than a few megabytes.
const TREE_BYTES_FLOOR: usize = 4 << 20;
/// Deepest nesting accepted; far beyond any real config, and it keeps drops shallow.
const MAX_DEPTH: usize = 64;

/// What the trees parsed from one file may still cost: the file's own budget, or what is left
/// of it for a config embedded in it (a ConfigMap's `data.config` is parsed again while the
/// manifest's tree is held, and shares that one budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub bytes: usize,
    pub nodes: usize,
    /// Left of an enclosing file's budget, not a file's own (said so when it runs out).
    pub shared: bool,
}

impl Budget {
    /// A file's whole budget: [`TREE_BYTES_PER_SOURCE_BYTE`] times its size plus
    /// [`TREE_BYTES_FLOOR`], and [`MAX_NODES`].
    pub fn of_file(source: &str) -> Budget {
        Budget {
            bytes: source
                .len()
                .saturating_mul(TREE_BYTES_PER_SOURCE_BYTE)
                .saturating_add(TREE_BYTES_FLOOR),
            nodes: MAX_NODES,
            shared: false,
        }
    }

    /// What is left once `held` is kept.
    fn after(self, held: Cost) -> Budget {
        Budget {
            bytes: self.bytes.saturating_sub(held.bytes),
            nodes: self.nodes.saturating_sub(held.nodes),
            shared: true,
        }
    }
}

/// A position in the source text: 1-based line and column (in characters), and byte offsets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub column: usize,
    /// Byte offset of the first character.
    pub offset: usize,
    /// Byte offset just past the node's text (equal to `offset` when unknown).
    pub end_offset: usize,
}

impl Location {
    fn from_parser(span: &ParserSpan, source: &str) -> Self {
        let offset = span
            .start
            .byte_offset()
            .unwrap_or_else(|| char_to_byte(source, span.start.index()));
        let end_offset = span
            .end
            .byte_offset()
            .unwrap_or_else(|| char_to_byte(source, span.end.index()))
            .max(offset);
        Location {
            line: span.start.line(),
            column: span.start.col() + 1,
            offset,
            end_offset,
        }
    }
}

fn char_to_byte(source: &str, chars: usize) -> usize {
    source
        .char_indices()
        .nth(chars)
        .map_or(source.len(), |(i, _)| i)
}

/// How a scalar was written; YAML 1.1 typing applies to plain scalars only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
    Folded,
}

impl From<ScalarStyle> for Style {
    fn from(style: ScalarStyle) -> Self {
        match style {
            ScalarStyle::Plain => Style::Plain,
            ScalarStyle::SingleQuoted => Style::SingleQuoted,
            ScalarStyle::DoubleQuoted => Style::DoubleQuoted,
            ScalarStyle::Literal => Style::Literal,
            ScalarStyle::Folded => Style::Folded,
        }
    }
}

/// A scalar's value after YAML 1.1 resolution (yaml.v2's `resolve`).
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str,
}

/// A scalar as written, with its style and an explicit core-schema tag if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    pub text: String,
    pub style: Style,
    /// The core-schema type named by an explicit tag (`!!str` gives `str`).
    pub tag: Option<String>,
}

impl Scalar {
    /// Resolves the scalar as yaml.v2 would: quoted and block scalars are strings, plain ones
    /// may be null, booleans (including `yes`/`no`/`on`/`off`/`y`/`n`), integers or floats.
    pub fn resolve(&self) -> Resolved {
        match self.tag.as_deref() {
            Some("str") => return Resolved::Str,
            Some("null") => return Resolved::Null,
            _ => {}
        }
        if self.style != Style::Plain && self.tag.is_none() {
            return Resolved::Str;
        }
        resolve_plain(&self.text)
    }

    /// True for a plain boolean that YAML 1.2 would read as a string (`yes`, `on`, `y`, ...).
    pub fn is_yaml11_only_bool(&self) -> bool {
        matches!(self.resolve(), Resolved::Bool(_))
            && !matches!(
                self.text.as_str(),
                "true" | "True" | "TRUE" | "false" | "False" | "FALSE"
            )
    }
}

fn resolve_plain(text: &str) -> Resolved {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false)
        }
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        _ => {}
    }
    let first = text.as_bytes()[0];
    // No number has a `/` (every CIDR has one): a string, without the number parsers.
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) || text.contains('/') {
        return Resolved::Str;
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if let Some(v) = parse_go_int(&plain) {
        return Resolved::Int(v);
    }
    if is_yaml_float(&plain) {
        if let Ok(v) = plain.parse::<f64>() {
            return Resolved::Float(v);
        }
    }
    Resolved::Str
}

/// Go's `strconv.ParseInt(s, 0, 64)` / `ParseUint(s, 0, 64)`: optional sign, then `0x`, `0o`,
/// `0b`, a leading `0` (octal) or decimal digits. Values outside i64/u64 are not integers.
fn parse_go_int(s: &str) -> Option<i128> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    let value = if neg {
        -i128::from(magnitude)
    } else {
        i128::from(magnitude)
    };
    // Negative values must fit i64; positive ones may use the full u64 range (ParseUint).
    (value >= i128::from(i64::MIN)).then_some(value)
}

/// yaml.v2's float pattern: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// One node of the tree.
#[derive(Clone, Debug, PartialEq)]
pub struct YamlNode {
    pub value: Value,
    pub location: Location,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Scalar(Scalar),
    Sequence(Vec<YamlNode>),
    /// Entries in document order; duplicates are kept, deciding is the reader's business.
    Mapping(Vec<(YamlNode, YamlNode)>),
}

impl YamlNode {
    /// The node's scalar, if it is one.
    pub fn as_scalar(&self) -> Option<&Scalar> {
        match &self.value {
            Value::Scalar(s) => Some(s),
            _ => None,
        }
    }

    /// The node's mapping entries, if it is a mapping.
    pub fn as_mapping(&self) -> Option<&[(YamlNode, YamlNode)]> {
        match &self.value {
            Value::Mapping(m) => Some(m),
            _ => None,
        }
    }

    /// The last value of an exact string key in a mapping (the one that wins).
    pub fn get(&self, key: &str) -> Option<&YamlNode> {
        self.as_mapping()?
            .iter()
            .rev()
            .find(|(k, _)| k.as_scalar().is_some_and(|s| s.text == key))
            .map(|(_, v)| v)
    }

    /// The text of a string-valued scalar.
    pub fn as_str(&self) -> Option<&str> {
        self.as_scalar()
            .filter(|s| s.resolve() == Resolved::Str)
            .map(|s| s.text.as_str())
    }

    /// A YAML-ish name of the node's kind, for messages ("a list", "a string", ...).
    pub fn kind_name(&self) -> &'static str {
        match &self.value {
            Value::Sequence(_) => "a list",
            Value::Mapping(_) => "a mapping",
            Value::Scalar(s) => match s.resolve() {
                Resolved::Null => "null",
                Resolved::Bool(_) => "a boolean",
                Resolved::Int(_) => "an integer",
                Resolved::Float(_) => "a number",
                Resolved::Str => "a string",
            },
        }
    }

    /// Whether the node is null (an empty document is one).
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar(s) if s.resolve() == Resolved::Null)
    }

    fn null_at(location: Location) -> YamlNode {
        YamlNode {
            value: Value::Scalar(Scalar {
                text: String::new(),
                style: Style::Plain,
                tag: None,
            }),
            location,
        }
    }
}

/// A YAML syntax or structure error with its position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub message: String,
    pub location: Location,
}

impl YamlError {
    fn from_scan(err: &ScanError, source: &str) -> Self {
        let mark = err.marker();
        let offset = mark
            .byte_offset()
            .unwrap_or_else(|| char_to_byte(source, mark.index()));
        YamlError {
            message: format!("YAML syntax error: {}", err.info()),
            location: Location {
                line: mark.line(),
                column: mark.col() + 1,
                offset,
                end_offset: offset,
            },
        }
    }

    fn at(message: impl Into<String>, location: Location) -> Self {
        YamlError {
            message: message.into(),
            location,
        }
    }
}

/// Which documents of a stream are built into trees; the others are scanned (a syntax error
/// in them is still found) and counted, never built.
#[derive(Clone, Copy, Debug)]
pub enum Documents {
    /// The first document only: what yaml.v2 (and so upstream) reads of a config file.
    First,
    /// Every document, when the first one that holds anything passes this test (a Kubernetes
    /// manifest, whose ConfigMap may be in any document); otherwise as [`Documents::First`]
    /// (empty documents before the deciding one are built too: they cost nothing).
    AllWhen(fn(&YamlNode) -> bool),
}

/// The documents of a YAML stream, as far as they were read.
#[derive(Debug)]
pub struct Stream {
    /// The documents built, in order; an empty document is a null scalar.
    pub documents: Vec<YamlNode>,
    /// The documents after those, scanned and counted but not built.
    pub unbuilt: Unbuilt,
    /// What is left of the budget once the built documents are kept: what a config embedded
    /// in them may cost while they are held.
    pub left: Budget,
    /// A syntax error after at least one complete document (the first document is what counts;
    /// an error later is something to warn about, as yaml.v2 never reads that far).
    pub trailing_error: Option<YamlError>,
}

/// Documents of a stream that were counted, not built.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unbuilt {
    pub count: usize,
    /// Where the first of them starts (its root node; its start when empty).
    pub first: Option<Location>,
    /// Whether `first` is the root node's place (not only the document's start).
    placed: bool,
}

impl Stream {
    /// How many documents follow the first, built or not, and where the second one starts.
    pub fn later_documents(&self) -> Option<(usize, Location)> {
        let built = self.documents.len().saturating_sub(1);
        let location = self
            .documents
            .get(1)
            .map(|d| d.location)
            .or(self.unbuilt.first)?;
        Some((built + self.unbuilt.count, location))
    }
}

/// Parses the documents of `source` that `documents` asks for, all within the file's one
/// budget. An error inside the first document is returned as `Err`; an error in a later one (a
/// syntax error, or the budget running out) ends the stream and is kept in `trailing_error`.
pub fn parse_stream(source: &str, documents: Documents) -> Result<Stream, YamlError> {
    parse_stream_within(source, documents, Budget::of_file(source))
}

/// [`parse_stream`] within `budget` (what is left of an enclosing file's).
pub fn parse_stream_within(
    source: &str,
    documents: Documents,
    budget: Budget,
) -> Result<Stream, YamlError> {
    let mut stream = read_documents(source, documents, budget)?;
    let held = stream
        .documents
        .iter()
        .fold(Cost::default(), |sum, doc| sum.plus(Cost::of(doc)));
    stream.left = budget.after(held);
    Ok(stream)
}

fn read_documents(source: &str, documents: Documents, budget: Budget) -> Result<Stream, YamlError> {
    let mut builder = Builder::new(source, budget);
    let mut parser = Parser::new_from_str(source);
    let mut stream = Stream {
        documents: Vec::new(),
        unbuilt: Unbuilt::default(),
        left: budget,
        trailing_error: None,
    };
    // Whether later documents are built: undecided until a document that holds anything.
    let mut build_later: Option<bool> = None;
    let mut counting = false;
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(next)) => next,
            Some(Err(err)) => {
                let err = YamlError::from_scan(&err, source);
                if stream.documents.is_empty() {
                    return Err(err);
                }
                stream.trailing_error = Some(err);
                break;
            }
        };
        if counting {
            stream.unbuilt.count_event(&event, &span, source);
            continue;
        }
        match builder.feed(event, span) {
            Ok(Some(doc)) => {
                if build_later.is_none() && !doc.is_null() {
                    build_later = Some(match documents {
                        Documents::First => false,
                        Documents::AllWhen(wanted) => wanted(&doc),
                    });
                }
                stream.documents.push(doc);
                let more = match documents {
                    Documents::First => false,
                    Documents::AllWhen(_) => build_later != Some(false),
                };
                if !more {
                    counting = true;
                    builder.release_anchors();
                }
            }
            Ok(None) => {}
            Err(err) => {
                if stream.documents.is_empty() {
                    return Err(err);
                }
                stream.trailing_error = Some(err);
                break;
            }
        }
    }
    Ok(stream)
}

impl Unbuilt {
    /// Counts a document's start and notes where the first one begins, as a built document's
    /// root would be placed.
    fn count_event(&mut self, event: &Event<'_>, span: &ParserSpan, source: &str) {
        match event {
            Event::DocumentStart(..) => {
                self.count += 1;
                if self.count == 1 {
                    self.first = Some(Location::from_parser(span, source));
                    self.placed = false;
                }
            }
            Event::Scalar(..)
            | Event::Alias(..)
            | Event::SequenceStart(..)
            | Event::MappingStart(..)
                if self.count == 1 && !self.placed =>
            {
                self.first = Some(Location::from_parser(span, source));
                self.placed = true;
            }
            _ => {}
        }
    }
}

enum Frame {
    Sequence {
        items: Vec<YamlNode>,
        location: Location,
        anchor: usize,
    },
    Mapping {
        entries: Vec<(YamlNode, YamlNode)>,
        pending_key: Option<YamlNode>,
        location: Location,
        anchor: usize,
    },
}

/// Assembles events into documents, resolving aliases within a node budget.
struct Builder<'s> {
    source: &'s str,
    stack: Vec<Frame>,
    /// Anchored nodes with what one more copy of each costs.
    anchors: std::collections::HashMap<usize, (YamlNode, Cost)>,
    document_root: Option<YamlNode>,
    document_start: Location,
    in_document: bool,
    /// Nodes and bytes of tree charged so far in this file (never reset between documents),
    /// and the most it may use.
    nodes: usize,
    bytes: usize,
    budget: Budget,
}

impl<'s> Builder<'s> {
    fn new(source: &'s str, budget: Budget) -> Self {
        Builder {
            source,
            stack: Vec::new(),
            anchors: std::collections::HashMap::new(),
            document_root: None,
            document_start: Location::default(),
            in_document: false,
            nodes: 0,
            bytes: 0,
            budget,
        }
    }

    fn feed(&mut self, event: Event<'_>, span: ParserSpan) -> Result<Option<YamlNode>, YamlError> {
        let location = Location::from_parser(&span, self.source);
        match event {
            Event::DocumentStart(..) => {
                self.in_document = true;
                self.document_root = None;
                self.document_start = location;
                // Anchors do not reach across documents; what was charged stays charged.
                self.anchors.clear();
            }
            Event::DocumentEnd => {
                self.in_document = false;
                let root = self
                    .document_root
                    .take()
                    .unwrap_or_else(|| YamlNode::null_at(self.document_start));
                return Ok(Some(root));
            }
            Event::Scalar(text, style, anchor, tag) => {
                let tag = tag.and_then(|t| t.core_suffix().map(str::to_string));
                let scalar = Scalar {
                    text: text.into_owned(),
                    style: style.into(),
                    tag,
                };
                self.scalar(scalar, anchor, location)?;
            }
            Event::Alias(id) => self.alias(id, location)?,
            Event::SequenceStart(_, anchor, _) => {
                self.open(
                    Frame::Sequence {
                        items: Vec::new(),
                        location,
                        anchor,
                    },
                    location,
                )?;
            }
            Event::MappingStart(_, anchor, _) => {
                self.open(
                    Frame::Mapping {
                        entries: Vec::new(),
                        pending_key: None,
                        location,
                        anchor,
                    },
                    location,
                )?;
            }
            Event::SequenceEnd | Event::MappingEnd => self.close(location)?,
            Event::UnresolvedAlias(_) => {
                return Err(YamlError::at(
                    "YAML alias refers to an unknown anchor",
                    location,
                ))
            }
            _ => {}
        }
        Ok(None)
    }

    /// Drops the anchors' copies once no more documents are built.
    fn release_anchors(&mut self) {
        self.anchors = std::collections::HashMap::new();
    }

    /// A scalar, charged (twice when an anchor keeps a copy) and attached.
    fn scalar(
        &mut self,
        scalar: Scalar,
        anchor: usize,
        location: Location,
    ) -> Result<(), YamlError> {
        let node = YamlNode {
            value: Value::Scalar(scalar),
            location,
        };
        let cost = Cost::of(&node);
        self.charge(cost, location)?;
        if anchor != 0 {
            // The anchor keeps a copy: it costs like the node itself.
            self.charge(cost, location)?;
            self.anchors.insert(anchor, (node.clone(), cost));
        }
        self.attach(node)
    }

    /// An alias: charged before the copy is made, so a refused alias never allocates.
    fn alias(&mut self, id: usize, location: Location) -> Result<(), YamlError> {
        let cost = self
            .anchors
            .get(&id)
            .map(|(_, cost)| *cost)
            .ok_or_else(|| YamlError::at("YAML alias refers to an unknown anchor", location))?;
        self.charge(cost, location)?;
        let node = self.anchors[&id].0.clone();
        self.attach(YamlNode { location, ..node })
    }

    /// The end of a sequence or mapping: the collection becomes a node, anchored and attached.
    fn close(&mut self, location: Location) -> Result<(), YamlError> {
        let (node, anchor) = match self.stack.pop() {
            Some(Frame::Sequence {
                items,
                location,
                anchor,
            }) => (
                YamlNode {
                    value: Value::Sequence(items),
                    location,
                },
                anchor,
            ),
            Some(Frame::Mapping {
                entries,
                location,
                anchor,
                ..
            }) => (
                YamlNode {
                    value: Value::Mapping(entries),
                    location,
                },
                anchor,
            ),
            None => return Err(YamlError::at("unbalanced YAML collection", location)),
        };
        if anchor != 0 {
            // The anchor keeps a copy of the whole subtree: charge it, or nested
            // anchors (&a0 [&a1 [ ... ]]) copy it once per level unseen by the budget.
            let cost = Cost::of(&node);
            self.charge(cost, location)?;
            self.anchors.insert(anchor, (node.clone(), cost));
        }
        self.attach(node)
    }

    fn open(&mut self, frame: Frame, location: Location) -> Result<(), YamlError> {
        self.charge(
            Cost {
                nodes: 1,
                bytes: std::mem::size_of::<YamlNode>(),
            },
            location,
        )?;
        if self.stack.len() >= MAX_DEPTH {
            return Err(YamlError::at(
                format!("YAML nesting deeper than {MAX_DEPTH} levels"),
                location,
            ));
        }
        self.stack.push(frame);
        Ok(())
    }

    fn charge(&mut self, cost: Cost, location: Location) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(cost.nodes);
        self.bytes = self.bytes.saturating_add(cost.bytes);
        let whose = if self.budget.shared {
            "what the manifest around it left of the file's budget"
        } else {
            "the budget of one file, all its documents together"
        };
        if self.nodes > self.budget.nodes {
            return Err(YamlError::at(
                format!(
                    "YAML expands to more than {} nodes, {whose} (at most {MAX_NODES}); an alias copies what it refers to at every use (alias bomb?)",
                    self.budget.nodes
                ),
                location,
            ));
        }
        if self.bytes > self.budget.bytes {
            return Err(YamlError::at(
                format!(
                    "YAML needs more than {} bytes in memory, {whose} ({TREE_BYTES_PER_SOURCE_BYTE} bytes per byte of the file plus 4 MiB); an alias copies what it refers to at every use (alias bomb?)",
                    self.budget.bytes
                ),
                location,
            ));
        }
        Ok(())
    }

    fn attach(&mut self, node: YamlNode) -> Result<(), YamlError> {
        match self.stack.last_mut() {
            None => {
                if !self.in_document {
                    return Err(YamlError::at("YAML node outside a document", node.location));
                }
                self.document_root = Some(node);
            }
            Some(Frame::Sequence { items, .. }) => items.push(node),
            Some(Frame::Mapping {
                entries,
                pending_key,
                ..
            }) => match pending_key.take() {
                None => *pending_key = Some(node),
                Some(key) => entries.push((key, node)),
            },
        }
        Ok(())
    }
}

/// What a node (and everything under it) costs the budget: its nodes, and their bytes in
/// memory (each node's own size plus the text and tag it owns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cost {
    nodes: usize,
    bytes: usize,
}

impl Cost {
    fn of(node: &YamlNode) -> Cost {
        let own = std::mem::size_of::<YamlNode>();
        match &node.value {
            Value::Scalar(s) => Cost {
                nodes: 1,
                bytes: own + s.text.len() + s.tag.as_ref().map_or(0, String::len),
            },
            Value::Sequence(items) => items.iter().fold(
                Cost {
                    nodes: 1,
                    bytes: own,
                },
                |sum, item| sum.plus(Cost::of(item)),
            ),
            Value::Mapping(entries) => entries.iter().fold(
                Cost {
                    nodes: 1,
                    bytes: own,
                },
                |sum, (k, v)| sum.plus(Cost::of(k)).plus(Cost::of(v)),
            ),
        }
    }

    fn plus(self, other: Cost) -> Cost {
        Cost {
            nodes: self.nodes.saturating_add(other.nodes),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(src: &str) -> YamlNode {
        parse_stream(src, Documents::First)
            .unwrap()
            .documents
            .remove(0)
    }

    fn plain(text: &str) -> Resolved {
        Scalar {
            text: text.into(),
            style: Style::Plain,
            tag: None,
        }
        .resolve()
    }

    #[test]
    fn yaml11_booleans_resolve_like_yaml_v2() {
        for t in [
            "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON",
        ] {
            assert_eq!(plain(t), Resolved::Bool(true), "{t}");
        }
        for f in [
            "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF",
        ] {
            assert_eq!(plain(f), Resolved::Bool(false), "{f}");
        }
        assert_eq!(plain("yEs"), Resolved::Str);
        assert_eq!(plain("tRUE"), Resolved::Str);
    }

    #[test]
    fn numbers_and_nulls_resolve_like_yaml_v2() {
        assert_eq!(plain("64"), Resolved::Int(64));
        assert_eq!(plain("+64"), Resolved::Int(64));
        assert_eq!(plain("-3"), Resolved::Int(-3));
        assert_eq!(plain("0x40"), Resolved::Int(64));
        assert_eq!(plain("0o100"), Resolved::Int(64));
        assert_eq!(plain("0100"), Resolved::Int(64));
        assert_eq!(plain("0b1000000"), Resolved::Int(64));
        assert_eq!(plain("6_4"), Resolved::Int(64));
        assert_eq!(plain("64.0"), Resolved::Float(64.0));
        assert_eq!(plain("1e2"), Resolved::Float(100.0));
        assert_eq!(plain(".5"), Resolved::Float(0.5));
        assert_eq!(plain("08"), Resolved::Float(8.0));
        assert_eq!(plain("10.0.0.0/8"), Resolved::Str);
        assert_eq!(plain("60s"), Resolved::Str);
        assert_eq!(plain("~"), Resolved::Null);
        assert_eq!(plain("null"), Resolved::Null);
        assert_eq!(plain("NULL"), Resolved::Null);
        assert_eq!(plain("nUll"), Resolved::Str);
    }

    #[test]
    fn quoted_scalars_are_always_strings() {
        let doc = first("a: 'yes'\nb: \"64\"\nc: !!str 12\nd: yes\n");
        assert_eq!(doc.get("a").unwrap().as_str(), Some("yes"));
        assert_eq!(doc.get("b").unwrap().as_str(), Some("64"));
        assert_eq!(doc.get("c").unwrap().as_str(), Some("12"));
        assert_eq!(doc.get("d").unwrap().as_str(), None);
    }

    #[test]
    fn keeps_duplicates_and_locations() {
        let doc = first("a: 1\nb:\n  - x\na: 2\n");
        let entries = doc.as_mapping().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[2].0.location.line, 4);
        assert_eq!(doc.get("a").unwrap().as_scalar().unwrap().text, "2");
        let b = doc.get("b").unwrap();
        match &b.value {
            Value::Sequence(items) => {
                assert_eq!(items[0].location.line, 3);
                assert_eq!(items[0].location.column, 5);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn aliases_expand_and_bombs_stop() {
        let doc = first("base: &b [1, 2]\ncopy: *b\n");
        assert_eq!(doc.get("copy").unwrap().kind_name(), "a list");
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..8 {
            let prev = (b'a' + i) as char;
            let next = (b'a' + i + 1) as char;
            bomb.push_str(&format!(
                "{next}: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        let err = parse_stream(&bomb, Documents::First).unwrap_err();
        assert!(err.message.contains("more than"), "{}", err.message);
    }

    /// Nested anchors around one large list: every level keeps a copy of what it holds, so
    /// the copies count against the node budget (what they cost before: docs/benchmarks.md).
    #[test]
    fn nested_anchor_copies_count_against_the_budget() {
        let depth = 60;
        let mut text = String::from("x: ");
        for level in 0..depth {
            text.push_str(&format!("&a{level} ["));
        }
        text.push_str(&vec!["x"; 90_000].join(","));
        text.push_str(&"]".repeat(depth));
        text.push_str("\ny: *a0\n");
        let err = parse_stream(&text, Documents::First).unwrap_err();
        assert!(err.message.contains("more than"), "{}", err.message);
        // One anchored list used twice is still fine.
        let ok = format!("a: &l [{}]\nb: *l\n", vec!["10.0.0.0/8"; 20_000].join(","));
        assert!(parse_stream(&ok, Documents::First).is_ok());
    }

    /// One long string referenced many times: few nodes, but every alias copies the string.
    /// The byte budget refuses it before the copies cost more than a small multiple of the
    /// file (what this shape cost before: docs/benchmarks.md).
    #[test]
    fn scalar_alias_copies_count_their_bytes() {
        let big = "x".repeat(100_000);
        let refs = vec!["*b"; 2_000].join(", ");
        let text = format!("big: &b {big}\nrefs: [{refs}]\n");
        assert!(text.len() < 130_000);
        let err = parse_stream(&text, Documents::First).unwrap_err();
        assert!(err.message.contains("bytes in memory"), "{}", err.message);
        // A handful of copies of a short anchor is what aliases are for.
        let fine = format!(
            "big: &b {}\nrefs: [{}]\n",
            "y".repeat(1_000),
            vec!["*b"; 100].join(", ")
        );
        assert!(parse_stream(&fine, Documents::First).is_ok());
    }

    /// A real large config stays well inside the budget: 100,000 CIDRs, one per line.
    #[test]
    fn a_100000_cidr_list_fits_the_budget() {
        let mut text = String::from("nonMasqueradeCIDRs:\n");
        for i in 0..100_000u32 {
            text.push_str(&format!("  - 10.{}.{}.0/24\n", i >> 8 & 0xff, i & 0xff));
        }
        let stream = parse_stream(&text, Documents::First).unwrap();
        let cost = Cost::of(&stream.documents[0]);
        assert!(
            cost.bytes < text.len() * TREE_BYTES_PER_SOURCE_BYTE / 2,
            "{cost:?}"
        );
    }

    /// A document whose tree costs about 2 MB from 2.2 kB of text: a long scalar, a list of
    /// 30 aliases to it, and a list of 30 aliases to that list (the shape of
    /// tests/hostile/multi-document-alias-bombs.py, smaller).
    fn alias_bomb_document() -> String {
        let refs = |alias: &str| vec![alias; 30].join(",");
        format!(
            "s: &s {}\nl: &l [{}]\nr: [{}]\n",
            "x".repeat(2_000),
            refs("*s"),
            refs("*l")
        )
    }

    /// Ten documents, each an alias bomb within the budget alone, nine times the budget
    /// together: a config file builds only the first (yaml.v2 reads no other) ...
    #[test]
    fn later_documents_of_a_config_are_counted_not_built() {
        let one = alias_bomb_document();
        let text = format!("a: 1\n{}", format!("---\n{one}").repeat(10));
        let budget = text.len() * TREE_BYTES_PER_SOURCE_BYTE + TREE_BYTES_FLOOR;
        let alone = parse_stream(&one, Documents::First).unwrap();
        let cost = Cost::of(&alone.documents[0]).bytes;
        assert!(
            cost < budget && cost * 10 > 2 * budget,
            "{cost} of {budget}"
        );
        let stream = parse_stream(&text, Documents::First).unwrap();
        assert_eq!(stream.documents.len(), 1);
        assert_eq!(stream.unbuilt.count, 10);
        assert!(stream.trailing_error.is_none());
        assert_eq!(
            stream.later_documents().map(|(n, l)| (n, l.line)),
            Some((10, 3))
        );
    }

    /// ... and a manifest, whose every document is built, gets one budget for all of them
    /// (before, one per document: fifty documents cost fifty budgets, 1.45 GB for 951 KB).
    #[test]
    fn one_budget_covers_every_document_of_a_file() {
        let text = format!(
            "a: 1\n{}",
            format!("---\n{}", alias_bomb_document()).repeat(10)
        );
        let stream = parse_stream(&text, Documents::AllWhen(|_| true)).unwrap();
        assert!(stream.documents.len() < 6, "{}", stream.documents.len());
        let err = stream.trailing_error.expect("the budget runs out");
        assert!(err.message.contains("bytes in memory"), "{}", err.message);
        // Not a manifest: only the first document is built.
        let stream = parse_stream(&text, Documents::AllWhen(|_| false)).unwrap();
        assert_eq!((stream.documents.len(), stream.unbuilt.count), (1, 10));
        // Empty documents before the deciding one are built and do not decide.
        let stream = parse_stream(
            "---\n---\nkind: x\n---\nb: 2\n",
            Documents::AllWhen(|d| d.get("kind").is_some()),
        )
        .unwrap();
        assert_eq!((stream.documents.len(), stream.unbuilt.count), (3, 0));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(10_000);
        assert!(parse_stream(&deep, Documents::First).is_err());
    }

    #[test]
    fn multiple_documents_and_trailing_errors() {
        let stream = parse_stream("a: 1\n---\nb: 2\n", Documents::AllWhen(|_| true)).unwrap();
        assert_eq!(stream.documents.len(), 2);
        assert_eq!(
            stream.later_documents().map(|(n, l)| (n, l.line)),
            Some((1, 3))
        );
        let stream = parse_stream("a: 1\n---\nb: 2\n", Documents::First).unwrap();
        assert_eq!(stream.documents.len(), 1);
        assert_eq!(
            stream.later_documents().map(|(n, l)| (n, l.line)),
            Some((1, 3))
        );
        let stream = parse_stream("a: 1\n---\nb: [\n", Documents::First).unwrap();
        assert_eq!(stream.documents.len(), 1);
        assert!(stream.trailing_error.is_some());
        assert!(parse_stream("a: [\n", Documents::First).is_err());
    }

    #[test]
    fn empty_input_is_one_null_document_or_none() {
        let stream = parse_stream("", Documents::First).unwrap();
        assert!(stream.documents.iter().all(|d| d.kind_name() == "null"));
        let stream = parse_stream("# only a comment\n", Documents::First).unwrap();
        assert!(stream.documents.iter().all(|d| d.kind_name() == "null"));
    }
}
