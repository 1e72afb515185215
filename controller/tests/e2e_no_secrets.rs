//! Nothing secret in any message: migrations whose Secrets or specs carry a URL with user info
//! (`user:password@`) — a vSphere `url` that is no URL at all, one without a scheme, a valid one
//! that migrates, an S3 `endpoint`, spec endpoints that differ from the Secrets' — end, and then
//! neither the password nor the user name is in any migration's status, any Event of the
//! namespace, or the controller's log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_crds::{Phase, SecretRef};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};

const USER: &str = "ferryuser";
const PASSWORD: &str = "hunter2-secret";

fn userinfo() -> String {
    format!("{USER}:{PASSWORD}@")
}

/// The lab's vSphere Secret under `name`, its `url` replaced by `url`.
fn vsphere_with_url(env: &Env, name: &str, url: &str) -> Secret {
    let vc = &env.lab.info.vcenter;
    secret(
        name,
        &[
            ("username", &vc.username),
            ("password", &vc.password),
            ("url", url),
            ("thumbprint", &vc.thumbprint_sha256),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_user_info_reaches_status_events_or_logs() {
    let mut env = Env::new("e2e-no-secrets", 16).await;
    let vc_host = host_port(&env.lab.info.vcenter.url);
    let s3 = env.lab.info.s3.clone();
    let secrets: Api<Secret> = env.ns.api();
    let create_secret = |s: Secret| {
        let secrets = secrets.clone();
        async move {
            secrets.create(&PostParams::default(), &s).await.unwrap();
        }
    };
    create_secret(vsphere_with_url(
        &env,
        "vc-not-a-url",
        &format!("https://{}bad host:port/sdk", userinfo()),
    ))
    .await;
    create_secret(vsphere_with_url(
        &env,
        "vc-no-scheme",
        &format!("{}[not-a-host", userinfo()),
    ))
    .await;
    create_secret(vsphere_with_url(
        &env,
        "vc-valid",
        &format!("https://{}{vc_host}/sdk", userinfo()),
    ))
    .await;
    let s3_with_userinfo = s3
        .endpoint
        .replacen("://", &format!("://{}", userinfo()), 1);
    create_secret(secret(
        "s3-userinfo",
        &[
            ("accessKeyId", &s3.access_key),
            ("secretAccessKey", &s3.secret_key),
            ("endpoint", &s3_with_userinfo),
            ("bucket", &s3.bucket),
        ],
    ))
    .await;
    env.start_sim();
    env.start_controller();

    // Each case ends in Failed before anything is sent, but for `vc-valid`: its user info is
    // dropped, the login uses the Secret's username and password, and it migrates.
    let mut failing = vec![];
    for (name, vc_secret) in [("not-a-url", "vc-not-a-url"), ("no-scheme", "vc-no-scheme")] {
        let mut m = env.migration(name);
        m.spec.source.endpoint.url = None;
        m.spec.source.endpoint.credentials_secret_ref = SecretRef::new(vc_secret);
        env.create(&m).await;
        failing.push(name);
    }
    let mut m = env.migration("spec-url");
    m.spec.source.endpoint.url = Some(format!("https://{}elsewhere.invalid/sdk", userinfo()));
    env.create(&m).await;
    failing.push("spec-url");
    let mut m = env.migration("s3-secret");
    m.spec.staging.endpoint = s3_with_userinfo.clone();
    m.spec.staging.credentials_secret_ref = SecretRef::new("s3-userinfo");
    env.create(&m).await;
    failing.push("s3-secret");
    let mut m = env.migration("s3-spec");
    m.spec.staging.endpoint = s3_with_userinfo.clone();
    env.create(&m).await;
    failing.push("s3-spec");
    for name in &failing {
        let v = env.wait_phase(name, Phase::Failed, 120).await;
        let (reason, _) = last_failure(&v);
        assert_eq!(
            reason,
            "CredentialsMismatch",
            "{name}: {}",
            serde_yaml_status(&v)
        );
    }
    let mut valid = env.migration("valid");
    valid.spec.source.endpoint.url = None;
    valid.spec.source.endpoint.credentials_secret_ref = SecretRef::new("vc-valid");
    env.create(&valid).await;
    let v = env.wait_terminal("valid", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));

    let mut seen = vec![];
    for v in env.api().list(&ListParams::default()).await.unwrap() {
        seen.push((
            format!("status of {}", name_of(&v)),
            serde_json::to_string(&v.status).unwrap(),
        ));
    }
    let events: Api<Event> = env.ns.api();
    let events = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        events.len() >= failing.len(),
        "every failure has its Event: {}",
        events.len()
    );
    seen.push((
        "the namespace's Events".into(),
        serde_json::to_string(&events).unwrap(),
    ));
    let log = env.controller_log();
    assert!(log.contains("phase"), "the log is the controller's: {log}");
    seen.push(("the controller's log".into(), log));
    // The messages do say a URL was refused: the test looks where the user info would be.
    assert!(
        seen.iter().any(|(_, text)| text.contains("***@")),
        "some message quotes a redacted URL"
    );
    for (what, text) in &seen {
        for secret in [PASSWORD, USER] {
            assert!(
                !text.contains(secret),
                "{what} carries {secret:?}: {}",
                &text[text.find(secret).unwrap().saturating_sub(200)..]
                    .chars()
                    .take(400)
                    .collect::<String>()
            );
        }
    }
}
