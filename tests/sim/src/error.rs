use std::path::PathBuf;

/// Everything that can go wrong inside the sim.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("fault spec {spec:?}: {reason}")]
    FaultSpec { spec: String, reason: String },
    #[error("S3: {0}")]
    S3(#[from] object_store::Error),
    #[error("S3 URL {url:?}: {reason}")]
    S3Url { url: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("secret {namespace}/{name}: {reason}")]
    Secret {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("container: {0}")]
    Container(String),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// A short, stable label for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::FaultSpec { .. } => "fault_spec",
            Error::S3(_) => "s3",
            Error::S3Url { .. } => "s3_url",
            Error::Io { .. } => "io",
            Error::Secret { .. } => "secret",
            Error::Container(_) => "container",
            Error::Json(_) => "json",
            Error::Invalid(_) => "invalid",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether the apiserver answered 404 (the object is gone).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 404)
    }

    /// Whether the apiserver answered 409 (conflict or already exists).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}

/// Result of sim operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
