//! The Kubernetes API side of ipmasq: how a client is made (in-cluster service account, an
//! explicit kubeconfig, or kubectl's search) with deadlines on connecting, sending and reading
//! and a User-Agent that names ipmasq, its version and the node; the one deadline every one-shot
//! call is made within ([`within`], [`REQUEST_TIMEOUT`]); and how the agent knows its own Node's
//! name. The API-mode source, the Node mirror and `ipmasq fleet` build on it.

pub mod age;
pub mod answer_cap;
pub mod backoff;
pub mod configmap;
pub mod inputs;
pub mod mirror;
pub mod pods;
pub mod taint;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long connecting to the API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long sending one request may take, and how long a one-shot request (not a watch: a
/// watch idles by design, and the watcher has its own idle deadline) may wait for its answer:
/// the client bounds connecting and sending; each one-shot call bounds its answer with
/// `tokio::time::timeout` of this (the mirror's writes; `fleet` bounds its whole listing).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The server-side timeout of every watch (`timeoutSeconds`), in seconds: how often a healthy
/// watch is renewed. kube-runtime's watcher also gives up on a watch that delivered nothing
/// for this plus 5 s, but a silent watch is found sooner, by the client's [`READ_TIMEOUT`].
/// An API server that sends periodic bookmarks (Kubernetes 1.27 and later: about one a
/// minute) keeps an idle watch open this long; kube-apiserver 1.20 sends none, so there an
/// idle watch is renewed every [`READ_TIMEOUT`] instead (docs/benchmarks.md).
pub const WATCH_TIMEOUT: u32 = 290;
/// The client's read timeout: no byte for this long on any connection abandons it. A watch
/// that has delivered nothing (no event, no bookmark) for this long is silent (a frozen
/// connection, a stuck proxy, or a server that sends no bookmarks) and is watched again from
/// its resourceVersion, within the 2 minutes asked. Reset by every write, so a pooled
/// connection's idle time does not count; one-shot calls have their own, shorter deadline
/// ([`within`]).
pub const READ_TIMEOUT: Duration = Duration::from_secs(115);

/// The watch timeout in force: [`WATCH_TIMEOUT`], or (tests only) `IPMASQ_TEST_WATCH_TIMEOUT`
/// seconds.
pub fn watch_timeout() -> u32 {
    test_knob("IPMASQ_TEST_WATCH_TIMEOUT").unwrap_or(WATCH_TIMEOUT)
}

/// A test-only setting from the environment: a positive number, else None.
fn test_knob<T: std::str::FromStr + PartialOrd + Default>(name: &str) -> Option<T> {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .filter(|value| *value > T::default())
}

/// The read timeout in force: [`READ_TIMEOUT`], or (tests only) `IPMASQ_TEST_READ_TIMEOUT`
/// seconds, so a test sees a silent watch restarted without waiting two minutes.
pub fn read_timeout() -> Duration {
    test_knob("IPMASQ_TEST_READ_TIMEOUT")
        .map(Duration::from_secs)
        .unwrap_or(READ_TIMEOUT)
}

/// Whether a watcher's error is a silent watch abandoned by the client's read timeout: no
/// trouble, the watcher watches again from where it was.
pub fn silent_watch(err: &kube::runtime::watcher::Error) -> bool {
    matches!(err, kube::runtime::watcher::Error::WatchFailed(_))
        && any_in_chain(err, &|err| {
            err.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
                || err
                    .downcast_ref::<hyper::Error>()
                    .is_some_and(hyper::Error::is_timeout)
        })
}

/// Says (at debug) that `input`'s watch was silent and is watched again.
pub fn said_silent(input: &str) {
    tracing::debug!(
        input,
        silent_s = read_timeout().as_secs(),
        "a silent watch (no event, no bookmark) abandoned: watching again from its resourceVersion"
    );
}

/// Whether `err` or any error under it is one `found` recognises.
pub fn any_in_chain(
    err: &(dyn std::error::Error + 'static),
    found: &dyn Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        if found(err) {
            return true;
        }
        // An io::Error's `source` skips the error it wraps: look at that one too.
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if any_in_chain(inner, found) {
                return true;
            }
        }
        next = err.source();
    }
    false
}

/// The deadline of one-shot calls in force: [`REQUEST_TIMEOUT`], or (tests only)
/// `IPMASQ_TEST_REQUEST_TIMEOUT_MS` milliseconds.
pub fn request_timeout() -> Duration {
    test_knob("IPMASQ_TEST_REQUEST_TIMEOUT_MS")
        .map(Duration::from_millis)
        .unwrap_or(REQUEST_TIMEOUT)
}

/// Why a one-shot call made within [`within`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No answer before the deadline: the call was abandoned.
    #[error("no answer within {} s (abandoned)", .after.as_secs_f64())]
    NoAnswer { after: Duration },
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl CallError {
    /// The kind of failure, for the backoff.
    pub fn failure(&self) -> backoff::Failure {
        match self {
            CallError::NoAnswer { .. } => backoff::Failure::Unanswered,
            CallError::Api(err) => backoff::Failure::of_client(err),
        }
    }
}

/// `call`, abandoned when it has not answered within [`request_timeout`]: every one-shot
/// request (a GET, a LIST page, a status write) is made through this.
pub async fn within<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    let after = request_timeout();
    match tokio::time::timeout(after, call).await {
        Ok(answer) => answer.map_err(CallError::Api),
        Err(_) => Err(CallError::NoAnswer { after }),
    }
}

/// The watcher config every input starts from: bookmarks asked for, the server's timeout
/// [`watch_timeout`], and the first list served from the API server's watch cache
/// (`resourceVersion=0`), not from etcd. Unpaged: kube asks for `resourceVersion=0` only
/// without a page size (which the cache would ignore), so the list comes in one answer.
pub fn watcher_config() -> kube::runtime::watcher::Config {
    let mut config = kube::runtime::watcher::Config::default()
        .timeout(watch_timeout())
        .any_semantic();
    config.page_size = None;
    config
}

/// Whether a watcher's event leaves its reflector's store showing a change: a list completed
/// (the store swaps it in whole), an object applied or deleted. The start of a list and its
/// objects do not: the store keeps showing the last whole list until the list is done.
pub fn settles<K>(event: &kube::runtime::watcher::Event<K>) -> bool {
    use kube::runtime::watcher::Event;
    matches!(event, Event::InitDone | Event::Apply(_) | Event::Delete(_))
}

/// Whether `store` holds its first whole list (kube-runtime's readiness, asked without
/// waiting).
pub fn is_ready<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures_util::FutureExt;
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|ready| ready.is_ok())
}

/// Drops an object's `managedFields` before its store keeps it: who wrote which field is not
/// the agent's business, and it can be the larger part of a small object.
pub fn without_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// The GET of `name` at least as new as `version` (the watch event's: served from the watch
/// cache, not etcd), within the deadline; None when it does not exist.
pub async fn get_at<K>(
    api: &kube::Api<K>,
    name: &str,
    version: &str,
) -> Result<Option<K>, CallError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::GetParams::at(version);
    match within(api.get_with(name, &params)).await {
        Ok(object) => Ok(Some(object)),
        Err(CallError::Api(kube::Error::Api(status))) if status.code == 404 => Ok(None),
        Err(err) => Err(err),
    }
}

/// How an agent's client presents itself and what it notes.
#[derive(Clone, Debug, Default)]
pub struct Manners {
    /// The node the agent runs on, named in its User-Agent.
    pub node: Option<String>,
    /// Where each input's answers are noted (API mode).
    pub clock: Option<age::ApiClock>,
    /// The most an EgressNATPolicy list's answer may hold, in bytes (API mode, under a
    /// memory limit; see [`answer_cap`]).
    pub answer_cap: Option<u64>,
}

impl Manners {
    /// A writer's about its own Node: named in the User-Agent, no input clock, no answer cap.
    pub fn writer_for(node: &str) -> Manners {
        Manners {
            node: Some(node.to_string()),
            clock: None,
            answer_cap: None,
        }
    }
}

/// The User-Agent of every request: `ipmasq/VERSION (node NAME)`, or `ipmasq/VERSION` without
/// a node (`ipmasq fleet`).
pub fn user_agent(node: Option<&str>) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match node {
        Some(node) => format!("ipmasq/{version} (node {node})"),
        None => format!("ipmasq/{version}"),
    }
}

/// Where a client's credentials come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// `--kubeconfig PATH`: that file, its current context.
    Kubeconfig(PathBuf),
    /// The pod's service account (token, CA and `KUBERNETES_SERVICE_HOST`/`_PORT`): the agent's
    /// default in API mode.
    InCluster,
    /// As kubectl searches: `$KUBECONFIG`, then `~/.kube/config`, then the service account
    /// (`ipmasq fleet`'s default).
    Inferred,
}

impl Credentials {
    /// `--kubeconfig` if given, else `otherwise`.
    pub fn from_flag(kubeconfig: Option<&Path>, otherwise: Credentials) -> Credentials {
        match kubeconfig {
            Some(path) => Credentials::Kubeconfig(path.to_path_buf()),
            None => otherwise,
        }
    }
}

/// Why no client could be made, in words that say what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the kubeconfig {path}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    #[error(
        "not running in a pod with a service account ({reason}): give --kubeconfig PATH, or run \
         the agent with automountServiceAccountToken: true (packaging/kubernetes/api-mode)"
    )]
    InCluster { reason: String },
    #[error(
        "no kubeconfig found and not in a pod ({reason}): give --kubeconfig PATH or set KUBECONFIG"
    )]
    Inferred { reason: String },
    #[error("cannot build a client for {server}: {reason}")]
    Client { server: String, reason: String },
}

/// Checks at start, without the network, that `credentials` can make a client: the
/// kubeconfig reads and parses, or the pod has a service account. The error says what to do.
pub fn check_credentials(credentials: &Credentials) -> Result<(), ClientError> {
    match credentials {
        Credentials::Kubeconfig(path) => kube::config::Kubeconfig::read_from(path)
            .map(drop)
            .map_err(|err| ClientError::Kubeconfig {
                path: path.clone(),
                reason: err.to_string(),
            }),
        Credentials::InCluster => {
            kube::Config::incluster()
                .map(drop)
                .map_err(|err| ClientError::InCluster {
                    reason: err.to_string(),
                })
        }
        Credentials::Inferred => Ok(()),
    }
}

/// A client with deadlines on connecting, sending and reading, and ipmasq's User-Agent.
pub async fn client(credentials: &Credentials) -> Result<kube::Client, ClientError> {
    client_with(credentials, &Manners::default()).await
}

/// [`client`], with `manners`: the node in the User-Agent, each input's answers noted.
pub async fn client_with(
    credentials: &Credentials,
    manners: &Manners,
) -> Result<kube::Client, ClientError> {
    let mut config = match credentials {
        Credentials::Kubeconfig(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|err| {
                ClientError::Kubeconfig {
                    path: path.clone(),
                    reason: err.to_string(),
                }
            })?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|err| ClientError::Kubeconfig {
                    path: path.clone(),
                    reason: err.to_string(),
                })?
        }
        Credentials::InCluster => {
            kube::Config::incluster().map_err(|err| ClientError::InCluster {
                reason: err.to_string(),
            })?
        }
        Credentials::Inferred => {
            kube::Config::infer()
                .await
                .map_err(|err| ClientError::Inferred {
                    reason: err.to_string(),
                })?
        }
    };
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(read_timeout());
    config.reset_reader_on_write = true;
    let server = config.cluster_url.to_string();
    let failed = |reason: String| ClientError::Client {
        server: server.clone(),
        reason,
    };
    let agent = http::HeaderValue::from_str(&user_agent(manners.node.as_deref()))
        .map_err(|err| failed(err.to_string()))?;
    config
        .headers
        .retain(|(name, _)| *name != http::header::USER_AGENT);
    config.headers.push((http::header::USER_AGENT, agent));
    let builder =
        kube::client::ClientBuilder::try_from(config).map_err(|err| failed(err.to_string()))?;
    // Uncapped (u64::MAX) without a memory limit.
    let builder = builder.with_layer(&answer_cap::AnswerCapLayer {
        bytes: manners.answer_cap.unwrap_or(u64::MAX),
    });
    Ok(match &manners.clock {
        Some(clock) => builder
            .with_layer(&age::HeardLayer {
                clock: clock.clone(),
            })
            .build(),
        None => builder.build(),
    })
}

/// The agent's Node: `--node-name`, else `$NODE_NAME` (the downward API in the DaemonSet), else
/// the host's name (a kubelet registers its Node by it unless told otherwise).
pub fn node_name(flag: Option<&str>) -> Option<String> {
    let from_env = std::env::var("NODE_NAME").ok();
    pick_node_name(flag, from_env.as_deref(), hostname().as_deref())
}

fn pick_node_name(flag: Option<&str>, env: Option<&str>, host: Option<&str>) -> Option<String> {
    [flag, env, host]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|name| !name.is_empty())
        .map(|name| name.to_ascii_lowercase())
}

/// The kernel's host name (of the UTS namespace: the node's, with hostNetwork).
fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_name_is_the_flag_then_the_environment_then_the_host() {
        assert_eq!(
            pick_node_name(Some("flagged"), Some("env"), Some("host")).as_deref(),
            Some("flagged")
        );
        assert_eq!(
            pick_node_name(None, Some("env"), Some("host")).as_deref(),
            Some("env")
        );
        assert_eq!(
            pick_node_name(Some(" "), Some(""), Some("Host-1")).as_deref(),
            Some("host-1"),
            "blank values are skipped; a Node's name is lower case"
        );
        assert_eq!(pick_node_name(None, None, None), None);
    }

    #[test]
    fn a_kubeconfig_flag_wins_over_the_default() {
        assert_eq!(
            Credentials::from_flag(Some(Path::new("/k")), Credentials::InCluster),
            Credentials::Kubeconfig(PathBuf::from("/k"))
        );
        assert_eq!(
            Credentials::from_flag(None, Credentials::Inferred),
            Credentials::Inferred
        );
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_is_a_clear_error() {
        let result = client(&Credentials::Kubeconfig(PathBuf::from(
            "/nonexistent/ipmasq-kubeconfig",
        )))
        .await;
        let text = match result {
            Ok(_) => panic!("a client from a kubeconfig that does not exist"),
            Err(err) => err.to_string(),
        };
        assert!(
            text.starts_with("cannot read the kubeconfig /nonexistent/ipmasq-kubeconfig: "),
            "{text}"
        );
    }
}
