//! A warm migration's rounds against the lab: snapshots of a running VM with changed block
//! tracking (the lab's, in front of vcsim: `tests/lab/snapshots.go`, `cbt.go`), a guest writing
//! to its disk (`ferry-lab guest-write`), and `ferry-controller delta` copying only the areas
//! that changed into a volume, which then holds the disk byte for byte as the round saw it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_convert::delta::{self, DeltaArgs, DeltaDisk};
use ferry_harness::{InventoryVm, lab};
use ferry_vsphere::{Endpoint, Session, TlsPolicy};

const MIB: u64 = 1 << 20;
const DISK: u64 = 16 * MIB;

fn endpoint() -> Endpoint {
    let vc = &lab().info.vcenter;
    ferry_vsphere::tls::install_default_provider();
    Endpoint {
        url: vc.url.clone(),
        username: vc.username.clone(),
        password: vc.password.clone().into(),
        tls: TlsPolicy::Insecure,
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = ferry_harness::repo_root()
        .join("target/test-scratch")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Puts an ESXi-style disk behind the VM: a descriptor over a 16 MiB flat extent of random
/// bytes. The flat file's local path.
fn put_flat_disk(vm: &InventoryVm) -> PathBuf {
    let descriptor = &vm.disks[0].local_path;
    let flat = descriptor.with_file_name("disk1-flat.vmdk");
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<u8> = (0..DISK / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    std::fs::write(&flat, &data).unwrap();
    std::fs::write(
        descriptor,
        format!(
            "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"vmfs\"\n\n\
             # Extent description\nRW {} VMFS \"disk1-flat.vmdk\"\n\n# The Disk Data Base\n#DDB\nddb.adapterType = \"lsilogic\"\n",
            DISK / 512
        ),
    )
    .unwrap();
    flat
}

/// `ferry-lab guest-write`: the running guest rewrites `percent` of its disk's 1 MiB blocks
/// (seeded); the blocks written.
fn guest_write(vm: &InventoryVm, percent: f64, seed: u64) -> Vec<u64> {
    let out = Command::new(ferry_harness::repo_root().join("target/lab/bin/ferry-lab"))
        .arg("guest-write")
        .arg("--state-dir")
        .arg(&lab().info.state_dir)
        .args(["--vm", &vm.name, "--percent", &percent.to_string()])
        .args(["--seed", &seed.to_string()])
        .output()
        .expect("ferry-lab guest-write");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "guest-write: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("written="))
        .expect("guest-write names the blocks it wrote");
    written
        .split(',')
        .filter(|b| !b.is_empty())
        .map(|b| b.parse().unwrap())
        .collect()
}

/// A delta round of disk 0 into `volume`.
async fn round(
    vm: &InventoryVm,
    snapshot: Option<&str>,
    change_id: &str,
    datastore_path: &str,
    volume: &Path,
) -> Result<delta::DeltaReport, ferry_convert::Error> {
    let disk = DeltaDisk::parse(&format!(
        "0:{}:{}:{change_id}:{datastore_path}",
        vm.disks[0].key,
        volume.display()
    ))
    .unwrap();
    let args = DeltaArgs {
        vm_moref: vm.moref.clone(),
        snapshot: snapshot.map(str::to_owned),
        datacenter: None,
        disks: vec![disk],
        max_read_rate: None,
        result_file: None,
    };
    delta::run(&args, &endpoint())
        .await
        .map(|mut r| r.pop().unwrap())
}

/// The local flat extent of a descriptor beside the VM's disk (`x.vmdk` → `x-flat.vmdk`).
fn flat_of(vm: &InventoryVm, descriptor: &str) -> PathBuf {
    let name = descriptor.rsplit('/').next().unwrap();
    let flat = format!("{}-flat.vmdk", name.strip_suffix(".vmdk").unwrap());
    vm.disks[0].local_path.with_file_name(flat)
}

fn same(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn rounds_copy_only_what_the_guest_changed_and_the_volume_ends_as_the_disk() {
    let vm = lab().claim_vm().unwrap();
    let live = put_flat_disk(&vm);
    let s = Session::connect(&endpoint()).await.unwrap();
    s.power_on(&vm.moref).await.unwrap();
    let dir = scratch("delta-rounds");
    let volume = dir.join("disk.img");
    std::fs::File::create(&volume)
        .unwrap()
        .set_len(DISK)
        .unwrap();

    // Round 1: a snapshot of the running VM, every allocated area copied.
    let s1 = s
        .create_snapshot(&vm.moref, "ferry-test-round-1", "ferry delta_lab")
        .await
        .unwrap();
    let d1 = s.snapshot_disks(&s1).await.unwrap().remove(0);
    let id1 = d1.change_id.clone().expect("a change id at the snapshot");
    assert_ne!(d1.datastore_path, vm.disks[0].datastore_path);
    // The guest writes on; the snapshot keeps the disk as it was.
    let after_s1 = guest_write(&vm, 20.0, 3);
    assert!(!after_s1.is_empty());
    let full = round(&vm, Some(&s1), "*", &d1.datastore_path, &volume)
        .await
        .unwrap();
    assert_eq!(full.bytes, DISK, "every block of a random disk holds data");
    let frozen1 = flat_of(&vm, &d1.datastore_path);
    assert!(
        same(&volume, &frozen1),
        "round 1 holds the disk as snapshot 1 froze it"
    );
    assert!(!same(&volume, &live), "the guest wrote after snapshot 1");
    s.remove_snapshot(&s1).await.unwrap();
    s.remove_snapshot(&s1).await.unwrap();
    assert!(s.snapshots(&vm.moref).await.unwrap().is_empty());
    assert!(
        !frozen1.exists(),
        "removing the snapshot removes its frozen disk"
    );

    // Round 2: only what changed since round 1's change id.
    let before_s2 = guest_write(&vm, 20.0, 4);
    let s2 = s
        .create_snapshot(&vm.moref, "ferry-test-round-2", "ferry delta_lab")
        .await
        .unwrap();
    let d2 = s.snapshot_disks(&s2).await.unwrap().remove(0);
    let id2 = d2.change_id.clone().unwrap();
    assert_ne!(id1, id2);
    let late = guest_write(&vm, 20.0, 5);
    let delta2 = round(&vm, Some(&s2), &id1, &d2.datastore_path, &volume)
        .await
        .unwrap();
    let mut changed: Vec<u64> = after_s1.iter().chain(&before_s2).copied().collect();
    changed.sort_unstable();
    changed.dedup();
    assert_eq!(
        delta2.bytes,
        changed.len() as u64 * MIB,
        "round 2 copies the blocks written between the snapshots, no more"
    );
    let frozen2 = flat_of(&vm, &d2.datastore_path);
    assert!(
        same(&volume, &frozen2),
        "after round 2 the volume is snapshot 2's disk"
    );
    s.remove_snapshot(&s2).await.unwrap();

    // Cutover: the VM off, the last delta from the VM's own disk, no snapshot.
    s.power_off(&vm.moref).await.unwrap();
    let last = round(&vm, None, &id2, &vm.disks[0].datastore_path, &volume)
        .await
        .unwrap();
    assert!(!late.is_empty());
    assert_eq!(
        last.bytes,
        late.len() as u64 * MIB,
        "the cutover copies what changed since round 2"
    );
    assert!(
        same(&volume, &live),
        "after cutover the volume is the source's final disk"
    );

    // A change id the source does not know (tracking reset) is refused, never a partial copy.
    let bogus = "52 00 00 00 00 00 00 00-00 00 00 00 00 00 00 00/9";
    let err = round(&vm, None, bogus, &vm.disks[0].datastore_path, &volume)
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(same(&volume, &live), "a refused round writes nothing");
    let _ = s.logout().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
