//! Preflight against the lab: the concerns about a VM and its target are found before anything
//! is touched. A migration created paused is preflighted without starting; unpaused, a
//! Critical concern holds it in Pending (reason PreflightFailed) with the source still running;
//! the operator's accept (spec.preflight.accept) lets it go on, recorded in status and an
//! Event. A wave created paused has every VM's migration preflighted while it holds them and
//! counts what was found; unpaused, a VM held by preflight takes no maxInFlight slot and the
//! others migrate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ferry_crds::{
    ConcernCode, ConditionType, DiskBus, MigrationWave, MigrationWaveSpec, Phase, Reason, Severity,
    VirtualMachineMigration, WaveVm,
};
use ferry_harness::{InventoryVm, eventually, put_vmdk};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::PostParams;

fn concerns_of(v: &VirtualMachineMigration) -> Vec<(ConcernCode, Severity)> {
    let mut c: Vec<_> = v
        .status
        .as_ref()
        .and_then(|s| s.preflight.as_ref())
        .map(|p| p.concerns.iter().map(|c| (c.code, c.severity)).collect())
        .unwrap_or_default();
    c.sort();
    c
}

fn ready_reason(v: &VirtualMachineMigration) -> Option<Reason> {
    v.condition(ConditionType::Ready).map(|c| c.reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_is_preflighted_paused_held_while_critical_and_goes_on_once_accepted() {
    let mut env = Env::new("preflight", 4).await;
    // A Windows guest without running Tools, on EFI with Secure Boot, asked onto a virtio disk
    // bus without virtio drivers.
    env.shape(
        &env.vm.name,
        &[
            "--guest-id",
            "windows2019srv_64Guest",
            "--tools",
            "not-running",
            "--firmware",
            "efi",
            "--secure-boot",
        ],
    );
    assert_eq!(env.power_state().await, "poweredOn");
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("pre");
    vmm.spec.paused = true;
    vmm.spec.target.template.devices.disk_bus = Some(DiskBus::Virtio);
    env.create(&vmm).await;

    // Paused: preflighted, nothing started.
    let v = env
        .wait_for("pre", "a preflight of the paused migration", 120, |v| {
            !concerns_of(v).is_empty()
        })
        .await;
    let want = vec![
        (ConcernCode::PoweredOn, Severity::Info),
        (ConcernCode::ToolsNotRunning, Severity::Warning),
        (ConcernCode::SecureBoot, Severity::Info),
        (ConcernCode::BusWithoutDrivers, Severity::Critical),
    ];
    let mut sorted = want.clone();
    sorted.sort();
    assert_eq!(concerns_of(&v), sorted, "{}", serde_yaml_status(&v));
    assert_eq!(v.phase(), Phase::Pending);
    assert!(v.held_by_preflight());
    let st = v.status.clone().unwrap();
    assert_eq!(st.source_power_off, None);
    assert!(st.started_at.is_none(), "never started");

    // Unpaused: the Critical concern holds it in Pending, the source untouched.
    env.patch_spec("pre", serde_json::json!({"paused": false}))
        .await;
    let v = env
        .wait_for("pre", "preflight to hold it", 120, |v| {
            ready_reason(v) == Some(Reason::PreflightFailed)
        })
        .await;
    assert_eq!(v.phase(), Phase::Pending, "{}", serde_yaml_status(&v));
    let validated = v.condition(ConditionType::Validated).unwrap();
    assert_eq!(validated.reason, Reason::PreflightFailed);
    assert!(
        validated.message.contains("BusWithoutDrivers")
            && validated.message.contains("virtioDrivers"),
        "{}",
        validated.message
    );
    assert_eq!(v.status.as_ref().unwrap().source_power_off, None);
    assert_eq!(env.power_state().await, "poweredOn");
    let jobs: Api<Job> = env.ns.api();
    assert!(
        jobs.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Accepted: it goes on at once (a spec change is looked at without waiting for the
    // recheck), and the acceptance is on record.
    env.patch_spec(
        "pre",
        serde_json::json!({"preflight": {"accept": ["BusWithoutDrivers"]}}),
    )
    .await;
    let done = env.wait_terminal("pre", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    let p = done.status.as_ref().unwrap().preflight.clone().unwrap();
    assert_eq!(p.accepted, vec![ConcernCode::BusWithoutDrivers]);
    assert!(
        env.event_reasons("pre")
            .await
            .iter()
            .any(|r| r == "ConcernsAccepted"),
        "an Event records the acceptance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_wave_is_preflighted_and_then_goes_on_past_a_vm_held_by_preflight() {
    let mut env = Env::new("preflight-wave", 8).await;
    // The wave's first VM has a disk ferry cannot read: a Critical concern.
    env.shape(&env.vm.name, &["--add-disk", "unreadable"]);
    // A quota each VM's disk (10 GiB as vSphere reports it; 10.6 GiB with CDI's filesystem
    // overhead) fits on its own and the wave's do not together.
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "team"}, "spec": {"hard": {"requests.storage": "15Gi"}}}),
    )
    .unwrap();
    env.ns
        .api()
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    let clean = env.lab.claim_vm().unwrap();
    put_vmdk(&clean, &env.scratch.join("clean"), 8, 91).unwrap();
    env.start_sim();
    env.start_controller();
    let spec = MigrationWaveSpec {
        template: env.wave_template(),
        vms: [env.vm.name.clone(), clean.name.clone()]
            .into_iter()
            .map(WaveVm::by_name)
            .collect(),
        max_in_flight: 1,
        selector: None,
        paused: true,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("w", spec))
        .await
        .unwrap();
    let vmms: Api<VirtualMachineMigration> = env.ns.api();

    // Created paused: planned. Each VM's migration is preflighted while the wave holds it, and
    // the wave counts what preflight found; nothing starts.
    let planned = eventually("the wave's preflight", Duration::from_secs(120), || async {
        let w = waves.get("w").await.ok()?;
        let p = w.status.as_ref()?.preflight.clone()?;
        (p.checked == 2 && !p.quota_short.is_empty()).then_some(p)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!((planned.ready, planned.blocked), (1, 1), "{planned:?}");
    assert!(
        planned.quota_short[0].contains("ResourceQuota team"),
        "{planned:?}"
    );
    for v in vmms.list(&Default::default()).await.unwrap().items {
        assert_eq!(v.phase(), Phase::Queued, "{}", serde_yaml_status(&v));
        assert!(v.status.as_ref().unwrap().started_at.is_none());
    }
    assert_eq!(env.power_state().await, "poweredOn");

    // Unpaused: the wave goes on past the blocked VM.
    waves
        .patch(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    let (held, migrated) = eventually(
        "the clean VM migrated past the held one",
        Duration::from_secs(300),
        || async {
            let all = vmms.list(&Default::default()).await.ok()?.items;
            let held = all.iter().find(|v| v.held_by_preflight())?.clone();
            let done = all.iter().find(|v| v.phase() == Phase::Succeeded)?.clone();
            Some((held, done))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!(
        held.spec.source.vm.name.as_deref(),
        Some(env.vm.name.as_str())
    );
    assert_eq!(
        migrated.spec.source.vm.name.as_deref(),
        Some(clean.name.as_str())
    );
    assert!(
        concerns_of(&held).contains(&(ConcernCode::IncompleteInventory, Severity::Critical)),
        "{}",
        serde_yaml_status(&held)
    );
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "the held VM untouched"
    );
    // The wave's status follows its migrations' (it reads them from its cache): wait for it to
    // count the success rather than read it the instant the migration says so.
    let counted = eventually(
        "the wave counts the success",
        Duration::from_secs(60),
        || async {
            let s = waves.get("w").await.ok()?.status?;
            (s.counts.succeeded == 1).then_some(s)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!(
        (counted.in_flight, counted.counts.pending),
        (0, 1),
        "{counted:?}"
    );
}

/// A paused wave of VMs shaped as vSphere reports them (`ferry-lab shape`: ReconfigVM_Task,
/// CreateSnapshot_Task) and one clean VM: every concern is found before anything is touched, and
/// once unpaused the clean VM migrates with its own placement and power state while the others
/// stay held, still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_of_shaped_vms_finds_every_concern_and_only_the_clean_vm_migrates_with_its_maps() {
    use ferry_crds::{TargetPowerState, VmPlacement};
    let mut env = Env::new("preflight-shapes", 4).await;
    let disks = env.vm.clone();
    env.shape(
        &disks.name,
        &[
            "--disk-mode",
            "independent_persistent",
            "--multi-writer",
            "--encrypted",
            "--passthrough",
            "usb",
        ],
    );
    let (snapshot, _) = env.another_vm(4);
    env.shape(
        &snapshot.name,
        &["--passthrough", "pci", "--snapshot", "before-the-window"],
    );
    let (rdm, _) = env.another_vm(4);
    env.shape(&rdm.name, &["--rdm", "--cbt", "off"]);
    let (clean, _) = env.another_vm(4);
    env.start_sim();
    env.start_controller();
    let mut vms: Vec<WaveVm> = [&disks, &snapshot, &rdm]
        .iter()
        .map(|v| WaveVm::by_name(v.name.clone()))
        .collect();
    vms.push(WaveVm {
        placement: Some(VmPlacement {
            labels: [("app".to_owned(), "ledger".to_owned())].into(),
            ..VmPlacement::default()
        }),
        power_state: Some(TargetPowerState::PoweredOff),
        ..WaveVm::by_name(clean.name.clone())
    });
    let spec = MigrationWaveSpec {
        template: env.wave_template(),
        vms,
        max_in_flight: 4,
        selector: None,
        paused: true,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("w", spec))
        .await
        .unwrap();
    let planned = eventually("the wave's preflight", Duration::from_secs(120), || async {
        let p = waves.get("w").await.ok()?.status?.preflight?;
        (p.checked == 4).then_some(p)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!((planned.ready, planned.blocked), (1, 3), "{planned:?}");

    let vmms: Api<VirtualMachineMigration> = env.ns.api();
    let of = |vm: &InventoryVm| {
        let name = ferry_crds::child_migration_name("w", &WaveVm::by_name(vm.name.clone()));
        let vmms = vmms.clone();
        async move { vmms.get(&name).await.unwrap() }
    };
    let critical =
        |v: &VirtualMachineMigration, code| concerns_of(v).contains(&(code, Severity::Critical));
    let d = of(&disks).await;
    for code in [ConcernCode::SharedDisk, ConcernCode::EncryptedDisk] {
        assert!(critical(&d, code), "{code:?}: {}", serde_yaml_status(&d));
    }
    for code in [ConcernCode::IndependentDisk, ConcernCode::Passthrough] {
        assert!(
            concerns_of(&d).contains(&(code, Severity::Warning)),
            "{code:?}: {}",
            serde_yaml_status(&d)
        );
    }
    let s = of(&snapshot).await;
    assert!(
        critical(&s, ConcernCode::SnapshotPresent),
        "{}",
        serde_yaml_status(&s)
    );
    assert!(
        concerns_of(&s).contains(&(ConcernCode::Passthrough, Severity::Warning)),
        "the PCI device: {}",
        serde_yaml_status(&s)
    );
    let r = of(&rdm).await;
    assert!(
        critical(&r, ConcernCode::RawDeviceMapping),
        "{}",
        serde_yaml_status(&r)
    );
    assert!(
        concerns_of(&r).contains(&(ConcernCode::ChangeTrackingOff, Severity::Info)),
        "{}",
        serde_yaml_status(&r)
    );
    for v in [&d, &s, &r] {
        assert!(
            !concerns_of(v)
                .iter()
                .any(|c| c.0 == ConcernCode::IncompleteInventory),
            "ferry reads all of it: {}",
            serde_yaml_status(v)
        );
    }
    let c = of(&clean).await;
    assert!(
        !concerns_of(&c).iter().any(|c| c.1 == Severity::Critical),
        "{}",
        serde_yaml_status(&c)
    );
    assert!(
        !concerns_of(&c)
            .iter()
            .any(|c| c.0 == ConcernCode::ChangeTrackingOff),
        "the lab's VMs track changes: {}",
        serde_yaml_status(&c)
    );

    // Unpaused: the clean VM migrates, created with its placement and left off; the others are
    // held in Pending and their sources never touched.
    waves
        .patch(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    let done = eventually(
        "the clean VM migrated",
        Duration::from_secs(300),
        || async {
            let v = of(&clean).await;
            v.phase().is_terminal().then_some(v)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    let vm = env
        .ns
        .api::<ferry_controller::apis::kubevirt::VirtualMachine>()
        .get(&ferry_crds::names::vm_name(&done))
        .await
        .unwrap();
    let vm = serde_json::to_value(&vm).unwrap();
    assert_eq!(vm["metadata"]["labels"]["app"], "ledger", "{vm}");
    assert_eq!(vm["spec"]["runStrategy"], "Halted", "powerState Off: {vm}");
    for v in [&disks, &snapshot, &rdm] {
        let m = of(v).await;
        assert!(m.held_by_preflight(), "{}", serde_yaml_status(&m));
        assert_eq!(m.status.as_ref().unwrap().source_power_off, None);
        assert_eq!(env.power_state_of(v).await, "poweredOn", "{}", v.name);
    }
}

/// The storage map places each disk by its datastore (the lab's VMs live on `LocalDS_0`): the
/// DataVolume gets the mapped class and access mode. A map that leaves the datastore out, with
/// no default class, holds the migration (DatastoreUnmapped) before anything is touched, as
/// does a StorageClass that does not exist (StorageClassMissing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_map_places_each_disk_by_its_datastore_and_an_unmapped_one_holds() {
    use ferry_controller::apis::cdi::DataVolume;
    use ferry_crds::{AccessMode, StorageMapping};
    use k8s_openapi::api::storage::v1::StorageClass;
    let mut env = Env::new("preflight-storage", 4).await;
    let class = format!("{}-mapped", env.ns.name);
    // And a class whose claims a ResourceQuota of the namespace leaves no room for (1 MiB).
    let tight = format!("{class}-tight");
    let admin = env.lab.client().await.unwrap();
    for name in [&class, &tight] {
        Api::<StorageClass>::all(admin.clone())
            .create(
                &PostParams::default(),
                &StorageClass {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    provisioner: format!("{name}.sim.ferry.example"),
                    volume_binding_mode: Some("Immediate".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "team-storage"},
        "spec": {"hard": {format!("{tight}.storageclass.storage.k8s.io/requests.storage"): "1Mi"}},
    }))
    .unwrap();
    env.ns
        .api()
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    // What a CSI driver with capacity tracking publishes (external-provisioner): plenty for the
    // mapped class, 1 GiB for the tight one.
    for (c, room) in [(&class, "100Gi"), (&tight, "1Gi")] {
        let capacity: k8s_openapi::api::storage::v1::CSIStorageCapacity =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": c},
                "storageClassName": c,
                "capacity": room,
            }))
            .unwrap();
        env.ns
            .api()
            .create(&PostParams::default(), &capacity)
            .await
            .unwrap();
    }
    let (other_vm, _) = env.another_vm(4);
    let (third_vm, _) = env.another_vm(4);
    let (fourth_vm, _) = env.another_vm(4);
    env.start_sim();
    env.start_controller();
    let mut squeezed = env.migration_of("squeezed", &fourth_vm);
    squeezed.spec.target.template.storage_class_name = Some(tight.clone());
    env.create(&squeezed).await;

    let mut classless = env.migration_of("classless", &third_vm);
    classless.spec.target.template.storage_class_name = Some(format!("{class}-nowhere"));
    env.create(&classless).await;
    let mut mapped = env.migration("mapped");
    mapped.spec.target.template.storage_map = vec![StorageMapping {
        datastore: "LocalDS_0".into(),
        storage_class_name: Some(class.clone()),
        volume_mode: None,
        access_mode: Some(AccessMode::ReadWriteMany),
    }];
    // Placement rides along: labels, annotations and scheduling the one node satisfies, and
    // powerState Auto with a source that ran, so the VM is started.
    let placement = &mut mapped.spec.target.template.placement;
    placement.labels = [("app".to_owned(), "billing".to_owned())].into();
    placement.annotations = [("owner".to_owned(), "team-a".to_owned())].into();
    placement.node_selector = [("kubernetes.io/os".to_owned(), "linux".to_owned())].into();
    placement.tolerations = vec![k8s_openapi::api::core::v1::Toleration {
        key: Some("dedicated".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    }];
    mapped.spec.target.template.power_state = Some(ferry_crds::TargetPowerState::Auto);
    let mut unmapped = env.migration_of("unmapped", &other_vm);
    unmapped.spec.target.template.storage_map = vec![StorageMapping {
        datastore: "SomeOtherDS".into(),
        storage_class_name: Some(class.clone()),
        ..Default::default()
    }];
    env.create(&mapped).await;
    env.create(&unmapped).await;

    let done = env.wait_terminal("mapped", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    let dv = env
        .ns
        .api::<DataVolume>()
        .get("mapped-disk-0")
        .await
        .unwrap();
    let storage = serde_json::to_value(&dv).unwrap()["spec"]["storage"].clone();
    assert_eq!(storage["storageClassName"], class.as_str(), "{storage}");
    assert_eq!(storage["accessModes"], serde_json::json!(["ReadWriteMany"]));
    let vm = env
        .ns
        .api::<ferry_controller::apis::kubevirt::VirtualMachine>()
        .get(&ferry_crds::names::vm_name(&done))
        .await
        .unwrap();
    let vm = serde_json::to_value(&vm).unwrap();
    assert_eq!(vm["metadata"]["labels"]["app"], "billing", "{vm}");
    assert_eq!(vm["metadata"]["annotations"]["owner"], "team-a", "{vm}");
    let t = &vm["spec"]["template"];
    assert_eq!(t["metadata"]["labels"]["app"], "billing", "{vm}");
    assert_eq!(
        t["spec"]["nodeSelector"]["kubernetes.io/os"], "linux",
        "{vm}"
    );
    assert_eq!(t["spec"]["tolerations"][0]["key"], "dedicated", "{vm}");
    assert_eq!(
        vm["spec"]["runStrategy"], "Always",
        "Auto, and the source ran"
    );

    let held = env
        .wait_for("unmapped", "preflight to hold it", 120, |v| {
            ready_reason(v) == Some(Reason::PreflightFailed)
        })
        .await;
    assert!(
        concerns_of(&held).contains(&(ConcernCode::DatastoreUnmapped, Severity::Critical)),
        "{}",
        serde_yaml_status(&held)
    );
    assert_eq!(held.phase(), Phase::Pending);
    assert_eq!(held.status.as_ref().unwrap().source_power_off, None);

    // A StorageClass that does not exist: its claims would never bind.
    let held = env
        .wait_for("classless", "preflight to hold it", 120, |v| {
            ready_reason(v) == Some(Reason::PreflightFailed)
        })
        .await;
    assert!(
        concerns_of(&held).contains(&(ConcernCode::StorageClassMissing, Severity::Critical)),
        "{}",
        serde_yaml_status(&held)
    );

    // A quota the disks' claims would exceed: held, the quota named, nothing touched.
    let held = env
        .wait_for("squeezed", "preflight to hold it", 120, |v| {
            ready_reason(v) == Some(Reason::PreflightFailed)
        })
        .await;
    let p = held.status.as_ref().unwrap().preflight.as_ref().unwrap();
    let holding: Vec<_> = p
        .concerns
        .iter()
        .filter(|c| c.severity == Severity::Critical)
        .collect();
    let codes: Vec<_> = holding.iter().map(|c| c.code).collect();
    assert_eq!(
        codes,
        vec![
            ConcernCode::QuotaExceeded,
            ConcernCode::StorageCapacityShort
        ],
        "the quota and the class's capacity hold it: {p:?}"
    );
    assert!(
        holding[0].message.contains("ResourceQuota team-storage"),
        "{p:?}"
    );
    assert_eq!(held.status.as_ref().unwrap().source_power_off, None);
}

/// An instancetype and a preference that do not exist hold the migration, each named in its
/// own concern; each created (the cluster-wide instancetype, the namespaced preference) lets it
/// go on at the next look, with the VM created on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_instancetype_or_preference_holds_until_both_exist() {
    use ferry_controller::apis::instancetype::{instancetype, preference};
    use ferry_crds::{InstancetypeKind, InstancetypeRef, PreferenceKind, PreferenceRef};
    use kube::api::DynamicObject;
    let mut env = Env::new("preflight-itype", 4).await;
    env.extra_controller_args = vec!["--preflight-recheck".into(), "2s".into()];
    env.start_sim();
    env.start_controller();
    // Cluster-wide: named after the test's namespace, so that labs shared by tests never meet.
    let itype_name = format!("{}-u1", env.ns.name);
    let mut vmm = env.migration("sized");
    let placement = &mut vmm.spec.target.template.placement;
    placement.instancetype = Some(InstancetypeRef {
        name: itype_name.clone(),
        kind: InstancetypeKind::VirtualMachineClusterInstancetype,
    });
    placement.preference = Some(PreferenceRef {
        name: "linux".into(),
        kind: PreferenceKind::VirtualMachinePreference,
    });
    env.create(&vmm).await;
    let missing = |v: &VirtualMachineMigration| -> Vec<String> {
        v.status
            .as_ref()
            .and_then(|s| s.preflight.as_ref())
            .map(|p| {
                p.concerns
                    .iter()
                    .filter(|c| c.code == ConcernCode::InstancetypeMissing)
                    .map(|c| c.message.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    let held = env
        .wait_for("sized", "preflight to hold it", 120, |v| {
            ready_reason(v) == Some(Reason::PreflightFailed)
        })
        .await;
    let both = missing(&held);
    assert_eq!(both.len(), 2, "{}", serde_yaml_status(&held));
    assert!(
        both[0].contains(&format!("VirtualMachineClusterInstancetype {itype_name}")),
        "{both:?}"
    );
    assert!(
        both[1].contains("VirtualMachinePreference linux"),
        "{both:?}"
    );
    assert!(
        concerns_of(&held).contains(&(ConcernCode::InstancetypeMissing, Severity::Critical)),
        "{}",
        serde_yaml_status(&held)
    );
    assert_eq!(env.power_state().await, "poweredOn", "nothing touched");

    let client = env.lab.client().await.unwrap();
    let (itype, _) = instancetype(InstancetypeKind::VirtualMachineClusterInstancetype);
    let mut it = DynamicObject::new(&itype_name, &itype);
    it.data = serde_json::json!({"spec": {"cpu": {"guest": 1}, "memory": {"guest": "64Mi"}}});
    let itypes: Api<DynamicObject> = Api::all_with(client.clone(), &itype);
    itypes.create(&PostParams::default(), &it).await.unwrap();
    let one = env
        .wait_for("sized", "the instancetype found", 120, |v| {
            missing(v).len() == 1
        })
        .await;
    assert!(one.held_by_preflight(), "{}", serde_yaml_status(&one));
    assert!(missing(&one)[0].contains("VirtualMachinePreference linux"));

    let (pref, _) = preference(PreferenceKind::VirtualMachinePreference);
    let prefs: Api<DynamicObject> = Api::namespaced_with(client, &env.ns.name, &pref);
    let mut p = DynamicObject::new("linux", &pref);
    p.data = serde_json::json!({"spec": {}});
    prefs.create(&PostParams::default(), &p).await.unwrap();
    let v = env
        .wait_for("sized", "it to go on", 120, |v| {
            v.phase() != Phase::Pending && !v.held_by_preflight()
        })
        .await;
    assert!(missing(&v).is_empty(), "{}", serde_yaml_status(&v));
    itypes
        .delete(&itype_name, &Default::default())
        .await
        .unwrap();
}

/// A Multus network whose NetworkAttachmentDefinition does not exist holds the migration; once
/// it is created, the next look (every --preflight-recheck) lets the migration go on. One of
/// another namespace is refused while the platform does not allow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_network_attachment_holds_until_it_exists_and_another_namespaces_is_refused() {
    use ferry_controller::apis::multus::network_attachment_definition;
    use ferry_crds::{MultusNetwork, NetworkMapping};
    use kube::api::DynamicObject;
    let mut env = Env::new("preflight-nets", 4).await;
    let (other_vm, _) = env.another_vm(4);
    env.extra_controller_args = vec!["--preflight-recheck".into(), "2s".into()];
    env.start_sim();
    env.start_controller();
    let multus = |name: &str| {
        vec![NetworkMapping {
            source: "VM Network".into(),
            pod: None,
            multus: Some(MultusNetwork {
                network_name: name.into(),
            }),
        }]
    };
    let mut own = env.migration("own-net");
    own.spec.target.template.networks = multus("storage-net");
    let mut foreign = env.migration_of("foreign-net", &other_vm);
    foreign.spec.target.template.networks = multus("team-b/db-net");
    env.create(&own).await;
    env.create(&foreign).await;

    for (name, code) in [
        ("own-net", ConcernCode::NetworkAttachmentMissing),
        ("foreign-net", ConcernCode::NetworkNotAllowed),
    ] {
        let held = env
            .wait_for(name, "preflight to hold it", 120, |v| {
                ready_reason(v) == Some(Reason::PreflightFailed)
            })
            .await;
        assert!(
            concerns_of(&held).contains(&(code, Severity::Critical)),
            "{name}: {}",
            serde_yaml_status(&held)
        );
    }

    // The network appears: the next look finds it, and the migration goes on by itself.
    let nads: Api<DynamicObject> = Api::namespaced_with(
        env.lab.client().await.unwrap(),
        &env.ns.name,
        &network_attachment_definition(),
    );
    let mut nad = DynamicObject::new("storage-net", &network_attachment_definition());
    nad.data = serde_json::json!({"spec": {"config": "{\"cniVersion\": \"0.3.1\", \"type\": \"bridge\"}"}});
    nads.create(&PostParams::default(), &nad).await.unwrap();
    let v = env
        .wait_for("own-net", "it to go on", 120, |v| {
            v.phase() != Phase::Pending && !v.held_by_preflight()
        })
        .await;
    assert!(
        !concerns_of(&v)
            .iter()
            .any(|c| c.0 == ConcernCode::NetworkAttachmentMissing),
        "{}",
        serde_yaml_status(&v)
    );
    let foreign = env.get("foreign-net").await;
    assert!(
        foreign.held_by_preflight(),
        "{}",
        serde_yaml_status(&foreign)
    );
}

/// A held migration costs vCenter nothing between its scheduled looks, also after its first
/// interval: findings unchanged keep the old `checkedAt` (nothing to write), and the next look
/// is timed from the last one this controller made, not from `checkedAt` (which made every
/// reconcile past the first interval a whole read of the VM). Counted at the controller's
/// vSphere port (`ferry_controller_vsphere_calls_total`: each login or call to the lab's
/// vCenter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_migration_reads_vcenter_only_on_its_recheck_schedule() {
    const CALLS: &str = "ferry_controller_vsphere_calls_total";
    let mut env = Env::new("preflight-schedule", 4).await;
    env.extra_controller_args = vec!["--preflight-recheck".into(), "20s".into()];
    env.start_sim();
    env.start_controller();
    // Held by a Critical concern that stays: an instancetype nobody creates.
    let mut vmm = env.migration("waits");
    vmm.spec.target.template.placement.instancetype = Some(ferry_crds::InstancetypeRef {
        name: format!("{}-none", env.ns.name),
        kind: ferry_crds::InstancetypeKind::VirtualMachineClusterInstancetype,
    });
    env.create(&vmm).await;
    env.wait_for("waits", "preflight to hold it", 120, |v| {
        ready_reason(v) == Some(Reason::PreflightFailed)
    })
    .await;
    // The next look comes by the schedule, a first interval after the hold.
    let after_hold = calls_settled(&env, CALLS).await;
    eventually(
        "the scheduled look after the first interval",
        Duration::from_secs(90),
        || async { (env.metric(CALLS) > after_hold).then_some(()) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    let before = calls_settled(&env, CALLS).await;
    let reconciles = env.reconciles();
    // Ten reconciles right after that look, well within the next interval.
    for n in 0..10 {
        env.annotate("waits", "example.com/nudge", Some(&n.to_string()))
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eventually("ten more reconciles", Duration::from_secs(30), || async {
        (env.reconciles() >= reconciles + 10).then_some(())
    })
    .await
    .unwrap();
    let calls = env.metric(CALLS) - before;
    println!(
        "{} reconciles between two looks: {calls} vSphere calls",
        env.reconciles() - reconciles
    );
    assert_eq!(
        calls,
        0,
        "a held migration read vCenter between its looks; logs in {}",
        env.scratch.display()
    );
}

/// The metric `series` once it has not moved for two seconds (a look at vSphere is done).
async fn calls_settled(env: &Env, series: &str) -> u64 {
    let mut last = env.metric(series);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = env.metric(series);
        if now == last {
            return now;
        }
        last = now;
    }
}
