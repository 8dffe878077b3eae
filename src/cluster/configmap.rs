//! The config ConfigMap in API mode: which one (`--configmap NAMESPACE/NAME`, data key
//! `config`), and a kube-runtime watcher on it (list, then watch; a `410 Gone` relists by
//! itself) that publishes its data key's text to a [`ConfigMapFeed`] once the first list is
//! complete, and wakes the agent's pass loop when the text changed.

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use std::sync::{Arc, Mutex};
use tracing::{debug, info, warn};

/// `--configmap`'s default: where upstream's DaemonSet mounts its config from.
pub const DEFAULT_CONFIGMAP: &str = "kube-system/ip-masq-agent";
/// The data key that holds the config, as in upstream's ConfigMap (whose DaemonSet mounts
/// the key `config` as the file `/etc/config/ip-masq-agent`).
pub const CONFIG_KEY: &str = "config";

/// Which ConfigMap holds the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMapRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ConfigMapRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl std::str::FromStr for ConfigMapRef {
    type Err = String;

    /// `NAMESPACE/NAME`, each as Kubernetes names them (lower case letters, digits, `-`; a
    /// name may have `.` too).
    fn from_str(text: &str) -> Result<Self, String> {
        let Some((namespace, name)) = text.split_once('/') else {
            return Err(format!(
                "{text:?} is not NAMESPACE/NAME (e.g. {DEFAULT_CONFIGMAP})"
            ));
        };
        let label = |part: &str, what: &str, dots: bool, max: usize| {
            let allowed = |c: char| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.')
            };
            let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
            if part.is_empty()
                || part.len() > max
                || !part.chars().all(allowed)
                || !ends_ok(part.chars().next())
                || !ends_ok(part.chars().last())
            {
                Err(format!(
                    "{what} {part:?} in {text:?} is not a Kubernetes name: at most {max} lower-case letters, digits{}, starting and ending with a letter or digit",
                    if dots { ", '-' and '.'" } else { " and '-'" }
                ))
            } else {
                Ok(part.to_string())
            }
        };
        Ok(ConfigMapRef {
            namespace: label(namespace, "the namespace", false, 63)?,
            name: label(name, "the name", true, 253)?,
        })
    }
}

/// What the API says the ConfigMap holds, as of a resource version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMapData {
    /// The data key's text; None when the ConfigMap or its key does not exist (the file
    /// mode's missing file: upstream's defaults).
    pub text: Option<Arc<String>>,
    /// How log lines and the state file name where the text came from.
    pub provenance: String,
}

impl ConfigMapData {
    /// The data of `object` (None: the ConfigMap does not exist) of the ConfigMap `target`.
    pub fn of(target: &ConfigMapRef, object: Option<&ConfigMap>) -> ConfigMapData {
        let Some(object) = object else {
            return ConfigMapData {
                text: None,
                provenance: format!("configmap {target} (not found)"),
            };
        };
        let version = object
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("unknown");
        match object.data.as_ref().and_then(|data| data.get(CONFIG_KEY)) {
            Some(text) => ConfigMapData {
                text: Some(Arc::new(text.clone())),
                provenance: format!(
                    "configmap {target} key {CONFIG_KEY} (resourceVersion {version})"
                ),
            },
            None => ConfigMapData {
                text: None,
                provenance: format!(
                    "configmap {target} key {CONFIG_KEY} (no such key at resourceVersion {version})"
                ),
            },
        }
    }
}

/// What the watcher has learnt, shared with the source stage of the passes.
#[derive(Debug, Default)]
pub struct FeedState {
    /// The ConfigMap as of the last event; None until the first list is complete.
    pub current: Option<ConfigMapData>,
    /// Why the API cannot be read, while it cannot (the watcher retries with a backoff).
    pub trouble: Option<String>,
}

/// The watcher's side and the source stage's side of the same [`FeedState`].
pub type ConfigMapFeed = Arc<Mutex<FeedState>>;

fn lock(feed: &ConfigMapFeed) -> std::sync::MutexGuard<'_, FeedState> {
    feed.lock().unwrap_or_else(|e| e.into_inner())
}

/// Publishes what the API said; true when the text changed (or the first list just
/// completed), so a pass should run. A new resource version with the same text only updates
/// the provenance.
pub fn publish(feed: &ConfigMapFeed, data: ConfigMapData) -> bool {
    let mut state = lock(feed);
    if state.trouble.take().is_some() {
        info!(configmap = %data.provenance, "the API answers again");
    }
    let changed = state.current.as_ref().is_none_or(|c| c.text != data.text);
    state.current = Some(data);
    changed
}

/// Notes that the API cannot be read: logged when the reason changes, the config in force
/// untouched.
fn trouble(feed: &ConfigMapFeed, target: &ConfigMapRef, reason: String) {
    let mut state = lock(feed);
    if state.trouble.as_deref() != Some(reason.as_str()) {
        warn!(configmap = %target, error = %reason, "cannot read the config ConfigMap from the API; keeping the config and rules in force, retrying with a backoff");
        state.trouble = Some(reason);
    } else {
        debug!(configmap = %target, error = %reason, "the API still cannot be read");
    }
}

/// Watches `target` until the runtime ends: list, then watch (a field selector on its name,
/// in its namespace); after a `410 Gone` the watcher lists again, and the list's result is
/// published as one change (the same text is no change). Nothing is published before the
/// first list is complete. `wake` is called after each published change.
pub async fn watch(
    client: kube::Client,
    target: ConfigMapRef,
    feed: ConfigMapFeed,
    wake: impl Fn() + Send,
) {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, &target.namespace);
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={}", target.name))
        .list_semantic(watcher::ListSemantic::MostRecent);
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    // The objects of a list in progress (only one can match the field selector).
    let mut listing: Option<ConfigMap> = None;
    while let Some(event) = events.next().await {
        let data = match event {
            Ok(Event::Init) => {
                debug!(configmap = %target, "listing the config ConfigMap");
                listing = None;
                continue;
            }
            Ok(Event::InitApply(object)) => {
                listing = Some(object);
                continue;
            }
            Ok(Event::InitDone) => ConfigMapData::of(&target, listing.take().as_ref()),
            Ok(Event::Apply(object)) => ConfigMapData::of(&target, Some(&object)),
            Ok(Event::Delete(_)) => ConfigMapData::of(&target, None),
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                info!(configmap = %target, "the watch's resource version has expired (410 Gone): listing the ConfigMap again");
                continue;
            }
            Err(err) => {
                trouble(&feed, &target, err.to_string());
                continue;
            }
        };
        debug!(configmap = %data.provenance, "the API's config ConfigMap");
        if publish(&feed, data) {
            wake();
        }
    }
}

/// One read of `target` (for `--once` and `--dry-run`): its data, or why it cannot be read.
pub async fn fetch(client: kube::Client, target: &ConfigMapRef) -> Result<ConfigMapData, String> {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, &target.namespace);
    match api.get_opt(&target.name).await {
        Ok(object) => Ok(ConfigMapData::of(target, object.as_ref())),
        Err(err) => Err(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configmap_is_namespace_slash_name_in_kubernetes_spelling() {
        let parsed: ConfigMapRef = DEFAULT_CONFIGMAP.parse().unwrap();
        assert_eq!(parsed.namespace, "kube-system");
        assert_eq!(parsed.name, "ip-masq-agent");
        assert_eq!(parsed.to_string(), DEFAULT_CONFIGMAP);
        assert!("ns/a.b-c".parse::<ConfigMapRef>().is_ok());
        for (bad, says) in [
            ("ip-masq-agent", "is not NAMESPACE/NAME"),
            ("/x", "the namespace \"\""),
            ("Kube-System/x", "the namespace \"Kube-System\""),
            ("a.b/x", "the namespace \"a.b\""),
            ("ns/-x", "the name \"-x\""),
            ("ns/x/y", "the name \"x/y\""),
        ] {
            let err = bad.parse::<ConfigMapRef>().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    fn configmap(version: &str, config: Option<&str>) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some("ip-masq-agent".into());
        object.metadata.resource_version = Some(version.into());
        object.data = config.map(|text| [(CONFIG_KEY.to_string(), text.to_string())].into());
        object
    }

    #[test]
    fn the_data_key_is_the_text_and_its_absence_is_the_missing_file() {
        let target: ConfigMapRef = DEFAULT_CONFIGMAP.parse().unwrap();
        let data = ConfigMapData::of(&target, Some(&configmap("7", Some("cidrLimit: 3"))));
        assert_eq!(
            data.text.as_deref().map(String::as_str),
            Some("cidrLimit: 3")
        );
        assert_eq!(
            data.provenance,
            "configmap kube-system/ip-masq-agent key config (resourceVersion 7)"
        );
        let no_key = ConfigMapData::of(&target, Some(&configmap("8", None)));
        assert_eq!(no_key.text, None);
        assert!(no_key
            .provenance
            .contains("no such key at resourceVersion 8"));
        let gone = ConfigMapData::of(&target, None);
        assert_eq!(gone.text, None);
        assert_eq!(
            gone.provenance,
            "configmap kube-system/ip-masq-agent (not found)"
        );
    }

    #[test]
    fn only_a_changed_text_asks_for_a_pass() {
        let target: ConfigMapRef = DEFAULT_CONFIGMAP.parse().unwrap();
        let feed = ConfigMapFeed::default();
        let first = ConfigMapData::of(&target, Some(&configmap("1", Some("a: 1"))));
        assert!(publish(&feed, first), "the first list's result is news");
        let relisted = ConfigMapData::of(&target, Some(&configmap("9", Some("a: 1"))));
        assert!(
            !publish(&feed, relisted),
            "a relist (or a label edit) with the same text is no change"
        );
        assert!(lock(&feed)
            .current
            .as_ref()
            .is_some_and(|c| c.provenance.contains("resourceVersion 9")));
        assert!(publish(&feed, ConfigMapData::of(&target, None)));
    }
}
