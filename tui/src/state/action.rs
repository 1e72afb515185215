//! Everything that can change the state ([`Action`]) and every I/O the state asks for
//! ([`Effect`]).

use std::sync::Arc;

use ferry_crds::{MigrationWave, VirtualMachineMigration};

use super::{
    ClusterId, ClusterView, ObjKey, Timestamp,
    access::Check,
    conn::{ConnState, Resource},
    events::EventRow,
    layout::Screen,
    podlogs::{JobRef, PodInfo},
};

pub use crate::verb::{Outcome, Verb};

/// Kind of object acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetKind {
    /// A `VirtualMachineMigration`.
    Migration,
    /// A `MigrationWave` (its intents reach every migration of the wave).
    Wave,
}

/// One object acted on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// Its kind.
    pub kind: TargetKind,
    /// Its namespace and name.
    pub key: ObjKey,
}

/// A child object of a migration, read on demand.
#[derive(Clone, Debug, PartialEq)]
pub struct Child {
    /// `Job`, `DataVolume`, `VirtualMachine` or `VirtualMachineInstance`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its state in a few words (e.g. `ImportInProgress 45.2%`), `absent` when not found.
    pub state: String,
}

/// Where the operator wants the watches to look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One namespace.
    Namespace(String),
    /// Every namespace (`-A`).
    All,
}

impl Scope {
    /// The one namespace, if not all.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::Namespace(n) => Some(n),
            Scope::All => None,
        }
    }
}

/// Cursor movement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nav {
    /// One up.
    Up,
    /// One down.
    Down,
    /// A page up.
    PageUp,
    /// A page down.
    PageDown,
    /// First.
    Top,
    /// Last.
    Bottom,
}

/// Editing the filter or command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Type a character.
    Char(char),
    /// Delete the character before the cursor.
    Backspace,
    /// Clear the line.
    Clear,
}

/// Every change to the state.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    // --- from the watches (of one cluster each) ---
    /// A migration was added or changed.
    MigrationApplied(ClusterId, Box<VirtualMachineMigration>),
    /// A migration is gone.
    MigrationDeleted(ObjKey),
    /// A (re-)list of every migration in a cluster's scope finished: their rows, each made as
    /// its object arrived (a list of 10,000 never sits in memory as objects and rows at once).
    MigrationsListed(ClusterId, Vec<super::Row>),
    /// The first rows of a (re-)list still under way, shown at once; the finished list
    /// ([`Action::MigrationsListed`]) replaces them.
    MigrationsArriving(ClusterId, Vec<super::Row>),
    /// A wave was added or changed.
    WaveApplied(ClusterId, Box<MigrationWave>),
    /// A wave is gone.
    WaveDeleted(ObjKey),
    /// A (re-)list of every wave of a cluster finished.
    WavesListed(ClusterId, Vec<MigrationWave>),
    /// An event about one of our objects arrived.
    EventApplied(EventRow),
    /// An event is gone.
    EventDeleted(EventRow),
    /// A (re-)list of a cluster's events finished.
    EventsListed(ClusterId, Vec<EventRow>),
    /// A watch of a cluster changed state.
    Connection(ClusterId, Resource, ConnState),
    // --- from effects ---
    /// What the API server said to one request of action `id`.
    Outcome {
        /// The action the request belongs to.
        id: u64,
        /// The object.
        target: Target,
        /// The answer.
        outcome: Outcome,
    },
    /// What the API server answered about what the user may do in a namespace
    /// ([`Effect::ReviewAccess`]).
    AccessReviewed {
        /// The cluster.
        cluster: ClusterId,
        /// The namespace.
        namespace: String,
        /// The generation the question was asked in (see [`super::Access`]).
        generation: u64,
        /// Each check, allowed or not, or why the review failed.
        answers: Vec<(Check, Result<bool, String>)>,
    },
    /// Children of a migration were read.
    Children {
        /// The migration.
        key: ObjKey,
        /// Its children, or why they could not be read.
        result: Result<Vec<Child>, String>,
    },
    /// A migration was read whole for the YAML view.
    Whole {
        /// The migration.
        key: ObjKey,
        /// Its YAML, or why it could not be read.
        result: Result<String, String>,
    },
    /// A migration was read for the details view (trimmed as the watch trims it).
    MigrationRead {
        /// The migration.
        key: ObjKey,
        /// It, or why it could not be read.
        result: Result<Box<VirtualMachineMigration>, String>,
    },
    /// The pods of a migration's Jobs and importers were listed for the pod logs view.
    PodsFound {
        /// The migration.
        key: ObjKey,
        /// Its Jobs as its `status.children` records them, and the pods found (filtered
        /// again by the state: only a recorded Job's uid makes a pod its own), or why not.
        result: Result<(Vec<JobRef>, Vec<PodInfo>), String>,
    },
    /// Lines of the log stream `session` arrived.
    LogLines {
        /// The stream (see [`crate::state::podlogs::PodLogs::session`]).
        session: u64,
        /// The lines, without their newline.
        lines: Vec<String>,
    },
    /// The log stream `session` ended (`Ok`) or could not go on (`Err`: why, in the
    /// operator's words).
    LogEnded {
        /// The stream.
        session: u64,
        /// How it ended.
        result: Result<(), String>,
    },
    /// The contexts changed (`:ctx a,b`); each watched in its default namespace.
    ContextSwitched(Vec<ClusterView>),
    /// `:ctx` failed.
    ContextFailed(String),
    // --- time and screen ---
    /// The clock moved (once a second, and before every batch of actions).
    Tick(Timestamp),
    /// The terminal has this size (at start and on every resize).
    Resize(Screen),
    // --- from the operator ---
    /// Move the cursor (or scroll a view).
    Nav(Nav),
    /// Open the details of the selected migration (or, on the wave strip, show that wave).
    Enter,
    /// Back out of a view, popup, input or filter.
    Back,
    /// Move focus between the board and the wave strip.
    FocusNext,
    /// Start typing a filter.
    StartFilter,
    /// Start typing a command.
    StartCommand,
    /// Edit the filter or command line.
    Edit(Edit),
    /// Submit the filter or command line.
    Submit,
    /// Run a `:` command line (without the colon), as if typed.
    Command(String),
    /// Next sort column.
    CycleSort,
    /// Reverse the sort.
    ReverseSort,
    /// Open the wave picker.
    PickWave,
    /// Open the timeline of the migrations on the board.
    ShowTimeline,
    /// Open the preflight view: the concerns of the migrations on the board, grouped.
    ShowPreflight,
    /// Open the problems view: the failed and stuck migrations on the board, grouped.
    ShowProblems,
    /// Mark or unmark the selected row.
    ToggleMark,
    /// Mark every visible row (or unmark all when all are marked).
    MarkAllVisible,
    /// Ask for a mutation on the selection, the marks or the selected wave.
    Request(Verb),
    /// `p`: pause, or resume when everything targeted is paused.
    TogglePause,
    /// Answer yes in the confirm dialog.
    Confirm,
    /// Show the YAML of the selected object.
    ShowYaml,
    /// Show the events of the selected object.
    ShowEvents,
    /// Show the logs of the selected migration's pods (its Jobs', its importers').
    ShowPodLogs,
    /// In the pod logs view, the next pod.
    NextPod,
    /// In the pod logs view, the previous pod.
    PrevPod,
    /// In the pod logs view, read the chosen pod's log again and follow it (after it ended or
    /// failed, or to catch up).
    FollowAgain,
    /// In details, select the next message (the one the copy key takes).
    NextMessage,
    /// Copy the selected message whole to the terminal's clipboard (OSC 52): in details the
    /// selected one, on the board the selected row's.
    CopyMessage,
    /// Show or hide the log pane.
    ToggleLogs,
    /// Show or hide help.
    ToggleHelp,
    /// Leave.
    Quit,
}

impl Action {
    /// A finished list of `objs` in `cluster`, made into rows.
    pub fn migrations_listed(cluster: ClusterId, objs: Vec<VirtualMachineMigration>) -> Action {
        Action::MigrationsListed(
            cluster,
            objs.into_iter()
                .map(|o| super::Row::from_object(cluster, o))
                .collect(),
        )
    }
}

/// I/O the state asks for; the app runs it and reports back with actions.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// A JSON merge patch.
    Patch {
        /// The action this request belongs to.
        id: u64,
        /// The object.
        target: Target,
        /// The merge patch body.
        patch: serde_json::Value,
    },
    /// A delete.
    Delete {
        /// The action this request belongs to.
        id: u64,
        /// The object.
        target: Target,
    },
    /// Ask the API server what the user may do in `namespace` (`SelfSubjectAccessReview`s,
    /// as the user the client acts as, `--as` included); the answer comes back as
    /// [`Action::AccessReviewed`].
    ReviewAccess {
        /// The cluster.
        cluster: ClusterId,
        /// The namespace.
        namespace: String,
        /// Handed back with the answer.
        generation: u64,
    },
    /// Read the children of a migration (in the cluster of `key`).
    FetchChildren {
        /// The migration.
        key: ObjKey,
        /// As the details view last had it.
        obj: Arc<VirtualMachineMigration>,
    },
    /// Read a migration whole, for the YAML view (in the cluster of `key`).
    FetchWhole {
        /// The migration.
        key: ObjKey,
    },
    /// Read a migration, for the details view (in the cluster of `key`).
    FetchMigration {
        /// The migration.
        key: ObjKey,
    },
    /// List the pods of a migration's Jobs and importers (in the cluster of `key`).
    FetchPods {
        /// The migration.
        key: ObjKey,
    },
    /// Read container `container` of pod `pod` (in the cluster and namespace of `key`): its
    /// last lines, then follow it; lines and the end come back tagged with `session`. A new
    /// one replaces the stream before it.
    FollowLog {
        /// The migration whose pod it is.
        key: ObjKey,
        /// Tags what comes back.
        session: u64,
        /// The pod.
        pod: String,
        /// Its container.
        container: String,
    },
    /// Stop reading any log (the view was left).
    StopLog,
    /// Restart the watches of every cluster on a new scope.
    Rewatch(Scope),
    /// Switch to these kubeconfig contexts (one or more).
    SwitchContexts(Vec<String>),
    /// Put this text on the terminal's clipboard (OSC 52, as k9s does): the terminal, or the
    /// tmux or ssh in between, decides whether to take it.
    Copy(String),
    /// Leave the app.
    Quit,
}
