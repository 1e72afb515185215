//! KubeVirt's own admission judges the VirtualMachines ferry builds (#28).
//!
//! A lab of this test's own runs KubeVirt's virt-api and virt-controller (`ferry-lab
//! --kubevirt`, KubeVirt v1.8.3: its CRDs with their schemas, its mutating and validating
//! webhooks served by virt-api on 127.0.0.1). For every row of the device-mapping table (docs/real-guests.md)
//! (and the network mappings and placements beside it) the VirtualMachine is built exactly as the
//! controller builds it — [`virtual_machine`] on a migration whose `status.source` and
//! `spec.target.template` describe the row — and created as a server-side dry run: the
//! apiserver validates it against KubeVirt's CRD schema, calls KubeVirt's mutating and
//! validating webhooks, and stores nothing (so virt-controller never sees it). Every row must be
//! admitted, and KubeVirt's answer (the mutated VM) must still carry what the row is about.
//!
//! Beside them, VMs KubeVirt refuses, with KubeVirt's own message back: a disk without its volume
//! and a machine type outside KubeVirt's default `emulatedMachines` (`q35*`, `pc-q35*`), which
//! ferry's CRD lets through (`devices.machineType` is only a pattern).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_controller::apis::kubevirt::VirtualMachine;
use ferry_controller::children::virtual_machine::virtual_machine;
use ferry_crds::fixtures::migration;
use ferry_crds::{
    DiscoveredDisk, DiscoveredSource, DiskBus, DiskController, Firmware, InstancetypeKind,
    InstancetypeRef, MultusNetwork, NetworkMapping, NicModel, PodNetwork, PreferenceKind,
    PreferenceRef, TargetTemplate, VirtualMachineMigration, VirtualMachineMigrationStatus,
};
use ferry_harness::TestNamespace;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use ferry_crds::fixtures::SOURCE_UUID;

/// A discovered source like vcsim's: EFI without Secure Boot, 2 vCPUs, 2 GiB, two disks on
/// paravirtual SCSI, two vmxnet3 NICs on two networks.
fn source() -> DiscoveredSource {
    ferry_crds::fixtures::discovered_source()
}

/// The VirtualMachine the controller creates for a migration in `ns` whose discovery found
/// `src` and whose target template is `target`.
fn ferry_vm(ns: &str, src: DiscoveredSource, target: TargetTemplate) -> VirtualMachine {
    let mut vmm: VirtualMachineMigration = migration("web-1");
    vmm.metadata.namespace = Some(ns.into());
    vmm.spec.target.template = target;
    vmm.status = Some(VirtualMachineMigrationStatus {
        source: Some(Box::new(src)),
        ..Default::default()
    });
    virtual_machine(&vmm).expect("ferry builds the VirtualMachine")
}

type Shape = fn(&mut DiscoveredSource, &mut TargetTemplate, &str);
type Check = fn(&Value) -> bool;

/// One generated VM: how the source and target differ from [`source`] and the default
/// template, and what its VMI template spec must show — in ferry's VM and in KubeVirt's answer.
struct Row {
    name: &'static str,
    shape: Shape,
    check: Check,
}

fn domain(spec: &Value) -> &Value {
    &spec["domain"]
}

/// A binary-suffixed memory quantity (`6144Mi`, `6Gi`) in MiB.
fn mib(q: &Value) -> Option<u64> {
    let q = q.as_str()?;
    let (n, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    match unit {
        "Mi" => Some(n),
        "Gi" => Some(n * 1024),
        "Ti" => Some(n * 1024 * 1024),
        _ => None,
    }
}

fn rows() -> Vec<Row> {
    vec![
        // Disk bus.
        Row {
            name: "no virtio drivers: disks on SATA, NICs e1000e with the source MACs, pod network",
            shape: |_, _, _| {},
            check: |s| {
                let d = domain(s);
                d["devices"]["disks"][0]["disk"]["bus"] == "sata"
                    && d["devices"]["disks"][1]["disk"]["bus"] == "sata"
                    && d["devices"]["disks"][0]["bootOrder"] == 1
                    && d["devices"]["interfaces"][0]["model"] == "e1000e"
                    && d["devices"]["interfaces"][0]["macAddress"] == "00:50:56:aa:bb:01"
                    && d["devices"]["interfaces"][0].get("masquerade").is_some()
                    && s["networks"] == json!([{"name": "net-0", "pod": {}}])
            },
        },
        Row {
            name: "virtioDrivers: disks on virtio, NICs virtio",
            shape: |_, t, _| t.devices.virtio_drivers = true,
            check: |s| {
                let d = domain(s);
                d["devices"]["disks"][1]["disk"]["bus"] == "virtio"
                    && d["devices"]["interfaces"][0]["model"] == "virtio"
            },
        },
        Row {
            name: "diskBus: virtio",
            shape: |_, t, _| t.devices.disk_bus = Some(DiskBus::Virtio),
            check: |s| domain(s)["devices"]["disks"][0]["disk"]["bus"] == "virtio",
        },
        Row {
            name: "diskBus: sata (over virtioDrivers)",
            shape: |_, t, _| {
                t.devices.virtio_drivers = true;
                t.devices.disk_bus = Some(DiskBus::Sata);
            },
            check: |s| domain(s)["devices"]["disks"][0]["disk"]["bus"] == "sata",
        },
        Row {
            name: "diskBus: scsi",
            shape: |_, t, _| t.devices.disk_bus = Some(DiskBus::Scsi),
            check: |s| {
                let d = domain(s);
                d["devices"]["disks"][0]["disk"]["bus"] == "scsi"
                    && d["devices"]["disks"][1]["disk"]["bus"] == "scsi"
            },
        },
        Row {
            name: "disks on every vSphere controller kind (IDE, SATA, NVMe, LSI Logic) on one bus",
            shape: |src, _, _| {
                let proto = src.disks[0].clone();
                src.disks = [
                    DiskController::Ide,
                    DiskController::Sata,
                    DiskController::Nvme,
                    DiskController::LsiLogic,
                ]
                .into_iter()
                .enumerate()
                .map(|(i, c)| DiscoveredDisk {
                    key: 2000 + i as i32,
                    controller: Some(c),
                    ..proto.clone()
                })
                .collect();
            },
            check: |s| {
                let disks = domain(s)["devices"]["disks"].as_array().cloned();
                disks.is_some_and(|d| d.len() == 4 && d.iter().all(|x| x["disk"]["bus"] == "sata"))
                    && s["volumes"][3]["dataVolume"]["name"] == "web-1-disk-3"
            },
        },
        // NIC model.
        Row {
            name: "nicModel: virtio",
            shape: |_, t, _| t.devices.nic_model = Some(NicModel::Virtio),
            check: |s| domain(s)["devices"]["interfaces"][0]["model"] == "virtio",
        },
        Row {
            name: "nicModel: e1000e (over virtioDrivers)",
            shape: |_, t, _| {
                t.devices.virtio_drivers = true;
                t.devices.nic_model = Some(NicModel::E1000e);
            },
            check: |s| domain(s)["devices"]["interfaces"][0]["model"] == "e1000e",
        },
        Row {
            name: "nicModel: e1000",
            shape: |_, t, _| t.devices.nic_model = Some(NicModel::E1000),
            check: |s| domain(s)["devices"]["interfaces"][0]["model"] == "e1000",
        },
        // MACs.
        Row {
            name: "preserveMacAddresses: false",
            shape: |_, t, _| t.devices.preserve_mac_addresses = false,
            check: |s| {
                domain(s)["devices"]["interfaces"][0]
                    .get("macAddress")
                    .is_none()
            },
        },
        // Firmware.
        Row {
            name: "firmware BIOS, the BIOS UUID kept",
            shape: |src, _, _| src.firmware = Some(Firmware::Bios),
            check: |s| {
                let f = &domain(s)["firmware"];
                f["bootloader"] == json!({"bios": {}}) && f["uuid"] == SOURCE_UUID
            },
        },
        Row {
            name: "no firmware reported: BIOS",
            shape: |src, _, _| src.firmware = None,
            check: |s| domain(s)["firmware"]["bootloader"] == json!({"bios": {}}),
        },
        Row {
            name: "EFI without Secure Boot",
            shape: |_, _, _| {},
            check: |s| {
                let d = domain(s);
                d["firmware"]["bootloader"]["efi"]["secureBoot"] == false
                    && d["firmware"]["uuid"] == SOURCE_UUID
            },
        },
        Row {
            name: "EFI with Secure Boot (SMM on)",
            shape: |src, _, _| src.secure_boot = Some(true),
            check: |s| {
                let d = domain(s);
                d["firmware"]["bootloader"]["efi"]["secureBoot"] == true
                    && d["features"]["smm"]["enabled"] == true
            },
        },
        Row {
            name: "Secure Boot reported on BIOS: ignored",
            shape: |src, _, _| {
                src.firmware = Some(Firmware::Bios);
                src.secure_boot = Some(true);
            },
            check: |s| domain(s)["firmware"]["bootloader"] == json!({"bios": {}}),
        },
        Row {
            name: "no BIOS UUID reported (KubeVirt gives one)",
            shape: |src, _, _| src.uuid = None,
            check: |_| true,
        },
        // CPU and memory.
        Row {
            name: "numCPU 4, coresPerSocket 2: 2 sockets of 2 cores",
            shape: |src, _, _| {
                src.num_cpu = Some(4);
                src.cores_per_socket = Some(2);
            },
            check: |s| {
                let c = &domain(s)["cpu"];
                c["sockets"] == 2 && c["cores"] == 2 && c["threads"] == 1
            },
        },
        Row {
            name: "numCPU 3, coresPerSocket 2: one socket of 3",
            shape: |src, _, _| {
                src.num_cpu = Some(3);
                src.cores_per_socket = Some(2);
            },
            check: |s| {
                let c = &domain(s)["cpu"];
                c["sockets"] == 1 && c["cores"] == 3
            },
        },
        Row {
            name: "memory 6144 MiB: guest memory and request",
            shape: |src, _, _| src.memory_mib = Some(6144),
            // KubeVirt's mutator writes quantities back canonically: ferry's 6144Mi comes back 6Gi.
            check: |s| {
                let d = domain(s);
                mib(&d["memory"]["guest"]) == Some(6144)
                    && mib(&d["resources"]["requests"]["memory"]) == Some(6144)
            },
        },
        // Machine type.
        Row {
            name: "machineType: q35",
            shape: |_, t, _| t.devices.machine_type = Some("q35".into()),
            check: |s| domain(s)["machine"]["type"] == "q35",
        },
        Row {
            name: "machineType: pc-q35-rhel9.4.0",
            shape: |_, t, _| t.devices.machine_type = Some("pc-q35-rhel9.4.0".into()),
            check: |s| domain(s)["machine"]["type"] == "pc-q35-rhel9.4.0",
        },
        // Networks.
        Row {
            name: "networks: VM Network on Multus (bridge), DVS0 on the pod network (masquerade)",
            shape: |_, t, ns| {
                t.networks = vec![
                    NetworkMapping {
                        source: "VM Network".into(),
                        pod: None,
                        multus: Some(MultusNetwork {
                            network_name: format!("{ns}/vlan10"),
                        }),
                    },
                    NetworkMapping {
                        source: "DVS0".into(),
                        pod: Some(PodNetwork {}),
                        multus: None,
                    },
                ];
            },
            check: |s| {
                let i = &domain(s)["devices"]["interfaces"];
                i[0].get("bridge").is_some()
                    && i[0]["macAddress"] == "00:50:56:aa:bb:01"
                    && i[1].get("masquerade").is_some()
                    && s["networks"][0]["multus"]["networkName"]
                        .as_str()
                        .is_some_and(|n| n.ends_with("/vlan10"))
                    && s["networks"][1].get("pod").is_some()
            },
        },
        Row {
            name: "networks: both NICs on Multus networks, no pod network",
            shape: |_, t, _| {
                t.devices.virtio_drivers = true;
                t.networks = ["VM Network", "DVS0"]
                    .iter()
                    .enumerate()
                    .map(|(i, n)| NetworkMapping {
                        source: (*n).into(),
                        pod: None,
                        multus: Some(MultusNetwork {
                            network_name: format!("vlan{}", 10 + i),
                        }),
                    })
                    .collect();
            },
            check: |s| {
                let n = s["networks"].as_array().cloned().unwrap_or_default();
                n.len() == 2 && n.iter().all(|x| x.get("multus").is_some())
            },
        },
        Row {
            name: "networks: no NIC mapped (autoattachPodInterface false)",
            shape: |_, t, _| {
                t.networks = vec![NetworkMapping {
                    source: "elsewhere".into(),
                    pod: Some(PodNetwork {}),
                    multus: None,
                }];
            },
            check: |s| {
                domain(s)["devices"]["autoattachPodInterface"] == false
                    && s.get("networks")
                        .is_none_or(|n| n.as_array().is_some_and(Vec::is_empty))
            },
        },
        Row {
            name: "a source without NICs",
            shape: |src, _, _| src.nics.clear(),
            check: |s| domain(s)["devices"].get("autoattachPodInterface") != Some(&json!(false)),
        },
        // Placement.
        Row {
            name: "placement: labels, annotations, nodeSelector, tolerations",
            shape: |_, t, _| {
                let p = &mut t.placement;
                p.labels = [("app".to_owned(), "web".to_owned())].into();
                p.annotations = [("owner".to_owned(), "team-a".to_owned())].into();
                p.node_selector = [("zone".to_owned(), "b".to_owned())].into();
                p.tolerations = vec![k8s_openapi::api::core::v1::Toleration {
                    key: Some("dedicated".into()),
                    operator: Some("Equal".into()),
                    value: Some("vms".into()),
                    effect: Some("NoSchedule".into()),
                    ..Default::default()
                }];
            },
            check: |s| {
                s["nodeSelector"]["zone"] == "b" && s["tolerations"][0]["key"] == "dedicated"
            },
        },
        Row {
            name: "placement: a cluster instancetype and a namespaced preference",
            shape: |_, t, _| {
                t.placement.instancetype = Some(InstancetypeRef {
                    name: INSTANCETYPE.into(),
                    kind: InstancetypeKind::VirtualMachineClusterInstancetype,
                });
                t.placement.preference = Some(PreferenceRef {
                    name: PREFERENCE.into(),
                    kind: PreferenceKind::VirtualMachinePreference,
                });
            },
            check: |s| domain(s).get("cpu").is_none() && domain(s).get("memory").is_none(),
        },
    ]
}

const INSTANCETYPE: &str = "ferry-test-u1-medium";
const PREFERENCE: &str = "ferry-test-linux";

/// The instancetype and preference the placement row names (KubeVirt's VM admission looks them
/// up): created for real, the cluster-wide one once per lab.
async fn instancetypes(client: &kube::Client, ns: &str) {
    let it = ApiResource {
        group: "instancetype.kubevirt.io".into(),
        version: "v1beta1".into(),
        api_version: "instancetype.kubevirt.io/v1beta1".into(),
        kind: "VirtualMachineClusterInstancetype".into(),
        plural: "virtualmachineclusterinstancetypes".into(),
    };
    let pref = ApiResource {
        kind: "VirtualMachinePreference".into(),
        plural: "virtualmachinepreferences".into(),
        ..it.clone()
    };
    let obj = |ar: &ApiResource, name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": ar.api_version, "kind": ar.kind,
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    };
    let cluster: Api<DynamicObject> = Api::all_with(client.clone(), &it);
    match cluster
        .create(
            &PostParams::default(),
            &obj(
                &it,
                INSTANCETYPE,
                json!({"cpu": {"guest": 2}, "memory": {"guest": "2Gi"}}),
            ),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("VirtualMachineClusterInstancetype: {e}"),
    }
    let prefs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &pref);
    prefs
        .create(
            &PostParams::default(),
            &obj(
                &pref,
                PREFERENCE,
                json!({"devices": {"preferredInterfaceModel": "virtio"}}),
            ),
        )
        .await
        .expect("VirtualMachinePreference");
}

/// Server-side dry run of a VirtualMachine: KubeVirt's answer (the VM as it would be stored,
/// mutated), or the apiserver's refusal (status code, message).
async fn dry_run(api: &Api<VirtualMachine>, vm: &VirtualMachine) -> Result<Value, (u16, String)> {
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&pp, vm).await {
        Ok(admitted) => Ok(serde_json::to_value(admitted).unwrap()),
        Err(kube::Error::Api(e)) => Err((e.code, e.message)),
        Err(e) => panic!("dry-run create: {e}"),
    }
}

async fn namespace(prefix: &str) -> (TestNamespace, Api<VirtualMachine>) {
    let ns = ferry_harness::lab_with(ferry_harness::KubeVirt::Real, "kubevirt-admission", 2)
        .namespace(prefix)
        .await
        .unwrap();
    let api = ns.api::<VirtualMachine>();
    (ns, api)
}

#[tokio::test]
async fn kubevirt_admits_every_vm_of_the_device_mapping_table() {
    let (ns, api) = namespace("kv-admit").await;
    instancetypes(&ns.client, &ns.name).await;
    let mut refused = vec![];
    let rows = rows();
    for row in &rows {
        let mut src = source();
        let mut target = TargetTemplate::default();
        (row.shape)(&mut src, &mut target, &ns.name);
        let vm = ferry_vm(&ns.name, src, target);
        let built = serde_json::to_value(&vm).unwrap();
        let spec = &built["spec"]["template"]["spec"];
        assert!(
            (row.check)(spec),
            "{}: ferry's VM is not what the row says:\n{}",
            row.name,
            serde_json::to_string_pretty(spec).unwrap()
        );
        match dry_run(&api, &vm).await {
            Ok(admitted) => {
                let kept = &admitted["spec"]["template"]["spec"];
                assert!(
                    (row.check)(kept),
                    "{}: KubeVirt admitted the VM but changed what the row is about:\n{}",
                    row.name,
                    serde_json::to_string_pretty(kept).unwrap()
                );
                // Admitted by virt-api, not past it: its VM mutator always sets a firmware
                // UUID and the machine type (KubeVirt's default, q35).
                assert!(
                    kept["domain"]["firmware"]["uuid"].is_string()
                        && kept["domain"]["machine"]["type"].is_string(),
                    "{}: the VM came back without virt-api's mutations:\n{}",
                    row.name,
                    serde_json::to_string_pretty(kept).unwrap()
                );
                println!("admitted  {}", row.name);
            }
            Err((code, message)) => {
                println!("REFUSED   {}: {code} {message}", row.name);
                refused.push(format!(
                    "{}: {code} {message}\n  ferry's VM: {}",
                    row.name,
                    serde_json::to_string(&built["spec"]).unwrap()
                ));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "KubeVirt refused {} of {} generated VMs:\n{}",
        refused.len(),
        rows.len(),
        refused.join("\n")
    );
}

#[tokio::test]
async fn kubevirt_refuses_with_its_own_message() {
    let (ns, api) = namespace("kv-refuse").await;

    // A disk whose volume is missing: virt-api's VM validator.
    let vm = ferry_vm(&ns.name, source(), TargetTemplate::default());
    let mut v = serde_json::to_value(&vm).unwrap();
    v["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let broken: VirtualMachine = serde_json::from_value(v).unwrap();
    let (code, message) = dry_run(&api, &broken)
        .await
        .expect_err("a disk without its volume was admitted");
    println!("refused: {code} {message}");
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains(
            r#"admission webhook "virtualmachine-validator.kubevirt.io" denied the request"#
        ) && message.contains("spec.template.spec.domain.devices.disks[0].Name 'disk-0' not found"),
        "{message}"
    );

    // A machine type ferry's CRD accepts (a pattern) and KubeVirt's default configuration does
    // not (emulatedMachines q35*, pc-q35*): the VM is refused with KubeVirt's words, which the
    // controller reports when CreatingVM fails.
    let mut target = TargetTemplate::default();
    target.devices.machine_type = Some("pc-i440fx-rhel7.6.0".into());
    let vm = ferry_vm(&ns.name, source(), target);
    let (code, message) = dry_run(&api, &vm)
        .await
        .expect_err("machine type pc-i440fx-rhel7.6.0 was admitted");
    println!("refused: {code} {message}");
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains(r#"admission webhook "virtualmachine-validator.kubevirt.io" denied the request"#)
            && message.contains(
                "spec.template.spec.domain.machine.type is not supported: pc-i440fx-rhel7.6.0 (allowed values: [q35* pc-q35*])"
            ),
        "{message}"
    );
}
