//! `ipmasq fleet`: every Node's `IPMasqAgentReady` condition (written by the agents in API mode,
//! see `cluster::mirror`) read with one paginated list, grouped by status, config digest and
//! backend, with an exit status CI and cron can gate on.

use super::fleet_list::{each_page, Listed};
use super::fleet_pods::{AgentPod, AgentState};
use super::Exit;
use crate::cli::{FleetArgs, OutputFormat};
use crate::cluster::mirror::{self, ConditionStatus, FleetStatus, Reported};
use crate::cluster::{ClientError, Credentials};
use crate::output::{printable, Styler};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tabled::builder::Builder;
use tabled::settings::{Padding, Style};

/// How many nodes not in sync the text output names one by one, shared among their statuses
/// (`-o json` lists every node).
const NAMED_MAX: usize = 20;
/// How many hex digits of a digest the table shows (`-o json` has them all).
const SHORT_DIGEST: usize = 12;
/// Where a wrapped line of a node not in sync goes on.
const WRAP_INDENT: usize = 4;

/// One Node of a page of `GET /api/v1/nodes`: only what fleet reads is kept (a real Node carries
/// kilobytes of images and addresses, skipped by the parser).
#[derive(Deserialize)]
struct ListedNode {
    metadata: NodeMeta,
    #[serde(default)]
    status: Option<ListedStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeMeta {
    name: String,
    /// Who wrote which fields: only the keys of `f:status` → `f:conditions` are read.
    #[serde(default)]
    managed_fields: Vec<ManagedFields>,
}

/// One `managedFields` entry, reduced to its manager and the conditions it owns.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagedFields {
    #[serde(default)]
    manager: Option<String>,
    #[serde(default, rename = "fieldsV1")]
    fields: Option<OwnedFields>,
}

#[derive(Deserialize)]
struct OwnedFields {
    #[serde(default, rename = "f:status")]
    status: Option<OwnedStatus>,
}

#[derive(Deserialize)]
struct OwnedStatus {
    #[serde(default, rename = "f:conditions")]
    conditions: BTreeMap<String, serde::de::IgnoredAny>,
}

/// A listed Node's status, reduced to its conditions (also read by `fleet rollout status`).
#[derive(Deserialize)]
pub(super) struct ListedStatus {
    #[serde(default)]
    conditions: Vec<ListedCondition>,
}

impl ListedStatus {
    /// Our condition as the node reports it, if it has one.
    pub(super) fn reported(&self) -> Option<Reported> {
        let condition = self
            .conditions
            .iter()
            .find(|c| c.type_ == mirror::CONDITION_TYPE)?;
        Some(Reported::read(
            &condition.status,
            condition.reason.as_deref(),
            condition.message.as_deref(),
        ))
    }
}

#[derive(Deserialize)]
struct ListedCondition {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl ListedNode {
    /// Our condition as this node reports it, if it has one.
    fn reported(&self) -> Option<Reported> {
        self.status.as_ref()?.reported()
    }

    /// The field managers that own any field of our condition.
    fn writers(&self) -> Vec<String> {
        let key = mirror::condition_fields_key();
        let mut writers: Vec<String> = self
            .metadata
            .managed_fields
            .iter()
            .filter(|entry| {
                entry
                    .fields
                    .as_ref()
                    .and_then(|f| f.status.as_ref())
                    .is_some_and(|s| s.conditions.contains_key(&key))
            })
            .map(|entry| entry.manager.clone().unwrap_or_default())
            .collect();
        writers.sort();
        writers.dedup();
        writers
    }

    /// The Node's own `Ready` condition (the kubelet's), if it has one.
    fn ready(&self) -> Option<&ListedCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
    }
}

/// One node as fleet judged it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeRow {
    name: String,
    status: FleetStatus,
    reported: Option<Reported>,
    /// The Node's `Ready` condition when it is not `True`: its status and reason.
    node_down: Option<(ConditionStatus, Option<String>)>,
    /// The field managers of our condition (`ipmasq` is the agent).
    writers: Vec<String>,
    /// The node's agent pod, as judged; None when the pods were not read, or the node has none.
    agent: Option<AgentPod>,
}

/// What the agents' pods say, for [`NodeRow::judge`].
enum Pods<'a> {
    /// Not read (`--agent-pods=false`, or the list was refused: said on stderr).
    Unread,
    /// Each node's agent pod, by node name.
    Read(&'a BTreeMap<String, AgentPod>),
}

impl NodeRow {
    /// The node's status: the Node down (`stale`) first, then its agent pod (not running, not
    /// ready, none), then a condition someone else wrote, then the condition itself.
    fn judge(node: &ListedNode, pods: &Pods) -> NodeRow {
        let reported = node.reported();
        let ready = node.ready();
        let ready_status = ready.map(|c| ConditionStatus::parse(&c.status));
        let writers = node.writers();
        let agent = match pods {
            Pods::Read(pods) => pods.get(&node.metadata.name).cloned(),
            Pods::Unread => None,
        };
        let by_condition = mirror::classify(reported.as_ref(), ready_status);
        let node_is_down = ready_status.is_some_and(|r| r != ConditionStatus::True);
        let status = match (&agent, pods) {
            _ if node_is_down => by_condition,
            (Some(pod), _) if pod.state == AgentState::Down => FleetStatus::AgentDown,
            (Some(pod), _) if pod.state == AgentState::NotReady => FleetStatus::AgentNotReady,
            (None, Pods::Read(_)) => FleetStatus::NoAgent,
            _ if reported.is_some() && !mirror::written_by_us(&writers) => FleetStatus::Untrusted,
            _ => by_condition,
        };
        NodeRow {
            name: node.metadata.name.clone(),
            status,
            reported,
            node_down: ready
                .filter(|c| ConditionStatus::parse(&c.status) != ConditionStatus::True)
                .map(|c| (ConditionStatus::parse(&c.status), c.reason.clone())),
            writers,
            agent,
        }
    }

    fn digest(&self) -> Option<&str> {
        self.reported.as_ref()?.message.digest.as_deref()
    }

    fn backend(&self) -> Option<&str> {
        self.reported.as_ref()?.message.backend.as_deref()
    }

    fn last_sync(&self) -> Option<Timestamp> {
        self.reported.as_ref()?.message.last_sync
    }

    /// Why it is not in sync, in words.
    fn why(&self) -> String {
        match self.status {
            FleetStatus::AgentDown | FleetStatus::AgentNotReady => {
                if let Some(pod) = &self.agent {
                    return pod.words.clone();
                }
            }
            FleetStatus::NoAgent => return "no agent pod on the node".to_string(),
            FleetStatus::Untrusted => {
                return match self.writers.as_slice() {
                    [] => "condition of no recorded writer".to_string(),
                    writers => format!("condition written by {}", writers.join(",")),
                }
            }
            _ => {}
        }
        let Some(reported) = &self.reported else {
            return format!("no {} condition", mirror::CONDITION_TYPE);
        };
        if let (FleetStatus::Stale, Some((ready, reason))) = (self.status, &self.node_down) {
            return format!(
                "node Ready={}{}",
                ready.as_str(),
                reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
        }
        if self.status == FleetStatus::Unknown {
            return format!(
                "reason {:?} with status {}",
                reported.reason,
                reported.status.as_str()
            );
        }
        reported.message.words.clone()
    }
}

/// `-o json`: `{"nodes": [{"name", "status", "configDigest", "backend", "lastSync",
/// "writers", "agent"}]}`.
#[derive(Serialize)]
struct FleetReport {
    nodes: Vec<NodeEntry>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeEntry {
    name: String,
    status: FleetStatus,
    config_digest: Option<String>,
    backend: Option<String>,
    last_sync: Option<String>,
    /// The field managers of the condition (`ipmasq`: the agent).
    writers: Vec<String>,
    /// The node's agent pod (null: none, or the pods were not read).
    agent: Option<AgentPod>,
}

impl From<&NodeRow> for NodeEntry {
    fn from(row: &NodeRow) -> Self {
        NodeEntry {
            name: row.name.clone(),
            status: row.status,
            config_digest: row.digest().map(str::to_string),
            backend: row.backend().map(str::to_string),
            last_sync: row.last_sync().map(mirror::rfc3339_seconds),
            writers: row.writers.clone(),
            agent: row.agent.clone(),
        }
    }
}

/// Why the Nodes could not be listed, in words that say what to do.
#[derive(Debug, thiserror::Error)]
enum FleetError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error(
        "the API server{at} refused to list Nodes: {code} {reason} ({message}). These credentials \
         need `list` on `nodes`, cluster-wide: check with `kubectl auth can-i list nodes`, or give \
         --kubeconfig PATH of a user who may"
    )]
    Forbidden {
        at: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error(
        "the API server{at} did not accept these credentials: {code} {reason} ({message}). The \
         token or certificate expired or belongs to another cluster: refresh the kubeconfig"
    )]
    Unauthorized {
        at: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error("the API server{at} answered the list of Nodes with {code} {reason}: {message}")]
    Refused {
        at: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error(
        "cannot reach the API server{at}: {detail}. Is the cluster up, and is the server of the \
         kubeconfig's current context right? (--kubeconfig PATH, $KUBECONFIG, `kubectl config \
         view --minify`)"
    )]
    Unreachable { at: String, detail: String },
    #[error(
        "listing the Nodes{at} took longer than --timeout={timeout} ({nodes} nodes in {pages} \
         pages read): raise --timeout, or look at the API server's load"
    )]
    Deadline {
        at: String,
        timeout: crate::config::GoDuration,
        nodes: usize,
        pages: usize,
    },
}

/// What the listing got before it ended, for a deadline's message.
#[derive(Default)]
struct Progress {
    nodes: usize,
    pages: usize,
}

/// Every Node (matching `--selector`), page by page, judged as it arrives so that no page is
/// kept.
async fn list_nodes(
    client: &kube::Client,
    args: &FleetArgs,
    pods: &Pods<'_>,
    rows: &mut Vec<NodeRow>,
    progress: &mut Progress,
) -> Result<(), kube::Error> {
    let first_row = rows.len();
    each_page::<ListedNode>(
        client,
        "/api/v1/nodes",
        args.page_size,
        args.selector.as_deref(),
        |listed| match listed {
            Listed::Again => {
                rows.truncate(first_row);
                (progress.pages, progress.nodes) = (0, 0);
            }
            Listed::Page(nodes) => {
                progress.pages += 1;
                progress.nodes += nodes.len();
                rows.extend(nodes.iter().map(|node| NodeRow::judge(node, pods)));
            }
        },
    )
    .await
}

/// The server's address for messages (` at https://…`), read from the same credentials; empty
/// when they cannot even be read.
async fn server_of(credentials: &Credentials) -> String {
    let config = match credentials {
        Credentials::Kubeconfig(path) => match kube::config::Kubeconfig::read_from(path) {
            Ok(file) => kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .ok(),
            Err(_) => None,
        },
        Credentials::InCluster => kube::Config::incluster().ok(),
        Credentials::Inferred => kube::Config::infer().await.ok(),
    };
    config
        .map(|c| format!(" at {}", c.cluster_url))
        .unwrap_or_default()
}

/// The error chain of a failed request in one line.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

fn api_error(err: kube::Error, at: String) -> FleetError {
    match err {
        kube::Error::Api(status) => {
            let (code, reason, message) = (status.code, status.reason, status.message);
            match code {
                401 => FleetError::Unauthorized {
                    at,
                    code,
                    reason,
                    message,
                },
                403 => FleetError::Forbidden {
                    at,
                    code,
                    reason,
                    message,
                },
                _ => FleetError::Refused {
                    at,
                    code,
                    reason,
                    message,
                },
            }
        }
        other => FleetError::Unreachable {
            at,
            detail: chain(&other),
        },
    }
}

/// The agent pod of each node (one list), or None when not asked for or refused (said on
/// stderr: the nodes are then judged by their conditions alone).
async fn agent_pods(client: &kube::Client, args: &FleetArgs) -> Option<BTreeMap<String, AgentPod>> {
    if !args.agent_pods {
        return None;
    }
    let query = super::fleet_pods::PodQuery {
        namespace: &args.agent_namespace,
        selector: &args.agent_selector,
        page_size: args.page_size,
    };
    match super::fleet_pods::list(client, &query).await {
        Ok(pods) => Some(super::fleet_pods::by_node(&pods, Timestamp::now())),
        Err(err) => {
            eprintln!(
                "ipmasq fleet: cannot list the agents' pods ({}, in {}): {}; judging by the conditions alone (a dead agent's last word is not seen through). These credentials need `list` on pods there, or give --agent-pods=false",
                args.agent_selector,
                args.agent_namespace,
                printable(&chain(&err))
            );
            None
        }
    }
}

/// Where the listing stopped short.
enum Stopped {
    Client(ClientError),
    Api(kube::Error),
}

/// Lists and judges every Node within the deadline.
async fn fleet(args: &FleetArgs) -> Result<Vec<NodeRow>, FleetError> {
    let credentials = Credentials::from_flag(args.kubeconfig.as_deref(), Credentials::Inferred);
    let timeout = args.timeout.to_std().unwrap_or_default();
    let mut rows = Vec::new();
    let mut progress = Progress::default();
    let listing = async {
        let client = crate::cluster::client(&credentials)
            .await
            .map_err(Stopped::Client)?;
        let agents = agent_pods(&client, args).await;
        let pods = match &agents {
            Some(agents) => Pods::Read(agents),
            None => Pods::Unread,
        };
        list_nodes(&client, args, &pods, &mut rows, &mut progress)
            .await
            .map_err(Stopped::Api)
    };
    match tokio::time::timeout(timeout, listing).await {
        Ok(Ok(())) => Ok(rows),
        Ok(Err(Stopped::Client(err))) => Err(FleetError::Client(err)),
        Ok(Err(Stopped::Api(err))) => Err(api_error(err, server_of(&credentials).await)),
        Err(_) => Err(FleetError::Deadline {
            at: server_of(&credentials).await,
            timeout: args.timeout,
            nodes: progress.nodes,
            pages: progress.pages,
        }),
    }
}

/// One group of the table: nodes with the same status, config and backend.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    status: FleetStatus,
    digest: Option<String>,
    backend: Option<String>,
}

struct Group {
    nodes: usize,
    oldest_sync: Option<Timestamp>,
}

fn groups(rows: &[NodeRow]) -> Vec<(GroupKey, Group)> {
    let mut by_key: BTreeMap<GroupKey, Group> = BTreeMap::new();
    for row in rows {
        let key = GroupKey {
            status: row.status,
            digest: row.digest().map(str::to_string),
            backend: row.backend().map(str::to_string),
        };
        let group = by_key.entry(key).or_insert(Group {
            nodes: 0,
            oldest_sync: None,
        });
        group.nodes += 1;
        group.oldest_sync = match (group.oldest_sync, row.last_sync()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    let mut list: Vec<(GroupKey, Group)> = by_key.into_iter().collect();
    // Status first (in-sync on top), then the biggest group.
    list.sort_by(|(a, ga), (b, gb)| {
        a.status
            .cmp(&b.status)
            .then(gb.nodes.cmp(&ga.nodes))
            .then(a.cmp(b))
    });
    list
}

/// `1,234`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn short_digest(digest: Option<&str>) -> String {
    match digest {
        Some(d) => {
            let hex = d.strip_prefix("sha256:").unwrap_or(d);
            hex.chars().take(SHORT_DIGEST).collect()
        }
        None => "-".into(),
    }
}

/// The nodes of one status that the text names, and how many more it has.
struct Named<'a> {
    status: FleetStatus,
    rows: Vec<&'a NodeRow>,
    more: usize,
}

/// The nodes not in sync that the text names: [`NAMED_MAX`] in all, shared out one at a time
/// among the statuses present, so a large group never hides a small one (150 rejected nodes
/// behind 50 drifted); each status's nodes by name.
fn named_by_status<'a>(behind: &[&'a NodeRow]) -> Vec<Named<'a>> {
    let mut groups: BTreeMap<FleetStatus, Vec<&'a NodeRow>> = BTreeMap::new();
    for row in behind {
        groups.entry(row.status).or_default().push(row);
    }
    for rows in groups.values_mut() {
        rows.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let mut shares: BTreeMap<FleetStatus, usize> = groups.keys().map(|s| (*s, 0)).collect();
    let mut left = NAMED_MAX;
    while left > 0 {
        let before = left;
        for (status, rows) in &groups {
            let share = shares.entry(*status).or_default();
            if left > 0 && *share < rows.len() {
                *share += 1;
                left -= 1;
            }
        }
        if left == before {
            break;
        }
    }
    groups
        .into_iter()
        .map(|(status, rows)| {
            let share = shares[&status];
            Named {
                status,
                more: rows.len() - share,
                rows: rows.into_iter().take(share).collect(),
            }
        })
        .collect()
}

/// kubectl-style: no rules, columns two blanks apart, no trailing blanks.
pub(crate) fn plain_table(records: Vec<Vec<String>>) -> String {
    let mut builder = Builder::default();
    for record in records {
        builder.push_record(record.iter().map(|cell| printable(cell).into_owned()));
    }
    let mut table = builder.build();
    table.with(Style::blank());
    table.with(Padding::new(0, 1, 0, 0));
    table
        .to_string()
        .lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect()
}

/// The text report, its lines fitted to `width` (a reason too long for its line wraps under
/// it).
fn to_text(rows: &[NodeRow], style: &Styler, width: usize) -> String {
    if rows.is_empty() {
        return "no Nodes\n".to_string();
    }
    let mut records = vec![["STATUS", "CONFIG", "BACKEND", "NODES", "OLDEST SYNC"]
        .map(String::from)
        .to_vec()];
    for (key, group) in groups(rows) {
        records.push(vec![
            key.status.as_str().to_string(),
            short_digest(key.digest.as_deref()),
            key.backend.unwrap_or_else(|| "-".into()),
            thousands(group.nodes),
            group
                .oldest_sync
                .map(mirror::rfc3339_seconds)
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = plain_table(records);
    let behind: Vec<&NodeRow> = rows
        .iter()
        .filter(|r| r.status != FleetStatus::InSync)
        .collect();
    if !behind.is_empty() {
        out.push('\n');
        out.push_str(&style.bold("Not in sync:"));
        out.push('\n');
        let named = named_by_status(&behind);
        let records = named
            .iter()
            .flat_map(|group| group.rows.iter())
            .map(|row| {
                vec![
                    format!("  {}", row.status.as_str()),
                    row.name.clone(),
                    row.why(),
                ]
            })
            .collect();
        out.push_str(&crate::terminal::fit(
            &plain_table(records),
            width,
            WRAP_INDENT,
        ));
        for group in named.iter().filter(|g| g.more > 0) {
            out.push_str(&format!(
                "  … and {} more {} (-o json lists every node)\n",
                thousands(group.more),
                group.status.as_str()
            ));
        }
    }
    out.push('\n');
    let total = thousands(rows.len());
    let summary = if behind.is_empty() {
        style.success(&match rows.len() {
            1 => "the 1 node in sync".to_string(),
            _ => format!("all {total} nodes in sync"),
        })
    } else {
        style.warning(&format!(
            "{total} nodes: {} in sync, {} not",
            thousands(rows.len() - behind.len()),
            thousands(behind.len())
        ))
    };
    out.push_str(&summary);
    out.push('\n');
    out
}

/// Runs `ipmasq fleet`.
pub fn run(args: &FleetArgs) -> Exit {
    if let Some(crate::cli::FleetCommand::Rollout(rollout)) = &args.command {
        return super::fleet_rollout::run(rollout);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("ipmasq fleet: cannot start the async runtime: {err}");
            return Exit::Usage;
        }
    };
    let rows = match runtime.block_on(fleet(args)) {
        Ok(rows) => rows,
        Err(err) => {
            eprintln!("ipmasq fleet: {}", printable(&err.to_string()));
            return Exit::Usage;
        }
    };
    let report = || FleetReport {
        nodes: rows.iter().map(NodeEntry::from).collect(),
    };
    let text = match args.output {
        OutputFormat::Json => crate::output::to_json(&report()),
        OutputFormat::Yaml => crate::output::to_yaml(&report()),
        OutputFormat::Text => to_text(
            &rows,
            &Styler::for_stdout(args.color),
            crate::terminal::output_width(),
        ),
    };
    {
        use std::io::Write;
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }
    if rows.iter().all(|r| r.status == FleetStatus::InSync) {
        Exit::Ok
    } else {
        Exit::Failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: serde_json::Value) -> ListedNode {
        serde_json::from_value(json).expect("a listed node")
    }

    /// A condition of a node's status, as the test writes it.
    struct Said<'a> {
        status: &'a str,
        reason: &'a str,
        message: &'a str,
    }

    fn with_condition(name: &str, status: &str, reason: &str, message: &str) -> ListedNode {
        let ready = Said {
            status: "True",
            reason: "KubeletReady",
            message: "",
        };
        let ours = Said {
            status,
            reason,
            message,
        };
        on_node(name, &ready, &ours)
    }

    /// A node whose kubelet says `ready` and whose agent says `ours`.
    fn on_node(name: &str, ready: &Said, ours: &Said) -> ListedNode {
        let (status, reason, message) = (ours.status, ours.reason, ours.message);
        let (ready, ready_reason) = (ready.status, ready.reason);
        node(serde_json::json!({
            "metadata": {"name": name, "labels": {"a": "b"}, "managedFields": [
                {"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {}}}}},
                {"manager": "ipmasq", "operation": "Apply", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"IPMasqAgentReady\"}": {".": {}, "f:message": {}}}}}},
            ]},
            "status": {"conditions": [
                {"type": "Ready", "status": ready, "reason": ready_reason},
                {"type": "IPMasqAgentReady", "status": status, "reason": reason, "message": message},
            ], "images": [{"names": ["x"], "sizeBytes": 1}]},
        }))
    }

    fn rows() -> Vec<NodeRow> {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let fields = |time: &str| format!("digest={digest} backend=nftables lastSync={time}");
        [
            with_condition(
                "n1",
                "True",
                "InSync",
                &format!("{}; ok", fields("2026-11-26T04:29:00Z")),
            ),
            with_condition(
                "n2",
                "True",
                "InSync",
                &format!("{}; ok", fields("2026-11-26T04:20:00Z")),
            ),
            with_condition(
                "n3",
                "False",
                "Drifted",
                &format!("{}; the repair failed", fields("2026-11-26T04:29:00Z")),
            ),
            on_node(
                "n4",
                &Said {
                    status: "Unknown",
                    reason: "NodeStatusUnknown",
                    message: "",
                },
                &Said {
                    status: "True",
                    reason: "InSync",
                    message: &format!("{}; ok", fields("2026-11-26T03:00:00Z")),
                },
            ),
            node(serde_json::json!({"metadata": {"name": "n5"}})),
        ]
        .iter()
        .map(|n| NodeRow::judge(n, &Pods::Unread))
        .collect()
    }

    #[test]
    fn nodes_are_judged_from_their_condition_alone() {
        let statuses: Vec<FleetStatus> = rows().iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                FleetStatus::InSync,
                FleetStatus::InSync,
                FleetStatus::Drifted,
                FleetStatus::Stale,
                FleetStatus::Unknown
            ]
        );
    }

    #[test]
    fn the_json_has_exactly_the_documented_keys() {
        let rows = rows();
        let report = FleetReport {
            nodes: rows.iter().map(NodeEntry::from).collect(),
        };
        let json = serde_json::to_value(&report).expect("json");
        assert_eq!(
            json["nodes"][0],
            serde_json::json!({
                "name": "n1",
                "status": "in-sync",
                "configDigest": format!("sha256:{}", "ab".repeat(32)),
                "backend": "nftables",
                "lastSync": "2026-11-26T04:29:00Z",
                "writers": ["ipmasq"],
                "agent": null,
            })
        );
        assert_eq!(
            json["nodes"][4],
            serde_json::json!({"name": "n5", "status": "unknown", "configDigest": null, "backend": null, "lastSync": null, "writers": [], "agent": null})
        );
        assert_eq!(json.as_object().map(|o| o.len()), Some(1));
    }

    #[test]
    fn the_table_groups_by_status_and_digest_and_names_the_rest() {
        let text = to_text(&rows(), &Styler::plain(), 80);
        let expected = "\
STATUS   CONFIG        BACKEND   NODES  OLDEST SYNC
in-sync  abababababab  nftables  2      2026-11-26T04:20:00Z
drifted  abababababab  nftables  1      2026-11-26T04:29:00Z
stale    abababababab  nftables  1      2026-11-26T03:00:00Z
unknown  -             -         1      -

Not in sync:
  drifted  n3  the repair failed
  stale    n4  node Ready=Unknown (NodeStatusUnknown)
  unknown  n5  no IPMasqAgentReady condition

5 nodes: 2 in sync, 3 not
";
        assert_eq!(text, expected, "\n{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 80));
    }

    #[test]
    fn a_long_not_in_sync_list_is_cut_and_thousands_are_grouped() {
        assert_eq!(thousands(5000), "5,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
        let many: Vec<NodeRow> = (0..25)
            .map(|i| {
                NodeRow::judge(
                    &node(serde_json::json!({"metadata": {"name": format!("n{i:02}")}})),
                    &Pods::Unread,
                )
            })
            .collect();
        let text = to_text(&many, &Styler::plain(), 80);
        assert!(
            text.contains("… and 5 more unknown (-o json lists every node)"),
            "{text}"
        );
        assert!(text.ends_with("25 nodes: 0 in sync, 25 not\n"), "{text}");
    }

    /// A node whose agent says `reason` (a condition of status False) with `words`.
    fn saying(name: &str, reason: &str, words: &str) -> NodeRow {
        let digest = format!("sha256:{}", "cd".repeat(32));
        let message =
            format!("digest={digest} backend=nftables lastSync=2026-11-26T04:29:00Z; {words}");
        NodeRow::judge(
            &with_condition(name, "False", reason, &message),
            &Pods::Unread,
        )
    }

    #[test]
    fn every_status_not_in_sync_is_named_however_large_another() {
        let mut many: Vec<NodeRow> = (0..50)
            .map(|i| saying(&format!("d{i:03}"), "Drifted", "the repair failed"))
            .collect();
        many.extend(
            (0..150).map(|i| saying(&format!("r{i:03}"), "ConfigRejected", "line 3: bad CIDR")),
        );
        let text = to_text(&many, &Styler::plain(), 80);
        let named = |status: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("  {status} ")))
                .count()
        };
        assert_eq!((named("drifted"), named("rejected")), (10, 10), "{text}");
        assert!(
            text.contains("… and 40 more drifted (-o json lists every node)"),
            "{text}"
        );
        assert!(
            text.contains("… and 140 more rejected (-o json lists every node)"),
            "{text}"
        );
        // A small group takes only what it has; the rest goes to the others.
        let mut few = vec![saying("d1", "Drifted", "the repair failed")];
        few.extend((0..30).map(|i| saying(&format!("r{i:02}"), "ConfigRejected", "bad")));
        let text = to_text(&few, &Styler::plain(), 80);
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("  rejected "))
                .count(),
            19,
            "{text}"
        );
        assert!(text.contains("… and 11 more rejected"), "{text}");
        assert!(!text.contains("more drifted"), "{text}");
    }

    #[test]
    fn a_long_reason_wraps_at_the_width_and_stays_whole_on_a_wide_one() {
        let name = "gke-production-europe-west4-default-pool-4f8a2c1d-x7yz";
        let words = "line 7 of /etc/config/ip-masq-agent: nonMasqueradeCIDRs[2]: \"10.0.0.0/33\" is not a CIDR: the prefix length 33 is more than 32";
        let rows = vec![saying(name, "ConfigRejected", words)];
        let reason = rows[0].why();
        assert!(
            reason.contains("the prefix length 33 is more than 32"),
            "{reason}"
        );
        let words_of = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        for width in [80, 120] {
            let text = to_text(&rows, &Styler::plain(), width);
            assert!(
                text.lines().all(|l| l.chars().count() <= width),
                "{width}:\n{text}"
            );
            assert!(
                words_of(&text).contains(&words_of(&reason)),
                "{width}: the whole reason\n{text}"
            );
        }
        let wide = to_text(&rows, &Styler::plain(), 250);
        assert!(
            wide.lines()
                .any(|l| l.contains(name) && l.ends_with(&reason)),
            "{wide}"
        );
    }

    fn agent(node: &str, state: AgentState, words: &str) -> (String, AgentPod) {
        let pod = AgentPod {
            pod: format!("ip-masq-agent-{node}"),
            state,
            phase: Some("Running".into()),
            ready: state == AgentState::Running,
            restarts: 4,
            words: words.into(),
        };
        (node.to_string(), pod)
    }

    #[test]
    fn a_dead_agent_or_a_foreign_writer_outranks_the_condition() {
        let insync = |name: &str| {
            let digest = "ab".repeat(32);
            let message = format!(
                "digest=sha256:{digest} backend=nftables lastSync=2026-11-26T04:29:00Z; ok"
            );
            with_condition(name, "True", "InSync", &message)
        };
        let pods: BTreeMap<String, AgentPod> = [
            agent("n1", AgentState::Down, "agent CrashLoopBackOff, 4 restarts"),
            agent("n2", AgentState::NotReady, "agent running, not ready"),
            agent("n4", AgentState::Running, ""),
        ]
        .into_iter()
        .collect();
        let mut forged = insync("n4");
        forged.metadata.managed_fields.push(ManagedFields {
            manager: Some("kubectl-patch".into()),
            fields: serde_json::from_value(serde_json::json!(
                {"f:status": {"f:conditions": {"k:{\"type\":\"IPMasqAgentReady\"}": {"f:status": {}}}}}
            ))
            .ok(),
        });
        let nodes = [insync("n1"), insync("n2"), insync("n3"), forged];
        let rows: Vec<NodeRow> = nodes
            .iter()
            .map(|n| NodeRow::judge(n, &Pods::Read(&pods)))
            .collect();
        let statuses: Vec<FleetStatus> = rows.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                FleetStatus::AgentDown,
                FleetStatus::AgentNotReady,
                FleetStatus::NoAgent,
                FleetStatus::Untrusted
            ]
        );
        let text = to_text(&rows, &Styler::plain(), 80);
        for said in [
            "agent-down       n1  agent CrashLoopBackOff, 4 restarts",
            "agent-not-ready  n2  agent running, not ready",
            "no-agent         n3  no agent pod on the node",
            "untrusted        n4  condition written by ipmasq,kubectl-patch",
        ] {
            assert!(text.contains(said), "{said}\n{text}");
        }
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        let json = serde_json::to_value(NodeEntry::from(&rows[0])).expect("json");
        assert_eq!(json["agent"]["state"], "down");
        assert_eq!(json["agent"]["restarts"], 4);
        let unread: Vec<FleetStatus> = nodes
            .iter()
            .map(|n| NodeRow::judge(n, &Pods::Unread).status)
            .collect();
        assert_eq!(
            unread,
            [
                FleetStatus::InSync,
                FleetStatus::InSync,
                FleetStatus::InSync,
                FleetStatus::Untrusted
            ],
            "without the pods, only the writer is checked"
        );
    }
}
