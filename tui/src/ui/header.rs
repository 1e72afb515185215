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
    strings,
};

/// One span describing a connection state.
pub fn conn_span(state: &State, t: &Theme) -> Vec<Span<'static>> {
    let (r, s) = state.conn.worst();
    let what = if r == Resource::Migrations {
        String::new()
    } else {
        format!(" ({})", r.plural())
    };
    match s {
        ConnState::Live => vec![Span::styled("● live", t.ok())],
        ConnState::Listing => vec![Span::styled(format!("◌ listing{what}…"), t.warn())],
        ConnState::Connecting => vec![Span::styled(format!("◌ connecting{what}…"), t.warn())],
        ConnState::Reconnecting {
            retry_at,
            attempt,
            error,
        } => {
            let wait = format::secs_between(state.now, *retry_at);
            vec![Span::styled(
                format!("✕ reconnecting{what} in {wait}s (try {attempt}): {error}"),
                t.bad(),
            )]
        }
        ConnState::Forbidden(m) => vec![Span::styled(format!("✕ forbidden{what}: {m}"), t.bad())],
        ConnState::CrdMissing => vec![Span::styled(
            format!("✕ {}{what}", strings::CRD_HINT),
            t.bad(),
        )],
    }
}

fn short(p: ferry_crds::Phase) -> &'static str {
    use ferry_crds::Phase::*;
    match p {
        Pending => "Pend",
        Queued => "Queue",
        Preparing => "Prep",
        Converting => "Conv",
        Importing => "Imp",
        CreatingVM => "VM",
        Starting => "Start",
        Validating => "Valid",
        Succeeded => "Done",
        Failed => "Failed",
        Cancelled => "Canc",
    }
}

/// Draws the header.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let ns = match &state.scope {
        Scope::All => "all namespaces".to_owned(),
        Scope::Namespace(n) => n.clone(),
    };
    let mut first = vec![
        Span::styled(format!(" {} ", strings::APP), t.badge(false)),
        Span::raw(" ctx "),
        Span::styled(state.context.clone(), t.title()),
        Span::raw("  ns "),
        Span::styled(ns, t.title()),
        Span::raw("  "),
    ];
    if let Some(since) = state.conn.stale_since {
        first.push(Span::styled(
            format!(" STALE {} ", format::age(Some(since), state.now)),
            t.badge(true),
        ));
        first.push(Span::raw(" "));
    }
    first.extend(conn_span(state, t));
    if state.readonly {
        first.push(Span::raw("  "));
        first.push(Span::styled(" READ-ONLY ", t.badge(false)));
    }
    first.push(Span::styled(
        format!(
            "  last event {}",
            state.conn.last_event_at.map_or("-".to_owned(), |t| format!(
                "{} ago",
                format::age(Some(t), state.now)
            ))
        ),
        t.dim(),
    ));
    let narrow = area.width < 120;
    let mut second = vec![Span::raw(" ")];
    let total = state.index.len();
    second.push(Span::styled(
        format!("{total} {}", if narrow { "vmm" } else { "migrations" }),
        t.text(),
    ));
    for (p, n) in state.index.counts().filter(|(_, n)| *n > 0) {
        second.push(Span::styled(if narrow { " " } else { "  " }, t.dim()));
        second.push(Span::styled(
            if narrow { short(p) } else { p.as_str() },
            t.phase(p),
        ));
        second.push(Span::raw(format!(" {n}")));
    }
    frame.render_widget(
        Paragraph::new(vec![Line::from(first), Line::from(second)]),
        area,
    );
}
