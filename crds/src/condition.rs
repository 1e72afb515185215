//! Conditions in `metav1.Condition` shape, their types and reasons, and the pure setter that
//! moves `lastTransitionTime` only when a condition's status changes.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The eight condition types of a migration, in the order the seed lists them (and the cockpit
/// shows them).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::EnumCount,
    strum::VariantArray,
    strum::IntoStaticStr,
)]
pub enum ConditionType {
    /// The source VM's inventory was read from vSphere.
    SourceDiscovered,
    /// Pre-flight checks passed (disk layout, firmware, power state, target name free).
    Validated,
    /// Every disk was converted and uploaded to staging, with its checksum recorded.
    DiskConverted,
    /// Every DataVolume reached `Succeeded`.
    DiskImported,
    /// A warm migration's cutover is done: the source powered off and what changed since the
    /// first copy written into the volumes and read back.
    CutOver,
    /// The imported guest was inspected and, when `spec.conversion.guest` asked for it,
    /// converted to run on KubeVirt (the reason says which).
    GuestConverted,
    /// The KubeVirt VirtualMachine exists.
    VMCreated,
    /// The VirtualMachineInstance was observed `Running`.
    VMStarted,
    /// The guest passed the readiness check of spec.target.readiness (the reason says which).
    GuestReady,
    /// The whole migration is done.
    Ready,
}

/// A kind of condition type: [`ConditionType`] for migrations, [`WaveConditionType`] for waves.
pub trait ConditionKind: Copy + Ord + fmt::Debug + 'static {
    /// Every type of this kind, in display order.
    const ALL: &'static [Self];
}

impl ConditionKind for ConditionType {
    const ALL: &'static [Self] = &ConditionType::ALL;
}

/// The condition types of a MigrationWave.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::EnumCount,
    strum::VariantArray,
)]
pub enum WaveConditionType {
    /// Migrations of the wave are being worked on (False when paused, cancelled or finished).
    Progressing,
    /// Every migration of the wave finished (succeeded, failed or cancelled), or the wave was
    /// cancelled.
    Completed,
    /// At least one migration of the wave failed (the message gives how many), a VM of it gets
    /// no migration (`NameCollision`), or its selector chose too many VMs (`SelectorTooBroad`).
    Degraded,
    /// Every migration of the wave succeeded.
    Ready,
}

impl WaveConditionType {
    /// Every wave condition type, in display order (the declaration's, derived).
    pub const ALL: [WaveConditionType; <WaveConditionType as strum::EnumCount>::COUNT] =
        crate::listed::array(<WaveConditionType as strum::VariantArray>::VARIANTS);
}

impl ConditionKind for WaveConditionType {
    const ALL: &'static [Self] = &WaveConditionType::ALL;
}

impl ConditionType {
    /// Every condition type, in seed order (the declaration's, derived).
    pub const ALL: [ConditionType; <ConditionType as strum::EnumCount>::COUNT] =
        crate::listed::array(<ConditionType as strum::VariantArray>::VARIANTS);

    /// The name written in `status.conditions[].type`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl ConditionType {
    /// Whether the cockpit's board gives the condition a pip of its own: all but `CutOver` and
    /// `GuestConverted`, which only some migrations have and whose phases show them (eight pips).
    pub fn on_the_board(self) -> bool {
        match self {
            ConditionType::CutOver | ConditionType::GuestConverted => false,
            ConditionType::SourceDiscovered
            | ConditionType::Validated
            | ConditionType::DiskConverted
            | ConditionType::DiskImported
            | ConditionType::VMCreated
            | ConditionType::VMStarted
            | ConditionType::GuestReady
            | ConditionType::Ready => true,
        }
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of a condition, as in `metav1.Condition`.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold; the reason says why.
    False,
    /// Not known yet (not evaluated, or in progress).
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// The status as written in the API (`"True"`, `"False"`, `"Unknown"`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a condition (or `status.lastFailure`) has its status: a CamelCase identifier that tools can
/// match on, grouped here by the checkpoint that sets it.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::EnumCount,
    strum::VariantArray,
    strum::IntoStaticStr,
)]
pub enum Reason {
    // --- any condition ---
    /// Not evaluated yet: an earlier checkpoint has not finished.
    NotStarted,
    /// The checkpoint that sets this condition is being worked on.
    InProgress,
    /// Held in `Queued` by its MigrationWave.
    HeldByWave,
    /// Waiting in `Queued` before the source is touched: its ESXi host already has the
    /// controller's limit of migrations copying from it (`--max-copies-per-host`); the message
    /// names the host and the count.
    HostCopyLimit,
    /// Waiting in `Queued` before the source is touched: a datastore of its disks already has
    /// the controller's limit of migrations copying from it (`--max-copies-per-datastore`); the
    /// message names the datastore and the count.
    DatastoreCopyLimit,
    /// A wave's window (spec.window) keeps its held migrations from starting: it has not
    /// opened, or the forecast says a migration started now would end past its end.
    OutsideWindow,
    /// spec.paused is true; no new step is taken.
    Paused,
    /// A transient error; the controller retries with backoff.
    TransientError,
    /// The API server refused one of ferry's writes (RBAC forbidden, a CRD validation rule, an
    /// invalid object): the message carries its words whole. Tried a few times, then failed.
    APIRefused,
    /// An admission policy or webhook denied one of ferry's writes: the message carries its
    /// words whole. Tried a few times, then failed (a retry tries again once it is fixed).
    AdmissionDenied,
    /// A ResourceQuota of the namespace refused one of ferry's creates: the migration waits and
    /// tries again (the quota may be raised), the quota's words whole in the message.
    QuotaExceeded,
    /// spec.retry was raised; the failed checkpoint is cleaned up and resumed.
    RetryRequested,
    /// spec.cancel is true; cleaning up.
    Cancelling,
    // --- SourceDiscovered / Validated (Preparing) ---
    /// The VM was found and its inventory read.
    Discovered,
    /// A Secret named in the spec is missing or lacks a required key.
    SecretNotFound,
    /// vSphere refused the credentials from spec.source.credentialsSecretRef.
    LoginFailed,
    /// The vSphere endpoint in spec.source.url could not be reached.
    EndpointUnreachable,
    /// The server's TLS certificate does not match the pinned thumbprint, or no trusted CA
    /// signed it.
    ThumbprintMismatch,
    /// No VM matches the selector in spec.source.
    VMNotFound,
    /// More than one VM matches spec.source.name; select it by id or uuid instead.
    VMAmbiguous,
    /// Every pre-flight check passed.
    Validated,
    /// Preflight found a Critical concern (status.preflight.concerns) that the operator has not
    /// accepted: nothing was touched, and the migration waits for its cause to be fixed.
    PreflightFailed,
    /// The VM's disks cannot be migrated (e.g. RDM, independent or shared disks, snapshots).
    UnsupportedDiskLayout,
    /// The VM is powered on and spec.source.powerOff is false, or someone powered it on while
    /// its disks were copied or before the cutover (the copy may be stale).
    SourcePoweredOn,
    /// Powering the source VM off failed.
    PowerOffFailed,
    /// The source VM changed after ferry recorded what it copies (a disk added, removed or
    /// resized, its configuration changed, a power cycle): the copy is not its final state.
    /// Nothing was created; raise spec.retry to start over from Preparing.
    SourceChanged,
    /// ferry's admission policies (deploy/controller) are not in force: no migration is made,
    /// started or retried until they are; what is missing is in the message.
    PoliciesNotInForce,
    /// A VirtualMachine with the target name exists and does not belong to this migration.
    TargetNameTaken,
    /// A credentials Secret lacks the opt-in label migration.platform.example/credentials:
    /// "true"; ferry uses only Secrets their owner marked for it, and sent nothing.
    CredentialsNotAllowed,
    /// The spec names another endpoint (URL, trust, bucket) than its credentials Secret is bound
    /// to; the credentials were not sent anywhere.
    CredentialsMismatch,
    /// An object ferry would create for this migration (conversion Job, CDI Secret or CA
    /// ConfigMap, DataVolume) exists and was made by someone else or an earlier migration.
    TargetConflict,
    // --- DiskConverted (Converting) ---
    /// Every disk is converted, staged and checksummed.
    Converted,
    /// The conversion Job failed.
    ConversionFailed,
    /// The staging endpoint could not be reached or refused the credentials.
    StagingUnavailable,
    /// The bucket in spec.staging.bucket does not exist.
    BucketNotFound,
    /// A staged object's checksum differs from the one recorded, or an imported volume's bytes
    /// differ from the staged image's (found by the verification Job).
    ChecksumMismatch,
    /// spec.conversion.image is not the controller's converter image nor in its allow-list.
    ConverterImageNotAllowed,
    // --- DiskImported (Importing) ---
    /// Every DataVolume reached `Succeeded`.
    Imported,
    /// A DataVolume failed.
    ImportFailed,
    // --- CutOver (CuttingOver) ---
    /// The first copy is imported; the source runs on until the cutover (spec.warm).
    WaitingForCutover,
    /// The source powered off and its changes since the first copy are in the volumes.
    CutOver,
    /// The changes could not be copied into the volumes, or did not read back.
    CutoverFailed,
    /// vSphere refused to take or remove a snapshot of the source.
    SnapshotFailed,
    // --- GuestConverted (ConvertingGuest) ---
    /// The guest was converted to run on KubeVirt (`virt-v2v-in-place`), and the converted
    /// volumes' checksums recorded.
    GuestConverted,
    /// Inspection found the guest's boot path already has virtio's drivers: nothing converted
    /// (`conversion.guest: Auto`).
    GuestNeedsNoConversion,
    /// Inspecting or converting the guest failed; the volumes hold the verified bytes.
    GuestConversionFailed,
    // --- VMCreated / VMStarted / GuestReady ---
    /// The VirtualMachine exists.
    VMCreated,
    /// Creating the VirtualMachine was rejected.
    VMCreateFailed,
    /// The VirtualMachineInstance is `Running`.
    VMRunning,
    /// The VirtualMachineInstance failed to start.
    VMStartFailed,
    /// The guest agent connected.
    GuestAgentConnected,
    /// The guest agent did not connect in time.
    GuestAgentTimeout,
    /// The guest did not pass its readiness check (`spec.target.readiness`) within the agent
    /// timeout; the message carries the serial console's last lines.
    GuestNotReady,
    /// KubeVirt cannot schedule the VM's pod (VM printableStatus `ErrorUnschedulable`).
    ErrorUnschedulable,
    /// A claim of the VM is missing (VM printableStatus `ErrorPvcNotFound`).
    ErrorPvcNotFound,
    /// A DataVolume of the VM failed (VM printableStatus `DataVolumeError`).
    DataVolumeError,
    /// The VM's instance keeps failing and KubeVirt backs off (printableStatus `CrashLoopBackOff`).
    CrashLoopBackOff,
    /// The VM's pod image cannot be pulled (printableStatus `ErrImagePull`).
    ErrImagePull,
    /// KubeVirt backs off pulling the VM's pod image (printableStatus `ImagePullBackOff`).
    ImagePullBackOff,
    /// The VirtualMachineInstance is `Running` and `Ready` (readiness `Running`).
    VMReady,
    /// Nothing about the guest was checked (readiness `None`).
    NotChecked,
    /// The guest is ready; its health check (`spec.target.healthCheck`) is being probed.
    HealthChecking,
    /// The guest is ready and its health check answered.
    HealthCheckPassed,
    /// The health check did not answer within its timeout (the message has the last probe's
    /// answer).
    HealthCheckFailed,
    /// A hook of `spec.hooks` runs (the message names it and its Job).
    HookRunning,
    /// A hook of `spec.hooks` failed: exited non-zero, ran past its timeout, or could not start
    /// (the message has what it said).
    HookFailed,
    // --- a MigrationWave's conditions ---
    /// A VM of the wave gets no migration: its migration's name (`<wave>-<VM>`) is that of
    /// another VM's migration, in this wave or another one (the message names both VMs).
    NameCollision,
    /// spec.selector of a wave chose more VMs than one wave may hold; nothing was created.
    SelectorTooBroad,
    // --- Ready ---
    /// The migration succeeded.
    Succeeded,
    /// The migration failed; see status.lastFailure.
    Failed,
    /// The migration was cancelled.
    Cancelled,
    /// The migrated VM failed its health check and the migration was rolled back to the source.
    RolledBack,
    /// The target VM's instance did not go within the bound after ferry stopped the VM, so the
    /// source VM was not powered back on (two copies of one VM must never run).
    TargetStillRunning,
    /// The migration is being deleted and its cleanup cannot remove what it staged (staging
    /// unreachable, credentials refused): it retries with backoff until it can, or until the
    /// owner sets the abandon-cleanup annotation.
    CleanupBlocked,
}

impl Reason {
    /// Every reason, in declaration order (derived).
    pub const ALL: [Reason; <Reason as strum::EnumCount>::COUNT] =
        crate::listed::array(<Reason as strum::VariantArray>::VARIANTS);

    /// The reason as written in the API.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// `T` is the kind of condition type: `ConditionType` for migrations, `WaveConditionType` for waves.
/// One aspect of the object's state, in the shape of a Kubernetes metav1.Condition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition<T = ConditionType> {
    /// Which aspect this condition reports.
    #[serde(rename = "type")]
    pub type_: T,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// CamelCase identifier of why the condition has this status, for tools to match on.
    pub reason: Reason,
    /// Human-readable details; may be empty.
    #[schemars(length(max = 32768))]
    pub message: String,
    /// When status last changed (not when reason or message did).
    pub last_transition_time: Time,
    /// metadata.generation of the object this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

/// The condition of a type, if present.
pub fn get_condition<T: ConditionKind>(
    conditions: &[Condition<T>],
    type_: T,
) -> Option<&Condition<T>> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Status of the condition of a type; `Unknown` when absent.
pub fn condition_status<T: ConditionKind>(
    conditions: &[Condition<T>],
    type_: T,
) -> ConditionStatus {
    get_condition(conditions, type_).map_or(ConditionStatus::Unknown, |c| c.status)
}

/// Whether the condition of a type is present and `True`.
pub fn is_condition_true<T: ConditionKind>(conditions: &[Condition<T>], type_: T) -> bool {
    condition_status(conditions, type_) == ConditionStatus::True
}

/// Sets the condition of `type_`, adding it (in seed order) when absent.
///
/// Pure: the clock is passed in. Returns whether anything changed, so callers can skip a status
/// write that would change nothing.
///
/// # Guarantees
/// * `lastTransitionTime` becomes `now` only when the condition is new or its status changes; a
///   change of reason, message or generation alone keeps the old time.
/// * At most one condition per type; the list stays in [`ConditionKind::ALL`] order when it was.
pub fn set_condition<T: ConditionKind>(
    conditions: &mut Vec<Condition<T>>,
    type_: T,
    status: ConditionStatus,
    reason: Reason,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: &Time,
) -> bool {
    let message = message.into();
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let before = c.clone();
        if c.status != status {
            c.status = status;
            c.last_transition_time = now.clone();
        }
        c.reason = reason;
        c.message = message;
        c.observed_generation = observed_generation;
        return *c != before;
    }
    let at = conditions
        .iter()
        .position(|c| c.type_ > type_)
        .unwrap_or(conditions.len());
    conditions.insert(
        at,
        Condition {
            type_,
            status,
            reason,
            message,
            last_transition_time: now.clone(),
            observed_generation,
        },
    );
    true
}

/// Adds every missing condition type as `Unknown` / `NotStarted`, leaving present ones alone, so
/// that all conditions (eight for a migration) are visible from the first reconcile. Returns whether any was added.
pub fn init_conditions<T: ConditionKind>(
    conditions: &mut Vec<Condition<T>>,
    observed_generation: Option<i64>,
    now: &Time,
) -> bool {
    let mut changed = false;
    for &t in T::ALL {
        if get_condition(conditions, t).is_none() {
            changed |= set_condition(
                conditions,
                t,
                ConditionStatus::Unknown,
                Reason::NotStarted,
                "",
                observed_generation,
                now,
            );
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{t0, t1};

    fn cond(status: ConditionStatus, reason: Reason, msg: &str, gen_: i64, at: &Time) -> Condition {
        Condition {
            type_: ConditionType::DiskImported,
            status,
            reason,
            message: msg.into(),
            last_transition_time: at.clone(),
            observed_generation: Some(gen_),
        }
    }

    #[test]
    fn set_condition_moves_transition_time_only_on_status_change() {
        use ConditionStatus::*;
        // (before, new status, reason, message, generation) -> (changed, transition time)
        let cases = [
            (None, Unknown, Reason::NotStarted, "", 1, true, t1()),
            (
                Some((Unknown, Reason::NotStarted, "")),
                Unknown,
                Reason::NotStarted,
                "",
                1,
                false,
                t0(),
            ),
            (
                Some((Unknown, Reason::NotStarted, "")),
                Unknown,
                Reason::InProgress,
                "1 of 2",
                1,
                true,
                t0(),
            ),
            (
                Some((Unknown, Reason::InProgress, "")),
                True,
                Reason::Imported,
                "",
                1,
                true,
                t1(),
            ),
            (
                Some((True, Reason::Imported, "")),
                True,
                Reason::Imported,
                "",
                2,
                true,
                t0(),
            ),
            (
                Some((True, Reason::Imported, "")),
                True,
                Reason::Imported,
                "done",
                1,
                true,
                t0(),
            ),
            (
                Some((True, Reason::Imported, "")),
                False,
                Reason::ImportFailed,
                "boom",
                1,
                true,
                t1(),
            ),
            (
                Some((False, Reason::ImportFailed, "boom")),
                False,
                Reason::ImportFailed,
                "boom",
                1,
                false,
                t0(),
            ),
            (
                Some((False, Reason::ImportFailed, "")),
                Unknown,
                Reason::RetryRequested,
                "",
                1,
                true,
                t1(),
            ),
        ];
        for (i, (before, status, reason, msg, gen_, changed, ltt)) in cases.into_iter().enumerate()
        {
            let mut conds: Vec<Condition> = before
                .map(|(s, r, m)| cond(s, r, m, 1, &t0()))
                .into_iter()
                .collect();
            let got = set_condition(
                &mut conds,
                ConditionType::DiskImported,
                status,
                reason,
                msg,
                Some(gen_),
                &t1(),
            );
            assert_eq!(got, changed, "case {i}: changed");
            assert_eq!(conds.len(), 1, "case {i}: one condition per type");
            let c = &conds[0];
            assert_eq!(
                (c.status, c.reason, c.message.as_str()),
                (status, reason, msg),
                "case {i}"
            );
            assert_eq!(c.observed_generation, Some(gen_), "case {i}: generation");
            assert_eq!(c.last_transition_time, ltt, "case {i}: lastTransitionTime");
        }
    }

    #[test]
    fn new_conditions_are_inserted_in_seed_order() {
        let mut conds = vec![];
        for t in [
            ConditionType::Ready,
            ConditionType::SourceDiscovered,
            ConditionType::DiskImported,
        ] {
            set_condition(
                &mut conds,
                t,
                ConditionStatus::True,
                Reason::InProgress,
                "",
                None,
                &t0(),
            );
        }
        let types: Vec<_> = conds.iter().map(|c| c.type_).collect();
        assert_eq!(
            types,
            [
                ConditionType::SourceDiscovered,
                ConditionType::DiskImported,
                ConditionType::Ready
            ]
        );
    }

    #[test]
    fn init_conditions_adds_all_eight_once_and_keeps_existing() {
        let mut conds = vec![];
        set_condition(
            &mut conds,
            ConditionType::Validated,
            ConditionStatus::True,
            Reason::Validated,
            "",
            Some(1),
            &t0(),
        );
        assert!(init_conditions(&mut conds, Some(1), &t1()));
        let types: Vec<_> = conds.iter().map(|c| c.type_).collect();
        assert_eq!(types, ConditionType::ALL);
        assert_eq!(
            condition_status(&conds, ConditionType::Validated),
            ConditionStatus::True
        );
        assert_eq!(
            condition_status(&conds, ConditionType::Ready),
            ConditionStatus::Unknown
        );
        assert!(
            !init_conditions(&mut conds, Some(1), &t1()),
            "second call is a no-op"
        );
    }

    #[test]
    fn getters_treat_absent_as_unknown() {
        let mut conds = vec![];
        assert_eq!(
            condition_status(&conds, ConditionType::Ready),
            ConditionStatus::Unknown
        );
        assert!(!is_condition_true(&conds, ConditionType::Ready));
        set_condition(
            &mut conds,
            ConditionType::Ready,
            true.into(),
            Reason::Succeeded,
            "",
            None,
            &t0(),
        );
        assert!(is_condition_true(&conds, ConditionType::Ready));
        assert_eq!(
            get_condition(&conds, ConditionType::Ready).map(|c| c.reason),
            Some(Reason::Succeeded)
        );
    }

    #[test]
    fn condition_serializes_in_metav1_shape() {
        let c = cond(
            ConditionStatus::False,
            Reason::ImportFailed,
            "disk 0",
            3,
            &t0(),
        );
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "type": "DiskImported",
                "status": "False",
                "reason": "ImportFailed",
                "message": "disk 0",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 3,
            })
        );
        let back: Condition = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn names_match_serialization() {
        for t in ConditionType::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        for s in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for r in Reason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            assert_eq!(r.to_string(), r.as_str());
        }
    }
}
