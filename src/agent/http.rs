//! The read-only HTTP endpoint (`/healthz`, `/readyz`, `/metrics`), served by hyper on the
//! agent's own current-thread runtime. Every connection is bounded (header size, header time,
//! total time, one request) and their number is capped, so a slow or hostile client cannot
//! stall the reconcile loop or exhaust the agent.

use super::health::{liveness, metrics_text, prometheus_text, readiness, Snapshot};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tracing::debug;

/// A client must send its request headers within this time.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection lives at most this long, whatever it does.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Read buffer cap (hyper's minimum), which bounds the request head.
const MAX_BUFFER: usize = 8192;
/// How long a new connection is given to show its first bytes before the next accept.
const FIRST_BYTES_WAIT: Duration = Duration::from_millis(2);
/// Connections served at once; a further one takes the slot of the oldest unfinished request.
/// Each costs at most one read buffer and a task (about 2.5 MiB for all), and the room is what
/// keeps a probe that pauses after connecting alive: the oldest idle connection goes first, so
/// a crowd that reconnects at once must open this many connections within a probe's pause to
/// evict it (100 idle reconnecting clients never do).
const MAX_CONNECTIONS: usize = 256;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The Prometheus text exposition format, for clients that do not ask for OpenMetrics.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";
/// How long each tool that reads the pod share's counters for a scrape may take.
const SHARE_READ_DEADLINE: Duration = Duration::from_secs(2);

/// One media range of an `Accept` header: `type/subtype` (either may be `*`) and its weight
/// in thousandths (RFC 9110 §12.5.1: `q` is 0 to 1 with at most three decimals; 1 when absent).
#[derive(Debug, PartialEq, Eq)]
struct MediaRange<'a> {
    kind: &'a str,
    subtype: &'a str,
    quality: u16,
}

/// A weight as `q` spells it, in thousandths: `0`, `0.5`, `1`, `1.000`; None when malformed.
fn quality(text: &str) -> Option<u16> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = format!("{fraction:0<3}").parse::<u16>().ok()?;
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The media ranges of an `Accept` header; a malformed one (no `/`, a bad `q`) is skipped.
fn media_ranges(accept: &str) -> Vec<MediaRange<'_>> {
    accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let (kind, subtype) = parts.next()?.split_once('/')?;
            let mut weight = 1000;
            for parameter in parts {
                let (name, value) = parameter.split_once('=')?;
                if name.trim().eq_ignore_ascii_case("q") {
                    weight = quality(value.trim())?;
                }
            }
            Some(MediaRange {
                kind: kind.trim(),
                subtype: subtype.trim(),
                quality: weight,
            })
        })
        .collect()
}

/// The weight the client gives `kind/subtype`: that of the most specific range that matches
/// it (`type/subtype` before `type/*` before `*/*`), with whether that range named the type
/// exactly; weight 0 when none matches.
fn weight_of(ranges: &[MediaRange<'_>], kind: &str, subtype: &str) -> (u16, bool) {
    let specificity = |r: &MediaRange<'_>| {
        let kind_matches = r.kind == "*" || r.kind.eq_ignore_ascii_case(kind);
        let subtype_matches = r.subtype == "*" || r.subtype.eq_ignore_ascii_case(subtype);
        (kind_matches && subtype_matches)
            .then_some(u8::from(r.kind != "*") + u8::from(r.subtype != "*"))
    };
    ranges
        .iter()
        .filter_map(|r| specificity(r).map(|s| (s, r.quality)))
        .max_by_key(|(s, _)| *s)
        .map_or((0, false), |(s, q)| (q, s == 2))
}

/// Whether an `Accept` header asks for OpenMetrics rather than the Prometheus text format, by
/// weight (RFC 9110): OpenMetrics when its weight is above the text format's, or equal and
/// named exactly (Prometheus servers ask for it by name first; curl's `*/*` and `promtool check
/// metrics` pipelines get the text format, as does a header that refuses or ranks it lower).
fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    let ranges = media_ranges(accept);
    let (openmetrics, named) = weight_of(&ranges, "application", "openmetrics-text");
    let (text, _) = weight_of(&ranges, "text", "plain");
    openmetrics > 0 && (openmetrics > text || (openmetrics == text && named))
}

/// The snapshot the loop publishes and the endpoint reads.
pub type Shared = Arc<Mutex<Snapshot>>;

/// Reads the latest snapshot (a poisoned lock still holds a usable snapshot).
pub fn read(shared: &Shared) -> Snapshot {
    shared.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// What a response depends on of its request.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    /// The `Accept` header, when it is text.
    pub accept: Option<&'a str>,
}

/// Builds the response for one request.
pub fn respond(asked: Asked<'_>, snapshot: &Snapshot) -> Response<Full<Bytes>> {
    let Asked {
        method,
        path,
        accept,
    } = asked;
    let reply = |status: StatusCode, content_type: &'static str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(if *method == Method::HEAD {
            String::new()
        } else {
            body
        })));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    };
    if *method != Method::GET && *method != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET and HEAD\n".into(),
        );
    }
    let verdict = |result: Result<String, String>| match result {
        Ok(text) => reply(StatusCode::OK, TEXT, format!("{text}\n")),
        Err(reason) => reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{reason}\n")),
    };
    match path {
        "/healthz" => verdict(liveness(snapshot, Instant::now())),
        "/readyz" => verdict(readiness(snapshot)),
        "/metrics" => {
            let text = metrics_text(snapshot, Instant::now(), SystemTime::now());
            if wants_openmetrics(accept) {
                reply(StatusCode::OK, OPENMETRICS, text)
            } else {
                reply(StatusCode::OK, PROMETHEUS_TEXT, prometheus_text(&text))
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: try /healthz, /readyz or /metrics\n".into(),
        ),
    }
}

/// The kernel's conntrack figures for a scrape, read off the loop (a netlink request with its
/// own deadline; scrapes less than a second apart share one read, and the counters' totals
/// follow each CPU's wraps): none when the kernel does not answer (said at debug level, as
/// the families' absence says it to the scraper).
async fn conntrack_statistics() -> Option<crate::conntrack::health::ConntrackFigures> {
    static TOTALS: std::sync::Mutex<crate::conntrack::health::CounterTotals> =
        std::sync::Mutex::new(crate::conntrack::health::CounterTotals::new());
    let read = || {
        TOTALS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .read_for_scrape()
    };
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(statistics)) => Some(statistics),
        Ok(Err(err)) => {
            debug!(error = %err, "conntrack statistics unreadable");
            None
        }
        Err(_) => None,
    }
}

/// The pod share's refusals for a scrape, read off the loop with the agent's backend (each
/// tool within its deadline): per family, what its rules' counters say; a family that cannot
/// be read is left out (said at debug level). Scrapes less than a second apart share one read,
/// and one read runs at a time.
async fn pod_share_refusals(
    backend: crate::backend::BackendId,
    share: super::health::ShareInForce,
) -> Vec<super::health::FamilyRefusals> {
    type Cached = Option<(Instant, Vec<super::health::FamilyRefusals>)>;
    static LAST: std::sync::Mutex<Cached> = std::sync::Mutex::new(None);
    let read = move || {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, refusals)) = last.as_ref() {
            if at.elapsed() < Duration::from_secs(1) {
                return refusals.clone();
            }
        }
        let backend = crate::backend::select::by_id_with_timeout(backend, SHARE_READ_DEADLINE);
        let mut out = Vec::new();
        for family in share.families {
            match backend.pod_share_refusals(family, &share.names) {
                Ok(refusals) if !refusals.is_empty() => {
                    out.push(super::health::FamilyRefusals { family, refusals });
                }
                Ok(_) => {}
                Err(err) => debug!(%family, error = %err, "pod share counters unreadable"),
            }
        }
        *last = Some((Instant::now(), out.clone()));
        out
    };
    tokio::task::spawn_blocking(read).await.unwrap_or_default()
}

/// Binds the endpoint.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// A connection being served.
struct Slot {
    accepted: Instant,
    /// Set once its request head has arrived (the service was called).
    head_done: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

/// Makes room for a new connection when every slot is taken: the connection that has been
/// sending its request head the longest is dropped. A probe sends its head at once and is
/// answered in microseconds, so a crowd of slow clients (slowloris) can only ever evict each
/// other, never starve the probes. False when every slot holds a complete request.
fn make_room(slots: &mut Vec<Slot>) -> bool {
    slots.retain(|s| !s.task.is_finished());
    if slots.len() < MAX_CONNECTIONS {
        return true;
    }
    let oldest = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.head_done.load(Ordering::Relaxed))
        .min_by_key(|(_, s)| s.accepted)
        .map(|(i, _)| i);
    match oldest {
        Some(i) => {
            slots.swap_remove(i).task.abort();
            debug!("all connection slots taken; dropped the slowest unfinished request");
            true
        }
        None => false,
    }
}

/// Serves connections from `listener` until the runtime stops.
pub async fn serve(listener: TcpListener, shared: Shared) {
    let mut slots: Vec<Slot> = Vec::with_capacity(MAX_CONNECTIONS);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                debug!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A real client's request is usually there already: wait a moment for it, so the new
        // connection's head is read (and it counts as complete) before the next eviction.
        let _ = tokio::time::timeout(FIRST_BYTES_WAIT, stream.readable()).await;
        if !make_room(&mut slots) {
            debug!("too many connections with complete requests; closing a new one");
            continue;
        }
        let shared = shared.clone();
        let head_done = Arc::new(AtomicBool::new(false));
        let seen = head_done.clone();
        let task = tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                seen.store(true, Ordering::Relaxed);
                let mut snapshot = read(&shared);
                async move {
                    if request.uri().path() == "/metrics" {
                        snapshot.conntrack = conntrack_statistics().await;
                        if let Some(share) = snapshot.pod_share.clone() {
                            snapshot.pod_share_refused =
                                pod_share_refusals(snapshot.backend, share).await;
                        }
                    }
                    let accept = request
                        .headers()
                        .get(hyper::header::ACCEPT)
                        .and_then(|v| v.to_str().ok());
                    let asked = Asked {
                        method: request.method(),
                        path: request.uri().path(),
                        accept,
                    };
                    Ok::<_, Infallible>(respond(asked, &snapshot))
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_BUFFER)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            if tokio::time::timeout(CONNECTION_TIMEOUT, connection)
                .await
                .is_err()
            {
                debug!("closed a connection that outlived its time");
            }
        });
        slots.push(Slot {
            accepted: Instant::now(),
            head_done,
            task: task.abort_handle(),
        });
        // Let the new connection read its head before the next accept: a burst of slow
        // clients must not evict a probe whose complete request is already waiting.
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format follows the weights, not the mere mention (RFC 9110 §12.5.1).
    #[test]
    fn metrics_format_is_negotiated_by_weight() {
        for (accept, openmetrics) in [
            (None, false),
            (Some(""), false),
            (Some("*/*"), false),
            (Some("text/plain"), false),
            (Some("application/openmetrics-text"), true),
            (Some("application/openmetrics-text; version=1.0.0; charset=utf-8"), true),
            // What Prometheus 2 and 3 send.
            (Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), true),
            (Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"), true),
            // The report: the text format weighed higher.
            (Some("text/plain;q=0.9,application/openmetrics-text;q=0.1"), false),
            (Some("application/openmetrics-text;q=0.1, text/plain;q=0.9"), false),
            (Some("text/*;q=0.8, application/openmetrics-text;q=0.7"), false),
            (Some("text/plain;q=0.5, application/*;q=0.6"), true),
            (Some("text/plain;q=0.5, */*;q=0.6"), true),
            (Some("application/openmetrics-text;q=0"), false),
            (Some("application/openmetrics-text; q=0.000"), false),
            (Some("application/openmetrics-text;Q=0.4, text/plain;q=0.3"), true),
            (Some("APPLICATION/OpenMetrics-Text"), true),
            (Some("application/openmetrics-text, text/plain"), true),
            (Some("text/plain, application/openmetrics-text"), true),
            (Some("*/*, application/openmetrics-text;q=0.9"), false),
            // The most specific range decides: openmetrics refused, though */* takes anything.
            (Some("*/*;q=1, application/openmetrics-text;q=0"), false),
            // Malformed weights are skipped, not read as 1.
            (Some("application/openmetrics-text;q=2, text/plain;q=0.5"), false),
            (Some("application/openmetrics-text;q=0.5x, text/plain;q=0.1"), false),
            (Some("application/openmetrics-text;q=1.0001"), false),
        ] {
            assert_eq!(wants_openmetrics(accept), openmetrics, "{accept:?}");
        }
        assert_eq!(quality("0.9"), Some(900));
        assert_eq!(quality("1"), Some(1000));
        assert_eq!(quality("1.000"), Some(1000));
        assert_eq!(quality("1.5"), None);
        assert_eq!(quality("0."), Some(0));
        assert_eq!(quality(".5"), None);
    }
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let code = text[9..12].parse().unwrap();
        let body = text
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        (code, body)
    }

    /// A runtime with the endpoint spawned on a free loopback port (it serves while the test
    /// drives the runtime).
    fn serving() -> (tokio::runtime::Runtime, SocketAddr, Shared) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared: Shared = Arc::new(Mutex::new(Snapshot::new(crate::backend::BackendId::Fake)));
        let listener = runtime
            .block_on(bind("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(serve(listener, shared.clone()));
        (runtime, addr, shared)
    }

    /// The endpoint served on a thread of its own until `stop` is sent.
    fn serving_on_a_thread() -> (
        SocketAddr,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (runtime, addr, _shared) = serving();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            runtime.block_on(async {
                while stopped.try_recv().is_err() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        });
        (addr, stop, server)
    }

    /// Whether the server has closed this (non-blocking) connection: end of stream or a reset.
    fn closed_by_server(conn: &mut std::net::TcpStream) -> bool {
        let mut byte = [0u8; 1];
        match conn.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }

    /// 400 clients that each send one byte of a request head a second (slowloris), and
    /// reconnect when closed, need more than the 256 slots. Once the server has closed at
    /// least 400 - 256 of them (it accepted more than it can hold: the slots are full), every
    /// real probe is still answered 200: it takes the slot of the oldest unfinished head. Without
    /// that eviction a probe finds the slots full and is closed unanswered. Nothing here is
    /// timed: the probes wait for their answer (a minute at most, against a hang), and the crowd
    /// is waited for by what it sees, not by a pause.
    #[test]
    fn probes_are_answered_through_a_slowloris_crowd() {
        const CROWD: usize = 400;
        let (addr, stop, server) = serving_on_a_thread();
        let (quit, quitting) = std::sync::mpsc::channel::<()>();
        let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = closed.clone();
        let crowd = std::thread::spawn(move || {
            let connect = || {
                let conn = std::net::TcpStream::connect(addr).ok()?;
                conn.set_nonblocking(true).ok()?;
                Some(conn)
            };
            let mut slow: Vec<std::net::TcpStream> = (0..CROWD).filter_map(|_| connect()).collect();
            let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n";
            let mut sent = 0;
            // One byte a second each; reconnect when closed, as an attacker would.
            loop {
                for conn in &mut slow {
                    if closed_by_server(conn) {
                        counted.fetch_add(1, Ordering::Relaxed);
                        if let Some(fresh) = connect() {
                            *conn = fresh;
                        }
                        continue;
                    }
                    let _ = conn.write(&head[sent % head.len()..][..1]);
                }
                sent += 1;
                if quitting.recv_timeout(Duration::from_secs(1)).is_ok() {
                    return;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while closed.load(Ordering::Relaxed) < CROWD - MAX_CONNECTIONS {
            assert!(
                Instant::now() < deadline,
                "the server never closed {} of the crowd's connections (closed {})",
                CROWD - MAX_CONNECTIONS,
                closed.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut answered = 0;
        let mut worst = Duration::ZERO;
        let mut failures = Vec::new();
        for _ in 0..30 {
            let started = Instant::now();
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            let _ = write!(
                stream,
                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            worst = worst.max(started.elapsed());
            if text.starts_with("HTTP/1.1 200") {
                answered += 1;
            } else {
                failures.push(text);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        quit.send(()).unwrap();
        crowd.join().unwrap();
        stop.send(()).unwrap();
        server.join().unwrap();
        assert_eq!(
            answered, 30,
            "probes answered 200 (the slowest in {worst:?}; the crowd was closed {} times): {failures:?}",
            closed.load(Ordering::Relaxed)
        );
    }

    /// 100 connections that send nothing and reconnect the moment they are closed (any
    /// hostNetwork process can do this): a probe that connects and sends its request 10 ms
    /// later, as a loaded kubelet may, is still answered, every time.
    #[test]
    fn probes_that_pause_after_connecting_survive_an_idle_reconnecting_crowd() {
        let (addr, stop, server) = serving_on_a_thread();
        let quit = Arc::new(AtomicBool::new(false));
        let crowd: Vec<_> = (0..100)
            .map(|_| {
                let quit = quit.clone();
                std::thread::spawn(move || {
                    let mut reconnects = 0u32;
                    while !quit.load(Ordering::Relaxed) {
                        let Ok(mut idle) = std::net::TcpStream::connect(addr) else {
                            continue;
                        };
                        idle.set_read_timeout(Some(Duration::from_millis(200)))
                            .unwrap();
                        // Wait until the server closes it (or the test ends), then reconnect.
                        let mut byte = [0u8; 1];
                        loop {
                            match idle.read(&mut byte) {
                                Ok(0) => break,
                                Ok(_) => {}
                                Err(_) if quit.load(Ordering::Relaxed) => return reconnects,
                                Err(e)
                                    if e.kind() == std::io::ErrorKind::WouldBlock
                                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                                Err(_) => break,
                            }
                        }
                        reconnects += 1;
                    }
                    reconnects
                })
            })
            .collect();
        let mut answered = 0;
        for _ in 0..20 {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            std::thread::sleep(Duration::from_millis(10));
            let _ = write!(
                stream,
                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            if text.starts_with("HTTP/1.1 200") {
                answered += 1;
            }
        }
        quit.store(true, Ordering::Relaxed);
        let reconnects: u32 = crowd.into_iter().map(|t| t.join().unwrap()).sum();
        stop.send(()).unwrap();
        server.join().unwrap();
        assert_eq!(
            answered, 20,
            "probes answered (the crowd reconnected {reconnects} times)"
        );
    }

    #[test]
    fn endpoints_answer_and_a_stalled_client_does_not_block_others() {
        let (runtime, addr, shared) = serving();
        let server = std::thread::spawn(move || {
            runtime.block_on(async { tokio::time::sleep(Duration::from_secs(3)).await });
        });
        // Half a request, then silence.
        let mut stalled = std::net::TcpStream::connect(addr).unwrap();
        stalled.write_all(b"GET /metr").unwrap();

        assert_eq!(get(addr, "/healthz"), (200, "ok\n".into()));
        let (code, body) = get(addr, "/readyz");
        assert_eq!(code, 503);
        assert!(body.contains("starting"), "{body}");
        {
            let mut s = shared.lock().unwrap();
            s.status.last_pass = Some(Instant::now());
        }
        assert_eq!(get(addr, "/readyz").0, 200);
        let (code, body) = get(addr, "/metrics");
        assert_eq!(code, 200);
        assert!(body.contains("ipmasq_build_info"), "{body}");
        assert_eq!(get(addr, "/nope").0, 404);
        drop(stalled);
        server.join().unwrap();
    }
}
