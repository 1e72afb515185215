//! Preflight: every concern about a VM and its target, found from what Preparing observes and
//! before anything is touched. Pure.
//!
//! Preparing runs these rules on each look at the source, before the power-off: a Critical
//! concern the operator has not accepted sends the migration back to Pending with reason
//! `PreflightFailed` (nothing was touched), to be checked again every
//! [`Policy::preflight_recheck`](crate::policy::Policy) or at once on a spec change. A
//! migration paused in Pending is preflighted on the same schedule without ever starting.
//!
//! The codes of the target (a name conflict, the staging bucket) keep the rules Preparing had
//! before preflight — waited for, retried or failed — and are recorded here too, so that one
//! list shows every blocker.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry_crds::{
    Concern, ConcernCode as Code, DiscoveredSource, DiskBus, GuestOsFamily, MigrationMode,
    NicModel, PowerState, PreflightStatus, Severity, ToolsState, VirtualMachineMigration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::problem::Problem;
use ferry_vsphere::LayoutProblem;

/// What Preparing found about the source and the names and places the migration will use:
/// what preflight weighs.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceFacts {
    /// The VM as read now (its power state is the current one).
    pub vm: DiscoveredSource,
    /// What about its disks and devices preflight must weigh (empty when nothing).
    pub layout_problems: Vec<ferry_vsphere::LayoutProblem>,
    /// How many virtual disks vSphere counts (`summary.config.numVirtualDisks`), when it says.
    pub disks_reported: Option<u32>,
    /// What of vSphere's answer about the VM ferry could not read, each named.
    pub unread: Vec<String>,
    /// What defines a copy of it as read now (a cold migration records it as it leaves
    /// Preparing, the source off).
    pub state: Option<ferry_crds::SourceState>,
    /// The staging bucket: reachable and present, or why not.
    pub bucket: Result<(), Problem>,
    /// A VirtualMachine with the target name that this migration does not own.
    pub target_taken: bool,
    /// Other child names (Job, CDI Secret and ConfigMap, DataVolumes) held by objects that are
    /// not this migration's.
    pub conflicts: Vec<crate::children::Conflict>,
    /// The converter image the migration would run, or why it may not.
    pub converter_image: Result<String, String>,
    /// The NetworkAttachmentDefinitions (`namespace/name`) of the Multus mappings that do not
    /// exist (only those the platform allows are looked for).
    pub missing_networks: Vec<String>,
    /// Whether the platform lets a migration use another namespace's networks.
    pub cross_namespace_networks: bool,
    /// The StorageClasses the disks' volumes would use (named ones only) that do not exist.
    pub missing_classes: Vec<String>,
    /// The instancetype and preference the placement names that do not exist (`Kind name`).
    pub missing_instancetypes: Vec<String>,
    /// What each ResourceQuota of the namespace has left.
    pub quotas: Vec<QuotaLeft>,
    /// What the named classes' drivers report they have room for, per topology segment (none
    /// where they report nothing).
    pub capacities: Vec<ClassRoom>,
}

pub use crate::quota::QuotaLeft;

/// CDI's default filesystem overhead (CDIConfig `filesystemOverhead.global`, "0.055"): on a
/// Filesystem volume the claim CDI makes for a DataVolume's `storage` is the disk's size over
/// (1 − overhead), so the disk image and its filesystem fit (CDI `GetRequiredSpace`). A Block
/// volume's claim is the disk's size.
const CDI_FILESYSTEM_OVERHEAD: f64 = 0.055;

/// What the claims of the VM's disks take of each quota resource: bytes and claims in all, and
/// per StorageClass named (a claim on the cluster's default class counts in the totals only:
/// which class that is, the apiserver decides when the claim is made). A disk whose volume mode
/// is not said is counted as Filesystem, the larger. Pure.
pub fn claims_need(
    vmm: &VirtualMachineMigration,
    disks: &[ferry_crds::DiscoveredDisk],
) -> BTreeMap<String, u64> {
    let mut need: BTreeMap<String, u64> = BTreeMap::new();
    let mut add = |k: String, n: u64| *need.entry(k).or_default() += n;
    for (class, bytes) in disk_claims(vmm, disks) {
        for claims in ["persistentvolumeclaims", "count/persistentvolumeclaims"] {
            add(claims.into(), 1);
        }
        add("requests.storage".into(), bytes);
        if let Some(class) = class {
            let per_class = |r: &str| format!("{class}.storageclass.storage.k8s.io/{r}");
            add(per_class("requests.storage"), bytes);
            add(per_class("persistentvolumeclaims"), 1);
        }
    }
    need
}

/// Each disk's claim: the StorageClass it names (none: the cluster's default) and its bytes. Pure.
fn disk_claims(
    vmm: &VirtualMachineMigration,
    disks: &[ferry_crds::DiscoveredDisk],
) -> Vec<(Option<String>, u64)> {
    let template = &vmm.spec.target.template;
    disks
        .iter()
        .map(|d| {
            let placement = template.placement(ferry_crds::datastore_of(&d.datastore_path));
            let block = placement
                .as_ref()
                .is_some_and(|p| p.volume_mode == Some(ferry_crds::VolumeMode::Block));
            let size = u64::try_from(d.capacity_bytes.max(1)).unwrap_or_default();
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let bytes = if block {
                size
            } else {
                (size as f64 / (1.0 - CDI_FILESYSTEM_OVERHEAD)).ceil() as u64
            };
            (placement.and_then(|p| p.storage_class_name), bytes)
        })
        .collect()
}

/// What a CSI driver reports a StorageClass has room for in one topology segment
/// (`CSIStorageCapacity`: its `maximumVolumeSize`, else its `capacity`), in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRoom {
    /// The StorageClass.
    pub class: String,
    /// The largest volume the segment can provision.
    pub bytes: u64,
}

/// A named class whose driver reports capacity (CSIStorageCapacity objects) and no segment of
/// it with room for the largest of the disks' claims on it: that claim could never be
/// provisioned (the scheduler's volume binding filters on these objects). A class with no
/// report is not judged. Pure.
fn capacity(vmm: &VirtualMachineMigration, facts: &SourceFacts) -> Vec<Concern> {
    let mut largest: BTreeMap<String, u64> = BTreeMap::new();
    for (class, bytes) in disk_claims(vmm, &facts.vm.disks) {
        if let Some(class) = class {
            let l = largest.entry(class).or_default();
            *l = (*l).max(bytes);
        }
    }
    largest
        .into_iter()
        .filter_map(|(class, need)| {
            let rooms = facts.capacities.iter().filter(|r| r.class == class);
            let most = rooms.map(|r| r.bytes).max()?;
            (most < need).then(|| {
                critical(
                    Code::StorageCapacityShort,
                    say::capacity_short(&class, most, need),
                )
            })
        })
        .collect()
}

/// Where the claims of a wave's VMs not started yet (`claims`, summed from their preflights)
/// exceed what a quota of the namespace has left: one message per quota resource short. Pure.
pub fn wave_short(claims: &BTreeMap<String, i64>, quotas: &[QuotaLeft], ns: &str) -> Vec<String> {
    let mut out = vec![];
    for q in quotas {
        for (resource, n) in claims {
            let n = u64::try_from(*n).unwrap_or_default();
            if let Some(left) = q.left.get(resource).filter(|l| **l < n) {
                out.push(say::wave_quota_short(ns, &q.name, resource, *left, n));
            }
        }
    }
    out.truncate(8);
    out
}

/// Each quota resource that has less left than the disks' claims need.
fn quotas(vmm: &VirtualMachineMigration, facts: &SourceFacts) -> Vec<Concern> {
    let need = claims_need(vmm, &facts.vm.disks);
    let ns = vmm.metadata.namespace.as_deref().unwrap_or_default();
    let mut out = vec![];
    for q in &facts.quotas {
        for (resource, n) in &need {
            if let Some(left) = q.left.get(resource).filter(|l| *l < n) {
                let msg = say::quota_short(ns, &q.name, resource, *left, *n);
                out.push(critical(Code::QuotaExceeded, msg));
            }
        }
    }
    out
}

impl SourceFacts {
    /// The facts of `vm` with nothing else to weigh: read whole, staging and names fine, the
    /// default converter image (tests start from it and change one thing).
    #[cfg(test)]
    pub fn clean(vm: DiscoveredSource) -> Self {
        let disks = u32::try_from(vm.disks.len()).unwrap_or(u32::MAX);
        Self {
            vm,
            layout_problems: vec![],
            disks_reported: Some(disks),
            unread: vec![],
            state: None,
            bucket: Ok(()),
            target_taken: false,
            conflicts: vec![],
            converter_image: Ok("img".into()),
            missing_networks: vec![],
            cross_namespace_networks: false,
            missing_classes: vec![],
            missing_instancetypes: vec![],
            quotas: vec![],
            capacities: vec![],
        }
    }
}

/// Every concern about the migration of `facts`' VM, Critical first. Pure.
pub fn concerns(vmm: &VirtualMachineMigration, facts: &SourceFacts) -> Vec<Concern> {
    let name = facts.vm.name.clone().unwrap_or_default();
    let mut out = vec![];
    if let Err(msg) = read_whole(&name, facts) {
        out.push(critical(Code::IncompleteInventory, msg));
    }
    if facts.vm.disks.is_empty() && facts.layout_problems.is_empty() {
        out.push(critical(Code::NoDisk, say::no_disk(&name)));
    }
    out.extend(facts.layout_problems.iter().map(of_layout));
    out.extend(power(vmm, facts, &name));
    out.extend(firmware(facts));
    out.extend(change_tracking(vmm, facts, &name));
    out.extend(bus(vmm, facts));
    out.extend(networks(vmm, facts));
    out.extend(datastores(vmm, facts));
    out.extend(attachments(vmm, facts));
    out.extend(
        facts
            .missing_classes
            .iter()
            .map(|c| critical(Code::StorageClassMissing, say::class_missing(c))),
    );
    out.extend(
        facts
            .missing_instancetypes
            .iter()
            .map(|i| critical(Code::InstancetypeMissing, say::instancetype_missing(i))),
    );
    out.extend(quotas(vmm, facts));
    out.extend(capacity(vmm, facts));
    if facts.target_taken {
        out.push(critical(Code::TargetNameTaken, target_taken(vmm)));
    }
    out.extend(facts.conflicts.iter().map(|c| {
        let p = c.problem(super::world::RENAME_HINT);
        critical(Code::NameConflict, p.message)
    }));
    if let Err(msg) = &facts.converter_image {
        out.push(critical(Code::ConverterImageNotAllowed, msg.clone()));
    }
    if let Err(p) = &facts.bucket {
        out.push(critical(Code::StagingUnavailable, p.message.clone()));
    }
    out.sort_by_key(|c| c.severity);
    out
}

/// What a target name held by someone else's VirtualMachine means, and what to do. Pure.
pub fn target_taken(vmm: &VirtualMachineMigration) -> String {
    say::target_taken(&ferry_crds::names::vm_name(vmm))
}

/// The concern of a source that could not be checked at all. Pure.
pub fn unavailable(p: &Problem) -> Vec<Concern> {
    vec![critical(
        Code::SourceUnavailable,
        format!("{}: {}", p.reason, p.message),
    )]
}

/// The preflight record of `concerns`, checked `now` for the spec's generation; `previous`
/// (with its time) when it found the same, so that looking again writes nothing. Pure.
pub fn record(
    vmm: &VirtualMachineMigration,
    concerns: Vec<Concern>,
    claims: BTreeMap<String, u64>,
    now: &Time,
    previous: Option<&PreflightStatus>,
) -> PreflightStatus {
    let accepted = accepted(vmm, &concerns);
    let new = PreflightStatus {
        checked_at: Some(now.clone()),
        observed_generation: vmm.metadata.generation,
        concerns,
        accepted,
        claims: claims
            .into_iter()
            .map(|(k, v)| (k, i64::try_from(v).unwrap_or(i64::MAX)))
            .collect(),
    };
    match previous {
        Some(p)
            if p.concerns == new.concerns
                && p.accepted == new.accepted
                && p.claims == new.claims
                && p.observed_generation == new.observed_generation =>
        {
            p.clone()
        }
        _ => new,
    }
}

/// The Critical concerns among `concerns` that `spec.preflight.accept` accepts (only codes that
/// may be accepted). Pure.
fn accepted(vmm: &VirtualMachineMigration, concerns: &[Concern]) -> Vec<Code> {
    let asked = vmm
        .spec
        .preflight
        .as_ref()
        .map(|p| p.accept.as_slice())
        .unwrap_or_default();
    let mut out: Vec<Code> = concerns
        .iter()
        .filter(|c| c.severity == Severity::Critical && c.code.acceptable())
        .map(|c| c.code)
        .filter(|code| asked.contains(code))
        .collect();
    out.dedup();
    out
}

/// Whether a Critical concern of these codes holds the migration in Pending; the others keep
/// Preparing's own rules (see the module's comment). Pure.
pub fn holds(code: Code) -> bool {
    match code {
        Code::NameConflict
        | Code::StagingUnavailable
        | Code::TargetNameTaken
        | Code::ConverterImageNotAllowed
        | Code::SourceUnavailable => false,
        Code::PoweredOn
        | Code::ToolsNotRunning
        | Code::SnapshotPresent
        | Code::RawDeviceMapping
        | Code::IndependentDisk
        | Code::SharedDisk
        | Code::EncryptedDisk
        | Code::Passthrough
        | Code::UnsupportedDisk
        | Code::IncompleteInventory
        | Code::NoDisk
        | Code::SecureBoot
        | Code::ChangeTrackingOff
        | Code::BusWithoutDrivers
        | Code::NetworkUnmapped
        | Code::NetworkAttachmentMissing
        | Code::NetworkNotAllowed
        | Code::StorageClassMissing
        | Code::InstancetypeMissing
        | Code::DatastoreUnmapped
        | Code::QuotaExceeded
        | Code::StorageCapacityShort => true,
    }
}

/// How long until a migration held or paused in Pending is checked again; `None` when it is
/// due now (never checked, the spec changed since, or the interval passed). The interval runs
/// from the later of `checkedAt` and `ran`, when this process last looked for the same spec
/// generation: findings unchanged keep the old `checkedAt` (nothing to write), and the look
/// after them must not come at every reconcile. Pure.
pub fn recheck_in(
    vmm: &VirtualMachineMigration,
    now: &Time,
    every: Duration,
    ran: Option<&Time>,
) -> Option<Duration> {
    let p = vmm.status.as_ref()?.preflight.as_ref()?;
    if p.observed_generation != vmm.metadata.generation {
        return None;
    }
    let at = p.checked_at.as_ref()?;
    let at = ran.filter(|r| r.0 > at.0).unwrap_or(at);
    let since = now.0.duration_since(at.0);
    let since = Duration::try_from(since).unwrap_or_default();
    every.checked_sub(since).filter(|d| !d.is_zero())
}

/// Whether preflight holds the migration in Pending: a Critical concern nobody accepted, of a
/// code that holds. Pure.
pub fn held(vmm: &VirtualMachineMigration) -> bool {
    vmm.phase() == ferry_crds::Phase::Pending
        && vmm
            .status
            .as_ref()
            .and_then(|s| s.preflight.as_ref())
            .is_some_and(|p| p.blocking().any(|c| holds(c.code)))
}

/// How long a migration held in Pending by preflight waits before its next look; `None` when
/// it is not held or the look is due (`ran` as in [`recheck_in`]). Pure.
pub fn waiting(
    vmm: &VirtualMachineMigration,
    now: &Time,
    every: Duration,
    ran: Option<&Time>,
) -> Option<Duration> {
    held(vmm)
        .then(|| recheck_in(vmm, now, every, ran))
        .flatten()
}

/// Whether ferry read the source VM whole: every part of vSphere's answer, and at least as many
/// virtual disks as vSphere counts. A disk ferry did not read would be missing from the migrated
/// VM, and the migration would still succeed. Pure.
///
/// # Errors
/// Why not, naming what ferry could not read, else the count and the disks it did read.
fn read_whole(name: &str, facts: &SourceFacts) -> Result<(), String> {
    let read = facts.vm.disks.len();
    let count = facts
        .disks_reported
        .filter(|n| usize::try_from(*n).is_ok_and(|n| n > read))
        .map(|n| say::disks_counted(n, read));
    match (facts.unread.as_slice(), count) {
        ([], None) => Ok(()),
        ([], Some(count)) => {
            let disks: Vec<String> = facts
                .vm
                .disks
                .iter()
                .map(|d| say::disk(d.key, &d.label))
                .collect();
            Err(say::disks_missed(&count, name, &disks))
        }
        (unread, count) => Err(say::unreadable(unread, name, count.as_deref())),
    }
}

fn critical(code: Code, message: impl Into<String>) -> Concern {
    Concern::new(code, Severity::Critical, message)
}

/// A disk or device problem as a concern: Critical where the copy would not be the VM's data.
fn of_layout(p: &LayoutProblem) -> Concern {
    let (code, severity) = match p {
        LayoutProblem::NoDisks => (Code::NoDisk, Severity::Critical),
        LayoutProblem::RawDeviceMapping { .. } => (Code::RawDeviceMapping, Severity::Critical),
        LayoutProblem::SnapshotDelta { .. } | LayoutProblem::Snapshots { .. } => {
            (Code::SnapshotPresent, Severity::Critical)
        }
        LayoutProblem::NotVmdk { .. } | LayoutProblem::UnsupportedBacking { .. } => {
            (Code::UnsupportedDisk, Severity::Critical)
        }
        LayoutProblem::Independent { .. } => (Code::IndependentDisk, Severity::Warning),
        LayoutProblem::Shared { .. } => (Code::SharedDisk, Severity::Critical),
        LayoutProblem::Encrypted { .. } => (Code::EncryptedDisk, Severity::Critical),
        LayoutProblem::Passthrough { .. } => (Code::Passthrough, Severity::Warning),
    };
    Concern::new(code, severity, p.to_string())
}

/// A running source: ferry powers it off when allowed (Info), else it cannot be copied
/// consistently (Critical); without running Tools that power-off is a hard one (Warning).
fn power(vmm: &VirtualMachineMigration, facts: &SourceFacts, name: &str) -> Vec<Concern> {
    let on = matches!(
        facts.vm.power_state,
        Some(PowerState::PoweredOn | PowerState::Suspended)
    );
    if !on {
        return vec![];
    }
    let policy = &vmm.spec.source.power;
    if !policy.power_off {
        return vec![critical(Code::PoweredOn, say::kept_on(name))];
    }
    let mut out = vec![Concern::new(
        Code::PoweredOn,
        Severity::Info,
        say::will_power_off(
            name,
            policy.shutdown_grace_period_seconds,
            vmm.spec.mode == MigrationMode::Warm,
        ),
    )];
    if facts.vm.vmware_tools != Some(ToolsState::Running) {
        out.push(Concern::new(
            Code::ToolsNotRunning,
            Severity::Warning,
            say::hard_power_off(name),
        ));
    }
    out
}

/// UEFI Secure Boot: KubeVirt runs it (SMM, OVMF with Microsoft's keys), worth knowing.
fn firmware(facts: &SourceFacts) -> Option<Concern> {
    (facts.vm.secure_boot == Some(true))
        .then(|| Concern::new(Code::SecureBoot, Severity::Info, say::secure_boot()))
}

/// Changed block tracking off: nothing for a cold copy, which reads every block anyway, but an
/// incremental one needs it on before the first snapshot — worth knowing days before (Info);
/// a warm migration cannot run without it (Critical: ferry does not switch it on, which takes
/// a reconfiguration of the running VM and a snapshot taken and removed, the operator's call).
/// Unknown (the endpoint did not say) is no concern.
fn change_tracking(
    vmm: &VirtualMachineMigration,
    facts: &SourceFacts,
    name: &str,
) -> Option<Concern> {
    (facts.vm.change_tracking == Some(false)).then(|| match vmm.spec.mode {
        MigrationMode::Cold => Concern::new(
            Code::ChangeTrackingOff,
            Severity::Info,
            say::change_tracking_off(name),
        ),
        MigrationMode::Warm => critical(Code::ChangeTrackingOff, say::warm_without_tracking(name)),
    })
}

/// A bus or NIC model that needs virtio drivers the spec does not say the guest has: a Windows
/// guest will not boot from a virtio disk (Critical, may be accepted); another guest may lack
/// them in its initramfs (Warning).
fn bus(vmm: &VirtualMachineMigration, facts: &SourceFacts) -> Option<Concern> {
    let d = &vmm.spec.target.template.devices;
    if d.virtio_drivers {
        return None;
    }
    let disk_needs = matches!(d.disk_bus, Some(DiskBus::Virtio | DiskBus::Scsi));
    let nic_needs = matches!(d.nic_model, Some(NicModel::Virtio));
    if !disk_needs && !nic_needs {
        return None;
    }
    let windows = facts.vm.guest_os_family == Some(GuestOsFamily::Windows);
    let severity = if windows && disk_needs {
        Severity::Critical
    } else {
        Severity::Warning
    };
    Some(Concern::new(
        Code::BusWithoutDrivers,
        severity,
        say::without_drivers(disk_needs, windows),
    ))
}

/// NICs whose network no mapping takes: they are left out of the migrated VM.
fn networks(vmm: &VirtualMachineMigration, facts: &SourceFacts) -> Vec<Concern> {
    let maps = &vmm.spec.target.template.networks;
    facts
        .vm
        .nics
        .iter()
        .enumerate()
        .filter(|(i, nic)| {
            if maps.is_empty() {
                // Without mappings the first adapter goes to the pod network.
                *i > 0
            } else {
                !maps.iter().any(|m| m.source == nic.network)
            }
        })
        .map(|(_, nic)| {
            Concern::new(
                Code::NetworkUnmapped,
                Severity::Warning,
                say::left_out(&nic.mac, &nic.network),
            )
        })
        .collect()
}

/// The Multus networks of the mappings, `namespace/name` (a bare name is in the migration's
/// namespace), each with whether it lies outside that namespace. Pure.
pub fn multus_networks(vmm: &VirtualMachineMigration) -> Vec<(String, bool)> {
    let own = vmm.metadata.namespace.as_deref().unwrap_or_default();
    let mut out: Vec<(String, bool)> = vmm
        .spec
        .target
        .template
        .networks
        .iter()
        .filter_map(|m| m.multus.as_ref())
        .map(|m| match m.network_name.split_once('/') {
            Some((ns, name)) => (format!("{ns}/{name}"), ns != own),
            None => (format!("{own}/{}", m.network_name), false),
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Multus networks of another namespace the platform does not allow, and those that do not
/// exist.
fn attachments(vmm: &VirtualMachineMigration, facts: &SourceFacts) -> Vec<Concern> {
    let refused = multus_networks(vmm)
        .into_iter()
        .filter(|(_, outside)| *outside && !facts.cross_namespace_networks)
        .map(|(n, _)| critical(Code::NetworkNotAllowed, say::network_not_allowed(&n)));
    let missing = facts
        .missing_networks
        .iter()
        .map(|n| critical(Code::NetworkAttachmentMissing, say::network_missing(n)));
    refused.chain(missing).collect()
}

/// The StorageClasses the volumes of `disks` would use, by name (a disk placed on the
/// cluster's default class names none), each once. Pure.
pub fn named_classes(
    vmm: &VirtualMachineMigration,
    disks: &[ferry_crds::DiscoveredDisk],
) -> Vec<String> {
    let template = &vmm.spec.target.template;
    let mut out: Vec<String> = disks
        .iter()
        .filter_map(|d| template.placement(ferry_crds::datastore_of(&d.datastore_path)))
        .filter_map(|p| p.storage_class_name)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Datastores of the VM's disks that the storage map leaves out, naming no default class.
fn datastores(vmm: &VirtualMachineMigration, facts: &SourceFacts) -> Vec<Concern> {
    let template = &vmm.spec.target.template;
    let mut unmapped: Vec<&str> = facts
        .vm
        .disks
        .iter()
        .filter_map(|d| ferry_crds::datastore_of(&d.datastore_path))
        .filter(|ds| template.placement(Some(ds)).is_none())
        .collect();
    unmapped.sort_unstable();
    unmapped.dedup();
    unmapped
        .into_iter()
        .map(|ds| critical(Code::DatastoreUnmapped, say::datastore_unmapped(ds)))
        .collect()
}

/// What preflight tells people.
mod say {
    pub(super) fn disks_counted(reported: u32, read: usize) -> String {
        format!("vSphere reports {reported} virtual disk(s), ferry read {read}")
    }

    /// A disk as vSphere names it: its key, and its label when it has one.
    pub(super) fn disk(key: i32, label: &str) -> String {
        if label.is_empty() {
            key.to_string()
        } else {
            format!("{key} {label:?}")
        }
    }

    pub(super) fn disks_missed(count: &str, name: &str, disks: &[String]) -> String {
        format!(
            "{count} of {name} ({}); ferry migrates a VM only when it reads every disk",
            if disks.is_empty() {
                "none".to_owned()
            } else {
                disks.join(", ")
            }
        )
    }

    pub(super) fn unreadable(unread: &[String], name: &str, count: Option<&str>) -> String {
        format!(
            "ferry could not read {} in vSphere's answer about {name}{}; ferry migrates a VM only when it reads all of it",
            unread.join("; "),
            count.map(|c| format!(" ({c})")).unwrap_or_default()
        )
    }

    pub(super) fn no_disk(name: &str) -> String {
        format!("{name} has no virtual disk to migrate")
    }

    pub(super) fn target_taken(vm: &str) -> String {
        format!(
            "a VirtualMachine named {vm} already exists in this namespace and is not this migration's; set spec.target.name"
        )
    }

    pub(super) fn kept_on(name: &str) -> String {
        format!(
            "{name} is not powered off and spec.source.powerOff is false; power it off in vSphere or set powerOff"
        )
    }

    pub(super) fn will_power_off(name: &str, grace: i64, warm: bool) -> String {
        let when = if warm {
            " at the cutover (it runs on while its first copy is taken)"
        } else {
            ""
        };
        format!(
            "{name} runs: the migration shuts its guest down (VMware Tools){when}, powering it off hard after {grace}s"
        )
    }

    pub(super) fn hard_power_off(name: &str) -> String {
        format!(
            "VMware Tools do not run in {name}: its power-off will be a hard one (the guest's unwritten data is lost); start Tools, or shut the guest down yourself before the window"
        )
    }

    pub(super) fn secure_boot() -> String {
        "UEFI Secure Boot is on: the VM gets KubeVirt's Secure Boot (SMM, Microsoft's keys); a guest signed with other keys will not boot".to_owned()
    }

    pub(super) fn instancetype_missing(what: &str) -> String {
        format!(
            "{what}, named by target.template.placement, does not exist (or KubeVirt's instancetype API is not served): KubeVirt would not start the VM; create it or name another"
        )
    }

    pub(super) fn change_tracking_off(name: &str) -> String {
        format!(
            "changed block tracking is off on {name}: this cold copy reads every block as it would anyway; an incremental (warm) copy needs it on (config.changeTrackingEnabled, then a new snapshot) before the window"
        )
    }

    pub(super) fn warm_without_tracking(name: &str) -> String {
        format!(
            "changed block tracking is off on {name}: a warm migration copies only what changed since its first copy and cannot run without it; switch it on (config.changeTrackingEnabled: true, then take and remove a snapshot so that it takes effect on the running VM) or migrate cold (spec.mode: Cold)"
        )
    }

    pub(super) fn without_drivers(disk: bool, windows: bool) -> String {
        let what = if disk {
            "target.template.devices asks for a virtio disk bus"
        } else {
            "target.template.devices asks for virtio NICs"
        };
        let then = if windows {
            "a Windows guest without virtio-win does not boot from it (INACCESSIBLE_BOOT_DEVICE)"
        } else {
            "a guest whose initramfs lacks virtio drivers does not find its disk or network"
        };
        format!(
            "{what} but devices.virtioDrivers is false: {then}; install the drivers and set virtioDrivers, choose sata/e1000e, or accept BusWithoutDrivers"
        )
    }

    pub(super) fn network_not_allowed(network: &str) -> String {
        format!(
            "target.template.networks attaches to {network}, a NetworkAttachmentDefinition of another namespace, which this platform does not allow (the controller's --cross-namespace-networks): use one of the migration's namespace"
        )
    }

    pub(super) fn network_missing(network: &str) -> String {
        format!(
            "the NetworkAttachmentDefinition {network} of target.template.networks does not exist: create it, or map the network elsewhere"
        )
    }

    fn amount(resource: &str, n: u64) -> String {
        if resource.ends_with("requests.storage") && n < 1 << 30 {
            format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
        } else if resource.ends_with("requests.storage") {
            format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30))
        } else {
            format!("{n} claim(s)")
        }
    }

    pub(super) fn capacity_short(class: &str, most: u64, need: u64) -> String {
        let r = "requests.storage";
        format!(
            "the StorageClass {class:?} reports room for {} at most in any topology segment (CSIStorageCapacity) and a disk's claim needs {}: free or add capacity, or map the disk to another class",
            amount(r, most),
            amount(r, need)
        )
    }

    pub(super) fn wave_quota_short(
        ns: &str,
        quota: &str,
        resource: &str,
        left: u64,
        need: u64,
    ) -> String {
        format!(
            "the wave's VMs not started yet need {} of {resource} and ResourceQuota {quota} in {ns} has {} left: raise it before the window, or the last VMs' claims are refused",
            amount(resource, need),
            amount(resource, left)
        )
    }

    pub(super) fn quota_short(
        ns: &str,
        quota: &str,
        resource: &str,
        left: u64,
        need: u64,
    ) -> String {
        let amount = |n: u64| amount(resource, n);
        format!(
            "ResourceQuota {quota} in {ns} has {} of {resource} left and this VM's disks need {}: raise the quota or free some before the window (their claims would be refused)",
            amount(left),
            amount(need)
        )
    }

    pub(super) fn class_missing(class: &str) -> String {
        format!(
            "the StorageClass {class:?} (target.template.storageClassName or storageMap) does not exist: its claims would wait for a provisioner forever; create it or name another"
        )
    }

    pub(super) fn datastore_unmapped(datastore: &str) -> String {
        format!(
            "a disk is on datastore {datastore:?}, which target.template.storageMap does not list, and no storageClassName says where the rest goes: map {datastore:?} or set storageClassName"
        )
    }

    pub(super) fn left_out(mac: &str, network: &str) -> String {
        format!(
            "the NIC {mac} on network {network:?} is left out of the migrated VM: map {network:?} in target.template.networks"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{DiscoveredDisk, DiscoveredNic, DiscoveredSource, PreflightSpec, fixtures};

    fn facts() -> SourceFacts {
        SourceFacts::clean(DiscoveredSource {
            name: Some("vm0".into()),
            power_state: Some(PowerState::PoweredOff),
            disks: vec![DiscoveredDisk {
                key: 2000,
                datastore_path: "[ds] vm0/vm0.vmdk".into(),
                capacity_bytes: 1 << 30,
                ..Default::default()
            }],
            nics: vec![DiscoveredNic {
                mac: "00:50:56:00:00:01".into(),
                network: "VM Network".into(),
                device_type: None,
                pci_slot_number: None,
            }],
            ..Default::default()
        })
    }

    fn codes(c: &[Concern]) -> Vec<(Code, Severity)> {
        c.iter().map(|c| (c.code, c.severity)).collect()
    }

    #[test]
    fn a_clean_powered_off_vm_has_no_concern() {
        assert_eq!(concerns(&fixtures::migration("m"), &facts()), vec![]);
    }

    #[test]
    fn a_running_vm_is_powered_off_by_the_migration_or_blocks_it() {
        let mut f = facts();
        f.vm.power_state = Some(PowerState::PoweredOn);
        f.vm.vmware_tools = Some(ToolsState::Running);
        let vmm = fixtures::migration("m");
        assert_eq!(
            codes(&concerns(&vmm, &f)),
            vec![(Code::PoweredOn, Severity::Info)]
        );
        f.vm.vmware_tools = Some(ToolsState::NotRunning);
        assert_eq!(
            codes(&concerns(&vmm, &f)),
            vec![
                (Code::ToolsNotRunning, Severity::Warning),
                (Code::PoweredOn, Severity::Info)
            ]
        );
        let mut kept = vmm.clone();
        kept.spec.source.power.power_off = false;
        assert_eq!(
            codes(&concerns(&kept, &f)),
            vec![(Code::PoweredOn, Severity::Critical)]
        );
    }

    #[test]
    fn change_tracking_off_is_worth_knowing_and_unknown_is_nothing() {
        let vmm = fixtures::migration("m");
        let mut f = facts();
        f.vm.change_tracking = Some(false);
        let c = concerns(&vmm, &f);
        assert_eq!(codes(&c), vec![(Code::ChangeTrackingOff, Severity::Info)]);
        assert!(c[0].message.contains("vm0"), "{c:?}");
        let mut warm = vmm.clone();
        warm.spec.mode = MigrationMode::Warm;
        let c = concerns(&warm, &f);
        assert_eq!(
            codes(&c),
            vec![(Code::ChangeTrackingOff, Severity::Critical)]
        );
        assert!(holds(Code::ChangeTrackingOff));
        assert!(c[0].message.contains("spec.mode: Cold"), "{c:?}");
        for known in [Some(true), None] {
            f.vm.change_tracking = known;
            assert_eq!(concerns(&vmm, &f), vec![], "{known:?}");
        }
    }

    #[test]
    fn disk_problems_weigh_by_whether_the_copy_would_be_the_vms_data() {
        let mut f = facts();
        let disk = "Hard disk 1".to_owned();
        f.layout_problems = vec![
            LayoutProblem::SnapshotDelta { disk: disk.clone() },
            LayoutProblem::Independent {
                disk: disk.clone(),
                nonpersistent: false,
            },
            LayoutProblem::Shared { disk: disk.clone() },
            LayoutProblem::Encrypted { disk: disk.clone() },
            LayoutProblem::RawDeviceMapping { disk },
            LayoutProblem::Passthrough {
                device: "USB 1".into(),
            },
        ];
        let got = codes(&concerns(&fixtures::migration("m"), &f));
        assert_eq!(
            got,
            vec![
                (Code::SnapshotPresent, Severity::Critical),
                (Code::SharedDisk, Severity::Critical),
                (Code::EncryptedDisk, Severity::Critical),
                (Code::RawDeviceMapping, Severity::Critical),
                (Code::IndependentDisk, Severity::Warning),
                (Code::Passthrough, Severity::Warning),
            ]
        );
    }

    #[test]
    fn a_disk_ferry_did_not_read_is_critical() {
        let mut f = facts();
        f.disks_reported = Some(2);
        let c = concerns(&fixtures::migration("m"), &f);
        assert_eq!(
            codes(&c),
            vec![(Code::IncompleteInventory, Severity::Critical)]
        );
        assert!(
            c[0].message
                .contains("vSphere reports 2 virtual disk(s), ferry read 1")
        );
        f.vm.disks.clear();
        f.disks_reported = Some(0);
        assert_eq!(
            codes(&concerns(&fixtures::migration("m"), &f)),
            vec![(Code::NoDisk, Severity::Critical)]
        );
    }

    #[test]
    fn windows_on_a_virtio_disk_without_drivers_is_critical_and_may_be_accepted() {
        let mut f = facts();
        f.vm.guest_os_family = Some(GuestOsFamily::Windows);
        let mut vmm = fixtures::migration("m");
        vmm.spec.target.template.devices.disk_bus = Some(DiskBus::Virtio);
        let c = concerns(&vmm, &f);
        assert_eq!(
            codes(&c),
            vec![(Code::BusWithoutDrivers, Severity::Critical)]
        );
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(
            record(&vmm, c.clone(), BTreeMap::new(), &now, None)
                .blocking()
                .count(),
            1
        );
        vmm.spec.preflight = Some(PreflightSpec {
            accept: vec![Code::BusWithoutDrivers, Code::SnapshotPresent],
        });
        let r = record(&vmm, c, BTreeMap::new(), &now, None);
        assert_eq!(r.accepted, vec![Code::BusWithoutDrivers]);
        assert_eq!(r.blocking().count(), 0);
        f.vm.guest_os_family = Some(GuestOsFamily::Linux);
        assert_eq!(
            codes(&concerns(&vmm, &f)),
            vec![(Code::BusWithoutDrivers, Severity::Warning)]
        );
        vmm.spec.target.template.devices.virtio_drivers = true;
        assert_eq!(concerns(&vmm, &f), vec![]);
    }

    #[test]
    fn a_snapshot_is_never_accepted() {
        let mut f = facts();
        f.layout_problems = vec![LayoutProblem::SnapshotDelta {
            disk: "Hard disk 1".into(),
        }];
        let mut vmm = fixtures::migration("m");
        vmm.spec.preflight = Some(PreflightSpec {
            accept: vec![Code::SnapshotPresent],
        });
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let r = record(&vmm, concerns(&vmm, &f), BTreeMap::new(), &now, None);
        assert_eq!(r.accepted, vec![]);
        assert_eq!(r.blocking().count(), 1);
    }

    #[test]
    fn unmapped_networks_leave_their_nics_out() {
        let mut f = facts();
        f.vm.nics.push(DiscoveredNic {
            mac: "00:50:56:00:00:02".into(),
            network: "Backup".into(),
            device_type: None,
            pci_slot_number: None,
        });
        let vmm = fixtures::migration("m");
        let c = concerns(&vmm, &f);
        assert_eq!(codes(&c), vec![(Code::NetworkUnmapped, Severity::Warning)]);
        assert!(c[0].message.contains("Backup"));
        let mut mapped = vmm.clone();
        mapped.spec.target.template.networks = vec![ferry_crds::NetworkMapping {
            source: "VM Network".into(),
            pod: Some(Default::default()),
            multus: None,
        }];
        let c = concerns(&mapped, &f);
        assert_eq!(codes(&c), vec![(Code::NetworkUnmapped, Severity::Warning)]);
        assert!(c[0].message.contains("Backup"));
    }

    #[test]
    fn a_held_migration_is_checked_again_on_its_interval_or_a_spec_change() {
        let every = Duration::from_secs(600);
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000_000).unwrap());
        let later =
            |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(1_000_000 + s).unwrap());
        let mut vmm = fixtures::migration("m");
        assert_eq!(recheck_in(&vmm, &t0, every, None), None, "never checked");
        let st = vmm.status.get_or_insert_with(Default::default);
        st.preflight = Some(PreflightStatus {
            checked_at: Some(t0.clone()),
            observed_generation: Some(1),
            ..Default::default()
        });
        assert_eq!(
            recheck_in(&vmm, &later(100), every, None),
            Some(Duration::from_secs(500))
        );
        assert_eq!(recheck_in(&vmm, &later(600), every, None), None, "due");
        // Looked again at 600 and found the same (checkedAt stays t0): the next look is due
        // an interval after that look, not at every reconcile from then on.
        assert_eq!(
            recheck_in(&vmm, &later(700), every, Some(&later(600))),
            Some(Duration::from_secs(500))
        );
        assert_eq!(
            recheck_in(&vmm, &later(1200), every, Some(&later(600))),
            None
        );
        // A look older than checkedAt (another replica wrote since) counts from checkedAt.
        assert_eq!(
            recheck_in(&vmm, &later(100), every, Some(&later(-50))),
            Some(Duration::from_secs(500))
        );
        vmm.metadata.generation = Some(2);
        assert_eq!(
            recheck_in(&vmm, &later(100), every, Some(&later(50))),
            None,
            "the spec changed"
        );
    }

    #[test]
    fn a_datastore_the_storage_map_leaves_out_is_critical_without_a_default() {
        let f = facts();
        let mut vmm = fixtures::migration("m");
        vmm.spec.target.template.storage_map = vec![ferry_crds::StorageMapping {
            datastore: "san".into(),
            storage_class_name: Some("fast".into()),
            ..Default::default()
        }];
        let c = concerns(&vmm, &f);
        assert_eq!(
            codes(&c),
            vec![(Code::DatastoreUnmapped, Severity::Critical)]
        );
        assert!(c[0].message.contains("\"ds\""), "{}", c[0].message);
        vmm.spec.target.template.storage_class_name = Some("standard".into());
        assert_eq!(concerns(&vmm, &f), vec![], "the default takes it");
    }

    #[test]
    fn multus_networks_must_exist_and_stay_in_the_namespace_unless_allowed() {
        let mut vmm = fixtures::migration("m");
        let multus = |name: &str| ferry_crds::NetworkMapping {
            source: "VM Network".into(),
            pod: None,
            multus: Some(ferry_crds::MultusNetwork {
                network_name: name.into(),
            }),
        };
        vmm.spec.target.template.networks = vec![multus("default/storage"), multus("team-b/db")];
        assert_eq!(
            multus_networks(&vmm),
            vec![
                ("default/storage".into(), false),
                ("team-b/db".into(), true)
            ]
        );
        let mut f = facts();
        f.missing_networks = vec!["default/storage".into()];
        let c = concerns(&vmm, &f);
        assert_eq!(
            codes(&c),
            vec![
                (Code::NetworkNotAllowed, Severity::Critical),
                (Code::NetworkAttachmentMissing, Severity::Critical)
            ]
        );
        f.cross_namespace_networks = true;
        f.missing_networks = vec![];
        assert_eq!(concerns(&vmm, &f), vec![]);
    }

    #[test]
    fn disks_claims_are_weighed_against_what_each_quota_has_left() {
        use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaStatus};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        const GI: u64 = 1 << 30;
        let mut f = facts();
        let mut vmm = fixtures::migration("m");
        f.vm.disks[0].capacity_bytes = 10 * GI as i64;
        f.vm.disks.push(f.vm.disks[0].clone());
        vmm.spec.target.template.storage_class_name = Some("gold".into());
        // Filesystem (mode not said): each 10 GiB disk takes 10 GiB / 0.945 ≈ 10.58 GiB.
        let need = claims_need(&vmm, &f.vm.disks);
        assert_eq!(need["requests.storage"], 2 * 11_362_347_344);
        assert_eq!(need["persistentvolumeclaims"], 2);
        assert_eq!(
            need["gold.storageclass.storage.k8s.io/persistentvolumeclaims"],
            2
        );
        vmm.spec.target.template.volume_mode = Some(ferry_crds::VolumeMode::Block);
        assert_eq!(claims_need(&vmm, &f.vm.disks)["requests.storage"], 20 * GI);

        let quota = |hard: &[(&str, &str)], used: &[(&str, &str)]| {
            let q = |v: &[(&str, &str)]| {
                Some(
                    v.iter()
                        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                        .collect(),
                )
            };
            QuotaLeft::of(&ResourceQuota {
                metadata: kube::api::ObjectMeta {
                    name: Some("team".into()),
                    ..Default::default()
                },
                spec: None,
                status: Some(ResourceQuotaStatus {
                    hard: q(hard),
                    used: q(used),
                }),
            })
        };
        // 50Gi hard, 25Gi used: 25 GiB left holds 20; 3 claims left holds 2.
        f.quotas = vec![quota(
            &[
                ("requests.storage", "50Gi"),
                ("persistentvolumeclaims", "5"),
                ("requests.cpu", "4"),
            ],
            &[
                ("requests.storage", "25Gi"),
                ("persistentvolumeclaims", "2"),
            ],
        )];
        assert_eq!(concerns(&vmm, &f), vec![]);
        // The class's own limit binds first: 1 claim of gold left, 2 needed.
        f.quotas = vec![quota(
            &[(
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
                "3",
            )],
            &[(
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
                "2",
            )],
        )];
        let c = concerns(&vmm, &f);
        assert_eq!(codes(&c), vec![(Code::QuotaExceeded, Severity::Critical)]);
        assert!(
            c[0].message.contains("1 claim(s) of gold.storageclass"),
            "{}",
            c[0].message
        );
        assert!(c[0].message.contains("need 2 claim(s)"), "{}", c[0].message);
        // Storage short: 15 GiB left for 20.
        f.quotas = vec![quota(
            &[("requests.storage", "40Gi")],
            &[("requests.storage", "25Gi")],
        )];
        let c = concerns(&vmm, &f);
        assert!(
            c[0].message.contains("15.0 GiB of requests.storage left"),
            "{}",
            c[0].message
        );
        assert!(holds(Code::QuotaExceeded) && !Code::QuotaExceeded.acceptable());

        // A wave: each VM fits on its own, together they do not.
        let left = QuotaLeft {
            name: "team".into(),
            left: [("requests.storage".to_owned(), 30 * GI)].into(),
        };
        let claims = [("requests.storage".to_owned(), 2 * 20 * GI as i64)].into();
        let short = wave_short(&claims, std::slice::from_ref(&left), "ns");
        assert_eq!(short.len(), 1);
        assert!(
            short[0].contains("need 40.0 GiB") && short[0].contains("30.0 GiB left"),
            "{short:?}"
        );
        let fits = [("requests.storage".to_owned(), 20 * GI as i64)].into();
        assert!(wave_short(&fits, &[left], "ns").is_empty());
    }

    #[test]
    fn a_class_whose_driver_reports_no_room_for_the_largest_claim_holds() {
        const GI: u64 = 1 << 30;
        let mut f = facts();
        let mut vmm = fixtures::migration("m");
        vmm.spec.target.template.storage_class_name = Some("gold".into());
        vmm.spec.target.template.volume_mode = Some(ferry_crds::VolumeMode::Block);
        f.vm.disks[0].capacity_bytes = 20 * GI as i64;
        let room = |class: &str, gib: u64| ClassRoom {
            class: class.into(),
            bytes: gib * GI,
        };
        // Not reported, or reported for another class: not judged.
        assert_eq!(concerns(&vmm, &f), vec![]);
        f.capacities = vec![room("silver", 1)];
        assert_eq!(concerns(&vmm, &f), vec![]);
        // One segment with room is enough.
        f.capacities = vec![room("gold", 5), room("gold", 25)];
        assert_eq!(concerns(&vmm, &f), vec![]);
        f.capacities = vec![room("gold", 5), room("gold", 15)];
        let c = concerns(&vmm, &f);
        assert_eq!(
            codes(&c),
            vec![(Code::StorageCapacityShort, Severity::Critical)]
        );
        assert!(
            c[0].message.contains("15.0 GiB at most"),
            "{}",
            c[0].message
        );
        assert!(c[0].message.contains("needs 20.0 GiB"), "{}", c[0].message);
    }

    #[test]
    fn the_classes_a_migration_would_use_are_named_once_and_a_missing_one_holds() {
        let mut f = facts();
        let mut vmm = fixtures::migration("m");
        assert_eq!(
            named_classes(&vmm, &f.vm.disks),
            Vec::<String>::new(),
            "the default"
        );
        vmm.spec.target.template.storage_class_name = Some("gold".into());
        f.vm.disks.push(f.vm.disks[0].clone());
        assert_eq!(named_classes(&vmm, &f.vm.disks), vec!["gold".to_owned()]);
        f.missing_classes = vec!["gold".into()];
        assert_eq!(
            codes(&concerns(&vmm, &f)),
            vec![(Code::StorageClassMissing, Severity::Critical)]
        );
    }
}
