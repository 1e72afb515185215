//! The MigrationWave controller: one child VirtualMachineMigration per `spec.vms` entry, released
//! within `maxInFlight`, steered by the wave's paused/cancel/retry, summed up in its status.

pub mod decide;
pub mod members;
pub mod select;
mod slots;
mod status;
mod window;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_crds::{
    MigrationWave, VirtualMachineMigration, WaveRefusal, WaveSelector, WaveVm, child_migration,
    child_migration_name, intent, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::context::Context;
use crate::freshness::Cached;
use crate::kubeio::create_if_absent;
use crate::migrations::Migrations;
use crate::pacing::Worth;
use crate::{Error, Result};

/// Metric label of this controller.
pub const CONTROLLER: &str = "wave";

/// The shortest time between two reconciles of a wave reading its children from the migration
/// controller's cache: no list, only a read of the wave and maybe a status write, so a freed
/// slot is refilled within this.
pub const MIN_CACHE_INTERVAL: Duration = Duration::from_millis(100);

/// How often a wave looks whether the migration controller's cache has synced, before it has.
/// The cache's first list triggers every wave with children; this is for a wave with none.
pub const CACHE_WAIT: Duration = Duration::from_secs(1);

pub use decide::SATURATED_REQUEUE;

pub use decide::CREATED_GRACE;

/// How long to wait before reading the children again, when the last read was at `last`. Pure.
pub fn wait_before_look(last: Option<Instant>, now: Instant, min: Duration) -> Option<Duration> {
    let since = now.checked_duration_since(last?)?;
    (since < min).then(|| min - since)
}

/// Reconciles one wave.
///
/// # Errors
/// Kubernetes API failures; the work queue retries.
pub async fn reconcile(wave: Arc<MigrationWave>, ctx: Arc<Context>) -> Result<Requeue> {
    let uid = wave.uid().unwrap_or_default();
    let now = Instant::now();
    // The children are read from the migration controller's cache only. Until it has synced,
    // the wave waits: listing the namespace instead (as it once did) held every migration of a
    // settled cluster in memory at once, whole, on each restart (10,000: 270 MB of heap).
    let Some(held) = cache_ready(&ctx) else {
        return Ok(Requeue::requeue(CACHE_WAIT));
    };
    if let Some(wait) = wait_before_look(ctx.last_looked(&uid, None), now, MIN_CACHE_INTERVAL) {
        return Ok(Requeue::requeue(wait));
    }
    ctx.last_looked(&uid, Some(now));
    ctx.metrics.reconcile(CONTROLLER);
    let started = std::time::Instant::now();
    let result = reconcile_wave(&wave, &ctx, held).await;
    if result.is_ok()
        && let Some(uid) = wave.uid()
    {
        ctx.note_success(&uid);
    }
    ctx.metrics
        .wave_reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    result
}

/// What the migration controller holds, once its watch has synced.
fn cache_ready(ctx: &Context) -> Option<&Migrations> {
    ctx.migrations.as_ref().filter(|m| m.ready())
}

/// Whether `c` is this wave's child: its owner reference names the wave's uid. A migration
/// that only carries the wave's label (anyone can set a label) is never counted or released.
fn owned_by(c: &VirtualMachineMigration, wave: &MigrationWave) -> bool {
    let uid = wave.metadata.uid.as_deref();
    uid.is_some()
        && c.owner_references()
            .iter()
            .any(|o| Some(o.uid.as_str()) == uid)
}

/// What the wave reads of the namespace's migrations, from the migration controller's cache:
/// its children (owner reference to its uid) and the others holding a name one of its VMs would
/// take (another wave's, or no wave's: a collision, never progress). The releases this
/// controller made that the cache does not show yet are applied ([`decide::with_releases`]).
struct Seen {
    children: Vec<VirtualMachineMigration>,
    others: Vec<VirtualMachineMigration>,
    /// What the namespace's other migrations took, for a wave with a window none of whose own
    /// has succeeded yet (not looked at otherwise).
    elsewhere: Option<(i64, usize)>,
}

/// What `held` (what the migration controller holds, synced) shows of the wave's children and
/// names: those that succeeded and settled are rebuilt from their records.
fn seen(wave: &MigrationWave, members: &[WaveVm], ctx: &Context, held: &Migrations) -> Seen {
    let (ns, name) = (wave.namespace().unwrap_or_default(), wave.name_any());
    let cached = match wave.metadata.uid.as_deref() {
        Some(uid) => held.owned_by(&ns, uid),
        None => Vec::new(),
    };
    let own: std::collections::HashSet<String> = cached.iter().map(ResourceExt::name_any).collect();
    let others = members
        .iter()
        .map(|m| child_migration_name(&name, m))
        .filter(|n| !own.contains(n))
        .filter_map(|n| held.get(&ns, &n))
        .filter(|c| !owned_by(c, wave))
        .collect();
    let uid = wave.uid().unwrap_or_default();
    let (children, pending) = decide::with_releases(cached, &ctx.given(&uid));
    ctx.set_given(&uid, pending);
    let elsewhere = (wave.spec.window.is_some() && window::migration_seconds(&children).is_none())
        .then(|| held.measured_elsewhere(&ns, &uid))
        .flatten();
    Seen {
        children,
        others,
        elsewhere,
    }
}

/// The wave as cached when it is at or after the version our last status write or fresh read
/// returned (a 1,000-VM wave is a large object to read on every reconcile), else read fresh;
/// `Current::Gone` when it is gone, `Current::Behind` when the cache has not caught up with our own
/// last write (that write's event brings a reconcile of its own).
async fn current(wave: &MigrationWave, ctx: &Context, ns: &str) -> Result<Current> {
    let uid = wave.uid().unwrap_or_default();
    match ctx.cached(&uid, wave.resource_version().as_deref()) {
        Cached::Current | Cached::Ahead => return Ok(Current::Wave(Box::new(wave.clone()))),
        Cached::Behind => return Ok(Current::Behind),
        Cached::Unknown => {}
    }
    let waves: Api<MigrationWave> = Api::namespaced(ctx.client.clone(), ns);
    let Some(fresh) = waves.get_opt(&wave.name_any()).await? else {
        ctx.forget(&uid);
        return Ok(Current::Gone);
    };
    ctx.note_version(&uid, fresh.resource_version());
    Ok(Current::Wave(Box::new(fresh)))
}

/// What [`current`] found.
enum Current {
    Wave(Box<MigrationWave>),
    Behind,
    Gone,
}

/// One wave reconcile: observe (the wave, its children from `held`, the names its VMs would
/// take) → the pure [`decide::decide`] → [`execute`] its creates and patches → one status write
/// when [`decide::worth_writing`] says so → the requeue [`decide::requeue_after`] gives.
async fn reconcile_wave(wave: &MigrationWave, ctx: &Context, held: &Migrations) -> Result<Requeue> {
    let ns = wave.namespace().ok_or(Error::MissingField {
        kind: "MigrationWave",
        field: "metadata.namespace",
    })?;
    let wave = match current(wave, ctx, &ns).await? {
        Current::Wave(w) => *w,
        Current::Behind | Current::Gone => return Ok(Requeue::await_change()),
    };
    if wave.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    if let Some(selector) = unresolved_selector(&wave) {
        // Refused for this spec: nothing changes until the spec does (no inventory list).
        if select::refused(&wave) {
            return Ok(Requeue::await_change());
        }
        return select::resolve(&wave, selector, ctx).await;
    }
    let members = wave.members();
    let vmms: Api<VirtualMachineMigration> = Api::namespaced(ctx.client.clone(), &ns);
    let seen = seen(&wave, &members, ctx, held);
    let planning = Planning {
        seen: &seen,
        now: Time(crate::context::whole_seconds(ctx.clock.now())),
        held_back: ctx.guard.why_not(),
    };
    let mut plan = planning.plan(&wave);
    // Each VM's preflight weighs its own claims; the wave weighs them together, against the
    // quotas as the watch of them shows (none before its first list: a summary, not a gate).
    if let Some(p) = plan.status.preflight.as_mut() {
        let quotas = ctx.cached_quotas(&ns).unwrap_or_default();
        p.quota_short = crate::reconcile::preflight::wave_short(&p.claims, &quotas, &ns);
    }
    let (tried, refused) = execute(ctx, &wave, &members, &seen, &plan, &vmms).await?;
    let old_refused = wave
        .status
        .as_ref()
        .map(|s| s.refused.as_slice())
        .unwrap_or_default();
    let refusals = decide::refusals(old_refused, &members, &tried, &refused, &planning.now);
    if refusals != old_refused {
        plan = planning.with_refusals(&wave, refusals, &plan);
    }
    let worth = write_status(ctx, &wave, &plan).await?;
    let after = decide::requeue_after(&wave, &plan, &seen.children, worth, &planning.now);
    Ok(Requeue::requeue(match planning.held_back {
        // Looked at again when the guard may have a new verdict.
        Some(_) => after.min(crate::admission_guard::RECHECK),
        None => after,
    }))
}

/// The wave's selector, while it has chosen no VMs yet.
fn unresolved_selector(wave: &MigrationWave) -> Option<&WaveSelector> {
    let selected = wave.status.as_ref().and_then(|s| s.selected_vms.as_ref());
    wave.spec.selector.as_ref().filter(|_| selected.is_none())
}

/// What a wave's plan is made from: made once, and again once the API server's refusals of
/// its creates are known.
struct Planning<'a> {
    seen: &'a Seen,
    now: Time,
    /// Why the admission policies are not in force, while they are not: every plan holds then.
    held_back: Option<String>,
}

impl Planning<'_> {
    /// The pure plan for `wave` as seen, held while the admission policies are not in force.
    fn plan(&self, wave: &MigrationWave) -> decide::Plan {
        let mut plan = decide::decide_measured(
            wave,
            &self.seen.children,
            &self.seen.others,
            self.seen.elsewhere,
            &self.now,
        );
        if let Some(why) = &self.held_back {
            decide::hold_for_policies(&mut plan, why, wave.metadata.generation, &self.now);
        }
        plan
    }

    /// The plan again, with `refusals` recorded: what the API server refused counts in this
    /// very status (Degraded, the phase). The quotas are weighed as `first` weighed them.
    fn with_refusals(
        &self,
        wave: &MigrationWave,
        refusals: Vec<WaveRefusal>,
        first: &decide::Plan,
    ) -> decide::Plan {
        let mut known = wave.clone();
        known.status.get_or_insert_with(Default::default).refused = refusals;
        let quota_short = first
            .status
            .preflight
            .as_ref()
            .map(|p| p.quota_short.clone());
        let mut plan = self.plan(&known);
        if let (Some(p), Some(q)) = (plan.status.preflight.as_mut(), quota_short) {
            p.quota_short = q;
        }
        plan
    }
}

/// Writes the plan's status when [`decide::worth_writing`] says now, with a warning for each
/// note of VMs that get no migration; returns what it said.
async fn write_status(ctx: &Context, wave: &MigrationWave, plan: &decide::Plan) -> Result<Worth> {
    let uid = wave.uid().unwrap_or_default();
    let worth = decide::worth_writing(
        wave.status.as_ref(),
        &plan.status,
        ctx.since_status_write(&uid),
        ctx.policy.status_interval,
    );
    if worth == Worth::Now {
        let notes: Vec<_> = [
            decide::collision_note(wave.status.as_ref(), &plan.status),
            decide::refusal_note(wave.status.as_ref(), &plan.status),
            decide::policies_note(wave.status.as_ref(), &plan.status),
        ]
        .into_iter()
        .flatten()
        .collect();
        for note in &notes {
            warn!(wave = %wave.name_any(), why = %note.note, "VMs get no migration");
        }
        write::status(ctx, wave, &plan.status, &notes).await?;
    }
    Ok(worth)
}

/// Carries out `plan`: creates the children it names (not twice while a fresh one is on its way
/// into the cache, nor one the API server refused within [`CREATED_GRACE`]: the others are made
/// all the same) and patches the intents it names onto children (a release counted as taken
/// until the cache shows it). Returns the members it tried to create, and what was refused.
async fn execute(
    ctx: &Context,
    wave: &MigrationWave,
    members: &[WaveVm],
    seen: &Seen,
    plan: &decide::Plan,
    vmms: &Api<VirtualMachineMigration>,
) -> Result<(Vec<usize>, decide::Refused)> {
    let created = create(ctx, wave, members, seen, plan, vmms).await?;
    steer(ctx, wave, seen, plan, vmms).await?;
    Ok(created)
}

/// Creates the children `plan` names; returns the members it tried, and what was refused.
async fn create(
    ctx: &Context,
    wave: &MigrationWave,
    members: &[WaveVm],
    seen: &Seen,
    plan: &decide::Plan,
    vmms: &Api<VirtualMachineMigration>,
) -> Result<(Vec<usize>, decide::Refused)> {
    let mut refused = decide::Refused::new();
    let mut tried = vec![];
    let uid = wave.uid().unwrap_or_default();
    let mut created = ctx.created(&uid);
    let present: std::collections::HashSet<String> =
        seen.children.iter().map(ResourceExt::name_any).collect();
    created.retain(|name, at| at.elapsed() < CREATED_GRACE && !present.contains(name));
    for i in &plan.create {
        let child = child_migration(wave, &members[*i])?;
        let name = child.name_any();
        if created.contains_key(&name) {
            continue;
        }
        tried.push(*i);
        match create_if_absent(&ctx.metrics, vmms, &child, names::WAVE_FIELD_MANAGER).await {
            Ok(_) => {
                created.insert(name, Instant::now());
            }
            Err(Error::Kube(e)) => {
                let doing = format!("create VirtualMachineMigration {name}");
                let Some(p) = crate::problem::refused(&doing, &e) else {
                    return Err(e.into());
                };
                warn!(wave = %wave.name_any(), migration = %name, why = %p.message, "refused");
                // Tried again once the grace has passed, not at every look.
                created.insert(name.clone(), Instant::now());
                refused.push((*i, name, p));
            }
            Err(e) => return Err(e),
        }
    }
    ctx.set_created(&uid, created);
    Ok((tried, refused))
}

/// Patches the intents `plan` names onto the wave's children: release, cancel, cutover, retry.
async fn steer(
    ctx: &Context,
    wave: &MigrationWave,
    seen: &Seen,
    plan: &decide::Plan,
    vmms: &Api<VirtualMachineMigration>,
) -> Result<()> {
    let uid = wave.uid().unwrap_or_default();
    let uids: HashMap<String, String> = seen
        .children
        .iter()
        .filter_map(|c| Some((c.name_any(), c.uid()?)))
        .collect();
    let patches = plan
        .release
        .iter()
        .map(|n| (n, intent::release()))
        .chain(plan.cancel.iter().map(|n| (n, intent::cancel())))
        .chain(plan.cutover.iter().map(|n| (n, intent::cutover())))
        .chain(
            plan.retry
                .iter()
                .map(|n| (n, intent::retry_to(wave.spec.retry))),
        );
    let mut given = ctx.given(&uid);
    for (name, patch) in patches {
        let patched = vmms
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // The answer is the child as it now stands: the migration controller may decide on
        // that version from its cache without reading it again.
        if let Some(child) = patched.uid() {
            ctx.note_version(&child, patched.resource_version());
        }
        // A failed patch that was applied after all shows in the cache before the error's
        // backoff ends; a successful one counts as taken until the cache shows it.
        if let Some(child) = uids.get(name) {
            let set = if plan.release.contains(name) {
                Some(&mut given.released)
            } else if plan.cutover.contains(name) {
                Some(&mut given.cut_over)
            } else {
                None
            };
            if let Some(set) = set {
                set.insert(child.clone());
                ctx.set_given(&uid, given.clone());
            }
        }
        ctx.metrics.write("patch", "VirtualMachineMigration");
        info!(wave = %wave.name_any(), migration = %name, %patch, "steered");
    }
    Ok(())
}

/// What the work queue does after a failed wave reconcile: the policy's backoff per wave
/// (a conflict at once).
pub fn error_policy(wave: Arc<MigrationWave>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics.error(CONTROLLER, err.metric_label());
    let uid = wave.uid().unwrap_or_default();
    let delay = crate::pacing::retry_delay(err, ctx.note_failure(&uid), &ctx.policy, &uid);
    if !err.is_conflict() && !err.is_fenced() {
        warn!(wave = %wave.name_any(), error = %err, ?delay, "wave reconcile failed");
    }
    Requeue::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wave_looks_at_its_children_at_most_every_min_interval() {
        let t0 = Instant::now();
        let min = Duration::from_millis(500);
        assert_eq!(wait_before_look(None, t0, min), None, "first look at once");
        assert_eq!(
            wait_before_look(Some(t0), t0 + Duration::from_millis(200), min),
            Some(Duration::from_millis(300))
        );
        assert_eq!(wait_before_look(Some(t0), t0 + min, min), None);
    }

    #[test]
    fn only_a_migration_whose_owner_reference_names_the_waves_uid_is_its_child() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let mut wave = ferry_crds::fixtures::wave("w", 1);
        wave.metadata.uid = Some("wave-uid".into());
        let owner = |uid: &str| OwnerReference {
            api_version: ferry_crds::API_VERSION.into(),
            kind: "MigrationWave".into(),
            name: "w".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let mut child = ferry_crds::fixtures::migration("a");
        child.metadata.labels = Some([(names::WAVE_LABEL.to_owned(), "w".to_owned())].into());
        assert!(!owned_by(&child, &wave), "the wave's label alone");
        child.metadata.owner_references = Some(vec![owner("another-wave-of-the-same-name")]);
        assert!(!owned_by(&child, &wave), "a wave of the same name before");
        child.metadata.owner_references = Some(vec![owner("wave-uid")]);
        assert!(owned_by(&child, &wave));
        wave.metadata.uid = None;
        assert!(
            !owned_by(&child, &wave),
            "a wave without a uid owns nothing"
        );
    }
}
