//! Multipart uploads, completed without copying the bytes again.
//!
//! ```text
//! ROOT/.ferry-s3/uploads/ID/upload.json   bucket, key, metadata, owner, when it began
//! ROOT/.ferry-s3/uploads/ID/slot          the slot size: the first part's length
//! ROOT/.ferry-s3/uploads/ID/data          the "slab": part N at offset (N-1) × slot
//! ROOT/.ferry-s3/uploads/ID/part-N.json   a finished part: size, MD5, where its bytes are
//! ROOT/.ferry-s3/uploads/ID/part-N.data   a part longer than the slot (kept on its own)
//! ```
//!
//! Why a slab: ext4 cannot share blocks between files (no reflink), so a server that keeps parts
//! as separate files must copy every byte once more to complete (s3s-fs also reads and hashes
//! them again: the bound of issue 13's benchmark). Clients upload equal parts but the last
//! (S3 requires ≥ 5 MiB but the last; ferry sends 16 MiB parts), so writing part N where it will
//! sit in the object lets completion be a truncate and a rename. Anything else (parts of other
//! sizes, a subset of the parts, gaps) is still completed correctly, by copying.
//!
//! S3's rules kept here: an unknown or finished upload is `NoSuchUpload` (404); parts listed out
//! of order are `InvalidPartOrder`; a part not uploaded, or with another ETag, is `InvalidPart`;
//! any part but the last under 5 MiB is `EntityTooSmall`. Stricter than S3 in one place: a part
//! upload that fails midway forgets the part number (its slot may hold half-written bytes), so a
//! completion naming it fails with `InvalidPart` where S3 would use the earlier copy.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3s::{S3Error, s3_error};
use serde::{Deserialize, Serialize};

use crate::store::{ObjectMeta, internal, multipart_etag};

/// The smallest part S3 accepts but for the last.
pub const MIN_PART: u64 = 5 << 20;

/// An open upload as recorded when it began.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UploadInfo {
    pub bucket: String,
    pub key: String,
    /// Content type and user metadata for the object (its ETag is set at completion).
    pub meta: ObjectMeta,
    pub owner: String,
    pub initiated_ms: u64,
}

impl UploadInfo {
    pub fn initiated(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.initiated_ms)
    }
}

/// Where a part's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Place {
    /// In the slab, at this offset.
    Slab { offset: u64 },
    /// In `part-N.data`.
    OwnFile,
}

/// A finished part.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartRecord {
    pub number: i32,
    pub size: u64,
    pub md5: [u8; 16],
    pub place: Place,
    pub modified_ms: u64,
}

/// Where to write an incoming part.
#[derive(Debug)]
pub struct Target {
    pub path: PathBuf,
    pub offset: u64,
    pub place: Place,
}

/// State that lives only while the server runs: the slot size (also on disk) and one lock per
/// part number, so that two uploads of the same part do not interleave their bytes.
#[derive(Debug, Default)]
struct Live {
    slot: Mutex<Option<u64>>,
    parts: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<()>>>>,
}

/// Every open upload.
#[derive(Debug)]
pub struct Uploads {
    dir: PathBuf,
    live: Mutex<HashMap<String, Arc<Live>>>,
}

impl Uploads {
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            live: Mutex::default(),
        }
    }

    fn upload_dir(&self, id: &str) -> Result<PathBuf, S3Error> {
        // Ids are ours (UUIDs): anything else cannot name an upload, and must not name a path.
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(no_such_upload());
        }
        Ok(self.dir.join(id))
    }

    fn live(&self, id: &str) -> Arc<Live> {
        let mut map = self.live.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(id.to_owned()).or_default().clone()
    }

    /// Begins an upload; returns its id.
    pub fn create(&self, info: &UploadInfo) -> Result<String, S3Error> {
        let id = uuid::Uuid::new_v4().to_string();
        let dir = self.dir.join(&id);
        std::fs::create_dir(&dir).map_err(internal)?;
        write_json(&dir.join("upload.json"), info).map_err(internal)?;
        Ok(id)
    }

    /// The upload `id` of `bucket`/`key`, or `NoSuchUpload`.
    pub fn get(&self, id: &str, bucket: &str, key: &str) -> Result<UploadInfo, S3Error> {
        let info = self.info(id)?;
        if info.bucket != bucket || info.key != key {
            return Err(no_such_upload());
        }
        Ok(info)
    }

    fn info(&self, id: &str) -> Result<UploadInfo, S3Error> {
        let path = self.upload_dir(id)?.join("upload.json");
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(internal),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(no_such_upload()),
            Err(e) => Err(internal(e)),
        }
    }

    /// Every open upload of `bucket` whose key starts with `prefix`, by key then start time.
    pub fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<(String, UploadInfo)>, S3Error> {
        let mut out = vec![];
        for e in std::fs::read_dir(&self.dir).map_err(internal)? {
            let id = e
                .map_err(internal)?
                .file_name()
                .to_string_lossy()
                .into_owned();
            match self.info(&id) {
                Ok(info) if info.bucket == bucket && info.key.starts_with(prefix) => {
                    out.push((id, info));
                }
                // Finished or aborted between the listing and the read.
                Ok(_) | Err(_) => {}
            }
        }
        out.sort_by(|a, b| (&a.1.key, a.1.initiated_ms).cmp(&(&b.1.key, b.1.initiated_ms)));
        Ok(out)
    }

    /// The lock a part upload holds while it writes (and forgets, then records) part `n`.
    pub fn part_lock(&self, id: &str, n: i32) -> Arc<tokio::sync::Mutex<()>> {
        let live = self.live(id);
        let mut parts = live.parts.lock().unwrap_or_else(|p| p.into_inner());
        parts.entry(n).or_default().clone()
    }

    /// Where part `n` of `len` bytes goes; the first part to arrive fixes the slot size.
    pub fn target(&self, id: &str, n: i32, len: u64) -> Result<Target, S3Error> {
        let dir = self.upload_dir(id)?;
        let live = self.live(id);
        let slot = {
            let mut slot = live.slot.lock().unwrap_or_else(|p| p.into_inner());
            match *slot {
                Some(s) => s,
                None => {
                    let path = dir.join("slot");
                    let s = match std::fs::read_to_string(&path) {
                        // After a restart of the server: the slot chosen before.
                        Ok(s) => s.trim().parse().map_err(internal)?,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            std::fs::write(&path, len.to_string()).map_err(|e| match e.kind() {
                                io::ErrorKind::NotFound => no_such_upload(),
                                _ => internal(e),
                            })?;
                            len
                        }
                        Err(e) => return Err(internal(e)),
                    };
                    *slot = Some(s);
                    s
                }
            }
        };
        let number = u64::try_from(n - 1).map_err(|_| bad_part_number())?;
        Ok(if len <= slot && slot > 0 {
            Target {
                path: dir.join("data"),
                offset: number * slot,
                place: Place::Slab {
                    offset: number * slot,
                },
            }
        } else {
            Target {
                path: dir.join(format!("part-{n}.data")),
                offset: 0,
                place: Place::OwnFile,
            }
        })
    }

    /// Forgets part `n` before its bytes are overwritten.
    pub fn forget_part(&self, id: &str, n: i32) -> Result<(), S3Error> {
        match std::fs::remove_file(self.upload_dir(id)?.join(format!("part-{n}.json"))) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(internal(e)),
        }
    }

    /// Records a finished part; `NoSuchUpload` when the upload ended meanwhile.
    pub fn record_part(&self, id: &str, rec: &PartRecord) -> Result<(), S3Error> {
        let dir = self.upload_dir(id)?;
        if !dir.join("upload.json").exists() {
            return Err(no_such_upload());
        }
        write_json(&dir.join(format!("part-{}.json", rec.number)), rec).map_err(internal)
    }

    /// Every finished part, by number.
    pub fn parts(&self, id: &str) -> Result<Vec<PartRecord>, S3Error> {
        let dir = self.upload_dir(id)?;
        let mut out = vec![];
        for e in std::fs::read_dir(&dir).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => no_such_upload(),
            _ => internal(e),
        })? {
            let name = e
                .map_err(internal)?
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.starts_with("part-") && name.ends_with(".json") {
                match std::fs::read(dir.join(&name)) {
                    Ok(b) => out.push(serde_json::from_slice(&b).map_err(internal)?),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(internal(e)),
                }
            }
        }
        out.sort_by_key(|p: &PartRecord| p.number);
        Ok(out)
    }

    /// Checks the client's list of parts against what was uploaded and puts the object's bytes
    /// together in one file; returns that file (for the caller to set metadata on and rename
    /// into place), the object's ETag and size. Blocking: call it off the async threads.
    pub fn assemble(
        &self,
        id: &str,
        listed: &[(i32, String)],
        tmp: &Path,
    ) -> Result<(PathBuf, String, u64), S3Error> {
        let dir = self.upload_dir(id)?;
        let have: HashMap<i32, PartRecord> =
            self.parts(id)?.into_iter().map(|p| (p.number, p)).collect();
        if listed.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "You must specify at least one part"
            ));
        }
        let mut chosen = Vec::with_capacity(listed.len());
        for (i, (n, etag)) in listed.iter().enumerate() {
            if i > 0 && *n <= listed[i - 1].0 {
                return Err(s3_error!(
                    InvalidPartOrder,
                    "The list of parts was not in ascending order."
                ));
            }
            let part = have
                .get(n)
                .filter(|p| crate::store::hex(&p.md5) == etag.trim_matches('"'))
                .ok_or_else(|| {
                    s3_error!(
                        InvalidPart,
                        "One or more of the specified parts could not be found (part {n})"
                    )
                })?;
            if i + 1 < listed.len() && part.size < MIN_PART {
                return Err(s3_error!(
                    EntityTooSmall,
                    "Your proposed upload is smaller than the minimum allowed object size (part {n})"
                ));
            }
            chosen.push(part.clone());
        }
        let size: u64 = chosen.iter().map(|p| p.size).sum();
        let etag = multipart_etag(&chosen.iter().map(|p| p.md5).collect::<Vec<_>>());
        let slab = dir.join("data");
        if in_place(&chosen) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&slab)
                .map_err(internal)?;
            f.set_len(size).map_err(internal)?;
            return Ok((slab, etag, size));
        }
        // Parts of other sizes, or not all of them: put them together by copying.
        let out = std::fs::File::create(tmp).map_err(internal)?;
        let mut at = 0u64;
        for p in &chosen {
            let (src, from) = match p.place {
                Place::Slab { offset } => (slab.clone(), offset),
                Place::OwnFile => (dir.join(format!("part-{}.data", p.number)), 0),
            };
            let src = std::fs::File::open(&src).map_err(internal)?;
            copy_range(&src, from, &out, at, p.size).map_err(internal)?;
            at += p.size;
        }
        Ok((tmp.to_owned(), etag, size))
    }

    /// Ends an upload: its directory goes. `NoSuchUpload` when there is none.
    pub fn remove(&self, id: &str) -> Result<(), S3Error> {
        let dir = self.upload_dir(id)?;
        // The upload stops existing for everyone first (a part arriving now is refused), then
        // its bytes go.
        match std::fs::remove_file(dir.join("upload.json")) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_such_upload()),
            Err(e) => return Err(internal(e)),
        }
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        // A part arriving at this moment may still add a file while the folder is emptied.
        let mut last = Ok(());
        for _ in 0..3 {
            last = match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                r => r,
            };
            if last.is_ok() {
                break;
            }
        }
        last.map_err(internal)
    }
}

/// Whether the chosen parts already sit in the slab as the object: parts 1..=k, each where its
/// number puts it, all but the last exactly one slot long.
fn in_place(parts: &[PartRecord]) -> bool {
    let Some(first) = parts.first() else {
        return false;
    };
    let slot = first.size;
    parts.iter().enumerate().all(|(i, p)| {
        let last = i + 1 == parts.len();
        p.number == i as i32 + 1
            && p.place
                == Place::Slab {
                    offset: i as u64 * slot,
                }
            && (p.size == slot || (last && p.size <= slot))
    })
}

fn copy_range(
    src: &std::fs::File,
    from: u64,
    dst: &std::fs::File,
    to: u64,
    len: u64,
) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        src.read_exact_at(&mut buf[..n], from + done)?;
        dst.write_all_at(&buf[..n], to + done)?;
        done += n as u64;
    }
    Ok(())
}

fn write_json(path: &Path, value: &impl Serialize) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(value).map_err(io::Error::other)?)?;
    std::fs::rename(&tmp, path)
}

pub fn no_such_upload() -> S3Error {
    s3_error!(
        NoSuchUpload,
        "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."
    )
}

pub fn bad_part_number() -> S3Error {
    s3_error!(
        InvalidArgument,
        "Part number must be an integer between 1 and 10000, inclusive"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use md5::{Digest, Md5};

    fn part(number: i32, size: u64, place: Place) -> PartRecord {
        PartRecord {
            number,
            size,
            md5: [0; 16],
            place,
            modified_ms: 0,
        }
    }

    #[test]
    fn equal_parts_in_their_slots_are_the_object_already() {
        let s = 8;
        let parts = [
            part(1, s, Place::Slab { offset: 0 }),
            part(2, s, Place::Slab { offset: s }),
            part(3, 3, Place::Slab { offset: 2 * s }),
        ];
        assert!(in_place(&parts));
        assert!(
            !in_place(&parts[1..]),
            "a completion without part 1 is copied"
        );
        let gap = [parts[0].clone(), parts[2].clone()];
        assert!(!in_place(&gap), "a gap is copied");
        let short_middle = [
            part(1, s, Place::Slab { offset: 0 }),
            part(2, 3, Place::Slab { offset: s }),
            part(3, 3, Place::Slab { offset: 2 * s }),
        ];
        assert!(!in_place(&short_middle), "only the last part may be short");
        let own = [
            part(1, s, Place::Slab { offset: 0 }),
            part(2, s, Place::OwnFile),
        ];
        assert!(!in_place(&own));
    }

    /// Parts written as the service writes them, then assembled; both ways give the bytes.
    #[test]
    fn uploads_assemble_in_place_or_by_copying_and_refuse_what_s3_refuses() {
        let root = std::env::temp_dir().join(format!("ferry-s3-mp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&root).unwrap();
        let ups = Uploads::new(root.clone());
        let info = UploadInfo {
            bucket: "b".into(),
            key: "k".into(),
            meta: ObjectMeta::default(),
            owner: "o".into(),
            initiated_ms: 0,
        };
        let put = |id: &str, n: i32, bytes: &[u8]| {
            let t = ups.target(id, n, bytes.len() as u64).unwrap();
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&t.path)
                .unwrap();
            f.write_all_at(bytes, t.offset).unwrap();
            let rec = PartRecord {
                number: n,
                size: bytes.len() as u64,
                md5: Md5::digest(bytes).into(),
                place: t.place,
                modified_ms: 0,
            };
            ups.record_part(id, &rec).unwrap();
            crate::store::hex(&rec.md5)
        };
        let a = vec![1u8; MIN_PART as usize];
        let b = vec![2u8; MIN_PART as usize];
        let c = vec![3u8; 100];

        // In order, equal parts: the slab is the object.
        let id = ups.create(&info).unwrap();
        let ea = put(&id, 1, &a);
        let ec = put(&id, 3, &c); // out of order, as parallel uploads arrive
        let eb = put(&id, 2, &b);
        let tmp = root.join("tmp1");
        let listed = vec![(1, ea.clone()), (2, eb.clone()), (3, format!("\"{ec}\""))];
        let (file, etag, size) = ups.assemble(&id, &listed, &tmp).unwrap();
        assert!(file.ends_with("data"), "completed in place");
        assert_eq!(size, (2 * MIN_PART + 100));
        assert_eq!(
            std::fs::read(&file).unwrap(),
            [a.clone(), b.clone(), c.clone()].concat()
        );
        assert!(etag.ends_with("-3"));
        ups.remove(&id).unwrap();
        assert_eq!(
            ups.remove(&id).unwrap_err().code(),
            &s3s::S3ErrorCode::NoSuchUpload
        );
        assert_eq!(
            ups.get(&id, "b", "k").unwrap_err().code(),
            &s3s::S3ErrorCode::NoSuchUpload
        );

        // The short part first (it fixes a small slot): the rest go to their own files.
        let id = ups.create(&info).unwrap();
        let ec = put(&id, 3, &c);
        let ea = put(&id, 1, &a);
        let eb = put(&id, 2, &b);
        let tmp = root.join("tmp2");
        let listed = vec![(1, ea.clone()), (2, eb.clone()), (3, ec.clone())];
        let (file, _, _) = ups.assemble(&id, &listed, &tmp).unwrap();
        assert_eq!(file, tmp, "completed by copying");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            [a.clone(), b.clone(), c.clone()].concat()
        );

        let code = |l: Vec<(i32, String)>| ups.assemble(&id, &l, &tmp).unwrap_err().code().clone();
        assert_eq!(
            code(vec![(2, eb.clone()), (1, ea.clone())]),
            s3s::S3ErrorCode::InvalidPartOrder
        );
        assert_eq!(code(vec![(1, eb.clone())]), s3s::S3ErrorCode::InvalidPart);
        assert_eq!(code(vec![(4, ec.clone())]), s3s::S3ErrorCode::InvalidPart);
        assert_eq!(
            code(vec![(3, ec.clone()), (4, ec.clone())]),
            s3s::S3ErrorCode::EntityTooSmall
        );
        assert_eq!(code(vec![]), s3s::S3ErrorCode::MalformedXML);
        // A gap: parts 1 and 3 only.
        let (file, _, size) = ups.assemble(&id, &[(1, ea), (3, ec)], &tmp).unwrap();
        assert_eq!(size, MIN_PART + 100);
        assert_eq!(std::fs::read(&file).unwrap(), [a, c].concat());
        ups.remove(&id).unwrap();
        assert_eq!(ups.list("b", "").unwrap().len(), 0);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
