//! `ferry controller` runs no converter image it was not given precisely: the flag is required
//! and must be pinned by digest on a named registry; the check comes before any cluster is
//! contacted (none is given here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.arg("controller").args(args);
    ferry_harness::run_offline(cmd).unwrap()
}

#[test]
fn the_embedded_controller_needs_a_pinned_converter_image() {
    let (ok, err) = run(&[]);
    assert!(!ok);
    assert!(err.contains("--converter-image"), "{err}");
    let (ok, err) = run(&["--converter-image", "ferry/controller:latest"]);
    assert!(!ok);
    assert!(err.contains("short name"), "{err}");
    let pinned = format!(
        "registry.example.com/ferry/controller@sha256:{}",
        "c".repeat(64)
    );
    let (ok, err) = run(&["--converter-image", &pinned]);
    assert!(!ok, "no cluster");
    assert!(
        !err.contains("converter-image"),
        "past the image check: {err}"
    );
}
