//! `MigrationWave`: a batch of VMs migrated under one template, throttled by `maxInFlight`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Condition, ConversionSpec, Phase, Stage, StagingSpec, TargetTemplate,
    condition::{self, WaveConditionType},
    source::{PowerPolicy, SourceEndpoint, VmSelector},
};

/// The default `spec.maxInFlight`.
pub const DEFAULT_MAX_IN_FLIGHT: i32 = 10;
/// Most VMs one wave may list in spec.vms, or choose with spec.selector (status.selectedVms
/// holds no more).
pub const MAX_WAVE_VMS: usize = 5000;
/// Most entries of status.collisions: the status stays small whatever the spec; the `Degraded`
/// condition gives the whole count.
pub const MAX_REPORTED_COLLISIONS: usize = 100;

/// Desired state of a wave: the template shared by its VMs, the VMs, the throttle and the
/// operator's intents.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "migration.platform.example",
    version = "v1alpha1",
    kind = "MigrationWave",
    plural = "migrationwaves",
    namespaced,
    status = "MigrationWaveStatus",
    derive = "PartialEq",
    shortname = "wave",
    category = "migration",
    doc = "MigrationWave migrates a batch of VMs under one template: it creates one \
           VirtualMachineMigration per entry of spec.vms, lets at most spec.maxInFlight of them \
           run at once, and sums up their progress in its status. spec.paused, spec.cancel and \
           spec.retry steer every migration of the wave.",
    validation = crate::rules::name_fits_label(),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase",
        description = "Phase of the wave"),
    printcolumn(name = "Done", type_ = "integer", json_path = ".status.counts.succeeded",
        description = "Migrations that succeeded"),
    printcolumn(name = "Total", type_ = "integer", json_path = ".status.total",
        description = "Migrations in the wave"),
    printcolumn(name = "Failed", type_ = "integer", json_path = ".status.counts.failed",
        description = "Migrations that failed"),
    printcolumn(name = "In-Flight", type_ = "integer", json_path = ".status.inFlight",
        description = "Migrations being worked on"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::rules::vms_or_selector())]
#[x_kube(validation = crate::rules::wave_power_on_needs_a_start())]
pub struct MigrationWaveSpec {
    /// What every migration of the wave shares: source endpoint, target, staging, conversion.
    /// Changes apply to migrations the wave has not created yet.
    pub template: WaveTemplate,

    /// The VMs to migrate, one VirtualMachineMigration each, named <wave>-<targetName> or, without
    /// one, <wave>-<the VM's name, id or uuid made a DNS-1123 label>; empty when spec.selector
    /// chooses them. A VM whose migration would take a name another VM's migration has (Web-1 and
    /// web_1 both make <wave>-web-1) gets none and is listed in status.collisions: give it a
    /// targetName.
    #[serde(default)]
    #[schemars(length(max = 5000))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub vms: Vec<WaveVm>,

    /// Chooses the VMs from the vCenter inventory instead of spec.vms: resolved once, when the
    /// wave is first reconciled, into status.selectedVms (by name, in name order), which the
    /// wave follows from then on (VMs added to vSphere later do not join).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<WaveSelector>,

    /// How many migrations of the wave may be past Queued and not yet finished at once.
    #[serde(default = "default_max_in_flight")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_in_flight: i32,

    /// Set to true to start no further migration; running ones go on.
    #[serde(default)]
    pub paused: bool,

    /// Set to true to cancel every unfinished migration of the wave.
    #[serde(default)]
    pub cancel: bool,

    /// A warm wave's (template.mode Warm) cutover: its migrations copy while their VMs run and
    /// then wait, precopying every precopyIntervalSeconds; once spec.warm.cutover is true or
    /// spec.warm.cutoverAt has come, the wave cuts each waiting migration over, at most
    /// maxInFlight cutting over at once. A migration waiting for its cutover takes no slot of
    /// maxInFlight, so every VM of the wave is precopied before the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<crate::WarmSpec>,

    /// The maintenance window: no migration of the wave starts before window.start, nor once
    /// the forecast (status.forecast: what one of the wave's migrations took) says it would end
    /// past window.end; those wait, counted in status.forecast.outsideWindow and named by the
    /// Progressing condition (OutsideWindow), until the window is moved. Running ones go on. A
    /// warm wave's window holds its cutovers instead (between start and end), not its copies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<MaintenanceWindow>,

    /// Retry token: raising it retries every Failed migration of the wave. It may never decrease.
    #[serde(default)]
    #[schemars(range(min = 0))]
    #[x_kube(validation = crate::rules::retry_only_grows())]
    pub retry: i64,
}

fn default_max_in_flight() -> i32 {
    DEFAULT_MAX_IN_FLIGHT
}

/// When a wave may start migrations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// No migration starts before it (RFC 3339; absent: the window is open now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::target::bounded::<Time>")]
    pub start: Option<Time>,
    /// Every migration is to be finished by it (RFC 3339): none starts that the forecast says
    /// would end later.
    #[schemars(schema_with = "crate::target::bounded::<Time>")]
    pub end: Time,
}

/// The wave's forecast, revised at every reconcile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveForecast {
    /// Seconds one migration of the wave takes (absent until one succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_seconds: Option<i64>,
    /// What the figure is measured on.
    #[schemars(length(max = 256))]
    pub basis: String,
    /// When the wave would end at that pace, maxInFlight at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<Time>,
    /// Held migrations the window keeps from starting now.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub outside_window: i32,
    /// The first `endsAt` the wave was given, kept as it was made: what its actual end is held
    /// against (`ferry report`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_ends_at: Option<Time>,
    /// When that first forecast was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_made_at: Option<Time>,
    /// Migrations of a cold wave with a window that the forecast ends past the window's end: at
    /// the measured pace they will not make it (one not started yet will wait, `OutsideWindow`).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub at_risk: i32,
    /// The first of them (at most 32), in the order the wave starts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub at_risk_names: Vec<String>,
    /// Before a cold wave's window opens: why the wave does not fit in it at the measured pace
    /// (its end past the window's end, and how many at a time would fit); empty when it fits.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub window_short: String,
    /// Each unfinished migration's forecast start and end, at the measured pace, in the order
    /// the wave runs them (those in flight first), at most 256; for a cold wave (a warm one's
    /// cutovers are not measured). A cold migration's source is off from its start to its end:
    /// that span is its VM's downtime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub vms: Vec<VmForecast>,
}

/// One migration's forecast (`status.forecast.vms[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmForecast {
    /// The migration.
    pub migration: String,
    /// When it started (in flight) or is forecast to start.
    pub starts_at: Time,
    /// When it is forecast to end.
    pub ends_at: Time,
    /// It ends past the window's end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_risk: bool,
}

/// Which VMs of the inventory a wave migrates: every condition given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveSelector {
    /// Only VMs under this folder, by inventory path (e.g. `DC0/vm/prod`), at any depth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub folder: Option<String>,
    /// Only VMs whose name matches this pattern: `*` any run of characters, `?` one character.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub name_pattern: Option<String>,
    /// Only VMs carrying this vSphere tag (vCenter's tagging service, read over its REST API
    /// with the same credentials and trust as the inventory). A tag name is unique only within
    /// its category: give the category when the name exists in more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<WaveTagSelector>,
}

/// A vSphere tag, by name and optionally its category's name (e.g. `category: tier`,
/// `name: gold`); names are compared exactly, as vCenter shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveTagSelector {
    /// The tag's name.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// The name of the tag's category; required only when the tag name exists in more than one
    /// category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub category: Option<String>,
}

impl WaveSelector {
    /// Whether `name` matches `name_pattern` (everything matches without one). Pure.
    pub fn matches_name(&self, name: &str) -> bool {
        self.name_pattern
            .as_deref()
            .is_none_or(|p| glob(p.as_bytes(), name.as_bytes()))
    }
}

/// `*` and `?` glob matching, iterative (no backtracking blow-up).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(c) if *c == b'?' || *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

/// The source endpoint and power policy shared by a wave's VMs (each VM is selected in spec.vms).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::rules::tls_verification())]
pub struct WaveSource {
    /// The vSphere endpoint and how to trust it.
    #[serde(flatten)]
    pub endpoint: SourceEndpoint,
    /// What happens to each VM's power.
    #[serde(flatten)]
    pub power: PowerPolicy,
}

/// What every migration of a wave shares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveTemplate {
    /// The vSphere endpoint and power policy.
    pub source: WaveSource,
    /// Storage, run strategy and networks of the new VirtualMachines (names come from spec.vms).
    #[serde(default)]
    pub target: TargetTemplate,
    /// Object storage for the converted disk images.
    pub staging: StagingSpec,
    /// How disks are converted.
    #[serde(default)]
    pub conversion: ConversionSpec,
    /// Cold (the default) or Warm: how every migration of the wave copies (spec.warm says
    /// when a warm wave cuts over).
    #[serde(default)]
    pub mode: crate::MigrationMode,
    /// Every migration's hooks (spec.hooks of a migration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<crate::Hooks>,
}

/// One VM of a wave: exactly one of `name`, `id`, `uuid`, and optionally the target name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::rules::exactly_one_vm_selector())]
pub struct WaveVm {
    /// The VM to migrate.
    #[serde(flatten)]
    pub vm: VmSelector,
    /// Name of the new VirtualMachine (a DNS-1123 label); defaults to the source VM's name made
    /// valid, e.g. DC0_H0_VM0 becomes dc0-h0-vm0. The migration is named after it too
    /// (<wave>-<targetName>), which keeps apart VMs whose names are made the same label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(crate::rules::DNS1123_LABEL))]
    pub target_name: Option<String>,
    /// Critical preflight concerns to go on despite for this VM (its migration's
    /// spec.preflight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<crate::PreflightSpec>,
    /// This VM's storage map, in place of the template's target.storageMap (when not empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub storage_map: Vec<crate::StorageMapping>,
    /// This VM's network mappings, in place of the template's target.networks (when not
    /// empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub networks: Vec<crate::NetworkMapping>,
    /// This VM's placement (labels, annotations, scheduling, instancetype), in place of the
    /// template's target.placement as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::VmPlacement>,
    /// This VM's power state after cutover, in place of the template's target.powerState.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<crate::TargetPowerState>,
}

/// Phase of a wave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum WavePhase {
    /// Accepted; no migration created yet.
    #[default]
    Pending,
    /// Migrations are being created and worked on.
    Running,
    /// spec.paused is true; no further migration starts.
    Paused,
    /// Every migration succeeded.
    Succeeded,
    /// Every migration finished, and at least one failed.
    Failed,
    /// The wave was cancelled.
    Cancelled,
}

impl WavePhase {
    /// `Succeeded`, `Failed` or `Cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WavePhase::Succeeded | WavePhase::Failed | WavePhase::Cancelled
        )
    }
}

/// How many of a wave's migrations are in each group of phases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveCounts {
    /// Migrations in phase Pending.
    #[serde(default)]
    pub pending: i32,
    /// Migrations in phase Queued (held by the wave).
    #[serde(default)]
    pub queued: i32,
    /// Migrations in one of the checkpoints Preparing to Validating.
    #[serde(default)]
    pub running: i32,
    /// Migrations that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Migrations that failed (raise spec.retry to retry them).
    #[serde(default)]
    pub failed: i32,
    /// Migrations that were cancelled.
    #[serde(default)]
    pub cancelled: i32,
}

impl WaveCounts {
    /// Counts one migration in `phase`.
    pub fn add(&mut self, phase: Phase) {
        let slot = match phase.stage() {
            Stage::Pending => &mut self.pending,
            Stage::Queued => &mut self.queued,
            Stage::InFlight => &mut self.running,
            Stage::Succeeded => &mut self.succeeded,
            Stage::Failed => &mut self.failed,
            Stage::Cancelled => &mut self.cancelled,
        };
        *slot = slot.saturating_add(1);
    }

    /// Counts of the given phases.
    pub fn from_phases(phases: impl IntoIterator<Item = Phase>) -> Self {
        let mut c = Self::default();
        phases.into_iter().for_each(|p| c.add(p));
        c
    }

    /// Migrations counted.
    pub fn total(&self) -> i32 {
        self.pending + self.queued + self.running + self.finished()
    }

    /// Migrations in a terminal phase.
    pub fn finished(&self) -> i32 {
        self.succeeded + self.failed + self.cancelled
    }
}

/// Observed state of a wave, written only by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationWaveStatus {
    /// metadata.generation of the spec the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pending, Running, Paused, Succeeded, Failed (finished with failures) or Cancelled.
    #[serde(default)]
    pub phase: WavePhase,
    /// Number of VMs in spec.vms.
    #[serde(default)]
    pub total: i32,
    /// Migrations per group of phases.
    #[serde(default)]
    pub counts: WaveCounts,
    /// Migrations per phase (only phases with at least one).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub phases: std::collections::BTreeMap<String, i32>,
    /// Migrations being worked on (past Queued, not finished, not waiting for their cutover);
    /// at most spec.maxInFlight.
    #[serde(default)]
    pub in_flight: i32,
    /// Warm migrations copied while their VMs run, waiting for the wave's cutover.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub waiting_for_cutover: i32,
    /// When the first migration of the wave was released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the last migration of the wave finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Migrations finished per hour since the wave started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_per_hour: Option<f64>,
    /// Estimated seconds until every migration is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<i64>,
    /// The VMs spec.selector chose, by name, in name order: resolved once, then followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 5000))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub selected_vms: Option<Vec<String>>,
    /// VMs of the wave that get no migration because the name of theirs is another VM's
    /// migration's (in this wave or another one), in spec.vms order; at most 100 are listed, the
    /// Degraded condition counts them all. Give such a VM a targetName (or migrate it in a wave
    /// of another name) and the wave takes it up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub collisions: Vec<WaveCollision>,
    /// VMs of the wave whose migration the API server refused to create (an admission policy,
    /// a ResourceQuota, RBAC, a validation rule), in spec.vms order, at most 100: the wave goes
    /// on with the others and tries each again every 30 s. One a quota refused waits for
    /// the quota; any other counts as done (the wave ends Failed) until a retry of it passes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub refused: Vec<WaveRefusal>,
    /// The forecast: what one migration takes, when the wave would end, and how many
    /// migrations spec.window keeps from starting (absent with no window and nothing measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<WaveForecast>,
    /// What preflight found over the wave's migrations (absent until one was preflighted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<WavePreflight>,
    /// Disk bytes copied over all migrations.
    #[serde(default)]
    pub bytes_done: i64,
    /// Disk bytes to copy over all migrations (known once they are discovered).
    #[serde(default)]
    pub bytes_total: i64,
    /// Progressing, Completed, Degraded (True with the failed count when a migration failed) and
    /// Ready, one entry per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition<WaveConditionType>>,
}

/// Preflight over a wave's migrations: how many are ready, blocked or carry warnings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WavePreflight {
    /// Migrations preflighted.
    #[serde(default)]
    pub checked: i32,
    /// Preflighted without a Critical concern that holds them.
    #[serde(default)]
    pub ready: i32,
    /// With a Critical concern nobody accepted: they will not start (fix, or accept).
    #[serde(default)]
    pub blocked: i32,
    /// Ready, with at least one Warning.
    #[serde(default)]
    pub warnings: i32,
    /// What the claims of the VMs not started yet (Pending, Queued) would take of each
    /// ResourceQuota resource, summed over their preflights.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub claims: std::collections::BTreeMap<String, i64>,
    /// Where those claims together exceed what a ResourceQuota of the namespace has left
    /// (each VM may fit on its own while the wave does not): raise the quota before the window
    /// or the last VMs' imports are refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub quota_short: Vec<String>,
}

impl WavePreflight {
    /// The counts over `children` (those preflighted); `None` when none was.
    pub fn of<'a>(
        children: impl IntoIterator<Item = &'a crate::VirtualMachineMigration>,
    ) -> Option<Self> {
        let mut out = Self::default();
        for c in children {
            let Some(p) = c.status.as_ref().and_then(|s| s.preflight.as_ref()) else {
                continue;
            };
            if matches!(c.phase(), crate::Phase::Pending | crate::Phase::Queued) {
                for (resource, n) in &p.claims {
                    *out.claims.entry(resource.clone()).or_default() += n;
                }
            }
            out.checked += 1;
            if p.blocking().next().is_some() {
                out.blocked += 1;
            } else {
                out.ready += 1;
                if p.concerns
                    .iter()
                    .any(|c| c.severity == crate::Severity::Warning)
                {
                    out.warnings += 1;
                }
            }
        }
        (out.checked > 0).then_some(out)
    }
}

/// A VM of a wave whose migration the API server refused to create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveRefusal {
    /// Position of the VM in spec.vms (or status.selectedVms), from 0.
    pub index: i32,
    /// The VM, as the wave lists it.
    pub vm: String,
    /// The migration the wave would create for it.
    pub migration: String,
    /// Who refused: QuotaExceeded, AdmissionDenied or APIRefused.
    pub reason: crate::Reason,
    /// The API server's words, whole.
    #[schemars(length(max = 4096))]
    pub message: String,
    /// Since when (the first refusal of this kind).
    pub since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

/// A VM of a wave that gets no migration: the name of its migration is another VM's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveCollision {
    /// Position of the VM in spec.vms (or status.selectedVms), from 0.
    pub index: i32,
    /// The VM, as the wave lists it (its name, id or uuid).
    pub vm: String,
    /// The name its migration would have.
    pub migration: String,
    /// The other VM: another of this wave's, or the one the migration of that name migrates.
    pub other_vm: String,
    /// The wave the other VM is listed in (this wave's name when both are in it); absent when
    /// the migration holding the name belongs to no wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_wave: Option<String>,
    /// Which VMs collide, and what to do.
    pub message: String,
}

impl MigrationWaveStatus {
    /// The condition of a type, if present.
    pub fn condition(&self, type_: WaveConditionType) -> Option<&Condition<WaveConditionType>> {
        condition::get_condition(&self.conditions, type_)
    }
}

impl WaveVm {
    /// The VM of this inventory name, with the template's target and maps as they are.
    pub fn by_name(name: impl Into<String>) -> WaveVm {
        WaveVm {
            vm: VmSelector::by_name(name.into()),
            ..WaveVm::default()
        }
    }
}

impl MigrationWave {
    /// The wave's VMs: spec.vms, or the VMs spec.selector chose once (none before that).
    pub fn members(&self) -> Vec<WaveVm> {
        if self.spec.selector.is_none() {
            return self.spec.vms.clone();
        }
        self.status
            .as_ref()
            .and_then(|s| s.selected_vms.as_ref())
            .map(|names| names.iter().map(|n| WaveVm::by_name(n.clone())).collect())
            .unwrap_or_default()
    }

    /// `status.phase`, `Pending` when there is no status yet.
    pub fn phase(&self) -> WavePhase {
        self.status.as_ref().map_or(WavePhase::Pending, |s| s.phase)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waves_preflight_counts_and_sums_the_claims_of_vms_not_started() {
        use crate::fixtures::migration;
        let with = |phase: Phase, gib: i64, blocking: bool| {
            let mut m = migration("m").with_phase(phase);
            let concerns = blocking
                .then(|| {
                    crate::Concern::new(crate::ConcernCode::NoDisk, crate::Severity::Critical, "x")
                })
                .into_iter()
                .collect();
            m.status.get_or_insert_default().preflight = Some(crate::PreflightStatus {
                concerns,
                claims: [("requests.storage".to_owned(), gib << 30)].into(),
                ..Default::default()
            });
            m
        };
        let children = [
            with(Phase::Pending, 10, true),
            with(Phase::Queued, 20, false),
            with(Phase::Importing, 40, false),
        ];
        let p = WavePreflight::of(&children).unwrap();
        assert_eq!((p.checked, p.ready, p.blocked), (3, 2, 1));
        assert_eq!(
            p.claims["requests.storage"],
            30 << 30,
            "the importing VM's claims exist already"
        );
        assert_eq!(WavePreflight::of(&[migration("none")]), None);
    }

    #[test]
    fn counts_group_phases_and_sum_to_total() {
        let c = WaveCounts::from_phases(Phase::ALL);
        assert_eq!(
            c,
            WaveCounts {
                pending: 1,
                queued: 1,
                running: 8,
                succeeded: 1,
                // Failed and RolledBack.
                failed: 2,
                cancelled: 1
            }
        );
        assert_eq!(c.total(), Phase::ALL.len() as i32);
        assert_eq!(c.finished(), 4);
    }

    #[test]
    fn name_patterns_glob() {
        let sel = |p: &str| WaveSelector {
            name_pattern: Some(p.into()),
            ..WaveSelector::default()
        };
        assert!(sel("DC0_H0_VM1?").matches_name("DC0_H0_VM12"));
        assert!(!sel("DC0_H0_VM1?").matches_name("DC0_H0_VM1"));
        assert!(sel("*_VM*").matches_name("DC0_C0_RP0_VM3"));
        assert!(sel("db-*-prod").matches_name("db-eu-west-prod"));
        assert!(!sel("db-*-prod").matches_name("db-eu-west-test"));
        assert!(sel("*").matches_name(""));
        assert!(WaveSelector::default().matches_name("anything"));
        assert!(!sel(&"a*".repeat(30)).matches_name(&"a".repeat(20)));
    }

    #[test]
    fn wave_vm_flattens_the_selector() {
        let v: WaveVm =
            serde_json::from_value(serde_json::json!({"id": "vm-42", "targetName": "db"})).unwrap();
        assert_eq!(v.vm.id.as_deref(), Some("vm-42"));
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            serde_json::json!({"id": "vm-42", "targetName": "db"})
        );
    }
}
