//! The taint `node.ipmasq.io/agent-not-ready` on the agent's own Node (`--node-taint`): pods
//! are kept off a node until its masquerade rules are in, and kept off again when the agent
//! cannot enforce. The patch is a JSON patch that tests what it read (the taint list, or the
//! resource version when the Node has none), so another writer's taint is never lost; no other
//! taint and no other Node is touched.

use k8s_openapi::api::core::v1::{Node, Taint};
use std::time::Duration;

/// The taint's key. Its effect is `NoSchedule` when the agent puts it back; a taint of this key
/// with any effect (`NoExecute` at registration, to evict pods bound before the agent) is ours
/// to remove.
pub const TAINT_KEY: &str = "node.ipmasq.io/agent-not-ready";
/// The effect the agent puts back.
pub const TAINT_EFFECT: &str = "NoSchedule";
/// How many times a patch whose test failed (another writer came between the read and the
/// patch) is read and tried again at once before waiting for the backoff.
const CONFLICT_ATTEMPTS: usize = 3;

/// What the agent wants of its Node's taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wish {
    /// The rules are in and were read back: pods may come.
    Untainted,
    /// The agent cannot enforce: no pod should start here.
    Tainted,
}

impl Wish {
    pub fn as_str(self) -> &'static str {
        match self {
            Wish::Untainted => "removed",
            Wish::Tainted => "in place",
        }
    }
}

fn is_ours(taint: &Taint) -> bool {
    taint.key == TAINT_KEY
}

/// The taint the agent puts back.
pub fn our_taint() -> Taint {
    Taint {
        key: TAINT_KEY.to_string(),
        effect: TAINT_EFFECT.to_string(),
        ..Taint::default()
    }
}

/// The JSON patch (RFC 6902) that makes `node` as `wish` says, testing what was read; None
/// when it already is.
pub fn patch_for(node: &Node, wish: Wish) -> Option<serde_json::Value> {
    let taints = node.spec.as_ref().and_then(|spec| spec.taints.as_ref());
    let has_ours = taints.is_some_and(|list| list.iter().any(is_ours));
    match (wish, taints) {
        (Wish::Untainted, _) if !has_ours => None,
        (Wish::Tainted, _) if has_ours => None,
        (Wish::Untainted, Some(list)) => {
            let rest: Vec<&Taint> = list.iter().filter(|t| !is_ours(t)).collect();
            let change = if rest.is_empty() {
                serde_json::json!({"op": "remove", "path": "/spec/taints"})
            } else {
                serde_json::json!({"op": "replace", "path": "/spec/taints", "value": rest})
            };
            Some(serde_json::json!([
                {"op": "test", "path": "/spec/taints", "value": list},
                change,
            ]))
        }
        (Wish::Tainted, Some(list)) => {
            let mut with_ours = list.clone();
            with_ours.push(our_taint());
            Some(serde_json::json!([
                {"op": "test", "path": "/spec/taints", "value": list},
                {"op": "replace", "path": "/spec/taints", "value": with_ours},
            ]))
        }
        // No list at all: an `add` would replace one that came meanwhile, so the test is of
        // the whole Node's version.
        (Wish::Tainted, None) => Some(serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": node.metadata.resource_version.clone().unwrap_or_default()},
            {"op": "add", "path": "/spec/taints", "value": [our_taint()]},
        ])),
        (Wish::Untainted, None) => None,
    }
}

/// Why the taint could not be made as wished.
#[derive(Debug, thiserror::Error)]
pub enum TaintError {
    #[error("cannot read Node {node}: {source}")]
    Read {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot patch the taint {TAINT_KEY} of Node {node}: {source}")]
    Patch {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("another writer changed Node {node}'s taints between each of {CONFLICT_ATTEMPTS} reads and patches")]
    Contended { node: String },
    #[error("the API server did not answer within {}s: {what}", after.as_secs())]
    NoAnswer { what: String, after: Duration },
}

/// What a converge did.
#[derive(Debug, PartialEq, Eq)]
pub enum Converged {
    /// The Node already was as wished: nothing written.
    Already,
    /// One patch made it so.
    Patched,
}

async fn answered<T>(
    what: impl FnOnce() -> String,
    request: impl std::future::Future<Output = Result<T, TaintError>>,
) -> Result<T, TaintError> {
    match tokio::time::timeout(super::REQUEST_TIMEOUT, request).await {
        Ok(result) => result,
        Err(_) => Err(TaintError::NoAnswer {
            what: what(),
            after: super::REQUEST_TIMEOUT,
        }),
    }
}

/// A failed test of a JSON patch: the API server answers 422 (or 409 on a version conflict).
fn test_failed(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 422 || status.code == 409)
}

/// Reads `node` and patches its taint as `wish` says, reading again when another writer came
/// between (the test failed), [`CONFLICT_ATTEMPTS`] times at most. Every request is bounded.
pub async fn converge(
    client: &kube::Client,
    node: &str,
    wish: Wish,
) -> Result<Converged, TaintError> {
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    for _ in 0..CONFLICT_ATTEMPTS {
        let read = answered(|| format!("reading Node {node}"), async {
            nodes.get(node).await.map_err(|source| TaintError::Read {
                node: node.to_string(),
                source,
            })
        })
        .await?;
        let Some(patch) = patch_for(&read, wish) else {
            return Ok(Converged::Already);
        };
        let patched = answered(|| format!("patching Node {node}'s taints"), async {
            Ok(client
                .request::<Node>(json_patch_request(node, &patch))
                .await)
        })
        .await?;
        match patched {
            Ok(_) => return Ok(Converged::Patched),
            Err(err) if test_failed(&err) => continue,
            Err(source) => {
                return Err(TaintError::Patch {
                    node: node.to_string(),
                    source,
                })
            }
        }
    }
    Err(TaintError::Contended {
        node: node.to_string(),
    })
}

/// What the kubelet's graceful node shutdown says in the Node's `Ready` condition (status
/// False) from the moment it sees the host shutting down, before it stops the node's pods.
pub const KUBELET_SHUTTING_DOWN: &str = "node is shutting down";

/// Whether `node`'s kubelet says the host is shutting down (see [`KUBELET_SHUTTING_DOWN`]).
pub fn shutting_down(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|list| {
        list.iter().any(|c| {
            c.type_ == "Ready"
                && c.status != "True"
                && c.message
                    .as_deref()
                    .is_some_and(|m| m.contains(KUBELET_SHUTTING_DOWN))
        })
    })
}

/// Reads `node` (one bounded request) and says whether its host is shutting down.
pub async fn read_shutting_down(client: &kube::Client, node: &str) -> Result<bool, TaintError> {
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let read = answered(|| format!("reading Node {node}"), async {
        nodes.get(node).await.map_err(|source| TaintError::Read {
            node: node.to_string(),
            source,
        })
    })
    .await?;
    Ok(shutting_down(&read))
}

/// The request that applies the JSON patch `ops` to Node `node` (kube's typed patch needs a
/// JSON-patch crate for this one request; the request is written here instead).
fn json_patch_request(node: &str, ops: &serde_json::Value) -> http::Request<Vec<u8>> {
    http::Request::patch(format!("/api/v1/nodes/{node}"))
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .header(http::header::ACCEPT, "application/json")
        .body(ops.to_string().into_bytes())
        .expect("a request of a valid path and headers")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;

    fn node(taints: Option<Vec<Taint>>) -> Node {
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some("node-a".into()),
                resource_version: Some("42".into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    #[test]
    fn removing_ours_keeps_every_other_taint_and_tests_the_list_read() {
        let kubelet = taint("node.kubernetes.io/not-ready", "NoSchedule");
        let list = vec![kubelet.clone(), taint(TAINT_KEY, "NoExecute")];
        let patch = patch_for(&node(Some(list.clone())), Wish::Untainted).expect("a patch");
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/spec/taints", "value": list},
                {"op": "replace", "path": "/spec/taints", "value": [kubelet]},
            ])
        );
        // Ours alone: the list goes.
        let patch = patch_for(
            &node(Some(vec![taint(TAINT_KEY, "NoSchedule")])),
            Wish::Untainted,
        )
        .expect("a patch");
        assert_eq!(
            patch[1],
            serde_json::json!({"op": "remove", "path": "/spec/taints"})
        );
        assert_eq!(patch_for(&node(None), Wish::Untainted), None);
        assert_eq!(patch_for(&node(Some(vec![kubelet])), Wish::Untainted), None);
    }

    #[test]
    fn putting_ours_back_adds_it_once_and_tests_what_was_read() {
        let other = taint("example.com/gpu", "NoSchedule");
        let patch = patch_for(&node(Some(vec![other.clone()])), Wish::Tainted).expect("a patch");
        assert_eq!(patch[0]["value"], serde_json::json!([other]));
        assert_eq!(
            patch[1]["value"],
            serde_json::json!([other, {"key": TAINT_KEY, "effect": "NoSchedule"}])
        );
        // No list: the Node's version is what is tested.
        let patch = patch_for(&node(None), Wish::Tainted).expect("a patch");
        assert_eq!(
            patch[0],
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
        );
        assert_eq!(patch[1]["op"], "add");
        // Already there, whatever its effect: nothing to write.
        assert_eq!(
            patch_for(
                &node(Some(vec![taint(TAINT_KEY, "NoExecute")])),
                Wish::Tainted
            ),
            None
        );
    }

    #[test]
    fn every_patch_is_a_list_of_operations_with_a_test_first() {
        for (taints, wish) in [
            (None, Wish::Tainted),
            (Some(vec![taint("a", "NoSchedule")]), Wish::Tainted),
            (Some(vec![taint(TAINT_KEY, "NoSchedule")]), Wish::Untainted),
            (
                Some(vec![
                    taint("a", "NoSchedule"),
                    taint(TAINT_KEY, "NoSchedule"),
                ]),
                Wish::Untainted,
            ),
        ] {
            let patch = patch_for(&node(taints), wish).expect("a patch");
            let ops = patch.as_array().expect("a list");
            assert_eq!(ops.len(), 2, "{patch}");
            assert_eq!(ops[0]["op"], "test", "{patch}");
            let request = json_patch_request("node-a", &patch);
            assert_eq!(request.uri(), "/api/v1/nodes/node-a");
            assert_eq!(
                request.headers()[http::header::CONTENT_TYPE],
                "application/json-patch+json"
            );
        }
    }

    fn with_ready(status: &str, message: Option<&str>) -> Node {
        Node {
            status: Some(k8s_openapi::api::core::v1::NodeStatus {
                conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    message: message.map(str::to_string),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..node(None)
        }
    }

    #[test]
    fn only_the_kubelets_shutdown_message_on_a_ready_not_true_is_a_shutdown() {
        assert!(shutting_down(&with_ready(
            "False",
            Some("container runtime is down, node is shutting down")
        )));
        assert!(!shutting_down(&with_ready(
            "True",
            Some("node is shutting down")
        )));
        assert!(!shutting_down(&with_ready(
            "False",
            Some("PLEG is not healthy")
        )));
        assert!(!shutting_down(&with_ready("False", None)));
        assert!(!shutting_down(&node(None)));
    }
}
