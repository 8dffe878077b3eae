//! `ipmasq fleet rollout`: a config change rolled out in waves (see `config::rollout`), with no
//! controller: `start` writes the next config's ConfigMap and its schedule, `status` reads it
//! and every Node's condition and says who is on which config, `promote`, `abort` and `resume`
//! each write that one ConfigMap (and `promote` the base). The agents do the rest.

use super::fleet_list::{each_page, Listed};
use super::Exit;
use crate::cli::{
    OutputFormat, RolloutAction, RolloutArgs, RolloutPromoteArgs, RolloutResumeArgs,
    RolloutStartArgs,
};
use crate::cluster::configmap::{ConfigMapRef, PoolData, CONFIG_KEY};
use crate::cluster::inputs::{policy_text, EgressNatPolicyObject};
use crate::cluster::mirror::Reported;
use crate::cluster::Credentials;
use crate::config::composed::{ComposedText, PolicyText, PoolText};
use crate::config::rollout::{self, Halt, Rollout, State};
use crate::config::selector::Labels;
use crate::output::{printable, Styler};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why a step could not be taken, and the exit status it ends with.
struct Refusal {
    exit: Exit,
    words: String,
}

fn refused(exit: Exit, words: impl Into<String>) -> Refusal {
    Refusal {
        exit,
        words: words.into(),
    }
}

/// An API error in words, with what the user may do about it.
fn api_refusal(what: &str, err: kube::Error) -> Refusal {
    let words = match &err {
        kube::Error::Api(status) if status.code == 403 => format!(
            "{what}: forbidden ({}): the user needs get, create, update, patch and delete on configmaps in the namespace, and list on nodes",
            status.message
        ),
        _ => format!("{what}: {err}"),
    };
    refused(Exit::Usage, words)
}

/// The rollout's ConfigMap and the base, as read.
struct Read {
    next: Option<ConfigMap>,
    base: Option<ConfigMap>,
}

async fn get(api: &kube::Api<ConfigMap>, name: &str) -> Result<Option<ConfigMap>, Refusal> {
    api.get_opt(name)
        .await
        .map_err(|err| api_refusal(&format!("get configmap {name}"), err))
}

async fn read(api: &kube::Api<ConfigMap>, target: &ConfigMapRef) -> Result<Read, Refusal> {
    Ok(Read {
        next: get(api, &target.next_name()).await?,
        base: get(api, &target.name).await?,
    })
}

fn annotations_of(object: &ConfigMap) -> BTreeMap<String, String> {
    object.metadata.annotations.clone().unwrap_or_default()
}

fn text_of(object: Option<&ConfigMap>) -> Option<String> {
    object?.data.as_ref()?.get(CONFIG_KEY).cloned()
}

/// The rollout `next` describes, or why it cannot be read.
fn rollout_of(target: &ConfigMapRef, next: &ConfigMap) -> Result<Rollout, Refusal> {
    Rollout::from_annotations(&annotations_of(next)).map_err(|errors| {
        let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
        refused(
            Exit::Failure,
            format!(
                "configmap {}/{} is no rollout the agents can follow (they keep the base): {}",
                target.namespace,
                target.next_name(),
                said.join("; ")
            ),
        )
    })
}

fn no_rollout(target: &ConfigMapRef) -> Refusal {
    refused(
        Exit::NotInstalled,
        format!(
            "no rollout: configmap {}/{} does not exist (start one with `ipmasq fleet rollout start FILE`)",
            target.namespace,
            target.next_name()
        ),
    )
}

fn now() -> Timestamp {
    Timestamp::now()
}

/// FILE's text, when the agents would take it as a config (else its errors, rendered).
fn checked_text(file: &std::path::Path) -> Result<String, Refusal> {
    let path = file.display().to_string();
    let mut bytes = Vec::new();
    let limit = crate::config::MAX_CONFIG_BYTES;
    std::fs::File::open(file)
        .and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, limit + 1), &mut bytes)
        })
        .map_err(|err| refused(Exit::Usage, format!("cannot read {path}: {err}")))?;
    if bytes.len() as u64 > limit {
        return Err(refused(
            Exit::Failure,
            format!("{path} is larger than the {limit} byte limit for a config"),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| refused(Exit::Failure, format!("{path} is not UTF-8 text")))?;
    let checked = crate::config::check_text(&text, &crate::config::Options::default());
    if checked.config().is_some() {
        return Ok(text);
    }
    let style = Styler::plain();
    let rendered: String = checked
        .diagnostics()
        .iter()
        .filter(|d| d.is_error())
        .map(|d| crate::output::render_diagnostic(&style, &path, Some(&text), d))
        .collect();
    Err(refused(
        Exit::Failure,
        format!("{path} is not a config the agents would take; nothing was started:\n{rendered}"),
    ))
}

/// Makes room for a new rollout: none there, or an aborted one (deleted); any other is
/// refused.
async fn make_room(api: &kube::Api<ConfigMap>, target: &ConfigMapRef) -> Result<(), Refusal> {
    let name = target.next_name();
    let Some(existing) = get(api, &name).await? else {
        return Ok(());
    };
    match Rollout::from_annotations(&annotations_of(&existing)).map(|r| r.state(now())) {
        Ok(State::Aborted) => {}
        Ok(state) => {
            return Err(refused(
                Exit::Failure,
                format!(
                    "a rollout is {} already (configmap {}/{name}): {} it first",
                    state_word(state),
                    target.namespace,
                    match state {
                        State::Halted => "resume or abort",
                        _ => "promote or abort",
                    }
                ),
            ))
        }
        Err(_) => {
            return Err(refused(
                Exit::Failure,
                format!(
                "configmap {}/{name} exists and is no rollout: delete it first if it is not needed",
                target.namespace
            ),
            ))
        }
    }
    api.delete(&name, &Default::default())
        .await
        .map(|_| ())
        .map_err(|err| api_refusal(&format!("delete the aborted rollout {name}"), err))
}

/// `start FILE`: the next config checked as the agents check it, then its ConfigMap created
/// with the schedule (refused while another rollout runs, is halted or waits for promote).
async fn start(
    api: &kube::Api<ConfigMap>,
    target: &ConfigMapRef,
    args: &RolloutStartArgs,
) -> Result<String, Refusal> {
    let text = checked_text(&args.file)?;
    let selector = match &args.node_selector {
        None => None,
        Some(text) => Some((
            text.clone(),
            crate::config::selector::Selector::parse(text)
                .map_err(|err| refused(Exit::Usage, format!("--node-selector {text:?}: {err}")))?,
        )),
    };
    let rollout = Rollout {
        waves: args.waves.0.clone(),
        soak: args.soak,
        start: args.start.unwrap_or_else(now),
        selector,
        invariants: args.invariants.clone(),
        halted: None,
        aborted: None,
    };
    make_room(api, target).await?;
    let name = target.next_name();
    let base = get(api, &target.name).await?;
    let mut annotations = rollout.annotations();
    annotations.insert(rollout::BASE_DIGEST.to_string(), base_digest(base.as_ref()));
    let mut object = ConfigMap::default();
    object.metadata.name = Some(name.clone());
    object.metadata.namespace = Some(target.namespace.clone());
    object.metadata.annotations = Some(annotations);
    object.data = Some([(CONFIG_KEY.to_string(), text)].into());
    match api.create(&Default::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            return Err(refused(
                Exit::Failure,
                format!("configmap {}/{name} was created meanwhile (another start?): look with `ipmasq fleet rollout status`", target.namespace),
            ))
        }
        Err(err) => return Err(api_refusal(&format!("create configmap {name}"), err)),
    }
    for warning in schedule_warnings(&rollout) {
        eprintln!("ipmasq fleet rollout: warning: {warning}");
    }
    let mut said = format!(
        "rollout started: configmap {}/{name}, waves {} % every {}, from {}\n",
        target.namespace,
        join(&rollout.waves),
        crate::config::GoDuration::from_std(rollout.soak),
        rollout.start
    );
    for (index, wave) in rollout.waves.iter().enumerate() {
        said.push_str(&format!(
            "  wave {} ({wave} %) at {}\n",
            index + 1,
            rollout.wave_start(index)
        ));
    }
    Ok(said)
}

/// The base's `config` digest as `start` records it (`none` without the ConfigMap or its key).
fn base_digest(base: Option<&ConfigMap>) -> String {
    text_of(base).map_or_else(
        || "none".to_string(),
        |text| crate::config::digest::sha256_hex(text.as_bytes()),
    )
}

/// What in a schedule weakens the brake, in words.
fn schedule_warnings(rollout: &Rollout) -> Vec<String> {
    let mut warnings = Vec::new();
    if rollout.soak < std::time::Duration::from_secs(60) {
        warnings.push(format!(
            "a soak of {} leaves little time to see a failure before the next wave starts",
            crate::config::GoDuration::from_std(rollout.soak)
        ));
    }
    let started = rollout
        .wave_at(now())
        .filter(|wave| *wave > 0)
        .map(|wave| wave + 1);
    if let Some(waves) = started {
        warnings.push(format!(
            "--start is so far in the past that {waves} waves start at once"
        ));
    }
    if rollout.waves.last().is_some_and(|last| *last < 100) {
        warnings.push(format!(
            "the last wave holds {} % of the nodes: promote gives the others the next config at once",
            rollout.waves.last().copied().unwrap_or_default()
        ));
    }
    warnings
}

fn join(waves: &[u32]) -> String {
    waves
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn state_word(state: State) -> &'static str {
    match state {
        State::Running => "running",
        State::Halted => "halted",
        State::Aborted => "aborted",
        State::Done => "done",
    }
}

/// One Node as `status` reads it: its name, labels and our condition.
#[derive(Deserialize)]
struct RolloutNode {
    metadata: RolloutNodeMeta,
    #[serde(default)]
    status: Option<super::fleet::ListedStatus>,
}

#[derive(Deserialize)]
struct RolloutNodeMeta {
    name: String,
    #[serde(default)]
    labels: Labels,
}

impl RolloutNode {
    fn reported(&self) -> Option<Reported> {
        self.status.as_ref()?.reported()
    }
}

/// Where a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Base,
    Next,
    Failed,
    Pending,
}

/// The `config` texts of the base and of the next config (None: no such key, or no base).
struct Texts {
    base: Option<String>,
    next: Option<String>,
}

/// What a node's config is composed of, besides the base or next text: its pools and every
/// policy (the agents' digest covers them).
struct Composition<'a> {
    target: &'a ConfigMapRef,
    pools: &'a BTreeMap<String, PoolData>,
    policies: &'a [PolicyText],
}

impl Composition<'_> {
    fn digest(&self, text: Option<&str>, labels: &Labels) -> Option<String> {
        let pools = self
            .pools
            .iter()
            .filter(|(_, pool)| pool.selects(labels))
            .map(|(name, pool)| PoolText {
                name: name.clone(),
                selector: pool.selector.clone(),
                text: pool.text.clone(),
            })
            .collect();
        ComposedText::new(
            &self.target.namespace,
            &self.target.name,
            text.map(|t| Arc::new(t.to_string())),
            pools,
            self.policies.to_vec(),
        )
        .digest()
    }
}

/// `status -o json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusReport {
    configmap: String,
    state: State,
    /// 1-based; None before the start.
    wave: Option<usize>,
    waves: Vec<u32>,
    soak: String,
    start: String,
    node_selector: Option<String>,
    invariants: Vec<String>,
    nodes: SideLists,
    halted: Option<Halt>,
    next_wave: Option<NextWave>,
}

#[derive(Serialize, Default)]
struct SideLists {
    base: Vec<String>,
    next: Vec<String>,
    failed: Vec<String>,
    pending: Vec<String>,
}

#[derive(Serialize)]
struct NextWave {
    wave: usize,
    at: String,
    nodes: Vec<String>,
}

/// The pools of the namespace and every policy, as the agents compose them.
async fn composition_inputs(
    client: &kube::Client,
    target: &ConfigMapRef,
) -> Result<(BTreeMap<String, PoolData>, Vec<PolicyText>), Refusal> {
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &target.namespace);
    // As the agents read them: the namespace's ConfigMaps by their metadata, then each pool's
    // data (the other ConfigMaps' data is never received).
    let listed = configmaps
        .list_metadata(&Default::default())
        .await
        .map_err(|err| api_refusal(&format!("list configmaps in {}", target.namespace), err))?;
    let next_name = target.next_name();
    let mut pools = BTreeMap::new();
    for object in listed.items {
        let Some(name) = object.metadata.name.clone() else {
            continue;
        };
        if name == next_name
            || !crate::cluster::configmap::is_base_or_pool(target, &object.metadata)
            || name == target.name
        {
            continue;
        }
        if let Some(pool) = get(&configmaps, &name)
            .await?
            .as_ref()
            .and_then(PoolData::of)
        {
            pools.insert(name, pool);
        }
    }
    let policies_api: kube::Api<EgressNatPolicyObject> = kube::Api::all(client.clone());
    let policies = match policies_api.list(&Default::default()).await {
        Ok(list) => list.items.iter().map(policy_text).collect(),
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(err) => return Err(api_refusal("list egressnatpolicies", err)),
    };
    Ok((pools, policies))
}

/// Every node's side, the rollout's state and who is next.
async fn status(
    client: &kube::Client,
    api: &kube::Api<ConfigMap>,
    target: &ConfigMapRef,
) -> Result<StatusReport, Refusal> {
    let Read { next, base } = read(api, target).await?;
    let next = next.ok_or_else(|| no_rollout(target))?;
    let rollout = rollout_of(target, &next)?;
    let (pools, policies) = composition_inputs(client, target).await?;
    let composition = Composition {
        target,
        pools: &pools,
        policies: &policies,
    };
    let texts = Texts {
        base: text_of(base.as_ref()),
        next: text_of(Some(&next)),
    };
    let at = now();
    let mut nodes = SideLists::default();
    let mut joining = Vec::new();
    let next_wave = rollout.next_wave_after(at);
    let selector = rollout.selector.as_ref().map(|(text, _)| text.as_str());
    each_page::<RolloutNode>(
        client,
        "/api/v1/nodes",
        500,
        selector,
        |listed| match listed {
            Listed::Again => {
                nodes = SideLists::default();
                joining.clear();
            }
            Listed::Page(page) => {
                for node in page {
                    let name = node.metadata.name.clone();
                    let side = side_of(&node, &rollout, &composition, &texts, at);
                    if let Some((index, _)) = next_wave {
                        if rollout.wave_of(&name) == Some(index) {
                            joining.push(name.clone());
                        }
                    }
                    match side {
                        Side::Base => nodes.base.push(name),
                        Side::Next => nodes.next.push(name),
                        Side::Failed => nodes.failed.push(name),
                        Side::Pending => nodes.pending.push(name),
                    }
                }
            }
        },
    )
    .await
    .map_err(|err| api_refusal("list nodes", err))?;
    Ok(StatusReport {
        configmap: format!("{}/{}", target.namespace, target.next_name()),
        state: rollout.state(at),
        wave: rollout.wave_at(at).map(|w| w + 1),
        waves: rollout.waves.clone(),
        soak: crate::config::GoDuration::from_std(rollout.soak).to_string(),
        start: rollout.start.to_string(),
        node_selector: selector.map(str::to_string),
        invariants: rollout.invariants.iter().map(ToString::to_string).collect(),
        nodes,
        halted: rollout.halted.clone(),
        next_wave: next_wave.map(|(index, when)| NextWave {
            wave: index + 1,
            at: when.to_string(),
            nodes: joining,
        }),
    })
}

/// A node's side: failed (the halting node, or in the wave and not in sync), else by the
/// digest its condition reports.
fn side_of(
    node: &RolloutNode,
    rollout: &Rollout,
    composition: &Composition<'_>,
    texts: &Texts,
    at: Timestamp,
) -> Side {
    let name = &node.metadata.name;
    if rollout.halted.as_ref().is_some_and(|h| &h.node == name) {
        return Side::Failed;
    }
    let reported = node.reported();
    let reason = reported.as_ref().map(|r| r.reason.as_str());
    let in_wave = rollout.runs_next(name, Some(&node.metadata.labels), at);
    if in_wave && matches!(reason, Some("ConfigRejected" | "NotReady" | "Drifted")) {
        return Side::Failed;
    }
    // The message spells it `sha256:HEX`.
    let digest = reported
        .as_ref()
        .and_then(|r| r.message.digest.as_deref())
        .map(|d| d.strip_prefix("sha256:").unwrap_or(d).to_string());
    let labels = &node.metadata.labels;
    let next_digest = composition.digest(texts.next.as_deref(), labels);
    let base_digest = composition.digest(texts.base.as_deref(), labels);
    // A node of the wave still reporting the base has not said it took the next config yet
    // (its condition's write waits for its slot in --status-spread): pending, not base.
    match digest {
        Some(digest) if Some(&digest) == next_digest.as_ref() => Side::Next,
        Some(digest) if Some(&digest) == base_digest.as_ref() && !in_wave => Side::Base,
        _ => Side::Pending,
    }
}

fn status_text(report: &StatusReport) -> String {
    let mut out = format!("rollout {}: {}", report.configmap, state_word(report.state));
    match report.wave {
        Some(wave) => out.push_str(&format!(
            ", wave {wave} of {} ({} %)\n",
            report.waves.len(),
            report.waves[wave - 1]
        )),
        None => out.push_str(&format!(", first wave at {}\n", report.start)),
    }
    out.push_str(&format!(
        "  waves {} % every {} from {}{}\n",
        join(&report.waves),
        report.soak,
        report.start,
        report
            .node_selector
            .as_ref()
            .map(|s| format!(", nodes matching {s}"))
            .unwrap_or_default()
    ));
    for invariant in &report.invariants {
        out.push_str(&format!("  invariant: {invariant}\n"));
    }
    let n = &report.nodes;
    out.push_str(&format!(
        "  nodes: {} on next, {} on base, {} failed, {} pending\n",
        n.next.len(),
        n.base.len(),
        n.failed.len(),
        n.pending.len()
    ));
    if !n.failed.is_empty() {
        out.push_str(&format!("  failed: {}\n", named(&n.failed)));
    }
    if let Some(halt) = &report.halted {
        out.push_str(&format!(
            "  halted by {} at {} in wave {}: {}: {}\n  every node is back on the base; `ipmasq fleet rollout resume` starts wave {} again, `abort` ends the rollout\n",
            halt.node,
            halt.at,
            halt.wave + 1,
            halt.reason,
            halt.diagnostic,
            halt.wave + 1
        ));
    }
    if let Some(next) = &report.next_wave {
        out.push_str(&format!(
            "  next: wave {} at {}, {} more node{}{}\n",
            next.wave,
            next.at,
            next.nodes.len(),
            if next.nodes.len() == 1 { "" } else { "s" },
            if next.nodes.is_empty() {
                String::new()
            } else {
                format!(": {}", named(&next.nodes))
            }
        ));
    }
    if report.state == State::Done {
        out.push_str("  every wave has soaked: `ipmasq fleet rollout promote` makes the next config the base\n");
    }
    printable(&out).into_owned()
}

/// Up to 10 names, then how many more.
fn named(names: &[String]) -> String {
    const NAMED: usize = 10;
    let mut said = names
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMED {
        said.push_str(&format!(" and {} more", names.len() - NAMED));
    }
    said
}

/// A merge patch of the rollout's annotations, at the resource version read.
async fn patch_annotations(
    api: &kube::Api<ConfigMap>,
    next: &ConfigMap,
    annotations: serde_json::Value,
) -> Result<(), Refusal> {
    let name = next.metadata.name.clone().unwrap_or_default();
    let body = serde_json::json!({
        "metadata": {
            "resourceVersion": next.metadata.resource_version,
            "annotations": annotations,
        }
    });
    match api
        .patch(&name, &Default::default(), &kube::api::Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(refused(
            Exit::Failure,
            format!("configmap {name} changed while this ran (a node's halt, or another user): look again with `ipmasq fleet rollout status`"),
        )),
        Err(err) => Err(api_refusal(&format!("patch configmap {name}"), err)),
    }
}

/// How often `abort` reads the rollout again when a node's halt (or anything) changed it
/// between its read and its patch.
const ABORT_ATTEMPTS: usize = 3;

/// `abort`: every node back on the base; the rollout stays, marked. A rollout changed between
/// the read and the patch (a node's halt) is read again: abort is the emergency stop.
async fn abort(api: &kube::Api<ConfigMap>, target: &ConfigMapRef) -> Result<String, Refusal> {
    let at = crate::config::digest::rfc3339_utc(std::time::SystemTime::now());
    let mut attempt = 0;
    loop {
        attempt += 1;
        let next = get(api, &target.next_name())
            .await?
            .ok_or_else(|| no_rollout(target))?;
        match patch_annotations(api, &next, serde_json::json!({ rollout::ABORTED: at })).await {
            Ok(()) => break,
            Err(refusal) if refusal.exit == Exit::Failure && attempt < ABORT_ATTEMPTS => continue,
            Err(refusal) => return Err(refusal),
        }
    }
    Ok(format!(
        "rollout aborted at {at}: every node goes back to the base (configmap {}/{} stays, for the record; start deletes it)\n",
        target.namespace,
        target.next_name()
    ))
}

/// `resume`: after a halt, the rollout starts again now from wave `from_wave` (1-based,
/// clamped to the waves there are), with a fresh soak.
async fn resume(
    api: &kube::Api<ConfigMap>,
    target: &ConfigMapRef,
    args: &RolloutResumeArgs,
) -> Result<String, Refusal> {
    let next = get(api, &target.next_name())
        .await?
        .ok_or_else(|| no_rollout(target))?;
    let rollout = rollout_of(target, &next)?;
    if rollout.aborted.is_some() {
        return Err(refused(
            Exit::Failure,
            "the rollout was aborted: start a new one",
        ));
    }
    let Some(halt) = &rollout.halted else {
        return Err(refused(
            Exit::Failure,
            format!(
                "the rollout is {}, not halted: nothing to resume",
                state_word(rollout.state(now()))
            ),
        ));
    };
    let wave = usize::try_from(args.from_wave)
        .unwrap_or(usize::MAX)
        .clamp(1, rollout.waves.len())
        - 1;
    let start = now()
        .checked_sub(rollout.wave_start(wave).duration_since(rollout.start))
        .unwrap_or(Timestamp::MIN);
    patch_annotations(
        api,
        &next,
        serde_json::json!({ rollout::HALTED: null, rollout::START: start.to_string() }),
    )
    .await?;
    Ok(format!(
        "rollout resumed: wave {} ({} %) starts again now (the halt by {} in wave {} is cleared; start is now {start})\n",
        wave + 1,
        rollout.waves[wave],
        halt.node,
        halt.wave.saturating_add(1)
    ))
}

/// Why `promote` refuses without `--force`: the rollout not done, a node of it failed, or the
/// base edited since the rollout started.
async fn promote_refusal(
    client: &kube::Client,
    api: &kube::Api<ConfigMap>,
    target: &ConfigMapRef,
    next: &ConfigMap,
    base: Option<&ConfigMap>,
) -> Result<Option<String>, Refusal> {
    let rollout = rollout_of(target, next)?;
    let state = rollout.state(now());
    if state != State::Done {
        return Ok(Some(format!(
            "the rollout is {}, not done: every wave soaks before promote",
            state_word(state)
        )));
    }
    let recorded = annotations_of(next).get(rollout::BASE_DIGEST).cloned();
    if recorded.is_some_and(|digest| digest != base_digest(base)) {
        return Ok(Some(
            "the base was edited since the rollout started: promote would overwrite that edit"
                .to_string(),
        ));
    }
    let report = status(client, api, target).await?;
    if !report.nodes.failed.is_empty() {
        return Ok(Some(format!(
            "nodes of the rollout failed: {}",
            named(&report.nodes.failed)
        )));
    }
    Ok(None)
}

/// Marks the rollout claimed by promote, at the version read (a halt that came meanwhile makes
/// it refuse); no node halts a claimed rollout. The claimed object.
async fn claim(
    api: &kube::Api<ConfigMap>,
    target: &ConfigMapRef,
    next: &ConfigMap,
) -> Result<ConfigMap, Refusal> {
    let at = crate::config::digest::rfc3339_utc(std::time::SystemTime::now());
    api
        .patch(
            &target.next_name(),
            &Default::default(),
            &kube::api::Patch::Merge(&serde_json::json!({
                "metadata": {
                    "resourceVersion": next.metadata.resource_version,
                    "annotations": {rollout::PROMOTING: at},
                }
            })),
        )
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) if status.code == 409 => refused(
                Exit::Failure,
                "the rollout changed while promote read it (a node's halt?): look again with `ipmasq fleet rollout status`",
            ),
            err => api_refusal(&format!("claim configmap {}", target.next_name()), err),
        })
}

/// Writes `text` as the base's `config` (None: no such key), creating the base if need be.
async fn write_base(
    api: &kube::Api<ConfigMap>,
    target: &ConfigMapRef,
    base: Option<ConfigMap>,
    text: Option<String>,
) -> Result<(), Refusal> {
    let written = match base {
        Some(mut object) => {
            let data = object.data.get_or_insert_with(Default::default);
            match &text {
                Some(text) => data.insert(CONFIG_KEY.to_string(), text.clone()),
                None => data.remove(CONFIG_KEY),
            };
            api.replace(&target.name, &Default::default(), &object)
                .await
        }
        None => {
            let mut object = ConfigMap::default();
            object.metadata.name = Some(target.name.clone());
            object.metadata.namespace = Some(target.namespace.clone());
            object.data = text.map(|text| [(CONFIG_KEY.to_string(), text)].into());
            api.create(&Default::default(), &object).await
        }
    };
    written.map(|_| ()).map_err(|err| {
        api_refusal(
            &format!("write configmap {target} (the rollout is claimed: run promote again)"),
            err,
        )
    })
}

/// `promote`: the rollout claimed (a mark at the version read, so a node's halt after it
/// answers 409 and no node halts a claimed rollout), the next config's text written into the
/// base, then the rollout's ConfigMap deleted at the claimed version.
async fn promote(
    client: &kube::Client,
    api: &kube::Api<ConfigMap>,
    target: &ConfigMapRef,
    args: &RolloutPromoteArgs,
) -> Result<String, Refusal> {
    let Read { next, base } = read(api, target).await?;
    let next = next.ok_or_else(|| no_rollout(target))?;
    let rollout = rollout_of(target, &next)?;
    let state = rollout.state(now());
    if matches!(state, State::Halted | State::Aborted) {
        return Err(refused(
            Exit::Failure,
            format!(
                "the rollout is {}: resume it (or start a new one) before promoting",
                state_word(state)
            ),
        ));
    }
    if !args.force {
        if let Some(why) = promote_refusal(client, api, target, &next, base.as_ref()).await? {
            return Err(refused(
                Exit::Failure,
                format!("not promoted: {why} (--force promotes anyway)"),
            ));
        }
    }
    let claimed = claim(api, target, &next).await?;
    write_base(api, target, base, text_of(Some(&next))).await?;
    let preconditions = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: claimed.metadata.resource_version.clone(),
            uid: None,
        }),
        ..Default::default()
    };
    api.delete(&target.next_name(), &preconditions)
        .await
        .map_err(|err| {
            api_refusal(
                &format!(
                    "delete configmap {} (the base holds the next config already)",
                    target.next_name()
                ),
                err,
            )
        })?;
    Ok(format!(
        "promoted: configmap {target} holds the next config; {} is deleted (the nodes on it change no rule)\n",
        target.next_name()
    ))
}

/// Runs `ipmasq fleet rollout`.
pub fn run(args: &RolloutArgs) -> Exit {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("ipmasq fleet rollout: cannot start the async runtime: {err}");
            return Exit::Usage;
        }
    };
    let timeout = args.timeout.to_std().unwrap_or_default();
    let outcome = runtime.block_on(async {
        tokio::time::timeout(timeout, step(args))
            .await
            .unwrap_or_else(|_| {
                Err(refused(
                    Exit::Usage,
                    format!("no answer within --timeout {}", args.timeout),
                ))
            })
    });
    match outcome {
        Ok((text, exit)) => {
            use std::io::Write;
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            exit
        }
        Err(refusal) => {
            eprintln!(
                "ipmasq fleet rollout: {}",
                printable(refusal.words.trim_end())
            );
            refusal.exit
        }
    }
}

/// The step asked for: what to print and the exit status.
async fn step(args: &RolloutArgs) -> Result<(String, Exit), Refusal> {
    let credentials = Credentials::from_flag(args.kubeconfig.as_deref(), Credentials::Inferred);
    let client = crate::cluster::client(&credentials)
        .await
        .map_err(|err| refused(Exit::Usage, err.to_string()))?;
    let target = &args.configmap;
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &target.namespace);
    let done = |text: String| Ok((text, Exit::Ok));
    match &args.action {
        RolloutAction::Start(start_args) => done(start(&api, target, start_args).await?),
        RolloutAction::Abort => done(abort(&api, target).await?),
        RolloutAction::Resume(resume_args) => done(resume(&api, target, resume_args).await?),
        RolloutAction::Promote(promote_args) => {
            done(promote(&client, &api, target, promote_args).await?)
        }
        RolloutAction::Status => {
            let report = status(&client, &api, target).await?;
            let exit = match report.state {
                State::Running | State::Done if report.nodes.failed.is_empty() => Exit::Ok,
                _ => Exit::Failure,
            };
            let text = match args.output {
                OutputFormat::Json => crate::output::to_json(&report),
                OutputFormat::Yaml => crate::output::to_yaml(&report),
                OutputFormat::Text => status_text(&report),
            };
            Ok((text, exit))
        }
    }
}
