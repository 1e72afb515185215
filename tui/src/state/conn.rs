//! Connection state of each watched resource, and what the header makes of them.

use super::Timestamp;

/// A watched resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// `VirtualMachineMigration`.
    Migrations,
    /// `MigrationWave`.
    Waves,
    /// events.k8s.io `Event`.
    Events,
}

impl Resource {
    /// Every watched resource.
    pub const ALL: [Resource; 3] = [Resource::Migrations, Resource::Waves, Resource::Events];

    /// Plural, as people say it.
    pub fn plural(self) -> &'static str {
        match self {
            Resource::Migrations => "migrations",
            Resource::Waves => "waves",
            Resource::Events => "events",
        }
    }
}

/// Where the watch of one resource stands.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ConnState {
    /// Not listed yet.
    #[default]
    Connecting,
    /// A (re-)list is under way; the last known objects stay shown.
    Listing,
    /// Listed and watching.
    Live,
    /// The watch failed; the next try is at `retry_at`.
    Reconnecting {
        /// When the next try starts.
        retry_at: Timestamp,
        /// Failed tries in a row.
        attempt: u32,
        /// The last error, one line.
        error: String,
    },
    /// RBAC refuses to list or watch.
    Forbidden(String),
    /// The resource is not served: the CRD is not installed.
    CrdMissing,
}

impl ConnState {
    /// Whether the objects shown are current.
    pub fn is_live(&self) -> bool {
        matches!(self, ConnState::Live)
    }

    /// How bad it is, for picking what the header shows (higher is worse).
    pub fn severity(&self) -> u8 {
        match self {
            ConnState::Live => 0,
            ConnState::Listing => 1,
            ConnState::Connecting => 2,
            ConnState::Reconnecting { .. } => 3,
            ConnState::Forbidden(_) => 4,
            ConnState::CrdMissing => 5,
        }
    }
}

/// Connection state of every resource, plus when the board went stale.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Connection {
    /// Migrations watch.
    pub migrations: ConnState,
    /// Waves watch.
    pub waves: ConnState,
    /// Events watch.
    pub events: ConnState,
    /// Since when the migrations shown may be out of date (set when a live watch fails).
    pub stale_since: Option<Timestamp>,
    /// Whether the migrations were ever listed (before that, nothing is "stale", only empty).
    pub ever_listed: bool,
    /// When the last watch event arrived.
    pub last_event_at: Option<Timestamp>,
}

impl Connection {
    /// The state of one resource.
    pub fn get(&self, r: Resource) -> &ConnState {
        match r {
            Resource::Migrations => &self.migrations,
            Resource::Waves => &self.waves,
            Resource::Events => &self.events,
        }
    }

    /// Sets the state of one resource, tracking staleness of the board.
    pub fn set(&mut self, r: Resource, state: ConnState, now: Timestamp) {
        if r == Resource::Migrations {
            match &state {
                ConnState::Live => {
                    self.stale_since = None;
                    self.ever_listed = true;
                }
                ConnState::Listing | ConnState::Connecting => {}
                _ => {
                    if self.ever_listed && self.stale_since.is_none() {
                        self.stale_since = Some(now);
                    }
                }
            }
        }
        match r {
            Resource::Migrations => self.migrations = state,
            Resource::Waves => self.waves = state,
            Resource::Events => self.events = state,
        }
    }

    /// The resource in the worst state, and that state. Events count less: a board without
    /// events is still a good board.
    pub fn worst(&self) -> (Resource, &ConnState) {
        let mut worst = (Resource::Migrations, &self.migrations);
        for r in [Resource::Waves, Resource::Events] {
            let s = self.get(r);
            if s.severity() > worst.1.severity() {
                worst = (r, s);
            }
        }
        worst
    }

    /// The board shows objects that may be out of date.
    pub fn is_stale(&self) -> bool {
        self.stale_since.is_some()
    }
}
