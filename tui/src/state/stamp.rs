//! What the plain board shows, in a few numbers: a batch of watch changes (and clock ticks)
//! that leaves the stamp as it was needs no frame. Under a stream of status patches most
//! changes are to rows off screen; skipping their frames saves the drawing and lets the next
//! change that is on screen be drawn at once rather than wait for the frame pacing.

use super::{ObjKey, State, Timestamp};

/// Everything on the plain board that watch changes to migrations and the clock can alter.
/// Built only when no view, popup, input line or log pane is shown (see [`Stamp::of`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    /// Ages are shown to the second.
    now_second: i64,
    /// The header's "last event" age.
    last_event_second: Option<i64>,
    flash: bool,
    len: usize,
    visible_len: usize,
    counts: Vec<u32>,
    offset: usize,
    cursor: usize,
    selected: Option<ObjKey>,
    /// When the rows on the page were last changed.
    page: Vec<u64>,
    pending: usize,
    /// The selected wave's completions per minute (the strip's sparkline).
    completions: Vec<u64>,
}

/// The widest sparkline the strip draws, in minutes.
const SPARK_MINUTES: usize = 64;

fn second(t: Timestamp) -> i64 {
    t.as_second()
}

impl Stamp {
    /// The stamp of `state`'s screen; `None` when something else than the plain board is
    /// shown, where every change is drawn.
    pub fn of(state: &State) -> Option<Stamp> {
        if !state.views.is_empty()
            || state.popup.is_some()
            || state.input.is_some()
            || state.show_logs
        {
            return None;
        }
        let index = &state.index;
        let completions = state.selected_wave().map_or_else(Vec::new, |w| {
            index.completions_per_minute(
                &w.key,
                state.now.as_second().div_euclid(60),
                SPARK_MINUTES,
            )
        });
        Some(Stamp {
            now_second: second(state.now),
            last_event_second: state.last_event_at().map(second),
            flash: state.flash.is_some(),
            len: index.len(),
            visible_len: index.visible_len(),
            counts: index.counts().map(|(_, n)| n).collect(),
            offset: state.offset,
            cursor: state.cursor,
            selected: state.selected.clone(),
            page: index.page_revisions(state.offset, state.page).collect(),
            pending: state.pending.len(),
            completions,
        })
    }
}

#[cfg(test)]
mod tests {
    use ferry_crds::{Phase, fixtures::migration, fixtures::ts};
    use k8s_openapi::jiff::SignedDuration;

    use super::*;
    use crate::state::{Action, ClusterId, Scope, Screen, update};

    const C0: ClusterId = ClusterId(0);

    /// 100 migrations `m000`… on an 80×24 board (a page of a dozen rows).
    fn board() -> State {
        let mut s = State::new("lab", Scope::Namespace("default".into()), false, ts(3600).0);
        let objs = (0..100)
            .map(|i| migration(&format!("m{i:03}")).with_phase(Phase::Importing))
            .collect();
        update(&mut s, Action::migrations_listed(C0, objs));
        update(
            &mut s,
            Action::Resize(Screen {
                width: 80,
                height: 24,
            }),
        );
        s
    }

    fn change(s: &mut State, name: &str, phase: Phase, message: &str) {
        let mut o = migration(name).with_phase(phase);
        if let Some(st) = o.status.as_mut() {
            st.message = Some(message.into());
        }
        update(s, Action::MigrationApplied(C0, Box::new(o)));
    }

    fn later(s: &State, ms: i64) -> Timestamp {
        s.now.checked_add(SignedDuration::from_millis(ms)).unwrap()
    }

    #[test]
    fn a_change_to_a_row_off_screen_within_the_second_leaves_the_board_as_drawn() {
        let mut s = board();
        // Within the second the last change arrived in (the header says "0s ago" either way).
        change(&mut s, "m001", Phase::Importing, "first");
        let drawn = Stamp::of(&s).unwrap();
        assert!(s.page < 50, "m099 is off screen");
        let t = later(&s, 0);
        update(&mut s, Action::Tick(t));
        change(&mut s, "m099", Phase::Importing, "moved on");
        assert_eq!(Stamp::of(&s).unwrap(), drawn);
    }

    #[test]
    fn what_the_board_shows_changing_changes_the_stamp() {
        type Case = (&'static str, fn(&mut State));
        let cases: [Case; 6] = [
            // Twice in one batch: the second object may reuse the first one's memory.
            ("a row on screen changed twice", |s| {
                change(s, "m000", Phase::Importing, "once");
                change(s, "m000", Phase::Importing, "twice");
            }),
            ("a row on screen changed", |s| {
                change(s, "m000", Phase::Importing, "on screen")
            }),
            ("a phase count changed (row off screen)", |s| {
                change(s, "m099", Phase::Succeeded, "done")
            }),
            ("a new migration", |s| {
                change(s, "z-new", Phase::Pending, "")
            }),
            ("the clock moved on a second", |s| {
                let t = later(s, 1000);
                update(s, Action::Tick(t));
            }),
            ("a new row on the page", |s| {
                change(s, "a-first", Phase::Pending, "")
            }),
        ];
        for (what, act) in cases {
            let mut s = board();
            let drawn = Stamp::of(&s).unwrap();
            act(&mut s);
            assert_ne!(Stamp::of(&s).unwrap(), drawn, "{what}");
        }
    }

    #[test]
    fn views_popups_the_input_line_and_the_log_pane_have_no_stamp_so_every_change_is_drawn() {
        let opened: [fn(&mut State); 4] = [
            |s| {
                update(s, Action::Enter);
            },
            |s| {
                update(s, Action::ToggleHelp);
            },
            |s| {
                update(s, Action::StartFilter);
            },
            |s| {
                update(s, Action::ToggleLogs);
            },
        ];
        for open in opened {
            let mut s = board();
            assert!(Stamp::of(&s).is_some());
            open(&mut s);
            assert_eq!(Stamp::of(&s), None, "{:?} {:?}", s.views, s.popup);
        }
    }
}
