//! API mode against a small fake API server the test runs (plain HTTP, in the agent's network
//! namespace): a GET of the config that never answers (abandoned after the one-shot deadline,
//! logged, retried), watches held open that say nothing (restarted after the client's read
//! timeout, a test-only 3 s), and an EgressNATPolicy CRD answered 404, 403 and 500 in turn (the
//! agent's requests, counted by the fake, back off: each wait about twice the one before); and
//! watches that hear a bookmark every 2 s, as from Kubernetes 1.27 on (renewed at their own
//! timeout only, the view kept young).

use super::cluster::api_agent_args;
use super::fleet::in_netns;
use super::health::ADDR;
use super::netns::{wait_until, Netns};
use crate::util::{binary, Scratch};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONFIGMAPS: &str = "/api/v1/namespaces/kube-system/configmaps";
const BASE: &str = "/api/v1/namespaces/kube-system/configmaps/ip-masq-agent";
const POLICIES: &str = "/apis/networking.gke.io/v1/egressnatpolicies";
const CONFIG: &str = "nonMasqueradeCIDRs: [198.51.100.0/24]\n";
/// How long the agent runs before its requests are counted.
const WINDOW: Duration = Duration::from_secs(70);

/// One request the fake received: when, and its path with its query.
#[derive(Clone, Debug)]
struct Seen {
    at: Instant,
    uri: String,
    user_agent: String,
}

/// How the fake behaves.
#[derive(Clone, Copy, Default)]
struct Behaviour {
    /// The first GET of the config never answers.
    stall_first_get: bool,
    /// A watch delivers a bookmark this often and ends at its `timeoutSeconds`, as a
    /// Kubernetes 1.27+ server's does; None: it says nothing, ever.
    bookmarks_every: Option<Duration>,
}

/// What the fake has received, shared with its connection threads.
#[derive(Default)]
struct Counters {
    seen: Mutex<Vec<Seen>>,
    behaviour: Behaviour,
}

impl Counters {
    /// The requests whose path (before `?`) is `path`, with `watch` or not.
    fn of(&self, path: &str, watch: bool) -> Vec<Seen> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.uri.split('?').next() == Some(path))
            .filter(|s| s.uri.contains("watch=true") == watch)
            .cloned()
            .collect()
    }
}

/// A fake API server listening in a namespace; its threads end with the agent's connections.
struct FakeApi {
    port: u16,
    counters: Arc<Counters>,
}

impl FakeApi {
    fn start(ns: &Netns, behaviour: Behaviour) -> FakeApi {
        let listener = in_netns(&ns.name, || {
            TcpListener::bind("127.0.0.1:0").expect("bind the fake API")
        });
        let port = listener.local_addr().unwrap().port();
        let counters = Arc::new(Counters {
            behaviour,
            ..Counters::default()
        });
        let shared = counters.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counters = shared.clone();
                std::thread::spawn(move || serve(stream, &counters));
            }
        });
        FakeApi { port, counters }
    }

    fn kubeconfig(&self, scratch: &Scratch) -> std::path::PathBuf {
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": format!("http://127.0.0.1:{}", self.port)}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        });
        let path = scratch.path.join("fake.kubeconfig");
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }
}

/// Reads one request's head (and its body, if it says how long); None at the end.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, String)> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|n| *n > 0)?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let uri = parts.next()?.to_string();
    let (mut length, mut agent) = (0usize, String::new());
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok().filter(|n| *n > 0)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "user-agent" => agent = value.trim().to_string(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((method, uri, agent))
}

fn respond(stream: &mut TcpStream, code: u16, body: &serde_json::Value) {
    let text = body.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    );
}

fn status(code: u16) -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
        "reason": "Fake", "message": format!("the fake answers {code}")})
}

/// Holds the connection open, saying nothing, until the agent closes it.
fn hold(mut reader: BufReader<TcpStream>) {
    let mut sink = Vec::new();
    let _ = reader.read_to_end(&mut sink);
}

/// Serves one connection (HTTP/1.1, keep-alive) until the agent closes it.
fn serve(stream: TcpStream, counters: &Counters) {
    let mut out = stream.try_clone().expect("clone the connection");
    let mut reader = BufReader::new(stream);
    while let Some((method, uri, user_agent)) = read_request(&mut reader) {
        let path = uri.split('?').next().unwrap_or("").to_string();
        let watch = uri.contains("watch=true");
        let policy_requests = {
            let mut seen = counters.seen.lock().unwrap();
            seen.push(Seen {
                at: Instant::now(),
                uri: uri.clone(),
                user_agent,
            });
            seen.iter().filter(|s| s.uri.starts_with(POLICIES)).count()
        };
        if watch {
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            match counters.behaviour.bookmarks_every {
                // Headers, then silence: a watch that delivers nothing.
                None => return hold(reader),
                Some(every) => {
                    if bookmarks_until_timeout(&mut out, &uri, every).is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let base_gets = counters.of(BASE, false).len();
        match (method.as_str(), path.as_str()) {
            ("GET", CONFIGMAPS) => respond(&mut out, 200, &metadata_list("ip-masq-agent", "7")),
            // The first GET of the config never answers.
            ("GET", BASE) if base_gets == 1 && counters.behaviour.stall_first_get => {
                return hold(reader)
            }
            ("GET", BASE) => respond(&mut out, 200, &configmap()),
            ("GET", "/api/v1/nodes") => respond(&mut out, 200, &metadata_list("node-a", "3")),
            ("GET", "/api/v1/nodes/node-a") | ("PATCH", "/api/v1/nodes/node-a/status") => {
                respond(&mut out, 200, &node())
            }
            ("GET", POLICIES) => {
                let code = [404, 403, 500][(policy_requests - 1) % 3];
                respond(&mut out, code, &status(code))
            }
            _ => respond(&mut out, 404, &status(404)),
        }
    }
}

/// A watch's bookmarks, one every `every`, until the watch's `timeoutSeconds` have passed;
/// then its end (the last chunk). An error when the agent has closed the connection.
fn bookmarks_until_timeout(out: &mut TcpStream, uri: &str, every: Duration) -> std::io::Result<()> {
    let timeout = uri
        .split(['?', '&'])
        .find_map(|pair| pair.strip_prefix("timeoutSeconds="))
        .and_then(|n| n.parse().ok())
        .map_or(Duration::from_secs(290), Duration::from_secs);
    let ends = Instant::now() + timeout;
    let bookmark = serde_json::json!({"type": "BOOKMARK", "object": {"apiVersion": "v1",
        "kind": "ConfigMap", "metadata": {"resourceVersion": "7"}}})
    .to_string()
        + "\n";
    while Instant::now() + every < ends {
        std::thread::sleep(every);
        write!(out, "{:x}\r\n{bookmark}\r\n", bookmark.len())?;
    }
    std::thread::sleep(ends.saturating_duration_since(Instant::now()));
    write!(out, "0\r\n\r\n")
}

fn metadata_list(name: &str, version: &str) -> serde_json::Value {
    serde_json::json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": version},
        "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": version,
                "uid": format!("uid-{name}")}}]})
}

fn configmap() -> serde_json::Value {
    serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": "ip-masq-agent", "namespace": "kube-system", "resourceVersion": "7"},
        "data": {"config": CONFIG}})
}

fn node() -> serde_json::Value {
    serde_json::json!({"kind": "Node", "apiVersion": "v1",
        "metadata": {"name": "node-a", "uid": "uid-node-a", "resourceVersion": "3"}, "status": {}})
}

/// The gaps between successive requests.
fn gaps(requests: &[Seen]) -> Vec<Duration> {
    requests.windows(2).map(|w| w[1].at - w[0].at).collect()
}

/// Starts the agent in `ns` against `fake` (nftables, node `node-a`), with the test-only
/// timeouts of `env`; its scratch folder (kept alive by the caller) and its log's path.
fn spawn_agent(
    ns: &mut Netns,
    fake: &FakeApi,
    env: &[(&str, &str)],
) -> (Scratch, std::path::PathBuf) {
    let scratch = Scratch::new(&format!("logs-{}", ns.name));
    let kubeconfig = fake.kubeconfig(&scratch).display().to_string();
    let log = scratch.path.join("agent.log");
    let metrics = format!("--metrics-addr={ADDR}");
    let args = api_agent_args(&["--backend=nftables"], &kubeconfig, "node-a", &metrics);
    let child = ns
        .command(&binary(), &args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn the agent");
    ns.adopt(child);
    (scratch, log)
}

/// A stalled GET is abandoned and retried (the config then applied); silent watches are
/// restarted; a CRD answered 404, 403 and 500 is asked ever more rarely. Every request names
/// ipmasq and the node in its User-Agent.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn the_agent_abandons_a_stalled_get_restarts_silent_watches_and_backs_off() {
    let mut ns = Netns::new("fake-api");
    let fake = FakeApi::start(
        &ns,
        Behaviour {
            stall_first_get: true,
            bookmarks_every: None,
        },
    );
    let started = Instant::now();
    let (_scratch, log) = spawn_agent(
        &mut ns,
        &fake,
        &[
            ("IPMASQ_TEST_WATCH_TIMEOUT", "60"),
            ("IPMASQ_TEST_READ_TIMEOUT", "3"),
            ("IPMASQ_TEST_REQUEST_TIMEOUT_MS", "2000"),
        ],
    );
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let rules = || ns.exec("nft", &["list", "table", "ip", "ipmasq"]).stdout;

    // The first GET stalls: abandoned after the one-shot deadline (the test's 2 s), said,
    // retried, and the config applied.
    assert!(
        wait_until(Duration::from_secs(75), || rules()
            .contains("198.51.100.0/24")),
        "the config never applied: GETs {:?}\n{}",
        fake.counters.of(BASE, false),
        read_log()
    );
    let gets = fake.counters.of(BASE, false);
    assert!(gets.len() >= 2, "{gets:?}");
    assert!(
        gets[1].at - gets[0].at < Duration::from_secs(60),
        "retried within 60 s: {:?}",
        gaps(&gets)
    );
    assert!(
        gets.iter().all(|g| g.uri.contains("resourceVersion=7")),
        "the GET names the event's resourceVersion: {gets:?}"
    );
    assert!(
        read_log().contains("no answer within 2 s (abandoned)"),
        "{}",
        read_log()
    );

    std::thread::sleep(WINDOW.saturating_sub(started.elapsed()));
    assert_silent_watches_restarted(&fake.counters);
    assert_policies_backed_off(&fake.counters);
    let seen = fake.counters.seen.lock().unwrap().clone();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        seen.iter()
            .all(|s| s.user_agent == format!("ipmasq/{version} (node node-a)")),
        "{:?}",
        seen.iter().map(|s| &s.user_agent).collect::<Vec<_>>()
    );
    let said = read_log()
        .matches("the EgressNATPolicy CRD is not served")
        .count();
    assert_eq!(said, 1, "said once, then looked at on the slow schedule");
}

/// Each silent watch was restarted by the client's read timeout (the test's 3 s), long
/// before the watch's own timeout (the test's 60 s, 65 s with the watcher's margin), asking
/// for bookmarks with that timeout.
fn assert_silent_watches_restarted(counters: &Counters) {
    for path in [CONFIGMAPS, "/api/v1/nodes"] {
        let watches = counters.of(path, true);
        assert!(
            watches.len() >= 3,
            "{path}: a silent watch is restarted: {watches:?}"
        );
        // At once, from its resourceVersion: no backoff, as for a failure, after the silence.
        let waits = gaps(&watches);
        assert!(
            waits.iter().all(|wait| *wait < Duration::from_secs(6)),
            "{path}: restarted 3 s after the silence began: {waits:?}"
        );
        assert!(
            watches.iter().all(|w| w.uri.contains("timeoutSeconds=60")
                && w.uri.contains("allowWatchBookmarks=true")),
            "{watches:?}"
        );
    }
}

/// 404, 403, 500 in turn: each wait about twice the one before, so few in the window; the
/// lists ask for the watch cache.
fn assert_policies_backed_off(counters: &Counters) {
    let policies = counters.of(POLICIES, false);
    let waits = gaps(&policies);
    assert!(
        (5..=8).contains(&policies.len()),
        "{} policy requests in {WINDOW:?}: {waits:?}",
        policies.len()
    );
    for pair in waits.windows(2) {
        assert!(
            pair[1].as_secs_f64() >= 1.4 * pair[0].as_secs_f64(),
            "the waits double: {waits:?}"
        );
    }
    assert!(
        policies.iter().all(|p| p.uri.contains("resourceVersion=0")),
        "lists are served from the watch cache: {policies:?}"
    );
}

/// A watch that hears a bookmark every 2 s (as from Kubernetes 1.27 on) is not silent: it is
/// renewed at its own timeout (the test's 20 s), not after the read timeout's 5 s, and each
/// bookmark keeps the API view young (`ipmasq_api_view_age_seconds`).
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn a_watch_that_hears_bookmarks_lives_to_its_timeout_and_keeps_the_view_young() {
    let mut ns = Netns::new("fake-bm");
    let fake = FakeApi::start(
        &ns,
        Behaviour {
            stall_first_get: false,
            bookmarks_every: Some(Duration::from_secs(2)),
        },
    );
    let started = Instant::now();
    let (_scratch, log) = spawn_agent(
        &mut ns,
        &fake,
        &[
            ("IPMASQ_TEST_WATCH_TIMEOUT", "20"),
            ("IPMASQ_TEST_READ_TIMEOUT", "5"),
        ],
    );
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(30), || ns
            .exec("nft", &["list", "table", "ip", "ipmasq"])
            .stdout
            .contains("198.51.100.0/24")),
        "the config never applied\n{}",
        read_log()
    );
    std::thread::sleep(Duration::from_secs(50).saturating_sub(started.elapsed()));
    for path in [CONFIGMAPS, "/api/v1/nodes"] {
        let watches = fake.counters.of(path, true);
        let waits = gaps(&watches);
        assert!(
            (2..=4).contains(&watches.len())
                && waits.iter().all(|wait| *wait > Duration::from_secs(15)),
            "{path}: renewed at its 20 s timeout, never after 5 s of silence: {waits:?}"
        );
    }
    let page = ns
        .exec("curl", &["-s", &format!("http://{ADDR}/metrics")])
        .stdout;
    let age = page
        .lines()
        .find(|line| line.starts_with("ipmasq_api_view_age_seconds{input=\"configmap\"}"))
        .and_then(|line| line.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no configmap age in:\n{page}"));
    assert!(age < 5.0, "the bookmarks keep the view young: {age} s");
}
