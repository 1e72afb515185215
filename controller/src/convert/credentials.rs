//! The converter's credentials: the conversion Job's environment read back under the Secrets'
//! own key names and parsed by the one reader every process uses ([`ferry_crds::credentials`]),
//! so that a Secret the controller accepted reads the same here.

use std::ffi::OsString;

use ferry_crds::credentials::{self, S3Credentials, SecretBytes, VsphereCredentials, VsphereTrust};
use ferry_crds::secret as keys;
use k8s_openapi::ByteString;

use super::Error;
use crate::children::job::env;
use crate::staging::StagingConfig;
use crate::tls::CaBundle;
use crate::vsphere::{Endpoint, Thumbprint, TlsPolicy};

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
    /// the controller refuses the same Secret with the same checks ([`crate::tls`]).
    pub fn endpoint(&self) -> Result<Endpoint, Error> {
        let v = &self.vsphere;
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
    use std::cell::Cell;
    use std::collections::BTreeMap;

    use std::os::unix::ffi::OsStringExt;

    use ferry_crds::VirtualMachineMigration;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Secret;
    use proptest::prelude::*;
    use proptest::test_runner::{TestCaseError, TestRunner};
    use secrecy::ExposeSecret;

    use super::*;
    use crate::children::job::conversion_job;
    use crate::reconcile::credentials::{SecretData, bind_source, bind_staging};
    use ferry_crds::fixtures::{THUMBPRINT, migration};

    const CA: &str = include_str!("../testdata/test-ca.pem");

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

    /// The tables are the Job's contract: every credential variable the conversion Job sets
    /// comes from the key the table names, of the Secret the table is for.
    #[test]
    fn the_tables_are_the_jobs_secret_key_refs() {
        let vmm = migration("web-1").with_disks(1);
        let job = conversion_job(&vmm, "img").unwrap();
        let refs = secret_key_refs(&job);
        let vs = &vmm.spec.source.endpoint.credentials_secret_ref.name;
        let s3 = &vmm.spec.staging.credentials_secret_ref.name;
        let mut expected: BTreeMap<String, (String, String)> = BTreeMap::new();
        for (table, secret) in [(&VSPHERE_ENV[..], vs), (&S3_ENV[..], s3)] {
            for (name, key) in table {
                expected.insert((*name).to_owned(), (secret.clone(), (*key).to_owned()));
            }
        }
        assert_eq!(refs, expected);
    }

    /// Every `secretKeyRef` of the Job's container: variable → (Secret, key).
    fn secret_key_refs(job: &Job) -> BTreeMap<String, (String, String)> {
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        pod.containers[0]
            .env
            .iter()
            .flatten()
            .filter_map(|e| {
                let r = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
                Some((e.name.clone(), (r.name.clone(), r.key.clone())))
            })
            .collect()
    }

    /// The Job's environment as the kubelet makes it from `secrets`: a referenced key's bytes as
    /// they are; an absent optional key leaves the variable unset; an absent required key
    /// keeps the container from starting (`None`). The rule of kubelet's
    /// `makeEnvironmentVariables` (pkg/kubelet/kubelet_pods.go).
    fn kubelet_env(job: &Job, secrets: &[Secret]) -> Option<BTreeMap<String, OsString>> {
        let pod = job.spec.as_ref()?.template.spec.as_ref()?;
        let mut out = BTreeMap::new();
        for e in pod.containers[0].env.iter().flatten() {
            let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            else {
                continue;
            };
            let secret = secrets
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(r.name.as_str()))?;
            match secret.data.as_ref().and_then(|d| d.get(&r.key)) {
                Some(v) => {
                    out.insert(e.name.clone(), OsString::from_vec(v.0.clone()));
                }
                None if r.optional == Some(true) => {}
                None => return None,
            }
        }
        Some(out)
    }

    /// A value as an owner may write it: one of `choices`, with or without the usual slips
    /// around it, or left out.
    fn written(choices: &'static [&'static str]) -> impl Strategy<Value = Option<Vec<u8>>> {
        let pad = prop::sample::select(&["", " ", "\n", "\r\n", "\t"][..]);
        prop::option::weighted(
            0.9,
            (pad.clone(), prop::sample::select(choices), pad)
                .prop_map(|(a, v, b)| format!("{a}{v}{b}").into_bytes()),
        )
    }

    fn labelled(name: &str, data: BTreeMap<&str, Option<Vec<u8>>>) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.to_owned());
        s.metadata.uid = Some(format!("uid-{name}"));
        s.metadata.labels = Some(BTreeMap::from([(
            ferry_crds::names::CREDENTIALS_LABEL.to_owned(),
            ferry_crds::names::CREDENTIALS_LABEL_VALUE.to_owned(),
        )]));
        s.data = Some(
            data.into_iter()
                .filter_map(|(k, v)| Some((k.to_owned(), ByteString(v?))))
                .collect(),
        );
        s
    }

    /// The migration's two Secrets, opted in, holding `vsphere` and `s3`.
    fn secrets(
        vmm: &VirtualMachineMigration,
        vsphere: BTreeMap<&str, Option<Vec<u8>>>,
        s3: BTreeMap<&str, Option<Vec<u8>>>,
    ) -> [Secret; 2] {
        [
            labelled(
                &vmm.spec.source.endpoint.credentials_secret_ref.name,
                vsphere,
            ),
            labelled(&vmm.spec.staging.credentials_secret_ref.name, s3),
        ]
    }

    /// A migration whose spec repeats nothing of its Secrets (no URL, pin or insecure), staging
    /// at the lab's endpoint and bucket.
    fn repeating_nothing() -> VirtualMachineMigration {
        let mut vmm = migration("m").with_disks(1);
        let ep = &mut vmm.spec.source.endpoint;
        ep.url = None;
        ep.thumbprint = None;
        ep.insecure_skip_tls_verify = false;
        vmm.spec.staging.endpoint = "http://127.0.0.1:9000".into();
        vmm.spec.staging.bucket = "ferry-staging".into();
        vmm
    }

    fn some(kv: &[(&'static str, &str)]) -> BTreeMap<&'static str, Option<Vec<u8>>> {
        kv.iter()
            .map(|(k, v)| (*k, Some(v.as_bytes().to_vec())))
            .collect()
    }

    /// What the conversion Job reads from `secrets`: `None` when it cannot start.
    fn converter_reads(
        vmm: &VirtualMachineMigration,
        secrets: &[Secret],
    ) -> Option<Result<(Endpoint, StagingConfig), Error>> {
        let env = kubelet_env(&conversion_job(vmm, "img").unwrap(), secrets)?;
        Some(
            Credentials::read(move |name| env.get(name).cloned()).and_then(|c| {
                let e = c.endpoint()?;
                c.staging_config("us-east-1", "").map(|s| (e, s))
            }),
        )
    }

    /// Runs `check` on 512 cases of `strategy`; `check` says whether the case was accepted.
    /// Both outcomes must have been seen often: a property only ever refused proves nothing.
    fn accepted_and_refused<S: Strategy>(
        strategy: S,
        check: impl Fn(S::Value) -> Result<bool, TestCaseError>,
    ) {
        let (accepted, refused) = (Cell::new(0u32), Cell::new(0u32));
        let mut runner = TestRunner::new(ProptestConfig::with_cases(512));
        runner
            .run(&strategy, |v| {
                let c = if check(v)? { &accepted } else { &refused };
                c.set(c.get() + 1);
                Ok(())
            })
            .unwrap();
        assert!(
            accepted.get() >= 40 && refused.get() >= 40,
            "accepted {}, refused {}",
            accepted.get(),
            refused.get()
        );
    }

    /// One reading of the vSphere Secret: whatever its owner wrote, the controller's binding
    /// (and the endpoint its sessions use) and the converter's reading of the environment the
    /// kubelet makes from the same Secret give the same URL, user, password and trust, or both
    /// refuse. A Secret the controller accepted never fails the converter.
    #[test]
    fn the_converter_reads_the_vsphere_secret_as_the_controller_does() {
        let strategy = (
            (
                written(&["u", "administrator@vsphere.local", "a b"]),
                written(&["p4ss", "pa ss", "-x", "\u{e9}t\u{e9}"]),
                prop::option::weighted(0.05, Just(vec![b'p', 0xff, b'\n'])),
            ),
            (
                written(&[
                    "https://127.0.0.1:8989/sdk",
                    "https://vc.example.com/",
                    "https://VC:443/sdk/",
                    "vc.example.com",
                    "https://u:p@vc/sdk",
                    "http://vc/sdk",
                    "https://",
                    "not a url",
                ]),
                written(&[THUMBPRINT, "ab:cd", ""]),
                written(&[CA, "garbage", ""]),
                written(&["true", "TRUE", "True", "false", "FALSE", "1", "yes", ""]),
            ),
        );
        let vmm = repeating_nothing();
        let s3 = some(&[
            ("accessKeyId", "AK"),
            ("secretAccessKey", "SK"),
            ("endpoint", "http://127.0.0.1:9000"),
            ("bucket", "ferry-staging"),
        ]);
        accepted_and_refused(
            strategy,
            |((username, password, not_utf8), (url, thumbprint, cacert, insecure))| {
                let vsphere = BTreeMap::from([
                    ("username", username),
                    ("password", not_utf8.or(password)),
                    ("url", url),
                    ("thumbprint", thumbprint),
                    ("cacert", cacert),
                    ("insecureSkipTLSVerify", insecure),
                ]);
                let secrets = secrets(&vmm, vsphere, s3.clone());
                let controller =
                    bind_source(&vmm.spec.source.endpoint, &SecretData::of(&secrets[0]))
                        .and_then(|l| crate::ports::source::endpoint(&l));
                match (controller, converter_reads(&vmm, &secrets)) {
                    (Ok(e), Some(Ok((ce, _)))) => {
                        prop_assert_eq!(&e.url, &ce.url);
                        prop_assert_eq!(&e.username, &ce.username);
                        prop_assert_eq!(e.password.expose_secret(), ce.password.expose_secret());
                        prop_assert!(e.tls == ce.tls, "the same trust");
                        Ok(true)
                    }
                    (Ok(_), Some(Err(e))) => Err(TestCaseError::fail(format!(
                        "the controller accepted, the converter failed: {e}"
                    ))),
                    (Ok(_), None) => Err(TestCaseError::fail(
                        "the controller accepted, the Job cannot start",
                    )),
                    (Err(p), Some(Ok(_))) => Err(TestCaseError::fail(format!(
                        "the converter accepts what the controller refused: {}",
                        p.message
                    ))),
                    // Refused by both, or the Job could not even start: nothing was sent.
                    (Err(_), Some(Err(_)) | None) => Ok(false),
                }
            },
        );
    }

    /// One reading of the S3 Secret, as above: the same endpoint, bucket, keys and CA bundle,
    /// or both refuse.
    #[test]
    fn the_converter_reads_the_s3_secret_as_the_controller_does() {
        let strategy = (
            written(&["AK"]),
            written(&["SK", "s k"]),
            written(&[
                "http://127.0.0.1:9000",
                "http://127.0.0.1:9000/",
                "HTTP://127.0.0.1:9000",
                "ftp://x",
                "http://ak:sk@127.0.0.1:9000",
            ]),
            written(&["ferry-staging"]),
            written(&[CA, "garbage"]),
        );
        let vmm = repeating_nothing();
        let vsphere = some(&[
            ("username", "u"),
            ("password", "p"),
            ("url", "https://127.0.0.1:8989/sdk"),
        ]);
        accepted_and_refused(strategy, |(access, secret_key, endpoint, bucket, ca)| {
            let s3 = BTreeMap::from([
                ("accessKeyId", access),
                ("secretAccessKey", secret_key),
                ("endpoint", endpoint),
                ("bucket", bucket),
                ("cacert", ca),
            ]);
            let secrets = secrets(&vmm, vsphere.clone(), s3);
            let controller = bind_staging(&vmm.spec.staging, &SecretData::of(&secrets[1]));
            match (controller, converter_reads(&vmm, &secrets)) {
                (Ok(l), Some(Ok((_, cs)))) => {
                    prop_assert_eq!(
                        credentials::s3_endpoint(&l.endpoint).ok(),
                        Some(cs.endpoint)
                    );
                    prop_assert_eq!(&l.bucket, &cs.bucket);
                    prop_assert_eq!(&l.access_key_id, &cs.access_key);
                    prop_assert_eq!(
                        l.secret_access_key.expose_secret(),
                        cs.secret_key.expose_secret()
                    );
                    prop_assert_eq!(&l.ca_bundle, &cs.ca_bundle);
                    Ok(true)
                }
                (Ok(_), Some(Err(e))) => Err(TestCaseError::fail(format!(
                    "the controller accepted, the converter failed: {e}"
                ))),
                (Ok(_), None) => Err(TestCaseError::fail(
                    "the controller accepted, the Job cannot start",
                )),
                (Err(p), Some(Ok(_))) => Err(TestCaseError::fail(format!(
                    "the converter accepts what the controller refused: {}",
                    p.message
                ))),
                (Err(_), Some(Err(_)) | None) => Ok(false),
            }
        });
    }
}
