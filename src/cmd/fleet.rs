//! `ipmasq fleet`: every Node's `IPMasqAgentReady` condition (written by the agents in API mode,
//! see `cluster::mirror`) read with one paginated list, grouped by status, config digest and
//! backend, with an exit status CI and cron can gate on.

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

/// How many nodes not in sync the text output names one by one (`-o json` lists every node).
const NAMED_MAX: usize = 20;
/// How many hex digits of a digest the table shows (`-o json` has them all).
const SHORT_DIGEST: usize = 12;
/// The words of a node not in sync are cut to keep its line within 80 columns.
const WORDS_WIDTH: usize = 44;

/// One page of `GET /api/v1/nodes`: only what fleet reads is kept (a real Node carries
/// kilobytes of images and addresses, skipped by the parser); the page's text itself is read
/// whole before it is parsed, so `--page-size` bounds the memory a page takes.
#[derive(Deserialize)]
struct NodePage {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default)]
    items: Vec<ListedNode>,
}

#[derive(Deserialize, Default)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

#[derive(Deserialize)]
struct ListedNode {
    metadata: NodeMeta,
    #[serde(default)]
    status: Option<ListedStatus>,
}

#[derive(Deserialize)]
struct NodeMeta {
    name: String,
}

#[derive(Deserialize)]
struct ListedStatus {
    #[serde(default)]
    conditions: Vec<ListedCondition>,
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
        let condition = self
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == mirror::CONDITION_TYPE)?;
        Some(Reported::read(
            &condition.status,
            condition.reason.as_deref(),
            condition.message.as_deref(),
        ))
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
}

impl NodeRow {
    fn judge(node: &ListedNode) -> NodeRow {
        let reported = node.reported();
        let ready = node.ready();
        let ready_status = ready.map(|c| ConditionStatus::parse(&c.status));
        NodeRow {
            name: node.metadata.name.clone(),
            status: mirror::classify(reported.as_ref(), ready_status),
            reported,
            node_down: ready
                .filter(|c| ConditionStatus::parse(&c.status) != ConditionStatus::True)
                .map(|c| (ConditionStatus::parse(&c.status), c.reason.clone())),
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

/// `-o json`: `{"nodes": [{"name", "status", "configDigest", "backend", "lastSync"}]}`.
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
}

impl From<&NodeRow> for NodeEntry {
    fn from(row: &NodeRow) -> Self {
        NodeEntry {
            name: row.name.clone(),
            status: row.status,
            config_digest: row.digest().map(str::to_string),
            backend: row.backend().map(str::to_string),
            last_sync: row.last_sync().map(mirror::rfc3339_seconds),
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

/// Every Node (matching `selector`), page by page (`limit`/`continue`), judged as it arrives so
/// that no page is kept. A continue token the server has let expire (410 Gone: its revision was
/// compacted, about 5 minutes on a default etcd) starts the list again from the first page,
/// once, as kubectl's pager does.
async fn list_nodes(
    client: &kube::Client,
    args: &FleetArgs,
    rows: &mut Vec<NodeRow>,
    progress: &mut Progress,
) -> Result<(), kube::Error> {
    let request = kube::core::Request::new("/api/v1/nodes");
    let mut continue_token: Option<String> = None;
    let (first_row, mut started_again) = (rows.len(), false);
    loop {
        let mut params = kube::api::ListParams::default().limit(args.page_size);
        if let Some(selector) = &args.selector {
            params = params.labels(selector);
        }
        if let Some(token) = &continue_token {
            params = params.continue_token(token);
        }
        let answer = client
            .request::<NodePage>(request.list(&params).map_err(kube::Error::BuildRequest)?)
            .await;
        let page = match answer {
            Err(kube::Error::Api(status))
                if status.code == 410 && continue_token.is_some() && !started_again =>
            {
                started_again = true;
                continue_token = None;
                rows.truncate(first_row);
                (progress.pages, progress.nodes) = (0, 0);
                continue;
            }
            answer => answer?,
        };
        progress.pages += 1;
        progress.nodes += page.items.len();
        rows.extend(page.items.iter().map(NodeRow::judge));
        continue_token = page.metadata.continue_token.filter(|t| !t.is_empty());
        if continue_token.is_none() {
            return Ok(());
        }
    }
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
        list_nodes(&client, args, &mut rows, &mut progress)
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

fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
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

fn to_text(rows: &[NodeRow], style: &Styler) -> String {
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
        let mut named: Vec<&NodeRow> = behind.clone();
        named.sort_by(|a, b| a.status.cmp(&b.status).then(a.name.cmp(&b.name)));
        let records = named
            .iter()
            .take(NAMED_MAX)
            .map(|row| {
                vec![
                    format!("  {}", row.status.as_str()),
                    row.name.clone(),
                    cut(&row.why(), WORDS_WIDTH),
                ]
            })
            .collect();
        out.push_str(&plain_table(records));
        if behind.len() > NAMED_MAX {
            out.push_str(&format!(
                "  … and {} more (-o json lists every node)\n",
                thousands(behind.len() - NAMED_MAX)
            ));
        }
    }
    out.push('\n');
    let total = thousands(rows.len());
    let summary = if behind.is_empty() {
        style.success(&format!("all {total} nodes in sync"))
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
        OutputFormat::Text => to_text(&rows, &Styler::for_stdout(args.color)),
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

    fn with_condition(name: &str, status: &str, reason: &str, message: &str) -> ListedNode {
        on_node(name, ("True", "KubeletReady"), (status, reason, message))
    }

    fn on_node(
        name: &str,
        (ready, ready_reason): (&str, &str),
        (status, reason, message): (&str, &str, &str),
    ) -> ListedNode {
        node(serde_json::json!({
            "metadata": {"name": name, "labels": {"a": "b"}},
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
                ("Unknown", "NodeStatusUnknown"),
                (
                    "True",
                    "InSync",
                    &format!("{}; ok", fields("2026-11-26T03:00:00Z")),
                ),
            ),
            node(serde_json::json!({"metadata": {"name": "n5"}})),
        ]
        .iter()
        .map(NodeRow::judge)
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
            })
        );
        assert_eq!(
            json["nodes"][4],
            serde_json::json!({"name": "n5", "status": "unknown", "configDigest": null, "backend": null, "lastSync": null})
        );
        assert_eq!(json.as_object().map(|o| o.len()), Some(1));
    }

    #[test]
    fn the_table_groups_by_status_and_digest_and_names_the_rest() {
        let text = to_text(&rows(), &Styler::plain());
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
                NodeRow::judge(&node(
                    serde_json::json!({"metadata": {"name": format!("n{i:02}")}}),
                ))
            })
            .collect();
        let text = to_text(&many, &Styler::plain());
        assert!(
            text.contains("… and 5 more (-o json lists every node)"),
            "{text}"
        );
        assert!(text.ends_with("25 nodes: 0 in sync, 25 not\n"), "{text}");
    }
}
