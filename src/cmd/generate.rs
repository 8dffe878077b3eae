//! `ipmasq generate DIR` (for packagers, outside the clap definition so nothing advertises
//! it): writes the man pages (section 8) and shell completions from the one clap definition,
//! so they never drift from `--help`. A test compares the committed `man/` and `completions/`
//! with a fresh generation.

use super::Exit;
use crate::cli::docs::{self, AppletDoc};
use crate::cli::{Cli, BINARY_NAME};
use clap::CommandFactory;
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

/// Escapes text for roff: backslashes, and a leading `.` or `'` that would read as a request.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// EXAMPLES, EXIT STATUS, FILES and SEE ALSO, which clap_mangen does not render.
fn extra_sections(doc: &AppletDoc, see_also: &[&str]) -> String {
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
            roff_text(example.command)
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
    let version = command.get_version().unwrap_or_default().to_string();
    let man = clap_mangen::Man::new(command.clone())
        .title(title.to_uppercase())
        .section(SECTION)
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
    out.extend_from_slice(extra_sections(doc, see_also).as_bytes());
    Ok(out)
}

/// Every generated file: (path relative to the output directory, contents).
pub fn generated_files() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    let mut cli = Cli::command();
    cli.build();
    let applets: [(&str, &AppletDoc); 5] = [
        ("agent", &docs::AGENT),
        ("validate", &docs::VALIDATE),
        ("show", &docs::SHOW),
        ("cleanup", &docs::CLEANUP),
        ("explain", &docs::EXPLAIN),
    ];
    let mut see_also_main: Vec<String> = applets
        .iter()
        .map(|(name, _)| format!("ipmasq-{name} (8)"))
        .collect();
    see_also_main.extend(["iptables (8)".into(), "iptables-save (8)".into()]);
    let refs: Vec<&str> = see_also_main.iter().map(String::as_str).collect();
    files.push((
        "man/ipmasq.8".to_string(),
        man_page(cli.clone(), BINARY_NAME, &docs::MAIN, &refs)?,
    ));
    for (name, doc) in applets {
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
        see_also.push("iptables-restore (8)".into());
        let refs: Vec<&str> = see_also.iter().map(String::as_str).collect();
        files.push((
            format!("man/ipmasq-{name}.8"),
            man_page(sub, &format!("{BINARY_NAME}-{name}"), doc, &refs)?,
        ));
    }
    for (shell, file) in COMPLETIONS {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), BINARY_NAME, &mut out);
        files.push((format!("completions/{file}"), out));
    }
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
    let [dir] = args else {
        eprintln!("usage: ipmasq generate DIR   (writes DIR/man/*.8 and DIR/completions/*)");
        return Exit::Usage;
    };
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
