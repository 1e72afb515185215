//! Builder fixtures on the API types, for tests here and in other crates (feature `fixtures`).
//! Values look like the lab's (vcsim VM names, loopback endpoints) but talk to nothing.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::{SignedDuration, Timestamp},
};

use crate::{
    Condition, ConditionStatus, ConditionType, DiskStatus, MigrationWave, MigrationWaveSpec, Phase,
    Reason, SecretRef, SourceEndpoint, SourceSpec, StagingSpec, TargetSpec,
    VirtualMachineMigration, VirtualMachineMigrationSpec, VirtualMachineMigrationStatus,
    VmSelector, WaveSource, WaveTemplate, WaveVm, condition, names,
    source::{
        DiscoveredDisk, DiscoveredNic, DiscoveredSource, DiskController, Firmware, NicDeviceType,
        PowerPolicy,
    },
};

/// The BIOS UUID of [`discovered_source`].
pub const SOURCE_UUID: &str = "42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d";

/// What discovery finds of vcsim's `DC0_H0_VM0` made richer: EFI without Secure Boot, 2 vCPUs,
/// 2 GiB, two 1 GiB disks on a paravirtual SCSI controller, two vmxnet3 NICs (`VM Network`,
/// `DVS0`).
pub fn discovered_source() -> DiscoveredSource {
    let nic = |mac: &str, network: &str| DiscoveredNic {
        mac: mac.into(),
        network: network.into(),
        device_type: Some(NicDeviceType::Vmxnet3),
        pci_slot_number: None,
    };
    DiscoveredSource {
        name: Some("DC0_H0_VM0".into()),
        uuid: Some(SOURCE_UUID.into()),
        firmware: Some(Firmware::Efi),
        secure_boot: Some(false),
        num_cpu: Some(2),
        memory_mib: Some(2048),
        guest_id: Some("otherLinux64Guest".into()),
        disks: (0..2)
            .map(|i| DiscoveredDisk {
                key: 2000 + i,
                datastore_path: format!("[LocalDS_0] DC0_H0_VM0/disk{i}.vmdk"),
                capacity_bytes: 1 << 30,
                controller: Some(DiskController::Pvscsi),
                ..Default::default()
            })
            .collect(),
        nics: vec![
            nic("00:50:56:aa:bb:01", "VM Network"),
            nic("00:50:56:aa:bb:02", "DVS0"),
        ],
        ..Default::default()
    }
}

/// A SHA-1 thumbprint in vSphere's format.
pub const THUMBPRINT: &str = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01";
/// uid of [`migration`]s.
pub const MIGRATION_UID: &str = "00000000-0000-0000-0000-000000000001";
/// uid of [`wave`]s.
pub const WAVE_UID: &str = "00000000-0000-0000-0000-000000000002";

/// A fixed instant: 2026-01-01T00:00:00Z.
pub fn t0() -> Time {
    ts(0)
}

/// One minute after [`t0`].
pub fn t1() -> Time {
    ts(60)
}

/// `secs` seconds after [`t0`].
pub fn ts(secs: i64) -> Time {
    const T0: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z
    let base = Timestamp::from_second(T0).unwrap_or(Timestamp::UNIX_EPOCH);
    Time(
        base.checked_add(SignedDuration::from_secs(secs))
            .unwrap_or(base),
    )
}

/// The vSphere endpoint of the lab's shape, trusted by thumbprint.
pub fn source_endpoint() -> SourceEndpoint {
    SourceEndpoint {
        url: Some("https://127.0.0.1:8989/sdk".into()),
        credentials_secret_ref: SecretRef::new("vsphere-credentials"),
        thumbprint: Some(THUMBPRINT.into()),
        insecure_skip_tls_verify: false,
    }
}

/// A source selecting vcsim's `DC0_H0_VM0` by name, with the default power policy.
pub fn source() -> SourceSpec {
    SourceSpec {
        endpoint: source_endpoint(),
        vm: VmSelector::by_name("DC0_H0_VM0"),
        power: PowerPolicy::default(),
    }
}

/// Staging on a loopback S3 endpoint, bucket `ferry-staging`, prefix `ferry`.
pub fn staging() -> StagingSpec {
    StagingSpec {
        endpoint: "http://127.0.0.1:9000".into(),
        bucket: "ferry-staging".into(),
        prefix: Some("ferry".into()),
        region: crate::staging::DEFAULT_REGION.into(),
        credentials_secret_ref: SecretRef::new("s3-credentials"),
    }
}

/// A spec with [`source`], [`staging`] and defaults elsewhere.
pub fn migration_spec() -> VirtualMachineMigrationSpec {
    VirtualMachineMigrationSpec {
        source: source(),
        target: TargetSpec::default(),
        staging: staging(),
        conversion: Default::default(),
        mode: Default::default(),
        warm: None,
        hooks: None,
        cancel: false,
        paused: false,
        preflight: None,
        retry: 0,
    }
}

/// A migration named `name` in namespace `default`, generation 1, uid [`MIGRATION_UID`], no status.
pub fn migration(name: &str) -> VirtualMachineMigration {
    let mut vmm = VirtualMachineMigration::new(name, migration_spec());
    vmm.metadata.namespace = Some("default".into());
    vmm.metadata.uid = Some(MIGRATION_UID.into());
    vmm.metadata.generation = Some(1);
    vmm
}

/// A wave named `name` in namespace `default` (uid [`WAVE_UID`]) over vcsim's `DC0_H0_VM0` …
/// `DC0_H0_VM<n-1>`, with the default throttle.
pub fn wave(name: &str, n: usize) -> MigrationWave {
    let spec = MigrationWaveSpec {
        template: WaveTemplate {
            source: WaveSource {
                endpoint: source_endpoint(),
                power: PowerPolicy::default(),
            },
            target: Default::default(),
            staging: staging(),
            conversion: Default::default(),
            mode: Default::default(),
            hooks: None,
        },
        vms: (0..n)
            .map(|i| WaveVm::by_name(format!("DC0_H0_VM{i}")))
            .collect(),
        max_in_flight: crate::wave::DEFAULT_MAX_IN_FLIGHT,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let mut w = MigrationWave::new(name, spec);
    w.metadata = ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        uid: Some(WAVE_UID.into()),
        generation: Some(1),
        ..ObjectMeta::default()
    };
    w
}

impl VirtualMachineMigration {
    /// A migration named `test` (see [`migration`]).
    pub fn test() -> Self {
        migration("test")
    }

    fn status_mut(&mut self) -> &mut VirtualMachineMigrationStatus {
        self.status.get_or_insert_with(Default::default)
    }

    /// With `status.phase` set.
    pub fn with_phase(mut self, phase: Phase) -> Self {
        self.status_mut().phase = phase;
        self
    }

    /// With a condition set at [`t0`] for the current generation.
    pub fn with_condition(
        mut self,
        type_: ConditionType,
        status: ConditionStatus,
        reason: Reason,
    ) -> Self {
        let generation = self.metadata.generation;
        condition::set_condition(
            &mut self.status_mut().conditions,
            type_,
            status,
            reason,
            "",
            generation,
            &t0(),
        );
        self
    }

    /// With all eight conditions present (`Unknown` / `NotStarted`).
    pub fn with_initial_conditions(mut self) -> Self {
        let generation = self.metadata.generation;
        let cold = self.spec.mode == crate::MigrationMode::Cold;
        let converts = self.spec.conversion.guest.converts();
        let conditions = &mut self.status_mut().conditions;
        condition::init_conditions(conditions, generation, &t0());
        // As the controller writes them: a cold migration has no cutover, one that does not
        // convert its guest no GuestConverted.
        if cold {
            conditions.retain(|c| c.type_ != ConditionType::CutOver);
        }
        if !converts {
            conditions.retain(|c| c.type_ != ConditionType::GuestConverted);
        }
        self
    }

    /// With `n` discovered disks of 64 MiB and their per-disk status.
    pub fn with_disks(mut self, n: usize) -> Self {
        let status = self.status_mut();
        let source = status.source.get_or_insert_with(Default::default);
        source.disks = (0..n)
            .map(|i| crate::DiscoveredDisk {
                key: 2000 + i as i32,
                label: format!("Hard disk {}", i + 1),
                datastore_path: format!("[LocalDS_0] DC0_H0_VM0/disk{i}.vmdk"),
                capacity_bytes: 64 << 20,
                controller: None,
            })
            .collect();
        status.disks = (0..n)
            .map(|i| DiskStatus {
                index: i as i32,
                capacity_bytes: Some(64 << 20),
                ..DiskStatus::default()
            })
            .collect();
        self
    }

    /// With `status.source.name` as discovered.
    pub fn with_discovered_name(mut self, name: &str) -> Self {
        self.status_mut()
            .source
            .get_or_insert_with(Default::default)
            .name = Some(name.into());
        self
    }

    /// With `spec.cancel: true`.
    pub fn cancelled(mut self) -> Self {
        self.spec.cancel = true;
        self
    }

    /// With `spec.paused: true`.
    pub fn paused(mut self) -> Self {
        self.spec.paused = true;
        self
    }

    /// With `spec.retry` set (and the generation bumped, as the API server would).
    pub fn with_retry(mut self, retry: i64) -> Self {
        self.spec.retry = retry;
        self.metadata.generation = Some(self.metadata.generation.unwrap_or(0) + 1);
        self
    }

    /// With the cleanup finalizer.
    pub fn finalized(mut self) -> Self {
        self.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(names::FINALIZER.into());
        self
    }

    /// Being deleted since `at`.
    pub fn deleting(mut self, at: Time) -> Self {
        self.metadata.deletion_timestamp = Some(at);
        self
    }

    /// Labelled as a member of `wave` and held by it.
    pub fn in_wave(mut self, wave: &str) -> Self {
        self.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(names::WAVE_LABEL.into(), wave.into());
        self.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(names::HOLD_ANNOTATION.into(), names::HOLD_VALUE.into());
        self
    }

    /// Without the wave's hold annotation.
    pub fn released(mut self) -> Self {
        if let Some(a) = self.metadata.annotations.as_mut() {
            a.remove(names::HOLD_ANNOTATION);
        }
        self
    }
}

impl MigrationWave {
    /// A wave named `test` over three VMs (see [`wave`]).
    pub fn test() -> Self {
        wave("test", 3)
    }

    /// With `spec.maxInFlight` set.
    pub fn with_max_in_flight(mut self, n: i32) -> Self {
        self.spec.max_in_flight = n;
        self
    }

    /// With `spec.paused: true`.
    pub fn paused(mut self) -> Self {
        self.spec.paused = true;
        self
    }

    /// With `spec.cancel: true`.
    pub fn cancelled(mut self) -> Self {
        self.spec.cancel = true;
        self
    }

    /// With `spec.retry` set.
    pub fn with_retry(mut self, retry: i64) -> Self {
        self.spec.retry = retry;
        self
    }
}

/// A `Ready: True` condition at [`t0`], for status literals in tests.
pub fn ready_condition() -> Condition {
    Condition {
        type_: ConditionType::Ready,
        status: ConditionStatus::True,
        reason: Reason::Succeeded,
        message: String::new(),
        last_transition_time: t0(),
        observed_generation: Some(1),
    }
}

/// Hooks with only a `preCutover` one: image `img`, command `quiesce`, 60 s.
pub fn pre_cutover_hooks() -> crate::Hooks {
    crate::Hooks {
        pre_cutover: Some(crate::Hook {
            image: "img".into(),
            command: vec!["quiesce".into()],
            args: vec![],
            timeout_seconds: 60,
        }),
        post_cutover: None,
    }
}
