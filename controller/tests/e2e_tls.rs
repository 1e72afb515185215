//! CA-signed endpoints end to end: a vCenter whose certificate the lab's private CA signed, and
//! S3 over https with a certificate of the same CA. The credentials Secrets carry the CA bundle
//! (`cacert`) beside the endpoint; the controller, the converter and CDI (through the
//! DataVolume's `certConfigMap`) all verify the certificates with it, and nothing is pinned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_controller::apis::cdi::DataVolume;
use ferry_crds::Phase;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_from_a_ca_signed_vcenter_through_https_staging_with_a_private_ca() {
    let mut env = Env::new_ca("e2e-tls", 16).await;
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("tls");
    // Nothing in the spec about trust: the Secret names the endpoint and its CA.
    vmm.spec.source.endpoint.url = None;
    vmm.spec.source.endpoint.thumbprint = None;
    vmm.spec.staging.endpoint = env.lab.info.s3_tls.endpoint.clone();
    vmm.spec.target.name = Some("tls-vm".into());
    env.create(&vmm).await;

    // CDI is told the CA: the DataVolume names the ConfigMap that holds it.
    let dvs: Api<DataVolume> = env.ns.api();
    let maps: Api<ConfigMap> = env.ns.api();
    let ca_pem = std::fs::read_to_string(&env.lab.info.s3_tls.ca_file).unwrap();
    let dv = ferry_harness::eventually(
        "the DataVolume",
        std::time::Duration::from_secs(240),
        || async { dvs.get_opt("tls-disk-0").await.ok().flatten() },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    let s3 = dv.spec.source.unwrap().s3.unwrap();
    assert_eq!(s3.cert_config_map.as_deref(), Some("tls-staging-ca"));
    assert!(
        s3.url.starts_with(&env.lab.info.s3_tls.endpoint),
        "{}",
        s3.url
    );
    let map = maps.get_opt("tls-staging-ca").await.unwrap();
    if let Some(map) = map {
        assert_eq!(map.data.unwrap()["ca.pem"].trim(), ca_pem.trim());
    }

    let v = env.wait_terminal("tls", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert!(
        same_file(&env.volume("tls-disk-0"), &env.disk.raw),
        "the imported volume holds the source disk's bytes"
    );
    assert!(
        maps.get_opt("tls-staging-ca").await.unwrap().is_none(),
        "the CA ConfigMap goes with the CDI Secret once the import is done"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ca_bundle_the_ca_signed_vcenter_is_not_trusted() {
    let mut env = Env::new_ca("e2e-tls-no-ca", 16).await;
    let vc = &env.lab.info.vcenter_ca;
    replace_secret(
        &env,
        secret(
            VSPHERE_SECRET,
            &[
                ("username", &vc.username),
                ("password", &vc.password),
                ("url", &vc.url),
            ],
        ),
    )
    .await;
    env.start_controller();
    let mut vmm = env.migration("no-ca");
    vmm.spec.source.endpoint.url = None;
    vmm.spec.source.endpoint.thumbprint = None;
    env.create(&vmm).await;
    let v = env.wait_phase("no-ca", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "ThumbprintMismatch", "{message}");
}
