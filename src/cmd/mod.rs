//! The applets behind the multi-call binary, and the one place exit codes are chosen.

pub mod agent;
pub mod validate;

use crate::cli::{multicall_args, Applet, Cli, APPLETS, BINARY_NAME};
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
        Some(Applet::Show(_)) => not_yet("show"),
        Some(Applet::Cleanup(_)) => not_yet("cleanup"),
        None => Exit::Usage,
    };
    exit.into()
}

fn not_yet(applet: &str) -> Exit {
    eprintln!("{BINARY_NAME} {applet}: not yet implemented in this version");
    Exit::Failure
}
