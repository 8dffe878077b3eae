//! Fuzzes the config reader end to end: YAML events → located tree → checked Config, the
//! ConfigMap path (node pools and EgressNATPolicy objects too), and the Go-duration, CIDR and
//! label-selector parsers. Nothing may panic, and a config that
//! checks as valid must print an effective config that checks as valid and equal. A config
//! exists exactly when no diagnostic is an error, for files and ConfigMaps alike.
#![no_main]

use ipmasq::config::{check_text, manifest, parse_go_duration, yaml, Options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for options in [
        Options::default(),
        Options {
            enable_ipv6: true,
            nomasq_all_reserved_ranges: true,
            ..Options::default()
        },
    ] {
        let checked = check_text(text, &options);
        assert_eq!(
            checked.config().is_some(),
            checked.errors().next().is_none(),
            "config present <=> no error"
        );
        if let Some(config) = checked.config() {
            let again = check_text(&config.to_yaml(), &options);
            assert_eq!(again.config(), Some(config), "effective config must round-trip");
        }
        if let Ok(stream) = yaml::parse_stream(text, manifest::MANIFEST_OR_CONFIG) {
            if let Ok(results) = manifest::check_manifest(text, &stream, &options) {
                for result in results {
                    assert_eq!(
                        result.checked.config().is_some(),
                        result.checked.errors().next().is_none(),
                        "config present <=> no error (ConfigMap)"
                    );
                }
            }
        }
    }
    let _ = parse_go_duration(text);
    let _ = ipmasq::config::cidr::parse_cidr(text);
    if let Ok(selector) = ipmasq::config::selector::Selector::parse(text) {
        let again = ipmasq::config::selector::Selector::parse(&selector.to_string());
        assert_eq!(again.as_ref(), Ok(&selector), "a selector's canonical form must round-trip");
    }
});
