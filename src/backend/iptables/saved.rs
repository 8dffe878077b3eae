//! Reading `iptables-save` output: our chain, the POSTROUTING jumps to it, counters, and the
//! rules taken apart for display. Also the mapping between this saved form and the neutral
//! [`Inspection`].

use super::render::POSTROUTING;
use crate::backend::{
    AddressMatch, Before, Counters, EntryJump, Inspection, LiveRule, Matches, RuleVerdict, Weight,
};
use crate::plan::ChainName;
use ipnet::IpNet;
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
    /// POSTROUTING rules above our first jump (position, rule, counters): they run first.
    pub before: Vec<(usize, Cow<'a, str>, Option<Counters>)>,
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
            } else if live.jumps.is_empty() {
                live.before
                    .push((live.postrouting_rules, keep(spec), counters));
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
            pod_share: None,
            installed: self.chain_exists,
            rules: self
                .rules
                .iter()
                .enumerate()
                .map(|(i, line)| {
                    let described = describe_rule(line);
                    LiveRule {
                        number: i + 1,
                        matches: described.matches,
                        verdict: described
                            .verdict
                            .unwrap_or_else(|| RuleVerdict::Foreign("no target".into())),
                        comment: described.comment,
                        counters: self.counters.get(i).copied().flatten(),
                        text: line.to_string(),
                    }
                })
                .collect(),
            entry_jumps: self
                .jumps
                .iter()
                .map(|j| EntryJump {
                    position: Some(j.position),
                    text: j.spec.to_string(),
                    counters: j.counters,
                    skips_local: skips_local(&j.spec),
                })
                .collect(),
            hook_rules: self.postrouting_rules,
            before: self.before_us(),
        }
    }

    /// POSTROUTING's rules above our first jump, typed (none when nothing jumps to us).
    fn before_us(&self) -> Vec<Before> {
        if self.jumps.is_empty() || self.before.is_empty() {
            return Vec::new();
        }
        let rules = self
            .before
            .iter()
            .map(|(position, spec, counters)| {
                let described = describe_rule(spec);
                LiveRule {
                    number: *position,
                    matches: described.matches,
                    verdict: described
                        .verdict
                        .unwrap_or_else(|| RuleVerdict::Foreign("no target".into())),
                    comment: described.comment,
                    counters: *counters,
                    text: format!("-A {POSTROUTING} {spec}"),
                }
            })
            .collect();
        vec![Before {
            place: POSTROUTING.to_string(),
            priority: None,
            rules,
            keep_ends_walk: true,
        }]
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
                    position: j.position.unwrap_or(0),
                    spec: Cow::Borrowed(j.text.as_str()),
                    counters: j.counters,
                })
                .collect(),
            postrouting_rules: live.hook_rules,
            references: Vec::new(),
            before: Vec::new(),
        }
    }
}

/// Whether a POSTROUTING jump lets local destinations pass (`-m addrtype ! --dst-type LOCAL`).
fn skips_local(spec: &str) -> bool {
    let tokens = tokenize(spec);
    tokens
        .windows(3)
        .any(|w| w[0] == "!" && w[1] == "--dst-type" && w[2] == "LOCAL")
}

/// A saved rule taken apart: typed matches, verdict and comment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Described {
    pub matches: Matches,
    pub verdict: Option<RuleVerdict>,
    pub comment: Option<String>,
}

/// `10.0.0.0/8` or `10.0.0.0/8,192.168.0.0/16` (iptables-save prints one per rule; a hand
/// edit may list several), bare addresses as host prefixes.
fn address_list(text: &str, negated: bool) -> Option<AddressMatch> {
    let nets = text
        .split(',')
        .map(crate::backend::net_or_host)
        .collect::<Option<Vec<IpNet>>>()?;
    Some(AddressMatch { negated, nets })
}

/// `--probability 0.46929256292` as an exact fraction of 10^digits.
pub(super) fn weight_of(text: &str) -> Option<Weight> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = u32::try_from(fraction.len()).ok().filter(|d| *d <= 18)?;
    let of = 10u64.pow(digits);
    let taken = whole.parse::<u64>().ok()? * of + fraction.parse::<u64>().unwrap_or(0);
    Some(Weight { taken, of })
}

/// Takes a saved `-A CHAIN ...` line apart.
pub(super) fn describe_rule(line: &str) -> Described {
    let tokens = tokenize(line);
    let mut out = Described::default();
    let (mut target, mut ports, mut weight, mut fully_random) = (None, None, None, false);
    let mut snat_to = None;
    // Skip "-A CHAIN".
    let mut i = if tokens.first().map(String::as_str) == Some("-A") {
        2
    } else {
        0
    };
    let at = |k: usize| tokens.get(k).map(String::as_str);
    while i < tokens.len() {
        let negated = at(i) == Some("!");
        let option = if negated { at(i + 1) } else { at(i) };
        let value = if negated { at(i + 2) } else { at(i + 1) };
        let width = if negated { 3 } else { 2 };
        let judged = match (option, value) {
            (Some("-s"), Some(v)) => address_list(v, negated).map(|m| out.matches.source = Some(m)),
            (Some("-d"), Some(v)) => {
                address_list(v, negated).map(|m| out.matches.destination = Some(m))
            }
            (Some("-o"), Some(v)) if !negated => crate::config::egress::InterfacePattern::parse(v)
                .ok()
                .map(|p| out.matches.output_interface = Some(p)),
            (Some("-p"), Some(v)) if !negated => {
                out.matches.protocols = vec![v.to_string()];
                Some(())
            }
            (Some("-j"), Some(v)) if !negated => {
                if v != "RETURN" && v != "MASQUERADE" && v != "SNAT" {
                    // Another target: what follows are its own options.
                    target = Some(tokens[i + 1..].join(" "));
                    break;
                }
                target = Some(v.to_string());
                Some(())
            }
            (Some("--to-ports"), Some(v)) if !negated => {
                crate::backend::port_range(v).map(|p| ports = Some(p))
            }
            (Some("--to-source"), Some(v)) if !negated && target.as_deref() == Some("SNAT") => {
                crate::backend::address_and_ports(v).map(|(address, range)| {
                    snat_to = Some(address);
                    ports = range;
                })
            }
            (Some("--probability"), Some(v)) if !negated => weight_of(v).map(|w| weight = Some(w)),
            (Some("--comment"), Some(v)) if !negated => {
                out.comment = Some(v.to_string());
                Some(())
            }
            (Some("-m"), Some("comment" | "statistic")) if !negated => Some(()),
            (Some("--mode"), Some("random")) if !negated => Some(()),
            (Some("--random-fully"), _) if !negated => {
                fully_random = true;
                i += 1;
                continue;
            }
            _ => None,
        };
        if judged.is_some() {
            i += width;
        } else {
            out.matches.unjudged.push(tokens[i].clone());
            i += 1;
        }
    }
    out.verdict = target.map(|t| match t.as_str() {
        "RETURN" => RuleVerdict::Keep,
        "MASQUERADE" => RuleVerdict::Masquerade {
            snat_to: None,
            ports,
            weight,
            fully_random,
        },
        "SNAT" if snat_to.is_some() => RuleVerdict::Masquerade {
            snat_to,
            ports,
            weight,
            fully_random,
        },
        _ => RuleVerdict::Foreign(t),
    });
    out
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
