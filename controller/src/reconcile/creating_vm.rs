//! CreatingVM: the KubeVirt VirtualMachine exists, wired to the imported volumes, with the run
//! strategy the migration asks for — made only after the source was looked at again: off, when
//! that strategy starts it (the cutover), and unchanged since ferry recorded what it copies
//! (`source_state`: no disk added, removed, resized or written, no reconfiguration, no power
//! cycle), else `SourceChanged` and nothing made. One write makes and starts the VM: Starting
//! then only waits for its instance.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, VMCreated},
    Phase, PowerState, Reason, names,
};

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::io::{Created, Io};
use super::outcome::{Outcome, Step};
use super::scope::Scope;
use super::vm_start::{cutover_refused, starts};
use super::world::{self, VmState};
use crate::Result;
use crate::apis::kubevirt::VirtualMachine;
use crate::children::{Conflict, Holder, virtual_machine};
use crate::problem::Problem;

/// The CreatingVM checkpoint.
#[derive(Debug)]
pub struct CreatingVm;

/// What CreatingVM observes.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The VirtualMachine under the target name.
    pub vm: VmState,
    /// The source VM's power state, looked at again right before a VM that starts is made
    /// (`None` when nothing is about to be made, or the VM is made not to start).
    pub source_power: Option<std::result::Result<PowerState, Problem>>,
    /// Right before the VM is made (`None` otherwise): the source against what ferry recorded
    /// of it.
    pub source_changed: Option<std::result::Result<world::FinalLook, Problem>>,
    /// The VM under the target name carries this migration's creation stamp but is not the VM
    /// ferry makes (`virtual_machine::not_ferrys`): why.
    pub not_ferrys: Option<String>,
}

/// What CreatingVM does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the KubeVirt VirtualMachine with its final run strategy.
    CreateVm,
}

impl Checkpoint for CreatingVm {
    const PHASE: Phase = Phase::CreatingVM;
    const CONDITIONS: &'static [ConditionType] = &[VMCreated];
    const RETRY_CLEANUP: &'static [Cleanup] = &[];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let found = io.read::<VirtualMachine>(&names::vm_name(io.vmm)).await?;
        let vm = world::classify_vm(found.as_ref(), io);
        let not_ferrys = found
            .as_ref()
            .filter(|_| matches!(vm, VmState::Ours { .. }))
            .and_then(|f| virtual_machine::not_ferrys(io.vmm, f));
        let look = if vm == VmState::Absent {
            Some(world::final_look(io).await?)
        } else {
            None
        };
        let about_to_start = vm == VmState::Absent && starts(io.vmm.final_run_strategy());
        let source_power = look
            .as_ref()
            .filter(|_| about_to_start)
            .map(|l| l.as_ref().map(|f| f.power).map_err(Clone::clone));
        let source_changed = look;
        Ok(Observed {
            vm,
            source_power,
            source_changed,
            not_ferrys,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, _: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::CreateVm => {
                let vm = virtual_machine::virtual_machine(io.vmm)?;
                match io.create(vm).await? {
                    Created::Taken(c) => Ok(Some(taken(&names::vm_name(io.vmm), &c))),
                    Created::Made | Created::Ours | Created::Vanished => Ok(None),
                    // A quota may be raised: wait for it.
                    Created::Refused(p) if p.reason == Reason::QuotaExceeded => Ok(Some(p)),
                    // KubeVirt's webhooks refuse the object itself (its machine type, its
                    // devices), built from the spec: no retry changes that.
                    Created::Refused(p) => Ok(Some(Problem::permanent(
                        Reason::VMCreateFailed,
                        format!("the VirtualMachine was rejected: {}", p.message),
                    ))),
                }
            }
        }
    }
}

/// Decides the CreatingVM step. Pure.
///
/// # Guarantees
/// A VM whose run strategy starts it is made only when the source was just seen powered off
/// (the cutover's rule, [`cutover_refused`]).
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let name = names::vm_name(&scope.vmm);
    match &scope.world.vm {
        VmState::Absent => cutover_refused(scope, scope.world.source_power.as_ref(), VMCreated)
            .or_else(|| source_changed(scope))
            .unwrap_or_else(|| {
                Outcome::new(
                    Step::Act(vec![Action::CreateVm]),
                    format!("creating VirtualMachine {name}"),
                )
                .with(
                    VMCreated,
                    Unknown,
                    Reason::InProgress,
                    format!("creating VirtualMachine {name}"),
                )
            }),
        VmState::Ours { .. } if scope.world.not_ferrys.is_some() => Outcome::failure(
            Reason::TargetConflict,
            format!(
                "VirtualMachine {name} carries this migration's creation stamp but is not the VM ferry makes: {}; ferry neither starts nor deletes it. Delete it (or set spec.target.name), then raise spec.retry",
                scope.world.not_ferrys.as_deref().unwrap_or_default()
            ),
            true,
            Phase::CreatingVM,
            VMCreated,
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

/// The source changed since ferry recorded what it copies (or could not be looked at): nothing
/// is made. Pure.
fn source_changed(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    match scope.world.source_changed.as_ref()? {
        Err(p) => Some(Outcome::from_problem(scope, p, Some(VMCreated))),
        Ok(look) if look.changes.is_empty() => None,
        Ok(look) => Some(super::source_state::changed(
            super::source_state::vm_name(&scope.vmm),
            &format!(
                "after ferry recorded what it copies (vCenter's clock {})",
                look.recorded_at.as_deref().unwrap_or("?")
            ),
            &look.changes,
            Phase::CreatingVM,
            VMCreated,
        )),
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
pub(crate) mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    pub(crate) fn unchanged() -> world::FinalLook {
        world::FinalLook {
            power: PowerState::PoweredOff,
            changes: vec![],
            recorded_at: None,
        }
    }

    fn step(vm: VmState, source_power: Option<PowerState>) -> Step<Action> {
        let vmm = migration("m").with_phase(Phase::CreatingVM);
        decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed {
                vm,
                source_power: source_power.map(Ok),
                source_changed: Some(Ok(unchanged())),
                not_ferrys: None,
            },
        })
        .step
    }

    #[test]
    fn table() {
        assert_eq!(
            step(VmState::Absent, Some(PowerState::PoweredOff)),
            Step::Act(vec![Action::CreateVm])
        );
        // Made not to start (Halted, Manual): the source's power is not asked.
        assert_eq!(
            step(VmState::Absent, None),
            Step::Act(vec![Action::CreateVm])
        );
        for on in [PowerState::PoweredOn, PowerState::Suspended] {
            assert!(matches!(
                step(VmState::Absent, Some(on)),
                Step::Fail {
                    reason: Reason::SourcePoweredOn,
                    retriable: true,
                    resume: Phase::CreatingVM,
                    ..
                }
            ));
        }
        assert_eq!(
            step(
                VmState::Ours {
                    run_strategy: Some("Always".into()),
                    released: false,
                },
                None
            ),
            Step::Advance {
                to: Phase::Starting
            }
        );
        assert!(matches!(
            step(VmState::Foreign, None),
            Step::Fail {
                reason: Reason::TargetNameTaken,
                retriable: false,
                ..
            }
        ));
    }

    #[test]
    fn a_source_changed_since_its_record_fails_before_the_vm_is_made() {
        let vmm = migration("m").with_phase(Phase::CreatingVM);
        for power in [Some(PowerState::PoweredOff), None] {
            let out = decide(&Scope {
                vmm: vmm.clone(),
                now: ts(0).0,
                policy: Policy::default(),
                retries: 0,
                world: Observed {
                    vm: VmState::Absent,
                    source_power: power.map(Ok),
                    source_changed: Some(Ok(world::FinalLook {
                        changes: vec!["a disk was added (2001: [ds] vm/disk2.vmdk, 16 MiB)".into()],
                        recorded_at: Some("2026-12-06T10:00:00Z".into()),
                        ..unchanged()
                    })),
                    not_ferrys: None,
                },
            });
            assert!(out.actions().is_empty(), "nothing made: {:?}", out.step);
            let Step::Fail {
                reason, retriable, ..
            } = &out.step
            else {
                panic!("a failure: {:?}", out.step);
            };
            assert_eq!((*reason, *retriable), (Reason::SourceChanged, true));
            assert!(out.message.contains("a disk was added"), "{}", out.message);
        }
    }

    #[test]
    fn vsphere_trouble_while_looking_at_the_source_creates_nothing() {
        let vmm = migration("m").with_phase(Phase::CreatingVM);
        let out = decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed {
                vm: VmState::Absent,
                source_power: Some(Err(Problem::transient(
                    Reason::EndpointUnreachable,
                    "connection refused",
                ))),
                source_changed: Some(Err(Problem::transient(
                    Reason::EndpointUnreachable,
                    "connection refused",
                ))),
                not_ferrys: None,
            },
        });
        assert!(out.actions().is_empty(), "{:?}", out.step);
    }
}
