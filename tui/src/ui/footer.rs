//! The bottom line: the filter or command being typed, else a message, else key hints (from
//! the key map, see `keys::BOARD_HINTS`).

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::Theme;
use crate::{
    keys,
    state::{Action, Filter, Focus, InputKind, State, View},
    strings,
};

/// Draws the footer.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
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
    } else if let Some(f) = &state.flash {
        Line::styled(
            format!(" {}", f.text),
            if f.error { t.bad() } else { t.ok() },
        )
    } else {
        let hints = if let Some(View::Preflight(_)) = state.view() {
            keys::hints(keys::PREFLIGHT_HINTS)
        } else if let Some(View::PreflightGroup(_)) = state.view() {
            keys::hints(keys::PREFLIGHT_GROUP_HINTS)
        } else if let Some(View::Problems(_)) = state.view() {
            keys::hints(keys::PROBLEMS_HINTS)
        } else if let Some(View::PodLogs(_)) = state.view() {
            keys::hints(keys::PODLOGS_HINTS)
        } else if let Some(View::Details(_)) = state.view() {
            keys::hints(keys::DETAILS_HINTS)
        } else if !state.views.is_empty() {
            keys::hints(keys::VIEW_HINTS)
        } else if state.focus == Focus::Waves {
            format!(
                "{}{}",
                strings::hint::WAVE_STRIP,
                keys::hints(keys::WAVE_HINTS)
            )
        } else {
            keys::hints(keys::BOARD_HINTS)
        };
        Line::styled(format!(" {hints}"), t.dim())
    };
    frame.render_widget(Paragraph::new(line), area);
}
