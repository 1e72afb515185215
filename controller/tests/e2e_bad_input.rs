//! End to end, bad input: each mistake ends in `Failed` with a precise reason while a good
//! migration next to them, on the same controller, succeeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_crds::{ConditionStatus, ConditionType, Phase, Reason, SecretRef, VmSelector};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_input_fails_with_its_reason_and_a_good_migration_still_succeeds() {
    let mut env = Env::new("e2e-bad", 16).await;
    env.extra_controller_args = vec!["--max-transient-retries".into(), "2".into()];
    env.start_sim();
    env.start_controller();
    // Each bad input in a Secret its owner wrote (opted in, bound to an endpoint): what ferry
    // connects to is the Secret's, so the bad endpoint, pin or bucket lives there.
    let secrets: kube::Api<Secret> = env.ns.api();
    let vc = env.lab.info.vcenter.clone();
    let s3 = env.lab.info.s3.clone();
    let unreachable_url = format!("https://127.0.0.1:{}/sdk", free_port());
    let wrong_pin = vec!["AB"; 32].join(":");
    for s in [
        secret(
            "wrong-password",
            &[
                ("username", vc.username.as_str()),
                ("password", "not-the-password"),
                ("url", &vc.url),
                ("thumbprint", &vc.thumbprint_sha256),
            ],
        ),
        secret(
            "wrong-pin",
            &[
                ("username", vc.username.as_str()),
                ("password", &vc.password),
                ("url", &vc.url),
                ("thumbprint", &wrong_pin),
            ],
        ),
        secret(
            "nobody-there",
            &[
                ("username", vc.username.as_str()),
                ("password", &vc.password),
                ("url", &unreachable_url),
                ("insecureSkipTLSVerify", "true"),
            ],
        ),
        secret(
            "no-bucket-s3",
            &[
                ("accessKeyId", s3.access_key.as_str()),
                ("secretAccessKey", &s3.secret_key),
                ("endpoint", &s3.endpoint),
                ("bucket", "no-such-bucket"),
            ],
        ),
    ] {
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }

    let named = |name: &str| {
        let mut m = env.migration(name);
        m.spec.target.name = Some(name.to_owned());
        m
    };
    let from_secret = |name: &str, secret: &str| {
        let mut m = named(name);
        m.spec.source.endpoint.url = None;
        m.spec.source.endpoint.thumbprint = None;
        m.spec.source.endpoint.credentials_secret_ref = SecretRef::new(secret);
        m
    };
    let mut unknown_vm = named("unknown-vm");
    unknown_vm.spec.source.vm = VmSelector::by_name("NoSuchVM");
    let bad_password = from_secret("bad-password", "wrong-password");
    let bad_thumbprint = from_secret("bad-thumbprint", "wrong-pin");
    let unreachable = from_secret("unreachable", "nobody-there");
    let mut no_bucket = named("no-bucket");
    no_bucket.spec.staging.bucket = "no-such-bucket".into();
    no_bucket.spec.staging.credentials_secret_ref = SecretRef::new("no-bucket-s3");
    let cases = [
        (
            unknown_vm,
            Reason::VMNotFound,
            ConditionType::SourceDiscovered,
        ),
        (
            bad_password,
            Reason::LoginFailed,
            ConditionType::SourceDiscovered,
        ),
        (
            bad_thumbprint,
            Reason::ThumbprintMismatch,
            ConditionType::SourceDiscovered,
        ),
        (
            unreachable,
            Reason::EndpointUnreachable,
            ConditionType::SourceDiscovered,
        ),
        (no_bucket, Reason::BucketNotFound, ConditionType::Validated),
    ];
    for (m, _, _) in &cases {
        env.create(m).await;
    }
    env.create(&env.migration("good")).await;

    for (m, reason, cond) in &cases {
        let name = name_of(m);
        let v = env
            .wait_for(&name, &format!("{name} to fail"), 180, |v| {
                v.phase().is_terminal()
            })
            .await;
        assert_eq!(
            v.phase(),
            Phase::Failed,
            "{name}: {}",
            serde_yaml_status(&v)
        );
        let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
        assert_eq!(
            (f.phase, f.reason),
            (Phase::Preparing, *reason),
            "{name}: {}",
            f.message
        );
        let c = v.condition(*cond).unwrap();
        assert_eq!(
            (c.status, c.reason),
            (ConditionStatus::False, *reason),
            "{name}"
        );
        assert!(
            !c.message.is_empty(),
            "{name}: the condition says what to do"
        );
        env.wait_event(&name, reason.as_str()).await;
    }
    let good = env.wait_terminal("good", 300).await;
    assert_eq!(
        good.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&good)
    );
    assert_eq!(
        env.power_state().await,
        "poweredOff",
        "only the good migration powered the VM off"
    );
}
