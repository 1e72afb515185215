//! What the cockpit's state holds per migration, counted by the allocator (issue #30: the cockpit
//! at 10,000 migrations within 64 MiB). Bytes are a count, not a timing: stable on any machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ferry::kube::watch::trim_migration;
use ferry::state::{Action, Scope, State, update};
use ferry_crds::{
    ChildRecord, DiscoveredDisk, DiscoveredNic, DiscoveredSource, StagingRecord,
    VirtualMachineMigration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use support::{C0, many, now};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// At most this many bytes of state per migration shaped as a real one (a fixture migration
/// with what the controller also records: ~5 KB as JSON), cut down as the watch delivers it.
/// Measured 931 B (1,365 B from the objects uncut, whose preflight keeps its quota claims)
/// since rows keep no object, only the fields the board, its lists and its verbs read (the
/// details view reads the one it shows: `state::Opened`). When each row kept the trimmed object
/// it was 5,641 B counted as here (8,533 B whole); the count before (4,488 B, 7,108 whole)
/// subtracted a clone of the objects, which has none of their `Vec`s' growth slack, where the
/// rows kept the objects themselves. 5,216 B (that count) before the status's rarely set parts
/// were boxed. This bound keeps it from growing. The 64 MiB target at 10,000 (RSS) needs about
/// 4 KiB of state per migration for everything the board keeps.
const MAX_BYTES_PER_MIGRATION: usize = 1_000;

/// dhat counts for one profiler at a time: the tests take turns.
static ONE_PROFILER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn live() -> usize {
    dhat::HeapStats::get().curr_bytes
}

/// What a real migration carries beyond the fixture's status, and that no board view reads: its
/// discovered source (two disks, a NIC), child records, the staging record, preflight's quota
/// claims and the wave's owner reference.
fn as_real(mut o: VirtualMachineMigration) -> VirtualMachineMigration {
    let name = o.metadata.name.clone().unwrap_or_default();
    o.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "migration.platform.example/v1alpha1".into(),
        kind: "MigrationWave".into(),
        name: "wave-00".into(),
        uid: "5f0c7a3e-2b1d-4c55-9a57-0d3c1e9b7a21".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let s = o.status.get_or_insert_with(Default::default);
    s.source = Some(Box::new(DiscoveredSource {
        name: Some(name.clone()),
        moref: Some("vm-4711".into()),
        uuid: Some("42 1c 7f 3e 9a 0b 4d 2e-8f 11 6a 5c 3b 2d 1e 0f".into()),
        instance_uuid: Some("501c7f3e-9a0b-4d2e-8f11-6a5c3b2d1e0f".into()),
        guest_id: Some("rhel9_64Guest".into()),
        guest_full_name: Some("Red Hat Enterprise Linux 9 (64-bit)".into()),
        num_cpu: Some(4),
        cores_per_socket: Some(2),
        memory_mib: Some(8192),
        disks: (0..2)
            .map(|i| DiscoveredDisk {
                key: 2000 + i,
                label: format!("Hard disk {}", i + 1),
                datastore_path: format!("[san-gold-01] {name}/{name}_{i}.vmdk"),
                capacity_bytes: 64 << 30,
                ..Default::default()
            })
            .collect(),
        nics: vec![DiscoveredNic {
            mac: "00:50:56:a1:b2:c3".into(),
            network: "dvportgroup-1042".into(),
            device_type: None,
            pci_slot_number: None,
        }],
        ..Default::default()
    }));
    s.children = [
        "Job",
        "Secret",
        "DataVolume",
        "DataVolume",
        "Job",
        "VirtualMachine",
    ]
    .iter()
    .enumerate()
    .map(|(i, kind)| ChildRecord {
        kind: (*kind).into(),
        name: format!("{name}-child-{i}"),
        uid: format!("8d3f2a61-7c4e-4b9a-a1d2-{i:012}"),
        attempt: 1,
        released: false,
    })
    .collect();
    s.staging = Some(Box::new(StagingRecord {
        keys: (0..2)
            .map(|i| format!("ferry/{name}/disk-{i}.qcow2"))
            .collect(),
        ..Default::default()
    }));
    let p = s.preflight.get_or_insert_with(Default::default);
    p.claims = [
        ("count/persistentvolumeclaims".to_owned(), 2),
        ("persistentvolumeclaims".to_owned(), 2),
        ("requests.storage".to_owned(), 145_642_173_610),
    ]
    .into();
    o
}

/// Bytes the board keeps per migration once the objects `make` makes were listed and applied
/// (the list itself consumed), and their size as JSON. The objects are made after the base is
/// read: rows smaller than the objects' own slack (a `Vec` grown by pushes) would otherwise
/// count below nothing.
fn board_bytes(make: impl Fn() -> Vec<VirtualMachineMigration>) -> (usize, usize) {
    let json: usize = make()
        .iter()
        .map(|o| serde_json::to_vec(o).unwrap().len())
        .sum();
    let mut state = State::new("lab", Scope::All, false, now());
    let base = live();
    let objs = make();
    let n = objs.len();
    update(&mut state, Action::migrations_listed(C0, objs));
    assert_eq!(state.index.len(), n, "every migration is on the board");
    let held = live() - base;
    drop(state);
    (held / n, json / n)
}

#[test]
fn ten_thousand_migrations_cost_the_board_a_bounded_number_of_bytes_each() {
    let _turn = ONE_PROFILER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _counting = dhat::Profiler::builder().testing().build();
    let n = 10_000;
    let (whole, whole_json) = board_bytes(|| many(n, 20).into_iter().map(as_real).collect());
    // As the watch delivers them.
    let (per, _) = board_bytes(|| {
        many(n, 20)
            .into_iter()
            .map(as_real)
            .map(|mut o| {
                trim_migration(&mut o);
                o
            })
            .collect()
    });
    println!(
        "{n} migrations shaped as real ones ({whole_json} B of JSON each): the board holds \
         {per} B per migration ({:.1} MiB), {whole} B were each kept whole",
        (per * n) as f64 / f64::from(1 << 20),
    );
    assert!(per < whole, "the cut is smaller: {per} B, whole {whole} B");
    assert!(
        per <= MAX_BYTES_PER_MIGRATION,
        "{per} B per migration, at most {MAX_BYTES_PER_MIGRATION}"
    );
}

/// A list of 10,000 as the watch takes it in (`Watched::keep` as each object arrives, then
/// `Watched::listed`): what it allocates beyond what the board then keeps is at most a quarter
/// of that. It once kept the listed objects whole in one buffer (1.7 KB inline each, 27.9 MB
/// for 10,000 with the buffer's growth) and made rows from them beside it: the cockpit's peak,
/// which its resident memory kept after.
#[test]
fn a_list_of_ten_thousand_never_holds_its_objects_and_rows_at_once() {
    use ferry::kube::watch::Watched;
    let _turn = ONE_PROFILER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _counting = dhat::Profiler::builder().testing().build();
    let n = 10_000;
    // The list's bytes as the API sends them, made a hundred at a time: the input's own peak
    // stays below the list's.
    let mut pages: Vec<String> = Vec::with_capacity(n);
    for chunk in 0..n / 100 {
        for (i, mut o) in many(100, 20).into_iter().map(as_real).enumerate() {
            o.metadata.name = Some(format!("vm-{:05}", chunk * 100 + i));
            pages.push(serde_json::to_string(&o).unwrap());
        }
    }
    let mut state = State::new("lab", Scope::All, false, now());
    let base = live();
    let peak_before = dhat::HeapStats::get().max_bytes;
    let mut buf = vec![];
    for page in &pages {
        let o: VirtualMachineMigration = serde_json::from_str(page).unwrap();
        buf.extend(o.keep(C0));
    }
    update(&mut state, VirtualMachineMigration::listed(C0, buf));
    assert_eq!(state.index.len(), n, "every migration is on the board");
    let held = live() - base;
    let peak = dhat::HeapStats::get().max_bytes;
    assert!(
        peak > peak_before,
        "the list made the peak: {peak} ≤ {peak_before}"
    );
    let beyond = peak - base - held;
    println!(
        "a list of {n}: the board keeps {:.1} MiB, the list took {:.1} MiB more at its peak",
        held as f64 / f64::from(1 << 20),
        beyond as f64 / f64::from(1 << 20),
    );
    assert!(
        beyond * 4 <= held,
        "{beyond} B beyond the {held} B kept: more than a quarter"
    );
}
