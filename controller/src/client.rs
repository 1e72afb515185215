//! The controllers' Kubernetes client: every request counted by verb (`/metrics`), every write
//! behind the leader fence.

use std::task::{Context, Poll};

use http::{Method, Request};
use kube::client::ClientBuilder;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::{Layer, Service};

use crate::Result;
use crate::leader::{Fence, FenceLayer};

/// Label set of an API request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`.
    pub verb: String,
}

/// The Kubernetes verb of a request, as the apiserver names it.
pub fn verb<B>(req: &Request<B>) -> &'static str {
    let query = req.uri().query().unwrap_or_default();
    let named = {
        // `/api/v1/namespaces/x/pods` lists, `/api/v1/namespaces/x/pods/p` gets: a collection
        // path has an even number of segments past the group/version prefix.
        let segs: Vec<&str> = req
            .uri()
            .path()
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let prefix = if segs.first() == Some(&"api") { 2 } else { 3 };
        let rest = segs.len().saturating_sub(prefix);
        rest % 2 == 0
    };
    match *req.method() {
        Method::GET if query.contains("watch=true") || query.contains("watch=1") => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// Counts requests into a family.
#[derive(Clone, Debug)]
pub struct CountLayer(pub Family<RequestLabels, Counter>);

impl<S> Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            requests: self.0.clone(),
        }
    }
}

/// A service whose requests are counted.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    requests: Family<RequestLabels, Counter>,
}

impl<S, B> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> S::Future {
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb(&req).to_owned(),
            })
            .inc();
        self.inner.call(req)
    }
}

/// The controllers' client from `config`: requests counted into `requests`, writes behind
/// `fence`. kube's own retry layer is off: it would resend a write long after the fence let it
/// through (failed requests are retried by the reconcile's backoff instead).
///
/// # Errors
/// Client construction errors (TLS, credentials).
pub fn build(
    mut config: kube::Config,
    fence: &Fence,
    requests: &Family<RequestLabels, Counter>,
) -> Result<kube::Client> {
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&CountLayer(requests.clone()))
        .with_layer(&FenceLayer(fence.clone()))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_as_the_apiserver_names_them() {
        let r = |m: Method, uri: &str| Request::builder().method(m).uri(uri).body(()).unwrap();
        let ns = "/apis/migration.platform.example/v1alpha1/namespaces/x";
        assert_eq!(
            verb(&r(Method::GET, &format!("{ns}/virtualmachinemigrations"))),
            "list"
        );
        assert_eq!(
            verb(&r(Method::GET, &format!("{ns}/virtualmachinemigrations/m"))),
            "get"
        );
        assert_eq!(
            verb(&r(
                Method::GET,
                &format!("{ns}/virtualmachinemigrations?watch=true&rv=1")
            )),
            "watch"
        );
        assert_eq!(
            verb(&r(Method::GET, "/api/v1/namespaces/x/secrets/s")),
            "get"
        );
        assert_eq!(
            verb(&r(Method::GET, "/api/v1/namespaces/x/secrets")),
            "list"
        );
        assert_eq!(verb(&r(Method::GET, "/apis/batch/v1/jobs")), "list");
        assert_eq!(
            verb(&r(
                Method::PATCH,
                &format!("{ns}/virtualmachinemigrations/m/status")
            )),
            "patch"
        );
        assert_eq!(
            verb(&r(Method::POST, "/api/v1/namespaces/x/secrets")),
            "create"
        );
    }
}
