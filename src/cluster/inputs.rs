//! The API-mode inputs besides the ConfigMaps ([`super::configmap`]): the agent's own Node
//! (its labels select the node pools; a metadata-only watch with a field selector on its name)
//! and GKE's EgressNATPolicy objects (`networking.gke.io/v1`, cluster-scoped, through kube's
//! dynamic API). Each watcher publishes to the same feed once its first list is complete; a
//! `410 Gone` relists. A failed list or watch waits with [`super::backoff::ApiBackoff`] (1 s
//! doubling, with jitter, to 30 s, or to 5 minutes after a 404; back
//! to 1 s only after a healthy minute). A CRD that is not served (404) counts as listed with
//! no policy, said once in the log, and is looked at again on that slow schedule: a CRD
//! installed later is listed, and its policies applied, within about 5 minutes.

use super::configmap::{
    answers_again, lock, trouble, ConfigMapData, ConfigMapFeed, ConfigMapRef, NodeLabels, PoolData,
};
use crate::config::composed::PolicyText;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use tracing::{debug, info};

/// The version of GKE's API group the agent reads.
pub const EGRESS_NAT_VERSION: &str = "v1";
/// The plural (resource) name of the CRD `egressnatpolicies.networking.gke.io`.
pub const EGRESS_NAT_PLURAL: &str = "egressnatpolicies";

/// GKE's EgressNATPolicy as a dynamic resource.
fn egress_nat_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            crate::config::egress_nat::API_GROUP,
            EGRESS_NAT_VERSION,
            crate::config::egress_nat::KIND,
        ),
        EGRESS_NAT_PLURAL,
    )
}

/// The policy's text as the source keeps it: its type, name and `spec` only (not its
/// metadata's churn), as JSON.
pub fn policy_text(object: &DynamicObject) -> PolicyText {
    let name = object.metadata.name.clone().unwrap_or_default();
    let text = serde_json::json!({
        "apiVersion": format!("{}/{EGRESS_NAT_VERSION}", crate::config::egress_nat::API_GROUP),
        "kind": crate::config::egress_nat::KIND,
        "metadata": {"name": name},
        "spec": object.data.get("spec").cloned().unwrap_or(serde_json::Value::Null),
    })
    .to_string();
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

/// Publishes the policies of a completed list; true when they changed.
pub fn publish_policies(feed: &ConfigMapFeed, policies: BTreeMap<String, PolicyText>) -> bool {
    let mut state = lock(feed);
    answers_again(&mut state, "the EgressNATPolicies");
    let changed = state.policies.as_ref() != Some(&policies);
    state.policies = Some(policies);
    changed
}

/// Publishes one policy's change (None: deleted) once listed; true when it changed.
fn publish_policy(feed: &ConfigMapFeed, name: &str, policy: Option<PolicyText>) -> bool {
    let mut state = lock(feed);
    let Some(policies) = state.policies.as_mut() else {
        return false;
    };
    match policy {
        Some(policy) => policies
            .insert(name.to_string(), policy.clone())
            .is_none_or(|before| before != policy),
        None => policies.remove(name).is_some(),
    }
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

/// Watches the Node `name` (metadata only: its labels) until the runtime ends; `wake` after
/// each change of its labels.
pub async fn watch_node(
    client: kube::Client,
    name: String,
    feed: ConfigMapFeed,
    wake: impl Fn() + Send,
) {
    let api: kube::Api<kube::core::PartialObjectMeta<Node>> = kube::Api::all(client);
    let config = super::watcher_config().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api, config));
    let mut backoff = super::backoff::ApiBackoff::default();
    let mut listing = None;
    while let Some(event) = events.next().await {
        // A Node registered again (a new uid, the same labels) asks for a pass too: the mirror
        // writes its condition onto the new object.
        let mut uid_changed = false;
        let node = match event {
            Ok(Event::Init) => {
                listing = None;
                continue;
            }
            Ok(Event::InitApply(object)) => {
                listing = Some((labels_of(&object.metadata), object.metadata.uid));
                continue;
            }
            Ok(Event::InitDone) => match listing.take() {
                Some((labels, uid)) => {
                    uid_changed = publish_node_uid(&feed, uid);
                    labels
                }
                // A relist without the Node (deleted while the watch was down) keeps the
                // labels it had, as a deletion does.
                None if matches!(lock(&feed).node, Some(NodeLabels::Labels(_))) => {
                    info!(node = %name, "the Node is gone; its last labels keep selecting the node pools until it is registered again");
                    continue;
                }
                None => {
                    info!(node = %name, "no Node of this name: no node pool applies until it exists (see --node-name)");
                    NodeLabels::NotFound
                }
            },
            Ok(Event::Apply(object)) => {
                uid_changed = publish_node_uid(&feed, object.metadata.uid.clone());
                labels_of(&object.metadata)
            }
            Ok(Event::Delete(_)) => {
                // A Node deleted (and usually registered again by its kubelet) changes no
                // rule: the base alone for a moment would be a partial config.
                info!(node = %name, "the Node was deleted; its last labels keep selecting the node pools until it is registered again");
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
        debug!(node = %name, labels = ?node.labels(), "the Node's labels");
        if publish_node(&feed, node) || uid_changed {
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

/// Watches every EgressNATPolicy until the runtime ends; `wake` after each change. While the
/// CRD is not served the policies are "listed, none" (said once), and the watcher retries.
pub async fn watch_policies(client: kube::Client, feed: ConfigMapFeed, wake: impl Fn() + Send) {
    let resource = egress_nat_resource();
    let api: kube::Api<DynamicObject> = kube::Api::all_with(client, &resource);
    let mut events = std::pin::pin!(watcher::watcher(api, super::watcher_config()));
    let mut backoff = super::backoff::ApiBackoff::default();
    let mut listing = BTreeMap::new();
    let mut said_not_served = false;
    while let Some(event) = events.next().await {
        let changed = match event {
            Ok(Event::Init) => {
                listing = BTreeMap::new();
                continue;
            }
            Ok(Event::InitApply(object)) => {
                let policy = policy_text(&object);
                listing.insert(policy.name.clone(), policy);
                continue;
            }
            Ok(Event::InitDone) => {
                if said_not_served {
                    info!(
                        policies = listing.len(),
                        "the EgressNATPolicy CRD is served now: its policies apply"
                    );
                    said_not_served = false;
                }
                publish_policies(&feed, std::mem::take(&mut listing))
            }
            Ok(Event::Apply(object)) => {
                let policy = policy_text(&object);
                let name = policy.name.clone();
                publish_policy(&feed, &name, Some(policy))
            }
            Ok(Event::Delete(object)) => {
                publish_policy(&feed, &object.metadata.name.unwrap_or_default(), None)
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                info!("the watch's resource version has expired (410 Gone): listing the EgressNATPolicies again");
                continue;
            }
            Err(err) if not_served(&err) => {
                if !said_not_served {
                    info!(crd = %format!("{EGRESS_NAT_PLURAL}.{}", crate::config::egress_nat::API_GROUP), "the EgressNATPolicy CRD is not served: no policy applies (looking again with a backoff: 1 s doubling to 5 minutes apart)");
                    said_not_served = true;
                }
                let changed = publish_policies(&feed, BTreeMap::new());
                if changed {
                    wake();
                }
                backoff.wait(super::backoff::Failure::Answered).await;
                continue;
            }
            Err(err) => {
                trouble(&feed, "the EgressNATPolicies", err.to_string());
                backoff
                    .wait(super::backoff::Failure::of_watcher(&err))
                    .await;
                continue;
            }
        };
        if changed {
            wake();
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
    for name in wanted {
        let object = super::get_at(&configmaps, &name, "0")
            .await
            .map_err(|err| format!("configmap {}/{name}: {err}", target.namespace))?;
        let Some(object) = object else { continue };
        if name == target.name {
            base = Some(object);
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
    let policies_api: kube::Api<DynamicObject> =
        kube::Api::all_with(client, &egress_nat_resource());
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
        Err(err) => return Err(format!("{EGRESS_NAT_PLURAL}: {err}")),
    };
    super::configmap::publish_listing(feed, ConfigMapData::of(target, base.as_ref()), pools);
    publish_node(feed, node);
    publish_policies(feed, policies);
    Ok(())
}
