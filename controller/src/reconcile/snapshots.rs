//! The source's snapshots as ferry judges them ([`super::warm::judge`]): read from vSphere
//! through the source port, for Converting, CuttingOver's rounds and cleanup.

use super::io::Io;
use super::warm::{self, SnapshotSeen};
use crate::ports::SourceLogin;
use crate::problem::Problem;

/// The snapshot the migration recorded, as ferry judges the source's snapshots; with `disks`,
/// ferry's own snapshot's disks are read too.
pub async fn judged(
    io: Io<'_>,
    login: &SourceLogin,
    rec: &ferry_crds::SnapshotRecord,
    disks: bool,
) -> std::result::Result<SnapshotSeen, Problem> {
    let vm = io.vmm.source_moref().unwrap_or_default();
    let all = io.ctx.source.snapshots(login, vm).await?;
    let seen = warm::judge(io.vmm, &io.ctx.proof, rec, vm, &all);
    match seen {
        SnapshotSeen::Ours { moref, .. } if disks => {
            let frozen = io.ctx.source.snapshot_disks(login, &moref).await?;
            Ok(SnapshotSeen::Ours {
                moref,
                disks: frozen,
            })
        }
        other => Ok(other),
    }
}
