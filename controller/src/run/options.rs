//! How to run the controllers, as the flags say ([`crate::args::ControllerArgs`]).

use std::net::SocketAddr;
use std::time::Duration;

use kube::Client;

use crate::Result;
use crate::children::proof::{self, ProofKey};
use crate::policy::Policy;

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
    /// How long running reconciles may take to finish after a shutdown was asked for.
    pub shutdown_grace: Duration,
    /// The Secret holding the key of ferry's creation stamps.
    pub proof_key: ProofKeySecret,
    /// Child watches begin with a streaming list (`sendInitialEvents`, the WatchList feature,
    /// on by default since Kubernetes 1.32) rather than paged lists: objects arrive one at a
    /// time and are cut down (`caches::slim`) before the next, where a page of large labelled
    /// objects was held whole (restarted among 300 foreign 600 KiB Jobs: a peak of 85 rather
    /// than 210 MiB). Off for an API server without WatchList.
    pub streaming_lists: bool,
    /// Whether ferry's admission policies must be in force for it to make, start and retry
    /// migrations ([`crate::admission_guard`]); off only in labs without them.
    pub admission_policies: bool,
}

/// Where the creation-stamp key lives (see [`crate::children::proof`]): a Secret in the
/// controller's own namespace (its Lease's), readable by the controller only — never in the
/// namespace of a migration, nor in whatever namespace a kubeconfig points at: anyone who may
/// create a Secret there could choose the key and forge ferry's stamps. The in-cluster
/// controller and the cockpit's `ferry controller` read the same one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProofKeySecret {
    /// Its namespace: the controller's own.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

pub use crate::children::proof::CONTROLLER_NAMESPACE;

impl ProofKeySecret {
    /// The Secret `--proof-key-secret` names: `NAMESPACE/NAME`, or `NAME` in `own`, the
    /// controller's namespace (its Lease's: `--leader-elect-namespace`, `$POD_NAMESPACE`), else
    /// [`CONTROLLER_NAMESPACE`].
    pub fn named(flag: &str, own: Option<&str>) -> Self {
        match flag.split_once('/') {
            Some((ns, name)) => Self {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            },
            None => Self {
                namespace: own
                    .filter(|n| !n.is_empty())
                    .unwrap_or(CONTROLLER_NAMESPACE)
                    .to_owned(),
                name: flag.to_owned(),
            },
        }
    }
}

impl Default for ProofKeySecret {
    fn default() -> Self {
        Self::named(proof::DEFAULT_SECRET_NAME, None)
    }
}

/// Reads (or makes) the creation-stamp key named by `opts` through `client`.
pub(super) async fn proof_key(client: &Client, opts: &RunOptions) -> Result<ProofKey> {
    proof::load_or_create(client, &opts.proof_key.namespace, &opts.proof_key.name).await
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
            shutdown_grace: Duration::from_secs(20),
            proof_key: ProofKeySecret::default(),
            streaming_lists: true,
            admission_policies: true,
        }
    }
}
