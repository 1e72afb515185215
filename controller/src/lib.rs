//! ferry-controller: reconciles VirtualMachineMigration and MigrationWave.
//!
//! `reconcile` holds the migration controller (one module per checkpoint, pure decisions over a
//! scope, I/O at the edges), `ports` the vSphere and S3 systems it talks to, `apis` the CDI,
//! KubeVirt and Job contracts its children live in, `children` the pure builders of what it
//! creates, `wave` the MigrationWave controller; [`run`] runs both, in-cluster or inside the
//! cockpit. See ARCHITECTURE.md at the repository root.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod admission_guard;
pub mod apis;
pub mod args;
pub mod binding;
pub mod caches;
pub mod children;
pub mod client;
pub mod context;
#[cfg(test)]
mod contract_tests;
pub mod copy_slots;
mod error;
pub mod events;
pub mod freshness;
pub mod health;
pub mod kubeio;
pub mod leader;
pub mod metrics;
pub mod migrations;
pub mod pacing;
pub mod policy;
pub mod ports;
pub mod problem;
pub mod quota;
pub mod reconcile;
pub mod run;
pub mod wave;

pub use error::{Error, Result};
pub use run::{ProofKeySecret, RunOptions, run, run_elected, run_until};
