//! Running both controllers (migrations and waves) with their metrics and health endpoints,
//! alone ([`run_until`]: the cockpit's in-process mode, a single replica) or under leader
//! election ([`run_elected`]: the Deployment's replicas).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_crds::{MigrationWave, VirtualMachineMigration};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{self, VirtualMachine, VirtualMachineInstance};
use crate::caches::{self, Caches, is_ready};
use crate::children::proof::{self, ProofKey};
use crate::context::Context;
use crate::health::{self, Endpoints, Readiness};
use crate::leader::{ElectionConfig, Elector, Fence};
use crate::metrics::Metrics;
use crate::migrations::{Migrations, Record, Succeeded};
use crate::policy::Policy;
use crate::{Result, reconcile, wave};

/// How to run the controllers.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Reconciles running at once per controller (0 = unbounded).
    pub concurrency: u16,
    /// Where `/metrics` is served; not served when `None`.
    pub metrics_addr: Option<SocketAddr>,
    /// Where `/healthz` and `/readyz` are served; not served when `None`.
    pub health_addr: Option<SocketAddr>,
    /// Decision knobs.
    pub policy: Policy,
    /// Run the MigrationWave controller too.
    pub waves: bool,
    /// How long running reconciles may take to finish after a shutdown was asked for.
    pub shutdown_grace: Duration,
    /// The Secret holding the key of ferry's creation stamps.
    pub proof_key: ProofKeySecret,
    /// Child watches begin with a streaming list (`sendInitialEvents`, the WatchList feature,
    /// on by default since Kubernetes 1.32) rather than paged lists: objects arrive one at a
    /// time and are cut down (`caches::slim`) before the next, where a page of large labelled
    /// objects was held whole (restarted among 300 foreign 600 KiB Jobs: a peak of 85 rather
    /// than 210 MiB). Off for an API server without WatchList.
    pub streaming_lists: bool,
    /// Whether ferry's admission policies must be in force for it to make, start and retry
    /// migrations ([`crate::admission_guard`]); off only in labs without them.
    pub admission_policies: bool,
}

/// Where the creation-stamp key lives (see [`crate::children::proof`]): a Secret in the
/// controller's own namespace (its Lease's), readable by the controller only — never in the
/// namespace of a migration, nor in whatever namespace a kubeconfig points at: anyone who may
/// create a Secret there could choose the key and forge ferry's stamps. The in-cluster
/// controller and the cockpit's `ferry controller` read the same one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProofKeySecret {
    /// Its namespace: the controller's own.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

pub use crate::children::proof::CONTROLLER_NAMESPACE;

impl ProofKeySecret {
    /// The Secret `--proof-key-secret` names: `NAMESPACE/NAME`, or `NAME` in `own`, the
    /// controller's namespace (its Lease's: `--leader-elect-namespace`, `$POD_NAMESPACE`), else
    /// [`CONTROLLER_NAMESPACE`].
    pub fn named(flag: &str, own: Option<&str>) -> Self {
        match flag.split_once('/') {
            Some((ns, name)) => Self {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            },
            None => Self {
                namespace: own
                    .filter(|n| !n.is_empty())
                    .unwrap_or(CONTROLLER_NAMESPACE)
                    .to_owned(),
                name: flag.to_owned(),
            },
        }
    }
}

impl Default for ProofKeySecret {
    fn default() -> Self {
        Self::named(proof::DEFAULT_SECRET_NAME, None)
    }
}

/// Reads (or makes) the creation-stamp key named by `opts` through `client`.
async fn proof_key(client: &Client, opts: &RunOptions) -> Result<ProofKey> {
    proof::load_or_create(client, &opts.proof_key.namespace, &opts.proof_key.name).await
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 16,
            metrics_addr: None,
            health_addr: None,
            policy: Policy::default(),
            waves: true,
            shutdown_grace: Duration::from_secs(20),
            proof_key: ProofKeySecret::default(),
            streaming_lists: true,
            admission_policies: true,
        }
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The endpoints' state: metrics, readiness, and the listeners serving them.
struct Served {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    servers: Vec<(SocketAddr, tokio::task::JoinHandle<()>)>,
}

impl Drop for Served {
    fn drop(&mut self) {
        for (_, task) in &self.servers {
            task.abort();
        }
    }
}

async fn serve(opts: &RunOptions) -> Result<Served> {
    let metrics = Arc::new(Metrics::default());
    let readiness = Arc::new(Readiness::default());
    let mut servers = vec![];
    match (opts.metrics_addr, opts.health_addr) {
        (Some(m), Some(h)) if m == h => {
            servers.push(
                health::bind(
                    m,
                    Endpoints {
                        health: Some(readiness.clone()),
                        metrics: Some(metrics.clone()),
                    },
                )
                .await?,
            );
        }
        (m, h) => {
            if let Some(m) = m {
                servers.push(
                    health::bind(
                        m,
                        Endpoints {
                            health: None,
                            metrics: Some(metrics.clone()),
                        },
                    )
                    .await?,
                );
            }
            if let Some(h) = h {
                servers.push(
                    health::bind(
                        h,
                        Endpoints {
                            health: Some(readiness.clone()),
                            metrics: None,
                        },
                    )
                    .await?,
                );
            }
        }
    }
    Ok(Served {
        metrics,
        readiness,
        servers,
    })
}

/// Runs the controllers until `shutdown` resolves (or a watch cannot start), serving metrics
/// and health as asked. No leader election: this process is the only writer (the cockpit's
/// in-process mode, a single replica).
///
/// # Guarantees
/// * Migrations are reconciled on changes to themselves and to the Jobs, DataVolumes and
///   VirtualMachines they own, and to VirtualMachineInstances carrying their label.
/// * `/readyz` answers 200 once the controllers' caches have synced.
/// * On `shutdown` no new reconcile starts; running ones get `opts.shutdown_grace` to finish.
///
/// # Errors
/// [`crate::Error::Io`] when an endpoint address cannot be bound.
pub async fn run_until(
    client: Client,
    opts: RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let served = serve(&opts).await?;
    served.metrics.leader.set(1);
    let key = proof_key(&client, &opts).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (controllers, ctx) = controllers(client, &opts, &served, key, stop_rx);
    tokio::pin!(controllers);
    tokio::select! {
        () = &mut controllers => {}
        () = shutdown => {
            let _ = stop_tx.send(true);
            finish_within(controllers, opts.shutdown_grace).await;
        }
    }
    ctx.source.close(LOGOUT_WITHIN).await;
    info!("controllers stopped");
    Ok(())
}

/// How long each vSphere session's logout may take when the controller stops.
const LOGOUT_WITHIN: Duration = Duration::from_secs(3);

/// Runs the controllers only while this candidate holds the Lease of `election`.
///
/// # Guarantees
/// * As a standby nothing is watched or written but the Lease; `/readyz` answers 200
///   ("standby") and `ferry_controller_leader` is 0.
/// * Every write of the controllers goes through a client behind the [`Fence`]: none leaves
///   once the renew deadline passed without a renewal, whatever the controllers are doing.
/// * On `shutdown`: no new reconcile starts, running ones get `opts.shutdown_grace`, then the
///   fence closes and the Lease is released (a standby takes it at once); returns `Ok`.
///
/// # Errors
/// [`crate::Error::LeadershipLost`] when leadership is lost (the process should exit and be
/// restarted as a standby); [`crate::Error::Io`] for endpoints; client construction errors.
pub async fn run_elected(
    config: kube::Config,
    opts: RunOptions,
    election: ElectionConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let served = serve(&opts).await?;
    served.readiness.set_standby();
    served.metrics.leader.set(0);
    let fence = Fence::elected(served.metrics.fenced_writes.clone());
    let lease_client = Client::try_from(config.clone())?;
    let client = crate::client::build(config, &fence, &served.metrics.requests)?;
    let mut elector = Elector::new(lease_client, election, fence.clone());
    let shutdown = shutdown.shared();
    info!(identity = %elector.identity(), "standing by for the lease");
    tokio::select! {
        () = elector.acquire() => {}
        () = shutdown.clone() => {
            info!("stopped as a standby");
            return Ok(());
        }
    }
    served.metrics.leader.set(1);
    served.readiness.set_syncing();
    // Read (or made) as the leader: making it is a write, and the fence admits only ours.
    let key = tokio::select! {
        lost = elector.hold() => {
            served.metrics.leader.set(0);
            return Err(crate::Error::LeadershipLost(lost));
        }
        key = proof_key(&client, &opts) => key?,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (controllers, ctx) = controllers(client, &opts, &served, key, stop_rx);
    tokio::pin!(controllers);
    let lost = tokio::select! {
        lost = elector.hold() => Some(lost),
        () = &mut controllers => None,
        () = shutdown => {
            let _ = stop_tx.send(true);
            // Keep renewing while the running reconciles finish.
            tokio::select! {
                lost = elector.hold() => Some(lost),
                () = finish_within(&mut controllers, opts.shutdown_grace) => None,
            }
        }
    };
    served.metrics.leader.set(0);
    if let Some(lost) = lost {
        // Dropping the controllers ends every reconcile; the fence already refuses writes.
        warn!(reason = %lost, "leadership lost; stopping");
        return Err(crate::Error::LeadershipLost(lost));
    }
    ctx.source.close(LOGOUT_WITHIN).await;
    elector.release().await;
    info!("controllers stopped");
    Ok(())
}

/// Waits for `controllers` to end, at most `grace`.
async fn finish_within(controllers: impl Future<Output = ()>, grace: Duration) {
    if tokio::time::timeout(grace, controllers).await.is_err() {
        warn!(
            ?grace,
            "reconciles still running after the shutdown grace; stopping them"
        );
    }
}

/// Both controllers, ending when `stop` turns true (after their running reconciles), and the
/// context they share (its vSphere sessions are logged out once they end); marks `served` ready
/// once their caches have synced.
fn controllers(
    client: Client,
    opts: &RunOptions,
    served: &Served,
    key: ProofKey,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (impl Future<Output = ()> + Send + 'static, Arc<Context>) {
    let ns = opts.namespace.as_deref();
    let config = ControllerConfig::default().concurrency(opts.concurrency);
    let stopped = move || {
        let mut rx = stop.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    // The first list of every watch: streamed or paged (see `RunOptions::streaming_lists`).
    let initial = |c: watcher::Config| {
        if opts.streaming_lists {
            c.streaming_lists()
        } else {
            c.page_size(CHILD_PAGE_SIZE)
        }
    };
    // One watch of the migrations for both controllers; see `migration_watch`.
    let MigrationWatch {
        migrations: held,
        migration_events,
        wave_events,
        settled,
        drive: migration_watch,
    } = migration_watch(
        api::<VirtualMachineMigration>(&client, ns),
        initial(watcher::Config::default()),
        opts.waves,
    );
    let migrations = Controller::for_shared_stream(migration_events, held.store.clone())
        .with_config(config.clone());
    // The children's watches keep their objects: checkpoints observe them there (see
    // `caches`). Only labelled children are watched, and only what decisions read of a child of
    // a migration `held` is kept (`caches::slim`): anyone may label a Job. A first
    // list of large labelled objects is never held all at once (streamed, or small pages).
    // Released children (the migrated VM and its volumes: the user's from then on) leave the
    // watches: the migrated fleet is not held at all. One labelled released by someone else
    // while its migration runs is read fresh, as is every recorded child a cache does not show.
    let children = initial(watcher::Config::default().labels(&children_selector()));
    // A migration that succeeds releases its Job-less children (they leave the watches); its
    // VM's instance, which keeps the labels it was made with, leaves the VMI store then.
    let never = || futures::stream::pending();
    let (jobs, job_events) = cached_watch(
        api::<Job>(&client, ns),
        children.clone(),
        held.clone(),
        never(),
    );
    let (datavolumes, dv_events) = cached_watch(
        api::<DataVolume>(&client, ns),
        children.clone(),
        held.clone(),
        never(),
    );
    let (vms, vm_events) = cached_watch(
        api::<VirtualMachine>(&client, ns),
        children,
        held.clone(),
        never(),
    );
    let (vmis, vmi_events) = cached_watch(
        api::<VirtualMachineInstance>(&client, ns),
        initial(watcher::Config::default().labels(ferry_crds::names::MIGRATION_LABEL)),
        held.clone(),
        settled,
    );
    let caches = Caches {
        jobs,
        datavolumes,
        vms,
        vmis,
    };
    let migrations = migrations
        .owns_stream(job_events)
        .owns_stream(dv_events)
        .owns_stream(vm_events)
        .watches_stream(vmi_events, |vmi| {
            kubevirt::migration_of(&vmi)
                .map(|(ns, name)| ObjectRef::<VirtualMachineMigration>::new(&name).within(&ns))
        })
        .graceful_shutdown_on(stopped());
    let waves = Controller::new(
        api::<MigrationWave>(&client, ns),
        watcher::Config::default(),
    )
    .with_config(config)
    .owns_shared_stream(wave_events)
    .graceful_shutdown_on(stopped());
    let wave_store = waves.store();
    // ResourceQuotas, few and small, for preflight to weigh the disks' claims against: a watch
    // rather than a list per migration. Not part of readiness: until it has listed, preflight
    // lists for itself.
    let (quota_store, quota_writer) = reflector::store();
    let quota_watch = watcher(
        api::<k8s_openapi::api::core::v1::ResourceQuota>(&client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(quota_writer)
    .for_each(|e| async move {
        if let Err(e) = e {
            warn!(error = %e, "watching resource quotas");
        }
    });
    let guard = Arc::new(if opts.admission_policies {
        crate::admission_guard::Guard::required()
    } else {
        crate::admission_guard::Guard::not_required()
    });
    // Waves read their children from the migration controller's cache rather than listing them.
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            opts.policy.clone(),
            served.metrics.clone(),
            key,
        )
        .with_migrations(held.clone())
        .with_child_caches(caches.clone())
        .with_quota_store(quota_store)
        .with_guard(guard.clone()),
    );
    // The admission policies, looked at now and every RECHECK while the controllers run.
    let guarding = {
        let (client, readiness, metrics) = (
            client.clone(),
            served.readiness.clone(),
            served.metrics.clone(),
        );
        let scope = ns.map(str::to_owned);
        async move {
            if !guard.is_required() {
                return;
            }
            loop {
                let verdict = crate::admission_guard::look(&client, scope.as_deref()).await;
                let why = verdict.why_not();
                if guard.set(verdict) {
                    match &why {
                        Some(w) => {
                            warn!(why = %w, "admission policies not in force: making, starting and retrying no migration")
                        }
                        None => info!("admission policies in force"),
                    }
                }
                metrics
                    .admission_policies_in_force
                    .set(i64::from(why.is_none()));
                readiness.set_policies(why);
                tokio::time::sleep(crate::admission_guard::RECHECK).await;
            }
        }
    };
    let run_waves = opts.waves;
    let readiness = served.readiness.clone();
    // What the caches hold, for the metrics (and the test that a released child is not held
    // whole): counted every few seconds rather than on each event.
    // Every few seconds too, what reconciles remembered of migrations and waves no longer
    // cached is forgotten: a migration that succeeded and settled leaves the store for a
    // record, with no reconcile of its own to forget it (and one running as it settles may
    // note its last write after that).
    let counted = {
        let (caches, metrics) = (caches.clone(), served.metrics.clone());
        let migrations = held.clone();
        let (ctx, wave_store) = (ctx.clone(), wave_store.clone());
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            let mut uncached = std::collections::HashSet::new();
            loop {
                every.tick().await;
                if migrations.ready() && (!run_waves || is_ready(&wave_store)) {
                    let mut cached = migrations.uids_in_store();
                    if run_waves {
                        cached.extend(
                            wave_store
                                .state()
                                .iter()
                                .filter_map(|w| kube::ResourceExt::uid(&**w)),
                        );
                    }
                    ctx.sweep(&cached, &mut uncached);
                }
                let (settled, whole): (Vec<_>, Vec<_>) = migrations
                    .store
                    .state()
                    .into_iter()
                    .partition(|m| reconcile::settled::is_slim(m));
                for (form, n) in [
                    ("settled", settled.len()),
                    ("whole", whole.len()),
                    ("record", migrations.succeeded.len()),
                ] {
                    let labels = crate::metrics::FormLabel {
                        form: form.to_owned(),
                    };
                    metrics
                        .cached_migrations
                        .get_or_create(&labels)
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
                for (kind, form, n) in caches.forms() {
                    let labels = crate::metrics::CachedLabels {
                        kind: kind.to_owned(),
                        form: form.to_owned(),
                    };
                    metrics
                        .cached_children
                        .get_or_create(&labels)
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
            }
        }
    };
    let synced = async move {
        while !(held.ready() && (!run_waves || is_ready(&wave_store)) && caches.ready()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        readiness.set_ready();
        info!("caches synced; ready");
    };
    let migrations = migrations
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "migration controller");
            }
        });
    let shared = ctx.clone();
    let waves = waves
        .run(wave::reconcile, wave::error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "wave controller");
            }
        });
    info!(
        namespace = ns.unwrap_or("all"),
        concurrency = opts.concurrency,
        waves = opts.waves,
        "controllers running"
    );
    let run = async move {
        let synced = tokio::spawn(synced);
        let counted = tokio::spawn(counted);
        let guarding = tokio::spawn(guarding);
        let controllers = async move {
            if run_waves {
                futures::join!(migrations, waves);
            } else {
                migrations.await;
            }
        };
        // The watches feed the controllers and end with them (they never end by themselves).
        let watches = async move {
            futures::join!(migration_watch, quota_watch);
        };
        futures::pin_mut!(controllers, watches);
        futures::future::select(controllers, watches).await;
        synced.abort();
        counted.abort();
        guarding.abort();
        let _ = guarding.await;
        // Gone before this returns, with what they hold (the context and its vSphere
        // sessions): not dropped later by the runtime's own shutdown.
        let _ = synced.await;
        let _ = counted.await;
    };
    (run, shared)
}

/// How many migration events may wait for a controller's trigger before the watch waits.
const MIGRATION_EVENT_BUFFER: usize = 1024;

/// The one watch of the migrations, and what it gives.
struct MigrationWatch<M, W, S, D> {
    /// What it holds: the store, and the records of migrations that succeeded and settled.
    migrations: Migrations,
    /// The migration controller's trigger: objects applied (not those that succeeded and
    /// settled: their reconcile would do nothing, and they are not in its store).
    migration_events: M,
    /// With waves, the wave controller's trigger: every event (deletions too).
    wave_events: W,
    /// The namespace and name of each migration seen succeed and settle (see `cached_watch`).
    settled: S,
    /// Drives the watch; runs until dropped.
    drive: D,
}

/// The one watch of the migrations, kept in a store and, for those that succeeded and settled,
/// as records ([`crate::migrations`]); its triggers for the migration controller and, with
/// `waves`, the wave controller. Every event reaches a trigger only once it is held: the wave
/// controller reads its children from what is held, and a trigger from a watch of its own could
/// outrun it, so that a wave summed up a child's old phase and, with nothing else to come, kept
/// that status until its next resync. A migration moves between the store and the records so
/// that it is always in one of them (added to the new place before it leaves the old): a wave
/// that saw it in neither would create it again.
#[allow(clippy::type_complexity)]
fn migration_watch(
    api: Api<VirtualMachineMigration>,
    config: watcher::Config,
    waves: bool,
) -> MigrationWatch<
    impl futures::Stream<Item = Arc<VirtualMachineMigration>> + Send + 'static,
    impl futures::Stream<Item = Arc<VirtualMachineMigration>> + Send + 'static,
    impl futures::Stream<Item = (String, String)> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
> {
    use futures::SinkExt;
    use futures::channel::mpsc;
    use kube::runtime::watcher::Event;
    let (store, writer) = reflector::store();
    let migrations = Migrations {
        store,
        succeeded: Succeeded::default(),
    };
    // Unbounded: the VMI watch that takes these waits for this store's first list, and a
    // bounded send here would wait for it in turn. One small item per migration that succeeds.
    let (settled_tx, settled) = mpsc::unbounded();
    let (mut to_migrations, migration_events) = mpsc::channel(MIGRATION_EVENT_BUFFER);
    let (mut to_waves, wave_events) = mpsc::channel(MIGRATION_EVENT_BUFFER);
    let held = migrations.clone();
    let mut writer = writer;
    let drive = async move {
        let key = |o: &VirtualMachineMigration| {
            (
                kube::ResourceExt::namespace(o).unwrap_or_default(),
                kube::ResourceExt::name_any(o),
            )
        };
        // Settled migrations enter the store cut down (`reconcile::settled`), and those that
        // succeeded leave it for a record: memory follows what is in flight, not the finished
        // records a migration program leaves behind.
        let events = watcher(api, config).default_backoff().modify(|vmm| {
            let now = Time(crate::context::whole_seconds(
                k8s_openapi::jiff::Timestamp::now(),
            ));
            crate::reconcile::settled::strip_foreign(vmm);
            crate::reconcile::settled::slim(vmm, &now);
        });
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    warn!(error = %e, "watching migrations");
                    continue;
                }
            };
            // Held (the store and the records changed together, see `Succeeded::write`)
            // before any trigger goes out. A first list's objects go out once it is done,
            // from the store.
            let (touched, to_controller, listed) = {
                let mut records = held.succeeded.write();
                match event {
                    Event::Init => {
                        records.begin_list();
                        writer.apply_watcher_event(&Event::Init);
                        continue;
                    }
                    Event::InitApply(o) => {
                        match Record::of(&o) {
                            Some(r) => {
                                let (ns, name) = key(&o);
                                records.listed(&ns, &name, r);
                            }
                            None => writer.apply_watcher_event(&Event::InitApply(o)),
                        }
                        continue;
                    }
                    Event::InitDone => {
                        writer.apply_watcher_event(&Event::InitDone);
                        records.end_list();
                        (held.store.state(), true, true)
                    }
                    Event::Apply(o) => {
                        let (ns, name) = key(&o);
                        match Record::of(&o) {
                            // It succeeded and settled: a record from now on, and its
                            // children leave the caches. (A settled copy is small, and this
                            // happens once per migration.)
                            Some(r) => {
                                records.insert(&ns, &name, r);
                                writer.apply_watcher_event(&Event::Delete(o.clone()));
                                let _ = settled_tx.unbounded_send((ns, name));
                                (vec![Arc::new(o)], false, false)
                            }
                            // The store's own copy goes out: not a second one per event.
                            None => {
                                writer.apply_watcher_event(&Event::Apply(o));
                                records.remove(&ns, &name);
                                let stored = held.store.get(&ObjectRef::new(&name).within(&ns));
                                (stored.into_iter().collect(), true, false)
                            }
                        }
                    }
                    Event::Delete(o) => {
                        let (ns, name) = key(&o);
                        writer.apply_watcher_event(&Event::Delete(o.clone()));
                        records.remove(&ns, &name);
                        (vec![Arc::new(o)], false, false)
                    }
                }
            };
            for o in touched {
                // A closed trigger is a controller that stopped: the others still get theirs.
                // A list's settled migrations are not sent: their reconcile would do nothing
                // (`reconcile::settled`), and 10,000 of them grew the work queue for good. One
                // that fails or is cancelled later is (its reconcile forgets what this process
                // held of it); one that succeeds is a record, forgotten by the sweep.
                let settled = listed && crate::reconcile::settled::is_slim(&o);
                if to_controller && !settled {
                    let _ = to_migrations.send(o.clone()).await;
                }
                if waves {
                    let _ = to_waves.send(o).await;
                }
            }
        }
    };
    MigrationWatch {
        migrations,
        migration_events,
        wave_events,
        settled,
        drive,
    }
}

/// Objects per page of a watch's first list with paged lists: at most this many objects of up to
/// ~1.5 MiB (etcd's limit) are in memory before [`caches::slim`] cuts them down.
const CHILD_PAGE_SIZE: u32 = 50;

/// A watch of `api` under `config` whose objects, cut down by [`caches::slim`] against the
/// migrations `migrations` holds, a store keeps, and its events (deletions included) for a
/// controller's trigger. It starts once `migrations` has had its first list, so that children
/// of existing migrations enter the store whole rather than as stubs. Each migration `settled`
/// names (namespace, name: succeeded and settled) takes its children out of the store, as their
/// next event would (a child held whole while it ran would otherwise stay until then).
fn cached_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    migrations: Migrations,
    settled: impl futures::Stream<Item = (String, String)> + Send + 'static,
) -> (
    Store<K>,
    impl futures::Stream<Item = std::result::Result<K, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<DynamicType = ()>
        + Default
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let reader: Store<K> = store.clone();
    // A deletion of each child the store holds of that migration: a stub of its name is all a
    // deletion needs, and without ferry's labels it wakes no reconcile.
    let forgotten = settled.flat_map(move |(ns, name)| {
        let gone: Vec<std::result::Result<watcher::Event<K>, watcher::Error>> = reader
            .state()
            .iter()
            .filter(|o| {
                caches::claimed_migration(o.meta()).is_some_and(|(n, m, _)| n == ns && m == name)
            })
            .map(|o| {
                let mut k = K::default();
                k.meta_mut().name.clone_from(&o.meta().name);
                k.meta_mut().namespace.clone_from(&o.meta().namespace);
                Ok(watcher::Event::Delete(k))
            })
            .collect();
        futures::stream::iter(gone)
    });
    let ready = {
        let migrations = migrations.clone();
        async move {
            // Polled rather than awaited: a store wakes one waiter only (see `is_ready`).
            while !migrations.ready() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let holder = move |ns: &str, name: &str, uid: Option<&str>, child: &str| {
        migrations.holder(ns, name, uid, child)
    };
    let events = futures::stream::once(ready)
        .map(move |()| watcher(api.clone(), config.clone()))
        .flatten()
        .default_backoff()
        .filter_map(move |event| {
            futures::future::ready(match event {
                Ok(watcher::Event::Apply(mut o)) => Some(Ok(match caches::slim(&mut o, &holder) {
                    // Held in no form: a copy from before (whole, while its migration ran)
                    // goes with a deletion; the trigger's reconcile of a settled migration
                    // does nothing.
                    caches::Kept::Nothing => watcher::Event::Delete(o),
                    caches::Kept::Read | caches::Kept::Stub => watcher::Event::Apply(o),
                })),
                Ok(watcher::Event::InitApply(mut o)) => match caches::slim(&mut o, &holder) {
                    caches::Kept::Nothing => None,
                    caches::Kept::Read | caches::Kept::Stub => {
                        Some(Ok(watcher::Event::InitApply(o)))
                    }
                },
                Ok(watcher::Event::Delete(mut o)) => {
                    caches::slim(&mut o, &holder);
                    Some(Ok(watcher::Event::Delete(o)))
                }
                other => Some(other),
            })
        });
    let events = futures::stream::select(events, forgotten)
        .reflect(writer)
        .touched_objects();
    (store, events)
}

/// Runs the controllers until SIGTERM or Ctrl-C (what the cockpit's `ferry controller` and the
/// binary call).
///
/// # Errors
/// As [`run_until`].
pub async fn run(client: Client, opts: RunOptions) -> Result<()> {
    run_until(client, opts, shutdown_signal()).await
}

/// Resolves on the first SIGTERM or SIGINT; a second one ends the process at once (exit 130),
/// whatever the stop is still waiting for: once the handlers are installed, the signals no
/// longer end the process by themselves.
pub async fn shutdown_signal() {
    first_signal().await;
    info!("stopping (a second SIGTERM or SIGINT exits at once)");
    tokio::spawn(async {
        first_signal().await;
        warn!("second signal: exiting at once");
        std::process::exit(130);
    });
}

/// Resolves on the next SIGTERM or SIGINT.
async fn first_signal() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = term.recv() => {},
                _ = tokio::signal::ctrl_c() => {},
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The label selector of the child watches: children of a migration (its uid label), not
/// released. Pure.
fn children_selector() -> String {
    use ferry_crds::names::{MIGRATION_UID_LABEL, RELEASED_LABEL, RELEASED_VALUE};
    format!("{MIGRATION_UID_LABEL},{RELEASED_LABEL}!={RELEASED_VALUE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_watches_leave_released_children_out() {
        // The apiserver filters by this selector and tells a watch of an object that stops
        // matching as of a deletion: no store holds a released child (`caches`).
        assert_eq!(
            children_selector(),
            "migration.platform.example/migration-uid,migration.platform.example/released!=true"
        );
    }
}
