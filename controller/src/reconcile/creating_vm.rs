//! CreatingVM: the KubeVirt VirtualMachine exists, `Halted`, wired to the imported volumes.

use ferry_crds::{
    ConditionStatus::{False, True, Unknown},
    ConditionType::VMCreated,
    Phase, Reason, names,
};

use super::decision::{Action, Outcome, Step};
use super::scope::{Scope, VmState, World};

/// Decides the CreatingVM step. Pure.
pub fn decide(scope: &Scope) -> Outcome {
    let World::CreatingVM(vm) = &scope.world else {
        return Outcome::new(
            Step::Wait {
                requeue: scope.policy.wait_requeue,
            },
            "observing the VirtualMachine",
        );
    };
    let name = names::vm_name(&scope.vmm);
    match vm {
        VmState::Absent => Outcome::new(
            Step::Act(vec![Action::CreateVm]),
            format!("creating VirtualMachine {name}"),
        )
        .with(
            VMCreated,
            Unknown,
            Reason::InProgress,
            format!("creating VirtualMachine {name}"),
        ),
        VmState::Ours { .. } => Outcome::new(
            Step::Advance {
                to: Phase::Starting,
            },
            format!("VirtualMachine {name} created"),
        )
        .with(
            VMCreated,
            True,
            Reason::VMCreated,
            format!("VirtualMachine {name} exists"),
        ),
        VmState::Foreign => {
            let msg = format!(
                "a VirtualMachine named {name} exists and is not this migration's; delete it or set spec.target.name"
            );
            Outcome::new(
                Step::Fail {
                    reason: Reason::TargetNameTaken,
                    message: msg.clone(),
                    retriable: false,
                    resume: Phase::CreatingVM,
                },
                msg.clone(),
            )
            .with(VMCreated, False, Reason::TargetNameTaken, msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::scope::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn step(vm: VmState) -> Step {
        let vmm = migration("m").with_phase(Phase::CreatingVM);
        decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: Policy::default(),
            retries: 0,
            world: World::CreatingVM(vm),
        })
        .step
    }

    #[test]
    fn table() {
        assert_eq!(step(VmState::Absent), Step::Act(vec![Action::CreateVm]));
        assert_eq!(
            step(VmState::Ours {
                run_strategy: Some("Halted".into())
            }),
            Step::Advance {
                to: Phase::Starting
            }
        );
        assert!(matches!(
            step(VmState::Foreign),
            Step::Fail {
                reason: Reason::TargetNameTaken,
                retriable: false,
                ..
            }
        ));
    }
}
