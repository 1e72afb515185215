//! What several checkpoints read of the world alike: the target VirtualMachine (ours or not),
//! its instance, the other children's names taken by someone else, and the keys of the staged
//! objects.

use ferry_crds::{PowerState, Reason, VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;

use super::io::Io;
use crate::Result;
use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{self, Trouble, VirtualMachine, VirtualMachineInstance, VmiPhase};
use crate::children::{Conflict, Ownership, secret};
use crate::ports::SourceLogin;
use crate::problem::Problem;

/// The KubeVirt VirtualMachine with the target name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmState {
    /// None.
    Absent,
    /// One that this migration does not own.
    Foreign,
    /// Ours, with its current run strategy and whether Validating released it.
    Ours {
        /// `spec.runStrategy`.
        run_strategy: Option<String>,
        /// The migration recorded releasing it to its user ([`Io::released`]): a VM whose owner
        /// reference someone else removed is not released.
        released: bool,
    },
}

/// The VirtualMachineInstance of the target VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmiState {
    /// None (not started yet, or between restarts).
    Absent,
    /// Present in `phase`, with whether the guest agent is connected.
    Present {
        /// VMI phase.
        phase: VmiPhase,
        /// Condition `Ready` is `True` (KubeVirt: the guest runs and passed its readiness probe).
        ready: bool,
        /// Condition `AgentConnected` is `True`.
        agent_connected: bool,
        /// KubeVirt's reason for the phase, if any.
        reason: Option<String>,
    },
}

impl VmiState {
    /// Whether the instance is `Running`.
    pub fn is_running(&self) -> bool {
        matches!(
            self,
            VmiState::Present {
                phase: VmiPhase::Running,
                ..
            }
        )
    }
}

/// The target VirtualMachine, classified.
///
/// # Errors
/// Kubernetes API errors.
pub async fn vm_state(io: Io<'_>) -> Result<VmState> {
    let vm = io.read::<VirtualMachine>(&names::vm_name(io.vmm)).await?;
    Ok(classify_vm(vm.as_ref(), io))
}

/// Classifies a VirtualMachine found under the target name: ours only by ferry's own record of
/// its create (see [`crate::children::proof`]), never by its labels or owner reference.
pub fn classify_vm(vm: Option<&VirtualMachine>, io: Io<'_>) -> VmState {
    match vm {
        None => VmState::Absent,
        Some(vm) => match io.own(vm) {
            Ownership::Ours { .. } => VmState::Ours {
                run_strategy: vm.spec.run_strategy.clone(),
                released: io.released(vm),
            },
            Ownership::Foreign(_) => VmState::Foreign,
        },
    }
}

/// The conflict `name` of kind `K` is, if an object not `vmm`'s holds it: read fresh, since
/// someone else's object need not carry the labels the watch caches select on.
///
/// # Errors
/// Kubernetes API errors.
pub async fn conflict<K: crate::caches::Observed>(
    io: Io<'_>,
    name: &str,
) -> Result<Option<Conflict>> {
    Ok(match io.read_fresh::<K>(name).await? {
        Some(o) => match io.own(&o) {
            Ownership::Ours { .. } => None,
            Ownership::Foreign(c) => Some(c),
        },
        None => None,
    })
}

/// Every name among the children `vmm` will create for `disks` disks — conversion Job, CDI
/// Secret and (`with_ca`) CA ConfigMap, DataVolumes, verification Job — that an object not
/// `vmm`'s holds (the target VM is [`vm_state`]'s).
///
/// # Errors
/// Kubernetes API errors.
pub async fn child_conflicts(io: Io<'_>, disks: usize, with_ca: bool) -> Result<Vec<Conflict>> {
    let vmm = io.vmm;
    let mut found = vec![
        conflict::<Job>(io, &names::job_name(vmm)).await?,
        conflict::<Secret>(io, &secret::s3_secret_name(vmm)).await?,
        conflict::<Job>(io, &names::verify_job_name(vmm)).await?,
    ];
    if with_ca {
        found.push(conflict::<ConfigMap>(io, &secret::s3_ca_config_map_name(vmm)).await?);
    }
    for i in 0..disks {
        found.push(conflict::<DataVolume>(io, &names::datavolume_name(vmm, i)).await?);
    }
    Ok(found.into_iter().flatten().collect())
}

/// What to do about a child [`Conflict`]: the migration's own name is in every child's name,
/// so the way out is another name (or deleting the leftover).
pub const RENAME_HINT: &str = "create the migration under another name";

/// The target VMI, classified (only one that is not being deleted counts).
///
/// # Errors
/// Kubernetes API errors.
pub async fn vmi_state(io: Io<'_>) -> Result<VmiState> {
    let vmi = io
        .read::<VirtualMachineInstance>(&names::vm_name(io.vmm))
        .await?;
    Ok(classify_vmi(vmi.as_ref(), recorded_vm_uid(io.vmm)))
}

/// The uid of the target VirtualMachine as ferry's create answered it (`status.children`).
pub fn recorded_vm_uid(vmm: &VirtualMachineMigration) -> Option<&str> {
    vmm.status
        .as_ref()
        .and_then(|s| {
            let name = names::vm_name(vmm);
            ferry_crds::child::find(&s.children, "VirtualMachine", &name)
        })
        .map(|r| r.uid.as_str())
}

/// Classifies the VMI found under the target name: only the instance of our VirtualMachine
/// (`vm_uid`: KubeVirt makes the VM its controller owner) that is not being deleted counts —
/// not one that merely carries our labels. Pure.
pub fn classify_vmi(vmi: Option<&VirtualMachineInstance>, vm_uid: Option<&str>) -> VmiState {
    let of_our_vm = |v: &VirtualMachineInstance| {
        vm_uid.is_some()
            && v.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == vm_uid)
    };
    match vmi {
        Some(v) if v.metadata.deletion_timestamp.is_none() && of_our_vm(v) => {
            let s = v.status.clone().unwrap_or_default();
            VmiState::Present {
                phase: s.phase.unwrap_or_default(),
                ready: s.condition_true("Ready"),
                agent_connected: s.condition_true("AgentConnected"),
                reason: s.reason.clone(),
            }
        }
        Some(_) | None => VmiState::Absent,
    }
}

/// What KubeVirt says of the target VM and its instance, from one read of each.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeVirtState {
    /// The VirtualMachine.
    pub vm: VmState,
    /// Its instance.
    pub vmi: VmiState,
    /// A KubeVirt error state of ours (printableStatus or the VMI condition behind it).
    pub trouble: Option<Trouble>,
}

/// Reads the target VM and its instance and classifies them (through the caches; fresh when
/// they show an error state).
///
/// # Errors
/// Kubernetes API errors.
pub async fn kubevirt_state(io: Io<'_>) -> Result<KubeVirtState> {
    let name = names::vm_name(io.vmm);
    let vm = io.read::<VirtualMachine>(&name).await?;
    let vmi = io.read::<VirtualMachineInstance>(&name).await?;
    let state = classify_kubevirt(io, vm, vmi);
    if state.trouble.is_none() {
        return Ok(state);
    }
    // An error state can end the migration, and the VM's and the VMI's caches may each lag the
    // other: look at both fresh, so the failure carries KubeVirt's current words.
    let vm = io.api::<VirtualMachine>().get_opt(&name).await?;
    let vmi = io.api::<VirtualMachineInstance>().get_opt(&name).await?;
    Ok(classify_kubevirt(io, vm, vmi))
}

fn classify_kubevirt(
    io: Io<'_>,
    vm: Option<VirtualMachine>,
    vmi: Option<VirtualMachineInstance>,
) -> KubeVirtState {
    let vm_state = classify_vm(vm.as_ref(), io);
    let our_vm_uid = match &vm_state {
        VmState::Ours { .. } => vm.as_ref().and_then(|v| v.metadata.uid.as_deref()),
        VmState::Absent | VmState::Foreign => None,
    };
    let vmi_state = classify_vmi(vmi.as_ref(), our_vm_uid);
    let live_vmi = vmi
        .as_ref()
        .filter(|_| !matches!(vmi_state, VmiState::Absent));
    let trouble = match vm_state {
        VmState::Ours { .. } => kubevirt::trouble(
            vm.as_ref().and_then(|v| v.status.as_ref()),
            live_vmi.and_then(|v| v.status.as_ref()),
        ),
        VmState::Absent | VmState::Foreign => None,
    };
    KubeVirtState {
        vm: vm_state,
        vmi: vmi_state,
        trouble,
    }
}

/// The migration uid a VMI carries from its VM's template.
pub fn vmm_uid_label(vmi: &VirtualMachineInstance) -> Option<&str> {
    vmi.labels()
        .get(names::MIGRATION_UID_LABEL)
        .map(String::as_str)
}

/// Where the migration stages: `spec.staging` as recorded when it left Preparing
/// ([`ferry_crds::StagingRecord`]), never where the spec points now; the spec until then.
pub fn staging_location(vmm: &VirtualMachineMigration) -> &ferry_crds::StagingSpec {
    vmm.status
        .as_ref()
        .and_then(|s| s.staging.as_ref())
        .map_or(&vmm.spec.staging, |r| &r.location)
}

/// Keys of the staged objects, one per discovered disk: as recorded when the migration left
/// Preparing ([`ferry_crds::StagingRecord`]), whatever the spec says now.
pub fn staged_keys(vmm: &VirtualMachineMigration) -> Vec<String> {
    if let Some(r) = vmm.status.as_ref().and_then(|s| s.staging.as_ref()) {
        return r.keys.clone();
    }
    let n = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map_or(0, |s| s.disks.len());
    (0..n).map(|i| names::staging_key(vmm, i)).collect()
}

/// Per disk, the migration's own DataVolume under its name (`None`: absent, or one ferry did
/// not make, which is in the conflicts: never read as the migration's).
///
/// # Errors
/// Kubernetes API errors.
pub async fn own_datavolumes(io: Io<'_>) -> Result<(Vec<Option<DataVolume>>, Vec<Conflict>)> {
    let mut ours = vec![];
    let mut conflicts = vec![];
    for i in 0..staged_keys(io.vmm).len() {
        let found = io
            .read::<DataVolume>(&names::datavolume_name(io.vmm, i))
            .await?;
        ours.push(match found.as_ref().map(|d| io.own(d)) {
            Some(Ownership::Foreign(c)) => {
                conflicts.push(c);
                None
            }
            Some(Ownership::Ours { .. }) => found,
            None => None,
        });
    }
    Ok((ours, conflicts))
}

/// Per disk (the first `disks`), whether its claim is a block device (`volumeMode: Block`);
/// read when a Job mounting the claims is to be made.
///
/// # Errors
/// Kubernetes API errors.
pub async fn block_claims(io: Io<'_>, disks: usize) -> Result<Vec<bool>> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let mut block = Vec::with_capacity(disks);
    for i in 0..disks {
        let pvc = io
            .read::<PersistentVolumeClaim>(&names::datavolume_name(io.vmm, i))
            .await?;
        block.push(
            pvc.and_then(|p| p.spec)
                .and_then(|s| s.volume_mode)
                .is_some_and(|m| m == "Block"),
        );
    }
    Ok(block)
}

/// A Job of the migration's whose pods report through their termination message (the
/// verification and cutover Jobs), as observed.
#[derive(Debug)]
pub struct ReportingJob {
    /// The Job, when ours (`None` too when its name is held by someone else's: `conflict`).
    pub job: Option<Job>,
    /// Its name held by an object that is not this migration's: never read as ours.
    pub conflict: Option<Conflict>,
    /// Where it stands.
    pub state: crate::apis::job::JobState,
    /// Once failed: what its last failed pod said.
    pub failure: Option<String>,
    /// Once complete: what a pod of it that ran `container` to success reported.
    pub report: Option<String>,
}

/// Reads the Job `name` and, once it ended, its pods' messages (`container`'s).
///
/// # Errors
/// Kubernetes API errors.
pub async fn reporting_job(io: Io<'_>, name: &str, container: &str) -> Result<ReportingJob> {
    use crate::apis::job::{self as job_state, JobState};
    use k8s_openapi::api::core::v1::Pod;
    let found = io.read::<Job>(name).await?;
    let (job, conflict) = match found.as_ref().map(|j| io.own(j)) {
        Some(Ownership::Foreign(c)) => (None, Some(c)),
        Some(Ownership::Ours { .. }) | None => (found, None),
    };
    let state = job_state::observe(job.as_ref());
    let pods = || async {
        let uid = job.as_ref().and_then(|j| j.uid()).unwrap_or_default();
        io.api::<Pod>()
            .list(
                &kube::api::ListParams::default()
                    .labels(&format!("{}={uid}", job_state::CONTROLLER_UID_LABEL)),
            )
            .await
            .map(|l| l.items)
    };
    let (failure, report) = match (&state, job.as_ref()) {
        (JobState::Failed { .. }, Some(j)) => (
            job_state::last_failure_message(j, &pods().await?, container),
            None,
        ),
        (JobState::Complete, Some(j)) => (
            None,
            job_state::succeeded_message(j, &pods().await?, container),
        ),
        _ => (None, None),
    };
    Ok(ReportingJob {
        job,
        conflict,
        state,
        failure,
        report,
    })
}

/// The source as it stands right before the migrated VM is made, against what ferry recorded
/// of it at the power-off the copy was made after ([`ferry_crds::SourceState`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FinalLook {
    /// Its power state now.
    pub power: PowerState,
    /// What changed since the record, in words (`source_state::changes`): empty when nothing
    /// did, or nothing was recorded (a migration an older ferry took through its power-off).
    pub changes: Vec<String>,
    /// When the record was read (vCenter's clock), if there is one.
    pub recorded_at: Option<String>,
}

/// [`FinalLook`]: the source's marks now and the power-ons vCenter recorded since the record.
/// `Err` when vSphere or the credentials failed (classified).
///
/// # Errors
/// Kubernetes API errors (reading the credentials).
pub async fn final_look(io: Io<'_>) -> Result<std::result::Result<FinalLook, Problem>> {
    let login = match super::credentials::source_login(io).await? {
        Ok(l) => l,
        Err(p) => return Ok(Err(p)),
    };
    let Some(moref) = io.vmm.source_moref() else {
        return Ok(Err(never_recorded()));
    };
    let marks = match io.ctx.source.marks(&login, moref).await {
        Ok(m) => m,
        Err(p) => return Ok(Err(p)),
    };
    let recorded = io
        .vmm
        .status
        .as_ref()
        .and_then(|s| s.source_state.as_deref());
    let Some(recorded) = recorded else {
        return Ok(Ok(FinalLook {
            power: marks.power,
            changes: vec![],
            recorded_at: None,
        }));
    };
    let ons = match io
        .ctx
        .source
        .powered_on_since(&login, moref, &recorded.read_at)
        .await
    {
        Ok(o) => o,
        Err(p) => return Ok(Err(p)),
    };
    Ok(Ok(FinalLook {
        power: marks.power,
        changes: super::source_state::changes(recorded, &marks.state, &ons),
        recorded_at: Some(recorded.read_at.clone()),
    }))
}

fn never_recorded() -> Problem {
    Problem::permanent(
        Reason::VMNotFound,
        "the source VM was never recorded; raise spec.retry to start over",
    )
}

/// The cutover's look at the source, right before a VM that starts is made or started: its
/// power state now (`None` when nothing is about to start, and vSphere is not asked).
///
/// # Errors
/// Kubernetes API errors (reading the credentials).
pub async fn cutover_look(
    io: Io<'_>,
    about_to_start: bool,
) -> Result<Option<std::result::Result<PowerState, Problem>>> {
    if !about_to_start {
        return Ok(None);
    }
    let login = super::credentials::source_login(io).await?;
    Ok(Some(source_power(io, login).await))
}

/// The source VM's power state now, as vSphere reports it through `login` (the observation's
/// own, so the Secret is read once per reconcile): looked at again before its disks are read and
/// before the cutover. `Err` when vSphere or the credentials failed (classified).
pub async fn source_power(
    io: Io<'_>,
    login: std::result::Result<SourceLogin, Problem>,
) -> std::result::Result<PowerState, Problem> {
    let Some(moref) = io.vmm.source_moref() else {
        return Err(never_recorded());
    };
    io.ctx
        .source
        .power(&login?, moref)
        .await
        .map(|(state, _tools)| state)
}
