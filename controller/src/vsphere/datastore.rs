//! Datastore paths (`[ds] dir/file.vmdk`), the `/folder` HTTP file service that serves them
//! (read by byte ranges), and the allocated areas of a disk (`QueryChangedDiskAreas`).
//!
//! Ranges: vCenter's and ESXi's `/folder` service answers HTTP `Range` requests; virt-v2v's
//! `-it vddk`-less vCenter input reads a VM's `-flat.vmdk` exactly this way (nbdkit's curl
//! plugin over the `/folder` URL). Reading by ranges lets the converter fetch parts of a disk in
//! parallel and skip the areas the allocation map says hold nothing.

use std::fmt;

use bytes::{Bytes, BytesMut};
use reqwest::Url;
use reqwest::header::{CONTENT_RANGE, RANGE};
use vim_rs::mo;

use super::session::Session;
use super::{Error, Result};

/// A parsed datastore path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatastorePath {
    pub datastore: String,
    /// The path inside the datastore, `/`-separated, without a leading slash.
    pub path: String,
}

impl DatastorePath {
    /// Parses `[datastore] dir/file.vmdk`.
    ///
    /// Errors: [`Error::Invalid`] without the bracketed datastore name or without a file path.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = || {
            Error::Invalid(format!(
                "{text:?} is not a datastore path like \"[datastore] dir/file.vmdk\""
            ))
        };
        let rest = text.trim().strip_prefix('[').ok_or_else(invalid)?;
        let (ds, path) = rest.split_once(']').ok_or_else(invalid)?;
        let path = path.trim().trim_start_matches('/');
        if ds.is_empty() || path.is_empty() {
            return Err(invalid());
        }
        Ok(Self {
            datastore: ds.to_owned(),
            path: path.to_owned(),
        })
    }

    /// The last path component: the file name.
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// A sibling file in the same directory (a VMDK descriptor's extents are named relative to it).
    pub fn sibling(&self, file: &str) -> Self {
        let dir = self.path.rsplit_once('/').map(|(d, _)| d);
        let path = match dir {
            Some(d) => format!("{d}/{file}"),
            None => file.to_owned(),
        };
        Self {
            datastore: self.datastore.clone(),
            path,
        }
    }
}

impl fmt::Display for DatastorePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.datastore, self.path)
    }
}

/// `https://HOST[:PORT]/folder/<path>?dcPath=<datacenter>&dsName=<datastore>` for a datastore
/// file, on the host of the SDK URL `sdk`.
///
/// The `/folder` service needs the `vmware_soap_session` cookie of a logged-in session (or HTTP
/// Basic credentials); [`super::Session::download`] sends the cookie.
///
/// Errors: [`Error::Invalid`] for a malformed SDK URL or datastore path.
pub fn download_url(sdk: &str, datastore_path: &str, datacenter: &str) -> Result<Url> {
    let ds = DatastorePath::parse(datastore_path)?;
    let mut url = sdk_base(sdk)?;
    {
        let mut segments = url
            .path_segments_mut()
            .map_err(|_| Error::Invalid(format!("{sdk} cannot carry a path")))?;
        segments.clear().push("folder");
        for part in ds.path.split('/').filter(|p| !p.is_empty()) {
            segments.push(part);
        }
    }
    url.query_pairs_mut()
        .clear()
        .append_pair("dcPath", datacenter)
        .append_pair("dsName", &ds.datastore);
    Ok(url)
}

/// The SDK URL normalized: `https://HOST[:PORT]/sdk`. A bare host name is taken as `https://HOST`.
/// The one form every process reads a credentials Secret's `url` into
/// ([`ferry_crds::credentials::vsphere_sdk_url`]).
pub(crate) fn sdk_url(text: &str) -> Result<Url> {
    ferry_crds::credentials::vsphere_sdk_url(text)
        // Not quoted: the text may carry a password.
        .map_err(|e| Error::Invalid(format!("the vSphere URL: {e}")))
}

fn sdk_base(text: &str) -> Result<Url> {
    let mut url = sdk_url(text)?;
    url.set_path("/");
    Ok(url)
}

/// `HOST[:PORT]` as vim_rs wants it (it builds `https://{server}/sdk` itself).
pub(crate) fn server_address(sdk: &Url) -> String {
    let host = sdk.host_str().unwrap_or_default();
    match sdk.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    }
}

/// What the source says about where a disk holds data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// Byte ranges `(start, length)` that may hold data; everything else reads as zeros.
    Known(Vec<(u64, u64)>),
    /// The source cannot tell (changed block tracking off, a storage that does not track
    /// allocation, a VM still running): every byte must be read. The reason, for the log.
    Unknown(String),
}

/// The total length in a `Content-Range: bytes A-B/TOTAL` header.
fn content_range_total(header: &str) -> Option<u64> {
    header.trim().rsplit_once('/')?.1.trim().parse().ok()
}

impl Session {
    /// GETs `[offset, offset + len)` of a datastore file; `(answer, total file length)`.
    async fn get_range(
        &self,
        datastore_path: &str,
        datacenter: &str,
        offset: u64,
        len: u64,
    ) -> Result<(reqwest::Response, Option<u64>)> {
        let (http, tls, _) = self.parts();
        let url = self.download_url(datastore_path, datacenter)?;
        let net = |e: reqwest::Error| Error::from_reqwest(url.as_str(), &e, tls);
        let last = offset + len.max(1) - 1;
        let resp = http
            .get(url.clone())
            .header(RANGE, format!("bytes={offset}-{last}"))
            .send()
            .await
            .map_err(net)?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(Error::NotFound(format!(
                "datastore file {datastore_path} (datacenter {datacenter:?})"
            )));
        }
        if status == reqwest::StatusCode::RANGE_NOT_SATISFIABLE {
            let total = resp
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(content_range_total);
            return Err(Error::Protocol(format!(
                "bytes {offset}..{} of {datastore_path} are past its end ({} bytes)",
                offset + len,
                total.map_or("?".to_owned(), |t| t.to_string())
            )));
        }
        if status == reqwest::StatusCode::OK && resp.content_length() == Some(0) {
            // An empty file has no range to give (Go's file server answers 200 with no body).
            return Err(Error::Protocol(format!(
                "bytes {offset}..{} of {datastore_path} are past its end (0 bytes)",
                offset + len
            )));
        }
        if status != reqwest::StatusCode::PARTIAL_CONTENT {
            if status.is_success() {
                // A 200 would be the whole file: a service that ignores ranges cannot be used.
                return Err(Error::Protocol(format!(
                    "{url} answered a Range request with {status}, not 206 Partial Content"
                )));
            }
            return Err(Error::Http {
                status: status.as_u16(),
                url: url.to_string(),
            });
        }
        let total = resp
            .headers()
            .get(CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(content_range_total);
        Ok((resp, total))
    }

    /// The length of a datastore file (one one-byte range read). An empty file is 0.
    ///
    /// Errors: as [`Session::read_range`].
    pub async fn file_len(&self, datastore_path: &str, datacenter: &str) -> Result<u64> {
        match self.get_range(datastore_path, datacenter, 0, 1).await {
            Ok((_, Some(total))) => Ok(total),
            Ok((_, None)) => Err(Error::Protocol(format!(
                "no Content-Range total for {datastore_path}"
            ))),
            // An empty file has no byte 0: 416.
            Err(Error::Protocol(m)) if m.contains("past its end (0 bytes)") => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Reads exactly `len` bytes at `offset` of a datastore file with one Range request.
    ///
    /// Errors: [`Error::NotFound`], [`Error::Http`], [`Error::Protocol`] for a service that
    /// ignores ranges or a short answer, network errors as for [`Session::connect`].
    pub async fn read_range(
        &self,
        datastore_path: &str,
        datacenter: &str,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let (mut resp, _) = self
            .get_range(datastore_path, datacenter, offset, len)
            .await?;
        let (_, tls, _) = self.parts();
        let url = resp.url().to_string();
        let want = usize::try_from(len).map_err(|_| Error::Invalid(format!("{len} bytes")))?;
        let mut buf = BytesMut::with_capacity(want);
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| Error::from_reqwest(&url, &e, tls))?
        {
            buf.extend_from_slice(&chunk);
        }
        if buf.len() != want {
            return Err(Error::Unreachable {
                url,
                detail: format!(
                    "range at {offset} ended after {} of {want} bytes",
                    buf.len()
                ),
            });
        }
        Ok(buf.freeze())
    }

    /// The areas of a VM's disk that may hold data, from `QueryChangedDiskAreas` with change id
    /// `*` (every allocated area), asked piece by piece until the whole capacity is covered.
    ///
    /// vSphere answers only for a powered-off VM when no snapshot is given, and only with
    /// changed block tracking enabled on the VM; any fault makes the allocation
    /// [`Allocation::Unknown`] (the caller then reads everything), never an error.
    ///
    /// Errors: network failures only.
    pub async fn allocated_areas(
        &self,
        moref: &str,
        device_key: i32,
        capacity: u64,
    ) -> Result<Allocation> {
        let (_, _, client) = self.parts();
        let vm = mo::VirtualMachine::new(client.clone(), moref);
        let mut areas = Vec::new();
        let mut offset = 0u64;
        while offset < capacity {
            let start = i64::try_from(offset).unwrap_or(i64::MAX);
            let info = match vm
                .query_changed_disk_areas(None, device_key, start, "*")
                .await
            {
                Ok(info) => info,
                Err(e) => {
                    return match self.sdk_error(&e) {
                        e @ (Error::Unreachable { .. }
                        | Error::ThumbprintMismatch { .. }
                        | Error::TlsUntrusted { .. }) => Err(e),
                        other => Ok(Allocation::Unknown(other.to_string())),
                    };
                }
            };
            for a in info.changed_area.iter().flatten() {
                if a.length > 0 && a.start >= 0 {
                    areas.push((a.start as u64, a.length as u64));
                }
            }
            let next = u64::try_from(info.start_offset.saturating_add(info.length)).unwrap_or(0);
            if next <= offset {
                return Ok(Allocation::Unknown(format!(
                    "QueryChangedDiskAreas made no progress at offset {offset}"
                )));
            }
            offset = next;
        }
        Ok(Allocation::Known(areas))
    }

    fn sdk_error(&self, e: &vim_rs::core::client::Error) -> Error {
        let (_, tls, _) = self.parts();
        Error::from_vim(self.sdk_url().as_str(), e, tls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_totals_are_read() {
        assert_eq!(content_range_total("bytes 0-0/1073741824"), Some(1 << 30));
        assert_eq!(content_range_total("bytes */42"), Some(42));
        assert_eq!(content_range_total("bytes 0-0/*"), None);
    }

    #[test]
    fn datastore_path_parses_and_prints_back() {
        let p = DatastorePath::parse("[LocalDS_0] DC0_H0_VM0/disk1.vmdk").unwrap();
        assert_eq!(p.datastore, "LocalDS_0");
        assert_eq!(p.path, "DC0_H0_VM0/disk1.vmdk");
        assert_eq!(p.file_name(), "disk1.vmdk");
        assert_eq!(p.to_string(), "[LocalDS_0] DC0_H0_VM0/disk1.vmdk");
        assert_eq!(
            p.sibling("disk1-flat.vmdk").path,
            "DC0_H0_VM0/disk1-flat.vmdk"
        );
    }

    #[test]
    fn datastore_path_keeps_spaces_in_names() {
        let p = DatastorePath::parse("[my ds] my vm/my vm.vmdk").unwrap();
        assert_eq!(p.datastore, "my ds");
        assert_eq!(p.path, "my vm/my vm.vmdk");
        assert_eq!(p.sibling("x.vmdk").path, "my vm/x.vmdk");
        assert_eq!(
            DatastorePath::parse("[ds] top.vmdk")
                .unwrap()
                .sibling("y")
                .path,
            "y"
        );
    }

    #[test]
    fn datastore_path_rejects_malformed_input() {
        for bad in ["", "ds/file.vmdk", "[ds]", "[] a.vmdk", "[ds a.vmdk"] {
            assert!(
                matches!(DatastorePath::parse(bad), Err(Error::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn download_url_follows_the_folder_service_layout() {
        let url = download_url(
            "https://127.0.0.1:8989/sdk",
            "[LocalDS_0] DC0_H0_VM0/disk1.vmdk",
            "DC0",
        )
        .unwrap();
        assert_eq!(
            url.as_str(),
            "https://127.0.0.1:8989/folder/DC0_H0_VM0/disk1.vmdk?dcPath=DC0&dsName=LocalDS_0"
        );
    }

    #[test]
    fn download_url_escapes_names() {
        let url = download_url("vc.example.com", "[ds 1] my vm/a#b.vmdk", "folder/DC 1").unwrap();
        assert_eq!(
            url.as_str(),
            "https://vc.example.com/folder/my%20vm/a%23b.vmdk?dcPath=folder%2FDC+1&dsName=ds+1"
        );
    }

    #[test]
    fn sdk_url_normalizes_and_insists_on_https() {
        assert_eq!(
            sdk_url("vc.example.com").unwrap().as_str(),
            "https://vc.example.com/sdk"
        );
        assert_eq!(
            sdk_url("https://u:p@vc:443/sdk?x#y").unwrap().as_str(),
            "https://vc/sdk"
        );
        let u = sdk_url("https://[::1]:8443/").unwrap();
        assert_eq!(server_address(&u), "[::1]:8443");
        assert!(matches!(sdk_url("http://vc/sdk"), Err(Error::Invalid(_))));
        assert!(matches!(sdk_url("https://"), Err(Error::Invalid(_))));
    }
}
