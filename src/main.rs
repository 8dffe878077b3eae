//! Entry point of the multi-call `ipmasq` binary: argv[0] or the first argument picks the applet.

fn main() -> std::process::ExitCode {
    ipmasq::cmd::main(std::env::args_os().collect())
}
