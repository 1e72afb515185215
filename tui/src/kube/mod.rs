//! The cluster edge: the client, the watches that feed actions, the requests effects ask for.

pub mod access;
pub mod actions;
pub mod children;
pub mod podlogs;
pub mod watch;

use std::path::PathBuf;

use ::kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::error::{Error, Result};

/// How to reach the clusters (flags of `ferry`).
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// `--kubeconfig`; else `KUBECONFIG` (several files merge, as kubectl merges them), else
    /// `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context a,b`: one cluster each; none means the current context.
    pub contexts: Vec<String>,
    /// `--as`: a user to impersonate (a kubeconfig's `as:` works too), in every context.
    pub as_user: Option<String>,
    /// `--as-group`, in every context.
    pub as_groups: Vec<String>,
}

/// A client and what the cockpit shows about it.
#[derive(Clone)]
pub struct Cluster {
    /// The client.
    pub client: Client,
    /// The configuration it was built from (the embedded controller's leader election builds
    /// its own clients from it).
    pub config: Config,
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

fn read_kubeconfig(opts: &ConnectOptions) -> Result<Kubeconfig> {
    Ok(match &opts.kubeconfig {
        Some(p) => Kubeconfig::read_from(p)?,
        None => Kubeconfig::read()?,
    })
}

async fn connect_to(
    kubeconfig: &Kubeconfig,
    context: Option<&str>,
    opts: &ConnectOptions,
) -> Result<Cluster> {
    let context = context
        .map(str::to_owned)
        .or_else(|| kubeconfig.current_context.clone())
        .ok_or_else(|| Error::NoContext(String::new()))?;
    if !kubeconfig.contexts.iter().any(|c| c.name == context) {
        return Err(Error::NoContext(context));
    }
    let kopts = KubeConfigOptions {
        context: Some(context.clone()),
        ..KubeConfigOptions::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig.clone(), &kopts).await?;
    if let Some(user) = &opts.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !opts.as_groups.is_empty() {
        config.auth_info.impersonate_groups = Some(opts.as_groups.clone());
    }
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config.clone())?;
    Ok(Cluster {
        client,
        config,
        context,
        namespace,
    })
}

/// Builds a client for the one context of `opts` (the current one when none is named).
///
/// # Errors
/// The kubeconfig cannot be read, names no such context, its credentials cannot be loaded, or
/// `opts` names several contexts.
pub async fn connect(opts: &ConnectOptions) -> Result<Cluster> {
    if opts.contexts.len() > 1 {
        return Err(Error::OneContext);
    }
    let kubeconfig = read_kubeconfig(opts)?;
    connect_to(&kubeconfig, opts.contexts.first().map(String::as_str), opts).await
}

/// Builds a client for each context of `opts` (the current one when none is named), in order.
/// Nothing is asked of the clusters yet: an unreachable one shows on the board, not here.
///
/// # Errors
/// The kubeconfig cannot be read, names no such context, or credentials cannot be loaded.
pub async fn connect_all(opts: &ConnectOptions) -> Result<Vec<Cluster>> {
    let kubeconfig = read_kubeconfig(opts)?;
    if opts.contexts.is_empty() {
        return Ok(vec![connect_to(&kubeconfig, None, opts).await?]);
    }
    let mut out = vec![];
    for c in &opts.contexts {
        if out.iter().any(|x: &Cluster| x.context == *c) {
            continue;
        }
        out.push(connect_to(&kubeconfig, Some(c), opts).await?);
    }
    Ok(out)
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
