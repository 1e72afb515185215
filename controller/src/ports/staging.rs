//! The S3 staging store: the trait decisions and tests see, and its implementation on
//! `ferry_staging` (object_store). Errors come back classified as a [`Problem`].

use ferry_crds::Reason;
use futures::future::BoxFuture;
use secrecy::SecretString;

use crate::problem::Problem;
use ferry_staging as staging;

/// A staged disk image, as a HEAD request sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StagedObject {
    /// Size in bytes.
    pub size: i64,
    /// SHA-256 from the converter's `Staged` record of this image, lowercase hex; `None` while
    /// the image is not known complete.
    pub sha256: Option<String>,
    /// SHA-256 of the image's raw contents (what an imported volume holds), from the metadata;
    /// for a raw image the same as `sha256`.
    pub raw_sha256: Option<String>,
    /// The image's virtual size (its raw contents' length), from the metadata.
    pub virtual_size: Option<i64>,
    /// The uid of the conversion Job that recorded it complete.
    pub job_uid: Option<String>,
    /// The datastore path of the source disk its record says it is an image of.
    pub source_path: Option<String>,
    /// The format its record says it is in.
    pub format: Option<ferry_crds::DiskFormat>,
}

/// A lowercase SHA-256 hex digest, or nothing.
fn digest(s: Option<&String>) -> Option<String> {
    s.map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// What the converter last recorded about a disk it works on (`KEY.state.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConverterProgress {
    /// `reading`, `converting`, `uploading`, `staged`, `failed`.
    pub stage: String,
    pub bytes_done: i64,
    pub bytes_total: i64,
    pub rate_bytes_per_second: Option<i64>,
    /// Why the converter stopped on this disk, when it did.
    pub error: Option<String>,
    /// The converter's classification of `error` (`BadDisk`, …).
    pub reason: Option<String>,
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
    /// The converter's progress record of a disk; `None` when there is none (yet).
    fn progress<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConverterProgress>, Problem>> {
        let _ = (login, key);
        Box::pin(async { Ok(None) })
    }
    /// Deletes a staged disk (its image, its record, its open upload); absent is fine.
    fn delete<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>>;
}

/// [`StagingApi`] on [`ferry_staging`] (object_store, path-style, SigV4), with full keys (the
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
            let st = store(login)?;
            let Some(o) = st.head(key).await.map_err(|e| s3_problem(&e))? else {
                return Ok(None);
            };
            let record = st.record(key).await.map_err(|e| s3_problem(&e))?;
            // Complete, whichever disk and format: the migration compares those with its own.
            let record = record.filter(|r| r.is_complete(o.size));
            let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            Ok(Some(StagedObject {
                size: i(o.size),
                sha256: digest(record.as_ref().and_then(|r| r.sha256.as_ref())),
                raw_sha256: digest(
                    record
                        .as_ref()
                        .and_then(|r| r.raw_contents_sha256())
                        .as_ref(),
                ),
                virtual_size: record.as_ref().and_then(|r| r.virtual_size).map(i),
                source_path: record.as_ref().map(|r| r.source_path.clone()),
                format: record.as_ref().map(|r| r.format),
                job_uid: record.and_then(|r| r.job_uid),
            }))
        })
    }

    fn progress<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConverterProgress>, Problem>> {
        Box::pin(async move {
            let r = store(login)?
                .record(key)
                .await
                .map_err(|e| s3_problem(&e))?;
            let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            Ok(r.map(|r| ConverterProgress {
                stage: r.stage,
                bytes_done: i(r.bytes_done),
                bytes_total: i(r.bytes_total),
                rate_bytes_per_second: r.rate_bytes_per_second.map(i),
                error: r.error,
                reason: r.reason,
            }))
        })
    }

    fn delete<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async move {
            match store(login)?.delete_disk(key).await {
                Ok(())
                | Err(staging::Error::NotFound { .. } | staging::Error::NoSuchBucket { .. }) => {
                    Ok(())
                }
                Err(e) => Err(s3_problem(&e)),
            }
        })
    }
}
