//! The preflight view (`P`): the concerns preflight found about the migrations on the board,
//! one line per code and severity, Critical first; Enter lists a group's migrations with their
//! messages (`draw_group`).

use ferry_crds::Severity;
use ratatui::{
    Frame,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{
    Theme, format,
    scrolled::{self, Body},
};
use crate::{
    state::{
        GroupKey, State,
        preflight::{self, Group},
    },
    strings::{self, preflight as text},
};

/// How a concern of `severity` reads: a Critical one that holds something is bad news, one the
/// operator accepted only worth a glance.
pub fn severity_style(t: &Theme, severity: Severity, holds: bool) -> Style {
    match severity {
        Severity::Critical if holds => t.bad(),
        Severity::Critical => t.dim(),
        Severity::Warning => t.warn(),
        Severity::Info => t.text(),
    }
}

/// The groups of the rows the board shows.
fn board_groups(state: &State) -> Vec<Group<'_>> {
    preflight::groups(state.index.visible_range(0, state.index.visible_len()))
}

fn title(state: &State, t: &Theme) -> Line<'static> {
    let p = preflight::tally(state.index.visible_range(0, state.index.visible_len()));
    let mut spans = vec![
        Span::styled(text::TITLE, t.title()),
        Span::raw(text::tally(p.checked, p.ready, p.blocked, p.warnings)),
    ];
    if let Some(w) = state.index.wave_scope() {
        spans.push(Span::styled(strings::board::wave(&w.name), t.key()));
    }
    let f = state.index.filter();
    if !f.raw.is_empty() {
        spans.push(Span::styled(strings::board::filter(&f.raw), t.key()));
    }
    Line::from(spans)
}

fn group_line(g: &Group<'_>, selected: bool, t: &Theme) -> Line<'static> {
    let k = g.key;
    let line = Line::from(vec![
        Span::styled(if selected { "▸ " } else { "  " }, t.key()),
        Span::styled(
            text::group(g.members.len(), k.severity.as_str(), k.code.as_str()),
            severity_style(t, k.severity, g.blocking() > 0),
        ),
        Span::styled(text::accepted(g.accepted()), t.ok()),
        Span::styled(format!("  {}", text::about(k.code)), t.dim()),
    ]);
    if selected {
        line.style(t.cursor(true))
    } else {
        line
    }
}

/// Draws the groups, the one `selected` (else the first) under the cursor and on screen.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, selected: Option<GroupKey>) {
    let inner = super::ruled(frame, t, area, title(state, t));
    let groups = board_groups(state);
    if groups.is_empty() {
        let checked = state
            .index
            .visible_range(0, state.index.visible_len())
            .any(|r| r.preflight().is_some());
        let why = if checked {
            text::NOTHING_FOUND
        } else {
            text::NOTHING_CHECKED
        };
        frame.render_widget(
            Paragraph::new(Line::styled(format!("  {why}"), t.dim())),
            inner,
        );
        return;
    }
    let page = usize::from(inner.height).max(1);
    let at = preflight::position(&groups, selected);
    let first = at.saturating_sub(page - 1);
    let lines: Vec<Line> = groups
        .iter()
        .enumerate()
        .skip(first)
        .take(page)
        .map(|(i, g)| group_line(g, i == at, t))
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The lines of one member: its name and phase, then each concern's message wrapped after them.
fn member_lines(
    state: &State,
    m: &preflight::Member<'_>,
    name_w: usize,
    msg_w: usize,
    t: &Theme,
) -> Vec<Line<'static>> {
    let r = m.row;
    let (phase, phase_style) = if r.held_by.is_some() {
        (strings::board::BLOCKED, t.bad())
    } else {
        (r.phase.as_str(), t.phase(r.phase))
    };
    let lead = 2 + name_w + 1 + 10 + 1;
    let style = if m.accepted { t.dim() } else { t.text() };
    let mut out = vec![];
    for c in &m.concerns {
        let msg = if m.accepted {
            format!("({}) {}", text::ACCEPTED, c.message)
        } else {
            c.message.clone()
        };
        for line in format::wrap(&msg, msg_w) {
            let mut spans = if out.is_empty() {
                vec![
                    Span::raw(format!(
                        "  {:<name_w$} ",
                        format::fit(&state.listed_name(r), name_w)
                    )),
                    Span::styled(format!("{phase:<10} "), phase_style),
                ]
            } else {
                vec![Span::raw(" ".repeat(lead))]
            };
            spans.push(Span::styled(line, style));
            out.push(Line::from(spans));
        }
    }
    out
}

/// Draws the migrations of the group `key` with their messages, scrolled by `state.scroll`.
pub fn draw_group(frame: &mut Frame, state: &State, t: &Theme, area: Rect, key: GroupKey) {
    let groups = board_groups(state);
    let group = groups.iter().find(|g| g.key == key);
    let vms = text::vms(group.map_or(0, |g| g.members.len()));
    let heading = Line::styled(
        text::group_heading(key.code.as_str(), key.severity.as_str(), &vms),
        t.title(),
    );
    let Some(group) = group else {
        scrolled::draw_titled(frame, state, t, area, heading, Body::Gone(text::GROUP_GONE));
        return;
    };
    let width = usize::from(area.width);
    let longest = group
        .members
        .iter()
        .map(|m| state.listed_name(m.row).chars().count())
        .max()
        .unwrap_or(0);
    let name_w = longest.clamp(8, if width >= 140 { 40 } else { 24 });
    let msg_w = width.saturating_sub(2 + name_w + 1 + 10 + 1).max(20);
    let mut about = vec![Span::styled(
        format!("  {}", text::about(key.code)),
        t.dim(),
    )];
    if key.severity == Severity::Critical && key.code.acceptable() {
        about.push(Span::styled(
            format!("; {}", text::MAY_BE_ACCEPTED),
            t.dim(),
        ));
    }
    let mut lines = vec![
        Line::from(about),
        Line::styled(text::group_header(name_w), t.dim()),
    ];
    for m in &group.members {
        lines.extend(member_lines(state, m, name_w, msg_w, t));
    }
    scrolled::draw_titled(frame, state, t, area, heading, Body::Columns(vec![lines]));
}
