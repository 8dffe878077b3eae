//! Reading our table back from `nft -j list table`: the chain's hook, the set's type and
//! elements, and every rule as the same canonical text the desired model uses, with its
//! counters. Also the neutral [`Inspection`] made from it.

use super::render::{CHAIN, SET};
use crate::backend::{
    AddressMatch, Before, Counters, EntryJump, Inspection, LiveRule, Matches, Verdict, Weight,
};
use ipnet::IpNet;
use serde_json::Value;

/// The base chain's declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChainHook {
    pub kind: String,
    pub hook: String,
    pub priority: i64,
    pub policy: String,
}

/// One live rule: canonical statements, comment, counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LiveRuleSpec {
    pub statements: String,
    pub comment: Option<String>,
    pub counters: Option<Counters>,
}

/// What our table holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LiveTable {
    pub table_exists: bool,
    pub chain: Option<ChainHook>,
    /// The set's type and flags, when it exists.
    pub set: Option<(String, Vec<String>)>,
    pub elements: Vec<IpNet>,
    /// Elements nft printed in a form we do not write (kept for the report).
    pub odd_elements: Vec<String>,
    pub rules: Vec<LiveRuleSpec>,
}

/// An element as `nft -j` prints it: `{"prefix": {"addr", "len"}}`, a bare address (a /32 or
/// /128), or `{"range": [a, b]}` (not written by us; reported as is).
fn element(value: &Value) -> Result<IpNet, String> {
    let value = value
        .get("elem")
        .and_then(|e| e.get("val"))
        .unwrap_or(value);
    if let Some(prefix) = value.get("prefix") {
        let addr = prefix
            .get("addr")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let len = prefix.get("len").and_then(Value::as_u64).unwrap_or(0);
        return format!("{addr}/{len}")
            .parse()
            .map_err(|_| value.to_string());
    }
    if let Some(addr) = value.as_str() {
        let ip: std::net::IpAddr = addr.parse().map_err(|_| value.to_string())?;
        return Ok(IpNet::from(ip));
    }
    Err(value.to_string())
}

/// A rule's expressions as canonical text (the form `render` writes statements in).
fn statements(exprs: &[Value]) -> (String, Option<Counters>) {
    let mut words: Vec<String> = Vec::new();
    let mut counters = None;
    for expr in exprs {
        let Some((kind, body)) = expr.as_object().and_then(|o| o.iter().next()) else {
            words.push(expr.to_string());
            continue;
        };
        let text = match kind.as_str() {
            "match" => match_text(body),
            "counter" => {
                counters = Some(Counters {
                    packets: body.get("packets").and_then(Value::as_u64).unwrap_or(0),
                    bytes: body.get("bytes").and_then(Value::as_u64).unwrap_or(0),
                });
                Some("counter".to_string())
            }
            "return" => Some("return".to_string()),
            "accept" => Some("accept".to_string()),
            "drop" => Some("drop".to_string()),
            "masquerade" => Some(masquerade_text(body)),
            "snat" => Some(format!(
                "snat to {}",
                body.get("addr")
                    .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string))
                    .unwrap_or_default()
            )),
            "jump" | "goto" => Some(format!(
                "{kind} {}",
                body.get("target")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            )),
            _ => None,
        };
        words.push(text.unwrap_or_else(|| expr.to_string()));
    }
    (words.join(" "), counters)
}

fn match_text(body: &Value) -> Option<String> {
    let op = body.get("op")?.as_str()?;
    let left = body.get("left")?;
    let right = body.get("right")?;
    let left = if let Some(fib) = left.get("fib") {
        let flags: Vec<&str> = fib
            .get("flags")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        format!("fib {} {}", flags.join(" . "), fib.get("result")?.as_str()?)
    } else if let Some(payload) = left.get("payload") {
        format!(
            "{} {}",
            payload.get("protocol")?.as_str()?,
            payload.get("field")?.as_str()?
        )
    } else if let Some(meta) = left.get("meta") {
        format!("meta {}", meta.get("key")?.as_str()?)
    } else if let Some(numgen) = left.get("numgen") {
        if numgen.get("offset").and_then(Value::as_u64).unwrap_or(0) != 0 {
            return None;
        }
        format!(
            "numgen {} mod {}",
            numgen.get("mode")?.as_str()?,
            numgen.get("mod")?.as_u64()?
        )
    } else {
        return None;
    };
    // A prefix (`10.0.0.0/8`) as nft writes it; anything else as its JSON.
    let item = |v: &Value| -> String {
        if let Some(prefix) = v.get("prefix") {
            if let (Some(addr), Some(len)) = (
                prefix.get("addr").and_then(Value::as_str),
                prefix.get("len").and_then(Value::as_u64),
            ) {
                return format!("{addr}/{len}");
            }
        }
        v.as_str().map_or_else(|| v.to_string(), str::to_string)
    };
    let right = match right {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Object(o) if o.contains_key("set") => {
            let items: Vec<String> = o["set"].as_array()?.iter().map(item).collect();
            format!("{{ {} }}", items.join(", "))
        }
        Value::Object(o) if o.contains_key("prefix") => item(right),
        _ => return None,
    };
    Some(match op {
        "==" | "in" => format!("{left} {right}"),
        op => format!("{left} {op} {right}"),
    })
}

fn masquerade_text(body: &Value) -> String {
    let mut text = String::from("masquerade");
    match body.get("port") {
        Some(Value::Object(port)) => {
            if let Some([a, b]) = port
                .get("range")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                text.push_str(&format!(" to :{a}-{b}"));
            }
        }
        Some(Value::Number(n)) => text.push_str(&format!(" to :{n}")),
        _ => {}
    }
    let flags: Vec<String> = match body.get("flags") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    for flag in flags {
        text.push(' ');
        text.push_str(&flag);
    }
    text
}

/// Parses `nft -j list table FAMILY ipmasq`.
pub(super) fn parse(json: &str) -> Result<LiveTable, String> {
    let root: Value = serde_json::from_str(json).map_err(|e| format!("nft -j output: {e}"))?;
    let items = root
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or("nft -j output has no \"nftables\" list")?;
    let mut live = LiveTable::default();
    for item in items {
        if item.get("table").is_some() {
            live.table_exists = true;
        } else if let Some(chain) = item.get("chain") {
            if chain.get("name").and_then(Value::as_str) == Some(CHAIN) {
                live.chain = Some(ChainHook {
                    kind: chain
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                    hook: chain
                        .get("hook")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                    priority: chain
                        .get("prio")
                        .and_then(Value::as_i64)
                        .unwrap_or(i64::MIN),
                    policy: chain
                        .get("policy")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                });
            }
        } else if let Some(set) = item.get("set") {
            if set.get("name").and_then(Value::as_str) == Some(SET) {
                let flags = set
                    .get("flags")
                    .and_then(Value::as_array)
                    .map(|f| {
                        f.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                let kind = set.get("type").and_then(Value::as_str).unwrap_or_default();
                live.set = Some((kind.to_string(), flags));
                for e in set
                    .get("elem")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match element(e) {
                        Ok(net) => live.elements.push(net),
                        Err(odd) => live.odd_elements.push(odd),
                    }
                }
            }
        } else if let Some(rule) = item.get("rule") {
            if rule.get("chain").and_then(Value::as_str) != Some(CHAIN) {
                continue;
            }
            let exprs = rule
                .get("expr")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let (statements, counters) = statements(exprs);
            live.rules.push(LiveRuleSpec {
                statements,
                comment: rule
                    .get("comment")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                counters,
            });
        }
    }
    live.elements.sort();
    Ok(live)
}

impl LiveTable {
    /// The table as we wrote it (what nft would list right after our own commit).
    pub fn written(table: &super::render::DesiredTable) -> Self {
        LiveTable {
            table_exists: true,
            chain: Some(ChainHook {
                kind: "nat".into(),
                hook: "postrouting".into(),
                priority: super::render::PRIORITY_VALUE,
                policy: "accept".into(),
            }),
            set: Some((
                super::render::address_type(table.family).into(),
                vec!["interval".into()],
            )),
            elements: table.elements.clone(),
            odd_elements: Vec::new(),
            rules: table
                .rules
                .iter()
                .map(|r| LiveRuleSpec {
                    statements: r.statements.clone(),
                    comment: Some(r.comment.clone()),
                    counters: None,
                })
                .collect(),
        }
    }

    /// The neutral view: the chain's postrouting hook is the way in, with the local skip
    /// when `fib daddr type local return` is the first rule; one keep rule per set element;
    /// the other rules typed. The reading itself goes along for `compare`.
    pub fn inspection(&self) -> Inspection {
        let hooked = self.table_exists
            && self
                .chain
                .as_ref()
                .is_some_and(|c| c.kind == "nat" && c.hook == "postrouting");
        let is_local_skip = |r: &LiveRuleSpec| r.statements.starts_with(LOCAL_SKIP);
        let skip = self.rules.first().filter(|r| is_local_skip(r));
        let mut entry_jumps = Vec::new();
        if let (true, Some(chain)) = (hooked, &self.chain) {
            entry_jumps.push(EntryJump {
                position: None,
                text: format!(
                    "type {} hook {} priority {}",
                    chain.kind, chain.hook, chain.priority
                ),
                counters: skip.and_then(|r| r.counters),
                skips_local: skip.is_some(),
            });
        }
        let mut rules = Vec::new();
        let owned = self.rules.iter().skip(usize::from(skip.is_some()));
        for rule in owned {
            let described = describe(&rule.statements);
            if described.set_lookup {
                for element in &self.elements {
                    let mut matches = described.matches.clone();
                    matches.destination = Some(AddressMatch {
                        negated: false,
                        nets: vec![*element],
                    });
                    rules.push(LiveRule {
                        number: rules.len() + 1,
                        matches,
                        verdict: described.verdict.clone(),
                        comment: rule.comment.clone(),
                        counters: None,
                        text: format!("element {element} of set {SET}"),
                    });
                }
                continue;
            }
            rules.push(LiveRule {
                number: rules.len() + 1,
                matches: described.matches,
                verdict: described.verdict,
                comment: rule.comment.clone(),
                counters: rule.counters,
                text: rule.statements.clone(),
            });
        }
        Inspection {
            installed: self.table_exists && self.chain.is_some(),
            rules,
            entry_jumps,
            hook_rules: self.rules.len(),
            reading: Some(std::sync::Arc::new(self.clone())),
            before: Vec::new(),
        }
    }
}

/// The rule that lets local destinations leave before our other rules.
pub(super) const LOCAL_SKIP: &str = "fib daddr type local return";

/// A rule's canonical statements taken apart.
struct Described {
    matches: Matches,
    verdict: Verdict,
    /// `daddr @nomasq`: the rule stands for one rule per element.
    set_lookup: bool,
}

/// `10.0.0.0/8`, `{ 10.0.0.0/8, 192.168.0.1 }` (bare addresses are host prefixes); the words
/// taken, or None when they are not addresses.
fn addresses(words: &[&str]) -> Option<(Vec<IpNet>, usize)> {
    let parse = crate::backend::net_or_host;
    if words.first() != Some(&"{") {
        return Some((vec![parse(words.first()?)?], 1));
    }
    let end = words.iter().position(|w| *w == "}")?;
    let nets = words[1..end]
        .iter()
        .map(|w| w.trim_end_matches(','))
        .filter(|w| !w.is_empty())
        .map(parse)
        .collect::<Option<Vec<_>>>()?;
    Some((nets, end + 1))
}

/// Takes canonical statements apart (the form `statements` writes and `render` plans).
fn describe(statements: &str) -> Described {
    let words: Vec<&str> = statements.split_whitespace().collect();
    let mut matches = Matches::default();
    let mut verdict = None;
    let mut set_lookup = false;
    let (mut ports, mut weight, mut fully_random) = (None, None, false);
    let mut i = 0;
    while i < words.len() {
        let rest = &words[i..];
        let taken = match rest {
            ["ip" | "ip6", side @ ("saddr" | "daddr"), tail @ ..] => match address_match(tail) {
                Some((AddressWords::SetLookup, used)) if *side == "daddr" => {
                    set_lookup = true;
                    Some(2 + used)
                }
                Some((AddressWords::Match(found), used)) => {
                    if *side == "saddr" {
                        matches.source = Some(found);
                    } else {
                        matches.destination = Some(found);
                    }
                    Some(2 + used)
                }
                _ => None,
            },
            ["meta", "l4proto", tail @ ..] => {
                let (protocols, used) = protocol_list(tail);
                matches.protocols = protocols;
                Some(2 + used)
            }
            ["numgen", "random", "mod", of, "<", taken, ..] => match (of.parse(), taken.parse()) {
                (Ok(of), Ok(taken)) => {
                    weight = Some(Weight { taken, of });
                    Some(6)
                }
                _ => None,
            },
            ["counter", ..] => Some(1),
            ["return", ..] => {
                verdict = Some(Verdict::Keep);
                Some(1)
            }
            ["masquerade", ..] => {
                verdict = Some(Verdict::Masquerade {
                    ports: None,
                    weight: None,
                    fully_random: false,
                });
                Some(1)
            }
            ["to", range, ..] if verdict.is_some() => {
                ports = crate::backend::port_range(range.trim_start_matches(':'));
                Some(2)
            }
            ["fully-random", ..] => {
                fully_random = true;
                Some(1)
            }
            _ => None,
        };
        match taken {
            Some(n) => i += n,
            None if verdict.is_none() && is_statement(words[i]) => {
                verdict = Some(Verdict::Foreign(words[i..].join(" ")));
                break;
            }
            None => {
                matches.unjudged.push(words[i].to_string());
                i += 1;
            }
        }
    }
    let verdict = match verdict {
        Some(Verdict::Masquerade { .. }) => Verdict::Masquerade {
            ports,
            weight,
            fully_random,
        },
        Some(verdict) => verdict,
        None => Verdict::Foreign("no verdict".into()),
    };
    Described {
        matches,
        verdict,
        set_lookup,
    }
}

/// What follows `ip saddr` / `ip daddr`.
enum AddressWords {
    Match(AddressMatch),
    /// `@nomasq`: our set.
    SetLookup,
}

/// `[!=] (CIDR | { CIDR, ... } | @nomasq)`, and how many words it took.
fn address_match(tail: &[&str]) -> Option<(AddressWords, usize)> {
    let negated = tail.first() == Some(&"!=");
    let tail = &tail[usize::from(negated)..];
    if !negated && tail.first() == Some(&format!("@{SET}").as_str()) {
        return Some((AddressWords::SetLookup, 1));
    }
    let (nets, used) = addresses(tail)?;
    Some((
        AddressWords::Match(AddressMatch { negated, nets }),
        usize::from(negated) + used,
    ))
}

/// `{ tcp, udp, sctp }` or `tcp`, and how many words it took.
fn protocol_list(tail: &[&str]) -> (Vec<String>, usize) {
    let (list, used) = if tail.first() == Some(&"{") {
        let end = tail.iter().position(|w| *w == "}").unwrap_or(tail.len());
        (&tail[1..end], end + 1)
    } else {
        (&tail[..tail.len().min(1)], 1)
    };
    let protocols = list
        .iter()
        .map(|w| w.trim_end_matches(',').to_string())
        .filter(|w| !w.is_empty())
        .collect();
    (protocols, used)
}

/// Words that begin a statement which decides (or rewrites) rather than matches.
fn is_statement(word: &str) -> bool {
    matches!(
        word,
        "snat" | "dnat" | "accept" | "drop" | "jump" | "goto" | "reject" | "redirect" | "notrack"
    )
}

/// Another table's nat postrouting base chain, from `nft -j list chain FAMILY TABLE NAME`:
/// its rules typed (what this tool cannot judge stays as the backend prints it).
pub(super) fn foreign_chain(json: &str, family: &str, table: &str, name: &str) -> Option<Before> {
    let root: Value = serde_json::from_str(json).ok()?;
    let mut priority = None;
    let mut rules = Vec::new();
    for item in root.get("nftables")?.as_array()? {
        if let Some(chain) = item.get("chain") {
            priority = chain.get("prio").and_then(Value::as_i64);
        } else if let Some(rule) = item.get("rule") {
            let exprs = rule
                .get("expr")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let (text, counters) = statements(exprs);
            let described = describe(&text);
            rules.push(LiveRule {
                number: rules.len() + 1,
                matches: described.matches,
                verdict: described.verdict,
                comment: rule
                    .get("comment")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                counters,
                text,
            });
        }
    }
    Some(Before {
        place: format!("table {family} {table} chain {name}"),
        priority,
        rules,
        keep_ends_walk: false,
    })
}
