//! Reading a disk off the datastore by byte ranges: the pieces of a [`DiskMap`] assembled into
//! buffers (zeros made locally, never downloaded), an optional read-rate cap, and a small block
//! cache with read-ahead for the NBD export that qemu-img reads through.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::Mutex;

use super::map::{DiskMap, Piece};
use ferry_vsphere::{self as vsphere, Session};

/// Caps the bytes read per second (a token bucket with no burst beyond one request).
#[derive(Debug)]
pub struct Throttle {
    bytes_per_second: u64,
    next: std::sync::Mutex<Instant>,
}

impl Throttle {
    pub fn new(bytes_per_second: u64) -> Self {
        Self {
            bytes_per_second: bytes_per_second.max(1),
            next: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// Books `n` bytes at `now`; how long to wait before reading them.
    fn reserve(&self, now: Instant, n: u64) -> Duration {
        let Ok(mut next) = self.next.lock() else {
            return Duration::ZERO;
        };
        let start = (*next).max(now);
        *next = start + Duration::from_secs_f64(n as f64 / self.bytes_per_second as f64);
        start.saturating_duration_since(now)
    }

    /// Waits until `n` more bytes may be read.
    pub async fn take(&self, n: u64) {
        let wait = self.reserve(Instant::now(), n);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The datastore files of one disk, read through a logged-in session.
pub struct Remote {
    session: Arc<Session>,
    datacenter: String,
    /// Datastore paths, indexed like [`DiskMap::files`].
    paths: Vec<String>,
    throttle: Option<Arc<Throttle>>,
    /// Bytes fetched from the datastore so far.
    pub fetched: AtomicU64,
}

impl Remote {
    pub fn new(
        session: Arc<Session>,
        datacenter: String,
        paths: Vec<String>,
        throttle: Option<Arc<Throttle>>,
    ) -> Self {
        Self {
            session,
            datacenter,
            paths,
            throttle,
            fetched: AtomicU64::new(0),
        }
    }

    /// `len` bytes of file `file` from `offset`, in requests of at most 16 MiB.
    pub async fn read_file(&self, file: usize, offset: u64, len: u64) -> vsphere::Result<Bytes> {
        const MAX: u64 = 16 << 20;
        let path = self
            .paths
            .get(file)
            .ok_or_else(|| vsphere::Error::Invalid(format!("no file {file}")))?;
        let mut out: Option<BytesMut> = None;
        let mut at = 0;
        while at < len {
            let n = (len - at).min(MAX);
            if let Some(t) = &self.throttle {
                t.take(n).await;
            }
            let b = self
                .session
                .read_range(path, &self.datacenter, offset + at, n)
                .await?;
            self.fetched.fetch_add(n, Ordering::Relaxed);
            if n == len {
                return Ok(b);
            }
            out.get_or_insert_with(|| BytesMut::with_capacity(len as usize))
                .extend_from_slice(&b);
            at += n;
        }
        Ok(out.map(BytesMut::freeze).unwrap_or_default())
    }

    /// `[offset, offset + len)` of the virtual disk `map`: data pieces fetched, zeros made here.
    pub async fn read(&self, map: &DiskMap, offset: u64, len: u64) -> vsphere::Result<Bytes> {
        let pieces = map.pieces_in(offset, len);
        if let [Piece::Data { file, offset, len }] = pieces.as_slice() {
            return self.read_file(*file, *offset, *len).await;
        }
        let mut buf = BytesMut::with_capacity(len as usize);
        for p in pieces {
            match p {
                Piece::Zero { len } => buf.resize(buf.len() + len as usize, 0),
                Piece::Data { file, offset, len } => {
                    buf.extend_from_slice(&self.read_file(file, offset, len).await?);
                }
            }
        }
        Ok(buf.freeze())
    }
}

type Block = Shared<BoxFuture<'static, Result<Bytes, Arc<vsphere::Error>>>>;

/// Reads `(offset, len)` of a disk from wherever it lives (a [`Remote`] and its map; a test's
/// buffer).
pub type Fetch =
    Arc<dyn Fn(u64, u64) -> BoxFuture<'static, vsphere::Result<Bytes>> + Send + Sync + 'static>;

/// A cached block: when it was last used, and whether it was read ahead and not yet asked for.
struct Entry {
    block: Block,
    used: u64,
    ahead: bool,
}

#[derive(Default)]
struct Blocks {
    map: BTreeMap<u64, Entry>,
    tick: u64,
}

/// A virtual disk read in aligned blocks, a few kept and a few read ahead: qemu-img reads
/// through NBD in requests of 64 KiB to 2 MiB, which would each be an HTTP request otherwise.
/// Memory: at most `capacity` blocks.
///
/// Read-ahead follows a stream only (as the kernel's page cache does): it starts when a block
/// is missed right after the block before it was read, and moves on when a block read ahead
/// is asked for. Any other miss reads its one block. Eviction takes the least recently used
/// block, blocks read ahead last. A sparse VMDK's reader comes back to its grain tables near
/// the file's start every 32 MiB of disk: that block is a hit, or one block, never a run of
/// them. (With read-ahead on every miss and first-in first-out eviction, an 8 GiB sparse VMDK
/// holding 4 GiB read 6.19 GiB off the datastore.)
pub struct CachedDisk {
    fetch: Fetch,
    size: u64,
    block: u64,
    capacity: usize,
    ahead: u64,
    blocks: Mutex<Blocks>,
    /// The furthest byte of the disk handed out so far (progress of a sequential reader).
    pub high_water: AtomicU64,
}

impl CachedDisk {
    /// The virtual disk `map` read through `remote`.
    pub fn new(remote: Arc<Remote>, map: DiskMap, block: u64, capacity: usize, ahead: u64) -> Self {
        let size = map.size();
        let map = Arc::new(map);
        let fetch: Fetch = Arc::new(move |off, len| {
            let (remote, map) = (remote.clone(), map.clone());
            async move { remote.read(&map, off, len).await }.boxed()
        });
        Self::with_fetch(fetch, size, block, capacity, ahead)
    }

    /// A disk of `size` bytes read through `fetch`.
    pub fn with_fetch(fetch: Fetch, size: u64, block: u64, capacity: usize, ahead: u64) -> Self {
        Self {
            fetch,
            size,
            block: block.max(4096),
            capacity: capacity.max(2).max(usize::try_from(ahead).unwrap_or(0) + 2),
            ahead,
            blocks: Mutex::new(Blocks::default()),
            high_water: AtomicU64::new(0),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    fn start(&self, i: u64) -> Block {
        let off = i * self.block;
        let len = self.block.min(self.size - off);
        let fut = (self.fetch)(off, len).map(|r| r.map_err(Arc::new)).boxed();
        let shared = fut.shared();
        // Read-ahead starts now, not when someone asks.
        tokio::spawn(shared.clone());
        shared
    }

    async fn get(&self, index: u64) -> Block {
        let mut guard = self.blocks.lock().await;
        let b = &mut *guard;
        b.tick += 1;
        let tick = b.tick;
        let last = self.size.div_ceil(self.block);
        let read_ahead = match b.map.get_mut(&index) {
            Some(e) => {
                e.used = tick;
                std::mem::replace(&mut e.ahead, false)
            }
            None => {
                let stream = index > 0 && b.map.get(&(index - 1)).is_some_and(|e| !e.ahead);
                let block = self.start(index);
                b.map.insert(
                    index,
                    Entry {
                        block,
                        used: tick,
                        ahead: false,
                    },
                );
                stream
            }
        };
        if read_ahead {
            for i in (index + 1)..(index + 1 + self.ahead).min(last) {
                match b.map.get_mut(&i) {
                    Some(e) => e.used = tick,
                    None => {
                        let block = self.start(i);
                        b.map.insert(
                            i,
                            Entry {
                                block,
                                used: tick,
                                ahead: true,
                            },
                        );
                    }
                }
            }
        }
        while b.map.len() > self.capacity {
            let victim = b
                .map
                .iter()
                .filter(|(i, _)| **i != index)
                .min_by_key(|(_, e)| (e.ahead, e.used))
                .map(|(i, _)| *i);
            match victim {
                Some(i) => {
                    b.map.remove(&i);
                }
                None => break,
            }
        }
        match b.map.get(&index) {
            Some(e) => e.block.clone(),
            None => self.start(index),
        }
    }

    /// `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes, Arc<vsphere::Error>> {
        let end = offset.saturating_add(len).min(self.size);
        let mut out = BytesMut::with_capacity((end - offset.min(end)) as usize);
        let mut at = offset;
        while at < end {
            let i = at / self.block;
            let b = self.get(i).await.await?;
            let from = (at - i * self.block) as usize;
            let to = ((end - i * self.block) as usize).min(b.len());
            if from >= to {
                break;
            }
            if from == 0 && to == b.len() && at == offset && end == i * self.block + to as u64 {
                self.high_water.fetch_max(end, Ordering::Relaxed);
                return Ok(b);
            }
            out.extend_from_slice(&b[from..to]);
            at = i * self.block + to as u64;
        }
        self.high_water.fetch_max(end, Ordering::Relaxed);
        Ok(out.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_spaces_reads_by_their_size() {
        let t = Throttle::new(1 << 20);
        let now = Instant::now();
        assert_eq!(
            t.reserve(now, 256 << 10),
            Duration::ZERO,
            "the first goes at once"
        );
        assert_eq!(t.reserve(now, 512 << 10), Duration::from_millis(250));
        assert_eq!(t.reserve(now, 1), Duration::from_millis(750));
        // Idle time is not saved up: a reader that comes back late is not let burst.
        let later = now + Duration::from_secs(10);
        assert_eq!(t.reserve(later, 1 << 20), Duration::ZERO);
        assert_eq!(t.reserve(later, 1), Duration::from_secs(1));
    }

    /// A disk whose bytes are `f(offset)`, counting the bytes fetched.
    fn disk(size: u64, block: u64) -> (CachedDisk, Arc<AtomicU64>) {
        let fetched = Arc::new(AtomicU64::new(0));
        let count = fetched.clone();
        let fetch: Fetch = Arc::new(move |off, len| {
            count.fetch_add(len, Ordering::Relaxed);
            let b: Vec<u8> = (off..off + len).map(byte).collect();
            async move { Ok(Bytes::from(b)) }.boxed()
        });
        (CachedDisk::with_fetch(fetch, size, block, 16, 6), fetched)
    }

    fn byte(at: u64) -> u8 {
        (at ^ (at >> 11)) as u8
    }

    async fn check(d: &CachedDisk, off: u64, len: u64) {
        let got = d.read(off, len).await.unwrap();
        let want: Vec<u8> = (off..off + len).map(byte).collect();
        assert_eq!(&got[..], &want[..], "bytes at {off}+{len}");
    }

    /// qemu-img's reads of a hosted sparse VMDK, scaled down (blocks of 64 KiB for 4 MiB): the
    /// grain tables at the file's start, read again every 4 blocks of data, between reads of
    /// the grains in file order. Every byte is fetched once.
    #[tokio::test]
    async fn a_sparse_vmdk_read_is_fetched_once() {
        const BLOCK: u64 = 64 << 10;
        let size = BLOCK + 64 * BLOCK;
        let (d, fetched) = disk(size, BLOCK);
        check(&d, 0, 512).await;
        for gt in 0..16 {
            check(&d, 8192 + gt * 512, 512).await;
        }
        let mut reads = 0u64;
        let mut at = BLOCK;
        while at < size {
            if reads.is_multiple_of(64) {
                check(&d, 8192 + (reads / 64 % 16) * 512, 512).await;
            }
            check(&d, at, 4096).await;
            at += 4096;
            reads += 1;
        }
        assert_eq!(
            fetched.load(Ordering::Relaxed),
            size,
            "no block fetched twice, none for nothing"
        );
    }

    #[tokio::test]
    async fn a_jump_reads_one_block_and_a_stream_reads_ahead() {
        const BLOCK: u64 = 64 << 10;
        let (d, fetched) = disk(100 * BLOCK, BLOCK);
        check(&d, 40 * BLOCK + 100, 1000).await;
        assert_eq!(
            fetched.load(Ordering::Relaxed),
            BLOCK,
            "a jump: its block only"
        );
        check(&d, 41 * BLOCK, 1000).await;
        // Block 41 follows a block read: it and 6 ahead.
        assert_eq!(fetched.load(Ordering::Relaxed), 8 * BLOCK);
        // Asking for a block read ahead moves the window by one.
        check(&d, 42 * BLOCK, 1000).await;
        assert_eq!(fetched.load(Ordering::Relaxed), 9 * BLOCK);
        // Back to a block still cached: nothing fetched.
        check(&d, 40 * BLOCK, 1000).await;
        assert_eq!(fetched.load(Ordering::Relaxed), 9 * BLOCK);
        // Across a block boundary and to the end of the disk.
        check(&d, 42 * BLOCK - 10, BLOCK + 20).await;
        check(&d, 99 * BLOCK, BLOCK).await;
        let got = d.read(99 * BLOCK + 10, 2 * BLOCK).await.unwrap();
        assert_eq!(got.len() as u64, BLOCK - 10, "cut at the end of the disk");
    }
}
