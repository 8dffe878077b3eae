//! `ipmasq explain DEST [--from SRC]`: whether traffic to DEST is masqueraded, answered twice
//! — by the config (through the plan's `decide`, naming the deciding CIDR, its list, file and
//! line) and by the live rules of the backend in use (walked as the kernel walks them, naming
//! the rule and its counters) — and whether the two agree; then the tracked flows to DEST
//! whose NAT contradicts the rules in force (see `flows`). The interface the traffic leaves
//! by is `--out-interface`, else the kernel's route to DEST.
//!
//! JSON report (schemaVersion 1; fields are only ever added): `{schemaVersion, destination,
//! source, sourceAssumed, outInterface?, outInterfaceFrom?, family, outcome, config: {source,
//! action, snatTo?, reason, decision?}, live?: {backend, location, action, snatTo?, reason,
//! rule?, unjudged}, liveUnavailable?, agree?, conntrack?: {examined, toDestination,
//! contradictingTotal, contradicting}, conntrackUnavailable?, configFile?: {path, state,
//! digest?, diagnostics}}`, where `outcome` is `masquerade`, `keep-source` or `disagreement`,
//! and `configFile` (the file the agent reads, when it is not the config in force) has
//! `state` `rejected` or `changed`.

use super::node::{JudgedAgainst, Judgement, Query, ResolvedNode, StaleCopy};
use super::Exit;
use crate::backend::{LiveReason, LiveVerdict};
use crate::cli::{ExplainArgs, OutputFormat};
use crate::config::{Config, ConfigSource, ListName, DEFAULT_CONFIG_PATH};
use crate::output::{printable, to_json, to_yaml, Styler};
use crate::plan::{
    decide, plan_family, Action, DecisionOrigin, Family, PlanOptions, Reason, ResolvedEgress,
};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ExplainReport {
    schema_version: u32,
    destination: IpAddr,
    source: Option<IpAddr>,
    /// No --from: the source was taken from masqueradeSourceCIDRs (or any source).
    source_assumed: bool,
    /// The interface the traffic leaves by: `--out-interface`, else the kernel's route.
    #[serde(skip_serializing_if = "Option::is_none")]
    out_interface: Option<String>,
    /// `flag` or `route`: where `outInterface` came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    out_interface_from: Option<&'static str>,
    family: String,
    outcome: &'static str,
    config: ConfigAnswer,
    #[serde(skip_serializing_if = "Option::is_none")]
    live: Option<LiveAnswer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    live_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agree: Option<bool>,
    /// Tracked flows to the destination whose NAT contradicts the rules in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    conntrack: Option<super::flows::FlowsAnswer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    conntrack_unavailable: Option<String>,
    /// The file the agent reads, when it is not the config judged by (the one in force).
    #[serde(skip_serializing_if = "Option::is_none")]
    config_file: Option<FileNotInForce>,
}

/// The config file the running agent reads, when its content is not the config in force:
/// the agent refused it, or it changed since the agent read it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct FileNotInForce {
    path: String,
    /// `rejected` (the agent refused it; the last good config stays in force) or `changed`
    /// (its bytes are not those in force, and the agent has not judged them yet).
    state: &'static str,
    /// SHA-256 of the file's bytes, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    /// The agent's diagnostics of a rejected file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    diagnostics: Vec<String>,
}

/// The file the agent reads, when it is not what the agent enforces: refused (the agent
/// recorded why), or changed since the agent read it (its bytes here hash otherwise).
fn file_not_in_force(node: &ResolvedNode, judgement: &Judgement) -> Option<FileNotInForce> {
    let JudgedAgainst::AgentRecord(record) = &judgement.against else {
        return None;
    };
    if let Some(rejected) = node.agent.running()?.config_rejected.as_ref() {
        return Some(FileNotInForce {
            path: rejected.path.clone(),
            state: "rejected",
            digest: rejected.digest.clone(),
            diagnostics: rejected.diagnostics.clone(),
        });
    }
    if record.source != "file" {
        return None;
    }
    let path = std::path::Path::new(&record.path);
    let bytes = path.is_file().then(|| std::fs::read(path).ok()).flatten()?;
    let digest = crate::config::digest::sha256_hex(&bytes);
    (record.digest.as_deref() != Some(digest.as_str())).then(|| FileNotInForce {
        path: record.path.clone(),
        state: "changed",
        digest: Some(digest),
        diagnostics: Vec::new(),
    })
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigAnswer {
    /// The config file or directory explained.
    source: String,
    action: Action,
    /// The address a rewrite SNATs to (`outputAddress`); absent for MASQUERADE.
    #[serde(skip_serializing_if = "Option::is_none")]
    snat_to: Option<IpAddr>,
    reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<DecisionAnswer>,
    /// Why a rewrite masquerades although the config names an output address: this node
    /// holds no address in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    output_address_fallback: Option<String>,
    /// The pod share a new masqueraded connection of this traffic is held to (absent when the
    /// traffic is not masqueraded or the config sets no share).
    #[serde(skip_serializing_if = "Option::is_none")]
    pod_share: Option<ShareAnswer>,
}

/// The pod share that applies, in words, and where it was written.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ShareAnswer {
    connection_limit: Option<u32>,
    new_connections_per_second: Option<u32>,
    burst: Option<u32>,
    per_destination: bool,
    written: String,
    words: String,
    /// The share's rules as the kernel holds them (what each limit refused), when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    live: Option<crate::plan::live::LiveShare>,
    /// The pod addresses with the most masqueraded flows, when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    busiest_pods: Option<crate::conntrack::busiest::Busiest>,
}

/// The share's lines: what applies, then (when read) what it refused and the busiest pods.
fn share_words(share: &ShareAnswer) -> String {
    let mut out = format!(
        "        pod share ({}): {}\n",
        printable(&share.written),
        printable(&share.words)
    );
    if let Some(live) = &share.live {
        let refused: Vec<String> = live
            .refusals
            .iter()
            .map(|r| format!("{} over {}", r.refused, r.limit.as_str()))
            .collect();
        let state = if live.installed {
            "installed"
        } else {
            "incomplete"
        };
        let refused = if refused.is_empty() {
            "none".to_string()
        } else {
            refused.join(", ")
        };
        out.push_str(&format!(
            "        live share: {state}; new connections refused so far: {refused}\n"
        ));
    }
    if let Some(pods) = share.busiest_pods.as_ref().and_then(|b| b.listed()) {
        out.push_str(&format!(
            "        busiest pods (masqueraded flows tracked): {pods}\n"
        ));
    }
    out
}

/// The pod share of `config` for a masqueraded verdict of traffic from `source`.
fn share_answer(config: &Config, action: Action, source: IpAddr) -> Option<ShareAnswer> {
    let share = config.pod_share;
    if action != Action::Masquerade || !share.is_limited() {
        return None;
    }
    if is_local_address(source) {
        // The node's own traffic leaves through OUTPUT, never the forward hook of the share.
        return None;
    }
    let rate = share.new_connection_rate;
    Some(ShareAnswer {
        connection_limit: share.connection_limit,
        new_connections_per_second: rate.map(|r| r.per_second),
        burst: rate.map(|r| r.burst),
        per_destination: rate.is_some_and(|r| r.per_destination),
        written: config.provenance.pod_share.clone().unwrap_or_default().to_string(),
        words: format!(
            "each pod address: {share}; a new connection over it is refused at once (TCP: a reset; other protocols: ICMP administratively prohibited)"
        ),
        live: None,
        busiest_pods: None,
    })
}

/// The CIDR that decided and where it was written.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DecisionAnswer {
    cidr: String,
    /// `nonMasqueradeCIDRs`, `forceMasqueradeCIDRs`, `masqueradeSourceCIDRs` or `link-local`.
    list: String,
    /// The file, line and column, or `the defaults`.
    written: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LiveAnswer {
    backend: crate::backend::BackendId,
    location: String,
    action: Action,
    /// The address the deciding rule SNATs to; absent for MASQUERADE.
    #[serde(skip_serializing_if = "Option::is_none")]
    snat_to: Option<IpAddr>,
    reason: LiveReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<RuleAnswer>,
    /// Rule numbers whose matches could not be judged (taken as not matching).
    unjudged: Vec<usize>,
    /// The rule before ours (another table's chain, a POSTROUTING rule above our jump) that
    /// decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    decided_before: Option<BeforeAnswer>,
    /// Rules before ours that this walk cannot judge: they may decide first.
    may_decide_first: Vec<BeforeAnswer>,
    /// Without --from: rules before ours that rewrite the source of traffic to DEST from the
    /// sources they name, the assumed one not among them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rewrite_for_other_sources: Vec<BeforeAnswer>,
    /// Our rules in another backend too: its nat hook runs as well, and when ours keep the
    /// source and a copy masquerades, the packet is masqueraded (`action` says so).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stale_copies: Vec<StaleAnswer>,
    /// The backend whose stale copy masquerades what our rules keep.
    #[serde(skip_serializing_if = "Option::is_none")]
    masqueraded_by_stale_copy: Option<crate::backend::BackendId>,
}

/// Our rules as another backend still holds them, and what they do with the packet.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StaleAnswer {
    backend: crate::backend::BackendId,
    location: String,
    /// What its own rules do with the packet (keep when none of them matches).
    action: Action,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<RuleAnswer>,
    /// The command that removes this copy alone.
    cleanup: String,
}

/// A rule that runs before ours.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BeforeAnswer {
    place: String,
    number: usize,
    text: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RuleAnswer {
    number: usize,
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
}

/// The source a packet is explained from: `--from`, else the plan's assumed source (a pod
/// address of the family's first source range), else none (any source).
fn source_address(given: Option<IpAddr>, config: &Config, family: Family) -> Option<IpAddr> {
    given.or_else(|| {
        Some(crate::plan::assumed_source(config, family)).filter(|src| !src.is_unspecified())
    })
}

/// The traffic asked about: its source, its destination, whether that is one of this node's
/// own addresses, and the interface it leaves by.
#[derive(Clone, Copy, Debug)]
struct Packet<'a> {
    src: IpAddr,
    /// No --from: `src` stands for the pods (or any source).
    source_assumed: bool,
    dst: IpAddr,
    local: bool,
    interface: Option<&'a str>,
}

#[cfg(test)]
impl Packet<'_> {
    /// To `dst`, not local, by no named interface, from the unspecified address until `from`.
    fn to(dst: IpAddr) -> Self {
        Packet {
            src: unspecified(if dst.is_ipv4() {
                Family::V4
            } else {
                Family::V6
            }),
            source_assumed: false,
            dst,
            local: false,
            interface: None,
        }
    }

    fn from(self, src: IpAddr) -> Self {
        Packet { src, ..self }
    }
}

/// The config's answer: `decide` on the family's plan, with the deciding entry's place.
fn config_answer(
    config: &Config,
    source_name: String,
    plan: &PlanOnNode,
    family: Family,
    packet: Packet<'_>,
) -> ConfigAnswer {
    let Packet {
        src,
        dst,
        interface,
        ..
    } = packet;
    let ruleset = plan_family(config, &plan.options, &plan.egress, family);
    let verdict = match interface {
        Some(interface) => crate::plan::decide_leaving(&ruleset, src, dst, interface),
        None => decide(&ruleset, src, dst),
    };
    let decision = match verdict.decision.map(|i| &ruleset.decisions[i]) {
        Some(d) => {
            let (list, written) = match d.origin {
                DecisionOrigin::LinkLocal => (
                    "link-local".to_string(),
                    "built in (masqLinkLocal is false)".to_string(),
                ),
                DecisionOrigin::NonMasqueradeCidr { index } => (
                    ListName::NonMasquerade.key().to_string(),
                    config.place(ListName::NonMasquerade, index).to_string(),
                ),
                DecisionOrigin::ForceMasqueradeCidr { index } => (
                    ListName::Force.key().to_string(),
                    config.place(ListName::Force, index).to_string(),
                ),
            };
            Some(DecisionAnswer {
                cidr: d.destination.to_string(),
                list,
                written,
            })
        }
        None if verdict.reason == Reason::SourceNotSelected => Some(DecisionAnswer {
            cidr: config
                .masquerade_source_cidrs
                .iter()
                .filter(|n| family.holds(n))
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            list: ListName::Sources.key().to_string(),
            written: config.place(ListName::Sources, 0).to_string(),
        }),
        None => None,
    };
    let snat_to = match (verdict.action, ruleset.masquerade.egress) {
        (Action::Masquerade, crate::plan::Egress::Snat(to)) => Some(to),
        _ => None,
    };
    ConfigAnswer {
        source: source_name,
        action: verdict.action,
        snat_to,
        reason: verdict.reason,
        decision,
        output_address_fallback: None,
        pod_share: share_answer(config, verdict.action, src),
    }
}

fn unspecified(family: Family) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Whether `addr` is an address of this node (in this network namespace), as the kernel
/// says: only a local address can be bound.
fn is_local_address(addr: IpAddr) -> bool {
    std::net::UdpSocket::bind((addr, 0)).is_ok()
}

/// The node resolved once, and the config to judge against (its story said on stderr).
fn resolve(args: &ExplainArgs) -> Result<(ResolvedNode, Judgement), Exit> {
    let given = match (&args.config_dir, &args.config) {
        (Some(dir), _) => Some(ConfigSource::Dir(dir.clone())),
        (None, Some(file)) => Some(ConfigSource::File(file.clone())),
        (None, None) => None,
    };
    let query = Query {
        applet: "explain",
        state_dir: args.state_dir.as_deref(),
        backend: &args.backend,
        rules: &args.rules,
        config: given,
        fallback: Some(ConfigSource::File(DEFAULT_CONFIG_PATH.into())),
    };
    let node = ResolvedNode::resolve(&query);
    let judgement = match node.judgement(&query)? {
        Some(judgement) => judgement,
        None => {
            eprintln!("ipmasq explain: no config to judge against (pass --config FILE)");
            return Err(Exit::Usage);
        }
    };
    if let Some(note) = &judgement.note {
        eprintln!("ipmasq explain: {}", printable(note));
    }
    Ok((node, judgement))
}

/// The config's answer for a packet: `decide` on the plan, except that without
/// --enable-ipv6 no IPv6 rules exist and that a local destination never meets the rules.
fn config_verdict(
    config: &Config,
    described: String,
    plan: &PlanOnNode,
    packet: Packet<'_>,
) -> ConfigAnswer {
    let Packet {
        dst,
        local,
        interface,
        ..
    } = packet;
    let family = if dst.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    };
    let managed = family == Family::V4 || plan.options.enable_ipv6;
    let mut answer = config_answer(config, described, plan, family, packet);
    if !managed {
        // Without --enable-ipv6 the agent writes no IPv6 rules at all.
        answer.action = Action::KeepSource;
        answer.snat_to = None;
        answer.reason = Reason::OtherFamily;
        answer.decision = None;
    } else if local {
        // Every backend lets local destinations leave before the decisions.
        answer.action = Action::KeepSource;
        answer.snat_to = None;
        answer.reason = Reason::LocalDestination;
        answer.decision = None;
    } else if let Some(interface) = interface.filter(|_| answer.action == Action::Masquerade) {
        // As `decide_leaving`: the rewriting rules carry the interface match.
        if config.output_interfaces.is_empty()
            || config
                .output_interfaces
                .iter()
                .any(|p| p.matches(interface))
        {
            return answer;
        }
        answer.action = Action::KeepSource;
        answer.snat_to = None;
        answer.reason = Reason::InterfaceNotSelected;
    }
    answer
}

/// What the config is planned with on this node: the flags in force, and beside them (never
/// in them) the node fact the plan takes, the output addresses resolved here.
#[derive(Default)]
struct PlanOnNode {
    options: PlanOptions,
    egress: ResolvedEgress,
    /// Each family that masquerades because the node lacks its output address, and why.
    fallback: Vec<(Family, String)>,
}

/// The plan the config is judged with on this node: the flags in force, and the output
/// addresses resolved here, with why a family masquerades instead when the node lacks its.
fn plan_on_node(flags: &crate::cli::RuleFlags, config: &Config) -> PlanOnNode {
    let options = PlanOptions {
        chain: flags.masq_chain.clone(),
        random_fully: flags.random_fully,
        to_ports: flags.to_ports.clone(),
        // The config is judged with the flag already: its value is the one in force.
        enable_ipv6: config.enable_ipv6,
    };
    let node = super::node_egress(&options, config);
    if let Some(unread) = &node.unread {
        eprintln!(
            "ipmasq explain: {}; the output address is judged unresolved",
            printable(unread)
        );
    }
    PlanOnNode {
        options,
        egress: node.egress,
        fallback: node.fallback,
    }
}

/// Runs `ipmasq explain`.
pub fn run(args: &ExplainArgs) -> Exit {
    let (node, judgement) = match resolve(args) {
        Ok(resolved) => resolved,
        Err(exit) => return exit,
    };
    let config_file = file_not_in_force(&node, &judgement);
    let config = &judgement.config;
    let dst = args.destination;
    let family = if dst.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    };
    if args.from.is_some_and(|s| s.is_ipv4() != dst.is_ipv4()) {
        eprintln!("ipmasq explain: --from and DEST must be of the same IP family");
        return Exit::Usage;
    }
    let plan = plan_on_node(&node.flags, config);
    let src = source_address(args.from, config, family);
    let packet_src = src.unwrap_or_else(|| unspecified(family));
    let local = is_local_address(dst);
    let (interface, interface_from) = out_interface(args, dst, local);
    let packet = Packet {
        src: packet_src,
        source_assumed: args.from.is_none(),
        dst,
        local,
        interface: interface.as_deref(),
    };
    let mut config_verdict = config_verdict(config, judgement.described(), &plan, packet);
    if config_verdict.action == Action::Masquerade {
        config_verdict.output_address_fallback = plan
            .fallback
            .iter()
            .find_map(|(of, reason)| (*of == family).then(|| reason.clone()));
    }
    let inspected = (!args.no_live).then(|| {
        node.inspect(family)
            .map(|read| read.map(|live| live.inspection))
    });
    let (live, live_unavailable) = live_part(&node, inspected.as_ref(), family, packet);
    let agree = live.as_ref().map(|l| l.action == config_verdict.action);
    let outcome = match (agree, config_verdict.action) {
        (Some(false), _) => "disagreement",
        (_, Action::Masquerade) => "masquerade",
        (_, Action::KeepSource) => "keep-source",
    };
    if let (Some(share), false) = (config_verdict.pod_share.as_mut(), local || args.no_live) {
        share.live = match &inspected {
            Some(Ok(Some(inspection))) => inspection.pod_share.clone(),
            _ => None,
        };
        share.busiest_pods = crate::conntrack::busiest::read(family).ok();
    }
    let (conntrack, conntrack_unavailable) = if local || args.no_live {
        (None, None)
    } else {
        let ruleset = plan_family(config, &plan.options, &plan.egress, family);
        flows_answer(
            family,
            packet,
            inspected.as_ref(),
            &ruleset,
            &plan.options.to_ports,
        )
    };
    let report = ExplainReport {
        schema_version: 1,
        destination: dst,
        source: src,
        source_assumed: args.from.is_none(),
        out_interface: interface,
        out_interface_from: interface_from,
        family: family.to_string(),
        outcome,
        config: config_verdict,
        live,
        live_unavailable,
        agree,
        conntrack,
        conntrack_unavailable,
        config_file,
    };
    print!("{}", rendered(&report, args));
    match outcome {
        "disagreement" => Exit::Disagreement,
        "masquerade" => Exit::Ok,
        _ => Exit::Kept,
    }
}

/// The report in the format asked for; text fits the terminal's width.
fn rendered(report: &ExplainReport, args: &ExplainArgs) -> String {
    match args.output {
        OutputFormat::Json => to_json(report),
        OutputFormat::Yaml => to_yaml(report),
        OutputFormat::Text => crate::terminal::fit(
            &to_text(report, &Styler::for_stdout(args.color)),
            crate::terminal::output_width(),
            BODY_INDENT,
        ),
    }
}

/// The live rules' answer, or why there is none (said on stderr too).
fn live_part(
    node: &ResolvedNode,
    inspected: Option<&Result<Option<crate::backend::Inspection>, crate::backend::BackendError>>,
    family: Family,
    packet: Packet<'_>,
) -> (Option<LiveAnswer>, Option<String>) {
    let (live, unavailable) = match inspected {
        None => (None, None),
        Some(Ok(Some(inspection))) => {
            let stale = node.stale_copies(&[family]);
            (Some(live_answer(node, inspection, &stale, packet)), None)
        }
        Some(Ok(None)) => (None, Some(format!("{family} tools are not installed"))),
        Some(Err(err)) => (None, Some(err.to_string())),
    };
    if let Some(reason) = &unavailable {
        let reason = printable(reason);
        eprintln!("ipmasq explain: live rules not read: {reason}; answering from the config alone (pass --no-live to skip them)");
    }
    (live, unavailable)
}

/// The tracked flows to `dst` that contradict the rules in force: the live ones when they
/// were read, else the config's plan.
fn flows_answer(
    family: Family,
    packet: Packet<'_>,
    inspected: Option<&Result<Option<crate::backend::Inspection>, crate::backend::BackendError>>,
    ruleset: &crate::plan::Ruleset,
    to_ports: &crate::plan::ToPorts,
) -> (Option<super::flows::FlowsAnswer>, Option<String>) {
    let Packet { dst, interface, .. } = packet;
    let planned = crate::conntrack::judge::PlannedRules::new(ruleset);
    let rules_in_force: &dyn crate::conntrack::judge::Decides = match inspected {
        Some(Ok(Some(inspection))) => inspection,
        _ => &planned,
    };
    match super::flows::contradicting(family, dst, rules_in_force, interface, to_ports) {
        Ok(answer) => (Some(answer), None),
        Err(err) => (
            None,
            Some(format!("the conntrack table was not read: {err}")),
        ),
    }
}

/// The interface traffic to `dst` leaves by: `--out-interface`, else the kernel's route
/// (none for a local destination, or without a route); and where it came from.
fn out_interface(
    args: &ExplainArgs,
    dst: IpAddr,
    local: bool,
) -> (Option<String>, Option<&'static str>) {
    if let Some(given) = &args.out_interface {
        return (Some(given.clone()), Some("flag"));
    }
    if local {
        return (None, None);
    }
    match crate::addresses::Routes::open().and_then(|mut routes| routes.interface(dst)) {
        Ok(Some(found)) => (Some(found), Some("route")),
        _ => (None, None),
    }
}

/// The live rules' answer from the backend in use (the running agent's, when the mode is left
/// to auto).
fn live_answer(
    node: &ResolvedNode,
    inspection: &crate::backend::Inspection,
    stale: &[StaleCopy],
    packet: Packet<'_>,
) -> LiveAnswer {
    let Packet {
        src,
        source_assumed,
        dst,
        local,
        interface,
    } = packet;
    let backend = node.backend();
    let names = crate::plan::Names::new(node.flags.masq_chain.clone());
    let LiveVerdict {
        action,
        rule: rule_index,
        reason,
        unjudged,
        decided_before,
        may_decide_first,
    } = inspection.evaluate_leaving(src, dst, local, interface);
    let before = |(stage, index): (usize, usize)| {
        let stage = &inspection.before[stage];
        let rule = &stage.rules[index];
        BeforeAnswer {
            place: stage.place.clone(),
            number: rule.number,
            text: rule.text.clone(),
        }
    };
    let rule = rule_index.map(|index| rule_answer(&inspection.rules[index]));
    let snat_to = match rule_index.map(|i| &inspection.rules[i].verdict) {
        Some(crate::backend::RuleVerdict::Masquerade { snat_to, .. }) => *snat_to,
        _ => None,
    };
    let rewrite_for_other_sources = if source_assumed {
        inspection.rewrites_for_other_sources(src, dst)
    } else {
        Vec::new()
    };
    let stale_copies: Vec<StaleAnswer> = stale
        .iter()
        .map(|copy| stale_answer(copy, &names, packet))
        .collect();
    // The first nat hook that rewrites the source decides: a copy that masquerades what ours
    // keep masquerades the packet.
    let masqueraded_by_stale_copy = stale_copies
        .iter()
        .find(|c| c.action == Action::Masquerade && action == Action::KeepSource)
        .map(|c| c.backend);
    LiveAnswer {
        backend: backend.id(),
        location: backend.id().location(&names),
        action: if masqueraded_by_stale_copy.is_some() {
            Action::Masquerade
        } else {
            action
        },
        masqueraded_by_stale_copy,
        snat_to,
        reason,
        rule,
        unjudged: unjudged
            .into_iter()
            .map(|i| inspection.rules[i].number)
            .collect(),
        decided_before: decided_before.map(before),
        may_decide_first: may_decide_first.into_iter().map(before).collect(),
        rewrite_for_other_sources: rewrite_for_other_sources.into_iter().map(before).collect(),
        stale_copies,
    }
}

fn rule_answer(rule: &crate::backend::LiveRule) -> RuleAnswer {
    RuleAnswer {
        number: rule.number,
        text: rule.text.clone(),
        comment: rule.comment.clone(),
        packets: rule.counters.map(|c| c.packets),
        bytes: rule.counters.map(|c| c.bytes),
    }
}

/// What a stale copy of our rules does with the packet: its own rules only (what runs before
/// it is what runs before ours, judged there).
fn stale_answer(copy: &StaleCopy, names: &crate::plan::Names, packet: Packet<'_>) -> StaleAnswer {
    let walked =
        copy.inspection
            .evaluate_leaving(packet.src, packet.dst, packet.local, packet.interface);
    let rule = walked.rule.map(|index| &copy.inspection.rules[index]);
    StaleAnswer {
        backend: copy.backend,
        location: copy.backend.location(names),
        action: match rule {
            Some(_) => walked.action,
            None => Action::KeepSource,
        },
        rule: rule.map(rule_answer),
        cleanup: StaleCopy::cleanup_command(copy.backend),
    }
}

/// Where the body of a report line starts (`config  `, `live    `): a wrapped line goes on
/// there.
const BODY_INDENT: usize = 8;

fn action_word(action: Action, snat_to: Option<IpAddr>) -> String {
    match (action, snat_to) {
        (Action::Masquerade, Some(to)) => format!("SNAT (the source becomes {to})"),
        (Action::Masquerade, None) => "MASQUERADE (the source becomes the node's address)".into(),
        (Action::KeepSource, _) => "keep the source address".into(),
    }
}

fn to_text(report: &ExplainReport, style: &Styler) -> String {
    let mut out = String::new();
    let from = match (report.source, report.source_assumed) {
        (Some(src), false) => format!("from {src}"),
        (Some(src), true) => {
            format!("from {src} (a pod address of masqueradeSourceCIDRs; set --from to choose)")
        }
        (None, _) => "from any source".to_string(),
    };
    out.push_str(&format!(
        "{} {from} ({})\n\n",
        style.bold(&format!("traffic to {}", report.destination)),
        report.family
    ));
    let c = &report.config;
    out.push_str(&format!(
        "{}  {}: {}\n",
        style.bold("config"),
        printable(&c.source),
        action_word(c.action, c.snat_to)
    ));
    let why = match (&c.decision, c.reason) {
        (_, Reason::OtherFamily) => {
            "the agent manages no rules of this family (neither --enable-ipv6 nor enableIPv6: true)"
                .to_string()
        }
        (_, Reason::LocalDestination) => {
            "it is an address of this node: local traffic is never masqueraded".to_string()
        }
        (Some(d), Reason::SourceNotSelected) => format!(
            "the source is outside {} [{}] ({})",
            d.list, d.cidr, d.written
        ),
        (Some(d), _) => format!(
            "decided by {} in {} ({}), the longest matching prefix",
            d.cidr, d.list, d.written
        ),
        (_, Reason::InterfaceNotSelected) => format!(
            "it leaves {}, which outputInterfaces does not list: no rule rewrites it",
            report.out_interface.as_deref().unwrap_or("?")
        ),
        (None, _) => "no listed CIDR holds it: everything else is masqueraded".to_string(),
    };
    out.push_str(&format!("        {}\n", printable(&why)));
    if let Some(file) = &report.config_file {
        out.push_str(&format!(
            "        {}\n",
            style.warning(&printable(&file_words(file)))
        ));
    }
    if let Some(reason) = &c.output_address_fallback {
        out.push_str(&format!(
            "        {}\n",
            style.warning(&printable(&format!("output address fallback: {reason}")))
        ));
    }
    if let Some(share) = &c.pod_share {
        out.push_str(&share_words(share));
    }
    out.push_str(&live_text(report, style));
    if let Some(flows) = &report.conntrack {
        out.push_str(&super::flows::text(flows, report.destination, style));
    } else if let Some(reason) = &report.conntrack_unavailable {
        out.push_str(&format!("{}  {}\n", style.bold("flows"), printable(reason)));
    }
    out.push('\n');
    let verdict = match report.outcome {
        "disagreement" => style.error(
            "DISAGREEMENT: the live rules do not do what the config says (is the agent running and in sync? see `ipmasq show`)",
        ),
        "masquerade" => style.success("masqueraded"),
        _ => style.success("source kept"),
    };
    out.push_str(&format!("verdict: {verdict}\n"));
    out
}

/// A stale copy of our rules: what it does with the traffic, and the command that removes it.
fn stale_words(copy: &StaleAnswer) -> String {
    let does = match &copy.rule {
        Some(rule) => format!(
            "{} by its rule {}: {}",
            action_word(copy.action, None),
            rule.number,
            rule.text
        ),
        None => "none of its rules matches".to_string(),
    };
    format!(
        "{} also holds our rules ({}), and its nat hook runs too: {does}; remove that stale copy with `{}`",
        copy.backend, copy.location, copy.cleanup
    )
}

/// Why the file on disk is not the config explained, and what to run.
fn file_words(file: &FileNotInForce) -> String {
    let digest = file
        .digest
        .as_deref()
        .map(|d| format!(" (sha256 {})", &d[..d.len().min(12)]))
        .unwrap_or_default();
    match file.state {
        "rejected" => format!(
            "this is the config in force, the last good one: the agent REJECTED the file now at {}{digest}, so the lines cited may not be in it; `ipmasq show` says why, `ipmasq validate {}` checks it",
            file.path, file.path
        ),
        _ => format!(
            "this is the config in force: the file at {} has changed since the agent read it{digest}, and the agent has not judged it yet",
            file.path
        ),
    }
}

/// The live rules' answer: the backend, the rule (or what ran before us) that decided, and
/// what could not be judged.
fn live_text(report: &ExplainReport, style: &Styler) -> String {
    let mut out = String::new();
    if let Some(live) = &report.live {
        out.push_str(&format!(
            "{}    {}, {}: {}\n",
            style.bold("live"),
            live.backend,
            printable(&live.location),
            action_word(live.action, live.snat_to)
        ));
        let why = match (&live.rule, live.reason) {
            (_, LiveReason::NotInstalled) => "our rules are not installed".to_string(),
            (_, LiveReason::NoEntryJump) => "nothing sends traffic to our rules".to_string(),
            (_, LiveReason::DecidedBefore) => match &live.decided_before {
                Some(b) => format!(
                    "decided before our rules, by {} rule {}: {}",
                    b.place, b.number, b.text
                ),
                None => "decided before our rules".to_string(),
            },
            (_, LiveReason::LocalDestination) => {
                "it is an address of this node: local destinations leave before our rules"
                    .to_string()
            }
            (Some(rule), _) => {
                let counters = match (rule.packets, rule.bytes) {
                    (Some(p), Some(b)) => format!(" [{p} packets, {b} bytes]"),
                    _ => String::new(),
                };
                format!("rule {}: {}{counters}", rule.number, rule.text)
            }
            (None, _) => "no rule matched: the traffic leaves untouched".to_string(),
        };
        let why = match live.masqueraded_by_stale_copy {
            Some(other) => format!(
                "our rules keep the source ({why}), but the stale copy in {other} masquerades it"
            ),
            None => why,
        };
        out.push_str(&format!("        {}\n", printable(&why)));
        for copy in &live.stale_copies {
            out.push_str(&format!(
                "        {}\n",
                style.error(&printable(&stale_words(copy)))
            ));
        }
        let runs_first = [
            (
                &live.rewrite_for_other_sources,
                "rewrites the source of this traffic from the sources it names (pass --from to judge one)",
            ),
            (
                &live.may_decide_first,
                "may decide (explain cannot judge it)",
            ),
        ];
        for (rules, what) in runs_first {
            for b in rules {
                out.push_str(&format!(
                    "        {} rule {} runs first and {what}: {}\n",
                    printable(&b.place),
                    b.number,
                    printable(&b.text)
                ));
            }
        }
        if !live.unjudged.is_empty() {
            out.push_str(&format!(
                "        rules {:?} have matches explain cannot judge; taken as not matching\n",
                live.unjudged
            ));
        }
    } else if let Some(reason) = &report.live_unavailable {
        out.push_str(&format!(
            "{}    not read: {}\n",
            style.bold("live"),
            printable(reason)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{check_text, Options};

    fn config(text: &str) -> Config {
        check_text(text, &Options::default())
            .config()
            .cloned()
            .expect("valid")
    }

    /// The config's answer for traffic from a pod address to `dst`.
    fn ask_from_a_pod(config: &Config, dst: &str) -> ConfigAnswer {
        config_answer(
            config,
            "cfg".into(),
            &PlanOnNode::default(),
            Family::V4,
            Packet::to(dst.parse().unwrap()).from("10.244.0.5".parse().unwrap()),
        )
    }

    #[test]
    fn the_config_answer_names_the_longest_prefix_and_where_it_was_written() {
        let config = config(
            "nonMasqueradeCIDRs: [10.0.0.0/8, 10.8.1.0/24]\nforceMasqueradeCIDRs:\n  - 10.8.0.0/16\n",
        );
        let ask = |dst: &str| ask_from_a_pod(&config, dst);
        let forced = ask("10.8.3.4");
        assert_eq!(forced.action, Action::Masquerade);
        let d = forced.decision.unwrap();
        assert_eq!(
            (d.cidr.as_str(), d.list.as_str()),
            ("10.8.0.0/16", "forceMasqueradeCIDRs")
        );
        assert_eq!(d.written, "line 3, column 5");
        let nested = ask("10.8.1.9");
        assert_eq!(nested.action, Action::KeepSource);
        assert_eq!(nested.decision.unwrap().cidr, "10.8.1.0/24");
        let outside = ask("8.8.8.8");
        assert_eq!(outside.action, Action::Masquerade);
        assert!(outside.decision.is_none());
        assert_eq!(ask("169.254.1.1").decision.unwrap().list, "link-local");
    }

    #[test]
    fn a_masqueraded_answer_names_the_pod_share_and_a_kept_one_does_not() {
        let config = config(
            "nonMasqueradeCIDRs: [10.0.0.0/8]\npodNewConnectionRate: 300/s\npodConnectionLimit: 64\n",
        );
        let ask = |dst: &str| ask_from_a_pod(&config, dst);
        let share = ask("8.8.8.8")
            .pod_share
            .expect("masqueraded: the share applies");
        assert_eq!(share.connection_limit, Some(64));
        assert_eq!(share.new_connections_per_second, Some(300));
        assert_eq!(
            share.burst,
            Some(6),
            "the default burst: a fiftieth of the rate"
        );
        assert_eq!(share.written, "line 2, column 1");
        assert!(
            share
                .words
                .contains("at most 64 connections at once, 300/s burst 6 new"),
            "{}",
            share.words
        );
        assert!(
            ask("10.1.2.3").pod_share.is_none(),
            "kept traffic is not limited"
        );
    }

    #[test]
    fn a_source_outside_the_scope_is_kept_and_the_default_source_is_a_pod() {
        let config = config("masqueradeSourceCIDRs: [10.244.0.0/16]\n");
        assert_eq!(
            source_address(None, &config, Family::V4),
            Some("10.244.0.1".parse().unwrap())
        );
        assert_eq!(source_address(None, &config, Family::V6), None);
        let answer = config_answer(
            &config,
            "cfg".into(),
            &PlanOnNode::default(),
            Family::V4,
            Packet::to("8.8.8.8".parse().unwrap()).from("192.168.5.5".parse().unwrap()),
        );
        assert_eq!(answer.action, Action::KeepSource);
        assert_eq!(answer.reason, Reason::SourceNotSelected);
        assert_eq!(answer.decision.unwrap().list, "masqueradeSourceCIDRs");
    }
}
