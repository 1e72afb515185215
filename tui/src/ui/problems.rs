//! The problems view (`!`): the failed and stuck migrations on the board, one group per cause
//! and first line of message, biggest first, each with its migrations under it; Enter marks
//! a group for the verbs.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{Theme, format};
use crate::{
    state::{
        State,
        problems::{self, Cause, Group, ProblemKey},
    },
    strings::{self, problems as text},
};

fn title(state: &State, groups: &[Group<'_>], t: &Theme) -> Line<'static> {
    let count = |stuck: bool| -> usize {
        groups
            .iter()
            .filter(|g| matches!(g.key.cause, Cause::Stuck(_)) == stuck)
            .map(|g| g.members.len())
            .sum()
    };
    let mut spans = vec![
        Span::styled(text::TITLE, t.title()),
        Span::raw(text::tally(count(false), count(true))),
    ];
    if let Some(w) = state.index.wave_scope() {
        spans.push(Span::styled(strings::board::wave(&w.name), t.key()));
    }
    let f = state.index.filter();
    if !f.raw.is_empty() {
        spans.push(Span::styled(strings::board::filter(&f.raw), t.key()));
    }
    if !state.marks.is_empty() {
        spans.push(Span::styled(
            strings::board::marked(state.marks.len()),
            t.key(),
        ));
    }
    Line::from(spans)
}

/// A group's lines: its cause and line (marked `●` when all its migrations are), then its
/// migrations, with how long each has been failed or stuck, wrapped.
fn group_lines(
    state: &State,
    g: &Group<'_>,
    selected: bool,
    width: usize,
    t: &Theme,
) -> Vec<Line<'static>> {
    let (verb, style) = match g.key.cause {
        Cause::Failed(_) => (text::FAILED, t.bad()),
        Cause::Stuck(_) => (text::STUCK, t.warn()),
    };
    let all_marked = g.members.iter().all(|m| state.marks.contains(&m.row.key));
    let head = text::group(g.members.len(), verb, g.key.cause.word(), &g.key.line);
    let mut first = Line::from(vec![
        Span::styled(if selected { "▸" } else { " " }, t.key()),
        Span::styled(if all_marked { "●" } else { " " }, t.key()),
        Span::styled(format::fit(&head, width.saturating_sub(2)), style),
    ]);
    if selected {
        first = first.style(t.cursor(true));
    }
    let names: Vec<String> = g
        .members
        .iter()
        .map(|m| {
            let secs = m.for_.as_secs();
            format!(
                "{} ({})",
                state.listed_name(m.row),
                format::duration(secs.max(0))
            )
        })
        .collect();
    let mut out = vec![first];
    for l in format::wrap(&names.join(", "), width.saturating_sub(8)) {
        out.push(Line::styled(format!("        {l}"), t.dim()));
    }
    out
}

/// Draws the groups, the one `selected` (else the first) under the cursor and on screen.
pub fn draw(
    frame: &mut Frame,
    state: &State,
    t: &Theme,
    area: Rect,
    selected: Option<&ProblemKey>,
) {
    let groups = problems::groups(
        state.index.visible_range(0, state.index.visible_len()),
        &state.moved,
        state.now,
    );
    let inner = super::ruled(frame, t, area, title(state, &groups, t));
    let width = usize::from(inner.width);
    let mut lines = vec![Line::styled(format!("  {}", text::STUCK_MEANS), t.dim())];
    if groups.is_empty() {
        lines.push(Line::styled(format!("  {}", text::NONE), t.dim()));
        frame.render_widget(Paragraph::new(lines), inner);
        return;
    }
    let at = problems::position(&groups, selected);
    let (mut sel_first, mut sel_len) = (0, 0);
    for (i, g) in groups.iter().enumerate() {
        let group = group_lines(state, g, i == at, width, t);
        if i == at {
            (sel_first, sel_len) = (lines.len(), group.len());
        }
        lines.extend(group);
    }
    // The selected group's lines on screen, as low as they need to be.
    let page = usize::from(inner.height).max(1);
    let start = (sel_first + sel_len).saturating_sub(page).min(sel_first);
    let shown: Vec<Line> = lines.into_iter().skip(start).take(page).collect();
    frame.render_widget(Paragraph::new(shown), inner);
}
