//! The one error type of the cockpit library.

/// Everything that can go wrong outside `main`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or using the kubeconfig failed.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// Building a client failed, or a request failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// Terminal I/O failed.
    #[error("terminal: {0}")]
    Io(#[from] std::io::Error),
    /// Printing JSON or YAML failed.
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
    /// A context named with `--context` or `:ctx` is not in the kubeconfig.
    #[error("no context {0:?} in the kubeconfig")]
    NoContext(String),
    /// A command that acts on one cluster was given several contexts.
    #[error("{}", crate::strings::ONE_CONTEXT_FOR_VERBS)]
    OneContext,
}

impl From<std::convert::Infallible> for Error {
    fn from(e: std::convert::Infallible) -> Error {
        match e {}
    }
}

impl Error {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kubeconfig(_) => "kubeconfig",
            Error::Kube(_) => "kube",
            Error::Io(_) => "io",
            Error::Json(_) => "json",
            Error::NoContext(_) => "no_context",
            Error::OneContext => "one_context",
        }
    }
}

/// `Result` with the cockpit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
