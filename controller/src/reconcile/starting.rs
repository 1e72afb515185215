//! Starting: the requested run strategy set on the VirtualMachine (after the source's power was
//! looked at again: the cutover), its instance `Running` — or, with readiness `None`, not waited
//! for. KubeVirt's error states (printableStatus `ErrorUnschedulable`, `ErrorPvcNotFound`,
//! `DataVolumeError`, `CrashLoopBackOff`, `ErrImagePull`, `ImagePullBackOff`) end it with that
//! reason and KubeVirt's message after a short grace, not after the start timeout.

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
use super::world::{self, KubeVirtState, VmState, VmiState};
use crate::Result;
use crate::apis::kubevirt::{KvError, Trouble, VirtualMachine, VmiPhase, run_strategy_name};
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

/// Whether a run strategy makes KubeVirt start an instance by itself.
pub fn starts(s: RunStrategy) -> bool {
    match s {
        RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once => true,
        RunStrategy::Halted | RunStrategy::Manual => false,
    }
}

impl Checkpoint for Starting {
    const PHASE: Phase = Phase::Starting;
    const CONDITIONS: &'static [ConditionType] = &[VMStarted];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::Vmi];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let kubevirt = world::kubevirt_state(io).await?;
        let wanted = io.vmm.spec.target.template.run_strategy;
        let about_to_start = starts(wanted)
            && matches!(&kubevirt.vm, VmState::Ours { run_strategy, .. }
                if run_strategy.as_deref() != Some(run_strategy_name(wanted)));
        let source_power = if about_to_start {
            let login = super::credentials::source_login(io).await?;
            Some(world::source_power(io, login).await)
        } else {
            None
        };
        Ok(Observed {
            kubevirt,
            source_power,
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

/// The ferry reason of a KubeVirt error state.
pub fn reason_of(e: KvError) -> Reason {
    match e {
        KvError::ErrorUnschedulable => Reason::ErrorUnschedulable,
        KvError::ErrorPvcNotFound => Reason::ErrorPvcNotFound,
        KvError::DataVolumeError => Reason::DataVolumeError,
        KvError::CrashLoopBackOff => Reason::CrashLoopBackOff,
        KvError::ErrImagePull => Reason::ErrImagePull,
        KvError::ImagePullBackOff => Reason::ImagePullBackOff,
    }
}

/// What to do about a KubeVirt error state in the scope's phase: fail once it lasted the grace
/// (from when KubeVirt's condition changed, or the phase began, whichever is later), else wait
/// just past it. Pure.
pub fn on_trouble<W, A>(scope: &Scope<W>, t: &Trouble, marks: ConditionType) -> Outcome<A> {
    let entered = scope.phase_entered();
    let since = match (t.since, entered) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let lasted = since
        .and_then(|s| scope.now.duration_since(s).try_into().ok())
        .unwrap_or(std::time::Duration::ZERO);
    let grace = scope.policy.kubevirt_error_grace;
    let what = format!("KubeVirt reports {}: {}", t.error.as_str(), t.message);
    if lasted >= grace {
        let advice = match t.error {
            KvError::ErrorUnschedulable => {
                "free capacity (or fix the VM's requests), then raise spec.retry"
            }
            KvError::ErrorPvcNotFound | KvError::DataVolumeError => {
                "the imported volume is gone or broken; raise spec.retry after fixing it"
            }
            KvError::CrashLoopBackOff => {
                "see the VirtualMachineInstance's events; raise spec.retry"
            }
            KvError::ErrImagePull | KvError::ImagePullBackOff => {
                "KubeVirt's virt-launcher image cannot be pulled; fix the registry, then raise spec.retry"
            }
        };
        Outcome::failure(
            reason_of(t.error),
            format!("{what}; {advice}"),
            true,
            scope.phase(),
            marks,
        )
    } else {
        let left = grace - lasted;
        Outcome::new(
            Step::Wait {
                requeue: left + std::time::Duration::from_millis(500),
            },
            what.clone(),
        )
        .with(marks, Unknown, Reason::TransientError, what)
    }
}

/// Decides the Starting step. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let Observed {
        kubevirt: KubeVirtState { vm, vmi, trouble },
        source_power,
    } = &scope.world;
    let target = &scope.vmm.spec.target.template;
    let wanted = target.run_strategy;
    let readiness = target.readiness();
    let fail = |reason: Reason, message: String, resume: Phase| {
        Outcome::failure(reason, message, true, resume, VMStarted)
    };
    let run_strategy = match vm {
        VmState::Absent | VmState::Foreign => {
            return fail(
                Reason::VMStartFailed,
                "the VirtualMachine is gone; raise spec.retry to create it again".into(),
                Phase::CreatingVM,
            );
        }
        VmState::Ours { run_strategy, .. } => run_strategy,
    };
    if !starts(wanted) && readiness != Readiness::None {
        // The API server rejects this; only a hand-built object gets here.
        return Outcome::failure(
            Reason::VMStartFailed,
            format!(
                "spec.target.readiness {readiness:?} needs a runStrategy that starts the VM, not {}",
                run_strategy_name(wanted)
            ),
            false,
            Phase::Starting,
            VMStarted,
        );
    }
    if wanted == RunStrategy::Halted {
        return Outcome::new(
            Step::Advance {
                to: Phase::Validating,
            },
            "runStrategy Halted: the VM is left stopped",
        )
        .with(
            VMStarted,
            False,
            Reason::NotStarted,
            "spec.target.runStrategy is Halted",
        );
    }
    if run_strategy.as_deref() != Some(run_strategy_name(wanted)) {
        if starts(wanted) {
            match source_power {
                Some(Err(p)) => return Outcome::from_problem(scope, p, Some(VMStarted)),
                Some(Ok(PowerState::PoweredOn | PowerState::Suspended)) => {
                    return fail(
                        Reason::SourcePoweredOn,
                        "the source VM was powered on again after its disks were copied (someone started it in vSphere): starting the copy would run two machines with one identity on stale disks; raise spec.retry to start over (ferry powers the source off again), or cancel".into(),
                        Phase::Starting,
                    );
                }
                Some(Ok(PowerState::PoweredOff)) | None => {}
            }
        }
        let what = if starts(wanted) {
            "starting the VM"
        } else {
            "leaving the VM to be started on request"
        };
        return Outcome::new(
            Step::Act(vec![Action::SetRunStrategy(wanted)]),
            format!("{what} (runStrategy {})", run_strategy_name(wanted)),
        )
        .with(
            VMStarted,
            Unknown,
            Reason::InProgress,
            format!("runStrategy set to {}", run_strategy_name(wanted)),
        );
    }
    if readiness == Readiness::None {
        let (status, reason, msg) = if starts(wanted) {
            (
                Unknown,
                Reason::NotChecked,
                format!(
                    "runStrategy {}: KubeVirt starts the VM; spec.target.readiness None, so not waited for",
                    run_strategy_name(wanted)
                ),
            )
        } else {
            (
                False,
                Reason::NotStarted,
                "runStrategy Manual: start the VM yourself (virtctl start; KubeVirt's start subresource is served by virt-api)".to_owned(),
            )
        };
        return Outcome::new(
            Step::Advance {
                to: Phase::Validating,
            },
            msg.clone(),
        )
        .with(VMStarted, status, reason, msg);
    }
    let waited = scope.in_phase_for();
    match vmi {
        VmiState::Present {
            phase: VmiPhase::Running,
            ..
        } => {
            return Outcome::new(
                Step::Advance {
                    to: Phase::Validating,
                },
                "the VM is running",
            )
            .with(
                VMStarted,
                True,
                Reason::VMRunning,
                "VirtualMachineInstance is Running",
            );
        }
        VmiState::Present { phase, reason, .. }
            if phase.is_final() && matches!(wanted, RunStrategy::Once | RunStrategy::Manual) =>
        {
            return fail(
                Reason::VMStartFailed,
                format!(
                    "the VirtualMachineInstance ended {phase}{}; check its events, then raise spec.retry",
                    reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ),
                Phase::Starting,
            );
        }
        VmiState::Present { .. } | VmiState::Absent => {}
    }
    if let Some(t) = trouble {
        return on_trouble(scope, t, VMStarted);
    }
    match vmi {
        _ if waited > scope.policy.start_timeout => fail(
            Reason::VMStartFailed,
            format!(
                "the VirtualMachineInstance is not Running after {}s; check scheduling and the VM's events, then raise spec.retry",
                waited.as_secs()
            ),
            Phase::Starting,
        ),
        VmiState::Present { phase, .. } => {
            let msg = format!("VirtualMachineInstance is {phase}");
            let reason = if *phase == VmiPhase::Failed {
                Reason::TransientError
            } else {
                Reason::InProgress
            };
            Outcome::new(
                Step::Wait {
                    requeue: scope.requeue_within(scope.policy.start_timeout),
                },
                msg.clone(),
            )
            .with(VMStarted, Unknown, reason, msg)
        }
        VmiState::Absent => Outcome::new(
            Step::Wait {
                requeue: scope.requeue_within(scope.policy.start_timeout),
            },
            "waiting for KubeVirt to start the VM",
        )
        .with(
            VMStarted,
            Unknown,
            Reason::InProgress,
            "waiting for the VirtualMachineInstance",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn ours(s: &str) -> VmState {
        VmState::Ours {
            run_strategy: Some(s.into()),
            owned: true,
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
