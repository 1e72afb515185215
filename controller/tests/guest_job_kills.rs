//! The guest Job's program, `ferry-controller convert-guest`, SIGKILLed before and after each step
//! it runs (every `qemu-img` and the `virt-v2v-in-place` run), and inside a commit cut halfway:
//! whatever a kill leaves, the volumes hold their verified bytes, or a landing is decided whose
//! journals each read as the whole conversion; and the next attempt ends with every volume
//! holding the converted bytes, reported with their checksums, nothing of the landing left.
//!
//! The kills are real: the program's `qemu-img` (`FERRY_QEMU_IMG`) and `virt-v2v-in-place`
//! (`FERRY_VIRT_V2V_IN_PLACE`) are wrappers that count the steps and, at the chosen one,
//! `kill -KILL` the program that started them — before running the real step, after it, or (a
//! commit) after writing half of what the commit writes. virt-v2v itself is a fake that
//! "converts" by writing 64 KiB of 0x5a at 1 MiB into each overlay (real virt-v2v takes minutes a
//! guest under TCG; what is tested here is the landing around it). The states a kill cannot be
//! aimed at this way (inside the program, between its last `qemu-img` and its exit: hashing,
//! recording, removing the landing's files) are set up and finished in `convert/tests/guest.rs`.
//!
//! The converted bytes are computed here, not taken from a run of the code under test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_convert::guest::{DONE, JOURNAL, LANDING, parse_result};

#[path = "../../convert/tests/support/volumes.rs"]
mod volumes;
use volumes::*;

/// How a step is interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// The program is killed as the step starts: the step does nothing.
    Before,
    /// The step ran whole, then the program is killed before it reads the step's outcome.
    After,
    /// A commit: half of the clusters it writes are in the volume, then the program is killed.
    Halfway,
}

/// Two volumes (`d0/disk.img`, `d1/disk.img`), the wrappers and a work directory, in a directory
/// of their own (removed when the test passes, kept for a look when it fails).
struct Volumes {
    root: PathBuf,
    disks: Vec<PathBuf>,
    /// One line per step: its number, the tool, and `qemu-img`'s subcommand.
    steps: PathBuf,
}

impl Volumes {
    fn new(name: &str) -> Self {
        let root =
            std::env::temp_dir().join(format!("ferry-guest-kills-{}-{name}", std::process::id()));
        let disks = two_volumes(&root);
        let bin = root.join("bin");
        let steps = root.join("steps");
        let counter = root.join("counter");
        // Shared by both wrappers: the step's number, and the kill asked for it (KILL_AT,
        // KILL_WHEN; the program passes its environment on to both).
        let count = |step: &str| {
            format!(
                "#!/bin/sh\nn=$(( $(cat '{counter}' 2>/dev/null || echo 0) + 1 ))\necho $n > '{counter}'\n\
             echo \"$n {step}\" >> '{steps}'\n\
             at() {{ [ \"$n\" = \"$KILL_AT\" ] && [ \"$KILL_WHEN\" = \"$1\" ]; }}\n\
             at before && {{ kill -KILL $PPID; exit 137; }}\n",
                counter = counter.display(),
                steps = steps.display(),
            )
        };
        let qemu_io = which("qemu-io");
        // A commit cut halfway: the first half of the fake's clusters in the journal's volume.
        let half = format!(
            "if at halfway; then for j; do :; done\n\
             '{qemu_io}' -f raw -c 'write -P 0x5a 1M 32k' \"$(dirname \"$j\")/disk.img\" > /dev/null\n\
             kill -KILL $PPID; exit 137; fi\n",
            qemu_io = qemu_io.display(),
        );
        write_script(
            &bin.join("qemu-img"),
            &format!(
                "{}{half}'{}' \"$@\"; rc=$?\nat after && kill -KILL $PPID\nexit $rc\n",
                count("qemu-img $1"),
                which("qemu-img").display(),
            ),
        );
        // The fake virt-v2v writes into every overlay it is given (the args after `-if qcow2`).
        write_script(
            &bin.join("virt-v2v-in-place"),
            &format!(
                "{}while [ \"$#\" -gt 0 ] && [ \"$1\" != -if ]; do shift; done\nshift 2\n\
                 for ov; do '{}' -f qcow2 -c '{WRITE}' \"$ov\" > /dev/null || exit 1; done\n\
                 echo '{{ \"message\": \"Converting 12.15 to run on KVM\", \"timestamp\": \"t\", \"type\": \"message\" }}'\n\
                 at after && kill -KILL $PPID\nexit 0\n",
                count("virt-v2v run"),
                qemu_io.display(),
            ),
        );
        Self { root, disks, steps }
    }

    fn dir(&self, disk: usize) -> &Path {
        self.disks[disk].parent().unwrap()
    }

    fn sha(&self, disk: usize) -> String {
        sha256(&std::fs::read(&self.disks[disk]).unwrap())
    }

    /// The steps run so far, in order: `qemu-img create`, `virt-v2v run`, …
    fn steps(&self) -> Vec<String> {
        std::fs::read_to_string(&self.steps)
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_once(' ').unwrap().1.to_owned())
            .collect()
    }

    fn virt_v2v_runs(&self) -> usize {
        self.steps()
            .iter()
            .filter(|s| s.starts_with("virt-v2v"))
            .count()
    }

    /// Runs the program as the guest Job does (`--mode always`, both volumes verified as holding
    /// their original bytes), killed at step `kill` (numbered across attempts); its exit status
    /// and result.
    fn attempt(&self, kill: Option<(usize, When)>) -> (std::process::ExitStatus, String) {
        let result = self.root.join("result");
        let _ = std::fs::remove_file(&result);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry-controller"));
        cmd.args(["convert-guest", "--mode", "always"]);
        for (i, d) in self.disks.iter().enumerate() {
            cmd.arg("--volume").arg(format!(
                "{i}={}={SIZE}={}",
                d.display(),
                sha256(&original(i))
            ));
        }
        cmd.arg("--work-dir")
            .arg(self.root.join("work"))
            .arg("--result-file")
            .arg(&result)
            .env("FERRY_QEMU_IMG", self.root.join("bin/qemu-img"))
            .env(
                "FERRY_VIRT_V2V_IN_PLACE",
                self.root.join("bin/virt-v2v-in-place"),
            )
            .env("KILL_AT", kill.map_or(0, |(n, _)| n).to_string())
            .env(
                "KILL_WHEN",
                match kill.map(|(_, w)| w) {
                    Some(When::Before) => "before",
                    Some(When::After) => "after",
                    Some(When::Halfway) => "halfway",
                    None => "never",
                },
            );
        let out = cmd.output().unwrap();
        (
            out.status,
            std::fs::read_to_string(&result).unwrap_or_default(),
        )
    }

    /// What a journal reads as: its clusters over the volume it names as its backing file.
    fn journal_reads(&self, disk: usize) -> String {
        let raw = self.root.join(format!("journal-{disk}.raw"));
        let out = Command::new(which("qemu-img"))
            .current_dir(self.dir(disk))
            .args(["convert", "-f", "qcow2", "-O", "raw", JOURNAL])
            .arg(&raw)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        sha256(&std::fs::read(&raw).unwrap())
    }

    /// What a kill may leave: no landing and every volume as verified, or a landing decided
    /// whose journals read as the whole conversion (the volumes themselves anywhere between:
    /// the next attempt finishes them from the journals). Whether a landing was decided.
    fn assert_verified_or_decided(&self, what: &str) -> bool {
        let decided = self.dir(0).join(LANDING).is_file();
        for disk in 0..2 {
            if decided {
                assert!(
                    self.dir(disk).join(JOURNAL).is_file(),
                    "{what}: a landing is decided and disk {disk} has no journal"
                );
                assert_eq!(
                    self.journal_reads(disk),
                    sha256(&converted(disk)),
                    "{what}: disk {disk}'s journal is not the whole conversion"
                );
            } else {
                assert_eq!(
                    self.sha(disk),
                    sha256(&original(disk)),
                    "{what}: no landing is decided and disk {disk} lost its verified bytes"
                );
                assert!(!self.dir(disk).join(DONE).exists(), "{what}: disk {disk}");
            }
        }
        decided
    }

    /// Every volume holds the converted bytes, `result` reports their checksums, and nothing of
    /// the landing is left.
    fn assert_converted(&self, what: &str, result: &str) {
        let o = parse_result(result).unwrap_or_else(|| panic!("{what}: result {result:?}"));
        assert!(o.converted, "{what}: {o:?}");
        assert_eq!(o.operating_system.as_deref(), Some("12.15"), "{what}");
        assert_eq!(o.volumes.len(), 2, "{what}: {o:?}");
        for (disk, v) in o.volumes.iter().enumerate() {
            let want = sha256(&converted(disk));
            assert_eq!(self.sha(disk), want, "{what}: disk {disk}'s bytes");
            assert_eq!(v.sha256, want, "{what}: disk {disk}'s reported checksum");
            let left: Vec<String> = std::fs::read_dir(self.dir(disk))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "disk.img" && n != DONE)
                .collect();
            assert!(left.is_empty(), "{what}: disk {disk} keeps {left:?}");
        }
    }
}

impl Drop for Volumes {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

#[test]
fn the_guest_jobs_program_killed_at_each_step_leaves_the_verified_bytes_or_a_whole_conversion() {
    // An undisturbed run names the steps there are to kill at.
    let clean = Volumes::new("clean");
    let (status, result) = clean.attempt(None);
    assert!(status.success(), "{status:?}");
    clean.assert_converted("undisturbed", &result);
    let steps = clean.steps();
    for step in [
        "qemu-img create",
        "virt-v2v run",
        "qemu-img rebase",
        "qemu-img commit",
    ] {
        assert_eq!(
            steps.iter().filter(|s| *s == step).count(),
            if step == "virt-v2v run" { 1 } else { 2 },
            "{step} in {steps:?}"
        );
    }

    let mut kills = 0;
    let mut decided_at = vec![];
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        let mut whens = vec![When::Before, When::After];
        if step == "qemu-img commit" {
            whens.push(When::Halfway);
        }
        for when in whens {
            let what = format!("killed {when:?} step {n} ({step})");
            let v = Volumes::new(&format!("{n}-{when:?}"));
            let (status, _) = v.attempt(Some((n, when)));
            assert_eq!(status.signal(), Some(9), "{what}: {status:?}");
            assert_eq!(v.steps().len(), n, "{what}: steps {:?}", v.steps());
            let decided = v.assert_verified_or_decided(&what);
            if decided {
                decided_at.push(what.clone());
            }
            let runs = v.virt_v2v_runs();

            // The Job's next pod: the same program, the same arguments.
            let (status, result) = v.attempt(None);
            assert!(status.success(), "{what}, then a retry: {status:?}");
            v.assert_converted(&format!("{what}, then a retry"), &result);
            assert_eq!(
                v.virt_v2v_runs(),
                runs + usize::from(!decided),
                "{what}: a decided landing is finished, not converted again; an undecided one is converted again"
            );
            kills += 1;
        }
    }
    // Each commit, whole or halfway, and everything after the first, left a decided landing.
    assert!(kills >= 2 * steps.len() + 2, "{kills} kills");
    assert!(
        decided_at.iter().filter(|w| w.contains("commit")).count() == 6,
        "{decided_at:?}"
    );
}
