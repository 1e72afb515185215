//! Credentials are used only where their owner allowed it, and the converter runs only an
//! allowed image. Each case ends in a precise reason with nothing sent: the endpoints the
//! migrations name are TCP forwarders of the test's own that count every connection (and pass
//! it on to the real vcsim or S3, so that sending credentials to them would work — which is
//! exactly what must not happen).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_crds::Phase;
use ferry_vsphere::{Endpoint, Session, Thumbprint, TlsPolicy};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;

/// The forwarder really forwards: a vSphere login through it works, and is counted.
async fn proven(fwd: &Forwarder, env: &Env) {
    ferry_vsphere::tls::install_default_provider();
    let vc = &env.lab.info.vcenter;
    let s = Session::connect(&Endpoint {
        url: format!("https://127.0.0.1:{}/sdk", fwd.port),
        username: vc.username.clone(),
        password: vc.password.clone().into(),
        tls: TlsPolicy::Thumbprint(Thumbprint::parse(&vc.thumbprint_sha256).unwrap()),
    })
    .await
    .unwrap();
    let _ = s.logout().await;
    assert!(fwd.connections() > 0, "the forwarder counts connections");
    fwd.reset();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_other_than_the_secrets_receives_no_login() {
    let mut env = Env::new("e2e-cred-url", 16).await;
    // The migration's author points the real vCenter's Secret at an endpoint of their own,
    // pinned by that endpoint's own thumbprint (it forwards to the real vCenter).
    let fwd = Forwarder::start(&host_port(&env.lab.info.vcenter.url)).await;
    proven(&fwd, &env).await;
    env.start_controller();
    let mut vmm = env.migration("steal");
    vmm.spec.source.endpoint.url = Some(format!("https://127.0.0.1:{}/sdk", fwd.port));
    env.create(&vmm).await;
    let v = env.wait_phase("steal", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "CredentialsMismatch", "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", fwd.port))
            && message.contains(&env.lab.info.vcenter.url)
            && message.contains(VSPHERE_SECRET),
        "the message names both endpoints and the Secret: {message}"
    );
    assert!(!message.contains(&env.lab.info.vcenter.password));
    assert_eq!(
        fwd.connections(),
        0,
        "the endpoint received no connection at all"
    );
    // Left out, the URL comes from the Secret: the same migration then discovers the VM.
    let mut ok = env.migration("from-secret");
    ok.spec.source.endpoint.url = None;
    ok.spec.source.power.power_off = false;
    env.create(&ok).await;
    env.wait_for("from-secret", "the source discovered", 120, |v| {
        v.condition(ferry_crds::ConditionType::SourceDiscovered)
            .is_some_and(|c| c.status == ferry_crds::ConditionStatus::True)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlabelled_secret_is_not_used_and_nothing_is_sent() {
    let mut env = Env::new("e2e-cred-label", 16).await;
    let vc_fwd = Forwarder::start(&host_port(&env.lab.info.vcenter.url)).await;
    proven(&vc_fwd, &env).await;
    let url = format!("https://127.0.0.1:{}/sdk", vc_fwd.port);
    let vc = &env.lab.info.vcenter;
    // Everything right but the owner's opt-in.
    replace_secret(
        &env,
        unlabelled_secret(
            VSPHERE_SECRET,
            &[
                ("username", &vc.username),
                ("password", &vc.password),
                ("url", &url),
                ("thumbprint", &vc.thumbprint_sha256),
            ],
        ),
    )
    .await;
    env.start_controller();
    let mut vmm = env.migration("unlabelled");
    vmm.spec.source.endpoint.url = Some(url);
    env.create(&vmm).await;
    let v = env.wait_phase("unlabelled", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "CredentialsNotAllowed", "{message}");
    assert!(
        message.contains(VSPHERE_SECRET)
            && message.contains("migration.platform.example/credentials"),
        "{message}"
    );
    assert_eq!(vc_fwd.connections(), 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_of_another_namespace_is_never_read() {
    let mut env = Env::new("e2e-cred-ns", 16).await;
    let fwd = Forwarder::start(&host_port(&env.lab.info.vcenter.url)).await;
    let url = format!("https://127.0.0.1:{}/sdk", fwd.port);
    // The name exists, labelled and bound, but in another namespace only.
    let other = env.lab.namespace("e2e-cred-other").await.unwrap();
    let vc = &env.lab.info.vcenter;
    let there: Api<k8s_openapi::api::core::v1::Secret> = other.api();
    there
        .create(
            &Default::default(),
            &secret(
                "elsewhere",
                &[
                    ("username", &vc.username),
                    ("password", &vc.password),
                    ("url", &url),
                    ("thumbprint", &vc.thumbprint_sha256),
                ],
            ),
        )
        .await
        .unwrap();
    env.extra_controller_args = vec!["--max-transient-retries".into(), "2".into()];
    env.start_controller();
    let mut vmm = env.migration("cross-ns");
    vmm.spec.source.endpoint.url = Some(url);
    vmm.spec.source.endpoint.credentials_secret_ref.name = "elsewhere".into();
    env.create(&vmm).await;
    let v = env.wait_phase("cross-ns", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "SecretNotFound", "{message}");
    assert!(
        message.contains(&env.ns.name),
        "names the namespace looked in: {message}"
    );
    assert_eq!(fwd.connections(), 0);
    // A reference cannot even name another namespace: the API drops the field.
    let mut raw = serde_json::to_value(env.migration("cross-ns-2")).unwrap();
    raw["spec"]["source"]["credentialsSecretRef"]["namespace"] = other.name.clone().into();
    let created: ferry_crds::VirtualMachineMigration = env
        .api()
        .create(&Default::default(), &serde_json::from_value(raw).unwrap())
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&created.spec.source.endpoint.credentials_secret_ref).unwrap(),
        serde_json::json!({"name": VSPHERE_SECRET})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staging_endpoint_other_than_the_secrets_receives_nothing() {
    let mut env = Env::new("e2e-cred-s3", 16).await;
    let fwd = Forwarder::start(&host_port(&env.lab.info.s3.endpoint)).await;
    env.start_controller();
    let mut vmm = env.migration("s3-steal");
    vmm.spec.staging.endpoint = format!("http://127.0.0.1:{}", fwd.port);
    vmm.spec.source.power.power_off = false;
    env.create(&vmm).await;
    let v = env.wait_phase("s3-steal", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "CredentialsMismatch", "{message}");
    assert!(
        message.contains(S3_SECRET) && message.contains(&env.lab.info.s3.endpoint),
        "{message}"
    );
    assert_eq!(fwd.connections(), 0, "the S3 keys went nowhere");
}

/// Issue #22, section 4: the controller trimmed and read booleans case-blind, the converter did
/// neither, so such a Secret passed Preparing (powering the source off) and failed the
/// conversion. One reader now serves both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_with_a_trailing_newline_true_in_capitals_and_a_trailing_slash_migrates() {
    let mut env = Env::new("e2e-cred-slips", 16).await;
    let lab = env.lab;
    let (vc, s3) = (&lab.info.vcenter, &lab.info.s3);
    // As `echo PASSWORD | base64` writes them; insecure (no pin) in capitals; URLs ending in "/".
    let password = format!("{}\n", vc.password);
    let url = format!("{}/", vc.url.trim_end_matches('/'));
    let endpoint = format!("{}/\n", s3.endpoint.trim_end_matches('/'));
    let secret_key = format!("{}\n", s3.secret_key);
    replace_secret(
        &env,
        secret(
            VSPHERE_SECRET,
            &[
                ("username", &vc.username),
                ("password", &password),
                ("url", &url),
                ("insecureSkipTLSVerify", "TRUE"),
            ],
        ),
    )
    .await;
    replace_secret(
        &env,
        secret(
            S3_SECRET,
            &[
                ("accessKeyId", &s3.access_key),
                ("secretAccessKey", &secret_key),
                ("endpoint", &endpoint),
                ("bucket", &s3.bucket),
            ],
        ),
    )
    .await;
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("slips");
    // The spec repeats what the Secret allows: no pin, insecure.
    vmm.spec.source.endpoint.thumbprint = None;
    vmm.spec.source.endpoint.insecure_skip_tls_verify = true;
    env.create(&vmm).await;
    let v = env.wait_terminal("slips", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    // The conversion ran with those Secrets (by secretKeyRef) and the volume holds the disk.
    let raw = env.scratch.join("expected.raw");
    qemu_raw(&env.disk.vmdk, &raw);
    assert!(
        same_file(&env.volume(&dv_name("slips", 0)), &raw),
        "the volume holds the source disk's bytes"
    );
    let jobs: Api<Job> = env.ns.api();
    let job = jobs.get("slips-convert").await.unwrap();
    let insecure = job.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "FERRY_VSPHERE_INSECURE")
        .and_then(|e| e.value_from.clone())
        .and_then(|f| f.secret_key_ref)
        .map(|r| (r.name, r.key));
    assert_eq!(
        insecure,
        Some((
            VSPHERE_SECRET.to_owned(),
            "insecureSkipTLSVerify".to_owned()
        )),
        "the converter read the Secret's own TRUE"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_converter_runs_only_the_controllers_image_or_an_allowed_one() {
    const ALLOWED: &str = "registry.example/ferry-debug@sha256:1111111111111111111111111111111111111111111111111111111111111111";
    let mut env = Env::new("e2e-cred-image", 16).await;
    env.extra_controller_args = vec![
        "--converter-image".into(),
        "registry.example/ferry@sha256:2222222222222222222222222222222222222222222222222222222222222222".into(),
        "--allowed-converter-images".into(),
        ALLOWED.into(),
    ];
    env.start_sim();
    env.start_controller();
    let mut evil = env.migration("evil");
    evil.spec.conversion.image = Some("attacker.example/steal:latest".into());
    env.create(&evil).await;
    let v = env.wait_phase("evil", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "ConverterImageNotAllowed", "{message}");
    assert!(
        message.contains("attacker.example/steal:latest"),
        "{message}"
    );
    let jobs: Api<Job> = env.ns.api();
    assert!(
        jobs.get_opt("evil-convert").await.unwrap().is_none(),
        "no Job"
    );
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "refused before the power-off"
    );

    let mut allowed = env.migration("allowed");
    allowed.spec.conversion.image = Some(ALLOWED.into());
    allowed.spec.target.name = Some("allowed-vm".into());
    env.create(&allowed).await;
    let v = env.wait_terminal("allowed", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let job = jobs.get("allowed-convert").await.unwrap();
    let image = job.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some(ALLOWED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_converter_pod_passes_pod_security_restricted() {
    let lab = ferry_harness::lab();
    let ns = lab.namespace("e2e-psa").await.unwrap();
    lab.kubectl_ok(&[
        "label",
        "namespace",
        &ns.name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ])
    .unwrap();
    let mut vmm = ferry_crds::fixtures::migration("psa").with_disks(2);
    vmm.metadata.namespace = Some(ns.name.clone());
    let job =
        ferry_controller::children::job::conversion_job(&vmm, "ferry/controller:0.1.0").unwrap();
    let template = job.spec.unwrap().template;
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "psa-convert", "namespace": ns.name, "labels": template.metadata.and_then(|m| m.labels)},
        "spec": template.spec,
    });
    let dir = bin_dir().join("e2e").join(&ns.name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pod.json");
    std::fs::write(&file, serde_json::to_vec(&pod).unwrap()).unwrap();
    let out = lab
        .kubectl()
        .args(["apply", "--dry-run=server", "-f", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The namespace does enforce it: the same pod without its security context is refused.
    let mut loose = pod.clone();
    loose["spec"]["securityContext"] = serde_json::Value::Null;
    loose["spec"]["containers"][0]["securityContext"] = serde_json::Value::Null;
    std::fs::write(&file, serde_json::to_vec(&loose).unwrap()).unwrap();
    let out = lab
        .kubectl()
        .args(["apply", "--dry-run=server", "-f", file.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("restricted"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
