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
/// Most rows the footer takes for a message (a refusal naming its namespace and role wraps to
/// two at 80 columns); the body keeps at least [`MIN_BODY`] rows.
pub const MAX_FOOTER_LINES: u16 = 4;
/// Fewest rows the body keeps at [`MIN_HEIGHT`].
pub const MIN_BODY: u16 = 9;

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
    /// The bands of `screen` showing `state`.
    ///
    /// # Guarantees
    /// The bands add up to the screen's height when it is at least [`MIN_HEIGHT`] (the body
    /// then keeps at least [`MIN_BODY`] rows); below that, the body is what is left, possibly
    /// nothing. A message at the bottom takes the lines [`footer_lines`] wraps it into, up to
    /// [`MAX_FOOTER_LINES`].
    pub fn of(screen: Screen, state: &State) -> Bands {
        let height = screen.height;
        let header = 2;
        let strip = u16::try_from(state.waves.len())
            .unwrap_or(u16::MAX)
            .min(MAX_WAVE_LINES);
        let logs = if state.show_logs {
            (height / 3).max(6)
        } else {
            0
        };
        let wanted = u16::try_from(footer_lines(state, screen.width).len()).unwrap_or(u16::MAX);
        let room = height.saturating_sub(header + strip + logs + MIN_BODY);
        let footer = wanted.min(MAX_FOOTER_LINES).min(room).max(1);
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
    let rows = Bands::of(screen, state).body.saturating_sub(chrome);
    Some(usize::from(rows).max(1))
}

/// The message at the bottom (when nothing is being typed), wrapped to `width` columns after
/// the one-column margin the footer keeps: every word of it, none cut. Empty when there is no
/// message (the footer shows its hints then).
pub fn footer_lines(state: &State, width: u16) -> Vec<String> {
    match (&state.input, &state.flash) {
        (None, Some(f)) => wrap(&f.text, usize::from(width.saturating_sub(2)).max(1)),
        _ => vec![],
    }
}

/// `text` in lines of at most `width` characters, broken between words; a word longer than a
/// line is broken inside it. Every character but the spaces a break replaces is kept, in order.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    // The text's own indent starts its first line (a report's entries are indented).
    let body = text.trim_start_matches(' ');
    let indent = (text.len() - body.len()).min(width - 1);
    let mut lines = vec![];
    let mut line = " ".repeat(indent);
    let mut len = indent;
    // Whether `line` holds a word yet (a separating space goes before the next one).
    let mut worded = false;
    for word in body.split(' ') {
        let mut word = word;
        let mut wlen = word.chars().count();
        let sep = usize::from(worded);
        if len + sep + wlen <= width {
            if worded {
                line.push(' ');
            }
            line.push_str(word);
            len += sep + wlen;
            worded = true;
            continue;
        }
        if len > 0 {
            lines.push(std::mem::take(&mut line));
        }
        // A word longer than a line fills lines of its own.
        while wlen > width {
            let cut = word
                .char_indices()
                .nth(width)
                .map_or(word.len(), |(i, _)| i);
            lines.push(word[..cut].to_owned());
            word = &word[cut..];
            wlen -= width;
        }
        line.push_str(word);
        len = wlen;
        worded = true;
    }
    if len > 0 || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wrapping_keeps_every_word_in_order_and_no_line_is_longer_than_asked() {
        let text = "retry needs patch on virtualmachinemigrations in a-namespace-with-a-long-name: grant ferry-operate";
        for width in [10, 20, 40, 78, 200] {
            let lines = wrap(text, width);
            assert!(
                lines.iter().all(|l| l.chars().count() <= width),
                "{width}: {lines:?}"
            );
            assert_eq!(
                lines.concat().replace(' ', ""),
                text.replace(' ', ""),
                "{width}"
            );
            if width >= 40 {
                // Every word fits a line: broken only between words.
                assert_eq!(lines.join(" "), text, "{width}");
            }
        }
        assert_eq!(wrap("", 10), vec![String::new()]);
        assert_eq!(wrap("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
        // The text's own indent starts its first line.
        assert_eq!(wrap("  ab cd", 5), vec!["  ab", "cd"]);
    }
}
