//! The conversion Job's contract, tested from both sides: the Job that `children/job.rs` builds,
//! read through the environment the kubelet would give its pod, is what `convert/credentials.rs`
//! reads, and the converter accepts and refuses a Secret exactly as the controller's binding
//! (`reconcile/credentials.rs`) does. Kept apart from both so that neither imports the other.
#![allow(clippy::unwrap_used)]

use ferry_crds::VirtualMachineMigration;
use ferry_crds::credentials;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use secrecy::ExposeSecret;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use crate::binding::{SecretData, bind_source, bind_staging};
use crate::children::job::conversion_job;
use ferry_convert::Error;
use ferry_convert::credentials::*;
use ferry_crds::fixtures::{THUMBPRINT, migration};
use ferry_staging::StagingConfig;
use ferry_vsphere::Endpoint;

const CA: &str = include_str!("../../vsphere/src/testdata/test-ca.pem");

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
            let controller = bind_source(&vmm.spec.source.endpoint, &SecretData::of(&secrets[0]))
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
