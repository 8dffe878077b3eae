//! `ipmasq fleet`'s second list: the agents' own pods (label-selected, one paginated list), so
//! a node whose agent is not running, restarting or not ready is called what it is, whatever
//! its condition says (only a live agent writes the condition: a crash-looping one leaves its
//! last word in place).

use super::fleet_list::{each_page, Listed};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A container that ended this recently is restarting, even while it runs again: longer than
/// the kubelet's longest CrashLoopBackOff wait (5 minutes), so a loop is always caught.
pub const RECENT_RESTART: Duration = Duration::from_secs(10 * 60);

/// One pod of a page of `GET /api/v1/namespaces/NS/pods`: only what fleet reads.
#[derive(Deserialize, Default)]
pub struct ListedPod {
    pub metadata: PodMeta,
    #[serde(default)]
    pub spec: PodSpec,
    #[serde(default)]
    pub status: PodStatus,
}

#[derive(Deserialize, Default)]
pub struct PodMeta {
    pub name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub conditions: Vec<PodCondition>,
    #[serde(default)]
    pub container_statuses: Vec<ContainerStatus>,
}

#[derive(Deserialize, Default)]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default)]
    pub restart_count: u32,
    #[serde(default)]
    pub state: ContainerState,
    #[serde(default)]
    pub last_state: ContainerState,
}

#[derive(Deserialize, Default)]
pub struct ContainerState {
    #[serde(default)]
    pub waiting: Option<StateDetail>,
    #[serde(default)]
    pub terminated: Option<StateDetail>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct StateDetail {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
}

/// How a node's agent is, by its pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentState {
    /// Running, ready, and no restart within [`RECENT_RESTART`].
    Running,
    /// Running but not ready (its `/readyz` fails).
    NotReady,
    /// Not running: pending, waiting (CrashLoopBackOff, ...), terminated, failed, or running
    /// again after a restart within [`RECENT_RESTART`].
    Down,
}

/// A node's agent pod as fleet judged it (`-o json`'s `agent`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentPod {
    pub pod: String,
    pub state: AgentState,
    pub phase: Option<String>,
    pub ready: bool,
    pub restarts: u32,
    /// Why it is not running or not ready, in words (empty when it runs).
    pub words: String,
}

/// When a restart happened, in words: `OOMKilled 2m ago`.
fn last_exit(detail: &StateDetail, now: Timestamp) -> Option<(String, Duration)> {
    let finished: Timestamp = detail.finished_at.as_deref()?.parse().ok()?;
    let ago = Duration::try_from(now.duration_since(finished)).unwrap_or_default();
    let reason = detail.reason.as_deref().unwrap_or("exited");
    Some((format!("{reason} {}s ago", ago.as_secs()), ago))
}

/// Judges one agent pod at `now` (the reader's clock, for the age of a restart).
pub fn judge(pod: &ListedPod, now: Timestamp) -> AgentPod {
    let status = &pod.status;
    let phase = status.phase.clone();
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let restarts = status
        .container_statuses
        .iter()
        .map(|c| c.restart_count)
        .sum();
    let waiting = status
        .container_statuses
        .iter()
        .find_map(|c| c.state.waiting.as_ref().or(c.state.terminated.as_ref()));
    let recent = status
        .container_statuses
        .iter()
        .filter_map(|c| c.last_state.terminated.as_ref())
        .filter_map(|t| last_exit(t, now))
        .find(|(_, ago)| *ago < RECENT_RESTART);
    let counted = |words: String| format!("{words}, {restarts} restarts");
    let (state, words) = if phase.as_deref() != Some("Running") {
        let why = waiting
            .and_then(|w| w.reason.clone())
            .or_else(|| phase.clone())
            .unwrap_or_else(|| "no status".into());
        (AgentState::Down, counted(format!("agent {why}")))
    } else if let Some(detail) = waiting {
        let why = detail.reason.clone().unwrap_or_else(|| "waiting".into());
        (AgentState::Down, counted(format!("agent {why}")))
    } else if let Some((exit, _)) = recent {
        (
            AgentState::Down,
            counted(format!("agent restarting: {exit}")),
        )
    } else if !ready {
        (AgentState::NotReady, "agent running, not ready".to_string())
    } else {
        (AgentState::Running, String::new())
    };
    AgentPod {
        pod: pod.metadata.name.clone(),
        state,
        phase,
        ready,
        restarts,
        words,
    }
}

/// The agent of each node: of several pods on one node (a rollout's old and new), the best.
pub fn by_node(pods: &[ListedPod], now: Timestamp) -> BTreeMap<String, AgentPod> {
    let mut nodes: BTreeMap<String, AgentPod> = BTreeMap::new();
    for pod in pods {
        let Some(node) = pod.spec.node_name.clone() else {
            continue;
        };
        let judged = judge(pod, now);
        match nodes.get(&node) {
            Some(kept) if kept.state <= judged.state => {}
            _ => {
                nodes.insert(node, judged);
            }
        }
    }
    nodes
}

/// Where the agents' pods are looked for (`fleet --agent-namespace`, `--agent-selector`).
pub struct PodQuery<'a> {
    pub namespace: &'a str,
    pub selector: &'a str,
    pub page_size: u32,
}

/// Every agent pod, page by page (one list; a continue token the server let expire starts it
/// again, once).
pub async fn list(
    client: &kube::Client,
    query: &PodQuery<'_>,
) -> Result<Vec<ListedPod>, kube::Error> {
    let url = format!("/api/v1/namespaces/{}/pods", query.namespace);
    let mut pods = Vec::new();
    each_page::<ListedPod>(
        client,
        &url,
        query.page_size,
        Some(query.selector),
        |listed| match listed {
            Listed::Page(page) => pods.extend(page),
            Listed::Again => pods.clear(),
        },
    )
    .await?;
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> ListedPod {
        serde_json::from_value(json).expect("a listed pod")
    }

    fn now() -> Timestamp {
        "2026-11-28T10:00:00Z".parse().expect("a time")
    }

    #[test]
    fn a_crash_loop_a_recent_restart_and_an_unready_agent_are_each_named() {
        let looping = pod(serde_json::json!({
            "metadata": {"name": "ip-masq-agent-a"},
            "spec": {"nodeName": "a"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{"restartCount": 7,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "finishedAt": "2026-11-28T09:59:00Z"}}}]}
        }));
        let judged = judge(&looping, now());
        assert_eq!(judged.state, AgentState::Down);
        assert_eq!(judged.words, "agent CrashLoopBackOff, 7 restarts");
        let up_again = pod(serde_json::json!({
            "metadata": {"name": "b"}, "spec": {"nodeName": "b"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"restartCount": 3, "state": {"running": {}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "finishedAt": "2026-11-28T09:58:00Z"}}}]}
        }));
        let judged = judge(&up_again, now());
        assert_eq!(judged.state, AgentState::Down);
        assert_eq!(
            judged.words,
            "agent restarting: OOMKilled 120s ago, 3 restarts"
        );
        let long_ago = pod(serde_json::json!({
            "metadata": {"name": "c"}, "spec": {"nodeName": "c"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"restartCount": 1, "state": {"running": {}},
                    "lastState": {"terminated": {"reason": "Error", "finishedAt": "2026-11-28T08:00:00Z"}}}]}
        }));
        assert_eq!(judge(&long_ago, now()).state, AgentState::Running);
        let unready = pod(serde_json::json!({
            "metadata": {"name": "d"}, "spec": {"nodeName": "d"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{"restartCount": 0, "state": {"running": {}}}]}
        }));
        assert_eq!(judge(&unready, now()).state, AgentState::NotReady);
        let pending = pod(serde_json::json!({
            "metadata": {"name": "e"}, "spec": {"nodeName": "e"}, "status": {"phase": "Pending"}
        }));
        let judged = judge(&pending, now());
        assert_eq!(
            (judged.state, judged.words.as_str()),
            (AgentState::Down, "agent Pending, 0 restarts")
        );
    }

    #[test]
    fn of_two_pods_on_a_node_the_best_speaks_and_unscheduled_pods_are_skipped() {
        let running = pod(serde_json::json!({
            "metadata": {"name": "new"}, "spec": {"nodeName": "a"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }));
        let old = pod(serde_json::json!({
            "metadata": {"name": "old"}, "spec": {"nodeName": "a"}, "status": {"phase": "Failed"}
        }));
        let nowhere =
            pod(serde_json::json!({"metadata": {"name": "x"}, "status": {"phase": "Pending"}}));
        let nodes = by_node(&[old, running, nowhere], now());
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes["a"].pod, "new");
        assert_eq!(nodes["a"].state, AgentState::Running);
    }
}
