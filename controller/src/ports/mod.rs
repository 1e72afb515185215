//! The two outside systems a reconcile talks to besides Kubernetes — the vSphere source and the
//! S3 staging store — behind small traits, so that decisions and tests do not need them. Errors
//! come back already classified as a [`Problem`](crate::problem::Problem).

pub mod source;
pub mod staging;

pub use source::{Discovered, Marks, SourceApi, SourceLogin, SourceTrust, VsphereSource};
pub use staging::{ConverterProgress, S3Staging, StagedObject, StagingApi, StagingLogin};
