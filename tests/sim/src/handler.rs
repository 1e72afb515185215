//! The node in a lab that runs KubeVirt's own virt-controller (`--kubevirt real`): the scheduler
//! binding the virt-launcher pod virt-controller makes, the kubelet running it, and virt-handler
//! writing what it writes of the VMI (`Running`, the guest agent, the guest's shutdown).
//! virt-controller creates the VMI and its pod, moves it to `Scheduling` and `Scheduled`, syncs
//! `Ready` from the pod and removes its finalizer; none of that is played here.
//!
//! A pod's fault fate is decided once, when the sim first sees it, and written on it as
//! annotations: every later decision is a pure function of the VMI, its pod and the clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use crate::clock;
use crate::conditions;
use crate::context::Sim;
use crate::domain;
use crate::kubevirt::{
    NetworkInterface, PhaseTransition, VirtualMachine, VirtualMachineInstance,
    VirtualMachineInstanceSpec, VirtualMachineInstanceStatus, phase,
};
use crate::netstat;
use crate::pods;
use crate::qemu;
use crate::scheduling;
use crate::vms::{
    AGENT_FATE_ANNOTATION, STOP_FATE_ANNOTATION, Timing, VMI_FATE_ANNOTATION, grace_seconds,
};
use crate::{Error, Result};

/// virt-controller's label on launcher pods (`AppLabel`, `podLabels` in
/// `pkg/virt-controller/services/template.go`).
pub const LAUNCHER_SELECTOR: &str = "kubevirt.io=virt-launcher";
/// The launcher's container whose state virt-controller reads (`IsPodReady` in
/// `pkg/controller/controller.go`).
pub const COMPUTE: &str = "compute";
/// Marks a pod whose fault fates were decided (the fates themselves may be none).
pub const FATED_ANNOTATION: &str = "sim.ferry.example/fated";
/// virt-handler's heartbeat on its Node (`VirtHandlerHeartbeat`); virt-controller's node
/// controller fails the VMIs of a node whose heartbeat is older than 5 minutes.
pub const HEARTBEAT_ANNOTATION: &str = "kubevirt.io/heartbeat";

/// What the node does wrong for one pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fates {
    /// The launcher fails once its VMI is `Scheduled`: the VMI ends `Failed`.
    pub fail: bool,
    /// The scheduler finds no room: the pod is never bound.
    pub unschedulable: bool,
    /// The guest agent never connects.
    pub silent: bool,
    pub stop: Option<StopFate>,
}

/// How the node answers when the guest is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopFate {
    /// Twice the grace.
    Late,
    /// Never: the VMI keeps running and its pod stays, as with a node that is gone.
    Lost,
}

/// The pod's fates, `None` until decided. Pure.
pub fn fates_of(pod: &Pod) -> Option<Fates> {
    let a = pod.metadata.annotations.as_ref()?;
    a.contains_key(FATED_ANNOTATION).then(|| {
        let get = |k: &str| a.get(k).map(String::as_str);
        Fates {
            fail: get(VMI_FATE_ANNOTATION) == Some("fail"),
            unschedulable: get(VMI_FATE_ANNOTATION) == Some("unschedulable"),
            silent: get(AGENT_FATE_ANNOTATION) == Some("silent"),
            stop: match get(STOP_FATE_ANNOTATION) {
                Some("late") => Some(StopFate::Late),
                Some("lost") => Some(StopFate::Lost),
                _ => None,
            },
        }
    })
}

/// What to do about the pod.
#[derive(Clone, Debug, PartialEq)]
pub enum PodAction {
    Nothing,
    /// Bind it to the node (`pods/binding`, the scheduler's write).
    Bind,
    /// Merge this status (strategic: conditions by type, others' kept).
    Status(Box<PodStatus>),
    /// Delete it with grace 0 and its uid as precondition (the kubelet's status manager).
    Delete,
}

/// What to do about a real guest's qemu (`--guests qemu`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GuestAction {
    #[default]
    Nothing,
    /// Start qemu from the VMI's spec (virt-launcher defines and starts the domain).
    Start,
    /// Press the power button (virt-launcher's ACPI shutdown).
    PowerDown,
    /// Kill qemu (the grace is over, or the launcher is gone) and forget it.
    Kill,
}

/// One decision for a VMI and its launcher pod: at most one write each, and when to look again.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub pod: PodAction,
    pub vmi: Option<VirtualMachineInstanceStatus>,
    pub requeue: Option<Duration>,
    pub guest: GuestAction,
}

impl Decision {
    fn wait(d: Duration) -> Decision {
        Decision {
            pod: PodAction::Nothing,
            vmi: None,
            requeue: Some(d.max(Duration::from_millis(10))),
            guest: GuestAction::Nothing,
        }
    }
    fn nothing() -> Decision {
        Decision {
            pod: PodAction::Nothing,
            vmi: None,
            requeue: None,
            guest: GuestAction::Nothing,
        }
    }
    fn pod(a: PodAction) -> Decision {
        Decision {
            pod: a,
            vmi: None,
            requeue: Some(Duration::from_millis(10)),
            guest: GuestAction::Nothing,
        }
    }
    fn vmi(s: VirtualMachineInstanceStatus) -> Decision {
        Decision {
            pod: PodAction::Nothing,
            vmi: Some(s),
            requeue: Some(Duration::from_millis(10)),
            guest: GuestAction::Nothing,
        }
    }
    fn with_guest(mut self, g: GuestAction) -> Decision {
        self.guest = g;
        self
    }
}

/// How often a real guest is looked at while it runs (its agent, its exit).
pub const GUEST_POLL: Duration = Duration::from_secs(1);

/// The machine types virt-handler's node labeller finds on the sim's host and labels
/// `machine-type.node.kubevirt.io/<type>=true` (`prepareLabels`,
/// `pkg/virt-handler/node-labeller/node_labeller.go`, from libvirt's capabilities): guessed, those
/// of CentOS Stream 9's QEMU in KubeVirt v1.8's virt-launcher, `q35` its alias; KubeVirt's default
/// `emulatedMachines` (`q35*`, `pc-q35*`, `pkg/virt-config/virt-config.go`) admits all of them.
/// virt-controller selects the VMI's machine type (`WithMachineType`,
/// `pkg/virt-controller/services/nodeselectorrenderer.go`).
pub const MACHINE_TYPES: &[&str] = &[
    "q35",
    "pc-q35-rhel9.6.0",
    "pc-q35-rhel9.4.0",
    "pc-q35-rhel9.2.0",
    "pc-q35-rhel9.0.0",
    "pc-q35-rhel8.6.0",
    "pc-q35-rhel8.5.0",
    "pc-q35-rhel8.4.0",
    "pc-q35-rhel8.3.0",
    "pc-q35-rhel8.2.0",
    "pc-q35-rhel8.1.0",
    "pc-q35-rhel8.0.0",
    "pc-q35-rhel7.6.0",
];

/// The labels virt-handler puts on its node: the heartbeat's and the node labeller's machine
/// types. Pure.
pub fn handler_labels() -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = [
        ("kubevirt.io/schedulable", "true"),
        ("cpumanager", "false"),
        ("kubevirt.io/cpumanager", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for m in MACHINE_TYPES {
        l.insert(format!("machine-type.node.kubevirt.io/{m}"), "true".into());
    }
    l
}

/// Whether the pod's `nodeSelector` and required node affinity let it on `node`, labelled as
/// the kubelet and virt-handler label it, by the same filter as a VMI's
/// (`scheduling::fits_labels`). Pure.
pub fn pod_fits(spec: &PodSpec, node: &str) -> bool {
    let mut rest = serde_json::Map::new();
    if let Some(s) = &spec.node_selector
        && let Ok(v) = serde_json::to_value(s)
    {
        rest.insert("nodeSelector".into(), v);
    }
    if let Some(a) = &spec.affinity
        && let Ok(v) = serde_json::to_value(a)
    {
        rest.insert("affinity".into(), v);
    }
    let mut labels = scheduling::node_labels(node);
    labels.extend(handler_labels());
    scheduling::fits_labels(
        &VirtualMachineInstanceSpec {
            volumes: vec![],
            rest,
        },
        node,
        &labels,
    )
}

fn condition(pod: &Pod, type_: &str) -> Option<PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

fn pod_condition(
    type_: &str,
    status: bool,
    reason: Option<&str>,
    msg: Option<&str>,
    now: &Time,
) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: conditions::status_str(status).into(),
        reason: reason.map(Into::into),
        message: msg.map(Into::into),
        last_transition_time: Some(now.clone()),
        ..PodCondition::default()
    }
}

/// A conditions list where only those that changed status are new (their transition time now).
fn keep_times(pod: &Pod, mut want: Vec<PodCondition>) -> Vec<PodCondition> {
    for c in &mut want {
        if let Some(old) = condition(pod, &c.type_)
            && old.status == c.status
        {
            c.last_transition_time = old.last_transition_time;
        }
    }
    want
}

fn container_id(pod: &Pod) -> String {
    format!("ferry-sim://{}", pod.uid().unwrap_or_default())
}

/// The launcher pod running, as the kubelet reports it: init containers completed, every
/// container running and ready, `Ready` only when the readiness gates hold too (virt-controller's
/// `kubevirt.io/virtual-machine-unpaused`; `GeneratePodReadyCondition` in
/// `pkg/kubelet/status/generate.go`). Pure.
pub fn running(pod: &Pod, now: &Time) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let id = container_id(pod);
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .unwrap_or_else(|| now.clone());
    // Init containers completed at once; every container runs and is ready.
    let done = |c: &Container| {
        let state = pods::state_terminated(&id, 0, Some(&started), &started, None);
        pods::container_status(c, Some(&id), state, false)
    };
    let run =
        |c: &Container| pods::container_status(c, Some(&id), pods::state_running(&started), true);
    let gates = spec.readiness_gates.clone().unwrap_or_default();
    let unmet: Vec<String> = gates
        .iter()
        .filter(|g| condition(pod, &g.condition_type).is_none_or(|c| c.status != "True"))
        .map(|g| g.condition_type.clone())
        .collect();
    let ready = if unmet.is_empty() {
        pod_condition("Ready", true, None, None, now)
    } else {
        let msg = format!(
            "corresponding condition of pod readiness gate \"{}\" does not exist.",
            unmet[0]
        );
        pod_condition(
            "Ready",
            false,
            Some("ReadinessGatesNotReady"),
            Some(&msg),
            now,
        )
    };
    let conditions = keep_times(
        pod,
        vec![
            pod_condition("PodReadyToStartContainers", true, None, None, now),
            pod_condition("Initialized", true, None, None, now),
            ready,
            pod_condition("ContainersReady", true, None, None, now),
            pod_condition("PodScheduled", true, None, None, now),
        ],
    );
    let pod_ip = netstat::pod_ip(pod.metadata.uid.as_deref().unwrap_or_default());
    PodStatus {
        phase: Some("Running".into()),
        host_ip: Some("127.0.0.1".into()),
        pod_ips: Some(vec![k8s_openapi::api::core::v1::PodIP {
            ip: pod_ip.clone(),
        }]),
        pod_ip: Some(pod_ip),
        start_time: Some(started.clone()),
        conditions: Some(conditions),
        // A sidecar (an init container with restartPolicy Always, as `guest-console-log`) keeps
        // running beside the containers (KEP-753).
        init_container_statuses: spec.init_containers.as_ref().map(|cs| {
            cs.iter()
                .map(|c| {
                    if c.restart_policy.as_deref() == Some("Always") {
                        run(c)
                    } else {
                        done(c)
                    }
                })
                .collect()
        }),
        container_statuses: Some(spec.containers.iter().map(run).collect()),
        ..PodStatus::default()
    }
}

/// The launcher pod after its containers ended with `code` (virt-launcher exits once its domain
/// is gone; restartPolicy Never). Pure.
pub fn ended(pod: &Pod, code: i32, now: &Time) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let id = container_id(pod);
    let started = pod.status.as_ref().and_then(|s| s.start_time.clone());
    let end = |c: &Container| {
        let state = pods::state_terminated(&id, code, started.as_ref(), now, None);
        pods::container_status(c, Some(&id), state, false)
    };
    let conditions = keep_times(
        pod,
        vec![
            pod_condition("PodReadyToStartContainers", false, None, None, now),
            pod_condition("Ready", false, Some("PodCompleted"), None, now),
            pod_condition("ContainersReady", false, Some("PodCompleted"), None, now),
        ],
    );
    PodStatus {
        phase: Some(if code == 0 { "Succeeded" } else { "Failed" }.into()),
        host_ip: Some("127.0.0.1".into()),
        start_time: started.clone(),
        conditions: Some(conditions),
        container_statuses: Some(spec.containers.iter().map(end).collect()),
        ..PodStatus::default()
    }
}

fn unschedulable(msg: &str, now: &Time) -> PodStatus {
    PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![pod_condition(
            "PodScheduled",
            false,
            Some("Unschedulable"),
            Some(msg),
            now,
        )]),
        ..PodStatus::default()
    }
}

fn enter(s: &mut VirtualMachineInstanceStatus, phase: &str, now: &str) {
    s.phase = phase.to_string();
    s.phase_transition_timestamps.push(PhaseTransition {
        phase: phase.to_string(),
        phase_transition_timestamp: now.to_string(),
    });
}

/// The injected scheduler message (as `vms::step_vmi` writes it on a VMI in the default mode).
pub const UNSCHEDULABLE_FAULT: &str =
    "0/1 nodes are available: 1 Insufficient devices.kubevirt.io/kvm (fault injected by ferry-sim)";

/// Decides the next step of the node for `vmi` and its launcher `pod` (fates decided). Pure.
///
/// Guarantees: at most one write to each; a pod bound elsewhere, or a VMI in a phase
/// virt-controller owns (`Pending`, `Scheduling`) with its pod not yet ours, is left alone;
/// a guest stops no sooner than its grace after the deletion of its VMI or pod (twice that when
/// `late`, never when `lost`); a pod goes only once its VMI's guest is down.
///
/// With a real guest (`guest` is its qemu's view), the guest runs while qemu runs: it is
/// started when the VMI would go `Running`, the agent connects when the guest's own agent
/// answered, the VMI ends when qemu exits (`Succeeded` after a power-off, else `Failed`), and a
/// stop presses the power button and kills qemu only when the grace is over.
pub fn decide(
    vmi: &VirtualMachineInstance,
    pod: &Pod,
    fates: &Fates,
    node: &str,
    t: &Timing,
    now: Timestamp,
    guest: Option<&qemu::View>,
) -> Decision {
    let now_t = Time(now);
    let now_s = kubevirt_time(now);
    let vst = vmi.status.clone().unwrap_or_default();
    let pst = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_phase = pod_phase(pod);
    let pod_final = pod_phase == "Succeeded" || pod_phase == "Failed";
    let bound = spec.node_name.as_deref().filter(|n| !n.is_empty());
    let since = |ts: Option<Timestamp>| clock::elapsed(ts.unwrap_or(now), now);

    // The scheduler.
    let Some(bound) = bound else {
        return schedule(pod, &spec, fates, node, t, now);
    };
    if bound != node {
        return Decision::nothing();
    }

    let up = vst.phase == phase::SCHEDULED || vst.phase == phase::RUNNING;
    if let Some(stop) = stopping(vmi, pod, fates, t, now, guest) {
        return stop;
    }

    if pod_final {
        // virt-launcher is gone: virt-handler reports the domain gone.
        if up {
            let mut s = vst;
            enter(&mut s, phase::FAILED, &now_s);
            return Decision::vmi(s).with_guest(GuestAction::Kill);
        }
        return Decision::nothing();
    }
    if pod_phase != "Running" {
        let bound_at = condition(pod, "PodScheduled")
            .and_then(|c| c.last_transition_time)
            .map(|t| t.0);
        let waited = since(bound_at);
        if waited < t.scheduled {
            return Decision::wait(t.scheduled - waited);
        }
        return Decision::pod(PodAction::Status(Box::new(running(pod, &now_t))));
    }
    // Running: keep Ready in step with the readiness gates virt-controller sets.
    let want = running(pod, &now_t);
    let ready = |s: &PodStatus| {
        s.conditions
            .as_ref()
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    if ready(&want) != ready(&pst) {
        return Decision::pod(PodAction::Status(Box::new(want)));
    }
    if vst.is_final() {
        let code = if vst.phase == phase::FAILED { 1 } else { 0 };
        return Decision::pod(PodAction::Status(Box::new(ended(pod, code, &now_t))));
    }
    let waited = since(vst.phase_since().and_then(clock::parse));
    let pod_net = if guest.is_none() {
        pod_interfaces(vmi, pod)
    } else {
        vec![]
    };
    guest_step(vst, fates, t, waited, guest, now_s, pod_net)
}

/// The interfaces of an instance whose guest is not real, as virt-handler reports them without
/// an agent: the domain's, the pod network's first with the pod's address (`netstat.rs`). Pure.
fn pod_interfaces(vmi: &VirtualMachineInstance, pod: &Pod) -> Vec<NetworkInterface> {
    let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
    let Ok(m) = crate::domain::machine(&vmi.spec, uid) else {
        return vec![];
    };
    let mut out = netstat::interfaces(&m.nics, m.pod_network.as_deref(), &[], &[]);
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_else(|| netstat::pod_ip(pod.metadata.uid.as_deref().unwrap_or_default()));
    if let Some(i) = out
        .iter_mut()
        .find(|i| Some(i.name.as_str()) == m.pod_network.as_deref())
    {
        i.ips = vec![ip.clone()];
        i.ip = ip;
    }
    out
}

/// The launcher pod's phase as its status says it (`Pending` before it has one).
fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// The scheduler's part, for a launcher pod bound to no node yet: an injected or a real misfit
/// is written once as `PodScheduled=False`, else the pod is bound to this node after the
/// scheduling delay. Pure.
fn schedule(
    pod: &Pod,
    spec: &PodSpec,
    fates: &Fates,
    node: &str,
    t: &Timing,
    now: Timestamp,
) -> Decision {
    if pod.metadata.deletion_timestamp.is_some() {
        return Decision::nothing();
    }
    let msg = if fates.unschedulable {
        Some(UNSCHEDULABLE_FAULT)
    } else if !pod_fits(spec, node) {
        Some(scheduling::NO_NODE_MATCHES)
    } else {
        None
    };
    if let Some(msg) = msg {
        let have = condition(pod, "PodScheduled");
        if have.is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(msg)) {
            return Decision::nothing();
        }
        return Decision::pod(PodAction::Status(Box::new(unschedulable(msg, &Time(now)))));
    }
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let waited = clock::elapsed(created.unwrap_or(now), now);
    if waited < t.scheduling {
        return Decision::wait(t.scheduling - waited);
    }
    Decision::pod(PodAction::Bind)
}

/// The stop of a guest whose VMI or pod is being deleted, `None` while neither is: the guest
/// stops once its grace is over (twice that when `late`, never when `lost`), then its pod ends,
/// then the pod goes. Pure.
fn stopping(
    vmi: &VirtualMachineInstance,
    pod: &Pod,
    fates: &Fates,
    t: &Timing,
    now: Timestamp,
    guest: Option<&qemu::View>,
) -> Option<Decision> {
    // The guest is asked to stop by deleting its VMI (virt-handler) or its pod (the kubelet's
    // SIGTERM to virt-launcher), whichever came first.
    let asked = [
        vmi.metadata.deletion_timestamp.as_ref(),
        pod.metadata.deletion_timestamp.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|t| t.0)
    .min()?;
    let vst = vmi.status.clone().unwrap_or_default();
    let up = vst.phase == phase::SCHEDULED || vst.phase == phase::RUNNING;
    let pod_phase = pod_phase(pod);
    let pod_final = pod_phase == "Succeeded" || pod_phase == "Failed";
    if fates.stop == Some(StopFate::Lost) {
        return Some(Decision::nothing());
    }
    if up && let Some(g) = guest {
        return Some(stop_real_guest(vmi, vst, g, t, asked, now));
    }
    if up {
        let periods = if fates.stop == Some(StopFate::Late) {
            2
        } else {
            1
        };
        let grace = t.second * u32::try_from(grace_seconds(vmi) * periods).unwrap_or(u32::MAX);
        let due = clock::add(asked, Duration::from_secs(1) + grace);
        if now < due {
            return Some(Decision::wait(clock::elapsed(now, due)));
        }
        let mut s = vst;
        enter(&mut s, phase::SUCCEEDED, &kubevirt_time(now));
        return Some(Decision::vmi(s));
    }
    if !pod_final {
        let code = if vst.phase == phase::FAILED { 1 } else { 0 };
        return Some(Decision::pod(PodAction::Status(Box::new(ended(
            pod,
            code,
            &Time(now),
        )))));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(Decision::pod(PodAction::Delete));
    }
    Some(Decision::nothing())
}

/// A real guest asked to stop (at `asked`): the power button is pressed once, and qemu is
/// killed when the grace is over or the guest is already down. Pure.
fn stop_real_guest(
    vmi: &VirtualMachineInstance,
    vst: VirtualMachineInstanceStatus,
    g: &qemu::View,
    t: &Timing,
    asked: Timestamp,
    now: Timestamp,
) -> Decision {
    let mut s = vst;
    enter(&mut s, phase::SUCCEEDED, &kubevirt_time(now));
    if !g.started || g.exited.is_some() {
        return Decision::vmi(s).with_guest(GuestAction::Kill);
    }
    let grace = t.second * u32::try_from(grace_seconds(vmi)).unwrap_or(u32::MAX);
    let due = clock::add(asked, Duration::from_secs(1) + grace);
    if now < due {
        let action = if g.powerdown_sent {
            GuestAction::Nothing
        } else {
            GuestAction::PowerDown
        };
        return Decision::wait(clock::elapsed(now, due).min(GUEST_POLL)).with_guest(action);
    }
    Decision::vmi(s).with_guest(GuestAction::Kill)
}

/// The guest of a running launcher pod, `waited` into its VMI's phase: it goes `Running` after
/// the start delay (or `Failed` when fated to), and its agent connects after the agent's delay
/// (never when `silent`). Pure.
fn guest_step(
    vst: VirtualMachineInstanceStatus,
    fates: &Fates,
    t: &Timing,
    waited: Duration,
    guest: Option<&qemu::View>,
    now_s: String,
    pod_net: Vec<NetworkInterface>,
) -> Decision {
    match vst.phase.as_str() {
        phase::SCHEDULED if fates.fail => {
            if waited < t.fail_after {
                return Decision::wait(t.fail_after - waited);
            }
            let mut s = vst;
            enter(&mut s, phase::FAILED, &now_s);
            s.reason = Some("FaultInjected".into());
            Decision::vmi(s)
        }
        phase::SCHEDULED => {
            if waited < t.pending {
                return Decision::wait(t.pending - waited);
            }
            let mut s = vst;
            enter(&mut s, phase::RUNNING, &now_s);
            if !pod_net.is_empty() {
                s.interfaces = pod_net;
            }
            let start = guest.map_or(GuestAction::Nothing, |_| GuestAction::Start);
            Decision::vmi(s).with_guest(start)
        }
        phase::RUNNING if let Some(g) = guest => real_guest_runs(vst, g, &now_s),
        phase::RUNNING => {
            if fates.silent || conditions::is_true(&vst.conditions, "AgentConnected") {
                return Decision::nothing();
            }
            if waited < t.agent {
                return Decision::wait(t.agent - waited);
            }
            // As virt-handler adds it (`vm.go`, the agent channel connected): a probe time, no
            // transition time.
            let mut s = vst;
            s.conditions.push(conditions::Condition {
                type_: "AgentConnected".into(),
                status: "True".into(),
                last_probe_time: Some(now_s),
                ..conditions::Condition::default()
            });
            s.guest_os_info = Some(serde_json::json!({
                "id": "ferry-sim", "name": "ferry-sim guest", "prettyName": "ferry-sim guest"
            }));
            Decision::vmi(s)
        }
        // Pending, Scheduling: virt-controller's.
        _ => Decision::nothing(),
    }
}

/// A real guest while its VMI is `Running`: it ends when qemu ends (or never started here: the
/// domain is gone, as virt-handler finds after a node restart), its agent connects once the
/// guest's agent answered, and its interfaces are the domain's with what the agent said of them
/// (`netstat.rs`), written when they change. Pure.
fn real_guest_runs(mut s: VirtualMachineInstanceStatus, g: &qemu::View, now_s: &str) -> Decision {
    let ended = match (g.started, g.exited, &g.failed_to_start) {
        (false, _, _) | (_, _, Some(_)) => Some(phase::FAILED),
        (true, Some(0), None) => Some(phase::SUCCEEDED),
        (true, Some(_), None) => Some(phase::FAILED),
        (true, None, None) => None,
    };
    if let Some(p) = ended {
        enter(&mut s, p, now_s);
        return Decision::vmi(s).with_guest(GuestAction::Kill);
    }
    let mut changed = false;
    if let Some(os) = &g.agent
        && !conditions::is_true(&s.conditions, "AgentConnected")
    {
        s.conditions.push(conditions::Condition {
            type_: "AgentConnected".into(),
            status: "True".into(),
            last_probe_time: Some(now_s.to_owned()),
            ..conditions::Condition::default()
        });
        s.guest_os_info = Some(os.clone());
        changed = true;
    }
    let interfaces = netstat::interfaces(
        &g.nics,
        g.pod_network.as_deref(),
        &g.interfaces,
        &s.interfaces,
    );
    if interfaces != s.interfaces {
        s.interfaces = interfaces;
        changed = true;
    }
    if changed {
        Decision::vmi(s)
    } else {
        Decision::wait(GUEST_POLL)
    }
}

/// A time as KubeVirt writes it (`metav1.Time`: whole seconds, truncated). virt-controller's VMI
/// patches `test` the conditions as it serialises them (`prepareVMIPatch`,
/// `pkg/virt-controller/watch/vmi/lifecycle.go`): a condition the sim wrote with milliseconds
/// would fail every one of them. Pure.
pub fn kubevirt_time(now: Timestamp) -> String {
    Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// virt-handler's heartbeat patch of its Node (`HeartBeat.do` in
/// `pkg/virt-handler/heartbeat/heartbeat.go`): schedulable, no CPU manager, the time; with the
/// node labeller's machine types (sent apart by virt-handler, here in one patch). Pure.
pub fn heartbeat(now: Timestamp) -> serde_json::Value {
    let at = kubevirt_time(now);
    serde_json::json!({"metadata": {
        "labels": handler_labels(),
        "annotations": {HEARTBEAT_ANNOTATION: at},
    }})
}

struct Ctx {
    sim: Arc<Sim>,
    timing: Timing,
}

/// Runs the node's part for VMIs and their launcher pods until the watch ends.
pub async fn run(sim: Arc<Sim>) {
    let timing = Timing::at(sim.settings.speed);
    let controller = Controller::new(
        sim.scoped::<VirtualMachineInstance>(),
        watcher::Config::default(),
    )
    .owns(
        sim.scoped::<Pod>(),
        watcher::Config::default().labels(LAUNCHER_SELECTOR),
    );
    let ctx = Arc::new(Ctx { sim, timing });
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "node reconcile");
            }
        })
        .await;
}

fn error_policy(_vmi: Arc<VirtualMachineInstance>, e: &Error, _ctx: Arc<Ctx>) -> Action {
    match e {
        Error::Kube(kube::Error::Api(s)) if s.code == 409 => {
            debug!(error = %e, "node: conflict, again")
        }
        _ => warn!(error = %e, label = e.metric_label(), "node"),
    }
    Action::requeue(Duration::from_millis(500))
}

/// Whether `pod` is controlled by the VMI of `uid`.
fn controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "VirtualMachineInstance" && o.uid == uid)
}

/// Decides and writes the pod's fault fates, from its VMI's owner VM (and that VM's migration).
async fn decide_fates(sim: &Sim, vmi: &VirtualMachineInstance, pod: &Pod) -> Result<()> {
    let ns = pod.namespace().unwrap_or_default();
    let vm_uid = vmi
        .owner_references()
        .iter()
        .find(|o| o.kind == "VirtualMachine" && o.controller == Some(true))
        .map(|o| (o.name.clone(), o.uid.clone()));
    let mut anns = BTreeMap::new();
    if let Some((name, uid)) = vm_uid
        && let Some(vm) = sim.api::<VirtualMachine>(&ns).get_opt(&name).await?
        && vm.uid().as_deref() == Some(uid.as_str())
    {
        anns = crate::vms::fates(sim, &vm).await?;
    }
    anns.insert(FATED_ANNOTATION.into(), "true".into());
    // The serial console's log, kept for the `guest-console-log` container (empty for a guest
    // the sim only pretends to run, as a guest that writes nothing to its console).
    let console = qemu::console_log(
        sim.settings.volumes.root(),
        &ns,
        &vmi.uid().unwrap_or_default(),
    );
    crate::logs::Writer::open(&console).map_err(|e| Error::io(&console, e))?;
    anns.insert(
        pods::CONSOLE_LOG_ANNOTATION.into(),
        console.display().to_string(),
    );
    let patch = serde_json::json!({"metadata": {"annotations": anns}});
    sim.api::<Pod>(&ns)
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    if anns.len() > 1 {
        info!(pod = %format!("{ns}/{}", pod.name_any()), fates = ?anns, "launcher pod fates");
    }
    Ok(())
}

async fn reconcile(vmi: Arc<VirtualMachineInstance>, ctx: Arc<Ctx>) -> Result<Action> {
    let sim = &ctx.sim;
    let ns = vmi.namespace().unwrap_or_default();
    let uid = vmi.uid().unwrap_or_default();
    let pods = sim
        .api::<Pod>(&ns)
        .list(&ListParams::default().labels(&format!("kubevirt.io/created-by={uid}")))
        .await?;
    let mut next: Option<Duration> = None;
    for pod in pods.items.iter().filter(|p| controlled_by(p, &uid)) {
        let Some(fates) = fates_of(pod) else {
            decide_fates(sim, &vmi, pod).await?;
            return Ok(Action::requeue(Duration::from_millis(10)));
        };
        let view = (sim.settings.guests == qemu::GuestMode::Qemu).then(|| sim.guests.view(&uid));
        let d = decide(
            &vmi,
            pod,
            &fates,
            &sim.settings.node_name,
            &ctx.timing,
            clock::now(),
            view.as_ref(),
        );
        act_on_guest(sim, &vmi, d.guest);
        act(sim, &vmi, pod, d.pod, d.vmi).await?;
        next = match (next, d.requeue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

/// Starts, powers down or kills the VMI's qemu.
fn act_on_guest(sim: &Sim, vmi: &VirtualMachineInstance, action: GuestAction) {
    let uid = vmi.uid().unwrap_or_default();
    let ns = vmi.namespace().unwrap_or_default();
    match action {
        GuestAction::Nothing => {}
        GuestAction::Start => match domain::machine(&vmi.spec, &uid) {
            Ok(m) => {
                let volumes = &sim.settings.volumes;
                let disks = m
                    .disks
                    .iter()
                    .map(|d| volumes.image(&ns, &d.claim))
                    .collect();
                let console = qemu::console_log(volumes.root(), &ns, &uid);
                sim.guests.start(&uid, &m, disks, &console);
            }
            Err(why) => {
                warn!(vmi = %format!("{ns}/{}", vmi.name_any()), %why, "domain not defined");
                sim.guests.refuse(&uid, why);
            }
        },
        GuestAction::PowerDown => sim.guests.power_down(&uid),
        GuestAction::Kill => sim.guests.kill(&uid),
    }
}

async fn act(
    sim: &Sim,
    vmi: &VirtualMachineInstance,
    pod: &Pod,
    pod_action: PodAction,
    vmi_status: Option<VirtualMachineInstanceStatus>,
) -> Result<()> {
    let ns = pod.namespace().unwrap_or_default();
    let pods: Api<Pod> = sim.api(&ns);
    let name = pod.name_any();
    let key = format!("{ns}/{name}");
    match pod_action {
        PodAction::Nothing => {}
        PodAction::Bind => {
            let binding = serde_json::json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "uid": pod.uid()},
                "target": {"apiVersion": "v1", "kind": "Node", "name": sim.settings.node_name},
            });
            match pods
                .create_subresource::<_, serde_json::Value>(
                    "binding",
                    &name,
                    &PostParams::default(),
                    &binding,
                )
                .await
            {
                Ok(_) => info!(pod = %key, node = %sim.settings.node_name, "launcher pod bound"),
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
                Err(e) => return Err(e.into()),
            }
        }
        PodAction::Status(status) => {
            if status.phase.as_deref() == Some("Pending") {
                let spec = pod.spec.as_ref();
                warn!(
                    pod = %key,
                    node_selector = ?spec.and_then(|s| s.node_selector.as_ref()),
                    affinity = ?spec.and_then(|s| s.affinity.as_ref()),
                    "launcher pod unschedulable"
                );
            }
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": pod.resource_version()},
                "status": status,
            });
            pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await?;
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) != status.phase.as_deref() {
                info!(pod = %key, phase = ?status.phase, "launcher pod phase");
            }
        }
        PodAction::Delete => {
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match pods.delete(&name, &dp).await {
                Ok(_) => info!(pod = %key, "launcher pod gone"),
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    if let Some(status) = vmi_status {
        // The VMI has no status subresource: virt-handler writes the object, as itself (virt-api's
        // VMI mutator restores the old status on anyone else's update).
        let old = vmi.status.clone().unwrap_or_default();
        let ops = vmi_patch(vmi.resource_version().as_deref(), &old, &status);
        let url = format!(
            "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{}",
            vmi.name_any()
        );
        let req = http::Request::patch(url)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(serde_json::to_vec(&ops)?)
            .map_err(|e| Error::Invalid(format!("VMI patch request: {e}")))?;
        sim.handler.request::<serde_json::Value>(req).await?;
        let key = format!("{ns}/{}", vmi.name_any());
        if old.phase != status.phase {
            info!(vmi = %key, phase = %status.phase, "VMI phase (virt-handler)");
        }
        if old.guest_os_info.is_none() && status.guest_os_info.is_some() {
            info!(vmi = %key, "guest agent connected");
        }
        if old.interfaces != status.interfaces {
            let ifaces = serde_json::to_string(&status.interfaces).unwrap_or_default();
            info!(vmi = %key, interfaces = %ifaces, "VMI interfaces (virt-handler)");
        }
    }
    Ok(())
}

/// The JSON patch from `old` to `new` VMI status, touching only what virt-handler changed: the
/// phase, the transition timestamps and conditions it appends, `reason`, `guestOSInfo`,
/// `interfaces` (whole, as virt-controller patches them too, `prepareVMIPatch`); guarded
/// by a test of the resource version. A merge patch would write back every condition as the sim
/// reads it, without the `null` times KubeVirt's schema keeps (`nullable`), and virt-controller's
/// patches, which `test` the conditions as it serialises them (`prepareVMIPatch`), would all fail.
/// An appended condition carries its unset times as `null`, as Go serialises `metav1.Time`. Pure.
pub fn vmi_patch(
    resource_version: Option<&str>,
    old: &VirtualMachineInstanceStatus,
    new: &VirtualMachineInstanceStatus,
) -> Vec<serde_json::Value> {
    use serde_json::{Value, json};
    let mut ops = vec![];
    if let Some(rv) = resource_version {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    if new.phase != old.phase {
        ops.push(json!({"op": "add", "path": "/status/phase", "value": new.phase}));
    }
    if new.reason != old.reason {
        ops.push(json!({"op": "add", "path": "/status/reason", "value": new.reason}));
    }
    let added: Vec<&PhaseTransition> = new
        .phase_transition_timestamps
        .iter()
        .skip(old.phase_transition_timestamps.len())
        .collect();
    if old.phase_transition_timestamps.is_empty() && !added.is_empty() {
        ops.push(json!({"op": "add", "path": "/status/phaseTransitionTimestamps", "value": added}));
    } else {
        for t in added {
            ops.push(
                json!({"op": "add", "path": "/status/phaseTransitionTimestamps/-", "value": t}),
            );
        }
    }
    let as_go = |c: &conditions::Condition| -> Value {
        let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
        if let Some(m) = v.as_object_mut() {
            m.entry("lastProbeTime").or_insert(Value::Null);
            m.entry("lastTransitionTime").or_insert(Value::Null);
        }
        v
    };
    let appended: Vec<Value> = new
        .conditions
        .iter()
        .filter(|c| conditions::find(&old.conditions, &c.type_).is_none())
        .map(as_go)
        .collect();
    if old.conditions.is_empty() && !appended.is_empty() {
        ops.push(json!({"op": "add", "path": "/status/conditions", "value": appended}));
    } else {
        for c in appended {
            ops.push(json!({"op": "add", "path": "/status/conditions/-", "value": c}));
        }
    }
    if new.guest_os_info != old.guest_os_info {
        ops.push(json!({"op": "add", "path": "/status/guestOSInfo", "value": new.guest_os_info}));
    }
    if new.interfaces != old.interfaces {
        if new.interfaces.is_empty() {
            ops.push(json!({"op": "remove", "path": "/status/interfaces"}));
        } else {
            ops.push(json!({"op": "add", "path": "/status/interfaces", "value": new.interfaces}));
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::clock::Speed;

    fn t() -> Timing {
        Timing::at(Speed::new(1.0))
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const T0: &str = "2026-01-01T00:00:00Z";

    fn vmi(phase: &str, since: &str) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns", "uid": "vmi-uid"},
            "spec": {"terminationGracePeriodSeconds": 30, "domain": {}},
        }))
        .unwrap();
        let mut s = VirtualMachineInstanceStatus {
            node_name: Some("sim-node".into()),
            ..VirtualMachineInstanceStatus::default()
        };
        enter(&mut s, phase, since);
        v.status = Some(s);
        v
    }

    /// virt-controller's launcher pod: unbound, a readiness gate, `compute` and a sidecar.
    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "ns", "uid": "pod-uid",
                "creationTimestamp": T0,
                "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "vmi-uid"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                    "name": "vm1", "uid": "vmi-uid", "controller": true}]},
            "spec": {
                "nodeSelector": {"kubevirt.io/schedulable": "true"},
                "readinessGates": [{"conditionType": "kubevirt.io/virtual-machine-unpaused"}],
                "containers": [{"name": "compute", "image": "virt-launcher"},
                               {"name": "guest-console-log", "image": "virt-launcher"}],
            },
        }))
        .unwrap()
    }

    fn bound(mut p: Pod, at_: &str) -> Pod {
        p.spec.as_mut().unwrap().node_name = Some("sim-node".into());
        p.status = Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![pod_condition(
                "PodScheduled",
                true,
                None,
                None,
                &Time(at(at_)),
            )]),
            ..PodStatus::default()
        });
        p
    }

    fn with_status(mut p: Pod, s: impl std::borrow::Borrow<PodStatus>) -> Pod {
        let s: PodStatus = s.borrow().clone();
        let mut old = p.status.take().unwrap_or_default();
        // Strategic merge: conditions by type.
        let mut conds = old.conditions.take().unwrap_or_default();
        for c in s.conditions.clone().unwrap_or_default() {
            conds.retain(|o| o.type_ != c.type_);
            conds.push(c);
        }
        p.status = Some(PodStatus {
            conditions: Some(conds),
            ..s
        });
        p
    }

    fn decide_at(v: &VirtualMachineInstance, p: &Pod, f: &Fates, now: &str) -> Decision {
        decide(v, p, f, "sim-node", &t(), at(now), None)
    }

    fn decide_real(v: &VirtualMachineInstance, p: &Pod, g: &qemu::View, now: &str) -> Decision {
        decide(v, p, &Fates::default(), "sim-node", &t(), at(now), Some(g))
    }

    fn ready(p: &Pod) -> Option<String> {
        condition(p, "Ready").map(|c| c.status)
    }

    #[test]
    fn a_launcher_pod_that_fits_is_bound_after_the_schedulers_delay() {
        let v = vmi(phase::SCHEDULING, T0);
        let p = pod();
        let none = Fates::default();
        let d = decide_at(&v, &p, &none, "2026-01-01T00:00:00.200Z");
        assert_eq!((d.pod, d.vmi), (PodAction::Nothing, None));
        assert_eq!(d.requeue, Some(Duration::from_millis(800)));
        assert_eq!(
            decide_at(&v, &p, &none, "2026-01-01T00:00:01Z").pod,
            PodAction::Bind
        );
    }

    #[test]
    fn a_pod_that_does_not_fit_or_is_fated_unschedulable_says_so_and_stays_unbound() {
        let v = vmi(phase::SCHEDULING, T0);
        let mut p = pod();
        p.spec.as_mut().unwrap().node_selector = Some([("zone".to_owned(), "b".to_owned())].into());
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:05Z");
        let PodAction::Status(s) = d.pod else {
            panic!("{d:?}")
        };
        let c = &s.conditions.clone().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()),
            ("PodScheduled", "False", Some("Unschedulable"))
        );
        assert_eq!(c.message.as_deref(), Some(scheduling::NO_NODE_MATCHES));
        // Said once.
        let p = with_status(p, s);
        assert_eq!(
            decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:06Z"),
            Decision::nothing()
        );
        let fated = Fates {
            unschedulable: true,
            ..Fates::default()
        };
        let d = decide_at(&v, &pod(), &fated, "2026-01-01T00:00:05Z");
        let PodAction::Status(s) = d.pod else {
            panic!("{d:?}")
        };
        assert_eq!(
            s.conditions.unwrap()[0].message.as_deref(),
            Some(UNSCHEDULABLE_FAULT)
        );
    }

    #[test]
    fn a_pod_selecting_a_machine_type_the_node_labeller_found_fits() {
        let mut p = pod();
        let sel = p.spec.as_mut().unwrap().node_selector.as_mut().unwrap();
        sel.insert("machine-type.node.kubevirt.io/q35".into(), "true".into());
        sel.insert("kubernetes.io/arch".into(), "amd64".into());
        assert!(pod_fits(p.spec.as_ref().unwrap(), "sim-node"));
        let sel = p.spec.as_mut().unwrap().node_selector.as_mut().unwrap();
        sel.insert(
            "machine-type.node.kubevirt.io/pc-i440fx-rhel7.6.0".into(),
            "true".into(),
        );
        assert!(!pod_fits(p.spec.as_ref().unwrap(), "sim-node"));
    }

    #[test]
    fn a_pod_bound_elsewhere_is_another_nodes() {
        let mut p = bound(pod(), T0);
        p.spec.as_mut().unwrap().node_name = Some("other".into());
        let d = decide_at(
            &vmi(phase::SCHEDULING, T0),
            &p,
            &Fates::default(),
            "2026-01-01T00:10:00Z",
        );
        assert_eq!(d, Decision::nothing());
    }

    #[test]
    fn a_bound_pod_runs_and_is_ready_only_once_virt_controllers_gate_holds() {
        let v = vmi(phase::SCHEDULING, T0);
        let p = bound(pod(), T0);
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:01Z");
        assert_eq!(d.pod, PodAction::Nothing);
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:02Z");
        let PodAction::Status(s) = d.pod else {
            panic!("{d:?}")
        };
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let cs = s.container_statuses.clone().unwrap();
        assert!(
            cs.iter()
                .all(|c| c.ready && c.state.as_ref().unwrap().running.is_some())
        );
        let p = with_status(p, s);
        assert_eq!(
            ready(&p).as_deref(),
            Some("False"),
            "the gate is not there yet"
        );
        // virt-controller sets the gate's condition; the kubelet's Ready follows.
        let gate = pod_condition(
            "kubevirt.io/virtual-machine-unpaused",
            true,
            Some("NotPaused"),
            None,
            &Time(at(T0)),
        );
        let p = with_status(
            p.clone(),
            PodStatus {
                conditions: Some(vec![gate]),
                ..p.status.clone().unwrap()
            },
        );
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:03Z");
        let PodAction::Status(s) = d.pod else {
            panic!("{d:?}")
        };
        let p = with_status(p, s);
        assert_eq!(ready(&p).as_deref(), Some("True"));
        assert!(condition(&p, "kubevirt.io/virtual-machine-unpaused").is_some());
        // Scheduling is virt-controller's to move.
        assert_eq!(
            decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:04Z"),
            Decision::nothing()
        );
    }

    fn running_pod() -> Pod {
        let p = bound(pod(), T0);
        let s = running(&p, &Time(at(T0)));
        let mut p = with_status(p, s);
        let gate = pod_condition(
            "kubevirt.io/virtual-machine-unpaused",
            true,
            None,
            None,
            &Time(at(T0)),
        );
        let s = PodStatus {
            conditions: Some(vec![gate]),
            ..p.status.clone().unwrap()
        };
        p = with_status(p, s);
        let s = running(&p, &Time(at(T0)));
        with_status(p, s)
    }

    #[test]
    fn a_scheduled_vmi_runs_then_its_agent_connects_unless_silent() {
        let p = running_pod();
        let v = vmi(phase::SCHEDULED, T0);
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:00.100Z");
        assert_eq!(d.vmi, None);
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:01Z");
        let s = d.vmi.unwrap();
        assert_eq!(s.phase, phase::RUNNING);
        assert_eq!(s.node_name.as_deref(), Some("sim-node"));
        assert!(
            conditions::find(&s.conditions, "Ready").is_none(),
            "Ready is virt-controller's, from the pod"
        );
        let mut v = v;
        v.status = Some(s);
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:02Z");
        assert_eq!(d.vmi, None);
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:04Z");
        let s = d.vmi.unwrap();
        assert!(conditions::is_true(&s.conditions, "AgentConnected"));
        assert!(s.guest_os_info.is_some());
        let silent = Fates {
            silent: true,
            ..Fates::default()
        };
        assert_eq!(
            decide_at(&v, &p, &silent, "2026-01-01T01:00:00Z"),
            Decision::nothing()
        );
    }

    #[test]
    fn an_instance_without_a_real_guest_reports_its_pod_address_on_the_pod_network() {
        let p = running_pod();
        assert_eq!(
            p.status.as_ref().unwrap().pod_ip.as_deref(),
            Some(netstat::pod_ip("pod-uid").as_str())
        );
        let mut v = vmi(phase::SCHEDULED, T0);
        v.spec = serde_json::from_value(serde_json::json!({
            "domain": {"memory": {"guest": "1Gi"}, "devices": {"interfaces": [
                {"name": "net-0", "model": "virtio", "masquerade": {}, "macAddress": "00:50:56:00:00:01"}]}},
            "networks": [{"name": "net-0", "pod": {}}],
        }))
        .unwrap();
        let s = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:00:01Z")
            .vmi
            .unwrap();
        assert_eq!(s.phase, phase::RUNNING);
        let ip = netstat::pod_ip("pod-uid");
        assert!(ip.starts_with("127.") && ip != "127.0.0.1", "{ip}");
        assert_eq!(s.interfaces.len(), 1);
        assert_eq!(
            (s.interfaces[0].name.as_str(), s.interfaces[0].ip.as_str()),
            ("net-0", ip.as_str())
        );
        assert_eq!(s.interfaces[0].mac, "00:50:56:00:00:01");
    }

    #[test]
    fn a_real_guest_starts_with_running_and_its_own_agent_connects_it() {
        let p = running_pod();
        let v = vmi(phase::SCHEDULED, T0);
        let none = qemu::View::default();
        let d = decide_real(&v, &p, &none, "2026-01-01T00:00:01Z");
        assert_eq!(d.guest, GuestAction::Start);
        let mut v = v;
        v.status = d.vmi;
        assert_eq!(v.status.as_ref().unwrap().phase, phase::RUNNING);
        let up = qemu::View {
            started: true,
            ..qemu::View::default()
        };
        // However long it takes, only the guest's own agent connects it.
        let d = decide_real(&v, &p, &up, "2026-01-01T01:00:00Z");
        assert_eq!((d.vmi, d.guest), (None, GuestAction::Nothing));
        assert_eq!(d.requeue, Some(GUEST_POLL));
        let os =
            serde_json::json!({"id": "debian", "prettyName": "Debian GNU/Linux 12 (bookworm)"});
        let answered = qemu::View {
            agent: Some(os.clone()),
            ..up.clone()
        };
        let s = decide_real(&v, &p, &answered, "2026-01-01T01:00:01Z")
            .vmi
            .unwrap();
        assert!(conditions::is_true(&s.conditions, "AgentConnected"));
        assert_eq!(s.guest_os_info, Some(os));
    }

    #[test]
    fn a_real_guests_interfaces_are_the_domains_then_the_agents_too() {
        use crate::kubevirt::NetworkInterface;
        let p = running_pod();
        let mut v = vmi(phase::RUNNING, T0);
        // virt-controller's entry for the pod network.
        v.status.as_mut().unwrap().interfaces = vec![NetworkInterface {
            name: "net-0".into(),
            pod_interface_name: "eth0".into(),
            ..NetworkInterface::default()
        }];
        let up = qemu::View {
            started: true,
            nics: vec![domain::Nic {
                name: "net-0".into(),
                model: "virtio".into(),
                mac: "00:0c:29:32:64:63".into(),
                queues: 1,
                masquerade: true,
            }],
            pod_network: Some("net-0".into()),
            ..qemu::View::default()
        };
        let s = decide_real(&v, &p, &up, "2026-01-01T00:00:01Z")
            .vmi
            .unwrap();
        assert!(!conditions::is_true(&s.conditions, "AgentConnected"));
        let i = &s.interfaces[0];
        assert_eq!(
            (
                i.mac.as_str(),
                i.info_source.as_str(),
                i.pod_interface_name.as_str()
            ),
            ("00:0c:29:32:64:63", "domain", "eth0")
        );
        v.status = Some(s);
        assert_eq!(decide_real(&v, &p, &up, "2026-01-01T00:00:02Z").vmi, None);
        let answered = qemu::View {
            agent: Some(serde_json::json!({"id": "debian"})),
            interfaces: vec![netstat::GuestInterface {
                name: "enp1s0".into(),
                mac: "00:0c:29:32:64:63".into(),
                ..netstat::GuestInterface::default()
            }],
            ..up.clone()
        };
        let s = decide_real(&v, &p, &answered, "2026-01-01T00:00:03Z")
            .vmi
            .unwrap();
        assert!(conditions::is_true(&s.conditions, "AgentConnected"));
        let i = &s.interfaces[0];
        assert_eq!(
            (i.interface_name.as_str(), i.info_source.as_str()),
            ("enp1s0", "domain, guest-agent")
        );
        let old = v.status.clone().unwrap();
        let ops = vmi_patch(None, &old, &s);
        assert!(
            ops.contains(
                &serde_json::json!({"op": "add", "path": "/status/interfaces",
                "value": [{"name": "net-0", "mac": "00:0c:29:32:64:63", "interfaceName": "enp1s0",
                           "infoSource": "domain, guest-agent", "queueCount": 1, "linkState": "up",
                           "podInterfaceName": "eth0"}]})
            ),
            "{ops:?}"
        );
    }

    #[test]
    fn a_real_guest_ends_when_qemu_ends() {
        let p = running_pod();
        let mut v = vmi(phase::RUNNING, T0);
        v.status.as_mut().unwrap().node_name = Some("sim-node".into());
        for (view, want) in [
            (
                qemu::View {
                    started: true,
                    exited: Some(0),
                    ..qemu::View::default()
                },
                phase::SUCCEEDED,
            ),
            (
                qemu::View {
                    started: true,
                    exited: Some(1),
                    ..qemu::View::default()
                },
                phase::FAILED,
            ),
            (
                qemu::View {
                    started: true,
                    failed_to_start: Some("no".into()),
                    ..qemu::View::default()
                },
                phase::FAILED,
            ),
            // Never started by this node (it restarted): the domain is gone.
            (qemu::View::default(), phase::FAILED),
        ] {
            let d = decide_real(&v, &p, &view, "2026-01-01T00:00:05Z");
            assert_eq!(d.vmi.unwrap().phase, want, "{view:?}");
            assert_eq!(d.guest, GuestAction::Kill);
        }
    }

    #[test]
    fn a_stopped_real_guest_gets_the_power_button_then_is_killed_after_its_grace() {
        let p = running_pod();
        let v = deleted(vmi(phase::RUNNING, T0), "2026-01-01T00:00:10Z");
        let up = qemu::View {
            started: true,
            ..qemu::View::default()
        };
        let d = decide_real(&v, &p, &up, "2026-01-01T00:00:11Z");
        assert_eq!((d.vmi.clone(), d.guest), (None, GuestAction::PowerDown));
        let pressed = qemu::View {
            powerdown_sent: true,
            ..up.clone()
        };
        let d = decide_real(&v, &p, &pressed, "2026-01-01T00:00:12Z");
        assert_eq!((d.vmi.clone(), d.guest), (None, GuestAction::Nothing));
        // It powered off: the VMI succeeds at once.
        let off = qemu::View {
            exited: Some(0),
            ..pressed.clone()
        };
        let d = decide_real(&v, &p, &off, "2026-01-01T00:00:13Z");
        assert_eq!(d.vmi.unwrap().phase, phase::SUCCEEDED);
        assert_eq!(d.guest, GuestAction::Kill);
        // It ignored the button: killed once the grace (30 s) is over.
        let d = decide_real(&v, &p, &pressed, "2026-01-01T00:00:42Z");
        assert_eq!(d.vmi.unwrap().phase, phase::SUCCEEDED);
        assert_eq!(d.guest, GuestAction::Kill);
    }

    #[test]
    fn a_failing_launcher_fails_its_vmi_then_the_pod_ends_failed() {
        let p = running_pod();
        let v = vmi(phase::SCHEDULED, T0);
        let fail = Fates {
            fail: true,
            ..Fates::default()
        };
        let s = decide_at(&v, &p, &fail, "2026-01-01T00:00:01Z")
            .vmi
            .unwrap();
        assert_eq!(
            (s.phase.as_str(), s.reason.as_deref()),
            (phase::FAILED, Some("FaultInjected"))
        );
        let mut v = v;
        v.status = Some(s);
        let d = decide_at(&v, &p, &fail, "2026-01-01T00:00:02Z");
        let PodAction::Status(ps) = d.pod else {
            panic!("{d:?}")
        };
        assert_eq!(ps.phase.as_deref(), Some("Failed"));
        let code = ps.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap()
            .exit_code;
        assert_eq!(code, 1);
    }

    fn deleted(mut v: VirtualMachineInstance, when: &str) -> VirtualMachineInstance {
        v.metadata.deletion_timestamp = Some(Time(at(when)));
        v
    }

    #[test]
    fn a_deleted_vmi_keeps_running_for_its_grace_then_succeeds_and_its_pod_goes() {
        let p = running_pod();
        let v = deleted(vmi(phase::RUNNING, T0), "2026-01-01T00:01:00Z");
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:01:10Z");
        assert_eq!((d.pod, d.vmi), (PodAction::Nothing, None));
        assert_eq!(d.requeue, Some(Duration::from_secs(21)));
        let s = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:01:31Z")
            .vmi
            .unwrap();
        assert_eq!(s.phase, phase::SUCCEEDED);
        let mut v = v;
        v.status = Some(s);
        // virt-launcher exits 0 once the domain is gone.
        let d = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:01:32Z");
        let PodAction::Status(ps) = d.pod else {
            panic!("{d:?}")
        };
        assert_eq!(ps.phase.as_deref(), Some("Succeeded"));
        let mut p = with_status(p, ps);
        // virt-controller deletes the pod; the kubelet lets it go.
        p.metadata.deletion_timestamp = Some(Time(at("2026-01-01T00:01:33Z")));
        assert_eq!(
            decide_at(&v, &p, &Fates::default(), "2026-01-01T00:01:33Z").pod,
            PodAction::Delete
        );
    }

    #[test]
    fn a_deleted_pod_stops_the_guest_after_the_grace_too() {
        let mut p = running_pod();
        p.metadata.deletion_timestamp = Some(Time(at("2026-01-01T00:01:00Z")));
        let v = vmi(phase::RUNNING, T0);
        assert_eq!(
            decide_at(&v, &p, &Fates::default(), "2026-01-01T00:01:30Z").vmi,
            None
        );
        let s = decide_at(&v, &p, &Fates::default(), "2026-01-01T00:01:31Z")
            .vmi
            .unwrap();
        assert_eq!(s.phase, phase::SUCCEEDED);
    }

    #[test]
    fn a_late_node_takes_twice_the_grace_and_a_lost_one_never_answers() {
        let p = running_pod();
        let v = deleted(vmi(phase::RUNNING, T0), "2026-01-01T00:01:00Z");
        let late = Fates {
            stop: Some(StopFate::Late),
            ..Fates::default()
        };
        assert_eq!(decide_at(&v, &p, &late, "2026-01-01T00:01:31Z").vmi, None);
        assert!(
            decide_at(&v, &p, &late, "2026-01-01T00:02:01Z")
                .vmi
                .is_some()
        );
        let lost = Fates {
            stop: Some(StopFate::Lost),
            ..Fates::default()
        };
        assert_eq!(
            decide_at(&v, &p, &lost, "2026-01-01T05:00:00Z"),
            Decision::nothing()
        );
    }

    #[test]
    fn the_vmi_patch_appends_what_virt_handler_adds_and_rewrites_nothing_else() {
        let mut old = vmi(phase::SCHEDULED, T0).status.unwrap();
        // virt-controller's, kept as stored (its times null).
        old.conditions.push(conditions::Condition {
            type_: "DataVolumesReady".into(),
            status: "True".into(),
            ..conditions::Condition::default()
        });
        let mut new = old.clone();
        enter(&mut new, phase::RUNNING, "2026-01-01T00:00:01Z");
        new.conditions.push(conditions::Condition {
            type_: "AgentConnected".into(),
            status: "True".into(),
            last_probe_time: Some("2026-01-01T00:00:01Z".into()),
            ..conditions::Condition::default()
        });
        let ops = vmi_patch(Some("42"), &old, &new);
        assert_eq!(
            serde_json::Value::Array(ops),
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/status/phase", "value": "Running"},
                {"op": "add", "path": "/status/phaseTransitionTimestamps/-", "value":
                    {"phase": "Running", "phaseTransitionTimestamp": "2026-01-01T00:00:01Z"}},
                {"op": "add", "path": "/status/conditions/-", "value":
                    {"type": "AgentConnected", "status": "True",
                     "lastProbeTime": "2026-01-01T00:00:01Z", "lastTransitionTime": null}},
            ])
        );
        assert_eq!(vmi_patch(None, &old, &old), Vec::<serde_json::Value>::new());
    }

    #[test]
    fn fates_are_read_from_the_pods_annotations_once_decided() {
        let mut p = pod();
        assert_eq!(fates_of(&p), None);
        p.metadata.annotations = Some(
            [
                (FATED_ANNOTATION, "true"),
                (VMI_FATE_ANNOTATION, "fail"),
                (AGENT_FATE_ANNOTATION, "silent"),
                (STOP_FATE_ANNOTATION, "late"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        assert_eq!(
            fates_of(&p),
            Some(Fates {
                fail: true,
                unschedulable: false,
                silent: true,
                stop: Some(StopFate::Late)
            })
        );
    }

    #[test]
    fn the_heartbeat_marks_the_node_schedulable_with_the_time() {
        let h = heartbeat(at("2026-01-01T00:00:00.600Z"));
        assert_eq!(h["metadata"]["labels"]["kubevirt.io/schedulable"], "true");
        assert_eq!(
            h["metadata"]["annotations"][HEARTBEAT_ANNOTATION],
            "2026-01-01T00:00:00Z"
        );
    }
}
