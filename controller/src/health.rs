//! The small HTTP endpoints: `/healthz` and `/readyz` on the health address, `/metrics` on the
//! metrics address (they may be the same).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::metrics::Metrics;
use crate::{Error, Result};

/// Where the controller stands, for `/readyz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stand {
    /// Starting, or leading with caches not synced yet: not ready.
    Syncing,
    /// A standby under leader election: ready (it can take over), not leading.
    Standby,
    /// Leading (or running alone) with every cache synced.
    Ready,
}

/// Readiness: ready only once the controllers' caches have synced, or as a standby — and, as
/// the leader, only while ferry's admission policies are in force (or not required).
#[derive(Debug, Default)]
pub struct Readiness(AtomicU8, std::sync::Mutex<Option<String>>);

impl Readiness {
    /// Marks the controller ready (caches synced).
    pub fn set_ready(&self) {
        self.0.store(2, Ordering::Release);
    }

    /// Marks it a standby.
    pub fn set_standby(&self) {
        self.0.store(1, Ordering::Release);
    }

    /// Marks it not ready (caches syncing).
    pub fn set_syncing(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// Where it stands.
    pub fn stand(&self) -> Stand {
        match self.0.load(Ordering::Acquire) {
            2 => Stand::Ready,
            1 => Stand::Standby,
            _ => Stand::Syncing,
        }
    }

    /// Marks the admission policies not in force (`Some(why)`) or in force.
    pub fn set_policies(&self, why: Option<String>) {
        *self
            .1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    }

    /// Why the admission policies are not in force, if they are not.
    pub fn policies(&self) -> Option<String> {
        self.1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.stand() != Stand::Syncing
            && (self.stand() == Stand::Standby || self.policies().is_none())
    }
}

/// What one listener serves.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// Serve `/healthz` and `/readyz`.
    pub health: Option<Arc<Readiness>>,
    /// Serve `/metrics`.
    pub metrics: Option<Arc<Metrics>>,
}

fn respond(code: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// The response for `path`. Pure but for reading the readiness flag and the metrics.
pub fn route(endpoints: &Endpoints, path: &str) -> Response<Full<Bytes>> {
    match (path, &endpoints.health, &endpoints.metrics) {
        ("/healthz", Some(_), _) => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        ("/readyz", Some(r), _) => match r.stand() {
            Stand::Ready => match r.policies() {
                None => respond(StatusCode::OK, "text/plain", "ready\n".into()),
                Some(why) => respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{}\n", crate::admission_guard::held_back(&why)),
                ),
            },
            Stand::Standby => respond(
                StatusCode::OK,
                "text/plain",
                "ready: standby, not the leader\n".into(),
            ),
            Stand::Syncing => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "caches not synced\n".into(),
            ),
        },
        ("/metrics", _, Some(m)) => respond(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            m.encode(),
        ),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Binds `addr` and serves `endpoints` until the task is dropped.
///
/// # Errors
/// [`Error::Io`] when the address cannot be bound.
pub async fn bind(
    addr: SocketAddr,
    endpoints: Endpoints,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await.map_err(|source| Error::Io {
        what: format!("binding {addr}"),
        source,
    })?;
    let local = listener.local_addr().map_err(|source| Error::Io {
        what: format!("address of {addr}"),
        source,
    })?;
    info!(addr = %local, health = endpoints.health.is_some(), metrics = endpoints.metrics.is_some(), "serving");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let r = route(&endpoints, req.uri().path());
                    async move { Ok::<_, Infallible>(r) }
                });
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await
                {
                    debug!(error = %e, "http connection");
                }
            });
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let ready = Arc::new(Readiness::default());
        let e = Endpoints {
            health: Some(ready.clone()),
            metrics: Some(Arc::new(Metrics::default())),
        };
        assert_eq!(route(&e, "/healthz").status(), StatusCode::OK);
        assert_eq!(
            route(&e, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        ready.set_standby();
        assert_eq!(route(&e, "/readyz").status(), StatusCode::OK);
        ready.set_syncing();
        assert_eq!(
            route(&e, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        ready.set_ready();
        assert_eq!(route(&e, "/readyz").status(), StatusCode::OK);
        assert_eq!(route(&e, "/metrics").status(), StatusCode::OK);
        assert_eq!(route(&e, "/nope").status(), StatusCode::NOT_FOUND);
        let only_metrics = Endpoints {
            health: None,
            metrics: Some(Arc::new(Metrics::default())),
        };
        assert_eq!(
            route(&only_metrics, "/healthz").status(),
            StatusCode::NOT_FOUND
        );
    }
}
