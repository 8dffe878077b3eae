//! `ipmasq fleet`'s paginated list, written once for its Nodes and its agents' pods: page by
//! page (`limit`, label selector, `continue`), each page handed over as it arrives, and a
//! continue token the server has let expire (410 Gone) starting the list again, once.

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// One page of a list: only its continue token and its items, parsed as `T` (which keeps only
/// what fleet reads; the page's text itself is read whole before it is parsed, so the page size
/// bounds the memory a page takes).
#[derive(Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
struct Page<T> {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default)]
    items: Vec<T>,
}

#[derive(Deserialize, Default)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

/// What the list hands over, in order.
pub(crate) enum Listed<T> {
    /// The items of the next page.
    Page(Vec<T>),
    /// The continue token expired: the list starts again from its first page, so what was
    /// gathered from the pages before must be dropped.
    Again,
}

/// Every item at `url` (matching `selector`, when given), `limit` a page, each page given to
/// `take` as it arrives. A continue token the server has let expire (410 Gone: its revision was
/// compacted, about 5 minutes on a default etcd) starts the list again from the first page,
/// once, as kubectl's pager does; any other error ends it.
pub(crate) async fn each_page<T: DeserializeOwned>(
    client: &kube::Client,
    url: &str,
    limit: u32,
    selector: Option<&str>,
    mut take: impl FnMut(Listed<T>),
) -> Result<(), kube::Error> {
    let request = kube::core::Request::new(url);
    let mut continue_token: Option<String> = None;
    let mut started_again = false;
    loop {
        let mut params = kube::api::ListParams::default().limit(limit);
        if let Some(selector) = selector {
            params = params.labels(selector);
        }
        if let Some(token) = &continue_token {
            params = params.continue_token(token);
        }
        let answer = client
            .request::<Page<T>>(request.list(&params).map_err(kube::Error::BuildRequest)?)
            .await;
        let page = match answer {
            Err(kube::Error::Api(status))
                if status.code == 410 && continue_token.is_some() && !started_again =>
            {
                started_again = true;
                continue_token = None;
                take(Listed::Again);
                continue;
            }
            answer => answer?,
        };
        take(Listed::Page(page.items));
        continue_token = page.metadata.continue_token.filter(|t| !t.is_empty());
        if continue_token.is_none() {
            return Ok(());
        }
    }
}
