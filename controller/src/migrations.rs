//! What the controller holds of the migrations it watches (issue #30: memory that follows what
//! is in flight, not the migrated fleet).
//!
//! A migration in flight, or finished but still owed something (failed or cancelled ones can be
//! retried, so their children stay), is in the watch's kube store: whole, or cut down once
//! settled (`reconcile::settled::slim`). A migration that **succeeded and settled** is never
//! reconciled again, its children are released and held in no form, and all that is still read
//! of it is what a wave reads of a finished child: that it exists (a wave must never create it
//! again), whose it is, which VM it migrated, and what the wave's status counts. It leaves the
//! store for a [`Record`] of exactly that: a migration program leaves thousands behind, and a
//! cut-down copy in the store still cost ~2.9 KB each (an `Arc` of the whole type, 1,720 B
//! inline, most of it an empty spec and status, two B-tree maps, an owner reference), 29 MB of
//! the 40 MB of heap at 10,000 settled migrations (heaptrack, commit cad3249).
//!
//! [`Migrations`] is the one view of both, which waves and the children's caches read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ferry_crds::{
    Phase, PreflightStatus, Progress, SourceSpec, VirtualMachineMigration,
    VirtualMachineMigrationSpec, VirtualMachineMigrationStatus, VmSelector, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::caches::Holder;

/// The annotation that marks a cached copy as a settled migration's slim form. Only the cache
/// holds it; it is never written to the API.
pub const SLIM_MARK: &str = "cache.migration.platform.example/settled";

/// Whether `vmm` is a cached slim form (see `reconcile::settled`). Pure.
pub fn is_slim(vmm: &VirtualMachineMigration) -> bool {
    vmm.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(SLIM_MARK))
}

/// Whether `vmm` is a cached slim form of a migration that succeeded: nothing of its children
/// is read again (the child caches hold none of them). Pure.
pub fn is_slim_success(vmm: &VirtualMachineMigration) -> bool {
    is_slim(vmm) && vmm.phase() == ferry_crds::Phase::Succeeded
}

/// What is kept of a migration that succeeded and settled: what a wave reads of a finished
/// child (`wave::decide`, `wave::status`, `WavePreflight::of`), nothing else.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    uid: Box<str>,
    /// The uids of its owner references: a wave counts a child by its uid there.
    owners: Box<[Box<str>]>,
    /// ferry's wave label: a collision names the other migration's wave.
    wave: Option<Box<str>>,
    /// `spec.source.vm`: a wave matches its VMs by it.
    vm: VmSelector,
    /// With `completed_at`, what a wave's forecast measures a migration by.
    started_at: Option<Time>,
    completed_at: Option<Time>,
    progress: Option<Progress>,
    /// Its preflight's concerns (codes and severities; what a wave's preflight counts).
    preflight: Option<Box<PreflightStatus>>,
}

impl Record {
    /// The record of `vmm`, when it is the cached form of a migration that succeeded and
    /// settled ([`is_slim_success`]). Pure.
    pub fn of(vmm: &VirtualMachineMigration) -> Option<Self> {
        if !is_slim_success(vmm) {
            return None;
        }
        let status = vmm.status.as_ref();
        Some(Self {
            uid: vmm.metadata.uid.as_deref().unwrap_or_default().into(),
            owners: vmm
                .owner_references()
                .iter()
                .map(|o| o.uid.as_str().into())
                .collect(),
            wave: vmm.wave().map(Into::into),
            vm: vmm.spec.source.vm.clone(),
            started_at: status.and_then(|s| s.started_at.clone()),
            completed_at: status.and_then(|s| s.completed_at.clone()),
            progress: status.and_then(|s| s.progress.clone()),
            preflight: status.and_then(|s| s.preflight.clone()).map(|mut p| {
                // Claims are counted only for migrations still to run.
                p.claims.clear();
                Box::new(p)
            }),
        })
    }

    /// The migration `ns`/`name` this records, as a wave reads it: a settled, succeeded
    /// migration in its cut-down form ([`is_slim_success`] holds), with the fields
    /// above. Its owner references carry only their uids. Pure.
    pub fn migration(&self, ns: &str, name: &str) -> VirtualMachineMigration {
        let spec = VirtualMachineMigrationSpec {
            source: SourceSpec {
                vm: self.vm.clone(),
                ..Default::default()
            },
            target: Default::default(),
            staging: Default::default(),
            conversion: Default::default(),
            mode: Default::default(),
            warm: None,
            hooks: None,
            cancel: false,
            paused: false,
            preflight: None,
            retry: 0,
        };
        let mut m = VirtualMachineMigration::new(name, spec);
        m.metadata.namespace = Some(ns.to_owned());
        m.metadata.uid = Some(self.uid.to_string());
        m.metadata.finalizers = Some(vec![names::FINALIZER.to_owned()]);
        m.metadata.owner_references = (!self.owners.is_empty()).then(|| {
            self.owners
                .iter()
                .map(|uid| OwnerReference {
                    uid: uid.to_string(),
                    ..Default::default()
                })
                .collect()
        });
        if let Some(w) = &self.wave {
            m.labels_mut()
                .insert(names::WAVE_LABEL.to_owned(), w.to_string());
        }
        m.annotations_mut()
            .insert(SLIM_MARK.to_owned(), String::new());
        m.status = Some(VirtualMachineMigrationStatus {
            phase: Phase::Succeeded,
            started_at: self.started_at.clone(),
            completed_at: self.completed_at.clone(),
            progress: self.progress.clone(),
            preflight: self.preflight.as_deref().cloned(),
            ..Default::default()
        });
        m
    }

    fn owned_by(&self, uid: &str) -> bool {
        self.owners.iter().any(|o| &**o == uid)
    }
}

/// Records by namespace, then name.
type ByName = HashMap<String, HashMap<Box<str>, Record>>;

/// The records of the migrations that succeeded and settled. Cloning shares them. Whoever moves
/// a migration between the store and the records does it holding [`Succeeded::write`], and
/// [`Migrations`] reads both holding the read lock: a migration is never seen in neither (a
/// wave would create it again).
#[derive(Clone, Debug, Default)]
pub struct Succeeded {
    inner: Arc<RwLock<Records>>,
}

/// The records, kept as the watch's store is: a (re)list fills a new set that replaces the old
/// one when it is done, so that a migration deleted while the watch was away does not stay.
#[derive(Debug, Default)]
pub struct Records {
    live: ByName,
    /// A (re)list under way.
    listing: Option<ByName>,
}

impl Succeeded {
    fn read(&self) -> RwLockReadGuard<'_, Records> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The records, to change (and the store with them, see above).
    pub fn write(&self) -> RwLockWriteGuard<'_, Records> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many records are kept.
    pub fn len(&self) -> usize {
        self.read().live.values().map(HashMap::len).sum()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Records {
    /// Keeps `record` of `ns`/`name` (an event of it).
    pub fn insert(&mut self, ns: &str, name: &str, record: Record) {
        insert(&mut self.live, ns, name, record);
    }

    /// Forgets `ns`/`name` (deleted, or no longer settled: the store holds it again).
    pub fn remove(&mut self, ns: &str, name: &str) {
        if let Some(names) = self.live.get_mut(ns) {
            names.remove(name);
            if names.is_empty() {
                self.live.remove(ns);
            }
        }
    }

    /// A (re)list begins: what it brings replaces what is kept once it is done.
    pub fn begin_list(&mut self) {
        self.listing = Some(ByName::new());
    }

    /// Keeps `record` of `ns`/`name` as listed.
    pub fn listed(&mut self, ns: &str, name: &str, record: Record) {
        if let Some(listing) = self.listing.as_mut() {
            insert(listing, ns, name, record);
        }
    }

    /// The (re)list is done: its records are what is kept.
    pub fn end_list(&mut self) {
        if let Some(listing) = self.listing.take() {
            self.live = listing;
        }
    }

    fn get(&self, ns: &str, name: &str) -> Option<&Record> {
        self.live.get(ns)?.get(name)
    }

    /// The seconds each recorded migration of `ns` not owned by `owner_uid` took from its start
    /// to its end.
    fn took_elsewhere<'a>(
        &'a self,
        ns: &'a str,
        owner_uid: &'a str,
    ) -> impl Iterator<Item = i64> + 'a {
        self.live
            .get(ns)
            .into_iter()
            .flatten()
            .filter(move |(_, r)| !r.owned_by(owner_uid))
            .filter_map(|(_, r)| {
                let (s, e) = (r.started_at.as_ref()?, r.completed_at.as_ref()?);
                Some((e.0.as_second() - s.0.as_second()).max(0))
            })
    }

    fn owned_by<'a>(
        &'a self,
        ns: &'a str,
        owner_uid: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a Record)> + 'a {
        self.live
            .get(ns)
            .into_iter()
            .flatten()
            .filter(move |(_, r)| r.owned_by(owner_uid))
            .map(|(name, r)| (&**name, r))
    }
}

fn insert(into: &mut ByName, ns: &str, name: &str, record: Record) {
    into.entry(ns.to_owned())
        .or_default()
        .insert(name.into(), record);
}

/// The migrations the controller watches: the kube store's, and the records of those that
/// succeeded and settled. Cloning shares both.
#[derive(Clone, Debug)]
pub struct Migrations {
    /// Every migration but those that succeeded and settled; the migration controller's cache.
    pub store: Store<VirtualMachineMigration>,
    /// Those that did.
    pub succeeded: Succeeded,
}

impl Migrations {
    /// Whether the watch has had its first list.
    pub fn ready(&self) -> bool {
        crate::caches::is_ready(&self.store)
    }

    /// Migration `ns`/`name`, whole, cut down or rebuilt from its record.
    pub fn get(&self, ns: &str, name: &str) -> Option<VirtualMachineMigration> {
        let records = self.succeeded.read();
        match self.store.get(&ObjectRef::new(name).within(ns)) {
            Some(m) => Some((*m).clone()),
            None => records.get(ns, name).map(|r| r.migration(ns, name)),
        }
    }

    /// Who holds a child named `child`, labelled for `ns`/`name` with migration uid `uid`, if it
    /// says: a migration with work left holds only children under the names ferry gives them
    /// (`names::is_child_name`) — anything else labelled for it is anyone's, and is a stub.
    pub fn holder(&self, ns: &str, name: &str, uid: Option<&str>, child: &str) -> Holder {
        let records = self.succeeded.read();
        let matches = |u: Option<&str>| uid.is_none_or(|want| u == Some(want));
        if let Some(m) = self.store.get(&ObjectRef::new(name).within(ns)) {
            return match (matches(m.metadata.uid.as_deref()), is_slim_success(&m)) {
                (false, _) => Holder::Unknown,
                // Only a record is one, but the rule is the rule wherever it is held.
                (true, true) => Holder::Succeeded,
                (true, false) if ferry_crds::names::is_child_name(&m, child) => Holder::Known,
                (true, false) => Holder::Unknown,
            };
        }
        match records.get(ns, name) {
            Some(r) if matches(Some(&r.uid)) => Holder::Succeeded,
            _ => Holder::Unknown,
        }
    }

    /// The migrations of `ns` whose owner references name `owner_uid`.
    pub fn owned_by(&self, ns: &str, owner_uid: &str) -> Vec<VirtualMachineMigration> {
        let records = self.succeeded.read();
        let mut out: Vec<VirtualMachineMigration> = self
            .store
            .state()
            .iter()
            .filter(|m| m.namespace().as_deref() == Some(ns))
            .filter(|m| m.owner_references().iter().any(|o| o.uid == owner_uid))
            .map(|m| (**m).clone())
            .collect();
        out.extend(
            records
                .owned_by(ns, owner_uid)
                .map(|(name, r)| r.migration(ns, name)),
        );
        out
    }

    /// What a migration of `ns` took, start to end, over those that succeeded and are not
    /// `owner_uid`'s (other waves', lone ones), settled or not yet: the mean and how many it is
    /// of. What a wave with nothing of its own measured forecasts by.
    pub fn measured_elsewhere(&self, ns: &str, owner_uid: &str) -> Option<(i64, usize)> {
        let records = self.succeeded.read();
        let unsettled: Vec<i64> = self
            .store
            .state()
            .iter()
            .filter(|m| m.namespace().as_deref() == Some(ns) && m.phase() == Phase::Succeeded)
            .filter(|m| !m.owner_references().iter().any(|o| o.uid == owner_uid))
            .filter_map(|m| {
                let s = m.status.as_ref()?;
                let (a, b) = (s.started_at.as_ref()?, s.completed_at.as_ref()?);
                Some((b.0.as_second() - a.0.as_second()).max(0))
            })
            .collect();
        let (sum, n) = records
            .took_elsewhere(ns, owner_uid)
            .chain(unsettled)
            .fold((0_i64, 0_usize), |(s, n), t| (s.saturating_add(t), n + 1));
        (n > 0).then(|| (sum / i64::try_from(n).unwrap_or(1), n))
    }

    /// The uids of the migrations the store holds (those a reconcile may still remember).
    pub fn uids_in_store(&self) -> HashSet<String> {
        self.store
            .state()
            .iter()
            .filter_map(|m| m.metadata.uid.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::intents::Intent;
    use crate::reconcile::settled;
    use crate::reconcile::status;
    use ferry_crds::fixtures::{migration, t0};
    use ferry_crds::{Concern, ConcernCode, Severity};

    /// A wave's child that succeeded and settled, with everything a real one records.
    fn succeeded(name: &str, wave_uid: &str) -> VirtualMachineMigration {
        let mut m = migration(name).with_phase(Phase::Succeeded);
        m.metadata.uid = Some(format!("uid-{name}"));
        m.metadata.finalizers = Some(vec![names::FINALIZER.to_owned()]);
        m.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "migration.platform.example/v1alpha1".into(),
            kind: "MigrationWave".into(),
            name: "w".into(),
            uid: wave_uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        m.labels_mut()
            .insert(names::WAVE_LABEL.to_owned(), "w".into());
        m.spec.source.vm.name = Some(format!("vm-{name}"));
        let s = m.status.get_or_insert_with(Default::default);
        s.started_at = Some(ferry_crds::fixtures::ts(450));
        s.completed_at = Some(ferry_crds::fixtures::ts(600));
        s.progress = Some(Progress {
            percent: 100.0,
            bytes_done: 4096,
            bytes_total: 4096,
            ..Default::default()
        });
        s.preflight = Some(PreflightStatus {
            concerns: vec![Concern::new(
                ConcernCode::PoweredOn,
                Severity::Warning,
                "powered on",
            )],
            claims: [("requests.storage".to_owned(), 4096)].into(),
            ..Default::default()
        });
        m.status = status::after_intent(&m, &Intent::Settled, &t0());
        settled::slim(&mut m, &t0());
        m
    }

    #[test]
    fn a_record_gives_a_wave_what_the_cut_down_copy_did() {
        let slim = succeeded("a", "wave-uid");
        assert!(is_slim_success(&slim));
        let record = Record::of(&slim).expect("a settled success has a record");
        let back = record.migration("default", "a");
        assert!(is_slim_success(&back), "still a settled success");
        assert_eq!(back.metadata.uid, slim.metadata.uid);
        assert_eq!(back.wave(), slim.wave());
        assert_eq!(back.spec.source.vm, slim.spec.source.vm);
        assert_eq!(back.phase(), slim.phase());
        let uids = |m: &VirtualMachineMigration| {
            m.owner_references()
                .iter()
                .map(|o| o.uid.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(uids(&back), uids(&slim));
        let (b, s) = (back.status.unwrap(), slim.status.clone().unwrap());
        assert_eq!(
            (&b.completed_at, &b.progress),
            (&s.completed_at, &s.progress)
        );
        assert_eq!(
            ferry_crds::WavePreflight::of([&record.migration("default", "a")]),
            ferry_crds::WavePreflight::of([&slim]),
            "a wave's preflight counts the same"
        );
        // A migration in flight, or one that failed, is not recorded: the store keeps it.
        assert!(Record::of(&migration("r").with_phase(Phase::Converting)).is_none());
    }

    #[test]
    fn a_wave_decides_the_same_on_records_as_on_cut_down_copies() {
        let mut w = ferry_crds::fixtures::wave("w", 3);
        w.metadata.uid = Some("wave-uid".into());
        let slims: Vec<VirtualMachineMigration> = w.spec.vms[..2]
            .iter()
            .enumerate()
            .map(|(i, vm)| {
                let mut c = ferry_crds::child_migration(&w, vm)
                    .unwrap()
                    .released()
                    .with_phase(Phase::Succeeded);
                c.metadata.uid = Some(format!("child-{i}"));
                c.metadata.finalizers = Some(vec![names::FINALIZER.to_owned()]);
                let s = c.status.get_or_insert_with(Default::default);
                s.completed_at = Some(ferry_crds::fixtures::ts(600 * (i as i64 + 1)));
                s.progress = Some(Progress {
                    percent: 100.0,
                    bytes_done: 1 << 30,
                    bytes_total: 1 << 30,
                    ..Default::default()
                });
                c.status = status::after_intent(&c, &Intent::Settled, &t0());
                settled::slim(&mut c, &t0());
                assert!(is_slim_success(&c));
                c
            })
            .collect();
        let rebuilt: Vec<VirtualMachineMigration> = slims
            .iter()
            .map(|c| Record::of(c).unwrap().migration("default", &c.name_any()))
            .collect();
        let now = ferry_crds::fixtures::ts(3600);
        let (on_slims, on_records) = (
            crate::wave::decide::decide(&w, &slims, &[], &now),
            crate::wave::decide::decide(&w, &rebuilt, &[], &now),
        );
        assert_eq!(on_records, on_slims);
        assert_eq!(
            on_records.create,
            vec![2],
            "only the third VM's migration is made"
        );
        assert_eq!(on_records.status.counts.succeeded, 2);
    }

    #[test]
    fn a_relist_replaces_the_records_and_a_wave_finds_its_own() {
        let s = Succeeded::default();
        let put = |name: &str, wave: &str| {
            let m = succeeded(name, wave);
            (m.name_any(), Record::of(&m).unwrap())
        };
        let (a, ra) = put("a", "w1");
        let (b, rb) = put("b", "w2");
        s.write().insert("default", &a, ra.clone());
        s.write().insert("default", &b, rb);
        assert_eq!(s.len(), 2);
        assert_eq!(s.read().owned_by("default", "w1").count(), 1);
        assert_eq!(s.read().owned_by("other", "w1").count(), 0);
        // b is deleted while the watch is away: the relist does not bring it.
        s.write().begin_list();
        s.write().listed("default", &a, ra);
        assert_eq!(
            s.len(),
            2,
            "the old set stays visible until the list is done"
        );
        s.write().end_list();
        assert_eq!(s.len(), 1);
        assert!(s.read().get("default", &b).is_none());
        s.write().remove("default", &a);
        assert!(s.is_empty());
    }

    #[test]
    fn what_others_took_is_measured_on_the_records_of_other_owners_in_the_namespace() {
        let s = Succeeded::default();
        for (name, wave) in [("a", "w1"), ("b", "w2"), ("c", "w2")] {
            let m = succeeded(name, wave);
            s.write()
                .insert("default", &m.name_any(), Record::of(&m).unwrap());
        }
        let took: Vec<i64> = s.read().took_elsewhere("default", "w1").collect();
        assert_eq!(took, [150, 150], "w2's two, not w1's own");
        assert_eq!(s.read().took_elsewhere("other", "w1").count(), 0);
    }
}
