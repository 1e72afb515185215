//! Reading a staged object the way CDI's S3 importer does: path-style URL
//! `http(s)://host:port/BUCKET/KEY`, SigV4 with the Secret's `accessKeyId`/`secretKey`, at a
//! capped rate. Like CDI, nothing checks the bytes against anything: CDI's `checksum` field
//! exists for http sources only.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{Certificate, ClientOptions, ObjectStore, ObjectStoreExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::{Error, Result};

/// Where an object lives, split from a DataVolume's `source.s3.url`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Location {
    /// `scheme://host[:port]`
    pub endpoint: String,
    pub bucket: String,
    pub key: String,
}

fn url_error(url: &str, reason: &str) -> Error {
    Error::S3Url {
        url: url.to_string(),
        reason: reason.to_string(),
    }
}

/// Splits a path-style S3 URL.
///
/// Errors: a scheme other than http/https, no bucket, no key.
pub fn parse_url(url: &str) -> Result<S3Location> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| url_error(url, "no scheme"))?;
    if scheme != "http" && scheme != "https" {
        return Err(url_error(
            url,
            "only path-style http(s)://host/bucket/key URLs are supported",
        ));
    }
    let (host, path) = rest
        .split_once('/')
        .ok_or_else(|| url_error(url, "no bucket in the path"))?;
    if host.is_empty() {
        return Err(url_error(url, "no host"));
    }
    let path = path.split(['?', '#']).next().unwrap_or("");
    let (bucket, key) = path
        .split_once('/')
        .ok_or_else(|| url_error(url, "no object key after the bucket"))?;
    if bucket.is_empty() || key.is_empty() {
        return Err(url_error(url, "empty bucket or key"));
    }
    Ok(S3Location {
        endpoint: format!("{scheme}://{host}"),
        bucket: bucket.to_string(),
        key: key.to_string(),
    })
}

/// Credentials from a CDI S3 Secret.
#[derive(Clone)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// A client for one bucket; an https endpoint's certificate must chain to the system's CAs or
/// to one of `ca_pems` (CDI's `certConfigMap`: added to the system pool, not replacing it).
pub fn store(
    loc: &S3Location,
    creds: Option<&Credentials>,
    ca_pems: &[String],
) -> Result<Arc<dyn ObjectStore>> {
    let mut options = ClientOptions::new().with_allow_http(true);
    for pem in ca_pems {
        for cert in Certificate::from_pem_bundle(pem.as_bytes())? {
            options = options.with_root_certificate(cert);
        }
    }
    let mut b = AmazonS3Builder::new()
        .with_endpoint(&loc.endpoint)
        .with_bucket_name(&loc.bucket)
        .with_region("us-east-1")
        .with_client_options(options)
        .with_virtual_hosted_style_request(false);
    match creds {
        Some(c) => {
            b = b
                .with_access_key_id(&c.access_key_id)
                .with_secret_access_key(&c.secret_key)
        }
        None => b = b.with_skip_signature(true),
    }
    Ok(Arc::new(b.build()?))
}

/// How a copy ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Copied {
    /// Every byte arrived.
    Done { bytes: u64 },
    /// Stopped on purpose after `bytes` (an injected fault).
    Stopped { bytes: u64 },
}

/// The object key as a store path.
pub fn object_path(key: &str) -> Result<ObjectPath> {
    ObjectPath::from_url_path(key).map_err(|e| Error::S3Url {
        url: key.to_string(),
        reason: e.to_string(),
    })
}

/// Size of the object.
pub async fn size(store: &dyn ObjectStore, key: &str) -> Result<u64> {
    Ok(store.head(&object_path(key)?).await?.size)
}

/// Copies the object into `dest`, no faster than `bytes_per_sec`, publishing
/// `(done, total)` on `progress`; stops early once `stop_at_percent` of the bytes are done.
///
/// Errors: S3 and file errors.
pub async fn copy(
    store: &dyn ObjectStore,
    key: &str,
    dest: &Path,
    bytes_per_sec: f64,
    stop_at_percent: Option<f64>,
    progress: &watch::Sender<(u64, u64)>,
) -> Result<Copied> {
    let got = store.get(&object_path(key)?).await?;
    let total = got.meta.size;
    let stop_at = stop_at_percent.map(|p| ((total as f64) * p / 100.0).floor() as u64);
    let _ = progress.send((0, total));
    let mut file = tokio::fs::File::create(dest)
        .await
        .map_err(|e| Error::io(dest, e))?;
    let mut stream = got.into_stream();
    let started = Instant::now();
    let mut done: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let mut chunk = chunk?;
        if let Some(limit) = stop_at {
            let room = limit.saturating_sub(done);
            if (chunk.len() as u64) >= room {
                chunk.truncate(usize::try_from(room).unwrap_or(usize::MAX));
                file.write_all(&chunk)
                    .await
                    .map_err(|e| Error::io(dest, e))?;
                done += chunk.len() as u64;
                file.flush().await.map_err(|e| Error::io(dest, e))?;
                let _ = progress.send((done, total));
                return Ok(Copied::Stopped { bytes: done });
            }
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| Error::io(dest, e))?;
        done += chunk.len() as u64;
        let _ = progress.send((done, total));
        let due = Duration::from_secs_f64(done as f64 / bytes_per_sec.max(1.0));
        let spent = started.elapsed();
        if due > spent {
            tokio::time::sleep(due - spent).await;
        }
    }
    file.flush().await.map_err(|e| Error::io(dest, e))?;
    file.sync_all().await.map_err(|e| Error::io(dest, e))?;
    Ok(Copied::Done { bytes: done })
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn splits_path_style_urls() {
        assert_eq!(
            parse_url("http://127.0.0.1:9000/staging/ns/vm/disk-0.img").unwrap(),
            S3Location {
                endpoint: "http://127.0.0.1:9000".into(),
                bucket: "staging".into(),
                key: "ns/vm/disk-0.img".into()
            }
        );
        assert_eq!(parse_url("https://s3.example/b/k?x=1").unwrap().key, "k");
    }

    #[test]
    fn rejects_urls_it_cannot_serve() {
        for (url, why) in [
            ("s3://bucket/key", "path-style"),
            ("http://host/bucket", "no object key"),
            ("http://host", "no bucket"),
            ("http:///b/k", "no host"),
            ("host/b/k", "no scheme"),
            ("http://host//k", "empty bucket"),
        ] {
            let e = parse_url(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn hex_is_lower_case_and_padded() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        let d = ring::digest::digest(&ring::digest::SHA256, b"abc");
        assert_eq!(
            hex(d.as_ref()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
