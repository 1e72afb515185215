//! The shared lab harness: every integration test and benchmark reaches the lab through here.
//!
//! `lab()` starts the lab once per test binary (building it first when needed) or reuses the
//! one named by `FERRY_LAB_STATE`; each test takes its own namespace and its own vcsim VMs.

mod error;
mod info;
mod namespace;
mod ports;
mod process;
mod start;
mod vmdk;
mod wait;

pub use error::Error;
pub use info::{InventoryDisk, InventoryNic, InventoryVm, KubeVirtInfo, LabInfo};
pub use namespace::TestNamespace;
pub use ports::free_port;
pub use process::{ChildGuard, run_offline};
pub use start::{KubeVirt, Lab, lab, lab_with, repo_root, run_state_dir};
pub use vmdk::{DiskKind, RealDisk, put_disk, put_vmdk, qemu_img};
pub use wait::eventually;

/// The converter image the lab's controllers are given (`--converter-image` has no default and
/// takes only a reference on a named registry pinned by digest). ferry-sim runs the Job's
/// command from the workspace whatever the image, so nothing pulls it; `.test` is a reserved
/// domain, so it can never name a real registry.
pub const LAB_CONVERTER_IMAGE: &str = "registry.ferry.test/ferry/controller@sha256:edf95329aade2a36c424fd070bbd114b031620b33b642329b7b5c3e7ad4cbd17";

/// Result of harness operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
