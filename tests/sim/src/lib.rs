//! ferry-sim
