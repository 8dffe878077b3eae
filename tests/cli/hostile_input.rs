//! Hostile configs against `validate` (the agent reads them through the same parser and
//! checks): memory stays within a small multiple of the file, output within a bounded size.

use crate::util::{generate_hostile_inputs, ipmasq_peak_rss, Scratch};

/// The most `validate` may hold for a file of `bytes` bytes: the tree budget (32 bytes per
/// byte, 4 MiB floor), the source twice over, and the binary's own pages. Those grew with the
/// Kubernetes client API mode links in (TLS, HTTP client, watcher: the debug binary's text
/// doubled, and its relocations and code resident at start grew by about 3 MiB, measured with
/// `validate` on a small file: 12.2 MiB before, 17.7 after), hence 24 MiB where 16 did before.
fn allowance_kib(bytes: usize) -> u64 {
    ((bytes * 40 + (24 << 20)) / 1024) as u64
}

/// A 130 KB config that is valid YAML: one 100 kB string, referenced many times. Before the
/// byte budget it took 983 MB; now it is refused with one line and a few MiB.
#[test]
fn a_scalar_alias_bomb_is_refused_in_a_few_megabytes() {
    let dir = Scratch::new("scalar-alias");
    for (big, refs, label) in [(100_000, 10_000, "130 KB"), (900_000, 16_000, "950 KB")] {
        let text = format!(
            "nonMasqueradeCIDRs: [10.0.0.0/8]\nbig: &b {}\nrefs: [{}]\n",
            "x".repeat(big),
            vec!["*b"; refs].join(", ")
        );
        let file = dir.write("alias.yaml", &text);
        let (run, peak) = ipmasq_peak_rss(&["validate", file.to_str().unwrap()]);
        assert_eq!(run.code, 1, "{label}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains("error[yaml-syntax]"), "{}", run.stdout);
        assert!(run.stdout.contains("bytes in memory"), "{}", run.stdout);
        assert!(
            run.stdout.len() < 2_000,
            "{label}: {} bytes",
            run.stdout.len()
        );
        assert!(
            peak < allowance_kib(text.len()),
            "{label} ({} bytes): peak {peak} KiB",
            text.len()
        );
    }
}

/// Step 16: a 951 KB file of 50 YAML documents, each an alias bomb just inside the budget one
/// document used to get (tests/hostile/multi-document-alias-bombs.py). Before, every document
/// had a budget of its own: 1.45 GB in `validate` (and `show`, `explain`, the agent), and the
/// file "valid". Now a config's later documents are only counted (upstream reads the first),
/// and a manifest's documents share the file's one budget.
#[test]
fn fifty_alias_bomb_documents_cost_one_budget_not_fifty() {
    let dir = Scratch::new("multi-document-bombs");
    generate_hostile_inputs("multi-document-alias-bombs.py", &dir.path);
    let file = |name: &str| dir.path.join(name).to_str().unwrap().to_string();
    let size = |name: &str| std::fs::metadata(dir.path.join(name)).unwrap().len() as usize;
    // The DaemonSet's limit, and well under it: the later documents are never built.
    let daemonset_kib = 64 * 1024;
    for name in ["config.yaml", "configmap.yaml"] {
        let (run, peak) = ipmasq_peak_rss(&["validate", &file(name)]);
        assert_eq!(run.code, 0, "{name}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stdout.contains("warning[extra-document]")
                && run
                    .stdout
                    .contains("only the first YAML document is read; 49 more ignored"),
            "{name}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("valid (1 warning)"), "{}", run.stdout);
        assert!(peak < 32 * 1024, "{name}: peak {peak} KiB");
    }
    // A manifest's every document counts: they share one budget, which runs out, and the file
    // is invalid (a ConfigMap may hide in a document past it).
    let (run, peak) = ipmasq_peak_rss(&["validate", &file("manifest.yaml")]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("error[yaml-syntax]"), "{}", run.stdout);
    assert!(
        run.stdout.contains("bytes in memory")
            && run
                .stdout
                .contains("a later document of this manifest cannot be read"),
        "{}",
        run.stdout
    );
    assert!(
        peak < daemonset_kib && peak < allowance_kib(size("manifest.yaml")),
        "manifest: peak {peak} KiB"
    );
}

/// 52,422 duplicate keys (1 MiB): ten warnings and one line that counts the rest; the
/// verdict still counts every one.
#[test]
fn repeated_findings_are_summarised() {
    let dir = Scratch::new("duplicate-keys");
    let text = "cidrLimit: 64\n".repeat(52_422);
    let file = dir.write("dups.yaml", &text);
    let (run, peak) = ipmasq_peak_rss(&["validate", file.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.matches("warning[duplicate-key]").count(), 11);
    assert!(
        run.stdout
            .contains("and 52411 more [duplicate-key] findings"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("valid (52421 warnings)"),
        "{}",
        run.stdout
    );
    assert!(peak < allowance_kib(text.len()), "peak {peak} KiB");
    let (run, _) = ipmasq_peak_rss(&["validate", "-o", "json", file.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let result = &report["results"][0];
    assert_eq!(result["warnings"], 52_421);
    assert_eq!(result["diagnostics"].as_array().unwrap().len(), 11);
    assert_eq!(result["diagnostics"][10]["folded"], 52_411);
}

/// 200,000 misaligned CIDRs on one line: the line is shown as a short window under each
/// listed error, never repeated whole (before: 21 GB).
#[test]
fn findings_on_one_huge_line_print_short_snippets() {
    let dir = Scratch::new("one-line");
    let text = format!(
        "cidrLimit: 300000\nnonMasqueradeCIDRs: [{}]\n",
        vec!["10.1.2.3/8"; 200_000].join(", ")
    );
    let file = dir.write("line.yaml", &text);
    let (run, peak) = ipmasq_peak_rss(&["validate", file.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stdout.len() < 20_000, "{} bytes", run.stdout.len());
    assert!(
        run.stdout.contains("invalid (200000 errors"),
        "{}",
        run.stdout
    );
    assert!(peak < allowance_kib(text.len()), "peak {peak} KiB");
}

/// Terminal controls in a key are escaped in what validate prints.
#[test]
fn terminal_controls_in_a_config_are_escaped() {
    let dir = Scratch::new("controls");
    let file = dir.write("ctl.yaml", "\"a\\e]0;owned\\a\": 1\n");
    let (run, _) = ipmasq_peak_rss(&["validate", "--color=never", file.to_str().unwrap()]);
    assert!(!run.stdout.contains('\u{1b}'), "{:?}", run.stdout);
    assert!(!run.stdout.contains('\u{7}'), "{:?}", run.stdout);
    assert!(run.stdout.contains("\\x1b]0;owned\\x07"), "{}", run.stdout);
}
