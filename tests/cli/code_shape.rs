//! The shape of the code itself: no function of `src/` longer than 100 lines (a long one is
//! split along its concerns, not waived), every module opens with a `//!` line, and
//! docs/ARCHITECTURE.md names every source and test file, and no file that does not exist.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const MAX_FUNCTION_LINES: usize = 100;

/// Every `.rs` file under `dir`, recursively, appended to `out`.
pub(super) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every file of `src/` with its text, named `src/…`, sorted.
pub(super) fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(root).expect("under the root");
            let text = std::fs::read_to_string(&path).expect("read a source file");
            (relative.display().to_string().replace('\\', "/"), text)
        })
        .collect()
}

/// A line's code for brace counting: string and char literals and `//` comments removed.
pub(super) fn code_of(line: &str) -> String {
    let mut code = String::new();
    let mut chars = line.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match (in_string, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => in_string = false,
            (true, _) => {}
            (false, '"') => in_string = true,
            (false, '/') if chars.peek() == Some(&'/') => break,
            (false, '\'') => {
                // A char literal ('{', '\n') or a lifetime ('a): skip a literal only.
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    chars.nth(2);
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                }
            }
            (false, c) => code.push(c),
        }
    }
    code
}

/// Whether a line starts a function definition (not a declaration in a trait).
pub(super) fn starts_function(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "async ",
        "const ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    if rest.starts_with("pub(in ") {
        rest = rest.split_once(") ").map_or(rest, |(_, r)| r);
    }
    let name = rest.strip_prefix("fn ")?;
    (!line.trim_end().ends_with(';')).then_some(name)
}

/// `(lines, file:line, name)` of every function in `text`.
pub(super) fn function_lengths(text: &str, file: &str) -> Vec<(usize, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(signature) = starts_function(line) else {
            continue;
        };
        let name: String = signature
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let (mut depth, mut opened) = (0i64, false);
        for (offset, body) in lines[start..].iter().enumerate() {
            let code = code_of(body);
            if !opened && code.trim_end().ends_with(';') {
                break;
            }
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth == 0 {
                found.push((offset + 1, format!("{file}:{}", start + 1), name.clone()));
                break;
            }
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_100_lines() {
    let mut files = Vec::new();
    rust_files(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src").as_path(),
        &mut files,
    );
    let mut long = Vec::new();
    let mut counted = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        let lengths = function_lengths(&text, &file.display().to_string());
        counted += lengths.len();
        long.extend(
            lengths
                .into_iter()
                .filter(|(n, ..)| *n > MAX_FUNCTION_LINES),
        );
    }
    assert!(counted > 500, "the scan found only {counted} functions");
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines: {long:#?}"
    );
}

#[test]
fn the_length_scan_counts_a_body_and_skips_braces_in_literals() {
    let text = "fn short() {\n    let s = \"{{{\";\n    let c = '{';\n}\n\npub(crate) fn two() -> u8 { 2 }\n";
    let found = function_lengths(text, "x.rs");
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!((found[0].0, found[0].2.as_str()), (4, "short"));
    assert_eq!((found[1].0, found[1].2.as_str()), (1, "two"));
}

#[test]
fn every_module_says_what_it_is_for() {
    let mut files = Vec::new();
    rust_files(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src").as_path(),
        &mut files,
    );
    let silent: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(silent.is_empty(), "modules without a //! line: {silent:?}");
}

/// The folders whose every file docs/ARCHITECTURE.md names, relative to the crate.
const MAPPED: [&str; 3] = ["src", "tests", "fuzz/fuzz_targets"];
/// Under [`MAPPED`], what the map names as a folder, not file by file.
const MAPPED_AS_FOLDERS: [&str; 1] = ["tests/data"];

/// Every file under `dir` (recursively), as a path relative to `root` with `/` separators.
fn files_under(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        let relative = path
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        if MAPPED_AS_FOLDERS.contains(&relative.as_str()) {
            continue;
        }
        if path.is_dir() {
            files_under(root, &path, out);
        } else {
            out.push(relative);
        }
    }
}

/// The files the map must name: every file of the [`MAPPED`] folders under `root`.
fn files_to_map(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for dir in MAPPED {
        files_under(root, &root.join(dir), &mut files);
    }
    files.sort();
    files
}

/// The map's text outside fenced blocks (the data-flow picture).
fn prose(doc: &str) -> String {
    let mut fenced = false;
    let mut kept = String::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The files the map gives a row of their own, with a job: `| `PATH` | what it does |`.
fn files_with_a_row(doc: &str) -> BTreeSet<String> {
    prose(doc)
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (name, job) = (cells.get(1)?, cells.get(2)?);
            let path = name.strip_prefix('`')?.strip_suffix('`')?;
            (!job.is_empty() && !path.ends_with('/')).then(|| path.to_string())
        })
        .collect()
}

/// Every name in backquotes that reads as a file or folder of the crate: one under a
/// [`MAPPED`] folder, or a source file named by a shorter path (`iptables/diff.rs`).
fn path_mentions(doc: &str) -> BTreeSet<String> {
    prose(doc)
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| !code.contains(char::is_whitespace) && !code.contains('*'))
        .filter(|code| {
            MAPPED
                .iter()
                .any(|dir| code.starts_with(&format!("{dir}/")))
                || code.ends_with(".rs")
        })
        .map(str::to_string)
        .collect()
}

/// Whether `mention` names a file or folder under `root`: as written, or as the end of the
/// path of a mapped file (`select.rs`, `iptables/diff.rs`).
fn exists(root: &Path, mention: &str, files: &[String]) -> bool {
    root.join(mention).exists()
        || files
            .iter()
            .any(|file| file.ends_with(&format!("/{mention}")))
}

/// `(files the map does not name, names in the map that no file answers)`.
fn unmapped_and_dangling(root: &Path, doc: &str) -> (Vec<String>, Vec<String>) {
    let files = files_to_map(root);
    let named = files_with_a_row(doc);
    let unmapped = files
        .iter()
        .filter(|file| !named.contains(*file))
        .cloned()
        .collect();
    let dangling = path_mentions(doc)
        .into_iter()
        .filter(|mention| !exists(root, mention, &files))
        .collect();
    (unmapped, dangling)
}

#[test]
fn the_architecture_map_names_every_file_and_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("read the map");
    assert!(
        files_to_map(root).len() > 100,
        "the scan found too few files"
    );
    let (unmapped, dangling) = unmapped_and_dangling(root, &doc);
    let mut wrong = Vec::new();
    if !unmapped.is_empty() {
        wrong.push(format!(
            "docs/ARCHITECTURE.md does not name {unmapped:#?}\nAdd a row `| `PATH` | its job in \
             one line |` for each to the table of its folder in the Layout section."
        ));
    }
    if !dangling.is_empty() {
        wrong.push(format!(
            "docs/ARCHITECTURE.md names what does not exist: {dangling:#?}\nWrite the path the \
             file has now (a moved file keeps its one row, under its new path), or remove the \
             name."
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_map_check_finds_an_unnamed_file_and_a_stale_name() {
    let tree = crate::util::Scratch::new("architecture-map");
    std::fs::create_dir_all(tree.path.join("src")).expect("src");
    std::fs::create_dir_all(tree.path.join("tests/data")).expect("tests/data");
    tree.write("src/lib.rs", "//! lib\n");
    tree.write("src/new.rs", "//! new\n");
    tree.write("tests/data/golden.txt", "data\n");
    let doc = "```\n`src/pictured.rs`\n```\n| file | job |\n|---|---|\n\
               | `src/lib.rs` | the crate |\n| `src/gone.rs` | moved away |\n\
               Prose names `lib.rs` and `old/name.rs`.\n";
    let (unmapped, dangling) = unmapped_and_dangling(&tree.path, doc);
    assert_eq!(unmapped, ["src/new.rs"]);
    assert_eq!(dangling, ["old/name.rs", "src/gone.rs"]);
}
