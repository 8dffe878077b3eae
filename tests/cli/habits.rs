//! The house's habits, kept by tests rather than by fitting the lints: a function of more than
//! 90 lines says why it is one piece (a `// Long:` comment above it), no function takes a tuple
//! that smuggles several arguments past clippy's count (a group that travels together is a
//! named type), measured figures live in docs/benchmarks.md and not in the code's comments,
//! and the commit hook holds commit subjects to 72 characters.

use super::code_shape::{code_of, function_lengths, sources, starts_function};
use std::path::{Path, PathBuf};

/// Past this many lines a function says why it is one piece.
const SAYS_WHY_OVER: usize = 90;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The comment of a line (what follows `//` outside a literal), if it has one.
fn comment_of(line: &str) -> Option<&str> {
    // Walked as `code_of` walks a line, so a `//` inside a string literal is no comment.
    let bytes = line.as_bytes();
    let (mut i, mut in_string) = (0, false);
    while i < bytes.len() {
        match (in_string, bytes[i]) {
            (true, b'\\') => i += 1,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'/') if bytes.get(i + 1) == Some(&b'/') => return Some(&line[i..]),
            // A char literal ('"', '\\'') is skipped whole; a lifetime ('a) is not one.
            (false, b'\'') if bytes.get(i + 1) == Some(&b'\\') => i += 3,
            (false, b'\'') if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            _ => {}
        }
        i += 1;
    }
    None
}

/// Text without its `` `code` `` spans (a date in an example is no run's date).
fn without_code_spans(text: &str) -> String {
    text.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// A run's date, `2026-11-24`: not an example's time (`2026-11-26T12:00:00Z`,
/// `2026-11-26 12:03:04`).
fn holds_a_run_date(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    let digits = |from: usize, n: usize| {
        (from..from + n).all(|i| chars.get(i).is_some_and(char::is_ascii_digit))
    };
    (0..chars.len()).any(|i| {
        let starts_word = i == 0 || !chars[i - 1].is_alphanumeric();
        let date = starts_word
            && chars[i] == '2'
            && chars.get(i + 1) == Some(&'0')
            && digits(i, 4)
            && chars.get(i + 4) == Some(&'-')
            && digits(i + 5, 2)
            && chars.get(i + 7) == Some(&'-')
            && digits(i + 8, 2);
        let time_follows = matches!(chars.get(i + 10), Some('T'))
            || (chars.get(i + 10) == Some(&' ')
                && digits(i + 11, 2)
                && chars.get(i + 13) == Some(&':'));
        date && !chars.get(i + 10).is_some_and(char::is_ascii_digit) && !time_follows
    })
}

/// A figure with a unit of time or size (`20 ms`, `82 MiB`) beside a word that says it was
/// measured or seen.
fn holds_a_measured_figure(text: &str) -> bool {
    const UNITS: [&str; 9] = ["ms", "µs", "ns", "MiB", "MB", "KB", "KiB", "GiB", "GB"];
    const SEEN: [&str; 7] = ["measured", "took", "here", "was", "were", "run", "runs"];
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == 'µ'))
        .filter(|w| !w.is_empty())
        .collect();
    let figure = words
        .windows(2)
        .any(|pair| pair[0].chars().all(|c| c.is_ascii_digit()) && UNITS.contains(&pair[1]))
        || words.iter().any(|w| {
            let unit = w.trim_start_matches(|c: char| c.is_ascii_digit());
            unit.len() < w.len() && UNITS.contains(&unit)
        });
    figure
        && words
            .iter()
            .any(|w| SEEN.contains(&w.to_lowercase().as_str()))
}

#[test]
fn no_comment_holds_a_measured_figure_or_a_run_date() {
    let mut found = Vec::new();
    for (file, text) in sources() {
        for (n, line) in text.lines().enumerate() {
            let Some(comment) = comment_of(line) else {
                continue;
            };
            let comment = without_code_spans(comment);
            if holds_a_run_date(&comment) || holds_a_measured_figure(&comment) {
                found.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "measured figures belong in docs/benchmarks.md (with their command and date); the comment names the choice and points there:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_figure_reader_tells_a_measurement_from_a_rule() {
    assert!(holds_a_run_date("// over the runs of 2026-11-24 and -25"));
    assert!(!holds_a_run_date(
        "/// RFC 3339; 2026-11-26 12:03:04 is UTC"
    ));
    assert!(!holds_a_run_date("// 2026-11-26T12:03:04Z"));
    assert!(holds_a_measured_figure(
        "/// ~20 ms here), which would fall inside"
    ));
    assert!(holds_a_measured_figure("// its peak RSS was 82 MiB"));
    assert!(holds_a_measured_figure("// 3ms for a busy /tmp, measured"));
    assert!(!holds_a_measured_figure("/// a queue of at most 64 MiB"));
    assert!(!holds_a_measured_figure(
        "/// measured in docs/benchmarks.md"
    ));
    assert_eq!(comment_of("let s = \"a // b\"; // c"), Some("// c"));
    assert_eq!(comment_of("let s = \"a // b\";"), None);
    assert_eq!(
        comment_of("if c == '\"' { x } // 20 ms measured"),
        Some("// 20 ms measured")
    );
    assert_eq!(without_code_spans("a `2026-01-01` b"), "a   b");
}

/// Each function of more than [`SAYS_WHY_OVER`] lines, unless the comment block right above
/// it (doc comments, attributes) holds a line `// Long: WHY`.
fn long_functions_without_a_reason(text: &str, file: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    function_lengths(text, file)
        .into_iter()
        .filter(|(length, ..)| *length > SAYS_WHY_OVER)
        .filter(|(_, at, _)| {
            let start: usize = at
                .rsplit(':')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            let above = lines[..start - 1].iter().rev().take_while(|l| {
                let l = l.trim_start();
                l.starts_with("//") || l.starts_with("#[")
            });
            !above.into_iter().any(|l| {
                l.trim_start()
                    .strip_prefix("// Long: ")
                    .is_some_and(|why| why.len() > 20)
            })
        })
        .map(|(length, at, name)| format!("{at} {name}: {length} lines"))
        .collect()
}

#[test]
fn a_function_over_90_lines_says_why_it_is_one_piece() {
    let found: Vec<String> = sources()
        .iter()
        .flat_map(|(file, text)| long_functions_without_a_reason(text, file))
        .collect();
    assert!(
        found.is_empty(),
        "split these by concept, or say above each why it is one piece (`// Long: …`):\n  {}",
        found.join("\n  ")
    );
    let reasoned = "// Long: the steps share one borrow and must run in this order.\nfn f() {\n"
        .to_string()
        + &"    x();\n".repeat(95)
        + "}\n";
    assert!(long_functions_without_a_reason(&reasoned, "x.rs").is_empty());
    let bare = reasoned.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(long_functions_without_a_reason(&bare, "x.rs").len(), 1);
}

/// The parameters of each function whose signature starts on one of `lines`: (file:line, name,
/// the parameters' text).
fn signatures(text: &str, file: &str) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(rest) = starts_function(line) else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let signature: String = lines[start..]
            .iter()
            .take(40)
            .map(|l| code_of(l))
            .collect::<Vec<_>>()
            .join(" ");
        // The parameters' parenthesis: the first after the name and its generics (not
        // `pub(crate)`'s, nor a bound's `Fn()`).
        let mut after_name = signature
            .find(&format!("fn {name}"))
            .map_or(0, |at| at + 3 + name.len());
        if signature[after_name..].starts_with('<') {
            let mut depth = 0;
            for (i, c) in signature[after_name..].char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' if !signature[..after_name + i].ends_with('-') => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    after_name += i + 1;
                    break;
                }
            }
        }
        let Some(open) = signature[after_name..].find('(').map(|at| after_name + at) else {
            continue;
        };
        let mut depth = 0;
        let mut end = open;
        for (i, c) in signature[open..].char_indices() {
            match c {
                '(' | '[' | '<' => depth += 1,
                ')' | ']' => depth -= 1,
                '>' if !signature[..open + i].ends_with('-') => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + i;
                break;
            }
        }
        found.push((
            format!("{file}:{}", start + 1),
            name,
            signature[open + 1..end].to_string(),
        ));
    }
    found
}

/// The parameters (split at top-level commas) that are tuples: a pattern `(a, b): …` or a type
/// `(A, B)`, `&(A, B)`; not `()`, a trait object `&(dyn …)` or an `impl` in parentheses.
fn tuple_parameters(parameters: &str) -> Vec<String> {
    let mut items = Vec::new();
    let (mut depth, mut item) = (0i32, String::new());
    let mut previous = ' ';
    for c in parameters.chars() {
        let arrow = c == '>' && previous == '-';
        previous = c;
        match c {
            '(' | '[' | '<' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '>' if !arrow => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items
        .into_iter()
        .map(|item| item.trim().to_string())
        .filter(|item| {
            let (pattern, ty) = item.split_once(':').unwrap_or((item.as_str(), ""));
            let ty = ty
                .trim()
                .trim_start_matches('&')
                .trim_start_matches("mut ")
                .trim_start();
            let tuple_type = ty.starts_with('(')
                && !ty.starts_with("()")
                && !ty[1..].trim_start().starts_with("dyn ")
                && !ty[1..].trim_start().starts_with("impl ");
            pattern.trim().starts_with('(') || tuple_type
        })
        .collect()
}

#[test]
fn no_function_takes_a_tuple_of_arguments() {
    let found: Vec<String> = sources()
        .iter()
        .flat_map(|(file, text)| signatures(text, file))
        .flat_map(|(at, name, parameters)| {
            tuple_parameters(&parameters)
                .into_iter()
                .map(move |tuple| format!("{at} {name}: {tuple}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "a group of parameters that travels together is a named type, not a tuple:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_tuple_reader_sees_patterns_and_types_and_not_trait_objects() {
    assert_eq!(
        tuple_parameters("&self, (a, b): (u32, u32), c: u8"),
        ["(a, b): (u32, u32)"]
    );
    assert_eq!(
        tuple_parameters("x: &(Event<'_>, Span)"),
        ["x: &(Event<'_>, Span)"]
    );
    assert!(tuple_parameters("err: &(dyn std::error::Error + 'static)").is_empty());
    assert!(tuple_parameters("f: impl Fn(u32) -> Vec<u8>, m: HashMap<(u8, u8), u8>").is_empty());
    assert!(tuple_parameters("").is_empty());
    let generic = "fn whole_only<S, Start: Fn() -> S>((a, b): (u8, u8)) {\n}\n";
    let found = signatures(generic, "x.rs");
    assert_eq!(tuple_parameters(&found[0].2), ["(a, b): (u8, u8)"]);
}

/// The commit hook (scripts/hooks/commit-msg), run on a message: whether it accepts it.
fn hook_accepts(message: &str) -> bool {
    let dir = std::env::temp_dir().join(format!("ipmasq-hook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join(format!("msg-{}", message.len()));
    std::fs::write(&file, message).expect("write the message");
    let status = std::process::Command::new(root().join("scripts/hooks/commit-msg"))
        .arg(&file)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run scripts/hooks/commit-msg");
    let _ = std::fs::remove_dir_all(&dir);
    status.success()
}

#[test]
fn the_commit_hook_holds_subjects_to_72_characters_and_a_blank_line() {
    assert!(hook_accepts("Floors checked by a test\n\nThe story.\n"));
    assert!(hook_accepts(&format!("{}\n", "x".repeat(72))));
    assert!(!hook_accepts(&format!("{}\n", "x".repeat(73))));
    assert!(!hook_accepts("A subject\nand a body glued to it\n"));
    assert!(!hook_accepts("\n\n"));
    assert!(hook_accepts("# a comment git strips\nA subject\n"));
    assert!(hook_accepts(
        "#42 fixed: a message of a comment-like line alone\n"
    ));
    assert!(hook_accepts(
        "\n\nA subject after blank lines\n\nThe story.\n"
    ));
    assert!(
        hook_accepts(&format!("{}\n", "é".repeat(72))),
        "characters, not bytes"
    );
    assert!(Path::new(&root().join("scripts/hooks/commit-msg")).exists());
}
