//! Where things live on disk, and the object metadata kept beside the bytes.
//!
//! ```text
//! ROOT/BUCKET/KEY                  an object: its bytes, as a plain file ('/' in keys = directories)
//!                                  and its metadata in the file's `user.ferry-s3` xattr
//! ROOT/.ferry-s3/tmp/ID            a PUT on its way (renamed into place when whole)
//! ROOT/.ferry-s3/uploads/ID/       an open multipart upload (see `multipart.rs`)
//! ```
//!
//! Objects are plain files so that the tests and the operator can look at a staged disk with any
//! tool; the metadata rides in an extended attribute set on the temporary file *before* the
//! rename, so an object and its metadata appear together or not at all (as S3 promises).
//! Bucket names cannot start with '.', so `.ferry-s3` never collides with a bucket.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use md5::{Digest, Md5};
use s3s::{S3Error, S3ErrorCode, s3_error};
use serde::{Deserialize, Serialize};

/// The extended attribute holding an object's [`ObjectMeta`].
const META_XATTR: &str = "user.ferry-s3";

/// What S3 returns about an object besides its bytes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Without quotes: the MD5 of a PUT object, `MD5(part MD5s)-N` of a multipart one (as AWS).
    pub etag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-*`), names lower-case.
    #[serde(default)]
    pub user: BTreeMap<String, String>,
}

/// An object as listed or read.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    pub modified: SystemTime,
    pub meta: ObjectMeta,
}

/// The data directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// Opens (and creates) the data directory's internal folders. PUTs cut off by an earlier
    /// run (a SIGKILL mid-body) left their temporary files: no request owns them now, so they go.
    /// Open multipart uploads stay (S3 keeps them until they are completed or aborted).
    pub fn open(root: PathBuf) -> io::Result<Self> {
        let s = Self { root };
        match std::fs::remove_dir_all(s.tmp_dir()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir_all(s.tmp_dir())?;
        std::fs::create_dir_all(s.uploads_dir())?;
        Ok(s)
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join(".ferry-s3").join("tmp")
    }

    pub fn uploads_dir(&self) -> PathBuf {
        self.root.join(".ferry-s3").join("uploads")
    }

    /// A fresh temporary file path (same file system as the objects, so renames are atomic).
    pub fn tmp_path(&self) -> PathBuf {
        self.tmp_dir().join(uuid::Uuid::new_v4().to_string())
    }

    /// The bucket's directory, if the bucket exists.
    pub fn bucket(&self, bucket: &str) -> Result<PathBuf, S3Error> {
        let dir = self.bucket_path(bucket)?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(s3_error!(
                NoSuchBucket,
                "The specified bucket does not exist"
            ))
        }
    }

    pub fn bucket_path(&self, bucket: &str) -> Result<PathBuf, S3Error> {
        if bucket.is_empty() || bucket.starts_with('.') || bucket.contains('/') {
            return Err(s3_error!(InvalidBucketName));
        }
        Ok(self.root.join(bucket))
    }

    /// Every bucket, by name.
    pub fn buckets(&self) -> io::Result<Vec<(String, SystemTime)>> {
        let mut out = vec![];
        for e in std::fs::read_dir(&self.root)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && e.file_type()?.is_dir() {
                out.push((name, e.metadata()?.modified()?));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The file of `key` in an existing bucket.
    pub fn object_path(&self, bucket: &str, key: &str) -> Result<PathBuf, S3Error> {
        Ok(self.bucket(bucket)?.join(check_key(key)?))
    }

    /// Opens an object and reads its size, time and metadata from that open file; `NoSuchKey`
    /// when it is not there. All three and the bytes read through the file are of one version:
    /// a PUT renames a new file into place, so reading the path twice (size, then bytes) could
    /// give the old version's size with the new version's bytes — a torn object, which S3 never
    /// serves.
    pub fn open_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(std::fs::File, ObjectInfo), S3Error> {
        let path = self.object_path(bucket, key)?;
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_such_key()),
            Err(e) => return Err(internal(e)),
        };
        let md = file.metadata().map_err(internal)?;
        if !md.is_file() {
            return Err(no_such_key());
        }
        let info = ObjectInfo {
            key: key.to_owned(),
            size: md.len(),
            modified: md.modified().map_err(internal)?,
            meta: read_meta(&file).map_err(internal)?,
        };
        Ok((file, info))
    }

    /// An object's size, time and metadata (see [`Store::open_object`]).
    pub fn stat(&self, bucket: &str, key: &str) -> Result<ObjectInfo, S3Error> {
        self.open_object(bucket, key).map(|(_, info)| info)
    }

    /// Moves a finished temporary file (metadata already set on it) into place as `key`.
    pub fn publish(&self, tmp: &Path, bucket: &str, key: &str) -> Result<(), S3Error> {
        let dest = self.object_path(bucket, key)?;
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                s3_error!(
                    e,
                    NotImplemented,
                    "the lab's S3 keeps objects as files: a prefix of {key:?} is itself an object"
                )
            })?;
        }
        if dest.is_dir() {
            return Err(s3_error!(
                NotImplemented,
                "the lab's S3 keeps objects as files: {key:?} is a prefix of other objects"
            ));
        }
        match std::fs::rename(tmp, &dest) {
            // A DELETE of the last object beside it removed the folder meanwhile: make it again.
            Err(e) if e.kind() == io::ErrorKind::NotFound && tmp.exists() => {
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent).map_err(internal)?;
                }
                std::fs::rename(tmp, &dest).map_err(internal)
            }
            r => r.map_err(internal),
        }
    }

    /// Deletes an object (absent is fine, as in S3) and the directories it leaves empty.
    pub fn delete(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        let bucket_dir = self.bucket(bucket)?;
        let path = bucket_dir.join(check_key(key)?);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => std::fs::remove_file(&path).map_err(internal)?,
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(internal(e)),
        }
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == bucket_dir || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    /// Every object whose key starts with `prefix`, sorted by key.
    pub fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>, S3Error> {
        let bucket_dir = self.bucket(bucket)?;
        // Only the directory the prefix names is walked (the part up to its last '/').
        let start = match prefix.rfind('/') {
            Some(i) => match check_key(&prefix[..i]) {
                Ok(rel) => bucket_dir.join(rel),
                Err(_) => return Ok(vec![]),
            },
            None => bucket_dir.clone(),
        };
        let mut out = vec![];
        walk(&bucket_dir, &start, prefix, &mut out).map_err(internal)?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

fn walk(bucket_dir: &Path, dir: &Path, prefix: &str, out: &mut Vec<ObjectInfo>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        let path = e.path();
        let Some(rel) = path
            .strip_prefix(bucket_dir)
            .ok()
            .and_then(|r| r.to_str())
            .map(str::to_owned)
        else {
            continue;
        };
        let ft = e.file_type()?;
        if ft.is_dir() {
            let as_prefix = format!("{rel}/");
            if as_prefix.starts_with(prefix) || prefix.starts_with(&as_prefix) {
                walk(bucket_dir, &path, prefix, out)?;
            }
        } else if ft.is_file() && rel.starts_with(prefix) {
            // Size and metadata of one version, as `Store::open_object` reads them.
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                // Deleted since the directory was read: not listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let md = file.metadata()?;
            out.push(ObjectInfo {
                key: rel,
                size: md.len(),
                modified: md.modified()?,
                meta: read_meta(&file)?,
            });
        }
    }
    Ok(())
}

/// A key as a relative path, or why this lab cannot store it as a file.
pub fn check_key(key: &str) -> Result<&Path, S3Error> {
    if key.is_empty() || key.len() > 1024 {
        return Err(s3_error!(KeyTooLongError, "keys are 1 to 1024 bytes"));
    }
    let bad = key.starts_with('/')
        || key.ends_with('/')
        || key.contains('\0')
        || key
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(s3_error!(
            NotImplemented,
            "the lab's S3 keeps objects as files and cannot store the key {key:?}"
        ));
    }
    Ok(Path::new(key))
}

pub fn write_meta(file: &std::fs::File, meta: &ObjectMeta) -> io::Result<()> {
    let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
    rustix::fs::fsetxattr(file, META_XATTR, &json, rustix::fs::XattrFlags::empty())?;
    Ok(())
}

fn read_meta(file: &std::fs::File) -> io::Result<ObjectMeta> {
    let mut buf = vec![0u8; 8192];
    match rustix::fs::fgetxattr(file, META_XATTR, &mut buf) {
        Ok(n) => serde_json::from_slice(&buf[..n]).map_err(io::Error::other),
        // A file put there by hand: no metadata, and an ETag S3 would not give it.
        Err(rustix::io::Errno::NODATA) => Ok(ObjectMeta::default()),
        Err(e) => Err(e.into()),
    }
}

/// Hex of an MD5 digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The ETag S3 gives a multipart object: the MD5 of the parts' MD5s, then `-` and their count.
pub fn multipart_etag(part_md5s: &[[u8; 16]]) -> String {
    let mut h = Md5::new();
    for m in part_md5s {
        h.update(m);
    }
    format!("{}-{}", hex(&h.finalize()), part_md5s.len())
}

pub fn no_such_key() -> S3Error {
    s3_error!(NoSuchKey, "The specified key does not exist.")
}

/// An I/O failure of the server itself: logged, answered as S3's InternalError.
pub fn internal(e: impl std::fmt::Display) -> S3Error {
    tracing::error!(error = %e, "internal error");
    S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_are_not_plain_relative_paths_are_refused_by_name() {
        for k in ["a/../b", "/a", "a//b", "a/", ".", "a/./b", ""] {
            assert!(check_key(k).is_err(), "{k:?}");
        }
        for k in [
            "a",
            "a/b.raw",
            ".ferry-bucket-probe",
            "e2e/ns/disk-0.raw.record.json",
        ] {
            assert_eq!(check_key(k).unwrap(), Path::new(k));
        }
    }

    #[test]
    fn a_multipart_etag_is_the_md5_of_the_part_md5s_with_the_count() {
        // Two parts "a" and "b": md5(md5("a") ++ md5("b")) - known from AWS's documented rule.
        let a: [u8; 16] = Md5::digest(b"a").into();
        let b: [u8; 16] = Md5::digest(b"b").into();
        let mut cat = a.to_vec();
        cat.extend_from_slice(&b);
        let want = format!("{}-2", hex(&Md5::digest(&cat)));
        assert_eq!(multipart_etag(&[a, b]), want);
    }

    #[test]
    fn objects_list_under_a_prefix_with_their_metadata_and_deletes_leave_no_empty_folders() {
        let root = std::env::temp_dir().join(format!("ferry-s3-store-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(root.join("b")).unwrap();
        let store = Store::open(root.clone()).unwrap();
        for (k, body) in [
            ("x/1", "one"),
            ("x/2", "two"),
            ("y/1", "three"),
            ("x1", "four"),
        ] {
            let tmp = store.tmp_path();
            let f = std::fs::File::create(&tmp).unwrap();
            std::io::Write::write_all(&mut &f, body.as_bytes()).unwrap();
            let meta = ObjectMeta {
                etag: hex(&Md5::digest(body.as_bytes())),
                content_type: None,
                user: [("k".to_owned(), k.to_owned())].into(),
            };
            write_meta(&f, &meta).unwrap();
            store.publish(&tmp, "b", k).unwrap();
        }
        let keys = |p: &str| -> Vec<String> {
            store
                .list("b", p)
                .unwrap()
                .into_iter()
                .map(|o| o.key)
                .collect()
        };
        assert_eq!(keys("x"), ["x/1", "x/2", "x1"]);
        assert_eq!(keys("x/"), ["x/1", "x/2"]);
        assert_eq!(keys("z/"), Vec::<String>::new());
        let info = store.stat("b", "y/1").unwrap();
        assert_eq!(info.size, 5);
        assert_eq!(info.meta.user["k"], "y/1");
        assert_eq!(info.meta.etag, hex(&Md5::digest(b"three")));
        store.delete("b", "y/1").unwrap();
        store.delete("b", "y/1").unwrap();
        assert!(!root.join("b/y").exists(), "the emptied folder is gone");
        assert_eq!(
            store.stat("b", "y/1").unwrap_err().code(),
            &S3ErrorCode::NoSuchKey
        );
        assert_eq!(
            store.stat("nope", "a").unwrap_err().code(),
            &S3ErrorCode::NoSuchBucket
        );
        // A PUT cut off by a killed server: its temporary file goes at the next start, the
        // objects and open uploads stay.
        std::fs::write(store.tmp_path(), b"half").unwrap();
        std::fs::create_dir(store.uploads_dir().join("u")).unwrap();
        let store = Store::open(root.clone()).unwrap();
        assert_eq!(std::fs::read_dir(store.tmp_dir()).unwrap().count(), 0);
        assert!(store.uploads_dir().join("u").is_dir());
        assert_eq!(store.stat("b", "x/1").unwrap().size, 3);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
