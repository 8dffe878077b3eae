//! The documentation as a user follows it: every relative link and `#anchor` of README.md and
//! docs/**/*.md resolves (GitHub's heading slugs), and every `ipmasq` command in a code block
//! parses: the applet exists, and every flag exists and takes a value where given one (the
//! binary is run with the command's arguments and `--help`); every table row splits into its
//! header's columns (a `|` in a cell escaped); the README's tour prints what it shows.

use crate::util::ipmasq;
use std::path::{Component, Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every `.md` file under docs/, as paths relative to the repository.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut files);
    files
        .into_iter()
        .map(|p| {
            p.strip_prefix(repo())
                .expect("in the repository")
                .to_path_buf()
        })
        .collect()
}

/// A markdown text in its parts: the prose (code blocks blanked out, so a `](` or a `#` inside
/// one is no link and no heading) and the code blocks with their info string.
struct Parsed {
    prose: Vec<String>,
    blocks: Vec<(String, Vec<String>)>,
}

fn parse(text: &str) -> Parsed {
    let mut parsed = Parsed {
        prose: Vec::new(),
        blocks: Vec::new(),
    };
    let mut open: Option<(String, String, Vec<String>)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        match (&mut open, fence) {
            (None, Some(f)) => {
                let info = trimmed.trim_start_matches(f).trim().to_string();
                open = Some((f.to_string(), info, Vec::new()));
                parsed.prose.push(String::new());
            }
            (Some((f, _, _)), Some(g))
                if *f == g && trimmed.trim_start_matches(g).trim().is_empty() =>
            {
                let (_, info, lines) = open.take().expect("open");
                parsed.blocks.push((info, lines));
                parsed.prose.push(String::new());
            }
            (Some((_, _, lines)), _) => {
                lines.push(line.to_string());
                parsed.prose.push(String::new());
            }
            (None, None) => parsed.prose.push(line.to_string()),
        }
    }
    parsed
}

/// GitHub's anchor for a heading: inline markup dropped, lower case, every character but
/// letters, digits, `-`, `_` and spaces removed, spaces made `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](target) reads as its text.
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](").map(|m| open + m) else {
            break;
        };
        let Some(close) = rest[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..mid]);
        rest = &rest[close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a file offers: its headings' slugs (a repeated one gets `-1`, `-2`, … as on
/// GitHub) and the `id`/`name` of its HTML anchors.
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in parse(text).prose {
        if let Some(heading) = line.strip_prefix('#') {
            let heading = heading.trim_start_matches('#');
            if !heading.starts_with(' ') {
                continue;
            }
            let base = slug(heading);
            let repeats = out
                .iter()
                .filter(|a| {
                    **a == base
                        || a.rsplit_once('-')
                            .is_some_and(|(b, n)| b == base && n.parse::<u32>().is_ok())
                })
                .count();
            out.push(if repeats == 0 {
                base.clone()
            } else {
                format!("{base}-{repeats}")
            });
        }
        for attribute in ["id=\"", "name=\""] {
            for (at, _) in line.match_indices(attribute) {
                let value = &line[at + attribute.len()..];
                out.push(value[..value.find('"').unwrap_or(value.len())].to_string());
            }
        }
    }
    out
}

/// The prose with inline code spans removed (a link inside backticks is no link).
fn without_code_spans(prose: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in prose.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links and images of a text: `[text](TARGET)` and
/// `[text](TARGET "title")`.
fn link_targets(text: &str) -> Vec<String> {
    let prose = without_code_spans(&parse(text).prose.join("\n"));
    prose
        .match_indices("](")
        .map(|(at, _)| {
            let target = &prose[at + 2..];
            let end = target
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(target.len());
            target[..end].to_string()
        })
        .collect()
}

/// `base/relative` with `.` and `..` folded, as a browser resolves a relative link.
fn resolve(base: &Path, relative: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in base.join(relative).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with one link of `file` (relative to the repository root `root`), if
/// anything: a missing file or a missing anchor.
fn broken_link(root: &Path, file: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
    let linked = if path.is_empty() {
        file.to_path_buf()
    } else {
        resolve(file.parent().unwrap_or(Path::new("")), path)
    };
    let full = root.join(&linked);
    if !full.exists() {
        return Some(format!(
            "{}: {target}: no {}",
            file.display(),
            linked.display()
        ));
    }
    if fragment.is_empty() {
        return None;
    }
    let text = std::fs::read_to_string(&full).unwrap_or_default();
    if anchors(&text).iter().any(|a| a == fragment) {
        None
    } else {
        Some(format!(
            "{}: {target}: {} has no heading or anchor #{fragment}",
            file.display(),
            linked.display()
        ))
    }
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(repo().join(&file)).expect("readable");
        for target in link_targets(&text) {
            checked += 1;
            broken.extend(broken_link(&repo(), &file, &target));
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 100, "only {checked} links checked");
}

/// Shell words of a command line: quotes removed, `$VAR` and `$(...)` kept as a word.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (_, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The `ipmasq` (or `ip-masq-agent`) commands of a shell line, as argument lists for the
/// binary (`ip-masq-agent` becomes `agent`): each pipeline stage or list element whose command,
/// after `sudo`, variable assignments or a `kubectl exec ... --`, is ours; its arguments end at
/// a redirection or a comment.
fn ipmasq_commands(line: &str) -> Vec<Vec<String>> {
    let words = shell_words(line);
    let mut commands = Vec::new();
    let mut stage: Vec<String> = Vec::new();
    let mut flush = |stage: &mut Vec<String>| {
        let start = stage
            .iter()
            .position(|w| w == "ipmasq" || w == "ip-masq-agent" || w.ends_with("/ipmasq"));
        if let Some(start) = start {
            let before = &stage[..start];
            let ours = before.iter().all(|w| w == "sudo" || w.contains('='))
                || before.last().is_some_and(|w| w == "--");
            if ours {
                let mut args: Vec<String> = stage[start + 1..]
                    .iter()
                    .take_while(|w| {
                        !w.starts_with('>') && !w.starts_with("2>") && !w.starts_with('#')
                    })
                    .cloned()
                    .collect();
                if stage[start] == "ip-masq-agent" {
                    args.insert(0, "agent".to_string());
                }
                commands.push(args);
            }
        }
        stage.clear();
    };
    for word in words {
        if matches!(word.as_str(), "|" | "||" | "&&" | ";") {
            flush(&mut stage);
        } else if let Some(head) = word.strip_suffix(';') {
            stage.push(head.to_string());
            flush(&mut stage);
        } else {
            stage.push(word);
        }
    }
    flush(&mut stage);
    commands
}

/// The shell lines of a code block: a shell block's every line (continuations joined), a
/// text or console block's lines after a `$ ` prompt.
fn shell_lines(info: &str, lines: &[String]) -> Vec<String> {
    let shell = matches!(info, "sh" | "bash" | "shell" | "console");
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in lines {
        let line = line.trim();
        if line.starts_with('#') && pending.is_empty() {
            continue;
        }
        let line = match line.strip_prefix("$ ") {
            Some(command) => command,
            None if shell && !pending.is_empty() => line,
            None if shell && info != "console" => line,
            None => continue,
        };
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    out
}

/// What is wrong with one documented command, if anything: the binary, given its arguments
/// and `--help`, must print the applet's help (an unknown applet or flag, a flag given a value
/// it does not take or missing one it needs, is a usage error).
fn command_error(args: &[String]) -> Option<String> {
    let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
    argv.push("--help");
    let run = ipmasq(&argv);
    if run.code == 0 && run.stdout.contains("Usage:") {
        None
    } else {
        Some(format!(
            "`ipmasq {}` (exit {}): {}",
            args.join(" "),
            run.code,
            run.stderr.lines().next().unwrap_or("")
        ))
    }
}

#[test]
fn every_documented_command_parses() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(repo().join(&file)).expect("readable");
        for (info, lines) in parse(&text).blocks {
            for line in shell_lines(&info, &lines) {
                for args in ipmasq_commands(&line) {
                    checked += 1;
                    if let Some(error) = command_error(&args) {
                        wrong.push(format!("{}: {error}", file.display()));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "commands that do not parse:\n{}",
        wrong.join("\n")
    );
    assert!(checked > 20, "only {checked} commands checked");
}

/// The checks themselves: they find a broken link, a missing anchor and a wrong flag.
#[test]
fn the_checks_catch_what_they_are_for() {
    assert_eq!(slug("`ipmasq show`"), "ipmasq-show");
    assert_eq!(
        slug("Node pools and GKE's EgressNATPolicy"),
        "node-pools-and-gkes-egressnatpolicy"
    );
    assert_eq!(
        slug("API mode (`--config-source=api`)"),
        "api-mode---config-sourceapi"
    );
    assert_eq!(
        anchors("# A\n## A\n```\n# not a heading\n```\n"),
        ["a", "a-1"]
    );
    assert_eq!(
        link_targets("[x](a.md#b) `[y](not-a-link)`\n```\n[z](nor-this)\n```\n[w](\nno)"),
        ["a.md#b", ""]
    );
    let root = repo();
    let readme = Path::new("README.md");
    assert!(broken_link(&root, readme, "docs/guide/install.md#arm64").is_none());
    assert!(broken_link(&root, readme, "docs/guide/no-such-page.md").is_some());
    assert!(broken_link(&root, readme, "docs/guide/install.md#no-such-heading").is_some());
    assert!(broken_link(&root, Path::new("docs/guide/install.md"), "../../LICENSE").is_none());
    assert_eq!(
        ipmasq_commands("kubectl -n kube-system exec \"$pod\" -- ipmasq show; echo \"exit $?\""),
        [vec!["show".to_string()]]
    );
    assert_eq!(
        ipmasq_commands("kubectl get cm x -o yaml | sudo ipmasq validate - >/dev/null # c"),
        [vec!["validate".to_string(), "-".to_string()]]
    );
    assert!(command_error(&["show".into(), "--wide".into()]).is_none());
    assert!(command_error(&["show".into(), "--no-such-flag".into()]).is_some());
    assert!(command_error(&["no-such-applet".into()]).is_some());
    assert!(command_error(&["validate".into(), "--to-ports".into()]).is_some());
}

/// The cells of a Markdown table row as GitHub splits them: at every `|` not escaped with a
/// backslash, code spans included (GitHub splits inside them too); the outer pipes are edges.
fn table_cells(row: &str) -> usize {
    let mut separators = 0usize;
    let mut escaped = false;
    for c in row.trim().chars() {
        if c == '|' && !escaped {
            separators += 1;
        }
        escaped = c == '\\' && !escaped;
    }
    separators.saturating_sub(1)
}

/// Rows that split into another number of cells than their table's header, each as
/// "FILE:LINE: N cells, the header has M".
fn misshapen_table_rows(file: &Path, text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut header: Option<usize> = None;
    for (number, line) in parse(text).prose.iter().enumerate() {
        if !line.trim_start().starts_with('|') {
            header = None;
            continue;
        }
        let cells = table_cells(line);
        match header {
            None => header = Some(cells),
            Some(expected) if cells != expected => wrong.push(format!(
                "{}:{}: {cells} cells, the header has {expected}",
                file.display(),
                number + 1
            )),
            Some(_) => {}
        }
    }
    wrong
}

/// Every table row renders as its header's columns: a `|` in a cell (`file|api`, `PATH|-`)
/// is escaped, or GitHub cuts the row into one cell more and drops the rest.
#[test]
fn every_table_row_has_its_headers_columns() {
    let mut wrong = Vec::new();
    let mut rows = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(repo().join(&file)).expect("readable");
        rows += text.lines().filter(|l| l.starts_with('|')).count();
        wrong.extend(misshapen_table_rows(&file, &text));
    }
    assert!(
        wrong.is_empty(),
        "table rows that split wrongly:\n{}",
        wrong.join("\n")
    );
    assert!(rows > 100, "only {rows} table rows checked");
    // The check itself: an unescaped pipe in a code span is caught, an escaped one is not.
    let table = "| a | b |\n|---|---|\n| `x\\|y` | z |\n| `x|y` | z |\n";
    assert_eq!(
        misshapen_table_rows(Path::new("t.md"), table),
        ["t.md:4: 3 cells, the header has 2"]
    );
}

/// The README's 60-second tour as its lines: from the heading to the end of its `text` block.
fn tour_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let start = readme
        .find("## A 60-second tour")
        .expect("the README's tour");
    let block = &readme[start..];
    let open = block.find("```text\n").expect("the tour's text block") + "```text\n".len();
    let close = block[open..].find("```").expect("the block's end");
    block[open..open + close]
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readme_tour_is_what_ipmasq_prints_at_80_columns() {
    let dir = crate::util::Scratch::new("tour");
    let bin_dir = crate::util::binary()
        .parent()
        .expect("the binary's directory")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let lines = tour_lines();
    // Each `$ command` and the lines it printed, up to the next one.
    let mut commands: Vec<(String, Vec<String>)> = Vec::new();
    for line in &lines {
        match line.strip_prefix("$ ") {
            Some(command) => commands.push((command.to_string(), Vec::new())),
            None => commands
                .last_mut()
                .expect("the tour starts with a command")
                .1
                .push(line.clone()),
        }
    }
    let mut ran = 0;
    for (command, shown) in &commands {
        let mut expected = shown.join("\n");
        expected.push('\n');
        if let Some(file) = command.strip_prefix("cat ") {
            // The tour's files, made as it shows them.
            std::fs::write(dir.path.join(file), &expected).unwrap();
            continue;
        }
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("{command} 2>&1")])
            .current_dir(&dir.path)
            .env("PATH", &path)
            .env("COLUMNS", "80")
            .env_remove("NO_COLOR")
            .output()
            .expect("run the tour's command");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            expected,
            "the README's tour: `{command}`"
        );
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} of the tour's commands ran");
}
