//! `ipmasq show`: the live chain of this node as tables (or JSON/YAML), read through the same
//! backend code the agent uses, and with `--config` a verdict: in sync, or every difference.
//!
//! JSON/YAML document (schemaVersion 1; fields are only ever added):
//! `{schemaVersion, backend, backendChoice, chain, installed, families: [{family, installed,
//! jump: {present, copies, positions, postroutingRules}, rules: [{number, action, destination,
//! protocol, toPorts, randomFully, probability, comment, other, packets, bytes, rule}]}],
//! sync: null | {config, inSync, differences: [{family, kind, position, detail}]},
//! configRejected?: {path, digest?, diagnostics, rejectedAt}}`.

use super::node::{Judgement, Query, ResolvedNode, StaleCopy};
use super::{plan_options, Exit};
use crate::agent::state::{AgentLookup, AgentState, RejectedRecord};
use crate::backend::{
    BackendId, Difference, HookStatus, Inspected, Inspection, LiveRule, RuleVerdict,
};
use crate::cli::{OutputFormat, ShowArgs};
use crate::config;
use crate::conntrack::health::ConntrackHealth;
use crate::output::{plural, printable, to_json, to_yaml, Styler};
use crate::plan::{plan_family, Family};
use crate::terminal::{fit, CLASSIC_WIDTH};
use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Padding, Style, Width};

/// The continuation indent of a wrapped report line: past its label (`backend: `, `config:  `).
const LABEL_WIDTH: usize = 9;
/// Index of the options column in the rule table.
const OPTIONS_COLUMN: usize = 4;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShowReport {
    pub schema_version: u32,
    pub backend: BackendId,
    pub backend_choice: String,
    pub chain: String,
    /// Where our rules live in this backend, for people.
    pub location: String,
    /// Whether our chain exists in any family.
    pub installed: bool,
    pub families: Vec<FamilyReport>,
    pub sync: Option<SyncVerdict>,
    /// Other backends (iptables variants) that also hold our chain or jumps: a node where two
    /// agents, or an old and a new mode, left rules in both.
    pub also_installed_in: Vec<Elsewhere>,
    /// The running agent this report was judged against, if one was found.
    pub agent: Option<AgentState>,
    /// A state file no running agent backs: the last state of an agent that died.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_agent: Option<AgentState>,
    /// The config the running agent refuses: the file it reads is not the config in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_rejected: Option<RejectedRecord>,
    /// The node's conntrack table: fill and failures (absent when the kernel did not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<ConntrackHealth>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Elsewhere {
    pub backend: BackendId,
    pub families: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FamilyReport {
    pub family: String,
    pub installed: bool,
    /// How traffic reaches our rules: `{"hooked": {"skipsLocal": true}}`, `"not-hooked"`, …
    pub entry: HookStatus,
    /// What a packet meets at the same hook before our rules.
    pub before: Vec<BeforeReport>,
    pub jump: JumpReport,
    pub rules: Vec<RuleReport>,
    /// The pod share's rules (`podConnectionLimit`, `podNewConnectionRate`): whether every
    /// part is there and what each limit refused; absent when there is none of ours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_share: Option<crate::plan::live::LiveShare>,
    /// With a pod share: the pod addresses holding the most masqueraded connections (one
    /// conntrack dump; absent when it could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest_pods: Option<crate::conntrack::busiest::Busiest>,
}

/// Rules that run before ours: another table's nat postrouting chain, or POSTROUTING's rules
/// above our jump.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BeforeReport {
    pub place: String,
    pub priority: Option<i64>,
    pub rules: Vec<RuleReport>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JumpReport {
    pub present: bool,
    pub copies: usize,
    /// 1-based positions in POSTROUTING.
    pub positions: Vec<usize>,
    pub postrouting_rules: usize,
}

/// One live rule in words, for the table and the JSON (whose `action` keeps upstream's
/// words on every backend; `verdict` is the typed one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleWords {
    /// `keep`, `masquerade` or `foreign`.
    pub verdict: &'static str,
    /// `RETURN`, `MASQUERADE`, or what a foreign rule does.
    pub action: String,
    /// Source match: CIDRs joined by `,`, with a leading `!` when negated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub destination: Option<String>,
    pub protocol: Option<String>,
    /// `-o`/`oifname`: only traffic leaving a matching interface (`eth+`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_interface: Option<String>,
    pub to_ports: Option<String>,
    pub random_fully: bool,
    /// The share of flows, as iptables prints it (`0.46929256292`).
    pub probability: Option<String>,
    pub comment: Option<String>,
    /// Matches no tool here can judge, as the backend prints them.
    pub other: Vec<String>,
}

impl RuleWords {
    fn of(rule: &LiveRule) -> Self {
        let m = &rule.matches;
        let mut words = RuleWords {
            source: m.source.as_ref().map(ToString::to_string),
            destination: m.destination.as_ref().map(ToString::to_string),
            protocol: (!m.protocols.is_empty()).then(|| m.protocols.join(",")),
            out_interface: m.output_interface.as_ref().map(ToString::to_string),
            comment: rule.comment.clone(),
            other: m.unjudged.clone(),
            ..RuleWords::default()
        };
        match &rule.verdict {
            RuleVerdict::Keep => {
                words.verdict = "keep";
                words.action = "RETURN".into();
            }
            RuleVerdict::Masquerade {
                snat_to,
                ports,
                weight,
                fully_random,
            } => {
                words.verdict = "masquerade";
                words.action = match snat_to {
                    Some(address) => format!("SNAT {address}"),
                    None => "MASQUERADE".into(),
                };
                words.to_ports = ports.map(|(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                });
                words.probability = weight.map(|w| format!("{:.11}", w.share()));
                words.random_fully = *fully_random;
            }
            RuleVerdict::Foreign(what) => {
                words.verdict = "foreign";
                words.action = what.clone();
            }
        }
        words
    }

    /// The ACTION column in the backend's own words.
    fn action_for(&self, backend: BackendId) -> String {
        if backend.is_iptables() {
            return self.action.clone();
        }
        match self.verdict {
            "keep" => "return".into(),
            "masquerade" => "masquerade".into(),
            _ => self.action.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    pub number: usize,
    #[serde(flatten)]
    pub view: RuleWords,
    pub packets: Option<u64>,
    pub bytes: Option<u64>,
    /// The rule as the backend prints it.
    pub rule: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncVerdict {
    pub config: String,
    /// The config with its story (`PATH (as the agent read it at TIME, sha256 …)`).
    pub judged_against: String,
    /// Where the config came from, when that needs saying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Families masquerading because this node holds no address their output address names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output_address_fallback: Vec<String>,
    pub in_sync: bool,
    pub differences: Vec<DifferenceReport>,
    /// Flags given here that differ from the running agent's: `(flag, here, agent)`.
    pub flags_differ_from_agent: Vec<FlagDifference>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlagDifference {
    pub flag: String,
    pub here: String,
    pub agent: String,
}

/// One way the live rules differ from the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DifferenceReport {
    pub family: String,
    /// `chain-missing`, `missing-rule`, `extra-rule`, `out-of-order`, `jump-missing`,
    /// `jump-duplicated`, `jump-stale`, `local-skip-missing`, `hook-differs`, `set-differs` or
    /// `table-unmarked`.
    pub kind: &'static str,
    /// Rule number (in the plan for missing rules, live otherwise), or POSTROUTING position.
    pub position: Option<usize>,
    pub detail: String,
}

impl From<&Difference> for DifferenceReport {
    fn from(d: &Difference) -> Self {
        DifferenceReport {
            family: d.family.to_string(),
            kind: d.kind.as_str(),
            position: d.position,
            detail: d.detail.clone(),
        }
    }
}

fn rule_report(rule: &LiveRule) -> RuleReport {
    RuleReport {
        number: rule.number,
        view: RuleWords::of(rule),
        packets: rule.counters.map(|c| c.packets),
        bytes: rule.counters.map(|c| c.bytes),
        rule: rule.text.clone(),
    }
}

fn family_report(family: Family, live: &Inspection) -> FamilyReport {
    let rules = live.rules.iter().map(rule_report).collect();
    let before = live
        .before
        .iter()
        .map(|stage| BeforeReport {
            place: stage.place.clone(),
            priority: stage.priority,
            rules: stage.rules.iter().map(rule_report).collect(),
        })
        .collect();
    FamilyReport {
        family: family.to_string(),
        installed: live.installed,
        entry: live.entry(),
        before,
        jump: JumpReport {
            present: !live.entry_jumps.is_empty(),
            copies: live.entry_jumps.len(),
            positions: live.entry_jumps.iter().filter_map(|j| j.position).collect(),
            postrouting_rules: live.hook_rules,
        },
        rules,
        pod_share: live.pod_share.clone(),
        busiest_pods: live
            .pod_share
            .as_ref()
            .and_then(|_| crate::conntrack::busiest::read(family).ok()),
    }
}

/// The pod share's line: complete or not, and what each limit refused.
fn share_text(share: &crate::plan::live::LiveShare, style: &Styler) -> String {
    let state = if share.installed {
        "installed".to_string()
    } else {
        style.error("incomplete (a chain or the entry jump is missing)")
    };
    let refused: Vec<String> = share
        .refusals
        .iter()
        .map(|r| {
            let over = match r.limit {
                crate::plan::live::ShareLimit::Rate => "the rate",
                crate::plan::live::ShareLimit::Connections => "the connection limit",
            };
            format!("{} over {over}", r.refused)
        })
        .collect();
    if refused.is_empty() {
        format!("  pod share: {state}\n")
    } else {
        format!(
            "  pod share: {state}; new connections refused: {}\n",
            refused.join(", ")
        )
    }
}

/// The pods holding the most masqueraded connections, busiest first.
fn busiest_text(busiest: &crate::conntrack::busiest::Busiest) -> String {
    match busiest.listed() {
        None => "  busiest pods: none holds a masqueraded connection\n".to_string(),
        Some(pods) => format!("  busiest pods (masqueraded flows tracked): {pods}\n"),
    }
}

/// 1234567 → "1.2M" (units of 1000, as `iptables -L -v`): counters stay narrow in an
/// 80-column table; JSON and YAML carry the exact values.
fn human(n: Option<u64>) -> String {
    let Some(n) = n else { return "-".into() };
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000_000, "T"),
        (1_000_000_000, "G"),
        (1_000_000, "M"),
        (1_000, "K"),
    ];
    for (size, unit) in UNITS {
        // From 99.95% of a unit up, so 999,999 prints as 1.0M rather than 1000.0K.
        if u128::from(n) * 10_000 >= u128::from(size) * 9_995 {
            return format!("{:.1}{unit}", n as f64 / size as f64);
        }
    }
    n.to_string()
}

/// Tables fit a classic terminal, or a narrower one, unless `--wide` asks for comments.
fn table_width(width: usize) -> usize {
    width.min(CLASSIC_WIDTH)
}

fn table(family: &FamilyReport, wide: bool, backend: BackendId, width: usize) -> String {
    let mut builder = Builder::default();
    let mut header = vec![
        "#",
        "ACTION",
        "DESTINATION",
        "PORTS",
        "OPTIONS",
        "PKTS",
        "BYTES",
    ];
    if wide {
        header.push("COMMENT");
    }
    builder.push_record(header);
    let mut options_width = 0;
    for rule in &family.rules {
        let v = &rule.view;
        let ports = match (&v.protocol, &v.to_ports) {
            (Some(p), Some(t)) => format!("{p} {t}"),
            (Some(p), None) => p.clone(),
            (None, Some(t)) => t.clone(),
            (None, None) => String::new(),
        };
        let mut options = Vec::new();
        if let Some(interface) = &v.out_interface {
            options.push(format!("out {interface}"));
        }
        if v.random_fully {
            options.push("random-fully".to_string());
        }
        if let Some(p) = &v.probability {
            let short: f64 = p.parse().unwrap_or(0.0);
            options.push(if wide {
                format!("p={p}")
            } else {
                format!("p={short:.4}")
            });
        }
        options.extend(v.other.iter().cloned());
        let options = options.join(" ");
        options_width = options_width.max(options.chars().count());
        let mut row = vec![
            rule.number.to_string(),
            v.action_for(backend),
            v.destination.clone().unwrap_or_else(|| "any".into()),
            ports,
            options,
            human(rule.packets),
            human(rule.bytes),
        ];
        if wide {
            row.push(v.comment.clone().unwrap_or_default());
        }
        builder.push_record(row.iter().map(|cell| printable(cell).into_owned()));
    }
    let mut table = builder.build();
    // kubectl-style: no rules, columns apart by two spaces.
    table.with(Style::blank());
    table.with(Padding::new(0, 1, 0, 0));
    let total = table.total_width();
    let fits = table_width(width);
    if !wide && total > fits {
        // Only the options column (long with --to-ports) wraps, at word boundaries.
        let target = options_width.saturating_sub(total - fits).max(12);
        table.modify(
            Columns::new(OPTIONS_COLUMN..=OPTIONS_COLUMN),
            Width::wrap(target).keep_words(true),
        );
    }
    // psql style pads the last column; trailing blanks only cost width.
    table
        .to_string()
        .lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect()
}

/// The report for people, every line but a `--wide` table's within `width` (tables at 80
/// columns at most).
fn to_text(report: &ShowReport, style: &Styler, wide: bool, width: usize) -> String {
    let fitted = |text: String| fit(&text, width, LABEL_WIDTH);
    let mut out = fitted(format!(
        "{} {} ({})\n{} {}\n",
        style.bold("backend:"),
        report.backend,
        report.backend_choice,
        style.bold("chain:  "),
        report.location
    ));
    for family in &report.families {
        out.push('\n');
        out.push_str(&family_text(report, family, style, Layout { wide, width }));
    }
    out.push_str(&fitted(agent_text(report, style)));
    if let Some(conntrack) = &report.conntrack {
        out.push_str(&fitted(conntrack_text(conntrack, style)));
    }
    if let Some(rejected) = &report.config_rejected {
        out.push_str(&fitted(rejected_text(
            rejected,
            report.agent.as_ref(),
            style,
        )));
    }
    if let Some(sync) = &report.sync {
        out.push_str(&fitted(sync_text(sync, style)));
    }
    for elsewhere in &report.also_installed_in {
        out.push_str(&fitted(elsewhere_text(report, elsewhere, style)));
    }
    if !report.installed {
        let missing = if report.backend.is_iptables() {
            format!(
                "no {} chain in the nat table of {}",
                report.chain, report.backend
            )
        } else {
            "no table ip ipmasq with its postrouting chain".to_string()
        };
        out.push_str(&fitted(format!(
            "\n{}\n",
            style.warning(&format!(
                "ip-masq-agent rules are not installed ({missing})"
            ))
        )));
    }
    out
}

/// How the text is laid out: `--wide` tables, and the width lines fit.
#[derive(Clone, Copy, Debug)]
struct Layout {
    wide: bool,
    width: usize,
}

/// One family: its state line and, when installed, its rule table.
fn family_text(
    report: &ShowReport,
    family: &FamilyReport,
    style: &Styler,
    layout: Layout,
) -> String {
    let Layout { wide, width } = layout;
    let name = style.bold(&format!("{}:", family.family));
    if !family.installed && !family.jump.present {
        return format!("{name} {}\n", style.warning("not installed"));
    }
    let chain_state = if family.installed {
        plural(family.rules.len(), "rule")
    } else {
        style.error("chain missing")
    };
    let entry = entry_text(report.backend, family, style);
    let mut out = format!("{name} {chain_state}; {entry}\n");
    if let Some(share) = &family.pod_share {
        out.push_str(&share_text(share, style));
    }
    if let Some(busiest) = &family.busiest_pods {
        out.push_str(&busiest_text(busiest));
    }
    for stage in &family.before {
        let priority = stage
            .priority
            .map(|p| format!(" (priority {p})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  runs first: {}{priority}, {}\n",
            printable(&stage.place),
            plural(stage.rules.len(), "rule")
        ));
        for rule in &stage.rules {
            out.push_str(&format!("    {}: {}\n", rule.number, printable(&rule.rule)));
        }
    }
    let mut out = fit(&out, width, LABEL_WIDTH);
    if family.installed {
        out.push_str(&table(family, wide, report.backend, width));
    }
    out
}

/// How traffic reaches our rules, in the backend's own words.
fn entry_text(backend: BackendId, family: &FamilyReport, style: &Styler) -> String {
    if backend.is_iptables() {
        iptables_entry_text(family, style)
    } else {
        nftables_entry_text(family, style)
    }
}

/// How POSTROUTING reaches our iptables chain.
fn iptables_entry_text(family: &FamilyReport, style: &Styler) -> String {
    let jump = &family.jump;
    match family.entry {
        HookStatus::NotHooked => style.error("no POSTROUTING jump to this chain"),
        HookStatus::Hooked { skips_local } => {
            let at = format!(
                "POSTROUTING jumps here at rule {} of {}",
                jump.positions.first().copied().unwrap_or(0),
                jump.postrouting_rules
            );
            if skips_local {
                at
            } else {
                style.error(&format!(
                    "{at}, for local destinations too (no `-m addrtype ! --dst-type LOCAL`)"
                ))
            }
        }
        HookStatus::HookedMoreThanOnce { copies, .. } => style.warning(&format!(
            "POSTROUTING jumps here {copies} times, at rules {:?} of {}",
            jump.positions, jump.postrouting_rules
        )),
    }
}

/// How our nftables chain is hooked at postrouting.
fn nftables_entry_text(family: &FamilyReport, style: &Styler) -> String {
    match family.entry {
        HookStatus::NotHooked => {
            style.error("the chain is not hooked at postrouting: nothing sends traffic to our rules")
        }
        HookStatus::Hooked { skips_local: true }
        | HookStatus::HookedMoreThanOnce {
            skips_local: true, ..
        } => {
            "hooked at postrouting; local destinations leave first".to_string()
        }
        HookStatus::Hooked { skips_local: false }
        | HookStatus::HookedMoreThanOnce {
            skips_local: false, ..
        } => style.error(
            "hooked at postrouting, but `fib daddr type local return` is not the first rule: local destinations are masqueraded too",
        ),
    }
}

/// The agent the verdict is judged against, or the stale state of one that died.
fn agent_text(report: &ShowReport, style: &Styler) -> String {
    if let Some(agent) = &report.agent {
        return format!(
            "\n{} pid {}, {}, config {} ({})\n",
            style.bold("agent:  "),
            agent.pid,
            agent.backend,
            printable(&agent.config),
            printable(&agent.config_source)
        );
    }
    match &report.stale_agent {
        Some(stale) => format!(
            "\n{} {}\n",
            style.bold("agent:  "),
            style.warning(&format!(
                "no agent running (stale state of an agent that died: pid {}, {})",
                stale.pid, stale.backend
            ))
        ),
        None => String::new(),
    }
}

/// The conntrack table's fill and failures since boot; a warning when it is nearly full.
fn conntrack_text(conntrack: &ConntrackHealth, style: &Styler) -> String {
    const LABEL: &str = "conntrack:";
    let text = format!(
        "{}\n{:width$} {}",
        conntrack.fill_text(),
        "",
        conntrack.failures_text(),
        width = LABEL.len()
    );
    let text = if conntrack.nearly_full() {
        style.warning(&text)
    } else {
        text
    };
    format!("\n{} {text}\n", style.bold(LABEL))
}

/// The config the running agent refuses: what, why, what stays in force, and the command
/// that shows every problem.
fn rejected_text(rejected: &RejectedRecord, agent: Option<&AgentState>, style: &Styler) -> String {
    let digest = rejected
        .digest
        .as_deref()
        .map(|d| format!(" (sha256 {})", short_digest(d)))
        .unwrap_or_default();
    let mut out = format!(
        "{} {} the agent refused {}{digest} at {}\n",
        style.bold("config: "),
        style.error("REJECTED:"),
        printable(&rejected.path),
        rejected.rejected_at
    );
    for problem in &rejected.diagnostics {
        out.push_str(&format!("  {}\n", printable(problem)));
    }
    let in_force = match agent.and_then(|a| a.config_read.as_ref()) {
        Some(record) => format!(
            "the last good config stays in force: {}{}, read at {}",
            printable(&record.path),
            record
                .digest
                .as_deref()
                .map(|d| format!(" (sha256 {})", short_digest(d)))
                .unwrap_or_default(),
            record.read_at
        ),
        None => "no config is in force: no rules are installed until it is fixed".to_string(),
    };
    out.push_str(&format!("  {in_force}\n"));
    out.push_str(&format!(
        "  {} {}\n",
        style.hint("next:"),
        validate_command(&rejected.path)
    ));
    out
}

/// The first 12 hex digits of a SHA-256, as the verdict line prints it.
fn short_digest(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

/// The command that checks a refused config: `ipmasq validate PATH`, or for a ConfigMap
/// (`configmap NAMESPACE/NAME key KEY (…)`) its manifest piped in.
fn validate_command(path: &str) -> String {
    match path
        .strip_prefix("configmap ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|name| name.split_once('/'))
    {
        Some((namespace, name)) => format!(
            "kubectl -n {} get configmap {} -o yaml | ipmasq validate -",
            printable(namespace),
            printable(name)
        ),
        None => format!("ipmasq validate {}", printable(path)),
    }
}

/// The verdict against a config: in sync, or every difference.
fn sync_text(sync: &SyncVerdict, style: &Styler) -> String {
    let mut out = String::new();
    if let Some(note) = &sync.note {
        out.push_str(&format!("{}\n", style.warning(&printable(note))));
    }
    for reason in &sync.output_address_fallback {
        out.push_str(&format!(
            "{}\n",
            style.warning(&printable(&format!("output address fallback: {reason}")))
        ));
    }
    for flag in &sync.flags_differ_from_agent {
        out.push_str(&format!(
            "{}\n",
            style.warning(&format!(
                "{} is {} here but {} in the running agent: this verdict is not the agent's",
                flag.flag, flag.here, flag.agent
            ))
        ));
    }
    let heading = style.bold(&format!("sync with {}:", printable(&sync.judged_against)));
    if sync.in_sync {
        out.push_str(&format!("{heading} {}\n", style.success("in sync")));
        return out;
    }
    out.push_str(&format!(
        "{heading} {}\n",
        style.error(&format!(
            "drifted ({})",
            plural(sync.differences.len(), "difference")
        ))
    ));
    for d in &sync.differences {
        out.push_str(&format!(
            "  {}: {}: {}\n",
            d.family,
            d.kind,
            printable(&d.detail)
        ));
    }
    out
}

/// Our rules in another backend too, and the command that removes that copy.
fn elsewhere_text(report: &ShowReport, elsewhere: &Elsewhere, style: &Styler) -> String {
    let why = if elsewhere.backend.is_iptables() == report.backend.is_iptables() {
        "rules in two variants mean two agents or a changed mode"
    } else {
        "rules of two backends mean two agents or a switch of --backend"
    };
    format!(
        "\n{}\n",
        style.error(&format!(
            "{} also exists in {} ({}): {why}; remove the stale copy with `{}`",
            report.chain,
            elsewhere.backend,
            elsewhere.families.join(", "),
            StaleCopy::cleanup_command(elsewhere.backend),
        ))
    )
}

/// Runs `ipmasq show`.
// Long: the node resolved once (backend, live rules of both families, the agent's state)
// feeds every part of one report; each part is a call, and the sequence is the report's order.
pub fn run(args: &ShowArgs) -> Exit {
    let query = Query {
        applet: "show",
        state_dir: args.state_dir.as_deref(),
        backend: &args.backend,
        rules: &args.rules,
        config: args.config.clone().map(config::ConfigSource::File),
        fallback: None,
    };
    let node = ResolvedNode::resolve(&query);
    let backend = node.backend();
    let mut lives = Vec::new();
    for family in Family::ALL {
        match node.inspect(family) {
            Ok(Some(live)) => lives.push((family, live)),
            Ok(None) => {}
            Err(err) => {
                eprintln!("ipmasq show: {err}");
                return Exit::for_backend_error(&err);
            }
        }
    }
    let also_installed_in = elsewhere(&node);
    let config_rejected = node
        .agent
        .running()
        .and_then(|agent| agent.config_rejected.clone());
    // An agent that has refused every config it read enforces none: nothing to judge by.
    let nothing_in_force = args.config.is_none()
        && node
            .agent
            .running()
            .is_some_and(|agent| agent.config_read.is_none() && config_rejected.is_some());
    let judgement = if nothing_in_force {
        Ok(None)
    } else {
        node.judgement(&query)
    };
    let sync = match judgement {
        Err(exit) => return exit,
        Ok(None) => None,
        Ok(Some(judgement)) => Some(sync_verdict(
            &node,
            &judgement,
            &lives,
            args.config.is_some(),
        )),
    };
    let flags = &node.flags;
    let families: Vec<FamilyReport> = lives
        .iter()
        .filter(|(family, live)| {
            *family == Family::V4 || live.inspection.holds_anything() || flags.config_flags.ipv6()
        })
        .map(|(family, live)| family_report(*family, &live.inspection))
        .collect();
    let (agent, stale_agent) = match &node.agent {
        AgentLookup::Running(state) => (Some(state.clone()), None),
        AgentLookup::Stale(state) => (None, Some(state.clone())),
        AgentLookup::Absent => (None, None),
    };
    let report = ShowReport {
        schema_version: 1,
        backend: backend.id(),
        backend_choice: node.selected.reason.clone(),
        chain: flags.masq_chain.to_string(),
        location: backend
            .id()
            .location(&crate::plan::Names::new(flags.masq_chain.clone())),
        installed: lives.iter().any(|(_, l)| l.inspection.installed),
        families,
        sync,
        also_installed_in,
        agent,
        stale_agent,
        config_rejected,
        conntrack: crate::conntrack::health::read()
            .ok()
            .map(|statistics| ConntrackHealth::from(&statistics)),
    };
    print_report(&report, args)
}

/// Prints the report as asked; the exit code says whether the rules are installed, in sync
/// with what is judged and alone on the node.
fn print_report(report: &ShowReport, args: &ShowArgs) -> Exit {
    let text = match args.output {
        OutputFormat::Json => to_json(report),
        OutputFormat::Yaml => to_yaml(report),
        OutputFormat::Text => to_text(
            report,
            &Styler::for_stdout(args.color),
            args.wide,
            crate::terminal::output_width(),
        ),
    };
    print!("{text}");
    if !report.installed {
        Exit::NotInstalled
    } else if report.sync.as_ref().is_some_and(|s| !s.in_sync)
        || !report.also_installed_in.is_empty()
        || report.config_rejected.is_some()
    {
        Exit::Failure
    } else {
        Exit::Ok
    }
}

/// The whole node: every other backend that holds our chain (or table) too.
fn elsewhere(node: &ResolvedNode) -> Vec<Elsewhere> {
    let mut found: Vec<Elsewhere> = Vec::new();
    for StaleCopy {
        backend: id,
        family,
        ..
    } in node.stale_copies(&Family::ALL)
    {
        match found.iter_mut().find(|e| e.backend == id) {
            Some(e) => e.families.push(family.to_string()),
            None => found.push(Elsewhere {
                backend: id,
                families: vec![family.to_string()],
            }),
        }
    }
    found
}

/// The live rules judged against a config: every difference, per planned family.
fn sync_verdict(
    node: &ResolvedNode,
    judgement: &Judgement,
    lives: &[(Family, Inspected)],
    config_given: bool,
) -> SyncVerdict {
    let backend = node.backend();
    let plan = plan_options(&node.flags);
    let super::NodeEgress {
        egress,
        fallback: output_address_fallback,
        unread,
    } = super::node_egress(&plan, &judgement.config);
    if let Some(unread) = &unread {
        eprintln!(
            "ipmasq show: {}; the output address is judged unresolved",
            printable(unread)
        );
    }
    let mut differences = Vec::new();
    for family in crate::plan::families(&plan, &judgement.config) {
        let desired = plan_family(&judgement.config, &plan, &egress, family);
        let live = lives
            .iter()
            .find(|(f, _)| *f == family)
            .map(|(_, l)| l.clone())
            .unwrap_or_default();
        differences.extend(
            backend
                .compare(&desired, &live)
                .iter()
                .map(DifferenceReport::from),
        );
    }
    let flags_differ_from_agent = match (node.agent.running(), config_given) {
        (Some(agent), true) => super::rule_settings(&node.flags)
            .differences(&agent.rules)
            .into_iter()
            .map(|(flag, here, theirs)| FlagDifference {
                flag: flag.to_string(),
                here,
                agent: theirs,
            })
            .collect(),
        _ => Vec::new(),
    };
    SyncVerdict {
        config: judgement.source.clone(),
        judged_against: judgement.described(),
        note: judgement.note.clone(),
        output_address_fallback: output_address_fallback
            .into_iter()
            .map(|(_, reason)| reason)
            .collect(),
        in_sync: differences.is_empty(),
        differences,
        flags_differ_from_agent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{AddressMatch, Counters, EntryJump, LiveRule, Matches, Weight};

    fn ret(destination: &str) -> LiveRule {
        LiveRule {
            number: 0,
            matches: Matches {
                destination: Some(AddressMatch {
                    negated: false,
                    nets: vec![destination.parse().unwrap()],
                }),
                ..Matches::default()
            },
            verdict: RuleVerdict::Keep,
            comment: Some("ip-masq-agent: local traffic is not subject to MASQUERADE".into()),
            counters: None,
            text: String::new(),
        }
    }

    fn masq(protocol: Option<&str>, ports: Option<(u16, u16)>, weight: Option<Weight>) -> LiveRule {
        LiveRule {
            number: 0,
            matches: Matches {
                protocols: protocol.map(|p| vec![p.to_string()]).unwrap_or_default(),
                ..Matches::default()
            },
            verdict: RuleVerdict::Masquerade {
                snat_to: None,
                ports,
                weight,
                fully_random: true,
            },
            comment: None,
            counters: None,
            text: String::new(),
        }
    }

    fn inspection(rules: Vec<LiveRule>, counters: Counters) -> Inspection {
        Inspection {
            pod_share: None,
            installed: true,
            rules: rules
                .into_iter()
                .enumerate()
                .map(|(i, r)| LiveRule {
                    number: i + 1,
                    counters: Some(counters),
                    ..r
                })
                .collect(),
            entry_jumps: vec![EntryJump {
                position: Some(1),
                text: String::new(),
                counters: None,
                skips_local: true,
            }],
            hook_rules: 1,
            before: Vec::new(),
        }
    }

    #[test]
    fn the_pod_share_line_says_what_each_limit_refused() {
        use crate::plan::live::{LiveShare, ShareLimit, ShareRefusals};
        let style = Styler::plain();
        let share = LiveShare {
            installed: true,
            refusals: vec![
                ShareRefusals {
                    limit: ShareLimit::Rate,
                    refused: 1,
                },
                ShareRefusals {
                    limit: ShareLimit::Connections,
                    refused: 3800,
                },
            ],
        };
        assert_eq!(
            share_text(&share, &style),
            "  pod share: installed; new connections refused: 1 over the rate, 3800 over the connection limit\n"
        );
        let broken = LiveShare {
            installed: false,
            refusals: Vec::new(),
        };
        assert!(share_text(&broken, &style).contains("incomplete"));
    }

    #[test]
    fn default_table_fits_80_columns() {
        let live = inspection(
            vec![
                ret("169.254.0.0/16"),
                ret("10.0.0.0/8"),
                ret("172.16.0.0/12"),
                ret("192.168.0.0/16"),
                masq(None, None, None),
            ],
            Counters {
                packets: 123_456_789,
                bytes: 98_765_432_100,
            },
        );
        let report = family_report(Family::V4, &live);
        let text = table(&report, false, BackendId::IptablesNft, CLASSIC_WIDTH);
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(text.contains("192.168.0.0/16"));
        assert!(text.contains("123.5M"), "{text}");
    }

    /// The command a REJECTED block names: `ipmasq validate PATH` for a file, the ConfigMap's
    /// manifest piped into it in API mode.
    #[test]
    fn a_rejected_config_names_the_command_that_checks_it() {
        assert_eq!(
            validate_command("/etc/config/ip-masq-agent"),
            "ipmasq validate /etc/config/ip-masq-agent"
        );
        assert_eq!(
            validate_command("configmap kube-system/ip-masq-agent key config (resourceVersion 7)"),
            "kubectl -n kube-system get configmap ip-masq-agent -o yaml | ipmasq validate -"
        );
        let rejected = RejectedRecord {
            path: "/etc/kubernetes/ip-masq-agent/config-volume/..data/ip-masq-agent".into(),
            digest: Some("ab".repeat(32)),
            diagnostics: vec![format!(
                "/etc/kubernetes/ip-masq-agent/config-volume/..data/ip-masq-agent:4:5: [cidr-not-aligned] {}",
                "a long reason ".repeat(8)
            )],
            rejected_at: "2026-11-26T10:00:00Z".into(),
        };
        let text = rejected_text(&rejected, None, &Styler::plain());
        assert!(text.contains("REJECTED: the agent refused"), "{text}");
        assert!(text.contains("no config is in force"), "{text}");
        let fitted = fit(&text, 80, LABEL_WIDTH);
        assert!(fitted.lines().all(|l| l.chars().count() <= 80), "{fitted}");
        assert!(fitted.contains("next: ipmasq validate"), "{fitted}");
    }

    #[test]
    fn a_hostile_comment_reaches_the_terminal_escaped() {
        let mut view = ret("10.0.0.0/8");
        view.comment = Some("\u{1b}]0;pwned\u{7}\u{1b}[2J".into());
        view.matches.unjudged = vec!["\u{1b}[31m".into()];
        let live = inspection(vec![view], Counters::default());
        let text = table(
            &family_report(Family::V4, &live),
            true,
            BackendId::IptablesNft,
            CLASSIC_WIDTH,
        );
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(text.contains("\\x1b]0;pwned\\x07"), "{text}");
    }

    #[test]
    fn to_ports_rules_fit_80_columns() {
        let mut views = vec![ret("10.0.0.0/8")];
        for protocol in ["tcp", "udp", "sctp"] {
            views.push(masq(
                Some(protocol),
                Some((1024, 29999)),
                Some(Weight {
                    taken: 46_929_256_292,
                    of: 100_000_000_000,
                }),
            ));
            views.push(masq(Some(protocol), Some((32768, 65535)), None));
        }
        views.push(masq(None, None, None));
        let live = inspection(
            views,
            Counters {
                packets: 999_999,
                bytes: 999_999_999,
            },
        );
        let text = table(
            &family_report(Family::V4, &live),
            false,
            BackendId::Nftables,
            CLASSIC_WIDTH,
        );
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(text.contains("tcp 1024-29999"), "{text}");
        assert!(text.contains("p=0.4693"), "{text}");
    }
}
