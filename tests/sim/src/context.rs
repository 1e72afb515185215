//! What every part of the running sim shares: the settings the command line decides, the
//! clients, and the long-running tasks (Job processes, imports). The parts (`datavolumes`,
//! `pvcs`, `storage`, `jobs`, `kubelet`, `node`, `vms`, `handler`) read it; `sim` composes them
//! above it, so no part imports the composition.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::{Api, Client, Resource};
use rustls::pki_types::CertificateDer;
use tokio::task::JoinHandle;

use crate::clock::Speed;
use crate::faults::Rates;
use crate::qemu;
use crate::volumes::Volumes;

/// Who plays KubeVirt's control plane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KubeVirt {
    /// The sim plays it whole: VMIs from VMs, VM status, and the node (`vms.rs`).
    #[default]
    Sim,
    /// KubeVirt's own virt-api and virt-controller run (`ferry-lab --kubevirt`): the sim plays
    /// only the node, virt-handler and the launcher pod (`handler.rs`), and keeps the Node's
    /// virt-handler heartbeat fresh.
    Real,
}

/// Everything the command line decides.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Only this namespace (else all).
    pub namespace: Option<String>,
    pub volumes: Volumes,
    /// Where Job commands are looked up first.
    pub bin_dir: PathBuf,
    pub speed: Speed,
    pub rates: Rates,
    /// Import throughput at speed 1, bytes per second.
    pub throughput: f64,
    /// Label selector for the Jobs to run (all Jobs in scope when `None`).
    pub job_selector: Option<String>,
    /// The node every pod and VMI "runs" on.
    pub node_name: String,
    /// The node's kubelet endpoint (`pods/log`).
    pub kubelet: KubeletConfig,
    /// Who plays KubeVirt's control plane.
    pub kubevirt: KubeVirt,
    /// What runs a guest (with `KubeVirt::Real`): nothing, or qemu.
    pub guests: qemu::GuestMode,
}

/// Shared state of the running sim.
pub struct Sim {
    pub client: Client,
    /// Who writes what virt-handler writes (VMI status): `client` unless
    /// `--virt-handler-kubeconfig` names virt-handler's ServiceAccount (virt-api's VMI mutator
    /// keeps a status change only from KubeVirt's own ServiceAccounts).
    pub handler: Client,
    pub settings: Settings,
    pub tasks: Arc<Tasks>,
    /// The real guests this node runs (`--guests qemu`).
    pub guests: qemu::Instances,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Sim {
    pub fn new(client: Client, settings: Settings) -> Arc<Sim> {
        Sim::with_handler(client.clone(), client, settings)
    }

    /// Like [`Sim::new`], writing virt-handler's part as `handler`.
    pub fn with_handler(client: Client, handler: Client, settings: Settings) -> Arc<Sim> {
        Arc::new(Sim {
            client,
            handler,
            settings,
            tasks: Arc::new(Tasks::default()),
            guests: qemu::Instances::default(),
        })
    }

    /// An API for `K` over the sim's scope (one namespace or all).
    pub fn scoped<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        match &self.settings.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// An API for `K` in namespace `ns`.
    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), ns)
    }
}

/// What the command line says about the kubelet's endpoint (`kubelet::Config`).
#[derive(Clone, Debug, Default)]
pub struct KubeletConfig {
    /// The port (`--kubelet-port`); 0 takes any free one.
    pub port: u16,
    /// The CAs whose client certificates authenticate (`--client-ca-file`, else the cluster CA of
    /// the kubeconfig). Empty: nobody authenticates.
    pub client_ca: Vec<CertificateDer<'static>>,
    /// A serving certificate chain and key in PEM (`--tls-cert-file`, `--tls-private-key-file`);
    /// `None`: self-signed, made at start.
    pub serving: Option<(PathBuf, PathBuf)>,
    /// How often the Node is looked at (`--node-status-update-frequency`).
    pub status_every: Duration,
}

/// Long-running work keyed by object UID: at most one task per key at a time.
#[derive(Debug, Default)]
pub struct Tasks {
    inner: Mutex<HashMap<String, (u64, JoinHandle<()>)>>,
    next: AtomicU64,
}

impl Tasks {
    /// Starts `fut` under `key` unless a task with that key is still running; returns whether
    /// it started.
    pub fn spawn_unique<F>(self: &Arc<Self>, key: String, fut: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(mut map) = self.inner.lock() else {
            return false;
        };
        if map.get(&key).is_some_and(|(_, h)| !h.is_finished()) {
            return false;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let me = self.clone();
        let k = key.clone();
        let handle = tokio::spawn(async move {
            fut.await;
            me.finish(&k, id);
        });
        map.insert(key, (id, handle));
        true
    }

    fn finish(&self, key: &str, id: u64) {
        if let Ok(mut map) = self.inner.lock()
            && map.get(key).is_some_and(|(i, _)| *i == id)
        {
            map.remove(key);
        }
    }

    /// Whether a task runs under `key`.
    pub fn running(&self, key: &str) -> bool {
        self.inner
            .lock()
            .map(|m| m.get(key).is_some_and(|(_, h)| !h.is_finished()))
            .unwrap_or(false)
    }

    /// Aborts every task and waits for them to unwind (dropping a Job's process kills it).
    pub async fn shutdown(&self) {
        let handles: Vec<JoinHandle<()>> = match self.inner.lock() {
            Ok(mut m) => m.drain().map(|(_, (_, h))| h).collect(),
            Err(_) => return,
        };
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
        }
    }
}
