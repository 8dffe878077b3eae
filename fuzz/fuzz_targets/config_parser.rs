//! Fuzzes the config reader end to end: YAML events → located tree → checked Config, the
//! ConfigMap path, and the Go-duration and CIDR parsers. Nothing may panic, and a config that
//! checks as valid must print an effective config that checks as valid and equal.
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
        },
    ] {
        let checked = check_text(text, &options);
        if let Some(config) = &checked.config {
            let again = check_text(&config.to_yaml(), &options);
            assert_eq!(again.config.as_ref(), Some(config), "effective config must round-trip");
        }
        if let Ok(stream) = yaml::parse_stream(text) {
            let _ = manifest::check_manifest(text, &stream.documents, &options);
        }
    }
    let _ = parse_go_duration(text);
    let _ = ipmasq::config::cidr::parse_cidr(text);
});
