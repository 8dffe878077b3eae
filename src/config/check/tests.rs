//! One test (at least) per upstream edge case of the config file.

use super::*;
use crate::config::{ListName, Severity, DEFAULT_RESYNC_INTERVAL, RESERVED_RANGES, RFC1918_RANGES};

const V4: Options = Options {
    enable_ipv6: false,
    enable_ipv6_given: false,
    nomasq_all_reserved_ranges: false,
    merging: false,
    default_resync_interval: None,
};
const V6: Options = Options {
    enable_ipv6: true,
    enable_ipv6_given: true,
    nomasq_all_reserved_ranges: false,
    merging: false,
    default_resync_interval: None,
};
const RESERVED: Options = Options {
    enable_ipv6: false,
    enable_ipv6_given: false,
    nomasq_all_reserved_ranges: true,
    merging: false,
    default_resync_interval: None,
};

fn ok(text: &str, options: &Options) -> (Config, Vec<Diagnostic>) {
    let checked = check_text(text, options);
    match checked.config {
        Some(config) => (config, checked.diagnostics),
        None => panic!("{text:?} should be valid, got {:#?}", checked.diagnostics),
    }
}

fn errors(text: &str, options: &Options) -> Vec<Diagnostic> {
    let checked = check_text(text, options);
    assert!(
        checked.config.is_none(),
        "{text:?} should be invalid, got {:?}",
        checked.config
    );
    let errs: Vec<Diagnostic> = checked.errors().cloned().collect();
    assert!(!errs.is_empty(), "an invalid config must carry an error");
    errs
}

fn codes(diags: &[Diagnostic]) -> Vec<Code> {
    diags.iter().map(|d| d.code).collect()
}

fn cidrs(config: &Config) -> Vec<String> {
    config
        .non_masquerade_cidrs
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn empty_file_means_defaults() {
    for text in ["", "\n", "# just a comment\n", "---\n", "~\n", "null\n"] {
        let (config, diags) = ok(text, &V4);
        assert_eq!(config, Config::defaults(&V4), "{text:?}");
        assert!(diags.is_empty(), "{text:?}: {diags:?}");
    }
}

#[test]
fn defaults_are_upstreams() {
    let config = Config::defaults(&V4);
    assert_eq!(cidrs(&config), RFC1918_RANGES);
    assert_eq!(config.cidr_limit, 64);
    assert!(!config.masq_link_local);
    assert!(!config.masq_link_local_ipv6);
    assert_eq!(config.resync_interval, DEFAULT_RESYNC_INTERVAL);
    assert_eq!(config.resync(), std::time::Duration::from_secs(60));
}

#[test]
fn absent_key_keeps_its_default() {
    let (config, _) = ok("masqLinkLocal: true\n", &V4);
    assert_eq!(cidrs(&config), RFC1918_RANGES);
    assert!(config.masq_link_local);
    assert_eq!(config.cidr_limit, 64);
    assert_eq!(config.resync_interval, DEFAULT_RESYNC_INTERVAL);
}

#[test]
fn listed_cidrs_replace_the_defaults_in_order_with_duplicates_kept() {
    let (config, diags) = ok(
        "nonMasqueradeCIDRs:\n  - 192.168.0.0/16\n  - 10.0.0.0/8\n  - 10.0.0.0/8\n",
        &V4,
    );
    assert_eq!(
        cidrs(&config),
        ["192.168.0.0/16", "10.0.0.0/8", "10.0.0.0/8"]
    );
    assert_eq!(codes(&diags), [Code::DuplicateCidr]);
    assert_eq!(diags[0].location.unwrap().line, 4);
}

#[test]
fn null_and_empty_list_both_mean_empty_with_a_warning() {
    for text in [
        "nonMasqueradeCIDRs: null\n",
        "nonMasqueradeCIDRs: []\n",
        "nonMasqueradeCIDRs:\n",
        "nonMasqueradeCIDRs: ~\n",
        "{\"nonMasqueradeCIDRs\": null}",
    ] {
        let (config, diags) = ok(text, &V4);
        assert!(config.non_masquerade_cidrs.is_empty(), "{text:?}");
        assert_eq!(codes(&diags), [Code::EmptyCidrList], "{text:?}");
    }
}

#[test]
fn reserved_ranges_flag_extends_the_defaults_only() {
    let (config, _) = ok("", &RESERVED);
    let want: Vec<&str> = RFC1918_RANGES
        .iter()
        .chain(&RESERVED_RANGES)
        .copied()
        .collect();
    assert_eq!(cidrs(&config), want);
    let (config, _) = ok("nonMasqueradeCIDRs: [10.0.0.0/8]\n", &RESERVED);
    assert_eq!(cidrs(&config), ["10.0.0.0/8"]);
}

#[test]
fn json_is_accepted() {
    let (config, diags) = ok(
        r#"{"nonMasqueradeCIDRs": ["10.0.0.0/8"], "cidrLimit": 10, "masqLinkLocal": true, "resyncInterval": "30s"}"#,
        &V4,
    );
    assert!(diags.is_empty(), "{diags:?}");
    assert_eq!(cidrs(&config), ["10.0.0.0/8"]);
    assert_eq!(config.cidr_limit, 10);
    assert!(config.masq_link_local);
    assert_eq!(config.resync(), std::time::Duration::from_secs(30));
}

#[test]
fn yaml11_booleans_are_accepted_with_a_warning() {
    for (text, want) in [
        ("yes", true),
        ("on", true),
        ("Y", true),
        ("no", false),
        ("off", false),
        ("OFF", false),
    ] {
        let (config, diags) = ok(&format!("masqLinkLocal: {text}\n"), &V4);
        assert_eq!(config.masq_link_local, want, "{text}");
        assert_eq!(codes(&diags), [Code::Yaml11Boolean], "{text}");
    }
    let (config, diags) = ok("masqLinkLocalIPv6: True\n", &V4);
    assert!(config.masq_link_local_ipv6);
    assert!(diags.is_empty());
}

#[test]
fn quoted_booleans_are_strings_and_rejected() {
    let errs = errors("masqLinkLocal: \"true\"\n", &V4);
    assert_eq!(codes(&errs), [Code::WrongType]);
    assert!(errs[0]
        .hint
        .as_deref()
        .unwrap()
        .contains("remove the quotes"));
}

#[test]
fn keys_match_case_insensitively_with_a_warning() {
    let (config, diags) = ok(
        "MASQLINKLOCAL: true\nNonMasqueradeCidrs: [10.0.0.0/8]\n",
        &V4,
    );
    assert!(config.masq_link_local);
    assert_eq!(cidrs(&config), ["10.0.0.0/8"]);
    assert_eq!(codes(&diags), [Code::KeyCase, Code::KeyCase]);
    assert!(diags[0].message.contains("masqLinkLocal"));
}

#[test]
fn unknown_keys_are_ignored_with_a_warning_and_a_suggestion() {
    let (config, diags) = ok("nonMasqueradeCIDR: [10.0.0.0/8]\nfoo: 1\n", &V4);
    assert_eq!(config, Config::defaults(&V4));
    assert_eq!(codes(&diags), [Code::UnknownKey, Code::UnknownKey]);
    assert_eq!(
        diags[0].hint.as_deref(),
        Some("did you mean nonMasqueradeCIDRs?")
    );
    assert!(diags[1].hint.as_deref().unwrap().starts_with("known keys:"));
    assert_eq!(suggest_key("resync"), Some("resyncInterval"));
    assert_eq!(suggest_key("masqLinkLocalIP6"), Some("masqLinkLocalIPv6"));
    assert_eq!(suggest_key("cidrlimits"), Some("cidrLimit"));
    assert_eq!(suggest_key("banana"), None);
}

#[test]
fn last_duplicate_key_wins_with_a_warning() {
    let (config, diags) = ok("masqLinkLocal: true\nmasqLinkLocal: false\n", &V4);
    assert!(!config.masq_link_local);
    assert_eq!(codes(&diags), [Code::DuplicateKey]);
    assert_eq!(diags[0].location.unwrap().line, 2);
    // An earlier occurrence with a bad value is overridden, as Go's map collapse does.
    let (config, _) = ok("cidrLimit: nope\ncidrLimit: 3\n", &V4);
    assert_eq!(config.cidr_limit, 3);
    // Case variants are the same field.
    let (config, diags) = ok("masqLinkLocal: false\nMasqLinkLocal: true\n", &V4);
    assert!(config.masq_link_local);
    assert_eq!(codes(&diags), [Code::KeyCase, Code::DuplicateKey]);
}

/// Go's `encoding/json` folds `ſ` (U+017F) to `s` and the Kelvin sign to `k`, as upstream
/// reads field names; a dotless `ı` or a dotted `İ` folds to no ASCII letter.
#[test]
fn keys_fold_as_go_folds_them() {
    let (config, diags) = ok("maſqLinkLocal: true\n", &V4);
    assert!(config.masq_link_local);
    assert_eq!(codes(&diags), [Code::KeyCase]);
    let (config, _) = ok("masqLin\u{212a}Local: true\n", &V4);
    assert!(config.masq_link_local);
    for unknown in ["masqLınkLocal: true\n", "masqLİnkLocal: true\n"] {
        let (config, diags) = ok(unknown, &V4);
        assert!(!config.masq_link_local, "{unknown}");
        assert_eq!(codes(&diags), [Code::UnknownKey], "{unknown}");
    }
}

#[test]
fn only_the_first_document_counts() {
    let (config, diags) = ok("masqLinkLocal: true\n---\nmasqLinkLocal: false\n", &V4);
    assert!(config.masq_link_local);
    assert_eq!(codes(&diags), [Code::ExtraDocument]);
    assert_eq!(diags[0].location.unwrap().line, 3);
    // A file that starts with `---` and ends its first document with `...`: the hint names
    // the end marker, not the leading separator (deleting from that would delete it all).
    let (config, diags) = ok("---\nmasqLinkLocal: true\n...\nmasqLinkLocal: false\n", &V4);
    assert!(config.masq_link_local);
    assert_eq!(diags[0].location.unwrap().line, 4);
    let hint = diags[0].hint.as_deref().unwrap();
    assert!(
        hint.contains("before line 4") && hint.contains("`...`"),
        "{hint}"
    );
    // A broken later document does not reject the first.
    let (config, diags) = ok("masqLinkLocal: true\n---\n[unclosed\n", &V4);
    assert!(config.masq_link_local);
    assert!(diags.iter().all(|d| d.code == Code::ExtraDocument));
}

#[test]
fn misaligned_cidr_names_the_aligned_form() {
    let errs = errors("nonMasqueradeCIDRs:\n  - 10.1.2.3/16\n", &V4);
    assert_eq!(codes(&errs), [Code::CidrNotAligned]);
    assert_eq!(errs[0].hint.as_deref(), Some("did you mean 10.1.0.0/16?"));
    let location = errs[0].location.unwrap();
    assert_eq!((location.line, location.column), (2, 5));
}

#[test]
fn strict_cidr_parsing() {
    for bad in [
        "010.0.0.0/8",
        "' 10.0.0.0/8'",
        "'10.0.0.0/8 '",
        "10.0.0.0/33",
        "10.0.0.0",
        "fd00::/129",
        "'10.0.0.0/8,172.16.0.0/12'",
    ] {
        let errs = errors(&format!("nonMasqueradeCIDRs: [{bad}]\n"), &V6);
        assert_eq!(codes(&errs), [Code::InvalidCidr], "{bad}");
        assert!(errs[0].message.contains("could not be parsed"), "{bad}");
    }
}

#[test]
fn padded_prefix_is_accepted_like_go_with_a_warning() {
    let (config, diags) = ok("nonMasqueradeCIDRs: [10.0.0.0/08]\n", &V4);
    assert_eq!(cidrs(&config), ["10.0.0.0/8"]);
    assert_eq!(codes(&diags), [Code::PaddedPrefix]);
}

#[test]
fn ipv4_mapped_ipv6_is_rejected_clearly() {
    let errs = errors("nonMasqueradeCIDRs: ['::ffff:172.16.0.0/108']\n", &V6);
    assert_eq!(codes(&errs), [Code::Ipv4MappedCidr]);
    assert_eq!(errs[0].hint.as_deref(), Some("did you mean 172.16.0.0/12?"));
}

#[test]
fn ipv6_needs_the_flag() {
    let errs = errors("nonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8']\n", &V4);
    assert_eq!(codes(&errs), [Code::Ipv6NotEnabled]);
    assert!(errs[0].message.contains("--enable-ipv6"));
    let (config, diags) = ok("nonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8']\n", &V6);
    assert_eq!(cidrs(&config), ["10.0.0.0/8", "fd00::/8"]);
    assert!(diags.is_empty());
}

#[test]
fn cidr_limit_counts_both_families_but_not_link_local() {
    let text = "cidrLimit: 2\nnonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8']\n";
    let (config, _) = ok(text, &V6);
    assert_eq!(config.cidr_limit, 2);
    let text = "cidrLimit: 1\nnonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8']\n";
    let errs = errors(text, &V6);
    assert_eq!(codes(&errs), [Code::CidrLimitExceeded]);
    assert_eq!(
        errs[0].message,
        "the daemon can only accept up to 1 CIDRs (excluding link-local), but got 2 CIDRs (excluding link local)"
    );
    assert_eq!(errs[0].location.unwrap().line, 1);
    // masqLinkLocal does not change the count.
    assert!(check_text("cidrLimit: 0\nnonMasqueradeCIDRs: []\n", &V4)
        .config
        .is_some());
}

#[test]
fn cidr_limit_applies_to_the_default_list() {
    let errs = errors("cidrLimit: 2\n", &V4);
    assert_eq!(codes(&errs), [Code::CidrLimitExceeded]);
    let errs = errors("cidrLimit: 10\n", &RESERVED);
    assert!(errs[0].message.contains("but got 11 CIDRs"));
    assert!(check_text("cidrLimit: 3\n", &V4).config.is_some());
}

#[test]
fn default_limit_is_64() {
    let list: Vec<String> = (0..65).map(|i| format!("10.{i}.0.0/16")).collect();
    let text = format!("nonMasqueradeCIDRs: [{}]\n", list[..64].join(", "));
    assert!(check_text(&text, &V4).config.is_some());
    let text = format!("nonMasqueradeCIDRs: [{}]\n", list.join(", "));
    assert_eq!(codes(&errors(&text, &V4)), [Code::CidrLimitExceeded]);
}

#[test]
fn negative_cidr_limit_is_an_error() {
    let errs = errors("cidrLimit: -1\nnonMasqueradeCIDRs: []\n", &V4);
    assert_eq!(codes(&errs), [Code::NegativeCidrLimit]);
}

#[test]
fn cidr_limit_number_forms() {
    for (text, want) in [
        ("0x40", 64),
        ("64.0", 64),
        ("1e2", 100),
        ("+7", 7),
        ("010", 8),
        // Upstream's YAML path: yaml.v2's float, marshalled by Go's encoding/json without an
        // exponent below 1e21, then `strconv.ParseInt`: integral floats up to 2^63 pass.
        ("1e16", 10_000_000_000_000_000),
        ("9.2e18", 9_200_000_000_000_000_000),
    ] {
        let (config, _) = ok(&format!("cidrLimit: {text}\n"), &V4);
        assert_eq!(config.cidr_limit, want, "{text}");
    }
    for bad in [
        "64.5",
        "'64'",
        "true",
        "[64]",
        "99999999999999999999",
        "9.3e18",
        ".inf",
    ] {
        let errs = errors(&format!("cidrLimit: {bad}\n"), &V4);
        assert_eq!(codes(&errs), [Code::WrongType], "{bad}");
    }
    let (config, _) = ok("cidrLimit: null\n", &V4);
    assert_eq!(config.cidr_limit, 64);
}

/// A file that takes upstream's JSON path (it starts with `{`) and writes `cidrLimit` with a
/// fraction or exponent: upstream refuses it, ipmasq applies it as YAML and says so.
#[test]
fn a_json_cidr_limit_with_a_fraction_is_applied_with_a_warning() {
    for text in ["{\"cidrLimit\": 64.0}", "{\"cidrLimit\": 1e2}"] {
        let (config, diags) = ok(text, &V4);
        assert!(config.cidr_limit == 64 || config.cidr_limit == 100);
        assert_eq!(codes(&diags), [Code::UpstreamRejects], "{text}");
    }
    // After a byte order mark, upstream reads it as YAML: no finding.
    let (config, diags) = ok("\u{feff}{\"cidrLimit\": 64.0}", &V4);
    assert_eq!((config.cidr_limit, diags.len()), (64, 0));
    let (_, diags) = ok("\u{feff}{nonMasqueradeCIDRs: [10.0.0.0/8]}", &V4);
    assert!(diags.is_empty(), "{diags:?}");
}

#[test]
fn resync_interval_is_a_go_duration() {
    for (text, secs) in [
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("2562047h", 2562047.0 * 3600.0),
    ] {
        let (config, _) = ok(&format!("resyncInterval: {text}\n"), &V4);
        assert_eq!(config.resync().as_secs_f64(), secs, "{text}");
    }
    for bad in ["1min", "1d", "' 1s'", "'1s '", "''"] {
        let errs = errors(&format!("resyncInterval: {bad}\n"), &V4);
        assert_eq!(codes(&errs), [Code::InvalidDuration], "{bad}");
        assert!(errs[0].message.starts_with("time: "), "{bad}");
    }
}

#[test]
fn resync_interval_must_be_a_string() {
    let errs = errors("resyncInterval: 60\n", &V4);
    assert_eq!(codes(&errs), [Code::WrongType]);
    assert_eq!(
        errs[0].message,
        "expected string value for unmarshal to field of type Duration, got \"60\""
    );
    assert_eq!(
        errs[0].hint.as_deref(),
        Some("add a unit: `resyncInterval: 60s`")
    );
    let errs = errors("resyncInterval:\n", &V4);
    assert!(errs[0].message.ends_with("got \"null\""));
}

#[test]
fn zero_or_negative_resync_is_an_error() {
    for bad in ["0", "0s", "-1s", "'-5m'"] {
        let errs = errors(&format!("resyncInterval: {bad}\n"), &V4);
        let want = if bad == "0" {
            Code::WrongType
        } else {
            Code::NonPositiveDuration
        };
        assert_eq!(codes(&errs), [want], "{bad}");
    }
}

#[test]
fn legacy_link_local_is_a_deprecated_alias() {
    let (config, diags) = ok("linkLocal: false\n", &V4);
    assert!(config.masq_link_local);
    assert_eq!(codes(&diags), [Code::DeprecatedLinkLocal]);
    assert_eq!(
        diags[0].hint.as_deref(),
        Some("write `masqLinkLocal: true` instead")
    );
    let (config, _) = ok("linkLocal: true\n", &V4);
    assert!(!config.masq_link_local);
    // Agreeing with masqLinkLocal is only a warning.
    let (config, diags) = ok("linkLocal: true\nmasqLinkLocal: false\n", &V4);
    assert!(!config.masq_link_local);
    assert_eq!(codes(&diags), [Code::DeprecatedLinkLocal]);
    // Contradicting it is an error.
    let errs = errors("linkLocal: true\nmasqLinkLocal: true\n", &V4);
    assert_eq!(codes(&errs), [Code::LinkLocalConflict]);
}

#[test]
fn overlaps_are_warned_about() {
    let (_, diags) = ok(
        "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 10.1.0.0/16\n  - 192.168.0.0/16\n  - 10.1.2.0/24\n",
        &V4,
    );
    assert_eq!(codes(&diags), [Code::CoveredCidr, Code::CoveredCidr]);
    assert_eq!(diags[0].location.unwrap().line, 3);
    assert!(diags[0].message.contains("covered by 10.0.0.0/8 (line 2)"));
    assert_eq!(diags[1].location.unwrap().line, 5);
}

#[test]
fn wrong_shapes_are_errors() {
    let errs = errors("nonMasqueradeCIDRs: 10.0.0.0/8\n", &V4);
    assert_eq!(codes(&errs), [Code::WrongType]);
    assert!(errs[0].hint.as_deref().unwrap().contains("[10.0.0.0/8]"));
    let errs = errors("nonMasqueradeCIDRs: [10]\n", &V4);
    assert_eq!(codes(&errs), [Code::WrongType]);
    let errs = errors("- 10.0.0.0/8\n", &V4);
    assert_eq!(codes(&errs), [Code::NotAMapping]);
    let errs = errors("just a string\n", &V4);
    assert_eq!(codes(&errs), [Code::NotAMapping]);
    let errs = errors("nonMasqueradeCIDRs: [~]\n", &V4);
    assert_eq!(codes(&errs), [Code::InvalidCidr]);
}

#[test]
fn yaml_syntax_errors_have_a_location() {
    let errs = errors(
        "nonMasqueradeCIDRs: [10.0.0.0/8\nmasqLinkLocal: true\n",
        &V4,
    );
    assert_eq!(codes(&errs), [Code::YamlSyntax]);
    assert!(errs[0].location.is_some());
    let errs = errors("a: b: c\n", &V4);
    assert_eq!(codes(&errs), [Code::YamlSyntax]);
}

#[test]
fn every_error_is_collected_not_just_the_first() {
    let errs = errors(
        "nonMasqueradeCIDRs: [10.1.2.3/8, bogus, 'fd00::/8']\nresyncInterval: 1d\n",
        &V4,
    );
    assert_eq!(
        codes(&errs),
        [
            Code::CidrNotAligned,
            Code::InvalidCidr,
            Code::Ipv6NotEnabled,
            Code::InvalidDuration
        ]
    );
    assert!(errs.iter().all(|d| d.severity == Severity::Error));
}

#[test]
fn aliases_and_anchors_work() {
    let (config, _) = ok(
        "x: &ranges [10.0.0.0/8, 172.16.0.0/12]\nnonMasqueradeCIDRs: *ranges\n",
        &V4,
    );
    assert_eq!(cidrs(&config), ["10.0.0.0/8", "172.16.0.0/12"]);
}

#[test]
fn effective_yaml_round_trips() {
    let (config, _) = ok(
        "nonMasqueradeCIDRs: [10.0.0.0/8]\ncidrLimit: 5\nmasqLinkLocal: true\nresyncInterval: 90s\n",
        &V4,
    );
    let yaml = config.to_yaml();
    assert_eq!(
        yaml,
        "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\ncidrLimit: 5\nmasqLinkLocal: true\nmasqLinkLocalIPv6: false\nresyncInterval: 1m30s\n"
    );
    let (again, diags) = ok(&yaml, &V4);
    assert_eq!(again, config);
    assert!(diags.is_empty());
}

#[test]
fn merge_keys_expand_as_yaml_v2_does() {
    let (config, diags) = ok(
        "base: &base\n  masqLinkLocal: true\n  cidrLimit: 5\n<<: *base\ncidrLimit: 7\n",
        &V4,
    );
    assert!(config.masq_link_local);
    assert_eq!(config.cidr_limit, 7, "a key after the merge overrides it");
    assert_eq!(
        codes(&diags),
        [Code::UnknownKey],
        "only `base` is unknown: {diags:?}"
    );
    // yaml.v2 applies merges in document order: a merge after a key overrides it.
    let (config, _) = ok("cidrLimit: 7\n<<: {cidrLimit: 5}\n", &V4);
    assert_eq!(config.cidr_limit, 5);
    // Of a list of merged maps, the earlier ones win.
    let (config, _) = ok(
        "<<: [{cidrLimit: 3}, {cidrLimit: 9, masqLinkLocal: yes}]\n",
        &V4,
    );
    assert_eq!(config.cidr_limit, 3);
    assert!(config.masq_link_local);
    let errs = errors("<<: 5\n", &V4);
    assert_eq!(codes(&errs), [Code::WrongType]);
    // A quoted "<<" is an ordinary (unknown) key.
    let (_, diags) = ok("'<<': {cidrLimit: 5}\n", &V4);
    assert_eq!(codes(&diags), [Code::UnknownKey]);
}

#[test]
fn resync_intervals_below_the_floor_are_raised_with_a_warning() {
    let (config, diags) = ok("resyncInterval: 1ns\n", &V4);
    assert_eq!(config.resync_interval, crate::config::MIN_RESYNC_INTERVAL);
    assert_eq!(diags.len(), 1);
    assert_eq!(diags[0].code, Code::ResyncBelowFloor);
    assert!(
        diags[0].message.contains("below the floor of 100ms"),
        "{}",
        diags[0].message
    );
    // Upstream's shortest documented case is untouched.
    let (config, diags) = ok("resyncInterval: 500ms\n", &V4);
    assert_eq!(config.resync_interval.to_string(), "500ms");
    assert!(diags.is_empty());
}

#[test]
fn extension_keys_are_read_and_noted_as_not_upstreams() {
    let text = "nonMasqueradeCIDRs: [10.0.0.0/8]\nforceMasqueradeCIDRs: [10.8.0.0/16, 10.8.0.0/16]\nmasqueradeSourceCIDRs: [10.244.0.0/16]\n";
    let (config, diags) = ok(text, &V4);
    assert_eq!(
        config.force_masquerade_cidrs,
        ["10.8.0.0/16".parse::<ipnet::IpNet>().unwrap()]
    );
    assert_eq!(config.masquerade_source_cidrs.len(), 1);
    let infos: Vec<&Diagnostic> = diags
        .iter()
        .filter(|d| d.severity == Severity::Info)
        .collect();
    assert_eq!(
        codes(&infos.iter().map(|d| (*d).clone()).collect::<Vec<_>>()),
        [Code::IpmasqExtension, Code::IpmasqExtension]
    );
    assert!(infos[0]
        .message
        .contains("not understood by upstream ip-masq-agent"));
    assert_eq!(config.place(ListName::Force, 0).location.unwrap().line, 2);
    // The repeat is reported as for the other list.
    assert!(codes(&diags).contains(&Code::DuplicateCidr));
    // Case-insensitive like upstream's keys.
    let (config, _) = ok("forcemasqueradecidrs: [10.8.0.0/16]\n", &V4);
    assert_eq!(config.force_masquerade_cidrs.len(), 1);
}

#[test]
fn a_cidr_both_forced_and_kept_is_an_error_naming_both_places() {
    let errs = errors(
        "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 10.8.0.0/16\nforceMasqueradeCIDRs: [10.8.0.0/16]\n",
        &V4,
    );
    assert_eq!(codes(&errs), [Code::ForcedAndKept]);
    assert_eq!(errs[0].location.unwrap().line, 4);
    assert!(errs[0].message.contains("line 3"), "{}", errs[0].message);
}

#[test]
fn a_forced_cidr_outside_every_kept_range_is_a_warning() {
    let (_, diags) = ok(
        "forceMasqueradeCIDRs: [8.8.8.0/24, 10.1.0.0/16, 169.254.169.254/32]\n",
        &V4,
    );
    let warned: Vec<&Diagnostic> = diags
        .iter()
        .filter(|d| d.code == Code::ForcedWithoutEffect)
        .collect();
    assert_eq!(warned.len(), 1, "{diags:#?}");
    assert!(warned[0].message.starts_with("8.8.8.0/24"));
    // With link-local masqueraded, forcing inside it has no effect either.
    let (_, diags) = ok(
        "masqLinkLocal: true\nforceMasqueradeCIDRs: [169.254.169.254/32]\n",
        &V4,
    );
    assert!(codes(&diags).contains(&Code::ForcedWithoutEffect));
}

#[test]
fn source_ranges_warn_when_empty_or_missing_a_family() {
    let (config, diags) = ok("masqueradeSourceCIDRs: []\n", &V4);
    assert!(config.masquerade_source_cidrs.is_empty());
    assert!(codes(&diags).contains(&Code::EmptySourceList));
    let (_, diags) = ok("masqueradeSourceCIDRs: [10.244.0.0/16]\n", &V6);
    assert!(codes(&diags).contains(&Code::SourceFamilyUnscoped));
    let errs = errors("masqueradeSourceCIDRs: [fd00::/8]\n", &V4);
    assert_eq!(codes(&errs), [Code::Ipv6NotEnabled]);
    let errs = errors("forceMasqueradeCIDRs: 10.8.0.0/16\n", &V4);
    assert_eq!(codes(&errs), [Code::WrongType]);
}

#[test]
fn forced_cidrs_count_against_the_limit() {
    let errs = errors(
        "cidrLimit: 2\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\nforceMasqueradeCIDRs: [10.8.0.0/16]\n",
        &V4,
    );
    assert_eq!(codes(&errs), [Code::CidrLimitExceeded]);
    assert!(errs[0].message.contains("1 in forceMasqueradeCIDRs"));
}

/// `enableIPv6` in the file turns IPv6 on (its CIDRs are accepted) unless the flag was
/// given, which wins with a warning when they differ; the effective YAML carries it only
/// when on, so a file without it yields upstream's output.
#[test]
fn enable_ipv6_in_the_file_unless_the_flag_was_given() {
    let text = "enableIPv6: true\nnonMasqueradeCIDRs: [10.0.0.0/8, fd00::/8]\n";
    let (config, diags) = ok(text, &V4);
    assert!(config.enable_ipv6);
    assert_eq!(config.non_masquerade_cidrs.len(), 2);
    assert!(
        diags.iter().any(|d| d.code == Code::IpmasqExtension),
        "{diags:?}"
    );
    let explicit_off = Options {
        enable_ipv6: false,
        enable_ipv6_given: true,
        ..V4
    };
    let errs = errors(text, &explicit_off);
    assert_eq!(codes(&errs), [Code::Ipv6NotEnabled]);
    let checked = check_text(text, &explicit_off);
    assert!(checked
        .diagnostics()
        .iter()
        .any(|d| d.code == Code::Ipv6FlagOverridesFile && d.location.map(|l| l.line) == Some(1)));
    // The flag given as true and the file false: on, with the warning.
    let (config, diags) = ok("enableIPv6: false\n", &V6);
    assert!(config.enable_ipv6);
    assert!(diags.iter().any(|d| d.code == Code::Ipv6FlagOverridesFile));
    // Not a boolean: an error, and the flag's value stands.
    assert_eq!(
        codes(&errors("enableIPv6: \"yes\"\n", &V4)),
        [Code::WrongType]
    );
    let (config, _) = ok("nonMasqueradeCIDRs: [10.0.0.0/8]\n", &V4);
    assert!(!config.enable_ipv6);
    let yaml = serde_json::to_string(&config).unwrap();
    assert!(!yaml.contains("enableIPv6"), "{yaml}");
}

#[test]
fn egress_keys_take_addresses_prefixes_and_interface_patterns() {
    let (config, diags) = ok(
        "outputAddress: 10.0.0.0/24\noutputAddressIPv6: \"fd00::5\"\noutputInterfaces: [eth+, \"ens*\", eth0, bond0]\n",
        &V6,
    );
    assert_eq!(config.output_address.unwrap().to_string(), "10.0.0.0/24");
    assert_eq!(config.output_address_ipv6.unwrap().to_string(), "fd00::5");
    let patterns: Vec<String> = config
        .output_interfaces
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        patterns,
        ["bond0", "ens+", "eth+"],
        "sorted; eth0 is inside eth+"
    );
    assert!(diags
        .iter()
        .any(|d| d.code == Code::CoveredInterface && d.location.unwrap().column == 34));
    assert_eq!(
        diags
            .iter()
            .filter(|d| d.code == Code::IpmasqExtension)
            .count(),
        3
    );
    let yaml = config.to_yaml();
    assert!(yaml.contains("outputAddress: 10.0.0.0/24"), "{yaml}");
    assert!(yaml.contains("- eth+"), "{yaml}");
}

#[test]
fn egress_keys_refuse_what_cannot_be_a_source_or_an_interface() {
    let cases: [(&str, Code, &str); 6] = [
        (
            "outputAddress: 10.0.0.5/24\n",
            Code::InvalidOutputAddress,
            "`10.0.0.5`",
        ),
        (
            "outputAddress: \"fd00::5\"\n",
            Code::InvalidOutputAddress,
            "outputAddressIPv6",
        ),
        (
            "outputAddress: 127.0.0.1\n",
            Code::InvalidOutputAddress,
            "loopback",
        ),
        ("outputAddress: [10.0.0.5]\n", Code::WrongType, "e.g."),
        (
            "outputInterfaces: [\"e th0\"]\n",
            Code::InvalidInterface,
            "a wildcard goes only",
        ),
        ("outputInterfaces: eth0\n", Code::WrongType, "[eth0]"),
    ];
    for (text, code, hint) in cases {
        let found = errors(text, &V6);
        assert_eq!(found[0].code, code, "{text}");
        let said = format!(
            "{} {}",
            found[0].message,
            found[0].hint.clone().unwrap_or_default()
        );
        assert!(said.contains(hint), "{text}: {said}");
    }
    let (_, diags) = ok(
        "outputAddressIPv6: \"fd00::5\"\noutputInterfaces: []\n",
        &V4,
    );
    let codes: Vec<Code> = diags.iter().map(|d| d.code).collect();
    assert!(codes.contains(&Code::OutputAddressUnused), "{codes:?}");
    assert!(codes.contains(&Code::EmptyInterfaceList), "{codes:?}");
}

/// A null list entry is an error that says what upstream makes of it: v1 decodes the list
/// over its defaults, so a null where a default stands keeps it; past the defaults, and in
/// every ip-masq-agent-v2 file, it is "", which upstream rejects.
#[test]
fn a_null_list_entry_says_what_upstream_reads() {
    let errs = errors("nonMasqueradeCIDRs: [10.0.0.0/8, ~]\n", &V4);
    assert_eq!(codes(&errs), [Code::InvalidCidr]);
    assert!(
        errs[0]
            .message
            .contains("entry 2 of nonMasqueradeCIDRs is null")
            && errs[0].message.contains("keeps its default 172.16.0.0/12"),
        "{}",
        errs[0].message
    );
    assert_eq!(errs[0].location.map(|l| l.column), Some(34));
    let reserved = Options {
        nomasq_all_reserved_ranges: true,
        ..V4
    };
    let errs = errors("nonMasqueradeCIDRs: [a, b, c, ~]\n", &reserved);
    let null = errs.iter().find(|d| d.message.contains("is null")).unwrap();
    assert!(
        null.message.contains("keeps its default 100.64.0.0/10"),
        "{}",
        null.message
    );
    for (text, options) in [
        (
            "nonMasqueradeCIDRs: [10.0.0.0/8, 10.1.0.0/16, 10.2.0.0/16, null]\n",
            V4,
        ),
        (
            "nonMasqueradeCIDRs: [10.0.0.0/8, ~]\n",
            Options {
                merging: true,
                ..V4
            },
        ),
    ] {
        let errs = errors(text, &options);
        assert_eq!(codes(&errs), [Code::InvalidCidr]);
        assert!(
            errs[0].message.contains("rejects the file"),
            "{}",
            errs[0].message
        );
    }
    let errs = errors("forceMasqueradeCIDRs: [~]\n", &V4);
    assert!(errs
        .iter()
        .any(|d| d.message.contains("does not read this key")));
}

#[test]
fn the_pod_share_keys_are_read_and_bounded() {
    use crate::config::pod_share::NewConnectionRate;
    let (config, _) = ok(
        "podConnectionLimit: 512\npodNewConnectionRate: \"200/s\"\npodNewConnectionBurst: 20\npodNewConnectionRatePerDestination: true\n",
        &V4,
    );
    assert_eq!(config.pod_share.connection_limit, Some(512));
    assert_eq!(
        config.pod_share.new_connection_rate,
        Some(NewConnectionRate {
            per_second: 200,
            burst: 20,
            per_destination: true
        })
    );
    assert_eq!(
        config.provenance.pod_share.as_ref().unwrap().to_string(),
        "line 1, column 1"
    );
    // Written back as given (the burst always).
    let yaml = config.to_yaml();
    assert!(yaml.contains("podConnectionLimit: 512"), "{yaml}");
    assert!(yaml.contains("podNewConnectionRate: 200/s"), "{yaml}");
    assert!(
        yaml.contains("podNewConnectionRatePerDestination: true"),
        "{yaml}"
    );
    let (plain, _) = ok("nonMasqueradeCIDRs: [10.0.0.0/8]\n", &V4);
    assert!(!plain.pod_share.is_limited());
    assert!(!plain.to_yaml().contains("pod"), "no share, no key");
    for (text, code) in [
        ("podConnectionLimit: 0\n", Code::PodShareOutOfRange),
        ("podConnectionLimit: 1000001\n", Code::PodShareOutOfRange),
        ("podConnectionLimit: many\n", Code::WrongType),
        ("podNewConnectionRate: 200\n", Code::WrongType),
        ("podNewConnectionRate: 200/m\n", Code::WrongType),
        ("podNewConnectionRate: 0/s\n", Code::PodShareOutOfRange),
        ("podNewConnectionRate: 100001/s\n", Code::PodShareOutOfRange),
        (
            "podNewConnectionRate: 5/s\npodNewConnectionBurst: 0\n",
            Code::PodShareOutOfRange,
        ),
        ("podNewConnectionBurst: 10\n", Code::PodShareWithoutRate),
        (
            "podNewConnectionRate: null\npodNewConnectionBurst: 10\n",
            Code::PodShareWithoutRate,
        ),
        (
            "podNewConnectionRatePerDestination: true\n",
            Code::PodShareWithoutRate,
        ),
    ] {
        let errs = errors(text, &V4);
        assert_eq!(codes(&errs), [code], "{text:?}: {errs:?}");
        assert!(errs[0].location.is_some(), "{text:?}: located");
    }
}
