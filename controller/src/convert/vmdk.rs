//! VMDK descriptor files: on ESXi and vCenter `disk.vmdk` is a small text file naming the data
//! extents (`disk-flat.vmdk`), which must be downloaded beside it for `qemu-img` to read it.

/// The first bytes of a text descriptor; a monolithic sparse VMDK starts with the `KDMV` magic.
const DESCRIPTOR_MAGIC: &str = "# Disk DescriptorFile";
/// Descriptors are a few hundred bytes; anything larger is a data file.
pub const MAX_DESCRIPTOR_BYTES: u64 = 64 * 1024;

/// Whether `head` (the start of a downloaded `.vmdk`) is a text descriptor.
pub fn is_descriptor(head: &[u8]) -> bool {
    head.starts_with(DESCRIPTOR_MAGIC.as_bytes())
}

/// Why a descriptor cannot be followed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error("VMDK descriptor line {line}: extent file name {name:?} leaves the disk's directory")]
    UnsafeExtent { line: usize, name: String },
    #[error("VMDK descriptor line {line} is not an extent description: {text:?}")]
    Malformed { line: usize, text: String },
}

/// The data files a descriptor names, in order (extents of type ZERO have none).
pub fn extent_files(descriptor: &str) -> Result<Vec<String>, DescriptorError> {
    let mut files = Vec::new();
    for (i, raw) in descriptor.lines().enumerate() {
        let line = raw.trim();
        let Some(access) = line.split_whitespace().next() else { continue };
        if !matches!(access, "RW" | "RDONLY" | "NOACCESS") {
            continue;
        }
        let malformed = || DescriptorError::Malformed { line: i + 1, text: line.to_owned() };
        // RW <sectors> <type> ["file name" [offset]]
        let mut words = line.splitn(4, char::is_whitespace).filter(|w| !w.is_empty());
        let (_access, _size, kind) =
            (words.next(), words.next().ok_or_else(malformed)?, words.next().ok_or_else(malformed)?);
        if kind.eq_ignore_ascii_case("ZERO") {
            continue;
        }
        let rest = words.next().ok_or_else(malformed)?.trim();
        let name = rest.strip_prefix('"').and_then(|r| r.split_once('"')).map(|(n, _)| n).ok_or_else(malformed)?;
        if name.is_empty() || name.contains('/') || name.contains('\\') || name == "." || name == ".." {
            return Err(DescriptorError::UnsafeExtent { line: i + 1, name: name.to_owned() });
        }
        files.push(name.to_owned());
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ESXI: &str = r#"# Disk DescriptorFile
version=1
encoding="UTF-8"
CID=fffffffe
parentCID=ffffffff
createType="vmfs"

# Extent description
RW 20971520 VMFS "my vm-flat.vmdk"

# The Disk Data Base
#DDB

ddb.adapterType = "lsilogic"
"#;

    #[test]
    fn an_esxi_descriptor_names_its_flat_extent() {
        assert!(is_descriptor(ESXI.as_bytes()));
        assert_eq!(extent_files(ESXI).unwrap(), vec!["my vm-flat.vmdk".to_string()]);
    }

    #[test]
    fn split_and_zero_extents() {
        let d = "# Disk DescriptorFile\nRW 4192256 SPARSE \"d-s001.vmdk\"\nRW 4192256 FLAT \"d-f002.vmdk\" 0\nRW 100 ZERO\nRDONLY 8 VMFSSPARSE \"d-delta.vmdk\"\n";
        assert_eq!(extent_files(d).unwrap(), vec!["d-s001.vmdk", "d-f002.vmdk", "d-delta.vmdk"]);
    }

    #[test]
    fn extents_outside_the_directory_are_refused() {
        for name in ["../etc/passwd", "/abs-flat.vmdk", "sub/x.vmdk", ".."] {
            let d = format!("RW 1 FLAT \"{name}\" 0\n");
            assert!(matches!(extent_files(&d), Err(DescriptorError::UnsafeExtent { .. })), "{name}");
        }
        assert!(matches!(extent_files("RW 1 FLAT\n"), Err(DescriptorError::Malformed { line: 1, .. })));
        assert!(matches!(extent_files("RW 1 FLAT noquotes\n"), Err(DescriptorError::Malformed { .. })));
    }

    #[test]
    fn a_sparse_vmdk_is_not_a_descriptor() {
        assert!(!is_descriptor(b"KDMV\x01\x00\x00\x00"));
    }
}
