//! `ipmasq cleanup`: removes what we own from every backend that holds it (iptables: every
//! POSTROUTING jump to our chain, then the chain; nftables: our table), in one transaction per
//! family and backend, and says so in each backend's own words. Nothing to remove is success;
//! every failure is reported. `agent --cleanup-on-exit` removes through the same backends.
//!
//! JSON report (schemaVersion 1): `{schemaVersion, chain, dryRun, removedAnything, steps:
//! [{backend, family, jumpsRemoved, chainRemoved, transaction, error, left}]}` (`left`, what
//! carries our name but not our mark and was left in place, only when there is any).

use super::{choose_backend, Exit};
use crate::agent::state::{running_agent, state_dir};
use crate::backend::select::Choice;
use crate::backend::select::{every_backend, sweep};
use crate::backend::{Backend, BackendError, BackendId, CleanupReport, Removed};
use crate::cli::{CleanupArgs, OutputFormat};
use crate::output::{printable, to_json, to_yaml, Styler};
use crate::plan::{Family, Names};
use serde::Serialize;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    schema_version: u32,
    chain: String,
    dry_run: bool,
    removed_anything: bool,
    steps: Vec<StepReport>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StepReport {
    backend: BackendId,
    family: String,
    jumps_removed: usize,
    chain_removed: bool,
    /// What was (or would be) removed, typed: `{kind: chain, chain, jumps}`, `{kind: table,
    /// family, table}`.
    removed: Vec<Removed>,
    transaction: Option<String>,
    error: Option<String>,
    /// What carries our name but is not ours (a neighbour's nftables table called
    /// `ipmasq`), left in place, each with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    left: Vec<String>,
}

/// One family of one backend, as cleaned (or not).
struct CleanupStep {
    backend: BackendId,
    family: Family,
    outcome: Result<CleanupReport, BackendError>,
}

impl From<&CleanupStep> for StepReport {
    fn from(step: &CleanupStep) -> Self {
        let (removed, transaction, error, left) = match &step.outcome {
            Ok(done) => (
                done.removed.clone(),
                done.transaction.clone(),
                None,
                done.left.clone(),
            ),
            Err(err) => (Vec::new(), None, Some(err.to_string()), Vec::new()),
        };
        // Kept from schema 1: an nftables table counts as its chain and its hook.
        let jumps = removed
            .iter()
            .map(|r| match r {
                Removed::Chain { jumps, .. } | Removed::Jumps { jumps, .. } => *jumps,
                Removed::Table { .. } => 1,
            })
            .sum();
        let chain = removed
            .iter()
            .any(|r| matches!(r, Removed::Chain { .. } | Removed::Table { .. }));
        StepReport {
            backend: step.backend,
            family: step.family.to_string(),
            jumps_removed: jumps,
            chain_removed: chain,
            removed,
            transaction,
            error,
            left,
        }
    }
}

/// Removes our rules from both families of every given backend whose tools are installed:
/// one transaction per backend and family. Failures are collected, not fatal, so every
/// leftover that can be removed is.
fn cleanup_everywhere(
    backends: &mut [Box<dyn Backend>],
    names: &Names,
    dry_run: bool,
) -> Vec<CleanupStep> {
    sweep(backends, |backend, family| {
        Some(CleanupStep {
            backend: backend.id(),
            family,
            outcome: backend.cleanup(family, names, dry_run),
        })
    })
}

/// The exit code for a set of failures: a shared specific cause, or plain failure.
fn exit_for(errors: &[&BackendError]) -> Exit {
    let codes: Vec<Exit> = errors.iter().map(|e| Exit::for_backend_error(e)).collect();
    match codes.first() {
        None => Exit::Ok,
        Some(&first) if codes.iter().all(|&c| c == first) => first,
        Some(_) => Exit::Failure,
    }
}

/// The backends `cleanup` removes from. Without `--backend` or `--iptables-mode`: every one
/// (both iptables variants and nftables; `--all-variants=false`: the one auto picks). A given
/// flag is obeyed: `--backend=nftables` removes only the nftables table, `--backend=iptables`
/// only the chains of both iptables variants, `--iptables-mode=nft|legacy` only that variant
/// (unless `--all-variants` is given too).
fn backends_to_clean(args: &CleanupArgs) -> Vec<Box<dyn Backend>> {
    let flags = &args.backend;
    let choice = flags.choice();
    let one_variant = flags.given.iptables_mode && choice != Choice::DetectedIptables;
    let all_variants = args.all_variants && (args.all_variants_given || !one_variant);
    if !all_variants || matches!(choice, Choice::Backend(id) if !id.is_iptables()) {
        return vec![choose_backend(flags).backend];
    }
    if !flags.given.any() {
        return every_backend();
    }
    every_backend()
        .into_iter()
        .filter(|b| b.id().is_iptables())
        .collect()
}

/// Runs `ipmasq cleanup`.
// Long: the cleanup, its warnings and its three renderings (text, JSON, YAML) share one
// report and one exit status; the renderings are short arms over that report.
pub fn run(args: &CleanupArgs) -> Exit {
    let mut backends = backends_to_clean(args);
    let names = Names::new(args.masq_chain.clone());
    let steps = cleanup_everywhere(&mut backends, &names, args.dry_run);
    // nf_tables answers without a tool; iptables' rules cannot be checked without its tools.
    let iptables_unchecked = backends.iter().any(|b| b.id().is_iptables())
        && steps.iter().all(|s| !s.backend.is_iptables());
    let no_iptables = || {
        eprintln!(
            "ipmasq cleanup: no iptables found (neither iptables-nft-save nor iptables-legacy-save is on PATH); install iptables"
        );
        Exit::ToolMissing
    };
    if steps.is_empty() {
        return no_iptables();
    }
    let reports: Vec<StepReport> = steps.iter().map(StepReport::from).collect();
    let removed_anything = reports.iter().any(|r| r.transaction.is_some());
    // A dry run warns too: it is how one asks what a cleanup would do.
    if removed_anything {
        if let Some(agent) = running_agent(&state_dir(args.state_dir.as_deref())) {
            if agent.rules.masq_chain == args.masq_chain.as_str() {
                let would = if args.dry_run { "would" } else { "will" };
                eprintln!(
                    "ipmasq cleanup: warning: an agent is running (pid {}, {}) and {would} put these rules back at its next resync; stop it first (systemctl stop ipmasq, or remove the DaemonSet)",
                    agent.pid, agent.backend
                );
            }
        }
    }
    let errors: Vec<&BackendError> = steps
        .iter()
        .filter_map(|s| s.outcome.as_ref().err())
        .collect();
    let report = Report {
        schema_version: 1,
        chain: args.masq_chain.to_string(),
        dry_run: args.dry_run,
        removed_anything,
        steps: reports,
    };
    let style = Styler::for_stdout(args.color);
    match args.output {
        OutputFormat::Json => print!("{}", to_json(&report)),
        OutputFormat::Yaml => print!("{}", to_yaml(&report)),
        OutputFormat::Text => {
            let reports = &report.steps;
            let verb = if args.dry_run {
                "would remove"
            } else {
                "removed"
            };
            for r in reports {
                let what = style.bold(&format!("{} {}", r.backend, r.family));
                if let Some(err) = &r.error {
                    println!("{what}: {} {}", style.error("error:"), printable(err));
                } else if let Some(script) = &r.transaction {
                    println!(
                        "{what}: {}",
                        style.success(&format!("{verb} {}", Removed::words(&r.removed)))
                    );
                    if args.dry_run {
                        for line in script.lines() {
                            println!("{}", printable(line));
                        }
                    }
                } else if r.left.is_empty() {
                    println!("{what}: nothing to remove");
                }
                for left in &r.left {
                    println!("{what}: {} {}", style.warning("left"), printable(left));
                }
            }
            if !removed_anything && errors.is_empty() && !iptables_unchecked {
                println!(
                    "ipmasq cleanup: nothing to remove (no {} chain in a nat table, no ipmasq table{})",
                    args.masq_chain,
                    if reports.iter().any(|r| !r.left.is_empty()) {
                        " of ours"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    if iptables_unchecked {
        return no_iptables();
    }
    exit_for(&errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cleanup_args(argv: &[&str]) -> CleanupArgs {
        let argv = [&["ipmasq", "cleanup"][..], argv].concat();
        let matches = crate::cli::command().try_get_matches_from(argv).unwrap();
        match crate::cli::from_matches(&matches).unwrap().applet {
            Some(crate::cli::Applet::Cleanup(args)) => args,
            other => panic!("{other:?}"),
        }
    }

    /// A `--backend` or `--iptables-mode` given is obeyed; without either, every backend.
    #[test]
    fn cleanup_obeys_the_backend_flags_given() {
        let cleaned = |argv: &[&str]| -> Vec<BackendId> {
            backends_to_clean(&cleanup_args(argv))
                .iter()
                .map(|b| b.id())
                .collect()
        };
        use BackendId::{IptablesLegacy as Legacy, IptablesNft as Nft, Nftables};
        assert_eq!(cleaned(&[]), [Nft, Legacy, Nftables]);
        assert_eq!(cleaned(&["--backend=nftables"]), [Nftables]);
        assert_eq!(cleaned(&["--backend", "nftables"]), [Nftables]);
        assert_eq!(
            cleaned(&["--backend=nftables", "--all-variants=false"]),
            [Nftables]
        );
        assert_eq!(cleaned(&["--backend=iptables"]), [Nft, Legacy]);
        assert_eq!(cleaned(&["--iptables-mode=auto"]), [Nft, Legacy]);
        assert_eq!(cleaned(&["--iptables-mode=legacy"]), [Legacy]);
        assert_eq!(cleaned(&["--iptables-mode=nft"]), [Nft]);
        assert_eq!(
            cleaned(&["--iptables-mode=nft", "--all-variants"]),
            [Nft, Legacy]
        );
        assert_eq!(
            cleaned(&["--iptables-mode=legacy", "--all-variants=false"]),
            [Legacy]
        );
    }

    #[test]
    fn exit_code_names_a_shared_cause() {
        let denied = BackendError::Permission {
            program: "x".into(),
            detail: "d".into(),
        };
        let missing = BackendError::Missing {
            program: "x".into(),
        };
        assert_eq!(exit_for(&[]), Exit::Ok);
        assert_eq!(exit_for(&[&denied, &denied]), Exit::Permission);
        assert_eq!(exit_for(&[&missing]), Exit::ToolMissing);
        assert_eq!(exit_for(&[&denied, &missing]), Exit::Failure);
    }
}
