//! Golden files of rendered rules: a test renders every flag combination and compares it with
//! the committed file under `tests/data/golden/`; `IPMASQ_UPDATE_GOLDEN=1 cargo test golden`
//! rewrites the files after a deliberate change.

/// Compares `rendered` with `tests/data/golden/NAME`, naming the first line that differs.
pub(crate) fn check(name: &str, rendered: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/golden")
        .join(name);
    if std::env::var_os("IPMASQ_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create golden dir");
        std::fs::write(&path, rendered).expect("write golden file");
    }
    let golden =
        std::fs::read_to_string(&path).expect("golden file (IPMASQ_UPDATE_GOLDEN=1 creates it)");
    if golden != rendered {
        let first = golden
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(golden.lines().count().min(rendered.lines().count()));
        panic!(
            "rendered output differs from {} at line {}:\n  golden: {:?}\n  now:    {:?}\n(rerun with IPMASQ_UPDATE_GOLDEN=1 after a deliberate change)",
            path.display(),
            first + 1,
            golden.lines().nth(first),
            rendered.lines().nth(first)
        );
    }
}
