//! `who` over a log written here: the exit status (0 found, 1 none, 2 no log), `-o json`'s
//! shape, the time forms `--at` takes, and the help that teaches them.

use crate::util::{binary, ipmasq, ipmasq_peak_rss, run_program, Scratch};

const NODE: &str = "203.0.113.1:40002";

fn record(time: &str, event: &str, src: &str, dst: &str) -> String {
    format!(
        "{{\"time\":\"2026-11-26T{time}Z\",\"event\":\"{event}\",\"proto\":\"tcp\",\"src\":\"{src}\",\"translated\":\"{NODE}\",\"dst\":\"{dst}\"}}\n"
    )
}

/// A live file and one rotated file: a flow 12:03:01–12:03:09 from 192.168.1.5, across both.
fn log(dir: &Scratch) -> String {
    dir.write(
        "snat.log.1",
        &record(
            "12:03:01.000000",
            "new",
            "192.168.1.5:40002",
            "198.51.100.9:443",
        ),
    );
    dir.write(
        "snat.log",
        &[
            record(
                "12:03:09.000000",
                "end",
                "192.168.1.5:40002",
                "198.51.100.9:443",
            ),
            format!("broken \"{NODE}\"\n"),
        ]
        .concat(),
    )
    .display()
    .to_string()
}

#[test]
fn a_flow_alive_at_the_time_is_found_and_exits_0() {
    let dir = Scratch::new("who-found");
    let log = log(&dir);
    for at in [
        "2026-11-26T12:03:04Z",
        "2026-11-26 12:03:04",
        "26/Nov/2026:13:03:04 +0100",
    ] {
        let run = ipmasq(&["who", NODE, "--at", at, "--log", &log]);
        assert_eq!(run.code, 0, "{at}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains("192.168.1.5:40002"), "{}", run.stdout);
        assert!(run.stdout.contains("198.51.100.9:443"), "{}", run.stdout);
        assert!(
            run.stderr.contains("skipped 1 unreadable line"),
            "said once: {}",
            run.stderr
        );
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    }
}

#[test]
fn no_flow_at_the_time_exits_1_and_says_what_the_log_covers() {
    let dir = Scratch::new("who-none");
    let log = log(&dir);
    let run = ipmasq(&["who", NODE, "--at", "2026-11-26T12:04:00Z", "--log", &log]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("no flow through 203.0.113.1:40002"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("2026-11-26T12:03:01.000000Z to 2026-11-26T12:03:09.000000Z"),
        "{}",
        run.stdout
    );
    let other_port = ipmasq(&["who", "203.0.113.1:4000", "--log", &log]);
    assert_eq!(other_port.code, 1, "{}", other_port.stdout);
}

#[test]
fn a_missing_log_or_a_bad_time_exits_2() {
    let dir = Scratch::new("who-missing");
    let missing = dir.path.join("snat.log").display().to_string();
    let run = ipmasq(&["who", NODE, "--log", &missing]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("--snat-log"), "{}", run.stderr);
    let log = log(&dir);
    let run = ipmasq(&["who", NODE, "--at", "yesterday", "--log", &log]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("RFC 3339"), "{}", run.stderr);
    let run = ipmasq(&["who", "203.0.113.1", "--log", &log]);
    assert_eq!(run.code, 2, "a port is needed: {}", run.stderr);
}

#[test]
fn a_fifo_as_the_log_is_refused_at_once_not_waited_on() {
    let dir = Scratch::new("who-fifo");
    let fifo = dir.path.join("snat.log");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    // No writer ever opens it: a `who` that opened it would wait until `timeout` kills it
    // (exit 124).
    let ipmasq = binary().display().to_string();
    let fifo = fifo.display().to_string();
    let run = run_program(
        std::path::Path::new("timeout"),
        &["10", &ipmasq, "who", NODE, "--log", &fifo],
        None,
    );
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("is a FIFO, not a log file") && run.stderr.contains("--log -"),
        "{}",
        run.stderr
    );
}

#[test]
fn json_names_the_flow_its_times_and_the_files_read() {
    let dir = Scratch::new("who-json");
    let log = log(&dir);
    let run = ipmasq(&[
        "who",
        NODE,
        "--at",
        "2026-11-26T12:03:04Z",
        "--log",
        &log,
        "-o",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).expect(&run.stdout);
    assert_eq!(doc["address"], NODE);
    assert_eq!(doc["at"], "2026-11-26T12:03:04Z");
    assert_eq!(doc["tolerance"], "1s");
    assert_eq!(doc["skippedLines"], 1);
    assert_eq!(doc["files"][0], format!("{log}.1"), "oldest first");
    assert_eq!(doc["files"][1], log);
    let flow = &doc["flows"][0];
    assert_eq!(flow["proto"], "tcp");
    assert_eq!(flow["src"], "192.168.1.5:40002");
    assert_eq!(flow["translated"], NODE);
    assert_eq!(flow["dst"], "198.51.100.9:443");
    assert_eq!(flow["start"], "2026-11-26T12:03:01.000000Z");
    assert_eq!(flow["end"], "2026-11-26T12:03:09.000000Z");
    assert_eq!(flow["endInferred"], false);
    assert_eq!(doc["flows"].as_array().map(Vec::len), Some(1));
}

#[test]
fn help_teaches_the_flow_rules_the_time_forms_and_the_exit_codes() {
    let run = ipmasq(&["who", "--help"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let help = run.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "--at",
        "--tolerance",
        "[default: 1s]",
        "--log",
        "[default: /var/log/ipmasq/snat.log]",
        "started before the log",
        "marked inferred",
        "26/Nov/2026:12:03:04 +0000",
        "0 at least one flow answers",
        "1 no flow through ADDRESS:PORT",
        "2 usage error; no log at --log",
        "privacy",
    ] {
        assert!(help.contains(needle), "{needle:?} missing:\n{}", run.stdout);
    }
}

/// `--log -`: what an agent run with `--snat-log -` printed, piped in (a log collector's copy).
#[test]
fn the_log_can_come_on_standard_input() {
    let piped = [
        record(
            "12:03:01.000000",
            "new",
            "192.168.1.5:40002",
            "198.51.100.9:443",
        ),
        record(
            "12:03:09.000000",
            "end",
            "192.168.1.5:40002",
            "198.51.100.9:443",
        ),
    ]
    .concat();
    let run = run_program(
        &binary(),
        &[
            "who",
            NODE,
            "--at",
            "2026-11-26T12:03:04Z",
            "--log",
            "-",
            "-o",
            "json",
        ],
        Some(&piped),
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).expect(&run.stdout);
    assert_eq!(doc["files"], serde_json::json!(["-"]));
    assert_eq!(doc["flows"][0]["src"], "192.168.1.5:40002");
}

/// Memory does not follow the log: a 48 MiB log with a 24 MiB line that names the address and
/// no newline for most of it costs about what a tiny log does (a chunk, a line, the flows).
#[test]
fn memory_stays_bounded_whatever_the_log_holds() {
    let dir = Scratch::new("who-bounded");
    let tiny = dir.write(
        "tiny.log",
        &record(
            "12:00:00.000000",
            "new",
            "192.168.1.5:1",
            "198.51.100.9:443",
        ),
    );
    let (run, tiny_kib) = ipmasq_peak_rss(&["who", NODE, "--log", tiny.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);

    let mut big = String::with_capacity(50 << 20);
    big.push_str(&format!("{{\"translated\":\"{NODE}\",\"pad\":\""));
    big.push_str(&"x".repeat(24 << 20));
    big.push_str("\"}\n");
    let line = record(
        "12:00:00.000000",
        "new",
        "192.168.1.5:1",
        "198.51.100.9:443",
    );
    while big.len() < 48 << 20 {
        big.push_str(&line);
    }
    let log = dir.write("big.log", &big);
    drop(big);
    let (run, big_kib) = ipmasq_peak_rss(&["who", NODE, "--log", log.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("skipped 1 unreadable line"),
        "{}",
        run.stderr
    );
    assert!(
        big_kib < tiny_kib + 8 * 1024,
        "who held {big_kib} KiB for a 48 MiB log, {tiny_kib} KiB for a tiny one"
    );
}

/// `--pod`: an API-mode log's lines of one pod, each translated address, narrowed by
/// `--since`/`--until`; a pod and an address at once, neither, a pod that is no
/// NAMESPACE/NAME, and a span that ends before it starts are usage errors (exit 2).
#[test]
fn a_pods_flows_are_found_by_name_and_its_arguments_are_checked() {
    let dir = Scratch::new("who-pod");
    let line = |time: &str, event: &str, port: u16, pod: &str| {
        format!(
            "{{\"time\":\"2026-11-26T12:00:{time}Z\",\"event\":\"{event}\",\"proto\":\"udp\",\"src\":\"192.168.1.5:{port}\",\"translated\":\"203.0.113.1:{port}\",\"dst\":\"198.51.100.9:53\",\"pod\":\"{pod}\",\"uid\":\"u-{pod}\",\"node\":\"node-a\"}}\n"
        )
    };
    let log = dir
        .write(
            "snat.log",
            &[
                line("01.000000", "new", 5001, "web/api-0"),
                line("02.000000", "new", 5002, "web/api-0"),
                line("03.000000", "new", 5003, "web/api-00"),
                line("04.000000", "end", 5001, "web/api-0"),
            ]
            .concat(),
        )
        .display()
        .to_string();
    let log_flag = format!("--log={log}");
    let found = ipmasq(&["who", "--pod", "web/api-0", &log_flag, "-o", "json"]);
    assert_eq!(found.code, 0, "{} {}", found.stdout, found.stderr);
    let json: serde_json::Value = serde_json::from_str(&found.stdout).unwrap();
    let translated: Vec<&str> = json["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["translated"].as_str().unwrap())
        .collect();
    assert_eq!(
        translated,
        ["203.0.113.1:5001", "203.0.113.1:5002"],
        "{json}"
    );
    assert_eq!(json["pod"], "web/api-0");
    assert!(json["address"].is_null(), "{json}");
    assert_eq!(json["flows"][0]["uid"], "u-web/api-0");
    let later = ipmasq(&[
        "who",
        "--pod",
        "web/api-0",
        "--since",
        "2026-11-26T12:00:04.5Z",
        &log_flag,
    ]);
    assert_eq!(later.code, 0, "{}", later.stderr);
    assert!(
        later.stdout.contains("203.0.113.1:5002") && !later.stdout.contains(":5001"),
        "{}",
        later.stdout
    );
    assert!(later.stdout.contains("TRANSLATED"), "{}", later.stdout);
    // By address, the log's pod is shown.
    let by_address = ipmasq(&["who", "203.0.113.1:5003", &log_flag]);
    assert_eq!(by_address.code, 0, "{}", by_address.stderr);
    assert!(
        by_address.stdout.contains("web/api-00"),
        "{}",
        by_address.stdout
    );
    for args in [
        vec!["who", "--pod", "web/api-0", NODE],
        vec!["who"],
        vec!["who", "--pod", "api-0"],
        vec!["who", "--pod", "Web/API"],
        vec![
            "who",
            "--pod",
            "web/api-0",
            "--since",
            "2026-11-26T13:00:00Z",
            "--until",
            "2026-11-26T12:00:00Z",
        ],
        vec![
            "who",
            NODE,
            "--at",
            "2026-11-26T12:00:00Z",
            "--since",
            "2026-11-26T12:00:00Z",
        ],
    ] {
        let mut args = args;
        args.push(&log_flag);
        let run = ipmasq(&args);
        assert_eq!(run.code, 2, "{args:?}: {} {}", run.stdout, run.stderr);
        assert!(!run.stderr.is_empty(), "{args:?}");
    }
}
