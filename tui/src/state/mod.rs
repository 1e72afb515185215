//! The whole cockpit state. It changes only through [`update`], a pure function from an
//! [`Action`] to the [`Effect`]s (I/O) it asks for; nothing here draws or talks to the cluster.

pub mod access;
pub mod action;
pub mod conn;
pub mod events;
pub mod filter;
pub mod index;
pub mod layout;
pub mod messages;
pub mod podlogs;
pub mod preflight;
pub mod problems;
pub mod row;
pub mod stamp;
pub mod timeline;
mod update;
pub mod wave;

#[cfg(test)]
mod tests;

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::Arc,
};

use ferry_crds::VirtualMachineMigration;

use crate::strings;

pub use access::{Access, Check, Refusal};
pub use action::{Action, Child, Edit, Effect, Nav, Outcome, Scope, Target, TargetKind, Verb};
pub use conn::{ConnState, Connection, Resource};
pub use events::{EventKind, EventRow, EventStore};
pub use filter::Filter;
pub use index::{Index, Sort, SortKey, WaveScope};
pub use layout::Screen;
pub use preflight::GroupKey;
pub use row::{Pip, Row, Step};
pub use stamp::Stamp;
pub use update::{execute, plan, refusal, refusal_text, update};
pub use wave::{Refused, WarmWave, WaveCutover, WaveRow};

/// Instants, as the Kubernetes types carry them.
pub type Timestamp = k8s_openapi::jiff::Timestamp;

/// Which cluster (kubeconfig context) of the board an object lives in: its position in
/// [`State::clusters`], the order of `--context a,b`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterId(pub u16);

/// Cluster, namespace and name of an object: two clusters may hold the same namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// The cluster.
    pub cluster: ClusterId,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjKey {
    /// A key in the first (or only) cluster.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjKey {
        ObjKey::at(ClusterId::default(), namespace, name)
    }

    /// A key in `cluster`.
    pub fn at(cluster: ClusterId, namespace: impl Into<String>, name: impl Into<String>) -> ObjKey {
        ObjKey {
            cluster,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// One cluster on the board: its context, the namespaces its watches look at, their state.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterView {
    /// kubeconfig context name.
    pub context: String,
    /// Namespace scope of its watches.
    pub scope: Scope,
    /// Its watches' states.
    pub conn: Connection,
}

impl ClusterView {
    /// A cluster not connected yet.
    pub fn new(context: impl Into<String>, scope: Scope) -> ClusterView {
        ClusterView {
            context: context.into(),
            scope,
            conn: Connection::default(),
        }
    }
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Which part of the main screen takes the keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Focus {
    /// The board of migrations.
    #[default]
    Board,
    /// The wave strip: actions go to the selected `MigrationWave`.
    Waves,
}

/// A full-screen view over the board.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum View {
    /// Details of a migration.
    Details(ObjKey),
    /// YAML of an object.
    Yaml(Target),
    /// Events of an object.
    Events(Target),
    /// Phases over time of the migrations on the board.
    Timeline,
    /// Preflight's concerns about the migrations on the board, grouped by code and severity,
    /// with the group under the cursor (`None`: the first).
    Preflight(Option<GroupKey>),
    /// The migrations on the board with one concern, each with its message.
    PreflightGroup(GroupKey),
    /// The failed and stuck migrations on the board, grouped by cause and message, with the
    /// group under the cursor (`None`: the first).
    Problems(Option<problems::ProblemKey>),
    /// The logs of a migration's pods.
    PodLogs(ObjKey),
}

/// The line being typed at the bottom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// Filter (`/`) or command (`:`).
    pub kind: InputKind,
    /// What was typed so far.
    pub text: String,
}

/// What the bottom line is typing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// `/` filter, applied as it is typed.
    Filter,
    /// `:` command, run on Enter.
    Command,
}

/// A mutation waiting for the operator's yes.
#[derive(Clone, Debug, PartialEq)]
pub struct Confirm {
    /// What.
    pub verb: Verb,
    /// On what.
    pub targets: Vec<Target>,
    /// Targets left out because the verb does not apply to them, with why.
    pub skipped: Vec<(Target, &'static str)>,
}

/// The per-object outcome of the last mutation.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The action id.
    pub id: u64,
    /// What was asked.
    pub verb: Verb,
    /// Each object and its answer (`None` while waiting).
    pub entries: Vec<(Target, Option<Outcome>)>,
}

impl Report {
    /// Whether every request has been answered.
    pub fn is_complete(&self) -> bool {
        self.entries.iter().all(|(_, o)| o.is_some())
    }

    /// One line: `cancel: 2 applied, 1 forbidden`.
    pub fn summary(&self) -> String {
        let mut counts: Vec<(&'static str, usize)> = vec![];
        for (_, o) in &self.entries {
            let label = strings::outcome_word(o.as_ref());
            match counts.iter_mut().find(|(l, _)| *l == label) {
                Some((_, n)) => *n += 1,
                None => counts.push((label, 1)),
            }
        }
        let parts: Vec<String> = counts.iter().map(|(l, n)| format!("{n} {l}")).collect();
        format!("{}: {}", self.verb.as_str(), parts.join(", "))
    }
}

/// A popup over the screen.
#[derive(Clone, Debug, PartialEq)]
pub enum Popup {
    /// Asks before a mutation.
    Confirm(Confirm),
    /// Shows the per-object outcome of the last mutation.
    Report,
    /// The key map.
    Help,
    /// The waves with their progress; Enter shows one (line 0: every wave).
    WavePicker {
        /// The selected line.
        cursor: usize,
    },
    /// What to try first (`--welcome`), with a note from whoever started the cockpit; `q`
    /// quits, any other key closes it.
    Welcome {
        /// A line about this board (the demo says what it injected), may be empty.
        note: String,
    },
}

/// What a pending action waits to see from the watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// `spec.cancel` true.
    Cancel,
    /// `spec.paused` equal to this.
    Paused(bool),
    /// `spec.retry` at least this.
    RetryAtLeast(i64),
    /// The object gone or being deleted.
    Gone,
    /// `spec.warm.cutover` true.
    Cutover,
}

/// A row's pending marker: a request was sent and the watch has not shown its effect yet.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    /// What was asked.
    pub verb: Verb,
    /// What ends it.
    pub expect: Expect,
    /// When it was sent.
    pub since: Timestamp,
}

/// Children of the migration shown in details.
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    /// Whose.
    pub key: ObjKey,
    /// When they were asked for.
    pub asked_at: Timestamp,
    /// `None` while loading.
    pub result: Option<Result<Vec<Child>, String>>,
}

/// The whole migration shown in the YAML view, read from the API (the board keeps a cut-down
/// copy: see `kube::watch::trim_migration`).
#[derive(Clone, Debug, PartialEq)]
pub struct Whole {
    /// Whose.
    pub key: ObjKey,
    /// When it was asked for.
    pub asked_at: Timestamp,
    /// Its YAML, or why it could not be read; `None` while the first read is under way (a
    /// re-read keeps the last answer until the next arrives).
    pub result: Option<Result<String, String>>,
}

/// The migration the details view shows, as the watch cuts it: the one object the cockpit keeps
/// (rows keep none: at 10,000 migrations their objects were most of its memory, issue #30).
/// Read from the API when the view opens and after a re-list (whose objects are not kept),
/// then replaced by each watch event about it while the view is open.
#[derive(Clone, Debug, PartialEq)]
pub struct Opened {
    /// Whose.
    pub key: ObjKey,
    /// Whether a read is under way whose answer is wanted: a watch event that arrives first
    /// makes it unwanted (the watch's copy is as new as the read's, and it keeps coming).
    pub reading: bool,
    /// The object, or why it could not be read; `None` until the first answer.
    pub result: Option<Result<Arc<VirtualMachineMigration>, String>>,
}

/// A one-line message at the bottom, for a few seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Flash {
    /// The text.
    pub text: String,
    /// Whether it reports a problem.
    pub error: bool,
    /// When it disappears.
    pub until: Timestamp,
}

/// The whole cockpit.
#[derive(Debug)]
pub struct State {
    /// The injected clock.
    pub now: Timestamp,
    /// The clusters on the board (one per `--context`), never empty.
    pub clusters: Vec<ClusterView>,
    /// `--readonly`: no mutation at all.
    pub readonly: bool,
    /// The migrations and the board view over them.
    pub index: Index,
    /// Waves in scope, by namespace and name.
    pub waves: Vec<WaveRow>,
    /// Events about our objects.
    pub events: EventStore,
    /// Board cursor (position in the visible rows).
    pub cursor: usize,
    /// First visible row on screen.
    pub offset: usize,
    /// The terminal's size, once the event loop reported it.
    pub screen: Option<Screen>,
    /// Rows a page of the board (or of the innermost view) holds; derived from `screen` by
    /// [`layout::page`] after every action.
    pub page: usize,
    /// Key of the row under the cursor, kept across re-sorts.
    pub selected: Option<ObjKey>,
    /// Marked rows.
    pub marks: HashSet<ObjKey>,
    /// Each migration's last progress as the watches showed it (what "stuck" is measured from).
    pub moved: HashMap<ObjKey, problems::Moved>,
    /// Board or wave strip.
    pub focus: Focus,
    /// Selected line of the wave strip.
    pub wave_cursor: usize,
    /// Views over the board, innermost last.
    pub views: Vec<View>,
    /// Scroll of the innermost view.
    pub scroll: usize,
    /// The message selected in the details view, which the copy key takes (`None`: its first).
    pub message: Option<messages::About>,
    /// A popup, if open.
    pub popup: Option<Popup>,
    /// The bottom input line, if typing.
    pub input: Option<Input>,
    /// Whether the log pane is shown.
    pub show_logs: bool,
    /// Rows waiting for the watch to show an action's effect.
    pub pending: HashMap<Target, Pending>,
    /// Outcome of the last mutation.
    pub report: Option<Report>,
    /// Children of the migration in details.
    pub children: Option<Children>,
    /// The whole migration of the YAML view.
    pub whole: Option<Whole>,
    /// The migration of the details view.
    pub opened: Option<Opened>,
    /// The pod logs view's pods and lines.
    pub podlogs: Option<podlogs::PodLogs>,
    /// Bottom-line message.
    pub flash: Option<Flash>,
    /// What the user may do, per namespace, as the API server answered.
    pub access: Access,
    /// Set by `q` / `:q`.
    pub quit: bool,
    next_id: u64,
}

impl State {
    /// The wave's forecast of the migration `row` (`status.forecast.vms` of its wave, as the
    /// wave strip holds it), while it has one.
    pub fn forecast_of(&self, row: &Row) -> Option<&ferry_crds::VmForecast> {
        let wave = row.wave.as_deref()?;
        let w = self.waves.iter().find(|w| {
            w.key.cluster == row.key.cluster
                && w.key.namespace == row.key.namespace
                && w.key.name == wave
        })?;
        w.obj
            .status
            .as_ref()?
            .forecast
            .as_ref()?
            .vms
            .iter()
            .find(|v| v.migration == row.key.name)
    }

    /// An empty cockpit on one cluster.
    pub fn new(context: impl Into<String>, scope: Scope, readonly: bool, now: Timestamp) -> State {
        State::with_clusters(vec![ClusterView::new(context, scope)], readonly, now)
    }

    /// An empty cockpit on several clusters (at least one).
    pub fn with_clusters(clusters: Vec<ClusterView>, readonly: bool, now: Timestamp) -> State {
        State {
            now,
            clusters,
            readonly,
            index: Index::default(),
            waves: vec![],
            events: EventStore::default(),
            cursor: 0,
            offset: 0,
            screen: None,
            page: 20,
            selected: None,
            marks: HashSet::new(),
            moved: HashMap::new(),
            focus: Focus::Board,
            wave_cursor: 0,
            views: vec![],
            scroll: 0,
            message: None,
            popup: None,
            input: None,
            show_logs: false,
            pending: HashMap::new(),
            report: None,
            children: None,
            whole: None,
            opened: None,
            podlogs: None,
            flash: None,
            access: Access::default(),
            quit: false,
            next_id: 1,
        }
    }

    /// Whether the NAMESPACE column is shown: some cluster is watched in every namespace.
    pub fn all_namespaces(&self) -> bool {
        self.clusters.iter().any(|c| c.scope == Scope::All)
    }

    /// Whether the board shows several clusters (and its CLUSTER column).
    pub fn multi_cluster(&self) -> bool {
        self.clusters.len() > 1
    }

    /// A row's name as a grouped view (preflight, problems) lists it: after its namespace when
    /// several are shown, after its context on a board of several clusters.
    pub fn listed_name(&self, r: &Row) -> String {
        let name = if self.all_namespaces() {
            format!("{}/{}", r.key.namespace, r.key.name)
        } else {
            r.key.name.clone()
        };
        if self.multi_cluster() {
            format!("{}/{name}", self.context_of(r.key.cluster))
        } else {
            name
        }
    }

    /// A cluster of the board; `None` for an id no cluster has (an action of an old context).
    pub fn cluster(&self, id: ClusterId) -> Option<&ClusterView> {
        self.clusters.get(usize::from(id.0))
    }

    /// The context name of a cluster.
    pub fn context_of(&self, id: ClusterId) -> &str {
        self.cluster(id).map_or("", |c| c.context.as_str())
    }

    /// Every cluster with its id.
    pub fn cluster_ids(&self) -> impl Iterator<Item = (ClusterId, &ClusterView)> {
        self.clusters
            .iter()
            .enumerate()
            .map(|(i, c)| (ClusterId(u16::try_from(i).unwrap_or(u16::MAX)), c))
    }

    /// Whether some cluster's board may be out of date.
    pub fn is_stale(&self) -> bool {
        self.clusters.iter().any(|c| c.conn.is_stale())
    }

    /// When the watches of any cluster last delivered something.
    pub fn last_event_at(&self) -> Option<Timestamp> {
        self.clusters
            .iter()
            .filter_map(|c| c.conn.last_event_at)
            .max()
    }

    /// The row under the cursor.
    pub fn selected_row(&self) -> Option<&Row> {
        self.selected.as_ref().and_then(|k| self.index.get(k))
    }

    /// The details view's copy of migration `key`, once read (see [`Opened`]).
    pub fn opened(&self, key: &ObjKey) -> Option<&VirtualMachineMigration> {
        match self
            .opened
            .as_ref()
            .filter(|o| o.key == *key)?
            .result
            .as_ref()?
        {
            Ok(o) => Some(o),
            Err(_) => None,
        }
    }

    /// The wave the strip's sparkline is about: the scoped wave, else the strip's cursor.
    pub fn selected_wave(&self) -> Option<&WaveRow> {
        match self.index.wave_scope() {
            Some(w) => self.waves.iter().find(|r| w.covers(&r.key)),
            None => self.waves.get(self.wave_cursor),
        }
    }

    /// The pending marker of a migration, if any.
    pub fn pending_of(&self, key: &ObjKey) -> Option<&Pending> {
        if self.pending.is_empty() {
            return None;
        }
        self.pending.get(&Target {
            kind: TargetKind::Migration,
            key: key.clone(),
        })
    }

    /// The innermost view, if any.
    pub fn view(&self) -> Option<&View> {
        self.views.last()
    }
}
