//! The one key map. Dispatch, the help overlay and the footer hints all read [`BINDINGS`]: a
//! hint names actions, and the keys it shows are the ones bound to them.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::{
    state::{Action, Edit, Nav, Popup, State, Verb, View},
    strings::{confirm, help, hint},
};

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
        help: help::UP,
        action: || Action::Nav(Nav::Up),
    },
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        label: "↓ j",
        help: help::DOWN,
        action: || Action::Nav(Nav::Down),
    },
    Binding {
        keys: &[code(KeyCode::PageUp), ctrl('b')],
        label: "PgUp",
        help: help::PAGE_UP,
        action: || Action::Nav(Nav::PageUp),
    },
    Binding {
        keys: &[code(KeyCode::PageDown), ctrl('f')],
        label: "PgDn",
        help: help::PAGE_DOWN,
        action: || Action::Nav(Nav::PageDown),
    },
    Binding {
        keys: &[k('g'), code(KeyCode::Home)],
        label: "g",
        help: help::TOP,
        action: || Action::Nav(Nav::Top),
    },
    Binding {
        keys: &[k('G'), code(KeyCode::End)],
        label: "G",
        help: help::BOTTOM,
        action: || Action::Nav(Nav::Bottom),
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        label: "Enter",
        help: help::ENTER,
        action: || Action::Enter,
    },
    Binding {
        keys: &[code(KeyCode::Tab), code(KeyCode::BackTab)],
        label: "Tab",
        help: help::FOCUS,
        action: || Action::FocusNext,
    },
    Binding {
        keys: &[code(KeyCode::Esc)],
        label: "Esc",
        help: help::BACK,
        action: || Action::Back,
    },
    Binding {
        keys: &[k('/')],
        label: "/",
        help: help::FILTER,
        action: || Action::StartFilter,
    },
    Binding {
        keys: &[k('s')],
        label: "s",
        help: help::SORT,
        action: || Action::CycleSort,
    },
    Binding {
        keys: &[k('S')],
        label: "S",
        help: help::REVERSE_SORT,
        action: || Action::ReverseSort,
    },
    Binding {
        keys: &[k('w')],
        label: "w",
        help: help::WAVE,
        action: || Action::PickWave,
    },
    Binding {
        keys: &[k('t')],
        label: "t",
        help: help::TIMELINE,
        action: || Action::ShowTimeline,
    },
    Binding {
        keys: &[k('P')],
        label: "P",
        help: help::PREFLIGHT,
        action: || Action::ShowPreflight,
    },
    Binding {
        keys: &[k('!')],
        label: "!",
        help: help::PROBLEMS,
        action: || Action::ShowProblems,
    },
    Binding {
        keys: &[k(' ')],
        label: "Space",
        help: help::MARK,
        action: || Action::ToggleMark,
    },
    Binding {
        keys: &[k('a')],
        label: "a",
        help: help::MARK_ALL,
        action: || Action::MarkAllVisible,
    },
    Binding {
        keys: &[k('c')],
        label: "c",
        help: help::CANCEL,
        action: || Action::Request(Verb::Cancel),
    },
    Binding {
        keys: &[k('r')],
        label: "r",
        help: help::RETRY,
        action: || Action::Request(Verb::Retry),
    },
    Binding {
        keys: &[k('p')],
        label: "p",
        help: help::PAUSE,
        action: || Action::TogglePause,
    },
    Binding {
        keys: &[ctrl('d')],
        label: "Ctrl-d",
        help: help::DELETE,
        action: || Action::Request(Verb::Delete),
    },
    Binding {
        keys: &[k('X')],
        label: "X",
        help: help::CUTOVER,
        action: || Action::Request(Verb::Cutover),
    },
    Binding {
        keys: &[k('y')],
        label: "y",
        help: help::YAML,
        action: || Action::ShowYaml,
    },
    Binding {
        keys: &[k('e')],
        label: "e",
        help: help::EVENTS,
        action: || Action::ShowEvents,
    },
    Binding {
        keys: &[k('L')],
        label: "L",
        help: help::POD_LOGS,
        action: || Action::ShowPodLogs,
    },
    Binding {
        keys: &[k('m')],
        label: "m",
        help: help::NEXT_MESSAGE,
        action: || Action::NextMessage,
    },
    Binding {
        keys: &[k('Y')],
        label: "Y",
        help: help::COPY_MESSAGE,
        action: || Action::CopyMessage,
    },
    Binding {
        keys: &[k('l')],
        label: "l",
        help: help::LOGS,
        action: || Action::ToggleLogs,
    },
    Binding {
        keys: &[k(':')],
        label: ":",
        help: help::COMMAND,
        action: || Action::StartCommand,
    },
    Binding {
        keys: &[k('?')],
        label: "?",
        help: help::HELP,
        action: || Action::ToggleHelp,
    },
    Binding {
        keys: &[k('q'), ctrl('c')],
        label: "q Ctrl-c",
        help: help::QUIT,
        action: || Action::Quit,
    },
];

/// The keys of the pod logs view, looked at before [`BINDINGS`] while it is the innermost view
/// (Tab and `q` mean something else there: the next pod, back).
pub const PODLOGS_BINDINGS: &[Binding] = &[
    Binding {
        keys: &[code(KeyCode::Tab), code(KeyCode::Right)],
        label: "Tab →",
        help: help::NEXT_POD,
        action: || Action::NextPod,
    },
    Binding {
        keys: &[code(KeyCode::BackTab), code(KeyCode::Left)],
        label: "⇧Tab ←",
        help: help::PREV_POD,
        action: || Action::PrevPod,
    },
    Binding {
        keys: &[k('f')],
        label: "f",
        help: help::FOLLOW_AGAIN,
        action: || Action::FollowAgain,
    },
    Binding {
        keys: &[code(KeyCode::Esc), k('q')],
        label: "Esc q",
        help: help::BACK,
        action: || Action::Back,
    },
];

/// A footer hint: the footer keys of these actions, then what they do.
#[derive(Debug)]
pub struct Hint {
    /// Actions bound in [`BINDINGS`], whose keys are shown joined by `/`.
    pub actions: &'static [Action],
    /// What they do.
    pub word: &'static str,
}

/// Footer hints on the board.
pub const BOARD_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::ToggleHelp],
        word: hint::HELP,
    },
    Hint {
        actions: &[Action::StartFilter],
        word: hint::FILTER,
    },
    Hint {
        actions: &[Action::CycleSort, Action::ReverseSort],
        word: hint::SORT,
    },
    Hint {
        actions: &[Action::PickWave],
        word: hint::WAVE,
    },
    Hint {
        actions: &[Action::ShowTimeline],
        word: hint::TIMELINE,
    },
    Hint {
        actions: &[Action::FocusNext],
        word: hint::WAVES,
    },
    Hint {
        actions: &[Action::ToggleMark],
        word: hint::MARK,
    },
    Hint {
        actions: &[Action::Request(Verb::Cancel)],
        word: hint::CANCEL,
    },
    Hint {
        actions: &[Action::Request(Verb::Retry)],
        word: hint::RETRY,
    },
    Hint {
        actions: &[Action::TogglePause],
        word: hint::PAUSE,
    },
    Hint {
        actions: &[Action::Request(Verb::Delete)],
        word: hint::DELETE,
    },
    Hint {
        actions: &[Action::Enter],
        word: hint::DETAILS,
    },
    Hint {
        actions: &[Action::ShowPreflight],
        word: hint::PREFLIGHT,
    },
    Hint {
        actions: &[Action::ShowProblems],
        word: hint::PROBLEMS,
    },
    Hint {
        actions: &[Action::Quit],
        word: hint::QUIT,
    },
];

/// The verbs, as one hint.
const VERBS: &[Action] = &[
    Action::Request(Verb::Cancel),
    Action::Request(Verb::Retry),
    Action::TogglePause,
    Action::Request(Verb::Delete),
];

/// The verbs on the wave strip: those of a migration, and the cutover of a warm wave.
const WAVE_VERBS: &[Action] = &[
    Action::Request(Verb::Cancel),
    Action::Request(Verb::Retry),
    Action::TogglePause,
    Action::Request(Verb::Delete),
    Action::Request(Verb::Cutover),
];

/// Footer hints in a view over the board.
pub const VIEW_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::Back],
        word: hint::BACK,
    },
    Hint {
        actions: &[Action::Nav(Nav::Down), Action::Nav(Nav::Up)],
        word: hint::SCROLL,
    },
    Hint {
        actions: &[Action::ShowYaml],
        word: hint::YAML,
    },
    Hint {
        actions: &[Action::ShowEvents],
        word: hint::EVENTS,
    },
    Hint {
        actions: VERBS,
        word: hint::ACT,
    },
    Hint {
        actions: &[Action::ToggleHelp],
        word: hint::HELP,
    },
    Hint {
        actions: &[Action::Quit],
        word: hint::QUIT,
    },
];

/// Footer hints in the details view, whose messages can be selected and copied.
pub const DETAILS_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::Back],
        word: hint::BACK,
    },
    Hint {
        actions: &[Action::Nav(Nav::Down), Action::Nav(Nav::Up)],
        word: hint::SCROLL,
    },
    Hint {
        actions: &[Action::NextMessage],
        word: hint::NEXT_MESSAGE,
    },
    Hint {
        actions: &[Action::CopyMessage],
        word: hint::COPY,
    },
    Hint {
        actions: &[Action::ShowEvents],
        word: hint::EVENTS,
    },
    Hint {
        actions: &[Action::ShowPodLogs],
        word: hint::POD_LOGS,
    },
    Hint {
        actions: VERBS,
        word: hint::ACT,
    },
    // Last, and every hint whole at 80 columns (`m:msg` is short for it): whatever a narrow
    // footer cuts, `?` lists.
    Hint {
        actions: &[Action::ToggleHelp],
        word: hint::HELP,
    },
];

/// Footer hints in the problems view: Enter marks a group, the verbs act on the marked.
pub const PROBLEMS_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::Back],
        word: hint::BACK,
    },
    Hint {
        actions: &[Action::Nav(Nav::Down), Action::Nav(Nav::Up)],
        word: hint::SELECT,
    },
    Hint {
        actions: &[Action::Enter],
        word: hint::MARK_GROUP,
    },
    Hint {
        actions: &[Action::Request(Verb::Retry)],
        word: hint::RETRY,
    },
    Hint {
        actions: &[Action::Request(Verb::Cancel)],
        word: hint::CANCEL,
    },
    Hint {
        actions: &[Action::ToggleHelp],
        word: hint::HELP,
    },
];

/// Footer hints in the preflight view, whose lines are groups to open.
pub const PREFLIGHT_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::Back],
        word: hint::BACK,
    },
    Hint {
        actions: &[Action::Nav(Nav::Down), Action::Nav(Nav::Up)],
        word: hint::SELECT,
    },
    Hint {
        actions: &[Action::Enter],
        word: hint::SHOW_GROUP,
    },
    Hint {
        actions: &[Action::ToggleHelp],
        word: hint::HELP,
    },
    Hint {
        actions: &[Action::Quit],
        word: hint::QUIT,
    },
];

/// Footer hints in the list of a preflight group, about many migrations: no verb applies.
pub const PREFLIGHT_GROUP_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::Back],
        word: hint::BACK,
    },
    Hint {
        actions: &[Action::Nav(Nav::Down), Action::Nav(Nav::Up)],
        word: hint::SCROLL,
    },
    Hint {
        actions: &[Action::ToggleHelp],
        word: hint::HELP,
    },
    Hint {
        actions: &[Action::Quit],
        word: hint::QUIT,
    },
];

/// Footer hints in the pod logs view.
pub const PODLOGS_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::Back],
        word: hint::BACK,
    },
    Hint {
        actions: &[Action::NextPod],
        word: hint::NEXT_POD,
    },
    Hint {
        actions: &[Action::Nav(Nav::Down), Action::Nav(Nav::Up)],
        word: hint::SCROLL,
    },
    Hint {
        actions: &[Action::FollowAgain],
        word: hint::FOLLOW_AGAIN,
    },
    Hint {
        actions: &[Action::ToggleHelp],
        word: hint::HELP,
    },
];

/// Footer hints on the wave strip (after [`hint::WAVE_STRIP`]).
pub const WAVE_HINTS: &[Hint] = &[
    Hint {
        actions: &[Action::Nav(Nav::Down), Action::Nav(Nav::Up)],
        word: hint::SELECT,
    },
    Hint {
        actions: &[Action::Enter],
        word: hint::SHOW_WAVE,
    },
    Hint {
        actions: &[Action::ShowProblems],
        word: hint::PROBLEMS,
    },
    Hint {
        actions: WAVE_VERBS,
        word: hint::ACT_ON_WAVE,
    },
    Hint {
        actions: &[Action::FocusNext, Action::Back],
        word: hint::BOARD,
    },
];

/// How the footer writes a key: as short as it can.
fn short(key: Key) -> String {
    match key.code {
        KeyCode::Char(' ') => "␣".into(),
        KeyCode::Char(c) if key.mods.contains(KeyModifiers::CONTROL) => format!("^{c}"),
        KeyCode::Char(c) => c.into(),
        KeyCode::Up => "↑".into(),
        KeyCode::Down => "↓".into(),
        code => code.to_string(),
    }
}

/// The key the footer shows for `action`: the first plain character bound to it (what one
/// types), else its first key; `None` when nothing binds it.
pub fn footer_key(action: &Action) -> Option<String> {
    let b = BINDINGS
        .iter()
        .chain(PODLOGS_BINDINGS)
        .find(|b| (b.action)() == *action)?;
    let plain = b
        .keys
        .iter()
        .find(|k| k.mods.is_empty() && matches!(k.code, KeyCode::Char(_)));
    plain.or(b.keys.first()).map(|k| short(*k))
}

/// One hint of a footer line, and the role that grants it when the API server refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HintPart {
    /// `c:cancel`.
    pub text: String,
    /// The role that grants it, when every action of the hint is refused for what it would
    /// act on now (see [`crate::state::refusal`]).
    pub needs: Option<&'static str>,
}

/// The hints of `list` as `state` offers them.
pub fn hint_parts(list: &[Hint], state: &State) -> Vec<HintPart> {
    list.iter()
        .map(|h| {
            let keys: Vec<String> = h.actions.iter().filter_map(footer_key).collect();
            let refusals: Vec<_> = h
                .actions
                .iter()
                .map(|a| crate::state::refusal(state, a))
                .collect();
            let needs = if refusals.iter().all(Option::is_some) {
                refusals
                    .first()
                    .and_then(|r| r.as_ref())
                    .map(|r| r.check.role())
            } else {
                None
            };
            HintPart {
                text: format!("{}:{}", keys.join("/"), h.word),
                needs,
            }
        })
        .collect()
}

/// One footer line: `?:help  /:filter  s/S:sort`.
pub fn hints(list: &[Hint]) -> String {
    let parts: Vec<String> = list
        .iter()
        .map(|h| {
            let keys: Vec<String> = h.actions.iter().filter_map(footer_key).collect();
            format!("{}:{}", keys.join("/"), h.word)
        })
        .collect();
    parts.join("  ")
}

/// The keys of the confirm dialog, which takes every key while it is open.
pub const CONFIRM_BINDINGS: &[Binding] = &[
    Binding {
        keys: &[k('y'), code(KeyCode::Enter)],
        label: "y/Enter",
        help: confirm::YES,
        action: || Action::Confirm,
    },
    Binding {
        keys: &[k('n'), code(KeyCode::Esc), k('q')],
        label: "n/Esc",
        help: confirm::NO,
        action: || Action::Back,
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
            // Any modifier still answers: a held Alt must not leave the dialog deaf.
            return CONFIRM_BINDINGS
                .iter()
                .find(|b| b.keys.iter().any(|k| k.code == key.code))
                .map(|b| (b.action)());
        }
        // Over the board, whose footer offers q:quit, `q` quits at the first press; the
        // overlay's own title says what closes it.
        Some(Popup::Help | Popup::Report) => {
            return match key.code {
                KeyCode::Char('q') => Some(Action::Quit),
                KeyCode::Esc | KeyCode::Enter | KeyCode::Char('?') => Some(Action::Back),
                _ => None,
            };
        }
        // The welcome lists `q` as the key that quits; any other key closes it and does
        // nothing else (its last line says so).
        Some(Popup::Welcome { .. }) => {
            return Some(if key.code == KeyCode::Char('q') {
                Action::Quit
            } else {
                Action::Back
            });
        }
        Some(Popup::WavePicker { .. }) => {
            return match key.code {
                KeyCode::Esc | KeyCode::Char('q' | 'w') => Some(Action::Back),
                KeyCode::Enter => Some(Action::Enter),
                _ => BINDINGS
                    .iter()
                    .find(|b| b.keys.contains(&key))
                    .map(|b| (b.action)())
                    .filter(|a| matches!(a, Action::Nav(_))),
            };
        }
        None => {}
    }
    if matches!(state.view(), Some(View::PodLogs(_)))
        && let Some(b) = PODLOGS_BINDINGS.iter().find(|b| b.keys.contains(&key))
    {
        return Some((b.action)());
    }
    BINDINGS
        .iter()
        .find(|b| b.keys.contains(&key))
        .map(|b| (b.action)())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_footer_hint_shows_keys_bound_in_the_one_key_map() {
        for h in BOARD_HINTS
            .iter()
            .chain(VIEW_HINTS)
            .chain(DETAILS_HINTS)
            .chain(PROBLEMS_HINTS)
            .chain(WAVE_HINTS)
            .chain(PREFLIGHT_HINTS)
            .chain(PREFLIGHT_GROUP_HINTS)
        {
            for a in h.actions {
                assert!(footer_key(a).is_some(), "{a:?} ({}) is not bound", h.word);
            }
        }
    }

    #[test]
    fn pressing_the_key_a_footer_hint_shows_does_what_the_hint_says() {
        let state = State::new(
            "lab",
            crate::state::Scope::All,
            false,
            ferry_crds::fixtures::ts(0).0,
        );
        for h in BOARD_HINTS
            .iter()
            .chain(VIEW_HINTS)
            .chain(DETAILS_HINTS)
            .chain(PROBLEMS_HINTS)
            .chain(WAVE_HINTS)
            .chain(PREFLIGHT_HINTS)
            .chain(PREFLIGHT_GROUP_HINTS)
        {
            for a in h.actions {
                let key = footer_key(a).unwrap();
                let ev = match key.as_str() {
                    "␣" => KeyEvent::new(KeyCode::Char(' '), KeyModifiers::NONE),
                    "Tab" => KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE),
                    "Enter" => KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE),
                    "Esc" => KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE),
                    k => match k.strip_prefix('^') {
                        Some(c) => KeyEvent::new(
                            KeyCode::Char(c.chars().next().unwrap()),
                            KeyModifiers::CONTROL,
                        ),
                        None => KeyEvent::new(
                            KeyCode::Char(k.chars().next().unwrap()),
                            KeyModifiers::NONE,
                        ),
                    },
                };
                assert_eq!(action_for(&state, ev).as_ref(), Some(a), "{key}");
            }
        }
    }

    #[test]
    fn q_quits_at_the_first_press_over_the_welcome_and_the_help() {
        let mut state = State::new(
            "lab",
            crate::state::Scope::All,
            false,
            ferry_crds::fixtures::ts(0).0,
        );
        let press = |s: &State, c: KeyCode| action_for(s, KeyEvent::new(c, KeyModifiers::NONE));
        state.popup = Some(Popup::Welcome {
            note: String::new(),
        });
        assert_eq!(press(&state, KeyCode::Char('q')), Some(Action::Quit));
        assert_eq!(press(&state, KeyCode::Char('j')), Some(Action::Back));
        assert_eq!(press(&state, KeyCode::Char('?')), Some(Action::Back));
        for popup in [Popup::Help, Popup::Report] {
            state.popup = Some(popup);
            assert_eq!(press(&state, KeyCode::Char('q')), Some(Action::Quit));
            assert_eq!(press(&state, KeyCode::Esc), Some(Action::Back));
        }
    }

    #[test]
    fn footer_keys_are_the_short_plain_ones() {
        assert_eq!(footer_key(&Action::Nav(Nav::Up)).as_deref(), Some("k"));
        assert_eq!(footer_key(&Action::Quit).as_deref(), Some("q"));
        assert_eq!(footer_key(&Action::ToggleMark).as_deref(), Some("␣"));
        assert_eq!(
            footer_key(&Action::Request(Verb::Delete)).as_deref(),
            Some("^d")
        );
        assert_eq!(footer_key(&Action::FocusNext).as_deref(), Some("Tab"));
        assert_eq!(footer_key(&Action::Confirm), None);
    }

    #[test]
    fn in_the_pod_logs_view_tab_f_and_q_mean_pod_follow_and_back_and_l_stays_ferrys_log() {
        let mut state = State::new(
            "lab",
            crate::state::Scope::All,
            false,
            ferry_crds::fixtures::ts(0).0,
        );
        let press = |s: &State, c: KeyCode| action_for(s, KeyEvent::new(c, KeyModifiers::NONE));
        assert_eq!(press(&state, KeyCode::Char('L')), Some(Action::ShowPodLogs));
        assert_eq!(press(&state, KeyCode::Char('l')), Some(Action::ToggleLogs));
        assert_eq!(press(&state, KeyCode::Char('q')), Some(Action::Quit));
        state
            .views
            .push(View::PodLogs(crate::state::ObjKey::new("default", "a")));
        assert_eq!(press(&state, KeyCode::Tab), Some(Action::NextPod));
        assert_eq!(press(&state, KeyCode::Right), Some(Action::NextPod));
        assert_eq!(press(&state, KeyCode::Left), Some(Action::PrevPod));
        assert_eq!(press(&state, KeyCode::Char('f')), Some(Action::FollowAgain));
        assert_eq!(press(&state, KeyCode::Char('q')), Some(Action::Back));
        assert_eq!(press(&state, KeyCode::Esc), Some(Action::Back));
        assert_eq!(press(&state, KeyCode::Char('l')), Some(Action::ToggleLogs));
        assert_eq!(
            press(&state, KeyCode::Char('j')),
            Some(Action::Nav(Nav::Down))
        );
        for h in PODLOGS_HINTS {
            for a in h.actions {
                assert!(footer_key(a).is_some(), "{a:?} ({}) is not bound", h.word);
            }
        }
    }
}
