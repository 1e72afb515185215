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
/// source disk's capacity with the target's StorageClass and volume mode; no immediate-binding
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
    let target = &vmm.spec.target.template;
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
            storage_class_name: target.storage_class_name.clone(),
            volume_mode: target.volume_mode.map(|m| match m {
                VolumeMode::Filesystem => "Filesystem".to_owned(),
                VolumeMode::Block => "Block".to_owned(),
            }),
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
}
