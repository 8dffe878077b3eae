//! Build script: the commit the binary is built from, for `ipmasq --version` (IPMASQ_COMMIT
//! overrides it, e.g. in an image built without `.git`; "unknown" when neither says).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=IPMASQ_COMMIT");
    // HEAD, the branch it points to (moved by every commit) and the index (edits staged).
    let mut watched = vec![
        ".git/HEAD".to_string(),
        ".git/index".to_string(),
        ".git/packed-refs".to_string(),
    ];
    if let Ok(head) = std::fs::read_to_string(".git/HEAD") {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            watched.push(format!(".git/{branch}"));
        }
    }
    for path in watched {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("IPMASQ_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=IPMASQ_COMMIT={commit}");
}

/// The short HEAD commit, with `-dirty` when the tree has uncommitted changes.
fn git_commit() -> Option<String> {
    let run = |args: &[&str]| Command::new("git").args(args).output().ok();
    let head = run(&["rev-parse", "--short=12", "HEAD"]).filter(|o| o.status.success())?;
    let mut commit = String::from_utf8(head.stdout).ok()?.trim().to_string();
    let clean = run(&["diff", "--quiet", "HEAD", "--"]).is_some_and(|o| o.status.success());
    if !clean {
        commit.push_str("-dirty");
    }
    Some(commit)
}
