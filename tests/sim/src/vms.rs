//! KubeVirt's part: a VirtualMachine whose run strategy asks for it gets a
//! VirtualMachineInstance of the same name (owned by the VM), walked `Pending` → `Scheduling`
//! → `Scheduled` → `Running` on node `sim-node` with `Ready`, then `AgentConnected`; `Halted`
//! (or deleting the VM) deletes it; the VM's `created`/`ready`/`printableStatus`/`Ready`/
//! `startFailure` follow (after `pkg/virt-controller/watch/vm` in kubevirt).
//!
//! Stopping takes as long as in KubeVirt at worst: a VMI carries virt-controller's finalizer from
//! its creation, and a deleted one whose guest may run stays `Running` for its whole
//! `terminationGracePeriodSeconds` (a guest that ignores the ACPI shutdown), then ends
//! `Succeeded` and loses the finalizer. A VM carries the VM controller's finalizer, so a deleted
//! VM stays `Terminating` until its VMI is gone.
//!
//! A VMI's fault fate is decided once, when it is created, and written on it as an
//! annotation: every later decision is a pure function of the objects and the clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::clock::{self, Speed};
use crate::conditions::{self, Flavour};
use crate::context::Sim;
use crate::faults::Step;
use crate::kubevirt::{
    PhaseTransition, StartFailure, VirtualMachine, VirtualMachineInstance,
    VirtualMachineInstanceStatus, VirtualMachineStatus, phase,
};
use crate::migration::{Child, Faults};
use crate::pvcs::Pvcs;
use crate::scheduling;
use crate::volumes::Volumes;
use crate::{Error, Result};

/// Annotation on a VMI fixing its fault fate: `fail` (ends `Failed` once scheduled) or
/// `unschedulable` (stays `Scheduling`).
pub const VMI_FATE_ANNOTATION: &str = "sim.ferry.example/vmi-fate";
/// Annotation on a VMI whose guest agent never connects (value `silent`).
pub const AGENT_FATE_ANNOTATION: &str = "sim.ferry.example/agent-fate";
/// Annotation on a VMI whose node stops answering while it stops: `late` (it goes one grace
/// period late) or `lost` (it never goes: its finalizer stays).
pub const STOP_FATE_ANNOTATION: &str = "sim.ferry.example/stop-fate";
/// virt-controller's finalizer on every VMI (`VirtualMachineInstanceFinalizer`, added by virt-api's
/// VMI mutator at creation), removed once the VMI is final and its pods are gone.
pub const VMI_FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
/// The VM controller's finalizer on a VM (`VirtualMachineControllerFinalizer`), removed once the
/// deleted VM's VMI is gone.
pub const VM_FINALIZER: &str = "kubevirt.io/virtualMachineControllerFinalize";
/// KubeVirt's grace for a VMI that names none (`DefaultGracePeriodSeconds`).
pub const DEFAULT_GRACE_SECONDS: u64 = 30;

/// `spec.runStrategy`, or what the legacy `spec.running` means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStrategy {
    Always,
    RerunOnFailure,
    Once,
    Halted,
    Manual,
}

impl RunStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Once => "Once",
            RunStrategy::Halted => "Halted",
            RunStrategy::Manual => "Manual",
        }
    }

    fn wants_vmi(self) -> bool {
        matches!(
            self,
            RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once
        )
    }
}

/// The VM's run strategy. Pure.
pub fn run_strategy(vm: &VirtualMachine) -> RunStrategy {
    match vm.spec.run_strategy.as_deref() {
        Some("Always") => RunStrategy::Always,
        Some("RerunOnFailure") => RunStrategy::RerunOnFailure,
        Some("Once") => RunStrategy::Once,
        Some("Manual") => RunStrategy::Manual,
        Some(_) => RunStrategy::Halted,
        None => {
            if vm.spec.running == Some(true) {
                RunStrategy::Always
            } else {
                RunStrategy::Halted
            }
        }
    }
}

/// How long each step takes in real KubeVirt, before speed scaling.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub pending: Duration,
    pub scheduling: Duration,
    pub scheduled: Duration,
    pub agent: Duration,
    pub fail_after: Duration,
    pub recheck: Duration,
    /// One second of the real component (a VMI's grace is counted in these).
    pub second: Duration,
}

impl Timing {
    /// The default steps, scaled by `speed`.
    pub fn at(speed: Speed) -> Timing {
        Timing {
            pending: speed.ms(500),
            scheduling: speed.ms(1000),
            scheduled: speed.ms(1500),
            agent: speed.ms(3000),
            fail_after: speed.ms(1000),
            recheck: speed.ms(1000).max(Duration::from_millis(50)),
            second: speed.ms(1000),
        }
    }
}

/// Whether the VMI's volumes are there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeCheck {
    Ready,
    /// No claim of this name: KubeVirt's `FailedPvcNotFound`.
    MissingClaim(String),
    /// The claim exists but nothing was imported into it yet.
    NotImported(String),
    /// A DataVolume of the VM failed or its importer stopped on an error (KubeVirt's
    /// `HasDataVolumeErrors`): printableStatus `DataVolumeError`; the VMI waits.
    DataVolumeFailed(String),
}

/// The error of the first of `dvs` (name, phase, `Running` condition) that failed: phase
/// `Failed`, or `Running=False` with reason `Error`/`ImagePullFailed`, as KubeVirt's
/// `storagetypes.HasDataVolumeErrors` reads them. Pure.
pub fn data_volume_error(
    dvs: &[(String, Option<String>, Option<crate::conditions::Condition>)],
) -> Option<String> {
    dvs.iter().find_map(|(name, phase, running)| {
        if phase.as_deref() == Some("Failed") {
            return Some(format!("DataVolume {name} is in Failed phase"));
        }
        running
            .as_ref()
            .filter(|c| {
                c.status == "False" && (c.reason == "Error" || c.reason == "ImagePullFailed")
            })
            .map(|c| {
                format!(
                    "DataVolume {name} importer has stopped running due to an error: {}",
                    c.message
                )
            })
    })
}

/// Checks every claim the VMI's volumes name against the imported volume files and claims.
pub fn check_volumes(
    vmi: &VirtualMachineInstance,
    vols: &Volumes,
    claim_exists: impl Fn(&str) -> bool,
) -> VolumeCheck {
    let ns = vmi.metadata.namespace.as_deref().unwrap_or("");
    for v in &vmi.spec.volumes {
        let Some(claim) = v.claim() else { continue };
        // KubeVirt looks for the claim first: a volume file without its claim is no volume.
        if !claim_exists(claim) {
            return VolumeCheck::MissingClaim(claim.to_string());
        }
        if !vols.has_image(ns, claim) {
            return VolumeCheck::NotImported(claim.to_string());
        }
    }
    VolumeCheck::Ready
}

fn enter(s: &mut VirtualMachineInstanceStatus, phase: &str, now: &str) {
    s.phase = phase.to_string();
    s.phase_transition_timestamps.push(PhaseTransition {
        phase: phase.to_string(),
        phase_transition_timestamp: now.to_string(),
    });
}

/// The next status of a VMI that is not final, and when to look again. Pure.
///
/// Guarantees: `None` status means nothing changes now; a `Some` delay asks for another look.
pub fn step_vmi(
    vmi: &VirtualMachineInstance,
    volumes: &VolumeCheck,
    node: &str,
    t: &Timing,
    now: Timestamp,
) -> (Option<VirtualMachineInstanceStatus>, Option<Duration>) {
    let old = vmi.status.clone().unwrap_or_default();
    let now_s = clock::format(now);
    let since = old.phase_since().and_then(clock::parse).unwrap_or(now);
    let waited = clock::elapsed(since, now);
    let anns = vmi.metadata.annotations.clone().unwrap_or_default();
    let fate = anns.get(VMI_FATE_ANNOTATION).map(String::as_str);
    let silent = anns
        .get(AGENT_FATE_ANNOTATION)
        .is_some_and(|v| v == "silent");
    let look = Look {
        old,
        now_s,
        waited,
        t,
    };
    match look.old.phase.as_str() {
        "" => vmi_created(&look),
        phase::PENDING => vmi_pending(vmi, volumes, &look),
        phase::SCHEDULING => vmi_scheduling(vmi, node, fate, &look),
        phase::SCHEDULED => vmi_scheduled(fate, silent, &look),
        phase::RUNNING => vmi_running(silent, &look),
        _ => (None, None),
    }
}

/// One look at a VMI in its phase (`step_vmi`): its status as it was, how long it has been in
/// that phase, and the time as KubeVirt writes it.
struct Look<'a> {
    old: VirtualMachineInstanceStatus,
    now_s: String,
    waited: Duration,
    t: &'a Timing,
}

impl Look<'_> {
    /// Another look once the VMI has been `d` in its phase (10 ms from now at the soonest).
    fn after(&self, d: Duration) -> Option<Duration> {
        Some(d.saturating_sub(self.waited).max(Duration::from_millis(10)))
    }

    /// `s` to write, unless it is the status as it was.
    fn changed(&self, s: VirtualMachineInstanceStatus) -> Option<VirtualMachineInstanceStatus> {
        if s == self.old { None } else { Some(s) }
    }
}

/// A new VMI: `Pending`, its launcher pod not scheduled yet. Pure.
fn vmi_created(look: &Look<'_>) -> (Option<VirtualMachineInstanceStatus>, Option<Duration>) {
    let mut s = look.old.clone();
    let now_s = &look.now_s;
    enter(&mut s, phase::PENDING, now_s);
    conditions::set(
        &mut s.conditions,
        Flavour::KubeVirt,
        "Ready",
        false,
        "PodNotExists",
        "virt-launcher pod has not yet been scheduled",
        now_s,
    );
    (Some(s), Some(look.t.pending))
}

/// A `Pending` VMI waits for its volumes (their conditions say why), then goes `Scheduling`.
/// Pure.
fn vmi_pending(
    vmi: &VirtualMachineInstance,
    volumes: &VolumeCheck,
    look: &Look<'_>,
) -> (Option<VirtualMachineInstanceStatus>, Option<Duration>) {
    let (t, now_s, kv) = (look.t, &look.now_s, Flavour::KubeVirt);
    let mut s = look.old.clone();
    match volumes {
        VolumeCheck::MissingClaim(c) => {
            let ns = vmi.metadata.namespace.as_deref().unwrap_or("");
            let msg = format!("PVC {ns}/{c} does not exist, waiting for it to appear");
            conditions::set(
                &mut s.conditions,
                kv,
                "Synchronized",
                false,
                "FailedPvcNotFound",
                &msg,
                now_s,
            );
            return (look.changed(s), Some(t.recheck));
        }
        VolumeCheck::NotImported(_) | VolumeCheck::DataVolumeFailed(_) => {
            let msg = "Not all of the VMI's DVs are ready";
            conditions::set(
                &mut s.conditions,
                kv,
                "DataVolumesReady",
                false,
                "NotAllDVsReady",
                msg,
                now_s,
            );
            return (look.changed(s), Some(t.recheck));
        }
        VolumeCheck::Ready => {
            conditions::remove(&mut s.conditions, "Synchronized");
            if conditions::find(&s.conditions, "DataVolumesReady").is_some() {
                conditions::set(
                    &mut s.conditions,
                    kv,
                    "DataVolumesReady",
                    true,
                    "AllDVsReady",
                    "All of the VMI's DVs are bound and ready",
                    now_s,
                );
            }
        }
    }
    if look.waited < t.pending {
        return (look.changed(s), look.after(t.pending));
    }
    enter(&mut s, phase::SCHEDULING, now_s);
    (Some(s), Some(t.scheduling))
}

/// A `Scheduling` VMI: unschedulable (for real or by fate) it stays, else it is `Scheduled` on
/// the node after the scheduling delay. Pure.
fn vmi_scheduling(
    vmi: &VirtualMachineInstance,
    node: &str,
    fate: Option<&str>,
    look: &Look<'_>,
) -> (Option<VirtualMachineInstanceStatus>, Option<Duration>) {
    let (t, now_s, kv) = (look.t, &look.now_s, Flavour::KubeVirt);
    let mut s = look.old.clone();
    if !scheduling::fits(&vmi.spec, node) {
        conditions::set(
            &mut s.conditions,
            kv,
            "PodScheduled",
            false,
            "Unschedulable",
            scheduling::NO_NODE_MATCHES,
            now_s,
        );
        return (look.changed(s), None);
    }
    if fate == Some("unschedulable") {
        let msg = "0/1 nodes are available: 1 Insufficient devices.kubevirt.io/kvm (fault injected by ferry-sim)";
        conditions::set(
            &mut s.conditions,
            kv,
            "PodScheduled",
            false,
            "Unschedulable",
            msg,
            now_s,
        );
        return (look.changed(s), None);
    }
    if look.waited < t.scheduling {
        return (None, look.after(t.scheduling));
    }
    enter(&mut s, phase::SCHEDULED, now_s);
    s.node_name = Some(node.to_string());
    conditions::set(&mut s.conditions, kv, "PodScheduled", true, "", "", now_s);
    conditions::set(
        &mut s.conditions,
        kv,
        "Ready",
        false,
        "GuestNotRunning",
        "Guest VM is not reported as running",
        now_s,
    );
    let next = if fate == Some("fail") {
        t.fail_after
    } else {
        t.scheduled
    };
    (Some(s), Some(next))
}

/// A `Scheduled` VMI: `Failed` when fated to, else `Running` and `Ready` after the launcher's
/// start. Pure.
fn vmi_scheduled(
    fate: Option<&str>,
    silent: bool,
    look: &Look<'_>,
) -> (Option<VirtualMachineInstanceStatus>, Option<Duration>) {
    let (t, now_s, kv) = (look.t, &look.now_s, Flavour::KubeVirt);
    let mut s = look.old.clone();
    if fate == Some("fail") {
        if look.waited < t.fail_after {
            return (None, look.after(t.fail_after));
        }
        enter(&mut s, phase::FAILED, now_s);
        s.reason = Some("FaultInjected".into());
        conditions::set(
            &mut s.conditions,
            kv,
            "Ready",
            false,
            "GuestNotRunning",
            "virt-launcher exited: fault injected by ferry-sim",
            now_s,
        );
        return (Some(s), None);
    }
    if look.waited < t.scheduled {
        return (None, look.after(t.scheduled));
    }
    enter(&mut s, phase::RUNNING, now_s);
    conditions::set(&mut s.conditions, kv, "Ready", true, "", "", now_s);
    (Some(s), (!silent).then_some(t.agent))
}

/// A `Running` VMI: its agent connects after the agent's delay, never when `silent`. Pure.
fn vmi_running(
    silent: bool,
    look: &Look<'_>,
) -> (Option<VirtualMachineInstanceStatus>, Option<Duration>) {
    let (t, now_s) = (look.t, &look.now_s);
    let mut s = look.old.clone();
    if silent || conditions::is_true(&s.conditions, "AgentConnected") {
        return (None, None);
    }
    if look.waited < t.agent {
        return (None, look.after(t.agent));
    }
    conditions::set(
        &mut s.conditions,
        Flavour::KubeVirt,
        "AgentConnected",
        true,
        "",
        "",
        now_s,
    );
    s.guest_os_info = Some(
        serde_json::json!({"id": "ferry-sim", "name": "ferry-sim guest", "prettyName": "ferry-sim guest"}),
    );
    (Some(s), None)
}

/// A VMI's `spec.terminationGracePeriodSeconds`, KubeVirt's default when unset. Pure.
pub fn grace_seconds(vmi: &VirtualMachineInstance) -> u64 {
    vmi.spec
        .rest
        .get("terminationGracePeriodSeconds")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
}

/// What happens to a VMI being deleted, and when to look again. Pure.
///
/// Guarantees: a VMI whose guest may run (`Scheduled`, `Running`) keeps its phase until its
/// grace has passed since the deletion (counted from the end of the deletion's second:
/// `deletionTimestamp` has whole seconds), then ends `Succeeded`; a final one, or one that never
/// got a guest, loses the finalizer at once; a `lost` one never changes, a `late` one takes
/// twice its grace.
pub fn step_stopping(
    vmi: &VirtualMachineInstance,
    t: &Timing,
    now: Timestamp,
) -> (VmiAction, Option<Duration>) {
    let fate = vmi
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STOP_FATE_ANNOTATION))
        .map(String::as_str);
    if fate == Some("lost") {
        return (VmiAction::Nothing, None);
    }
    let held = vmi.finalizers().iter().any(|f| f == VMI_FINALIZER);
    let st = vmi.status.clone().unwrap_or_default();
    let guest = st.phase == phase::SCHEDULED || st.phase == phase::RUNNING;
    if !guest {
        let action = if held {
            VmiAction::Release
        } else {
            VmiAction::Nothing
        };
        return (action, None);
    }
    let deleted = vmi
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let periods = if fate == Some("late") { 2 } else { 1 };
    let grace = t.second * u32::try_from(grace_seconds(vmi) * periods).unwrap_or(u32::MAX);
    let due = clock::add(deleted, Duration::from_secs(1) + grace);
    if now < due {
        return (
            VmiAction::Nothing,
            Some(clock::elapsed(now, due).max(Duration::from_millis(10))),
        );
    }
    let now_s = clock::format(now);
    let mut s = st;
    enter(&mut s, phase::SUCCEEDED, &now_s);
    conditions::set(
        &mut s.conditions,
        Flavour::KubeVirt,
        "Ready",
        false,
        "GuestNotRunning",
        "Guest VM is not reported as running",
        &now_s,
    );
    (VmiAction::Patch(s), Some(Duration::from_millis(10)))
}

/// KubeVirt's crash-loop backoff before a failed VMI is replaced: 10 s doubling to 5 min.
pub fn start_backoff(consecutive_failures: i64) -> Duration {
    let exp = u32::try_from((consecutive_failures - 1).clamp(0, 5)).unwrap_or(0);
    Duration::from_secs(10 * 2u64.pow(exp)).min(Duration::from_secs(300))
}

/// What to do about the VMI.
#[derive(Clone, Debug, PartialEq)]
pub enum VmiAction {
    Nothing,
    Create,
    Delete,
    Patch(VirtualMachineInstanceStatus),
    /// Remove virt-controller's finalizer: the deleted VMI goes.
    Release,
}

/// One decision for a VM: the VMI action, the VM status to show, its finalizer (add, remove),
/// when to look again.
#[derive(Clone, Debug, PartialEq)]
pub struct VmDecision {
    pub action: VmiAction,
    pub status: VirtualMachineStatus,
    pub vm_finalizer: Option<bool>,
    pub requeue: Option<Duration>,
}

fn printable(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    strategy: RunStrategy,
    start_failure: Option<&StartFailure>,
    deleting_vmi: bool,
    dv_failed: bool,
) -> &'static str {
    if vm.metadata.deletion_timestamp.is_some() {
        return "Terminating";
    }
    let running = vmi
        .and_then(|v| v.status.as_ref())
        .is_some_and(|s| s.phase == phase::RUNNING);
    if dv_failed && !running && !deleting_vmi {
        // After Running and ErrorPvcNotFound in KubeVirt's precedence; before everything else.
        let pvc = vmi
            .and_then(|v| v.status.as_ref())
            .and_then(|s| conditions::find(&s.conditions, "Synchronized"))
            .is_some_and(|c| c.status == "False" && c.reason == "FailedPvcNotFound");
        if !pvc {
            return "DataVolumeError";
        }
    }
    let Some(vmi) = vmi else {
        if strategy.wants_vmi() {
            return if start_failure.is_some_and(|f| f.consecutive_fail_count > 0) {
                "CrashLoopBackOff"
            } else {
                "Starting"
            };
        }
        return "Stopped";
    };
    let st = vmi.status.clone().unwrap_or_default();
    if !st.is_final() && (deleting_vmi || vmi.metadata.deletion_timestamp.is_some()) {
        return "Stopping";
    }
    let conds = &st.conditions;
    let has = |t: &str, reason: &str| {
        conditions::find(conds, t).is_some_and(|c| c.status == "False" && c.reason == reason)
    };
    match st.phase.as_str() {
        phase::RUNNING => "Running",
        _ if has("Synchronized", "FailedPvcNotFound") => "ErrorPvcNotFound",
        _ if has("PodScheduled", "Unschedulable") => "ErrorUnschedulable",
        "" | phase::PENDING | phase::SCHEDULING | phase::SCHEDULED => "Starting",
        _ if start_failure.is_some_and(|f| f.consecutive_fail_count > 0)
            && strategy != RunStrategy::Once =>
        {
            "CrashLoopBackOff"
        }
        _ => "Stopped",
    }
}

/// The VM status for the VM and its VMI as they will be after `action`. Pure.
pub fn vm_status(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    action: &VmiAction,
    start_failure: Option<StartFailure>,
    now: &str,
    dv_failed: bool,
) -> VirtualMachineStatus {
    let strategy = run_strategy(vm);
    let mut s = vm.status.clone().unwrap_or_default();
    let deleting = matches!(action, VmiAction::Delete);
    let patched;
    let vmi = match (vmi, action) {
        (Some(v), VmiAction::Patch(st)) => {
            let mut v = v.clone();
            v.status = Some(st.clone());
            patched = v;
            Some(&patched)
        }
        (v, _) => v,
    };
    s.created = vmi.is_some() && !deleting;
    let vmi_conds = vmi
        .and_then(|v| v.status.as_ref())
        .map(|st| st.conditions.clone())
        .unwrap_or_default();
    s.ready = s.created && conditions::is_true(&vmi_conds, "Ready");
    s.start_failure = start_failure;
    s.printable_status = Some(
        printable(
            vm,
            vmi,
            strategy,
            s.start_failure.as_ref(),
            deleting,
            dv_failed,
        )
        .to_string(),
    );
    match (s.created, conditions::find(&vmi_conds, "Ready")) {
        (true, Some(c)) => {
            let (st, reason, msg) = (c.status == "True", c.reason.clone(), c.message.clone());
            conditions::set(
                &mut s.conditions,
                Flavour::KubeVirt,
                "Ready",
                st,
                &reason,
                &msg,
                now,
            );
        }
        _ => conditions::set(
            &mut s.conditions,
            Flavour::KubeVirt,
            "Ready",
            false,
            "VMINotExists",
            "VMI does not exist",
            now,
        ),
    }
    s.observed_generation = vm.metadata.generation;
    s.desired_generation = vm.metadata.generation;
    s.run_strategy = Some(strategy.as_str().to_string());
    s
}

/// Decides the next step for a VM and its VMI. Pure.
pub fn decide(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    volumes: &VolumeCheck,
    node: &str,
    t: &Timing,
    now: Timestamp,
) -> VmDecision {
    let strategy = run_strategy(vm);
    let now_s = clock::format(now);
    let old_failure = vm.status.as_ref().and_then(|s| s.start_failure.clone());
    let mut failure = old_failure.clone();
    let mut requeue = None;
    let vm_deleting = vm.metadata.deletion_timestamp.is_some();
    let action = match vmi {
        Some(v) if v.metadata.deletion_timestamp.is_some() => {
            let (action, after) = step_stopping(v, t, now);
            requeue = after;
            action
        }
        Some(_) if strategy == RunStrategy::Halted || vm_deleting => VmiAction::Delete,
        Some(v) => {
            let st = v.status.clone().unwrap_or_default();
            if st.is_final() {
                let failed = st.phase == phase::FAILED;
                let replace = match strategy {
                    RunStrategy::Always => true,
                    RunStrategy::RerunOnFailure => failed,
                    _ => false,
                };
                if replace && failed {
                    let uid = v.uid();
                    let f = failure.get_or_insert_with(StartFailure::default);
                    if f.last_failed_vmi_uid != uid {
                        f.consecutive_fail_count += 1;
                        f.last_failed_vmi_uid = uid;
                        f.retry_after_timestamp = Some(clock::format(clock::add(
                            now,
                            scaled_backoff(t, f.consecutive_fail_count),
                        )));
                    }
                }
                if replace {
                    VmiAction::Delete
                } else {
                    VmiAction::Nothing
                }
            } else {
                let (next, after) = step_vmi(v, volumes, node, t, now);
                requeue = after;
                if next.as_ref().is_some_and(|n| n.phase == phase::RUNNING) {
                    failure = None;
                }
                next.map_or(VmiAction::Nothing, VmiAction::Patch)
            }
        }
        None if vm_deleting => VmiAction::Nothing,
        None if strategy.wants_vmi() => {
            let retry_at = failure
                .as_ref()
                .and_then(|f| f.retry_after_timestamp.as_deref())
                .and_then(clock::parse);
            match retry_at {
                Some(at) if at > now => {
                    requeue = Some(clock::elapsed(now, at).max(Duration::from_millis(10)));
                    VmiAction::Nothing
                }
                _ => VmiAction::Create,
            }
        }
        None => VmiAction::Nothing,
    };
    let dv_failed = matches!(volumes, VolumeCheck::DataVolumeFailed(_));
    let status = vm_status(vm, vmi, &action, failure, &now_s, dv_failed);
    let has_finalizer = vm.finalizers().iter().any(|f| f == VM_FINALIZER);
    let vm_finalizer = match (vm_deleting, has_finalizer) {
        (false, false) => Some(true),
        (true, true) if vmi.is_none() => Some(false),
        (true, true) | (true, false) | (false, true) => None,
    };
    VmDecision {
        action,
        status,
        vm_finalizer,
        requeue,
    }
}

fn scaled_backoff(t: &Timing, failures: i64) -> Duration {
    // `recheck` is one real second scaled; the backoff scales the same way.
    start_backoff(failures).mul_f64(t.recheck.as_secs_f64())
}

/// The VMI a VM's template describes: same name, owned (controller) by the VM, the
/// template's labels and annotations plus the fault fates decided for it. Pure.
pub fn vmi_for(vm: &VirtualMachine, fates: &BTreeMap<String, String>) -> VirtualMachineInstance {
    let template = vm.spec.template.clone().unwrap_or_default();
    let tmeta: ObjectMeta = template
        .metadata
        .and_then(|m| serde_json::from_value(m).ok())
        .unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.extend(fates.clone());
    let mut labels = tmeta.labels.unwrap_or_default();
    labels.insert("kubevirt.io/vm".into(), vm.name_any());
    let mut vmi = VirtualMachineInstance::new(&vm.name_any(), template.spec);
    vmi.metadata.namespace = vm.namespace();
    vmi.metadata.labels = Some(labels);
    vmi.metadata.annotations = Some(annotations);
    vmi.metadata.finalizers = Some(vec![VMI_FINALIZER.to_owned()]);
    vmi.metadata.owner_references = Some(vec![OwnerReference {
        api_version: VirtualMachine::api_version(&()).to_string(),
        kind: VirtualMachine::kind(&()).to_string(),
        name: vm.name_any(),
        uid: vm.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    vmi
}

struct Ctx {
    sim: Arc<Sim>,
    pvcs: Arc<Pvcs>,
    timing: Timing,
}

/// Runs the VM part until the watch ends.
pub async fn run(sim: Arc<Sim>, pvcs: Arc<Pvcs>) {
    let timing = Timing::at(sim.settings.speed);
    let controller = Controller::new(sim.scoped::<VirtualMachine>(), watcher::Config::default())
        .owns(
            sim.scoped::<VirtualMachineInstance>(),
            watcher::Config::default(),
        );
    let ctx = Arc::new(Ctx { sim, pvcs, timing });
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "vm reconcile");
            }
        })
        .await;
}

fn error_policy(_vm: Arc<VirtualMachine>, e: &Error, _ctx: Arc<Ctx>) -> Action {
    warn!(error = %e, label = e.metric_label(), "vm");
    Action::requeue(Duration::from_secs(1))
}

/// The VM as a child for fault lookups (its migration owner, or itself).
pub fn child_of(vm: &VirtualMachine) -> Child<'_> {
    Child {
        api_version: "kubevirt.io/v1",
        kind: "VirtualMachine",
        plural: "virtualmachines",
        namespace: vm.metadata.namespace.as_deref().unwrap_or(""),
        name: vm.metadata.name.as_deref().unwrap_or(""),
        annotations: vm.metadata.annotations.as_ref(),
        owners: vm.metadata.owner_references.as_deref().unwrap_or(&[]),
    }
}

/// The fault fates of the VM's next instance, as annotations (`vmi`, `agent`, `stop`); taking
/// a `once` fault records it as fired. `--kubevirt real` writes them on the launcher pod.
///
/// Errors: recording a fired fault failed.
pub async fn fates(sim: &Sim, vm: &VirtualMachine) -> Result<BTreeMap<String, String>> {
    let mut faults = match Faults::load(&sim.client, &child_of(vm)).await {
        Ok(f) => f,
        Err(e) => {
            warn!(vm = %vm.name_any(), error = %e, "reading faults; starting without");
            return Ok(BTreeMap::new());
        }
    };
    let mut out = BTreeMap::new();
    if let Some(f) = faults
        .take(&sim.client, &sim.settings.rates, Step::Vmi)
        .await?
    {
        out.insert(
            VMI_FATE_ANNOTATION.to_string(),
            if f.terminal { "unschedulable" } else { "fail" }.to_string(),
        );
    }
    if faults
        .take(&sim.client, &sim.settings.rates, Step::Agent)
        .await?
        .is_some()
    {
        out.insert(AGENT_FATE_ANNOTATION.to_string(), "silent".to_string());
    }
    if let Some(f) = faults
        .take(&sim.client, &sim.settings.rates, Step::Stop)
        .await?
    {
        let fate = if f.record { "late" } else { "lost" };
        out.insert(STOP_FATE_ANNOTATION.to_string(), fate.to_string());
    }
    Ok(out)
}

/// The DataVolumes the VM's template names: (name, phase, `Running` condition).
async fn data_volumes(
    sim: &Sim,
    ns: &str,
    vm: &VirtualMachine,
) -> Result<Vec<(String, Option<String>, Option<crate::conditions::Condition>)>> {
    let api = sim.api::<crate::datavolumes::DataVolume>(ns);
    let mut out = vec![];
    let names: Vec<String> = vm
        .spec
        .template
        .as_ref()
        .map(|t| {
            t.spec
                .volumes
                .iter()
                .filter_map(|v| v.data_volume.as_ref().map(|d| d.name.clone()))
                .collect()
        })
        .unwrap_or_default();
    for name in names {
        if let Some(dv) = api.get_opt(&name).await? {
            let st = dv.status.clone().unwrap_or_default();
            let running = conditions::find(&st.conditions, "Running").cloned();
            out.push((name, st.phase.clone(), running));
        }
    }
    Ok(out)
}

async fn reconcile(vm: Arc<VirtualMachine>, ctx: Arc<Ctx>) -> Result<Action> {
    let sim = &ctx.sim;
    let ns = vm.namespace().unwrap_or_default();
    let name = vm.name_any();
    let vmis = sim.api::<VirtualMachineInstance>(&ns);
    let vmi = vmis.get_opt(&name).await?;
    // A VMI of the same name that this VM does not control is none of its business.
    let vmi = vmi.filter(|v| {
        v.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == vm.uid().as_ref())
    });
    let dv_error = data_volume_error(&data_volumes(sim, &ns, &vm).await?);
    let check = match (&vmi, dv_error) {
        (_, Some(e)) => VolumeCheck::DataVolumeFailed(e),
        (Some(v), None) => check_volumes(v, &sim.settings.volumes, |c| ctx.pvcs.exists(&ns, c)),
        (None, None) => VolumeCheck::Ready,
    };
    let d = decide(
        &vm,
        vmi.as_ref(),
        &check,
        &sim.settings.node_name,
        &ctx.timing,
        clock::now(),
    );
    if vm.status.as_ref() != Some(&d.status) {
        let patch = serde_json::json!({"status": d.status});
        sim.api::<VirtualMachine>(&ns)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    if let Some(add) = d.vm_finalizer {
        set_vm_finalizer(sim, &vm, add).await?;
        if !add {
            info!(vm = %format!("{ns}/{name}"), "VM released (its VMI is gone)");
            return Ok(Action::await_change());
        }
    }
    if let Some(now) = act_on_vmi(sim, &vm, vmi.as_ref(), d.action).await? {
        return Ok(now);
    }
    Ok(d.requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The VM's own finalizer, added or removed.
async fn set_vm_finalizer(sim: &Sim, vm: &VirtualMachine, add: bool) -> Result<()> {
    let mut finalizers: Vec<String> = vm
        .finalizers()
        .iter()
        .filter(|f| *f != VM_FINALIZER)
        .cloned()
        .collect();
    if add {
        finalizers.push(VM_FINALIZER.to_owned());
    }
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers, "resourceVersion": vm.resource_version(),
    }});
    sim.api::<VirtualMachine>(&vm.namespace().unwrap_or_default())
        .patch(
            &vm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// What the decision does to the VM's instance (`vmi`, the one it controls); `Some` when the
/// VM is to be looked at again at once rather than as the decision asks.
async fn act_on_vmi(
    sim: &Sim,
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    action: VmiAction,
) -> Result<Option<Action>> {
    let ns = vm.namespace().unwrap_or_default();
    let name = vm.name_any();
    let vmis = sim.api::<VirtualMachineInstance>(&ns);
    match action {
        VmiAction::Nothing => {}
        VmiAction::Create => {
            let want = vmi_for(vm, &fates(sim, vm).await?);
            match vmis.create(&PostParams::default(), &want).await {
                Ok(_) => info!(vm = %format!("{ns}/{name}"), "created VMI"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            // A created VMI is looked at again at once.
            return Ok(Some(Action::requeue(Duration::from_millis(10))));
        }
        VmiAction::Delete => {
            vmis.delete(&name, &DeleteParams::background())
                .await
                .map(|_| ())
                .or_else(ignore_not_found)?;
            info!(vm = %format!("{ns}/{name}"), "deleted VMI");
        }
        VmiAction::Release => {
            if let Some(v) = vmi {
                let finalizers: Vec<&String> = v
                    .finalizers()
                    .iter()
                    .filter(|f| *f != VMI_FINALIZER)
                    .collect();
                let patch = serde_json::json!({"metadata": {
                    "finalizers": finalizers, "resourceVersion": v.resource_version(),
                }});
                vmis.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
                    .or_else(ignore_not_found)?;
                info!(vmi = %format!("{ns}/{name}"), "VMI stopped and gone");
            }
        }
        VmiAction::Patch(status) => {
            let patch = serde_json::json!({"status": status});
            vmis.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            if vmi
                .and_then(|v| v.status.as_ref())
                .map(|s| s.phase.as_str())
                != Some(status.phase.as_str())
            {
                info!(vmi = %format!("{ns}/{name}"), phase = %status.phase, "VMI phase");
            }
        }
    }
    Ok(None)
}

fn ignore_not_found(e: kube::Error) -> std::result::Result<(), kube::Error> {
    match e {
        kube::Error::Api(s) if s.code == 404 => Ok(()),
        e => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn vm(strategy: Option<&str>, running: Option<bool>) -> VirtualMachine {
        let spec = serde_json::json!({
            "runStrategy": strategy,
            "running": running,
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"domain": {"devices": {}}, "volumes": [{"name": "d0", "dataVolume": {"name": "disk-0"}}]}
            }
        });
        let mut v = VirtualMachine::new("vm1", serde_json::from_value(spec).unwrap());
        v.metadata.namespace = Some("ns".into());
        v.metadata.uid = Some("vm-uid".into());
        v.metadata.generation = Some(2);
        v
    }

    fn t() -> Timing {
        Timing::at(Speed::new(1.0))
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn vmi_of(v: &VirtualMachine, fates: &[(&str, &str)]) -> VirtualMachineInstance {
        let f: BTreeMap<String, String> = fates
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut vmi = vmi_for(v, &f);
        vmi.metadata.uid = Some("vmi-uid".into());
        vmi
    }

    /// Applies decisions until none is due, moving the clock by each requeue.
    fn walk(
        v: &VirtualMachine,
        mut vmi: VirtualMachineInstance,
        mut now: Timestamp,
        steps: usize,
    ) -> (VirtualMachineInstance, Vec<String>) {
        let mut phases = Vec::new();
        for _ in 0..steps {
            let d = decide(v, Some(&vmi), &VolumeCheck::Ready, "sim-node", &t(), now);
            if let VmiAction::Patch(s) = d.action {
                if phases.last() != Some(&s.phase) {
                    phases.push(s.phase.clone());
                }
                vmi.status = Some(s);
            }
            match d.requeue {
                Some(r) => now = clock::add(now, r),
                None => break,
            }
        }
        (vmi, phases)
    }

    #[test]
    fn run_strategies_and_legacy_running() {
        assert_eq!(run_strategy(&vm(Some("Always"), None)), RunStrategy::Always);
        assert_eq!(
            run_strategy(&vm(Some("RerunOnFailure"), None)),
            RunStrategy::RerunOnFailure
        );
        assert_eq!(run_strategy(&vm(Some("Halted"), None)), RunStrategy::Halted);
        assert_eq!(run_strategy(&vm(None, Some(true))), RunStrategy::Always);
        assert_eq!(run_strategy(&vm(None, None)), RunStrategy::Halted);
    }

    #[test]
    fn always_creates_an_owned_vmi_from_the_template() {
        let v = vm(Some("Always"), None);
        let d = decide(
            &v,
            None,
            &VolumeCheck::Ready,
            "sim-node",
            &t(),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(d.action, VmiAction::Create);
        assert_eq!(d.status.printable_status.as_deref(), Some("Starting"));
        let vmi = vmi_for(&v, &BTreeMap::new());
        let o = &vmi.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str(), o.controller),
            ("VirtualMachine", "vm-uid", Some(true))
        );
        assert_eq!(vmi.metadata.labels.as_ref().unwrap()["app"], "x");
        assert_eq!(vmi.spec.volumes[0].claim(), Some("disk-0"));
        assert!(vmi.spec.rest.contains_key("domain"));
    }

    #[test]
    fn halted_creates_nothing_and_deletes_a_running_vmi() {
        let v = vm(Some("Halted"), None);
        let d = decide(
            &v,
            None,
            &VolumeCheck::Ready,
            "sim-node",
            &t(),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(
            (d.action, d.status.printable_status.as_deref()),
            (VmiAction::Nothing, Some("Stopped"))
        );
        let d = decide(
            &v,
            Some(&vmi_of(&v, &[])),
            &VolumeCheck::Ready,
            "sim-node",
            &t(),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(d.action, VmiAction::Delete);
        assert_eq!(d.status.printable_status.as_deref(), Some("Stopping"));
        assert!(!d.status.created);
    }

    #[test]
    fn a_vmi_walks_to_running_then_the_agent_connects() {
        let v = vm(Some("Always"), None);
        let (vmi, phases) = walk(&v, vmi_of(&v, &[]), at("2026-01-01T00:00:00Z"), 50);
        assert_eq!(
            phases,
            vec!["Pending", "Scheduling", "Scheduled", "Running"]
        );
        let s = vmi.status.clone().unwrap();
        assert_eq!(s.node_name.as_deref(), Some("sim-node"));
        assert!(conditions::is_true(&s.conditions, "Ready"));
        assert!(conditions::is_true(&s.conditions, "AgentConnected"));
        let d = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::Ready,
            "sim-node",
            &t(),
            at("2026-01-01T00:01:00Z"),
        );
        assert_eq!(d.action, VmiAction::Nothing);
        assert_eq!(
            (
                d.status.created,
                d.status.ready,
                d.status.printable_status.as_deref()
            ),
            (true, true, Some("Running"))
        );
        assert!(conditions::is_true(&d.status.conditions, "Ready"));
        assert_eq!(d.status.observed_generation, Some(2));
    }

    #[test]
    fn steps_wait_their_time() {
        let v = vm(Some("Always"), None);
        let (vmi, _) = walk(&v, vmi_of(&v, &[]), at("2026-01-01T00:00:00Z"), 1);
        assert_eq!(vmi.status.as_ref().unwrap().phase, "Pending");
        let early = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:00:00.200Z"),
        );
        assert_eq!(early.action, VmiAction::Nothing);
        assert_eq!(early.requeue, Some(Duration::from_millis(300)));
        let due = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:00:00.500Z"),
        );
        assert!(matches!(due.action, VmiAction::Patch(s) if s.phase == "Scheduling"));
    }

    #[test]
    fn missing_volumes_hold_the_vmi_pending_with_kubevirts_reasons() {
        let v = vm(Some("Always"), None);
        let (vmi, _) = walk(&v, vmi_of(&v, &[]), at("2026-01-01T00:00:00Z"), 1);
        let d = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::MissingClaim("disk-0".into()),
            "n",
            &t(),
            at("2026-01-01T00:00:05Z"),
        );
        let VmiAction::Patch(s) = d.action else {
            panic!("{:?}", d.action)
        };
        assert_eq!(s.phase, "Pending");
        let c = conditions::find(&s.conditions, "Synchronized").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "FailedPvcNotFound")
        );
        assert!(c.message.contains("ns/disk-0"));
        assert_eq!(
            d.status.printable_status.as_deref(),
            Some("ErrorPvcNotFound")
        );
        let d = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::NotImported("disk-0".into()),
            "n",
            &t(),
            at("2026-01-01T00:00:05Z"),
        );
        let VmiAction::Patch(s) = d.action else {
            panic!()
        };
        assert_eq!(
            conditions::find(&s.conditions, "DataVolumesReady")
                .unwrap()
                .reason,
            "NotAllDVsReady"
        );
    }

    #[test]
    fn a_vmi_whose_node_selector_matches_no_node_stays_scheduling_unschedulable() {
        let v = vm(Some("Always"), None);
        let mut vmi = vmi_of(&v, &[]);
        vmi.spec
            .rest
            .insert("nodeSelector".into(), serde_json::json!({"zone": "b"}));
        let (vmi, phases) = walk(&v, vmi, at("2026-01-01T00:00:00Z"), 50);
        assert_eq!(phases, vec!["Pending", "Scheduling"]);
        let c = conditions::find(&vmi.status.as_ref().unwrap().conditions, "PodScheduled");
        assert_eq!(c.unwrap().message, crate::scheduling::NO_NODE_MATCHES);
        let d = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:10:00Z"),
        );
        assert_eq!(
            d.status.printable_status.as_deref(),
            Some("ErrorUnschedulable")
        );
    }

    #[test]
    fn an_unschedulable_vmi_stays_scheduling() {
        let v = vm(Some("Always"), None);
        let (vmi, phases) = walk(
            &v,
            vmi_of(&v, &[(VMI_FATE_ANNOTATION, "unschedulable")]),
            at("2026-01-01T00:00:00Z"),
            50,
        );
        assert_eq!(phases, vec!["Pending", "Scheduling"]);
        let d = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:10:00Z"),
        );
        assert_eq!(
            d.status.printable_status.as_deref(),
            Some("ErrorUnschedulable")
        );
    }

    #[test]
    fn a_failing_vmi_is_replaced_after_a_backoff_under_always() {
        let v = vm(Some("Always"), None);
        let (vmi, phases) = walk(
            &v,
            vmi_of(&v, &[(VMI_FATE_ANNOTATION, "fail")]),
            at("2026-01-01T00:00:00Z"),
            50,
        );
        assert_eq!(phases, vec!["Pending", "Scheduling", "Scheduled", "Failed"]);
        let now = at("2026-01-01T00:01:00Z");
        let d = decide(&v, Some(&vmi), &VolumeCheck::Ready, "n", &t(), now);
        assert_eq!(d.action, VmiAction::Delete);
        let f = d.status.start_failure.clone().unwrap();
        assert_eq!(
            (f.consecutive_fail_count, f.last_failed_vmi_uid.as_deref()),
            (1, Some("vmi-uid"))
        );
        // The same failed VMI is not counted twice.
        let mut v2 = v.clone();
        v2.status = Some(d.status.clone());
        let again = decide(&v2, Some(&vmi), &VolumeCheck::Ready, "n", &t(), now);
        assert_eq!(
            again.status.start_failure.unwrap().consecutive_fail_count,
            1
        );
        // Gone: wait for the backoff, then start again.
        let wait = decide(
            &v2,
            None,
            &VolumeCheck::Ready,
            "n",
            &t(),
            clock::add(now, Duration::from_secs(5)),
        );
        assert_eq!(wait.action, VmiAction::Nothing);
        assert_eq!(
            wait.status.printable_status.as_deref(),
            Some("CrashLoopBackOff")
        );
        let go = decide(
            &v2,
            None,
            &VolumeCheck::Ready,
            "n",
            &t(),
            clock::add(now, Duration::from_secs(12)),
        );
        assert_eq!(go.action, VmiAction::Create);
    }

    #[test]
    fn once_and_rerun_on_failure_keep_final_vmis_as_they_should() {
        let failed = |v: &VirtualMachine| {
            let (vmi, _) = walk(
                v,
                vmi_of(v, &[(VMI_FATE_ANNOTATION, "fail")]),
                at("2026-01-01T00:00:00Z"),
                50,
            );
            vmi
        };
        let once = vm(Some("Once"), None);
        let d = decide(
            &once,
            Some(&failed(&once)),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:01:00Z"),
        );
        assert_eq!(
            (d.action, d.status.printable_status.as_deref()),
            (VmiAction::Nothing, Some("Stopped"))
        );
        let rerun = vm(Some("RerunOnFailure"), None);
        let d = decide(
            &rerun,
            Some(&failed(&rerun)),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:01:00Z"),
        );
        assert_eq!(d.action, VmiAction::Delete);
    }

    #[test]
    fn a_silent_agent_never_connects() {
        let v = vm(Some("Always"), None);
        let (vmi, phases) = walk(
            &v,
            vmi_of(&v, &[(AGENT_FATE_ANNOTATION, "silent")]),
            at("2026-01-01T00:00:00Z"),
            50,
        );
        assert_eq!(phases.last().map(String::as_str), Some("Running"));
        let d = decide(
            &v,
            Some(&vmi),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T01:00:00Z"),
        );
        assert_eq!((d.action, d.requeue), (VmiAction::Nothing, None));
        assert!(!conditions::is_true(
            &vmi.status.unwrap().conditions,
            "AgentConnected"
        ));
    }

    #[test]
    fn a_failed_datavolume_shows_as_datavolume_error_and_holds_the_vmi() {
        let v = vm(Some("Always"), None);
        let running = |reason: &str| {
            Some(crate::conditions::Condition {
                type_: "Running".into(),
                status: "False".into(),
                reason: reason.into(),
                message: "Unable to connect to s3".into(),
                ..Default::default()
            })
        };
        let err = data_volume_error(&[
            ("ok".into(), Some("Succeeded".into()), None),
            (
                "d".into(),
                Some("ImportInProgress".into()),
                running("Error"),
            ),
        ])
        .unwrap();
        assert!(err.contains("importer has stopped running due to an error: Unable to connect"));
        assert_eq!(
            data_volume_error(&[(
                "d".into(),
                Some("ImportInProgress".into()),
                running("Pod is running")
            )]),
            None
        );
        assert!(
            data_volume_error(&[("d".into(), Some("Failed".into()), None)])
                .unwrap()
                .contains("Failed phase")
        );
        let check = VolumeCheck::DataVolumeFailed(err);
        let d = decide(&v, None, &check, "n", &t(), at("2026-01-01T00:00:00Z"));
        assert_eq!(
            d.status.printable_status.as_deref(),
            Some("DataVolumeError")
        );
        let (vmi, _) = walk(&v, vmi_of(&v, &[]), at("2026-01-01T00:00:00Z"), 1);
        let d = decide(
            &v,
            Some(&vmi),
            &check,
            "n",
            &t(),
            at("2026-01-01T00:00:05Z"),
        );
        let VmiAction::Patch(s) = d.action else {
            panic!("{:?}", d.action)
        };
        assert_eq!(s.phase, "Pending", "the VMI waits for its volumes");
        assert_eq!(
            d.status.printable_status.as_deref(),
            Some("DataVolumeError")
        );
    }

    /// `vmi` deleted at `at`, with `grace` seconds (KubeVirt's default when `None`).
    fn deleted(
        mut vmi: VirtualMachineInstance,
        when: &str,
        grace: Option<u64>,
    ) -> VirtualMachineInstance {
        vmi.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(when)),
        );
        if let Some(g) = grace {
            vmi.spec
                .rest
                .insert("terminationGracePeriodSeconds".into(), g.into());
        }
        vmi
    }

    #[test]
    fn a_deleted_running_vmi_keeps_running_for_its_grace_then_goes() {
        let always = vm(Some("Always"), None);
        let (running, _) = walk(
            &always,
            vmi_of(&always, &[]),
            at("2026-01-01T00:00:00Z"),
            50,
        );
        let v = vm(Some("Halted"), None);
        assert_eq!(running.status.as_ref().unwrap().phase, "Running");
        assert!(
            running.finalizers().iter().any(|f| f == VMI_FINALIZER),
            "from its creation"
        );
        let gone_at = |grace: Option<u64>, fates: &[(&str, &str)]| {
            let mut vmi = deleted(running.clone(), "2026-01-01T00:01:00Z", grace);
            vmi.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(fates.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            let mut now = at("2026-01-01T00:01:00Z");
            for _ in 0..20 {
                let (action, after) = step_stopping(&vmi, &t(), now);
                match action {
                    VmiAction::Nothing => {
                        assert_eq!(
                            vmi.status.as_ref().unwrap().phase,
                            "Running",
                            "running while it stops"
                        );
                        let d = decide(&v, Some(&vmi), &VolumeCheck::Ready, "n", &t(), now);
                        assert_eq!(d.status.printable_status.as_deref(), Some("Stopping"));
                    }
                    VmiAction::Patch(s) => {
                        assert_eq!(s.phase, "Succeeded");
                        vmi.status = Some(s);
                    }
                    VmiAction::Release => {
                        return Some(clock::elapsed(at("2026-01-01T00:01:00Z"), now));
                    }
                    other => panic!("{other:?}"),
                }
                match after {
                    Some(d) => now = clock::add(now, d),
                    None => return None,
                }
            }
            None
        };
        // The default grace (30 s), from the end of the deletion's second.
        let d = gone_at(None, &[]).unwrap();
        assert!(
            d >= Duration::from_secs(31) && d < Duration::from_secs(32),
            "{d:?}"
        );
        let d = gone_at(Some(3), &[]).unwrap();
        assert!(
            d >= Duration::from_secs(4) && d < Duration::from_secs(5),
            "{d:?}"
        );
        let d = gone_at(Some(3), &[(STOP_FATE_ANNOTATION, "late")]).unwrap();
        assert!(d >= Duration::from_secs(7), "twice the grace: {d:?}");
        assert_eq!(
            gone_at(Some(3), &[(STOP_FATE_ANNOTATION, "lost")]),
            None,
            "never"
        );
    }

    #[test]
    fn a_deleted_vmi_without_a_guest_goes_at_once() {
        let v = vm(Some("Always"), None);
        let (pending, _) = walk(&v, vmi_of(&v, &[]), at("2026-01-01T00:00:00Z"), 1);
        assert_eq!(pending.status.as_ref().unwrap().phase, "Pending");
        let (action, _) = step_stopping(
            &deleted(pending, "2026-01-01T00:00:01Z", None),
            &t(),
            at("2026-01-01T00:00:01Z"),
        );
        assert_eq!(action, VmiAction::Release);
        let (failed, _) = walk(
            &v,
            vmi_of(&v, &[(VMI_FATE_ANNOTATION, "fail")]),
            at("2026-01-01T00:00:00Z"),
            50,
        );
        let (action, _) = step_stopping(
            &deleted(failed, "2026-01-01T00:01:00Z", None),
            &t(),
            at("2026-01-01T00:01:00Z"),
        );
        assert_eq!(action, VmiAction::Release, "a final VMI's guest is down");
    }

    #[test]
    fn a_deleted_vm_stops_its_vmi_and_goes_after_it() {
        let mut v = vm(Some("Always"), None);
        let d = decide(
            &v,
            None,
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(d.vm_finalizer, Some(true), "the VM controller's finalizer");
        v.metadata.finalizers = Some(vec![VM_FINALIZER.into()]);
        let (running, _) = walk(&v, vmi_of(&v, &[]), at("2026-01-01T00:00:00Z"), 50);
        v.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            at("2026-01-01T00:01:00Z"),
        ));
        let d = decide(
            &v,
            Some(&running),
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:01:00Z"),
        );
        assert_eq!((d.action, d.vm_finalizer), (VmiAction::Delete, None));
        assert_eq!(d.status.printable_status.as_deref(), Some("Terminating"));
        let d = decide(
            &v,
            None,
            &VolumeCheck::Ready,
            "n",
            &t(),
            at("2026-01-01T00:02:00Z"),
        );
        assert_eq!(
            (d.action, d.vm_finalizer),
            (VmiAction::Nothing, Some(false)),
            "no new VMI; the VM goes once its VMI is gone"
        );
    }

    #[test]
    fn start_backoff_doubles_to_five_minutes() {
        assert_eq!(start_backoff(1), Duration::from_secs(10));
        assert_eq!(start_backoff(3), Duration::from_secs(40));
        assert_eq!(start_backoff(50), Duration::from_secs(300));
    }
}
