//! The log pane: tracing records collected by tui-logger, never printed over the board.

use ratatui::{
    Frame,
    layout::Rect,
    widgets::{Block, Borders, Paragraph},
};
use tui_logger::{TuiLoggerLevelOutput, TuiLoggerWidget};

use super::Theme;
use crate::{keys, state::Action, strings};

/// Draws the log pane; `live` false draws an empty pane (tests, whose logger is global).
pub fn draw(frame: &mut Frame, t: &Theme, area: Rect, live: bool) {
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(t.dim())
        .title(strings::logs_title(
            &keys::footer_key(&Action::ToggleLogs).unwrap_or_default(),
        ));
    if live {
        let w = TuiLoggerWidget::default()
            .block(block)
            .output_level(Some(TuiLoggerLevelOutput::Abbreviated))
            .output_target(true)
            .output_file(false)
            .output_line(false)
            .style_error(t.bad())
            .style_warn(t.warn());
        frame.render_widget(w, area);
    } else {
        frame.render_widget(Paragraph::new("").block(block), area);
    }
}
