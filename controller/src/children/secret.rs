//! The Secret CDI's S3 importer reads: the staging credentials under CDI's own key names; and,
//! for an https staging endpoint with a private CA, the ConfigMap of that CA (CDI's
//! `certConfigMap`).

use std::collections::BTreeMap;

use ferry_crds::VirtualMachineMigration;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use secrecy::{ExposeSecret, SecretString};

use crate::Result;

/// Key of the access key id in a CDI S3 Secret.
pub const CDI_ACCESS_KEY_ID: &str = "accessKeyId";
/// Key of the secret key in a CDI S3 Secret.
pub const CDI_SECRET_KEY: &str = "secretKey";

/// Name of the CDI S3 Secret of a migration: `<migration>-staging-s3` (a Secret name may be
/// 253 characters long, so no cutting is needed for a migration name of at most 63).
pub fn s3_secret_name(vmm: &VirtualMachineMigration) -> String {
    format!("{}-staging-s3", vmm.name_any())
}

/// Name of the CA ConfigMap of a migration's staging endpoint: `<migration>-staging-ca`.
pub fn s3_ca_config_map_name(vmm: &VirtualMachineMigration) -> String {
    format!("{}-staging-ca", vmm.name_any())
}

/// Key of the PEM bundle in the CA ConfigMap (CDI reads every key as a PEM file).
pub const CA_CONFIG_MAP_KEY: &str = "ca.pem";

/// The ConfigMap holding the staging endpoint's CA bundle for CDI, owned by `vmm`.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn cdi_ca_config_map(vmm: &VirtualMachineMigration, pem: &str) -> Result<ConfigMap> {
    Ok(ConfigMap {
        metadata: super::child_meta(vmm, s3_ca_config_map_name(vmm))?,
        data: Some(BTreeMap::from([(
            CA_CONFIG_MAP_KEY.to_owned(),
            pem.to_owned(),
        )])),
        ..ConfigMap::default()
    })
}

/// S3 credentials, read from the `spec.staging.credentialsSecretRef` Secret.
#[derive(Clone, Debug)]
pub struct S3Credentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: SecretString,
}

/// The CDI S3 Secret for `vmm`, owned by it, carrying `creds` under CDI's keys.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn cdi_s3_secret(vmm: &VirtualMachineMigration, creds: &S3Credentials) -> Result<Secret> {
    Ok(Secret {
        metadata: super::child_meta(vmm, s3_secret_name(vmm))?,
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([
            (
                CDI_ACCESS_KEY_ID.to_owned(),
                ByteString(creds.access_key_id.clone().into_bytes()),
            ),
            (
                CDI_SECRET_KEY.to_owned(),
                ByteString(creds.secret_access_key.expose_secret().as_bytes().to_vec()),
            ),
        ])),
        ..Secret::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    #[test]
    fn the_cdi_secret_renames_the_staging_keys() {
        let creds = S3Credentials {
            access_key_id: "AK".into(),
            secret_access_key: "SK".into(),
        };
        let s = cdi_s3_secret(&migration("web-1"), &creds).unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("web-1-staging-s3"));
        let data = s.data.unwrap();
        assert_eq!(data[CDI_ACCESS_KEY_ID].0, b"AK");
        assert_eq!(data[CDI_SECRET_KEY].0, b"SK");
        assert_eq!(s.metadata.owner_references.unwrap()[0].name, "web-1");
        assert!(
            !format!("{creds:?}").contains("SK"),
            "the secret key is never printed"
        );
    }

    #[test]
    fn the_ca_config_map_carries_the_bundle_for_cdi() {
        let m = cdi_ca_config_map(&migration("web-1"), "PEM").unwrap();
        assert_eq!(m.metadata.name.as_deref(), Some("web-1-staging-ca"));
        assert_eq!(m.data.unwrap()[CA_CONFIG_MAP_KEY], "PEM");
        assert_eq!(m.metadata.owner_references.unwrap()[0].name, "web-1");
    }
}
