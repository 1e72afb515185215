//! The guest conversion run by the guest Job (`ferry-controller convert-guest`): the imported
//! guest converted to run on KubeVirt by `virt-v2v-in-place` (virtio's drivers in its
//! initramfs, VMware's tools removed), all or nothing.
//!
//! virt-v2v never writes the volumes: it converts a qcow2 overlay over each (in the Job's work
//! volume). Only a conversion that succeeded lands, through a journal kept on the volume's own
//! file system beside `disk.img`, so that it outlives the pod:
//!
//! 1. each overlay is copied beside its volume as [`JOURNAL`] (its backing file named relative,
//!    `disk.img`), synced;
//! 2. [`LANDING`] is written on disk 0's volume (synced, then renamed into place): from here the
//!    conversion is decided, and any later attempt finishes it;
//! 3. each journal is committed into its volume (`qemu-img commit -d`: the same bytes again on a
//!    repeat) and compared with it (`qemu-img compare`: every converted cluster is there);
//! 4. each volume is hashed and [`DONE`] written beside it, then [`LANDING`] and the journals go.
//!
//! A kill before step 2 leaves the verified bytes (stray journals are removed by the next
//! attempt, which converts again); a kill after it leaves a landing the next attempt completes
//! from the journals; a kill after step 4 leaves a conversion the next attempt reports again
//! (each volume hashed against its [`DONE`]). A volume holding neither the verified bytes nor
//! its recorded conversion fails the Job for good: nothing ferry can account for.
//!
//! Block volumes have no file system to keep a journal on: the Job refuses them. A warm
//! migration's volumes (`--unverified`) are converted without the check of step 0 — no checksum
//! covers the first copy and its cutover's changes — but land all or nothing the same way.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::Error;
pub use crate::job_contract::{PERMANENT_EXIT_CODE, TRANSIENT_EXIT_CODE};
use crate::libguestfs;
use crate::nic_names::{self, NicName};
use crate::verify::{VolumeSpec, hash_prefix};

/// The overlay of a conversion decided on, beside its volume.
pub const JOURNAL: &str = "ferry-guest.journal.qcow2";
/// On disk 0's volume while a landing is under way: what is being landed.
pub const LANDING: &str = "ferry-guest.landing.json";
/// Beside a volume the conversion landed on: its checksum after the conversion.
pub const DONE: &str = "ferry-guest.done.json";
/// The first line of a result.
pub const RESULT_HEADER: &str = "ferry-guest v1";
/// Most of virt-v2v's lines kept in a result (the kubelet hands the controller 4096 bytes).
const MAX_CHANGES: usize = 8;
/// Longest line kept.
const MAX_LINE: usize = 200;

/// Whether a disk set without an operating system virt-v2v converts fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Passed over, unchanged.
    Auto,
    /// Fails the Job.
    Always,
}

/// Arguments of `ferry-controller convert-guest`.
#[derive(Clone, Debug, clap::Args)]
pub struct GuestArgs {
    /// `auto` or `always`.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// A verified volume: `INDEX=PATH=SIZE=SHA256` (the checksum the verification found); repeat
    /// per disk, disk 0 first.
    #[arg(long = "volume", required = true, value_parser = VolumeSpec::parse)]
    pub volumes: Vec<VolumeSpec>,
    /// Where the result is written (the container's termination message file).
    #[arg(long)]
    pub result_file: Option<PathBuf>,
    /// Where the overlays and libguestfs' appliance go (the Job's work volume).
    #[arg(long, env = "FERRY_WORK_DIR")]
    pub work_dir: PathBuf,
    /// virt-v2v-in-place.
    #[arg(
        long,
        env = "FERRY_VIRT_V2V_IN_PLACE",
        default_value = "virt-v2v-in-place"
    )]
    pub virt_v2v: PathBuf,
    /// qemu-img.
    #[arg(long, env = "FERRY_QEMU_IMG", default_value = "qemu-img")]
    pub qemu_img: PathBuf,
    /// Let libguestfs use KVM when /dev/kvm opens (by default its appliance runs under TCG: a
    /// /dev/kvm that opens is not always one that runs, and TCG always does).
    #[arg(long, env = "FERRY_GUEST_KVM")]
    pub kvm: bool,
    /// The volumes' bytes before the conversion are not checked against `--volume`'s checksum:
    /// a warm migration's volumes hold the first copy and what its cutover wrote, which no
    /// checksum ferry keeps covers (the landing is all or nothing all the same).
    #[arg(long)]
    pub unverified: bool,
    /// A network card whose name the converted guest keeps, `MAC=NAME` (the name ESXi's PCI
    /// slot gave it, e.g. `00:50:56:ab:cd:01=ens192`); repeat per card. A name is kept only
    /// where the guest's network configuration uses it (see `ferry_convert::nic_names`).
    #[arg(long = "keep-nic-name", value_parser = NicName::parse)]
    pub nic_names: Vec<NicName>,
    /// guestfish, which writes the kept names into the guest.
    #[arg(long, env = "FERRY_GUESTFISH", default_value = "guestfish")]
    pub guestfish: PathBuf,
}

/// What the conversion found and did: the Job's result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The operating system virt-v2v converted, as it names it; `None`: none found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
    /// Whether the volumes hold the converted guest.
    pub converted: bool,
    /// virt-v2v's own lines about what it did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    /// Per disk: its checksum now, and the bytes the conversion wrote into it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Landed>,
    /// Seconds virt-v2v ran.
    #[serde(default)]
    pub seconds: u32,
    /// What became of each network card's name (see `ferry_convert::nic_names`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interface_names: Vec<String>,
}

/// One volume after the conversion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Landed {
    pub disk: usize,
    pub sha256: String,
    pub written_bytes: u64,
}

/// The result as the controller reads it: the header, then the outcome as one JSON line. Pure.
pub fn render_result(o: &Outcome) -> String {
    format!(
        "{RESULT_HEADER}\n{}\n",
        serde_json::to_string(o).unwrap_or_default()
    )
}

/// The outcome a result reports; `None` when `text` is not a result. Pure.
pub fn parse_result(text: &str) -> Option<Outcome> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next()? != RESULT_HEADER {
        return None;
    }
    serde_json::from_str(lines.next()?).ok()
}

/// What virt-v2v said, from its `--machine-readable` lines. Pure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Said {
    /// From "Converting X to run on KVM".
    pub operating_system: Option<String>,
    /// Its warnings and informations, in order.
    pub changes: Vec<String>,
    /// Its errors, in order.
    pub errors: Vec<String>,
}

/// One machine-readable line of virt-v2v's.
#[derive(Deserialize)]
struct Line {
    message: String,
    #[serde(rename = "type")]
    kind: String,
}

/// Reads virt-v2v's `--machine-readable` output (JSON lines among its plain ones). Pure.
pub fn read_said(output: &str) -> Said {
    let mut said = Said::default();
    for line in output
        .lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
    {
        let text: String = line.message.trim().chars().take(MAX_LINE).collect();
        match line.kind.as_str() {
            "message" => {
                if let Some(os) = text
                    .strip_prefix("Converting ")
                    .and_then(|t| t.strip_suffix(" to run on KVM"))
                {
                    said.operating_system = Some(os.to_owned());
                }
            }
            "error" => said.errors.push(text),
            _ if said.changes.len() < MAX_CHANGES => said.changes.push(text),
            _ => {}
        }
    }
    said
}

/// Whether virt-v2v's errors say it found no operating system to convert (a disk set of data
/// disks). Pure.
pub fn found_no_os(errors: &[String]) -> bool {
    errors.iter().any(|e| {
        let e = e.to_ascii_lowercase();
        e.contains("no root device found") || e.contains("inspection could not detect")
    })
}

/// A landing decided on: what goes into the result once the journals are in.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Landing {
    operating_system: Option<String>,
    changes: Vec<String>,
    /// Per disk, the bytes its journal holds.
    written: Vec<(usize, u64)>,
    seconds: u32,
    #[serde(default)]
    interface_names: Vec<String>,
}

/// One volume's files.
struct Disk<'a> {
    spec: &'a VolumeSpec,
    dir: PathBuf,
}

impl Disk<'_> {
    fn journal(&self) -> PathBuf {
        self.dir.join(JOURNAL)
    }
    fn done(&self) -> PathBuf {
        self.dir.join(DONE)
    }
}

/// Converts the guest on `args.volumes`, or finishes or reports the conversion an earlier
/// attempt decided on (see the module's comment).
///
/// # Errors
/// [`Error::Guest`] (permanent) when virt-v2v fails or a volume holds neither the verified nor
/// the converted bytes; [`Error::Usage`] for a block volume; I/O and qemu-img errors
/// (transient).
pub async fn run(args: &GuestArgs) -> Result<Outcome, Error> {
    let disks = disks(&args.volumes)?;
    let landing = disks[0].dir.join(LANDING);
    if let Some(l) = read_json::<Landing>(&landing).await? {
        return land(args, &disks, &l).await;
    }
    remove_journals(&disks).await?;
    if let Some(done) = landed_before(&disks).await? {
        return Ok(done);
    }
    for d in disks.iter().filter(|_| !args.unverified) {
        let actual = hash_prefix(d.spec.index, &d.spec.path, d.spec.size).await?;
        if actual != d.spec.sha256 {
            return Err(Error::Guest(format!(
                "disk {}: the volume holds neither the verified bytes (SHA-256 {}) nor a conversion ferry recorded (it reads {actual})",
                d.spec.index, d.spec.sha256
            )));
        }
    }
    let work = args.work_dir.join("guest");
    let _ = tokio::fs::remove_dir_all(&work).await;
    mkdir(&work).await?;
    let overlays = overlays(args, &disks, &work).await?;
    let started = std::time::Instant::now();
    // Before virt-v2v: the initramfs it rebuilds carries the names too.
    let interface_names =
        nic_names::keep(&args.guestfish, args.kvm, &work, &overlays, &args.nic_names).await?;
    let (ok, said) = virt_v2v(args, &work, &overlays).await?;
    let seconds = u32::try_from(started.elapsed().as_secs()).unwrap_or(u32::MAX);
    if !ok {
        if found_no_os(&said.errors) && args.mode == Mode::Auto {
            return Ok(Outcome {
                operating_system: None,
                converted: false,
                changes: said.errors,
                volumes: vec![],
                seconds,
                // Nothing lands: the names were written into overlays now discarded.
                interface_names: vec![],
            });
        }
        let why = said.errors.last().cloned().unwrap_or_else(|| {
            "virt-v2v-in-place failed without saying why (see the pod's log)".into()
        });
        return Err(Error::Guest(format!("virt-v2v-in-place: {why}")));
    }
    let mut written = vec![];
    for (d, ov) in disks.iter().zip(&overlays) {
        written.push((d.spec.index, allocated(args, ov).await?));
        journal(args, d, ov).await?;
    }
    let l = Landing {
        operating_system: said.operating_system,
        changes: said.changes,
        written,
        seconds,
        interface_names,
    };
    write_json(&landing, &l).await?;
    let _ = tokio::fs::remove_dir_all(&work).await;
    land(args, &disks, &l).await
}

/// A qcow2 overlay in `work` over each volume: all virt-v2v (and guestfish) ever write.
async fn overlays(
    args: &GuestArgs,
    disks: &[Disk<'_>],
    work: &Path,
) -> Result<Vec<PathBuf>, Error> {
    let mut overlays = vec![];
    for d in disks {
        let ov = work.join(format!("disk-{}.qcow2", d.spec.index));
        let backing = absolute(&d.spec.path);
        qemu_img(
            args,
            "create",
            &[
                "create".as_ref(),
                "-q".as_ref(),
                "-f".as_ref(),
                "qcow2".as_ref(),
                "-F".as_ref(),
                "raw".as_ref(),
                "-b".as_ref(),
                backing.as_os_str(),
                ov.as_os_str(),
            ],
        )
        .await?;
        overlays.push(ov);
    }
    Ok(overlays)
}

/// The volumes with the directory each lives in; a block device is refused.
fn disks(volumes: &[VolumeSpec]) -> Result<Vec<Disk<'_>>, Error> {
    let mut out = vec![];
    for v in volumes {
        let meta = std::fs::metadata(&v.path).map_err(|source| Error::Missing {
            index: v.index,
            path: v.path.clone(),
            source,
        })?;
        if !meta.is_file() {
            return Err(Error::Usage(format!(
                "disk {}: {} is not a file: guest conversion needs Filesystem volumes (its journal lives beside disk.img)",
                v.index,
                v.path.display()
            )));
        }
        let dir = v
            .path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_owned);
        out.push(Disk { spec: v, dir });
    }
    if out.is_empty() {
        return Err(Error::Usage("no volume to convert".into()));
    }
    Ok(out)
}

/// A conversion an earlier attempt landed, when every volume holds the checksum recorded
/// beside it; `None` when none was recorded. A record some volume does not match is an error.
async fn landed_before(disks: &[Disk<'_>]) -> Result<Option<Outcome>, Error> {
    let Some(mut outcome) = read_json::<Outcome>(&disks[0].done()).await? else {
        return Ok(None);
    };
    // Disk 0's record is the whole outcome: its own volume's is among the outcome's volumes.
    let recorded = std::mem::take(&mut outcome.volumes);
    for (i, d) in disks.iter().enumerate() {
        let rec = if i == 0 {
            recorded.iter().find(|v| v.disk == d.spec.index).cloned()
        } else {
            read_json::<Landed>(&d.done()).await?
        };
        let Some(rec) = rec else {
            return Err(Error::Guest(format!(
                "disk {}: the conversion ferry recorded on disk 0 has no record on this disk",
                d.spec.index
            )));
        };
        let actual = hash_prefix(d.spec.index, &d.spec.path, d.spec.size).await?;
        if actual != rec.sha256 {
            return Err(Error::Guest(format!(
                "disk {}: the volume no longer holds the converted bytes ferry recorded (SHA-256 {}; it reads {actual})",
                d.spec.index, rec.sha256
            )));
        }
        outcome.volumes.push(rec);
    }
    Ok(Some(outcome))
}

/// Steps 3 and 4: the journals committed and compared, the volumes hashed and recorded, the
/// landing's files removed.
async fn land(args: &GuestArgs, disks: &[Disk<'_>], l: &Landing) -> Result<Outcome, Error> {
    let mut volumes = vec![];
    for d in disks {
        let journal = d.journal();
        if !exists(&journal).await? {
            return Err(Error::Guest(format!(
                "disk {}: a landing is under way but its journal {} is gone",
                d.spec.index,
                journal.display()
            )));
        }
        qemu_img(
            args,
            "commit",
            &[
                "commit".as_ref(),
                "-q".as_ref(),
                "-d".as_ref(),
                "-f".as_ref(),
                "qcow2".as_ref(),
                journal.as_os_str(),
            ],
        )
        .await?;
        qemu_img(
            args,
            "compare",
            &[
                "compare".as_ref(),
                "-q".as_ref(),
                "-f".as_ref(),
                "qcow2".as_ref(),
                "-F".as_ref(),
                "raw".as_ref(),
                journal.as_os_str(),
                d.spec.path.as_os_str(),
            ],
        )
        .await?;
        let sha256 = hash_prefix(d.spec.index, &d.spec.path, d.spec.size).await?;
        let written_bytes = l
            .written
            .iter()
            .find(|(i, _)| *i == d.spec.index)
            .map_or(0, |(_, b)| *b);
        volumes.push(Landed {
            disk: d.spec.index,
            sha256,
            written_bytes,
        });
    }
    let outcome = Outcome {
        operating_system: l.operating_system.clone(),
        converted: true,
        changes: l.changes.clone(),
        volumes: volumes.clone(),
        seconds: l.seconds,
        interface_names: l.interface_names.clone(),
    };
    for (i, (d, v)) in disks.iter().zip(&volumes).enumerate() {
        if i == 0 {
            // Disk 0's record is the whole outcome; it reads as its own volume's too.
            write_json(&d.done(), &outcome).await?;
        } else {
            write_json(&d.done(), v).await?;
        }
    }
    remove(&disks[0].dir.join(LANDING)).await?;
    remove_journals(disks).await?;
    Ok(outcome)
}

/// Step 1: the overlay copied beside its volume, naming its backing file relative.
async fn journal(args: &GuestArgs, d: &Disk<'_>, overlay: &Path) -> Result<(), Error> {
    let tmp = d.dir.join(format!("{JOURNAL}.tmp"));
    tokio::fs::copy(overlay, &tmp).await.map_err(io(&tmp))?;
    let name = d
        .spec
        .path
        .file_name()
        .map_or_else(|| "disk.img".into(), |n| n.to_os_string());
    qemu_img(
        args,
        "rebase",
        &[
            "rebase".as_ref(),
            "-u".as_ref(),
            "-f".as_ref(),
            "qcow2".as_ref(),
            "-F".as_ref(),
            "raw".as_ref(),
            "-b".as_ref(),
            name.as_os_str(),
            tmp.as_os_str(),
        ],
    )
    .await?;
    sync(&tmp).await?;
    tokio::fs::rename(&tmp, d.journal())
        .await
        .map_err(io(&tmp))?;
    sync(&d.dir).await
}

async fn remove_journals(disks: &[Disk<'_>]) -> Result<(), Error> {
    for d in disks {
        remove(&d.journal()).await?;
        remove(&d.dir.join(format!("{JOURNAL}.tmp"))).await?;
    }
    Ok(())
}

/// Runs virt-v2v-in-place over the overlays: whether it succeeded, and what it said.
async fn virt_v2v(
    args: &GuestArgs,
    work: &Path,
    overlays: &[PathBuf],
) -> Result<(bool, Said), Error> {
    let mut cmd = libguestfs::command(&args.virt_v2v, work, args.kvm).await?;
    cmd.args(["--machine-readable", "-i", "disk", "-if", "qcow2"])
        .args(overlays);
    let out = libguestfs::run(cmd, "virt-v2v-in-place", None).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The pod's log keeps what virt-v2v said, for whoever reads it.
    print!("{stdout}");
    eprint!("{stderr}");
    let mut said = read_said(&stdout);
    if !out.status.success() && said.errors.is_empty() {
        said.errors = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| vec![l.trim().chars().take(MAX_LINE).collect()])
            .unwrap_or_default();
    }
    Ok((out.status.success(), said))
}

/// Bytes an overlay holds itself (not its backing file's).
async fn allocated(args: &GuestArgs, overlay: &Path) -> Result<u64, Error> {
    #[derive(Deserialize)]
    struct Extent {
        length: u64,
        depth: u32,
        data: bool,
    }
    let out = qemu_img(
        args,
        "map",
        &[
            "map".as_ref(),
            "--output=json".as_ref(),
            "-f".as_ref(),
            "qcow2".as_ref(),
            overlay.as_os_str(),
        ],
    )
    .await?;
    let extents: Vec<Extent> = serde_json::from_str(&out).map_err(|e| Error::Qemu {
        what: "map".into(),
        detail: format!("its output: {e}"),
        missing: false,
    })?;
    Ok(extents
        .iter()
        .filter(|e| e.depth == 0 && e.data)
        .map(|e| e.length)
        .sum())
}

async fn qemu_img(
    args: &GuestArgs,
    what: &str,
    argv: &[&std::ffi::OsStr],
) -> Result<String, Error> {
    let out = Command::new(&args.qemu_img)
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| Error::Qemu {
            what: what.into(),
            detail: format!("{}: {e}", args.qemu_img.display()),
            missing: e.kind() == std::io::ErrorKind::NotFound,
        })?;
    if !out.status.success() {
        return Err(Error::Qemu {
            what: what.into(),
            detail: format!(
                "exit {}: {}",
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            missing: false,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_owned(),
        source,
    }
}

async fn mkdir(p: &Path) -> Result<(), Error> {
    tokio::fs::create_dir_all(p).await.map_err(io(p))
}

async fn exists(p: &Path) -> Result<bool, Error> {
    tokio::fs::try_exists(p).await.map_err(io(p))
}

async fn remove(p: &Path) -> Result<(), Error> {
    match tokio::fs::remove_file(p).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(p)(e)),
    }
}

/// fsync of a file or directory: what was written survives a crash of the node.
async fn sync(p: &Path) -> Result<(), Error> {
    let f = tokio::fs::File::open(p).await.map_err(io(p))?;
    f.sync_all().await.map_err(io(p))
}

async fn read_json<T: serde::de::DeserializeOwned>(p: &Path) -> Result<Option<T>, Error> {
    match tokio::fs::read(p).await {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Guest(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(p)(e)),
    }
}

/// Writes `value` to `p` whole or not at all: a synced temporary renamed into place.
async fn write_json<T: Serialize>(p: &Path, value: &T) -> Result<(), Error> {
    let tmp = p.with_extension("tmp");
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    tokio::fs::write(&tmp, bytes).await.map_err(io(&tmp))?;
    sync(&tmp).await?;
    tokio::fs::rename(&tmp, p).await.map_err(io(p))?;
    if let Some(dir) = p.parent() {
        sync(dir).await?;
    }
    Ok(())
}

/// Runs the conversion; its result to `result_file`; the exit code of [`Error::exit_code`].
pub async fn run_to_exit_code(args: GuestArgs) -> i32 {
    let outcome = match run(&args).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ferry-controller convert-guest: {e}");
            return e.exit_code();
        }
    };
    println!("{}", serde_json::to_string(&outcome).unwrap_or_default());
    if let Some(path) = &args.result_file
        && let Err(e) = std::fs::write(path, render_result(&outcome))
    {
        eprintln!(
            "ferry-controller convert-guest: writing the result to {}: {e}",
            path.display()
        );
        return TRANSIENT_EXIT_CODE;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virt_v2vs_lines_name_the_os_and_what_it_did() {
        let out = r#"{ "message": "Setting up the source: -i disk vmw.qcow2", "timestamp": "t", "type": "message" }
[   0.0] Setting up the source: -i disk vmw.qcow2
{ "message": "Converting 12.15 to run on KVM", "timestamp": "t", "type": "message" }
{ "message": "could not determine a way to update the configuration of Grub2", "timestamp": "t", "type": "warning" }
{ "message": "This guest has virtio drivers installed.", "timestamp": "t", "type": "info" }
not json"#;
        let said = read_said(out);
        assert_eq!(said.operating_system.as_deref(), Some("12.15"));
        assert_eq!(
            said.changes,
            [
                "could not determine a way to update the configuration of Grub2",
                "This guest has virtio drivers installed."
            ]
        );
        assert!(said.errors.is_empty());
    }

    #[test]
    fn no_root_device_is_no_operating_system_and_other_errors_are_not() {
        let said = read_said(
            r#"{ "message": "inspection could not detect the source guest (or physical machine).", "timestamp": "t", "type": "error" }"#,
        );
        assert!(found_no_os(&said.errors));
        assert!(!found_no_os(&["libguestfs error: appliance closed".into()]));
    }

    #[test]
    fn a_result_reads_back_and_nothing_else_reads_as_one() {
        let o = Outcome {
            operating_system: Some("12.15".into()),
            converted: true,
            changes: vec!["This guest has virtio drivers installed.".into()],
            volumes: vec![Landed {
                disk: 0,
                sha256: "ab".repeat(32),
                written_bytes: 14 << 20,
            }],
            seconds: 63,
            interface_names: vec!["kept ens192 for 00:50:56:00:00:01".into()],
        };
        assert_eq!(parse_result(&render_result(&o)), Some(o));
        assert_eq!(parse_result("exit 3: virt-v2v failed"), None);
        assert_eq!(parse_result(""), None);
    }
}
