//! The native nftables backend: one table per family (`ip ipmasq`, `ip6 ipmasq`) holding an
//! interval set of the non-masquerade CIDRs and one nat chain hooked at postrouting
//! (`render`). A pass first reads the ruleset generation id over netlink (`netlink`): when it
//! has not moved since our own last apply (or last full comparison), nothing can have changed
//! and the pass does nothing else. Otherwise it reads the table with `nft -j` (`live`),
//! compares (`diff`) and repairs with ONE `nft -f` transaction: only the changed elements
//! when only elements differ, else the table's content, keeping the table and its hook.

mod diff;
mod elements;
mod live;
mod render;
mod takeover;

pub(crate) use render::TABLE;

use super::generation::{self, Gate};
use super::notify::Monitor;
use super::runner::{self, DEFAULT_TIMEOUT};
use super::{Backend, BackendError, CleanupReport, Difference, Inspection, SyncReport};
use crate::plan::{Family, Names, Ruleset};
use diff::{diff, Repair};
use live::{parse, LiveTable};
use render::{family_word, DesiredTable};
use std::sync::Mutex;
use std::time::Duration;

/// The nftables backend.
pub(crate) struct Nftables {
    nft: String,
    timeout: Duration,
    gate: Mutex<Gate>,
    /// Per family, the table last written or confirmed (what the gate vouches for).
    written: Mutex<[Option<LiveTable>; 2]>,
    /// nf_tables change notifications, subscribed at the first sync: they tell a neighbour's
    /// commit (nothing to read) from one that touched our table. None until then, or when
    /// the subscription failed (every moved generation is then a full read).
    monitor: Mutex<Option<Result<Monitor, ()>>>,
    /// Per family: the first install also deletes iptables-nft's chain and jumps, in the same
    /// transaction (set by the lock holder before its first sync).
    take_over: Mutex<[bool; 2]>,
}

fn slot(family: Family) -> usize {
    match family {
        Family::V4 => 0,
        Family::V6 => 1,
    }
}

impl Nftables {
    pub fn new() -> Self {
        Nftables {
            nft: runner::resolve("nft")
                .map_or_else(|| "nft".to_string(), |p| p.display().to_string()),
            timeout: DEFAULT_TIMEOUT,
            gate: Mutex::new(Gate::default()),
            written: Mutex::new([None, None]),
            monitor: Mutex::new(None),
            take_over: Mutex::new([false, false]),
        }
    }

    /// The same backend with another deadline for each tool it runs.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn written(&self) -> std::sync::MutexGuard<'_, [Option<LiveTable>; 2]> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes to the change notifications unless already subscribed.
    fn subscribe(&self) {
        self.with_monitor(|_| ());
    }

    /// Runs `f` on the notification monitor, subscribing first if this is the first use.
    fn with_monitor<T>(&self, f: impl FnOnce(&mut Monitor) -> T) -> Option<T> {
        let mut slot = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        let monitor = slot.get_or_insert_with(|| {
            Monitor::subscribe(TABLE).map_err(|err| {
                tracing::debug!(error = %err, "cannot subscribe to nf_tables notifications; a moved generation means a full read");
            })
        });
        monitor.as_mut().ok().map(f)
    }

    fn failed(&self, out: &runner::Output) -> BackendError {
        let stderr = out.stderr.trim().to_string();
        if stderr.contains("Operation not permitted") || stderr.contains("Permission denied") {
            BackendError::Permission {
                program: self.nft.clone(),
                detail: stderr,
            }
        } else {
            BackendError::Failed {
                program: self.nft.clone(),
                code: out.code,
                detail: stderr,
            }
        }
    }

    /// Whether the gate still vouches for the table at generation `before` (advanced past
    /// commits the monitor saw leave it untouched), and, when `desired` is what it vouches for,
    /// its rule count: the steady state.
    fn vouch(&self, desired: &Ruleset, before: Option<u32>) -> (bool, Option<usize>) {
        let family = desired.family;
        // Commits since we knew the table, none of which touched it (a neighbour's): the
        // table is still what we knew.
        let known = self.gate().generation(family);
        if let (Some(now), Some(known)) = (before, known) {
            if now != known
                && self
                    .with_monitor(|m| m.untouched(family, known, now))
                    .unwrap_or(false)
            {
                self.gate().advance(family, now);
            }
        }
        match self.gate().known_at(before, family) {
            Some((ruleset, rules)) => (true, (ruleset == desired).then_some(rules)),
            None => (false, None),
        }
    }

    /// `nft -j list table FAMILY ipmasq`; an absent table is an empty reading.
    fn read(&self, family: Family) -> Result<(LiveTable, String), BackendError> {
        let out = runner::run(
            &self.nft,
            &["-j", "list", "table", family_word(family), TABLE],
            None,
            self.timeout,
        )?;
        if !out.success {
            if out.stderr.contains("No such file or directory") {
                return Ok((LiveTable::default(), String::new()));
            }
            return Err(self.failed(&out));
        }
        let live = parse(&out.stdout).map_err(|detail| BackendError::Unreadable {
            program: self.nft.clone(),
            table: format!("{} {TABLE}", family_word(family)),
            detail,
        })?;
        Ok((live, out.stdout))
    }

    /// Every other nat postrouting base chain that a packet meets before ours.
    fn before_us(&self, family: Family) -> Vec<super::Before> {
        nat_chains_before(
            &self.nft,
            self.timeout,
            family,
            (render::PRIORITY_VALUE, TABLE),
        )
    }

    /// The deletions of iptables-nft's `chain` and its jumps in `family`, if it left any.
    fn iptables_nft_leftovers(&self, family: Family, chain: &str) -> Option<String> {
        let f = family_word(family);
        let list = |args: &[&str]| {
            runner::run(&self.nft, args, None, self.timeout)
                .ok()
                .filter(|out| out.success)
                .map(|out| out.stdout)
                .unwrap_or_default()
        };
        let chains = list(&["-j", "list", "chains", f]);
        let postrouting = list(&["-j", "list", "chain", f, "nat", "POSTROUTING"]);
        takeover::deletions(family, chain, &chains, &postrouting)
    }

    /// Applies `script`, our first install, together with the deletion of what iptables-nft
    /// left when the lock holder asked for it: one transaction. Should the joint one fail (a
    /// foreign rule still jumps to that chain), ours alone; the leftovers are then removed
    /// after, in their own transaction.
    fn apply_taking_over(
        &self,
        family: Family,
        chain: &str,
        script: &str,
    ) -> Result<(), BackendError> {
        let pending = self.take_over.lock().unwrap_or_else(|e| e.into_inner())[slot(family)];
        let leftovers = pending
            .then(|| self.iptables_nft_leftovers(family, chain))
            .flatten();
        let joint = match &leftovers {
            Some(deletions) => match self.apply(&format!("{script}{deletions}")) {
                Ok(()) => {
                    tracing::info!(%family, chain, "removed iptables-nft's chain and jumps in the same transaction as this table's first install");
                    true
                }
                Err(err) => {
                    tracing::debug!(%family, error = %err, "could not take over iptables-nft's rules in one transaction; installing ours alone");
                    false
                }
            },
            None => false,
        };
        if !joint {
            self.apply(script)?;
        }
        self.take_over.lock().unwrap_or_else(|e| e.into_inner())[slot(family)] = false;
        Ok(())
    }

    /// One `nft -f -` transaction.
    fn apply(&self, script: &str) -> Result<(), BackendError> {
        let out = runner::run(&self.nft, &["-f", "-"], Some(script), self.timeout)?;
        if !out.success {
            return Err(self.failed(&out));
        }
        Ok(())
    }
}

/// Every nat postrouting base chain of `family` (and of `inet`) at `limit` or an earlier
/// priority (the same priority: whose order nobody promises), other than table `own` of
/// `family`, in the order a packet meets them, with their rules typed. Empty when `nft` is not
/// installed or cannot list (the observation then has what the backend itself reads).
pub(crate) fn nat_chains_before(
    nft: &str,
    timeout: std::time::Duration,
    family: Family,
    (limit, own): (i64, &str),
) -> Vec<super::Before> {
    let listed = runner::run(nft, &["-j", "list", "chains"], None, timeout)
        .ok()
        .filter(|out| out.success)
        .map(|out| out.stdout)
        .unwrap_or_default();
    let Ok(root) = serde_json::from_str::<serde_json::Value>(&listed) else {
        return Vec::new();
    };
    let ours = family_word(family);
    let mut found: Vec<(i64, String, String, String)> = root
        .get("nftables")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("chain"))
        .filter_map(|chain| {
            let text = |key: &str| chain.get(key).and_then(serde_json::Value::as_str);
            let chain_family = text("family")?;
            let table = text("table")?;
            let before = text("hook")? == "postrouting"
                && text("type")? == "nat"
                && (chain_family == ours || chain_family == "inet")
                && !(chain_family == ours && table == own);
            let priority = chain.get("prio").and_then(serde_json::Value::as_i64)?;
            if !before || priority > limit {
                return None;
            }
            let name = text("name")?.to_string();
            Some((priority, chain_family.to_string(), table.to_string(), name))
        })
        .collect();
    found.sort();
    found
        .into_iter()
        .filter_map(|(_, chain_family, table, name)| {
            let out = runner::run(
                nft,
                &["-j", "list", "chain", &chain_family, &table, &name],
                None,
                timeout,
            )
            .ok()
            .filter(|out| out.success)?;
            live::foreign_chain(&out.stdout, &chain_family, &table, &name)
        })
        .collect()
}

impl Backend for Nftables {
    fn take_over_at_first_install(&self) {
        *self.take_over.lock().unwrap_or_else(|e| e.into_inner()) = [true, true];
    }

    fn memory_model(&self) -> super::MemoryModel {
        // scripts/bench, worst of first apply and one-CIDR change: 14.1 MiB at 10,000 CIDRs,
        // 127.2 MiB at 100,000 (the first apply's `nft -f` dominates).
        super::MemoryModel {
            base_mib: 8,
            per_10k_cidrs_mib: 12,
        }
    }

    fn id(&self) -> super::BackendId {
        super::BackendId::Nftables
    }

    fn accepts(&self, _names: &Names) -> Result<(), String> {
        Ok(())
    }

    fn location(&self, _names: &Names) -> String {
        format!(
            "{} in tables ip {TABLE} and ip6 {TABLE} (hook postrouting, priority {})",
            render::CHAIN,
            render::PRIORITY
        )
    }

    fn family_available(&self, _family: Family) -> bool {
        runner::on_path(&self.nft)
    }

    fn sync(&self, desired: &Ruleset, dry_run: bool) -> Result<SyncReport, BackendError> {
        let family = desired.family;
        // Subscribed before the id is read, so no commit after it goes unnoticed.
        self.subscribe();
        // Read the id BEFORE the dump, so a change during the dump is never missed. The
        // steady state ends here: an unchanged id and plan, nothing read, nothing built.
        let before = generation::current();
        let (vouched, steady) = self.vouch(desired, before);
        if let Some(rules) = steady {
            return Ok(SyncReport {
                family,
                differences: Vec::new(),
                transaction: None,
                rules,
            });
        }
        let started = std::time::Instant::now();
        let table = DesiredTable::new(desired)?;
        let built = started.elapsed();
        let rules = table.rules.len() + table.elements.len();
        // Nothing committed since our own last write: the table is what we wrote, so a new
        // config is compared with that instead of listing the table again. (Copied only then.)
        let remembered = if vouched {
            self.written()[slot(family)].clone()
        } else {
            None
        };
        let live = match remembered {
            Some(live) => live,
            None => {
                let live = self.read(family)?.0;
                self.with_monitor(|m| m.read_in_full(family));
                live
            }
        };
        let observed = started.elapsed();
        let drift = diff(&table, &live);
        let compared = started.elapsed();
        let small = |remove: &[_], add: &[_]| remove.len() + add.len() <= elements::MAX_BATCH_CIDRS;
        let script = match &drift.repair {
            Repair::None => None,
            Repair::Elements { remove, add } => Some(table.element_script(remove, add)),
            Repair::Rewrite => Some(table.script(false)),
            Repair::Recreate => Some(table.script(true)),
        };
        if dry_run {
            return Ok(SyncReport {
                family,
                differences: drift.differences,
                transaction: script,
                rules,
            });
        }
        let mut after = None;
        if let Some(script) = &script {
            match &drift.repair {
                // A few elements: one netlink batch, without nft.
                Repair::Elements { remove, add } if small(remove, add) => {
                    elements::apply(family == Family::V6, TABLE, render::SET, remove, add)
                        .map_err(|err| BackendError::Failed {
                            program: "nfnetlink set-element batch".into(),
                            code: err.raw_os_error(),
                            detail: format!("{err} (applying: {})", script.trim()),
                        })?;
                }
                // A whole table: its notifications (one per element) would overflow the
                // subscription, so it is set aside for the commit and made anew after it,
                // before the id is read; the gate trusts the table only if nobody else
                // committed in between (the id moved by exactly one).
                _ => {
                    *self.monitor.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    self.apply_taking_over(family, desired.names.chain.as_str(), script)?;
                    self.subscribe();
                }
            }
            after = Some(generation::current());
        }
        let applied = started.elapsed();
        self.gate().record(desired, rules, before, after);
        self.written()[slot(family)] = Some(LiveTable::written(&table));
        tracing::debug!(
            %family,
            build_ms = crate::text::millis(built),
            observe_ms = crate::text::millis(observed - built),
            diff_ms = crate::text::millis(compared - observed),
            apply_ms = crate::text::millis(applied - compared),
            remembered = vouched,
            "sync phases"
        );
        Ok(SyncReport {
            family,
            differences: drift.differences,
            transaction: script,
            rules,
        })
    }

    fn inspect(&self, family: Family, _names: &Names) -> Result<Inspection, BackendError> {
        let mut inspection = self.read(family)?.0.inspection();
        inspection.before = self.before_us(family);
        Ok(inspection)
    }

    fn compare(&self, desired: &Ruleset, live: &Inspection) -> Vec<Difference> {
        let table = match DesiredTable::new(desired) {
            Ok(table) => table,
            Err(err) => {
                return vec![Difference {
                    family: desired.family,
                    kind: super::DriftKind::ChainMissing,
                    position: None,
                    detail: err.to_string(),
                }]
            }
        };
        let reading = live
            .reading
            .as_ref()
            .and_then(|r| r.downcast_ref::<LiveTable>())
            .cloned()
            .unwrap_or_default();
        diff(&table, &reading).differences
    }

    fn cleanup(
        &self,
        family: Family,
        _names: &Names,
        dry_run: bool,
    ) -> Result<CleanupReport, BackendError> {
        let (live, _) = self.read(family)?;
        let script = live
            .table_exists
            .then(|| format!("delete table {} {TABLE}\n", family_word(family)));
        if let (Some(script), false) = (&script, dry_run) {
            let out = runner::run(&self.nft, &["-f", "-"], Some(script), self.timeout)?;
            // Gone meanwhile: nothing to remove is success.
            if !out.success && !out.stderr.contains("No such file or directory") {
                return Err(self.failed(&out));
            }
            self.gate().forget(family);
            self.written()[slot(family)] = None;
        }
        Ok(CleanupReport {
            family,
            removed: live
                .table_exists
                .then(|| super::Removed::Table {
                    family: family_word(family).to_string(),
                    table: TABLE.to_string(),
                })
                .into_iter()
                .collect(),
            transaction: script,
        })
    }
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
