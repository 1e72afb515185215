//! A checkpoint is one module: what it observes of the world, its pure decision, the
//! conditions it sets, what a retry of it removes, its actions and how they are carried out.
//! The reconcile core reaches a phase's checkpoint only through [`with_checkpoint!`], the one
//! place that maps phases to modules — adding a checkpoint is adding a file and a line there.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Mutex;

use ferry_crds::child::LedgerEntry;
use ferry_crds::{ConditionType, Phase, VirtualMachineMigration};
use kube::{Api, ResourceExt};

use super::intents::Cleanup;
use super::outcome::Outcome;
use super::scope::Scope;
use crate::Result;
use crate::children::{self, Conflict, Ownership};
use crate::context::Context;
use crate::problem::Problem;

/// What observing and acting need: the shared context, the migration being reconciled, and
/// the ledger of children this reconcile made, proved or deleted (written to
/// `status.children` with the reconcile's one status write).
#[derive(Clone, Copy, Debug)]
pub struct Io<'a> {
    /// Client, ports, clock, metrics.
    pub ctx: &'a Context,
    /// The migration, as read at the start of this reconcile.
    pub vmm: &'a VirtualMachineMigration,
    /// Changes to `status.children` found or made so far.
    pub ledger: &'a Ledger,
}

/// The changes to `status.children` one reconcile found or made, in order.
#[derive(Debug, Default)]
pub struct Ledger(Mutex<Vec<LedgerEntry>>);

impl Ledger {
    fn push(&self, e: LedgerEntry) {
        if let Ok(mut v) = self.0.lock() {
            v.push(e);
        }
    }

    /// The changes so far (the ledger is left empty).
    pub fn take(&self) -> Vec<LedgerEntry> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// What [`Io::create`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// Our create made it (and it is in the ledger).
    Made,
    /// The name was taken by an object a fresh read proved the migration's own (by its record
    /// or its creation stamp; an answer of "already exists" alone never makes an object
    /// ferry's): made by an earlier reconcile, and not in the watch cache yet.
    Ours,
    /// The name was taken, and the object was gone by the time it was read: the next reconcile
    /// creates it.
    Vanished,
    /// The name is held by an object that is not the migration's.
    Taken(Conflict),
}

impl Created {
    /// The problem a taken name is (see [`Conflict::problem`]; `hint` is the way out).
    pub fn problem(&self, hint: &str) -> Option<Problem> {
        match self {
            Created::Taken(c) => Some(c.problem(hint)),
            Created::Made | Created::Ours | Created::Vanished => None,
        }
    }
}

impl Io<'_> {
    /// The object `name` of kind `K` in the migration's namespace, through the children's watch
    /// caches where the controller keeps one (see [`crate::caches`]: what the cache does not
    /// show is absent, unless the migration recorded creating it).
    ///
    /// # Errors
    /// Kubernetes API errors.
    pub async fn read<K: crate::caches::Observed>(&self, name: &str) -> Result<Option<K>> {
        let recorded = self.record(&K::kind(&()), name).is_some();
        crate::caches::read(
            &self.ctx.client,
            self.ctx.children.as_ref(),
            &self.ctx.metrics,
            &self.vmm.namespace().unwrap_or_default(),
            name,
            recorded,
        )
        .await
    }

    /// The migration's record of creating its child `kind`/`name` (`status.children`), of any
    /// attempt.
    pub fn record(&self, kind: &str, name: &str) -> Option<&ferry_crds::ChildRecord> {
        let s = self.vmm.status.as_ref()?;
        ferry_crds::child::find(&s.children, kind, name)
    }

    /// The object `name` of kind `K` in the migration's namespace, from the API: for the names
    /// that must be found free before anything is touched, whoever holds them.
    ///
    /// # Errors
    /// Kubernetes API errors.
    pub async fn read_fresh<K>(&self, name: &str) -> Result<Option<K>>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + serde::de::DeserializeOwned,
    {
        Ok(self.api::<K>().get_opt(name).await?)
    }

    /// Whether `obj`, found under one of the migration's child names, is the migration's own
    /// ([`children::ownership`]); one proven by its creation stamp alone is recorded.
    pub fn own<K: kube::Resource<DynamicType = ()>>(&self, obj: &K) -> Ownership {
        let o = children::ownership(&K::kind(&()), obj.meta(), self.vmm, &self.ctx.proof);
        if let Ownership::Ours {
            unrecorded: Some(r),
        } = &o
        {
            self.ledger.push(LedgerEntry::Made(r.clone()));
        }
        o
    }

    /// Creates `obj` as a child of the migration: stamped (see [`children::proof`]) and, when
    /// the API server made it, recorded with the uid it answered. When the name is taken, the
    /// object holding it is read fresh and classified at once: the watch caches hold only
    /// objects with ferry's labels, so the next observation would not see it.
    ///
    /// # Errors
    /// Kubernetes API errors other than "already exists".
    pub async fn create<K>(&self, mut obj: K) -> Result<Created>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        let kind = K::kind(&()).into_owned();
        let name = obj.name_any();
        let subject = children::subject(self.vmm, &kind, &name);
        self.ctx.proof.stamp_onto(obj.meta_mut(), &subject);
        match crate::kubeio::create(&self.ctx.metrics, &self.api::<K>(), &obj).await? {
            Some(uid) => {
                self.ledger.push(LedgerEntry::Made(subject.record(&uid)));
                Ok(Created::Made)
            }
            None => Ok(match self.read_fresh::<K>(&name).await? {
                Some(found) => match self.own(&found) {
                    Ownership::Ours { .. } => Created::Ours,
                    Ownership::Foreign(c) => Created::Taken(c),
                },
                None => Created::Vanished,
            }),
        }
    }

    /// Notes that ferry deleted its child `kind`/`name`: its record goes.
    pub fn forget(&self, kind: &str, name: &str) {
        self.ledger.push(LedgerEntry::Gone {
            kind: kind.to_owned(),
            name: name.to_owned(),
        });
    }

    /// The namespaced API of `K` in the migration's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(
            self.ctx.client.clone(),
            &self.vmm.namespace().unwrap_or_default(),
        )
    }
}

/// One checkpoint of the state machine.
pub trait Checkpoint {
    /// The phase it is the checkpoint of.
    const PHASE: Phase;
    /// The conditions it sets, the main one last (the one a failed action marks).
    const CONDITIONS: &'static [ConditionType];
    /// What a retry resuming this checkpoint removes first: its partial results.
    const RETRY_CLEANUP: &'static [Cleanup];
    /// What it reads of the world, fresh in every reconcile (credentials it will act with
    /// included, so that acting never reads them again).
    type Observed: Debug + Send + Sync;
    /// What it may do to the world; each action idempotent.
    type Action: Clone + Debug + PartialEq + Send + Sync;

    /// Reads what the decision needs.
    ///
    /// # Errors
    /// Kubernetes API errors (problems of vSphere and S3 are part of the observation).
    fn observe(io: Io<'_>) -> impl Future<Output = Result<Self::Observed>> + Send;

    /// The decision. Pure.
    fn decide(scope: &Scope<Self::Observed>) -> Outcome<Self::Action>;

    /// Carries out one action, idempotently. `Some(problem)` when it failed in a way the
    /// migration must record (vSphere refused, the API rejected an object).
    ///
    /// # Errors
    /// Kubernetes API errors (the work queue retries the reconcile).
    fn execute(
        io: Io<'_>,
        observed: &Self::Observed,
        action: &Self::Action,
    ) -> impl Future<Output = Result<Option<Problem>>> + Send;

    /// What the outcome becomes when `failed`, one of `planned`'s actions, met `problem`. Pure.
    ///
    /// The default: the problem decides the step ([`Outcome::from_problem`]) and marks the main
    /// condition; what `planned` recorded (discovered source, progress) is kept.
    fn on_action_failed(
        scope: &Scope<Self::Observed>,
        planned: Outcome<Self::Action>,
        failed: &Self::Action,
        problem: &Problem,
    ) -> Outcome<Self::Action> {
        let _ = failed;
        Outcome::from_problem(scope, problem, Self::CONDITIONS.last().copied())
            .recording(planned.record)
    }
}

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
            P::Pending | P::Queued | P::Succeeded | P::Failed | P::Cancelled => $none,
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
            Step::Advance { .. } | Step::Act(_) | Step::Wait { .. } => ("other", None),
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
        };
        let imp = || super::super::importing::Observed {
            credentials: Ok(None),
            secret_present: false,
            dvs: vec![],
            verify: super::super::importing::Verification::default(),
            block: vec![],
            conflict: None,
        };
        let val = || super::super::validating::Observed {
            vm: super::super::world::VmState::Absent,
            vmi: super::super::world::VmiState::Absent,
            trouble: None,
            leftovers: None,
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
                    super::super::world::VmState::Absent,
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
