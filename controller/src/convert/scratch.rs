//! Scratch space: what the converter keeps on local disk, computed before it is used.
//!
//! Raw output never touches local disk (a flat extent streams straight to S3; qemu-img writes a
//! converted raw image into the NBD sink, which streams it). qcow2 output is the one local copy:
//! qemu-img writes qcow2 metadata back and forth as it goes, so the image is only final, and can
//! only be hashed and uploaded, once qemu-img is done. The bound of that copy is the qcow2 image
//! of the disk's data, which [`qcow2_bound`] computes the way qemu lays it out (64 KiB clusters,
//! 8-byte L2 entries, 16-bit refcounts), and `qemu-img measure` gives for a VMDK source.
//!
//! The controller sizes the Job's work volume with [`work_volume_bytes`] (the worst case: every
//! byte of the largest disks allocated); the converter holds its disks to that budget and fails
//! a disk that cannot fit before copying a byte of it.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// qcow2's default cluster size.
const CLUSTER: u64 = 64 << 10;
/// Room for the NBD sockets and qemu-img's own small files.
pub const BASE_BYTES: u64 = 16 << 20;
/// Disks of one VM converted at once.
pub const PARALLEL_DISKS: usize = 2;

/// Upper bound in bytes of a qcow2 image of a `virtual_size` disk whose data touches
/// `data_clusters` 64 KiB clusters. Pure.
pub fn qcow2_bound(virtual_size: u64, data_clusters: u64) -> u64 {
    let all = virtual_size.div_ceil(CLUSTER);
    let data = data_clusters.min(all);
    let l2_entries = CLUSTER / 8;
    let l2_tables = all.div_ceil(l2_entries).min(data.max(1));
    let l1 = (all.div_ceil(l2_entries) * 8).div_ceil(CLUSTER).max(1);
    let before_refcounts = 1 + l1 + l2_tables + data;
    // 16-bit refcounts: a block covers 32,768 clusters, itself included.
    let rc_blocks = (before_refcounts + 2).div_ceil(CLUSTER / 2) + 1;
    let rc_table = (rc_blocks * 8).div_ceil(CLUSTER).max(1);
    (before_refcounts + rc_blocks + rc_table) * CLUSTER + (1 << 20)
}

/// Clusters of `virtual_size` bytes, all of them allocated. Pure.
pub fn all_clusters(virtual_size: u64) -> u64 {
    virtual_size.div_ceil(CLUSTER)
}

/// The work volume a conversion Job needs: for qcow2, the images of its [`PARALLEL_DISKS`]
/// largest disks fully allocated; for raw, only [`BASE_BYTES`]. Pure.
pub fn work_volume_bytes(qcow2: bool, capacities: &[u64]) -> u64 {
    if !qcow2 {
        return BASE_BYTES;
    }
    let mut caps: Vec<u64> = capacities.to_vec();
    caps.sort_unstable_by(|a, b| b.cmp(a));
    BASE_BYTES
        + caps
            .iter()
            .take(PARALLEL_DISKS)
            .map(|c| qcow2_bound(*c, all_clusters(*c)))
            .sum::<u64>()
}

/// `1.5 GiB`, `512.0 MiB`, `4096 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// The converter's share of the work volume, handed to disks before they write.
#[derive(Clone, Debug)]
pub struct Budget {
    limit: Option<u64>,
    mib: Arc<Semaphore>,
}

/// Why a disk cannot be converted within the work volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooBig {
    pub need: u64,
    pub limit: u64,
}

impl Budget {
    /// `limit` bytes (the volume's `sizeLimit`, less [`BASE_BYTES`]); `None`: unbounded.
    pub fn new(limit: Option<u64>) -> Self {
        let mib = limit.map_or(Semaphore::MAX_PERMITS, |l| {
            usize::try_from(l.saturating_sub(BASE_BYTES) >> 20).unwrap_or(usize::MAX)
        });
        Self {
            limit,
            mib: Arc::new(Semaphore::new(mib.min(Semaphore::MAX_PERMITS))),
        }
    }

    /// Holds `need` bytes until the permit is dropped, waiting for other disks to give theirs
    /// back; a need larger than the whole budget fails at once.
    pub async fn hold(&self, need: u64) -> Result<OwnedSemaphorePermit, TooBig> {
        let limit = self.limit.unwrap_or(u64::MAX);
        let room = limit.saturating_sub(BASE_BYTES);
        if need > room {
            return Err(TooBig { need, limit });
        }
        let n = u32::try_from(need.div_ceil(1 << 20)).unwrap_or(u32::MAX);
        self.mib
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(|_| TooBig { need, limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_qcow2_bound_covers_data_and_metadata_and_no_more() {
        let gib = 1u64 << 30;
        let full = qcow2_bound(gib, all_clusters(gib));
        assert!(full > gib, "data plus metadata");
        assert!(full < gib + (4 << 20), "{full}: metadata is small");
        let half = qcow2_bound(gib, all_clusters(gib) / 2);
        assert!(
            half < full / 2 + (4 << 20),
            "{half}: sparse disks need less"
        );
        assert!(
            qcow2_bound(gib, 0) < 2 << 20,
            "an empty disk is metadata only"
        );
        // qemu-img measure -O qcow2 of a fully allocated 1 GiB raw image: 1,074,135,040 bytes.
        assert!(full >= 1_074_135_040, "{full}");
    }

    #[test]
    fn raw_needs_no_image_room_and_qcow2_the_largest_disks() {
        let gib = 1u64 << 30;
        assert_eq!(work_volume_bytes(false, &[10 * gib, 20 * gib]), BASE_BYTES);
        let q = work_volume_bytes(true, &[gib, 20 * gib, 10 * gib]);
        assert_eq!(
            q,
            BASE_BYTES
                + qcow2_bound(20 * gib, all_clusters(20 * gib))
                + qcow2_bound(10 * gib, all_clusters(10 * gib))
        );
    }

    #[tokio::test]
    async fn the_budget_refuses_what_can_never_fit_and_queues_the_rest() {
        let b = Budget::new(Some(BASE_BYTES + (100 << 20)));
        assert_eq!(
            b.hold(101 << 20).await.unwrap_err(),
            TooBig {
                need: 101 << 20,
                limit: BASE_BYTES + (100 << 20)
            }
        );
        let first = b.hold(60 << 20).await.unwrap();
        assert!(
            futures::FutureExt::now_or_never(b.hold(60 << 20)).is_none(),
            "the second waits for room"
        );
        drop(first);
        assert!(b.hold(60 << 20).await.is_ok());
        assert!(Budget::new(None).hold(1 << 40).await.is_ok());
    }

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human(4096), "4.0 KiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(12), "12 B");
    }
}
