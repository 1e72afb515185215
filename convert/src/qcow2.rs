//! A qcow2 image written front to back in one pass, so that it can be streamed to S3 as it is
//! made — no local copy and no second read.
//!
//! qemu-img cannot do this: it allocates clusters as data arrives and rewrites L2 tables,
//! refcounts and the header until it exits. Here the whole layout is decided first, from where
//! the disk's data is (vSphere's allocated areas of a flat disk, `qemu-img map` of a sparse
//! VMDK), which is known before a byte of data is read:
//!
//! ```text
//! cluster 0          header (version 3, 64 KiB clusters, 16-bit refcounts)
//! L1 table           one entry per 512 MiB of the disk
//! refcount table     one entry per refcount block
//! refcount blocks    every cluster of the file counted once (refcount 1)
//! L2 tables          one per 512 MiB that holds data, in disk order
//! data clusters      the stored clusters of the disk, in disk order
//! ```
//!
//! Because data clusters are in disk order, the data part of the image is the disk's raw
//! contents in order with the clusters that are not stored left out. A cluster that holds any
//! allocated byte is stored whole; the rest read as zeros (no backing file). Metadata is made
//! one cluster at a time when it is sent, so memory stays bounded for any disk size (a fully
//! allocated 2 TiB disk has 256 MiB of L2 tables).
//!
//! The format is QEMU's `docs/interop/qcow2.txt`; the tests check images with `qemu-img check`
//! and `qemu-img compare`.

use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

const CLUSTER_BITS: u32 = 16;
/// Cluster size (qemu's default).
pub const CLUSTER: u64 = 1 << CLUSTER_BITS;
/// Entries of an L2 table (8 bytes each): one L2 table maps 512 MiB.
const L2_ENTRIES: u64 = CLUSTER / 8;
/// 16-bit refcounts (`refcount_order` 4): one block counts 32,768 clusters (2 GiB of file).
const REFCOUNT_ORDER: u32 = 4;
const RC_ENTRIES: u64 = CLUSTER / 2;
/// "Refcount is exactly one": set on every L1 and L2 entry here, as `qemu-img check` expects.
const COPIED: u64 = 1 << 63;
const HEADER_LENGTH: u32 = 104;

/// Where everything of an image goes. Pure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    size: u64,
    /// Stored guest clusters: disjoint runs `[start, end)` in order, with the number of stored
    /// clusters before each run.
    runs: Vec<(u64, u64, u64)>,
    stored: u64,
    l1_entries: u64,
    l1_clusters: u64,
    rt_clusters: u64,
    rb_clusters: u64,
    /// L1 indexes that have an L2 table, in order; their tables follow the refcount blocks.
    l2: Vec<u64>,
}

impl Layout {
    /// The layout of a disk of `size` bytes whose data lies in `areas` (`(start, len)` in bytes,
    /// any order, may overlap; clipped to the disk).
    pub fn new(size: u64, areas: &[(u64, u64)]) -> Self {
        let guest = size.div_ceil(CLUSTER);
        let mut clusters: Vec<(u64, u64)> = areas
            .iter()
            .filter(|(s, l)| *l > 0 && *s < size)
            .map(|(s, l)| {
                (
                    s / CLUSTER,
                    s.saturating_add(*l).min(size).div_ceil(CLUSTER),
                )
            })
            .collect();
        clusters.sort_unstable();
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        let mut stored = 0u64;
        for (s, e) in clusters {
            match runs.last_mut() {
                Some((_, le, _)) if s <= *le => {
                    if e > *le {
                        stored += e - *le;
                        *le = e;
                    }
                }
                _ => {
                    runs.push((s, e, stored));
                    stored += e - s;
                }
            }
        }
        let l1_entries = guest.div_ceil(L2_ENTRIES);
        let l1_clusters = (l1_entries * 8).div_ceil(CLUSTER).max(1);
        let mut l2: Vec<u64> = Vec::new();
        for (s, e, _) in &runs {
            for i in s / L2_ENTRIES..=(e - 1) / L2_ENTRIES {
                if l2.last() != Some(&i) {
                    l2.push(i);
                }
            }
        }
        // The refcount blocks count themselves and the table: grow both until they cover all.
        let fixed = 1 + l1_clusters + l2.len() as u64 + stored;
        let (mut rb, mut rt) = (1u64, 1u64);
        loop {
            let total = fixed + rb + rt;
            let need_rb = total.div_ceil(RC_ENTRIES);
            let need_rt = (need_rb * 8).div_ceil(CLUSTER).max(1);
            if (need_rb, need_rt) == (rb, rt) {
                break;
            }
            (rb, rt) = (need_rb.max(rb), need_rt.max(rt));
        }
        Self {
            size,
            runs,
            stored,
            l1_entries,
            l1_clusters,
            rt_clusters: rt,
            rb_clusters: rb,
            l2,
        }
    }

    fn rt_at(&self) -> u64 {
        1 + self.l1_clusters
    }

    fn rb_at(&self) -> u64 {
        self.rt_at() + self.rt_clusters
    }

    fn l2_at(&self) -> u64 {
        self.rb_at() + self.rb_clusters
    }

    /// The first data cluster of the file.
    fn data_at(&self) -> u64 {
        self.l2_at() + self.l2.len() as u64
    }

    fn clusters(&self) -> u64 {
        self.data_at() + self.stored
    }

    /// Bytes of the image file.
    pub fn image_size(&self) -> u64 {
        self.clusters() * CLUSTER
    }

    /// Bytes of metadata before the data clusters.
    pub fn metadata_size(&self) -> u64 {
        self.data_at() * CLUSTER
    }

    /// The virtual size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// File offset of guest cluster `c`'s data, if it is stored.
    fn data_offset(&self, c: u64) -> Option<u64> {
        let i = self.runs.partition_point(|(_, e, _)| *e <= c);
        let (s, _, before) = *self.runs.get(i).filter(|(s, _, _)| *s <= c)?;
        Some((self.data_at() + before + (c - s)) * CLUSTER)
    }

    /// Metadata cluster `k` of the file (`k` before the first data cluster).
    pub fn metadata_cluster(&self, k: u64) -> Vec<u8> {
        let mut buf = Vec::with_capacity(CLUSTER as usize);
        let put = |buf: &mut Vec<u8>, entries: &mut dyn Iterator<Item = u64>| {
            for e in entries {
                buf.put_u64(e);
            }
        };
        if k == 0 {
            buf.put_slice(b"QFI\xfb");
            buf.put_u32(3); // version
            buf.put_u64(0); // backing file offset
            buf.put_u32(0); // backing file name length
            buf.put_u32(CLUSTER_BITS);
            buf.put_u64(self.size);
            buf.put_u32(0); // no encryption
            buf.put_u32(u32::try_from(self.l1_entries).unwrap_or(u32::MAX));
            buf.put_u64(CLUSTER); // L1 table offset
            buf.put_u64(self.rt_at() * CLUSTER);
            buf.put_u32(u32::try_from(self.rt_clusters).unwrap_or(u32::MAX));
            buf.put_u32(0); // snapshots
            buf.put_u64(0); // snapshots offset
            buf.put_u64(0); // incompatible features
            buf.put_u64(0); // compatible features
            buf.put_u64(0); // autoclear features
            buf.put_u32(REFCOUNT_ORDER);
            buf.put_u32(HEADER_LENGTH);
            // Header extensions end at the first zero type: the zeros that follow.
        } else if k < self.rt_at() {
            let first = (k - 1) * L2_ENTRIES;
            let last = (first + L2_ENTRIES).min(self.l1_entries);
            let l2_at = self.l2_at();
            put(
                &mut buf,
                &mut (first..last).map(|i| match self.l2.binary_search(&i) {
                    Ok(p) => ((l2_at + p as u64) * CLUSTER) | COPIED,
                    Err(_) => 0,
                }),
            );
        } else if k < self.rb_at() {
            let first = (k - self.rt_at()) * L2_ENTRIES;
            let last = (first + L2_ENTRIES).min(self.rb_clusters);
            let rb_at = self.rb_at();
            put(&mut buf, &mut (first..last).map(|i| (rb_at + i) * CLUSTER));
        } else if k < self.l2_at() {
            let first = (k - self.rb_at()) * RC_ENTRIES;
            let counted = self.clusters().saturating_sub(first).min(RC_ENTRIES);
            for _ in 0..counted {
                buf.put_u16(1);
            }
        } else if k < self.data_at() {
            let l1 = self.l2[(k - self.l2_at()) as usize];
            let first = l1 * L2_ENTRIES;
            let last = (first + L2_ENTRIES).min(self.size.div_ceil(CLUSTER));
            put(
                &mut buf,
                &mut (first..last).map(|c| self.data_offset(c).map_or(0, |o| o | COPIED)),
            );
        }
        buf.resize(CLUSTER as usize, 0);
        buf
    }
}

/// Why an image could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("the disk's raw contents were {got} bytes, {want} expected")]
    Length { got: u64, want: u64 },
}

/// Cuts the image into parts of `part` bytes (the last may be shorter) as raw contents arrive.
/// Pure: no I/O, the caller moves the parts.
pub struct Packer<'a> {
    layout: &'a Layout,
    part: usize,
    buf: BytesMut,
    next_meta: u64,
    /// Raw bytes seen, and the run they have reached.
    raw: u64,
    run: usize,
}

impl<'a> Packer<'a> {
    /// `part`: a whole number of clusters.
    pub fn new(layout: &'a Layout, part: usize) -> Self {
        debug_assert_eq!(part as u64 % CLUSTER, 0);
        Self {
            layout,
            part,
            buf: BytesMut::with_capacity(part),
            next_meta: 0,
            raw: 0,
            run: 0,
        }
    }

    fn take(&mut self, out: &mut Vec<Bytes>) {
        while self.buf.len() >= self.part {
            let rest = self.buf.split_off(self.part);
            let full = std::mem::replace(&mut self.buf, rest);
            out.push(full.freeze());
        }
    }

    /// The next full part of metadata, until the metadata is all in parts or in the buffer.
    pub fn metadata_part(&mut self) -> Option<Bytes> {
        let mut out = Vec::new();
        while out.is_empty() && self.next_meta < self.layout.data_at() {
            self.buf
                .extend_from_slice(&self.layout.metadata_cluster(self.next_meta));
            self.next_meta += 1;
            self.take(&mut out);
        }
        out.pop()
    }

    /// The next `raw` bytes of the disk's contents; the parts they fill.
    pub fn push(&mut self, raw: &[u8]) -> Vec<Bytes> {
        debug_assert_eq!(self.next_meta, self.layout.data_at(), "metadata first");
        let mut out = Vec::new();
        let (from, to) = (self.raw, self.raw + raw.len() as u64);
        while let Some(&(s, e, _)) = self.layout.runs.get(self.run) {
            let (s, e) = (s * CLUSTER, (e * CLUSTER).min(self.layout.size));
            let (a, b) = (s.max(from), e.min(to));
            if a < b {
                self.buf
                    .extend_from_slice(&raw[(a - from) as usize..(b - from) as usize]);
                self.take(&mut out);
            }
            if e <= to {
                self.run += 1;
            } else {
                break;
            }
        }
        self.raw = to;
        out
    }

    /// The last parts, once all raw contents were pushed: the last cluster is padded to whole.
    pub fn finish(mut self) -> Result<Vec<Bytes>, EncodeError> {
        if self.raw != self.layout.size {
            return Err(EncodeError::Length {
                got: self.raw,
                want: self.layout.size,
            });
        }
        let mut out = Vec::new();
        // Parts are whole clusters, so the buffer's length tells how far the last cluster got.
        let pad = (CLUSTER as usize - self.buf.len() % CLUSTER as usize) % CLUSTER as usize;
        self.buf.resize(self.buf.len() + pad, 0);
        self.take(&mut out);
        if !self.buf.is_empty() {
            out.push(self.buf.freeze());
        }
        Ok(out)
    }
}

/// The image of `layout` in parts of `part` bytes, made from `raw` (the disk's contents in
/// order, in chunks of any size). Each raw chunk is also sent to `raw_seen` (for the raw
/// contents' hash) before it is packed. The packing runs on a task of its own, one part ahead.
pub fn encode<E>(
    layout: Layout,
    raw: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
    part: usize,
    raw_seen: mpsc::Sender<Bytes>,
) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    E: From<EncodeError> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<Bytes, E>>(1);
    tokio::spawn(async move {
        let mut raw = std::pin::pin!(raw);
        let mut packer = Packer::new(&layout, part);
        while let Some(p) = packer.metadata_part() {
            if tx.send(Ok(p)).await.is_err() {
                return;
            }
        }
        while let Some(chunk) = raw.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            if raw_seen.send(chunk.clone()).await.is_err() {
                return;
            }
            for p in packer.push(&chunk) {
                if tx.send(Ok(p)).await.is_err() {
                    return;
                }
            }
        }
        match packer.finish() {
            Ok(parts) => {
                for p in parts {
                    if tx.send(Ok(p)).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::{Seek, SeekFrom, Write};
    use std::path::Path;

    use super::*;

    const MIB: u64 = 1 << 20;

    /// Writes the image of `layout` made from the raw contents `raw(offset, len)`, pushed in
    /// chunks of `chunk` bytes; all-zero parts are left as holes so large images stay cheap.
    fn write_image(
        layout: &Layout,
        part: usize,
        chunk: u64,
        raw: impl Fn(u64, u64) -> Vec<u8>,
        path: &Path,
    ) -> u64 {
        let mut f = std::fs::File::create(path).unwrap();
        let zeros = vec![0u8; part];
        let mut at = 0u64;
        let mut put = |f: &mut std::fs::File, p: Bytes| {
            assert!(p.len() <= part);
            if p[..] == zeros[..p.len()] {
                f.seek(SeekFrom::Current(p.len() as i64)).unwrap();
            } else {
                f.write_all(&p).unwrap();
            }
            at += p.len() as u64;
        };
        let mut packer = Packer::new(layout, part);
        while let Some(p) = packer.metadata_part() {
            assert_eq!(p.len(), part, "metadata parts are whole");
            put(&mut f, p);
        }
        let mut pos = 0;
        while pos < layout.size() {
            let n = chunk.min(layout.size() - pos);
            for p in packer.push(&raw(pos, n)) {
                assert_eq!(p.len(), part, "only the last part is short");
                put(&mut f, p);
            }
            pos += n;
        }
        for p in packer.finish().unwrap() {
            put(&mut f, p);
        }
        f.set_len(at).unwrap();
        at
    }

    fn qemu_img(args: &[&str]) -> String {
        ferry_harness::qemu_img(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `qemu-img check` finds no error and no leak, and the image reads back as `expected`.
    fn assert_sound(image: &Path, expected: &[u8]) {
        let check = qemu_img(&["check", "-f", "qcow2", image.to_str().unwrap()]);
        assert!(check.contains("No errors were found"), "{check}");
        let back = image.with_extension("raw");
        qemu_img(&[
            "convert",
            "-f",
            "qcow2",
            "-O",
            "raw",
            image.to_str().unwrap(),
            back.to_str().unwrap(),
        ]);
        assert!(std::fs::read(&back).unwrap() == expected, "contents differ");
        let info = qemu_img(&["info", "--output=json", image.to_str().unwrap()]);
        assert!(
            info.contains(&format!("\"virtual-size\": {}", expected.len())),
            "{info}"
        );
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ferry-qcow2-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn a_fully_allocated_disk_is_its_metadata_then_its_bytes_in_order() {
        let l = Layout::new(1 << 30, &[(0, 1 << 30)]);
        // header, L1, refcount table, one refcount block, two L2 tables.
        assert_eq!(l.metadata_size(), 6 * CLUSTER);
        assert_eq!(l.image_size(), 6 * CLUSTER + (1 << 30));
        assert_eq!(l.data_offset(0), Some(6 * CLUSTER));
        assert_eq!(
            l.data_offset(L2_ENTRIES),
            Some((6 + L2_ENTRIES) * CLUSTER),
            "the second L2 table's first cluster follows the first's last"
        );
        let empty = Layout::new(1 << 30, &[]);
        assert_eq!(empty.image_size(), 4 * CLUSTER, "no L2 table, no data");
    }

    #[test]
    fn refcount_blocks_cover_every_cluster_of_large_images() {
        for size in [3u64 << 30, 2 << 40, 9 << 40] {
            let l = Layout::new(size, &[(0, size)]);
            assert!(l.rb_clusters * RC_ENTRIES >= l.clusters(), "{size}");
            assert!(l.rt_clusters * L2_ENTRIES >= l.rb_clusters, "{size}");
            assert!(l.l1_clusters * L2_ENTRIES >= l.l1_entries, "{size}");
            assert_eq!(l.l2.len() as u64, l.l1_entries, "{size}");
        }
    }

    #[test]
    fn areas_round_out_to_whole_clusters_and_merge() {
        let l = Layout::new(
            10 * MIB,
            &[
                (100, 1),
                (CLUSTER - 1, 2),
                (5 * MIB, MIB),
                (5 * MIB + 7, 3),
                (64 * MIB, 9),
            ],
        );
        assert_eq!(l.runs, vec![(0, 2, 0), (80, 96, 2)]);
        assert_eq!(l.stored, 18, "clusters stored");
    }

    #[test]
    fn images_pass_qemu_img_check_and_read_back_as_the_disk() {
        // (virtual size, data areas, part, chunk): unaligned ends, a partial last cluster,
        // holes, several L2 tables, chunks smaller and larger than clusters and parts.
        type Case = (u64, Vec<(u64, u64)>, usize, u64);
        let cases: Vec<Case> = vec![
            (40 * MIB, vec![(0, 40 * MIB)], MIB as usize, 3 * MIB + 17),
            (
                40 * MIB + 512,
                vec![(MIB, MIB), (7 * MIB + 3, 5), (40 * MIB, 512)],
                MIB as usize,
                4096,
            ),
            (33 * MIB, vec![], MIB as usize, 8 * MIB),
            (
                1100 * MIB,
                vec![(0, MIB), (600 * MIB, 2 * MIB), (1099 * MIB, MIB)],
                2 * MIB as usize,
                16 * MIB,
            ),
        ];
        for (i, (size, areas, part, chunk)) in cases.into_iter().enumerate() {
            let layout = Layout::new(size, &areas);
            // Data inside the areas, zeros outside: what the raw contents of such a disk are.
            let raw = |pos: u64, n: u64| -> Vec<u8> {
                let mut v = vec![0u8; n as usize];
                for (s, l) in &areas {
                    let (a, b) = ((*s).max(pos), (s + l).min(pos + n).min(size));
                    for at in a..b {
                        v[(at - pos) as usize] = (at as u8).wrapping_mul(31) | 1;
                    }
                }
                v
            };
            let path = tmp(&format!("case-{i}.qcow2"));
            let written = write_image(&layout, part, chunk, raw, &path);
            assert_eq!(written, layout.image_size(), "case {i}");
            assert_sound(&path, &raw(0, size));
            std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
        }
    }

    #[test]
    fn several_refcount_blocks_are_read_by_qemu_img() {
        // 2.1 GiB stored: more than one refcount block (2 GiB of file each). Zeros are holes.
        let size = 2150 * MIB;
        let layout = Layout::new(size, &[(0, size)]);
        assert_eq!(layout.rb_clusters, 2);
        let path = tmp("big.qcow2");
        let mark = |pos: u64, n: u64| -> Vec<u8> {
            let mut v = vec![0u8; n as usize];
            // One marked byte per 256 MiB, so the reads land in every L2 table.
            for m in (0..size).step_by(256 * MIB as usize).map(|m| m + 5) {
                if (pos..pos + n).contains(&m) {
                    v[(m - pos) as usize] = 0xab;
                }
            }
            v
        };
        write_image(&layout, 16 * MIB as usize, 16 * MIB, mark, &path);
        let check = qemu_img(&["check", "-f", "qcow2", path.to_str().unwrap()]);
        assert!(check.contains("No errors were found"), "{check}");
        // The disk as a sparse raw file: the marks, holes between them.
        let expected = path.with_extension("raw");
        let mut f = std::fs::File::create(&expected).unwrap();
        for m in (0..size).step_by(256 * MIB as usize).map(|m| m + 5) {
            f.seek(SeekFrom::Start(m)).unwrap();
            f.write_all(&[0xab]).unwrap();
        }
        f.set_len(size).unwrap();
        let cmp = qemu_img(&[
            "compare",
            "-f",
            "qcow2",
            "-F",
            "raw",
            path.to_str().unwrap(),
            expected.to_str().unwrap(),
        ]);
        assert!(cmp.contains("Images are identical"), "{cmp}");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[derive(Debug, PartialEq)]
    enum TestError {
        Source,
        Encode(String),
    }

    impl From<EncodeError> for TestError {
        fn from(e: EncodeError) -> Self {
            TestError::Encode(e.to_string())
        }
    }

    async fn encoded(
        layout: Layout,
        raw: Vec<Result<Bytes, TestError>>,
    ) -> (Vec<Result<Bytes, TestError>>, Vec<Bytes>) {
        let (tx, mut rx) = mpsc::channel(64);
        let out: Vec<_> = encode(layout, futures::stream::iter(raw), MIB as usize, tx)
            .collect()
            .await;
        let mut seen = vec![];
        while let Some(b) = rx.recv().await {
            seen.push(b);
        }
        (out, seen)
    }

    #[tokio::test]
    async fn the_encoder_passes_the_raw_contents_on_and_stops_at_the_first_failure() {
        let layout = Layout::new(2 * MIB, &[(0, 2 * MIB)]);
        let chunk = || Bytes::from(vec![7u8; MIB as usize]);
        let (out, seen) = encoded(layout.clone(), vec![Ok(chunk()), Ok(chunk())]).await;
        let out: Vec<Bytes> = out.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            out.iter().map(Bytes::len).sum::<usize>() as u64,
            layout.image_size()
        );
        assert_eq!(seen, vec![chunk(), chunk()], "every raw chunk, in order");

        let (out, _) = encoded(layout.clone(), vec![Ok(chunk()), Err(TestError::Source)]).await;
        assert_eq!(out.last(), Some(&Err(TestError::Source)));

        let (out, _) = encoded(layout, vec![Ok(chunk())]).await;
        assert_eq!(
            out.last(),
            Some(&Err(TestError::Encode(
                "the disk's raw contents were 1048576 bytes, 2097152 expected".into()
            ))),
            "a short disk is an error, not a short image"
        );
    }
}
