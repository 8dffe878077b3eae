//! The pod share in iptables' filter table: five chains of ours (`<chain>-SHARE` walks the
//! plan's decisions as the nat chain does and sends what will be masqueraded to
//! `<chain>-LIMIT`, whose `hashlimit` and `connlimit` rules (a pod `connlimit` finds over its
//! count remembered a second in the `recent` list `<chain>-FULL`, and refused meanwhile
//! without a recount) send a pod over its share to
//! `<chain>-RATE` or `<chain>-CONNS`, which copy the packet to the SNAT log's NFLOG group with
//! the limit's prefix and go to `<chain>-REFUSE`: a TCP reset, else an ICMP "administratively
//! prohibited") and one jump from `FORWARD` for new connections. Rendered in the saved form, compared chain by chain
//! (a chain that did not change is not rewritten, so its counters and `connlimit`'s count
//! survive), repaired and removed in the iptables-restore transaction of the nat chain.

use super::render::source_gate;
use crate::backend::{Difference, DriftKind};
use crate::config::pod_share::{NewConnectionRate, PodShare};
use crate::plan::live::{LiveShare, ShareLimit, ShareRefusals};
use crate::plan::live::{SHARE_LOG_GROUP, SHARE_LOG_SNAPLEN};
use crate::plan::{Action, ChainName, Family, Ruleset};
use crate::plan::{POD_CONNECTIONS_COMMENT, POD_RATE_COMMENT, POD_SHARE_COMMENT};
use std::fmt::Write as _;

/// The built-in chain our jump lives in.
const FORWARD: &str = "FORWARD";
/// The `hashlimit` table's name: `ipmasq-` and 8 hex digits of the SHA-256 of the rate, the
/// burst and the key (15 bytes, the most a name holds). The kernel finds a table by its name
/// and family alone and keeps the settings it was made with for as long as one rule names it,
/// and a rewritten rule is checked before the old one is freed: under one fixed name a new
/// rate would be written, listed, and never enforced.
fn rate_table(rate: NewConnectionRate) -> String {
    let key = format!(
        "{}/{}/{}",
        rate.per_second, rate.burst, rate.per_destination
    );
    format!(
        "ipmasq-{}",
        &crate::config::digest::sha256_hex(key.as_bytes())[..8]
    )
}
/// The `hashlimit` table's buckets and most entries (pods, or pod-destination pairs, seen in
/// the last `EXPIRE_MS`): a full table drops what it cannot hold, so it is sized for a node.
const RATE_TABLE_SIZE: u32 = 16_384;
const RATE_TABLE_MAX: u32 = 131_072;
const RATE_EXPIRE_MS: u32 = 10_000;

/// How long a pod `connlimit` found over its count is refused without a recount: `recent`
/// counts in whole seconds, so its least. The kernel recounts by walking the pod's whole list
/// of connections, looking each up in the conntrack table, once a tick while new connections
/// come; remembered, a pod flooding at its limit pays a lookup instead.
const FULL_SECONDS: u32 = 1;

/// Our chains of the filter table, named after the nat chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ShareChains {
    pub share: String,
    pub limit: String,
    /// Where the rate's refusals are logged, then refused.
    pub over_rate: String,
    /// Where the connection limit's refusals are logged, then refused.
    pub over_connections: String,
    pub refuse: String,
    /// The `recent` list of the pods found over their connection limit (not a chain).
    pub full: String,
}

/// How many chains of ours the share has in the filter table.
pub(super) const SHARE_CHAINS: usize = 5;

impl ShareChains {
    pub fn new(chain: &ChainName) -> Self {
        ShareChains {
            share: format!("{chain}-SHARE"),
            limit: format!("{chain}-LIMIT"),
            over_rate: format!("{chain}-RATE"),
            over_connections: format!("{chain}-CONNS"),
            refuse: format!("{chain}-REFUSE"),
            full: format!("{chain}-FULL"),
        }
    }

    /// In the order iptables-save lists chains (by name), which is also the order they are
    /// compared and reported in.
    pub fn all(&self) -> [&str; SHARE_CHAINS] {
        [
            &self.over_connections,
            &self.limit,
            &self.over_rate,
            &self.refuse,
            &self.share,
        ]
    }

    /// The longest of the five, for iptables' 28-character limit.
    pub fn longest(&self) -> &str {
        &self.refuse
    }
}

/// The FORWARD jump as iptables-save prints it (without `-A FORWARD`).
pub(super) fn jump_spec(chains: &ShareChains) -> String {
    format!(
        "-m comment --comment \"{POD_SHARE_COMMENT}\" -m conntrack --ctstate NEW -j {}",
        chains.share
    )
}

/// The share rendered: each chain's `-A` lines, in [`ShareChains::all`]'s order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RenderedShare {
    pub chains: ShareChains,
    pub lines: [Vec<String>; SHARE_CHAINS],
    pub jump: String,
}

/// The share of `ruleset`, or None when its config limits nothing (then nothing is written).
pub(super) fn render(ruleset: &Ruleset) -> Option<RenderedShare> {
    let share = ruleset.pod_share;
    if !share.is_limited() {
        return None;
    }
    let chains = ShareChains::new(&ruleset.names.chain);
    Some(RenderedShare {
        lines: [
            over_lines(&chains, ShareLimit::Connections),
            limit_lines(&chains, share, ruleset.family),
            over_lines(&chains, ShareLimit::Rate),
            refuse_lines(&chains, ruleset.family),
            walk_lines(&chains, ruleset),
        ],
        jump: jump_spec(&chains),
        chains,
    })
}

/// How many rules the share of `ruleset` writes and their text's bytes.
pub(super) fn rule_count_and_text_bytes(ruleset: &Ruleset) -> (usize, usize) {
    render(ruleset).map_or((0, 0), |r| {
        let lines = r.lines.iter().flatten();
        (
            lines.clone().count() + 1,
            lines.map(|l| l.len() + 1).sum::<usize>() + r.jump.len() + 12,
        )
    })
}

/// `<chain>-SHARE`: the nat chain's walk, with `-g LIMIT` where the nat chain translates.
fn walk_lines(chains: &ShareChains, ruleset: &Ruleset) -> Vec<String> {
    let share = &chains.share;
    let limit = &chains.limit;
    let mut lines: Vec<String> = source_gate(ruleset)
        .into_iter()
        .map(|gate| format!("-A {share} {gate} -j RETURN"))
        .collect();
    let interfaces = &ruleset.entry.output_interfaces;
    let to_limit = |destination: Option<&ipnet::IpNet>, lines: &mut Vec<String>| {
        let d = destination.map_or(String::new(), |d| format!(" -d {d}"));
        if interfaces.is_empty() {
            lines.push(format!("-A {share}{d} -g {limit}"));
        }
        for i in interfaces {
            lines.push(format!("-A {share}{d} -o {} -g {limit}", i.iptables()));
        }
    };
    for decision in ruleset.decisions.iter() {
        match decision.action {
            Action::KeepSource => {
                lines.push(format!("-A {share} -d {} -j RETURN", decision.destination))
            }
            Action::Masquerade => to_limit(Some(&decision.destination), &mut lines),
        }
    }
    to_limit(None, &mut lines);
    lines
}

/// The `recent` match's mask of a whole address, as iptables-save prints it.
fn full_mask(family: Family) -> &'static str {
    match family {
        Family::V4 => "255.255.255.255",
        Family::V6 => "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    }
}

/// `<chain>-LIMIT`: the rate first (a connection it refuses is never counted), then a pod
/// remembered over its count, then the count (which remembers a pod it finds over).
fn limit_lines(chains: &ShareChains, share: PodShare, family: Family) -> Vec<String> {
    let limit = &chains.limit;
    let (over_rate, over_connections) = (&chains.over_rate, &chains.over_connections);
    let mut lines = Vec::new();
    if let Some(rate) = share.new_connection_rate {
        let mode = if rate.per_destination {
            "srcip,dstip,dstport"
        } else {
            "srcip"
        };
        lines.push(format!(
            "-A {limit} -m comment --comment \"{POD_RATE_COMMENT}\" -m hashlimit --hashlimit-above {} --hashlimit-burst {} --hashlimit-mode {mode} --hashlimit-name {} --hashlimit-htable-size {RATE_TABLE_SIZE} --hashlimit-htable-max {RATE_TABLE_MAX} --hashlimit-htable-expire {RATE_EXPIRE_MS} -j {over_rate}",
            saved_rate(rate),
            rate.burst,
            rate_table(rate),
        ));
    }
    if let Some(count) = share.connection_limit {
        let mask = match family {
            Family::V4 => 32,
            Family::V6 => 128,
        };
        let remembered = format!(
            "--name {} --mask {} --rsource",
            chains.full,
            full_mask(family)
        );
        lines.push(format!(
            "-A {limit} -m comment --comment \"{POD_CONNECTIONS_COMMENT}\" -m recent --rcheck --seconds {FULL_SECONDS} {remembered} -j {over_connections}"
        ));
        lines.push(format!(
            "-A {limit} -m comment --comment \"{POD_CONNECTIONS_COMMENT}\" -m connlimit --connlimit-above {count} --connlimit-mask {mask} --connlimit-saddr -m recent --set {remembered} -j {over_connections}"
        ));
    }
    lines
}

/// `<chain>-RATE` or `<chain>-CONNS`: the refused packet copied to the SNAT log's NFLOG group
/// with the limit's prefix (as iptables-save prints the target), then refused. A copy nobody
/// listens for costs nothing.
fn over_lines(chains: &ShareChains, limit: ShareLimit) -> Vec<String> {
    let over = match limit {
        ShareLimit::Rate => &chains.over_rate,
        ShareLimit::Connections => &chains.over_connections,
    };
    vec![
        format!(
            "-A {over} -j NFLOG --nflog-prefix {} --nflog-group {SHARE_LOG_GROUP} --nflog-size {SHARE_LOG_SNAPLEN}",
            limit.log_prefix()
        ),
        format!("-A {over} -g {}", chains.refuse),
    ]
}

/// `<chain>-REFUSE`: what a pod over its share sees at once.
fn refuse_lines(chains: &ShareChains, family: Family) -> Vec<String> {
    let refuse = &chains.refuse;
    let icmp = match family {
        Family::V4 => "icmp-admin-prohibited",
        Family::V6 => "icmp6-adm-prohibited",
    };
    vec![
        format!("-A {refuse} -p tcp -j REJECT --reject-with tcp-reset"),
        format!("-A {refuse} -j REJECT --reject-with {icmp}"),
    ]
}

/// The rate as iptables-save prints it back: hashlimit keeps the interval between tokens in
/// millionths of a second (`1,000,000 / rate`, rounded down) and prints the largest unit
/// that divides it evenly enough (libxt_hashlimit's `print_rate`), so 30,000/s is kept and
/// printed as 30303/sec.
fn saved_rate(rate: NewConnectionRate) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("day", 86_400_000_000),
        ("hour", 3_600_000_000),
        ("min", 60_000_000),
        ("sec", 1_000_000),
    ];
    let period = 1_000_000 / u64::from(rate.per_second.max(1));
    let mut i = 1;
    while i < UNITS.len() {
        let mult = UNITS[i].1;
        if period > mult || mult / period < mult % period {
            break;
        }
        i += 1;
    }
    let (name, mult) = UNITS[i - 1];
    format!("{}/{name}", mult / period)
}

/// The share as the filter table holds it: our chains' lines (None: the chain is absent), the
/// FORWARD rules that jump to the walk, and each LIMIT rule's packet counter when read with
/// counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SavedShare {
    pub lines: [Option<Vec<String>>; SHARE_CHAINS],
    pub jumps: Vec<String>,
    /// Packets each `<chain>-LIMIT` rule sent to REFUSE, by the rule's comment.
    pub refused: Vec<ShareRefusals>,
}

impl SavedShare {
    pub fn is_empty(&self) -> bool {
        self.lines.iter().all(Option::is_none) && self.jumps.is_empty()
    }

    /// The neutral view: None when nothing of ours is there.
    pub fn live(&self) -> Option<LiveShare> {
        (!self.is_empty()).then(|| LiveShare {
            installed: self.lines.iter().all(Option::is_some) && !self.jumps.is_empty(),
            refusals: self.refused.clone(),
        })
    }
}

/// Our chains and jumps from an `iptables-save -t filter` (with or without `-c`).
pub(super) fn parse(saved: &str, chains: &ShareChains) -> SavedShare {
    let mut live = SavedShare::default();
    let names = chains.all();
    let mut in_filter = false;
    for raw in saved.lines() {
        let line = raw.trim_end();
        if let Some(table) = line.strip_prefix('*') {
            in_filter = table == "filter";
            continue;
        }
        if !in_filter {
            continue;
        }
        if let Some(declared) = line.strip_prefix(':') {
            let name = declared.split(' ').next().unwrap_or_default();
            if let Some(i) = names.iter().position(|n| *n == name) {
                live.lines[i].get_or_insert_with(Vec::new);
            }
            continue;
        }
        let (packets, rule) = split_counters(line);
        let Some(rest) = rule.strip_prefix("-A ") else {
            continue;
        };
        let (chain, spec) = rest.split_once(' ').unwrap_or((rest, ""));
        if chain == FORWARD {
            if super::saved::jump_target(spec).as_deref() == Some(chains.share.as_str()) {
                live.jumps.push(spec.to_string());
            }
        } else if let Some(i) = names.iter().position(|n| *n == chain) {
            live.lines[i]
                .get_or_insert_with(Vec::new)
                .push(rule.to_string());
            if chain == chains.limit {
                let limit = if spec.contains(ShareLimit::Rate.rule_comment()) {
                    ShareLimit::Rate
                } else {
                    ShareLimit::Connections
                };
                ShareRefusals::tally(&mut live.refused, limit, packets.unwrap_or(0));
            }
        }
    }
    live
}

/// `[packets:bytes] -A ...` into the packets and the rule.
fn split_counters(line: &str) -> (Option<u64>, &str) {
    let Some(rest) = line.strip_prefix('[') else {
        return (None, line);
    };
    let Some((counters, rule)) = rest.split_once("] ") else {
        return (None, line);
    };
    let packets = counters.split(':').next().and_then(|p| p.parse().ok());
    (packets, rule)
}

/// What differs, and the filter section of the transaction that repairs it (None: in sync).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ShareDrift {
    pub differences: Vec<Difference>,
    pub script: Option<String>,
}

/// The differences between the share `desired` (None: none configured) and `live`, and the
/// filter section that makes live what is desired: only the chains that differ are written,
/// the FORWARD jump is inserted first when it is missing; with nothing desired, what is ours
/// is removed.
pub(super) fn diff(
    family: Family,
    chains: &ShareChains,
    desired: Option<&RenderedShare>,
    live: &SavedShare,
) -> ShareDrift {
    let Some(desired) = desired else {
        return removal(family, chains, live);
    };
    let mut drift = ShareDrift::default();
    let mut script = String::from("*filter\n");
    let mut body = String::new();
    let mut wrote = false;
    for (i, name) in chains.all().iter().enumerate() {
        let want = &desired.lines[i];
        match &live.lines[i] {
            Some(have) if have == want => continue,
            Some(_) => drift.differences.push(difference(
                family,
                format!("chain {name} differs from the pod share"),
            )),
            None => drift
                .differences
                .push(difference(family, format!("chain {name} is missing"))),
        }
        let _ = writeln!(script, ":{name} - [0:0]");
        for line in want {
            body.push_str(line);
            body.push('\n');
        }
        wrote = true;
    }
    script.push_str(&body);
    let canonical = live.jumps.iter().filter(|j| **j == desired.jump).count();
    for stale in live.jumps.iter().filter(|j| **j != desired.jump) {
        let found = format!("FORWARD rule `{stale}` jumps to the pod share");
        let line = format!("-D {FORWARD} {stale}");
        mend_jump(&mut drift, &mut script, difference(family, found), line);
        wrote = true;
    }
    for _ in 1..canonical.max(1) {
        let found = "FORWARD jumps to the pod share twice".to_string();
        let line = format!("-D {FORWARD} {}", desired.jump);
        mend_jump(&mut drift, &mut script, difference(family, found), line);
        wrote = true;
    }
    if canonical == 0 {
        let found = "no FORWARD rule sends new connections to the pod share".to_string();
        let line = format!("-I {FORWARD} 1 {}", desired.jump);
        mend_jump(&mut drift, &mut script, difference(family, found), line);
        wrote = true;
    }
    script.push_str("COMMIT\n");
    drift.script = wrote.then_some(script);
    drift
}

/// The filter section that removes every chain and jump of ours (None: there is none).
fn removal(family: Family, chains: &ShareChains, live: &SavedShare) -> ShareDrift {
    if live.is_empty() {
        return ShareDrift::default();
    }
    let mut script = String::from("*filter\n");
    for jump in &live.jumps {
        let _ = writeln!(script, "-D {FORWARD} {jump}");
    }
    let present: Vec<&str> = chains
        .all()
        .into_iter()
        .zip(&live.lines)
        .filter(|(_, lines)| lines.is_some())
        .map(|(name, _)| name)
        .collect();
    for name in &present {
        let _ = writeln!(script, ":{name} - [0:0]");
    }
    for name in &present {
        let _ = writeln!(script, "-X {name}");
    }
    script.push_str("COMMIT\n");
    ShareDrift {
        differences: vec![difference(
            family,
            "the pod share's rules are there, but the config limits nothing".into(),
        )],
        script: Some(script),
    }
}

/// A difference of the share: always `ShareDiffers`, apart from the masquerade's kinds.
fn difference(family: Family, detail: String) -> Difference {
    Difference {
        family,
        kind: DriftKind::ShareDiffers,
        position: None,
        detail,
    }
}

/// A difference of a FORWARD jump and the script line that mends it.
fn mend_jump(drift: &mut ShareDrift, script: &mut String, difference: Difference, line: String) {
    drift.differences.push(difference);
    script.push_str(&line);
    script.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::pod_share::DEFAULT_BURST;
    use crate::config::{check_text, Options};
    use crate::plan::{plan, PlanOptions, ResolvedEgress};

    fn ruleset(text: &str) -> Ruleset {
        let config = check_text(text, &Options::default())
            .config()
            .unwrap()
            .clone();
        plan(&config, &PlanOptions::default(), &ResolvedEgress::default()).remove(0)
    }

    #[test]
    fn rates_are_spelt_as_hashlimit_prints_them() {
        let rate = |per_second| NewConnectionRate {
            per_second,
            burst: DEFAULT_BURST,
            per_destination: false,
        };
        assert_eq!(saved_rate(rate(200)), "200/sec");
        assert_eq!(saved_rate(rate(7)), "7/sec");
        assert_eq!(saved_rate(rate(1)), "1/sec");
        assert_eq!(saved_rate(rate(30_000)), "30303/sec");
        assert_eq!(saved_rate(rate(100_000)), "100000/sec");
    }

    #[test]
    fn each_rate_has_a_table_of_its_own() {
        let rate = |per_second, burst, per_destination| NewConnectionRate {
            per_second,
            burst,
            per_destination,
        };
        let names = [
            rate_table(rate(200, 5, false)),
            rate_table(rate(201, 5, false)),
            rate_table(rate(200, 6, false)),
            rate_table(rate(200, 5, true)),
        ];
        for (i, name) in names.iter().enumerate() {
            assert_eq!(name.len(), 15, "{name}: the most a hashlimit name holds");
            assert!(
                names[i + 1..].iter().all(|other| other != name),
                "{names:?}"
            );
        }
        assert_eq!(rate_table(rate(200, 5, false)), names[0], "stable");
    }

    #[test]
    fn nothing_is_rendered_without_a_share() {
        assert_eq!(render(&ruleset("nonMasqueradeCIDRs: [10.0.0.0/8]\n")), None);
    }

    #[test]
    fn the_share_walks_the_decisions_and_refuses_at_once() {
        let r = ruleset(
            "nonMasqueradeCIDRs: [10.0.0.0/8]\nforceMasqueradeCIDRs: [10.1.0.0/16]\npodConnectionLimit: 100\npodNewConnectionRate: 50/s\npodNewConnectionBurst: 10\n",
        );
        let share = render(&r).unwrap();
        assert_eq!(
            share.lines[4],
            [
                "-A IP-MASQ-AGENT-SHARE -d 169.254.0.0/16 -j RETURN",
                "-A IP-MASQ-AGENT-SHARE -d 10.1.0.0/16 -g IP-MASQ-AGENT-LIMIT",
                "-A IP-MASQ-AGENT-SHARE -d 10.0.0.0/8 -j RETURN",
                "-A IP-MASQ-AGENT-SHARE -g IP-MASQ-AGENT-LIMIT",
            ]
        );
        assert!(share.lines[1][0]
            .contains("--hashlimit-above 50/sec --hashlimit-burst 10 --hashlimit-mode srcip "));
        assert!(share.lines[1][0].ends_with(" -j IP-MASQ-AGENT-RATE"));
        assert_eq!(
            share.lines[1][1],
            "-A IP-MASQ-AGENT-LIMIT -m comment --comment \"ipmasq: a pod over podConnectionLimit is refused\" -m recent --rcheck --seconds 1 --name IP-MASQ-AGENT-FULL --mask 255.255.255.255 --rsource -j IP-MASQ-AGENT-CONNS"
        );
        assert_eq!(
            share.lines[1][2],
            "-A IP-MASQ-AGENT-LIMIT -m comment --comment \"ipmasq: a pod over podConnectionLimit is refused\" -m connlimit --connlimit-above 100 --connlimit-mask 32 --connlimit-saddr -m recent --set --name IP-MASQ-AGENT-FULL --mask 255.255.255.255 --rsource -j IP-MASQ-AGENT-CONNS"
        );
        assert_eq!(
            share.lines[0],
            [
                "-A IP-MASQ-AGENT-CONNS -j NFLOG --nflog-prefix ipmasq-share-connections --nflog-group 7373 --nflog-size 80",
                "-A IP-MASQ-AGENT-CONNS -g IP-MASQ-AGENT-REFUSE",
            ]
        );
        assert_eq!(
            share.lines[2],
            [
                "-A IP-MASQ-AGENT-RATE -j NFLOG --nflog-prefix ipmasq-share-rate --nflog-group 7373 --nflog-size 80",
                "-A IP-MASQ-AGENT-RATE -g IP-MASQ-AGENT-REFUSE",
            ]
        );
        assert_eq!(share.lines[3].len(), 2);
    }

    #[test]
    fn in_sync_writes_nothing_and_a_changed_chain_alone_is_rewritten() {
        let r = ruleset("podConnectionLimit: 100\n");
        let desired = render(&r).unwrap();
        let chains = &desired.chains;
        let live = SavedShare {
            lines: desired.lines.clone().map(Some),
            jumps: vec![desired.jump.clone()],
            refused: Vec::new(),
        };
        assert_eq!(
            diff(r.family, chains, Some(&desired), &live),
            ShareDrift::default()
        );
        let mut changed = live.clone();
        changed.lines[1] = Some(vec!["-A IP-MASQ-AGENT-LIMIT -j ACCEPT".into()]);
        let drift = diff(r.family, chains, Some(&desired), &changed);
        let script = drift.script.unwrap();
        assert!(script.contains(":IP-MASQ-AGENT-LIMIT - [0:0]"));
        assert!(!script.contains(":IP-MASQ-AGENT-SHARE"), "{script}");
        assert!(!script.contains("-I FORWARD"), "{script}");
        let mut unhooked = live.clone();
        unhooked.jumps.clear();
        let script = diff(r.family, chains, Some(&desired), &unhooked)
            .script
            .unwrap();
        assert!(script.contains(&format!("-I FORWARD 1 {}", desired.jump)));
        let removed = diff(r.family, chains, None, &live).script.unwrap();
        assert!(removed.contains("-X IP-MASQ-AGENT-SHARE"));
        assert!(removed.contains(&format!("-D FORWARD {}", desired.jump)));
        assert_eq!(
            diff(r.family, chains, None, &SavedShare::default()).script,
            None
        );
    }

    #[test]
    fn a_saved_filter_table_is_read_back_with_counters() {
        let r = ruleset("podConnectionLimit: 100\npodNewConnectionRate: 20/s\n");
        let desired = render(&r).unwrap();
        let mut saved = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
        for name in desired.chains.all() {
            saved.push_str(&format!(":{name} - [0:0]\n"));
        }
        saved.push_str(&format!("[7:420] -A FORWARD {}\n", desired.jump));
        for (i, lines) in desired.lines.iter().enumerate() {
            for line in lines {
                saved.push_str(&format!("[{}:0] {line}\n", i + 3));
            }
        }
        saved.push_str("COMMIT\n");
        let live = parse(&saved, &desired.chains);
        assert_eq!(live.lines, desired.lines.clone().map(Some));
        assert_eq!(live.jumps, std::slice::from_ref(&desired.jump));
        let refused: Vec<(ShareLimit, u64)> =
            live.refused.iter().map(|r| (r.limit, r.refused)).collect();
        assert_eq!(
            refused,
            [(ShareLimit::Rate, 4), (ShareLimit::Connections, 8)],
            "the connection limit's two rules summed"
        );
        assert!(live.live().unwrap().installed);
    }
}
