//! `fleet` without a server: its help teaches the statuses and exit codes, and usage errors and
//! missing credentials exit 2 with words that say what to do.

use crate::util::{binary, ipmasq, Scratch};
use std::process::{Command, Stdio};

/// `ipmasq fleet ARGS` with no kubeconfig anywhere: no $KUBECONFIG file, a $HOME without
/// `.kube`, and not in a pod.
fn fleet_without_credentials(home: &Scratch, args: &[&str]) -> crate::util::Run {
    Command::new(binary())
        .arg("fleet")
        .args(args)
        .env("HOME", &home.path)
        .env("KUBECONFIG", home.path.join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .stdin(Stdio::null())
        .output()
        .expect("run ipmasq fleet")
        .into()
}

#[test]
fn help_names_every_status_the_json_shape_and_the_exit_codes() {
    let run = ipmasq(&["fleet", "--help"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Help wraps its lines: compare with the blanks of every wrap made one.
    let help = run.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for status in [
        "in-sync",
        "drifted",
        "rejected",
        "not-ready",
        "stale",
        "agent-not-ready",
        "agent-down",
        "no-agent",
        "untrusted",
        "unknown",
    ] {
        assert!(
            help.contains(status),
            "{status} is not explained:\n{}",
            run.stdout
        );
    }
    for needle in [
        "IPMasqAgentReady",
        "--kubeconfig",
        "--timeout",
        "--page-size",
        "[default: 60s]",
        "the Node's own Ready condition is not True",
        r#"{"nodes": [{"name", "status", "configDigest", "backend", "lastSync", "writers", "agent"}]}"#,
        "--agent-namespace",
        "--agent-selector",
        "[default: k8s-app=ip-masq-agent]",
        "CrashLoopBackOff",
        "digest=sha256:HEX backend=NAME lastSync=YYYY-MM-DDTHH:MM:SSZ; words",
        "Exit status:",
        "0 every node listed is in sync",
        "1 some node is drifted, rejected, not-ready, stale, agent-not-ready, agent-down, no-agent, untrusted or unknown",
        "2 usage error; no credentials; the API server could not be reached",
    ] {
        assert!(help.contains(needle), "{needle:?} missing:\n{}", run.stdout);
    }
    for gone in ["--stale-after", "every 5 minutes"] {
        assert!(
            !help.contains(gone),
            "{gone:?} is still said:\n{}",
            run.stdout
        );
    }
}

#[test]
fn bad_flag_values_are_usage_errors() {
    for (args, says) in [
        (&["fleet", "--page-size", "0"][..], "--page-size"),
        (&["fleet", "--page-size", "10001"], "--page-size"),
        (&["fleet", "--timeout=-5m"], "negative"),
        (&["fleet", "--stale-after=15m"], "--stale-after"),
        (&["fleet", "--timeout", "soon"], "--timeout"),
        (&["fleet", "--timeout", "0s"], "no time"),
        (&["fleet", "--output", "csv"], "csv"),
        (&["fleet", "node-1"], "node-1"),
    ] {
        let run = ipmasq(args);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
}

#[test]
fn no_credentials_exit_2_and_say_how_to_give_them() {
    let home = Scratch::new("fleet-no-credentials");
    let run = fleet_without_credentials(&home, &[]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr
            .starts_with("ipmasq fleet: no kubeconfig found and not in a pod")
            && run
                .stderr
                .contains("give --kubeconfig PATH or set KUBECONFIG"),
        "{}",
        run.stderr
    );
    let missing = home.path.join("missing.kubeconfig");
    let run = fleet_without_credentials(&home, &["--kubeconfig", missing.to_str().unwrap()]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot read the kubeconfig"),
        "{}",
        run.stderr
    );
    let garbage = home.write(
        "garbage.kubeconfig",
        "clusters: [this is not a kubeconfig\n",
    );
    let run = fleet_without_credentials(&home, &["--kubeconfig", garbage.to_str().unwrap()]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot read the kubeconfig"),
        "{}",
        run.stderr
    );
}
