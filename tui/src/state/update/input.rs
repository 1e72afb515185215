//! The bottom line: a `/` filter applied as it is typed, a `:` command run on Enter.

use super::{
    super::{Edit, Effect, Filter, Input, InputKind, Scope, State, index::WaveScope},
    navigation::{resync_cursor, set_wave_scope},
    session,
};
use crate::strings;

pub(super) fn start_filter(state: &mut State) {
    let text = state.index.filter().raw.clone();
    state.input = Some(Input {
        kind: InputKind::Filter,
        text,
    });
}

pub(super) fn start_command(state: &mut State) {
    state.input = Some(Input {
        kind: InputKind::Command,
        text: String::new(),
    });
}

pub(super) fn edit(state: &mut State, edit: Edit) {
    let Some(input) = state.input.as_mut() else {
        return;
    };
    match edit {
        Edit::Char(c) => input.text.push(c),
        Edit::Backspace => {
            input.text.pop();
        }
        Edit::Clear => input.text.clear(),
    }
    if input.kind == InputKind::Filter {
        let f = Filter::parse(&input.text);
        state.index.set_filter(f);
        resync_cursor(state);
    }
}

/// Enter: a filter stays as typed, a command runs.
pub(super) fn submit(state: &mut State, fx: &mut Vec<Effect>) {
    if let Some(input) = state.input.take()
        && input.kind == InputKind::Command
    {
        command(state, input.text.trim(), fx);
    }
}

pub(super) fn command(state: &mut State, line: &str, fx: &mut Vec<Effect>) {
    let mut words = line.split_whitespace();
    let cmd = words.next().unwrap_or("");
    let arg = words.next();
    match (cmd, arg) {
        ("q" | "q!" | "quit" | "qa", _) => session::quit(state, fx),
        ("ns" | "namespace", Some(ns)) => {
            let scope = match ns {
                "all" | "-A" | "*" => Scope::All,
                ns => Scope::Namespace(ns.to_owned()),
            };
            session::rescope(state, scope, fx);
        }
        ("wave" | "waves" | "w", arg) => {
            let wave = arg
                .filter(|a| *a != "all" && *a != "*")
                .map(WaveScope::named);
            set_wave_scope(state, wave);
        }
        ("ctx" | "context", Some(_)) => {
            // `:ctx a,b` or `:ctx a, b`: everything after the word.
            let rest = line.split_once(char::is_whitespace).map_or("", |(_, r)| r);
            let contexts: Vec<String> = rest
                .split([',', ' '])
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            if contexts.is_empty() {
                session::flash(state, strings::unknown_command(line), true);
            } else {
                fx.push(Effect::SwitchContexts(contexts));
            }
        }
        ("", _) => {}
        _ => session::flash(state, strings::unknown_command(line), true),
    }
}
