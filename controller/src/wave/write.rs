//! The one place a wave's status is written: server-side apply of the whole status under the
//! wave's field manager, with the `resourceVersion` the wave was decided on as precondition (a
//! conflict forgets that version, so the next reconcile reads the wave fresh), then the Event the
//! decision asked for.

use ferry_crds::{MigrationWave, MigrationWaveStatus, names};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use tracing::warn;

use crate::context::Context;
use crate::events::Note;
use crate::{Error, Result};

/// Writes `status` on `wave` (as read, its version the precondition) and publishes `notes`.
///
/// # Errors
/// [`Error::Conflict`] when the wave changed since it was read; other Kubernetes API failures.
pub async fn status(
    ctx: &Context,
    wave: &MigrationWave,
    status: &MigrationWaveStatus,
    notes: &[Note],
) -> Result<()> {
    let ns = wave.namespace().ok_or(Error::MissingField {
        kind: "MigrationWave",
        field: "metadata.namespace",
    })?;
    let uid = wave.uid().unwrap_or_default();
    let patch = serde_json::json!({
        "apiVersion": ferry_crds::API_VERSION,
        "kind": "MigrationWave",
        "metadata": {"name": wave.name_any(), "resourceVersion": wave.resource_version()},
        "status": status,
    });
    let written = match Api::<MigrationWave>::namespaced(ctx.client.clone(), &ns)
        .patch_status(
            &wave.name_any(),
            &PatchParams::apply(names::WAVE_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(w) => w,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            ctx.note_version(&uid, None);
            return Err(Error::Conflict);
        }
        Err(e) => return Err(e.into()),
    };
    ctx.note_version(&uid, written.resource_version());
    ctx.note_write(&uid);
    ctx.metrics.write("status", "MigrationWave");
    for note in notes {
        publish(ctx, wave, note).await;
    }
    Ok(())
}

/// Publishes `note` on `wave`, best effort (an Event that cannot be written is logged).
async fn publish(ctx: &Context, wave: &MigrationWave, note: &Note) {
    match ctx
        .recorder
        .publish(&note.to_event(), &wave.object_ref(&()))
        .await
    {
        Ok(()) => ctx.metrics.write("create", "Event"),
        Err(e) => {
            warn!(wave = %wave.name_any(), error = %e, reason = %note.reason, "publishing an event");
        }
    }
}
