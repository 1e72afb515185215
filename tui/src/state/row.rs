//! One board row: the few fields of a `VirtualMachineMigration` the board shows, computed once
//! per watch event so that drawing and sorting never walk the object again.

use std::sync::Arc;

use ferry_crds::{
    ConcernCode, Condition, ConditionStatus, ConditionType, Phase, PreflightStatus, Reason,
    VirtualMachineMigration,
};
use kube::ResourceExt;

use super::{ClusterId, ObjKey, Timestamp};
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
            ConditionStatus::False => match c.reason {
                // Ready (and the conditions of later checkpoints) say False while the
                // migration is simply under way, held, paused or resuming.
                Reason::NotStarted
                | Reason::InProgress
                | Reason::HeldByWave
                | Reason::WaitingForCutover
                | Reason::Paused
                | Reason::RetryRequested
                | Reason::Cancelling => Pip::Waiting,
                Reason::TransientError => Pip::Retrying,
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
                | Reason::ErrorUnschedulable
                | Reason::ErrorPvcNotFound
                | Reason::DataVolumeError
                | Reason::CrashLoopBackOff
                | Reason::ErrImagePull
                | Reason::ImagePullBackOff
                | Reason::VMReady
                | Reason::NotChecked
                | Reason::NameCollision
                | Reason::SelectorTooBroad
                | Reason::Succeeded
                | Reason::Failed
                | Reason::Cancelled
                | Reason::TargetStillRunning
                | Reason::CleanupBlocked => Pip::Failed,
            },
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

/// A migration as the board sees it. `obj` is the trimmed object, kept for details and YAML.
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
    /// The eight conditions in seed order but `CutOver` (a warm migration's phase shows it), as
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
    /// The trimmed object.
    pub obj: Arc<VirtualMachineMigration>,
}

impl Row {
    /// The row of a (trimmed) migration of `cluster`.
    pub fn from_object(cluster: ClusterId, obj: VirtualMachineMigration) -> Row {
        let key = ObjKey::at(cluster, obj.namespace().unwrap_or_default(), obj.name_any());
        let status = obj.status.as_ref();
        let phase = obj.phase();
        let mut conditions = [ConditionStatus::Unknown; 8];
        let mut pips = [Pip::Waiting; 8];
        // Eight pips: every condition but a warm migration's CutOver, which its phase shows.
        let board = ConditionType::ALL
            .into_iter()
            .filter(|t| *t != ConditionType::CutOver);
        for ((st, pip), t) in conditions.iter_mut().zip(pips.iter_mut()).zip(board) {
            let c = obj.condition(t);
            if let Some(c) = c {
                *st = c.status;
            }
            *pip = Pip::of(c, phase);
        }
        let progress = status.and_then(|s| s.progress.as_ref());
        let phase_since = status
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
            .or_else(|| obj.metadata.creation_timestamp.as_ref().map(|t| t.0));
        Row {
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
            message: message_of(&obj),
            held_by: held_by(&obj),
            cancel: obj.spec.cancel,
            paused: obj.spec.paused,
            retry: obj.spec.retry,
            deleting: obj.metadata.deletion_timestamp.is_some(),
            obj: Arc::new(obj),
        }
    }

    /// Its last preflight, if one ran.
    pub fn preflight(&self) -> Option<&PreflightStatus> {
        self.obj.status.as_ref()?.preflight.as_ref()
    }
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
        return one_line(&format!("{}: {}", f.reason.as_str(), f.message));
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
