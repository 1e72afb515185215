//! Real disks for vcsim VMs: deterministic raw content, turned into a VMDK by `qemu-img`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, InventoryVm, Result};

/// A real disk placed behind a vcsim VM: the raw image it was made from, for comparisons.
#[derive(Debug, Clone)]
pub struct RealDisk {
    pub raw: PathBuf,
    pub vmdk: PathBuf,
    pub size_bytes: u64,
}

/// Writes `size_mib` MiB of non-zero, seed-determined content to a raw file in `scratch`, and
/// converts it with `qemu-img` into the VMDK file backing `vm`'s first disk in the datastore.
pub fn put_vmdk(vm: &InventoryVm, scratch: &Path, size_mib: u64, seed: u64) -> Result<RealDisk> {
    let disk = vm.disks.first().ok_or_else(|| Error::Command {
        what: "put_vmdk".into(),
        detail: format!("VM {} has no disk in the inventory", vm.name),
    })?;
    std::fs::create_dir_all(scratch).map_err(|source| Error::Read {
        path: scratch.to_owned(),
        source,
    })?;
    let raw = scratch.join(format!("{}.raw", vm.name));
    write_pattern(&raw, size_mib, seed)?;
    let out = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "vmdk"])
        .arg(&raw)
        .arg(&disk.local_path)
        .output()
        .map_err(|source| Error::Spawn {
            what: "qemu-img (install qemu-utils)".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            what: "qemu-img convert".into(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(RealDisk {
        raw,
        vmdk: disk.local_path.clone(),
        size_bytes: size_mib * 1024 * 1024,
    })
}

/// A xorshift stream: cheap, deterministic, and never long runs of zeros (which VMDK would
/// store as sparse and so hide copy bugs). Every 4th MiB is left zero on purpose to exercise
/// sparse handling too.
fn write_pattern(path: &Path, size_mib: u64, seed: u64) -> Result<()> {
    let map = |source| Error::Read {
        path: path.to_owned(),
        source,
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(map)?);
    let mut x = seed | 1;
    let mut buf = vec![0u8; 1024 * 1024];
    for mib in 0..size_mib {
        if mib % 4 == 3 {
            buf.fill(0);
        } else {
            for chunk in buf.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
        }
        f.write_all(&buf).map_err(map)?;
    }
    f.flush().map_err(map)
}
