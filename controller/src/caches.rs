//! The watch caches of a migration's children, and the one read every checkpoint observes them
//! with.
//!
//! The migration controller watches the Jobs, DataVolumes and VirtualMachines that carry a
//! migration's uid label and not the released label, and the VirtualMachineInstances that carry
//! its name label (the watches that wake it up). Their reflectors keep the objects, so observing a child is a lookup rather
//! than a GET: at wave scale these reads were most of the apiserver's work (about 120 GETs per
//! migration). A lookup may lag the apiserver by one watch event, which is harmless in one
//! direction only:
//! * an object the cache shows is used as shown: a change not seen yet arrives as a watch event
//!   and reconciles the migration again, and every action is idempotent;
//! * an object the cache does not show is absent, unless the migration recorded its create
//!   (`status.children`): then it is read fresh, since a child created a moment ago may not be
//!   in the cache yet. Absence is safe to act on because acting on it is a create, and a create
//!   whose name is taken answers "already exists": ferry then reads the object fresh and proves
//!   it ours by its stamp, or reports the conflict ([`crate::reconcile::io::Io::create`]).
//!   Names held by someone else's object outside the label selector are found the same way, or
//!   by a fresh read where they must be found before anything is touched (Preparing's check).
//!
//! Cleanup never reads through here: it must see what is there now.
//!
//! What a store keeps is only what decisions read ([`slim`]): anyone who may create a Job can
//! give it ferry's label, so a store must not grow with what others label. A child of a
//! migration the controller knows loses its managed fields and every annotation but the ones
//! decisions read; an object whose migration the controller does not know (a tenant's, a
//! released or leftover child, or one that arrived before its migration) is kept as a stub of
//! its name, uid, ferry's labels and owner references — enough to wake its migration — and a
//! read that finds a stub reads fresh, as for an absent object. A child its migration released
//! (no owner reference, the released label: the migrated VM and its volumes, kept by the user
//! long after) leaves the watches — the apiserver filters by the selector, and tells a watch of
//! an object that stops matching as of a deletion, so no store ever holds one: the release is
//! Validating's last act, written with Succeeded, so no decision reads it again (one released
//! while its migration still runs — a status write lost to a crash, or someone else's label —
//! is recorded, so read fresh). A child of a succeeded, settled migration that is still watched
//! (the VM's instance: KubeVirt makes it with the VM's template labels and does not update them)
//! is not held at all — its event is turned into a deletion before the store — and the settled
//! migration itself is cached cut down (`reconcile::settled`): the controller's memory follows
//! what is in flight, not the migrated fleet (`ferry_controller_cached_children` counts each
//! form). Nothing reads such a child from a store: a settled migration decides nothing, and the
//! deletion of its record reads what it needs fresh. A VMI cached whole while its migration ran
//! leaves the store at its next event or restart.

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
use crate::children::{proof, verify_job};
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
    /// How many children each store holds in each form: `(kind, form, count)` with form
    /// `whole`, `metadata` or `stub` (see [`slim`]).
    pub fn forms(&self) -> Vec<(&'static str, &'static str, usize)> {
        fn count<K: Resource + Clone>(
            kind: &'static str,
            store: &Store<K>,
            whole: impl Fn(&K) -> bool,
        ) -> [(&'static str, &'static str, usize); 3]
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            let (mut w, mut m, mut s) = (0, 0, 0);
            for o in store.state() {
                if is_stub(o.meta()) {
                    s += 1;
                } else if whole(&o) {
                    w += 1;
                } else {
                    m += 1;
                }
            }
            [(kind, "whole", w), (kind, "metadata", m), (kind, "stub", s)]
        }
        let mut out = vec![];
        out.extend(count("Job", &self.jobs, |j| j.spec.is_some()));
        out.extend(count("DataVolume", &self.datavolumes, |d| {
            d.spec != Default::default() || d.status.is_some()
        }));
        out.extend(count("VirtualMachine", &self.vms, |v| {
            v.spec.template.is_some() || v.status.is_some()
        }));
        out.extend(count("VirtualMachineInstance", &self.vmis, |v| {
            v.status.is_some()
        }));
        out
    }

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

/// The annotations a decision reads from a cached child: the creation stamp (`Io::own`), the
/// verification Job's role and the DataVolumes it was made for (Importing). Every other
/// annotation is dropped before the store.
const READ_ANNOTATIONS: [&str; 3] = [
    proof::STAMP_ANNOTATION,
    verify_job::ROLE_ANNOTATION,
    verify_job::VOLUMES_ANNOTATION,
];

/// The labels a stub keeps: those that map an object to its migration.
const STUB_LABELS: [&str; 2] = [
    ferry_crds::names::MIGRATION_LABEL,
    ferry_crds::names::MIGRATION_UID_LABEL,
];

/// Marks a store entry [`slim`] cut down to a stub. Only ever set in memory: a real child loses
/// every annotation but [`READ_ANNOTATIONS`], so an object cannot pass itself off as a stub.
const STUB_ANNOTATION: &str = "ferry.internal/stub";

fn is_stub(meta: &kube::api::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(STUB_ANNOTATION))
}

/// Which migration `meta` says it belongs to: its namespace, the name label and the uid label
/// (VMIs carry the name label only).
pub fn claimed_migration(meta: &kube::api::ObjectMeta) -> Option<(&str, &str, Option<&str>)> {
    let labels = meta.labels.as_ref()?;
    Some((
        meta.namespace.as_deref()?,
        labels.get(ferry_crds::names::MIGRATION_LABEL)?.as_str(),
        labels
            .get(ferry_crds::names::MIGRATION_UID_LABEL)
            .map(String::as_str),
    ))
}

/// What the controller holds of the migration a child claims (see [`slim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// No migration of that namespace, name (and uid, when labelled).
    Unknown,
    /// A migration with work left, or one that may yet have some (failed, cancelled).
    Known,
    /// A migration that succeeded and is settled: nothing of its children is read again.
    Succeeded,
}

/// What a store holds of an object [`slim`] looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// What decisions read of it: a child of a migration in flight (or that may yet be).
    Read,
    /// A stub: its migration is unknown (see the module's note).
    Stub,
    /// Nothing: a child of a succeeded, settled migration, which nobody reads from a store
    /// again. Its event becomes a deletion, so that a copy held from before goes too.
    Nothing,
}

/// Cuts `obj` down to what the controller reads before it enters a store, and says whether a
/// store holds it at all. `holder` says what the controller holds of the migration it claims
/// (namespace, name, uid if labelled) for a child of `obj`'s name; of none (or not under a name
/// ferry gives that migration's children), `obj` becomes a stub (see the module's note).
/// A child of a succeeded, settled migration that is still watched (the VM's instance; released
/// children are not watched) is held in no form, since nothing reads it from a store: so memory
/// follows what is in flight, not the migrated fleet. Pure.
pub fn slim<K: Resource + Default>(
    obj: &mut K,
    holder: impl FnOnce(&str, &str, Option<&str>, &str) -> Holder,
) -> Kept {
    let meta = obj.meta_mut();
    // No decision reads who managed which field; on a migrated VM that is most of its bytes.
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| READ_ANNOTATIONS.contains(&k.as_str()));
    }
    let child = obj.meta().name.clone().unwrap_or_default();
    let holder = claimed_migration(obj.meta()).map_or(Holder::Unknown, |(ns, name, uid)| {
        holder(ns, name, uid, &child)
    });
    let kept = match holder {
        Holder::Known => return Kept::Read,
        Holder::Succeeded => Kept::Nothing,
        Holder::Unknown => Kept::Stub,
    };
    let old = std::mem::take(obj.meta_mut());
    let mut stub = K::default();
    let meta = stub.meta_mut();
    meta.name = old.name;
    meta.namespace = old.namespace;
    meta.uid = old.uid;
    meta.resource_version = old.resource_version;
    meta.deletion_timestamp = old.deletion_timestamp;
    meta.labels = old.labels.map(|mut l| {
        l.retain(|k, _| STUB_LABELS.contains(&k.as_str()));
        l
    });
    meta.owner_references = old.owner_references.map(|mut o| {
        o.retain(|r| r.kind == "VirtualMachineMigration" || r.kind == "VirtualMachine");
        // Enough to wake a migration; a list of thousands would make the stub costly again.
        o.truncate(2);
        o
    });
    meta.annotations = Some([(STUB_ANNOTATION.to_owned(), String::new())].into());
    *obj = stub;
    kept
}

/// The object `name` of kind `K` in `namespace`: from the cache when it shows one; when it
/// does not, absent — or fresh from the API when `recorded` (the migration recorded creating
/// it, see the module's note; a child it released is not watched, so it is read fresh).
///
/// # Errors
/// Kubernetes API errors of the fresh read.
pub async fn read<K: Observed>(
    client: &kube::Client,
    caches: Option<&Caches>,
    metrics: &Metrics,
    namespace: &str,
    name: &str,
    recorded: bool,
) -> Result<Option<K>> {
    let read = match caches.and_then(K::cached) {
        Some(store) => match store.get(&ObjectRef::new(name).within(namespace)) {
            Some(found) if !is_stub(found.meta()) => {
                metrics.cache_read(&K::kind(&()), CacheRead::Hit);
                return Ok(Some(K::clone(&found)));
            }
            // A stub says only that the object exists; what a decision reads is read fresh.
            Some(_) => CacheRead::Miss,
            None if recorded => CacheRead::Miss,
            None => {
                metrics.cache_read(&K::kind(&()), CacheRead::Absent);
                return Ok(None);
            }
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
        let found: Option<Job> = read(&client, Some(&caches), &metrics, "ns", "convert-a", false)
            .await
            .unwrap();
        assert_eq!(found.unwrap().metadata.name.as_deref(), Some("convert-a"));
        // The same name in another namespace is not in the cache: absent, unless recorded.
        let other: Option<Job> = read(
            &client,
            Some(&caches),
            &metrics,
            "other",
            "convert-a",
            false,
        )
        .await
        .unwrap();
        assert!(
            other.is_none(),
            "absent from the cache and never made: absent"
        );
        let other: Result<Option<Job>> =
            read(&client, Some(&caches), &metrics, "other", "convert-a", true).await;
        assert!(
            other.is_err(),
            "recorded but not in the cache yet: read from the API"
        );
        // A kind without a cache always goes to the API.
        let secret: Result<Option<Secret>> =
            read(&client, Some(&caches), &metrics, "ns", "convert-a", false).await;
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
        assert!(
            text.contains(r#"ferry_controller_cache_reads_total{kind="Job",result="absent"} 1"#),
            "{text}"
        );
    }

    fn labelled_job(uid: &str) -> Job {
        let mut j = job("ns", "convert-a");
        j.metadata.uid = Some("job-uid".into());
        j.metadata.labels = Some(
            [
                (
                    ferry_crds::names::MIGRATION_LABEL.to_owned(),
                    "m".to_owned(),
                ),
                (
                    ferry_crds::names::MIGRATION_UID_LABEL.to_owned(),
                    uid.to_owned(),
                ),
                ("team".to_owned(), "x".repeat(60)),
            ]
            .into(),
        );
        j.metadata.annotations = Some(
            [
                (proof::STAMP_ANNOTATION.to_owned(), "v1.ab".to_owned()),
                (verify_job::ROLE_ANNOTATION.to_owned(), "verify".to_owned()),
                (
                    verify_job::VOLUMES_ANNOTATION.to_owned(),
                    "dv-uid".to_owned(),
                ),
                ("big".to_owned(), "x".repeat(600 * 1024)),
            ]
            .into(),
        );
        j.metadata.managed_fields = Some(vec![Default::default()]);
        j.spec = Some(Default::default());
        j
    }

    fn known(ns: &str, name: &str, uid: Option<&str>, _child: &str) -> Holder {
        if (ns, name, uid) == ("ns", "m", Some("m-uid")) {
            Holder::Known
        } else {
            Holder::Unknown
        }
    }

    #[test]
    fn a_child_of_a_known_migration_keeps_what_decisions_read() {
        let mut j = labelled_job("m-uid");
        assert_eq!(slim(&mut j, known), Kept::Read);
        let a = j.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            a.len(),
            3,
            "only the stamp, the role and the volumes stay: {:?}",
            a.keys()
        );
        assert!(READ_ANNOTATIONS.iter().all(|k| a.contains_key(*k)));
        assert!(j.metadata.managed_fields.is_none());
        assert!(j.spec.is_some(), "the spec decisions read stays");
        assert!(!is_stub(&j.metadata));
        assert_eq!(j.metadata.labels.as_ref().unwrap().len(), 3);
    }

    #[test]
    fn an_object_of_no_known_migration_is_a_stub_read_fresh() {
        for uid in ["other-uid", "m-uid"] {
            let mut j = labelled_job(uid);
            // The second round: the right uid, but no migration of that name is known.
            let knows = |ns: &str, name: &str, u: Option<&str>, c: &str| {
                if uid == "other-uid" {
                    known(ns, name, u, c)
                } else {
                    Holder::Unknown
                }
            };
            assert_eq!(slim(&mut j, knows), Kept::Stub, "{uid}");
            assert!(is_stub(&j.metadata), "{uid}");
            assert!(j.spec.is_none() && j.status.is_none());
            assert_eq!(j.metadata.name.as_deref(), Some("convert-a"));
            assert_eq!(j.metadata.uid.as_deref(), Some("job-uid"));
            assert_eq!(j.metadata.annotations.as_ref().unwrap().len(), 1);
            assert_eq!(
                j.metadata.labels.as_ref().unwrap().len(),
                2,
                "only ferry's labels"
            );
            let size = serde_json::to_vec(&j).unwrap().len();
            assert!(size < 512, "a stub is small: {size} bytes");
        }
    }

    #[test]
    fn an_instance_owned_by_its_vm_stays_whole() {
        use crate::apis::kubevirt::VirtualMachineInstance;
        let mut vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "web-1", "namespace": "ns",
                "labels": {ferry_crds::names::MIGRATION_LABEL: "m"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "web-1", "uid": "vm-uid", "controller": true}]},
            "spec": {},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let mut settled = vmi.clone();
        slim(&mut vmi, |_, _, _, _| Holder::Known);
        assert!(
            vmi.status.is_some(),
            "Validating reads its phase and readiness"
        );
        // Once its migration succeeded and settled, nothing reads it: not held at all (what
        // goes on to the store, a deletion, is a stub of its name).
        assert_eq!(
            slim(&mut settled, |_, _, _, _| Holder::Succeeded),
            Kept::Nothing
        );
        assert!(is_stub(&settled.metadata) && settled.status.is_none());
    }

    #[test]
    fn a_label_cannot_make_an_object_pass_for_a_stub() {
        let mut j = labelled_job("m-uid");
        j.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(STUB_ANNOTATION.to_owned(), String::new());
        slim(&mut j, known);
        assert!(!is_stub(&j.metadata));
    }

    #[tokio::test]
    async fn a_stub_is_read_fresh_and_a_whole_child_is_not() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let metrics = Metrics::default();
        // Any read that goes to the API fails: nothing listens there.
        let read_job = |j: Job| {
            let (client, metrics) = (&client, &metrics);
            async move {
                let caches = caches_with_job(j);
                let found: Result<Option<Job>> =
                    read(client, Some(&caches), metrics, "ns", "convert-a", false).await;
                found
            }
        };
        let mut stub = labelled_job("m-uid");
        slim(&mut stub, |_, _, _, _| Holder::Unknown);
        assert!(read_job(stub).await.is_err(), "a stub goes to the API");
        let mut whole = labelled_job("m-uid");
        slim(&mut whole, known);
        let found = read_job(whole).await;
        assert!(found.unwrap().unwrap().spec.is_some(), "from the cache");
    }
}
