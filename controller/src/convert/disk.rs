//! One disk: what it is on the datastore, which data path it takes, and its record.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use tokio::io::AsyncReadExt;
use tokio::net::UnixListener;

use super::map::DiskMap;
use super::remote::{CachedDisk, Remote, Throttle};
use super::upload::{self, Progress, RecordWriter, Uploaded};
use super::{
    ConvertArgs, DataPath, DiskReport, DiskSpec, DiskStatus, Error, META_FORMAT, META_SOURCE_PATH,
    META_VIRTUAL_SIZE, OutputFormat, Source, nbd, qemu, scratch, vmdk,
};
use crate::staging::{DiskRecord, RecordState, Staging};
use crate::vsphere::{self, Allocation, DatastorePath};

/// What a disk is on the datastore.
enum Input {
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
    pub work: PathBuf,
    pub budget: scratch::Budget,
    pub throttle: Option<Arc<Throttle>>,
    /// Bytes in the work directory now, and the most at once.
    pub scratch_now: Arc<AtomicU64>,
    pub scratch_peak: Arc<AtomicU64>,
}

/// Block size, blocks kept and blocks read ahead by the NBD source.
const BLOCK: u64 = 4 << 20;
const BLOCKS_KEPT: usize = 16;
const BLOCKS_AHEAD: u64 = 6;

impl Ctx<'_> {
    /// Converts one disk, keeping its record; on failure the record says why.
    pub async fn convert(
        &self,
        index: usize,
        disk: &DiskSpec,
        previous: Option<DiskRecord>,
    ) -> Result<DiskReport, Error> {
        let format = self.args.format.as_str();
        let name = format!("disk {index} ({})", disk.datastore_path);
        // A source someone powered on again is refused before anything is read or recorded.
        super::ensure_off(&self.src, &name).await?;
        let progress = Progress::new(0);
        let writer = Arc::new(RecordWriter {
            staging: self.staging.clone(),
            key: disk.key.clone(),
            base: DiskRecord::converting(&disk.datastore_path, format),
            progress: progress.clone(),
        });
        // A run killed mid-upload left its parts behind: they go before anything else.
        if let Some(id) = previous.and_then(|r| r.upload_id) {
            tracing::info!(key = %disk.key, upload = %id, "aborting the upload of an earlier run");
            self.staging
                .abort_multipart(&disk.key, &id)
                .await
                .map_err(|source| Error::Staging {
                    context: format!("{}: aborting an earlier upload", disk.key),
                    source,
                })?;
        }
        let ticker = tokio::spawn(writer.clone().run());
        let started = Instant::now();
        let outcome = match self.convert_disk(index, disk, &writer).await {
            // Still off after the read: the bytes are the disk's, not a moving target's.
            Ok(done) => super::ensure_off(&self.src, &name).await.map(|()| done),
            Err(e) => Err(e),
        };
        ticker.abort();
        let _ = ticker.await;
        match outcome {
            Ok((
                up,
                raw_sha256,
                path,
                virtual_size,
                downloaded,
                scratch_peak,
                allocation_known,
            )) => {
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
                    scratch_peak,
                    allocation_known,
                    seconds: started.elapsed().as_secs_f64(),
                })
            }
            Err(e) => {
                let mut r = writer.base.clone();
                r.state = RecordState::Failed;
                r.stage = "failed".into();
                r.error = Some(e.to_string());
                r.updated_unix_ms = now_ms();
                if let Err(w) = self.staging.put_record(&disk.key, &r).await {
                    tracing::warn!(key = %disk.key, error = %w, "failure not recorded");
                }
                Err(e)
            }
        }
    }

    fn vs(&self, disk: &DiskSpec, index: usize) -> impl Fn(vsphere::Error) -> Error + Clone {
        let name = format!("disk {index} ({})", disk.datastore_path);
        move |source| Error::Vsphere {
            disk: name.clone(),
            source,
        }
    }

    /// Reads the `.vmdk` the disk names and tells what it is.
    async fn probe(&self, index: usize, disk: &DiskSpec) -> Result<Input, Error> {
        let vs = self.vs(disk, index);
        let bad = |detail: String| Error::BadDisk {
            disk: format!("disk {index} ({})", disk.datastore_path),
            detail,
        };
        let ds =
            DatastorePath::parse(&disk.datastore_path).map_err(|e| Error::Usage(e.to_string()))?;
        let (session, dc) = (&self.src.session, &self.src.datacenter);
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

    /// The flat map narrowed to what vSphere says is allocated, when it can say.
    async fn allocated(&self, disk: &DiskSpec, map: DiskMap) -> Result<(DiskMap, bool), Error> {
        let Some(vm) = &self.src.vm else {
            return Ok((map, false));
        };
        let Some(d) = vm
            .disks
            .iter()
            .find(|d| d.datastore_path == disk.datastore_path)
        else {
            return Ok((map, false));
        };
        let size = map.size();
        match self
            .src
            .session
            .allocated_areas(&vm.moref, d.key, size)
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

    fn metadata(&self, disk: &DiskSpec, virtual_size: u64) -> BTreeMap<String, String> {
        [
            (META_SOURCE_PATH, disk.datastore_path.clone()),
            (META_FORMAT, self.args.format.as_str().to_owned()),
            (META_VIRTUAL_SIZE, virtual_size.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn remote(&self, paths: Vec<String>) -> Arc<Remote> {
        Arc::new(Remote::new(
            self.src.session.clone(),
            self.src.datacenter.clone(),
            paths,
            self.throttle.clone(),
        ))
    }

    /// `(uploaded, raw contents' SHA-256 of a qcow2 image, path, virtual size, bytes downloaded,
    /// scratch peak, allocation known)`.
    #[allow(clippy::type_complexity)]
    async fn convert_disk(
        &self,
        index: usize,
        disk: &DiskSpec,
        writer: &RecordWriter,
    ) -> Result<(Uploaded, Option<String>, DataPath, u64, u64, u64, bool), Error> {
        let vs = self.vs(disk, index);
        let progress = writer.progress.clone();
        let input = self.probe(index, disk).await?;
        let ds =
            DatastorePath::parse(&disk.datastore_path).map_err(|e| Error::Usage(e.to_string()))?;
        match (input, self.args.format) {
            (Input::Flat(map), OutputFormat::Raw) => {
                let (map, known) = self.allocated(disk, map).await?;
                let size = map.size();
                let paths = map
                    .files
                    .iter()
                    .map(|f| ds.sibling(f).to_string())
                    .collect();
                let remote = self.remote(paths);
                let part = upload::part_size(size);
                progress.total.store(size, Ordering::Relaxed);
                let map = Arc::new(map);
                let (r, m) = (remote.clone(), map.clone());
                let parts = futures::stream::iter(0..size.div_ceil(part))
                    .map(move |i| {
                        let (r, m, vs) = (r.clone(), m.clone(), vs.clone());
                        async move {
                            let at = i * part;
                            r.read(&m, at, part.min(size - at)).await.map_err(vs)
                        }
                    })
                    .buffered(upload::parts_in_flight(part));
                let meta = self.metadata(disk, size);
                // Parts are hashed whole and in order, so their count moves in steps; the bytes
                // read so far (the data, stretched over the disk) move smoothly.
                let data = map.data_bytes().max(1);
                let sampler = {
                    let (remote, progress) = (remote.clone(), progress.clone());
                    tokio::spawn(async move {
                        loop {
                            let read = remote.fetched.load(Ordering::Relaxed);
                            let est =
                                (u128::from(read) * u128::from(size) / u128::from(data)) as u64;
                            progress.done.fetch_max(est.min(size), Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    })
                };
                let up = upload::upload(
                    &self.staging,
                    &disk.key,
                    &meta,
                    size,
                    part,
                    parts,
                    writer,
                    0,
                )
                .await;
                sampler.abort();
                let up = up?;
                let got = remote.fetched.load(Ordering::Relaxed);
                Ok((up, None, DataPath::FlatStream, size, got, 0, known))
            }
            (Input::Flat(map), OutputFormat::Qcow2) => {
                let (map, known) = self.allocated(disk, map).await?;
                let need = scratch::qcow2_bound(map.size(), map.data_clusters(64 << 10));
                let paths = map
                    .files
                    .iter()
                    .map(|f| ds.sibling(f).to_string())
                    .collect();
                let remote = self.remote(paths);
                let size = map.size();
                // The flat disk's bytes are its raw contents, all read by qemu-img: hashed as
                // they arrive, the raw contents' SHA-256 needs no pass of its own.
                let cached = Arc::new(
                    CachedDisk::new(remote.clone(), map, BLOCK, BLOCKS_KEPT, BLOCKS_AHEAD)
                        .hashing(),
                );
                let ((up, vsize, raw), peak) = self
                    .via_qcow2_file(index, disk, writer, cached, "raw", Some((size, need)))
                    .await?;
                let got = remote.fetched.load(Ordering::Relaxed);
                Ok((up, Some(raw), DataPath::QemuFile, vsize, got, peak, known))
            }
            (
                Input::Sparse {
                    path,
                    len,
                    compressed,
                },
                format,
            ) => {
                tracing::info!(disk = %disk.datastore_path, len, compressed, "sparse VMDK: qemu-img reads it over NBD");
                let remote = self.remote(vec![path]);
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
                // The file's last sector may be partial: the map is cut to the file's length.
                let file = file.restricted_to(&[(0, len)]);
                let cached = Arc::new(CachedDisk::new(
                    remote.clone(),
                    file,
                    BLOCK,
                    BLOCKS_KEPT,
                    BLOCKS_AHEAD,
                ));
                let (up, raw, vsize, path, peak) = match format {
                    OutputFormat::Raw => {
                        let (up, vsize) = self.via_sink(disk, writer, cached).await?;
                        (up, None, vsize, DataPath::QemuSink, 0)
                    }
                    OutputFormat::Qcow2 => {
                        let ((up, vsize, raw), peak) = self
                            .via_qcow2_file(index, disk, writer, cached, "vmdk", None)
                            .await?;
                        (up, Some(raw), vsize, DataPath::QemuFile, peak)
                    }
                };
                let got = remote.fetched.load(Ordering::Relaxed);
                Ok((up, raw, path, vsize, got, peak, true))
            }
        }
    }

    /// qemu-img reads `source` over NBD and writes raw into the NBD sink, which streams it.
    async fn via_sink(
        &self,
        disk: &DiskSpec,
        writer: &RecordWriter,
        source: Arc<CachedDisk>,
    ) -> Result<(Uploaded, u64), Error> {
        let mut sockets = Sockets::new()?;
        let src_uri = sockets.serve_source("src", source.clone())?;
        let qemu_img = self.args.qemu_img.clone();
        let vsize = qemu::virtual_size(&qemu_img, "vmdk", &src_uri).await?;
        let progress = writer.progress.clone();
        progress.total.store(vsize, Ordering::Relaxed);
        progress.set_stage("converting");
        let part = upload::part_size(vsize);
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
        // The image is complete only if qemu-img says so: its exit closes the stream of parts.
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
        let parts = tokio_stream_rx(rx).map(Ok).chain(gate);
        let meta = self.metadata(disk, vsize);
        let up = upload::upload(
            &self.staging,
            &disk.key,
            &meta,
            vsize,
            part,
            parts,
            writer,
            0,
        )
        .await?;
        Ok((up, vsize))
    }

    /// qemu-img reads `source` over NBD and writes a qcow2 file (the one local copy), which is
    /// then hashed and uploaded in one read while qemu-img reads it once more, at the same time,
    /// for the SHA-256 of its raw contents (unless `source` hashed them on the way: a flat disk). `flat`: `(virtual size, scratch need)` when known without asking qemu-img.
    /// Returns `((uploaded, virtual size, raw contents' SHA-256), scratch peak)`.
    async fn via_qcow2_file(
        &self,
        index: usize,
        disk: &DiskSpec,
        writer: &RecordWriter,
        source: Arc<CachedDisk>,
        format: &'static str,
        flat: Option<(u64, u64)>,
    ) -> Result<((Uploaded, u64, String), u64), Error> {
        let mut sockets = Sockets::new()?;
        let src_uri = sockets.serve_source("src", source.clone())?;
        let qemu_img = &self.args.qemu_img;
        let (vsize, need) = match flat {
            Some(v) => v,
            None => (
                qemu::virtual_size(qemu_img, format, &src_uri).await?,
                qemu::qcow2_required(qemu_img, format, &src_uri).await?,
            ),
        };
        let _room = self.budget.hold(need).await.map_err(|t| Error::Scratch {
            disk: format!("disk {index} ({})", disk.datastore_path),
            need: t.need,
            limit: t.limit,
        })?;
        let progress = writer.progress.clone();
        progress.total.store(vsize + need, Ordering::Relaxed);
        progress.set_stage("converting");
        tokio::fs::create_dir_all(&self.work)
            .await
            .map_err(|e| io_err(&self.work, e))?;
        let out = self.work.join(format!("disk-{index}.qcow2"));
        let peak = Arc::new(AtomicU64::new(0));
        let watch = {
            let (out, peak, progress, source) =
                (out.clone(), peak.clone(), progress.clone(), source.clone());
            let (now, all_peak) = (self.scratch_now.clone(), self.scratch_peak.clone());
            tokio::spawn(async move {
                let mut mine = 0u64;
                loop {
                    let held = allocated_bytes(&out);
                    peak.fetch_max(held, Ordering::Relaxed);
                    let total = if held >= mine {
                        now.fetch_add(held - mine, Ordering::Relaxed) + (held - mine)
                    } else {
                        now.fetch_sub(mine - held, Ordering::Relaxed) - (mine - held)
                    };
                    mine = held;
                    all_peak.fetch_max(total, Ordering::Relaxed);
                    // The convert pass: how far into the source qemu-img has read.
                    let read = source.high_water.load(Ordering::Relaxed);
                    let pass = (read as u128 * vsize as u128 / source.size().max(1) as u128) as u64;
                    progress.done.fetch_max(pass.min(vsize), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let result = async {
            qemu::convert_to_qcow2(qemu_img, format, &src_uri, &out).await?;
            let size = tokio::fs::metadata(&out)
                .await
                .map_err(|e| io_err(&out, e))?
                .len();
            progress.total.store(vsize + size, Ordering::Relaxed);
            progress.done.store(vsize, Ordering::Relaxed);
            let part = upload::part_size(size);
            let file = tokio::fs::File::open(&out)
                .await
                .map_err(|e| io_err(&out, e))?;
            let parts = file_parts(file, part, out.clone());
            let meta = self.metadata(disk, vsize);
            // Both read the finished file (from the page cache): the upload waits on S3 while
            // qemu-img decodes, so they overlap rather than follow each other.
            let (up, raw) = tokio::join!(
                upload::upload(
                    &self.staging,
                    &disk.key,
                    &meta,
                    size,
                    part,
                    parts,
                    writer,
                    vsize,
                ),
                async {
                    match source.sha256() {
                        Some(h) => Ok(h),
                        None => {
                            tracing::info!(key = %disk.key, "raw contents hashed in a pass of their own");
                            self.raw_contents_sha256(&out, vsize).await
                        }
                    }
                }
            );
            Ok::<_, Error>((up?, raw?))
        }
        .await;
        watch.abort();
        let _ = watch.await;
        let held = allocated_bytes(&out);
        peak.fetch_max(held, Ordering::Relaxed);
        let _ = tokio::fs::remove_file(&out).await;
        self.scratch_now.fetch_sub(
            self.scratch_now.load(Ordering::Relaxed).min(held),
            Ordering::Relaxed,
        );
        let (up, raw) = result?;
        Ok(((up, vsize, raw), peak.load(Ordering::Relaxed)))
    }

    /// SHA-256 of a local qcow2 image's raw contents: qemu-img writes them into an NBD sink that
    /// hashes them in order, so no raw copy lands on disk. This is the one pass a qcow2 output
    /// adds: the verification Job compares an imported (raw) volume against it, and no earlier
    /// pass sees the raw contents in order.
    async fn raw_contents_sha256(
        &self,
        image: &std::path::Path,
        vsize: u64,
    ) -> Result<String, Error> {
        let sockets = Sockets::new()?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(2);
        let sink_path = sockets.path("raw");
        let listener = UnixListener::bind(&sink_path).map_err(|e| io_err(&sink_path, e))?;
        let part = upload::part_size(vsize) as usize;
        let sink = tokio::spawn(nbd::serve_sink(
            listener,
            nbd::Assembler::new(part, vsize, tx),
        ));
        let sink_abort = sink.abort_handle();
        let (qemu_img, dst) = (self.args.qemu_img.clone(), nbd::uri(&sink_path));
        let src = image.to_string_lossy().into_owned();
        let qemu = tokio::spawn(async move {
            let r = qemu::convert_to_raw_target(&qemu_img, "qcow2", &src, &dst).await;
            if r.is_err() {
                sink_abort.abort();
            }
            r
        });
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        let mut seen = 0u64;
        while let Some(b) = rx.recv().await {
            hash.update(&b);
            seen += b.len() as u64;
        }
        qemu.await
            .map_err(|e| Error::Upload(format!("qemu-img task: {e}")))??;
        sink.await
            .map_err(|e| Error::Upload(format!("NBD sink: {e}")))?
            .map_err(|e| Error::Upload(format!("NBD sink: {e}")))?;
        if seen != vsize {
            return Err(Error::Upload(format!(
                "raw contents of {}: {seen} bytes, {vsize} expected",
                image.display()
            )));
        }
        Ok(crate::staging::hex(hash.finish().as_ref()))
    }
}

/// Bytes a file holds on disk (its allocated blocks), 0 when it does not exist.
fn allocated_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
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

/// A file read in parts of `part` bytes.
fn file_parts(
    file: tokio::fs::File,
    part: u64,
    path: PathBuf,
) -> impl futures::Stream<Item = Result<Bytes, Error>> {
    futures::stream::try_unfold((file, path), move |(mut f, path)| async move {
        let mut buf = BytesMut::zeroed(part as usize);
        let mut n = 0;
        while n < buf.len() {
            let k = f.read(&mut buf[n..]).await.map_err(|e| io_err(&path, e))?;
            if k == 0 {
                break;
            }
            n += k;
        }
        if n == 0 {
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some((buf.freeze(), (f, path))))
    })
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
