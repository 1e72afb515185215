//! `ferry-controller`: runs the migration and wave controllers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use ferry_controller::RunOptions;
use ferry_controller::policy::Policy;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Moves VMs from vSphere to KubeVirt: reconciles VirtualMachineMigration and MigrationWave.
#[derive(Debug, Parser)]
#[command(name = "ferry-controller", version)]
struct Cli {
    /// Kubeconfig to use (default: in-cluster config, then the usual lookup).
    #[arg(long, env = "KUBECONFIG", global = true)]
    kubeconfig: Option<PathBuf>,
    /// Only watch this namespace (default: all namespaces).
    #[arg(long, short = 'n', env = "FERRY_NAMESPACE")]
    namespace: Option<String>,
    /// Reconciles running at once per controller.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// Address of the Prometheus endpoint (`/metrics`); empty to disable.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: String,
    /// Address of `/healthz` and `/readyz`; empty to disable.
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_addr: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    /// First delay of an in-phase retry after a transient failure.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    backoff_base: Duration,
    /// Longest delay between in-phase retries.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    backoff_cap: Duration,
    /// Transient failures tolerated in one phase before the migration fails.
    #[arg(long, default_value_t = 8)]
    max_transient_retries: u32,
    /// Importer restarts tolerated per disk before the import is failed.
    #[arg(long, default_value_t = 3)]
    max_import_restarts: i32,
    /// How long Starting waits for the VMI to run.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    start_timeout: Duration,
    /// How long Validating waits for the guest agent.
    #[arg(long, value_parser = parse_duration, default_value = "15m")]
    agent_timeout: Duration,
    /// Do not run the MigrationWave controller.
    #[arg(long)]
    no_waves: bool,
    /// Image of the conversion Jobs: the controller's own (the Deployment passes it).
    #[arg(long, env = "FERRY_CONVERTER_IMAGE", default_value = ferry_controller::policy::DEFAULT_CONVERTER_IMAGE)]
    converter_image: String,
    /// Other converter images a migration may name in spec.conversion.image (exact
    /// references, comma-separated); none by default.
    #[arg(long, env = "FERRY_ALLOWED_CONVERTER_IMAGES", value_delimiter = ',')]
    allowed_converter_images: Vec<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controllers (the default).
    Run,
    /// Convert a VM's disks and stage them in S3 (what the conversion Job runs).
    Convert(Box<ferry_controller::convert::ConvertArgs>),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// `250ms`, `2s`, `5m`, `1h`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 2s, 5m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

fn addr(s: &str, flag: &str) -> anyhow::Result<Option<SocketAddr>> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .with_context(|| format!("{flag} {s:?} is not host:port"))
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    Ok(kube::Client::try_from(config)?)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn,vim_rs=warn"));
    match format {
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init(),
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    ferry_controller::tls::install_default_provider();
    match cli.command {
        Some(Command::Convert(args)) => {
            let code = ferry_controller::convert::run_to_exit_code(*args).await;
            std::process::exit(code);
        }
        None | Some(Command::Run) => {
            let opts = RunOptions {
                namespace: cli.namespace.clone(),
                concurrency: cli.concurrency,
                metrics_addr: addr(&cli.metrics_addr, "--metrics-addr")?,
                health_addr: addr(&cli.health_addr, "--health-addr")?,
                policy: Policy {
                    backoff_base: cli.backoff_base,
                    backoff_cap: cli.backoff_cap,
                    max_transient_retries: cli.max_transient_retries,
                    max_import_restarts: cli.max_import_restarts,
                    start_timeout: cli.start_timeout,
                    agent_timeout: cli.agent_timeout,
                    converter_image: cli.converter_image.clone(),
                    allowed_converter_images: cli
                        .allowed_converter_images
                        .iter()
                        .map(|i| i.trim().to_owned())
                        .filter(|i| !i.is_empty())
                        .collect(),
                    ..Policy::default()
                },
                waves: !cli.no_waves,
            };
            let client = client(cli.kubeconfig.as_ref()).await?;
            ferry_controller::run(client, opts).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3d").is_err());
    }
}
