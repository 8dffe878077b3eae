//! `ipmasq agent` (and the binary invoked as `ip-masq-agent`): start-up (backend choice, flag
//! checks, the start line in the log), then `--dry-run`, `--once` or the reconcile loop.

use super::Exit;
use crate::agent::reconcile::{Pass, Reconciler, Settings};
use crate::agent::{logging, run_forever, Ending};
use crate::backend::iptables::{detect_variant, Iptables, Variant};
use crate::cli::{AgentArgs, IptablesMode};
use crate::plan::PlanOptions;
use tracing::{error, info, warn};

/// Picks the iptables variant: as told, or detected like iptables-wrappers.
fn choose_variant(mode: IptablesMode) -> (Variant, String) {
    match mode {
        IptablesMode::Nft => (Variant::Nft, "--iptables-mode=nft".into()),
        IptablesMode::Legacy => (Variant::Legacy, "--iptables-mode=legacy".into()),
        IptablesMode::Auto => {
            let detection = detect_variant();
            (detection.variant, format!("auto: {}", detection.reason))
        }
    }
}

/// Runs the agent applet.
pub fn run(args: &AgentArgs) -> Exit {
    logging::init(args.log_format, args.verbosity);
    let (variant, why) = choose_variant(args.iptables_mode);
    let backend = Iptables::new(variant);
    let random_fully = if args.random_fully {
        match backend.supports_random_fully() {
            Ok(true) => true,
            Ok(false) => {
                warn!(backend = %backend.name(), "this iptables is older than 1.6.2 and lacks --random-fully; writing plain MASQUERADE rules");
                false
            }
            Err(err) => {
                warn!(error = %err, "cannot tell whether iptables supports --random-fully; assuming it does");
                true
            }
        }
    } else {
        false
    };
    let settings = Settings {
        config_path: args.config.clone(),
        options: args.config_flags.options(),
        plan: PlanOptions {
            chain: args.masq_chain.clone(),
            random_fully,
            to_ports: args.to_ports.clone(),
            enable_ipv6: args.config_flags.enable_ipv6,
        },
        dry_run: args.dry_run,
    };
    info!(
        version = env!("CARGO_PKG_VERSION"),
        backend = %backend.name(),
        backend_choice = %why,
        config = %args.config.display(),
        masq_chain = %args.masq_chain,
        enable_ipv6 = args.config_flags.enable_ipv6,
        nomasq_all_reserved_ranges = args.config_flags.nomasq_all_reserved_ranges,
        random_fully,
        to_ports = %args.to_ports,
        cleanup_on_exit = args.cleanup_on_exit,
        once = args.once,
        dry_run = args.dry_run,
        "ipmasq agent starting"
    );
    let mut reconciler = Reconciler::new(settings, Box::new(backend));

    if args.dry_run {
        return dry_run(&mut reconciler);
    }
    if args.once {
        return match reconciler.pass() {
            Pass::Synced(_) => Exit::Ok,
            Pass::NoValidConfig | Pass::Failed(_) => Exit::Failure,
        };
    }
    match run_forever(reconciler, args.cleanup_on_exit) {
        Ending::Stopped => Exit::Ok,
        Ending::CleanupFailed => Exit::Failure,
        Ending::SetupFailed(reason) => {
            error!("{reason}");
            Exit::Failure
        }
    }
}

/// One pass that writes nothing; prints each family's transaction (or that it is in sync).
fn dry_run(reconciler: &mut Reconciler) -> Exit {
    match reconciler.pass() {
        Pass::Synced(families) => {
            for family in families {
                match family.transaction {
                    Some(script) => {
                        println!(
                            "# {} ({}): would apply ({})",
                            family.family,
                            reconciler.backend_name(),
                            family
                                .drift
                                .kinds
                                .iter()
                                .map(|k| k.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                        print!("{script}");
                    }
                    None => println!(
                        "# {} ({}): in sync, nothing to apply",
                        family.family,
                        reconciler.backend_name()
                    ),
                }
            }
            Exit::Ok
        }
        Pass::NoValidConfig => Exit::Failure,
        Pass::Failed(_) => Exit::Failure,
    }
}
