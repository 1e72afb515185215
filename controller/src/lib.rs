//! ferry-controller: reconciles VirtualMachineMigration and MigrationWave.
//!
//! `reconcile` holds the migration controller (one module per checkpoint, pure decisions over a
//! scope, I/O at the edges), `children` the pure builders of what it creates, `wave` the
//! MigrationWave controller; [`run`] runs both, in-cluster or inside the cockpit.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod children;
pub mod context;
pub mod convert;
mod error;
pub mod events;
pub mod health;
pub mod metrics;
pub mod reconcile;
pub mod run;
pub mod staging;
pub mod tls;
pub mod vsphere;
pub mod wave;

pub use error::{Error, Result};
pub use run::{RunOptions, run, run_until};
