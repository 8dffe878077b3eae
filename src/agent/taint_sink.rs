//! API mode with `--node-taint`: the taint `node.ipmasq.io/agent-not-ready` on the agent's own
//! Node follows what the agent can enforce. Removed after the first pass whose rules are in and
//! were read back from the kernel; put back when the agent has no usable config (none yet, or
//! refused for memory, with no rules installed), when its first sync failed, and after a stop
//! with `--cleanup-on-exit` removed the rules. A pass that keeps the last good rules changes
//! nothing: the rules still hold, and a flapping taint would only churn the scheduler.

use super::reconcile::{ApiSettings, Pass};
use super::sinks::{PassDone, StatusSink};
use crate::cluster::backoff::{jitter, ApiBackoff, Failure};
use crate::cluster::configmap::ConfigMapFeed;
use crate::cluster::taint::{converge, read_shutting_down, Converged, Wish, TAINT_KEY};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

/// The taint of one agent: made at start (API mode, `--node-taint`, a node name), its sink
/// handed to the reconcile thread, its writer spawned once the node lock is taken.
pub struct NodeTaint {
    wishes: Arc<watch::Sender<Option<Wish>>>,
    /// The wish the writer last made true on the Node (None: none since the stop asked).
    made: Arc<watch::Sender<Option<Wish>>>,
    writer: Option<Writer>,
    /// Set when a stop puts the taint back: from then on no pass's wish is taken (a pass still
    /// running at the stop would otherwise untaint the Node again).
    stopping: Arc<AtomicBool>,
    /// Who reads the Node at a stop, to learn whether its host is shutting down.
    credentials: crate::cluster::Credentials,
    node: String,
}

/// How long a stop without `--cleanup-on-exit` waits before reading the Node a second time:
/// the kubelet writes its shutdown to the Node while it already stops pods.
const SHUTDOWN_SEEN_AGAIN_AFTER: Duration = Duration::from_secs(1);

impl NodeTaint {
    pub fn new(api: Option<&ApiSettings>) -> Option<NodeTaint> {
        let api = api?;
        if !api.status.node_taint {
            return None;
        }
        let Some(node) = api.node_name.clone() else {
            warn!("--node-taint without a node name (--node-name, $NODE_NAME, the host name): the taint {TAINT_KEY} is not managed");
            return None;
        };
        let (wishes, wishes_rx) = watch::channel(None);
        let made = Arc::new(watch::channel(None).0);
        Some(NodeTaint {
            wishes: Arc::new(wishes),
            made: made.clone(),
            writer: Some(Writer {
                credentials: api.credentials.clone(),
                node: node.clone(),
                wishes: wishes_rx,
                made,
            }),
            stopping: Arc::new(AtomicBool::new(false)),
            credentials: api.credentials.clone(),
            node,
        })
    }

    /// The sink the reconcile thread publishes each pass to.
    pub fn sink(&self, feed: Option<ConfigMapFeed>) -> TaintSink {
        TaintSink {
            wishes: self.wishes.clone(),
            stopping: self.stopping.clone(),
            read_back: false,
            feed,
        }
    }

    /// Spawns the writer on the current runtime (once; later calls do nothing).
    pub fn spawn_writer(&mut self) {
        if let Some(writer) = self.writer.take() {
            tokio::spawn(writer.run());
        }
    }

    /// Before `--cleanup-on-exit` removes the rules: the taint put back, within `within` at
    /// most (best effort: the stop goes on either way). What the writer made before this asked
    /// counts for nothing: only a write of the taint from now on is waited for.
    pub async fn rules_going(&self, within: Duration) {
        self.put_back(within, "the rules are being removed").await;
    }

    /// A stop that leaves the rules: when the kubelet says the host is shutting down, the
    /// taint goes back (the rules go with the host, and the node must come back gated); on
    /// any other stop (a rollout, a deleted pod) the Node is left as it is. Within `within`
    /// at most, best effort.
    pub async fn rules_staying(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let read = async {
            let manners = crate::cluster::Manners::writer_for(&self.node);
            let client = crate::cluster::client_with(&self.credentials, &manners)
                .await
                .map_err(|err| err.to_string())?;
            let seen = read_shutting_down(&client, &self.node).await;
            if !matches!(seen, Ok(false)) {
                return seen.map_err(|err| err.to_string());
            }
            tokio::time::sleep(SHUTDOWN_SEEN_AGAIN_AFTER).await;
            read_shutting_down(&client, &self.node)
                .await
                .map_err(|err| err.to_string())
        };
        match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(true)) => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                self.put_back(left, "the node is shutting down").await;
            }
            Ok(Ok(false)) => {}
            Ok(Err(reason)) => {
                warn!(error = %reason, taint = TAINT_KEY, "cannot read whether the node is shutting down; the taint is left as it is")
            }
            Err(_) => {
                warn!(taint = TAINT_KEY, "no answer in time on whether the node is shutting down; the taint is left as it is")
            }
        }
    }

    /// Puts the taint back, within `within` at most; `why` ends the log line.
    async fn put_back(&self, within: Duration, why: &str) {
        self.stopping.store(true, Ordering::SeqCst);
        self.made.send_replace(None);
        self.wishes.send_replace(Some(Wish::Tainted));
        let mut made = self.made.subscribe();
        let confirmed = tokio::time::timeout(within, made.wait_for(|m| *m == Some(Wish::Tainted)))
            .await
            .is_ok_and(|answer| answer.is_ok());
        if confirmed {
            info!(taint = TAINT_KEY, "the Node is tainted again: {why}");
        } else {
            warn!(
                taint = TAINT_KEY,
                within_s = within.as_secs_f64(),
                "could not put the taint back before the stop deadline"
            );
        }
    }
}

/// What the kernel and the API say, each asked only when a pass needs it.
struct Facts<R: FnOnce() -> bool, H: FnOnce() -> bool> {
    /// This agent has synced once.
    ever_synced: bool,
    /// The API's inputs were listed, or failed to be.
    api_spoke: bool,
    /// The rules in force, read back from the kernel, are as planned.
    read_back: R,
    /// The kernel holds rules of ours (a previous agent's, across a restart).
    holds_rules: H,
}

/// What a pass says of the taint: None when it changes nothing. Having no rules is said only
/// once the API has spoken (before, the agent knows nothing yet) and when the kernel holds none
/// of ours: after a restart the rules the last agent left still hold.
fn wish_after<R, H>(pass: &Pass, facts: Facts<R, H>) -> Option<Wish>
where
    R: FnOnce() -> bool,
    H: FnOnce() -> bool,
{
    let without_rules = |facts: Facts<R, H>| facts.api_spoke && !(facts.holds_rules)();
    match pass {
        Pass::Synced(_) => (facts.read_back)().then_some(Wish::Untainted),
        Pass::NoValidConfig => without_rules(facts).then_some(Wish::Tainted),
        Pass::Failed(_) if !facts.ever_synced => without_rules(facts).then_some(Wish::Tainted),
        Pass::Failed(_) => None,
    }
}

/// The reconcile thread's side: each pass's wish handed to the writer when it changed.
pub struct TaintSink {
    wishes: Arc<watch::Sender<Option<Wish>>>,
    /// The stop has put the taint back: passes say nothing more.
    stopping: Arc<AtomicBool>,
    /// The rules were read back from the kernel once: later synced passes need not again.
    read_back: bool,
    /// What the API watchers publish: whether the inputs were listed, or cannot be.
    feed: Option<ConfigMapFeed>,
}

impl TaintSink {
    /// Whether the API has spoken: every input listed, or a failure to list one.
    fn api_spoke(&self) -> bool {
        self.feed.as_ref().is_none_or(|feed| {
            let state = feed.lock().unwrap_or_else(|e| e.into_inner());
            state.listed() || state.trouble().is_some()
        })
    }
}

impl StatusSink for TaintSink {
    fn publish(&mut self, done: &PassDone) {
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        let ever_synced = done.reconciler.status.syncs_ok > 0;
        let already = self.read_back;
        let facts = Facts {
            ever_synced,
            api_spoke: self.api_spoke(),
            read_back: || already || done.reconciler.rules_read_back(),
            holds_rules: || done.reconciler.holds_rules_of_ours(),
        };
        let wish = wish_after(done.pass, facts);
        if wish == Some(Wish::Untainted) {
            self.read_back = true;
        }
        if let Some(wish) = wish {
            self.wishes.send_if_modified(|current| {
                let changed = *current != Some(wish);
                *current = Some(wish);
                changed
            });
        }
    }
}

/// The writer task: the client, then each wish made true on the Node, retried with a backoff.
struct Writer {
    credentials: crate::cluster::Credentials,
    node: String,
    wishes: watch::Receiver<Option<Wish>>,
    made: Arc<watch::Sender<Option<Wish>>>,
}

impl Writer {
    async fn run(mut self) {
        let mut backoff = ApiBackoff::default();
        let client = loop {
            let manners = crate::cluster::Manners::writer_for(&self.node);
            match crate::cluster::client_with(&self.credentials, &manners).await {
                Ok(client) => break client,
                Err(err) => {
                    let wait =
                        backoff.after(Failure::Unanswered, tokio::time::Instant::now(), jitter());
                    warn!(error = %err, retry_in_s = wait.as_secs_f64(), "cannot make a client for the taint {TAINT_KEY}");
                    tokio::time::sleep(wait).await;
                }
            }
        };
        let mut failing = false;
        loop {
            let Some(wish) = *self.wishes.borrow_and_update() else {
                if self.wishes.changed().await.is_err() {
                    return;
                }
                continue;
            };
            match converge(&client, &self.node, wish).await {
                Ok(converged) => {
                    failing = false;
                    say_made(&self.node, wish, &converged);
                    self.made.send_replace(Some(wish));
                    if self.wishes.changed().await.is_err() {
                        return;
                    }
                }
                Err(err) => {
                    // Every failure on the 30 s cap: a Node not registered yet (404) is
                    // expected soon, not in minutes.
                    let wait =
                        backoff.after(Failure::Unanswered, tokio::time::Instant::now(), jitter());
                    if !failing {
                        warn!(error = %err, retry_in_s = wait.as_secs_f64(), wanted = wish.as_str(), "cannot make the taint {TAINT_KEY} as wanted; retrying with a backoff");
                    }
                    failing = true;
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        changed = self.wishes.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }
}

fn say_made(node: &str, wish: Wish, converged: &Converged) {
    let already = *converged == Converged::Already;
    match wish {
        Wish::Untainted => info!(
            node,
            taint = TAINT_KEY,
            already,
            "the rules are in and were read back: the Node is untainted, pods may start"
        ),
        Wish::Tainted => warn!(
            node,
            taint = TAINT_KEY,
            already,
            "the agent cannot enforce: the Node is tainted, no new pod starts here"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;

    #[test]
    fn only_rules_read_back_untaint_and_only_having_none_taints() {
        let facts = |ever_synced, api_spoke, read_back: bool, holds_rules: bool| Facts {
            ever_synced,
            api_spoke,
            read_back: move || read_back,
            holds_rules: move || holds_rules,
        };
        let synced = Pass::Synced(Vec::new());
        let untainted = Some(Wish::Untainted);
        assert_eq!(
            wish_after(&synced, facts(true, true, true, true)),
            untainted
        );
        // Written but not read back yet: nothing changes.
        assert_eq!(wish_after(&synced, facts(true, true, false, true)), None);
        let none = Pass::NoValidConfig;
        let tainted = Some(Wish::Tainted);
        assert_eq!(wish_after(&none, facts(false, true, true, false)), tainted);
        // Before the API has spoken, no config says nothing.
        assert_eq!(wish_after(&none, facts(false, false, true, false)), None);
        // A restart with a refused config: the last agent's rules still hold, no flap.
        assert_eq!(wish_after(&none, facts(false, true, true, true)), None);
        let failed = || Pass::Failed(BackendError::Run("iptables-restore: exit 4".into()));
        assert_eq!(
            wish_after(&failed(), facts(false, true, true, false)),
            tainted
        );
        assert_eq!(
            wish_after(&failed(), facts(false, false, true, false)),
            None
        );
        assert_eq!(wish_after(&failed(), facts(false, true, true, true)), None);
        // Once synced, a failing pass keeps the rules it had: no flap.
        assert_eq!(wish_after(&failed(), facts(true, true, true, false)), None);
    }
}
