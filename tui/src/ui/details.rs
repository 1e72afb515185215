//! Details of one migration: spec summary, preflight's concerns, conditions, disks, children,
//! phase timeline, and its live Events. Two columns on wide screens, one scrolling column otherwise.
//! The board's rows keep no object: the view draws the copy it read on opening and the watch
//! keeps current ([`crate::state::Opened`]), and says so while it is read or when it cannot be.

use ferry_crds::{ConditionType, Severity, VirtualMachineMigration};
use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use super::{
    Theme, format,
    preflight::severity_style,
    scrolled::{self, Body},
};
use crate::{
    state::{
        EventKind, ObjKey, Pip, Row, State,
        messages::{self, About},
    },
    strings::{self, details as text, view},
};

fn section(title: &str, t: &Theme) -> Line<'static> {
    Line::styled(format!("── {title} "), t.title())
}

fn label(k: &str, t: &Theme) -> Span<'static> {
    Span::styled(format!("  {k:<9}"), t.dim())
}

/// The label of a message the copy key would take: marked as the board marks its cursor.
fn message_label(k: &str, selected: bool, t: &Theme) -> Span<'static> {
    if selected {
        Span::styled(format!("{} {k:<9}", MARKER), t.key())
    } else {
        label(k, t)
    }
}

/// The glyph in front of the selected message (as the board's cursor).
const MARKER: &str = "▸";

/// `s` in lines of at most `width` characters, its own line breaks kept (a failure may carry
/// a tool's output of several lines), blank lines dropped.
fn wrap_message(s: &str, width: usize) -> Vec<String> {
    let mut out: Vec<String> = s
        .lines()
        .filter(|l| !l.trim().is_empty())
        .flat_map(|l| format::wrap(l, width))
        .collect();
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

/// A labelled value wrapped under itself: the label, then the value's lines after
/// [`VALUE_INDENT`] columns, each in `style`.
fn wrapped_value(
    head: Span<'static>,
    value: &str,
    width: usize,
    style: ratatui::style::Style,
) -> Vec<Line<'static>> {
    wrap_message(value, width.saturating_sub(VALUE_INDENT))
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let lead = if i == 0 {
                head.clone()
            } else {
                Span::raw(" ".repeat(VALUE_INDENT))
            };
            Line::from(vec![lead, Span::styled(l, style)])
        })
        .collect()
}

fn kv(k: &str, v: String, t: &Theme) -> Line<'static> {
    Line::from(vec![label(k, t), Span::raw(v)])
}

fn summary(
    row: &Row,
    o: &VirtualMachineMigration,
    state: &State,
    t: &Theme,
    width: usize,
    selected: Option<&About>,
) -> Vec<Line<'static>> {
    let status = o.status.clone().unwrap_or_default();
    let mut out = spec(o, t);
    out.push(intents(row, o, &status, state, t));
    out.push(section(text::STATUS, t));
    let started = status
        .started_at
        .as_ref()
        .map(|t| format::age(Some(t.0), state.now));
    out.push(Line::from(vec![
        label(text::PHASE, t),
        Span::styled(row.phase.as_str(), t.phase(row.phase)),
        Span::raw(text::in_phase(
            &format::age(row.phase_since, state.now),
            row.attempt,
            started.as_deref(),
        )),
    ]));
    if let Some(p) = &status.progress {
        out.push(kv(text::PROGRESS, progress(p), t));
    }
    if let Some(w) = warm(o, &status, state.now) {
        out.extend(wrapped_value(label(text::WARM, t), &w, width, t.text()));
    }
    if let Some(g) = guest(o, &status) {
        out.extend(wrapped_value(label(text::GUEST, t), &g, width, t.text()));
    }
    if let Some(h) = health(o, &status) {
        out.extend(wrapped_value(label(text::HEALTH, t), &h, width, t.text()));
    }
    if let Some(h) = hooks(o, &status) {
        out.extend(wrapped_value(label(text::HOOKS, t), &h, width, t.text()));
    }
    if let Some(f) = state.forecast_of(row) {
        let style = if f.at_risk { t.warn() } else { t.text() };
        let said = text::vm_forecast(
            &format::moment(f.starts_at.0, state.now),
            &format::moment(f.ends_at.0, state.now),
            f.starts_at.0 <= state.now,
            f.at_risk,
        );
        out.extend(wrapped_value(label(text::FORECAST, t), &said, width, style));
    }
    // Whole, wrapped: the failure is the one thing the operator must read in full, so it comes
    // before the status message (which may speak of what followed it: the source's power), in
    // the order of `state::messages::of`.
    if let Some(f) = &status.last_failure {
        let head = message_label(text::FAILURE, selected == Some(&About::Failure), t);
        let whole = text::failure(f.reason.as_str(), &f.phase, &f.message, f.retriable);
        out.extend(wrapped_value(head, &whole, width, t.bad()));
    }
    if let Some(m) = status.message.as_deref().filter(|m| !m.trim().is_empty()) {
        let head = message_label(text::MESSAGE, selected == Some(&About::Status), t);
        out.extend(wrapped_value(head, m, width, t.text()));
    }
    out
}

/// The spec's section: the source and its power, the target, the staging.
fn spec(o: &VirtualMachineMigration, t: &Theme) -> Vec<Line<'static>> {
    let s = &o.spec;
    let vm = s.source.vm.value().unwrap_or(strings::UNKNOWN);
    let url = s.source.endpoint.url.as_deref();
    vec![
        section(text::SPEC, t),
        kv(
            text::SOURCE,
            text::source(vm, url.unwrap_or(text::URL_FROM_SECRET)),
            t,
        ),
        kv(
            text::POWER,
            text::power(
                s.source.power.power_off,
                &s.source.power.restore_power_state,
            ),
            t,
        ),
        kv(
            text::TARGET,
            text::target(
                &ferry_crds::names::vm_name(o),
                s.target.template.storage_class_name.as_deref(),
                &s.target.template.run_strategy,
            ),
            t,
        ),
        kv(
            text::STAGING,
            text::staging(
                &s.staging.endpoint,
                &s.staging.bucket,
                s.conversion.format.as_str(),
            ),
            t,
        ),
    ]
}

/// The intents set on the migration, and the one this cockpit sent that has not shown yet.
fn intents(
    row: &Row,
    o: &VirtualMachineMigration,
    status: &ferry_crds::VirtualMachineMigrationStatus,
    state: &State,
    t: &Theme,
) -> Line<'static> {
    let s = &o.spec;
    let flag = |name: &str, on: bool| {
        Span::styled(text::flag(name, on), if on { t.warn() } else { t.text() })
    };
    let mut intents = vec![
        label(text::INTENTS, t),
        flag(text::CANCEL, s.cancel),
        flag(text::PAUSED, s.paused),
        Span::raw(text::retry(s.retry, status.retry_observed)),
    ];
    if let Some(p) = state.pending_of(&row.key) {
        intents.push(Span::styled(text::pending(p.verb.as_str()), t.warn()));
    }
    Line::from(intents)
}

/// The copy's progress in words: how far, the rate and the ETA when known.
fn progress(p: &ferry_crds::Progress) -> String {
    let mut v = text::progress(
        &format::percent(p.percent),
        &format::bytes(p.bytes_done),
        &format::bytes(p.bytes_total),
    );
    if let Some(r) = p.rate_bytes_per_second {
        v.push_str(&format!("  {}", format::rate(r)));
    }
    if let Some(e) = p.eta_seconds {
        v.push_str(&format!("  {}", strings::eta(&format::duration(e))));
    }
    v
}

/// A warm migration's precopy line, once its first copy is done or its cutover planned.
fn warm(
    o: &VirtualMachineMigration,
    status: &ferry_crds::VirtualMachineMigrationStatus,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<String> {
    if o.spec.mode != ferry_crds::MigrationMode::Warm {
        return None;
    }
    let w = status.warm.clone().unwrap_or_default();
    let spec = o.spec.warm.clone().unwrap_or_default();
    let until = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| {
        format::duration(format::secs_between(now, t.0))
    };
    let cutover = if w.cutover_started_at.is_some() {
        text::CUTOVER_UNDER_WAY.to_owned()
    } else if spec.cutover {
        text::CUTOVER_ASKED.to_owned()
    } else if let Some(at) = &spec.cutover_at {
        text::cutover_at(&at.0.to_string(), &until(at))
    } else {
        text::CUTOVER_ON_DEMAND.to_owned()
    };
    let next = w
        .next_round_at
        .as_ref()
        .filter(|_| w.cutover_started_at.is_none())
        .map(until);
    Some(text::warm(
        w.rounds,
        w.last_delta_bytes.map(format::bytes),
        w.change_rate_bytes_per_second.map(format::rate),
        next,
        predicted_downtime(&w),
        &cutover,
    ))
}

/// The guest line, for a migration that converts its guest: what ConvertingGuest found and did.
fn guest(
    o: &VirtualMachineMigration,
    status: &ferry_crds::VirtualMachineMigrationStatus,
) -> Option<String> {
    if !o.spec.conversion.guest.converts() {
        return None;
    }
    let g = status.guest.as_deref();
    let written: u64 = g.map_or(0, |g| g.volumes.iter().map(|v| v.written_bytes).sum());
    Some(text::guest(
        o.spec.conversion.guest.as_str(),
        g.and_then(|g| g.operating_system.as_deref()),
        g.map(|g| g.converted),
        g.filter(|g| g.converted)
            .map(|_| format::bytes(i64::try_from(written).unwrap_or(i64::MAX))),
        g.and_then(|g| g.seconds),
        g.and_then(|g| g.changes.last().map(String::as_str)),
        g.map_or(&[][..], |g| g.interface_names.as_slice()),
    ))
}

/// The health line, for a migration with a health check: what is probed, what it does on a
/// failure, and how the probes went.
fn health(
    o: &VirtualMachineMigration,
    status: &ferry_crds::VirtualMachineMigrationStatus,
) -> Option<String> {
    let t = &o.spec.target.template;
    let hc = t.health_check.as_ref()?;
    let h = status.health_check.as_ref();
    Some(text::health(
        &hc.describe(),
        hc.success_threshold,
        t.on_health_check_failure.unwrap_or_default() == ferry_crds::OnHealthCheckFailure::Keep,
        h.map(|h| (h.probes, h.successes, h.passed)),
        h.map(|h| h.last_result.as_str()).filter(|r| !r.is_empty()),
    ))
}

/// The hooks line, for a migration with hooks: each hook's image and how its run in the current
/// attempt went.
fn hooks(
    o: &VirtualMachineMigration,
    status: &ferry_crds::VirtualMachineMigrationStatus,
) -> Option<String> {
    use ferry_crds::{HookPoint, HookState};
    let spec = o.spec.hooks.as_ref()?;
    let each: Vec<String> = [HookPoint::PreCutover, HookPoint::PostCutover]
        .into_iter()
        .filter_map(|p| {
            let hook = spec.at(p)?;
            let run = status
                .hooks
                .iter()
                .find(|h| h.point == p && h.attempt == status.attempts);
            let state = run.map(|r| match r.state {
                HookState::Running => text::HookRun::Running,
                HookState::Succeeded => text::HookRun::Succeeded,
                HookState::Failed => text::HookRun::Failed(r.message.trim()),
            });
            Some(text::hook(p.field(), &hook.image, state))
        })
        .collect();
    (!each.is_empty()).then(|| each.join("; "))
}

/// The predicted downtime as the warm line says it: the copy, and the longest shutdown when
/// the guest is given one (a status written before the downtime was predicted: the copy only).
fn predicted_downtime(w: &ferry_crds::WarmStatus) -> Option<String> {
    let copy = w.predicted_cutover_copy_seconds?;
    let shutdown = w
        .predicted_downtime_seconds
        .map_or(0, |d| d.saturating_sub(copy).max(0));
    Some(text::predicted_downtime(
        &format::duration(copy),
        (shutdown > 0)
            .then(|| format::duration(shutdown))
            .as_deref(),
    ))
}

/// Where a wrapped value goes on: under the value, after the label.
const VALUE_INDENT: usize = 11;
/// Where a concern's message goes: under its code.
const MESSAGE_INDENT: usize = 6;

/// Preflight's concerns, Critical first (as recorded), each with its message wrapped to a
/// column `width` wide; accepted ones marked, and the ones that could be said so.
fn preflight(
    row: &Row,
    o: &VirtualMachineMigration,
    state: &State,
    t: &Theme,
    width: usize,
) -> Vec<Line<'static>> {
    let mut out = vec![section(text::PREFLIGHT, t)];
    let Some(p) = o.status.as_ref().and_then(|s| s.preflight.as_ref()) else {
        out.push(Line::styled(format!("  {}", text::NOT_CHECKED), t.dim()));
        return out;
    };
    let spec_changed =
        p.observed_generation.is_some() && p.observed_generation != o.metadata.generation;
    let ago = p
        .checked_at
        .as_ref()
        .map(|c| format::age(Some(c.0), state.now));
    out.push(kv(
        text::CHECKED,
        text::checked(ago.as_deref(), spec_changed),
        t,
    ));
    if row.held_by.is_some() {
        let why = text::held(p.blocking().count());
        let wrapped = format::wrap(&why, width.saturating_sub(VALUE_INDENT));
        for (i, l) in wrapped.into_iter().enumerate() {
            let head = if i == 0 {
                label(text::HELD, t)
            } else {
                Span::raw(" ".repeat(VALUE_INDENT))
            };
            out.push(Line::from(vec![head, Span::styled(l, t.bad())]));
        }
    }
    if p.concerns.is_empty() {
        out.push(Line::styled(format!("  {}", text::NO_CONCERNS), t.dim()));
    }
    for c in &p.concerns {
        let accepted = c.severity == Severity::Critical && p.accepted.contains(&c.code);
        let mut spans = vec![
            Span::styled(
                format!("  {:<9}", c.severity.as_str()),
                severity_style(t, c.severity, !accepted),
            ),
            Span::raw(c.code.as_str()),
        ];
        if accepted {
            spans.push(Span::styled(
                format!("  {}", strings::preflight::ACCEPTED),
                t.ok(),
            ));
        } else if c.severity == Severity::Critical && c.code.acceptable() {
            spans.push(Span::styled(
                format!("  {}", strings::preflight::MAY_BE_ACCEPTED),
                t.dim(),
            ));
        }
        out.push(Line::from(spans));
        for l in format::wrap(&c.message, width.saturating_sub(MESSAGE_INDENT)) {
            out.push(Line::raw(format!("{}{l}", " ".repeat(MESSAGE_INDENT))));
        }
    }
    out
}

/// Where a condition's or an Event's message goes when it does not fit after its columns: on
/// the lines below, this far in.
const BELOW_INDENT: usize = 4;

/// A table line's message: after the columns (`lead` cells wide) when it fits whole there,
/// else whole on the lines below, wrapped.
fn message_after(
    mut spans: Vec<Span<'static>>,
    lead: usize,
    message: &str,
    width: usize,
    style: ratatui::style::Style,
) -> Vec<Line<'static>> {
    let one_line = !message.contains('\n');
    if message.trim().is_empty() || one_line && lead + message.chars().count() <= width {
        spans.push(Span::styled(message.to_owned(), style));
        return vec![Line::from(spans)];
    }
    let mut out = vec![Line::from(spans)];
    for l in wrap_message(message, width.saturating_sub(BELOW_INDENT)) {
        out.push(Line::from(vec![
            Span::raw(" ".repeat(BELOW_INDENT)),
            Span::styled(l, style),
        ]));
    }
    out
}

/// The cursor column of a table line: the marker when its message is the selected one.
fn gutter(selected: bool, t: &Theme) -> Span<'static> {
    if selected {
        Span::styled(format!("{MARKER} "), t.key())
    } else {
        Span::raw("  ")
    }
}

fn conditions(
    row: &Row,
    o: &VirtualMachineMigration,
    state: &State,
    t: &Theme,
    width: usize,
    selected: Option<&About>,
) -> Vec<Line<'static>> {
    let mut out = vec![
        section(text::CONDITIONS, t),
        Line::styled(text::conditions_header(), t.dim()),
    ];
    for ty in ConditionType::ALL {
        let c = o.condition(ty);
        // A cold migration has no cutover, one whose guest is not converted no GuestConverted.
        if matches!(ty, ConditionType::CutOver | ConditionType::GuestConverted) && c.is_none() {
            continue;
        }
        let status = c.map_or(ferry_crds::ConditionStatus::Unknown, |c| c.status);
        let (pip, style) = t.pip(Pip::of(c, row.phase));
        let spans = vec![
            gutter(selected == Some(&About::Condition(ty)), t),
            Span::raw(format!("{:<17}", ty.as_str())),
            Span::styled(format!("{pip} {:<8}", status.as_str()), style),
            Span::raw(format!(
                "{:<22}",
                c.map_or(strings::NONE, |c| c.reason.as_str())
            )),
            Span::raw(format!(
                "{:<8}",
                format::age(c.map(|c| c.last_transition_time.0), state.now)
            )),
        ];
        let message = c.map(|c| c.message.as_str()).unwrap_or_default();
        out.extend(message_after(
            spans,
            2 + 17 + 10 + 22 + 8,
            message,
            width,
            t.dim(),
        ));
    }
    out
}

fn disks(row: &Row, o: &VirtualMachineMigration, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![section(text::DISKS, t)];
    let status = o.status.clone().unwrap_or_default();
    if status.disks.is_empty() {
        out.push(Line::styled(format!("  {}", text::NO_DISKS), t.dim()));
    }
    for d in &status.disks {
        let pct = d.percent.unwrap_or(0.0);
        let (fill, empty) = format::gauge(pct, 10);
        let mut spans = vec![
            Span::raw(text::disk(d.index)),
            Span::styled(fill, t.gauge(row.phase)),
            Span::styled(empty, t.dim()),
            Span::raw(format!("{:>5} ", format::percent(pct))),
            Span::raw(
                d.capacity_bytes
                    .map_or(strings::UNKNOWN.into(), format::bytes),
            ),
        ];
        if let Some(r) = d.rate_bytes_per_second {
            spans.push(Span::raw(format!("  {}", format::rate(r))));
        }
        if let Some(p) = &d.import_phase {
            spans.push(Span::styled(format!("  {p}"), t.dim()));
        }
        if let Some(dv) = &d.data_volume {
            spans.push(Span::styled(text::data_volume(dv), t.dim()));
        }
        if d.checksum.is_some() {
            spans.push(Span::styled(text::CHECKSUM_RECORDED, t.ok()));
        }
        out.push(Line::from(spans));
        if let Some(p) = &d.source_path {
            out.push(Line::styled(format!("         {p}"), t.dim()));
        }
    }
    out
}

fn children(key: &ObjKey, state: &State, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![section(text::CHILDREN, t)];
    match state
        .children
        .as_ref()
        .filter(|c| c.key == *key)
        .and_then(|c| c.result.as_ref())
    {
        None => out.push(Line::styled(format!("  {}", text::READING), t.dim())),
        Some(Err(e)) => out.push(Line::styled(format!("  {e}"), t.bad())),
        Some(Ok(list)) if list.is_empty() => {
            out.push(Line::styled(format!("  {}", text::NO_CHILDREN), t.dim()))
        }
        Some(Ok(list)) => {
            for c in list {
                let style = if c.state == text::ABSENT {
                    t.dim()
                } else {
                    t.text()
                };
                // The full kind name would eat the line; VMI is what everyone says.
                let kind = if c.kind == "VirtualMachineInstance" {
                    text::VMI
                } else {
                    c.kind.as_str()
                };
                out.push(Line::from(vec![
                    Span::styled(format!("  {kind:<15}"), t.dim()),
                    Span::raw(format!("{:<30} ", c.name)),
                    Span::styled(c.state.clone(), style),
                ]));
            }
        }
    }
    out
}

fn timeline(o: &VirtualMachineMigration, state: &State, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![section(text::TIMELINE, t)];
    let status = o.status.clone().unwrap_or_default();
    if status.history.is_empty() {
        out.push(Line::styled(format!("  {}", text::NO_HISTORY), t.dim()));
    }
    for h in &status.history {
        let end = h.left_at.as_ref().map_or(state.now, |t| t.0);
        let took = format::secs_between(h.entered_at.0, end);
        out.push(Line::from(vec![
            Span::raw(format!("  {} ", format::clock(h.entered_at.0))),
            Span::styled(format!("{:<11}", h.phase.as_str()), t.phase(h.phase)),
            Span::raw(format!("{:>7}", format::duration(took))),
            Span::styled(text::attempt(h.attempt, h.left_at.is_none()), t.dim()),
        ]));
    }
    out
}

/// Lines of the events of an object, newest first, each note whole (wrapped below its line
/// when it does not fit in `width`); the note of the Event `selected` marked.
pub fn event_lines(
    state: &State,
    kind: EventKind,
    key: &ObjKey,
    t: &Theme,
    width: usize,
    selected: Option<&About>,
) -> Vec<Line<'static>> {
    let mut out = vec![];
    for e in state.events.of(kind, key).rev() {
        let style = if e.type_ == "Warning" {
            t.bad()
        } else {
            t.text()
        };
        let count = if e.count > 1 {
            view::repeated(e.count)
        } else {
            String::new()
        };
        let chosen = matches!(selected, Some(About::Event(uid)) if *uid == e.uid);
        let spans = vec![
            gutter(chosen, t),
            Span::styled(format!("{:>7} ", format::age(e.time, state.now)), t.dim()),
            Span::styled(format!("{:<8}", e.type_), style),
            Span::raw(format!("{:<22}", e.reason)),
        ];
        let note = format!("{}{count}", e.note);
        out.extend(message_after(spans, 2 + 8 + 8 + 22, &note, width, t.text()));
    }
    if out.is_empty() {
        out.push(Line::styled(format!("  {}", view::NO_EVENTS), t.dim()));
    }
    out
}

/// Draws the details of `key`: two columns on wide screens, else one.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, key: &ObjKey) {
    let heading = (key.name.clone(), key);
    let Some(row) = state.index.get(key) else {
        scrolled::draw(frame, state, t, area, heading, Body::Gone(text::GONE));
        return;
    };
    let read = state.opened.as_ref().filter(|o| o.key == *key);
    let o = match read.and_then(|o| o.result.as_ref()) {
        Some(Ok(o)) => o.as_ref(),
        // Until the migration is read, or when it cannot be, one line says so.
        failed_or_reading => {
            let line = match failed_or_reading {
                Some(Err(e)) => Line::styled(format!("  {}", text::cannot_read(e)), t.bad()),
                Some(Ok(_)) | None => {
                    Line::styled(format!("  {}", text::READING_MIGRATION), t.dim())
                }
            };
            let body = Body::Columns(vec![vec![line]]);
            scrolled::draw(frame, state, t, area, heading, body);
            return;
        }
    };
    // The message the copy key takes, marked where it is drawn.
    let list = messages::of(o, key, &state.events);
    let selected = list
        .get(messages::position(&list, state.message.as_ref()))
        .map(|m| &m.about);
    let wide = area.width >= 140;
    // Each of two columns is half the width (the layout's 50 %).
    let col = usize::from(if wide { area.width / 2 } else { area.width });
    let mut events = vec![section(text::EVENTS, t)];
    events.extend(event_lines(
        state,
        EventKind::Migration,
        key,
        t,
        col,
        selected,
    ));
    // The rule above the view takes a row, never a column.
    let columns = if wide {
        let mut left = summary(row, o, state, t, col, selected);
        left.extend(preflight(row, o, state, t, col));
        left.extend(disks(row, o, t));
        left.extend(children(key, state, t));
        left.extend(timeline(o, state, t));
        let mut right = conditions(row, o, state, t, col, selected);
        right.extend(events);
        vec![left, right]
    } else {
        let mut lines = summary(row, o, state, t, col, selected);
        lines.extend(preflight(row, o, state, t, col));
        lines.extend(conditions(row, o, state, t, col, selected));
        lines.extend(disks(row, o, t));
        lines.extend(children(key, state, t));
        lines.extend(timeline(o, state, t));
        lines.extend(events);
        vec![lines]
    };
    scrolled::draw(frame, state, t, area, heading, Body::Columns(columns));
}

#[cfg(test)]
mod tests {
    use ferry_crds::{
        Phase,
        fixtures::{migration, ts},
    };
    use ratatui::{Terminal, backend::TestBackend};

    use crate::{
        state::{Action, ClusterId, ObjKey, Scope, State, update},
        ui::{Options, Theme},
    };

    fn screen(s: &State) -> String {
        let mut term = Terminal::new(TestBackend::new(100, 30)).unwrap_or_else(|e| panic!("{e}"));
        term.draw(|f| {
            crate::ui::draw(
                f,
                s,
                Options {
                    theme: Theme::MONO,
                    logs: false,
                },
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
        term.backend().to_string()
    }

    /// Rows keep no object (`Row` has no such field): the view draws the copy it read, and
    /// until it has one says what it is doing, or why it cannot.
    #[test]
    fn details_say_they_are_reading_or_why_they_cannot_and_then_draw_the_read_copy() {
        let key = ObjKey::new("default", "vm-a");
        let mut s = State::new("lab", Scope::Namespace("default".into()), false, ts(3600).0);
        let o = migration("vm-a").with_phase(Phase::Importing);
        update(&mut s, Action::migrations_listed(ClusterId(0), vec![o]));
        update(&mut s, Action::Enter);
        let text = screen(&s);
        assert!(text.contains("reading the migration…"), "{text}");
        assert!(!text.contains("── spec"), "{text}");
        update(
            &mut s,
            Action::MigrationRead {
                key: key.clone(),
                result: Err("connection refused".into()),
            },
        );
        let text = screen(&s);
        assert!(
            text.contains("cannot read the migration: connection refused"),
            "{text}"
        );
        // Asked again (a re-list), and answered: the sections of the read copy.
        update(&mut s, Action::Back);
        update(&mut s, Action::Enter);
        let mut read = migration("vm-a").with_phase(Phase::Importing);
        if let Some(st) = read.status.as_mut() {
            st.message = Some("read from the API".into());
        }
        update(
            &mut s,
            Action::MigrationRead {
                key,
                result: Ok(Box::new(read)),
            },
        );
        let text = screen(&s);
        assert!(text.contains("read from the API"), "{text}");
        assert!(!text.contains("reading the migration"), "{text}");
    }

    /// The details of `o` as the screen shows them once read: the screen, and its rows quoted
    /// and read as one run of words (a long line wraps).
    fn details_of(o: ferry_crds::VirtualMachineMigration) -> (String, String) {
        details_in(listed(vec![], &o), o)
    }

    /// A state that listed `waves` and the migration `o`.
    fn listed(
        waves: Vec<ferry_crds::MigrationWave>,
        o: &ferry_crds::VirtualMachineMigration,
    ) -> State {
        let mut s = State::new("lab", Scope::Namespace("default".into()), false, ts(3600).0);
        if !waves.is_empty() {
            update(&mut s, Action::WavesListed(ClusterId(0), waves));
        }
        update(
            &mut s,
            Action::migrations_listed(ClusterId(0), vec![o.clone()]),
        );
        s
    }

    /// [`details_of`] in a state that listed it already.
    fn details_in(mut s: State, o: ferry_crds::VirtualMachineMigration) -> (String, String) {
        let key = ObjKey::new("default", "vm-a");
        update(&mut s, Action::Enter);
        update(
            &mut s,
            Action::MigrationRead {
                key,
                result: Ok(Box::new(o)),
            },
        );
        let text = screen(&s);
        let flat = text.replace('"', " ");
        let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
        (text, flat)
    }

    /// The guest line says what the conversion did to the network cards' names.
    #[test]
    fn the_guest_line_says_which_network_names_the_conversion_kept() {
        let mut o = migration("vm-a").with_phase(Phase::Succeeded);
        o.spec.conversion.guest = ferry_crds::GuestConversion::Auto;
        if let Some(st) = o.status.as_mut() {
            st.guest = Some(Box::new(ferry_crds::GuestStatus {
                operating_system: Some("Debian 12.15".into()),
                converted: true,
                interface_names: vec!["kept ens192 for 00:50:56:00:00:01".into()],
                ..Default::default()
            }));
        }
        let (text, flat) = details_of(o);
        assert!(flat.contains("Debian 12.15, converted"), "{text}");
        assert!(
            flat.contains("network: kept ens192 for 00:50:56:00:00:01"),
            "{text}"
        );
    }

    /// A rolled-back migration: its phase and the health line say what the gate found.
    #[test]
    fn the_health_line_says_what_was_probed_and_what_the_last_probe_found() {
        let mut o = migration("vm-a").with_phase(Phase::RolledBack);
        o.spec.target.template.health_check = Some(
            serde_json::from_value(
                serde_json::json!({"tcp": {"port": 8080}, "successThreshold": 2}),
            )
            .unwrap(),
        );
        if let Some(st) = o.status.as_mut() {
            st.health_check = Some(ferry_crds::HealthCheckStatus {
                probes: 30,
                last_result: "tcp 10.0.0.7:8080: Connection refused".into(),
                ..Default::default()
            });
        }
        let (text, flat) = details_of(o);
        assert!(flat.contains("RolledBack"), "{text}");
        assert!(
            flat.contains("health tcp 8080, 2 in a row, else roll back: 0 of 2 after 30 probe(s); last: tcp 10.0.0.7:8080: Connection refused"),
            "{text}"
        );
    }

    /// The hooks line: each hook's image and how its run in this attempt went.
    #[test]
    fn the_hooks_line_says_how_each_hook_ran_in_this_attempt() {
        let mut o = migration("vm-a").with_phase(Phase::Failed);
        o.spec.hooks = Some(
            serde_json::from_value(serde_json::json!({
                "preCutover": {"image": "reg/quiesce:1", "command": ["q"]},
                "postCutover": {"image": "reg/smoke:1", "command": ["s"]},
            }))
            .unwrap(),
        );
        if let Some(st) = o.status.as_mut() {
            st.attempts = 2;
            st.hooks = vec![
                ferry_crds::HookStatus {
                    point: ferry_crds::HookPoint::PreCutover,
                    attempt: 2,
                    job: "vm-a-pre-cutover".into(),
                    state: ferry_crds::HookState::Failed,
                    started_at: None,
                    finished_at: None,
                    message: "3 writers left\n".into(),
                },
                // An earlier attempt's run is not this attempt's.
                ferry_crds::HookStatus {
                    point: ferry_crds::HookPoint::PostCutover,
                    attempt: 1,
                    job: "vm-a-post-cutover".into(),
                    state: ferry_crds::HookState::Succeeded,
                    started_at: None,
                    finished_at: None,
                    message: String::new(),
                },
            ];
        }
        let (text, flat) = details_of(o);
        assert!(
            flat.contains("hooks preCutover (reg/quiesce:1): failed: 3 writers left; postCutover (reg/smoke:1): not run yet"),
            "{text}"
        );
    }

    /// A migration of a wave with a forecast: when it starts and ends at the wave's pace, and
    /// that it will not make the window.
    #[test]
    fn the_forecast_line_says_when_a_migration_of_a_wave_starts_and_ends() {
        let mut o = migration("vm-a").with_phase(Phase::Queued);
        o.metadata.labels = Some(std::collections::BTreeMap::from([(
            ferry_crds::names::WAVE_LABEL.to_owned(),
            "w".to_owned(),
        )]));
        let mut w = ferry_crds::fixtures::wave("w", 1);
        w.status = Some(ferry_crds::MigrationWaveStatus {
            forecast: Some(ferry_crds::WaveForecast {
                vms: vec![ferry_crds::VmForecast {
                    migration: "vm-a".into(),
                    starts_at: ts(7200),
                    ends_at: ts(9000),
                    at_risk: true,
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
        let s = listed(vec![w], &o);
        // The wide board has an ENDS column while a wave forecasts its migrations.
        let mut term = Terminal::new(TestBackend::new(150, 30)).unwrap_or_else(|e| panic!("{e}"));
        term.draw(|f| {
            crate::ui::draw(
                f,
                &s,
                Options {
                    theme: Theme::MONO,
                    logs: false,
                },
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let board: String = term
            .backend()
            .buffer()
            .content()
            .chunks(150)
            .map(|l| l.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        let ends = super::format::moment(ts(9000).0, ts(3600).0);
        assert!(board.contains("ENDS"), "{board}");
        assert!(board.contains(&format!("{ends}⚠")), "{board}");
        let (text, flat) = details_in(s, o);
        let (starts, ends) = (
            super::format::moment(ts(7200).0, ts(3600).0),
            super::format::moment(ts(9000).0, ts(3600).0),
        );
        assert!(
            flat.contains(&format!("forecast starts {starts}, ends about {ends} at the wave's pace; past the window's end")),
            "{text}"
        );
    }
}
