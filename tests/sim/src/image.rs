//! What CDI's importer does with a `kubevirt` content-type image once the bytes are in: a
//! qcow2 or VMDK image is converted to raw with `qemu-img`, a raw one is used as is.

use std::path::Path;

use crate::{Error, Result};

/// Disk image formats the importer tells apart by their magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Raw,
    Qcow2,
    Vmdk,
}

impl Format {
    /// The format named by the first bytes of an image (raw when nothing matches).
    pub fn detect(head: &[u8]) -> Format {
        if head.starts_with(b"QFI\xfb") {
            Format::Qcow2
        } else if head.starts_with(b"KDMV") {
            Format::Vmdk
        } else {
            Format::Raw
        }
    }

    fn qemu_name(self) -> &'static str {
        match self {
            Format::Raw => "raw",
            Format::Qcow2 => "qcow2",
            Format::Vmdk => "vmdk",
        }
    }
}

/// Moves the downloaded image at `part` to `dest` as raw, converting it when it is not.
///
/// Errors: the file cannot be read or renamed; `qemu-img` is missing or rejects the image.
pub async fn install_raw(part: &Path, dest: &Path) -> Result<Format> {
    let mut head = [0u8; 4];
    {
        use tokio::io::AsyncReadExt;
        let mut f = tokio::fs::File::open(part)
            .await
            .map_err(|e| Error::io(part, e))?;
        let mut n = 0;
        while n < head.len() {
            let got = f
                .read(&mut head[n..])
                .await
                .map_err(|e| Error::io(part, e))?;
            if got == 0 {
                break;
            }
            n += got;
        }
    }
    let format = Format::detect(&head);
    if format == Format::Raw {
        tokio::fs::rename(part, dest)
            .await
            .map_err(|e| Error::io(dest, e))?;
        return Ok(format);
    }
    let tmp = dest.with_extension("img.conv");
    let out = tokio::process::Command::new("qemu-img")
        .args(["convert", "-f", format.qemu_name(), "-O", "raw"])
        .arg(part)
        .arg(&tmp)
        .output()
        .await
        .map_err(|e| Error::Container(format!("qemu-img (install qemu-utils): {e}")))?;
    let _ = tokio::fs::remove_file(part).await;
    if !out.status.success() {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(Error::Container(format!(
            "qemu-img convert from {}: {}",
            format.qemu_name(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    tokio::fs::rename(&tmp, dest)
        .await
        .map_err(|e| Error::io(dest, e))?;
    Ok(format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_formats_by_their_magic() {
        assert_eq!(Format::detect(b"QFI\xfb\0\0\0\x03"), Format::Qcow2);
        assert_eq!(Format::detect(b"KDMV\x01\0\0\0"), Format::Vmdk);
        assert_eq!(Format::detect(b"\xeb\x63\x90\x10"), Format::Raw);
        assert_eq!(Format::detect(b""), Format::Raw);
    }
}
