//! References to Secrets, and the keys ferry reads from them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Key of the vSphere user name in the `spec.source.credentialsSecretRef` Secret.
pub const VSPHERE_USERNAME_KEY: &str = "username";
/// Key of the vSphere password in the `spec.source.credentialsSecretRef` Secret.
pub const VSPHERE_PASSWORD_KEY: &str = "password";
/// Key of the vSphere SDK URL in the `spec.source.credentialsSecretRef` Secret: the only endpoint
/// the credentials are sent to.
pub const VSPHERE_URL_KEY: &str = "url";
/// Key of the pinned thumbprint of the vSphere endpoint's certificate (optional).
pub const VSPHERE_THUMBPRINT_KEY: &str = "thumbprint";
/// Key of a PEM bundle of the CA certificates that sign the endpoint's certificate (optional;
/// in the vSphere and in the S3 Secret).
pub const CA_CERT_KEY: &str = "cacert";
/// Key that, set to `"true"` (in any case) by the Secret's owner, allows connecting without
/// verifying the vSphere endpoint's certificate (labs only); anything but `true`/`false` is
/// refused.
pub const INSECURE_KEY: &str = "insecureSkipTLSVerify";
/// Key of the S3 endpoint URL in the `spec.staging.credentialsSecretRef` Secret: the only
/// endpoint the keys are sent to.
pub const S3_ENDPOINT_KEY: &str = "endpoint";
/// Key of the bucket the S3 keys may be used for.
pub const S3_BUCKET_KEY: &str = "bucket";
/// Key of the S3 access key id in the `spec.staging.credentialsSecretRef` Secret.
pub const S3_ACCESS_KEY_ID_KEY: &str = "accessKeyId";
/// Key of the S3 secret access key in the `spec.staging.credentialsSecretRef` Secret.
pub const S3_SECRET_ACCESS_KEY_KEY: &str = "secretAccessKey";

/// A Secret in the same namespace as the object that refers to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretRef {
    /// Name of the Secret, in the same namespace.
    #[schemars(length(min = 1, max = 253), pattern(crate::rules::DNS1123_SUBDOMAIN))]
    pub name: String,
}

impl SecretRef {
    /// A reference to the Secret `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}
