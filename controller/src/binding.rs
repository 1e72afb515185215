//! Credentials bound to what their owner allowed: the pure decisions [`bind_source`] and
//! [`bind_staging`], shared by the migration controller and the wave (which resolves a selector
//! with the source's credentials).
//!
//! A credential is used only where the Secret's owner said: the Secret must carry the opt-in
//! label [`names::CREDENTIALS_LABEL`], and it names the one endpoint its credentials go to (the
//! vSphere Secret its `url` and how to trust it, the S3 Secret its `endpoint` and `bucket`). A
//! migration whose spec names anything else fails before any connection is made: whoever may
//! create a migration cannot point someone else's password at an endpoint of their choosing.
//! The values are read by [`ferry_crds::credentials`], as the conversion Job reads them.
//! Reading the Secrets is at the edge: `reconcile/credentials.rs`.

use ferry_crds::credentials::{self, SecretBytes, VsphereTrust};
use ferry_crds::{Reason, SourceEndpoint, StagingSpec, names};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::Result;
use crate::ports::{SourceLogin, SourceTrust, StagingLogin};
use crate::problem::Problem;
use ferry_vsphere::tls::{CaBundle, Thumbprint};

/// What a credentials Secret holds, as far as binding needs it: its name, whether its owner
/// opted it in, and its data as stored (read only through [`ferry_crds::credentials`]: values
/// trimmed, empty ones absent).
#[derive(Clone)]
pub struct SecretData {
    /// The Secret's name.
    pub name: String,
    /// The Secret's uid: which Secret it is (a vSphere session is never shared between two).
    pub uid: String,
    /// Whether it carries the opt-in label.
    pub opted_in: bool,
    /// Its data.
    pub data: SecretBytes,
}

/// Names and whether opted in, never the values.
impl std::fmt::Debug for SecretData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretData")
            .field("name", &self.name)
            .field("opted_in", &self.opted_in)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl SecretData {
    /// The view of a Secret read from the API.
    pub fn of(secret: &Secret) -> Self {
        Self {
            name: secret.name_any(),
            uid: secret.uid().unwrap_or_default(),
            opted_in: secret
                .labels()
                .get(names::CREDENTIALS_LABEL)
                .map(String::as_str)
                == Some(names::CREDENTIALS_LABEL_VALUE),
            data: secret.data.clone().unwrap_or_default(),
        }
    }

    /// Refuses a Secret its owner did not opt in.
    fn opt_in(&self, what: &str) -> Result<(), Problem> {
        if self.opted_in {
            return Ok(());
        }
        Err(Problem::permanent(
            Reason::CredentialsNotAllowed,
            format!(
                "Secret {} ({what}) is not labelled {}={}: ferry uses only Secrets their owner marked for it, and sent nothing. If it is meant for migrations, its owner labels it, then raise spec.retry",
                self.name,
                names::CREDENTIALS_LABEL,
                names::CREDENTIALS_LABEL_VALUE
            ),
        ))
    }

    /// Why the Secret cannot be read: a missing key may still be added (transient), a value no
    /// process can use stops the migration. Names the key, never the value.
    fn unreadable(&self, what: &str, e: ferry_crds::Error) -> Problem {
        match e {
            ferry_crds::Error::SecretKeyMissing { key } => Problem::transient(
                Reason::SecretNotFound,
                format!("Secret {} ({what}) has no key {key:?}; add it", self.name),
            ),
            other => Problem::permanent(
                Reason::CredentialsMismatch,
                format!(
                    "Secret {} ({what}): {other}; nothing was sent. Its owner fixes the Secret, then raise spec.retry",
                    self.name
                ),
            ),
        }
    }
}

fn mismatch(secret: &str, what: String) -> Problem {
    Problem::permanent(
        Reason::CredentialsMismatch,
        format!("{what}; nothing was sent. Secret {secret} is bound to its own endpoint only"),
    )
}

/// The vSphere endpoint's identity in one form: `https://host[:port]/sdk`.
fn sdk(url: &str) -> Option<String> {
    credentials::vsphere_sdk_url(url)
        .ok()
        .map(|u| u.to_string())
}

fn source_trust(t: VsphereTrust) -> SourceTrust {
    match t {
        VsphereTrust::Thumbprint(p) => SourceTrust::Thumbprint(p),
        VsphereTrust::CaBundle(pem) => SourceTrust::CaBundle(pem),
        VsphereTrust::Insecure => SourceTrust::Insecure,
        VsphereTrust::SystemRoots => SourceTrust::SystemRoots,
    }
}

/// The vSphere login `spec` may use with the Secret `s`. Pure.
///
/// # Guarantees
/// * The Secret is read by [`credentials::vsphere`], as the converter reads it: values trimmed,
///   `insecureSkipTLSVerify` `true`/`false` in any case, `url` in its one form; a Secret read
///   here is read the same by the conversion Job.
/// * The login's URL and trust are the Secret's: `url`, then trust by `thumbprint`, else
///   `cacert`, else `insecureSkipTLSVerify: "true"`, else the platform trust store.
/// * `spec.source.url`, `thumbprint` and `insecureSkipTLSVerify`, when set, must say the same as
///   the Secret, else [`Reason::CredentialsMismatch`]; an unlabelled Secret is
///   [`Reason::CredentialsNotAllowed`]; a value no process can use is
///   [`Reason::CredentialsMismatch`] naming its key. All are permanent: nothing is sent anywhere.
///
/// # Errors
/// The [`Problem`] that stops the migration.
pub fn bind_source(spec: &SourceEndpoint, s: &SecretData) -> Result<SourceLogin, Problem> {
    const WHAT: &str = "vSphere credentials";
    s.opt_in(WHAT)?;
    let creds = credentials::vsphere(&s.data).map_err(|e| s.unreadable(WHAT, e))?;
    let bound = creds.url;
    if let Some(wanted) = spec.url.as_deref()
        && sdk(wanted).as_deref() != Some(bound.as_str())
    {
        return Err(mismatch(
            &s.name,
            format!(
                "spec.source.url is {}, but Secret {} holds credentials for {bound}: leave spec.source.url out to use the Secret's, or name the Secret of that vCenter",
                ferry_crds::redact::endpoint(wanted),
                s.name
            ),
        ));
    }
    let trust = source_trust(creds.trust);
    if let Some(wanted) = spec.thumbprint.as_deref() {
        let same = match &trust {
            SourceTrust::Thumbprint(t) => {
                matches!((Thumbprint::parse(wanted), Thumbprint::parse(t)), (Ok(a), Ok(b)) if a == b)
            }
            SourceTrust::CaBundle(_) | SourceTrust::Insecure | SourceTrust::SystemRoots => false,
        };
        if !same {
            return Err(mismatch(
                &s.name,
                format!(
                    "spec.source.thumbprint {wanted} is not the thumbprint Secret {} pins ({}): leave spec.source.thumbprint out, or fix the Secret",
                    s.name,
                    trust_words(&trust)
                ),
            ));
        }
    }
    if spec.insecure_skip_tls_verify && trust != SourceTrust::Insecure {
        return Err(mismatch(
            &s.name,
            format!(
                "spec.source.insecureSkipTLSVerify is true, but Secret {} does not allow skipping TLS verification ({})",
                s.name,
                trust_words(&trust)
            ),
        ));
    }
    if let SourceTrust::CaBundle(pem) = &trust {
        CaBundle::from_pem(pem).map_err(|e| {
            mismatch(
                &s.name,
                format!("the cacert of Secret {} is unusable: {e}", s.name),
            )
        })?;
    }
    Ok(SourceLogin {
        secret: s.name.clone(),
        secret_uid: s.uid.clone(),
        url: bound,
        username: creds.username,
        password: creds.password,
        trust,
    })
}

fn trust_words(t: &SourceTrust) -> String {
    match t {
        SourceTrust::Thumbprint(p) => format!("it pins {p}"),
        SourceTrust::CaBundle(_) => "it trusts a CA bundle".to_owned(),
        SourceTrust::Insecure => "it allows any certificate".to_owned(),
        SourceTrust::SystemRoots => "it trusts the platform's CAs".to_owned(),
    }
}

/// The staging login `spec` may use with the Secret `s`. Pure.
///
/// # Guarantees
/// The Secret is read by [`credentials::s3`], as the converter reads it (values trimmed, the
/// endpoint in one form). `spec.staging.endpoint` (in the same form) and `bucket` must be the
/// Secret's `endpoint` and `bucket`, else [`Reason::CredentialsMismatch`]; an unlabelled Secret
/// is [`Reason::CredentialsNotAllowed`]; the Secret's `cacert`, when present, is a usable CA
/// bundle.
///
/// # Errors
/// The [`Problem`] that stops the migration.
pub fn bind_staging(spec: &StagingSpec, s: &SecretData) -> Result<StagingLogin, Problem> {
    const WHAT: &str = "staging credentials";
    s.opt_in(WHAT)?;
    let creds = credentials::s3(&s.data).map_err(|e| s.unreadable(WHAT, e))?;
    let bound = creds.endpoint;
    if credentials::s3_endpoint(&spec.endpoint).ok().as_deref() != Some(bound.as_str()) {
        return Err(mismatch(
            &s.name,
            format!(
                "spec.staging.endpoint is {}, but Secret {} holds keys for {bound}: use the Secret of that endpoint",
                ferry_crds::redact::endpoint(&spec.endpoint),
                s.name
            ),
        ));
    }
    let bucket = creds.bucket;
    if spec.bucket != bucket {
        return Err(mismatch(
            &s.name,
            format!(
                "spec.staging.bucket is {}, but Secret {} holds keys for bucket {bucket}",
                spec.bucket, s.name
            ),
        ));
    }
    if let Some(pem) = &creds.ca_bundle {
        CaBundle::from_pem(pem).map_err(|e| {
            mismatch(
                &s.name,
                format!("the cacert of Secret {} is unusable: {e}", s.name),
            )
        })?;
    }
    Ok(StagingLogin {
        secret: s.name.clone(),
        endpoint: spec.endpoint.clone(),
        bucket,
        region: spec.region.clone(),
        access_key_id: creds.access_key_id,
        secret_access_key: creds.secret_access_key,
        ca_bundle: creds.ca_bundle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::{THUMBPRINT, migration};
    use secrecy::ExposeSecret;

    const VC: &str = "https://127.0.0.1:8989/sdk";
    const CA: &str = include_str!("../../vsphere/src/testdata/test-ca.pem");

    fn secret(name: &str, opted_in: bool, kv: &[(&str, &str)]) -> SecretData {
        SecretData {
            name: name.into(),
            uid: format!("uid-{name}"),
            opted_in,
            data: kv
                .iter()
                .map(|(k, v)| ((*k).to_owned(), bytes(v)))
                .collect(),
        }
    }

    fn bytes(v: &str) -> k8s_openapi::ByteString {
        k8s_openapi::ByteString(v.as_bytes().to_vec())
    }

    fn vc_secret(extra: &[(&str, &str)]) -> SecretData {
        let mut kv = vec![("username", "u"), ("password", "p4ss"), ("url", VC)];
        kv.extend_from_slice(extra);
        secret("vc", true, &kv)
    }

    fn reason(r: Result<SourceLogin, Problem>) -> Option<(Reason, bool)> {
        r.err().map(|p| (p.reason, p.transient))
    }

    #[test]
    fn the_vsphere_login_goes_only_where_the_secret_says() {
        let mut ep = migration("m").spec.source.endpoint;
        ep.thumbprint = None;
        // The Secret decides URL and trust; the spec may leave both out.
        let pinned = vc_secret(&[("thumbprint", THUMBPRINT)]);
        ep.url = None;
        let l = bind_source(&ep, &pinned).unwrap();
        assert_eq!(l.url, VC);
        assert_eq!(l.trust, SourceTrust::Thumbprint(THUMBPRINT.into()));
        assert_eq!(l.password.expose_secret(), "p4ss");
        // The same URL written differently is the same endpoint.
        ep.url = Some("https://127.0.0.1:8989/".into());
        assert!(bind_source(&ep, &pinned).is_ok());
        // Repeating the Secret's thumbprint (any case) is fine; another one is not.
        ep.thumbprint = Some(THUMBPRINT.to_lowercase());
        assert!(bind_source(&ep, &pinned).is_ok());
        ep.thumbprint = Some("AB:".repeat(19) + "AB");
        let e = bind_source(&ep, &pinned).unwrap_err();
        assert_eq!(
            (e.reason, e.transient),
            (Reason::CredentialsMismatch, false)
        );
        assert!(
            e.message.contains("Secret vc") && e.message.contains("nothing was sent"),
            "{}",
            e.message
        );
        ep.thumbprint = None;

        // Another URL: refused, naming both ends and the Secret.
        ep.url = Some("https://evil.example:8443/sdk".into());
        let e = bind_source(&ep, &pinned).unwrap_err();
        assert_eq!(e.reason, Reason::CredentialsMismatch);
        assert!(
            e.message.contains("https://evil.example:8443/sdk") && e.message.contains(VC),
            "{}",
            e.message
        );
        assert!(!e.message.contains("p4ss"));
        ep.url = None;

        // Insecure only when the Secret's owner allowed it.
        ep.insecure_skip_tls_verify = true;
        assert_eq!(
            reason(bind_source(&ep, &vc_secret(&[]))),
            Some((Reason::CredentialsMismatch, false))
        );
        let lab = vc_secret(&[("insecureSkipTLSVerify", "true")]);
        assert_eq!(bind_source(&ep, &lab).unwrap().trust, SourceTrust::Insecure);
        ep.insecure_skip_tls_verify = false;

        // A CA bundle, checked; nothing named: the platform's CAs.
        let ca = vc_secret(&[("cacert", CA)]);
        assert_eq!(
            bind_source(&ep, &ca).unwrap().trust,
            SourceTrust::CaBundle(CA.trim().into())
        );
        assert_eq!(
            reason(bind_source(&ep, &vc_secret(&[("cacert", "garbage")]))),
            Some((Reason::CredentialsMismatch, false))
        );
        assert_eq!(
            bind_source(&ep, &vc_secret(&[])).unwrap().trust,
            SourceTrust::SystemRoots
        );
        // A pin wins over a bundle, as in the converter.
        let both = vc_secret(&[("cacert", CA), ("thumbprint", THUMBPRINT)]);
        assert_eq!(
            bind_source(&ep, &both).unwrap().trust,
            SourceTrust::Thumbprint(THUMBPRINT.into())
        );
    }

    #[test]
    fn a_secret_its_owner_did_not_opt_in_or_that_lacks_a_key_is_not_used() {
        let ep = migration("m").spec.source.endpoint;
        let mut s = vc_secret(&[("thumbprint", THUMBPRINT)]);
        s.opted_in = false;
        let e = bind_source(&ep, &s).unwrap_err();
        assert_eq!(
            (e.reason, e.transient),
            (Reason::CredentialsNotAllowed, false)
        );
        assert!(
            e.message.contains(names::CREDENTIALS_LABEL),
            "{}",
            e.message
        );
        let no_url = secret("vc", true, &[("username", "u"), ("password", "p")]);
        let e = bind_source(&ep, &no_url).unwrap_err();
        assert_eq!((e.reason, e.transient), (Reason::SecretNotFound, true));
        assert!(e.message.contains("\"url\""), "{}", e.message);
        let not_https = secret(
            "vc",
            true,
            &[
                ("username", "u"),
                ("password", "p"),
                ("url", "http://vc/sdk"),
            ],
        );
        assert_eq!(
            reason(bind_source(&ep, &not_https)),
            Some((Reason::CredentialsMismatch, false))
        );
        assert!(!format!("{s:?}").contains("p4ss"), "Debug shows no value");
    }

    #[test]
    fn a_secret_written_with_the_usual_slips_binds_as_meant() {
        // `echo | base64` leaves a newline; "TRUE" is a boolean; a URL may end in "/".
        let mut ep = migration("m").spec.source.endpoint;
        ep.thumbprint = None;
        ep.insecure_skip_tls_verify = true;
        let s = secret(
            "vc",
            true,
            &[
                ("username", "u\n"),
                ("password", "p4ss\n"),
                ("url", "https://127.0.0.1:8989/\n"),
                ("insecureSkipTLSVerify", "TRUE\n"),
            ],
        );
        let l = bind_source(&ep, &s).unwrap();
        assert_eq!(
            (
                l.url.as_str(),
                l.username.as_str(),
                l.password.expose_secret()
            ),
            (VC, "u", "p4ss")
        );
        assert_eq!(l.trust, SourceTrust::Insecure);
        // What no process can read is refused before anything is sent, naming the key.
        let mut bad = s.clone();
        bad.data
            .insert("insecureSkipTLSVerify".into(), bytes("yes"));
        let e = bind_source(&ep, &bad).unwrap_err();
        assert_eq!(
            (e.reason, e.transient),
            (Reason::CredentialsMismatch, false)
        );
        assert!(
            e.message.contains("Secret vc") && e.message.contains("\"insecureSkipTLSVerify\""),
            "{}",
            e.message
        );
        assert!(!e.message.contains("yes"), "{}", e.message);
    }

    #[test]
    fn the_staging_keys_go_only_to_the_secrets_endpoint_and_bucket() {
        let spec = migration("m").spec.staging;
        let kv = |endpoint: &'static str, bucket: &'static str| {
            secret(
                "s3",
                true,
                &[
                    ("accessKeyId", "AK"),
                    ("secretAccessKey", "SK"),
                    ("endpoint", endpoint),
                    ("bucket", bucket),
                ],
            )
        };
        let ok = kv("http://127.0.0.1:9000/", "ferry-staging");
        assert_eq!(spec.endpoint, "http://127.0.0.1:9000");
        let l = bind_staging(&spec, &ok).unwrap();
        assert_eq!(
            (l.access_key_id.as_str(), l.bucket.as_str()),
            ("AK", "ferry-staging")
        );
        assert_eq!(l.ca_bundle, None);
        for (s, what) in [
            (kv("http://127.0.0.1:9001", "ferry-staging"), "port"),
            (kv("https://127.0.0.1:9000", "ferry-staging"), "scheme"),
            (kv("http://other:9000", "ferry-staging"), "host"),
            (kv("http://127.0.0.1:9000", "other-bucket"), "bucket"),
        ] {
            let e = bind_staging(&spec, &s).unwrap_err();
            assert_eq!(
                (e.reason, e.transient),
                (Reason::CredentialsMismatch, false),
                "{what}"
            );
            assert!(
                e.message.contains("Secret s3") && !e.message.contains("SK"),
                "{what}: {}",
                e.message
            );
        }
        let mut unlabelled = ok.clone();
        unlabelled.opted_in = false;
        assert_eq!(
            bind_staging(&spec, &unlabelled).unwrap_err().reason,
            Reason::CredentialsNotAllowed
        );
        let mut with_ca = ok.clone();
        with_ca.data.insert("cacert".into(), bytes(CA));
        assert!(bind_staging(&spec, &with_ca).unwrap().ca_bundle.is_some());
        with_ca.data.insert("cacert".into(), bytes("nope"));
        assert_eq!(
            bind_staging(&spec, &with_ca).unwrap_err().reason,
            Reason::CredentialsMismatch
        );
        // The usual slips read as meant.
        let slips = secret(
            "s3",
            true,
            &[
                ("accessKeyId", "AK\n"),
                ("secretAccessKey", "SK\n"),
                ("endpoint", "http://127.0.0.1:9000/\n"),
                ("bucket", "ferry-staging\n"),
            ],
        );
        let l = bind_staging(&spec, &slips).unwrap();
        assert_eq!(
            (
                l.access_key_id.as_str(),
                l.secret_access_key.expose_secret(),
                l.bucket.as_str()
            ),
            ("AK", "SK", "ferry-staging")
        );
        let mut no_bucket = ok;
        no_bucket.data.remove("bucket");
        assert_eq!(
            bind_staging(&spec, &no_bucket).unwrap_err().reason,
            Reason::SecretNotFound
        );
    }
}
