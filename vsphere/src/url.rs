//! Where vSphere things are: datastore paths (`[ds] dir/file.vmdk`), the `/folder` URL that
//! serves a datastore file, and the SDK URL in its one normalized form. Pure, so that the session
//! (which logs in to the SDK URL) and the datastore reads (which fetch `/folder` URLs) both
//! build on it.

use std::fmt;

use reqwest::Url;

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

#[cfg(test)]
mod tests {
    use super::*;

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
