//! The bottom line: the filter or command being typed, else a message (wrapped whole over as
//! many lines as the state's layout gave the footer), else key hints (from the key map, see
//! `keys::BOARD_HINTS`), those the API server refuses greyed and labelled with the role that
//! grants them.

use ratatui::{
    Frame,
    layout::Rect,
    style::Modifier,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::Theme;
use crate::{
    keys::{self, Hint},
    state::{Action, Filter, Focus, InputKind, State, View, layout},
    strings,
};

/// Draws the footer.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    if state.input.is_none()
        && let Some(f) = &state.flash
    {
        let style = if f.error { t.bad() } else { t.ok() };
        let lines: Vec<Line> = layout::footer_lines(state, area.width)
            .into_iter()
            .map(|l| Line::styled(format!(" {l}"), style))
            .collect();
        frame.render_widget(Paragraph::new(lines), area);
        return;
    }
    let line = if let Some(input) = &state.input {
        let start = match input.kind {
            InputKind::Filter => Action::StartFilter,
            InputKind::Command => Action::StartCommand,
        };
        let mut spans = vec![
            Span::styled(keys::footer_key(&start).unwrap_or_default(), t.key()),
            Span::raw(input.text.clone()),
            Span::styled("█", t.key()),
        ];
        if input.kind == InputKind::Filter {
            let f = Filter::parse(&input.text);
            if !f.errors.is_empty() {
                spans.push(Span::styled(format!("   {}", f.errors.join(", ")), t.bad()));
            } else {
                spans.push(Span::styled(
                    format!("   {}", strings::FILTER_TYPING),
                    t.dim(),
                ));
            }
        }
        Line::from(spans)
    } else {
        let (prefix, list) = if let Some(View::Preflight(_)) = state.view() {
            ("", keys::PREFLIGHT_HINTS)
        } else if let Some(View::PreflightGroup(_)) = state.view() {
            ("", keys::PREFLIGHT_GROUP_HINTS)
        } else if let Some(View::Problems(_)) = state.view() {
            ("", keys::PROBLEMS_HINTS)
        } else if let Some(View::PodLogs(_)) = state.view() {
            ("", keys::PODLOGS_HINTS)
        } else if let Some(View::Details(_)) = state.view() {
            ("", keys::DETAILS_HINTS)
        } else if !state.views.is_empty() {
            ("", keys::VIEW_HINTS)
        } else if state.focus == Focus::Waves {
            (strings::hint::WAVE_STRIP, keys::WAVE_HINTS)
        } else {
            ("", keys::BOARD_HINTS)
        };
        hints_line(state, t, prefix, list)
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// The hints, dim; those the API server refuses follow the first hint together (so they stay
/// on screen at 80 columns), crossed out, and then the role that grants them.
fn hints_line(state: &State, t: &Theme, prefix: &str, list: &[Hint]) -> Line<'static> {
    let parts = keys::hint_parts(list, state);
    let mut group: Vec<Span<'static>> = vec![];
    let mut roles: Vec<&str> = vec![];
    for r in parts.iter().filter(|p| p.needs.is_some()) {
        if !group.is_empty() {
            group.push(Span::styled(" ", t.dim()));
        }
        group.push(Span::styled(
            r.text.clone(),
            t.dim().add_modifier(Modifier::CROSSED_OUT),
        ));
        if let Some(role) = r.needs
            && !roles.contains(&role)
        {
            roles.push(role);
        }
    }
    for role in roles {
        group.push(Span::styled(
            format!(" {}", strings::needs_role(role)),
            t.dim(),
        ));
    }
    let mut segments: Vec<Vec<Span<'static>>> = vec![];
    for p in parts.iter().filter(|p| p.needs.is_none()) {
        segments.push(vec![Span::styled(p.text.clone(), t.dim())]);
        if segments.len() == 1 && !group.is_empty() {
            segments.push(std::mem::take(&mut group));
        }
    }
    if !group.is_empty() {
        segments.push(group);
    }
    let mut spans = vec![Span::styled(format!(" {prefix}"), t.dim())];
    for (i, seg) in segments.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled("  ", t.dim()));
        }
        spans.extend(seg);
    }
    Line::from(spans)
}
