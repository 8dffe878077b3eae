//! The most the API may send the agent in one answer for the EgressNATPolicies list: a layer
//! of the client's stack that cuts the answer off once it is longer than the cap (the list is
//! the one input with no size of its own: any number of cluster-scoped objects, each up to
//! etcd's limit), so a list that could never be admitted is refused as it arrives instead of
//! being held and decoded into a memory-limited agent. Watches are not capped: each of their
//! events is one object.

use std::task::{Context, Poll};

/// The client's layer that caps the answers of EgressNATPolicy lists at `bytes`.
pub struct AnswerCapLayer {
    pub bytes: u64,
}

impl<S> tower::Layer<S> for AnswerCapLayer {
    type Service = AnswerCap<S>;

    fn layer(&self, inner: S) -> AnswerCap<S> {
        AnswerCap {
            inner,
            bytes: self.bytes,
        }
    }
}

/// The service [`AnswerCapLayer`] wraps around the client's stack.
pub struct AnswerCap<S> {
    inner: S,
    bytes: u64,
}

type Boxed<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Whether a request is a list (not a watch) of EgressNATPolicies.
fn capped(request: &http::Request<kube::client::Body>) -> bool {
    let uri = request.uri();
    super::age::Input::of_path(uri.path()) == Some(super::age::Input::EgressNatPolicy)
        && !super::age::is_watch(uri)
}

impl<S, B> tower::Service<http::Request<kube::client::Body>> for AnswerCap<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<http_body_util::Limited<B>>;
    type Error = S::Error;
    type Future = Boxed<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let limit = if capped(&request) {
            usize::try_from(self.bytes).unwrap_or(usize::MAX)
        } else {
            usize::MAX
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| http_body_util::Limited::new(body, limit)))
        })
    }
}

/// Whether `err` (anywhere in its chain) is an answer cut off by the cap.
pub fn cut_off(err: &(dyn std::error::Error + 'static)) -> bool {
    super::any_in_chain(err, &|err| err.is::<http_body_util::LengthLimitError>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::{Layer, Service};

    /// A server that answers every request with 100 bytes.
    struct HundredBytes;

    impl Service<http::Request<kube::client::Body>> for HundredBytes {
        type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<kube::client::Body>) -> Self::Future {
            let body = http_body_util::Full::new(bytes::Bytes::from(vec![b'x'; 100]));
            std::future::ready(Ok(http::Response::new(body)))
        }
    }

    fn request(uri: &str) -> http::Request<kube::client::Body> {
        http::Request::get(uri)
            .body(kube::client::Body::empty())
            .unwrap()
    }

    #[test]
    fn only_lists_of_policies_are_capped() {
        let list = "/apis/networking.gke.io/v1/egressnatpolicies?resourceVersion=0";
        assert!(capped(&request(list)));
        assert!(!capped(&request(
            "/apis/networking.gke.io/v1/egressnatpolicies?allowWatchBookmarks=true&watch=true&timeoutSeconds=110"
        )));
        assert!(!capped(&request(
            "/api/v1/namespaces/kube-system/configmaps?resourceVersion=0"
        )));
    }

    #[tokio::test]
    async fn an_answer_longer_than_the_cap_is_cut_off_and_said_so() {
        let mut service = AnswerCapLayer { bytes: 64 }.layer(HundredBytes);
        let cut = service
            .call(request("/apis/networking.gke.io/v1/egressnatpolicies"))
            .await
            .unwrap();
        let err = cut.into_body().collect().await.unwrap_err();
        assert!(cut_off(&*err), "{err}");
        let whole = service
            .call(request("/api/v1/namespaces/kube-system/configmaps/x"))
            .await
            .unwrap();
        assert_eq!(
            whole.into_body().collect().await.unwrap().to_bytes().len(),
            100
        );
        let other: Box<dyn std::error::Error> = "connection refused".into();
        assert!(!cut_off(&*other));
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_cut_off_is_no_answer_for_the_view_and_a_whole_one_is_once_read() {
        use super::super::age::{ApiClock, HeardLayer, Input};
        let clock = ApiClock::default();
        let capped = AnswerCapLayer { bytes: 64 }.layer(HundredBytes);
        let mut service = HeardLayer {
            clock: clock.clone(),
        }
        .layer(capped);
        let ten = std::time::Duration::from_secs(10);
        tokio::time::advance(ten).await;
        let now = tokio::time::Instant::now;
        let cut = service
            .call(request("/apis/networking.gke.io/v1/egressnatpolicies"))
            .await
            .unwrap();
        assert!(cut.into_body().collect().await.is_err());
        assert_eq!(clock.age(Input::EgressNatPolicy, now()), ten);
        let whole = service
            .call(request("/api/v1/namespaces/kube-system/configmaps/x"))
            .await
            .unwrap();
        assert_eq!(
            clock.age(Input::ConfigMap, now()),
            ten,
            "not before it is read"
        );
        whole.into_body().collect().await.unwrap();
        assert_eq!(
            clock.age(Input::ConfigMap, now()),
            std::time::Duration::ZERO
        );
    }
}
