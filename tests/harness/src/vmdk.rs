//! Real disks for vcsim VMs: deterministic raw content, turned into a VMDK by `qemu-img`.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, InventoryVm, Result};

/// Runs `qemu-img ARGS`: its standard output, or an error carrying what it printed.
pub fn qemu_img<S: AsRef<OsStr>>(args: &[S]) -> Result<String> {
    let out = Command::new("qemu-img")
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            what: "qemu-img (install qemu-utils)".into(),
            source,
        })?;
    if !out.status.success() {
        let words: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        return Err(Error::Command {
            what: format!("qemu-img {}", words.join(" ")),
            detail: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

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
    qemu_img(&[
        OsStr::new("convert"),
        OsStr::new("-f"),
        OsStr::new("raw"),
        OsStr::new("-O"),
        OsStr::new("vmdk"),
        raw.as_os_str(),
        disk.local_path.as_os_str(),
    ])?;
    Ok(RealDisk {
        raw,
        vmdk: disk.local_path.clone(),
        size_bytes: size_mib * 1024 * 1024,
    })
}

/// How a disk is stored on the datastore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskKind {
    /// ESXi's layout: a text descriptor and a `-flat.vmdk` extent (zero MiBs left as holes, as a
    /// thin disk on VMFS has them).
    Flat,
    /// A hosted sparse VMDK (`qemu-img convert -O vmdk`, monolithicSparse).
    Sparse,
    /// A stream-optimized VMDK (compressed grains, as in an OVA).
    StreamOptimized,
}

/// Like [`put_vmdk`], in the layout `kind`, with every `zero_every`-th MiB zero (2: half the
/// disk is zeros). The raw image beside it (`raw`) is what the disk holds.
pub fn put_disk(
    vm: &InventoryVm,
    scratch: &Path,
    size_mib: u64,
    seed: u64,
    kind: DiskKind,
    zero_every: u64,
) -> Result<RealDisk> {
    let disk = vm.disks.first().ok_or_else(|| Error::Command {
        what: "put_disk".into(),
        detail: format!("VM {} has no disk in the inventory", vm.name),
    })?;
    std::fs::create_dir_all(scratch).map_err(|source| Error::Read {
        path: scratch.to_owned(),
        source,
    })?;
    let raw = scratch.join(format!("{}.raw", vm.name));
    write_pattern_every(&raw, size_mib, seed, zero_every)?;
    let descriptor = &disk.local_path;
    let flat = descriptor.with_file_name(format!(
        "{}-flat.vmdk",
        descriptor
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("disk")
    ));
    let _ = std::fs::remove_file(&flat);
    match kind {
        DiskKind::Flat => {
            write_pattern_every(&flat, size_mib, seed, zero_every)?;
            let text = format!(
                "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"vmfs\"\n\n\
                 # Extent description\nRW {} VMFS \"{}\"\n\n# The Disk Data Base\n#DDB\nddb.adapterType = \"lsilogic\"\n",
                size_mib * 2048,
                flat.file_name()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
            );
            std::fs::write(descriptor, text).map_err(|source| Error::Read {
                path: descriptor.clone(),
                source,
            })?;
        }
        DiskKind::Sparse | DiskKind::StreamOptimized => {
            let mut args: Vec<&OsStr> = ["convert", "-f", "raw", "-O", "vmdk"]
                .map(OsStr::new)
                .to_vec();
            if kind == DiskKind::StreamOptimized {
                args.extend(["-o", "subformat=streamOptimized"].map(OsStr::new));
            }
            args.extend([raw.as_os_str(), descriptor.as_os_str()]);
            qemu_img(&args)?;
        }
    }
    Ok(RealDisk {
        raw,
        vmdk: descriptor.clone(),
        size_bytes: size_mib * 1024 * 1024,
    })
}

/// A xorshift stream: cheap, deterministic, and never long runs of zeros (which VMDK would
/// store as sparse and so hide copy bugs). Every 4th MiB is left zero on purpose to exercise
/// sparse handling too.
fn write_pattern(path: &Path, size_mib: u64, seed: u64) -> Result<()> {
    write_pattern_every(path, size_mib, seed, 4)
}

/// The pattern with every `zero_every`-th MiB zero, left as a hole in the file.
fn write_pattern_every(path: &Path, size_mib: u64, seed: u64, zero_every: u64) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let map = |source| Error::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::create(path).map_err(map)?;
    file.set_len(size_mib * 1024 * 1024).map_err(map)?;
    let mut f = std::io::BufWriter::new(file);
    let mut x = seed | 1;
    let mut buf = vec![0u8; 1024 * 1024];
    let every = zero_every.max(1);
    for mib in 0..size_mib {
        if every > 1 && mib % every == every - 1 {
            f.seek(SeekFrom::Start((mib + 1) * 1024 * 1024))
                .map_err(map)?;
            continue;
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
