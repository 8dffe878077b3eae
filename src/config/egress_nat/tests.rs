//! Unit tests of GKE's EgressNATPolicy: the documented shape read, the malformed shapes and
//! actions refused with located findings, and the union with a config.

use super::*;
use crate::config::check_text;
use crate::config::yaml::parse_stream;

fn policy(text: &str) -> Policy {
    let stream = parse_stream(text, crate::config::manifest::MANIFEST_OR_CONFIG).unwrap();
    assert!(is_policy(&stream.documents[0]));
    read_policy(&stream.documents[0])
}

fn with_spec(name: &str, spec: &str) -> String {
    format!("apiVersion: networking.gke.io/v1\nkind: EgressNATPolicy\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

fn codes(policy: &Policy) -> Vec<Code> {
    policy.diagnostics.iter().map(|d| d.code).collect()
}

#[test]
fn reads_gkes_documented_shape() {
    let p = policy(&with_spec(
        "default",
        "  action: NoSNAT\n  destinations:\n  - cidr: 10.0.0.0/8\n  - cidr: \"100.64.0.0/10\"\n",
    ));
    assert!(p.is_valid(), "{:?}", p.diagnostics);
    assert_eq!(p.name.as_deref(), Some("default"));
    assert_eq!(
        p.destinations,
        [
            "10.0.0.0/8".parse().unwrap(),
            "100.64.0.0/10".parse::<IpNet>().unwrap()
        ]
    );
    assert_eq!(p.places[1].location.unwrap().line, 9);
    // JSON, as the API serves it, is read alike.
    let p = policy(
        r#"{"apiVersion": "networking.gke.io/v1", "kind": "EgressNATPolicy", "metadata": {"name": "j"}, "spec": {"action": "NoSNAT", "destinations": [{"cidr": "192.0.2.0/24"}]}}"#,
    );
    assert_eq!(p.destinations, ["192.0.2.0/24".parse::<IpNet>().unwrap()]);
}

/// The widespread malformed shape, a list of strings: an error at each string that shows the
/// right shape.
#[test]
fn destinations_as_strings_are_refused_with_the_right_shape() {
    let p = policy(&with_spec(
        "bad",
        "  action: NoSNAT\n  destinations:\n  - 10.0.0.0/8\n",
    ));
    assert!(!p.is_valid());
    let d = &p.diagnostics[0];
    assert_eq!(d.code, Code::EgressNatPolicyShape);
    assert_eq!(d.location.unwrap().line, 8);
    assert!(d.message.contains("\"10.0.0.0/8\""), "{}", d.message);
    assert_eq!(
        d.hint.as_deref(),
        Some("write `- cidr: 10.0.0.0/8` (destinations: [{cidr: 10.0.0.0/8}])")
    );
    let p = policy(&with_spec(
        "bad",
        "  action: NoSNAT\n  destinations: 10.0.0.0/8\n",
    ));
    assert_eq!(codes(&p), [Code::EgressNatPolicyShape]);
    assert!(p.diagnostics[0]
        .hint
        .as_deref()
        .unwrap()
        .contains("{cidr: 10.0.0.0/8}"));
}

#[test]
fn actions_other_than_no_snat_and_missing_parts_are_refused() {
    let p = policy(&with_spec(
        "snat",
        "  action: SNAT\n  destinations:\n  - cidr: 10.0.0.0/8\n",
    ));
    assert_eq!(codes(&p), [Code::EgressNatPolicyAction]);
    assert_eq!(p.diagnostics[0].location.unwrap().line, 6);
    let p = policy(&with_spec(
        "lower",
        "  action: nosnat\n  destinations: []\n",
    ));
    assert_eq!(codes(&p), [Code::EgressNatPolicyAction]);
    let p = policy(&with_spec("none", "  destinations: []\n"));
    assert_eq!(codes(&p), [Code::EgressNatPolicyShape]);
    let p = policy(&with_spec("nodest", "  action: NoSNAT\n"));
    assert_eq!(codes(&p), [Code::EgressNatPolicyShape]);
    let p =
        policy("apiVersion: networking.gke.io/v1\nkind: EgressNATPolicy\nmetadata: {name: x}\n");
    assert_eq!(codes(&p), [Code::EgressNatPolicyShape]);
    let p = policy(&with_spec(
        "nocidr",
        "  action: NoSNAT\n  destinations:\n  - {ip: 10.0.0.0/8}\n",
    ));
    assert_eq!(codes(&p), [Code::UnknownKey, Code::EgressNatPolicyShape]);
    assert!(!p.is_valid());
}

#[test]
fn bad_cidrs_are_refused_as_in_a_config() {
    let p = policy(&with_spec(
        "cidrs",
        "  action: NoSNAT\n  destinations:\n  - cidr: 10.1.2.3/16\n  - cidr: 10.0.0.0/33\n  - cidr: ::ffff:10.0.0.0/104\n  - cidr: 8\n  - cidr: 192.0.2.0/24\n",
    ));
    assert_eq!(
        codes(&p),
        [
            Code::CidrNotAligned,
            Code::InvalidCidr,
            Code::Ipv4MappedCidr,
            Code::EgressNatPolicyShape
        ]
    );
    assert_eq!(
        p.diagnostics[0].hint.as_deref(),
        Some("did you mean 10.1.0.0/16?")
    );
    assert_eq!(p.destinations, ["192.0.2.0/24".parse::<IpNet>().unwrap()]);
}

/// The API source's path: the object's JSON bytes.
#[test]
fn reads_a_policy_from_its_text() {
    let p = read_policy_text(
        r#"{"apiVersion":"networking.gke.io/v1","kind":"EgressNATPolicy","metadata":{"name":"api"},"spec":{"action":"NoSNAT","destinations":[{"cidr":"10.0.0.0/8"}]}}"#,
    );
    assert!(p.is_valid(), "{:?}", p.diagnostics);
    assert_eq!(p.name.as_deref(), Some("api"));
    assert_eq!(p.destinations, ["10.0.0.0/8".parse::<IpNet>().unwrap()]);
    assert_eq!(codes(&read_policy_text("{")), [Code::YamlSyntax]);
    assert_eq!(
        codes(&read_policy_text("kind: ConfigMap\n")),
        [Code::EgressNatPolicyShape]
    );
    assert_eq!(codes(&read_policy_text("")), [Code::EgressNatPolicyShape]);
}

#[test]
fn other_kinds_and_groups_are_no_policies() {
    let stream = parse_stream(
        "apiVersion: example.com/v1\nkind: EgressNATPolicy\nmetadata: {name: x}\n",
        crate::config::manifest::MANIFEST_OR_CONFIG,
    )
    .unwrap();
    assert!(!is_policy(&stream.documents[0]));
}

/// The union: the config's list (its defaults when it lists none) and then each policy's
/// destinations in policy name order, repeats dropped, each place named by its policy.
#[test]
fn policies_add_their_destinations_to_the_config() {
    let b = policy(&with_spec(
        "b",
        "  action: NoSNAT\n  destinations:\n  - cidr: 100.64.0.0/10\n  - cidr: 10.0.0.0/8\n",
    ));
    let a = policy(&with_spec(
        "a",
        "  action: NoSNAT\n  destinations:\n  - cidr: 198.18.0.0/15\n",
    ));
    let defaults = check_text("", &Options::default());
    let merged = keep_destinations(&defaults, &[b, a], &Options::default());
    let config = merged.config().expect("valid");
    let listed: Vec<String> = config
        .non_masquerade_cidrs
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        listed,
        [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "198.18.0.0/15",
            "100.64.0.0/10"
        ]
    );
    let place = config.place(crate::config::ListName::NonMasquerade, 4);
    assert_eq!(place.file.as_deref(), Some("EgressNATPolicy b"));
    assert_eq!(place.location.unwrap().line, 8);
    assert_eq!(
        config.place(crate::config::ListName::NonMasquerade, 0).file,
        None
    );
    // Without policies the config is unchanged.
    assert_eq!(
        keep_destinations(&defaults, &[], &Options::default()),
        defaults
    );
}

#[test]
fn a_union_that_contradicts_the_config_or_holds_an_invalid_policy_is_rejected() {
    let forced = check_text(
        "forceMasqueradeCIDRs: [198.18.0.0/15]\n",
        &Options::default(),
    );
    let a = policy(&with_spec(
        "a",
        "  action: NoSNAT\n  destinations:\n  - cidr: 198.18.0.0/15\n",
    ));
    let merged = keep_destinations(&forced, &[a], &Options::default());
    assert_eq!(merged.errors().next().unwrap().code, Code::ForcedAndKept);
    let bad = policy(&with_spec(
        "bad",
        "  action: NoSNAT\n  destinations:\n  - 10.0.0.0/8\n",
    ));
    let merged = keep_destinations(
        &check_text("", &Options::default()),
        &[bad],
        &Options::default(),
    );
    assert!(merged.config().is_none());
    assert_eq!(
        merged.errors().next().unwrap().file.as_deref(),
        Some("EgressNATPolicy bad")
    );
    let v6 = policy(&with_spec(
        "v6",
        "  action: NoSNAT\n  destinations:\n  - cidr: fd00::/8\n",
    ));
    let merged = keep_destinations(
        &check_text("", &Options::default()),
        std::slice::from_ref(&v6),
        &Options::default(),
    );
    assert_eq!(merged.errors().next().unwrap().code, Code::Ipv6NotEnabled);
    let merged = keep_destinations(
        &check_text("enableIPv6: true\n", &Options::default()),
        &[v6],
        &Options::default(),
    );
    assert!(merged.config().is_some(), "{:?}", merged.diagnostics());
}
