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
#[command(name = "ferry-controller", version, long_version = long_version())]
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
    /// How often a migration held by preflight, or preflighted while paused, is checked again
    /// (a spec change checks at once): each check is a vCenter round trip and a few reads.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    preflight_recheck: Duration,
    /// How long Validating waits for the guest agent.
    #[arg(long, value_parser = parse_duration, default_value = "15m")]
    agent_timeout: Duration,
    /// Fewest time between two status writes of a migration that only move details or progress.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    status_interval: Duration,
    /// Cap on each converter's datastore read rate in bytes per second (0: none).
    #[arg(long, default_value_t = 0)]
    converter_read_limit: u64,
    /// How long a KubeVirt error state (ErrorUnschedulable, CrashLoopBackOff, ...) may last
    /// before the migration fails with it.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    kubevirt_error_grace: Duration,
    /// How long past the target instance's terminationGracePeriodSeconds ferry waits for a
    /// stopped target to be gone before it gives up powering the source back on.
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    target_stop_margin: Duration,
    /// Do not run the MigrationWave controller.
    #[arg(long)]
    no_waves: bool,
    /// Begin the child watches with paged lists instead of streaming lists (for an API server
    /// without the WatchList feature, before Kubernetes 1.32).
    #[arg(long)]
    paged_lists: bool,
    /// Most VMs a wave's spec.selector may choose (at most 5000, what status.selectedVms holds);
    /// a selector choosing more fails the wave with SelectorTooBroad.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u16).range(1..=5000))]
    wave_selector_limit: u16,
    #[command(flatten)]
    leader: LeaderFlags,
    /// Image of the conversion Jobs: the controller's own, on a named registry and pinned by
    /// digest (the Deployment passes it). Required to run the controller: it has no default,
    /// since the converter receives the vCenter password and the S3 keys.
    #[arg(long, env = "FERRY_CONVERTER_IMAGE")]
    converter_image: Option<String>,
    /// Other converter images a migration may name in spec.conversion.image (exact
    /// references pinned by digest, comma-separated); none by default.
    #[arg(long, env = "FERRY_ALLOWED_CONVERTER_IMAGES", value_delimiter = ',')]
    allowed_converter_images: Vec<String>,
    /// Let migrations attach VMs to NetworkAttachmentDefinitions of other namespaces
    /// (`namespace/name` in target.networks); refused by preflight otherwise.
    #[arg(long, env = "FERRY_CROSS_NAMESPACE_NETWORKS")]
    cross_namespace_networks: bool,
    /// The Secret holding the key of ferry's creation stamps, `NAME` or `NAMESPACE/NAME` (made
    /// when absent). `NAME` is in the controller's own namespace: its Lease's
    /// (--leader-elect-namespace, $POD_NAMESPACE), else ferry-system — never the kubeconfig's:
    /// whoever may create a Secret where the key is read could choose it.
    #[arg(long, default_value = ferry_controller::children::proof::DEFAULT_SECRET_NAME)]
    proof_key_secret: String,
    /// Whether ferry's admission policies (deploy/controller) must be in force: while they are
    /// not, no migration is made, started or retried, and /readyz says why. not-required is for
    /// labs without them.
    #[arg(long, value_enum, env = "FERRY_ADMISSION_POLICIES", default_value_t = ferry_controller::admission_guard::Requirement::Required)]
    admission_policies: ferry_controller::admission_guard::Requirement,
    #[command(subcommand)]
    command: Option<Command>,
}

/// High availability: leader election on a Lease, graceful stop.
#[derive(Debug, clap::Args)]
struct LeaderFlags {
    /// Act only while holding the leader Lease (run several replicas; one leads).
    #[arg(long)]
    leader_elect: bool,
    /// Name of the leader Lease.
    #[arg(long, default_value = "ferry-controller")]
    leader_elect_lease_name: String,
    /// Namespace of the leader Lease (default: the pod's namespace, $POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE")]
    leader_elect_namespace: Option<String>,
    /// This replica's identity in the Lease (default: $POD_NAME, else host name and pid).
    #[arg(long, env = "POD_NAME")]
    leader_elect_identity: Option<String>,
    /// How long a Lease that is no longer renewed keeps the standbys waiting.
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    leader_elect_lease_duration: Duration,
    /// How long the leader may write after sending its last successful renewal.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    leader_elect_renew_deadline: Duration,
    /// How often the leader renews and a standby looks.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    leader_elect_retry_period: Duration,
    /// After SIGTERM, how long running reconciles may take before the Lease is released.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    shutdown_grace: Duration,
}

impl LeaderFlags {
    fn election(&self) -> anyhow::Result<ferry_controller::leader::ElectionConfig> {
        let namespace = self
            .leader_elect_namespace
            .clone()
            .context("--leader-elect needs --leader-elect-namespace (or $POD_NAMESPACE)")?;
        let identity = self.leader_elect_identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "ferry".into());
            format!("{host}-{}", std::process::id())
        });
        let cfg = ferry_controller::leader::ElectionConfig {
            lease_name: self.leader_elect_lease_name.clone(),
            namespace,
            identity,
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controllers (the default).
    Run,
    /// Convert a VM's disks and stage them in S3 (what the conversion Job runs).
    Convert(Box<ferry_convert::ConvertArgs>),
    /// Check imported volumes against the staged images' checksums (what the verification Job
    /// runs).
    Verify(ferry_convert::verify::VerifyArgs),
    /// Copy the areas of each disk changed since a change id into its imported volume and
    /// read them back (what a warm migration's delta Job runs).
    Delta(ferry_convert::delta::DeltaArgs),
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

async fn config(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    })
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

/// `--version`: the version, and how this very binary reads vSphere's answers, probed rather
/// than taken from the build (the image test reads it: no simulator compatibility ships).
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let answers = if ferry_vsphere::vim_rs_reads_strictly() {
            "read strictly (no simulator compatibility)"
        } else {
            "TOLERANT: vim_rs vcsim_compat drops what it cannot read; never use this build"
        };
        format!("{}\nvSphere answers: {answers}", env!("CARGO_PKG_VERSION"))
    })
}

/// The converter images of `cli`, each checked to be chosen for good
/// ([`ferry_controller::policy::check_pinned_image`]); the controller's own.
fn converter_images(cli: &Cli) -> anyhow::Result<String> {
    let own = cli.converter_image.clone().context(
        "--converter-image (or $FERRY_CONVERTER_IMAGE) is required: the controller's own image, pinned by digest (`make image` prints it)",
    )?;
    ferry_controller::policy::check_pinned_image(&own)
        .map_err(|e| anyhow::anyhow!("--converter-image: {e}"))?;
    for a in allowed_images(cli) {
        ferry_controller::policy::check_pinned_image(&a)
            .map_err(|e| anyhow::anyhow!("--allowed-converter-images: {e}"))?;
    }
    Ok(own.trim().to_owned())
}

fn allowed_images(cli: &Cli) -> Vec<String> {
    cli.allowed_converter_images
        .iter()
        .map(|i| i.trim().to_owned())
        .filter(|i| !i.is_empty())
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    ferry_vsphere::tls::install_default_provider();
    match cli.command {
        Some(Command::Convert(args)) => {
            let code = ferry_convert::run_to_exit_code(*args).await;
            std::process::exit(code);
        }
        Some(Command::Verify(args)) => {
            let code = ferry_convert::verify::run_to_exit_code(args).await;
            std::process::exit(code);
        }
        Some(Command::Delta(args)) => {
            let code = ferry_convert::delta::run_to_exit_code(args).await;
            std::process::exit(code);
        }
        None | Some(Command::Run) => {
            let converter_image = converter_images(&cli)?;
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
                    preflight_recheck: cli.preflight_recheck,
                    agent_timeout: cli.agent_timeout,
                    converter_read_limit: Some(cli.converter_read_limit).filter(|r| *r > 0),
                    kubevirt_error_grace: cli.kubevirt_error_grace,
                    wave_selector_limit: usize::from(cli.wave_selector_limit),
                    target_stop_margin: cli.target_stop_margin,
                    status_interval: cli.status_interval,
                    converter_image,
                    allowed_converter_images: allowed_images(&cli),
                    cross_namespace_networks: cli.cross_namespace_networks,
                    ..Policy::default()
                },
                waves: !cli.no_waves,
                streaming_lists: !cli.paged_lists,
                admission_policies: cli.admission_policies
                    == ferry_controller::admission_guard::Requirement::Required,
                shutdown_grace: cli.leader.shutdown_grace,
                proof_key: ferry_controller::ProofKeySecret::named(
                    &cli.proof_key_secret,
                    cli.leader.leader_elect_namespace.as_deref(),
                ),
            };
            let config = config(cli.kubeconfig.as_ref()).await?;
            if cli.leader.leader_elect {
                let election = cli.leader.election()?;
                let shutdown = ferry_controller::run::shutdown_signal();
                if let Err(e) =
                    ferry_controller::run_elected(config, opts, election, shutdown).await
                {
                    // Lost leadership: exit non-zero so the pod restarts as a standby.
                    tracing::error!(error = %e, "stopping");
                    std::process::exit(3);
                }
            } else {
                ferry_controller::run(kube::Client::try_from(config)?, opts).await?;
            }
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
