//! `ipmasq validate`: verdicts, exit codes, JSON shape, ConfigMaps, stdin, flags.

use crate::util::{data, ipmasq, ipmasq_with_stdin, Scratch};
use serde_json::Value;

fn json(args: &[&str]) -> (i32, Value) {
    let mut full = vec!["validate", "-o", "json"];
    full.extend_from_slice(args);
    let run = ipmasq(&full);
    let value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", run.stdout, run.stderr));
    (run.code, value)
}

/// The codes of the first result's diagnostics, in report order.
fn first_result_codes(report: &Value) -> Vec<&str> {
    report["results"][0]["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter_map(|d| d["code"].as_str())
        .collect()
}

fn path(relative: &str) -> String {
    data(relative).to_string_lossy().into_owned()
}

#[test]
fn good_directory_is_valid() {
    let run = ipmasq(&["validate", &path("configs/good")]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("6 configs checked: 6 valid, 0 invalid"),
        "{}",
        run.stdout
    );
}

#[test]
fn every_bad_config_is_invalid_with_its_code() {
    let expected = [
        ("bad-duration.yaml", "invalid-duration"),
        ("configmap-misaligned.yaml", "cidr-not-aligned"),
        ("ipv4-mapped.yaml", "ipv4-mapped-cidr"),
        ("ipv6-without-flag.yaml", "ipv6-not-enabled"),
        ("leading-zero.yaml", "invalid-cidr"),
        ("link-local-conflict.yaml", "link-local-conflict"),
        ("misaligned.yaml", "cidr-not-aligned"),
        ("negative-limit.yaml", "negative-cidr-limit"),
        ("not-a-list.yaml", "wrong-type"),
        ("over-limit.yaml", "cidr-limit-exceeded"),
        ("quoted-bool.yaml", "wrong-type"),
        ("syntax.yaml", "yaml-syntax"),
        ("unitless-duration.yaml", "wrong-type"),
        ("zero-duration.yaml", "non-positive-duration"),
    ];
    let listed: Vec<String> = std::fs::read_dir(data("configs/bad"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed.len(),
        expected.len(),
        "every bad config has an expectation"
    );
    for (file, code) in expected {
        let (exit, report) = json(&[&path(&format!("configs/bad/{file}"))]);
        assert_eq!(exit, 1, "{file}");
        assert_eq!(report["valid"], false, "{file}");
        let codes: Vec<&str> = report["results"][0]["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["severity"] == "error")
            .map(|d| d["code"].as_str().unwrap())
            .collect();
        assert_eq!(codes, [code], "{file}");
    }
}

#[test]
fn text_output_is_compiler_style() {
    let file = path("configs/bad/misaligned.yaml");
    let run = ipmasq(&["validate", &file]);
    assert_eq!(run.code, 1);
    let want = format!(
        "{file}:3:5: error[cidr-not-aligned]: CIDR \"10.1.2.3/16\" is not aligned to a CIDR block, ip: \"10.1.2.3\" network: \"10.1.0.0/16\"\n\
         3 |   - 10.1.2.3/16\n  |     ^^^^^^^^^^^\n  = hint: did you mean 10.1.0.0/16?\n\
         {file}: invalid (1 error, 0 warnings)\n"
    );
    assert_eq!(run.stdout, want);
    assert!(
        !run.stdout.contains('\x1b'),
        "no colour when not a terminal"
    );
    let run = ipmasq(&["validate", "--color=always", &file]);
    assert!(run.stdout.contains("\x1b[1;31m"), "{}", run.stdout);
}

#[test]
fn json_report_shape() {
    let (exit, report) = json(&[&path("configs/good/warnings.yaml")]);
    assert_eq!(exit, 0);
    assert_eq!(report["schemaVersion"], 1);
    assert_eq!(report["valid"], true);
    assert_eq!(report["errors"], 0);
    assert_eq!(report["warnings"], 6);
    let result = &report["results"][0];
    assert_eq!(result["kind"], "config");
    assert_eq!(result["valid"], true);
    let first = &result["diagnostics"][0];
    for key in ["severity", "code", "message", "line", "column", "hint"] {
        assert!(first.get(key).is_some(), "diagnostic lacks {key}: {first}");
    }
    assert_eq!(first["code"], "key-case");
    assert_eq!(first["line"], 2);
    let effective = &result["effective"];
    assert_eq!(
        effective["nonMasqueradeCIDRs"],
        serde_json::json!(["10.0.0.0/8", "10.1.0.0/16", "10.0.0.0/8"])
    );
    assert_eq!(effective["cidrLimit"], 64);
    assert_eq!(effective["masqLinkLocal"], false);
    assert_eq!(effective["masqLinkLocalIPv6"], false);
    assert_eq!(effective["resyncInterval"], "1m0s");
}

#[test]
fn strict_turns_warnings_into_errors() {
    let file = path("configs/good/warnings.yaml");
    assert_eq!(ipmasq(&["validate", &file]).code, 0);
    let (exit, report) = json(&["--strict", &file]);
    assert_eq!(exit, 1);
    assert_eq!(report["errors"], 6);
    assert_eq!(report["warnings"], 0);
}

#[test]
fn configmap_manifest_reports_positions_inside_the_manifest() {
    let (exit, report) = json(&[&path("configs/bad/configmap-misaligned.yaml")]);
    assert_eq!(exit, 1);
    let result = &report["results"][0];
    assert_eq!(result["kind"], "configmap");
    assert_eq!(result["configMap"]["name"], "ip-masq-agent");
    assert_eq!(result["configMap"]["namespace"], "kube-system");
    let diag = &result["diagnostics"][0];
    assert_eq!(
        (diag["line"].as_u64(), diag["column"].as_u64()),
        (Some(10), Some(9))
    );
}

#[test]
fn configmap_in_a_multi_document_manifest() {
    let dir = Scratch::new("multidoc");
    let manifest = dir.write(
        "all.yaml",
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: ip-masq-agent\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\ndata:\n  config: |\n    masqLinkLocal: true\n",
    );
    let (exit, report) = json(&[manifest.to_str().unwrap()]);
    assert_eq!(exit, 0, "{report}");
    assert_eq!(report["results"][0]["configMap"]["document"], 2);
    assert_eq!(report["results"][0]["effective"]["masqLinkLocal"], true);
}

#[test]
fn stdin_is_read_with_dash() {
    let run = ipmasq_with_stdin(&["validate", "-"], "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("<stdin>: valid"), "{}", run.stdout);
    let run = ipmasq_with_stdin(&["validate", "-"], "cidrLimit: -5\n");
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains("<stdin>:1:12: error[negative-cidr-limit]"),
        "{}",
        run.stdout
    );
}

#[test]
fn missing_explicit_file_is_an_io_error() {
    let (exit, report) = json(&["/nonexistent/ipmasq-config"]);
    assert_eq!(exit, 2);
    assert_eq!(report["results"][0]["kind"], "unreadable");
    assert_eq!(report["results"][0]["diagnostics"][0]["code"], "io");
}

#[test]
fn directory_symlink_loop_and_oversize_are_io_errors() {
    let dir = Scratch::new("io");
    std::os::unix::fs::symlink(dir.path.join("b"), dir.path.join("a")).unwrap();
    std::os::unix::fs::symlink(dir.path.join("a"), dir.path.join("b")).unwrap();
    let run = ipmasq(&["validate", dir.path.join("a").to_str().unwrap()]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.contains("symlink loop"), "{}", run.stdout);
    let big = dir.write("big", &"#".repeat((8 << 20) + 1));
    let run = ipmasq(&["validate", big.to_str().unwrap()]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.contains("larger than"), "{}", run.stdout);
}

#[test]
fn agent_flags_change_the_verdict() {
    let file = path("configs/bad/ipv6-without-flag.yaml");
    assert_eq!(ipmasq(&["validate", &file]).code, 1);
    assert_eq!(ipmasq(&["validate", "--enable-ipv6", &file]).code, 0);
    // Go's single-dash spelling, as in upstream's DaemonSet args.
    assert_eq!(ipmasq(&["validate", "-enable-ipv6", &file]).code, 0);
    assert_eq!(ipmasq(&["validate", "--enable-ipv6=false", &file]).code, 1);

    let dir = Scratch::new("reserved");
    let config = dir.write("c.yaml", "cidrLimit: 5\n");
    assert_eq!(ipmasq(&["validate", config.to_str().unwrap()]).code, 0);
    let run = ipmasq(&[
        "validate",
        "--nomasq-all-reserved-ranges",
        config.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("but got 11 CIDRs"), "{}", run.stdout);
}

#[test]
fn print_effective_shows_the_config_after_defaults() {
    let dir = Scratch::new("effective");
    let config = dir.write("c.yaml", "masqLinkLocal: true\n");
    let run = ipmasq(&["validate", "--print-effective", config.to_str().unwrap()]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.contains(
            "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 172.16.0.0/12\n  - 192.168.0.0/16\ncidrLimit: 64\nmasqLinkLocal: true\nmasqLinkLocalIPv6: false\nresyncInterval: 1m0s\n"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn mixed_inputs_exit_with_the_worst_code() {
    let good = path("configs/good/full.yaml");
    let bad = path("configs/bad/misaligned.yaml");
    assert_eq!(ipmasq(&["validate", &good, &bad]).code, 1);
    assert_eq!(ipmasq(&["validate", &good, &bad, "/nonexistent"]).code, 2);
}

/// A sequence as a key is an error, so the file is invalid (the agent rejects it too: see the
/// root test `complex_key_config_is_rejected_by_agent_once`).
#[test]
fn a_sequence_key_makes_the_config_invalid() {
    let dir = Scratch::new("complex-key");
    let config = dir.write("c.yaml", "? [a, b]\n: 1\n");
    let run = ipmasq(&["validate", "-o", "json", config.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(
        report["results"][0]["diagnostics"][0]["code"],
        "unsupported-key"
    );
    assert_eq!(report["results"][0]["effective"], serde_json::Value::Null);
}

/// Nested anchors around a large list, aliased once: the anchors' copies count against the
/// node budget, so the parse stops early in little memory (before: 647 MiB peak here).
#[test]
fn nested_anchor_bomb_is_refused_in_bounded_memory() {
    let dir = Scratch::new("anchor-bomb");
    let depth = 60;
    let mut text = String::from("x: ");
    for level in 0..depth {
        text.push_str(&format!("&a{level} ["));
    }
    text.push_str(&vec!["x"; 90_000].join(","));
    text.push_str(&"]".repeat(depth));
    text.push_str("\ny: *a0\n");
    let bomb = dir.write("bomb.yaml", &text);
    let measure = format!(
        "import resource, subprocess, sys\n\
         r = subprocess.run([{binary:?}, 'validate', {bomb:?}], capture_output=True)\n\
         print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n",
        binary = crate::util::binary().display().to_string(),
        bomb = bomb.display().to_string(),
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &measure])
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace();
    let code: i32 = fields.next().and_then(|c| c.parse().ok()).unwrap();
    let max_rss_kib: u64 = fields.next().and_then(|c| c.parse().ok()).unwrap();
    assert_eq!(code, 1, "refused as an error");
    assert!(
        max_rss_kib < 64 * 1024,
        "peak RSS {} MiB; the DaemonSet's limit is 64 MiB",
        max_rss_kib / 1024
    );
}

/// `-o yaml` prints the same document as `-o json` (one output vocabulary for every applet).
#[test]
fn yaml_report_is_the_json_document() {
    let file = path("configs/bad/misaligned.yaml");
    let json = ipmasq(&["validate", "-o", "json", &file]);
    let yaml = ipmasq(&["validate", "-o", "yaml", &file]);
    assert_eq!((json.code, yaml.code), (1, 1));
    let from_json: Value = serde_json::from_str(&json.stdout).unwrap();
    let from_yaml: Value = serde_saphyr::from_str(&yaml.stdout).unwrap();
    assert_eq!(from_json, from_yaml, "{}", yaml.stdout);
}

/// A long list: `validate` estimates the agent's peak memory per backend (text and JSON),
/// from what each writes, so a CI lint sees that 20,000 CIDRs do not fit the shipped 64 MiB
/// with iptables (20,002 rules), while nftables aggregates the contiguous /24s into 6 set
/// elements.
#[test]
fn a_long_list_reports_the_memory_it_needs_per_backend() {
    let dir = Scratch::new("memory-estimate");
    let cidrs: Vec<String> = (0..20_000)
        .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256))
        .collect();
    let file = dir.write(
        "long.yaml",
        &format!(
            "cidrLimit: 20000\nnonMasqueradeCIDRs: [{}]\n",
            cidrs.join(", ")
        ),
    );
    let run = ipmasq(&["validate", file.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains(
            "peak memory of the agent applying this config (estimate, from what each backend writes): iptables-legacy 73.1 MiB (20002 rules, 2.4 MiB as text), iptables-nft 91.8 MiB (20002 rules, 2.4 MiB as text), nftables 8.0 MiB (3 rules and 6 set elements)"
        ),
        "{}",
        run.stdout
    );
    let (_, report) = json(&[file.to_str().unwrap()]);
    let peaks = &report["results"][0]["peakMemoryMiB"];
    assert_eq!(peaks["nftables"], 8.0, "{report}");
    assert_eq!(peaks["iptables-nft"], 91.8, "{report}");
    let rendered = &report["results"][0]["rendered"];
    assert_eq!(rendered["iptables-nft"]["rules"], 20_002, "{report}");
    assert_eq!(rendered["nftables"]["setElements"], 6, "{report}");
    // A short list: JSON only, no line in the text.
    let short = dir.write("short.yaml", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    let run = ipmasq(&["validate", short.to_str().unwrap()]);
    assert!(!run.stdout.contains("peak memory"), "{}", run.stdout);
}

/// The hostile shapes of `tests/hostile/long-source-lists.py`: about 2,000 CIDRs listed
/// (2,000 sources are valid under the default cidrLimit, which does not count them), tens of
/// thousands of iptables rules written. `validate` estimates them from those rules, above
/// the shipped 64 MiB with iptables (they were "16.2 MiB" from the 2,003 CIDRs listed, and
/// OOM-killed the agent), and says what each backend writes.
#[test]
fn short_lists_that_write_many_rules_are_estimated_from_the_rules() {
    let dir = Scratch::new("memory-hostile");
    let generator =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/long-source-lists.py");
    for (shape, rules, elements) in [
        ("sources", 39_908, 2_004),
        ("forced-interfaces", 32_018, 2_007),
    ] {
        let made = std::process::Command::new("python3")
            .arg(&generator)
            .arg(shape)
            .output()
            .expect("python3 runs the generator");
        assert!(made.status.success(), "{shape}: {made:?}");
        let file = dir.write(shape, &String::from_utf8(made.stdout).unwrap());
        let (code, report) = json(&[file.to_str().unwrap()]);
        assert_eq!(code, 0, "{shape}: {report}");
        let result = &report["results"][0];
        for iptables in ["iptables-legacy", "iptables-nft"] {
            assert_eq!(
                result["rendered"][iptables]["rules"], rules,
                "{shape}: {report}"
            );
            let peak = result["peakMemoryMiB"][iptables].as_f64().unwrap();
            assert!(peak > 64.0, "{shape} {iptables}: {peak} MiB");
        }
        assert_eq!(
            result["rendered"]["nftables"]["setElements"], elements,
            "{shape}: {report}"
        );
        assert!(result["peakMemoryMiB"]["nftables"].as_f64().unwrap() < 57.6);
        let run = ipmasq(&["validate", "--no-node-checks", file.to_str().unwrap()]);
        assert!(
            run.stdout.contains(&format!("({rules} rules, ")),
            "{shape}: {}",
            run.stdout
        );
    }
}

/// An empty pipe (`kubectl … | ipmasq validate -` after kubectl failed) is an error, never a
/// valid config.
#[test]
fn empty_standard_input_is_an_error() {
    for input in ["", "\n  \n"] {
        let run = ipmasq_with_stdin(&["validate", "-"], input);
        assert_eq!(run.code, 1, "{}", run.stdout);
        assert!(
            run.stdout
                .contains("error[empty-input]: no input — did the command before the pipe fail?"),
            "{}",
            run.stdout
        );
    }
}

/// A ConfigMap in kube-system whose key `name` holds the config `lines` (a block scalar).
fn v2_configmap(name: &str, lines: &[&str]) -> String {
    let body: String = lines.iter().map(|l| format!("    {l}\n")).collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: kube-system\ndata:\n  {name}: |\n{body}")
}

/// ip-masq-agent-v2's ConfigMaps, in one file: their `ip-masq*` keys are merged as
/// `--config-dir` merges them; an invalid CIDR in the user's ConfigMap fails the file.
#[test]
fn v2_configmaps_in_one_file_are_merged_and_checked() {
    let dir = Scratch::new("v2-configmaps");
    let configmap = |name: &str, cidr: &str| {
        v2_configmap(name, &["nonMasqueradeCIDRs:", &format!("  - {cidr}")])
    };
    let good = dir.write(
        "good.yaml",
        &format!(
            "{}---\n{}",
            configmap("ip-masq-agent-cloud", "10.0.0.0/8"),
            configmap("ip-masq-agent-user", "100.64.0.0/10")
        ),
    );
    let run = ipmasq(&["validate", "--print-effective", &good.display().to_string()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("- 10.0.0.0/8") && run.stdout.contains("- 100.64.0.0/10"),
        "the merged config holds both lists: {}",
        run.stdout
    );
    let bad = dir.write(
        "bad.yaml",
        &format!(
            "{}---\n{}",
            configmap("ip-masq-agent-cloud", "10.0.0.0/8"),
            configmap("ip-masq-agent-user", "10.1.2.3/16")
        ),
    );
    let run = ipmasq(&["validate", &bad.display().to_string()]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("error[cidr-not-aligned]"),
        "{}",
        run.stdout
    );
    // One v2 ConfigMap alone is a config too, not "no ConfigMap".
    let one = dir.write("one.yaml", &configmap("ip-masq-agent", "10.0.0.0/8"));
    let run = ipmasq(&["validate", &one.display().to_string()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

/// v2 ConfigMaps in several files of one run are one `--config-dir` merge (the DaemonSet
/// projects them into one directory): a clash only the merge sees fails, with both places
/// named in their own files; `--merged DIR` over a directory of such manifests does the same.
#[test]
fn v2_configmaps_across_files_are_one_merge() {
    let dir = Scratch::new("v2-across-files");
    let configmap = |name: &str, body: &str| v2_configmap(name, &[body]);
    let cloud = dir.write(
        "cloud.yaml",
        &configmap("ip-masq-cloud", "nonMasqueradeCIDRs: [100.64.0.0/10]"),
    );
    let user = dir.write(
        "user.yaml",
        &configmap("ip-masq-user", "forceMasqueradeCIDRs: [100.64.0.0/10]"),
    );
    let (cloud, user) = (cloud.display().to_string(), user.display().to_string());
    for args in [
        vec![cloud.as_str(), user.as_str()],
        vec!["--merged", dir.path_str()],
    ] {
        let run = ipmasq(&[&["validate"][..], &args].concat());
        assert_eq!(run.code, 1, "{args:?}: {}", run.stdout);
        let clash = run
            .stdout
            .lines()
            .find(|l| l.contains("error[forced-and-kept]"))
            .unwrap_or_else(|| panic!("{args:?}: no clash reported: {}", run.stdout));
        assert!(
            clash.starts_with(&format!(
                "{user}: ConfigMap ip-masq-user/ip-masq-user:8:28:"
            )) && clash.contains(&format!(
                "({cloud}: ConfigMap ip-masq-cloud/ip-masq-cloud:8:26)"
            )),
            "{args:?}: {clash}"
        );
    }
    // Each file alone is valid: only the merge is not.
    for file in [&cloud, &user] {
        assert_eq!(ipmasq(&["validate", file]).code, 0, "{file}");
    }
    // A mounted directory (plain files) is still read exactly as the agent reads it.
    let mounted = Scratch::new("v2-mounted");
    mounted.write("ip-masq-cloud", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    mounted.write("ip-masq-user", "forceMasqueradeCIDRs: [10.0.0.0/8]\n");
    let (code, report) = json(&["--merged", mounted.path_str()]);
    assert_eq!(code, 1);
    assert_eq!(report["results"][0]["kind"], "merged");
    let codes = first_result_codes(&report);
    assert!(codes.contains(&"forced-and-kept"), "{codes:?}");
}

/// What upstream would reject gets `upstream-rejects` (a warning; `--strict` fails it), with
/// the place a JSON parser stops; the same config as block YAML or strict JSON gets none.
#[test]
fn inputs_upstream_rejects_are_warned_about() {
    let dir = Scratch::new("upstream-rejects");
    let flow = dir.write("flow.yaml", "{nonMasqueradeCIDRs: [10.0.0.0/8]}\n");
    let comma = dir.write(
        "comma.json",
        "{\n  \"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"],\n}\n",
    );
    for (file, line, column) in [(&flow, 1, 2), (&comma, 3, 1)] {
        let file = file.display().to_string();
        let (code, report) = json(&[&file]);
        assert_eq!(code, 0, "{report}");
        let d = &report["results"][0]["diagnostics"][0];
        assert_eq!(d["code"], "upstream-rejects", "{report}");
        assert_eq!(
            (d["line"].as_u64(), d["column"].as_u64()),
            (Some(line), Some(column))
        );
        assert_eq!(ipmasq(&["validate", "--strict", &file]).code, 1);
    }
    let block = dir.write("block.yaml", "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n");
    let strict = dir.write(
        "strict.json",
        "{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"]}\n",
    );
    for file in [&block, &strict] {
        let run = ipmasq(&["validate", "--strict", &file.display().to_string()]);
        assert_eq!(run.code, 0, "{}", run.stdout);
    }
}

/// One input per row of the config reference's table of deliberate differences from upstream
/// (docs/reference/config.md), with what
/// ipmasq does with it: the rows and these cases are the same set, and each case holds.
#[test]
fn reference_table_of_deliberate_differences_is_what_validate_does() {
    /// A generated text as a `&'static str`, as the other cases' texts are.
    fn leak(text: String) -> &'static str {
        Box::leak(text.into_boxed_str())
    }
    /// `nonMasqueradeCIDRs` of 40 /24s in 10.SECOND.0.0/16.
    fn forty(second: u8) -> String {
        let list: Vec<String> = (0..40).map(|i| format!("10.{second}.{i}.0/24")).collect();
        format!("nonMasqueradeCIDRs: [{}]", list.join(", "))
    }
    struct Case {
        row: &'static str,
        /// The file's text; `None` for a symlink loop.
        text: Option<&'static str>,
        flags: &'static [&'static str],
        codes: &'static [&'static str],
        exit: i32,
    }
    let cases = [
        Case { row: "`::ffff:172.16.0.0/108`", text: Some("nonMasqueradeCIDRs: [\"::ffff:172.16.0.0/108\"]\n"), flags: &["--enable-ipv6"], codes: &["ipv4-mapped-cidr"], exit: 1 },
        Case { row: "`resyncInterval: 0s` or negative", text: Some("resyncInterval: -1s\n"), flags: &[], codes: &["non-positive-duration"], exit: 1 },
        Case { row: "`cidrLimit: -1`", text: Some("cidrLimit: -1\n"), flags: &[], codes: &["negative-cidr-limit"], exit: 1 },
        Case { row: "`linkLocal: false` (non-masquerade-daemon's key)", text: Some("linkLocal: false\n"), flags: &[], codes: &["deprecated-link-local"], exit: 0 },
        Case { row: "several case variants of one key", text: Some("masqLinkLocal: false\nMASQLINKLOCAL: true\n"), flags: &[], codes: &["key-case", "duplicate-key"], exit: 0 },
        Case { row: "a file over 8 MiB, a directory, a symlink loop, a FIFO", text: None, flags: &[], codes: &["io"], exit: 2 },
        Case { row: "several errors", text: Some("nonMasqueradeCIDRs: [10.1.2.3/16, 300.0.0.0/8]\ncidrLimit: -1\n"), flags: &[], codes: &["invalid-cidr", "cidr-not-aligned", "negative-cidr-limit"], exit: 1 },
        Case { row: "`{nonMasqueradeCIDRs: [10.0.0.0/8]}` (a YAML flow map)", text: Some("{nonMasqueradeCIDRs: [10.0.0.0/8]}\n"), flags: &[], codes: &["upstream-rejects"], exit: 0 },
        Case { row: "`{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"],}` (JSON with a trailing comma or a comment)", text: Some("{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"],}\n"), flags: &[], codes: &["upstream-rejects"], exit: 0 },
        Case { row: "`{\"cidrLimit\": 64.0}` or `1e2` (JSON, a number with a fraction or an exponent for an integer)", text: Some("{\"cidrLimit\": 1e2}\n"), flags: &[], codes: &["upstream-rejects"], exit: 0 },
        Case { row: "`nonMasqueradeCIDRs: [10.0.0.0/8, ~]` (a null entry)", text: Some("nonMasqueradeCIDRs: [10.0.0.0/8, ~]\n"), flags: &[], codes: &["invalid-cidr"], exit: 1 },
        // No report: a usage error (exit 2), checked by its message below.
        Case { row: "`--to-ports=1024-70000` (a port above 65535)", text: Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"), flags: &["--to-ports=1024-70000"], codes: &[], exit: 2 },
        Case { row: "ip-masq-agent-v2 ConfigMaps (`--config-dir`, or `ip-masq*` keys in `validate`) whose files list no CIDRs", text: Some(leak(format!("{}---\n{}", v2_configmap("ip-masq-agent-cloud", &["masqLinkLocal: false"]), v2_configmap("ip-masq-agent-user", &["masqLinkLocalIPv6: false"])))), flags: &[], codes: &["empty-cidr-list"], exit: 0 },
        Case { row: "ip-masq-agent-v2 ConfigMaps with more than 64 CIDRs in all, each file at most 64", text: Some(leak(format!("{}---\n{}", v2_configmap("ip-masq-agent-cloud", &[&forty(1)]), v2_configmap("ip-masq-agent-user", &[&forty(2)])))), flags: &[], codes: &["config-dir-key"], exit: 0 },
        Case { row: "a ConfigMap with the same key in `data` and `binaryData`", text: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent, namespace: kube-system}\ndata:\n  config: \"cidrLimit: 3\\n\"\nbinaryData:\n  config: Y2lkckxpbWl0OiAzCg==\n"), flags: &[], codes: &["configmap-key-twice"], exit: 1 },
    ];
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/reference/config.md"
    ))
    .expect("docs/reference/config.md");
    let table = reference
        .split_once("Where ipmasq decides differently from upstream, on purpose:")
        .expect("the config reference has the table")
        .1;
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_start_matches('|')
                .split(" | ")
                .next()
                .unwrap_or("")
                .trim()
        })
        .collect();
    let tested: Vec<&str> = cases.iter().map(|c| c.row).collect();
    assert_eq!(
        rows, tested,
        "every row of the reference's table has a case here, and no more"
    );
    let dir = Scratch::new("readme-differences");
    for (i, case) in cases.iter().enumerate() {
        let file = dir.path.join(format!("case-{i}.yaml"));
        match case.text {
            Some(text) => std::fs::write(&file, text).expect("write"),
            None => std::os::unix::fs::symlink(&file, &file).expect("symlink loop"),
        }
        let file = file.display().to_string();
        if case.codes.is_empty() {
            let run = ipmasq(&[&["validate"], case.flags, &[file.as_str()]].concat());
            assert_eq!(run.code, case.exit, "{}: {}", case.row, run.stderr);
            assert!(
                run.stderr.contains("upstream ip-masq-agent"),
                "{}: {}",
                case.row,
                run.stderr
            );
            continue;
        }
        let (code, report) = json(&[case.flags, &[file.as_str()]].concat());
        assert_eq!(code, case.exit, "{}: {report}", case.row);
        let codes = first_result_codes(&report);
        for expected in case.codes {
            assert!(
                codes.contains(expected),
                "{}: {expected} not in {codes:?}",
                case.row
            );
        }
    }
}

/// `helm template` output starts with an empty document (`---` and a `# Source:` comment):
/// the stream is still a manifest, and every document's ConfigMap is checked.
#[test]
fn helm_output_with_an_empty_first_document_is_a_manifest() {
    let dir = Scratch::new("helm-output");
    let rendered = dir.write(
        "rendered.yaml",
        "---\n# Source: chart/templates/serviceaccount.yaml\n---\n# Source: chart/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\ndata:\n  config: |\n    nonMasqueradeCIDRs: [10.1.2.3/16]\n",
    );
    let (code, report) = json(&[&rendered.display().to_string()]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["results"][0]["kind"], "configmap", "{report}");
    assert_eq!(
        report["results"][0]["diagnostics"][0]["code"],
        "cidr-not-aligned"
    );
    assert_eq!(report["results"][0]["diagnostics"][0]["line"], 11);
}

/// Upstream's exact rule for a file starting with `{` (apimachinery's `hasJSONPrefix` on the
/// file's bytes, then Go's `encoding/json` into `cidrLimit int`): `64.0` and `1e2` fail its
/// whole load, so ipmasq warns (`--strict` fails); after a UTF-8 byte order mark the file is
/// YAML there (a BOM is not white space; yaml.v2 drops it), and upstream accepts both a flow
/// map and `64.0`, so ipmasq says nothing. Before: no warning for the first, a false
/// `upstream-rejects` for the second.
#[test]
fn upstream_json_path_is_judged_on_the_files_bytes() {
    let dir = Scratch::new("json-path");
    for (name, text) in [
        (
            "fraction.json",
            "{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"], \"cidrLimit\": 64.0}\n",
        ),
        (
            "exponent.json",
            "{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"], \"cidrLimit\": 1e2}\n",
        ),
    ] {
        let file = dir.write(name, text);
        let file = file.to_str().unwrap();
        let (code, report) = json(&[file]);
        assert_eq!(code, 0, "{report}");
        assert_eq!(
            first_result_codes(&report),
            ["upstream-rejects"],
            "{report}"
        );
        assert_eq!(report["results"][0]["valid"], true, "{report}");
        let run = ipmasq(&["validate", "--strict", file]);
        assert_eq!(run.code, 1, "{}", run.stdout);
        assert!(
            run.stdout.contains("must be an integer literal"),
            "{}",
            run.stdout
        );
    }
    let bom = "\u{feff}";
    for (name, text) in [
        (
            "bom-flow.yaml",
            format!("{bom}{{nonMasqueradeCIDRs: [10.0.0.0/8], masqLinkLocal: true}}\n"),
        ),
        (
            "bom-fraction.json",
            format!("{bom}{{\"nonMasqueradeCIDRs\": [\"10.0.0.0/8\"], \"cidrLimit\": 64.0}}\n"),
        ),
    ] {
        let file = dir.write(name, &text);
        let file = file.to_str().unwrap();
        let run = ipmasq(&["validate", "--strict", file]);
        assert_eq!(run.code, 0, "{name}: {}", run.stdout);
        assert!(run.stdout.ends_with(": valid\n"), "{name}: {}", run.stdout);
    }
    // A finding on the first line of a file with a BOM is placed as without it.
    let file = dir.write(
        "bom-error.yaml",
        &format!("{bom}nonMasqueradeCIDRs: [10.1.2.3/16]\n"),
    );
    let run = ipmasq(&["validate", file.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(":1:22: error[cidr-not-aligned]"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "1 | nonMasqueradeCIDRs: [10.1.2.3/16]\n  |                      ^^^^^^^^^^^"
        ),
        "{}",
        run.stdout
    );
}

/// A code is spelt in the JSON and YAML reports as in the text report: the ConfigMap codes
/// were `config-map-without-config` and `no-config-map` in JSON, `configmap-without-config`
/// and `no-configmap` in text and the README.
#[test]
fn configmap_codes_are_spelt_alike_in_text_json_and_yaml() {
    let dir = Scratch::new("configmap-code-spelling");
    let without = dir.write(
        "without.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent, namespace: kube-system}\ndata:\n  agent-config: |\n    cidrLimit: 3\n",
    );
    let none = dir.write(
        "none.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n",
    );
    for (file, code) in [
        (&without, "configmap-without-config"),
        (&none, "no-configmap"),
    ] {
        let file = file.display().to_string();
        let text = ipmasq(&["validate", &file]);
        assert!(
            text.stdout.contains(&format!("error[{code}]")),
            "{}",
            text.stdout
        );
        let (_, report) = json(&[&file]);
        assert_eq!(first_result_codes(&report), [code], "{report}");
        let yaml = ipmasq(&["validate", "-o", "yaml", &file]);
        assert!(
            yaml.stdout.contains(&format!("code: {code}\n")),
            "{}",
            yaml.stdout
        );
    }
}
