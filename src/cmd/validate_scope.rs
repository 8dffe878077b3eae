//! Which files of a directory `ipmasq validate DIR` judges. A repository's directory holds
//! more than the agent's config: a README, a Deployment, another application's ConfigMap.
//! Those are skipped, each with the reason `validate -v` prints, so only the agent's configs
//! can fail the run. A file named on the command line is always judged.
//!
//! The rule, in order (a file is "ours" when judged):
//! 1. a name starting with `ip-masq` (the agent's file, a `--config-dir` part) is ours;
//! 2. a name with an extension other than `.yaml`, `.yml` or `.json` is skipped;
//! 3. a file over the 8 MiB limit, or not UTF-8, is skipped (no config is either);
//! 4. a file that is not YAML is ours only when its text names `ip-masq` or a config key;
//! 5. a Kubernetes manifest is ours when it holds the agent's ConfigMap
//!    ([`manifest::is_agents_configmap`]) or an EgressNATPolicy; only those are checked;
//! 6. any other YAML or JSON is ours when it is empty (the agent reads it as the defaults) or
//!    a mapping with a config key, or a key close to one (a typo is still ours).

use crate::config::yaml::{Stream, YamlError, YamlNode};
use crate::config::{manifest, ReadError};
use serde::Serialize;
use std::path::Path;

/// A file of a directory that was not judged, and why.
#[derive(Debug, Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// The extensions of files judged (besides names without one).
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Whether the file's name makes it the agent's, whatever it holds (rule 1).
fn named_for_the_agent(path: &Path) -> bool {
    path.file_name().is_some_and(|n| {
        n.to_string_lossy()
            .starts_with(crate::config::merge::PREFIX)
    })
}

/// Rule 2: why a file is skipped by its name alone, before it is read.
pub fn by_name(path: &Path) -> Option<String> {
    if named_for_the_agent(path) {
        return None;
    }
    let extension = path.extension()?.to_string_lossy();
    if EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str()) {
        return None;
    }
    Some(format!(
        "not a YAML or JSON file: its extension .{extension} is not .yaml, .yml or .json"
    ))
}

/// Rule 3: why a file that cannot be read is skipped (None: it is reported as unreadable).
pub fn by_read_error(path: &Path, err: &ReadError) -> Option<String> {
    if named_for_the_agent(path) {
        return None;
    }
    match err {
        ReadError::TooLarge(_) => Some("larger than the 8 MiB a config may be".to_string()),
        ReadError::NotUtf8 { .. } => Some("not UTF-8 text".to_string()),
        _ => None,
    }
}

/// Whether a text names the agent or one of its config keys (rule 4: a file too broken to
/// parse is the agent's when it says so).
pub fn mentions_the_agent(text: &str) -> bool {
    let folded = text.to_lowercase();
    folded.contains(crate::config::merge::PREFIX)
        || crate::config::supported_keys().any(|key| folded.contains(&key.to_lowercase()))
}

/// Rules 4 and 6: why a file's content is skipped (a manifest is judged by [`manifest_reason`]
/// once its ConfigMaps are read).
pub fn by_content(path: &Path, text: &str, parsed: &Result<Stream, YamlError>) -> Option<String> {
    if named_for_the_agent(path) {
        return None;
    }
    let stream = match parsed {
        Ok(stream) => stream,
        Err(_) if mentions_the_agent(text) => return None,
        Err(err) => {
            return Some(format!(
                "not YAML or JSON (line {}: {}), and it names no ip-masq-agent key",
                err.location.line, err.message
            ))
        }
    };
    if manifest::is_manifest_stream(&stream.documents) {
        return None;
    }
    let first = stream.documents.first()?;
    if first.is_null() || crate::config::names_a_config_key(first) {
        return None;
    }
    Some(match first.as_mapping() {
        Some(_) => "a YAML mapping with no ip-masq-agent config key".to_string(),
        None => format!("a YAML {}, not a mapping of config keys", first.kind_name()),
    })
}

/// Rule 5: why a manifest that holds none of the agent's objects is skipped: the objects it
/// holds, by kind and name.
pub fn manifest_reason(stream: &Stream) -> String {
    const LISTED: usize = 3;
    let objects: Vec<String> = stream
        .documents
        .iter()
        .filter(|d| manifest::is_manifest(d))
        .map(|d| {
            fn field(node: Option<&YamlNode>) -> &str {
                node.and_then(YamlNode::as_str).unwrap_or("?")
            }
            format!(
                "{} {}",
                field(d.get("kind")),
                field(d.get("metadata").and_then(|m| m.get("name")))
            )
        })
        .collect();
    let mut listed = objects
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if objects.len() > LISTED {
        listed.push_str(&format!(" and {} more", objects.len() - LISTED));
    }
    format!("a Kubernetes manifest without an ip-masq-agent ConfigMap ({listed})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml::{parse_stream, Documents};

    fn content(name: &str, text: &str) -> Option<String> {
        let parsed = parse_stream(text, manifest::MANIFEST_OR_CONFIG);
        by_content(Path::new(name), text, &parsed)
    }

    #[test]
    fn names_decide_before_reading() {
        assert!(by_name(Path::new("d/README.md")).is_some());
        assert!(by_name(Path::new("d/notes.txt")).is_some());
        for judged in [
            "d/c.yaml",
            "d/c.YML",
            "d/c.json",
            "d/config",
            "d/ip-masq-agent.md",
        ] {
            assert_eq!(by_name(Path::new(judged)), None, "{judged}");
        }
    }

    #[test]
    fn content_decides_for_plain_documents() {
        assert_eq!(
            content("c.yaml", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"),
            None
        );
        assert_eq!(content("c.yaml", "NONMASQUERADECIDRS: []\n"), None);
        assert_eq!(
            content("c.yaml", "nonMasqCIDRs: [10.0.0.0/8]\n"),
            None,
            "a typo is ours"
        );
        assert_eq!(content("empty.yaml", ""), None, "empty: the defaults");
        assert_eq!(
            content("c.yaml", "{nonMasqueradeCIDRs: [\n"),
            None,
            "broken, names a key"
        );
        assert!(content("Makefile", "all:\n\tcargo build\n\t{{x\n").is_some());
        assert!(content("LICENSE", "Apache License\nVersion 2.0\n").is_some());
        assert!(content("list.yaml", "- a\n- b\n").is_some());
        // Files of a repository that are nobody's config.
        for other in [
            "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps: []\n",
            "stages: [test]\nvariables: {A: b}\ntest:\n  script: [make]\n  image: rust\n",
            "services:\n  web:\n    image: nginx\n    ports: ['80:80']\nversion: '3'\n",
            "resources: [a.yaml]\nnamespace: x\nimages: []\n",
        ] {
            assert!(content("x.yaml", other).is_some(), "{other}");
        }
        assert_eq!(
            content("ip-masq-agent", "- a\n"),
            None,
            "named for the agent"
        );
    }

    #[test]
    fn manifests_are_judged_by_their_objects() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: nginx}\ndata: {config: 'worker_processes 1;'}\n";
        let stream = parse_stream(text, Documents::AllWhen(manifest::is_manifest)).unwrap();
        assert_eq!(content("m.yaml", text), None, "judged once read");
        assert_eq!(
            manifest_reason(&stream),
            "a Kubernetes manifest without an ip-masq-agent ConfigMap (Deployment web, ConfigMap nginx)"
        );
        let object = |text: &str| {
            parse_stream(text, Documents::First)
                .unwrap()
                .documents
                .remove(0)
        };
        assert!(!manifest::is_agents_configmap(&stream.documents[1]));
        for ours in [
            "kind: ConfigMap\nmetadata: {name: ip-masq-agent}\n",
            "kind: ConfigMap\nmetadata: {name: ip-masq-agent-gpu}\ndata: {config: x}\n",
            "kind: ConfigMap\nmetadata: {name: x}\ndata: {ip-masq-agent-user: 'cidrLimit: 3'}\n",
            "kind: ConfigMap\nmetadata: {name: egress}\ndata: {config: 'nonMasqueradeCIDRs: []'}\n",
        ] {
            assert!(manifest::is_agents_configmap(&object(ours)), "{ours}");
        }
    }
}
