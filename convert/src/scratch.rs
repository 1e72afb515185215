//! Scratch space: the converter keeps no disk on local disk, whatever the formats. A flat
//! extent streams straight to S3; qemu-img writes a sparse VMDK's raw contents into the NBD
//! sink, which streams them; qcow2 output is written front to back by ferry's own writer
//! ([`super::qcow2`]) as it is uploaded. The conversion Job's work volume holds the NBD
//! sockets only: [`BASE_BYTES`].

/// The work volume of a conversion Job (its `sizeLimit`): room for the NBD sockets.
pub const BASE_BYTES: u64 = crate::job_contract::WORK_BYTES;
/// Disks of one VM converted at once.
pub const PARALLEL_DISKS: usize = 2;

/// Samples the bytes held under `dir` (allocated blocks of its files, at any depth) every
/// 250 ms, keeping the most in `peak`, until aborted. A directory that does not exist holds
/// nothing. Nothing is written there, so this is a check, kept off the data path's cores: a
/// walk four times a second, of the work volume the Job mounts (or `--work-dir`).
pub async fn watch(dir: std::path::PathBuf, peak: std::sync::Arc<std::sync::atomic::AtomicU64>) {
    loop {
        peak.fetch_max(held_bytes(&dir), std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Allocated bytes of the files under `dir`.
pub fn held_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => held_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn held_bytes_count_files_at_any_depth() {
        let dir = std::env::temp_dir().join(format!("ferry-held-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("x"), vec![1u8; 8192]).unwrap();
        std::fs::write(dir.join("a/b/y"), vec![1u8; 8192]).unwrap();
        assert!(held_bytes(&dir) >= 16384, "{}", held_bytes(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(held_bytes(&dir), 0, "gone: nothing");
    }
}
