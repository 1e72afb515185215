//! Object storage where converted disk images wait to be imported.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::SecretRef;

/// S3-compatible object storage for converted disk images (path-style addressing).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StagingSpec {
    /// URL of the S3 endpoint, e.g. https://s3.example.com or http://127.0.0.1:9000.
    #[x_kube(validation = crate::rules::s3_endpoint())]
    #[schemars(length(min = 1, max = 2048))]
    pub endpoint: String,

    /// Bucket that receives the images; it must exist.
    #[x_kube(validation = crate::rules::bucket_name())]
    #[schemars(length(min = 3, max = 63), pattern(crate::rules::BUCKET))]
    pub bucket: String,

    /// Key prefix for this migration's objects inside the bucket, e.g. ferry/ (no leading '/').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), pattern(crate::rules::KEY_PREFIX))]
    pub prefix: Option<String>,

    /// Region used to sign requests.
    #[serde(default = "default_region")]
    #[schemars(length(min = 1, max = 64), pattern(crate::rules::REGION))]
    pub region: String,

    /// Secret holding the S3 access key id (key `accessKeyId`) and secret access key (key
    /// `secretAccessKey`).
    pub credentials_secret_ref: SecretRef,
}

/// What a migration stages on, fixed when it leaves Preparing: where (the staging spec it
/// started with, `spec.conversion` included because the format names the objects) and the keys
/// of the objects it writes there. Cleanup removes exactly these, whatever the spec says later.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StagingRecord {
    /// `spec.staging` as the migration started with it.
    pub location: StagingSpec,
    /// `spec.conversion` as the migration started with it.
    #[serde(default)]
    pub conversion: crate::ConversionSpec,
    /// The keys of the staged images, one per disk (each with its `.state.json` record beside).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub keys: Vec<String>,
}

/// The default `spec.staging.region`.
pub const DEFAULT_REGION: &str = "us-east-1";

fn default_region() -> String {
    DEFAULT_REGION.to_owned()
}
