//! The nftables backend's sync → observe → diff → repair without root, against the
//! [`FakeKernel`]: first apply, the in-sync pass that writes nothing, drift repaired, a
//! neighbour's table and commits left alone, a repair the kernel refuses, the take-over of
//! iptables-nft's leftovers, and hostile replies reported as failures. The golden nft scripts check the fake itself: each batch applied to
//! it lists back as the script's net effect. The root tests stay the evidence for the real
//! kernel.

use super::live::read_table;
use super::render::DesiredTable;
use super::tests::{egress_batches, golden_batches};
use super::{diff::diff, Nftables, TABLE};
use crate::backend::{Backend, BackendError};
use crate::config::{Config, Options};
use crate::netlink::nf_tables::fake_kernel::{FakeKernel, FakeRule, FakeRuleset, Fault, Strikes};
use crate::netlink::nf_tables::statement::{NftVerdict, Stmt};
use crate::netlink::nf_tables::wire::{BaseChain, Batch, Finished};
use crate::netlink::nf_tables::{commit_within, script};
use crate::plan::{plan, plan_family, Family, PlanOptions, Ruleset};
use netlink_packet_netfilter::nftables::InetHookNumber;
use netlink_packet_netfilter::NetfilterProtoFamily;
use std::time::Duration;

const V4: NetfilterProtoFamily = NetfilterProtoFamily::IPv4;

fn desired() -> Ruleset {
    let mut config = Config::defaults(&Options::default());
    config
        .non_masquerade_cidrs
        .extend(["10.0.0.0/8", "100.64.0.0/10"].map(|c| c.parse::<ipnet::IpNet>().unwrap()));
    plan_family(
        &config,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    )
}

fn backend(kernel: &FakeKernel) -> Nftables {
    Nftables::new().over(Box::new(kernel.socket()))
}

/// Our table as the fake's dumps answer, compared with what `desired` should be: the
/// differences the backend itself would find (none when in sync).
fn drift_left(kernel: &FakeKernel, desired: &Ruleset) -> Vec<String> {
    let live = read_table(&mut kernel.socket(), desired.family).expect("the fake lists");
    let table = DesiredTable::new(desired).unwrap();
    diff(&table, &live)
        .differences
        .into_iter()
        .map(|d| d.detail)
        .collect()
}

/// The rules of our table's postrouting chain as the fake holds them.
fn postrouting_rules(kernel: &FakeKernel) -> Vec<FakeRule> {
    kernel
        .ruleset()
        .table(V4, TABLE)
        .unwrap()
        .chain("postrouting")
        .unwrap()
        .rules
        .clone()
}

/// A batch that adds table `ip TABLE` with a nat postrouting base chain `CHAIN` (priority 100,
/// as iptables-nft's), for a neighbour's commit.
fn nat_postrouting_batch(table: &str, chain: &str) -> Batch {
    let mut b = Batch::new(crate::netlink::nf_tables::sequence(16));
    b.add_table(Family::V4, table, None, None).unwrap();
    let base = BaseChain {
        kind: "nat".into(),
        hook: InetHookNumber::PostRouting,
        priority: 100,
    };
    b.add_base_chain(Family::V4, table, chain, &base);
    b
}

/// A neighbour's commit over its own socket: table `ip kube-nat` with a nat postrouting chain
/// and one rule.
fn neighbour_commits(kernel: &FakeKernel) {
    let mut b = nat_postrouting_batch("kube-nat", "post");
    b.add_rule(
        Family::V4,
        "kube-nat",
        "post",
        &[Stmt::Verdict(NftVerdict::Accept)],
        Some("theirs"),
    )
    .unwrap();
    let done = b.finish();
    commit_within(&mut kernel.socket(), &done, Duration::from_secs(1)).expect("theirs commits");
}

#[test]
fn the_first_apply_writes_the_table_and_an_in_sync_pass_writes_nothing() {
    let kernel = FakeKernel::new();
    let mut nft = backend(&kernel);
    let want = desired();
    let dry = nft.sync(&want, true).expect("a dry run");
    let text = dry.transaction.unwrap_or_default();
    assert!(text.starts_with("add table ip ipmasq"), "{text}");
    assert_eq!(kernel.counts().batches, 0, "a dry run writes nothing");
    let report = nft.sync(&want, false).expect("first apply");
    assert!(report.transaction.is_some());
    assert_eq!(kernel.counts().commits, 1);
    assert_eq!(drift_left(&kernel, &want), Vec::<String>::new());
    let table = kernel.ruleset();
    let ours = table.table(V4, TABLE).unwrap();
    assert_eq!(
        ours.udata
            .as_deref()
            .map(crate::netlink::nf_tables::wire::comment_of),
        Some(Some(super::render::OWNER_MARK.into()))
    );

    // Steady: the id has not moved, so nothing is read and nothing written.
    let before = kernel.counts();
    let report = nft.sync(&want, false).expect("steady pass");
    assert!(report.differences.is_empty() && report.transaction.is_none());
    let after = kernel.counts();
    assert_eq!(after.batches, before.batches, "nothing written");
    assert_eq!(
        (after.dumps, after.gets),
        (before.dumps, before.gets),
        "nothing read"
    );
    assert_eq!(after.getgens, before.getgens + 1, "only the id");
    assert_eq!(kernel.ruleset(), table);
}

#[test]
fn a_neighbours_commit_makes_a_full_read_that_writes_nothing_and_leaves_theirs_alone() {
    let kernel = FakeKernel::new();
    let mut nft = backend(&kernel);
    let want = desired();
    nft.sync(&want, false).unwrap();
    neighbour_commits(&kernel);
    let theirs = kernel.ruleset().table(V4, "kube-nat").cloned().unwrap();
    let before = kernel.counts();
    let report = nft.sync(&want, false).expect("a pass after their commit");
    assert!(report.differences.is_empty() && report.transaction.is_none());
    let after = kernel.counts();
    assert!(
        after.dumps + after.gets > before.dumps + before.gets,
        "read in full"
    );
    assert_eq!(after.batches, before.batches, "nothing written");
    assert_eq!(kernel.ruleset().table(V4, "kube-nat"), Some(&theirs));
    // The read vouched for the table at the new id: the next pass is steady again.
    let before = kernel.counts();
    nft.sync(&want, false).unwrap();
    assert_eq!(kernel.counts().dumps, before.dumps);

    // Cleanup takes our table only.
    nft.cleanup(Family::V4, &want.names, false)
        .expect("cleanup");
    let left = kernel.ruleset();
    assert!(left.table(V4, TABLE).is_none());
    assert_eq!(left.table(V4, "kube-nat"), Some(&theirs));
}

/// Drift made behind the backend's back (each one commit, so the id moves), repaired by the
/// next pass; an element's drift by an element-only batch that leaves the rules as they were.
#[test]
fn drift_behind_the_backends_back_is_repaired() {
    type Drift = fn(&mut FakeRuleset);
    let cases: [(&str, Drift, bool); 4] = [
        (
            "an element deleted",
            |r| {
                let set = r.table_mut(V4, TABLE).unwrap().set_mut("nomasq").unwrap();
                assert!(set.elements.remove(&(vec![100, 64, 0, 0], false)));
                assert!(set.elements.remove(&(vec![100, 128, 0, 0], true)));
            },
            true,
        ),
        (
            "an element added",
            |r| {
                let set = r.table_mut(V4, TABLE).unwrap().set_mut("nomasq").unwrap();
                set.elements.insert((vec![198, 51, 100, 0], false));
                set.elements.insert((vec![198, 51, 101, 0], true));
            },
            true,
        ),
        (
            "the masquerade rule deleted",
            |r| {
                let chain = r
                    .table_mut(V4, TABLE)
                    .unwrap()
                    .chain_mut("postrouting")
                    .unwrap();
                chain.rules.pop().unwrap();
            },
            false,
        ),
        (
            "the hooked chain gone",
            |r| {
                let table = r.table_mut(V4, TABLE).unwrap();
                table.chains.retain(|c| c.name != "postrouting");
            },
            false,
        ),
    ];
    for (what, drift, elements_only) in cases {
        let kernel = FakeKernel::new();
        let mut nft = backend(&kernel);
        let want = desired();
        nft.sync(&want, false).unwrap();
        let rules_before = postrouting_rules(&kernel);
        kernel.edit(drift);
        assert!(!drift_left(&kernel, &want).is_empty(), "{what}: drift seen");
        let commits = kernel.counts().commits;
        let report = nft.sync(&want, false).expect(what);
        assert!(!report.differences.is_empty(), "{what}: reported");
        assert_eq!(kernel.counts().commits, commits + 1, "{what}: one batch");
        assert_eq!(drift_left(&kernel, &want), Vec::<String>::new(), "{what}");
        let rules_after = &postrouting_rules(&kernel);
        assert_eq!(
            &rules_before == rules_after,
            elements_only,
            "{what}: rules rewritten only when they drifted"
        );
        // And then steady.
        let batches = kernel.counts().batches;
        nft.sync(&want, false).unwrap();
        assert_eq!(kernel.counts().batches, batches, "{what}: steady after");
    }
}

/// A neighbour's rule in our table looking up our set holds on to it: the rewrite that
/// deletes the set is refused (EBUSY, nothing applied), and the next pass makes the table
/// anew, which the kernel accepts.
#[test]
fn a_refused_repair_is_reported_and_the_next_pass_makes_the_table_anew() {
    let kernel = FakeKernel::new();
    let mut nft = backend(&kernel);
    let want = desired();
    nft.sync(&want, false).unwrap();
    kernel.edit(|r| {
        let table = r.table_mut(V4, TABLE).unwrap();
        let mut spy = table.chain("postrouting").unwrap().clone();
        spy.name = "spy".into();
        spy.hook = None;
        spy.kind = None;
        spy.policy = None;
        spy.rules
            .retain(|rule| format!("{:?}", rule.expressions).contains("nomasq"));
        assert_eq!(spy.rules.len(), 1);
        table.chains.push(spy);
        // And drift in our chain, so the repair rewrites it.
        table.chain_mut("postrouting").unwrap().rules.pop();
    });
    let drifted = kernel.ruleset();
    let err = nft.sync(&want, false).unwrap_err();
    assert!(matches!(err, BackendError::Netlink(_)), "{err:?}");
    assert!(err.to_string().contains("Device or resource busy"), "{err}");
    assert!(
        err.to_string().contains("delete set ip ipmasq nomasq"),
        "{err}"
    );
    assert_eq!(kernel.ruleset(), drifted, "nothing applied");
    nft.sync(&want, false).expect("made anew");
    assert_eq!(drift_left(&kernel, &want), Vec::<String>::new());
    assert!(kernel
        .ruleset()
        .table(V4, TABLE)
        .unwrap()
        .chain("spy")
        .is_none());
}

/// A broken answer to the commit or to a reading fails the pass with an error (never a panic
/// or a hang); a broken GETGEN answer costs a full read only. A clean pass after converges.
#[test]
fn hostile_replies_fail_the_pass_and_a_clean_pass_after_converges() {
    let want = desired();
    for strikes in [Strikes::Batch, Strikes::Dump, Strikes::GetGen] {
        for fault in [
            Fault::Truncated,
            Fault::WrongSequence,
            Fault::ErrorForAnotherMessage,
        ] {
            let what = format!("{fault:?} on {strikes:?}");
            let kernel = FakeKernel::new();
            let mut nft = backend(&kernel);
            kernel.arm(strikes, fault);
            let outcome = nft.sync(&want, false);
            match (strikes, fault) {
                (_, Fault::ErrorForAnotherMessage) if strikes != Strikes::Batch => {
                    assert!(outcome.is_ok(), "{what}: a fault for batches only");
                }
                (_, Fault::DumpInterrupted) => {
                    // An interrupted dump is made again; a flag on other answers is ignored.
                    assert!(outcome.is_ok(), "{what}: {:?}", outcome.err());
                }
                (Strikes::GetGen, _) => {
                    assert!(outcome.is_ok(), "{what}: {:?}", outcome.err());
                }
                (Strikes::Dump, _) => {
                    let err = outcome.unwrap_err();
                    assert!(
                        matches!(err, BackendError::Unreadable { .. }),
                        "{what}: {err:?}"
                    );
                    assert_eq!(kernel.counts().batches, 0, "{what}: nothing written unread");
                }
                (Strikes::Batch, _) => {
                    let err = outcome.unwrap_err();
                    assert!(matches!(err, BackendError::Netlink(_)), "{what}: {err:?}");
                    let text = err.to_string();
                    assert!(
                        text.contains("truncated") || text.contains("deadline"),
                        "{what}: {text}"
                    );
                }
            }
            nft.sync(&want, false)
                .unwrap_or_else(|e| panic!("{what}: then {e}"));
            assert_eq!(drift_left(&kernel, &want), Vec::<String>::new(), "{what}");
        }
    }
}

/// iptables-nft's leftovers in `ip nat`: chain `IP-MASQ-AGENT` with a rule, jumped to from
/// POSTROUTING, and, when `held`, from a foreign chain too.
fn iptables_nft_left(kernel: &FakeKernel, held: bool) {
    let done = nat_postrouting_batch("nat", "POSTROUTING").finish();
    commit_within(&mut kernel.socket(), &done, Duration::from_secs(1)).unwrap();
    kernel.edit(|r| {
        let table = r.table_mut(V4, "nat").unwrap();
        for name in ["IP-MASQ-AGENT", "FOREIGN"] {
            let mut chain = table.chain("POSTROUTING").unwrap().clone();
            (chain.name, chain.hook, chain.kind, chain.policy) = (name.into(), None, None, None);
            chain.handle += 100;
            table.chains.push(chain);
        }
    });
    let mut b = Batch::new(crate::netlink::nf_tables::sequence(16));
    let jump = [Stmt::Verdict(NftVerdict::Jump("IP-MASQ-AGENT".into()))];
    b.add_rule(Family::V4, "nat", "POSTROUTING", &jump, None)
        .unwrap();
    b.add_rule(
        Family::V4,
        "nat",
        "IP-MASQ-AGENT",
        &[Stmt::Verdict(NftVerdict::Return)],
        None,
    )
    .unwrap();
    if held {
        b.add_rule(Family::V4, "nat", "FOREIGN", &jump, None)
            .unwrap();
    }
    let done = b.finish();
    commit_within(&mut kernel.socket(), &done, Duration::from_secs(1)).unwrap();
}

/// A first install taking over from iptables-nft deletes its jump and chain in the same
/// commit; when a foreign rule still jumps to that chain the kernel refuses the joint batch
/// (EBUSY), and ours is installed alone, the leftovers left.
#[test]
fn a_take_over_removes_iptables_nfts_leftovers_in_the_same_commit_unless_held() {
    for held in [false, true] {
        let kernel = FakeKernel::new();
        iptables_nft_left(&kernel, held);
        let mut nft = backend(&kernel);
        nft.take_over_at_first_install();
        let want = desired();
        let commits = kernel.counts().commits;
        nft.sync(&want, false).expect("installed");
        assert_eq!(
            kernel.counts().commits,
            commits + 1,
            "held={held}: one commit"
        );
        assert_eq!(drift_left(&kernel, &want), Vec::<String>::new());
        let ruleset = kernel.ruleset();
        let nat = ruleset.table(V4, "nat").unwrap();
        let postrouting = &nat.chain("POSTROUTING").unwrap().rules;
        assert_eq!(nat.chain("IP-MASQ-AGENT").is_some(), held, "held={held}");
        assert_eq!(postrouting.len(), usize::from(held), "held={held}");
        if held {
            assert_eq!(
                kernel.counts().batches,
                kernel.counts().commits + 1,
                "one refused"
            );
        }
    }
}

/// The net effect of a golden script: the last declaration of each set, without the
/// transaction's scaffolding (the skeleton declarations that a deletion replaces, the flush,
/// the deletions).
fn net_effect(script: &str) -> String {
    let lines: Vec<&str> = script.lines().collect();
    let declared = |line: &str| {
        line.strip_prefix("add set ")
            .and_then(|rest| rest.split(" {").next())
            .map(str::to_string)
    };
    lines
        .iter()
        .enumerate()
        .filter(|(i, line)| {
            if line.starts_with("flush chain ") || line.starts_with("delete set ") {
                return false;
            }
            match declared(line) {
                Some(set) => !lines[i + 1..]
                    .iter()
                    .any(|l| declared(l).as_deref() == Some(set.as_str())),
                None => true,
            }
        })
        .map(|(_, line)| format!("{line}\n"))
        .collect()
}

/// Each golden case's batch applied to a fresh fake: the script its dumps decode to (the
/// batch decoder reading the table, chain, sets with their elements and rules as the fake
/// lists them) is the golden script's net effect ([`net_effect`]).
fn check_against_golden(file: &str, cases: Vec<(String, Finished)>) {
    let golden = std::fs::read_to_string(format!(
        "{}/tests/data/golden/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let sections: Vec<(&str, &str)> = golden
        .split("### ")
        .skip(1)
        .map(|s| s.split_once('\n').unwrap())
        .collect();
    assert_eq!(sections.len(), cases.len(), "{file}: one case per section");
    for ((header, batch), (golden_header, golden_script)) in cases.iter().zip(sections) {
        assert_eq!(header.strip_prefix("### "), Some(golden_header), "{file}");
        assert_eq!(
            script::render(&batch.bytes),
            golden_script,
            "{file} {header}"
        );
        let kernel = FakeKernel::new();
        commit_within(&mut kernel.socket(), batch, Duration::from_secs(1))
            .unwrap_or_else(|e| panic!("{file} {header}: {e}"));
        let family = if header.ends_with("family=ipv6") {
            NetfilterProtoFamily::IPv6
        } else {
            V4
        };
        let listing = kernel.listing(family, TABLE).unwrap();
        let (mut listed, mut expected) = (script::render(&listing), net_effect(golden_script));
        if file == "nft-scripts-share.txt" {
            // A recreation's scaffolding (the table deleted and declared again) is no net
            // effect, and the fake lists the rules chain by chain, not in the batch's order
            // (the refusal before the limits before the walk before the hook's jump).
            let sorted = |text: &str, skip: usize| {
                let mut lines: Vec<&str> = text.lines().skip(skip).collect();
                lines.sort_unstable();
                lines.join("\n")
            };
            listed = sorted(&listed, 0);
            expected = sorted(&expected, 2);
        }
        assert_eq!(listed, expected, "{file} {header}");
    }
}

#[test]
fn golden_batches_applied_to_the_fake_list_back_as_their_scripts_net_effect() {
    let mut config = Config::defaults(&Options::default());
    config
        .non_masquerade_cidrs
        .extend(["fd00::/8", "10.0.0.0/8"].map(|c| c.parse::<ipnet::IpNet>().unwrap()));
    check_against_golden("nft-scripts.txt", golden_batches(&config));
    let mut config = crate::plan::decide::tests::extension_config();
    config.masquerade_source_cidrs = ["10.244.0.0/16", "192.168.0.0/16", "fd00:244::/48"]
        .map(|c| c.parse().unwrap())
        .to_vec();
    check_against_golden("nft-scripts-extensions.txt", golden_batches(&config));
    check_against_golden("nft-scripts-egress.txt", egress_batches());
    check_against_golden("nft-scripts-share.txt", super::tests::share_batches());
}

/// Every family the planner makes is applied and read back in sync (IPv6 too).
#[test]
fn both_families_apply_and_read_back_in_sync() {
    let options = PlanOptions {
        enable_ipv6: true,
        ..PlanOptions::default()
    };
    let kernel = FakeKernel::new();
    let mut nft = backend(&kernel);
    for want in plan(
        &Config::defaults(&Options::default()),
        &options,
        &crate::plan::ResolvedEgress::default(),
    ) {
        nft.sync(&want, false).unwrap();
        assert_eq!(
            drift_left(&kernel, &want),
            Vec::<String>::new(),
            "{}",
            want.family
        );
    }
    assert_eq!(kernel.ruleset().tables.len(), 2);
}

/// The pod share's config, with `limit` connections and per-destination rate or not.
fn share_desired(limit: u32, per_destination: bool, kept: &[&str]) -> Ruleset {
    use crate::config::pod_share::{NewConnectionRate, PodShare};
    let mut config = Config::defaults(&Options::default());
    config
        .non_masquerade_cidrs
        .extend(kept.iter().map(|c| c.parse::<ipnet::IpNet>().unwrap()));
    config.pod_share = PodShare {
        connection_limit: Some(limit),
        new_connection_rate: Some(NewConnectionRate {
            per_second: 100,
            burst: 5,
            per_destination,
        }),
    };
    plan_family(
        &config,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
        Family::V4,
    )
}

/// The pod share through sync: applied and read back in sync with both refusal counters; a
/// change of the nat part (an element) leaves the limits' sets; a new limit makes them anew;
/// a neighbour's flush of the forward chain is repaired without touching the limits; the
/// keys gone, the table is made anew without the share.
#[test]
fn the_pod_share_is_applied_compared_repaired_and_removed() {
    let kernel = FakeKernel::new();
    let mut nft = backend(&kernel);
    let want = share_desired(200, false, &[]);
    nft.sync(&want, false).expect("first apply");
    assert_eq!(drift_left(&kernel, &want), Vec::<String>::new());
    let live = read_table(&mut kernel.socket(), Family::V4).unwrap();
    let refused: Vec<(&str, u64)> = live
        .share
        .refused()
        .iter()
        .map(|r| (r.limit.as_str(), r.refused))
        .collect();
    assert_eq!(refused, [("rate", 0), ("connections", 0)]);

    let more = share_desired(200, false, &["100.64.0.0/10"]);
    let dry = nft.sync(&more, true).unwrap().transaction.unwrap();
    assert!(dry.lines().all(|l| l.starts_with("add element")), "{dry}");

    let stricter = share_desired(100, false, &[]);
    let dry = nft.sync(&stricter, true).unwrap().transaction.unwrap();
    assert!(dry.contains("delete set ip ipmasq pod_conn"), "{dry}");
    nft.sync(&stricter, false).unwrap();
    assert_eq!(drift_left(&kernel, &stricter), Vec::<String>::new());

    kernel.edit(|r| {
        let table = r.table_mut(V4, TABLE).unwrap();
        table.chain_mut("forward").unwrap().rules.clear();
    });
    let report = nft.sync(&stricter, false).unwrap();
    assert!(!report.differences.is_empty());
    assert_eq!(drift_left(&kernel, &stricter), Vec::<String>::new());

    let per_destination = share_desired(100, true, &[]);
    nft.sync(&per_destination, false).unwrap();
    assert_eq!(drift_left(&kernel, &per_destination), Vec::<String>::new());

    let plain = desired();
    nft.sync(&plain, false).unwrap();
    assert_eq!(drift_left(&kernel, &plain), Vec::<String>::new());
    let table = kernel.ruleset();
    let ours = table.table(V4, TABLE).unwrap();
    assert!(ours.chain("forward").is_none() && ours.set("pod_conn").is_none());
}

/// Each expression named `name` of the rules of our table's chain `chain`, changed by `edit`
/// (false: the expression is removed).
fn edit_expressions(
    kernel: &FakeKernel,
    chain: &str,
    name: &str,
    edit: &dyn Fn(&mut Vec<netlink_packet_core::DefaultNla>) -> bool,
) {
    use netlink_packet_netfilter::nftables::{ExpressionAttribute, Expressions, ListAttribute};
    kernel.edit(|r| {
        let rules = &mut r
            .table_mut(V4, TABLE)
            .unwrap()
            .chain_mut(chain)
            .unwrap()
            .rules;
        for rule in rules {
            rule.expressions.retain_mut(|e| {
                let ListAttribute::Element(attrs) = e else {
                    return true;
                };
                let named = attrs
                    .iter()
                    .any(|a| matches!(a, ExpressionAttribute::Name(n) if n == name));
                attrs.iter_mut().all(|a| match a {
                    ExpressionAttribute::Data(Expressions::Other { attributes, .. }) if named => {
                        edit(attributes)
                    }
                    _ => true,
                })
            });
        }
    });
}

/// The limits' rules copy each refusal to NFLOG between the counter and the goto: read back
/// in sync, their counters read past the log; the rules as an older ipmasq wrote them (no
/// log) are a `share-differs` drift of `share_limit`, rewritten with the log.
#[test]
fn limit_rules_without_the_log_differ_and_are_rewritten_with_it() {
    let kernel = FakeKernel::new();
    let mut nft = backend(&kernel);
    let want = share_desired(200, false, &[]);
    nft.sync(&want, false).expect("first apply");
    assert_eq!(drift_left(&kernel, &want), Vec::<String>::new());
    let limit_rules = |kernel: &FakeKernel| {
        let live = read_table(&mut kernel.socket(), Family::V4).unwrap();
        let texts: Vec<String> = live.share.chains[2]
            .iter()
            .flatten()
            .map(|r| r.statements.clone())
            .collect();
        let refused: Vec<(&str, u64)> = live
            .share
            .refused()
            .iter()
            .map(|r| (r.limit.as_str(), r.refused))
            .collect();
        (texts, refused)
    };
    let (texts, _) = limit_rules(&kernel);
    assert_eq!(
        texts,
        [
            "update @pod_rate { ip saddr limit rate over 100/second burst 5 packets } counter log prefix \"ipmasq-share-rate\" group 7373 snaplen 80 goto share_refuse",
            "ip saddr @pod_full counter log prefix \"ipmasq-share-connections\" group 7373 snaplen 80 goto share_refuse",
            "add @pod_conn { ip saddr ct count over 200 } update @pod_full { ip saddr } counter log prefix \"ipmasq-share-connections\" group 7373 snaplen 80 goto share_refuse",
        ]
    );
    // The kernel's counts (the fake keeps none): 7 packets refused by each rule, so 14 by the
    // connection limit's two (the pods remembered over it, and the count).
    edit_expressions(&kernel, "share_limit", "counter", &|attrs| {
        let count = |n: u64| n.to_be_bytes().to_vec();
        *attrs = vec![
            netlink_packet_core::DefaultNla::new(1, count(700)),
            netlink_packet_core::DefaultNla::new(2, count(7)),
        ];
        true
    });
    assert_eq!(limit_rules(&kernel).1, [("rate", 7), ("connections", 14)]);
    assert_eq!(drift_left(&kernel, &want), Vec::<String>::new());

    edit_expressions(&kernel, "share_limit", "log", &|_| false);
    let (texts, refused) = limit_rules(&kernel);
    assert!(texts.iter().all(|t| !t.contains("log")), "{texts:?}");
    assert_eq!(refused, [("rate", 7), ("connections", 14)]);
    let report = nft.sync(&want, false).unwrap();
    let kinds: Vec<&str> = report.differences.iter().map(|d| d.kind.as_str()).collect();
    assert_eq!(kinds, ["share-differs"], "{:?}", report.differences);
    assert!(report.differences[0]
        .detail
        .starts_with("chain share_limit: rules missing"));
    assert_eq!(drift_left(&kernel, &want), Vec::<String>::new());
    assert!(limit_rules(&kernel)
        .0
        .iter()
        .all(|t| t.contains(" log prefix ")));
}
