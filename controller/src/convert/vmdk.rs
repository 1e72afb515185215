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

/// One extent line of a descriptor that names a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    /// File name, relative to the descriptor's directory.
    pub file: String,
    /// `FLAT`, `VMFS`, `SPARSE`, `VMFSSPARSE`, `SESPARSE`, ...
    pub kind: String,
    /// Size in 512-byte sectors.
    pub sectors: u64,
    /// Start of the data in the file, in sectors (flat extents only).
    pub offset: u64,
}

impl Extent {
    /// The least file size a flat extent needs; `None` for sparse kinds, whose files are smaller.
    pub fn min_len(&self) -> Option<u64> {
        let flat = self.kind.eq_ignore_ascii_case("FLAT") || self.kind.eq_ignore_ascii_case("VMFS");
        flat.then(|| self.offset.saturating_add(self.sectors).saturating_mul(512))
    }
}

/// The extents a descriptor names, in order (extents of type ZERO have no file and are left out).
pub fn extents(descriptor: &str) -> Result<Vec<Extent>, DescriptorError> {
    let mut out = Vec::new();
    for (i, raw) in descriptor.lines().enumerate() {
        let line = raw.trim();
        let Some(access) = line.split_whitespace().next() else {
            continue;
        };
        if !matches!(access, "RW" | "RDONLY" | "NOACCESS") {
            continue;
        }
        let malformed = || DescriptorError::Malformed {
            line: i + 1,
            text: line.to_owned(),
        };
        // RW <sectors> <type> ["file name" [offset]]
        let mut words = line
            .splitn(4, char::is_whitespace)
            .filter(|w| !w.is_empty());
        let _access = words.next();
        let sectors: u64 = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(malformed)?;
        let kind = words.next().ok_or_else(malformed)?;
        if kind.eq_ignore_ascii_case("ZERO") {
            continue;
        }
        let rest = words.next().ok_or_else(malformed)?.trim();
        let (name, tail) = rest
            .strip_prefix('"')
            .and_then(|r| r.split_once('"'))
            .ok_or_else(malformed)?;
        if name.is_empty()
            || name.contains('/')
            || name.contains('\\')
            || name == "."
            || name == ".."
        {
            return Err(DescriptorError::UnsafeExtent {
                line: i + 1,
                name: name.to_owned(),
            });
        }
        let offset = match tail.trim() {
            "" => 0,
            t => t.parse().map_err(|_| malformed())?,
        };
        out.push(Extent {
            file: name.to_owned(),
            kind: kind.to_owned(),
            sectors,
            offset,
        });
    }
    Ok(out)
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
        let e = extents(ESXI).unwrap();
        assert_eq!(
            e,
            vec![Extent {
                file: "my vm-flat.vmdk".into(),
                kind: "VMFS".into(),
                sectors: 20_971_520,
                offset: 0
            }]
        );
        assert_eq!(e[0].min_len(), Some(10 << 30));
    }

    #[test]
    fn split_and_zero_extents() {
        let d = "# Disk DescriptorFile\nRW 4192256 SPARSE \"d-s001.vmdk\"\nRW 4192256 FLAT \"d-f002.vmdk\" 0\nRW 100 ZERO\nRDONLY 8 VMFSSPARSE \"d-delta.vmdk\"\n";
        let e = extents(d).unwrap();
        let files: Vec<_> = e.iter().map(|e| e.file.as_str()).collect();
        assert_eq!(files, vec!["d-s001.vmdk", "d-f002.vmdk", "d-delta.vmdk"]);
        assert_eq!(
            e[0].min_len(),
            None,
            "sparse extents are smaller than their capacity"
        );
        assert_eq!(e[1].min_len(), Some(4_192_256 * 512));
        let shifted = extents("RW 8 FLAT \"f.vmdk\" 2\n").unwrap();
        assert_eq!(shifted[0].min_len(), Some(10 * 512));
    }

    #[test]
    fn extents_outside_the_directory_are_refused() {
        for name in ["../etc/passwd", "/abs-flat.vmdk", "sub/x.vmdk", ".."] {
            let d = format!("RW 1 FLAT \"{name}\" 0\n");
            assert!(
                matches!(extents(&d), Err(DescriptorError::UnsafeExtent { .. })),
                "{name}"
            );
        }
        assert!(matches!(
            extents("RW 1 FLAT\n"),
            Err(DescriptorError::Malformed { line: 1, .. })
        ));
        assert!(matches!(
            extents("RW 1 FLAT noquotes\n"),
            Err(DescriptorError::Malformed { .. })
        ));
        assert!(matches!(
            extents("RW many FLAT \"f\"\n"),
            Err(DescriptorError::Malformed { .. })
        ));
        assert!(matches!(
            extents("RW 1 FLAT \"f\" x\n"),
            Err(DescriptorError::Malformed { .. })
        ));
    }

    #[test]
    fn a_sparse_vmdk_is_not_a_descriptor() {
        assert!(!is_descriptor(b"KDMV\x01\x00\x00\x00"));
    }
}
