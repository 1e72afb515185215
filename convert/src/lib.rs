//! The converter run by the conversion Job (`ferry-controller convert`): each disk of a VM read
//! off the datastore and staged in S3 with its SHA-256, in as few passes as the formats allow.
//!
//! | input | output | passes | local copy |
//! |---|---|---|---|
//! | flat extent (ESXi) | raw | one: ranges fetched in parallel → hashed → multipart upload | none |
//! | sparse / stream-optimized VMDK | raw | one: qemu-img reads the VMDK over NBD (ranges) and writes raw into the NBD sink → hashed → upload | none |
//! | flat extent | qcow2 | one: ranges fetched in parallel → [`qcow2`] writer → hashed → upload | none |
//! | sparse / stream-optimized VMDK | qcow2 | one: qemu-img's raw output as above → [`qcow2`] writer → hashed → upload | none |
//!
//! qcow2 is written by ferry, not qemu-img: qemu-img rewrites qcow2 metadata (L1/L2 tables,
//! refcounts, the header) until it exits, so its image could only be uploaded from a finished
//! local copy, read a second time. ferry's writer decides the whole layout first from where the
//! data is and writes the file front to back as the raw contents go by (hashed on the way: the
//! verification Job compares the imported volume with that hash). Zeros are not moved where
//! the source tells where data is: a flat extent's allocated areas come from vSphere's
//! `QueryChangedDiskAreas` (holes are made locally, never downloaded), a sparse VMDK's from its
//! own grain tables (qemu-img reads only allocated grains; `qemu-img map` lays out the qcow2).
//!
//! Disks of a VM run [`scratch::PARALLEL_DISKS`] at a time, parts of a disk several at a time;
//! memory is bounded by the parts in flight ([`upload::parts_in_flight`]).
//!
//! Restartable: each disk has a record beside its image ([`ferry_staging::DiskRecord`]); a disk
//! whose record says `Staged` is skipped, a previous run's open multipart upload is aborted
//! before the disk is done again, and an image is only ever taken as complete with its record.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod args;
pub mod credentials;
pub mod delta;
mod disk;
mod error;
pub mod guest;
pub mod job_contract;
mod libguestfs;
mod map;
mod nbd;
pub mod nic_names;
pub mod qcow2;
mod qemu;
mod remote;
mod report;
mod run;
pub mod scratch;
mod source;
mod upload;
pub mod verify;
mod vmdk;

pub use args::{ConvertArgs, DiskFormat, DiskSpec};
pub use credentials::Credentials;
pub use disk::{META_FORMAT, META_SOURCE_PATH, META_VIRTUAL_SIZE};
pub use error::{Error, TRANSIENT_EXIT_CODE};
pub use map::{DiskMap, Piece};
pub use report::{
    ConvertReport, DataPath, DiskReport, DiskStatus, RunSummary, cpu_seconds, peak_rss,
};
pub use run::{run, run_to_exit_code};
pub use upload::{RECORD_INTERVAL, part_size, parts_in_flight};
pub use vmdk::{DescriptorError, Extent, extents, is_descriptor};
