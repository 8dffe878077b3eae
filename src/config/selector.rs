//! Kubernetes label selectors (`kubectl -l`'s syntax), parsed as apimachinery's `labels.Parse`
//! parses them and matched against a node's labels: the node pools' `ipmasq.io/node-selector`.
//!
//! The grammar, as upstream's lexer and parser accept it:
//! ```text
//! selector    ::= "" | requirement ("," requirement)*
//! requirement ::= ["!"] KEY [ ("in" | "notin") "(" values ")" | ("=" | "==" | "!=") VALUE
//!                          | (">" | "<") INTEGER ]
//! values      ::= VALUE ("," VALUE)*       (a missing value is "": `(a,)`, `()`)
//! ```
//! White space is space, tab, CR and LF; a comma is AND; the empty selector selects every
//! node. KEY is `[prefix/]name` (prefix a lowercase DNS subdomain of at most 253 characters;
//! name at most 63 of `[A-Za-z0-9-_.]`, starting and ending with a letter or digit); VALUE is
//! empty or at most 63 of the same. `in` and `notin` are words only where an operator may
//! stand (`in in (in)` is the key `in` with the value `in`). As upstream: `a!=b` and
//! `a notin (b)` also select nodes without `a`; `!a` only those without it; `a>1` only nodes
//! whose `a` is an integer above 1. A NUL where a token would start ends the text, as in
//! upstream's lexer (inside a name it ends that name).

use std::collections::BTreeMap;
use std::fmt;

/// A node's labels.
pub type Labels = BTreeMap<String, String>;

/// How a requirement relates its key and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One requirement: a key, an operator and its values (sorted, without repeats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

/// A parsed selector: the AND of its requirements, sorted by key as upstream sorts them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// Why a text is no label selector: where (a byte offset and a 1-based column in characters),
/// the token found there, and what was expected or what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {problem}")]
pub struct SelectorError {
    pub offset: usize,
    pub column: usize,
    pub found: String,
    pub problem: String,
}

impl Requirement {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether these labels satisfy the requirement (apimachinery's `Requirement.Matches`).
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        let listed = |v: &String| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => value.is_some_and(listed),
            Operator::NotIn | Operator::NotEquals => !value.is_some_and(listed),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), [wanted]) =
                    (value.and_then(|v| go_parse_int(v)), &self.values[..])
                else {
                    return false;
                };
                let Some(wanted) = go_parse_int(wanted) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > wanted
                } else {
                    have < wanted
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// As upstream's `Requirement.String`: `!a`, `a`, `a=b`, `a in (b,c)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let operator = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(operator)?;
        let values = self.values.join(",");
        match self.operator {
            Operator::In | Operator::NotIn => write!(f, "({values})"),
            _ => f.write_str(&values),
        }
    }
}

impl Selector {
    /// Parses a selector exactly as `labels.Parse` accepts it (see the module's grammar).
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        Parser::new(text).parse()
    }

    /// Whether the selector matches every node (it has no requirement).
    pub fn selects_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether a node with these labels is selected: every requirement holds.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for Selector {
    /// The canonical form upstream prints (requirements by key, comma-separated).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Selector::parse(text)
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign and decimal digits within i64.
fn go_parse_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The lexer's tokens (upstream's `Token`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// A token, its text and where it starts.
#[derive(Clone, Debug)]
struct Scanned {
    token: Token,
    literal: String,
    offset: usize,
}

fn literal_token(text: &[u8]) -> Option<Token> {
    Some(match text {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Upstream's lexer, byte for byte: `read` gives 0 at the end (and for a NUL byte).
struct Lexer<'a> {
    text: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.text.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn scan_identifier_or_keyword(&mut self) -> (Token, Vec<u8>) {
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
        }
        (literal_token(&buffer).unwrap_or(Token::Identifier), buffer)
    }

    /// The longest operator at this point (`!=` rather than `!`).
    fn scan_special_symbol(&mut self) -> (Token, Vec<u8>) {
        let mut buffer = Vec::new();
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
            if let Some(token) = literal_token(&buffer) {
                last = Some((token, buffer.len()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((token, len)) => {
                buffer.truncate(len);
                (token, buffer)
            }
            // Every special symbol alone is a token, so this cannot happen; as the end.
            None => (Token::EndOfString, buffer),
        }
    }

    fn lex(&mut self) -> Scanned {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        let offset = self.pos.saturating_sub(1);
        let (token, literal) = if ch == 0 {
            (Token::EndOfString, Vec::new())
        } else if is_special_symbol(ch) {
            self.unread();
            self.scan_special_symbol()
        } else {
            self.unread();
            self.scan_identifier_or_keyword()
        };
        let offset = if token == Token::EndOfString && ch == 0 && self.pos >= self.text.len() {
            self.text.len()
        } else {
            offset
        };
        Scanned {
            token,
            literal: String::from_utf8_lossy(&literal).into_owned(),
            offset,
        }
    }
}

/// Where the parser is: after a key an `in` is an operator, elsewhere an identifier.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser<'a> {
    text: &'a str,
    items: Vec<Scanned>,
    position: usize,
}

const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, >, <";

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        let mut lexer = Lexer {
            text: text.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.token == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Parser {
            text,
            items,
            position: 0,
        }
    }

    fn token_in(item: &Scanned, context: Context) -> Token {
        match item.token {
            Token::In | Token::NotIn if context == Context::Values => Token::Identifier,
            token => token,
        }
    }

    fn current(&self) -> &Scanned {
        let last = self.items.len() - 1;
        &self.items[self.position.min(last)]
    }

    fn lookahead(&self, context: Context) -> Token {
        Self::token_in(self.current(), context)
    }

    fn consume(&mut self, context: Context) -> (Token, Scanned) {
        let item = self.current().clone();
        self.position += 1;
        (Self::token_in(&item, context), item)
    }

    fn error_at(&self, item: &Scanned, problem: String) -> SelectorError {
        let offset = item.offset.min(self.text.len());
        let column = self
            .text
            .get(..offset)
            .map_or(offset, |before| before.chars().count())
            + 1;
        SelectorError {
            offset,
            column,
            found: item.literal.clone(),
            problem,
        }
    }

    fn unexpected(&self, item: &Scanned, expected: &str) -> SelectorError {
        let found = if item.token == Token::EndOfString {
            "the end".to_string()
        } else {
            format!("`{}`", item.literal)
        };
        self.error_at(item, format!("found {found}, expected {expected}"))
    }

    fn parse(mut self) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            match self.lookahead(Context::Values) {
                Token::Identifier | Token::DoesNotExist => {
                    requirements.push(self.parse_requirement()?);
                    let (token, item) = self.consume(Context::Values);
                    match token {
                        Token::EndOfString => break,
                        Token::Comma => {
                            let next = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                let item = self.current().clone();
                                return Err(self.unexpected(&item, "a key or `!key` after `,`"));
                            }
                        }
                        _ => return Err(self.unexpected(&item, "`,` or the end")),
                    }
                }
                Token::EndOfString => break,
                _ => {
                    let item = self.current().clone();
                    return Err(self.unexpected(&item, "`!`, a key, or the end"));
                }
            }
        }
        requirements.sort_by(|a: &Requirement, b| a.key.cmp(&b.key));
        Ok(Selector { requirements })
    }

    fn parse_requirement(&mut self) -> Result<Requirement, SelectorError> {
        let (key, negated) = self.parse_key()?;
        let next = self.lookahead(Context::Values);
        if negated || next == Token::EndOfString || next == Token::Comma {
            let operator = if negated {
                Operator::DoesNotExist
            } else {
                Operator::Exists
            };
            return Ok(Requirement {
                key,
                operator,
                values: Vec::new(),
            });
        }
        let (token, item) = self.consume(Context::KeyAndOperator);
        let operator = match token {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            _ => return Err(self.unexpected(&item, &format!("an operator ({BINARY_OPERATORS})"))),
        };
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => vec![self.parse_exact_value()?],
        };
        let mut values: Vec<(String, Scanned)> = values;
        for (value, item) in &values {
            if let Err(problem) = check_label_value(value) {
                return Err(self.error_at(item, format!("value {value:?} of {key}: {problem}")));
            }
            if matches!(operator, Operator::GreaterThan | Operator::LessThan)
                && go_parse_int(value).is_none()
            {
                return Err(self.error_at(
                    item,
                    format!(
                        "the value of `{key}{}` must be an integer, not {value:?}",
                        item_op(operator)
                    ),
                ));
            }
        }
        values.sort_by(|a, b| a.0.cmp(&b.0));
        values.dedup_by(|a, b| a.0 == b.0);
        Ok(Requirement {
            key,
            operator,
            values: values.into_iter().map(|(v, _)| v).collect(),
        })
    }

    /// `[!]KEY`, the key checked.
    fn parse_key(&mut self) -> Result<(String, bool), SelectorError> {
        let (mut token, mut item) = self.consume(Context::Values);
        let negated = token == Token::DoesNotExist;
        if negated {
            (token, item) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(self.unexpected(&item, "a label key"));
        }
        if let Err(problem) = check_label_key(&item.literal) {
            return Err(self.error_at(&item, format!("label key {:?}: {problem}", item.literal)));
        }
        Ok((item.literal, negated))
    }

    /// `( values )`: a missing value is the empty string, as upstream reads `(a,)` and `()`.
    fn parse_values(&mut self) -> Result<Vec<(String, Scanned)>, SelectorError> {
        let (token, item) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(self.unexpected(&item, "`(`"));
        }
        let open = item;
        match self.lookahead(Context::Values) {
            Token::Identifier | Token::Comma => {
                let values = self.parse_value_list(&open)?;
                let (token, item) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    return Err(self.unexpected(&item, "`)`"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![(String::new(), open)])
            }
            _ => {
                let item = self.current().clone();
                Err(self.unexpected(&item, "a value, `,` or `)`"))
            }
        }
    }

    fn parse_value_list(
        &mut self,
        open: &Scanned,
    ) -> Result<Vec<(String, Scanned)>, SelectorError> {
        let mut values: Vec<(String, Scanned)> = Vec::new();
        loop {
            let (token, item) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    values.push((item.literal.clone(), item));
                    match self.lookahead(Context::Values) {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => {
                            let next = self.current().clone();
                            return Err(self.unexpected(&next, "`,` or `)`"));
                        }
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push((String::new(), open.clone()));
                    }
                    match self.lookahead(Context::Values) {
                        Token::ClosedPar => {
                            values.push((String::new(), item));
                            return Ok(values);
                        }
                        Token::Comma => {
                            // `,,`: upstream takes the second comma with the empty value
                            // between them, so `(a,,)` then meets `)` where a value or `,`
                            // must stand, and is refused.
                            self.consume(Context::Values);
                            values.push((String::new(), item));
                        }
                        _ => {}
                    }
                }
                _ => return Err(self.unexpected(&item, "`,` or a value")),
            }
        }
    }

    /// The one value of `=`, `==`, `!=`, `>` and `<`: empty before `,` or the end.
    fn parse_exact_value(&mut self) -> Result<(String, Scanned), SelectorError> {
        let next = self.lookahead(Context::Values);
        if next == Token::EndOfString || next == Token::Comma {
            return Ok((String::new(), self.current().clone()));
        }
        let (token, item) = self.consume(Context::Values);
        if token == Token::Identifier {
            return Ok((item.literal.clone(), item));
        }
        Err(self.unexpected(&item, "a value"))
    }
}

fn item_op(operator: Operator) -> &'static str {
    match operator {
        Operator::GreaterThan => ">",
        Operator::LessThan => "<",
        _ => "",
    }
}

/// Most characters of a label key's name and of a label value.
pub const MAX_LABEL_NAME: usize = 63;
/// Most characters of a label key's prefix (a DNS subdomain).
pub const MAX_LABEL_PREFIX: usize = 253;

/// `[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?`
fn is_label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A lowercase RFC 1123 subdomain: labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?` joined by dots.
fn is_dns_subdomain(text: &str) -> bool {
    text.split('.').all(|label| {
        let bytes = label.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                (first.is_ascii_lowercase() || first.is_ascii_digit())
                    && (last.is_ascii_lowercase() || last.is_ascii_digit())
                    && bytes
                        .iter()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            }
            _ => false,
        }
    })
}

const NAME_RULE: &str =
    "letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit";

/// A label key as apimachinery's `IsQualifiedName` takes it: `[prefix/]name`.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                return Err("the prefix before `/` is empty".to_string());
            }
            if prefix.len() > MAX_LABEL_PREFIX {
                return Err(format!(
                    "the prefix before `/` is longer than {MAX_LABEL_PREFIX} characters"
                ));
            }
            if !is_dns_subdomain(prefix) {
                return Err("the prefix before `/` must be a DNS subdomain: lowercase letters, digits, `-` and `.`, each part starting and ending with a letter or digit (e.g. example.com)".to_string());
            }
            name
        }
        _ => return Err("a key holds at most one `/` (prefix/name)".to_string()),
    };
    if name.is_empty() {
        return Err("the name is empty".to_string());
    }
    if name.len() > MAX_LABEL_NAME {
        return Err(format!(
            "the name is longer than {MAX_LABEL_NAME} characters"
        ));
    }
    if !is_label_name(name) {
        return Err(format!("the name must be made of {NAME_RULE}"));
    }
    Ok(())
}

/// A label value as apimachinery's `IsValidLabelValue` takes it: empty, or a name.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_LABEL_NAME {
        return Err(format!(
            "a label value is at most {MAX_LABEL_NAME} characters"
        ));
    }
    if !value.is_empty() && !is_label_name(value) {
        return Err(format!("a label value is empty or made of {NAME_RULE}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
