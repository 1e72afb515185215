//! ferry-harness
