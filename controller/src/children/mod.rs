//! Pure builders of everything a migration creates: the converter Job, the CDI S3 Secret (and
//! its CA ConfigMap), one CDI DataVolume per disk, the verification Job and the KubeVirt
//! VirtualMachine. Deterministic names, owner references, the migration label and the
//! migration's uid on every one of them, and [`ownership`]: whether an object found under such a
//! name is this migration's — a leftover of an earlier migration of the same name, or anyone
//! else's object, is a [`Conflict`], never progress. (The API types they are built of live in
//! [`crate::apis`].)

pub mod cutover_job;
pub mod datavolume;
pub mod guest_job;
pub mod hook_job;
pub mod job;
pub mod proof;
pub mod secret;
pub mod verify_job;
pub mod virtual_machine;

use std::collections::BTreeMap;

use ferry_crds::{ChildRecord, Reason, VirtualMachineMigration, names};

use self::proof::{ProofKey, Subject};
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

/// Whether `vmm` recorded releasing the object `kind` `meta` describes to its user (Validating
/// does, last of all): by its own record of that very object (name and uid), never by the
/// object's owner references or labels, which anyone who may edit it can change. Pure.
pub fn released_by_record(vmm: &VirtualMachineMigration, kind: &str, meta: &ObjectMeta) -> bool {
    let (Some(s), Some(name), Some(uid)) = (
        vmm.status.as_ref(),
        meta.name.as_deref(),
        meta.uid.as_deref(),
    ) else {
        return false;
    };
    ferry_crds::child::find(&s.children, kind, name).is_some_and(|r| r.released && r.uid == uid)
}

/// Whether an object found under a name this migration creates is its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Made by this migration: progress may be read from it. `unrecorded` carries its record
    /// when it was proven by its creation stamp alone (made just before a controller restart,
    /// not in `status.children` yet): the caller records it.
    Ours {
        /// The record to add to `status.children`, if it is not there yet.
        unrecorded: Option<ChildRecord>,
    },
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
    /// It names this migration (labels, owner reference) but ferry's create did not make it:
    /// someone else made it look like ferry's, or replaced the object ferry made.
    Impostor,
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
            Holder::Impostor => "names this migration in its labels or owner reference, but ferry did not create it (ferry records the uid of every object it creates)".to_owned(),
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

/// The stamp subject of the child `kind`/`name` of `vmm` in its current attempt.
pub fn subject<'a>(vmm: &'a VirtualMachineMigration, kind: &'a str, name: &'a str) -> Subject<'a> {
    Subject {
        migration_uid: vmm.metadata.uid.as_deref().unwrap_or_default(),
        attempt: vmm.status.as_ref().map_or(0, |s| s.attempts),
        kind,
        name,
    }
}

/// Whether `meta`, found under a child name of `vmm`, is `vmm`'s own. Pure.
///
/// # Guarantees
/// (The argument is in [`proof`].) An object is ours exactly when
/// * its uid is the one `status.children` recorded for its kind and name, or
/// * no record of the current attempt exists for it and it carries a creation stamp of `key`
///   for `vmm`'s uid, the current attempt, its kind and its name (then `unrecorded` is set).
///
/// Labels, owner references and the migration's name never make an object ours; they only say
/// who else may hold it (for the conflict's message) and whether it leaves by itself.
pub fn ownership(
    kind: &str,
    meta: &ObjectMeta,
    vmm: &VirtualMachineMigration,
    key: &ProofKey,
) -> Ownership {
    let name = meta.name.clone().unwrap_or_default();
    let sub = subject(vmm, kind, &name);
    let recorded = vmm
        .status
        .as_ref()
        .and_then(|s| ferry_crds::child::find(&s.children, kind, &name));
    let object_uid = meta.uid.as_deref().filter(|u| !u.is_empty());
    let has_uid = vmm.metadata.uid.is_some();
    let ours = match (recorded, object_uid) {
        _ if !has_uid => None,
        (Some(r), Some(u)) if r.uid == u => Some(Ownership::Ours { unrecorded: None }),
        // This attempt's object was recorded and this is another one in its place.
        (Some(r), _) if r.attempt >= sub.attempt => None,
        (_, Some(u)) if key.verifies(meta, &sub) => Some(Ownership::Ours {
            unrecorded: Some(sub.record(u)),
        }),
        _ => None,
    };
    if let Some(o) = ours {
        return o;
    }
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
    let same_name_owner = controller.is_some_and(|o| {
        o.kind == VirtualMachineMigration::kind(&())
            && o.api_version == VirtualMachineMigration::api_version(&())
            && o.name == vmm.name_any()
    });
    let names_us =
        uid.is_some() && (controller.is_some_and(|o| Some(o.uid.as_str()) == uid) || label == uid);
    let earlier = same_name_owner && !names_us;
    let holder = match (controller, label) {
        _ if names_us => Holder::Impostor,
        (Some(o), _) if earlier => Holder::EarlierMigration { uid: o.uid.clone() },
        (Some(o), _) => Holder::Controller {
            kind: o.kind.clone(),
            name: o.name.clone(),
        },
        (None, Some(l)) => Holder::EarlierMigration { uid: l.to_owned() },
        (None, None) => Holder::Unknown,
    };
    Ownership::Foreign(Conflict {
        kind: kind.to_owned(),
        name,
        holder,
        leaving: meta.deletion_timestamp.is_some() || earlier,
    })
}

/// The pod failure policy of ferry's Jobs: the container's [`PERMANENT_EXIT_CODE`](ferry_convert::job_contract::PERMANENT_EXIT_CODE)
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
                values: vec![ferry_convert::job_contract::PERMANENT_EXIT_CODE],
            }),
            on_pod_conditions: None,
        }],
    }
}

/// One of ferry's Jobs around `container`: pods that never restart in place, no ServiceAccount
/// token or service links (the pod needs no API), Pod Security `restricted` running as `uid`
/// (the converter as the image's user, the verification Job as qemu's, which owns the block
/// devices CDI hands it), the container's [`PERMANENT_EXIT_CODE`](ferry_convert::job_contract::PERMANENT_EXIT_CODE) failing the Job at
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

    fn key() -> ProofKey {
        ProofKey::from_bytes(&[9; proof::KEY_BYTES]).unwrap()
    }

    /// `meta` as the API server returns it after ferry's create: stamped, with a uid.
    fn made_by_ferry(
        vmm: &VirtualMachineMigration,
        kind: &str,
        name: &str,
        uid: &str,
    ) -> ObjectMeta {
        let mut meta = child_meta(vmm, name.into()).unwrap();
        key().stamp_onto(&mut meta, &subject(vmm, kind, name));
        meta.uid = Some(uid.into());
        meta
    }

    fn recorded(
        mut vmm: VirtualMachineMigration,
        kind: &str,
        name: &str,
        uid: &str,
    ) -> VirtualMachineMigration {
        let s = vmm.status.get_or_insert_with(Default::default);
        let attempt = s.attempts;
        s.children.push(ChildRecord {
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            attempt,
            released: false,
        });
        vmm
    }

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
        assert_eq!(Some(owner.uid.as_str()), vmm.metadata.uid.as_deref());
    }

    #[test]
    fn a_child_is_ours_by_its_recorded_uid_or_by_its_stamp_before_the_record() {
        let k = key();
        let vmm = migration("web-1");
        let meta = made_by_ferry(&vmm, "Job", "web-1-convert", "uid-a");
        // Made just before a restart: proven by its stamp, and handed back to be recorded.
        let Ownership::Ours {
            unrecorded: Some(r),
        } = ownership("Job", &meta, &vmm, &k)
        else {
            panic!("a stamped child of this attempt is ours");
        };
        assert_eq!(
            (r.uid.as_str(), r.name.as_str()),
            ("uid-a", "web-1-convert")
        );
        // Recorded: ours by uid, nothing more to record.
        let vmm = recorded(vmm, "Job", "web-1-convert", "uid-a");
        assert_eq!(
            ownership("Job", &meta, &vmm, &k),
            Ownership::Ours { unrecorded: None }
        );
        // Released (no owner reference left): still ours by the record.
        let mut released = meta.clone();
        released.owner_references = None;
        assert!(matches!(
            ownership("Job", &released, &vmm, &k),
            Ownership::Ours { .. }
        ));
    }

    #[test]
    fn labels_owner_references_and_copied_stamps_never_make_a_child_ours() {
        let k = key();
        let vmm = migration("web-1");
        // A namespace editor copies everything ferry's children carry but the stamp.
        let mut forged = child_meta(&vmm, "web-1-verify".into()).unwrap();
        forged.uid = Some("forged".into());
        let Ownership::Foreign(c) = ownership("Job", &forged, &vmm, &k) else {
            panic!("labels and an owner reference are not proof");
        };
        assert_eq!((c.holder.clone(), c.leaving), (Holder::Impostor, false));
        let p = c.problem(world_hint());
        assert_eq!((p.reason, p.transient), (Reason::TargetConflict, false));
        assert!(
            p.message.contains("Job web-1-verify") && p.message.contains("ferry did not create it"),
            "{}",
            p.message
        );
        // A stamp made with another key, for another attempt or for another name.
        let mut other_key = forged.clone();
        ProofKey::from_bytes(&[1; proof::KEY_BYTES])
            .unwrap()
            .stamp_onto(&mut other_key, &subject(&vmm, "Job", "web-1-verify"));
        assert!(matches!(
            ownership("Job", &other_key, &vmm, &k),
            Ownership::Foreign(_)
        ));
        let mut retried = vmm.clone();
        retried.status.get_or_insert_with(Default::default).attempts = 2;
        let first_attempt = made_by_ferry(&vmm, "Job", "web-1-verify", "old");
        assert!(
            matches!(
                ownership("Job", &first_attempt, &retried, &k),
                Ownership::Foreign(_)
            ),
            "a stamp of an earlier attempt (copied from a deleted child) is not this attempt's"
        );
        let mut renamed = made_by_ferry(&vmm, "Job", "web-1-convert", "x");
        renamed.name = Some("web-1-verify".into());
        assert!(matches!(
            ownership("Job", &renamed, &vmm, &k),
            Ownership::Foreign(_)
        ));
        // ferry's object replaced by another one carrying its copied stamp: the record decides.
        let vmm = recorded(vmm, "Job", "web-1-verify", "ferrys");
        let replacement = made_by_ferry(&vmm, "Job", "web-1-verify", "replacement");
        let Ownership::Foreign(c) = ownership("Job", &replacement, &vmm, &k) else {
            panic!("not the object ferry recorded");
        };
        assert_eq!(c.holder, Holder::Impostor);
    }

    #[test]
    fn a_record_of_an_earlier_attempt_yields_to_this_attempts_stamp() {
        let k = key();
        let vmm = recorded(migration("web-1"), "DataVolume", "web-1-disk-0", "first");
        let mut retried = vmm.clone();
        retried.status.get_or_insert_with(Default::default).attempts = 2;
        // Kept across the retry (an imported disk): ours by the old record.
        let kept = made_by_ferry(&vmm, "DataVolume", "web-1-disk-0", "first");
        assert_eq!(
            ownership("DataVolume", &kept, &retried, &k),
            Ownership::Ours { unrecorded: None }
        );
        // Made again by this attempt before its record was written.
        let again = made_by_ferry(&retried, "DataVolume", "web-1-disk-0", "second");
        assert!(matches!(
            ownership("DataVolume", &again, &retried, &k),
            Ownership::Ours {
                unrecorded: Some(_)
            }
        ));
    }

    #[test]
    fn others_objects_say_who_holds_them() {
        let k = key();
        let vmm = migration("web-1");
        let released = made_by_ferry(&vmm, "DataVolume", "web-1-disk-0", "d");
        // The same migration deleted and created again: a new uid, an empty record.
        let mut again = vmm.clone();
        again.metadata.uid = Some("00000000-0000-0000-0000-00000000000b".into());
        let mut gone_owner = released.clone();
        let Ownership::Foreign(c) = ownership("DataVolume", &gone_owner, &again, &k) else {
            panic!("an earlier migration's child is not ours");
        };
        assert_eq!(
            c.holder,
            Holder::EarlierMigration {
                uid: MIGRATION_UID.into()
            }
        );
        assert!(
            c.leaving,
            "its owner is gone: the garbage collector takes it"
        );
        assert!(c.problem("x").transient);
        gone_owner.owner_references = None;
        let Ownership::Foreign(c) = ownership("DataVolume", &gone_owner, &again, &k) else {
            panic!("a released child of an earlier migration is not ours");
        };
        assert!(!c.leaving, "nobody removes a released child");
        assert!(c.problem("rename").message.contains(MIGRATION_UID));
        // Made by hand: no owner, no uid label (the name label alone counts for nothing).
        let by_hand = ObjectMeta {
            name: Some("web-1-disk-0".into()),
            labels: Some(BTreeMap::from([(
                names::MIGRATION_LABEL.to_owned(),
                "web-1".to_owned(),
            )])),
            ..ObjectMeta::default()
        };
        let Ownership::Foreign(c) = ownership("DataVolume", &by_hand, &vmm, &k) else {
            panic!("a hand-made object is not ours");
        };
        assert_eq!((c.holder.clone(), c.leaving), (Holder::Unknown, false));
        assert!(
            c.problem("rename")
                .message
                .contains("was not made by ferry")
        );
        // Another controller's object.
        let mut other = by_hand.clone();
        other.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "rs".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let Ownership::Foreign(c) = ownership("DataVolume", &other, &vmm, &k) else {
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
        other.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let Ownership::Foreign(c) = ownership("DataVolume", &other, &vmm, &k) else {
            panic!();
        };
        assert!(c.leaving);
    }

    fn world_hint() -> &'static str {
        "create the migration under another name"
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
