//! The DataVolume that imports one staged disk (CDI `source.s3`).

use ferry_crds::{VirtualMachineMigration, VolumeMode, names};
use serde_json::Map;

use crate::Result;
use crate::apis::cdi::{
    DataVolume, DataVolumeSource, DataVolumeSpec, S3Source, StorageSpec, s3_url,
};

/// The DataVolume importing disk `index` of `vmm` from its staged object.
///
/// # Guarantees
/// Named [`names::datavolume_name`]; owned by and labelled with the migration; `source.s3`
/// points at [`names::staging_key`] with `secretRef` = `secret`; the storage request is the
/// source disk's capacity, placed by the target's storage map for the disk's datastore
/// (`TargetTemplate::placement`: class, volume and access mode; the template's class and mode
/// when the map leaves it out); no immediate-binding
/// request: on a StorageClass that binds on first consumer the verification Job is that
/// consumer; `certConfigMap` = `ca_config_map` when staging is served with a private CA.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn data_volume(
    vmm: &VirtualMachineMigration,
    index: usize,
    capacity_bytes: i64,
    secret: &str,
    ca_config_map: Option<&str>,
) -> Result<DataVolume> {
    let meta = super::child_meta(vmm, names::datavolume_name(vmm, index))?;
    let staging = &vmm.spec.staging;
    let datastore = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.disks.get(index))
        .and_then(|d| ferry_crds::datastore_of(&d.datastore_path));
    // Preflight holds a migration with a disk the map leaves out (DatastoreUnmapped), so the
    // template's own class is only a fallback no migration reaches.
    let template = &vmm.spec.target.template;
    let place = template
        .placement(datastore)
        .unwrap_or_else(|| ferry_crds::DiskPlacement {
            storage_class_name: template.storage_class_name.clone(),
            volume_mode: template.volume_mode,
            access_mode: None,
        });
    let spec = DataVolumeSpec {
        source: Some(DataVolumeSource {
            s3: Some(S3Source {
                url: s3_url(
                    &staging.endpoint,
                    &staging.bucket,
                    &names::staging_key(vmm, index),
                ),
                secret_ref: Some(secret.to_owned()),
                cert_config_map: ca_config_map.map(str::to_owned),
            }),
            rest: Map::new(),
        }),
        storage: Some(StorageSpec {
            resources: Some(
                serde_json::json!({"requests": {"storage": capacity_bytes.max(1).to_string()}}),
            ),
            storage_class_name: place.storage_class_name,
            volume_mode: place.volume_mode.map(|m| match m {
                VolumeMode::Filesystem => "Filesystem".to_owned(),
                VolumeMode::Block => "Block".to_owned(),
            }),
            access_modes: place.access_mode.map(|m| vec![m.as_str().to_owned()]),
            rest: Map::new(),
        }),
        rest: Map::new(),
    };
    Ok(DataVolume {
        metadata: meta,
        spec,
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    #[test]
    fn data_volume_imports_the_staged_object_path_style() {
        let mut vmm = migration("web-1");
        vmm.spec.target.template.storage_class_name = Some("fast".into());
        vmm.spec.target.template.volume_mode = Some(VolumeMode::Block);
        let dv = data_volume(&vmm, 1, 64 << 20, "web-1-staging-s3", None).unwrap();
        assert_eq!(dv.metadata.name.as_deref(), Some("web-1-disk-1"));
        let v = serde_json::to_value(&dv).unwrap();
        assert_eq!(v["apiVersion"], "cdi.kubevirt.io/v1beta1");
        assert_eq!(
            v["spec"]["source"]["s3"]["url"],
            "http://127.0.0.1:9000/ferry-staging/ferry/default/web-1/00000000-0000-0000-0000-000000000001/disk-1.raw"
        );
        assert_eq!(v["spec"]["source"]["s3"]["secretRef"], "web-1-staging-s3");
        assert_eq!(
            v["spec"]["storage"]["resources"]["requests"]["storage"],
            "67108864"
        );
        assert_eq!(v["spec"]["storage"]["storageClassName"], "fast");
        assert_eq!(v["spec"]["storage"]["volumeMode"], "Block");
        assert!(
            v["metadata"]["annotations"]
                .get(crate::apis::cdi::BIND_IMMEDIATE_ANNOTATION)
                .is_none(),
            "claims bind where their first consumer (the verification Job) runs"
        );
        assert_eq!(
            v["metadata"]["ownerReferences"][0]["kind"],
            "VirtualMachineMigration"
        );
        assert!(v["spec"]["source"]["s3"].get("certConfigMap").is_none());
        let dv = data_volume(&vmm, 0, 1, "s", Some("web-1-staging-ca")).unwrap();
        assert_eq!(
            serde_json::to_value(&dv).unwrap()["spec"]["source"]["s3"]["certConfigMap"],
            "web-1-staging-ca"
        );
    }

    #[test]
    fn each_disk_is_placed_by_the_storage_map_of_its_datastore() {
        use ferry_crds::{AccessMode, DiscoveredDisk, DiscoveredSource, StorageMapping};
        let mut vmm = migration("web-1");
        vmm.spec.target.template.storage_map = vec![StorageMapping {
            datastore: "san".into(),
            storage_class_name: Some("fast".into()),
            volume_mode: Some(VolumeMode::Block),
            access_mode: Some(AccessMode::ReadWriteMany),
        }];
        vmm.spec.target.template.storage_class_name = Some("standard".into());
        let disk = |path: &str| DiscoveredDisk {
            datastore_path: path.into(),
            ..Default::default()
        };
        vmm.status.get_or_insert_with(Default::default).source = Some(Box::new(DiscoveredSource {
            disks: vec![disk("[san] web-1/a.vmdk"), disk("[nas] web-1/b.vmdk")],
            ..Default::default()
        }));
        let on_san =
            serde_json::to_value(data_volume(&vmm, 0, 1 << 20, "s", None).unwrap()).unwrap();
        let storage = &on_san["spec"]["storage"];
        assert_eq!(
            (
                &storage["storageClassName"],
                &storage["volumeMode"],
                &storage["accessModes"]
            ),
            (
                &serde_json::json!("fast"),
                &serde_json::json!("Block"),
                &serde_json::json!(["ReadWriteMany"])
            )
        );
        let on_nas =
            serde_json::to_value(data_volume(&vmm, 1, 1 << 20, "s", None).unwrap()).unwrap();
        assert_eq!(on_nas["spec"]["storage"]["storageClassName"], "standard");
        assert!(on_nas["spec"]["storage"].get("accessModes").is_none());
    }
}
