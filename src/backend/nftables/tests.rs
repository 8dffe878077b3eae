//! Unit tests of the nftables backend's pure parts: the model, the batches decoded to nft
//! syntax (golden), and the diff. Root tests apply the batches to the real kernel and read
//! them back over netlink and with `nft`.

use super::diff::{diff, Repair};
use super::live::LiveTable;
use super::render::{DesiredTable, Leftovers, Remake};
use crate::backend::DriftKind;
use crate::config::{Config, Options};
use crate::netlink::nf_tables::script;
use crate::netlink::nf_tables::wire::Finished;
use crate::plan::{plan, plan_family, Family, PlanOptions, Ruleset};

fn default_table(options: &PlanOptions) -> DesiredTable {
    let config = Config::defaults(&Options::default());
    DesiredTable::new(&plan_family(
        &config,
        options,
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    ))
    .unwrap()
}

/// The default table as the kernel holds it right after our commit.
fn listed() -> LiveTable {
    LiveTable::written(&default_table(&ports()))
}

fn ports() -> PlanOptions {
    PlanOptions {
        to_ports: "1024-29999,32768-65535".parse().unwrap(),
        ..PlanOptions::default()
    }
}

#[test]
fn element_changes_are_repaired_as_element_deltas() {
    let mut live = listed();
    live.sets[0]
        .elements
        .retain(|e| e.to_string() != "10.0.0.0/8");
    live.sets[0]
        .elements
        .push("203.0.113.0/24".parse().unwrap());
    let drift = diff(&default_table(&ports()), &live);
    let kinds: Vec<DriftKind> = drift.differences.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, [DriftKind::MissingRule, DriftKind::ExtraRule]);
    assert_eq!(
        drift.differences[0].detail,
        "10.0.0.0/8 missing from set nomasq"
    );
    let Repair::Elements(changes) = &drift.repair else {
        panic!("{:?}", drift.repair)
    };
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].remove[0].to_string(), "203.0.113.0/24");
    assert_eq!(changes[0].add[0].to_string(), "10.0.0.0/8");
    assert_eq!(
        script::render(&default_table(&ports()).element_batch(changes).unwrap().bytes),
        "delete element ip ipmasq nomasq { 203.0.113.0/24 }\nadd element ip ipmasq nomasq { 10.0.0.0/8 }\n"
    );
}

#[test]
fn rule_and_hook_drift_rewrite_or_recreate() {
    let table = default_table(&ports());
    let mut live = listed();
    live.rules.remove(0);
    let drift = diff(&table, &live);
    assert_eq!(drift.differences[0].kind, DriftKind::LocalSkipMissing);
    assert_eq!(drift.repair, Repair::Rewrite);
    let mut live = listed();
    live.rules.swap(2, 3);
    assert_eq!(
        diff(&table, &live).differences[0].kind,
        DriftKind::OutOfOrder
    );
    let mut live = listed();
    live.chain.as_mut().unwrap().priority = 100;
    let drift = diff(&table, &live);
    assert_eq!(drift.differences[0].kind, DriftKind::HookDiffers);
    assert_eq!(drift.repair, Repair::Recreate);
    let drift = diff(&table, &Default::default());
    assert_eq!(
        drift.differences.iter().map(|d| d.kind).collect::<Vec<_>>(),
        [DriftKind::ChainMissing, DriftKind::JumpMissing]
    );
}

/// A table with our name but without our mark (a neighbour's, or an older ipmasq's) is made
/// anew with the mark, whatever it holds: the batch deletes it and creates it marked.
#[test]
fn an_unmarked_table_is_recreated_marked() {
    let table = default_table(&ports());
    let mut live = listed();
    assert!(live.marked());
    live.comment = None;
    let drift = diff(&table, &live);
    assert_eq!(
        drift.differences.iter().map(|d| d.kind).collect::<Vec<_>>(),
        [DriftKind::TableUnmarked]
    );
    assert_eq!(drift.repair, Repair::Recreate);
    let empty = LiveTable {
        table_exists: true,
        comment: Some("theirs".into()),
        ..Default::default()
    };
    let drift = diff(&table, &empty);
    assert_eq!(drift.differences[0].kind, DriftKind::TableUnmarked);
    assert_eq!(drift.repair, Repair::Recreate);
    let script = script::render(&table.batch(RECREATE, &Leftovers::default()).unwrap().bytes);
    assert!(
        script.starts_with("add table ip ipmasq { comment \"managed by ipmasq\" ; }\ndelete table ip ipmasq\nadd table ip ipmasq { comment \"managed by ipmasq\" ; }\n"),
        "{script}"
    );
}

/// An unmarked table is an earlier ipmasq's only when it holds exactly what ipmasq writes.
#[test]
fn an_earlier_ipmasqs_table_is_told_from_a_neighbours() {
    let mut earlier = listed();
    assert!(!earlier.made_by_an_earlier_ipmasq(), "marked: ours anyway");
    earlier.comment = None;
    assert!(earlier.made_by_an_earlier_ipmasq());
    let mut hooked_elsewhere = earlier.clone();
    hooked_elsewhere.chain.as_mut().unwrap().priority = 100;
    assert!(!hooked_elsewhere.made_by_an_earlier_ipmasq());
    let mut their_rule = earlier.clone();
    their_rule.rules[1].comment = Some("mine".into());
    assert!(!their_rule.made_by_an_earlier_ipmasq());
    let mut not_last = earlier.clone();
    not_last.rules.last_mut().unwrap().comment =
        Some("ip-masq-agent: local traffic is not subject to MASQUERADE".into());
    assert!(!not_last.made_by_an_earlier_ipmasq());
    let mut commented = earlier.clone();
    commented.comment = Some("a neighbour's".into());
    assert!(!commented.made_by_an_earlier_ipmasq());
    let empty = LiveTable {
        table_exists: true,
        ..Default::default()
    };
    assert!(!empty.made_by_an_earlier_ipmasq());
}

#[test]
fn overlapping_and_duplicate_cidrs_are_aggregated() {
    let mut config = Config::defaults(&Options::default());
    config.non_masquerade_cidrs = ["10.0.0.0/8", "10.1.0.0/16", "10.0.0.0/8", "11.0.0.0/8"]
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    let table = DesiredTable::new(&plan_family(
        &config,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    ))
    .unwrap();
    let elements: Vec<String> = table.elements.iter().map(ToString::to_string).collect();
    assert_eq!(elements, ["10.0.0.0/7", "169.254.0.0/16"]);
}

/// Every flag combination's script, compared with the committed golden file (each is also
/// checked by `nft --check` in a namespace by the root tests). `IPMASQ_UPDATE_GOLDEN=1 cargo
/// test golden` rewrites it after a deliberate change.
#[test]
fn golden_nft_scripts_for_every_flag_combination() {
    let mut config = Config::defaults(&Options::default());
    config
        .non_masquerade_cidrs
        .extend(["fd00::/8", "10.0.0.0/8"].map(|c| c.parse::<ipnet::IpNet>().unwrap()));
    let out = golden_scripts(&config);
    crate::backend::golden::check("nft-scripts.txt", &out);
}

/// The desired table of `set`, checked against the footprint the memory model counts: its
/// rules, and its set elements with the source ranges' anonymous set.
fn table_of(set: &Ruleset) -> DesiredTable {
    let table = DesiredTable::new(set).unwrap();
    let anonymous: usize = table
        .rules
        .iter()
        .flat_map(|r| &r.stmts)
        .map(|stmt| match stmt {
            crate::netlink::nf_tables::statement::Stmt::Address { nets, .. } => nets.len(),
            _ => 0,
        })
        .sum();
    let footprint = super::render::footprint(set);
    let share = table.share.as_ref().map_or(0, |s| s.rule_count());
    assert_eq!(
        footprint.rules,
        table.rules.len() + share,
        "rules counted as built"
    );
    assert_eq!(
        footprint.set_elements,
        table.elements.len() + anonymous,
        "elements counted as built"
    );
    table
}

/// The footprint of the hostile shapes: 2,000 scattered sources are one rule and 2,000
/// elements (iptables: one rule per block of their complement); 2,000 forced CIDRs with 16
/// interfaces are 16 rewriting rules and the kept blocks.
#[test]
fn long_source_and_forced_lists_are_counted_as_written() {
    for (config, rules, elements) in [
        (crate::backend::tests::scattered_sources(2_000), 4, 2_004),
        (
            crate::backend::tests::forced_per_interface(2_000, 16),
            18,
            2_007,
        ),
    ] {
        let set = plan_family(
            &config,
            &PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
            Family::V4,
        );
        let table = table_of(&set);
        assert_eq!(
            (
                table.rules.len(),
                super::render::footprint(&set).set_elements
            ),
            (rules, elements)
        );
    }
}

/// The scripts of every flag combination, each under a `### ...` header line.
pub(crate) fn golden_scripts(config: &Config) -> String {
    golden_batches(config)
        .into_iter()
        .map(|(header, batch)| format!("{header}\n{}", script::render(&batch.bytes)))
        .collect()
}

/// The batch of every flag combination, each with its `### ...` header line (without its
/// newline): what [`golden_scripts`] renders.
pub(super) fn golden_batches(config: &Config) -> Vec<(String, Finished)> {
    let mut out = Vec::new();
    for random_fully in [true, false] {
        for to_ports in [
            "",
            "2000",
            "1024-29999,32768-65535",
            "1024-2047,4096-8191,32768-65535",
        ] {
            for enable_ipv6 in [false, true] {
                for masq_ll in [false, true] {
                    let options = PlanOptions {
                        random_fully,
                        to_ports: to_ports.parse().unwrap(),
                        enable_ipv6,
                        ..PlanOptions::default()
                    };
                    let mut config = config.clone();
                    config.masq_link_local = masq_ll;
                    config.masq_link_local_ipv6 = masq_ll;
                    for set in plan(&config, &options, &crate::plan::ResolvedEgress::default()) {
                        let table = table_of(&set);
                        out.push((
                            format!(
                                "### random-fully={random_fully} to-ports={to_ports:?} enable-ipv6={enable_ipv6} masqLinkLocal={masq_ll} family={}",
                                set.family
                            ),
                            table.batch(Remake::default(), &Leftovers::default()).unwrap(),
                        ));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_table_as_written_compares_in_sync_with_its_plan() {
    let table = default_table(&ports());
    let written = super::live::LiveTable::written(&table);
    assert!(diff(&table, &written).differences.is_empty());
}

/// A first install that takes over from iptables-nft deletes its jumps and its chain in the
/// same batch, after our table is made.
#[test]
fn a_take_over_deletes_iptables_nfts_leftovers_in_the_same_batch() {
    let leftovers = Leftovers {
        chain: Some("IP-MASQ-AGENT".into()),
        jumps: vec![9],
    };
    let text = script::render(
        &default_table(&ports())
            .batch(Remake::default(), &leftovers)
            .unwrap()
            .bytes,
    );
    assert!(
        text.ends_with("add rule ip ipmasq postrouting counter masquerade fully-random comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\"\ndelete rule ip nat POSTROUTING handle 9\nflush chain ip nat IP-MASQ-AGENT\ndelete chain ip nat IP-MASQ-AGENT\n"),
        "{text}"
    );
}

/// The integer aggregation equals ipnet's for random lists, both families.
#[test]
fn aggregation_equals_ipnets() {
    use crate::plan::decide::tests::Rng;
    let mut rng = Rng(0x5eed_0a99_7e9a_7e00);
    for round in 0..300 {
        let family = if round % 2 == 0 {
            Family::V4
        } else {
            Family::V6
        };
        let nets: Vec<ipnet::IpNet> = (0..rng.below(40)).map(|_| rng.net(family)).collect();
        let mut expected = ipnet::IpNet::aggregate(&nets);
        expected.sort_unstable();
        assert_eq!(
            super::render::aggregate(nets.iter().copied()),
            expected,
            "{nets:?}"
        );
    }
    let all: Vec<ipnet::IpNet> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
    assert_eq!(super::render::aggregate(all.iter().copied()), all);
    let edge: Vec<ipnet::IpNet> = vec![
        "255.255.255.255/32".parse().unwrap(),
        "255.255.255.254/32".parse().unwrap(),
    ];
    assert_eq!(
        super::render::aggregate(edge.iter().copied()),
        ["255.255.255.254/31".parse::<ipnet::IpNet>().unwrap()]
    );
}

/// The table a random config renders to (the set of what the longest prefix keeps, the
/// source rule), walked as the kernel walks it, gives `decide`'s verdict and the longest
/// prefix's, both families, with forced CIDRs, nesting, repeats and source ranges.
#[test]
fn property_the_table_agrees_with_decide() {
    use crate::plan::decide::tests::{assert_live_walk_agrees, random_config, Rng};
    let mut rng = Rng(0x7ab1_e5e7_0f0d_d5ee);
    for round in 0..300 {
        let family = if round % 2 == 0 {
            Family::V4
        } else {
            Family::V6
        };
        let config = random_config(&mut rng, family);
        let options = PlanOptions {
            enable_ipv6: true,
            ..ports()
        };
        let egress = crate::plan::decide::tests::node_egress(&config);
        let set = plan_family(&config, &options, &egress, family);
        let table = DesiredTable::new(&set).unwrap();
        let live = super::live::LiveTable::written(&table).inspection();
        assert_live_walk_agrees(&mut rng, &config, &set, &live, round, 60);
    }
}

/// `10.0.0.0/8` kept, `10.8.0.0/16` forced, `10.8.1.0/24` kept again: the set holds the
/// disjoint blocks around the forced range and the nested block inside it.
#[test]
fn forced_cidrs_cut_the_kept_set_into_disjoint_blocks() {
    let mut config = Config::defaults(&Options::default());
    config.non_masquerade_cidrs = vec![
        "10.0.0.0/8".parse().unwrap(),
        "10.8.1.0/24".parse().unwrap(),
    ];
    config.force_masquerade_cidrs = vec!["10.8.0.0/16".parse().unwrap()];
    config.masq_link_local = true;
    let table = DesiredTable::new(&plan_family(
        &config,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    ))
    .unwrap();
    let elements: Vec<String> = table.elements.iter().map(ToString::to_string).collect();
    assert_eq!(
        elements,
        [
            "10.0.0.0/13",
            "10.8.1.0/24",
            "10.9.0.0/16",
            "10.10.0.0/15",
            "10.12.0.0/14",
            "10.16.0.0/12",
            "10.32.0.0/11",
            "10.64.0.0/10",
            "10.128.0.0/9",
        ]
    );
}

/// The extension keys' scripts in their own golden file (the root tests `nft --check` it),
/// so `nft-scripts.txt` stays the proof that configs without them render as before.
#[test]
fn golden_nft_scripts_with_the_extension_keys() {
    let mut config = crate::plan::decide::tests::extension_config();
    config.masquerade_source_cidrs = ["10.244.0.0/16", "192.168.0.0/16", "fd00:244::/48"]
        .map(|c| c.parse().unwrap())
        .to_vec();
    let out = golden_scripts(&config);
    crate::backend::golden::check("nft-scripts-extensions.txt", &out);
}

/// A recreation: the table deleted first, everything made anew.
const RECREATE: Remake = Remake {
    recreate: true,
    fresh_limits: true,
};

/// The pod share's scripts (both limits, per pod and per destination; one limit alone;
/// output interfaces; IPv6) in a golden file of their own (the root tests apply them).
#[test]
fn golden_nft_scripts_with_the_pod_share() {
    let out: String = share_batches()
        .into_iter()
        .map(|(header, batch)| format!("{header}\n{}", script::render(&batch.bytes)))
        .collect();
    crate::backend::golden::check("nft-scripts-share.txt", &out);
}

/// The configs of the pod share's golden scripts, by label.
pub(super) fn share_configs() -> Vec<(&'static str, Config)> {
    use crate::config::pod_share::{NewConnectionRate, PodShare};
    let rate = |per_destination| NewConnectionRate {
        per_second: 20,
        burst: 10,
        per_destination,
    };
    let with = |share: PodShare, interfaces: &[&str]| {
        let mut config = Config::defaults(&Options::default());
        config.pod_share = share;
        config.masquerade_source_cidrs = ["10.244.0.0/16", "fd00:244::/48"]
            .map(|c| c.parse().unwrap())
            .to_vec();
        config.output_interfaces = interfaces
            .iter()
            .map(|i| crate::config::egress::InterfacePattern::parse(i).unwrap())
            .collect();
        config
    };
    vec![
        (
            "both limits",
            with(
                PodShare {
                    connection_limit: Some(200),
                    new_connection_rate: Some(rate(false)),
                },
                &[],
            ),
        ),
        (
            "rate per destination, eth*",
            with(
                PodShare {
                    connection_limit: None,
                    new_connection_rate: Some(rate(true)),
                },
                &["eth*"],
            ),
        ),
        (
            "connections only",
            with(
                PodShare {
                    connection_limit: Some(50),
                    new_connection_rate: None,
                },
                &[],
            ),
        ),
    ]
}

/// The first install's batch of every pod share case, each with its `### ...` header line.
pub(super) fn share_batches() -> Vec<(String, Finished)> {
    let mut out = Vec::new();
    for (label, config) in share_configs() {
        let options = PlanOptions {
            enable_ipv6: true,
            ..PlanOptions::default()
        };
        for set in plan(&config, &options, &crate::plan::ResolvedEgress::default()) {
            let table = table_of(&set);
            out.push((
                format!("### {label} family={}", set.family),
                table.batch(RECREATE, &Leftovers::default()).unwrap(),
            ));
        }
    }
    out
}

/// The egress keys' scripts (`outputAddress` resolved, `outputInterfaces`, both) in a golden
/// file of their own (the root tests `nft --check` it).
#[test]
fn golden_nft_scripts_with_the_egress_keys() {
    let out: String = egress_batches()
        .into_iter()
        .map(|(header, batch)| format!("{header}\n{}", script::render(&batch.bytes)))
        .collect();
    crate::backend::golden::check("nft-scripts-egress.txt", &out);
}

/// The batch of every egress case, each with its `### ...` header line (without its newline).
pub(super) fn egress_batches() -> Vec<(String, Finished)> {
    let mut out = Vec::new();
    for case in crate::plan::decide::tests::egress_cases() {
        let label = &case.label;
        for set in plan(&case.config, &case.options, &case.egress) {
            let table = table_of(&set);
            out.push((
                format!("### {label} family={}", set.family),
                table
                    .batch(Remake::default(), &Leftovers::default())
                    .unwrap(),
            ));
        }
    }
    out
}

/// `count` disjoint /30 blocks from 10.0.0.0 up: a config whose set holds exactly `count`
/// elements besides link-local.
fn many_blocks(count: u32) -> Config {
    let mut config = Config::defaults(&Options::default());
    config.non_masquerade_cidrs = (0..count)
        .map(|i| {
            let base = u32::from(std::net::Ipv4Addr::new(10, 0, 0, 0)) + i * 8;
            ipnet::IpNet::V4(ipnet::Ipv4Net::new(base.into(), 30).unwrap())
        })
        .collect();
    config
}

#[test]
fn set_names_and_counts() {
    use super::render::{set_count, set_index, set_name, SET_CAPACITY};
    assert_eq!(set_count(0), 1);
    assert_eq!(set_count(SET_CAPACITY), 1);
    assert_eq!(set_count(SET_CAPACITY + 1), 2);
    assert_eq!(set_count(100_000), 8);
    for index in [0, 1, 7, 12] {
        assert_eq!(set_index(&set_name(index)), Some(index));
    }
    assert_eq!(set_name(0), "nomasq");
    assert_eq!(set_name(3), "nomasq_3");
    for other in [
        "nomasq_0",
        "nomasq_01",
        "nomasq_",
        "nomasqx",
        "nomasq3",
        "other",
    ] {
        assert_eq!(set_index(other), None, "{other}");
    }
}

/// A list longer than one set's capacity is spread over a power of two of sets, each about
/// the same size and none over the capacity, one lookup rule each; the table as written is
/// in sync, walks as `decide` says, and one CIDR changed is an element repair of the sets of
/// the changed elements only.
#[test]
fn a_long_list_is_spread_over_sets_and_a_change_touches_only_its_own() {
    use super::render::{set_name, SET_CAPACITY};
    let config = many_blocks(40_000);
    let set = plan_family(
        &config,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    );
    let table = DesiredTable::new(&set).unwrap();
    assert_eq!(table.sets, 4);
    let split = table.set_elements();
    assert_eq!(split.iter().map(Vec::len).sum::<usize>(), 40_001);
    for (index, elements) in split.iter().enumerate() {
        assert!(
            (9_000..=SET_CAPACITY).contains(&elements.len()),
            "set {index}: {}",
            elements.len()
        );
        assert!(elements.windows(2).all(|w| w[0] < w[1]));
    }
    let lookups: Vec<&str> = table
        .rules
        .iter()
        .map(|r| r.statements.as_str())
        .filter(|s| s.contains('@'))
        .collect();
    assert_eq!(
        lookups,
        [
            "ip daddr @nomasq return",
            "ip daddr @nomasq_1 return",
            "ip daddr @nomasq_2 return",
            "ip daddr @nomasq_3 return"
        ]
    );
    let written = LiveTable::written(&table);
    assert!(diff(&table, &written).differences.is_empty());
    let inspection = written.inspection();
    let mut rng = crate::plan::decide::tests::Rng(0x5e75_0f5e_75ee_d000);
    crate::plan::decide::tests::assert_live_walk_agrees(
        &mut rng,
        &config,
        &set,
        &inspection,
        0,
        400,
    );

    let mut changed = config.clone();
    changed.non_masquerade_cidrs[20_000] = "203.0.113.0/24".parse().unwrap();
    let new_table = DesiredTable::new(&plan_family(
        &changed,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    ))
    .unwrap();
    let drift = diff(&new_table, &written);
    let Repair::Elements(changes) = &drift.repair else {
        panic!("{:?}", drift.repair)
    };
    let touched: usize = changes.iter().map(|c| c.add.len() + c.remove.len()).sum();
    assert_eq!(touched, 2, "{changes:?}");
    assert!(changes.len() <= 2);
    let text = script::render(&new_table.element_batch(changes).unwrap().bytes);
    let removed = changes.iter().find(|c| !c.remove.is_empty()).unwrap();
    let added = changes.iter().find(|c| !c.add.is_empty()).unwrap();
    assert_eq!(
        text,
        format!(
            "delete element ip ipmasq {} {{ 10.2.113.0/30 }}\nadd element ip ipmasq {} {{ 203.0.113.0/24 }}\n",
            removed.set, added.set
        )
    );
    assert!((0..4).map(set_name).any(|n| n == removed.set));
}

/// A list that shrinks below the capacity leaves sets that are no longer planned: the table
/// is made anew; a set that is missing is rewritten.
#[test]
fn sets_no_longer_planned_recreate_the_table() {
    let long = DesiredTable::new(&plan_family(
        &many_blocks(20_000),
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    ))
    .unwrap();
    let short = default_table(&PlanOptions::default());
    let drift = diff(&short, &LiveTable::written(&long));
    assert_eq!(drift.repair, Repair::Recreate);
    assert!(drift
        .differences
        .iter()
        .any(|d| d.detail == "set nomasq_1 is not planned (1 sets planned)"));
    let mut live = LiveTable::written(&long);
    live.sets.remove(1);
    let drift = diff(&long, &live);
    assert_eq!(drift.repair, Repair::Rewrite);
    assert_eq!(drift.differences[0].detail, "set nomasq_1 does not exist");
    let batch = script::render(
        &long
            .batch(Remake::default(), &Leftovers::default())
            .unwrap()
            .bytes,
    );
    assert!(batch.contains("add set ip ipmasq nomasq_1 { type ipv4_addr ; flags interval ; }"));
    assert!(batch.contains("delete set ip ipmasq nomasq_1\n"));
}

/// A held table's batches: every one declares the table with `owner` and `persist` (on a held
/// table a no-op, on an orphaned one its claim); a recreation declares the old one bare before
/// deleting it (flags on it would be an update the kernel refuses for a table made without
/// `persist`); the claim alone is that one declaration.
#[test]
fn a_held_tables_batches_declare_it_held() {
    let mut table = default_table(&ports());
    table.held_by = Some(4242);
    let held = "add table ip ipmasq { flags owner,persist ; comment \"managed by ipmasq\" ; }\n";
    let bare = "add table ip ipmasq { comment \"managed by ipmasq\" ; }\n";
    let lines = |batch: Finished| -> Vec<String> {
        script::render(&batch.bytes)
            .lines()
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let rewrite = lines(
        table
            .batch(Remake::default(), &Leftovers::default())
            .unwrap(),
    );
    assert_eq!(rewrite[0], held);
    assert!(!rewrite[1..].iter().any(|l| l.contains("table ip ipmasq")));
    let recreate = Remake {
        recreate: true,
        fresh_limits: true,
    };
    let recreated = lines(table.batch(recreate, &Leftovers::default()).unwrap());
    assert_eq!(recreated[..3], [bare, "delete table ip ipmasq\n", held]);
    assert_eq!(lines(table.claim_batch().unwrap()), [held]);
    let change = super::render::SetChange {
        set: "nomasq".into(),
        add: vec!["10.0.0.0/8".parse().unwrap()],
        remove: Vec::new(),
    };
    let elements = lines(table.element_batch(&[change]).unwrap());
    assert_eq!(
        elements,
        [held, "add element ip ipmasq nomasq { 10.0.0.0/8 }\n"]
    );
    // What the kernel lists after the commit: held by the port written with.
    let written = LiveTable::written(&table);
    assert_eq!(written.owner, Some(4242));
    assert_eq!(
        super::hold::judge(
            &written,
            super::hold::Holder {
                port: Some(4242),
                socket: Some(1),
                hold: true
            }
        ),
        super::hold::Holding::Settled
    );
}

/// A dormant table (a neighbour's `flags dormant`: every chain unhooked, nothing masqueraded)
/// is a difference, repaired by making the table anew.
#[test]
fn a_dormant_table_is_made_anew() {
    let mut live = listed();
    live.flags = netlink_packet_netfilter::nftables::TableFlags::Dormant;
    let drift = diff(&default_table(&ports()), &live);
    assert_eq!(drift.repair, Repair::Recreate);
    assert_eq!(drift.differences[0].kind, DriftKind::HookDiffers);
    assert!(
        drift.differences[0].detail.contains("dormant"),
        "{:?}",
        drift.differences
    );
}
