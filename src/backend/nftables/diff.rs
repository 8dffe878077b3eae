//! The comparison of our desired and live table, in the neutral vocabulary, and the repair it
//! calls for: nothing, only the set's elements, the whole table in place, or the table
//! recreated (when its hook or its set's type cannot be changed in place).

use super::live::LiveTable;
use super::render::{address_type, set_name, DesiredTable, SetChange, PRIORITY_VALUE};
use crate::backend::{Difference, DriftKind};
use ipnet::IpNet;
use netlink_packet_netfilter::nftables::TableFlags;

/// At most this many element differences are itemised; the rest are summed up in one.
const ITEMISED_ELEMENTS: usize = 20;

/// How to bring the live table back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Repair {
    None,
    /// Only elements differ: per set, delete these, add those.
    Elements(Vec<SetChange>),
    /// Rewrite the table's content, keeping the table and its hooked chain.
    Rewrite,
    /// Delete and create the table (hook, priority or set type differ).
    Recreate,
}

impl Repair {
    /// How the batch of a rewrite or a recreation makes the table.
    pub(super) fn remake(&self, fresh_limits: bool) -> super::render::Remake {
        super::render::Remake {
            recreate: matches!(self, Repair::Recreate),
            fresh_limits,
        }
    }
}

/// The differences and the repair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Drift {
    pub differences: Vec<Difference>,
    pub repair: Repair,
    /// The pod share's limits (their chains and the sets of the pods' state) are made anew
    /// by a rewrite; otherwise a rewrite leaves them.
    pub fresh_limits: bool,
}

/// The differences found so far and how deep a repair they need.
struct Findings {
    family: crate::plan::Family,
    out: Vec<Difference>,
    rewrite: bool,
    recreate: bool,
    /// Element differences itemised so far, per kind (missing, extra).
    itemised: [usize; 2],
}

impl Findings {
    fn push(&mut self, kind: DriftKind, position: Option<usize>, detail: String) {
        self.out.push(Difference {
            family: self.family,
            kind,
            position,
            detail,
        });
    }

    /// The table itself, when it exists: without our mark, or dormant, it is made anew.
    fn table(&mut self, live: &LiveTable, table: &str) {
        if live.table_exists && !live.marked() {
            self.recreate = true;
            self.push(
                DriftKind::TableUnmarked,
                None,
                format!(
                    "{table} does not carry our mark (comment \"{}\"): made anew with it",
                    super::render::OWNER_MARK
                ),
            );
        }
        if live.table_exists && live.flags.contains(TableFlags::Dormant) {
            // A dormant table's base chains are unhooked: nothing is masqueraded. The flag is
            // cleared by making the table anew (one transaction), not by an update, which an
            // orphaned table refuses unless it names `persist` again.
            self.recreate = true;
            self.push(
                DriftKind::HookDiffers,
                None,
                format!("{table} is dormant (flags dormant): none of its chains is hooked"),
            );
        }
    }

    /// The chain's hook: another type, hook, priority or policy needs the table recreated.
    fn hook(&mut self, chain: &super::live::ChainHook) {
        if chain.kind != "nat"
            || chain.hook != "postrouting"
            || chain.priority != PRIORITY_VALUE
            || chain.policy != "accept"
        {
            self.recreate = true;
            self.push(
                DriftKind::HookDiffers,
                None,
                format!(
                    "chain hooked as type {} hook {} priority {} policy {}, planned nat postrouting {PRIORITY_VALUE} accept",
                    chain.kind, chain.hook, chain.priority, chain.policy
                ),
            );
        }
    }

    /// Our sets: a planned one missing (rewrite), of another type (recreate), or one more
    /// than planned (recreate: the table is made anew without it).
    fn sets(&mut self, desired: &DesiredTable, live: &LiveTable) {
        let family = self.family;
        for index in 0..desired.sets {
            let name = set_name(index);
            match live.set(&name) {
                None => {
                    self.rewrite = true;
                    self.push(
                        DriftKind::MissingRule,
                        None,
                        format!("set {name} does not exist"),
                    );
                }
                Some(set) if set.kind != address_type(family) || set.flags != ["interval"] => {
                    self.recreate = true;
                    self.push(
                        DriftKind::SetDiffers,
                        None,
                        format!(
                            "set {name} is type {} flags {:?}, planned {} interval",
                            set.kind,
                            set.flags,
                            address_type(family)
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        for set in &live.sets[..] {
            if super::render::set_index(&set.name).is_some_and(|i| i >= desired.sets) {
                self.recreate = true;
                self.push(
                    DriftKind::ExtraRule,
                    None,
                    format!(
                        "set {} is not planned ({} sets planned)",
                        set.name, desired.sets
                    ),
                );
            }
        }
    }

    /// One set's elements: itemised up to a limit across all sets, then summed up per set.
    fn elements(&mut self, set: &str, add: &[IpNet], remove: &[IpNet], odd: &[String]) {
        for (slot, (kind, list, verb)) in [
            (DriftKind::MissingRule, add, "missing from"),
            (DriftKind::ExtraRule, remove, "not planned in"),
        ]
        .into_iter()
        .enumerate()
        {
            let shown = list
                .len()
                .min(ITEMISED_ELEMENTS.saturating_sub(self.itemised[slot]));
            for net in &list[..shown] {
                self.push(kind, None, format!("{net} {verb} set {set}"));
            }
            self.itemised[slot] += shown;
            if list.len() > shown {
                self.push(
                    kind,
                    None,
                    format!("and {} more elements {verb} set {set}", list.len() - shown),
                );
            }
        }
        if !odd.is_empty() {
            self.rewrite = true;
            self.push(
                DriftKind::ExtraRule,
                None,
                format!(
                    "set {set} holds elements we do not write: {}",
                    odd.join(", ")
                ),
            );
        }
    }

    /// The local-skip rule (`fib daddr type local return`): first, once, with our comment.
    fn local_skip(&mut self, entry: &super::render::RuleSpec, live: &LiveTable) {
        let entries: Vec<usize> = live
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.statements == entry.statements)
            .map(|(i, _)| i + 1)
            .collect();
        match entries.as_slice() {
            [1] if live.rules[0].comment.as_deref() == Some(entry.comment.as_str()) => return,
            [1] => self.push(
                DriftKind::ExtraRule,
                Some(1),
                "the local-skip rule's comment differs from the planned one".into(),
            ),
            [] => self.push(
                DriftKind::LocalSkipMissing,
                Some(1),
                "no `fib daddr type local return` rule: local destinations are masqueraded".into(),
            ),
            [other] => self.push(
                DriftKind::LocalSkipMissing,
                Some(*other),
                format!("`fib daddr type local return` is rule {other}, not the first: local destinations meet the rules before it"),
            ),
            [_, second, ..] => self.push(
                DriftKind::ExtraRule,
                Some(*second),
                format!(
                    "`fib daddr type local return` is there {} times (rules {entries:?})",
                    entries.len()
                ),
            ),
        }
        self.rewrite = true;
    }

    /// The other rules, in order: missing, extra, or only out of order.
    fn rules(&mut self, want: &[(&str, &str)], have: &[(&str, &str)]) {
        if want == have {
            return;
        }
        self.rewrite = true;
        let missing: Vec<usize> = (0..want.len())
            .filter(|&i| !have.contains(&want[i]))
            .collect();
        let extra: Vec<usize> = (0..have.len())
            .filter(|&i| !want.contains(&have[i]))
            .collect();
        if missing.is_empty() && extra.is_empty() {
            self.push(
                DriftKind::OutOfOrder,
                None,
                "the rules are in another order".into(),
            );
        }
        for i in missing {
            let detail = format!("rule {} missing: {}", i + 2, want[i].0);
            self.push(DriftKind::MissingRule, Some(i + 2), detail);
        }
        for i in extra {
            let detail = format!("rule {} not planned: {}", i + 2, have[i].0);
            self.push(DriftKind::ExtraRule, Some(i + 2), detail);
        }
    }
}

// Long: the table, the chain, the sets' elements and the rules are compared into one
// `Findings` whose `recreate` each step may set and the last step reads to pick the repair.
pub(super) fn diff(desired: &DesiredTable, live: &LiveTable) -> Drift {
    let mut found = Findings {
        family: desired.family,
        out: Vec::new(),
        rewrite: false,
        recreate: false,
        itemised: [0, 0],
    };
    let table = format!(
        "table {} {}",
        super::render::family_word(desired.family),
        super::render::TABLE
    );
    found.table(live, &table);
    let Some(chain) = live.chain.as_ref().filter(|_| live.table_exists) else {
        found.push(
            DriftKind::ChainMissing,
            None,
            format!("{table} or its chain does not exist"),
        );
        found.push(
            DriftKind::JumpMissing,
            None,
            "no postrouting hook of ours".into(),
        );
        return Drift {
            differences: found.out,
            repair: if found.recreate {
                Repair::Recreate
            } else {
                Repair::Rewrite
            },
            fresh_limits: true,
        };
    };
    found.hook(chain);
    found.sets(desired, live);
    // Elements, set by set: both lists are sorted, so one merge finds what to add and what
    // to remove.
    let mut changes = Vec::new();
    for (index, want) in desired.set_elements().iter().enumerate() {
        let name = set_name(index);
        let (have, odd) = live.set(&name).map_or((&[][..], &[][..]), |s| {
            (&s.elements[..], &s.odd_elements[..])
        });
        let (add, remove) = sorted_difference(want, have);
        found.elements(&name, &add, &remove, odd);
        if !add.is_empty() || !remove.is_empty() {
            changes.push(SetChange {
                set: name,
                remove,
                add,
            });
        }
    }
    let (entry, rest) = desired
        .rules
        .split_first()
        .expect("the entry rule is always planned");
    found.local_skip(entry, live);
    let want: Vec<(&str, &str)> = rest
        .iter()
        .map(|r| (r.statements.as_str(), r.comment.as_str()))
        .collect();
    let have: Vec<(&str, &str)> = live
        .rules
        .iter()
        .filter(|r| r.statements != entry.statements)
        .map(|r| (r.statements.as_str(), r.comment.as_deref().unwrap_or("")))
        .collect();
    found.rules(&want, &have);
    let share = super::share::diff(desired.family, desired.share.as_ref(), &live.share);
    found.out.extend(share.differences);
    found.recreate |= share.recreate;
    found.rewrite |= share.rewrite;
    let repair = if found.recreate {
        Repair::Recreate
    } else if found.rewrite {
        Repair::Rewrite
    } else if !changes.is_empty() {
        Repair::Elements(changes)
    } else {
        Repair::None
    };
    Drift {
        differences: found.out,
        repair,
        fresh_limits: share.fresh_limits,
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
