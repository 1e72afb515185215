//! `ferry-controller convert-guest` (`ferry_convert::guest::run`) against real qemu-img and a fake
//! `virt-v2v-in-place`: a shell script that "converts" by writing 64 KiB of 0x5a at 1 MiB into
//! each qcow2 overlay it is given (with qemu-io) and speaks virt-v2v's `--machine-readable` JSON.
//!
//! What these tests prove, each against two 4 MiB raw volumes (`d0/disk.img`, `d1/disk.img`):
//!
//! - a conversion lands on every volume, is recorded ([`DONE`]), leaves no journal behind, and
//!   is reported again by a later attempt without running virt-v2v a second time;
//! - a failing virt-v2v (even one that wrote into its overlays) leaves the volumes' bytes as
//!   they were; "no operating system" passes in `auto` and fails in `always`;
//! - every state a SIGKILL can leave ends, on the next attempt, in the same bytes as an
//!   undisturbed conversion: stray journals without a landing (converted again), a landing not
//!   yet committed, a commit cut halfway, a landing killed while recording (finished from the
//!   journals), journals left after the landing's manifest went (reported again);
//! - a volume holding bytes ferry cannot account for fails the Job for good, untouched.
//!
//! The converted bytes are computed here (the volume's pattern with 0x5a over 1 MiB..+64 KiB),
//! not taken from a run of the code under test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_convert::Error;
use ferry_convert::guest::{DONE, GuestArgs, JOURNAL, LANDING, Mode, Outcome, run};
use ferry_convert::job_contract::PERMANENT_EXIT_CODE;
use ferry_convert::verify::VolumeSpec;

mod support {
    pub mod volumes;
}
use support::volumes::*;

/// virt-v2v's lines the fake prints on success, and what `run` keeps of them.
const OS: &str = "12.15";
const CHANGE: &str = "This guest has virtio drivers installed.";
/// What the failing fake says.
const NO_OS: &str = "inspection could not detect the source guest (or physical machine).";

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two volumes, the fakes and a work directory, in a directory of their own (removed when the
/// test passes, kept for a look when it fails).
struct Fixture {
    root: PathBuf,
    disks: Vec<PathBuf>,
    /// One line per virt-v2v run, by either fake.
    calls: PathBuf,
    converts: PathBuf,
    fails: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Self {
        let root =
            std::env::temp_dir().join(format!("ferry-guest-test-{}-{name}", std::process::id()));
        let disks = two_volumes(&root);
        let bin = root.join("bin");
        let calls = root.join("virt-v2v.calls");
        let qemu_io = which("qemu-io");
        // Both fakes write into every overlay (the args after `-if qcow2`): a failed run must
        // not land what it wrote either.
        let prelude = format!(
            "#!/bin/sh\nset -e\necho \"$*\" >> '{calls}'\n\
             while [ \"$#\" -gt 0 ] && [ \"$1\" != -if ]; do shift; done\nshift 2\n\
             for ov in \"$@\"; do '{qemu_io}' -f qcow2 -c '{WRITE}' \"$ov\" > /dev/null; done\n",
            calls = calls.display(),
            qemu_io = qemu_io.display(),
        );
        let line = |message: &str, kind: &str| {
            format!(
                "echo '{{ \"message\": \"{message}\", \"timestamp\": \"t\", \"type\": \"{kind}\" }}'\n"
            )
        };
        let converts = bin.join("virt-v2v-converts");
        let fails = bin.join("virt-v2v-fails");
        write_script(
            &converts,
            &format!(
                "{prelude}{}echo '[   0.0] Converting {OS} to run on KVM'\n{}",
                line(&format!("Converting {OS} to run on KVM"), "message"),
                line(CHANGE, "info"),
            ),
        );
        write_script(
            &fails,
            &format!(
                "{prelude}{}echo 'virt-v2v-in-place: error: {NO_OS}' >&2\nexit 1\n",
                line(NO_OS, "error"),
            ),
        );
        Self {
            root,
            disks,
            calls,
            converts,
            fails,
        }
    }

    fn dir(&self, disk: usize) -> &Path {
        self.disks[disk].parent().unwrap()
    }

    /// The arguments of a Job over both volumes, verified as holding their original bytes.
    fn args(&self, mode: Mode, virt_v2v: &Path) -> GuestArgs {
        GuestArgs {
            mode,
            volumes: self
                .disks
                .iter()
                .enumerate()
                .map(|(index, path)| VolumeSpec {
                    index,
                    path: path.clone(),
                    size: SIZE as u64,
                    sha256: sha256(&original(index)),
                })
                .collect(),
            result_file: None,
            work_dir: self.root.join("work"),
            virt_v2v: virt_v2v.to_owned(),
            qemu_img: which("qemu-img"),
            kvm: false,
            unverified: false,
            nic_names: vec![],
            guestfish: "guestfish".into(),
        }
    }

    /// How many times virt-v2v ran.
    fn calls(&self) -> usize {
        std::fs::read_to_string(&self.calls)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn sha(&self, disk: usize) -> String {
        sha256_file(&self.disks[disk])
    }

    /// What a kill after step 1 leaves on `disk`: its journal, backed by `disk.img` named
    /// relative, holding `write` (a qemu-io command).
    fn journal(&self, disk: usize, name: &str, write: &str) {
        let dir = self.dir(disk);
        run_ok(Command::new(which("qemu-img")).current_dir(dir).args([
            "create", "-q", "-f", "qcow2", "-F", "raw", "-b", "disk.img", name,
        ]));
        run_ok(
            Command::new(which("qemu-io"))
                .current_dir(dir)
                .args(["-f", "qcow2", "-c", write, name]),
        );
    }

    /// What a kill after step 2 leaves: both journals holding the fake's conversion, and the
    /// landing's manifest on disk 0 (as `Landing` serializes).
    fn landing_decided(&self) {
        for disk in 0..2 {
            self.journal(disk, JOURNAL, WRITE);
        }
        std::fs::write(
            self.dir(0).join(LANDING),
            format!(
                r#"{{"operatingSystem":"{OS}","changes":["{CHANGE}"],"written":[[0,{LEN}],[1,{LEN}]],"seconds":1}}"#
            ),
        )
        .unwrap();
    }

    /// No journal, landing manifest or temporary left on any volume.
    fn assert_no_landing_files(&self) {
        for disk in 0..2 {
            let left: Vec<String> = std::fs::read_dir(self.dir(disk))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "disk.img" && n != DONE)
                .collect();
            assert!(left.is_empty(), "disk {disk} keeps {left:?}");
        }
    }

    /// Both volumes hold an undisturbed conversion, and `o` reports it.
    fn assert_converted(&self, o: &Outcome) {
        assert!(o.converted, "{o:?}");
        assert_eq!(o.operating_system.as_deref(), Some(OS));
        assert_eq!(o.changes, [CHANGE]);
        assert_eq!(o.volumes.len(), 2, "{o:?}");
        for (disk, v) in o.volumes.iter().enumerate() {
            let want = sha256(&converted(disk));
            assert_eq!(v.disk, disk);
            assert_eq!(self.sha(disk), want, "disk {disk}'s bytes");
            assert_eq!(v.sha256, want, "disk {disk}'s reported checksum");
            assert_eq!(v.written_bytes, LEN as u64, "disk {disk}");
            assert!(
                self.dir(disk).join(DONE).is_file(),
                "disk {disk} has no {DONE}"
            );
        }
        self.assert_no_landing_files();
    }

    /// Both volumes hold their verified bytes, and nothing of a conversion is recorded.
    fn assert_untouched(&self) {
        for disk in 0..2 {
            assert_eq!(
                self.sha(disk),
                sha256(&original(disk)),
                "disk {disk}'s bytes"
            );
            assert!(
                !self.dir(disk).join(DONE).exists(),
                "disk {disk} has a {DONE}"
            );
        }
        self.assert_no_landing_files();
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

#[tokio::test]
async fn a_conversion_lands_on_every_volume_and_is_reported_again_without_converting_again() {
    let fx = Fixture::new("lands");
    let before: Vec<String> = (0..2).map(|d| fx.sha(d)).collect();
    let args = fx.args(Mode::Always, &fx.converts);

    let first = run(&args).await.unwrap();
    fx.assert_converted(&first);
    assert_eq!(fx.calls(), 1);
    for (disk, was) in before.iter().enumerate() {
        assert_ne!(&fx.sha(disk), was, "disk {disk} was not converted");
        let bytes = std::fs::read(&fx.disks[disk]).unwrap();
        assert!(bytes[AT..AT + LEN].iter().all(|&b| b == CONVERTED));
    }
    // The fake saw one overlay per volume, in the work directory, never the volumes.
    let call = std::fs::read_to_string(&fx.calls).unwrap();
    assert!(
        call.starts_with("--machine-readable -i disk -if qcow2 "),
        "{call}"
    );
    assert!(!call.contains("disk.img"), "{call}");

    // A later attempt (the Job retried after the result was lost) reports the same.
    let again = run(&args).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(fx.calls(), 1, "virt-v2v ran again");
    fx.assert_converted(&again);

    // A recorded conversion the volume no longer holds is not reported, nor converted over.
    let mut bytes = converted(1);
    bytes[3 << 20] ^= 1;
    std::fs::write(&fx.disks[1], &bytes).unwrap();
    let e = run(&args).await.unwrap_err();
    assert_eq!(e.exit_code(), PERMANENT_EXIT_CODE);
    assert!(e.to_string().contains("no longer holds"), "{e}");
    assert_eq!(fx.calls(), 1, "virt-v2v ran again");
}

#[tokio::test]
async fn a_failing_virt_v2v_leaves_the_volumes_untouched() {
    let fx = Fixture::new("fails");

    let auto = run(&fx.args(Mode::Auto, &fx.fails)).await.unwrap();
    assert!(!auto.converted, "{auto:?}");
    assert_eq!(auto.operating_system, None);
    assert!(auto.volumes.is_empty(), "{auto:?}");
    assert_eq!(auto.changes, [NO_OS]);
    assert_eq!(fx.calls(), 1);
    fx.assert_untouched();

    let e = run(&fx.args(Mode::Always, &fx.fails)).await.unwrap_err();
    assert!(matches!(e, Error::Guest(_)), "{e:?}");
    assert_eq!(e.exit_code(), PERMANENT_EXIT_CODE);
    assert!(e.to_string().contains(NO_OS), "{e}");
    assert_eq!(fx.calls(), 2);
    fx.assert_untouched();
}

/// Kill during step 1: disk 0's journal was in place, disk 1's still being copied, no landing
/// decided. The journals are not the conversion (here they even hold other bytes): they go, and
/// the guest is converted again from the verified bytes.
#[tokio::test]
async fn a_kill_before_the_landing_is_decided_converts_again() {
    let fx = Fixture::new("kill-journal");
    let stray = "write -P 0xa5 2M 64k";
    fx.journal(0, JOURNAL, stray);
    fx.journal(1, &format!("{JOURNAL}.tmp"), stray);

    // A virt-v2v failing now proves the journals were not landed, and are gone.
    run(&fx.args(Mode::Always, &fx.fails)).await.unwrap_err();
    fx.assert_untouched();

    fx.journal(0, JOURNAL, stray);
    fx.journal(1, &format!("{JOURNAL}.tmp"), stray);
    let o = run(&fx.args(Mode::Always, &fx.converts)).await.unwrap();
    fx.assert_converted(&o);
    assert_eq!(fx.calls(), 2);
}

/// Kill after step 2, before any commit: the landing is finished from the journals, without
/// running virt-v2v.
#[tokio::test]
async fn a_kill_after_the_landing_is_decided_finishes_it() {
    let fx = Fixture::new("kill-decided");
    fx.landing_decided();
    for disk in 0..2 {
        assert_eq!(fx.sha(disk), sha256(&original(disk)));
    }

    let o = run(&fx.args(Mode::Always, &fx.fails)).await.unwrap();
    fx.assert_converted(&o);
    assert_eq!(o.seconds, 1);
    assert_eq!(fx.calls(), 0, "virt-v2v ran again");
}

/// Kill during step 3: disk 0's commit cut halfway (half the converted clusters in), disk 1's
/// not begun. The volume holds neither the verified bytes nor the converted ones: the landing
/// finishes it.
#[tokio::test]
async fn a_commit_cut_halfway_is_finished() {
    let fx = Fixture::new("kill-commit");
    fx.landing_decided();
    run_ok(Command::new(which("qemu-io")).args([
        "-f".as_ref(),
        "raw".as_ref(),
        "-c".as_ref(),
        "write -P 0x5a 1M 32k".as_ref(),
        fx.disks[0].as_os_str(),
    ]));
    assert_ne!(fx.sha(0), sha256(&original(0)));
    assert_ne!(fx.sha(0), sha256(&converted(0)));

    let o = run(&fx.args(Mode::Always, &fx.fails)).await.unwrap();
    fx.assert_converted(&o);
    assert_eq!(fx.calls(), 0, "virt-v2v ran again");
}

/// Kill during step 4: the volumes landed and recorded, the landing's manifest and journals
/// still there (then, a kill after the manifest went: the journals alone).
#[tokio::test]
async fn a_kill_while_recording_the_landing_ends_in_the_same_conversion() {
    let fx = Fixture::new("kill-record");
    let first = run(&fx.args(Mode::Always, &fx.converts)).await.unwrap();
    fx.assert_converted(&first);
    fx.landing_decided();

    let o = run(&fx.args(Mode::Always, &fx.fails)).await.unwrap();
    fx.assert_converted(&o);
    assert_eq!(o.volumes, first.volumes);
    assert_eq!(fx.calls(), 1, "virt-v2v ran again");

    for disk in 0..2 {
        fx.journal(disk, JOURNAL, WRITE);
    }
    let o = run(&fx.args(Mode::Always, &fx.fails)).await.unwrap();
    fx.assert_converted(&o);
    assert_eq!(o.volumes, first.volumes);
    assert_eq!(fx.calls(), 1, "virt-v2v ran again");
}

/// A volume that is neither what was verified nor a conversion ferry recorded: nothing ferry
/// can account for. The Job fails for good without converting or touching it.
#[tokio::test]
async fn a_volume_holding_unaccounted_bytes_fails_for_good() {
    let fx = Fixture::new("neither");
    let mut bytes = original(1);
    bytes[3 << 20] ^= 1;
    std::fs::write(&fx.disks[1], &bytes).unwrap();

    let e = run(&fx.args(Mode::Always, &fx.converts)).await.unwrap_err();
    assert!(matches!(e, Error::Guest(_)), "{e:?}");
    assert_eq!(e.exit_code(), PERMANENT_EXIT_CODE);
    assert!(e.to_string().contains("neither"), "{e}");
    assert_eq!(fx.calls(), 0, "virt-v2v ran");
    assert_eq!(fx.sha(0), sha256(&original(0)));
    assert_eq!(fx.sha(1), sha256(&bytes));
    fx.assert_no_landing_files();
}
