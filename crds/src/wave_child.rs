//! Turns a wave and one of its `spec.vms` entries into the child `VirtualMachineMigration`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::{
    Error, MigrationWave, SourceSpec, TargetSpec, VirtualMachineMigration,
    VirtualMachineMigrationSpec, WaveVm, names,
};

/// Name of the migration a wave creates for `vm`: `<wave>-<targetName>`, else
/// `<wave>-<the VM's name, id or uuid made a DNS-1123 label>`, at most 63 characters (see
/// [`names::wave_member_name`]).
///
/// Named after the VirtualMachine the migration makes whenever the entry says which (a
/// targetName, or a name the VirtualMachine's is made from): two entries of one wave then share
/// a migration name exactly when they would share a VirtualMachine name (`Web-1` and `web_1` both
/// make `web-1`), which the wave refuses as a collision, and a targetName parts both names.
pub fn child_migration_name(wave_name: &str, vm: &WaveVm) -> String {
    let member = vm.target_name.as_deref().or(vm.vm.value());
    names::wave_member_name(wave_name, member.unwrap_or_default())
}

/// The wave's target template with `vm`'s own maps in place of the template's, where it has
/// them: maps are shared by a wave's VMs and overridable per VM. Pure.
fn with_overrides(target: &crate::TargetTemplate, vm: &WaveVm) -> crate::TargetTemplate {
    let mut t = target.clone();
    if !vm.storage_map.is_empty() {
        t.storage_map = vm.storage_map.clone();
    }
    if !vm.networks.is_empty() {
        t.networks = vm.networks.clone();
    }
    if let Some(p) = &vm.placement {
        t.placement = p.clone();
    }
    if let Some(p) = vm.power_state {
        t.power_state = Some(p);
    }
    t
}

/// The `VirtualMachineMigration` a wave creates for one of its VMs. Pure.
///
/// # Guarantees
/// * Deterministic name ([`child_migration_name`]) in the wave's namespace.
/// * Carries the wave label, the hold annotation (it stays `Queued` until the wave releases it;
///   made while the wave is paused, the hold asks for preflight meanwhile)
///   and a controller owner reference to the wave, so deleting the wave deletes it.
/// * Its spec is the wave's template with the entry's VM selector and target name; the intents
///   start false/0 (the wave controller propagates cancel and retry itself).
///
/// # Errors
/// [`Error::MissingMetadata`] when the wave has no name, namespace or uid (objects read from the
/// API server always have them).
pub fn child_migration(
    wave: &MigrationWave,
    vm: &WaveVm,
) -> Result<VirtualMachineMigration, Error> {
    let missing = |field| Error::MissingMetadata {
        kind: "MigrationWave",
        field,
    };
    let meta = &wave.metadata;
    let wave_name = meta.name.as_deref().ok_or_else(|| missing("name"))?;
    let namespace = meta
        .namespace
        .as_deref()
        .ok_or_else(|| missing("namespace"))?;
    let uid = meta.uid.as_deref().ok_or_else(|| missing("uid"))?;
    // blockOwnerDeletion: a foreground delete of the wave waits for its migrations' clean-up.
    // Under OwnerReferencesPermissionEnforcement this needs `update` on migrationwaves/finalizers
    // (deploy/controller/clusterrole.yaml).
    let owner = OwnerReference {
        api_version: MigrationWave::api_version(&()).into_owned(),
        kind: MigrationWave::kind(&()).into_owned(),
        name: wave_name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let hold = if wave.spec.paused {
        names::HOLD_PREFLIGHT_VALUE
    } else {
        names::HOLD_VALUE
    };
    Ok(VirtualMachineMigration {
        metadata: ObjectMeta {
            name: Some(child_migration_name(wave_name, vm)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                names::WAVE_LABEL.to_owned(),
                wave_name.to_owned(),
            )])),
            annotations: Some(BTreeMap::from([(
                names::HOLD_ANNOTATION.to_owned(),
                hold.to_owned(),
            )])),
            owner_references: Some(vec![owner]),
            // Born with ferry's finalizer: the migration controller's first look at it needs
            // no patch (and no fresh read after one).
            finalizers: Some(vec![names::FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: child_spec(wave, vm),
        status: None,
    })
}

/// The child's spec: the wave's template for `vm`, with its overrides.
fn child_spec(wave: &MigrationWave, vm: &WaveVm) -> VirtualMachineMigrationSpec {
    let template = &wave.spec.template;
    VirtualMachineMigrationSpec {
        source: SourceSpec {
            endpoint: template.source.endpoint.clone(),
            vm: vm.vm.clone(),
            power: template.source.power.clone(),
        },
        target: TargetSpec {
            name: vm.target_name.clone(),
            template: with_overrides(&template.target, vm),
        },
        staging: template.staging.clone(),
        conversion: template.conversion.clone(),
        // A warm child keeps the wave's precopy interval; its cutover is the wave's to give
        // (within maxInFlight), never its own time: all at once would overrun the wave's slots.
        mode: template.mode,
        warm: (template.mode == crate::MigrationMode::Warm).then(|| crate::WarmSpec {
            precopy_interval_seconds: wave
                .spec
                .warm
                .as_ref()
                .and_then(|w| w.precopy_interval_seconds),
            ..crate::WarmSpec::default()
        }),
        hooks: template.hooks.clone(),
        cancel: false,
        paused: false,
        preflight: vm.preflight.clone(),
        retry: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{VmSelector, fixtures::wave};

    #[test]
    fn child_copies_the_template_and_selects_the_vm() {
        let w = wave("w1", 3);
        let entry = &w.spec.vms[1];
        let child = child_migration(&w, entry).unwrap();
        assert_eq!(child.metadata.name.as_deref(), Some("w1-dc0-h0-vm1"));
        assert_eq!(child.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(child.spec.source.endpoint, w.spec.template.source.endpoint);
        assert_eq!(child.spec.source.power, w.spec.template.source.power);
        assert_eq!(child.spec.source.vm, entry.vm);
        assert_eq!(child.spec.target.template, w.spec.template.target);
        assert_eq!(child.spec.staging, w.spec.template.staging);
        assert_eq!(child.spec.conversion, w.spec.template.conversion);
        assert_eq!(child.spec.hooks, w.spec.template.hooks);
        assert_eq!(
            (child.spec.cancel, child.spec.paused, child.spec.retry),
            (false, false, 0)
        );
        assert_eq!(
            child.metadata.finalizers,
            Some(vec![names::FINALIZER.to_owned()])
        );
    }

    #[test]
    fn child_is_labelled_held_and_owned_by_the_wave() {
        let w = wave("w1", 1);
        let child = child_migration(&w, &w.spec.vms[0]).unwrap();
        assert_eq!(child.wave(), Some("w1"));
        assert!(child.is_held());
        let owners = child.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "MigrationWave");
        assert_eq!(owners[0].api_version, crate::API_VERSION);
        assert_eq!(Some(owners[0].uid.as_str()), w.metadata.uid.as_deref());
        assert_eq!(owners[0].controller, Some(true));
    }

    #[test]
    fn child_takes_the_entry_target_name() {
        let mut w = wave("w1", 1);
        w.spec.vms[0].target_name = Some("db".into());
        let child = child_migration(&w, &w.spec.vms[0]).unwrap();
        assert_eq!(child.spec.target.name.as_deref(), Some("db"));
        assert_eq!(names::vm_name(&child), "db");
        assert_eq!(child.metadata.name.as_deref(), Some("w1-db"));
    }

    #[test]
    fn a_vms_own_maps_replace_the_templates_for_its_migration_only() {
        let mut w = wave("w1", 2);
        w.spec.template.target.storage_map = vec![crate::StorageMapping {
            datastore: "san".into(),
            storage_class_name: Some("fast".into()),
            ..Default::default()
        }];
        let own = vec![crate::StorageMapping {
            datastore: "san".into(),
            storage_class_name: Some("gold".into()),
            ..Default::default()
        }];
        w.spec.vms[1].storage_map = own.clone();
        w.spec.vms[1].networks = vec![crate::NetworkMapping {
            source: "VM Network".into(),
            pod: Some(Default::default()),
            multus: None,
        }];
        let first = child_migration(&w, &w.spec.vms[0]).unwrap();
        let second = child_migration(&w, &w.spec.vms[1]).unwrap();
        assert_eq!(
            first.spec.target.template.storage_map,
            w.spec.template.target.storage_map
        );
        assert!(first.spec.target.template.networks.is_empty());
        assert_eq!(second.spec.target.template.storage_map, own);
        assert_eq!(second.spec.target.template.networks.len(), 1);
    }

    #[test]
    fn entries_share_a_migration_name_exactly_when_they_share_a_vm_name() {
        let entry = |name: &str, target: Option<&str>| WaveVm {
            target_name: target.map(str::to_owned),
            ..WaveVm::by_name(name)
        };
        let w = wave("w", 1);
        let vm_name = |e: &WaveVm| names::vm_name(&child_migration(&w, e).unwrap());
        let (upper, under) = (entry("Web-1", None), entry("web_1", None));
        assert_eq!(child_migration_name("w", &upper), "w-web-1");
        assert_eq!(child_migration_name("w", &under), "w-web-1");
        assert_eq!(
            vm_name(&upper),
            vm_name(&under),
            "one VirtualMachine name too"
        );
        let parted = entry("web_1", Some("web-1-b"));
        assert_eq!(child_migration_name("w", &parted), "w-web-1-b");
        assert_ne!(vm_name(&upper), vm_name(&parted));
    }

    #[test]
    fn child_of_an_id_or_uuid_entry_is_named_after_it() {
        let w = wave("w1", 1);
        let by_id = WaveVm {
            vm: VmSelector::by_id("vm-42"),
            ..WaveVm::default()
        };
        assert_eq!(
            child_migration(&w, &by_id)
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("w1-vm-42")
        );
    }

    #[test]
    fn child_name_is_bounded_for_long_waves() {
        let w = wave(&"w".repeat(63), 2);
        let a = child_migration_name(w.metadata.name.as_deref().unwrap(), &w.spec.vms[0]);
        let b = child_migration_name(w.metadata.name.as_deref().unwrap(), &w.spec.vms[1]);
        assert!(a.len() <= 63 && b.len() <= 63);
        assert_ne!(a, b);
    }

    #[test]
    fn a_wave_without_uid_is_an_error() {
        let mut w = wave("w1", 1);
        w.metadata.uid = None;
        let err = child_migration(&w, &w.spec.vms[0]).unwrap_err();
        assert!(
            matches!(err, Error::MissingMetadata { field: "uid", .. }),
            "{err}"
        );
    }
}
