//! Starting: the requested run strategy set on the VirtualMachine — CreatingVM makes it with
//! that strategy; a VM whose strategy differs (one an older controller made `Halted`) is set
//! here, after the source's power was looked at again: the cutover — and its instance
//! `Running`, or, with readiness `None`, not waited for. KubeVirt's error states
//! (printableStatus `ErrorUnschedulable`, `ErrorPvcNotFound`, `DataVolumeError`,
//! `CrashLoopBackOff`, `ErrImagePull`, `ImagePullBackOff`) end it with that reason and
//! KubeVirt's message after a short grace, not after the start timeout.

use ferry_crds::{
    ConditionStatus::{False, True, Unknown},
    ConditionType::{self, VMStarted},
    Phase, PowerState, Readiness, Reason, RunStrategy, names,
};
use kube::api::{Patch, PatchParams};

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::io::Io;
use super::outcome::{Outcome, Step};
use super::scope::Scope;
use super::vm_start::{cutover_refused, on_trouble, starts};
use super::world::{self, KubeVirtState, VmState, VmiState};
use crate::Result;
use crate::apis::kubevirt::{VirtualMachine, VmiPhase, run_strategy_name};
use crate::problem::Problem;

/// The Starting checkpoint.
#[derive(Debug)]
pub struct Starting;

/// What Starting observes.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The VirtualMachine, its instance and KubeVirt's error state.
    pub kubevirt: KubeVirtState,
    /// The source VM's power state, looked at again right before the VM is started (`None`
    /// when nothing is about to start).
    pub source_power: Option<Result<PowerState, Problem>>,
}

/// What Starting does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Set the VirtualMachine's run strategy.
    SetRunStrategy(RunStrategy),
}

impl Checkpoint for Starting {
    const PHASE: Phase = Phase::Starting;
    const CONDITIONS: &'static [ConditionType] = &[VMStarted];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::Vmi];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let kubevirt = world::kubevirt_state(io).await?;
        let wanted = io.vmm.final_run_strategy();
        let about_to_start = starts(wanted)
            && matches!(&kubevirt.vm, VmState::Ours { run_strategy, .. }
                if run_strategy.as_deref() != Some(run_strategy_name(wanted)));
        Ok(Observed {
            kubevirt,
            source_power: world::cutover_look(io, about_to_start).await?,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, _: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::SetRunStrategy(s) => {
                let patch = serde_json::json!({"spec": {"runStrategy": run_strategy_name(*s)}});
                io.api::<VirtualMachine>()
                    .patch(
                        &names::vm_name(io.vmm),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                io.ctx.metrics.write("patch", "VirtualMachine");
            }
        }
        Ok(None)
    }
}

/// Decides the Starting step: the first of these rules that applies. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    vm_gone(scope)
        .or_else(|| readiness_without_a_start(scope))
        .or_else(|| left_halted(scope))
        .or_else(|| source_back_on(scope))
        .or_else(|| set_run_strategy(scope))
        .or_else(|| not_waited_for(scope))
        .or_else(|| running(scope))
        .or_else(|| instance_ended(scope))
        .or_else(|| kubevirt_trouble(scope))
        .or_else(|| start_timed_out(scope))
        .unwrap_or_else(|| still_starting(scope))
}

/// The VirtualMachine was deleted or is someone else's: only creating it again can help.
fn vm_gone(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    match scope.world.kubevirt.vm {
        VmState::Absent | VmState::Foreign => Some(fail(
            Reason::VMStartFailed,
            say::vm_gone(),
            Phase::CreatingVM,
        )),
        VmState::Ours { .. } => None,
    }
}

/// A readiness check needs a VM that starts; the API server rejects the pair, so only a
/// hand-built object gets here, and no retry mends it.
fn readiness_without_a_start(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let (wanted, readiness) = (wanted(scope), readiness(scope));
    (!starts(wanted) && readiness != Readiness::None).then(|| {
        Outcome::failure(
            Reason::VMStartFailed,
            say::readiness_needs_a_start(readiness, wanted),
            false,
            Phase::Starting,
            VMStarted,
        )
    })
}

/// runStrategy Halted, or powerState Off (or Auto with a source that was not running), asks
/// for the VM to stay stopped: nothing to start or wait for.
fn left_halted(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    (wanted(scope) == RunStrategy::Halted).then(|| {
        Outcome::new(
            Step::Advance {
                to: Phase::Validating,
            },
            say::left_stopped(),
        )
        .with(
            VMStarted,
            False,
            Reason::NotStarted,
            say::halted(&scope.vmm),
        )
    })
}

/// The cutover, before a VM made with another strategy is set to start ([`cutover_refused`]).
fn source_back_on(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if strategy_set(scope) || !starts(wanted(scope)) {
        return None;
    }
    cutover_refused(scope, scope.world.source_power.as_ref(), VMStarted)
}

/// Setting the run strategy is what makes KubeVirt start the VM (or leave it for the user to
/// start).
fn set_run_strategy(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if strategy_set(scope) {
        return None;
    }
    let wanted = wanted(scope);
    let message = if starts(wanted) {
        say::starting_the_vm(wanted)
    } else {
        say::left_to_start_on_request(wanted)
    };
    Some(
        Outcome::new(Step::Act(vec![Action::SetRunStrategy(wanted)]), message).with(
            VMStarted,
            Unknown,
            Reason::InProgress,
            say::strategy_set_to(wanted),
        ),
    )
}

/// With readiness None the user asked not to wait: KubeVirt starts the VM, or (Manual) the
/// user does.
fn not_waited_for(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if readiness(scope) != Readiness::None {
        return None;
    }
    let wanted = wanted(scope);
    let (status, reason, msg) = if starts(wanted) {
        (Unknown, Reason::NotChecked, say::not_waited_for(wanted))
    } else {
        (False, Reason::NotStarted, say::start_it_yourself())
    };
    Some(
        Outcome::new(
            Step::Advance {
                to: Phase::Validating,
            },
            msg.clone(),
        )
        .with(VMStarted, status, reason, msg),
    )
}

/// A Running instance is what Starting waits for; the guest is Validating's concern.
fn running(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let vmi = &scope.world.kubevirt.vmi;
    let running = matches!(
        vmi,
        VmiState::Present {
            phase: VmiPhase::Running,
            ..
        }
    );
    running.then(|| {
        Outcome::new(
            Step::Advance {
                to: Phase::Validating,
            },
            say::vm_running(),
        )
        .with(VMStarted, True, Reason::VMRunning, say::instance_running())
    })
}

/// Under Once or Manual KubeVirt does not start an ended instance again: waiting is in vain.
fn instance_ended(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    match &scope.world.kubevirt.vmi {
        VmiState::Present { phase, reason, .. }
            if phase.is_final()
                && matches!(wanted(scope), RunStrategy::Once | RunStrategy::Manual) =>
        {
            Some(fail(
                Reason::VMStartFailed,
                say::instance_ended(*phase, reason.as_deref()),
                Phase::Starting,
            ))
        }
        VmiState::Present { .. } | VmiState::Absent => None,
    }
}

/// KubeVirt's own error states end Starting after a short grace, not after the start timeout.
fn kubevirt_trouble(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let trouble = scope.world.kubevirt.trouble.as_ref();
    trouble.map(|t| on_trouble(scope, t, VMStarted))
}

/// An instance not Running within the start timeout needs someone to look at it.
fn start_timed_out(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let waited = scope.in_phase_for();
    (waited > scope.policy.start_timeout).then(|| {
        fail(
            Reason::VMStartFailed,
            say::not_running_after(waited.as_secs()),
            Phase::Starting,
        )
    })
}

/// Otherwise KubeVirt is at work on the instance (under Always it restarts a Failed one
/// itself): wait for it.
fn still_starting(scope: &Scope<Observed>) -> Outcome<Action> {
    let requeue = scope.requeue_within(scope.policy.start_timeout);
    match &scope.world.kubevirt.vmi {
        VmiState::Present { phase, .. } => {
            let msg = say::instance_is(*phase);
            let reason = if *phase == VmiPhase::Failed {
                Reason::TransientError
            } else {
                Reason::InProgress
            };
            Outcome::new(Step::Wait { requeue }, msg.clone()).with(VMStarted, Unknown, reason, msg)
        }
        VmiState::Absent => Outcome::new(Step::Wait { requeue }, say::waiting_for_kubevirt()).with(
            VMStarted,
            Unknown,
            Reason::InProgress,
            say::waiting_for_instance(),
        ),
    }
}

/// The run strategy the migration asks for.
fn wanted(scope: &Scope<Observed>) -> RunStrategy {
    scope.vmm.final_run_strategy()
}

/// The readiness the migration asks for.
fn readiness(scope: &Scope<Observed>) -> Readiness {
    scope.vmm.readiness()
}

/// Whether our VM's run strategy already is the wanted one.
fn strategy_set(scope: &Scope<Observed>) -> bool {
    let name = run_strategy_name(wanted(scope));
    match &scope.world.kubevirt.vm {
        VmState::Ours { run_strategy, .. } => run_strategy.as_deref() == Some(name),
        VmState::Absent | VmState::Foreign => false,
    }
}

/// A failure of Starting a retry may mend, resuming `resume`.
fn fail(reason: Reason, message: String, resume: Phase) -> Outcome<Action> {
    Outcome::failure(reason, message, true, resume, VMStarted)
}

/// The words Starting says, in conditions, failures and Events.
mod say {
    use ferry_crds::{Readiness, RunStrategy};

    use crate::apis::kubevirt::{VmiPhase, run_strategy_name};

    pub(super) fn vm_gone() -> String {
        "the VirtualMachine is gone; raise spec.retry to create it again".into()
    }

    pub(super) fn readiness_needs_a_start(readiness: Readiness, wanted: RunStrategy) -> String {
        format!(
            "spec.target.readiness {readiness:?} needs a runStrategy that starts the VM, not {}",
            run_strategy_name(wanted)
        )
    }

    pub(super) fn left_stopped() -> String {
        "runStrategy Halted: the VM is left stopped".into()
    }

    /// Why the VM ends stopped: the run strategy, or the power state asked for after cutover.
    pub(super) fn halted(vmm: &ferry_crds::VirtualMachineMigration) -> String {
        let t = &vmm.spec.target.template;
        let source = vmm.status.as_ref().and_then(|s| s.source.as_ref());
        match (t.run_strategy, t.power_state) {
            (RunStrategy::Halted, _) => "spec.target.runStrategy is Halted".into(),
            (_, Some(ferry_crds::TargetPowerState::Auto)) => format!(
                "spec.target.powerState is Auto and the source VM was {} when ferry first read it",
                source
                    .and_then(|s| s.power_state)
                    .map_or("of unknown power state".to_owned(), |p| format!("{p:?}"))
            ),
            _ => "spec.target.powerState is PoweredOff".into(),
        }
    }

    pub(super) fn starting_the_vm(wanted: RunStrategy) -> String {
        format!(
            "starting the VM (runStrategy {})",
            run_strategy_name(wanted)
        )
    }

    pub(super) fn left_to_start_on_request(wanted: RunStrategy) -> String {
        format!(
            "leaving the VM to be started on request (runStrategy {})",
            run_strategy_name(wanted)
        )
    }

    pub(super) fn strategy_set_to(wanted: RunStrategy) -> String {
        format!("runStrategy set to {}", run_strategy_name(wanted))
    }

    pub(super) fn not_waited_for(wanted: RunStrategy) -> String {
        format!(
            "runStrategy {}: KubeVirt starts the VM; spec.target.readiness None, so not waited for",
            run_strategy_name(wanted)
        )
    }

    pub(super) fn start_it_yourself() -> String {
        "runStrategy Manual: start the VM yourself (virtctl start; KubeVirt's start subresource is served by virt-api)".into()
    }

    pub(super) fn vm_running() -> String {
        "the VM is running".into()
    }

    pub(super) fn instance_running() -> String {
        "VirtualMachineInstance is Running".into()
    }

    pub(super) fn instance_ended(phase: VmiPhase, reason: Option<&str>) -> String {
        format!(
            "the VirtualMachineInstance ended {phase}{}; check its events, then raise spec.retry",
            reason.map(|r| format!(" ({r})")).unwrap_or_default()
        )
    }

    pub(super) fn not_running_after(secs: u64) -> String {
        format!(
            "the VirtualMachineInstance is not Running after {secs}s; check scheduling and the VM's events, then raise spec.retry"
        )
    }

    pub(super) fn instance_is(phase: VmiPhase) -> String {
        format!("VirtualMachineInstance is {phase}")
    }

    pub(super) fn waiting_for_kubevirt() -> String {
        "waiting for KubeVirt to start the VM".into()
    }

    pub(super) fn waiting_for_instance() -> String {
        "waiting for the VirtualMachineInstance".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::kubevirt::{KvError, Trouble};
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn ours(s: &str) -> VmState {
        VmState::Ours {
            run_strategy: Some(s.into()),
            released: false,
        }
    }

    fn vmi(phase: &str) -> VmiState {
        VmiState::Present {
            phase: serde_json::from_value(serde_json::json!(phase)).unwrap(),
            ready: phase == "Running",
            agent_connected: false,
            reason: None,
        }
    }

    struct World {
        vm: VmState,
        vmi: VmiState,
        trouble: Option<Trouble>,
        power: Option<Result<PowerState, Problem>>,
    }

    fn world(vm: VmState, vmi: VmiState) -> World {
        World {
            vm,
            vmi,
            trouble: None,
            power: Some(Ok(PowerState::PoweredOff)),
        }
    }

    fn decide_in(
        strategy: RunStrategy,
        readiness: Option<Readiness>,
        w: World,
        elapsed: i64,
    ) -> Outcome<Action> {
        let mut vmm = migration("m").with_phase(Phase::Starting);
        vmm.spec.target.template.run_strategy = strategy;
        vmm.spec.target.template.readiness = readiness;
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Starting, 1, &ts(0));
        }
        decide_for(vmm, w, elapsed)
    }

    fn decide_for(
        vmm: ferry_crds::VirtualMachineMigration,
        w: World,
        elapsed: i64,
    ) -> Outcome<Action> {
        decide(&Scope {
            vmm,
            now: ts(elapsed).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed {
                kubevirt: KubeVirtState {
                    vm: w.vm,
                    vmi: w.vmi,
                    trouble: w.trouble,
                },
                source_power: w.power,
            },
        })
    }

    fn step_with(strategy: RunStrategy, vm: VmState, vmi: VmiState, elapsed: i64) -> Step<Action> {
        decide_in(strategy, None, world(vm, vmi), elapsed).step
    }

    fn step(vm: VmState, vmi: VmiState) -> Step<Action> {
        step_with(RunStrategy::Always, vm, vmi, 5)
    }

    #[test]
    fn table() {
        assert_eq!(
            step(ours("Halted"), VmiState::Absent),
            Step::Act(vec![Action::SetRunStrategy(RunStrategy::Always)])
        );
        assert!(matches!(
            step(ours("Always"), VmiState::Absent),
            Step::Wait { .. }
        ));
        assert!(matches!(
            step(ours("Always"), vmi("Scheduling")),
            Step::Wait { .. }
        ));
        assert_eq!(
            step(ours("Always"), vmi("Running")),
            Step::Advance {
                to: Phase::Validating
            }
        );
        assert!(
            matches!(step(ours("Always"), vmi("Failed")), Step::Wait { .. }),
            "KubeVirt restarts it under Always"
        );
        assert!(matches!(
            step_with(RunStrategy::Once, ours("Once"), vmi("Failed"), 5),
            Step::Fail {
                reason: Reason::VMStartFailed,
                resume: Phase::Starting,
                ..
            }
        ));
        assert!(matches!(
            step(VmState::Absent, VmiState::Absent),
            Step::Fail {
                resume: Phase::CreatingVM,
                ..
            }
        ));
        let timeout = Policy::default().start_timeout.as_secs() as i64 + 1;
        assert!(matches!(
            step_with(
                RunStrategy::Always,
                ours("Always"),
                vmi("Scheduling"),
                timeout
            ),
            Step::Fail {
                reason: Reason::VMStartFailed,
                ..
            }
        ));
        assert_eq!(
            step_with(RunStrategy::Halted, ours("Halted"), VmiState::Absent, 5),
            Step::Advance {
                to: Phase::Validating
            }
        );
    }

    #[test]
    fn power_state_off_or_auto_from_a_stopped_source_leaves_the_vm_halted() {
        use ferry_crds::{ConditionType, PowerState as Source, TargetPowerState as P};
        let run = |p: P, source: Source| {
            let mut vmm = migration("m").with_phase(Phase::Starting);
            vmm.spec.target.template.power_state = Some(p);
            vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
            if let Some(s) = vmm.status.as_mut() {
                s.source.get_or_insert_default().power_state = Some(source);
            }
            decide_for(vmm, world(ours("Halted"), VmiState::Absent), 5)
        };
        for (p, source) in [
            (P::PoweredOff, Source::PoweredOn),
            (P::Auto, Source::PoweredOff),
            (P::Auto, Source::Suspended),
        ] {
            let o = run(p, source);
            assert_eq!(
                o.step,
                Step::Advance {
                    to: Phase::Validating
                },
                "{p:?} {source:?}"
            );
            let started = o
                .conditions
                .iter()
                .find(|c| c.type_ == ConditionType::VMStarted);
            let msg = started.map(|c| c.message.clone()).unwrap_or_default();
            assert!(msg.contains("powerState"), "{p:?}: {msg}");
        }
        // Auto with a source that ran: started as runStrategy says.
        assert_eq!(
            run(P::Auto, Source::PoweredOn).step,
            Step::Act(vec![Action::SetRunStrategy(RunStrategy::Always)])
        );
    }

    #[test]
    fn each_kubevirt_error_ends_starting_with_its_reason_after_the_grace() {
        let grace = Policy::default().kubevirt_error_grace.as_secs() as i64;
        for (e, reason) in [
            (KvError::ErrorUnschedulable, Reason::ErrorUnschedulable),
            (KvError::ErrorPvcNotFound, Reason::ErrorPvcNotFound),
            (KvError::DataVolumeError, Reason::DataVolumeError),
            (KvError::CrashLoopBackOff, Reason::CrashLoopBackOff),
            (KvError::ErrImagePull, Reason::ErrImagePull),
            (KvError::ImagePullBackOff, Reason::ImagePullBackOff),
        ] {
            let w = |since: Option<i64>| World {
                trouble: Some(Trouble {
                    error: e,
                    message: "KubeVirt's own words".into(),
                    since: since.map(|s| ts(s).0),
                }),
                ..world(ours("Always"), vmi("Scheduling"))
            };
            let early = decide_in(RunStrategy::Always, None, w(Some(1)), 1 + grace - 1);
            assert!(
                matches!(early.step, Step::Wait { requeue } if requeue <= std::time::Duration::from_secs(2)),
                "{e:?}: waits just past the grace: {:?}",
                early.step
            );
            assert_eq!(early.conditions[0].reason, Reason::TransientError);
            let late = decide_in(RunStrategy::Always, None, w(Some(1)), 1 + grace);
            assert!(
                matches!(&late.step, Step::Fail { reason: r, message, resume: Phase::Starting, .. }
                    if *r == reason && message.contains("KubeVirt's own words") && message.contains(e.as_str())),
                "{e:?}: {:?}",
                late.step
            );
            // Without a time from KubeVirt, the grace runs from the phase's start.
            let no_time = decide_in(RunStrategy::Always, None, w(None), grace);
            assert!(matches!(no_time.step, Step::Fail { .. }), "{e:?}");
        }
    }

    #[test]
    fn the_source_is_looked_at_again_before_the_cutover() {
        let on = World {
            power: Some(Ok(PowerState::PoweredOn)),
            ..world(ours("Halted"), VmiState::Absent)
        };
        assert!(matches!(
            decide_in(RunStrategy::Always, None, on, 5).step,
            Step::Fail {
                reason: Reason::SourcePoweredOn,
                resume: Phase::Starting,
                ..
            }
        ));
        let down = World {
            power: Some(Err(Problem::transient(Reason::EndpointUnreachable, "x"))),
            ..world(ours("Halted"), VmiState::Absent)
        };
        assert!(matches!(
            decide_in(RunStrategy::Always, None, down, 5).step,
            Step::Retry { .. }
        ));
        // Manual starts nothing: no cutover to guard.
        let manual = World {
            power: None,
            ..world(ours("Halted"), VmiState::Absent)
        };
        assert_eq!(
            decide_in(RunStrategy::Manual, None, manual, 5).step,
            Step::Act(vec![Action::SetRunStrategy(RunStrategy::Manual)])
        );
    }

    #[test]
    fn readiness_none_and_manual_do_not_wait_for_an_instance() {
        let o = decide_in(
            RunStrategy::Manual,
            None,
            world(ours("Manual"), VmiState::Absent),
            5,
        );
        assert_eq!(
            o.step,
            Step::Advance {
                to: Phase::Validating
            }
        );
        assert_eq!(
            (o.conditions[0].status, o.conditions[0].reason),
            (False, Reason::NotStarted)
        );
        assert!(o.conditions[0].message.contains("virtctl start"));
        let o = decide_in(
            RunStrategy::Always,
            Some(Readiness::None),
            world(ours("Always"), VmiState::Absent),
            5,
        );
        assert_eq!(
            o.step,
            Step::Advance {
                to: Phase::Validating
            }
        );
        assert_eq!(o.conditions[0].reason, Reason::NotChecked);
        assert!(matches!(
            decide_in(
                RunStrategy::Manual,
                Some(Readiness::Running),
                world(ours("Manual"), VmiState::Absent),
                5
            )
            .step,
            Step::Fail {
                retriable: false,
                ..
            }
        ));
    }
}
