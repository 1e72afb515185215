//! ferry-controller
