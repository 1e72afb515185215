//! The next status, computed in full from the scope and the decision; and whether it is worth a
//! write. Every condition has one setter here; `lastTransitionTime` moves only on a status change
//! (through `ferry_crds::condition::set_condition`).

use std::time::Duration;

use ferry_crds::source::{PowerRestoreResult, SourceOutage, SourcePowerRestore};
use ferry_crds::{
    Condition, ConditionStatus, ConditionType, LastFailure, Phase, Progress, Reason, Stage,
    StagingRecord, VirtualMachineMigration, VirtualMachineMigrationStatus as Status, condition,
    history, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::by_phase::conditions_of;
use super::intents::{self, Intent};
use super::outcome::{CondUpdate, Outcome, Step};
use super::power;
use crate::pacing::Worth;

/// The most `status.message` holds (the CRD's `maxLength`).
pub const SUMMARY_MAX: usize = 1024;

/// `status.message` is a one-line summary: the first line of `message`, cut (at a character
/// boundary, with an ellipsis) to what the CRD holds. The whole message stays in the
/// conditions and `lastFailure` (32 KiB each); a longer summary would fail every status write.
/// Pure.
pub fn summary(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    if line.len() <= SUMMARY_MAX {
        return line.to_owned();
    }
    let mut cut = SUMMARY_MAX - '…'.len_utf8();
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &line[..cut])
}

/// The status as read, with every condition present — a cold migration has no cutover, and no
/// `CutOver` condition. Pure.
pub fn initial(vmm: &VirtualMachineMigration, now: &Time) -> Status {
    let mut s = vmm.status.clone().unwrap_or_default();
    condition::init_conditions(&mut s.conditions, vmm.metadata.generation, now);
    if !super::warm::is_warm(vmm) {
        s.conditions.retain(|c| c.type_ != ConditionType::CutOver);
    }
    if !vmm.spec.conversion.guest.converts() {
        s.conditions
            .retain(|c| c.type_ != ConditionType::GuestConverted);
    }
    s
}

fn set(s: &mut Status, generation: Option<i64>, now: &Time, u: &CondUpdate) {
    condition::set_condition(
        &mut s.conditions,
        u.type_,
        u.status,
        u.reason,
        u.message.clone(),
        generation,
        now,
    );
}

fn ready(
    s: &mut Status,
    generation: Option<i64>,
    now: &Time,
    status: ConditionStatus,
    reason: Reason,
    message: impl Into<String>,
) {
    condition::set_condition(
        &mut s.conditions,
        ConditionType::Ready,
        status,
        reason,
        message,
        generation,
        now,
    );
}

/// Enters `to`: phase, history, `startedAt` on the first start, `completedAt` on a terminal
/// phase. Pure.
pub fn enter(s: &mut Status, to: Phase, now: &Time) {
    if s.phase == to && s.history.last().is_some_and(|h| h.phase == to) {
        return;
    }
    if matches!(s.phase, Phase::Pending | Phase::Queued)
        && to.is_checkpoint()
        && s.started_at.is_none()
    {
        s.started_at = Some(now.clone());
    }
    s.phase = to;
    s.retries = 0;
    history::record_phase(&mut s.history, to, s.attempts, now);
    s.completed_at = to.is_terminal().then(|| now.clone());
}

/// What the migration stages on from now on: `spec.staging` and `spec.conversion` as they are
/// when it leaves Preparing, and the keys of the discovered disks' images (`s`: the status
/// being written, with the discovered source). Pure.
pub fn staging_record(vmm: &VirtualMachineMigration, s: &Status) -> StagingRecord {
    let disks = s.source.as_ref().map_or(0, |src| src.disks.len());
    StagingRecord {
        location: vmm.spec.staging.clone(),
        conversion: vmm.spec.conversion.clone(),
        keys: (0..disks).map(|i| names::staging_key(vmm, i)).collect(),
    }
}

/// The status after a checkpoint's outcome. Pure.
///
/// # Guarantees
/// * `observedGeneration` moves to the spec's generation only when the outcome is not a
///   failure: a transient retry or a failure has not reconciled that generation.
/// * A failure under `restorePowerState: OnCancelOrFailure` of a source ferry powered off
///   records a pending `sourcePowerRestore`: the power rule powers the source on in later
///   reconciles, once the target is down (the migration is `Failed` meanwhile).
pub fn after_outcome<A>(vmm: &VirtualMachineMigration, outcome: &Outcome<A>, now: &Time) -> Status {
    let generation = vmm.metadata.generation;
    let mut s = initial(vmm, now);
    for u in &outcome.conditions {
        set(&mut s, generation, now, u);
    }
    recorded(&mut s, &outcome.record);
    s.message = Some(summary(&outcome.message)).filter(|m| !m.is_empty());
    let phase = s.phase;
    let not_ready = |s: &mut Status, reason: Reason, message: String| {
        ready(s, generation, now, ConditionStatus::False, reason, message);
    };
    let reconciled = match &outcome.step {
        Step::Advance { to } => {
            advanced(vmm, &mut s, *to, now);
            true
        }
        Step::Fail {
            reason,
            message,
            retriable,
            resume,
        } => {
            let failure = LastFailure {
                phase: *resume,
                reason: *reason,
                message: message.clone(),
                retriable: *retriable,
                time: now.clone(),
                cause: outcome.cause.clone(),
            };
            if failed(vmm, &mut s, failure, now) {
                not_ready(
                    &mut s,
                    Reason::RolledBack,
                    format!("rolled back: {message}"),
                );
            } else {
                not_ready(&mut s, Reason::Failed, format!("{phase} failed: {message}"));
            }
            false
        }
        Step::Hold {
            reason, message, ..
        } => {
            enter(&mut s, held_in(*reason), now);
            not_ready(&mut s, *reason, message.clone());
            true
        }
        Step::Retry { reason, message } => {
            s.retries = s.retries.saturating_add(1);
            not_ready(
                &mut s,
                Reason::TransientError,
                format!("{reason}: {message}"),
            );
            false
        }
        Step::Act(_) | Step::Wait { .. } => {
            not_ready(&mut s, Reason::InProgress, format!("{phase}"));
            true
        }
    };
    if reconciled {
        s.observed_generation = generation;
    }
    s
}

/// What a checkpoint recorded, over the status it found: each part it recorded replaces that
/// part, the rest stays.
fn recorded(s: &mut Status, record: &super::outcome::Record) {
    if let Some(src) = &record.source {
        s.source = Some(Box::new(src.clone()));
    }
    if let Some(d) = &record.disks {
        s.disks = d.clone();
    }
    if let Some(p) = &record.progress {
        s.progress = Some(p.clone());
    }
    if let Some(p) = &record.power_off {
        s.source_power_off = Some(p.clone());
    }
    if let Some(p) = &record.preflight {
        s.preflight = Some(p.clone());
    }
    if let Some(w) = &record.warm {
        s.warm = Some(Box::new(w.clone()));
    }
    if let Some(r) = &record.source_state {
        s.source_state = Some(Box::new(r.clone()));
    }
    if let Some(g) = &record.guest {
        s.guest = Some(Box::new(g.clone()));
    }
    if let Some(h) = &record.health {
        s.health_check = Some(h.clone());
    }
    if let Some(h) = &record.hook {
        // One entry per hook: this attempt's run replaces an earlier attempt's.
        s.hooks.retain(|old| old.point != h.point);
        s.hooks.push(h.clone());
        s.hooks.sort_by_key(|h| h.point);
    }
}

/// A checkpoint's desired state holds: the migration enters `to` (staging recorded on its way
/// to Converting; progress full and Ready on Succeeded).
fn advanced(vmm: &VirtualMachineMigration, s: &mut Status, to: Phase, now: &Time) {
    let generation = vmm.metadata.generation;
    if to == Phase::Converting && s.staging.is_none() {
        s.staging = Some(Box::new(staging_record(vmm, s)));
    }
    enter(s, to, now);
    if to != Phase::Succeeded {
        let phase = format!("{to}");
        ready(
            s,
            generation,
            now,
            ConditionStatus::False,
            Reason::InProgress,
            phase,
        );
        return;
    }
    if let Some(p) = s.progress.as_mut() {
        *p = Progress {
            percent: 100.0,
            bytes_done: p.bytes_total,
            bytes_total: p.bytes_total,
            ..Progress::default()
        };
    }
    let message = "the VM runs in KubeVirt";
    ready(
        s,
        generation,
        now,
        ConditionStatus::True,
        Reason::Succeeded,
        message,
    );
}

/// The migration fails with `failure`; under `restorePowerState: OnCancelOrFailure` a source
/// ferry powered off gets its pending restore. A failed health check under `RollBack` is a
/// rollback instead: `RolledBack`, the target to be stopped whatever the policy, and the source
/// then powered back on when ferry powered it off. Whether it rolled back.
fn failed(vmm: &VirtualMachineMigration, s: &mut Status, failure: LastFailure, now: &Time) -> bool {
    // A failed postCutover hook is a failed check of the migrated VM, as its health check is.
    let checked = failure.reason == Reason::HealthCheckFailed
        || (failure.reason == Reason::HookFailed && failure.phase == Phase::Validating);
    let rollback = checked && super::health_gate::rolls_back(vmm);
    s.last_failure = Some(failure);
    if rollback {
        enter(s, Phase::RolledBack, now);
        s.source_power_restore = Some(Box::new(power::requested_for_rollback(now)));
        return true;
    }
    enter(s, Phase::Failed, now);
    if intents::restores_on_failure(vmm) {
        s.source_power_restore = power::requested(vmm, now).map(Box::new);
    }
    false
}

/// The phase a hold for `reason` leaves the migration in: `Queued` while it waits for a copy
/// slot, else (preflight) `Pending`. Pure.
pub fn held_in(reason: Reason) -> Phase {
    match reason {
        Reason::HostCopyLimit | Reason::DatastoreCopyLimit => Phase::Queued,
        _ => Phase::Pending,
    }
}

/// Whether `vmm` waits in `Queued` for a copy slot ([`crate::copy_slots`]). Pure.
pub fn waits_for_copy_slot(vmm: &VirtualMachineMigration) -> bool {
    vmm.phase() == Phase::Queued
        && vmm.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == ConditionType::Ready
                    && matches!(c.reason, Reason::HostCopyLimit | Reason::DatastoreCopyLimit)
            })
        })
}

/// The status `held` (preflight sent the migration back to Pending, or a copy limit to Queued)
/// with the phase history, start time and attempts `before` had when it was not started (no
/// status yet counts as Pending): nothing started. Pure.
pub fn held_as_before(before: Option<&Status>, mut held: Status) -> Status {
    let fresh = Status::default();
    let b = before.unwrap_or(&fresh);
    if matches!(b.phase, Phase::Pending | Phase::Queued) {
        held.history = b.history.clone();
        held.started_at = b.started_at.clone();
        held.attempts = b.attempts;
        held.completed_at = b.completed_at.clone();
    }
    held
}

/// A migration ferry would start or retry, held while its admission policies are not in force
/// ([`crate::admission_guard`]): the phase kept, `Ready` False with `PoliciesNotInForce` and
/// what is missing. `None` when the status already says so. Pure.
pub fn held_for_policies(vmm: &VirtualMachineMigration, why: &str, now: &Time) -> Option<Status> {
    let message = crate::admission_guard::held_back(why);
    let mut s = initial(vmm, now);
    let already = s
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready)
        .is_some_and(|c| c.reason == Reason::PoliciesNotInForce && c.message == message);
    if already {
        return None;
    }
    ready(
        &mut s,
        vmm.metadata.generation,
        now,
        ConditionStatus::False,
        Reason::PoliciesNotInForce,
        message.clone(),
    );
    s.message = Some(summary(&message));
    Some(s)
}

/// The status once `intent` was carried out (its cleanup done); `None` for
/// [`Intent::Proceed`], whose status the checkpoint decides, and [`Intent::RestorePower`], whose
/// status is [`after_power`]'s. Pure.
///
/// # Guarantees
/// * `Start` enters Preparing (first attempt); `Held` enters Queued; `Cancel` enters Cancelled,
///   marking the unfinished checkpoint's conditions; `Retry` enters the resumed checkpoint with
///   one more attempt, the token taken, the conditions from there on reset and the last
///   power-on of the source forgotten (`lastFailure` is kept); `AckRetry` only takes the token;
///   `Paused` and `Settled` change no phase.
/// * `observedGeneration` moves to the spec's generation, except on a settled `Failed` migration
///   (its failure did not reconcile that generation).
pub fn after_intent(vmm: &VirtualMachineMigration, intent: &Intent, now: &Time) -> Option<Status> {
    let generation = vmm.metadata.generation;
    let mut s = initial(vmm, now);
    let said: Option<Said> = match intent {
        Intent::Proceed | Intent::RestorePower => return None,
        Intent::Start => {
            s.attempts = s.attempts.max(1);
            enter(&mut s, Phase::Preparing, now);
            Some(Said::not_ready(
                Reason::InProgress,
                "Preparing".to_owned(),
                "looking for the source VM".to_owned(),
            ))
        }
        Intent::Held => {
            enter(&mut s, Phase::Queued, now);
            let held = format!(
                "queued by MigrationWave {}",
                vmm.wave().unwrap_or("its wave")
            );
            Some(Said::not_ready(Reason::HeldByWave, held.clone(), held))
        }
        Intent::Paused => Some(Said::not_ready(
            Reason::Paused,
            "spec.paused is true; no new step is taken".to_owned(),
            format!("paused in {}", s.phase),
        )),
        Intent::Cancel { .. } => Some(cancelled(vmm, &mut s, now)),
        Intent::Retry { resume, .. } => Some(retried(vmm, &mut s, *resume, now)),
        Intent::AckRetry => {
            s.retry_observed = vmm.spec.retry;
            None
        }
        Intent::Settled => None,
    };
    if let Some(Said {
        status,
        reason,
        ready_message,
        message,
    }) = said
    {
        ready(&mut s, generation, now, status, reason, ready_message);
        s.message = Some(summary(&message));
    }
    if !(matches!(intent, Intent::Settled) && s.phase == Phase::Failed) {
        s.observed_generation = generation;
    }
    Some(s)
}

/// What an intent says: the Ready condition's status, reason and message, and the status
/// message.
struct Said {
    status: ConditionStatus,
    reason: Reason,
    ready_message: String,
    message: String,
}

impl Said {
    fn not_ready(reason: Reason, ready_message: String, message: String) -> Self {
        Self {
            status: ConditionStatus::False,
            reason,
            ready_message,
            message,
        }
    }
}

/// Cancelled: every condition of the phase it was in that had not come true says so.
fn cancelled(vmm: &VirtualMachineMigration, s: &mut Status, now: &Time) -> Said {
    let from = s.phase;
    for t in conditions_of(from) {
        if condition::condition_status(&s.conditions, *t) != ConditionStatus::True {
            condition::set_condition(
                &mut s.conditions,
                *t,
                ConditionStatus::False,
                Reason::Cancelled,
                "cancelled",
                vmm.metadata.generation,
                now,
            );
        }
    }
    enter(s, Phase::Cancelled, now);
    s.progress = None;
    Said::not_ready(
        Reason::Cancelled,
        format!("cancelled in {from}; partial results removed"),
        format!("cancelled in {from}"),
    )
}

/// A new attempt from `resume`: the conditions from there on start over, and what the ending
/// attempt recorded of the source and staging goes when it starts over from Preparing.
fn retried(vmm: &VirtualMachineMigration, s: &mut Status, resume: Phase, now: &Time) -> Said {
    // A warm copy taken again takes a snapshot of its own (the old one was removed).
    if matches!(resume, Phase::Preparing | Phase::Converting) {
        s.warm = None;
    }
    s.attempts = s.attempts.max(1) + 1;
    s.retry_observed = vmm.spec.retry;
    // Every attempt's guest is probed afresh.
    s.health_check = None;
    conditions_start_over(vmm, s, resume, now);
    if resume == Phase::Preparing {
        starts_over(s);
    }
    // A new attempt: the source is powered off anew, and back on only for its own
    // cancel or failure.
    s.source_power_restore = None;
    s.completed_at = None;
    enter(s, resume, now);
    Said::not_ready(
        Reason::RetryRequested,
        format!("attempt {} from {resume}", s.attempts),
        format!("retrying from {resume} (attempt {})", s.attempts),
    )
}

/// The conditions of `resume` and every checkpoint after it back to Unknown (those the
/// migration has: CutOver only when warm, GuestConverted only when it converts).
fn conditions_start_over(vmm: &VirtualMachineMigration, s: &mut Status, resume: Phase, now: &Time) {
    let from = resume.checkpoint_index().unwrap_or(0);
    for (i, p) in Phase::CHECKPOINTS.iter().enumerate().skip(from) {
        let (reason, msg) = if i == from {
            (Reason::RetryRequested, format!("retrying from {resume}"))
        } else {
            (Reason::NotStarted, String::new())
        };
        for t in conditions_of(*p) {
            if *t == ConditionType::CutOver && !super::warm::is_warm(vmm) {
                continue;
            }
            if *t == ConditionType::GuestConverted && !vmm.spec.conversion.guest.converts() {
                continue;
            }
            condition::set_condition(
                &mut s.conditions,
                *t,
                ConditionStatus::Unknown,
                reason,
                msg.clone(),
                vmm.metadata.generation,
                now,
            );
        }
    }
}

/// A retry from Preparing: the ending attempt's outage is kept, its disks, staging and
/// power-off record go.
fn starts_over(s: &mut Status) {
    // The ending attempt's outage outlives its power-off record, which the new attempt
    // replaces: the report adds up every attempt's downtime.
    if let Some(outage) = SourceOutage::of_attempt(
        s.attempts - 1,
        s.source_power_off.as_ref(),
        s.source_power_restore.as_deref(),
    ) {
        SourceOutage::keep(&mut s.earlier_outages, outage);
    }
    s.disks.clear();
    s.progress = None;
    // Its staged objects were removed (by the record): the new attempt stages on what the spec
    // says now.
    s.staging = None;
    // A new attempt powers the source off anew (it may have been powered back on).
    s.source_power_off = None;
}

/// The status of a cancel waiting for the power rule (the target still stopping): the phase
/// stays, `Ready` says `Cancelling` and what ferry waits for. Pure.
pub fn cancelling(
    vmm: &VirtualMachineMigration,
    record: Option<&SourcePowerRestore>,
    now: &Time,
) -> Status {
    let generation = vmm.metadata.generation;
    let mut s = initial(vmm, now);
    let what = record
        .and_then(|r| r.message.clone())
        .unwrap_or_else(|| "stopping the target".to_owned());
    let phase = s.phase;
    ready(
        &mut s,
        generation,
        now,
        ConditionStatus::False,
        Reason::Cancelling,
        format!("cancelling in {phase}: {what}"),
    );
    s.source_power_restore = record.cloned().map(Box::new);
    s.message = Some(summary(&format!("cancelling: {what}")));
    s.observed_generation = generation;
    s
}

/// The status of a migration being deleted whose cleanup cannot remove its staging: Ready says
/// `CleanupBlocked`, why, and the way out. The phase stays (the board shows it being deleted).
/// Pure.
pub fn cleanup_blocked(vmm: &VirtualMachineMigration, why: &str, now: &Time) -> Status {
    let generation = vmm.metadata.generation;
    let mut s = initial(vmm, now);
    let message = format!(
        "deleting: staging cannot be cleaned ({why}); retrying with backoff — to leave the \
         staged objects behind, annotate the migration {}={}",
        names::ABANDON_CLEANUP_ANNOTATION,
        names::ABANDON_CLEANUP_VALUE
    );
    ready(
        &mut s,
        generation,
        now,
        ConditionStatus::False,
        Reason::CleanupBlocked,
        message.clone(),
    );
    s.message = Some(summary(&message));
    s
}

/// The status after a step of the power rule outside a cancel: a failure's pending power-on, a
/// delete. Pure (see [`with_power`]).
pub fn after_power(
    vmm: &VirtualMachineMigration,
    record: Option<&SourcePowerRestore>,
    now: &Time,
) -> Status {
    let mut s = initial(vmm, now);
    with_power(&mut s, vmm, record, now);
    s
}

/// Records the power rule's `record` in `s` (the status of `vmm` after its step). Pure.
///
/// # Guarantees
/// * `status.sourcePowerRestore` becomes `record` (nothing changes without one); `message` tells
///   what changed, when it changed.
/// * A power-on that gave up (`TargetStillRunning`) ends the migration with that reason:
///   `lastFailure` (at the checkpoint that failed, or was cancelled) and `Ready` say so, once.
pub fn with_power(
    s: &mut Status,
    vmm: &VirtualMachineMigration,
    record: Option<&SourcePowerRestore>,
    now: &Time,
) {
    let Some(r) = record else { return };
    let before = power::record(vmm);
    s.source_power_restore = Some(Box::new(r.clone()));
    let what = r.message.clone().unwrap_or_default();
    if before != Some(r) {
        s.message = Some(summary(&what));
    }
    let gave_up = r.result == Some(PowerRestoreResult::TargetStillRunning);
    let said = s
        .last_failure
        .as_ref()
        .is_some_and(|f| f.reason == Reason::TargetStillRunning);
    if !gave_up || said {
        return;
    }
    let phase = match vmm.phase().stage() {
        Stage::Failed | Stage::Cancelled => s.last_failure.as_ref().map(|f| f.phase),
        Stage::InFlight => Some(vmm.phase()),
        Stage::Pending | Stage::Queued | Stage::Succeeded => None,
    }
    .filter(|p| p.is_checkpoint())
    .unwrap_or(Phase::Preparing);
    let earlier = s
        .last_failure
        .as_ref()
        .filter(|_| vmm.phase().stage() == Stage::Failed)
        .map(|f| format!(" (the migration had failed in {}: {})", f.phase, f.reason))
        .unwrap_or_default();
    s.last_failure = Some(LastFailure {
        phase,
        reason: Reason::TargetStillRunning,
        message: format!("{what}{earlier}"),
        retriable: false,
        time: now.clone(),
        cause: None,
    });
    ready(
        s,
        vmm.metadata.generation,
        now,
        ConditionStatus::False,
        Reason::TargetStillRunning,
        what,
    );
}

/// The status without what only moves with the copy: progress, the summary line, each disk's
/// bytes, percent and rate.
fn without_progress(s: &Status) -> Status {
    let mut s = s.clone();
    s.progress = None;
    s.message = None;
    for d in &mut s.disks {
        d.bytes_done = None;
        d.percent = None;
        d.rate_bytes_per_second = None;
    }
    s
}

/// The status without its details as well: the children's sub-states copied in (a
/// DataVolume's phase) and the conditions' messages (a condition whose status or reason
/// changes is not a detail).
fn steady_part(s: &Status) -> Status {
    let mut s = without_progress(s);
    for d in &mut s.disks {
        d.import_phase = None;
    }
    for c in &mut s.conditions {
        c.message.clear();
    }
    s
}

fn percent(s: &Status) -> f64 {
    s.progress.as_ref().map_or(0.0, |p| p.percent)
}

/// Whether `new` is worth a status write over `old`, `since_last` after this controller last
/// wrote the object's status (`None`: never) and with at most one write of details per
/// `interval`. Pure.
///
/// # Guarantees
/// * No write when nothing changed.
/// * Anything steady (phase, conditions' status or reason, records, children, failures) is
///   written at once.
/// * Details (the conditions' messages, the children's sub-states) and progress (when at least 1
///   point of percent moved, or 100 was reached) are written at most once per `interval`; when
///   one is held back the answer says when to look again. A progress move under a point is not
///   worth a write by itself.
pub fn worth_writing(
    old: Option<&Status>,
    new: &Status,
    since_last: Option<Duration>,
    interval: Duration,
) -> Worth {
    let Some(old) = old else { return Worth::Now };
    if old == new {
        return Worth::No;
    }
    if steady_part(old) != steady_part(new) {
        return Worth::Now;
    }
    let moved = (percent(new) - percent(old)).abs() >= 1.0
        || (percent(new) >= 100.0 && percent(old) < 100.0);
    if !moved && without_progress(old) == without_progress(new) {
        return Worth::No;
    }
    Worth::once_per(interval, since_last)
}

/// Whether every one of the eight conditions is present exactly once.
pub fn has_all_conditions(conds: &[Condition]) -> bool {
    // CutOver only on warm migrations, GuestConverted only on those converting their guest:
    // at most once.
    ConditionType::ALL.iter().all(|t| {
        let n = conds.iter().filter(|c| c.type_ == *t).count();
        n == 1 || (matches!(t, ConditionType::CutOver | ConditionType::GuestConverted) && n == 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_the_first_line_and_fits_the_crd() {
        assert_eq!(summary("short\nand more"), "short");
        let long = "é".repeat(1000);
        let s = summary(&long);
        assert!(s.len() <= SUMMARY_MAX && s.ends_with('…'), "{}", s.len());
        assert_eq!(summary(""), "");
    }
    use crate::reconcile::cleanup::Cleanup;
    use crate::reconcile::outcome::Outcome;

    fn started(vmm: &VirtualMachineMigration, now: &Time) -> Status {
        after_intent(vmm, &Intent::Start, now).unwrap()
    }

    fn retried(vmm: &VirtualMachineMigration, resume: Phase, now: &Time) -> Status {
        let intent = Intent::Retry {
            resume,
            cleanup: vec![],
        };
        after_intent(vmm, &intent, now).unwrap()
    }

    fn cancelled(vmm: &VirtualMachineMigration, now: &Time) -> Status {
        let intent = Intent::Cancel {
            cleanup: vec![Cleanup::Job],
        };
        after_intent(vmm, &intent, now).unwrap()
    }
    use ConditionStatus::*;
    use ferry_crds::fixtures::{migration, t0, t1, ts};

    fn status_of(vmm: &VirtualMachineMigration, t: ConditionType) -> (ConditionStatus, Reason) {
        let c = vmm.condition(t).unwrap();
        (c.status, c.reason)
    }

    fn with_status(mut vmm: VirtualMachineMigration, s: Status) -> VirtualMachineMigration {
        vmm.status = Some(s);
        vmm
    }

    #[test]
    fn the_first_status_has_all_eight_conditions_and_enters_preparing() {
        let vmm = migration("m");
        let s = started(&vmm, &t0());
        assert!(has_all_conditions(&s.conditions));
        assert_eq!(s.phase, Phase::Preparing);
        assert_eq!((s.attempts, s.started_at.clone()), (1, Some(t0())));
        assert_eq!(s.history.len(), 1);
        assert_eq!(s.observed_generation, Some(1));
        let vmm = with_status(vmm, s);
        assert_eq!(
            status_of(&vmm, ConditionType::Ready),
            (False, Reason::InProgress)
        );
        assert_eq!(
            status_of(&vmm, ConditionType::DiskImported),
            (Unknown, Reason::NotStarted)
        );
    }

    #[test]
    fn a_retry_that_starts_over_keeps_the_ending_attempts_outage() {
        let mut s = started(&migration("m"), &t0());
        s.phase = Phase::Failed;
        s.source_power_off = Some(ferry_crds::SourcePowerOff {
            shutdown_guest_at: Some(ts(10)),
            hard_power_off_at: Some(ts(40)),
        });
        s.source_power_restore = Some(Box::new(SourcePowerRestore {
            requested_at: ts(90),
            target_stopping_since: None,
            result: Some(PowerRestoreResult::PoweredOn),
            finished_at: Some(ts(100)),
            message: None,
        }));
        let failed = with_status(migration("m"), s);
        // Resumed where it failed: the source stayed off and its power-off record stays.
        let resumed = retried(&failed, Phase::Importing, &ts(200));
        assert!(resumed.earlier_outages.is_empty());
        assert!(resumed.source_power_off.is_some());
        // Started over: the record goes, the outage is kept with the attempt it belonged to.
        let over = retried(&failed, Phase::Preparing, &ts(200));
        assert_eq!(over.source_power_off, None);
        assert_eq!(
            over.earlier_outages,
            vec![SourceOutage {
                attempt: 1,
                from: ts(10),
                restored_at: Some(ts(100)),
            }]
        );
        // Started over again with the source found off (no power-off of its own): nothing is
        // added; the first outage goes on.
        let mut again = over.clone();
        again.source_power_off = Some(Default::default());
        again.source_power_restore = None;
        let again = retried(
            &with_status(migration("m"), again),
            Phase::Preparing,
            &ts(300),
        );
        assert_eq!(again.earlier_outages, over.earlier_outages);
        assert_eq!(again.attempts, 3);
    }

    #[test]
    fn advancing_records_history_and_moves_transition_time_only_on_change() {
        let vmm = with_status(migration("m"), started(&migration("m"), &t0()));
        let o = Outcome::<()>::new(
            Step::Advance {
                to: Phase::Converting,
            },
            "ok",
        )
        .with(
            ConditionType::SourceDiscovered,
            True,
            Reason::Discovered,
            "",
        )
        .with(ConditionType::Validated, True, Reason::Validated, "");
        let s = after_outcome(&vmm, &o, &t1());
        assert_eq!(s.phase, Phase::Converting);
        assert_eq!(
            s.history.iter().map(|h| h.phase).collect::<Vec<_>>(),
            [Phase::Preparing, Phase::Converting]
        );
        assert_eq!(s.history[0].left_at, Some(t1()));
        let ready = s
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Ready)
            .unwrap();
        assert_eq!(ready.last_transition_time, t0(), "Ready stayed False");
        let sd = s
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::SourceDiscovered)
            .unwrap();
        assert_eq!(sd.last_transition_time, t1());
        // the same outcome again changes nothing
        let again = after_outcome(
            &with_status(migration("m"), s.clone()),
            &Outcome::<()>::new(
                Step::Wait {
                    requeue: Duration::ZERO,
                },
                "ok",
            ),
            &ts(120),
        );
        assert_eq!(again.history, s.history);
    }

    #[test]
    fn failing_records_last_failure_and_a_terminal_time() {
        let vmm = with_status(migration("m"), started(&migration("m"), &t0()))
            .with_phase(Phase::Importing);
        let o = Outcome::<()>::new(
            Step::Fail {
                reason: Reason::ImportFailed,
                message: "boom".into(),
                retriable: true,
                resume: Phase::Importing,
            },
            "boom",
        )
        .with(
            ConditionType::DiskImported,
            False,
            Reason::ImportFailed,
            "boom",
        );
        let s = after_outcome(&vmm, &o, &t1());
        assert_eq!(s.phase, Phase::Failed);
        assert_eq!(s.completed_at, Some(t1()));
        let f = s.last_failure.clone().unwrap();
        assert_eq!(
            (f.phase, f.reason, f.retriable),
            (Phase::Importing, Reason::ImportFailed, true)
        );
        let vmm = with_status(migration("m").with_retry(1), s);
        let r = retried(&vmm, Phase::Importing, &ts(120));
        assert_eq!(
            (r.phase, r.attempts, r.retry_observed),
            (Phase::Importing, 2, 1)
        );
        assert_eq!(r.completed_at, None);
        assert!(r.last_failure.is_some(), "kept for reference");
        let vmm = with_status(migration("m"), r);
        assert_eq!(
            status_of(&vmm, ConditionType::DiskImported),
            (Unknown, Reason::RetryRequested)
        );
        assert_eq!(
            status_of(&vmm, ConditionType::Ready),
            (False, Reason::RetryRequested)
        );
    }

    #[test]
    fn cancelling_marks_the_unfinished_checkpoint() {
        let vmm = with_status(migration("m"), started(&migration("m"), &t0()))
            .with_phase(Phase::Importing);
        let vmm = with_status(migration("m"), cancelled(&vmm, &t1()));
        assert_eq!(vmm.phase(), Phase::Cancelled);
        assert_eq!(
            status_of(&vmm, ConditionType::DiskImported),
            (False, Reason::Cancelled)
        );
        assert_eq!(
            status_of(&vmm, ConditionType::Ready),
            (False, Reason::Cancelled)
        );
    }

    const INTERVAL: Duration = Duration::from_secs(2);

    fn writes(old: Option<&Status>, new: &Status, since_last: Option<Duration>) -> bool {
        worth_writing(old, new, since_last, INTERVAL) == Worth::Now
    }

    #[test]
    fn details_wait_for_the_interval_and_say_when_to_look_again() {
        let base = started(&migration("m"), &t0());
        let mut a = base.clone();
        a.disks = vec![ferry_crds::DiskStatus {
            import_phase: Some("ImportScheduled".into()),
            ..ferry_crds::DiskStatus::default()
        }];
        let mut b = a.clone();
        b.disks[0].import_phase = Some("ImportInProgress".into());
        let one = Some(Duration::from_millis(500));
        assert_eq!(
            worth_writing(Some(&a), &b, one, INTERVAL),
            Worth::Later(Duration::from_millis(1500))
        );
        assert_eq!(
            worth_writing(Some(&a), &b, Some(INTERVAL), INTERVAL),
            Worth::Now
        );
        // A condition's message is a detail; its reason is not.
        let mut c = a.clone();
        c.conditions[0].message = "VirtualMachineInstance is Scheduling".into();
        assert!(matches!(
            worth_writing(Some(&a), &c, one, INTERVAL),
            Worth::Later(_)
        ));
        c.conditions[0].reason = Reason::TransientError;
        assert_eq!(worth_writing(Some(&a), &c, one, INTERVAL), Worth::Now);
        // A record of children is never held back.
        let mut d = a.clone();
        d.children.push(ferry_crds::ChildRecord {
            kind: "Job".into(),
            name: "m-convert".into(),
            uid: "u".into(),
            attempt: 1,
            released: false,
        });
        assert_eq!(worth_writing(Some(&a), &d, one, INTERVAL), Worth::Now);
    }

    #[test]
    fn progress_writes_are_throttled_but_real_changes_are_not() {
        let base = started(&migration("m"), &t0());
        let mut a = base.clone();
        a.progress = Some(Progress {
            percent: 10.0,
            ..Progress::default()
        });
        let mut b = a.clone();
        b.progress = Some(Progress {
            percent: 10.5,
            ..Progress::default()
        });
        b.message = Some("importing 10.5%".into());
        assert!(!writes(Some(&a), &a, None), "no change, no write");
        assert!(!writes(Some(&a), &b, None), "half a point is not worth it");
        let mut c = a.clone();
        c.progress = Some(Progress {
            percent: 12.0,
            ..Progress::default()
        });
        assert!(writes(Some(&a), &c, Some(Duration::from_secs(3))));
        assert!(
            !writes(Some(&a), &c, Some(Duration::from_secs(1))),
            "too soon"
        );
        assert!(writes(Some(&a), &c, None), "first progress write");
        let mut d = a.clone();
        d.phase = Phase::Converting;
        assert!(
            writes(Some(&a), &d, Some(Duration::ZERO)),
            "a phase change is always written"
        );
        assert!(writes(None, &a, Some(Duration::ZERO)));
    }

    #[test]
    fn applying_the_same_outcome_twice_changes_nothing_the_second_time() {
        // (A failure is applied once: the next reconcile of a Failed migration is settled.)
        let steps = [
            Step::Wait {
                requeue: Duration::ZERO,
            },
            Step::Act(vec![()]),
            Step::Advance {
                to: Phase::Importing,
            },
        ];
        for phase in Phase::CHECKPOINTS {
            for step in &steps {
                let vmm =
                    with_status(migration("m"), started(&migration("m"), &t0())).with_phase(phase);
                let o = Outcome::<()>::new(step.clone(), "m").with(
                    ConditionType::DiskConverted,
                    Unknown,
                    Reason::InProgress,
                    "c",
                );
                let once = after_outcome(&vmm, &o, &t1());
                let twice = after_outcome(&with_status(migration("m"), once.clone()), &o, &ts(300));
                assert_eq!(once, twice, "{phase} {step:?}");
                assert!(
                    !writes(Some(&once), &twice, None),
                    "{phase} {step:?}: no second write"
                );
            }
        }
    }

    #[test]
    fn transient_retries_are_counted_in_the_status_and_reset_by_a_phase_change() {
        let vmm = with_status(migration("m"), started(&migration("m"), &t0()));
        let retry = Outcome::<()>::new(
            Step::Retry {
                reason: Reason::StagingUnavailable,
                message: "down".into(),
            },
            "down",
        );
        let s1 = after_outcome(&vmm, &retry, &t1());
        let s2 = after_outcome(&with_status(migration("m"), s1.clone()), &retry, &ts(120));
        assert_eq!((s1.retries, s2.retries), (1, 2));
        let moved = after_outcome(
            &with_status(migration("m"), s2),
            &Outcome::<()>::new(
                Step::Advance {
                    to: Phase::Converting,
                },
                "",
            ),
            &ts(180),
        );
        assert_eq!(moved.retries, 0);
    }

    #[test]
    fn observed_generation_moves_only_when_the_generation_was_reconciled() {
        let mut vmm = with_status(migration("m"), started(&migration("m"), &t0()))
            .with_phase(Phase::Importing);
        vmm.metadata.generation = Some(2);
        let wait = Outcome::<()>::new(
            Step::Wait {
                requeue: Duration::ZERO,
            },
            "",
        );
        assert_eq!(
            after_outcome(&vmm, &wait, &t1()).observed_generation,
            Some(2)
        );
        let retry = Outcome::<()>::new(
            Step::Retry {
                reason: Reason::StagingUnavailable,
                message: "down".into(),
            },
            "",
        );
        assert_eq!(
            after_outcome(&vmm, &retry, &t1()).observed_generation,
            Some(1),
            "a transient failure"
        );
        let fail = Outcome::<()>::new(
            Step::Fail {
                reason: Reason::ImportFailed,
                message: "x".into(),
                retriable: true,
                resume: Phase::Importing,
            },
            "",
        );
        let failed = after_outcome(&vmm, &fail, &t1());
        assert_eq!(failed.observed_generation, Some(1), "a failure");
        let mut settled = with_status(migration("m"), failed);
        settled.metadata.generation = Some(3);
        assert_eq!(
            after_intent(&settled, &Intent::Settled, &t1())
                .unwrap()
                .observed_generation,
            Some(1),
            "settling a failure does not claim the new generation"
        );
    }

    #[test]
    fn intents_without_a_phase_change_keep_the_phase_and_take_what_they_must() {
        let vmm = with_status(migration("m"), started(&migration("m"), &t0()))
            .with_phase(Phase::Importing);
        assert_eq!(after_intent(&vmm, &Intent::Proceed, &t1()), None);
        let paused = after_intent(&vmm.clone().paused(), &Intent::Paused, &t1()).unwrap();
        assert_eq!(
            (paused.phase, paused.message.as_deref()),
            (Phase::Importing, Some("paused in Importing"))
        );
        let acked = after_intent(&vmm.clone().with_retry(4), &Intent::AckRetry, &t1()).unwrap();
        assert_eq!((acked.phase, acked.retry_observed), (Phase::Importing, 4));
        let held = after_intent(&migration("m").in_wave("w"), &Intent::Held, &t1()).unwrap();
        assert_eq!(
            (held.phase, held.message.as_deref()),
            (Phase::Queued, Some("queued by MigrationWave w"))
        );
    }

    fn on_at_start(mut vmm: VirtualMachineMigration) -> VirtualMachineMigration {
        vmm.status
            .get_or_insert_with(Default::default)
            .source
            .get_or_insert_with(Default::default)
            .power_state = Some(ferry_crds::PowerState::PoweredOn);
        vmm
    }

    fn restore_record(result: Option<PowerRestoreResult>, message: &str) -> SourcePowerRestore {
        SourcePowerRestore {
            requested_at: t0(),
            target_stopping_since: Some(t0()),
            finished_at: result.map(|_| t1()),
            result,
            message: Some(message.into()),
        }
    }

    #[test]
    fn a_failure_under_on_cancel_or_failure_leaves_the_power_on_pending() {
        let fail = Outcome::<()>::new(
            Step::Fail {
                reason: Reason::GuestAgentTimeout,
                message: "no agent".into(),
                retriable: true,
                resume: Phase::Validating,
            },
            "no agent",
        );
        let mut vmm = on_at_start(
            with_status(migration("m"), started(&migration("m"), &t0()))
                .with_phase(Phase::Validating),
        );
        let s = after_outcome(&vmm, &fail, &t1());
        assert_eq!(s.phase, Phase::Failed);
        assert_eq!(s.source_power_restore, None, "OnCancel: nothing on failure");
        vmm.spec.source.power.restore_power_state =
            ferry_crds::RestorePowerState::OnCancelOrFailure;
        let s = after_outcome(&vmm, &fail, &t1());
        assert_eq!(s.phase, Phase::Failed, "failed at once");
        let r = s.source_power_restore.clone().unwrap();
        assert_eq!(
            (r.requested_at, r.result),
            (t1(), None),
            "the power-on pending"
        );
        // A retry forgets it: the new attempt powers the source off anew.
        let retried = super::after_intent(
            &with_status(vmm.clone().with_retry(1), s),
            &Intent::Retry {
                resume: Phase::Preparing,
                cleanup: vec![],
            },
            &ts(120),
        )
        .unwrap();
        assert_eq!(retried.source_power_restore, None);
    }

    #[test]
    fn a_cancel_waiting_on_the_target_says_so_and_keeps_its_phase() {
        let vmm = with_status(migration("m"), started(&migration("m"), &t0()))
            .with_phase(Phase::Validating)
            .cancelled();
        let r = restore_record(None, "waiting for VirtualMachineInstance ns/x to be gone");
        let s = cancelling(&vmm, Some(&r), &t1());
        assert_eq!(s.phase, Phase::Validating);
        assert_eq!(s.source_power_restore, Some(Box::new(r.clone())));
        let vmm = with_status(vmm, s);
        let (status, reason) = status_of(&vmm, ConditionType::Ready);
        assert_eq!((status, reason), (False, Reason::Cancelling));
        assert!(
            vmm.condition(ConditionType::Ready)
                .unwrap()
                .message
                .contains("VirtualMachineInstance ns/x")
        );
        // The same wait again is no write.
        let again = cancelling(&vmm, Some(&r), &ts(90));
        assert!(!writes(vmm.status.as_ref(), &again, None));
    }

    #[test]
    fn giving_up_ends_the_migration_with_target_still_running_once() {
        let failed = {
            let mut vmm = with_status(migration("m"), started(&migration("m"), &t0()))
                .with_phase(Phase::Failed);
            if let Some(s) = vmm.status.as_mut() {
                s.last_failure = Some(LastFailure {
                    phase: Phase::Validating,
                    reason: Reason::GuestAgentTimeout,
                    message: "no agent".into(),
                    retriable: true,
                    time: t0(),
                    cause: None,
                });
                s.source_power_restore = Some(Box::new(restore_record(None, "waiting")));
            }
            vmm
        };
        let gave_up = restore_record(
            Some(PowerRestoreResult::TargetStillRunning),
            "VirtualMachineInstance ns/x is still there",
        );
        let s = after_power(&failed, Some(&gave_up), &t1());
        let f = s.last_failure.clone().unwrap();
        assert_eq!(
            (f.phase, f.reason, f.retriable),
            (Phase::Validating, Reason::TargetStillRunning, false)
        );
        assert!(
            f.message.contains("still there") && f.message.contains("GuestAgentTimeout"),
            "{}",
            f.message
        );
        let settled = with_status(migration("m"), s.clone());
        assert_eq!(
            status_of(&settled, ConditionType::Ready),
            (False, Reason::TargetStillRunning)
        );
        let again = after_power(&settled, Some(&gave_up), &ts(300));
        assert!(
            !writes(Some(&s), &again, None),
            "said once: no new time on lastFailure"
        );
        // A cancel that gave up ends Cancelled with the reason, at the phase it was in.
        let starting = with_status(migration("m"), started(&migration("m"), &t0()))
            .with_phase(Phase::Starting)
            .cancelled();
        let mut s = super::after_intent(
            &starting,
            &Intent::Cancel {
                cleanup: vec![Cleanup::Vm],
            },
            &t1(),
        )
        .unwrap();
        with_power(&mut s, &starting, Some(&gave_up), &t1());
        assert_eq!(s.phase, Phase::Cancelled);
        assert_eq!(
            s.last_failure.as_ref().map(|f| (f.phase, f.reason)),
            Some((Phase::Starting, Reason::TargetStillRunning))
        );
        let done = with_status(migration("m"), s);
        assert_eq!(
            status_of(&done, ConditionType::Ready),
            (False, Reason::TargetStillRunning)
        );
    }

    #[test]
    fn a_power_on_that_ended_well_is_recorded_without_a_failure() {
        let vmm =
            with_status(migration("m"), started(&migration("m"), &t0())).with_phase(Phase::Failed);
        let on = restore_record(Some(PowerRestoreResult::PoweredOn), "powered back on");
        let s = after_power(&vmm, Some(&on), &t1());
        assert_eq!(s.source_power_restore, Some(Box::new(on)));
        assert_eq!(s.last_failure, None);
        assert_eq!(s.message.as_deref(), Some("powered back on"));
        assert_eq!(after_power(&vmm, None, &t1()).source_power_restore, None);
    }

    #[test]
    fn a_blocked_cleanup_says_why_and_the_way_out_and_keeps_the_phase() {
        let vmm = migration("m").with_phase(Phase::Importing);
        let s = cleanup_blocked(&vmm, "S3 endpoint unreachable", &t1());
        assert_eq!(s.phase, Phase::Importing);
        let ready = condition::get_condition(&s.conditions, ConditionType::Ready).unwrap();
        assert_eq!(ready.reason, Reason::CleanupBlocked);
        assert_eq!(ready.status, ConditionStatus::False);
        assert!(ready.message.contains("S3 endpoint unreachable"));
        assert!(ready.message.contains(names::ABANDON_CLEANUP_ANNOTATION));
        assert_eq!(s.message.as_deref(), Some(ready.message.as_str()));
    }

    #[test]
    fn a_hold_leaves_a_pending_migrations_history_as_it_was() {
        let vmm = migration("m");
        let started = after_intent(&vmm, &Intent::Start, &t0()).unwrap();
        assert_eq!(started.phase, Phase::Preparing);
        let hold: Outcome<()> = Outcome::new(
            Step::Hold {
                reason: Reason::PreflightFailed,
                message: "held".into(),
                recheck: std::time::Duration::from_secs(600),
            },
            "held",
        );
        let mut looked = vmm.clone();
        looked.status = Some(started);
        let held = after_outcome(&looked, &hold, &t0());
        assert_eq!(held.phase, Phase::Pending);
        let ready = held
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Ready)
            .unwrap();
        assert_eq!(ready.reason, Reason::PreflightFailed);
        // The next look, from Pending: Start, Preparing, held again.
        let mut pending = vmm.clone();
        pending.status = Some(held.clone());
        let mut again = pending.clone();
        again.status = after_intent(&pending, &Intent::Start, &t1());
        let held_again =
            held_as_before(pending.status.as_ref(), after_outcome(&again, &hold, &t1()));
        assert_eq!(held_again.history, held.history, "no entry per look");
        assert_eq!(held_again.phase, Phase::Pending);
        let first = held_as_before(None, held);
        assert_eq!(
            (first.history.len(), first.started_at, first.attempts),
            (0, None, 0),
            "held at its first look: never started"
        );
    }
}
