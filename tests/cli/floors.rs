//! The house keeps its floors: every top-level module of `src/` stands on a floor of the table
//! in docs/ARCHITECTURE.md ("Floors"), and no import runs up a floor or closes a cycle between
//! modules. Imports are read from the code itself (comments and literals out): every
//! `use crate::…` (groups included), every inline `crate::…` path, and every `super::` that
//! climbs out of a top-level module's folder. A `super::` is resolved by its file's depth:
//! inside an inline `mod` (a `mod tests { … }`) one more `super::` is needed to leave the
//! folder, which this reader does not count (the crate writes `crate::` there).

use super::code_shape::{code_of, rust_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The floor of each module, read from the table under "### Floors".
fn floor_table(architecture: &str) -> BTreeMap<String, usize> {
    let section = architecture
        .split("\n### Floors\n")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a \"### Floors\" section");
    let section = section.split("\n### ").next().unwrap_or(section);
    let mut floors = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Ok(floor) = cells[1].parse::<usize>() else {
            continue; // the header
        };
        for module in cells[2].split(',') {
            let module = module.trim().trim_matches('`').to_string();
            let previous = floors.insert(module.clone(), floor);
            assert!(previous.is_none(), "{module} stands on two floors");
        }
    }
    floors
}

/// The top-level modules `src/lib.rs` declares.
fn declared_modules() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("read src/lib.rs");
    lib.lines()
        .map(code_of)
        .filter_map(|code| {
            let code = code.trim().trim_end_matches(';');
            let name = code.rsplit_once("mod ")?.1.trim();
            (!name.contains('{') && !name.is_empty()).then(|| name.to_string())
        })
        .filter(|name| name != "bench")
        .collect()
}

/// A file's place: its top-level module and how deep below `src/` its module is
/// (`src/text.rs` and `src/agent/mod.rs` are 1, `src/agent/health.rs` is 2).
fn place(relative: &Path) -> (String, usize) {
    let parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let top = parts[0].trim_end_matches(".rs").to_string();
    let last = parts.last().expect("a file");
    let depth = if last == "mod.rs" {
        parts.len() - 1
    } else {
        parts.len()
    };
    (top, depth)
}

/// The first segment of each path a `crate::{…}` group names, nested groups included only at
/// their top.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut item) = (0usize, String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                heads.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        if depth == 0 {
            item.push(c);
        }
    }
    heads.push(item);
    heads
        .iter()
        .filter_map(|item| {
            let head = item.trim().split("::").next()?.trim();
            (!head.is_empty()).then(|| head.to_string())
        })
        .collect()
}

/// The balanced `{…}` text that starts at `open` (a `{`), without its braces.
fn braced(code: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &code[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    &code[open + 1..]
}

/// The crate's top-level modules a file's code names, with the line of each.
fn imports_of(code: &str, depth: usize) -> Vec<(String, usize)> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    // `crate::x`, `crate::{x, y}`, and `super::super::x` from deep enough to leave the folder.
    let climb = "super::".repeat(depth);
    let mut starts: Vec<(usize, usize)> = code
        .match_indices("crate::")
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':')
        })
        .map(|(at, m)| (at, at + m.len()))
        .collect();
    starts.extend(
        code.match_indices(&climb)
            .filter(|(at, _)| {
                let before = code[..*at].chars().next_back();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                    && !code[at + climb.len()..].starts_with("super::")
            })
            .map(|(at, m)| (at, at + m.len())),
    );
    for (at, rest) in starts {
        let tail = &code[rest..];
        if tail.starts_with('{') {
            for head in group_heads(braced(code, rest)) {
                found.push((head, line_of(at)));
            }
        } else {
            let head: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push((head, line_of(at)));
        }
    }
    found
}

/// Every import from one top-level module into another: (from, to) → the places.
fn imports() -> BTreeMap<(String, String), Vec<String>> {
    let modules = declared_modules();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    files.sort();
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(root().join("src")).expect("under src");
        if relative == Path::new("lib.rs") || relative == Path::new("main.rs") {
            continue;
        }
        let (top, depth) = place(relative);
        let text = std::fs::read_to_string(&path).expect("read a source file");
        let code: String = text.lines().map(|l| code_of(l) + "\n").collect();
        for (to, line) in imports_of(&code, depth) {
            if to != top && modules.contains(&to) {
                edges
                    .entry((top.clone(), to))
                    .or_default()
                    .push(format!("src/{}:{line}", relative.display()));
            }
        }
    }
    edges
}

/// The modules that sit on a cycle, grouped: each group is a set of modules that all reach
/// one another (a strongly connected component of more than one module), sorted.
fn cycles(edges: &BTreeSet<(String, String)>) -> BTreeSet<Vec<String>> {
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(at) = todo.pop() {
            for (_, to) in edges.iter().filter(|(a, _)| *a == at) {
                if seen.insert(to.clone()) {
                    todo.push(to.clone());
                }
            }
        }
        seen
    };
    let modules: BTreeSet<String> = edges
        .iter()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let reached: BTreeMap<&String, BTreeSet<String>> =
        modules.iter().map(|m| (m, reach(m))).collect();
    modules
        .iter()
        .filter(|m| reached[m].contains(*m))
        .map(|m| {
            modules
                .iter()
                .filter(|other| reached[m].contains(*other) && reached[other].contains(m))
                .cloned()
                .collect::<Vec<String>>()
        })
        .collect()
}

#[test]
fn every_module_stands_on_one_floor_of_the_table() {
    let architecture =
        std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("read the design");
    let floors = floor_table(&architecture);
    let declared = declared_modules();
    assert!(declared.len() >= 10, "read src/lib.rs: {declared:?}");
    let missing: Vec<&String> = declared
        .iter()
        .filter(|m| !floors.contains_key(*m))
        .collect();
    let unknown: Vec<&String> = floors.keys().filter(|m| !declared.contains(*m)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/ARCHITECTURE.md's floor table lacks {missing:?} and names {unknown:?}, which src/lib.rs does not declare"
    );
}

#[test]
fn no_import_runs_up_a_floor_or_closes_a_cycle() {
    let architecture =
        std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("read the design");
    let floors = floor_table(&architecture);
    let edges = imports();
    assert!(edges.len() > 30, "the imports were read: {edges:?}");
    let upward: Vec<String> = edges
        .iter()
        .filter(|((from, to), _)| floors.get(to) > floors.get(from))
        .map(|((from, to), at)| {
            let floor = |m: &String| floors.get(m).map_or("none".to_string(), |f| f.to_string());
            format!(
                "{from} (floor {}) uses {to} (floor {}) at {}",
                floor(from),
                floor(to),
                at.join(", ")
            )
        })
        .collect();
    let cycles: Vec<String> = cycles(&edges.keys().cloned().collect())
        .into_iter()
        .map(|group| format!("{} reach one another", group.join(", ")))
        .collect();
    assert!(
        upward.is_empty() && cycles.is_empty(),
        "imports that run up a floor:\n  {}\nmodules on a cycle:\n  {}",
        upward.join("\n  "),
        cycles.join("\n  ")
    );
}

/// The reader sees what it must: groups, nested groups, inline paths and a `super::` that
/// leaves the folder, and not a path inside a longer name.
#[test]
fn the_import_reader_reads_every_spelling() {
    let code = "use crate::{plan::{A, B}, config};\nfn f() { crate::text::plural(1, \"x\"); my_crate::agent::x(); }\nuse super::super::backend::X;\nuse super::sibling;\n";
    let heads: Vec<String> = imports_of(code, 2).into_iter().map(|(m, _)| m).collect();
    assert_eq!(heads, ["plan", "config", "text", "backend"]);
    let lines: Vec<usize> = imports_of(code, 2).into_iter().map(|(_, l)| l).collect();
    assert_eq!(lines, [1, 1, 2, 3]);
    let ring: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(
        cycles(&ring).into_iter().collect::<Vec<_>>(),
        [["a", "b", "c"]]
    );
}
