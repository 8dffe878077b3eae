//! Property tests (proptest) of the nftables reading on damaged tables: set elements deleted,
//! the local skip deleted, a hand-written rule inserted first. The live walk must be the
//! kernel's (a packet to a local address leaves only while the skip is first; the hand rule,
//! then the set, then the masquerade), and `compare` must find drift exactly when there is
//! some.

use super::live::{LiveRuleSpec, LiveTable};
use super::render::DesiredTable;
use super::Nftables;
use crate::backend::{Backend, HookStatus};
use crate::config::{Config, Options};
use crate::plan::{plan_family, Action, Family, PlanOptions};
use ipnet::{IpNet, Ipv4Net};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

fn net() -> impl Strategy<Value = Ipv4Net> {
    (any::<u32>(), 4u8..=32).prop_map(|(addr, len)| {
        Ipv4Net::new(Ipv4Addr::from(addr), len)
            .expect("length in range")
            .trunc()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_damaged_table_is_walked_as_the_kernel_walks_it(
        cidrs in prop::collection::vec(net(), 0..12),
        deleted in prop::collection::vec(any::<usize>(), 0..4),
        skip_deleted in any::<bool>(),
        hand_rule in prop::option::of(net()),
        packets in prop::collection::vec((any::<u32>(), any::<u32>(), any::<bool>()), 1..24),
    ) {
        let mut config = Config::defaults(&Options::default());
        config.non_masquerade_cidrs = cidrs.iter().map(|n| IpNet::V4(*n)).collect();
        let no_egress = crate::plan::ResolvedEgress::default();
        let desired = plan_family(&config, &PlanOptions::default(), &no_egress, Family::V4);
        let table = DesiredTable::new(&desired).expect("a table");
        let mut live = LiveTable::written(&table);
        for index in &deleted {
            if !live.sets[0].elements.is_empty() {
                let n = live.sets[0].elements.len();
                live.sets[0].elements.remove(index % n);
            }
        }
        if skip_deleted {
            live.rules.remove(0);
        }
        if let Some(net) = hand_rule {
            live.rules.insert(0, LiveRuleSpec {
                statements: format!("ip daddr {net} return"),
                comment: None,
                counters: None,
            });
        }
        let inspection = live.inspection();
        let skips_local = !skip_deleted && hand_rule.is_none();
        prop_assert_eq!(inspection.entry(), HookStatus::Hooked { skips_local });
        for (src, dst, local) in packets {
            let (src, dst) = (IpAddr::V4(src.into()), IpAddr::V4(dst.into()));
            let kept = (local && skips_local)
                || hand_rule.is_some_and(|n| IpNet::V4(n).contains(&dst))
                || live.sets[0].elements.iter().any(|e| e.contains(&dst));
            let expected = if kept { Action::KeepSource } else { Action::Masquerade };
            let walked = inspection.evaluate(src, dst, local);
            prop_assert_eq!(walked.action, expected, "{} -> {} (local {})", src, dst, local);
            prop_assert!(walked.unjudged.is_empty() || skip_deleted || hand_rule.is_some());
        }
        let damaged = !deleted.is_empty() && !table.elements.is_empty()
            || skip_deleted
            || hand_rule.is_some();
        let drift = Nftables::new().compare(&desired, &live.inspected());
        prop_assert_eq!(!drift.is_empty(), damaged, "{:?}", drift);
    }
}
