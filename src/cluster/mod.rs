//! The Kubernetes API side of ipmasq: how a client is made (in-cluster service account, an
//! explicit kubeconfig, or kubectl's search) with deadlines on connecting and sending (each
//! one-shot call bounds its answer: see [`REQUEST_TIMEOUT`]), and how the agent
//! knows its own Node's name. The API-mode source, the Node mirror and `ipmasq fleet` build on it.

pub mod configmap;
pub mod inputs;
pub mod mirror;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long connecting to the API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long sending one request may take, and how long a one-shot request (not a watch: a
/// watch idles by design, and the watcher has its own idle deadline) may wait for its answer:
/// the client bounds connecting and sending; each one-shot call bounds its answer with
/// `tokio::time::timeout` of this (the mirror's writes; `fleet` bounds its whole listing).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

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

/// A client with deadlines on connecting and on every request's answer.
pub async fn client(credentials: &Credentials) -> Result<kube::Client, ClientError> {
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
    let server = config.cluster_url.to_string();
    kube::Client::try_from(config).map_err(|err| ClientError::Client {
        server,
        reason: err.to_string(),
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
