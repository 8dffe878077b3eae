//! Property test (proptest): a hint never changes a verdict. Every edit `validate` suggests
//! (delete a repeated, covered or ineffective CIDR), applied alone or all together, leaves the
//! `decide` verdict of every address at every boundary of every listed range as it was.

use crate::config::check_text;
use crate::config::{Code, Config, Options};
use crate::plan::{decide, plan_family, Action, Family, PlanOptions};
use ipnet::{IpNet, Ipv4Net};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

/// The hints that suggest deleting the entry they point at.
const DELETING_HINTS: [Code; 3] = [
    Code::CoveredCidr,
    Code::DuplicateCidr,
    Code::ForcedWithoutEffect,
];

/// A range near 10.0.0.0/16 or in link-local, so that ranges nest often.
fn nearby_range() -> impl Strategy<Value = Ipv4Net> {
    (any::<bool>(), 8u8..=28, any::<u16>()).prop_map(|(link_local, prefix, low)| {
        let (base, prefix) = if link_local {
            (0xA9FE_0000u32, prefix.max(16))
        } else {
            (0x0A00_0000u32, prefix)
        };
        Ipv4Net::new(Ipv4Addr::from(base | u32::from(low)), prefix)
            .expect("prefix in range")
            .trunc()
    })
}

/// The config text, one entry per line, and which list line each entry is on (1-based).
fn render(kept: &[Ipv4Net], forced: &[Ipv4Net], masq_link_local: bool) -> (String, Vec<usize>) {
    let mut text = format!("masqLinkLocal: {masq_link_local}\nnonMasqueradeCIDRs:\n");
    let mut lines = Vec::new();
    let mut line = 2;
    for net in kept {
        line += 1;
        lines.push(line);
        text.push_str(&format!("  - {net}\n"));
    }
    text.push_str("forceMasqueradeCIDRs:\n");
    line += 1;
    for net in forced {
        line += 1;
        lines.push(line);
        text.push_str(&format!("  - {net}\n"));
    }
    (text, lines)
}

fn probes(config: &Config) -> BTreeSet<Ipv4Addr> {
    let mut out = BTreeSet::new();
    let listed = config
        .non_masquerade_cidrs
        .iter()
        .chain(&config.force_masquerade_cidrs);
    for net in listed.chain(&["169.254.0.0/16".parse().expect("constant")]) {
        if let IpNet::V4(net) = net {
            let (low, high) = (u32::from(net.network()), u32::from(net.broadcast()));
            for addr in [
                low.wrapping_sub(1),
                low,
                low + 1,
                high - 1,
                high,
                high.wrapping_add(1),
            ] {
                out.insert(Ipv4Addr::from(addr));
            }
        }
    }
    out
}

fn verdicts(config: &Config, at: &BTreeSet<Ipv4Addr>) -> Vec<(Ipv4Addr, Action)> {
    let ruleset = plan_family(
        config,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    );
    let pod = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
    at.iter()
        .map(|a| (*a, decide(&ruleset, pod, IpAddr::V4(*a)).action))
        .collect()
}

fn checked_config(text: &str) -> Option<(Config, Vec<usize>)> {
    let checked = check_text(text, &Options::default());
    let lines = checked
        .diagnostics()
        .iter()
        .filter(|d| DELETING_HINTS.contains(&d.code))
        .map(|d| {
            d.location
                .expect("a deleting hint points at its entry")
                .line
        })
        .collect();
    checked.into_config().map(|config| (config, lines))
}

fn without_lines(text: &str, lines: &[usize]) -> String {
    text.lines()
        .enumerate()
        .filter(|(i, _)| !lines.contains(&(i + 1)))
        .map(|(_, l)| format!("{l}\n"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn applying_a_deleting_hint_changes_no_verdict(
        kept in proptest::collection::vec(nearby_range(), 1..7),
        forced in proptest::collection::vec(nearby_range(), 0..5),
        masq_link_local in any::<bool>(),
    ) {
        let (text, _) = render(&kept, &forced, masq_link_local);
        // A range both kept and forced is an error: no config, nothing to compare.
        let Some((config, hinted)) = checked_config(&text) else { return Ok(()) };
        let at = probes(&config);
        let before = verdicts(&config, &at);
        let mut edits: Vec<Vec<usize>> = hinted.iter().map(|l| vec![*l]).collect();
        edits.push(hinted.clone());
        for edit in edits {
            let edited = without_lines(&text, &edit);
            let (after, _) = checked_config(&edited)
                .unwrap_or_else(|| panic!("deleting lines {edit:?} made the config invalid:\n{edited}"));
            prop_assert_eq!(&verdicts(&after, &at), &before,
                "deleting lines {:?} of\n{}changed a verdict", edit, text);
        }
    }
}

#[test]
fn a_kept_range_between_a_forced_and_a_kept_one_gets_no_hint() {
    // The case: deleting 10.8.1.0/24 would flip 10.8.1.5 from kept to masqueraded.
    let (text, _) = render(
        &[
            "10.0.0.0/8".parse().expect("constant"),
            "10.8.1.0/24".parse().expect("constant"),
        ],
        &["10.8.0.0/16".parse().expect("constant")],
        false,
    );
    let (_, hinted) = checked_config(&text).expect("valid");
    assert_eq!(hinted, Vec::<usize>::new(), "{text}");
    // Without the forced range it is covered, and said so.
    let (_, hinted) =
        checked_config("nonMasqueradeCIDRs: [10.0.0.0/8, 10.8.1.0/24]\n").expect("valid");
    assert_eq!(hinted, vec![1]);
}
