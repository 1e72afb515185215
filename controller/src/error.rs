//! The one error type of the controller library; `anyhow` is only used by `main.rs`.

/// Everything a reconcile (or the controller's start-up) can fail with.
///
/// Failures of the *migration* (a VM not found, a DataVolume that failed) are not errors: they
/// are decisions, recorded in the status. These are failures of the controller to do its own
/// work, retried by the work queue.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// Adding or removing the cleanup finalizer, or the cleanup itself, failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),

    /// An object lacks a field the controller needs (a name, a namespace, a uid).
    #[error("{kind} has no {field}")]
    MissingField {
        /// Kind of the object.
        kind: &'static str,
        /// The missing field.
        field: &'static str,
    },

    /// The vSphere source failed in a way that stops the controller's own step (not the
    /// migration): e.g. powering the VM back on during cleanup.
    #[error("vSphere: {0}")]
    Source(String),

    /// The staging object store failed during a step the controller must complete (cleanup).
    #[error("staging: {0}")]
    Staging(String),

    /// A builder produced an object that does not serialize (a bug).
    #[error("serializing {what}: {source}")]
    Serialize {
        /// What was serialized.
        what: &'static str,
        /// The underlying error.
        source: serde_json::Error,
    },

    /// Helpers of `ferry-crds` failed (missing metadata on hand-built objects).
    #[error(transparent)]
    Crds(#[from] ferry_crds::Error),

    /// A metrics or health endpoint could not be served.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },

    /// Another reconcile changed the object meanwhile; the work queue retries at once.
    #[error("the object changed while it was being reconciled")]
    Conflict,

    /// The key of ferry's creation stamps cannot be read or made (see `children::proof`).
    #[error("creation-proof key: {0}")]
    ProofKey(String),

    /// This instance lost the leader Lease (it stops; a restart makes it a standby).
    #[error("leadership lost: {0}")]
    LeadershipLost(#[from] crate::leader::Lost),

    /// A flag of the controller's run is missing or wrong (see `args`).
    #[error("{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },
}

impl Error {
    /// A short, stable label for metrics (`error="..."`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(e) if crate::leader::is_fenced(e) => "fenced",
            Error::Kube(kube::Error::Api(_)) => "kube_api",
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::MissingField { .. } => "missing_field",
            Error::Source(_) => "vsphere",
            Error::Staging(_) => "staging",
            Error::Serialize { .. } => "serialize",
            Error::Crds(_) => "crds",
            Error::Io { .. } => "io",
            Error::Conflict => "conflict",
            Error::ProofKey(_) => "proof_key",
            Error::LeadershipLost(_) => "leadership_lost",
            Error::Flag { .. } => "flag",
        }
    }

    /// Whether this is an optimistic-concurrency conflict (retry at once, not with backoff).
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::Conflict => true,
            Error::Kube(kube::Error::Api(s)) => s.code == 409,
            _ => false,
        }
    }

    /// Whether a write was refused by the fence (this instance is not surely the leader).
    pub fn is_fenced(&self) -> bool {
        match self {
            Error::Kube(e) => crate::leader::is_fenced(e),
            Error::Finalizer(f) => match f.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_fenced(),
                kube::runtime::finalizer::Error::AddFinalizer(e)
                | kube::runtime::finalizer::Error::RemoveFinalizer(e) => {
                    crate::leader::is_fenced(e)
                }
                kube::runtime::finalizer::Error::UnnamedObject
                | kube::runtime::finalizer::Error::InvalidFinalizer => false,
            },
            _ => false,
        }
    }
}

/// `Result` with the controller's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a Kubernetes API error is a 404.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether a Kubernetes API error is a 409 on create (the object exists).
pub(crate) fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}
