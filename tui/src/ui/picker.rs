//! The wave picker (`w`): every wave with its progress, "every wave" first; Enter shows one.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
};

use super::{Theme, centered, waves::progress_spans};
use crate::{
    keys,
    state::{Action, Nav, State},
    strings::picker as text,
};

/// Draws the picker with line `cursor` selected.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, cursor: usize) {
    let wide = area.width >= 140;
    let width = if wide { 120 } else { 78 };
    // Border 2, hint line 2; the rest lists waves around the cursor.
    let room = usize::from(area.height.saturating_sub(6)).max(1);
    let total = state.waves.len() + 1;
    let first = cursor
        .saturating_sub(room - 1)
        .min(total.saturating_sub(room));
    let mut lines = vec![];
    for i in first..total.min(first + room) {
        let selected = i == cursor;
        let mut spans = vec![Span::styled(if selected { "▸ " } else { "  " }, t.key())];
        match i.checked_sub(1).and_then(|w| state.waves.get(w)) {
            None => spans.push(Span::styled(
                text::every_wave(state.waves.len(), state.index.len()),
                t.title(),
            )),
            // Inside the border, after the cursor's two cells.
            Some(w) => spans.extend(progress_spans(state, w, t, wide, usize::from(width) - 4)),
        }
        let mut line = Line::from(spans);
        if selected {
            line = line.style(t.cursor(true));
        }
        lines.push(line);
    }
    lines.push(Line::raw(""));
    let key = |a: Action| keys::footer_key(&a).unwrap_or_default();
    lines.push(Line::styled(
        text::hint(
            &format!(
                "{}/{}",
                key(Action::Nav(Nav::Down)),
                key(Action::Nav(Nav::Up))
            ),
            &key(Action::Enter),
            &key(Action::Back),
        ),
        t.dim(),
    ));
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, width, h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(t.title())
        .title(text::TITLE);
    frame.render_widget(Paragraph::new(lines).block(block), r);
}
