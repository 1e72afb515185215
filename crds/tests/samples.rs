//! The samples in deploy/samples are objects of our types, and the wave's children are well named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ferry_crds::{MigrationWave, VirtualMachineMigration, child_migration_name, names};
use serde::Deserialize;

fn docs(file: &str) -> Vec<serde_yaml::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/samples")
        .join(file);
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_yaml::Value::deserialize(d).unwrap())
        .collect()
}

fn of_kind<T: serde::de::DeserializeOwned>(docs: &[serde_yaml::Value], kind: &str) -> Vec<T> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .map(|d| serde_yaml::from_value(d.clone()).unwrap())
        .collect()
}

fn secret_keys(docs: &[serde_yaml::Value], name: &str) -> Vec<String> {
    let secret = docs
        .iter()
        .find(|d| {
            d["kind"].as_str() == Some("Secret") && d["metadata"]["name"].as_str() == Some(name)
        })
        .unwrap_or_else(|| panic!("no Secret {name}"));
    let mut keys: Vec<String> = secret["stringData"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

#[test]
fn migration_sample_is_one_vmm_with_the_secrets_it_names() {
    let d = docs("migration.yaml");
    let vmms: Vec<VirtualMachineMigration> = of_kind(&d, "VirtualMachineMigration");
    assert_eq!(vmms.len(), 1);
    let vmm = &vmms[0];
    assert!(vmm.spec.source.vm.lookup().is_ok());
    assert_eq!(names::vm_name(vmm), "dc0-h0-vm0");
    assert_eq!(
        secret_keys(&d, &vmm.spec.source.endpoint.credentials_secret_ref.name),
        [
            ferry_crds::secret::VSPHERE_PASSWORD_KEY,
            ferry_crds::secret::VSPHERE_THUMBPRINT_KEY,
            ferry_crds::secret::VSPHERE_URL_KEY,
            ferry_crds::secret::VSPHERE_USERNAME_KEY
        ],
        "the vCenter Secret is bound to its endpoint"
    );
    assert_eq!(
        secret_keys(&d, &vmm.spec.staging.credentials_secret_ref.name),
        [
            ferry_crds::secret::S3_ACCESS_KEY_ID_KEY,
            ferry_crds::secret::S3_BUCKET_KEY,
            ferry_crds::secret::S3_ENDPOINT_KEY,
            ferry_crds::secret::S3_SECRET_ACCESS_KEY_KEY
        ],
        "the S3 Secret is bound to its endpoint and bucket"
    );
    for name in [
        &vmm.spec.source.endpoint.credentials_secret_ref.name,
        &vmm.spec.staging.credentials_secret_ref.name,
    ] {
        let secret = d
            .iter()
            .find(|doc| {
                doc["kind"].as_str() == Some("Secret")
                    && doc["metadata"]["name"].as_str() == Some(name.as_str())
            })
            .unwrap();
        assert_eq!(
            secret["metadata"]["labels"][names::CREDENTIALS_LABEL].as_str(),
            Some(names::CREDENTIALS_LABEL_VALUE),
            "{name} is opted in for ferry"
        );
    }
}

#[test]
fn wave_sample_lists_three_or_more_vms_with_distinct_child_names() {
    let d = docs("wave.yaml");
    let waves: Vec<MigrationWave> = of_kind(&d, "MigrationWave");
    assert_eq!(waves.len(), 1);
    let wave = &waves[0];
    assert!(wave.spec.vms.len() >= 3);
    let mut children: Vec<String> = wave
        .spec
        .vms
        .iter()
        .map(|vm| child_migration_name("wave-1", vm))
        .collect();
    assert_eq!(children[0], "wave-1-dc0-h0-vm1");
    children.dedup();
    assert_eq!(children.len(), wave.spec.vms.len());
    secret_keys(
        &d,
        &wave
            .spec
            .template
            .source
            .endpoint
            .credentials_secret_ref
            .name,
    );
    secret_keys(&d, &wave.spec.template.staging.credentials_secret_ref.name);
}
