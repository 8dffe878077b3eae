//! `ipmasq agent` (and the binary invoked as `ip-masq-agent`): start-up (backend choice, flag
//! checks, the start line in the log), then `--dry-run`, `--once` or the reconcile loop.

use super::{choose_backend, plan_options, rule_settings, Exit};
use crate::agent::last_known_good;
use crate::agent::reconcile::ApiSettings;
use crate::agent::reconcile::{Pass, Reconciler, Settings};
use crate::agent::state::{state_dir, AgentState};
use crate::agent::{logging, run_forever, Ending, RunOptions};
use crate::cli::{AgentArgs, ConfigSourceArg};
use crate::cluster::configmap::CONFIG_KEY;
use crate::cluster::Credentials;
use tracing::{error, info, warn};

/// API mode's settings from the flags: credentials that can make a client (checked now, so a
/// missing service account is a start-up error that says what to do), the node's name, and
/// the last-known-good config of the ConfigMap, if one was saved.
fn api_settings(args: &AgentArgs) -> Result<ApiSettings, String> {
    let credentials = Credentials::from_flag(args.kubeconfig.as_deref(), Credentials::InCluster);
    // `--offline` never makes a client: a boot guard needs no kubeconfig or token.
    if !args.offline {
        crate::cluster::check_credentials(&credentials).map_err(|err| err.to_string())?;
    }
    let configmap = args.configmap.clone();
    let node_name = crate::cluster::node_name(args.node_name.as_deref());
    let last_known_good_dir = last_known_good::dir(args.last_known_good_dir.as_deref());
    let in_dir = last_known_good::read(
        &last_known_good_dir,
        &configmap.to_string(),
        node_name.as_deref(),
    );
    let last_known_good_in_dir = matches!(in_dir, Ok(Some(_)));
    let found = in_dir.and_then(|found| match found {
        Some(saved) => Ok(Some(saved)),
        None => last_known_good::read_earlier(
            &state_dir(args.state_dir.as_deref()),
            &configmap.to_string(),
            node_name.as_deref(),
        ),
    });
    let last_known_good = match found {
        Ok(Some(saved)) if saved.unsealed() => {
            warn!(config = %saved.provenance, "the last-known-good config was saved before seals: applied if the API is away, but neither its node nor its content can be verified (the next read of the API saves it sealed)");
            Some(saved)
        }
        Ok(saved) => saved,
        Err(reason) => {
            warn!(%reason, "refusing the last-known-good config (left in place); waiting for the API");
            None
        }
    };
    Ok(ApiSettings {
        configmap,
        credentials,
        node_name,
        last_known_good,
        last_known_good_dir,
        last_known_good_in_dir,
        status: crate::agent::reconcile::StatusWrites {
            enabled: args.node_status,
            spread: args.status_spread.to_std().unwrap_or_default(),
            node_taint: args.node_taint,
        },
    })
}

/// The start line of API mode: which ConfigMap, as which node, with which credentials, and
/// the last-known-good found.
fn log_api_mode(api: &ApiSettings) {
    info!(
        configmap = %api.configmap,
        key = CONFIG_KEY,
        node = api.node_name.as_deref().unwrap_or("unknown"),
        credentials = %credentials_words(&api.credentials),
        last_known_good = api.last_known_good.as_ref().map_or("none", |saved| saved.provenance.as_str()),
        node_status = api.status.enabled,
        node_taint = api.status.node_taint,
        status_spread_s = api.status.spread.as_secs_f64(),
        "API mode: the config is the ConfigMap's, read through the Kubernetes API"
    );
    if api.node_name.is_none() {
        warn!("API mode without a node name (--node-name, $NODE_NAME, the host name): no node pool applies, only the base ConfigMap and the EgressNATPolicies");
    }
}

/// How the start line names where the API's credentials come from.
fn credentials_words(credentials: &Credentials) -> String {
    match credentials {
        Credentials::Kubeconfig(path) => format!("kubeconfig {}", path.display()),
        Credentials::InCluster => "the pod's service account".into(),
        Credentials::Inferred => "kubectl's search".into(),
    }
}

/// `--once` and `--dry-run` in API mode: one read of the ConfigMap (no watch), published to
/// the source as a first list would be; when the API cannot be read, the source falls back to
/// the last-known-good, if any.
fn read_the_api_once(reconciler: &Reconciler, api: &ApiSettings) {
    let Some(feed) = reconciler.api_feed() else {
        return;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            error!(error = %err, "cannot start the runtime to read the API");
            return;
        }
    };
    let read = runtime.block_on(async {
        let manners = crate::cluster::Manners {
            node: api.node_name.clone(),
            clock: None,
            answer_cap: crate::agent::memory::answer_cap(
                crate::agent::memory::read_limit().bytes(),
            ),
        };
        let client = crate::cluster::client_with(&api.credentials, &manners)
            .await
            .map_err(|err| err.to_string())?;
        tokio::time::timeout(
            crate::cluster::REQUEST_TIMEOUT,
            crate::cluster::inputs::fetch_into(
                client,
                &api.configmap,
                api.node_name.as_deref(),
                &feed,
            ),
        )
        .await
        .map_err(|_| "no answer from the API in time".to_string())?
    });
    if let Err(reason) = read {
        warn!(configmap = %api.configmap, error = %reason, "cannot read the config's inputs from the API");
        feed.lock()
            .unwrap_or_else(|e| e.into_inner())
            .unreadable(reason);
    }
}

/// `--once --offline` in API mode: the last-known-good is all there is to apply; without one,
/// an error that says what the node then relies on.
fn offline_has_a_config(api: &ApiSettings) -> Result<(), Exit> {
    if api.last_known_good.is_some() {
        return Ok(());
    }
    let reason = format!(
        "--offline: no last-known-good config to apply in {} (none saved yet on this node, or refused: see above); nothing applied before the API answers: until the agent's first sync, only a taint {} on the Node (put there at its registration or its last shutdown) keeps new pods off",
        api.last_known_good_dir.display(),
        crate::cluster::taint::TAINT_KEY
    );
    error!("{reason}");
    Err(Exit::Failure)
}

/// `--config-source=api`'s settings (None for a file); a usage error said and its exit.
fn api_of(args: &AgentArgs) -> Result<Option<ApiSettings>, Exit> {
    match args.config_source {
        ConfigSourceArg::File => Ok(None),
        ConfigSourceArg::Api => api_settings(args).map(Some).map_err(|reason| {
            error!("{reason}");
            eprintln!("ipmasq agent: {reason}");
            Exit::Usage
        }),
    }
}

/// The backend as the start line names it: its name and why it was chosen.
#[derive(Clone, Copy)]
struct BackendWords<'a> {
    name: &'a str,
    choice: &'a str,
}

/// The start line: the version, the backend and every flag that shapes the rules.
fn log_start(args: &AgentArgs, backend: BackendWords<'_>, config_label: &str, random_fully: bool) {
    let flags = &args.rules.config_flags;
    info!(
        version = env!("CARGO_PKG_VERSION"),
        backend = %backend.name,
        backend_choice = %backend.choice,
        config = %config_label,
        masq_chain = %args.rules.masq_chain,
        enable_ipv6 = flags.enable_ipv6,
        nomasq_all_reserved_ranges = flags.nomasq_all_reserved_ranges,
        random_fully,
        to_ports = %args.rules.to_ports,
        cleanup_on_exit = args.cleanup_on_exit,
        once = args.once,
        dry_run = args.dry_run,
        conntrack_reset = args.conntrack_reset.as_str(),
        nftables_table_owner = args.nftables_table_owner,
        "ipmasq agent starting"
    );
}

/// Runs the agent applet.
pub fn run(args: &AgentArgs) -> Exit {
    logging::init(args.log_format, args.verbosity);
    crate::backend::hold_tables(args.nftables_table_owner);
    let selected = choose_backend(&args.backend);
    let backend = selected.backend;
    let plan = plan_options(&args.rules);
    if let Err(reason) = backend.id().accepts(&plan.names()) {
        // A flag value the backend cannot use: upstream's exit status for a refused flag.
        error!("--masq-chain: {reason}");
        eprintln!("ipmasq agent: --masq-chain: {reason}");
        return Exit::Failure;
    }
    let ignored = args.klog.given();
    if !ignored.is_empty() {
        info!(flags = %ignored.join(" "), "klog flags accepted for compatibility and ignored; logs go to stderr");
    }
    let random_fully = plan.random_fully;
    let source = args.config_source();
    let api = match api_of(args) {
        Ok(api) => api,
        Err(exit) => return exit,
    };
    let config_label = match &api {
        Some(api) => format!("configmap {} key {}", api.configmap, CONFIG_KEY),
        None => source.to_string(),
    };
    let settings = Settings {
        config: source.clone(),
        api: api.clone(),
        options: args.config_options(),
        plan,
        dry_run: args.dry_run,
        single_pass: args.once || args.dry_run,
        conntrack_reset: args.conntrack_reset,
    };
    let backend_name = backend.name();
    let backend_id = backend.id();
    let backend_words = BackendWords {
        name: &backend_name,
        choice: &selected.reason,
    };
    log_start(args, backend_words, &config_label, random_fully);
    if let Some(api) = &api {
        log_api_mode(api);
    }
    let mut reconciler = Reconciler::new(settings, backend);
    log_memory_limit(&reconciler, &backend_name);
    match &api {
        Some(api) if args.offline => {
            if let Err(exit) = offline_has_a_config(api) {
                return exit;
            }
        }
        Some(api) if args.dry_run || args.once => read_the_api_once(&reconciler, api),
        _ => {}
    }

    if args.dry_run {
        return dry_run(&mut reconciler);
    }
    if args.once {
        return once(args, &mut reconciler);
    }
    let options = RunOptions {
        cleanup_on_exit: args.cleanup_on_exit,
        metrics_addr: args.metrics_addr.0,
        snat: snat_options(args, api.as_ref()),
        api_view_stale_after: std::time::Duration::from_secs(args.api_view_stale_after),
        config_writer_deadline: args.config_writer_deadline.to_std().unwrap_or_default(),
        state_dir: state_dir(args.state_dir.as_deref()),
        state: agent_state(
            args,
            backend_id,
            selected.reason,
            api.is_some().then_some(config_label),
        ),
    };
    match run_forever(reconciler, options) {
        Ending::Stopped => Exit::Ok,
        Ending::CleanupFailed => Exit::Failure,
        Ending::SetupFailed(reason) => {
            error!("{reason}");
            Exit::Failure
        }
    }
}

/// What the state file says of this agent at start: the backend and why it was chosen;
/// `api_config` names the ConfigMap in API mode.
fn agent_state(
    args: &AgentArgs,
    backend: crate::backend::BackendId,
    backend_choice: String,
    api_config: Option<String>,
) -> AgentState {
    AgentState {
        schema_version: 1,
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend,
        backend_choice,
        config: api_config.unwrap_or_else(|| args.config.display().to_string()),
        config_dir: args.config_dir.as_ref().map(|d| d.display().to_string()),
        config_source: "unknown".into(),
        rules: rule_settings(&args.rules),
        instance: crate::agent::state::new_instance(),
        config_read: None,
        config_rejected: None,
    }
}

/// Says once, at start, what memory limit configs are checked against, or that none is: a
/// limit that cannot be read (no memory cgroup mounted) is a warning, as every list is then
/// applied unchecked and a long one can get the agent OOM-killed.
fn log_memory_limit(reconciler: &Reconciler, backend_name: &str) {
    use crate::agent::memory::Limit;
    use crate::text::mib;
    match reconciler.memory_limit_found() {
        Limit::Bytes(limit) => info!(
            limit = %mib(*limit),
            fits = %reconciler.what_fits(*limit),
            backend = %backend_name,
            "memory limit found; a config whose estimated peak does not fit is refused"
        ),
        Limit::Unlimited { dir } => info!(
            cgroup = %dir.display(),
            "no memory limit is set for this agent; configs are not checked against memory"
        ),
        Limit::Unreadable(reason) => warn!(
            reason = %reason,
            "cannot read this agent's memory limit; configs are not checked against memory, and a list too long for the container's limit gets the agent OOM-killed"
        ),
    }
}

/// `--once`: one pass under the node lock; then, once our rules are in force, the other
/// kind's leftovers go.
fn once(args: &AgentArgs, reconciler: &mut Reconciler) -> Exit {
    let lock = match crate::agent::take_node_lock(
        &state_dir(args.state_dir.as_deref()),
        args.rules.masq_chain.as_str(),
    ) {
        Ok(lock) => lock,
        Err(err) => {
            error!("{err}; touching no rule");
            return Exit::Failure;
        }
    };
    reconciler.take_over_leftovers();
    let exit = match reconciler.pass() {
        Pass::Synced(_) => {
            // Our rules are in force: now, and only now, the other kind's may go.
            crate::agent::remove_leftovers_of_other_backends(
                reconciler.backend_id(),
                &reconciler.settings.plan.names(),
            );
            Exit::Ok
        }
        Pass::NoValidConfig | Pass::Failed(_) => Exit::Failure,
    };
    lock.release();
    exit
}

/// What the dry run found in the conntrack table: the flows the change would reset, and those
/// it would leave on their old decision (outside `--conntrack-reset`); nothing when no flow
/// contradicts the change (the output is then the transactions alone, as before).
fn print_flows_to_reset(reconciler: &Reconciler) {
    for (family, report) in reconciler.conntrack_reports() {
        if report.reset + report.left == 0 {
            continue;
        }
        println!(
            "# {family} conntrack: {} of {} tracked flows would be reset (--conntrack-reset={}){}",
            report.reset,
            report.examined,
            reconciler.settings.conntrack_reset.as_str(),
            if report.left > 0 {
                format!(", {} left on their old decision", report.left)
            } else {
                String::new()
            }
        );
        for (flows, total, verb) in [
            (&report.listed, report.reset, "reset"),
            (&report.listed_left, report.left, "left"),
        ] {
            for flow in flows {
                println!("{verb}: {}", crate::output::printable(flow));
            }
            if total > flows.len() {
                println!("{verb}: ... and {} more", total - flows.len());
            }
        }
    }
}

/// One pass that writes nothing; prints each family's transaction (or that it is in sync).
fn dry_run(reconciler: &mut Reconciler) -> Exit {
    match reconciler.pass() {
        Pass::Synced(reports) => {
            for report in reports {
                match report.transaction {
                    Some(ref script) => {
                        println!(
                            "# {} ({}): would apply ({})",
                            report.family,
                            reconciler.backend_name(),
                            report.repairs().join(", ")
                        );
                        for line in script.lines() {
                            println!("{}", crate::output::printable(line));
                        }
                    }
                    None => println!(
                        "# {} ({}): in sync, nothing to apply",
                        report.family,
                        reconciler.backend_name()
                    ),
                }
            }
            print_flows_to_reset(reconciler);
            Exit::Ok
        }
        Pass::NoValidConfig | Pass::Failed(_) => Exit::Failure,
    }
}

/// What `--snat-log` and `--snat-port-pressure` ask for (None: neither). In API mode, with
/// the node's name known, the log names each flow's pod (the pod watch fills the directory).
fn snat_options(args: &AgentArgs, api: Option<&ApiSettings>) -> Option<crate::snat::SnatOptions> {
    if args.snat_log.is_none() && !args.snat_port_pressure {
        return None;
    }
    Some(crate::snat::SnatOptions {
        log: args
            .snat_log
            .as_deref()
            .map(crate::snat::writer::Destination::parse),
        rotation: crate::snat::writer::Rotation {
            max_size: args.snat_log_max_size,
            keep: args.snat_log_keep,
        },
        to_ports: args.rules.to_ports.clone(),
        memory_limit: crate::agent::memory::read_limit().bytes(),
        pods: api
            .and_then(|api| api.node_name.clone())
            .filter(|_| args.snat_log.is_some())
            .map(|node| crate::snat::pods::PodNames {
                directory: Default::default(),
                node,
            }),
    })
}
