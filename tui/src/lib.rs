//! ferry
