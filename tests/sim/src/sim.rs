//! The running sim: the parts (CDI's DataVolumes and claims, the Job controller's pods, the
//! kubelet's endpoint and Node, KubeVirt's players) composed over the shared [`Sim`] context
//! (`context.rs`) and run until shutdown.

use std::future::Future;
use std::sync::Arc;

use tracing::info;

use crate::context::{KubeVirt, Sim};
use crate::{Result, datavolumes, handler, jobs, kubelet, node, pvcs, vms};

impl Sim {
    /// Runs every part until `shutdown` resolves, then stops the tasks (killing Job
    /// processes) and returns.
    ///
    /// Errors: the kubelet endpoint cannot be bound (its port is taken, its certificate
    /// unreadable); none of the parts ends on its own.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) -> Result<()> {
        let endpoint = kubelet::bind(&self.settings.kubelet, &self.settings.node_name).await?;
        let port = endpoint.port;
        let kubelet = endpoint.serve(self.clone());
        let real = self.settings.kubevirt == KubeVirt::Real;
        let node = node::run(self.clone(), port, self.settings.kubelet.status_every, real);
        let pvc_store = pvcs::Pvcs::start(self.clone());
        let dvs = datavolumes::run(self.clone(), pvc_store.clone());
        let jobs = jobs::run(self.clone());
        let vms: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = if real {
            Box::pin(handler::run(self.clone()))
        } else {
            Box::pin(vms::run(self.clone(), pvc_store.clone()))
        };
        info!(
            scope = self
                .settings
                .namespace
                .as_deref()
                .unwrap_or("all namespaces"),
            speed = self.settings.speed.factor(),
            kubelet_port = port,
            kubevirt = ?self.settings.kubevirt,
            "ferry-sim running"
        );
        tokio::select! {
            () = shutdown => info!("shutting down"),
            () = dvs => {},
            () = jobs => {},
            () = vms => {},
            () = kubelet => {},
            () = node => {},
        }
        self.tasks.shutdown().await;
        self.guests.kill_all();
        pvc_store.stop();
        Ok(())
    }
}
