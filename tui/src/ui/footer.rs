//! The bottom line: the filter or command being typed, else a message, else key hints.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::Theme;
use crate::{
    state::{Filter, Focus, InputKind, State},
    strings,
};

/// Draws the footer.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let line = if let Some(input) = &state.input {
        let prefix = match input.kind {
            InputKind::Filter => "/",
            InputKind::Command => ":",
        };
        let mut spans = vec![
            Span::styled(prefix, t.key()),
            Span::raw(input.text.clone()),
            Span::styled("█", t.key()),
        ];
        if input.kind == InputKind::Filter {
            let f = Filter::parse(&input.text);
            if !f.errors.is_empty() {
                spans.push(Span::styled(format!("   {}", f.errors.join(", ")), t.bad()));
            } else {
                spans.push(Span::styled(
                    "   Enter keeps it, Esc too; tokens phase: wave: ns:",
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
        let hints = if !state.views.is_empty() {
            strings::HINTS_VIEW
        } else if state.focus == Focus::Waves {
            strings::HINTS_WAVES
        } else {
            strings::HINTS_BOARD
        };
        Line::styled(format!(" {hints}"), t.dim())
    };
    frame.render_widget(Paragraph::new(line), area);
}
