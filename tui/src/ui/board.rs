//! The board: one line per visible migration; only the rows on screen are drawn.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::Style,
    text::{Line, Span},
    widgets::{Cell, Paragraph, Row as TRow, Table},
};

use super::{Theme, format};
use crate::{
    state::{Focus, Row, SortKey, State},
    strings::{self, board as text, column},
};

/// Column widths for a board `width` cells wide.
#[derive(Clone, Copy, Debug)]
struct Widths {
    cluster: u16,
    name: u16,
    namespace: u16,
    wave: u16,
    gauge: u16,
    progress: u16,
    rate: bool,
    attempt: u16,
    in_phase: u16,
    /// ENDS, on a wide board while a wave has a forecast of its migrations (0: no column).
    forecast: u16,
}

fn widths(state: &State, width: u16) -> Widths {
    let wide = width >= 120;
    let longest = state
        .index
        .visible_range(state.offset, state.page)
        .map(|r| r.key.name.chars().count())
        .max()
        .unwrap_or(4) as u16;
    let name = longest.clamp(8, if wide { 32 } else { 18 });
    // Narrow, MESSAGE gets the room the others can spare: the percentage without its gauge,
    // the time in the phase to its largest unit (`47m`, not `47m37s`).
    let gauge = if wide { 10 } else { 0 };
    let cluster = if state.multi_cluster() {
        let longest = state
            .clusters
            .iter()
            .map(|c| c.context.chars().count())
            .max()
            .unwrap_or(0) as u16;
        // The context and its connection glyph.
        (longest + 2).clamp(6, if wide { 20 } else { 12 })
    } else {
        0
    };
    Widths {
        cluster,
        name,
        namespace: if state.all_namespaces() {
            if wide { 14 } else { 10 }
        } else {
            0
        },
        wave: if wide { 12 } else { 6 },
        gauge,
        // gauge, " 100%", and on wide screens " 123MiB/s"
        progress: gauge + 5 + if wide { 10 } else { 0 },
        rate: wide,
        attempt: if wide { 7 } else { 3 },
        in_phase: if wide { 8 } else { 5 },
        forecast: if wide && state.waves.iter().any(has_forecast) {
            // `23:10Z⚠`; a time more than a day ahead is cut.
            7
        } else {
            0
        },
    }
}

/// Whether the wave's status forecasts when its migrations end.
fn has_forecast(w: &crate::state::WaveRow) -> bool {
    w.obj
        .status
        .as_ref()
        .and_then(|s| s.forecast.as_ref())
        .is_some_and(|f| !f.vms.is_empty())
}

/// The ENDS cell: when the wave's forecast ends the migration, `⚠` when past its window.
fn ends_cell(state: &State, row: &Row, w: &Widths, t: &Theme) -> Line<'static> {
    let Some(f) = state.forecast_of(row) else {
        return Line::raw("");
    };
    let at = format::fit(
        &format::moment(f.ends_at.0, state.now),
        usize::from(w.forecast.saturating_sub(1)),
    );
    if f.at_risk {
        Line::from(vec![
            Span::styled(at, t.warn()),
            Span::styled(text::AT_RISK_GLYPH, t.warn()),
        ])
    } else {
        Line::from(Span::styled(at, t.dim()))
    }
}

fn gutter(state: &State, row: &Row, t: &Theme, cursor: bool) -> Line<'static> {
    // The cursor also has a glyph: under NO_COLOR a reversed row is not all a reader may see.
    let arrow = if cursor {
        Span::styled("▸", t.key())
    } else {
        Span::raw(" ")
    };
    let mark = if state.marks.contains(&row.key) {
        Span::styled("●", t.key())
    } else {
        Span::raw(" ")
    };
    let flag = if state.pending_of(&row.key).is_some() {
        Span::styled("…", t.warn())
    } else if row.deleting {
        Span::styled("†", t.bad())
    } else if row.cancel && !row.phase.is_terminal() {
        Span::styled("✕", t.warn())
    } else if row.paused {
        Span::styled("‖", t.warn())
    } else {
        Span::raw(" ")
    };
    Line::from(vec![arrow, mark, flag])
}

fn progress(row: &Row, w: &Widths, t: &Theme) -> Line<'static> {
    let pct = match (row.percent, row.phase) {
        (Some(p), _) => p,
        (None, ferry_crds::Phase::Succeeded) => 100.0,
        (None, _) => return Line::styled(strings::NONE, t.dim()),
    };
    let (fill, empty) = format::gauge(pct, w.gauge as usize);
    let mut spans = vec![
        Span::styled(fill, t.gauge(row.phase)),
        Span::styled(empty, t.dim()),
        Span::raw(format!("{:>5}", format::percent(pct))),
    ];
    if w.rate
        && let Some(r) = row.rate.filter(|r| *r > 0 && !row.phase.is_terminal())
    {
        spans.push(Span::styled(format!(" {:>9}", format::rate(r)), t.dim()));
    }
    Line::from(spans)
}

/// The CLUSTER cell: the context, and a glyph when its board is not live.
fn cluster_cell(state: &State, row: &Row, w: &Widths, t: &Theme) -> Line<'static> {
    let Some(c) = state.cluster(row.key.cluster) else {
        return Line::raw("");
    };
    let name = format::fit(&c.context, usize::from(w.cluster.saturating_sub(2)));
    if c.conn.is_stale() {
        Line::from(vec![
            Span::styled(name, t.dim()),
            Span::styled(text::STALE_GLYPH, t.bad()),
        ])
    } else if c.conn.migrations.is_live() {
        Line::from(Span::styled(name, t.dim()))
    } else {
        Line::from(vec![
            Span::styled(name, t.dim()),
            Span::styled(text::CONNECTING_GLYPH, t.warn()),
        ])
    }
}

/// The PHASE cell: the phase, or `Blocked` for a migration preflight holds in Pending (its
/// MESSAGE then names the concern), which is what an operator must act on.
fn phase(row: &Row, t: &Theme) -> Span<'static> {
    if row.held_by.is_some() {
        Span::styled(text::BLOCKED, t.bad())
    } else {
        Span::styled(row.phase.as_str(), t.phase(row.phase))
    }
}

fn pips(row: &Row, t: &Theme) -> Line<'static> {
    Line::from(
        row.pips
            .iter()
            .map(|s| {
                let (g, st) = t.pip(*s);
                Span::styled(g, st)
            })
            .collect::<Vec<_>>(),
    )
}

fn title(state: &State, t: &Theme) -> Line<'static> {
    let sort = state.index.sort();
    let mut spans = vec![
        Span::styled(text::TITLE, t.title()),
        Span::raw(format!(
            "{}/{} ",
            state.index.visible_len(),
            state.index.len()
        )),
        Span::styled(text::sort(sort.key.title(), sort.reverse), t.dim()),
    ];
    if let Some(w) = state.index.wave_scope() {
        spans.push(Span::styled(text::wave(&w.name), t.key()));
    }
    let f = state.index.filter();
    if !f.raw.is_empty() && state.input.is_none() {
        spans.push(Span::styled(text::filter(&f.raw), t.key()));
    }
    if !state.marks.is_empty() {
        spans.push(Span::styled(text::marked(state.marks.len()), t.key()));
    }
    if state.multi_cluster() {
        let stale: Vec<&str> = state
            .clusters
            .iter()
            .filter(|c| c.conn.is_stale())
            .map(|c| c.context.as_str())
            .collect();
        if !stale.is_empty() {
            spans.push(Span::styled(
                text::stale_of(&stale.join(",")),
                t.badge(true),
            ));
        }
    } else if state.is_stale() {
        spans.push(Span::styled(text::STALE, t.badge(true)));
    }
    Line::from(spans)
}

/// Draws the board: the rows from `state.offset` that fit.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let inner = super::ruled(frame, t, area, title(state, t));
    let page = inner.height.saturating_sub(1) as usize;
    let w = widths(state, inner.width);
    let (header, mut cons) = header(state, &w, t);
    let message_w = message_width(&cons, inner.width);
    cons.push(Constraint::Fill(1));
    let focused = state.focus == Focus::Board;
    let rows: Vec<TRow> = state
        .index
        .visible_range(state.offset, page)
        .enumerate()
        .map(|(i, r)| {
            let cursor = state.offset + i == state.cursor;
            let row = TRow::new(cells(state, r, &w, t, cursor, message_w));
            if cursor {
                row.style(t.cursor(focused))
            } else {
                row.style(Style::new())
            }
        })
        .collect();
    let empty = rows.is_empty();
    let table = Table::new(rows, cons)
        .header(TRow::new(header))
        .column_spacing(1);
    frame.render_widget(table, inner);
    if empty && inner.height > 2 {
        let area = Rect {
            y: inner.y + 2,
            height: 1,
            ..inner
        };
        let hint = Paragraph::new(Span::styled(empty_hint(state), t.dim())).centered();
        frame.render_widget(hint, area);
    }
}

/// The header's cells, the sort column's in the key's style, and the widths of every column
/// but MESSAGE.
fn header(state: &State, w: &Widths, t: &Theme) -> (Vec<Cell<'static>>, Vec<Constraint>) {
    let sort = state.index.sort().key;
    let head = |label: &'static str, key: Option<SortKey>| {
        let style = if key == Some(sort) {
            t.key()
        } else {
            t.title()
        };
        Cell::from(Span::styled(label, style))
    };
    // Narrow, the long column titles have short forms.
    let long_or_short = |long, short| if w.rate { long } else { short };
    let mut header = vec![Cell::from("")];
    let mut cons = vec![Constraint::Length(3)];
    if w.cluster > 0 {
        header.push(head(column::CLUSTER, Some(SortKey::Cluster)));
        cons.push(Constraint::Length(w.cluster));
    }
    header.push(head(column::NAME, Some(SortKey::Name)));
    cons.push(Constraint::Length(w.name));
    if w.namespace > 0 {
        header.push(head(column::NAMESPACE, Some(SortKey::Namespace)));
        cons.push(Constraint::Length(w.namespace));
    }
    header.extend([
        head(column::WAVE, Some(SortKey::Wave)),
        head(column::PHASE, Some(SortKey::Phase)),
        head(
            long_or_short(column::PROGRESS, column::PROGRESS_SHORT),
            Some(SortKey::Progress),
        ),
        head(
            long_or_short(column::CONDITIONS, column::CONDITIONS_SHORT),
            None,
        ),
        head(
            long_or_short(column::ATTEMPT, column::ATTEMPT_SHORT),
            Some(SortKey::Attempt),
        ),
        head(
            long_or_short(column::IN_PHASE, column::IN_PHASE_SHORT),
            Some(SortKey::InPhase),
        ),
    ]);
    cons.extend([
        Constraint::Length(w.wave),
        Constraint::Length(10),
        Constraint::Length(w.progress),
        Constraint::Length(if w.rate { 10 } else { 8 }),
        Constraint::Length(w.attempt),
        Constraint::Length(w.in_phase),
    ]);
    if w.forecast > 0 {
        header.push(head(column::ENDS, None));
        cons.push(Constraint::Length(w.forecast));
    }
    header.push(head(column::MESSAGE, None));
    (header, cons)
}

/// MESSAGE takes what the other columns (`cons`, each followed by one space) leave of `width`:
/// it shows the message's start and an ellipsis, the details view the whole of it.
fn message_width(cons: &[Constraint], width: u16) -> usize {
    let fixed: u16 = cons
        .iter()
        .map(|c| match c {
            Constraint::Length(n) => n + 1,
            Constraint::Min(_)
            | Constraint::Max(_)
            | Constraint::Percentage(_)
            | Constraint::Ratio(..)
            | Constraint::Fill(_) => 1,
        })
        .sum();
    usize::from(width.saturating_sub(fixed))
}

/// The cells of row `r`'s line, the `cursor`'s or not.
fn cells(
    state: &State,
    r: &Row,
    w: &Widths,
    t: &Theme,
    cursor: bool,
    message_w: usize,
) -> Vec<Cell<'static>> {
    let mut cells = vec![Cell::from(gutter(state, r, t, cursor))];
    if w.cluster > 0 {
        cells.push(Cell::from(cluster_cell(state, r, w, t)));
    }
    cells.push(Cell::from(format::fit(&r.key.name, w.name as usize)));
    if w.namespace > 0 {
        cells.push(Cell::from(Span::styled(
            format::fit(&r.key.namespace, w.namespace as usize),
            t.dim(),
        )));
    }
    cells.extend([
        Cell::from(Span::styled(
            format::fit(r.wave.as_deref().unwrap_or(strings::NONE), w.wave as usize),
            t.dim(),
        )),
        Cell::from(phase(r, t)),
        Cell::from(progress(r, w, t)),
        Cell::from(pips(r, t)),
        Cell::from(format!("{:>3}", r.attempt)),
        Cell::from(if w.rate {
            format!("{:>7}", format::age(r.phase_since, state.now))
        } else {
            format!("{:>4}", format::short_age(r.phase_since, state.now))
        }),
    ]);
    if w.forecast > 0 {
        cells.push(Cell::from(ends_cell(state, r, w, t)));
    }
    cells.extend([Cell::from(Span::styled(
        format::fit(&r.message, message_w),
        if r.phase == ferry_crds::Phase::Failed || r.held_by.is_some() {
            t.bad()
        } else {
            t.text()
        },
    ))]);
    cells
}

/// Why the board shows no row: no CRD, nothing listed yet, no migration, or none through the
/// filter.
fn empty_hint(state: &State) -> &'static str {
    let crd_missing = state
        .clusters
        .iter()
        .all(|c| matches!(c.conn.migrations, crate::state::ConnState::CrdMissing));
    if crd_missing {
        strings::CRD_HINT
    } else if state.clusters.iter().all(|c| !c.conn.ever_listed) {
        strings::LOADING
    } else if state.index.is_empty() {
        strings::EMPTY_BOARD
    } else {
        strings::EMPTY_FILTERED
    }
}
