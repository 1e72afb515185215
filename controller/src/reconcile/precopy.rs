//! A warm migration's precopy rounds: while it waits for its cutover, every
//! `spec.warm.precopyIntervalSeconds` ferry snapshots the running source and copies into the
//! volumes only what changed since the round before (the precopy Job: the cutover Job's copy,
//! read from the round's snapshot), then removes the snapshot. The cutover's own copy — the
//! downtime — is then what changed since the last round only.
//!
//! A round moves the disks' recorded change ids on only once its Job reported every disk: a
//! round that failed or was cut short (the cutover came) may have written part of its changes,
//! and the next copy — from the change ids before it — rewrites every area changed since, those
//! included, so the volume still ends byte-equal to the source's final state.
//!
//! This module is the arithmetic and the words; CuttingOver decides and acts. Pure.

use std::time::Duration;

use ferry_crds::{DiskStatus, VirtualMachineMigration, WarmStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::children::cutover_job::CutoverVolume;
use ferry_convert::delta::DeltaResult;
use ferry_vsphere::SnapshotDisk;

/// The precopy interval of `vmm`.
pub fn interval(vmm: &VirtualMachineMigration) -> Duration {
    vmm.spec.warm.as_ref().map_or_else(
        || ferry_crds::WarmSpec::default().precopy_interval(),
        ferry_crds::WarmSpec::precopy_interval,
    )
}

/// When the next round starts: recorded, else an interval after the last round's snapshot.
pub fn next_round_at(vmm: &VirtualMachineMigration, w: &WarmStatus) -> Option<Time> {
    w.next_round_at.clone().or_else(|| {
        let last = w.last_round_at.as_ref()?;
        let at = last.0.checked_add(interval(vmm)).ok()?;
        Some(Time(at))
    })
}

/// Whether a round is due at `now` (none in flight).
pub fn due(vmm: &VirtualMachineMigration, w: &WarmStatus, now: &Time) -> bool {
    w.snapshot.is_none() && next_round_at(vmm, w).is_some_and(|at| at.0 <= now.0)
}

/// The name of round `round`'s snapshot: the first copy's name and the round.
pub fn snapshot_name(vmm: &VirtualMachineMigration, round: i32) -> String {
    format!("{}-{round}", super::warm::snapshot_name(vmm))
}

/// What a round's Job writes: per disk its claim, device key, the change id of the last round
/// that completed, and the disk as the round's snapshot froze it.
///
/// # Errors
/// The disks not recorded or not in the snapshot.
pub fn volumes(
    vmm: &VirtualMachineMigration,
    block: &[bool],
    frozen: &[SnapshotDisk],
) -> Result<Vec<CutoverVolume>, String> {
    let mut out = super::warm::volumes(vmm, block)?;
    let mut missing = vec![];
    for v in &mut out {
        match frozen.iter().find(|f| f.key == v.device_key) {
            Some(f) => v.datastore_path.clone_from(&f.datastore_path),
            None => missing.push(format!("disk {} (device {})", v.index, v.device_key)),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "not in the round's snapshot: {}",
            missing.join(", ")
        ))
    }
}

/// The warm status after a round whose Job reported every disk: one more round, the change
/// ids moved on to the round's snapshot, the snapshot forgotten (its removal is the step that
/// carries this record), the figures measured and the next round scheduled.
///
/// # Errors
/// A disk of the round's snapshot without a change id (changed block tracking switched off
/// since): the round's changes cannot be followed on.
pub fn completed(
    vmm: &VirtualMachineMigration,
    reported: &DeltaResult,
    frozen: &[SnapshotDisk],
    now: &Time,
) -> Result<(WarmStatus, Vec<DiskStatus>), String> {
    let mut w = super::warm::status(vmm);
    let started = w
        .snapshot
        .as_ref()
        .and_then(|s| s.started_at.clone())
        .unwrap_or_else(|| now.clone());
    let mut disks = vmm
        .status
        .as_ref()
        .map(|s| s.disks.clone())
        .unwrap_or_default();
    for d in &mut disks {
        let f = frozen
            .iter()
            .find(|f| Some(f.key) == d.device_key)
            .ok_or_else(|| format!("disk {} is not in the round's snapshot", d.index))?;
        let id = f.change_id.clone().ok_or_else(|| {
            format!(
                "disk {} has no change id in the round's snapshot: changed block tracking was switched off",
                d.index
            )
        })?;
        d.change_id = Some(id);
    }
    let bytes: u64 = reported.disks.values().map(|(b, _)| *b).sum();
    let secs = |from: &Time, to: &Time| {
        Duration::try_from(to.0.duration_since(from.0))
            .unwrap_or_default()
            .as_secs_f64()
    };
    let took = secs(&started, now).max(1.0);
    let since_previous = w.last_round_at.as_ref().map_or(0.0, |l| secs(l, &started));
    let rate = (since_previous > 0.0).then(|| bytes as f64 / since_previous);
    // Changes by the cutover: at the measured rate for an interval (or until cutoverAt, when
    // sooner); copied at this round's speed, its Job's start included.
    let ahead = vmm
        .spec
        .warm
        .as_ref()
        .and_then(|s| s.cutover_at.as_ref())
        .map_or(interval(vmm).as_secs_f64(), |at| {
            secs(now, at).min(interval(vmm).as_secs_f64())
        });
    let predicted = match (rate, bytes) {
        (Some(r), b) if b > 0 => took * (r * ahead / b as f64).max(0.0),
        _ => took,
    };
    w.rounds += 1;
    w.snapshot = None;
    w.last_round_at = Some(started);
    w.last_delta_bytes = Some(i64::try_from(bytes).unwrap_or(i64::MAX));
    w.change_rate_bytes_per_second = rate.map(|r| r.round() as i64);
    let copy = predicted.round().max(1.0) as i64;
    w.predicted_cutover_copy_seconds = Some(copy);
    w.predicted_downtime_seconds = Some(copy.saturating_add(longest_shutdown(vmm)));
    w.next_round_at = now.0.checked_add(interval(vmm)).ok().map(Time);
    w.last_round_failure = None;
    Ok((w, disks))
}

/// The longest the cutover's power-off can take: the grace a guest with running VMware Tools
/// is given to shut down before it is powered off hard (as [`super::source_power_off`] says);
/// none for a guest without Tools (hard at once) or with a grace of 0.
fn longest_shutdown(vmm: &VirtualMachineMigration) -> i64 {
    let tools = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.vmware_tools);
    let grace = vmm.spec.source.power.shutdown_grace_period_seconds.max(0);
    if tools == Some(ferry_crds::ToolsState::Running) {
        grace
    } else {
        0
    }
}

/// The warm status after a round that did not complete (its Job failed, or the cutover came
/// first): the snapshot forgotten (removed by the step carrying this record), the change ids
/// where they were, the next round scheduled; `why` recorded when it failed.
pub fn abandoned(vmm: &VirtualMachineMigration, now: &Time, why: Option<String>) -> WarmStatus {
    let mut w = super::warm::status(vmm);
    w.snapshot = None;
    w.next_round_at = now.0.checked_add(interval(vmm)).ok().map(Time);
    if why.is_some() {
        w.last_round_failure = why;
    }
    w
}

/// What the rounds tell people.
pub mod say {
    pub fn taking_snapshot(round: i32) -> String {
        format!(
            "precopy round {round}: taking a snapshot of the running source; the source runs on until the cutover"
        )
    }

    pub fn copying(round: i32, disks: usize) -> String {
        format!(
            "precopy round {round}: copying what changed on {disks} disk(s) since the last round; the source runs on until the cutover"
        )
    }

    pub fn ending(round: i32) -> String {
        format!("precopy round {round} done: removing its snapshot")
    }

    pub fn failed(round: i32, why: &str) -> String {
        format!("precopy round {round} failed ({why}); the next round copies its changes again")
    }

    pub fn refused(round: i32, why: &str) -> String {
        format!("precopy round {round}: {why}")
    }

    pub fn cut_short(round: i32) -> String {
        format!(
            "the cutover is due: precopy round {round} is cut short (its Job deleted, its snapshot removed)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{SnapshotRecord, WarmSpec, fixtures};

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn frozen(key: i32, id: Option<&str>) -> SnapshotDisk {
        SnapshotDisk {
            key,
            datastore_path: format!("[ds] vm/disk-{key}-snap.vmdk"),
            capacity_bytes: 1 << 30,
            change_id: id.map(str::to_owned),
        }
    }

    /// A warm migration with one disk (device 2000, change id "old") whose last round's
    /// snapshot was taken at 1,000 s, a round in flight since 1,600 s, every 600 s.
    fn in_round() -> VirtualMachineMigration {
        let mut vmm = fixtures::migration("m").with_disks(1);
        vmm.spec.warm = Some(WarmSpec {
            precopy_interval_seconds: Some(600),
            ..WarmSpec::default()
        });
        let st = vmm.status.get_or_insert_with(Default::default);
        st.disks[0].device_key = Some(2000);
        st.disks[0].change_id = Some("old".into());
        st.warm = Some(Box::new(WarmStatus {
            rounds: 1,
            last_round_at: Some(at(1_000)),
            snapshot: Some(SnapshotRecord {
                name: "n".into(),
                moref: Some("snapshot-3".into()),
                started_at: Some(at(1_600)),
            }),
            ..WarmStatus::default()
        }));
        vmm
    }

    #[test]
    fn a_completed_round_moves_the_change_ids_on_and_measures_the_guest() {
        let vmm = in_round();
        let reported = DeltaResult {
            disks: [(0, (60 << 20, "sha".to_owned()))].into(),
        };
        let (w, disks) =
            completed(&vmm, &reported, &[frozen(2000, Some("new"))], &at(1_630)).unwrap();
        assert_eq!(w.rounds, 2);
        assert_eq!(w.snapshot, None);
        assert_eq!(disks[0].change_id.as_deref(), Some("new"));
        assert_eq!(
            w.last_round_at,
            Some(at(1_600)),
            "changes since this snapshot are next"
        );
        assert_eq!(w.last_delta_bytes, Some(60 << 20));
        // 60 MiB changed in the 600 s between the two snapshots: 0.1 MiB/s.
        assert_eq!(w.change_rate_bytes_per_second, Some(104_858));
        // As much again by the next round, copied as fast as this one (30 s).
        assert_eq!(w.predicted_cutover_copy_seconds, Some(30));
        assert_eq!(
            w.predicted_downtime_seconds,
            Some(30),
            "no VMware Tools seen: powered off hard at once, the copy is the downtime"
        );
        assert_eq!(w.next_round_at, Some(at(2_230)));
    }

    #[test]
    fn the_predicted_downtime_counts_a_guest_shutdown_at_its_longest() {
        let mut vmm = in_round();
        vmm.spec.source.power.shutdown_grace_period_seconds = 120;
        let discovered = vmm
            .status
            .get_or_insert_with(Default::default)
            .source
            .get_or_insert_with(Default::default);
        discovered.vmware_tools = Some(ferry_crds::ToolsState::Running);
        let reported = DeltaResult {
            disks: [(0, (60 << 20, "sha".to_owned()))].into(),
        };
        let (w, _) = completed(&vmm, &reported, &[frozen(2000, Some("new"))], &at(1_630)).unwrap();
        assert_eq!(w.predicted_cutover_copy_seconds, Some(30));
        assert_eq!(
            w.predicted_downtime_seconds,
            Some(150),
            "120 s grace + 30 s copy"
        );

        vmm.spec.source.power.shutdown_grace_period_seconds = 0;
        let (w, _) = completed(&vmm, &reported, &[frozen(2000, Some("new"))], &at(1_630)).unwrap();
        assert_eq!(
            w.predicted_downtime_seconds,
            Some(30),
            "grace 0: hard at once"
        );
    }

    #[test]
    fn a_round_without_a_change_id_is_not_followed_on() {
        let reported = DeltaResult::default();
        let why = completed(&in_round(), &reported, &[frozen(2000, None)], &at(1_630)).unwrap_err();
        assert!(why.contains("changed block tracking"), "{why}");
        assert!(
            completed(
                &in_round(),
                &reported,
                &[frozen(2001, Some("x"))],
                &at(1_630)
            )
            .is_err()
        );
    }

    #[test]
    fn an_abandoned_round_keeps_the_change_ids_and_comes_again() {
        let vmm = in_round();
        let w = abandoned(&vmm, &at(1_700), Some("the Job failed".into()));
        assert_eq!(w.rounds, 1);
        assert_eq!(w.snapshot, None);
        assert_eq!(w.last_round_at, Some(at(1_000)));
        assert_eq!(w.next_round_at, Some(at(2_300)));
        assert_eq!(w.last_round_failure.as_deref(), Some("the Job failed"));
    }

    #[test]
    fn a_round_is_due_an_interval_after_the_last_and_never_two_at_once() {
        let mut vmm = in_round();
        let mut w = super::super::warm::status(&vmm);
        assert!(!due(&vmm, &w, &at(5_000)), "one in flight");
        w.snapshot = None;
        assert!(!due(&vmm, &w, &at(1_599)));
        assert!(due(&vmm, &w, &at(1_600)));
        w.next_round_at = Some(at(3_000));
        assert!(!due(&vmm, &w, &at(2_000)), "the recorded schedule wins");
        vmm.spec.warm = None;
        assert_eq!(interval(&vmm), Duration::from_secs(3600));
        assert!(snapshot_name(&vmm, 2).ends_with("-0-2"));
    }
}
