//! Validating: the guest passed the check spec.target.readiness asks for (the qemu guest agent
//! connected, the instance Running and Ready, or nothing); then the staging objects and the CDI
//! Secret are removed and the volumes and, last, the VM released from the migration; only then
//! does it succeed. KubeVirt's error states end it as they end Starting. Once the VM is released
//! the migration is complete: nothing fails it any more, and the power rule touches neither copy.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, GuestReady},
    HookPoint, Phase, Readiness, Reason, RunStrategy, VirtualMachineMigration, names,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use tracing::info;

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::console;
use super::credentials;
use super::health_gate::{self, Gate};
use super::hooks;
use super::io::Io;
use super::outcome::{Outcome, Step};
use super::scope::Scope;
use super::vm_start::on_trouble;
use super::world::{self, VmState, VmiState, staged_keys};
use crate::Result;
use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{Trouble, VirtualMachine, VirtualMachineInstance, VmiPhase};
use crate::children::{Ownership, secret};
use crate::ports::StagingLogin;
use crate::problem::Problem;

/// The Validating checkpoint.
#[derive(Debug)]
pub struct Validating;

/// What remains of ferry's own work once the guest is ready: what [`Action::Finish`] removes
/// or releases.
#[derive(Clone, Debug, Default)]
pub struct Leftovers {
    /// Keys of staged objects that still exist.
    pub staged: Vec<String>,
    /// The CDI S3 Secret (or the staging CA ConfigMap) of this migration still exists.
    pub cdi_secret: bool,
    /// Names of the migration's DataVolumes it has not recorded releasing.
    pub unreleased_dvs: Vec<String>,
    /// The staging login the staged objects are deleted with.
    pub login: Option<StagingLogin>,
}

impl Leftovers {
    /// Nothing left to do.
    fn is_empty(&self, vm: &VmState) -> bool {
        self.staged.is_empty()
            && !self.cdi_secret
            && self.unreleased_dvs.is_empty()
            && !matches!(
                vm,
                VmState::Ours {
                    released: false,
                    ..
                }
            )
    }
}

/// What Validating observes.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The VirtualMachine.
    pub vm: VmState,
    /// Its instance.
    pub vmi: VmiState,
    /// A KubeVirt error state of the VM.
    pub trouble: Option<Trouble>,
    /// What remains to clean and release; only looked at once the guest is ready and the VM not
    /// yet released (`None` otherwise), so that waiting for a guest costs two reads.
    pub leftovers: Option<Result<Leftovers, Problem>>,
    /// The serial console's last lines (or why they could not be read); read while a running
    /// guest keeps the migration waiting past [`CONSOLE_LOOK_AFTER`] (a console that says the
    /// guest cannot boot ends the wait), and once the guest is out of time, for the failure's
    /// message.
    pub console: Option<Result<Vec<String>, String>>,
    /// The health check's probe, made when one is due (see [`health_gate::due`]).
    pub probe: Option<health_gate::Probe>,
    /// The `postCutover` hook's Job, read while the hook holds a ready guest.
    pub hook: Option<hooks::Seen>,
}

/// What Validating does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Finish up: delete the staged objects and the CDI S3 Secret, and release the DataVolumes
    /// and then the VirtualMachine from the migration's ownership (deleting the migration record
    /// later must not delete the migrated VM). The VM's release is the last act: a released VM
    /// means everything else is done.
    Finish,
    /// Create the `postCutover` hook's Job.
    RunPostCutoverHook,
}

/// How long past the agent timeout a failure waits for the serial console to be readable.
pub const CONSOLE_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a running guest may keep the migration waiting before its console is looked at,
/// and then how often: a guest that boots is ready well within it (the lab's Debian guests reach
/// their agent in 12–15 s under TCG), so a guest that does costs no read.
pub const CONSOLE_LOOK_AFTER: std::time::Duration = std::time::Duration::from_secs(20);

/// Whether the guest has been in this phase longer than `limit` by the clock now.
fn in_phase_longer_than(io: Io<'_>, limit: std::time::Duration) -> bool {
    let entered = io.vmm.status.as_ref().and_then(|s| {
        let last = s.history.last()?;
        (last.phase == s.phase).then_some(last.entered_at.0)
    });
    let now = io.ctx.clock.now();
    entered
        .and_then(|t| now.duration_since(t).try_into().ok())
        .is_some_and(|waited: std::time::Duration| waited > limit)
}

/// Whether the console is read: a guest not ready whose instance is there, once it has had its
/// time, or while it runs past [`CONSOLE_LOOK_AFTER`]. Pure but for the clock.
fn console_due(io: Io<'_>, vmi: &VmiState) -> bool {
    match vmi {
        VmiState::Absent => false,
        VmiState::Present { phase, .. } => {
            in_phase_longer_than(io, io.ctx.policy.agent_timeout)
                || (*phase == VmiPhase::Running && in_phase_longer_than(io, CONSOLE_LOOK_AFTER))
        }
    }
}

/// Whether the guest passed the readiness check of `vmm`. Pure.
fn guest_ready(vmm: &VirtualMachineMigration, vmi: &VmiState) -> bool {
    match vmm.readiness() {
        Readiness::None => true,
        Readiness::Running => matches!(
            vmi,
            VmiState::Present {
                phase: VmiPhase::Running,
                ready: true,
                ..
            }
        ),
        Readiness::AgentConnected => matches!(
            vmi,
            VmiState::Present {
                phase: VmiPhase::Running,
                agent_connected: true,
                ..
            }
        ),
    }
}

impl Checkpoint for Validating {
    const PHASE: Phase = Phase::Validating;
    const CONDITIONS: &'static [ConditionType] = &[GuestReady];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::Vmi];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let world::KubeVirtState { vm, vmi, trouble } = world::kubevirt_state(io).await?;
        let ready = guest_ready(io.vmm, &vmi);
        // The hook first, then the health check, then the clean-up: each is read only once
        // the one before let the migration through.
        let hooked =
            ready && !released(&vm) && hooks::pending(io.vmm, HookPoint::PostCutover).is_some();
        let hook = if hooked {
            hooks::observe(io, HookPoint::PostCutover).await?
        } else {
            None
        };
        let probe = match health_gate::applies(io.vmm) {
            Some(hc)
                if ready
                    && !hooked
                    && !released(&vm)
                    && health_gate::due(io.vmm, io.ctx.clock.now()) =>
            {
                let instance = io
                    .read::<VirtualMachineInstance>(&names::vm_name(io.vmm))
                    .await?;
                Some(health_gate::probe(hc, instance.as_ref()).await)
            }
            _ => None,
        };
        let leftovers = if ready && !hooked && !released(&vm) && health_gate::clear(io.vmm) {
            Some(leftovers(io).await?)
        } else {
            None
        };
        let console = if !ready && console_due(io, &vmi) {
            let name = names::vm_name(io.vmm);
            match io.read::<VirtualMachineInstance>(&name).await? {
                Some(instance) => Some(console::read(io, &instance).await),
                None => None,
            }
        } else {
            None
        };
        Ok(Observed {
            vm,
            vmi,
            trouble,
            leftovers,
            console,
            probe,
            hook,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::Finish => finish(io, observed).await,
            Action::RunPostCutoverHook => hooks::create(io, HookPoint::PostCutover).await,
        }
    }

    fn on_actions_done(scope: &Scope<Observed>, planned: Outcome<Action>) -> Outcome<Action> {
        finished(scope, planned)
    }
}

/// Finishing is the last of ferry's work and its answers prove it done (every delete and
/// release answered): the migration succeeds with the same status write that records the
/// releases. A crash before that write finds the VM unreleased by the record and finishes again
/// (each step is idempotent). Pure.
fn finished(scope: &Scope<Observed>, planned: Outcome<Action>) -> Outcome<Action> {
    if planned.actions() != [Action::Finish] {
        return planned;
    }
    succeeded(scope).recording(planned.record)
}

/// The migration succeeds: the guest passed its readiness check and ferry's work is done.
/// Pure.
fn succeeded(scope: &Scope<Observed>) -> Outcome<Action> {
    let (reason, msg) = ready_reason(scope);
    Outcome::new(
        Step::Advance {
            to: Phase::Succeeded,
        },
        say::migrated(),
    )
    .with(GuestReady, True, reason, msg)
}

async fn leftovers(io: Io<'_>) -> Result<Result<Leftovers, Problem>> {
    // Ours by ferry's record (never by an owner reference), and still carrying our owner
    // reference: the release is what is left to do.
    let ours = |o: Option<Ownership>| matches!(o, Some(Ownership::Ours { .. }));
    // The CDI objects: recorded ones are known without a read (the delete's precondition is
    // their recorded uid); unrecorded ones are looked for, since one made just before a crash
    // carries only its stamp.
    let (secret_name, map_name) = (
        secret::s3_secret_name(io.vmm),
        secret::s3_ca_config_map_name(io.vmm),
    );
    let cdi_secret = io.record("Secret", &secret_name).is_some()
        || io.record("ConfigMap", &map_name).is_some()
        || ours(io.read::<Secret>(&secret_name).await?.map(|s| io.own(&s)))
        || ours(io.read::<ConfigMap>(&map_name).await?.map(|c| io.own(&c)));
    let keys = staged_keys(io.vmm);
    let mut unreleased_dvs = vec![];
    for i in 0..keys.len() {
        let name = names::datavolume_name(io.vmm, i);
        // Not released by the record: one whose owner reference is gone all the same (a status
        // lagging behind the release, or someone else's edit) is released again and recorded.
        if let Some(dv) = io.read::<DataVolume>(&name).await?
            && !io.released(&dv)
            && ours(Some(io.own(&dv)))
        {
            unreleased_dvs.push(name);
        }
    }
    let login = match credentials::staging_login(io).await? {
        Ok(l) => l,
        Err(p) => return Ok(Err(p)),
    };
    let mut staged = vec![];
    for k in keys {
        match io.ctx.staging.head(&login, &k).await {
            Ok(Some(_)) => staged.push(k),
            Ok(None) => {}
            Err(p) if p.reason == Reason::BucketNotFound => {}
            Err(p) => return Ok(Err(p)),
        }
    }
    Ok(Ok(Leftovers {
        staged,
        cdi_secret,
        unreleased_dvs,
        login: Some(login),
    }))
}

/// Deletes the staged objects and the CDI Secret, and releases the VM and DataVolumes: exactly
/// what the observation found.
async fn finish(io: Io<'_>, observed: &Observed) -> Result<Option<Problem>> {
    let Some(Ok(left)) = &observed.leftovers else {
        return Ok(None);
    };
    let ctx = io.ctx;
    if let Some(login) = &left.login {
        for k in &left.staged {
            if let Err(p) = ctx.staging.delete(login, k).await {
                return Ok(Some(p));
            }
        }
    }
    if left.cdi_secret {
        super::cleanup::delete_cdi_objects(io).await?;
    }
    let release = serde_json::json!({"metadata": {
        "ownerReferences": null,
        "labels": {names::RELEASED_LABEL: names::RELEASED_VALUE},
    }});
    for name in &left.unreleased_dvs {
        io.api::<DataVolume>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&release))
            .await?;
        ctx.metrics.write("patch", "DataVolume");
        io.mark_released::<DataVolume>(name);
    }
    // Last: from here on the migration is complete (see the power rule).
    if matches!(
        observed.vm,
        VmState::Ours {
            released: false,
            ..
        }
    ) {
        let name = names::vm_name(io.vmm);
        io.api::<VirtualMachine>()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
            .await?;
        ctx.metrics.write("patch", "VirtualMachine");
        io.mark_released::<VirtualMachine>(&name);
    }
    info!(migration = %io.vmm.metadata.name.as_deref().unwrap_or_default(), staged = left.staged.len(), "staging cleaned; VM and volumes released");
    Ok(None)
}

/// Whether Validating already released the VM (only it does, and last of all), by the
/// migration's own record of it. Pure.
fn released(vm: &VmState) -> bool {
    matches!(vm, VmState::Ours { released: true, .. })
}

/// Decides the Validating step: the first of these rules that applies. Pure.
///
/// # Guarantees
/// A released VM (ferry releases it only after the guest was ready and everything else was
/// done) advances to `Succeeded` whatever the guest does now: nothing fails a migration, nor
/// powers its source back on, after the hand-over.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    if let Some(o) = handed_over(scope) {
        return o;
    }
    if !guest_ready(&scope.vmm, &scope.world.vmi) {
        return vm_gone(scope)
            .or_else(|| kubevirt_trouble(scope))
            .or_else(|| guest_cannot_boot(scope))
            .or_else(|| guest_timed_out(scope))
            .unwrap_or_else(|| waiting_for_the_guest(scope));
    }
    post_hook(scope)
        .or_else(|| health(scope))
        .unwrap_or_else(|| clean_up_and_release(scope))
}

/// The guest is ready: the `postCutover` hook runs, and must succeed, before the health check
/// and the clean-up (a failure is a failed check: rolled back under `RollBack`).
fn post_hook(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    hooks::decide(
        scope,
        HookPoint::PostCutover,
        scope.world.hook.as_ref(),
        Action::RunPostCutoverHook,
        GuestReady,
        Phase::Validating,
    )
}

/// The guest is ready; its health check, when one applies and has not passed, holds the
/// migration: probing, passed (recorded, then the clean-up), or failed (a rollback or, with
/// `Keep`, a failure with the target left running).
fn health(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if health_gate::clear(&scope.vmm) {
        return None;
    }
    let hc = health_gate::applies(&scope.vmm)?;
    let before = scope
        .vmm
        .status
        .as_ref()
        .and_then(|s| s.health_check.as_ref());
    let record = |status: ferry_crds::HealthCheckStatus| super::outcome::Record {
        health: Some(status),
        ..super::outcome::Record::default()
    };
    Some(
        match health_gate::decide(hc, before, scope.world.probe.as_ref(), scope.now) {
            Gate::Passed(status) => {
                let msg = say::health_passed(hc, &status);
                Outcome::new(
                    Step::Wait {
                        requeue: std::time::Duration::ZERO,
                    },
                    msg.clone(),
                )
                .with(GuestReady, Unknown, Reason::HealthCheckPassed, msg)
                .recording(record(status))
            }
            Gate::Probing { status, requeue } => {
                let msg = say::health_probing(hc, &status);
                Outcome::new(Step::Wait { requeue }, msg.clone())
                    .with(GuestReady, Unknown, Reason::HealthChecking, msg)
                    .recording(record(status))
            }
            Gate::Failed { status, waited } => {
                let rolls_back = health_gate::rolls_back(&scope.vmm);
                let msg = say::health_failed(hc, &status, waited.as_secs(), rolls_back);
                Outcome::failure(
                    Reason::HealthCheckFailed,
                    msg,
                    true,
                    Phase::Validating,
                    GuestReady,
                )
                .recording(record(status))
            }
        },
    )
}

/// A released VM was handed over: ferry released it only after the guest was ready and all
/// else was done, so nothing the guest does now fails the migration.
fn handed_over(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    released(&scope.world.vm).then(|| succeeded(scope))
}

/// The VirtualMachine was deleted or is someone else's: only creating it again can help.
fn vm_gone(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    match scope.world.vm {
        VmState::Absent | VmState::Foreign => Some(Outcome::failure(
            Reason::GuestAgentTimeout,
            say::vm_gone(),
            true,
            Phase::CreatingVM,
            GuestReady,
        )),
        VmState::Ours { .. } => None,
    }
}

/// KubeVirt's own error states end Validating as they end Starting: after a short grace.
fn kubevirt_trouble(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let trouble = scope.world.trouble.as_ref();
    trouble.map(|t| on_trouble(scope, t, GuestReady))
}

/// A guest whose console says it will not come up by itself (its root disk not found, a
/// kernel panic, an emergency shell, no bootable disk) needs someone to look at it now, not at
/// the end of the agent timeout: the same failure, with the line that said so.
fn guest_cannot_boot(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let Some(Ok(lines)) = &scope.world.console else {
        return None;
    };
    let (line, whose) = console::cannot_boot(lines)?;
    Some(not_ready(
        scope,
        say::cannot_boot(whose, line, scope.in_phase_for().as_secs()),
    ))
}

/// `GuestNotReady`, retriable in Validating: `why`, then what the console said.
fn not_ready(scope: &Scope<Observed>, why: String) -> Outcome<Action> {
    let msg = format!("{why}{}", say::console(scope.world.console.as_ref()));
    Outcome::failure(
        Reason::GuestNotReady,
        msg,
        true,
        Phase::Validating,
        GuestReady,
    )
}

/// A guest not ready within the agent timeout needs someone to look at it; the reason names
/// the check that was not passed.
fn guest_timed_out(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let waited = scope.in_phase_for();
    if waited <= scope.policy.agent_timeout {
        return None;
    }
    // The console could not be read (its node's kubelet did not answer, say): the failure
    // waits a little for it, so that it says what the guest said; then goes without.
    if matches!(scope.world.console, Some(Err(_)))
        && waited <= scope.policy.agent_timeout + CONSOLE_GRACE
    {
        return None;
    }
    let secs = waited.as_secs();
    let msg = match readiness(scope) {
        Readiness::AgentConnected => say::no_agent_within(secs),
        Readiness::Running | Readiness::None => say::not_ready_within(secs),
    };
    Some(not_ready(scope, msg))
}

/// Otherwise the guest is on its way: wait, saying what for.
fn waiting_for_the_guest(scope: &Scope<Observed>) -> Outcome<Action> {
    let msg = match (&scope.world.vmi, readiness(scope)) {
        (
            VmiState::Present {
                phase: VmiPhase::Running,
                ..
            },
            Readiness::AgentConnected,
        ) => say::waiting_for_the_agent(),
        (
            VmiState::Present {
                phase: VmiPhase::Running,
                ..
            },
            _,
        ) => say::waiting_for_ready(),
        (VmiState::Present { phase, .. }, _) => say::waiting_while_instance_is(*phase),
        (VmiState::Absent, _) => say::waiting_without_instance(),
    };
    // A running guest is looked at again within CONSOLE_LOOK_AFTER: nothing in a watch says
    // that its console gave up.
    let requeue = scope.requeue_within(scope.policy.agent_timeout);
    let requeue = match scope.world.vmi {
        VmiState::Present {
            phase: VmiPhase::Running,
            ..
        } => requeue.min(CONSOLE_LOOK_AFTER),
        _ => requeue,
    };
    Outcome::new(Step::Wait { requeue }, msg.clone()).with(
        GuestReady,
        Unknown,
        Reason::InProgress,
        msg,
    )
}

/// Once the guest is ready, what is left of ferry's own work goes and the VM is released, last
/// of all; the migration succeeds only when nothing is left.
fn clean_up_and_release(scope: &Scope<Observed>) -> Outcome<Action> {
    let (reason, msg) = ready_reason(scope);
    let outcome = match &scope.world.leftovers {
        None => Outcome::new(
            Step::Wait {
                requeue: std::time::Duration::ZERO,
            },
            say::looking_at_leftovers(),
        ),
        Some(Err(p)) => Outcome::from_problem(scope, p, None),
        Some(Ok(left)) if !left.is_empty(&scope.world.vm) => Outcome::new(
            Step::Act(vec![Action::Finish]),
            say::removing_and_releasing(),
        ),
        Some(Ok(_)) => Outcome::new(
            Step::Advance {
                to: Phase::Succeeded,
            },
            say::migrated(),
        ),
    };
    outcome.with(GuestReady, True, reason, msg)
}

/// The readiness the migration asks for.
fn readiness(scope: &Scope<Observed>) -> Readiness {
    scope.vmm.readiness()
}

/// GuestReady's reason and message once the guest passed the readiness check. Pure.
fn ready_reason(scope: &Scope<Observed>) -> (Reason, String) {
    let health = scope
        .vmm
        .status
        .as_ref()
        .and_then(|s| s.health_check.as_ref());
    if let (Some(hc), Some(status)) = (health_gate::applies(&scope.vmm), health) {
        return (Reason::HealthCheckPassed, say::health_passed(hc, status));
    }
    match readiness(scope) {
        Readiness::None if scope.vmm.final_run_strategy() == RunStrategy::Halted => {
            (Reason::NotChecked, say::halted_nothing_checked())
        }
        Readiness::None => (Reason::NotChecked, say::nothing_checked()),
        Readiness::Running => (Reason::VMReady, say::running_and_ready()),
        Readiness::AgentConnected => (Reason::GuestAgentConnected, say::agent_connected()),
    }
}

/// The words Validating says, in conditions, failures and Events.
mod say {
    use crate::apis::kubevirt::VmiPhase;
    use ferry_crds::{HealthCheck, HealthCheckStatus};

    pub(super) fn migrated() -> String {
        "migrated".into()
    }

    pub(super) fn vm_gone() -> String {
        "the VirtualMachine is gone; raise spec.retry to create it again".into()
    }

    pub(super) fn no_agent_within(secs: u64) -> String {
        format!(
            "the guest agent did not connect within {secs}s; check that the guest boots and runs qemu-guest-agent (or set spec.target.readiness: Running), then raise spec.retry"
        )
    }

    pub(super) fn not_ready_within(secs: u64) -> String {
        format!(
            "the VirtualMachineInstance was not Running and Ready within {secs}s; check the VM's events, then raise spec.retry"
        )
    }

    pub(super) fn cannot_boot(whose: &str, line: &str, secs: u64) -> String {
        format!(
            "the guest cannot boot: {whose} said \"{line}\" after {secs}s; check its disks' bus and drivers (spec.conversion.guest converts a VMware-only guest), then raise spec.retry"
        )
    }

    /// The serial console's last lines, as the end of a failure's message.
    pub(super) fn console(read: Option<&Result<Vec<String>, String>>) -> String {
        match read {
            Some(Ok(lines)) if !lines.is_empty() => {
                format!(". The serial console's last lines:\n{}", lines.join("\n"))
            }
            Some(Ok(_)) => ". The serial console is empty".into(),
            Some(Err(why)) => format!(". The serial console could not be read: {why}"),
            None => String::new(),
        }
    }

    pub(super) fn waiting_for_the_agent() -> String {
        "waiting for the guest agent".into()
    }

    pub(super) fn waiting_for_ready() -> String {
        "waiting for the VirtualMachineInstance to be Ready".into()
    }

    pub(super) fn waiting_while_instance_is(phase: VmiPhase) -> String {
        format!("waiting for the guest: the VirtualMachineInstance is {phase}")
    }

    pub(super) fn waiting_without_instance() -> String {
        "waiting for the guest: no VirtualMachineInstance".into()
    }

    pub(super) fn health_passed(hc: &HealthCheck, s: &HealthCheckStatus) -> String {
        format!(
            "the guest is ready and its health check ({}) answered {} time(s) in a row: {}",
            hc.describe(),
            s.successes,
            s.last_result
        )
    }

    pub(super) fn health_probing(hc: &HealthCheck, s: &HealthCheckStatus) -> String {
        let last = if s.last_result.is_empty() {
            String::new()
        } else {
            format!("; last probe: {}", s.last_result)
        };
        format!(
            "the guest is ready; probing its health check ({}): {} of {} in a row answered after {} probe(s){last}",
            hc.describe(),
            s.successes,
            hc.success_threshold,
            s.probes
        )
    }

    pub(super) fn health_failed(
        hc: &HealthCheck,
        s: &HealthCheckStatus,
        secs: u64,
        rolls_back: bool,
    ) -> String {
        let then = if rolls_back {
            "rolling back: the target is stopped, then the source powered back on; raise spec.retry to migrate again from the source"
        } else {
            "the target is left running (onHealthCheckFailure: Keep); raise spec.retry to probe again"
        };
        format!(
            "the health check ({}) did not answer within {secs}s ({} probe(s)); last probe: {}; {then}",
            hc.describe(),
            s.probes,
            s.last_result
        )
    }

    pub(super) fn looking_at_leftovers() -> String {
        "looking at what is left to clean up".into()
    }

    pub(super) fn removing_and_releasing() -> String {
        "removing the staged images and releasing the VM".into()
    }

    pub(super) fn halted_nothing_checked() -> String {
        "readiness None (runStrategy Halted): the VM is left stopped, nothing checked".into()
    }

    pub(super) fn nothing_checked() -> String {
        "readiness None: the VM was created with its run strategy, nothing checked".into()
    }

    pub(super) fn running_and_ready() -> String {
        "readiness Running: the VirtualMachineInstance is Running and Ready (no guest agent needed)"
            .into()
    }

    pub(super) fn agent_connected() -> String {
        "readiness AgentConnected: the guest agent connected".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::kubevirt::KvError;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    /// Our VM, not released yet.
    fn ours() -> VmState {
        VmState::Ours {
            run_strategy: Some("Always".into()),
            released: false,
        }
    }

    /// Our VM, released by an earlier Finish.
    fn released_vm() -> VmState {
        VmState::Ours {
            run_strategy: Some("Always".into()),
            released: true,
        }
    }

    /// A VMI in `phase`, Ready and with its agent as given.
    fn vmi(phase: &str, ready: bool, agent: bool) -> VmiState {
        VmiState::Present {
            phase: serde_json::from_value(serde_json::json!(phase)).unwrap(),
            ready,
            agent_connected: agent,
            reason: None,
        }
    }

    fn outcome(
        strategy: RunStrategy,
        readiness: Option<Readiness>,
        vm: VmState,
        vmi: VmiState,
        trouble: Option<Trouble>,
        leftovers: Result<bool, Problem>,
        elapsed: i64,
    ) -> Outcome<Action> {
        let mut vmm = migration("m").with_phase(Phase::Validating);
        vmm.spec.target.template.run_strategy = strategy;
        vmm.spec.target.template.readiness = readiness;
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Validating, 1, &ts(0));
        }
        let world = Observed {
            leftovers: guest_ready(&vmm, &vmi).then(|| {
                leftovers.map(|left| Leftovers {
                    cdi_secret: left,
                    ..Leftovers::default()
                })
            }),
            vm,
            vmi,
            trouble,
            console: None,
            probe: None,
            hook: None,
        };
        decide(&Scope {
            vmm,
            now: ts(elapsed).0,
            policy: Policy::default(),
            retries: 0,
            world,
        })
    }

    fn step_with(
        strategy: RunStrategy,
        readiness: Option<Readiness>,
        vm: VmState,
        vmi: VmiState,
        leftovers: Result<bool, Problem>,
        elapsed: i64,
    ) -> Step<Action> {
        outcome(strategy, readiness, vm, vmi, None, leftovers, elapsed).step
    }

    fn agent(vmi: VmiState, leftovers: Result<bool, Problem>) -> Step<Action> {
        step_with(
            RunStrategy::Always,
            Some(Readiness::AgentConnected),
            ours(),
            vmi,
            leftovers,
            5,
        )
    }

    #[test]
    fn table() {
        assert!(matches!(
            agent(vmi("Running", true, false), Ok(true)),
            Step::Wait { .. }
        ));
        assert!(matches!(
            agent(VmiState::Absent, Ok(true)),
            Step::Wait { .. }
        ));
        assert_eq!(
            agent(vmi("Running", true, true), Ok(true)),
            Step::Act(vec![Action::Finish])
        );
        assert_eq!(
            agent(vmi("Running", true, true), Ok(false)),
            Step::Act(vec![Action::Finish]),
            "staging is clean, the VM is still to be released"
        );
        assert_eq!(
            step_with(
                RunStrategy::Always,
                Some(Readiness::AgentConnected),
                released_vm(),
                vmi("Running", true, true),
                Ok(false),
                5
            ),
            Step::Advance {
                to: Phase::Succeeded
            }
        );
        assert!(matches!(
            agent(
                vmi("Running", true, true),
                Err(Problem::transient(Reason::StagingUnavailable, "x"))
            ),
            Step::Retry { .. }
        ));
        let late = Policy::default().agent_timeout.as_secs() as i64 + 1;
        assert!(matches!(
            step_with(
                RunStrategy::Always,
                Some(Readiness::AgentConnected),
                ours(),
                vmi("Running", true, false),
                Ok(true),
                late
            ),
            Step::Fail {
                reason: Reason::GuestNotReady,
                resume: Phase::Validating,
                ..
            }
        ));
        assert_eq!(
            step_with(
                RunStrategy::Halted,
                None,
                released_vm(),
                VmiState::Absent,
                Ok(false),
                5
            ),
            Step::Advance {
                to: Phase::Succeeded
            }
        );
        assert!(matches!(
            step_with(
                RunStrategy::Always,
                None,
                VmState::Absent,
                VmiState::Absent,
                Ok(false),
                5
            ),
            Step::Fail {
                resume: Phase::CreatingVM,
                ..
            }
        ));
    }

    /// The decision `elapsed` seconds into Validating for a running instance whose agent has not
    /// connected (readiness AgentConnected), its console read as `console`.
    fn agentless_running(
        elapsed: i64,
        console: Option<Result<Vec<String>, String>>,
    ) -> Outcome<Action> {
        let mut vmm = migration("m").with_phase(Phase::Validating);
        vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Validating, 1, &ts(0));
        }
        decide(&Scope {
            vmm,
            now: ts(elapsed).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed {
                vm: ours(),
                vmi: vmi("Running", true, false),
                trouble: None,
                leftovers: None,
                console,
                probe: None,
                hook: None,
            },
        })
    }

    /// The decision for a ready guest (readiness Running) with a TCP health check of 60 s and
    /// the status `health`, the probe `probe` made at `at` seconds.
    fn gated(
        keep: bool,
        health: Option<ferry_crds::HealthCheckStatus>,
        probe: Option<health_gate::Probe>,
        at: i64,
    ) -> (VirtualMachineMigration, Outcome<Action>) {
        let mut vmm = migration("m").with_phase(Phase::Validating);
        let t = &mut vmm.spec.target.template;
        t.readiness = Some(Readiness::Running);
        t.health_check = Some(
            serde_json::from_value(
                serde_json::json!({"tcp": {"port": 8080}, "timeoutSeconds": 60}),
            )
            .unwrap(),
        );
        t.on_health_check_failure = keep.then_some(ferry_crds::OnHealthCheckFailure::Keep);
        if let Some(s) = vmm.status.as_mut() {
            s.health_check = health;
        }
        let o = decide(&Scope {
            vmm: vmm.clone(),
            now: ts(at).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed {
                vm: ours(),
                vmi: vmi("Running", true, false),
                trouble: None,
                leftovers: Some(Ok(Leftovers::default())),
                console: None,
                probe,
                hook: None,
            },
        });
        (vmm, o)
    }

    fn refused() -> Option<health_gate::Probe> {
        Some(health_gate::Probe {
            ok: false,
            said: "tcp 127.0.3.4:8080: Connection refused".into(),
        })
    }

    #[test]
    fn a_health_check_holds_a_ready_guest_and_one_that_never_answers_rolls_it_back() {
        // Ready, first probe refused: no clean-up, no release; the probe is recorded.
        let (_, o) = gated(false, None, refused(), 0);
        assert!(matches!(o.step, Step::Wait { .. }), "{:?}", o.step);
        let h = o.record.health.clone().unwrap();
        assert_eq!((h.probes, h.successes, h.passed), (1, 0, false));
        assert_eq!(o.conditions[0].reason, Reason::HealthChecking);
        // Past the timeout, still refused: a rollback, the status RolledBack with the target to
        // be stopped first (whatever restorePowerState says).
        let (vmm, o) = gated(false, Some(h.clone()), refused(), 61);
        let Step::Fail {
            reason: Reason::HealthCheckFailed,
            ..
        } = o.step
        else {
            panic!("{:?}", o.step)
        };
        assert!(o.message.contains("Connection refused") && o.message.contains("rolling back"));
        let s = super::super::status::after_outcome(&vmm, &o, &ts(61));
        assert_eq!(s.phase, Phase::RolledBack);
        let restore = s.source_power_restore.expect("the target is stopped first");
        assert!(restore.result.is_none());
        // With Keep: Failed, the target left as it is.
        let (vmm, o) = gated(true, Some(h), refused(), 61);
        assert!(o.message.contains("left running"), "{}", o.message);
        let s = super::super::status::after_outcome(&vmm, &o, &ts(61));
        assert_eq!(s.phase, Phase::Failed);
        assert!(s.source_power_restore.is_none());
    }

    #[test]
    fn a_health_check_that_answered_lets_the_clean_up_and_release_go_on() {
        let ok = Some(health_gate::Probe {
            ok: true,
            said: "tcp 127.0.3.4:8080: connected".into(),
        });
        let (_, o) = gated(false, None, ok, 0);
        let h = o.record.health.clone().unwrap();
        assert!(h.passed && o.conditions[0].reason == Reason::HealthCheckPassed);
        assert!(o.actions().is_empty(), "recorded first");
        let (_, o) = gated(false, Some(h), None, 1);
        // The VM is still to be released: the finish, with GuestReady saying what passed.
        assert_eq!(o.actions(), [Action::Finish]);
        assert_eq!(o.conditions[0].reason, Reason::HealthCheckPassed);
    }

    #[test]
    fn a_console_that_says_the_guest_cannot_boot_fails_it_before_its_timeout() {
        let at = agentless_running;
        let soon = CONSOLE_LOOK_AFTER.as_secs() as i64 + 25;
        assert!(soon < Policy::default().agent_timeout.as_secs() as i64);
        let gave_up = vec![
            "Begin: Waiting for root file system ... done.".to_owned(),
            "Gave up waiting for root file system device.  Common problems:".to_owned(),
            "(initramfs)".to_owned(),
        ];
        let o = at(soon, Some(Ok(gave_up)));
        let Step::Fail {
            reason: Reason::GuestNotReady,
            resume: Phase::Validating,
            ..
        } = o.step
        else {
            panic!("{:?}", o.step)
        };
        assert!(
            o.message
                .contains("initramfs-tools said \"Gave up waiting for root file system device.")
                && o.message.contains("after 45s")
                && o.message.ends_with("(initramfs)"),
            "{}",
            o.message
        );
        // A guest still on its way, or a console not read: the wait goes on, looked at again
        // within CONSOLE_LOOK_AFTER while the instance runs.
        for console in [
            Some(Ok(vec!["Booting from Hard Disk...".to_owned()])),
            Some(Err("connection refused".to_owned())),
            None,
        ] {
            let Step::Wait { requeue } = at(soon, console.clone()).step else {
                panic!("{console:?}")
            };
            assert!(requeue <= CONSOLE_LOOK_AFTER, "{requeue:?}");
        }
    }

    #[test]
    fn an_unreadable_console_holds_the_failure_for_its_grace_only() {
        let late = Policy::default().agent_timeout.as_secs() as i64 + 1;
        let at = |elapsed, console| agentless_running(elapsed, console).step;
        let unreadable = || Some(Err("connection refused".to_owned()));
        assert!(matches!(at(late, unreadable()), Step::Wait { .. }));
        let past = late + CONSOLE_GRACE.as_secs() as i64;
        assert!(matches!(
            at(past, unreadable()),
            Step::Fail {
                reason: Reason::GuestNotReady,
                ..
            }
        ));
        assert!(matches!(
            at(late, Some(Ok(vec!["(initramfs)".into()]))),
            Step::Fail {
                reason: Reason::GuestNotReady,
                ..
            }
        ));
    }

    #[test]
    fn a_guest_out_of_time_says_what_its_console_said() {
        let lines = vec![
            "Gave up waiting for root file system device.".to_owned(),
            "(initramfs)".to_owned(),
        ];
        let m = say::console(Some(&Ok(lines)));
        assert!(
            m.ends_with("last lines:\nGave up waiting for root file system device.\n(initramfs)"),
            "{m}"
        );
        assert_eq!(
            say::console(Some(&Ok(vec![]))),
            ". The serial console is empty"
        );
        assert!(say::console(Some(&Err("no pod".into()))).contains("could not be read: no pod"));
        assert_eq!(say::console(None), "");
    }

    /// What each readiness waits for, and the reason GuestReady then gives.
    #[test]
    fn each_readiness_checks_its_own_thing_and_says_which() {
        let running_no_agent = || vmi("Running", true, false);
        type Case = (
            &'static str,
            RunStrategy,
            Option<Readiness>,
            VmiState,
            Option<Reason>,
        );
        let cases: Vec<Case> = vec![
            (
                "default: Running and Ready suffices, no agent needed",
                RunStrategy::Always,
                None,
                running_no_agent(),
                Some(Reason::VMReady),
            ),
            (
                "Running but not Ready: waits",
                RunStrategy::Always,
                Some(Readiness::Running),
                vmi("Running", false, false),
                None,
            ),
            (
                "Scheduled: waits",
                RunStrategy::Always,
                None,
                vmi("Scheduled", false, false),
                None,
            ),
            (
                "AgentConnected without an agent: waits",
                RunStrategy::Always,
                Some(Readiness::AgentConnected),
                running_no_agent(),
                None,
            ),
            (
                "AgentConnected with the agent",
                RunStrategy::Always,
                Some(Readiness::AgentConnected),
                vmi("Running", true, true),
                Some(Reason::GuestAgentConnected),
            ),
            (
                "None: nothing checked, no instance needed",
                RunStrategy::Always,
                Some(Readiness::None),
                VmiState::Absent,
                Some(Reason::NotChecked),
            ),
            (
                "Manual: None by default",
                RunStrategy::Manual,
                None,
                VmiState::Absent,
                Some(Reason::NotChecked),
            ),
            (
                "Halted: None by default",
                RunStrategy::Halted,
                None,
                VmiState::Absent,
                Some(Reason::NotChecked),
            ),
        ];
        for (name, strategy, readiness, vmi, want) in cases {
            let o = outcome(strategy, readiness, ours(), vmi, None, Ok(false), 5);
            let c = o.conditions.iter().find(|c| c.type_ == GuestReady).unwrap();
            match want {
                Some(r) => {
                    assert_eq!((c.status, c.reason), (True, r), "{name}");
                    assert_eq!(o.step, Step::Act(vec![Action::Finish]), "{name}");
                }
                None => {
                    assert_eq!(
                        (c.status, c.reason),
                        (Unknown, Reason::InProgress),
                        "{name}"
                    );
                    assert!(matches!(o.step, Step::Wait { .. }), "{name}");
                }
            }
        }
    }

    /// The release is the last act of Validating: afterwards no guest trouble, timeout or
    /// missing leftover check fails the migration (a cancel then gives way, see the power rule).
    #[test]
    fn after_the_release_nothing_fails_the_migration() {
        let late = Policy::default().agent_timeout.as_secs() as i64 + 100;
        let trouble = Some(Trouble {
            error: KvError::CrashLoopBackOff,
            message: "the VirtualMachineInstance failed 2 time(s) in a row".into(),
            since: None,
        });
        for (name, vmi) in [
            ("the agent went away", vmi("Running", true, false)),
            ("the instance is gone", VmiState::Absent),
            ("it failed", vmi("Failed", false, false)),
        ] {
            let o = outcome(
                RunStrategy::Always,
                Some(Readiness::AgentConnected),
                released_vm(),
                vmi,
                trouble.clone(),
                Err(Problem::permanent(Reason::SecretNotFound, "gone")),
                late,
            );
            assert_eq!(
                o.step,
                Step::Advance {
                    to: Phase::Succeeded
                },
                "{name}"
            );
            let c = o.conditions.iter().find(|c| c.type_ == GuestReady).unwrap();
            assert_eq!(
                (c.status, c.reason),
                (True, Reason::GuestAgentConnected),
                "{name}"
            );
        }
    }

    #[test]
    fn a_kubevirt_error_while_waiting_for_the_guest_fails_with_its_reason() {
        let grace = Policy::default().kubevirt_error_grace.as_secs() as i64;
        let o = outcome(
            RunStrategy::Always,
            None,
            ours(),
            VmiState::Absent,
            Some(Trouble {
                error: KvError::CrashLoopBackOff,
                message: "the VirtualMachineInstance failed 2 time(s) in a row".into(),
                since: None,
            }),
            Ok(false),
            grace,
        );
        assert!(
            matches!(&o.step, Step::Fail { reason: Reason::CrashLoopBackOff, resume: Phase::Validating, message, .. } if message.contains("2 time(s)")),
            "{:?}",
            o.step
        );
    }
}
