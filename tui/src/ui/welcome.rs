//! The first screen of `ferry --welcome`: which keys to try, from the key map.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph, Wrap},
};

use super::{Theme, centered};
use crate::{
    keys,
    state::{Action, Nav, Verb},
    strings::welcome as text,
};

/// What to try, with the actions whose keys it names.
const TRY: [(&[Action], &str); 9] = [
    (&[Action::Nav(Nav::Down), Action::Nav(Nav::Up)], text::MOVE),
    (&[Action::Enter], text::DETAILS),
    (&[Action::PickWave], text::WAVES),
    (&[Action::ShowTimeline], text::TIMELINE),
    (&[Action::ShowPreflight], text::PREFLIGHT),
    (&[Action::StartFilter], text::FILTER),
    (&[Action::Request(Verb::Retry)], text::RETRY),
    (&[Action::Request(Verb::Cancel)], text::CANCEL),
    (&[Action::Quit], text::QUIT),
];

/// Draws the welcome over `area`, with `note` (may be empty) under its title.
pub fn draw(frame: &mut Frame, t: &Theme, area: Rect, note: &str) {
    let mut lines = vec![Line::styled(text::TITLE, t.title()), Line::raw("")];
    if !note.is_empty() {
        lines.push(Line::raw(format!(" {note}")));
        lines.push(Line::raw(""));
    }
    for (actions, what) in TRY {
        let keys: Vec<String> = actions.iter().filter_map(keys::footer_key).collect();
        lines.push(Line::from(vec![
            Span::styled(format!("  {:>7}  ", keys.join(" ")), t.key()),
            Span::raw(what),
        ]));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(text::ANY_KEY, t.dim()));
    let h = (lines.len() as u16 + 4).min(area.height);
    let r = centered(area, 76, h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(t.title())
        .title(text::BORDER);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        r,
    );
}
