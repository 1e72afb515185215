//! Every user-facing sentence of the cockpit, in one place.

use crate::state::{Outcome, Verb};

/// App name in the header.
pub const APP: &str = "ferry";
/// Shown when the terminal is too small.
pub fn too_small(w: u16, h: u16) -> String {
    format!("ferry needs a terminal of at least 80×24 (this one is {w}×{h})")
}
/// The hint when the CRDs are missing.
pub const CRD_HINT: &str = "CRD missing: kubectl apply -f deploy/crds/";
/// Nothing under the cursor for an action.
pub const NOTHING_SELECTED: &str = "nothing selected";
/// Empty board, live.
pub const EMPTY_BOARD: &str =
    "No migrations in scope. Create one with kubectl apply -f <vmm.yaml>.";
/// Empty board, filtered.
pub const EMPTY_FILTERED: &str = "No migration matches the filter (Esc clears it).";
/// Empty board before the first list.
pub const LOADING: &str = "Listing migrations…";
/// Footer hints on the board.
pub const HINTS_BOARD: &str = "?:help  /:filter  s/S:sort  w:wave  Tab:waves  ␣:mark  c:cancel  r:retry  p:pause  ^d:delete  Enter:details  q:quit";
/// Footer hints in a view.
pub const HINTS_VIEW: &str = "Esc:back  j/k:scroll  y:yaml  e:events  c/r/p/^d:act  ?:help  q:quit";
/// Footer hints in the wave strip.
pub const HINTS_WAVES: &str = "wave strip: j/k:select  Enter:show its migrations  c/r/p/^d:act on the MigrationWave  Tab/Esc:board";

/// `--readonly` refusing a verb.
pub fn readonly_refused(verb: Verb) -> String {
    format!("read-only mode (--readonly): {} is disabled", verb.as_str())
}

/// An unknown `:` command.
pub fn unknown_command(line: &str) -> String {
    format!("unknown command {line:?} (try :ns NAME, :wave NAME, :ctx NAME, :q)")
}

/// After `:ctx`.
pub fn context_switched(ctx: &str) -> String {
    format!("switched to context {ctx}")
}

/// Every target was skipped.
pub fn nothing_to_do(verb: Verb, first: &str, why: &str, n: usize) -> String {
    if n == 1 {
        format!("nothing to {}: {first} is {why}", verb.as_str())
    } else {
        format!(
            "nothing to {}: {first} is {why} (and {} more)",
            verb.as_str(),
            n - 1
        )
    }
}

/// What a verb changes, for the confirm dialog.
pub fn what_changes(verb: Verb) -> &'static str {
    match verb {
        Verb::Cancel => "sets spec.cancel: true — the controller cleans up and ends it Cancelled",
        Verb::Retry => "raises spec.retry by one — resumes from the checkpoint that failed",
        Verb::Pause => "sets spec.paused: true — no new step starts",
        Verb::Resume => "sets spec.paused: false — work goes on",
        Verb::Delete => {
            "deletes the object — the controller cleans up its staging and children first"
        }
    }
}

/// Title of the confirm dialog: `Cancel 3 migrations?`.
pub fn confirm_title(verb: Verb, n: usize, kind: &str) -> String {
    let v = verb.as_str();
    let mut cap = v[..1].to_uppercase();
    cap.push_str(&v[1..]);
    let noun = if n == 1 {
        kind.to_owned()
    } else {
        format!("{kind}s")
    };
    format!("{cap} {n} {noun}?")
}

/// One outcome, as a word or a short sentence.
pub fn outcome(o: Option<&Outcome>) -> String {
    match o {
        None => "…".into(),
        Some(Outcome::Applied) => "applied (waiting for the watch)".into(),
        Some(Outcome::Forbidden(m)) => format!("forbidden: {m}"),
        Some(Outcome::Conflict) => "conflict: it changed meanwhile; look again and retry".into(),
        Some(Outcome::NotFound) => "not found".into(),
        Some(Outcome::Failed(m)) => format!("failed: {m}"),
    }
}

/// The outcome of a single-object action.
pub fn single_outcome(verb: Verb, name: &str, o: Option<&Outcome>) -> String {
    format!("{} {name}: {}", verb.as_str(), outcome(o))
}

/// Why a verb leaves an object out, after "NAME is".
pub mod skip {
    /// The migration is not in the state (a script named it).
    pub const NOT_ON_THE_BOARD: &str = "not on the board";
    /// The wave is not in the state (a script named it).
    pub const NOT_IN_THE_WAVE_STRIP: &str = "not in the wave strip";
    /// Cancel or pause of a finished one.
    pub const FINISHED: &str = "already finished";
    /// Cancel again.
    pub const CANCELLING: &str = "already cancelling";
    /// Retry of a migration that neither failed nor was cancelled.
    pub const NEITHER_FAILED_NOR_CANCELLED: &str = "neither failed nor cancelled";
    /// Retry of a wave with nothing to retry.
    pub const NOTHING_FAILED_OR_CANCELLED: &str = "has nothing failed or cancelled";
    /// Pause again.
    pub const PAUSED: &str = "already paused";
    /// Resume of a running one.
    pub const NOT_PAUSED: &str = "not paused";
    /// Delete again.
    pub const DELETING: &str = "already being deleted";
}
