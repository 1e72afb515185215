//! The wave's aggregated status, pure: what its children's phases add up to, the wave's phase,
//! its pace and its four conditions, each a short rule of its own.

use ferry_crds::condition::{self, WaveConditionType};
use ferry_crds::wave::MAX_REPORTED_COLLISIONS;
use ferry_crds::{
    ConditionStatus, MigrationWave, MigrationWaveStatus, Phase, Reason, VirtualMachineMigration,
    WaveCollision, WaveCounts, WaveForecast, WavePhase, WaveRefusal,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::members::Member;
use super::slots::{occupies_slot, waiting_note, waits_for_cutover};
use super::window::{self, Gate};

/// What the children add up to, before any rule is applied.
struct Tally<'a> {
    counts: WaveCounts,
    total: i32,
    in_flight: i32,
    waiting_for_cutover: i32,
    finished: i32,
    collisions: Vec<&'a WaveCollision>,
    collided: i32,
    /// VMs whose migration the API server refused to create (recorded by an earlier look) and
    /// that still have none.
    refused: Vec<&'a WaveRefusal>,
    /// Every VM's migration finished, or the VM gets none.
    all_done: bool,
    all_succeeded: bool,
    /// What the wave says while its window keeps migrations from starting.
    outside_window: Option<String>,
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl<'a> Tally<'a> {
    /// `releasing` and `cutting`: releases and cutovers this plan gives, which the children do
    /// not show yet but which take their slots now.
    fn of(
        children: &[VirtualMachineMigration],
        assigned: &'a [Member<'_>],
        refused: &'a [WaveRefusal],
        (releasing, cutting): (usize, usize),
        now: &Time,
    ) -> Self {
        let refused: Vec<&WaveRefusal> = refused
            .iter()
            .filter(|r| {
                assigned
                    .iter()
                    .any(|m| matches!(m, Member::Create(name) if *name == r.migration))
            })
            .collect();
        // A refusal only someone's change mends counts as done (as a collision does); a quota's
        // is waited for.
        let given_up = |name: &str| {
            refused
                .iter()
                .any(|r| r.migration == name && r.reason != Reason::QuotaExceeded)
        };
        let counts = WaveCounts::from_phases(children.iter().map(VirtualMachineMigration::phase));
        let occupied = children.iter().filter(|c| occupies_slot(c, now)).count();
        let waiting = children
            .iter()
            .filter(|c| waits_for_cutover(c, now))
            .count();
        let collisions: Vec<&WaveCollision> = assigned
            .iter()
            .filter_map(|m| match m {
                Member::Collides(c) => Some(c),
                Member::Migrating(_) | Member::Create(_) => None,
            })
            .collect();
        Tally {
            finished: counts.finished(),
            counts,
            total: count(assigned.len()),
            in_flight: count(occupied + releasing + cutting),
            waiting_for_cutover: count(waiting.saturating_sub(cutting)),
            collided: count(collisions.len()),
            collisions,
            all_done: !assigned.is_empty()
                && assigned.iter().all(|m| match m {
                    Member::Migrating(c) => c.phase().is_terminal(),
                    Member::Collides(_) => true,
                    Member::Create(name) => given_up(name),
                }),
            refused,
            all_succeeded: assigned
                .iter()
                .all(|m| matches!(m, Member::Migrating(c) if c.phase() == Phase::Succeeded)),
            outside_window: None,
        }
    }
}

/// The wave's status from its children and the members `assigned` to its VMs. Pure.
pub(super) fn status(
    wave: &MigrationWave,
    children: &[VirtualMachineMigration],
    assigned: &[Member<'_>],
    giving: (usize, usize),
    (gate, forecast): (Gate, Option<WaveForecast>),
    now: &Time,
) -> MigrationWaveStatus {
    let old = wave.status.clone().unwrap_or_default();
    let mut t = Tally::of(children, assigned, &old.refused, giving, now);
    t.outside_window = wave
        .spec
        .window
        .as_ref()
        .zip(forecast.as_ref())
        .and_then(|(w, f)| window::held_message(w, gate, f));
    let phase = phase(wave, &t, children.is_empty());
    let started_at = old
        .started_at
        .clone()
        .or_else(|| (t.in_flight > 0 || t.finished > 0).then(|| now.clone()));
    let last_completion = children
        .iter()
        .filter_map(|c| c.status.as_ref()?.completed_at.clone())
        .max_by_key(|t| t.0);
    let (throughput, eta) = pace(&t, started_at.as_ref(), last_completion.as_ref());
    let completed_at = (phase.is_terminal() && t.all_done)
        .then(|| old.completed_at.clone().or(last_completion))
        .flatten();
    let (bytes_done, bytes_total) = children
        .iter()
        .filter_map(|c| c.status.as_ref()?.progress.as_ref())
        .fold((0i64, 0i64), |(d, t), p| {
            (d + p.bytes_done, t + p.bytes_total)
        });
    let mut phases = std::collections::BTreeMap::new();
    for c in children {
        *phases.entry(c.phase().as_str().to_owned()).or_insert(0) += 1;
    }
    MigrationWaveStatus {
        selected_vms: old.selected_vms.clone(),
        collisions: t
            .collisions
            .iter()
            .take(MAX_REPORTED_COLLISIONS)
            .map(|c| (*c).clone())
            .collect(),
        refused: t
            .refused
            .iter()
            .take(MAX_REPORTED_COLLISIONS)
            .map(|r| (*r).clone())
            .collect(),
        observed_generation: wave.metadata.generation,
        phase,
        total: t.total,
        in_flight: t.in_flight,
        waiting_for_cutover: t.waiting_for_cutover,
        started_at,
        completed_at,
        throughput_per_hour: throughput,
        eta_seconds: eta,
        preflight: ferry_crds::WavePreflight::of(children),
        forecast,
        bytes_done,
        bytes_total,
        conditions: conditions(wave, &old.conditions, phase, &t, now),
        counts: t.counts,
        phases,
    }
}

/// Cancelled when asked; finished once every VM's migration is, Succeeded only if every one
/// did; Paused when asked; Pending with no child yet; else Running.
fn phase(wave: &MigrationWave, t: &Tally<'_>, no_children: bool) -> WavePhase {
    if wave.spec.cancel {
        WavePhase::Cancelled
    } else if t.all_done && t.all_succeeded {
        WavePhase::Succeeded
    } else if t.all_done {
        WavePhase::Failed
    } else if wave.spec.paused {
        WavePhase::Paused
    } else if no_children {
        WavePhase::Pending
    } else {
        WavePhase::Running
    }
}

/// Migrations finished per hour since the wave started (to its last completion), and the
/// seconds the rest would take at that pace; none before the first finishes.
fn pace(t: &Tally<'_>, started: Option<&Time>, last: Option<&Time>) -> (Option<f64>, Option<i64>) {
    let (Some(s), Some(l)) = (started, last) else {
        return (None, None);
    };
    if t.finished <= 0 {
        return (None, None);
    }
    let hours = (l.0.as_second() - s.0.as_second()).max(1) as f64 / 3600.0;
    let per_hour = f64::from(t.finished) / hours;
    let remaining = f64::from((t.total - t.finished).max(0));
    (
        Some((per_hour * 100.0).round() / 100.0),
        Some((remaining / per_hour * 3600.0).round() as i64),
    )
}

/// A condition's status, reason and message.
type Verdict = (ConditionStatus, Reason, String);

/// The wave's conditions, `old` carried over with each of the four set by its rule.
fn conditions(
    wave: &MigrationWave,
    old: &[ferry_crds::Condition<WaveConditionType>],
    phase: WavePhase,
    t: &Tally<'_>,
    now: &Time,
) -> Vec<ferry_crds::Condition<WaveConditionType>> {
    let generation = wave.metadata.generation;
    let mut conditions = old.to_vec();
    condition::init_conditions(&mut conditions, generation, now);
    let progressing = progressing(wave, phase, t);
    let completed = completed(phase, progressing.1, t);
    for (kind, (status, reason, message)) in [
        (WaveConditionType::Progressing, progressing),
        (WaveConditionType::Completed, completed),
        (WaveConditionType::Degraded, degraded(phase, t)),
        (WaveConditionType::Ready, ready(phase, t)),
    ] {
        condition::set_condition(
            &mut conditions,
            kind,
            status,
            reason,
            message,
            generation,
            now,
        );
    }
    conditions
}

/// Progressing: true while the wave runs (with what is in flight, finished and waiting).
fn progressing(wave: &MigrationWave, phase: WavePhase, t: &Tally<'_>) -> Verdict {
    let (in_flight, finished, total) = (t.in_flight, t.finished, t.total);
    match phase {
        WavePhase::Running | WavePhase::Pending if t.outside_window.is_some() => (
            if in_flight > 0 {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            Reason::OutsideWindow,
            format!(
                "{in_flight} in flight, {finished} of {total} finished; {}",
                t.outside_window.as_deref().unwrap_or_default()
            ),
        ),
        WavePhase::Running | WavePhase::Pending => (
            ConditionStatus::True,
            Reason::InProgress,
            match t.waiting_for_cutover {
                0 => format!("{in_flight} in flight, {finished} of {total} finished"),
                n => format!(
                    "{in_flight} in flight, {finished} of {total} finished, {n} {}",
                    waiting_note(wave)
                ),
            },
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
            format!(
                "{} failed, {} cancelled, {} got no migration (name collision), {} refused by the API server",
                t.counts.failed,
                t.counts.cancelled,
                t.collided,
                t.refused.len()
            ),
        ),
    }
}

/// Completed: true once the wave ended, with Progressing's reason (`ended_by`).
fn completed(phase: WavePhase, ended_by: Reason, t: &Tally<'_>) -> Verdict {
    let message = match t.collided {
        0 => format!("{} of {} finished", t.finished, t.total),
        n => format!(
            "{} of {} finished, {n} got no migration",
            t.finished, t.total
        ),
    };
    match phase {
        WavePhase::Succeeded | WavePhase::Failed | WavePhase::Cancelled => {
            (ConditionStatus::True, ended_by, message)
        }
        WavePhase::Paused => (ConditionStatus::False, Reason::Paused, message),
        WavePhase::Pending | WavePhase::Running => {
            (ConditionStatus::False, Reason::InProgress, message)
        }
    }
}

/// Degraded: true while a VM collides or a migration failed, the first collision named.
fn degraded(phase: WavePhase, t: &Tally<'_>) -> Verdict {
    let total = t.total;
    if let Some(first) = t.collisions.first() {
        let more = match t.collisions.len() {
            1 => String::new(),
            n => format!(" (and {} more in status.collisions)", n - 1),
        };
        let failed = match t.counts.failed {
            0 => String::new(),
            n => format!("; {n} failed: raise spec.retry to retry them"),
        };
        let message = format!(
            "{} of {total} VMs collide: {}{more}{failed}",
            t.collided, first.message
        );
        return (ConditionStatus::True, Reason::NameCollision, message);
    }
    if let Some(first) = t.refused.first() {
        let more = match t.refused.len() {
            1 => String::new(),
            n => format!(" (and {} more in status.refused)", n - 1),
        };
        let message = format!(
            "{} of {total} VMs get no migration: VM {}: {}{more}",
            t.refused.len(),
            first.vm,
            first.message
        );
        return (ConditionStatus::True, first.reason, message);
    }
    if t.counts.failed > 0 {
        let message = format!(
            "{} of {total} failed; raise spec.retry to retry them",
            t.counts.failed
        );
        return (ConditionStatus::True, Reason::Failed, message);
    }
    let reason = if phase == WavePhase::Succeeded {
        Reason::Succeeded
    } else {
        Reason::InProgress
    };
    (
        ConditionStatus::False,
        reason,
        "no migration failed".to_owned(),
    )
}

/// Ready: true once every migration succeeded.
fn ready(phase: WavePhase, t: &Tally<'_>) -> Verdict {
    let message = format!("{} of {} succeeded", t.counts.succeeded, t.total);
    if phase == WavePhase::Succeeded {
        (ConditionStatus::True, Reason::Succeeded, message)
    } else {
        (ConditionStatus::False, Reason::InProgress, message)
    }
}
