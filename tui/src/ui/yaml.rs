//! The YAML of one object, as the watch delivered it (managedFields trimmed).

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

/// The YAML text of a target, if it is known.
pub fn yaml_of(state: &State, target: &Target) -> Option<String> {
    let text = match target.kind {
        TargetKind::Migration => serde_yaml::to_string(&*state.index.get(&target.key)?.obj),
        TargetKind::Wave => {
            serde_yaml::to_string(&*state.waves.iter().find(|w| w.key == target.key)?.obj)
        }
    };
    Some(text.unwrap_or_else(|e| view::cannot_render(&e)))
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
