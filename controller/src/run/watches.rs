//! The watches: the migrations' one (a store, the records of the settled, the triggers), and
//! the children's, cut down before their stores hold them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferry_crds::VirtualMachineMigration;
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::warn;

use crate::caches::{self};
use crate::migrations::{Migrations, Record, Succeeded};

pub(super) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// How many migration events may wait for a controller's trigger before the watch waits.
const MIGRATION_EVENT_BUFFER: usize = 1024;

/// The one watch of the migrations, and what it gives.
pub(super) struct MigrationWatch<M, W, S, D> {
    /// What it holds: the store, and the records of migrations that succeeded and settled.
    pub(super) migrations: Migrations,
    /// The migration controller's trigger: objects applied (not those that succeeded and
    /// settled: their reconcile would do nothing, and they are not in its store).
    pub(super) migration_events: M,
    /// With waves, the wave controller's trigger: every event (deletions too).
    pub(super) wave_events: W,
    /// The namespace and name of each migration seen succeed and settle (see `cached_watch`).
    pub(super) settled: S,
    /// Drives the watch; runs until dropped.
    pub(super) drive: D,
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
pub(super) fn migration_watch(
    api: Api<VirtualMachineMigration>,
    config: watcher::Config,
    waves: bool,
) -> MigrationWatch<
    impl futures::Stream<Item = Arc<VirtualMachineMigration>> + Send + 'static,
    impl futures::Stream<Item = Arc<VirtualMachineMigration>> + Send + 'static,
    impl futures::Stream<Item = (String, String)> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
> {
    let (store, writer) = reflector::store();
    let migrations = Migrations {
        store,
        succeeded: Succeeded::default(),
    };
    // Unbounded: the VMI watch that takes these waits for this store's first list, and a
    // bounded send here would wait for it in turn. One small item per migration that succeeds.
    let (settled_tx, settled) = mpsc::unbounded();
    let (to_migrations, migration_events) = mpsc::channel(MIGRATION_EVENT_BUFFER);
    let (to_waves, wave_events) = mpsc::channel(MIGRATION_EVENT_BUFFER);
    let mut holding = Holding {
        held: migrations.clone(),
        writer,
        settled: settled_tx,
    };
    let mut triggers = Triggers {
        migrations: to_migrations,
        waves: to_waves,
        with_waves: waves,
    };
    let drive = async move {
        let events = migration_events_cut_down(api, config);
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if let Some(touched) = holding.hold(event) {
                        triggers.send(touched).await;
                    }
                }
                Err(e) => warn!(error = %e, "watching migrations"),
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

/// The migrations' watch, each object cut down as it arrives. Settled migrations enter the
/// store cut down (`reconcile::settled`), and those that succeeded leave it for a record:
/// memory follows what is in flight, not the finished records a migration program leaves
/// behind.
fn migration_events_cut_down(
    api: Api<VirtualMachineMigration>,
    config: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<Event<VirtualMachineMigration>>> + Send + 'static {
    watcher(api, config).default_backoff().modify(|vmm| {
        let now = Time(crate::context::whole_seconds(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        crate::reconcile::settled::strip_foreign(vmm);
        crate::reconcile::settled::slim(vmm, &now);
    })
}

/// What the migrations' watch writes to: the store, the records, and the VMI watch told of
/// each migration that succeeded and settled.
struct Holding {
    held: Migrations,
    writer: Writer<VirtualMachineMigration>,
    settled: mpsc::UnboundedSender<(String, String)>,
}

/// The migrations an event touched, once held, for the triggers.
struct Touched {
    migrations: Vec<Arc<VirtualMachineMigration>>,
    /// Whether the migration controller hears of them (not of one that succeeded and
    /// settled, or was deleted: it is not in its store).
    to_controller: bool,
    /// Whether they are a first list's, just done.
    listed: bool,
}

impl Holding {
    /// Holds `event`: the store and the records change together (see `Succeeded::write`),
    /// before any trigger goes out. A first list's objects go out once it is done, from the
    /// store.
    fn hold(&mut self, event: Event<VirtualMachineMigration>) -> Option<Touched> {
        match event {
            Event::Init => {
                let mut records = self.held.succeeded.write();
                records.begin_list();
                self.writer.apply_watcher_event(&Event::Init);
                None
            }
            Event::InitApply(o) => {
                self.listed(o);
                None
            }
            Event::InitDone => {
                let mut records = self.held.succeeded.write();
                self.writer.apply_watcher_event(&Event::InitDone);
                records.end_list();
                Some(Touched {
                    migrations: self.held.store.state(),
                    to_controller: true,
                    listed: true,
                })
            }
            Event::Apply(o) => Some(self.applied(o)),
            Event::Delete(o) => {
                let mut records = self.held.succeeded.write();
                let (ns, name) = key(&o);
                self.writer.apply_watcher_event(&Event::Delete(o.clone()));
                records.remove(&ns, &name);
                Some(Touched {
                    migrations: vec![Arc::new(o)],
                    to_controller: false,
                    listed: false,
                })
            }
        }
    }

    /// A first list's migration: a record if it succeeded and settled, else in the store.
    fn listed(&mut self, o: VirtualMachineMigration) {
        let mut records = self.held.succeeded.write();
        match Record::of(&o) {
            Some(r) => {
                let (ns, name) = key(&o);
                records.listed(&ns, &name, r);
            }
            None => self.writer.apply_watcher_event(&Event::InitApply(o)),
        }
    }

    /// A migration applied after the first list.
    fn applied(&mut self, o: VirtualMachineMigration) -> Touched {
        let mut records = self.held.succeeded.write();
        let (ns, name) = key(&o);
        match Record::of(&o) {
            // It succeeded and settled: a record from now on, and its children leave the
            // caches. (A settled copy is small, and this happens once per migration.)
            Some(r) => {
                records.insert(&ns, &name, r);
                self.writer.apply_watcher_event(&Event::Delete(o.clone()));
                let _ = self.settled.unbounded_send((ns, name));
                Touched {
                    migrations: vec![Arc::new(o)],
                    to_controller: false,
                    listed: false,
                }
            }
            // The store's own copy goes out: not a second one per event.
            None => {
                self.writer.apply_watcher_event(&Event::Apply(o));
                records.remove(&ns, &name);
                let stored = self.held.store.get(&ObjectRef::new(&name).within(&ns));
                Touched {
                    migrations: stored.into_iter().collect(),
                    to_controller: true,
                    listed: false,
                }
            }
        }
    }
}

/// A migration's namespace and name.
fn key(o: &VirtualMachineMigration) -> (String, String) {
    (
        kube::ResourceExt::namespace(o).unwrap_or_default(),
        kube::ResourceExt::name_any(o),
    )
}

/// The controllers' triggers.
struct Triggers {
    migrations: mpsc::Sender<Arc<VirtualMachineMigration>>,
    waves: mpsc::Sender<Arc<VirtualMachineMigration>>,
    with_waves: bool,
}

impl Triggers {
    /// Sends what was `touched` to the controllers that hear of it. A closed trigger is a
    /// controller that stopped: the others still get theirs.
    async fn send(&mut self, touched: Touched) {
        for o in touched.migrations {
            // A list's settled migrations are not sent: their reconcile would do nothing
            // (`reconcile::settled`), and 10,000 of them grew the work queue for good. One
            // that fails or is cancelled later is (its reconcile forgets what this process
            // held of it); one that succeeds is a record, forgotten by the sweep.
            let settled = touched.listed && crate::reconcile::settled::is_slim(&o);
            if touched.to_controller && !settled {
                let _ = self.migrations.send(o.clone()).await;
            }
            if self.with_waves {
                let _ = self.waves.send(o).await;
            }
        }
    }
}

/// Objects per page of a watch's first list with paged lists: at most this many objects of up to
/// ~1.5 MiB (etcd's limit) are in memory before [`caches::slim`] cuts them down.
pub(super) const CHILD_PAGE_SIZE: u32 = 50;

/// A watch of `api` under `config` whose objects, cut down by [`caches::slim`] against the
/// migrations `migrations` holds, a store keeps, and its events (deletions included) for a
/// controller's trigger. It starts once `migrations` has had its first list, so that children
/// of existing migrations enter the store whole rather than as stubs. Each migration `settled`
/// names (namespace, name: succeeded and settled) takes its children out of the store, as their
/// next event would (a child held whole while it ran would otherwise stay until then).
pub(super) fn cached_watch<K>(
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
    let forgotten = forgotten(store.clone(), settled);
    let ready = first_listed(migrations.clone());
    let holder = move |ns: &str, name: &str, uid: Option<&str>, child: &str| {
        migrations.holder(ns, name, uid, child)
    };
    let events = futures::stream::once(ready)
        .map(move |()| watcher(api.clone(), config.clone()))
        .flatten()
        .default_backoff()
        .filter_map(move |event| futures::future::ready(cut_down(event, &holder)));
    let events = futures::stream::select(events, forgotten)
        .reflect(writer)
        .touched_objects();
    (store, events)
}

/// A deletion of each child `store` holds of each migration `settled` names: a stub of its
/// name is all a deletion needs, and without ferry's labels it wakes no reconcile.
fn forgotten<K>(
    store: Store<K>,
    settled: impl futures::Stream<Item = (String, String)> + Send + 'static,
) -> impl futures::Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Default + Clone + Send + Sync + 'static,
{
    settled.flat_map(move |(ns, name)| {
        let gone: Vec<watcher::Result<Event<K>>> = store
            .state()
            .iter()
            .filter(|o| {
                caches::claimed_migration(o.meta()).is_some_and(|(n, m, _)| n == ns && m == name)
            })
            .map(|o| {
                let mut k = K::default();
                k.meta_mut().name.clone_from(&o.meta().name);
                k.meta_mut().namespace.clone_from(&o.meta().namespace);
                Ok(Event::Delete(k))
            })
            .collect();
        futures::stream::iter(gone)
    })
}

/// Resolves once `migrations` has had its first list. Polled rather than awaited: a store
/// wakes one waiter only (see `is_ready`).
async fn first_listed(migrations: Migrations) {
    while !migrations.ready() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `event` with its object cut down by [`caches::slim`] against `holder`; none for a first
/// list's object held in no form.
fn cut_down<K>(
    event: watcher::Result<Event<K>>,
    holder: impl Fn(&str, &str, Option<&str>, &str) -> caches::Holder,
) -> Option<watcher::Result<Event<K>>>
where
    K: kube::Resource + Default,
{
    match event {
        Ok(Event::Apply(mut o)) => Some(Ok(match caches::slim(&mut o, &holder) {
            // Held in no form: a copy from before (whole, while its migration ran) goes with a
            // deletion; the trigger's reconcile of a settled migration does nothing.
            caches::Kept::Nothing => Event::Delete(o),
            caches::Kept::Read | caches::Kept::Stub => Event::Apply(o),
        })),
        Ok(Event::InitApply(mut o)) => match caches::slim(&mut o, &holder) {
            caches::Kept::Nothing => None,
            caches::Kept::Read | caches::Kept::Stub => Some(Ok(Event::InitApply(o))),
        },
        Ok(Event::Delete(mut o)) => {
            caches::slim(&mut o, &holder);
            Some(Ok(Event::Delete(o)))
        }
        other => Some(other),
    }
}

/// The label selector of the child watches: children of a migration (its uid label), not
/// released. Pure.
pub(super) fn children_selector() -> String {
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
