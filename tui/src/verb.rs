//! The mutations the operator can ask for ([`Verb`]) and what the API server answered
//! ([`Outcome`]): plain data, shared by `state` (which plans and records them) and `strings`
//! (which words them). A leaf: it names nothing else of the crate.

/// A mutation the operator can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `spec.cancel: true`.
    Cancel,
    /// `spec.retry: n + 1`.
    Retry,
    /// `spec.paused: true`.
    Pause,
    /// `spec.paused: false`.
    Resume,
    /// Delete the object.
    Delete,
    /// `spec.warm.cutover: true` (warm migrations).
    Cutover,
}

impl Verb {
    /// The verb as a command word (`ferry cancel ...`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Cancel => "cancel",
            Verb::Retry => "retry",
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Delete => "delete",
            Verb::Cutover => "cutover",
        }
    }
}

/// What the API server said to one patch or delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted; the board changes when the watch delivers it.
    Applied,
    /// RBAC refused it.
    Forbidden(String),
    /// The object changed since it was read (retry uses the resourceVersion).
    Conflict,
    /// The object is gone.
    NotFound,
    /// Anything else (network, validation), one line.
    Failed(String),
}

impl Outcome {
    /// Whether the request was accepted.
    pub fn is_applied(&self) -> bool {
        matches!(self, Outcome::Applied)
    }
}
