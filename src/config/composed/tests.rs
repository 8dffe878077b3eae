//! Unit tests of the composed config: the base alone is the file, pools merge then policies
//! keep their destinations, and the digest is that of its `sha256sum`-style listing.

use super::*;

fn pool(name: &str, text: &str) -> PoolText {
    PoolText {
        name: name.into(),
        selector: "pool=gpu".into(),
        text: Some(text.into()),
    }
}

fn policy(name: &str, cidrs: &[&str]) -> PolicyText {
    let destinations: Vec<String> = cidrs
        .iter()
        .map(|c| format!("{{\"cidr\":\"{c}\"}}"))
        .collect();
    PolicyText {
        name: name.into(),
        text: format!(
            "{{\"apiVersion\":\"networking.gke.io/v1\",\"kind\":\"EgressNATPolicy\",\"metadata\":{{\"name\":\"{name}\"}},\"spec\":{{\"action\":\"NoSNAT\",\"destinations\":[{}]}}}}",
            destinations.join(",")
        ),
    }
}

fn composed(base: Option<&str>, pools: Vec<PoolText>, policies: Vec<PolicyText>) -> ComposedText {
    ComposedText::new(
        "kube-system",
        "ip-masq-agent",
        base.map(|t| Arc::new(t.to_string())),
        pools,
        policies,
    )
}

fn non_masquerade(checked: &Checked) -> Vec<String> {
    checked
        .config()
        .expect("a valid config")
        .non_masquerade_cidrs
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn the_base_alone_is_the_file_and_its_digest_the_sha256_of_its_text() {
    let text = "nonMasqueradeCIDRs: [10.0.0.0/8]\n";
    let alone = composed(Some(text), vec![], vec![]);
    let options = Options::default();
    assert_eq!(alone.check(&options), check_text(text, &options));
    assert_eq!(alone.digest(), Some(sha256_hex(text.as_bytes())));
    assert_eq!(composed(None, vec![], vec![]).digest(), None);
}

#[test]
fn pools_merge_after_the_base_in_name_order_and_policies_add_their_destinations() {
    let options = Options::default();
    let both = composed(
        Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"),
        vec![
            pool("ip-masq-agent-b", "nonMasqueradeCIDRs: [172.16.0.0/12]\n"),
            pool("ip-masq-agent-a", "nonMasqueradeCIDRs: [100.64.0.0/10]\n"),
        ],
        vec![policy("keep", &["198.51.100.0/24"])],
    );
    assert_eq!(both.pools[0].name, "ip-masq-agent-a");
    assert_eq!(
        non_masquerade(&both.check(&options)),
        [
            "10.0.0.0/8",
            "100.64.0.0/10",
            "172.16.0.0/12",
            "198.51.100.0/24"
        ]
    );
    assert_eq!(
        both.provenance("configmap kube-system/ip-masq-agent (resourceVersion 3)"),
        "configmap kube-system/ip-masq-agent (resourceVersion 3) + pools ip-masq-agent-a, ip-masq-agent-b + egressnatpolicies keep"
    );
    // A malformed policy rejects the config, as an invalid file rejects a merge.
    let bad = composed(
        Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"),
        vec![],
        vec![PolicyText {
            name: "bad".into(),
            text: "{\"apiVersion\":\"networking.gke.io/v1\",\"kind\":\"EgressNATPolicy\",\"metadata\":{\"name\":\"bad\"},\"spec\":{\"action\":\"NoSNAT\",\"destinations\":[\"10.0.0.0/8\"]}}".into(),
        }],
    );
    assert!(bad.check(&options).config().is_none());
}

#[test]
fn the_digest_of_a_composition_is_that_of_its_sha256sum_listing() {
    let base = "nonMasqueradeCIDRs: [10.0.0.0/8]\n";
    let gpu = "nonMasqueradeCIDRs: [100.64.0.0/10]\n";
    let inputs = composed(
        Some(base),
        vec![pool("ip-masq-agent-gpu", gpu)],
        vec![policy("keep", &["198.51.100.0/24", "203.0.113.0/24"])],
    );
    let listing = format!(
        "{}  configmaps/kube-system/ip-masq-agent\n{}  configmaps/kube-system/ip-masq-agent-gpu\n{}  egressnatpolicies/keep\n",
        sha256_hex(base.as_bytes()),
        sha256_hex(gpu.as_bytes()),
        sha256_hex(b"198.51.100.0/24\n203.0.113.0/24\n"),
    );
    assert_eq!(inputs.digest_listing(), listing);
    assert_eq!(inputs.digest(), Some(sha256_hex(listing.as_bytes())));
    // Any input's change changes it; the order the inputs came in does not.
    let edited = composed(
        Some(base),
        vec![pool("ip-masq-agent-gpu", gpu)],
        vec![policy("keep", &["198.51.100.0/24"])],
    );
    assert_ne!(edited.digest(), inputs.digest());
    let no_base = composed(None, vec![pool("ip-masq-agent-gpu", gpu)], vec![]);
    assert!(no_base.digest_listing().starts_with(&format!(
        "{}  configmaps/kube-system/ip-masq-agent\n",
        sha256_hex(b"")
    )));
}
