//! The API-mode inputs besides the ConfigMaps ([`super::configmap`]): the agent's own Node
//! (its labels select the node pools; a metadata-only watch with a field selector on its name)
//! and GKE's EgressNATPolicy objects (`networking.gke.io/v1`, cluster-scoped, each `spec`
//! kept as the API's text). Each is kube-runtime's watcher into a reflector's `Store`: what an
//! input publishes is read from its store once the store is ready (its first list whole), and
//! is news when it differs from what was published. A `410 Gone` relists (the store swaps in
//! the new list whole). A failed list or watch waits with [`super::backoff::ApiBackoff`] (1 s
//! doubling, with jitter, to 30 s, or to 5 minutes after a 404; back to 1 s only after a
//! healthy minute). A CRD that is not served (404) counts as listed with no policy, said once
//! in the log, and is looked at again on that slow schedule: a CRD installed later is listed,
//! and its policies applied, within about 5 minutes. A policy list longer than the agent's
//! memory allows is cut off as it arrives ([`super::answer_cap`]), refused with the reason and
//! looked at again on the same slow schedule.

use super::configmap::{
    answers_again, lock, trouble, ConfigMapData, ConfigMapFeed, ConfigMapRef, NodeLabels, PoolData,
};
use crate::config::composed::PolicyText;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{ListParams, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use std::collections::BTreeMap;
use tracing::{debug, info};

/// The version of GKE's API group the agent reads.
pub const EGRESS_NAT_VERSION: &str = "v1";
/// The plural (resource) name of the CRD `egressnatpolicies.networking.gke.io`.
pub const EGRESS_NAT_PLURAL: &str = "egressnatpolicies";

/// GKE's EgressNATPolicy as the agent reads it: its name and its `spec` as the API's JSON
/// text, undecoded (a policy's destinations can run to megabytes; a decoded tree of them would
/// take about ten times that). Its other fields (status, the rest of the metadata's churn)
/// are not the agent's.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct EgressNatPolicyObject {
    pub metadata: kube::api::ObjectMeta,
    #[serde(default)]
    pub spec: Option<Box<serde_json::value::RawValue>>,
}

impl kube::Resource for EgressNatPolicyObject {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        crate::config::egress_nat::KIND.into()
    }

    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        crate::config::egress_nat::API_GROUP.into()
    }

    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        EGRESS_NAT_VERSION.into()
    }

    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        EGRESS_NAT_PLURAL.into()
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

/// The policy's text as the source keeps it: its type, name and `spec` only (not its
/// metadata's churn), as JSON.
pub fn policy_text(object: &EgressNatPolicyObject) -> PolicyText {
    let name = object.metadata.name.clone().unwrap_or_default();
    let spec = object.spec.as_deref().map_or("null", |raw| raw.get());
    let text = format!(
        r#"{{"apiVersion":"{}/{EGRESS_NAT_VERSION}","kind":"{}","metadata":{{"name":{}}},"spec":{spec}}}"#,
        crate::config::egress_nat::API_GROUP,
        crate::config::egress_nat::KIND,
        serde_json::Value::String(name.clone()),
    );
    PolicyText { name, text }
}

/// Publishes the Node's labels; true when they changed (or the first list completed).
pub fn publish_node(feed: &ConfigMapFeed, node: NodeLabels) -> bool {
    let mut state = lock(feed);
    answers_again(&mut state, "the Node's labels");
    let changed = state.node.as_ref() != Some(&node);
    state.node = Some(node);
    changed
}

/// Publishes the Node's uid (None: not known); true when it changed from a known one (the
/// Node was registered again).
pub fn publish_node_uid(feed: &ConfigMapFeed, uid: Option<String>) -> bool {
    let mut state = lock(feed);
    let again = state.node_uid.is_some() && uid.is_some() && state.node_uid != uid;
    if uid.is_some() {
        state.node_uid = uid;
    }
    again
}

/// Publishes the policies of the store (or of a one-shot list); true when they changed.
pub fn publish_policies(feed: &ConfigMapFeed, policies: BTreeMap<String, PolicyText>) -> bool {
    let mut state = lock(feed);
    answers_again(&mut state, "the EgressNATPolicies");
    let changed = state.policies.as_ref() != Some(&policies);
    state.policies = Some(policies);
    changed
}

fn labels_of(metadata: &kube::api::ObjectMeta) -> NodeLabels {
    NodeLabels::Labels(
        metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
    )
}

/// What the Node's store says once an event settled in it (see [`super::settles`]): its
/// labels and whether it was registered again; None when it holds no Node (deleted, or never
/// registered), which [`no_node`] judges.
fn node_of_store(
    store: &Store<PartialObjectMeta<Node>>,
    name: &str,
    feed: &ConfigMapFeed,
) -> Option<(NodeLabels, bool)> {
    let node = store.get(&ObjectRef::new(name))?;
    // A Node registered again (a new uid, the same labels) asks for a pass too: the mirror
    // writes its condition onto the new object.
    let registered_again = publish_node_uid(feed, node.metadata.uid.clone());
    Some((labels_of(&node.metadata), registered_again))
}

/// What to publish when the Node's store holds no Node: nothing while the last labels are
/// known (a Node deleted, and usually registered again by its kubelet, changes no rule: the
/// base alone for a moment would be a partial config), else "not found".
fn no_node(feed: &ConfigMapFeed, name: &str, deleted: bool) -> Option<NodeLabels> {
    if matches!(lock(feed).node, Some(NodeLabels::Labels(_))) {
        if deleted {
            info!(node = %name, "the Node was deleted; its last labels keep selecting the node pools until it is registered again");
        } else {
            info!(node = %name, "the Node is gone; its last labels keep selecting the node pools until it is registered again");
        }
        return None;
    }
    info!(node = %name, "no Node of this name: no node pool applies until it exists (see --node-name)");
    Some(NodeLabels::NotFound)
}

/// Watches the Node `name` (metadata only: its labels) into a kube-runtime store until the
/// runtime ends; `wake` after each change of its labels (or its uid: registered again).
pub async fn watch_node(
    client: kube::Client,
    name: String,
    feed: ConfigMapFeed,
    wake: impl Fn() + Send,
) {
    let api: kube::Api<PartialObjectMeta<Node>> = kube::Api::all(client);
    let config = super::watcher_config().fields(&format!("metadata.name={name}"));
    let (store, writer) = reflector::store();
    let events = watcher::watcher(api, config).modify(super::without_managed_fields);
    let mut events = std::pin::pin!(reflector::reflector(writer, events));
    let mut backoff = super::backoff::ApiBackoff::default();
    while let Some(event) = events.next().await {
        let deleted = match event {
            Ok(event) if super::settles(&event) => matches!(event, Event::Delete(_)),
            Ok(_) => continue,
            Err(err) if super::silent_watch(&err) => {
                super::said_silent("the Node's labels");
                continue;
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                info!(node = %name, "the watch's resource version has expired (410 Gone): listing the Node again");
                continue;
            }
            Err(err) => {
                trouble(&feed, "the Node's labels", err.to_string());
                backoff
                    .wait(super::backoff::Failure::of_watcher(&err))
                    .await;
                continue;
            }
        };
        let (node, registered_again) = match node_of_store(&store, &name, &feed) {
            Some(found) => found,
            None => match no_node(&feed, &name, deleted) {
                Some(node) => (node, false),
                None => continue,
            },
        };
        debug!(node = %name, labels = ?node.labels(), "the Node's labels");
        if publish_node(&feed, node) || registered_again {
            wake();
        }
    }
}

/// Whether a watcher's error is the API's 404: the resource is not served (no such CRD).
fn not_served(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// The policies a store holds, by name.
fn policies_of_store(store: &Store<EgressNatPolicyObject>) -> BTreeMap<String, PolicyText> {
    store
        .state()
        .iter()
        .map(|object| policy_text(object))
        .map(|policy| (policy.name.clone(), policy))
        .collect()
}

/// Why a failed list of the policies is not retried soon: its answer was cut off by the
/// client's cap ([`super::answer_cap`]), so the policies cannot fit the agent's memory.
fn cut_off_reason(err: &watcher::Error) -> Option<String> {
    super::answer_cap::cut_off(err).then(|| {
        "the EgressNATPolicies list is longer than this agent's memory limit allows one answer to be; refused before it is read, the rules in force kept: raise the container's memory limit, or make the policies shorter".to_string()
    })
}

/// How many bytes of policy text a store holds.
fn text_bytes(store: &Store<EgressNatPolicyObject>) -> u64 {
    store
        .state()
        .iter()
        .map(|object| {
            object
                .spec
                .as_deref()
                .map_or(0, |raw| raw.get().len() as u64)
        })
        .sum()
}

/// Watches every EgressNATPolicy into a kube-runtime store until the runtime ends; `wake`
/// after each change of what the store holds. While the CRD is not served the policies are
/// "listed, none" (said once), and the watcher retries. `cap` (bytes of text; None: no limit)
/// bounds the store (which has no bound of its own), as the client bounds one list's answer: a
/// store that holds more (listed, or grown through the watch) could not be admitted, so it is
/// dropped (with its watcher and connection) before its text is handed on, refused with the
/// reason, and listed again on the slow schedule.
pub async fn watch_policies(
    client: kube::Client,
    cap: Option<u64>,
    feed: ConfigMapFeed,
    wake: impl Fn() + Send,
) {
    let api: kube::Api<EgressNatPolicyObject> = kube::Api::all(client);
    let mut watch = PolicyWatch {
        cap,
        feed,
        wake,
        backoff: Default::default(),
        said_not_served: false,
    };
    loop {
        // A store, its watcher and its connection live in this block alone: one that outgrew
        // the cap is dropped before the wait below.
        let outgrown = {
            let (store, writer) = reflector::store();
            let events = watcher::watcher(api.clone(), super::watcher_config())
                .modify(super::without_managed_fields);
            let mut events = std::pin::pin!(reflector::reflector(writer, events));
            watch.take_in(&store, &mut events).await
        };
        if !outgrown {
            return;
        }
        watch.backoff.wait(super::backoff::Failure::Answered).await;
    }
}

/// The policy watcher's side of the feed: what it publishes to and what it remembers across
/// stores.
struct PolicyWatch<W> {
    cap: Option<u64>,
    feed: ConfigMapFeed,
    wake: W,
    backoff: super::backoff::ApiBackoff,
    said_not_served: bool,
}

impl<W: Fn()> PolicyWatch<W> {
    /// Takes in a watcher's events until it ends (false) or its store outgrows the cap (true),
    /// publishing what the store holds after each change.
    async fn take_in(
        &mut self,
        store: &Store<EgressNatPolicyObject>,
        events: &mut (impl futures_util::Stream<Item = watcher::Result<Event<EgressNatPolicyObject>>>
                  + Unpin),
    ) -> bool {
        while let Some(event) = events.next().await {
            match event {
                Ok(event) if super::settles(&event) => {
                    if self.outgrown(store) {
                        return true;
                    }
                    if self.said_not_served && matches!(event, Event::InitDone) {
                        info!(
                            policies = store.len(),
                            "the EgressNATPolicy CRD is served now: its policies apply"
                        );
                        self.said_not_served = false;
                    }
                    if publish_policies(&self.feed, policies_of_store(store)) {
                        (self.wake)();
                    }
                }
                Ok(_) => {}
                Err(err) => self.failed(&err).await,
            }
        }
        false
    }

    /// Whether the store holds more text than the cap (said, as the input's trouble).
    fn outgrown(&self, store: &Store<EgressNatPolicyObject>) -> bool {
        let bytes = text_bytes(store);
        let Some(cap) = self.cap.filter(|cap| bytes > *cap) else {
            return false;
        };
        trouble(&self.feed, "the EgressNATPolicies", format!("the {} EgressNATPolicies hold {bytes} bytes of text, more than this agent's memory limit allows ({cap} bytes at most); refused before they are read, the rules in force kept: raise the container's memory limit, or make the policies shorter", store.len()));
        true
    }

    /// What a failed list or watch means, and the wait after it.
    async fn failed(&mut self, err: &watcher::Error) {
        match err {
            err if super::silent_watch(err) => {
                super::said_silent("the EgressNATPolicies");
            }
            watcher::Error::WatchError(status) if status.code == 410 => {
                info!("the watch's resource version has expired (410 Gone): listing the EgressNATPolicies again");
            }
            err if not_served(err) => {
                if !self.said_not_served {
                    info!(crd = %format!("{EGRESS_NAT_PLURAL}.{}", crate::config::egress_nat::API_GROUP), "the EgressNATPolicy CRD is not served: no policy applies (looking again with a backoff: 1 s doubling to 5 minutes apart)");
                    self.said_not_served = true;
                }
                if publish_policies(&self.feed, BTreeMap::new()) {
                    (self.wake)();
                }
                self.backoff.wait(super::backoff::Failure::Answered).await;
            }
            err => match cut_off_reason(err) {
                Some(reason) => {
                    trouble(&self.feed, "the EgressNATPolicies", reason);
                    self.backoff.wait(super::backoff::Failure::Answered).await;
                }
                None => {
                    trouble(&self.feed, "the EgressNATPolicies", err.to_string());
                    self.backoff
                        .wait(super::backoff::Failure::of_watcher(err))
                        .await;
                }
            },
        }
    }
}

/// One read of every input (for `--once` and `--dry-run`), published to `feed` as first lists
/// would be: the ConfigMaps of `target`'s namespace, the Node `node_name`'s labels, the
/// EgressNATPolicies (none when the CRD is not served). An error says which read failed.
pub async fn fetch_into(
    client: kube::Client,
    target: &ConfigMapRef,
    node_name: Option<&str>,
    feed: &ConfigMapFeed,
) -> Result<(), String> {
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &target.namespace);
    // As the watcher does: the namespace's ConfigMaps by their metadata, then a GET of the
    // base and of each pool (a 404 since the list: deleted).
    let mut wanted = Vec::new();
    let mut params = ListParams::default().match_any();
    loop {
        let page = super::within(configmaps.list_metadata(&params))
            .await
            .map_err(|err| format!("configmaps of {}: {err}", target.namespace))?;
        for object in page.items {
            if super::configmap::is_base_or_pool(target, &object.metadata) {
                wanted.push(object.metadata.name.unwrap_or_default());
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let mut base = None;
    let mut pools = BTreeMap::new();
    let mut next = None;
    for name in wanted {
        let object = super::get_at(&configmaps, &name, "0")
            .await
            .map_err(|err| format!("configmap {}/{name}: {err}", target.namespace))?;
        let Some(object) = object else { continue };
        if name == target.name {
            base = Some(object);
        } else if name == target.next_name() {
            next = Some(super::configmap::NextData::of(&object));
        } else if let Some(pool) = PoolData::of(&object) {
            pools.insert(name, pool);
        }
    }
    let node = match node_name {
        None => NodeLabels::Unnamed,
        Some(name) => {
            let nodes: kube::Api<Node> = kube::Api::all(client.clone());
            let any = kube::api::GetParams::any();
            match super::within(nodes.get_metadata_opt_with(name, &any))
                .await
                .map_err(|err| format!("node {name}: {err}"))?
            {
                Some(node) => labels_of(&node.metadata),
                None => NodeLabels::NotFound,
            }
        }
    };
    let policies_api: kube::Api<EgressNatPolicyObject> = kube::Api::all(client);
    let policies = match super::within(policies_api.list(&ListParams::default().match_any())).await
    {
        Ok(list) => list
            .items
            .iter()
            .map(policy_text)
            .map(|p| (p.name.clone(), p))
            .collect(),
        Err(super::CallError::Api(kube::Error::Api(status))) if status.code == 404 => {
            BTreeMap::new()
        }
        Err(super::CallError::Api(err)) if super::answer_cap::cut_off(&err) => {
            return Err(format!("{EGRESS_NAT_PLURAL}: the list is longer than this agent's memory limit allows one answer to be: raise the container's memory limit, or make the policies shorter"));
        }
        Err(err) => return Err(format!("{EGRESS_NAT_PLURAL}: {err}")),
    };
    super::configmap::publish_listing_and_next(
        feed,
        ConfigMapData::of(target, base.as_ref()),
        pools,
        next,
    );
    publish_node(feed, node);
    publish_policies(feed, policies);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"{"apiVersion":"networking.gke.io/v1","kind":"EgressNATPolicy","metadata":{"name":"keep \"x\"","resourceVersion":"7","managedFields":[{"manager":"kubectl"}]},"spec":{"action":"NoSNAT","destinations":[{"cidr":"100.64.0.0/10"}]}}"#;

    #[test]
    fn a_policy_keeps_its_spec_as_the_apis_text_from_a_list_and_from_a_watch() {
        let list = format!(
            r#"{{"apiVersion":"networking.gke.io/v1","kind":"EgressNATPolicyList","metadata":{{"resourceVersion":"9"}},"items":[{POLICY}]}}"#
        );
        let listed: kube::core::ObjectList<EgressNatPolicyObject> =
            serde_json::from_str(&list).unwrap();
        let event = format!(r#"{{"type":"ADDED","object":{POLICY}}}"#);
        let watched: kube::core::WatchEvent<EgressNatPolicyObject> =
            serde_json::from_slice(event.as_bytes()).unwrap();
        let kube::core::WatchEvent::Added(mut watched) = watched else {
            panic!("not an ADDED event");
        };
        super::super::without_managed_fields(&mut watched);
        assert_eq!(watched.metadata.managed_fields, None);
        for object in [&listed.items[0], &watched] {
            let policy = policy_text(object);
            assert_eq!(policy.name, "keep \"x\"");
            let text: serde_json::Value = serde_json::from_str(&policy.text).unwrap();
            assert_eq!(text["metadata"]["name"], "keep \"x\"");
            assert_eq!(text["spec"]["destinations"][0]["cidr"], "100.64.0.0/10");
            assert_eq!(text["kind"], "EgressNATPolicy");
            assert!(crate::config::egress_nat::read_policy_text(&policy.text).is_valid());
        }
        let no_spec: EgressNatPolicyObject =
            serde_json::from_str(r#"{"metadata":{"name":"bare"}}"#).unwrap();
        assert!(policy_text(&no_spec).text.ends_with(r#""spec":null}"#));
    }

    #[test]
    fn the_policies_published_are_what_the_store_holds_and_news_only_when_they_differ() {
        let mut writer = reflector::store::Writer::<EgressNatPolicyObject>::default();
        let store = writer.as_reader();
        let feed = super::super::configmap::feed_for(None);
        let policy: EgressNatPolicyObject = serde_json::from_str(POLICY).unwrap();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(policy.clone()));
        assert!(
            !super::super::is_ready(&store),
            "not before the list is whole"
        );
        writer.apply_watcher_event(&Event::InitDone);
        assert!(super::super::is_ready(&store));
        assert!(publish_policies(&feed, policies_of_store(&store)));
        writer.apply_watcher_event(&Event::Apply(policy.clone()));
        assert!(
            !publish_policies(&feed, policies_of_store(&store)),
            "the same policy again is no change"
        );
        writer.apply_watcher_event(&Event::Delete(policy));
        assert!(publish_policies(&feed, policies_of_store(&store)));
        assert_eq!(lock(&feed).policies.as_ref().map(BTreeMap::len), Some(0));
    }

    #[test]
    fn a_node_gone_from_its_store_keeps_its_last_labels() {
        let mut writer = reflector::store::Writer::<PartialObjectMeta<Node>>::default();
        let store = writer.as_reader();
        let feed = super::super::configmap::feed_for(Some("node-a"));
        writer.apply_watcher_event(&Event::InitDone);
        assert!(node_of_store(&store, "node-a", &feed).is_none());
        assert_eq!(no_node(&feed, "node-a", false), Some(NodeLabels::NotFound));
        let mut node = PartialObjectMeta::<Node>::default();
        node.metadata.name = Some("node-a".into());
        node.metadata.uid = Some("uid-1".into());
        node.metadata.labels = Some([("pool".to_string(), "gpu".to_string())].into());
        writer.apply_watcher_event(&Event::Apply(node.clone()));
        let (labels, again) = node_of_store(&store, "node-a", &feed).unwrap();
        assert!(!again);
        assert!(publish_node(&feed, labels));
        writer.apply_watcher_event(&Event::Delete(node.clone()));
        assert_eq!(no_node(&feed, "node-a", true), None, "the last labels stay");
        node.metadata.uid = Some("uid-2".into());
        writer.apply_watcher_event(&Event::Apply(node));
        let (labels, again) = node_of_store(&store, "node-a", &feed).unwrap();
        assert!(again, "registered again: a pass rewrites the condition");
        assert!(!publish_node(&feed, labels), "the same labels");
    }
}
