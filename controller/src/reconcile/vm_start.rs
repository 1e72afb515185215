//! The rules for starting the migrated VM that CreatingVM, Starting and Validating share:
//! whether a run strategy starts it, the cutover's rule (no start while the source is back on),
//! and what a KubeVirt error state does (it fails the phase after a short grace). Pure.

use ferry_crds::{ConditionStatus::Unknown, ConditionType, PowerState, Reason, RunStrategy};

use super::outcome::{Outcome, Step};
use super::scope::Scope;
use crate::apis::kubevirt::{KvError, Trouble};
use crate::problem::Problem;

/// Whether a run strategy makes KubeVirt start an instance by itself.
pub fn starts(s: RunStrategy) -> bool {
    match s {
        RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once => true,
        RunStrategy::Halted | RunStrategy::Manual => false,
    }
}

/// The cutover's rule, for a VM about to be made or set to start, on the source's power as
/// [`super::world::cutover_look`] found it: someone may have powered the source on again in vSphere
/// since its disks were copied, and starting the copy then would run two machines with one
/// identity on stale disks. `None` when the source is off (or was not looked at). Pure.
pub fn cutover_refused<W, A>(
    scope: &Scope<W>,
    power: Option<&std::result::Result<PowerState, Problem>>,
    marks: ConditionType,
) -> Option<Outcome<A>> {
    match power {
        Some(Err(p)) => Some(Outcome::from_problem(scope, p, Some(marks))),
        Some(Ok(PowerState::PoweredOn | PowerState::Suspended)) => Some(Outcome::failure(
            Reason::SourcePoweredOn,
            say::source_powered_on(),
            true,
            scope.phase(),
            marks,
        )),
        Some(Ok(PowerState::PoweredOff)) | None => None,
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
    if lasted >= grace {
        let message = say::kubevirt_gave_up(t.error, &t.message);
        Outcome::failure(reason_of(t.error), message, true, scope.phase(), marks)
    } else {
        let what = say::kubevirt_reports(t.error, &t.message);
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

/// The words of these rules, in conditions and failures.
mod say {
    use crate::apis::kubevirt::KvError;

    pub(super) fn source_powered_on() -> String {
        "the source VM was powered on again after its disks were copied (someone started it in vSphere): starting the copy would run two machines with one identity on stale disks; raise spec.retry to start over (ferry powers the source off again), or cancel".into()
    }

    pub(super) fn kubevirt_reports(error: KvError, message: &str) -> String {
        format!("KubeVirt reports {}: {message}", error.as_str())
    }

    /// KubeVirt's report, and what the operator can do about it.
    pub(super) fn kubevirt_gave_up(error: KvError, message: &str) -> String {
        let advice = match error {
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
        format!("{}; {advice}", kubevirt_reports(error, message))
    }
}
