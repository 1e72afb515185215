//! The one key map. Dispatch and the help overlay both read [`BINDINGS`].

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::state::{Action, Edit, Nav, Popup, State, Verb};

/// A key with its modifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// The key.
    pub code: KeyCode,
    /// Ctrl, Shift, ...
    pub mods: KeyModifiers,
}

const fn k(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        mods: KeyModifiers::NONE,
    }
}
const fn code(code: KeyCode) -> Key {
    Key {
        code,
        mods: KeyModifiers::NONE,
    }
}
const fn ctrl(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        mods: KeyModifiers::CONTROL,
    }
}

/// One binding: keys, what they do, and the help line.
#[derive(Debug)]
pub struct Binding {
    /// The keys (any of them).
    pub keys: &'static [Key],
    /// How the help overlay writes the keys.
    pub label: &'static str,
    /// What it does, for the help overlay.
    pub help: &'static str,
    /// The action.
    pub action: fn() -> Action,
}

/// Every binding of the main screen and views, in help order.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: &[code(KeyCode::Up), k('k')],
        label: "↑ k",
        help: "up (scroll in views)",
        action: || Action::Nav(Nav::Up),
    },
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        label: "↓ j",
        help: "down",
        action: || Action::Nav(Nav::Down),
    },
    Binding {
        keys: &[code(KeyCode::PageUp), ctrl('b')],
        label: "PgUp",
        help: "page up",
        action: || Action::Nav(Nav::PageUp),
    },
    Binding {
        keys: &[code(KeyCode::PageDown), ctrl('f')],
        label: "PgDn",
        help: "page down",
        action: || Action::Nav(Nav::PageDown),
    },
    Binding {
        keys: &[k('g'), code(KeyCode::Home)],
        label: "g",
        help: "first row",
        action: || Action::Nav(Nav::Top),
    },
    Binding {
        keys: &[k('G'), code(KeyCode::End)],
        label: "G",
        help: "last row",
        action: || Action::Nav(Nav::Bottom),
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        label: "Enter",
        help: "details (on the wave strip: show that wave)",
        action: || Action::Enter,
    },
    Binding {
        keys: &[code(KeyCode::Tab), code(KeyCode::BackTab)],
        label: "Tab",
        help: "focus board / wave strip",
        action: || Action::FocusNext,
    },
    Binding {
        keys: &[code(KeyCode::Esc)],
        label: "Esc",
        help: "back; clear filter, then marks, then wave",
        action: || Action::Back,
    },
    Binding {
        keys: &[k('/')],
        label: "/",
        help: "filter: text, phase:Failed wave:w3 ns:apps",
        action: || Action::StartFilter,
    },
    Binding {
        keys: &[k('s')],
        label: "s",
        help: "sort by next column",
        action: || Action::CycleSort,
    },
    Binding {
        keys: &[k('S')],
        label: "S",
        help: "reverse sort",
        action: || Action::ReverseSort,
    },
    Binding {
        keys: &[k('w')],
        label: "w",
        help: "show next wave only (then all)",
        action: || Action::CycleWave,
    },
    Binding {
        keys: &[k(' ')],
        label: "Space",
        help: "mark / unmark",
        action: || Action::ToggleMark,
    },
    Binding {
        keys: &[k('a')],
        label: "a",
        help: "mark all visible (again: unmark all)",
        action: || Action::MarkAllVisible,
    },
    Binding {
        keys: &[k('c')],
        label: "c",
        help: "cancel (marked, selected, or the wave)",
        action: || Action::Request(Verb::Cancel),
    },
    Binding {
        keys: &[k('r')],
        label: "r",
        help: "retry a failed or cancelled one",
        action: || Action::Request(Verb::Retry),
    },
    Binding {
        keys: &[k('p')],
        label: "p",
        help: "pause / resume",
        action: || Action::TogglePause,
    },
    Binding {
        keys: &[ctrl('d')],
        label: "Ctrl-d",
        help: "delete",
        action: || Action::Request(Verb::Delete),
    },
    Binding {
        keys: &[k('y')],
        label: "y",
        help: "YAML",
        action: || Action::ShowYaml,
    },
    Binding {
        keys: &[k('e')],
        label: "e",
        help: "events",
        action: || Action::ShowEvents,
    },
    Binding {
        keys: &[k('l')],
        label: "l",
        help: "show / hide logs",
        action: || Action::ToggleLogs,
    },
    Binding {
        keys: &[k(':')],
        label: ":",
        help: "command: ns NAME|all, wave NAME|all, ctx NAME, q",
        action: || Action::StartCommand,
    },
    Binding {
        keys: &[k('?')],
        label: "?",
        help: "help",
        action: || Action::ToggleHelp,
    },
    Binding {
        keys: &[k('q'), ctrl('c')],
        label: "q Ctrl-c",
        help: "quit",
        action: || Action::Quit,
    },
];

fn normalize(ev: &KeyEvent) -> Key {
    // Terminals report `G` as Shift+'G'; match on the character alone.
    let mods = ev.modifiers & (KeyModifiers::CONTROL | KeyModifiers::ALT);
    Key {
        code: ev.code,
        mods,
    }
}

/// The action a key press means in the current state, if any.
pub fn action_for(state: &State, ev: KeyEvent) -> Option<Action> {
    if ev.kind == KeyEventKind::Release {
        return None;
    }
    let key = normalize(&ev);
    if key == ctrl('c') {
        return Some(Action::Quit);
    }
    if state.input.is_some() {
        return match key.code {
            KeyCode::Esc => Some(Action::Back),
            KeyCode::Enter => Some(Action::Submit),
            KeyCode::Backspace => Some(Action::Edit(Edit::Backspace)),
            KeyCode::Char('u') if key.mods == KeyModifiers::CONTROL => {
                Some(Action::Edit(Edit::Clear))
            }
            KeyCode::Char(c) if key.mods.is_empty() => Some(Action::Edit(Edit::Char(c))),
            _ => None,
        };
    }
    match &state.popup {
        Some(Popup::Confirm(_)) => {
            return match key.code {
                KeyCode::Char('y') | KeyCode::Enter => Some(Action::Confirm),
                KeyCode::Char('n') | KeyCode::Esc | KeyCode::Char('q') => Some(Action::Back),
                _ => None,
            };
        }
        Some(Popup::Help | Popup::Report) => {
            return match key.code {
                KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q' | '?') => Some(Action::Back),
                _ => None,
            };
        }
        None => {}
    }
    BINDINGS
        .iter()
        .find(|b| b.keys.contains(&key))
        .map(|b| (b.action)())
}
