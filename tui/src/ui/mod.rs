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
pub mod picker;
pub mod podlogs;
pub mod preflight;
pub mod problems;
pub mod scrolled;
pub mod theme;
pub mod timeline;
pub mod waves;
pub mod welcome;
pub mod yaml;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::Line,
    widgets::{Block, Borders, Paragraph},
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
                strings::too_small(area.width, area.height, MIN_WIDTH, MIN_HEIGHT),
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
    let bands = Bands::of(screen, state);
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
        Some(View::Timeline) => timeline::draw(frame, state, t, body),
        Some(View::Preflight(selected)) => preflight::draw(frame, state, t, body, *selected),
        Some(View::PreflightGroup(key)) => preflight::draw_group(frame, state, t, body, *key),
        Some(View::PodLogs(key)) => podlogs::draw(frame, state, t, body, key),
        Some(View::Problems(selected)) => {
            problems::draw(frame, state, t, body, selected.as_ref());
        }
    }
    if state.show_logs {
        logs::draw(frame, t, logs_area, opts.logs);
    }
    footer::draw(frame, state, t, foot);
    match &state.popup {
        Some(Popup::Help) => help::draw(frame, state, t, area),
        Some(Popup::Confirm(c)) => confirm::draw_confirm(frame, state, t, area, c),
        Some(Popup::Report) => confirm::draw_report(frame, state, t, area),
        Some(Popup::WavePicker { cursor }) => picker::draw(frame, state, t, area, *cursor),
        Some(Popup::Welcome { note }) => welcome::draw(frame, t, area, note),
        None => {}
    }
}

/// Draws a view's rule across the top of `area`, dim, with `title` on it; returns the area
/// under it.
pub fn ruled<'a>(frame: &mut Frame, t: &Theme, area: Rect, title: impl Into<Line<'a>>) -> Rect {
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(t.dim())
        .title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    inner
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use ferry_crds::fixtures::{migration, ts, wave};
    use ratatui::{Terminal, backend::TestBackend};

    use super::*;
    use crate::state::{Action, ClusterId, EventKind, EventRow, Nav, Scope, update};

    const C0: ClusterId = ClusterId(0);

    const SIZES: [(u16, u16); 4] = [(80, 24), (90, 25), (120, 40), (160, 48)];

    /// A board of 200 migrations `m000`…, with `waves` waves and maybe the log pane, told the
    /// terminal is `w`×`h`.
    fn state(w: u16, h: u16, waves: usize, logs: bool) -> State {
        let mut s = State::new("lab", Scope::Namespace("default".into()), false, ts(0).0);
        let rows = (0..200).map(|i| migration(&format!("m{i:03}"))).collect();
        update(&mut s, Action::migrations_listed(C0, rows));
        let strip = (0..waves).map(|i| wave(&format!("w{i}"), 1)).collect();
        update(&mut s, Action::WavesListed(C0, strip));
        if logs {
            update(&mut s, Action::ToggleLogs);
        }
        update(
            &mut s,
            Action::Resize(Screen {
                width: w,
                height: h,
            }),
        );
        s
    }

    /// The words on screen that `keep` accepts.
    fn words_on_screen(s: &State, w: u16, h: u16, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        let opts = Options {
            theme: Theme::MONO,
            logs: false,
        };
        term.draw(|f| draw(f, s, opts)).unwrap();
        term.backend()
            .to_string()
            .split(|c: char| !c.is_alphanumeric() && c != '-')
            .filter(|w| keep(w))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_board_draws_exactly_the_page_the_state_pages_by() {
        let is_row = |w: &str| w.len() == 4 && w.starts_with('m') && w[1..].parse::<u32>().is_ok();
        for (w, h) in SIZES {
            for waves in [0, 2, 6] {
                for logs in [false, true] {
                    let s = state(w, h, waves, logs);
                    let want: BTreeSet<String> = (0..s.page).map(|i| format!("m{i:03}")).collect();
                    let seen = words_on_screen(&s, w, h, is_row);
                    assert_eq!(seen, want, "{w}×{h}, {waves} waves, logs {logs}");
                }
            }
        }
    }

    #[test]
    fn a_page_down_in_a_view_moves_by_exactly_the_lines_it_shows() {
        let is_note = |w: &str| w.len() == 5 && w.starts_with('n') && w[1..].parse::<u32>().is_ok();
        for (w, h) in [(80, 24), (90, 25)] {
            for logs in [false, true] {
                let mut s = state(w, h, 0, logs);
                let key = s.selected.clone().unwrap();
                // Newest first: line 0 is the column header, line i the note `n{50 - i}`.
                let events = (1..=50)
                    .map(|i| EventRow {
                        uid: format!("e{i}"),
                        kind: EventKind::Migration,
                        regarding: key.clone(),
                        time: Some(ts(i).0),
                        type_: "Normal".into(),
                        reason: "R".into(),
                        note: format!("n{i:04}"),
                        count: 1,
                    })
                    .collect();
                update(&mut s, Action::EventsListed(C0, events));
                update(&mut s, Action::ShowEvents);
                update(&mut s, Action::Nav(Nav::PageDown));
                let page = s.page;
                assert!(2 * page <= 51, "the test needs two full pages");
                let want: BTreeSet<String> = (page..2 * page)
                    .map(|line| format!("n{:04}", 51 - line))
                    .collect();
                assert_eq!(
                    words_on_screen(&s, w, h, is_note),
                    want,
                    "{w}×{h}, logs {logs}"
                );
            }
        }
    }

    #[test]
    fn a_frame_reads_only_the_rows_it_shows_of_ten_thousand() {
        let mut s = State::new("lab", Scope::All, false, ts(0).0);
        let rows = (0..10_000)
            .map(|i| migration(&format!("m{i:05}")))
            .collect();
        update(&mut s, Action::migrations_listed(C0, rows));
        for (w, h) in [(80, 24), (200, 60)] {
            update(
                &mut s,
                Action::Resize(Screen {
                    width: w,
                    height: h,
                }),
            );
            update(&mut s, Action::Nav(Nav::PageDown));
            let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
            let before = s.index.rows_read();
            term.draw(|f| {
                draw(
                    f,
                    &s,
                    Options {
                        theme: Theme::MONO,
                        logs: false,
                    },
                )
            })
            .unwrap();
            let read = s.index.rows_read() - before;
            // Column widths look at the page once, the table draws it once.
            assert_eq!(read, 2 * s.page as u64, "{w}×{h}");
            assert!(s.page < 60);
        }
    }
}
