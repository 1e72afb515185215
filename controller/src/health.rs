//! The small HTTP endpoints: `/healthz` and `/readyz` on the health address, `/metrics` on the
//! metrics address (they may be the same).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Readiness, set once the controllers' caches have synced.
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    /// Marks the controller ready.
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether it is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
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
        ("/readyz", Some(r), _) if r.is_ready() => {
            respond(StatusCode::OK, "text/plain", "ready\n".into())
        }
        ("/readyz", Some(_), _) => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "caches not synced\n".into(),
        ),
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
