//! Unit tests of node pools: which pools a node gets and in which order, the base's defaults
//! kept, a node without a pool getting the base exactly, the merge rules across base and pools.

use super::*;
use crate::config::Code;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn cidrs(checked: &Checked) -> Vec<String> {
    checked
        .config()
        .expect("valid")
        .non_masquerade_cidrs
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn pools() -> Vec<Pool> {
    vec![
        // Out of name order on purpose: the merge order is the name order.
        Pool::from_values(
            "ip-masq-agent-zz-zone-a",
            "topology.kubernetes.io/zone=a",
            Some("nonMasqueradeCIDRs: [100.64.0.0/10]\nresyncInterval: 5s\n"),
            &Options::default(),
        ),
        Pool::from_values(
            "ip-masq-agent-gpu",
            "pool in (gpu,tpu)",
            Some("nonMasqueradeCIDRs: [198.18.0.0/15, 10.0.0.0/8]\nmasqLinkLocal: true\n"),
            &Options::default(),
        ),
        Pool::from_values(
            "ip-masq-agent-broken",
            "pool in (gpu",
            Some("{}"),
            &Options::default(),
        ),
    ]
}

#[test]
fn pool_names_need_the_prefix_and_a_suffix() {
    assert!(is_pool_name("ip-masq-agent-gpu"));
    assert!(!is_pool_name("ip-masq-agent"));
    assert!(!is_pool_name("ip-masq-agent-"));
    assert!(!is_pool_name("gpu-ip-masq-agent"));
}

#[test]
fn a_node_gets_the_base_then_its_pools_in_name_order() {
    let pools = pools();
    let node = labels(&[("pool", "gpu"), ("topology.kubernetes.io/zone", "a")]);
    let names: Vec<&str> = pools_for_node(&pools, &node)
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["ip-masq-agent-gpu", "ip-masq-agent-zz-zone-a"]);
    let base = check_text("nonMasqueradeCIDRs: [10.0.0.0/8]\n", &Options::default());
    let parts = parts_for_node(
        &base_part("kube-system/ip-masq-agent", &base),
        &pools,
        &node,
    );
    let order: Vec<&str> = parts.iter().map(|p| &*p.name).collect();
    assert_eq!(
        order,
        [
            "ConfigMap kube-system/ip-masq-agent",
            "ConfigMap ip-masq-agent-gpu",
            "ConfigMap ip-masq-agent-zz-zone-a"
        ]
    );
    let node_config = config_for_node(
        "kube-system/ip-masq-agent",
        &base,
        &pools,
        &node,
        &Options::default(),
    );
    assert_eq!(
        node_config.pools,
        ["ip-masq-agent-gpu", "ip-masq-agent-zz-zone-a"]
    );
    // Unions in merge order without repeats; booleans OR'd; the shortest interval.
    assert_eq!(
        cidrs(&node_config.checked),
        ["10.0.0.0/8", "198.18.0.0/15", "100.64.0.0/10"]
    );
    let config = node_config.checked.config().unwrap();
    assert!(config.masq_link_local);
    assert_eq!(config.resync_interval.to_string(), "5s");
    // Each entry keeps the ConfigMap it came from.
    let place = config.place(crate::config::ListName::NonMasquerade, 1);
    assert_eq!(place.file.as_deref(), Some("ConfigMap ip-masq-agent-gpu"));
}

#[test]
fn a_node_without_a_pool_gets_the_base_exactly() {
    let base = check_text(
        "nonMasqueradeCIDRs: [10.0.0.0/8, 10.0.0.0/8]\ncidrLimit: 3\n",
        &Options::default(),
    );
    let node = labels(&[("pool", "cpu")]);
    let node_config = config_for_node("ip-masq-agent", &base, &pools(), &node, &Options::default());
    assert!(node_config.pools.is_empty());
    assert_eq!(
        node_config.checked, base,
        "repeats kept, as upstream writes them"
    );
}

/// A base that lists no CIDRs contributes upstream's defaults, so a pool that adds one range
/// never takes RFC 1918 away from its nodes.
#[test]
fn the_base_contributes_its_defaults() {
    let base = check_text("masqLinkLocal: false\n", &Options::default());
    let node = labels(&[("pool", "tpu")]);
    let node_config = config_for_node("ip-masq-agent", &base, &pools(), &node, &Options::default());
    assert_eq!(
        cidrs(&node_config.checked),
        [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "198.18.0.0/15"
        ]
    );
    assert!(!node_config
        .checked
        .diagnostics()
        .iter()
        .any(|d| d.code == Code::EmptyCidrList));
}

#[test]
fn a_pool_that_contradicts_the_base_rejects_the_nodes_config() {
    let base = check_text(
        "forceMasqueradeCIDRs: [198.18.0.0/15]\n",
        &Options::default(),
    );
    let node = labels(&[("pool", "gpu")]);
    let node_config = config_for_node("ip-masq-agent", &base, &pools(), &node, &Options::default());
    let error = node_config.checked.errors().next().expect("an error");
    assert_eq!(error.code, Code::ForcedAndKept);
    // A node without the pool keeps the base.
    let other = config_for_node(
        "ip-masq-agent",
        &base,
        &pools(),
        &labels(&[]),
        &Options::default(),
    );
    assert!(other.checked.config().is_some());
}

#[test]
fn a_pool_is_held_to_its_own_limit_and_an_invalid_pool_rejects_its_nodes() {
    let many: Vec<String> = (0..65).map(|i| format!("10.{i}.0.0/16")).collect();
    let text = format!("nonMasqueradeCIDRs: [{}]\n", many.join(", "));
    let pool = Pool::from_values("ip-masq-agent-big", "big", Some(&text), &Options::default());
    let error = pool.part.checked.errors().next().expect("over its limit");
    assert_eq!(error.code, Code::CidrLimitExceeded);
    let base = check_text("", &Options::default());
    let node = labels(&[("big", "")]);
    let node_config = config_for_node("ip-masq-agent", &base, &[pool], &node, &Options::default());
    assert!(node_config.checked.config().is_none());
    assert_eq!(node_config.pools, ["ip-masq-agent-big"]);
}

#[test]
fn an_invalid_selector_selects_no_node_and_a_missing_config_adds_nothing() {
    let pools = pools();
    let broken = pools
        .iter()
        .find(|p| p.name == "ip-masq-agent-broken")
        .unwrap();
    assert!(broken.selector.is_err());
    assert!(!broken.selects(&labels(&[("pool", "gpu")])));
    let empty = Pool::from_values("ip-masq-agent-all", "", None, &Options::default());
    assert!(
        empty.selects(&labels(&[])),
        "the empty selector selects every node"
    );
    let base = check_text("nonMasqueradeCIDRs: [10.0.0.0/8]\n", &Options::default());
    let node_config = config_for_node(
        "ip-masq-agent",
        &base,
        &[empty],
        &labels(&[]),
        &Options::default(),
    );
    assert_eq!(cidrs(&node_config.checked), ["10.0.0.0/8"]);
}
