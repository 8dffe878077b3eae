//! The read-only HTTP endpoint (`/healthz`, `/readyz`, `/metrics`), served by hyper on the
//! agent's own current-thread runtime. Every connection is bounded (header size, header time,
//! total time, one request) and their number is capped, so a slow or hostile client cannot
//! stall the reconcile loop or exhaust the agent.

use super::health::{liveness, metrics_text, readiness, Snapshot};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tracing::debug;

/// Where the endpoint listens unless `--metrics-addr` says otherwise.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9723";
/// A client must send its request headers within this time.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection lives at most this long, whatever it does.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Read buffer cap (hyper's minimum), which bounds the request head.
const MAX_BUFFER: usize = 8192;
/// Connections served at once; more are closed on accept.
const MAX_CONNECTIONS: usize = 32;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// The snapshot the loop publishes and the endpoint reads.
pub type Shared = Arc<Mutex<Snapshot>>;

/// Reads the latest snapshot (a poisoned lock still holds a usable snapshot).
pub fn read(shared: &Shared) -> Snapshot {
    shared.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Builds the response for one request.
pub fn respond(method: &Method, path: &str, snapshot: &Snapshot) -> Response<Full<Bytes>> {
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
        "/metrics" => reply(
            StatusCode::OK,
            OPENMETRICS,
            metrics_text(snapshot, Instant::now(), SystemTime::now()),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: try /healthz, /readyz or /metrics\n".into(),
        ),
    }
}

/// Binds the endpoint.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves connections from `listener` until the runtime stops.
pub async fn serve(listener: TcpListener, shared: Shared) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                debug!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            debug!("too many connections; closing a new one");
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        let active = active.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let snapshot = read(&shared);
                async move {
                    Ok::<_, Infallible>(respond(request.method(), request.uri().path(), &snapshot))
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
            active.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn endpoints_answer_and_a_stalled_client_does_not_block_others() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared: Shared = Arc::new(Mutex::new(Snapshot::new("fake".into())));
        let listener = runtime
            .block_on(bind("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(serve(listener, shared.clone()));
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
