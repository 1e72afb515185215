//! What a checkpoint's observation and actions go through: the shared context, the migration,
//! and the ledger of children this reconcile made, proved or deleted; reads through the watch
//! caches, creates that tell a taken name apart from our own, deletes of what is on record.

use std::fmt::Debug;
use std::sync::Mutex;

use ferry_crds::VirtualMachineMigration;
use ferry_crds::child::LedgerEntry;
use kube::{Api, ResourceExt};

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
    /// The API server refused the create (a quota, an admission policy, RBAC, a validation
    /// rule): [`crate::problem::refused`], its words whole.
    Refused(Problem),
}

impl Created {
    /// The problem a taken name is (see [`Conflict::problem`]; `hint` is the way out), or the
    /// refusal.
    pub fn problem(&self, hint: &str) -> Option<Problem> {
        match self {
            Created::Taken(c) => Some(c.problem(hint)),
            Created::Refused(p) => Some(p.clone()),
            Created::Made | Created::Ours | Created::Vanished => None,
        }
    }
}

impl Io<'_> {
    /// The converter image this migration's Jobs run: `spec.conversion.image` when the policy
    /// allows it, else the controller's own (see [`crate::policy::Policy::converter_image_for`]).
    ///
    /// # Errors
    /// Why the image is not allowed (the message of `ConverterImageNotAllowed`).
    pub fn converter_image(&self) -> std::result::Result<String, String> {
        self.ctx
            .policy
            .converter_image_for(self.vmm.spec.conversion.image.as_deref())
    }

    /// The object `name` of kind `K` in the migration's namespace, through the children's watch
    /// caches where the controller keeps one (see [`crate::caches`]: what the cache does not
    /// show is absent, unless the migration recorded creating it).
    ///
    /// # Errors
    /// Kubernetes API errors.
    pub async fn read<K: crate::caches::Observed>(&self, name: &str) -> Result<Option<K>> {
        let record = self.record(&K::kind(&()), name);
        crate::caches::read(
            &self.ctx.client,
            self.ctx.children.as_ref(),
            &self.ctx.metrics,
            &self.vmm.namespace().unwrap_or_default(),
            name,
            record.is_some(),
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
        let made = match crate::kubeio::create(&self.ctx.metrics, &self.api::<K>(), &obj).await {
            Err(crate::Error::Kube(e)) => {
                if let Some(p) = crate::problem::refused(&format!("create {kind} {name}"), &e) {
                    return Ok(Created::Refused(p));
                }
                return Err(e.into());
            }
            other => other?,
        };
        match made {
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

    /// Whether the migration recorded releasing `obj` to its user
    /// ([`children::released_by_record`]).
    pub fn released<K: kube::Resource<DynamicType = ()>>(&self, obj: &K) -> bool {
        children::released_by_record(self.vmm, &K::kind(&()), obj.meta())
    }

    /// Records that ferry released its child `name` of kind `K` (with this reconcile's status
    /// write).
    pub fn mark_released<K: kube::Resource<DynamicType = ()>>(&self, name: &str) {
        self.ledger.push(LedgerEntry::Released {
            kind: K::kind(&()).into_owned(),
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
