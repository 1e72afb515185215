//! Fixture data for snapshot tests and benchmarks: a believable wave in every phase.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod populate;

use ferry::state::{
    Action, ClusterId, ClusterView, ConnState, EventKind, EventRow, ObjKey, Resource, Scope, State,
    update,
};
use ferry_crds::{
    Concern, ConcernCode, ConditionStatus, ConditionType, LastFailure, MigrationWave,
    MigrationWaveStatus, Phase, PhaseTransition, PreflightStatus, Progress, Reason, Severity,
    VirtualMachineMigration, WaveCounts, WavePhase, WavePreflight,
    fixtures::{migration, ts, wave},
};

/// The fixed "now" of every snapshot: one hour after the fixtures' t0.
pub fn now() -> k8s_openapi::jiff::Timestamp {
    ts(3600).0
}

fn reason_true(t: ConditionType) -> Reason {
    match t {
        ConditionType::SourceDiscovered => Reason::Discovered,
        ConditionType::Validated => Reason::Validated,
        ConditionType::DiskConverted => Reason::Converted,
        ConditionType::DiskImported => Reason::Imported,
        ConditionType::CutOver => Reason::CutOver,
        ConditionType::GuestConverted => Reason::GuestConverted,
        ConditionType::VMCreated => Reason::VMCreated,
        ConditionType::VMStarted => Reason::VMRunning,
        ConditionType::GuestReady => Reason::GuestAgentConnected,
        ConditionType::Ready => Reason::Succeeded,
    }
}

fn conditions_done(p: Phase) -> usize {
    match p {
        Phase::Pending | Phase::Queued | Phase::Preparing => 0,
        Phase::Converting => 2,
        Phase::Importing => 3,
        Phase::CuttingOver | Phase::ConvertingGuest | Phase::CreatingVM => 4,
        Phase::Starting => 5,
        Phase::Validating => 6,
        Phase::Succeeded => 8,
        Phase::Failed | Phase::Cancelled => 3,
        Phase::RolledBack => 6,
    }
}

/// A migration `name` in `phase`, `i` varies times and progress.
pub fn vmm(
    ns: &str,
    name: &str,
    wave: Option<&str>,
    phase: Phase,
    i: i64,
) -> VirtualMachineMigration {
    let mut o = migration(name);
    o.metadata.namespace = Some(ns.into());
    o.metadata.uid = Some(format!("uid-{ns}-{name}"));
    o.metadata.resource_version = Some(format!("{}", 1000 + i));
    o.metadata.creation_timestamp = Some(ts(60 + i));
    if let Some(w) = wave {
        o = o.in_wave(w).released();
    }
    let mut o = o.with_phase(phase).with_initial_conditions().with_disks(2);
    let done = conditions_done(phase);
    // These are cold migrations: no CutOver condition.
    for (k, t) in ConditionType::ALL
        .into_iter()
        .filter(|t| !matches!(t, ConditionType::CutOver | ConditionType::GuestConverted))
        .enumerate()
    {
        if k < done {
            o = o.with_condition(t, ConditionStatus::True, reason_true(t));
        }
    }
    // Ready as the controller writes it: False while under way (InProgress, HeldByWave), and
    // False with the outcome once finished.
    let ready = match phase {
        Phase::Pending => None,
        Phase::Queued => Some((ConditionStatus::False, Reason::HeldByWave)),
        Phase::Preparing
        | Phase::Converting
        | Phase::Importing
        | Phase::CuttingOver
        | Phase::ConvertingGuest
        | Phase::CreatingVM
        | Phase::Starting
        | Phase::Validating => Some((ConditionStatus::False, Reason::InProgress)),
        Phase::Succeeded => None,
        Phase::Failed => Some((ConditionStatus::False, Reason::Failed)),
        Phase::Cancelled => Some((ConditionStatus::False, Reason::Cancelled)),
        Phase::RolledBack => Some((ConditionStatus::False, Reason::RolledBack)),
    };
    if let Some((st, reason)) = ready {
        o = o.with_condition(ConditionType::Ready, st, reason);
    }
    let s = o.status.as_mut().unwrap();
    s.attempts = if phase == Phase::Pending || phase == Phase::Queued {
        0
    } else {
        1 + (i % 3 == 0) as i32
    };
    s.started_at = Some(ts(120 + i));
    let mut hist = vec![];
    let mut at = 120 + i;
    if phase == Phase::Queued {
        hist.push(PhaseTransition {
            phase,
            attempt: 0,
            entered_at: ts(at),
            left_at: None,
        });
    }
    // Cold migrations of guests not converted: no CuttingOver, no ConvertingGuest.
    let cold = Phase::CHECKPOINTS
        .into_iter()
        .filter(|p| !matches!(p, Phase::CuttingOver | Phase::ConvertingGuest));
    for (idx, p) in cold.enumerate() {
        // Checkpoints passed: those before the current one; all for a success, up to
        // Importing (where it failed) for a failure, up to CreatingVM for a cancel.
        let last = match phase {
            Phase::Succeeded => 5,
            Phase::Failed => 2,
            Phase::Cancelled => 3,
            Phase::RolledBack => 5,
            // Not terminal: the condition below stops at the current checkpoint instead.
            Phase::Pending
            | Phase::Queued
            | Phase::Preparing
            | Phase::Converting
            | Phase::Importing
            | Phase::CuttingOver
            | Phase::ConvertingGuest
            | Phase::CreatingVM
            | Phase::Starting
            | Phase::Validating => 3,
        };
        if matches!(phase, Phase::Pending | Phase::Queued)
            || p >= phase && phase.is_checkpoint()
            || phase.is_terminal() && idx > last
        {
            break;
        }
        hist.push(PhaseTransition {
            phase: p,
            attempt: 1,
            entered_at: ts(at),
            left_at: Some(ts(at + 300)),
        });
        at += 300;
    }
    if phase != Phase::Pending && phase != Phase::Queued {
        hist.push(PhaseTransition {
            phase,
            attempt: s.attempts,
            entered_at: ts(at),
            left_at: None,
        });
    }
    s.history = hist;
    let pct = match phase {
        Phase::Converting => Some(((i * 17) % 50) as f64),
        Phase::Importing => Some(50.0 + ((i * 13) % 50) as f64),
        Phase::CuttingOver
        | Phase::ConvertingGuest
        | Phase::CreatingVM
        | Phase::Starting
        | Phase::Validating
        | Phase::Succeeded
        | Phase::RolledBack => Some(100.0),
        Phase::Failed => Some(62.5),
        Phase::Pending | Phase::Queued | Phase::Preparing | Phase::Cancelled => None,
    };
    if let Some(p) = pct {
        let total = 2 * (64 << 20);
        s.progress = Some(Progress {
            percent: p,
            bytes_done: (total as f64 * p / 100.0) as i64,
            bytes_total: total,
            rate_bytes_per_second: matches!(phase, Phase::Converting | Phase::Importing)
                .then_some((3 + i % 40) << 20),
            eta_seconds: matches!(phase, Phase::Converting | Phase::Importing).then_some(30 + i),
        });
        for d in &mut s.disks {
            d.percent = Some(p);
            d.bytes_done = Some(((64 << 20) as f64 * p / 100.0) as i64);
            d.data_volume = Some(format!("{name}-disk-{}", d.index));
            if phase == Phase::Importing {
                d.import_phase = Some("ImportInProgress".into());
            }
        }
    }
    match phase {
        Phase::Failed => {
            s.last_failure = Some(LastFailure {
                phase: Phase::Importing,
                reason: Reason::ImportFailed,
                message:
                    "DataVolume web-disk-1 failed: checksum of the imported image does not match"
                        .into(),
                retriable: true,
                time: ts(3000 + i),
                cause: None,
            });
            s.completed_at = Some(ts(3000 + i));
            ferry_crds::condition::set_condition(
                &mut s.conditions,
                ConditionType::DiskImported,
                ConditionStatus::False,
                Reason::ImportFailed,
                "DataVolume failed",
                Some(1),
                &ts(3000 + i),
            );
        }
        Phase::RolledBack => {
            s.last_failure = Some(LastFailure {
                phase: Phase::Validating,
                reason: Reason::HealthCheckFailed,
                message: "the health check (tcp 8080) did not answer within 300s".into(),
                retriable: true,
                time: ts(3000 + i),
                cause: None,
            });
            s.completed_at = Some(ts(3000 + i));
        }
        Phase::Succeeded => s.completed_at = Some(ts(3590 - 60 * (i % 9))),
        Phase::Cancelled => s.completed_at = Some(ts(2500 + i)),
        Phase::Importing => s.message = Some(format!("importing disk {} of 2", 1 + i % 2)),
        Phase::Queued => s.message = Some("held by wave: 10 of 10 in flight".into()),
        Phase::Pending
        | Phase::Preparing
        | Phase::Converting
        | Phase::CuttingOver
        | Phase::ConvertingGuest
        | Phase::CreatingVM
        | Phase::Starting
        | Phase::Validating => {}
    }
    o
}

/// A wave with a status.
pub fn wave_obj(
    ns: &str,
    name: &str,
    n: usize,
    counts: WaveCounts,
    phase: WavePhase,
) -> MigrationWave {
    let mut w = wave(name, n);
    w.metadata.namespace = Some(ns.into());
    w.metadata.resource_version = Some("77".into());
    w.spec.max_in_flight = 10;
    w.status = Some(MigrationWaveStatus {
        phase,
        total: n as i32,
        counts,
        in_flight: counts.running,
        started_at: Some(ts(120)),
        throughput_per_hour: Some(42.0),
        eta_seconds: Some(1260),
        ..MigrationWaveStatus::default()
    });
    w
}

/// The one cluster of the fixtures.
pub const C0: ClusterId = ClusterId(0);

/// The names used by [`sample`].
pub fn sample_names() -> Vec<String> {
    let vms = [
        "web", "db", "cache", "api", "worker", "mail", "ldap", "build", "proxy", "files",
        "metrics", "backup",
    ];
    let mut out = vec![];
    for (i, v) in vms.iter().enumerate() {
        out.push(format!("w1-{v}-{:02}", i));
    }
    out
}

/// The migrations of [`sample`]: 12 in wave w1 spread over the phases, 3 in w2, 1 alone.
pub fn sample_migrations(ns: &str) -> Vec<VirtualMachineMigration> {
    let phases = [
        Phase::Succeeded,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Importing,
        Phase::Importing,
        Phase::Converting,
        Phase::Preparing,
        Phase::CreatingVM,
        Phase::Validating,
        Phase::Queued,
        Phase::Queued,
        Phase::Cancelled,
    ];
    let mut out: Vec<_> = sample_names()
        .iter()
        .zip(phases)
        .enumerate()
        .map(|(i, (n, p))| vmm(ns, n, Some("w1"), p, i as i64))
        .collect();
    // One checkpoint meets a transient error: the controller retries it.
    let retrying = &mut out[5];
    let st = retrying.status.as_mut().unwrap();
    ferry_crds::condition::set_condition(
        &mut st.conditions,
        ConditionType::Ready,
        ConditionStatus::False,
        Reason::TransientError,
        "StagingUnavailable: connection refused",
        Some(1),
        &ts(3500),
    );
    out.push(vmm(ns, "w2-dc0-h0-vm0", Some("w2"), Phase::Starting, 20));
    out.push(vmm(ns, "w2-dc0-h0-vm1", Some("w2"), Phase::Pending, 21));
    out.push(vmm(ns, "w2-dc0-h0-vm2", Some("w2"), Phase::Pending, 22).paused());
    out.push(vmm(ns, "legacy-erp", None, Phase::Importing, 23));
    out
}

/// Events about `w1-web-00`.
pub fn sample_events(ns: &str) -> Vec<EventRow> {
    let key = ObjKey::new(ns, "w1-db-01");
    let mk = |i: i64, type_: &str, reason: &str, note: &str| EventRow {
        uid: format!("ev-{i}"),
        kind: EventKind::Migration,
        regarding: key.clone(),
        time: Some(ts(i).0),
        type_: type_.into(),
        reason: reason.into(),
        note: note.into(),
        count: 1,
    };
    vec![
        mk(
            130,
            "Normal",
            "Discovered",
            "found DC0_H0_VM1 (2 disks, 128MiB)",
        ),
        mk(420, "Normal", "Converted", "2 disks converted and staged"),
        mk(
            900,
            "Normal",
            "ImportStarted",
            "DataVolumes w1-db-01-disk-0, w1-db-01-disk-1 created",
        ),
        mk(
            3550,
            "Normal",
            "Succeeded",
            "VM w1-db-01 runs in KubeVirt, guest agent connected",
        ),
    ]
}

/// A live cockpit over the sample, namespace `apps`.
pub fn sample_state(scope: Scope) -> State {
    let mut s = State::new("lab", scope, false, now());
    let ns = "apps";
    update(&mut s, Action::migrations_listed(C0, sample_migrations(ns)));
    update(&mut s, Action::WavesListed(C0, sample_waves(ns)));
    update(&mut s, Action::EventsListed(C0, sample_events(ns)));
    for r in Resource::ALL {
        update(&mut s, Action::Connection(C0, r, ConnState::Live));
    }
    s
}

/// The waves of [`sample_migrations`].
pub fn sample_waves(ns: &str) -> Vec<MigrationWave> {
    vec![
        wave_obj(
            ns,
            "w1",
            12,
            WaveCounts {
                queued: 2,
                running: 6,
                succeeded: 2,
                failed: 1,
                cancelled: 1,
                pending: 0,
            },
            WavePhase::Running,
        ),
        wave_obj(
            ns,
            "w2",
            3,
            WaveCounts {
                pending: 2,
                running: 1,
                ..WaveCounts::default()
            },
            WavePhase::Running,
        ),
    ]
}

/// What preflight found about each migration of [`sample_migrations`] it found anything about,
/// in the controller's words, Critical first; and the Critical codes accepted.
fn sample_concerns(name: &str) -> Option<(Vec<Concern>, Vec<ConcernCode>)> {
    use ConcernCode::*;
    use Severity::*;
    let c = |code, severity, message: &str| Concern::new(code, severity, message);
    let powered_on = |vm: &str| {
        c(
            PoweredOn,
            Info,
            &format!(
                "{vm} runs: the migration shuts its guest down (VMware Tools), powering it off \
                 hard after 300s"
            ),
        )
    };
    let no_tools = |vm: &str| {
        c(
            ToolsNotRunning,
            Warning,
            &format!(
                "VMware Tools do not run in {vm}: its power-off will be a hard one (the guest's \
                 unwritten data is lost); start Tools, or shut the guest down yourself before \
                 the window"
            ),
        )
    };
    let (concerns, accepted) = match name {
        // Held in Pending: two Critical concerns nobody accepted.
        "w2-dc0-h0-vm1" => (
            vec![
                c(
                    SnapshotPresent,
                    Critical,
                    "the VM has 2 snapshot tree(s): its disks' current data is in delta files; \
                     delete or consolidate its snapshots in vSphere first",
                ),
                c(
                    RawDeviceMapping,
                    Critical,
                    "Hard disk 2 is a raw device mapping (RDM)",
                ),
                no_tools("DC0_H0_VM1"),
                powered_on("DC0_H0_VM1"),
            ],
            vec![],
        ),
        // Paused in Pending, its shared disk accepted: nothing holds it.
        "w2-dc0-h0-vm2" => (
            vec![
                c(
                    SharedDisk,
                    Critical,
                    "Hard disk 1 is shared with other VMs (multi-writer): the copy is of a disk \
                     they may still write; stop them, or accept SharedDisk",
                ),
                c(
                    SecureBoot,
                    Info,
                    "UEFI Secure Boot is on: the VM gets KubeVirt's Secure Boot (SMM, \
                     Microsoft's keys); a guest signed with other keys will not boot",
                ),
            ],
            vec![SharedDisk],
        ),
        // Queued: preflighted while the wave held them.
        "w1-files-09" => (
            vec![c(
                SnapshotPresent,
                Critical,
                "Hard disk 1 is a snapshot delta disk; consolidate or delete the VM's \
                 snapshots first",
            )],
            vec![],
        ),
        "w1-metrics-10" => (
            vec![c(
                NetworkUnmapped,
                Warning,
                "the NIC 00:50:56:a1:0b:0a on network \"Backup\" is left out of the migrated \
                 VM: map \"Backup\" in target.template.networks",
            )],
            vec![],
        ),
        // Under way or done: what preflight said before they started.
        "w1-web-00" => (
            vec![no_tools("DC0_H0_VM0"), powered_on("DC0_H0_VM0")],
            vec![],
        ),
        "w1-db-01" => (vec![powered_on("DC0_H0_VM1")], vec![]),
        "w1-api-03" => (vec![no_tools("DC0_H0_VM3")], vec![]),
        "w2-dc0-h0-vm0" => (vec![powered_on("DC0_H0_VM0")], vec![]),
        _ => return None,
    };
    Some((concerns, accepted))
}

/// [`sample_migrations`] with preflight's record as the controller writes it (checked two
/// minutes before [`now`]): `w2-dc0-h0-vm1` held in Pending by a snapshot and an RDM.
pub fn preflight_migrations(ns: &str) -> Vec<VirtualMachineMigration> {
    let mut out = sample_migrations(ns);
    for o in &mut out {
        let name = o.metadata.name.clone().unwrap_or_default();
        let Some((concerns, accepted)) = sample_concerns(&name) else {
            continue;
        };
        o.spec.preflight = (!accepted.is_empty()).then(|| ferry_crds::PreflightSpec {
            accept: accepted.clone(),
        });
        let s = o.status.as_mut().unwrap();
        let blocking: Vec<String> = concerns
            .iter()
            .filter(|c| c.severity == Severity::Critical && !accepted.contains(&c.code))
            .map(|c| format!("{}: {}", c.code, c.message))
            .collect();
        s.preflight = Some(PreflightStatus {
            checked_at: Some(ts(3480)),
            observed_generation: Some(1),
            concerns,
            accepted,
            claims: Default::default(),
        });
        if s.phase == Phase::Pending && !blocking.is_empty() {
            let msg = format!(
                "preflight holds {name} (nothing touched): {}; see status.preflight",
                blocking.join("; ")
            );
            s.message = Some(msg.clone());
            ferry_crds::condition::set_condition(
                &mut s.conditions,
                ConditionType::Validated,
                ConditionStatus::False,
                Reason::PreflightFailed,
                &msg,
                Some(1),
                &ts(3480),
            );
        }
    }
    out
}

/// The sample with preflight's records ([`preflight_migrations`]) and the waves' counts of
/// them, as their controllers write them.
pub fn with_preflight(s: &mut State) {
    let ns = "apps";
    let migrations = preflight_migrations(ns);
    for mut w in sample_waves(ns) {
        let name = w.metadata.name.clone();
        let children = migrations.iter().filter(|m| m.wave() == name.as_deref());
        w.status.as_mut().unwrap().preflight = WavePreflight::of(children);
        update(s, Action::WaveApplied(C0, Box::new(w)));
    }
    for m in migrations {
        update(s, Action::MigrationApplied(C0, Box::new(m)));
    }
}

/// `n` migrations over `waves` waves, for benchmarks.
pub fn many(n: usize, waves: usize) -> Vec<VirtualMachineMigration> {
    (0..n)
        .map(|i| {
            let w = format!("wave-{:02}", i % waves.max(1));
            let p = Phase::ALL[(i * 7) % Phase::ALL.len()];
            vmm(
                &format!("ns-{}", i % 5),
                &format!("{w}-dc0-h{}-vm{i:05}", i % 8),
                Some(&w),
                p,
                i as i64,
            )
        })
        .collect()
}

/// A board of two clusters, `lab-a` and `lab-b`, both showing the sample (the same names in
/// both), `lab-b` lost 40 s ago and reconnecting.
pub fn two_cluster_state() -> State {
    let mut s = State::with_clusters(
        vec![
            ClusterView::new("lab-a", Scope::Namespace("apps".into())),
            ClusterView::new("lab-b", Scope::Namespace("apps".into())),
        ],
        false,
        k8s_openapi::jiff::Timestamp::from_second(now().as_second() - 40).unwrap(),
    );
    let b = ClusterId(1);
    update(
        &mut s,
        Action::migrations_listed(C0, sample_migrations("apps")),
    );
    let mut other = sample_migrations("apps");
    other.truncate(6);
    update(&mut s, Action::migrations_listed(b, other));
    for c in [C0, b] {
        for r in Resource::ALL {
            update(&mut s, Action::Connection(c, r, ConnState::Live));
        }
    }
    update(
        &mut s,
        Action::Connection(
            b,
            Resource::Migrations,
            ConnState::Reconnecting {
                retry_at: ts(3604).0,
                attempt: 4,
                error: "Connection refused (os error 111)".into(),
            },
        ),
    );
    update(&mut s, Action::Tick(now()));
    s
}

/// The failure CDI reports when an import breaks off, whole: longer than any pane is wide, on
/// two lines (the importer's own output after the DataVolume's message).
pub const LONG_FAILURE: &str = "DataVolume w1-cache-02-disk-0 failed: Unable to process data: \
    Unable to transfer source data to target file: unable to write to file: stream error: \
    stream ID 1; INTERNAL_ERROR; received from peer\nimporter pod importer-w1-cache-02-disk-0 \
    restarted 3 times; its last words: \"unexpected EOF at byte 41943040 of 67108864\"";

/// `w1-cache-02` failed as the demo's injected import fault fails: [`LONG_FAILURE`] in its
/// `status.lastFailure`, a long condition message, and Events whose notes do not fit a line.
pub fn with_long_failure(s: &mut State) {
    let ns = "apps";
    update(s, Action::MigrationApplied(C0, Box::new(long_failure())));
    let key = ObjKey::new(ns, "w1-cache-02");
    let ev = |i: i64, type_: &str, reason: &str, note: &str| EventRow {
        uid: format!("cache-ev-{i}"),
        kind: EventKind::Migration,
        regarding: key.clone(),
        time: Some(ts(i).0),
        type_: type_.into(),
        reason: reason.into(),
        note: note.into(),
        count: 1,
    };
    update(
        s,
        Action::EventApplied(ev(
            900,
            "Normal",
            "ImportStarted",
            "DataVolumes w1-cache-02-disk-0, w1-cache-02-disk-1 created",
        )),
    );
    update(
        s,
        Action::EventApplied(ev(
            3002,
            "Warning",
            "Failed",
            "Importing failed (ImportFailed): DataVolume w1-cache-02-disk-0 failed: Unable to \
             process data: Unable to transfer source data to target file; retry with \
             `ferry retry w1-cache-02` once the cause is fixed",
        )),
    );
}

/// The object [`with_long_failure`] applies: `w1-cache-02` failed with [`LONG_FAILURE`].
pub fn long_failure() -> VirtualMachineMigration {
    let mut o = vmm("apps", "w1-cache-02", Some("w1"), Phase::Failed, 2);
    let st = o.status.as_mut().unwrap();
    st.last_failure.as_mut().unwrap().message = LONG_FAILURE.into();
    ferry_crds::condition::set_condition(
        &mut st.conditions,
        ConditionType::DiskImported,
        ConditionStatus::False,
        Reason::ImportFailed,
        "DataVolume w1-cache-02-disk-0 failed: Unable to process data: Unable to transfer \
         source data to target file",
        Some(1),
        &ts(3002),
    );
    o
}

/// What the API answers the details view's read of the migration it opened (`Effect::
/// FetchMigration`), as the app delivers it: the last object of `objs` with that namespace and
/// name (the version the test applied last), trimmed as the watch trims it.
pub fn read_answer(s: &State, objs: impl IntoIterator<Item = VirtualMachineMigration>) -> Action {
    let key = s
        .opened
        .as_ref()
        .expect("the details asked for a read")
        .key
        .clone();
    let mut o = objs
        .into_iter()
        .filter(|o| {
            o.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                && o.metadata.name.as_deref() == Some(key.name.as_str())
        })
        .last()
        .unwrap_or_else(|| panic!("no object {key} among the fixtures"));
    ferry::kube::watch::trim_migration(&mut o);
    Action::MigrationRead {
        key,
        result: Ok(Box::new(o)),
    }
}

/// A wave on a bad day: besides `w1-cache-02` (see [`with_long_failure`]), two more imports of
/// wave w1 fail the same way, on their own DataVolumes, and `legacy-erp` fails because its
/// source was powered on meanwhile. The sample's migrations under way have been in their phase
/// longer than it usually takes, so they show as stuck.
pub fn with_problems(s: &mut State) {
    with_long_failure(s);
    let ns = "apps";
    let fail = |name: &str, wave: Option<&str>, i: i64, reason: Reason, message: String| {
        let mut o = vmm(ns, name, wave, Phase::Failed, i);
        let f = o.status.as_mut().unwrap().last_failure.as_mut().unwrap();
        f.reason = reason;
        f.message = message;
        o
    };
    for (name, i) in [("w1-api-03", 3), ("w1-worker-04", 4)] {
        let message = LONG_FAILURE.replace("w1-cache-02", name);
        let o = fail(name, Some("w1"), i, Reason::ImportFailed, message);
        update(s, Action::MigrationApplied(C0, Box::new(o)));
    }
    let o = fail(
        "legacy-erp",
        None,
        23,
        Reason::SourcePoweredOn,
        "the source VM DC0_H0_VM0 was powered on after ferry powered it off; nothing was \
         imported"
            .into(),
    );
    update(s, Action::MigrationApplied(C0, Box::new(o)));
}

/// `make demo`'s wave on a bad day, as the API would show it an hour in (the fixtures' `now`):
/// five VMs of `demo-wave` in namespace `demo` whose sources ran. `vm0` and `vm1` moved; `vm2`
/// failed at 40 % of its import (the demo's injected import fault), was retried and moved on
/// its second attempt; `vm3` failed its conversion (the injected convert fault) and ferry
/// powered its source back on (the demo's `restorePowerState: OnCancelOrFailure`); `vm4` is
/// still importing. Plus one migration of another wave, which a report of `demo-wave` leaves
/// out.
pub fn demo_wave() -> Vec<VirtualMachineMigration> {
    use ferry_crds::{
        SourcePowerOff,
        source::{PowerRestoreResult, SourcePowerRestore},
    };
    let mib = |n: i64| n << 20;
    // Each VM: its phases as (phase, attempt, seconds in it), how it ends, bytes moved of its
    // total, and its start (seconds after t0).
    let vm = |i: usize, start: i64, stays: &[(Phase, i32, i64)], end: Phase, moved: i64| {
        let name = format!("demo-wave-dc0-h0-vm{i}");
        let mut o = migration(&name).in_wave("demo-wave").released();
        o.metadata.namespace = Some("demo".into());
        o.spec.source.vm.name = Some(format!("DC0_H0_VM{i}"));
        let mut o = o.with_phase(end);
        let s = o.status.as_mut().unwrap();
        let mut at = start;
        for (phase, attempt, secs) in stays {
            s.history.push(PhaseTransition {
                phase: *phase,
                attempt: *attempt,
                entered_at: ts(at),
                left_at: Some(ts(at + secs)),
            });
            at += secs;
        }
        let attempts = stays.last().map_or(1, |s| s.1);
        s.history.push(PhaseTransition {
            phase: end,
            attempt: attempts,
            entered_at: ts(at),
            left_at: None,
        });
        s.attempts = attempts;
        s.started_at = Some(ts(start));
        if end.is_terminal() {
            s.completed_at = Some(ts(at));
        }
        // Preparing asks the guest to shut down 20 s in.
        s.source_power_off = Some(SourcePowerOff {
            shutdown_guest_at: Some(ts(start + 20)),
            hard_power_off_at: None,
        });
        s.progress = Some(Progress {
            percent: moved as f64 * 100.0 / mib(512) as f64,
            bytes_done: moved,
            bytes_total: mib(512),
            rate_bytes_per_second: None,
            eta_seconds: None,
        });
        (o, at)
    };
    let running = |o: &mut VirtualMachineMigration, at: i64| {
        let s = o.status.as_mut().unwrap();
        ferry_crds::condition::set_condition(
            &mut s.conditions,
            ConditionType::VMStarted,
            ConditionStatus::True,
            Reason::VMRunning,
            "the VirtualMachineInstance runs",
            Some(1),
            &ts(at),
        );
    };
    use Phase::*;
    let ok = [
        (Preparing, 1, 45),
        (Converting, 1, 380),
        (Importing, 1, 410),
        (CreatingVM, 1, 3),
        (Starting, 1, 35),
        (Validating, 1, 60),
    ];
    let (mut vm0, _) = vm(0, 60, &ok, Succeeded, mib(512));
    running(&mut vm0, 60 + 45 + 380 + 410 + 3 + 35);
    let (mut vm1, _) = vm(1, 62, &ok, Succeeded, mib(512));
    running(&mut vm1, 62 + 45 + 380 + 410 + 3 + 35);
    let retried = [
        (Preparing, 1, 44),
        (Converting, 1, 371),
        (Importing, 1, 160),
        (Failed, 1, 240),
        (Importing, 2, 415),
        (CreatingVM, 2, 3),
        (Starting, 2, 31),
        (Validating, 2, 58),
    ];
    let (mut vm2, _) = vm(2, 64, &retried, Succeeded, mib(512));
    running(&mut vm2, 64 + 44 + 371 + 160 + 240 + 415 + 3 + 31);
    vm2.status.as_mut().unwrap().last_failure = Some(LastFailure {
        phase: Importing,
        reason: Reason::ImportFailed,
        message: "DataVolume demo-wave-dc0-h0-vm2-disk-0 failed: Unable to process data: \
                  injected permanent import fault at 40% (ferry-sim)"
            .into(),
        retriable: true,
        time: ts(64 + 44 + 371 + 160),
        cause: None,
    });
    let (mut vm3, failed_at) = vm(
        3,
        480,
        &[(Preparing, 1, 46), (Converting, 1, 95)],
        Failed,
        mib(96),
    );
    {
        let s = vm3.status.as_mut().unwrap();
        s.last_failure = Some(LastFailure {
            phase: Converting,
            reason: Reason::ConversionFailed,
            message: "the conversion Job demo-wave-dc0-h0-vm3-convert failed: injected \
                      permanent convert fault (ferry-sim)"
                .into(),
            retriable: true,
            time: ts(failed_at),
            cause: None,
        });
        s.source_power_restore = Some(Box::new(SourcePowerRestore {
            requested_at: ts(failed_at),
            target_stopping_since: None,
            result: Some(PowerRestoreResult::PoweredOn),
            finished_at: Some(ts(failed_at + 12)),
            message: None,
        }));
    }
    let (vm4, _) = vm(
        4,
        1000,
        &[(Preparing, 1, 47), (Converting, 1, 388)],
        Importing,
        mib(205),
    );
    let mut other = vmm(
        "demo",
        "other-wave-vm",
        Some("other-wave"),
        Phase::Succeeded,
        5,
    );
    other.status.as_mut().unwrap().source_power_off = None;
    vec![vm0, vm1, vm2, vm3, vm4, other]
}
