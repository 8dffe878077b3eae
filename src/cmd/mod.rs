//! The applets behind the multi-call binary, and the one place exit codes are chosen.

pub mod agent;
pub mod cleanup;
pub mod generate;
pub mod show;
pub mod validate;

use crate::backend::iptables::{detect_variant, Iptables, Variant};
use crate::backend::BackendError;
use crate::cli::{
    multicall_args, Applet, Cli, IptablesMode, RuleFlags, APPLETS, BINARY_NAME, GENERATE_APPLET,
};
use crate::plan::PlanOptions;
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

/// Documented exit codes, shared by every applet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Success; for `validate`: every input is valid.
    Ok = 0,
    /// The input is invalid (or, with `--strict`, has warnings); an applet failed.
    Failure = 1,
    /// Bad usage, an unknown applet, or an input that could not be read.
    Usage = 2,
    /// `show`: our rules are not installed.
    NotInstalled = 3,
    /// The firewall refused us: CAP_NET_ADMIN is needed.
    Permission = 4,
    /// iptables is not installed.
    ToolMissing = 5,
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

/// Picks the iptables variant: as told, or detected like iptables-wrappers; says why.
pub fn choose_variant(mode: IptablesMode) -> (Variant, String) {
    match mode {
        IptablesMode::Nft => (Variant::Nft, "--iptables-mode=nft".into()),
        IptablesMode::Legacy => (Variant::Legacy, "--iptables-mode=legacy".into()),
        IptablesMode::Auto => {
            let detection = detect_variant();
            (detection.variant, format!("auto: {}", detection.reason))
        }
    }
}

/// The plan options the agent would use with these flags on this backend: `--random-fully` is
/// dropped where iptables lacks it (with the reason, for a warning).
pub fn plan_options(flags: &RuleFlags, backend: &Iptables) -> (PlanOptions, Option<String>) {
    let (random_fully, note) = if flags.random_fully {
        match backend.supports_random_fully() {
            Ok(true) => (true, None),
            Ok(false) => (
                false,
                Some(format!(
                    "{} is older than 1.6.2 and lacks --random-fully; writing plain MASQUERADE rules",
                    backend.name()
                )),
            ),
            Err(err) => (
                true,
                Some(format!(
                    "cannot tell whether iptables supports --random-fully ({err}); assuming it does"
                )),
            ),
        }
    } else {
        (false, None)
    };
    (
        PlanOptions {
            chain: flags.masq_chain.clone(),
            random_fully,
            to_ports: flags.to_ports.clone(),
            enable_ipv6: flags.config_flags.enable_ipv6,
        },
        note,
    )
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
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            let _ = err.print();
            return code.into();
        }
    };
    if cli.list {
        let mut stdout = std::io::stdout().lock();
        for applet in APPLETS {
            let _ = writeln!(stdout, "{applet}");
        }
        return Exit::Ok.into();
    }
    let exit = match cli.applet {
        Some(Applet::Validate(args)) => validate::run(&args),
        Some(Applet::Agent(args)) => agent::run(&args),
        Some(Applet::Show(args)) => show::run(&args),
        Some(Applet::Cleanup(args)) => cleanup::run(&args),
        None => Exit::Usage,
    };
    exit.into()
}
