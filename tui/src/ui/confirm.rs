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
    state::{Check, Confirm, Outcome, State, TargetKind, layout},
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

/// Draws the report of the last mutation. Every answer is shown whole, wrapped to the box (a
/// 403 names the namespace and the role that grants the verb), and the box is as tall as the
/// wrapped lines: what does not fit the screen is counted, never cut mid-answer.
pub fn draw_report(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    let Some(report) = &state.report else { return };
    let r = centered(area, 96, area.height);
    let inner = usize::from(r.width.saturating_sub(2)).max(1);
    // Header (summary and a blank line) and footer (a blank line and how to close it).
    let room = usize::from(area.height).saturating_sub(2 + 4);
    let mut body: Vec<Line> = vec![];
    let mut shown = 0;
    for (target, o) in &report.entries {
        let style = match o {
            None => t.dim(),
            Some(Outcome::Applied) => t.ok(),
            Some(_) => t.bad(),
        };
        let text = match o {
            Some(Outcome::Forbidden(m)) if Check::of(report.verb, target.kind).refused_in(m) => {
                let check = Check::of(report.verb, target.kind);
                let needs = strings::needs(
                    check.verb(),
                    &check.resource_path(),
                    &target.key.namespace,
                    check.role(),
                );
                strings::forbidden_whole(m, report.verb, &needs)
            }
            o => strings::outcome(o.as_ref()),
        };
        let lines = layout::wrap(&format!("  {:<28} {text}", target.key.name), inner);
        // One more entry only if it fits whole (with the line that counts the rest).
        let left = report.entries.len() - shown;
        let need = lines.len() + usize::from(left > 1);
        if body.len() + need > room && shown > 0 {
            break;
        }
        body.extend(lines.into_iter().map(|l| Line::styled(l, style)));
        shown += 1;
    }
    let mut lines = vec![Line::styled(report.summary(), t.title()), Line::raw("")];
    lines.extend(body);
    if report.entries.len() > shown {
        lines.push(Line::styled(
            text::more(report.entries.len() - shown),
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
    frame.render_widget(Paragraph::new(lines).block(block), r);
}
