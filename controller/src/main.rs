//! `ferry-controller`: runs the migration and wave controllers.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use ferry_controller::args::{ControllerArgs, DEFAULT_LOG_FILTER, FrontDoor};
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
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    /// The controller's run: the same flags as the cockpit's `ferry controller`.
    #[command(flatten)]
    run: ControllerArgs,
    #[command(subcommand)]
    command: Option<Command>,
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
    /// Convert the imported guest to run on KubeVirt with virt-v2v-in-place, all or nothing
    /// (what the guest Job runs).
    ConvertGuest(ferry_convert::guest::GuestArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
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
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
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
        Some(Command::ConvertGuest(args)) => {
            let code = ferry_convert::guest::run_to_exit_code(args).await;
            std::process::exit(code);
        }
        Some(Command::Delta(args)) => {
            let code = ferry_convert::delta::run_to_exit_code(args).await;
            std::process::exit(code);
        }
        None | Some(Command::Run) => {
            let opts = cli
                .run
                .run_options(cli.namespace.clone(), FrontDoor::InCluster)?;
            let election = cli.run.election(FrontDoor::InCluster)?;
            let config = config(cli.kubeconfig.as_ref()).await?;
            if let Some(election) = election {
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
