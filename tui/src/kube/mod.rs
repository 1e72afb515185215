//! The cluster edge: the client, the watches that feed actions, the requests effects ask for.

pub mod actions;
pub mod children;
pub mod watch;

use std::path::PathBuf;

use ::kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::error::{Error, Result};

/// How to reach the cluster (flags of `ferry`).
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// `--kubeconfig`; else `KUBECONFIG`, else `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`; else the current context.
    pub context: Option<String>,
    /// `--as`: a user to impersonate (a kubeconfig's `as:` works too).
    pub as_user: Option<String>,
    /// `--as-group`.
    pub as_groups: Vec<String>,
}

/// A client and what the cockpit shows about it.
#[derive(Clone)]
pub struct Cluster {
    /// The client.
    pub client: Client,
    /// Context name.
    pub context: String,
    /// The context's namespace (`default` when it names none).
    pub namespace: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("context", &self.context)
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// Builds a client from the kubeconfig.
///
/// # Errors
/// The kubeconfig cannot be read, names no such context, or its credentials cannot be loaded.
pub async fn connect(opts: &ConnectOptions) -> Result<Cluster> {
    let kubeconfig = match &opts.kubeconfig {
        Some(p) => Kubeconfig::read_from(p)?,
        None => Kubeconfig::read()?,
    };
    let context = opts
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .ok_or_else(|| Error::NoContext(String::new()))?;
    if !kubeconfig.contexts.iter().any(|c| c.name == context) {
        return Err(Error::NoContext(context));
    }
    let kopts = KubeConfigOptions {
        context: Some(context.clone()),
        ..KubeConfigOptions::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &kopts).await?;
    if let Some(user) = &opts.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !opts.as_groups.is_empty() {
        config.auth_info.impersonate_groups = Some(opts.as_groups.clone());
    }
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config)?;
    Ok(Cluster {
        client,
        context,
        namespace,
    })
}

/// The innermost cause of an error, one line: what a person needs in a status bar.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let s = cur.to_string();
    s.lines().next().unwrap_or_default().to_owned()
}
