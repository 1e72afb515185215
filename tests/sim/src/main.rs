//! `ferry-sim`: CDI, KubeVirt and the kubelet for the ferry lab.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use ferry_sim::clock::Speed;
use ferry_sim::faults::Rates;
use ferry_sim::volumes::Volumes;
use ferry_sim::{Settings, Sim};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls::pki_types::pem::PemObject;

/// Plays CDI (DataVolume imports from S3), KubeVirt (VMIs for VMs) and the kubelet (runs Job
/// containers as host processes) against a real apiserver, through their public contracts.
///
/// Faults: annotate the owning VirtualMachineMigration (or the child) with
/// `sim.ferry.example/fault: "import=transient@40%,convert=once,vmi=always,agent=permanent"`.
#[derive(Debug, Parser)]
#[command(name = "ferry-sim", version)]
struct Cli {
    /// Kubeconfig of the cluster (default: the usual lookup).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Only act in this namespace (default: all).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Where imported volumes (`<namespace>/<claim>.img`) and Job logs live.
    #[arg(long)]
    volume_dir: PathBuf,
    /// Where Job commands are looked up before $PATH.
    #[arg(long)]
    bin_dir: PathBuf,
    /// Scales every delay and throughput (a benchmark uses a large factor).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Import throughput at speed 1, in MiB/s.
    #[arg(long, default_value_t = 256.0)]
    throughput_mib: f64,
    /// Random faults for waves: `step[:kind]=rate`, e.g. `import=0.05,convert:permanent=0.01`.
    #[arg(long = "fault-rate")]
    fault_rate: Vec<String>,
    /// Seed of the `--fault-rate` draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Label selector of the Jobs to run (default: every Job in scope, as a kubelet would).
    #[arg(long)]
    job_selector: Option<String>,
    /// The node name pods and VMIs report; the sim registers this Node with its kubelet
    /// endpoint.
    #[arg(long, default_value = "sim-node")]
    node_name: String,
    /// Port of the kubelet endpoint (`pods/log`), on 127.0.0.1; 0 takes a free one.
    #[arg(long, default_value_t = 0)]
    kubelet_port: u16,
    /// CA bundle (PEM) whose client certificates the kubelet endpoint accepts (default: the
    /// kubeconfig's cluster CA, which signs the apiserver's kubelet client certificate).
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// The kubelet endpoint's serving certificate (PEM, with its chain); default self-signed.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The key of `--tls-cert-file` (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// How often the Node is looked at (and taken over when the endpoint it names is gone).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    node_status_update_frequency: std::time::Duration,
    /// Who plays KubeVirt's control plane: `sim` (the sim: VMIs from VMs, VM status, the node)
    /// or `real` (KubeVirt's own virt-api and virt-controller run, as in `ferry-lab --kubevirt`;
    /// the sim plays only the node: virt-handler and the virt-launcher pod).
    #[arg(long, default_value = "sim", value_parser = ["sim", "real"])]
    kubevirt: String,
    /// With `--kubevirt real`: the kubeconfig of virt-handler's ServiceAccount
    /// (`kubevirt/kubevirt-handler`; the lab's is `lab.json` `kubevirt.handlerKubeconfig`), as
    /// which VMI status is written: virt-api keeps a VMI status change only from KubeVirt's own
    /// ServiceAccounts. Default: `--kubeconfig`'s user (whose VMI status writes virt-api drops).
    #[arg(long)]
    virt_handler_kubeconfig: Option<PathBuf>,
    /// What runs a VMI's guest: `simulated` (nothing: Running and the agent after delays) or
    /// `qemu` (a `qemu-system-x86_64` process from the VMI's spec and its volumes' files, TCG;
    /// Running while it runs, the agent when the guest's own agent answers; with
    /// `--kubevirt real`).
    #[arg(long, default_value = "simulated", value_parser = ["simulated", "qemu"])]
    guests: String,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    if cli.log_format == "json" {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }

    // object_store's HTTP client is rustls without a built-in provider: the workspace uses ring.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let mut rates = Rates {
        seed: cli.seed,
        ..Rates::default()
    };
    for r in &cli.fault_rate {
        rates.add(r).with_context(|| format!("--fault-rate {r}"))?;
    }
    std::fs::create_dir_all(&cli.volume_dir)
        .with_context(|| format!("creating {}", cli.volume_dir.display()))?;
    let config = match &cli.kubeconfig {
        Some(path) => kubeconfig(path).await?,
        None => kube::Config::infer().await?,
    };
    let handler = match &cli.virt_handler_kubeconfig {
        Some(path) => Some(kube::Client::try_from(kubeconfig(path).await?)?),
        None => None,
    };
    // The kubelet's --client-ca-file; in a kubeadm cluster it is the cluster CA, which the
    // kubeconfig names for the apiserver.
    let client_ca = match &cli.client_ca_file {
        Some(path) => rustls::pki_types::CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("reading {}", path.display()))?,
        None => config
            .root_cert
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(rustls::pki_types::CertificateDer::from)
            .collect(),
    };
    let client = kube::Client::try_from(config)?;
    let settings = Settings {
        namespace: cli.namespace,
        volumes: Volumes::new(std::path::absolute(&cli.volume_dir)?),
        bin_dir: std::path::absolute(&cli.bin_dir)?,
        speed: Speed::new(cli.speed),
        rates,
        throughput: cli.throughput_mib * 1024.0 * 1024.0,
        job_selector: cli.job_selector,
        node_name: cli.node_name,
        kubelet: ferry_sim::kubelet::Config {
            port: cli.kubelet_port,
            client_ca,
            serving: cli.tls_cert_file.zip(cli.tls_private_key_file),
            status_every: cli.node_status_update_frequency,
        },
        kubevirt: if cli.kubevirt == "real" {
            ferry_sim::KubeVirt::Real
        } else {
            ferry_sim::KubeVirt::Sim
        },
        guests: if cli.guests == "qemu" {
            anyhow::ensure!(
                cli.kubevirt == "real",
                "--guests qemu plays virt-launcher for KubeVirt's own virt-controller: it needs --kubevirt real"
            );
            ferry_sim::qemu::GuestMode::Qemu
        } else {
            ferry_sim::qemu::GuestMode::Simulated
        },
    };
    let handler = handler.unwrap_or_else(|| client.clone());
    Sim::with_handler(client, handler, settings)
        .run(shutdown())
        .await?;
    Ok(())
}

async fn kubeconfig(path: &std::path::Path) -> anyhow::Result<kube::Config> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

/// `10s`, `500ms`, `2m`, or plain seconds.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = n.parse().map_err(|_| format!("not a duration: {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("not a duration: {s:?} (ms, s or m)")),
    };
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn durations_read_as_the_kubelet_writes_them() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("s").is_err());
    }
}
