//! `ipmasq agent` (and the binary invoked as `ip-masq-agent`): start-up (backend choice, flag
//! checks, the start line in the log), then `--dry-run`, `--once` or the reconcile loop.

use super::{choose_variant, plan_options, Exit};
use crate::agent::reconcile::{Pass, Reconciler, Settings};
use crate::agent::{logging, run_forever, Ending};
use crate::backend::iptables::Iptables;
use crate::cli::AgentArgs;
use tracing::{error, info, warn};

/// Runs the agent applet.
pub fn run(args: &AgentArgs) -> Exit {
    logging::init(args.log_format, args.verbosity);
    let (variant, why) = choose_variant(args.rules.iptables_mode);
    let backend = Iptables::new(variant);
    let (plan, note) = plan_options(&args.rules, &backend);
    if let Some(note) = note {
        warn!("{note}");
    }
    let ignored = args.klog.given();
    if !ignored.is_empty() {
        info!(flags = %ignored.join(" "), "klog flags accepted for compatibility and ignored; logs go to stderr");
    }
    let random_fully = plan.random_fully;
    let flags = &args.rules.config_flags;
    let settings = Settings {
        config_path: args.config.clone(),
        options: flags.options(),
        plan,
        dry_run: args.dry_run,
    };
    info!(
        version = env!("CARGO_PKG_VERSION"),
        backend = %backend.name(),
        backend_choice = %why,
        config = %args.config.display(),
        masq_chain = %args.rules.masq_chain,
        enable_ipv6 = flags.enable_ipv6,
        nomasq_all_reserved_ranges = flags.nomasq_all_reserved_ranges,
        random_fully,
        to_ports = %args.rules.to_ports,
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
    match run_forever(reconciler, args.cleanup_on_exit, args.metrics_addr.0) {
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
        Pass::NoValidConfig | Pass::Failed(_) => Exit::Failure,
    }
}
