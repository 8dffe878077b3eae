//! API mode with `--snat-log`: the Pods of this node, watched (field selector
//! `spec.nodeName`: one watch per node, only its own pods) into the SNAT log's
//! time-indexed directory (`crate::snat::pods`). Nothing of a Pod is kept but its namespace,
//! name, uid and addresses; each is decoded slim (the list's answer whole, then each watch
//! event) and dropped once the directory has it. A pod on the host network, or one that has
//! finished, holds no address of its own.

use crate::snat::pods::{PodIdentity, SharedPods};
use futures_util::StreamExt;
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;
use std::collections::HashSet;
use std::net::IpAddr;
use tracing::{debug, info, warn};

/// A Pod as the watch decodes it: the few fields the log needs, every other field of the
/// API's answer skipped unread (a Pod's spec, its managedFields and conditions would be
/// decoded, allocated and dropped for each of a node's pods at every list).
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "PodFields")]
pub struct Pod {
    metadata: kube::api::ObjectMeta,
    host_network: bool,
    phase: Option<String>,
    addresses: Vec<String>,
}

#[derive(Deserialize)]
struct PodFields {
    metadata: MetaFields,
    #[serde(default)]
    spec: Option<SpecFields>,
    #[serde(default)]
    status: Option<StatusFields>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecFields {
    host_network: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusFields {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(rename = "podIPs")]
    pod_ips: Option<Vec<PodIpField>>,
}

#[derive(Deserialize)]
struct PodIpField {
    ip: String,
}

impl From<PodFields> for Pod {
    fn from(fields: PodFields) -> Pod {
        let status = fields.status;
        let mut addresses: Vec<String> = Vec::new();
        let phase = status.as_ref().and_then(|s| s.phase.clone());
        if let Some(status) = status {
            addresses.extend(
                status
                    .pod_ips
                    .unwrap_or_default()
                    .into_iter()
                    .map(|ip| ip.ip),
            );
            if addresses.is_empty() {
                addresses.extend(status.pod_ip);
            }
        }
        Pod {
            metadata: kube::api::ObjectMeta {
                name: fields.metadata.name,
                namespace: fields.metadata.namespace,
                uid: fields.metadata.uid,
                resource_version: fields.metadata.resource_version,
                ..Default::default()
            },
            host_network: fields.spec.and_then(|s| s.host_network).unwrap_or(false),
            phase,
            addresses,
        }
    }
}

impl kube::Resource for Pod {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }

    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }

    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

/// Now, in the log's microseconds.
fn now_micros() -> crate::snat::line::Micros {
    crate::snat::line::micros_of(std::time::SystemTime::now())
}

/// The pod's identity and the addresses it holds now, as the API says them.
fn addresses_of(pod: &Pod) -> Option<(PodIdentity, Vec<IpAddr>)> {
    let identity = PodIdentity {
        namespace: pod.metadata.namespace.clone()?,
        name: pod.metadata.name.clone()?,
        uid: pod.metadata.uid.clone()?,
    };
    let finished = pod
        .phase
        .as_deref()
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    if pod.host_network || finished {
        return Some((identity, Vec::new()));
    }
    let addresses = pod
        .addresses
        .iter()
        .filter_map(|ip| ip.parse::<IpAddr>().ok())
        .map(|a| a.to_canonical())
        .collect();
    Some((identity, addresses))
}

fn apply(directory: &SharedPods, pod: &Pod, at: crate::snat::line::Micros) -> Option<String> {
    let (identity, addresses) = addresses_of(pod)?;
    let uid = identity.uid.clone();
    debug!(pod = %identity.qualified(), uid = %uid, addresses = ?addresses, "pod addresses");
    directory
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .holds(identity, addresses, at);
    Some(uid)
}

/// Watches this node's Pods into `directory` until the runtime ends.
pub async fn watch_pods(client: kube::Client, node: String, directory: SharedPods) {
    let api: kube::Api<Pod> = kube::Api::all(client);
    let config = super::watcher_config().fields(&format!("spec.nodeName={node}"));
    let mut events = std::pin::pin!(watcher::watcher(api, config));
    let mut backoff = super::backoff::ApiBackoff::default();
    let mut listing: Option<HashSet<String>> = None;
    let mut listed_once = false;
    let mut in_trouble = false;
    while let Some(event) = events.next().await {
        let at = now_micros();
        match event {
            Ok(Event::Init) => listing = Some(HashSet::new()),
            Ok(Event::InitApply(pod)) => {
                if let (Some(uid), Some(listing)) = (apply(&directory, &pod, at), &mut listing) {
                    listing.insert(uid);
                }
            }
            Ok(Event::InitDone) => {
                let mut pods = directory.write().unwrap_or_else(|e| e.into_inner());
                if let Some(live) = listing.take() {
                    pods.keep_only(&live, at);
                }
                if !std::mem::replace(&mut listed_once, true) || in_trouble {
                    info!(node = %node, pods = pods.live_pods(), "the SNAT log names pods: this node's pods listed, then watched");
                }
                in_trouble = false;
                drop(pods);
                // The list's answer, decoded and dropped, stays in glibc's arenas otherwise.
                crate::netlink::image::release_freed_heap();
            }
            Ok(Event::Apply(pod)) => {
                apply(&directory, &pod, at);
            }
            Ok(Event::Delete(pod)) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    debug!(pod = ?pod.metadata.name, uid, "pod gone");
                    directory
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .gone(uid, at);
                }
            }
            Err(err) if super::silent_watch(&err) => super::said_silent("the node's pods"),
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                debug!("the pod watch's resource version has expired (410 Gone): listing again");
            }
            Err(err) => {
                if !std::mem::replace(&mut in_trouble, true) {
                    warn!(node = %node, error = %err, "cannot watch this node's pods: SNAT log lines name a pod only as far as the last list or watch said (retrying with backoff)");
                }
                backoff
                    .wait(super::backoff::Failure::of_watcher(&err))
                    .await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_pods_addresses_are_its_pod_ips_unless_on_the_host_network_or_finished() {
        let meta = serde_json::json!({"namespace": "web", "name": "api-0", "uid": "u1"});
        let running = pod(serde_json::json!({
            "metadata": meta,
            "status": {"phase": "Running", "podIP": "192.168.1.5",
                       "podIPs": [{"ip": "192.168.1.5"}, {"ip": "fd00::5"}]}
        }));
        let (identity, addresses) = addresses_of(&running).unwrap();
        assert_eq!(identity.qualified(), "web/api-0");
        assert_eq!(
            addresses,
            vec![
                "192.168.1.5".parse::<IpAddr>().unwrap(),
                "fd00::5".parse().unwrap()
            ]
        );
        let old_server = pod(serde_json::json!({
            "metadata": meta, "status": {"podIP": "192.168.1.6"}
        }));
        assert_eq!(addresses_of(&old_server).unwrap().1.len(), 1);
        let host = pod(serde_json::json!({
            "metadata": meta, "spec": {"hostNetwork": true, "containers": []},
            "status": {"podIP": "10.0.0.1"}
        }));
        assert!(addresses_of(&host).unwrap().1.is_empty());
        let done = pod(serde_json::json!({
            "metadata": meta, "status": {"phase": "Succeeded", "podIP": "192.168.1.5"}
        }));
        assert!(addresses_of(&done).unwrap().1.is_empty());
        let nameless = pod(serde_json::json!({"metadata": {"uid": "u2"}}));
        assert!(addresses_of(&nameless).is_none());
    }
}
