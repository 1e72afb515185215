//! Two small raw volumes for the guest conversion's tests (`convert/tests/guest.rs`, which calls
//! `ferry_convert::guest::run`, and `controller/tests/guest_job_kills.rs`, which SIGKILLs the
//! program): their verified bytes, the bytes a fake virt-v2v's "conversion" leaves (64 KiB of
//! 0x5a at 1 MiB in each), computed here rather than taken from the code under test.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Bytes of each volume.
pub const SIZE: usize = 4 << 20;
/// Where the fake conversion writes, and how much.
pub const AT: usize = 1 << 20;
pub const LEN: usize = 64 << 10;
/// What it writes there.
pub const CONVERTED: u8 = 0x5a;
/// The qemu-io command the fake runs on each overlay.
pub const WRITE: &str = "write -P 0x5a 1M 64k";

/// A program on PATH, absolute (the fakes run with virt-v2v's environment, not the test's).
pub fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{program} is not on PATH (qemu-utils)"))
}

pub fn sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn sha256_file(path: &Path) -> String {
    sha256(&std::fs::read(path).unwrap())
}

/// Disk `disk`'s verified bytes: a pattern no two disks (nor any two sectors) share.
pub fn original(disk: usize) -> Vec<u8> {
    (0..SIZE)
        .map(|o| ((o / 512) as u8).wrapping_mul(31) ^ (o as u8) ^ (disk as u8).wrapping_mul(0x11))
        .collect()
}

/// Disk `disk`'s bytes after an undisturbed conversion by the fake.
pub fn converted(disk: usize) -> Vec<u8> {
    let mut bytes = original(disk);
    bytes[AT..AT + LEN].fill(CONVERTED);
    bytes
}

/// A fresh `root` (whatever was there removed) holding `d0/disk.img` and `d1/disk.img` with
/// their verified bytes, and an empty `bin/`; the two volumes' paths.
pub fn two_volumes(root: &Path) -> Vec<PathBuf> {
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root.join("bin")).unwrap();
    (0..2)
        .map(|i| {
            let dir = root.join(format!("d{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let img = dir.join("disk.img");
            std::fs::write(&img, original(i)).unwrap();
            img
        })
        .collect()
}

/// Writes an executable script.
pub fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
