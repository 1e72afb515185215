use std::path::PathBuf;

/// Everything that can go wrong while preparing or using the lab.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building the lab failed ({0}); see the output above")]
    Build(String),
    #[error("the lab did not become ready: {0}")]
    NotReady(String),
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("running {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("no free vcsim VM left in the lab inventory ({0} VMs, all claimed)")]
    NoFreeVm(usize),
    #[error("timed out after {secs}s waiting for {what}")]
    Timeout { what: String, secs: u64 },
}
