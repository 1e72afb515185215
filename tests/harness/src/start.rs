//! Starting (or finding) the lab, once per test binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::info::LabInfo;
use crate::namespace::TestNamespace;
use crate::{Error, InventoryVm, Result};

/// How long a lab may take from spawn to `ready` (a warm start takes seconds; etcd and the
/// apiserver on a loaded 2-core machine can take much longer).
const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// Default number of vcsim VMs in a lab the harness starts: enough for every suite to claim its own.
const DEFAULT_VMS: u32 = 64;

/// A running lab: either started by this process (and stopped when it exits) or found through
/// `FERRY_LAB_STATE`.
#[derive(Debug)]
pub struct Lab {
    pub info: LabInfo,
    owned: Mutex<Option<OwnedProcess>>,
}

#[derive(Debug)]
struct OwnedProcess {
    child: Child,
    // Held open for the life of the lab: the lab stops when this pipe reaches EOF, which the
    // kernel guarantees when this process exits, however it exits (panic, abort, SIGKILL).
    _stdin: ChildStdin,
}

static LAB: OnceLock<Lab> = OnceLock::new();

/// The lab for this test binary, started on first use.
///
/// Guarantees: the returned lab answered `ready`; with `FERRY_LAB_STATE` set and a live lab in
/// that directory, nothing is started; otherwise a lab is built if needed and started in a fresh
/// directory under `target/lab/`, and it stops when this process exits.
///
/// Panics when the lab cannot be built or started: no test can run without it, and a loud
/// failure beats a silent skip.
pub fn lab() -> &'static Lab {
    LAB.get_or_init(|| match Lab::find_or_start() {
        Ok(lab) => lab,
        Err(e) => panic!("ferry lab unavailable: {e}"),
    })
}

/// What a test needs of KubeVirt in its lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeVirt {
    /// KubeVirt's own virt-api and virt-controller (`ferry-lab --kubevirt`).
    Real,
    /// None of it: the test's sim plays KubeVirt whole, which a lab running virt-controller does
    /// not allow (two controllers of one VirtualMachine would fight over its instance).
    Absent,
}

/// A lab with or without KubeVirt's own code, started on first use: the shared [`lab`]
/// (`FERRY_LAB_STATE`; `make test` starts it with `--kubevirt`) when it is of that kind, else
/// one of this test process's own (`target/lab/runs/NAME-PID`, `vms` vcsim VMs) that stops
/// when the process exits. Without a shared lab, only that one is started.
///
/// Panics as [`lab`] does.
pub fn lab_with(kubevirt: KubeVirt, name: &str, vms: u32) -> &'static Lab {
    static OWN: OnceLock<Lab> = OnceLock::new();
    if std::env::var_os("FERRY_LAB_STATE").is_some() {
        let shared = lab();
        if shared.info.kubevirt.is_some() == (kubevirt == KubeVirt::Real) {
            return shared;
        }
    }
    OWN.get_or_init(|| {
        let dir = run_state_dir(name);
        match kubevirt {
            KubeVirt::Real => Lab::start_with_kubevirt(&dir, vms),
            KubeVirt::Absent => Lab::start(&dir, vms),
        }
        .unwrap_or_else(|e| panic!("lab ({kubevirt:?} KubeVirt) unavailable: {e}"))
    })
}

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| here.to_path_buf())
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// A fresh directory for a lab of this test process's own called `name`:
/// `target/lab/runs/NAME-PID`, emptied if a run with the same pid left one. Every lab start
/// removes the directories there whose process and lab are gone ([`sweep_dead_states`]).
pub fn run_state_dir(name: &str) -> PathBuf {
    let dir = runs_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Where the labs of test processes keep their state, one directory per lab.
fn runs_dir() -> PathBuf {
    repo_root().join("target/lab/runs")
}

/// Removes the state directories under `base` (`NAME-PID`) of labs that earlier test
/// processes started once both that process and its lab are gone: each holds etcd's data, the
/// staged disks and the logs of one run, gigabytes after the data-path suites, and nothing
/// reads them after the run that made them (a failed run's logs are still there until the
/// next run starts). A directory whose process or lab is still running is left alone.
fn sweep_dead_states(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.rsplit_once('-'))
            .and_then(|(_, p)| p.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let lab_alive = LabInfo::load(&dir).is_ok_and(|info| pid_alive(info.pid));
        if pid_alive(pid) || lab_alive {
            continue;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => tracing::info!(dir = %dir.display(), "removed a finished run's lab state"),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove a finished run's lab state")
            }
        }
    }
}

impl Lab {
    fn find_or_start() -> Result<Lab> {
        if let Some(dir) = std::env::var_os("FERRY_LAB_STATE") {
            let dir = PathBuf::from(dir);
            let info = LabInfo::load(&dir)?;
            if !pid_alive(info.pid) {
                return Err(Error::NotReady(format!(
                    "FERRY_LAB_STATE={} names a lab whose process {} is gone; start it with `make lab`",
                    dir.display(),
                    info.pid
                )));
            }
            return Ok(Lab {
                info,
                owned: Mutex::new(None),
            });
        }
        Lab::start(&run_state_dir("test-state"), DEFAULT_VMS)
    }

    /// Builds the lab when needed and starts a private one in `state_dir`, owned by this process.
    ///
    /// Reusing a `state_dir` restarts the same lab: same ports, certificates and data.
    pub fn start(state_dir: &Path, vms: u32) -> Result<Lab> {
        Lab::start_as(state_dir, vms, "ferry-lab")
    }

    /// Like [`Lab::start`], with its kubeconfig's cluster and context called `context` (its user
    /// `CONTEXT-admin`): a second cluster whose kubeconfig merges with the first one's
    /// (`KUBECONFIG=a:b`, see [`Lab::kubeconfigs`]).
    pub fn start_as(state_dir: &Path, vms: u32, context: &str) -> Result<Lab> {
        Lab::spawn(state_dir, vms, context, false)
    }

    /// Like [`Lab::start`], with KubeVirt's own virt-api and virt-controller (`ferry-lab
    /// --kubevirt`): KubeVirt's CRDs instead of the lab's schema-less ones, and every
    /// VirtualMachine and VirtualMachineInstance judged by virt-api's webhooks. `ready` comes
    /// once virt-api has refused an invalid VirtualMachine and mutated a valid one;
    /// [`LabInfo::kubevirt`] says where they run.
    pub fn start_with_kubevirt(state_dir: &Path, vms: u32) -> Result<Lab> {
        Lab::spawn(state_dir, vms, "ferry-lab", true)
    }

    fn spawn(state_dir: &Path, vms: u32, context: &str, kubevirt: bool) -> Result<Lab> {
        build()?;
        sweep_dead_states(&runs_dir());
        let bin = repo_root().join("target/lab/bin/ferry-lab");
        let started = Instant::now();
        let mut cmd = Command::new(&bin);
        cmd.arg("--state-dir")
            .arg(state_dir)
            .arg("--vms")
            .arg(vms.to_string())
            .arg("--stop-on-stdin-eof")
            .arg("--context")
            .arg(context);
        if kubevirt {
            cmd.arg("--kubevirt");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| Error::Spawn {
                what: bin.display().to_string(),
                source,
            })?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| Error::NotReady("no stdin pipe".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::NotReady("no stdout pipe".into()))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut ready_sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !ready_sent && line.trim() == "ready" {
                    ready_sent = true;
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(READY_TIMEOUT).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::NotReady(format!(
                "no `ready` from {} within {}s; logs in {}/logs",
                bin.display(),
                READY_TIMEOUT.as_secs(),
                state_dir.display()
            )));
        }
        tracing::info!(elapsed = ?started.elapsed(), dir = %state_dir.display(), "lab ready");
        let info = LabInfo::load(state_dir)?;
        Ok(Lab {
            info,
            owned: Mutex::new(Some(OwnedProcess {
                child,
                _stdin: stdin,
            })),
        })
    }

    /// Stops a lab this process started (SIGTERM, then waits), leaving its state directory for a
    /// later [`Lab::start`] on the same directory. A lab found through `FERRY_LAB_STATE` is
    /// left alone.
    pub fn stop(&self) -> Result<()> {
        let taken = self
            .owned
            .lock()
            .map_err(|_| Error::NotReady("lab lock poisoned".into()))?
            .take();
        if let Some(mut owned) = taken {
            let pid = owned.child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if owned.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = owned.child.kill();
                    let _ = owned.child.wait();
                    return Err(Error::Timeout {
                        what: "the lab to stop".into(),
                        secs: 60,
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Restarts one component of the lab (`apiserver`, `controller-manager`, `s3s-fs`) through
    /// its control socket: stopped, started again on the same ports and data, and ready when this
    /// returns. Other components keep running.
    pub fn restart(&self, component: &str) -> Result<()> {
        use std::io::{Read, Write};
        let path = self.info.state_dir.join("control.sock");
        let what = format!("restarting {component}");
        let io = |source| Error::Command {
            what: what.clone(),
            detail: format!("{}: {source}", path.display()),
        };
        let mut s = std::os::unix::net::UnixStream::connect(&path).map_err(io)?;
        s.set_read_timeout(Some(READY_TIMEOUT)).map_err(io)?;
        writeln!(s, "restart {component}").map_err(io)?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).map_err(io)?;
        match answer.trim() {
            "ok" => Ok(()),
            other => Err(Error::Command {
                what,
                detail: other.to_owned(),
            }),
        }
    }

    /// The value of `KUBECONFIG` that holds the contexts of this lab and of `others`, merged the
    /// way kubectl (and kube-rs) merge a list of files.
    pub fn kubeconfigs(&self, others: &[&Lab]) -> std::ffi::OsString {
        let paths = std::iter::once(self)
            .chain(others.iter().copied())
            .map(|l| l.info.kubeconfig.clone());
        std::env::join_paths(paths).unwrap_or_default()
    }

    /// A client with the lab's admin identity.
    pub async fn client(&self) -> Result<kube::Client> {
        self.client_with(KubeConfigOptions::default()).await
    }

    /// A client with the lab's kubeconfig and the given options (e.g. impersonation is set on
    /// the resulting `kube::Config` by the caller through [`Lab::config`]).
    pub async fn client_with(&self, options: KubeConfigOptions) -> Result<kube::Client> {
        let config = self.config(options).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// The lab's kubeconfig as a `kube::Config`.
    pub async fn config(&self, options: KubeConfigOptions) -> Result<kube::Config> {
        let kubeconfig = Kubeconfig::read_from(&self.info.kubeconfig)
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string()))
    }

    /// `kubectl` of the lab's version, pointed at the lab.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(repo_root().join("target/lab/bin/kubectl"));
        cmd.arg("--kubeconfig").arg(&self.info.kubeconfig);
        cmd
    }

    /// Applies ferry's CRDs from `deploy/crds` (server-side, idempotent) and the controller's
    /// namespace (`deploy/controller/namespace.yaml`: where the controller keeps the key of its
    /// creation stamps, whatever namespace it watches), and waits until both CRDs are
    /// established.
    ///
    /// # Errors
    /// kubectl's, with its stderr.
    pub fn install_crds(&self) -> Result<()> {
        let dir = repo_root().join("deploy/crds");
        let dir = dir.to_string_lossy();
        self.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", &dir])?;
        let ns = repo_root().join("deploy/controller/namespace.yaml");
        self.kubectl_ok(&["apply", "-f", &ns.to_string_lossy()])?;
        // `kubectl wait --for=condition=...` fails at once instead of waiting when it reads a
        // CRD whose `status.conditions` the apiserver has not yet written ("accessor error:
        // <nil> is of the type <nil>"). That window is short but real on a loaded machine, so
        // that one error means "not yet" until the same 60 s deadline.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.kubectl_ok(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/virtualmachinemigrations.migration.platform.example",
                "crd/migrationwaves.migration.platform.example",
            ]) {
                Err(Error::Command { detail, .. })
                    if detail.contains("accessor error") && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => return other.map(drop),
            }
        }
    }

    /// Runs `kubectl ARGS` and returns stdout, or an error carrying stderr.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        let out = self
            .kubectl()
            .args(args)
            .output()
            .map_err(|source| Error::Spawn {
                what: "kubectl".into(),
                source,
            })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Command {
                what: format!("kubectl {}", args.join(" ")),
                detail: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }

    /// A fresh namespace for one test, deleted when the returned guard drops.
    pub async fn namespace(&self, prefix: &str) -> Result<TestNamespace> {
        TestNamespace::create(self, prefix).await
    }

    /// Claims a vcsim VM that no other test (in any test binary sharing this lab) has claimed.
    pub fn claim_vm(&self) -> Result<InventoryVm> {
        self.claim_from(self.info.inventory()?, "claims")
    }

    /// Claims the first free VM of the main vCenter that `wanted` accepts (e.g. on one host).
    pub fn claim_vm_where(&self, wanted: impl Fn(&InventoryVm) -> bool) -> Result<InventoryVm> {
        let vms = self
            .info
            .inventory()?
            .into_iter()
            .filter(|v| wanted(v))
            .collect();
        self.claim_from(vms, "claims")
    }

    /// Claims a VM of the CA-signed vCenter, as [`Lab::claim_vm`] does of the main one.
    pub fn claim_vm_ca(&self) -> Result<InventoryVm> {
        self.claim_from(self.info.inventory_ca()?, "claims-ca")
    }

    fn claim_from(&self, vms: Vec<InventoryVm>, dir: &str) -> Result<InventoryVm> {
        let claims = self.info.state_dir.join(dir);
        std::fs::create_dir_all(&claims).map_err(|source| Error::Read {
            path: claims.clone(),
            source,
        })?;
        for vm in &vms {
            let marker = claims.join(&vm.name);
            if std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&marker)
                .is_ok()
            {
                return Ok(vm.clone());
            }
        }
        Err(Error::NoFreeVm(vms.len()))
    }
}

/// Builds (or finds cached) lab binaries; cheap when nothing changed.
fn build() -> Result<()> {
    let root = repo_root();
    let status = Command::new(root.join("tests/lab/build.sh"))
        .current_dir(&root)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|source| Error::Spawn {
            what: "tests/lab/build.sh".into(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Build(status.to_string()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn finished_runs_lab_states_are_swept_and_running_ones_and_others_kept() {
        let base = std::env::temp_dir().join(format!("ferry-sweep-{}", std::process::id()));
        // Above the kernel's largest pid_max (2^22): no process can have it.
        let dead = 4_194_305;
        let own = std::process::id();
        let names = [
            format!("test-state-{dead}"),
            format!("soak-state-{dead}"),
            format!("tui-restart-{own}"),
            "no-pid".to_owned(),
        ];
        for n in &names {
            std::fs::create_dir_all(base.join(n).join("logs")).unwrap();
        }
        sweep_dead_states(&base);
        let mut left: Vec<String> = std::fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(
            left,
            vec!["no-pid".to_owned(), format!("tui-restart-{own}")]
        );
    }
}
