//! Every user-facing sentence and word of the cockpit, in one place, grouped by the screen that
//! shows it. Key names (`Ctrl-d`, `PgUp`) live with the keys in `keys.rs`.

use crate::verb::{Outcome, Verb};

/// App name in the header.
pub const APP: &str = "ferry";
/// Shown when the terminal is too small: `w`×`h`, under the least `min_w`×`min_h`.
pub fn too_small(w: u16, h: u16, min_w: u16, min_h: u16) -> String {
    format!("ferry needs a terminal of at least {min_w}×{min_h} (this one is {w}×{h})")
}

/// The hint when the CRDs are missing.
pub const CRD_HINT: &str = "CRD missing: kubectl apply -f deploy/crds/";
/// Nothing under the cursor for an action.
pub const NOTHING_SELECTED: &str = "nothing selected";
/// Nothing to show for a value.
pub const NONE: &str = "-";
/// A value not known (a source VM named by neither name, id nor uuid; a disk's size).
pub const UNKNOWN: &str = "?";

/// Under the "too small" message.
pub fn quits(key: &str) -> String {
    format!("{key} quits")
}

/// Title of the log pane.
pub fn logs_title(key: &str) -> String {
    format!(" logs ({key} hides) ")
}

/// A time in the past.
pub fn ago(age: &str) -> String {
    format!("{age} ago")
}

/// Time left.
pub fn eta(left: &str) -> String {
    format!("ETA {left}")
}

/// A cluster did not answer in time.
pub fn timed_out(secs: u64) -> String {
    format!("no answer in {secs}s")
}

/// A watch stream ended (the apiserver closed it); it is started again.
pub const WATCH_ENDED: &str = "watch ended";

/// A `phase:` filter token naming no phase.
pub fn unknown_phase(v: &str) -> String {
    format!("unknown phase {v:?}")
}

/// `ferry cancel` (and the other verbs) with nothing named.
pub const NAME_SOMETHING: &str = "name at least one migration, or a wave with --wave";

/// A script named a migration outside the wave it named.
pub fn not_in_wave(wave: &str) -> String {
    format!("not in wave {wave}")
}

/// A script named an object the verb does not apply to.
pub fn skipped(why: &str) -> String {
    format!("skipped: {why}")
}

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

/// A script verb (`ferry cancel`) with several contexts.
pub const ONE_CONTEXT_FOR_VERBS: &str =
    "name one context for cancel, retry, pause, resume, delete and controller (--context NAME)";

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

/// What a verb changes, for the confirm dialog: on a wave (`wave`) or its migrations.
pub fn what_changes(verb: Verb, wave: bool) -> &'static str {
    match verb {
        Verb::Cutover if wave => {
            "sets the wave's spec.warm.cutover: true — its precopied migrations cut over, at most maxInFlight at once, the others once precopied"
        }
        Verb::Cancel => "sets spec.cancel: true — the controller cleans up and ends it Cancelled",
        Verb::Retry => "raises spec.retry by one — resumes from the checkpoint that failed",
        Verb::Pause => "sets spec.paused: true — no new step starts",
        Verb::Resume => "sets spec.paused: false — work goes on",
        Verb::Delete => {
            "deletes the object — the controller cleans up its staging and children first"
        }
        Verb::Cutover => {
            "sets spec.warm.cutover: true — the source is powered off, its last changes copied and the VM started"
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

/// One outcome in a word, for counts (`2 applied, 1 forbidden`).
pub fn outcome_word(o: Option<&Outcome>) -> &'static str {
    match o {
        None => "waiting",
        Some(Outcome::Applied) => "applied",
        Some(Outcome::Forbidden(_)) => "forbidden",
        Some(Outcome::Conflict) => "conflict",
        Some(Outcome::NotFound) => "not found",
        Some(Outcome::Failed(_)) => "failed",
    }
}

/// One outcome for a script, which does not wait for the watch.
pub fn final_outcome(o: &Outcome) -> String {
    match o {
        Outcome::Applied => outcome_word(Some(o)).to_owned(),
        o => outcome(Some(o)),
    }
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

/// What a refused verb needs and which of ferry's roles grants it: `needs patch on
/// virtualmachinemigrations in apps: grant ferry-operate`.
pub fn needs(api_verb: &str, resource: &str, namespace: &str, role: &str) -> String {
    format!("needs {api_verb} on {resource} in {namespace}: grant {role}")
}

/// A key whose verb the API server's answers refuse, pressed: `retry needs patch on
/// virtualmachinemigrations in apps: grant ferry-operate`.
pub fn refused(what: &str, api_verb: &str, resource: &str, namespace: &str, role: &str) -> String {
    format!("{what} {}", needs(api_verb, resource, namespace, role))
}

/// A refused key where it is offered (the footer, the help): `(needs ferry-operate)`.
pub fn needs_role(role: &str) -> String {
    format!("(needs {role})")
}

/// A refused binding in the help overlay: `cutover needs ferry-operate` (27 characters, what
/// a cell of the two-column help holds at 80 columns).
pub fn help_refused(what: &str, role: &str) -> String {
    format!("{what} needs {role}")
}

/// A 403 in the outcome box, whole: the API server's words, then what grants it.
pub fn forbidden_whole(message: &str, verb: Verb, needs: &str) -> String {
    format!("forbidden: {message} — {} {needs}", verb.as_str())
}

/// A single-object action the API server refused, for the bottom line (the outcome box has
/// the API server's words): `cancel charlie: forbidden, needs patch on … : grant ferry-operate`.
pub fn single_forbidden(verb: Verb, name: &str, needs: &str) -> String {
    format!("{} {name}: forbidden, {needs}", verb.as_str())
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
    /// Cutover of a cold migration.
    pub const NOT_WARM: &str = "not a warm migration";
    /// Cutover asked for already.
    pub const CUTTING_OVER: &str = "already cutting over";
    /// Cutover of a cold wave.
    pub const COLD_WAVE: &str =
        "a cold wave (spec.template.mode Cold): only a warm wave's migrations wait for a cutover";
    /// Cutover of a wave asked for already.
    pub const WAVE_CUTOVER_ASKED: &str = "already asked to cut over";
    /// In a namespace whose answer refuses the verb (every verb needs what `ferry-operate`
    /// grants: patch or delete on migrations and waves).
    pub const REFUSED: &str = "in a namespace that refuses you this (needs ferry-operate)";
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

    /// The YAML view's migration is being read from the API.
    pub const READING_WHOLE: &str = "# reading the whole object…";

    /// The YAML view's migration could not be read.
    pub fn cannot_read(e: &str) -> String {
        format!("# cannot read the object: {e}")
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

    // Section titles.
    pub const SPEC: &str = "spec";
    pub const STATUS: &str = "status";
    pub const CONDITIONS: &str = "conditions";
    pub const DISKS: &str = "disks";
    pub const CHILDREN: &str = "children";
    pub const TIMELINE: &str = "timeline";
    pub const EVENTS: &str = "events";
    pub const PREFLIGHT: &str = "preflight";

    // Labels in front of a value.
    pub const SOURCE: &str = "source";
    pub const POWER: &str = "power";
    pub const TARGET: &str = "target";
    pub const STAGING: &str = "staging";
    pub const INTENTS: &str = "intents";
    pub const PHASE: &str = "phase";
    pub const PROGRESS: &str = "progress";
    pub const MESSAGE: &str = "message";
    pub const FAILURE: &str = "failure";
    pub const WARM: &str = "warm";
    pub const GUEST: &str = "guest";
    pub const HEALTH: &str = "health";
    pub const HOOKS: &str = "hooks";
    pub const FORECAST: &str = "forecast";

    /// The wave's forecast of one migration (`status.forecast.vms`): when it starts (or
    /// started) and ends at the wave's pace, and whether that is past the window's end.
    pub fn vm_forecast(starts: &str, ends: &str, started: bool, at_risk: bool) -> String {
        let start = if started { "started" } else { "starts" };
        let risk = if at_risk {
            "; past the window's end: it will not make it at this pace"
        } else {
            ""
        };
        format!("{start} {starts}, ends about {ends} at the wave's pace{risk}")
    }

    /// How a hook's run in the current attempt went.
    pub enum HookRun<'a> {
        Running,
        Succeeded,
        Failed(&'a str),
    }

    /// One hook (`spec.hooks`): which, its image, and its run (`None`: not run in this attempt).
    pub fn hook(point: &str, image: &str, run: Option<HookRun<'_>>) -> String {
        let how = match run {
            None => "not run yet".to_owned(),
            Some(HookRun::Running) => "running".to_owned(),
            Some(HookRun::Succeeded) => "succeeded".to_owned(),
            Some(HookRun::Failed("")) => "failed".to_owned(),
            Some(HookRun::Failed(said)) => format!("failed: {said}"),
        };
        format!("{point} ({image}): {how}")
    }

    /// The health check (`spec.target.healthCheck`): what is probed, what a failure does, and
    /// the probes so far (`probes`: made, answered in a row, passed).
    pub fn health(
        probe: &str,
        threshold: u32,
        keep: bool,
        probes: Option<(u32, u32, bool)>,
        last: Option<&str>,
    ) -> String {
        let then = if keep { "keep" } else { "roll back" };
        let mut out = format!("{probe}, {threshold} in a row, else {then}");
        match probes {
            None => out.push_str(": not probed yet"),
            Some((_, _, true)) => out.push_str(": passed"),
            Some((made, row, false)) => {
                out.push_str(&format!(": {row} of {threshold} after {made} probe(s)"))
            }
        }
        if let Some(l) = last {
            out.push_str(&format!("; last: {l}"));
        }
        out
    }

    /// What ferry found of the guest and did to it (`status.guest`), or what it will do
    /// (`spec.conversion.guest`) before ConvertingGuest has run.
    pub fn guest(
        asked: &str,
        os: Option<&str>,
        converted: Option<bool>,
        written: Option<String>,
        seconds: Option<u32>,
        last_change: Option<&str>,
        interface_names: &[String],
    ) -> String {
        let Some(converted) = converted else {
            return format!("conversion {asked}: not yet");
        };
        let mut out = match (converted, os) {
            (true, Some(os)) => format!("{os}, converted to run on KubeVirt (virt-v2v)"),
            (true, None) => "converted to run on KubeVirt (virt-v2v)".to_owned(),
            (false, _) => "no operating system virt-v2v converts: unchanged".to_owned(),
        };
        if let Some(w) = written {
            out.push_str(&format!(", {w} written"));
        }
        if let Some(s) = seconds {
            out.push_str(&format!(" in {s} s"));
        }
        if let Some(c) = last_change {
            out.push_str(&format!("; {c}"));
        }
        if !interface_names.is_empty() {
            out.push_str(&format!("; network: {}", interface_names.join(", ")));
        }
        out
    }

    /// A warm migration's precopy: rounds copied, the last delta, the guest's change rate, the
    /// next round, the cutover's predicted copy, and the cutover (each part only when known).
    pub fn warm(
        rounds: i32,
        delta: Option<String>,
        rate: Option<String>,
        next: Option<String>,
        predicted: Option<String>,
        cutover: &str,
    ) -> String {
        let mut out = format!("round {rounds}");
        for (word, v) in [
            ("last delta", delta),
            ("changing", rate),
            ("next round in", next),
            ("downtime ~", predicted),
        ] {
            if let Some(v) = v {
                let sep = if word.ends_with('~') { "" } else { " " };
                out.push_str(&format!(" · {word}{sep}{v}"));
            }
        }
        out.push_str(&format!(" · cutover {cutover}"));
        out
    }

    /// The predicted downtime: the cutover's copy, the guest's shutdown at its longest when it
    /// is given one, and the boot on top.
    pub fn predicted_downtime(copy: &str, shutdown: Option<&str>) -> String {
        match shutdown {
            Some(s) => format!("{copy} copy + shutdown ≤{s} + boot"),
            None => format!("{copy} + boot"),
        }
    }

    /// The cutover under way.
    pub const CUTOVER_UNDER_WAY: &str = "under way";
    /// The cutover asked for (`spec.warm.cutover: true`), not begun yet.
    pub const CUTOVER_ASKED: &str = "asked";
    /// No cutover asked for nor planned.
    pub const CUTOVER_ON_DEMAND: &str = "on demand (X)";
    /// The cutover planned at a time: when, and how long until.
    pub fn cutover_at(at: &str, left: &str) -> String {
        format!("at {at} (in {left})")
    }

    /// The migration was deleted while shown.
    pub const GONE: &str = "gone: the migration was deleted";

    /// The migration is being read from the API (rows keep no object; issue #30).
    pub const READING_MIGRATION: &str = "reading the migration…";

    /// The migration could not be read from the API.
    pub fn cannot_read(why: &str) -> String {
        format!("cannot read the migration: {why}")
    }

    /// The source VM and its endpoint.
    pub fn source(vm: &str, url: &str) -> String {
        format!("{vm} @ {url}")
    }

    /// Where the source is when the spec leaves the URL to the credentials Secret.
    pub const URL_FROM_SECRET: &str = "the URL of its credentials Secret";

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
        let started = started_ago.map_or(super::NONE.to_owned(), super::ago);
        format!("  for {age}  attempt {attempt}  started {started}")
    }

    /// Bytes done of the total, with the percentage.
    pub fn progress(percent: &str, done: &str, total: &str) -> String {
        format!("{percent}  {done} of {total}")
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

    /// A Job whose pod failed, waiting for the Job controller to start another.
    pub const RETRYING: &str = "Retrying";

    /// A Job or DataVolume state, with its failed pods.
    pub fn with_failed_pods(state: &str, failed: i64) -> String {
        format!("{state} (failed pods: {failed})")
    }

    /// A VMI phase once its guest agent connected.
    pub fn agent_connected(phase: &str) -> String {
        format!("{phase}, agent connected")
    }

    /// No phase in the history yet.
    pub const NO_HISTORY: &str = "(no phase recorded yet)";

    /// Attempt of a history entry, and whether it is the current phase.
    pub fn attempt(n: i32, current: bool) -> String {
        format!("  attempt {n}{}", if current { "  (now)" } else { "" })
    }

    /// No preflight recorded yet.
    pub const NOT_CHECKED: &str = "(not checked yet)";
    /// Preflight found nothing.
    pub const NO_CONCERNS: &str = "no concerns";
    /// Label of when preflight ran.
    pub const CHECKED: &str = "checked";
    /// Label of what holds the migration.
    pub const HELD: &str = "held";

    /// When preflight ran (`None`: not said), and whether the spec changed since (a check
    /// for the new spec is due).
    pub fn checked(ago: Option<&str>, spec_changed: bool) -> String {
        let when = ago.map_or(super::NONE.to_owned(), super::ago);
        if spec_changed {
            format!("{when}, for an older spec (checking again)")
        } else {
            when
        }
    }

    /// Why a migration held by preflight waits, and what ends it.
    pub fn held(blocking: usize) -> String {
        format!(
            "in Pending, nothing touched: {blocking} Critical concern{} nobody accepted; fix {} \
             cause (or accept it in spec.preflight.accept where that is allowed)",
            if blocking == 1 { "" } else { "s" },
            if blocking == 1 { "its" } else { "each one's" }
        )
    }
}

/// What each key does, for the help overlay (in `keys::BINDINGS` order).
pub mod help {
    /// Title of the overlay.
    pub const TITLE: &str = "keys (Esc closes)";
    /// The legend under the keys.
    pub const LEGEND: [&str; 5] = [
        " Pips: SourceDiscovered Validated DiskConverted DiskImported VMCreated",
        "       VMStarted GuestReady Ready   (● true ✕ failed ↻ retrying ○ not yet)",
        " Gutter: ● marked  … pending  ✕ cancelling  ‖ paused  † deleting",
        " Blocked: preflight holds it in Pending (a Critical concern nobody accepted)",
        " Wave preflight: ✓ ready  ✕ blocked  ⚠ ready with warnings",
    ];

    pub const UP: &str = "up (scroll in views)";
    pub const DOWN: &str = "down";
    pub const PAGE_UP: &str = "page up";
    pub const PAGE_DOWN: &str = "page down";
    pub const TOP: &str = "first row";
    pub const BOTTOM: &str = "last row";
    pub const ENTER: &str = "details (on the wave strip: show that wave)";
    pub const FOCUS: &str = "focus board / wave strip";
    pub const BACK: &str = "back; clear filter, then marks, then wave";
    pub const FILTER: &str = "filter: text, phase:Failed wave:w3 ns:apps";
    pub const SORT: &str = "sort by next column";
    pub const REVERSE_SORT: &str = "reverse sort";
    pub const WAVE: &str = "waves with their progress; Enter shows one";
    pub const TIMELINE: &str = "timeline: phases over time of the rows shown";
    pub const PREFLIGHT: &str = "preflight: concerns by code";
    pub const MARK: &str = "mark / unmark";
    pub const MARK_ALL: &str = "mark all visible (again: unmark all)";
    pub const CANCEL: &str = "cancel (marked, selected, or the wave)";
    pub const RETRY: &str = "retry a failed or cancelled one";
    pub const PAUSE: &str = "pause / resume";
    pub const DELETE: &str = "delete";
    pub const CUTOVER: &str = "cut over warm migrations (marked, selected, or the wave)";
    pub const YAML: &str = "YAML";
    pub const EVENTS: &str = "events";
    pub const LOGS: &str = "show / hide ferry's own log";
    pub const POD_LOGS: &str = "pod logs; Tab pod, f follow";
    pub const NEXT_POD: &str = "next pod";
    pub const PREV_POD: &str = "previous pod";
    pub const FOLLOW_AGAIN: &str = "read the log again and follow it";
    pub const NEXT_MESSAGE: &str = "next message (in details)";
    pub const COPY_MESSAGE: &str = "copy message whole (OSC 52)";
    pub const PROBLEMS: &str = "problems: failed and stuck, grouped";
    pub const COMMAND: &str = "command: ns NAME|all, wave NAME|all, ctx NAME, q";
    pub const HELP: &str = "help";
    pub const QUIT: &str = "quit";
}

/// The problems view (`!`): failed and stuck migrations grouped by cause.
pub mod problems {
    /// Its title.
    pub const TITLE: &str = " problems ";
    /// Nothing failed or stuck among the rows shown.
    pub const NONE: &str = "nothing failed or stuck among the migrations shown";
    /// The verb of a failed group.
    pub const FAILED: &str = "failed";
    /// The verb of a stuck group.
    pub const STUCK: &str = "stuck in";
    /// Where the stuck threshold is explained.
    pub const STUCK_MEANS: &str =
        "stuck: no new phase, attempt or byte for longer than the phase usually takes";

    /// The counts of the title.
    pub fn tally(failed: usize, stuck: usize) -> String {
        format!("{failed} failed  {stuck} stuck ")
    }

    /// One group's line: `3 × failed ImportFailed: DataVolume *-disk-0 failed: …`.
    pub fn group(n: usize, verb: &str, cause: &str, line: &str) -> String {
        if line.is_empty() {
            format!("{n:>3} × {verb} {cause}")
        } else {
            format!("{n:>3} × {verb} {cause}: {line}")
        }
    }

    /// Enter marked a group.
    pub fn marked(n: usize, total: usize) -> String {
        format!("marked {n} (now {total} marked): retry or cancel acts on the marked, once asked")
    }

    /// Enter again unmarked it.
    pub fn unmarked(n: usize) -> String {
        format!("unmarked {n}")
    }
}

/// The messages of the details view: which one the copy key takes, and what it did.
pub mod message {
    /// Nothing to copy here.
    pub const NONE: &str = "no message to copy here";
    /// The last failure.
    pub const FAILURE: &str = "the failure";
    /// `status.message`.
    pub const STATUS: &str = "the status message";
    /// An Event's note.
    pub const EVENT: &str = "an Event";

    /// A condition's message.
    pub fn condition(ty: &str) -> String {
        format!("condition {ty}")
    }

    /// Which message is selected (`3/7`), after `m`.
    pub fn selected(n: usize, of: usize, what: &str) -> String {
        format!("message {n}/{of}: {what} (▸ in the view)")
    }

    /// What `Y` did: the sequence was written, whether the terminal takes it is its own choice.
    pub fn copied(chars: usize) -> String {
        format!(
            "copied {chars} characters to the clipboard (OSC 52: the terminal, or tmux, must allow it)"
        )
    }
}

/// Footer words, after the keys `keys::BOARD_HINTS` and its siblings take from the key map.
pub mod hint {
    pub const HELP: &str = "help";
    pub const FILTER: &str = "filter";
    pub const SORT: &str = "sort";
    pub const WAVE: &str = "waves";
    pub const TIMELINE: &str = "timeline";
    pub const PREFLIGHT: &str = "preflight";
    pub const WAVES: &str = "strip";
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
    pub const WAVE_STRIP: &str = "wave strip: ";
    pub const SHOW_GROUP: &str = "its migrations";
    pub const NEXT_MESSAGE: &str = "msg";
    pub const COPY: &str = "copy";
    pub const PROBLEMS: &str = "problems";
    pub const MARK_GROUP: &str = "mark group";
    pub const POD_LOGS: &str = "pod logs";
    pub const NEXT_POD: &str = "pod";
    pub const FOLLOW_AGAIN: &str = "follow again";
}

/// The pod logs view (`L`): a migration's Jobs' and importers' pods and the chosen one's log.
pub mod podlogs {
    /// Heading of the view.
    pub fn heading(name: &str) -> String {
        format!("pod logs of {name}")
    }

    /// The pods are being listed.
    pub const LISTING: &str = "listing the migration's pods…";

    /// What made the migrated VM's launcher pod, as the list's owner column says it (its log is
    /// the VM's serial console).
    pub fn launcher_owner(vm: &str) -> String {
        format!("VM {vm} (console)")
    }

    /// No pod: none of its Jobs has one, it has no Job yet, or they were deleted with it.
    pub const NO_PODS: &str =
        "no pods: the migration has no Job, importer or VM pod now (a Job's pods go with it)";

    /// The pods could not be listed, with why.
    pub fn cannot_list(why: &str) -> String {
        format!("cannot list the pods: {why}")
    }

    /// The user may not list pods in `ns`.
    pub fn list_forbidden(ns: &str) -> String {
        format!(
            "forbidden: you may not list pods in namespace {ns} (the ClusterRole ferry-view grants it)"
        )
    }

    /// The user may not read `pods/log` in `ns`.
    pub fn log_forbidden(ns: &str) -> String {
        format!(
            "forbidden: you lack get on pods/log in namespace {ns} (the ClusterRole ferry-view grants it)"
        )
    }

    /// The migration could not be read (its Jobs are found from its `status.children`).
    pub fn cannot_read_migration(why: &str) -> String {
        format!("cannot read the migration: {why}")
    }

    /// A pod listed with no container.
    pub const NO_CONTAINER: &str = "the pod has no container";

    /// The pod chosen: `web-1-convert-x2k4q (Failed)`.
    pub fn pod(name: &str, phase: &str) -> String {
        format!("{name} ({phase})")
    }

    /// The pod chosen, of how many: `pod 2/3 ` (Tab shows the next).
    pub fn count(at: usize, of: usize) -> String {
        format!("pod {at}/{of} ")
    }

    /// What made the pod chosen: `of legacy-erp-convert`.
    pub fn made_by(owner: &str) -> String {
        format!(" of {owner}")
    }

    /// The stream's state line: which container, then what became of it.
    pub fn container(name: &str) -> String {
        format!("container {name} · ")
    }

    pub const IDLE: &str = "nothing to read";
    pub const OPENING: &str = "opening the log…";
    pub const FOLLOWING: &str = "following (last 500 lines, then live)";
    pub const ENDED: &str =
        "ended: the container stopped or the connection closed (f follows again)";

    /// The state line when the log could not be read; why follows under it, whole.
    pub const FAILED: &str = "cannot read the log (f tries again):";

    /// Lines dropped from the front to stay within the lines kept.
    pub fn dropped(n: usize) -> String {
        format!("… {n} earlier lines not kept")
    }

    /// The log has no line yet.
    pub const EMPTY: &str = "(no lines yet)";
}

/// The header: context, scope, connection, counts.
pub mod header {
    use ferry_crds::Phase;

    /// Every watch is live.
    pub const LIVE: &str = "● live";
    /// Scope `-A`.
    pub const ALL_NAMESPACES: &str = "all namespaces";
    /// In front of the context.
    pub const CTX: &str = " ctx ";
    /// In front of the namespace.
    pub const NS: &str = "  ns ";
    /// Between two clusters.
    pub const CLUSTER_SEPARATOR: &str = "  │";
    /// `--readonly`.
    pub const READ_ONLY: &str = " READ-ONLY ";
    /// Count of migrations, wide and narrow.
    pub const MIGRATIONS: &str = "migrations";
    /// See [`MIGRATIONS`].
    pub const MIGRATIONS_SHORT: &str = "vmm";

    /// Which watch, when it is not the migrations'.
    pub fn about(plural: &str) -> String {
        format!(" ({plural})")
    }

    /// A watch listing.
    pub fn listing(about: &str) -> String {
        format!("◌ listing{about}…")
    }

    /// A watch connecting.
    pub fn connecting(about: &str) -> String {
        format!("◌ connecting{about}…")
    }

    /// A watch waiting to reconnect.
    pub fn reconnecting(about: &str, wait: i64, attempt: u32, error: &str) -> String {
        format!("✕ reconnecting{about} in {wait}s (try {attempt}): {error}")
    }

    /// A watch refused by RBAC.
    pub fn forbidden(about: &str, message: &str) -> String {
        format!("✕ forbidden{about}: {message}")
    }

    /// A watch whose CRD is not installed.
    pub fn crd_missing(about: &str) -> String {
        format!("✕ {}{about}", super::CRD_HINT)
    }

    /// The board shows the last known state, since `age`.
    pub fn stale(age: &str) -> String {
        format!(" STALE {age} ")
    }

    /// How long ago the watches delivered something (`None`: never).
    pub fn last_event(ago: Option<&str>) -> String {
        format!(
            "  last event {}",
            ago.map_or(super::NONE.to_owned(), super::ago)
        )
    }

    /// A phase in a few letters, for narrow terminals.
    pub fn short_phase(p: Phase) -> &'static str {
        match p {
            Phase::Pending => "Pend",
            Phase::Queued => "Queue",
            Phase::Preparing => "Prep",
            Phase::Converting => "Conv",
            Phase::Importing => "Imp",
            Phase::CuttingOver => "Cut",
            Phase::ConvertingGuest => "Guest",
            Phase::CreatingVM => "VM",
            Phase::Starting => "Start",
            Phase::Validating => "Valid",
            Phase::Succeeded => "Done",
            Phase::Failed => "Failed",
            Phase::Cancelled => "Canc",
            Phase::RolledBack => "Back",
        }
    }
}

/// Column titles of the board (and of `ferry board --once`).
pub mod column {
    pub const NAME: &str = "NAME";
    pub const CLUSTER: &str = "CLUSTER";
    pub const NAMESPACE: &str = "NAMESPACE";
    pub const WAVE: &str = "WAVE";
    pub const PHASE: &str = "PHASE";
    pub const PROGRESS: &str = "PROGRESS";
    pub const CONDITIONS: &str = "CONDITIONS";
    pub const CONDITIONS_SHORT: &str = "CONDS";
    pub const ATTEMPT: &str = "ATTEMPT";
    pub const ATTEMPT_SHORT: &str = "ATT";
    pub const IN_PHASE: &str = "IN-PHASE";
    /// A narrow board's PROGRESS (its percentage alone).
    pub const PROGRESS_SHORT: &str = "DONE";
    /// A narrow board's IN-PHASE.
    pub const IN_PHASE_SHORT: &str = "FOR";
    pub const MESSAGE: &str = "MESSAGE";
    /// When the wave's forecast ends the migration (`status.forecast.vms` of its wave).
    pub const ENDS: &str = "ENDS";
    pub const CONTEXT: &str = "CONTEXT";
    pub const STATE: &str = "STATE";
    pub const ERROR: &str = "ERROR";
    pub const PREFLIGHT: &str = "PREFLIGHT";
}

/// The board's title line.
pub mod board {
    /// What the board lists.
    pub const TITLE: &str = " migrations ";
    /// The board shows the last known state.
    pub const STALE: &str = " stale: last known state ";
    /// After a stale cluster's context in the CLUSTER column.
    pub const STALE_GLYPH: &str = " ✕";
    /// After the context of a cluster not listed yet (or listing again).
    pub const CONNECTING_GLYPH: &str = " ◌";
    /// After an ENDS time past the wave's window's end.
    pub const AT_RISK_GLYPH: &str = "⚠";

    /// Some clusters of the board show their last known state.
    pub fn stale_of(contexts: &str) -> String {
        format!(" stale: {contexts} (last known state) ")
    }

    /// The sort column and direction.
    pub fn sort(column: &str, reverse: bool) -> String {
        format!("sort {column}{} ", if reverse { "↓" } else { "↑" })
    }

    /// The one wave shown.
    pub fn wave(name: &str) -> String {
        format!("wave {name} ")
    }

    /// The filter applied.
    pub fn filter(raw: &str) -> String {
        format!("filter “{raw}” ")
    }

    /// How many rows are marked.
    pub fn marked(n: usize) -> String {
        format!("{n} marked ")
    }

    /// The PHASE cell of a migration preflight holds in Pending.
    pub const BLOCKED: &str = "Blocked";

    /// The message of a migration preflight holds: the first Critical concern that holds it
    /// (as a failure reads: code, then message), and how many more do.
    pub fn held(code: &str, more: usize, message: &str) -> String {
        if more == 0 {
            format!("{code}: {message}")
        } else {
            format!("{code} (+{more}): {message}")
        }
    }
}

/// The wave strip.
pub mod waves {
    /// Migrations of the wave that failed.
    pub fn failed(n: i32) -> String {
        format!(" ✕{n} failed")
    }

    /// After the failed count: the key of the problems view.
    pub fn problems_key(key: &str) -> String {
        format!(" {key}")
    }

    /// VMs of the wave that get no migration: their migration's name is another VM's.
    pub fn collisions(n: usize) -> String {
        format!(" ✕{n} name collision{}", if n == 1 { "" } else { "s" })
    }

    /// The wave's selector chose more VMs than a wave may hold.
    pub const SELECTOR_TOO_BROAD: &str = " ✕ selector too broad";
    /// After `⇉in/max` on wide terminals.
    pub const IN_FLIGHT: &str = " in flight";
    /// The wave is paused.
    pub const PAUSED: &str = " ‖ paused";
    /// The wave is being cancelled.
    pub const CANCEL: &str = " ✕ cancel";
    /// Held migrations the wave's window keeps from starting (`status.forecast.outsideWindow`).
    pub fn outside_window(n: i32) -> String {
        format!(" ⊘ {n} outside the window")
    }
    /// Migrations the forecast ends past the window's end (`status.forecast.atRisk`).
    pub fn at_risk(n: i32) -> String {
        format!(" ⚠ {n} at risk")
    }
    /// Before its window opens, the wave does not fit it at the measured pace
    /// (`status.forecast.windowShort`).
    pub const DOES_NOT_FIT: &str = " ⚠ does not fit the window";
    /// In front of the sparkline.
    pub const DONE_PER_MINUTE: &str = "done/min ";

    /// Migrations finished per hour.
    pub fn per_hour(n: f64) -> String {
        format!(" {n:.0}/h")
    }

    /// A wave's name after its context, on a board of several clusters.
    pub fn in_context(context: &str, name: &str) -> String {
        format!("{context}/{name}")
    }

    /// In front of the wave's preflight counts.
    pub const PREFLIGHT: &str = " preflight ";
    /// Between two preflight counts.
    pub const SEPARATOR: &str = " · ";

    /// Migrations preflight found nothing to hold in: in words, else a glyph.
    pub fn ready(n: i32, words: bool) -> String {
        if words {
            format!("{n} ready")
        } else {
            format!("{n}✓")
        }
    }

    /// Migrations a Critical concern nobody accepted holds (or will hold once released).
    pub fn blocked(n: i32, words: bool) -> String {
        if words {
            format!("{n} blocked")
        } else {
            format!("{n}✕")
        }
    }

    /// The wave's disks together exceed a ResourceQuota (status.preflight.quotaShort).
    pub fn quota_short(words: bool) -> &'static str {
        if words { " · over quota" } else { " quota✕" }
    }

    /// Ready migrations with at least one Warning.
    pub fn warnings(n: i32, words: bool) -> String {
        match (words, n) {
            (true, 1) => "1 warning".to_owned(),
            (true, n) => format!("{n} warnings"),
            (false, n) => format!("{n}⚠"),
        }
    }

    /// A warm wave's migrations copied while their VMs run, waiting for the wave's cutover: in
    /// words, else a glyph.
    pub fn waiting(n: i32, words: bool) -> String {
        if words {
            format!(" {n} precopied, waiting")
        } else {
            format!(" ◷{n}")
        }
    }

    /// The wave's cutover planned at `at` (UTC), `left` from now; the glyph form leaves the
    /// time out.
    pub fn cutover_at(at: &str, left: &str, words: bool) -> String {
        if words {
            format!(" · cutover {at} in {left}")
        } else {
            format!(" cutover in {left}")
        }
    }

    /// The wave's cutover asked for (`spec.warm.cutover`) or its time come.
    pub fn cutover_now(words: bool) -> &'static str {
        if words {
            " · cutover now"
        } else {
            " cutover now"
        }
    }

    /// Neither `spec.warm.cutover` nor `spec.warm.cutoverAt` (`X` on the wave asks for it).
    pub fn cutover_not_set(words: bool) -> &'static str {
        if words {
            " · cutover: not set"
        } else {
            " no cutover set"
        }
    }
}

/// The confirm dialog and the report after it.
pub mod confirm {
    /// Title of the dialog.
    pub const TITLE: &str = " confirm ";
    /// Title of the report.
    pub const REPORT_TITLE: &str = " outcome ";
    /// The object kinds a verb acts on, for the dialog's question.
    pub const WAVE: &str = "wave";
    /// See [`WAVE`].
    pub const MIGRATION: &str = "migration";
    /// The answers, after their keys.
    pub const YES: &str = "yes";
    /// See [`YES`].
    pub const NO: &str = "no";
    /// Under the report.
    pub const REPORT_CLOSES: &str =
        "  Esc/Enter closes; rows show … until the watch delivers the change";

    /// Lines left out of a list.
    pub fn more(n: usize) -> String {
        format!("  … and {n} more")
    }

    /// Targets the verb does not apply to, with why for the first.
    pub fn skipped(n: usize, first: &str, why: &str) -> String {
        format!(
            "  skipped {n}: {first} is {why}{}",
            if n > 1 { ", …" } else { "" }
        )
    }
}

/// The wave picker.
pub mod picker {
    /// Its title.
    pub const TITLE: &str = " waves ";

    /// The first line: no wave scope.
    pub fn every_wave(waves: usize, migrations: usize) -> String {
        format!("every wave ({waves} waves, {migrations} migrations on the board)")
    }

    /// The keys under the list.
    pub fn hint(select: &str, enter: &str, back: &str) -> String {
        format!("  {select}: select   {enter}: show only that wave   {back}: close")
    }
}

/// The timeline view.
pub mod timeline {
    use ferry_crds::Phase;

    /// Its title.
    pub const TITLE: &str = " timeline ";
    /// After a slow migration's time.
    pub const SLOW_FLAG: &str = "⚑";
    /// In front of the share of each phase.
    pub const TIME_WENT: &str = "  time spent: ";
    /// No row has a recorded phase.
    pub const NOTHING: &str = "No migration on the board has a recorded phase yet.";
    /// What the letters mean, in the order of the legend.
    pub const LEGEND: [(Phase, &str); 10] = [
        (Phase::Queued, "queued"),
        (Phase::Preparing, "preparing"),
        (Phase::Converting, "converting"),
        (Phase::Importing, "importing"),
        (Phase::CreatingVM, "creating VM"),
        (Phase::Starting, "starting"),
        (Phase::Validating, "validating"),
        (Phase::Succeeded, "succeeded"),
        (Phase::Failed, "failed"),
        (Phase::Cancelled, "cancelled"),
    ];

    /// How many migrations it shows.
    pub fn count(n: usize) -> String {
        format!("{n} migrations ")
    }

    /// The one wave it shows.
    pub fn wave(name: &str) -> String {
        format!("wave {name} ")
    }

    /// The column titles before the time axis.
    pub fn columns(name_w: usize) -> String {
        format!("  {:<name_w$}{:>3} {:>7} ", "NAME", "ATT", "TOOK")
    }

    /// The time the axis spans, between its ends.
    pub fn span(d: &str) -> String {
        format!("← {d} →")
    }

    /// The median time a migration took.
    pub fn median(d: &str) -> String {
        format!("   median {d}")
    }

    /// How many took more than twice the median.
    pub fn slow(n: usize) -> String {
        format!("   ⚑ {n} slow (over twice the median)")
    }
}

/// The preflight view (`P`), its group view, and the concerns `ferry board --once` prints.
pub mod preflight {
    use ferry_crds::ConcernCode;

    /// Its title.
    pub const TITLE: &str = " preflight ";
    /// No migration on the board was preflighted.
    pub const NOTHING_CHECKED: &str = "No migration on the board was preflighted yet.";
    /// Preflighted, and nothing found.
    pub const NOTHING_FOUND: &str = "Preflight found no concern about the migrations on the board.";
    /// The group shown has no migration on the board any more.
    pub const GROUP_GONE: &str = "no migration on the board has this concern any more";
    /// A Critical concern the operator accepted.
    pub const ACCEPTED: &str = "accepted";
    /// A Critical concern nobody accepted, of a code that may be accepted.
    pub const MAY_BE_ACCEPTED: &str = "may be accepted in spec.preflight.accept";
    /// After a migration preflight holds, in `ferry board --once`.
    pub const HELD: &str = "held by preflight";

    /// Counts over the rows shown: preflighted, ready, blocked, ready with warnings.
    pub fn tally(checked: i32, ready: i32, blocked: i32, warnings: i32) -> String {
        format!("{checked} checked · {ready} ready · {blocked} blocked · {warnings} with warnings ")
    }

    /// How many VMs a group holds.
    pub fn vms(n: usize) -> String {
        format!("{n} VM{}", if n == 1 { "" } else { "s" })
    }

    /// A group: how many VMs, its severity and code, in columns.
    pub fn group(vms: usize, severity: &str, code: &str) -> String {
        let unit = if vms == 1 { "VM" } else { "VMs" };
        format!("{vms:>5} {unit:<3} · {severity:<8} · {code:<24}")
    }

    /// How many of a Critical group's VMs accepted it, as a column (blank for none).
    pub fn accepted(n: usize) -> String {
        if n == 0 {
            format!("{:12}", "")
        } else {
            format!("{:>12}", format!("{n} accepted"))
        }
    }

    /// Heading of the group view.
    pub fn group_heading(code: &str, severity: &str, vms: &str) -> String {
        format!(" preflight · {code} · {severity}  {vms} ")
    }

    /// Column header of the group view.
    pub fn group_header(name_w: usize) -> String {
        format!("  {:<name_w$} {:<10} {}", "NAME", "PHASE", "MESSAGE")
    }

    /// What a code means and what to do about it, in a line.
    pub fn about(code: ConcernCode) -> &'static str {
        match code {
            ConcernCode::SourceUnavailable => {
                "the source could not be checked: its endpoint, credentials or the VM's lookup"
            }
            ConcernCode::PoweredOn => {
                "the VM is powered on: the migration powers it off, or may not"
            }
            ConcernCode::ToolsNotRunning => {
                "VMware Tools do not run: the shutdown will be a hard power-off"
            }
            ConcernCode::SnapshotPresent => {
                "the VM has snapshots (a disk is a delta): consolidate or delete them first"
            }
            ConcernCode::RawDeviceMapping => {
                "a disk is a raw device mapping: its data is on a LUN ferry cannot read"
            }
            ConcernCode::IndependentDisk => {
                "a disk is independent: vSphere never snapshots it (nonpersistent: changes lost)"
            }
            ConcernCode::SharedDisk => {
                "a disk is shared with other VMs: the copy is of a disk others still write"
            }
            ConcernCode::EncryptedDisk => "a disk is encrypted: ferry cannot convert ciphertext",
            ConcernCode::Passthrough => {
                "a PCI or USB device is passed through: the KubeVirt VM will not have it"
            }
            ConcernCode::UnsupportedDisk => "a disk's format or backing is one ferry cannot read",
            ConcernCode::IncompleteInventory => {
                "ferry read fewer disks than vSphere counts, or not all of vSphere's answer"
            }
            ConcernCode::NoDisk => "the VM has no virtual disk: nothing to migrate",
            ConcernCode::SecureBoot => {
                "Secure Boot is on: a guest signed with other than Microsoft's keys will not boot"
            }
            ConcernCode::ChangeTrackingOff => {
                "changed block tracking is off: an incremental (warm) copy would need it"
            }
            ConcernCode::InstancetypeMissing => {
                "the instancetype or preference named does not exist: KubeVirt would not start it"
            }
            ConcernCode::BusWithoutDrivers => {
                "the chosen bus needs drivers the guest is not said to have (virtioDrivers)"
            }
            ConcernCode::TargetNameTaken => {
                "another VirtualMachine has the target name, or the name is not valid"
            }
            ConcernCode::NameConflict => {
                "an object ferry would create exists and is not this migration's"
            }
            ConcernCode::NetworkAttachmentMissing => {
                "a Multus network names a NetworkAttachmentDefinition that does not exist"
            }
            ConcernCode::NetworkNotAllowed => {
                "a Multus network of another namespace, which the platform does not allow"
            }
            ConcernCode::StorageClassMissing => {
                "a StorageClass the disks would use does not exist: the claims would never bind"
            }
            ConcernCode::DatastoreUnmapped => {
                "a disk's datastore is not in the storage map, which names no default class"
            }
            ConcernCode::StorageCapacityShort => {
                "a StorageClass reports no room for the largest of the disks' claims"
            }
            ConcernCode::QuotaExceeded => {
                "a ResourceQuota has less storage or claims left than the disks need"
            }
            ConcernCode::NetworkUnmapped => {
                "a NIC's network is not in target.template.networks: that NIC is left out"
            }
            ConcernCode::StagingUnavailable => {
                "the staging bucket cannot be reached, written, or does not exist"
            }
            ConcernCode::ConverterImageNotAllowed => {
                "the converter image asked for is not allowed by the controller's policy"
            }
        }
    }
}

/// The first screen of `ferry --welcome`. `ui::welcome` pairs each thing to try with its keys.
pub mod welcome {
    /// On its border.
    pub const BORDER: &str = " welcome ";
    /// Its first line.
    pub const TITLE: &str = " ferry: a live board of every VM migration. Keys to try:";
    /// Its last line.
    pub const ANY_KEY: &str = " Any other key closes this; ? then shows every key.";
    /// Try: moving the cursor.
    pub const MOVE: &str = "move on the board";
    /// Try: opening a migration.
    pub const DETAILS: &str = "details of a migration: conditions, disks, children, events";
    /// Try: the wave picker.
    pub const WAVES: &str = "the waves with their progress; Enter shows one";
    /// Try: the timeline.
    pub const TIMELINE: &str = "the timeline: where each migration's time went";
    /// Try: the preflight view.
    pub const PREFLIGHT: &str = "preflight: what holds migrations, grouped by concern";
    /// Try: a filter.
    pub const FILTER: &str = "filter, e.g. phase:Failed or a name";
    /// Try: retrying.
    pub const RETRY: &str = "retry a failed migration (r, then y)";
    /// Try: cancelling.
    pub const CANCEL: &str = "cancel a running one (␣ marks several)";
    /// Try: leaving.
    pub const QUIT: &str = "quit";
}

/// `ferry report WAVE` found no migration of that wave.
pub fn no_migration_of_wave(wave: &str) -> String {
    format!("no migration of wave {wave} in scope (-n NS, -A: every namespace)")
}

/// `ferry report`: its titles and cells.
pub mod report {
    /// An empty cell.
    pub const NONE: &str = "-";
    /// The totals' heading.
    pub const TOTALS: &str = "Totals";
    /// The totals of the migrations of no wave.
    pub const NO_WAVE: &str = "(no wave)";
    /// The VM table's columns (markdown).
    pub const VM_COLUMNS: [&str; 11] = [
        "Migration",
        "Source VM",
        "Wave",
        "Final",
        "Attempts",
        "Started (UTC)",
        "Ended (UTC)",
        "Phases",
        "Moved",
        "Downtime",
        "Failure",
    ];
    /// The totals' columns (markdown).
    pub const TOTAL_COLUMNS: [&str; 12] = [
        "Wave",
        "VMs",
        "Succeeded",
        "Failed",
        "Cancelled",
        "Under way",
        "Retries",
        "Moved",
        "Downtime (sum / longest)",
        "Started (UTC)",
        "Ended (UTC)",
        "First forecast of the end",
    ];
    /// The CSV's columns.
    pub const CSV_COLUMNS: [&str; 27] = [
        "row",
        "wave",
        "namespace",
        "name",
        "source_vm",
        "final_phase",
        "attempts",
        "started_at",
        "completed_at",
        "phases",
        "bytes_moved",
        "bytes_total",
        "downtime_seconds",
        "downtime_from",
        "downtime_to",
        "outages",
        "failure_reason",
        "failure_message",
        "vms",
        "succeeded",
        "failed",
        "cancelled",
        "under_way",
        "retries",
        "forecast_made_at",
        "forecast_ends_at",
        "forecast_error_percent",
    ];

    /// A wave's first forecast of its end against the end it had.
    pub fn forecast(ends_at: &str, made_at: &str, error_percent: Option<f64>) -> String {
        match error_percent {
            Some(e) => format!("{ends_at} (made {made_at}): {e:.0} % off"),
            None => format!("{ends_at} (made {made_at})"),
        }
    }

    /// The title.
    pub fn title(wave: Option<&str>) -> String {
        match wave {
            Some(w) => format!("Migration report: wave {w}"),
            None => "Migration report".into(),
        }
    }

    /// Under the title.
    pub fn generated(at: &str) -> String {
        format!(
            "Generated {at} by `ferry report` from the cluster's VirtualMachineMigrations. \
             Downtime: from ferry's power-off request to the source until the migrated VM ran \
             (VMStarted) or ferry powered the source back on, each attempt's outage summed."
        )
    }

    /// A retry's phases begin with it.
    pub fn attempt(n: i32) -> String {
        format!("(attempt {n}) ")
    }

    /// Bytes moved of the total.
    pub fn bytes(moved: &str, total: &str) -> String {
        format!("{moved} of {total}")
    }

    /// A downtime that ferry ended by powering the source back on.
    pub fn restored(d: &str) -> String {
        format!("{d} (source powered back on)")
    }

    /// A downtime that ended when someone powered the source on outside ferry (seen when ferry
    /// powered it off again).
    pub fn powered_on_elsewhere(d: &str) -> String {
        format!("{d} (powered on outside ferry)")
    }

    /// One outage of several, with its attempt.
    pub fn of_attempt(attempt: i32, cell: &str) -> String {
        format!("attempt {attempt}: {cell}")
    }

    /// Several outages, then their sum.
    pub fn outages_summed(each: &str, sum: &str) -> String {
        format!("{sum} in all ({each})")
    }

    /// A downtime still going on at the report.
    pub fn still_down(d: &str) -> String {
        format!("{d} so far (still down)")
    }

    /// A failure a retry got past.
    pub fn retried_past(cell: &str) -> String {
        format!("(retried past) {cell}")
    }

    /// The totals' downtime.
    pub fn downtime_totals(sum: &str, longest: &str) -> String {
        format!("{sum} / {longest}")
    }
}
