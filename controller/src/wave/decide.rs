//! The wave's decision, pure: which child migrations to create, which held ones to release
//! within `maxInFlight`, which to cancel or retry, and the aggregated status.

use ferry_crds::condition::{self, WaveConditionType};
use ferry_crds::{
    ConditionStatus, MigrationWave, MigrationWaveStatus, Phase, Reason, VirtualMachineMigration,
    WaveCounts, WavePhase, child_migration_name,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

/// What the wave controller does in one reconcile.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    /// Indexes into `spec.vms` whose migration does not exist yet.
    pub create: Vec<usize>,
    /// Held migrations to release (hold annotation removed), in `spec.vms` order.
    pub release: Vec<String>,
    /// Migrations to set `spec.cancel: true` on.
    pub cancel: Vec<String>,
    /// Failed migrations whose `spec.retry` is raised to the wave's.
    pub retry: Vec<String>,
    /// The status to write.
    pub status: MigrationWaveStatus,
}

/// Whether a child takes a slot of `maxInFlight`: released and not finished.
pub fn occupies_slot(vmm: &VirtualMachineMigration) -> bool {
    !vmm.is_held() && !vmm.phase().is_terminal()
}

/// Decides. Pure.
///
/// # Guarantees
/// * Never more than `maxInFlight` children released and unfinished after the plan runs.
/// * Releases follow `spec.vms` order; nothing is released while paused or cancelled.
/// * `cancel` reaches every unfinished child; a raised `retry` reaches every `Failed` child
///   whose own token is lower.
pub fn decide(wave: &MigrationWave, children: &[VirtualMachineMigration], now: &Time) -> Plan {
    let name = wave.name_any();
    let index: std::collections::HashMap<&str, &VirtualMachineMigration> = children
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
        .collect();
    let by_name = |n: &str| index.get(n).copied();
    let mut plan = Plan::default();
    let ordered: Vec<(usize, String)> = wave
        .members()
        .iter()
        .enumerate()
        .map(|(i, vm)| (i, child_migration_name(&name, vm)))
        .collect();
    for (i, child) in &ordered {
        if by_name(child).is_none() {
            plan.create.push(*i);
        }
    }
    let mut in_flight = children.iter().filter(|c| occupies_slot(c)).count();
    let max = usize::try_from(wave.spec.max_in_flight.max(1)).unwrap_or(1);
    if !wave.spec.paused && !wave.spec.cancel {
        for (_, child) in &ordered {
            if in_flight >= max {
                break;
            }
            if let Some(c) = by_name(child)
                && c.is_held()
                && !c.phase().is_terminal()
            {
                plan.release.push(child.clone());
                in_flight += 1;
            }
        }
    }
    if wave.spec.cancel {
        plan.cancel = children
            .iter()
            .filter(|c| !c.phase().is_terminal() && !c.spec.cancel)
            .map(ResourceExt::name_any)
            .collect();
    }
    if wave.spec.retry > 0 {
        plan.retry = children
            .iter()
            .filter(|c| {
                c.phase() == Phase::Failed && c.spec.retry < wave.spec.retry && !wave.spec.cancel
            })
            .map(ResourceExt::name_any)
            .collect();
    }
    plan.status = status(wave, children, plan.release.len(), now);
    plan
}

/// Children as read from a cache, with the releases this controller made that the cache does
/// not show yet applied to them: a release not yet seen must still count as a taken slot, or
/// the next plan would release past `maxInFlight`. Pure.
///
/// Returns the children and the uids of `released` the cache still shows held (the ones to
/// keep remembering); a child gone from the cache is forgotten.
pub fn with_releases(
    mut children: Vec<VirtualMachineMigration>,
    released: &std::collections::HashSet<String>,
) -> (
    Vec<VirtualMachineMigration>,
    std::collections::HashSet<String>,
) {
    let mut pending = std::collections::HashSet::new();
    for c in &mut children {
        let Some(uid) = c.metadata.uid.as_deref() else {
            continue;
        };
        if c.is_held() && released.contains(uid) {
            pending.insert(uid.to_owned());
            if let Some(a) = c.metadata.annotations.as_mut() {
                a.remove(ferry_crds::names::HOLD_ANNOTATION);
            }
        }
    }
    (children, pending)
}

fn status(
    wave: &MigrationWave,
    children: &[VirtualMachineMigration],
    releasing: usize,
    now: &Time,
) -> MigrationWaveStatus {
    let old = wave.status.clone().unwrap_or_default();
    let generation = wave.metadata.generation;
    let counts = WaveCounts::from_phases(children.iter().map(VirtualMachineMigration::phase));
    let members = wave.members().len();
    let total = i32::try_from(members).unwrap_or(i32::MAX);
    let in_flight = i32::try_from(children.iter().filter(|c| occupies_slot(c)).count() + releasing)
        .unwrap_or(i32::MAX);
    let finished = counts.finished();
    let all_done = finished >= total && total > 0 && children.len() >= members;
    let started_at = old
        .started_at
        .clone()
        .or_else(|| (in_flight > 0 || finished > 0).then(|| now.clone()));
    let last_completion = children
        .iter()
        .filter_map(|c| c.status.as_ref()?.completed_at.clone())
        .max_by_key(|t| t.0);
    let (throughput, eta) = match (&started_at, &last_completion) {
        (Some(s), Some(l)) if finished > 0 => {
            let hours = (l.0.as_second() - s.0.as_second()).max(1) as f64 / 3600.0;
            let per_hour = f64::from(finished) / hours;
            let remaining = f64::from((total - finished).max(0));
            (
                Some((per_hour * 100.0).round() / 100.0),
                Some((remaining / per_hour * 3600.0).round() as i64),
            )
        }
        _ => (None, None),
    };
    let (bytes_done, bytes_total) = children
        .iter()
        .filter_map(|c| c.status.as_ref()?.progress.as_ref())
        .fold((0i64, 0i64), |(d, t), p| {
            (d + p.bytes_done, t + p.bytes_total)
        });
    let phase = if wave.spec.cancel {
        WavePhase::Cancelled
    } else if all_done {
        if counts.succeeded == total {
            WavePhase::Succeeded
        } else {
            WavePhase::Failed
        }
    } else if wave.spec.paused {
        WavePhase::Paused
    } else if children.is_empty() {
        WavePhase::Pending
    } else {
        WavePhase::Running
    };
    let completed_at = if phase.is_terminal() && all_done {
        old.completed_at.clone().or(last_completion)
    } else {
        None
    };
    let mut conditions = old.conditions.clone();
    condition::init_conditions(&mut conditions, generation, now);
    let (p_status, p_reason, p_msg) = match phase {
        WavePhase::Running | WavePhase::Pending => (
            ConditionStatus::True,
            Reason::InProgress,
            format!("{in_flight} in flight, {finished} of {total} finished"),
        ),
        WavePhase::Paused => (
            ConditionStatus::False,
            Reason::Paused,
            "spec.paused is true".to_owned(),
        ),
        WavePhase::Cancelled => (
            ConditionStatus::False,
            Reason::Cancelled,
            "spec.cancel is true".to_owned(),
        ),
        WavePhase::Succeeded => (
            ConditionStatus::False,
            Reason::Succeeded,
            format!("all {total} migrations succeeded"),
        ),
        WavePhase::Failed => (
            ConditionStatus::False,
            Reason::Failed,
            format!("{} failed, {} cancelled", counts.failed, counts.cancelled),
        ),
    };
    condition::set_condition(
        &mut conditions,
        WaveConditionType::Progressing,
        p_status,
        p_reason,
        p_msg,
        generation,
        now,
    );
    let (c_status, c_reason, c_msg) = match phase {
        WavePhase::Succeeded | WavePhase::Failed | WavePhase::Cancelled => (
            ConditionStatus::True,
            p_reason,
            format!("{finished} of {total} finished"),
        ),
        WavePhase::Pending | WavePhase::Running | WavePhase::Paused => (
            ConditionStatus::False,
            if phase == WavePhase::Paused {
                Reason::Paused
            } else {
                Reason::InProgress
            },
            format!("{finished} of {total} finished"),
        ),
    };
    condition::set_condition(
        &mut conditions,
        WaveConditionType::Completed,
        c_status,
        c_reason,
        c_msg,
        generation,
        now,
    );
    let (d_status, d_reason, d_msg) = if counts.failed > 0 {
        (
            ConditionStatus::True,
            Reason::Failed,
            format!(
                "{} of {total} failed; raise spec.retry to retry them",
                counts.failed
            ),
        )
    } else {
        (
            ConditionStatus::False,
            if phase == WavePhase::Succeeded {
                Reason::Succeeded
            } else {
                Reason::InProgress
            },
            "no migration failed".to_owned(),
        )
    };
    condition::set_condition(
        &mut conditions,
        WaveConditionType::Degraded,
        d_status,
        d_reason,
        d_msg,
        generation,
        now,
    );
    let (r_status, r_reason) = if phase == WavePhase::Succeeded {
        (ConditionStatus::True, Reason::Succeeded)
    } else {
        (ConditionStatus::False, Reason::InProgress)
    };
    condition::set_condition(
        &mut conditions,
        WaveConditionType::Ready,
        r_status,
        r_reason,
        format!("{} of {total} succeeded", counts.succeeded),
        generation,
        now,
    );
    let mut phases = std::collections::BTreeMap::new();
    for c in children {
        *phases.entry(c.phase().as_str().to_owned()).or_insert(0) += 1;
    }
    MigrationWaveStatus {
        selected_vms: old.selected_vms.clone(),
        observed_generation: generation,
        phase,
        total,
        counts,
        phases,
        in_flight,
        started_at,
        completed_at,
        throughput_per_hour: throughput,
        eta_seconds: eta,
        bytes_done,
        bytes_total,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{
        child_migration,
        fixtures::{t0, wave},
    };
    use proptest::prelude::*;

    fn children_of(w: &MigrationWave, phases: &[(Phase, bool)]) -> Vec<VirtualMachineMigration> {
        w.spec
            .vms
            .iter()
            .zip(phases)
            .map(|(vm, (phase, held))| {
                let mut c = child_migration(w, vm).unwrap().with_phase(*phase);
                if !held {
                    c = c.released();
                }
                c
            })
            .collect()
    }

    #[test]
    fn creates_missing_children_and_releases_within_max_in_flight() {
        let w = wave("w", 4).with_max_in_flight(2);
        let p = decide(&w, &[], &t0());
        assert_eq!(p.create, vec![0, 1, 2, 3]);
        assert!(p.release.is_empty());
        let kids = children_of(
            &w,
            &[
                (Phase::Queued, true),
                (Phase::Queued, true),
                (Phase::Queued, true),
                (Phase::Queued, true),
            ],
        );
        let p = decide(&w, &kids, &t0());
        assert_eq!(
            p.release,
            vec!["w-dc0-h0-vm0".to_owned(), "w-dc0-h0-vm1".to_owned()]
        );
        assert_eq!(p.status.in_flight, 2);
        let kids = children_of(
            &w,
            &[
                (Phase::Succeeded, false),
                (Phase::Importing, false),
                (Phase::Queued, true),
                (Phase::Queued, true),
            ],
        );
        assert_eq!(
            decide(&w, &kids, &t0()).release,
            vec!["w-dc0-h0-vm2".to_owned()]
        );
    }

    #[test]
    fn a_release_the_cache_does_not_show_yet_still_takes_its_slot() {
        let w = wave("w", 3).with_max_in_flight(1);
        let mut children = children_of(&w, &[(Phase::Pending, true); 3]);
        for (i, c) in children.iter_mut().enumerate() {
            c.metadata.uid = Some(format!("u{i}"));
        }
        let first = decide(&w, &children, &t0());
        assert_eq!(first.release.len(), 1);
        // The cache still shows every child held; the release of u0 was made.
        let released = ["u0".to_owned()].into_iter().collect();
        let (seen, pending) = with_releases(children.clone(), &released);
        assert_eq!(
            pending, released,
            "u0 is remembered until the cache shows it"
        );
        let again = decide(&w, &seen, &t0());
        assert!(again.release.is_empty(), "{again:?}");
        assert_eq!(again.status.in_flight, 1);
        // Once the cache shows it released, nothing is left to remember.
        children[0] = children[0].clone().released();
        let (_, pending) = with_releases(children, &released);
        assert!(pending.is_empty());
    }

    #[test]
    fn paused_and_cancelled_waves_release_nothing_and_cancel_reaches_every_unfinished_child() {
        let w = wave("w", 3).paused();
        let kids = children_of(
            &w,
            &[
                (Phase::Queued, true),
                (Phase::Importing, false),
                (Phase::Succeeded, false),
            ],
        );
        let p = decide(&w, &kids, &t0());
        assert!(p.release.is_empty());
        assert_eq!(p.status.phase, WavePhase::Paused);
        let w = wave("w", 3).cancelled();
        let p = decide(&w, &kids, &t0());
        assert!(p.release.is_empty());
        assert_eq!(
            p.cancel,
            vec!["w-dc0-h0-vm0".to_owned(), "w-dc0-h0-vm1".to_owned()]
        );
        assert_eq!(p.status.phase, WavePhase::Cancelled);
    }

    #[test]
    fn retry_reaches_failed_children_once_per_token() {
        let w = wave("w", 2).with_retry(1);
        let mut kids = children_of(&w, &[(Phase::Failed, false), (Phase::Succeeded, false)]);
        assert_eq!(
            decide(&w, &kids, &t0()).retry,
            vec!["w-dc0-h0-vm0".to_owned()]
        );
        kids[0].spec.retry = 1;
        assert!(decide(&w, &kids, &t0()).retry.is_empty());
    }

    #[test]
    fn aggregates_counts_phase_and_throughput() {
        let w = wave("w", 2);
        let mut kids = children_of(&w, &[(Phase::Succeeded, false), (Phase::Succeeded, false)]);
        for k in &mut kids {
            k.status.get_or_insert_with(Default::default).completed_at =
                Some(ferry_crds::fixtures::ts(1800));
        }
        let mut w2 = w.clone();
        w2.status = Some(MigrationWaveStatus {
            started_at: Some(t0()),
            ..Default::default()
        });
        let p = decide(&w2, &kids, &t0());
        assert_eq!(p.status.phase, WavePhase::Succeeded);
        assert_eq!(p.status.counts.succeeded, 2);
        assert_eq!(p.status.throughput_per_hour, Some(4.0));
        assert_eq!(p.status.eta_seconds, Some(0));
        assert_eq!(p.status.completed_at, Some(ferry_crds::fixtures::ts(1800)));
        assert!(
            p.status
                .condition(WaveConditionType::Ready)
                .is_some_and(|c| c.status == ConditionStatus::True)
        );
    }

    #[test]
    fn completed_and_degraded_conditions_and_per_phase_counts() {
        let cond = |p: &Plan, t| {
            let c = p.status.condition(t).unwrap();
            (c.status, c.reason)
        };
        let w = wave("w", 3);
        let kids = children_of(
            &w,
            &[
                (Phase::Failed, false),
                (Phase::Importing, false),
                (Phase::Queued, true),
            ],
        );
        let p = decide(&w, &kids, &t0());
        assert_eq!(
            cond(&p, WaveConditionType::Degraded),
            (ConditionStatus::True, Reason::Failed)
        );
        assert!(
            p.status
                .condition(WaveConditionType::Degraded)
                .unwrap()
                .message
                .starts_with("1 of 3 failed")
        );
        assert_eq!(
            cond(&p, WaveConditionType::Completed),
            (ConditionStatus::False, Reason::InProgress)
        );
        assert_eq!(p.status.phases.get("Importing"), Some(&1));
        assert_eq!(p.status.phases.get("Failed"), Some(&1));
        assert_eq!(p.status.phases.get("Queued"), Some(&1));
        let done = children_of(
            &w,
            &[
                (Phase::Succeeded, false),
                (Phase::Succeeded, false),
                (Phase::Succeeded, false),
            ],
        );
        let p = decide(&w, &done, &t0());
        assert_eq!(
            cond(&p, WaveConditionType::Completed),
            (ConditionStatus::True, Reason::Succeeded)
        );
        assert_eq!(
            cond(&p, WaveConditionType::Degraded),
            (ConditionStatus::False, Reason::Succeeded)
        );
        let p = decide(&w.clone().paused(), &kids, &t0());
        assert_eq!(
            cond(&p, WaveConditionType::Completed),
            (ConditionStatus::False, Reason::Paused)
        );
    }

    proptest! {
        #[test]
        fn never_more_than_max_in_flight(
            max in 1i32..6,
            states in proptest::collection::vec((0usize..11, any::<bool>()), 1..12),
        ) {
            let w = wave("w", states.len()).with_max_in_flight(max);
            let phases: Vec<(Phase, bool)> = states.iter().map(|(p, held)| {
                let phase = Phase::ALL[*p];
                (phase, *held && matches!(phase, Phase::Pending | Phase::Queued))
            }).collect();
            let kids = children_of(&w, &phases);
            let before = kids.iter().filter(|c| occupies_slot(c)).count();
            let p = decide(&w, &kids, &t0());
            let after = before + p.release.len();
            prop_assert!(p.release.is_empty() || after <= max as usize);
            prop_assert_eq!(p.status.in_flight as usize, after);
        }
    }
}
