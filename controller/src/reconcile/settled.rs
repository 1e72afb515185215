//! A finished migration with nothing left to write is *settled*; the controller keeps only a
//! small form of it in its cache. A migration program leaves thousands of finished records
//! behind, and a cached record holds its discovered source, disks, conditions, history,
//! preflight messages and child records — memory that would grow with the migrated fleet
//! (issue #30). What stays is what is still read of a settled migration: its identity (children's
//! caches and the wave match on namespace, name and uid), ferry's finalizer and annotations,
//! and what a wave's status counts (phase, completion time, progress, attempts, the retry token
//! acted on, the preflight without its messages).
//!
//! The slim form carries [`SLIM_MARK`], a cache-only annotation: the reconciler does nothing on
//! a slim copy (a newer version — a retry raised, a deletion — arrives as an event of its own and
//! is kept whole, being no longer settled). The mark is stripped from every object before it is
//! judged, so nobody can make the controller ignore a migration by writing it.

use ferry_crds::{VirtualMachineMigration, VirtualMachineMigrationStatus, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

pub use crate::migrations::{SLIM_MARK, is_slim, is_slim_success};

use super::intents::{self, Intent};
use super::status;

/// Whether `vmm` is finished and settled: ferry's finalizer on, not being deleted, no intent but
/// [`Intent::Settled`], and a status that intent would not change. Pure.
pub fn settled(vmm: &VirtualMachineMigration, now: &Time) -> bool {
    vmm.finalizers().iter().any(|f| f == names::FINALIZER)
        && vmm.metadata.deletion_timestamp.is_none()
        && intents::decide(vmm) == Intent::Settled
        && status::after_intent(vmm, &Intent::Settled, now).as_ref() == vmm.status.as_ref()
}

/// Drops from a migration what no decision reads and anyone who may edit it can make large:
/// every annotation but ferry's own (`migration.platform.example/...`: the wave's hold, the
/// abandon-cleanup), kubectl's last-applied copy among them, and the managed fields. Applied to
/// every migration the watch holds, running or settled. Pure.
pub fn strip_foreign(vmm: &mut VirtualMachineMigration) {
    vmm.metadata.managed_fields = None;
    if let Some(a) = vmm.metadata.annotations.as_mut() {
        a.retain(|k, _| k.starts_with(names::PREFIX));
    }
}

/// Cuts `vmm` down before it enters the cache: its managed fields always (nothing reads them),
/// and, when it is settled, everything a settled migration is no longer read for. Pure.
pub fn slim(vmm: &mut VirtualMachineMigration, now: &Time) {
    vmm.metadata.managed_fields = None;
    if let Some(a) = vmm.metadata.annotations.as_mut() {
        a.remove(SLIM_MARK);
    }
    if !settled(vmm, now) {
        return;
    }
    let old = vmm.status.take().unwrap_or_default();
    vmm.status = Some(VirtualMachineMigrationStatus {
        phase: old.phase,
        observed_generation: old.observed_generation,
        completed_at: old.completed_at,
        started_at: old.started_at,
        progress: old.progress,
        attempts: old.attempts,
        retry_observed: old.retry_observed,
        preflight: old.preflight.map(|mut p| {
            for c in &mut p.concerns {
                c.message = String::new();
            }
            p
        }),
        ..Default::default()
    });
    vmm.spec.target = Default::default();
    vmm.spec.conversion = Default::default();
    vmm.spec.staging = Default::default();
    // The wave matches its VMs by `spec.source.vm`; where and how they were reached is not read.
    vmm.spec.source.endpoint = Default::default();
    // ferry's own labels and annotations are read (the wave's, the hold); anyone else's are
    // not, and a `kubectl apply`'s copy of the whole object is often the record's largest part.
    let ferrys = |k: &String| k.starts_with(names::PREFIX);
    if let Some(l) = vmm.metadata.labels.as_mut() {
        l.retain(|k, _| ferrys(k));
    }
    if let Some(a) = vmm.metadata.annotations.as_mut() {
        a.retain(|k, _| ferrys(k));
    }
    vmm.annotations_mut()
        .insert(SLIM_MARK.to_owned(), String::new());
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::Phase;
    use ferry_crds::fixtures::{migration, t0};

    #[test]
    fn only_ferrys_annotations_stay_on_a_held_migration() {
        let mut m = migration("m").with_phase(Phase::Importing);
        m.metadata.annotations = Some(
            [
                (names::HOLD_ANNOTATION.to_owned(), "wave".to_owned()),
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
                    "{...}".to_owned(),
                ),
                ("tenant.example/blob".to_owned(), "x".repeat(1000)),
            ]
            .into(),
        );
        strip_foreign(&mut m);
        assert_eq!(
            m.metadata
                .annotations
                .unwrap()
                .into_keys()
                .collect::<Vec<_>>(),
            [names::HOLD_ANNOTATION]
        );
    }

    fn done() -> VirtualMachineMigration {
        let mut done = migration("m").with_phase(Phase::Succeeded);
        done.metadata.finalizers = Some(vec![names::FINALIZER.to_owned()]);
        done.status = status::after_intent(&done, &Intent::Settled, &t0());
        done
    }

    #[test]
    fn only_a_finished_migration_with_nothing_to_write_is_settled() {
        assert!(settled(&done(), &t0()), "ended, and its status says so");
        let mut edited = done();
        edited.metadata.generation = Some(7);
        assert!(
            !settled(&edited, &t0()),
            "observedGeneration is owed a write"
        );
        let retried = done().with_retry(1);
        assert!(!settled(&retried, &t0()), "a retry is an intent");
        let mut deleted = done();
        deleted.metadata.deletion_timestamp = Some(t0());
        assert!(!settled(&deleted, &t0()), "a deletion is cleanup");
        let mut bare = done();
        bare.metadata.finalizers = None;
        assert!(!settled(&bare, &t0()), "the finalizer is owed");
        let running = migration("r").with_phase(Phase::Converting);
        assert!(!settled(&running, &t0()));
    }

    #[test]
    fn a_settled_migration_is_cached_small_and_marked() {
        let mut full = done();
        let s = full.status.as_mut().unwrap();
        s.source = Some(Default::default());
        s.disks = vec![
            ferry_crds::DiskStatus {
                source_path: Some(format!("[datastore1] web-1/{}.vmdk", "x".repeat(200))),
                ..Default::default()
            };
            4
        ];
        full.metadata.managed_fields = Some(vec![Default::default()]);
        full.annotations_mut().insert(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            "x".repeat(4000),
        );
        full.labels_mut()
            .insert(names::WAVE_LABEL.into(), "w".into());
        assert!(
            settled(&full, &t0()),
            "a settled migration with its records"
        );
        let before = serde_json::to_vec(&full).unwrap().len();
        let mut slimmed = full.clone();
        slim(&mut slimmed, &t0());
        assert!(is_slim(&slimmed));
        assert!(is_slim_success(&slimmed) && !is_slim_success(&full));
        let after = serde_json::to_vec(&slimmed).unwrap().len();
        assert!(after * 3 < before, "{after} bytes of {before}");
        let (a, b) = (
            slimmed.status.as_ref().unwrap(),
            full.status.as_ref().unwrap(),
        );
        assert_eq!(
            (a.phase, &a.completed_at, a.attempts, a.retry_observed),
            (b.phase, &b.completed_at, b.attempts, b.retry_observed),
            "what a wave counts stays"
        );
        assert_eq!(slimmed.uid(), full.uid());
        assert_eq!(slimmed.finalizers(), full.finalizers());
        assert!(slimmed.metadata.managed_fields.is_none());
        assert_eq!(
            slimmed.spec.source.vm, full.spec.source.vm,
            "the wave's key"
        );
        assert_eq!(
            slimmed.labels().get(names::WAVE_LABEL).map(String::as_str),
            Some("w")
        );
        assert!(
            !slimmed
                .annotations()
                .contains_key("kubectl.kubernetes.io/last-applied-configuration"),
            "another tool's annotation goes"
        );
    }

    #[test]
    fn a_migration_in_flight_stays_whole_and_nobody_can_mark_one() {
        let mut running = migration("r").with_phase(Phase::Converting);
        running
            .annotations_mut()
            .insert(SLIM_MARK.to_owned(), String::new());
        let before = running.clone();
        slim(&mut running, &t0());
        assert!(!is_slim(&running), "the mark written by someone is dropped");
        assert_eq!(running.status, before.status);
        assert_eq!(running.spec, before.spec);
        // A retry raised on a settled migration: whole again.
        let mut retried = done().with_retry(1);
        slim(&mut retried, &t0());
        assert!(!is_slim(&retried));
        assert!(retried.status.as_ref().unwrap().conditions.len() > 1);
    }
}
