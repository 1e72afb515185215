//! PersistentVolumeClaims: a cache the other parts read (does a claim exist?), and the
//! `kubernetes.io/pvc-protection` finalizer released on deletion, as the pvc-protection
//! controller (absent from the lab) would once no pod uses the claim.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use crate::context::Sim;

/// The finalizer the StorageObjectInUseProtection admission plugin adds to every claim.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// The claim cache.
#[derive(Debug)]
pub struct Pvcs {
    store: Store<PersistentVolumeClaim>,
    task: AbortHandle,
}

impl Pvcs {
    /// Starts watching claims in the sim's scope.
    pub fn start(sim: Arc<Sim>) -> Arc<Pvcs> {
        let (store, writer) = reflector::store();
        let api = sim.scoped::<PersistentVolumeClaim>();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .applied_objects();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                match item {
                    Ok(pvc) => release_protection(&sim, &pvc).await,
                    Err(e) => warn!(error = %e, "claim watch"),
                }
            }
        })
        .abort_handle();
        Arc::new(Pvcs { store, task })
    }

    /// Waits until the first list arrived.
    pub async fn ready(&self) {
        until_ready(&self.store).await;
    }

    /// Whether claim `name` exists in `namespace` and is not being deleted.
    pub fn exists(&self, namespace: &str, name: &str) -> bool {
        self.store
            .get(&ObjectRef::new(name).within(namespace))
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
    }

    /// Every live claim as `namespace/name`.
    pub fn keys(&self) -> Vec<String> {
        self.store
            .state()
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or(""),
                    p.metadata.name.as_deref().unwrap_or("")
                )
            })
            .collect()
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Waits until `store` has its first list. `Store::wait_until_ready` sits on a oneshot
/// receiver that keeps only the last waker, so with a second waiter (a Controller waits on its
/// own store) the first can sleep forever; polling again now and then sidesteps that.
pub async fn until_ready<K>(store: &Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        let wait = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            store.wait_until_ready(),
        );
        if wait.await.is_ok() {
            return;
        }
    }
}

/// The finalizers a deleting claim keeps once the sim released its protection. Pure.
pub fn without_protection(pvc: &PersistentVolumeClaim) -> Option<Vec<String>> {
    pvc.metadata.deletion_timestamp.as_ref()?;
    let finalizers = pvc.metadata.finalizers.as_ref()?;
    if !finalizers.iter().any(|f| f == PVC_PROTECTION) {
        return None;
    }
    Some(
        finalizers
            .iter()
            .filter(|f| *f != PVC_PROTECTION)
            .cloned()
            .collect(),
    )
}

async fn release_protection(sim: &Sim, pvc: &PersistentVolumeClaim) {
    let Some(keep) = without_protection(pvc) else {
        return;
    };
    let (Some(ns), Some(name)) = (
        pvc.metadata.namespace.as_deref(),
        pvc.metadata.name.as_deref(),
    ) else {
        return;
    };
    let patch = serde_json::json!({"metadata": {"finalizers": keep, "resourceVersion": pvc.metadata.resource_version}});
    match sim
        .api::<PersistentVolumeClaim>(ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => debug!(%ns, %name, "released pvc-protection"),
        Err(e) => {
            debug!(%ns, %name, error = %e, "releasing pvc-protection (will retry on the next event)")
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    use super::*;

    fn pvc(deleting: bool, finalizers: &[&str]) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                finalizers: Some(finalizers.iter().map(|s| s.to_string()).collect()),
                ..ObjectMeta::default()
            },
            ..PersistentVolumeClaim::default()
        }
    }

    #[test]
    fn releases_protection_only_from_deleting_claims() {
        assert_eq!(without_protection(&pvc(false, &[PVC_PROTECTION])), None);
        assert_eq!(without_protection(&pvc(true, &["other"])), None);
        assert_eq!(
            without_protection(&pvc(true, &[PVC_PROTECTION, "other"])),
            Some(vec!["other".to_string()])
        );
    }
}
