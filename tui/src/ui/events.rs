//! The Events of one object, newest first, live.

use ratatui::{Frame, layout::Rect, text::Line};

use super::{
    Theme,
    details::event_lines,
    scrolled::{self, Body},
};
use crate::{
    state::{EventKind, State, Target, TargetKind},
    strings::view,
};

/// Draws the events view.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, target: &Target) {
    let kind = match target.kind {
        TargetKind::Migration => EventKind::Migration,
        TargetKind::Wave => EventKind::Wave,
    };
    let mut lines = vec![Line::styled(view::events_header(), t.dim())];
    lines.extend(event_lines(
        state,
        kind,
        &target.key,
        t,
        usize::from(area.width),
        None,
    ));
    let heading = (view::events_heading(&target.key.name), &target.key);
    scrolled::draw(frame, state, t, area, heading, Body::Columns(vec![lines]));
}
