//! Reading `iptables-save` output: our chain, the POSTROUTING jumps to it, counters, and the
//! rules taken apart for display. Also the mapping between this saved form and the neutral
//! [`Inspection`].

use super::render::POSTROUTING;
use crate::backend::{Counters, EntryJump, Inspection, LiveDecision, LiveRule, RuleView};
use crate::plan::{Action, ChainName};
use std::borrow::Cow;

/// A POSTROUTING rule that jumps to our chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Jump<'a> {
    /// 1-based position in POSTROUTING.
    pub position: usize,
    /// The rule as saved, without `-A POSTROUTING `.
    pub spec: Cow<'a, str>,
    pub counters: Option<Counters>,
}

/// What the nat table holds of ours. Rules borrow from the save they were read from (a
/// steady pass over 75,000 rules then holds the save once, not twice).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LiveChain<'a> {
    pub chain_exists: bool,
    /// Our chain's rules as saved (`-A CHAIN ...` lines, without counters), in order.
    pub rules: Vec<Cow<'a, str>>,
    /// Each rule's counters, when the save was taken with `-c`.
    pub counters: Vec<Option<Counters>>,
    /// Every POSTROUTING jump to our chain, whatever its comment.
    pub jumps: Vec<Jump<'a>>,
    /// How many rules POSTROUTING holds in all.
    pub postrouting_rules: usize,
    /// Rules of other nat chains that jump to ours (not ours: they keep our chain in use).
    pub references: Vec<String>,
}

/// Splits `[packets:bytes] rest` (a `-c` save line) into counters and the rule.
fn split_counters(line: &str) -> (Option<Counters>, &str) {
    let Some(rest) = line.strip_prefix('[') else {
        return (None, line);
    };
    let Some((numbers, rule)) = rest.split_once("] ") else {
        return (None, line);
    };
    let parsed = numbers.split_once(':').and_then(|(p, b)| {
        Some(Counters {
            packets: p.parse().ok()?,
            bytes: b.parse().ok()?,
        })
    });
    match parsed {
        Some(counters) => (Some(counters), rule),
        None => (None, line),
    }
}

/// Extracts our chain and jumps from `iptables-save` output (with or without `-c`, one table
/// or all: only the nat table is read).
pub(super) fn parse_saved<'a>(saved: &'a str, chain: &ChainName) -> LiveChain<'a> {
    let mut live = LiveChain::default();
    let declaration = format!(":{chain} ");
    let rule_prefix = format!("-A {chain} ");
    let postrouting_prefix = format!("-A {POSTROUTING} ");
    let mut in_nat = false;
    for logical in logical_lines(saved) {
        let raw = logical.as_ref();
        // A part of this line, borrowed from the save when the line is one of its lines.
        let keep = |part: &str| -> Cow<'a, str> {
            match &logical {
                Cow::Borrowed(line) => {
                    let start = part.as_ptr() as usize - line.as_ptr() as usize;
                    Cow::Borrowed(&line[start..start + part.len()])
                }
                Cow::Owned(_) => Cow::Owned(part.to_string()),
            }
        };
        if let Some(table) = raw.strip_prefix('*') {
            in_nat = table.trim() == "nat";
            continue;
        }
        if !in_nat {
            continue;
        }
        let (counters, line) = split_counters(raw);
        if line.starts_with(&declaration) {
            live.chain_exists = true;
        } else if line.starts_with(&rule_prefix) {
            live.rules.push(keep(line));
            live.counters.push(counters);
        } else if let Some(spec) = line.strip_prefix(&postrouting_prefix) {
            live.postrouting_rules += 1;
            if jump_target(spec).is_some_and(|t| t == chain.as_str()) {
                live.jumps.push(Jump {
                    position: live.postrouting_rules,
                    spec: keep(spec),
                    counters,
                });
            }
        } else if line.starts_with("-A ") && jump_target(line).is_some_and(|t| t == chain.as_str())
        {
            live.references.push(line.to_string());
        }
    }
    live
}

/// The save's lines, with a quoted word that spans lines (a comment holding a newline) kept in
/// one logical line, as iptables-save prints it and iptables-restore cannot read it back.
fn logical_lines(saved: &str) -> impl Iterator<Item = Cow<'_, str>> {
    let mut lines = saved.lines();
    std::iter::from_fn(move || {
        let first = lines.next()?;
        if !has_open_quote(first) {
            return Some(Cow::Borrowed(first));
        }
        let mut joined = first.to_string();
        while has_open_quote(&joined) {
            let Some(next) = lines.next() else { break };
            joined.push('\n');
            joined.push_str(next);
        }
        Some(Cow::Owned(joined))
    })
}

/// Whether a line ends inside a double-quoted word (`\"` and `\\` are escapes).
fn has_open_quote(line: &str) -> bool {
    let mut open = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if open => {
                chars.next();
            }
            '"' => open = !open,
            _ => {}
        }
    }
    open
}

impl<'a> LiveChain<'a> {
    /// The neutral view of this chain.
    pub fn inspection(&self) -> Inspection {
        Inspection {
            installed: self.chain_exists,
            rules: self
                .rules
                .iter()
                .enumerate()
                .map(|(i, line)| {
                    let view = describe_rule(line);
                    LiveRule {
                        number: i + 1,
                        decision: live_decision(&view),
                        view,
                        counters: self.counters.get(i).copied().flatten(),
                        text: line.to_string(),
                    }
                })
                .collect(),
            entry_jumps: self
                .jumps
                .iter()
                .map(|j| EntryJump {
                    position: j.position,
                    text: j.spec.to_string(),
                    counters: j.counters,
                })
                .collect(),
            hook_rules: self.postrouting_rules,
            raw: None,
        }
    }

    /// Back from the neutral view (it keeps the saved text of every rule and jump).
    pub fn from_inspection(live: &'a Inspection) -> Self {
        LiveChain {
            chain_exists: live.installed,
            rules: live
                .rules
                .iter()
                .map(|r| Cow::Borrowed(r.text.as_str()))
                .collect(),
            counters: live.rules.iter().map(|r| r.counters).collect(),
            jumps: live
                .entry_jumps
                .iter()
                .map(|j| Jump {
                    position: j.position,
                    spec: Cow::Borrowed(j.text.as_str()),
                    counters: j.counters,
                })
                .collect(),
            postrouting_rules: live.hook_rules,
            references: Vec::new(),
        }
    }
}

/// The plan decision a rule implements, when it is one of the shapes we write.
fn live_decision(view: &RuleView) -> Option<LiveDecision> {
    if !view.other.is_empty() {
        return None;
    }
    let destination = match &view.destination {
        Some(text) => Some(text.parse().ok()?),
        None => None,
    };
    let action = match view.action.as_str() {
        "RETURN" if destination.is_some() && view.protocol.is_none() => Action::KeepSource,
        "MASQUERADE" => Action::Masquerade,
        _ => return None,
    };
    Some(LiveDecision {
        destination,
        action,
    })
}

/// Takes a saved `-A CHAIN ...` line apart.
pub(super) fn describe_rule(line: &str) -> RuleView {
    let tokens = tokenize(line);
    let mut view = RuleView::default();
    let mut i = 0;
    // Skip "-A CHAIN".
    if tokens.first().map(String::as_str) == Some("-A") {
        i = 2;
    }
    let value = |i: usize| tokens.get(i + 1).cloned();
    while i < tokens.len() {
        let token = tokens[i].as_str();
        let step = match token {
            "-s" => {
                view.source = value(i);
                2
            }
            "!" if tokens.get(i + 1).map(String::as_str) == Some("-s") => {
                view.source = tokens.get(i + 2).map(|s| format!("!{s}"));
                3
            }
            "-d" => {
                view.destination = value(i);
                2
            }
            "-p" => {
                view.protocol = value(i);
                2
            }
            "-j" => {
                view.action = value(i).unwrap_or_default();
                2
            }
            "--to-ports" => {
                view.to_ports = value(i);
                2
            }
            "--random-fully" => {
                view.random_fully = true;
                1
            }
            "--probability" => {
                view.probability = value(i);
                2
            }
            "--comment" => {
                view.comment = value(i);
                2
            }
            "-m" if matches!(
                tokens.get(i + 1).map(String::as_str),
                Some("comment" | "statistic")
            ) =>
            {
                2
            }
            "--mode" if tokens.get(i + 1).map(String::as_str) == Some("random") => 2,
            _ => {
                view.other.push(token.to_string());
                1
            }
        };
        i += step;
    }
    view
}

/// The target of a saved rule's `-j`/`-g`, if any.
pub(super) fn jump_target(spec: &str) -> Option<String> {
    let tokens = tokenize(spec);
    let index = tokens.iter().rposition(|t| t == "-j" || t == "-g")?;
    tokens.get(index + 1).cloned()
}

/// Splits a saved rule into words the way iptables-restore does: whitespace-separated, with
/// double-quoted words whose `\"` and `\\` are escapes.
pub(super) fn tokenize(spec: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = spec.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        let mut word = String::new();
        if first == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(escaped) = chars.next() {
                            word.push(escaped);
                        }
                    }
                    '"' => break,
                    c => word.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        tokens.push(word);
    }
    tokens
}
