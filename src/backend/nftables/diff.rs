//! The comparison of our desired and live table, in the neutral vocabulary, and the repair it
//! calls for: nothing, only the set's elements, the whole table in place, or the table
//! recreated (when its hook or its set's type cannot be changed in place).

use super::live::LiveTable;
use super::render::{address_type, DesiredTable, PRIORITY_VALUE, SET};
use crate::backend::{Difference, DriftKind};
use ipnet::IpNet;

/// At most this many element differences are itemised; the rest are summed up in one.
const ITEMISED_ELEMENTS: usize = 20;

/// How to bring the live table back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Repair {
    None,
    /// Only elements differ: delete these, add those.
    Elements {
        remove: Vec<IpNet>,
        add: Vec<IpNet>,
    },
    /// Rewrite the table's content, keeping the table and its hooked chain.
    Rewrite,
    /// Delete and create the table (hook, priority or set type differ).
    Recreate,
}

/// The differences and the repair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Drift {
    pub differences: Vec<Difference>,
    pub repair: Repair,
}

pub(super) fn diff(desired: &DesiredTable, live: &LiveTable) -> Drift {
    let family = desired.family;
    let d = |kind, position, detail: String| Difference {
        family,
        kind,
        position,
        detail,
    };
    let mut out = Vec::new();
    let Some(chain) = live.chain.as_ref().filter(|_| live.table_exists) else {
        out.push(d(
            DriftKind::ChainMissing,
            None,
            format!(
                "table {} ipmasq or its chain does not exist",
                super::render::family_word(family)
            ),
        ));
        out.push(d(
            DriftKind::JumpMissing,
            None,
            "no postrouting hook of ours".into(),
        ));
        return Drift {
            differences: out,
            repair: Repair::Rewrite,
        };
    };
    let mut recreate = false;
    if chain.kind != "nat"
        || chain.hook != "postrouting"
        || chain.priority != PRIORITY_VALUE
        || chain.policy != "accept"
    {
        recreate = true;
        out.push(d(
            DriftKind::HookDiffers,
            None,
            format!(
                "chain hooked as type {} hook {} priority {} policy {}, planned nat postrouting {PRIORITY_VALUE} accept",
                chain.kind, chain.hook, chain.priority, chain.policy
            ),
        ));
    }
    let mut rewrite = false;
    match &live.set {
        None => {
            rewrite = true;
            out.push(d(
                DriftKind::MissingRule,
                None,
                format!("set {SET} does not exist"),
            ));
        }
        Some((kind, flags))
            if kind != address_type(family) || flags != &["interval".to_string()] =>
        {
            recreate = true;
            out.push(d(
                DriftKind::SetDiffers,
                None,
                format!(
                    "set {SET} is type {kind} flags {flags:?}, planned {} interval",
                    address_type(family)
                ),
            ));
        }
        Some(_) => {}
    }
    // Elements: both lists are sorted, so one merge finds what to add and what to remove.
    let (add, remove) = sorted_difference(&desired.elements, &live.elements);
    for (kind, list, verb) in [
        (DriftKind::MissingRule, &add, "missing from"),
        (DriftKind::ExtraRule, &remove, "not planned in"),
    ] {
        for net in list.iter().take(ITEMISED_ELEMENTS) {
            out.push(d(kind, None, format!("{net} {verb} set {SET}")));
        }
        if list.len() > ITEMISED_ELEMENTS {
            out.push(d(
                kind,
                None,
                format!(
                    "and {} more elements {verb} set {SET}",
                    list.len() - ITEMISED_ELEMENTS
                ),
            ));
        }
    }
    if !live.odd_elements.is_empty() {
        rewrite = true;
        out.push(d(
            DriftKind::ExtraRule,
            None,
            format!(
                "set {SET} holds elements we do not write: {}",
                live.odd_elements.join(", ")
            ),
        ));
    }
    // Rules, the entry rule first.
    let (entry, rest) = desired
        .rules
        .split_first()
        .expect("the entry rule is always planned");
    let is_entry = |statements: &str| statements == entry.statements;
    let entries: Vec<usize> = live
        .rules
        .iter()
        .enumerate()
        .filter(|(_, r)| is_entry(&r.statements))
        .map(|(i, _)| i + 1)
        .collect();
    match entries.as_slice() {
        [] => {
            rewrite = true;
            out.push(d(
                DriftKind::LocalSkipMissing,
                Some(1),
                "no `fib daddr type local return` rule: local destinations are masqueraded".into(),
            ));
        }
        [1] => {
            if live.rules[0].comment.as_deref() != Some(entry.comment.as_str()) {
                rewrite = true;
                out.push(d(
                    DriftKind::ExtraRule,
                    Some(1),
                    "the local-skip rule's comment differs from the planned one".into(),
                ));
            }
        }
        [other] => {
            rewrite = true;
            out.push(d(
                DriftKind::LocalSkipMissing,
                Some(*other),
                format!("`fib daddr type local return` is rule {other}, not the first: local destinations meet the rules before it"),
            ));
        }
        [_, second, ..] => {
            rewrite = true;
            out.push(d(
                DriftKind::ExtraRule,
                Some(*second),
                format!(
                    "`fib daddr type local return` is there {} times (rules {entries:?})",
                    entries.len()
                ),
            ));
        }
    }
    let want_rules: Vec<(&str, &str)> = rest
        .iter()
        .map(|r| (r.statements.as_str(), r.comment.as_str()))
        .collect();
    let have_rules: Vec<(&str, &str)> = live
        .rules
        .iter()
        .filter(|r| !is_entry(&r.statements))
        .map(|r| (r.statements.as_str(), r.comment.as_deref().unwrap_or("")))
        .collect();
    if want_rules != have_rules {
        rewrite = true;
        let mut missing = Vec::new();
        let mut extra = Vec::new();
        for (i, rule) in want_rules.iter().enumerate() {
            if !have_rules.contains(rule) {
                missing.push(d(
                    DriftKind::MissingRule,
                    Some(i + 2),
                    format!("rule {} missing: {}", i + 2, rule.0),
                ));
            }
        }
        for (i, rule) in have_rules.iter().enumerate() {
            if !want_rules.contains(rule) {
                extra.push(d(
                    DriftKind::ExtraRule,
                    Some(i + 2),
                    format!("rule {} not planned: {}", i + 2, rule.0),
                ));
            }
        }
        if missing.is_empty() && extra.is_empty() {
            out.push(d(
                DriftKind::OutOfOrder,
                None,
                "the rules are in another order".into(),
            ));
        }
        out.extend(missing);
        out.extend(extra);
    }
    let repair = if recreate {
        Repair::Recreate
    } else if rewrite {
        Repair::Rewrite
    } else if !add.is_empty() || !remove.is_empty() {
        Repair::Elements { remove, add }
    } else {
        Repair::None
    };
    Drift {
        differences: out,
        repair,
    }
}

/// (in `want` only, in `have` only) of two sorted lists, in one pass.
fn sorted_difference(want: &[IpNet], have: &[IpNet]) -> (Vec<IpNet>, Vec<IpNet>) {
    let (mut only_want, mut only_have) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < want.len() && j < have.len() {
        match want[i].cmp(&have[j]) {
            std::cmp::Ordering::Less => {
                only_want.push(want[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                only_have.push(have[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                i += 1;
                j += 1;
            }
        }
    }
    only_want.extend_from_slice(&want[i..]);
    only_have.extend_from_slice(&have[j..]);
    (only_want, only_have)
}
