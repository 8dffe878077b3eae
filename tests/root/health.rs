//! The agent's /healthz, /readyz and /metrics with the real binary in a namespace: every
//! state (healthy, invalid config after a good one, invalid at start, apply failing), the
//! metrics parsed by Prometheus' own parser, counters across a drift repair, and a stalled
//! client that must not delay a sync.

use super::netns::{scratch_file, wait_until, Netns, PYTHON};
use crate::util::Scratch;
use std::process::{Command, Stdio};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(20);
pub(super) const ADDR: &str = "127.0.0.1:9723";

/// GET inside the namespace: (status, body).
/// The agent's successful syncs so far (`ipmasq_syncs_total{result="success"}` on /metrics).
pub(super) fn successful_syncs(ns: &Netns) -> u64 {
    let (_, body) = get(ns, "/metrics");
    body.lines()
        .find(|l| l.starts_with("ipmasq_syncs_total{result=\"success\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub(super) fn get(ns: &Netns, path: &str) -> (u16, String) {
    get_accepting(ns, path, None).0
}

/// GET `path` with an `Accept` header: the status and body, and the Content-Type.
fn get_accepting(ns: &Netns, path: &str, accept: Option<&str>) -> ((u16, String), String) {
    let headers = accept.map_or(String::new(), |a| format!("{{'Accept': '{a}'}}"));
    let headers = if headers.is_empty() {
        "{}".to_string()
    } else {
        headers
    };
    let script = format!(
        "import urllib.request, urllib.error\n\
         req = urllib.request.Request('http://{ADDR}{path}', headers={headers})\n\
         try:\n    r = urllib.request.urlopen(req, timeout=5); print(r.status); print(r.headers.get('Content-Type')); print(r.read().decode(), end='')\n\
         except urllib.error.HTTPError as e:\n    print(e.code); print(e.headers.get('Content-Type')); print(e.read().decode(), end='')\n"
    );
    let run = ns.exec(PYTHON, &["-c", &script]);
    assert_eq!(run.code, 0, "GET {path}: {}", run.stderr);
    let mut parts = run.stdout.splitn(3, '\n');
    let code = parts.next().unwrap_or_default().trim().parse().unwrap_or(0);
    let content_type = parts.next().unwrap_or_default().to_string();
    (
        (code, parts.next().unwrap_or_default().to_string()),
        content_type,
    )
}

/// The value of one sample line of the exposition, e.g. `ipmasq_syncs_total{result="success"}`.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l[name.len()..].trim().parse().ok())
}

struct Agent {
    ns: Netns,
    dir: Scratch,
    log: std::path::PathBuf,
}

impl Agent {
    fn start(tag: &str, config: &str, path_prefix: Option<&std::path::Path>) -> Agent {
        let mut ns = Netns::new(tag);
        let dir = Scratch::new(&format!("health-{tag}"));
        std::fs::write(dir.path.join("config"), config).unwrap();
        let log = dir.path.join("agent.log");
        let config_flag = format!("--config={}", dir.path.join("config").display());
        let args = [
            "agent",
            "--iptables-mode=nft",
            &config_flag,
            &format!("--metrics-addr={ADDR}"),
        ];
        match path_prefix {
            None => {
                ns.spawn_ipmasq(&args, &log);
            }
            Some(prefix) => {
                // A PATH whose iptables-nft-restore fails: the agent resolves tools at start.
                let path = format!("{}:{}", prefix.display(), std::env::var("PATH").unwrap());
                let wrapper = scratch_file(
                    "with-path",
                    &format!("#!/bin/sh\nexport PATH='{path}'\nexec \"$@\"\n"),
                );
                Command::new("chmod")
                    .arg("+x")
                    .arg(&wrapper)
                    .status()
                    .unwrap();
                let mut full = vec![crate::util::binary().display().to_string()];
                full.extend(args.iter().map(|a| a.to_string()));
                let refs: Vec<&str> = full.iter().map(String::as_str).collect();
                let file = std::fs::File::create(&log).unwrap();
                let child = ns
                    .command(&wrapper, &refs)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(file)
                    .spawn()
                    .unwrap();
                ns.adopt(child);
            }
        }
        let agent = Agent { ns, dir, log };
        assert!(
            wait_until(PATIENCE, || agent.log().contains("pass")
                || agent.log().contains("rules installed")
                || agent.log().contains("rejected")
                || agent.log().contains("sync failed")),
            "agent did not start: {}",
            agent.log()
        );
        assert!(wait_until(PATIENCE, || get(&agent.ns, "/healthz").0 != 0));
        agent
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn write_config(&self, text: &str) {
        std::fs::write(self.dir.path.join("config"), text).unwrap();
    }
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn healthy_then_invalid_after_good_then_drift_repair() {
    let agent = Agent::start("healthy", "resyncInterval: 200ms\n", None);
    assert!(wait_until(PATIENCE, || get(&agent.ns, "/readyz").0 == 200));
    assert_eq!(get(&agent.ns, "/healthz"), (200, "ok\n".into()));
    let (code, metrics) = get(&agent.ns, "/metrics");
    assert_eq!(code, 200);
    assert!(sample(&metrics, "ipmasq_syncs_total{result=\"success\"}").unwrap() >= 1.0);
    assert_eq!(sample(&metrics, "ipmasq_config_current"), Some(1.0));
    assert_eq!(sample(&metrics, "ipmasq_non_masquerade_cidrs"), Some(3.0));
    assert_eq!(
        sample(
            &metrics,
            "ipmasq_rules{family=\"ipv4\",backend=\"iptables-nft\"}"
        ),
        Some(5.0)
    );

    // Without an Accept header: the Prometheus text format, which its text parser reads.
    let text_parse = format!(
        "from prometheus_client.parser import text_string_to_metric_families as p\n\
         print(' '.join(sorted(f.name for f in p(open('{}').read()))))\n",
        scratch_file("metrics-text", &metrics).display()
    );
    let parsed_text = agent.ns.exec(PYTHON, &["-c", &text_parse]);
    assert_eq!(parsed_text.code, 0, "{}\n{metrics}", parsed_text.stderr);
    assert!(!metrics.contains("# EOF"), "{metrics}");
    // Asked for OpenMetrics (as a Prometheus server asks): the OpenMetrics parser reads it.
    let ((code, metrics), content_type) = get_accepting(
        &agent.ns,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(code, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let parse = format!(
        "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
         names = sorted(f.name for f in p(open('{}').read()))\nprint(' '.join(names))\n",
        scratch_file("metrics", &metrics).display()
    );
    let parsed = agent.ns.exec(PYTHON, &["-c", &parse]);
    assert_eq!(
        parsed.code, 0,
        "the OpenMetrics parser rejected it: {}\n{metrics}",
        parsed.stderr
    );
    for family in [
        "ipmasq_syncs",
        "ipmasq_sync_duration_seconds",
        "ipmasq_drift_repairs",
        "ipmasq_config_reloads",
        "ipmasq_config_current",
        "ipmasq_last_successful_sync_age_seconds",
        "ipmasq_rules",
        "ipmasq_non_masquerade_cidrs",
        "ipmasq_build_info",
    ] {
        assert!(
            parsed.stdout.split_whitespace().any(|n| n == family),
            "{family} in {}",
            parsed.stdout
        );
    }
    eprintln!("one scrape:\n{metrics}");
    // The format follows the weights (RFC 9110), not the mere mention of OpenMetrics.
    for (accept, openmetrics) in [
        ("text/plain;q=0.9,application/openmetrics-text;q=0.1", false),
        ("application/openmetrics-text;q=0", false),
        ("*/*", false),
        ("text/plain;q=0.1,application/openmetrics-text;q=0.9", true),
    ] {
        let ((code, body), content_type) = get_accepting(&agent.ns, "/metrics", Some(accept));
        assert_eq!(code, 200, "{accept}");
        assert_eq!(
            (
                content_type.starts_with("application/openmetrics-text"),
                body.contains("# EOF")
            ),
            (openmetrics, openmetrics),
            "Accept: {accept} got {content_type}"
        );
        if !openmetrics {
            assert!(
                content_type.starts_with("text/plain; version=0.0.4"),
                "{accept}: {content_type}"
            );
        }
    }

    // A drift repair moves its counter.
    let repaired =
        |m: &str| sample(m, "ipmasq_drift_repairs_total{kind=\"rules_differ\"}").unwrap_or(0.0);
    let before = repaired(&metrics);
    agent.ns.sh("iptables-nft -t nat -F IP-MASQ-AGENT");
    assert!(wait_until(PATIENCE, || repaired(
        &get(&agent.ns, "/metrics").1
    ) == before + 1.0));

    // An invalid config after a good one: still alive and ready (the last good config is
    // enforced), but the config on disk is not the one in force.
    agent.write_config("resyncInterval: 200ms\nnonMasqueradeCIDRs: [10.1.2.3/8]\n");
    assert!(wait_until(PATIENCE, || {
        let m = get(&agent.ns, "/metrics").1;
        sample(&m, "ipmasq_config_current") == Some(0.0)
            && sample(&m, "ipmasq_config_reloads_total{result=\"rejected\"}") == Some(1.0)
    }));
    assert_eq!(get(&agent.ns, "/healthz").0, 200);
    assert_eq!(get(&agent.ns, "/readyz").0, 200);
    assert_eq!(get(&agent.ns, "/nothing-here").0, 404);
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn invalid_at_start_is_alive_but_not_ready() {
    let agent = Agent::start("invalidstart", "resyncInterval: 1d\n", None);
    assert!(wait_until(PATIENCE, || agent
        .log()
        .contains("invalid config rejected")));
    assert_eq!(get(&agent.ns, "/healthz").0, 200);
    let (code, body) = get(&agent.ns, "/readyz");
    assert_eq!(code, 503);
    assert!(
        body.contains("no valid config has been applied yet"),
        "{body}"
    );
    // Fixing the file makes it ready without a restart.
    agent.write_config("resyncInterval: 1s\n");
    assert!(wait_until(PATIENCE, || get(&agent.ns, "/readyz").0 == 200));
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn failing_iptables_is_alive_but_not_ready() {
    let fakes = Scratch::new("fake-iptables");
    let restore = fakes.path.join("iptables-nft-restore");
    std::fs::write(
        &restore,
        "#!/bin/sh\necho 'iptables-restore: simulated failure' >&2\nexit 1\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&restore)
        .status()
        .unwrap();
    let agent = Agent::start("failing", "resyncInterval: 200ms\n", Some(&fakes.path));
    assert!(wait_until(PATIENCE, || agent.log().contains("sync failed")));
    assert_eq!(get(&agent.ns, "/healthz").0, 200);
    let (code, body) = get(&agent.ns, "/readyz");
    assert_eq!(code, 503);
    assert!(body.contains("simulated failure"), "{body}");
    let metrics = get(&agent.ns, "/metrics").1;
    assert!(sample(&metrics, "ipmasq_syncs_total{result=\"failure\"}").unwrap() >= 1.0);
    assert_eq!(sample(&metrics, "ipmasq_ready"), Some(0.0));
    // The error is logged once, not once per resync: let three more passes fail first.
    let failures = || {
        sample(
            &get(&agent.ns, "/metrics").1,
            "ipmasq_syncs_total{result=\"failure\"}",
        )
        .unwrap_or(0.0)
    };
    let seen = failures();
    assert!(wait_until(PATIENCE, || failures() >= seen + 3.0));
    assert_eq!(
        agent.log().matches("sync failed; will retry").count(),
        1,
        "{}",
        agent.log()
    );
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn stalled_client_does_not_delay_a_sync() {
    let agent = Agent::start("stall", "resyncInterval: 300ms\n", None);
    assert!(wait_until(PATIENCE, || get(&agent.ns, "/readyz").0 == 200));
    // Half a request, then silence for longer than the test needs.
    let stall = "import socket, time\ns = socket.create_connection(('127.0.0.1', 9723))\ns.sendall(b'GET /metr')\nprint('sent', flush=True)\ntime.sleep(30)\n";
    let mut staller = Command::new("ip")
        .args(["netns", "exec", &agent.ns.name, PYTHON, "-c", stall])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(staller.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "sent");
    let count = |log: &str| log.matches("rules repaired").count();
    let before = count(&agent.log());
    agent.ns.sh("iptables-nft -t nat -F IP-MASQ-AGENT");
    let healed = wait_until(PATIENCE, || count(&agent.log()) > before);
    let alive = get(&agent.ns, "/healthz").0;
    let _ = staller.kill();
    let _ = staller.wait();
    assert!(
        healed,
        "drift not repaired while a client stalled: {}",
        agent.log()
    );
    assert_eq!(alive, 200, "endpoint answered while a client stalled");
}

/// `agent --once` makes one pass: a failure is said, with its reason, and not promised a
/// retry that never comes (the long-running agent's "will retry" is above).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn once_says_what_failed_without_promising_a_retry() {
    let ns = Netns::new("oncefails");
    let fakes = Scratch::new("once-fake-iptables");
    super::netns::executable(
        &fakes.path.join("iptables-nft-restore"),
        "#!/bin/sh\necho 'iptables-restore: simulated failure' >&2\nexit 1\n",
    );
    let run: crate::util::Run = ns
        .ipmasq_with_path(
            &fakes.path,
            &[
                "agent",
                "--once",
                "--iptables-mode=nft",
                "--config=/nonexistent/x",
            ],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("ERROR \"sync failed\"") && run.stderr.contains("simulated failure"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("retry"), "{}", run.stderr);
}

/// `/readyz`'s status inside the namespace, or `None` when nothing listens on the port.
pub(super) fn readyz_status(ns: &Netns) -> Option<u16> {
    let script = format!(
        "import urllib.request, urllib.error\n\
         try:\n    print(urllib.request.urlopen('http://{ADDR}/readyz', timeout=5).status)\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n\
         except OSError:\n    print('closed')\n"
    );
    ns.exec(PYTHON, &["-c", &script]).stdout.trim().parse().ok()
}

/// Whether `pid` runs (not gone, not a zombie waiting to be reaped).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Two agents on one node (a copy started by hand, or a pod started while the old one still
/// runs, as a `maxSurge` rollout would): the second says in one warning line why it waits, and
/// meanwhile opens no port (no clash with the first's endpoint) and touches no rule. When the
/// first exits (0, leaving its rules, as without --cleanup-on-exit) the second takes the lock,
/// the port and the rules: the jump is there throughout and the rules are byte for byte the
/// same.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_second_agent_says_why_it_waits_then_takes_lock_port_and_rules() {
    let mut ns = Netns::new("twoagents");
    let dir = Scratch::new("two-agents");
    let config = dir.write(
        "config",
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n",
    );
    let config_flag = format!("--config={}", config.display());
    let metrics_flag = format!("--metrics-addr={ADDR}");
    let args = ["agent", "--iptables-mode=nft", &config_flag, &metrics_flag];
    let (first_log, second_log) = (dir.path.join("first.log"), dir.path.join("second.log"));
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let first = ns.spawn_ipmasq(&args, &first_log);
    assert!(
        wait_until(PATIENCE, || readyz_status(&ns) == Some(200)),
        "{}",
        read(&first_log)
    );
    let rules = |ns: &Netns| ns.save("nft", false, Some("nat"));
    let installed = rules(&ns);
    assert_eq!(
        installed.matches("-j IP-MASQ-AGENT").count(),
        1,
        "{installed}"
    );

    let second = ns.spawn_ipmasq(&args, &second_log);
    let why = "two agents on one node are not supported (a DaemonSet must roll with maxSurge: 0)";
    assert!(
        wait_until(PATIENCE, || read(&second_log).contains(why)),
        "{}",
        read(&second_log)
    );
    let said = read(&second_log);
    assert_eq!(
        said.matches("holds the node lock").count(),
        1,
        "said once: {said}"
    );
    assert!(
        said.contains(&format!("agent pid {first} holds the node lock")),
        "{said}"
    );
    assert!(
        running(second),
        "the second agent waits, it does not exit: {said}"
    );
    assert!(
        !said.contains("serving /healthz"),
        "no second endpoint: {said}"
    );
    assert_eq!(
        readyz_status(&ns),
        Some(200),
        "the first agent still answers"
    );
    assert_eq!(rules(&ns), installed, "a waiting agent writes nothing");

    super::netns::kill(first, "TERM");
    assert_eq!(
        ns.wait_daemon(first, PATIENCE),
        Some(0),
        "{}",
        read(&first_log)
    );
    assert_eq!(
        rules(&ns),
        installed,
        "the rules stay while the lock changes hands"
    );
    assert!(
        wait_until(PATIENCE, || readyz_status(&ns) == Some(200)),
        "the second agent serves the port once the first is gone: {}",
        read(&second_log)
    );
    assert!(read(&second_log).contains("serving /healthz"));
    assert_eq!(rules(&ns), installed, "adopted as they were");
    super::netns::kill(second, "TERM");
    assert_eq!(
        ns.wait_daemon(second, PATIENCE),
        Some(0),
        "{}",
        read(&second_log)
    );
}
