//! Validating: the guest agent connected; then the staging objects and the CDI Secret are
//! removed and the VM and its volumes released from the migration; only then does it succeed.

use ferry_crds::{
    ConditionStatus::{False, True, Unknown},
    ConditionType::GuestReady,
    Phase, Reason, RunStrategy,
};

use super::decision::{Action, Outcome, Step, transient_or_fail};
use super::scope::{Scope, VmState, VmiState, World};

/// Decides the Validating step. Pure.
pub fn decide(scope: &Scope) -> Outcome {
    let World::Validating { vm, vmi, leftovers } = &scope.world else {
        return Outcome::new(
            Step::Wait {
                requeue: scope.policy.wait_requeue,
            },
            "observing the guest",
        );
    };
    let halted = scope.vmm.spec.target.template.run_strategy == RunStrategy::Halted;
    let ready = halted
        || matches!(vmi, VmiState::Present { phase, agent_connected: true, .. } if phase == "Running");
    if !ready {
        if matches!(vm, VmState::Absent | VmState::Foreign) {
            let msg = "the VirtualMachine is gone; raise spec.retry to create it again".to_owned();
            return Outcome::new(
                Step::Fail {
                    reason: Reason::GuestAgentTimeout,
                    message: msg.clone(),
                    retriable: true,
                    resume: Phase::CreatingVM,
                },
                msg.clone(),
            )
            .with(GuestReady, False, Reason::GuestAgentTimeout, msg);
        }
        let waited = scope.in_phase_for();
        if waited > scope.policy.agent_timeout {
            let msg = format!(
                "the guest agent did not connect within {}s; check that the guest boots and runs qemu-guest-agent, then raise spec.retry",
                waited.as_secs()
            );
            return Outcome::new(
                Step::Fail {
                    reason: Reason::GuestAgentTimeout,
                    message: msg.clone(),
                    retriable: true,
                    resume: Phase::Validating,
                },
                msg.clone(),
            )
            .with(GuestReady, False, Reason::GuestAgentTimeout, msg);
        }
        let msg = match vmi {
            VmiState::Present { phase, .. } if phase == "Running" => {
                "waiting for the guest agent".to_owned()
            }
            VmiState::Present { phase, .. } => {
                format!("waiting for the guest: the VirtualMachineInstance is {phase}")
            }
            VmiState::Absent => "waiting for the guest: no VirtualMachineInstance".to_owned(),
        };
        return Outcome::new(
            Step::Wait {
                requeue: scope.requeue_within(scope.policy.agent_timeout),
            },
            msg.clone(),
        )
        .with(GuestReady, Unknown, Reason::InProgress, msg);
    }
    let (status, reason, msg) = if halted {
        (
            True,
            Reason::Validated,
            "runStrategy Halted: boot validation skipped",
        )
    } else {
        (
            True,
            Reason::GuestAgentConnected,
            "the guest agent connected",
        )
    };
    match leftovers {
        Err(p) => {
            let step = transient_or_fail(
                scope.retries,
                scope.policy.max_transient_retries,
                p.reason,
                p.message.clone(),
                Phase::Validating,
            );
            Outcome::new(step, p.message.clone()).with(GuestReady, status, reason, msg)
        }
        Ok(true) => Outcome::new(
            Step::Act(vec![Action::Finish]),
            "removing the staged images and releasing the VM",
        )
        .with(GuestReady, status, reason, msg),
        Ok(false) => Outcome::new(
            Step::Advance {
                to: Phase::Succeeded,
            },
            "migrated",
        )
        .with(GuestReady, status, reason, msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::scope::{Policy, Problem};
    use ferry_crds::fixtures::{migration, ts};

    fn ours() -> VmState {
        VmState::Ours {
            run_strategy: Some("Always".into()),
        }
    }

    fn vmi(phase: &str, agent: bool) -> VmiState {
        VmiState::Present {
            phase: phase.into(),
            agent_connected: agent,
            reason: None,
        }
    }

    fn step_with(
        strategy: RunStrategy,
        vm: VmState,
        vmi: VmiState,
        leftovers: Result<bool, Problem>,
        elapsed: i64,
    ) -> Step {
        let mut vmm = migration("m").with_phase(Phase::Validating);
        vmm.spec.target.template.run_strategy = strategy;
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Validating, 1, &ts(0));
        }
        decide(&Scope {
            vmm,
            now: ts(elapsed).0,
            policy: Policy::default(),
            retries: 0,
            world: World::Validating { vm, vmi, leftovers },
        })
        .step
    }

    fn step(vmi: VmiState, leftovers: Result<bool, Problem>) -> Step {
        step_with(RunStrategy::Always, ours(), vmi, leftovers, 5)
    }

    #[test]
    fn table() {
        assert!(matches!(
            step(vmi("Running", false), Ok(true)),
            Step::Wait { .. }
        ));
        assert!(matches!(
            step(VmiState::Absent, Ok(true)),
            Step::Wait { .. }
        ));
        assert_eq!(
            step(vmi("Running", true), Ok(true)),
            Step::Act(vec![Action::Finish])
        );
        assert_eq!(
            step(vmi("Running", true), Ok(false)),
            Step::Advance {
                to: Phase::Succeeded
            }
        );
        assert!(matches!(
            step(
                vmi("Running", true),
                Err(Problem::transient(Reason::StagingUnavailable, "x"))
            ),
            Step::Retry { .. }
        ));
        let late = Policy::default().agent_timeout.as_secs() as i64 + 1;
        assert!(matches!(
            step_with(
                RunStrategy::Always,
                ours(),
                vmi("Running", false),
                Ok(true),
                late
            ),
            Step::Fail {
                reason: Reason::GuestAgentTimeout,
                resume: Phase::Validating,
                ..
            }
        ));
        assert_eq!(
            step_with(RunStrategy::Halted, ours(), VmiState::Absent, Ok(false), 5),
            Step::Advance {
                to: Phase::Succeeded
            }
        );
        assert!(matches!(
            step_with(
                RunStrategy::Always,
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
}
