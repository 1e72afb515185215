//! The screen's bands as plain numbers, from the terminal size the event loop reports
//! ([`Action::Resize`](super::Action::Resize)) and what the state shows. `ui::draw` cuts its
//! areas from [`Bands`] and `update` takes [`State::page`] from [`page`], so paging moves by
//! exactly the rows on screen without drawing ever feeding anything back to the state.

use super::{State, View};

/// The smallest terminal the cockpit draws in; below it, only a message.
pub const MIN_WIDTH: u16 = 80;
/// See [`MIN_WIDTH`].
pub const MIN_HEIGHT: u16 = 24;
/// Most wave lines shown at once.
pub const MAX_WAVE_LINES: u16 = 4;
/// Rows above the board's first row: the rule with its title, the column header.
pub const BOARD_CHROME: u16 = 2;
/// Rows above a view's first line: the rule with its title.
pub const VIEW_CHROME: u16 = 1;
/// Rows of the timeline that are not migrations: the rule with its title, the time axis, and
/// below the bars, where the time went and the legend.
pub const TIMELINE_CHROME: u16 = 4;
/// Rows of the pod logs view above its lines: the rule, the pods, the stream's state.
pub const PODLOGS_CHROME: u16 = 3;

/// The terminal's size in cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Screen {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

impl Screen {
    /// Whether the cockpit draws only the "too small" message.
    pub fn too_small(self) -> bool {
        self.width < MIN_WIDTH || self.height < MIN_HEIGHT
    }
}

/// Rows of each band of the main screen, top to bottom; they add up to the screen's height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bands {
    /// Context, connection and counts.
    pub header: u16,
    /// One line per wave, up to [`MAX_WAVE_LINES`].
    pub strip: u16,
    /// The board or the innermost view.
    pub body: u16,
    /// The log pane, when shown.
    pub logs: u16,
    /// Hints, messages, the line being typed.
    pub footer: u16,
}

impl Bands {
    /// The bands of a screen `height` rows high showing `state`.
    ///
    /// # Guarantees
    /// The bands add up to `height` when it is at least [`MIN_HEIGHT`] (the body then keeps
    /// at least 9 rows); below that, the body is what is left, possibly nothing.
    pub fn of(height: u16, state: &State) -> Bands {
        let header = 2;
        let footer = 1;
        let strip = u16::try_from(state.waves.len())
            .unwrap_or(u16::MAX)
            .min(MAX_WAVE_LINES);
        let logs = if state.show_logs {
            (height / 3).max(6)
        } else {
            0
        };
        let body = height.saturating_sub(header + strip + logs + footer);
        Bands {
            header,
            strip,
            body,
            logs,
            footer,
        }
    }
}

/// Rows a page of the board, or of the innermost view, holds on the screen last reported;
/// `None` before the first report.
pub fn page(state: &State) -> Option<usize> {
    let screen = state.screen?;
    let chrome = match state.view() {
        None => BOARD_CHROME,
        Some(View::Timeline) => TIMELINE_CHROME,
        Some(View::PodLogs(_)) => PODLOGS_CHROME,
        Some(
            View::Details(_)
            | View::Yaml(_)
            | View::Events(_)
            | View::Preflight(_)
            | View::PreflightGroup(_)
            | View::Problems(_),
        ) => VIEW_CHROME,
    };
    let rows = Bands::of(screen.height, state).body.saturating_sub(chrome);
    Some(usize::from(rows).max(1))
}
