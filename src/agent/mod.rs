//! The agent: the reconcile loop and what triggers it (the resync timer, a change in the
//! config directory, SIGHUP), on a current-thread tokio runtime. SIGTERM and SIGINT end it,
//! after removing our rules when asked to.

pub mod health;
pub mod http;
pub mod logging;
pub mod reconcile;
pub mod watch;

use crate::backend::cleanup_everywhere;
use crate::backend::iptables::Variant;
use reconcile::{Pass, Reconciler};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{debug, error, info};
use watch::DirWatch;

/// How long a burst of config-directory events must be quiet before one reload.
const SETTLE: Duration = Duration::from_millis(20);

/// How the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// A signal asked us to stop; cleanup (if requested) succeeded.
    Stopped,
    /// Cleanup on exit failed for at least one family.
    CleanupFailed,
    /// The runtime or signal handling could not be set up.
    SetupFailed(String),
}

/// Why a pass was triggered.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    Timer,
    ConfigChanged,
    Hangup,
}

/// Runs the reconcile loop until SIGTERM/SIGINT, serving health and metrics on
/// `metrics_addr` when given.
pub fn run_forever(
    reconciler: Reconciler,
    cleanup_on_exit: bool,
    metrics_addr: Option<std::net::SocketAddr>,
) -> Ending {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => return Ending::SetupFailed(format!("cannot start the runtime: {err}")),
    };
    runtime.block_on(run_loop(reconciler, cleanup_on_exit, metrics_addr))
}

async fn run_loop(
    mut reconciler: Reconciler,
    cleanup_on_exit: bool,
    metrics_addr: Option<std::net::SocketAddr>,
) -> Ending {
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    );
    let (mut sigterm, mut sigint, mut sighup) = match signals {
        (Ok(t), Ok(i), Ok(h)) => (t, i, h),
        _ => return Ending::SetupFailed("cannot install signal handlers".into()),
    };
    let shared: http::Shared =
        Arc::new(Mutex::new(health::Snapshot::new(reconciler.backend_name())));
    if let Some(addr) = metrics_addr {
        match http::bind(addr).await {
            Ok(listener) => {
                info!(address = %addr, "serving /healthz, /readyz and /metrics");
                tokio::spawn(http::serve(listener, shared.clone()));
            }
            Err(err) => {
                return Ending::SetupFailed(format!(
                    "cannot listen on {addr} for health and metrics: {err} (choose another --metrics-addr, or off)"
                ))
            }
        }
    }
    let mut watch = DirWatch::new(&reconciler.settings.config_path);
    let mut trigger = Trigger::Timer;
    loop {
        watch.arm();
        let started = std::time::Instant::now();
        let pass = reconciler.pass();
        {
            let mut snapshot = shared.lock().unwrap_or_else(|e| e.into_inner());
            snapshot.status = reconciler.status.clone();
            snapshot.interval = reconciler.interval();
        }
        debug!(
            ?trigger,
            elapsed_ms = started.elapsed().as_millis() as u64,
            outcome = pass_name(&pass),
            "pass done"
        );
        let interval = reconciler.interval();
        let signal_name = tokio::select! {
            _ = tokio::time::sleep(interval) => { trigger = Trigger::Timer; None }
            _ = watch.changed() => {
                watch.settle(SETTLE).await;
                trigger = Trigger::ConfigChanged;
                None
            }
            _ = sighup.recv() => {
                info!("SIGHUP: re-reading the config and re-syncing");
                trigger = Trigger::Hangup;
                None
            }
            _ = sigterm.recv() => Some("SIGTERM"),
            _ = sigint.recv() => Some("SIGINT"),
        };
        if let Some(name) = signal_name {
            return shutdown(&reconciler, cleanup_on_exit, name);
        }
    }
}

fn pass_name(pass: &Pass) -> &'static str {
    match pass {
        Pass::Synced(_) => "synced",
        Pass::NoValidConfig => "no-valid-config",
        Pass::Failed(_) => "failed",
    }
}

/// Removes our chain and jumps, as `ipmasq cleanup` does: every family of both iptables
/// variants (leftovers of an earlier mode or an IPv6 run are ours too).
pub fn cleanup(reconciler: &Reconciler) -> bool {
    let chain = &reconciler.settings.plan.chain;
    let mut ok = true;
    for step in cleanup_everywhere(chain, &[Variant::Nft, Variant::Legacy], false) {
        match step.outcome {
            Ok(done) if done.transaction.is_some() => info!(
                backend = %step.backend,
                family = %step.family,
                jumps_removed = done.jumps_removed,
                chain_removed = done.chain_removed,
                "rules removed"
            ),
            Ok(_) => {}
            Err(err) => {
                ok = false;
                error!(backend = %step.backend, family = %step.family, error = %err, "cleanup failed");
            }
        }
    }
    ok
}

fn shutdown(reconciler: &Reconciler, cleanup_on_exit: bool, signal_name: &str) -> Ending {
    if cleanup_on_exit {
        info!(
            signal = signal_name,
            "stopping; removing rules (--cleanup-on-exit)"
        );
        if !cleanup(reconciler) {
            return Ending::CleanupFailed;
        }
    } else {
        info!(signal = signal_name, "stopping; rules stay in place");
    }
    Ending::Stopped
}
