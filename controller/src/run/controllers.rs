//! Both controllers, migrations and waves, on the watches they share.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferry_crds::{MigrationWave, VirtualMachineMigration};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Client;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tracing::{debug, info, warn};

use super::options::RunOptions;
use super::serve::Served;
use super::watches::{
    CHILD_PAGE_SIZE, MigrationWatch, api, cached_watch, children_selector, migration_watch,
};
use crate::admission_guard::{self, Guard};
use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{self, VirtualMachine, VirtualMachineInstance};
use crate::caches::{Caches, is_ready};
use crate::children::proof::ProofKey;
use crate::context::Context;
use crate::health::Readiness;
use crate::metrics::{CachedLabels, FormLabel, Metrics};
use crate::migrations::Migrations;
use crate::{reconcile, wave};

/// Both controllers, ending when `stop` turns true (after their running reconciles), and the
/// context they share (its vSphere sessions are logged out once they end); marks `served` ready
/// once their caches have synced.
pub(super) fn controllers(
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
    // One watch of the migrations for both controllers; see `migration_watch`.
    let MigrationWatch {
        migrations: held,
        migration_events,
        wave_events,
        settled,
        drive: migration_watch,
    } = migration_watch(
        api::<VirtualMachineMigration>(&client, ns),
        first_list(opts, watcher::Config::default()),
        opts.waves,
    );
    let migrations = Controller::for_shared_stream(migration_events, held.store.clone())
        .with_config(config.clone());
    let (migrations, caches) = on_children(migrations, &client, opts, &held, settled);
    let migrations = migrations.graceful_shutdown_on(stopped());
    let waves = Controller::new(
        api::<MigrationWave>(&client, ns),
        watcher::Config::default(),
    )
    .with_config(config)
    .owns_shared_stream(wave_events)
    .graceful_shutdown_on(stopped());
    // The wave controller's store, read only when waves run.
    let wave_store = opts.waves.then(|| waves.store());
    let (quota_store, quota_watch) = quota_watch(&client, ns);
    let (ctx, guard) = context(&client, opts, served, key, &held, &caches, quota_store);
    let background: [BoxFuture<'static, ()>; 3] = [
        Box::pin(synced(
            held.clone(),
            wave_store.clone(),
            caches.clone(),
            served.readiness.clone(),
        )),
        Box::pin(counted(
            ctx.clone(),
            held,
            wave_store,
            caches,
            served.metrics.clone(),
        )),
        Box::pin(guarding(guard, client, ns, served)),
    ];
    let controllers = run_controllers(migrations, waves, ctx.clone(), opts.waves);
    info!(
        namespace = ns.unwrap_or("all"),
        concurrency = opts.concurrency,
        waves = opts.waves,
        "controllers running"
    );
    // The watches feed the controllers and end with them (they never end by themselves).
    let watches = async move {
        futures::join!(migration_watch, quota_watch);
    };
    (together(controllers, watches, background), ctx)
}

/// `config` with the first list of a watch streamed or paged (see
/// `RunOptions::streaming_lists`).
fn first_list(opts: &RunOptions, config: watcher::Config) -> watcher::Config {
    if opts.streaming_lists {
        config.streaming_lists()
    } else {
        config.page_size(CHILD_PAGE_SIZE)
    }
}

/// The migration controller triggered by its children too, and the caches of the children's
/// watches.
///
/// The children's watches keep their objects: checkpoints observe them there (see `caches`).
/// Only labelled children are watched, and only what decisions read of a child of a migration
/// `held` is kept (`caches::slim`): anyone may label a Job. A first list of large labelled
/// objects is never held all at once (streamed, or small pages). Released children (the
/// migrated VM and its volumes: the user's from then on) leave the watches: the migrated fleet
/// is not held at all. One labelled released by someone else while its migration runs is read
/// fresh, as is every recorded child a cache does not show.
fn on_children(
    migrations: Controller<VirtualMachineMigration>,
    client: &Client,
    opts: &RunOptions,
    held: &Migrations,
    settled: impl futures::Stream<Item = (String, String)> + Send + 'static,
) -> (Controller<VirtualMachineMigration>, Caches) {
    let ns = opts.namespace.as_deref();
    let children = first_list(
        opts,
        watcher::Config::default().labels(&children_selector()),
    );
    // A migration that succeeds releases its Job-less children (they leave the watches); its
    // VM's instance, which keeps the labels it was made with, leaves the VMI store then.
    let never = || futures::stream::pending();
    let (jobs, job_events) = cached_watch(
        api::<Job>(client, ns),
        children.clone(),
        held.clone(),
        never(),
    );
    let (datavolumes, dv_events) = cached_watch(
        api::<DataVolume>(client, ns),
        children.clone(),
        held.clone(),
        never(),
    );
    let (vms, vm_events) = cached_watch(
        api::<VirtualMachine>(client, ns),
        children,
        held.clone(),
        never(),
    );
    let (vmis, vmi_events) = cached_watch(
        api::<VirtualMachineInstance>(client, ns),
        first_list(
            opts,
            watcher::Config::default().labels(ferry_crds::names::MIGRATION_LABEL),
        ),
        held.clone(),
        settled,
    );
    let migrations = migrations
        .owns_stream(job_events)
        .owns_stream(dv_events)
        .owns_stream(vm_events)
        .watches_stream(vmi_events, |vmi| {
            kubevirt::migration_of(&vmi)
                .map(|(ns, name)| ObjectRef::<VirtualMachineMigration>::new(&name).within(&ns))
        });
    let caches = Caches {
        jobs,
        datavolumes,
        vms,
        vmis,
    };
    (migrations, caches)
}

/// ResourceQuotas, few and small, for preflight to weigh the disks' claims against: a watch
/// rather than a list per migration. Not part of readiness: until it has listed, preflight
/// lists for itself.
fn quota_watch(
    client: &Client,
    ns: Option<&str>,
) -> (
    Store<ResourceQuota>,
    impl Future<Output = ()> + Send + 'static + use<>,
) {
    let (quota_store, quota_writer) = reflector::store();
    let quota_watch = watcher(api::<ResourceQuota>(client, ns), watcher::Config::default())
        .default_backoff()
        .reflect(quota_writer)
        .for_each(|e| async move {
            if let Err(e) = e {
                warn!(error = %e, "watching resource quotas");
            }
        });
    (quota_store, quota_watch)
}

/// The context both controllers share, and the admission policies' guard in it. Waves read
/// their children from the migration controller's cache rather than listing them.
fn context(
    client: &Client,
    opts: &RunOptions,
    served: &Served,
    key: ProofKey,
    held: &Migrations,
    caches: &Caches,
    quota_store: Store<ResourceQuota>,
) -> (Arc<Context>, Arc<Guard>) {
    let guard = Arc::new(if opts.admission_policies {
        Guard::required()
    } else {
        Guard::not_required()
    });
    let ctx = Context::new(
        client.clone(),
        opts.policy.clone(),
        served.metrics.clone(),
        key,
    )
    .with_migrations(held.clone())
    .with_child_caches(caches.clone())
    .with_quota_store(quota_store)
    .with_guard(guard.clone());
    (Arc::new(ctx), guard)
}

/// The admission policies, looked at now and every `RECHECK` while the controllers run: they
/// set the guard, the readiness and the metric.
fn guarding(
    guard: Arc<Guard>,
    client: Client,
    ns: Option<&str>,
    served: &Served,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let (readiness, metrics) = (served.readiness.clone(), served.metrics.clone());
    let scope = ns.map(str::to_owned);
    async move {
        if !guard.is_required() {
            return;
        }
        loop {
            let verdict = admission_guard::look(&client, scope.as_deref()).await;
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
            tokio::time::sleep(admission_guard::RECHECK).await;
        }
    }
}

/// Every few seconds, what reconciles remembered of migrations and waves no longer cached is
/// forgotten, and what the caches hold is counted for the metrics (and the test that a
/// released child is not held whole): on a timer rather than on each event. A migration that
/// succeeded and settled leaves the store for a record, with no reconcile of its own to forget
/// it (and one running as it settles may note its last write after that).
async fn counted(
    ctx: Arc<Context>,
    migrations: Migrations,
    waves: Option<Store<MigrationWave>>,
    caches: Caches,
    metrics: Arc<Metrics>,
) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    let mut uncached = HashSet::new();
    loop {
        every.tick().await;
        if migrations.ready() && waves.as_ref().is_none_or(is_ready) {
            let mut cached = migrations.uids_in_store();
            if let Some(waves) = &waves {
                cached.extend(
                    waves
                        .state()
                        .iter()
                        .filter_map(|w| kube::ResourceExt::uid(&**w)),
                );
            }
            ctx.sweep(&cached, &mut uncached);
        }
        count(&metrics, &migrations, &caches);
    }
}

/// The migrations held, by form (settled, whole, record), and the children the caches hold,
/// by kind and form.
fn count(metrics: &Metrics, migrations: &Migrations, caches: &Caches) {
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
        let labels = FormLabel {
            form: form.to_owned(),
        };
        metrics
            .cached_migrations
            .get_or_create(&labels)
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    for (kind, form, n) in caches.forms() {
        let labels = CachedLabels {
            kind: kind.to_owned(),
            form: form.to_owned(),
        };
        metrics
            .cached_children
            .get_or_create(&labels)
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// Marks the controllers ready once every cache they read has had its first list.
async fn synced(
    migrations: Migrations,
    waves: Option<Store<MigrationWave>>,
    caches: Caches,
    readiness: Arc<Readiness>,
) {
    while !(migrations.ready() && waves.as_ref().is_none_or(is_ready) && caches.ready()) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    readiness.set_ready();
    info!("caches synced; ready");
}

/// Both controllers' runs (the wave controller's only with `run_waves`), their errors logged.
fn run_controllers(
    migrations: Controller<VirtualMachineMigration>,
    waves: Controller<MigrationWave>,
    ctx: Arc<Context>,
    run_waves: bool,
) -> impl Future<Output = ()> + Send + 'static {
    let migrations = migrations
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "migration controller");
            }
        });
    let waves = waves
        .run(wave::reconcile, wave::error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "wave controller");
            }
        });
    async move {
        if run_waves {
            futures::join!(migrations, waves);
        } else {
            migrations.await;
        }
    }
}

/// The controllers and their watches until either ends, with the `background` tasks beside
/// them; those end with them.
async fn together(
    controllers: impl Future<Output = ()>,
    watches: impl Future<Output = ()>,
    background: [BoxFuture<'static, ()>; 3],
) {
    let background = background.map(tokio::spawn);
    futures::pin_mut!(controllers, watches);
    futures::future::select(controllers, watches).await;
    for task in &background {
        task.abort();
    }
    // Gone before this returns, with what they hold (the context and its vSphere sessions):
    // not dropped later by the runtime's own shutdown.
    for task in background {
        let _ = task.await;
    }
}
