//! Real guests, end to end against the lab: VMs shaped in vcsim through the vSphere API map to
//! the KubeVirt devices the table of docs/real-guests.md says; a guest without an agent succeeds under the
//! default readiness; KubeVirt's error states and CDI's importer back-off end a migration in
//! seconds with their own words; first-consumer StorageClasses work; the source is shut down
//! through VMware Tools first and powered off hard after the grace; a source powered on during
//! the copy or before the cutover is caught; a damaged import is caught by the verification Job.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_controller::apis::kubevirt::{VirtualMachine, VirtualMachineInstance};
use ferry_controller::children::verify_job::ROLE_ANNOTATION;
use ferry_crds::{
    ConditionStatus, ConditionType, DiskController, Firmware, GuestOsFamily, NicDeviceType, Phase,
    Reason, RunStrategy, ToolsState, VirtualMachineMigration, names,
};
use ferry_harness::eventually;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec, StorageClass};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

fn halted(mut vmm: VirtualMachineMigration) -> VirtualMachineMigration {
    vmm.spec.target.template.run_strategy = RunStrategy::Halted;
    vmm
}

async fn finished(env: &Env, name: &str) -> VirtualMachineMigration {
    env.wait_for(name, &format!("{name} to finish"), 300, |v| {
        v.phase().is_terminal()
    })
    .await
}

fn failure(v: &VirtualMachineMigration) -> (Phase, Reason, String) {
    let f = v
        .status
        .as_ref()
        .and_then(|s| s.last_failure.clone())
        .unwrap_or_else(|| panic!("no lastFailure:\n{}", serde_yaml_status(v)));
    (f.phase, f.reason, f.message)
}

async fn vm_domain(env: &Env, vmm: &VirtualMachineMigration) -> Value {
    let vm = env
        .ns
        .api::<VirtualMachine>()
        .get(&names::vm_name(vmm))
        .await
        .unwrap();
    vm.spec.template.unwrap()["spec"]["domain"].clone()
}

/// Under the default readiness (Running) a guest without a qemu guest agent succeeds, and the
/// default vcsim shape (pvscsi disk, e1000 NIC, BIOS, no Tools) maps to SATA and e1000e; the
/// imported volume was verified against the staged image before the VM was made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_without_an_agent_succeeds_under_the_default_readiness() {
    let mut env = Env::new("guests-noagent", 8).await;
    env.start_sim();
    env.start_controller();
    let vmm = with_fault(env.migration("noagent"), "agent=permanent");
    env.create(&vmm).await;
    let done = finished(&env, "noagent").await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    let gr = done.condition(ConditionType::GuestReady).unwrap();
    assert_eq!(
        (gr.status, gr.reason),
        (ConditionStatus::True, Reason::VMReady)
    );
    let imported = done.condition(ConditionType::DiskImported).unwrap();
    assert!(
        imported.message.contains("checksums verified"),
        "{}",
        imported.message
    );
    let job = env
        .ns
        .api::<Job>()
        .get(&names::verify_job_name(&done))
        .await
        .unwrap();
    assert_eq!(job.annotations()[ROLE_ANNOTATION], "verify");
    assert_eq!(job.status.unwrap().succeeded, Some(1));

    let src = done.status.as_ref().unwrap().source.clone().unwrap();
    assert_eq!(src.vmware_tools, Some(ToolsState::NotInstalled));
    assert_eq!(src.guest_os_family, Some(GuestOsFamily::Other));
    assert_eq!(
        (src.firmware, src.secure_boot),
        (Some(Firmware::Bios), Some(false))
    );
    assert_eq!(src.disks[0].controller, Some(DiskController::Pvscsi));
    assert_eq!(src.nics[0].device_type, Some(NicDeviceType::E1000));
    let d = vm_domain(&env, &done).await;
    assert_eq!(d["devices"]["disks"][0]["disk"]["bus"], "sata");
    assert_eq!(d["devices"]["interfaces"][0]["model"], "e1000e");
    assert_eq!(d["firmware"]["bootloader"], serde_json::json!({"bios": {}}));
    let vmi = env
        .ns
        .api::<VirtualMachineInstance>()
        .get(&names::vm_name(&done))
        .await
        .unwrap();
    let st = vmi.status.unwrap();
    assert!(st.condition_true("Ready") && !st.condition_true("AgentConnected"));
}

/// One row of the device mapping per vcsim shape: each VM is reconfigured in vcsim, migrated
/// (left Halted: the mapping is in the VirtualMachine), and its VirtualMachine checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vcsim_vm_shapes_map_to_the_kubevirt_devices_of_the_readme_table() {
    let mut env = Env::new("guests-shapes", 4).await;
    env.start_sim();
    env.start_controller();
    type Check = fn(&Value, &ferry_crds::DiscoveredSource);
    // A mapping row: name, `ferry-lab shape` arguments, the spec change, the check.
    type Row = (
        &'static str,
        Vec<&'static str>,
        fn(&mut VirtualMachineMigration),
        Check,
    );
    let rows: Vec<Row> = vec![
        (
            "efi-secure-boot",
            vec!["--firmware", "efi", "--secure-boot"],
            |_| {},
            |d, s| {
                assert_eq!(
                    (s.firmware, s.secure_boot),
                    (Some(Firmware::Efi), Some(true))
                );
                assert_eq!(
                    d["firmware"]["bootloader"],
                    serde_json::json!({"efi": {"secureBoot": true}})
                );
                assert_eq!(d["features"]["smm"]["enabled"], true);
            },
        ),
        (
            "virtio",
            vec!["--nic-type", "vmxnet3", "--guest-id", "rhel9_64Guest"],
            |v| v.spec.target.template.devices.virtio_drivers = true,
            |d, s| {
                assert_eq!(s.nics[0].device_type, Some(NicDeviceType::Vmxnet3));
                assert_eq!(s.guest_os_family, Some(GuestOsFamily::Linux));
                assert_eq!(d["devices"]["disks"][0]["disk"]["bus"], "virtio");
                assert_eq!(d["devices"]["interfaces"][0]["model"], "virtio");
                assert!(
                    d["devices"]["interfaces"][0]["macAddress"]
                        .as_str()
                        .is_some_and(|m| m == s.nics[0].mac),
                    "the MAC stays"
                );
            },
        ),
        (
            "sata-topology",
            vec![
                "--disk-controller",
                "sata",
                "--cpus",
                "4",
                "--cores-per-socket",
                "2",
                "--memory",
                "2048",
            ],
            |v| v.spec.target.template.devices.machine_type = Some("q35".into()),
            |d, s| {
                assert_eq!(s.disks[0].controller, Some(DiskController::Sata));
                assert_eq!((s.num_cpu, s.cores_per_socket), (Some(4), Some(2)));
                assert_eq!(s.memory_mib, Some(2048));
                assert_eq!(d["devices"]["disks"][0]["disk"]["bus"], "sata");
                assert_eq!(
                    d["cpu"],
                    serde_json::json!({"sockets": 2, "cores": 2, "threads": 1})
                );
                // KubeVirt's mutating webhook writes quantities back in canonical form
                // ("2Gi"), ferry writes "2048Mi": the same amount.
                let guest = d["memory"]["guest"]
                    .as_str()
                    .and_then(ferry_crds::quantity::parse_bytes);
                assert_eq!(guest, Some(2048 << 20), "{}", d["memory"]);
                assert_eq!(d["machine"]["type"], "q35");
            },
        ),
    ];
    let mut names_checks = vec![];
    for (name, args, tweak, check) in rows {
        let (vm, _disk) = env.another_vm(4);
        env.shape(&vm.name, &args);
        let mut vmm = halted(env.migration_of(name, &vm));
        tweak(&mut vmm);
        env.create(&vmm).await;
        names_checks.push((name, check));
    }
    for (name, check) in names_checks {
        let done = finished(&env, name).await;
        assert_eq!(
            done.phase(),
            Phase::Succeeded,
            "{name}: {}",
            serde_yaml_status(&done)
        );
        let src = done.status.as_ref().unwrap().source.clone().unwrap();
        check(&vm_domain(&env, &done).await, &src);
    }
}

/// KubeVirt's error states end Starting after the grace, with KubeVirt's reason and message,
/// not after the start timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubevirt_errors_end_starting_with_their_own_reason() {
    let mut env = Env::new("guests-kverr", 4).await;
    env.extra_controller_args = vec!["--kubevirt-error-grace".into(), "2s".into()];
    env.start_sim();
    env.start_controller();
    let unsched = with_fault(env.migration("unsched"), "vmi=permanent");
    env.create(&unsched).await;
    let (vm2, _) = env.another_vm(4);
    env.create(&with_fault(env.migration_of("crash", &vm2), "vmi=always"))
        .await;
    for (name, reason, said) in [
        (
            "unsched",
            Reason::ErrorUnschedulable,
            "0/1 nodes are available",
        ),
        ("crash", Reason::CrashLoopBackOff, "time(s) in a row"),
    ] {
        let v = finished(&env, name).await;
        assert_eq!(
            v.phase(),
            Phase::Failed,
            "{name}: {}",
            serde_yaml_status(&v)
        );
        let (phase, r, message) = failure(&v);
        assert_eq!((phase, r), (Phase::Starting, reason), "{name}: {message}");
        assert!(
            message.contains(reason.as_str()) && message.contains(said),
            "{name}: KubeVirt's words: {message}"
        );
        let c = v.condition(ConditionType::VMStarted).unwrap();
        assert_eq!((c.status, c.reason), (ConditionStatus::False, reason));
    }
}

/// A claim that disappears under a starting VM: KubeVirt's ErrorPvcNotFound ends Starting. (The
/// sim runs slowly, so that the VMI waits long enough in Pending for the claim to go.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_claim_ends_starting_with_error_pvc_not_found() {
    let mut env = Env::new("guests-pvc", 4).await;
    env.extra_controller_args = vec!["--kubevirt-error-grace".into(), "1s".into()];
    env.sim_args = vec!["--speed".into(), "0.1".into()];
    env.start_sim();
    env.start_controller();
    let vmm = env.migration("nopvc");
    let created = env.create(&vmm).await;
    let vmis = env.ns.api::<VirtualMachineInstance>();
    let vmi_name = names::vm_name(&created);
    eventually("the VMI", std::time::Duration::from_secs(300), || async {
        vmis.get_opt(&vmi_name).await.ok().flatten()
    })
    .await
    .unwrap();
    // The VMI waits in Pending (5 s at this speed) before KubeVirt looks at its claims.
    env.ns
        .api::<PersistentVolumeClaim>()
        .delete(&dv_name("nopvc", 0), &DeleteParams::default())
        .await
        .unwrap();
    let v = finished(&env, "nopvc").await;
    let (phase, reason, message) = failure(&v);
    assert_eq!(
        (phase, reason),
        (Phase::Starting, Reason::ErrorPvcNotFound),
        "{message}"
    );
    assert!(message.contains("does not exist"), "{message}");
}

/// CDI's importer back-off shows the importer's own message in status while it restarts; past
/// the restart budget the import fails with that last message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_importer_in_back_off_shows_its_message_and_the_import_gives_up() {
    let mut env = Env::new("guests-backoff", 4).await;
    env.extra_controller_args = vec!["--max-import-restarts".into(), "2".into()];
    env.sim_args = vec!["--speed".into(), "10".into()];
    env.start_sim();
    env.start_controller();
    env.create(&with_fault(env.migration("backoff"), "import=always@30%"))
        .await;
    let restarting = env
        .wait_for(
            "backoff",
            "the importer's message while it restarts",
            300,
            |v| {
                v.condition(ConditionType::DiskImported).is_some_and(|c| {
                    c.reason == Reason::TransientError
                        && c.message.contains("injected transient import fault")
                })
            },
        )
        .await;
    assert_eq!(restarting.phase(), Phase::Importing);
    let v = finished(&env, "backoff").await;
    let (phase, reason, message) = failure(&v);
    assert_eq!((phase, reason), (Phase::Importing, Reason::ImportFailed));
    assert!(
        message.contains("restarted 3 times") && message.contains("(last: Unable to process data"),
        "{message}"
    );
}

async fn storage_class(env: &Env, suffix: &str, csi: bool) -> String {
    let name = format!("{}-{suffix}", env.ns.name);
    let provisioner = format!("{name}.sim.ferry.example");
    let client = env.lab.client().await.unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &StorageClass {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                provisioner: provisioner.clone(),
                volume_binding_mode: Some("WaitForFirstConsumer".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    if csi {
        Api::<CSIDriver>::all(client)
            .create(
                &PostParams::default(),
                &CSIDriver {
                    metadata: ObjectMeta {
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

/// On a StorageClass that binds on first consumer (with CDI populators or without), the
/// verification Job is the claims' first consumer and the migration succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_consumer_storage_class_works() {
    let mut env = Env::new("guests-wffc", 4).await;
    env.start_sim();
    env.start_controller();
    let legacy = storage_class(&env, "legacy", false).await;
    let populators = storage_class(&env, "csi", true).await;
    let (vm2, _) = env.another_vm(4);
    let mut a = halted(env.migration("legacy"));
    a.spec.target.template.storage_class_name = Some(legacy.clone());
    let mut b = halted(env.migration_of("csi", &vm2));
    b.spec.target.template.storage_class_name = Some(populators.clone());
    env.create(&a).await;
    env.create(&b).await;
    for name in ["legacy", "csi"] {
        let v = finished(&env, name).await;
        assert_eq!(
            v.phase(),
            Phase::Succeeded,
            "{name}: {}",
            serde_yaml_status(&v)
        );
        let claim = env
            .ns
            .api::<PersistentVolumeClaim>()
            .get(&dv_name(name, 0))
            .await
            .unwrap();
        assert_eq!(
            claim
                .annotations()
                .get("volume.kubernetes.io/selected-node")
                .map(String::as_str),
            Some("sim-node"),
            "{name}: bound where its first consumer ran"
        );
        let job = env
            .ns
            .api::<Job>()
            .get(&format!("{name}-verify"))
            .await
            .unwrap();
        assert_eq!(
            job.annotations()[ROLE_ANNOTATION],
            "verify",
            "{name}: the verification that counted read the finished volume"
        );
    }
    let client = env.lab.client().await.unwrap();
    for c in [&legacy, &populators] {
        let _ = Api::<StorageClass>::all(client.clone())
            .delete(c, &DeleteParams::default())
            .await;
    }
    let _ = Api::<CSIDriver>::all(client)
        .delete(
            &format!("{populators}.sim.ferry.example"),
            &DeleteParams::default(),
        )
        .await;
}

/// A source with running VMware Tools is shut down by its guest; one whose guest ignores the
/// request is powered off hard once the grace period is over. The condition says which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_is_shut_down_through_tools_then_powered_off_hard_after_the_grace() {
    let mut env = Env::new("guests-shutdown", 4).await;
    env.start_sim();
    env.start_controller();
    env.shape(&env.vm.name, &["--tools", "running"]);
    let (stubborn, _) = env.another_vm(4);
    env.shape(
        &stubborn.name,
        &["--tools", "running", "--guest-shutdown", "ignore"],
    );
    env.create(&halted(env.migration("polite"))).await;
    let mut hard = halted(env.migration_of("stubborn", &stubborn));
    hard.spec.source.power.shutdown_grace_period_seconds = 3;
    env.create(&hard).await;

    let polite = finished(&env, "polite").await;
    assert_eq!(
        polite.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&polite)
    );
    let p = polite.status.as_ref().unwrap();
    assert_eq!(
        p.source.as_ref().unwrap().vmware_tools,
        Some(ToolsState::Running),
        "read while the guest ran"
    );
    let off = p.source_power_off.clone().unwrap();
    assert!(
        off.shutdown_guest_at.is_some() && off.hard_power_off_at.is_none(),
        "{off:?}"
    );
    let validated = polite.condition(ConditionType::Validated).unwrap();
    assert!(
        validated
            .message
            .contains("the guest shut down through VMware Tools"),
        "{}",
        validated.message
    );

    let stubborn_done = finished(&env, "stubborn").await;
    assert_eq!(
        stubborn_done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&stubborn_done)
    );
    let off = stubborn_done
        .status
        .as_ref()
        .unwrap()
        .source_power_off
        .clone()
        .unwrap();
    let (asked, hard_at) = (
        off.shutdown_guest_at.unwrap(),
        off.hard_power_off_at.unwrap(),
    );
    assert!(
        hard_at.0.duration_since(asked.0).as_secs() >= 3,
        "hard only after the grace: {asked:?} {hard_at:?}"
    );
    let validated = stubborn_done.condition(ConditionType::Validated).unwrap();
    assert!(
        validated
            .message
            .contains("powered off hard: the guest did not shut down within 3s"),
        "{}",
        validated.message
    );
}

/// Someone powers the source on while its disks are copied: the migration fails with
/// SourcePoweredOn (nothing of the copy is used), and a retry starts over from Preparing, which
/// powers it off again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_powered_on_during_converting_is_caught_and_a_retry_starts_over() {
    let mut env = Env::new("guests-poweron", 4).await;
    env.start_sim();
    env.start_controller();
    // One converter attempt fails: the Job's back-off (10 s) is the window to power it on in.
    env.create(&with_fault(
        halted(env.migration("onagain")),
        "convert=once",
    ))
    .await;
    let jobs = env.ns.api::<Job>();
    eventually(
        "the first converter attempt to fail",
        std::time::Duration::from_secs(120),
        || async {
            jobs.get_opt("onagain-convert")
                .await
                .ok()
                .flatten()
                .filter(|j| j.status.as_ref().and_then(|s| s.failed).unwrap_or(0) >= 1)
        },
    )
    .await
    .unwrap();
    env.shape(&env.vm.name, &["--power", "on"]);
    let v = finished(&env, "onagain").await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let (phase, reason, message) = failure(&v);
    assert_eq!(
        (phase, reason),
        (Phase::Converting, Reason::SourcePoweredOn),
        "{message}"
    );
    assert!(
        v.status
            .as_ref()
            .unwrap()
            .disks
            .iter()
            .all(|d| d.data_volume.is_none())
    );

    env.patch_spec("onagain", serde_json::json!({"retry": 1}))
        .await;
    let again = env
        .wait_for("onagain", "the retry to finish", 300, |v| {
            v.phase() == Phase::Succeeded
                || (v.phase() == Phase::Failed
                    && v.status.as_ref().is_some_and(|s| s.attempts == 2))
        })
        .await;
    assert_eq!(
        again.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&again)
    );
    let preparing = again
        .status
        .as_ref()
        .unwrap()
        .history
        .iter()
        .filter(|h| h.phase == Phase::Preparing)
        .count();
    assert_eq!(preparing, 2, "the retry started over from Preparing");
    assert_eq!(env.power_state().await, "poweredOff");
}

/// Someone powers the source on after its disks were copied: the cutover (making the copy
/// that starts) is refused with SourcePoweredOn, and the copy never exists, let alone runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_powered_on_before_the_cutover_is_not_started_beside_it() {
    let mut env = Env::new("guests-cutover", 8).await;
    // 8 MiB at 1 MiB/s: Importing lasts long enough to power the source on meanwhile.
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("cutover")).await;
    env.wait_phase("cutover", Phase::Importing, 120).await;
    env.shape(&env.vm.name, &["--power", "on"]);
    let v = finished(&env, "cutover").await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let (phase, reason, message) = failure(&v);
    assert_eq!(
        (phase, reason),
        (Phase::CreatingVM, Reason::SourcePoweredOn),
        "{message}"
    );
    assert!(
        !has_vm(&env, &v).await,
        "no VM made beside a running source"
    );
    assert!(
        env.ns
            .api::<VirtualMachineInstance>()
            .get_opt(&names::vm_name(&v))
            .await
            .unwrap()
            .is_none()
    );
}

/// A staged image damaged after its checksum was recorded is imported by CDI as it is (CDI
/// checks nothing for S3); the verification Job catches it and Importing fails with both sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_import_fails_importing_with_both_checksums() {
    let mut env = Env::new("guests-sum", 4).await;
    env.start_sim();
    env.start_controller();
    // One converter attempt fails: its back-off is the window to pause the migration in.
    env.create(&with_fault(env.migration("damaged"), "convert=once"))
        .await;
    env.wait_phase("damaged", Phase::Converting, 120).await;
    env.patch_spec("damaged", serde_json::json!({"paused": true}))
        .await;
    let jobs = env.ns.api::<Job>();
    eventually(
        "the conversion Job to complete",
        std::time::Duration::from_secs(120),
        || async {
            jobs.get_opt("damaged-convert")
                .await
                .ok()
                .flatten()
                .filter(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1))
        },
    )
    .await
    .unwrap();
    assert_eq!(
        env.get("damaged").await.phase(),
        Phase::Converting,
        "held by paused"
    );
    let staged: Vec<_> = env
        .staged_files()
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with("disk-0.raw"))
        .collect();
    assert_eq!(staged.len(), 1, "{staged:?}");
    let mut bytes = std::fs::read(&staged[0]).unwrap();
    bytes[4096] ^= 0xff;
    std::fs::write(&staged[0], &bytes).unwrap();
    env.patch_spec("damaged", serde_json::json!({"paused": false}))
        .await;
    let v = finished(&env, "damaged").await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let (phase, reason, message) = failure(&v);
    assert_eq!(
        (phase, reason),
        (Phase::Importing, Reason::ChecksumMismatch),
        "{message}"
    );
    let recorded = v.status.as_ref().unwrap().disks[0]
        .raw_checksum
        .clone()
        .unwrap();
    let actual = {
        let d = ring::digest::digest(&ring::digest::SHA256, &bytes);
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert!(
        message.contains(&recorded) && message.contains(&actual),
        "both sums: {message}"
    );
    assert!(!has_vm(&env, &v).await, "no VM on a damaged disk");
}

/// Whether the migration's target VirtualMachine exists.
async fn has_vm(env: &Env, v: &VirtualMachineMigration) -> bool {
    env.ns
        .api::<VirtualMachine>()
        .get_opt(&names::vm_name(v))
        .await
        .unwrap()
        .is_some()
}
