//! The ground floor holds: outside `src/netlink/`, no code opens a netlink socket (or the raw
//! socket x_tables is read over), frames netlink messages or walks their attributes by hand,
//! or holds an `unsafe` (the compiler says so too: the crate denies `unsafe_code` everywhere
//! but `src/netlink/`).

use super::code_shape::{code_of, sources};
use std::collections::BTreeMap;

/// What opening a socket looks like: the crate under the layer, or a raw `socket(2)`.
const OPENS_A_SOCKET: &[&str] = &["netlink_sys", "Socket::new(", "libc::socket(", "AF_NETLINK"];

/// What framing by hand looks like: netlink's four-byte alignment spelled out (`(len + 3) &
/// !3`, `next_multiple_of(4)`) or an attribute's type masked by hand (`NLA_TYPE_MASK`).
const FRAMES_BY_HAND: &[&str] = &["& !3", "next_multiple_of(4)", "0x3fff", "0x3FFF"];

/// Every file of `src/` outside `src/netlink/` with its code lines (comments and literals out).
fn code_outside_the_floor() -> Vec<(String, Vec<(usize, String)>)> {
    sources()
        .into_iter()
        .filter(|(relative, _)| !relative.starts_with("src/netlink/"))
        .map(|(relative, text)| {
            let lines = code_lines(&text);
            (relative, lines)
        })
        .collect()
}

/// The code of each line, numbered from 1: `//` comments and string literals removed.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, code_of(line)))
        .collect()
}

/// `file:line: code` for every line whose code holds one of `patterns`.
fn lines_with(files: &[(String, Vec<(usize, String)>)], patterns: &[&str]) -> Vec<String> {
    files
        .iter()
        .flat_map(|(file, lines)| {
            lines
                .iter()
                .filter(|(_, code)| patterns.iter().any(|p| code.contains(p)))
                .map(move |(n, code)| format!("{file}:{n}: {}", code.trim()))
        })
        .collect()
}

/// How many times `unsafe` stands as a word in the code of each file that has it.
fn unsafe_counts(files: &[(String, Vec<(usize, String)>)]) -> BTreeMap<String, usize> {
    files
        .iter()
        .filter_map(|(file, lines)| {
            let count: usize = lines
                .iter()
                .map(|(_, code)| {
                    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .filter(|word| *word == "unsafe")
                        .count()
                })
                .sum();
            (count > 0).then(|| (file.clone(), count))
        })
        .collect()
}

#[test]
fn no_netlink_socket_is_opened_outside_the_ground_floor() {
    let files = code_outside_the_floor();
    assert!(files.len() > 50, "the scan found {} files", files.len());
    let found = lines_with(&files, OPENS_A_SOCKET);
    assert!(
        found.is_empty(),
        "sockets opened outside src/netlink/ (use `netlink::Socket`, or add the call there):\n{}",
        found.join("\n")
    );
}

#[test]
fn nothing_outside_the_ground_floor_frames_netlink_by_hand() {
    let found = lines_with(&code_outside_the_floor(), FRAMES_BY_HAND);
    assert!(
        found.is_empty(),
        "netlink framing by hand outside src/netlink/ (use `netlink::framing`):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_unsafe_outside_the_ground_floor() {
    let found = unsafe_counts(&code_outside_the_floor());
    assert!(
        found.is_empty(),
        "unsafe outside src/netlink/ (use a safe wrapper: std, or rustix for the system calls std \
         lacks; or put the call in src/netlink/ with its SAFETY reason): {found:?}"
    );
}

/// The scans find what they look for: a socket, a hand walk, an `unsafe`, and not the same
/// words in a comment or a string.
#[test]
fn the_scans_find_a_socket_a_hand_walk_and_an_unsafe() {
    let text = "use netlink_sys::Socket;\n\
                let s = Socket::new(NETLINK_ROUTE)?;\n\
                data = data.get((len + 3) & !3..)?;\n\
                // unsafe { libc::socket(..) } in a comment, & !3\n\
                let said = \"unsafe & !3 Socket::new(\";\n\
                let fd = unsafe { libc::socket(2, 3, 255) };\n";
    let files = vec![("src/new.rs".to_string(), code_lines(text))];
    let sockets = lines_with(&files, OPENS_A_SOCKET);
    assert_eq!(
        sockets.iter().map(|l| &l[..12]).collect::<Vec<_>>(),
        ["src/new.rs:1", "src/new.rs:2", "src/new.rs:6"]
    );
    assert_eq!(lines_with(&files, FRAMES_BY_HAND).len(), 1);
    let counts = unsafe_counts(&files);
    assert_eq!(counts.get("src/new.rs"), Some(&1));
}
