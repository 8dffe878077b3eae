//! How old the agent's view of each API input is: when the API last answered a request for
//! that input (a LIST page or a GET once its body is whole: a list cut off on the way is no
//! answer; the start of a watch, each of its renewals, each event or bookmark it delivers; a
//! `404` of a CRD that is not served is an answer), kept by a layer of the client's stack,
//! because kube-runtime's watcher keeps bookmarks and watch renewals to itself.
//!
//! A healthy idle watch hears a bookmark about once a minute (Kubernetes 1.27 and later) or is
//! renewed after [`super::READ_TIMEOUT`] of silence (earlier servers send none), so a healthy
//! view is at most about that old; a view much older than that is stale (a stuck connection, an API
//! that does not answer), which the metric `ipmasq_api_view_age_seconds` and the Node
//! condition's `ApiViewStale` say.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::time::Instant;

/// The API inputs whose age is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Input {
    ConfigMap,
    Node,
    EgressNatPolicy,
}

impl Input {
    pub const ALL: [Input; 3] = [Input::ConfigMap, Input::Node, Input::EgressNatPolicy];

    /// The metric's `input` label.
    pub fn label(self) -> &'static str {
        match self {
            Input::ConfigMap => "configmap",
            Input::Node => "node",
            Input::EgressNatPolicy => "egressnatpolicy",
        }
    }

    /// The input a request's path is for (None: another request, e.g. a status write).
    pub fn of_path(path: &str) -> Option<Input> {
        if path.starts_with("/api/v1/namespaces/") && path.contains("/configmaps") {
            Some(Input::ConfigMap)
        } else if path.starts_with("/api/v1/nodes") && !path.ends_with("/status") {
            Some(Input::Node)
        } else if path.starts_with(&format!("/apis/{}/", crate::config::egress_nat::API_GROUP)) {
            Some(Input::EgressNatPolicy)
        } else {
            None
        }
    }
}

/// When the API last answered for each input; shared by the client's layer (which writes) and
/// the metrics and the mirror (which read).
#[derive(Clone, Debug)]
pub struct ApiClock {
    started: Instant,
    heard: Arc<Mutex<[Option<Instant>; 3]>>,
}

impl Default for ApiClock {
    fn default() -> Self {
        ApiClock {
            started: Instant::now(),
            heard: Arc::default(),
        }
    }
}

impl ApiClock {
    /// Notes that the API answered for `input` now.
    pub fn heard(&self, input: Input) {
        let now = Instant::now();
        self.heard.lock().unwrap_or_else(|e| e.into_inner())[input as usize] = Some(now);
    }

    /// How old the view of `input` is at `now`: since the API last answered for it, or since
    /// the clock started when it never has.
    pub fn age(&self, input: Input, now: Instant) -> std::time::Duration {
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner())[input as usize];
        now.saturating_duration_since(heard.unwrap_or(self.started))
    }

    /// The oldest view among `inputs` at `now`, with its input.
    pub fn oldest(&self, inputs: &[Input], now: Instant) -> Option<(Input, std::time::Duration)> {
        // Reversed: of equal ages, the first input in order is named.
        inputs
            .iter()
            .rev()
            .map(|&input| (input, self.age(input, now)))
            .max_by_key(|(_, age)| *age)
    }
}

/// The inputs an agent watches and their clock: what the metric and the condition read.
#[derive(Clone, Debug)]
pub struct ApiView {
    pub clock: ApiClock,
    /// The inputs watched (the Node only with a node name).
    pub inputs: Vec<Input>,
    /// How old an input's view may be before it is stale (`--api-view-stale-after`).
    pub stale_after: std::time::Duration,
}

impl ApiView {
    /// The view of an agent that watches its Node when it knows its name.
    pub fn new(clock: ApiClock, node_named: bool, stale_after: std::time::Duration) -> ApiView {
        let inputs = Input::ALL
            .into_iter()
            .filter(|input| node_named || *input != Input::Node)
            .collect();
        ApiView {
            clock,
            inputs,
            stale_after,
        }
    }

    /// How old `input`'s view may be: `stale_after`, and for the EgressNATPolicies the slow
    /// schedule of a CRD that is not served on top ([`super::backoff::ANSWERED_CAP`]).
    pub fn allowed(&self, input: Input) -> std::time::Duration {
        match input {
            Input::EgressNatPolicy => self.stale_after + super::backoff::ANSWERED_CAP,
            Input::ConfigMap | Input::Node => self.stale_after,
        }
    }

    /// Words for the Node condition when an input's view is older than allowed at `now`
    /// (the oldest such input), else None.
    pub fn stale(&self, now: Instant) -> Option<String> {
        self.ages(now)
            .into_iter()
            .rev()
            .filter(|(input, age)| *age > self.allowed(*input))
            .max_by_key(|(_, age)| *age)
            .map(|(input, _)| {
                format!(
                    "the API has not answered for the {} for over {} s: the rules are those of the last config seen",
                    input.label(),
                    self.allowed(input).as_secs()
                )
            })
    }

    /// Each watched input's age at `now`.
    pub fn ages(&self, now: Instant) -> Vec<(Input, std::time::Duration)> {
        self.inputs
            .iter()
            .map(|&input| (input, self.clock.age(input, now)))
            .collect()
    }

    /// The oldest watched input's age at `now`.
    pub fn oldest(&self, now: Instant) -> Option<(Input, std::time::Duration)> {
        self.clock.oldest(&self.inputs, now)
    }
}

/// The client's layer that notes each answer (any status below 500) in an [`ApiClock`].
pub struct HeardLayer {
    pub clock: ApiClock,
}

impl<S> tower::Layer<S> for HeardLayer {
    type Service = Heard<S>;

    fn layer(&self, inner: S) -> Heard<S> {
        Heard {
            inner,
            clock: self.clock.clone(),
        }
    }
}

/// The service [`HeardLayer`] wraps around the client's stack.
pub struct Heard<S> {
    inner: S,
    clock: ApiClock,
}

type Boxed<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<kube::client::Body>> for Heard<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<Noted<B>>;
    type Error = S::Error;
    type Future = Boxed<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let input = Input::of_path(request.uri().path());
        let watch = is_watch(request.uri());
        let answer = self.inner.call(request);
        let clock = self.clock.clone();
        Box::pin(async move {
            let response = answer.await?;
            // An answer that serves the input: data, or "there is none" (404) or "list again"
            // (410). A refusal (401, 403), a throttle (429) or a server error leaves the view
            // as old as it was.
            let status = response.status();
            let answered = status.is_success()
                || status == http::StatusCode::NOT_FOUND
                || status == http::StatusCode::GONE;
            // A watch is an answer once it starts, and each event or bookmark again; any other
            // answer once its body is whole (a list cut off on the way is no answer).
            let noted = input.filter(|_| answered).map(|input| {
                if watch {
                    clock.heard(input);
                }
                (clock, input)
            });
            Ok(response.map(|body| Noted {
                inner: Box::pin(body),
                noted,
                each_frame: watch,
            }))
        })
    }
}

/// Whether a request is a watch (`watch=true` in its query).
pub fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "watch=true" || pair == "watch=1")
}

/// An answer's body that notes the API answering for its input: a watch's each frame (its
/// events and bookmarks: a healthy watch keeps the view young between renewals), any other
/// answer's end.
pub struct Noted<B> {
    inner: std::pin::Pin<Box<B>>,
    noted: Option<(ApiClock, Input)>,
    each_frame: bool,
}

impl<B: http_body::Body> http_body::Body for Noted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = this.inner.as_mut().poll_frame(cx);
        if let Some((clock, input)) = &this.noted {
            match &polled {
                Poll::Ready(Some(Ok(_))) if this.each_frame => clock.heard(*input),
                Poll::Ready(None) => clock.heard(*input),
                _ => {}
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_input_is_known_by_its_path() {
        for (path, input) in [
            (
                "/api/v1/namespaces/kube-system/configmaps",
                Some(Input::ConfigMap),
            ),
            (
                "/api/v1/namespaces/kube-system/configmaps/ip-masq-agent",
                Some(Input::ConfigMap),
            ),
            ("/api/v1/nodes", Some(Input::Node)),
            ("/api/v1/nodes/node-a/status", None),
            (
                "/apis/networking.gke.io/v1/egressnatpolicies",
                Some(Input::EgressNatPolicy),
            ),
            ("/api/v1/namespaces/kube-system/events", None),
        ] {
            assert_eq!(Input::of_path(path), input, "{path}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_view_older_than_allowed_is_stale_and_the_policies_get_the_slow_schedule() {
        let view = ApiView::new(
            ApiClock::default(),
            true,
            std::time::Duration::from_secs(180),
        );
        for input in Input::ALL {
            view.clock.heard(input);
        }
        tokio::time::advance(std::time::Duration::from_secs(170)).await;
        assert_eq!(view.stale(Instant::now()), None);
        view.clock.heard(Input::ConfigMap);
        view.clock.heard(Input::Node);
        tokio::time::advance(std::time::Duration::from_secs(20)).await;
        assert_eq!(
            view.stale(Instant::now()),
            None,
            "the policies (190 s) may wait for a CRD's slow schedule"
        );
        tokio::time::advance(std::time::Duration::from_secs(180)).await;
        let words = view.stale(Instant::now()).unwrap();
        assert!(
            words.starts_with("the API has not answered for the configmap for over 180 s"),
            "{words}"
        );
        tokio::time::advance(std::time::Duration::from_secs(60)).await;
        assert_eq!(
            view.stale(Instant::now()).as_deref(),
            Some(words.as_str()),
            "the words do not grow with the age: a stale node is not rewritten at every pass"
        );
        let nameless = ApiView::new(
            ApiClock::default(),
            false,
            std::time::Duration::from_secs(180),
        );
        assert_eq!(nameless.inputs, [Input::ConfigMap, Input::EgressNatPolicy]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_age_counts_from_the_last_answer() {
        let clock = ApiClock::default();
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        assert_eq!(
            clock.age(Input::Node, Instant::now()).as_secs(),
            5,
            "never heard: since start"
        );
        clock.heard(Input::Node);
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        let now = Instant::now();
        assert_eq!(clock.age(Input::Node, now).as_secs(), 2);
        assert_eq!(
            clock
                .oldest(&Input::ALL, now)
                .map(|(i, a)| (i, a.as_secs())),
            Some((Input::ConfigMap, 7))
        );
    }
}
