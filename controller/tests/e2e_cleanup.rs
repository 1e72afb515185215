//! Deletion always has a way out, nothing sensitive outlives its use, and cleanup removes what
//! the migration made whatever its spec says now.
//!
//! * Staging that cannot be reached holds a deleted migration's finalizer with `CleanupBlocked`
//!   (status and Event) while everything else is removed; the owner's abandon-cleanup annotation
//!   releases it, with an Event listing every object left behind.
//! * The CDI copy of the S3 keys goes when the migration fails, not when it is deleted.
//! * `spec.staging` cannot change while a migration runs; changed after a failure, the retry
//!   starts over and the copies at the old place are removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_controller::apis::cdi::DataVolume;
use ferry_controller::children::secret;
use ferry_crds::{ConditionType, Phase, Reason, names};
use ferry_harness::eventually;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

/// Notes of the Events with `reason` about `name`.
async fn event_notes(env: &Env, name: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = env.ns.api();
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .filter_map(|e| e.note)
        .collect()
}

/// The staged objects under the test's prefix, as the `KEY`s ferry names them.
fn staged_keys(env: &Env) -> Vec<String> {
    let bucket = env.lab.info.s3.data_dir.join(&env.lab.info.s3.bucket);
    let mut keys: Vec<String> = env
        .staged_files()
        .iter()
        .map(|f| {
            f.strip_prefix(&bucket)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_blocked_by_unreachable_staging_says_so_and_its_owner_can_abandon_it() {
    let mut env = Env::new("e2e-cleanup-blocked", 16).await;
    // Staging through an endpoint of the test's own, bound in the S3 Secret, that it can stop.
    let s3 = env.lab.info.s3.clone();
    let fwd = Forwarder::start(&host_port(&s3.endpoint)).await;
    let endpoint = format!("http://127.0.0.1:{}", fwd.port);
    replace_secret(
        &env,
        secret(
            S3_SECRET,
            &[
                ("accessKeyId", &s3.access_key),
                ("secretAccessKey", &s3.secret_key),
                ("endpoint", &endpoint),
                ("bucket", &s3.bucket),
            ],
        ),
    )
    .await;
    env.start_sim();
    env.start_controller();
    let mut vmm = with_fault(env.migration("stuck"), "import=permanent@30%");
    vmm.spec.staging.endpoint = endpoint.clone();
    let vmm = env.create(&vmm).await;
    let failed = env.wait_phase("stuck", Phase::Failed, 180).await;
    assert_eq!(last_failure(&failed).0, "ImportFailed");
    let staged = staged_keys(&env);
    assert!(!staged.is_empty(), "the failure keeps what it staged");
    assert!(fwd.connections() > 0, "staging went through the forwarder");

    // The CDI copy of the S3 keys did not outlive the failure.
    let secrets: Api<Secret> = env.ns.api();
    assert!(
        secrets
            .get_opt(&secret::s3_secret_name(&vmm))
            .await
            .unwrap()
            .is_none(),
        "{} deleted when the migration failed",
        secret::s3_secret_name(&vmm)
    );

    // Staging goes away; the migration is deleted.
    drop(fwd);
    env.api()
        .delete("stuck", &Default::default())
        .await
        .unwrap();
    let blocked = env
        .wait_for("stuck", "CleanupBlocked while deleting", 60, |v| {
            v.metadata.deletion_timestamp.is_some()
                && v.condition(ConditionType::Ready)
                    .is_some_and(|c| c.reason == Reason::CleanupBlocked)
        })
        .await;
    let ready = blocked.condition(ConditionType::Ready).unwrap();
    assert!(
        ready.message.contains(names::ABANDON_CLEANUP_ANNOTATION),
        "the way out is named: {}",
        ready.message
    );
    assert!(!ready.message.contains(&s3.secret_key));
    env.wait_event("stuck", "CleanupBlocked").await;
    // Everything but staging went: no DataVolume of the migration is left.
    let dvs: Api<DataVolume> = env.ns.api();
    eventually(
        "the migration's DataVolumes gone",
        std::time::Duration::from_secs(30),
        || async {
            let left = dvs.list(&ListParams::default()).await.ok()?.items;
            left.is_empty().then_some(())
        },
    )
    .await
    .unwrap();
    assert!(
        env.api().get_opt("stuck").await.unwrap().is_some(),
        "the finalizer holds while staging is blocked"
    );

    // The owner lets it go.
    env.api()
        .patch(
            "stuck",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"annotations": {
                names::ABANDON_CLEANUP_ANNOTATION: names::ABANDON_CLEANUP_VALUE,
            }}})),
        )
        .await
        .unwrap();
    env.wait_gone("stuck", 60).await;
    env.wait_event("stuck", "CleanupAbandoned").await;
    let listed = event_notes(&env, "stuck", "CleanupAbandoned")
        .await
        .join(" ");
    for key in &staged {
        assert!(
            listed.contains(&format!("s3://{}/{key}", s3.bucket)),
            "{key} is listed as left behind: {listed}"
        );
    }
    assert!(!listed.contains(&s3.secret_key) && !listed.contains(&s3.access_key));
    assert_eq!(staged_keys(&env), staged, "left behind, as listed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_is_fixed_while_running_and_a_retry_after_a_change_starts_over_and_removes_the_old_copies()
 {
    let mut env = Env::new("e2e-cleanup-moved", 16).await;
    env.start_sim();
    env.start_controller();
    env.create(&with_fault(env.migration("moved"), "import=permanent@30%"))
        .await;
    env.wait_phase("moved", Phase::Importing, 180).await;
    // While it runs, admission refuses a new place, naming the field.
    let refused = env
        .api()
        .patch(
            "moved",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"staging": {"prefix": "e2e-moved"}}})),
        )
        .await
        .expect_err("spec.staging is fixed while the migration runs");
    assert!(
        refused.to_string().contains("spec.staging"),
        "the refusal names the field: {refused}"
    );
    env.wait_phase("moved", Phase::Failed, 180).await;
    let old = staged_keys(&env);
    assert!(
        !old.is_empty(),
        "the failure keeps what it staged under e2e/"
    );

    // Settled, it may take a new place; the retry starts over there.
    env.annotate("moved", FAULT, None).await;
    env.patch_spec(
        "moved",
        serde_json::json!({"staging": {"prefix": "e2e-moved"}, "retry": 1}),
    )
    .await;
    let done = env
        .wait_for("moved", "the retry to end", 240, |v| {
            v.status.as_ref().is_some_and(|s| s.attempts >= 2) && v.phase().is_terminal()
        })
        .await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    let history: Vec<Phase> = done
        .status
        .as_ref()
        .unwrap()
        .history
        .iter()
        .map(|h| h.phase)
        .collect();
    assert_eq!(
        history.iter().filter(|p| **p == Phase::Preparing).count(),
        2,
        "the retry started over: {history:?}"
    );
    assert!(
        staged_keys(&env).is_empty(),
        "nothing is left at the old place: {:?}",
        staged_keys(&env)
    );
    assert!(
        env.staged_files_under("e2e-moved").is_empty(),
        "nor at the new one, once Succeeded"
    );
}
