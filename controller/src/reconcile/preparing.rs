//! Preparing: the source VM found and validated, its original power state recorded, powered off
//! if asked; the staging bucket present; the target name free.

use std::time::Duration;

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, SourceDiscovered, Validated},
    DiskStatus, HookPoint, Phase, PowerState, Reason, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::info;

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::credentials;
use super::hooks;
use super::io::Io;
use super::outcome::{Outcome, Record, Step};
use super::preflight;
use super::scope::Scope;
use super::source_power_off::{PowerAction, PowerOffStep, power_off_step};
use super::world;
use crate::Result;
use crate::apis::kubevirt::VirtualMachine;
use crate::children::{Conflict, Holder};
use crate::ports::SourceLogin;
use crate::problem::Problem;

/// The Preparing checkpoint.
#[derive(Debug)]
pub struct Preparing;

pub use super::preflight::SourceFacts;

/// What Preparing observes: the facts, and the login it found them with (for the power-off).
#[derive(Clone, Debug)]
pub struct Observed {
    /// The source and its surroundings, or why they could not be read.
    pub facts: Result<SourceFacts, Problem>,
    /// The vSphere login, when its Secret could be read.
    pub login: Option<SourceLogin>,
    /// Whether the source's host and datastores have a copy slot for it (taken when they do;
    /// `Free` unless the migration is in Preparing and its source was found).
    pub slot: crate::copy_slots::Verdict,
    /// A cold migration's `preCutover` hook's Job, read while the hook holds it (see `hooks`).
    pub hook: Option<hooks::Seen>,
}

/// What Preparing does to the world: the steps of the source's power-off, and before them a
/// cold migration's `preCutover` hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ask the source's guest to shut down (VMware Tools).
    ShutdownGuest,
    /// Power the source off hard.
    PowerOff,
    /// Create the `preCutover` hook's Job.
    RunPreCutoverHook,
}

impl From<PowerAction> for Action {
    fn from(a: PowerAction) -> Self {
        match a {
            PowerAction::ShutdownGuest => Action::ShutdownGuest,
            PowerAction::PowerOff => Action::PowerOff,
        }
    }
}

impl Checkpoint for Preparing {
    const PHASE: Phase = Phase::Preparing;
    const CONDITIONS: &'static [ConditionType] = &[SourceDiscovered, Validated];
    const RETRY_CLEANUP: &'static [Cleanup] = &[];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let login = match credentials::source_login(io).await? {
            Ok(l) => l,
            Err(p) => {
                return Ok(Observed {
                    facts: Err(p),
                    login: None,
                    slot: crate::copy_slots::Verdict::Free,
                    hook: None,
                });
            }
        };
        let facts = facts(io, &login).await?;
        // Only a migration about to touch its source takes a slot: preflight alone (a paused
        // or held one, in Pending or Queued) takes none.
        let slot = match &facts {
            Ok(f) if io.vmm.phase() == Phase::Preparing => io
                .ctx
                .copy_slot(io.vmm, &crate::copy_slots::Place::of_source(&f.vm)),
            _ => crate::copy_slots::Verdict::Free,
        };
        // Read only once every check passed would let it run: a Preparing that fails or
        // waits for other reasons costs no read.
        let hook = match &facts {
            Ok(_) if runs_pre_hook(io.vmm) => hooks::observe(io, HookPoint::PreCutover).await?,
            _ => None,
        };
        Ok(Observed {
            facts,
            login: Some(login),
            slot,
            hook,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    fn on_actions_done(scope: &Scope<Observed>, planned: Outcome<Action>) -> Outcome<Action> {
        powered_off(scope, planned)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        if *action == Action::RunPreCutoverHook {
            return hooks::create(io, HookPoint::PreCutover).await;
        }
        let (Some(login), Some(moref)) = (observed.login.as_ref(), io.vmm.source_moref()) else {
            // The decision powers off only what it found and recorded.
            return Ok(None);
        };
        let migration = io.vmm.metadata.name.as_deref().unwrap_or_default();
        match action {
            Action::ShutdownGuest => {
                if let Err(p) = io.ctx.source.shutdown_guest(login, moref).await {
                    return Ok(Some(p));
                }
                info!(%migration, %moref, "asked the source guest to shut down (VMware Tools)");
            }
            Action::PowerOff => {
                if let Err(p) = io.ctx.source.power_off(login, moref).await {
                    return Ok(Some(p));
                }
                info!(%migration, %moref, "source VM powered off");
            }
            Action::RunPreCutoverHook => {}
        }
        Ok(None)
    }
}

async fn facts(io: Io<'_>, login: &SourceLogin) -> Result<Result<SourceFacts, Problem>> {
    let lookup = match io.vmm.spec.source.vm.lookup() {
        Ok(l) => l,
        Err(e) => return Ok(Err(Problem::permanent(Reason::VMNotFound, e.to_string()))),
    };
    let discovered = match io.ctx.source.discover(login, lookup).await {
        Ok(d) => d,
        Err(p) => return Ok(Err(p)),
    };
    let (bucket, with_ca) = match credentials::staging_login(io).await? {
        Ok(s) => (io.ctx.staging.check_bucket(&s).await, s.ca_bundle.is_some()),
        Err(p) => (Err(p), false),
    };
    // Every name the migration will create, checked free before the source is touched (once
    // per attempt: each is read fresh, whoever holds it; a name taken after this check is
    // found by its create).
    let uid = io.vmm.metadata.uid.as_deref().unwrap_or_default();
    let (target_taken, conflicts) = if io.ctx.names_found_free(uid) {
        (false, vec![])
    } else {
        let found = taken_names(io, &discovered.source, with_ca).await?;
        if !found.0 && found.1.is_empty() {
            io.ctx.note_names_free(uid);
        }
        found
    };
    let converter_image = io.converter_image();
    let classes = preflight::named_classes(io.vmm, &discovered.source.disks);
    let missing_classes = missing_classes(io, &classes).await?;
    Ok(Ok(SourceFacts {
        vm: discovered.source,
        layout_problems: discovered.layout_problems,
        disks_reported: discovered.disks_reported,
        unread: discovered.unread,
        state: discovered.state,
        bucket,
        target_taken,
        conflicts,
        converter_image,
        missing_networks: missing_networks(io).await?,
        cross_namespace_networks: io.ctx.policy.cross_namespace_networks,
        missing_classes,
        missing_instancetypes: missing_instancetypes(io).await?,
        quotas: quotas_left(io).await?,
        capacities: capacities(io, &classes).await?,
    }))
}

/// What the drivers of the classes the disks would use report they have room for
/// (CSIStorageCapacity, in the drivers' namespaces: one list, only when the migration names a
/// class).
async fn capacities(io: Io<'_>, classes: &[String]) -> Result<Vec<preflight::ClassRoom>> {
    use k8s_openapi::api::storage::v1::CSIStorageCapacity;
    if classes.is_empty() {
        return Ok(vec![]);
    }
    let api: kube::Api<CSIStorageCapacity> = kube::Api::all(io.ctx.client.clone());
    let list = api.list(&kube::api::ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|c| classes.contains(&c.storage_class_name))
        .filter_map(|c| {
            let q = c.maximum_volume_size.as_ref().or(c.capacity.as_ref())?;
            Some(preflight::ClassRoom {
                class: c.storage_class_name.clone(),
                bytes: ferry_crds::quantity::parse_bytes(&q.0)?,
            })
        })
        .collect())
}

/// What each ResourceQuota of the migration's namespace has left: from the watch cache once
/// it has listed, else (no cache, or not listed yet) one list.
async fn quotas_left(io: Io<'_>) -> Result<Vec<preflight::QuotaLeft>> {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let ns = io.vmm.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(cached) = io.ctx.cached_quotas(ns) {
        return Ok(cached);
    }
    let api: kube::Api<ResourceQuota> = kube::Api::namespaced(io.ctx.client.clone(), ns);
    let list = api.list(&kube::api::ListParams::default()).await?;
    Ok(list.items.iter().map(preflight::QuotaLeft::of).collect())
}

/// The StorageClasses the disks would use (by name) that do not exist, read by name.
async fn missing_classes(io: Io<'_>, classes: &[String]) -> Result<Vec<String>> {
    let api: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
        kube::Api::all(io.ctx.client.clone());
    let mut missing = vec![];
    for class in classes {
        if api.get_opt(class).await?.is_none() {
            missing.push(class.clone());
        }
    }
    Ok(missing)
}

/// The instancetype and preference `target.template.placement` names that do not exist (as
/// `Kind name`), read by name (only when one is named). KubeVirt does not start a VM whose
/// instancetype or preference is missing; one its API does not serve (404 too) is as missing.
async fn missing_instancetypes(io: Io<'_>) -> Result<Vec<String>> {
    use crate::apis::instancetype::{instancetype, preference};
    let placement = &io.vmm.spec.target.template.placement;
    let named = placement
        .instancetype
        .iter()
        .map(|i| (instancetype(i.kind), &i.name))
        .chain(
            placement
                .preference
                .iter()
                .map(|p| (preference(p.kind), &p.name)),
        );
    let ns = io.vmm.metadata.namespace.as_deref().unwrap_or_default();
    let mut missing = vec![];
    for ((resource, cluster_wide), name) in named {
        if !exists(io, &resource, (!cluster_wide).then_some(ns), name).await? {
            missing.push(format!("{} {name}", resource.kind));
        }
    }
    Ok(missing)
}

/// Whether the object `name` of a kind ferry only looks for (read as a dynamic object, by
/// name) exists: in `namespace`, or cluster-wide when `None`.
async fn exists(
    io: Io<'_>,
    resource: &kube::api::ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Result<bool> {
    let client = io.ctx.client.clone();
    let api: kube::Api<kube::api::DynamicObject> = match namespace {
        Some(ns) => kube::Api::namespaced_with(client, ns, resource),
        None => kube::Api::all_with(client, resource),
    };
    Ok(api.get_opt(name).await?.is_some())
}

/// The NetworkAttachmentDefinitions the Multus mappings name that do not exist, read fresh
/// (only with Multus mappings; another namespace's only when the platform allows it).
async fn missing_networks(io: Io<'_>) -> Result<Vec<String>> {
    let mut missing = vec![];
    for (network, outside) in preflight::multus_networks(io.vmm) {
        if outside && !io.ctx.policy.cross_namespace_networks {
            continue;
        }
        let Some((ns, name)) = network.split_once('/') else {
            continue;
        };
        let nad = crate::apis::multus::network_attachment_definition();
        if !exists(io, &nad, Some(ns), name).await? {
            missing.push(network);
        }
    }
    Ok(missing)
}

/// Whether the target VM's name is someone else's, and the conflicts of every other name the
/// migration will create (a VM posing as this migration's among them), read fresh. `with_ca`:
/// the staging endpoint has a CA bundle, for which CDI gets a ConfigMap.
async fn taken_names(
    io: Io<'_>,
    source: &ferry_crds::DiscoveredSource,
    with_ca: bool,
) -> Result<(bool, Vec<Conflict>)> {
    // The target name is derived from the discovered name when the spec gives none.
    let mut probe = io.vmm.clone();
    probe.status.get_or_insert_with(Default::default).source = Some(Box::new(source.clone()));
    let probe_io = Io { vmm: &probe, ..io };
    let target = world::conflict::<VirtualMachine>(probe_io, &names::vm_name(&probe)).await?;
    // A VM that poses as this migration's is a conflict like any other child's; anyone else's
    // VM under the target name is the user's choice of name to fix.
    let (target_taken, posing) = match target {
        Some(c) if c.holder == Holder::Impostor => (false, Some(c)),
        Some(_) => (true, None),
        None => (false, None),
    };
    let mut conflicts: Vec<Conflict> = posing.into_iter().collect();
    conflicts.extend(world::child_conflicts(io, source.disks.len(), with_ca).await?);
    Ok((target_taken, conflicts))
}

/// The discovered source to record: as read now, but with the power state and VMware Tools
/// state found the first time (after our own power-off, "now" is always poweredOff, Tools not
/// running). Pure.
fn to_record(scope: &Scope<Observed>, facts: &SourceFacts) -> Record {
    let mut source = facts.vm.clone();
    if let Some(original) = scope.original_power() {
        source.power_state = Some(original);
        if let Some(first) = scope.source() {
            source.vmware_tools = first.vmware_tools.or(source.vmware_tools);
            source.guest_os_family = first.guest_os_family.or(source.guest_os_family);
        }
    }
    let disks = source
        .disks
        .iter()
        .enumerate()
        .map(|(i, d)| DiskStatus {
            index: i32::try_from(i).unwrap_or(i32::MAX),
            source_path: Some(d.datastore_path.clone()),
            capacity_bytes: Some(d.capacity_bytes),
            ..DiskStatus::default()
        })
        .collect();
    Record {
        source: Some(source),
        disks: Some(disks),
        progress: None,
        power_off: None,
        preflight: None,
        warm: None,
        source_state: None,
        guest: None,
        health: None,
        hook: None,
    }
}

/// After a hard power-off: vSphere answers it once its task finished (or the VM was off
/// already), so the source is proven off, and the rules are weighed again as the next look
/// would find it. When they hand over to Converting, Converting starts in this reconcile and
/// one status write records the power-off with the step it completes; otherwise (anything but
/// that hand-over) the power-off's own outcome stands, and the next look decides. Pure.
fn powered_off(scope: &Scope<Observed>, planned: Outcome<Action>) -> Outcome<Action> {
    let (Ok(facts), Some(done)) = (&scope.world.facts, planned.record.power_off.as_ref()) else {
        return planned;
    };
    if planned.actions() != [Action::PowerOff] {
        return planned;
    }
    let mut vmm = scope.vmm.clone();
    vmm.status
        .get_or_insert_with(Default::default)
        .source_power_off = Some(done.clone());
    let mut facts = facts.clone();
    facts.vm.power_state = Some(PowerState::PoweredOff);
    let after = Scope {
        vmm,
        now: scope.now,
        policy: scope.policy.clone(),
        retries: scope.retries,
        world: Observed {
            facts: Ok(facts),
            login: scope.world.login.clone(),
            slot: scope.world.slot.clone(),
            hook: scope.world.hook.clone(),
        },
    };
    let next = decide(&after);
    if next.step
        != (Step::Advance {
            to: Phase::Converting,
        })
    {
        return planned;
    }
    let record = Record {
        power_off: Some(done.clone()),
        ..next.record.clone()
    };
    next.recording(record)
}

/// How the source ended up off, for the Validated condition.
fn how_powered_off(scope: &Scope<Observed>) -> String {
    let grace = scope.vmm.spec.source.power.shutdown_grace_period_seconds;
    let done = scope
        .vmm
        .status
        .as_ref()
        .and_then(|s| s.source_power_off.clone())
        .unwrap_or_default();
    match (done.shutdown_guest_at, done.hard_power_off_at) {
        (Some(_), None) => say::shut_down_by_tools(),
        (Some(_), Some(_)) => say::hard_after_grace(grace),
        (None, Some(_)) if grace == 0 => say::hard_without_grace(),
        (None, Some(_)) => say::hard_without_tools(),
        (None, None) => say::was_off(),
    }
}

/// Decides the Preparing step: the first rule that applies, in this order. Pure.
///
/// # Guarantees
/// The source is powered off only once its original power state is recorded in the status
/// (actions run before this reconcile's status write: a crash between the two must not make
/// ferry forget that the VM was on).
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let f = match &scope.world.facts {
        Ok(facts) => Found::new(scope, facts),
        Err(p) => return not_discovered(scope, p),
    };
    // The target's rules first, as before preflight: each fails, waits or retries on its own
    // terms (a name held by a leftover on its way out is waited for; credentials bound to
    // another endpoint fail at once). Then preflight's hold, before any power change.
    target_name_taken(&f)
        .or_else(|| name_held(&f))
        .or_else(|| image_not_allowed(&f))
        .or_else(|| bucket_unusable(&f))
        .or_else(|| held(&f))
        .or_else(|| no_copy_slot(&f))
        .or_else(|| power_unrecorded(&f))
        .or_else(|| pre_hook(&f))
        .or_else(|| powering_off(&f))
        .unwrap_or_else(|| ready(&f))
}

/// The source as found, and what every outcome past discovery says and records about it.
struct Found<'a> {
    scope: &'a Scope<Observed>,
    facts: &'a SourceFacts,
    /// The VM's name in vSphere.
    name: String,
    /// The SourceDiscovered condition's message.
    discovered: String,
    record: Record,
}

impl<'a> Found<'a> {
    fn new(scope: &'a Scope<Observed>, facts: &'a SourceFacts) -> Self {
        let name = facts.vm.name.clone().unwrap_or_default();
        let discovered = say::found(
            &name,
            facts.vm.moref.as_deref(),
            facts.vm.disks.len(),
            facts.vm.nics.len(),
        );
        let now = Time(crate::context::whole_seconds(scope.now));
        let concerns = preflight::concerns(&scope.vmm, facts);
        let claims = preflight::claims_need(&scope.vmm, &facts.vm.disks);
        let previous = scope.vmm.status.as_ref().and_then(|s| s.preflight.as_ref());
        let record = Record {
            preflight: Some(preflight::record(
                &scope.vmm, concerns, claims, &now, previous,
            )),
            ..to_record(scope, facts)
        };
        Self {
            record,
            scope,
            facts,
            name,
            discovered,
        }
    }

    /// `out` with the source discovered and recorded.
    fn discovered(&self, out: Outcome<Action>) -> Outcome<Action> {
        out.with(
            SourceDiscovered,
            True,
            Reason::Discovered,
            self.discovered.clone(),
        )
        .recording(self.record.clone())
    }

    /// A failure that only a change to the VM or the spec mends.
    fn invalid(&self, reason: Reason, message: String) -> Outcome<Action> {
        let out = Outcome::failure(reason, message, false, Phase::Preparing, Validated);
        self.discovered(out)
    }

    /// A problem around the source: retried while it may pass, else a failure.
    fn problem(&self, p: &Problem) -> Outcome<Action> {
        self.discovered(Outcome::from_problem(self.scope, p, Some(Validated)))
    }

    /// Whether ferry began powering the source off in this attempt (it is touched).
    fn touched(&self) -> bool {
        self.scope
            .vmm
            .status
            .as_ref()
            .is_some_and(|s| s.source_power_off.is_some())
    }

    /// Whether the source is powered on or suspended: either way, ferry must power it off.
    fn is_on(&self) -> bool {
        matches!(
            self.facts.vm.power_state,
            Some(PowerState::PoweredOn | PowerState::Suspended)
        )
    }
}

/// The source could not be found or read (login, lookup, connection): nothing else is checked.
fn not_discovered(scope: &Scope<Observed>, p: &Problem) -> Outcome<Action> {
    Outcome::from_problem(scope, p, Some(SourceDiscovered)).with(
        Validated,
        Unknown,
        Reason::NotStarted,
        "",
    )
}

/// Before any power change: a Critical concern the operator has not accepted holds the
/// migration in Pending, nothing touched (or fails it, should ferry have begun the power-off already).
fn held(f: &Found) -> Option<Outcome<Action>> {
    let preflight = f.record.preflight.as_ref()?;
    let blocking: Vec<&ferry_crds::Concern> = preflight
        .blocking()
        .filter(|c| preflight::holds(c.code))
        .collect();
    if blocking.is_empty() {
        return None;
    }
    let msg = say::held(&f.name, &blocking);
    if f.touched() {
        return Some(f.invalid(Reason::PreflightFailed, msg));
    }
    let hold = Step::Hold {
        reason: Reason::PreflightFailed,
        message: msg.clone(),
        recheck: f.scope.policy.preflight_recheck,
    };
    let out = Outcome::new(hold, msg.clone()).with(
        Validated,
        ferry_crds::ConditionStatus::False,
        Reason::PreflightFailed,
        msg,
    );
    Some(f.discovered(out))
}

/// Before any power change: the source's ESXi host or a datastore of its disks has the
/// controller's limit of copies running; the migration waits in Queued, nothing touched.
fn no_copy_slot(f: &Found) -> Option<Outcome<Action>> {
    let crate::copy_slots::Verdict::Full { reason, .. } = &f.scope.world.slot else {
        return None;
    };
    if f.touched() {
        // It holds its slot since its power-off; the count that says otherwise is behind.
        return None;
    }
    let msg = f.scope.world.slot.message().unwrap_or_default();
    let hold = Step::Hold {
        reason: *reason,
        message: msg.clone(),
        recheck: f.scope.policy.copy_slot_recheck,
    };
    Some(f.discovered(Outcome::new(hold, msg)))
}

/// Someone else's VirtualMachine has the target name: ferry never takes it over.
fn target_name_taken(f: &Found) -> Option<Outcome<Action>> {
    f.facts.target_taken.then(|| {
        f.invalid(
            Reason::TargetNameTaken,
            preflight::target_taken(&f.scope.vmm),
        )
    })
}

/// Another object holds a name the migration will create: a leftover on its way out is waited
/// for, anything else is the user's to remove.
fn name_held(f: &Found) -> Option<Outcome<Action>> {
    let c = f.facts.conflicts.first()?;
    Some(f.problem(&c.problem(world::RENAME_HINT)))
}

/// The converter image asked for is not one the controller's policy allows.
fn image_not_allowed(f: &Found) -> Option<Outcome<Action>> {
    let msg = f.facts.converter_image.as_ref().err()?;
    Some(f.invalid(Reason::ConverterImageNotAllowed, msg.clone()))
}

/// Without its staging bucket there is nowhere to put the converted disks.
fn bucket_unusable(f: &Found) -> Option<Outcome<Action>> {
    let p = f.facts.bucket.as_ref().err()?;
    Some(f.problem(p))
}

/// The source's original power state is recorded before ferry touches it, to restore it later.
fn power_unrecorded(f: &Found) -> Option<Outcome<Action>> {
    if !f.is_on() || f.scope.original_power().is_some() {
        return None;
    }
    // Record first; the next reconcile (right after the write) powers off.
    let wait = Step::Wait {
        requeue: Duration::from_millis(50),
    };
    let out = f
        .discovered(Outcome::new(wait, say::powering_off(&f.name)))
        .with(
            Validated,
            Unknown,
            Reason::InProgress,
            say::for_a_consistent_copy(),
        );
    Some(out)
}

/// Whether a cold migration's `preCutover` hook may hold Preparing: one is pending and ferry
/// has not begun the power-off (a warm migration's runs at its cutover). Pure.
fn runs_pre_hook(vmm: &ferry_crds::VirtualMachineMigration) -> bool {
    vmm.spec.mode == ferry_crds::MigrationMode::Cold
        && vmm
            .status
            .as_ref()
            .is_none_or(|s| s.source_power_off.is_none())
        && hooks::pending(vmm, HookPoint::PreCutover).is_some()
}

/// Every check passed: a cold migration's `preCutover` hook runs before the source is touched
/// (its power-off, its copy); it must succeed for the migration to go on.
fn pre_hook(f: &Found) -> Option<Outcome<Action>> {
    if !runs_pre_hook(&f.scope.vmm) {
        return None;
    }
    let out = hooks::decide(
        f.scope,
        HookPoint::PreCutover,
        f.scope.world.hook.as_ref(),
        Action::RunPreCutoverHook,
        Validated,
        Phase::Preparing,
    )?;
    let hook = out.record.hook.clone();
    let out = f.discovered(out);
    Some(out.recording(Record {
        hook,
        ..f.record.clone()
    }))
}

/// A running source is powered off for a consistent copy, its guest asked to shut down first.
/// A warm migration's runs on: its first copy reads a snapshot, and CuttingOver powers it off.
fn powering_off(f: &Found) -> Option<Outcome<Action>> {
    if !f.is_on() || f.scope.vmm.spec.mode == ferry_crds::MigrationMode::Warm {
        return None;
    }
    let (step, message, power_off) = match power_off_step(
        &f.scope.vmm,
        f.scope.now,
        f.facts.vm.power_state,
        f.facts.vm.vmware_tools,
    ) {
        PowerOffStep::Act(action, done) => {
            let message = match action {
                PowerAction::ShutdownGuest => say::shutdown_asked(
                    &f.name,
                    f.scope.vmm.spec.source.power.shutdown_grace_period_seconds,
                ),
                PowerAction::PowerOff => say::powering_off_hard(&f.name),
            };
            (Step::Act(vec![Action::from(action)]), message, Some(done))
        }
        PowerOffStep::Wait { left } => (
            Step::Wait {
                requeue: left.min(f.scope.policy.source_poll) + Duration::from_millis(100),
            },
            say::waiting_for_shutdown(&f.name, left.as_secs()),
            None,
        ),
    };
    let record = Record {
        power_off,
        ..f.record.clone()
    };
    let out = f
        .discovered(Outcome::new(step, message.clone()))
        .with(Validated, Unknown, Reason::InProgress, message)
        .recording(record);
    Some(out)
}

/// Every check passed and the source is off: its disks can be converted.
fn ready(f: &Found) -> Outcome<Action> {
    let step = Step::Advance {
        to: Phase::Converting,
    };
    let mut out = f.discovered(Outcome::new(step, say::ready(&f.name)));
    // A cold copy is made after this power-off: what defines it is recorded, to be read again
    // before the migrated VM is made (a warm migration records it at its cutover).
    if f.scope.vmm.spec.mode == ferry_crds::MigrationMode::Cold && !f.is_on() {
        out.record.source_state = f
            .facts
            .state
            .as_ref()
            .map(|s| super::source_state::recorded(&f.scope.vmm, s, Phase::Preparing));
    }
    out.with(
        Validated,
        True,
        Reason::Validated,
        say::validated(&match f.scope.vmm.spec.mode {
            ferry_crds::MigrationMode::Warm if f.is_on() => say::runs_until_cutover(),
            ferry_crds::MigrationMode::Warm | ferry_crds::MigrationMode::Cold => {
                how_powered_off(f.scope)
            }
        }),
    )
}

/// What Preparing tells people, in conditions, failures and Events.
mod say {
    pub(super) fn runs_until_cutover() -> String {
        "the source runs on: a warm migration copies a snapshot of it and powers it off at the cutover".into()
    }

    /// The Critical concerns that hold the migration, each with its code and advice.
    pub(super) fn held(name: &str, blocking: &[&ferry_crds::Concern]) -> String {
        let each: Vec<String> = blocking
            .iter()
            .map(|c| format!("{}: {}", c.code, c.message))
            .collect();
        format!(
            "preflight holds {name} (nothing touched): {}; see status.preflight",
            each.join("; ")
        )
    }

    pub(super) fn found(name: &str, moref: Option<&str>, disks: usize, nics: usize) -> String {
        format!(
            "found {name} ({}) with {disks} disk(s) and {nics} NIC(s)",
            moref.unwrap_or("?")
        )
    }

    pub(super) fn powering_off(name: &str) -> String {
        format!("powering {name} off")
    }

    pub(super) fn for_a_consistent_copy() -> String {
        "powering the source VM off for a consistent copy".to_owned()
    }

    pub(super) fn shutdown_asked(name: &str, grace: i64) -> String {
        format!(
            "asked the guest of {name} to shut down through VMware Tools; powering it off hard after {grace}s"
        )
    }

    pub(super) fn powering_off_hard(name: &str) -> String {
        format!("powering {name} off hard")
    }

    pub(super) fn waiting_for_shutdown(name: &str, left: u64) -> String {
        format!(
            "waiting for the guest of {name} to shut down (VMware Tools); powering it off hard in {left}s"
        )
    }

    pub(super) fn ready(name: &str) -> String {
        format!("{name} is ready to be converted")
    }

    pub(super) fn validated(how_powered_off: &str) -> String {
        format!(
            "disk layout, power state, staging bucket and target name checked; {how_powered_off}"
        )
    }

    pub(super) fn shut_down_by_tools() -> String {
        "the guest shut down through VMware Tools".to_owned()
    }

    pub(super) fn hard_after_grace(grace: i64) -> String {
        format!(
            "powered off hard: the guest did not shut down within {grace}s of the VMware Tools request"
        )
    }

    pub(super) fn hard_without_grace() -> String {
        "powered off hard (shutdownGracePeriodSeconds is 0)".to_owned()
    }

    pub(super) fn hard_without_tools() -> String {
        "powered off hard: VMware Tools were not running in the guest".to_owned()
    }

    pub(super) fn was_off() -> String {
        "the source VM was off".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::DiscoveredSource;
    use ferry_crds::{
        DiscoveredDisk, VirtualMachineMigration,
        fixtures::{migration, ts},
    };
    use ferry_crds::{SourcePowerOff, ToolsState};

    fn vm(power: PowerState) -> DiscoveredSource {
        DiscoveredSource {
            name: Some("DC0_H0_VM0".into()),
            moref: Some("vm-42".into()),
            power_state: Some(power),
            disks: vec![DiscoveredDisk {
                key: 2000,
                datastore_path: "[ds] a.vmdk".into(),
                capacity_bytes: 1 << 26,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn facts(power: PowerState) -> SourceFacts {
        SourceFacts::clean(vm(power))
    }

    fn scope(
        vmm: VirtualMachineMigration,
        world: Result<SourceFacts, Problem>,
        retries: u32,
    ) -> Scope<Observed> {
        Scope {
            vmm: vmm.with_phase(Phase::Preparing),
            now: ts(10).0,
            policy: Policy::default(),
            retries,
            world: Observed {
                facts: world,
                login: None,
                slot: crate::copy_slots::Verdict::Free,
                hook: None,
            },
        }
    }

    #[test]
    fn without_a_copy_slot_it_waits_in_queued_with_its_source_untouched() {
        let full = crate::copy_slots::Verdict::Full {
            reason: Reason::HostCopyLimit,
            name: "esx-07".into(),
            copying: 2,
            limit: 2,
            by: "the controller's --max-copies-per-host",
        };
        let mut s = scope(migration("m"), Ok(facts(PowerState::PoweredOn)), 0);
        s.world.slot = full.clone();
        let out = decide(&s);
        let Step::Hold {
            reason, message, ..
        } = &out.step
        else {
            panic!("{:?}", out.step)
        };
        assert_eq!(*reason, Reason::HostCopyLimit);
        assert!(
            message.contains("esx-07") && message.contains('2'),
            "{message}"
        );
        assert!(out.actions().is_empty(), "nothing touched");
        let after = super::super::status::after_outcome(&s.vmm, &out, &ferry_crds::fixtures::t0());
        assert_eq!(after.phase, Phase::Queued);
        // Once its power-off began it holds its slot: a count that says otherwise is behind.
        let mut touched = migration("m");
        touched
            .status
            .get_or_insert_with(Default::default)
            .source_power_off = Some(Default::default());
        let mut s = scope(touched, Ok(facts(PowerState::PoweredOn)), 0);
        s.world.slot = full;
        assert!(!matches!(decide(&s).step, Step::Hold { .. }));
    }

    fn step(vmm: VirtualMachineMigration, world: Result<SourceFacts, Problem>) -> Step<Action> {
        decide(&scope(vmm, world, 0)).step
    }

    /// A migration whose first Preparing reconcile recorded the source as `power`.
    fn recorded(power: PowerState) -> VirtualMachineMigration {
        let mut vmm = migration("m");
        vmm.status.get_or_insert_with(Default::default).source = Some(Box::new(vm(power)));
        vmm
    }

    fn fail_reason(s: &Step<Action>) -> Option<(Reason, bool)> {
        match s {
            Step::Fail {
                reason, retriable, ..
            } => Some((*reason, *retriable)),
            _ => None,
        }
    }

    #[test]
    fn satisfied_absent_partial_failed() {
        // satisfied: powered off, everything valid
        assert_eq!(
            step(migration("m"), Ok(facts(PowerState::PoweredOff))),
            Step::Advance {
                to: Phase::Converting
            }
        );
        // partial: powered on, powerOff asked, original power state recorded
        assert_eq!(
            step(
                recorded(PowerState::PoweredOn),
                Ok(facts(PowerState::PoweredOn))
            ),
            Step::Act(vec![Action::PowerOff])
        );
        assert_eq!(
            step(
                recorded(PowerState::Suspended),
                Ok(facts(PowerState::Suspended))
            ),
            Step::Act(vec![Action::PowerOff])
        );
        // failed: powered on, powerOff refused
        let mut keep_on = migration("m");
        keep_on.spec.source.power.power_off = false;
        assert!(
            matches!(step(keep_on, Ok(facts(PowerState::PoweredOn))), Step::Hold { ref message, .. } if message.contains("PoweredOn")),
            "held in Pending until someone powers it off"
        );
    }

    #[test]
    fn each_bad_input_fails_with_its_own_reason() {
        let cases = [
            (
                Problem::permanent(Reason::VMNotFound, "no VM"),
                Reason::VMNotFound,
            ),
            (
                Problem::permanent(Reason::LoginFailed, "bad password"),
                Reason::LoginFailed,
            ),
            (
                Problem::permanent(Reason::ThumbprintMismatch, "wrong cert"),
                Reason::ThumbprintMismatch,
            ),
            (
                Problem::permanent(Reason::VMAmbiguous, "two"),
                Reason::VMAmbiguous,
            ),
        ];
        for (p, want) in cases {
            let o = decide(&scope(migration("m"), Err(p), 0));
            assert_eq!(fail_reason(&o.step), Some((want, false)));
            let c = o
                .conditions
                .iter()
                .find(|c| c.type_ == SourceDiscovered)
                .unwrap();
            assert_eq!(
                (c.status, c.reason),
                (ferry_crds::ConditionStatus::False, want)
            );
        }
        let mut f = facts(PowerState::PoweredOff);
        f.bucket = Err(Problem::permanent(Reason::BucketNotFound, "no bucket"));
        let o = decide(&scope(migration("m"), Ok(f), 0));
        assert_eq!(fail_reason(&o.step), Some((Reason::BucketNotFound, false)));
        assert!(o.conditions.iter().any(|c| c.type_ == Validated
            && c.reason == Reason::BucketNotFound
            && c.status == ferry_crds::ConditionStatus::False));
        let mut f = facts(PowerState::PoweredOff);
        f.layout_problems = vec![ferry_vsphere::LayoutProblem::RawDeviceMapping {
            disk: "Hard disk 1".into(),
        }];
        assert!(
            matches!(step(migration("m"), Ok(f)), Step::Hold { ref message, .. } if message.contains("RawDeviceMapping")),
            "an RDM holds the migration in Pending"
        );
        let mut f = facts(PowerState::PoweredOff);
        f.target_taken = true;
        assert_eq!(
            fail_reason(&step(migration("m"), Ok(f))),
            Some((Reason::TargetNameTaken, false))
        );
        let mut f = facts(PowerState::PoweredOff);
        f.converter_image = Err("not allowed".into());
        assert_eq!(
            fail_reason(&step(migration("m"), Ok(f))),
            Some((Reason::ConverterImageNotAllowed, false))
        );
        let leftover = crate::children::Conflict {
            kind: "DataVolume".into(),
            name: "m-disk-0".into(),
            holder: crate::children::Holder::EarlierMigration { uid: "u0".into() },
            leaving: false,
        };
        let mut f = facts(PowerState::PoweredOff);
        f.conflicts = vec![leftover.clone()];
        assert_eq!(
            fail_reason(&step(migration("m"), Ok(f))),
            Some((Reason::TargetConflict, false))
        );
        let mut f = facts(PowerState::PoweredOff);
        f.conflicts = vec![crate::children::Conflict {
            leaving: true,
            ..leftover
        }];
        assert!(
            matches!(
                step(migration("m"), Ok(f)),
                Step::Retry {
                    reason: Reason::TargetConflict,
                    ..
                }
            ),
            "a leftover on its way out is waited for"
        );
        let mut f = facts(PowerState::PoweredOff);
        f.vm.disks.clear();
        assert!(
            matches!(step(migration("m"), Ok(f)), Step::Hold { ref message, .. } if message.contains("NoDisk"))
        );
    }

    /// The facts of a powered-on source (powerOff asked) with `read` disks read of `reported`.
    fn disks(read: i32, reported: Option<u32>, unread: &[&str]) -> SourceFacts {
        let mut f = facts(PowerState::PoweredOn);
        f.vm.disks = (0..read)
            .map(|i| DiscoveredDisk {
                key: 2000 + i,
                label: format!("Hard disk {}", i + 1),
                datastore_path: format!("[ds] vm/disk{i}.vmdk"),
                capacity_bytes: 1 << 26,
                ..Default::default()
            })
            .collect();
        f.disks_reported = reported;
        f.unread = unread.iter().map(|u| (*u).to_owned()).collect();
        f
    }

    #[test]
    fn a_source_is_migrated_only_with_every_disk_vsphere_reports_read() {
        const UNREAD_DISK: &str = r#"device 2002 "Hard disk 3" (VirtualDisk, backing VirtualDiskPartitionedRawDiskVer2BackingInfo) in config.hardware.device"#;
        type Case = (&'static str, SourceFacts, Option<&'static [&'static str]>);
        let cases: Vec<Case> = vec![
            ("counts equal", disks(2, Some(2), &[]), None),
            (
                "vSphere does not say (vcsim may leave the property out)",
                disks(2, None, &[]),
                None,
            ),
            (
                "more read than counted: nothing dropped",
                disks(2, Some(1), &[]),
                None,
            ),
            (
                "fewer read",
                disks(2, Some(3), &[]),
                Some(&[
                    "vSphere reports 3 virtual disk(s), ferry read 2",
                    r#"2000 "Hard disk 1", 2001 "Hard disk 2""#,
                ]),
            ),
            (
                "none read",
                disks(0, Some(1), &[]),
                Some(&["vSphere reports 1 virtual disk(s), ferry read 0", "(none)"]),
            ),
            (
                "a device ferry could not read, named, and the count",
                disks(2, Some(3), &[UNREAD_DISK]),
                Some(&[
                    UNREAD_DISK,
                    "vSphere reports 3 virtual disk(s), ferry read 2",
                ]),
            ),
            (
                "a device ferry could not read that vSphere does not count",
                disks(1, Some(1), &[UNREAD_DISK]),
                Some(&[UNREAD_DISK]),
            ),
            (
                "a property ferry could not read",
                disks(1, Some(1), &["property config.firmware"]),
                Some(&["property config.firmware"]),
            ),
        ];
        for (name, f, fails_naming) in cases {
            let mut vmm = migration("m");
            vmm.spec.source.power.power_off = true;
            let o = decide(&scope(vmm, Ok(f), 0));
            match fails_naming {
                None => assert!(
                    !matches!(o.step, Step::Fail { .. } | Step::Hold { .. }),
                    "{name}: {:?}",
                    o.step
                ),
                Some(words) => {
                    let Step::Hold { message, .. } = &o.step else {
                        panic!("{name}: {:?}", o.step)
                    };
                    assert!(message.contains("IncompleteInventory"), "{name}");
                    for w in words {
                        assert!(message.contains(w), "{name}: {message:?} lacks {w:?}");
                    }
                    assert!(o.record.power_off.is_none(), "{name}: nothing powered off");
                    let v = o.conditions.iter().find(|c| c.type_ == Validated).unwrap();
                    assert_eq!(
                        (v.status, v.reason),
                        (ferry_crds::ConditionStatus::False, Reason::PreflightFailed),
                        "{name}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_cold_pre_cutover_hook_runs_before_the_power_off_and_its_failure_leaves_the_source_on() {
        use crate::apis::job::JobState;
        use crate::reconcile::hooks::Seen;
        let mut vmm = recorded(PowerState::PoweredOn);
        vmm.spec.hooks = Some(ferry_crds::fixtures::pre_cutover_hooks());
        vmm.status.as_mut().unwrap().attempts = 1;
        let with_job = |job: JobState| {
            let mut s = scope(vmm.clone(), Ok(facts(PowerState::PoweredOn)), 0);
            s.world.hook = Some(Seen {
                job,
                failure: Some("writers left".into()),
                conflict: None,
            });
            decide(&s)
        };
        // The hook's Job is made; nothing is powered off.
        let o = with_job(JobState::Absent);
        assert_eq!(o.step, Step::Act(vec![Action::RunPreCutoverHook]));
        assert!(o.record.power_off.is_none());
        assert!(
            o.record.source.is_some(),
            "the discovery is recorded with it"
        );
        let o = with_job(JobState::Running { failed: 0 });
        assert!(matches!(o.step, Step::Wait { .. }), "{:?}", o.step);
        // It failed: the migration fails in Preparing, the source untouched.
        let o = with_job(JobState::Failed {
            reason: "BackoffLimitExceeded".into(),
            message: String::new(),
        });
        assert_eq!(fail_reason(&o.step), Some((Reason::HookFailed, true)));
        assert!(o.record.power_off.is_none());
        // It succeeded and that is recorded: the power-off goes on.
        let o = with_job(JobState::Complete);
        let done = o.record.hook.clone().unwrap();
        let mut passed = vmm.clone();
        passed.status.as_mut().unwrap().hooks = vec![done];
        let o = decide(&scope(passed, Ok(facts(PowerState::PoweredOn)), 0));
        assert_eq!(o.step, Step::Act(vec![Action::PowerOff]), "{:?}", o.step);
    }

    #[test]
    fn a_source_read_in_part_is_never_powered_off_even_once_its_power_state_is_recorded() {
        // The first reconcile read it whole and recorded it powered on; now a disk is unread.
        let recorded = recorded(PowerState::PoweredOn);
        let o = decide(&scope(recorded, Ok(disks(1, Some(2), &[])), 0));
        assert!(matches!(o.step, Step::Hold { .. }), "{:?}", o.step);
        assert!(o.record.power_off.is_none());
    }

    #[test]
    fn an_unreachable_endpoint_is_retried_then_fails() {
        let p = Problem::transient(Reason::EndpointUnreachable, "connection refused");
        let o = decide(&scope(migration("m"), Err(p.clone()), 0));
        assert!(matches!(
            o.step,
            Step::Retry {
                reason: Reason::EndpointUnreachable,
                ..
            }
        ));
        let o = decide(&scope(
            migration("m"),
            Err(p),
            Policy::default().max_transient_retries,
        ));
        assert_eq!(
            fail_reason(&o.step),
            Some((Reason::EndpointUnreachable, true))
        );
    }

    #[test]
    fn the_source_is_powered_off_only_after_its_power_state_is_recorded() {
        let o = decide(&scope(migration("m"), Ok(facts(PowerState::PoweredOn)), 0));
        assert!(matches!(o.step, Step::Wait { .. }), "{:?}", o.step);
        assert_eq!(
            o.record.source.unwrap().power_state,
            Some(PowerState::PoweredOn),
            "recorded in this reconcile's write"
        );
    }

    #[test]
    fn the_original_power_state_survives_our_own_power_off() {
        let mut vmm = migration("m");
        vmm.status.get_or_insert_with(Default::default).source =
            Some(Box::new(vm(PowerState::PoweredOn)));
        let o = decide(&scope(vmm, Ok(facts(PowerState::PoweredOff)), 0));
        assert_eq!(
            o.step,
            Step::Advance {
                to: Phase::Converting
            }
        );
        assert_eq!(
            o.record.source.unwrap().power_state,
            Some(PowerState::PoweredOn)
        );
        let disks = o.record.disks.unwrap();
        assert_eq!((disks.len(), disks[0].capacity_bytes), (1, Some(1 << 26)));
    }

    #[test]
    fn a_hard_power_off_answered_hands_over_to_converting_with_its_record() {
        let sc = scope(
            recorded(PowerState::PoweredOn),
            Ok(facts(PowerState::PoweredOn)),
            0,
        );
        let planned = decide(&sc);
        assert_eq!(planned.step, Step::Act(vec![Action::PowerOff]));
        let done = <Preparing as Checkpoint>::on_actions_done(&sc, planned);
        assert_eq!(
            done.step,
            Step::Advance {
                to: Phase::Converting
            },
            "one status write for the power-off and the step it completes"
        );
        let off = done
            .record
            .power_off
            .clone()
            .expect("the power-off recorded");
        assert_eq!(off.hard_power_off_at, Some(ts(10)));
        assert_eq!(
            done.record.source.as_ref().and_then(|s| s.power_state),
            Some(PowerState::PoweredOn),
            "the original power state, for a cancel to restore"
        );
        let validated = done.conditions.iter().find(|c| c.type_ == Validated);
        assert_eq!(validated.map(|c| c.status), Some(True));
    }

    #[test]
    fn a_guest_asked_to_shut_down_is_waited_for_not_handed_over() {
        let sc = scope(
            on_with(None, 60),
            Ok(with_tools(PowerState::PoweredOn, ToolsState::Running)),
            0,
        );
        let planned = decide(&sc);
        assert_eq!(planned.step, Step::Act(vec![Action::ShutdownGuest]));
        let done = <Preparing as Checkpoint>::on_actions_done(&sc, planned.clone());
        assert_eq!(done.step, planned.step, "the guest takes its time");
    }

    /// A migration that recorded the source as powered on, with `done` as its power-off so far
    /// and the given grace.
    fn on_with(done: Option<SourcePowerOff>, grace: i64) -> VirtualMachineMigration {
        let mut vmm = recorded(PowerState::PoweredOn);
        vmm.spec.source.power.shutdown_grace_period_seconds = grace;
        vmm.status
            .get_or_insert_with(Default::default)
            .source_power_off = done;
        vmm
    }

    fn with_tools(power: PowerState, tools: ToolsState) -> SourceFacts {
        let mut f = facts(power);
        f.vm.vmware_tools = Some(tools);
        f
    }

    #[test]
    fn the_guest_is_asked_to_shut_down_first_and_powered_off_hard_after_the_grace() {
        let t = |s: i64| Some(ts(s));
        type Case = (
            &'static str,
            Option<SourcePowerOff>,
            i64,
            SourceFacts,
            Step<Action>,
            Option<SourcePowerOff>,
        );
        // scope time is ts(10)
        let cases: Vec<Case> = vec![
            (
                "tools running: ShutdownGuest, recorded",
                None,
                300,
                with_tools(PowerState::PoweredOn, ToolsState::Running),
                Step::Act(vec![Action::ShutdownGuest]),
                Some(SourcePowerOff {
                    shutdown_guest_at: t(10),
                    hard_power_off_at: None,
                }),
            ),
            (
                "tools not running: hard at once",
                None,
                300,
                with_tools(PowerState::PoweredOn, ToolsState::NotRunning),
                Step::Act(vec![Action::PowerOff]),
                Some(SourcePowerOff {
                    shutdown_guest_at: None,
                    hard_power_off_at: t(10),
                }),
            ),
            (
                "no tools installed: hard at once",
                None,
                300,
                with_tools(PowerState::PoweredOn, ToolsState::NotInstalled),
                Step::Act(vec![Action::PowerOff]),
                Some(SourcePowerOff {
                    shutdown_guest_at: None,
                    hard_power_off_at: t(10),
                }),
            ),
            (
                "grace 0: hard at once even with tools",
                None,
                0,
                with_tools(PowerState::PoweredOn, ToolsState::Running),
                Step::Act(vec![Action::PowerOff]),
                Some(SourcePowerOff {
                    shutdown_guest_at: None,
                    hard_power_off_at: t(10),
                }),
            ),
            (
                "suspended: hard (no guest runs to shut down)",
                None,
                300,
                with_tools(PowerState::Suspended, ToolsState::Running),
                Step::Act(vec![Action::PowerOff]),
                Some(SourcePowerOff {
                    shutdown_guest_at: None,
                    hard_power_off_at: t(10),
                }),
            ),
            (
                "asked 8s ago, grace 300: wait",
                Some(SourcePowerOff {
                    shutdown_guest_at: t(2),
                    hard_power_off_at: None,
                }),
                300,
                with_tools(PowerState::PoweredOn, ToolsState::Running),
                Step::Wait {
                    requeue: Policy::default().source_poll + Duration::from_millis(100),
                },
                None,
            ),
            (
                "asked 8s ago, grace 10: wait the 2s left",
                Some(SourcePowerOff {
                    shutdown_guest_at: t(2),
                    hard_power_off_at: None,
                }),
                10,
                with_tools(PowerState::PoweredOn, ToolsState::Running),
                Step::Wait {
                    requeue: Duration::from_millis(2100),
                },
                None,
            ),
            (
                "asked 10s ago, grace 10: hard now",
                Some(SourcePowerOff {
                    shutdown_guest_at: t(0),
                    hard_power_off_at: None,
                }),
                10,
                with_tools(PowerState::PoweredOn, ToolsState::Running),
                Step::Act(vec![Action::PowerOff]),
                Some(SourcePowerOff {
                    shutdown_guest_at: t(0),
                    hard_power_off_at: t(10),
                }),
            ),
            (
                "hard asked before, still on: ask again",
                Some(SourcePowerOff {
                    shutdown_guest_at: t(0),
                    hard_power_off_at: t(5),
                }),
                10,
                with_tools(PowerState::PoweredOn, ToolsState::Running),
                Step::Act(vec![Action::PowerOff]),
                Some(SourcePowerOff {
                    shutdown_guest_at: t(0),
                    hard_power_off_at: t(5),
                }),
            ),
        ];
        for (name, done, grace, f, step, recorded) in cases {
            let o = decide(&scope(on_with(done, grace), Ok(f), 0));
            assert_eq!(o.step, step, "{name}");
            assert_eq!(o.record.power_off, recorded, "{name}");
            let v = o.conditions.iter().find(|c| c.type_ == Validated).unwrap();
            assert_eq!(v.status, Unknown, "{name}");
        }
    }

    #[test]
    fn the_validated_condition_says_how_the_source_went_off() {
        let t = |s: i64| Some(ts(s));
        let cases = [
            (
                Some(SourcePowerOff {
                    shutdown_guest_at: t(0),
                    hard_power_off_at: None,
                }),
                "the guest shut down through VMware Tools",
            ),
            (
                Some(SourcePowerOff {
                    shutdown_guest_at: t(0),
                    hard_power_off_at: t(5),
                }),
                "powered off hard: the guest did not shut down within 300s",
            ),
            (
                Some(SourcePowerOff {
                    shutdown_guest_at: None,
                    hard_power_off_at: t(5),
                }),
                "powered off hard: VMware Tools were not running",
            ),
            (None, "the source VM was off"),
        ];
        for (done, says) in cases {
            let o = decide(&scope(
                on_with(done, 300),
                Ok(facts(PowerState::PoweredOff)),
                0,
            ));
            assert_eq!(
                o.step,
                Step::Advance {
                    to: Phase::Converting
                }
            );
            let v = o.conditions.iter().find(|c| c.type_ == Validated).unwrap();
            assert_eq!((v.status, v.reason), (True, Reason::Validated));
            assert!(v.message.contains(says), "{} lacks {says}", v.message);
        }
    }

    #[test]
    fn the_tools_state_found_first_is_kept_after_our_own_shutdown() {
        let mut vmm = recorded(PowerState::PoweredOn);
        if let Some(src) = vmm.status.as_mut().and_then(|s| s.source.as_mut()) {
            src.vmware_tools = Some(ToolsState::Running);
        }
        let o = decide(&scope(
            vmm,
            Ok(with_tools(PowerState::PoweredOff, ToolsState::NotRunning)),
            0,
        ));
        let src = o.record.source.unwrap();
        assert_eq!(
            (src.power_state, src.vmware_tools),
            (Some(PowerState::PoweredOn), Some(ToolsState::Running))
        );
    }

    #[test]
    fn a_critical_concern_after_the_power_off_began_fails_instead_of_holding() {
        // Nothing touched: held in Pending.
        let mut f = facts(PowerState::PoweredOff);
        f.layout_problems = vec![ferry_vsphere::LayoutProblem::Shared {
            disk: "Hard disk 1".into(),
        }];
        assert!(matches!(
            step(migration("m"), Ok(f.clone())),
            Step::Hold { .. }
        ));
        // ferry asked the guest to shut down already: Pending would hide a source it touched,
        // so the migration fails (and the power rule may restore the source; no target exists).
        let mut touched = recorded(PowerState::PoweredOn);
        touched
            .status
            .get_or_insert_with(Default::default)
            .source_power_off = Some(ferry_crds::SourcePowerOff {
            shutdown_guest_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            )),
            ..Default::default()
        });
        assert_eq!(
            fail_reason(&step(touched, Ok(f))),
            Some((Reason::PreflightFailed, false))
        );
    }
}
