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

/// The long flags a `--help` lists.
fn flags(help: &str) -> std::collections::BTreeSet<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("-")
                .and_then(|r| r.split_once(", "))
                .map_or(l, |(_, r)| r);
            let name = l.strip_prefix("--")?;
            Some(
                name.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .next()?
                    .to_owned(),
            )
        })
        .collect()
}

/// `ferry controller` and `ferry-controller` are one controller: every flag of the in-cluster
/// controller's run is the cockpit's too (but those of its own process: the kubeconfig, the
/// namespace, the log format, which the cockpit has as global options).
#[test]
fn both_front_doors_list_the_same_controller_flags() {
    let ferry = std::path::Path::new(env!("CARGO_BIN_EXE_ferry"));
    let incluster = ferry.with_file_name("ferry-controller");
    assert!(
        incluster.is_file(),
        "{} is built by `cargo test --workspace --bins` (make check runs it first)",
        incluster.display()
    );
    let help = |cmd: &mut Command| String::from_utf8(cmd.output().unwrap().stdout).unwrap();
    let theirs = flags(&help(Command::new(&incluster).arg("--help")));
    let ours = flags(&help(Command::new(ferry).args(["controller", "--help"])));
    let own_process = ["kubeconfig", "namespace", "log-format", "help", "version"];
    let missing: Vec<&String> = theirs
        .iter()
        .filter(|f| !own_process.contains(&f.as_str()) && !ours.contains(*f))
        .collect();
    assert!(
        theirs.len() > 25 && missing.is_empty(),
        "ferry-controller's flags {theirs:?}; missing from `ferry controller`: {missing:?}"
    );
}

/// The embedded controller keeps the in-cluster controller's allow list rule: another image a
/// migration may name must be pinned too.
#[test]
fn the_embedded_controller_refuses_an_unpinned_allowed_image() {
    let pinned = format!(
        "registry.example.com/ferry/controller@sha256:{}",
        "c".repeat(64)
    );
    let (ok, err) = run(&[
        "--converter-image",
        &pinned,
        "--allowed-converter-images",
        "ferry/other:latest",
    ]);
    assert!(!ok);
    assert!(err.contains("--allowed-converter-images"), "{err}");
}
