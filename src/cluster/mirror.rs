//! The mirror: what the agent says about itself on its own Node (the condition
//! `IPMasqAgentReady`, and an Event when it rejects a config), and how `ipmasq fleet` reads it
//! back. Both ends of the format live here, so the writer and the reader cannot drift apart.
//!
//! # The condition
//!
//! `type: IPMasqAgentReady`, written with server-side apply to `nodes/status` under one field
//! manager (`ipmasq`), so the kubelet's conditions and anyone else's stay untouched.
//!
//! | reason | status | meaning |
//! |---|---|---|
//! | `InSync` | `True` | the rules of the config in force are installed and match it, and that config is the newest the source offered |
//! | `Drifted` | `False` | the live rules differ from the config in force and the last repair failed (the agent retries with backoff) |
//! | `ConfigRejected` | `False` | the newest config was refused (invalid, or too large for the memory limit); the last good config (the digest in the message) stays in force; an Event carries the diagnostic |
//! | `NotReady` | `False` | no config's rules are installed: the first sync failed, or the agent removed them on a stop (`--cleanup-on-exit`) |
//! | `LastKnownGood` | `Unknown` | the API cannot be read; the agent enforces its last-known-good config from its state directory, which may not be the cluster's current one |
//! | `ApiViewStale` | `True` | the rules match the last config the agent saw, but the API has not answered for one of its inputs for longer than `--api-view-stale-after` (a stuck watch or GET, an API that answers writes but not reads): the cluster's config may have changed since |
//!
//! # The message
//!
//! Fields first, then words for people, separated by `"; "`:
//!
//! ```text
//! digest=sha256:<64 hex> backend=<iptables-nft|iptables-legacy|nftables> lastSync=<YYYY-MM-DDTHH:MM:SSZ>; <words>
//! ```
//!
//! Each field is `key=value` without blanks, in that order when written; a field with no value
//! (no config in force yet: no digest) is left out. A reader takes the fields before the first
//! `"; "`, in any order, and ignores keys it does not know, so a later agent may add some.
//! `digest` is the SHA-256 of the config's bytes in force (what `sha256sum` prints of the file;
//! in API mode with node pools or EgressNATPolicies, the composed digest of
//! [`crate::config::composed`]);
//! `lastSync` is the UTC time of the pass that reached this state (not of the latest pass: a
//! steady pass writes nothing).
//!
//! # Writes
//!
//! A write is due when the status, the reason, the digest, the backend or the words change,
//! never for `lastSync` alone: no heartbeat, so an agent in a steady state makes no API write
//! at all (the issue's "no API write in steady state"; tested on the server's audit log). The
//! agent reads its Node's condition once at start, so a restart into the same state writes
//! nothing either.
//!
//! Without a heartbeat, an agent's silence says nothing about its age, so `ipmasq fleet` does
//! not judge by it. It calls a node `stale` when the agent itself says its word may be old
//! (`LastKnownGood`, `ApiViewStale`), or when the Node's own `Ready` condition (the kubelet's, kept current by
//! the kubelet's lease and the node controller) is not `True`: with the node down, its
//! agent's last word cannot be current. An agent stopped by its DaemonSet's removal while its
//! node stays up leaves its last word (its rules stay too, unless `--cleanup-on-exit`, after
//! which it writes `NotReady`). So `fleet` also reads the agents' pods: a node whose agent is
//! not running, restarting or not ready is called so whatever its condition says. And it reads
//! who wrote the condition (the field managers owning it in the Node's `managedFields`,
//! [`condition_fields_key`]): one written by anyone but [`FIELD_MANAGER`] is `untrusted`.
//!
//! # Events
//!
//! A rejected config's `Warning` Event is about the Node (`involvedObject`) and is created in
//! the agent's own namespace ([`EventAbout`]), where the RBAC grants `events create`.

use super::REQUEST_TIMEOUT;
use k8s_openapi::api::core::v1::{Event, EventSource, Node, NodeCondition, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::time::Duration;

/// The condition's type on the Node.
pub const CONDITION_TYPE: &str = "IPMasqAgentReady";
/// The one field manager of every write the agent makes.
pub const FIELD_MANAGER: &str = "ipmasq";
/// The label selector of the agents' pods: the DaemonSet's pod label
/// (packaging/kubernetes/base/daemonset.yaml), as `fleet` looks for them.
pub const DEFAULT_AGENT_SELECTOR: &str = "k8s-app=ip-masq-agent";
/// The agents' namespace in the shipped manifests.
pub const DEFAULT_AGENT_NAMESPACE: &str = "kube-system";
/// The action an Event names (new-style Events must name one).
pub const EVENT_ACTION: &str = "ApplyConfig";
/// The component named in Events.
pub const COMPONENT: &str = "ipmasq";
/// The longest the words of a message may be (in characters); longer ones are cut with `…`.
pub const WORDS_MAX: usize = 256;
/// The longest an Event's message may be, in characters (so at most 4 KiB of UTF-8): a
/// diagnostic is a line or two; longer ones are cut with `…`.
pub const EVENT_MESSAGE_MAX: usize = 1024;
/// Separates the message's fields from its words.
const WORDS_SEPARATOR: &str = "; ";

/// What the agent's last pass came to, in the mirror's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    InSync,
    Drifted,
    Rejected,
    NotReady,
    LastKnownGood,
    ApiViewStale,
}

impl Outcome {
    /// Every outcome, for documentation and tests.
    pub const ALL: [Outcome; 6] = [
        Outcome::InSync,
        Outcome::Drifted,
        Outcome::Rejected,
        Outcome::NotReady,
        Outcome::LastKnownGood,
        Outcome::ApiViewStale,
    ];

    /// The condition's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Outcome::InSync => "InSync",
            Outcome::Drifted => "Drifted",
            Outcome::Rejected => "ConfigRejected",
            Outcome::NotReady => "NotReady",
            Outcome::LastKnownGood => "LastKnownGood",
            Outcome::ApiViewStale => "ApiViewStale",
        }
    }

    /// The condition's `status`.
    pub fn status(self) -> ConditionStatus {
        match self {
            // The rules are right for the last config seen, as /readyz says.
            Outcome::InSync | Outcome::ApiViewStale => ConditionStatus::True,
            Outcome::Drifted | Outcome::Rejected | Outcome::NotReady => ConditionStatus::False,
            Outcome::LastKnownGood => ConditionStatus::Unknown,
        }
    }

    /// The words a message carries when the agent gives none of its own.
    pub fn default_words(self) -> &'static str {
        match self {
            Outcome::InSync => "the rules in force match the config",
            Outcome::Drifted => "the live rules differ from the config and the repair failed",
            Outcome::Rejected => {
                "the newest config was rejected; the last good config stays in force"
            }
            Outcome::NotReady => "the rules of no config are installed yet",
            Outcome::LastKnownGood => {
                "the config source is unreachable; enforcing the last-known-good config"
            }
            Outcome::ApiViewStale => {
                "the API has not answered for a while; the rules are those of the last config seen"
            }
        }
    }

    /// The outcome a `reason` names, if any.
    pub fn from_reason(reason: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.reason() == reason)
    }
}

/// A condition's `status`, as Kubernetes spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// Anything but `True` and `False` is `Unknown`, as Kubernetes reads it.
    pub fn parse(text: &str) -> ConditionStatus {
        match text {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        }
    }
}

/// What the agent knows after a pass, filled from its outcome: everything the condition says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentStatus {
    pub outcome: Outcome,
    /// The SHA-256 (64 hex digits, as `sha256sum` prints) of the config in force; `None` before
    /// any config is.
    pub digest: Option<String>,
    /// The backend's spelling (`BackendId::as_str`); `None` before one is chosen.
    pub backend: Option<String>,
    /// When the pass that confirmed this state ran.
    pub last_sync: Timestamp,
    /// Words for people instead of the outcome's default (the drift's kind, say); one line.
    pub words: Option<String>,
}

/// The message's fields and words, as read back from a condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `sha256:<hex>`, as written.
    pub digest: Option<String>,
    pub backend: Option<String>,
    pub last_sync: Option<Timestamp>,
    pub words: String,
}

impl Message {
    /// The message of a status (see the module's documentation for the format).
    pub fn of(status: &AgentStatus) -> Message {
        let words = status
            .words
            .as_deref()
            .unwrap_or(status.outcome.default_words());
        Message {
            digest: status.digest.as_ref().map(|hex| format!("sha256:{hex}")),
            backend: status.backend.clone(),
            last_sync: Some(status.last_sync),
            words: one_line(words, WORDS_MAX),
        }
    }

    /// The text a condition carries.
    pub fn render(&self) -> String {
        let mut fields = Vec::new();
        if let Some(digest) = &self.digest {
            fields.push(format!("digest={}", field_value(digest)));
        }
        if let Some(backend) = &self.backend {
            fields.push(format!("backend={}", field_value(backend)));
        }
        if let Some(time) = self.last_sync {
            fields.push(format!("lastSync={}", rfc3339_seconds(time)));
        }
        format!("{}{WORDS_SEPARATOR}{}", fields.join(" "), self.words)
    }

    /// Reads a message as [`Message::render`] writes it; a message in another shape (written by
    /// hand, or by something else) is all words.
    pub fn parse(text: &str) -> Message {
        let mut message = Message {
            digest: None,
            backend: None,
            last_sync: None,
            words: text.to_string(),
        };
        let Some((fields, words)) = text.split_once(WORDS_SEPARATOR) else {
            return message;
        };
        let pairs: Vec<(&str, &str)> = fields
            .split(' ')
            .filter(|f| !f.is_empty())
            .filter_map(|f| f.split_once('='))
            .collect();
        if pairs.is_empty() {
            return message;
        }
        for (key, value) in pairs {
            match key {
                "digest" => message.digest = Some(value.to_string()),
                "backend" => message.backend = Some(value.to_string()),
                "lastSync" => message.last_sync = value.parse().ok(),
                _ => {}
            }
        }
        message.words = words.to_string();
        message
    }

    /// The same message but for `lastSync`: what decides whether a write is due.
    fn same_but_time(&self, other: &Message) -> bool {
        self.digest == other.digest && self.backend == other.backend && self.words == other.words
    }
}

/// A field's value without the characters that separate fields.
fn field_value(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_whitespace() || c == ';' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// One line of at most `max` characters (control characters dropped, longer text cut with `…`).
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `2026-11-26T04:22:00Z`: RFC 3339 in UTC, whole seconds (as Kubernetes writes its times).
pub fn rfc3339_seconds(time: Timestamp) -> String {
    Timestamp::from_second(time.as_second())
        .unwrap_or(time)
        .to_string()
}

/// The condition for `status`. `previous` (the one on the Node now, if any) keeps its
/// `lastTransitionTime` while the status stays the same, as Kubernetes conditions do.
pub fn condition(status: &AgentStatus, previous: Option<&NodeCondition>) -> NodeCondition {
    let state = status.outcome.status().as_str();
    let now =
        Time(Timestamp::from_second(status.last_sync.as_second()).unwrap_or(status.last_sync));
    let transition = previous
        .filter(|p| p.status == state)
        .and_then(|p| p.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    NodeCondition {
        type_: CONDITION_TYPE.to_string(),
        status: state.to_string(),
        reason: Some(status.outcome.reason().to_string()),
        message: Some(Message::of(status).render()),
        last_heartbeat_time: Some(now),
        last_transition_time: Some(transition),
    }
}

/// Whether `next` must be written over `previous` (the condition on the Node now, if any):
/// only when the status, the reason, the digest, the backend or the words differ, never for
/// the times alone.
pub fn write_needed(previous: Option<&NodeCondition>, next: &NodeCondition) -> bool {
    let Some(previous) = previous else {
        return true;
    };
    let text = |c: &NodeCondition| Message::parse(c.message.as_deref().unwrap_or_default());
    previous.type_ != next.type_
        || previous.status != next.status
        || previous.reason != next.reason
        || !text(previous).same_but_time(&text(next))
}

/// Our condition among a Node's, if it has one.
pub fn ours(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)
}

/// The server-side apply body for `nodes/NAME/status`: our condition alone, so the field
/// manager owns that list entry (conditions are a map keyed by `type`) and nothing else.
pub fn apply_patch(node: &str, condition: &NodeCondition) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": node },
        "status": { "conditions": [condition] },
    })
}

/// Why a write to the API failed.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("cannot apply the {CONDITION_TYPE} condition to Node {node}: {source}")]
    Condition {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot create the ConfigRejected Event of Node {node}: {source}")]
    Event {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot read Node {node}: {source}")]
    Read {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("the API server did not answer within {}s: {what}", after.as_secs())]
    NoAnswer { what: String, after: Duration },
}

/// `request`, or [`MirrorError::NoAnswer`] after [`REQUEST_TIMEOUT`] (the client bounds only
/// connecting and sending: its watches must be able to idle).
async fn answered<T>(
    what: impl FnOnce() -> String,
    request: impl std::future::Future<Output = Result<T, MirrorError>>,
) -> Result<T, MirrorError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => result,
        Err(_) => Err(MirrorError::NoAnswer {
            what: what(),
            after: REQUEST_TIMEOUT,
        }),
    }
}

/// Applies `condition` to `node`'s status (server-side apply, field manager `ipmasq`, forced:
/// the condition is the agent's alone) and returns the Node as the server now holds it.
pub async fn publish(
    client: kube::Client,
    node: &str,
    condition: &NodeCondition,
) -> Result<Node, MirrorError> {
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let params = kube::api::PatchParams::apply(FIELD_MANAGER).force();
    let patch = kube::api::Patch::Apply(apply_patch(node, condition));
    answered(
        || format!("applying the {CONDITION_TYPE} condition to Node {node}"),
        async {
            nodes
                .patch_status(node, &params, &patch)
                .await
                .map_err(|source| MirrorError::Condition {
                    node: node.to_string(),
                    source,
                })
        },
    )
    .await
}

/// Reads `node` (its condition, as the agent last left it, and its uid for Events).
pub async fn read_node(client: kube::Client, node: &str) -> Result<Node, MirrorError> {
    let nodes: kube::Api<Node> = kube::Api::all(client);
    answered(|| format!("reading Node {node}"), async {
        nodes.get(node).await.map_err(|source| MirrorError::Read {
            node: node.to_string(),
            source,
        })
    })
    .await
}

/// Where the Events about a Node may be created: the API server takes an Event about a
/// cluster-scoped object only in `default` or (a new-style Event, with `eventTime`, as ours)
/// `kube-system`.
pub const NODE_EVENT_NAMESPACES: [&str; 2] = ["kube-system", "default"];

/// The namespace of the agent's Events: its own (the ConfigMap's, `--configmap
/// NAMESPACE/NAME`; `kube-system` in the shipped manifests, the one namespace the RBAC grants
/// `events create` in) when the API server takes a Node's Events there, else `kube-system`.
pub fn event_namespace(agent_namespace: &str) -> String {
    if NODE_EVENT_NAMESPACES.contains(&agent_namespace) {
        agent_namespace.to_string()
    } else {
        NODE_EVENT_NAMESPACES[0].to_string()
    }
}

/// Whom an Event is about and where it is created: the agent's own Node, in the namespace of
/// [`event_namespace`] (`kubectl describe node` lists Events of any namespace whose
/// `involvedObject` is the Node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventAbout {
    pub namespace: String,
    pub node: String,
    /// The Node's uid, when known.
    pub node_uid: Option<String>,
}

/// The Event of a rejected config: `Warning`, reason `ConfigRejected`, the diagnostic as its
/// message, about the Node (`uid` when known, so `kubectl describe node` lists it).
pub fn rejection_event(about: &EventAbout, diagnostic: &str, now: Timestamp) -> Event {
    let now = Time(Timestamp::from_second(now.as_second()).unwrap_or(now));
    let node = about.node.as_str();
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{node}.ipmasq-")),
            namespace: Some(about.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            uid: about.node_uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(Outcome::Rejected.reason().to_string()),
        message: Some(
            crate::text::printable(&one_line(diagnostic, EVENT_MESSAGE_MAX)).into_owned(),
        ),
        type_: Some("Warning".to_string()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: Some(node.to_string()),
        }),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(node.to_string()),
        // A new-style Event (eventTime, action): the only kind the API server takes about a
        // Node outside `default`.
        event_time: Some(MicroTime(now.0)),
        action: Some(EVENT_ACTION.to_string()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    }
}

/// Creates `event` (see [`rejection_event`]).
pub async fn publish_event(client: kube::Client, event: &Event) -> Result<Event, MirrorError> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let events: kube::Api<Event> = kube::Api::namespaced(client, namespace);
    let node = event.involved_object.name.clone().unwrap_or_default();
    answered(
        || format!("creating the ConfigRejected Event of Node {node}"),
        async {
            events
                .create(&kube::api::PostParams::default(), event)
                .await
                .map_err(|source| MirrorError::Event {
                    node: node.clone(),
                    source,
                })
        },
    )
    .await
}

/// A node as `ipmasq fleet` classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FleetStatus {
    /// `InSync` (status `True`) on a Node that is `Ready`.
    InSync,
    /// `Drifted`.
    Drifted,
    /// `ConfigRejected`.
    Rejected,
    /// `NotReady`.
    NotReady,
    /// The node's word may be old: `LastKnownGood` (the agent cannot read the API),
    /// `ApiViewStale` (the API has not answered the agent's reads for a while), or the Node's
    /// own `Ready` condition is not `True` (the node or its kubelet is down).
    Stale,
    /// The agent's pod runs but is not ready (its `/readyz` fails), whatever the condition says.
    AgentNotReady,
    /// The agent's pod is not running: pending, waiting (CrashLoopBackOff), terminated, or
    /// restarted within the last minutes, whatever the condition says (a dead agent writes
    /// nothing, so its last word stays).
    AgentDown,
    /// No agent pod on the node (the DaemonSet does not run there, or its pod is gone).
    NoAgent,
    /// The condition was written (wholly or in part) by another field manager than `ipmasq`,
    /// or its writer is not recorded: not the agent's word.
    Untrusted,
    /// No `IPMasqAgentReady` condition (no agent in API mode ever ran there), or one this
    /// version cannot read (an unknown reason, or a status that contradicts its reason).
    Unknown,
}

impl FleetStatus {
    /// Every status, in the order the table lists them (the worst last).
    pub const ALL: [FleetStatus; 10] = [
        FleetStatus::InSync,
        FleetStatus::Drifted,
        FleetStatus::Rejected,
        FleetStatus::NotReady,
        FleetStatus::Stale,
        FleetStatus::AgentNotReady,
        FleetStatus::AgentDown,
        FleetStatus::NoAgent,
        FleetStatus::Untrusted,
        FleetStatus::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FleetStatus::InSync => "in-sync",
            FleetStatus::Drifted => "drifted",
            FleetStatus::Rejected => "rejected",
            FleetStatus::NotReady => "not-ready",
            FleetStatus::Stale => "stale",
            FleetStatus::AgentNotReady => "agent-not-ready",
            FleetStatus::AgentDown => "agent-down",
            FleetStatus::NoAgent => "no-agent",
            FleetStatus::Untrusted => "untrusted",
            FleetStatus::Unknown => "unknown",
        }
    }
}

/// Our condition as a reader finds it on a Node: strings, as the server holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    pub status: ConditionStatus,
    pub reason: String,
    pub message: Message,
}

impl Reported {
    pub fn read(status: &str, reason: Option<&str>, message: Option<&str>) -> Reported {
        Reported {
            status: ConditionStatus::parse(status),
            reason: reason.unwrap_or_default().to_string(),
            message: Message::parse(message.unwrap_or_default()),
        }
    }
}

/// A node's status in the fleet view: from its condition (`None`: it has none) and the
/// status of the Node's own `Ready` condition (`None`: the Node has none, as a Node no kubelet
/// ever reported for; then our condition alone decides).
pub fn classify(reported: Option<&Reported>, node_ready: Option<ConditionStatus>) -> FleetStatus {
    let Some(reported) = reported else {
        return FleetStatus::Unknown;
    };
    let Some(outcome) = Outcome::from_reason(&reported.reason) else {
        return FleetStatus::Unknown;
    };
    if outcome.status() != reported.status {
        return FleetStatus::Unknown;
    }
    if node_ready.is_some_and(|ready| ready != ConditionStatus::True) {
        return FleetStatus::Stale;
    }
    match outcome {
        Outcome::InSync => FleetStatus::InSync,
        Outcome::Drifted => FleetStatus::Drifted,
        Outcome::Rejected => FleetStatus::Rejected,
        Outcome::NotReady => FleetStatus::NotReady,
        Outcome::LastKnownGood | Outcome::ApiViewStale => FleetStatus::Stale,
    }
}

/// The key of our condition in a `managedFields` entry's `fieldsV1`, under `f:status` and
/// `f:conditions` (conditions are a list keyed by `type`).
pub fn condition_fields_key() -> String {
    format!("k:{{\"type\":\"{CONDITION_TYPE}\"}}")
}

/// Whether the writers of our condition (the field managers that own any of its fields, read
/// from `managedFields`) are the agent alone. Another manager (someone's `kubectl patch`, a
/// controller) makes the condition not the agent's word; none recorded is not proof either.
pub fn written_by_us(writers: &[String]) -> bool {
    !writers.is_empty() && writers.iter().all(|w| w == FIELD_MANAGER)
}

#[cfg(test)]
mod tests;
