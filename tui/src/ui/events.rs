//! The Events of one object, newest first, live.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
};

use super::{Theme, details::event_lines};
use crate::state::{EventKind, State, Target, TargetKind};

/// Draws the events view.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, target: &Target) {
    let kind = match target.kind {
        TargetKind::Migration => EventKind::Migration,
        TargetKind::Wave => EventKind::Wave,
    };
    let title = Line::from(vec![
        Span::styled(format!(" events of {} ", target.key.name), t.title()),
        Span::styled(format!("namespace {} ", target.key.namespace), t.dim()),
    ]);
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(t.dim())
        .title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut lines = vec![Line::styled(
        format!("  {:>7} {:<8}{:<22}{}", "AGE", "TYPE", "REASON", "MESSAGE"),
        t.dim(),
    )];
    lines.extend(event_lines(state, kind, &target.key, t));
    let page = inner.height as usize;
    let scroll = state.scroll.min(lines.len().saturating_sub(page)) as u16;
    frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)), inner);
}
