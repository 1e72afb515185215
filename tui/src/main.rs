//! `ferry`: the cockpit, and its plain commands for scripts.

use std::{path::PathBuf, process::ExitCode};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use ferry::{
    app::{self, AppOptions},
    cli,
    kube::{self as cluster, ConnectOptions},
    state::{Outcome, Scope, Verb},
    strings,
};
use tracing_subscriber::{EnvFilter, layer::SubscriberExt, util::SubscriberInitExt};

/// Watch and steer VM migrations from vSphere to KubeVirt.
#[derive(Parser, Debug)]
#[command(name = "ferry", version, about)]
struct Cli {
    /// Path of the kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// kubeconfig context(s) to use, comma-separated: the board shows the migrations of every
    /// one (default: the current context).
    #[arg(long, global = true, value_delimiter = ',')]
    context: Vec<String>,
    /// Namespace to watch (default: the context's namespace).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// Watch every namespace.
    #[arg(short = 'A', long, global = true, conflicts_with = "namespace")]
    all_namespaces: bool,
    /// Show (or act on) one MigrationWave only.
    #[arg(long, global = true)]
    wave: Option<String>,
    /// Disable every mutation.
    #[arg(long, global = true)]
    readonly: bool,
    /// User to impersonate (like kubectl --as).
    #[arg(long = "as", global = true)]
    as_user: Option<String>,
    /// Group to impersonate (like kubectl --as-group); repeatable.
    #[arg(long = "as-group", global = true)]
    as_group: Vec<String>,
    /// Open with a screen that says which keys to try, and NOTE under its title.
    #[arg(long, value_name = "NOTE", num_args = 0..=1, default_missing_value = "")]
    welcome: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ReportFormat {
    /// A markdown table, for a change ticket.
    Md,
    /// One line per VM, then one per wave.
    Csv,
    /// Everything, for scripts.
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// A record of a wave (or of every migration in scope): per VM its phases with their times,
    /// the downtime, the bytes moved, attempts, how it ended and why; totals per wave. Reads
    /// the cluster once.
    Report {
        /// The MigrationWave (default: every migration in scope; --wave works too).
        #[arg(value_name = "WAVE")]
        wave_name: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "md")]
        output: ReportFormat,
    },
    /// The board (interactive unless --once).
    Board {
        /// Print the board once and exit.
        #[arg(long)]
        once: bool,
        /// Output format with --once.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Set spec.cancel on migrations (or, with only --wave, on the wave).
    Cancel(Names),
    /// Raise spec.retry on failed or cancelled migrations (or the wave).
    Retry(Names),
    /// Set spec.paused on migrations (or the wave).
    Pause(Names),
    /// Clear spec.paused on migrations (or the wave).
    Resume(Names),
    /// Delete migrations (or the wave).
    Delete(Names),
    /// Set spec.warm.cutover on warm migrations: each source is powered off, its last changes
    /// copied and its VM started (or, with only --wave, on the warm wave: its precopied
    /// migrations cut over, at most maxInFlight at once).
    Cutover(Names),
    /// Run the bundled controller in this process (all namespaces unless -n), until Ctrl-C.
    /// It takes part in the in-cluster controller's leader election (the same Lease), so it
    /// acts only while no other controller leads, and it runs the converter image it is given.
    Controller {
        /// The controller's run: the same flags and defaults as `ferry-controller`, but that
        /// the cockpit opens no port unless asked and is always a candidate for the leader
        /// Lease (ferry-system's unless told otherwise).
        #[command(flatten)]
        run: Box<ferry_controller::args::ControllerArgs>,
    },
}

#[derive(clap::Args, Debug)]
struct Names {
    /// Names of VirtualMachineMigrations.
    names: Vec<String>,
}

impl Cli {
    fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            kubeconfig: self.kubeconfig.clone(),
            contexts: self.context.clone(),
            as_user: self.as_user.clone(),
            as_groups: self.as_group.clone(),
        }
    }

    fn scope(&self) -> Option<Scope> {
        if self.all_namespaces {
            Some(Scope::All)
        } else {
            self.namespace.clone().map(Scope::Namespace)
        }
    }
}

fn init_tui_logging() {
    // Not `init_logger`: it starts a thread that wakes every 10 ms to move new lines into the
    // pane's buffer, 100 wake-ups a second on an idle board. The event loop moves them before
    // each frame instead (`app::drive`), the only time the pane is read.
    tui_logger::set_default_level(tui_logger::LevelFilter::Debug);
    let filter = EnvFilter::try_from_env("FERRY_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn,hyper=warn,tower=warn,rustls=warn"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tui_logger::TuiTracingSubscriberLayer)
        .try_init();
}

fn init_stderr_logging() {
    let filter = EnvFilter::try_from_env("FERRY_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Says on stderr which clusters could not be listed, and why.
fn warn_unlisted(state: &ferry::state::State) {
    for c in state
        .clusters
        .iter()
        .filter(|c| !c.conn.migrations.is_live())
    {
        let (word, why) = cli::state_word(&c.conn.migrations);
        eprintln!(
            "ferry: context {}: {word}: {}",
            c.context,
            why.unwrap_or("")
        );
    }
}

/// `ferry cancel|retry|pause|resume|delete|cutover NAME...`: one verb on named migrations (or
/// the `--wave`'s).
async fn act(cli: &Cli, verb: Verb, names: &[String]) -> Result<ExitCode> {
    init_stderr_logging();
    if cli.readonly {
        anyhow::bail!(strings::readonly_refused(verb));
    }
    if names.is_empty() && cli.wave.is_none() {
        anyhow::bail!(strings::NAME_SOMETHING);
    }
    let c = cluster::connect(&cli.connect_options()).await?;
    let ns = cli.namespace.clone().unwrap_or_else(|| c.namespace.clone());
    let results = cli::act(&c, &ns, verb, names, cli.wave.as_deref()).await?;
    let mut ok = true;
    for r in &results {
        let text = match &r.result {
            Ok(o) => strings::final_outcome(o),
            Err(why) => why.clone(),
        };
        ok &= matches!(r.result, Ok(Outcome::Applied));
        println!(
            "{} {}/{}: {text}",
            verb.as_str(),
            r.target.key.namespace,
            r.target.key.name
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the subcommand `cli` names: one function each.
async fn run(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        None | Some(Command::Board { once: false, .. }) => board_live(&cli).await,
        Some(Command::Board { once: true, output }) => board_once(&cli, *output).await,
        Some(Command::Report { wave_name, output }) => {
            report(&cli, wave_name.as_deref(), *output).await
        }
        Some(Command::Controller { run }) => controller(&cli, run).await,
        Some(Command::Cancel(n)) => act(&cli, Verb::Cancel, &n.names).await,
        Some(Command::Retry(n)) => act(&cli, Verb::Retry, &n.names).await,
        Some(Command::Pause(n)) => act(&cli, Verb::Pause, &n.names).await,
        Some(Command::Resume(n)) => act(&cli, Verb::Resume, &n.names).await,
        Some(Command::Delete(n)) => act(&cli, Verb::Delete, &n.names).await,
        Some(Command::Cutover(n)) => act(&cli, Verb::Cutover, &n.names).await,
    }
}

/// `ferry` (and `ferry board`): the live cockpit.
async fn board_live(cli: &Cli) -> Result<ExitCode> {
    init_tui_logging();
    let opts = AppOptions {
        connect: cli.connect_options(),
        scope: cli.scope(),
        wave: cli.wave.clone(),
        readonly: cli.readonly,
        welcome: cli.welcome.clone(),
        frame_log: std::env::var_os("FERRY_FRAME_LOG").map(PathBuf::from),
    };
    app::run(opts).await.context("ferry")?;
    Ok(ExitCode::SUCCESS)
}

/// `ferry board --once`: the board printed once, as text or JSON.
async fn board_once(cli: &Cli, output: Output) -> Result<ExitCode> {
    init_stderr_logging();
    let clusters = cluster::connect_all(&cli.connect_options()).await?;
    let state = cli::load_all(&clusters, cli.scope(), cli.wave.clone()).await;
    match output {
        Output::Text => print!("{}", cli::board_text(&state)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&cli::board_json(&state))?
        ),
    }
    // Every row printed is real, but a cluster that could not be listed fails the run.
    warn_unlisted(&state);
    Ok(listed_code(&state))
}

/// `ferry report`: a wave's (or the scope's) record, as markdown, CSV or JSON.
async fn report(cli: &Cli, wave_name: Option<&str>, output: ReportFormat) -> Result<ExitCode> {
    init_stderr_logging();
    let wave = wave_name.map(str::to_owned).or_else(|| cli.wave.clone());
    let clusters = cluster::connect_all(&cli.connect_options()).await?;
    let (state, listed) = cli::load_all_with_objects(&clusters, cli.scope(), wave.clone()).await;
    let report = cli::report(&state, listed.iter().map(|(c, o)| (*c, o)));
    match output {
        ReportFormat::Md => print!("{}", ferry::report::markdown(&report)),
        ReportFormat::Csv => print!("{}", ferry::report::csv(&report)),
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    warn_unlisted(&state);
    // A report of a wave nobody migrates is a typo, not an empty record.
    if let Some(w) = wave.as_deref()
        && report.vms.is_empty()
    {
        eprintln!("ferry: {}", strings::no_migration_of_wave(w));
        return Ok(ExitCode::FAILURE);
    }
    Ok(listed_code(&state))
}

/// Success only when every cluster could be listed.
fn listed_code(state: &ferry::state::State) -> ExitCode {
    if cli::all_listed(state) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `ferry controller`: the controller in process, a candidate for the leader Lease.
async fn controller(cli: &Cli, run: &ferry_controller::args::ControllerArgs) -> Result<ExitCode> {
    use ferry_controller::args::FrontDoor;
    // The flags are checked before any cluster is contacted.
    let opts = run.run_options(cli.namespace.clone(), FrontDoor::Cockpit)?;
    let election = run
        .election(FrontDoor::Cockpit)?
        .context("the cockpit's controller is always a leader candidate")?;
    let filter = EnvFilter::try_from_env("FERRY_LOG")
        .unwrap_or_else(|_| EnvFilter::new(ferry_controller::args::DEFAULT_LOG_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let c = cluster::connect(&cli.connect_options()).await?;
    tracing::info!(context = %c.context, namespace = ?opts.namespace, lease = %format!("{}/{}", election.namespace, election.lease_name), "running the controller in-process, as a candidate for the leader Lease");
    ferry_controller::run_elected(
        c.config,
        opts,
        election,
        ferry_controller::run::shutdown_signal(),
    )
    .await
    .context("controller")?;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferry: {e:#}");
            ExitCode::FAILURE
        }
    }
}
