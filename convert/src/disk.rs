//! One disk: what it is on the datastore, which data path it takes, and its record.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tokio::net::UnixListener;

use super::args::{ConvertArgs, DiskFormat, DiskSpec};
use super::error::Error;
use super::map::DiskMap;
use super::remote::{CachedDisk, Remote, Throttle};
use super::report::{DataPath, DiskReport, DiskStatus};
use super::source::{Source, ensure_off};
use super::upload::{self, Progress, RecordWriter, Uploaded};
use super::{nbd, qcow2, qemu, vmdk};
use ferry_staging::{DiskRecord, RecordState, Staging};
use ferry_vsphere::{self as vsphere, Allocation, DatastorePath};

/// User metadata of a staged disk image (fixed when its upload starts; the checksum is in its
/// record).
pub const META_SOURCE_PATH: &str = "source-path";
pub const META_FORMAT: &str = "format";
pub const META_VIRTUAL_SIZE: &str = "virtual-size";

/// What a disk is on the datastore.
pub(super) enum Input {
    /// Flat extents (ESXi's `-flat.vmdk`), read directly.
    Flat(DiskMap),
    /// One sparse VMDK file (hosted sparse, or stream-optimized as in an OVA), read by qemu-img.
    Sparse {
        path: String,
        len: u64,
        compressed: bool,
    },
}

/// What every disk of a run shares.
pub(super) struct Ctx<'a> {
    pub args: &'a ConvertArgs,
    pub src: Arc<Source>,
    pub staging: Staging,
    pub throttle: Option<Arc<Throttle>>,
}

/// Block size, blocks kept and blocks read ahead by the NBD source.
const BLOCK: u64 = 4 << 20;
const BLOCKS_KEPT: usize = 16;
const BLOCKS_AHEAD: u64 = 6;
/// Block size of the second source that `qemu-img map` reads a sparse VMDK's grain tables from.
const TABLE_BLOCK: u64 = 64 << 10;

impl Ctx<'_> {
    /// Converts one disk, keeping its record; on failure the record says why.
    pub async fn convert(
        &self,
        index: usize,
        disk: &DiskSpec,
        previous: Option<DiskRecord>,
    ) -> Result<DiskReport, Error> {
        let format = self.args.format;
        let name = format!("disk {index} ({})", disk.datastore_path);
        // A source someone powered on again is refused before anything is read or recorded.
        ensure_off(&self.src, &name).await?;
        let writer = Arc::new(RecordWriter {
            staging: self.staging.clone(),
            key: disk.key.clone(),
            base: DiskRecord {
                job_uid: self.args.job_uid.clone(),
                ..DiskRecord::converting(&disk.datastore_path, format)
            },
            progress: Progress::new(0),
        });
        // A run killed mid-upload left its parts behind: they go before anything else.
        if let Some(id) = previous.and_then(|r| r.upload_id) {
            self.abort_earlier(disk, &id).await?;
        }
        let ticker = tokio::spawn(writer.clone().run());
        let started = Instant::now();
        let outcome = match self.convert_disk(index, disk, &writer).await {
            // Still off after the read: the bytes are the disk's, not a moving target's.
            Ok(done) => ensure_off(&self.src, &name).await.map(|()| done),
            Err(e) => Err(e),
        };
        ticker.abort();
        let _ = ticker.await;
        match outcome {
            Ok(done) => {
                self.record_staged(index, disk, &writer, done, started)
                    .await
            }
            Err(e) => {
                self.record_failure(disk, &writer, &e).await;
                Err(e)
            }
        }
    }

    /// Aborts the multipart upload `id` an earlier run of the disk left behind.
    async fn abort_earlier(&self, disk: &DiskSpec, id: &str) -> Result<(), Error> {
        tracing::info!(key = %disk.key, upload = %id, "aborting the upload of an earlier run");
        self.staging
            .abort_multipart(&disk.key, id)
            .await
            .map_err(|source| Error::Staging {
                context: format!("{}: aborting an earlier upload", disk.key),
                source,
            })
    }

    /// Records the disk `Staged` with what was `done`, and reports it.
    async fn record_staged(
        &self,
        index: usize,
        disk: &DiskSpec,
        writer: &RecordWriter,
        done: Converted,
        started: Instant,
    ) -> Result<DiskReport, Error> {
        let progress = &writer.progress;
        let Converted {
            up,
            raw_sha256,
            path,
            virtual_size,
            downloaded,
            allocation_known,
        } = done;
        let mut r = writer.base.clone();
        r.state = RecordState::Staged;
        r.stage = "staged".into();
        r.bytes_total = progress.total.load(Ordering::Relaxed);
        r.bytes_done = r.bytes_total;
        r.sha256 = Some(up.sha256.clone());
        r.size = Some(up.size);
        r.virtual_size = Some(virtual_size);
        r.raw_sha256 = raw_sha256;
        r.updated_unix_ms = now_ms();
        self.staging
            .put_record(&disk.key, &r)
            .await
            .map_err(|source| Error::Staging {
                context: format!("{}: recording the staged image", disk.key),
                source,
            })?;
        Ok(DiskReport {
            disk: index,
            datastore_path: disk.datastore_path.clone(),
            key: disk.key.clone(),
            status: DiskStatus::Converted,
            format: self.args.format,
            path,
            size: up.size,
            raw_sha256: r.raw_contents_sha256(),
            sha256: up.sha256,
            virtual_size: Some(virtual_size),
            downloaded,
            sent: progress.sent.load(Ordering::Relaxed),
            allocation_known,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Records the disk `Failed` with error `e`; a record that cannot be written is only
    /// logged: the error is what the run reports.
    async fn record_failure(&self, disk: &DiskSpec, writer: &RecordWriter, e: &Error) {
        let mut r = writer.base.clone();
        r.state = RecordState::Failed;
        r.stage = "failed".into();
        r.error = Some(e.to_string());
        r.reason = Some(e.reason().to_owned());
        r.updated_unix_ms = now_ms();
        if let Err(w) = self.staging.put_record(&disk.key, &r).await {
            tracing::warn!(key = %disk.key, error = %w, "failure not recorded");
        }
    }

    fn vs(
        &self,
        disk: &DiskSpec,
        index: usize,
    ) -> impl Fn(vsphere::Error) -> Error + Clone + Send + Sync + 'static {
        let name = format!("disk {index} ({})", disk.datastore_path);
        move |source| Error::Vsphere {
            disk: name.clone(),
            source,
        }
    }

    /// Reads the `.vmdk` the disk names and tells what it is.
    async fn probe(&self, index: usize, disk: &DiskSpec) -> Result<Input, Error> {
        probe(&self.src, index, &disk.datastore_path).await
    }

    /// The flat map narrowed to what vSphere says is allocated, when it can say.
    async fn allocated(&self, disk: &DiskSpec, map: DiskMap) -> Result<(DiskMap, bool), Error> {
        let Some(vm) = &self.src.vm else {
            return Ok((map, false));
        };
        // Reading a snapshot, its disks name the frozen files; else the VM's own.
        let (snapshot, key) = match &self.src.snapshot {
            Some((snap, disks)) => (
                Some(snap.as_str()),
                disks
                    .iter()
                    .find(|d| d.datastore_path == disk.datastore_path)
                    .map(|d| d.key),
            ),
            None => (
                None,
                vm.disks
                    .iter()
                    .find(|d| d.datastore_path == disk.datastore_path)
                    .map(|d| d.key),
            ),
        };
        let Some(key) = key else {
            return Ok((map, false));
        };
        let size = map.size();
        match self
            .src
            .session
            .allocated_areas(&vm.moref, snapshot, key, size)
            .await
            .map_err(|source| Error::Vsphere {
                disk: disk.datastore_path.clone(),
                source,
            })? {
            Allocation::Known(areas) => {
                let narrowed = map.restricted_to(&areas);
                tracing::info!(
                    disk = %disk.datastore_path,
                    allocated = narrowed.data_bytes(),
                    size,
                    "allocated areas from QueryChangedDiskAreas"
                );
                Ok((narrowed, true))
            }
            Allocation::Unknown(why) => {
                tracing::info!(disk = %disk.datastore_path, %why, "allocation unknown: reading every byte");
                Ok((map, false))
            }
        }
    }

    /// Uploads `parts` (`part` bytes each but the last) as the disk's image of `size` bytes,
    /// its metadata naming the source, the format and the `virtual_size`.
    async fn upload(
        &self,
        disk: &DiskSpec,
        writer: &RecordWriter,
        virtual_size: u64,
        size: u64,
        part: u64,
        parts: impl futures::Stream<Item = Result<Bytes, Error>>,
    ) -> Result<Uploaded, Error> {
        let metadata: BTreeMap<String, String> = [
            (META_SOURCE_PATH, disk.datastore_path.clone()),
            (META_FORMAT, self.args.format.as_str().to_owned()),
            (META_VIRTUAL_SIZE, virtual_size.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        upload::upload(
            &self.staging,
            &disk.key,
            &metadata,
            size,
            part,
            parts,
            writer,
        )
        .await
    }

    fn remote(&self, paths: Vec<String>) -> Arc<Remote> {
        Arc::new(Remote::new(
            self.src.session.clone(),
            self.src.datacenter.clone(),
            paths,
            self.throttle.clone(),
        ))
    }

    /// Reads the disk, converts it as the format asks and uploads it, on the data path its
    /// input takes (see the table in the crate's documentation).
    async fn convert_disk(
        &self,
        index: usize,
        disk: &DiskSpec,
        writer: &RecordWriter,
    ) -> Result<Converted, Error> {
        match self.probe(index, disk).await? {
            Input::Flat(map) => self.convert_flat(index, disk, writer, map).await,
            Input::Sparse {
                path,
                len,
                compressed,
            } => {
                tracing::info!(disk = %disk.datastore_path, len, compressed, "sparse VMDK: qemu-img reads it over NBD");
                self.convert_sparse(disk, writer, path, len).await
            }
        }
    }

    /// Flat extents: ranges fetched in parallel (only the allocated areas, when vSphere says
    /// which) straight into the upload, or into ferry's qcow2 writer first.
    async fn convert_flat(
        &self,
        index: usize,
        disk: &DiskSpec,
        writer: &RecordWriter,
        map: DiskMap,
    ) -> Result<Converted, Error> {
        let vs = self.vs(disk, index);
        let progress = &writer.progress;
        let ds =
            DatastorePath::parse(&disk.datastore_path).map_err(|e| Error::Usage(e.to_string()))?;
        let (map, known) = self.allocated(disk, map).await?;
        let size = map.size();
        let paths = map
            .files
            .iter()
            .map(|f| ds.sibling(f).to_string())
            .collect();
        let remote = self.remote(paths);
        let layout = match self.args.format {
            DiskFormat::Raw => None,
            DiskFormat::Qcow2 => Some(qcow2::Layout::new(size, &map.data_areas())),
        };
        let image = layout.as_ref().map_or(size, qcow2::Layout::image_size);
        progress.total.store(image, Ordering::Relaxed);
        let data = map.data_bytes().max(1);
        let raw_part = upload::part_size(size);
        let raw = flat_parts(remote.clone(), Arc::new(map), raw_part, vs);
        let sampler = sample_reads(remote.clone(), progress.clone(), image, data);
        let result = match layout {
            None => self
                .upload(disk, writer, size, size, raw_part, raw)
                .await
                .map(|up| (up, None, DataPath::FlatStream)),
            Some(layout) => self
                .upload_qcow2(disk, writer, layout, raw)
                .await
                .map(|(up, h)| (up, Some(h), DataPath::FlatQcow2)),
        };
        sampler.abort();
        let (up, raw_sha256, path) = result?;
        Ok(Converted {
            up,
            raw_sha256,
            path,
            virtual_size: size,
            downloaded: remote.fetched.load(Ordering::Relaxed),
            allocation_known: known,
        })
    }

    /// A sparse VMDK file of `len` bytes at `path`: qemu-img reads it over NBD and writes its
    /// raw contents into the NBD sink, straight into the upload or into ferry's qcow2 writer.
    async fn convert_sparse(
        &self,
        disk: &DiskSpec,
        writer: &RecordWriter,
        path: String,
        len: u64,
    ) -> Result<Converted, Error> {
        let progress = &writer.progress;
        let remote = self.remote(vec![path]);
        let file = whole_file(len)?;
        let cached = Arc::new(CachedDisk::new(
            remote.clone(),
            file.clone(),
            BLOCK,
            BLOCKS_KEPT,
            BLOCKS_AHEAD,
        ));
        let mut sockets = Sockets::new()?;
        let src_uri = sockets.serve_source("src", cached)?;
        let qemu_img = &self.args.qemu_img;
        let vsize = qemu::virtual_size(qemu_img, "vmdk", &src_uri).await?;
        progress.set_stage("converting");
        let part = upload::part_size(vsize);
        let (up, raw_sha256, path) = match self.args.format {
            DiskFormat::Raw => {
                progress.total.store(vsize, Ordering::Relaxed);
                let raw = qemu_raw(&sockets, qemu_img.clone(), src_uri, vsize, part)?;
                let up = self.upload(disk, writer, vsize, vsize, part, raw).await?;
                (up, None, DataPath::QemuSink)
            }
            DiskFormat::Qcow2 => {
                let layout =
                    sparse_layout(&mut sockets, remote.clone(), file, qemu_img, vsize).await?;
                progress.total.store(layout.image_size(), Ordering::Relaxed);
                let raw = qemu_raw(&sockets, qemu_img.clone(), src_uri, vsize, part)?;
                let (up, h) = self.upload_qcow2(disk, writer, layout, raw).await?;
                (up, Some(h), DataPath::QemuSinkQcow2)
            }
        };
        Ok(Converted {
            up,
            raw_sha256,
            path,
            virtual_size: vsize,
            downloaded: remote.fetched.load(Ordering::Relaxed),
            allocation_known: true,
        })
    }

    /// Uploads the qcow2 image of `layout` made on the way from `raw` (the disk's contents in
    /// order): metadata first, then the stored clusters, one pass and no local copy. The raw
    /// contents are hashed as they go by (the verification Job compares the imported volume
    /// with that hash). Returns the upload and the raw contents' SHA-256.
    async fn upload_qcow2(
        &self,
        disk: &DiskSpec,
        writer: &RecordWriter,
        layout: qcow2::Layout,
        raw: impl futures::Stream<Item = Result<Bytes, Error>> + Send + 'static,
    ) -> Result<(Uploaded, String), Error> {
        let (vsize, size) = (layout.size(), layout.image_size());
        let part = upload::part_size(size);
        let (seen_tx, mut seen_rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let hasher = tokio::task::spawn_blocking(move || {
            let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
            let mut seen = 0u64;
            while let Some(b) = seen_rx.blocking_recv() {
                hash.update(&b);
                seen += b.len() as u64;
            }
            (ferry_staging::hex(hash.finish().as_ref()), seen)
        });
        let usize_part = usize::try_from(part).map_err(|e| Error::Upload(e.to_string()))?;
        let parts = qcow2::encode(layout, raw, usize_part, seen_tx);
        let up = self.upload(disk, writer, vsize, size, part, parts).await;
        let (raw_sha256, seen) = hasher
            .await
            .map_err(|e| Error::Upload(format!("hashing: {e}")))?;
        let up = up?;
        if seen != vsize {
            return Err(Error::Upload(format!(
                "{}: raw contents of {seen} bytes hashed, {vsize} expected",
                disk.key
            )));
        }
        Ok((up, raw_sha256))
    }
}

/// What a disk's data path did.
struct Converted {
    up: Uploaded,
    /// The SHA-256 of a qcow2 image's raw contents.
    raw_sha256: Option<String>,
    path: DataPath,
    virtual_size: u64,
    /// Bytes read from the datastore.
    downloaded: u64,
    allocation_known: bool,
}

/// Parts are hashed whole and in order, so their count moves in steps; the bytes read so far
/// (the `data`, stretched over the `image`) move smoothly: `progress.done` follows them until
/// the task is aborted.
fn sample_reads(
    remote: Arc<Remote>,
    progress: Arc<Progress>,
    image: u64,
    data: u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let read = remote.fetched.load(Ordering::Relaxed);
            let est = (u128::from(read) * u128::from(image) / u128::from(data)) as u64;
            progress.done.fetch_max(est.min(image), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// A file of `len` bytes as a map of one flat extent. Its last sector may be partial: the map
/// is cut to the file's length.
fn whole_file(len: u64) -> Result<DiskMap, Error> {
    let file = DiskMap::from_extents(
        &[vmdk::Extent {
            file: String::new(),
            kind: "FLAT".into(),
            sectors: len.div_ceil(512),
            offset: 0,
        }],
        &[],
    )
    .map_err(|e| Error::Usage(e.to_string()))?;
    Ok(file.restricted_to(&[(0, len)]))
}

/// The qcow2 layout of a sparse VMDK (`file`, read through `remote`) of virtual size `vsize`,
/// from qemu-img's map of it, which reads its grain tables: through small blocks and no
/// read-ahead, so that tables spread through a stream-optimized file do not pull in the grains
/// around them.
async fn sparse_layout(
    sockets: &mut Sockets,
    remote: Arc<Remote>,
    file: DiskMap,
    qemu_img: &std::path::Path,
    vsize: u64,
) -> Result<qcow2::Layout, Error> {
    let tables = Arc::new(CachedDisk::new(remote, file, TABLE_BLOCK, BLOCKS_KEPT, 0));
    let map_uri = sockets.serve_source("map", tables)?;
    let areas = qemu::data_areas(qemu_img, "vmdk", &map_uri).await?;
    Ok(qcow2::Layout::new(vsize, &areas))
}

/// Reads the `.vmdk` at `datastore_path` (disk `index`) and tells what it is.
pub(super) async fn probe(
    src: &Source,
    index: usize,
    datastore_path: &str,
) -> Result<Input, Error> {
    let name = format!("disk {index} ({datastore_path})");
    let vs = move |source| Error::Vsphere {
        disk: name.clone(),
        source,
    };
    let bad = |detail: String| Error::BadDisk {
        disk: format!("disk {index} ({datastore_path})"),
        detail,
    };
    let ds = DatastorePath::parse(datastore_path).map_err(|e| Error::Usage(e.to_string()))?;
    let (session, dc) = (&src.session, &src.datacenter);
    let path = ds.to_string();
    let len = session.file_len(&path, dc).await.map_err(vs.clone())?;
    let head = session
        .read_range(&path, dc, 0, len.min(vmdk::MAX_DESCRIPTOR_BYTES))
        .await
        .map_err(vs.clone())?;
    if let Some(h) = vmdk::sparse_header(&head) {
        return Ok(Input::Sparse {
            path,
            len,
            compressed: h.compressed,
        });
    }
    if len > vmdk::MAX_DESCRIPTOR_BYTES || !vmdk::is_descriptor(&head) {
        return Err(bad(format!(
            "{} is neither a VMDK descriptor nor a sparse VMDK ({len} bytes)",
            ds.file_name()
        )));
    }
    let text = String::from_utf8_lossy(&head);
    let exts = vmdk::extents(&text).map_err(|e| bad(e.to_string()))?;
    let map = DiskMap::from_extents(&exts, &vmdk::zero_extents(&text)).map_err(|e| {
        bad(format!(
            "{e}; a descriptor over sparse extents (a hosted split disk or a snapshot delta) \
             is not read; consolidate the disk first"
        ))
    })?;
    // A short flat extent would read as zeros past its end: a silent wrong copy. Refuse it.
    for (file, need) in map.files.iter().zip(map.needed_file_lengths()) {
        let have = session
            .file_len(&ds.sibling(file).to_string(), dc)
            .await
            .map_err(vs.clone())?;
        if have < need {
            return Err(bad(format!(
                "extent {file} has {have} bytes, but the descriptor needs {need}; the disk is incomplete"
            )));
        }
    }
    Ok(Input::Flat(map))
}

/// A flat disk's raw contents in parts of `part` bytes, several ranges fetched at once; holes
/// are made locally, never downloaded.
fn flat_parts(
    remote: Arc<Remote>,
    map: Arc<DiskMap>,
    part: u64,
    vs: impl Fn(vsphere::Error) -> Error + Clone + Send + Sync + 'static,
) -> impl futures::Stream<Item = Result<Bytes, Error>> + Send + 'static {
    let size = map.size();
    futures::stream::iter(0..size.div_ceil(part))
        .map(move |i| {
            let (r, m, vs) = (remote.clone(), map.clone(), vs.clone());
            async move {
                let at = i * part;
                r.read(&m, at, part.min(size - at)).await.map_err(vs)
            }
        })
        .buffered(upload::parts_in_flight(part))
}

/// qemu-img reads the image at `src_uri` over NBD and writes its raw contents, in order, into an
/// NBD sink of `sockets`: the stream of those contents in parts of `part` bytes. The stream ends
/// only with qemu-img's verdict: an image is complete only if qemu-img says so.
fn qemu_raw(
    sockets: &Sockets,
    qemu_img: PathBuf,
    src_uri: String,
    vsize: u64,
    part: u64,
) -> Result<impl futures::Stream<Item = Result<Bytes, Error>> + Send + 'static, Error> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    let sink_path = sockets.path("dst");
    let listener = UnixListener::bind(&sink_path).map_err(|e| io_err(&sink_path, e))?;
    let sink = tokio::spawn(nbd::serve_sink(
        listener,
        nbd::Assembler::new(part as usize, vsize, tx),
    ));
    let sink_abort = sink.abort_handle();
    let dst_uri = nbd::uri(&sink_path);
    let qemu = tokio::spawn(async move {
        let r = qemu::convert_to_raw_target(&qemu_img, "vmdk", &src_uri, &dst_uri).await;
        if r.is_err() {
            // qemu-img gave up: the sink will never see the end.
            sink_abort.abort();
        }
        r
    });
    let gate = futures::stream::once(async move {
        let q = qemu
            .await
            .map_err(|e| Error::Upload(format!("qemu-img task: {e}")))
            .and_then(|r| r);
        let s = sink
            .await
            .map_err(|e| Error::Upload(format!("NBD sink: {e}")))
            .and_then(|r| r.map_err(|e| Error::Upload(format!("NBD sink: {e}"))));
        q.and(s)
    })
    .try_filter_map(|()| async { Ok(None) });
    Ok(tokio_stream_rx(rx).map(Ok).chain(gate))
}

fn io_err(path: &std::path::Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        source,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn tokio_stream_rx(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures::Stream<Item = Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A private directory of short-named Unix sockets (a socket path must stay under 108 bytes,
/// so not in the work directory), removed with its servers on drop.
struct Sockets {
    dir: PathBuf,
    servers: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
}

static SOCKET_DIRS: AtomicU64 = AtomicU64::new(0);

impl Sockets {
    fn new() -> Result<Self, Error> {
        let n = SOCKET_DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferry-nbd-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        Ok(Self {
            dir,
            servers: Vec::new(),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.sock"))
    }

    /// Serves `disk` read-only on a new socket; its NBD URI.
    fn serve_source(&mut self, name: &str, disk: Arc<CachedDisk>) -> Result<String, Error> {
        let path = self.path(name);
        let listener = UnixListener::bind(&path).map_err(|e| io_err(&path, e))?;
        self.servers
            .push(tokio::spawn(nbd::serve_source(listener, disk)));
        Ok(nbd::uri(&path))
    }
}

impl Drop for Sockets {
    fn drop(&mut self) {
        for s in &self.servers {
            s.abort();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
