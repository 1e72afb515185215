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
/// After the filter being typed, when it parses.
pub const FILTER_TYPING: &str = "Enter keeps it, Esc too; tokens phase: wave: ns:";

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

/// The full-screen views over the board: details, YAML, events.
pub mod view {
    /// After the object's name on the view's rule.
    pub fn in_namespace(ns: &str) -> String {
        format!("namespace {ns} ")
    }

    /// Heading of the YAML view.
    pub fn yaml_heading(kind: &str, name: &str) -> String {
        format!("yaml {kind} {name}")
    }

    /// Heading of the events view.
    pub fn events_heading(name: &str) -> String {
        format!("events of {name}")
    }

    /// The object of a YAML or events view was deleted.
    pub const OBJECT_GONE: &str = "gone: the object was deleted";

    /// The YAML could not be written.
    pub fn cannot_render(e: &dyn std::fmt::Display) -> String {
        format!("# cannot render: {e}")
    }

    /// Column header of the events view.
    pub fn events_header() -> String {
        format!("  {:>7} {:<8}{:<22}{}", "AGE", "TYPE", "REASON", "MESSAGE")
    }

    /// No event about the object.
    pub const NO_EVENTS: &str = "no events";

    /// An event seen `n` times.
    pub fn repeated(n: i32) -> String {
        format!(" ×{n}")
    }
}

/// The details view of one migration.
pub mod details {
    use std::fmt::Debug;

    /// Section titles.
    pub const SPEC: &str = "spec";
    /// See [`SPEC`].
    pub const STATUS: &str = "status";
    /// See [`SPEC`].
    pub const CONDITIONS: &str = "conditions";
    /// See [`SPEC`].
    pub const DISKS: &str = "disks";
    /// See [`SPEC`].
    pub const CHILDREN: &str = "children";
    /// See [`SPEC`].
    pub const TIMELINE: &str = "timeline";
    /// See [`SPEC`].
    pub const EVENTS: &str = "events";

    /// Labels in front of a value.
    pub const SOURCE: &str = "source";
    /// See [`SOURCE`].
    pub const POWER: &str = "power";
    /// See [`SOURCE`].
    pub const TARGET: &str = "target";
    /// See [`SOURCE`].
    pub const STAGING: &str = "staging";
    /// See [`SOURCE`].
    pub const INTENTS: &str = "intents";
    /// See [`SOURCE`].
    pub const PHASE: &str = "phase";
    /// See [`SOURCE`].
    pub const PROGRESS: &str = "progress";
    /// See [`SOURCE`].
    pub const MESSAGE: &str = "message";
    /// See [`SOURCE`].
    pub const FAILURE: &str = "failure";

    /// The migration was deleted while shown.
    pub const GONE: &str = "gone: the migration was deleted";
    /// A value not known (a source VM named by neither name, id nor uuid; a disk's size).
    pub const UNKNOWN: &str = "?";
    /// Nothing to show for a value.
    pub const NONE: &str = "-";

    /// The source VM and its endpoint.
    pub fn source(vm: &str, url: &str) -> String {
        format!("{vm} @ {url}")
    }

    /// The source power settings.
    pub fn power(power_off: bool, restore: &dyn Debug) -> String {
        format!("powerOff {power_off}  restore {restore:?}")
    }

    /// The target VM, its storage class (`None`: the cluster's default) and run strategy.
    pub fn target(vm: &str, storage_class: Option<&str>, run_strategy: &dyn Debug) -> String {
        format!(
            "{vm}  storageClass {}  runStrategy {run_strategy:?}",
            storage_class.unwrap_or("(default)")
        )
    }

    /// Where the converted disks are staged, and their format.
    pub fn staging(endpoint: &str, bucket: &str, format: &str) -> String {
        format!("{endpoint} bucket {bucket}  format {format}")
    }

    /// The `spec.cancel` intent.
    pub const CANCEL: &str = "cancel";
    /// The `spec.paused` intent.
    pub const PAUSED: &str = "paused";

    /// One boolean intent.
    pub fn flag(name: &str, on: bool) -> String {
        format!("{name} {on}  ")
    }

    /// The retry token and the one the controller acted on.
    pub fn retry(token: i64, observed: i64) -> String {
        format!("retry {token} (acted on {observed})")
    }

    /// A request sent, not yet shown by the watch.
    pub fn pending(verb: &str) -> String {
        format!("  … {verb} pending")
    }

    /// Time in the phase, attempt, and how long ago it started (`None`: not yet).
    pub fn in_phase(age: &str, attempt: i32, started_ago: Option<&str>) -> String {
        let started = started_ago.map_or(NONE.to_owned(), ago);
        format!("  for {age}  attempt {attempt}  started {started}")
    }

    /// A time in the past.
    pub fn ago(age: &str) -> String {
        format!("{age} ago")
    }

    /// Bytes done of the total, with the percentage.
    pub fn progress(percent: &str, done: &str, total: &str) -> String {
        format!("{percent}  {done} of {total}")
    }

    /// Time left.
    pub fn eta(left: &str) -> String {
        format!("ETA {left}")
    }

    /// The last failure.
    pub fn failure(
        reason: &str,
        phase: &dyn std::fmt::Display,
        message: &str,
        retriable: bool,
    ) -> String {
        let retriable = if retriable { " (retriable)" } else { "" };
        format!("{reason} in {phase}: {message}{retriable}")
    }

    /// Column header of the conditions.
    pub fn conditions_header() -> String {
        format!(
            "  {:<17}{:<10}{:<22}{:<8}{}",
            "TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"
        )
    }

    /// No disk discovered yet.
    pub const NO_DISKS: &str = "(not discovered yet)";

    /// Start of a disk's line.
    pub fn disk(index: impl std::fmt::Display) -> String {
        format!("  disk {index} ")
    }

    /// The DataVolume of a disk.
    pub fn data_volume(name: &str) -> String {
        format!("  dv {name}")
    }

    /// A disk whose checksum was recorded.
    pub const CHECKSUM_RECORDED: &str = "  sha256 ✓";

    /// Children being read.
    pub const READING: &str = "reading…";
    /// No child yet.
    pub const NO_CHILDREN: &str = "none yet";
    /// A child that is not there (also what `kube::children` reports for it).
    pub const ABSENT: &str = "absent";
    /// A child we may not read.
    pub const FORBIDDEN: &str = "forbidden";
    /// `VirtualMachineInstance`, shortened as everyone says it.
    pub const VMI: &str = "VMI";

    /// No phase in the history yet.
    pub const NO_HISTORY: &str = "(no phase recorded yet)";

    /// Attempt of a history entry, and whether it is the current phase.
    pub fn attempt(n: i32, current: bool) -> String {
        format!("  attempt {n}{}", if current { "  (now)" } else { "" })
    }
}

/// What each key does, for the help overlay (in `keys::BINDINGS` order).
pub mod help {
    /// Up.
    pub const UP: &str = "up (scroll in views)";
    /// Down.
    pub const DOWN: &str = "down";
    /// Page up.
    pub const PAGE_UP: &str = "page up";
    /// Page down.
    pub const PAGE_DOWN: &str = "page down";
    /// Top.
    pub const TOP: &str = "first row";
    /// Bottom.
    pub const BOTTOM: &str = "last row";
    /// Enter.
    pub const ENTER: &str = "details (on the wave strip: show that wave)";
    /// Focus.
    pub const FOCUS: &str = "focus board / wave strip";
    /// Back.
    pub const BACK: &str = "back; clear filter, then marks, then wave";
    /// Filter.
    pub const FILTER: &str = "filter: text, phase:Failed wave:w3 ns:apps";
    /// Sort.
    pub const SORT: &str = "sort by next column";
    /// Reverse sort.
    pub const REVERSE_SORT: &str = "reverse sort";
    /// Wave.
    pub const WAVE: &str = "show next wave only (then all)";
    /// Mark.
    pub const MARK: &str = "mark / unmark";
    /// Mark all.
    pub const MARK_ALL: &str = "mark all visible (again: unmark all)";
    /// Cancel.
    pub const CANCEL: &str = "cancel (marked, selected, or the wave)";
    /// Retry.
    pub const RETRY: &str = "retry a failed or cancelled one";
    /// Pause.
    pub const PAUSE: &str = "pause / resume";
    /// Delete.
    pub const DELETE: &str = "delete";
    /// Yaml.
    pub const YAML: &str = "YAML";
    /// Events.
    pub const EVENTS: &str = "events";
    /// Logs.
    pub const LOGS: &str = "show / hide logs";
    /// Command.
    pub const COMMAND: &str = "command: ns NAME|all, wave NAME|all, ctx NAME, q";
    /// Help.
    pub const HELP: &str = "help";
    /// Quit.
    pub const QUIT: &str = "quit";
}

/// Footer words, after the keys `keys::BOARD_HINTS` and its siblings take from the key map.
pub mod hint {
    pub const HELP: &str = "help";
    pub const FILTER: &str = "filter";
    pub const SORT: &str = "sort";
    pub const WAVE: &str = "wave";
    pub const WAVES: &str = "waves";
    pub const MARK: &str = "mark";
    pub const CANCEL: &str = "cancel";
    pub const RETRY: &str = "retry";
    pub const PAUSE: &str = "pause";
    pub const DELETE: &str = "delete";
    pub const DETAILS: &str = "details";
    pub const QUIT: &str = "quit";
    pub const BACK: &str = "back";
    pub const SCROLL: &str = "scroll";
    pub const YAML: &str = "yaml";
    pub const EVENTS: &str = "events";
    pub const ACT: &str = "act";
    pub const SELECT: &str = "select";
    pub const SHOW_WAVE: &str = "show its migrations";
    pub const ACT_ON_WAVE: &str = "act on the MigrationWave";
    pub const BOARD: &str = "board";
    /// In front of the wave strip's hints.
    pub const WAVE_STRIP: &str = "wave strip: ";
}
