//! A real operating system booted from the bytes ferry moved, by the node.
//!
//! `tests/guests/build.sh GUEST` makes a small Debian guest and boots it once: that boot made
//! its machine id and a file only it has (`/var/lib/ferry/marker`), and printed its line. The
//! guest goes behind a vcsim VM as that VM's VMDK; ferry migrates it cold — vCenter, the
//! converter Job, S3, the import, the verification, the VirtualMachine — and ferry-sim, playing
//! the node with `--guests qemu`, runs the instance KubeVirt's own virt-controller made as a
//! qemu process from the VMI's spec (firmware, disks on their bus from the imported volume's
//! file, the guest agent's channel). The migration waits for the guest's own agent
//! (`readiness: AgentConnected`); the guest's line, read from its serial console through
//! `pods/log` of the launcher's `guest-console-log` container, must name the source's machine
//! id and marker: the migrated bytes are the source's system, and it runs.
//!
//! * `bios-virtio` boots on KubeVirt's defaults (SeaBIOS, virtio) and its agent connects;
//! * `uefi-virtio` (GPT, systemd-boot) on a vCenter VM with EFI firmware becomes a
//!   VirtualMachine with EFI (Secure Boot off) and boots on OVMF;
//! * `bios-vmware`, whose initramfs carries only VMware's storage drivers, does not find its
//!   root disk on SATA (nor on virtio): without guest conversion the migration fails `GuestNotReady` with the
//!   console's last lines, the target stopped and the source powered on again. The same
//!   migrated bytes boot on PVSCSI (`tests/guests/boot.sh`): what conversion is for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;
use ferry_controller::apis::kubevirt::VirtualMachineInstance;
use ferry_crds::{
    ConditionStatus, ConditionType, GuestConversion, Phase, Readiness, Reason, RestorePowerState,
    names,
};

/// One real guest at a time: each runs under TCG on a core of its own, beside the lab, a
/// converter and a sim, on CI's two cores; three at once starved everything else of CPU and
/// held three guests' disks (a few GiB each) at once.
static ONE_GUEST: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a migration that converts or boots a guest may take. `make test` runs this suite
/// at nice 19 beside the other suites, so a guest gets the CPU they leave: a conversion takes
/// about 250 s on an idle machine, and one took over 900 s on the project's CI runner
/// (2026-12-07, 84cd701) while the other suites ran. Once they end, the guest has
/// the cores, so the wait only needs to outlast them.
const GUEST_WORK_SECS: u64 = 1800;

/// The controller's `--agent-timeout` here, for the same reason: a boot under TCG takes about a
/// minute alone, and many more beside the other suites. No test waits it out (the guest that
/// cannot boot fails on its console's words), so a long one costs a passing run nothing.
const AGENT_TIMEOUT: &str = "1200s";

/// How long what a booted guest shows (its console's line, its agent's interfaces in the
/// instance's status: seconds alone) may take to appear, starved as above.
const AFTER_BOOT_SECS: u64 = 300;

/// Empties the source VM's VMDK (a copy of a cached guest, in the lab's datastore) when the
/// test ends, passed or not: each is up to a GiB that the lab's state would otherwise hold until
/// the end of `make test`.
struct EmptiedAtEnd(std::path::PathBuf);

impl Drop for EmptiedAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::File::create(&self.0);
    }
}

/// The guest's serial line, split into its fields.
fn fields(line: &str) -> std::collections::BTreeMap<String, String> {
    line.trim_start_matches("ferry-guest: ")
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The guest's `line`, checked to name the source's machine id and marker; its fields.
fn names_the_source(
    line: &str,
    source: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    let migrated = fields(line);
    assert_eq!(
        migrated.get("machine-id"),
        source.get("machine-id"),
        "{line}"
    );
    assert_eq!(migrated.get("marker"), source.get("marker"), "{line}");
    migrated
}

/// `tests/guests/build.sh GUEST`: the cached guest image, and its first boot's fields.
fn guest(
    name: &str,
) -> (
    std::path::PathBuf,
    std::collections::BTreeMap<String, String>,
) {
    let built = Command::new(ferry_harness::repo_root().join("tests/guests/build.sh"))
        .arg(name)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "tests/guests/build.sh {name}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let image = std::path::PathBuf::from(String::from_utf8(built.stdout).unwrap().trim());
    let first = std::fs::read_to_string(format!("{}.first-boot", image.display())).unwrap();
    let source = fields(&first);
    assert_eq!(
        source.get("boots").map(String::as_str),
        Some("1"),
        "{first}"
    );
    (image, source)
}

/// Migrates `image` cold as the (512 MiB, one vCPU) VM of a new test namespace `ns`, shaped
/// first with `shape` (`ferry-lab shape` arguments), the node running real guests; waits for
/// the migration to end (the guest's agent is what it waits for, at most `agent_timeout`;
/// `restore`: the source's power after a failure).
async fn migrated_shaped(
    ns: &str,
    image: &std::path::Path,
    shape: &[&str],
    virtio_drivers: bool,
    agent_timeout: &str,
    guest: GuestConversion,
    restore: RestorePowerState,
) -> (Env, ferry_crds::VirtualMachineMigration, EmptiedAtEnd) {
    let mut env = Env::new(ns, 1).await;
    let source = EmptiedAtEnd(env.vm.disks[0].local_path.clone());
    let mut args = vec!["--memory", "512", "--cpus", "1"];
    args.extend_from_slice(shape);
    env.shape(&env.vm.name.clone(), &args);
    // The guest is the VM's disk, as vSphere would hold it.
    let vmdk = &env.vm.disks[0].local_path;
    let convert = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "vmdk"])
        .arg(image)
        .arg(vmdk)
        .output()
        .unwrap();
    assert!(
        convert.status.success(),
        "{}",
        String::from_utf8_lossy(&convert.stderr)
    );
    // The tests' sims share one node; one that stops leaves its kubelet endpoint to another
    // within this interval (the console is read through it).
    env.sim_args = vec![
        "--guests".into(),
        "qemu".into(),
        "--node-status-update-frequency".into(),
        "2s".into(),
    ];
    env.extra_controller_args = vec!["--agent-timeout".into(), agent_timeout.into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("guest");
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    // Without it ferry puts the disks on SATA and the NICs on e1000e, which a guest without
    // virtio's drivers finds; the virtio guests' cloud kernel has no SATA driver.
    vmm.spec.target.template.devices.virtio_drivers = virtio_drivers;
    vmm.spec.conversion.guest = guest;
    vmm.spec.source.power.restore_power_state = restore;
    env.create(&vmm).await;
    let v = env
        .wait_for("guest", "the migration to settle", GUEST_WORK_SECS, |v| {
            v.phase().is_terminal()
                && v.status
                    .as_ref()
                    .and_then(|s| s.source_power_restore.as_deref())
                    .is_none_or(|r| r.result.is_some())
        })
        .await;
    (env, v, source)
}

/// The serial console of the migrated VM's instance so far, through `pods/log` of its launcher
/// pod's `guest-console-log` container, as an operator reads it (an error while the node's
/// kubelet endpoint moves: the tests' sims share the node, and one that stops leaves it to
/// another within its status interval).
async fn console_of(env: &Env, v: &ferry_crds::VirtualMachineMigration) -> kube::Result<String> {
    use k8s_openapi::api::core::v1::Pod;
    let vmis: kube::Api<VirtualMachineInstance> = env.ns.api();
    let vmi = vmis.get(&names::vm_name(v)).await.unwrap();
    let uid = vmi.metadata.uid.clone().unwrap();
    let pods: kube::Api<Pod> = env.ns.api();
    let listed = pods
        .list(&kube::api::ListParams::default().labels(&format!("kubevirt.io/created-by={uid}")))
        .await
        .unwrap();
    let pod = listed.items.first().expect("the instance's launcher pod");
    let params = kube::api::LogParams {
        container: Some("guest-console-log".into()),
        ..Default::default()
    };
    pods.logs(pod.metadata.name.as_deref().unwrap(), &params)
        .await
}

/// Waits (at most `AFTER_BOOT_SECS`) for the guest's line on the migrated VM's console.
async fn guest_line(env: &Env, v: &ferry_crds::VirtualMachineMigration) -> String {
    let found = ferry_harness::eventually(
        "the guest's line on its console",
        std::time::Duration::from_secs(AFTER_BOOT_SECS),
        || async {
            let console = console_of(env, v).await.ok()?;
            console
                .lines()
                .find_map(|l| l.find("ferry-guest: ").map(|i| l[i..].trim().to_owned()))
        },
    )
    .await;
    match found {
        Ok(line) => line,
        Err(_) => panic!(
            "no guest line; the console:\n{:?}",
            console_of(env, v).await
        ),
    }
}

/// The migrated VM's instance, read whole: ferry's own VMI type keeps only the status fields it
/// decides on.
fn vmi_json(env: &Env, v: &ferry_crds::VirtualMachineMigration) -> serde_json::Value {
    let json = env
        .lab
        .kubectl_ok(&[
            "get",
            "vmi",
            "-n",
            &env.ns.name,
            &names::vm_name(v),
            "-o",
            "json",
        ])
        .unwrap();
    serde_json::from_str(&json).unwrap()
}

/// The migration succeeded with the guest's own agent, and the instance says what the agent
/// said of the guest: its OS, and (virt-handler's `status.interfaces`, in seconds: the
/// agent is asked again 10 s after its first answer) the guest's own name for the VMI's
/// interface, found by the interface's MAC.
async fn assert_booted_with_its_agent(env: &Env, v: &ferry_crds::VirtualMachineMigration) {
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(v));
    let vmi = vmi_json(env, v);
    let os = &vmi["status"]["guestOSInfo"];
    assert_eq!(os["id"], "debian", "{vmi}");
    assert_eq!(os["prettyName"], "Debian GNU/Linux 12 (bookworm)", "{vmi}");
    let spec = &vmi["spec"]["domain"]["devices"]["interfaces"][0];
    let name = spec["name"]
        .as_str()
        .expect("the VMI's interface")
        .to_owned();
    // ferry keeps the source's MAC; libvirt (and the guest) write it in lower case.
    let mac = spec["macAddress"]
        .as_str()
        .expect("the source's MAC kept")
        .to_lowercase();
    let from_the_agent = |i: &serde_json::Value| {
        i["name"] == name.as_str()
            && i["mac"] == mac.as_str()
            && i["interfaceName"].as_str().is_some_and(|n| !n.is_empty())
            && i["infoSource"]
                .as_str()
                .is_some_and(|s| s.split(", ").any(|s| s == "guest-agent"))
    };
    let reported = ferry_harness::eventually(
        "the guest agent's interface in the instance's status",
        std::time::Duration::from_secs(AFTER_BOOT_SECS),
        || async {
            let vmi = vmi_json(env, v);
            let ifaces = vmi["status"]["interfaces"].as_array()?.clone();
            ifaces.into_iter().find(&from_the_agent)
        },
    )
    .await;
    if reported.is_err() {
        let vmi = vmi_json(env, v);
        panic!(
            "no interface {name} ({mac}) with the guest's name from its agent; status.interfaces: {}",
            vmi["status"]["interfaces"]
        );
    }
}

/// The converted guest kept its card's VMware name, `ens192` (its vmxnet3 card is in ESXi's PCI
/// slot 192 as the lab's vCenter reports it), and with it the static address its configuration gives that name
/// (192.0.2.10/24), as its own agent reports them; `status.guest` says the name was kept.
/// Without the kept name the virtio card comes up as `enp1s0` with no address.
async fn assert_kept_its_network_identity(env: &Env, v: &ferry_crds::VirtualMachineMigration) {
    let vmi = vmi_json(env, v);
    let mac = vmi["spec"]["domain"]["devices"]["interfaces"][0]["macAddress"]
        .as_str()
        .expect("the source's MAC kept")
        .to_lowercase();
    let guest = v.status.as_ref().and_then(|s| s.guest.as_deref()).unwrap();
    assert_eq!(
        guest.interface_names,
        [format!("kept ens192 for {mac}")],
        "{guest:?}"
    );
    let kept = |i: &serde_json::Value| {
        i["mac"] == mac.as_str()
            && i["interfaceName"] == "ens192"
            && i["ipAddresses"]
                .as_array()
                .is_some_and(|a| a.iter().any(|ip| ip == "192.0.2.10"))
    };
    let reported = ferry_harness::eventually(
        "the guest's ens192 with its static address, from its agent",
        std::time::Duration::from_secs(AFTER_BOOT_SECS),
        || async {
            let vmi = vmi_json(env, v);
            vmi["status"]["interfaces"]
                .as_array()?
                .iter()
                .find(|i| kept(i))
                .cloned()
        },
    )
    .await;
    if reported.is_err() {
        let vmi = vmi_json(env, v);
        panic!(
            "the converted guest lost its network identity (want ens192 with 192.0.2.10 on {mac}); status.interfaces: {}",
            vmi["status"]["interfaces"]
        );
    }
}

/// `tests/guests/boot.sh IMAGE 300 BUS` on SeaBIOS: its exit code, its line, and its
/// console's end.
fn boot(image: &std::path::Path, bus: &str) -> (Option<i32>, String, String) {
    let out = Command::new(ferry_harness::repo_root().join("tests/guests/boot.sh"))
        .arg(image)
        .arg("300")
        .arg(bus)
        .output()
        .unwrap();
    let console =
        std::fs::read_to_string(format!("{}.console", image.display())).unwrap_or_default();
    let end: Vec<&str> = console.lines().rev().take(30).collect();
    let end: Vec<&str> = end.into_iter().rev().collect();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        end.join("\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debian_guest_migrated_cold_boots_from_the_imported_volume() {
    let _one = ONE_GUEST.lock().await;
    let (image, source) = guest("bios-virtio");
    let (env, v, _source) = migrated_shaped(
        "e2e-real-guest",
        &image,
        &[],
        true,
        AGENT_TIMEOUT,
        GuestConversion::Never,
        RestorePowerState::OnCancelOrFailure,
    )
    .await;
    assert_booted_with_its_agent(&env, &v).await;
    let line = guest_line(&env, &v).await;
    let migrated = names_the_source(&line, &source);
    assert_eq!(
        migrated.get("boots").map(String::as_str),
        Some("2"),
        "the source's one boot, then this one: {line}"
    );
}

/// The guest that needs converting: its initramfs has only VMware's storage drivers.
///
/// Migrated byte for byte (`conversion.guest: Never`), on SATA (ferry's bus for a guest not said
/// to have virtio's drivers) it does not find its root disk: the migration fails `GuestNotReady`
/// with what the console said. The same migrated bytes boot on VMware's PVSCSI and name the
/// source. The source stays off (`restorePowerState: Never`), so a retry with
/// `conversion.guest: Auto` resumes at ConvertingGuest on the volumes already imported, after
/// removing the VM made for the unconverted guest: ferry's guest Job converts it
/// (`virt-v2v-in-place` on an overlay, landed on the volume through its journal), records what
/// it did and the converted volume's checksum, and makes the VM on virtio; the guest boots from
/// the converted bytes, its agent connects and its line names the source. (One migration for
/// both: each copy and boot of a real guest costs minutes of CI's two cores.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_with_only_vmwares_drivers_does_not_boot_until_a_retry_converts_it() {
    let _one = ONE_GUEST.lock().await;
    use ferry_controller::apis::kubevirt::VirtualMachine;
    let (image, source) = guest("bios-vmware");
    let (mut env, v, _source) = migrated_shaped(
        "e2e-real-guest-vmw",
        &image,
        // VMware's own NIC, which ESXi puts in PCI slot 192: the guest's ens192.
        &["--nic-type", "vmxnet3"],
        false,
        AGENT_TIMEOUT,
        GuestConversion::Never,
        RestorePowerState::Never,
    )
    .await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!(f.reason, Reason::GuestNotReady, "{}", f.message);
    // Failed when its console gave up (rootdelay=30), not at the end of the agent's timeout: the
    // message is the console's, not the timeout's.
    assert!(
        f.message
            .contains("the guest cannot boot: initramfs-tools said \"Gave up waiting for root")
            && !f.message.contains("did not connect within"),
        "the console's last lines: {}",
        f.message
    );
    assert_eq!(
        env.power_state().await,
        "poweredOff",
        "restorePowerState: Never"
    );
    let volume = env
        .volumes
        .join(&env.ns.name)
        .join(format!("{}.img", names::datavolume_name(&v, 0)));
    let copy = env.scratch.join("migrated.raw");
    std::fs::copy(&volume, &copy).unwrap();
    let (code, line, console) = boot(&copy, "pvscsi");
    assert_eq!(
        code,
        Some(0),
        "on PVSCSI it boots; its console's end:\n{console}"
    );
    names_the_source(&line, &source);
    std::fs::remove_file(&copy).unwrap();

    // Converted on retry, from where the volumes are.
    let old_vm_uid = {
        let vms: kube::Api<VirtualMachine> = env.ns.api();
        vms.get(&names::vm_name(&v)).await.unwrap().metadata.uid
    };
    let creations = Creations::watch(&env).await;
    env.patch_spec(
        "guest",
        serde_json::json!({"conversion": {"guest": "Auto"}, "retry": 1}),
    )
    .await;
    // The controller SIGKILLed and restarted at each point of ConvertingGuest it can be caught
    // at from outside: on entering it, while the guest Job's pod converts, and once the Job is
    // complete (its result read or not yet). The guest Job's own kills, at each of its steps:
    // `guest_job_kills.rs`.
    env.wait_for("guest", "the retry's ConvertingGuest", 300, |v| {
        v.phase() == Phase::ConvertingGuest
    })
    .await;
    env.controller.as_mut().unwrap().kill();
    env.start_controller();
    let job = names::guest_job_name(&v);
    guest_job_until(&env, &job, "its pod running", |s| s.active.unwrap_or(0) > 0).await;
    env.controller.as_mut().unwrap().kill();
    env.start_controller();
    guest_job_until(&env, &job, "complete", |s| s.succeeded.unwrap_or(0) > 0).await;
    env.controller.as_mut().unwrap().kill();
    env.start_controller();
    let v = env
        .wait_for("guest", "the retry to end", GUEST_WORK_SECS, |v| {
            v.phase().is_terminal() && v.status.as_ref().is_some_and(|s| s.attempts == 2)
        })
        .await;
    let status = v.status.as_ref().unwrap();
    let second: Vec<Phase> = status
        .history
        .iter()
        .filter(|h| h.attempt == 2)
        .map(|h| h.phase)
        .collect();
    assert_eq!(
        second,
        [
            Phase::ConvertingGuest,
            Phase::CreatingVM,
            Phase::Starting,
            Phase::Validating,
            Phase::Succeeded
        ],
        "resumed at ConvertingGuest, nothing copied again: {}",
        serde_yaml_status(&v)
    );
    let guest = status
        .guest
        .as_deref()
        .unwrap_or_else(|| panic!("no status.guest: {}", serde_yaml_status(&v)));
    assert!(guest.converted, "{guest:?}");
    assert!(
        guest
            .operating_system
            .as_deref()
            .is_some_and(|os| os.contains("12")),
        "the OS virt-v2v converted: {guest:?}"
    );
    let c = v.condition(ConditionType::GuestConverted).unwrap();
    assert_eq!(
        (c.status, c.reason),
        (ConditionStatus::True, Reason::GuestConverted),
        "{c:?}"
    );
    // The guest Job recorded the converted volume's checksum, not the staged one (the volume
    // itself moves on once the guest boots and writes to it; `convert/tests/guest.rs` proves
    // the record is what the landing left).
    assert_eq!(guest.volumes.len(), 1, "{guest:?}");
    let recorded = &guest.volumes[0].sha256;
    assert_eq!(recorded.len(), 64, "{guest:?}");
    assert_ne!(
        Some(recorded.as_str()),
        status.disks[0].raw_checksum.as_deref(),
        "the conversion changed the volume"
    );
    assert!(guest.volumes[0].written_bytes > 0, "{guest:?}");
    // Nothing of the landing is left beside the volume.
    let files = env
        .volumes
        .join(&env.ns.name)
        .join(format!("{}.files", names::datavolume_name(&v, 0)));
    for f in [ferry_convert::guest::JOURNAL, ferry_convert::guest::LANDING] {
        assert!(!files.join(f).exists(), "{f} left beside the volume");
    }
    let vms: kube::Api<VirtualMachine> = env.ns.api();
    let vm = vms.get(&names::vm_name(&v)).await.unwrap();
    assert_ne!(
        vm.metadata.uid, old_vm_uid,
        "the unconverted guest's VM was replaced"
    );
    let vm = serde_json::to_value(&vm).unwrap();
    assert_eq!(
        vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"], "virtio",
        "a converted guest gets virtio: {vm}"
    );
    assert_booted_with_its_agent(&env, &v).await;
    assert_kept_its_network_identity(&env, &v).await;
    names_the_source(&guest_line(&env, &v).await, &source);
    // The unconverted guest's VirtualMachine was replaced once (asserted above); nothing else
    // was made twice.
    assert_eq!(
        creations.duplicates(),
        vec![(format!("VirtualMachine/{}", names::vm_name(&v)), 2)],
        "no child made twice across the kills"
    );
    assert!(
        creations.names().contains(&format!("Job/{job}")),
        "{:?}",
        creations.names()
    );
}

/// Waits (at most 600 s) until the Job `name` of `env`'s namespace has a status that `done`
/// accepts.
async fn guest_job_until(
    env: &Env,
    name: &str,
    what: &str,
    done: impl Fn(&k8s_openapi::api::batch::v1::JobStatus) -> bool,
) {
    use futures::StreamExt;
    use k8s_openapi::api::batch::v1::Job;
    use kube::runtime::{WatchStreamExt, watcher};
    let jobs: kube::Api<Job> = env.ns.api();
    let mut seen = std::pin::pin!(
        watcher(
            jobs,
            watcher::Config::default().fields(&format!("metadata.name={name}"))
        )
        .default_backoff()
        .applied_objects()
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(GUEST_WORK_SECS);
    loop {
        match tokio::time::timeout_at(deadline, seen.next()).await {
            Ok(Some(Ok(j))) if j.status.as_ref().is_some_and(&done) => return,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!(
                "the guest Job {name} was not {what} in time{}; logs in {}",
                env.job_log_tails(),
                env.scratch.display()
            ),
        }
    }
}

/// Warm: the VMware-only guest, its VMDK an ESXi flat disk, is copied while its source runs,
/// cut over at once (`warm.cutover`), and converted after the cutover, inside the downtime (its
/// volume holds the first copy and the cutover's changes, which no checksum covers: the guest
/// Job converts it unverified, landing all or nothing); it boots on virtio and names the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_with_only_vmwares_drivers_migrated_warm_is_converted_after_its_cutover() {
    let _one = ONE_GUEST.lock().await;
    let (image, source) = guest("bios-vmware");
    let mut env = Env::new("e2e-real-guest-warm", 1).await;
    let descriptor = env.vm.disks[0].local_path.clone();
    let flat = descriptor.with_file_name(format!(
        "{}-flat.vmdk",
        descriptor.file_stem().unwrap().to_str().unwrap()
    ));
    let _source_disk = EmptiedAtEnd(flat.clone());
    env.shape(
        &env.vm.name.clone(),
        &["--memory", "512", "--cpus", "1", "--nic-type", "vmxnet3"],
    );
    // The guest as ESXi keeps a disk: a descriptor and its flat extent.
    let cp = Command::new("cp")
        .args(["--sparse=always"])
        .arg(&image)
        .arg(&flat)
        .status()
        .unwrap();
    assert!(cp.success());
    let sectors = std::fs::metadata(&image).unwrap().len() / 512;
    std::fs::write(
        &descriptor,
        format!(
            "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"vmfs\"\n\n# Extent description\nRW {sectors} VMFS \"{}\"\n\n# The Disk Data Base\n#DDB\nddb.adapterType = \"lsilogic\"\n",
            flat.file_name().unwrap().to_str().unwrap()
        ),
    )
    .unwrap();
    let s = lab_session(env.lab).await;
    s.power_on(&env.vm.moref).await.unwrap();
    let _ = s.logout().await;
    env.sim_args = vec![
        "--guests".into(),
        "qemu".into(),
        "--node-status-update-frequency".into(),
        "2s".into(),
    ];
    env.extra_controller_args = vec!["--agent-timeout".into(), AGENT_TIMEOUT.into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = env.warm_migration("guest", true);
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    vmm.spec.target.template.devices.virtio_drivers = false;
    vmm.spec.conversion.guest = GuestConversion::Auto;
    vmm.spec.source.power.restore_power_state = RestorePowerState::OnCancelOrFailure;
    env.create(&vmm).await;
    let v = env.wait_terminal("guest", GUEST_WORK_SECS).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let status = v.status.as_ref().unwrap();
    let visited: Vec<Phase> = status.history.iter().map(|h| h.phase).collect();
    assert_eq!(
        visited,
        [
            Phase::Preparing,
            Phase::Converting,
            Phase::Importing,
            Phase::CuttingOver,
            Phase::ConvertingGuest,
            Phase::CreatingVM,
            Phase::Starting,
            Phase::Validating,
            Phase::Succeeded
        ],
        "converted after the cutover"
    );
    let guest = status.guest.as_deref().unwrap();
    assert!(guest.converted, "{guest:?}");
    assert_booted_with_its_agent(&env, &v).await;
    assert_kept_its_network_identity(&env, &v).await;
    names_the_source(&guest_line(&env, &v).await, &source);
}

/// A UEFI guest (GPT, an EFI system partition with systemd-boot) on a vCenter VM whose firmware
/// is `efi`: ferry makes a VirtualMachine with EFI (Secure Boot off, as the source had it), and
/// the node boots it on OVMF; its agent connects and its line names the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uefi_guest_migrated_cold_boots_on_ovmf() {
    let _one = ONE_GUEST.lock().await;
    use ferry_controller::apis::kubevirt::VirtualMachine;
    let (image, source) = guest("uefi-virtio");
    let (env, v, _source) = migrated_shaped(
        "e2e-real-guest-efi",
        &image,
        &["--firmware", "efi"],
        true,
        AGENT_TIMEOUT,
        GuestConversion::Never,
        RestorePowerState::OnCancelOrFailure,
    )
    .await;
    let vms: kube::Api<VirtualMachine> = env.ns.api();
    let vm = vms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no VirtualMachine: {}", serde_yaml_status(&v)));
    let vm = serde_json::to_value(&vm).unwrap();
    let efi = &vm["spec"]["template"]["spec"]["domain"]["firmware"]["bootloader"]["efi"];
    assert_eq!(efi["secureBoot"], serde_json::json!(false), "{vm}");
    assert_booted_with_its_agent(&env, &v).await;
    names_the_source(&guest_line(&env, &v).await, &source);
}
