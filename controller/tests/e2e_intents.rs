//! End to end, the operator's intents and failure paths: cancel during Importing, a transient
//! import fault retried, a permanent one failing and then resumed by `spec.retry`, a delete in
//! the middle of Converting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ferry_controller::apis::cdi::DataVolume;
use ferry_controller::apis::kubevirt::VirtualMachine;
use ferry_crds::{ConditionStatus, ConditionType, Phase, Reason};
use ferry_harness::eventually;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;

async fn count<K>(api: &Api<K>) -> usize
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.list(&ListParams::default()).await.unwrap().items.len()
}

/// Waits until the namespace holds no Job, DataVolume, VirtualMachine or CDI Secret.
async fn wait_children_gone(env: &Env) {
    let jobs: Api<Job> = env.ns.api();
    let dvs: Api<DataVolume> = env.ns.api();
    let vms: Api<VirtualMachine> = env.ns.api();
    let secrets: Api<Secret> = env.ns.api();
    eventually("children to be gone", Duration::from_secs(60), || async {
        let cdi_secrets = secrets
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|s| {
                s.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.ends_with("-staging-s3"))
            })
            .count();
        (count(&jobs).await == 0
            && count(&dvs).await == 0
            && count(&vms).await == 0
            && cdi_secrets == 0)
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_importing_cleans_up_and_powers_the_source_back_on() {
    let mut env = Env::new("e2e-cancel", 64).await;
    env.sim_args = vec!["--throughput-mib".into(), "2".into()];
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("cancel-me")).await;
    env.wait_for("cancel-me", "an import in progress", 240, |v| {
        v.phase() == Phase::Importing
            && v.status.as_ref().is_some_and(|s| {
                s.disks
                    .iter()
                    .any(|d| d.import_phase.as_deref() == Some("ImportInProgress"))
            })
    })
    .await;
    assert_eq!(env.power_state().await, "poweredOff");
    env.patch_spec("cancel-me", serde_json::json!({"cancel": true}))
        .await;
    let v = env.wait_phase("cancel-me", Phase::Cancelled, 120).await;
    let ready = v.condition(ConditionType::Ready).unwrap();
    assert_eq!(
        (ready.status, ready.reason),
        (ConditionStatus::False, Reason::Cancelled)
    );
    assert_eq!(
        v.condition(ConditionType::DiskImported).unwrap().reason,
        Reason::Cancelled
    );
    wait_children_gone(&env).await;
    assert!(
        env.staged_files().is_empty(),
        "staging left: {:?}",
        env.staged_files()
    );
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "restorePowerState OnCancel powers the source back on"
    );
    env.wait_event("cancel-me", "Cancelled").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_import_fault_is_retried_and_the_migration_succeeds() {
    let mut env = Env::new("e2e-transient", 64).await;
    env.sim_args = vec!["--throughput-mib".into(), "32".into()];
    env.start_sim();
    env.start_controller();
    let vmm = with_fault(env.migration("flaky"), "import=transient@40%");
    env.create(&vmm).await;
    let v = env.wait_terminal("flaky", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert!(all_conditions_true(&v));
    let dv = Api::<DataVolume>::namespaced(env.ns.client.clone(), &env.ns.name)
        .get(&dv_name("flaky", 0))
        .await
        .unwrap();
    assert_eq!(
        dv.status.unwrap().restart_count,
        1,
        "CDI restarted the importer once"
    );
    env.wait_event("flaky", "TransientError").await;
    assert_eq!(
        v.status.unwrap().attempts,
        1,
        "no operator retry was needed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_import_fault_fails_and_a_raised_retry_resumes_from_importing() {
    let mut env = Env::new("e2e-retry", 64).await;
    env.sim_args = vec!["--throughput-mib".into(), "32".into()];
    env.start_sim();
    env.start_controller();
    let creations = Creations::watch(&env).await;
    let vmm = with_fault(env.migration("broken"), "import=permanent@30%");
    env.create(&vmm).await;
    let v = env
        .wait_for("broken", "broken to fail", 300, |v| v.phase().is_terminal())
        .await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!(
        (f.phase, f.reason, f.retriable),
        (Phase::Importing, Reason::ImportFailed, true)
    );
    let c = v.condition(ConditionType::DiskImported).unwrap();
    assert_eq!(
        (c.status, c.reason),
        (ConditionStatus::False, Reason::ImportFailed)
    );
    env.wait_event("broken", "ImportFailed").await;

    env.annotate("broken", FAULT, None).await;
    env.patch_spec("broken", serde_json::json!({"retry": 1}))
        .await;
    let v = env
        .wait_for("broken", "broken to succeed after the retry", 300, |v| {
            v.phase() == Phase::Succeeded
        })
        .await;
    let s = v.status.clone().unwrap();
    assert_eq!((s.attempts, s.retry_observed), (2, 1));
    let phases: Vec<Phase> = s.history.iter().map(|h| h.phase).collect();
    let failed_at = phases.iter().position(|p| *p == Phase::Failed).unwrap();
    assert_eq!(
        phases[failed_at + 1],
        Phase::Importing,
        "resumed at the failed checkpoint: {phases:?}"
    );
    assert_eq!(
        phases.iter().filter(|p| **p == Phase::Converting).count(),
        1,
        "no second conversion: {phases:?}"
    );
    env.wait_event("broken", "RetryRequested").await;
    let mut jobs: Vec<String> = creations
        .names()
        .into_iter()
        .filter(|n| n.starts_with("Job/"))
        .collect();
    jobs.sort();
    assert_eq!(
        jobs,
        vec![
            "Job/broken-convert".to_owned(),
            "Job/broken-verify".to_owned()
        ],
        "one conversion, one verification of the second import"
    );
    let dups = creations.duplicates();
    assert_eq!(
        dups,
        vec![
            (format!("DataVolume/{}", dv_name("broken", 0)), 2),
            // The CDI copy of the S3 keys goes when the migration fails (issue 22, section 6);
            // the import that resumes makes it again.
            ("Secret/broken-staging-s3".to_owned(), 2),
        ],
        "only the failed DataVolume and the CDI Secret were made again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_migration_mid_converting_cleans_up_everything() {
    let mut env = Env::new("e2e-delete", 64).await;
    env.start_sim();
    env.start_controller();
    // Every converter attempt fails and is retried by the Job: Converting lasts.
    let vmm = with_fault(env.migration("doomed"), "convert=always");
    env.create(&vmm).await;
    env.wait_phase("doomed", Phase::Converting, 180).await;
    let jobs: Api<Job> = env.ns.api();
    eventually("the conversion Job", Duration::from_secs(60), || async {
        jobs.get_opt("doomed-convert").await.ok().flatten()
    })
    .await
    .unwrap();
    env.api()
        .delete("doomed", &Default::default())
        .await
        .unwrap();
    env.wait_gone("doomed", 120).await;
    wait_children_gone(&env).await;
    assert!(
        env.staged_files().is_empty(),
        "staging left: {:?}",
        env.staged_files()
    );
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "deleting restores the power (OnCancel)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_migration_takes_no_step_until_resumed() {
    let mut env = Env::new("e2e-paused", 16).await;
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("held");
    vmm.spec.paused = true;
    env.create(&vmm).await;
    let v = env
        .wait_for("held", "the paused status", 60, |v| {
            v.condition(ConditionType::Ready)
                .is_some_and(|c| c.reason == Reason::Paused)
        })
        .await;
    assert_eq!(v.phase(), Phase::Pending, "no step while paused");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(env.get("held").await.phase(), Phase::Pending);
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "the source is untouched while paused"
    );
    env.patch_spec("held", serde_json::json!({"paused": false}))
        .await;
    let v = env.wait_terminal("held", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_agent_that_never_connects_fails_validating_with_its_reason() {
    let mut env = Env::new("e2e-agent", 16).await;
    env.extra_controller_args = vec!["--agent-timeout".into(), "3s".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = with_fault(env.migration("silent"), "agent=permanent");
    // The default readiness (Running) needs no agent: this migration asks for one.
    vmm.spec.target.template.readiness = Some(ferry_crds::Readiness::AgentConnected);
    env.create(&vmm).await;
    let v = env.wait_terminal("silent", 300).await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!(
        (f.phase, f.reason),
        (Phase::Validating, Reason::GuestNotReady)
    );
    let c = v.condition(ConditionType::GuestReady).unwrap();
    assert_eq!(
        (c.status, c.reason),
        (ConditionStatus::False, Reason::GuestNotReady)
    );
    assert_eq!(
        v.condition(ConditionType::VMStarted).unwrap().status,
        ConditionStatus::True
    );
    env.wait_event("silent", "GuestNotReady").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_converter_pod_is_retried_by_its_job_and_the_migration_succeeds() {
    let mut env = Env::new("e2e-convert-once", 16).await;
    env.start_sim();
    env.start_controller();
    let vmm = with_fault(env.migration("bumpy"), "convert=once");
    env.create(&vmm).await;
    let v = env.wait_terminal("bumpy", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    env.wait_event("bumpy", "TransientError").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_conversion_is_retried_from_converting_with_a_new_job() {
    let mut env = Env::new("e2e-convert-retry", 16).await;
    env.start_sim();
    env.start_controller();
    let creations = Creations::watch(&env).await;
    let vmm = with_fault(env.migration("reconvert"), "convert=permanent");
    env.create(&vmm).await;
    let v = env
        .wait_for("reconvert", "reconvert to fail", 300, |v| {
            v.phase().is_terminal()
        })
        .await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!(
        (f.phase, f.reason),
        (Phase::Converting, Reason::ConversionFailed)
    );
    env.annotate("reconvert", FAULT, None).await;
    env.patch_spec("reconvert", serde_json::json!({"retry": 1}))
        .await;
    let v = env
        .wait_for("reconvert", "reconvert to succeed", 300, |v| {
            v.phase() == Phase::Succeeded
        })
        .await;
    let phases: Vec<Phase> = v.status.unwrap().history.iter().map(|h| h.phase).collect();
    let failed_at = phases.iter().position(|p| *p == Phase::Failed).unwrap();
    assert_eq!(phases[failed_at + 1], Phase::Converting, "{phases:?}");
    assert_eq!(
        creations.duplicates(),
        vec![("Job/reconvert-convert".to_owned(), 2)],
        "only the failed Job was made again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vmi_that_fails_once_is_restarted_and_the_migration_succeeds() {
    let mut env = Env::new("e2e-vmi-once", 16).await;
    env.start_sim();
    env.start_controller();
    let vmm = with_fault(env.migration("reboot"), "vmi=once");
    env.create(&vmm).await;
    let v = env.wait_terminal("reboot", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert!(all_conditions_true(&v));
}
