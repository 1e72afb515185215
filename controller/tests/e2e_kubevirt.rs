//! End to end against KubeVirt's own admission (#28): the controller and ferry-sim as processes
//! on a lab of this test's own that runs KubeVirt v1.8.3's virt-api and virt-controller
//! (`ferry-lab --kubevirt`: KubeVirt's CRDs with their schemas, virt-api's webhooks on every
//! VirtualMachine write).
//!
//! A migration whose target template names a machine type ferry's CRD accepts (a pattern) and
//! KubeVirt's default configuration does not (`emulatedMachines` `q35*`, `pc-q35*`) goes through
//! Preparing, Converting and Importing (the sim plays the converter Job's kubelet and CDI), and
//! its VirtualMachine is refused by `virtualmachine-validator.kubevirt.io`: the migration fails
//! in CreatingVM at once (no retry changes KubeVirt's mind), with KubeVirt's own words in its
//! failure, its VMCreated condition and its Event. Nothing is left behind: no VirtualMachine
//! ever existed (so neither virt-controller nor the sim, which plays the node here, had anything
//! to act on), the CDI Secret went with the failure, the source is powered back on
//! (OnCancelOrFailure, the target proven absent), and deleting the migration removes the rest.
//!
//! A migration KubeVirt admits runs on KubeVirt's own virt-controller (#28): ferry creates the
//! VirtualMachine, virt-controller creates its VirtualMachineInstance and the virt-launcher pod
//! and computes the VM's `printableStatus`; the sim plays only the node (`--kubevirt real`:
//! the pod bound and Running, the VMI `Running` and its guest agent as virt-handler writes
//! them). It succeeds; and one cancelled while it validates leaves no instance or pod behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ferry_controller::apis::cdi::DataVolume;
use ferry_controller::apis::kubevirt::{VirtualMachine, VirtualMachineInstance};
use ferry_controller::children::secret;
use ferry_crds::source::PowerRestoreResult;
use ferry_crds::{
    ConditionStatus, ConditionType, Phase, Readiness, Reason, RestorePowerState, names,
};
use ferry_harness::eventually;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, ResourceExt};

/// The lab's admin user, whose client certificate the controller and the sim run with.
const LAB_ADMIN: &str = "ferry-lab-admin";

/// The machine type of the refused VM, and what KubeVirt's VM validator says of it
/// (`kubevirt_admission.rs` checks the same words on a dry run).
const MACHINE_TYPE: &str = "pc-i440fx-rhel7.6.0";
const KUBEVIRT_DENIED: &str =
    r#"admission webhook "virtualmachine-validator.kubevirt.io" denied the request"#;
const KUBEVIRT_SAYS: &str = "spec.template.spec.domain.machine.type is not supported: pc-i440fx-rhel7.6.0 (allowed values: [q35* pc-q35*])";

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_kubevirt_refuses_fails_creating_vm_with_kubevirts_message_and_leaves_nothing() {
    let mut env = Env::on_lab(
        ferry_harness::lab_with(ferry_harness::KubeVirt::Real, "e2e-kubevirt", 3),
        "e2e-kv-refused",
        16,
    )
    .await;
    // Watching from before the migration: every Job, DataVolume, VirtualMachine and Secret
    // made in the namespace, however briefly it lived.
    let creations = Creations::watch(&env).await;
    env.start_sim();
    env.start_controller();
    assert_eq!(env.power_state().await, "poweredOn", "the lab's VMs run");

    let mut vmm = env.migration("i440fx");
    vmm.spec.source.power.restore_power_state = RestorePowerState::OnCancelOrFailure;
    vmm.spec.target.template.devices.machine_type = Some(MACHINE_TYPE.into());
    let made = env.create(&vmm).await;
    let v = env
        .wait_for(
            "i440fx",
            "i440fx to fail and power the source on",
            300,
            |v| {
                v.phase().is_terminal()
                    && v.status
                        .as_ref()
                        .and_then(|s| s.source_power_restore.as_ref())
                        .is_some_and(|r| r.result.is_some())
            },
        )
        .await;
    let status = v.status.clone().unwrap();
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));

    // It got there through the disks: converted, imported, then refused.
    let visited: Vec<Phase> = status.history.iter().map(|h| h.phase).collect();
    assert_eq!(
        visited,
        [
            Phase::Preparing,
            Phase::Converting,
            Phase::Importing,
            Phase::CreatingVM,
            Phase::Failed
        ],
        "{}",
        serde_yaml_status(&v)
    );
    assert_eq!(
        v.condition(ConditionType::DiskImported).map(|c| c.status),
        Some(ConditionStatus::True),
        "{}",
        serde_yaml_status(&v)
    );

    // Failed in CreatingVM with KubeVirt's own words, at once and for good: a refusal of the
    // object itself is no transient error.
    let f = status.last_failure.clone().unwrap();
    assert_eq!(
        (f.phase, f.reason),
        (Phase::CreatingVM, Reason::VMCreateFailed)
    );
    assert!(
        f.message.contains(KUBEVIRT_DENIED) && f.message.contains(KUBEVIRT_SAYS),
        "KubeVirt's message in the failure: {}",
        f.message
    );
    assert!(!f.retriable, "nothing changes by itself: {f:?}");
    assert_eq!(status.retries, 0, "not retried as transient");
    let created = v.condition(ConditionType::VMCreated).unwrap();
    assert_eq!(
        (created.status, created.reason),
        (ConditionStatus::False, Reason::VMCreateFailed)
    );
    assert!(
        created.message.contains(KUBEVIRT_SAYS),
        "{}",
        created.message
    );
    // The apiserver's side (its audit log records every write): the controller asked once, and
    // KubeVirt's webhook answered 422.
    let vm_name = names::vm_name(&v);
    let asked: Vec<(Option<String>, i64)> = audit(env.lab, LAB_ADMIN)
        .into_iter()
        .filter(|r| {
            r.verb == "create"
                && r.resource == "virtualmachines"
                && r.namespace.as_deref() == Some(env.ns.name.as_str())
                && r.uri.contains("fieldManager=ferry-controller")
        })
        .map(|r| (r.name, r.code))
        .collect();
    assert_eq!(asked, [(Some(vm_name.clone()), 422)]);
    env.wait_event("i440fx", "VMCreateFailed").await;
    let notes = event_notes(&env, "i440fx", "VMCreateFailed").await;
    assert!(
        notes.iter().any(|n| n.contains(MACHINE_TYPE)),
        "the Event says what KubeVirt refused: {notes:?}"
    );

    // No VirtualMachine was ever made, so no instance either: virt-controller and the sim (the
    // node: virt-handler and the launcher pod) had nothing to act on.
    let vms: Api<VirtualMachine> = env.ns.api();
    let vmis: Api<VirtualMachineInstance> = env.ns.api();
    assert!(vms.get_opt(&vm_name).await.unwrap().is_none());
    assert!(
        vmis.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let seen = creations.names();
    assert!(
        !seen.iter().any(|n| n.starts_with("VirtualMachine/")),
        "a VirtualMachine existed: {seen:?}"
    );
    assert!(
        seen.iter().any(|n| n.starts_with("Job/"))
            && seen.contains(&format!("DataVolume/{}", dv_name("i440fx", 0))),
        "the disks went through the converter Job and CDI: {seen:?}"
    );
    assert!(
        env.sim.as_mut().unwrap().running(),
        "ferry-sim kept running against KubeVirt's CRDs; logs in {}",
        env.scratch.display()
    );

    // The source runs again, powered on only once the target was proven absent.
    let restore = status.source_power_restore.clone().unwrap();
    assert_eq!(
        restore.result,
        Some(PowerRestoreResult::PoweredOn),
        "{restore:?}"
    );
    assert_eq!(env.power_state().await, "poweredOn");

    // The CDI copy of the S3 keys went with the failure.
    let secrets: Api<Secret> = env.ns.api();
    assert!(
        secrets
            .get_opt(&secret::s3_secret_name(&made))
            .await
            .unwrap()
            .is_none(),
        "the CDI Secret outlived the failure"
    );

    // Deleted, the migration leaves nothing of its own: no Job, DataVolume, VirtualMachine,
    // Secret beside the test's credentials, or staged file.
    env.api()
        .delete("i440fx", &Default::default())
        .await
        .unwrap();
    env.wait_gone("i440fx", 120).await;
    assert_nothing_left(&env, Duration::from_secs(60)).await;
}

/// Waits (up to `within`) until nothing of the test's migrations is left; else fails listing
/// what is.
async fn assert_nothing_left(env: &Env, within: Duration) {
    let last = std::sync::Mutex::new(vec![]);
    let gone = eventually("nothing of the migration left", within, || async {
        let left = leftovers(env).await?;
        let none = left.is_empty();
        *last.lock().unwrap() = left;
        none.then_some(())
    })
    .await;
    assert!(
        gone.is_ok(),
        "left behind: {:?}; logs in {}",
        last.lock().unwrap(),
        env.scratch.display()
    );
}

/// The Jobs, DataVolumes, VirtualMachines, VirtualMachineInstances, launcher pods and Secrets
/// (but the test's credentials) in the test's namespace and the files under its staging prefix;
/// `None` when a list failed.
async fn leftovers(env: &Env) -> Option<Vec<String>> {
    async fn named<K>(api: Api<K>, kind: &str) -> Option<Vec<String>>
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        let items = api.list(&ListParams::default()).await.ok()?.items;
        Some(
            items
                .iter()
                .map(|o| format!("{kind}/{}", o.name_any()))
                .collect(),
        )
    }
    let mut left = named::<Job>(env.ns.api(), "Job").await?;
    left.extend(named::<DataVolume>(env.ns.api(), "DataVolume").await?);
    left.extend(named::<VirtualMachine>(env.ns.api(), "VirtualMachine").await?);
    left.extend(
        named::<Secret>(env.ns.api(), "Secret")
            .await?
            .into_iter()
            .filter(|n| {
                *n != format!("Secret/{VSPHERE_SECRET}") && *n != format!("Secret/{S3_SECRET}")
            }),
    );
    left.extend(named::<VirtualMachineInstance>(env.ns.api(), "VirtualMachineInstance").await?);
    left.extend(
        launcher_pods(env)
            .await
            .iter()
            .map(|p| format!("Pod/{}", p.name_any())),
    );
    left.extend(env.staged_files().iter().map(|f| f.display().to_string()));
    Some(left)
}

/// Who virt-controller is to the apiserver: the ServiceAccount token of the lab's
/// `kubevirt-controller` kubeconfig.
const VIRT_CONTROLLER: &str = "system:serviceaccount:kubevirt:kubevirt-controller";

/// Who the sim is when it writes what virt-handler writes (`lab.json`
/// `kubevirt.handlerKubeconfig`).
const VIRT_HANDLER: &str = "system:serviceaccount:kubevirt:kubevirt-handler";

/// The virt-launcher pods in the test's namespace.
async fn launcher_pods(env: &Env) -> Vec<Pod> {
    let pods: Api<Pod> = env.ns.api();
    pods.list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
        .await
        .unwrap()
        .items
}

/// The audited requests of `user` on `resource` in the test's namespace: (verb, name, code).
fn requests_of(env: &Env, user: &str, resource: &str) -> Vec<(String, Option<String>, i64)> {
    audit(env.lab, user)
        .into_iter()
        .filter(|r| r.resource == resource && r.namespace.as_deref() == Some(env.ns.name.as_str()))
        .map(|r| (r.verb, r.name, r.code))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_migration_succeeds_on_kubevirts_own_virt_controller() {
    let mut env = Env::on_lab(
        ferry_harness::lab_with(ferry_harness::KubeVirt::Real, "e2e-kubevirt", 3),
        "e2e-kv-happy",
        16,
    )
    .await;
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("happy")).await;
    let done = env
        .wait_for("happy", "happy to succeed", 300, |v| {
            v.phase().is_terminal()
        })
        .await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}; logs in {}",
        serde_yaml_status(&done),
        env.scratch.display()
    );
    let status = done.status.clone().unwrap();
    let visited: Vec<Phase> = status.history.iter().map(|h| h.phase).collect();
    assert_eq!(
        visited,
        [
            Phase::Preparing,
            Phase::Converting,
            Phase::Importing,
            Phase::CreatingVM,
            Phase::Starting,
            Phase::Validating,
            Phase::Succeeded
        ],
        "{}",
        serde_yaml_status(&done)
    );
    assert!(all_conditions_true(&done), "{}", serde_yaml_status(&done));

    // The VM's status is virt-controller's: Running and ready.
    let vm_name = names::vm_name(&done);
    let vms: Api<VirtualMachine> = env.ns.api();
    let vm = vms.get(&vm_name).await.unwrap();
    let vm_status = vm.status.clone().unwrap();
    assert_eq!(
        vm_status.printable_status.as_deref(),
        Some("Running"),
        "{vm_status:?}"
    );
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));

    // The instance is the VM's, Running on the sim's node, Ready (virt-controller's, from the
    // launcher pod), and its agent connects (virt-handler's).
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        env.ns.client.clone(),
        &env.ns.name,
        &ApiResource::erase::<VirtualMachineInstance>(&()),
    );
    let vmi = vmis.get(&vm_name).await.unwrap();
    let owner = vmi
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .cloned()
        .unwrap();
    assert_eq!(
        (owner.kind.as_str(), Some(owner.uid.as_str())),
        ("VirtualMachine", vm.uid().as_deref())
    );
    let status = &vmi.data["status"];
    assert_eq!(status["phase"], "Running", "{status}");
    assert_eq!(status["nodeName"], "sim-node", "{status}");
    let condition = |status: &serde_json::Value, t: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .map(|c| c["status"].clone())
    };
    assert_eq!(condition(status, "Ready"), Some("True".into()), "{status}");
    let agent = eventually(
        "the guest agent connected",
        Duration::from_secs(30),
        || async {
            let vmi = vmis.get(&vm_name).await.ok()?;
            (condition(&vmi.data["status"], "AgentConnected") == Some("True".into())).then_some(())
        },
    )
    .await;
    assert!(agent.is_ok(), "logs in {}", env.scratch.display());

    // virt-controller made the instance and its launcher pod; the sim only bound the pod to
    // its node and ran it.
    let made_vmis = requests_of(&env, VIRT_CONTROLLER, "virtualmachineinstances");
    assert!(
        made_vmis
            .iter()
            .any(|(verb, _, code)| verb == "create" && *code == 201),
        "virt-controller created the VMI: {made_vmis:?}"
    );
    assert!(
        !requests_of(&env, LAB_ADMIN, "virtualmachineinstances")
            .iter()
            .any(|(verb, _, _)| verb == "create"),
        "the sim (lab admin) created no VMI"
    );
    // The instance's Running and agent are virt-handler's writes, as virt-handler's
    // ServiceAccount (virt-api drops a VMI status change of anyone else's).
    let handled = requests_of(&env, VIRT_HANDLER, "virtualmachineinstances");
    assert!(
        handled.iter().any(|(verb, name, code)| verb == "patch"
            && name.as_deref() == Some(vm_name.as_str())
            && *code == 200),
        "the sim wrote the VMI as virt-handler: {handled:?}"
    );
    let made_pods = requests_of(&env, VIRT_CONTROLLER, "pods");
    assert!(
        made_pods
            .iter()
            .any(|(verb, _, code)| verb == "create" && *code == 201),
        "virt-controller created the launcher pod: {made_pods:?}"
    );
    let pods = launcher_pods(&env).await;
    assert_eq!(pods.len(), 1, "one launcher pod");
    let pod = &pods[0];
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("sim-node")
    );
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert!(
        requests_of(&env, LAB_ADMIN, "pods/binding")
            .iter()
            .any(|(verb, name, code)| verb == "create"
                && name.as_deref() == Some(pod.name_any().as_str())
                && *code == 201),
        "the sim bound the pod as the scheduler would"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_cancelled_while_validating_leaves_no_instance_or_launcher_pod() {
    let mut env = Env::on_lab(
        ferry_harness::lab_with(ferry_harness::KubeVirt::Real, "e2e-kubevirt", 3),
        "e2e-kv-cancel",
        16,
    )
    .await;
    // The guest's 30 s grace, and everything else, ten times faster.
    env.sim_args = vec!["--speed".into(), "10".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = with_fault(env.migration("cancel"), "agent=permanent");
    vmm.spec.source.power.restore_power_state = RestorePowerState::OnCancelOrFailure;
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    env.create(&vmm).await;
    let v = env.wait_phase("cancel", Phase::Validating, 300).await;
    let vm_name = names::vm_name(&v);
    let vmis: Api<VirtualMachineInstance> = env.ns.api();
    let running = eventually(
        "the instance Running, its pod bound",
        Duration::from_secs(60),
        || async {
            let vmi = vmis.get_opt(&vm_name).await.ok()??;
            let json = serde_json::to_value(&vmi).ok()?;
            let pods = launcher_pods(&env).await;
            (json["status"]["phase"] == "Running" && pods.len() == 1).then_some(())
        },
    )
    .await;
    assert!(running.is_ok(), "logs in {}", env.scratch.display());

    env.patch_spec("cancel", serde_json::json!({"cancel": true}))
        .await;
    let v = env
        .wait_for("cancel", "cancel to settle", 300, |v| {
            v.phase().is_terminal()
                && v.status
                    .as_ref()
                    .and_then(|s| s.source_power_restore.as_ref())
                    .is_none_or(|r| r.result.is_some())
        })
        .await;
    assert_eq!(
        v.phase(),
        Phase::Cancelled,
        "{}; logs in {}",
        serde_yaml_status(&v),
        env.scratch.display()
    );
    // The source is powered on only once the instance was proven gone.
    let restore = v.status.clone().unwrap().source_power_restore.unwrap();
    assert_eq!(
        restore.result,
        Some(PowerRestoreResult::PoweredOn),
        "{restore:?}"
    );
    assert_eq!(env.power_state().await, "poweredOn");
    assert!(vmis.get_opt(&vm_name).await.unwrap().is_none());

    env.api()
        .delete("cancel", &Default::default())
        .await
        .unwrap();
    env.wait_gone("cancel", 120).await;
    assert_nothing_left(&env, Duration::from_secs(120)).await;
}
