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
            Error::Yaml(_) => "yaml",
            Error::Io { .. } => "io",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
