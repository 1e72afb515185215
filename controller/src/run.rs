//! Running both controllers (migrations and waves) with their metrics and health endpoints;
//! what the binary and the cockpit's in-process mode call.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use ferry_crds::{MigrationWave, VirtualMachineMigration};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};
use tracing::{debug, info};

use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{self, VirtualMachine, VirtualMachineInstance};
use crate::context::Context;
use crate::health::{self, Endpoints, Readiness};
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::{Result, reconcile, wave};

/// How to run the controllers.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Reconciles running at once per controller (0 = unbounded).
    pub concurrency: u16,
    /// Where `/metrics` is served; not served when `None`.
    pub metrics_addr: Option<SocketAddr>,
    /// Where `/healthz` and `/readyz` are served; not served when `None`.
    pub health_addr: Option<SocketAddr>,
    /// Decision knobs.
    pub policy: Policy,
    /// Run the MigrationWave controller too.
    pub waves: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 16,
            metrics_addr: None,
            health_addr: None,
            policy: Policy::default(),
            waves: true,
        }
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controllers until `shutdown` resolves (or a watch cannot start), serving metrics
/// and health as asked.
///
/// # Guarantees
/// * Migrations are reconciled on changes to themselves and to the Jobs, DataVolumes and
///   VirtualMachines they own, and to VirtualMachineInstances carrying their label.
/// * `/readyz` answers 200 once the controllers run.
///
/// # Errors
/// [`crate::Error::Io`] when an endpoint address cannot be bound.
pub async fn run_until(
    client: Client,
    opts: RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
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
    let ctx = Arc::new(Context::new(
        client.clone(),
        opts.policy.clone(),
        metrics.clone(),
    ));
    let ns = opts.namespace.as_deref();
    let config = ControllerConfig::default().concurrency(opts.concurrency);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let migrations = Controller::new(
        api::<VirtualMachineMigration>(&client, ns),
        watcher::Config::default(),
    )
    .with_config(config.clone())
    .owns(api::<Job>(&client, ns), watcher::Config::default())
    .owns(api::<DataVolume>(&client, ns), watcher::Config::default())
    .owns(
        api::<VirtualMachine>(&client, ns),
        watcher::Config::default(),
    )
    .watches(
        api::<VirtualMachineInstance>(&client, ns),
        watcher::Config::default().labels(ferry_crds::names::MIGRATION_LABEL),
        |vmi| {
            kubevirt::migration_of(&vmi)
                .map(|(ns, name)| ObjectRef::<VirtualMachineMigration>::new(&name).within(&ns))
        },
    )
    .graceful_shutdown_on(stopped())
    .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
    .for_each(|r| async move {
        if let Err(e) = r {
            debug!(error = %e, "migration controller");
        }
    });
    let waves = Controller::new(
        api::<MigrationWave>(&client, ns),
        watcher::Config::default(),
    )
    .with_config(config)
    .owns(
        api::<VirtualMachineMigration>(&client, ns),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(stopped())
    .run(wave::reconcile, wave::error_policy, ctx.clone())
    .for_each(|r| async move {
        if let Err(e) = r {
            debug!(error = %e, "wave controller");
        }
    });
    info!(
        namespace = ns.unwrap_or("all"),
        concurrency = opts.concurrency,
        waves = opts.waves,
        "controllers running"
    );
    readiness.set_ready();
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    if opts.waves {
        futures::join!(migrations, waves);
    } else {
        migrations.await;
    }
    for (_, task) in servers {
        task.abort();
    }
    info!("controllers stopped");
    Ok(())
}

/// Runs the controllers until SIGTERM or Ctrl-C (what the cockpit's `ferry controller` and the
/// binary call).
///
/// # Errors
/// As [`run_until`].
pub async fn run(client: Client, opts: RunOptions) -> Result<()> {
    run_until(client, opts, shutdown_signal()).await
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = term.recv() => {},
                _ = tokio::signal::ctrl_c() => {},
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
