//! The generated man pages, completions and references (docs/reference/: flags, exit codes,
//! metrics, diagnostic codes): committed copies match a fresh generation, the
//! pages render with `man` without warnings, each completion script loads in its shell, and
//! the Containerfile only copies onto the imported base and keeps upstream's entrypoint.

use crate::util::{ipmasq, Scratch};
use std::path::Path;
use std::process::Command;

fn repo(relative: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "README.md")
        .collect();
    names.sort();
    names
}

#[test]
fn committed_man_pages_and_completions_are_fresh() {
    let out = Scratch::new("generate");
    let run = ipmasq(&["generate", out.path.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for dir in ["man", "completions"] {
        let fresh = out.path.join(dir);
        let committed = repo(dir);
        assert_eq!(
            files_in(&committed),
            files_in(&fresh),
            "{dir}/ holds other files than `ipmasq generate` writes"
        );
        for name in files_in(&fresh) {
            let want = std::fs::read(fresh.join(&name)).unwrap();
            let have = std::fs::read(committed.join(&name)).unwrap();
            assert!(
                want == have,
                "{dir}/{name} is stale: run `cargo run -- generate .` and commit the result"
            );
        }
    }
    // The reference page generated from the same text as the man page ipmasq-agent(8).
    let page = "docs/reference/endpoints.md";
    let want = std::fs::read(out.path.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let have = std::fs::read(repo(page)).unwrap_or_default();
    assert!(
        want == have,
        "{page} is stale: run `cargo run -- generate .` and commit the result"
    );
    let names = files_in(&repo("man"));
    assert_eq!(
        names,
        [
            "ipmasq-agent.8",
            "ipmasq-cleanup.8",
            "ipmasq-config.5",
            "ipmasq-explain.8",
            "ipmasq-fleet-rollout-abort.8",
            "ipmasq-fleet-rollout-promote.8",
            "ipmasq-fleet-rollout-resume.8",
            "ipmasq-fleet-rollout-start.8",
            "ipmasq-fleet-rollout-status.8",
            "ipmasq-fleet-rollout.8",
            "ipmasq-fleet.8",
            "ipmasq-show.8",
            "ipmasq-validate.8",
            "ipmasq-who.8",
            "ipmasq.8"
        ]
    );
}

/// Every file under `dir`, as paths relative to `root`.
fn files_under(root: &Path, dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(root, &path));
        } else {
            found.push(path.strip_prefix(root).unwrap().to_path_buf());
        }
    }
    found.sort();
    found
}

/// The documents `ipmasq generate` writes under docs/ (the metrics' reference among them):
/// each committed copy matches a fresh generation.
#[test]
fn committed_generated_docs_are_fresh() {
    let out = Scratch::new("generate-docs");
    let run = ipmasq(&["generate", out.path.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let generated = files_under(&out.path, &out.path.join("docs"));
    for name in [
        "docs/reference/metrics.md",
        "docs/reference/flags.md",
        "docs/reference/exit-codes.md",
    ] {
        assert!(
            generated.contains(&Path::new(name).to_path_buf()),
            "{name} not generated: {generated:?}"
        );
    }
    for relative in generated {
        let want = std::fs::read(out.path.join(&relative)).unwrap();
        let have = std::fs::read(repo(relative.to_str().unwrap())).unwrap_or_default();
        assert!(
            want == have,
            "{} is stale: run `cargo run -- generate .` and commit the result",
            relative.display()
        );
    }
}

/// docs/reference/diagnostics.md, the one table of diagnostic codes, is what `ipmasq
/// generate` writes from the codes' definition; ipmasq-validate(8) carries the same table.
#[test]
fn committed_reference_of_diagnostic_codes_is_fresh() {
    const REFERENCE: &str = "docs/reference/diagnostics.md";
    let out = Scratch::new("generate-codes");
    let run = ipmasq(&["generate", out.path.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let fresh = std::fs::read_to_string(out.path.join(REFERENCE)).unwrap();
    let committed = std::fs::read_to_string(repo(REFERENCE))
        .unwrap_or_else(|e| panic!("{REFERENCE}: {e}: run `cargo run -- generate .`"));
    assert!(
        fresh == committed,
        "{REFERENCE} is stale: run `cargo run -- generate .` and commit the result"
    );
    let rows = committed.lines().filter(|l| l.starts_with("| `")).count();
    assert!(rows >= 50, "{rows} codes in {REFERENCE}");
    let page = std::fs::read_to_string(repo("man/ipmasq-validate.8")).unwrap();
    assert!(
        page.contains(".SH \"DIAGNOSTIC CODES\""),
        "ipmasq-validate(8)"
    );
    assert!(
        page.matches("\n.TP\n.B ").count() >= rows,
        "ipmasq-validate(8)"
    );
    let help = ipmasq(&["validate", "--help"]).stdout;
    assert!(
        help.contains(REFERENCE) && help.contains("ipmasq-validate(8)"),
        "validate --help names neither: {help}"
    );
}

#[test]
fn man_pages_have_the_sections_and_render_without_warnings() {
    for name in files_in(&repo("man")) {
        let path = repo("man").join(&name);
        let text = std::fs::read_to_string(&path).unwrap();
        // Commands (section 8) have examples and exit statuses; the file format (5) has keys,
        // diagnostics and an example.
        let command = name.ends_with(".8");
        let sections: &[&str] = if command {
            &[
                ".SH NAME",
                ".SH SYNOPSIS",
                ".SH DESCRIPTION",
                ".SH EXAMPLES",
                ".SH \"EXIT STATUS\"",
                ".SH \"SEE ALSO\"",
            ]
        } else {
            &[
                ".SH NAME",
                ".SH SYNOPSIS",
                ".SH DESCRIPTION",
                ".SH KEYS",
                ".SH DIAGNOSTICS",
                ".SH EXAMPLE",
                ".SH FILES",
                ".SH \"SEE ALSO\"",
            ]
        };
        for section in sections {
            assert!(text.contains(section), "{name} lacks {section}");
        }
        let title = text
            .lines()
            .find(|l| l.starts_with(".TH "))
            .expect("a .TH line");
        let want = if command { " 8 " } else { " 5 " };
        assert!(
            title.contains(want),
            "{name} is not in its section: {title}"
        );
        // As lintian checks pages: any output on stderr is a warning.
        let out = Command::new("man")
            .args(["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"])
            .arg(&path)
            .env("LC_ALL", "C.UTF-8")
            .env("MANROFFSEQ", "")
            .env("MANWIDTH", "80")
            .output()
            .expect("man is installed (scripts/test installs man-db)");
        assert!(out.status.success(), "{name}: man failed");
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(warnings.trim().is_empty(), "{name}: {warnings}");
    }
    let files = std::fs::read_to_string(repo("man/ipmasq-agent.8")).unwrap();
    assert!(files.contains(".SH FILES"));
    assert!(files.contains("/etc/config/ip\\-masq\\-agent"));
}

fn shell(program: &str, script: &str) -> (bool, String) {
    let out = Command::new(program)
        .args(["-c", script])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("{program} is installed (scripts/test installs it): {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn bash_completion_loads() {
    let (ok, out) = shell(
        "bash",
        "source completions/ipmasq.bash && complete -p ipmasq && COMP_LINE='ipmasq va' COMP_POINT=9 COMP_WORDS=(ipmasq va) COMP_CWORD=1 && _ipmasq ipmasq va ipmasq && echo \"${COMPREPLY[@]}\"",
    );
    assert!(ok, "{out}");
    assert!(out.contains("-F _ipmasq ipmasq"), "{out}");
    assert!(out.contains("validate"), "{out}");
}

/// `compinit -D`: no dump file. (`-d /dev/null` made compinit move its dump over /dev/null,
/// replacing the machine's null device with a regular file that every later `> /dev/null`
/// wrote into and every `< /dev/null` read back.)
#[test]
fn zsh_completion_loads() {
    let (ok, out) = shell(
        "zsh",
        "autoload -Uz compinit && compinit -u -D && source completions/_ipmasq && print -r -- $_comps[ipmasq]",
    );
    assert!(ok, "{out}");
    assert!(out.contains("_ipmasq"), "{out}");
}

#[test]
fn fish_completion_loads() {
    let (ok, out) = shell(
        "fish",
        "source completions/ipmasq.fish; and complete -C 'ipmasq '",
    );
    assert!(ok, "{out}");
    for applet in ["agent", "validate", "show", "cleanup"] {
        assert!(
            out.lines().any(|l| l.starts_with(applet)),
            "{applet} missing: {out}"
        );
    }
    assert!(
        !out.lines().any(|l| l.starts_with("generate")),
        "hidden applet offered: {out}"
    );
}

/// The Containerfile goes on the base scripts/build-image imports, which has no shell: it may
/// only copy. The image itself is run by the root test `root::image`.
#[test]
fn containerfile_runs_the_agent_like_upstreams_image() {
    let text = std::fs::read_to_string(repo("packaging/Containerfile")).unwrap();
    let instructions: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.trim().is_empty())
        .collect();
    let stages: Vec<&&str> = instructions
        .iter()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(stages, [&"FROM ${BASE}"], "one stage on the imported base");
    assert!(
        !instructions.iter().any(|l| l.starts_with("RUN")),
        "the base has no shell: {instructions:?}"
    );
    assert!(instructions.contains(&"COPY layer/ /"), "{instructions:?}");
    // Upstream's image: ENTRYPOINT ["/bin/ip-masq-agent"]; /bin is /usr/bin on bookworm.
    assert_eq!(
        instructions.last(),
        Some(&"ENTRYPOINT [\"/bin/ip-masq-agent\"]")
    );
    let build_image = std::fs::read_to_string(repo("scripts/build-image")).unwrap();
    assert!(build_image.contains("\"usr\", \"bin\", \"ip-masq-agent\""));
    assert!(build_image.contains("\"--network=none\""));
}

/// Every ipmasq page a man page names (`.BR ipmasq-show (8)`, `ipmasq\-show(8)`) exists in
/// `man/`, and the other pages named are the system's own (iptables, nft, systemd).
#[test]
fn every_man_page_reference_resolves() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains('.') && !n.ends_with(".md"))
        .collect();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(dir.join(page))
            .unwrap()
            .replace("\\-", "-");
        let words = text.split(|c: char| c.is_whitespace() || c == ',' || c == '\\');
        let mut previous = "";
        for word in words {
            // `name(N)` in text, or `.BR name (N)` split over two words.
            let reference = match word.split_once('(') {
                Some((name, rest))
                    if !name.is_empty() && rest.starts_with(|c: char| c.is_ascii_digit()) =>
                {
                    Some((name.to_string(), rest.chars().next().unwrap()))
                }
                Some(("", rest)) if rest.starts_with(|c: char| c.is_ascii_digit()) => {
                    Some((previous.to_string(), rest.chars().next().unwrap()))
                }
                _ => None,
            };
            previous = word;
            let Some((name, section)) = reference else {
                continue;
            };
            if !name.starts_with("ipmasq") && name != "ip-masq-agent" {
                continue;
            }
            checked += 1;
            let file = if name == "ip-masq-agent" {
                "ipmasq-agent.8".to_string()
            } else {
                format!("{name}.{section}")
            };
            assert!(
                pages.contains(&file),
                "{page} names {name}({section}): no man/{file}"
            );
        }
    }
    assert!(checked >= 10, "only {checked} references found");
}

/// `generate` takes a directory, never a flag for one: `--help` prints its usage and writes
/// nothing; another option is a usage error.
#[test]
fn generate_refuses_an_option_as_its_directory() {
    let help = ipmasq(&["generate", "--help"]);
    assert_eq!(help.code, 0, "{}", help.stderr);
    assert!(
        help.stdout.contains("usage: ipmasq generate DIR"),
        "{}",
        help.stdout
    );
    assert!(
        !Path::new("--help").exists(),
        "generate --help wrote ./--help"
    );
    let bogus = ipmasq(&["generate", "--bogus"]);
    assert_eq!(bogus.code, 2, "{}", bogus.stdout);
    assert!(
        bogus.stderr.contains("unknown option --bogus"),
        "{}",
        bogus.stderr
    );
    assert!(!Path::new("--bogus").exists());
}
