//! What the controller's benchmarks share: the binaries, the lab's credentials, a controller
//! process with its metrics, a wave run to its end, the process and metric readings, and the
//! table every bench prints with the target beside each figure.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_crds::wave::WaveSource;
use ferry_crds::{
    MigrationWave, MigrationWaveSpec, SecretRef, SourceEndpoint, StagingSpec, WaveTemplate, WaveVm,
};
use ferry_harness::{ChildGuard, Lab, TestNamespace, eventually, repo_root};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The controller and the sim of this build's profile (`cargo bench` is release; `cargo bench
/// --profile dev` gives a quicker, slower look).
pub fn bins() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let profile = if dir.ends_with("debug") {
        "dev"
    } else {
        "release"
    };
    // The controller is this package's binary (built for benches); the sim is another package.
    // The whole workspace, as `make bench` builds it: a `-p` build resolves other features and
    // would build every dependency (vim_rs: minutes) a second time.
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--profile", profile, "--workspace", "--bins"])
        .current_dir(repo_root());
    // Without what `cargo bench` set for this process (this package's name, manifest dir, …):
    // build scripts that watch those variables (ring's) would see them changed and rebuild, and
    // everything above them with it — twelve minutes of each bench run.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k == "OUT_DIR"
            || ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CFG_", "CARGO_BIN_"]
                .iter()
                .any(|p| k.starts_with(p))
            || [
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
            ]
            .contains(&&*k)
        {
            cargo.env_remove(&*k);
        }
    }
    let st = cargo.status().unwrap();
    assert!(st.success(), "building the binaries");
    (dir.join("ferry-controller"), dir.join("ferry-sim"))
}

/// A credentials Secret opted in for ferry by its owner's label.
pub fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [(
                    ferry_crds::names::CREDENTIALS_LABEL.to_owned(),
                    ferry_crds::names::CREDENTIALS_LABEL_VALUE.to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

pub use ferry_harness::free_port;

pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// Sum of the samples of metric `name` whose labels contain `filter`.
pub fn metric(text: &str, name: &str, filter: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with(name)
                && (l.as_bytes().get(name.len()) == Some(&b'{')
                    || l.as_bytes().get(name.len()) == Some(&b' '))
        })
        .filter(|l| l.contains(filter))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>()
        // A counter never incremented has no series: an empty sum, which is -0.0 ("-0").
        + 0.0
}

/// Each series of counter `name` (its labels) and how much it grew from `before` to `after`,
/// the largest first: where a count comes from.
pub fn series_growth(before: &str, after: &str, name: &str) -> Vec<(String, f64)> {
    let series = |text: &str| -> BTreeMap<String, f64> {
        text.lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
            .filter_map(|l| {
                let (labels, value) = l.rsplit_once("} ")?;
                Some((labels.to_owned(), value.parse::<f64>().ok()?))
            })
            .collect()
    };
    let before = series(before);
    let mut grown: Vec<(String, f64)> = series(after)
        .into_iter()
        .map(|(labels, v)| {
            let was = before.get(&labels).copied().unwrap_or(0.0);
            (labels, v - was)
        })
        .filter(|(_, d)| *d > 0.0)
        .collect();
    grown.sort_by(|a, b| b.1.total_cmp(&a.1));
    grown
}

/// The q-quantile of a Prometheus histogram (linear inside the bucket).
pub fn quantile(text: &str, name: &str, q: f64) -> f64 {
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit_once(' ')?.1.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map_or(0.0, |b| b.1);
    if total == 0.0 {
        return 0.0;
    }
    let want = q * total;
    let (mut lo, mut below) = (0.0, 0.0);
    for (le, count) in buckets {
        if count >= want {
            if le.is_infinite() {
                return lo;
            }
            let frac = if count > below {
                (want - below) / (count - below)
            } else {
                1.0
            };
            return lo + (le - lo) * frac;
        }
        (lo, below) = (le, count);
    }
    lo
}

/// The numeric fields of `/proc/PID/stat` after the command name (0 where unreadable).
pub fn stat_ticks(pid: u32) -> impl Fn(usize) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<f64> = stat
        .rsplit_once(')')
        .map(|(_, r)| {
            r.split_whitespace()
                .map(|v| v.parse().unwrap_or(0.0))
                .collect()
        })
        .unwrap_or_default();
    move |i| fields.get(i).copied().unwrap_or(0.0)
}

/// CPU seconds of a process's children it waited for (the sim's Job processes: converters,
/// verifiers).
pub fn children_cpu(pid: u32) -> f64 {
    let ticks = stat_ticks(pid);
    (ticks(13) + ticks(14)) / 100.0
}

/// CPU seconds and (peak, current) resident MiB of a process.
pub fn usage(pid: u32) -> (f64, f64, f64) {
    let ticks = stat_ticks(pid);
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (cpu, kib("VmHWM:") / 1024.0, kib("VmRSS:") / 1024.0)
}

/// CPU seconds of the lab's processes under `state` (their command lines name it): the
/// apiserver's, and the rest's (the lab process with etcd and vcsim, the controller-manager, S3).
pub fn lab_cpu(state: &Path) -> (f64, f64) {
    let state = state.to_string_lossy();
    let (mut apiserver, mut rest) = (0.0, 0.0);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if !cmdline.contains(state.as_ref()) || !cmdline.contains("target/lab/bin/") {
            continue;
        }
        let cpu = usage(pid).0;
        if cmdline.contains("internal-apiserver") {
            apiserver += cpu;
        } else {
            rest += cpu;
        }
    }
    (apiserver, rest)
}

pub struct Controller {
    pub proc: ChildGuard,
    pub metrics: u16,
    /// Where `/readyz` answers (200 once leading with every cache synced).
    pub health: u16,
}

impl Controller {
    /// Whether `/readyz` answers 200.
    pub fn ready(&self) -> bool {
        http_get(self.health, "/readyz").split_whitespace().nth(1) == Some("200")
    }
}

pub fn start_controller(bin: &Path, lab: &Lab, ns: &str, log: &Path) -> Controller {
    start_controller_in(bin, lab, Some(ns), ns, log)
}

/// A controller of namespace `ns`, or of every namespace, its Lease in `lease_ns`.
pub fn start_controller_in(
    bin: &Path,
    lab: &Lab,
    ns: Option<&str>,
    lease_ns: &str,
    log: &Path,
) -> Controller {
    let (metrics, health) = (free_port(), free_port());
    let out = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap()
    };
    // `FERRY_BENCH_CONTROLLER_WRAP`: a program the controller is started through, which must
    // exec it (its pid is the one measured), e.g. a script that preloads a heap profiler.
    let mut cmd = match std::env::var_os("FERRY_BENCH_CONTROLLER_WRAP") {
        Some(wrap) => {
            let mut c = Command::new(wrap);
            c.arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.arg("--kubeconfig")
        .arg(&lab.info.kubeconfig)
        // A lab without deploy/controller's admission policies.
        .env("FERRY_ADMISSION_POLICIES", "not-required")
        .args(ns.map(|ns| ["--namespace", ns]).into_iter().flatten())
        .args(["--concurrency", "64"])
        .args([
            "--metrics-addr",
            &format!("127.0.0.1:{metrics}"),
            "--health-addr",
            &format!("127.0.0.1:{health}"),
        ])
        .args(["--leader-elect", "--leader-elect-namespace", lease_ns])
        // Renewed as often as deploy's (every 2 s: the Lease's requests count the same), but a
        // renewal the loaded lab answers late must not stop a bench's only controller: deploy's
        // 10 s deadline did, half-way through a 1,000-VM wave on 2 busy cores.
        .args(["--leader-elect-lease-duration", "90s"])
        .args(["--leader-elect-renew-deadline", "60s"])
        .env("FERRY_CONVERTER_IMAGE", ferry_harness::LAB_CONVERTER_IMAGE)
        .env("RUST_LOG", "info,kube=warn")
        .stdout(out())
        .stderr(out());
    Controller {
        proc: ChildGuard::spawn("ferry-controller", cmd).unwrap(),
        metrics,
        health,
    }
}

pub fn template(lab: &Lab) -> WaveTemplate {
    let info = &lab.info;
    WaveTemplate {
        source: WaveSource {
            endpoint: SourceEndpoint {
                url: Some(info.vcenter.url.clone()),
                credentials_secret_ref: SecretRef::new("vsphere"),
                thumbprint: Some(info.vcenter.thumbprint_sha256.clone()),
                insecure_skip_tls_verify: false,
            },
            power: Default::default(),
        },
        target: Default::default(),
        staging: StagingSpec {
            endpoint: info.s3.endpoint.clone(),
            bucket: info.s3.bucket.clone(),
            prefix: Some("bench".into()),
            region: info.s3.region.clone(),
            credentials_secret_ref: SecretRef::new("staging"),
        },
        conversion: Default::default(),
        mode: Default::default(),
        hooks: None,
    }
}

pub async fn run_wave(
    waves: &Api<MigrationWave>,
    name: &str,
    lab: &Lab,
    vms: &[String],
    max_in_flight: i32,
) -> Duration {
    run_wave_forecast(waves, name, lab, vms, max_in_flight)
        .await
        .0
}

/// The wave's first forecast of its end (`status.forecast.endsAt`, made once a migration
/// succeeded) against its actual end: when it was made (seconds into the wave) and its error,
/// as a share of the time that was left then.
#[derive(Clone, Copy, Debug)]
pub struct ForecastCheck {
    pub made_after: f64,
    pub error: f64,
}

/// [`run_wave`], with its first forecast checked against its end.
pub async fn run_wave_forecast(
    waves: &Api<MigrationWave>,
    name: &str,
    lab: &Lab,
    vms: &[String],
    max_in_flight: i32,
) -> (Duration, Option<ForecastCheck>) {
    let spec = MigrationWaveSpec {
        template: template(lab),
        vms: vms.iter().map(|n| WaveVm::by_name(n.clone())).collect(),
        max_in_flight,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let t = Instant::now();
    let created = waves
        .create(&PostParams::default(), &MigrationWave::new(name, spec))
        .await
        .unwrap();
    let start = created
        .metadata
        .creation_timestamp
        .map_or(0, |c| c.0.as_second());
    // The first forecast seen: (when, the end it forecast), in epoch seconds.
    let first = std::sync::Mutex::new(None::<(i64, i64)>);
    let w = eventually(
        &format!("wave {name} to finish"),
        Duration::from_secs(7200),
        || async {
            let w = waves.get(name).await.ok()?;
            let s = w.status.as_ref()?;
            if let Some(end) = s.forecast.as_ref().and_then(|f| f.ends_at.as_ref()) {
                let now = k8s_openapi::jiff::Timestamp::now().as_second();
                let mut first = first.lock().unwrap();
                first.get_or_insert((now, end.0.as_second()));
            }
            s.phase.is_terminal().then_some(w)
        },
    )
    .await
    .unwrap();
    let s = w.status.unwrap();
    let check = first
        .into_inner()
        .unwrap()
        .zip(s.completed_at.as_ref())
        .map(|((made, forecast), end)| {
            let end = end.0.as_second();
            ForecastCheck {
                made_after: (made - start) as f64,
                error: (forecast - end).abs() as f64 / ((end - made).max(1)) as f64,
            }
        });
    if s.counts.succeeded as usize != vms.len() {
        // What failed, and why: the lab goes with the bench.
        let vmms: Api<ferry_crds::VirtualMachineMigration> = Api::namespaced(
            waves.clone().into_client(),
            &w.metadata.namespace.unwrap_or_default(),
        );
        for v in vmms.list(&Default::default()).await.unwrap().items {
            if let Some(f) = v.status.as_ref().and_then(|s| s.last_failure.as_ref()) {
                eprintln!(
                    "bench: {} failed: {f:?}",
                    v.metadata.name.unwrap_or_default()
                );
            }
        }
    }
    assert_eq!(s.counts.succeeded as usize, vms.len(), "wave {name}: {s:?}");
    (t.elapsed(), check)
}

pub struct Row {
    pub what: String,
    pub figure: String,
    pub target: String,
}

pub fn row(what: &str, figure: String, target: &str) -> Row {
    Row {
        what: what.into(),
        figure,
        target: target.into(),
    }
}

/// The vSphere and staging credentials Secrets the wave template names, opted in for ferry.
pub async fn lab_secrets(lab: &Lab, ns: &TestNamespace) {
    let secrets: Api<Secret> = ns.api();
    for s in [
        secret(
            "vsphere",
            &[
                ("username", &lab.info.vcenter.username),
                ("password", &lab.info.vcenter.password),
                ("url", &lab.info.vcenter.url),
                ("thumbprint", &lab.info.vcenter.thumbprint_sha256),
            ],
        ),
        secret(
            "staging",
            &[
                ("accessKeyId", &lab.info.s3.access_key),
                ("secretAccessKey", &lab.info.s3.secret_key),
                ("endpoint", &lab.info.s3.endpoint),
                ("bucket", &lab.info.s3.bucket),
            ],
        ),
    ] {
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
}

/// Prints `rows` under `title` with the target beside each figure, and writes them to
/// `target/bench/{stem}.{txt,json}`.
pub fn write_table(title: &str, stem: &str, rows: &[Row]) {
    let width = rows
        .iter()
        .map(|r| r.what.chars().count())
        .max()
        .unwrap_or(0);
    let fig = rows
        .iter()
        .map(|r| r.figure.chars().count())
        .max()
        .unwrap_or(0);
    let mut text = format!("{:<width$}  {:<fig$}  target\n", title, "figure");
    for r in rows {
        text += &format!("{:<width$}  {:<fig$}  {}\n", r.what, r.figure, r.target);
    }
    print!("{text}");
    let out = repo_root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join(format!("{stem}.txt")), &text).unwrap();
    let json: Vec<BTreeMap<&str, &str>> = rows
        .iter()
        .map(|r| {
            BTreeMap::from([
                ("what", r.what.as_str()),
                ("figure", r.figure.as_str()),
                ("target", r.target.as_str()),
            ])
        })
        .collect();
    std::fs::write(
        out.join(format!("{stem}.json")),
        serde_json::to_vec_pretty(&json).unwrap(),
    )
    .unwrap();
}
