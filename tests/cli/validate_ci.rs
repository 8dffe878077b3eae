//! `ipmasq validate` in CI: over a repository's directory it judges only the agent's configs
//! (the rest is skipped, and `-v` says why), an explicitly named file keeps its verdict, every
//! message about a config inside a ConfigMap cites the manifest's lines, and `unknown-key` says
//! that the defaults apply.

use crate::util::{ipmasq, Scratch};
use serde_json::Value;

fn json(args: &[&str]) -> (i32, Value) {
    let mut full = vec!["validate", "--no-node-checks", "-o", "json"];
    full.extend_from_slice(args);
    let run = ipmasq(&full);
    let value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", run.stdout, run.stderr));
    (run.code, value)
}

const DEPLOYMENT: &str =
    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n";
/// Another application's ConfigMap, with a `config` key that is no agent config.
const NGINX: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nginx\ndata:\n  config: |\n    worker_processes 1;\n";
const AGENT_CONFIGMAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\n  namespace: kube-system\ndata:\n  config: |\n    nonMasqueradeCIDRs: [10.0.0.0/8]\n";

/// A repository's directory: a README, a workflow, a Deployment, another application's
/// ConfigMap, a manifest holding both the agent's ConfigMap and others, and one broken
/// config. Only the broken config fails; the rest is skipped and counted, and `-v` and the
/// JSON report say which and why. Before, the README was "valid" and the Deployment and the
/// other ConfigMap were `error[no-configmap]` / `error[not-a-mapping]`.
#[test]
fn a_repository_directory_is_judged_on_the_agents_configs_alone() {
    let dir = Scratch::new("ci-repository");
    dir.write(
        "README.md",
        "# Cluster\n\nThese manifests deploy the cluster.\n",
    );
    dir.write(
        "workflow.yml",
        "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n",
    );
    dir.write("deployment.yaml", DEPLOYMENT);
    dir.write("nginx.yaml", NGINX);
    dir.write(
        "all.yaml",
        &format!("{DEPLOYMENT}---\n{NGINX}---\n{AGENT_CONFIGMAP}"),
    );
    dir.write("ip-masq-agent", "nonMasqueradeCIDRs: [10.1.2.3/16]\n");
    let run = ipmasq(&["validate", "--no-node-checks", dir.path_str()]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(
            "2 configs checked: 1 valid, 1 invalid; 4 files skipped (not ip-masq-agent configs; -v says which and why)"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("all.yaml (ConfigMap kube-system/ip-masq-agent, document 3): valid"),
        "{}",
        run.stdout
    );
    for absent in ["README.md", "no-configmap", "not-a-mapping", "nginx"] {
        assert!(!run.stdout.contains(absent), "{absent}: {}", run.stdout);
    }
    let verbose = ipmasq(&["validate", "--no-node-checks", "-v", dir.path_str()]);
    assert_eq!(verbose.code, 1);
    for (file, why) in [
        (
            "README.md",
            "skipped, not a YAML or JSON file: its extension .md is not .yaml, .yml or .json",
        ),
        (
            "deployment.yaml",
            "skipped, a Kubernetes manifest without an ip-masq-agent ConfigMap (Deployment web)",
        ),
        (
            "nginx.yaml",
            "skipped, a Kubernetes manifest without an ip-masq-agent ConfigMap (ConfigMap nginx)",
        ),
        (
            "workflow.yml",
            "skipped, a YAML mapping with no ip-masq-agent config key",
        ),
    ] {
        let line = format!("{}/{file}: {why}\n", dir.path_str());
        assert!(verbose.stdout.contains(&line), "{line}{}", verbose.stdout);
    }
    let (code, report) = json(&[dir.path_str()]);
    assert_eq!(code, 1);
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| s["path"].as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(
        skipped,
        ["README.md", "deployment.yaml", "nginx.yaml", "workflow.yml"]
    );
    let outcomes: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["valid", "invalid"], "{report}");

    // `--merged DIR` over the same directory skips the same manifests.
    let (code, report) = json(&["--merged", dir.path_str()]);
    assert_eq!(code, 1, "{report}");
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| s["path"].as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(skipped, ["deployment.yaml", "nginx.yaml"], "{report}");

    // Nothing of the agent's: nothing fails, and the count says so.
    let other = Scratch::new("ci-nothing-ours");
    other.write("deployment.yaml", DEPLOYMENT);
    other.write("README.md", "# x\n");
    let run = ipmasq(&["validate", "--strict", other.path_str()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout
            .starts_with("0 configs checked: 0 valid, 0 invalid; 2 files skipped"),
        "{}",
        run.stdout
    );
}

/// What counts as the agent's in a directory: a name starting with ip-masq whatever it
/// holds, a mapping with a (misspelt) config key, an empty file (the defaults), a ConfigMap
/// named ip-masq* or with a config in data.config under another name; a broken file that
/// names a config key. A file named on the command line keeps today's verdict.
#[test]
fn the_agents_configs_are_found_by_name_key_or_content() {
    let dir = Scratch::new("ci-ours");
    dir.write("ip-masq-agent.conf", "- not a mapping\n");
    dir.write("typo.yaml", "nonMasqCIDRs: [10.0.0.0/8]\n");
    dir.write("empty.yml", "");
    dir.write(
        "renamed.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: egress}\ndata:\n  config: |\n    nonMasqueradeCIDRs: [10.0.0.0/8]\n",
    );
    dir.write("broken.json", "{\"nonMasqueradeCIDRs\": [\n");
    dir.write("Makefile", "all:\n\tcargo build\n");
    std::fs::write(dir.path.join("logo.json"), b"\x89PNG\r\n\x1a\n\xff\xfe").unwrap();
    let (code, report) = json(&[dir.path_str()]);
    assert_eq!(code, 1, "{report}");
    let judged: Vec<(String, String)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let file = r["path"].as_str().unwrap().rsplit('/').next().unwrap();
            (file.to_string(), r["outcome"].as_str().unwrap().to_string())
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("broken.json", "invalid"),
        ("empty.yml", "valid"),
        ("ip-masq-agent.conf", "invalid"),
        ("renamed.yaml", "valid"),
        ("typo.yaml", "valid"),
    ]
    .iter()
    .map(|(f, o)| (f.to_string(), o.to_string()))
    .collect();
    assert_eq!(judged, want, "{report}");
    let skipped: Vec<(&str, &str)> = report["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| {
            let file = s["path"].as_str().unwrap().rsplit('/').next().unwrap();
            (file, s["reason"].as_str().unwrap())
        })
        .collect();
    assert_eq!(skipped.len(), 2, "{report}");
    assert_eq!(skipped[0].0, "Makefile");
    assert!(
        skipped[0].1.starts_with("not YAML or JSON (line "),
        "{skipped:?}"
    );
    assert_eq!(skipped[1], ("logo.json", "not UTF-8 text"));

    // Named on the command line, a manifest without the agent's ConfigMap is still an error.
    let deployment = dir.write("deployment.yaml", DEPLOYMENT);
    let (code, report) = json(&[deployment.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        report["results"][0]["diagnostics"][0]["code"],
        "no-configmap"
    );
    assert!(report.get("skipped").is_none(), "{report}");
}

/// Every line a message cites inside a ConfigMap's config is the manifest's line, as the
/// finding's own position is, in the text report and in -o json and -o yaml; in a quoted
/// scalar, where lines cannot be mapped, the message says it is a line of data.config.
/// Before, `duplicate-cidr`, `covered-cidr`, `duplicate-key`, `link-local-conflict` and
/// `forced-and-kept` counted the lines of the embedded config.
#[test]
fn lines_cited_inside_a_configmap_are_the_manifests() {
    let dir = Scratch::new("ci-lines");
    let manifest = dir.write(
        "cm.yaml",
        "apiVersion: v1\n\
         kind: ConfigMap\n\
         metadata:\n  name: ip-masq-agent\n\
         data:\n\
         \x20 config: |\n\
         \x20   nonMasqueradeCIDRs:\n\
         \x20     - 10.0.0.0/8\n\
         \x20     - 10.1.0.0/16\n\
         \x20     - 10.0.0.0/8\n\
         \x20   cidrLimit: 10\n\
         \x20   cidrLimit: 12\n\
         \x20   masqLinkLocal: true\n\
         \x20   linkLocal: true\n",
    );
    let file = manifest.to_str().unwrap();
    let expected = [
        (
            "covered-cidr",
            9,
            "10.1.0.0/16 is already covered by 10.0.0.0/8 (line 8)",
        ),
        (
            "duplicate-cidr",
            10,
            "10.0.0.0/8 is listed more than once (line 8)",
        ),
        (
            "duplicate-key",
            12,
            "`cidrLimit` is given again (first at line 11); the last value wins",
        ),
        (
            "link-local-conflict",
            14,
            "`linkLocal: true` contradicts `masqLinkLocal: true` (line 13)",
        ),
    ];
    let run = ipmasq(&["validate", "--no-node-checks", file]);
    for (code, line, message) in expected {
        let want = format!("{file}:{line}:");
        let found = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&want) && l.contains(&format!("[{code}]")))
            .unwrap_or_else(|| panic!("no {code} at {want}: {}", run.stdout));
        assert!(found.ends_with(message), "{found}");
    }
    let (_, report) = json(&[file]);
    let yaml = ipmasq(&["validate", "--no-node-checks", "-o", "yaml", file]).stdout;
    for (code, line, message) in expected {
        let found = report["results"][0]["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["code"] == code)
            .unwrap_or_else(|| panic!("no {code}: {report}"));
        assert_eq!(found["line"], line, "{found}");
        assert_eq!(found["message"], message, "{found}");
        assert!(yaml.contains(&format!("line: {line}")), "{yaml}");
    }
    assert!(
        yaml.contains("(first at line 11); the last value wins"),
        "{yaml}"
    );

    // A CIDR both forced and kept: the kept entry is cited by the manifest's line too.
    let forced = dir.write(
        "forced.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\ndata:\n  config: |\n    nonMasqueradeCIDRs:\n      - 10.0.0.0/8\n    forceMasqueradeCIDRs:\n      - 10.0.0.0/8\n",
    );
    let (code, report) = json(&[forced.to_str().unwrap()]);
    assert_eq!(code, 1, "{report}");
    let error = report["results"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "forced-and-kept")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(error["line"], 10);
    assert_eq!(
        error["message"],
        "10.0.0.0/8 is in forceMasqueradeCIDRs and also in nonMasqueradeCIDRs (line 8): it cannot be both masqueraded and kept"
    );

    // A quoted scalar: positions cannot be mapped line by line, so the message says where.
    let quoted = dir.write(
        "quoted.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ip-masq-agent}\ndata:\n  config: \"nonMasqueradeCIDRs: [10.0.0.0/8]\\ncidrLimit: 3\\ncidrLimit: 4\\n\"\n",
    );
    let (_, report) = json(&[quoted.to_str().unwrap()]);
    let duplicate = &report["results"][0]["diagnostics"][0];
    assert_eq!(duplicate["code"], "duplicate-key");
    assert_eq!(duplicate["line"], 5);
    assert_eq!(
        duplicate["message"],
        "`cidrLimit` is given again (first at line 2 of data.config); the last value wins (line 3, column 1 of data.config)"
    );
}

/// `unknown-key` says what the agent does: ignores the key, as upstream does, so the config
/// applies without it and a key not given keeps its default; naming the key a typo meant.
#[test]
fn unknown_key_says_that_the_defaults_apply() {
    let dir = Scratch::new("ci-unknown-key");
    let config = dir.write(
        "c.yaml",
        "nonMasqCIDRs: [10.0.0.0/8]\ncidrLimt: 3\ncidrLimit: 4\nfoo: 1\n",
    );
    let (code, report) = json(&[config.to_str().unwrap()]);
    assert_eq!(code, 0);
    let messages: Vec<&str> = report["results"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "unknown-key")
        .map(|d| d["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        [
            "unknown key `nonMasqCIDRs` is ignored, as upstream ip-masq-agent ignores it: `nonMasqueradeCIDRs` is not given, so its default applies",
            "unknown key `cidrLimt` is ignored, as upstream ip-masq-agent ignores it (`cidrLimit` is given in this file too)",
            "unknown key `foo` is ignored, as upstream ip-masq-agent ignores it: every key not given keeps its default",
        ]
    );
    assert_eq!(
        report["results"][0]["effective"]["nonMasqueradeCIDRs"],
        serde_json::json!(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]),
        "the default applies, as the message says"
    );
}

/// `validate DIR` looks into subfolders (a repository's manifests under `k8s/prod/`), as the
/// guide's CI command expects: before, "0 configs checked" and exit 0 for a broken config two
/// folders down. Dot-folders (a mounted volume's `..data`) and symlinked folders are not read.
#[test]
fn a_directory_is_read_with_its_subfolders() {
    let dir = Scratch::new("ci-subfolders");
    std::fs::create_dir_all(dir.path.join("k8s/prod")).unwrap();
    std::fs::create_dir_all(dir.path.join("k8s/staging")).unwrap();
    std::fs::create_dir_all(dir.path.join(".git")).unwrap();
    dir.write("k8s/prod/ip-masq-agent.yaml", AGENT_CONFIGMAP);
    dir.write(
        "k8s/staging/ip-masq-agent.yaml",
        &AGENT_CONFIGMAP.replace("10.0.0.0/8", "10.0.0.0/33"),
    );
    dir.write(".git/ip-masq-agent.yaml", "- not a mapping\n");
    std::os::unix::fs::symlink(dir.path.join("k8s"), dir.path.join("loop")).unwrap();
    let run = ipmasq(&["validate", "--no-node-checks", dir.path_str()]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("2 configs checked: 1 valid, 1 invalid"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("k8s/staging/ip-masq-agent.yaml"),
        "{}",
        run.stdout
    );
    for absent in [".git", "loop/"] {
        assert!(!run.stdout.contains(absent), "{absent}: {}", run.stdout);
    }
}

/// A stream from `kubectl kustomize` holds other applications' ConfigMaps beside the agent's:
/// `validate -` and `validate FILE` judge the agent's alone, as `validate DIR` does (before,
/// nginx's `config` key made the stream invalid, exit 1). A file whose ConfigMap is not named
/// as the agent's is still taken as the agent's when nothing else in it is.
#[test]
fn a_kustomize_stream_is_judged_on_the_agents_configmap_alone() {
    let dir = Scratch::new("ci-kustomize");
    let stream = format!("{NGINX}---\n{DEPLOYMENT}---\n{AGENT_CONFIGMAP}");
    let file = dir.write("built.yaml", &stream);
    let piped = crate::util::ipmasq_with_stdin(&["validate", "--no-node-checks", "-"], &stream);
    assert_eq!(piped.code, 0, "{}{}", piped.stdout, piped.stderr);
    let named = ipmasq(&["validate", "--no-node-checks", file.to_str().unwrap()]);
    assert_eq!(named.code, 0, "{}{}", named.stdout, named.stderr);
    for run in [&piped, &named] {
        assert!(!run.stdout.contains("nginx"), "{}", run.stdout);
    }
    let alone = dir.write(
        "renamed.yaml",
        &AGENT_CONFIGMAP.replace("name: ip-masq-agent", "name: egress"),
    );
    let run = ipmasq(&["validate", "--no-node-checks", alone.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("valid"), "{}", run.stdout);
}
