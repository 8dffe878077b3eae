//! The ConfigMaps of API mode: which one is the base (`--configmap NAMESPACE/NAME`, data key
//! `config`), which are node pools (`ip-masq-agent-*` with `ipmasq.io/node-selector`), the
//! [`ConfigMapFeed`] every API watcher publishes to, and kube-runtime's watcher of the metadata
//! of the namespace's ConfigMaps into a reflector's `Store` that holds the base's and the
//! pools' metadata only (a `410 Gone` relists by itself). The data of the base and the pools is
//! read by a GET when the store names a resourceVersion not read yet (at that
//! resourceVersion, so the watch cache answers); what is published is read from the store and
//! those GETs once the store is ready and every GET it needs is done, and wakes the agent's
//! pass loop when it differs from what was published.

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
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

impl ConfigMapRef {
    /// The name of the next config's ConfigMap (`<name>-next`): a rollout in waves.
    pub fn next_name(&self) -> String {
        crate::config::rollout::next_name(&self.name)
    }
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

/// A node pool's ConfigMap as the API holds it: `ipmasq.io/node-selector`'s text and the
/// `config` key's text (None: no such key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolData {
    pub selector: String,
    pub text: Option<String>,
}

impl PoolData {
    /// Whether the pool selects a node with `labels` (a selector that does not parse selects
    /// none).
    pub fn selects(&self, labels: &crate::config::selector::Labels) -> bool {
        crate::config::selector::Selector::parse(&self.selector).is_ok_and(|s| s.matches(labels))
    }

    /// The pool `object` makes, if it is one: named `ip-masq-agent-*` (see
    /// [`crate::config::pool::is_pool_name`]) with the node-selector annotation.
    pub fn of(object: &ConfigMap) -> Option<PoolData> {
        let name = object.metadata.name.as_deref()?;
        if !crate::config::pool::is_pool_name(name) {
            return None;
        }
        let selector = object
            .metadata
            .annotations
            .as_ref()?
            .get(crate::config::pool::NODE_SELECTOR_ANNOTATION)?;
        Some(PoolData {
            selector: selector.clone(),
            text: object
                .data
                .as_ref()
                .and_then(|data| data.get(CONFIG_KEY))
                .cloned(),
        })
    }
}

/// The next config's ConfigMap (`<base>-next`, see [`crate::config::rollout`]) as the API
/// holds it: the `config` key's text (None: no such key), its annotations (the schedule, the
/// invariants, a halt or an abort) and its resource version (a halt is written against it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextData {
    pub text: Option<Arc<String>>,
    pub annotations: std::collections::BTreeMap<String, String>,
    pub resource_version: String,
}

impl NextData {
    pub fn of(object: &ConfigMap) -> NextData {
        NextData {
            text: object
                .data
                .as_ref()
                .and_then(|data| data.get(CONFIG_KEY))
                .map(|text| Arc::new(text.clone())),
            annotations: object.metadata.annotations.clone().unwrap_or_default(),
            resource_version: object.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// What the API says of the agent's Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeLabels {
    /// The agent knows no node name: no pool applies (see `--node-name`).
    Unnamed,
    /// No Node of that name: no pool applies until it exists.
    NotFound,
    /// The Node's labels.
    Labels(crate::config::selector::Labels),
}

impl NodeLabels {
    /// The labels pools are matched against (none when the Node is unknown).
    pub fn labels(&self) -> Option<&crate::config::selector::Labels> {
        match self {
            NodeLabels::Labels(labels) => Some(labels),
            NodeLabels::Unnamed | NodeLabels::NotFound => None,
        }
    }
}

/// What the watchers have learnt, shared with the source stage of the passes. Each input is
/// None until the first list of its kind is complete: nothing is applied before all are.
#[derive(Debug, Default)]
pub struct FeedState {
    /// The base ConfigMap as of the last event; None until the ConfigMaps are listed.
    pub current: Option<ConfigMapData>,
    /// The pool ConfigMaps of the namespace by name, as of the same list (and the events
    /// since).
    pub pools: std::collections::BTreeMap<String, PoolData>,
    /// The next config's ConfigMap, while one exists (as of the same list and the events
    /// since).
    pub next: Option<NextData>,
    /// The agent's Node's labels; None until its first list.
    pub node: Option<NodeLabels>,
    /// The uid of the agent's Node as last seen (kept when it is deleted): the mirror writes
    /// again onto a Node registered again.
    pub node_uid: Option<String>,
    /// The EgressNATPolicies by name; None until their first list (a CRD that is not
    /// served counts as listed, none).
    pub policies: Option<std::collections::BTreeMap<String, crate::config::composed::PolicyText>>,
    /// When the API last answered for each input (API mode, once watched): the mirror says
    /// `ApiViewStale` when one is older than allowed.
    pub view: Option<super::age::ApiView>,
    /// Why each input cannot be read, while it cannot (the watchers retry with a backoff;
    /// each reason logged once): an input's answer clears its own entry only.
    troubles: std::collections::BTreeMap<String, Trouble>,
}

/// Why one input cannot be read, and how many failures in a row said so.
#[derive(Debug)]
struct Trouble {
    reason: String,
    failures: u64,
}

impl FeedState {
    /// Whether the first list of every watched kind is complete.
    pub fn listed(&self) -> bool {
        self.current.is_some() && self.node.is_some() && self.policies.is_some()
    }

    /// Why the API cannot be read, while any input cannot (the first by name).
    pub fn trouble(&self) -> Option<&str> {
        self.troubles.values().next().map(|t| t.reason.as_str())
    }

    /// Notes that the inputs could not be read at all (a one-shot read failed).
    pub fn unreadable(&mut self, reason: String) {
        self.troubles.insert(
            "the API".to_string(),
            Trouble {
                reason,
                failures: 1,
            },
        );
    }
}

/// The watchers' side and the source stage's side of the same [`FeedState`].
pub type ConfigMapFeed = Arc<Mutex<FeedState>>;

/// The feed of an agent: without a node name, the Node is known not to be watched.
pub fn feed_for(node_name: Option<&str>) -> ConfigMapFeed {
    let feed = ConfigMapFeed::default();
    if node_name.is_none() {
        lock(&feed).node = Some(NodeLabels::Unnamed);
    }
    feed
}

pub(crate) fn lock(feed: &ConfigMapFeed) -> std::sync::MutexGuard<'_, FeedState> {
    feed.lock().unwrap_or_else(|e| e.into_inner())
}

/// Publishes what the API said of the base ConfigMap; true when the text changed (or the first
/// list just completed), so a pass should run. A new resource version with the same text only
/// updates the provenance.
pub fn publish(feed: &ConfigMapFeed, data: ConfigMapData) -> bool {
    let mut state = lock(feed);
    answers_again(&mut state, "the config ConfigMap");
    let changed = state.current.as_ref().is_none_or(|c| c.text != data.text);
    state.current = Some(data);
    changed
}

/// Publishes the ConfigMaps of a completed list: the base and every pool (those gone since
/// are dropped); true when anything that matters changed.
pub fn publish_listing(
    feed: &ConfigMapFeed,
    data: ConfigMapData,
    pools: std::collections::BTreeMap<String, PoolData>,
) -> bool {
    listing_into(&mut lock(feed), data, pools)
}

/// [`publish_listing`] with the next config's ConfigMap (None: there is none) as one change:
/// a pass never sees the base of one list with the next config of another (a promote writes
/// the base, then deletes the next).
pub fn publish_listing_and_next(
    feed: &ConfigMapFeed,
    data: ConfigMapData,
    pools: std::collections::BTreeMap<String, PoolData>,
    next: Option<NextData>,
) -> bool {
    let mut state = lock(feed);
    let next_changed = state.next != next;
    state.next = next;
    listing_into(&mut state, data, pools) || next_changed
}

fn listing_into(
    state: &mut FeedState,
    data: ConfigMapData,
    pools: std::collections::BTreeMap<String, PoolData>,
) -> bool {
    answers_again(state, "the config ConfigMap");
    let changed =
        state.current.as_ref().is_none_or(|c| c.text != data.text) || state.pools != pools;
    state.current = Some(data);
    state.pools = pools;
    changed
}

/// Publishes one pool's change (None: deleted, or no longer a pool); true when it changed.
pub fn publish_pool(feed: &ConfigMapFeed, name: &str, pool: Option<PoolData>) -> bool {
    let mut state = lock(feed);
    answers_again(&mut state, "the config ConfigMap");
    if state.current.is_none() {
        // Not listed yet: the list's result replaces every pool.
        return false;
    }
    match pool {
        Some(pool) => state
            .pools
            .insert(name.to_string(), pool.clone())
            .is_none_or(|before| before != pool),
        None => state.pools.remove(name).is_some(),
    }
}

pub(crate) fn answers_again(state: &mut FeedState, what: &str) {
    if let Some(trouble) = state.troubles.remove(what) {
        info!(input = %what, failures = trouble.failures, "the API answers again");
    }
}

/// Notes that the API cannot be read: logged once per input (`what`, in words: `the config
/// ConfigMap`) and reason, then counted (the count said when another reason comes, or the API
/// answers again), the config in force untouched.
pub(crate) fn trouble(feed: &ConfigMapFeed, what: &str, reason: String) {
    let mut state = lock(feed);
    match state.troubles.get_mut(what) {
        Some(trouble) if trouble.reason == reason => {
            trouble.failures += 1;
            debug!(error = %reason, failures = trouble.failures, "the API still cannot be read ({what})");
        }
        before => {
            let failures_before = before.map(|t| t.failures);
            warn!(error = %reason, failures_before, "cannot read {what} from the API; keeping the config and rules in force, retrying with a backoff");
            state.troubles.insert(
                what.to_string(),
                Trouble {
                    reason,
                    failures: 1,
                },
            );
        }
    }
}

/// Whether the ConfigMap of `metadata` is `target` (the base), its next config
/// (`<base>-next`) or a pool: its name, and for a pool the node-selector annotation, are
/// metadata, so no data is needed to tell.
pub fn is_base_or_pool(target: &ConfigMapRef, metadata: &kube::api::ObjectMeta) -> bool {
    let Some(name) = metadata.name.as_deref() else {
        return false;
    };
    name == target.name
        || name == target.next_name()
        || (crate::config::pool::is_pool_name(name)
            && metadata.annotations.as_ref().is_some_and(|annotations| {
                annotations.contains_key(crate::config::pool::NODE_SELECTOR_ANNOTATION)
            }))
}

/// Only the base and the pools reach the metadata store (`held`): the namespace's other
/// ConfigMaps are dropped, so their updates wake nothing, and an update that makes one the
/// store holds neither (its annotation removed) is its deletion.
fn only_base_and_pools(
    target: &ConfigMapRef,
    held: &Store<PartialObjectMeta<ConfigMap>>,
    event: Event<PartialObjectMeta<ConfigMap>>,
) -> Option<Event<PartialObjectMeta<ConfigMap>>> {
    match event {
        Event::InitApply(object) if !is_base_or_pool(target, &object.metadata) => None,
        Event::Apply(object) if !is_base_or_pool(target, &object.metadata) => held
            .get(&ObjectRef::from_obj(&object))
            .map(|_| Event::Delete(object)),
        Event::Delete(object) if held.get(&ObjectRef::from_obj(&object)).is_none() => None,
        event => Some(event),
    }
}

/// What the last GET of a wanted ConfigMap said: the resource version the store named
/// (`asked`), the version the GET returned (`got`; newer is fine, newest wins), and the data
/// it holds.
#[derive(Clone, Debug)]
struct Fetched {
    asked: String,
    got: Option<String>,
    /// Some for the base: its data (the not-found data after a 404).
    base: Option<ConfigMapData>,
    /// For a pool: the pool the GET's object makes (None after a 404, or no longer a pool).
    pool: Option<PoolData>,
    /// For the next config: its data (None after a 404).
    next: Option<NextData>,
}

/// The base's and the pools' metadata as the watch's store holds it, and the GETs of their
/// data: what the store names at a version not yet read is read.
struct Tracker {
    target: ConfigMapRef,
    /// The metadata of the base and the pools (see [`only_base_and_pools`]).
    store: Store<PartialObjectMeta<ConfigMap>>,
    /// The last GET of each wanted ConfigMap.
    fetched: std::collections::BTreeMap<String, Fetched>,
}

impl Tracker {
    fn new(target: ConfigMapRef, store: Store<PartialObjectMeta<ConfigMap>>) -> Tracker {
        Tracker {
            target,
            store,
            fetched: Default::default(),
        }
    }

    /// The base and the pools the store holds, each with its resource version; None until
    /// the store's first list is whole.
    fn wanted(&self) -> Option<std::collections::BTreeMap<String, String>> {
        if !super::is_ready(&self.store) {
            return None;
        }
        Some(
            self.store
                .state()
                .iter()
                .map(|object| {
                    let name = object.metadata.name.clone().unwrap_or_default();
                    let version = object.metadata.resource_version.clone().unwrap_or_default();
                    (name, version)
                })
                .collect(),
        )
    }

    /// The wanted ConfigMaps whose data must be read: never read, or the store names a
    /// version that is neither the one asked for nor the one the GET returned.
    fn stale(&self) -> Vec<String> {
        let Some(wanted) = self.wanted() else {
            return Vec::new();
        };
        wanted
            .into_iter()
            .filter(|(name, version)| {
                self.fetched.get(name).is_none_or(|fetched| {
                    fetched.asked != *version && fetched.got.as_deref() != Some(version.as_str())
                })
            })
            .map(|(name, _)| name)
            .collect()
    }

    /// The resource version the store names for `name` ("0", any, when it names none).
    fn version_of(&self, name: &str) -> String {
        self.wanted()
            .and_then(|mut wanted| wanted.remove(name))
            .filter(|version| !version.is_empty())
            .unwrap_or_else(|| "0".to_string())
    }

    /// Notes what the GET of `name` returned (None: 404, deleted since the event).
    fn fetched(&mut self, name: &str, object: Option<ConfigMap>) {
        let Some(asked) = self.wanted().and_then(|mut wanted| wanted.remove(name)) else {
            return;
        };
        let got = object
            .as_ref()
            .and_then(|object| object.metadata.resource_version.clone());
        let (mut base, mut pool, mut next) = (None, None, None);
        if name == self.target.name {
            base = Some(ConfigMapData::of(&self.target, object.as_ref()));
        } else if name == self.target.next_name() {
            next = object.as_ref().map(NextData::of);
        } else {
            pool = object.as_ref().and_then(PoolData::of);
        }
        self.fetched.insert(
            name.to_string(),
            Fetched {
                asked,
                got,
                base,
                pool,
                next,
            },
        );
    }

    /// The base and the pools to publish, once the store is ready and every ConfigMap it
    /// names has been read (the reads of those it no longer names are forgotten).
    fn complete(
        &mut self,
    ) -> Option<(ConfigMapData, std::collections::BTreeMap<String, PoolData>)> {
        let wanted = self.wanted()?;
        if !self.stale().is_empty() {
            return None;
        }
        self.fetched.retain(|name, _| wanted.contains_key(name));
        let base = self
            .fetched
            .get(&self.target.name)
            .and_then(|fetched| fetched.base.clone())
            .unwrap_or_else(|| ConfigMapData::of(&self.target, None));
        let pools = self
            .fetched
            .iter()
            .filter(|(name, _)| **name != self.target.name)
            .filter_map(|(name, fetched)| Some((name.clone(), fetched.pool.clone()?)))
            .collect();
        Some((base, pools))
    }

    /// The next config's ConfigMap as last read (None: none, or not read yet); call after
    /// [`Tracker::complete`] said every read is done.
    fn next(&self) -> Option<NextData> {
        self.fetched
            .get(&self.target.next_name())
            .and_then(|fetched| fetched.next.clone())
    }
}

/// Watches the ConfigMaps of `target`'s namespace until the runtime ends, by their metadata
/// only (names, annotations, resource versions: the data of the namespace's other ConfigMaps is
/// never received), and GETs the data of `target` (the base) and of the node pools
/// (`ip-masq-agent-*` with the node-selector annotation) when their resource version changed,
/// at that resource version (served from the API server's watch cache): list (from the watch
/// cache, in one answer: the cache ignores a page size with `resourceVersion=0`), then watch; after a `410 Gone` the watcher lists
/// again, and the list's result replaces the base and every pool as one change (the same texts
/// are no change). Nothing is published before the first list and every GET it needs are done;
/// a GET that fails or does not answer within the deadline is the input's trouble and is
/// retried with [`super::backoff::ApiBackoff`], the change it was for kept; a 404 is a
/// deletion. A failed list or watch waits with its own backoff. `wake` is called after each
/// published change.
pub async fn watch(
    client: kube::Client,
    target: ConfigMapRef,
    feed: ConfigMapFeed,
    wake: impl Fn() + Send,
) {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, &target.namespace);
    let config = super::watcher_config();
    // An Api of PartialObjectMeta lists and watches metadata only (kube-rs' metadata watcher).
    let metadata: kube::Api<PartialObjectMeta<ConfigMap>> =
        kube::Api::namespaced(api.clone().into_client(), &target.namespace);
    let (store, writer) = reflector::store();
    let (only_ours, held) = (target.clone(), store.clone());
    let events = watcher::watcher(metadata, config)
        .modify(super::without_managed_fields)
        .filter_map(move |event| {
            std::future::ready(match event {
                Ok(event) => only_base_and_pools(&only_ours, &held, event).map(Ok),
                Err(err) => Some(Err(err)),
            })
        });
    let mut events = std::pin::pin!(reflector::reflector(writer, events));
    let mut tracker = Tracker::new(target.clone(), store);
    let mut watch_backoff = super::backoff::ApiBackoff::default();
    let mut fetch_backoff = super::backoff::ApiBackoff::default();
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Ok(event)) => {
                    if matches!(event, Event::Init) {
                        debug!(namespace = %target.namespace, "listing the config ConfigMap and the node pools (the namespace's ConfigMaps, metadata only)");
                    }
                    if !super::settles(&event) {
                        continue;
                    }
                }
                Some(Err(err)) if super::silent_watch(&err) => {
                    super::said_silent("the config ConfigMap");
                    continue;
                }
                Some(Err(watcher::Error::WatchError(status))) if status.code == 410 => {
                    info!(namespace = %target.namespace, "the watch's resource version has expired (410 Gone): listing the ConfigMaps again");
                    continue;
                }
                Some(Err(err)) => {
                    trouble(&feed, "the config ConfigMap", err.to_string());
                    watch_backoff.wait(super::backoff::Failure::of_watcher(&err)).await;
                    continue;
                }
            },
            () = retry => {}
        }
        // A failed GET waits for its retry: the events meanwhile change what it will read.
        if retry_at.is_some_and(|at| at > tokio::time::Instant::now()) {
            continue;
        }
        if let Err(failure) = fetch_stale(&api, &mut tracker, &feed).await {
            let wait = fetch_backoff.after(
                failure,
                tokio::time::Instant::now(),
                super::backoff::jitter(),
            );
            retry_at = Some(tokio::time::Instant::now() + wait);
            continue;
        }
        retry_at = None;
        let Some((data, pools)) = tracker.complete() else {
            continue;
        };
        debug!(configmap = %data.provenance, pools = pools.len(), "the API's ConfigMaps read");
        if publish_listing_and_next(&feed, data, pools.clone(), tracker.next()) {
            warn_of_bad_selectors(&pools);
            wake();
        }
    }
}

/// GETs every wanted ConfigMap whose data is stale, each at the version the watch named;
/// the first failure is the input's trouble and its kind is returned (the rest wait).
async fn fetch_stale(
    api: &kube::Api<ConfigMap>,
    tracker: &mut Tracker,
    feed: &ConfigMapFeed,
) -> Result<(), super::backoff::Failure> {
    for name in tracker.stale() {
        let version = tracker.version_of(&name);
        match super::get_at(api, &name, &version).await {
            Ok(object) => tracker.fetched(&name, object),
            Err(err) => {
                trouble(
                    feed,
                    "the config ConfigMap",
                    format!(
                        "get configmap {}/{name} (resourceVersion {version}): {err}",
                        tracker.target.namespace
                    ),
                );
                return Err(err.failure());
            }
        }
    }
    Ok(())
}

/// Says (as a warning) which pools have a selector that does not parse: they select no node.
fn warn_of_bad_selectors(pools: &std::collections::BTreeMap<String, PoolData>) {
    for (name, pool) in pools {
        if let Err(err) = crate::config::selector::Selector::parse(&pool.selector) {
            warn!(pool = %name, selector = %pool.selector, error = %err, "the node pool's ipmasq.io/node-selector is not a label selector: it selects no node (`ipmasq validate` checks pool manifests)");
        }
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

    #[test]
    fn only_annotated_ip_masq_agent_configmaps_are_pools_and_only_their_changes_wake() {
        let mut object = configmap("3", Some("nonMasqueradeCIDRs: [100.64.0.0/10]"));
        object.metadata.name = Some("ip-masq-agent-gpu".into());
        assert_eq!(PoolData::of(&object), None, "no annotation: not a pool");
        object.metadata.annotations = Some(
            [(
                crate::config::pool::NODE_SELECTOR_ANNOTATION.to_string(),
                "pool=gpu".to_string(),
            )]
            .into(),
        );
        let pool = PoolData::of(&object).unwrap();
        assert_eq!(pool.selector, "pool=gpu");
        object.metadata.name = Some("kube-proxy".into());
        assert_eq!(PoolData::of(&object), None, "not named ip-masq-agent-*");
        let target: ConfigMapRef = DEFAULT_CONFIGMAP.parse().unwrap();
        let feed = feed_for(Some("node-a"));
        assert!(
            !publish_pool(&feed, "ip-masq-agent-gpu", Some(pool.clone())),
            "not listed yet"
        );
        assert!(publish_listing(
            &feed,
            ConfigMapData::of(&target, None),
            Default::default()
        ));
        assert!(publish_pool(&feed, "ip-masq-agent-gpu", Some(pool.clone())));
        assert!(!publish_pool(
            &feed,
            "ip-masq-agent-gpu",
            Some(pool.clone())
        ));
        assert!(
            !publish_listing(
                &feed,
                ConfigMapData::of(&target, None),
                [("ip-masq-agent-gpu".to_string(), pool)].into()
            ),
            "a relist with the same inputs is no change"
        );
        assert!(publish_pool(&feed, "ip-masq-agent-gpu", None));
        assert!(
            !lock(&feed).listed(),
            "the Node and the policies are not listed yet"
        );
        assert_eq!(lock(&feed_for(None)).node, Some(NodeLabels::Unnamed));
    }

    #[test]
    fn a_trouble_is_said_once_per_reason_then_counted_until_the_api_answers() {
        let feed = feed_for(None);
        for _ in 0..3 {
            trouble(&feed, "the config ConfigMap", "connection refused".into());
        }
        let failures = |feed: &ConfigMapFeed| {
            lock(feed)
                .troubles
                .get("the config ConfigMap")
                .map(|t| t.failures)
        };
        assert_eq!(failures(&feed), Some(3));
        trouble(&feed, "the config ConfigMap", "403 Forbidden".into());
        assert_eq!(
            failures(&feed),
            Some(1),
            "another reason: said, counted anew"
        );
        assert_eq!(lock(&feed).trouble(), Some("403 Forbidden"));
        answers_again(&mut lock(&feed), "the config ConfigMap");
        assert_eq!(failures(&feed), None);
    }

    fn metadata(name: &str, version: &str, pool: bool) -> PartialObjectMeta<ConfigMap> {
        let mut object = PartialObjectMeta::<ConfigMap>::default();
        object.metadata.name = Some(name.into());
        object.metadata.resource_version = Some(version.into());
        if pool {
            object.metadata.annotations = Some(
                [(
                    crate::config::pool::NODE_SELECTOR_ANNOTATION.to_string(),
                    "pool=gpu".to_string(),
                )]
                .into(),
            );
        }
        object
    }

    fn full(name: &str, version: &str, pool: bool, config: &str) -> ConfigMap {
        let meta = metadata(name, version, pool);
        let mut object = configmap(version, Some(config));
        object.metadata = meta.metadata;
        object
    }

    /// A tracker over a store that `note` feeds as the watch does.
    struct Watched {
        target: ConfigMapRef,
        writer: reflector::store::Writer<PartialObjectMeta<ConfigMap>>,
        tracker: Tracker,
    }

    impl Watched {
        fn new() -> Watched {
            let target: ConfigMapRef = DEFAULT_CONFIGMAP.parse().unwrap();
            let writer = reflector::store::Writer::default();
            let tracker = Tracker::new(target.clone(), writer.as_reader());
            Watched {
                target,
                writer,
                tracker,
            }
        }

        /// Takes in one event; whether it settled (the loop then reads and publishes).
        fn note(&mut self, event: Event<PartialObjectMeta<ConfigMap>>) -> bool {
            let held = self.writer.as_reader();
            let Some(event) = only_base_and_pools(&self.target, &held, event) else {
                return false;
            };
            self.writer.apply_watcher_event(&event);
            super::super::settles(&event)
        }
    }

    // Long: one watched store driven event by event (the list, its end, the reads, later
    // changes); each assertion depends on what the events before it left in the store.
    #[test]
    fn the_metadata_store_holds_only_the_base_and_pools_and_only_new_versions_are_read() {
        let mut w = Watched::new();
        assert!(!w.note(Event::Init));
        for object in [
            metadata("ip-masq-agent", "5", false),
            metadata("ip-masq-agent-gpu", "6", true),
            metadata("ip-masq-agent-plain", "7", false),
            metadata("kube-proxy", "8", false),
        ] {
            assert!(!w.note(Event::InitApply(object)));
        }
        assert!(w.tracker.complete().is_none(), "the list is not done");
        assert!(w.tracker.stale().is_empty(), "nothing is read before it is");
        assert!(w.note(Event::InitDone));
        assert_eq!(w.tracker.store.len(), 2, "only the base and the pool");
        assert_eq!(w.tracker.stale(), ["ip-masq-agent", "ip-masq-agent-gpu"]);
        assert_eq!(
            w.tracker.version_of("ip-masq-agent"),
            "5",
            "the GET names the listed version: the watch cache answers it"
        );
        assert_eq!(w.tracker.version_of("kube-proxy"), "0", "not wanted: any");
        assert!(w.tracker.complete().is_none(), "nothing before every GET");
        w.tracker.fetched(
            "ip-masq-agent",
            Some(full("ip-masq-agent", "9", false, "a: 1")),
        );
        assert!(w.tracker.complete().is_none(), "the pool is not read yet");
        w.tracker.fetched(
            "ip-masq-agent-gpu",
            Some(full("ip-masq-agent-gpu", "6", true, "b: 2")),
        );
        let (base, pools) = w.tracker.complete().unwrap();
        assert_eq!(base.text.as_deref().map(String::as_str), Some("a: 1"));
        assert!(base.provenance.contains("resourceVersion 9"), "newest wins");
        assert_eq!(pools.len(), 1);
        let feed = feed_for(None);
        assert!(publish_listing(&feed, base, pools));

        assert!(
            !w.note(Event::Apply(metadata("kube-proxy", "20", false))),
            "an unrelated ConfigMap's update is dropped: nothing wakes"
        );
        assert!(!w.note(Event::Delete(metadata("kube-proxy", "20", false))));
        assert!(w.tracker.stale().is_empty(), "nothing to read");
        let (base, pools) = w.tracker.complete().unwrap();
        assert!(!publish_listing(&feed, base, pools), "and nothing new");
        assert!(w.note(Event::Apply(metadata("ip-masq-agent", "9", false))));
        assert!(
            w.tracker.stale().is_empty(),
            "the version the GET already returned is not read again"
        );
        assert!(w.note(Event::Apply(metadata("ip-masq-agent", "10", false))));
        assert_eq!(w.tracker.stale(), ["ip-masq-agent"]);
        assert!(w.tracker.complete().is_none(), "a change waits for its GET");
        w.tracker.fetched("ip-masq-agent", None);
        let (base, pools) = w.tracker.complete().unwrap();
        assert_eq!(base.text, None, "a 404 on GET is a deletion");
        assert!(publish_listing(&feed, base, pools));

        // A relist (after 410 Gone) with the same versions reads nothing and changes nothing;
        // while it runs, the store shows the last whole list.
        w.tracker.fetched(
            "ip-masq-agent",
            Some(full("ip-masq-agent", "10", false, "a: 1")),
        );
        let (base, pools) = w.tracker.complete().unwrap();
        assert!(publish_listing(&feed, base, pools));
        assert!(!w.note(Event::Init));
        for object in [
            metadata("ip-masq-agent", "10", false),
            metadata("ip-masq-agent-gpu", "6", true),
        ] {
            w.note(Event::InitApply(object));
        }
        assert_eq!(w.tracker.store.len(), 2, "the last whole list meanwhile");
        assert!(w.note(Event::InitDone));
        assert!(w.tracker.stale().is_empty());
        let (base, pools) = w.tracker.complete().unwrap();
        assert!(
            !publish_listing(&feed, base, pools),
            "same texts: no change"
        );

        assert!(w.note(Event::Delete(metadata("ip-masq-agent-gpu", "6", true))));
        let (_, pools) = w.tracker.complete().unwrap();
        assert!(pools.is_empty(), "a deleted pool is gone");
        assert!(
            w.note(Event::Apply(metadata("ip-masq-agent-x", "30", true))),
            "a new pool"
        );
        assert_eq!(w.tracker.stale(), ["ip-masq-agent-x"]);
        assert!(
            w.note(Event::Apply(metadata("ip-masq-agent-x", "31", false))),
            "the annotation removed: no longer a pool"
        );
        assert!(w.tracker.stale().is_empty());
        assert_eq!(w.tracker.store.len(), 1, "only the base");
    }
}
