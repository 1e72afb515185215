//! The confirm dialog before a mutation, and the per-object report after it.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph, Wrap},
};

use super::{Theme, centered};
use crate::{
    state::{Confirm, Outcome, State, TargetKind},
    strings,
};

const MAX_LISTED: usize = 8;

/// Draws the confirm dialog.
pub fn draw_confirm(frame: &mut Frame, state: &State, t: &Theme, area: Rect, c: &Confirm) {
    let kind = match c.targets.first().map(|t| t.kind) {
        Some(TargetKind::Wave) => "wave",
        _ => "migration",
    };
    let mut lines = vec![
        Line::styled(
            strings::confirm_title(c.verb, c.targets.len(), kind),
            t.bad(),
        ),
        Line::raw(""),
        Line::raw(strings::what_changes(c.verb)),
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
            format!("  … and {} more", c.targets.len() - MAX_LISTED),
            t.dim(),
        ));
    }
    if !c.skipped.is_empty() {
        let (first, why) = &c.skipped[0];
        lines.push(Line::styled(
            format!(
                "  skipped {}: {} is {why}{}",
                c.skipped.len(),
                first.key.name,
                if c.skipped.len() > 1 { ", …" } else { "" }
            ),
            t.dim(),
        ));
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled("  y", t.key()),
        Span::raw("/Enter: yes    "),
        Span::styled("n", t.key()),
        Span::raw("/Esc: no"),
    ]));
    // +2 for the border, +1 for the sentence that wraps.
    let h = (lines.len() as u16 + 3).min(area.height);
    let r = centered(area, 72, h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(t.bad())
        .title(" confirm ");
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
            format!("  … and {} more", report.entries.len() - room),
            t.dim(),
        ));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "  Esc/Enter closes; rows show … until the watch delivers the change",
        t.dim(),
    ));
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, 96, h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(t.title())
        .title(" outcome ");
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        r,
    );
}
