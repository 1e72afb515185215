//! The converter's record of one disk, kept beside its image as `KEY.state.json`.
//!
//! It is the converter's only channel out: the converter has no Kubernetes API rights, but it
//! writes to staging anyway, and the controller reads staging with its own credentials. While a
//! disk is converted the record carries its progress and the id of its open multipart upload (so
//! that a later run, or a cleanup, can abort it); once the image is complete it carries the
//! image's SHA-256 and size. An image without a `Staged` record is never taken as complete.

use ferry_crds::DiskFormat;
use serde::{Deserialize, Serialize};

/// Where a disk stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RecordState {
    /// Being read, converted or uploaded.
    Converting,
    /// The image is complete: `sha256` and `size` describe it.
    Staged,
    /// The converter stopped on this disk; `error` says why.
    Failed,
}

/// The converter's record of one disk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskRecord {
    pub state: RecordState,
    /// Datastore path of the source disk.
    pub source_path: String,
    /// Output format, `raw` or `qcow2`.
    pub format: DiskFormat,
    /// What the converter is doing: `reading`, `converting`, `uploading`, `staged`.
    #[serde(default)]
    pub stage: String,
    /// The open multipart upload of the image, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_id: Option<String>,
    /// Work done and to do, in bytes (a two-pass conversion counts its disk twice).
    #[serde(default)]
    pub bytes_done: u64,
    #[serde(default)]
    pub bytes_total: u64,
    /// Recent rate of `bytes_done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_second: Option<u64>,
    /// SHA-256 of the image, lower-case hex (`Staged` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Size of the image in bytes (`Staged` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Virtual size of the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_size: Option<u64>,
    /// SHA-256 of a qcow2 image's raw contents, what an imported volume holds (the verification
    /// Job compares them); absent for a raw image, whose contents are the image (`sha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_sha256: Option<String>,
    /// Why the converter stopped (`Failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The converter's classification of `error` (`BadDisk`, `QemuImg`, …; `Failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the record was written, milliseconds since the Unix epoch.
    #[serde(default)]
    pub updated_unix_ms: u64,
    /// The uid of the conversion Job whose converter wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_uid: Option<String>,
}

impl DiskRecord {
    /// A fresh record of a disk about to be converted.
    pub fn converting(source_path: &str, format: DiskFormat) -> Self {
        Self {
            state: RecordState::Converting,
            source_path: source_path.to_owned(),
            format,
            stage: "reading".to_owned(),
            upload_id: None,
            bytes_done: 0,
            bytes_total: 0,
            rate_bytes_per_second: None,
            sha256: None,
            size: None,
            virtual_size: None,
            raw_sha256: None,
            error: None,
            reason: None,
            updated_unix_ms: 0,
            job_uid: None,
        }
    }

    /// Whether the record says the image of `source_path` in `format` is complete with a
    /// well-formed checksum of `image_size` bytes and of its raw contents.
    pub fn is_staged(&self, source_path: &str, format: DiskFormat, image_size: u64) -> bool {
        self.source_path == source_path && self.format == format && self.is_complete(image_size)
    }

    /// Whether the record says its image is complete with a well-formed checksum of
    /// `image_size` bytes and of its raw contents, whichever disk and format it is of.
    pub fn is_complete(&self, image_size: u64) -> bool {
        self.state == RecordState::Staged
            && self.size == Some(image_size)
            && self.sha256.as_deref().is_some_and(is_digest)
            && self.raw_contents_sha256().as_deref().is_some_and(is_digest)
    }

    /// SHA-256 of what an imported volume holds: the image's own for a raw image.
    pub fn raw_contents_sha256(&self) -> Option<String> {
        match self.format {
            DiskFormat::Raw => self.sha256.clone(),
            DiskFormat::Qcow2 => self.raw_sha256.clone(),
        }
    }
}

fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The key of the record of the image at `key`.
pub fn record_key(key: &str) -> String {
    format!("{key}.state.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_staged_record_of_the_same_disk_format_and_size_counts() {
        let mut r = DiskRecord::converting("[ds] a/a.vmdk", DiskFormat::Raw);
        assert!(
            !r.is_staged("[ds] a/a.vmdk", DiskFormat::Raw, 10),
            "converting"
        );
        r.state = RecordState::Staged;
        r.size = Some(10);
        r.sha256 = Some("ab".repeat(32));
        assert!(r.is_staged("[ds] a/a.vmdk", DiskFormat::Raw, 10));
        assert!(
            !r.is_staged("[ds] a/a.vmdk", DiskFormat::Qcow2, 10),
            "format"
        );
        assert!(!r.is_staged("[ds] b/b.vmdk", DiskFormat::Raw, 10), "source");
        assert!(
            !r.is_staged("[ds] a/a.vmdk", DiskFormat::Raw, 11),
            "image of another size"
        );
        r.sha256 = Some("xyz".into());
        assert!(
            !r.is_staged("[ds] a/a.vmdk", DiskFormat::Raw, 10),
            "bad checksum"
        );
        let mut q = DiskRecord::converting("[ds] a/a.vmdk", DiskFormat::Qcow2);
        q.state = RecordState::Staged;
        q.size = Some(10);
        q.sha256 = Some("ab".repeat(32));
        assert!(
            !q.is_staged("[ds] a/a.vmdk", DiskFormat::Qcow2, 10),
            "a qcow2 image without its raw contents' checksum is converted again"
        );
        q.raw_sha256 = Some("cd".repeat(32));
        assert!(q.is_staged("[ds] a/a.vmdk", DiskFormat::Qcow2, 10));
        assert_eq!(q.raw_contents_sha256(), Some("cd".repeat(32)));
    }

    #[test]
    fn records_are_camel_case_json_and_read_back() {
        let mut r = DiskRecord::converting("[ds] a/a.vmdk", DiskFormat::Qcow2);
        r.upload_id = Some("u-1".into());
        r.bytes_done = 5;
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["state"], "converting");
        assert_eq!(v["format"], "qcow2", "written by the same name as before");
        assert_eq!(v["uploadId"], "u-1");
        assert_eq!(v["bytesDone"], 5);
        assert!(v.get("sha256").is_none());
        let back: DiskRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        assert_eq!(record_key("p/disk-0.raw"), "p/disk-0.raw.state.json");
    }
}
