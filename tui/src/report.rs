//! `ferry report`: the record of a wave a change ticket asks for. Per VM the phases with their
//! times, the downtime, the bytes moved, the attempts, how it ended and why; totals per wave.
//! [`build`] is pure (the listed objects and the clock in, a [`Report`] out); [`markdown`],
//! [`csv`] and the JSON of [`Report`] only write it out.

use std::collections::BTreeMap;

use ferry_crds::{
    ConditionStatus, ConditionType, Phase, SourcePowerOff, Stage, VirtualMachineMigration,
    VirtualMachineMigrationStatus, source::PowerRestoreResult,
};
use serde::Serialize;

use crate::{state::Timestamp, strings::report as text, ui::format};

/// One stay in a phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stay {
    /// The phase.
    pub phase: Phase,
    /// The attempt it belonged to.
    pub attempt: i32,
    /// When it was entered.
    pub entered_at: Timestamp,
    /// When it was left; `None` for the phase it is in.
    pub left_at: Option<Timestamp>,
    /// How long it lasted (until the report, for the current one).
    pub seconds: i64,
}

/// One stretch of the VM out of service: from the moment ferry began powering the source off
/// (`status.sourcePowerOff`: the guest shutdown asked for, else the hard power-off) until the
/// migrated VM ran (`VMStarted` turned True), or until ferry powered the source back on. A
/// retry that starts over keeps its attempt's stretch (`status.earlierOutages`), so a VM
/// retried after its source was powered back on has one per attempt.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outage {
    /// The attempt whose power-off began it.
    pub attempt: i32,
    /// When ferry began powering the source off.
    pub from: Timestamp,
    /// When the VM ran again (migrated, or the source powered back on); `None`: still down.
    pub to: Option<Timestamp>,
    /// What ended it; `None` with an end: the source was powered on outside ferry before
    /// ferry's next power-off (the end is that power-off, at the latest).
    pub ended_by: Option<DowntimeEnd>,
    /// Its length (until the report, while still down).
    pub seconds: i64,
}

/// What ended a downtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DowntimeEnd {
    /// The migrated VM ran.
    Migrated,
    /// ferry powered the source back on (cancel, or failure under OnCancelOrFailure).
    SourceRestored,
}

/// The last failure, as `status.lastFailure` has it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The checkpoint that failed.
    pub phase: Phase,
    /// Why.
    pub reason: &'static str,
    /// The controller's message, whole.
    pub message: String,
    /// When.
    pub at: Timestamp,
    /// Whether the migration failed with it (else a retry got past it).
    pub is_final: bool,
}

/// One VM's migration.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmRecord {
    /// Namespace of the migration.
    pub namespace: String,
    /// The migration's name.
    pub name: String,
    /// Its wave, if any.
    pub wave: Option<String>,
    /// The source VM as the spec names it.
    pub source_vm: String,
    /// The KubeVirt VM.
    pub target_vm: String,
    /// Where it ended (or is).
    pub phase: Phase,
    /// Attempts made (1 + retries).
    pub attempts: i32,
    /// When work began and when it ended.
    pub started_at: Option<Timestamp>,
    /// See [`VmRecord::started_at`].
    pub completed_at: Option<Timestamp>,
    /// Every phase it went through, oldest first (the last 32, as `status.history` keeps).
    pub phases: Vec<Stay>,
    /// Bytes copied, of how many.
    pub bytes_moved: i64,
    /// See [`VmRecord::bytes_moved`].
    pub bytes_total: i64,
    /// Every stretch out of service, oldest first; empty when ferry never powered the source
    /// off (it was off, or not reached yet).
    pub outages: Vec<Outage>,
    /// The outages added up; `None` when there was none.
    pub downtime_seconds: Option<i64>,
    /// The last failure, if any.
    pub failure: Option<Failure>,
}

/// A wave's totals (the migrations of no wave are totalled as one, `wave: None`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// The wave.
    pub wave: Option<String>,
    /// Migrations.
    pub vms: usize,
    /// How they ended.
    pub succeeded: usize,
    /// See [`Totals::succeeded`].
    pub failed: usize,
    /// See [`Totals::succeeded`].
    pub cancelled: usize,
    /// Neither ended nor failed yet.
    pub under_way: usize,
    /// Retries made (attempts beyond the first).
    pub retries: i64,
    /// Bytes copied.
    pub bytes_moved: i64,
    /// Downtime of all its VMs added up (every attempt's), and the longest VM's.
    pub downtime_seconds: i64,
    /// See [`Totals::downtime_seconds`].
    pub longest_downtime_seconds: i64,
    /// The first start and the last end.
    pub started_at: Option<Timestamp>,
    /// See [`Totals::started_at`]; `None` while one is under way.
    pub completed_at: Option<Timestamp>,
    /// The wave's first forecast of its end (`status.forecast`), held against its end.
    pub forecast: Option<ForecastCheck>,
}

/// A wave's first forecast of its end, as `status.forecast` keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FirstForecast {
    /// When it was made.
    pub made_at: Timestamp,
    /// The end it forecast.
    pub ends_at: Timestamp,
}

/// A first forecast against the end the wave had.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForecastCheck {
    /// The forecast.
    #[serde(flatten)]
    pub first: FirstForecast,
    /// How far off it was, in percent of the time from the forecast to the end
    /// (|forecast − end| / (end − made)); `None` while the wave is under way.
    pub error_percent: Option<f64>,
}

impl ForecastCheck {
    fn against(first: FirstForecast, completed_at: Option<Timestamp>) -> Self {
        let error_percent = completed_at.map(|end| {
            let off = (first.ends_at.as_second() - end.as_second()).abs();
            let span = (end.as_second() - first.made_at.as_second()).max(1);
            100.0 * off as f64 / span as f64
        });
        ForecastCheck {
            first,
            error_percent,
        }
    }
}

/// The first forecast of a wave's end that `status.forecast` keeps, if one was made.
pub fn first_forecast(w: &ferry_crds::MigrationWave) -> Option<FirstForecast> {
    let f = w.status.as_ref()?.forecast.as_ref()?;
    Some(FirstForecast {
        made_at: f.first_made_at.as_ref()?.0,
        ends_at: f.first_ends_at.as_ref()?.0,
    })
}

/// The report.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// When it was made.
    pub generated_at: Timestamp,
    /// The wave asked for, if one was.
    pub wave: Option<String>,
    /// One record per migration, by wave, then namespace and name.
    pub vms: Vec<VmRecord>,
    /// One per wave, in the same order.
    pub totals: Vec<Totals>,
}

fn secs(from: Timestamp, to: Timestamp) -> i64 {
    to.duration_since(from).as_secs().max(0)
}

/// When the VM ran again after `from`: the migrated VM started, or ferry powered the source
/// back on.
fn end_after(
    s: &VirtualMachineMigrationStatus,
    from: Timestamp,
) -> Option<(Timestamp, DowntimeEnd)> {
    let ran = s
        .condition(ConditionType::VMStarted)
        .filter(|c| c.status == ConditionStatus::True && c.last_transition_time.0 >= from)
        .map(|c| (c.last_transition_time.0, DowntimeEnd::Migrated));
    let restored = s
        .source_power_restore
        .as_ref()
        .filter(|r| r.result == Some(PowerRestoreResult::PoweredOn))
        .and_then(|r| r.finished_at.as_ref())
        .filter(|t| t.0 >= from)
        .map(|t| (t.0, DowntimeEnd::SourceRestored));
    ran.or(restored)
}

fn outages(o: &VirtualMachineMigration, now: Timestamp) -> Vec<Outage> {
    let Some(s) = o.status.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Outage> = s
        .earlier_outages
        .iter()
        .map(|e| Outage {
            attempt: e.attempt,
            from: e.from.0,
            to: e.restored_at.as_ref().map(|t| t.0),
            ended_by: e.restored_at.as_ref().map(|_| DowntimeEnd::SourceRestored),
            seconds: 0,
        })
        .collect();
    let current = s
        .source_power_off
        .as_ref()
        .and_then(SourcePowerOff::began_at)
        .map(|t| t.0);
    let open = out.last_mut().filter(|l| l.to.is_none());
    match (current, open) {
        // The source stayed off into this attempt, which found it off: one stretch goes on.
        (None, Some(open)) => {
            let end = end_after(s, open.from);
            open.to = end.map(|(t, _)| t);
            open.ended_by = end.map(|(_, e)| e);
        }
        (None, None) => {}
        (Some(from), open) => {
            // Someone powered it on in between, unseen: that stretch ended by this power-off.
            if let Some(open) = open {
                open.to = Some(from);
            }
            let end = end_after(s, from);
            // The attempt it began in: a retry that resumes past Preparing keeps the record.
            let attempt = s
                .history
                .iter()
                .rev()
                .find(|h| h.entered_at.0 <= from)
                .map_or(s.attempts, |h| h.attempt);
            out.push(Outage {
                attempt,
                from,
                to: end.map(|(t, _)| t),
                ended_by: end.map(|(_, e)| e),
                seconds: 0,
            });
        }
    }
    for o in &mut out {
        o.seconds = secs(o.from, o.to.unwrap_or(now));
    }
    out
}

fn record(o: &VirtualMachineMigration, now: Timestamp) -> VmRecord {
    let status = o.status.clone().unwrap_or_default();
    let phases = status
        .history
        .iter()
        .map(|h| Stay {
            phase: h.phase,
            attempt: h.attempt,
            entered_at: h.entered_at.0,
            left_at: h.left_at.as_ref().map(|t| t.0),
            seconds: secs(h.entered_at.0, h.left_at.as_ref().map_or(now, |t| t.0)),
        })
        .collect();
    let outages = outages(o, now);
    let (bytes_moved, bytes_total) = status
        .progress
        .as_ref()
        .map_or((0, 0), |p| (p.bytes_done, p.bytes_total));
    VmRecord {
        namespace: o.metadata.namespace.clone().unwrap_or_default(),
        name: o.metadata.name.clone().unwrap_or_default(),
        wave: o.wave().map(str::to_owned),
        source_vm: o.spec.source.vm.value().unwrap_or_default().to_owned(),
        target_vm: ferry_crds::names::vm_name(o),
        phase: status.phase,
        attempts: status.attempts,
        started_at: status.started_at.as_ref().map(|t| t.0),
        completed_at: status.completed_at.as_ref().map(|t| t.0),
        phases,
        bytes_moved,
        bytes_total,
        downtime_seconds: (!outages.is_empty()).then(|| outages.iter().map(|o| o.seconds).sum()),
        outages,
        failure: status.last_failure.as_ref().map(|f| Failure {
            phase: f.phase,
            reason: f.reason.as_str(),
            message: f.message.clone(),
            at: f.time.0,
            is_final: status.phase.stage() == Stage::Failed,
        }),
    }
}

fn add(t: &mut Totals, r: &VmRecord) {
    t.vms += 1;
    match r.phase.stage() {
        Stage::Succeeded => t.succeeded += 1,
        Stage::Failed => t.failed += 1,
        Stage::Cancelled => t.cancelled += 1,
        Stage::Pending | Stage::Queued | Stage::InFlight => t.under_way += 1,
    }
    t.retries += i64::from((r.attempts - 1).max(0));
    t.bytes_moved += r.bytes_moved;
    if let Some(d) = r.downtime_seconds {
        t.downtime_seconds += d;
        t.longest_downtime_seconds = t.longest_downtime_seconds.max(d);
    }
    t.started_at = match (t.started_at, r.started_at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
}

/// The report of `migrations` at `now` (`wave`: the one asked for, for the title; the caller
/// lists only its migrations; `forecasts`: each wave's first forecast of its end, by name).
///
/// # Guarantees
/// Pure. One record per migration, sorted by wave (none last), namespace and name; one
/// [`Totals`] per wave that has a migration, adding up exactly its records; a wave's
/// `completedAt` is its last migration's end, and `None` while any is under way; its forecast
/// is held against that end.
pub fn build<'a>(
    migrations: impl IntoIterator<Item = &'a VirtualMachineMigration>,
    forecasts: &BTreeMap<String, FirstForecast>,
    wave: Option<&str>,
    now: Timestamp,
) -> Report {
    let mut vms: Vec<VmRecord> = migrations.into_iter().map(|o| record(o, now)).collect();
    vms.sort_by(|a, b| {
        (a.wave.is_none(), &a.wave, &a.namespace, &a.name).cmp(&(
            b.wave.is_none(),
            &b.wave,
            &b.namespace,
            &b.name,
        ))
    });
    let mut by_wave: BTreeMap<(bool, Option<String>), Totals> = BTreeMap::new();
    let mut open: BTreeMap<(bool, Option<String>), bool> = BTreeMap::new();
    for r in &vms {
        let k = (r.wave.is_none(), r.wave.clone());
        let t = by_wave.entry(k.clone()).or_insert_with(|| Totals {
            wave: r.wave.clone(),
            ..Totals::default()
        });
        add(t, r);
        let ended = r.phase.is_terminal() && r.completed_at.is_some();
        *open.entry(k).or_insert(false) |= !ended;
        if ended {
            t.completed_at = t.completed_at.max(r.completed_at);
        }
    }
    let totals = by_wave
        .into_iter()
        .map(|(k, mut t)| {
            if open.get(&k).copied().unwrap_or(false) {
                t.completed_at = None;
            }
            t.forecast = t
                .wave
                .as_ref()
                .and_then(|w| forecasts.get(w))
                .map(|f| ForecastCheck::against(*f, t.completed_at));
            t
        })
        .collect();
    Report {
        generated_at: now,
        wave: wave.map(str::to_owned),
        vms,
        totals,
    }
}

/// A time as a ticket writes it: UTC, to the second.
fn when(t: Option<Timestamp>) -> String {
    t.map_or_else(
        || text::NONE.to_owned(),
        |t| t.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

/// The phases of one attempt after another: `Preparing 12s · Converting 1m02s`, a new
/// attempt starting with `(attempt 2)`.
fn phases_line(r: &VmRecord) -> String {
    let mut out = String::new();
    let mut attempt = None;
    for s in &r.phases {
        if !out.is_empty() {
            out.push_str(" · ");
        }
        if attempt.is_some_and(|a| a != s.attempt) {
            out.push_str(&text::attempt(s.attempt));
        }
        attempt = Some(s.attempt);
        out.push_str(s.phase.as_str());
        // The phase it ended in has no length worth a column.
        if s.left_at.is_some() || !s.phase.is_terminal() {
            out.push(' ');
            out.push_str(&format::duration(s.seconds));
        }
    }
    out
}

fn outage_cell(o: &Outage) -> String {
    let d = format::duration(o.seconds);
    match (o.ended_by, o.to) {
        (Some(DowntimeEnd::Migrated), _) => d,
        (Some(DowntimeEnd::SourceRestored), _) => text::restored(&d),
        (None, Some(_)) => text::powered_on_elsewhere(&d),
        (None, None) => text::still_down(&d),
    }
}

/// One outage as it is; several each with its attempt, then their sum.
fn downtime_cell(v: &VmRecord) -> String {
    match v.outages.as_slice() {
        [] => text::NONE.to_owned(),
        [one] => outage_cell(one),
        many => {
            let each: Vec<String> = many
                .iter()
                .map(|o| text::of_attempt(o.attempt, &outage_cell(o)))
                .collect();
            text::outages_summed(
                &each.join(" · "),
                &format::duration(v.downtime_seconds.unwrap_or_default()),
            )
        }
    }
}

/// The outages in a CSV field: `#attempt=seconds:end` each, `;` between.
fn outages_field(v: &VmRecord) -> String {
    let each: Vec<String> = v
        .outages
        .iter()
        .map(|o| {
            let end = match (o.ended_by, o.to) {
                (Some(DowntimeEnd::Migrated), _) => "migrated",
                (Some(DowntimeEnd::SourceRestored), _) => "restored",
                (None, Some(_)) => "poweredOnElsewhere",
                (None, None) => "down",
            };
            format!("#{}={}:{end}", o.attempt, o.seconds)
        })
        .collect();
    each.join(";")
}

fn failure_cell(f: Option<&Failure>) -> String {
    f.map_or_else(String::new, |f| {
        let line = f.message.split_whitespace().collect::<Vec<_>>().join(" ");
        let cell = format!("{} in {}: {line}", f.reason, f.phase);
        if f.is_final {
            cell
        } else {
            text::retried_past(&cell)
        }
    })
}

/// A markdown table cell: pipes escaped, on one line.
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The report as markdown: a title, a table with a line per VM, and the totals per wave.
pub fn markdown(r: &Report) -> String {
    let mut out = format!(
        "# {}\n\n{}\n\n",
        text::title(r.wave.as_deref()),
        text::generated(&when(Some(r.generated_at)))
    );
    out.push_str(&format!("| {} |\n", text::VM_COLUMNS.join(" | ")));
    out.push_str(&format!("|{}\n", "---|".repeat(text::VM_COLUMNS.len())));
    for v in &r.vms {
        let cells = [
            v.name.clone(),
            v.source_vm.clone(),
            v.wave.clone().unwrap_or_else(|| text::NONE.to_owned()),
            v.phase.as_str().to_owned(),
            v.attempts.to_string(),
            when(v.started_at),
            when(v.completed_at),
            phases_line(v),
            text::bytes(&format::bytes(v.bytes_moved), &format::bytes(v.bytes_total)),
            downtime_cell(v),
            failure_cell(v.failure.as_ref()),
        ];
        let cells: Vec<String> = cells.iter().map(|c| md(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out.push_str(&format!("\n## {}\n\n", text::TOTALS));
    out.push_str(&format!("| {} |\n", text::TOTAL_COLUMNS.join(" | ")));
    out.push_str(&format!("|{}\n", "---|".repeat(text::TOTAL_COLUMNS.len())));
    for t in &r.totals {
        let cells = [
            t.wave.clone().unwrap_or_else(|| text::NO_WAVE.to_owned()),
            t.vms.to_string(),
            t.succeeded.to_string(),
            t.failed.to_string(),
            t.cancelled.to_string(),
            t.under_way.to_string(),
            t.retries.to_string(),
            format::bytes(t.bytes_moved),
            text::downtime_totals(
                &format::duration(t.downtime_seconds),
                &format::duration(t.longest_downtime_seconds),
            ),
            when(t.started_at),
            when(t.completed_at),
            t.forecast.map_or_else(
                || text::NONE.to_owned(),
                |f| {
                    text::forecast(
                        &when(Some(f.first.ends_at)),
                        &when(Some(f.first.made_at)),
                        f.error_percent,
                    )
                },
            ),
        ];
        let cells: Vec<String> = cells.iter().map(|c| md(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

/// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The report as CSV, one line per VM (`row` = `vm`), then one per wave (`row` = `total`, with
/// its counts in the last columns), in one set of columns; times in RFC 3339, lengths in
/// seconds, bytes as numbers, messages whole.
pub fn csv(r: &Report) -> String {
    let mut out = text::CSV_COLUMNS.join(",");
    out.push('\n');
    let t = |t: Option<Timestamp>| t.map(|t| t.to_string()).unwrap_or_default();
    let empty = String::new();
    for v in &r.vms {
        let phases: Vec<String> = v
            .phases
            .iter()
            .map(|s| format!("{}#{}={}", s.phase.as_str(), s.attempt, s.seconds))
            .collect();
        let row = [
            "vm".to_owned(),
            v.wave.clone().unwrap_or_default(),
            v.namespace.clone(),
            v.name.clone(),
            v.source_vm.clone(),
            v.phase.as_str().to_owned(),
            v.attempts.to_string(),
            t(v.started_at),
            t(v.completed_at),
            phases.join(";"),
            v.bytes_moved.to_string(),
            v.bytes_total.to_string(),
            v.downtime_seconds
                .map(|d| d.to_string())
                .unwrap_or_default(),
            t(v.outages.first().map(|o| o.from)),
            t(v.outages.last().and_then(|o| o.to)),
            outages_field(v),
            v.failure
                .as_ref()
                .map(|f| f.reason.to_owned())
                .unwrap_or_default(),
            v.failure
                .as_ref()
                .map(|f| f.message.clone())
                .unwrap_or_default(),
        ];
        // A VM's line leaves the totals' columns empty.
        let row: Vec<&String> = row.iter().chain(std::iter::repeat_n(&empty, 9)).collect();
        let row: Vec<String> = row.iter().map(|c| field(c)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    for w in &r.totals {
        let mut row = vec!["total".to_owned(), w.wave.clone().unwrap_or_default()];
        // The per-VM columns stay empty but for the ones a total has.
        row.extend(std::iter::repeat_n(String::new(), 5));
        row.extend([
            t(w.started_at),
            t(w.completed_at),
            String::new(),
            w.bytes_moved.to_string(),
            String::new(),
            w.downtime_seconds.to_string(),
        ]);
        row.extend(std::iter::repeat_n(String::new(), 5));
        row.extend([
            w.vms.to_string(),
            w.succeeded.to_string(),
            w.failed.to_string(),
            w.cancelled.to_string(),
            w.under_way.to_string(),
            w.retries.to_string(),
            t(w.forecast.map(|f| f.first.made_at)),
            t(w.forecast.map(|f| f.first.ends_at)),
            w.forecast
                .and_then(|f| f.error_percent)
                .map(|e| format!("{e:.1}"))
                .unwrap_or_default(),
        ]);
        let row: Vec<String> = row.iter().map(|c| field(c)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use ferry_crds::{
        LastFailure, PhaseTransition, Progress, Reason, SourcePowerOff,
        fixtures::{migration, ts},
    };

    use super::*;

    /// A migration of `wave` through `phases` (each 60 s, from t=100), ending in `end`.
    fn through(
        name: &str,
        wave: Option<&str>,
        phases: &[(Phase, i32)],
        end: Phase,
    ) -> VirtualMachineMigration {
        let mut o = migration(name);
        if let Some(w) = wave {
            o = o.in_wave(w);
        }
        let mut o = o.with_phase(end);
        o.metadata.namespace = Some("ns".into());
        let s = o.status.as_mut().unwrap();
        let mut at = 100;
        for (p, attempt) in phases
            .iter()
            .chain([(end, phases.last().map_or(1, |p| p.1))].iter())
        {
            s.history.push(PhaseTransition {
                phase: *p,
                attempt: *attempt,
                entered_at: ts(at),
                left_at: (*p != end).then(|| ts(at + 60)),
            });
            at += 60;
        }
        s.attempts = phases.last().map_or(1, |p| p.1);
        s.started_at = Some(ts(100));
        if end.is_terminal() {
            s.completed_at = Some(ts(at - 60));
        }
        s.progress = Some(Progress {
            percent: 100.0,
            bytes_done: 1000,
            bytes_total: 1000,
            rate_bytes_per_second: None,
            eta_seconds: None,
        });
        o
    }

    use Phase::{Converting, CreatingVM, Importing, Preparing, Starting, Validating};

    /// The migrated VM ran at `at` (`VMStarted` turned True).
    fn ran_at(s: &mut ferry_crds::VirtualMachineMigrationStatus, at: i64) {
        ferry_crds::condition::set_condition(
            &mut s.conditions,
            ConditionType::VMStarted,
            ConditionStatus::True,
            Reason::VMRunning,
            "",
            Some(1),
            &ts(at),
        );
    }

    const ALL: [(Phase, i32); 6] = [
        (Preparing, 1),
        (Converting, 1),
        (Importing, 1),
        (CreatingVM, 1),
        (Starting, 1),
        (Validating, 1),
    ];

    #[test]
    fn downtime_runs_from_the_first_power_off_request_to_the_vm_running() {
        let mut o = through("a", Some("w"), &ALL, Phase::Succeeded);
        let s = o.status.as_mut().unwrap();
        s.source_power_off = Some(SourcePowerOff {
            shutdown_guest_at: Some(ts(130)),
            hard_power_off_at: Some(ts(430)),
        });
        ran_at(s, 400);
        let r = build([&o], &BTreeMap::new(), Some("w"), ts(1000).0);
        let [d] = r.vms[0].outages.as_slice() else {
            panic!("one outage: {:?}", r.vms[0].outages);
        };
        assert_eq!((d.from, d.to, d.seconds), (ts(130).0, Some(ts(400).0), 270));
        assert_eq!((d.ended_by, d.attempt), (Some(DowntimeEnd::Migrated), 1));
        assert_eq!(r.vms[0].downtime_seconds, Some(270));
        // Never powered off by ferry: no downtime to report.
        let never = through("b", Some("w"), &ALL, Phase::Succeeded);
        let never = &build([&never], &BTreeMap::new(), None, ts(1000).0).vms[0];
        assert_eq!((never.outages.len(), never.downtime_seconds), (0, None));
    }

    #[test]
    fn a_failed_vm_still_down_counts_until_the_report_and_its_failure_is_whole() {
        let mut o = through("a", Some("w"), &ALL[..3], Phase::Failed);
        let s = o.status.as_mut().unwrap();
        s.source_power_off = Some(SourcePowerOff {
            shutdown_guest_at: None,
            hard_power_off_at: Some(ts(150)),
        });
        s.last_failure = Some(LastFailure {
            phase: Importing,
            reason: Reason::ImportFailed,
            message: "DataVolume a-disk-0 failed:\nUnable to process | data".into(),
            retriable: true,
            time: ts(280),
            cause: None,
        });
        let r = build([&o], &BTreeMap::new(), Some("w"), ts(1150).0);
        let v = &r.vms[0];
        let d = &v.outages[0];
        assert_eq!((d.to, d.seconds), (None, 1000));
        assert!(v.failure.as_ref().unwrap().is_final);
        let md = markdown(&r);
        // One table line for the VM: the pipe escaped, the line break a space.
        let line = md.lines().find(|l| l.starts_with("| a |")).unwrap();
        assert!(
            line.contains(
                "ImportFailed in Importing: DataVolume a-disk-0 failed: Unable to process \\| data"
            ),
            "{line}"
        );
        assert!(line.contains(&text::still_down("16m40s")), "{line}");
        let csv = csv(&r);
        assert!(
            csv.contains("\"DataVolume a-disk-0 failed:\nUnable to process | data\""),
            "{csv}"
        );
    }

    /// Attempt 1 powered the source off at 130, failed, and ferry powered it back on at 220;
    /// the retry started over, powered it off again at 400, and the VM ran at 700.
    fn retried_after_a_restore() -> VirtualMachineMigration {
        let mut o = through(
            "r",
            Some("w"),
            &[
                (Preparing, 1),
                (Converting, 1),
                (Preparing, 2),
                (Converting, 2),
            ],
            Phase::Succeeded,
        );
        let s = o.status.as_mut().unwrap();
        s.earlier_outages = vec![ferry_crds::SourceOutage {
            attempt: 1,
            from: ts(130),
            restored_at: Some(ts(220)),
        }];
        s.source_power_off = Some(SourcePowerOff {
            shutdown_guest_at: Some(ts(400)),
            hard_power_off_at: None,
        });
        ran_at(s, 700);
        o
    }

    #[test]
    fn a_vm_retried_after_its_source_was_restored_keeps_both_outages_in_every_format() {
        let o = retried_after_a_restore();
        let r = build([&o], &BTreeMap::new(), Some("w"), ts(1000).0);
        let v = &r.vms[0];
        let got: Vec<_> = v
            .outages
            .iter()
            .map(|o| (o.attempt, o.seconds, o.ended_by))
            .collect();
        assert_eq!(
            got,
            [
                (1, 90, Some(DowntimeEnd::SourceRestored)),
                (2, 300, Some(DowntimeEnd::Migrated))
            ]
        );
        assert_eq!(v.downtime_seconds, Some(390));
        assert_eq!(r.totals[0].downtime_seconds, 390);
        let md = markdown(&r);
        let line = md.lines().find(|l| l.starts_with("| r |")).unwrap();
        assert!(
            line.contains(
                "6m30s in all (attempt 1: 1m30s (source powered back on) · attempt 2: 5m00s)"
            ),
            "{line}"
        );
        let csv = csv(&r);
        let row = csv.lines().nth(1).unwrap();
        let col = |name: &str| {
            let i = text::CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
            row.split(',').nth(i).unwrap().to_owned()
        };
        assert_eq!(col("downtime_seconds"), "390");
        assert_eq!(col("outages"), "#1=90:restored;#2=300:migrated");
        assert_eq!(col("downtime_from"), ts(130).0.to_string());
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["vms"][0]["downtimeSeconds"], 390);
        assert_eq!(json["vms"][0]["outages"][0]["endedBy"], "SourceRestored");
        assert_eq!(json["vms"][0]["outages"][1]["attempt"], 2);
    }

    #[test]
    fn a_source_left_off_into_the_next_attempt_is_one_outage() {
        let mut o = retried_after_a_restore();
        let s = o.status.as_mut().unwrap();
        // Not powered back on: attempt 2 found it off and powered nothing off.
        s.earlier_outages[0].restored_at = None;
        s.source_power_off = Some(SourcePowerOff::default());
        let v = &build([&o], &BTreeMap::new(), Some("w"), ts(1000).0).vms[0];
        let got: Vec<_> = v
            .outages
            .iter()
            .map(|o| (o.attempt, o.seconds, o.ended_by))
            .collect();
        assert_eq!(got, [(1, 570, Some(DowntimeEnd::Migrated))]);
        // Powered on by someone else in between, then off again by ferry at 400.
        let s = o.status.as_mut().unwrap();
        s.source_power_off = Some(SourcePowerOff {
            shutdown_guest_at: Some(ts(400)),
            hard_power_off_at: None,
        });
        let v = &build([&o], &BTreeMap::new(), Some("w"), ts(1000).0).vms[0];
        let got: Vec<_> = v
            .outages
            .iter()
            .map(|o| (o.attempt, o.seconds, o.ended_by))
            .collect();
        assert_eq!(got, [(1, 270, None), (2, 300, Some(DowntimeEnd::Migrated))]);
        assert!(
            markdown(&build([&o], &BTreeMap::new(), None, ts(1000).0))
                .contains("(powered on outside ferry)")
        );
    }

    #[test]
    fn a_waves_first_forecast_is_held_against_its_end_in_every_format() {
        let objs = [
            through("a", Some("w1"), &ALL, Phase::Succeeded),
            through("c", Some("w2"), &ALL[..2], Importing),
        ];
        let end = build(&objs, &BTreeMap::new(), None, ts(5000).0).totals[0]
            .completed_at
            .unwrap()
            .as_second()
            - ts(0).0.as_second();
        // Made 100 s after the start, forecasting an end 10 % of the rest too late.
        let made = 200;
        let forecast = |at: i64| FirstForecast {
            made_at: ts(made).0,
            ends_at: ts(at).0,
        };
        let forecasts = BTreeMap::from([
            ("w1".to_owned(), forecast(end + (end - made) / 10)),
            ("w2".to_owned(), forecast(9000)),
        ]);
        let r = build(&objs, &forecasts, None, ts(5000).0);
        let w1 = r.totals[0].forecast.unwrap();
        assert_eq!(w1.first.made_at, ts(made).0);
        assert!((w1.error_percent.unwrap() - 10.0).abs() < 0.5, "{w1:?}");
        let w2 = r.totals[1].forecast.unwrap();
        assert_eq!(
            w2.error_percent, None,
            "under way: nothing to hold it against"
        );
        assert!(r.totals.iter().all(|t| t.wave.is_some()));

        let md = markdown(&r);
        assert!(md.contains("| First forecast of the end |"), "{md}");
        assert!(md.contains("): 10 % off |"), "{md}");
        let csv = csv(&r);
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let w1_line: Vec<&str> = csv
            .lines()
            .find(|l| l.starts_with("total,w1,"))
            .unwrap()
            .split(',')
            .collect();
        assert_eq!(w1_line.len(), header.len());
        assert_eq!(w1_line[col("forecast_error_percent")], "10.0");
        assert_eq!(w1_line[col("forecast_made_at")], ts(made).0.to_string());
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["totals"][0]["forecast"]["madeAt"],
            ts(made).0.to_string()
        );
        // A VM's line keeps every column, the forecast's empty.
        let vm_line = csv.lines().find(|l| l.starts_with("vm,")).unwrap();
        assert_eq!(vm_line.split(',').count(), header.len(), "{vm_line}");
    }

    #[test]
    fn totals_add_up_their_waves_records_and_stay_open_while_one_is_under_way() {
        let mut retried = through(
            "r",
            Some("w1"),
            &[
                (Preparing, 1),
                (Converting, 1),
                (Converting, 2),
                (Importing, 2),
            ],
            Phase::Succeeded,
        );
        retried
            .status
            .as_mut()
            .unwrap()
            .progress
            .as_mut()
            .unwrap()
            .bytes_done = 500;
        let objs = [
            through("a", Some("w1"), &ALL, Phase::Succeeded),
            retried,
            through("b", Some("w1"), &ALL[..2], Phase::Failed),
            through("c", Some("w2"), &ALL[..2], Importing),
            through("d", None, &ALL, Phase::Cancelled),
        ];
        let r = build(&objs, &BTreeMap::new(), None, ts(5000).0);
        let names: Vec<&str> = r.vms.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "r", "c", "d"], "by wave, none last");
        let w1 = &r.totals[0];
        assert_eq!(w1.wave.as_deref(), Some("w1"));
        assert_eq!(
            (
                w1.vms,
                w1.succeeded,
                w1.failed,
                w1.cancelled,
                w1.under_way,
                w1.retries
            ),
            (3, 2, 1, 0, 0, 1)
        );
        assert_eq!(w1.bytes_moved, 2500);
        assert_eq!(w1.started_at, Some(ts(100).0));
        let last_end = r.vms[..3].iter().filter_map(|v| v.completed_at).max();
        assert_eq!(w1.completed_at, last_end);
        assert_eq!(r.totals[1].under_way, 1);
        assert_eq!(r.totals[1].completed_at, None, "w2 is under way");
        assert_eq!(r.totals[2].wave, None);
        let sum: usize = r.totals.iter().map(|t| t.vms).sum();
        assert_eq!(sum, r.vms.len());
        // A retry reads as such in the phases.
        assert!(
            phases_line(&r.vms[2]).contains(&text::attempt(2)),
            "{}",
            phases_line(&r.vms[2])
        );
    }
}
