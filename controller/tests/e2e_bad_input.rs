//! End to end, bad input: each mistake ends in `Failed` with a precise reason while a good
//! migration next to them, on the same controller, succeeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_crds::{ConditionStatus, ConditionType, Phase, Reason, SecretRef, VmSelector};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_input_fails_with_its_reason_and_a_good_migration_still_succeeds() {
    let mut env = Env::new("e2e-bad", 16).await;
    env.extra_controller_args = vec!["--max-transient-retries".into(), "2".into()];
    env.start_sim();
    env.start_controller();
    let secrets: kube::Api<Secret> = env.ns.api();
    let wrong = Secret {
        metadata: ObjectMeta {
            name: Some("wrong-password".into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [
                ("username", env.lab.info.vcenter.username.as_str()),
                ("password", "not-the-password"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
        ),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &wrong)
        .await
        .unwrap();

    let named = |name: &str| {
        let mut m = env.migration(name);
        m.spec.target.name = Some(name.to_owned());
        m
    };
    let mut unknown_vm = named("unknown-vm");
    unknown_vm.spec.source.vm = VmSelector::by_name("NoSuchVM");
    let mut bad_password = named("bad-password");
    bad_password.spec.source.endpoint.credentials_secret_ref = SecretRef::new("wrong-password");
    let mut bad_thumbprint = named("bad-thumbprint");
    bad_thumbprint.spec.source.endpoint.thumbprint = Some(vec!["AB"; 32].join(":"));
    let mut unreachable = named("unreachable");
    unreachable.spec.source.endpoint.url = format!("https://127.0.0.1:{}/sdk", free_port());
    let mut no_bucket = named("no-bucket");
    no_bucket.spec.staging.bucket = "no-such-bucket".into();
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
    let good = env
        .wait_for("good", "good to finish", 300, |v| v.phase().is_terminal())
        .await;
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
