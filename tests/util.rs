//! Helpers shared by the integration tests: running the binary and scratch directories.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Path of the binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ipmasq"))
}

/// The repository's test data directory.
pub fn data(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(relative)
}

/// Runs the generator `script` of tests/hostile/ (python3, standard library only) to write its
/// hostile inputs into `dir`.
pub fn generate_hostile_inputs(script: &str, dir: &Path) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hostile")
        .join(script);
    let out = Command::new("python3")
        .arg(&path)
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A finished run of the binary.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Runs `ipmasq ARGS...` with no stdin.
pub fn ipmasq(args: &[&str]) -> Run {
    run_program(&binary(), args, None)
}

/// Runs `ipmasq ARGS...` feeding `stdin`.
pub fn ipmasq_with_stdin(args: &[&str], stdin: &str) -> Run {
    run_program(&binary(), args, Some(stdin))
}

/// Runs any program (e.g. a symlink to the binary) with the given args and stdin.
pub fn run_program(program: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    // The runner's terminal width is not the test's: text reports keep their lines whole.
    let mut child = Command::new(program)
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("wait for ipmasq").into()
}

/// A directory removed when dropped.
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("ipmasq-it-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create scratch dir");
        Scratch { path }
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, contents).expect("write scratch file");
        path
    }

    /// The directory as a string argument.
    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("scratch paths are UTF-8")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Runs `ipmasq ARGS...` and reports its peak resident memory in KiB (the kernel's `ru_maxrss`
/// of the waited-for child, read by python3's `resource`), with its output.
pub fn ipmasq_peak_rss(args: &[&str]) -> (Run, u64) {
    peak_rss_of(&[], args)
}

/// [`ipmasq_peak_rss`] inside network namespace `netns`, with `state_dir` as the state
/// and last-known-good directory (`ip netns exec` runs python3, which runs ipmasq: the peak is
/// ipmasq's alone).
pub fn ipmasq_peak_rss_in(netns: &str, state_dir: &Path, args: &[&str]) -> (Run, u64) {
    let env = format!("IPMASQ_STATE_DIR={}", state_dir.display());
    let saved = format!("IPMASQ_LAST_KNOWN_GOOD_DIR={}", state_dir.display());
    peak_rss_of(&["ip", "netns", "exec", netns, "env", &env, &saved], args)
}

fn peak_rss_of(wrapper: &[&str], args: &[&str]) -> (Run, u64) {
    const MEASURE: &str = "import resource, subprocess, sys\n\
        p = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True)\n\
        sys.stdout.buffer.write(p.stdout)\n\
        sys.stderr.buffer.write(p.stderr)\n\
        sys.stderr.write('\\npeak-rss-kib=%d exit=%d\\n' % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode))\n";
    let program = binary();
    let mut full = wrapper.to_vec();
    full.extend_from_slice(&[
        "python3",
        "-c",
        MEASURE,
        program.to_str().expect("UTF-8 path"),
    ]);
    full.extend_from_slice(args);
    let mut run = run_program(Path::new(full[0]), &full[1..], None);
    let tail = run
        .stderr
        .rfind("\npeak-rss-kib=")
        .expect("python3 reports the peak");
    let report = run.stderr.split_off(tail);
    let field = |name: &str| -> i64 {
        let start = report.find(name).expect("field") + name.len();
        report[start..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    run.code = field("exit=") as i32;
    (run, field("peak-rss-kib=") as u64)
}
