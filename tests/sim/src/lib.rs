//! ferry-sim: plays CDI, KubeVirt and the kubelet for the ferry lab, through their public
//! contracts only (object shapes and status fields), so the controller can be tested for real.
//!
//! Every decision is a pure function of the observed objects and the clock (tested without
//! I/O); the watchers, status writes, S3 copies and host processes live at the edges.

pub mod clock;
pub mod conditions;
pub mod context;
pub mod datavolumes;
pub mod domain;
mod error;
pub mod faults;
pub mod handler;
pub mod image;
pub mod jobs;
pub mod kubelet;
pub mod kubevirt;
pub mod logs;
pub mod migration;
pub mod netstat;
pub mod node;
pub mod pods;
pub mod process;
pub mod pvcs;
pub mod qemu;
/// Quantities, shared with the controller.
pub use ferry_crds::quantity;
pub mod s3;
pub mod scheduling;
pub mod sim;
pub mod storage;
pub mod vms;
pub mod volumes;

pub use context::{KubeVirt, Settings, Sim};
pub use error::{Error, Result};
