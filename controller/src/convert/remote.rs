//! Reading a disk off the datastore by byte ranges: the pieces of a [`DiskMap`] assembled into
//! buffers (zeros made locally, never downloaded), an optional read-rate cap, and a small block
//! cache with read-ahead for the NBD export that qemu-img reads through.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::Mutex;

use super::map::{DiskMap, Piece};
use crate::vsphere::{self, Session};

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

/// A virtual disk read in aligned blocks, a few kept and a few read ahead: qemu-img reads
/// through NBD in requests of 64 KiB to 2 MiB, which would each be an HTTP request otherwise.
/// Memory: at most `capacity` blocks.
pub struct CachedDisk {
    remote: Arc<Remote>,
    map: Arc<DiskMap>,
    block: u64,
    capacity: usize,
    ahead: u64,
    blocks: Mutex<(BTreeMap<u64, Block>, VecDeque<u64>)>,
    /// The furthest byte of the disk handed out so far (progress of a sequential reader).
    pub high_water: AtomicU64,
}

impl CachedDisk {
    pub fn new(remote: Arc<Remote>, map: DiskMap, block: u64, capacity: usize, ahead: u64) -> Self {
        Self {
            remote,
            map: Arc::new(map),
            block: block.max(4096),
            capacity: capacity.max(2),
            ahead,
            blocks: Mutex::new((BTreeMap::new(), VecDeque::new())),
            high_water: AtomicU64::new(0),
        }
    }

    pub fn size(&self) -> u64 {
        self.map.size()
    }

    async fn get(&self, index: u64) -> Block {
        let mut guard = self.blocks.lock().await;
        let (blocks, order) = &mut *guard;
        let last = self.map.size().div_ceil(self.block);
        for i in index..(index + 1 + self.ahead).min(last) {
            if blocks.contains_key(&i) {
                continue;
            }
            let (remote, map) = (self.remote.clone(), self.map.clone());
            let (off, len) = (
                i * self.block,
                self.block.min(self.map.size() - i * self.block),
            );
            let fut: BoxFuture<'static, Result<Bytes, Arc<vsphere::Error>>> =
                async move { remote.read(&map, off, len).await.map_err(Arc::new) }.boxed();
            let shared = fut.shared();
            // Read-ahead starts now, not when someone asks.
            tokio::spawn(shared.clone());
            blocks.insert(i, shared);
            order.push_back(i);
            while order.len() > self.capacity {
                if let Some(old) = order.pop_front() {
                    blocks.remove(&old);
                }
            }
        }
        match blocks.get(&index) {
            Some(b) => b.clone(),
            None => {
                // Evicted by its own read-ahead (capacity < ahead): read it alone.
                let (remote, map) = (self.remote.clone(), self.map.clone());
                let (off, len) = (
                    index * self.block,
                    self.block.min(self.map.size() - index * self.block),
                );
                async move { remote.read(&map, off, len).await.map_err(Arc::new) }
                    .boxed()
                    .shared()
            }
        }
    }

    /// `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes, Arc<vsphere::Error>> {
        let end = offset.saturating_add(len).min(self.map.size());
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
}
