//! `VirtualMachineMigration`: one VM moved from vSphere to KubeVirt.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ChildRecord, Condition, ConditionType, ConversionSpec, DiskFormat, PhaseTransition,
    PreflightSpec, PreflightStatus, Reason, SourceSpec, StagingRecord, StagingSpec, TargetSpec,
    condition, names,
    phase::Phase,
    source::{DiscoveredSource, SourcePowerOff, SourcePowerRestore},
};

/// Desired state of a migration: where the VM comes from, what it becomes, where its disks are
/// staged, and the operator's intents (cancel, paused, retry).
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "migration.platform.example",
    version = "v1alpha1",
    kind = "VirtualMachineMigration",
    plural = "virtualmachinemigrations",
    namespaced,
    status = "VirtualMachineMigrationStatus",
    derive = "PartialEq",
    shortname = "vmm",
    shortname = "vmmig",
    category = "migration",
    doc = "VirtualMachineMigration moves one VM from VMware vSphere (vCenter or ESXi) to a KubeVirt \
           VirtualMachine: it converts the VM's disks, stages them in S3, imports them with CDI, \
           creates and starts the VirtualMachine and waits for its guest. Set spec.cancel, \
           spec.paused or raise spec.retry to steer it; status.phase and status.conditions tell \
           where it stands.",
    validation = crate::rules::name_fits_label(),
    validation = crate::rules::staging_fixed_while_running(),
    validation = crate::rules::mode_fixed_while_running(),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase",
        description = "Checkpoint the migration is in"),
    printcolumn(name = "Progress", type_ = "number", json_path = ".status.progress.percent",
        description = "Percent of disk bytes copied"),
    printcolumn(name = "Wave", type_ = "string",
        json_path = ".metadata.labels.migration\\.platform\\.example/wave",
        description = "MigrationWave this migration belongs to"),
    printcolumn(name = "Ready", type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Status of the Ready condition"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineMigrationSpec {
    /// The vSphere endpoint, the VM to migrate and its power policy. Immutable.
    #[x_kube(validation = crate::rules::source_immutable())]
    pub source: SourceSpec,

    /// The KubeVirt VirtualMachine to create. Immutable.
    #[serde(default)]
    #[x_kube(validation = crate::rules::target_immutable())]
    pub target: TargetSpec,

    /// Object storage where converted disk images wait to be imported.
    pub staging: StagingSpec,

    /// How disks are converted.
    #[serde(default)]
    pub conversion: ConversionSpec,

    /// Cold (the default): the source is powered off for the whole copy. Warm: the disks are
    /// copied while it runs, and it is powered off at the cutover for the changes since only
    /// (changed block tracking must be on). Fixed once the migration has started.
    #[serde(default)]
    pub mode: crate::MigrationMode,

    /// A warm migration's cutover: when, or now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<crate::WarmSpec>,

    /// Programs of the author's own run before the cutover and after the guest is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<crate::Hooks>,

    /// Set to true to stop the migration: its partial results (conversion Job, staged images,
    /// unfinished DataVolumes and VM) are deleted and it ends Cancelled. To start again, set it
    /// back to false and raise retry.
    #[serde(default)]
    pub cancel: bool,

    /// Set to true to hold the migration: no new step is started (a running step may finish).
    /// A migration created paused is preflighted (nothing touched): status.preflight shows
    /// its concerns, checked again every 10 minutes and on every spec change.
    #[serde(default)]
    pub paused: bool,

    /// What the operator decided about preflight's concerns (accepted Critical concerns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<PreflightSpec>,

    /// Retry token: raising it retries a Failed migration from the checkpoint that failed (a
    /// Cancelled one from Preparing). It may never decrease.
    #[serde(default)]
    #[schemars(range(min = 0))]
    #[x_kube(validation = crate::rules::retry_only_grows())]
    pub retry: i64,
}

/// Progress of a migration's disk copies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Percent done, 0 to 100.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub percent: f64,
    /// Bytes copied so far, over all disks and steps.
    #[serde(default)]
    pub bytes_done: i64,
    /// Bytes to copy in all.
    #[serde(default)]
    pub bytes_total: i64,
    /// Recent copy rate in bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_second: Option<i64>,
    /// Estimated seconds until the copy is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<i64>,
}

/// State of one disk through conversion, staging and import.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskStatus {
    /// Position of the disk in status.source.disks, from 0.
    #[schemars(range(min = 0))]
    pub index: i32,
    /// Datastore path of the source disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    /// Capacity of the source disk in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<i64>,
    /// Key of the converted image in the staging bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_object: Option<String>,
    /// Size of the converted image in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_bytes: Option<i64>,
    /// SHA-256 of the converted image, lowercase hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::rules::SHA256_HEX))]
    pub checksum: Option<String>,
    /// Format of the converted image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DiskFormat>,
    /// Size of the disk's contents as the guest sees them (the converted image's virtual size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_size_bytes: Option<i64>,
    /// SHA-256 of the disk's raw contents (its first virtualSizeBytes bytes), lowercase hex: what
    /// the verification Job compares the imported volume with. The same as checksum for raw images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::rules::SHA256_HEX))]
    pub raw_checksum: Option<String>,
    /// The disk's change id when its first copy was taken (a warm migration): the cutover
    /// copies the areas changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_id: Option<String>,
    /// Datastore path of the disk as the warm migration's snapshot froze it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_path: Option<String>,
    /// The disk's device key in vSphere (a warm migration asks for its changed areas by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_key: Option<i32>,
    /// Name of the DataVolume importing this disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<String>,
    /// The DataVolume's status.phase as CDI reports it, e.g. ImportInProgress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_phase: Option<String>,
    /// Bytes of this disk copied in the current step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_done: Option<i64>,
    /// Percent of this disk done in the current step, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub percent: Option<f64>,
    /// Recent copy rate of this disk in bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_second: Option<i64>,
}

/// The last failure of a migration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastFailure {
    /// Checkpoint that failed; raising spec.retry resumes there.
    pub phase: Phase,
    /// Why, as a CamelCase identifier.
    pub reason: Reason,
    /// What happened and what to do about it.
    #[schemars(length(max = 32768))]
    pub message: String,
    /// Whether retrying can help without changing anything else.
    #[serde(default)]
    pub retriable: bool,
    /// When it failed.
    pub time: Time,
    /// The failing component's own classification, where it gives one (the converter's
    /// `BadDisk`, `QemuImg`, …; else the Job's reason): the same cause on two migrations is the
    /// same problem, whatever their messages name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub cause: Option<String>,
}

/// Observed state of a migration, written only by the controller through the status subresource.
// The large parts that many copies lack or that caches cut away (the discovered source, the
// power-on record, the warm and staging records) are boxed: the controller's cache and the
// cockpit hold one copy per migration of the fleet, and inline they cost 728 B each even when
// absent. The schema and the JSON are the same.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineMigrationStatus {
    /// The checkpoint the controller is trying to leave: Pending, Queued, Preparing, Converting,
    /// Importing, CreatingVM, Starting, Validating, or the terminal Succeeded, Failed, Cancelled.
    #[serde(default)]
    pub phase: Phase,

    /// metadata.generation of the spec the controller last finished a step for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// SourceDiscovered, Validated, DiskConverted, DiskImported, VMCreated, VMStarted,
    /// GuestReady and Ready, one entry per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// What the controller discovered about the source VM, including its original power state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<DiscoveredSource>>,

    /// The last preflight: the concerns found about the source and the target before anything
    /// was touched. A Critical one not accepted holds the migration in Pending
    /// (reason PreflightFailed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<PreflightStatus>,

    /// How ferry powered the source VM off: a guest shutdown through VMware Tools, a hard
    /// power-off, or both (the guest did not shut down within the grace period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_power_off: Option<SourcePowerOff>,

    /// What defines the copy of the source, recorded at the power-off it is made after (see
    /// SourceState): read again before the migrated VM is made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_state: Option<Box<crate::source::SourceState>>,

    /// Ferry powering the source VM back on (cancel, failure under OnCancelOrFailure, delete):
    /// the target stopped first, then the source; how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_power_restore: Option<Box<SourcePowerRestore>>,

    /// The source's outages in earlier attempts that a retry started over (their power-off
    /// records are replaced by the new attempt's), oldest first, at most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub earlier_outages: Vec<crate::source::SourceOutage>,

    /// Per-disk state, one entry per source disk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["index".into()]))]
    pub disks: Vec<DiskStatus>,

    /// Overall copy progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,

    /// What ConvertingGuest found of the guest and did to its volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Box<crate::GuestStatus>>,

    /// How the health check of `spec.target.healthCheck` went (Validating).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<crate::HealthCheckStatus>,

    /// The hooks of `spec.hooks` run in this attempt, one entry per hook.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<crate::HookStatus>,

    /// A warm migration: its rounds, the snapshot it holds, its cutover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<Box<crate::WarmStatus>>,

    /// What this attempt stages on and the keys it writes there: fixed when it leaves
    /// Preparing, so that cleanup removes what the migration made whatever `spec.staging` says
    /// later, and a retry after a change of `spec.staging` or `spec.conversion` starts over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging: Option<Box<StagingRecord>>,

    /// The objects ferry's own creates made for this migration, with the uid each create
    /// answered: an object under a child's name is ferry's only when it is recorded here (or,
    /// between a create and this record, carries ferry's creation proof). See
    /// `controller/src/children/proof.rs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["kind".into(), "name".into()]))]
    pub children: Vec<ChildRecord>,

    /// How many times the migration was started: 1 for the first run, +1 per retry.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub attempts: i32,

    /// The spec.retry token last acted on; a spec.retry above it asks for a retry.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub retry_observed: i64,

    /// Transient failures retried so far in the current phase (reset when the phase changes);
    /// the controller backs off exponentially on it and fails the migration past its budget.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub retries: i32,

    /// The most recent failure, kept after a retry for reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<LastFailure>,

    /// The latest phases with their times, oldest first, at most 32 entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub history: Vec<PhaseTransition>,

    /// When the controller started work (left Pending or Queued the first time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// When the migration reached Succeeded, Failed or Cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,

    /// One-line summary for people, e.g. "importing disk 1 of 2".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

impl VirtualMachineMigrationStatus {
    /// The condition of a type, if present.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        condition::get_condition(&self.conditions, type_)
    }
}

impl VirtualMachineMigration {
    /// The source VM's managed object reference, as Preparing recorded it.
    pub fn source_moref(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.source.as_ref())
            .and_then(|s| s.moref.as_deref())
    }

    /// The run strategy the migrated VM ends with: spec.target's, or Halted when its
    /// powerState says off (see [`crate::TargetTemplate::run_strategy_after`]), judged on the
    /// source's power state as ferry first read it.
    pub fn final_run_strategy(&self) -> crate::RunStrategy {
        self.spec
            .target
            .template
            .run_strategy_after(self.source_power_state())
    }

    /// The readiness check in effect (see [`crate::TargetTemplate::readiness_after`]).
    pub fn readiness(&self) -> crate::Readiness {
        self.spec
            .target
            .template
            .readiness_after(self.source_power_state())
    }

    fn source_power_state(&self) -> Option<crate::PowerState> {
        self.status.as_ref()?.source.as_ref()?.power_state
    }

    /// `status.phase`, `Pending` when there is no status yet.
    pub fn phase(&self) -> Phase {
        self.status.as_ref().map_or(Phase::Pending, |s| s.phase)
    }

    /// The condition of a type, if the status has it.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        self.status.as_ref().and_then(|s| s.condition(type_))
    }

    /// Name of the MigrationWave this migration belongs to (its wave label).
    pub fn wave(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(names::WAVE_LABEL)
            .map(String::as_str)
    }

    /// Whether its wave still holds it in `Queued` (the hold annotation is present).
    pub fn is_held(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(names::HOLD_ANNOTATION))
    }

    /// Whether its wave asks for it to be preflighted while held (the wave was paused when it
    /// created it).
    pub fn preflight_while_held(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::HOLD_ANNOTATION))
            .is_some_and(|v| v == names::HOLD_PREFLIGHT_VALUE)
    }

    /// Whether preflight holds it in `Pending`: a Critical concern nobody accepted, nothing
    /// touched. A wave counts it in no `maxInFlight` slot.
    pub fn held_by_preflight(&self) -> bool {
        self.phase() == Phase::Pending
            && self
                .status
                .as_ref()
                .and_then(|s| s.preflight.as_ref())
                .is_some_and(|p| p.blocking().next().is_some())
    }

    /// Whether spec.retry is above the token the controller last acted on.
    pub fn retry_requested(&self) -> bool {
        self.spec.retry > self.status.as_ref().map_or(0, |s| s.retry_observed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        ConditionStatus, RestorePowerState, RunStrategy,
        fixtures::{migration, t0, t1},
        history::record_phase,
    };

    #[test]
    fn a_minimal_manifest_gets_every_default() {
        let vmm: VirtualMachineMigration = serde_json::from_value(serde_json::json!({
            "apiVersion": "migration.platform.example/v1alpha1",
            "kind": "VirtualMachineMigration",
            "metadata": {"name": "m", "namespace": "default"},
            "spec": {
                "source": {
                    "url": "https://vc/sdk",
                    "credentialsSecretRef": {"name": "vc"},
                    "insecureSkipTLSVerify": true,
                    "id": "vm-42",
                },
                "staging": {
                    "endpoint": "http://127.0.0.1:9000",
                    "bucket": "ferry",
                    "credentialsSecretRef": {"name": "s3"},
                },
            },
        }))
        .unwrap();
        let spec = &vmm.spec;
        assert!(spec.source.endpoint.insecure_skip_tls_verify);
        assert!(spec.source.power.power_off);
        assert_eq!(
            spec.source.power.restore_power_state,
            RestorePowerState::OnCancel
        );
        assert_eq!(spec.target.template.run_strategy, RunStrategy::Always);
        assert_eq!(spec.target.name, None);
        assert_eq!(spec.staging.region, "us-east-1");
        assert_eq!(spec.conversion.image, None, "the controller's own image");
        assert_eq!(spec.conversion.format, DiskFormat::Raw);
        assert_eq!((spec.cancel, spec.paused, spec.retry), (false, false, 0));
        assert_eq!(vmm.phase(), Phase::Pending);
        assert!(!vmm.retry_requested());
    }

    #[test]
    fn a_full_object_round_trips_through_json_and_yaml() {
        let mut vmm = migration("web-1")
            .in_wave("w1")
            .with_disks(2)
            .with_phase(Phase::Importing)
            .with_initial_conditions()
            .with_condition(
                ConditionType::SourceDiscovered,
                ConditionStatus::True,
                Reason::Discovered,
            );
        let status = vmm.status.as_mut().unwrap();
        status.progress = Some(Progress {
            percent: 45.23,
            bytes_done: 1 << 20,
            bytes_total: 128 << 20,
            rate_bytes_per_second: Some(10 << 20),
            eta_seconds: Some(12),
        });
        status.last_failure = Some(LastFailure {
            phase: Phase::Importing,
            reason: Reason::ImportFailed,
            message: "DataVolume web-1-disk-0 failed".into(),
            retriable: true,
            time: t0(),
            cause: None,
        });
        record_phase(&mut status.history, Phase::Preparing, 1, &t0());
        record_phase(&mut status.history, Phase::Importing, 1, &t1());
        status.started_at = Some(t0());
        status.message = Some("importing disk 1 of 2".into());
        status.source.as_mut().unwrap().memory_mib = Some(4096);
        vmm.spec.source.endpoint.insecure_skip_tls_verify = true;

        let json = serde_json::to_string(&vmm).unwrap();
        assert_eq!(
            serde_json::from_str::<VirtualMachineMigration>(&json).unwrap(),
            vmm
        );
        let yaml = serde_yaml::to_string(&vmm).unwrap();
        assert_eq!(
            serde_yaml::from_str::<VirtualMachineMigration>(&yaml).unwrap(),
            vmm
        );
        assert!(json.contains(r#""memoryMiB":4096"#), "{json}");
        assert!(json.contains(r#""insecureSkipTLSVerify":true"#), "{json}");
    }

    #[test]
    fn an_empty_status_serializes_to_almost_nothing() {
        // Server-side apply claims every field it sends: an empty status must not claim lists.
        let v = serde_json::to_value(VirtualMachineMigrationStatus::default()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"phase": "Pending", "attempts": 0, "retryObserved": 0, "retries": 0})
        );
    }

    #[test]
    fn accessors_read_wave_hold_and_retry() {
        let vmm = migration("m").in_wave("w1");
        assert_eq!(vmm.wave(), Some("w1"));
        assert!(vmm.is_held());
        assert!(!vmm.clone().released().is_held());
        let vmm = vmm.with_retry(1);
        assert!(vmm.retry_requested());
        let mut vmm = vmm.with_phase(Phase::Failed);
        vmm.status.as_mut().unwrap().retry_observed = 1;
        assert!(!vmm.retry_requested());
        assert_eq!(vmm.phase(), Phase::Failed);
        assert!(vmm.condition(ConditionType::Ready).is_none());
    }
}
