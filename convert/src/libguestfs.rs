//! How the guest Job starts a libguestfs program (virt-v2v-in-place, guestfish): its direct
//! backend, its appliance's cache and temporary files in the Job's work volume, and TCG unless
//! KVM is asked for (a `/dev/kvm` that opens is not always one that runs; TCG always does).

use std::path::Path;
use std::process::{Output, Stdio};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::Error;

/// `program`, set up to run libguestfs' appliance from `work` (its cache made there); its
/// output piped.
///
/// # Errors
/// The cache's directory not made.
pub async fn command(program: &Path, work: &Path, kvm: bool) -> Result<Command, Error> {
    let cache = work.join("appliance");
    tokio::fs::create_dir_all(&cache)
        .await
        .map_err(|source| Error::Io {
            path: cache.clone(),
            source,
        })?;
    let mut cmd = Command::new(program);
    cmd.env("LIBGUESTFS_BACKEND", "direct")
        .env("LIBGUESTFS_CACHEDIR", &cache)
        .env("TMPDIR", work)
        .env("HOME", work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if !kvm {
        cmd.env("LIBGUESTFS_BACKEND_SETTINGS", "force_tcg");
    }
    Ok(cmd)
}

/// Runs `cmd` (`what`) to its end, `input` on its standard input.
///
/// # Errors
/// [`Error::Qemu`] when it cannot be started (`missing` when it is not installed) or its input
/// not written.
pub async fn run(mut cmd: Command, what: &str, input: Option<String>) -> Result<Output, Error> {
    let program = Path::new(cmd.as_std().get_program()).to_owned();
    let failed = |e: std::io::Error| Error::Qemu {
        what: what.to_owned(),
        detail: format!("{}: {e}", program.display()),
        missing: e.kind() == std::io::ErrorKind::NotFound,
    };
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(failed)?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes()).await.map_err(failed)?;
        drop(stdin);
    }
    child.wait_with_output().await.map_err(failed)
}
