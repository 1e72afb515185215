//! The controller runs no converter image it was not given precisely: without
//! `--converter-image`, or with a short or unpinned one, it refuses to start and says why —
//! before it reads a kubeconfig or contacts any cluster (none is given here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// Runs the controller binary with `args` and no FERRY_CONVERTER_IMAGE; returns its exit
/// status's success and its stderr.
fn run(args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry-controller"));
    cmd.args(args);
    ferry_harness::run_offline(cmd).unwrap()
}

#[test]
fn no_converter_image_no_controller() {
    let (ok, err) = run(&[]);
    assert!(!ok);
    assert!(
        err.contains("--converter-image") && err.contains("required"),
        "{err}"
    );
}

#[test]
fn a_short_or_unpinned_converter_image_is_refused_naming_what_is_missing() {
    let digest = "b".repeat(64);
    for (image, why) in [
        ("ferry/controller:latest".to_owned(), "short name"),
        (
            "registry.example.com/ferry/controller:0.1.0".to_owned(),
            "not pinned by digest",
        ),
    ] {
        let (ok, err) = run(&["--converter-image", &image]);
        assert!(!ok, "{image}");
        assert!(err.contains(why) && err.contains(&image), "{image}: {err}");
    }
    let pinned = format!("registry.example.com/ferry/controller@sha256:{digest}");
    let (ok, err) = run(&[
        "--converter-image",
        &pinned,
        "--allowed-converter-images",
        "registry.example.com/debug:1",
    ]);
    assert!(!ok);
    assert!(
        err.contains("--allowed-converter-images") && err.contains("not pinned"),
        "{err}"
    );
    // Pinned, it gets past the check: what stops it now is the missing kubeconfig.
    let (ok, err) = run(&["--converter-image", &pinned]);
    assert!(!ok);
    assert!(!err.contains("converter-image"), "{err}");
    assert!(err.contains("kubeconfig"), "{err}");
}
