//! Starting: the requested run strategy set on the VirtualMachine, its instance `Running`.

use ferry_crds::{
    ConditionStatus::{False, True, Unknown},
    ConditionType::VMStarted,
    Phase, Reason, RunStrategy,
};

use super::decision::{Action, Outcome, Step};
use super::scope::{Scope, VmState, VmiState, World};
use crate::children::kubevirt::run_strategy_name;

/// Decides the Starting step. Pure.
pub fn decide(scope: &Scope) -> Outcome {
    let World::Starting(vm, vmi) = &scope.world else {
        return Outcome::new(
            Step::Wait {
                requeue: scope.policy.wait_requeue,
            },
            "observing the VirtualMachine",
        );
    };
    let wanted = scope.vmm.spec.target.template.run_strategy;
    let fail = |reason: Reason, message: String, resume: Phase| {
        Outcome::new(
            Step::Fail {
                reason,
                message: message.clone(),
                retriable: true,
                resume,
            },
            message.clone(),
        )
        .with(VMStarted, False, reason, message)
    };
    let run_strategy = match vm {
        VmState::Absent | VmState::Foreign => {
            return fail(
                Reason::VMStartFailed,
                "the VirtualMachine is gone; raise spec.retry to create it again".into(),
                Phase::CreatingVM,
            );
        }
        VmState::Ours { run_strategy } => run_strategy,
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
        VmiState::Present { phase, .. } if phase == "Running" => Outcome::new(
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
            if (phase == "Failed" || phase == "Succeeded")
                && matches!(wanted, RunStrategy::Once | RunStrategy::Manual) =>
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
            let reason = if phase == "Failed" {
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
    use crate::reconcile::scope::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn ours(s: &str) -> VmState {
        VmState::Ours {
            run_strategy: Some(s.into()),
        }
    }

    fn vmi(phase: &str) -> VmiState {
        VmiState::Present {
            phase: phase.into(),
            agent_connected: false,
            reason: None,
        }
    }

    fn step_with(strategy: RunStrategy, vm: VmState, vmi: VmiState, elapsed: i64) -> Step {
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
            world: World::Starting(vm, vmi),
        })
        .step
    }

    fn step(vm: VmState, vmi: VmiState) -> Step {
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
