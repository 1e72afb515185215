//! Only what ferry made is ferry's: a namespace editor who gives an object ferry's labels and an
//! owner reference to the migration — before the controller sees the migration, or while it
//! runs — does not make it ferry's. Each forged child (conversion Job, DataVolume, verification
//! Job, VirtualMachine) is a `TargetConflict` naming it; nothing is booted, the forged object is
//! left as it was, and a migration that succeeds records the uid of every child it created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_controller::apis::cdi::DataVolume;
use ferry_controller::apis::kubevirt::{VirtualMachine, VirtualMachineInstance};
use ferry_crds::{Phase, VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};

/// The metadata a forger copies from ferry's children: the migration's labels (name and uid)
/// and a controller owner reference to it.
fn forged_meta(vmm: &VirtualMachineMigration, name: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "labels": {
            names::MIGRATION_LABEL: vmm.name_any(),
            names::MIGRATION_UID_LABEL: vmm.uid().unwrap(),
            "app.kubernetes.io/managed-by": "ferry-controller",
        },
        "ownerReferences": [{
            "apiVersion": VirtualMachineMigration::api_version(&()),
            "kind": "VirtualMachineMigration",
            "name": vmm.name_any(),
            "uid": vmm.uid().unwrap(),
            "controller": true,
        }],
    })
}

/// A Job under `name` that "succeeds" without doing anything.
fn forged_job(vmm: &VirtualMachineMigration, name: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": forged_meta(vmm, name),
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "verify", "image": "busybox", "command": ["true"]}],
        }}},
    }))
    .unwrap()
}

/// A blank DataVolume under `name`: "imports" nothing of the source.
fn forged_dv(vmm: &VirtualMachineMigration, name: &str) -> DataVolume {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": forged_meta(vmm, name),
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "16Mi"}}}},
    }))
    .unwrap()
}

/// A VirtualMachine under `name`, to be started.
fn forged_vm(vmm: &VirtualMachineMigration, name: &str) -> VirtualMachine {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": forged_meta(vmm, name),
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
    }))
    .unwrap()
}

/// The migration `name` created while no controller runs (its uid is what a forger copies).
async fn created_unseen(env: &Env, name: &str) -> VirtualMachineMigration {
    env.create(&env.migration(name)).await
}

/// Starts the sim and the controller, waits for the migration to fail and checks the common
/// outcome: `TargetConflict` naming `kind name` as not ferry's, the source never powered off,
/// no VirtualMachineInstance, the forged object not recorded as a child.
async fn fails_on_the_forgery(env: &mut Env, vmm: &str, kind: &str, name: &str) {
    env.start_sim();
    env.start_controller();
    let v = env.wait_phase(vmm, Phase::Failed, 180).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "TargetConflict", "{message}");
    assert!(
        message.contains(&format!("{kind} {name}")) && message.contains("ferry did not create it"),
        "names the forged object and why: {message}"
    );
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "refused before the source was touched"
    );
    let vmis: Api<VirtualMachineInstance> = env.ns.api();
    assert!(
        vmis.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "nothing booted"
    );
    let children = &v.status.as_ref().unwrap().children;
    assert!(
        !children.iter().any(|c| c.kind == kind && c.name == name),
        "the forged {kind} is not recorded as ferry's: {children:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_conversion_job_is_a_conflict_and_left_alone() {
    let mut env = Env::new("e2e-forge-job", 16).await;
    let vmm = created_unseen(&env, "fj").await;
    let jobs: Api<Job> = env.ns.api();
    let name = names::job_name(&vmm);
    let made = jobs
        .create(&PostParams::default(), &forged_job(&vmm, &name))
        .await
        .unwrap();
    fails_on_the_forgery(&mut env, "fj", "Job", &name).await;
    let still = jobs.get(&name).await.unwrap();
    assert_eq!(still.uid(), made.uid(), "not deleted");
    assert_eq!(still.spec, made.spec, "not changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_datavolume_is_a_conflict_and_left_alone() {
    let mut env = Env::new("e2e-forge-dv", 16).await;
    let vmm = created_unseen(&env, "fd").await;
    let dvs: Api<DataVolume> = env.ns.api();
    let name = names::datavolume_name(&vmm, 0);
    let made = dvs
        .create(&PostParams::default(), &forged_dv(&vmm, &name))
        .await
        .unwrap();
    fails_on_the_forgery(&mut env, "fd", "DataVolume", &name).await;
    let still = dvs.get(&name).await.unwrap();
    assert_eq!(still.uid(), made.uid(), "not deleted");
    assert!(
        still
            .spec
            .source
            .as_ref()
            .is_some_and(|s| s.s3.is_none() && s.rest.contains_key("blank")),
        "not changed: {:?}",
        still.spec
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_verification_job_is_a_conflict_and_left_alone() {
    let mut env = Env::new("e2e-forge-verify", 16).await;
    let vmm = created_unseen(&env, "fv").await;
    let jobs: Api<Job> = env.ns.api();
    let name = names::verify_job_name(&vmm);
    let made = jobs
        .create(&PostParams::default(), &forged_job(&vmm, &name))
        .await
        .unwrap();
    fails_on_the_forgery(&mut env, "fv", "Job", &name).await;
    assert_eq!(jobs.get(&name).await.unwrap().uid(), made.uid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_virtual_machine_is_a_conflict_and_left_alone() {
    let mut env = Env::new("e2e-forge-vm", 16).await;
    let vmm = created_unseen(&env, "fm").await;
    let vms: Api<VirtualMachine> = env.ns.api();
    // The migration's target name: from the source VM's name in the spec.
    let name = names::vm_name(&vmm);
    let made = vms
        .create(&PostParams::default(), &forged_vm(&vmm, &name))
        .await
        .unwrap();
    fails_on_the_forgery(&mut env, "fm", "VirtualMachine", &name).await;
    let still = vms.get(&name).await.unwrap();
    assert_eq!(still.uid(), made.uid());
    assert_eq!(
        still.spec.run_strategy.as_deref(),
        Some("Halted"),
        "not started"
    );
}

/// The forgery the issue found: a verification Job that runs `true`, put in place while the
/// disks are being converted. Without ferry's record it is a conflict in Importing; the VM is
/// never created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_job_forged_during_the_migration_never_verifies_it() {
    let mut env = Env::new("e2e-forge-mid", 16).await;
    env.start_controller();
    let vmm = env.create(&env.migration("mid")).await;
    // No sim yet: the converter Job is made but no pod of it runs, so the migration holds in
    // Converting until the forgery is in place (a 16 MiB copy at the sim's speed is over before a
    // poll could catch Converting).
    env.wait_phase("mid", Phase::Converting, 120).await;
    let jobs: Api<Job> = env.ns.api();
    let name = names::verify_job_name(&vmm);
    let made = jobs
        .create(&PostParams::default(), &forged_job(&vmm, &name))
        .await
        .unwrap();
    env.start_sim();
    let v = env.wait_terminal("mid", 300).await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "TargetConflict", "{message}");
    assert!(message.contains(&format!("Job {name}")), "{message}");
    assert_eq!(
        v.status
            .as_ref()
            .unwrap()
            .last_failure
            .as_ref()
            .unwrap()
            .phase,
        Phase::Importing
    );
    let vms: Api<VirtualMachine> = env.ns.api();
    assert!(
        vms.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no VM created"
    );
    assert_eq!(
        jobs.get(&name).await.unwrap().uid(),
        made.uid(),
        "left alone"
    );
}

/// The other side: what ferry made, it recorded with the uid its create answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_records_the_uid_of_every_child_it_created() {
    let mut env = Env::new("e2e-forge-ledger", 16).await;
    env.start_sim();
    env.start_controller();
    let vmm = env.create(&env.migration("led")).await;
    let v = env.wait_terminal("led", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let children = v.status.as_ref().unwrap().children.clone();
    let uid_of = |kind: &str, name: &str| {
        children
            .iter()
            .find(|c| c.kind == kind && c.name == name)
            .map(|c| c.uid.clone())
    };
    let dvs: Api<DataVolume> = env.ns.api();
    let dv = names::datavolume_name(&vmm, 0);
    assert_eq!(uid_of("DataVolume", &dv), dvs.get(&dv).await.unwrap().uid());
    let vms: Api<VirtualMachine> = env.ns.api();
    let vm = vms.list(&Default::default()).await.unwrap().items.remove(0);
    assert_eq!(uid_of("VirtualMachine", &vm.name_any()), vm.uid());
    for name in [names::job_name(&vmm), names::verify_job_name(&vmm)] {
        assert!(uid_of("Job", &name).is_some(), "Job {name}: {children:?}");
    }
    // The CDI copy of the S3 keys is deleted when the migration ends, and forgotten with it.
    let secret = ferry_controller::children::secret::s3_secret_name(&vmm);
    assert_eq!(uid_of("Secret", &secret), None, "{children:?}");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = env.ns.api();
    assert!(secrets.get_opt(&secret).await.unwrap().is_none());
    let stamp = ferry_controller::children::proof::STAMP_ANNOTATION;
    assert!(
        dvs.get(&dv)
            .await
            .unwrap()
            .annotations()
            .contains_key(stamp),
        "stamped"
    );
}

/// A report counts only from the verification Job's own pod. Here the Job's pods never run (the
/// sim, the node, is gone once the import is done); a pod made by someone else — the Job's
/// labels, the Job as its controller, the very containers of its template, and a decoy claim
/// mounted besides — "succeeds" with a report of exactly the staged checksums, and the Job is
/// marked complete as the Job controller would count that pod. ferry reads no report from it:
/// the migration fails, no VM made. Without the comparison of the pod's spec with the Job's
/// template the decoy's report verifies the import.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_from_a_pod_that_is_not_the_jobs_own_verifies_nothing() {
    use k8s_openapi::api::core::v1::{Pod, PodSpec, Volume, VolumeMount};
    let mut env = Env::new("e2e-forge-decoy", 16).await;
    // Imports of 16 s: the migration is paused while one runs.
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    let vmm = env.create(&env.migration("decoyed")).await;
    env.wait_phase("decoyed", Phase::Importing, 180).await;
    env.patch_spec("decoyed", serde_json::json!({"paused": true}))
        .await;
    let dvs: Api<DataVolume> = env.ns.api();
    let dv = names::datavolume_name(&vmm, 0);
    ferry_harness::eventually(
        "the import to finish",
        std::time::Duration::from_secs(180),
        || async {
            dvs.get_opt(&dv)
                .await
                .ok()
                .flatten()
                .filter(|d| d.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
        },
    )
    .await
    .unwrap();
    // No node from here on: no pod of the verification Job will run.
    env.sim = None;
    env.patch_spec("decoyed", serde_json::json!({"paused": false}))
        .await;
    let jobs: Api<Job> = env.ns.api();
    let name = names::verify_job_name(&vmm);
    let job = ferry_harness::eventually(
        "the verification Job",
        std::time::Duration::from_secs(120),
        || async { jobs.get_opt(&name).await.ok().flatten() },
    )
    .await
    .unwrap();

    // The decoy: the template's pod, and a claim of the decoy's choosing mounted besides.
    let template = job.spec.as_ref().unwrap().template.clone();
    let mut spec: PodSpec = template.spec.clone().unwrap();
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: "decoy".into(),
        persistent_volume_claim: Some(
            k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                claim_name: "decoy-claim".into(),
                read_only: Some(true),
            },
        ),
        ..Volume::default()
    });
    spec.containers[0]
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(VolumeMount {
            name: "decoy".into(),
            mount_path: "/decoy".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    let container = spec.containers[0].name.clone();
    let mut meta = template.metadata.clone().unwrap_or_default();
    meta.name = Some(format!("{name}-decoy"));
    meta.owner_references = Some(vec![job.controller_owner_ref(&()).unwrap()]);
    let pods: Api<Pod> = env.ns.api();
    let decoy = pods
        .create(
            &PostParams::default(),
            &Pod {
                metadata: meta,
                spec: Some(spec),
                ..Pod::default()
            },
        )
        .await
        .unwrap();
    // Its report: exactly the checksums ferry staged (what would let the import pass).
    let staged = env.api().get("decoyed").await.unwrap();
    let mut report = format!("{}\n", ferry_convert::verify::RESULT_HEADER);
    for d in &staged.status.as_ref().unwrap().disks {
        report.push_str(&format!(
            "{}:{}\n",
            d.index,
            d.raw_checksum.as_deref().unwrap()
        ));
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    pods.patch_status(
        &decoy.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"status": {
            "phase": "Succeeded",
            "containerStatuses": [{
                "name": container, "image": decoy.spec.as_ref().unwrap().containers[0].image,
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": report,
                    "startedAt": now, "finishedAt": now}},
            }],
        }})),
    )
    .await
    .unwrap();
    // The Job controller counts a pod it controls: the Job completes on the decoy's success.
    let status = |s: serde_json::Value| kube::api::Patch::Merge(serde_json::json!({ "status": s }));
    jobs.patch_status(
        &name,
        &Default::default(),
        &status(serde_json::json!({"startTime": now, "active": 1})),
    )
    .await
    .unwrap();
    let cond = |t: &str| {
        serde_json::json!({"type": t, "status": "True", "reason": "CompletionsReached",
            "message": "Reached expected number of succeeded pods", "lastProbeTime": now,
            "lastTransitionTime": now})
    };
    jobs.patch_status(
        &name,
        &Default::default(),
        &status(
            serde_json::json!({"active": 0, "ready": 0, "terminating": 0, "succeeded": 1,
            "completionTime": now,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
        ),
    )
    .await
    .unwrap();

    let v = env.wait_terminal("decoyed", 180).await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let (reason, message) = last_failure(&v);
    assert!(
        message.contains("no pod of it that ran ferry's verify program reported checksums"),
        "{reason}: {message}"
    );
    let vms: Api<VirtualMachine> = env.ns.api();
    assert!(
        vms.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no VM made on the decoy's word"
    );
}
