//! At the kernel: a config file of 50 YAML documents, each an alias bomb, against the
//! agent in the DaemonSet's 64 MiB and against `show` and `explain`: one parse budget per
//! file, the later documents never built.

use super::memory_limit::{tail, CappedAgent};
use super::netns::Netns;
use std::time::Duration;

/// How long a test waits for an observable event before failing.
const PATIENCE: Duration = Duration::from_secs(20);

/// tests/hostile/multi-document-alias-bombs.py's config.yaml (951 KB, 50 documents; the first
/// keeps 10.0.0.0/8). Before: 1.45 GB in every applet, the agent OOM-killed on every start in
/// 64 MiB. Now the agent applies the first document, as upstream does, well inside the limit,
/// and `show --config` and `explain --config` read it in a few MiB.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn fifty_alias_bomb_documents_neither_kill_the_agent_nor_bloat_show_and_explain() {
    let dir = crate::util::Scratch::new("parse-budget");
    crate::util::generate_hostile_inputs("multi-document-alias-bombs.py", &dir.path);
    let config = dir.path.join("config.yaml");
    let config_arg = format!("--config={}", config.display());
    let agent = CappedAgent::start(
        "multidoc",
        64 << 20,
        &std::fs::read_to_string(&config).unwrap(),
        &["--iptables-mode=nft"],
    );
    let (ns, read) = (&agent.ns, || agent.log_tail());
    agent.wait_ready(PATIENCE);
    let saved = ns.save("nft", false, Some("nat"));
    assert!(
        saved.contains("-A IP-MASQ-AGENT -d 10.0.0.0/8") && saved.contains("-j RETURN"),
        "{saved}"
    );
    assert!(
        read().contains("only the first YAML document is read; 49 more ignored"),
        "{}",
        read()
    );
    assert_eq!(agent.group.oom_kills(), 0, "{}", read());
    assert!(agent.alive());
    // The other applets that read a config: a few MiB, not 1.45 GB.
    for (args, said) in [
        (
            vec!["show", config_arg.as_str(), "--iptables-mode=nft"],
            "config.yaml: in sync",
        ),
        (
            vec![
                "explain",
                config_arg.as_str(),
                "--iptables-mode=nft",
                "203.0.113.9",
            ],
            "verdict: masqueraded",
        ),
    ] {
        let (run, peak) = crate::util::ipmasq_peak_rss_in(&ns.name, &ns.state_dir(), &args);
        assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains(said), "{args:?}: {}", run.stdout);
        assert!(peak < 32 * 1024, "{args:?}: peak {peak} KiB");
    }
}

/// Item 8 against the agent: a file on upstream's JSON path with `"cidrLimit": 64.0` (upstream
/// refuses to load it and installs nothing) is applied with the `upstream-rejects` warning in
/// the log; the same file after a UTF-8 byte order mark, which upstream reads as YAML and
/// accepts, is applied without one. Before: no warning for the first, a false one for the
/// second.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_agent_warns_of_what_upstreams_json_path_refuses_and_only_that() {
    let ns = Netns::new("jsonpath");
    let dir = crate::util::Scratch::new("jsonpath");
    let json = "{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"], \"cidrLimit\": 64.0}\n";
    for (name, text, warned) in [
        ("fraction.json", json.to_string(), true),
        ("bom.json", format!("\u{feff}{json}"), false),
    ] {
        let config = dir.write(name, &text);
        let run = ns.ipmasq(&[
            "agent",
            "--once",
            "--iptables-mode=nft",
            &format!("--config={}", config.display()),
        ]);
        assert_eq!(run.code, 0, "{name}: {}", tail(&run.stderr));
        let warning = run
            .stderr
            .lines()
            .any(|l| l.contains(" WARN ") && l.contains("[upstream-rejects]"));
        assert_eq!(warning, warned, "{name}: {}", tail(&run.stderr));
        let saved = ns.save("nft", false, Some("nat"));
        assert!(saved.contains("-A IP-MASQ-AGENT -d 10.0.0.0/8"), "{saved}");
    }
}
