//! The ipmasq extensions from the command line, without root: `validate` notes them at info
//! level (never failing, not even with --strict), merges a directory with `--merged`, and
//! `explain --no-live` answers from the config alone.

use crate::util::{ipmasq, Scratch};
use serde_json::Value;

fn json(run: &crate::util::Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", run.stdout, run.stderr))
}

#[test]
fn extensions_are_info_and_strict_does_not_fail_on_them() {
    let dir = Scratch::new("ext-strict");
    let file = dir.write(
        "ip-masq-agent",
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nforceMasqueradeCIDRs: [10.8.0.0/16]\nmasqueradeSourceCIDRs: [10.244.0.0/16]\n",
    );
    let run = ipmasq(&[
        "validate",
        "--strict",
        "--color=never",
        file.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("info[ipmasq-extension]"),
        "{}",
        run.stdout
    );
    assert!(run
        .stdout
        .contains("not understood by upstream ip-masq-agent"));
    // A real warning still fails --strict.
    let file = dir.write("other", "forceMasqueradeCIDRs: [8.8.8.0/24]\n");
    let run = ipmasq(&["validate", "--strict", file.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stdout.contains("forced-without-effect"));
}

#[test]
fn validate_merged_shows_every_entry_with_its_file_and_line() {
    let dir = Scratch::new("ext-merged");
    dir.write(
        "ip-masq-agent",
        "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\nresyncInterval: 60s\n",
    );
    dir.write(
        "ip-masq-agent-user",
        "nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\nforceMasqueradeCIDRs:\n  - 10.8.0.0/16\nresyncInterval: 10s\n",
    );
    dir.write("README", "not a config");
    let path = dir.path.to_str().unwrap();
    let run = ipmasq(&["validate", "--merged", "--color=never", path]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains(&format!("10.0.0.0/8           # {path}/ip-masq-agent:2:5")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "100.64.0.0/10        # {path}/ip-masq-agent-user:1:34"
        )),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("resyncInterval: 10s"));
    let report = json(&ipmasq(&["validate", "--merged", "-o", "json", path]));
    let result = &report["results"][0];
    assert_eq!(result["kind"], "merged");
    assert_eq!(result["entries"].as_array().unwrap().len(), 3);
    assert_eq!(result["entries"][2]["list"], "forceMasqueradeCIDRs");
    assert_eq!(result["entries"][2]["line"], 3);
    // A contradiction across the files names both places.
    dir.write("ip-masq-zz", "nonMasqueradeCIDRs: [10.8.0.0/16]\n");
    let run = ipmasq(&["validate", "--merged", "--color=never", path]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "{path}/ip-masq-agent-user:3:5: error[forced-and-kept]"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!("({path}/ip-masq-zz:1:22)")),
        "{}",
        run.stdout
    );
}

#[test]
fn explain_answers_from_the_config_alone_with_an_exit_status_per_verdict() {
    let dir = Scratch::new("ext-explain");
    let file = dir.write(
        "cfg",
        "nonMasqueradeCIDRs: [10.0.0.0/8, 10.8.1.0/24]\nforceMasqueradeCIDRs: [10.8.0.0/16]\nmasqueradeSourceCIDRs: [10.244.0.0/16]\n",
    );
    let file = file.to_str().unwrap();
    let ask = |dest: &str, extra: &[&str]| {
        let mut args = vec!["explain", dest, "--config", file, "--no-live", "-o", "json"];
        args.extend_from_slice(extra);
        let run = ipmasq(&args);
        (run.code, json(&run))
    };
    let (code, report) = ask("10.8.3.4", &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["outcome"], "masquerade");
    assert_eq!(report["config"]["decision"]["cidr"], "10.8.0.0/16");
    assert_eq!(report["config"]["decision"]["list"], "forceMasqueradeCIDRs");
    assert_eq!(report["config"]["decision"]["written"], "line 2, column 24");
    assert_eq!(report["source"], "10.244.0.1");
    assert_eq!(report["sourceAssumed"], true);
    assert!(report.get("live").is_none());
    let (code, report) = ask("10.8.1.7", &[]);
    assert_eq!(code, 10, "{report}");
    assert_eq!(report["config"]["decision"]["cidr"], "10.8.1.0/24");
    let (code, report) = ask("8.8.8.8", &["--from", "192.168.1.1"]);
    assert_eq!(code, 10, "{report}");
    assert_eq!(report["config"]["reason"], "source-not-selected");
    let run = ipmasq(&[
        "explain",
        "10.8.3.4",
        "--config",
        file,
        "--no-live",
        "--color=never",
    ]);
    assert!(
        run.stdout
            .contains("decided by 10.8.0.0/16 in forceMasqueradeCIDRs (line 2, column 24)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("verdict: masqueraded"));
    // An invalid config is a usage error, as for show.
    let bad = dir.write("bad", "forceMasqueradeCIDRs: [10.0.0.0/8]\n");
    let run = ipmasq(&[
        "explain",
        "10.1.1.1",
        "--config",
        bad.to_str().unwrap(),
        "--no-live",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("forced-and-kept"), "{}", run.stderr);
}
