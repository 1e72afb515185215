//! The help overlay, generated from the key map.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
};

use super::{Theme, centered};
use crate::keys::BINDINGS;

/// Draws help over `area`.
pub fn draw(frame: &mut Frame, t: &Theme, area: Rect) {
    let mut lines: Vec<Line> = BINDINGS
        .iter()
        .map(|b| Line::from(vec![Span::styled(format!(" {:>9}  ", b.label), t.key()), Span::raw(b.help)]))
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::styled(" Pips: SourceDiscovered Validated DiskConverted DiskImported", t.dim()));
    lines.push(Line::styled("       VMCreated VMStarted GuestReady Ready  (● true ✕ false ○ unknown)", t.dim()));
    lines.push(Line::styled(" Gutter: ● marked  … pending  ✕ cancelling  ‖ paused  † deleting", t.dim()));
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, 78, h);
    frame.render_widget(Clear, r);
    let block = Block::default().borders(Borders::ALL).border_style(t.title()).title(" keys (Esc closes) ");
    frame.render_widget(Paragraph::new(lines).block(block), r);
}
