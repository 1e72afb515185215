//! Starting: the requested run strategy set on the VirtualMachine, its instance `Running`.

use ferry_crds::{
    ConditionStatus::{False, True, Unknown},
    ConditionType::{self, VMStarted},
    Phase, Reason, RunStrategy, names,
};
use kube::api::{Patch, PatchParams};

use super::checkpoint::{Checkpoint, Io};
use super::intents::Cleanup;
use super::outcome::{Outcome, Step};
use super::scope::Scope;
use super::world::{self, VmState, VmiState};
use crate::Result;
use crate::apis::kubevirt::{VirtualMachine, VmiPhase, run_strategy_name};
use crate::problem::Problem;

/// The Starting checkpoint.
#[derive(Debug)]
pub struct Starting;

/// What Starting observes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The VirtualMachine.
    pub vm: VmState,
    /// Its instance.
    pub vmi: VmiState,
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
        Ok(Observed {
            vm: world::vm_state(io).await?,
            vmi: world::vmi_state(io).await?,
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

/// Decides the Starting step. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let Observed { vm, vmi } = &scope.world;
    let wanted = scope.vmm.spec.target.template.run_strategy;
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
        return Outcome::new(
            Step::Act(vec![Action::SetRunStrategy(wanted)]),
            format!(
                "starting the VM (runStrategy {})",
                run_strategy_name(wanted)
            ),
        )
        .with(
            VMStarted,
            Unknown,
            Reason::InProgress,
            format!("runStrategy set to {}", run_strategy_name(wanted)),
        );
    }
    let waited = scope.in_phase_for();
    match vmi {
        VmiState::Present {
            phase: VmiPhase::Running,
            ..
        } => Outcome::new(
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
        ),
        VmiState::Present { phase, reason, .. }
            if phase.is_final() && matches!(wanted, RunStrategy::Once | RunStrategy::Manual) =>
        {
            fail(
                Reason::VMStartFailed,
                format!(
                    "the VirtualMachineInstance ended {phase}{}; check its events, then raise spec.retry",
                    reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ),
                Phase::Starting,
            )
        }
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
            agent_connected: false,
            reason: None,
        }
    }

    fn step_with(strategy: RunStrategy, vm: VmState, vmi: VmiState, elapsed: i64) -> Step<Action> {
        let mut vmm = migration("m").with_phase(Phase::Starting);
        vmm.spec.target.template.run_strategy = strategy;
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Starting, 1, &ts(0));
        }
        decide(&Scope {
            vmm,
            now: ts(elapsed).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed { vm, vmi },
        })
        .step
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
}
