//! TLS for the vSphere edge: certificate thumbprint pinning, a CA bundle (a CA-signed vCenter),
//! explicit insecure mode, or the platform's trust store, all on rustls with the ring provider
//! (which kube already compiles).

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// How the server certificate of a vSphere endpoint is trusted.
#[derive(Clone, PartialEq, Eq)]
pub enum TlsPolicy {
    /// Trust exactly the leaf certificate with this SHA-1 or SHA-256 digest, whatever its
    /// issuer or host name (self-signed ESXi and vCenter certificates are the norm).
    Thumbprint(Thumbprint),
    /// Verify the chain and host name against these CAs only (a vCenter whose certificate a
    /// private or corporate CA signed).
    CaBundle(CaBundle),
    /// Trust any certificate. Only when the user said so explicitly.
    Insecure,
    /// Verify the chain and host name against the platform trust store.
    SystemRoots,
}

impl fmt::Debug for TlsPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Thumbprint(t) => write!(f, "Thumbprint({t})"),
            Self::CaBundle(b) => write!(f, "CaBundle({b:?})"),
            Self::Insecure => f.write_str("Insecure"),
            Self::SystemRoots => f.write_str("SystemRoots"),
        }
    }
}

/// Which digest a thumbprint was taken with; told apart by length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestKind {
    Sha1,
    Sha256,
}

/// A certificate thumbprint: the digest of the DER leaf certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct Thumbprint {
    kind: DigestKind,
    bytes: Vec<u8>,
}

/// Why a thumbprint string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ThumbprintError {
    #[error("thumbprint {0:?} is not hexadecimal (expected pairs like AB:CD:...)")]
    NotHex(String),
    #[error("thumbprint has {0} bytes; a SHA-1 thumbprint has 20 and a SHA-256 one 32")]
    BadLength(usize),
}

impl Thumbprint {
    /// Parses `AB:CD:...` or `abcd...`, case-insensitive; colons, spaces and dashes are ignored.
    ///
    /// Errors: not hex, or neither 20 (SHA-1) nor 32 (SHA-256) bytes.
    pub fn parse(text: &str) -> Result<Self, ThumbprintError> {
        let hex: String = text
            .chars()
            .filter(|c| !matches!(c, ':' | ' ' | '-' | '\t'))
            .collect::<String>();
        if !hex.len().is_multiple_of(2) || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(ThumbprintError::NotHex(text.to_owned()));
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| ThumbprintError::NotHex(text.to_owned()))?;
        let kind = match bytes.len() {
            20 => DigestKind::Sha1,
            32 => DigestKind::Sha256,
            n => return Err(ThumbprintError::BadLength(n)),
        };
        Ok(Self { kind, bytes })
    }

    /// The thumbprint of a DER certificate with the given digest.
    pub fn of_certificate(der: &[u8], kind: DigestKind) -> Self {
        let alg = match kind {
            DigestKind::Sha1 => &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            DigestKind::Sha256 => &ring::digest::SHA256,
        };
        Self {
            kind,
            bytes: ring::digest::digest(alg, der).as_ref().to_vec(),
        }
    }

    pub fn kind(&self) -> DigestKind {
        self.kind
    }

    /// Whether this thumbprint names the DER certificate `der`.
    pub fn matches(&self, der: &[u8]) -> bool {
        Self::of_certificate(der, self.kind) == *self
    }
}

/// Upper-case hex with colons, the form vSphere shows.
impl fmt::Display for Thumbprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.bytes.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Thumbprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:{self}", self.kind)
    }
}

impl std::str::FromStr for Thumbprint {
    type Err = ThumbprintError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The CA certificates one endpoint's certificate must chain to, parsed from PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CaBundle {
    certs: Vec<CertificateDer<'static>>,
}

/// Why a CA bundle was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CaBundleError {
    #[error("the CA bundle is not PEM: {0}")]
    NotPem(String),
    #[error("the CA bundle holds no CERTIFICATE block")]
    Empty,
    #[error("a certificate of the CA bundle cannot be used as a trust anchor: {0}")]
    BadCertificate(String),
}

impl CaBundle {
    /// Every `CERTIFICATE` block of `pem` (other blocks are ignored).
    ///
    /// Errors: malformed PEM, no certificate, or one that is not a usable trust anchor.
    pub fn from_pem(pem: &str) -> Result<Self, CaBundleError> {
        use rustls::pki_types::pem::PemObject;
        let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CaBundleError::NotPem(e.to_string()))?;
        if certs.is_empty() {
            return Err(CaBundleError::Empty);
        }
        let bundle = Self { certs };
        bundle.roots()?;
        Ok(bundle)
    }

    /// The bundle as a rustls root store.
    fn roots(&self) -> Result<rustls::RootCertStore, CaBundleError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in &self.certs {
            roots
                .add(c.clone())
                .map_err(|e| CaBundleError::BadCertificate(e.to_string()))?;
        }
        Ok(roots)
    }

    /// Number of certificates.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Never true: a bundle holds at least one certificate.
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }
}

/// The number of certificates and the SHA-256 of the first: enough to tell bundles apart in logs.
impl fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self
            .certs
            .first()
            .map(|c| Thumbprint::of_certificate(c, DigestKind::Sha256).to_string())
            .unwrap_or_default();
        write!(f, "{} certificate(s), first {first}", self.certs.len())
    }
}

/// What went wrong in certificate verification, kept where the caller can read it: rustls errors
/// reach us through hyper and io::Error, which do not keep them reachable by `source()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsRejection {
    /// The leaf certificate's digest was `actual`, not the pinned one.
    ThumbprintMismatch { expected: String, actual: String },
    /// The platform trust store did not accept the certificate (self-signed, wrong host, ...).
    Untrusted { detail: String, sha256: String },
}

/// The last rejection seen by a verifier; one per HTTP client.
#[derive(Clone, Debug, Default)]
pub struct TlsObserver(Arc<Mutex<Option<TlsRejection>>>);

impl TlsObserver {
    fn record(&self, r: TlsRejection) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(r);
        }
    }

    /// The last rejection, if a handshake was refused since the last call.
    pub fn take(&self) -> Option<TlsRejection> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// The ring provider, shared.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Installs ring as the process-wide rustls provider, for clients we do not configure ourselves
/// (object_store's reqwest client). Idempotent; a provider installed earlier by anyone wins.
pub fn install_default_provider() {
    if CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A rustls client configuration for `policy`, and the observer its verifier reports to.
///
/// Errors: the platform trust store could not be loaded (SystemRoots only), or the bundle's
/// verifier could not be built (CaBundle only).
pub fn client_config(
    policy: &TlsPolicy,
) -> Result<(rustls::ClientConfig, TlsObserver), rustls::Error> {
    let provider = provider();
    let observer = TlsObserver::default();
    let inner: Option<Arc<dyn ServerCertVerifier>> = match policy {
        TlsPolicy::SystemRoots => Some(Arc::new(rustls_platform_verifier::Verifier::new(
            provider.clone(),
        )?)),
        TlsPolicy::CaBundle(bundle) => {
            let roots = bundle
                .roots()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
            Some(
                rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider.clone(),
                )
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?,
            )
        }
        TlsPolicy::Thumbprint(_) | TlsPolicy::Insecure => None,
    };
    let verifier = Verifier {
        policy: policy.clone(),
        provider: provider.clone(),
        inner,
        observer: observer.clone(),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok((config, observer))
}

#[derive(Debug)]
struct Verifier {
    policy: TlsPolicy,
    provider: Arc<CryptoProvider>,
    inner: Option<Arc<dyn ServerCertVerifier>>,
    observer: TlsObserver,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.policy {
            TlsPolicy::Insecure => Ok(ServerCertVerified::assertion()),
            TlsPolicy::Thumbprint(expected) => {
                // Host name and issuer are deliberately not checked: the pin names the certificate.
                if expected.matches(end_entity) {
                    Ok(ServerCertVerified::assertion())
                } else {
                    let actual = Thumbprint::of_certificate(end_entity, expected.kind());
                    self.observer.record(TlsRejection::ThumbprintMismatch {
                        expected: expected.to_string(),
                        actual: actual.to_string(),
                    });
                    Err(rustls::Error::InvalidCertificate(
                        rustls::CertificateError::ApplicationVerificationFailure,
                    ))
                }
            }
            TlsPolicy::SystemRoots | TlsPolicy::CaBundle(_) => {
                let inner = self
                    .inner
                    .as_ref()
                    .ok_or(rustls::Error::General("no verifier".into()))?;
                inner
                    .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                    .inspect_err(|e| {
                        self.observer.record(TlsRejection::Untrusted {
                            detail: e.to_string(),
                            sha256: Thumbprint::of_certificate(end_entity, DigestKind::Sha256)
                                .to_string(),
                        });
                    })
            }
        }
    }

    // The handshake signatures are always checked: a pinned certificate is only worth something
    // if the peer proves it holds the key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA1_HEX: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn thumbprint_accepts_colons_and_any_case() {
        let plain = Thumbprint::parse(SHA1_HEX).unwrap();
        let colons =
            Thumbprint::parse("01:23:45:67:89:AB:CD:EF:01:23:45:67:89:ab:cd:ef:01:23:45:67")
                .unwrap();
        assert_eq!(plain, colons);
        assert_eq!(plain.kind(), DigestKind::Sha1);
        assert_eq!(
            plain.to_string(),
            "01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67"
        );
    }

    #[test]
    fn thumbprint_length_decides_the_digest() {
        let sha256 = "ab".repeat(32);
        assert_eq!(
            Thumbprint::parse(&sha256).unwrap().kind(),
            DigestKind::Sha256
        );
        assert_eq!(
            Thumbprint::parse(&"ab".repeat(16)),
            Err(ThumbprintError::BadLength(16))
        );
        assert_eq!(Thumbprint::parse(""), Err(ThumbprintError::BadLength(0)));
    }

    #[test]
    fn thumbprint_rejects_non_hex_and_odd_length() {
        assert!(matches!(
            Thumbprint::parse("zz".repeat(20).as_str()),
            Err(ThumbprintError::NotHex(_))
        ));
        assert!(matches!(
            Thumbprint::parse("abc"),
            Err(ThumbprintError::NotHex(_))
        ));
    }

    #[test]
    fn thumbprint_matches_the_digest_of_the_der_bytes() {
        let der = b"not really a certificate, but digests do not care";
        for kind in [DigestKind::Sha1, DigestKind::Sha256] {
            let t = Thumbprint::of_certificate(der, kind);
            let reparsed = Thumbprint::parse(&t.to_string().to_lowercase()).unwrap();
            assert!(reparsed.matches(der));
            assert!(!reparsed.matches(b"another certificate"));
        }
        // Known SHA-1 of "abc".
        assert_eq!(
            Thumbprint::of_certificate(b"abc", DigestKind::Sha1),
            Thumbprint::parse("a9993e364706816aba3e25717850c26c9cd0d89d").unwrap()
        );
    }

    const TEST_CA: &str = include_str!("testdata/test-ca.pem");

    #[test]
    fn a_ca_bundle_takes_certificates_and_refuses_anything_else() {
        let b = CaBundle::from_pem(TEST_CA).unwrap();
        assert_eq!(b.len(), 1);
        let two = CaBundle::from_pem(&format!("{TEST_CA}\n# a comment\n{TEST_CA}")).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(CaBundle::from_pem(""), Err(CaBundleError::Empty));
        assert_eq!(
            CaBundle::from_pem("just some text"),
            Err(CaBundleError::Empty)
        );
        let broken = TEST_CA.replace("MII", "!!!");
        assert!(matches!(
            CaBundle::from_pem(&broken),
            Err(CaBundleError::NotPem(_) | CaBundleError::BadCertificate(_))
        ));
        assert!(format!("{b:?}").starts_with("1 certificate(s), first "));
    }

    #[test]
    fn every_policy_builds_a_client_config() {
        for policy in [
            TlsPolicy::Insecure,
            TlsPolicy::Thumbprint(Thumbprint::parse(SHA1_HEX).unwrap()),
            TlsPolicy::CaBundle(CaBundle::from_pem(TEST_CA).unwrap()),
        ] {
            assert!(client_config(&policy).is_ok(), "{policy:?}");
        }
    }
}
