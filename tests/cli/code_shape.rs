//! The shape of the code itself: no function of `src/` longer than 100 lines (a long one is
//! split along its concerns, not waived), and every module opens with a `//!` line.

use std::path::{Path, PathBuf};

const MAX_FUNCTION_LINES: usize = 100;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A line's code for brace counting: string and char literals and `//` comments removed.
fn code_of(line: &str) -> String {
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
fn starts_function(line: &str) -> Option<&str> {
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
fn function_lengths(text: &str, file: &str) -> Vec<(usize, String, String)> {
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
