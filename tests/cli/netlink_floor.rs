//! The ground floor holds: outside `src/netlink/`, no code opens a netlink socket (or the raw
//! socket x_tables is read over), frames netlink messages or walks their attributes by hand,
//! and every `unsafe` is listed here with its reason, so a new one is a decision and not an
//! accident.

use super::code_shape::{code_of, rust_files};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What opening a socket looks like: the crate under the layer, or a raw `socket(2)`.
const OPENS_A_SOCKET: &[&str] = &["netlink_sys", "Socket::new(", "libc::socket(", "AF_NETLINK"];

/// What framing by hand looks like: netlink's four-byte alignment spelled out (`(len + 3) &
/// !3`, `next_multiple_of(4)`) or an attribute's type masked by hand (`NLA_TYPE_MASK`).
const FRAMES_BY_HAND: &[&str] = &["& !3", "next_multiple_of(4)", "0x3fff", "0x3FFF"];

/// Every file outside `src/netlink/` allowed `unsafe`, how many times, and why.
const UNSAFE_ELSEWHERE: &[(&str, usize, &str)] = &[
    (
        "src/agent/logging.rs",
        2,
        "fstat(2) of stderr (into a zeroed `stat`), to tell whether it is the journal",
    ),
    (
        "src/agent/state.rs",
        3,
        "getrandom(2) for the instance token; geteuid(2) twice, for the owner checks of the state directory",
    ),
    (
        "src/agent/watch.rs",
        1,
        "tokio's AsyncFd::register_with_interest of the inotify descriptor it owns",
    ),
    (
        "src/backend/runner.rs",
        1,
        "kill(2) of the firewall tools this process started",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file of `src/` outside `src/netlink/` with its code lines (comments and literals out).
fn code_outside_the_floor() -> Vec<(String, Vec<(usize, String)>)> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(root())
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&path).expect("read a source file");
            (relative, code_lines(&text))
        })
        .filter(|(relative, _)| !relative.starts_with("src/netlink/"))
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

/// The differences between the `unsafe` found and the list: each as a sentence.
fn unlisted_unsafe(found: &BTreeMap<String, usize>) -> Vec<String> {
    let listed: BTreeMap<String, usize> = UNSAFE_ELSEWHERE
        .iter()
        .map(|(file, count, _)| (file.to_string(), *count))
        .collect();
    let mut wrong = Vec::new();
    for (file, count) in found {
        match listed.get(file) {
            Some(allowed) if allowed == count => {}
            Some(allowed) => wrong.push(format!("{file}: {count} unsafe, {allowed} listed")),
            None => wrong.push(format!("{file}: {count} unsafe, none listed")),
        }
    }
    for (file, allowed) in &listed {
        if !found.contains_key(file) {
            wrong.push(format!("{file}: listed with {allowed} unsafe, has none"));
        }
    }
    wrong
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
fn every_unsafe_outside_the_ground_floor_is_listed_with_its_reason() {
    assert!(UNSAFE_ELSEWHERE
        .iter()
        .all(|(_, count, why)| *count > 0 && !why.is_empty()));
    let wrong = unlisted_unsafe(&unsafe_counts(&code_outside_the_floor()));
    assert!(
        wrong.is_empty(),
        "unsafe outside src/netlink/ that UNSAFE_ELSEWHERE does not list as it is:\n{}",
        wrong.join("\n")
    );
}

/// The scans find what they look for: a socket, a hand walk, an unlisted `unsafe` (and one
/// listed that is gone), and not the same words in a comment or a string.
#[test]
fn the_scans_find_a_socket_a_hand_walk_and_an_unlisted_unsafe() {
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
    let wrong = unlisted_unsafe(&counts);
    assert!(wrong.contains(&"src/new.rs: 1 unsafe, none listed".to_string()));
    assert!(wrong.contains(&"src/backend/runner.rs: listed with 1 unsafe, has none".to_string()));
}
