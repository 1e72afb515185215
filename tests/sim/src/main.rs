//! `ferry-sim`: CDI, KubeVirt and the kubelet for the ferry lab.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use ferry_sim::clock::Speed;
use ferry_sim::faults::Rates;
use ferry_sim::volumes::Volumes;
use ferry_sim::{Settings, Sim};
use kube::config::{KubeConfigOptions, Kubeconfig};

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
    /// The node name pods and VMIs report.
    #[arg(long, default_value = "sim-node")]
    node_name: String,
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
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
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
    };
    Sim::new(client, settings).run(shutdown()).await?;
    Ok(())
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
