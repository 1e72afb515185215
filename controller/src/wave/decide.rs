//! The wave's decision, pure: which child migrations to create, which held ones to release
//! within `maxInFlight`, which to cancel or retry, and the aggregated status.

use ferry_crds::{
    MigrationMode, MigrationWave, MigrationWaveStatus, Phase, Reason, VirtualMachineMigration,
    WaveCollision, WaveRefusal, WaveVm,
};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::members::{self, Listed, Member};
pub use super::slots::{cutover_due, occupies_slot, waits_for_cutover};
use super::window::{self, Gate};
use crate::context::Given;
use crate::events::Note;
use crate::pacing::Worth;
use ferry_crds::{EventAction, EventReason};

/// What the wave controller does in one reconcile.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    /// Indexes into the wave's members (`spec.vms`, or `status.selectedVms`) whose migration
    /// does not exist yet, and whose name no other migration holds.
    pub create: Vec<usize>,
    /// Held migrations to release (hold annotation removed), in `spec.vms` order.
    pub release: Vec<String>,
    /// Migrations to set `spec.cancel: true` on.
    pub cancel: Vec<String>,
    /// Failed migrations whose `spec.retry` is raised to the wave's.
    pub retry: Vec<String>,
    /// Warm migrations waiting for the wave's cutover that are given theirs now
    /// (`spec.warm.cutover: true`), in `spec.vms` order.
    pub cutover: Vec<String>,
    /// The status to write.
    pub status: MigrationWaveStatus,
}

/// Decides, from the wave's own `children` (owner reference to its uid) and `others` (the
/// namespace's migrations holding a name one of its VMs would take). Pure.
///
/// # Guarantees
/// * Never more than `maxInFlight` children released and unfinished after the plan runs.
/// * Releases follow `spec.vms` order; nothing is released while paused or cancelled.
/// * `cancel` reaches every unfinished child; a raised `retry` reaches every `Failed` child
///   whose own token is lower.
/// * A VM whose migration's name another VM's migration has or would have gets none: it is in
///   `status.collisions` and `Degraded` (`NameCollision`) names both VMs, the others go on, and
///   the wave ends `Failed` once they are done (see [`members::assign`]).
pub fn decide(
    wave: &MigrationWave,
    children: &[VirtualMachineMigration],
    others: &[VirtualMachineMigration],
    now: &Time,
) -> Plan {
    decide_measured(wave, children, others, None, now)
}

/// [`decide`], the wave's forecast made by `elsewhere` (what the namespace's other migrations
/// took, [`crate::migrations::Migrations::measured_elsewhere`]) until one of its own succeeded.
/// Pure.
pub fn decide_measured(
    wave: &MigrationWave,
    children: &[VirtualMachineMigration],
    others: &[VirtualMachineMigration],
    elsewhere: Option<(i64, usize)>,
    now: &Time,
) -> Plan {
    let listed = if wave.spec.selector.is_some() {
        Listed::Selected
    } else {
        Listed::Spec
    };
    let assigned = members::assign(&wave.name_any(), &wave.members(), listed, children, others);
    let steered = !wave.spec.paused && !wave.spec.cancel;
    let mut slots = Slots {
        taken: children.iter().filter(|c| occupies_slot(c, now)).count(),
        max: usize::try_from(wave.spec.max_in_flight.max(1)).unwrap_or(1),
    };
    // The window holds what costs the source its downtime: a cold migration's start (its
    // power-off comes first), a warm one's cutover (its first copies run beside the VM).
    let warm = window::holds_cutovers(wave);
    let (gate, forecast) = window::judge(wave, children, elsewhere, now);
    // Cutovers before releases: once the window is open, finishing precopied VMs (each one's
    // downtime running) comes before starting new ones.
    let cutover = if steered && cutover_due(wave, now) && (gate == Gate::Open || !warm) {
        slots.fill(&assigned, |c| waits_for_cutover(c, now))
    } else {
        Vec::new()
    };
    let release = if steered && (gate == Gate::Open || warm) {
        slots.fill(&assigned, |c| c.is_held() && !c.phase().is_terminal())
    } else {
        Vec::new()
    };
    let status = super::status::status(
        wave,
        children,
        &assigned,
        (release.len(), cutover.len()),
        (gate, forecast),
        now,
    );
    Plan {
        create: to_create(&assigned),
        release,
        cutover,
        cancel: to_cancel(wave, children),
        retry: to_retry(wave, children),
        status,
    }
}

/// The slots of `maxInFlight`: how many are taken, of how many.
struct Slots {
    taken: usize,
    max: usize,
}

impl Slots {
    /// The wave's own migrations that `wanted` picks, in `spec.vms` order, while slots are
    /// free; each takes one.
    fn fill(
        &mut self,
        assigned: &[Member<'_>],
        wanted: impl Fn(&VirtualMachineMigration) -> bool,
    ) -> Vec<String> {
        let mut names = Vec::new();
        for m in assigned {
            if self.taken >= self.max {
                break;
            }
            if let Member::Migrating(c) = m
                && wanted(c)
            {
                names.push(c.name_any());
                self.taken += 1;
            }
        }
        names
    }
}

/// The indexes into the wave's VMs whose migration is to be created.
fn to_create(assigned: &[Member<'_>]) -> Vec<usize> {
    assigned
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Member::Create(_)))
        .map(|(i, _)| i)
        .collect()
}

/// A cancelled wave cancels every unfinished child not cancelled yet.
fn to_cancel(wave: &MigrationWave, children: &[VirtualMachineMigration]) -> Vec<String> {
    if !wave.spec.cancel {
        return Vec::new();
    }
    children
        .iter()
        .filter(|c| !c.phase().is_terminal() && !c.spec.cancel)
        .map(ResourceExt::name_any)
        .collect()
}

/// A raised `spec.retry` retries every failed child not retried that often yet (never in a
/// cancelled wave).
fn to_retry(wave: &MigrationWave, children: &[VirtualMachineMigration]) -> Vec<String> {
    if wave.spec.retry == 0 || wave.spec.cancel {
        return Vec::new();
    }
    children
        .iter()
        .filter(|c| c.phase() == Phase::Failed && c.spec.retry < wave.spec.retry)
        .map(ResourceExt::name_any)
        .collect()
}

/// The Event a new status deserves over `old`: one Warning `NameCollision` naming every VM newly
/// refused (each message names both VMs), none when no VM is newly refused. Pure.
pub fn collision_note(
    old: Option<&MigrationWaveStatus>,
    new: &MigrationWaveStatus,
) -> Option<Note> {
    let known = |c: &WaveCollision| {
        old.is_some_and(|o| {
            o.collisions
                .iter()
                .any(|k| (&k.vm, &k.migration, &k.other_vm) == (&c.vm, &c.migration, &c.other_vm))
        })
    };
    let fresh: Vec<&str> = new
        .collisions
        .iter()
        .filter(|c| !known(c))
        .map(|c| c.message.as_str())
        .collect();
    (!fresh.is_empty()).then(|| Note {
        warning: true,
        reason: EventReason::Condition(Reason::NameCollision),
        action: EventAction::Fail,
        note: fresh.join("; "),
    })
}

/// How long a child this controller created may be missing from the cache before it is
/// created again (the cache normally shows it within milliseconds), and how long a child the
/// API server refused waits before it is tried again.
pub const CREATED_GRACE: Duration = Duration::from_secs(30);

/// What the API server refused of this look's creates: the member's index, the migration's name
/// and the refusal (`problem::refused`).
pub type Refused = Vec<(usize, String, crate::problem::Problem)>;

/// The refusals to record after a look that tried to create the members `tried`: `old`'s for
/// members not tried this time, and this look's (each keeping its `since` when its member was
/// refused for the same reason before). A member tried and made leaves the list. Pure.
pub fn refusals(
    old: &[WaveRefusal],
    members: &[WaveVm],
    tried: &[usize],
    refused: &Refused,
    now: &Time,
) -> Vec<WaveRefusal> {
    let was = |i: usize| {
        old.iter()
            .find(|r| usize::try_from(r.index).ok() == Some(i))
    };
    let mut out: Vec<WaveRefusal> = old
        .iter()
        .filter(|r| usize::try_from(r.index).map_or(true, |i| !tried.contains(&i)))
        .cloned()
        .collect();
    for (i, name, p) in refused {
        let since = was(*i)
            .filter(|r| r.reason == p.reason)
            .map_or_else(|| now.clone(), |r| r.since.clone());
        out.push(WaveRefusal {
            index: i32::try_from(*i).unwrap_or(i32::MAX),
            vm: members
                .get(*i)
                .and_then(|m| m.vm.value())
                .unwrap_or("(no VM)")
                .to_owned(),
            migration: name.clone(),
            reason: p.reason,
            message: p.message.clone(),
            since,
        });
    }
    out.sort_by_key(|r| r.index);
    out
}

/// The Event a new status deserves over `old` for its refusals: one Warning naming every VM
/// newly refused (or refused for another reason), with the API server's words. Pure.
pub fn refusal_note(old: Option<&MigrationWaveStatus>, new: &MigrationWaveStatus) -> Option<Note> {
    let known = |r: &WaveRefusal| {
        old.is_some_and(|o| {
            o.refused
                .iter()
                .any(|k| (&k.migration, k.reason) == (&r.migration, r.reason))
        })
    };
    let fresh: Vec<&WaveRefusal> = new.refused.iter().filter(|r| !known(r)).collect();
    let first = fresh.first()?;
    Some(Note {
        warning: true,
        reason: EventReason::Condition(first.reason),
        action: EventAction::Retry,
        note: fresh
            .iter()
            .map(|r| format!("VM {} gets no migration yet: {}", r.vm, r.message))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// While ferry's admission policies are not in force ([`crate::admission_guard`]): the plan
/// makes, releases, retries and cuts over nothing (its cancels stand: they only stop work), and
/// the status says why in `Degraded` (`PoliciesNotInForce`). Pure.
pub fn hold_for_policies(plan: &mut Plan, why: &str, generation: Option<i64>, now: &Time) {
    plan.create.clear();
    plan.release.clear();
    plan.retry.clear();
    plan.cutover.clear();
    ferry_crds::condition::set_condition(
        &mut plan.status.conditions,
        ferry_crds::condition::WaveConditionType::Degraded,
        ferry_crds::ConditionStatus::True,
        Reason::PoliciesNotInForce,
        crate::admission_guard::held_back(why),
        generation,
        now,
    );
}

/// The Event when the wave starts holding back for the policies (not at every look). Pure.
pub fn policies_note(old: Option<&MigrationWaveStatus>, new: &MigrationWaveStatus) -> Option<Note> {
    let holding = |s: &MigrationWaveStatus| {
        s.condition(ferry_crds::condition::WaveConditionType::Degraded)
            .is_some_and(|c| c.reason == Reason::PoliciesNotInForce)
    };
    if old.is_some_and(holding) || !holding(new) {
        return None;
    }
    let message = new
        .condition(ferry_crds::condition::WaveConditionType::Degraded)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    Some(Note {
        warning: true,
        reason: EventReason::Condition(Reason::PoliciesNotInForce),
        action: EventAction::Preflight,
        note: message,
    })
}

/// Children as read from a cache, with the releases and cutovers this controller gave that the
/// cache does not show yet applied to them: a release (or cutover) not yet seen must still count
/// as a taken slot, or the next plan would go past `maxInFlight`. Pure.
///
/// Returns the children and what of `given` the cache still does not show (the ones to keep
/// remembering); a child gone from the cache is forgotten.
pub fn with_releases(
    mut children: Vec<VirtualMachineMigration>,
    given: &Given,
) -> (Vec<VirtualMachineMigration>, Given) {
    let mut pending = Given::default();
    for c in &mut children {
        let Some(uid) = c.metadata.uid.clone() else {
            continue;
        };
        if given.released.contains(&uid) && c.is_held() {
            if let Some(a) = c.metadata.annotations.as_mut() {
                a.remove(ferry_crds::names::HOLD_ANNOTATION);
            }
            pending.released.insert(uid.clone());
        }
        let shown = c.spec.warm.as_ref().is_some_and(|w| w.cutover);
        if given.cut_over.contains(&uid)
            && c.spec.mode == MigrationMode::Warm
            && c.phase() == Phase::CuttingOver
            && !shown
        {
            c.spec.warm.get_or_insert_with(Default::default).cutover = true;
            pending.cut_over.insert(uid);
        }
    }
    (children, pending)
}

/// How often at most the counts that move as migrations go from phase to phase (the phase
/// breakdown, in flight, pending, queued, running, succeeded, and the preflight's tallies and
/// claims of the members not started yet) are written: a wave of a thousand moves them
/// thousands of times, and every write is a request to a shared apiserver. Each migration's own
/// status carries its phase at once, so the wave's strip trails its rows by at most this.
pub const COUNTS_INTERVAL: Duration = Duration::from_secs(5);

/// Whether the wave's `new` status is worth a write over `old`, `since_last` after this
/// controller last wrote it: the wave's phase, its conditions, collisions, preflight and every
/// failure or cancellation at once; the counts migrations move through at most once per
/// [`COUNTS_INTERVAL`]; the figures that move with every byte copied or every second (bytes,
/// throughput, ETA, the forecast but whom the window holds) at most once per `interval`. Pure.
pub fn worth_writing(
    old: Option<&MigrationWaveStatus>,
    new: &MigrationWaveStatus,
    since_last: Option<Duration>,
    interval: Duration,
) -> Worth {
    let Some(old) = old else { return Worth::Now };
    if old == new {
        return Worth::No;
    }
    let counted = |s: &MigrationWaveStatus| MigrationWaveStatus {
        bytes_done: 0,
        bytes_total: 0,
        throughput_per_hour: None,
        eta_seconds: None,
        // The forecast moves with the clock and each success; whom the window holds is news,
        // and so is the first forecast (made once, kept for the report).
        forecast: s.forecast.as_ref().map(|f| ferry_crds::WaveForecast {
            outside_window: f.outside_window,
            first_ends_at: f.first_ends_at.clone(),
            first_made_at: f.first_made_at.clone(),
            at_risk: f.at_risk,
            at_risk_names: f.at_risk_names.clone(),
            ..Default::default()
        }),
        ..s.clone()
    };
    let steady = |s: &MigrationWaveStatus| MigrationWaveStatus {
        phases: Default::default(),
        in_flight: 0,
        waiting_for_cutover: 0,
        counts: ferry_crds::wave::WaveCounts {
            failed: s.counts.failed,
            cancelled: s.counts.cancelled,
            ..Default::default()
        },
        // What the operator must act on before the window, at once: a blocked member, a quota
        // the wave overruns. The tallies and the claims move with every member that starts
        // (each admission took a write of its own before).
        preflight: s
            .preflight
            .as_ref()
            .map(|p| ferry_crds::wave::WavePreflight {
                blocked: p.blocked,
                quota_short: p.quota_short.clone(),
                ..Default::default()
            }),
        ..counted(s)
    };
    if steady(old) != steady(new) {
        return Worth::Now;
    }
    if counted(old) != counted(new) {
        return Worth::once_per(COUNTS_INTERVAL.min(interval), since_last);
    }
    Worth::once_per(interval, since_last)
}

/// While a wave waits for free slots, it looks again this often even without a trigger: a cache
/// read costs no request, and a slot freed is refilled within this even if a trigger was
/// coalesced away. (Its triggers come from the cache it reads, after the cache has the change:
/// `run::watches::migration_watch`.)
pub const SATURATED_REQUEUE: Duration = Duration::from_secs(1);

/// When to look at the wave again, with no trigger: soon while it creates or releases; every
/// [`SATURATED_REQUEUE`] while held children wait for a slot (a cache read costs no
/// request); when a held-back status write falls due (`worth`); else in five minutes. Pure.
pub fn requeue_after(
    wave: &MigrationWave,
    plan: &Plan,
    children: &[VirtualMachineMigration],
    worth: Worth,
    now: &Time,
) -> Duration {
    // A member the API server refused is tried again after the create grace, not at once.
    let refused = &plan.status.refused;
    let creating = plan.create.iter().any(|i| {
        !refused
            .iter()
            .any(|r| usize::try_from(r.index).ok() == Some(*i))
    });
    let busy = creating || !plan.release.is_empty() || !plan.cutover.is_empty();
    let steering = !wave.spec.paused && !wave.spec.cancel;
    let precopied = children.iter().any(|c| waits_for_cutover(c, now));
    let waiting = steering
        && (children
            .iter()
            .any(|c| c.is_held() && !c.phase().is_terminal())
            || (precopied && cutover_due(wave, now)));
    let mut after = if busy {
        Duration::from_millis(200)
    } else if waiting {
        SATURATED_REQUEUE
    } else {
        Duration::from_secs(300)
    };
    if !refused.is_empty() {
        after = after.min(CREATED_GRACE + Duration::from_millis(100));
    }
    // Precopied migrations wait for the wave's cutover time: be there when it comes.
    if steering
        && precopied
        && let Some(at) = wave.spec.warm.as_ref().and_then(|w| w.cutover_at.as_ref())
        && at.0 > now.0
    {
        let until = Duration::try_from(at.0.duration_since(now.0)).unwrap_or_default();
        after = after.min(until + Duration::from_millis(100));
    }
    match worth {
        Worth::Later(d) => d.min(after),
        Worth::Now | Worth::No => after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::condition::WaveConditionType;
    use ferry_crds::wave::MAX_REPORTED_COLLISIONS;
    use ferry_crds::{ConditionStatus, WaveCounts, WavePhase};

    #[test]
    fn bytes_and_eta_wait_for_the_interval_counts_a_moment_failures_not_at_all() {
        let old = MigrationWaveStatus {
            total: 3,
            bytes_done: 10,
            eta_seconds: Some(60),
            ..MigrationWaveStatus::default()
        };
        let i = Duration::from_secs(10);
        let soon = Some(Duration::from_secs(4));
        let mut moved = old.clone();
        moved.bytes_done = 20;
        moved.eta_seconds = Some(50);
        assert_eq!(
            worth_writing(Some(&old), &moved, soon, i),
            Worth::Later(Duration::from_secs(6))
        );
        assert_eq!(worth_writing(Some(&old), &moved, Some(i), i), Worth::Now);
        assert_eq!(worth_writing(Some(&old), &old, None, i), Worth::No);
        let mut counted = moved.clone();
        counted.in_flight = 1;
        counted.counts.succeeded = 1;
        let just = Some(Duration::from_millis(500));
        assert_eq!(
            worth_writing(Some(&old), &counted, just, i),
            Worth::Later(COUNTS_INTERVAL - Duration::from_millis(500))
        );
        assert_eq!(
            worth_writing(Some(&old), &counted, Some(COUNTS_INTERVAL), i),
            Worth::Now
        );
        // A member that starts takes its claims off the preflight's sum: a count like the rest.
        let mut before = old.clone();
        before.preflight = Some(ferry_crds::wave::WavePreflight {
            checked: 3,
            ready: 3,
            claims: [("requests.storage".to_owned(), 20)].into(),
            ..Default::default()
        });
        let mut started = before.clone();
        if let Some(p) = started.preflight.as_mut() {
            p.claims.insert("requests.storage".to_owned(), 10);
        }
        assert_eq!(
            worth_writing(Some(&before), &started, just, i),
            Worth::Later(COUNTS_INTERVAL - Duration::from_millis(500))
        );
        let mut blocked = started.clone();
        if let Some(p) = blocked.preflight.as_mut() {
            p.blocked = 1;
        }
        assert_eq!(worth_writing(Some(&started), &blocked, just, i), Worth::Now);
        let mut short = started.clone();
        if let Some(p) = short.preflight.as_mut() {
            p.quota_short = vec!["requests.storage".into()];
        }
        assert_eq!(worth_writing(Some(&started), &short, just, i), Worth::Now);
        let mut failed = counted.clone();
        failed.counts.failed = 1;
        assert_eq!(worth_writing(Some(&old), &failed, just, i), Worth::Now);
        let mut done = counted.clone();
        done.phase = ferry_crds::wave::WavePhase::Succeeded;
        assert_eq!(worth_writing(Some(&old), &done, just, i), Worth::Now);
        assert_eq!(worth_writing(None, &old, soon, i), Worth::Now);
    }
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
    fn a_wave_looks_again_soon_while_busy_each_second_while_children_wait_and_when_a_write_falls_due()
     {
        let w = wave("w", 2).with_max_in_flight(1);
        let busy = decide(&w, &[], &[], &t0());
        assert_eq!(
            requeue_after(&w, &busy, &[], Worth::No, &t0()),
            Duration::from_millis(200)
        );
        let kids = children_of(&w, &[(Phase::Converting, false), (Phase::Queued, true)]);
        let full = decide(&w, &kids, &[], &t0());
        assert!(
            full.create.is_empty() && full.release.is_empty(),
            "{full:?}"
        );
        assert_eq!(
            requeue_after(&w, &full, &kids, Worth::No, &t0()),
            SATURATED_REQUEUE
        );
        let soon = Duration::from_millis(300);
        assert_eq!(
            requeue_after(&w, &full, &kids, Worth::Later(soon), &t0()),
            soon
        );
        let paused = w.clone().paused();
        let idle = decide(&paused, &kids, &[], &t0());
        assert_eq!(
            requeue_after(
                &paused,
                &idle,
                &kids,
                Worth::Later(Duration::from_secs(9)),
                &t0()
            ),
            Duration::from_secs(9)
        );
    }

    /// A warm wave of 4, `maxInFlight` 2, cutover at `t0 + 60 s`.
    fn warm_wave() -> MigrationWave {
        let mut w = wave("w", 4).with_max_in_flight(2);
        w.spec.template.mode = MigrationMode::Warm;
        w.spec.warm = Some(ferry_crds::WarmSpec {
            cutover_at: Some(Time(t0().0 + std::time::Duration::from_secs(60))),
            precopy_interval_seconds: Some(600),
            ..ferry_crds::WarmSpec::default()
        });
        w
    }

    #[test]
    fn a_warm_wave_precopies_every_vm_then_cuts_them_over_within_max_in_flight() {
        let w = warm_wave();
        let kids = children_of(
            &w,
            &[
                (Phase::CuttingOver, false),
                (Phase::CuttingOver, false),
                (Phase::Converting, false),
                (Phase::Queued, true),
            ],
        );
        assert_eq!(
            kids[0].spec.mode,
            MigrationMode::Warm,
            "the template's mode"
        );
        let interval = kids[0].spec.warm.as_ref().unwrap().precopy_interval_seconds;
        assert_eq!(interval, Some(600), "the wave's precopy interval");
        // Before the cutover: the two waiting take no slot, so the fourth is released.
        let p = decide(&w, &kids, &[], &t0());
        assert_eq!(p.release, vec!["w-dc0-h0-vm3".to_owned()]);
        assert!(p.cutover.is_empty(), "{p:?}");
        assert_eq!((p.status.in_flight, p.status.waiting_for_cutover), (2, 2));
        let progressing = p.status.conditions.iter();
        let msg = &progressing
            .filter(|c| c.type_ == WaveConditionType::Progressing)
            .map(|c| c.message.clone())
            .collect::<String>();
        assert!(
            msg.contains("2 precopied, waiting for the wave's cutover at"),
            "{msg}"
        );
        assert_eq!(
            requeue_after(&w, &p, &kids, Worth::No, &t0()),
            Duration::from_millis(200),
            "busy releasing"
        );
        let idle = Plan {
            release: vec![],
            ..p.clone()
        };
        let mut settled = kids.clone();
        settled[2] = settled[2].clone().with_phase(Phase::Succeeded);
        settled[3] = settled[3].clone().with_phase(Phase::Succeeded);
        assert_eq!(
            requeue_after(&w, &idle, &settled, Worth::No, &t0()),
            Duration::from_millis(60_100),
            "back when the cutover comes"
        );
        // At the cutover, one slot free (the converting one takes the other): one cutover,
        // in spec.vms order; the cache not showing it yet still counts it.
        let at = Time(t0().0 + std::time::Duration::from_secs(60));
        let p = decide(&w, &kids, &[], &at);
        assert_eq!(p.cutover, vec!["w-dc0-h0-vm0".to_owned()]);
        assert!(p.release.is_empty(), "cutovers first: {p:?}");
        assert_eq!((p.status.in_flight, p.status.waiting_for_cutover), (2, 1));
        let mut uids = kids.clone();
        for (i, c) in uids.iter_mut().enumerate() {
            c.metadata.uid = Some(format!("u{i}"));
        }
        let given = Given {
            cut_over: ["u0".to_owned()].into(),
            ..Given::default()
        };
        let (seen, pending) = with_releases(uids, &given);
        assert_eq!(pending, given, "remembered until the cache shows it");
        assert!(
            decide(&w, &seen, &[], &at).cutover.is_empty(),
            "no slot left"
        );
        // Paused or cancelled waves give no cutover.
        assert!(
            decide(&w.clone().paused(), &kids, &[], &at)
                .cutover
                .is_empty()
        );
        // A cold wave's children never wait.
        let cold = wave("w", 1);
        let c = children_of(&cold, &[(Phase::CuttingOver, false)]);
        assert!(!waits_for_cutover(&c[0], &at));
        assert_eq!(c[0].spec.warm, None);
    }

    #[test]
    fn creates_missing_children_and_releases_within_max_in_flight() {
        let w = wave("w", 4).with_max_in_flight(2);
        let p = decide(&w, &[], &[], &t0());
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
        let p = decide(&w, &kids, &[], &t0());
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
            decide(&w, &kids, &[], &t0()).release,
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
        let first = decide(&w, &children, &[], &t0());
        assert_eq!(first.release.len(), 1);
        // The cache still shows every child held; the release of u0 was made.
        let released = Given {
            released: ["u0".to_owned()].into(),
            ..Given::default()
        };
        let (seen, pending) = with_releases(children.clone(), &released);
        assert_eq!(
            pending, released,
            "u0 is remembered until the cache shows it"
        );
        let again = decide(&w, &seen, &[], &t0());
        assert!(again.release.is_empty(), "{again:?}");
        assert_eq!(again.status.in_flight, 1);
        // Once the cache shows it released, nothing is left to remember.
        children[0] = children[0].clone().released();
        let (_, pending) = with_releases(children, &released);
        assert_eq!(pending, Given::default());
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
        let p = decide(&w, &kids, &[], &t0());
        assert!(p.release.is_empty());
        assert_eq!(p.status.phase, WavePhase::Paused);
        let w = wave("w", 3).cancelled();
        let p = decide(&w, &kids, &[], &t0());
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
            decide(&w, &kids, &[], &t0()).retry,
            vec!["w-dc0-h0-vm0".to_owned()]
        );
        kids[0].spec.retry = 1;
        assert!(decide(&w, &kids, &[], &t0()).retry.is_empty());
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
        let p = decide(&w2, &kids, &[], &t0());
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
        let p = decide(&w, &kids, &[], &t0());
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
        let p = decide(&w, &done, &[], &t0());
        assert_eq!(
            cond(&p, WaveConditionType::Completed),
            (ConditionStatus::True, Reason::Succeeded)
        );
        assert_eq!(
            cond(&p, WaveConditionType::Degraded),
            (ConditionStatus::False, Reason::Succeeded)
        );
        let p = decide(&w.clone().paused(), &kids, &[], &t0());
        assert_eq!(
            cond(&p, WaveConditionType::Completed),
            (ConditionStatus::False, Reason::Paused)
        );
    }

    fn vm(name: &str) -> ferry_crds::WaveVm {
        ferry_crds::WaveVm::by_name(name)
    }

    #[test]
    fn the_second_of_two_colliding_vms_gets_no_child_and_the_status_names_both() {
        let mut w = wave("w", 0);
        w.spec.vms = vec![vm("Web-1"), vm("web_1"), vm("db")];
        let p = decide(&w, &[], &[], &t0());
        assert_eq!(p.create, vec![0, 2], "no child for web_1");
        let c = &p.status.collisions;
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].index, c[0].vm.as_str(), c[0].other_vm.as_str()),
            (1, "web_1", "Web-1")
        );
        let d = p.status.condition(WaveConditionType::Degraded).unwrap();
        assert_eq!(
            (d.status, d.reason),
            (ConditionStatus::True, Reason::NameCollision)
        );
        assert!(
            d.message
                .starts_with("1 of 3 VMs collide: web_1 (spec.vms[1])")
                && d.message.contains("Web-1"),
            "{}",
            d.message
        );
        // Once the children exist, the collision stays reported and the others run.
        let kids: Vec<VirtualMachineMigration> = [0, 2]
            .iter()
            .map(|i| child_migration(&w, &w.spec.vms[*i]).unwrap())
            .collect();
        let p = decide(&w, &kids, &[], &t0());
        assert!(p.create.is_empty());
        assert_eq!(p.release, vec!["w-web-1".to_owned(), "w-db".to_owned()]);
        assert_eq!(p.status.collisions.len(), 1);
        assert_eq!(p.status.phase, WavePhase::Running);
    }

    #[test]
    fn a_member_the_api_refuses_is_recorded_and_the_others_go_on() {
        let w = wave("w", 3);
        let first = decide(&w, &[], &[], &t0());
        assert_eq!(first.create, vec![0, 1, 2]);
        let name = |i: usize| child_migration(&w, &w.spec.vms[i]).unwrap().name_any();
        let denied = crate::problem::Problem::transient(
            Reason::AdmissionDenied,
            "the API server refused to create VirtualMachineMigration w-1 (403): denied request",
        );
        let refused: Refused = vec![(1, name(1), denied)];
        let recorded = refusals(&[], &w.spec.vms, &first.create, &refused, &t0());
        assert_eq!(recorded.len(), 1);
        assert_eq!(
            (recorded[0].index, recorded[0].reason),
            (1, Reason::AdmissionDenied)
        );
        let mut known = w.clone();
        known.status.get_or_insert_with(Default::default).refused = recorded.clone();
        // The others were made and run; the refused one is named, and Degraded says why.
        let kids: Vec<_> = [0, 2]
            .iter()
            .map(|i| {
                child_migration(&w, &w.spec.vms[*i])
                    .unwrap()
                    .with_phase(Phase::Importing)
                    .released()
            })
            .collect();
        let p = decide(&known, &kids, &[], &t0());
        assert_eq!(p.status.refused, recorded);
        let d = p.status.condition(WaveConditionType::Degraded).unwrap();
        assert_eq!(
            (d.status, d.reason),
            (ConditionStatus::True, Reason::AdmissionDenied)
        );
        assert!(d.message.contains("denied request"), "{}", d.message);
        assert_eq!(p.status.phase, WavePhase::Running);
        let note = refusal_note(None, &p.status).expect("an Event");
        assert!(note.note.contains("denied request"), "{}", note.note);
        assert_eq!(refusal_note(Some(&p.status), &p.status), None, "once");
        // Not tried again within the grace (no create, no hot loop): looked at again then.
        assert!(
            requeue_after(&known, &p, &kids, Worth::No, &t0())
                <= CREATED_GRACE + Duration::from_secs(1)
        );
        // The others done, the refused one counts as done: the wave ends Failed.
        let done: Vec<_> = kids
            .iter()
            .cloned()
            .map(|c| c.with_phase(Phase::Succeeded))
            .collect();
        let p = decide(&known, &done, &[], &t0());
        assert_eq!(p.status.phase, WavePhase::Failed);
        // A quota's refusal is waited for: the wave runs on.
        let mut quota = known.clone();
        quota.status.as_mut().unwrap().refused[0].reason = Reason::QuotaExceeded;
        assert_eq!(
            decide(&quota, &done, &[], &t0()).status.phase,
            WavePhase::Running
        );
        // Tried again and made: it leaves the list.
        assert!(refusals(&recorded, &w.spec.vms, &[1], &Refused::new(), &t0()).is_empty());
        // Not tried this time: kept, with its first time.
        let later = Time(t0().0.checked_add(Duration::from_secs(60)).unwrap());
        assert_eq!(
            refusals(&recorded, &w.spec.vms, &[], &Refused::new(), &later),
            recorded
        );
    }

    #[test]
    fn a_wave_with_a_collision_ends_failed_once_its_other_vms_are_done() {
        let mut w = wave("w", 0);
        w.spec.vms = vec![vm("Web-1"), vm("web_1")];
        let kids = vec![
            child_migration(&w, &w.spec.vms[0])
                .unwrap()
                .with_phase(Phase::Succeeded)
                .released(),
        ];
        let p = decide(&w, &kids, &[], &t0());
        assert_eq!(p.status.phase, WavePhase::Failed);
        assert_eq!((p.status.total, p.status.counts.succeeded), (2, 1));
        let c = p.status.condition(WaveConditionType::Completed).unwrap();
        assert_eq!(c.message, "1 of 2 finished, 1 got no migration");
        assert!(
            p.status
                .condition(WaveConditionType::Ready)
                .is_some_and(|r| r.status == ConditionStatus::False)
        );
        // A targetName parts them: the second VM is taken up, the wave runs again.
        w.spec.vms[1].target_name = Some("web-1-b".into());
        let p = decide(&w, &kids, &[], &t0());
        assert_eq!(p.create, vec![1]);
        assert!(p.status.collisions.is_empty());
        assert_eq!(p.status.phase, WavePhase::Running);
    }

    #[test]
    fn another_waves_migration_of_the_name_is_neither_released_nor_counted() {
        // Wave `a` with VM `b-c` and wave `a-b` with VM `c` both make `a-b-c`.
        let mut a = wave("a", 0);
        a.spec.vms = vec![vm("b-c")];
        let theirs = vec![child_migration(&a, &a.spec.vms[0]).unwrap()];
        let mut ab = wave("a-b", 0);
        ab.spec.vms = vec![vm("c")];
        let p = decide(&ab, &[], &theirs, &t0());
        assert!(p.create.is_empty() && p.release.is_empty(), "{p:?}");
        assert_eq!(p.status.counts, WaveCounts::default());
        assert_eq!(p.status.phase, WavePhase::Failed, "nothing left to run");
        let c = &p.status.collisions[0];
        assert_eq!(
            (c.vm.as_str(), c.other_vm.as_str(), c.other_wave.as_deref()),
            ("c", "b-c", Some("a"))
        );
    }

    #[test]
    fn the_collisions_listed_are_bounded_and_the_condition_counts_them_all() {
        let mut w = wave("w", 0);
        w.spec.vms = (0..(MAX_REPORTED_COLLISIONS + 5))
            .flat_map(|i| [vm(&format!("Web-{i}")), vm(&format!("web_{i}"))])
            .collect();
        let p = decide(&w, &[], &[], &t0());
        assert_eq!(p.status.collisions.len(), MAX_REPORTED_COLLISIONS);
        let d = p.status.condition(WaveConditionType::Degraded).unwrap();
        assert!(
            d.message.starts_with(&format!(
                "{} of {} VMs",
                MAX_REPORTED_COLLISIONS + 5,
                w.spec.vms.len()
            )),
            "{}",
            d.message
        );
    }

    #[test]
    fn a_collision_is_told_in_one_event_once() {
        let mut w = wave("w", 0);
        w.spec.vms = vec![vm("Web-1"), vm("web_1")];
        let p = decide(&w, &[], &[], &t0());
        let note = collision_note(None, &p.status).expect("an Event");
        assert!(note.warning);
        assert_eq!(note.reason.as_str(), "NameCollision");
        assert!(
            note.note.contains("web_1") && note.note.contains("Web-1"),
            "{}",
            note.note
        );
        assert_eq!(
            collision_note(Some(&p.status), &p.status),
            None,
            "told once"
        );
        assert_eq!(collision_note(None, &MigrationWaveStatus::default()), None);
    }

    proptest! {
        #[test]
        fn never_more_than_max_in_flight(
            max in 1i32..6,
            states in proptest::collection::vec((0..Phase::ALL.len(), any::<bool>()), 1..12),
        ) {
            let w = wave("w", states.len()).with_max_in_flight(max);
            let phases: Vec<(Phase, bool)> = states.iter().map(|(p, held)| {
                let phase = Phase::ALL[*p];
                (phase, *held && matches!(phase, Phase::Pending | Phase::Queued))
            }).collect();
            let kids = children_of(&w, &phases);
            let before = kids.iter().filter(|c| occupies_slot(c, &t0())).count();
            let p = decide(&w, &kids, &[], &t0());
            let after = before + p.release.len();
            prop_assert!(p.release.is_empty() || after <= max as usize);
            prop_assert_eq!(p.status.in_flight as usize, after);
        }
    }
}
