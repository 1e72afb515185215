# ferry — the two set-up commands are `make demo` and `make test`; everything they need is
# installed by the scripts they call, idempotently, and cached after the first run.
SHELL := bash
LAB_STATE ?= target/lab/state
CARGO ?= cargo

.PHONY: all tools lab-build lab build check test bench demo demo-check crds fmt clippy image image-test

all: build

## Debian/cargo tools the lab and the tests use (qemu-img, tmux, ...): installed when missing.
tools:
	@tests/lab/ensure-tools.sh

## Build the lab binaries (ferry-lab, kubectl, ferry-lab-s3) when missing or stale.
lab-build: tools
	@tests/lab/build.sh

## Run the lab in the foreground (state in $(LAB_STATE)); Ctrl-C stops it cleanly.
lab: lab-build
	target/lab/bin/ferry-lab --state-dir $(LAB_STATE)

build:
	$(CARGO) build --workspace --bins

## The OCI image (ferry-controller + qemu-img) in target/image/ferry, without Docker: a cached
## Debian root file system (debootstrap), the release binary, packed by image/ocipack.
image:
	@image/build.sh --profile release

## The image's proof (config, and inside its root: --version, convert --help, qemu-img, a VMDK
## converted as user 65532 on a read-only root); make test runs it on the image it packs.
image-test:
	$(CARGO) test -p ferry-api-tests --test image

## The fast loop, no lab: formatting, lints (product functions held to 80 lines of code, the
## sim's to 100: clippy.toml), unit, snapshot and command-line tests, and the lab
## S3 server's semantics (its own process). Run it before every commit; `make test` before a stop.
## Its unit tests read images back with qemu-img, so the tools come first.
check: tools
	$(CARGO) fmt --all --check
	.ci/module-cycles
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p ferry-controller --test e2e_real_guest -- -D warnings
	$(CARGO) clippy --workspace --lib --bins -- -D warnings -W clippy::too_many_lines
	$(CARGO) test --workspace --lib --bins
	$(CARGO) test -p ferry-controller --test cli_images
	$(CARGO) test -p ferry --test controller_cli --test frames --test snapshots --test memory
	$(CARGO) test -p ferry-crds --test samples --test docs
	$(CARGO) test -p ferry-lab-s3 --test semantics

## Every test: unit, snapshot, lab integration and end-to-end, against one shared lab.
test: lab-build
	@tests/run-tests.sh

## The lab, the controller, ferry-sim and the cockpit on a sample wave (q quits and stops all).
demo: lab-build
	@assets/demo.sh

## `make demo` with the cockpit replaced by a scripted check (make test runs it): the injected
## failures fail, a retry of each succeeds, the wave ends Succeeded, the stop leaves no process.
demo-check: lab-build
	@DEMO_HEADLESS=1 assets/demo.sh

## Benchmarks (timings live here, never in tests).
bench: lab-build
	$(CARGO) build --release --workspace --bins
	$(CARGO) bench --workspace
	FERRY_SOAK_VMS=200 $(CARGO) test -p ferry-controller --test soak -- --nocapture
	FERRY_BIN_DIR=target/release $(CARGO) test -p ferry-controller --test e2e_stop -- --nocapture

## Regenerate deploy/crds from the Rust types.
crds:
	$(CARGO) run -q -p ferry-crds --bin crdgen -- --out deploy/crds

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
