//! The iptables backend (legacy and nft variants). A sync renders the [`Ruleset`] exactly as
//! `iptables-save` prints it (`render`), reads the live nat table with one
//! `iptables-save -t nat` (`saved`), compares the two (`diff`) and, when they differ, applies
//! one `iptables-restore --noflush` transaction that touches only our chain and the POSTROUTING
//! jumps to it. The variant's programs and auto-detection live in `tools`.

mod diff;
mod probe;
mod render;
mod saved;
mod share;
mod tools;

pub(crate) use share::SavedShare;
pub(crate) use tools::{detect_variant, Variant};

use super::generation::{self, Gate};
use super::runner::{self, RunError, DEFAULT_TIMEOUT};
use super::{Backend, BackendError, CleanupReport, Difference, Inspected, SyncReport};
use crate::plan::{ChainName, Family, Names, Ruleset};
use diff::{cleanup_transaction, diff, transaction};
use render::Rendered;
use saved::{parse_saved, LiveChain};
use std::time::{Duration, Instant};
use tools::Tools;

/// iptables' limit on a chain name: XT_EXTENSION_MAXNAMELEN (29) including the NUL.
const MAX_CHAIN_NAME_LEN: usize = 28;
/// Names a user chain must not take: built-in chains and targets of the nat table.
const RESERVED_CHAIN_NAMES: [&str; 12] = [
    "PREROUTING",
    "INPUT",
    "OUTPUT",
    "POSTROUTING",
    "FORWARD",
    "ACCEPT",
    "DROP",
    "RETURN",
    "QUEUE",
    "MASQUERADE",
    "SNAT",
    "DNAT",
];
/// Seconds iptables-restore may wait for the xtables lock (legacy; nft ignores it).
const LOCK_WAIT_SECONDS: &str = "5";

/// An iptables variant as a backend.
#[derive(Debug)]
pub(crate) struct Iptables {
    variant: Variant,
    timeout: Duration,
    tools: Tools,
    /// iptables-nft commits move the nftables generation id: an unchanged id since our own
    /// last apply (or full comparison) means nothing to read. Unused for legacy.
    gate: Gate,
    /// The restore refused `--random-fully` (iptables before 1.6.2): written without it since.
    without_random_fully: bool,
}

impl Iptables {
    pub fn new(variant: Variant) -> Self {
        Iptables {
            variant,
            timeout: DEFAULT_TIMEOUT,
            tools: Tools::new(variant),
            gate: Gate::default(),
            without_random_fully: false,
        }
    }

    /// The same backend with another deadline for each tool it runs.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn failed(&self, program: &str, out: &runner::Output) -> BackendError {
        let stderr = out.stderr.trim();
        let permission = stderr.contains("Permission denied")
            || stderr.contains("Operation not permitted")
            || stderr.contains("you must be root");
        if permission {
            BackendError::Permission {
                program: program.to_string(),
                detail: stderr.to_string(),
            }
        } else {
            BackendError::Failed {
                program: program.to_string(),
                code: out.code,
                detail: stderr.to_string(),
            }
        }
    }

    /// One `iptables-save`: of the nat table (`-t nat` makes the kernel load it, which the
    /// agent is about to do anyway) or of the tables that exist (for inspection and cleanup,
    /// which must not create a table), with counters when asked.
    fn save(&self, family: Family, nat_only: bool, counters: bool) -> Result<String, BackendError> {
        let program = self.tools.save(family);
        let mut args = Vec::new();
        if nat_only {
            args.extend(["-t", "nat"]);
        }
        if counters {
            args.push("-c");
        }
        let out = runner::run(program, &args, None, self.timeout)?;
        if !out.success {
            return Err(self.failed(program, &out));
        }
        check_nat_readable(program, &out.stdout, nat_only)?;
        Ok(out.stdout)
    }

    /// `iptables-save -t filter`, for the pod share (with counters when asked).
    fn save_filter(&self, family: Family, counters: bool) -> Result<String, BackendError> {
        let program = self.tools.save(family);
        let mut args = vec!["-t", "filter"];
        if counters {
            args.push("-c");
        }
        let out = runner::run(program, &args, None, self.timeout)?;
        if !out.success {
            return Err(self.failed(program, &out));
        }
        check_compatible(program, &out.stdout, "filter")?;
        Ok(out.stdout)
    }

    /// Whether the filter table may hold a chain of the pod share (asked of the kernel once,
    /// without a tool; a table that cannot be asked may).
    fn may_hold_share(&self, family: Family, chains: &share::ShareChains) -> bool {
        let names = chains.all();
        let held = match self.variant {
            Variant::Nft => probe::nft_table_holds_any(family, "filter", &names),
            Variant::Legacy => probe::legacy_table_holds_any(family, "filter", &names),
        };
        held != Some(false)
    }

    /// The pod share as the filter table holds it, read only when the plan has one or the
    /// table may hold one of ours (then it is removed).
    fn read_share(
        &self,
        family: Family,
        chains: &share::ShareChains,
        wanted: bool,
        counters: bool,
    ) -> Result<share::SavedShare, BackendError> {
        if !wanted && !self.may_hold_share(family, chains) {
            return Ok(share::SavedShare::default());
        }
        Ok(share::parse(&self.save_filter(family, counters)?, chains))
    }

    /// How the filter table's pod share differs from `desired`'s, and the section that repairs
    /// it.
    fn share_drift(&self, desired: &Ruleset) -> Result<share::ShareDrift, BackendError> {
        let chains = share::ShareChains::new(&desired.names.chain);
        let rendered = share::render(desired);
        let live = self.read_share(desired.family, &chains, rendered.is_some(), false)?;
        Ok(share::diff(
            desired.family,
            &chains,
            rendered.as_ref(),
            &live,
        ))
    }

    /// Every table that exists, with counters, without creating any (for inspection and
    /// cleanup); parse it with `parse_saved`.
    fn read(&self, family: Family) -> Result<String, BackendError> {
        self.save(family, false, true)
    }

    /// One `iptables-restore --noflush` with `script`.
    fn restore(&self, family: Family, script: &str) -> Result<(), BackendError> {
        let program = self.tools.restore(family);
        let out = runner::run(
            program,
            &["--noflush", "-w", LOCK_WAIT_SECONDS],
            Some(script),
            self.timeout,
        )?;
        if !out.success {
            return Err(self.failed(program, &out));
        }
        Ok(())
    }

    /// Deletes one POSTROUTING rule by its words with the iptables command (for a rule that
    /// iptables-restore cannot express); the words are the rule's own, so a rule that changed
    /// since it was read is not found and nothing else is touched.
    fn delete_separately(&self, family: Family, spec: &str) -> Result<(), BackendError> {
        let program = self.tools.main(family);
        let words = saved::tokenize(spec);
        let mut args = vec![
            "-w",
            LOCK_WAIT_SECONDS,
            "-t",
            "nat",
            "-D",
            render::POSTROUTING,
        ];
        args.extend(words.iter().map(String::as_str));
        let out = runner::run(program, &args, None, self.timeout)?;
        if !out.success {
            return Err(self.failed(program, &out));
        }
        Ok(())
    }

    /// One pass over `desired` as planned: read, compare, one restore when they differ. Where
    /// the kernel says there is nothing to read, the pass is one restore: iptables-legacy
    /// without our chain (its tables are always readable), iptables-nft without a nat table
    /// at all (one that exists may hold a rule iptables cannot show, which only the read
    /// tells); a read would add nothing there, so a failed restore fails the pass as it is.
    /// That question is asked only after the generation gate, so a steady iptables-nft pass
    /// sends the generation request alone.
    fn sync_plan(&mut self, desired: &Ruleset, dry_run: bool) -> Result<SyncReport, BackendError> {
        self.check(desired)?;
        if self.variant == Variant::Legacy && desired.pod_share.connection_limit.is_some() {
            warn_legacy_connection_count();
        }
        let gated = self.variant == Variant::Nft;
        // Read the id BEFORE the save, so a change during the save is never missed.
        let before = gated.then(generation::current).flatten();
        if gated && self.gate.in_sync(before, desired) {
            return Ok(SyncReport {
                family: desired.family,
                differences: Vec::new(),
                transaction: None,
                rules: render::rule_count(desired),
            });
        }
        let chain = desired.names.chain.as_str();
        let known_absent = !dry_run
            && match self.variant {
                Variant::Nft => probe::nft_nat_table_exists(desired.family) == Some(false),
                Variant::Legacy => probe::legacy_holds_chain(desired.family, chain) == Some(false),
            };
        let started = Instant::now();
        // The agent's one reader per family and pass.
        let saved = if known_absent {
            String::new()
        } else {
            self.save(desired.family, true, false)?
        };
        let live = parse_saved(&saved, &desired.names.chain);
        let share_drift = self.share_drift(desired)?;
        let observed = started.elapsed();
        // The steady case, checked line by line without rendering the chain into memory.
        let canonical = render::jump_spec(&desired.names.chain);
        if share_drift.script.is_none()
            && live.chain_exists
            && live.jumps.len() == 1
            && live.jumps[0].spec == canonical.as_str()
            && render::matches(desired, &live.rules)
        {
            if gated && !dry_run {
                self.gate.record(desired, live.rules.len(), before, None);
            }
            tracing::debug!(family = %desired.family, observe_ms = crate::text::millis(observed), compare_ms = crate::text::millis(started.elapsed() - observed), "sync phases (in sync)");
            return Ok(SyncReport {
                family: desired.family,
                differences: Vec::new(),
                transaction: None,
                rules: live.rules.len(),
            });
        }
        let rendered = Rendered::new(desired);
        let render_done = started.elapsed();
        let mut drift = diff(&rendered, &live);
        let nat_script = (!drift.is_empty()).then(|| transaction(&rendered, &drift));
        // One restore: the nat section, then the filter section (each table commits whole).
        let script = match (nat_script, share_drift.script) {
            (Some(nat), Some(filter)) => Some(nat + &filter),
            (nat, filter) => nat.or(filter),
        };
        drift.differences.extend(share_drift.differences);
        let planned = started.elapsed();
        if let (Some(script), false) = (&script, dry_run) {
            for spec in &drift.delete_separately {
                self.delete_separately(desired.family, spec)?;
            }
            self.restore(desired.family, script)?;
        }
        if gated && !dry_run {
            let after = script.as_ref().map(|_| generation::current());
            self.gate
                .record(desired, rendered.lines.len(), before, after);
        }
        tracing::debug!(
            family = %desired.family,
            observe_ms = crate::text::millis(observed),
            render_ms = crate::text::millis(render_done - observed),
            diff_ms = crate::text::millis(planned - render_done),
            apply_ms = crate::text::millis(started.elapsed() - planned),
            "sync phases"
        );
        Ok(SyncReport {
            family: desired.family,
            differences: drift.differences,
            transaction: script,
            rules: rendered.lines.len(),
        })
    }

    /// Refuses what this backend cannot render, before anything is read or written.
    fn check(&self, ruleset: &Ruleset) -> Result<(), BackendError> {
        accepts(&ruleset.names).map_err(BackendError::Unsupported)?;
        if ruleset.pod_share.is_limited() {
            let chains = share::ShareChains::new(&ruleset.names.chain);
            if chains.longest().len() > MAX_CHAIN_NAME_LEN {
                return Err(BackendError::Unsupported(format!(
                    "the pod share's chain {} is longer than iptables' {MAX_CHAIN_NAME_LEN} characters: shorten --masq-chain to at most {} characters",
                    chains.longest(),
                    MAX_CHAIN_NAME_LEN - (chains.longest().len() - ruleset.names.chain.as_str().len())
                )));
            }
        }
        if !ruleset.entry.skip_local_destinations {
            return Err(BackendError::Unsupported(
                "the iptables backend always exempts local destinations (upstream's jump)".into(),
            ));
        }
        Ok(())
    }
}

/// What either variant answers by its identity alone (see [`super::BackendId`]).
impl Variant {
    pub(crate) fn memory_model(self) -> super::MemoryModel {
        // scripts/bench --only memory, worst of first apply and one change, plain lists of
        // 10,000 to 100,000 CIDRs and the hostile shapes (sources' complement, forced CIDRs
        // per interface, --to-ports): see docs/reference/agent.md's table. iptables-restore holds the
        // table as text and as rules; legacy's cost follows the rules (the kernel's blob has a
        // fixed size per match), iptables-nft's the text (it also keeps each rule as
        // nf_tables expressions with the comment as user data).
        let (per_10k_rules_mib, per_mib_of_rule_text_mib) = match self {
            Variant::Legacy => (23, 8),
            Variant::Nft => (0, 35),
        };
        super::MemoryModel {
            base_mib: 8,
            per_10k_rules_mib,
            per_mib_of_rule_text_mib,
            per_10k_set_elements_mib: 0,
            unit: super::ListUnit::Rules,
        }
    }

    /// Whether our chain may be in `family`, told by the kernel without running a tool (true
    /// when it cannot tell).
    pub(crate) fn may_hold_ours(self, family: Family, names: &Names) -> bool {
        let chain = names.chain.as_str();
        match self {
            Variant::Nft => probe::nft_holds_chain(family, chain).unwrap_or(true),
            Variant::Legacy => probe::legacy_holds_chain(family, chain).unwrap_or(true),
        }
    }
}

/// The rules either variant writes for `ruleset`, counted without rendering them.
pub(crate) fn footprint(ruleset: &Ruleset) -> super::Footprint {
    let (rules, rule_text_bytes) = render::rule_count_and_text_bytes(ruleset);
    let (share_rules, share_bytes) = share::rule_count_and_text_bytes(ruleset);
    super::Footprint {
        rules: rules + share_rules,
        set_elements: 0,
        rule_text_bytes: rule_text_bytes + share_bytes,
    }
}

/// Whether iptables can hold a chain named as `names` says: its 28-character limit, and no
/// built-in chain or target.
pub(crate) fn accepts(names: &Names) -> Result<(), String> {
    let chain = names.chain.as_str();
    if chain.len() > MAX_CHAIN_NAME_LEN {
        return Err(format!(
            "chain name {chain:?} is longer than iptables' limit of {MAX_CHAIN_NAME_LEN} characters"
        ));
    }
    if RESERVED_CHAIN_NAMES.contains(&chain) {
        return Err(format!(
            "chain name {chain:?} is a built-in chain or target"
        ));
    }
    Ok(())
}

impl Backend for Iptables {
    fn id(&self) -> super::BackendId {
        match self.variant {
            Variant::Nft => super::BackendId::IptablesNft,
            Variant::Legacy => super::BackendId::IptablesLegacy,
        }
    }

    fn family_available(&self, family: Family) -> bool {
        runner::on_path(self.tools.save(family))
    }

    /// Writes `--random-fully` unless this iptables turned out to lack it (before 1.6.2): then
    /// plain MASQUERADE, said once. Told by the restore refusing the option, not by running
    /// `iptables --version` at every start.
    fn sync(&mut self, desired: &Ruleset, dry_run: bool) -> Result<SyncReport, BackendError> {
        if let crate::plan::Egress::Unresolved(target) = desired.masquerade.egress {
            return Err(BackendError::unresolved(target));
        }
        if desired.masquerade.random_fully && self.without_random_fully {
            let mut plain = desired.clone();
            plain.masquerade.random_fully = false;
            return self.sync_plan(&plain, dry_run);
        }
        match self.sync_plan(desired, dry_run) {
            Err(BackendError::Failed { detail, .. })
                if desired.masquerade.random_fully && detail.contains("random-fully") =>
            {
                tracing::warn!(
                    "{} lacks --random-fully (older than 1.6.2); writing plain MASQUERADE rules",
                    self.tools.restore(desired.family)
                );
                self.without_random_fully = true;
                self.sync(desired, dry_run)
            }
            outcome => outcome,
        }
    }

    fn inspect(&self, family: Family, names: &Names) -> Result<Inspected, BackendError> {
        let saved = self.read(family)?;
        let mut inspection = parse_saved(&saved, &names.chain).inspection();
        let live_share = share::parse(&saved, &share::ShareChains::new(&names.chain));
        inspection.pod_share = live_share.live();
        // nf_tables chains of other tables at srcnat or earlier run before iptables' own nat
        // POSTROUTING (iptables-nft's is table `nat`; legacy's is no nf_tables table at all).
        let own = match self.variant {
            Variant::Nft => "nat",
            Variant::Legacy => "",
        };
        let mut before = super::nat_before::nat_chains_before(
            family,
            super::nat_before::OurPlace {
                priority: SRCNAT,
                table: own,
            },
        );
        before.append(&mut inspection.before);
        inspection.before = before;
        Ok(Inspected {
            inspection,
            reading: super::Reading::FilterShare(Box::new(live_share)),
        })
    }

    fn pod_share_refusals(
        &self,
        family: Family,
        names: &Names,
    ) -> Result<Vec<crate::plan::live::ShareRefusals>, BackendError> {
        let chains = share::ShareChains::new(&names.chain);
        Ok(self.read_share(family, &chains, false, true)?.refused)
    }

    fn compare(&self, desired: &Ruleset, live: &Inspected) -> Vec<Difference> {
        let mut differences = diff(
            &Rendered::new(desired),
            &LiveChain::from_inspection(&live.inspection),
        )
        .differences;
        let never_read = share::SavedShare::default();
        let live_share = match &live.reading {
            super::Reading::FilterShare(share) => share,
            _ => &never_read,
        };
        let chains = share::ShareChains::new(&desired.names.chain);
        let rendered = share::render(desired);
        differences.extend(
            share::diff(desired.family, &chains, rendered.as_ref(), live_share).differences,
        );
        differences
    }

    fn cleanup(
        &mut self,
        family: Family,
        names: &Names,
        dry_run: bool,
    ) -> Result<CleanupReport, BackendError> {
        let saved = self.read(family)?;
        let live = parse_saved(&saved, &names.chain);
        let cleanup =
            cleanup_transaction(&names.chain, &live).map_err(BackendError::Unsupported)?;
        let chains = share::ShareChains::new(&names.chain);
        let live_share = self.read_share(family, &chains, false, false)?;
        let share_removal = share::diff(family, &chains, None, &live_share).script;
        let script = match (cleanup.script, share_removal) {
            (Some(nat), Some(filter)) => Some(nat + &filter),
            (nat, filter) => nat.or(filter),
        };
        if let (Some(script), false) = (&script, dry_run) {
            for spec in &cleanup.delete_separately {
                self.delete_separately(family, spec)?;
            }
            self.restore(family, script)?;
            self.gate.forget(family);
        }
        let mut removed = removed(&names.chain, live.chain_exists, live.jumps.len());
        for (chain, lines) in chains.all().into_iter().zip(&live_share.lines) {
            if lines.is_some() {
                let jumps = if chain == chains.share {
                    live_share.jumps.len()
                } else {
                    0
                };
                removed.push(super::Removed::Chain {
                    chain: chain.to_string(),
                    jumps,
                });
            }
        }
        Ok(CleanupReport {
            family,
            removed,
            left: Vec::new(),
            transaction: script,
        })
    }
}

/// Says once per process that iptables-legacy's `connlimit` forgets its count whenever any
/// program rewrites the filter table (legacy replaces the whole table, and every rule's match
/// starts anew; iptables-nft keeps a rule that did not change).
fn warn_legacy_connection_count() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "podConnectionLimit with iptables-legacy: the kernel forgets each pod's count whenever any program rewrites the filter table (kube-proxy in iptables mode does at each sync), and a pod may then open its limit again; iptables-nft keeps the count"
        );
    }
}

/// The priority of iptables' nat POSTROUTING (NF_IP_PRI_NAT_SRC), in both variants.
const SRCNAT: i64 = 100;

/// What removing our chain (when it exists) and its `jumps` removes, typed.
fn removed(chain: &ChainName, exists: bool, jumps: usize) -> Vec<super::Removed> {
    let chain = chain.to_string();
    match (exists, jumps) {
        (true, jumps) => vec![super::Removed::Chain { chain, jumps }],
        (false, 0) => Vec::new(),
        (false, jumps) => vec![super::Removed::Jumps { chain, jumps }],
    }
}

/// A save that lacks the nat table it was asked for, or says the table is incompatible (a rule
/// iptables-nft cannot translate, e.g. one added with `nft`), is a failed observation: acting
/// on it would append another jump every pass.
fn check_nat_readable(program: &str, saved: &str, nat_required: bool) -> Result<(), BackendError> {
    check_compatible(program, saved, "nat")?;
    if nat_required && !saved.lines().any(|l| l.trim_end() == "*nat") {
        return Err(BackendError::Unreadable {
            program: program.to_string(),
            table: "nat".into(),
            detail:
                "the output has no *nat section; ipmasq writes nothing to a table it cannot read"
                    .into(),
        });
    }
    Ok(())
}

/// A table iptables-nft says it cannot show (a rule written with nft in a form iptables cannot
/// print) is a failed observation: acting on it would write our rules again every pass (the
/// nat chain's jump, the pod share's FORWARD jump and chains).
fn check_compatible(program: &str, saved: &str, table: &str) -> Result<(), BackendError> {
    let header = format!("# Table `{table}'");
    match saved
        .lines()
        .find(|l| l.starts_with(&header) && l.contains("incompatible"))
    {
        Some(line) => Err(BackendError::Unreadable {
            program: program.to_string(),
            table: table.into(),
            detail: format!(
                "{line} A rule in the ip {table} table was written with nft in a form iptables cannot show; ipmasq writes nothing to a table it cannot read. Find it with `nft list table ip {table}` and remove it, or move it to a table of its own"
            ),
        }),
        None => Ok(()),
    }
}

impl From<RunError> for BackendError {
    fn from(err: RunError) -> Self {
        match err {
            RunError::NotFound { program } => BackendError::Missing { program },
            other => BackendError::Run(other.to_string()),
        }
    }
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
