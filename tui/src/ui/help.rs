//! The help overlay, generated from the key map. A key the API server refuses for what it would
//! act on now is greyed, its help replaced by the role that grants it.

use ratatui::{
    Frame,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
};

use super::{Theme, centered};
use crate::{
    keys::BINDINGS,
    state::{State, refusal},
    strings::{self, help},
};

/// Draws help over `area`.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    // Two columns when one does not fit the height (80×24).
    let two = BINDINGS.len() as u16 + 6 > area.height;
    let width: usize = if two { 38 } else { 76 };
    let cell = |i: usize| {
        BINDINGS.get(i).map_or_else(Vec::new, |b| {
            let (text, key_style, style) = match refusal(state, &(b.action)()) {
                Some(r) => (
                    strings::help_refused(r.what, r.check.role()),
                    t.dim(),
                    t.dim(),
                ),
                None => (b.help.to_owned(), t.key(), Style::new()),
            };
            let help = super::format::fit(&text, width - 11);
            vec![
                Span::styled(format!(" {:>8}  ", b.label), key_style),
                Span::styled(format!("{help:<w$}", w = width - 11), style),
            ]
        })
    };
    let rows = if two {
        BINDINGS.len().div_ceil(2)
    } else {
        BINDINGS.len()
    };
    let mut lines: Vec<Line> = (0..rows)
        .map(|i| {
            let mut spans = cell(i);
            if two {
                spans.extend(cell(i + rows));
            }
            Line::from(spans)
        })
        .collect();
    lines.push(Line::raw(""));
    lines.extend(help::LEGEND.iter().map(|l| Line::styled(*l, t.dim())));
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, 78, h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(t.title())
        .title(format!(" {} ", help::TITLE));
    frame.render_widget(Paragraph::new(lines).block(block), r);
}
