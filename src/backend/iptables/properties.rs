//! Property tests (proptest: a failure shrinks to a small case) of the iptables reading on
//! damaged chains: decisions deleted, duplicated and reordered, foreign rules inserted. The
//! live walk over the saved text must be `decide` over the damaged decisions, naming every
//! foreign rule it meets as unjudged; `compare` must find drift exactly when there is some.

use super::render::{jump_spec, Rendered, NON_MASQ_COMMENT};
use super::saved::{Jump, LiveChain};
use super::{Iptables, Variant};
use crate::backend::{Backend, Inspected};
use crate::config::{Config, Options};
use crate::plan::{decide, plan, Action, Decision, DecisionOrigin, PlanOptions, Ruleset};
use ipnet::{IpNet, Ipv4Net};
use proptest::prelude::*;
use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};

/// A damage done to the list of decisions.
#[derive(Clone, Debug)]
enum Damage {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
}

fn net() -> impl Strategy<Value = Ipv4Net> {
    (any::<u32>(), 4u8..=32).prop_map(|(addr, len)| {
        Ipv4Net::new(Ipv4Addr::from(addr), len)
            .expect("length in range")
            .trunc()
    })
}

fn decisions() -> impl Strategy<Value = Vec<Decision>> {
    prop::collection::vec((net(), any::<bool>()), 0..10).prop_map(|list| {
        list.into_iter()
            .enumerate()
            .map(|(index, (net, keep))| Decision {
                destination: IpNet::V4(net),
                action: if keep {
                    Action::KeepSource
                } else {
                    Action::Masquerade
                },
                origin: if keep {
                    DecisionOrigin::NonMasqueradeCidr { index }
                } else {
                    DecisionOrigin::ForceMasqueradeCidr { index }
                },
            })
            .collect()
    })
}

fn damages() -> impl Strategy<Value = Vec<Damage>> {
    prop::collection::vec(
        prop_oneof![
            any::<usize>().prop_map(Damage::Delete),
            any::<usize>().prop_map(Damage::Duplicate),
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Damage::Swap(a, b)),
        ],
        0..4,
    )
}

fn damaged(original: &[Decision], damages: &[Damage]) -> Vec<Decision> {
    let mut list = original.to_vec();
    for damage in damages {
        if list.is_empty() {
            break;
        }
        let n = list.len();
        match *damage {
            Damage::Delete(i) => {
                list.remove(i % n);
            }
            Damage::Duplicate(i) => list.insert(i % n, list[i % n].clone()),
            Damage::Swap(a, b) => list.swap(a % n, b % n),
        }
    }
    list
}

fn with_decisions(base: &Ruleset, decisions: Vec<Decision>) -> Ruleset {
    Ruleset {
        decisions: decisions.into(),
        ..base.clone()
    }
}

/// A rule of someone else's inside our chain: a mark match no walk can judge, or a verdict
/// that is not ours.
fn foreign_line(chain: &str, net: Ipv4Net, mark: bool) -> String {
    if mark {
        format!("-A {chain} -d {net} -m mark --mark 0x1 -m comment --comment \"{NON_MASQ_COMMENT}\" -j RETURN")
    } else {
        format!("-A {chain} -d {net} -j ACCEPT")
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_damaged_chain_is_walked_as_decide_walks_its_decisions(
        original in decisions(),
        damage in damages(),
        foreign in prop::collection::vec((any::<usize>(), net(), any::<bool>()), 0..3),
        packets in prop::collection::vec((any::<u32>(), any::<u32>()), 1..24),
    ) {
        let no_egress = crate::plan::ResolvedEgress::default();
        let base = plan(&Config::defaults(&Options::default()), &PlanOptions::default(), &no_egress)
            .remove(0);
        let intended = with_decisions(&base, original.clone());
        let live_set = with_decisions(&base, damaged(&original, &damage));
        let mut lines = Rendered::new(&live_set).lines;
        let chain = base.names.chain.to_string();
        let mut inserted = Vec::new();
        for (at, net, mark) in &foreign {
            let at = at % (lines.len() + 1);
            lines.insert(at, foreign_line(&chain, *net, *mark));
            inserted.push(at);
        }
        let spec = jump_spec(&base.names.chain);
        let chain_view = LiveChain {
            chain_exists: true,
            rules: lines.iter().map(|l| Cow::Borrowed(l.as_str())).collect(),
            counters: vec![None; lines.len()],
            jumps: vec![Jump { position: 1, spec: Cow::Borrowed(spec.as_str()), counters: None }],
            postrouting_rules: 1,
            ..LiveChain::default()
        };
        let inspection = chain_view.inspection();
        let foreign_numbers: Vec<usize> = inspection
            .rules
            .iter()
            .filter(|r| !r.matches.unjudged.is_empty() || matches!(r.verdict, crate::backend::RuleVerdict::Foreign(_)))
            .map(|r| r.number)
            .collect();
        prop_assert_eq!(foreign_numbers.len(), foreign.len());
        for (src, dst) in packets {
            let (src, dst) = (IpAddr::V4(src.into()), IpAddr::V4(dst.into()));
            let walked = inspection.evaluate(src, dst, false);
            prop_assert_eq!(walked.action, decide(&live_set, src, dst).action, "{} -> {}", src, dst);
            for index in &walked.unjudged {
                prop_assert!(foreign_numbers.contains(&inspection.rules[*index].number));
            }
        }
        let backend = Iptables::new(Variant::Nft);
        let drift = backend.compare(&intended, &Inspected::neutral(inspection.clone()));
        let lines_same = Rendered::new(&intended).lines == lines;
        prop_assert_eq!(drift.is_empty(), lines_same, "{:?}", drift);
    }
}
