//! Unit tests of the nftables backend's pure parts: the model, the batches decoded to nft
//! syntax (golden), and the diff. Root tests apply the batches to the real kernel and read
//! them back over netlink and with `nft`.

use super::diff::{diff, Repair};
use super::live::LiveTable;
use super::render::{DesiredTable, Leftovers};
use crate::backend::nfnetlink::script;
use crate::backend::DriftKind;
use crate::config::{Config, Options};
use crate::plan::{plan, plan_family, Family, PlanOptions};

fn default_table(options: &PlanOptions) -> DesiredTable {
    let config = Config::defaults(&Options::default());
    DesiredTable::new(&plan_family(&config, options, Family::V4)).unwrap()
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
    live.elements.retain(|e| e.to_string() != "10.0.0.0/8");
    live.elements.push("203.0.113.0/24".parse().unwrap());
    let drift = diff(&default_table(&ports()), &live);
    let kinds: Vec<DriftKind> = drift.differences.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, [DriftKind::MissingRule, DriftKind::ExtraRule]);
    assert_eq!(
        drift.differences[0].detail,
        "10.0.0.0/8 missing from set nomasq"
    );
    let Repair::Elements { remove, add } = &drift.repair else {
        panic!("{:?}", drift.repair)
    };
    assert_eq!(remove[0].to_string(), "203.0.113.0/24");
    assert_eq!(add[0].to_string(), "10.0.0.0/8");
    assert_eq!(
        script::render(&default_table(&ports()).element_batch(remove, add).bytes),
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

#[test]
fn overlapping_and_duplicate_cidrs_are_aggregated() {
    let mut config = Config::defaults(&Options::default());
    config.non_masquerade_cidrs = ["10.0.0.0/8", "10.1.0.0/16", "10.0.0.0/8", "11.0.0.0/8"]
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    let table =
        DesiredTable::new(&plan_family(&config, &PlanOptions::default(), Family::V4)).unwrap();
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

/// The scripts of every flag combination, each under a `### ...` header line.
pub(crate) fn golden_scripts(config: &Config) -> String {
    let mut out = String::new();
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
                    for set in plan(&config, &options) {
                        let table = DesiredTable::new(&set).unwrap();
                        out.push_str(&format!(
                            "### random-fully={random_fully} to-ports={to_ports:?} enable-ipv6={enable_ipv6} masqLinkLocal={masq_ll} family={}\n{}",
                            set.family,
                            script::render(&table.batch(false, &Leftovers::default()).unwrap().bytes)
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
            .batch(false, &leftovers)
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
        let set = plan_family(&config, &options, family);
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
    let table =
        DesiredTable::new(&plan_family(&config, &PlanOptions::default(), Family::V4)).unwrap();
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
