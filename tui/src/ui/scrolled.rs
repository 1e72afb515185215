//! The frame the full-screen views share: a rule titled with the object, then its lines in one
//! or more columns scrolled together by `State::scroll`, which stops at the last full page.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::Paragraph,
};

use super::Theme;
use crate::{
    state::{ObjKey, State},
    strings,
};

/// What a view shows under its rule.
#[derive(Debug)]
pub enum Body<'a> {
    /// Columns of equal width, side by side.
    Columns(Vec<Vec<Line<'a>>>),
    /// The object is gone: this sentence instead.
    Gone(&'a str),
}

/// Draws a view of `key` headed `heading` over `area`.
pub fn draw(
    frame: &mut Frame,
    state: &State,
    t: &Theme,
    area: Rect,
    (heading, key): (String, &ObjKey),
    body: Body<'_>,
) {
    let title = Line::from(vec![
        Span::styled(format!(" {heading} "), t.title()),
        Span::styled(strings::view::in_namespace(&key.namespace), t.dim()),
    ]);
    draw_titled(frame, state, t, area, title, body);
}

/// Draws a view titled `title` (about no one object) over `area`.
pub fn draw_titled(
    frame: &mut Frame,
    state: &State,
    t: &Theme,
    area: Rect,
    title: Line<'_>,
    body: Body<'_>,
) {
    let inner = super::ruled(frame, t, area, title);
    let columns = match body {
        Body::Gone(why) => {
            frame.render_widget(
                Paragraph::new(Line::styled(format!("  {why}"), t.bad())),
                inner,
            );
            return;
        }
        Body::Columns(columns) => columns,
    };
    let page = usize::from(inner.height);
    let longest = columns.iter().map(Vec::len).max().unwrap_or(0);
    let scroll = u16::try_from(state.scroll.min(longest.saturating_sub(page))).unwrap_or(u16::MAX);
    let n = u16::try_from(columns.len()).unwrap_or(1).max(1);
    let areas =
        Layout::horizontal(vec![Constraint::Percentage(100 / n); usize::from(n)]).split(inner);
    for (lines, r) in columns.into_iter().zip(areas.iter()) {
        frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)), *r);
    }
}

/// Draws a view of `key` headed `heading`: `head`'s lines fixed under the rule, then `lines`
/// from screen row `scroll` (at most the last full page). The pod logs view: its pods and
/// stream state stay in sight while its lines scroll.
pub fn draw_headed(
    frame: &mut Frame,
    t: &Theme,
    area: Rect,
    (heading, key): (String, &ObjKey),
    head: Vec<Line<'_>>,
    lines: Vec<Line<'_>>,
    scroll: usize,
) {
    let title = Line::from(vec![
        Span::styled(format!(" {heading} "), t.title()),
        Span::styled(strings::view::in_namespace(&key.namespace), t.dim()),
    ]);
    let inner = super::ruled(frame, t, area, title);
    let n = u16::try_from(head.len())
        .unwrap_or(u16::MAX)
        .min(inner.height);
    let [top, rest] = Layout::vertical([Constraint::Length(n), Constraint::Fill(1)]).areas(inner);
    frame.render_widget(Paragraph::new(head), top);
    let page = usize::from(rest.height);
    let scroll = u16::try_from(scroll.min(lines.len().saturating_sub(page))).unwrap_or(u16::MAX);
    frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)), rest);
}
