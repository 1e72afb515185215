//! One reading of a credentials Secret for every process: the controller reads the Secret, the
//! conversion Job the same keys through its environment, and both get the same values or the
//! same error, which names the key and never shows the value.
//!
//! The rule: a value is the UTF-8 text stored under its key, trimmed of surrounding whitespace
//! (a trailing newline is the classic `echo | base64` slip); empty once trimmed is absent; a
//! boolean is `true` or `false` in any case and nothing else; the vSphere `url` is read into its
//! one form `https://HOST[:PORT]/sdk` ([`vsphere_sdk_url`]), the S3 `endpoint` into
//! `scheme://host[:port][/path]` without a trailing `/` ([`s3_endpoint`]).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use secrecy::SecretString;
use url::Url;

use crate::secret::{
    CA_CERT_KEY, INSECURE_KEY, S3_ACCESS_KEY_ID_KEY, S3_BUCKET_KEY, S3_ENDPOINT_KEY,
    S3_SECRET_ACCESS_KEY_KEY, VSPHERE_PASSWORD_KEY, VSPHERE_THUMBPRINT_KEY, VSPHERE_URL_KEY,
    VSPHERE_USERNAME_KEY,
};
use crate::{Error, Result};

/// A credentials Secret's data as stored: the API's `data`, and what a Job's `secretKeyRef`
/// puts in its environment byte for byte.
pub type SecretBytes = BTreeMap<String, ByteString>;

/// How the vSphere endpoint's certificate is trusted, in the one order every process applies:
/// a pinned `thumbprint`, else a `cacert` bundle, else `insecureSkipTLSVerify: "true"`, else the
/// platform's CAs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VsphereTrust {
    /// The certificate with this SHA-1 or SHA-256 thumbprint (as written in the Secret).
    Thumbprint(String),
    /// Certificates these CAs (PEM) signed, for the URL's host.
    CaBundle(String),
    /// Any certificate: the Secret's owner allowed it.
    Insecure,
    /// The platform trust store, for the URL's host.
    SystemRoots,
}

impl VsphereTrust {
    /// The kind of trust, without the pin or the bundle.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Thumbprint(_) => "thumbprint",
            Self::CaBundle(_) => "cacert",
            Self::Insecure => "insecure",
            Self::SystemRoots => "platform",
        }
    }
}

/// The vSphere Secret (`spec.source.credentialsSecretRef`), read.
#[derive(Clone)]
pub struct VsphereCredentials {
    /// `username`.
    pub username: String,
    /// `password`.
    pub password: SecretString,
    /// `url` in its one form, `https://HOST[:PORT]/sdk`: the only endpoint the login goes to.
    pub url: String,
    /// From `thumbprint`, `cacert` and `insecureSkipTLSVerify`.
    pub trust: VsphereTrust,
}

/// The endpoint and the kind of trust; never the user, the password or a pin.
impl fmt::Debug for VsphereCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VsphereCredentials")
            .field("url", &self.url)
            .field("trust", &self.trust.kind())
            .finish_non_exhaustive()
    }
}

/// The S3 Secret (`spec.staging.credentialsSecretRef`), read.
#[derive(Clone)]
pub struct S3Credentials {
    /// `accessKeyId`.
    pub access_key_id: String,
    /// `secretAccessKey`.
    pub secret_access_key: SecretString,
    /// `endpoint` as [`s3_endpoint`] writes it: the only endpoint the keys go to.
    pub endpoint: String,
    /// `bucket`: the only bucket the keys are used for.
    pub bucket: String,
    /// `cacert`: the CAs an https endpoint's certificate must chain to; the platform's when
    /// `None`.
    pub ca_bundle: Option<String>,
}

/// The endpoint and bucket; never the keys.
impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Credentials")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("ca_bundle", &self.ca_bundle.is_some())
            .finish_non_exhaustive()
    }
}

/// Reads the vSphere Secret. Pure.
///
/// # Guarantees
/// Every value is read by the rule of this module; `url` is in its one form; the trust is the
/// first of `thumbprint`, `cacert`, `insecureSkipTLSVerify: "true"` that is set, else the
/// platform's CAs. A set `insecureSkipTLSVerify` must be a boolean even when a pin wins.
///
/// # Errors
/// [`Error::SecretKeyMissing`] for a missing `username`, `password` or `url`;
/// [`Error::SecretKeyInvalid`] for a value that is not UTF-8, a `url` that is not an https URL
/// with a host, an `insecureSkipTLSVerify` that is not a boolean. Keys are checked in that order.
pub fn vsphere(data: &SecretBytes) -> Result<VsphereCredentials> {
    let username = required(data, VSPHERE_USERNAME_KEY)?;
    let password = SecretString::from(required(data, VSPHERE_PASSWORD_KEY)?);
    let url = vsphere_sdk_url(&required(data, VSPHERE_URL_KEY)?)
        .map_err(|e| at(VSPHERE_URL_KEY, e))?
        .to_string();
    let thumbprint = text(data, VSPHERE_THUMBPRINT_KEY)?;
    let cacert = text(data, CA_CERT_KEY)?;
    let insecure = boolean(data, INSECURE_KEY)?.unwrap_or(false);
    let trust = match (thumbprint, cacert) {
        (Some(t), _) => VsphereTrust::Thumbprint(t),
        (None, Some(pem)) => VsphereTrust::CaBundle(pem),
        (None, None) if insecure => VsphereTrust::Insecure,
        (None, None) => VsphereTrust::SystemRoots,
    };
    Ok(VsphereCredentials {
        username,
        password,
        url,
        trust,
    })
}

/// Reads the S3 Secret. Pure.
///
/// # Guarantees
/// Every value is read by the rule of this module; `endpoint` as [`s3_endpoint`] writes it.
///
/// # Errors
/// [`Error::SecretKeyMissing`] for a missing `accessKeyId`, `secretAccessKey`, `endpoint` or
/// `bucket`; [`Error::SecretKeyInvalid`] for a value that is not UTF-8 or an `endpoint` that
/// [`s3_endpoint`] refuses. Keys are checked in that order.
pub fn s3(data: &SecretBytes) -> Result<S3Credentials> {
    let access_key_id = required(data, S3_ACCESS_KEY_ID_KEY)?;
    let secret_access_key = SecretString::from(required(data, S3_SECRET_ACCESS_KEY_KEY)?);
    let endpoint =
        s3_endpoint(&required(data, S3_ENDPOINT_KEY)?).map_err(|e| at(S3_ENDPOINT_KEY, e))?;
    let bucket = required(data, S3_BUCKET_KEY)?;
    let ca_bundle = text(data, CA_CERT_KEY)?;
    Ok(S3Credentials {
        access_key_id,
        secret_access_key,
        endpoint,
        bucket,
        ca_bundle,
    })
}

/// The vSphere endpoint's identity in one form, `https://HOST[:PORT]/sdk`: surrounding
/// whitespace, any path, query, fragment and user info dropped, the host lowercased, port 443
/// left out; a bare host name is taken as `https://HOST`. Pure.
///
/// # Errors
/// [`Error::InvalidUrl`] for text that is not an https URL with a host (it never quotes the
/// text, which may carry a password).
pub fn vsphere_sdk_url(text: &str) -> Result<Url> {
    let text = text.trim();
    let with_scheme = if text.contains("://") {
        text.to_owned()
    } else {
        format!("https://{text}")
    };
    let mut url = Url::parse(&with_scheme).map_err(|e| Error::InvalidUrl { why: e.to_string() })?;
    if url.scheme() != "https" {
        return Err(Error::InvalidUrl {
            why: "a vSphere URL must use https".into(),
        });
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::InvalidUrl {
            why: "it has no host".into(),
        });
    }
    url.set_query(None);
    url.set_fragment(None);
    // Neither can fail on an https URL with a host.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_path("/sdk");
    Ok(url)
}

/// An S3 endpoint in one form: `scheme://host[:port][/path]`, the host lowercased, the scheme's
/// default port left out, no trailing `/`. Pure.
///
/// # Errors
/// [`Error::InvalidUrl`] for text that is not an http(s) URL with a host, or that carries user
/// info, a query or a fragment (the keys are the Secret's own; the text is never quoted).
pub fn s3_endpoint(text: &str) -> Result<String> {
    let url = Url::parse(text.trim()).map_err(|e| Error::InvalidUrl { why: e.to_string() })?;
    let refuse = |why: &str| Err(Error::InvalidUrl { why: why.into() });
    if !matches!(url.scheme(), "http" | "https") {
        return refuse("an S3 endpoint must use http or https");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return refuse("it has no host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return refuse(
            "it carries a user name or password; the keys belong in accessKeyId and secretAccessKey",
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return refuse("it carries a query or a fragment");
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// The value under `key` as text, trimmed; `None` when absent or empty once trimmed.
fn text(data: &SecretBytes, key: &'static str) -> Result<Option<String>> {
    let Some(raw) = data.get(key) else {
        return Ok(None);
    };
    let s = std::str::from_utf8(&raw.0).map_err(|_| Error::SecretKeyInvalid {
        key,
        why: "is not UTF-8 text".into(),
    })?;
    let s = s.trim();
    Ok((!s.is_empty()).then(|| s.to_owned()))
}

fn required(data: &SecretBytes, key: &'static str) -> Result<String> {
    text(data, key)?.ok_or(Error::SecretKeyMissing { key })
}

/// `true` or `false` in any case; anything else is refused rather than guessed.
fn boolean(data: &SecretBytes, key: &'static str) -> Result<Option<bool>> {
    match text(data, key)? {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(_) => Err(Error::SecretKeyInvalid {
            key,
            why: "must be \"true\" or \"false\" (in any case)".into(),
        }),
    }
}

/// An error about a value, attributed to the key that held it.
fn at(key: &'static str, e: Error) -> Error {
    match e {
        Error::InvalidUrl { why } => Error::SecretKeyInvalid {
            key,
            why: format!("is not a usable URL: {why}"),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    const VC: &str = "https://127.0.0.1:8989/sdk";

    fn data(kv: &[(&str, &str)]) -> SecretBytes {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    fn vc(extra: &[(&str, &str)]) -> SecretBytes {
        let mut kv = vec![("username", "u"), ("password", "p4ss"), ("url", VC)];
        kv.extend_from_slice(extra);
        data(&kv)
    }

    fn s3_data(extra: &[(&str, &str)]) -> SecretBytes {
        let mut kv = vec![
            ("accessKeyId", "AK"),
            ("secretAccessKey", "SK"),
            ("endpoint", "http://127.0.0.1:9000"),
            ("bucket", "ferry-staging"),
        ];
        kv.extend_from_slice(extra);
        data(&kv)
    }

    fn invalid_key(e: Error) -> &'static str {
        match e {
            Error::SecretKeyInvalid { key, .. } => key,
            other => panic!("not an invalid key: {other}"),
        }
    }

    #[test]
    fn a_trailing_newline_is_not_part_of_any_value() {
        let c = vsphere(&data(&[
            ("username", " administrator@vsphere.local\n"),
            ("password", "p4ss\n"),
            ("url", "https://127.0.0.1:8989/sdk\n"),
            ("thumbprint", "AB:CD\r\n"),
        ]))
        .unwrap();
        assert_eq!(c.username, "administrator@vsphere.local");
        assert_eq!(c.password.expose_secret(), "p4ss");
        assert_eq!(c.url, VC);
        assert_eq!(c.trust, VsphereTrust::Thumbprint("AB:CD".into()));
        let s = s3(&s3_data(&[("bucket", "ferry-staging\n")])).unwrap();
        assert_eq!(s.bucket, "ferry-staging");
        // Whitespace alone is no value.
        let e = vsphere(&vc(&[("password", " \n")])).unwrap_err();
        assert!(
            matches!(e, Error::SecretKeyMissing { key: "password" }),
            "{e}"
        );
    }

    #[test]
    fn insecure_is_true_or_false_in_any_case_and_nothing_else() {
        for v in ["true", "TRUE", "True", " tRuE\n"] {
            assert_eq!(
                vsphere(&vc(&[("insecureSkipTLSVerify", v)])).unwrap().trust,
                VsphereTrust::Insecure,
                "{v:?}"
            );
        }
        for v in ["false", "FALSE", "False", ""] {
            assert_eq!(
                vsphere(&vc(&[("insecureSkipTLSVerify", v)])).unwrap().trust,
                VsphereTrust::SystemRoots,
                "{v:?}"
            );
        }
        for v in ["1", "yes", "on", "truee", "t"] {
            let e = vsphere(&vc(&[("insecureSkipTLSVerify", v)])).unwrap_err();
            assert_eq!(invalid_key(e), "insecureSkipTLSVerify", "{v:?}");
        }
        // Refused even where a pin would win: one reading, whatever else the Secret holds.
        let e = vsphere(&vc(&[
            ("thumbprint", "AB"),
            ("insecureSkipTLSVerify", "yes"),
        ]));
        assert_eq!(invalid_key(e.unwrap_err()), "insecureSkipTLSVerify");
    }

    #[test]
    fn trust_is_pin_then_bundle_then_insecure_then_platform() {
        let all = vc(&[
            ("thumbprint", "AB"),
            ("cacert", "PEM"),
            ("insecureSkipTLSVerify", "true"),
        ]);
        assert_eq!(
            vsphere(&all).unwrap().trust,
            VsphereTrust::Thumbprint("AB".into())
        );
        let bundle = vc(&[("cacert", "PEM\n"), ("insecureSkipTLSVerify", "true")]);
        assert_eq!(
            vsphere(&bundle).unwrap().trust,
            VsphereTrust::CaBundle("PEM".into())
        );
        assert_eq!(vsphere(&vc(&[])).unwrap().trust, VsphereTrust::SystemRoots);
    }

    #[test]
    fn the_vsphere_url_has_one_form() {
        for written in [
            "https://127.0.0.1:8989/sdk",
            "https://127.0.0.1:8989/",
            "https://127.0.0.1:8989/sdk/",
            "https://127.0.0.1:8989",
            "127.0.0.1:8989",
            " https://127.0.0.1:8989/sdk?x=1#y\n",
            "https://user:pw@127.0.0.1:8989/sdk",
        ] {
            let c = vsphere(&vc(&[("url", written)])).unwrap();
            assert_eq!(c.url, VC, "{written:?}");
        }
        assert_eq!(
            vsphere_sdk_url("https://VC.Example.com:443/")
                .unwrap()
                .as_str(),
            "https://vc.example.com/sdk"
        );
        assert_eq!(
            vsphere_sdk_url("https://[::1]:8443/").unwrap().as_str(),
            "https://[::1]:8443/sdk"
        );
        for bad in ["http://vc/sdk", "https://", "ftp://vc", "https://vc:99999/"] {
            let e = vsphere(&vc(&[("url", bad)])).unwrap_err();
            assert!(
                matches!(&e, Error::SecretKeyInvalid { key: "url", .. }),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn the_s3_endpoint_has_one_form() {
        for (written, read) in [
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
            ("http://127.0.0.1:9000/", "http://127.0.0.1:9000"),
            (" http://127.0.0.1:9000/\n", "http://127.0.0.1:9000"),
            ("HTTPS://S3.Example.com:443/", "https://s3.example.com"),
            (
                "https://s3.example.com/base/",
                "https://s3.example.com/base",
            ),
        ] {
            let s = s3(&s3_data(&[("endpoint", written)])).unwrap();
            assert_eq!(s.endpoint, read, "{written:?}");
        }
        for bad in [
            "ftp://s3",
            "s3.example.com",
            "http://ak:sk@s3:9000",
            "http://s3:9000/?x=1",
        ] {
            let e = s3(&s3_data(&[("endpoint", bad)])).unwrap_err();
            assert_eq!(invalid_key(e), "endpoint", "{bad:?}");
        }
        let s = s3(&s3_data(&[("cacert", "PEM\n")])).unwrap();
        assert_eq!(s.ca_bundle.as_deref(), Some("PEM"));
        assert_eq!(s3(&s3_data(&[("cacert", "\n")])).unwrap().ca_bundle, None);
    }

    #[test]
    fn a_missing_key_is_named() {
        for key in ["username", "password", "url"] {
            let mut d = vc(&[]);
            d.remove(key);
            let e = vsphere(&d).unwrap_err();
            assert!(
                matches!(&e, Error::SecretKeyMissing { key: k } if *k == key),
                "{e}"
            );
            assert!(e.to_string().contains(&format!("{key:?}")), "{e}");
        }
        for key in ["accessKeyId", "secretAccessKey", "endpoint", "bucket"] {
            let mut d = s3_data(&[]);
            d.remove(key);
            let e = s3(&d).unwrap_err();
            assert!(
                matches!(&e, Error::SecretKeyMissing { key: k } if *k == key),
                "{e}"
            );
        }
    }

    #[test]
    fn a_value_that_is_not_utf8_is_named_not_guessed() {
        let mut d = vc(&[]);
        d.insert("password".into(), ByteString(vec![b'p', 0xff, b'\n']));
        assert_eq!(invalid_key(vsphere(&d).unwrap_err()), "password");
    }

    #[test]
    fn no_value_is_ever_shown() {
        const PASSWORD: &str = "hunter2-pw";
        const USER: &str = "admin-user";
        let c = vsphere(&vc(&[
            ("username", USER),
            ("password", PASSWORD),
            ("thumbprint", "PINPIN"),
        ]))
        .unwrap();
        let shown = format!("{c:?}");
        for secret in [USER, PASSWORD, "PINPIN"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains(VC) && shown.contains("thumbprint"),
            "{shown}"
        );
        let s = s3(&s3_data(&[
            ("accessKeyId", "AKID-1"),
            ("secretAccessKey", "SK-2"),
        ]))
        .unwrap();
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("AKID-1") && !shown.contains("SK-2"),
            "{shown}"
        );
        // Nor in an error: the key is named, the value is not.
        let mut errors = vec![
            vsphere(&vc(&[("insecureSkipTLSVerify", "hunter2-pw")])).unwrap_err(),
            vsphere(&vc(&[("url", "http://hunter2-pw@vc/sdk")])).unwrap_err(),
            s3(&s3_data(&[("endpoint", "http://ak:hunter2-pw@s3:9000")])).unwrap_err(),
        ];
        errors.push(vsphere_sdk_url("ftp://hunter2-pw").unwrap_err());
        for e in errors {
            let text = format!("{e} {e:?}");
            assert!(!text.contains(PASSWORD), "{text}");
        }
    }
}
