//! The one error type of this crate.

/// Everything that can go wrong in `ferry-crds`' helpers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An object lacks a metadata field that the helper needs (a name, a namespace or a uid);
    /// objects read from the API server always have them, hand-built ones may not.
    #[error("{kind} has no metadata.{field}")]
    MissingMetadata {
        /// Kind of the object, e.g. `MigrationWave`.
        kind: &'static str,
        /// The missing field: `name`, `namespace` or `uid`.
        field: &'static str,
    },

    /// A VM selector names no VM or more than one way of finding it. The API server rejects such
    /// objects, so this is only seen on objects built in code.
    #[error("the VM selector must set exactly one of name, id or uuid (it sets {set})")]
    InvalidVmSelector {
        /// How many of `name`, `id` and `uuid` were set.
        set: usize,
    },

    /// A string is not the name of any phase.
    #[error("unknown phase {0:?}")]
    UnknownPhase(String),

    /// A credentials Secret lacks a key its reader needs (absent, or empty once trimmed).
    #[error("no key {key:?}")]
    SecretKeyMissing {
        /// The key, e.g. `password`.
        key: &'static str,
    },

    /// A credentials Secret's key holds a value no process can use. The value is never shown.
    #[error("key {key:?} {why}")]
    SecretKeyInvalid {
        /// The key, e.g. `insecureSkipTLSVerify`.
        key: &'static str,
        /// What is wrong with the value, in words that never quote it.
        why: String,
    },

    /// A URL cannot name the endpoint it is meant to. The text is never shown: it may carry a
    /// password.
    #[error("{why}")]
    InvalidUrl {
        /// What is wrong with it.
        why: String,
    },

    /// Rendering a CustomResourceDefinition as YAML failed.
    #[error("could not render the CRD as YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),

    /// Reading or writing a generated manifest failed.
    #[error("{path}: {source}")]
    Io {
        /// The file that was read or written.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Error {
    /// A short, stable label for metrics (`error="..."`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::MissingMetadata { .. } => "missing_metadata",
            Error::InvalidVmSelector { .. } => "invalid_vm_selector",
            Error::UnknownPhase(_) => "unknown_phase",
            Error::SecretKeyMissing { .. } => "secret_key_missing",
            Error::SecretKeyInvalid { .. } => "secret_key_invalid",
            Error::InvalidUrl { .. } => "invalid_url",
            Error::Yaml(_) => "yaml",
            Error::Io { .. } => "io",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error and its sources on one line: a client library's own message alone ("error sending
/// request") hides the cause an operator needs ("Connection refused"). Shared by the vSphere
/// and the staging clients, which sit side by side above this crate.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        next = e.source();
    }
    out
}
