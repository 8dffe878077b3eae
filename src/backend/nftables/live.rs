//! Reading our table back from `nft -j list table`: the chain's hook, the set's type and
//! elements, and every rule as the same canonical text the desired model uses, with its
//! counters. Also the neutral [`Inspection`] made from it.

use super::render::{CHAIN, NON_MASQ_COMMENT, SET};
use crate::backend::{Counters, EntryJump, Inspection, LiveDecision, LiveRule, RuleView};
use crate::plan::Action;
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
            "masquerade" => Some(masquerade_text(body)),
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

    /// The neutral view: the entry rule (`fib daddr type local return`) as the entry jump,
    /// one RETURN per set element, then the other rules.
    pub fn inspection(&self, raw: String) -> Inspection {
        let mut rules = Vec::new();
        let mut entry_jumps = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.statements.starts_with("fib daddr type local return") {
                entry_jumps.push(EntryJump {
                    position: i + 1,
                    text: rule.statements.clone(),
                    counters: rule.counters,
                });
                continue;
            }
            if rule.statements.ends_with(&format!("@{SET} return")) {
                for element in &self.elements {
                    rules.push(LiveRule {
                        number: rules.len() + 1,
                        view: RuleView {
                            action: "RETURN".into(),
                            destination: Some(element.to_string()),
                            comment: Some(NON_MASQ_COMMENT.into()),
                            ..RuleView::default()
                        },
                        decision: Some(LiveDecision {
                            destination: Some(*element),
                            action: Action::KeepSource,
                        }),
                        counters: None,
                        text: format!("element {element} of set {SET}"),
                    });
                }
                continue;
            }
            let view = describe(rule);
            let decision = (view.action == "MASQUERADE").then_some(LiveDecision {
                destination: None,
                action: Action::Masquerade,
            });
            rules.push(LiveRule {
                number: rules.len() + 1,
                view,
                decision,
                counters: rule.counters,
                text: rule.statements.clone(),
            });
        }
        Inspection {
            installed: self.table_exists && self.chain.is_some(),
            rules,
            entry_jumps,
            hook_rules: self.rules.len(),
            raw: Some(raw),
        }
    }
}

/// A masquerade (or foreign) rule taken apart for `show`'s table.
fn describe(rule: &LiveRuleSpec) -> RuleView {
    let words: Vec<&str> = rule.statements.split_whitespace().collect();
    let mut view = RuleView {
        comment: rule.comment.clone(),
        ..RuleView::default()
    };
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "masquerade" => view.action = "MASQUERADE".into(),
            "return" => view.action = "RETURN".into(),
            "fully-random" => view.random_fully = true,
            "counter" => {}
            "ip" | "ip6" if words.get(i + 1) == Some(&"saddr") => {
                // ip saddr [!=] (CIDR | { CIDR, ... })
                let mut k = i + 2;
                let negated = words.get(k) == Some(&"!=");
                if negated {
                    k += 1;
                }
                let mut nets = Vec::new();
                while let Some(w) = words.get(k) {
                    let w = w.trim_matches(|c| c == '{' || c == ',' || c == '}');
                    if w.parse::<IpNet>().is_ok() || w.parse::<std::net::IpAddr>().is_ok() {
                        nets.push(w.to_string());
                    } else if !w.is_empty() {
                        break;
                    }
                    k += 1;
                }
                view.source = Some(format!(
                    "{}{}",
                    if negated { "!" } else { "" },
                    nets.join(",")
                ));
                i = k - 1;
            }
            "to" => {
                view.to_ports = words
                    .get(i + 1)
                    .map(|p| p.trim_start_matches(':').to_string());
                i += 1;
            }
            "meta" if words.get(i + 1) == Some(&"l4proto") => {
                let end = words[i..]
                    .iter()
                    .position(|w| *w == "}")
                    .map_or(words.len(), |p| i + p);
                let protocols: Vec<&str> = words[i + 2..end]
                    .iter()
                    .map(|w| w.trim_matches(|c| c == '{' || c == ',' || c == '}'))
                    .filter(|w| !w.is_empty())
                    .collect();
                view.protocol = Some(protocols.join(","));
                i = end;
            }
            "numgen" => {
                // numgen random mod OF < TAKEN
                let number = |k: usize| words.get(k).and_then(|w| w.parse::<f64>().ok());
                if let (Some(of), Some(taken)) = (number(i + 3), number(i + 5)) {
                    view.probability = Some(format!("{:.11}", taken / of));
                }
                i += 5;
            }
            other => view.other.push(other.to_string()),
        }
        i += 1;
    }
    view
}
