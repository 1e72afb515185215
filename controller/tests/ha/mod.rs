//! High-availability helpers shared by `e2e_ha` and `soak`: controller replicas under leader
//! election (each its own process, identity and impersonated user), the Lease's holder, a TCP
//! proxy that cuts one replica off the apiserver, and the apiserver's own audit log of writes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferry_harness::{ChildGuard, Lab};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::common::{binaries, free_port};

/// The lease timings of the tests: short, so takeovers take seconds.
pub const LEASE: &[&str] = &[
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "500ms",
];

/// One controller replica.
pub struct Replica {
    pub name: String,
    pub metrics_port: u16,
    pub health_port: u16,
    pub proc: Option<ChildGuard>,
    kubeconfig: PathBuf,
    args: Vec<String>,
    log: PathBuf,
}

/// The user a replica's requests are made as (impersonated, in `system:masters`): how the audit
/// log tells the replicas apart. Named after the test's namespace too, since the tests of one
/// binary run at once against one apiserver and each has its replicas `a` and `b`.
pub fn user_of(ns: &str, replica: &str) -> String {
    format!("ferry-replica-{ns}-{replica}")
}

/// A kubeconfig for `replica` of the test in `ns`: the lab's, impersonating [`user_of`], pointed
/// at `server` when given (a proxy) instead of the apiserver.
pub fn kubeconfig_for(
    lab: &Lab,
    dir: &Path,
    ns: &str,
    replica: &str,
    server: Option<&str>,
) -> PathBuf {
    let mut kc = kube::config::Kubeconfig::read_from(&lab.info.kubeconfig).unwrap();
    for a in &mut kc.auth_infos {
        if let Some(info) = a.auth_info.as_mut() {
            info.impersonate = Some(user_of(ns, replica));
            info.impersonate_groups = Some(vec!["system:masters".into()]);
        }
    }
    if let Some(server) = server {
        for c in &mut kc.clusters {
            if let Some(cluster) = c.cluster.as_mut() {
                cluster.server = Some(server.to_owned());
            }
        }
    }
    let path = dir.join(format!("replica-{replica}.kubeconfig"));
    std::fs::write(&path, serde_json::to_vec(&kc).unwrap()).unwrap();
    path
}

impl Replica {
    /// A replica acting in `namespace`, electing through Lease `lease` there.
    pub fn new(
        name: &str,
        kubeconfig: PathBuf,
        namespace: &str,
        lease: &str,
        extra: &[&str],
        log_dir: &Path,
    ) -> Replica {
        let mut args: Vec<String> = [
            "--namespace",
            namespace,
            "--leader-elect",
            "--leader-elect-namespace",
            namespace,
            "--leader-elect-lease-name",
            lease,
            "--leader-elect-identity",
            name,
            "--backoff-base",
            "200ms",
            "--backoff-cap",
            "2s",
            "--shutdown-grace",
            "10s",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(LEASE.iter().map(|s| (*s).to_owned()));
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Replica {
            name: name.to_owned(),
            metrics_port: free_port(),
            health_port: free_port(),
            proc: None,
            kubeconfig,
            args,
            log: log_dir.join(format!("controller-{name}.log")),
        }
    }

    /// Starts (or restarts) the process.
    pub fn start(&mut self) {
        let (ctl, _) = binaries();
        let log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .unwrap()
        };
        let mut cmd = Command::new(ctl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(&self.args)
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{}", self.metrics_port),
            ])
            .args(["--health-addr", &format!("127.0.0.1:{}", self.health_port)])
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .env("FERRY_CONVERTER_IMAGE", ferry_harness::LAB_CONVERTER_IMAGE)
            // A lab without deploy/controller's admission policies.
            .env("FERRY_ADMISSION_POLICIES", "not-required")
            .env("RUST_LOG", "info,kube=warn,ferry_controller=debug")
            .stdout(log())
            .stderr(log());
        self.proc = Some(ChildGuard::spawn(&format!("controller-{}", self.name), cmd).unwrap());
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().and_then(ChildGuard::id)
    }

    pub fn running(&mut self) -> bool {
        self.proc.as_mut().is_some_and(ChildGuard::running)
    }

    /// Sends `sig` (e.g. "STOP", "CONT", "KILL") to the process.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("running").to_string();
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &pid])
            .status()
            .unwrap();
        assert!(st.success(), "kill -{sig} {pid}");
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Waits for the process to exit (after a signal), at most `timeout`; its exit code.
    pub async fn exit_code(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if !self.running() {
                let mut p = self.proc.take()?;
                return p.terminate().and_then(|s| s.code());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// (status code, body) of `path` on the health endpoint.
    pub fn health(&self, path: &str) -> (u16, String) {
        http_get(self.health_port, path)
    }

    /// A metric's value (first line starting with `name`), when the endpoint answers.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = http_get(self.metrics_port, "/metrics");
        body.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // A stopped process must be continued to die of SIGKILL promptly and be reaped.
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
        self.kill();
    }
}

fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// The Lease's holder ("" when released or absent).
pub async fn holder(client: &kube::Client, ns: &str, lease: &str) -> String {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    api.get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default()
}

/// One write the apiserver audited.
#[derive(Clone, Debug)]
pub struct AuditedWrite {
    pub verb: String,
    pub resource: String,
    pub name: String,
    pub received: Timestamp,
    pub code: i64,
}

/// Writes (create, update, patch, delete) made as `user` that the apiserver received at or after
/// `since`, from the lab's audit log (`logs/audit.log`, one JSON event per line).
pub fn audited_writes(lab: &Lab, user: &str, since: Timestamp) -> Vec<AuditedWrite> {
    let path = lab.info.state_dir.join("logs/audit.log");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the lab writes an audit log)", path.display()));
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["impersonatedUser"]["username"].as_str() == Some(user))
        .filter_map(|e| {
            let received: Timestamp = e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
            (received >= since).then(|| AuditedWrite {
                verb: e["verb"].as_str().unwrap_or_default().to_owned(),
                resource: e["objectRef"]["resource"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                name: e["objectRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                received,
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
            })
        })
        .filter(|w| ["create", "update", "patch", "delete"].contains(&w.verb.as_str()))
        .collect()
}

/// A TCP proxy on loopback to `target` that a test can sever (every connection closed, new
/// ones refused) and heal.
pub struct Proxy {
    pub port: u16,
    open: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let (tx, _) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(tx);
        let (o, g) = (open.clone(), generation.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = listener.accept().await else {
                    return;
                };
                if !o.load(Ordering::SeqCst) {
                    drop(down);
                    continue;
                }
                let mut cut = g.subscribe();
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy {
            port,
            open,
            generation,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Cuts every connection and refuses new ones.
    pub fn sever(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.sever();
        self.task.abort();
    }
}

/// The apiserver's address, from the lab's URL.
pub fn apiserver_addr(lab: &Lab) -> std::net::SocketAddr {
    let url = &lab.info.apiserver.url;
    let hostport = url.trim_start_matches("https://").trim_end_matches('/');
    hostport.parse().unwrap()
}
