//! The one comparison of desired and live state: every difference, in the neutral vocabulary,
//! and the repair it calls for; then the one iptables-restore transaction that makes it.

use super::render::{Rendered, POSTROUTING};
use super::saved::{describe_rule, Described, Jump, LiveChain};
use crate::backend::{Difference, DriftKind, RuleVerdict};
use crate::plan::ChainName;
use std::collections::HashMap;
use std::fmt::Write as _;

/// The POSTROUTING jumps to our chain, sorted by what a sync does with them.
#[derive(Debug, Default, PartialEq, Eq)]
struct JumpAudit<'a, 'b> {
    /// The first jump with the agent's exact spelling: the one kept.
    kept: Option<&'a Jump<'b>>,
    /// Further copies of the exact spelling.
    duplicates: Vec<&'a Jump<'b>>,
    /// Jumps to our chain with another spelling (an older comment, a hand-made rule).
    stale: Vec<&'a Jump<'b>>,
}

fn audit_jumps<'a, 'b>(desired: &Rendered, live: &'a LiveChain<'b>) -> JumpAudit<'a, 'b> {
    let mut audit = JumpAudit::default();
    for jump in &live.jumps {
        if jump.spec.as_ref() != desired.jump.as_str() {
            audit.stale.push(jump);
        } else if audit.kept.is_none() {
            audit.kept = Some(jump);
        } else {
            audit.duplicates.push(jump);
        }
    }
    audit
}

/// The differences for one family and what the repair transaction must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Drift {
    pub differences: Vec<Difference>,
    pub rewrite_chain: bool,
    /// Saved specs of jumps to delete, in live order.
    pub delete_jumps: Vec<String>,
    /// Jumps to delete that iptables-restore cannot express (a newline in a comment): removed
    /// with one `iptables -D` each, by their words, before the transaction.
    pub delete_separately: Vec<String>,
    /// Where the canonical jump goes afterwards: appended (none is kept), or re-inserted at a
    /// POSTROUTING position (duplicates were deleted with the kept copy).
    pub place_jump: Option<JumpPlacement>,
}

/// How the transaction (re)places the canonical jump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JumpPlacement {
    Append,
    Insert(usize),
}

impl Drift {
    pub fn is_empty(&self) -> bool {
        self.differences.is_empty()
    }
}

/// A rule in a few words: `RETURN 10.0.0.0/8`, `MASQUERADE tcp 1024-29999 random-fully`.
fn summary(rule: &Described) -> String {
    let mut parts = Vec::new();
    let (ports, weight, fully_random) = match &rule.verdict {
        Some(RuleVerdict::Keep) => {
            parts.push("RETURN".to_string());
            (None, None, false)
        }
        Some(RuleVerdict::Masquerade {
            snat_to,
            ports,
            weight,
            fully_random,
        }) => {
            parts.push(match snat_to {
                Some(address) => format!("SNAT {address}"),
                None => "MASQUERADE".to_string(),
            });
            (*ports, *weight, *fully_random)
        }
        Some(RuleVerdict::Foreign(target)) => {
            parts.push(target.clone());
            (None, None, false)
        }
        None => {
            parts.push(String::new());
            (None, None, false)
        }
    };
    parts.extend(rule.matches.destination.as_ref().map(ToString::to_string));
    parts.extend(
        rule.matches
            .output_interface
            .as_ref()
            .map(|i| format!("out {i}")),
    );
    parts.extend(rule.matches.protocols.iter().cloned());
    parts.extend(ports.map(|(a, b)| format!("{a}-{b}")));
    parts.extend(weight.map(|w| format!("p={:.11}", w.share())));
    if fully_random {
        parts.push("random-fully".into());
    }
    parts.extend(rule.matches.unjudged.iter().cloned());
    parts.join(" ")
}

/// Rule-level differences of an existing chain whose rules are not the planned ones.
fn rule_differences(desired: &Rendered, live: &LiveChain, out: &mut Vec<Difference>) {
    let diff = |kind, position, detail| Difference {
        family: desired.family,
        kind,
        position,
        detail,
    };
    let mut available: HashMap<&str, usize> = HashMap::new();
    for line in &live.rules {
        *available.entry(line.as_ref()).or_default() += 1;
    }
    let mut missing = Vec::new();
    for (i, line) in desired.lines.iter().enumerate() {
        match available.get_mut(line.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => missing.push(diff(
                DriftKind::MissingRule,
                Some(i + 1),
                format!("rule {} missing: {}", i + 1, summary(&describe_rule(line))),
            )),
        }
    }
    let mut wanted: HashMap<&str, usize> = HashMap::new();
    for line in &desired.lines {
        *wanted.entry(line.as_str()).or_default() += 1;
    }
    let mut extra = Vec::new();
    for (i, line) in live.rules.iter().enumerate() {
        match wanted.get_mut(line.as_ref()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => extra.push(diff(
                DriftKind::ExtraRule,
                Some(i + 1),
                format!(
                    "rule {} not planned: {}",
                    i + 1,
                    summary(&describe_rule(line))
                ),
            )),
        }
    }
    if missing.is_empty() && extra.is_empty() {
        for (i, (want, got)) in desired.lines.iter().zip(&live.rules).enumerate() {
            if want.as_str() != got.as_ref() {
                out.push(diff(
                    DriftKind::OutOfOrder,
                    Some(i + 1),
                    format!(
                        "rule {} is {}, planned {}",
                        i + 1,
                        summary(&describe_rule(got)),
                        summary(&describe_rule(want))
                    ),
                ));
            }
        }
    }
    out.extend(missing);
    out.extend(extra);
}

/// Compares desired and live state; an empty drift means "write nothing".
// Long: the chain's rewrite and the jumps' audit decide together which `-D`s and `-I` one
// transaction holds; split, each half would need the other's verdicts passed back in.
pub(super) fn diff(desired: &Rendered, live: &LiveChain) -> Drift {
    let family = desired.family;
    let chain = &desired.chain;
    let mut differences = Vec::new();
    let same_rules = live.rules.len() == desired.lines.len()
        && live
            .rules
            .iter()
            .zip(&desired.lines)
            .all(|(have, want)| have.as_ref() == want.as_str());
    let rewrite_chain = !live.chain_exists || !same_rules;
    if !live.chain_exists {
        differences.push(Difference {
            family,
            kind: DriftKind::ChainMissing,
            position: None,
            detail: format!("chain {chain} does not exist"),
        });
    } else if rewrite_chain {
        rule_differences(desired, live, &mut differences);
    }
    let jumps = audit_jumps(desired, live);
    match jumps.kept {
        None => differences.push(Difference {
            family,
            kind: DriftKind::JumpMissing,
            position: None,
            detail: format!("no POSTROUTING jump to {chain} with the agent's spelling"),
        }),
        Some(kept) if !jumps.duplicates.is_empty() => {
            let positions: Vec<usize> = std::iter::once(kept)
                .chain(jumps.duplicates.iter().copied())
                .map(|j| j.position)
                .collect();
            differences.push(Difference {
                family,
                kind: DriftKind::JumpDuplicated,
                position: Some(jumps.duplicates[0].position),
                detail: format!(
                    "POSTROUTING jumps to {chain} {} times (rules {positions:?})",
                    positions.len(),
                ),
            });
        }
        Some(_) => {}
    }
    for jump in &jumps.stale {
        differences.push(Difference {
            family,
            kind: DriftKind::JumpStale,
            position: Some(jump.position),
            detail: format!(
                "POSTROUTING rule {} jumps to {chain} with another spelling: {}",
                jump.position, jump.spec
            ),
        });
    }
    // Stale jumps go. Duplicates go together with the kept copy, which is re-inserted where
    // it was: `-D` of a missing rule fails the whole transaction, so when another writer
    // removed a copy since we looked, nothing is applied (and the next pass sees the truth)
    // instead of both writers deleting "the duplicate" and leaving no jump at all.
    let (delete_jumps, place_jump) = match jumps.kept {
        None => (
            live.jumps.iter().map(|j| j.spec.to_string()).collect(),
            Some(JumpPlacement::Append),
        ),
        Some(kept) if !jumps.duplicates.is_empty() => {
            let stale_before = jumps
                .stale
                .iter()
                .filter(|j| j.position < kept.position)
                .count();
            (
                live.jumps.iter().map(|j| j.spec.to_string()).collect(),
                Some(JumpPlacement::Insert(kept.position - stale_before)),
            )
        }
        Some(_) => (
            jumps.stale.iter().map(|j| j.spec.to_string()).collect(),
            None,
        ),
    };
    let (delete_separately, delete_jumps) = split_unrestorable(delete_jumps);
    Drift {
        differences,
        rewrite_chain,
        delete_jumps,
        delete_separately,
        place_jump,
    }
}

/// Splits specs into (those iptables-restore cannot take, those it can).
fn split_unrestorable(specs: Vec<String>) -> (Vec<String>, Vec<String>) {
    specs.into_iter().partition(|s| s.contains('\n'))
}

/// Notes in a printed transaction for the deletions made outside it.
fn separate_notes(script: &mut String, specs: &[String]) {
    for spec in specs {
        let _ = writeln!(
            script,
            "# before this transaction, outside it (iptables-restore cannot read a newline in a rule): iptables -t nat -D {POSTROUTING} {}",
            spec.replace('\n', "\\n")
        );
    }
}

/// The one iptables-restore input that repairs `drift`: only our chain and our jumps.
pub(super) fn transaction(desired: &Rendered, drift: &Drift) -> String {
    let chain = &desired.chain;
    let size = desired.lines.iter().map(|l| l.len() + 1).sum::<usize>() + 512;
    let mut script = String::with_capacity(size);
    separate_notes(&mut script, &drift.delete_separately);
    script.push_str("*nat\n");
    if drift.rewrite_chain {
        // Declaring a chain under --noflush creates it, or flushes it if it exists.
        let _ = writeln!(script, ":{chain} - [0:0]");
    }
    for spec in &drift.delete_jumps {
        let _ = writeln!(script, "-D {POSTROUTING} {spec}");
    }
    match drift.place_jump {
        Some(JumpPlacement::Append) => {
            let _ = writeln!(script, "-A {POSTROUTING} {}", desired.jump);
        }
        Some(JumpPlacement::Insert(position)) => {
            let _ = writeln!(script, "-I {POSTROUTING} {position} {}", desired.jump);
        }
        None => {}
    }
    if drift.rewrite_chain {
        for line in &desired.lines {
            script.push_str(line);
            script.push('\n');
        }
    }
    script.push_str("COMMIT\n");
    script
}

/// What removes our jumps and chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cleanup {
    /// Jumps iptables-restore cannot express, deleted one by one first.
    pub delete_separately: Vec<String>,
    /// The transaction; `None` when there is nothing to remove.
    pub script: Option<String>,
}

/// What removes our jumps and chain, or why it cannot be done: a rule of another chain that
/// jumps to ours keeps it in use, and deleting that rule is its owner's decision.
pub(super) fn cleanup_transaction(chain: &ChainName, live: &LiveChain) -> Result<Cleanup, String> {
    if let Some(reference) = live.references.first() {
        let others = live.references.len() - 1;
        let more = if others > 0 {
            format!(" (and {others} more)")
        } else {
            String::new()
        };
        return Err(format!(
            "chain {chain} is still used by a rule that is not ours: `{reference}`{more}; nothing was removed. Delete that rule (iptables -t nat {}) if nothing needs it, then run cleanup again",
            reference.replacen("-A ", "-D ", 1)
        ));
    }
    if !live.chain_exists && live.jumps.is_empty() {
        return Ok(Cleanup {
            delete_separately: Vec::new(),
            script: None,
        });
    }
    let (delete_separately, restorable) =
        split_unrestorable(live.jumps.iter().map(|j| j.spec.to_string()).collect());
    let mut script = String::new();
    separate_notes(&mut script, &delete_separately);
    script.push_str("*nat\n");
    for spec in &restorable {
        let _ = writeln!(script, "-D {POSTROUTING} {spec}");
    }
    if live.chain_exists {
        let _ = writeln!(script, ":{chain} - [0:0]");
        let _ = writeln!(script, "-X {chain}");
    }
    script.push_str("COMMIT\n");
    Ok(Cleanup {
        delete_separately,
        script: Some(script),
    })
}
