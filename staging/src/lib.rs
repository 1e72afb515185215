//! S3 staging for converted disk images: a generic S3 endpoint (path-style, static keys).
//!
//! Beside each image `KEY` the converter keeps a small record, `KEY.state.json` ([`DiskRecord`]):
//! its progress and open multipart upload while it works, its SHA-256 and size once staged. The
//! checksum cannot live in the image's own metadata: a multipart upload fixes that at its start,
//! before the bytes (and so their hash) are known.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod error;
mod record;

use secrecy::ExposeSecret;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, AttributeValue, Attributes, BackoffConfig, ClientOptions, GetOptions, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use error::Error;
use error::{Context, from_store};
pub use record::{DiskRecord, RecordState, record_key};

/// Result of staging operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Files up to this size go up in one PUT; larger ones in parts of this size.
const PART_SIZE: usize = 16 * 1024 * 1024;
/// Parts in flight at once per upload.
const PART_CONCURRENCY: usize = 4;

/// Metadata key of the SHA-256 (lower-case hex) of the object's bytes.
pub const META_SHA256: &str = "sha256";

/// Where staging lives and how to sign in.
#[derive(Clone, Debug)]
pub struct StagingConfig {
    /// `https://s3.example.com` or `http://127.0.0.1:9000`; the bucket is addressed path-style.
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: secrecy::SecretString,
    /// Prepended to every key, e.g. `ferry`; empty for none.
    pub prefix: String,
    /// PEM CA bundle an https endpoint's certificate must chain to (only these CAs are then
    /// trusted); the platform trust store when `None`.
    pub ca_bundle: Option<String>,
}

/// A staged object with its user metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedObject {
    /// The key relative to the configured prefix.
    pub key: String,
    pub size: u64,
    /// From the `sha256` user metadata, when present.
    pub sha256: Option<String>,
    /// All user metadata (`x-amz-meta-*`, without the prefix).
    pub metadata: BTreeMap<String, String>,
}

/// A listed object (S3 listings carry no user metadata).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The key relative to the configured prefix.
    pub key: String,
    pub size: u64,
}

/// A handle on the staging bucket.
#[derive(Clone)]
pub struct Staging {
    store: Arc<dyn ObjectStore>,
    /// The same client, for the low-level multipart calls (parts uploaded by the caller).
    s3: Arc<AmazonS3>,
    config: StagingConfig,
}

/// An open multipart upload.
#[derive(Clone, Debug)]
pub struct Multipart {
    /// The key relative to the configured prefix.
    pub key: String,
    path: ObjectPath,
    /// The upload id S3 gave; recorded so that a later run can abort it.
    pub id: String,
}

impl fmt::Debug for Staging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Staging")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Joins the prefix and a key into an object path. Keys are `/`-separated, without empty,
/// `.` or `..` segments.
pub(crate) fn object_path(prefix: &str, key: &str) -> Result<ObjectPath> {
    let joined = [prefix.trim_matches('/'), key.trim_matches('/')]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("/");
    if joined.is_empty() {
        return Err(Error::Invalid("empty object key".into()));
    }
    ObjectPath::parse(&joined).map_err(|e| Error::Invalid(format!("object key {key:?}: {e}")))
}

/// The key relative to `prefix` of an object path.
fn relative_key(prefix: &str, path: &ObjectPath) -> String {
    let full = path.as_ref();
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        return full.to_owned();
    }
    full.strip_prefix(prefix)
        .map(|k| k.trim_start_matches('/').to_owned())
        .unwrap_or_else(|| full.to_owned())
}

/// Lower-case hex SHA-256 of a file, read in 1 MiB blocks.
///
/// Errors: [`Error::Io`].
pub async fn sha256_file(path: &Path) -> Result<String> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = tokio::fs::File::open(path).await.map_err(io)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).await.map_err(io)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(hex(ctx.finish().as_ref()))
}

/// User metadata as object_store attributes (`x-amz-meta-*`, names lower-case).
fn attributes(metadata: &BTreeMap<String, String>) -> Attributes {
    let mut attributes = Attributes::new();
    for (k, v) in metadata {
        attributes.insert(
            Attribute::Metadata(k.to_ascii_lowercase().into()),
            AttributeValue::from(v.clone()),
        );
    }
    attributes
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Staging {
    /// A handle on `config.bucket`. Makes no request; see [`Staging::bucket_exists`].
    ///
    /// Errors: [`Error::Invalid`] for an endpoint that is not an http(s) URL.
    pub fn new(config: StagingConfig) -> Result<Self> {
        // object_store builds its own reqwest client, which takes the process-wide provider:
        // ring, as everywhere in ferry. Idempotent; a provider installed earlier by anyone wins.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let endpoint = config.endpoint.trim_end_matches('/');
        let url = reqwest::Url::parse(endpoint).map_err(|e| {
            Error::Invalid(format!(
                "S3 endpoint {:?}: {e}",
                ferry_crds::redact::endpoint(&config.endpoint)
            ))
        })?;
        let allow_http = match url.scheme() {
            "https" => false,
            // Plain http only when the URL says so explicitly (a loopback lab, an in-cluster service).
            "http" => true,
            other => {
                return Err(Error::Invalid(format!(
                    "S3 endpoint scheme {other:?}; use http or https"
                )));
            }
        };
        if config.bucket.is_empty() {
            return Err(Error::Invalid("no bucket".into()));
        }
        let mut options = ClientOptions::new()
            .with_allow_http(allow_http)
            .with_connect_timeout(Duration::from_secs(10))
            .with_timeout(Duration::from_secs(300));
        if let Some(pem) = config.ca_bundle.as_deref() {
            let certs = object_store::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(|e| Error::Invalid(format!("the staging CA bundle: {e}")))?;
            if certs.is_empty() {
                return Err(Error::Invalid(
                    "the staging CA bundle holds no certificate".into(),
                ));
            }
            options = options.with_no_system_certificates(true);
            for c in certs {
                options = options.with_root_certificate(c);
            }
        }
        // Few, quick retries: the controller retries whole steps with its own backoff.
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 2,
            retry_timeout: Duration::from_secs(20),
        };
        let region = if config.region.is_empty() {
            "us-east-1"
        } else {
            config.region.as_str()
        };
        let store = AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_bucket_name(&config.bucket)
            .with_region(region)
            .with_access_key_id(&config.access_key)
            .with_secret_access_key(config.secret_key.expose_secret())
            .with_virtual_hosted_style_request(false)
            // The payload is not hashed a second time for the signature: the image's own SHA-256
            // is computed on the way and checked after import, and TLS guards https endpoints.
            .with_unsigned_payload(true)
            .with_client_options(options)
            .with_retry(retry)
            .build()
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let s3 = Arc::new(store);
        Ok(Self {
            store: s3.clone(),
            s3,
            config,
        })
    }

    pub fn config(&self) -> &StagingConfig {
        &self.config
    }

    fn cx<'a>(&'a self, key: &'a str) -> Context<'a> {
        Context {
            endpoint: &self.config.endpoint,
            bucket: &self.config.bucket,
            key,
        }
    }

    fn path(&self, key: &str) -> Result<ObjectPath> {
        object_path(&self.config.prefix, key)
    }

    /// The path-style URL of an object, `ENDPOINT/BUCKET/PREFIX/KEY` (what CDI's `source.s3` takes).
    pub fn object_url(&self, key: &str) -> Result<String> {
        let path = self.path(key)?;
        Ok(format!(
            "{}/{}/{}",
            self.config.endpoint.trim_end_matches('/'),
            self.config.bucket,
            path
        ))
    }

    /// Whether the bucket exists (one small listing).
    ///
    /// Errors: unreachable endpoint, refused credentials, other S3 errors.
    pub async fn bucket_exists(&self) -> Result<bool> {
        // A listing under a prefix no object uses: cheap, and S3 names a missing bucket in its body.
        let probe = object_path(&self.config.prefix, ".ferry-bucket-probe")?;
        match self.store.list_with_delimiter(Some(&probe)).await {
            Ok(_) => Ok(true),
            Err(e) => match from_store(&e, self.cx("")) {
                Error::NoSuchBucket { .. } => Ok(false),
                other => Err(other),
            },
        }
    }

    /// Uploads a file with user metadata (multipart above 16 MiB). Overwrites.
    ///
    /// Guarantees: the object appears whole or not at all (S3 PUT and multipart completion are
    /// atomic); an aborted multipart upload is cleaned up when possible.
    ///
    /// Errors: [`Error::Io`] reading the file; S3 errors classified.
    pub async fn put_file(
        &self,
        key: &str,
        file: &Path,
        metadata: &BTreeMap<String, String>,
    ) -> Result<StagedObject> {
        let path = self.path(key)?;
        let io = |source| Error::Io {
            path: file.to_owned(),
            source,
        };
        let size = tokio::fs::metadata(file).await.map_err(io)?.len();
        let attributes = attributes(metadata);
        let store_err = |e: object_store::Error| from_store(&e, self.cx(key));
        let mut reader = tokio::fs::File::open(file).await.map_err(io)?;
        if size <= PART_SIZE as u64 {
            let mut buf = Vec::with_capacity(size as usize);
            reader.read_to_end(&mut buf).await.map_err(io)?;
            let opts = PutOptions {
                attributes,
                ..PutOptions::default()
            };
            self.store
                .put_opts(&path, PutPayload::from(buf), opts)
                .await
                .map_err(store_err)?;
        } else {
            let opts = PutMultipartOptions {
                attributes,
                ..PutMultipartOptions::default()
            };
            let upload = self
                .store
                .put_multipart_opts(&path, opts)
                .await
                .map_err(store_err)?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            let mut buf = vec![0u8; PART_SIZE];
            let outcome: Result<()> = async {
                loop {
                    let n = read_full(&mut reader, &mut buf).await.map_err(io)?;
                    if n == 0 {
                        break;
                    }
                    writer
                        .wait_for_capacity(PART_CONCURRENCY)
                        .await
                        .map_err(store_err)?;
                    writer.write(&buf[..n]);
                }
                Ok(())
            }
            .await;
            match outcome {
                Ok(()) => {
                    writer.finish().await.map_err(store_err)?;
                }
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(e);
                }
            }
        }
        Ok(StagedObject {
            key: key.to_owned(),
            size,
            sha256: metadata.get(META_SHA256).cloned(),
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
        })
    }

    /// Starts a multipart upload of `key` with user metadata (fixed now, for the whole object).
    ///
    /// Errors: S3 errors classified.
    pub async fn create_multipart(
        &self,
        key: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Multipart> {
        let path = self.path(key)?;
        let opts = PutMultipartOptions {
            attributes: attributes(metadata),
            ..PutMultipartOptions::default()
        };
        let id = self
            .s3
            .create_multipart_opts(&path, opts)
            .await
            .map_err(|e| from_store(&e, self.cx(key)))?;
        Ok(Multipart {
            key: key.to_owned(),
            path,
            id,
        })
    }

    /// Uploads part `index` (from 0) of an upload. Parts may go up in any order, at once.
    pub async fn put_part(&self, up: &Multipart, index: usize, data: Bytes) -> Result<PartId> {
        self.s3
            .put_part(&up.path, &up.id, index, PutPayload::from(data))
            .await
            .map_err(|e| from_store(&e, self.cx(&up.key)))
    }

    /// Completes an upload: the object appears, whole, only now.
    pub async fn complete_multipart(&self, up: &Multipart, parts: Vec<PartId>) -> Result<()> {
        self.s3
            .complete_multipart(&up.path, &up.id, parts)
            .await
            .map(|_| ())
            .map_err(|e| from_store(&e, self.cx(&up.key)))
    }

    /// Aborts an upload (its parts are dropped). Idempotent: an unknown or finished upload is `Ok`.
    pub async fn abort_multipart(&self, key: &str, id: &str) -> Result<()> {
        let path = self.path(key)?;
        match self.s3.abort_multipart(&path, &id.to_owned()).await {
            Ok(()) => Ok(()),
            Err(e) => match from_store(&e, self.cx(key)) {
                Error::NotFound { .. } => Ok(()),
                // S3 answers NoSuchUpload (404); some servers answer an unknown id otherwise.
                Error::Other(t) if t.contains("NoSuchUpload") => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Writes a small object in one PUT. Overwrites.
    pub async fn put_bytes(
        &self,
        key: &str,
        data: Bytes,
        metadata: &BTreeMap<String, String>,
    ) -> Result<()> {
        let path = self.path(key)?;
        let opts = PutOptions {
            attributes: attributes(metadata),
            ..PutOptions::default()
        };
        self.store
            .put_opts(&path, PutPayload::from(data), opts)
            .await
            .map(|_| ())
            .map_err(|e| from_store(&e, self.cx(key)))
    }

    /// The bytes of a small object; `None` when it does not exist.
    pub async fn get_bytes(&self, key: &str) -> Result<Option<Bytes>> {
        let path = self.path(key)?;
        let got = match self.store.get(&path).await {
            Ok(g) => g,
            Err(e) => {
                return match from_store(&e, self.cx(key)) {
                    Error::NotFound { .. } => Ok(None),
                    other => Err(other),
                };
            }
        };
        got.bytes()
            .await
            .map(Some)
            .map_err(|e| from_store(&e, self.cx(key)))
    }

    /// The converter's record of a staged disk (`KEY.state.json`); `None` when there is none.
    ///
    /// Errors: S3 errors classified; a record that is not JSON is [`Error::Other`].
    pub async fn record(&self, key: &str) -> Result<Option<DiskRecord>> {
        let rk = record_key(key);
        match self.get_bytes(&rk).await? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::Other(format!("{rk}: not a disk record: {e}"))),
        }
    }

    /// Writes the converter's record of a disk.
    pub async fn put_record(&self, key: &str, record: &DiskRecord) -> Result<()> {
        let body = serde_json::to_vec(record)
            .map_err(|e| Error::Invalid(format!("disk record of {key}: {e}")))?;
        self.put_bytes(&record_key(key), Bytes::from(body), &BTreeMap::new())
            .await
    }

    /// Removes a staged disk entirely: its open upload (if its record names one), its image and
    /// its record. Idempotent.
    pub async fn delete_disk(&self, key: &str) -> Result<()> {
        if let Some(id) = self
            .record(key)
            .await
            .ok()
            .flatten()
            .and_then(|r| r.upload_id)
        {
            self.abort_multipart(key, &id).await?;
        }
        self.delete(key).await?;
        self.delete(&record_key(key)).await
    }

    /// Size and user metadata of an object; `None` when it does not exist.
    ///
    /// Errors: [`Error::NoSuchBucket`] when the bucket is missing (told apart from a missing
    /// object with one extra listing, since HEAD answers carry no body); others classified.
    pub async fn head(&self, key: &str) -> Result<Option<StagedObject>> {
        let path = self.path(key)?;
        let opts = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        let got = match self.store.get_opts(&path, opts).await {
            Ok(g) => g,
            Err(e) => {
                return match from_store(&e, self.cx(key)) {
                    Error::NotFound { .. } if self.bucket_exists().await? => Ok(None),
                    Error::NotFound { .. } => Err(Error::NoSuchBucket {
                        bucket: self.config.bucket.clone(),
                        endpoint: self.config.endpoint.clone(),
                    }),
                    other => Err(other),
                };
            }
        };
        let metadata: BTreeMap<String, String> = got
            .attributes
            .iter()
            .filter_map(|(k, v)| match k {
                Attribute::Metadata(name) => {
                    Some((name.to_ascii_lowercase(), v.as_ref().to_owned()))
                }
                _ => None,
            })
            .collect();
        Ok(Some(StagedObject {
            key: key.to_owned(),
            size: got.meta.size,
            sha256: metadata.get(META_SHA256).cloned(),
            metadata,
        }))
    }

    /// Streams an object to a local file; returns its size.
    ///
    /// Errors: [`Error::NotFound`], [`Error::Io`], others classified.
    pub async fn get_to_file(&self, key: &str, dest: &Path) -> Result<u64> {
        let path = self.path(key)?;
        let store_err = |e: object_store::Error| from_store(&e, self.cx(key));
        let got = self.store.get(&path).await.map_err(store_err)?;
        let io = |source| Error::Io {
            path: dest.to_owned(),
            source,
        };
        let mut out = tokio::io::BufWriter::new(tokio::fs::File::create(dest).await.map_err(io)?);
        let mut stream = got.into_stream();
        let mut n = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(store_err)?;
            out.write_all(&chunk).await.map_err(io)?;
            n += chunk.len() as u64;
        }
        out.flush().await.map_err(io)?;
        Ok(n)
    }

    /// Every object under `prefix` (relative to the configured prefix; empty for all).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let base = if prefix.trim_matches('/').is_empty()
            && self.config.prefix.trim_matches('/').is_empty()
        {
            None
        } else {
            Some(object_path(&self.config.prefix, prefix)?)
        };
        let metas: Vec<_> = self
            .store
            .list(base.as_ref())
            .try_collect()
            .await
            .map_err(|e| from_store(&e, self.cx(prefix)))?;
        Ok(metas
            .into_iter()
            .map(|m| ObjectInfo {
                key: relative_key(&self.config.prefix, &m.location),
                size: m.size,
            })
            .collect())
    }

    /// Deletes an object. Guarantees: idempotent, a missing object is `Ok`.
    pub async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match self.store.delete(&path).await {
            Ok(()) => Ok(()),
            Err(e) => match from_store(&e, self.cx(key)) {
                Error::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Deletes every object under `prefix`; returns how many. Idempotent.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize> {
        if prefix.trim_matches('/').is_empty() {
            return Err(Error::Invalid(
                "refusing to delete everything: empty prefix".into(),
            ));
        }
        let objects = self.list(prefix).await?;
        for o in &objects {
            self.delete(&o.key).await?;
        }
        Ok(objects.len())
    }
}

/// Reads until `buf` is full or the file ends, so every multipart part but the last is full size.
async fn read_full(reader: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = reader.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_paths_join_prefix_and_key() {
        assert_eq!(
            object_path("ferry", "ns/vm/disk-2000.raw")
                .unwrap()
                .as_ref(),
            "ferry/ns/vm/disk-2000.raw"
        );
        assert_eq!(object_path("", "/ns/vm/").unwrap().as_ref(), "ns/vm");
        assert_eq!(object_path("/a/b/", "c").unwrap().as_ref(), "a/b/c");
        assert!(matches!(object_path("", ""), Err(Error::Invalid(_))));
        assert!(matches!(object_path("p", "a//b"), Err(Error::Invalid(_))));
        assert!(matches!(object_path("p", "a/../b"), Err(Error::Invalid(_))));
    }

    #[test]
    fn relative_keys_drop_the_prefix() {
        let p = ObjectPath::from("ferry/ns/vm/disk.raw");
        assert_eq!(relative_key("ferry", &p), "ns/vm/disk.raw");
        assert_eq!(relative_key("", &p), "ferry/ns/vm/disk.raw");
        assert_eq!(relative_key("/ferry/", &p), "ns/vm/disk.raw");
    }

    #[test]
    fn config_rejects_bad_endpoints_and_secrets_stay_hidden() {
        let base = StagingConfig {
            endpoint: "http://127.0.0.1:9000".into(),
            bucket: "ferry".into(),
            region: "us-east-1".into(),
            access_key: "AK".into(),
            secret_key: "very-secret".into(),
            prefix: String::new(),
            ca_bundle: None,
        };
        assert!(Staging::new(base.clone()).is_ok());
        assert!(!format!("{base:?}").contains("very-secret"));
        let ftp = StagingConfig {
            endpoint: "ftp://x".into(),
            ..base.clone()
        };
        assert!(matches!(Staging::new(ftp), Err(Error::Invalid(_))));
        let no_bucket = StagingConfig {
            bucket: String::new(),
            ..base.clone()
        };
        assert!(matches!(Staging::new(no_bucket), Err(Error::Invalid(_))));
        let url = Staging::new(StagingConfig {
            prefix: "stage".into(),
            ..base
        })
        .unwrap()
        .object_url("ns/d.raw")
        .unwrap();
        assert_eq!(url, "http://127.0.0.1:9000/ferry/stage/ns/d.raw");
    }

    #[tokio::test]
    async fn sha256_of_a_file_is_lower_case_hex() {
        let dir = std::env::temp_dir().join(format!("ferry-sha-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("abc");
        std::fs::write(&f, b"abc").unwrap();
        assert_eq!(
            sha256_file(&f).await.unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
