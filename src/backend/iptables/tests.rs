//! Golden tests of the rendered rules and transactions (no root needed).

use super::saved::{describe_rule, jump_target, tokenize};
use super::*;
use crate::backend::{BackendId, DriftKind, Inspected};
use crate::config::{Config, Options};
use crate::plan::{plan, ChainName, PlanOptions};

fn render_rules(set: &Ruleset) -> Vec<String> {
    let lines = Rendered::new(set).lines;
    assert_eq!(
        render::rule_count(set),
        lines.len(),
        "rule_count agrees with the rendering"
    );
    assert_eq!(
        render::rule_count_and_text_bytes(set),
        (lines.len(), lines.iter().map(|l| l.len() + 1).sum()),
        "the memory model's footprint agrees with the rendering"
    );
    lines
}

/// The hostile shapes render tens of thousands of rules from about 2,000 listed CIDRs: what
/// the memory model counts (it once counted the 2,000).
#[test]
fn long_source_and_forced_lists_are_counted_as_written() {
    for (config, rules) in [
        (crate::backend::tests::scattered_sources(2_000), 39_827),
        (
            crate::backend::tests::forced_per_interface(2_000, 16),
            32_018,
        ),
    ] {
        let set = plan(
            &config,
            &PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
        )
        .remove(0);
        assert_eq!(render_rules(&set).len(), rules);
    }
    let ported = PlanOptions {
        to_ports: "1024-29999,32768-65535".parse().unwrap(),
        ..PlanOptions::default()
    };
    let set = plan(
        &crate::backend::tests::forced_per_interface(500, 4),
        &ported,
        &crate::plan::ResolvedEgress::default(),
    )
    .remove(0);
    assert_eq!(render_rules(&set).len(), 14_030);
}

fn kinds(drift: &diff::Drift) -> Vec<DriftKind> {
    drift.differences.iter().map(|d| d.kind).collect()
}

fn default_ruleset(options: &PlanOptions) -> Vec<Ruleset> {
    plan(
        &Config::defaults(&Options::default()),
        options,
        &crate::plan::ResolvedEgress::default(),
    )
}

const JUMP: &str = "-A POSTROUTING -m comment --comment \"ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain\" -m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT";

/// The contract: `iptables-save -t nat` after a default sync.
const DEFAULT_SAVED: &str = "\
:IP-MASQ-AGENT - [0:0]
-A POSTROUTING -m comment --comment \"ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain\" -m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT
-A IP-MASQ-AGENT -d 169.254.0.0/16 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -d 10.0.0.0/8 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -d 172.16.0.0/12 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -d 192.168.0.0/16 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN
-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --random-fully
";

#[test]
fn first_sync_transaction_is_the_contract_text() {
    let sets = default_ruleset(&PlanOptions::default());
    let drift = diff(&Rendered::new(&sets[0]), &LiveChain::default());
    let script = transaction(&Rendered::new(&sets[0]), &drift);
    assert_eq!(script, format!("*nat\n{DEFAULT_SAVED}COMMIT\n"));
}

#[test]
fn in_sync_means_no_transaction() {
    let sets = default_ruleset(&PlanOptions::default());
    let saved = format!("*nat\n:POSTROUTING ACCEPT [0:0]\n{DEFAULT_SAVED}COMMIT\n");
    let live = parse_saved(&saved, &sets[0].names.chain);
    assert!(live.chain_exists);
    assert_eq!(live.jumps.len(), 1);
    assert!(diff(&Rendered::new(&sets[0]), &live).is_empty());
}

#[test]
fn golden_flag_combinations() {
    let cases: Vec<(&str, PlanOptions, &str)> = vec![
        (
            "no random-fully",
            PlanOptions {
                random_fully: false,
                ..PlanOptions::default()
            },
            "-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE\n",
        ),
        (
            "two port ranges",
            PlanOptions {
                to_ports: "1024-29999,32768-65535".parse().unwrap(),
                ..PlanOptions::default()
            },
            "\
-A IP-MASQ-AGENT -p tcp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -m statistic --mode random --probability 0.46929256292 -j MASQUERADE --to-ports 1024-29999 --random-fully
-A IP-MASQ-AGENT -p tcp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --to-ports 32768-65535 --random-fully
-A IP-MASQ-AGENT -p udp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -m statistic --mode random --probability 0.46929256292 -j MASQUERADE --to-ports 1024-29999 --random-fully
-A IP-MASQ-AGENT -p udp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --to-ports 32768-65535 --random-fully
-A IP-MASQ-AGENT -p sctp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -m statistic --mode random --probability 0.46929256292 -j MASQUERADE --to-ports 1024-29999 --random-fully
-A IP-MASQ-AGENT -p sctp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --to-ports 32768-65535 --random-fully
-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --random-fully
",
        ),
        (
            "single port, no random-fully",
            PlanOptions {
                to_ports: "2000".parse().unwrap(),
                random_fully: false,
                ..PlanOptions::default()
            },
            "\
-A IP-MASQ-AGENT -p tcp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --to-ports 2000
-A IP-MASQ-AGENT -p udp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --to-ports 2000
-A IP-MASQ-AGENT -p sctp -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --to-ports 2000
-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE
",
        ),
    ];
    for (name, options, masq_tail) in cases {
        let sets = default_ruleset(&options);
        let rendered = render_rules(&sets[0]).join("\n") + "\n";
        let returns = &DEFAULT_SAVED.lines().collect::<Vec<_>>()[2..6].join("\n");
        assert_eq!(rendered, format!("{returns}\n{masq_tail}"), "{name}");
    }
}

#[test]
fn custom_chain_name_appears_in_the_jump_comment() {
    let options = PlanOptions {
        chain: ChainName::new("MY-MASQ").unwrap(),
        ..PlanOptions::default()
    };
    let sets = default_ruleset(&options);
    let script = transaction(
        &Rendered::new(&sets[0]),
        &diff(&Rendered::new(&sets[0]), &LiveChain::default()),
    );
    assert!(script.contains(":MY-MASQ - [0:0]\n"));
    assert!(script
        .contains("to our custom MY-MASQ chain\" -m addrtype ! --dst-type LOCAL -j MY-MASQ\n"));
    assert!(script.contains("-A MY-MASQ -d 10.0.0.0/8 "));
}

#[test]
fn ipv6_ruleset_renders_with_fe80() {
    let mut config = Config::defaults(&Options::default());
    config
        .non_masquerade_cidrs
        .push("fd00::/8".parse().unwrap());
    let options = PlanOptions {
        enable_ipv6: true,
        ..PlanOptions::default()
    };
    let sets = plan(&config, &options, &crate::plan::ResolvedEgress::default());
    let v6 = render_rules(&sets[1]);
    assert_eq!(
        v6,
        [
            "-A IP-MASQ-AGENT -d fe80::/10 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN",
            "-A IP-MASQ-AGENT -d fd00::/8 -m comment --comment \"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN",
            "-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --random-fully",
        ]
    );
}

#[test]
fn masq_link_local_drops_the_169_254_line() {
    let mut config = Config::defaults(&Options::default());
    config.masq_link_local = true;
    let sets = plan(
        &config,
        &PlanOptions::default(),
        &crate::plan::ResolvedEgress::default(),
    );
    assert!(!render_rules(&sets[0]).iter().any(|l| l.contains("169.254")));
}

#[test]
fn duplicate_and_stale_jumps_are_deleted_and_one_kept() {
    let sets = default_ruleset(&PlanOptions::default());
    let stale = "-A POSTROUTING -m comment --comment \"\\\"ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain\\\"\" -m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT";
    let saved = format!(
        "*nat\n:POSTROUTING ACCEPT [0:0]\n:IP-MASQ-AGENT - [0:0]\n-A POSTROUTING -j KUBE-POSTROUTING\n{stale}\n{JUMP}\n{JUMP}\n{}COMMIT\n",
        DEFAULT_SAVED.lines().skip(2).map(|l| format!("{l}\n")).collect::<String>()
    );
    let live = parse_saved(&saved, &sets[0].names.chain);
    assert_eq!(live.jumps.len(), 3);
    assert_eq!(live.jumps[0].position, 2);
    let drift = diff(&Rendered::new(&sets[0]), &live);
    assert_eq!(
        kinds(&drift),
        [DriftKind::JumpDuplicated, DriftKind::JumpStale]
    );
    assert!(!drift.rewrite_chain);
    // Every copy goes and the kept one is re-inserted where it stood once the stale one is
    // gone, so a concurrent writer's deletion makes this transaction fail instead of leaving
    // no jump.
    let script = transaction(&Rendered::new(&sets[0]), &drift);
    let stale_delete = stale.replacen("-A ", "-D ", 1);
    let dup_delete = JUMP.replacen("-A ", "-D ", 1);
    let reinsert = JUMP.replacen("-A POSTROUTING", "-I POSTROUTING 2", 1);
    assert_eq!(
        script,
        format!("*nat\n{stale_delete}\n{dup_delete}\n{dup_delete}\n{reinsert}\nCOMMIT\n")
    );
}

#[test]
fn foreign_rule_in_our_chain_rewrites_the_chain_only() {
    let sets = default_ruleset(&PlanOptions::default());
    let saved = format!("*nat\n{DEFAULT_SAVED}-A IP-MASQ-AGENT -d 1.2.3.4/32 -j ACCEPT\nCOMMIT\n");
    let drift = diff(
        &Rendered::new(&sets[0]),
        &parse_saved(&saved, &sets[0].names.chain),
    );
    assert_eq!(kinds(&drift), [DriftKind::ExtraRule]);
    let script = transaction(&Rendered::new(&sets[0]), &drift);
    assert!(script.starts_with("*nat\n:IP-MASQ-AGENT - [0:0]\n-A IP-MASQ-AGENT -d 169.254.0.0/16"));
    assert!(!script.contains("POSTROUTING"));
}

#[test]
fn missing_jump_is_appended_without_touching_the_chain() {
    let sets = default_ruleset(&PlanOptions::default());
    let saved = format!(
        "*nat\n{}COMMIT\n",
        DEFAULT_SAVED
            .lines()
            .filter(|l| !l.starts_with("-A POSTROUTING"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    let drift = diff(
        &Rendered::new(&sets[0]),
        &parse_saved(&saved, &sets[0].names.chain),
    );
    assert_eq!(kinds(&drift), [DriftKind::JumpMissing]);
    assert_eq!(
        transaction(&Rendered::new(&sets[0]), &drift),
        format!("*nat\n{JUMP}\nCOMMIT\n")
    );
}

#[test]
fn other_tables_in_the_save_output_are_ignored() {
    let chain = ChainName::default();
    let saved = "*filter\n:IP-MASQ-AGENT - [0:0]\n-A IP-MASQ-AGENT -j ACCEPT\nCOMMIT\n*nat\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n";
    let live = parse_saved(saved, &chain);
    assert!(!live.chain_exists);
    assert!(live.rules.is_empty());
}

#[test]
fn tokenizer_handles_quotes_and_escapes() {
    assert_eq!(
        tokenize(r#"-m comment --comment "a \"b\" c" -j X"#),
        ["-m", "comment", "--comment", "a \"b\" c", "-j", "X"]
    );
    assert_eq!(
        jump_target("-s 1.2.3.4/32 -j KUBE-MARK-MASQ").as_deref(),
        Some("KUBE-MARK-MASQ")
    );
    assert_eq!(
        jump_target("-m comment --comment \"-j IP-MASQ-AGENT\" -j ACCEPT").as_deref(),
        Some("ACCEPT")
    );
    assert_eq!(jump_target("-m addrtype --dst-type LOCAL"), None);
}

#[test]
fn cleanup_removes_jumps_then_the_chain() {
    let chain = ChainName::default();
    let saved = format!("*nat\n{DEFAULT_SAVED}{JUMP}\nCOMMIT\n");
    let live = parse_saved(&saved, &chain);
    let script = cleanup_transaction(&chain, &live).unwrap().script.unwrap();
    let delete = JUMP.replacen("-A ", "-D ", 1);
    assert_eq!(
        script,
        format!("*nat\n{delete}\n{delete}\n:IP-MASQ-AGENT - [0:0]\n-X IP-MASQ-AGENT\nCOMMIT\n")
    );
    assert_eq!(
        cleanup_transaction(&chain, &LiveChain::default())
            .unwrap()
            .script,
        None
    );
}

/// Every flag combination, rendered as the first-sync transaction, compared with the committed
/// golden file. `IPMASQ_UPDATE_GOLDEN=1 cargo test golden` rewrites it after a deliberate change.
#[test]
fn golden_transactions_for_every_flag_combination() {
    let mut config = Config::defaults(&Options::default());
    config
        .non_masquerade_cidrs
        .extend(["fd00::/8", "10.0.0.0/8"].map(|c| c.parse::<ipnet::IpNet>().unwrap()));
    let mut out = String::new();
    for chain in ["IP-MASQ-AGENT", "CUSTOM-MASQ"] {
        for random_fully in [true, false] {
            for to_ports in [
                "",
                "2000",
                "1024-29999,32768-65535",
                "1024-2047,4096-8191,32768-65535",
            ] {
                for enable_ipv6 in [false, true] {
                    for (masq_ll, masq_ll6) in [(false, false), (true, true)] {
                        let options = PlanOptions {
                            chain: ChainName::new(chain).unwrap(),
                            random_fully,
                            to_ports: to_ports.parse().unwrap(),
                            enable_ipv6,
                        };
                        let mut config = config.clone();
                        config.masq_link_local = masq_ll;
                        config.masq_link_local_ipv6 = masq_ll6;
                        for set in plan(&config, &options, &crate::plan::ResolvedEgress::default())
                        {
                            let desired = Rendered::new(&set);
                            let script =
                                transaction(&desired, &diff(&desired, &LiveChain::default()));
                            out.push_str(&format!(
                                "### chain={chain} random-fully={random_fully} to-ports={to_ports:?} enable-ipv6={enable_ipv6} masqLinkLocal={masq_ll} family={}\n{script}",
                                set.family
                            ));
                        }
                    }
                }
            }
        }
    }
    crate::backend::golden::check("transactions.txt", &out);
}

fn desired() -> Rendered {
    Rendered::new(&default_ruleset(&PlanOptions::default())[0])
}

/// The first-sync transaction, which is also what iptables-save prints after it.
fn first_sync_script() -> String {
    let d = desired();
    transaction(&d, &diff(&d, &LiveChain::default()))
}

fn live_after_first_sync(script: &str) -> LiveChain<'_> {
    parse_saved(script, &desired().chain)
}

fn details(d: &Rendered, live: &LiveChain) -> Vec<(&'static str, String)> {
    diff(d, live)
        .differences
        .into_iter()
        .map(|x| (x.kind.as_str(), x.detail))
        .collect()
}

#[test]
fn in_sync_has_no_differences() {
    let script = first_sync_script();
    assert!(diff(&desired(), &live_after_first_sync(&script)).is_empty());
}

#[test]
fn missing_extra_and_reordered_rules_are_named() {
    let script = first_sync_script();
    let d = desired();
    let mut live = live_after_first_sync(&script);
    live.rules.remove(2);
    live.rules
        .push("-A IP-MASQ-AGENT -d 1.2.3.4/32 -j ACCEPT".into());
    assert_eq!(
        details(&d, &live),
        [
            (
                "missing-rule",
                "rule 3 missing: RETURN 172.16.0.0/12".to_string()
            ),
            (
                "extra-rule",
                "rule 5 not planned: ACCEPT 1.2.3.4/32".to_string()
            )
        ]
    );
    let mut live = live_after_first_sync(&script);
    live.rules.swap(1, 2);
    let found = details(&d, &live);
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|x| x.0 == "out-of-order"));
    assert_eq!(
        found[0].1,
        "rule 2 is RETURN 172.16.0.0/12, planned RETURN 10.0.0.0/8"
    );
    // The same diff drives the repair: the chain is rewritten, the jump left alone.
    let drift = diff(&d, &live);
    assert!(drift.rewrite_chain && drift.place_jump.is_none() && drift.delete_jumps.is_empty());
}

#[test]
fn jump_problems_are_named_and_mapped_to_repair_labels() {
    let script = first_sync_script();
    let d = desired();
    let mut live = live_after_first_sync(&script);
    live.jumps.push(live.jumps[0].clone());
    live.jumps[1].position = 2;
    let drift = diff(&d, &live);
    assert_eq!(kinds(&drift), [DriftKind::JumpDuplicated]);
    assert_eq!(drift.differences[0].kind.repair(), "jump_duplicate");
    live.jumps.clear();
    assert_eq!(kinds(&diff(&d, &live)), [DriftKind::JumpMissing]);
    assert_eq!(
        kinds(&diff(&d, &LiveChain::default())),
        [DriftKind::ChainMissing, DriftKind::JumpMissing]
    );
}

#[test]
fn compare_through_the_neutral_inspection_equals_the_repair_diff() {
    let script = first_sync_script();
    let backend = Iptables::new(Variant::Nft);
    let set = &default_ruleset(&PlanOptions::default())[0];
    let mut live = live_after_first_sync(&script);
    live.rules.remove(1);
    live.jumps.push(live.jumps[0].clone());
    let inspection = live.inspection();
    assert_eq!(
        backend.compare(set, &Inspected::neutral(inspection.clone())),
        diff(&Rendered::new(set), &live).differences
    );
    // Our rules are typed: a keep for a destination, a masquerade for the rest.
    let first = &inspection.rules[0];
    assert_eq!(first.verdict, crate::backend::RuleVerdict::Keep);
    assert_eq!(
        first.matches.destination.as_ref().map(|d| d.nets.clone()),
        Some(vec!["169.254.0.0/16".parse().unwrap()])
    );
    assert!(matches!(
        inspection.rules.last().unwrap().verdict,
        crate::backend::RuleVerdict::Masquerade {
            fully_random: true,
            ..
        }
    ));
    assert_eq!(
        inspection.entry(),
        crate::backend::HookStatus::HookedMoreThanOnce {
            copies: 2,
            skips_local: true
        }
    );
}

#[test]
fn chain_name_limits_are_iptables_own() {
    let names = |n: &str| crate::plan::Names::new(ChainName::new(n).unwrap());
    for id in [BackendId::IptablesLegacy, BackendId::IptablesNft] {
        assert!(id.accepts(&names(&"A".repeat(28))).is_ok());
        assert!(id
            .accepts(&names(&"A".repeat(29)))
            .unwrap_err()
            .contains("28 characters"));
        assert!(id.accepts(&names("POSTROUTING")).is_err());
        assert!(id.accepts(&names("MASQUERADE")).is_err());
    }
    assert!(BackendId::Nftables.accepts(&names(&"A".repeat(29))).is_ok());
}

#[test]
fn iptables_version_names_its_variant() {
    use super::tools::variant_of_version;
    assert_eq!(
        variant_of_version("iptables v1.8.9 (nf_tables)"),
        Some(Variant::Nft)
    );
    assert_eq!(
        variant_of_version("iptables v1.8.9 (legacy)"),
        Some(Variant::Legacy)
    );
    assert_eq!(variant_of_version("iptables v1.4.21"), None);
}

/// The rendered chain, read back and evaluated rule by rule as the kernel walks it (first
/// match wins; RETURN keeps the source, MASQUERADE rewrites it), gives `decide`'s verdict for
/// random configs and addresses in both families.
#[test]
fn property_rendered_rules_agree_with_decide() {
    use crate::plan::decide::tests::{assert_live_walk_agrees, random_config, Rng};
    use crate::plan::Family;
    let mut rng = Rng(0x0dd_ba11_cafe_f00d);
    for round in 0..300 {
        let family = if round % 2 == 0 {
            Family::V4
        } else {
            Family::V6
        };
        let config = random_config(&mut rng, family);
        let options = PlanOptions {
            enable_ipv6: true,
            to_ports: if rng.below(2) == 0 {
                "1024-2047,4096-8191".parse().unwrap()
            } else {
                Default::default()
            },
            ..PlanOptions::default()
        };
        let egress = crate::plan::decide::tests::node_egress(&config);
        let set = plan(&config, &options, &egress)
            .into_iter()
            .find(|s| s.family == family)
            .unwrap();
        let mut live = LiveChain {
            chain_exists: true,
            rules: Rendered::new(&set)
                .lines
                .into_iter()
                .map(std::borrow::Cow::Owned)
                .collect(),
            ..LiveChain::default()
        }
        .inspection();
        live.entry_jumps.push(crate::backend::EntryJump {
            position: Some(1),
            text: String::new(),
            counters: None,
            skips_local: true,
        });
        // Every packet here is TCP, so a protocol match always holds and a probability
        // match may or may not: either way the rule is a MASQUERADE.
        assert_live_walk_agrees(&mut rng, &config, &set, &live, round, 40);
    }
}

/// Without the extension keys the chain is upstream's: link-local and the list in config
/// order, one RETURN each, MASQUERADE last; forced CIDRs reorder by prefix and add
/// MASQUERADE rules; source ranges add RETURN rules first.
// Long: one config taken from upstream's chain to the extension keys and then to a second
// source range; each chain is checked against what the step before it rendered.
#[test]
fn extensions_change_the_chain_only_when_used() {
    let mut config = Config::defaults(&Options::default());
    let upstream = Rendered::new(
        &plan(
            &config,
            &PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
        )[0],
    )
    .lines;
    assert_eq!(upstream.len(), 5);
    assert!(upstream[0].contains("-d 169.254.0.0/16"));
    config.force_masquerade_cidrs = vec!["10.8.0.0/16".parse().unwrap()];
    config
        .non_masquerade_cidrs
        .push("10.8.1.0/24".parse().unwrap());
    config.masquerade_source_cidrs = vec!["10.244.0.0/16".parse().unwrap()];
    let lines = Rendered::new(
        &plan(
            &config,
            &PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
        )[0],
    )
    .lines;
    let shapes: Vec<String> = lines
        .iter()
        .map(|l| {
            let v = describe_rule(l);
            format!(
                "{} {} {}",
                v.matches.source.map(|m| m.to_string()).unwrap_or_default(),
                v.matches
                    .destination
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
                match v.verdict {
                    Some(crate::backend::RuleVerdict::Keep) => "RETURN",
                    Some(crate::backend::RuleVerdict::Masquerade { .. }) => "MASQUERADE",
                    _ => "other",
                }
            )
        })
        .collect();
    assert_eq!(
        shapes,
        [
            "!10.244.0.0/16  RETURN",
            " 10.8.1.0/24 RETURN",
            " 169.254.0.0/16 RETURN",
            " 192.168.0.0/16 RETURN",
            " 10.8.0.0/16 MASQUERADE",
            " 172.16.0.0/12 RETURN",
            " 10.0.0.0/8 RETURN",
            "  MASQUERADE",
        ]
    );
    // Two source ranges: the complement of their union, one RETURN per block.
    config
        .masquerade_source_cidrs
        .push("192.168.0.0/16".parse().unwrap());
    let lines = Rendered::new(
        &plan(
            &config,
            &PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
        )[0],
    )
    .lines;
    let gates: Vec<ipnet::Ipv4Net> = lines
        .iter()
        .filter(|l| l.contains("masqueradeSourceCIDRs"))
        .map(|l| {
            let source = describe_rule(l).matches.source.unwrap();
            assert!(!source.negated, "{l}");
            match source.nets[..] {
                [ipnet::IpNet::V4(net)] => net,
                _ => panic!("one IPv4 range: {l}"),
            }
        })
        .collect();
    let sources: Vec<ipnet::Ipv4Net> = vec![
        "10.244.0.0/16".parse().unwrap(),
        "192.168.0.0/16".parse().unwrap(),
    ];
    assert!(gates
        .iter()
        .all(|g| sources.iter().all(|s| !g.contains(s) && !s.contains(g))));
    let size = |n: &ipnet::Ipv4Net| 1u64 << (32 - n.prefix_len());
    let covered: u64 = gates.iter().chain(&sources).map(size).sum();
    assert_eq!(
        covered,
        1 << 32,
        "the gates and the sources tile the address space"
    );
}

#[test]
fn a_save_without_a_readable_nat_table_is_a_failed_observation() {
    let incompatible = "# Table `nat' is incompatible, use 'nft' tool.\n";
    let err = check_nat_readable("iptables-nft-save", incompatible, true).unwrap_err();
    assert!(err.to_string().contains("is incompatible"), "{err}");
    assert!(check_nat_readable("iptables-nft-save", incompatible, false).is_err());
    let no_nat = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";
    assert!(check_nat_readable("x", no_nat, true).is_err());
    assert!(
        check_nat_readable("x", no_nat, false).is_ok(),
        "inspection reads what exists"
    );
    assert!(check_nat_readable("x", "*nat\nCOMMIT\n", true).is_ok());
}

#[test]
fn a_jump_whose_comment_holds_a_newline_is_seen_and_deleted_by_its_words() {
    let chain = ChainName::default();
    let saved = format!(
        "*nat\n:POSTROUTING ACCEPT [0:0]\n:IP-MASQ-AGENT - [0:0]\n-A POSTROUTING -m comment --comment \"a\nb\" -j IP-MASQ-AGENT\n{JUMP}\nCOMMIT\n"
    );
    let live = parse_saved(&saved, &chain);
    assert_eq!(live.jumps.len(), 2, "{live:?}");
    assert_eq!(
        live.jumps[0].spec,
        "-m comment --comment \"a\nb\" -j IP-MASQ-AGENT"
    );
    assert_eq!(live.postrouting_rules, 2);
    let cleanup = cleanup_transaction(&chain, &live).unwrap();
    assert_eq!(cleanup.delete_separately, [live.jumps[0].spec.clone()]);
    let script = cleanup.script.unwrap();
    assert!(script.starts_with("# before this transaction"), "{script}");
    assert!(
        !script.lines().any(|l| l == "b\" -j IP-MASQ-AGENT"),
        "{script}"
    );
    // The repair treats it as a stale jump, deleted outside the restore script.
    let set = &default_ruleset(&PlanOptions::default())[0];
    let drift = diff(&Rendered::new(set), &live);
    assert_eq!(drift.delete_separately.len(), 1);
    assert!(drift.delete_jumps.is_empty());
    assert_eq!(
        tokenize(&drift.delete_separately[0]),
        ["-m", "comment", "--comment", "a\nb", "-j", "IP-MASQ-AGENT"]
    );
}

#[test]
fn a_foreign_reference_to_our_chain_is_named_and_nothing_removed() {
    let chain = ChainName::default();
    let saved = format!("*nat\n{DEFAULT_SAVED}-A OUTPUT -d 10.9.0.0/16 -j IP-MASQ-AGENT\nCOMMIT\n");
    let live = parse_saved(&saved, &chain);
    let err = cleanup_transaction(&chain, &live).unwrap_err();
    assert!(
        err.contains("`-A OUTPUT -d 10.9.0.0/16 -j IP-MASQ-AGENT`"),
        "{err}"
    );
    assert!(
        err.contains("iptables -t nat -D OUTPUT -d 10.9.0.0/16 -j IP-MASQ-AGENT"),
        "{err}"
    );
    assert!(err.contains("nothing was removed"), "{err}");
}

/// A config with the extension keys (forced CIDRs nested both ways, one and two source
/// ranges), rendered as first-sync transactions: its own golden file, so the upstream file
/// above stays the proof that configs without the keys render exactly as before.
#[test]
fn golden_transactions_with_the_extension_keys() {
    let config = crate::plan::decide::tests::extension_config();
    let mut out = String::new();
    for sources in [
        vec!["10.244.0.0/16", "fd00:244::/48"],
        vec!["10.244.0.0/16", "192.168.0.0/16", "fd00:244::/48"],
    ] {
        for to_ports in ["", "1024-29999,32768-65535"] {
            let mut config = config.clone();
            config.masquerade_source_cidrs = sources.iter().map(|c| c.parse().unwrap()).collect();
            let options = PlanOptions {
                to_ports: to_ports.parse().unwrap(),
                enable_ipv6: true,
                ..PlanOptions::default()
            };
            for set in plan(&config, &options, &crate::plan::ResolvedEgress::default()) {
                let desired = Rendered::new(&set);
                let script = transaction(&desired, &diff(&desired, &LiveChain::default()));
                out.push_str(&format!(
                    "### sources={sources:?} to-ports={to_ports:?} family={}\n{script}",
                    set.family
                ));
            }
        }
    }
    crate::backend::golden::check("transactions-extensions.txt", &out);
}

/// The egress keys (`outputAddress` resolved, `outputInterfaces`, both) as first-sync
/// transactions, in a golden file of their own.
#[test]
fn golden_transactions_with_the_egress_keys() {
    let mut out = String::new();
    for case in crate::plan::decide::tests::egress_cases() {
        let label = &case.label;
        for set in plan(&case.config, &case.options, &case.egress) {
            let desired = Rendered::new(&set);
            let script = transaction(&desired, &diff(&desired, &LiveChain::default()));
            out.push_str(&format!("### {label} family={}\n{script}", set.family));
        }
    }
    crate::backend::golden::check("transactions-egress.txt", &out);
}

/// A MASQUERADE above our jump scoped to some sources decides first for those sources: an
/// answer for another source (explain without --from) still names it; one from inside the
/// scope is decided by it, and nothing is left to name.
#[test]
fn a_source_scoped_rewrite_before_ours_is_named_for_other_sources() {
    let script = first_sync_script();
    let jump = script
        .lines()
        .position(|l| l.starts_with("-A POSTROUTING"))
        .expect("our jump");
    let mut lines: Vec<&str> = script.lines().collect();
    lines.insert(jump, "-A POSTROUTING -s 10.1.0.0/16 -j MASQUERADE");
    lines.insert(
        jump,
        "-A POSTROUTING -s 10.2.0.0/16 -d 198.51.100.0/24 -j MASQUERADE",
    );
    let saved = lines.join("\n") + "\n";
    let inspection = parse_saved(&saved, &desired().chain).inspection();
    let at = |ip: &str| ip.parse::<std::net::IpAddr>().unwrap();
    // Any source (0.0.0.0): both rules rewrite some traffic to 198.51.100.7, one to 8.8.8.8.
    assert_eq!(
        inspection.rewrites_for_other_sources(at("0.0.0.0"), at("198.51.100.7")),
        vec![(0, 0), (0, 1)]
    );
    assert_eq!(
        inspection.rewrites_for_other_sources(at("0.0.0.0"), at("8.8.8.8")),
        vec![(0, 1)]
    );
    // From 10.1.2.3 the second rule (first in the chain is the later insert) decides: it is
    // not "another source's" rule, and the walk stops there.
    let from_inside = inspection.evaluate(at("10.1.2.3"), at("8.8.8.8"), false);
    assert_eq!(from_inside.decided_before, Some((0, 1)));
    assert!(inspection
        .rewrites_for_other_sources(at("10.1.2.3"), at("8.8.8.8"))
        .is_empty());
}
