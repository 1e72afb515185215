//! The ferry cockpit: a live board of every VM migration, with keyboard actions that patch the
//! custom resources. `state` holds everything and changes only through actions; `ui` draws it.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod cli;
pub mod error;
pub mod keys;
pub mod kube;
pub mod report;
pub mod state;
pub mod strings;
pub mod ui;
pub mod verb;

pub use error::Error;
