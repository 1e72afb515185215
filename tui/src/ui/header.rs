//! The two header lines: context, scope, connection, counts per phase, time since last event.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{Theme, format};
use crate::{
    state::{ClusterView, ConnState, Connection, Resource, Scope, State, Timestamp},
    strings::{self, header as text},
};

/// Spans describing the worst watch state of one cluster.
pub fn conn_span(conn: &Connection, now: Timestamp, t: &Theme) -> Vec<Span<'static>> {
    let (r, s) = conn.worst();
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
            let wait = format::secs_between(now, *retry_at);
            vec![Span::styled(
                text::reconnecting(&what, wait, *attempt, error),
                t.bad(),
            )]
        }
        ConnState::Forbidden(m) => vec![Span::styled(text::forbidden(&what, m), t.bad())],
        ConnState::CrdMissing => vec![Span::styled(text::crd_missing(&what), t.bad())],
    }
}

fn scope_text(scope: &Scope) -> String {
    match scope {
        Scope::All => text::ALL_NAMESPACES.to_owned(),
        Scope::Namespace(n) => n.clone(),
    }
}

/// One cluster's context, its STALE badge and its connection state; with `ns`, its scope too.
fn cluster_spans(c: &ClusterView, ns: bool, now: Timestamp, t: &Theme) -> Vec<Span<'static>> {
    let mut out = vec![
        Span::raw(text::CTX),
        Span::styled(c.context.clone(), t.title()),
    ];
    if ns {
        out.push(Span::raw(text::NS));
        out.push(Span::styled(scope_text(&c.scope), t.title()));
    }
    out.push(Span::raw("  "));
    if let Some(since) = c.conn.stale_since {
        out.push(Span::styled(
            text::stale(&format::age(Some(since), now)),
            t.badge(true),
        ));
        out.push(Span::raw(" "));
    }
    out.extend(conn_span(&c.conn, now, t));
    out
}

/// Draws the header.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let mut first = vec![Span::styled(format!(" {} ", strings::APP), t.badge(false))];
    // One scope for every cluster is said once; different ones are said per cluster.
    let same_scope = state.clusters.windows(2).all(|w| w[0].scope == w[1].scope);
    for (i, c) in state.clusters.iter().enumerate() {
        if i > 0 {
            first.push(Span::styled(text::CLUSTER_SEPARATOR, t.dim()));
        }
        let ns_here = !same_scope || !state.multi_cluster();
        first.extend(cluster_spans(c, ns_here, state.now, t));
    }
    if same_scope
        && state.multi_cluster()
        && let Some(c) = state.clusters.first()
    {
        first.push(Span::raw(text::NS));
        first.push(Span::styled(scope_text(&c.scope), t.title()));
    }
    if state.readonly {
        first.push(Span::raw("  "));
        first.push(Span::styled(text::READ_ONLY, t.badge(false)));
    }
    let last = state
        .last_event_at()
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
