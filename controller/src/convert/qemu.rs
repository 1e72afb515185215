//! `qemu-img` as a process: convert, and read an image's virtual size.

use std::path::Path;

use tokio::process::Command;

use super::{Error, OutputFormat};

async fn run(qemu_img: &Path, what: &str, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>, Error> {
    let out = Command::new(qemu_img)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| Error::Qemu {
            what: what.to_owned(),
            detail: format!("cannot run {}: {e}", qemu_img.display()),
            missing: e.kind() == std::io::ErrorKind::NotFound,
        })?;
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

/// `qemu-img convert -f vmdk -O FORMAT src dest`.
pub async fn convert(
    qemu_img: &Path,
    src: &Path,
    dest: &Path,
    format: OutputFormat,
) -> Result<(), Error> {
    let args = [
        "convert".as_ref(),
        "-f".as_ref(),
        "vmdk".as_ref(),
        "-O".as_ref(),
        format.as_str().as_ref(),
        src.as_os_str(),
        dest.as_os_str(),
    ];
    run(qemu_img, "convert", &args).await.map(|_| ())
}

/// `qemu-img convert -f FORMAT -O raw src dest`: an image's raw contents.
pub async fn to_raw(
    qemu_img: &Path,
    src: &Path,
    format: OutputFormat,
    dest: &Path,
) -> Result<(), Error> {
    let args = [
        "convert".as_ref(),
        "-f".as_ref(),
        format.as_str().as_ref(),
        "-O".as_ref(),
        "raw".as_ref(),
        src.as_os_str(),
        dest.as_os_str(),
    ];
    run(qemu_img, "convert to raw", &args).await.map(|_| ())
}

/// The virtual size in bytes of an image (`qemu-img info --output=json`).
pub async fn virtual_size(
    qemu_img: &Path,
    image: &Path,
    format: OutputFormat,
) -> Result<u64, Error> {
    let args = [
        "info".as_ref(),
        "--output=json".as_ref(),
        "-f".as_ref(),
        format.as_str().as_ref(),
        image.as_os_str(),
    ];
    let out = run(qemu_img, "info", &args).await?;
    parse_virtual_size(&out).ok_or_else(|| Error::Qemu {
        what: "info".into(),
        detail: format!("no virtual-size in {}", String::from_utf8_lossy(&out)),
        missing: false,
    })
}

fn parse_virtual_size(json: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()?
        .get("virtual-size")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_size_is_read_from_info_json() {
        let info = br#"{ "virtual-size": 67108864, "filename": "x.raw", "format": "raw", "actual-size": 4096 }"#;
        assert_eq!(parse_virtual_size(info), Some(67_108_864));
        assert_eq!(parse_virtual_size(b"{}"), None);
        assert_eq!(parse_virtual_size(b"not json"), None);
    }
}
