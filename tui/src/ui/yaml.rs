//! The YAML of one object, as the watch delivered it (managedFields trimmed).

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
};

use super::Theme;
use crate::state::{State, Target, TargetKind};

/// The YAML text of a target, if it is known.
pub fn yaml_of(state: &State, target: &Target) -> Option<String> {
    let text = match target.kind {
        TargetKind::Migration => serde_yaml::to_string(&*state.index.get(&target.key)?.obj),
        TargetKind::Wave => {
            serde_yaml::to_string(&*state.waves.iter().find(|w| w.key == target.key)?.obj)
        }
    };
    Some(text.unwrap_or_else(|e| format!("# cannot render: {e}")))
}

/// Draws the YAML view.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, target: &Target) {
    let kind = match target.kind {
        TargetKind::Migration => "VirtualMachineMigration",
        TargetKind::Wave => "MigrationWave",
    };
    let title = Line::from(vec![
        Span::styled(format!(" yaml {kind} {} ", target.key.name), t.title()),
        Span::styled(format!("namespace {} ", target.key.namespace), t.dim()),
    ]);
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(t.dim())
        .title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let page = inner.height as usize;
    let Some(text) = yaml_of(state, target) else {
        frame.render_widget(
            Paragraph::new(Line::styled("  gone: the object was deleted", t.bad())),
            inner,
        );
        return;
    };
    let lines: Vec<Line> = text
        .lines()
        .map(|l| match l.find(':') {
            Some(i) if !l.trim_start().starts_with('-') || l.trim_start().len() > 2 => {
                let (k, v) = l.split_at(i);
                Line::from(vec![
                    Span::styled(k.to_owned(), t.title()),
                    Span::raw(v.to_owned()),
                ])
            }
            _ => Line::raw(l.to_owned()),
        })
        .collect();
    let scroll = state.scroll.min(lines.len().saturating_sub(page)) as u16;
    frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)), inner);
}
