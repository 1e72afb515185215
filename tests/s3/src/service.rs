//! The S3 operations the lab serves, on [`Store`] and [`Uploads`].
//!
//! What ferry, ferry-sim and the tests use is here, with AWS's errors: buckets (create, head,
//! delete, list), objects (PUT with user metadata and Content-MD5, GET with ranges, HEAD,
//! DELETE, multi-object DELETE, ListObjectsV2 with prefix/delimiter/paging) and multipart
//! uploads (create, upload part, complete, abort, list parts, list uploads). Everything else is
//! s3s's `NotImplemented`; so are request features this lab does not honour (conditional
//! requests, `x-amz-checksum-*`, URL-encoded listings), by name, rather than ignored.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::multipart::{PartRecord, UploadInfo, Uploads, bad_part_number};
use crate::store::{ObjectInfo, ObjectMeta, Store, hex, internal, write_meta};

/// Bytes gathered from the request body before one blocking write (and MD5) of them.
const WRITE_BATCH: usize = 4 << 20;
/// Bytes read from a file per chunk of a GET's body.
const READ_CHUNK: usize = 1 << 20;

/// The lab's S3 backend.
#[derive(Debug, Clone)]
pub struct LabS3 {
    store: Store,
    uploads: Arc<Uploads>,
}

impl LabS3 {
    pub fn new(store: Store) -> Self {
        let uploads = Arc::new(Uploads::new(store.uploads_dir()));
        Self { store, uploads }
    }
}

/// Streams a request body into `file` at `offset` (in batches, off the async threads) with its
/// MD5; checks the length the client declared.
async fn write_body(
    body: Option<StreamingBlob>,
    file: std::fs::File,
    offset: u64,
    declared: Option<i64>,
) -> S3Result<(u64, [u8; 16])> {
    let mut body = body.ok_or_else(|| s3_error!(IncompleteBody))?;
    let file = Arc::new(file);
    let mut md5 = Md5::new();
    let mut at = offset;
    let mut batch: Vec<Bytes> = vec![];
    let mut batched = 0usize;
    loop {
        let chunk = body.next().await;
        let end = chunk.is_none();
        if let Some(c) = chunk {
            let c = c.map_err(|e| s3_error!(IncompleteBody, "reading the body: {e}"))?;
            batched += c.len();
            batch.push(c);
        }
        if batched >= WRITE_BATCH || (end && batched > 0) {
            let f = file.clone();
            let chunks = std::mem::take(&mut batch);
            let start = at;
            md5 = tokio::task::spawn_blocking(move || -> io::Result<Md5> {
                let mut pos = start;
                for c in &chunks {
                    md5.update(c);
                    f.write_all_at(c, pos)?;
                    pos += c.len() as u64;
                }
                Ok(md5)
            })
            .await
            .map_err(internal)?
            .map_err(internal)?;
            at += batched as u64;
            batched = 0;
        }
        if end {
            break;
        }
    }
    let size = at - offset;
    if let Some(d) = declared
        && u64::try_from(d).ok() != Some(size)
    {
        return Err(s3_error!(
            IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header ({d}, got {size})"
        ));
    }
    Ok((size, md5.finalize().into()))
}

/// Content-MD5, when sent, must be the body's (AWS answers `BadDigest` otherwise).
fn check_content_md5(sent: Option<&str>, md5: &[u8; 16]) -> S3Result<()> {
    match sent {
        Some(s) if s != base64::engine::general_purpose::STANDARD.encode(md5) => Err(s3_error!(
            BadDigest,
            "The Content-MD5 you specified did not match what we received."
        )),
        _ => Ok(()),
    }
}

/// Refuses what this lab does not implement instead of ignoring it.
fn unsupported(what: &str, present: bool) -> S3Result<()> {
    if present {
        return Err(s3_error!(
            NotImplemented,
            "the lab's S3 does not implement {what}"
        ));
    }
    Ok(())
}

/// Whether a request carries any `x-amz-checksum-*` value (PutObject and UploadPart name them alike).
macro_rules! checksums {
    ($i:expr) => {
        $i.checksum_crc32.is_some()
            || $i.checksum_crc32c.is_some()
            || $i.checksum_crc64nvme.is_some()
            || $i.checksum_sha1.is_some()
            || $i.checksum_sha256.is_some()
    };
}

/// Whether a GET or HEAD is conditional (on its ETag or its time): same field names on both.
macro_rules! conditions {
    ($i:expr) => {
        $i.if_match.is_some()
            || $i.if_none_match.is_some()
            || $i.if_modified_since.is_some()
            || $i.if_unmodified_since.is_some()
    };
}

/// What GET and HEAD both say of an object besides its size.
struct Described {
    content_type: Option<ContentType>,
    e_tag: Option<ETag>,
    last_modified: Option<LastModified>,
    metadata: Option<Metadata>,
}

fn described(info: &ObjectInfo) -> Described {
    Described {
        content_type: info
            .meta
            .content_type
            .as_deref()
            .and_then(|c| c.parse().ok()),
        e_tag: etag(&info.meta.etag),
        last_modified: Some(info.modified.into()),
        metadata: metadata(&info.meta.user),
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn metadata(user: &BTreeMap<String, String>) -> Option<Metadata> {
    (!user.is_empty()).then(|| user.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn user_meta(m: Option<Metadata>) -> BTreeMap<String, String> {
    m.into_iter()
        .flatten()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect()
}

fn content_type(c: Option<ContentType>) -> Option<String> {
    c.map(|c| c.to_string())
}

fn etag(s: &str) -> Option<ETag> {
    (!s.is_empty()).then(|| ETag::Strong(s.to_owned()))
}

fn listed(o: &ObjectInfo) -> Object {
    Object {
        key: Some(o.key.clone()),
        size: Some(o.size as i64),
        e_tag: etag(&o.meta.etag),
        last_modified: Some(o.modified.into()),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        ..Default::default()
    }
}

/// One page of a listing: keys and common prefixes in key order, resuming after `after`.
fn page(
    objects: &[ObjectInfo],
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> (Vec<Object>, Vec<String>, Option<String>) {
    let mut keys = vec![];
    let mut prefixes: Vec<String> = vec![];
    let mut last: Option<String> = None;
    for o in objects {
        let group = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
            o.key[prefix.len()..]
                .find(d)
                .map(|i| o.key[..prefix.len() + i + d.len()].to_owned())
        });
        let item = group.clone().unwrap_or_else(|| o.key.clone());
        if let Some(a) = after {
            // Resuming: skip what the last page returned (a common prefix covers its keys).
            if item.as_str() <= a {
                continue;
            }
        }
        if group.is_some() && prefixes.last() == group.as_ref() {
            continue;
        }
        if keys.len() + prefixes.len() == max {
            return (keys, prefixes, last);
        }
        match group {
            Some(g) => prefixes.push(g),
            None => keys.push(listed(o)),
        }
        last = Some(item);
    }
    (keys, prefixes, None)
}

#[async_trait::async_trait]
impl S3 for LabS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let dir = self.store.bucket_path(&req.input.bucket)?;
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(S3Response::new(CreateBucketOutput {
                location: Some(format!("/{}", req.input.bucket)),
            })),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(s3_error!(
                BucketAlreadyOwnedByYou,
                "Your previous request to create the named bucket succeeded and you already own it."
            )),
            Err(e) => Err(internal(e)),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.store.bucket(&req.input.bucket)?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let dir = self.store.bucket(&req.input.bucket)?;
        if !self.store.list(&req.input.bucket, "")?.is_empty()
            || !self.uploads.list(&req.input.bucket, "")?.is_empty()
        {
            return Err(s3_error!(
                BucketNotEmpty,
                "The bucket you tried to delete is not empty"
            ));
        }
        std::fs::remove_dir_all(dir).map_err(internal)?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let buckets = self
            .store
            .buckets()
            .map_err(internal)?
            .into_iter()
            .map(|(name, t)| Bucket {
                name: Some(name),
                creation_date: Some(t.into()),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.store.bucket(&req.input.bucket)?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let i = req.input;
        unsupported(
            "conditional PUT",
            i.if_match.is_some() || i.if_none_match.is_some(),
        )?;
        unsupported("x-amz-checksum-*", checksums!(i))?;
        self.store.object_path(&i.bucket, &i.key)?;
        let tmp = self.store.tmp_path();
        let file = std::fs::File::create(&tmp).map_err(internal)?;
        let meta_file = file.try_clone().map_err(internal)?;
        let written = write_body(i.body, file, 0, i.content_length).await;
        let result = written.and_then(|(_, md5)| {
            check_content_md5(i.content_md5.as_deref(), &md5)?;
            let meta = ObjectMeta {
                etag: hex(&md5),
                content_type: content_type(i.content_type),
                user: user_meta(i.metadata),
            };
            write_meta(&meta_file, &meta).map_err(internal)?;
            self.store.publish(&tmp, &i.bucket, &i.key)?;
            Ok(meta.etag)
        });
        match result {
            Ok(e) => Ok(S3Response::new(PutObjectOutput {
                e_tag: etag(&e),
                ..Default::default()
            })),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let i = req.input;
        unsupported("conditional GET", conditions!(i))?;
        unsupported("GET of one part", i.part_number.is_some())?;
        let (file, info) = self.store.open_object(&i.bucket, &i.key)?;
        let range =
            match &i.range {
                Some(r) => Some(r.check(info.size).map_err(|_| {
                    s3_error!(InvalidRange, "The requested range is not satisfiable")
                })?),
                None => None,
            };
        let (start, end) = range.clone().map_or((0, info.size), |r| (r.start, r.end));
        // The bytes come from the very file the size and metadata were read from.
        let mut file = tokio::fs::File::from_std(file);
        file.seek(io::SeekFrom::Start(start))
            .await
            .map_err(internal)?;
        let body = tokio_util::io::ReaderStream::with_capacity(file.take(end - start), READ_CHUNK);
        let d = described(&info);
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::wrap(body)),
            content_length: Some((end - start) as i64),
            content_range: range.map(|r| format!("bytes {}-{}/{}", r.start, r.end - 1, info.size)),
            accept_ranges: Some("bytes".to_owned()),
            content_type: d.content_type,
            e_tag: d.e_tag,
            last_modified: d.last_modified,
            metadata: d.metadata,
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let i = req.input;
        unsupported("conditional HEAD", conditions!(i))?;
        unsupported(
            "HEAD of a range or part",
            i.range.is_some() || i.part_number.is_some(),
        )?;
        let info = self.store.stat(&i.bucket, &i.key)?;
        let d = described(&info);
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(info.size as i64),
            accept_ranges: Some("bytes".to_owned()),
            content_type: d.content_type,
            e_tag: d.e_tag,
            last_modified: d.last_modified,
            metadata: d.metadata,
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let i = req.input;
        unsupported(
            "conditional DELETE",
            i.if_match.is_some()
                || i.if_match_size.is_some()
                || i.if_match_last_modified_time.is_some(),
        )?;
        self.store.delete(&i.bucket, &i.key)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let i = req.input;
        self.store.bucket(&i.bucket)?;
        let mut deleted = vec![];
        let mut errors = vec![];
        for o in i.delete.objects {
            match self.store.delete(&i.bucket, &o.key) {
                Ok(()) => deleted.push(DeletedObject {
                    key: Some(o.key),
                    ..Default::default()
                }),
                Err(e) => errors.push(Error {
                    key: Some(o.key),
                    code: Some(e.code().as_str().to_owned()),
                    message: e.message().map(str::to_owned),
                    ..Default::default()
                }),
            }
        }
        let quiet = i.delete.quiet.unwrap_or(false);
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!quiet).then_some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let i = req.input;
        unsupported("encoding-type in listings", i.encoding_type.is_some())?;
        let prefix = i.prefix.clone().unwrap_or_default();
        let objects = self.store.list(&i.bucket, &prefix)?;
        let max = i.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
        let after = i.continuation_token.as_deref().or(i.start_after.as_deref());
        let (keys, prefixes, next) = page(&objects, &prefix, i.delimiter.as_deref(), after, max);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: i.prefix,
            delimiter: i.delimiter,
            max_keys: Some(max as i32),
            key_count: Some((keys.len() + prefixes.len()) as i32),
            continuation_token: i.continuation_token,
            start_after: i.start_after,
            is_truncated: Some(next.is_some()),
            next_continuation_token: next,
            contents: Some(keys),
            common_prefixes: Some(
                prefixes
                    .into_iter()
                    .map(|p| CommonPrefix { prefix: Some(p) })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let owner = req
            .credentials
            .as_ref()
            .map(|c| c.access_key.clone())
            .unwrap_or_default();
        let i = req.input;
        unsupported("x-amz-checksum-algorithm", i.checksum_algorithm.is_some())?;
        self.store.object_path(&i.bucket, &i.key)?;
        let info = UploadInfo {
            bucket: i.bucket.clone(),
            key: i.key.clone(),
            meta: ObjectMeta {
                etag: String::new(),
                content_type: content_type(i.content_type),
                user: user_meta(i.metadata),
            },
            owner,
            initiated_ms: millis(SystemTime::now()),
        };
        let id = self.uploads.create(&info)?;
        tracing::info!(bucket = %i.bucket, key = %i.key, upload = %id, "multipart upload created");
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let i = req.input;
        unsupported("x-amz-checksum-*", checksums!(i))?;
        let n = i.part_number;
        if !(1..=10_000).contains(&n) {
            return Err(bad_part_number());
        }
        self.store.bucket(&i.bucket)?;
        self.uploads.get(&i.upload_id, &i.bucket, &i.key)?;
        let len = i
            .content_length
            .and_then(|l| u64::try_from(l).ok())
            .ok_or_else(|| {
                s3_error!(
                    MissingContentLength,
                    "You must provide the Content-Length HTTP header."
                )
            })?;
        if len > 5 << 30 {
            return Err(s3_error!(
                EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed size"
            ));
        }
        let lock = self.uploads.part_lock(&i.upload_id, n);
        let _held = lock.lock().await;
        let target = self.uploads.target(&i.upload_id, n, len)?;
        self.uploads.forget_part(&i.upload_id, n)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&target.path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => crate::multipart::no_such_upload(),
                _ => internal(e),
            })?;
        let (size, md5) = write_body(i.body, file, target.offset, Some(len as i64)).await?;
        check_content_md5(i.content_md5.as_deref(), &md5)?;
        self.uploads.record_part(
            &i.upload_id,
            &PartRecord {
                number: n,
                size,
                md5,
                place: target.place,
                modified_ms: millis(SystemTime::now()),
            },
        )?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: etag(&hex(&md5)),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = req.input;
        unsupported(
            "conditional completion",
            i.if_match.is_some() || i.if_none_match.is_some(),
        )?;
        self.store.bucket(&i.bucket)?;
        let info = self.uploads.get(&i.upload_id, &i.bucket, &i.key)?;
        let listed: Vec<(i32, String)> = i
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let n = p
                    .part_number
                    .ok_or_else(|| s3_error!(MalformedXML, "a part without its number"))?;
                let e = p.e_tag.map(ETag::into_value).unwrap_or_default();
                Ok((n, e))
            })
            .collect::<S3Result<_>>()?;
        let uploads = self.uploads.clone();
        let id = i.upload_id.clone();
        let tmp = self.store.tmp_path();
        let (file, e_tag, size) =
            tokio::task::spawn_blocking(move || uploads.assemble(&id, &listed, &tmp))
                .await
                .map_err(internal)??;
        let meta = ObjectMeta {
            etag: e_tag.clone(),
            ..info.meta
        };
        let f = std::fs::File::open(&file).map_err(internal)?;
        write_meta(&f, &meta).map_err(internal)?;
        self.store.publish(&file, &i.bucket, &i.key)?;
        self.uploads.remove(&i.upload_id)?;
        tracing::info!(bucket = %i.bucket, key = %i.key, upload = %i.upload_id, size, "multipart upload completed");
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            e_tag: etag(&e_tag),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let i = req.input;
        self.store.bucket(&i.bucket)?;
        self.uploads.get(&i.upload_id, &i.bucket, &i.key)?;
        self.uploads.remove(&i.upload_id)?;
        tracing::info!(bucket = %i.bucket, key = %i.key, upload = %i.upload_id, "multipart upload aborted");
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let i = req.input;
        self.store.bucket(&i.bucket)?;
        self.uploads.get(&i.upload_id, &i.bucket, &i.key)?;
        let max = i.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let after = i.part_number_marker.unwrap_or(0);
        let all: Vec<PartRecord> = self
            .uploads
            .parts(&i.upload_id)?
            .into_iter()
            .filter(|p| p.number > after)
            .collect();
        let truncated = all.len() > max;
        let parts: Vec<Part> = all
            .into_iter()
            .take(max)
            .map(|p| Part {
                part_number: Some(p.number),
                size: Some(p.size as i64),
                e_tag: etag(&hex(&p.md5)),
                last_modified: Some(
                    (UNIX_EPOCH + std::time::Duration::from_millis(p.modified_ms)).into(),
                ),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(i.upload_id),
            is_truncated: Some(truncated),
            next_part_number_marker: parts
                .last()
                .and_then(|p| p.part_number)
                .filter(|_| truncated),
            part_number_marker: i.part_number_marker,
            max_parts: Some(max as i32),
            parts: Some(parts),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let i = req.input;
        unsupported("delimiter in ListMultipartUploads", i.delimiter.is_some())?;
        unsupported("encoding-type in listings", i.encoding_type.is_some())?;
        unsupported(
            "paging of ListMultipartUploads",
            i.key_marker.is_some() || i.upload_id_marker.is_some(),
        )?;
        self.store.bucket(&i.bucket)?;
        let max = i.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let all = self
            .uploads
            .list(&i.bucket, i.prefix.as_deref().unwrap_or(""))?;
        let truncated = all.len() > max;
        let uploads: Vec<MultipartUpload> = all
            .into_iter()
            .take(max)
            .map(|(id, info)| MultipartUpload {
                key: Some(info.key.clone()),
                upload_id: Some(id),
                initiated: Some(info.initiated().into()),
                ..Default::default()
            })
            .collect();
        let last = uploads.last();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(i.bucket),
            prefix: i.prefix,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: last.and_then(|u| u.key.clone()).filter(|_| truncated),
            next_upload_id_marker: last.and_then(|u| u.upload_id.clone()).filter(|_| truncated),
            uploads: Some(uploads),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn obj(key: &str) -> ObjectInfo {
        ObjectInfo {
            key: key.to_owned(),
            size: 1,
            modified: UNIX_EPOCH,
            meta: ObjectMeta::default(),
        }
    }

    fn names(
        p: &(Vec<Object>, Vec<String>, Option<String>),
    ) -> (Vec<String>, Vec<String>, Option<String>) {
        (
            p.0.iter().map(|o| o.key.clone().unwrap()).collect(),
            p.1.clone(),
            p.2.clone(),
        )
    }

    #[test]
    fn listings_group_by_delimiter_and_page_without_repeating_or_losing_anything() {
        let all: Vec<ObjectInfo> = ["a/1", "a/2", "b", "c/x/1", "c/y", "d"].map(obj).to_vec();
        let (k, p, next) = names(&page(&all, "", Some("/"), None, 1000));
        assert_eq!(k, ["b", "d"]);
        assert_eq!(p, ["a/", "c/"]);
        assert_eq!(next, None);
        // Pages of two items each, following the continuation token.
        let mut after: Option<String> = None;
        let mut seen = vec![];
        loop {
            let (k, p, next) = names(&page(&all, "", Some("/"), after.as_deref(), 2));
            assert!(k.len() + p.len() <= 2);
            seen.extend(k);
            seen.extend(p);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        seen.sort();
        assert_eq!(seen, ["a/", "b", "c/", "d"]);
        // With a prefix: grouping starts after it.
        let under_c: Vec<ObjectInfo> = all
            .iter()
            .filter(|o| o.key.starts_with("c/"))
            .cloned()
            .collect();
        let (k, p, _) = names(&page(&under_c, "c/", Some("/"), None, 1000));
        assert_eq!(k, ["c/y"]);
        assert_eq!(p, ["c/x/"]);
        // No delimiter: every key, paged.
        let (k, _, next) = names(&page(&all, "", None, Some("b"), 2));
        assert_eq!(k, ["c/x/1", "c/y"]);
        assert_eq!(next.as_deref(), Some("c/y"));
    }

    #[test]
    fn a_wrong_content_md5_is_bad_digest() {
        let md5: [u8; 16] = Md5::digest(b"abc").into();
        let good = base64::engine::general_purpose::STANDARD.encode(md5);
        assert!(check_content_md5(Some(&good), &md5).is_ok());
        assert!(check_content_md5(None, &md5).is_ok());
        let e = check_content_md5(Some("AAAAAAAAAAAAAAAAAAAAAA=="), &md5).unwrap_err();
        assert_eq!(e.code(), &s3s::S3ErrorCode::BadDigest);
    }
}
