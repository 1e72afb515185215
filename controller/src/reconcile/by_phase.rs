//! The checkpoint of each phase: [`with_checkpoint!`] is the one place that maps a phase to its
//! module, so the core, the status and the intents ask it rather than naming checkpoints.

use ferry_crds::{ConditionType, Phase};

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;

/// Evaluates `$body` with the type name `$c` bound to the [`Checkpoint`] of `$phase`, or `$none`
/// for a phase that is not a checkpoint. The match is exhaustive: a new phase does not compile
/// until it is placed here.
macro_rules! with_checkpoint {
    ($phase:expr, |$c:ident| $body:expr, otherwise $none:expr) => {{
        use ferry_crds::Phase as P;
        match $phase {
            P::Preparing => {
                type $c = $crate::reconcile::preparing::Preparing;
                $body
            }
            P::Converting => {
                type $c = $crate::reconcile::converting::Converting;
                $body
            }
            P::Importing => {
                type $c = $crate::reconcile::importing::Importing;
                $body
            }
            P::CuttingOver => {
                type $c = $crate::reconcile::cutting_over::CuttingOver;
                $body
            }
            P::ConvertingGuest => {
                type $c = $crate::reconcile::converting_guest::ConvertingGuest;
                $body
            }
            P::CreatingVM => {
                type $c = $crate::reconcile::creating_vm::CreatingVm;
                $body
            }
            P::Starting => {
                type $c = $crate::reconcile::starting::Starting;
                $body
            }
            P::Validating => {
                type $c = $crate::reconcile::validating::Validating;
                $body
            }
            P::Pending | P::Queued | P::Succeeded | P::Failed | P::Cancelled | P::RolledBack => {
                $none
            }
        }
    }};
}
pub(crate) use with_checkpoint;

/// The conditions the checkpoint of `phase` sets (none for other phases).
pub fn conditions_of(phase: Phase) -> &'static [ConditionType] {
    with_checkpoint!(phase, |C| C::CONDITIONS, otherwise & [])
}

/// What a retry resuming `phase` removes first (nothing for other phases).
pub fn retry_cleanup(phase: Phase) -> &'static [Cleanup] {
    with_checkpoint!(phase, |C| C::RETRY_CLEANUP, otherwise & [])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Problem;
    use crate::reconcile::outcome::Outcome;
    use crate::reconcile::scope::Scope;

    #[test]
    fn every_checkpoint_is_placed_and_names_its_own_phase() {
        for phase in Phase::ALL {
            let placed = with_checkpoint!(phase, |C| Some(C::PHASE), otherwise None);
            assert_eq!(placed, phase.is_checkpoint().then_some(phase), "{phase}");
        }
    }

    #[test]
    fn every_condition_but_ready_belongs_to_exactly_one_checkpoint() {
        for t in ConditionType::ALL {
            let owners = Phase::CHECKPOINTS
                .iter()
                .filter(|p| conditions_of(**p).contains(&t))
                .count();
            let want = usize::from(t != ConditionType::Ready);
            assert_eq!(owners, want, "{t}");
        }
    }

    /// A scope of `C` in its own phase, with `world` observed and `retries` spent.
    fn scope_of<W>(phase: Phase, world: W, retries: u32) -> Scope<W> {
        use ferry_crds::fixtures::{migration, ts};
        Scope {
            vmm: migration("m").with_disks(1).with_phase(phase),
            now: ts(10).0,
            policy: crate::policy::Policy::default(),
            retries,
            world,
        }
    }

    /// What `C::on_action_failed` made of `problem` after `retries`: the step's kind, the reason,
    /// whether a retry of the migration may help, and the main condition's status.
    fn failed<C: Checkpoint>(
        world: C::Observed,
        action: C::Action,
        problem: Problem,
        retries: u32,
    ) -> (
        String,
        ferry_crds::Reason,
        Option<bool>,
        Option<ferry_crds::ConditionStatus>,
        bool,
    ) {
        use super::super::outcome::{Record, Step};
        let scope = scope_of(C::PHASE, world, retries);
        let planned = Outcome::new(Step::Act(vec![action.clone()]), "planned").recording(Record {
            progress: Some(ferry_crds::Progress::default()),
            ..Record::default()
        });
        let o = C::on_action_failed(&scope, planned, &action, &problem);
        let (kind, retriable) = match &o.step {
            Step::Retry { .. } => ("retry", None),
            Step::Fail {
                retriable, resume, ..
            } => {
                assert_eq!(
                    *resume,
                    C::PHASE,
                    "a failed action resumes its own checkpoint"
                );
                ("fail", Some(*retriable))
            }
            Step::Advance { .. } | Step::Act(_) | Step::Wait { .. } | Step::Hold { .. } => {
                ("other", None)
            }
        };
        let main = C::CONDITIONS.last().copied();
        let cond = o
            .conditions
            .iter()
            .find(|c| Some(c.type_) == main)
            .map(|c| c.status);
        (
            kind.to_owned(),
            problem.reason,
            retriable,
            cond,
            o.record.progress.is_some(),
        )
    }

    #[test]
    fn a_failed_action_becomes_an_outcome_by_its_problem_alone() {
        use ferry_crds::ConditionStatus::{False, Unknown};
        use ferry_crds::Reason;
        let t = |r: Reason| Problem::transient(r, "down");
        let p = |r: Reason| Problem::permanent(r, "refused");
        let max = crate::policy::Policy::default().max_transient_retries;
        let prep = || super::super::preparing::Observed {
            facts: Err(p(Reason::VMNotFound)),
            login: None,
            slot: crate::copy_slots::Verdict::Free,
            hook: None,
        };
        let imp = || super::super::importing::Observed {
            credentials: Ok(None),
            secret_present: false,
            dvs: vec![],
            dv_uids: vec![],
            verify: super::super::importing::Verification::default(),
            block: vec![],
            conflict: None,
        };
        let val = || super::super::validating::Observed {
            vm: super::super::world::VmState::Absent,
            vmi: super::super::world::VmiState::Absent,
            trouble: None,
            leftovers: None,
            console: None,
            probe: None,
            hook: None,
        };
        use super::super::{creating_vm, importing, preparing, validating};
        let rows = vec![
            (
                "power-off refused",
                failed::<preparing::Preparing>(
                    prep(),
                    preparing::Action::PowerOff,
                    p(Reason::PowerOffFailed),
                    0,
                ),
                ("fail", Some(false), Some(False)),
            ),
            (
                "power-off, vCenter down",
                failed::<preparing::Preparing>(
                    prep(),
                    preparing::Action::PowerOff,
                    t(Reason::EndpointUnreachable),
                    0,
                ),
                ("retry", None, Some(Unknown)),
            ),
            (
                "power-off, vCenter down past the budget",
                failed::<preparing::Preparing>(
                    prep(),
                    preparing::Action::PowerOff,
                    t(Reason::EndpointUnreachable),
                    max,
                ),
                ("fail", Some(true), Some(False)),
            ),
            (
                "CDI secret, credentials gone",
                failed::<importing::Importing>(
                    imp(),
                    importing::Action::CreateS3Secret,
                    t(Reason::SecretNotFound),
                    0,
                ),
                ("retry", None, Some(Unknown)),
            ),
            (
                "VM rejected by the API",
                failed::<creating_vm::CreatingVm>(
                    creating_vm::Observed {
                        vm: super::super::world::VmState::Absent,
                        source_power: Some(Ok(ferry_crds::PowerState::PoweredOff)),
                        source_changed: Some(Ok(creating_vm::tests::unchanged())),
                        not_ferrys: None,
                    },
                    creating_vm::Action::CreateVm,
                    p(Reason::VMCreateFailed),
                    0,
                ),
                ("fail", Some(false), Some(False)),
            ),
            (
                "finish, staging down",
                failed::<validating::Validating>(
                    val(),
                    validating::Action::Finish,
                    t(Reason::StagingUnavailable),
                    1,
                ),
                ("retry", None, Some(Unknown)),
            ),
        ];
        for (name, (kind, _, retriable, cond, kept), (want_kind, want_retriable, want_cond)) in rows
        {
            assert_eq!(
                (kind.as_str(), retriable, cond),
                (want_kind, want_retriable, want_cond),
                "{name}"
            );
            assert!(kept, "{name}: what the plan recorded is kept");
        }
    }
}
