//! The converter's credentials: the conversion Job's environment read back under the Secrets'
//! own key names and parsed by the one reader every process uses ([`ferry_crds::credentials`]),
//! so that a Secret the controller accepted reads the same here.

use std::ffi::OsString;

use ferry_crds::credentials::{self, S3Credentials, SecretBytes, VsphereCredentials, VsphereTrust};
use ferry_crds::secret as keys;
use k8s_openapi::ByteString;

use super::error::Error;
use crate::job_contract::env;
use ferry_staging::StagingConfig;
use ferry_vsphere::tls::CaBundle;
use ferry_vsphere::{Endpoint, Thumbprint, TlsPolicy};

/// Which environment variable carries which key of the vSphere Secret (the conversion Job's
/// `secretKeyRef`s).
pub const VSPHERE_ENV: [(&str, &str); 6] = [
    (env::VSPHERE_USERNAME, keys::VSPHERE_USERNAME_KEY),
    (env::VSPHERE_PASSWORD, keys::VSPHERE_PASSWORD_KEY),
    (env::VSPHERE_URL, keys::VSPHERE_URL_KEY),
    (env::VSPHERE_THUMBPRINT, keys::VSPHERE_THUMBPRINT_KEY),
    (env::VSPHERE_CACERT, keys::CA_CERT_KEY),
    (env::VSPHERE_INSECURE, keys::INSECURE_KEY),
];

/// Which environment variable carries which key of the S3 Secret.
pub const S3_ENV: [(&str, &str); 5] = [
    (env::S3_ACCESS_KEY_ID, keys::S3_ACCESS_KEY_ID_KEY),
    (env::S3_SECRET_ACCESS_KEY, keys::S3_SECRET_ACCESS_KEY_KEY),
    (env::S3_ENDPOINT, keys::S3_ENDPOINT_KEY),
    (env::S3_BUCKET, keys::S3_BUCKET_KEY),
    (env::S3_CACERT, keys::CA_CERT_KEY),
];

/// A Secret's data as the environment `var` carries it: each variable's bytes, as the kubelet
/// put them there, under the key it came from. Pure given `var`.
pub fn secret_of_env(
    table: &[(&str, &str)],
    var: &impl Fn(&str) -> Option<OsString>,
) -> SecretBytes {
    table
        .iter()
        .filter_map(|(name, key)| {
            var(name).map(|v| ((*key).to_owned(), ByteString(v.into_encoded_bytes())))
        })
        .collect()
}

/// Both Secrets, read from the environment.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub vsphere: VsphereCredentials,
    pub s3: S3Credentials,
}

impl Credentials {
    /// Reads both Secrets from the environment `var` (the process's: [`Credentials::from_env`]).
    ///
    /// # Errors
    /// [`Error::Usage`] naming the variable and the Secret's key that is missing or unusable;
    /// never a value.
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> Result<Self, Error> {
        Ok(Self {
            vsphere: credentials::vsphere(&secret_of_env(&VSPHERE_ENV, &var))
                .map_err(|e| usage("vSphere", &VSPHERE_ENV, e))?,
            s3: credentials::s3(&secret_of_env(&S3_ENV, &var))
                .map_err(|e| usage("S3", &S3_ENV, e))?,
        })
    }

    /// Reads both Secrets from this process's environment.
    ///
    /// # Errors
    /// As [`Credentials::read`].
    pub fn from_env() -> Result<Self, Error> {
        Self::read(|name| std::env::var_os(name))
    }

    /// The vSphere endpoint, trusted as its Secret says.
    ///
    /// # Errors
    /// [`Error::Usage`] for a pin that is not a thumbprint or a bundle without a certificate:
    /// the controller refuses the same Secret with the same checks ([`ferry_vsphere::tls`]).
    pub fn endpoint(&self) -> Result<Endpoint, Error> {
        endpoint_of(&self.vsphere)
    }

    /// The staging configuration: the S3 Secret's endpoint, bucket, keys and CA bundle; the
    /// migration's `region` and `prefix`.
    ///
    /// # Errors
    /// [`Error::Usage`] for a CA bundle without a certificate: the controller refuses the same
    /// Secret with the same check.
    pub fn staging_config(&self, region: &str, prefix: &str) -> Result<StagingConfig, Error> {
        let s = &self.s3;
        if let Some(pem) = &s.ca_bundle {
            CaBundle::from_pem(pem)
                .map_err(|e| Error::Usage(format!("{}: {e}", env::S3_CACERT)))?;
        }
        Ok(StagingConfig {
            endpoint: s.endpoint.clone(),
            bucket: s.bucket.clone(),
            region: region.to_owned(),
            access_key: s.access_key_id.clone(),
            secret_key: s.secret_access_key.clone(),
            prefix: prefix.to_owned(),
            ca_bundle: s.ca_bundle.clone(),
        })
    }
}

/// The vSphere endpoint alone, from this process's environment (a delta Job has no S3
/// Secret): read and trusted as [`Credentials::endpoint`] does.
///
/// # Errors
/// As [`Credentials::read`] and [`Credentials::endpoint`], for the vSphere Secret.
pub fn vsphere_endpoint_from_env() -> Result<Endpoint, Error> {
    let var = |name: &str| std::env::var_os(name);
    let vsphere = credentials::vsphere(&secret_of_env(&VSPHERE_ENV, &var))
        .map_err(|e| usage("vSphere", &VSPHERE_ENV, e))?;
    endpoint_of(&vsphere)
}

/// The vSphere endpoint of a Secret read, trusted as it says.
fn endpoint_of(v: &VsphereCredentials) -> Result<Endpoint, Error> {
    let tls = match &v.trust {
        VsphereTrust::Thumbprint(t) => Thumbprint::parse(t)
            .map(TlsPolicy::Thumbprint)
            .map_err(|e| Error::Usage(format!("{}: {e}", env::VSPHERE_THUMBPRINT)))?,
        VsphereTrust::CaBundle(pem) => CaBundle::from_pem(pem)
            .map(TlsPolicy::CaBundle)
            .map_err(|e| Error::Usage(format!("{}: {e}", env::VSPHERE_CACERT)))?,
        VsphereTrust::Insecure => TlsPolicy::Insecure,
        VsphereTrust::SystemRoots => TlsPolicy::SystemRoots,
    };
    Ok(Endpoint {
        url: v.url.clone(),
        username: v.username.clone(),
        password: v.password.clone(),
        tls,
    })
}

/// The reader's error, with the variable that carried the key.
fn usage(secret: &str, table: &[(&str, &str)], e: ferry_crds::Error) -> Error {
    let key = match &e {
        ferry_crds::Error::SecretKeyMissing { key }
        | ferry_crds::Error::SecretKeyInvalid { key, .. } => Some(*key),
        _ => None,
    };
    let var = table
        .iter()
        .find(|(_, k)| Some(*k) == key)
        .map_or(String::new(), |(name, _)| {
            format!(" (environment variable {name})")
        });
    Error::Usage(format!("the {secret} Secret: {e}{var}"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use secrecy::ExposeSecret;

    use super::*;

    const CA: &str = include_str!("../../vsphere/src/testdata/test-ca.pem");

    fn env_of(kv: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: BTreeMap<String, OsString> = kv
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(*v)))
            .collect();
        move |name| m.get(name).cloned()
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![
            (env::VSPHERE_URL, "https://vc/sdk"),
            (env::VSPHERE_USERNAME, "u"),
            (env::VSPHERE_PASSWORD, "p4ss"),
            (env::S3_ENDPOINT, "http://127.0.0.1:9000"),
            (env::S3_BUCKET, "b"),
            (env::S3_ACCESS_KEY_ID, "AK"),
            (env::S3_SECRET_ACCESS_KEY, "SK"),
        ]
    }

    fn tls(kv: &[(&str, &str)]) -> &'static str {
        let mut env = base();
        env.extend_from_slice(kv);
        match Credentials::read(env_of(&env)).and_then(|c| c.endpoint()) {
            Ok(e) => match e.tls {
                TlsPolicy::Thumbprint(_) => "thumbprint",
                TlsPolicy::CaBundle(_) => "cabundle",
                TlsPolicy::Insecure => "insecure",
                TlsPolicy::SystemRoots => "system",
            },
            Err(_) => "invalid",
        }
    }

    #[test]
    fn the_environment_reads_as_the_secrets_it_came_from() {
        let mut env = base();
        env.extend([
            (env::VSPHERE_PASSWORD, "p4ss\n"),
            (env::VSPHERE_URL, "https://vc/\n"),
            (env::VSPHERE_INSECURE, "TRUE"),
            (env::S3_ENDPOINT, "http://127.0.0.1:9000/"),
        ]);
        let c = Credentials::read(env_of(&env)).unwrap();
        let e = c.endpoint().unwrap();
        assert_eq!(
            (
                e.url.as_str(),
                e.username.as_str(),
                e.password.expose_secret()
            ),
            ("https://vc/sdk", "u", "p4ss")
        );
        assert_eq!(e.tls, TlsPolicy::Insecure);
        assert_eq!(c.s3.endpoint, "http://127.0.0.1:9000");
        assert_eq!(
            (
                c.s3.access_key_id.as_str(),
                c.s3.secret_access_key.expose_secret()
            ),
            ("AK", "SK")
        );
        assert!(!format!("{c:?}").contains("p4ss") && !format!("{c:?}").contains("SK"));
    }

    #[test]
    fn trust_is_pin_then_bundle_then_insecure_then_platform() {
        let sha1 = "ab".repeat(20);
        assert_eq!(
            tls(&[(env::VSPHERE_THUMBPRINT, sha1.as_str())]),
            "thumbprint"
        );
        assert_eq!(tls(&[(env::VSPHERE_INSECURE, "true")]), "insecure");
        assert_eq!(tls(&[(env::VSPHERE_INSECURE, "False")]), "system");
        assert_eq!(tls(&[]), "system");
        assert_eq!(
            tls(&[(env::VSPHERE_CACERT, CA), (env::VSPHERE_INSECURE, "true")]),
            "cabundle"
        );
        assert_eq!(
            tls(&[
                (env::VSPHERE_CACERT, CA),
                (env::VSPHERE_THUMBPRINT, sha1.as_str())
            ]),
            "thumbprint"
        );
        assert_eq!(
            tls(&[(env::VSPHERE_CACERT, "not a certificate")]),
            "invalid"
        );
        assert_eq!(
            tls(&[(env::VSPHERE_THUMBPRINT, "not-a-thumbprint")]),
            "invalid"
        );
        assert_eq!(tls(&[(env::VSPHERE_INSECURE, "yes")]), "invalid");
    }

    #[test]
    fn an_error_names_the_variable_and_the_key_never_the_value() {
        let mut env = base();
        env.push((env::VSPHERE_INSECURE, "hunter2"));
        let e = Credentials::read(env_of(&env)).unwrap_err().to_string();
        assert!(
            e.contains(env::VSPHERE_INSECURE) && e.contains("\"insecureSkipTLSVerify\""),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let env: Vec<_> = base()
            .into_iter()
            .filter(|(k, _)| *k != env::S3_BUCKET)
            .collect();
        let e = Credentials::read(env_of(&env)).unwrap_err().to_string();
        assert!(
            e.contains(env::S3_BUCKET) && e.contains("\"bucket\""),
            "{e}"
        );
    }
}
