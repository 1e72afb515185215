//! The OCI image `image/build.sh` writes to target/image/ferry (`make image`; `make test` packs
//! it from its own build first): its config says non-root and the entrypoint, every blob is
//! what its digest says, and inside its unpacked root file system — as user 65532, on a
//! read-only root with a tmpfs at /tmp, as the converter Job runs — ferry-controller (which reads
//! vSphere's answers strictly: no simulator compatibility) and qemu-img run and a 16 MiB VMDK
//! converts to raw; and the guest Job's program launches libguestfs' appliance (virt-v2v under
//! TCG, as 65532) on a disk holding no operating system, and says so. The Containerfile
//! describes the same image.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_harness::repo_root;
use serde_json::Value;

fn layout() -> PathBuf {
    let dir = repo_root().join("target/image/ferry");
    assert!(
        dir.join("index.json").exists(),
        "no image in {}: `make image` (or `image/build.sh --profile debug`) builds it; make test does",
        dir.display()
    );
    dir
}

fn blob(dir: &Path, digest: &str) -> PathBuf {
    let (alg, hex) = digest.split_once(':').unwrap();
    dir.join("blobs").join(alg).join(hex)
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// The manifest and config of the one image of the layout.
fn manifest_and_config(dir: &Path) -> (Value, Value) {
    let index = json(&dir.join("index.json"));
    let m = &index["manifests"][0];
    assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert!(
        m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .unwrap()
            .starts_with("ferry/controller:")
    );
    let manifest = json(&blob(dir, m["digest"].as_str().unwrap()));
    let config = json(&blob(dir, manifest["config"]["digest"].as_str().unwrap()));
    (manifest, config)
}

#[test]
fn the_image_config_is_non_root_with_the_controller_as_entrypoint() {
    let dir = layout();
    let (manifest, config) = manifest_and_config(&dir);
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532");
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(["/usr/local/bin/ferry-controller"])
    );
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("amd64"))
    );
    let labels = &c["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(labels["org.opencontainers.image.source"].is_string());
    assert!(labels["org.opencontainers.image.revision"].is_string());
    // Every blob is what its digest and size say.
    let mut descriptors = vec![manifest["config"].clone()];
    descriptors.extend(manifest["layers"].as_array().unwrap().iter().cloned());
    assert_eq!(descriptors.len(), 3, "config, the Debian root, the binary");
    for d in descriptors {
        let path = blob(&dir, d["digest"].as_str().unwrap());
        assert_eq!(
            format!("sha256:{}", sha256(&path)),
            d["digest"].as_str().unwrap()
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            d["size"].as_u64().unwrap()
        );
    }
}

/// The image's layers unpacked, in order, into a fresh directory.
fn unpacked(dir: &Path, into: &Path) {
    let (manifest, _) = manifest_and_config(dir);
    let _ = std::fs::remove_dir_all(into);
    std::fs::create_dir_all(into).unwrap();
    for l in manifest["layers"].as_array().unwrap() {
        assert_eq!(
            l["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let st = Command::new("tar")
            .args(["-xzf"])
            .arg(blob(dir, l["digest"].as_str().unwrap()))
            .args(["--numeric-owner", "-C"])
            .arg(into)
            .status()
            .unwrap();
        assert!(st.success(), "unpacking a layer");
    }
}

/// Runs `script` (sh) in a private mount namespace where `root` is mounted read-only with a
/// tmpfs at /tmp; `$R` is the root. Commands chroot into it as 65532 themselves.
fn in_read_only_root(root: &Path, script: &str) -> std::process::Output {
    let prelude = "set -e; mount --bind \"$R\" \"$R\"; mount -o remount,bind,ro \"$R\"; \
                   mount -t tmpfs -o mode=1777 tmpfs \"$R/tmp\"; ";
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("{prelude}{script}"))
        .env("R", root)
        .output()
        .unwrap()
}

#[test]
fn inside_the_image_the_controller_and_qemu_img_run_and_a_vmdk_converts_as_non_root() {
    let dir = layout();
    let scratch = repo_root().join(format!("target/image-test-{}", std::process::id()));
    let root = scratch.join("root");
    unpacked(&dir, &root);
    // The user exists, and the binary is where the entrypoint says.
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:"))
    );
    assert!(root.join("usr/local/bin/ferry-controller").exists());

    // A 16 MiB disk with content, as a VMDK, and its raw bytes to compare with.
    let raw = scratch.join("disk.raw");
    let pattern: Vec<u8> = (0..16u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&raw, &pattern).unwrap();
    let vmdk = scratch.join("disk.vmdk");
    let st = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "vmdk"])
        .arg(&raw)
        .arg(&vmdk)
        .status()
        .unwrap();
    assert!(st.success());

    let script = format!(
        "cp {vmdk} \"$R/tmp/in.vmdk\"; chmod 0644 \"$R/tmp/in.vmdk\"; \
         run() {{ chroot --userspec=65532:65532 \"$R\" \"$@\"; }}; \
         echo \"== whoami\"; run /usr/local/bin/ferry-controller --version; \
         echo \"== convert-help\"; run /usr/local/bin/ferry-controller convert --help; \
         echo \"== qemu\"; run qemu-img --version; \
         echo \"== convert\"; run qemu-img convert -f vmdk -O raw /tmp/in.vmdk /tmp/out.raw; \
         echo \"== root-is-read-only\"; if run sh -c 'echo x > /usr/x' 2>/dev/null; then echo WRITABLE; else echo refused; fi; \
         cp \"$R/tmp/out.raw\" {out}",
        vmdk = vmdk.display(),
        out = scratch.join("out.raw").display(),
    );
    let out = in_read_only_root(&root, &script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("ferry-controller {}", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    // No simulator compatibility ships: the binary probes its own vim_rs on an answer with an
    // element vim_rs cannot build, which `vcsim_compat` would drop silently.
    assert!(
        text.contains("vSphere answers: read strictly (no simulator compatibility)"),
        "{text}"
    );
    assert!(
        text.contains("Convert a VM's disks") || text.contains("--disk"),
        "convert --help: {text}"
    );
    assert!(text.contains("qemu-img version"), "{text}");
    assert!(
        text.contains("refused") && !text.contains("WRITABLE"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(scratch.join("out.raw")).unwrap(),
        pattern,
        "the VMDK converted inside the image holds the original bytes"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The guest Job's program, `ferry-controller convert-guest --mode auto`, inside the image as
/// 65532 on a read-only root (a tmpfs at /tmp for the volume and the work directory, the
/// devices, `/dev/fd` and `/dev/shm` and /proc a container runtime gives a pod — libguestfs
/// hands files over through `/dev/fd/N`): virt-v2v-in-place builds libguestfs' appliance from
/// the image's own kernel (supermin), boots it under TCG, inspects a blank disk and finds no
/// operating system, which `auto` passes over: the Job's whole toolchain runs as the restricted
/// pod runs it. (The node's `/dev/kvm` is not given: TCG, as the Job's default.) A real guest
/// converted the same way is a figure on the benchmarks page, not a test: minutes of TCG.
#[test]
fn inside_the_image_the_guest_jobs_program_runs_virt_v2v_as_non_root() {
    let dir = layout();
    let scratch = repo_root().join(format!("target/image-guest-test-{}", std::process::id()));
    let root = scratch.join("root");
    unpacked(&dir, &root);
    let kernels: Vec<String> = std::fs::read_dir(root.join("boot"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("vmlinuz-"))
        .collect();
    assert_eq!(kernels.len(), 1, "one kernel for supermin: {kernels:?}");
    // 64 MiB of zeros: a disk with no partition table, file system or operating system.
    let size = 64u64 << 20;
    let zeros = Command::new("sh")
        .args(["-c", "head -c 67108864 /dev/zero | sha256sum"])
        .output()
        .unwrap();
    let sha = String::from_utf8_lossy(&zeros.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let script = format!(
        "for d in null zero full random urandom tty; do touch \"$R/dev/$d\"; mount --bind /dev/$d \"$R/dev/$d\"; done; \
         ln -s /proc/self/fd \"$R/dev/fd\"; for i in 0:stdin 1:stdout 2:stderr; do ln -s /proc/self/fd/${{i%%:*}} \"$R/dev/${{i#*:}}\"; done; \
         mkdir \"$R/dev/shm\"; mount -t tmpfs -o mode=1777 tmpfs \"$R/dev/shm\"; \
         mount --bind /proc \"$R/proc\"; \
         install -d -o 65532 -g 65532 \"$R/tmp/vol\" \"$R/tmp/work\"; \
         truncate -s {size} \"$R/tmp/vol/disk.img\"; chown 65532:65532 \"$R/tmp/vol/disk.img\"; \
         chroot --userspec=65532:65532 \"$R\" env HOME=/tmp/work /usr/local/bin/ferry-controller convert-guest \
           --mode auto --volume 0=/tmp/vol/disk.img={size}={sha} --work-dir /tmp/work --result-file /tmp/result \
           --keep-nic-name 00:50:56:00:00:01=ens192; \
         echo \"== result\"; cat \"$R/tmp/result\"",
    );
    let prelude = "mount -t tmpfs -o mode=0755 tmpfs \"$R/dev\"; ";
    let out = in_read_only_root(&root, &format!("{prelude}{script}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    let result = text.split("== result\n").nth(1).unwrap_or_default();
    let o = ferry_convert::guest::parse_result(result)
        .unwrap_or_else(|| panic!("no result: {text}\n{err}"));
    // What virt-v2v said, in the test's log: how long its appliance took to say it.
    eprintln!("{err}\n{o:?}");
    assert!(!o.converted, "{o:?}");
    assert_eq!(o.operating_system, None, "{o:?}");
    assert!(
        o.changes.iter().any(|c| c.contains("inspection")),
        "virt-v2v inspected the disk (its appliance ran): {o:?}\n{err}"
    );
    // guestfish ran too (the network cards' names): it found no guest to write them into.
    assert!(
        text.contains(
            "network: left 00:50:56:00:00:01 to the guest: guestfish found no operating system"
        ),
        "guestfish in the image: {text}\n{err}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn the_containerfile_builds_the_same_layout() {
    let cf = std::fs::read_to_string(repo_root().join("image/Containerfile")).unwrap();
    let build = std::fs::read_to_string(repo_root().join("image/build.sh")).unwrap();
    let (_, config) = manifest_and_config(&layout());
    let c = &config["config"];
    // The final stage's instruction: the last one (the build stage has its own WORKDIR).
    let line = |prefix: &str| {
        cf.lines()
            .rfind(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in the Containerfile"))
            .trim_start_matches(prefix)
            .trim()
            .to_owned()
    };
    assert_eq!(line("USER "), c["User"].as_str().unwrap());
    let entrypoint: Value = serde_json::from_str(&line("ENTRYPOINT ")).unwrap();
    assert_eq!(&entrypoint, &c["Entrypoint"]);
    assert_eq!(line("WORKDIR "), c["WorkingDir"].as_str().unwrap());
    assert!(
        cf.contains("COPY image/packages.txt") && build.contains("packages.txt"),
        "one package list"
    );
    assert!(cf.contains("/usr/local/bin/ferry-controller"));
    assert!(
        cf.contains("debian:bookworm") && build.contains("SUITE=bookworm"),
        "one Debian release"
    );
    assert!(
        cf.contains("nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin")
            && build.contains("nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin"),
        "one user"
    );
    let env_path = c["Env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e.as_str().unwrap().starts_with("PATH="))
        .unwrap();
    assert_eq!(line("ENV "), env_path.as_str().unwrap());
}
