//! The S3 staging store: the trait decisions and tests see, and its implementation on
//! `crate::staging` (object_store). Errors come back classified as a [`Problem`].

use ferry_crds::Reason;
use futures::future::BoxFuture;
use secrecy::SecretString;

use crate::problem::Problem;
use crate::staging;

/// A staged disk image, as a HEAD request sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedObject {
    /// Size in bytes.
    pub size: i64,
    /// SHA-256 from the object's metadata, lowercase hex.
    pub sha256: Option<String>,
}

/// Where staging is, as its credentials Secret is bound to, with the credentials.
#[derive(Clone, Debug)]
pub struct StagingLogin {
    /// The Secret it comes from (for messages).
    pub secret: String,
    /// S3 endpoint URL.
    pub endpoint: String,
    /// Bucket.
    pub bucket: String,
    /// Region.
    pub region: String,
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: SecretString,
    /// PEM bundle of the CAs that sign an https endpoint's certificate (a private CA); the
    /// platform trust store when `None`.
    pub ca_bundle: Option<String>,
}

/// The S3 staging store.
pub trait StagingApi: Send + Sync + 'static {
    /// Checks that the bucket exists and the credentials are accepted.
    fn check_bucket<'a>(&'a self, login: &'a StagingLogin) -> BoxFuture<'a, Result<(), Problem>>;
    /// Size and recorded SHA-256 of an object; `None` when absent.
    fn head<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<StagedObject>, Problem>>;
    /// Deletes an object; absent is fine.
    fn delete<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>>;
}

/// [`StagingApi`] on [`crate::staging`] (object_store, path-style, SigV4), with full keys (the
/// migration's keys already carry `spec.staging.prefix`).
#[derive(Debug, Default)]
pub struct S3Staging;

fn store(login: &StagingLogin) -> Result<staging::Staging, Problem> {
    staging::Staging::new(staging::StagingConfig {
        endpoint: login.endpoint.clone(),
        bucket: login.bucket.clone(),
        region: login.region.clone(),
        access_key: login.access_key_id.clone(),
        secret_key: login.secret_access_key.clone(),
        prefix: String::new(),
        ca_bundle: login.ca_bundle.clone(),
    })
    .map_err(|e| Problem::permanent(Reason::StagingUnavailable, format!("spec.staging: {e}")))
}

fn s3_problem(e: &staging::Error) -> Problem {
    use staging::Error as E;
    match e {
        E::NoSuchBucket { .. } => Problem::permanent(Reason::BucketNotFound, e.to_string()),
        E::AccessDenied { .. } => Problem::permanent(
            Reason::StagingUnavailable,
            format!("{e}; fix the spec.staging.credentialsSecretRef Secret"),
        ),
        _ if e.is_transient() => Problem::transient(Reason::StagingUnavailable, e.to_string()),
        _ => Problem::permanent(Reason::StagingUnavailable, e.to_string()),
    }
}

impl StagingApi for S3Staging {
    fn check_bucket<'a>(&'a self, login: &'a StagingLogin) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async move {
            match store(login)?.bucket_exists().await {
                Ok(true) => Ok(()),
                Ok(false) => Err(s3_problem(&staging::Error::NoSuchBucket {
                    bucket: login.bucket.clone(),
                    endpoint: login.endpoint.clone(),
                })),
                Err(e) => Err(s3_problem(&e)),
            }
        })
    }

    fn head<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<StagedObject>, Problem>> {
        Box::pin(async move {
            match store(login)?.head(key).await {
                Ok(Some(o)) => Ok(Some(StagedObject {
                    size: i64::try_from(o.size).unwrap_or(i64::MAX),
                    sha256: o
                        .sha256
                        .map(|s| s.trim().to_ascii_lowercase())
                        .filter(|s| s.len() == 64),
                })),
                Ok(None) => Ok(None),
                Err(e) => Err(s3_problem(&e)),
            }
        })
    }

    fn delete<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async move {
            match store(login)?.delete(key).await {
                Ok(())
                | Err(staging::Error::NotFound { .. } | staging::Error::NoSuchBucket { .. }) => {
                    Ok(())
                }
                Err(e) => Err(s3_problem(&e)),
            }
        })
    }
}
