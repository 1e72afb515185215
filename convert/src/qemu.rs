//! `qemu-img` as a process: image info, the qcow2 size of a source, and convert — reading its
//! source, and for raw output writing its target, through the converter's NBD exports.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::error::Error;

/// The largest peak resident set of any qemu-img run so far.
static PEAK_CHILD_RSS: AtomicU64 = AtomicU64::new(0);

/// The largest peak resident set (VmHWM) of the qemu-img processes this run started.
pub fn peak_child_rss() -> u64 {
    PEAK_CHILD_RSS.load(Ordering::Relaxed)
}

async fn run(qemu_img: &Path, what: &str, args: &[&OsStr]) -> Result<Vec<u8>, Error> {
    let spawn_err = |e: std::io::Error| Error::Qemu {
        what: what.to_owned(),
        detail: format!("cannot run {}: {e}", qemu_img.display()),
        missing: e.kind() == std::io::ErrorKind::NotFound,
    };
    let mut child = Command::new(qemu_img)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(spawn_err)?;
    let pid = child.id().map(|p| p.to_string()).unwrap_or_default();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let read_out = async {
        let mut b = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut b).await;
        }
        b
    };
    let read_err = async {
        let mut b = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut b).await;
        }
        b
    };
    // The child's own peak (VmHWM only grows): sampled while it runs.
    let work = async { tokio::join!(child.wait(), read_out, read_err) };
    tokio::pin!(work);
    let (status, stdout, stderr) = loop {
        tokio::select! {
            r = &mut work => break r,
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                PEAK_CHILD_RSS.fetch_max(super::report::peak_rss(&pid), Ordering::Relaxed);
            }
        }
    };
    let status = status.map_err(spawn_err)?;
    let out = std::process::Output {
        status,
        stdout,
        stderr,
    };
    if !out.status.success() {
        return Err(Error::Qemu {
            what: what.to_owned(),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            missing: false,
        });
    }
    Ok(out.stdout)
}

fn json_u64(what: &str, out: &[u8], field: &str) -> Result<u64, Error> {
    serde_json::from_slice::<serde_json::Value>(out)
        .ok()
        .and_then(|v| v.get(field).and_then(serde_json::Value::as_u64))
        .ok_or_else(|| Error::Qemu {
            what: what.to_owned(),
            detail: format!("no {field} in {}", String::from_utf8_lossy(out)),
            missing: false,
        })
}

/// The virtual size of image `uri` in `format`.
pub async fn virtual_size(qemu_img: &Path, format: &str, uri: &str) -> Result<u64, Error> {
    let args: [&OsStr; 5] = [
        "info".as_ref(),
        "--output=json".as_ref(),
        "-f".as_ref(),
        format.as_ref(),
        uri.as_ref(),
    ];
    let out = run(qemu_img, "info", &args).await?;
    json_u64("info", &out, "virtual-size")
}

/// Where image `uri`'s data is: `(start, len)` of the areas `qemu-img map` reports as data (a
/// sparse VMDK's allocated grains, compressed or not); the rest reads as zeros.
pub async fn data_areas(
    qemu_img: &Path,
    format: &str,
    uri: &str,
) -> Result<Vec<(u64, u64)>, Error> {
    let args: [&OsStr; 5] = [
        "map".as_ref(),
        "--output=json".as_ref(),
        "-f".as_ref(),
        format.as_ref(),
        uri.as_ref(),
    ];
    let out = run(qemu_img, "map", &args).await?;
    parse_map(&out)
}

fn parse_map(out: &[u8]) -> Result<Vec<(u64, u64)>, Error> {
    let bad = |detail: String| Error::Qemu {
        what: "map".to_owned(),
        detail,
        missing: false,
    };
    let entries: Vec<serde_json::Value> = serde_json::from_slice(out)
        .map_err(|e| bad(format!("{e} in {}", String::from_utf8_lossy(out))))?;
    let mut areas = Vec::new();
    for e in entries {
        let field = |name: &str| {
            e.get(name)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| bad(format!("no {name} in {e}")))
        };
        if e.get("data").and_then(serde_json::Value::as_bool) == Some(true) {
            areas.push((field("start")?, field("length")?));
        }
    }
    Ok(areas)
}

/// `qemu-img convert -n --target-is-zero -f FORMAT -O raw SOURCE TARGET` into an existing NBD
/// target: without `-W` qemu-img writes in ascending order, and `--target-is-zero` lets it skip
/// zero areas (the sink fills them).
pub async fn convert_to_raw_target(
    qemu_img: &Path,
    format: &str,
    source: &str,
    target: &str,
) -> Result<(), Error> {
    let args: [&OsStr; 9] = [
        "convert".as_ref(),
        "-n".as_ref(),
        "--target-is-zero".as_ref(),
        "-f".as_ref(),
        format.as_ref(),
        "-O".as_ref(),
        "raw".as_ref(),
        source.as_ref(),
        target.as_ref(),
    ];
    run(qemu_img, "convert", &args).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_from_json() {
        let info = br#"{ "virtual-size": 67108864, "format": "raw" }"#;
        assert_eq!(json_u64("info", info, "virtual-size").unwrap(), 67_108_864);
        assert!(json_u64("info", b"{}", "virtual-size").is_err());
        assert!(json_u64("info", b"nope", "virtual-size").is_err());
    }

    #[test]
    fn the_map_keeps_the_data_areas() {
        let map = br#"[{ "start": 0, "length": 65536, "depth": 0, "present": true, "zero": false, "data": true, "compressed": false, "offset": 327680},
{ "start": 65536, "length": 1048576, "depth": 0, "present": false, "zero": true, "data": false, "compressed": false},
{ "start": 1114112, "length": 131072, "depth": 0, "present": true, "zero": false, "data": true, "compressed": true}]"#;
        assert_eq!(
            parse_map(map).unwrap(),
            vec![(0, 65536), (1_114_112, 131_072)]
        );
        assert!(parse_map(b"[{\"data\": true}]").is_err(), "no start");
        assert!(parse_map(b"nope").is_err());
    }
}
