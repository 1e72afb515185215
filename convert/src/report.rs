//! What the converter says of its run: one JSON line per disk, the whole run's report, and
//! the process's own measures (CPU seconds, peak memory) for the benchmarks.

use serde::Serialize;

use crate::args::DiskFormat;

/// What happened to one disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskStatus {
    /// Read, converted and uploaded by this run.
    Converted,
    /// Already staged (its record says so); nothing done.
    Skipped,
}

/// How a disk's bytes went (see the table in the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataPath {
    /// Flat extent → raw: ranges straight into the upload.
    FlatStream,
    /// qemu-img from the NBD source into the NBD sink (raw output).
    QemuSink,
    /// Flat extent → qcow2: ranges into ferry's qcow2 writer, straight into the upload.
    FlatQcow2,
    /// qemu-img from the NBD source into the NBD sink (raw), then ferry's qcow2 writer.
    QemuSinkQcow2,
    /// Nothing moved (skipped).
    None,
}

/// One disk's result; printed as one JSON line on stdout.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskReport {
    pub disk: usize,
    pub datastore_path: String,
    pub key: String,
    pub status: DiskStatus,
    pub format: DiskFormat,
    pub path: DataPath,
    /// Bytes of the staged image.
    pub size: u64,
    pub sha256: String,
    /// SHA-256 of the image's raw contents (what the imported volume holds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_sha256: Option<String>,
    /// Virtual size of the image, when known (always for converted disks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_size: Option<u64>,
    /// Bytes read from the datastore.
    pub downloaded: u64,
    /// Bytes sent to S3.
    pub sent: u64,
    /// Whether the source said where the data is (holes not downloaded).
    pub allocation_known: bool,
    pub seconds: f64,
}

/// The result of a run, disk by disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConvertReport {
    pub disks: Vec<DiskReport>,
}

/// The last line a run prints: what it cost the machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub summary: bool,
    /// Peak resident memory of the converter process (VmHWM).
    pub peak_rss_bytes: u64,
    /// Peak resident memory of the largest qemu-img it ran.
    pub peak_qemu_rss_bytes: u64,
    /// Most bytes the work directory held at once, sampled while disks were converted.
    pub scratch_peak_bytes: u64,
    pub sent_bytes: u64,
    pub downloaded_bytes: u64,
    /// CPU time of the converter process (user + system), and of the qemu-img runs it waited
    /// for: where a data path's time goes on a machine with few cores.
    pub cpu_seconds: f64,
    pub qemu_cpu_seconds: f64,
}

/// `(own, waited-for children's)` CPU seconds (user + system) from `/proc/self/stat`; zeros when
/// unknown.
pub fn cpu_seconds() -> (f64, f64) {
    // Linux's USER_HZ: 100 on every architecture the converter image is built for.
    const TICKS: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the command (which may hold spaces) in parentheses; utime is field 14.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    match f.as_slice() {
        [u, s, cu, cs] => ((u + s) / TICKS, (cu + cs) / TICKS),
        _ => (0.0, 0.0),
    }
}

/// Peak resident set (VmHWM) of a process from `/proc/<pid>/status`, 0 when unknown.
pub fn peak_rss(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_are_camel_case_json() {
        let line = DiskReport {
            disk: 0,
            datastore_path: "[ds] a.vmdk".into(),
            key: "k".into(),
            status: DiskStatus::Skipped,
            format: DiskFormat::Raw,
            path: DataPath::FlatStream,
            size: 5,
            sha256: "s".into(),
            raw_sha256: None,
            virtual_size: None,
            downloaded: 0,
            sent: 5,
            allocation_known: true,
            seconds: 0.5,
        };
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&line).unwrap()).unwrap();
        assert_eq!(v["datastorePath"], "[ds] a.vmdk");
        assert_eq!(v["status"], "skipped");
        assert_eq!(v["format"], "raw");
        assert_eq!(v["path"], "flat-stream");
        assert_eq!(v["allocationKnown"], true);
        assert!(v.get("virtualSize").is_none());
    }
}
