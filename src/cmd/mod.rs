//! The applets behind the multi-call binary, and the one place exit codes are chosen.

pub(crate) mod agent;
pub(crate) mod cleanup;
pub(crate) mod explain;
pub(crate) mod fleet;
pub(crate) mod fleet_list;
pub(crate) mod fleet_pods;
pub(crate) mod fleet_rollout;
pub(crate) mod flows;
pub(crate) mod generate;
pub(crate) mod node;
pub(crate) mod show;
pub(crate) mod validate;
pub(crate) mod validate_scope;
pub(crate) mod who;

use crate::backend::select::{select, Selected};
use crate::backend::BackendError;
use crate::cli::{
    applets, multicall_args, Applet, BackendFlags, RuleFlags, BINARY_NAME, GENERATE_APPLET,
};
use crate::plan::PlanOptions;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

/// Documented exit codes, shared by every applet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Success; for `validate`: every input is valid.
    Ok = 0,
    /// The input is invalid (or, with `--strict`, has warnings); an applet failed; `show`:
    /// drift, or the running agent rejected its config.
    Failure = 1,
    /// Bad usage, an unknown applet, or an input that could not be read.
    Usage = 2,
    /// `show`: our rules are not installed.
    NotInstalled = 3,
    /// The firewall refused us: CAP_NET_ADMIN is needed.
    Permission = 4,
    /// iptables is not installed.
    ToolMissing = 5,
    /// `explain`: the traffic keeps its source address.
    Kept = 10,
    /// `explain`: the config and the live rules disagree.
    Disagreement = 11,
}

impl Exit {
    /// The exit code that best describes a backend failure.
    pub fn for_backend_error(err: &BackendError) -> Exit {
        match err {
            BackendError::Missing { .. } => Exit::ToolMissing,
            BackendError::Permission { .. } => Exit::Permission,
            _ => Exit::Failure,
        }
    }
}

/// Builds the backend the flags pick, with the reason.
pub fn choose_backend(flags: &BackendFlags) -> Selected {
    select(flags.choice())
}

/// The plan options the agent uses with these flags. `--random-fully` is planned as asked: an
/// iptables older than 1.6.2 refuses it at its first restore, and the backend then writes
/// plain MASQUERADE rules and says so once.
pub fn plan_options(flags: &RuleFlags) -> PlanOptions {
    PlanOptions {
        chain: flags.masq_chain.clone(),
        random_fully: flags.random_fully,
        to_ports: flags.to_ports.clone(),
        enable_ipv6: flags.config_flags.ipv6(),
    }
}

/// The node fact the plan takes besides the config and the flags, as an applet reads it.
#[derive(Debug, Default)]
pub struct NodeEgress {
    /// The config's output addresses resolved on this machine (unresolved: described, never
    /// written).
    pub egress: crate::plan::ResolvedEgress,
    /// Each family that masquerades because this node holds no address of its output address,
    /// and why (what the agent does and says).
    pub fallback: Vec<(crate::plan::Family, String)>,
    /// Why this machine's addresses could not be read, when they could not (the agent fails
    /// its pass then: the output address is left unresolved).
    pub unread: Option<String>,
}

/// The config's output addresses (of the families `options` manage) resolved against this
/// machine's addresses by the agent's own reader (`addresses::resolve_output_addresses`).
pub fn node_egress(options: &PlanOptions, config: &crate::config::Config) -> NodeEgress {
    let families = crate::plan::families(options, config);
    if !crate::plan::egress::names_output_address(config, &families) {
        return NodeEgress::default();
    }
    let resolver = crate::plan::egress::Resolver::new(config, &families);
    // The reader itself reads a dump that concurrent changes interrupt again, for a while.
    match crate::addresses::resolve_output_addresses(&resolver) {
        Ok(resolution) => NodeEgress {
            fallback: resolution
                .lost
                .iter()
                .map(|(family, err)| (*family, crate::plan::egress::fallback_reason(*family, err)))
                .collect(),
            egress: resolution.egress,
            unread: None,
        },
        Err(err) => NodeEgress {
            unread: Some(format!("cannot read this node's addresses: {err}")),
            ..NodeEgress::default()
        },
    }
}

/// The rule flags as the state file records them.
pub fn rule_settings(flags: &RuleFlags) -> crate::agent::state::RuleSettings {
    crate::agent::state::RuleSettings {
        masq_chain: flags.masq_chain.to_string(),
        enable_ipv6: flags.config_flags.ipv6(),
        nomasq_all_reserved_ranges: flags.config_flags.nomasq_all_reserved_ranges,
        random_fully: flags.random_fully,
        to_ports: flags.to_ports.to_string(),
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// Runs the binary with the given process arguments (argv[0] included).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let argv = match multicall_args(args) {
        Ok(argv) => argv,
        Err(err) => {
            eprintln!("{BINARY_NAME}: {err}");
            return Exit::Usage.into();
        }
    };
    if argv.get(1).is_some_and(|a| a == GENERATE_APPLET) {
        return generate::run(&argv[2..]).into();
    }
    let is_agent = argv.get(1).is_some_and(|a| a == "agent");
    let parsed = crate::cli::command()
        .try_get_matches_from(argv)
        .and_then(|matches| crate::cli::from_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            let bad_value = matches!(
                err.kind(),
                ErrorKind::ValueValidation | ErrorKind::InvalidValue
            );
            let code = if !err.use_stderr() {
                Exit::Ok
            } else if is_agent && bad_value {
                // Upstream's agent exits 1 when it refuses a flag's value (--to-ports=10-5).
                Exit::Failure
            } else {
                Exit::Usage
            };
            let _ = err.print();
            return code.into();
        }
    };
    if cli.list {
        let mut stdout = std::io::stdout().lock();
        for applet in applets() {
            let _ = writeln!(stdout, "{applet}");
        }
        return Exit::Ok.into();
    }
    let exit = match cli.applet {
        Some(Applet::Validate(args)) => validate::run(&args),
        Some(Applet::Agent(args)) => agent::run(&args),
        Some(Applet::Show(args)) => show::run(&args),
        Some(Applet::Cleanup(args)) => cleanup::run(&args),
        Some(Applet::Explain(args)) => explain::run(&args),
        Some(Applet::Fleet(args)) => fleet::run(&args),
        Some(Applet::Who(args)) => who::run(&args),
        None => Exit::Usage,
    };
    exit.into()
}
