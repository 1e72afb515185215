//! Running both controllers (migrations and waves) with their metrics and health endpoints,
//! alone ([`run_until`]: the cockpit's in-process mode, a single replica) or under leader
//! election ([`run_elected`]: the Deployment's replicas).
//!
//! Its parts: [`options`] (what the flags chose), [`serve`] (metrics and health), [`watches`]
//! (the migrations' watch and the children's), [`controllers`] (both controllers on them).

mod controllers;
mod options;
mod serve;
mod watches;

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;
use kube::Client;
use tracing::{info, warn};

use crate::Result;
use crate::leader::{ElectionConfig, Elector, Fence};

use controllers::controllers;
use options::proof_key;
pub use options::{CONTROLLER_NAMESPACE, ProofKeySecret, RunOptions};
use serve::serve;

/// Runs the controllers until `shutdown` resolves (or a watch cannot start), serving metrics
/// and health as asked. No leader election: this process is the only writer (the cockpit's
/// in-process mode, a single replica).
///
/// # Guarantees
/// * Migrations are reconciled on changes to themselves and to the Jobs, DataVolumes and
///   VirtualMachines they own, and to VirtualMachineInstances carrying their label.
/// * `/readyz` answers 200 once the controllers' caches have synced.
/// * On `shutdown` no new reconcile starts; running ones get `opts.shutdown_grace` to finish.
///
/// # Errors
/// [`crate::Error::Io`] when an endpoint address cannot be bound.
pub async fn run_until(
    client: Client,
    opts: RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let served = serve(&opts).await?;
    served.metrics.leader.set(1);
    let key = proof_key(&client, &opts).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (controllers, ctx) = controllers(client, &opts, &served, key, stop_rx);
    tokio::pin!(controllers);
    tokio::select! {
        () = &mut controllers => {}
        () = shutdown => {
            let _ = stop_tx.send(true);
            finish_within(controllers, opts.shutdown_grace).await;
        }
    }
    ctx.source.close(LOGOUT_WITHIN).await;
    info!("controllers stopped");
    Ok(())
}

/// How long each vSphere session's logout may take when the controller stops.
const LOGOUT_WITHIN: Duration = Duration::from_secs(3);

/// Runs the controllers only while this candidate holds the Lease of `election`.
///
/// # Guarantees
/// * As a standby nothing is watched or written but the Lease; `/readyz` answers 200
///   ("standby") and `ferry_controller_leader` is 0.
/// * Every write of the controllers goes through a client behind the [`Fence`]: none leaves
///   once the renew deadline passed without a renewal, whatever the controllers are doing.
/// * On `shutdown`: no new reconcile starts, running ones get `opts.shutdown_grace`, then the
///   fence closes and the Lease is released (a standby takes it at once); returns `Ok`.
///
/// # Errors
/// [`crate::Error::LeadershipLost`] when leadership is lost (the process should exit and be
/// restarted as a standby); [`crate::Error::Io`] for endpoints; client construction errors.
pub async fn run_elected(
    config: kube::Config,
    opts: RunOptions,
    election: ElectionConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let served = serve(&opts).await?;
    served.readiness.set_standby();
    served.metrics.leader.set(0);
    let fence = Fence::elected(served.metrics.fenced_writes.clone());
    let lease_client = Client::try_from(config.clone())?;
    let client = crate::client::build(config, &fence, &served.metrics.requests)?;
    let mut elector = Elector::new(lease_client, election, fence.clone());
    let shutdown = shutdown.shared();
    info!(identity = %elector.identity(), "standing by for the lease");
    tokio::select! {
        () = elector.acquire() => {}
        () = shutdown.clone() => {
            info!("stopped as a standby");
            return Ok(());
        }
    }
    served.metrics.leader.set(1);
    served.readiness.set_syncing();
    // Read (or made) as the leader: making it is a write, and the fence admits only ours.
    let key = tokio::select! {
        lost = elector.hold() => {
            served.metrics.leader.set(0);
            return Err(crate::Error::LeadershipLost(lost));
        }
        key = proof_key(&client, &opts) => key?,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (controllers, ctx) = controllers(client, &opts, &served, key, stop_rx);
    tokio::pin!(controllers);
    let lost = tokio::select! {
        lost = elector.hold() => Some(lost),
        () = &mut controllers => None,
        () = shutdown => {
            let _ = stop_tx.send(true);
            // Keep renewing while the running reconciles finish.
            tokio::select! {
                lost = elector.hold() => Some(lost),
                () = finish_within(&mut controllers, opts.shutdown_grace) => None,
            }
        }
    };
    served.metrics.leader.set(0);
    if let Some(lost) = lost {
        // Dropping the controllers ends every reconcile; the fence already refuses writes.
        warn!(reason = %lost, "leadership lost; stopping");
        return Err(crate::Error::LeadershipLost(lost));
    }
    ctx.source.close(LOGOUT_WITHIN).await;
    elector.release().await;
    info!("controllers stopped");
    Ok(())
}

/// Waits for `controllers` to end, at most `grace`.
async fn finish_within(controllers: impl Future<Output = ()>, grace: Duration) {
    if tokio::time::timeout(grace, controllers).await.is_err() {
        warn!(
            ?grace,
            "reconciles still running after the shutdown grace; stopping them"
        );
    }
}

/// Runs the controllers until SIGTERM or Ctrl-C (what the cockpit's `ferry controller` and the
/// binary call).
///
/// # Errors
/// As [`run_until`].
pub async fn run(client: Client, opts: RunOptions) -> Result<()> {
    run_until(client, opts, shutdown_signal()).await
}

/// Resolves on the first SIGTERM or SIGINT; a second one ends the process at once (exit 130),
/// whatever the stop is still waiting for: once the handlers are installed, the signals no
/// longer end the process by themselves.
pub async fn shutdown_signal() {
    first_signal().await;
    info!("stopping (a second SIGTERM or SIGINT exits at once)");
    tokio::spawn(async {
        first_signal().await;
        warn!("second signal: exiting at once");
        std::process::exit(130);
    });
}

/// Resolves on the next SIGTERM or SIGINT.
async fn first_signal() {
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
