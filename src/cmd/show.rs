//! `ipmasq show`: the live chain of this node as tables (or JSON/YAML), read through the same
//! backend code the agent uses, and with `--config` a verdict: in sync, or every difference.
//!
//! JSON/YAML document (schemaVersion 1; fields are only ever added):
//! `{schemaVersion, backend, backendChoice, chain, installed, families: [{family, installed,
//! jump: {present, copies, positions, postroutingRules}, rules: [{number, action, destination,
//! protocol, toPorts, randomFully, probability, comment, other, packets, bytes, rule}]}],
//! sync: null | {config, inSync, differences: [{family, kind, position, detail}]}}`.

use super::{choose_variant, plan_options, Exit};
use crate::backend::iptables::{
    audit_jumps, describe_rule, Iptables, LiveChain, Rendered, RuleView,
};
use crate::backend::{Backend, BackendError};
use crate::cli::{ShowArgs, ShowFormat};
use crate::config::{self, Config};
use crate::output::{plural, render_diagnostic, to_json, Styler};
use crate::plan::{plan_family, ChainName, Family};
use serde::Serialize;
use std::collections::HashMap;
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Padding, Style, Width};

/// Tables fit a classic terminal unless `--wide` asks for comments.
const TABLE_WIDTH: usize = 80;
/// Index of the options column in the rule table.
const OPTIONS_COLUMN: usize = 4;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShowReport {
    pub schema_version: u32,
    pub backend: String,
    pub backend_choice: String,
    pub chain: String,
    /// Whether our chain exists in any family.
    pub installed: bool,
    pub families: Vec<FamilyReport>,
    pub sync: Option<SyncReport>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FamilyReport {
    pub family: String,
    pub installed: bool,
    pub jump: JumpReport,
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

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    pub number: usize,
    #[serde(flatten)]
    pub view: RuleView,
    pub packets: Option<u64>,
    pub bytes: Option<u64>,
    /// The rule as iptables-save prints it.
    pub rule: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    pub config: String,
    pub in_sync: bool,
    pub differences: Vec<Difference>,
}

/// One way the live rules differ from the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub family: String,
    /// `chain-missing`, `missing-rule`, `extra-rule`, `out-of-order`, `jump-missing`,
    /// `jump-duplicated` or `jump-stale`.
    pub kind: &'static str,
    /// Rule number (in the plan for missing rules, live otherwise), or POSTROUTING position.
    pub position: Option<usize>,
    pub detail: String,
}

/// A rule in a few words: `RETURN 10.0.0.0/8`, `MASQUERADE tcp 1024-29999 random-fully`.
fn summary(view: &RuleView) -> String {
    let mut parts = vec![view.action.clone()];
    parts.extend(view.destination.clone());
    parts.extend(view.protocol.clone());
    parts.extend(view.to_ports.clone());
    parts.extend(view.probability.as_ref().map(|p| format!("p={p}")));
    if view.random_fully {
        parts.push("random-fully".into());
    }
    parts.extend(view.other.iter().cloned());
    parts.join(" ")
}

/// Every difference between the planned and the live chain of one family.
pub fn differences(desired: &Rendered, live: &LiveChain) -> Vec<Difference> {
    let family = desired.family.to_string();
    let diff = |kind, position, detail: String| Difference {
        family: family.clone(),
        kind,
        position,
        detail,
    };
    let mut out = Vec::new();
    if !live.chain_exists {
        out.push(diff(
            "chain-missing",
            None,
            format!("chain {} does not exist", desired.chain),
        ));
    } else if live.rules != desired.lines {
        let mut available: HashMap<&str, usize> = HashMap::new();
        for line in &live.rules {
            *available.entry(line.as_str()).or_default() += 1;
        }
        let mut missing = Vec::new();
        for (i, line) in desired.lines.iter().enumerate() {
            match available.get_mut(line.as_str()) {
                Some(n) if *n > 0 => *n -= 1,
                _ => missing.push(diff(
                    "missing-rule",
                    Some(i + 1),
                    format!("rule {} missing: {}", i + 1, summary(&describe_rule(line))),
                )),
            }
        }
        let mut wanted: HashMap<&str, usize> = HashMap::new();
        for line in &desired.lines {
            *wanted.entry(line.as_str()).or_default() += 1;
        }
        let mut extra = Vec::new();
        for (i, line) in live.rules.iter().enumerate() {
            match wanted.get_mut(line.as_str()) {
                Some(n) if *n > 0 => *n -= 1,
                _ => extra.push(diff(
                    "extra-rule",
                    Some(i + 1),
                    format!(
                        "rule {} not planned: {}",
                        i + 1,
                        summary(&describe_rule(line))
                    ),
                )),
            }
        }
        if missing.is_empty() && extra.is_empty() {
            for (i, (want, got)) in desired.lines.iter().zip(&live.rules).enumerate() {
                if want != got {
                    out.push(diff(
                        "out-of-order",
                        Some(i + 1),
                        format!(
                            "rule {} is {}, planned {}",
                            i + 1,
                            summary(&describe_rule(got)),
                            summary(&describe_rule(want))
                        ),
                    ));
                }
            }
        }
        out.extend(missing);
        out.extend(extra);
    }
    let jumps = audit_jumps(desired, live);
    match jumps.kept {
        None => out.push(diff(
            "jump-missing",
            None,
            format!(
                "no POSTROUTING jump to {} with the agent's spelling",
                desired.chain
            ),
        )),
        Some(kept) if !jumps.duplicates.is_empty() => {
            let positions: Vec<usize> = std::iter::once(kept)
                .chain(jumps.duplicates.iter().copied())
                .map(|j| j.position)
                .collect();
            out.push(diff(
                "jump-duplicated",
                Some(jumps.duplicates[0].position),
                format!(
                    "POSTROUTING jumps to {} {} times (rules {:?})",
                    desired.chain,
                    positions.len(),
                    positions
                ),
            ));
        }
        Some(_) => {}
    }
    for jump in jumps.stale {
        out.push(diff(
            "jump-stale",
            Some(jump.position),
            format!(
                "POSTROUTING rule {} jumps to {} with another spelling: {}",
                jump.position, desired.chain, jump.spec
            ),
        ));
    }
    out
}

fn family_report(family: Family, live: &LiveChain) -> FamilyReport {
    let rules = live
        .rules
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let counters = live.counters.get(i).copied().flatten();
            RuleReport {
                number: i + 1,
                view: describe_rule(line),
                packets: counters.map(|c| c.packets),
                bytes: counters.map(|c| c.bytes),
                rule: line.clone(),
            }
        })
        .collect();
    FamilyReport {
        family: family.to_string(),
        installed: live.chain_exists,
        jump: JumpReport {
            present: !live.jumps.is_empty(),
            copies: live.jumps.len(),
            positions: live.jumps.iter().map(|j| j.position).collect(),
            postrouting_rules: live.postrouting_rules,
        },
        rules,
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

fn table(family: &FamilyReport, wide: bool) -> String {
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
            v.action.clone(),
            v.destination.clone().unwrap_or_else(|| "any".into()),
            ports,
            options,
            human(rule.packets),
            human(rule.bytes),
        ];
        if wide {
            row.push(v.comment.clone().unwrap_or_default());
        }
        builder.push_record(row);
    }
    let mut table = builder.build();
    // kubectl-style: no rules, columns apart by two spaces.
    table.with(Style::blank());
    table.with(Padding::new(0, 1, 0, 0));
    let total = table.total_width();
    if !wide && total > TABLE_WIDTH {
        // Only the options column (long with --to-ports) wraps, at word boundaries.
        let target = options_width.saturating_sub(total - TABLE_WIDTH).max(12);
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

fn to_text(report: &ShowReport, style: &Styler, wide: bool) -> String {
    let mut out = format!(
        "{} {} ({})\n{} {} in table nat\n",
        style.bold("backend:"),
        report.backend,
        report.backend_choice,
        style.bold("chain:  "),
        report.chain
    );
    for family in &report.families {
        out.push('\n');
        if !family.installed && !family.jump.present {
            out.push_str(&format!(
                "{} {}\n",
                style.bold(&format!("{}:", family.family)),
                style.warning("not installed")
            ));
            continue;
        }
        let jump = match family.jump.copies {
            0 => style.error("no POSTROUTING jump to this chain"),
            1 => format!(
                "POSTROUTING jumps here at rule {} of {}",
                family.jump.positions[0], family.jump.postrouting_rules
            ),
            n => style.warning(&format!(
                "POSTROUTING jumps here {n} times, at rules {:?} of {}",
                family.jump.positions, family.jump.postrouting_rules
            )),
        };
        let chain_state = if family.installed {
            plural(family.rules.len(), "rule")
        } else {
            style.error("chain missing")
        };
        out.push_str(&format!(
            "{} {chain_state}; {jump}\n",
            style.bold(&format!("{}:", family.family))
        ));
        if family.installed {
            out.push_str(&table(family, wide));
        }
    }
    if let Some(sync) = &report.sync {
        out.push('\n');
        if sync.in_sync {
            out.push_str(&format!(
                "{} {}\n",
                style.bold(&format!("sync with {}:", sync.config)),
                style.success("in sync")
            ));
        } else {
            out.push_str(&format!(
                "{} {}\n",
                style.bold(&format!("sync with {}:", sync.config)),
                style.error(&format!(
                    "drifted ({})",
                    plural(sync.differences.len(), "difference")
                ))
            ));
            for d in &sync.differences {
                out.push_str(&format!("  {}: {}: {}\n", d.family, d.kind, d.detail));
            }
        }
    }
    if !report.installed {
        out.push_str(&format!(
            "\n{}\n",
            style.warning(&format!(
                "ip-masq-agent rules are not installed (no {} chain in the nat table of {})",
                report.chain, report.backend
            ))
        ));
    }
    out
}

/// Loads `--config` as the agent would; prints its problems and returns None when invalid.
fn load_config(path: &std::path::Path, options: &config::Options) -> Result<Config, Exit> {
    match config::load(path, options) {
        Err(err) => {
            eprintln!("ipmasq show: {err}");
            Err(Exit::Usage)
        }
        Ok(loaded) => match loaded.checked.config {
            Some(config) => Ok(config),
            None => {
                let source = std::fs::read_to_string(path).ok();
                let name = path.display().to_string();
                for d in loaded.checked.errors() {
                    eprint!(
                        "{}",
                        render_diagnostic(&Styler::plain(), &name, source.as_deref(), d)
                    );
                }
                eprintln!("ipmasq show: {name} is invalid; no sync verdict (the agent would keep its last good config)");
                Err(Exit::Usage)
            }
        },
    }
}

/// Reads one family; IPv6 counts as absent when ip6tables is not installed.
fn inspect(
    backend: &Iptables,
    family: Family,
    chain: &ChainName,
) -> Result<Option<LiveChain>, BackendError> {
    if family == Family::V6 && !backend.installed(Family::V6) {
        return Ok(None);
    }
    Backend::inspect(backend, family, chain).map(Some)
}

/// Runs `ipmasq show`.
pub fn run(args: &ShowArgs) -> Exit {
    let chain = &args.rules.masq_chain;
    let (variant, why) = choose_variant(args.rules.iptables_mode);
    let backend = Iptables::new(variant);
    let mut lives = Vec::new();
    for family in [Family::V4, Family::V6] {
        match inspect(&backend, family, chain) {
            Ok(Some(live)) => lives.push((family, live)),
            Ok(None) => {}
            Err(err) => {
                eprintln!("ipmasq show: {err}");
                return Exit::for_backend_error(&err);
            }
        }
    }
    let sync = match &args.config {
        None => None,
        Some(path) => {
            let options = args.rules.config_flags.options();
            let config = match load_config(path, &options) {
                Ok(config) => config,
                Err(exit) => return exit,
            };
            let (plan, _) = plan_options(&args.rules, &backend);
            let mut diffs = Vec::new();
            for family in crate::plan::families(&plan) {
                let desired = Rendered::new(&plan_family(&config, &plan, family));
                let live = lives
                    .iter()
                    .find(|(f, _)| *f == family)
                    .map(|(_, l)| l.clone())
                    .unwrap_or_default();
                diffs.extend(differences(&desired, &live));
            }
            Some(SyncReport {
                config: path.display().to_string(),
                in_sync: diffs.is_empty(),
                differences: diffs,
            })
        }
    };
    let families: Vec<FamilyReport> = lives
        .iter()
        .filter(|(family, live)| {
            *family == Family::V4
                || live.chain_exists
                || !live.jumps.is_empty()
                || args.rules.config_flags.enable_ipv6
        })
        .map(|(family, live)| family_report(*family, live))
        .collect();
    let report = ShowReport {
        schema_version: 1,
        backend: backend.name(),
        backend_choice: why,
        chain: chain.to_string(),
        installed: lives.iter().any(|(_, l)| l.chain_exists),
        families,
        sync,
    };
    let text = match args.output {
        ShowFormat::Json => to_json(&report),
        ShowFormat::Yaml => serde_saphyr::to_string(&report)
            .unwrap_or_else(|e| format!("# cannot render YAML: {e}\n")),
        ShowFormat::Text => to_text(&report, &Styler::for_stdout(args.color), args.wide),
    };
    print!("{text}");
    if !report.installed {
        Exit::NotInstalled
    } else if report.sync.as_ref().is_some_and(|s| !s.in_sync) {
        Exit::Failure
    } else {
        Exit::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::iptables::{diff, parse_saved, transaction};
    use crate::config::Options;
    use crate::plan::{plan, PlanOptions};

    fn desired() -> Rendered {
        let sets = plan(
            &Config::defaults(&Options::default()),
            &PlanOptions::default(),
        );
        Rendered::new(&sets[0])
    }

    fn live_after_first_sync() -> LiveChain {
        let d = desired();
        let script = transaction(&d, &diff(&d, &LiveChain::default()));
        parse_saved(&script, &d.chain)
    }

    #[test]
    fn in_sync_has_no_differences() {
        assert!(differences(&desired(), &live_after_first_sync()).is_empty());
    }

    #[test]
    fn missing_extra_and_reordered_rules_are_named() {
        let d = desired();
        let mut live = live_after_first_sync();
        live.rules.remove(2);
        live.rules
            .push("-A IP-MASQ-AGENT -d 1.2.3.4/32 -j ACCEPT".into());
        let kinds: Vec<&str> = differences(&d, &live).iter().map(|x| x.kind).collect();
        assert_eq!(kinds, ["missing-rule", "extra-rule"]);
        let diffs = differences(&d, &live);
        assert_eq!(diffs[0].detail, "rule 3 missing: RETURN 172.16.0.0/12");
        assert_eq!(diffs[1].detail, "rule 5 not planned: ACCEPT 1.2.3.4/32");

        let mut live = live_after_first_sync();
        live.rules.swap(1, 2);
        let diffs = differences(&d, &live);
        assert_eq!(diffs.len(), 2);
        assert!(diffs.iter().all(|x| x.kind == "out-of-order"));
        assert_eq!(
            diffs[0].detail,
            "rule 2 is RETURN 172.16.0.0/12, planned RETURN 10.0.0.0/8"
        );
    }

    #[test]
    fn jump_problems_are_named() {
        let d = desired();
        let mut live = live_after_first_sync();
        live.jumps.push(live.jumps[0].clone());
        live.jumps[1].position = 2;
        assert_eq!(differences(&d, &live)[0].kind, "jump-duplicated");
        live.jumps.clear();
        assert_eq!(differences(&d, &live)[0].kind, "jump-missing");
        assert_eq!(
            differences(&d, &LiveChain::default())
                .iter()
                .map(|x| x.kind)
                .collect::<Vec<_>>(),
            ["chain-missing", "jump-missing"]
        );
    }

    #[test]
    fn default_table_fits_80_columns() {
        let mut live = live_after_first_sync();
        live.counters = vec![
            Some(crate::backend::iptables::Counters {
                packets: 123_456_789,
                bytes: 98_765_432_100,
            });
            live.rules.len()
        ];
        let report = family_report(Family::V4, &live);
        let text = table(&report, false);
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(text.contains("192.168.0.0/16"));
        assert!(text.contains("123.5M"), "{text}");
    }

    #[test]
    fn to_ports_rules_fit_80_columns() {
        let options = PlanOptions {
            to_ports: "1024-29999,32768-65535".parse().unwrap(),
            ..PlanOptions::default()
        };
        let sets = plan(&Config::defaults(&Options::default()), &options);
        let d = Rendered::new(&sets[0]);
        let script = transaction(&d, &diff(&d, &LiveChain::default()));
        let mut live = parse_saved(&script, &d.chain);
        live.counters = vec![
            Some(crate::backend::iptables::Counters {
                packets: 999_999,
                bytes: 999_999_999,
            });
            live.rules.len()
        ];
        let text = table(&family_report(Family::V4, &live), false);
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(text.contains("tcp 1024-29999"), "{text}");
        assert!(text.contains("p=0.4693"), "{text}");
    }
}
