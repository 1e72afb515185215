//! Shared setup of the controller's end-to-end suites: the lab (real apiserver, vcsim, S3), the
//! sim and the controller as processes, a migration of a claimed vcsim VM with a real VMDK.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ferry_crds::{
    ConditionStatus, ConditionType, Phase, SecretRef, SourceEndpoint, SourceSpec, StagingSpec,
    TargetSpec, VirtualMachineMigration, VirtualMachineMigrationSpec, VmSelector,
};
use ferry_harness::{
    ChildGuard, InventoryVm, Lab, RealDisk, TestNamespace, eventually, lab, put_vmdk,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

pub const VSPHERE_SECRET: &str = "vsphere";
pub const S3_SECRET: &str = "staging";
/// The fault annotation of ferry-sim.
pub const FAULT: &str = "sim.ferry.example/fault";

/// The directory of this build's binaries: the test executable lives in `<target>/<profile>/deps`;
/// `$FERRY_BIN_DIR` (relative to the workspace) for another build's, e.g. `target/release`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FERRY_BIN_DIR").filter(|d| !d.is_empty()) {
        return workspace().join(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("target/<profile>")
}

/// Makes sure the workspace binaries exist (the suites run them as processes); they are built by
/// `cargo build --workspace --bins` (what `make test` does first).
pub fn binaries() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = bin_dir();
    BUILT.get_or_init(|| {
        let present = || dir.join("ferry-controller").exists() && dir.join("ferry-sim").exists();
        // Another build may be relinking them this very moment.
        for _ in 0..20 {
            if present() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let st = Command::new(env!("CARGO"))
            .args(["build", "--workspace", "--bins"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo build");
        assert!(st.success(), "building the workspace binaries failed");
    });
    (dir.join("ferry-controller"), dir.join("ferry-sim"))
}

/// The workspace root, from this crate's manifest directory.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

/// Installs the ferry CRDs on `lab` (idempotent), once per lab in this test process: a test
/// binary may run the shared lab and labs of its own (one with KubeVirt), each needing them.
pub fn install_crds(lab: &Lab) {
    static DONE: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    // Held while installing, so that two tests on one lab do not both apply them.
    let mut done = DONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !done.contains(&lab.info.state_dir) {
        lab.install_crds()
            .expect("the CRDs applied and established");
        done.insert(lab.info.state_dir.clone());
    }
}

/// A free TCP port on loopback.
pub use ferry_harness::free_port;

/// One test's world: its namespace, VM, disk, and the processes.
pub struct Env {
    pub lab: &'static Lab,
    pub ns: TestNamespace,
    pub vm: InventoryVm,
    pub disk: RealDisk,
    pub scratch: PathBuf,
    pub volumes: PathBuf,
    pub metrics_port: u16,
    pub controller: Option<ChildGuard>,
    pub sim: Option<ChildGuard>,
    pub extra_controller_args: Vec<String>,
    pub sim_args: Vec<String>,
    pub controller_kubeconfig: Option<PathBuf>,
}

/// A credentials Secret as its owner writes it for ferry: opted in by the label.
pub fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    let mut s = unlabelled_secret(name, data);
    s.metadata.labels = Some(BTreeMap::from([(
        ferry_crds::names::CREDENTIALS_LABEL.to_owned(),
        ferry_crds::names::CREDENTIALS_LABEL_VALUE.to_owned(),
    )]));
    s
}

/// A Secret without ferry's opt-in label.
pub fn unlabelled_secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Secret::default()
    }
}

/// The lab vCenter's credentials Secret: opted in, bound to its URL and SHA-256 thumbprint.
pub fn vsphere_secret(lab: &Lab, name: &str) -> Secret {
    let v = &lab.info.vcenter;
    secret(
        name,
        &[
            ("username", &v.username),
            ("password", &v.password),
            ("url", &v.url),
            ("thumbprint", &v.thumbprint_sha256),
        ],
    )
}

/// The lab S3's credentials Secret: opted in, bound to its endpoint and bucket.
pub fn s3_secret(lab: &Lab, name: &str) -> Secret {
    let s = &lab.info.s3;
    secret(
        name,
        &[
            ("accessKeyId", &s.access_key),
            ("secretAccessKey", &s.secret_key),
            ("endpoint", &s.endpoint),
            ("bucket", &s.bucket),
        ],
    )
}

impl Env {
    /// A namespace with the credentials Secrets, a claimed VM with a real `mib`-MiB disk.
    pub async fn new(prefix: &str, mib: u64) -> Env {
        let lab = lab();
        let vm = lab.claim_vm().unwrap();
        let secrets = [
            vsphere_secret(lab, VSPHERE_SECRET),
            s3_secret(lab, S3_SECRET),
        ];
        Env::with(lab, prefix, vm, mib, 0x5eed ^ mib, secrets).await
    }

    /// Like [`Env::new`], on `lab` instead of the shared one: a lab this test binary started
    /// for itself (one with KubeVirt, [`Lab::start_with_kubevirt`]), its ferry CRDs installed,
    /// one of its vcsim VMs claimed and its vCenter and S3 in the Secrets.
    pub async fn on_lab(lab: &'static Lab, prefix: &str, mib: u64) -> Env {
        let vm = lab.claim_vm().unwrap();
        let secrets = [
            vsphere_secret(lab, VSPHERE_SECRET),
            s3_secret(lab, S3_SECRET),
        ];
        Env::with(lab, prefix, vm, mib, 0x5eed ^ mib, secrets).await
    }

    /// Like [`Env::new`], on the lab's CA-signed vCenter and its https S3: the Secrets carry
    /// the endpoints and the lab CA's PEM (`cacert`), nothing is pinned by thumbprint.
    pub async fn new_ca(prefix: &str, mib: u64) -> Env {
        let lab = lab();
        let vm = lab.claim_vm_ca().unwrap();
        let (vc, s3, tls) = (&lab.info.vcenter_ca, &lab.info.s3, &lab.info.s3_tls);
        let vc_ca = std::fs::read_to_string(&vc.ca_file).unwrap();
        let s3_ca = std::fs::read_to_string(&tls.ca_file).unwrap();
        let secrets = [
            secret(
                VSPHERE_SECRET,
                &[
                    ("username", &vc.username),
                    ("password", &vc.password),
                    ("url", &vc.url),
                    ("cacert", &vc_ca),
                ],
            ),
            secret(
                S3_SECRET,
                &[
                    ("accessKeyId", &s3.access_key),
                    ("secretAccessKey", &s3.secret_key),
                    ("endpoint", &tls.endpoint),
                    ("bucket", &s3.bucket),
                    ("cacert", &s3_ca),
                ],
            ),
        ];
        Env::with(lab, prefix, vm, mib, 0xca ^ mib, secrets).await
    }

    /// A namespace of `lab` holding `secrets`, and `vm` given a real `mib`-MiB disk of `seed`'s
    /// bytes.
    async fn with(
        lab: &'static Lab,
        prefix: &str,
        vm: InventoryVm,
        mib: u64,
        seed: u64,
        secrets: [Secret; 2],
    ) -> Env {
        binaries();
        install_crds(lab);
        let ns = lab.namespace(prefix).await.unwrap();
        let scratch = bin_dir().join("e2e").join(&ns.name);
        let disk = put_vmdk(&vm, &scratch, mib, seed).unwrap();
        let api: Api<Secret> = ns.api();
        for s in secrets {
            api.create(&PostParams::default(), &s).await.unwrap();
        }
        let volumes = scratch.join("volumes");
        std::fs::create_dir_all(&volumes).unwrap();
        Env {
            lab,
            ns,
            vm,
            disk,
            scratch,
            volumes,
            metrics_port: free_port(),
            controller: None,
            sim: None,
            extra_controller_args: vec![],
            sim_args: vec![],
            controller_kubeconfig: None,
        }
    }

    /// The migration of this test's VM, trusted by SHA-256 thumbprint.
    pub fn migration(&self, name: &str) -> VirtualMachineMigration {
        let info = &self.lab.info;
        let spec = VirtualMachineMigrationSpec {
            source: SourceSpec {
                endpoint: SourceEndpoint {
                    url: Some(info.vcenter.url.clone()),
                    credentials_secret_ref: SecretRef::new(VSPHERE_SECRET),
                    thumbprint: Some(info.vcenter.thumbprint_sha256.clone()),
                    insecure_skip_tls_verify: false,
                },
                vm: VmSelector::by_name(self.vm.name.clone()),
                power: Default::default(),
            },
            target: TargetSpec::default(),
            staging: StagingSpec {
                endpoint: info.s3.endpoint.clone(),
                bucket: info.s3.bucket.clone(),
                prefix: Some("e2e".into()),
                region: info.s3.region.clone(),
                credentials_secret_ref: SecretRef::new(S3_SECRET),
            },
            conversion: Default::default(),
            mode: Default::default(),
            warm: None,
            hooks: None,
            cancel: false,
            paused: false,
            preflight: None,
            retry: 0,
        };
        VirtualMachineMigration::new(name, spec)
    }

    /// A wave template of this test's migration: the same source endpoint, power settings,
    /// target template, staging and conversion.
    pub fn wave_template(&self) -> ferry_crds::WaveTemplate {
        let t = self.migration("template").spec;
        ferry_crds::WaveTemplate {
            source: ferry_crds::WaveSource {
                endpoint: t.source.endpoint,
                power: t.source.power,
            },
            target: t.target.template,
            staging: t.staging,
            conversion: t.conversion,
            mode: Default::default(),
            hooks: None,
        }
    }

    pub fn api(&self) -> Api<VirtualMachineMigration> {
        self.ns.api()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.controller_kubeconfig
            .clone()
            .unwrap_or_else(|| self.lab.info.kubeconfig.clone())
    }

    /// Makes the controller (not the sim) talk to the API server as `user` (impersonation).
    pub fn impersonate(&mut self, user: &str, groups: &[&str]) {
        let mut kc = kube::config::Kubeconfig::read_from(&self.lab.info.kubeconfig).unwrap();
        for a in &mut kc.auth_infos {
            if let Some(info) = a.auth_info.as_mut() {
                info.impersonate = Some(user.to_owned());
                info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
            }
        }
        let path = self.scratch.join("controller.kubeconfig");
        // JSON is YAML: the kubeconfig loader reads it.
        std::fs::write(&path, serde_json::to_vec(&kc).unwrap()).unwrap();
        self.controller_kubeconfig = Some(path);
    }

    /// Starts (or restarts) the controller, scoped to the namespace, fast backoffs.
    pub fn start_controller(&mut self) {
        // A running one goes first (SIGKILL, reaped): it holds the metrics port the new one binds.
        if let Some(mut old) = self.controller.take() {
            old.kill();
        }
        let (ctl, _) = binaries();
        let mut cmd = Command::new(ctl);
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(["--namespace", &self.ns.name])
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{}", self.metrics_port),
            ])
            .args(["--health-addr", ""])
            .args(["--backoff-base", "200ms", "--backoff-cap", "2s"])
            .args(&self.extra_controller_args)
            .env("RUST_LOG", "info,kube=warn,ferry_controller=debug")
            // An explicit --converter-image among the extra arguments wins over this.
            .env("FERRY_CONVERTER_IMAGE", ferry_harness::LAB_CONVERTER_IMAGE)
            // A lab without deploy/controller's admission policies (tests that install them
            // ask for them with --admission-policies required).
            .env("FERRY_ADMISSION_POLICIES", "not-required")
            .stdout(self.log_append("controller"))
            .stderr(self.log_append("controller"));
        self.controller = Some(ChildGuard::spawn("ferry-controller", cmd).unwrap());
    }

    /// The resident memory (VmRSS) of the running controller, in bytes.
    pub fn controller_rss(&self) -> u64 {
        self.controller_status_kib("VmRSS") * 1024
    }

    /// The highest resident memory (VmHWM) the running controller has had, in bytes: what a
    /// memory limit would have met.
    pub fn controller_peak_rss(&self) -> u64 {
        self.controller_status_kib("VmHWM") * 1024
    }

    fn controller_status_kib(&self, field: &str) -> u64 {
        let pid = self
            .controller
            .as_ref()
            .and_then(ChildGuard::id)
            .expect("a controller");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/<pid>/status"))
    }

    /// The controller's log so far.
    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(self.scratch.join("controller.log")).unwrap_or_default()
    }

    /// Where the sim writes the namespace's Job logs: `<job>/attempt-<n>.log` under it.
    pub fn job_logs(&self) -> PathBuf {
        self.volumes.join("_jobs").join(&self.ns.name)
    }

    /// The last lines of each Job's latest attempt in the namespace (the sim writes them under
    /// `volumes/_jobs/<namespace>/<job>/`), for a failure message: a Job still at work says how
    /// far it got, as the scratch directory does not outlive a CI run.
    pub fn job_log_tails(&self) -> String {
        let dir = self.job_logs();
        let mut jobs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        jobs.sort();
        let mut out = String::new();
        for job in jobs {
            let latest = std::fs::read_dir(&job)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
            let Some(log) = latest else { continue };
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(6)..].join("\n    ");
            out.push_str(&format!("\n  {}:\n    {tail}", log.display()));
        }
        if out.is_empty() {
            out
        } else {
            format!("\nthe Jobs' logs, last lines:{out}")
        }
    }

    fn log_append(&self, what: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.scratch.join(format!("{what}.log")))
            .unwrap()
    }

    /// Starts the sim, scoped to the namespace, running Job commands from target/debug; on a lab
    /// with KubeVirt's own virt-controller, as its node only (`--kubevirt real`), virt-handler's
    /// writes as virt-handler's ServiceAccount.
    pub fn start_sim(&mut self) {
        let (ctl, sim) = binaries();
        let mut cmd = Command::new(sim);
        cmd.arg("--kubeconfig")
            .arg(&self.lab.info.kubeconfig)
            .args(["--namespace", &self.ns.name])
            .arg("--volume-dir")
            .arg(&self.volumes)
            .arg("--bin-dir")
            .arg(ctl.parent().unwrap())
            .args(&self.sim_args)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(self.log_append("sim"))
            .stderr(self.log_append("sim"));
        cmd.args(self.lab.info.sim_kubevirt_args());
        self.sim = Some(ChildGuard::spawn("ferry-sim", cmd).unwrap());
    }

    /// Creates a migration.
    pub async fn create(&self, vmm: &VirtualMachineMigration) -> VirtualMachineMigration {
        self.api()
            .create(&PostParams::default(), vmm)
            .await
            .unwrap()
    }

    pub async fn get(&self, name: &str) -> VirtualMachineMigration {
        self.api().get(name).await.unwrap()
    }

    pub async fn patch_spec(&self, name: &str, spec: serde_json::Value) {
        self.api()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({"spec": spec})),
            )
            .await
            .unwrap();
    }

    pub async fn annotate(&self, name: &str, key: &str, value: Option<&str>) {
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        self.api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Waits until `pred` holds for the migration; the failure message shows its last status.
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        secs: u64,
        pred: impl Fn(&VirtualMachineMigration) -> bool,
    ) -> VirtualMachineMigration {
        let api = self.api();
        let last = std::sync::Mutex::new(None);
        let r = eventually(what, Duration::from_secs(secs), || async {
            let v = api.get(name).await.ok()?;
            let ok = pred(&v);
            *last.lock().unwrap() = Some(v.clone());
            ok.then_some(v)
        })
        .await;
        match r {
            Ok(v) => v,
            Err(e) => {
                let s = last
                    .lock()
                    .unwrap()
                    .as_ref()
                    .map(serde_yaml_status)
                    .unwrap_or_default();
                panic!(
                    "{e}\nlast status:\n{s}{}\nlogs in {}",
                    self.job_log_tails(),
                    self.scratch.display()
                )
            }
        }
    }

    /// Waits until the migration is gone (its finalizer released).
    pub async fn wait_gone(&self, name: &str, secs: u64) {
        let api = self.api();
        eventually(
            &format!("{name} to be gone"),
            Duration::from_secs(secs),
            || async { matches!(api.get_opt(name).await, Ok(None)).then_some(()) },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; logs in {}", self.scratch.display()));
    }

    /// Waits until `name` has ended (Succeeded or Failed) and returns it.
    pub async fn wait_terminal(&self, name: &str, secs: u64) -> VirtualMachineMigration {
        self.wait_for(name, &format!("{name} to finish"), secs, |v| {
            v.phase().is_terminal()
        })
        .await
    }

    pub async fn wait_phase(&self, name: &str, phase: Phase, secs: u64) -> VirtualMachineMigration {
        self.wait_for(name, &format!("{name} to reach {phase}"), secs, |v| {
            v.phase() == phase
        })
        .await
    }

    /// Reasons of the Events about `name`, oldest first.
    pub async fn event_reasons(&self, name: &str) -> Vec<String> {
        let events: Api<Event> = self.ns.api();
        let mut list: Vec<Event> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        list.into_iter().filter_map(|e| e.reason).collect()
    }

    /// Waits for an Event with `reason` about `name` (Events follow the status write they
    /// describe, so a test that saw the status may look a moment too early).
    pub async fn wait_event(&self, name: &str, reason: &str) -> Vec<String> {
        let r = eventually(
            &format!("an Event {reason} about {name}"),
            Duration::from_secs(30),
            || async {
                let reasons = self.event_reasons(name).await;
                reasons.iter().any(|r| r == reason).then_some(reasons)
            },
        )
        .await;
        match r {
            Ok(v) => v,
            Err(e) => panic!("{e}; events: {:?}", self.event_reasons(name).await),
        }
    }

    /// Files left under the migration's staging prefix in the S3 server's data directory.
    pub fn staged_files(&self) -> Vec<PathBuf> {
        self.staged_files_under("e2e")
    }

    /// Files left under staging prefix `prefix` (for this test's namespace).
    pub fn staged_files_under(&self, prefix: &str) -> Vec<PathBuf> {
        let dir = self
            .lab
            .info
            .s3
            .data_dir
            .join(&self.lab.info.s3.bucket)
            .join(prefix)
            .join(&self.ns.name);
        let mut out = vec![];
        walk(&dir, &mut out);
        out
    }

    /// The sim's volume file of a DataVolume.
    pub fn volume(&self, dv: &str) -> PathBuf {
        self.volumes.join(&self.ns.name).join(format!("{dv}.img"))
    }

    /// The controller's API writes so far, from its metrics.
    pub fn api_writes(&self) -> BTreeMap<String, u64> {
        let body = http_get(self.metrics_port, "/metrics");
        let mut out = BTreeMap::new();
        for line in body
            .lines()
            .filter(|l| l.starts_with("ferry_controller_api_writes_total{"))
        {
            let (labels, value) = line.rsplit_once(' ').unwrap();
            out.insert(
                labels
                    .trim_start_matches("ferry_controller_api_writes_total")
                    .to_owned(),
                value.parse::<f64>().unwrap_or(0.0) as u64,
            );
        }
        out
    }

    /// One series of the running controller's metrics as exposed (`name{labels}`, or `name`
    /// without labels), 0 while absent.
    pub fn metric(&self, series: &str) -> u64 {
        let body = http_get(self.metrics_port, "/metrics");
        body.lines()
            .filter_map(|l| l.rsplit_once(' '))
            .find(|(s, _)| *s == series)
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    }

    /// The running controller's metrics of the watch caches, as exposed.
    pub fn metrics_text(&self) -> String {
        let body = http_get(self.metrics_port, "/metrics");
        body.lines()
            .filter(|l| l.starts_with("ferry_controller_cached"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Migration reconciles the running controller did, from its metrics.
    pub fn reconciles(&self) -> u64 {
        let body = http_get(self.metrics_port, "/metrics");
        body.lines()
            .find(|l| l.starts_with("ferry_controller_reconciles_total{controller=\"migration\"}"))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    }

    /// The source VM's power state in vcsim, as the lab's govc-free way: through the controller's
    /// own vSphere client.
    pub async fn power_state(&self) -> String {
        self.power_state_of(&self.vm).await
    }

    /// The power state of any VM of the lab's vcsim, as [`Env::power_state`].
    pub async fn power_state_of(&self, vm: &InventoryVm) -> String {
        let info = &self.lab.info;
        let ep = ferry_vsphere::Endpoint {
            url: info.vcenter.url.clone(),
            username: info.vcenter.username.clone(),
            password: info.vcenter.password.clone().into(),
            tls: ferry_vsphere::TlsPolicy::Insecure,
        };
        ferry_vsphere::tls::install_default_provider();
        let s = ferry_vsphere::Session::connect(&ep).await.unwrap();
        let p = s.power_state(&vm.moref).await.unwrap();
        let _ = s.logout().await;
        p.as_str().to_owned()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // Stop the processes first, then drop the disk images (hundreds of MiB per test); a
        // failed test keeps its directory and logs for the post-mortem, and so does every test
        // with FERRY_KEEP_SCRATCH set (reading a passing run's controller log).
        if let Some(mut c) = self.controller.take() {
            c.kill();
        }
        if let Some(mut s) = self.sim.take() {
            s.kill();
        }
        if std::env::var_os("FERRY_KEEP_SCRATCH").is_some() {
            return;
        }
        if std::thread::panicking() {
            // A failed test keeps what explains it (logs, manifests, kubeconfigs) but not its
            // disks and volumes: on CI's one disk, failures that each kept a few GiB of images
            // filled it, and every later suite failed for want of space, not for its own fault.
            remove_large_files(&self.scratch, LARGE_FILE);
        } else {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

/// Files at least this big in a failed test's scratch directory are disk images, not logs.
const LARGE_FILE: u64 = 32 << 20;

/// Removes the regular files of at least `min` bytes under `dir`.
fn remove_large_files(dir: &Path, min: u64) {
    let mut files = vec![];
    walk(dir, &mut files);
    for f in files {
        if std::fs::symlink_metadata(&f).is_ok_and(|m| m.is_file() && m.len() >= min) {
            let _ = std::fs::remove_file(&f);
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// The name of the migration the wave `wave` makes for the VM named `vm`.
pub fn wave_child(wave: &str, vm: &str) -> String {
    ferry_crds::child_migration_name(wave, &ferry_crds::WaveVm::by_name(vm.to_owned()))
}

/// Waits up to 300 s for the wave `name` to satisfy `pred` (`what` names it on failure).
pub async fn wait_wave(
    env: &Env,
    name: &str,
    what: &str,
    pred: impl Fn(&ferry_crds::MigrationWave) -> bool,
) -> ferry_crds::MigrationWave {
    let waves: Api<ferry_crds::MigrationWave> = env.ns.api();
    eventually(what, Duration::from_secs(300), || async {
        let w = waves.get(name).await.ok()?;
        pred(&w).then_some(w)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()))
}

/// `vmm` with the ferry-sim fault `fault` (e.g. `convert=once`) injected through its annotation.
pub fn with_fault(mut vmm: VirtualMachineMigration, fault: &str) -> VirtualMachineMigration {
    vmm.metadata.annotations = Some(BTreeMap::from([(FAULT.to_owned(), fault.to_owned())]));
    vmm
}

pub fn serde_yaml_status(v: &VirtualMachineMigration) -> String {
    serde_json::to_string_pretty(&v.status).unwrap_or_default()
}

/// Whether all eight conditions are `True`.
/// Every condition True; a cold migration has no CutOver condition.
pub fn all_conditions_true(v: &VirtualMachineMigration) -> bool {
    ConditionType::ALL.iter().all(|t| match v.condition(*t) {
        Some(c) => c.status == ConditionStatus::True,
        // A cold migration has no CutOver, one that does not convert its guest no GuestConverted.
        None => match t {
            ConditionType::CutOver => v.spec.mode == ferry_crds::MigrationMode::Cold,
            ConditionType::GuestConverted => !v.spec.conversion.guest.converts(),
            _ => false,
        },
    })
}

/// `qemu-img convert -O raw` of `vmdk` into `out`.
pub fn qemu_raw(vmdk: &Path, out: &Path) {
    let st = Command::new("qemu-img")
        .args(["convert", "-O", "raw"])
        .arg(vmdk)
        .arg(out)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Whether two files have the same bytes.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(fa), Ok(fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    if fa.metadata().map(|m| m.len()).ok() != fb.metadata().map(|m| m.len()).ok() {
        return false;
    }
    let (mut ra, mut rb) = (std::io::BufReader::new(fa), std::io::BufReader::new(fb));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = ra.read(&mut ba).unwrap();
        let mut got = 0;
        while got < n {
            let m = rb.read(&mut bb[got..n]).unwrap();
            if m == 0 {
                return false;
            }
            got += m;
        }
        if n == 0 {
            return rb.read(&mut bb).unwrap() == 0;
        }
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// Elapsed since `t`, for reports.
pub fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// The name of a child resource as the controller names it.
pub fn dv_name(vmm: &str, i: usize) -> String {
    format!("{vmm}-disk-{i}")
}

pub fn name_of(v: &VirtualMachineMigration) -> String {
    v.name_any()
}

/// Every (kind/name → uids) seen of the children in a namespace, from a watch started before
/// the migration: a name with two uids was created twice.
pub struct Creations {
    seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, std::collections::BTreeSet<String>>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Creations {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn track<K>(
    api: Api<K>,
    kind: &'static str,
    seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, std::collections::BTreeSet<String>>>>,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    tokio::spawn(async move {
        let mut s = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Some(ev) = s.next().await {
            if let Ok(o) = ev {
                let key = format!("{kind}/{}", o.name_any());
                if let Some(uid) = o.uid() {
                    seen.lock().unwrap().entry(key).or_default().insert(uid);
                }
            }
        }
    })
}

impl Creations {
    /// Starts watching Jobs, DataVolumes, VirtualMachines and Secrets of `env`'s namespace.
    pub async fn watch(env: &Env) -> Creations {
        use ferry_controller::apis::{cdi::DataVolume, kubevirt::VirtualMachine};
        let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let tasks = vec![
            track::<k8s_openapi::api::batch::v1::Job>(env.ns.api(), "Job", seen.clone()),
            track::<DataVolume>(env.ns.api(), "DataVolume", seen.clone()),
            track::<VirtualMachine>(env.ns.api(), "VirtualMachine", seen.clone()),
            track::<Secret>(env.ns.api(), "Secret", seen.clone()),
        ];
        // Let the initial lists land before anything is created.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Creations { seen, tasks }
    }

    /// Names seen with more than one uid.
    pub fn duplicates(&self) -> Vec<(String, usize)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, u)| u.len() > 1)
            .map(|(k, u)| (k.clone(), u.len()))
            .collect()
    }

    /// Every name seen.
    pub fn names(&self) -> Vec<String> {
        self.seen.lock().unwrap().keys().cloned().collect()
    }
}

impl Env {
    /// Reshapes a VM of the lab's vcsim through the vSphere API (ReconfigVM_Task, by
    /// `ferry-lab shape`): `args` as `--firmware efi --secure-boot --nic-type vmxnet3 ...`.
    pub fn shape(&self, vm: &str, args: &[&str]) {
        let out = Command::new(ferry_harness::repo_root().join("target/lab/bin/ferry-lab"))
            .arg("shape")
            .arg("--state-dir")
            .arg(&self.lab.info.state_dir)
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

    /// One more claimed VM of the lab, with a real `mib`-MiB disk.
    pub fn another_vm(&self, mib: u64) -> (InventoryVm, RealDisk) {
        let vm = self.lab.claim_vm().unwrap();
        let disk = put_vmdk(&vm, &self.scratch, mib, 0x5eed ^ mib ^ 0x77).unwrap();
        (vm, disk)
    }

    /// The migration of `vm` (not necessarily this test's first VM).
    pub fn migration_of(&self, name: &str, vm: &InventoryVm) -> VirtualMachineMigration {
        let mut vmm = self.migration(name);
        vmm.spec.source.vm = VmSelector::by_name(vm.name.clone());
        vmm
    }

    /// The condition `t` of migration `name` as (status, reason, message).
    pub async fn condition_of(&self, name: &str, t: ConditionType) -> (String, String, String) {
        let v = self.get(name).await;
        let c = v.condition(t).expect("condition present");
        (
            c.status.to_string(),
            c.reason.to_string(),
            c.message.clone(),
        )
    }
}
/// A TCP forwarder on loopback that counts the connections it accepts: an endpoint of the
/// test's own that passes everything on to a real one (TLS and all, so the real endpoint's
/// certificate is what a client sees). Stops when dropped: the port closes and every connection
/// through it is cut (a client's pooled keep-alive connection too), as when the endpoint goes down.
pub struct Forwarder {
    pub port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Forwarder {
    /// Forwards 127.0.0.1:<new port> to `target` (`host:port`).
    pub async fn start(target: &str) -> Forwarder {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (count, target) = (accepted.clone(), target.to_owned());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let target = target.clone();
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&target).await {
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut out) => {}
                            _ = stopped.wait_for(|s| *s) => {}
                        }
                    }
                });
            }
        });
        Forwarder {
            port,
            accepted,
            task,
            stop,
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Forgets the connections counted so far.
    pub fn reset(&self) {
        self.accepted.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.stop.send(true);
    }
}

/// `host:port` of an http(s) URL.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Replaces the Secret `name` of the test's namespace.
pub async fn replace_secret(env: &Env, secret: Secret) {
    let api: Api<Secret> = env.ns.api();
    let name = secret.metadata.name.clone().unwrap();
    let _ = api.delete(&name, &Default::default()).await;
    eventually(
        &format!("Secret {name} gone"),
        Duration::from_secs(30),
        || async { matches!(api.get_opt(&name).await, Ok(None)).then_some(()) },
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &secret).await.unwrap();
}

/// The last failure's reason and message of a migration.
pub fn last_failure(v: &VirtualMachineMigration) -> (String, String) {
    let f = v
        .status
        .as_ref()
        .and_then(|s| s.last_failure.clone())
        .unwrap_or_else(|| panic!("no lastFailure: {}", serde_yaml_status(v)));
    (f.reason.to_string(), f.message)
}

/// The user name of the controller's ServiceAccount, as deploy/controller binds it.
pub const CONTROLLER_SA: &str = "system:serviceaccount:ferry-system:ferry-controller";
/// Its groups, as the API server gives a ServiceAccount token.
pub const CONTROLLER_SA_GROUPS: [&str; 3] = [
    "system:serviceaccounts",
    "system:serviceaccounts:ferry-system",
    "system:authenticated",
];

/// What [`install_deploy`] applied. Its bindings (narrowed to the test's namespace) are deleted
/// when it is dropped.
pub struct Deployed {
    /// The converter image the admission policy allows (its param ConfigMap, as kustomize
    /// renders it): a controller under the ServiceAccount must run this one.
    pub converter_image: String,
    /// `kubectl apply`'s output.
    pub applied: String,
    /// The policy bindings made, narrowed to the test's namespace.
    pub bindings: Vec<String>,
    lab: &'static Lab,
}

impl Deployed {
    /// The controller's arguments as deployed: the converter image the blast-radius policy
    /// allows its Jobs, and its admission policies required (it looks at them and finds them
    /// in force, bound to the test's namespace).
    pub fn controller_args(&self) -> Vec<String> {
        vec![
            "--converter-image".to_owned(),
            self.converter_image.clone(),
            "--admission-policies".to_owned(),
            "required".to_owned(),
        ]
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        for b in &self.bindings {
            let _ = self.lab.kubectl_ok(&[
                "delete",
                "validatingadmissionpolicybinding",
                b,
                "--ignore-not-found",
                "--wait=false",
            ]);
        }
    }
}

/// Applies `deploy/controller` as kustomize renders it — every object as shipped, the
/// admission policies included — except that each ValidatingAdmissionPolicyBinding is applied
/// under a name of this test's own and narrowed to its namespace: the lab is shared with other
/// suites (and other branches' suites) whose controllers and users must not meet a policy they
/// do not know. The shipped binding's only difference is that its selector matches every
/// namespace. Returns once the API server enforces them (a privileged Job of the controller's
/// ServiceAccount is refused).
pub async fn install_deploy(env: &Env) -> Deployed {
    let base = workspace().join("deploy/controller");
    let rendered = env
        .lab
        .kubectl_ok(&["kustomize", base.to_str().unwrap()])
        .expect("kustomize deploy/controller");
    let mut docs = vec![];
    let mut converter_image = None;
    let mut deployment_env = serde_json::Value::Null;
    let mut bindings = vec![];
    for doc in serde_yaml::Deserializer::from_str(&rendered) {
        let mut v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if kind == "ValidatingAdmissionPolicyBinding" {
            assert_eq!(
                v["spec"]["matchResources"]["namespaceSelector"],
                serde_json::json!({}),
                "{name}: the shipped binding covers every namespace"
            );
            let narrowed = format!("{name}-{}", env.ns.name);
            v["metadata"]["name"] = narrowed.clone().into();
            v["spec"]["matchResources"]["namespaceSelector"] = serde_json::json!({
                "matchLabels": {"kubernetes.io/metadata.name": env.ns.name}
            });
            bindings.push(narrowed);
        }
        if kind == "ConfigMap" && name == "ferry-controller-policy" {
            converter_image = v["data"]["converterImage"].as_str().map(str::to_owned);
        }
        if kind == "Deployment" {
            deployment_env = v["spec"]["template"]["spec"]["containers"][0]["env"].clone();
        }
        docs.push(v);
    }
    // The controller and the admission policy allow the same converter images: the one that
    // follows kustomize's `images:` in both, and the others from the policy's ConfigMap.
    let env_var = |n: &str| {
        deployment_env
            .as_array()
            .and_then(|e| e.iter().find(|v| v["name"] == n))
            .cloned()
            .unwrap_or_else(|| panic!("the Deployment sets {n}"))
    };
    assert_eq!(
        env_var("FERRY_CONVERTER_IMAGE")["value"].as_str(),
        converter_image.as_deref(),
        "FERRY_CONVERTER_IMAGE and the policy's converterImage"
    );
    assert_eq!(
        env_var("FERRY_ALLOWED_CONVERTER_IMAGES")["valueFrom"]["configMapKeyRef"],
        serde_json::json!({"name": "ferry-controller-policy", "key": "allowedConverterImages"}),
        "the allowed converter images are read from the policy's ConfigMap"
    );
    let file = env.scratch.join("deploy.json");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
    std::fs::write(&file, serde_json::to_vec(&list).unwrap()).unwrap();
    let applied = env
        .lab
        .kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            file.to_str().unwrap(),
        ])
        .expect("applying deploy/controller");
    let deployed = Deployed {
        converter_image: converter_image.expect("the policy's param ConfigMap"),
        applied,
        bindings,
        lab: env.lab,
    };
    let probe = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "policy-probe", "namespace": env.ns.name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "p", "image": "probe", "securityContext": {"privileged": true}}
        ]}}},
    });
    let file = env.scratch.join("policy-probe.json");
    std::fs::write(&file, serde_json::to_vec(&probe).unwrap()).unwrap();
    let dv_probe = serde_json::json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "policy-probe", "namespace": env.ns.name},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Mi"}}}},
    });
    let dv_file = env.scratch.join("policy-probe-dv.json");
    std::fs::write(&dv_file, serde_json::to_vec(&dv_probe).unwrap()).unwrap();
    // Something of the namespace's own, for the deletes' policy to refuse.
    if let Err(e) = env
        .lab
        .kubectl_ok(&["-n", &env.ns.name, "create", "configmap", "policy-probe"])
    {
        assert!(e.to_string().contains("already exists"), "{e}");
    }
    let as_controller = |args: &[&str]| {
        let mut cmd = env.lab.kubectl();
        cmd.args(["-n", &env.ns.name])
            .args(args)
            .args(["--as", CONTROLLER_SA]);
        for g in CONTROLLER_SA_GROUPS {
            cmd.args(["--as-group", g]);
        }
        let out = cmd.output().unwrap();
        (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // The bindings take effect when the API server's policy informer has them.
    eventually(
        "the admission policies enforced",
        Duration::from_secs(60),
        || async {
            let refused = |args: &[&str], policy: &str| {
                as_controller(args).is_some_and(|e| e.contains(policy))
            };
            (refused(
                &["create", "--dry-run=server", "-f", file.to_str().unwrap()],
                "ferry-controller-blast-radius",
            ) && refused(
                &[
                    "create",
                    "--dry-run=server",
                    "-f",
                    dv_file.to_str().unwrap(),
                ],
                "ferry-controller-kubevirt",
            ) && refused(
                &["delete", "--dry-run=server", "configmap", "policy-probe"],
                "ferry-controller-deletes",
            ))
            .then_some(())
        },
    )
    .await
    .expect("the controller's admission policies refusing what ferry never does");
    // The namespace allows ferry to read its Secrets, as its admin would (docs/operations-and-security.md, "What the
    // controller's account can do").
    if let Err(e) = env.lab.kubectl_ok(&[
        "-n",
        &env.ns.name,
        "create",
        "rolebinding",
        "ferry-credentials-reader",
        "--clusterrole=ferry-credentials-reader",
        "--serviceaccount=ferry-system:ferry-controller",
    ]) {
        // Applied again (a test that put back what it removed): it is there already.
        assert!(e.to_string().contains("already exists"), "{e}");
    }
    deployed
}

/// One request of a ServiceAccount, as the lab's audit log records it.
#[derive(Clone, Debug)]
pub struct Request {
    pub when: std::time::SystemTime,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub code: i64,
    pub uri: String,
}

/// Every request `user` (a ServiceAccount: the lab's audit policy logs their reads too) made so
/// far; a watch as its response starts. `resource` is `resource/subresource` for a subresource.
pub fn audit(lab: &ferry_harness::Lab, user: &str) -> Vec<Request> {
    let text = std::fs::read_to_string(&lab.info.apiserver.audit_log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        // A watch is logged when its response starts (it completes only when it ends).
        .filter(|e| {
            e["user"]["username"] == user
                && (e["stage"] == "ResponseComplete" || e["stage"] == "ResponseStarted")
        })
        .filter_map(|e| {
            let o = &e["objectRef"];
            let s = |v: &serde_json::Value| v.as_str().map(str::to_owned);
            let resource = match (s(&o["resource"]), s(&o["subresource"])) {
                (Some(r), Some(sub)) => format!("{r}/{sub}"),
                (Some(r), None) => r,
                _ => return None,
            };
            let ts: k8s_openapi::jiff::Timestamp =
                e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
            Some(Request {
                when: std::time::SystemTime::from(ts),
                verb: s(&e["verb"])?,
                group: s(&o["apiGroup"]).unwrap_or_default(),
                resource,
                namespace: s(&o["namespace"]),
                name: s(&o["name"]),
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
                uri: s(&e["requestURI"]).unwrap_or_default(),
            })
        })
        .collect()
}

impl Env {
    /// Makes the controller talk to the API server with a real token of deploy/controller's
    /// ServiceAccount (its RBAC, and its requests in the audit log under its own name).
    pub fn use_controller_token(&mut self) {
        let token = self
            .lab
            .kubectl_ok(&[
                "create",
                "token",
                "ferry-controller",
                "-n",
                "ferry-system",
                "--duration=2h",
            ])
            .unwrap();
        let mut kc = kube::config::Kubeconfig::read_from(&self.lab.info.kubeconfig).unwrap();
        for a in &mut kc.auth_infos {
            if let Some(info) = a.auth_info.as_mut() {
                *info = kube::config::AuthInfo {
                    token: Some(token.trim().to_owned().into()),
                    ..Default::default()
                };
            }
        }
        let path = self.scratch.join("sa.kubeconfig");
        std::fs::write(&path, serde_json::to_vec(&kc).unwrap()).unwrap();
        self.controller_kubeconfig = Some(path);
    }
}

/// A logged-in vSphere session on the lab's vCenter.
pub async fn lab_session(lab: &Lab) -> ferry_vsphere::Session {
    let vc = &lab.info.vcenter;
    ferry_vsphere::tls::install_default_provider();
    ferry_vsphere::Session::connect(&ferry_vsphere::Endpoint {
        url: vc.url.clone(),
        username: vc.username.clone(),
        password: vc.password.clone().into(),
        tls: ferry_vsphere::TlsPolicy::Insecure,
    })
    .await
    .unwrap()
}

/// `ferry-lab guest-write`: the running guest of `vm` rewrites `percent` of its disk's 1 MiB
/// blocks (seeded); the blocks written.
pub fn guest_write(lab: &Lab, vm: &InventoryVm, percent: f64, seed: u64) -> Vec<u64> {
    let out = Command::new(ferry_harness::repo_root().join("target/lab/bin/ferry-lab"))
        .arg("guest-write")
        .arg("--state-dir")
        .arg(&lab.info.state_dir)
        .args(["--vm", &vm.name, "--percent", &percent.to_string()])
        .args(["--seed", &seed.to_string()])
        .output()
        .expect("ferry-lab guest-write");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "guest-write: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("written="))
        .expect("guest-write names the blocks it wrote")
        .split(',')
        .filter(|b| !b.is_empty())
        .map(|b| b.parse().unwrap())
        .collect()
}

impl Env {
    /// This test's VM given a 16 MiB ESXi-style flat disk (every 4th MiB zero) and powered on,
    /// for a warm migration; the flat extent's local path.
    pub async fn flat_and_running(&self) -> PathBuf {
        ferry_harness::put_disk(
            &self.vm,
            &self.scratch,
            16,
            0x3a7,
            ferry_harness::DiskKind::Flat,
            4,
        )
        .unwrap();
        let s = lab_session(self.lab).await;
        s.power_on(&self.vm.moref).await.unwrap();
        let _ = s.logout().await;
        self.vm.disks[0]
            .local_path
            .with_file_name("disk1-flat.vmdk")
    }

    /// A warm migration of this test's VM (`cutover` asked for at creation, or not).
    pub fn warm_migration(&self, name: &str, cutover: bool) -> VirtualMachineMigration {
        let mut vmm = self.migration(name);
        vmm.spec.mode = ferry_crds::MigrationMode::Warm;
        vmm.spec.warm = Some(ferry_crds::WarmSpec {
            cutover,
            ..Default::default()
        });
        vmm
    }
}
