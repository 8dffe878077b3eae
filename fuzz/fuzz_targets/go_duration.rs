//! Fuzzes the Go-duration port on its own: any text either parses to a duration whose Go
//! spelling parses back to the same value, or is an error; nothing panics (debug assertions
//! and overflow checks are on in fuzz builds).
#![no_main]

use ipmasq::config::parse_go_duration;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(duration) = parse_go_duration(text) {
        let spelled = duration.to_string();
        let again = parse_go_duration(&spelled).expect("Go's spelling of a duration parses");
        assert_eq!(again, duration, "{text:?} -> {spelled:?}");
    }
});
