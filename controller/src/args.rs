//! The controller's flags, one set for both front doors: `ferry-controller` (in the cluster)
//! and the cockpit's `ferry controller` (in a terminal) flatten [`ControllerArgs`], so a flag
//! means the same in both, with the same default — the converter images and their allow list,
//! the timeouts, the leader election's Lease and its timings. Where the two must differ they say
//! so in one place: [`FrontDoor`] (where metrics and health are served when no address is given,
//! whether leader election is always on, the Lease's namespace when none is given).

use std::net::SocketAddr;
use std::time::Duration;

use crate::admission_guard::Requirement;
use crate::children::proof::DEFAULT_SECRET_NAME;
use crate::leader::ElectionConfig;
use crate::policy::{Policy, check_pinned_image};
use crate::{Error, ProofKeySecret, RunOptions};

/// The log filter both front doors start from (their environment variable may replace it).
pub const DEFAULT_LOG_FILTER: &str = "info,kube=warn,vim_rs=warn";

/// Every flag of the controllers' run.
#[derive(Clone, Debug, clap::Args)]
pub struct ControllerArgs {
    /// Reconciles running at once per controller.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u16,
    /// Address of the Prometheus endpoint (`/metrics`); empty to disable. Default:
    /// 0.0.0.0:8080 for ferry-controller; none for the cockpit's `ferry controller`.
    #[arg(long)]
    pub metrics_addr: Option<String>,
    /// Address of `/healthz` and `/readyz`; empty to disable. Default: 0.0.0.0:8081 for
    /// ferry-controller; none for the cockpit's `ferry controller`.
    #[arg(long)]
    pub health_addr: Option<String>,
    /// First delay of an in-phase retry after a transient failure.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub backoff_base: Duration,
    /// Longest delay between in-phase retries.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub backoff_cap: Duration,
    /// Transient failures tolerated in one phase before the migration fails.
    #[arg(long, default_value_t = 8)]
    pub max_transient_retries: u32,
    /// Importer restarts tolerated per disk before the import is failed.
    #[arg(long, default_value_t = 3)]
    pub max_import_restarts: i32,
    /// How long Starting waits for the VMI to run.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub start_timeout: Duration,
    /// How often a migration held by preflight, or preflighted while paused, is checked again
    /// (a spec change checks at once): each check is a vCenter round trip and a few reads.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub preflight_recheck: Duration,
    /// How long Validating waits for the guest to pass its readiness check (then
    /// GuestNotReady, with the serial console's last lines).
    #[arg(long, value_parser = parse_duration, default_value = "15m")]
    pub agent_timeout: Duration,
    /// Fewest time between two status writes of a migration that only move details or progress.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub status_interval: Duration,
    /// Cap on each converter's datastore read rate in bytes per second (0: none).
    #[arg(long, default_value_t = 0)]
    pub converter_read_limit: u64,
    /// How long a KubeVirt error state (ErrorUnschedulable, CrashLoopBackOff, ...) may last
    /// before the migration fails with it.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    pub kubevirt_error_grace: Duration,
    /// How long past the target instance's terminationGracePeriodSeconds ferry waits for a
    /// stopped target to be gone before it gives up powering the source back on.
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    pub target_stop_margin: Duration,
    /// Do not run the MigrationWave controller.
    #[arg(long)]
    pub no_waves: bool,
    /// Begin the child watches with paged lists instead of streaming lists (for an API server
    /// without the WatchList feature, before Kubernetes 1.32).
    #[arg(long)]
    pub paged_lists: bool,
    /// Most VMs a wave's spec.selector may choose (at most 5000, what status.selectedVms holds);
    /// a selector choosing more fails the wave with SelectorTooBroad.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u16).range(1..=5000))]
    pub wave_selector_limit: u16,
    /// Most migrations copying at once from one ESXi host, across every wave and lone
    /// migration (0: no limit). Forklift's default is 20 per host; about 10 is its published
    /// optimum. A migration over the limit waits in Queued, its source untouched.
    #[arg(long, env = "FERRY_MAX_COPIES_PER_HOST", default_value_t = 0)]
    pub max_copies_per_host: u32,
    /// Most migrations copying at once from one datastore, across every wave and lone
    /// migration (0: no limit). A migration over the limit waits in Queued, its source
    /// untouched.
    #[arg(long, env = "FERRY_MAX_COPIES_PER_DATASTORE", default_value_t = 0)]
    pub max_copies_per_datastore: u32,
    #[command(flatten)]
    pub leader: LeaderArgs,
    /// Image of the conversion Jobs: the controller's own, on a named registry and pinned by
    /// digest (the Deployment passes it). Required to run the controller: it has no default,
    /// since the converter receives the vCenter password and the S3 keys.
    #[arg(long, env = "FERRY_CONVERTER_IMAGE")]
    pub converter_image: Option<String>,
    /// Other converter images a migration may name in spec.conversion.image (exact
    /// references pinned by digest, comma-separated); none by default.
    #[arg(long, env = "FERRY_ALLOWED_CONVERTER_IMAGES", value_delimiter = ',')]
    pub allowed_converter_images: Vec<String>,
    /// Let migrations attach VMs to NetworkAttachmentDefinitions of other namespaces
    /// (`namespace/name` in target.networks); refused by preflight otherwise.
    #[arg(long, env = "FERRY_CROSS_NAMESPACE_NETWORKS")]
    pub cross_namespace_networks: bool,
    /// The Secret holding the key of ferry's creation stamps, `NAME` or `NAMESPACE/NAME` (made
    /// when absent). `NAME` is in the controller's own namespace: its Lease's
    /// (--leader-elect-namespace, $POD_NAMESPACE), else ferry-system — never the kubeconfig's:
    /// whoever may create a Secret where the key is read could choose it.
    #[arg(long, default_value = DEFAULT_SECRET_NAME)]
    pub proof_key_secret: String,
    /// Whether ferry's admission policies (deploy/controller) must be in force: while they are
    /// not, no migration is made, started or retried, and /readyz says why. not-required is for
    /// labs without them.
    #[arg(long, value_enum, env = "FERRY_ADMISSION_POLICIES", default_value_t = Requirement::Required)]
    pub admission_policies: Requirement,
}

/// High availability: leader election on a Lease, graceful stop.
#[derive(Clone, Debug, clap::Args)]
pub struct LeaderArgs {
    /// Act only while holding the leader Lease (run several replicas; one leads). Always on
    /// for the cockpit's `ferry controller`, a candidate beside the in-cluster controller.
    #[arg(long)]
    pub leader_elect: bool,
    /// Name of the leader Lease.
    #[arg(long, default_value = "ferry-controller")]
    pub leader_elect_lease_name: String,
    /// Namespace of the leader Lease (default: the pod's namespace, $POD_NAMESPACE; for the
    /// cockpit's `ferry controller`, else ferry-system, the in-cluster controller's).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// This replica's identity in the Lease (default: $POD_NAME, else host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub leader_elect_identity: Option<String>,
    /// How long a Lease that is no longer renewed keeps the standbys waiting.
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader may write after sending its last successful renewal.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub leader_elect_renew_deadline: Duration,
    /// How often the leader renews and a standby looks.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub leader_elect_retry_period: Duration,
    /// After SIGTERM, how long running reconciles may take before the Lease is released.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    pub shutdown_grace: Duration,
}

/// What differs between the two front doors, and only that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontDoor {
    /// `ferry-controller`: metrics on 0.0.0.0:8080 and health on 0.0.0.0:8081 unless told
    /// otherwise; leader election when asked, its Lease in $POD_NAMESPACE.
    InCluster,
    /// The cockpit's `ferry controller`: no port opened unless asked; always a candidate for
    /// the in-cluster controller's Lease (ferry-system unless told otherwise), so it acts only
    /// while no other controller leads.
    Cockpit,
}

/// The in-cluster controller's namespace, where the cockpit's candidate looks for its Lease.
pub const IN_CLUSTER_NAMESPACE: &str = "ferry-system";

/// `250ms`, `2s`, `5m`, `1h`, or plain seconds.
///
/// # Errors
/// Not a number with one of those units.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
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

fn flag(flag: &'static str, reason: impl Into<String>) -> Error {
    Error::Flag {
        flag,
        reason: reason.into(),
    }
}

/// `given`, else this front door's default; empty means not served.
fn addr(
    given: Option<&str>,
    default: Option<&str>,
    name: &'static str,
) -> Result<Option<SocketAddr>, Error> {
    match given.or(default).map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| flag(name, format!("{s:?} is not host:port"))),
    }
}

impl ControllerArgs {
    /// The images a migration may run: the controller's own (required) and the allowed
    /// others, each pinned by digest on a named registry.
    ///
    /// # Errors
    /// No converter image, or one not chosen for good.
    pub fn converter_images(&self) -> Result<(String, Vec<String>), Error> {
        let own = self.converter_image.as_deref().map(str::trim).ok_or_else(|| {
            flag(
                "--converter-image",
                "required (or $FERRY_CONVERTER_IMAGE): the controller's own image, pinned by digest (`make image` prints it)",
            )
        })?;
        check_pinned_image(own).map_err(|e| flag("--converter-image", e.to_string()))?;
        let allowed: Vec<String> = self
            .allowed_converter_images
            .iter()
            .map(|i| i.trim().to_owned())
            .filter(|i| !i.is_empty())
            .collect();
        for a in &allowed {
            check_pinned_image(a).map_err(|e| flag("--allowed-converter-images", e.to_string()))?;
        }
        Ok((own.to_owned(), allowed))
    }

    /// The run's options for `namespace` (all when `None`) through `door`.
    ///
    /// # Errors
    /// As [`Self::converter_images`]; an address that is not host:port.
    pub fn run_options(
        &self,
        namespace: Option<String>,
        door: FrontDoor,
    ) -> Result<RunOptions, Error> {
        let (converter_image, allowed_converter_images) = self.converter_images()?;
        let (metrics, health) = match door {
            FrontDoor::InCluster => (Some("0.0.0.0:8080"), Some("0.0.0.0:8081")),
            FrontDoor::Cockpit => (None, None),
        };
        Ok(RunOptions {
            namespace,
            concurrency: self.concurrency,
            metrics_addr: addr(self.metrics_addr.as_deref(), metrics, "--metrics-addr")?,
            health_addr: addr(self.health_addr.as_deref(), health, "--health-addr")?,
            policy: Policy {
                backoff_base: self.backoff_base,
                backoff_cap: self.backoff_cap,
                max_transient_retries: self.max_transient_retries,
                max_import_restarts: self.max_import_restarts,
                start_timeout: self.start_timeout,
                preflight_recheck: self.preflight_recheck,
                agent_timeout: self.agent_timeout,
                converter_read_limit: Some(self.converter_read_limit).filter(|r| *r > 0),
                kubevirt_error_grace: self.kubevirt_error_grace,
                wave_selector_limit: usize::from(self.wave_selector_limit),
                target_stop_margin: self.target_stop_margin,
                status_interval: self.status_interval,
                converter_image,
                allowed_converter_images,
                cross_namespace_networks: self.cross_namespace_networks,
                copy_limits: crate::copy_slots::Limits {
                    per_host: self.max_copies_per_host,
                    per_datastore: self.max_copies_per_datastore,
                },
                ..Policy::default()
            },
            waves: !self.no_waves,
            streaming_lists: !self.paged_lists,
            admission_policies: self.admission_policies == Requirement::Required,
            shutdown_grace: self.leader.shutdown_grace,
            proof_key: ProofKeySecret::named(
                &self.proof_key_secret,
                self.lease_namespace(door).as_deref(),
            ),
        })
    }

    /// The Lease's namespace through `door`.
    fn lease_namespace(&self, door: FrontDoor) -> Option<String> {
        match door {
            FrontDoor::InCluster => self.leader.leader_elect_namespace.clone(),
            FrontDoor::Cockpit => Some(
                self.leader
                    .leader_elect_namespace
                    .clone()
                    .unwrap_or_else(|| IN_CLUSTER_NAMESPACE.to_owned()),
            ),
        }
    }

    /// The leader election to take part in through `door`, if any.
    ///
    /// # Errors
    /// Election asked without a Lease namespace; timings that cannot work together.
    pub fn election(&self, door: FrontDoor) -> Result<Option<ElectionConfig>, Error> {
        if door == FrontDoor::InCluster && !self.leader.leader_elect {
            return Ok(None);
        }
        let namespace = self.lease_namespace(door).ok_or_else(|| {
            flag(
                "--leader-elect",
                "needs --leader-elect-namespace (or $POD_NAMESPACE)",
            )
        })?;
        let identity = self
            .leader
            .leader_elect_identity
            .clone()
            .unwrap_or_else(|| {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_owned())
                    .unwrap_or_else(|_| "ferry".into());
                let who = match door {
                    FrontDoor::InCluster => host,
                    FrontDoor::Cockpit => format!("ferry-cockpit-{host}"),
                };
                format!("{who}-{}", std::process::id())
            });
        let cfg = ElectionConfig {
            lease_name: self.leader.leader_elect_lease_name.clone(),
            namespace,
            identity,
            lease_duration: self.leader.leader_elect_lease_duration,
            renew_deadline: self.leader.leader_elect_renew_deadline,
            retry_period: self.leader.leader_elect_retry_period,
        };
        cfg.validate().map_err(|e| flag("--leader-elect", e))?;
        Ok(Some(cfg))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    fn parse(extra: &[&str]) -> ControllerArgs {
        let pinned = format!("registry.example.com/ferry@sha256:{}", "a".repeat(64));
        let mut argv = vec!["x", "--converter-image", &pinned];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).unwrap().args
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn the_two_front_doors_differ_only_where_they_say() {
        let a = parse(&[]);
        let cluster = a.run_options(None, FrontDoor::InCluster).unwrap();
        let cockpit = a.run_options(None, FrontDoor::Cockpit).unwrap();
        assert_eq!(cluster.metrics_addr, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(
            cockpit.metrics_addr, None,
            "a terminal opens no port unasked"
        );
        assert_eq!(cluster.policy.agent_timeout, cockpit.policy.agent_timeout);
        assert_eq!(cockpit.proof_key.namespace, IN_CLUSTER_NAMESPACE);
        assert!(a.election(FrontDoor::InCluster).unwrap().is_none());
        let e = a.election(FrontDoor::Cockpit).unwrap().unwrap();
        assert_eq!(
            (e.namespace.as_str(), e.lease_duration),
            (IN_CLUSTER_NAMESPACE, Duration::from_secs(15))
        );
        let told = parse(&["--metrics-addr", "127.0.0.1:9090", "--agent-timeout", "30s"]);
        let cockpit = told.run_options(None, FrontDoor::Cockpit).unwrap();
        assert_eq!(
            cockpit.metrics_addr,
            Some("127.0.0.1:9090".parse().unwrap())
        );
        assert_eq!(cockpit.policy.agent_timeout, Duration::from_secs(30));
    }

    #[test]
    fn an_image_outside_the_pinned_rule_is_refused_through_either_door() {
        let mut a = parse(&[]);
        a.allowed_converter_images = vec!["ferry/other:latest".into()];
        for door in [FrontDoor::InCluster, FrontDoor::Cockpit] {
            let e = a.run_options(None, door).unwrap_err().to_string();
            assert!(e.contains("--allowed-converter-images"), "{e}");
        }
    }
}
