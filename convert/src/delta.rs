//! `ferry-controller delta`: one later round of a warm migration, what its delta Job runs. The
//! areas of each disk that changed since the previous round's change id (vSphere's
//! `QueryChangedDiskAreas`, up to this round's snapshot, or up to the powered-off VM's disk at
//! cutover) are read off the datastore and written at their offsets into the imported volume,
//! then read back from it and compared: a round is done only when the volume holds, area by
//! area, the bytes the source gave.
//!
//! The volume is raw (CDI writes every image it imports as raw: `disk.img` on a filesystem
//! claim, the device itself on a block claim), so an area's offset in the disk is its offset
//! in the volume. Only flat extents are read (changed block tracking reports areas of the
//! virtual disk; a flat extent maps them one to one).
//!
//! Repeatable: a round run again (a crash, a retried pod) reads the same areas of the same
//! snapshot and writes the same bytes; nothing depends on what an earlier run of it did.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use ring::digest::{Context as Sha256, SHA256};
use serde::Serialize;

use super::credentials;
use super::disk::{Input, probe};
use super::error::Error;
use super::map::DiskMap;
use super::remote::{Remote, Throttle};
use super::source::Source;
use crate::job_contract::{env, extra_env};
use ferry_vsphere::{self as vsphere, Session};

/// Bytes per read from the datastore and per write to the volume.
const CHUNK: u64 = 4 << 20;
/// Reads in flight per disk.
const READS_IN_FLIGHT: usize = 4;

/// One disk of a round: `INDEX:DEVICE_KEY:TARGET:CHANGE_ID:DATASTORE_PATH`. The datastore path
/// comes last (it may hold `:`); a change id holds none (`52 de … 8d/4`), nor does the target
/// (the Job's own mount or device path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaDisk {
    pub index: usize,
    pub device_key: i32,
    /// The volume: a file (`…/disk.img`) or a block device.
    pub target: PathBuf,
    /// Areas changed since this change id are copied.
    pub change_id: String,
    /// The disk as this round reads it: the snapshot's file, or the VM's disk at cutover.
    pub datastore_path: String,
}

impl DeltaDisk {
    /// Parses `INDEX:DEVICE_KEY:TARGET:CHANGE_ID:DATASTORE_PATH`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = |what: &str| {
            format!("{text:?} is not INDEX:DEVICE_KEY:TARGET:CHANGE_ID:DATASTORE_PATH ({what})")
        };
        let mut parts = text.splitn(5, ':');
        let mut next = |what: &str| {
            parts
                .next()
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| bad(what))
        };
        let index = next("index")?.parse().map_err(|_| bad("index"))?;
        let device_key = next("device key")?.parse().map_err(|_| bad("device key"))?;
        let target = PathBuf::from(next("target")?);
        let change_id = next("change id")?.to_owned();
        let datastore_path = next("datastore path")?.to_owned();
        vsphere::DatastorePath::parse(&datastore_path).map_err(|e| e.to_string())?;
        Ok(Self {
            index,
            device_key,
            target,
            change_id,
            datastore_path,
        })
    }
}

/// Arguments of `ferry-controller delta`; each can come from the environment. The vSphere
/// credentials come only from the Job's environment, as the converter's do.
#[derive(Clone, Debug, clap::Args)]
pub struct DeltaArgs {
    /// The VM's moref.
    #[arg(long, env = env::VM_MOREF)]
    pub vm_moref: String,
    /// The round's snapshot (its moref); none at cutover, when the VM is powered off.
    #[arg(long, env = extra_env::SNAPSHOT)]
    pub snapshot: Option<String>,
    /// Datacenter inventory path, the `dcPath` of datastore reads; found from the VM when unset.
    #[arg(long, env = extra_env::DATACENTER)]
    pub datacenter: Option<String>,
    /// A disk: `INDEX:DEVICE_KEY:TARGET:CHANGE_ID:DATASTORE_PATH`; repeat per disk (one per
    /// line in the environment).
    #[arg(long = "disk", env = extra_env::DELTA_DISKS, value_delimiter = '\n', required = true, value_parser = DeltaDisk::parse)]
    pub disks: Vec<DeltaDisk>,
    /// Cap on the datastore read rate, bytes per second.
    #[arg(long, env = extra_env::MAX_READ_RATE)]
    pub max_read_rate: Option<u64>,
    /// Where to write the result (every disk's report, one JSON document): the container's
    /// termination message file, which the kubelet hands to the controller in the pod's status.
    #[arg(long)]
    pub result_file: Option<PathBuf>,
}

/// The result a delta Job reports: every disk's round. Compact JSON, well within the kubelet's
/// 4096 bytes of termination message for 60 disks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DeltaResult {
    /// Per disk index: bytes copied and the round's SHA-256 (read back equal).
    pub disks: std::collections::BTreeMap<usize, (u64, String)>,
}

/// Reads a delta Job's result. Pure.
pub fn parse_result(text: &str) -> Option<DeltaResult> {
    serde_json::from_str(text.trim()).ok()
}

/// What one disk's round did; one JSON line on stdout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeltaReport {
    pub disk: usize,
    /// Changed areas vSphere reported, and their bytes: what was read and written.
    pub areas: usize,
    pub bytes: u64,
    /// SHA-256 over every area in order (its offset and length as 8 bytes each, big-endian,
    /// then its bytes), as read from the source and, the same, as read back from the volume.
    pub sha256: String,
}

/// Runs the round for every disk, one after the other.
///
/// # Errors
/// The first disk's error: vSphere's (an unknown change id is a fault: tracking was reset,
/// and only a full copy can follow), the volume's I/O, or a volume that does not read back
/// what was written.
pub async fn run(
    args: &DeltaArgs,
    endpoint: &vsphere::Endpoint,
) -> Result<Vec<DeltaReport>, Error> {
    let login = |source| Error::Vsphere {
        disk: "login".into(),
        source,
    };
    let session = Arc::new(Session::connect(endpoint).await.map_err(login)?);
    let datacenter = match args.datacenter.as_deref().filter(|d| !d.is_empty()) {
        Some(dc) => dc.to_owned(),
        None => {
            session
                .vm_info(&args.vm_moref)
                .await
                .map_err(login)?
                .ok_or_else(|| login(vsphere::Error::NotFound(format!("VM {}", args.vm_moref))))?
                .datacenter
        }
    };
    let src = Source {
        session,
        datacenter,
        vm: None,
        snapshot: None,
    };
    let throttle = args.max_read_rate.map(|r| Arc::new(Throttle::new(r)));
    let mut reports = Vec::new();
    for disk in &args.disks {
        let report = round(&src, args, disk, throttle.clone()).await?;
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
        reports.push(report);
    }
    let _ = src.session.logout().await;
    if let Some(path) = &args.result_file {
        let result = DeltaResult {
            disks: reports
                .iter()
                .map(|r| (r.disk, (r.bytes, r.sha256.clone())))
                .collect(),
        };
        std::fs::write(path, serde_json::to_string(&result).unwrap_or_default()).map_err(
            |source| Error::Io {
                path: path.clone(),
                source,
            },
        )?;
    }
    Ok(reports)
}

/// Reads the vSphere credentials from the Job's environment, runs [`run`], and turns the
/// outcome into the exit code the Job's failure policy reads.
pub async fn run_to_exit_code(args: DeltaArgs) -> i32 {
    let outcome = match credentials::vsphere_endpoint_from_env() {
        Ok(endpoint) => run(&args, &endpoint).await,
        Err(e) => Err(e),
    };
    Error::exit_code_of("delta", outcome)
}

/// One disk's round.
async fn round(
    src: &Source,
    args: &DeltaArgs,
    disk: &DeltaDisk,
    throttle: Option<Arc<Throttle>>,
) -> Result<DeltaReport, Error> {
    let name = format!("disk {} ({})", disk.index, disk.datastore_path);
    let map = flat_map(src, disk, &name).await?;
    let size = map.size();
    let areas = src
        .session
        .changed_areas(
            &args.vm_moref,
            args.snapshot.as_deref(),
            disk.device_key,
            size,
            &disk.change_id,
        )
        .await
        .map_err(|source| Error::Vsphere {
            disk: name.clone(),
            source,
        })?;
    let volume = open_volume(&disk.target, size)?;
    let chunks = chunks(&areas, size);
    let remote = remote(src, disk, &map, throttle)?;
    let (source_digest, bytes) =
        copy_chunks(remote, Arc::new(map), chunks.clone(), &volume, disk, &name).await?;
    let volume = sync(volume, &disk.target).await?;
    let read_back = read_back(volume, disk.target.clone(), chunks).await?;
    if read_back != source_digest {
        return Err(Error::Verify(format!(
            "{name}: {} reads back {read_back} over the {} changed areas, the source gave {source_digest}",
            disk.target.display(),
            areas.len()
        )));
    }
    Ok(DeltaReport {
        disk: disk.index,
        areas: areas.len(),
        bytes,
        sha256: source_digest,
    })
}

/// The disk's flat extents; a sparse VMDK is refused (changed block tracking reports areas of
/// the virtual disk, which only a flat extent maps one to one).
async fn flat_map(src: &Source, disk: &DeltaDisk, name: &str) -> Result<DiskMap, Error> {
    match probe(src, disk.index, &disk.datastore_path).await? {
        Input::Flat(map) => Ok(map),
        Input::Sparse { .. } => Err(Error::BadDisk {
            disk: name.to_owned(),
            detail: "a warm round reads flat extents only; this disk is a sparse VMDK".into(),
        }),
    }
}

/// The datastore files of `map`, read through the session (within `throttle`).
fn remote(
    src: &Source,
    disk: &DeltaDisk,
    map: &DiskMap,
    throttle: Option<Arc<Throttle>>,
) -> Result<Arc<Remote>, Error> {
    // The descriptor names its extents relative to itself.
    let ds = vsphere::DatastorePath::parse(&disk.datastore_path)
        .map_err(|e| Error::Usage(e.to_string()))?;
    Ok(Arc::new(Remote::new(
        src.session.clone(),
        src.datacenter.clone(),
        map.files
            .iter()
            .map(|f| ds.sibling(f).to_string())
            .collect(),
        throttle,
    )))
}

/// Reads `chunks` of the disk a few ahead and writes each, in order as it comes, at its offset
/// into `volume`; returns the source's digest of the areas and the bytes copied.
async fn copy_chunks(
    remote: Arc<Remote>,
    map: Arc<DiskMap>,
    chunks: Vec<(u64, u64)>,
    volume: &File,
    disk: &DeltaDisk,
    name: &str,
) -> Result<(String, u64), Error> {
    let mut reads = futures::stream::iter(chunks)
        .map(|(offset, len)| {
            let (remote, map, name) = (remote.clone(), map.clone(), name.to_owned());
            async move {
                let bytes = remote
                    .read(&map, offset, len)
                    .await
                    .map_err(|source| Error::Vsphere { disk: name, source })?;
                Ok::<_, Error>((offset, bytes))
            }
        })
        .buffered(READS_IN_FLIGHT);
    let mut source_digest = Sha256::new(&SHA256);
    let mut bytes = 0u64;
    while let Some((offset, data)) = reads.try_next().await? {
        digest_area(&mut source_digest, offset, &data);
        bytes += data.len() as u64;
        write_at(volume, &disk.target, offset, data).await?;
    }
    Ok((ferry_staging::hex(source_digest.finish().as_ref()), bytes))
}

/// The changed areas cut into chunks of at most [`CHUNK`], clipped to the disk. Pure.
fn chunks(areas: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(start, len) in areas {
        let end = start.saturating_add(len).min(size);
        let mut at = start;
        while at < end {
            let n = (end - at).min(CHUNK);
            out.push((at, n));
            at += n;
        }
    }
    out
}

/// Adds one area to a round's digest: its offset and length, then its bytes. Pure.
fn digest_area(digest: &mut Sha256, offset: u64, data: &[u8]) {
    digest.update(&offset.to_be_bytes());
    digest.update(&(data.len() as u64).to_be_bytes());
    digest.update(data);
}

/// Opens the volume for writing, refusing one smaller than the disk (CDI sizes `disk.img` to
/// the image's virtual size; a block device is at least the claim's size).
fn open_volume(path: &Path, size: u64) -> Result<File, Error> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let len = {
        use std::io::{Seek, SeekFrom};
        let mut f = &file;
        f.seek(SeekFrom::End(0)).map_err(io)?
    };
    if len < size {
        return Err(Error::BadDisk {
            disk: path.display().to_string(),
            detail: format!(
                "the volume holds {len} bytes, the disk {size}: it is not this disk's import"
            ),
        });
    }
    Ok(file)
}

async fn write_at(volume: &File, path: &Path, offset: u64, data: Bytes) -> Result<(), Error> {
    let file = volume.try_clone().map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        file.write_all_at(&data, offset)
            .map_err(|source| Error::Io { path, source })
    })
    .await
    .map_err(|e| Error::Upload(format!("writer task: {e}")))?
}

async fn sync(volume: File, path: &Path) -> Result<File, Error> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        volume
            .sync_all()
            .map(|()| volume)
            .map_err(|source| Error::Io { path, source })
    })
    .await
    .map_err(|e| Error::Upload(format!("sync task: {e}")))?
}

/// The round's digest over the chunks as the volume now holds them.
async fn read_back(volume: File, path: PathBuf, chunks: Vec<(u64, u64)>) -> Result<String, Error> {
    tokio::task::spawn_blocking(move || {
        let mut digest = Sha256::new(&SHA256);
        let mut buf = Vec::new();
        for (offset, len) in chunks {
            buf.resize(len as usize, 0);
            volume
                .read_exact_at(&mut buf, offset)
                .map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
            digest_area(&mut digest, offset, &buf);
        }
        Ok(ferry_staging::hex(digest.finish().as_ref()))
    })
    .await
    .map_err(|e| Error::Upload(format!("read-back task: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_line_keeps_colons_in_the_datastore_path_only() {
        let d =
            DeltaDisk::parse("1:2001:/disks/1/disk.img:52 aa bb/3:[ds:1] vm/vm_1-snapshot-7.vmdk")
                .unwrap();
        assert_eq!(d.index, 1);
        assert_eq!(d.device_key, 2001);
        assert_eq!(d.target, PathBuf::from("/disks/1/disk.img"));
        assert_eq!(d.change_id, "52 aa bb/3");
        assert_eq!(d.datastore_path, "[ds:1] vm/vm_1-snapshot-7.vmdk");
        for bad in [
            "",
            "x:1:/t:c:[ds] a.vmdk",
            "0:1:/t:c",
            "0:1::c:[ds] a.vmdk",
            "0:1:/t:c:nodatastore",
        ] {
            assert!(DeltaDisk::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn areas_are_cut_into_chunks_and_clipped_to_the_disk() {
        let got = chunks(
            &[(0, 1 << 20), (8 << 20, 9 << 20), (30 << 20, 4 << 20)],
            32 << 20,
        );
        assert_eq!(
            got,
            vec![
                (0, 1 << 20),
                (8 << 20, 4 << 20),
                (12 << 20, 4 << 20),
                (16 << 20, 1 << 20),
                (30 << 20, 2 << 20),
            ]
        );
    }

    #[test]
    fn the_digest_tells_where_bytes_went_not_only_what_they_are() {
        let d = |parts: &[(u64, &[u8])]| {
            let mut h = Sha256::new(&SHA256);
            for (o, b) in parts {
                digest_area(&mut h, *o, b);
            }
            ferry_staging::hex(h.finish().as_ref())
        };
        assert_ne!(d(&[(0, b"ab")]), d(&[(1, b"ab")]));
        assert_ne!(d(&[(0, b"ab"), (2, b"c")]), d(&[(0, b"a"), (1, b"bc")]));
        assert_eq!(d(&[(4, b"xyz")]), d(&[(4, b"xyz")]));
    }

    #[tokio::test]
    async fn a_smaller_volume_is_refused_and_written_bytes_read_back() {
        let path =
            std::env::temp_dir().join(format!("ferry-delta-test-{}.img", std::process::id()));
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        assert!(matches!(
            open_volume(&path, 8192),
            Err(Error::BadDisk { .. })
        ));
        let volume = open_volume(&path, 4096).unwrap();
        write_at(&volume, &path, 100, Bytes::from_static(b"hello"))
            .await
            .unwrap();
        let volume = sync(volume, &path).await.unwrap();
        let mut want = Sha256::new(&SHA256);
        digest_area(&mut want, 100, b"hello");
        let got = read_back(volume, path.clone(), vec![(100, 5)])
            .await
            .unwrap();
        assert_eq!(got, ferry_staging::hex(want.finish().as_ref()));
        assert_eq!(&std::fs::read(&path).unwrap()[100..105], b"hello");
        std::fs::remove_file(&path).unwrap();
    }
}
