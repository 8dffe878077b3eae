//! Multi-call dispatch: argv[0], `--list`, unknown applets, help and version.

use crate::util::{binary, ipmasq, run_program, Scratch};

#[test]
fn list_prints_every_applet() {
    let run = ipmasq(&["--list"]);
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout,
        "agent\ncleanup\nexplain\nfleet\nshow\nvalidate\nwho\n"
    );
}

#[test]
fn unknown_applet_exits_2_with_a_clear_message() {
    let run = ipmasq(&["frobnicate"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("unknown applet 'frobnicate'"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("ipmasq --list"), "{}", run.stderr);
}

#[test]
fn no_arguments_prints_help_and_fails() {
    let run = ipmasq(&[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("validate"), "{}", run.stderr);
}

#[test]
fn unknown_flag_exits_2() {
    let run = ipmasq(&["validate", "--no-such-flag"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--no-such-flag"), "{}", run.stderr);
}

#[test]
fn version_and_help_exit_0() {
    let run = ipmasq(&["--version"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.starts_with("ipmasq "), "{}", run.stdout);
    let run = ipmasq(&["validate", "--help"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("Examples:"), "{}", run.stdout);
    assert!(run.stdout.contains("Exit status"), "{}", run.stdout);
}

#[test]
fn argv0_picks_the_applet() {
    let dir = Scratch::new("argv0");
    let validate = dir.path.join("ipmasq-validate");
    std::os::unix::fs::symlink(binary(), &validate).unwrap();
    let config = dir.write("c.yaml", "masqLinkLocal: true\n");
    let run = run_program(&validate, &[config.to_str().unwrap()], None);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("valid"), "{}", run.stdout);

    let agent = dir.path.join("ip-masq-agent");
    std::os::unix::fs::symlink(binary(), &agent).unwrap();
    let run = run_program(&agent, &["--version"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("agent"), "{}", run.stdout);
}

/// Each applet's help speaks for that applet: the flags `show`, `explain`, `cleanup` and
/// `validate` share with the agent never describe what the agent does with them.
#[test]
fn every_applet_help_speaks_for_that_applet() {
    let agent_wording = [
        "Name of the nat chain for the masquerade rules",
        "Also manage IPv6",
        "Add --random-fully to MASQUERADE rules",
        "Default list also skips masquerade",
        "Source ports for MASQUERADE",
        "Which iptables to drive",
        "The firewall backend",
    ];
    for applet in ["show", "explain", "cleanup", "validate"] {
        let help = crate::util::ipmasq(&[applet, "--help"]).stdout;
        for words in agent_wording {
            assert!(
                !help.contains(words),
                "`{applet} --help` says the agent's {words:?}:\n{help}"
            );
        }
    }
    let agent = crate::util::ipmasq(&["agent", "--help"]).stdout;
    for words in [
        "Also manage IPv6",
        "Which iptables to drive",
        "The firewall backend",
    ] {
        assert!(
            agent.contains(words),
            "{words:?} missing from the agent's help"
        );
    }
    let show = crate::util::ipmasq(&["show", "--help"]).stdout;
    assert!(
        show.contains("The chain to show (the agent's --masq-chain)"),
        "{show}"
    );
}
