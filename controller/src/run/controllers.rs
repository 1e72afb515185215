//! Both controllers, migrations and waves, on the watches they share.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferry_crds::{MigrationWave, VirtualMachineMigration};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use tracing::{debug, info, warn};

use super::options::RunOptions;
use super::serve::Served;
use super::watches::{
    CHILD_PAGE_SIZE, MigrationWatch, api, cached_watch, children_selector, migration_watch,
};
use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{self, VirtualMachine, VirtualMachineInstance};
use crate::caches::{Caches, is_ready};
use crate::children::proof::ProofKey;
use crate::context::Context;
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
