//! The upload of one image: parts arrive in order, are hashed in order (SHA-256 of the whole
//! image) and go up to S3 as a multipart upload, several parts at once. Memory is bounded by the
//! parts in flight (fetched ahead + being hashed + uploading), never by the image's size.
//!
//! The converter's record of the disk (see [`ferry_staging::DiskRecord`]) is kept on the way:
//! progress every [`RECORD_INTERVAL`], the upload's id as soon as it exists (so that a run killed
//! mid-upload can have its parts aborted by the next), `Staged` with the checksum only after S3
//! completed the object.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::task::JoinSet;

use super::error::Error;
use ferry_staging::{self as staging, DiskRecord, Multipart, RecordState, Staging};
use object_store::multipart::PartId;

/// How often the record is rewritten while a disk is converted.
pub const RECORD_INTERVAL: Duration = Duration::from_secs(2);
/// Smallest part (S3's floor is 5 MiB for all but the last).
pub const MIN_PART: u64 = 16 << 20;
/// S3 allows at most 10,000 parts; a margin is kept.
const MAX_PARTS: u64 = 9_000;

/// The part size for an image of `size` bytes: [`MIN_PART`], or larger (in MiB) when the image
/// would need more than 9,000 parts. Pure.
pub fn part_size(size: u64) -> u64 {
    let need = size.div_ceil(MAX_PARTS).div_ceil(1 << 20) << 20;
    need.max(MIN_PART)
}

/// Parts in flight for a part size (fetched ahead, and again uploading): enough to keep the
/// network busy, at most 64 MiB of them each way (but never fewer than 2). Pure.
pub fn parts_in_flight(part: u64) -> usize {
    usize::try_from((64u64 << 20) / part.max(1))
        .unwrap_or(2)
        .clamp(2, 8)
}

/// Progress of one disk, shared by whoever moves its bytes and the record writer.
#[derive(Debug)]
pub struct Progress {
    pub done: AtomicU64,
    pub total: AtomicU64,
    stage: Mutex<&'static str>,
    upload_id: Mutex<Option<String>>,
    /// Bytes sent to S3 for this disk.
    pub sent: AtomicU64,
}

impl Progress {
    pub fn new(total: u64) -> Arc<Self> {
        Arc::new(Self {
            done: AtomicU64::new(0),
            total: AtomicU64::new(total),
            stage: Mutex::new("reading"),
            upload_id: Mutex::new(None),
            sent: AtomicU64::new(0),
        })
    }

    pub fn set_stage(&self, stage: &'static str) {
        if let Ok(mut s) = self.stage.lock() {
            *s = stage;
        }
    }

    fn stage(&self) -> &'static str {
        self.stage.lock().map(|s| *s).unwrap_or("converting")
    }

    fn set_upload(&self, id: Option<String>) {
        if let Ok(mut u) = self.upload_id.lock() {
            *u = id;
        }
    }

    fn upload(&self) -> Option<String> {
        self.upload_id.lock().ok().and_then(|u| u.clone())
    }
}

/// Writes a disk's record now and then while it is converted.
pub struct RecordWriter {
    pub staging: Staging,
    pub key: String,
    pub base: DiskRecord,
    pub progress: Arc<Progress>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl RecordWriter {
    fn snapshot(&self, rate: Option<u64>) -> DiskRecord {
        let p = &self.progress;
        let mut r = self.base.clone();
        r.state = RecordState::Converting;
        r.stage = p.stage().to_owned();
        r.upload_id = p.upload();
        r.bytes_total = p.total.load(Ordering::Relaxed);
        r.bytes_done = p.done.load(Ordering::Relaxed).min(r.bytes_total);
        r.rate_bytes_per_second = rate;
        r.updated_unix_ms = now_ms();
        r
    }

    /// Writes the record as it stands.
    pub async fn write_now(&self) -> Result<(), staging::Error> {
        self.staging
            .put_record(&self.key, &self.snapshot(None))
            .await
    }

    /// Rewrites the record every [`RECORD_INTERVAL`] until the task is aborted. A failed write is
    /// logged and tried again at the next tick: progress is a convenience, the upload is not.
    pub async fn run(self: Arc<Self>) {
        let mut last = (Instant::now(), self.progress.done.load(Ordering::Relaxed));
        loop {
            tokio::time::sleep(RECORD_INTERVAL).await;
            let done = self.progress.done.load(Ordering::Relaxed);
            let secs = last.0.elapsed().as_secs_f64();
            let rate = (secs > 0.0).then(|| (done.saturating_sub(last.1) as f64 / secs) as u64);
            last = (Instant::now(), done);
            if let Err(e) = self
                .staging
                .put_record(&self.key, &self.snapshot(rate))
                .await
            {
                tracing::warn!(key = %self.key, error = %e, "progress record not written");
            }
        }
    }
}

/// What an upload produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uploaded {
    pub sha256: String,
    pub size: u64,
}

/// Uploads `parts` (in order, each exactly `part` bytes but the last) as the image `key` of
/// `size` bytes, hashing on the way; `progress.done` follows the bytes hashed.
///
/// Guarantees: the object appears only complete (multipart completion is atomic); on any error
/// the multipart upload is aborted; the upload's id is in the record before any part is sent.
///
/// Errors: the first failure of the parts stream, of S3, or a size other than announced.
pub async fn upload(
    staging: &Staging,
    key: &str,
    metadata: &BTreeMap<String, String>,
    size: u64,
    part: u64,
    parts: impl Stream<Item = Result<Bytes, Error>>,
    record: &RecordWriter,
) -> Result<Uploaded, Error> {
    let image = Image {
        staging,
        key,
        size,
        part,
    };
    let parts = std::pin::pin!(parts);
    if size <= part {
        // One PUT: the whole image is one part anyway.
        return image.put_whole(metadata, parts, &record.progress).await;
    }
    let up = staging
        .create_multipart(key, metadata)
        .await
        .map_err(image.s3("starting the multipart upload"))?;
    let progress = &record.progress;
    progress.set_upload(Some(up.id.clone()));
    progress.set_stage("uploading");
    match image.send_parts(&up, parts, record).await {
        Ok((ids, hash)) => {
            staging
                .complete_multipart(&up, ids)
                .await
                .map_err(image.s3("completing the multipart upload"))?;
            progress.set_upload(None);
            Ok(Uploaded {
                sha256: staging::hex(hash.finish().as_ref()),
                size,
            })
        }
        Err(e) => {
            if let Err(a) = staging.abort_multipart(key, &up.id).await {
                tracing::warn!(key, error = %a, "the failed upload could not be aborted");
            } else {
                progress.set_upload(None);
            }
            Err(e)
        }
    }
}

/// The image being uploaded: where it goes, how large it is announced, in parts of what size.
struct Image<'a> {
    staging: &'a Staging,
    key: &'a str,
    size: u64,
    part: u64,
}

impl Image<'_> {
    /// An S3 error while `context`, named by the image.
    fn s3(&self, context: &str) -> impl FnOnce(staging::Error) -> Error + use<> {
        let context = format!("{}: {context}", self.key);
        move |source| Error::Staging { context, source }
    }

    /// The image in one PUT, hashed whole.
    async fn put_whole(
        &self,
        metadata: &BTreeMap<String, String>,
        mut parts: Pin<&mut impl Stream<Item = Result<Bytes, Error>>>,
        progress: &Progress,
    ) -> Result<Uploaded, Error> {
        let (key, size) = (self.key, self.size);
        let mut body = bytes::BytesMut::new();
        while let Some(p) = parts.next().await {
            body.extend_from_slice(&p?);
        }
        let body = body.freeze();
        if body.len() as u64 != size {
            return Err(Error::Upload(format!(
                "{key}: {} bytes produced, {size} announced",
                body.len()
            )));
        }
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        hash.update(&body);
        progress.done.fetch_max(size, Ordering::Relaxed);
        self.staging
            .put_bytes(key, body, metadata)
            .await
            .map_err(self.s3("upload"))?;
        progress.sent.fetch_add(size, Ordering::Relaxed);
        Ok(Uploaded {
            sha256: staging::hex(hash.finish().as_ref()),
            size,
        })
    }

    /// Sends `parts` to the multipart upload `up`, several at once, once its id is recorded;
    /// returns the parts' ids in order and the hash of the whole image.
    async fn send_parts(
        &self,
        up: &Multipart,
        mut parts: Pin<&mut impl Stream<Item = Result<Bytes, Error>>>,
        record: &RecordWriter,
    ) -> Result<(Vec<PartId>, ring::digest::Context), Error> {
        let (key, size, part) = (self.key, self.size, self.part);
        let progress = &record.progress;
        record
            .write_now()
            .await
            .map_err(self.s3("recording the upload"))?;
        let in_flight = parts_in_flight(part);
        let mut uploads: JoinSet<Result<(usize, PartId), Error>> = JoinSet::new();
        let (to_hash, hasher) = hasher(in_flight, progress.clone());
        let mut ids = BTreeMap::new();
        let (mut index, mut seen) = (0usize, 0u64);
        while let Some(p) = parts.next().await {
            let p = p?;
            let n = p.len() as u64;
            seen += n;
            if seen > size || (n != part && seen != size) {
                return Err(Error::Upload(format!(
                    "{key}: part {index} of {n} bytes does not fit an image of {size} in parts of {part}"
                )));
            }
            while uploads.len() >= in_flight {
                if let Some(done) = uploads.join_next().await {
                    let (i, id) = done.map_err(|e| Error::Upload(e.to_string()))??;
                    ids.insert(i, id);
                }
            }
            uploads.spawn(self.put_part(up, index, p.clone(), progress.clone()));
            to_hash
                .send(p)
                .await
                .map_err(|_| Error::Upload("hashing stopped".into()))?;
            index += 1;
        }
        drop(to_hash);
        while let Some(done) = uploads.join_next().await {
            let (i, id) = done.map_err(|e| Error::Upload(e.to_string()))??;
            ids.insert(i, id);
        }
        if seen != size {
            return Err(Error::Upload(format!(
                "{key}: {seen} bytes produced, {size} announced"
            )));
        }
        let hash = hasher
            .await
            .map_err(|e| Error::Upload(format!("hashing: {e}")))?;
        Ok((ids.into_values().collect(), hash))
    }

    /// Part `i`, `body`, sent to `up`; counted in `progress.sent` once S3 has it.
    fn put_part(
        &self,
        up: &Multipart,
        i: usize,
        body: Bytes,
        progress: Arc<Progress>,
    ) -> impl Future<Output = Result<(usize, PartId), Error>> + Send + 'static + use<> {
        let (staging, up, key) = (self.staging.clone(), up.clone(), self.key.to_owned());
        let n = body.len() as u64;
        async move {
            let id = staging
                .put_part(&up, i, body)
                .await
                .map_err(|source| Error::Staging {
                    context: format!("{key}: part {i}"),
                    source,
                })?;
            progress.sent.fetch_add(n, Ordering::Relaxed);
            Ok((i, id))
        }
    }
}

/// The hash, on a thread of its own, in order, beside the uploads: a part goes up while it is
/// hashed, and no part waits for the hash of the one before it to be sent. `progress.done`
/// follows the bytes hashed.
fn hasher(
    in_flight: usize,
    progress: Arc<Progress>,
) -> (
    tokio::sync::mpsc::Sender<Bytes>,
    tokio::task::JoinHandle<ring::digest::Context>,
) {
    let (to_hash, mut hashing) = tokio::sync::mpsc::channel::<Bytes>(in_flight);
    let hasher = tokio::task::spawn_blocking(move || {
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        let mut done = 0;
        while let Some(p) = hashing.blocking_recv() {
            hash.update(&p);
            done += p.len() as u64;
            progress.done.fetch_max(done, Ordering::Relaxed);
        }
        hash
    });
    (to_hash, hasher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_stay_under_s3s_count_and_memory_stays_bounded() {
        assert_eq!(part_size(1 << 30), MIN_PART);
        assert_eq!(part_size(0), MIN_PART);
        let two_tib = 2u64 << 40;
        let p = part_size(two_tib);
        assert!(two_tib.div_ceil(p) <= 10_000, "{p}");
        assert_eq!(p % (1 << 20), 0, "whole MiB");
        assert_eq!(parts_in_flight(MIN_PART), 4);
        assert_eq!(parts_in_flight(p), 2, "big parts: fewer in flight");
        assert!(parts_in_flight(p) as u64 * p <= 2 * p.max(64 << 20));
    }
}
