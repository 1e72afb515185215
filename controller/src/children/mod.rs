//! Pure builders of everything a migration creates: the converter Job, the CDI S3 Secret, one
//! CDI DataVolume per disk, the verification Job and the KubeVirt VirtualMachine. Deterministic names, owner
//! references and the migration label on every one of them. (The API types they are built of
//! live in [`crate::apis`].)

pub mod datavolume;
pub mod job;
pub mod secret;
pub mod verify_job;
pub mod virtual_machine;

use std::collections::BTreeMap;

use ferry_crds::{VirtualMachineMigration, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::{Error, Result};

/// The controller owner reference every child carries, so that deleting the migration deletes
/// them (after the finalizer ran) and their events map back to it.
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
        block_owner_deletion: Some(true),
    })
}

/// The labels of every child: the migration's name under [`names::MIGRATION_LABEL`].
pub fn labels(vmm: &VirtualMachineMigration) -> BTreeMap<String, String> {
    BTreeMap::from([
        (names::MIGRATION_LABEL.to_owned(), vmm.name_any()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "ferry-controller".to_owned(),
        ),
    ])
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
        assert_eq!(meta.namespace.as_deref(), Some("default"));
        assert!(is_owned_by(&meta, &vmm));
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
