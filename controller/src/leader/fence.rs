//! The fence: a tower layer in the controller's Kubernetes client that refuses every write unless
//! leadership is known to hold at the moment the request leaves.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::{Either, Ready, ready};
use http::{Method, Request};
use prometheus_client::metrics::counter::Counter;
use tower::{BoxError, Layer, Service};

/// Whether writes may go out, shared by the elector (which extends it on every renewal) and the
/// client (which checks it on every request).
#[derive(Clone, Debug)]
pub struct Fence(Arc<State>);

#[derive(Debug)]
struct State {
    /// Without leader election the fence is always open.
    elected: bool,
    /// Writes may go out until this instant.
    until: Mutex<Option<Instant>>,
    /// Writes refused.
    refused: Counter,
}

impl Fence {
    /// A fence that never closes: a controller running without leader election.
    pub fn open() -> Fence {
        Fence(Arc::new(State {
            elected: false,
            until: Mutex::new(None),
            refused: Counter::default(),
        }))
    }

    /// A closed fence for a controller under leader election; `refused` counts refused writes.
    pub fn elected(refused: Counter) -> Fence {
        Fence(Arc::new(State {
            elected: true,
            until: Mutex::new(None),
            refused,
        }))
    }

    fn until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.0
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a write may go out now.
    pub fn allows_writes(&self) -> bool {
        !self.0.elected || self.until().is_some_and(|u| Instant::now() < u)
    }

    /// Writes may go out until `until` (a renewal succeeded); never moves the limit back.
    pub fn extend(&self, until: Instant) {
        let mut u = self.until();
        if u.is_none_or(|cur| cur < until) {
            *u = Some(until);
        }
    }

    /// Until when writes may go out (`None`: closed, or never opened).
    pub fn limit(&self) -> Option<Instant> {
        *self.until()
    }

    /// No write goes out any more (leadership given up or lost).
    pub fn close(&self) {
        *self.until() = None;
    }

    /// Writes refused so far.
    pub fn refused(&self) -> u64 {
        self.0.refused.get()
    }
}

/// The error a refused write fails with.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} refused: this controller is not (or no longer surely) the leader")]
pub struct FencedWrite {
    /// The request's method.
    pub method: Method,
    /// The request's path.
    pub path: String,
}

/// Whether a Kubernetes client error is a write the fence refused.
pub fn is_fenced(e: &kube::Error) -> bool {
    use std::error::Error as _;
    let mut src: Option<&(dyn std::error::Error + 'static)> = e.source();
    if let kube::Error::Service(b) = e
        && b.is::<FencedWrite>()
    {
        return true;
    }
    while let Some(s) = src {
        if s.is::<FencedWrite>() {
            return true;
        }
        src = s.source();
    }
    false
}

/// Adds the fence to a client's service stack (outermost, so nothing below can resend a write
/// later: the client must have kube's own retry layer off).
#[derive(Clone, Debug)]
pub struct FenceLayer(pub Fence);

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// A service behind the fence.
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

fn is_read(m: &Method) -> bool {
    m == Method::GET || m == Method::HEAD || m == Method::OPTIONS
}

impl<S, B, R> Service<Request<B>> for Fenced<S>
where
    S: Service<Request<B>, Response = R>,
    S::Error: Into<BoxError>,
{
    type Response = R;
    type Error = BoxError;
    type Future = Either<
        futures::future::MapErr<S::Future, fn(S::Error) -> BoxError>,
        Ready<Result<R, BoxError>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        use futures::TryFutureExt;
        if is_read(req.method()) || self.fence.allows_writes() {
            let f: fn(S::Error) -> BoxError = Into::into;
            return Either::Left(self.inner.call(req).map_err(f));
        }
        self.fence.0.refused.inc();
        tracing::warn!(method = %req.method(), path = %req.uri().path(), "write refused: not the leader");
        Either::Right(ready(Err(Box::new(FencedWrite {
            method: req.method().clone(),
            path: req.uri().path().to_owned(),
        }) as BoxError)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_elected_fence_opens_only_until_the_renewal_limit() {
        let f = Fence::elected(Counter::default());
        assert!(!f.allows_writes(), "closed until the first renewal");
        f.extend(Instant::now() + Duration::from_secs(60));
        assert!(f.allows_writes());
        f.extend(Instant::now()); // never moves back
        assert!(f.allows_writes());
        f.close();
        assert!(!f.allows_writes());
        f.extend(Instant::now() - Duration::from_millis(1));
        assert!(!f.allows_writes(), "a limit in the past keeps it closed");
        assert!(Fence::open().allows_writes());
    }

    #[tokio::test]
    async fn writes_are_refused_and_counted_reads_pass() {
        use tower::ServiceExt;
        let f = Fence::elected(Counter::default());
        let inner = tower::service_fn(|_req: Request<()>| async { Ok::<_, BoxError>("sent") });
        let svc = FenceLayer(f.clone()).layer(inner);
        let get = Request::get("/api/v1/pods").body(()).unwrap();
        assert_eq!(svc.clone().oneshot(get).await.unwrap(), "sent");
        for m in [Method::POST, Method::PATCH, Method::PUT, Method::DELETE] {
            let req = Request::builder().method(m).uri("/x").body(()).unwrap();
            let err = svc.clone().oneshot(req).await.unwrap_err();
            assert!(err.is::<FencedWrite>(), "{err}");
        }
        assert_eq!(f.refused(), 4);
        f.extend(Instant::now() + Duration::from_secs(60));
        let req = Request::patch("/x").body(()).unwrap();
        assert_eq!(svc.oneshot(req).await.unwrap(), "sent");
    }
}
