//! Processes a test starts (controller, sim, cockpit) and must not leave behind.

use std::process::{Child, Command, Stdio};

use crate::{Error, Result};

/// A child process killed (SIGKILL) and reaped when dropped, also when the test panics.
#[derive(Debug)]
pub struct ChildGuard {
    pub name: String,
    child: Option<Child>,
}

impl ChildGuard {
    /// Spawns `cmd` with stdin closed; its output goes where `cmd` says (inherit by default).
    pub fn spawn(name: &str, mut cmd: Command) -> Result<Self> {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .map_err(|source| Error::Spawn {
                what: name.to_string(),
                source,
            })?;
        Ok(ChildGuard {
            name: name.to_string(),
            child: Some(child),
        })
    }

    /// The process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL now and reap: a crash, as far as the process can tell.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns its exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait().ok()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `cmd` (a binary's command line as a person types it) to its end, with no cluster to
/// reach and none of the environment variables that could choose one or configure it for it
/// (`KUBECONFIG`, `FERRY_*`): whether it succeeded, and what it said on stderr.
///
/// # Errors
/// [`Error::Spawn`] when the binary cannot be started.
pub fn run_offline(mut cmd: Command) -> Result<(bool, String)> {
    cmd.args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .env_remove("KUBECONFIG");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("FERRY_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().map_err(|source| Error::Spawn {
        what: format!("{cmd:?}"),
        source,
    })?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}
