//! The reconcile's one write of the status (server-side apply under the controller's field
//! manager, only when worth it) and the Events that go with it.

use std::time::Duration;

use ferry_crds::{VirtualMachineMigration, VirtualMachineMigrationStatus as Status, names};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::status;
use crate::context::Context;
use crate::events::{self, Note};
use crate::pacing::Worth;
use crate::{Error, Result};

/// Publishes `notes` on `vmm`, best effort (an Event that cannot be written is logged).
pub async fn publish(ctx: &Context, vmm: &VirtualMachineMigration, notes: &[Note]) {
    let reference = vmm.object_ref(&());
    for n in notes {
        match ctx.recorder.publish(&n.to_event(), &reference).await {
            Ok(()) => ctx.metrics.write("create", "Event"),
            Err(e) => {
                warn!(migration = %vmm.name_any(), error = %e, reason = %n.reason, "publishing an event");
            }
        }
    }
}

/// `status` with no URL user info in any of its texts (`ferry_crds::redact`): every
/// `ferry-view` user reads it, and a message may quote a URL someone wrote with a password.
fn redacted(status: Status) -> Status {
    let Ok(mut value) = serde_json::to_value(&status) else {
        return status;
    };
    let before = value.clone();
    ferry_crds::redact::json(&mut value);
    if value == before {
        return status;
    }
    serde_json::from_value(value).unwrap_or(status)
}

/// The top-level fields of the status (and the types of the conditions) that differ between
/// `old` and `new`: what a status write was for, in the debug log.
fn changed(old: &Status, new: &Status) -> String {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return String::new();
    };
    let mut keys: Vec<String> = a.keys().chain(b.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    keys.retain(|k| a.get(k) != b.get(k));
    for k in &mut keys {
        if k == "conditions" {
            let types: Vec<&str> = new
                .conditions
                .iter()
                .filter(|c| !old.conditions.contains(c))
                .map(|c| c.type_.as_str())
                .collect();
            *k = format!("conditions[{}]", types.join(","));
        }
    }
    keys.join(" ")
}

/// What [`status`] did with a new status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Wrote it.
    Yes,
    /// Nothing worth a write had changed.
    Unchanged,
    /// Held back details or progress: the reconcile looks again after this long and writes
    /// them then.
    Deferred(Duration),
}

impl Written {
    /// Whether the status was written.
    pub fn wrote(self) -> bool {
        self == Written::Yes
    }

    /// Look again `after` (`None`: on a change only), or sooner when a held-back status is due.
    pub fn requeue(self, after: Option<Duration>) -> Requeue {
        let after = match self {
            Written::Deferred(d) => Some(after.map_or(d, |a| a.min(d))),
            Written::Yes | Written::Unchanged => after,
        };
        after.map_or_else(Requeue::await_change, Requeue::requeue)
    }
}

/// Writes `new` as the status of `vmm` when it is worth a write (see
/// [`status::worth_writing`]), with `vmm`'s resourceVersion as precondition, then publishes the
/// transition's Events and `extra`.
///
/// # Guarantees
/// At most one status write; on success `vmm` carries the written status and its new
/// resourceVersion. `extra` is published whether or not the status changed.
///
/// # Errors
/// [`Error::Conflict`] when the object changed since it was read; other Kubernetes API errors.
pub async fn status(
    ctx: &Context,
    vmm: &mut VirtualMachineMigration,
    new: Status,
    extra: Vec<Note>,
) -> Result<Written> {
    let uid = vmm.uid().unwrap_or_default();
    let new = redacted(new);
    let mut notes = vec![];
    let worth = status::worth_writing(
        vmm.status.as_ref(),
        &new,
        ctx.since_status_write(&uid),
        ctx.policy.status_interval,
    );
    let written = match worth {
        Worth::Now => Written::Yes,
        Worth::Later(d) => Written::Deferred(d),
        Worth::No => Written::Unchanged,
    };
    if written.wrote() {
        let api: Api<VirtualMachineMigration> =
            Api::namespaced(ctx.client.clone(), &vmm.namespace().unwrap_or_default());
        let patch = serde_json::json!({
            "apiVersion": ferry_crds::API_VERSION,
            "kind": "VirtualMachineMigration",
            "metadata": {"name": vmm.name_any(), "resourceVersion": vmm.resource_version()},
            "status": new,
        });
        let params = PatchParams::apply(names::CONTROLLER_FIELD_MANAGER).force();
        let written = match api
            .patch_status(&vmm.name_any(), &params, &Patch::Apply(&patch))
            .await
        {
            Ok(w) => w,
            Err(kube::Error::Api(s)) if s.code == 409 => return Err(Error::Conflict),
            Err(e) => return Err(e.into()),
        };
        ctx.metrics.write("status", "VirtualMachineMigration");
        ctx.note_write(&uid);
        let old = vmm.status.clone().unwrap_or_default();
        debug!(migration = %vmm.name_any(), changed = %changed(&old, &new), "status written");
        if old.phase != new.phase {
            info!(migration = %vmm.name_any(), from = %old.phase, to = %new.phase, "phase");
            if let Some(entered) = old
                .history
                .last()
                .filter(|h| h.phase == old.phase)
                .map(|h| h.entered_at.0)
                && let Ok(d) = Duration::try_from(ctx.clock.now().duration_since(entered))
            {
                ctx.metrics.phase_left(old.phase.as_str(), d.as_secs_f64());
            }
        }
        notes = events::notes(&old, &new);
        ctx.note_version(&uid, written.metadata.resource_version.clone());
        vmm.metadata.resource_version = written.metadata.resource_version;
        vmm.status = Some(new);
    }
    notes.extend(extra);
    publish(ctx, vmm, &notes).await;
    Ok(written)
}
