//! VMDK descriptor files: on ESXi and vCenter `disk.vmdk` is a small text file naming the data
//! extents (`disk-flat.vmdk`), which must be downloaded beside it for `qemu-img` to read it.

/// The first bytes of a text descriptor; a monolithic sparse VMDK starts with the `KDMV` magic.
const DESCRIPTOR_MAGIC: &str = "# Disk DescriptorFile";
/// Descriptors are a few hundred bytes; anything larger is a data file.
pub const MAX_DESCRIPTOR_BYTES: u64 = 64 * 1024;

/// What a hosted sparse VMDK's header says (`SparseExtentHeader`, little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseHeader {
    /// Virtual size in bytes.
    pub capacity: u64,
    /// Grains are compressed (stream-optimized, as in OVAs).
    pub compressed: bool,
}

/// The header of a single-file sparse VMDK (`KDMV` magic), `None` for anything else.
pub fn sparse_header(head: &[u8]) -> Option<SparseHeader> {
    if head.len() < 79 || &head[..4] != b"KDMV" {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let flags = u32_at(8);
    let compress = u16::from_le_bytes([head[77], head[78]]);
    Some(SparseHeader {
        capacity: u64_at(12).saturating_mul(512),
        compressed: flags & (1 << 16) != 0 || compress != 0,
    })
}

/// The ZERO extents of a descriptor, which [`extents`] leaves out: `(number of file extents
/// before it, sectors)`.
pub fn zero_extents(descriptor: &str) -> Vec<(usize, u64)> {
    let mut files = 0usize;
    let mut out = Vec::new();
    for raw in descriptor.lines() {
        let mut words = raw.split_whitespace();
        if !matches!(words.next(), Some("RW" | "RDONLY" | "NOACCESS")) {
            continue;
        }
        let sectors = words.next().and_then(|w| w.parse::<u64>().ok());
        match (sectors, words.next()) {
            (Some(n), Some(kind)) if kind.eq_ignore_ascii_case("ZERO") => out.push((files, n)),
            (Some(_), Some(_)) => files += 1,
            _ => {}
        }
    }
    out
}

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

    #[test]
    fn sparse_headers_give_capacity_and_compression() {
        let mut h = vec![0u8; 512];
        h[..4].copy_from_slice(b"KDMV");
        h[12..20].copy_from_slice(&(2048u64).to_le_bytes());
        assert_eq!(
            sparse_header(&h),
            Some(SparseHeader {
                capacity: 1 << 20,
                compressed: false
            })
        );
        h[8..12].copy_from_slice(&(1u32 << 16 | 1 << 17 | 1).to_le_bytes());
        h[77] = 1;
        assert!(sparse_header(&h).unwrap().compressed);
        assert_eq!(sparse_header(ESXI.as_bytes()), None);
        assert_eq!(sparse_header(b"KDMV"), None, "too short");
    }

    #[test]
    fn zero_extents_are_placed_among_the_file_extents() {
        let d = "RW 4 FLAT \"a\" 0\nRW 100 ZERO\nRW 4 FLAT \"b\" 0\nRW 8 ZERO\n";
        assert_eq!(zero_extents(d), vec![(1, 100), (2, 8)]);
        assert_eq!(zero_extents(ESXI), vec![]);
    }
}
