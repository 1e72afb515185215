//! The watch caches of a migration's children, and the one read every checkpoint observes them
//! with.
//!
//! The migration controller watches the Jobs, DataVolumes and VirtualMachines that carry a
//! migration's uid label, and the VirtualMachineInstances that carry its name label (the watches
//! that wake it up). Their reflectors keep the objects, so observing a child is a lookup rather
//! than a GET: at wave scale these reads were most of the apiserver's work (about 120 GETs per
//! migration). A lookup may lag the apiserver by one watch event, which is harmless in one
//! direction only:
//! * an object the cache shows is used as shown: a change not seen yet arrives as a watch event
//!   and reconciles the migration again, and every action is idempotent;
//! * an object the cache does not show is read fresh, because "absent" is what decisions act on
//!   (create a child, call a cleanup done) and a child created a moment ago may not be in the
//!   cache yet. So is every name held by someone else's object outside the label selector.
//!
//! Cleanup never reads through here: it must see what is there now.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::Result;
use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::metrics::{CacheRead, Metrics};

/// The reflector stores of the migration controller's child watches.
#[derive(Clone)]
pub struct Caches {
    /// Jobs with a migration uid label (conversion and verification).
    pub jobs: Store<Job>,
    /// DataVolumes with a migration uid label.
    pub datavolumes: Store<DataVolume>,
    /// VirtualMachines with a migration uid label (released ones included).
    pub vms: Store<VirtualMachine>,
    /// VirtualMachineInstances with a migration name label.
    pub vmis: Store<VirtualMachineInstance>,
}

impl Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("jobs", &self.jobs.len())
            .field("datavolumes", &self.datavolumes.len())
            .field("vms", &self.vms.len())
            .field("vmis", &self.vmis.len())
            .finish()
    }
}

impl Caches {
    /// Whether every store has had its first list.
    pub fn ready(&self) -> bool {
        is_ready(&self.jobs)
            && is_ready(&self.datavolumes)
            && is_ready(&self.vms)
            && is_ready(&self.vmis)
    }
}

/// Whether `store` has had its first list. It looks rather than waits: a store wakes one waiter
/// only, and the controllers' own runners wait on the same stores.
pub fn is_ready<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// A kind a checkpoint observes by name in the migration's namespace; `cached` is its watch
/// cache, if the controller keeps one.
pub trait Observed:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The store holding this kind, if any.
    fn cached(caches: &Caches) -> Option<&Store<Self>>;
}

macro_rules! cached {
    ($($kind:ty => $field:ident),* ; uncached $($other:ty),*) => {
        $(impl Observed for $kind {
            fn cached(caches: &Caches) -> Option<&Store<Self>> {
                Some(&caches.$field)
            }
        })*
        $(impl Observed for $other {
            fn cached(_: &Caches) -> Option<&Store<Self>> {
                None
            }
        })*
    };
}

// Secrets are read fresh: watching them would need list/watch on every Secret of the cluster.
cached!(
    Job => jobs,
    DataVolume => datavolumes,
    VirtualMachine => vms,
    VirtualMachineInstance => vmis;
    uncached Secret, ConfigMap, PersistentVolumeClaim
);

/// The object `name` of kind `K` in `namespace`: from the cache when it shows one, else fresh
/// from the API (see the module's note on why absence is always read fresh).
///
/// # Errors
/// Kubernetes API errors of the fresh read.
pub async fn read<K: Observed>(
    client: &kube::Client,
    caches: Option<&Caches>,
    metrics: &Metrics,
    namespace: &str,
    name: &str,
) -> Result<Option<K>> {
    let read = match caches.and_then(K::cached) {
        Some(store) => match store.get(&ObjectRef::new(name).within(namespace)) {
            Some(found) => {
                metrics.cache_read(&K::kind(&()), CacheRead::Hit);
                return Ok(Some(K::clone(&found)));
            }
            None => CacheRead::Miss,
        },
        None => CacheRead::Uncached,
    };
    metrics.cache_read(&K::kind(&()), read);
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    fn job(ns: &str, name: &str) -> Job {
        let mut j = Job::default();
        j.metadata.name = Some(name.to_owned());
        j.metadata.namespace = Some(ns.to_owned());
        j
    }

    fn caches_with_job(j: Job) -> Caches {
        let (jobs, mut w) = store::<Job>();
        w.apply_watcher_event(&Event::Apply(j));
        Caches {
            jobs,
            datavolumes: store::<DataVolume>().0,
            vms: store::<VirtualMachine>().0,
            vmis: store::<VirtualMachineInstance>().0,
        }
    }

    #[tokio::test]
    async fn a_cached_object_is_read_without_the_api() {
        // A client that cannot connect: a read that reached the API would fail.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let caches = caches_with_job(job("ns", "convert-a"));
        let metrics = Metrics::default();
        let found: Option<Job> = read(&client, Some(&caches), &metrics, "ns", "convert-a")
            .await
            .unwrap();
        assert_eq!(found.unwrap().metadata.name.as_deref(), Some("convert-a"));
        // The same name in another namespace is not in the cache: it is read from the API.
        let other: Result<Option<Job>> =
            read(&client, Some(&caches), &metrics, "other", "convert-a").await;
        assert!(other.is_err(), "absent from the cache goes to the API");
        // A kind without a cache always goes to the API.
        let secret: Result<Option<Secret>> =
            read(&client, Some(&caches), &metrics, "ns", "convert-a").await;
        assert!(secret.is_err(), "Secrets are read fresh");
        let text = metrics.encode();
        assert!(
            text.contains(r#"ferry_controller_cache_reads_total{kind="Job",result="hit"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ferry_controller_cache_reads_total{kind="Job",result="miss"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"ferry_controller_cache_reads_total{kind="Secret",result="uncached"} 1"#
            ),
            "{text}"
        );
    }
}
