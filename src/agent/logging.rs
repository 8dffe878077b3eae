//! Log set-up for the agent: tracing to stderr, text or JSON, with klog's `--v` mapped onto
//! levels (0-1 info, 2-4 debug, 5+ trace).

use crate::cli::LogFormat;
use std::io::IsTerminal;
use tracing::Level;

/// The tracing level for a klog verbosity.
pub fn level_for(verbosity: u8) -> Level {
    match verbosity {
        0 | 1 => Level::INFO,
        2..=4 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// Installs the global subscriber; a second call is a no-op.
pub fn init(format: LogFormat, verbosity: u8) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level_for(verbosity))
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_verbosity_maps_to_levels() {
        assert_eq!(level_for(0), Level::INFO);
        assert_eq!(level_for(2), Level::DEBUG);
        assert_eq!(level_for(9), Level::TRACE);
    }
}
