//! Details of one migration: spec summary, conditions, disks, children, phase timeline, and its
//! live Events. Two columns on wide screens, one scrolling column otherwise.

use ferry_crds::{ConditionType, VirtualMachineMigration};
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
};

use super::{Theme, format};
use crate::state::{EventKind, ObjKey, Row, State};

fn section(title: &str, t: &Theme) -> Line<'static> {
    Line::styled(format!("── {title} "), t.title())
}

fn kv(k: &str, v: String, t: &Theme) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("  {k:<9}"), t.dim()),
        Span::raw(v),
    ])
}

fn summary(row: &Row, state: &State, t: &Theme) -> Vec<Line<'static>> {
    let o: &VirtualMachineMigration = &row.obj;
    let s = &o.spec;
    let status = o.status.clone().unwrap_or_default();
    let mut out = vec![section("spec", t)];
    let vm = s.source.vm.value().unwrap_or("?").to_owned();
    out.push(kv("source", format!("{vm} @ {}", s.source.endpoint.url), t));
    out.push(kv(
        "power",
        format!(
            "powerOff {}  restore {:?}",
            s.source.power.power_off, s.source.power.restore_power_state
        ),
        t,
    ));
    out.push(kv(
        "target",
        format!(
            "{}  storageClass {}  runStrategy {:?}",
            ferry_crds::names::vm_name(o),
            s.target
                .template
                .storage_class_name
                .as_deref()
                .unwrap_or("(default)"),
            s.target.template.run_strategy
        ),
        t,
    ));
    out.push(kv(
        "staging",
        format!(
            "{} bucket {}  format {}",
            s.staging.endpoint,
            s.staging.bucket,
            s.conversion.format.as_str()
        ),
        t,
    ));
    let mut intents = vec![Span::styled(format!("  {:<9}", "intents"), t.dim())];
    let flag = |name: &str, on: bool| {
        Span::styled(
            format!("{name} {on}  "),
            if on { t.warn() } else { t.text() },
        )
    };
    intents.push(flag("cancel", s.cancel));
    intents.push(flag("paused", s.paused));
    intents.push(Span::raw(format!(
        "retry {} (acted on {})",
        s.retry, status.retry_observed
    )));
    if let Some(p) = state.pending_of(&row.key) {
        intents.push(Span::styled(
            format!("  … {} pending", p.verb.as_str()),
            t.warn(),
        ));
    }
    out.push(Line::from(intents));
    out.push(section("status", t));
    out.push(Line::from(vec![
        Span::styled(format!("  {:<9}", "phase"), t.dim()),
        Span::styled(row.phase.as_str(), t.phase(row.phase)),
        Span::raw(format!(
            "  for {}  attempt {}  started {}",
            format::age(row.phase_since, state.now),
            row.attempt,
            status.started_at.as_ref().map_or("-".into(), |t| format!(
                "{} ago",
                format::age(Some(t.0), state.now)
            ))
        )),
    ]));
    if let Some(p) = &status.progress {
        let mut v = format!(
            "{}  {} of {}",
            format::percent(p.percent),
            format::bytes(p.bytes_done),
            format::bytes(p.bytes_total)
        );
        if let Some(r) = p.rate_bytes_per_second {
            v.push_str(&format!("  {}", format::rate(r)));
        }
        if let Some(e) = p.eta_seconds {
            v.push_str(&format!("  ETA {}", format::duration(e)));
        }
        out.push(kv("progress", v, t));
    }
    if let Some(m) = status.message.as_deref() {
        out.push(kv("message", m.to_owned(), t));
    }
    if let Some(f) = &status.last_failure {
        out.push(Line::from(vec![
            Span::styled(format!("  {:<9}", "failure"), t.dim()),
            Span::styled(
                format!(
                    "{} in {}: {}{}",
                    f.reason.as_str(),
                    f.phase,
                    f.message,
                    if f.retriable { " (retriable)" } else { "" }
                ),
                t.bad(),
            ),
        ]));
    }
    out
}

fn conditions(row: &Row, state: &State, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![
        section("conditions", t),
        Line::styled(
            format!(
                "  {:<17}{:<10}{:<22}{:<8}{}",
                "TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"
            ),
            t.dim(),
        ),
    ];
    for ty in ConditionType::ALL {
        let c = row.obj.condition(ty);
        let status = c.map_or(ferry_crds::ConditionStatus::Unknown, |c| c.status);
        let (pip, style) = t.pip(status);
        out.push(Line::from(vec![
            Span::raw(format!("  {:<17}", ty.as_str())),
            Span::styled(format!("{pip} {:<8}", status.as_str()), style),
            Span::raw(format!("{:<22}", c.map_or("-", |c| c.reason.as_str()))),
            Span::raw(format!(
                "{:<8}",
                format::age(c.map(|c| c.last_transition_time.0), state.now)
            )),
            Span::styled(c.map(|c| c.message.clone()).unwrap_or_default(), t.dim()),
        ]));
    }
    out
}

fn disks(row: &Row, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![section("disks", t)];
    let status = row.obj.status.clone().unwrap_or_default();
    if status.disks.is_empty() {
        out.push(Line::styled("  (not discovered yet)", t.dim()));
    }
    for d in &status.disks {
        let pct = d.percent.unwrap_or(0.0);
        let (fill, empty) = format::gauge(pct, 10);
        let mut spans = vec![
            Span::raw(format!("  disk {} ", d.index)),
            Span::styled(fill, t.gauge(row.phase)),
            Span::styled(empty, t.dim()),
            Span::raw(format!("{:>5} ", format::percent(pct))),
            Span::raw(d.capacity_bytes.map_or("?".into(), format::bytes)),
        ];
        if let Some(r) = d.rate_bytes_per_second {
            spans.push(Span::raw(format!("  {}", format::rate(r))));
        }
        if let Some(p) = &d.import_phase {
            spans.push(Span::styled(format!("  {p}"), t.dim()));
        }
        if let Some(dv) = &d.data_volume {
            spans.push(Span::styled(format!("  dv {dv}"), t.dim()));
        }
        if d.checksum.is_some() {
            spans.push(Span::styled("  sha256 ✓", t.ok()));
        }
        out.push(Line::from(spans));
        if let Some(p) = &d.source_path {
            out.push(Line::styled(format!("         {p}"), t.dim()));
        }
    }
    out
}

fn children(key: &ObjKey, state: &State, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![section("children", t)];
    match state
        .children
        .as_ref()
        .filter(|c| c.key == *key)
        .and_then(|c| c.result.as_ref())
    {
        None => out.push(Line::styled("  reading…", t.dim())),
        Some(Err(e)) => out.push(Line::styled(format!("  {e}"), t.bad())),
        Some(Ok(list)) if list.is_empty() => out.push(Line::styled("  none yet", t.dim())),
        Some(Ok(list)) => {
            for c in list {
                let style = if c.state == "absent" {
                    t.dim()
                } else {
                    t.text()
                };
                // The full kind name would eat the line; VMI is what everyone says.
                let kind = if c.kind == "VirtualMachineInstance" {
                    "VMI"
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

fn timeline(row: &Row, state: &State, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![section("timeline", t)];
    let status = row.obj.status.clone().unwrap_or_default();
    if status.history.is_empty() {
        out.push(Line::styled("  (no phase recorded yet)", t.dim()));
    }
    for h in &status.history {
        let end = h.left_at.as_ref().map_or(state.now, |t| t.0);
        let took = format::secs_between(h.entered_at.0, end);
        out.push(Line::from(vec![
            Span::raw(format!("  {} ", format::clock(h.entered_at.0))),
            Span::styled(format!("{:<11}", h.phase.as_str()), t.phase(h.phase)),
            Span::raw(format!("{:>7}", format::duration(took))),
            Span::styled(
                format!(
                    "  attempt {}{}",
                    h.attempt,
                    if h.left_at.is_none() { "  (now)" } else { "" }
                ),
                t.dim(),
            ),
        ]));
    }
    out
}

/// Lines of the events of an object, newest first.
pub fn event_lines(state: &State, kind: EventKind, key: &ObjKey, t: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![];
    for e in state.events.of(kind, key).rev() {
        let style = if e.type_ == "Warning" {
            t.bad()
        } else {
            t.text()
        };
        let count = if e.count > 1 {
            format!(" ×{}", e.count)
        } else {
            String::new()
        };
        out.push(Line::from(vec![
            Span::styled(format!("  {:>7} ", format::age(e.time, state.now)), t.dim()),
            Span::styled(format!("{:<8}", e.type_), style),
            Span::raw(format!("{:<22}", e.reason)),
            Span::raw(format!("{}{count}", e.note)),
        ]));
    }
    if out.is_empty() {
        out.push(Line::styled("  no events", t.dim()));
    }
    out
}

/// Draws the details of `key`.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, key: &ObjKey) {
    let title = Line::from(vec![
        Span::styled(format!(" {} ", key.name), t.title()),
        Span::styled(format!("namespace {} ", key.namespace), t.dim()),
    ]);
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(t.dim())
        .title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(row) = state.index.get(key) else {
        frame.render_widget(
            Paragraph::new(Line::styled("  gone: the migration was deleted", t.bad())),
            inner,
        );
        return;
    };
    let mut events = vec![section("events", t)];
    events.extend(event_lines(state, EventKind::Migration, key, t));
    let page = inner.height as usize;
    if inner.width >= 140 {
        let [l, r] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
            .areas(inner);
        let mut left = summary(row, state, t);
        left.extend(disks(row, t));
        left.extend(children(key, state, t));
        left.extend(timeline(row, state, t));
        let mut right = conditions(row, state, t);
        right.extend(events);
        let scroll = state
            .scroll
            .min(left.len().max(right.len()).saturating_sub(page)) as u16;
        frame.render_widget(Paragraph::new(left).scroll((scroll, 0)), l);
        frame.render_widget(Paragraph::new(right).scroll((scroll, 0)), r);
    } else {
        let mut lines = summary(row, state, t);
        lines.extend(conditions(row, state, t));
        lines.extend(disks(row, t));
        lines.extend(children(key, state, t));
        lines.extend(timeline(row, state, t));
        lines.extend(events);
        let scroll = state.scroll.min(lines.len().saturating_sub(page)) as u16;
        frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)), inner);
    }
}
