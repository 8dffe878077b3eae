//! The iptables backend (legacy and nft variants): renders a [`Ruleset`] exactly as
//! `iptables-save` prints it, reads the live nat table with one `iptables-save -t nat`, and
//! brings it back with one `iptables-restore --noflush` transaction that touches only our chain
//! and the POSTROUTING jumps to it.
//!
//! Rendering in the saved form is what makes "in sync" a plain string comparison: when the
//! live chain equals the rendered one, nothing is written and packet counters survive.

use super::runner::{self, RunError, DEFAULT_TIMEOUT};
use super::{BackendError, Drift, DriftKind};
use crate::plan::{ChainName, Family, Masquerade, Rule, Ruleset};
use std::fmt::Write as _;
use std::time::Duration;

/// The built-in chain our jump lives in.
pub const POSTROUTING: &str = "POSTROUTING";
/// Comment of every non-masquerade rule (upstream's text, byte for byte).
pub const NON_MASQ_COMMENT: &str = "ip-masq-agent: local traffic is not subject to MASQUERADE";
/// Comment of every MASQUERADE rule (upstream's text, byte for byte).
pub const MASQ_COMMENT: &str =
    "ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)";
/// Seconds iptables-restore may wait for the xtables lock (legacy; nft ignores it).
const LOCK_WAIT_SECONDS: &str = "5";

/// The POSTROUTING jump's comment; upstream puts the chain name in it.
pub fn jump_comment(chain: &ChainName) -> String {
    format!(
        "ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom {chain} chain"
    )
}

/// The POSTROUTING jump as iptables-save prints it (without the leading `-A POSTROUTING`).
pub fn jump_spec(chain: &ChainName) -> String {
    format!(
        "-m comment --comment \"{}\" -m addrtype ! --dst-type LOCAL -j {chain}",
        jump_comment(chain)
    )
}

/// Renders one rule as an `-A CHAIN ...` line in iptables-save's canonical form.
pub fn render_rule(chain: &ChainName, rule: &Rule) -> String {
    match rule {
        Rule::NoMasquerade { destination } => format!(
            "-A {chain} -d {destination} -m comment --comment \"{NON_MASQ_COMMENT}\" -j RETURN"
        ),
        Rule::Masquerade(Masquerade {
            protocol,
            to_ports,
            probability,
            random_fully,
        }) => {
            let mut line = format!("-A {chain}");
            if let Some(p) = protocol {
                let _ = write!(line, " -p {}", p.as_str());
            }
            let _ = write!(line, " -m comment --comment \"{MASQ_COMMENT}\"");
            if let Some(p) = probability {
                let _ = write!(line, " -m statistic --mode random --probability {p}");
            }
            line.push_str(" -j MASQUERADE");
            if let Some(ports) = to_ports {
                let _ = write!(line, " --to-ports {ports}");
            }
            if *random_fully {
                line.push_str(" --random-fully");
            }
            line
        }
    }
}

/// Renders the chain's body.
pub fn render_rules(ruleset: &Ruleset) -> Vec<String> {
    ruleset
        .rules
        .iter()
        .map(|r| render_rule(&ruleset.chain, r))
        .collect()
}

/// A ruleset rendered once per pass: the chain's lines and the canonical jump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub family: Family,
    pub chain: ChainName,
    /// `-A CHAIN ...` lines, in order.
    pub lines: Vec<String>,
    /// The canonical POSTROUTING jump spec.
    pub jump: String,
}

impl Rendered {
    pub fn new(ruleset: &Ruleset) -> Self {
        Rendered {
            family: ruleset.family,
            chain: ruleset.chain.clone(),
            lines: render_rules(ruleset),
            jump: jump_spec(&ruleset.chain),
        }
    }
}

/// Packet and byte counters of a rule (`iptables-save -c`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
}

/// A POSTROUTING rule that jumps to our chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jump {
    /// 1-based position in POSTROUTING.
    pub position: usize,
    /// The rule as saved, without `-A POSTROUTING `.
    pub spec: String,
    pub counters: Option<Counters>,
}

/// What the nat table holds of ours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveChain {
    pub chain_exists: bool,
    /// Our chain's rules as saved (`-A CHAIN ...` lines, without counters), in order.
    pub rules: Vec<String>,
    /// Each rule's counters, when the save was taken with `-c`.
    pub counters: Vec<Option<Counters>>,
    /// Every POSTROUTING jump to our chain, whatever its comment.
    pub jumps: Vec<Jump>,
    /// How many rules POSTROUTING holds in all.
    pub postrouting_rules: usize,
}

/// Splits `[packets:bytes] rest` (a `-c` save line) into counters and the rule.
fn split_counters(line: &str) -> (Option<Counters>, &str) {
    let Some(rest) = line.strip_prefix('[') else {
        return (None, line);
    };
    let Some((numbers, rule)) = rest.split_once("] ") else {
        return (None, line);
    };
    let parsed = numbers.split_once(':').and_then(|(p, b)| {
        Some(Counters {
            packets: p.parse().ok()?,
            bytes: b.parse().ok()?,
        })
    });
    match parsed {
        Some(counters) => (Some(counters), rule),
        None => (None, line),
    }
}

/// Extracts our chain and jumps from `iptables-save` output (with or without `-c`, one table
/// or all: only the nat table is read).
pub fn parse_saved(saved: &str, chain: &ChainName) -> LiveChain {
    let mut live = LiveChain::default();
    let declaration = format!(":{chain} ");
    let rule_prefix = format!("-A {chain} ");
    let postrouting_prefix = format!("-A {POSTROUTING} ");
    let mut in_nat = false;
    for raw in saved.lines() {
        if let Some(table) = raw.strip_prefix('*') {
            in_nat = table.trim() == "nat";
            continue;
        }
        if !in_nat {
            continue;
        }
        let (counters, line) = split_counters(raw);
        if line.starts_with(&declaration) {
            live.chain_exists = true;
        } else if line.starts_with(&rule_prefix) {
            live.rules.push(line.to_string());
            live.counters.push(counters);
        } else if let Some(spec) = line.strip_prefix(&postrouting_prefix) {
            live.postrouting_rules += 1;
            if jump_target(spec).is_some_and(|t| t == chain.as_str()) {
                live.jumps.push(Jump {
                    position: live.postrouting_rules,
                    spec: spec.to_string(),
                    counters,
                });
            }
        }
    }
    live
}

/// One rule of our chain, taken apart for display.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleView {
    /// The target: `RETURN`, `MASQUERADE`, or whatever a foreign rule jumps to.
    pub action: String,
    pub destination: Option<String>,
    pub protocol: Option<String>,
    pub to_ports: Option<String>,
    pub random_fully: bool,
    pub probability: Option<String>,
    pub comment: Option<String>,
    /// Options we do not write ourselves (a foreign or hand-edited rule), as saved.
    pub other: Vec<String>,
}

/// Takes a saved `-A CHAIN ...` line apart.
pub fn describe_rule(line: &str) -> RuleView {
    let tokens = tokenize(line);
    let mut view = RuleView::default();
    let mut i = 0;
    // Skip "-A CHAIN".
    if tokens.first().map(String::as_str) == Some("-A") {
        i = 2;
    }
    let value = |i: usize| tokens.get(i + 1).cloned();
    while i < tokens.len() {
        let token = tokens[i].as_str();
        let step = match token {
            "-d" => {
                view.destination = value(i);
                2
            }
            "-p" => {
                view.protocol = value(i);
                2
            }
            "-j" => {
                view.action = value(i).unwrap_or_default();
                2
            }
            "--to-ports" => {
                view.to_ports = value(i);
                2
            }
            "--random-fully" => {
                view.random_fully = true;
                1
            }
            "--probability" => {
                view.probability = value(i);
                2
            }
            "--comment" => {
                view.comment = value(i);
                2
            }
            "-m" if matches!(
                tokens.get(i + 1).map(String::as_str),
                Some("comment" | "statistic")
            ) =>
            {
                2
            }
            "--mode" if tokens.get(i + 1).map(String::as_str) == Some("random") => 2,
            _ => {
                view.other.push(token.to_string());
                1
            }
        };
        i += step;
    }
    view
}

/// The target of a saved rule's `-j`/`-g`, if any.
pub fn jump_target(spec: &str) -> Option<String> {
    let tokens = tokenize(spec);
    let index = tokens.iter().rposition(|t| t == "-j" || t == "-g")?;
    tokens.get(index + 1).cloned()
}

/// Splits a saved rule into words the way iptables-restore does: whitespace-separated, with
/// double-quoted words whose `\"` and `\\` are escapes.
pub fn tokenize(spec: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = spec.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        let mut word = String::new();
        if first == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(escaped) = chars.next() {
                            word.push(escaped);
                        }
                    }
                    '"' => break,
                    c => word.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        tokens.push(word);
    }
    tokens
}

/// The POSTROUTING jumps to our chain, sorted by what a sync does with them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct JumpAudit<'a> {
    /// The first jump with the agent's exact spelling: the one kept.
    pub kept: Option<&'a Jump>,
    /// Further copies of the exact spelling.
    pub duplicates: Vec<&'a Jump>,
    /// Jumps to our chain with another spelling (an older comment, a hand-made rule).
    pub stale: Vec<&'a Jump>,
}

/// Classifies the live jumps against the canonical one; `diff` and `show` share this.
pub fn audit_jumps<'a>(desired: &Rendered, live: &'a LiveChain) -> JumpAudit<'a> {
    let mut audit = JumpAudit::default();
    for jump in &live.jumps {
        if jump.spec != desired.jump {
            audit.stale.push(jump);
        } else if audit.kept.is_none() {
            audit.kept = Some(jump);
        } else {
            audit.duplicates.push(jump);
        }
    }
    audit
}

/// Compares desired and live state; an empty drift means "write nothing".
pub fn diff(desired: &Rendered, live: &LiveChain) -> Drift {
    let rewrite_chain = !live.chain_exists || live.rules != desired.lines;
    let mut kinds = Vec::new();
    if !live.chain_exists {
        kinds.push(DriftKind::ChainMissing);
    } else if rewrite_chain {
        kinds.push(DriftKind::RulesDiffer);
    }
    let jumps = audit_jumps(desired, live);
    // Every jump but the kept one goes, in live order.
    let mut delete_jumps = Vec::new();
    for jump in &live.jumps {
        if jumps.kept.is_some_and(|kept| std::ptr::eq(kept, jump)) {
            continue;
        }
        let kind = if jump.spec == desired.jump {
            DriftKind::JumpDuplicate
        } else {
            DriftKind::JumpStale
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
        delete_jumps.push(jump.spec.clone());
    }
    if jumps.kept.is_none() {
        kinds.push(DriftKind::JumpMissing);
    }
    Drift {
        family: desired.family,
        kinds,
        rewrite_chain,
        delete_jumps,
        add_jump: jumps.kept.is_none(),
    }
}

/// The one iptables-restore input that repairs `drift`: only our chain and our jumps.
pub fn transaction(desired: &Rendered, drift: &Drift) -> String {
    let chain = &desired.chain;
    let size = desired.lines.iter().map(|l| l.len() + 1).sum::<usize>() + 512;
    let mut script = String::with_capacity(size);
    script.push_str("*nat\n");
    if drift.rewrite_chain {
        // Declaring a chain under --noflush creates it, or flushes it if it exists.
        let _ = writeln!(script, ":{chain} - [0:0]");
    }
    for spec in &drift.delete_jumps {
        let _ = writeln!(script, "-D {POSTROUTING} {spec}");
    }
    if drift.add_jump {
        let _ = writeln!(script, "-A {POSTROUTING} {}", desired.jump);
    }
    if drift.rewrite_chain {
        for line in &desired.lines {
            script.push_str(line);
            script.push('\n');
        }
    }
    script.push_str("COMMIT\n");
    script
}

/// The transaction that removes our jumps and chain; `None` when there is nothing to remove.
pub fn cleanup_transaction(chain: &ChainName, live: &LiveChain) -> Option<String> {
    if !live.chain_exists && live.jumps.is_empty() {
        return None;
    }
    let mut script = String::from("*nat\n");
    for jump in &live.jumps {
        let _ = writeln!(script, "-D {POSTROUTING} {}", jump.spec);
    }
    if live.chain_exists {
        let _ = writeln!(script, ":{chain} - [0:0]");
        let _ = writeln!(script, "-X {chain}");
    }
    script.push_str("COMMIT\n");
    Some(script)
}

/// Which iptables implementation to drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Legacy,
    Nft,
}

impl Variant {
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Legacy => "legacy",
            Variant::Nft => "nft",
        }
    }
}

/// The tool of one variant and family, as an absolute path when it is on PATH (resolved once,
/// so no spawn searches PATH again).
fn tool(variant: Variant, family: Family, suffix: &str) -> String {
    let base = match family {
        Family::V4 => "iptables",
        Family::V6 => "ip6tables",
    };
    let specific = format!("{base}-{}{suffix}", variant.as_str());
    // Older images ship only the unsuffixed tools.
    let plain = format!("{base}{suffix}");
    runner::resolve(&specific)
        .or_else(|| runner::resolve(&plain))
        .map_or(specific, |p| p.display().to_string())
}

/// The programs a backend runs, resolved once.
#[derive(Clone, Debug)]
struct Tools {
    save: [String; 2],
    restore: [String; 2],
    main: String,
}

fn slot(family: Family) -> usize {
    match family {
        Family::V4 => 0,
        Family::V6 => 1,
    }
}

/// An iptables variant as a backend.
#[derive(Clone, Debug)]
pub struct Iptables {
    pub variant: Variant,
    pub timeout: Duration,
    tools: Tools,
}

impl Iptables {
    pub fn new(variant: Variant) -> Self {
        let both = |suffix: &str| {
            [
                tool(variant, Family::V4, suffix),
                tool(variant, Family::V6, suffix),
            ]
        };
        Iptables {
            variant,
            timeout: DEFAULT_TIMEOUT,
            tools: Tools {
                save: both("-save"),
                restore: both("-restore"),
                main: tool(variant, Family::V4, ""),
            },
        }
    }

    pub fn name(&self) -> String {
        format!("iptables-{}", self.variant.as_str())
    }

    fn failed(&self, program: &str, out: &runner::Output) -> BackendError {
        let stderr = out.stderr.trim();
        let permission = stderr.contains("Permission denied")
            || stderr.contains("Operation not permitted")
            || stderr.contains("you must be root");
        if permission {
            BackendError::Permission {
                program: program.to_string(),
                detail: stderr.to_string(),
            }
        } else {
            BackendError::Failed {
                program: program.to_string(),
                code: out.code,
                detail: stderr.to_string(),
            }
        }
    }

    /// One `iptables-save`: of the nat table (`-t nat` makes the kernel load it, which the
    /// agent is about to do anyway) or of the tables that exist (for inspection and cleanup,
    /// which must not create a table), with counters when asked.
    pub fn save(
        &self,
        family: Family,
        nat_only: bool,
        counters: bool,
    ) -> Result<String, BackendError> {
        let program = &self.tools.save[slot(family)];
        let mut args = Vec::new();
        if nat_only {
            args.extend(["-t", "nat"]);
        }
        if counters {
            args.push("-c");
        }
        let out = runner::run(program, &args, None, self.timeout).map_err(BackendError::from)?;
        if !out.success {
            return Err(self.failed(program, &out));
        }
        Ok(out.stdout)
    }

    /// Reads our chain and jumps (the agent's one reader per family and pass).
    pub fn observe(&self, family: Family, chain: &ChainName) -> Result<LiveChain, BackendError> {
        Ok(parse_saved(&self.save(family, true, false)?, chain))
    }

    /// Reads our chain and jumps with their counters, without creating any table.
    pub fn inspect(&self, family: Family, chain: &ChainName) -> Result<LiveChain, BackendError> {
        Ok(parse_saved(&self.save(family, false, true)?, chain))
    }

    /// Whether this variant's tools for `family` are installed.
    pub fn installed(&self, family: Family) -> bool {
        runner::on_path(&self.tools.save[slot(family)])
    }

    /// One `iptables-restore --noflush` with `script`.
    pub fn restore(&self, family: Family, script: &str) -> Result<(), BackendError> {
        let program = &self.tools.restore[slot(family)];
        let out = runner::run(
            program,
            &["--noflush", "-w", LOCK_WAIT_SECONDS],
            Some(script),
            self.timeout,
        )
        .map_err(BackendError::from)?;
        if !out.success {
            return Err(self.failed(program, &out));
        }
        Ok(())
    }

    /// Whether this iptables supports `--random-fully` (1.6.2 and later).
    pub fn supports_random_fully(&self) -> Result<bool, BackendError> {
        let out = runner::run(&self.tools.main, &["--version"], None, self.timeout)
            .map_err(BackendError::from)?;
        Ok(parse_version(&out.stdout).is_some_and(|v| v >= (1, 6, 2)))
    }

    /// Lines of a full `-save` of both families (or one table), for mode detection.
    fn save_all(&self, table: Option<&str>) -> String {
        let mut text = String::new();
        for program in &self.tools.save {
            let args: Vec<&str> = table.map(|t| vec!["-t", t]).unwrap_or_default();
            if let Ok(out) = runner::run(program, &args, None, Duration::from_secs(5)) {
                text.push_str(&out.stdout);
            }
        }
        text
    }
}

/// `iptables v1.8.9 (nf_tables)` → (1, 8, 9).
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.split_whitespace().find(|w| w.starts_with('v'))?;
    let mut parts = v[1..].split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// Why auto-detection chose a variant, for the startup log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    pub variant: Variant,
    pub reason: String,
}

/// Chooses legacy or nft as kubernetes-sigs/iptables-wrappers does: kubelet's hint chains in
/// the mangle table first (nft, then legacy), otherwise whichever holds more rules; nft when
/// neither holds any.
pub fn detect_variant() -> Detection {
    const HINTS: [&str; 2] = [":KUBE-IPTABLES-HINT", ":KUBE-KUBELET-CANARY"];
    let has_hint = |text: &str| text.lines().any(|l| HINTS.iter().any(|h| l.starts_with(h)));
    let nft = Iptables::new(Variant::Nft);
    let legacy = Iptables::new(Variant::Legacy);
    if has_hint(&nft.save_all(Some("mangle"))) {
        return Detection {
            variant: Variant::Nft,
            reason: "kubelet's hint chain is in iptables-nft".into(),
        };
    }
    // Not `-t mangle` for legacy: that would make the kernel create the table.
    let legacy_all = legacy.save_all(None);
    if has_hint(&legacy_all) {
        return Detection {
            variant: Variant::Legacy,
            reason: "kubelet's hint chain is in iptables-legacy".into(),
        };
    }
    let count = |text: &str| text.lines().filter(|l| l.starts_with('-')).count();
    let legacy_rules = count(&legacy_all);
    let nft_rules = count(&nft.save_all(None));
    if legacy_rules > nft_rules {
        Detection {
            variant: Variant::Legacy,
            reason: format!("iptables-legacy holds more rules ({legacy_rules} vs {nft_rules})"),
        }
    } else {
        Detection {
            variant: Variant::Nft,
            reason: format!(
                "iptables-nft holds at least as many rules ({nft_rules} vs {legacy_rules})"
            ),
        }
    }
}

impl From<RunError> for BackendError {
    fn from(err: RunError) -> Self {
        match err {
            RunError::NotFound { program } => BackendError::Missing { program },
            other => BackendError::Run(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
