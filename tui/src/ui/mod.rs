//! Drawing: functions from `&State` and a `Rect` to cells, one file per view or popup.

pub mod board;
pub mod confirm;
pub mod details;
pub mod events;
pub mod footer;
pub mod format;
pub mod header;
pub mod help;
pub mod logs;
pub mod scrolled;
pub mod theme;
pub mod waves;
pub mod yaml;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::Line,
    widgets::Paragraph,
};

pub use theme::Theme;

use crate::{
    keys,
    state::{Action, Popup, Screen, State, View, layout::Bands},
    strings,
};

pub use crate::state::layout::{MIN_HEIGHT, MIN_WIDTH};

/// Whether to draw the log pane (off in snapshot tests, whose logger is global).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Styles.
    pub theme: Theme,
    /// Draw the tui-logger pane when the state asks for it.
    pub logs: bool,
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, state: &State, opts: Options) {
    let area = frame.area();
    let screen = Screen {
        width: area.width,
        height: area.height,
    };
    if screen.too_small() {
        let msg = Paragraph::new(vec![
            Line::raw(""),
            Line::styled(
                strings::too_small(area.width, area.height),
                opts.theme.bad(),
            ),
            Line::raw(strings::quits(
                &keys::footer_key(&Action::Quit).unwrap_or_default(),
            )),
        ])
        .centered()
        .wrap(ratatui::widgets::Wrap { trim: true });
        frame.render_widget(msg, area);
        return;
    }
    let t = &opts.theme;
    // The same bands the state takes its page from.
    let bands = Bands::of(area.height, state);
    let [head, strip, body, logs_area, foot] = Layout::vertical([
        Constraint::Length(bands.header),
        Constraint::Length(bands.strip),
        Constraint::Length(bands.body),
        Constraint::Length(bands.logs),
        Constraint::Length(bands.footer),
    ])
    .areas(area);
    header::draw(frame, state, t, head);
    waves::draw(frame, state, t, strip);
    match state.view() {
        None => board::draw(frame, state, t, body),
        Some(View::Details(key)) => details::draw(frame, state, t, body, key),
        Some(View::Yaml(target)) => yaml::draw(frame, state, t, body, target),
        Some(View::Events(target)) => events::draw(frame, state, t, body, target),
    }
    if state.show_logs {
        logs::draw(frame, t, logs_area, opts.logs);
    }
    footer::draw(frame, state, t, foot);
    match &state.popup {
        Some(Popup::Help) => help::draw(frame, t, area),
        Some(Popup::Confirm(c)) => confirm::draw_confirm(frame, state, t, area, c),
        Some(Popup::Report) => confirm::draw_report(frame, state, t, area),
        None => {}
    }
}

/// A rectangle of `w`×`h` centred in `area`, clamped to it.
pub fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}
