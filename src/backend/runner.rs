//! Running the firewall tools: one child process with optional stdin, captured output and a
//! deadline, so a wedged iptables can never hang the agent.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The default deadline for one iptables process.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The tool processes this process is running and has not reaped: a stop that cannot wait
/// for them kills them (see [`kill_running`]). A pid is removed under the same lock that reaps
/// it, so a pid here always names our own unreaped child, never a reused pid.
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<u32>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Set once the process is stopping without waiting for its pass: no tool may run after that.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Kills every running firewall tool and every one started from now on (at once, before it
/// can write): the agent's fast stop, after which the node lock goes to a successor, which
/// must never find a tool of ours still writing. A tool killed before its commit (an
/// iptables-restore or nft transaction) has applied nothing.
pub fn stop_all() -> usize {
    STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
    kill_running()
}

/// Kills (SIGKILL) every firewall tool this process started that is still running, so a stop
/// is never held up by a wedged `iptables-restore`; the pass that waits for it then fails at
/// once. Returns how many were killed.
pub fn kill_running() -> usize {
    let pids = running();
    // Our own unreaped children: their pids cannot have been reused.
    for pid in pids
        .iter()
        .filter_map(|&pid| rustix::process::Pid::from_raw(pid as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    pids.len()
}

/// What a finished process produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Why a process could not be run to completion.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{program} not found (is iptables installed and on PATH?)")]
    NotFound { program: String },
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} did not finish within {}s and was killed", timeout.as_secs())]
    Timeout { program: String, timeout: Duration },
}

/// Runs `program args...`, feeding `stdin`, and waits at most `timeout`.
pub fn run(
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<Output, RunError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("LC_ALL", "C")
        .spawn()
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                RunError::NotFound {
                    program: program.to_string(),
                }
            } else {
                RunError::Spawn {
                    program: program.to_string(),
                    source,
                }
            }
        })?;

    let writer = match (stdin, child.stdin.take()) {
        (Some(input), Some(mut pipe)) => {
            let input = input.to_string();
            Some(std::thread::spawn(move || {
                // A child that exits early closes the pipe; its exit status tells why.
                let _ = pipe.write_all(input.as_bytes());
            }))
        }
        _ => None,
    };
    {
        // Checked under the same lock `kill_running` takes: either it sees this child, or
        // this sees the flag.
        let mut pids = running();
        if STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = child.kill();
        }
        pids.push(child.id());
    }
    let stdout_reader = spawn_reader(child.stdout.take());
    let stderr_reader = spawn_reader(child.stderr.take());
    let status = wait_with_deadline(&mut child, program, timeout)?;
    let stdout = stdout_reader.join().unwrap_or_default();
    let stderr = stderr_reader.join().unwrap_or_default();
    if let Some(w) = writer {
        let _ = w.join();
    }
    Ok(Output {
        success: status.success(),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// Drains a pipe on its own thread so a chatty child never blocks on a full pipe.
fn spawn_reader<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
    })
}

fn wait_with_deadline(
    child: &mut std::process::Child,
    program: &str,
    timeout: Duration,
) -> Result<std::process::ExitStatus, RunError> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(50);
    let pid = child.id();
    let forget = |pids: &mut Vec<u32>| pids.retain(|&p| p != pid);
    loop {
        {
            // Reaped and forgotten under one lock: `kill_running` never sees a reaped pid.
            let mut pids = running();
            match child.try_wait() {
                Ok(Some(status)) => {
                    forget(&mut pids);
                    return Ok(status);
                }
                Ok(None) => {}
                Err(source) => {
                    forget(&mut pids);
                    return Err(RunError::Spawn {
                        program: program.to_string(),
                        source,
                    });
                }
            }
        }
        if start.elapsed() >= timeout {
            let mut pids = running();
            let _ = child.kill();
            let _ = child.wait();
            forget(&mut pids);
            return Err(RunError::Timeout {
                program: program.to_string(),
                timeout,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// Where `program` is found on PATH (or itself, when it is a path that exists).
pub fn resolve(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let path = std::path::PathBuf::from(program);
        return path.is_file().then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Whether `program` can be found on PATH (or is a path that exists).
pub fn on_path(program: &str) -> bool {
    resolve(program).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_status() {
        let out = run(
            "sh",
            &["-c", "cat; echo err >&2; exit 3"],
            Some("hello"),
            DEFAULT_TIMEOUT,
        )
        .unwrap();
        assert_eq!(out.stdout, "hello");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.code, Some(3));
        assert!(!out.success);
    }

    #[test]
    fn large_stdin_does_not_deadlock() {
        let input = "x".repeat(4 << 20);
        let out = run("wc", &["-c"], Some(&input), DEFAULT_TIMEOUT).unwrap();
        assert_eq!(out.stdout.trim(), (4 << 20).to_string());
    }

    #[test]
    fn missing_program_is_reported() {
        assert!(matches!(
            run("ipmasq-no-such-tool", &[], None, DEFAULT_TIMEOUT),
            Err(RunError::NotFound { .. })
        ));
        assert!(!on_path("ipmasq-no-such-tool"));
        assert!(on_path("sh"));
    }

    #[test]
    fn deadline_kills_the_child() {
        let err = run("sleep", &["5"], None, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(err, RunError::Timeout { .. }), "{err}");
    }
}
