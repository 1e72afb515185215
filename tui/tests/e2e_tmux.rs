//! The cockpit as a person uses it: started in tmux against the lab, read with capture-pane,
//! driven with send-keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use ferry_crds::{VirtualMachineMigration, fixtures::migration};
use ferry_harness::{Lab, lab, repo_root, run_state_dir};

/// A tmux session running one command; killed (by its own name) on drop.
struct Tmux {
    name: String,
}

impl Tmux {
    fn start(name: &str, cmd: &str, w: u16, h: u16) -> Tmux {
        let name = format!("{name}-{}", std::process::id());
        let status = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
                cmd,
            ])
            .status()
            .expect("tmux runs (apt package tmux; tests/lab/ensure-tools.sh installs it)");
        assert!(status.success(), "tmux new-session failed");
        Tmux { name }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.name];
        args.extend_from_slice(keys);
        let ok = Command::new("tmux")
            .args(&args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tmux send-keys {keys:?}");
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen satisfies `pred`; panics with the last screen otherwise.
    fn wait(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_for(&self, text: &str, timeout: Duration) -> String {
        self.wait(&format!("{text:?} on screen"), timeout, |s| {
            s.contains(text)
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // Tests start sessions concurrently and a kill can race the server's start; make sure
        // the session (and the cockpit in it) is gone before the test ends.
        for _ in 0..20 {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.name])
                .status();
            let alive = Command::new("tmux")
                .args(["has-session", "-t", &self.name])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !alive {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut cmd = Command::new(repo_root().join("target/lab/bin/kubectl"));
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("kubectl output");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn install_crds(kubeconfig: &Path) {
    let crds = repo_root().join("deploy/crds");
    let crds = crds.to_string_lossy();
    kubectl(
        kubeconfig,
        &["apply", "--server-side", "--force-conflicts", "-f", &crds],
        None,
    );
    // The controller's namespace, where it keeps the key of its creation stamps.
    let ns = repo_root().join("deploy/controller/namespace.yaml");
    kubectl(kubeconfig, &["apply", "-f", &ns.to_string_lossy()], None);
    kubectl(
        kubeconfig,
        &[
            "wait",
            "--for=condition=established",
            "crd/virtualmachinemigrations.migration.platform.example",
            "crd/migrationwaves.migration.platform.example",
        ],
        None,
    );
}

fn create_vmm(kubeconfig: &Path, ns: &str, name: &str) {
    let mut vmm: VirtualMachineMigration = migration(name);
    vmm.metadata.namespace = Some(ns.into());
    vmm.metadata.uid = None;
    vmm.metadata.generation = None;
    let yaml = serde_yaml::to_string(&vmm).expect("yaml");
    kubectl(kubeconfig, &["apply", "-f", "-"], Some(&yaml));
}

fn cockpit(kubeconfig: &Path, ns: &str, extra: &str) -> String {
    format!(
        "{} --kubeconfig {} -n {ns} {extra}; sleep 60",
        env!("CARGO_BIN_EXE_ferry"),
        kubeconfig.display()
    )
}

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn board_shows_new_migrations_and_c_then_y_sets_spec_cancel_in_the_apiserver() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-cancel").await.expect("namespace");
    let tmux = Tmux::start("ferry-cancel", &cockpit(&kc, &ns.name, ""), 160, 40);
    tmux.wait_for("● live", T);
    create_vmm(&kc, &ns.name, "alpha");
    create_vmm(&kc, &ns.name, "bravo");
    let screen = tmux.wait("both migrations on the board", T, |s| {
        s.contains("alpha") && s.contains("bravo")
    });
    assert!(screen.contains("Pending"), "{screen}");
    // The YAML view reads the migration whole: its child records, which the board's cut-down
    // copy drops, are there (written as the controller would, on the status subresource).
    kubectl(
        &kc,
        &[
            "-n",
            &ns.name,
            "patch",
            "vmm",
            "alpha",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"children":[{"kind":"Job","name":"alpha-convert-record","uid":"u-1","attempt":1}]}}"#,
        ],
        None,
    );
    tmux.keys(&["y"]);
    tmux.wait_for("kind: VirtualMachineMigration", T);
    // The status is at the end, below the pane.
    tmux.keys(&["G"]);
    let yaml = tmux.wait_for("alpha-convert-record", T);
    assert!(yaml.contains("children:"), "{yaml}");
    tmux.keys(&["Escape"]);
    tmux.wait("back on the board", T, |s| {
        s.contains("bravo") && !s.contains("alpha-convert-record")
    });
    // The cursor is on the first row (alpha, sorted by name).
    tmux.keys(&["c"]);
    tmux.wait_for("Cancel 1 migration?", T);
    tmux.keys(&["y"]);
    tmux.wait_for("cancel alpha: applied", T);
    let cancel = kubectl(
        &kc,
        &[
            "get",
            "vmm",
            "alpha",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.spec.cancel}",
        ],
        None,
    );
    assert_eq!(cancel, "true");
    let other = kubectl(
        &kc,
        &[
            "get",
            "vmm",
            "bravo",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.spec.cancel}",
        ],
        None,
    );
    assert_ne!(other, "true", "only the selected migration is cancelled");
    // The watch delivered it: the row shows the cancelling flag, not a pending marker.
    tmux.wait("the cancelling flag on alpha", T, |s| {
        s.lines().any(|l| l.contains("✕ alpha"))
    });
    // The log pane shows the action's line: the logger's buffer reaches the screen.
    tmux.keys(&["l"]);
    tmux.wait("the action in the log pane", T, |s| {
        s.contains(" logs (l hides) ")
            && s.lines()
                .any(|l| l.contains("action") && l.contains("patch") && l.contains("alpha"))
    });
    tmux.keys(&["q"]);
}

/// A user bound only to a Role like `ferry-view` (watch, no patch, no delete), through `--as`:
/// the cockpit's access reviews go out impersonated too (as the lab's admin every verb would be
/// allowed and nothing greyed), so the footer greys cancel, retry, pause and delete with the
/// role that grants them, and `c` and `r` say what they need whole at 80×24 instead of asking
/// to confirm; nothing reaches the spec.
#[tokio::test(flavor = "multi_thread")]
async fn an_impersonated_read_only_user_sees_the_verbs_greyed_with_ferry_operate_and_c_asks_no_confirm()
 {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-viewer").await.expect("namespace");
    create_vmm(&kc, &ns.name, "charlie");
    let rbac = format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: ferry-viewer, namespace: {ns}}}
rules:
- apiGroups: [migration.platform.example]
  resources: [virtualmachinemigrations, migrationwaves]
  verbs: [get, list, watch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: ferry-viewer, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: ferry-viewer}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: viewer}}
"#,
        ns = ns.name
    );
    kubectl(&kc, &["apply", "-f", "-"], Some(&rbac));
    let tmux = Tmux::start(
        "ferry-viewer",
        &cockpit(&kc, &ns.name, "--as viewer"),
        80,
        24,
    );
    tmux.wait("charlie on a live board", T, |s| {
        s.contains("charlie") && s.contains("● live")
    });
    // The answer of the reviews greys the verbs where the footer offers them.
    tmux.wait_for(
        "c:cancel r:retry p:pause ^d:delete (needs ferry-operate)",
        T,
    );
    tmux.keys(&["c"]);
    // Wrapped over the footer's lines (80 columns do not hold it), every word of it, in order.
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let whole = |verb: &str| {
        format!(
            "{verb} needs patch on virtualmachinemigrations in {}: grant ferry-operate",
            ns.name
        )
    };
    let screen = tmux.wait("the refusal of cancel, whole", T, |s| {
        words(s).contains(&whole("cancel"))
    });
    assert!(
        !screen.contains("Cancel 1 migration?"),
        "no confirmation of a refused verb:\n{screen}"
    );
    // A confirmation would take `y` as its yes; here `y` is the YAML view, and nothing is sent.
    tmux.keys(&["y"]);
    tmux.wait_for("kind: VirtualMachineMigration", T);
    tmux.keys(&["Escape"]);
    // On the board again before the next key: an Escape followed at once by `r` reads as
    // Alt-r.
    tmux.wait("back on the board", T, |s| {
        s.contains(" MESSAGE") && !s.contains("kind: VirtualMachineMigration")
    });
    tmux.keys(&["r"]);
    let screen = tmux.wait("the refusal of retry, whole", T, |s| {
        words(s).contains(&whole("retry"))
    });
    assert!(!screen.contains("Retry 1 migration?"), "{screen}");
    let cancel = kubectl(
        &kc,
        &[
            "get",
            "vmm",
            "charlie",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.spec.cancel}",
        ],
        None,
    );
    assert_eq!(cancel, "false", ".spec.cancel stays as it was created");
    tmux.keys(&["q"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_board_survives_the_apiserver_stopping_and_goes_from_stale_to_live() {
    let dir = run_state_dir("tui-restart");
    let first = Lab::start(&dir, 4).expect("private lab");
    let kc = first.info.kubeconfig.clone();
    install_crds(&kc);
    create_vmm(&kc, "default", "delta");
    let tmux = Tmux::start("ferry-restart", &cockpit(&kc, "default", ""), 160, 40);
    tmux.wait("delta on a live board", T, |s| {
        s.contains("delta") && s.contains("● live")
    });
    first.stop().expect("stop the lab");
    let screen = tmux.wait_for("STALE", Duration::from_secs(60));
    assert!(screen.contains("delta"), "the last board stays:\n{screen}");
    let second = Lab::start(&dir, 4).expect("restart the lab on the same directory");
    tmux.wait("live again", Duration::from_secs(90), |s| {
        s.contains("● live") && !s.contains("STALE")
    });
    create_vmm(&kc, "default", "echo");
    tmux.wait("a migration created after the restart", T, |s| {
        s.contains("echo") && s.contains("delta")
    });
    tmux.keys(&["q"]);
    drop(tmux);
    second.stop().expect("stop the lab");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A binary of another workspace crate, built by `cargo build --workspace --bins` (as
/// `make test` does first); a loud failure when it is missing.
fn workspace_bin(name: &str) -> std::path::PathBuf {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_ferry"));
    let bin = exe.with_file_name(name);
    assert!(
        bin.exists(),
        "{} missing: run `cargo build --workspace --bins` first",
        bin.display()
    );
    bin
}

/// The credentials Secrets a lab migration names (`vsphere-credentials`, `s3-credentials`),
/// opted in for ferry and bound to the lab's endpoints, applied in `ns`.
/// ferry-sim in namespace `ns`, its volumes under `scratch`; on a lab with KubeVirt's own
/// virt-controller, as the node only.
/// `ferry controller` on namespace `ns`, with its own Lease there (other suites' controllers
/// share the lab) and the lab's converter image.
fn controller(kc: &Path, ns: &str) -> Command {
    let mut controller = Command::new(env!("CARGO_BIN_EXE_ferry"));
    controller
        .args(["controller", "--kubeconfig"])
        .arg(kc)
        .args(["-n", ns, "--leader-elect-namespace", ns])
        .args(["--converter-image", ferry_harness::LAB_CONVERTER_IMAGE])
        // A lab without deploy/controller's admission policies.
        .env("FERRY_ADMISSION_POLICIES", "not-required");
    controller
}

fn spawn_sim(lab: &Lab, ns: &str, scratch: &Path) -> ferry_harness::ChildGuard {
    let mut sim = Command::new(workspace_bin("ferry-sim"));
    sim.arg("--kubeconfig")
        .arg(&lab.info.kubeconfig)
        .args(["-n", ns, "--volume-dir"])
        .arg(scratch.join("volumes"))
        .arg("--bin-dir")
        .arg(workspace_bin("ferry-controller").parent().expect("bin dir"))
        .args(lab.info.sim_kubevirt_args());
    ferry_harness::ChildGuard::spawn("ferry-sim", sim).expect("sim")
}

fn apply_credentials(lab: &Lab, kc: &Path, ns: &str) {
    let v = &lab.info.vcenter;
    let s = &lab.info.s3;
    let secrets = format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: vsphere-credentials, namespace: {ns}, labels: {{migration.platform.example/credentials: "true"}}}}
stringData: {{username: "{u}", password: "{p}", url: "{url}", thumbprint: "{thumb}"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: s3-credentials, namespace: {ns}, labels: {{migration.platform.example/credentials: "true"}}}}
stringData: {{accessKeyId: "{a}", secretAccessKey: "{k}", endpoint: "{endpoint}", bucket: "{bucket}"}}
"#,
        u = v.username,
        p = v.password,
        url = v.url,
        thumb = v.thumbprint_sha1,
        a = s.access_key,
        k = s.secret_key,
        endpoint = s.endpoint,
        bucket = s.bucket,
    );
    kubectl(kc, &["apply", "-f", "-"], Some(&secrets));
}

fn lab_migration(lab: &Lab, ns: &str, name: &str, vm: &str, fault: Option<&str>) -> String {
    let v = &lab.info.vcenter;
    let s = &lab.info.s3;
    let annotations = fault.map_or(String::new(), |f| {
        format!("\n  annotations: {{sim.ferry.example/fault: \"{f}\"}}")
    });
    format!(
        r#"apiVersion: migration.platform.example/v1alpha1
kind: VirtualMachineMigration
metadata:
  name: {name}
  namespace: {ns}{annotations}
spec:
  source:
    url: {url}
    credentialsSecretRef: {{name: vsphere-credentials}}
    thumbprint: "{thumb}"
    name: {vm}
    powerOff: true
  target: {{name: {name}}}
  staging:
    endpoint: {endpoint}
    bucket: {bucket}
    credentialsSecretRef: {{name: s3-credentials}}
---
"#,
        url = v.url,
        thumb = v.thumbprint_sha1,
        endpoint = s.endpoint,
        bucket = s.bucket,
    )
}

/// The phase the board's row of migration `name` shows, if it has a row.
fn row_phase(screen: &str, name: &str) -> Option<String> {
    let line = screen
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == name))?;
    ferry_crds::Phase::ALL
        .iter()
        .map(|p| p.as_str())
        .find(|p| line.contains(p))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_controller_and_sim_the_board_shows_phases_moving_and_r_retries_a_failed_one() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-flow").await.expect("namespace");
    let scratch = repo_root().join(format!("target/lab/tui-flow-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let (good, bad) = (lab.claim_vm().expect("vm"), lab.claim_vm().expect("vm"));
    ferry_harness::put_vmdk(&good, &scratch, 16, 1).expect("vmdk");
    ferry_harness::put_vmdk(&bad, &scratch, 16, 2).expect("vmdk");
    apply_credentials(lab, &kc, &ns.name);

    let _controller =
        ferry_harness::ChildGuard::spawn("ferry controller", controller(&kc, &ns.name))
            .expect("controller");
    let _sim = spawn_sim(lab, &ns.name, &scratch);

    let tmux = Tmux::start("ferry-flow", &cockpit(&kc, &ns.name, ""), 160, 40);
    tmux.wait_for("● live", T);
    let yaml = lab_migration(lab, &ns.name, "good", &good.name, None)
        + &lab_migration(lab, &ns.name, "bad", &bad.name, Some("import=permanent"));
    kubectl(&kc, &["apply", "-f", "-"], Some(&yaml));

    // Watch the good one move: collect every phase its row shows until it succeeds.
    let mut seen: Vec<String> = vec![];
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let s = tmux.screen();
        if let Some(p) = row_phase(&s, "good") {
            if seen.last() != Some(&p) {
                seen.push(p.clone());
            }
            if p == "Succeeded" {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "good did not succeed; phases seen {seen:?}; screen:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        seen.len() >= 3,
        "the board showed the phases moving: {seen:?}"
    );

    // The bad one fails; the operator removes the cause and presses r on it.
    tmux.wait("bad Failed", Duration::from_secs(180), |s| {
        row_phase(s, "bad").as_deref() == Some("Failed")
    });
    kubectl(
        &kc,
        &[
            "annotate",
            "vmm",
            "bad",
            "-n",
            &ns.name,
            "sim.ferry.example/fault-",
        ],
        None,
    );
    tmux.keys(&["/"]);
    for c in ["p", "h", "a", "s", "e", ":", "F", "a", "i", "l", "e", "d"] {
        tmux.keys(&[c]);
    }
    tmux.keys(&["Enter", "r"]);
    tmux.wait_for("Retry 1 migration?", T);
    tmux.keys(&["y"]);
    tmux.keys(&["Escape"]);
    tmux.wait(
        "bad Succeeded after the retry",
        Duration::from_secs(180),
        |s| row_phase(s, "bad").as_deref() == Some("Succeeded"),
    );
    tmux.keys(&["q"]);
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Issue 29: a migration whose conversion fails; the operator selects it, presses `L` and reads
/// what the converter's pod printed last, through `pods/log` (the sim serves the kubelet's log
/// endpoint), then leaves the view with the board intact. The first failure is a real one of
/// the converter (its source disk's descriptor is not a VMDK); the second is `make demo`'s, the
/// sim's injected permanent convert fault, whose pod ends Failed with the sim's line in its log.
#[tokio::test(flavor = "multi_thread")]
async fn l_shows_the_failed_conversion_pods_last_line_through_pods_log() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-podlogs").await.expect("namespace");
    let scratch = repo_root().join(format!("target/lab/tui-podlogs-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let vm = lab.claim_vm().expect("vm");
    let disk = ferry_harness::put_vmdk(&vm, &scratch, 16, 3).expect("vmdk");
    std::fs::write(&disk.vmdk, "# not a VMDK descriptor\n").expect("spoil the descriptor");
    apply_credentials(lab, &kc, &ns.name);

    let _controller =
        ferry_harness::ChildGuard::spawn("ferry controller", controller(&kc, &ns.name))
            .expect("controller");
    let _sim = spawn_sim(lab, &ns.name, &scratch);

    let tmux = Tmux::start("ferry-podlogs", &cockpit(&kc, &ns.name, ""), 160, 40);
    tmux.wait_for("● live", T);
    let yaml = lab_migration(lab, &ns.name, "broken", &vm.name, None);
    kubectl(&kc, &["apply", "-f", "-"], Some(&yaml));
    let failed = |s: &str| {
        s.lines()
            .any(|l| l.split_whitespace().any(|w| w == "broken") && l.contains("Failed"))
    };
    tmux.wait("broken Failed", Duration::from_secs(180), failed);

    tmux.keys(&["L"]);
    // What `ferry-controller convert` prints last when it fails (convert/mod.rs `exit_code`).
    const LAST: &str = "ferry-controller convert: permanent failure";
    let screen = tmux.wait_for(LAST, T);
    assert!(
        screen.contains("pod logs of broken") && screen.contains("broken-convert-"),
        "the view names the migration and its conversion pod:\n{screen}"
    );
    assert!(
        screen.contains("container convert") || screen.contains("container "),
        "which container:\n{screen}"
    );
    // The container has ended: the stream ends, and the view says so.
    tmux.wait_for("ended", T);
    // `f` reads it again: the same last line.
    tmux.keys(&["f"]);
    tmux.wait_for(LAST, T);
    // Esc: back on the board, the row still there; `l` is still ferry's own log pane.
    tmux.keys(&["Escape"]);
    tmux.wait("back on the board", T, |s| {
        !s.contains("pod logs of") && failed(s)
    });

    // The demo's failure: the sim's injected permanent convert fault. Its pod ends Failed with
    // the sim's own line in its log (as a converter's would be), and `L` shows that line.
    let other = lab.claim_vm().expect("vm");
    let yaml = lab_migration(
        lab,
        &ns.name,
        "injected",
        &other.name,
        Some("convert=permanent"),
    );
    kubectl(&kc, &["apply", "-f", "-"], Some(&yaml));
    tmux.wait("injected Failed", Duration::from_secs(180), |s| {
        row_phase(s, "injected").as_deref() == Some("Failed")
    });
    tmux.keys(&["/"]);
    for c in "injected".chars() {
        tmux.keys(&[&c.to_string()]);
    }
    tmux.keys(&["Enter"]);
    tmux.wait("only injected on the board", T, |s| {
        row_phase(s, "injected").is_some() && row_phase(s, "broken").is_none()
    });
    tmux.keys(&["L"]);
    let screen = tmux.wait_for("injected permanent convert fault (ferry-sim)", T);
    assert!(
        screen.contains("pod logs of injected") && screen.contains("(Failed)"),
        "the view names the migration and its failed pod:\n{screen}"
    );
    tmux.keys(&["Escape"]);
    tmux.keys(&["q"]);
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Two VMs whose flat extents are short (vcsim's own disks: a 10 GiB descriptor over an empty
/// flat file) fail their conversions with the converter's `BadDisk`, each message naming its
/// own disk and its own pod. At 80×24 the problems view shows one group, whose line is the
/// cause. Two more fail by the sim's injected convert fault (no converter record: the Job's
/// reason is their cause): one group of their own.
#[tokio::test(flavor = "multi_thread")]
async fn two_truncated_disks_are_one_problem_group_whose_line_says_baddisk_at_80_columns() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-causes").await.expect("namespace");
    let scratch = repo_root().join(format!("target/lab/tui-causes-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    apply_credentials(lab, &kc, &ns.name);
    let _controller =
        ferry_harness::ChildGuard::spawn("ferry controller", controller(&kc, &ns.name))
            .expect("controller");
    let _sim = spawn_sim(lab, &ns.name, &scratch);
    let tmux = Tmux::start("ferry-causes", &cockpit(&kc, &ns.name, ""), 80, 24);
    tmux.wait_for("● live", T);
    let all = [
        ("short-a", None),
        ("short-b", None),
        ("fault-a", Some("convert=permanent")),
        ("fault-b", Some("convert=permanent")),
    ];
    for (name, fault) in all {
        let vm = lab.claim_vm().expect("vm");
        kubectl(
            &kc,
            &["apply", "-f", "-"],
            Some(&lab_migration(lab, &ns.name, name, &vm.name, fault)),
        );
    }
    tmux.wait("all Failed", Duration::from_secs(240), |s| {
        all.iter()
            .all(|(n, _)| row_phase(s, n).as_deref() == Some("Failed"))
    });
    for name in ["short-a", "short-b"] {
        let cause = jsonpath(&kc, &ns.name, "vmm", name, "{.status.lastFailure.cause}");
        assert_eq!(cause, "BadDisk", "{name}");
    }
    tmux.keys(&["!"]);
    let view = tmux.wait("one group of two", T, |s| {
        s.lines()
            .any(|l| l.contains("2 × failed") && l.contains("BadDisk"))
    });
    assert!(
        view.lines()
            .any(|l| l.contains("2 × failed") && l.contains("PodFailurePolicy")),
        "the injected faults, one group:\n{view}"
    );
    assert!(
        !view.lines().any(|l| l.contains("1 × failed")),
        "no group of one:\n{view}"
    );
    tmux.keys(&["Escape", "q"]);
    let _ = std::fs::remove_dir_all(&scratch);
}

fn tmux_env_cockpit(kubeconfigs: &std::ffi::OsStr, args: &str) -> String {
    format!(
        "KUBECONFIG={} exec {} {args}",
        kubeconfigs.to_string_lossy(),
        env!("CARGO_BIN_EXE_ferry"),
    )
}

fn ferry_once(kubeconfigs: &std::ffi::OsStr, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .env("KUBECONFIG", kubeconfigs)
        .args(args)
        .output()
        .expect("ferry board --once");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn spec_cancel(kubeconfig: &Path, ns: &str, name: &str) -> String {
    kubectl(
        kubeconfig,
        &[
            "get",
            "vmm",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.cancel}",
        ],
        None,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn two_clusters_on_one_board_act_apart_and_one_lost_goes_stale_while_the_other_stays_live() {
    let a = lab();
    let dir = run_state_dir("tui-second");
    let b = Lab::start_as(&dir, 1, "ferry-lab-b").expect("a second lab, context ferry-lab-b");
    let (kc_a, kc_b) = (a.info.kubeconfig.clone(), b.info.kubeconfig.clone());
    install_crds(&kc_a);
    install_crds(&kc_b);
    let ns = a.namespace("tui-two").await.expect("namespace");
    let ns = ns.name.clone();
    kubectl(&kc_b, &["create", "namespace", &ns], None);
    // The same namespace and name in both clusters, and one more in b.
    create_vmm(&kc_a, &ns, "same");
    create_vmm(&kc_b, &ns, "same");
    create_vmm(&kc_b, &ns, "only-b");
    let kcs = a.kubeconfigs(&[&b]);

    // Scripts see both clusters, each with its state.
    let args = [
        "--context",
        "ferry-lab,ferry-lab-b",
        "-n",
        &ns,
        "board",
        "--once",
    ];
    let (ok, json, err) = ferry_once(&kcs, &[&args[..], &["-o", "json"]].concat());
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    let states: Vec<(&str, &str)> = v["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["context"].as_str().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("ferry-lab", "live"), ("ferry-lab-b", "live")]);
    let rows: Vec<(&str, &str)> = v["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["cluster"].as_str().unwrap(), m["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [
            ("ferry-lab-b", "only-b"),
            ("ferry-lab", "same"),
            ("ferry-lab-b", "same")
        ]
    );

    let tmux = Tmux::start(
        "ferry-two",
        &tmux_env_cockpit(&kcs, &format!("--context ferry-lab,ferry-lab-b -n {ns}")),
        160,
        40,
    );
    let screen = tmux.wait("both clusters live with their rows", T, |s| {
        s.matches("● live").count() == 2 && s.contains("only-b") && s.matches(" same ").count() == 2
    });
    assert!(screen.contains("CLUSTER"), "{screen}");
    // Rows: only-b (b), same (a), same (b). Cancel the third: it must land in b only.
    tmux.keys(&["j", "j", "c"]);
    tmux.wait_for("Cancel 1 migration?", T);
    tmux.keys(&["y"]);
    tmux.wait_for("cancel same: applied", T);
    assert_eq!(spec_cancel(&kc_b, &ns, "same"), "true");
    assert_ne!(
        spec_cancel(&kc_a, &ns, "same"),
        "true",
        "not the namesake in a"
    );

    // b goes away: its rows stay, marked stale; a stays live.
    b.stop().expect("stop the second lab");
    let screen = tmux.wait("b stale, a live", Duration::from_secs(90), |s| {
        s.contains("STALE") && s.contains("ferry-lab-b ✕") && s.matches("● live").count() == 1
    });
    assert!(
        screen.contains("only-b"),
        "the last known rows of b stay:\n{screen}"
    );
    create_vmm(&kc_a, &ns, "after");
    tmux.wait("a still delivers", T, |s| s.contains("after"));

    let (ok, text, err) = ferry_once(&kcs, &[&args[..], &["-o", "text"]].concat());
    assert!(!ok, "a cluster that cannot be listed fails the run");
    assert!(err.contains("ferry-lab-b: unreachable"), "{err}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("ferry-lab-b") && l.contains("unreachable")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("ferry-lab ") && l.contains("live")),
        "{text}"
    );

    // :ctx narrows the board to one context, and back to both.
    tmux.keys(&[":"]);
    for c in "ctx ferry-lab".chars() {
        tmux.keys(&[&c.to_string()]);
    }
    tmux.keys(&["Enter"]);
    let screen = tmux.wait("only ferry-lab", T, |s| {
        s.contains("switched to context ferry-lab") && !s.contains("only-b")
    });
    assert!(
        !screen.contains("CLUSTER"),
        "one cluster, no CLUSTER column:\n{screen}"
    );
    tmux.keys(&[":"]);
    for c in "ctx ferry-lab,ferry-lab-b".chars() {
        tmux.keys(&[&c.to_string()]);
    }
    tmux.keys(&["Enter"]);
    tmux.wait("both contexts again, b reconnecting", T, |s| {
        s.contains("CLUSTER") && s.contains("ctx ferry-lab-b") && s.contains("reconnecting")
    });
    tmux.keys(&["q"]);
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_keeps_no_managed_fields_and_a_bounded_event_history_per_object() {
    use ferry::state::{ClusterId, EventKind, ObjKey, State, events::PER_OBJECT, update};
    use k8s_openapi::api::events::v1::Event;
    use kube::{Api, api::PostParams};

    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-store").await.expect("namespace");
    create_vmm(&kc, &ns.name, "kept");
    let client = lab.client().await.expect("client");
    let vmms: Api<VirtualMachineMigration> = Api::namespaced(client.clone(), &ns.name);
    let live = vmms.get("kept").await.expect("get");
    assert!(
        live.metadata.managed_fields.is_some(),
        "the apiserver sends managedFields"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let total = PER_OBJECT + 20;
    for i in 0..total {
        let e: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("kept.{i:03}")},
            "eventTime": format!("2026-01-01T00:{:02}:{:02}.000000Z", i / 60, i % 60),
            "reportingController": "ferry.example/test",
            "reportingInstance": "test",
            "action": "Test",
            "reason": "Numbered",
            "note": format!("event {i:03}"),
            "type": "Normal",
            "regarding": {
                "apiVersion": "migration.platform.example/v1alpha1",
                "kind": "VirtualMachineMigration",
                "namespace": ns.name,
                "name": "kept",
                "uid": live.metadata.uid,
            },
        }))
        .expect("event");
        events
            .create(&PostParams::default(), &e)
            .await
            .expect("create event");
    }

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = ClusterId(0);
    let _watches = ferry::kube::watch::start(
        &client,
        c,
        &ferry::state::Scope::Namespace(ns.name.clone()),
        tx,
    );
    let mut state = State::new(
        "ferry-lab",
        ferry::state::Scope::Namespace(ns.name.clone()),
        false,
        k8s_openapi::jiff::Timestamp::now(),
    );
    let key = ObjKey::at(c, ns.name.clone(), "kept");
    let deadline = Instant::now() + T;
    loop {
        let kept = state.events.of(EventKind::Migration, &key).count();
        if state.index.get(&key).is_some() && state.clusters[0].conn.events.is_live() && kept > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the watches did not deliver");
        if let Ok(Some(a)) = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
            update(&mut state, a);
        }
    }
    // Rows keep no object; the one the details view keeps (read on opening, then the watch's)
    // is trimmed as well.
    state.selected = Some(key.clone());
    let fx = update(&mut state, ferry::state::Action::Enter);
    assert!(
        fx.contains(&ferry::state::Effect::FetchMigration { key: key.clone() }),
        "{fx:?}"
    );
    let result = ferry::kube::watch::read_migration(client.clone(), &key).await;
    update(
        &mut state,
        ferry::state::Action::MigrationRead {
            key: key.clone(),
            result,
        },
    );
    let opened = state.opened(&key).expect("the details' copy");
    assert!(
        opened.metadata.managed_fields.is_none(),
        "trimmed in the store"
    );
    let notes: Vec<String> = state
        .events
        .of(EventKind::Migration, &key)
        .map(|e| e.note.clone())
        .collect();
    assert_eq!(
        notes.len(),
        PER_OBJECT,
        "at most {PER_OBJECT} of {total} events kept"
    );
    assert_eq!(
        notes.last().map(String::as_str),
        Some(format!("event {:03}", total - 1).as_str()),
        "the newest are kept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_board_shows_a_conversion_moving_while_the_row_says_converting() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-convert").await.expect("namespace");
    let scratch = repo_root().join(format!("target/lab/tui-convert-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let vm = lab.claim_vm().expect("vm");
    // An ESXi-style flat disk, read at 4 MiB/s: Converting lasts ~10 s.
    ferry_harness::put_disk(&vm, &scratch, 48, 5, ferry_harness::DiskKind::Flat, 4).expect("disk");
    apply_credentials(lab, &kc, &ns.name);
    let mut controller = Command::new(workspace_bin("ferry-controller"));
    controller
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["-n", &ns.name, "--metrics-addr", "", "--health-addr", ""])
        .args(["--converter-read-limit", &(4u64 << 20).to_string()])
        // Progress is written at most every --status-interval (10 s by default, as long as
        // this whole conversion): every 2 s, so the board has a percentage to show moving.
        .args(["--status-interval", "2s"])
        .env("FERRY_CONVERTER_IMAGE", ferry_harness::LAB_CONVERTER_IMAGE)
        .env("FERRY_ADMISSION_POLICIES", "not-required");
    let _controller =
        ferry_harness::ChildGuard::spawn("ferry-controller", controller).expect("controller");
    let _sim = spawn_sim(lab, &ns.name, &scratch);

    let tmux = Tmux::start("ferry-convert", &cockpit(&kc, &ns.name, ""), 160, 40);
    tmux.wait_for("● live", T);
    kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(&lab_migration(lab, &ns.name, "slow", &vm.name, None)),
    );
    // The row of "slow" in Converting with a percentage strictly between 0 and 100.
    let converting_at = |screen: &str| -> Option<u32> {
        let line = screen
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == "slow"))?;
        if !line.contains("Converting") {
            return None;
        }
        line.split_whitespace()
            .filter_map(|w| w.strip_suffix('%'))
            .filter_map(|n| n.parse::<u32>().ok())
            .find(|p| (1..100).contains(p))
    };
    let screen = tmux.wait(
        "the slow row converting with progress",
        Duration::from_secs(120),
        |s| converting_at(s).is_some(),
    );
    let first = converting_at(&screen).expect("a percentage");
    // And it moves while the row still says Converting (or the conversion finished).
    tmux.wait("the conversion to move on", Duration::from_secs(120), |s| {
        converting_at(s).is_some_and(|p| p > first)
            || s.lines()
                .find(|l| l.split_whitespace().any(|w| w == "slow"))
                .is_some_and(|l| l.contains("Importing") || l.contains("Succeeded"))
    });
    tmux.keys(&["q"]);
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The holder of the Lease `ns/ferry-controller`, if any.
fn lease_holder(kc: &Path, ns: &str) -> Option<String> {
    let out = Command::new(repo_root().join("target/lab/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kc)
        .args([
            "-n",
            ns,
            "get",
            "lease",
            "ferry-controller",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .output()
        .ok()?;
    let h = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !h.is_empty()).then_some(h)
}

/// `ferry controller` takes part in the in-cluster controller's leader election: while another
/// controller holds the Lease it stands by (it never writes beside a leader), and it leads once
/// that one is gone.
#[tokio::test(flavor = "multi_thread")]
async fn the_embedded_controller_stands_by_while_another_leads_and_takes_over_after_it() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-lease").await.expect("namespace");
    let scratch = repo_root().join(format!("target/lab/tui-lease-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let log = |what: &str| std::fs::File::create(scratch.join(format!("{what}.log"))).unwrap();
    let mut incluster = Command::new(workspace_bin("ferry-controller"));
    incluster
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["-n", &ns.name, "--metrics-addr", "", "--health-addr", ""])
        .args(["--leader-elect", "--leader-elect-namespace", &ns.name])
        .args(["--leader-elect-identity", "in-cluster"])
        .env("FERRY_CONVERTER_IMAGE", ferry_harness::LAB_CONVERTER_IMAGE)
        .env("FERRY_ADMISSION_POLICIES", "not-required")
        .stderr(log("in-cluster"))
        .stdout(log("in-cluster-out"));
    let first = ferry_harness::ChildGuard::spawn("in-cluster", incluster).expect("controller");
    ferry_harness::eventually(
        "the in-cluster controller to lead",
        Duration::from_secs(60),
        || async { (lease_holder(&kc, &ns.name).as_deref() == Some("in-cluster")).then_some(()) },
    )
    .await
    .unwrap();

    let mut embedded = controller(&kc, &ns.name);
    embedded
        .env("FERRY_LOG", "info")
        .stderr(log("embedded"))
        .stdout(log("embedded-out"));
    let _second = ferry_harness::ChildGuard::spawn("ferry controller", embedded).expect("ferry");
    let embedded_log = scratch.join("embedded.log");
    ferry_harness::eventually(
        "the embedded controller to stand by",
        Duration::from_secs(60),
        || async {
            std::fs::read_to_string(&embedded_log)
                .ok()
                .filter(|l| l.contains("standing by for the lease"))
                .map(|_| ())
        },
    )
    .await
    .unwrap();
    assert_eq!(
        lease_holder(&kc, &ns.name).as_deref(),
        Some("in-cluster"),
        "the leader keeps the Lease while the embedded controller stands by"
    );

    drop(first);
    let holder = ferry_harness::eventually(
        "the embedded controller to lead",
        Duration::from_secs(60),
        || async { lease_holder(&kc, &ns.name).filter(|h| h.starts_with("ferry-cockpit-")) },
    )
    .await
    .unwrap();
    assert!(holder.starts_with("ferry-cockpit-"), "{holder}");
}

/// `ferry-lab shape --vm VM ARGS…` on the running lab (ReconfigVM_Task through vSphere's API).
fn shape(lab: &Lab, vm: &str, args: &[&str]) {
    let out = Command::new(repo_root().join("target/lab/bin/ferry-lab"))
        .arg("shape")
        .arg("--state-dir")
        .arg(&lab.info.state_dir)
        .args(["--vm", vm])
        .args(args)
        .output()
        .expect("ferry-lab shape");
    assert!(
        out.status.success(),
        "ferry-lab shape {vm} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_migration_preflight_holds_reads_blocked_and_p_shows_its_concern_grouped() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-preflight").await.expect("namespace");
    let scratch = repo_root().join(format!("target/lab/tui-preflight-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let vm = lab.claim_vm().expect("vm");
    ferry_harness::put_vmdk(&vm, &scratch, 4, 3).expect("vmdk");
    // A second disk ferry cannot read: a Critical concern (IncompleteInventory).
    shape(lab, &vm.name, &["--add-disk", "unreadable"]);
    apply_credentials(lab, &kc, &ns.name);

    let _controller =
        ferry_harness::ChildGuard::spawn("ferry controller", controller(&kc, &ns.name))
            .expect("controller");

    let tmux = Tmux::start("ferry-preflight", &cockpit(&kc, &ns.name, ""), 160, 40);
    tmux.wait_for("● live", T);
    kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(&lab_migration(lab, &ns.name, "held", &vm.name, None)),
    );
    // The board marks it at a glance, with the concern's code.
    let board = tmux.wait("held marked Blocked", Duration::from_secs(120), |s| {
        s.lines()
            .any(|l| l.contains("held") && l.contains("Blocked"))
    });
    assert!(board.contains("IncompleteInventory"), "{board}");

    // P: the concerns of the rows shown, grouped by code.
    tmux.keys(&["P"]);
    let view = tmux.wait("the preflight view", T, |s| {
        s.lines()
            .any(|l| l.contains("IncompleteInventory") && l.contains("Critical"))
    });
    assert!(view.contains("1 VM"), "{view}");
    // Enter: the group's migrations, each with its whole message.
    tmux.keys(&["Enter"]);
    tmux.wait_for("vSphere reports 2 virtual disk(s)", T);
    tmux.keys(&["Escape"]);
    tmux.keys(&["Escape"]);
    tmux.wait("back on the board", T, |s| {
        s.lines()
            .any(|l| l.contains("held") && l.contains("Blocked"))
    });
    tmux.keys(&["q"]);
    // Nothing was touched: the source still runs.
    let power = kubectl(
        &kc,
        &[
            "get",
            "vmm",
            "held",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.status.sourcePowerOff}",
        ],
        None,
    );
    assert_eq!(power.trim(), "", "never asked to power off");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// `kubectl get KIND NAME -n NS -o jsonpath=PATH`.
fn jsonpath(kc: &Path, ns: &str, kind: &str, name: &str, path: &str) -> String {
    kubectl(
        kc,
        &[
            "get",
            kind,
            name,
            "-n",
            ns,
            "-o",
            &format!("jsonpath={path}"),
        ],
        None,
    )
}

/// Writes `status` as the controller would, on the status subresource.
fn patch_status(kc: &Path, ns: &str, kind: &str, name: &str, status: &str) {
    kubectl(
        kc,
        &[
            "-n",
            ns,
            "patch",
            kind,
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{status}}}"#),
        ],
        None,
    );
}

/// Issue 27: `X` on a warm migration precopied and waiting for its cutover, confirmed with `y`,
/// sets its `spec.warm.cutover` in the API server; on the wave strip, `X` on a cold wave is
/// refused in the footer (the wave untouched), and on a warm wave — whose strip line says how
/// many wait and that no cutover is set — it sets the wave's `spec.warm.cutover`. No controller
/// runs: the statuses are written as the controllers would write them.
#[tokio::test(flavor = "multi_thread")]
async fn x_then_y_cuts_over_a_waiting_warm_migration_and_a_warm_wave_and_refuses_a_cold_wave() {
    let lab = lab();
    let kc = lab.info.kubeconfig.clone();
    install_crds(&kc);
    let ns = lab.namespace("tui-cutover").await.expect("namespace");

    let mut vmm: VirtualMachineMigration = migration("warmy");
    vmm.metadata.namespace = Some(ns.name.clone());
    vmm.metadata.uid = None;
    vmm.metadata.generation = None;
    vmm.spec.mode = ferry_crds::MigrationMode::Warm;
    vmm.spec.warm = Some(ferry_crds::WarmSpec {
        precopy_interval_seconds: Some(600),
        ..ferry_crds::WarmSpec::default()
    });
    let mut waves = String::new();
    for (name, mode) in [
        ("cold", ferry_crds::MigrationMode::Cold),
        ("warmwave", ferry_crds::MigrationMode::Warm),
    ] {
        let mut w = ferry_crds::fixtures::wave(name, 2);
        w.metadata.namespace = Some(ns.name.clone());
        w.metadata.uid = None;
        w.metadata.generation = None;
        w.spec.template.mode = mode;
        waves += &serde_yaml::to_string(&w).expect("yaml");
        waves += "---\n";
    }
    let yaml = serde_yaml::to_string(&vmm).expect("yaml") + "---\n" + &waves;
    kubectl(&kc, &["apply", "-f", "-"], Some(&yaml));
    patch_status(
        &kc,
        &ns.name,
        "vmm",
        "warmy",
        r#"{"phase":"CuttingOver","message":"precopied, waiting for its cutover","warm":{"rounds":2}}"#,
    );
    for (name, waiting) in [("cold", 0), ("warmwave", 2)] {
        patch_status(
            &kc,
            &ns.name,
            "wave",
            name,
            &format!(r#"{{"phase":"Running","total":2,"waitingForCutover":{waiting}}}"#),
        );
    }

    let tmux = Tmux::start("ferry-cutover", &cockpit(&kc, &ns.name, ""), 160, 40);
    tmux.wait(
        "warmy waiting on a live board, both waves on the strip",
        T,
        |s| {
            s.contains("● live")
                && s.lines()
                    .any(|l| l.contains("warmy") && l.contains("CuttingOve"))
                && s.contains("2 precopied, waiting · cutover: not set")
                && s.lines()
                    .any(|l| l.contains("cold") && l.contains("Running"))
        },
    );

    // The migration: the only row, under the cursor.
    tmux.keys(&["X"]);
    tmux.wait_for("Cutover 1 migration?", T);
    tmux.keys(&["y"]);
    tmux.wait_for("cutover warmy: applied", T);
    assert_eq!(
        jsonpath(&kc, &ns.name, "vmm", "warmy", "{.spec.warm.cutover}"),
        "true"
    );

    // The wave strip (Tab), on its first wave: the cold one is refused, never patched.
    tmux.keys(&["Tab"]);
    tmux.wait_for("wave strip:", T);
    tmux.keys(&["X"]);
    tmux.wait_for("nothing to cutover: cold is a cold wave", T);
    assert_eq!(
        jsonpath(&kc, &ns.name, "wave", "cold", "{.spec.warm}"),
        "",
        "a cold wave is not patched"
    );

    // The warm one: asked, then its spec.warm.cutover set; the strip says the cutover is now.
    tmux.keys(&["j"]);
    tmux.keys(&["X"]);
    tmux.wait_for("Cutover 1 wave?", T);
    tmux.keys(&["y"]);
    tmux.wait_for("cutover warmwave: applied", T);
    assert_eq!(
        jsonpath(&kc, &ns.name, "wave", "warmwave", "{.spec.warm.cutover}"),
        "true"
    );
    tmux.wait_for("2 precopied, waiting · cutover now", T);
    tmux.keys(&["q"]);
}

/// The README's first command as a newcomer runs it (but for its build of the binaries, which
/// this test run made already): `make demo` in a terminal reaches the board behind its welcome, the keys the welcome suggests do what it says, and one `q` ends
/// the cockpit and the whole demo — lab, controller, sim — with nothing of it left running.
/// (The demo's own stop fails, exit 1, if anything outlives SIGTERM and its stdin's end.)
#[tokio::test(flavor = "multi_thread")]
async fn make_demo_reaches_the_board_and_one_q_ends_the_demo_with_nothing_left() {
    let state = run_state_dir("demo-tmux");
    let work = state.with_extension("work");
    let cmd = format!(
        "cd {root} && LAB_STATE={state} DEMO_WORK={work} DEMO_VMS=10 DEMO_IMPORT_MIB_S=12 \
         DEMO_METRICS_ADDR= DEMO_HEALTH_ADDR= DEMO_NO_BUILD=1 make demo; \
         echo \"demo exited $?\"; sleep 600",
        root = repo_root().display(),
        state = state.display(),
        work = work.display(),
    );
    let tmux = Tmux::start("ferry-demo", &cmd, 120, 40);
    // A warm machine: the lab, ten VMDKs and the wave come up in well under a minute; the
    // bound is for a loaded one (and a workspace build that has nothing to do).
    let screen = tmux.wait_for(" welcome ", Duration::from_secs(600));
    assert!(screen.contains("q  quit"), "{screen}");
    assert!(
        screen.contains("Any other key closes this"),
        "the welcome says what closes it: {screen}"
    );
    // What the welcome suggests: move, open one, the waves, back, a filter.
    tmux.keys(&["j"]);
    tmux.wait("the board under the welcome", T, |s| {
        !s.contains(" welcome ") && s.contains("demo-wave")
    });
    tmux.keys(&["Enter"]);
    tmux.wait_for("── conditions", T);
    tmux.keys(&["Escape"]);
    tmux.wait("back on the board", T, |s| !s.contains("── conditions"));
    tmux.keys(&["w"]);
    tmux.wait_for("every wave", T);
    tmux.keys(&["Escape"]);
    // (Its own press, seen: an Esc followed at once by / reads as Alt-/.)
    tmux.wait("the waves closed", T, |s| !s.contains("every wave"));
    tmux.keys(&["/"]);
    tmux.keys(&["phase:Queued", "Enter"]);
    tmux.wait("a filtered board", T, |s| {
        s.contains("filter “phase:Queued”")
    });
    tmux.keys(&["Escape"]);
    // (Its own press: an Esc followed at once by q reads as Alt-q.)
    tmux.wait("the filter cleared", T, |s| !s.contains("filter “"));
    // One q: the cockpit quits, the demo stops all it started.
    tmux.keys(&["q"]);
    let end = tmux.wait_for("demo exited", Duration::from_secs(120));
    assert!(
        end.contains("demo exited 0"),
        "the demo's stop left something running: {end}"
    );
    // The lab's processes name its state directory in their arguments (this test's own shell
    // only sets LAB_STATE).
    let pattern = format!("--state-dir {0}|{0}/", state.display());
    let left = Command::new("pgrep")
        .args(["-f", "--", &pattern])
        .output()
        .expect("pgrep");
    assert!(
        left.stdout.is_empty(),
        "processes of the demo left: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
