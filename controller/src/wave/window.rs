//! The wave's maintenance window and its forecast, pure: how long one of its migrations takes
//! (measured on those of the wave that succeeded), when the wave would end at that pace, and
//! whether a held migration may start now. None starts before `spec.window.start`, nor when the
//! forecast says it would end past `spec.window.end`: an operator's window is a promise to the
//! application teams, and a migration that would overrun it is one he would not have started.
//! A warm wave's window holds its cutovers instead (its first copies run beside the VM, no
//! downtime), by the window's times alone: what a cutover takes is not measured yet.

use ferry_crds::{
    MaintenanceWindow, MigrationMode, MigrationWave, Phase, VirtualMachineMigration, WaveForecast,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

/// Whether held migrations may start now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// No window, or inside it with the time a migration takes still left.
    Open,
    /// The window has not opened yet.
    NotYet,
    /// A migration started now would end past the window's end (or the window has ended).
    Closing,
}

/// What one migration of the wave takes: the mean, over the wave's succeeded migrations, of the
/// time from its start (leaving `Queued`) to its end, retries included (they spend the window
/// too); with how many it is of. `None` until one succeeded: nothing measured, nothing
/// forecast. (A settled migration is cached cut down; both times stay in it.)
pub fn migration_seconds(children: &[VirtualMachineMigration]) -> Option<(i64, usize)> {
    let took: Vec<i64> = children.iter().filter_map(took_seconds).collect();
    let n = took.len();
    (n > 0).then(|| (took.iter().sum::<i64>() / i64::try_from(n).unwrap_or(1), n))
}

/// The seconds one succeeded migration took.
fn took_seconds(c: &VirtualMachineMigration) -> Option<i64> {
    if c.phase() != Phase::Succeeded {
        return None;
    }
    let s = c.status.as_ref()?;
    let (start, end) = (s.started_at.as_ref()?, s.completed_at.as_ref()?);
    Some((end.0.as_second() - start.0.as_second()).max(0))
}

/// Whether the wave's window holds its cutovers (a warm wave: its first copies run beside the
/// VMs, no downtime) rather than its starts.
pub fn holds_cutovers(wave: &MigrationWave) -> bool {
    wave.spec.template.mode == MigrationMode::Warm
}

/// What one migration takes, and what it is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measure {
    /// The mean seconds, start to end.
    pub secs: i64,
    /// Of how many migrations.
    pub of: usize,
    /// Of this wave's own (else of the namespace's other waves and lone migrations).
    pub own: bool,
}

impl Measure {
    /// This wave's own measure ([`migration_seconds`]).
    pub fn own(m: Option<(i64, usize)>) -> Option<Measure> {
        m.map(|(secs, of)| Measure {
            secs,
            of,
            own: true,
        })
    }
}

/// The window's gate at `now` and the wave's forecast, the wave's migrations measured once;
/// until one of them succeeded, by what the namespace's others took (`elsewhere`).
pub fn judge(
    wave: &MigrationWave,
    children: &[VirtualMachineMigration],
    elsewhere: Option<(i64, usize)>,
    now: &Time,
) -> (Gate, Option<WaveForecast>) {
    let measured =
        Measure::own(migration_seconds(children)).or(elsewhere.map(|(secs, of)| Measure {
            secs,
            of,
            own: false,
        }));
    // What a cutover takes is not measured: a warm wave's gate is the window's times alone.
    let per_migration = measured.map(|m| m.secs).filter(|_| !holds_cutovers(wave));
    let gate = gate(wave.spec.window.as_ref(), per_migration, now);
    (gate, forecast(wave, children, measured, gate, now))
}

/// When the wave's migrations can run from: `now`, or the window's start when it is later.
fn from(wave: &MigrationWave, now: &Time) -> i64 {
    let start = wave
        .spec
        .window
        .as_ref()
        .and_then(|w| w.start.as_ref())
        .map(|s| s.0.as_second());
    start.map_or(now.0.as_second(), |s| s.max(now.0.as_second()))
}

/// Whether held migrations may start at `now`, given what one takes.
pub fn gate(window: Option<&MaintenanceWindow>, per_migration: Option<i64>, now: &Time) -> Gate {
    let Some(w) = window else {
        return Gate::Open;
    };
    let now = now.0.as_second();
    if w.start.as_ref().is_some_and(|s| now < s.0.as_second()) {
        return Gate::NotYet;
    }
    let end = w.end.0.as_second();
    if now >= end || per_migration.is_some_and(|p| now + p > end) {
        return Gate::Closing;
    }
    Gate::Open
}

/// The wave's forecast at `now`: what one migration takes (`measured`, by
/// [`migration_seconds`]) and its basis, when the wave would
/// end (the migrations not finished, `maxInFlight` at a time, each taking that long), and how
/// many held migrations the window keeps from starting. `None` for a wave with no window and
/// nothing measured yet.
pub fn forecast(
    wave: &MigrationWave,
    children: &[VirtualMachineMigration],
    measured: Option<Measure>,
    gate: Gate,
    now: &Time,
) -> Option<WaveForecast> {
    if wave.spec.window.is_none() && measured.is_none() {
        return None;
    }
    let total = i64::try_from(wave.members().len().max(children.len())).unwrap_or(i64::MAX);
    let finished = children.iter().filter(|c| c.phase().is_terminal()).count();
    let left = total - i64::try_from(finished).unwrap_or(0);
    let slots = i64::from(wave.spec.max_in_flight.max(1));
    let from = from(wave, now);
    let rounds = (left.max(0) + slots - 1) / slots;
    let ends_at = measured.map(|m| seconds_after(from, rounds * m.secs));
    // A warm wave's window holds its cutovers, a cold one's its starts.
    let held = if holds_cutovers(wave) {
        children
            .iter()
            .filter(|c| super::slots::waits_for_cutover(c, now))
            .count()
    } else {
        children
            .iter()
            .filter(|c| c.is_held() && !c.phase().is_terminal())
            .count()
    };
    let outside_window = match gate {
        Gate::Open => 0,
        Gate::NotYet | Gate::Closing => i32::try_from(held).unwrap_or(i32::MAX),
    };
    // The first end forecast stays as it was made, whatever the later ones say.
    let first = wave
        .status
        .as_ref()
        .and_then(|s| s.forecast.as_ref())
        .and_then(|f| f.first_ends_at.clone().zip(f.first_made_at.clone()))
        .or_else(|| ends_at.clone().map(|e| (e, now.clone())));
    let (first_ends_at, first_made_at) = first.unzip();
    let mut vms = measured.map_or_else(Vec::new, |m| plan(wave, children, m.secs, now));
    let (at_risk, at_risk_names) = self::at_risk(&vms);
    vms.truncate(VM_FORECASTS);
    let window_short = measured
        .and_then(|m| short(wave, m, left, now))
        .unwrap_or_default();
    Some(WaveForecast {
        migration_seconds: measured.map(|m| m.secs),
        basis: basis(measured),
        ends_at,
        outside_window,
        first_ends_at,
        first_made_at,
        at_risk,
        at_risk_names,
        window_short,
        vms,
    })
}

/// Before a cold wave's window opens, why its `left` migrations do not fit in it at `m`'s pace,
/// `maxInFlight` at a time from the window's start; with how many at a time would. `None` when
/// they fit, once the window is open (the gate and the VMs at risk say it then), and for a warm
/// wave (what its cutovers take is not measured). Pure.
fn short(wave: &MigrationWave, m: Measure, left: i64, now: &Time) -> Option<String> {
    let w = wave.spec.window.as_ref()?;
    let start = w.start.as_ref()?.0.as_second();
    if holds_cutovers(wave) || now.0.as_second() >= start || left <= 0 {
        return None;
    }
    let (end, secs) = (w.end.0.as_second(), m.secs.max(1));
    let slots = i64::from(wave.spec.max_in_flight.max(1));
    let rounds = (left + slots - 1) / slots;
    let ends = start + rounds * secs;
    if ends <= end {
        return None;
    }
    let fit_rounds = (end - start) / secs;
    let fix = if fit_rounds < 1 {
        "the window is shorter than one migration".to_owned()
    } else {
        let at_once = (left + fit_rounds - 1) / fit_rounds;
        format!("{at_once} at a time would fit")
    };
    Some(format!(
        "the wave does not fit its window: {left} migration(s) of {secs}s each ({}), {slots} at a time, end {}s past the window's end; {fix}",
        basis(Some(m)),
        ends - end
    ))
}

/// Most names of migrations at risk a forecast lists.
pub const AT_RISK_NAMES: usize = 32;

/// Most migrations a forecast gives a start and end of (`status.forecast.vms`).
pub const VM_FORECASTS: usize = 256;

/// Each unfinished migration of a cold wave, in the order the wave runs them: one in flight
/// ends `secs` after its start (now, if that is past); the rest start `maxInFlight` at a time
/// as slots free, in `spec.vms` order, from now or the window's start, each taking `secs`. At
/// risk: it ends past the window's end. None for a warm wave (what its cutover takes is not
/// measured). Pure.
fn plan(
    wave: &MigrationWave,
    children: &[VirtualMachineMigration],
    secs: i64,
    now: &Time,
) -> Vec<ferry_crds::VmForecast> {
    if holds_cutovers(wave) {
        return vec![];
    }
    let end = wave.spec.window.as_ref().map(|w| w.end.0.as_second());
    let from = from(wave, now);
    let now = now.0.as_second();
    let wave_name = wave.name_any();
    let by_name: std::collections::BTreeMap<String, &VirtualMachineMigration> =
        children.iter().map(|c| (c.name_any(), c)).collect();
    let (mut out, mut waiting) = (vec![], vec![]);
    let slot = |name: String, start: i64, ends: i64| ferry_crds::VmForecast {
        migration: name,
        starts_at: seconds_after(start, 0),
        ends_at: seconds_after(ends, 0),
        at_risk: end.is_some_and(|e| ends > e),
    };
    for vm in wave.members() {
        let name = ferry_crds::child_migration_name(&wave_name, &vm);
        match by_name.get(&name) {
            Some(c) if c.phase().is_terminal() => {}
            Some(c) if !c.is_held() => {
                let started = c
                    .status
                    .as_ref()
                    .and_then(|s| s.started_at.as_ref())
                    .map_or(now, |t| t.0.as_second());
                out.push(slot(name, started, (started + secs).max(now)));
            }
            _ => waiting.push(name),
        }
    }
    let in_flight = i64::try_from(out.len()).unwrap_or(i64::MAX);
    let slots = i64::from(wave.spec.max_in_flight.max(1));
    for (k, name) in (0_i64..).zip(waiting) {
        let start = from + (in_flight + k) / slots * secs;
        out.push(slot(name, start, start + secs));
    }
    out
}

/// How many of `plan` end past the window's end, and the first [`AT_RISK_NAMES`] of them.
/// Pure.
fn at_risk(plan: &[ferry_crds::VmForecast]) -> (i32, Vec<String>) {
    let risk: Vec<&ferry_crds::VmForecast> = plan.iter().filter(|v| v.at_risk).collect();
    let n = i32::try_from(risk.len()).unwrap_or(i32::MAX);
    let names = risk
        .into_iter()
        .take(AT_RISK_NAMES)
        .map(|v| v.migration.clone())
        .collect();
    (n, names)
}

/// Where the forecast's figure comes from, in words.
fn basis(measured: Option<Measure>) -> String {
    match measured {
        Some(Measure { of, own: true, .. }) => {
            format!("the mean of the {of} migration(s) of this wave that succeeded")
        }
        Some(Measure { of, own: false, .. }) => format!(
            "none of this wave's has succeeded yet: the mean of the namespace's {of} other migration(s) that succeeded"
        ),
        None => {
            "no migration of this wave or namespace has succeeded yet: nothing to forecast from"
                .into()
        }
    }
}

/// `at` (seconds since the epoch) plus `secs`, as an API time.
fn seconds_after(at: i64, secs: i64) -> Time {
    let at = at.saturating_add(secs);
    Time(k8s_openapi::jiff::Timestamp::from_second(at).unwrap_or_default())
}

/// What the wave says while its window holds migrations back.
pub fn held_message(window: &MaintenanceWindow, gate: Gate, f: &WaveForecast) -> Option<String> {
    let n = f.outside_window;
    match gate {
        Gate::Open => None,
        Gate::NotYet => Some(format!(
            "{n} migration(s) (a warm wave's: their cutovers) wait for the window, which opens at {}",
            window
                .start
                .as_ref()
                .map_or_else(String::new, |s| s.0.to_string())
        )),
        Gate::Closing if f.migration_seconds.is_none() => Some(format!(
            "{n} migration(s) (a warm wave's: their cutovers) not started: the window ended at {}; \
             move spec.window to start them",
            window.end.0
        )),
        Gate::Closing => Some(format!(
            "{n} migration(s) not started: one takes about {} s ({}), which would end past the \
             window's end at {}; move spec.window.end to start them",
            f.migration_seconds.unwrap_or(0),
            f.basis,
            window.end.0
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::child_migration;
    use ferry_crds::fixtures::{ts, wave};

    /// A migration of `w`'s VM `i` that started `from` and succeeded `to` seconds after t0.
    fn took(w: &MigrationWave, i: usize, from: i64, to: i64) -> VirtualMachineMigration {
        let mut c = child_migration(w, &w.spec.vms[i])
            .unwrap()
            .with_phase(Phase::Succeeded)
            .released();
        let s = c.status.get_or_insert_with(Default::default);
        s.started_at = Some(ts(from));
        s.completed_at = Some(ts(to));
        c
    }

    /// `w`'s first VM's migration took 100 s; the others' are held in Queued.
    fn one_done_the_rest_held(w: &MigrationWave) -> Vec<VirtualMachineMigration> {
        let held = w.spec.vms[1..]
            .iter()
            .map(|vm| child_migration(w, vm).unwrap().with_phase(Phase::Queued));
        std::iter::once(took(w, 0, 0, 100)).chain(held).collect()
    }

    fn window(start: Option<i64>, end: i64) -> MaintenanceWindow {
        MaintenanceWindow {
            start: start.map(ts),
            end: ts(end),
        }
    }

    #[test]
    fn before_its_window_a_wave_is_forecast_by_the_namespace_and_told_when_it_does_not_fit() {
        // Six VMs, two at a time, none started; the namespace's others took 100 s each.
        let mut w = wave("w", 6);
        w.spec.max_in_flight = 2;
        w.spec.window = Some(window(Some(1000), 1250));
        let kids: Vec<VirtualMachineMigration> = w
            .spec
            .vms
            .iter()
            .map(|vm| child_migration(&w, vm).unwrap().with_phase(Phase::Queued))
            .collect();
        let (gate, f) = judge(&w, &kids, Some((100, 40)), &ts(100));
        assert_eq!(gate, Gate::NotYet);
        let f = f.unwrap();
        assert!(f.basis.contains("namespace's 40 other"), "{}", f.basis);
        // From the window's start, not from now: three rounds of 100 s.
        assert_eq!(f.ends_at, Some(ts(1300)));
        assert!(
            f.window_short.contains("50s past the window's end")
                && f.window_short.contains("3 at a time would fit"),
            "{}",
            f.window_short
        );
        assert_eq!(f.at_risk, 2, "the last round ends past the window");
        // Wide enough: nothing said. Open: the gate and the VMs at risk say it instead.
        w.spec.window = Some(window(Some(1000), 1300));
        assert!(
            judge(&w, &kids, Some((100, 40)), &ts(100))
                .1
                .unwrap()
                .window_short
                .is_empty()
        );
        w.spec.window = Some(window(Some(1000), 1250));
        assert!(
            judge(&w, &kids, Some((100, 40)), &ts(1000))
                .1
                .unwrap()
                .window_short
                .is_empty()
        );
        // Its own measure wins over the namespace's.
        let mut own = kids.clone();
        own[0] = took(&w, 0, 1000, 1050);
        let f = judge(&w, &own, Some((100, 40)), &ts(1060)).1.unwrap();
        assert_eq!(f.migration_seconds, Some(50));
        // A window shorter than one migration.
        w.spec.window = Some(window(Some(1000), 1050));
        let f = judge(&w, &kids, Some((100, 40)), &ts(100)).1.unwrap();
        assert!(
            f.window_short.contains("shorter than one migration"),
            "{}",
            f.window_short
        );
    }

    #[test]
    fn a_migration_takes_the_mean_of_those_that_succeeded_from_start_to_end() {
        let w = wave("w", 3);
        assert_eq!(migration_seconds(&[]), None, "nothing measured");
        let done = [took(&w, 0, 10, 110), took(&w, 1, 20, 320)];
        assert_eq!(migration_seconds(&done), Some((200, 2)));
        let mut queued = child_migration(&w, &w.spec.vms[2]).unwrap();
        queued = queued.with_phase(Phase::Queued);
        let with_one_waiting = [done[0].clone(), queued];
        assert_eq!(migration_seconds(&with_one_waiting), Some((100, 1)));
    }

    #[test]
    fn nothing_starts_before_the_window_nor_what_would_end_past_it() {
        let w = Some(window(Some(100), 1000));
        assert_eq!(gate(None, Some(10_000), &ts(0)), Gate::Open, "no window");
        assert_eq!(gate(w.as_ref(), None, &ts(50)), Gate::NotYet);
        assert_eq!(gate(w.as_ref(), None, &ts(100)), Gate::Open);
        assert_eq!(
            gate(w.as_ref(), None, &ts(999)),
            Gate::Open,
            "nothing measured"
        );
        assert_eq!(gate(w.as_ref(), None, &ts(1000)), Gate::Closing, "ended");
        assert_eq!(
            gate(w.as_ref(), Some(300), &ts(700)),
            Gate::Open,
            "ends at the end"
        );
        assert_eq!(
            gate(w.as_ref(), Some(300), &ts(701)),
            Gate::Closing,
            "ends past it"
        );
        let open_now = window(None, 1000);
        assert_eq!(gate(Some(&open_now), Some(300), &ts(0)), Gate::Open);
    }

    #[test]
    fn the_forecast_ends_the_wave_max_in_flight_at_a_time_and_counts_whom_the_window_holds() {
        let mut w = wave("w", 5).with_max_in_flight(2);
        assert_eq!(
            forecast(&w, &[], None, Gate::Open, &ts(0)),
            None,
            "no window, nothing measured"
        );
        let kids = one_done_the_rest_held(&w);
        // Four left, two at a time, 100 s each: 200 s from now.
        let f = forecast(
            &w,
            &kids,
            Measure::own(migration_seconds(&kids)),
            Gate::Open,
            &ts(100),
        )
        .unwrap();
        assert_eq!(f.migration_seconds, Some(100));
        assert_eq!(f.ends_at, Some(ts(300)));
        assert_eq!(f.outside_window, 0);
        assert!(f.basis.contains("1 migration(s)"), "{}", f.basis);
        w.spec.window = Some(window(None, 150));
        let f = forecast(
            &w,
            &kids,
            Measure::own(migration_seconds(&kids)),
            Gate::Closing,
            &ts(100),
        )
        .unwrap();
        assert_eq!(f.outside_window, 4, "every held one");
        let said = held_message(w.spec.window.as_ref().unwrap(), Gate::Closing, &f).unwrap();
        assert!(said.starts_with("4 migration(s) not started"), "{said}");
        assert!(said.contains("about 100 s"), "{said}");
    }

    #[test]
    fn the_forecast_names_the_migrations_that_would_end_past_the_window() {
        let mut w = wave("w", 5).with_max_in_flight(2);
        let kids = one_done_the_rest_held(&w);
        let names: Vec<String> = kids.iter().map(ResourceExt::name_any).collect();
        let f = forecast(
            &w,
            &kids,
            Measure::own(migration_seconds(&kids)),
            Gate::Open,
            &ts(100),
        )
        .unwrap();
        assert_eq!((f.at_risk, f.at_risk_names.len()), (0, 0), "no window");
        // Four left, two at a time, 100 s each: two end at 200, two at 300; the window ends at 250.
        w.spec.window = Some(window(None, 250));
        let f = forecast(
            &w,
            &kids,
            Measure::own(migration_seconds(&kids)),
            Gate::Open,
            &ts(100),
        )
        .unwrap();
        assert_eq!(f.at_risk, 2);
        assert_eq!(
            f.at_risk_names,
            names[3..5],
            "the last two, in spec.vms order"
        );
        // One of them released and running since 100: it ends at 200, in time; of the three
        // held, the first takes the free slot (ends 200), the next two go at 200 (end 300).
        let mut kids = kids;
        kids[1] = kids[1].clone().with_phase(Phase::Importing).released();
        kids[1]
            .status
            .get_or_insert_with(Default::default)
            .started_at = Some(ts(100));
        let f = forecast(
            &w,
            &kids,
            Measure::own(migration_seconds(&kids)),
            Gate::Open,
            &ts(100),
        )
        .unwrap();
        assert_eq!(f.at_risk_names, names[3..5]);
        // Each one's start and end: the running one from its start, the held ones by slot.
        let each: Vec<(&str, i64, i64, bool)> = f
            .vms
            .iter()
            .map(|v| {
                (
                    v.migration.as_str(),
                    v.starts_at.0.as_second() - ts(0).0.as_second(),
                    v.ends_at.0.as_second() - ts(0).0.as_second(),
                    v.at_risk,
                )
            })
            .collect();
        assert_eq!(
            each,
            [
                (names[1].as_str(), 100, 200, false),
                (names[2].as_str(), 100, 200, false),
                (names[3].as_str(), 200, 300, true),
                (names[4].as_str(), 200, 300, true),
            ]
        );
        // A warm wave's cutovers are not measured: nothing said at risk.
        w.spec.template.mode = MigrationMode::Warm;
        let f = forecast(
            &w,
            &kids,
            Measure::own(migration_seconds(&kids)),
            Gate::Open,
            &ts(100),
        )
        .unwrap();
        assert_eq!(f.at_risk, 0);
        assert!(
            f.vms.is_empty(),
            "no start nor end forecast for a warm wave"
        );
    }

    #[test]
    fn the_first_end_forecast_is_kept_as_it_was_made() {
        let mut w = wave("w", 5).with_max_in_flight(2);
        let kids = one_done_the_rest_held(&w);
        let first = forecast(
            &w,
            &kids,
            Measure::own(migration_seconds(&kids)),
            Gate::Open,
            &ts(100),
        )
        .unwrap();
        assert_eq!(
            (first.first_ends_at.clone(), first.first_made_at.clone()),
            (Some(ts(300)), Some(ts(100))),
            "the first forecast is the first"
        );
        w.status = Some(ferry_crds::MigrationWaveStatus {
            forecast: Some(first),
            ..Default::default()
        });
        // Later, slower: the forecast moves, the first stays.
        let later = [took(&w, 0, 0, 100), took(&w, 1, 100, 400)];
        let f = forecast(
            &w,
            &later,
            Measure::own(migration_seconds(&later)),
            Gate::Open,
            &ts(400),
        )
        .unwrap();
        assert_eq!(
            f.ends_at,
            Some(ts(800)),
            "three left, two at a time, 200 s each"
        );
        assert_eq!(
            (f.first_ends_at, f.first_made_at),
            (Some(ts(300)), Some(ts(100)))
        );
        // Nothing measured yet: no first forecast either.
        let none = forecast(&wave("v", 2), &[], None, Gate::Open, &ts(0));
        assert_eq!(none, None);
    }

    #[test]
    fn a_wave_whose_window_would_be_overrun_releases_nothing_and_says_why() {
        use super::super::decide::decide;
        let mut w = wave("w", 3).with_max_in_flight(3);
        let kids = one_done_the_rest_held(&w);
        let open = decide(&w, &kids, &[], &ts(100));
        assert_eq!(open.release.len(), 2, "no window: both start");
        w.spec.window = Some(window(None, 150));
        let plan = decide(&w, &kids, &[], &ts(100));
        assert!(plan.release.is_empty(), "100 s from 100 ends past 150");
        let f = plan.status.forecast.clone().unwrap();
        assert_eq!(f.outside_window, 2);
        let progressing = plan
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == ferry_crds::condition::WaveConditionType::Progressing)
            .unwrap();
        assert_eq!(progressing.reason, ferry_crds::Reason::OutsideWindow);
        assert!(
            progressing.message.contains("2 migration(s) not started"),
            "{}",
            progressing.message
        );
        w.spec.window = Some(window(Some(200), 1000));
        let plan = decide(&w, &kids, &[], &ts(100));
        assert!(plan.release.is_empty(), "not open yet");
        let plan = decide(&w, &kids, &[], &ts(200));
        assert_eq!(plan.release.len(), 2, "open, with time to finish");
    }

    #[test]
    fn a_warm_waves_window_holds_its_cutovers_not_its_first_copies() {
        use super::super::decide::decide;
        let mut w = wave("w", 2).with_max_in_flight(2);
        w.spec.template.mode = MigrationMode::Warm;
        w.spec.warm = Some(ferry_crds::WarmSpec {
            cutover: true,
            ..Default::default()
        });
        w.spec.window = Some(window(Some(1000), 2000));
        let mut precopied = child_migration(&w, &w.spec.vms[0])
            .unwrap()
            .with_phase(Phase::CuttingOver)
            .released();
        precopied.spec.mode = MigrationMode::Warm;
        let held = child_migration(&w, &w.spec.vms[1])
            .unwrap()
            .with_phase(Phase::Queued);
        let kids = vec![precopied, held];
        let before = decide(&w, &kids, &[], &ts(500));
        assert!(before.cutover.is_empty(), "no cutover before the window");
        assert_eq!(before.release.len(), 1, "a first copy starts at once");
        assert_eq!(before.status.forecast.unwrap().outside_window, 1);
        let inside = decide(&w, &kids, &[], &ts(1500));
        assert_eq!(inside.cutover.len(), 1, "the cutover in the window");
        let after = decide(&w, &kids, &[], &ts(2000));
        assert!(after.cutover.is_empty(), "none once it ended");
    }
}
