//! End to end, the data path: a flat, a sparse and a stream-optimized VMDK, each to raw and to
//! qcow2, migrate through the controller, the converter Job and the sim's importer; every
//! imported volume equals `qemu-img convert` of its source, and the converter's progress shows
//! in status while the migrations are in Converting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use ferry_crds::{DiskFormat, Phase, VmSelector};
use ferry_harness::DiskKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_input_and_format_imports_what_qemu_img_makes_and_converting_reports_progress() {
    let mut env = Env::new("e2e-datapath", 8).await;
    // Slow enough reads that Converting lasts several progress polls.
    env.extra_controller_args = vec!["--converter-read-limit".into(), (3u64 << 20).to_string()];
    env.start_sim();
    env.start_controller();
    let cases = [
        (DiskKind::Flat, DiskFormat::Raw),
        (DiskKind::Flat, DiskFormat::Qcow2),
        (DiskKind::Sparse, DiskFormat::Raw),
        (DiskKind::Sparse, DiskFormat::Qcow2),
        (DiskKind::StreamOptimized, DiskFormat::Raw),
        (DiskKind::StreamOptimized, DiskFormat::Qcow2),
    ];
    let mut sources = BTreeMap::new();
    for (i, (kind, format)) in cases.into_iter().enumerate() {
        let name = format!("dp-{i}-{}", format.as_str());
        let vm = env.lab.claim_vm().unwrap();
        // 64 MiB: four 16 MiB parts. Where progress moves a part at a time (qemu-img's
        // output through the upload), 32 MiB left one step between 0 and all, sometimes
        // shorter than the converter's 2 s record interval plus the controller's 3 s poll.
        let disk =
            ferry_harness::put_disk(&vm, &env.scratch.join(&name), 64, 40 + i as u64, kind, 4)
                .unwrap();
        let mut vmm = env.migration(&name);
        vmm.spec.source.vm = VmSelector::by_name(vm.name.clone());
        vmm.spec.conversion.format = format;
        vmm.spec.target.name = Some(name.clone());
        env.create(&vmm).await;
        sources.insert(name, (kind, disk));
    }

    // Watch every migration: progress strictly between 0 and all, while in Converting.
    let mut seen_progress: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(420);
    loop {
        let mut terminal = 0;
        for name in sources.keys() {
            let v = env.get(name).await;
            if v.phase().is_terminal() {
                terminal += 1;
            }
            let s = v.status.clone().unwrap_or_default();
            if v.phase() == Phase::Converting
                && let Some(p) = s.progress
                && p.bytes_done > 0
                && p.bytes_done < p.bytes_total
            {
                seen_progress.insert(name.clone(), (p.bytes_done, p.bytes_total));
            }
        }
        if terminal == sources.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not all migrations ended; logs in {}",
            env.scratch.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (name, (kind, disk)) in &sources {
        let v = env.get(name).await;
        assert_eq!(
            v.phase(),
            Phase::Succeeded,
            "{name} ({kind:?}):\n{}",
            serde_yaml_status(&v)
        );
        let expected = env.scratch.join(name).join("expected.raw");
        qemu_raw(&disk.vmdk, &expected);
        assert!(
            same_file(&env.volume(&dv_name(name, 0)), &expected),
            "{name} ({kind:?}): the imported volume equals qemu-img convert -O raw of the source"
        );
        assert!(
            seen_progress.contains_key(name),
            "{name} ({kind:?}): progress between 0 and 100% seen in status during Converting; seen {seen_progress:?}"
        );
    }
    println!("progress seen during Converting: {seen_progress:?}");
    assert!(
        env.staged_files().is_empty(),
        "images and records are cleaned: {:?}",
        env.staged_files()
    );
}
