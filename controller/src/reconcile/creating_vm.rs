//! CreatingVM: the KubeVirt VirtualMachine exists, `Halted`, wired to the imported volumes.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, VMCreated},
    Phase, Reason, names,
};

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::io::{Created, Io};
use super::outcome::{Outcome, Step};
use super::scope::Scope;
use super::world::{self, VmState};
use crate::children::{Conflict, Holder, virtual_machine};
use crate::problem::Problem;
use crate::{Error, Result};

/// The CreatingVM checkpoint.
#[derive(Debug)]
pub struct CreatingVm;

/// What CreatingVM does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the KubeVirt VirtualMachine.
    CreateVm,
}

impl Checkpoint for CreatingVm {
    const PHASE: Phase = Phase::CreatingVM;
    const CONDITIONS: &'static [ConditionType] = &[VMCreated];
    const RETRY_CLEANUP: &'static [Cleanup] = &[];
    type Observed = VmState;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<VmState> {
        world::vm_state(io).await
    }

    fn decide(scope: &Scope<VmState>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, _: &VmState, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::CreateVm => {
                let vm = virtual_machine::virtual_machine(io.vmm)?;
                match io.create(vm).await {
                    Ok(Created::Taken(c)) => Ok(Some(taken(&names::vm_name(io.vmm), &c))),
                    Ok(Created::Made | Created::Ours | Created::Vanished) => Ok(None),
                    // The API server refused the object itself: no retry changes that.
                    Err(Error::Kube(kube::Error::Api(s))) if matches!(s.code, 400 | 403 | 422) => {
                        Ok(Some(Problem::permanent(
                            Reason::VMCreateFailed,
                            format!("the VirtualMachine was rejected: {}", s.message),
                        )))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// Decides the CreatingVM step. Pure.
pub fn decide(scope: &Scope<VmState>) -> Outcome<Action> {
    let vm = &scope.world;
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
        VmState::Foreign => Outcome::failure(
            Reason::TargetNameTaken,
            name_taken(&name),
            false,
            Phase::CreatingVM,
            VMCreated,
        ),
    }
}

fn name_taken(name: &str) -> String {
    format!(
        "a VirtualMachine named {name} exists and is not this migration's; delete it or set spec.target.name"
    )
}

/// The problem of a create that found the target name taken by `c`: a VM posing as this
/// migration's is a conflict like any child's; anyone else's VM, the user's choice of name to
/// fix. Pure.
fn taken(name: &str, c: &Conflict) -> Problem {
    if c.holder == Holder::Impostor {
        return c.problem(world::RENAME_HINT);
    }
    Problem::permanent(Reason::TargetNameTaken, name_taken(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn step(vm: VmState) -> Step<Action> {
        let vmm = migration("m").with_phase(Phase::CreatingVM);
        decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: Policy::default(),
            retries: 0,
            world: vm,
        })
        .step
    }

    #[test]
    fn table() {
        assert_eq!(step(VmState::Absent), Step::Act(vec![Action::CreateVm]));
        assert_eq!(
            step(VmState::Ours {
                run_strategy: Some("Halted".into()),
                released: false,
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
