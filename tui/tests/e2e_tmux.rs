//! The cockpit as a person uses it: started in tmux against the lab, read with capture-pane,
//! driven with send-keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use ferry_crds::{VirtualMachineMigration, fixtures::migration};
use ferry_harness::{Lab, lab, repo_root};

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
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
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
        "{} --kubeconfig {} -n {ns} {extra}; sleep 600",
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
    tmux.keys(&["q"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_impersonated_read_only_user_sees_the_board_and_gets_forbidden_on_cancel() {
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
        160,
        40,
    );
    tmux.wait("charlie on a live board", T, |s| {
        s.contains("charlie") && s.contains("● live")
    });
    tmux.keys(&["c"]);
    tmux.wait_for("Cancel 1 migration?", T);
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("forbidden", T);
    assert!(
        screen.contains("viewer"),
        "the message names the user:\n{screen}"
    );
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
    assert_ne!(cancel, "true");
    tmux.keys(&["Escape", "q"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_board_survives_the_apiserver_stopping_and_goes_from_stale_to_live() {
    let dir = repo_root().join(format!("target/lab/tui-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
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
