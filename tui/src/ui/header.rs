//! The two header lines: context, scope, connection, counts per phase, time since last event.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{Theme, format};
use crate::{
    state::{ConnState, Resource, Scope, State},
    strings::{self, header as text},
};

/// One span describing a connection state.
pub fn conn_span(state: &State, t: &Theme) -> Vec<Span<'static>> {
    let (r, s) = state.conn.worst();
    let what = if r == Resource::Migrations {
        String::new()
    } else {
        text::about(r.plural())
    };
    match s {
        ConnState::Live => vec![Span::styled(text::LIVE, t.ok())],
        ConnState::Listing => vec![Span::styled(text::listing(&what), t.warn())],
        ConnState::Connecting => vec![Span::styled(text::connecting(&what), t.warn())],
        ConnState::Reconnecting {
            retry_at,
            attempt,
            error,
        } => {
            let wait = format::secs_between(state.now, *retry_at);
            vec![Span::styled(
                text::reconnecting(&what, wait, *attempt, error),
                t.bad(),
            )]
        }
        ConnState::Forbidden(m) => vec![Span::styled(text::forbidden(&what, m), t.bad())],
        ConnState::CrdMissing => vec![Span::styled(text::crd_missing(&what), t.bad())],
    }
}

/// Draws the header.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let ns = match &state.scope {
        Scope::All => text::ALL_NAMESPACES.to_owned(),
        Scope::Namespace(n) => n.clone(),
    };
    let mut first = vec![
        Span::styled(format!(" {} ", strings::APP), t.badge(false)),
        Span::raw(text::CTX),
        Span::styled(state.context.clone(), t.title()),
        Span::raw(text::NS),
        Span::styled(ns, t.title()),
        Span::raw("  "),
    ];
    if let Some(since) = state.conn.stale_since {
        first.push(Span::styled(
            text::stale(&format::age(Some(since), state.now)),
            t.badge(true),
        ));
        first.push(Span::raw(" "));
    }
    first.extend(conn_span(state, t));
    if state.readonly {
        first.push(Span::raw("  "));
        first.push(Span::styled(text::READ_ONLY, t.badge(false)));
    }
    let last = state
        .conn
        .last_event_at
        .map(|t| format::age(Some(t), state.now));
    first.push(Span::styled(text::last_event(last.as_deref()), t.dim()));
    let narrow = area.width < 120;
    let mut second = vec![Span::raw(" ")];
    let total = state.index.len();
    second.push(Span::styled(
        format!(
            "{total} {}",
            if narrow {
                text::MIGRATIONS_SHORT
            } else {
                text::MIGRATIONS
            }
        ),
        t.text(),
    ));
    for (p, n) in state.index.counts().filter(|(_, n)| *n > 0) {
        second.push(Span::styled(if narrow { " " } else { "  " }, t.dim()));
        second.push(Span::styled(
            if narrow {
                text::short_phase(p)
            } else {
                p.as_str()
            },
            t.phase(p),
        ));
        second.push(Span::raw(format!(" {n}")));
    }
    frame.render_widget(
        Paragraph::new(vec![Line::from(first), Line::from(second)]),
        area,
    );
}
