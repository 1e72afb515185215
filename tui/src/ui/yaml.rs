//! The YAML of one object (managedFields trimmed): a migration's read whole from the API when
//! the view opens and on its changes, a wave's as the watch delivered it.

use ::kube::Resource;
use ferry_crds::{MigrationWave, VirtualMachineMigration};
use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use super::{
    Theme,
    scrolled::{self, Body},
};
use crate::{
    state::{State, Target, TargetKind},
    strings::view,
};

/// The YAML text of a target, if it is still on the board: a migration's as read whole from the
/// API (the board keeps it cut down), a wave's as the watch delivered it.
pub fn yaml_of(state: &State, target: &Target) -> Option<String> {
    match target.kind {
        TargetKind::Migration => {
            state.index.get(&target.key)?;
            let read = state.whole.as_ref().filter(|w| w.key == target.key);
            Some(match read.and_then(|w| w.result.as_ref()) {
                Some(Ok(text)) => text.clone(),
                Some(Err(e)) => view::cannot_read(e),
                None => view::READING_WHOLE.to_owned(),
            })
        }
        TargetKind::Wave => {
            let text =
                serde_yaml::to_string(&*state.waves.iter().find(|w| w.key == target.key)?.obj);
            Some(text.unwrap_or_else(|e| view::cannot_render(&e)))
        }
    }
}

/// Draws the YAML view.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, target: &Target) {
    let kind = match target.kind {
        TargetKind::Migration => VirtualMachineMigration::kind(&()),
        TargetKind::Wave => MigrationWave::kind(&()),
    };
    let heading = (view::yaml_heading(&kind, &target.key.name), &target.key);
    let Some(text) = yaml_of(state, target) else {
        scrolled::draw(
            frame,
            state,
            t,
            area,
            heading,
            Body::Gone(view::OBJECT_GONE),
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
    scrolled::draw(frame, state, t, area, heading, Body::Columns(vec![lines]));
}
