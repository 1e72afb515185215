//! Where a flat disk's bytes are: the virtual disk as a sequence of pieces, each either data in
//! one of the datastore files (at an offset) or zeros. Built from the descriptor's extents and,
//! when the source can tell, the allocated areas; zeros are never downloaded. Pure.

use super::vmdk::Extent;

/// A run of the virtual disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// `len` bytes of file `file` (an index into the map's files) from `offset`.
    Data { file: usize, offset: u64, len: u64 },
    /// `len` bytes of zeros.
    Zero { len: u64 },
}

impl Piece {
    pub fn len(&self) -> u64 {
        match *self {
            Piece::Data { len, .. } | Piece::Zero { len } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A virtual disk laid over datastore files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskMap {
    /// Datastore file names, relative to the descriptor's directory.
    pub files: Vec<String>,
    /// In order, covering the disk without gaps; adjacent pieces of one kind are merged.
    pieces: Vec<(u64, Piece)>,
    size: u64,
}

/// Why a descriptor's extents cannot be read as a flat disk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error(
        "extent {file:?} is of type {kind}: only FLAT, VMFS and ZERO extents are read directly"
    )]
    NotFlat { file: String, kind: String },
    #[error("the descriptor names no extent")]
    Empty,
}

impl DiskMap {
    /// The map of a descriptor's extents (in order; ZERO extents have no file) with every area
    /// of the files counted as data. `zero_extents` are `(position in the extent list, sectors)`
    /// of ZERO extents, which [`super::vmdk::extents`] leaves out.
    pub fn from_extents(
        extents: &[Extent],
        zero_extents: &[(usize, u64)],
    ) -> Result<Self, MapError> {
        let mut files: Vec<String> = Vec::new();
        let mut raw: Vec<Piece> = Vec::new();
        let mut zeros = zero_extents.iter().peekable();
        for (i, e) in extents.iter().enumerate() {
            while let Some((_, sectors)) = zeros.next_if(|(at, _)| *at <= i) {
                raw.push(Piece::Zero { len: sectors * 512 });
            }
            if e.min_len().is_none() {
                return Err(MapError::NotFlat {
                    file: e.file.clone(),
                    kind: e.kind.clone(),
                });
            }
            let file = match files.iter().position(|f| *f == e.file) {
                Some(p) => p,
                None => {
                    files.push(e.file.clone());
                    files.len() - 1
                }
            };
            raw.push(Piece::Data {
                file,
                offset: e.offset * 512,
                len: e.sectors * 512,
            });
        }
        for (_, sectors) in zeros {
            raw.push(Piece::Zero { len: sectors * 512 });
        }
        if raw.is_empty() {
            return Err(MapError::Empty);
        }
        Ok(Self::from_pieces(files, raw))
    }

    fn from_pieces(files: Vec<String>, raw: Vec<Piece>) -> Self {
        let mut pieces: Vec<(u64, Piece)> = Vec::new();
        let mut at = 0u64;
        for p in raw.into_iter().filter(|p| !p.is_empty()) {
            let merged = match (pieces.last_mut(), p) {
                (Some((_, Piece::Zero { len })), Piece::Zero { len: more }) => {
                    *len += more;
                    true
                }
                (
                    Some((
                        _,
                        Piece::Data {
                            file: f0,
                            offset: o0,
                            len: l0,
                        },
                    )),
                    Piece::Data { file, offset, len },
                ) if *f0 == file && *o0 + *l0 == offset => {
                    *l0 += len;
                    true
                }
                _ => false,
            };
            if !merged {
                pieces.push((at, p));
            }
            at += p.len();
        }
        Self {
            files,
            pieces,
            size: at,
        }
    }

    /// The virtual size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes that are read from files (the rest is zeros).
    pub fn data_bytes(&self) -> u64 {
        self.pieces
            .iter()
            .map(|(_, p)| match p {
                Piece::Data { len, .. } => *len,
                Piece::Zero { .. } => 0,
            })
            .sum()
    }

    /// The areas read from files, `(start, len)` in disk order.
    pub fn data_areas(&self) -> Vec<(u64, u64)> {
        self.pieces
            .iter()
            .filter_map(|(start, p)| match p {
                Piece::Data { len, .. } => Some((*start, *len)),
                Piece::Zero { .. } => None,
            })
            .collect()
    }

    /// How many `cluster`-byte clusters of the virtual disk hold some data.
    pub fn data_clusters(&self, cluster: u64) -> u64 {
        let mut count = 0u64;
        let mut last: Option<u64> = None;
        for (start, p) in &self.pieces {
            if let Piece::Data { len, .. } = p {
                let first = start / cluster;
                let end = (start + len - 1) / cluster;
                let from = match last {
                    Some(l) if l >= first => l + 1,
                    _ => first,
                };
                if end >= from {
                    count += end - from + 1;
                }
                last = Some(end);
            }
        }
        count
    }

    /// The same map where only the `areas` (`(start, len)` in virtual bytes, any order, may
    /// overlap) hold data; the rest becomes zeros.
    pub fn restricted_to(&self, areas: &[(u64, u64)]) -> Self {
        let mut areas: Vec<(u64, u64)> = areas
            .iter()
            .filter(|(_, l)| *l > 0)
            .map(|(s, l)| (*s, s.saturating_add(*l).min(self.size)))
            .filter(|(s, e)| s < e)
            .collect();
        areas.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in areas {
            match merged.last_mut() {
                Some((_, le)) if s <= *le => *le = (*le).max(e),
                _ => merged.push((s, e)),
            }
        }
        let mut raw = Vec::new();
        let mut at = 0u64;
        for (s, e) in merged {
            if s > at {
                raw.push(Piece::Zero { len: s - at });
            }
            raw.extend(self.pieces_in(s, e - s));
            at = e;
        }
        if at < self.size {
            raw.push(Piece::Zero {
                len: self.size - at,
            });
        }
        Self::from_pieces(self.files.clone(), raw)
    }

    /// The pieces covering `[offset, offset + len)`, cut to it (past the end: nothing).
    pub fn pieces_in(&self, offset: u64, len: u64) -> Vec<Piece> {
        let end = offset.saturating_add(len).min(self.size);
        let first = self
            .pieces
            .partition_point(|(start, p)| start + p.len() <= offset);
        let mut out = Vec::new();
        for (start, p) in &self.pieces[first..] {
            if *start >= end {
                break;
            }
            let from = offset.max(*start);
            let to = end.min(start + p.len());
            out.push(match *p {
                Piece::Zero { .. } => Piece::Zero { len: to - from },
                Piece::Data {
                    file, offset: o, ..
                } => Piece::Data {
                    file,
                    offset: o + (from - start),
                    len: to - from,
                },
            });
        }
        out
    }

    /// The least length each file must have for the map to be read.
    pub fn needed_file_lengths(&self) -> Vec<u64> {
        let mut need = vec![0u64; self.files.len()];
        for (_, p) in &self.pieces {
            if let Piece::Data { file, offset, len } = *p {
                need[file] = need[file].max(offset + len);
            }
        }
        need
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(file: &str, sectors: u64, offset: u64) -> Extent {
        Extent {
            file: file.into(),
            kind: "FLAT".into(),
            sectors,
            offset,
        }
    }

    #[test]
    fn one_flat_extent_is_one_data_piece() {
        let m = DiskMap::from_extents(&[flat("d-flat.vmdk", 8, 0)], &[]).unwrap();
        assert_eq!(m.size(), 4096);
        assert_eq!(m.data_bytes(), 4096);
        assert_eq!(
            m.pieces_in(512, 1024),
            vec![Piece::Data {
                file: 0,
                offset: 512,
                len: 1024
            }]
        );
        assert_eq!(m.needed_file_lengths(), vec![4096]);
    }

    #[test]
    fn split_flat_extents_and_zero_extents_line_up() {
        // RW 2 FLAT "a" 1 / RW 4 ZERO / RW 2 FLAT "b" 0
        let m = DiskMap::from_extents(&[flat("a", 2, 1), flat("b", 2, 0)], &[(1, 4)]).unwrap();
        assert_eq!(m.size(), 8 * 512);
        assert_eq!(m.files, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(
            m.pieces_in(0, 8 * 512),
            vec![
                Piece::Data {
                    file: 0,
                    offset: 512,
                    len: 1024
                },
                Piece::Zero { len: 2048 },
                Piece::Data {
                    file: 1,
                    offset: 0,
                    len: 1024
                },
            ]
        );
        assert_eq!(m.needed_file_lengths(), vec![1536, 1024]);
        assert_eq!(m.pieces_in(1100, 100), vec![Piece::Zero { len: 100 }]);
        assert_eq!(m.pieces_in(9000, 100), vec![]);
    }

    #[test]
    fn sparse_extents_are_not_flat() {
        let sparse = Extent {
            file: "s.vmdk".into(),
            kind: "SPARSE".into(),
            sectors: 8,
            offset: 0,
        };
        assert!(matches!(
            DiskMap::from_extents(&[sparse], &[]),
            Err(MapError::NotFlat { .. })
        ));
        assert_eq!(DiskMap::from_extents(&[], &[]), Err(MapError::Empty));
    }

    #[test]
    fn allocated_areas_leave_the_rest_as_zeros() {
        let m = DiskMap::from_extents(&[flat("f", 16, 0)], &[]).unwrap();
        // Overlapping, unordered, one past the end.
        let r = m.restricted_to(&[(4096, 4096), (0, 1024), (512, 1024), (7000, 99_999)]);
        assert_eq!(r.size(), 8192);
        assert_eq!(
            r.pieces_in(0, 8192),
            vec![
                Piece::Data {
                    file: 0,
                    offset: 0,
                    len: 1536
                },
                Piece::Zero { len: 2560 },
                Piece::Data {
                    file: 0,
                    offset: 4096,
                    len: 4096
                },
            ]
        );
        assert_eq!(r.data_bytes(), 1536 + 4096);
        assert_eq!(r.data_clusters(1024), 2 + 4);
        assert_eq!(r.data_clusters(4096), 2, "clusters 0 and 1");
        assert_eq!(m.data_clusters(3000), 3);
        assert_eq!(m.restricted_to(&[]).data_bytes(), 0);
    }
}
