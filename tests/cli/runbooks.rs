//! The alerts' runbooks: every alert of prometheus-rule.yaml links to its page in
//! docs/runbooks, which has the four sections; every page there belongs to an alert; the index
//! lists each alert with its severity; every `ipmasq` command the pages show parses.

use crate::util::ipmasq;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where the rules say the repository is served: a placeholder (docs/runbooks/README.md).
const RUNBOOK_BASE: &str = "https://ipmasq.example/";
/// A runbook's sections, in this order, as prometheus-operator's runbooks have them.
const SECTIONS: [&str; 4] = ["## Meaning", "## Impact", "## Diagnosis", "## Mitigation"];

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// An alert of the rules, as far as its runbook is concerned.
#[derive(Default)]
struct Alert {
    name: String,
    runbook_url: Option<String>,
    severity: Option<String>,
}

/// Each alert of the rules: read rule by rule, from one `- alert:` line to the next.
fn alerts() -> Vec<Alert> {
    let path = repo("packaging/kubernetes/monitoring/prometheus-rule.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut alerts: Vec<Alert> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert:") {
            alerts.push(Alert {
                name: name.trim().to_string(),
                ..Alert::default()
            });
        } else if line.starts_with("- record:") || line.starts_with("- name:") {
            alerts.push(Alert::default());
        } else if let Some(url) = line.strip_prefix("runbook_url:") {
            let alert = alerts.last_mut().expect("a runbook_url inside a rule");
            assert!(
                alert.runbook_url.is_none(),
                "{} has two runbook_url annotations",
                alert.name
            );
            alert.runbook_url = Some(url.trim().trim_matches('"').to_string());
        } else if let Some(severity) = line.strip_prefix("severity:") {
            let alert = alerts.last_mut().expect("a severity inside a rule");
            alert.severity = Some(severity.trim().to_string());
        }
    }
    alerts.retain(|alert| !alert.name.is_empty());
    assert!(alerts.len() >= 8, "only {} alerts read", alerts.len());
    alerts
}

fn runbook_pages() -> BTreeSet<String> {
    std::fs::read_dir(repo("docs/runbooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "README.md")
        .collect()
}

#[test]
fn every_alert_links_to_its_runbook_which_has_the_four_sections() {
    for Alert {
        name: alert,
        runbook_url,
        ..
    } in alerts()
    {
        let url = runbook_url.unwrap_or_else(|| panic!("{alert} has no runbook_url annotation"));
        let page = format!("docs/runbooks/{alert}.md");
        assert_eq!(
            url,
            format!("{RUNBOOK_BASE}{page}"),
            "{alert}'s runbook_url"
        );
        let text =
            std::fs::read_to_string(repo(&page)).unwrap_or_else(|e| panic!("{alert}: {page}: {e}"));
        assert_eq!(
            text.lines().next(),
            Some(format!("# {alert}").as_str()),
            "{page} is not titled with its alert"
        );
        let lines: Vec<&str> = text.lines().collect();
        let headings: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("## "))
            .collect();
        let mut previous = 0;
        for section in SECTIONS {
            let at = lines
                .iter()
                .position(|l| *l == section)
                .unwrap_or_else(|| panic!("{page} lacks {section}"));
            assert!(at > previous, "{page}: {section} is out of order");
            let next = headings
                .iter()
                .find(|&&h| h > at)
                .copied()
                .unwrap_or(lines.len());
            assert!(
                lines[at + 1..next].iter().any(|l| !l.trim().is_empty()),
                "{page}: {section} is empty"
            );
            previous = at;
        }
    }
}

#[test]
fn every_runbook_belongs_to_an_alert_and_is_in_the_index_with_its_severity() {
    let alerts = alerts();
    let index = std::fs::read_to_string(repo("docs/runbooks/README.md")).unwrap();
    for alert in &alerts {
        let severity = alert.severity.as_deref().unwrap_or("none");
        let row = format!("| [{0}]({0}.md) | {severity} |", alert.name);
        assert!(
            index.lines().any(|l| l.starts_with(&row)),
            "docs/runbooks/README.md has no row starting `{row}`"
        );
    }
    let alerts: BTreeSet<String> = alerts.iter().map(|a| format!("{}.md", a.name)).collect();
    let pages = runbook_pages();
    let orphans: Vec<&String> = pages.difference(&alerts).collect();
    assert!(
        orphans.is_empty(),
        "docs/runbooks holds pages of no alert: {orphans:?}"
    );
    assert!(
        index.contains(RUNBOOK_BASE),
        "the index does not name the URL's base"
    );
}

/// The `ipmasq ...` commands of a page: in its shell blocks and its inline code (after a
/// `|`, `sudo` or `kubectl exec ... --`), as arguments, with the pages' placeholders given
/// example values. An inline `ipmasq ...` that elides its arguments is not a command.
fn commands(text: &str) -> Vec<Vec<String>> {
    let mut snippets: Vec<&str> = Vec::new();
    let mut in_shell = false;
    for line in text.lines() {
        if let Some(fence) = line.strip_prefix("```") {
            in_shell = !in_shell && fence == "sh";
            continue;
        }
        if in_shell {
            snippets.push(line);
        } else if line.matches('`').count() % 2 == 0 {
            snippets.extend(
                line.split('`')
                    .skip(1)
                    .step_by(2)
                    .filter(|s| !s.contains("...")),
            );
        }
    }
    let mut found = Vec::new();
    for segment in snippets.iter().flat_map(|s| s.split('|')) {
        let words: Vec<&str> = segment.split_whitespace().collect();
        let Some(start) = words.iter().position(|w| *w == "ipmasq") else {
            continue;
        };
        let before = &words[..start];
        if !(before.is_empty() || before == ["sudo"] || before.last() == Some(&"--")) {
            continue;
        }
        found.push(
            words[start + 1..]
                .iter()
                .map(|w| {
                    w.replace("TRANSLATED", "203.0.113.1")
                        .replace("PORT", "40002")
                        .replace("DEST", "198.51.100.9")
                })
                .collect(),
        );
    }
    found
}

#[test]
fn every_ipmasq_command_in_the_runbooks_parses() {
    let mut checked = 0;
    for page in runbook_pages()
        .iter()
        .chain(["README.md".to_string()].iter())
    {
        let text = std::fs::read_to_string(repo(&format!("docs/runbooks/{page}"))).unwrap();
        for args in commands(&text) {
            // Parsed as given, then help instead of a run: an unknown applet or flag, or a
            // value the parser refuses, is still an error.
            let mut with_help: Vec<&str> = args.iter().map(String::as_str).collect();
            with_help.push("--help");
            let run = ipmasq(&with_help);
            assert_eq!(
                run.code,
                0,
                "{page}: `ipmasq {}` does not parse:\n{}",
                args.join(" "),
                run.stderr
            );
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} commands found");
}
