//! Pure builders of everything a migration creates: the converter Job, the CDI S3 Secret (and
//! its CA ConfigMap), one CDI DataVolume per disk, the verification Job and the KubeVirt
//! VirtualMachine. Deterministic names, owner references, the migration label and the
//! migration's uid on every one of them, and [`ownership`]: whether an object found under such a
//! name is this migration's — a leftover of an earlier migration of the same name, or anyone
//! else's object, is a [`Conflict`], never progress. (The API types they are built of live in
//! [`crate::apis`].)

pub mod datavolume;
pub mod job;
pub mod secret;
pub mod verify_job;
pub mod virtual_machine;

use std::collections::BTreeMap;

use ferry_crds::{Reason, VirtualMachineMigration, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::problem::Problem;
use crate::{Error, Result};

/// The controller owner reference every child carries, so that deleting the migration deletes
/// them (after the finalizer ran) and their events map back to it. No `blockOwnerDeletion`:
/// ferry never deletes a migration in the foreground, and setting it would need `update` on the
/// migrations' finalizers under the OwnerReferencesPermissionEnforcement admission plugin.
///
/// # Errors
/// [`Error::MissingField`] when the migration has no uid (only hand-built objects lack it).
pub fn owner_reference(vmm: &VirtualMachineMigration) -> Result<OwnerReference> {
    let uid = vmm.metadata.uid.clone().ok_or(Error::MissingField {
        kind: "VirtualMachineMigration",
        field: "metadata.uid",
    })?;
    Ok(OwnerReference {
        api_version: VirtualMachineMigration::api_version(&()).into_owned(),
        kind: VirtualMachineMigration::kind(&()).into_owned(),
        name: vmm.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: None,
    })
}

/// The labels of every child: the migration's name under [`names::MIGRATION_LABEL`] and its uid
/// under [`names::MIGRATION_UID_LABEL`] (the uid survives the release of a child; the name does
/// not tell one migration from a later one of the same name).
pub fn labels(vmm: &VirtualMachineMigration) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (names::MIGRATION_LABEL.to_owned(), vmm.name_any()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "ferry-controller".to_owned(),
        ),
    ]);
    if let Some(uid) = &vmm.metadata.uid {
        labels.insert(names::MIGRATION_UID_LABEL.to_owned(), uid.clone());
    }
    labels
}

/// Metadata of a child named `name` in the migration's namespace.
///
/// # Errors
/// As [`owner_reference`], and when the migration has no namespace.
pub fn child_meta(vmm: &VirtualMachineMigration, name: String) -> Result<ObjectMeta> {
    let namespace = vmm.metadata.namespace.clone().ok_or(Error::MissingField {
        kind: "VirtualMachineMigration",
        field: "metadata.namespace",
    })?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(labels(vmm)),
        owner_references: Some(vec![owner_reference(vmm)?]),
        ..ObjectMeta::default()
    })
}

/// Whether `meta` names `vmm` as its controller owner (by uid).
pub fn is_owned_by(meta: &ObjectMeta, vmm: &VirtualMachineMigration) -> bool {
    let Some(uid) = vmm.metadata.uid.as_deref() else {
        return false;
    };
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

/// Whether an object found under a name this migration creates is its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Made by this migration (by uid): progress may be read from it.
    Ours,
    /// Anyone else's: never progress.
    Foreign(Conflict),
}

/// Who holds an object that is not this migration's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// An earlier migration of the same name (its uid), e.g. the released VM and DataVolumes of
    /// a migration that succeeded and was deleted.
    EarlierMigration {
        /// Its uid.
        uid: String,
    },
    /// Another controller's object.
    Controller {
        /// The controller owner's kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// Not made by ferry: by hand or by another tool.
    Unknown,
}

/// A child name taken by an object that is not this migration's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// Kind of the object, e.g. `DataVolume`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Who holds it.
    pub holder: Holder,
    /// It goes away by itself: it is being deleted, or its controller owner is an earlier
    /// migration of this name (gone, since two objects never share a name: the garbage
    /// collector removes it).
    pub leaving: bool,
}

impl Conflict {
    /// The problem it is for a migration: waiting while it leaves by itself, otherwise a
    /// permanent [`Reason::TargetConflict`] naming the object and what to do (`hint`, after
    /// "delete it, or").
    pub fn problem(&self, hint: &str) -> Problem {
        let Self { kind, name, .. } = self;
        if self.leaving {
            return Problem::transient(
                Reason::TargetConflict,
                format!(
                    "{kind} {name} is the leftover of an earlier migration of this name and is being removed; waiting for it to go"
                ),
            );
        }
        let holder = match &self.holder {
            Holder::EarlierMigration { uid } => {
                format!("was made by an earlier migration of this name (uid {uid})")
            }
            Holder::Controller { kind, name } => format!("belongs to {kind} {name}"),
            Holder::Unknown => "was not made by ferry".to_owned(),
        };
        Problem::permanent(
            Reason::TargetConflict,
            format!(
                "{kind} {name} already exists and {holder}; ferry never adopts an object it did not create for this migration: delete it, or {hint}, then raise spec.retry"
            ),
        )
    }
}

/// Whether `meta`, found under a child name of `vmm`, is `vmm`'s own. Pure.
///
/// # Guarantees
/// An object with a controller owner is ours exactly when that owner is `vmm` (by uid); one
/// without (a released VM or DataVolume) exactly when it carries `vmm`'s uid under
/// [`names::MIGRATION_UID_LABEL`]. The migration's name alone never makes an object ours.
pub fn ownership(kind: &str, meta: &ObjectMeta, vmm: &VirtualMachineMigration) -> Ownership {
    let uid = vmm.metadata.uid.as_deref();
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let label = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(names::MIGRATION_UID_LABEL))
        .map(String::as_str);
    let ours = match controller {
        Some(o) => Some(o.uid.as_str()) == uid,
        None => uid.is_some() && label == uid,
    };
    if ours {
        return Ownership::Ours;
    }
    let owner_is_earlier_migration = controller.is_some_and(|o| {
        o.kind == VirtualMachineMigration::kind(&())
            && o.api_version == VirtualMachineMigration::api_version(&())
            && o.name == vmm.name_any()
    });
    let holder = match (controller, label) {
        (Some(o), _) if owner_is_earlier_migration => {
            Holder::EarlierMigration { uid: o.uid.clone() }
        }
        (Some(o), _) => Holder::Controller {
            kind: o.kind.clone(),
            name: o.name.clone(),
        },
        (None, Some(l)) => Holder::EarlierMigration { uid: l.to_owned() },
        (None, None) => Holder::Unknown,
    };
    Ownership::Foreign(Conflict {
        kind: kind.to_owned(),
        name: meta.name.clone().unwrap_or_default(),
        holder,
        leaving: meta.deletion_timestamp.is_some() || owner_is_earlier_migration,
    })
}

/// The pod failure policy of ferry's Jobs: the container's [`job::PERMANENT_EXIT_CODE`]
/// (a failure no retry can mend) fails the Job at once instead of spending its back-off.
fn fail_on_permanent_exit(container: &str) -> k8s_openapi::api::batch::v1::PodFailurePolicy {
    use k8s_openapi::api::batch::v1::{
        PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
    };
    PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: "FailJob".to_owned(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: Some(container.to_owned()),
                operator: "In".to_owned(),
                values: vec![job::PERMANENT_EXIT_CODE],
            }),
            on_pod_conditions: None,
        }],
    }
}

/// One of ferry's Jobs around `container`: pods that never restart in place, no ServiceAccount
/// token or service links (the pod needs no API), Pod Security `restricted` running as `uid`
/// (the converter as the image's user, the verification Job as qemu's, which owns the block
/// devices CDI hands it), the container's [`job::PERMANENT_EXIT_CODE`] failing the Job at
/// once, and the migration's labels on the pod.
pub(crate) fn restricted_job(
    vmm: &VirtualMachineMigration,
    meta: ObjectMeta,
    mut container: k8s_openapi::api::core::v1::Container,
    volumes: Vec<k8s_openapi::api::core::v1::Volume>,
    uid: i64,
    backoff_limit: i32,
    active_deadline_seconds: i64,
) -> k8s_openapi::api::batch::v1::Job {
    use k8s_openapi::api::batch::v1::{Job, JobSpec};
    use k8s_openapi::api::core::v1::{
        Capabilities, PodSecurityContext, PodSpec, PodTemplateSpec, SeccompProfile, SecurityContext,
    };
    container.security_context = Some(SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        ..SecurityContext::default()
    });
    let failure_policy = fail_on_permanent_exit(&container.name);
    let pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".to_owned()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(uid),
            run_as_group: Some(uid),
            fs_group: Some(uid),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                localhost_profile: None,
            }),
            ..PodSecurityContext::default()
        }),
        volumes: Some(volumes).filter(|v| !v.is_empty()),
        ..PodSpec::default()
    };
    Job {
        metadata: meta,
        spec: Some(JobSpec {
            backoff_limit: Some(backoff_limit),
            active_deadline_seconds: Some(active_deadline_seconds),
            pod_failure_policy: Some(failure_policy),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(vmm)),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::{MIGRATION_UID, migration};

    #[test]
    fn children_are_owned_by_and_labelled_with_their_migration() {
        let vmm = migration("web-1");
        let meta = child_meta(&vmm, "web-1-convert".into()).unwrap();
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("VirtualMachineMigration", MIGRATION_UID)
        );
        assert_eq!(owner.api_version, ferry_crds::API_VERSION);
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            meta.labels.as_ref().unwrap()[names::MIGRATION_LABEL],
            "web-1"
        );
        assert_eq!(
            meta.labels.as_ref().unwrap()[names::MIGRATION_UID_LABEL],
            MIGRATION_UID
        );
        assert_eq!(owner.block_owner_deletion, None);
        assert_eq!(meta.namespace.as_deref(), Some("default"));
        assert!(is_owned_by(&meta, &vmm));
        assert_eq!(ownership("Job", &meta, &vmm), Ownership::Ours);
    }

    #[test]
    fn only_the_uid_makes_a_child_ours() {
        let vmm = migration("web-1");
        let ours = child_meta(&vmm, "web-1-disk-0".into()).unwrap();
        // Released (no owner reference left), still ours by its uid label.
        let mut released = ours.clone();
        released.owner_references = None;
        assert_eq!(ownership("DataVolume", &released, &vmm), Ownership::Ours);

        // The same migration deleted and created again: a new uid.
        let mut again = vmm.clone();
        again.metadata.uid = Some("00000000-0000-0000-0000-00000000000b".into());
        let Ownership::Foreign(c) = ownership("DataVolume", &released, &again) else {
            panic!("a released child of an earlier migration is not ours");
        };
        assert_eq!(
            c.holder,
            Holder::EarlierMigration {
                uid: MIGRATION_UID.into()
            }
        );
        assert!(!c.leaving, "nobody removes a released child");
        let p = c.problem("create the migration under another name");
        assert_eq!((p.reason, p.transient), (Reason::TargetConflict, false));
        assert!(
            p.message.contains("DataVolume web-1-disk-0") && p.message.contains(MIGRATION_UID),
            "{}",
            p.message
        );
        // Still owned by the deleted one: the garbage collector takes it; wait.
        let Ownership::Foreign(c) = ownership("Job", &ours, &again) else {
            panic!("owned by another uid");
        };
        assert!(c.leaving);
        assert!(c.problem("x").transient);

        // Made by hand: no owner, no uid label (the name label alone counts for nothing).
        let mut by_hand = ObjectMeta {
            name: Some("web-1-disk-0".into()),
            labels: Some(BTreeMap::from([(
                names::MIGRATION_LABEL.to_owned(),
                "web-1".to_owned(),
            )])),
            ..ObjectMeta::default()
        };
        let Ownership::Foreign(c) = ownership("DataVolume", &by_hand, &vmm) else {
            panic!("a hand-made object is not ours");
        };
        assert_eq!((c.holder.clone(), c.leaving), (Holder::Unknown, false));
        assert!(
            c.problem("rename")
                .message
                .contains("was not made by ferry")
        );
        // Our uid label but another controller: not ours.
        by_hand.labels = Some(labels(&vmm));
        by_hand.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "rs".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let Ownership::Foreign(c) = ownership("DataVolume", &by_hand, &vmm) else {
            panic!("another controller's object is not ours");
        };
        assert_eq!(
            c.holder,
            Holder::Controller {
                kind: "ReplicaSet".into(),
                name: "rs".into()
            }
        );
        // Being deleted: wait for it.
        by_hand.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let Ownership::Foreign(c) = ownership("DataVolume", &by_hand, &vmm) else {
            panic!();
        };
        assert!(c.leaving);
    }

    #[test]
    fn a_migration_without_uid_cannot_own_children() {
        let mut vmm = migration("web-1");
        vmm.metadata.uid = None;
        assert!(matches!(
            child_meta(&vmm, "x".into()),
            Err(Error::MissingField { .. })
        ));
    }
}
