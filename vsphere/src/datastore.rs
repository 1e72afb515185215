//! Reading datastore files through the `/folder` HTTP file service (by byte ranges; the URLs
//! are built in `url.rs`), and the allocated areas of a disk (`QueryChangedDiskAreas`).
//!
//! Ranges: vCenter's and ESXi's `/folder` service answers HTTP `Range` requests; virt-v2v's
//! `-it vddk`-less vCenter input reads a VM's `-flat.vmdk` exactly this way (nbdkit's curl
//! plugin over the `/folder` URL). Reading by ranges lets the converter fetch parts of a disk in
//! parallel and skip the areas the allocation map says hold nothing.

use bytes::{Bytes, BytesMut};
use reqwest::header::{CONTENT_RANGE, RANGE};

use super::session::Session;
use super::{Error, Result};

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

    /// The areas of a VM's disk (or of its disk as `snapshot` froze it) that may hold data, from
    /// `QueryChangedDiskAreas` with change id `*` (every allocated area; [`Session::changed_areas`]).
    ///
    /// vSphere answers only for a powered-off VM when no snapshot is given, and only with
    /// changed block tracking enabled on the VM; any fault makes the allocation
    /// [`Allocation::Unknown`] (the caller then reads everything), never an error.
    ///
    /// Errors: network failures only.
    pub async fn allocated_areas(
        &self,
        moref: &str,
        snapshot: Option<&str>,
        device_key: i32,
        capacity: u64,
    ) -> Result<Allocation> {
        match self
            .changed_areas(moref, snapshot, device_key, capacity, "*")
            .await
        {
            Ok(areas) => Ok(Allocation::Known(areas)),
            Err(
                e @ (Error::Unreachable { .. }
                | Error::ThumbprintMismatch { .. }
                | Error::TlsUntrusted { .. }),
            ) => Err(e),
            Err(other) => Ok(Allocation::Unknown(other.to_string())),
        }
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
}
