//! The metrics and health endpoints, on one listener or two.

use std::net::SocketAddr;
use std::sync::Arc;

use super::options::RunOptions;
use crate::Result;
use crate::health::{self, Endpoints, Readiness};
use crate::metrics::Metrics;

/// The endpoints' state: metrics, readiness, and the listeners serving them.
pub(super) struct Served {
    pub(super) metrics: Arc<Metrics>,
    pub(super) readiness: Arc<Readiness>,
    servers: Vec<(SocketAddr, tokio::task::JoinHandle<()>)>,
}

impl Drop for Served {
    fn drop(&mut self) {
        for (_, task) in &self.servers {
            task.abort();
        }
    }
}

pub(super) async fn serve(opts: &RunOptions) -> Result<Served> {
    let metrics = Arc::new(Metrics::default());
    let readiness = Arc::new(Readiness::default());
    let mut servers = vec![];
    match (opts.metrics_addr, opts.health_addr) {
        (Some(m), Some(h)) if m == h => {
            servers.push(
                health::bind(
                    m,
                    Endpoints {
                        health: Some(readiness.clone()),
                        metrics: Some(metrics.clone()),
                    },
                )
                .await?,
            );
        }
        (m, h) => {
            if let Some(m) = m {
                servers.push(
                    health::bind(
                        m,
                        Endpoints {
                            health: None,
                            metrics: Some(metrics.clone()),
                        },
                    )
                    .await?,
                );
            }
            if let Some(h) = h {
                servers.push(
                    health::bind(
                        h,
                        Endpoints {
                            health: Some(readiness.clone()),
                            metrics: None,
                        },
                    )
                    .await?,
                );
            }
        }
    }
    Ok(Served {
        metrics,
        readiness,
        servers,
    })
}
