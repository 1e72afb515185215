//! One board row: the few fields of a `VirtualMachineMigration` the board and its lists
//! (timeline, preflight, problems, verbs) read, computed once per watch event so that drawing
//! and sorting never walk the object again. A row keeps no object: at 10,000 migrations the
//! trimmed objects were most of the cockpit's memory (issue #30); the details view reads the one
//! it shows on demand ([`super::Opened`]).

use ferry_crds::{
    ConcernCode, Condition, ConditionStatus, ConditionType, MigrationMode, Phase, PreflightStatus,
    Reason, VirtualMachineMigration,
};
use kube::ResourceExt;

use super::{ClusterId, ObjKey, Timestamp, problems};
use crate::strings;

/// What a condition pip tells a person, which is not always its status: a `False` that only
/// means "not yet" on a healthy migration is no failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pip {
    /// The condition holds.
    Done,
    /// It failed (or will never hold: the migration failed or was cancelled).
    Failed,
    /// A transient error; the controller is retrying.
    Retrying,
    /// Not known, not evaluated yet, or being worked on.
    Waiting,
}

impl Pip {
    /// The pip of condition `c` (absent: not evaluated) of a migration in `phase`.
    pub fn of(c: Option<&Condition>, phase: Phase) -> Pip {
        let Some(c) = c else { return Pip::Waiting };
        match c.status {
            ConditionStatus::True => Pip::Done,
            ConditionStatus::Unknown => Pip::Waiting,
            ConditionStatus::False if phase.is_terminal() => Pip::Failed,
            ConditionStatus::False => Pip::of_false(c.reason),
        }
    }

    /// The pip of a False condition with `reason`, of a migration still under way.
    fn of_false(reason: Reason) -> Pip {
        match reason {
            // Ready (and the conditions of later checkpoints) say False while the
            // migration is simply under way, held, paused or resuming.
            Reason::NotStarted
            | Reason::InProgress
            | Reason::HeldByWave
            | Reason::OutsideWindow
            | Reason::HostCopyLimit
            | Reason::DatastoreCopyLimit
            | Reason::WaitingForCutover
            | Reason::Paused
            | Reason::HealthChecking
            | Reason::HookRunning
            | Reason::RetryRequested
            | Reason::Cancelling => Pip::Waiting,
            Reason::TransientError
            | Reason::APIRefused
            | Reason::AdmissionDenied
            | Reason::QuotaExceeded
            | Reason::PoliciesNotInForce => Pip::Retrying,
            // Every other reason on a False condition is a failure of that checkpoint
            // (listed: a new reason must be placed here, it is not red by default).
            Reason::Discovered
            | Reason::SecretNotFound
            | Reason::LoginFailed
            | Reason::EndpointUnreachable
            | Reason::ThumbprintMismatch
            | Reason::VMNotFound
            | Reason::VMAmbiguous
            | Reason::Validated
            | Reason::PreflightFailed
            | Reason::UnsupportedDiskLayout
            | Reason::SourcePoweredOn
            | Reason::SourceChanged
            | Reason::CutOver
            | Reason::CutoverFailed
            | Reason::SnapshotFailed
            | Reason::PowerOffFailed
            | Reason::TargetNameTaken
            | Reason::CredentialsNotAllowed
            | Reason::CredentialsMismatch
            | Reason::TargetConflict
            | Reason::Converted
            | Reason::ConversionFailed
            | Reason::GuestConverted
            | Reason::GuestNeedsNoConversion
            | Reason::GuestConversionFailed
            | Reason::StagingUnavailable
            | Reason::BucketNotFound
            | Reason::ChecksumMismatch
            | Reason::ConverterImageNotAllowed
            | Reason::Imported
            | Reason::ImportFailed
            | Reason::VMCreated
            | Reason::VMCreateFailed
            | Reason::VMRunning
            | Reason::VMStartFailed
            | Reason::GuestAgentConnected
            | Reason::GuestAgentTimeout
            | Reason::GuestNotReady
            | Reason::ErrorUnschedulable
            | Reason::ErrorPvcNotFound
            | Reason::DataVolumeError
            | Reason::CrashLoopBackOff
            | Reason::ErrImagePull
            | Reason::ImagePullBackOff
            | Reason::VMReady
            | Reason::NotChecked
            | Reason::HookFailed
            | Reason::HealthCheckPassed
            | Reason::HealthCheckFailed
            | Reason::RolledBack
            | Reason::NameCollision
            | Reason::SelectorTooBroad
            | Reason::Succeeded
            | Reason::Failed
            | Reason::Cancelled
            | Reason::TargetStillRunning
            | Reason::CleanupBlocked => Pip::Failed,
        }
    }

    /// One letter, for `ferry board --once`: `T` done, `F` failed, `R` retrying, `-` waiting.
    pub fn letter(self) -> char {
        match self {
            Pip::Done => 'T',
            Pip::Failed => 'F',
            Pip::Retrying => 'R',
            Pip::Waiting => '-',
        }
    }
}

/// One stay in a phase as `status.history` records it, in seconds since the epoch: what the
/// timeline draws of every row (the history's attempts are the details view's, read whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The phase.
    pub phase: Phase,
    /// Entered.
    pub entered: i64,
    /// Left; `None` while in it (or, for a terminal phase, for good).
    pub left: Option<i64>,
}

/// A migration as the board sees it: no object (see the module's doc), only what the board,
/// its lists and its verbs read.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Namespace and name.
    pub key: ObjKey,
    /// The wave label, if any.
    pub wave: Option<String>,
    /// `status.phase` (`Pending` without a status).
    pub phase: Phase,
    /// `status.progress.percent`.
    pub percent: Option<f64>,
    /// `status.progress.rateBytesPerSecond`.
    pub rate: Option<i64>,
    /// The eight conditions in seed order but `CutOver` and `GuestConverted` (their phases show
    /// them), as
    /// their statuses (absent ones are `Unknown`).
    pub conditions: [ConditionStatus; 8],
    /// The eight conditions as a person should read them (see [`Pip::of`]).
    pub pips: [Pip; 8],
    /// `status.attempts`.
    pub attempt: i32,
    /// When the current phase was entered (history, else startedAt, else creation).
    pub phase_since: Option<Timestamp>,
    /// `status.completedAt`.
    pub completed_at: Option<Timestamp>,
    /// Last failure, else what holds it in preflight, else the status message, else the latest
    /// condition message.
    pub message: String,
    /// The first Critical concern that holds it in Pending, when preflight holds it
    /// ([`VirtualMachineMigration::held_by_preflight`]): the board says `Blocked` and names it.
    pub held_by: Option<ConcernCode>,
    /// `spec.cancel`.
    pub cancel: bool,
    /// `spec.paused`.
    pub paused: bool,
    /// `spec.retry`.
    pub retry: i64,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// A warm migration's `spec.warm.cutover` (asked for); `None` for a cold one. The cutover
    /// verb and its pending marker read it.
    pub cutover: Option<bool>,
    /// `metadata.resourceVersion`: the retry verb's patch is conditional on it (two operators
    /// pressing `r` at once raise the token once), and the frame log records it.
    pub resource_version: String,
    /// `status.progress.bytesDone` (0 without progress): what "stuck" is measured by.
    pub bytes_done: i64,
    /// `status.lastFailure`'s reason and time, when it has one.
    pub failure: Option<(Reason, Timestamp)>,
    /// The line the problems view groups it by ([`problems::line_of`]); empty in a phase that
    /// is never a problem.
    pub problem_line: Box<str>,
    /// `status.history`, as the timeline draws it.
    pub history: Box<[Step]>,
    /// Its last preflight, if one ran: the preflight view lists every row's concerns with their
    /// messages, and `board --once` prints them.
    pub preflight: Option<Box<PreflightStatus>>,
}

impl Row {
    /// The row of a (trimmed) migration of `cluster`; the object is dropped.
    pub fn from_object(cluster: ClusterId, obj: VirtualMachineMigration) -> Row {
        Row::of(cluster, &obj)
    }

    /// The row of a (trimmed) migration of `cluster`, the object left to the caller.
    pub fn of(cluster: ClusterId, obj: &VirtualMachineMigration) -> Row {
        let key = ObjKey::at(cluster, obj.namespace().unwrap_or_default(), obj.name_any());
        let status = obj.status.as_ref();
        let phase = obj.phase();
        let mut conditions = [ConditionStatus::Unknown; 8];
        let mut pips = [Pip::Waiting; 8];
        // Eight pips: every condition but a warm migration's CutOver and a converted guest's
        // GuestConverted, which their phases show (the details list them).
        let board = ConditionType::ALL.into_iter().filter(|t| t.on_the_board());
        for ((st, pip), t) in conditions.iter_mut().zip(pips.iter_mut()).zip(board) {
            let c = obj.condition(t);
            if let Some(c) = c {
                *st = c.status;
            }
            *pip = Pip::of(c, phase);
        }
        let progress = status.and_then(|s| s.progress.as_ref());
        let phase_since = phase_since(obj, phase);
        let message = message_of(obj);
        Row {
            problem_line: problems::line_of(obj, &key.name, phase, &message).into(),
            key,
            wave: obj.wave().map(str::to_owned),
            phase,
            percent: progress.map(|p| p.percent),
            rate: progress.and_then(|p| p.rate_bytes_per_second),
            conditions,
            pips,
            attempt: status.map_or(0, |s| s.attempts),
            phase_since,
            completed_at: status.and_then(|s| s.completed_at.as_ref()).map(|t| t.0),
            message,
            held_by: held_by(obj),
            cancel: obj.spec.cancel,
            paused: obj.spec.paused,
            retry: obj.spec.retry,
            deleting: obj.metadata.deletion_timestamp.is_some(),
            cutover: match obj.spec.mode {
                MigrationMode::Warm => Some(obj.spec.warm.as_ref().is_some_and(|w| w.cutover)),
                MigrationMode::Cold => None,
            },
            resource_version: obj.metadata.resource_version.clone().unwrap_or_default(),
            bytes_done: progress.map_or(0, |p| p.bytes_done),
            failure: status
                .and_then(|s| s.last_failure.as_ref())
                .map(|f| (f.reason, f.time.0)),
            history: status
                .map(|s| {
                    s.history
                        .iter()
                        .map(|h| Step {
                            phase: h.phase,
                            entered: h.entered_at.0.as_second(),
                            left: h.left_at.as_ref().map(|t| t.0.as_second()),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            preflight: status.and_then(|s| s.preflight.clone()).map(Box::new),
        }
    }

    /// Its last preflight, if one ran.
    pub fn preflight(&self) -> Option<&PreflightStatus> {
        self.preflight.as_deref()
    }
}

/// Since when the migration is in `phase`: its entry in the history, else (finished) its
/// completion, its start or its creation, whichever it has.
fn phase_since(obj: &VirtualMachineMigration, phase: Phase) -> Option<Timestamp> {
    let status = obj.status.as_ref();
    status
        .and_then(|s| {
            s.history
                .last()
                .filter(|h| h.phase == phase && h.left_at.is_none())
        })
        .map(|h| h.entered_at.0)
        .or_else(|| {
            if phase.is_terminal() {
                status.and_then(|s| s.completed_at.as_ref()).map(|t| t.0)
            } else {
                None
            }
        })
        .or_else(|| status.and_then(|s| s.started_at.as_ref()).map(|t| t.0))
        .or_else(|| obj.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The first Critical concern that holds `obj` in Pending, when preflight holds it.
fn held_by(obj: &VirtualMachineMigration) -> Option<ConcernCode> {
    if !obj.held_by_preflight() {
        return None;
    }
    let p = obj.status.as_ref()?.preflight.as_ref()?;
    p.blocking().next().map(|c| c.code)
}

/// The one line a person wants to read: why its deletion is stuck, else why it failed, else
/// what holds it in preflight, else what it is doing.
fn message_of(obj: &VirtualMachineMigration) -> String {
    let Some(status) = obj.status.as_ref() else {
        return String::new();
    };
    if obj.metadata.deletion_timestamp.is_some()
        && let Some(c) = obj
            .condition(ferry_crds::ConditionType::Ready)
            .filter(|c| c.reason == ferry_crds::Reason::CleanupBlocked)
    {
        return one_line(&format!("{}: {}", c.reason.as_str(), c.message));
    }
    if let Some(f) = status
        .last_failure
        .as_ref()
        .filter(|_| status.phase == Phase::Failed)
    {
        // The cause first: it is what a narrow MESSAGE column has room for.
        return one_line(&match f.cause.as_deref() {
            Some(cause) => format!("{cause} ({}): {}", f.reason.as_str(), f.message),
            None => format!("{}: {}", f.reason.as_str(), f.message),
        });
    }
    // The controller's own message names every blocker after a preamble; the board leads
    // with the first one's code, which is what fits a narrow MESSAGE column.
    if obj.held_by_preflight()
        && let Some(p) = status.preflight.as_ref()
    {
        let mut blocking = p.blocking();
        if let Some(first) = blocking.next() {
            let more = blocking.count();
            return one_line(&strings::board::held(
                first.code.as_str(),
                more,
                &first.message,
            ));
        }
    }
    if let Some(m) = status.message.as_deref().filter(|m| !m.is_empty()) {
        return one_line(m);
    }
    status
        .conditions
        .iter()
        .filter(|c| !c.message.is_empty())
        .max_by_key(|c| c.last_transition_time.0)
        .map(|c| one_line(&c.message))
        .unwrap_or_default()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
