//! ferry-sim against the real lab: Jobs run as processes, DataVolumes import from S3,
//! VMs get VMIs, faults strike where asked, and a restarted sim carries on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{WAIT, World, condition, pattern, wait_for};
use ferry_harness::eventually;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{CustomResourceExt, ResourceExt};

fn dv_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
        "datavolumes",
    )
}

fn vm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

fn dyn_api(w: &World, ar: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(w.client(), &w.ns.name, ar)
}

fn json(o: &DynamicObject) -> serde_json::Value {
    serde_json::to_value(o).unwrap()
}

async fn create(api: &Api<DynamicObject>, v: serde_json::Value) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap()
}

fn job(name: &str, script: &str, backoff_limit: i32) -> Job {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "ferry"}},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "convert", "image": "ferry-converter:dev",
                    "command": ["/bin/sh", "-c", script],
                    "env": [
                        {"name": "OUT_DIR", "value": "$(SCRATCH)"},
                        {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "accessKeyId"}}}
                    ]
                }]
            }}
        }
    }))
    .unwrap()
}

fn is_true(job: &Job, t: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == t && c.status == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_its_command_with_its_environment_and_completes() {
    let w = World::new("sim-job-ok", &["--speed", "5"]).await;
    w.s3_secret("s3").await;
    let out = w.dir.join("job-out.txt");
    let mut j = job(
        "convert-ok",
        &format!("echo \"$MY_NS $KEY\" > {}; echo converted", out.display()),
        0,
    );
    // `$(SCRATCH)` stays as written when undefined, as Kubernetes leaves it.
    let jobs: Api<Job> = w.ns.api();
    j = jobs.create(&PostParams::default(), &j).await.unwrap();
    let done = wait_for(&jobs, &j.name_any(), "job Complete", |j| {
        is_true(j, "Complete")
    })
    .await;
    let st = done.status.clone().unwrap();
    assert_eq!(
        (st.succeeded, st.failed.unwrap_or(0), st.active.unwrap_or(0)),
        (Some(1), 0, 0)
    );
    assert!(st.start_time.is_some() && st.completion_time.is_some());
    let types: Vec<_> = st
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, vec!["SuccessCriteriaMet", "Complete"]);
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        written.trim(),
        format!("{} {}", w.ns.name, w.lab.info.s3.access_key)
    );
    let log = w
        .dir
        .join("volumes/_jobs")
        .join(&w.ns.name)
        .join("convert-ok/attempt-1.log");
    assert!(std::fs::read_to_string(log).unwrap().contains("converted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_is_retried_up_to_its_backoff_limit_then_fails() {
    let w = World::new("sim-job-fail", &["--speed", "20"]).await;
    w.s3_secret("s3").await;
    let jobs: Api<Job> = w.ns.api();
    jobs.create(
        &PostParams::default(),
        &job("convert-bad", "echo no disk here >&2; exit 3", 1),
    )
    .await
    .unwrap();
    let done = wait_for(&jobs, "convert-bad", "job Failed", |j| is_true(j, "Failed")).await;
    let st = done.status.unwrap();
    assert_eq!((st.failed, st.succeeded.unwrap_or(0)), (Some(2), 0));
    let conds = st.conditions.unwrap();
    let types: Vec<_> = conds.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, vec!["FailureTarget", "Failed"]);
    assert_eq!(conds[1].reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(st.completion_time.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_a_missing_secret_waits_and_then_runs() {
    let w = World::new("sim-job-secret", &["--speed", "10"]).await;
    let jobs: Api<Job> = w.ns.api();
    jobs.create(&PostParams::default(), &job("convert-wait", "echo ok", 0))
        .await
        .unwrap();
    wait_for(&jobs, "convert-wait", "job active", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(1)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!is_true(
        &jobs.get("convert-wait").await.unwrap(),
        "Complete"
    ));
    w.s3_secret("s3").await;
    wait_for(&jobs, "convert-wait", "job Complete", |j| {
        is_true(j, "Complete")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_convert_fault_fails_one_attempt_and_the_job_recovers() {
    let w = World::new("sim-job-fault", &["--speed", "20"]).await;
    w.s3_secret("s3").await;
    let jobs: Api<Job> = w.ns.api();
    let mut j = job("convert-once", "echo ok", 2);
    j.metadata.annotations = Some(
        [(
            "sim.ferry.example/fault".to_string(),
            "convert=once".to_string(),
        )]
        .into(),
    );
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let done = wait_for(&jobs, "convert-once", "job Complete", |j| {
        is_true(j, "Complete")
    })
    .await;
    assert_eq!(done.status.as_ref().unwrap().failed, Some(1));
    assert_eq!(
        done.annotations()
            .get("sim.ferry.example/fired")
            .map(String::as_str),
        Some("convert")
    );
}

fn datavolume(name: &str, url: &str, annotations: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "source": {"s3": {"url": url, "secretRef": "s3"}},
            "storage": {"resources": {"requests": {"storage": "64Mi"}}}
        }
    })
}

fn phase(o: &DynamicObject) -> String {
    json(o)
        .pointer("/status/phase")
        .and_then(|p| p.as_str())
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datavolume_imports_the_staged_object_with_observable_progress() {
    let w = World::new("sim-dv-ok", &["--speed", "1", "--throughput-mib", "4"]).await;
    w.s3_secret("s3").await;
    let bytes = pattern(8 << 20, 7);
    let url = w.stage("disk-0.img", &bytes, None).await;
    let dvs = dyn_api(&w, &dv_resource());
    create(&dvs, datavolume("disk-0", &url, serde_json::json!({}))).await;

    // Progress strings strictly between 0% and 100% while the copy runs, as CDI shows them.
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let done = eventually("DataVolume Succeeded", WAIT, || {
        let dvs = dvs.clone();
        let seen = &seen;
        async move {
            let dv = dvs.get("disk-0").await.ok()?;
            if let Some(p) = json(&dv)
                .pointer("/status/progress")
                .and_then(|p| p.as_str())
            {
                seen.lock().unwrap().push(p.to_string());
            }
            (phase(&dv) == "Succeeded").then_some(dv)
        }
    })
    .await
    .unwrap();
    let seen = seen.into_inner().unwrap();
    let mid: Vec<f64> = seen
        .iter()
        .filter_map(|p| p.strip_suffix('%')?.parse().ok())
        .filter(|p| *p > 0.0 && *p < 100.0)
        .collect();
    assert!(
        !mid.is_empty(),
        "no progress between 0 and 100% seen: {seen:?}"
    );
    assert!(
        seen.iter().all(|p| p == "N/A"
            || (p.ends_with('%') && p.split('.').nth(1).is_some_and(|d| d.len() <= 3))),
        "{seen:?}"
    );

    let v = json(&done);
    assert_eq!(v["status"]["progress"], "100.0%");
    assert_eq!(v["status"]["claimName"], "disk-0");
    assert_eq!(condition(&v, "Ready").unwrap().0, "True");
    assert_eq!(
        condition(&v, "Bound").unwrap(),
        ("True".into(), "Bound".into(), "PVC disk-0 Bound".into())
    );
    assert_eq!(condition(&v, "Running").unwrap().1, "Completed");
    assert_eq!(std::fs::read(w.volume("disk-0")).unwrap(), bytes);

    let pvc =
        w.ns.api::<PersistentVolumeClaim>()
            .get("disk-0")
            .await
            .unwrap();
    let owner = &pvc.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("DataVolume", done.uid().unwrap().as_str(), Some(true))
    );
    assert_eq!(pvc.status.unwrap().phase.as_deref(), Some("Bound"));

    // Deleting the DataVolume takes its claim (GC) and its volume file (the sim) away.
    dvs.delete("disk-0", &DeleteParams::background())
        .await
        .unwrap();
    let path = w.volume("disk-0");
    eventually("volume file removed", WAIT, || {
        let gone = !path.exists();
        async move { gone.then_some(()) }
    })
    .await
    .unwrap();
}

/// CDI checks nothing of an S3 object (its `checksum` is for http sources): a staged object
/// whose `sha256` metadata lies is imported all the same. The stand-in is no kinder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_checksum_in_the_metadata_is_imported_all_the_same() {
    let w = World::new("sim-dv-sum", &["--speed", "10"]).await;
    w.s3_secret("s3").await;
    let bytes = pattern(1 << 20, 3);
    let url = w.stage("bad.img", &bytes, Some(&"0".repeat(64))).await;
    let dvs = dyn_api(&w, &dv_resource());
    create(&dvs, datavolume("bad", &url, serde_json::json!({}))).await;
    let dv = wait_for(&dvs, "bad", "DataVolume Succeeded", |d| {
        phase(d) == "Succeeded" || phase(d) == "Failed"
    })
    .await;
    assert_eq!(phase(&dv), "Succeeded");
    assert_eq!(std::fs::read(w.volume("bad")).unwrap(), bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_source_fails_with_a_reason() {
    let w = World::new("sim-dv-http", &["--speed", "10"]).await;
    let dvs = dyn_api(&w, &dv_resource());
    create(
        &dvs,
        serde_json::json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "web"},
            "spec": {"source": {"http": {"url": "http://127.0.0.1:1/x.img"}}, "storage": {}}
        }),
    )
    .await;
    let dv = wait_for(&dvs, "web", "DataVolume Failed", |d| phase(d) == "Failed").await;
    assert!(
        condition(&json(&dv), "Running")
            .unwrap()
            .2
            .contains("\"http\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_import_fault_restarts_the_importer_and_the_import_succeeds() {
    let w = World::new(
        "sim-dv-transient",
        &["--speed", "10", "--throughput-mib", "20"],
    )
    .await;
    w.s3_secret("s3").await;
    let bytes = pattern(4 << 20, 11);
    let url = w.stage("t.img", &bytes, None).await;
    let dvs = dyn_api(&w, &dv_resource());
    create(
        &dvs,
        datavolume(
            "t",
            &url,
            serde_json::json!({"sim.ferry.example/fault": "import=transient@40%"}),
        ),
    )
    .await;
    let failed = wait_for(&dvs, "t", "importer restart", |d| {
        json(d)["status"]["restartCount"] == 1
    })
    .await;
    let v = json(&failed);
    let (status, reason, message) = condition(&v, "Running").unwrap();
    if status == "False" {
        assert_eq!(reason, "Error");
        assert!(message.contains("40%"), "{message}");
    }
    assert_eq!(v["status"]["phase"], "ImportInProgress");
    let done = wait_for(&dvs, "t", "DataVolume Succeeded", |d| {
        phase(d) == "Succeeded"
    })
    .await;
    assert_eq!(json(&done)["status"]["restartCount"], 1);
    assert_eq!(
        done.annotations()
            .get("sim.ferry.example/fired")
            .map(String::as_str),
        Some("import")
    );
    assert_eq!(std::fs::read(w.volume("t")).unwrap(), bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_import_fault_fails_the_datavolume() {
    let w = World::new("sim-dv-permanent", &["--speed", "10"]).await;
    w.s3_secret("s3").await;
    let url = w.stage("p.img", &pattern(2 << 20, 5), None).await;
    let dvs = dyn_api(&w, &dv_resource());
    create(
        &dvs,
        datavolume(
            "p",
            &url,
            serde_json::json!({"sim.ferry.example/fault": "import=permanent@30%"}),
        ),
    )
    .await;
    let dv = wait_for(&dvs, "p", "DataVolume Failed", |d| phase(d) == "Failed").await;
    let v = json(&dv);
    assert_eq!(v["status"]["progress"], "30.00%");
    assert_eq!(condition(&v, "Running").unwrap().1, "Error");
    assert_eq!(condition(&v, "Ready").unwrap().0, "False");
    assert!(!w.volume("p").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_sim_resumes_an_import_it_was_killed_in() {
    let mut w = World::new("sim-dv-restart", &["--speed", "1", "--throughput-mib", "2"]).await;
    w.s3_secret("s3").await;
    let bytes = pattern(8 << 20, 13);
    let url = w.stage("r.img", &bytes, None).await;
    let dvs = dyn_api(&w, &dv_resource());
    create(&dvs, datavolume("r", &url, serde_json::json!({}))).await;
    wait_for(&dvs, "r", "import under way", |d| {
        json(d)["status"]["progress"]
            .as_str()
            .and_then(|p| p.strip_suffix('%'))
            .and_then(|p| p.parse::<f64>().ok())
            .is_some_and(|p| p > 5.0)
    })
    .await;
    w.restart_sim(1);
    let done = wait_for(&dvs, "r", "DataVolume Succeeded after the restart", |d| {
        phase(d) == "Succeeded"
    })
    .await;
    assert_eq!(
        json(&done)["status"]["restartCount"].as_i64().unwrap_or(0),
        0
    );
    assert_eq!(std::fs::read(w.volume("r")).unwrap(), bytes);
}

fn virtual_machine(
    name: &str,
    strategy: &str,
    claim: &str,
    annotations: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "runStrategy": strategy,
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": name}},
                "spec": {
                    "domain": {"cpu": {"cores": 1}, "memory": {"guest": "1Gi"},
                               "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
                    "volumes": [{"name": "root", "dataVolume": {"name": claim}}]
                }
            }
        }
    })
}

async fn blank_dv(w: &World, name: &str) {
    let dvs = dyn_api(w, &dv_resource());
    create(
        &dvs,
        serde_json::json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "16Mi"}}}}
        }),
    )
    .await;
    wait_for(&dvs, name, "blank DataVolume Succeeded", |d| {
        phase(d) == "Succeeded"
    })
    .await;
}

fn vm_printable(o: &DynamicObject) -> String {
    json(o)["status"]["printableStatus"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_that_runs_always_gets_a_running_vmi_with_its_agent_and_halted_removes_it() {
    let w = World::new("sim-vm", &["--speed", "5"]).await;
    blank_dv(&w, "root").await;
    let vms = dyn_api(&w, &vm_resource());
    let vmis = dyn_api(&w, &vmi_resource());
    let vm = create(
        &vms,
        virtual_machine("web", "Always", "root", serde_json::json!({})),
    )
    .await;

    let vmi = wait_for(&vmis, "web", "VMI AgentConnected", |v| {
        condition(&json(v), "AgentConnected").is_some_and(|c| c.0 == "True")
    })
    .await;
    let v = json(&vmi);
    assert_eq!(v["status"]["phase"], "Running");
    assert_eq!(v["status"]["nodeName"], "sim-node");
    assert_eq!(condition(&v, "Ready").unwrap().0, "True");
    let phases: Vec<&str> = v["status"]["phaseTransitionTimestamps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        vec!["Pending", "Scheduling", "Scheduled", "Running"]
    );
    let owner = &vmi.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("VirtualMachine", vm.uid().unwrap().as_str(), Some(true))
    );
    assert_eq!(v["spec"]["domain"]["cpu"]["cores"], 1);
    let vm = wait_for(&vms, "web", "VM Running", |v| vm_printable(v) == "Running").await;
    let vj = json(&vm);
    assert_eq!(
        (
            vj["status"]["created"].as_bool(),
            vj["status"]["ready"].as_bool()
        ),
        (Some(true), Some(true))
    );

    assert!(
        vmi.finalizers()
            .iter()
            .any(|f| f == "kubevirt.io/foregroundDeleteVirtualMachine"),
        "virt-controller's finalizer from the start"
    );

    vms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"runStrategy": "Halted"}})),
    )
    .await
    .unwrap();
    // The guest shuts down for its grace (30 s, KubeVirt's default, at speed 5: 6 s): the
    // instance is still there and Running, the VM Stopping.
    let stopping = wait_for(&vmis, "web", "VMI being deleted", |v| {
        v.metadata.deletion_timestamp.is_some()
    })
    .await;
    assert_eq!(json(&stopping)["status"]["phase"], "Running");
    wait_for(&vms, "web", "VM Stopping", |v| {
        vm_printable(v) == "Stopping"
    })
    .await;
    eventually("VMI deleted", WAIT, || {
        let vmis = vmis.clone();
        async move {
            vmis.get_opt("web")
                .await
                .ok()
                .and_then(|o| o.is_none().then_some(()))
        }
    })
    .await
    .unwrap();
    let vm = wait_for(&vms, "web", "VM Stopped", |v| vm_printable(v) == "Stopped").await;
    assert_eq!(json(&vm)["status"]["created"].as_bool(), Some(false));
}

/// A deleted VM stays Terminating while its instance stops for its own grace (the template's
/// `terminationGracePeriodSeconds`), then both are gone; an instance whose node is lost
/// (`stop=permanent`) never goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_vm_waits_for_its_instance_and_a_lost_node_keeps_it() {
    let w = World::new("sim-vm-stop", &["--speed", "5"]).await;
    blank_dv(&w, "root").await;
    let vms = dyn_api(&w, &vm_resource());
    let vmis = dyn_api(&w, &vmi_resource());
    let mut spec = virtual_machine("grace", "Always", "root", serde_json::json!({}));
    spec["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 10.into();
    create(&vms, spec).await;
    let vmi = wait_for(&vmis, "grace", "VMI Running", |v| {
        json(v)["status"]["phase"] == "Running"
    })
    .await;
    assert_eq!(json(&vmi)["spec"]["terminationGracePeriodSeconds"], 10);
    let vm = vms.get("grace").await.unwrap();
    assert!(
        vm.finalizers()
            .iter()
            .any(|f| f == "kubevirt.io/virtualMachineControllerFinalize")
    );
    vms.delete("grace", &DeleteParams::background())
        .await
        .unwrap();
    let vm = wait_for(&vms, "grace", "VM Terminating", |v| {
        vm_printable(v) == "Terminating"
    })
    .await;
    assert!(vm.metadata.deletion_timestamp.is_some());
    let stopping = wait_for(&vmis, "grace", "its VMI stopping", |v| {
        v.metadata.deletion_timestamp.is_some()
    })
    .await;
    assert_eq!(json(&stopping)["status"]["phase"], "Running");
    eventually("VM and VMI gone", WAIT, || {
        let (vms, vmis) = (vms.clone(), vmis.clone());
        async move {
            let vm = vms.get_opt("grace").await.ok()?;
            let vmi = vmis.get_opt("grace").await.ok()?;
            (vm.is_none() && vmi.is_none()).then_some(())
        }
    })
    .await
    .unwrap();

    create(
        &vms,
        virtual_machine(
            "lost",
            "Always",
            "root",
            serde_json::json!({"sim.ferry.example/fault": "stop=permanent"}),
        ),
    )
    .await;
    let vmi = wait_for(&vmis, "lost", "VMI Running", |v| {
        json(v)["status"]["phase"] == "Running"
    })
    .await;
    assert_eq!(vmi.annotations()["sim.ferry.example/stop-fate"], "lost");
    vms.patch(
        "lost",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"runStrategy": "Halted"}})),
    )
    .await
    .unwrap();
    wait_for(&vmis, "lost", "VMI being deleted", |v| {
        v.metadata.deletion_timestamp.is_some()
    })
    .await;
    // Three times its scaled grace (30 s at speed 5): still there, still Running.
    let vmi = vmis.get("lost").await.unwrap();
    let deleted = vmi.metadata.deletion_timestamp.clone().unwrap().0;
    eventually(
        "three grace periods past the deletion",
        WAIT,
        || async move {
            let past = k8s_openapi::jiff::Timestamp::now().duration_since(deleted)
                >= k8s_openapi::jiff::SignedDuration::from_secs(18);
            past.then_some(())
        },
    )
    .await
    .unwrap();
    let vmi = vmis.get("lost").await.unwrap();
    assert_eq!(json(&vmi)["status"]["phase"], "Running");
    // Let it go, as an administrator would, so the namespace can be deleted.
    vmis.patch(
        "lost",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vmi_whose_claim_is_missing_waits_pending_with_kubevirts_reason() {
    let w = World::new("sim-vm-nopvc", &["--speed", "5"]).await;
    let vms = dyn_api(&w, &vm_resource());
    let vmis = dyn_api(&w, &vmi_resource());
    create(
        &vms,
        virtual_machine("lost", "Always", "no-such-disk", serde_json::json!({})),
    )
    .await;
    let vmi = wait_for(&vmis, "lost", "VMI waiting for its claim", |v| {
        condition(&json(v), "Synchronized").is_some()
    })
    .await;
    let v = json(&vmi);
    assert_eq!(v["status"]["phase"], "Pending");
    let (status, reason, message) = condition(&v, "Synchronized").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FailedPvcNotFound")
    );
    assert!(message.contains("no-such-disk"));
    wait_for(&vms, "lost", "VM ErrorPvcNotFound", |v| {
        vm_printable(v) == "ErrorPvcNotFound"
    })
    .await;
    // Once the volume is there, the VMI starts.
    blank_dv(&w, "no-such-disk").await;
    wait_for(&vmis, "lost", "VMI Running", |v| {
        json(v)["status"]["phase"] == "Running"
    })
    .await;
}

async fn ensure_migration_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = ferry_crds::VirtualMachineMigration::crd();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the VirtualMachineMigration CRD: {e}"),
    }
    let name = crd.name_any();
    wait_for(&crds, &name, "CRD Established", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status == "True")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_on_the_owning_migration_fire_once_per_migration() {
    let w = World::new("sim-vmm-faults", &["--speed", "20"]).await;
    ensure_migration_crd(&w.client()).await;
    blank_dv(&w, "root").await;
    let mut vmm = ferry_crds::fixtures::migration("m1");
    vmm.metadata.namespace = Some(w.ns.name.clone());
    vmm.metadata.uid = None;
    vmm.metadata.generation = None;
    vmm.metadata.annotations = Some(
        [(
            "sim.ferry.example/fault".to_string(),
            "vmi=once".to_string(),
        )]
        .into(),
    );
    let vmm =
        w.ns.api::<ferry_crds::VirtualMachineMigration>()
            .create(&PostParams::default(), &vmm)
            .await
            .unwrap();
    let owner = serde_json::json!([{
        "apiVersion": "migration.platform.example/v1alpha1", "kind": "VirtualMachineMigration",
        "name": "m1", "uid": vmm.uid().unwrap(), "controller": true, "blockOwnerDeletion": true
    }]);
    let mut spec = virtual_machine("app", "Always", "root", serde_json::json!({}));
    spec["metadata"]["ownerReferences"] = owner;
    let vms = dyn_api(&w, &vm_resource());
    let vmis = dyn_api(&w, &vmi_resource());
    create(&vms, spec).await;

    // The first VMI fails; KubeVirt's crash-loop bookkeeping shows on the VM; the next one runs.
    wait_for(&vms, "app", "a start failure recorded", |v| {
        json(v)["status"]["startFailure"]["consecutiveFailCount"] == 1
    })
    .await;
    let vmi = wait_for(&vmis, "app", "the second VMI Running", |v| {
        json(v)["status"]["phase"] == "Running"
    })
    .await;
    assert!(
        vmi.annotations()
            .get("sim.ferry.example/vmi-fate")
            .is_none()
    );
    let vmm =
        w.ns.api::<ferry_crds::VirtualMachineMigration>()
            .get("m1")
            .await
            .unwrap();
    assert_eq!(
        vmm.annotations()
            .get("sim.ferry.example/fired")
            .map(String::as_str),
        Some("vmi")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_sim_and_kills_running_job_processes() {
    let mut w = World::new("sim-sigterm", &["--speed", "5"]).await;
    w.s3_secret("s3").await;
    let pidfile = w.dir.join("sleeper.pid");
    let jobs: Api<Job> = w.ns.api();
    jobs.create(
        &PostParams::default(),
        &job(
            "sleeper", // `$$$$` is Kubernetes' escape for the shell's `$$`.
            &format!("echo $$$$ > {}; exec sleep 300", pidfile.display()),
            0,
        ),
    )
    .await
    .unwrap();
    let pid = eventually("the job's process started", WAIT, || {
        let p = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        async move { p }
    })
    .await
    .unwrap();
    assert!(alive(pid));
    let status = w.sim.terminate().expect("the sim was running");
    assert!(status.success(), "ferry-sim exited with {status}");
    eventually("the job's process gone", Duration::from_secs(10), || {
        let gone = !alive(pid);
        async move { gone.then_some(()) }
    })
    .await
    .unwrap();
}

/// Whether `pid` is a live process (a zombie waiting to be reaped is dead).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_job_kills_its_process() {
    let w = World::new("sim-job-delete", &["--speed", "5"]).await;
    w.s3_secret("s3").await;
    let pidfile = w.dir.join("sleeper.pid");
    let jobs: Api<Job> = w.ns.api();
    jobs.create(
        &PostParams::default(),
        &job(
            "sleeper",
            &format!("echo $$$$ > {}; exec sleep 300", pidfile.display()),
            0,
        ),
    )
    .await
    .unwrap();
    let pid = eventually("the job's process started", WAIT, || {
        let p = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        async move { p }
    })
    .await
    .unwrap();
    jobs.delete("sleeper", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the job's process gone", Duration::from_secs(20), || {
        let gone = !alive(pid);
        async move { gone.then_some(()) }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_fault_keeps_agent_connected_away_from_a_running_vmi() {
    let w = World::new("sim-agent", &["--speed", "10"]).await;
    blank_dv(&w, "root").await;
    let vms = dyn_api(&w, &vm_resource());
    let vmis = dyn_api(&w, &vmi_resource());
    create(
        &vms,
        virtual_machine(
            "quiet",
            "Always",
            "root",
            serde_json::json!({"sim.ferry.example/fault": "agent=always"}),
        ),
    )
    .await;
    wait_for(&vmis, "quiet", "VMI Running", |v| {
        json(v)["status"]["phase"] == "Running"
    })
    .await;
    // Ten times the agent's usual delay at this speed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let vmi = vmis.get("quiet").await.unwrap();
    assert!(
        condition(&json(&vmi), "AgentConnected").is_none(),
        "{:?}",
        json(&vmi)["status"]
    );
    assert_eq!(condition(&json(&vmi), "Ready").unwrap().0, "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qcow2_image_is_imported_as_raw_like_cdi_does() {
    let w = World::new("sim-dv-qcow2", &["--speed", "10"]).await;
    w.s3_secret("s3").await;
    let raw = pattern(4 << 20, 17);
    let raw_path = w.dir.join("disk.raw");
    let qcow_path = w.dir.join("disk.qcow2");
    std::fs::write(&raw_path, &raw).unwrap();
    let out = std::process::Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(&raw_path)
        .arg(&qcow_path)
        .output()
        .expect("qemu-img (qemu-utils) is part of the lab's tools");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = w
        .stage("disk.qcow2", &std::fs::read(&qcow_path).unwrap(), None)
        .await;
    let dvs = dyn_api(&w, &dv_resource());
    create(&dvs, datavolume("q", &url, serde_json::json!({}))).await;
    wait_for(&dvs, "q", "DataVolume Succeeded", |d| {
        phase(d) == "Succeeded"
    })
    .await;
    assert_eq!(std::fs::read(w.volume("q")).unwrap(), raw);
}

/// A Job that mounts `claim` read-only at /data and runs `script`, failing the Job at once on
/// exit code 3 (a `FailJob` rule), its termination message from the log's tail.
fn job_on_claim(name: &str, claim: &str, script: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 6,
            "podFailurePolicy": {"rules": [{"action": "FailJob",
                "onExitCodes": {"containerName": "check", "operator": "In", "values": [3]}}]},
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "check", "image": "ferry-converter:dev",
                    "command": ["/bin/sh", "-c", script],
                    "env": [{"name": "IMAGE", "value": "/data/disk.img"}],
                    "volumeMounts": [{"name": "disk", "mountPath": "/data", "readOnly": true}],
                    "terminationMessagePolicy": "FallbackToLogsOnError"
                }],
                "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}]
            }}
        }
    }))
    .unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    common::hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// The kubelet's part of a Job: the pod is an object of its own, the claim is where the container
/// looks for it, and the pod's end says how it ended; a FailJob rule fails the Job at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_pod_reads_its_claim_at_the_mount_path_and_reports_its_end() {
    let w = World::new("sim-job-pod", &["--speed", "10"]).await;
    blank_dv(&w, "vol").await;
    let zeros = vec![0u8; 16 << 20];
    assert_eq!(std::fs::read(w.volume("vol")).unwrap(), zeros);
    let jobs: Api<Job> = w.ns.api();
    jobs.create(
        &PostParams::default(),
        &job_on_claim(
            "check-vol",
            "vol",
            "sha256sum \"$IMAGE\"; echo \"read $(wc -c < /data/disk.img) bytes\" >&2; exit 3",
        ),
    )
    .await
    .unwrap();
    let done = wait_for(&jobs, "check-vol", "job Failed", |j| is_true(j, "Failed")).await;
    let st = done.status.clone().unwrap();
    let failed = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(failed.reason.as_deref(), Some("PodFailurePolicy"));
    assert!(
        failed
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("exit code 3 matching FailJob rule at index 0"),
        "{failed:?}"
    );
    assert_eq!(st.failed, Some(1), "no retry after a FailJob rule");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = w.ns.api();
    let list = pods
        .list(&kube::api::ListParams::default().labels(&format!(
            "batch.kubernetes.io/controller-uid={}",
            done.uid().unwrap()
        )))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let pod = &list.items[0];
    let ps = pod.status.clone().unwrap();
    assert_eq!(ps.phase.as_deref(), Some("Failed"));
    let term = ps.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 3);
    let msg = term.message.unwrap();
    assert!(
        msg.contains(&sha256_hex(&zeros)) && msg.contains(&format!("read {} bytes", 16 << 20)),
        "the container read the claim's bytes at its mount path: {msg}"
    );
    assert_eq!(
        pod.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Job"
    );
}

async fn storage_class(w: &World, mode: &str, csi: bool) -> String {
    use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec, StorageClass};
    let name = format!("{}-{}", w.ns.name, mode.to_ascii_lowercase());
    let provisioner = format!("{name}.sim.ferry.example");
    let classes: Api<StorageClass> = Api::all(w.client());
    classes
        .create(
            &PostParams::default(),
            &StorageClass {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                provisioner: provisioner.clone(),
                volume_binding_mode: Some(mode.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    if csi {
        let drivers: Api<CSIDriver> = Api::all(w.client());
        drivers
            .create(
                &PostParams::default(),
                &CSIDriver {
                    metadata: kube::api::ObjectMeta {
                        name: Some(provisioner),
                        ..Default::default()
                    },
                    spec: CSIDriverSpec::default(),
                },
            )
            .await
            .unwrap();
    }
    name
}

async fn remove_storage_class(w: &World, name: &str) {
    use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
    let _ = Api::<StorageClass>::all(w.client())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<CSIDriver>::all(w.client())
        .delete(
            &format!("{name}.sim.ferry.example"),
            &DeleteParams::default(),
        )
        .await;
}

/// On a WaitForFirstConsumer class CDI waits for a pod to use the claim: the scheduler's node
/// choice (selected-node) starts the import; without populators the importer runs once the
/// claim is bound, beside the consumer; with them the claim binds only once populated, so the
/// consumer reads the finished volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_first_consumer_class_is_imported_once_a_pod_uses_it() {
    let w = World::new("sim-dv-wffc", &["--speed", "10"]).await;
    w.s3_secret("s3").await;
    let bytes = pattern(2 << 20, 9);
    let url = w.stage("wffc.img", &bytes, None).await;
    let dvs = dyn_api(&w, &dv_resource());
    let pvcs: Api<PersistentVolumeClaim> = w.ns.api();
    let jobs: Api<Job> = w.ns.api();
    for (csi, waiting_phase) in [(false, "WaitForFirstConsumer"), (true, "PendingPopulation")] {
        let class = storage_class(&w, "WaitForFirstConsumer", csi).await;
        let dv = format!("d-{}", waiting_phase.to_ascii_lowercase());
        let mut spec = datavolume(&dv, &url, serde_json::json!({}));
        spec["spec"]["storage"]["storageClassName"] = class.clone().into();
        create(&dvs, spec).await;
        let waiting = wait_for(&dvs, &dv, waiting_phase, |d| phase(d) == waiting_phase).await;
        let claim = pvcs.get(&dv).await.unwrap();
        assert_ne!(
            claim.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Bound"),
            "{waiting_phase}: no consumer, no binding"
        );
        assert!(
            !claim
                .annotations()
                .contains_key("volume.kubernetes.io/selected-node")
        );
        assert!(!w.volume(&dv).exists());
        assert_eq!(phase(&waiting), waiting_phase);

        let check = format!("check-{}", waiting_phase.to_ascii_lowercase());
        jobs.create(
            &PostParams::default(),
            &job_on_claim(&check, &dv, "sha256sum /data/disk.img"),
        )
        .await
        .unwrap();
        wait_for(&dvs, &dv, "DataVolume Succeeded", |d| {
            phase(d) == "Succeeded"
        })
        .await;
        let claim = pvcs.get(&dv).await.unwrap();
        assert_eq!(
            claim
                .annotations()
                .get("volume.kubernetes.io/selected-node")
                .map(String::as_str),
            Some("sim-node"),
            "the consumer's node was selected"
        );
        assert_eq!(
            claim.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Bound")
        );
        assert_eq!(std::fs::read(w.volume(&dv)).unwrap(), bytes);
        if csi {
            // Populated before bound: the consumer could only start on the finished volume.
            let done = wait_for(&jobs, &check, "job Complete", |j| is_true(j, "Complete")).await;
            let log = w
                .dir
                .join("volumes/_jobs")
                .join(&w.ns.name)
                .join(&check)
                .join("attempt-1.log");
            assert!(
                std::fs::read_to_string(log)
                    .unwrap()
                    .contains(&sha256_hex(&bytes)),
                "the consumer read the populated volume"
            );
            assert_eq!(done.status.unwrap().succeeded, Some(1));
        }
        remove_storage_class(&w, &class).await;
    }
}

/// A VM whose DataVolume failed shows KubeVirt's DataVolumeError, and its VMI waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_on_a_failed_datavolume_reports_datavolume_error() {
    let w = World::new("sim-vm-dverr", &["--speed", "10"]).await;
    let dvs = dyn_api(&w, &dv_resource());
    create(
        &dvs,
        serde_json::json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "broken"},
            "spec": {"source": {"http": {"url": "http://127.0.0.1:1/x.img"}}, "storage": {}}
        }),
    )
    .await;
    wait_for(&dvs, "broken", "DataVolume Failed", |d| {
        phase(d) == "Failed"
    })
    .await;
    let vms = dyn_api(&w, &vm_resource());
    create(
        &vms,
        virtual_machine("vm-broken", "Always", "broken", serde_json::json!({})),
    )
    .await;
    wait_for(&vms, "vm-broken", "printableStatus DataVolumeError", |v| {
        vm_printable(v) == "DataVolumeError"
    })
    .await;
    let vmis = dyn_api(&w, &vmi_resource());
    let vmi = wait_for(&vmis, "vm-broken", "a VMI", |_| true).await;
    let p = json(&vmi)["status"]["phase"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(p.is_empty() || p == "Pending", "the VMI waits: {p}");
}
