//! `show` fits the terminal: at `COLUMNS=80` every line of its text report is at most 80
//! columns (a verdict against a long config path, its differences, a copy in another iptables
//! variant, rules not installed, a rejected config), with all its text still there; without
//! `COLUMNS` (piped) the lines fit 80 columns too, and a wide `COLUMNS` keeps them whole.

use super::netns::Netns;
use crate::util::{binary, Scratch};
use std::process::Stdio;

const WIDTH: usize = 80;

/// `ipmasq ARGS` in `ns` with `COLUMNS` set (or removed): (exit code, stdout).
pub(super) fn ipmasq_at(ns: &Netns, columns: Option<&str>, args: &[&str]) -> (i32, String) {
    let mut command = ns.command(&binary(), args);
    match columns {
        Some(columns) => command.env("COLUMNS", columns),
        None => command.env_remove("COLUMNS"),
    };
    let out = command.stdin(Stdio::null()).output().expect("run ipmasq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs `show ARGS` at 80 columns, piped without a width and at a width nothing reaches:
/// asserts the exit code, that every line fits, that piped is the same as 80 columns, and
/// that only blanks differ from the whole lines; returns the wrapped text.
pub(super) fn show_fits(ns: &Netns, args: &[&str], code: i32) -> String {
    let mut full = vec!["show"];
    full.extend_from_slice(args);
    let (got, wrapped) = ipmasq_at(ns, Some("80"), &full);
    assert_eq!(got, code, "{args:?}\n{wrapped}");
    let wide: Vec<&str> = wrapped
        .lines()
        .filter(|l| l.chars().count() > WIDTH)
        .collect();
    assert!(wide.is_empty(), "{args:?} at COLUMNS=80: {wide:#?}");
    assert_eq!(ipmasq_at(ns, None, &full).1, wrapped, "{args:?} piped");
    let (_, whole) = ipmasq_at(ns, Some("1000"), &full);
    assert_eq!(
        wrapped.split_whitespace().collect::<String>(),
        whole.split_whitespace().collect::<String>(),
        "{args:?}"
    );
    wrapped
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn show_fits_80_columns() {
    let ns = Netns::new("fitshow");
    let dir = Scratch::new("fitshow");
    let nested = dir.path.join("etc/kubernetes/ip-masq-agent");
    std::fs::create_dir_all(&nested).unwrap();
    let installed = nested.join("installed.yaml");
    std::fs::write(
        &installed,
        "nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n",
    )
    .unwrap();
    let other = nested.join("another-config-with-a-long-name.yaml");
    std::fs::write(
        &other,
        "nonMasqueradeCIDRs: [192.168.0.0/16, 100.64.0.0/10]\nmasqLinkLocal: true\n",
    )
    .unwrap();
    let sync = |variant: &str| {
        let run = ns.ipmasq(&[
            "agent",
            "--once",
            &format!("--iptables-mode={variant}"),
            &format!("--config={}", installed.display()),
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    };
    // Not installed at all.
    let text = show_fits(&ns, &["--backend=nftables"], 3);
    assert!(text.contains("rules are not installed"), "{text}");
    sync("nft");
    // In sync with a long path, then drifted against another config: every difference.
    let installed_flag = format!("--config={}", installed.display());
    let text = show_fits(&ns, &["--iptables-mode=nft", &installed_flag], 0);
    assert!(text.contains("in sync"), "{text}");
    let other_flag = format!("--config={}", other.display());
    let text = show_fits(&ns, &["--iptables-mode=nft", &other_flag], 1);
    assert!(text.contains("drifted"), "{text}");
    // A copy in the other iptables variant, and the command that removes it.
    sync("legacy");
    let text = show_fits(&ns, &["--iptables-mode=nft"], 1);
    assert!(text.contains("also exists in iptables-legacy"), "{text}");
    // The command moves to a line of its own whole, so it can be copied.
    assert!(
        text.lines()
            .any(|l| l.contains("`ipmasq cleanup --all-variants=false --iptables-mode=legacy`")),
        "{text}"
    );
}
