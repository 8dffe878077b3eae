//! Text reports fit the terminal: at `COLUMNS=80` every line `explain` prints is at most 80
//! columns, for answers whose words run long (a long config path, a long source list, a
//! family the agent does not manage, an assumed source), with all its text still there; piped
//! without `COLUMNS`, lines fit 80 columns too, and a wide `COLUMNS` keeps them whole. (`show`
//! needs a firewall: root::fits_terminal.)

use crate::util::{binary, Scratch};
use std::process::{Command, Stdio};

const WIDTH: usize = 80;

/// `ipmasq ARGS` with `COLUMNS` set (or removed): (exit code, stdout).
fn ipmasq_at(columns: Option<&str>, args: &[&str]) -> (i32, String) {
    let mut command = Command::new(binary());
    command
        .args(args)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    match columns {
        Some(columns) => command.env("COLUMNS", columns),
        None => command.env_remove("COLUMNS"),
    };
    let out = command.output().expect("run ipmasq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The lines of `text` wider than [`WIDTH`].
fn too_wide(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .map(|l| (l.chars().count(), l))
        .filter(|(n, _)| *n > WIDTH)
        .collect()
}

#[test]
fn explain_fits_80_columns_and_keeps_every_word() {
    let dir = Scratch::new("fits-explain");
    // A config path as long as a mounted ConfigMap's can be.
    let nested = dir
        .path
        .join("etc/kubernetes/ip-masq-agent/config-volume/..data");
    std::fs::create_dir_all(&nested).unwrap();
    let file = nested.join("ip-masq-agent-config.yaml");
    std::fs::write(
        &file,
        "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 172.16.0.0/12\n  - 192.168.0.0/16\nforceMasqueradeCIDRs: [10.8.0.0/16]\nmasqueradeSourceCIDRs: [10.244.0.0/16, 10.245.0.0/16, 10.246.0.0/16, 10.247.0.0/16, 10.248.0.0/16]\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let cases: [&[&str]; 5] = [
        // Kept by a CIDR: "decided by ... (line, column), the longest matching prefix".
        &["172.16.5.5", "--from", "10.244.0.9"],
        // Forced: masqueraded, the source assumed from masqueradeSourceCIDRs.
        &["10.8.3.4"],
        // A source outside masqueradeSourceCIDRs: the whole list is named.
        &["8.8.8.8", "--from", "192.168.77.1"],
        // A family the agent manages no rules of.
        &["2001:db8::1"],
        // Nothing listed holds it.
        &["203.0.113.50", "--from", "10.245.3.3"],
    ];
    for case in cases {
        let mut args = vec!["explain", "--config", file, "--no-live", "--color=never"];
        args.extend_from_slice(case);
        let (code, wrapped) = ipmasq_at(Some("80"), &args);
        assert!(code == 0 || code == 10, "{case:?}: exit {code}\n{wrapped}");
        assert!(
            too_wide(&wrapped).is_empty(),
            "{case:?} at COLUMNS=80: {:#?}",
            too_wide(&wrapped)
        );
        // Piped without COLUMNS: a classic terminal's width, the same lines.
        assert_eq!(ipmasq_at(None, &args).1, wrapped, "{case:?} piped");
        // The same text as the unwrapped report at a width nothing reaches (a word longer
        // than a line, this path, is cut: only blanks may differ).
        let (_, whole) = ipmasq_at(Some("1000"), &args);
        assert_eq!(
            wrapped.split_whitespace().collect::<String>(),
            whole.split_whitespace().collect::<String>(),
            "{case:?}"
        );
        // JSON is never wrapped.
        let json = |columns| {
            let mut json_args = args.clone();
            json_args.extend_from_slice(&["-o", "json"]);
            ipmasq_at(columns, &json_args).1
        };
        assert_eq!(json(Some("80")), json(None), "{case:?}");
    }
    // The long line is there at a width nothing reaches: the wrap is the width's doing.
    let (_, whole) = ipmasq_at(
        Some("1000"),
        &["explain", "--config", file, "--no-live", "172.16.5.5"],
    );
    assert!(!too_wide(&whole).is_empty(), "{whole}");
}
