//! The native nftables backend: one table per family (`ip ipmasq`, `ip6 ipmasq`) holding an
//! interval set of the non-masquerade CIDRs and one nat chain hooked at postrouting
//! (`render`), and, when the config sets a pod share, a filter chain hooked at forward with
//! the share's chains and dynamic sets (`share`). Everything goes over netlink (`crate::netlink::nf_tables`), no `nft` process on any path. A
//! pass first reads the ruleset generation id: when it has not moved since our own last apply
//! (or last full comparison), nothing can have changed and the pass does nothing else.
//! Otherwise it reads the table back (`live`), compares (`diff`) and repairs with ONE batch:
//! only the changed elements when only elements differ, else the table's content, keeping the
//! table and its hook. On Linux 6.9 and later each batch declares the table held by the
//! agent's socket (`hold`), so no other process may change it while the agent runs.

mod diff;
mod hold;
mod live;
mod render;
mod share;

pub(crate) use hold::set_wanted as hold_tables;
pub(crate) use render::TABLE;

use super::generation::{self, Gate};
use super::runner::DEFAULT_TIMEOUT;
use super::{Backend, BackendError, CleanupReport, Difference, Inspected, Reading, SyncReport};
use crate::netlink::nf_tables::notify::Monitor;
use crate::netlink::nf_tables::{self, read, script, wire::Finished, Failure, Transport};
use crate::plan::{Family, Names, Ruleset};
use diff::{diff, Repair};
use live::read_table;
pub(crate) use live::LiveTable;
use render::{family_word, DesiredTable, Leftovers};
use std::cell::RefCell;
use std::time::Duration;

/// More element changes than this make so many notifications that the subscription is set
/// aside for the commit (as for a whole table).
const NOTIFIED_ELEMENT_CHANGES: usize = 2000;

/// A netlink failure as the backends report it: EPERM as a permission problem, the rest with
/// the object and the kernel's words.
pub(super) fn netlink_error(failure: Failure) -> BackendError {
    match failure.errno() {
        Some(libc::EPERM) | Some(libc::EACCES) => BackendError::Permission {
            program: "nf_tables (netlink)".into(),
            detail: failure.to_string(),
        },
        _ => BackendError::Netlink(failure.to_string()),
    }
}

/// The nftables backend.
pub(crate) struct Nftables {
    /// The longest one commit waits for its acknowledgements.
    timeout: Duration,
    gate: Gate,
    /// Per family, the table last written or confirmed (what the gate vouches for).
    written: [Option<LiveTable>; 2],
    /// Per family, the socket that wrote or confirmed it: a table held is vouched for only
    /// while that socket is the one in use (a socket opened anew left it orphaned).
    written_by: [Option<u64>; 2],
    /// nf_tables change notifications, subscribed at the first sync: they tell a neighbour's
    /// commit (nothing to read) from one that touched our table. None until then, or when
    /// the subscription failed (every moved generation is then a full read).
    monitor: Option<Result<Monitor, ()>>,
    /// Per family: the first install also deletes iptables-nft's chain and jumps, in the same
    /// transaction (set by the lock holder before its first sync).
    take_over: [bool; 2],
    /// Per family: the kernel refused the last repair (something in our table that we do not
    /// read holds on to what it changes), so the next one makes the table anew.
    refused: [bool; 2],
    /// The transport every request of this backend goes over: None for the process's shared
    /// kernel socket; in tests, one given by [`Nftables::over`] (then no notifications).
    /// Borrowed by the reads of `&self` calls too, one request at a time.
    transport: Option<RefCell<Box<dyn Transport + Send>>>,
}

/// A table's install: how it is made (recreated or not, the pod share's limits anew or not),
/// and the batch of ours alone (what is applied when the joint take-over transaction cannot
/// be).
#[derive(Clone, Copy)]
struct Install<'a> {
    remake: render::Remake,
    alone: &'a Finished,
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
            timeout: DEFAULT_TIMEOUT.min(nf_tables::REPLY_DEADLINE),
            gate: Gate::default(),
            written: [None, None],
            written_by: [None, None],
            monitor: None,
            take_over: [false, false],
            refused: [false, false],
            transport: None,
        }
    }

    /// The same backend speaking over `transport` instead of the kernel's socket.
    #[cfg(test)]
    pub fn over(mut self, transport: Box<dyn Transport + Send>) -> Self {
        self.transport = Some(RefCell::new(transport));
        self
    }

    /// Runs `request` over this backend's transport.
    fn with_transport<T>(
        &self,
        request: impl FnOnce(&mut dyn Transport) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        match &self.transport {
            Some(given) => request(given.borrow_mut().as_mut()),
            None => nf_tables::with_kernel(request),
        }
    }

    /// The generation id (see [`generation::current`]).
    fn generation(&self) -> Option<u32> {
        if self.transport.is_none() {
            return generation::current();
        }
        self.with_transport(nf_tables::generation_over)
            .map_err(|err| tracing::debug!(error = %err, "cannot read the nftables generation id"))
            .ok()
    }

    /// The same backend with another deadline for each commit.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.min(nf_tables::REPLY_DEADLINE);
        self
    }

    /// Subscribes to the change notifications unless already subscribed.
    fn subscribe(&mut self) {
        self.with_monitor(|_| ());
    }

    /// Runs `f` on the notification monitor, subscribing first if this is the first use.
    fn with_monitor<T>(&mut self, f: impl FnOnce(&mut Monitor) -> T) -> Option<T> {
        let given_transport = self.transport.is_some();
        let monitor = self.monitor.get_or_insert_with(|| {
            if given_transport {
                return Err(());
            }
            Monitor::subscribe(TABLE).map_err(|err| {
                tracing::debug!(error = %err, "cannot subscribe to nf_tables notifications; a moved generation means a full read");
            })
        });
        monitor.as_mut().ok().map(f)
    }

    /// Whether the gate still vouches for the table at generation `before` (advanced past
    /// commits the monitor saw leave it untouched), and, when `desired` is what it vouches for,
    /// its rule count: the steady state.
    fn vouch(&mut self, desired: &Ruleset, before: Option<u32>) -> (bool, Option<usize>) {
        let family = desired.family;
        // Commits since we knew the table, none of which touched it (a neighbour's): the
        // table is still what we knew.
        let known = self.gate.generation(family);
        if let (Some(now), Some(known)) = (before, known) {
            if now != known
                && self
                    .with_monitor(|m| m.untouched(family, known, now))
                    .unwrap_or(false)
            {
                self.gate.advance(family, now);
            }
        }
        match self.gate.known_at(before, family) {
            Some((ruleset, rules)) => (true, (ruleset == desired).then_some(rules)),
            None => (false, None),
        }
    }

    /// Our socket's port, and whether our table is held by it ([`hold`]).
    fn holder(&self) -> hold::Holder {
        let socket = self.with_transport(|t| Ok(t.socket())).ok().flatten();
        hold::Holder::of(socket)
    }

    /// Our table of `family` as it is; an absent table is an empty reading.
    fn read(&self, family: Family) -> Result<LiveTable, BackendError> {
        self.with_transport(|t| read_table(t, family))
            .map_err(|failure| BackendError::Unreadable {
                program: "nf_tables (netlink)".into(),
                table: format!("{} {TABLE}", family_word(family)),
                detail: failure.to_string(),
            })
    }

    /// Every other nat postrouting base chain that a packet meets before ours.
    fn before_us(&self, family: Family) -> Vec<super::Before> {
        super::nat_before::nat_chains_before(
            family,
            super::nat_before::OurPlace {
                priority: render::PRIORITY_VALUE,
                table: TABLE,
            },
        )
    }

    /// iptables-nft's `chain` and its POSTROUTING jumps in `family`, if it left any.
    fn iptables_nft_leftovers(&self, family: Family, chain: &str) -> Result<Leftovers, Failure> {
        self.with_transport(|t| leftovers_over(t, family, chain))
    }

    /// Applies the table's whole content, our first install together with the deletion of
    /// what iptables-nft left when the lock holder asked for it: one transaction. Should the
    /// joint one fail (a foreign rule still jumps to that chain), ours alone; the leftovers are
    /// then removed after, in their own transaction.
    fn apply_taking_over(
        &mut self,
        table: &DesiredTable,
        chain: &str,
        install: Install<'_>,
    ) -> Result<(), BackendError> {
        let Install { remake, alone } = install;
        let family = table.family;
        let pending = self.take_over[slot(family)];
        let leftovers = if pending {
            self.iptables_nft_leftovers(family, chain)
                .unwrap_or_default()
        } else {
            Leftovers::default()
        };
        let joint = if leftovers != Leftovers::default() {
            match self.apply(&table.batch(remake, &leftovers)?) {
                Ok(()) => {
                    tracing::info!(%family, chain, "removed iptables-nft's chain and jumps in the same transaction as this table's first install");
                    true
                }
                Err(err) => {
                    tracing::debug!(%family, error = %err, "could not take over iptables-nft's rules in one transaction; installing ours alone");
                    false
                }
            }
        } else {
            false
        };
        if !joint {
            self.apply(alone)?;
        }
        self.take_over[slot(family)] = false;
        Ok(())
    }

    /// Commits the repair's batch; returns the generation id after it.
    fn commit_repair(
        &mut self,
        table: &DesiredTable,
        desired: &Ruleset,
        drift: &diff::Drift,
        batch: &Finished,
    ) -> Result<Option<u32>, BackendError> {
        match &drift.repair {
            // The claim of our orphaned table alone: one message, one notification; never
            // joined with a take-over, which would rewrite the rules.
            Repair::None => self.apply(batch)?,
            Repair::Elements(changes)
                if changes
                    .iter()
                    .map(|c| c.remove.len() + c.add.len())
                    .sum::<usize>()
                    <= NOTIFIED_ELEMENT_CHANGES =>
            {
                self.apply(batch)?;
            }
            // Many elements or a whole table: their notifications (one per element) would
            // overflow the subscription, so it is set aside for the commit and made anew after
            // it, before the id is read; the gate trusts the table only if nobody else
            // committed in between (the id moved by exactly one).
            repair => {
                self.monitor = None;
                let outcome = match repair {
                    Repair::Elements(_) => self.apply(batch),
                    _ => self.apply_taking_over(
                        table,
                        desired.names.chain.as_str(),
                        Install {
                            remake: repair.remake(drift.fresh_limits),
                            alone: batch,
                        },
                    ),
                };
                self.subscribe();
                outcome?;
            }
        }
        Ok(self.generation())
    }

    /// [`Nftables::vouch`], unless the table was not written by the socket that is to hold it
    /// (a first pass, or the socket was opened anew, which orphaned the table): then it is read,
    /// so that it is claimed.
    fn vouch_held(
        &mut self,
        desired: &Ruleset,
        before: Option<u32>,
        holder: hold::Holder,
    ) -> (bool, Option<usize>) {
        if holder.hold && self.written_by[slot(desired.family)] != holder.socket {
            return (false, None);
        }
        self.vouch(desired, before)
    }

    /// Fits the diff's repair to what the diff cannot see: a last repair the kernel refused
    /// (the table is made anew) and the table's holder ([`Nftables::settle_holding`]; true:
    /// the batch must claim the table). A dry run shows the rules: the holder is no
    /// difference to it (nor a table another agent holds).
    fn fit_repair(
        &self,
        family: Family,
        live: &LiveTable,
        holder: hold::Holder,
        drift: &mut diff::Drift,
        dry_run: bool,
    ) -> Result<bool, BackendError> {
        if self.refused[slot(family)] && !matches!(drift.repair, Repair::None) {
            tracing::info!(%family, "the kernel refused the last repair of this table; making it anew");
            drift.repair = Repair::Recreate;
        }
        if dry_run {
            return Ok(false);
        }
        self.settle_holding(family, live, holder, drift)
    }

    /// Fits the repair to where the live table stands against our holding it: a table made
    /// without `persist` is made anew (the flag cannot be set in place); an orphaned one is
    /// claimed (true: the batch must declare the table even when nothing else differs); one
    /// that another socket holds cannot be written at all, and says by whom.
    fn settle_holding(
        &self,
        family: Family,
        live: &LiveTable,
        holder: hold::Holder,
        drift: &mut diff::Drift,
    ) -> Result<bool, BackendError> {
        let family = family_word(family);
        match hold::judge(live, holder) {
            hold::Holding::Settled => Ok(false),
            hold::Holding::Claim => {
                tracing::info!(family, port = holder.port, "claiming our orphaned table (its last holder exited): held again, by this agent");
                Ok(true)
            }
            hold::Holding::Remake => {
                if drift.repair != Repair::Recreate {
                    if holder.hold {
                        tracing::info!(family, "our table was made without the persist flag; making it anew, held by this agent, in one transaction");
                    } else {
                        tracing::info!(family, "our table was left with the persist flag of an agent that held it; making it anew, unheld, in one transaction");
                    }
                    drift.repair = Repair::Recreate;
                }
                Ok(false)
            }
            hold::Holding::HeldElsewhere(owner) => {
                Err(BackendError::Netlink(hold::held_elsewhere(family, owner)))
            }
        }
    }

    /// One batch, every message acknowledged within the deadline.
    fn apply(&self, batch: &Finished) -> Result<(), BackendError> {
        self.with_transport(|t| nf_tables::commit_within(t, batch, self.timeout))
            .map_err(netlink_error)
    }
}

/// The batch a repair sends (None: nothing to send): the claim of an orphaned table alone, the
/// elements that differ, or the table's content.
fn repair_batch(
    table: &DesiredTable,
    drift: &diff::Drift,
    claim: bool,
) -> Result<Option<Finished>, BackendError> {
    Ok(match &drift.repair {
        Repair::None if claim => Some(table.claim_batch()?),
        Repair::None => None,
        Repair::Elements(changes) => Some(table.element_batch(changes)?),
        repair @ (Repair::Rewrite | Repair::Recreate) => {
            Some(table.batch(repair.remake(drift.fresh_limits), &Leftovers::default())?)
        }
    })
}

/// iptables-nft's `chain` in table `nat` of `family`, and the POSTROUTING rules jumping to it.
fn leftovers_over(
    t: &mut dyn Transport,
    family: Family,
    chain: &str,
) -> Result<Leftovers, Failure> {
    let proto = nf_tables::wire::nfproto(family);
    let jumps = read::rules(t, proto, "nat", "POSTROUTING")?
        .into_iter()
        .filter(|rule| {
            rule.stmts.iter().any(|s| {
                matches!(s, nf_tables::statement::Stmt::Verdict(
                    nf_tables::statement::NftVerdict::Jump(target)) if target == chain)
            })
        })
        .map(|rule| rule.handle)
        .collect();
    let chain = read::chain(t, family, "nat", chain)?.map(|c| c.name);
    Ok(Leftovers { chain, jumps })
}

/// How much memory applying a plan takes with nftables (see [`super::MemoryModel`]).
pub(crate) fn memory_model() -> super::MemoryModel {
    // scripts/bench --only memory, worst of first apply and one-CIDR change (no nft
    // process since step 14; the change's pass holds the old and the new plan): see the
    // memory table in docs/reference/agent.md. A rule is a handful of expressions; counted as an element.
    super::MemoryModel {
        base_mib: 8,
        per_10k_rules_mib: 8,
        per_mib_of_rule_text_mib: 0,
        per_10k_set_elements_mib: 8,
        unit: super::ListUnit::SetElements,
    }
}

/// Where our rules live, for people.
pub(crate) fn location() -> String {
    format!(
        "{} in tables ip {TABLE} and ip6 {TABLE} (hook postrouting, priority {})",
        render::CHAIN,
        render::PRIORITY
    )
}

pub(crate) use render::footprint;

impl Backend for Nftables {
    fn take_over_at_first_install(&mut self) {
        self.take_over = [true, true];
    }

    fn id(&self) -> super::BackendId {
        super::BackendId::Nftables
    }

    fn family_available(&self, _family: Family) -> bool {
        // The kernel answers for nf_tables: no tool needs to be installed.
        self.with_transport(nf_tables::generation_over).is_ok()
    }

    // Long: the ruleset generation read before the dump both vouches for the steady state and
    // is recorded with the outcome after the one transaction; observe, diff and apply are timed
    // against one clock for the pass's log line.
    fn sync(&mut self, desired: &Ruleset, dry_run: bool) -> Result<SyncReport, BackendError> {
        let family = desired.family;
        // Subscribed before the id is read, so no commit after it goes unnoticed.
        self.subscribe();
        // Read the id BEFORE the dump, so a change during the dump is never missed. The
        // steady state ends here: an unchanged id and plan, nothing read, nothing built.
        let before = self.generation();
        // A dry run shows the rules: which socket holds the table is the agent's, and a
        // batch with `owner` would be bound to whatever process replayed it with `nft -f`.
        let mut holder = self.holder();
        holder.hold &= !dry_run;
        let (vouched, steady) = self.vouch_held(desired, before, holder);
        if let Some(rules) = steady {
            return Ok(SyncReport {
                family,
                differences: Vec::new(),
                transaction: None,
                rules,
            });
        }
        let started = std::time::Instant::now();
        let mut table = DesiredTable::new(desired)?;
        table.held_by = holder.port.filter(|_| holder.hold);
        let built = started.elapsed();
        let rules = table.rules.len()
            + table.elements.len()
            + table
                .share
                .as_ref()
                .map_or(0, share::DesiredShare::rule_count);
        // Nothing committed since our own last write: the table is what we wrote, so a new
        // config is compared with that instead of listing the table again. (Copied only then.)
        let remembered = if vouched {
            self.written[slot(family)].clone()
        } else {
            None
        };
        let live = match remembered {
            Some(live) => live,
            None => {
                let live = self.read(family)?;
                self.with_monitor(|m| m.read_in_full(family));
                live
            }
        };
        let observed = started.elapsed();
        let mut drift = diff(&table, &live);
        let claim = self.fit_repair(family, &live, holder, &mut drift, dry_run)?;
        let compared = started.elapsed();
        // The batch to send, and the nft text it decodes to (what a dry run prints).
        let batch = repair_batch(&table, &drift, claim)?;
        if dry_run {
            return Ok(SyncReport {
                family,
                differences: drift.differences,
                transaction: batch.as_ref().map(|b| script::render(&b.bytes)),
                rules,
            });
        }
        // Decoding a large batch back into text costs more than sending it: an apply reports
        // its size; `--dry-run` shows the text.
        let script = batch.as_ref().map(|b| {
            format!(
                "# one nf_tables batch: {} messages, {} bytes\n",
                b.messages,
                b.bytes.len()
            )
        });
        let after = match &batch {
            Some(batch) => {
                let outcome = self.commit_repair(&table, desired, &drift, batch);
                self.refused[slot(family)] = matches!(outcome, Err(BackendError::Netlink(_)));
                Some(outcome?)
            }
            None => None,
        };
        let applied = started.elapsed();
        self.gate.record(desired, rules, before, after);
        self.written[slot(family)] = Some(LiveTable::written(&table));
        self.written_by[slot(family)] = holder.socket;
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

    fn inspect(&self, family: Family, _names: &Names) -> Result<Inspected, BackendError> {
        let mut inspected = self.read(family)?.inspected();
        inspected.inspection.before = self.before_us(family);
        Ok(inspected)
    }

    fn pod_share_refusals(
        &self,
        family: Family,
        _names: &Names,
    ) -> Result<Vec<crate::plan::live::ShareRefusals>, BackendError> {
        // The share's chains and set declarations only, never the table's elements.
        self.with_transport(|t| share::read_share(t, family))
            .map(|share| share.refused())
            .map_err(|failure| BackendError::Unreadable {
                program: "nf_tables (netlink)".into(),
                table: format!("{} {TABLE}", family_word(family)),
                detail: failure.to_string(),
            })
    }

    fn compare(&self, desired: &Ruleset, live: &Inspected) -> Vec<Difference> {
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
        let never_read = LiveTable::default();
        let reading = match &live.reading {
            Reading::Table(table) => table,
            Reading::Neutral | Reading::FilterShare(_) => &never_read,
        };
        diff(&table, reading).differences
    }

    fn cleanup(
        &mut self,
        family: Family,
        _names: &Names,
        dry_run: bool,
    ) -> Result<CleanupReport, BackendError> {
        let live = self.read(family)?;
        // Only a table we made goes: one called `ipmasq` without our mark is a neighbour's,
        // unless it is exactly what an ipmasq before the mark wrote.
        let ours = live.marked() || live.made_by_an_earlier_ipmasq();
        let holder = hold::Holder {
            hold: false,
            ..self.holder()
        };
        if let (true, hold::Holding::HeldElsewhere(owner)) = (ours, hold::judge(&live, holder)) {
            return Err(BackendError::Netlink(format!(
                "{}; stop that agent first (systemctl stop ipmasq, or its DaemonSet's pod), then clean up",
                hold::held_elsewhere(family_word(family), owner)
            )));
        }
        let left = (live.table_exists && !ours)
            .then(|| {
                format!(
                    "table {} {TABLE}: not ours (it lacks our mark, the comment \"{}\"; {}), so it was left; `nft delete table {} {TABLE}` removes it if it should go",
                    family_word(family),
                    render::OWNER_MARK,
                    live.comment.as_deref().map_or("it has no comment".to_string(), |c| format!("its comment is {c:?}")),
                    family_word(family),
                )
            })
            .into_iter()
            .collect();
        let batch = ours.then(|| render::removal(family));
        let script = batch.as_ref().map(|b| script::render(&b.bytes));
        if let (Some(batch), false) = (&batch, dry_run) {
            match self.with_transport(|t| nf_tables::commit_within(t, batch, self.timeout)) {
                // Gone meanwhile: nothing to remove is success.
                Err(failure) if failure.errno() == Some(libc::ENOENT) => {}
                outcome => outcome.map_err(netlink_error)?,
            }
            self.gate.forget(family);
            self.written[slot(family)] = None;
            self.written_by[slot(family)] = None;
        }
        Ok(CleanupReport {
            family,
            removed: ours
                .then(|| super::Removed::Table {
                    family: family_word(family).to_string(),
                    table: TABLE.to_string(),
                })
                .into_iter()
                .collect(),
            left,
            transaction: script,
        })
    }
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod sync_without_root;
#[cfg(test)]
mod tests;
