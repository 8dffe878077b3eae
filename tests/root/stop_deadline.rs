//! A stop with `--cleanup-on-exit` has one deadline, even while `iptables-restore` hangs.

use super::netns::Netns;
use std::time::Duration;

/// How long a test waits for an observable event before failing.
const PATIENCE: Duration = Duration::from_secs(20);

/// `--cleanup-on-exit` (the systemd unit sets it) with SIGTERM while `iptables-restore` hangs:
/// the stop kills the wedged tool, cleans up, and ends within its deadline. When the tool
/// hangs at every call, the stop still ends within the deadline, exit 1, naming what it left.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn cleanup_on_exit_during_a_hanging_restore_is_bounded() {
    use std::process::Stdio;
    for hang_always in [false, true] {
        let mut ns = Netns::new("stophang");
        let dir = crate::util::Scratch::new(&format!("stophang-{hang_always}"));
        let mode = dir.path.join("mode");
        let hanging = dir.path.join("hanging");
        std::fs::write(&mode, "ok").unwrap();
        // In hang mode the fake says so (an observable event), then hangs; "once" goes back
        // to working for the next call.
        super::netns::executable(
            &dir.path.join("iptables-nft-restore"),
            &format!(
                "#!/bin/sh\nm=$(cat '{mode}')\nif [ \"$m\" != ok ]; then\n  [ \"$m\" = once ] && echo ok > '{mode}'\n  echo $$ >> '{hanging}'\n  exec sleep 600\nfi\nexec /usr/sbin/iptables-nft-restore \"$@\"\n",
                mode = mode.display(),
                hanging = hanging.display()
            ),
        );
        std::fs::write(dir.path.join("config"), "resyncInterval: 1h\n").unwrap();
        let log = dir.path.join("agent.log");
        let config = format!("--config={}", dir.path.join("config").display());
        let child = ns
            .ipmasq_with_path(
                &dir.path,
                &[
                    "agent",
                    "--iptables-mode=nft",
                    &config,
                    "--cleanup-on-exit",
                    "--metrics-addr=off",
                ],
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let pid = child.id();
        ns.adopt(child);
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            super::netns::wait_until(PATIENCE, || log_text().contains("rules installed")),
            "{}",
            log_text()
        );
        // Drift, and a repair that hangs in iptables-restore.
        std::fs::write(&mode, if hang_always { "always" } else { "once" }).unwrap();
        ns.sh("iptables-nft -t nat -D IP-MASQ-AGENT 1");
        super::netns::kill(pid, "HUP");
        assert!(super::netns::wait_until(PATIENCE, || hanging.exists()));
        let stopping = std::time::Instant::now();
        super::netns::kill(pid, "TERM");
        // The stop deadline is 20 s; the test waits longer than that, not for speed.
        let code = ns.wait_daemon(pid, Duration::from_secs(40));
        let took = stopping.elapsed();
        let text = log_text();
        assert!(
            code.is_some(),
            "SIGTERM did not end the agent; log:\n{text}"
        );
        assert!(
            took < Duration::from_secs(30),
            "took {took:?}; log:\n{text}"
        );
        let ours = ns.save("nft", false, Some("nat"));
        if hang_always {
            assert_eq!(code, Some(1), "{text}");
            assert!(text.contains("rules left in place"), "{text}");
            assert!(text.contains("remove them with `ipmasq cleanup`"), "{text}");
        } else {
            assert_eq!(code, Some(0), "{text}");
            assert!(text.contains("stopped the firewall tool"), "{text}");
            assert!(!ours.contains("IP-MASQ-AGENT"), "rules removed:\n{ours}");
        }
        // Every hung tool was ended, none outlives the test.
        for pid in std::fs::read_to_string(&hanging).unwrap().lines() {
            assert!(
                super::netns::wait_until(PATIENCE, || !std::path::Path::new(&format!(
                    "/proc/{pid}"
                ))
                .exists()),
                "the fake restore {pid} still runs"
            );
        }
    }
}
