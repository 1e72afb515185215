//! The power rule: the source VM is powered back on only once the target is proven not running.
//! One pure decision ([`decide`]) on a fresh observation of the target ([`observe`]), carried out
//! across reconciles by [`restore`], the only place ferry powers a source VM on: a cancel, a
//! failure under `restorePowerState: OnCancelOrFailure` and the deletion of an unfinished
//! migration all come here.
//!
//! # Why it is safe
//!
//! * **Proof, not phase.** "Not running" is read from the world, never assumed from
//!   `status.phase`: a VirtualMachineInstance may exist whatever the status says (KubeVirt keeps
//!   starting an instance after ferry gave up on Starting). The target is proven not running when
//!   no instance that could be this migration's copy exists *and* nothing will start one: no VM of
//!   ours under the target name, or ours with `runStrategy: Halted` (or being deleted, which
//!   KubeVirt's VM controller turns into a stop too). An instance counts when it carries this
//!   migration's uid label (KubeVirt copies it from the VM template ferry wrote), or when our VM
//!   holds the name (a VM's instance has the VM's name): a forged label can only make ferry wait.
//! * **Fresh reads, VM first.** The VM and then the instance are read from the API, never from the
//!   watch caches: a cache may still show an instance that is gone (harmless: ferry waits) but
//!   also a run strategy or release that changed. An instance KubeVirt creates after the VM was
//!   read as `Halted` needs someone to restart the VM after that read. What no read can show is
//!   an instance KubeVirt's VM controller was creating from an older run strategy at the very
//!   moment ferry halted the VM: ferry never powers on in the reconcile that halted, and such an
//!   instance is stopped by KubeVirt's next sync of the halted VM before its guest boots.
//! * **Stop the target first, then the source.** A deleting instance is still running: virt-handler
//!   keeps it `Running` while the guest shuts down, up to its `terminationGracePeriodSeconds`
//!   (KubeVirt's `DefaultGracePeriodSeconds`, 30 s, when unset), and virt-controller removes it
//!   only once its virt-launcher pod is gone (the pod's grace is padded twice by 15 s). So ferry
//!   halts the VM and waits for the instance to be *gone*.
//! * **Bounded, and the clock survives restarts.** The wait counts from
//!   `status.sourcePowerRestore.targetStoppingSince`, written in the status write of the
//!   reconcile that first halted the VM or saw it stopping; a crash before that write only makes
//!   the wait start later. Past the instance's grace plus `Policy::target_stop_margin` ferry gives
//!   up: the source stays off, the migration ends with reason `TargetStillRunning`, and ferry
//!   never powers that source on by itself afterwards (the person who makes sure the instance is
//!   gone powers it on).
//! * **After the release, nothing.** Once Validating released the VM (its owner reference
//!   removed, its volumes released before it) the migration is complete: the rule answers
//!   [`Verdict::Released`] and neither copy is touched.
//! * **Idempotent.** A crash after the halt re-observes a halted VM; after the power-on, a
//!   powered-on source (vSphere's power-on is a no-op then). Everything ferry needs to resume is in
//!   `status.sourcePowerRestore`.

use std::time::Duration;

use ferry_crds::source::{PowerRestoreResult, SourcePowerRestore};
use ferry_crds::{Phase, PowerState, VirtualMachineMigration, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use tracing::info;

use super::credentials;
use super::io::Io;
use super::world::{self, VmState, vmm_uid_label};
use crate::apis::kubevirt::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use crate::events::{self, Note};
use crate::kubeio::delete_exact;
use crate::{Error, Result};

/// KubeVirt's grace for an instance that names none (`DefaultGracePeriodSeconds`,
/// `staging/src/kubevirt.io/api/core/v1/types.go`).
pub const KUBEVIRT_DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// The target VirtualMachine as the rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetVm {
    /// No VirtualMachine under the target name.
    Absent,
    /// Someone else's VirtualMachine: ferry never stops it.
    Foreign,
    /// Ours, released to its owner by Validating: the migration completed.
    Released,
    /// Ours, still owned by the migration.
    Ours {
        /// `runStrategy: Halted`, or being deleted: KubeVirt starts no instance of it.
        halted: bool,
        /// The version read, the precondition of the halt.
        resource_version: Option<String>,
    },
}

/// The target's instance as the rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instance {
    /// No instance under the target name that could run this migration's copy.
    Gone,
    /// One that may run it (a deleting one too: its guest runs until it is gone).
    Present {
        /// Its uid (the precondition of a delete).
        uid: String,
        /// Its phase as KubeVirt reports it.
        phase: VmiPhase,
        /// Being deleted (KubeVirt is stopping it).
        deleting: bool,
        /// Its `spec.terminationGracePeriodSeconds` ([`KUBEVIRT_DEFAULT_GRACE`] when unset).
        grace: Duration,
    },
}

impl Instance {
    /// How long KubeVirt may take to stop it.
    pub fn grace(&self) -> Duration {
        match self {
            Instance::Gone => KUBEVIRT_DEFAULT_GRACE,
            Instance::Present { grace, .. } => *grace,
        }
    }
}

/// What is observed of the target, fresh from the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The VirtualMachine under the target name.
    pub vm: TargetVm,
    /// Its instance.
    pub instance: Instance,
}

/// What the rule says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The VM was released: touch neither copy; the source stays as it is.
    Released,
    /// The target is proven not running: the source may be powered on now.
    PowerOn,
    /// Our VM may (re)start an instance: set `runStrategy: Halted` first.
    Halt,
    /// An instance of ours outlived its VM and nobody stops it: delete it.
    DeleteInstance,
    /// The instance is stopping (or KubeVirt is about to stop it): look again within `left`.
    Wait {
        /// Until the bound.
        left: Duration,
    },
    /// The bound passed and the target is not proven stopped: the source stays off.
    GiveUp {
        /// How long ferry waited.
        waited: Duration,
    },
}

/// Once ferry began stopping the target, how long an absent instance is not trusted yet: long
/// enough for KubeVirt to finish an instance its VM controller was creating from the older run
/// strategy at the moment of the halt (one create call), so that it shows in a fresh read.
/// Timestamps are whole seconds, so this is at least one real second.
pub const SETTLE: Duration = Duration::from_secs(2);

/// The power rule. Pure.
///
/// # Guarantees
/// * [`Verdict::PowerOn`] only when no instance exists that could run the copy and nothing will
///   start one (no VM of ours, or ours halted or being deleted) — never while an instance exists
///   or might be started by our VM; and, when ferry had to stop the target (`since`), not before
///   [`SETTLE`] passed since.
/// * [`Verdict::Released`] whenever our VM was released: nothing is done to either copy.
/// * Otherwise [`Verdict::GiveUp`] once `since` (when ferry began stopping the target) lies the
///   instance's grace plus `margin` in the past; never on a first look (`since` is `None`), and
///   never when the target is proven stopped.
/// * Before that: halt our VM when it is not halted; delete an instance of ours whose VM is gone
///   and that nobody deletes; else wait.
pub fn decide(
    target: &Target,
    since: Option<Timestamp>,
    now: Timestamp,
    margin: Duration,
) -> Verdict {
    let halted = match &target.vm {
        TargetVm::Released => return Verdict::Released,
        TargetVm::Absent | TargetVm::Foreign => true,
        TargetVm::Ours { halted, .. } => *halted,
    };
    let waited = since.map(|s| Duration::try_from(now.duration_since(s)).unwrap_or_default());
    if halted && target.instance == Instance::Gone {
        return match waited {
            Some(w) if w < SETTLE => Verdict::Wait { left: SETTLE - w },
            Some(_) | None => Verdict::PowerOn,
        };
    }
    let bound = target.instance.grace() + margin;
    if let Some(w) = waited
        && w >= bound
    {
        return Verdict::GiveUp { waited: w };
    }
    let waited = waited.unwrap_or_default();
    if !halted {
        return Verdict::Halt;
    }
    match (&target.vm, &target.instance) {
        (
            TargetVm::Absent,
            Instance::Present {
                deleting: false, ..
            },
        ) => Verdict::DeleteInstance,
        _ => Verdict::Wait {
            left: bound - waited,
        },
    }
}

/// Whether there is anything for ferry to power on: the source was on before ferry powered it
/// off. Pure.
pub fn wanted(vmm: &VirtualMachineMigration) -> bool {
    let original = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.power_state);
    original == Some(PowerState::PoweredOn) && vmm.spec.source.power.power_off
}

/// The record of a power-on requested `now` (a failure under OnCancelOrFailure), or `None` when
/// there is nothing to power on. Pure.
pub fn requested(vmm: &VirtualMachineMigration, now: &Time) -> Option<SourcePowerRestore> {
    wanted(vmm).then(|| SourcePowerRestore {
        requested_at: now.clone(),
        target_stopping_since: None,
        result: None,
        finished_at: None,
        message: Some("stopping the target before the source VM is powered back on".into()),
    })
}

/// The record of a rollback requested `now`: the target is stopped whatever the source was,
/// and the source powered back on only when [`wanted`] (ferry powered it off). Pure.
pub fn requested_for_rollback(now: &Time) -> SourcePowerRestore {
    SourcePowerRestore {
        requested_at: now.clone(),
        target_stopping_since: None,
        result: None,
        finished_at: None,
        message: Some("rolling back: stopping the target first".into()),
    }
}

/// Whether `record` is a power-on still under way.
pub fn is_pending(record: Option<&SourcePowerRestore>) -> bool {
    record.is_some_and(|r| r.result.is_none())
}

/// What [`restore`] did in one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The record to write: `None` when there is nothing to power on.
    pub record: Option<SourcePowerRestore>,
    /// The target VM was released: a cancel arrived after the hand-over and must not go on.
    pub released: bool,
    /// Still stopping the target: look again within this.
    pub pending: Option<Duration>,
}

impl Report {
    /// The Warning of a power-on that ended without powering the source on, when it just ended.
    /// Pure.
    pub fn notes(&self, before: Option<&SourcePowerRestore>) -> Vec<Note> {
        let Some(r) = &self.record else {
            return vec![];
        };
        let newly = before.is_none_or(|b| b.result.is_none());
        match r.result {
            Some(
                PowerRestoreResult::TargetStillRunning
                | PowerRestoreResult::PowerOnFailed
                | PowerRestoreResult::TargetReleased,
            ) if newly => vec![events::cleanup_incomplete(&format!(
                "source power: {}",
                r.message.as_deref().unwrap_or_default()
            ))],
            Some(
                PowerRestoreResult::PoweredOn
                | PowerRestoreResult::TargetStopped
                | PowerRestoreResult::TargetStillRunning
                | PowerRestoreResult::PowerOnFailed
                | PowerRestoreResult::TargetReleased,
            )
            | None => vec![],
        }
    }
}

/// The recorded power-on of `vmm`, if any.
pub fn record(vmm: &VirtualMachineMigration) -> Option<&SourcePowerRestore> {
    vmm.status.as_ref()?.source_power_restore.as_deref()
}

/// The power step of a cancel (`wanted`: the policy asks to restore power on a cancel), a
/// delete, or a failure's pending power-on: observes the target fresh, decides by the rule,
/// carries the verdict out, and says what to record.
///
/// # Guarantees
/// * A power-on that ended (its `result` recorded) is never carried out again: no I/O.
/// * Nothing is observed when nothing is to be powered on, except in Validating, where a cancel
///   must learn whether the VM was released.
/// * The source is powered on only on [`Verdict::PowerOn`], by vSphere's idempotent power-on.
///
/// # Errors
/// Kubernetes API errors (a halt that lost a race is [`Error::Conflict`]).
pub async fn restore(io: Io<'_>, wanted_by_policy: bool, now: &Time) -> Result<Report> {
    let vmm = io.vmm;
    let before = record(vmm);
    if before.is_some_and(|r| r.result.is_some()) {
        return Ok(Report {
            record: before.cloned(),
            ..Report::default()
        });
    }
    let wanted = before.is_some() || (wanted_by_policy && wanted(vmm));
    if !wanted && vmm.phase() != Phase::Validating {
        return Ok(Report::default());
    }
    let target = observe(io).await?;
    let since = before
        .and_then(|r| r.target_stopping_since.as_ref())
        .map(|t| t.0);
    let verdict = decide(&target, since, now.0, io.ctx.policy.target_stop_margin);
    if !wanted {
        return Ok(Report {
            released: verdict == Verdict::Released,
            ..Report::default()
        });
    }
    let powered = match &verdict {
        Verdict::Halt => {
            halt(io, &target).await?;
            None
        }
        Verdict::DeleteInstance => {
            if let Instance::Present { uid, .. } = &target.instance {
                let api = io.api::<VirtualMachineInstance>();
                delete_exact(&io.ctx.metrics, &api, &names::vm_name(vmm), uid).await?;
            }
            None
        }
        // A rollback of a source ferry did not power off stops at the target.
        Verdict::PowerOn if !self::wanted(vmm) => None,
        Verdict::PowerOn => Some(power_on(io).await),
        Verdict::Released | Verdict::Wait { .. } | Verdict::GiveUp { .. } => None,
    };
    let requested_at = before.map_or_else(|| now.clone(), |r| r.requested_at.clone());
    let record = next_record(
        vmm,
        requested_at,
        since,
        &target,
        &verdict,
        powered,
        now,
        io.ctx.policy.target_stop_margin,
    );
    let pending = match &verdict {
        Verdict::Halt | Verdict::DeleteInstance => Some(Duration::from_secs(1)),
        Verdict::Wait { left } => Some(*left + Duration::from_millis(500)),
        Verdict::Released | Verdict::PowerOn | Verdict::GiveUp { .. } => None,
    };
    Ok(Report {
        record: Some(record),
        released: verdict == Verdict::Released,
        pending,
    })
}

/// The record after `verdict` was carried out (`powered`: the power-on's outcome, `None` when
/// none was made). Pure.
#[allow(clippy::too_many_arguments)]
fn next_record(
    vmm: &VirtualMachineMigration,
    requested_at: Time,
    since: Option<Timestamp>,
    target: &Target,
    verdict: &Verdict,
    powered: Option<std::result::Result<(), String>>,
    now: &Time,
    margin: Duration,
) -> SourcePowerRestore {
    let ns = vmm.namespace().unwrap_or_default();
    let vm = format!("{ns}/{}", names::vm_name(vmm));
    let stopping_since = since.map(Time).or_else(|| match verdict {
        Verdict::Halt | Verdict::DeleteInstance | Verdict::Wait { .. } => Some(now.clone()),
        Verdict::Released | Verdict::PowerOn | Verdict::GiveUp { .. } => None,
    });
    let (result, message) = said(
        &vm,
        &ns,
        stopping_since.is_some(),
        target,
        verdict,
        powered,
        margin,
    );
    SourcePowerRestore {
        requested_at,
        target_stopping_since: stopping_since,
        finished_at: result.is_some().then(|| now.clone()),
        result,
        message: Some(message),
    }
}

/// The restore's result once it has one, and what it says: why the source was (or was not)
/// powered back on, or what ferry waits for. Pure.
fn said(
    vm: &str,
    ns: &str,
    stopped_by_ferry: bool,
    target: &Target,
    verdict: &Verdict,
    powered: Option<std::result::Result<(), String>>,
    margin: Duration,
) -> (Option<PowerRestoreResult>, String) {
    match (verdict, powered) {
        (Verdict::Released, _) => (
            Some(PowerRestoreResult::TargetReleased),
            format!(
                "VirtualMachine {vm} was released to its owner (the migration completed): the source VM stays as it is"
            ),
        ),
        // No power-on was made: a rollback of a source that was not ferry's to power on.
        (Verdict::PowerOn, None) => (
            Some(PowerRestoreResult::TargetStopped),
            format!(
                "VirtualMachine {vm} is stopped and its instance gone; the source VM was not powered off by ferry, so it stays as it is"
            ),
        ),
        (Verdict::PowerOn, Some(Err(why))) => (
            Some(PowerRestoreResult::PowerOnFailed),
            format!(
                "the target was proven stopped, but vSphere did not power the source VM on: {why}; power it on in vSphere"
            ),
        ),
        (Verdict::PowerOn, Some(Ok(()))) => (
            Some(PowerRestoreResult::PoweredOn),
            if stopped_by_ferry {
                format!(
                    "the source VM was powered back on once VirtualMachine {vm} was halted and its instance gone"
                )
            } else {
                format!(
                    "the source VM was powered back on: no instance of VirtualMachine {vm} runs or can start"
                )
            },
        ),
        (Verdict::Halt, _) => (
            None,
            format!(
                "stopping VirtualMachine {vm} (runStrategy Halted) before the source VM is powered back on"
            ),
        ),
        (Verdict::DeleteInstance, _) => (
            None,
            format!(
                "deleting VirtualMachineInstance {vm}, left without its VM, before the source VM is powered back on"
            ),
        ),
        (Verdict::Wait { .. }, _) if target.instance == Instance::Gone => (
            None,
            format!(
                "VirtualMachine {vm} is stopped and its instance gone: the source VM is powered back on in a moment"
            ),
        ),
        (Verdict::Wait { left }, _) => (
            None,
            format!(
                "waiting for VirtualMachineInstance {vm}{} to be gone before the source VM is powered back on (ferry gives up in {}s)",
                phase_of(&target.instance),
                left.as_secs()
            ),
        ),
        (Verdict::GiveUp { waited }, _) => (
            Some(PowerRestoreResult::TargetStillRunning),
            format!(
                "VirtualMachineInstance {vm}{} is still there {}s after ferry stopped VirtualMachine {vm} (its grace is {}s, plus {}s): the source VM stays powered off, so that two copies of one VM never run. Find out why the instance does not stop (its node may be down: kubectl get vmi -n {ns} -o wide); once it is gone for sure, power the source VM on in vSphere yourself (ferry will not)",
                phase_of(&target.instance),
                waited.as_secs(),
                target.instance.grace().as_secs(),
                margin.as_secs()
            ),
        ),
    }
}

fn phase_of(instance: &Instance) -> String {
    match instance {
        Instance::Gone => String::new(),
        Instance::Present {
            phase, deleting, ..
        } => format!(
            " ({phase}{})",
            if *deleting { ", being deleted" } else { "" }
        ),
    }
}

/// Reads the target VirtualMachine and then its instance, fresh from the API.
///
/// # Errors
/// Kubernetes API errors.
pub async fn observe(io: Io<'_>) -> Result<Target> {
    let name = names::vm_name(io.vmm);
    let vm = io.api::<VirtualMachine>().get_opt(&name).await?;
    let vmi = io.api::<VirtualMachineInstance>().get_opt(&name).await?;
    let state = world::classify_vm(vm.as_ref(), io);
    Ok(classify(vm.as_ref(), state, vmi.as_ref(), io.vmm))
}

/// Classifies what was read under the target name, `state` being the VM's ownership as
/// [`world::classify_vm`] proved it. Pure.
pub fn classify(
    vm: Option<&VirtualMachine>,
    state: VmState,
    vmi: Option<&VirtualMachineInstance>,
    vmm: &VirtualMachineMigration,
) -> Target {
    let target_vm = match (vm, state) {
        (_, VmState::Absent) | (None, _) => TargetVm::Absent,
        (_, VmState::Foreign) => TargetVm::Foreign,
        (_, VmState::Ours { released: true, .. }) => TargetVm::Released,
        (
            Some(v),
            VmState::Ours {
                run_strategy,
                released: false,
            },
        ) => TargetVm::Ours {
            halted: run_strategy.as_deref() == Some("Halted")
                || v.metadata.deletion_timestamp.is_some(),
            resource_version: v.resource_version(),
        },
    };
    let ours_by_name = matches!(target_vm, TargetVm::Ours { .. } | TargetVm::Released);
    let uid = vmm.metadata.uid.as_deref();
    let instance = vmi
        .filter(|v| ours_by_name || (uid.is_some() && vmm_uid_label(v) == uid))
        .map_or(Instance::Gone, |v| Instance::Present {
            uid: v.uid().unwrap_or_default(),
            phase: v.status.as_ref().and_then(|s| s.phase).unwrap_or_default(),
            deleting: v.metadata.deletion_timestamp.is_some(),
            grace: grace_of(v),
        });
    Target {
        vm: target_vm,
        instance,
    }
}

/// An instance's `spec.terminationGracePeriodSeconds`, KubeVirt's default when unset. Pure.
pub fn grace_of(vmi: &VirtualMachineInstance) -> Duration {
    vmi.spec
        .rest
        .get("terminationGracePeriodSeconds")
        .and_then(serde_json::Value::as_i64)
        .map_or(KUBEVIRT_DEFAULT_GRACE, |s| {
            Duration::from_secs(u64::try_from(s).unwrap_or(0))
        })
}

/// Sets our VM's run strategy to `Halted`, on the version observed (a VM changed since, e.g.
/// released, is looked at again rather than halted).
async fn halt(io: Io<'_>, target: &Target) -> Result<()> {
    let TargetVm::Ours {
        resource_version, ..
    } = &target.vm
    else {
        return Ok(());
    };
    let mut patch = serde_json::json!({"spec": {"runStrategy": "Halted"}});
    if let Some(v) = resource_version {
        patch["metadata"] = serde_json::json!({"resourceVersion": v});
    }
    let name = names::vm_name(io.vmm);
    match io
        .api::<VirtualMachine>()
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            io.ctx.metrics.write("patch", "VirtualMachine");
            info!(migration = %io.vmm.name_any(), vm = %name, "target halted before the source is powered back on");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Conflict),
        Err(e) => Err(e.into()),
    }
}

/// Powers the source VM on (vSphere's power-on does nothing to a running VM). `Err` carries
/// why it did not, for the record.
async fn power_on(io: Io<'_>) -> std::result::Result<(), String> {
    let (ctx, vmm) = (io.ctx, io.vmm);
    let Some(moref) = vmm.source_moref() else {
        return Err("the source VM was never recorded".into());
    };
    let login = credentials::source_login(io)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|p| p.message)?;
    ctx.source
        .power_on(&login, moref)
        .await
        .map_err(|p| p.message)?;
    info!(migration = %vmm.name_any(), %moref, "source VM powered back on");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::{migration, ts};
    use proptest::prelude::*;

    const MARGIN: Duration = Duration::from_secs(60);

    fn ours(halted: bool) -> TargetVm {
        TargetVm::Ours {
            halted,
            resource_version: Some("1".into()),
        }
    }

    fn present(phase: VmiPhase, deleting: bool) -> Instance {
        Instance::Present {
            uid: "vmi-uid".into(),
            phase,
            deleting,
            grace: KUBEVIRT_DEFAULT_GRACE,
        }
    }

    fn verdict(vm: TargetVm, instance: Instance, since: Option<i64>, now: i64) -> Verdict {
        decide(
            &Target { vm, instance },
            since.map(|s| ts(s).0),
            ts(now).0,
            MARGIN,
        )
    }

    #[test]
    fn the_rule_in_a_table() {
        use VmiPhase::{Running, Scheduling};
        let bound = (KUBEVIRT_DEFAULT_GRACE + MARGIN).as_secs() as i64;
        type Case = (&'static str, TargetVm, Instance, Option<i64>, i64, Verdict);
        let cases: Vec<Case> = vec![
            (
                "never created",
                TargetVm::Absent,
                Instance::Gone,
                None,
                0,
                Verdict::PowerOn,
            ),
            (
                "created, never started",
                ours(true),
                Instance::Gone,
                None,
                0,
                Verdict::PowerOn,
            ),
            (
                "running: halt it first",
                ours(false),
                present(Running, false),
                None,
                0,
                Verdict::Halt,
            ),
            (
                "started but no instance yet: halt it, KubeVirt may be creating one",
                ours(false),
                Instance::Gone,
                None,
                0,
                Verdict::Halt,
            ),
            (
                "halted, KubeVirt has not stopped it yet",
                ours(true),
                present(Running, false),
                Some(0),
                1,
                Verdict::Wait {
                    left: Duration::from_secs(bound as u64 - 1),
                },
            ),
            (
                "halted, shutting down",
                ours(true),
                present(Running, true),
                Some(0),
                10,
                Verdict::Wait {
                    left: Duration::from_secs(bound as u64 - 10),
                },
            ),
            (
                "the VM deleted, its instance left behind",
                TargetVm::Absent,
                present(Running, false),
                Some(0),
                1,
                Verdict::DeleteInstance,
            ),
            (
                "the VM deleted, its instance shutting down",
                TargetVm::Absent,
                present(Scheduling, true),
                Some(0),
                1,
                Verdict::Wait {
                    left: Duration::from_secs(bound as u64 - 1),
                },
            ),
            (
                "someone else's VM holds the name, an instance carries our uid",
                TargetVm::Foreign,
                present(Running, false),
                Some(0),
                1,
                Verdict::Wait {
                    left: Duration::from_secs(bound as u64 - 1),
                },
            ),
            (
                "the bound passed",
                ours(true),
                present(Running, true),
                Some(0),
                bound,
                Verdict::GiveUp {
                    waited: Duration::from_secs(bound as u64),
                },
            ),
            (
                "halted a moment ago and gone: settle first",
                ours(true),
                Instance::Gone,
                Some(0),
                1,
                Verdict::Wait {
                    left: Duration::from_secs(1),
                },
            ),
            (
                "halted and gone, settled",
                ours(true),
                Instance::Gone,
                Some(0),
                2,
                Verdict::PowerOn,
            ),
            (
                "the bound passed, but it is gone now",
                ours(true),
                Instance::Gone,
                Some(0),
                bound * 10,
                Verdict::PowerOn,
            ),
            (
                "never gives up on a first look",
                ours(true),
                present(Running, true),
                None,
                bound * 10,
                Verdict::Wait {
                    left: Duration::from_secs(bound as u64),
                },
            ),
            (
                "released: nothing, whatever runs",
                TargetVm::Released,
                present(Running, false),
                Some(0),
                bound * 10,
                Verdict::Released,
            ),
            (
                "released and gone: still nothing",
                TargetVm::Released,
                Instance::Gone,
                None,
                0,
                Verdict::Released,
            ),
        ];
        for (name, vm, instance, since, now, want) in cases {
            assert_eq!(verdict(vm, instance, since, now), want, "{name}");
        }
    }

    #[test]
    fn the_bound_is_the_instances_own_grace_plus_the_margin() {
        let long = Instance::Present {
            uid: "u".into(),
            phase: VmiPhase::Running,
            deleting: true,
            grace: Duration::from_secs(3600),
        };
        assert!(matches!(
            verdict(ours(true), long.clone(), Some(0), 3600),
            Verdict::Wait { .. }
        ));
        assert!(matches!(
            verdict(ours(true), long, Some(0), 3660),
            Verdict::GiveUp { .. }
        ));
    }

    fn arb_vm() -> impl Strategy<Value = TargetVm> {
        prop_oneof![
            Just(TargetVm::Absent),
            Just(TargetVm::Foreign),
            Just(TargetVm::Released),
            any::<bool>().prop_map(ours),
        ]
    }

    fn arb_instance() -> impl Strategy<Value = Instance> {
        prop_oneof![
            Just(Instance::Gone),
            (
                prop_oneof![
                    Just(VmiPhase::Pending),
                    Just(VmiPhase::Scheduling),
                    Just(VmiPhase::Scheduled),
                    Just(VmiPhase::Running),
                    Just(VmiPhase::Succeeded),
                    Just(VmiPhase::Failed),
                    Just(VmiPhase::Unknown),
                ],
                any::<bool>(),
                0u64..4000,
            )
                .prop_map(|(phase, deleting, grace)| Instance::Present {
                    uid: "u".into(),
                    phase,
                    deleting,
                    grace: Duration::from_secs(grace),
                }),
        ]
    }

    proptest! {
        /// Never `PowerOn` while an instance exists or our VM might start one.
        #[test]
        fn never_power_on_while_an_instance_exists_or_might(
            vm in arb_vm(),
            instance in arb_instance(),
            since in proptest::option::of(0i64..100_000),
            now in 0i64..200_000,
            margin in 0u64..1000,
        ) {
            let target = Target { vm: vm.clone(), instance: instance.clone() };
            let v = decide(&target, since.map(|s| ts(s).0), ts(now).0, Duration::from_secs(margin));
            let may_start = matches!(vm, TargetVm::Ours { halted: false, .. });
            let gave_up = matches!(v, Verdict::GiveUp { .. });
            if v == Verdict::PowerOn {
                prop_assert_eq!(&instance, &Instance::Gone);
                prop_assert!(!may_start, "our VM may start an instance");
                prop_assert!(vm != TargetVm::Released);
                prop_assert!(since.is_none_or(|s| now - s >= SETTLE.as_secs() as i64), "settled");
            }
            if vm == TargetVm::Released {
                prop_assert_eq!(v, Verdict::Released);
            }
            if since.is_none() {
                prop_assert!(!gave_up, "never on a first look");
            }
        }
    }

    fn vmi(labels: &[(&str, &str)], grace: Option<i64>, deleting: bool) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "dc0-h0-vm0", "namespace": "ns", "uid": "vmi-1",
                "labels": labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<std::collections::BTreeMap<_, _>>()},
            "spec": {"domain": {}},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        if let Some(g) = grace {
            v.spec
                .rest
                .insert("terminationGracePeriodSeconds".into(), g.into());
        }
        if deleting {
            v.metadata.deletion_timestamp = Some(ts(0));
        }
        v
    }

    fn our_vm(vmm: &VirtualMachineMigration, strategy: &str) -> VirtualMachine {
        let mut vm = crate::children::virtual_machine::virtual_machine(vmm).unwrap();
        vm.spec.run_strategy = Some(strategy.into());
        vm.metadata.resource_version = Some("7".into());
        vm
    }

    /// [`classify`] of a VM proven ours (ownership itself is `children::ownership`'s, tested there).
    fn look(
        vm: Option<&VirtualMachine>,
        vmi: Option<&VirtualMachineInstance>,
        vmm: &VirtualMachineMigration,
    ) -> Target {
        let state = vm.map_or(VmState::Absent, |v| VmState::Ours {
            run_strategy: v.spec.run_strategy.clone(),
            released: crate::children::released_by_record(vmm, "VirtualMachine", &v.metadata),
        });
        classify(vm, state, vmi, vmm)
    }

    #[test]
    fn what_counts_as_an_instance_of_the_copy() {
        let vmm = migration("m").with_disks(1);
        let uid = vmm.metadata.uid.clone().unwrap();
        let label = names::MIGRATION_UID_LABEL;
        // No VM of ours: only an instance carrying our uid counts.
        let t = look(None, Some(&vmi(&[(label, &uid)], None, true)), &vmm);
        assert_eq!(t.vm, TargetVm::Absent);
        assert!(
            matches!(t.instance, Instance::Present { deleting: true, grace, .. } if grace == KUBEVIRT_DEFAULT_GRACE)
        );
        let t = look(None, Some(&vmi(&[(label, "other")], None, false)), &vmm);
        assert_eq!(t.instance, Instance::Gone, "another migration's instance");
        // Our VM holds the name: its instance counts, labelled or not.
        let vm = our_vm(&vmm, "Always");
        let t = look(Some(&vm), Some(&vmi(&[], Some(5), false)), &vmm);
        assert_eq!(
            t.vm,
            TargetVm::Ours {
                halted: false,
                resource_version: Some("7".into())
            }
        );
        assert!(
            matches!(t.instance, Instance::Present { grace, .. } if grace == Duration::from_secs(5))
        );
        let t = look(Some(&our_vm(&vmm, "Halted")), None, &vmm);
        assert!(matches!(t.vm, TargetVm::Ours { halted: true, .. }));
        // Being deleted stops it too.
        let mut going = our_vm(&vmm, "Always");
        going.metadata.deletion_timestamp = Some(ts(0));
        assert!(matches!(
            look(Some(&going), None, &vmm).vm,
            TargetVm::Ours { halted: true, .. }
        ));
        // Its owner reference removed and labelled released, by someone else: still ours, not
        // handed over (the record says nothing of a release).
        let mut unowned = our_vm(&vmm, "Always");
        unowned.metadata.uid = Some("vm-uid".into());
        unowned.metadata.owner_references = None;
        unowned
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(names::RELEASED_LABEL.into(), names::RELEASED_VALUE.into());
        assert!(matches!(
            look(Some(&unowned), None, &vmm).vm,
            TargetVm::Ours { halted: false, .. }
        ));
        // Released: the migration recorded the release of this very VM.
        let mut vmm = vmm;
        let s = vmm.status.get_or_insert_with(Default::default);
        let name = unowned.metadata.name.clone().unwrap();
        s.children = vec![ferry_crds::ChildRecord {
            kind: "VirtualMachine".into(),
            name,
            uid: "vm-uid".into(),
            attempt: 1,
            released: true,
        }];
        assert_eq!(look(Some(&unowned), None, &vmm).vm, TargetVm::Released);
        vmm.status.as_mut().unwrap().children[0].uid = "another-uid".into();
        assert!(
            matches!(look(Some(&unowned), None, &vmm).vm, TargetVm::Ours { .. }),
            "the record of another VM of that name releases nothing"
        );
    }

    /// `vmm` whose source was found in `power` by Preparing.
    fn found(mut vmm: VirtualMachineMigration, power: PowerState) -> VirtualMachineMigration {
        vmm.status
            .get_or_insert_with(Default::default)
            .source
            .get_or_insert_with(Default::default)
            .power_state = Some(power);
        vmm
    }

    #[test]
    fn only_a_source_that_ferry_powered_off_is_powered_on() {
        let mut vmm = found(migration("m"), PowerState::PoweredOn);
        assert!(wanted(&vmm));
        assert!(requested(&vmm, &ts(0)).is_some());
        vmm.spec.source.power.power_off = false;
        assert!(!wanted(&vmm), "ferry never powered it off");
        let off = found(migration("m"), PowerState::PoweredOff);
        assert!(!wanted(&off) && requested(&off, &ts(0)).is_none());
        assert!(!wanted(&migration("m")), "nothing recorded");
    }

    #[test]
    fn the_record_keeps_the_clock_and_says_what_to_do_when_ferry_gives_up() {
        let vmm = migration("m").with_phase(Phase::Failed);
        let target = Target {
            vm: ours(true),
            instance: present(VmiPhase::Running, true),
        };
        let wait = Verdict::Wait {
            left: Duration::from_secs(30),
        };
        let first = next_record(&vmm, ts(0), None, &target, &wait, None, &ts(5), MARGIN);
        assert_eq!(first.target_stopping_since, Some(ts(5)), "the clock starts");
        assert!(first.result.is_none() && first.finished_at.is_none());
        let later = next_record(
            &vmm,
            ts(0),
            Some(ts(5).0),
            &target,
            &wait,
            None,
            &ts(50),
            MARGIN,
        );
        assert_eq!(later.target_stopping_since, Some(ts(5)), "and is kept");
        let gave_up = next_record(
            &vmm,
            ts(0),
            Some(ts(5).0),
            &target,
            &Verdict::GiveUp {
                waited: Duration::from_secs(95),
            },
            None,
            &ts(100),
            MARGIN,
        );
        assert_eq!(gave_up.result, Some(PowerRestoreResult::TargetStillRunning));
        let m = gave_up.message.unwrap();
        assert!(
            m.contains("VirtualMachineInstance")
                && m.contains("95s")
                && m.contains("stays powered off")
                && m.contains("power the source VM on in vSphere yourself"),
            "{m}"
        );
        let failed = next_record(
            &vmm,
            ts(0),
            None,
            &Target {
                vm: TargetVm::Absent,
                instance: Instance::Gone,
            },
            &Verdict::PowerOn,
            Some(Err("503".into())),
            &ts(1),
            MARGIN,
        );
        assert_eq!(failed.result, Some(PowerRestoreResult::PowerOnFailed));
    }

    #[test]
    fn an_ended_power_on_warns_once_unless_it_powered_on() {
        let ended = |result| Report {
            record: Some(SourcePowerRestore {
                requested_at: ts(0),
                target_stopping_since: None,
                result: Some(result),
                finished_at: Some(ts(1)),
                message: Some("why".into()),
            }),
            ..Report::default()
        };
        let gave_up = ended(PowerRestoreResult::TargetStillRunning);
        assert_eq!(gave_up.notes(None).len(), 1);
        assert_eq!(gave_up.notes(gave_up.record.as_ref()).len(), 0, "not again");
        assert!(ended(PowerRestoreResult::PoweredOn).notes(None).is_empty());
    }
}
