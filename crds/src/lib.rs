//! API types of ferry (group `migration.platform.example`, version `v1alpha1`): the
//! `VirtualMachineMigration` and `MigrationWave` custom resources and the pure helpers around them.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod child;
pub mod condition;
pub mod conversion;
pub mod credentials;
mod error;
pub mod event;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod guest;
pub mod health;
pub mod history;
pub mod hooks;
pub mod intent;
mod listed;
pub mod manifest;
pub mod migration;
pub mod names;
pub mod phase;
pub mod preflight;
pub mod quantity;
pub mod redact;
pub mod rules;
pub mod secret;
pub mod source;
pub mod staging;
pub mod target;
pub mod warm;
pub mod wave;
pub mod wave_child;

pub use child::ChildRecord;
pub use condition::{Condition, ConditionStatus, ConditionType, Reason};
pub use conversion::{ConversionSpec, CopyLimits, DiskFormat};
pub use error::{Error, Result, error_chain};
pub use event::{EventAction, EventReason};
pub use guest::{GuestConversion, GuestStatus, GuestVolume};
pub use health::{HealthCheck, HealthCheckStatus, HttpProbe, OnHealthCheckFailure, TcpProbe};
pub use history::{MAX_HISTORY, PhaseTransition};
pub use hooks::{Hook, HookPoint, HookState, HookStatus, Hooks};
pub use migration::{
    DiskStatus, LastFailure, Progress, VirtualMachineMigration, VirtualMachineMigrationSpec,
    VirtualMachineMigrationStatus,
};
pub use phase::{Phase, Stage};
pub use preflight::{Concern, ConcernCode, PreflightSpec, PreflightStatus, Severity};
pub use secret::SecretRef;
pub use source::{
    DiscoveredDisk, DiscoveredNic, DiscoveredSource, DiskController, Firmware, GuestOsFamily,
    NicDeviceType, PowerState, RestorePowerState, SourceDiskState, SourceEndpoint, SourceOutage,
    SourcePowerOff, SourceSpec, SourceState, ToolsState, VmLookup, VmSelector,
};
pub use staging::{StagingRecord, StagingSpec};
pub use target::{
    AccessMode, Devices, DiskBus, DiskPlacement, InstancetypeKind, InstancetypeRef, MultusNetwork,
    NetworkMapping, NicModel, PodNetwork, PreferenceKind, PreferenceRef, Readiness, RunStrategy,
    StorageMapping, TargetPowerState, TargetSpec, TargetTemplate, VmPlacement, VolumeMode,
    datastore_of,
};
pub use warm::{MigrationMode, SnapshotRecord, WarmSpec, WarmStatus};
pub use wave::{
    MaintenanceWindow, MigrationWave, MigrationWaveSpec, MigrationWaveStatus, VmForecast,
    WaveCollision, WaveCounts, WaveForecast, WavePhase, WavePreflight, WaveRefusal, WaveSelector,
    WaveSource, WaveTagSelector, WaveTemplate, WaveVm,
};
pub use wave_child::{child_migration, child_migration_name};

/// API group of every ferry resource.
pub const GROUP: &str = "migration.platform.example";
/// API version served and stored.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every ferry object (`group/version`).
pub const API_VERSION: &str = "migration.platform.example/v1alpha1";
