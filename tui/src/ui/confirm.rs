//! The confirm dialog before a mutation, and the per-object report after it.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph, Wrap},
};

use super::{Theme, centered};
use crate::{
    keys,
    state::{Confirm, Outcome, State, TargetKind},
    strings::{self, confirm as text},
};

const MAX_LISTED: usize = 8;

/// Draws the confirm dialog.
pub fn draw_confirm(frame: &mut Frame, state: &State, t: &Theme, area: Rect, c: &Confirm) {
    let kind = match c.targets.first().map(|t| t.kind) {
        Some(TargetKind::Wave) => text::WAVE,
        _ => text::MIGRATION,
    };
    let mut lines = vec![
        Line::styled(
            strings::confirm_title(c.verb, c.targets.len(), kind),
            t.bad(),
        ),
        Line::raw(""),
        Line::raw(strings::what_changes(c.verb, kind == text::WAVE)),
        Line::raw(""),
    ];
    for target in c.targets.iter().take(MAX_LISTED) {
        let ns = if state.all_namespaces() {
            format!("  ({})", target.key.namespace)
        } else {
            String::new()
        };
        lines.push(Line::from(vec![
            Span::styled("  • ", t.key()),
            Span::raw(format!("{}{ns}", target.key.name)),
        ]));
    }
    if c.targets.len() > MAX_LISTED {
        lines.push(Line::styled(
            text::more(c.targets.len() - MAX_LISTED),
            t.dim(),
        ));
    }
    if !c.skipped.is_empty() {
        let (first, why) = &c.skipped[0];
        lines.push(Line::styled(
            text::skipped(c.skipped.len(), &first.key.name, why),
            t.dim(),
        ));
    }
    lines.push(Line::raw(""));
    let mut answers = vec![Span::raw("  ")];
    for (i, b) in keys::CONFIRM_BINDINGS.iter().enumerate() {
        if i > 0 {
            answers.push(Span::raw("    "));
        }
        // The first key stands out; the others follow it plainly, as in `y/Enter`.
        let (first, rest) = b.label.split_at(b.label.find('/').unwrap_or(b.label.len()));
        answers.push(Span::styled(first, t.key()));
        answers.push(Span::raw(format!("{rest}: {}", b.help)));
    }
    lines.push(Line::from(answers));
    // +2 for the border, +1 for the sentence that wraps.
    let h = (lines.len() as u16 + 3).min(area.height);
    let r = centered(area, 72, h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(t.bad())
        .title(text::TITLE);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        r,
    );
}

/// Draws the report of the last mutation.
pub fn draw_report(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let Some(report) = &state.report else { return };
    let mut lines = vec![Line::styled(report.summary(), t.title()), Line::raw("")];
    let room = area.height.saturating_sub(6) as usize;
    for (target, o) in report.entries.iter().take(room) {
        let style = match o {
            None => t.dim(),
            Some(Outcome::Applied) => t.ok(),
            Some(_) => t.bad(),
        };
        lines.push(Line::from(vec![
            Span::raw(format!("  {:<28} ", target.key.name)),
            Span::styled(strings::outcome(o.as_ref()), style),
        ]));
    }
    if report.entries.len() > room {
        lines.push(Line::styled(
            text::more(report.entries.len() - room),
            t.dim(),
        ));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(text::REPORT_CLOSES, t.dim()));
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, 96, h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(t.title())
        .title(text::REPORT_TITLE);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        r,
    );
}
