//! The timeline (`t`): per migration on the board, a bar of its phases over a time axis shared
//! by all of them, how long it took (⚑ when slow), and where the time went over all of them.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{Theme, format};
use crate::{
    state::{
        Row, State,
        timeline::{self, Axis, Cell, Summary},
    },
    strings::timeline as text,
};

/// Width of the NAME column.
fn name_width(area: Rect) -> usize {
    if area.width >= 140 { 28 } else { 18 }
}

/// The row's name, after its context on a board of several clusters.
fn name_of(state: &State, r: &Row) -> String {
    if state.multi_cluster() {
        format!("{}/{}", state.context_of(r.key.cluster), r.key.name)
    } else {
        r.key.name.clone()
    }
}

fn bar_spans(row: &Row, state: &State, axis: Axis, width: usize, t: &Theme) -> Vec<Span<'static>> {
    timeline::bar(row, state.now, axis, width)
        .into_iter()
        .map(|c| match c {
            Cell::Empty => Span::raw(" "),
            Cell::Phase { phase, starts } => {
                let (letter, fill) = t.phase_mark(phase);
                Span::styled(if starts { letter } else { fill }, t.phase(phase))
            }
        })
        .collect()
}

fn axis_line(axis: Option<Axis>, name_w: usize, width: usize, t: &Theme) -> Line<'static> {
    let mut head = text::columns(name_w);
    if let Some(a) = axis {
        let left = format::clock_secs(a.start);
        let right = format::clock_secs(a.end);
        let span = text::span(&format::duration(a.span()));
        let gap = width.saturating_sub(left.chars().count() + right.chars().count());
        let mid = format!("{span:^gap$}");
        head.push_str(&format!("{left}{mid}{right}"));
    }
    Line::styled(head, t.dim())
}

fn summary_line(s: &Summary, t: &Theme) -> Line<'static> {
    let mut spans = vec![Span::styled(text::TIME_WENT, t.dim())];
    for (i, (p, share)) in s.shares().into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" · ", t.dim()));
        }
        spans.push(Span::styled(p.as_str(), t.phase(p)));
        spans.push(Span::raw(format!(" {share:.0}%")));
    }
    if let Some(m) = s.median_took {
        spans.push(Span::styled(text::median(&format::duration(m)), t.dim()));
    }
    if s.slow > 0 {
        spans.push(Span::styled(text::slow(s.slow), t.warn()));
    }
    Line::from(spans)
}

fn legend(t: &Theme) -> Line<'static> {
    let mut spans = vec![Span::raw("  ")];
    for (p, word) in text::LEGEND {
        let (letter, _) = t.phase_mark(p);
        spans.push(Span::styled(letter, t.phase(p)));
        spans.push(Span::styled(format!(" {word}  "), t.dim()));
    }
    Line::from(spans)
}

/// Draws the timeline of the rows the board shows, from `state.scroll`.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let len = state.index.visible_len();
    let summary = Summary::of(state.index.visible_range(0, len), state.now);
    let mut title = vec![
        Span::styled(text::TITLE, t.title()),
        Span::raw(text::count(len)),
    ];
    if let Some(w) = state.index.wave_scope() {
        title.push(Span::styled(text::wave(&w.name), t.key()));
    }
    let inner = super::ruled(frame, t, area, Line::from(title));
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(2),
    ])
    .areas(inner);
    let name_w = name_width(area);
    // Gutter 2, the name, attempt 4, took 7, the slow flag 1.
    let lead = 2 + name_w + 4 + 7 + 1;
    let bar_w = usize::from(inner.width).saturating_sub(lead).max(1);
    frame.render_widget(
        Paragraph::new(axis_line(summary.axis, name_w, bar_w, t)),
        head,
    );
    let page = usize::from(body.height);
    let first = state.scroll.min(len.saturating_sub(page));
    let lines: Vec<Line> = state
        .index
        .visible_range(first, page)
        .map(|r| {
            let took = timeline::took(r, state.now);
            let slow = took.is_some_and(|d| timeline::is_slow(d, summary.median_took));
            let selected = state.selected.as_ref() == Some(&r.key);
            let mut spans = vec![
                Span::styled(if selected { "▸ " } else { "  " }, t.key()),
                Span::raw(format!(
                    "{:<w$}",
                    format::fit(&name_of(state, r), name_w),
                    w = name_w
                )),
                Span::raw(format!("{:>3} ", r.attempt)),
                Span::styled(
                    format!("{:>7}", took.map_or("-".to_owned(), format::duration)),
                    if slow { t.warn() } else { t.text() },
                ),
                Span::styled(if slow { text::SLOW_FLAG } else { " " }, t.warn()),
            ];
            if let Some(axis) = summary.axis {
                spans.extend(bar_spans(r, state, axis, bar_w, t));
            }
            Line::from(spans)
        })
        .collect();
    if lines.is_empty() {
        frame.render_widget(
            Paragraph::new(Line::styled(format!("  {}", text::NOTHING), t.dim())),
            body,
        );
    } else {
        frame.render_widget(Paragraph::new(lines), body);
    }
    frame.render_widget(
        Paragraph::new(vec![summary_line(&summary, t), legend(t)]),
        foot,
    );
}
