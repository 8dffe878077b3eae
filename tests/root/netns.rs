//! Throwaway network namespaces for root tests: each test gets its own, and everything it
//! started (daemons, the namespace itself) is removed on drop, even when the test fails.

use crate::util::{binary, Run};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Debian's interpreter (scripts/test installs it with python3-prometheus-client).
pub const PYTHON: &str = "/usr/bin/python3";

/// Fails the test with a clear message unless we are root with the tools we need.
pub fn require_root() {
    let uid = Command::new("id").arg("-u").output().expect("run id -u");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "root tests need root (CAP_NET_ADMIN) to create network namespaces: run scripts/test as root"
    );
    for tool in ["ip", "iptables-nft-save", "iptables-legacy-save", "nft"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(found, "{tool} is missing: scripts/test installs it");
    }
}

/// A named network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
    daemons: Vec<Child>,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        require_root();
        let name = format!(
            "ipmasq-{}-{}-{tag}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("run ip netns add");
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ns = Netns {
            name,
            daemons: Vec::new(),
        };
        ns.sh("ip link set lo up");
        ns
    }

    /// The running agent's state directory for this namespace's ipmasq processes: private to
    /// the test, so no test writes the machine's /run/ipmasq.
    pub fn state_dir(&self) -> PathBuf {
        std::env::temp_dir().join(format!("{}-state", self.name))
    }

    /// Runs `program` inside the namespace, with the namespace's state directory (also its
    /// last-known-good's, so no test writes the machine's /var/lib/ipmasq). ipmasq on
    /// the nftables backend runs with a PATH that has no `nft`: the backend must not need it
    /// (`nft` stays the tests' own independent reader).
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .arg(program)
            .args(args)
            .env("IPMASQ_STATE_DIR", self.state_dir())
            .env("IPMASQ_LAST_KNOWN_GOOD_DIR", self.state_dir())
            .env_remove("NO_COLOR")
            .env_remove("COLUMNS");
        let nftables = args.iter().any(|a| a.contains("nftables"));
        if program == binary() && nftables {
            cmd.env("PATH", path_without_nft());
        }
        cmd
    }

    /// Runs a program inside the namespace.
    pub fn exec(&self, program: &str, args: &[&str]) -> Run {
        self.command(Path::new(program), args)
            .stdin(Stdio::null())
            .output()
            .expect("run ip netns exec")
            .into()
    }

    /// Runs a shell script inside the namespace; panics when it fails.
    pub fn sh(&self, script: &str) -> String {
        let run = self.exec("sh", &["-c", script]);
        assert_eq!(run.code, 0, "in {}: {script}\n{}", self.name, run.stderr);
        run.stdout
    }

    /// Runs `ipmasq ARGS` inside the namespace.
    pub fn ipmasq(&self, args: &[&str]) -> Run {
        self.command(&binary(), args)
            // Tests read what a report says on whole lines; how it fits a width (80 columns
            // when piped) is root::fits_terminal's and cli::fits_terminal's.
            .env("COLUMNS", "1000")
            .stdin(Stdio::null())
            .output()
            .expect("run ipmasq in netns")
            .into()
    }

    /// A command that runs `ipmasq ARGS` in the namespace with `prefix` first on PATH (the
    /// agent resolves its tools from PATH, so a test can put fakes or an `iptables` there).
    pub fn ipmasq_with_path(&self, prefix: &Path, args: &[&str]) -> Command {
        let path = format!(
            "{}:{}",
            prefix.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let wrapper = scratch_file("with-path", "");
        executable(
            &wrapper,
            &format!("#!/bin/sh\nexport PATH='{path}'\nexec \"$@\"\n"),
        );
        let binary = binary().display().to_string();
        let mut full = vec![binary.as_str()];
        full.extend_from_slice(args);
        self.command(&wrapper, &full)
    }

    /// Starts `ipmasq ARGS` in the background; its stderr goes to `log`.
    pub fn spawn_ipmasq(&mut self, args: &[&str], log: &Path) -> u32 {
        let file = std::fs::File::create(log).expect("create daemon log");
        let child = self
            .command(&binary(), args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn ipmasq daemon");
        let pid = child.id();
        self.daemons.push(child);
        pid
    }

    /// Takes ownership of a background process started in this namespace (killed on drop).
    pub fn adopt(&mut self, child: Child) {
        self.daemons.push(child);
    }

    /// Waits for a background ipmasq to exit; its exit code, or None after `timeout`.
    pub fn wait_daemon(&mut self, pid: u32, timeout: Duration) -> Option<i32> {
        let index = self.daemons.iter().position(|c| c.id() == pid)?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.daemons[index].try_wait() {
                // try_wait reaped it; dropping the handle leaves no zombie.
                let mut reaped = self.daemons.remove(index);
                let _ = reaped.wait();
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// `iptables-VARIANT-save` (or ip6tables) of one table or all, without its comment lines.
    pub fn save(&self, variant: &str, v6: bool, table: Option<&str>) -> String {
        let tool = format!("{}tables-{variant}-save", if v6 { "ip6" } else { "ip" });
        let mut args = vec![];
        if let Some(t) = table {
            args = vec!["-t", t];
        }
        let run = self.exec(&tool, &args);
        assert_eq!(run.code, 0, "{tool}: {}", run.stderr);
        strip_comments(&run.stdout)
    }

    /// Feeds a script to `iptables-VARIANT-restore --noflush`.
    pub fn restore(&self, variant: &str, v6: bool, script: &str) {
        let tool = format!("{}tables-{variant}-restore", if v6 { "ip6" } else { "ip" });
        let path = scratch_file("restore", script);
        self.sh(&format!("{tool} --noflush < {}", path.display()));
        let _ = std::fs::remove_file(path);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for child in &mut self.daemons {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(self.state_dir());
    }
}

/// Drops iptables-save's `# Generated`/`# Completed` lines.
pub fn strip_comments(saved: &str) -> String {
    saved
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Writes an executable script (a fake tool put first on PATH by a test).
pub fn executable(path: &Path, script: &str) {
    std::fs::write(path, script).expect("write script");
    let status = Command::new("chmod").arg("+x").arg(path).status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "chmod +x {}",
        path.display()
    );
}

/// A uniquely named file in the temp dir.
pub fn scratch_file(tag: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "ipmasq-{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::write(&path, contents).expect("write scratch file");
    path
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends a signal to a process.
pub fn kill(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A PATH of one directory holding a link to every program on this PATH except `nft`
/// (made once per test run).
pub fn path_without_nft() -> PathBuf {
    static FARM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FARM.get_or_init(|| {
        // One farm per test process: two test runs at once (two worktrees) must not rebuild
        // each other's while a command resolves `ip` in it. Farms of processes gone are removed.
        const PREFIX: &str = "ipmasq-test-path-without-nft-";
        let tmp = std::env::temp_dir();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let gone = name
                .strip_prefix(PREFIX)
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
            if gone {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let farm = tmp.join(format!("{PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&farm);
        std::fs::create_dir_all(&farm).expect("create the PATH without nft");
        let path = std::env::var("PATH").unwrap_or_default();
        for dir in std::env::split_paths(&path) {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let link = farm.join(&name);
                if name == "nft" || link.exists() {
                    continue;
                }
                let _ = std::os::unix::fs::symlink(entry.path(), link);
            }
        }
        farm
    })
    .clone()
}
