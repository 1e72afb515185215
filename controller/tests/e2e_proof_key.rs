//! End to end, one proof key, in the controller's namespace only. An editor of the namespace an
//! operator's kubeconfig points at plants a Secret `ferry-controller-proof-key` with a key they
//! chose, stamps a VirtualMachine with it under a migration's target name and waits: the
//! cockpit's `ferry controller`, run with that kubeconfig, reads its key from the controller's
//! namespace (`ferry-system`, the Lease's) and takes the planted VM for what it is, someone
//! else's (`TargetNameTaken`): never started, the migration failed. And a VM that does carry a
//! valid stamp (made here with the real key, as a leak would allow) is adopted only if its
//! volumes are exactly the migration's DataVolumes: one booting a container disk is
//! `TargetConflict`, never started.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;
use ferry_controller::apis::kubevirt::VirtualMachine;
use ferry_controller::children::{proof::ProofKey, subject};
use ferry_crds::{Phase, Reason, VirtualMachineMigration, names};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;

/// A VirtualMachine under the migration's target name, booting a container disk (an image the
/// planter chose), with ferry's labels and a stamp made with `key` for the migration's first
/// attempt.
fn planted_vm(vmm: &VirtualMachineMigration, key: &ProofKey) -> VirtualMachine {
    let name = names::vm_name(vmm);
    let mut vm: VirtualMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": name,
            "labels": {
                names::MIGRATION_LABEL: vmm.metadata.name,
                names::MIGRATION_UID_LABEL: vmm.metadata.uid,
            },
        },
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {
                "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
                "volumes": [{"name": "root", "containerDisk": {"image": "registry.ferry.test/attacker@sha256:1111111111111111111111111111111111111111111111111111111111111111"}}],
            }},
        },
    }))
    .unwrap();
    let mut first = vmm.clone();
    first.status.get_or_insert_with(Default::default).attempts = 1;
    key.stamp_onto(&mut vm.metadata, &subject(&first, "VirtualMachine", &name));
    vm
}

/// The planted VM, as it is now: still Halted, never started.
async fn still_halted(env: &Env, vmm: &VirtualMachineMigration) {
    let vms: Api<VirtualMachine> = env.ns.api();
    let vm = vms.get(&names::vm_name(vmm)).await.unwrap();
    assert_eq!(
        vm.spec.run_strategy.as_deref(),
        Some("Halted"),
        "ferry never started the planted VM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_planted_in_the_kubeconfigs_namespace_forges_nothing_for_ferry_controller() {
    let mut env = Env::new("e2e-key-planted", 8).await;
    // Imports of 8 s: the VM is planted while they run.
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    // The operator's kubeconfig points at the tenant's namespace.
    let kubeconfig = env.scratch.join("operator.kubeconfig");
    let status = env
        .lab
        .kubectl()
        .env("KUBECONFIG", &env.lab.info.kubeconfig)
        .args(["config", "view", "--raw", "--minify", "--flatten"])
        .output()
        .unwrap();
    std::fs::write(&kubeconfig, &status.stdout).unwrap();
    let set = Command::new(ferry_harness::repo_root().join("target/lab/bin/kubectl"))
        .args(["--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "config",
            "set-context",
            "--current",
            "--namespace",
            &env.ns.name,
        ])
        .output()
        .unwrap();
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    // The tenant's key, where the old cockpit looked for it.
    let chosen = [0x41u8; ferry_controller::children::proof::KEY_BYTES];
    let secrets: Api<Secret> = env.ns.api();
    let planted_key: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": ferry_controller::children::proof::DEFAULT_SECRET_NAME},
        "data": {"key": k8s_openapi::ByteString(chosen.to_vec())},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &planted_key)
        .await
        .unwrap();

    // The cockpit's embedded controller, scoped to the namespace, on a Lease of its own.
    let log = std::fs::File::create(env.scratch.join("ferry-controller.log")).unwrap();
    let mut cmd = Command::new(bin_dir().join("ferry"));
    cmd.arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["-n", &env.ns.name, "controller"])
        .args(["--converter-image", ferry_harness::LAB_CONVERTER_IMAGE])
        .args(["--leader-elect-lease-name", &env.ns.name])
        .env("FERRY_ADMISSION_POLICIES", "not-required")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let _controller = ferry_harness::ChildGuard::spawn("ferry controller", cmd).unwrap();

    let vmm = env.create(&env.migration("m")).await;
    let importing = env.wait_phase("m", Phase::Importing, 240).await;
    let vms: Api<VirtualMachine> = env.ns.api();
    let key = ProofKey::from_bytes(&chosen).unwrap();
    vms.create(&PostParams::default(), &planted_vm(&importing, &key))
        .await
        .unwrap();

    let done = env.wait_terminal("m", 300).await;
    assert_eq!(done.phase(), Phase::Failed, "{}", serde_yaml_status(&done));
    let f = done.status.unwrap().last_failure.unwrap();
    assert_eq!(f.reason, Reason::TargetNameTaken, "{f:?}");
    still_halted(&env, &vmm).await;
    // The key it used is the controller's, in its own namespace: the planted one is untouched.
    let system: Api<Secret> = Api::namespaced(env.ns.client.clone(), "ferry-system");
    assert!(
        system
            .get_opt(ferry_controller::children::proof::DEFAULT_SECRET_NAME)
            .await
            .unwrap()
            .is_some(),
        "the key lives in ferry-system"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validly_stamped_vm_that_boots_something_else_is_a_conflict_never_started() {
    let mut env = Env::new("e2e-key-leaked", 8).await;
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    let vmm = env.create(&env.migration("m")).await;
    let importing = env.wait_phase("m", Phase::Importing, 240).await;
    // As a leaked key would let anyone: a valid stamp, on a VM that boots a container disk.
    let system: Api<Secret> = Api::namespaced(env.ns.client.clone(), "ferry-system");
    let real = system
        .get(ferry_controller::children::proof::DEFAULT_SECRET_NAME)
        .await
        .unwrap();
    let bytes = real.data.unwrap().remove("key").unwrap().0;
    let key = ProofKey::from_bytes(&bytes).unwrap();
    let vms: Api<VirtualMachine> = env.ns.api();
    vms.create(&PostParams::default(), &planted_vm(&importing, &key))
        .await
        .unwrap();

    let done = env.wait_terminal("m", 300).await;
    assert_eq!(done.phase(), Phase::Failed, "{}", serde_yaml_status(&done));
    let f = done.status.unwrap().last_failure.unwrap();
    assert_eq!(f.reason, Reason::TargetConflict, "{f:?}");
    assert!(
        f.message.contains("containerDisk") && f.message.contains("not the VM ferry makes"),
        "{}",
        f.message
    );
    still_halted(&env, &vmm).await;
}
