//! `ipmasq generate DIR` (for packagers, outside the clap definition so nothing advertises
//! it): writes the man pages (section 8), shell completions and the references under
//! docs/reference/ (flags, exit codes, endpoints, metrics, diagnostic codes) from the one clap
//! definition and the code's lists, so they never drift from `--help`. A test compares the
//! committed copies with a fresh generation.

use super::Exit;
use crate::cli::docs::{self, man_date, roff_text, AppletDoc};
use crate::cli::BINARY_NAME;
use clap_complete::Shell;
use std::path::Path;

/// The manual section for system administration commands.
const SECTION: &str = "8";
const MANUAL: &str = "System Administration";

/// Completion scripts: shell and file name, as each shell's packaging expects.
pub const COMPLETIONS: [(Shell, &str); 5] = [
    (Shell::Bash, "ipmasq.bash"),
    (Shell::Zsh, "_ipmasq"),
    (Shell::Fish, "ipmasq.fish"),
    (Shell::Elvish, "ipmasq.elv"),
    (Shell::PowerShell, "_ipmasq.ps1"),
];

/// Completions for the agent under upstream's name (`ip-masq-agent`, the symlink packages
/// install): the agent's flags as a command of its own.
pub const AGENT_COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "ip-masq-agent.bash"),
    (Shell::Zsh, "_ip-masq-agent"),
    (Shell::Fish, "ip-masq-agent.fish"),
];

/// The agent page's HEALTH AND METRICS section: the endpoints, and every metric the agent
/// exports, from the list its `/metrics` registers them by.
fn health_section() -> String {
    let mut out = String::from(".SH \"HEALTH AND METRICS\"\n");
    out.push_str(&crate::agent::endpoints::roff(roff_text));
    out.push_str(&crate::cli::metrics_page::man_entries());
    out
}

/// EXAMPLES, EXIT STATUS, FILES, `more` (roff: sections of one page only) and SEE ALSO,
/// which clap_mangen does not render.
fn extra_sections_with(doc: &AppletDoc, see_also: &[&str], more: &str) -> String {
    let mut out = String::new();
    if !doc.notes.is_empty() {
        out.push_str(".SH NOTES\n");
        for note in doc.notes {
            out.push_str(&format!(".PP\n{}\n", roff_text(note)));
        }
    }
    out.push_str(".SH EXAMPLES\n");
    for example in doc.examples {
        out.push_str(&format!(
            ".PP\n{}:\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
            roff_text(example.what),
            roff_text(&docs::example_lines(example.command, ""))
        ));
    }
    out.push_str(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in doc.exit_status {
        out.push_str(&format!(".TP\n.B {code}\n{}\n", roff_text(meaning)));
    }
    if !doc.files.is_empty() {
        out.push_str(".SH FILES\n");
        for (path, meaning) in doc.files {
            out.push_str(&format!(".TP\n.I {path}\n{}\n", roff_text(meaning)));
        }
    }
    out.push_str(more);
    out.push_str(".SH \"SEE ALSO\"\n");
    let refs: Vec<String> = see_also.iter().map(|r| format!(".BR {r}")).collect();
    for (i, r) in refs.iter().enumerate() {
        let comma = if i + 1 < refs.len() { " ," } else { "" };
        out.push_str(&format!("{r}{comma}\n"));
    }
    out
}

/// One man page: clap_mangen's title, NAME, SYNOPSIS, DESCRIPTION, OPTIONS (and COMMANDS for
/// the multi-call page), then ours.
fn man_page(
    command: clap::Command,
    title: &str,
    doc: &AppletDoc,
    see_also: &[&str],
) -> std::io::Result<Vec<u8>> {
    man_page_with(command, title, doc, see_also, "")
}

fn man_page_with(
    command: clap::Command,
    title: &str,
    doc: &AppletDoc,
    see_also: &[&str],
    more: &str,
) -> std::io::Result<Vec<u8>> {
    let version = command.get_version().unwrap_or_default().to_string();
    // clap's generated `help` subcommand has no page of its own: it is not listed, so every
    // page a man page names exists.
    let mut command = command.clone();
    if command.find_subcommand("help").is_some() {
        command = command.mut_subcommand("help", |help| help.hide(true));
    }
    let man = clap_mangen::Man::new(command.clone())
        .title(title.to_uppercase())
        .section(SECTION)
        .date(man_date())
        .source(format!("ipmasq {version}"))
        .manual(MANUAL);
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if command.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if command.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    out.extend_from_slice(extra_sections_with(doc, see_also, more).as_bytes());
    Ok(out)
}

/// One page per applet, each naming the others.
fn applet_pages(
    cli: &clap::Command,
    applets: &[(&'static str, &'static AppletDoc)],
) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for &(name, doc) in applets {
        let sub = cli
            .find_subcommand(name)
            .expect("every applet is a subcommand")
            .clone()
            .name(format!("{BINARY_NAME}-{name}"))
            .bin_name(format!("{BINARY_NAME} {name}"))
            .version(cli.get_version().unwrap_or_default().to_string());
        let mut see_also: Vec<String> = vec!["ipmasq (8)".into()];
        see_also.extend(
            applets
                .iter()
                .filter(|(other, _)| *other != name)
                .map(|(other, _)| format!("ipmasq-{other} (8)")),
        );
        see_also.push("ipmasq-config (5)".into());
        see_also.push("iptables-restore (8)".into());
        let refs: Vec<&str> = see_also.iter().map(String::as_str).collect();
        let more = match name {
            "agent" => health_section(),
            "validate" => crate::cli::codes_reference::roff_section(),
            _ => String::new(),
        };
        files.push((
            format!("man/ipmasq-{name}.8"),
            man_page_with(sub, &format!("{BINARY_NAME}-{name}"), doc, &refs, &more)?,
        ));
    }
    Ok(files)
}

/// `fleet rollout`'s page and one per action (the rollout page's COMMANDS names them).
fn rollout_pages(cli: &clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let version = cli.get_version().unwrap_or_default().to_string();
    let rollout = cli
        .find_subcommand("fleet")
        .and_then(|fleet| fleet.find_subcommand("rollout"))
        .expect("fleet rollout is a subcommand")
        .clone();
    let title = format!("{BINARY_NAME}-fleet-rollout");
    let page = |command: clap::Command, title: &str, doc: &AppletDoc, see_also: &[&str]| {
        man_page(
            command
                .name(title.to_string())
                .bin_name(title.replace('-', " "))
                .version(version.clone()),
            title,
            doc,
            see_also,
        )
    };
    let mut files = vec![(
        format!("man/{title}.8"),
        page(
            rollout.clone(),
            &title,
            &docs::ROLLOUT,
            &["ipmasq-fleet (8)", "ipmasq-agent (8)", "ipmasq-config (5)"],
        )?,
    )];
    for (action, doc) in [
        ("start", &docs::ROLLOUT_START),
        ("status", &docs::ROLLOUT_STATUS),
        ("promote", &docs::ROLLOUT_PROMOTE),
        ("abort", &docs::ROLLOUT_ABORT),
        ("resume", &docs::ROLLOUT_RESUME),
    ] {
        let command = rollout
            .find_subcommand(action)
            .expect("every rollout action is a subcommand")
            .clone();
        let name = format!("{title}-{action}");
        files.push((
            format!("man/{name}.8"),
            page(command, &name, doc, &["ipmasq-fleet-rollout (8)"])?,
        ));
    }
    Ok(files)
}

/// The applets with their documentation, in the order the pages and references list them.
fn documented_applets() -> [(&'static str, &'static AppletDoc); 7] {
    [
        ("agent", &docs::AGENT),
        ("validate", &docs::VALIDATE),
        ("show", &docs::SHOW),
        ("cleanup", &docs::CLEANUP),
        ("explain", &docs::EXPLAIN),
        ("fleet", &docs::FLEET),
        ("who", &docs::WHO),
    ]
}

/// Markdown table cell text: one line, no column separator.
fn markdown_cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// One flag's row of `docs/reference/flags.md`: its spellings, its value, its default and its
/// help, all read from the clap definition.
fn flag_row(arg: &clap::Arg) -> String {
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("`-{short}`"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("`--{long}`"));
    }
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    if arg.is_positional() {
        let name = arg
            .get_value_names()
            .and_then(|names| names.first().map(|n| n.to_string()))
            .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
        names.push(format!("`{}` (positional)", name.replace('|', "\\|")));
    }
    let value = if takes_value && !arg.is_positional() {
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| v.get_name().to_string())
            .collect();
        if possible.is_empty() {
            arg.get_value_names()
                .map(|names| {
                    names
                        .iter()
                        .map(|n| format!("`{}`", n.to_string().replace('|', "\\|")))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| format!("`{}`", arg.get_id().as_str().to_uppercase()))
        } else {
            format!("`{}`", possible.join("\\|"))
        }
    } else {
        String::new()
    };
    let default: Vec<String> = arg
        .get_default_values()
        .iter()
        .filter(|v| !v.is_empty())
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    let help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    format!(
        "| {} | {value} | {} | {} |\n",
        names.join(", "),
        default.join(", "),
        markdown_cell(&help)
    )
}

/// `docs/reference/flags.md`: every applet's flags, generated from the one clap definition, as
/// `--help` and the man pages are.
fn flags_reference(cli: &clap::Command) -> String {
    let mut out = String::from(
        "# Flags\n\n<!-- Generated by `cargo run -- generate .` from the CLI definition \
         (src/cli/mod.rs); a test fails when this copy is stale. Do not edit. -->\n\n\
         Every flag of every applet, as `--help` and the man pages list them. What the agent's \
         flags do in depth: [the agent](agent.md); exit statuses: [exit codes](exit-codes.md).\n",
    );
    let mut section = |title: &str, command: &clap::Command| {
        out.push_str(&format!("\n## `{title}`\n\n"));
        if let Some(about) = command.get_about() {
            out.push_str(&format!("{}\n\n", markdown_cell(&about.to_string())));
        }
        out.push_str("| flag | value | default | meaning |\n|---|---|---|---|\n");
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            out.push_str(&flag_row(arg));
        }
    };
    section(BINARY_NAME, cli);
    for (name, _) in documented_applets() {
        let sub = cli
            .find_subcommand(name)
            .expect("every applet is a subcommand");
        section(&format!("{BINARY_NAME} {name}"), sub);
    }
    out
}

/// `docs/reference/exit-codes.md`: every applet's exit statuses, from the same lists as
/// `--help` and the man pages.
fn exit_codes_reference() -> String {
    let mut out = String::from(
        "# Exit codes\n\n<!-- Generated by `cargo run -- generate .` from src/cli/docs.rs; a test \
         fails when this copy is stale. Do not edit. -->\n\n\
         Every applet's exit statuses, as its `--help` and man page list them.\n",
    );
    let mut section = |title: &str, doc: &AppletDoc| {
        out.push_str(&format!(
            "\n## `{title}`\n\n| status | meaning |\n|---|---|\n"
        ));
        for (code, meaning) in doc.exit_status {
            out.push_str(&format!("| {code} | {} |\n", markdown_cell(meaning)));
        }
    };
    section(BINARY_NAME, &docs::MAIN);
    for (name, doc) in documented_applets() {
        section(&format!("{BINARY_NAME} {name}"), doc);
    }
    out
}

/// Every generated file: (path relative to the output directory, contents).
pub fn generated_files() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    let mut cli = crate::cli::command();
    cli.build();
    let applets = documented_applets();
    let mut see_also_main: Vec<String> = applets
        .iter()
        .map(|(name, _)| format!("ipmasq-{name} (8)"))
        .collect();
    see_also_main.extend([
        "ipmasq-config (5)".into(),
        "iptables (8)".into(),
        "iptables-save (8)".into(),
        "nft (8)".into(),
    ]);
    let refs: Vec<&str> = see_also_main.iter().map(String::as_str).collect();
    files.push((
        "man/ipmasq.8".to_string(),
        man_page(cli.clone(), BINARY_NAME, &docs::MAIN, &refs)?,
    ));
    files.extend(applet_pages(&cli, &applets)?);
    files.extend(rollout_pages(&cli)?);
    files.push((
        "man/ipmasq-config.5".to_string(),
        crate::cli::config_page::config_page(cli.get_version().unwrap_or_default()).into_bytes(),
    ));
    files.push((
        "docs/reference/endpoints.md".to_string(),
        crate::agent::endpoints::markdown().into_bytes(),
    ));
    files.push((
        "docs/reference/flags.md".to_string(),
        flags_reference(&cli).into_bytes(),
    ));
    files.push((
        "docs/reference/exit-codes.md".to_string(),
        exit_codes_reference().into_bytes(),
    ));
    files.push((
        crate::cli::codes_reference::MARKDOWN_PATH.to_string(),
        crate::cli::codes_reference::markdown().into_bytes(),
    ));
    let mut agent = cli
        .find_subcommand("agent")
        .expect("the agent applet")
        .clone()
        .name("ip-masq-agent")
        .bin_name("ip-masq-agent");
    for (shell, file) in AGENT_COMPLETIONS {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut agent, "ip-masq-agent", &mut out);
        files.push((format!("completions/{file}"), out));
    }
    for (shell, file) in COMPLETIONS {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut crate::cli::command(), BINARY_NAME, &mut out);
        files.push((format!("completions/{file}"), out));
    }
    files.push((
        crate::cli::metrics_page::REFERENCE_PATH.to_string(),
        crate::cli::metrics_page::reference_markdown().into_bytes(),
    ));
    Ok(files)
}

fn write_all(dir: &Path) -> std::io::Result<usize> {
    let files = generated_files()?;
    for (relative, contents) in &files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, contents)?;
    }
    Ok(files.len())
}

/// Runs `ipmasq generate DIR`.
pub fn run(args: &[std::ffi::OsString]) -> Exit {
    const USAGE: &str = "usage: ipmasq generate DIR   (writes DIR/man/*.8, DIR/completions/* and DIR/docs/reference/*.md)";
    let [dir] = args else {
        eprintln!("{USAGE}");
        return Exit::Usage;
    };
    // A flag is never a directory: `generate --help` once wrote everything into `./--help`.
    if dir == "-h" || dir == "--help" {
        println!("{USAGE}");
        return Exit::Ok;
    }
    if dir.to_string_lossy().starts_with('-') {
        eprintln!(
            "ipmasq generate: unknown option {}\n{USAGE}",
            dir.to_string_lossy()
        );
        return Exit::Usage;
    }
    let dir = Path::new(dir);
    match write_all(dir) {
        Ok(n) => {
            println!("wrote {n} files under {}", dir.display());
            Exit::Ok
        }
        Err(err) => {
            eprintln!("ipmasq generate: {}: {err}", dir.display());
            Exit::Usage
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages the system provides (with iptables and nftables installed); every other
    /// reference must be a page we generate.
    const SYSTEM_PAGES: [&str; 4] = [
        "iptables (8)",
        "iptables-save (8)",
        "iptables-restore (8)",
        "nft (8)",
    ];

    #[test]
    fn every_see_also_names_a_page_that_exists() {
        let files = generated_files().unwrap();
        let ours: Vec<String> = files
            .iter()
            .filter_map(|(path, _)| path.strip_prefix("man/"))
            .map(|page| {
                let (name, section) = page.rsplit_once('.').unwrap();
                format!("{name} ({section})")
            })
            .collect();
        let mut checked = 0;
        for (path, contents) in files.iter().filter(|(p, _)| p.starts_with("man/")) {
            let text = String::from_utf8_lossy(contents);
            let see_also = text
                .split(".SH \"SEE ALSO\"")
                .nth(1)
                .expect("a SEE ALSO section");
            for line in see_also.lines().filter(|l| l.starts_with(".BR ")) {
                let reference = line[4..].trim_end_matches(" ,").replace("\\-", "-");
                assert!(
                    ours.contains(&reference) || SYSTEM_PAGES.contains(&reference.as_str()),
                    "{path} refers to {reference}, which is not a page"
                );
                checked += 1;
            }
        }
        assert!(checked > 20, "{checked} references checked");
    }

    #[test]
    fn every_man_page_carries_the_release_date() {
        let date = man_date();
        assert_eq!(date.len(), 10, "{date:?}");
        let files = generated_files().unwrap();
        let mut pages = 0;
        for (path, bytes) in &files {
            if !path.starts_with("man/") {
                continue;
            }
            let text = String::from_utf8_lossy(bytes);
            let title = text
                .lines()
                .find(|l| l.starts_with(".TH "))
                .unwrap_or_else(|| panic!("{path}: no .TH line"));
            // .TH TITLE SECTION DATE SOURCE MANUAL
            let third = title.split_whitespace().nth(3).unwrap_or_default();
            assert_eq!(
                third.trim_matches('"'),
                date,
                "{path}: {title} carries no date"
            );
            pages += 1;
        }
        assert!(pages >= 7, "{pages} pages");
    }

    #[test]
    fn the_agent_page_lists_every_metric_and_the_config_page_every_code() {
        let files = generated_files().unwrap();
        let page = |name: &str| {
            String::from_utf8_lossy(&files.iter().find(|(p, _)| p == name).unwrap().1).into_owned()
        };
        let agent = page("man/ipmasq-agent.8");
        for metric in crate::agent::metrics::ALL {
            assert!(
                agent.contains(&format!(".B {}", roff_text(metric.name))),
                "{} missing from ipmasq-agent(8)",
                metric.name
            );
        }
        let config = page("man/ipmasq-config.5");
        for code in crate::config::Code::ALL {
            assert!(
                config.contains(&roff_text(code.as_str())),
                "{} missing",
                code.as_str()
            );
        }
    }
}
