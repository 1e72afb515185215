//! The watches: kube-runtime watchers on migrations, waves and events.k8s.io Events, with
//! objects trimmed before they become actions, and every connection change reported.

use std::time::Duration;

use ::kube::{Api, Client, Resource as KubeResource, ResourceExt, runtime::watcher};
use ferry_crds::{GROUP, MigrationWave, VirtualMachineMigration};
use futures::StreamExt;
use k8s_openapi::{api::events::v1::Event, jiff::Timestamp};
use serde::de::DeserializeOwned;
use tokio::{sync::mpsc::UnboundedSender, task::JoinHandle};

use crate::{
    state::{Action, ClusterId, ConnState, EventKind, EventRow, ObjKey, Resource, Row, Scope},
    strings,
};

/// Longest wait between tries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Drops what the cockpit never shows and what makes objects big.
pub fn trim_meta(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Cuts a migration down to what the details view and the rows read: its discovered source,
/// child records, staging record, preflight's quota claims and owner references are read by
/// none of them. Rows keep only a few fields of it, not the object (issue #30: the board's
/// memory at 10,000); the details view keeps the one it shows ([`read_migration`]), the YAML
/// view reads the whole object from the API when it opens ([`whole_yaml`]).
pub fn trim_migration(o: &mut VirtualMachineMigration) {
    trim_meta(&mut o.metadata);
    o.metadata.owner_references = None;
    if let Some(s) = o.status.as_mut() {
        s.source = None;
        s.children = vec![];
        s.staging = None;
        if let Some(p) = s.preflight.as_mut() {
            p.claims = Default::default();
        }
    }
}

/// Migration `key` read whole from the API, as YAML (managedFields trimmed), for the YAML view;
/// or why it could not be read.
pub async fn whole_yaml(client: Client, key: &ObjKey) -> Result<String, String> {
    let api: Api<VirtualMachineMigration> = Api::namespaced(client, &key.namespace);
    let mut o = api.get(&key.name).await.map_err(|e| e.to_string())?;
    trim_meta(&mut o.metadata);
    serde_yaml::to_string(&o).map_err(|e| e.to_string())
}

/// Migration `key` read from the API for the details view, trimmed as the watch trims it (the
/// view then takes the watch's copies); or why it could not be read, in one line.
pub async fn read_migration(
    client: Client,
    key: &ObjKey,
) -> Result<Box<VirtualMachineMigration>, String> {
    let api: Api<VirtualMachineMigration> = Api::namespaced(client, &key.namespace);
    let mut o = api.get(&key.name).await.map_err(|e| super::one_line(&e))?;
    trim_migration(&mut o);
    Ok(Box::new(o))
}

/// An object kind the cockpit watches. What a list delivers is kept as it arrives, trimmed
/// and (for Events) reduced to a row, so a list of thousands never sits whole in memory twice.
pub trait Watched:
    KubeResource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
    /// Which watch this is.
    const RESOURCE: Resource;
    /// What the list keeps of one object.
    type Kept: Send;
    /// One object of a list, trimmed; `None` when the cockpit shows nothing of it.
    fn keep(self, cluster: ClusterId) -> Option<Self::Kept>;
    /// The action of a watch event that added or changed an object.
    fn applied(self, cluster: ClusterId) -> Option<Action>;
    /// The action of a watch event that removed an object.
    fn deleted(self, cluster: ClusterId) -> Option<Action>;
    /// The action of a finished (re-)list.
    fn listed(cluster: ClusterId, all: Vec<Self::Kept>) -> Action;
    /// The action that shows the first objects of a list still under way (`None`: the list
    /// is shown once finished).
    fn arriving(_cluster: ClusterId, _first: &[Self::Kept]) -> Option<Action> {
        None
    }
}

/// How many objects of a list are shown before the list ends: more than a screen's rows
/// (a list streams in the store's order, namespace then name, which is the board's).
const FIRST_ROWS: usize = 128;

fn key_of<K: KubeResource>(cluster: ClusterId, o: &K) -> ObjKey {
    ObjKey::at(cluster, o.namespace().unwrap_or_default(), o.name_any())
}

impl Watched for VirtualMachineMigration {
    const RESOURCE: Resource = Resource::Migrations;
    // A row as each object of a list arrives: the list's buffer holds small rows, not 10,000
    // objects inline (1.7 KB each) that would then be made into rows beside them.
    type Kept = Row;
    fn keep(mut self, cluster: ClusterId) -> Option<Row> {
        trim_migration(&mut self);
        Some(Row::from_object(cluster, self))
    }
    fn applied(mut self, cluster: ClusterId) -> Option<Action> {
        trim_migration(&mut self);
        Some(Action::MigrationApplied(cluster, Box::new(self)))
    }
    fn deleted(self, cluster: ClusterId) -> Option<Action> {
        Some(Action::MigrationDeleted(key_of(cluster, &self)))
    }
    fn listed(cluster: ClusterId, all: Vec<Row>) -> Action {
        Action::MigrationsListed(cluster, all)
    }
    // At 10,000 migrations a list takes seconds: the first screen of rows is drawn at once.
    fn arriving(cluster: ClusterId, first: &[Row]) -> Option<Action> {
        Some(Action::MigrationsArriving(cluster, first.to_vec()))
    }
}

impl Watched for MigrationWave {
    const RESOURCE: Resource = Resource::Waves;
    type Kept = MigrationWave;
    fn keep(mut self, _: ClusterId) -> Option<Self> {
        trim_meta(&mut self.metadata);
        Some(self)
    }
    fn applied(self, cluster: ClusterId) -> Option<Action> {
        let o = self.keep(cluster)?;
        Some(Action::WaveApplied(cluster, Box::new(o)))
    }
    fn deleted(self, cluster: ClusterId) -> Option<Action> {
        Some(Action::WaveDeleted(key_of(cluster, &self)))
    }
    fn listed(cluster: ClusterId, all: Vec<Self>) -> Action {
        Action::WavesListed(cluster, all)
    }
}

/// The trimmed row of an Event about one of our objects in `cluster`; `None` for any other
/// event.
pub fn event_row(cluster: ClusterId, e: &Event) -> Option<EventRow> {
    let r = e.regarding.as_ref()?;
    if !r
        .api_version
        .as_deref()
        .is_some_and(|v| v.starts_with(GROUP))
    {
        return None;
    }
    let kind = match r.kind.as_deref()? {
        "VirtualMachineMigration" => EventKind::Migration,
        "MigrationWave" => EventKind::Wave,
        _ => return None,
    };
    let ns = r
        .namespace
        .clone()
        .or_else(|| e.metadata.namespace.clone())
        .unwrap_or_default();
    let time: Option<Timestamp> = e
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
    Some(EventRow {
        uid: e.metadata.uid.clone().unwrap_or_else(|| e.name_any()),
        kind,
        regarding: ObjKey::at(cluster, ns, r.name.clone().unwrap_or_default()),
        time,
        type_: e.type_.clone().unwrap_or_else(|| "Normal".into()),
        reason: e.reason.clone().unwrap_or_default(),
        note: e
            .note
            .clone()
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        count: e
            .series
            .as_ref()
            .map_or(e.deprecated_count.unwrap_or(1), |s| s.count)
            .max(1),
    })
}

impl Watched for Event {
    const RESOURCE: Resource = Resource::Events;
    type Kept = EventRow;
    fn keep(self, cluster: ClusterId) -> Option<EventRow> {
        event_row(cluster, &self)
    }
    fn applied(self, cluster: ClusterId) -> Option<Action> {
        event_row(cluster, &self).map(Action::EventApplied)
    }
    fn deleted(self, cluster: ClusterId) -> Option<Action> {
        event_row(cluster, &self).map(Action::EventDeleted)
    }
    fn listed(cluster: ClusterId, all: Vec<EventRow>) -> Action {
        Action::EventsListed(cluster, all)
    }
}

/// The running watches of one scope; dropping it stops them.
#[derive(Debug)]
pub struct Watches {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn api<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: Watched + KubeResource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    match scope {
        Scope::All => Api::all(client.clone()),
        Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
    }
}

/// Starts the three watches of `scope` in `cluster`; their actions go to `tx`.
pub fn start(
    client: &Client,
    cluster: ClusterId,
    scope: &Scope,
    tx: UnboundedSender<Action>,
) -> Watches {
    let tasks = vec![
        tokio::spawn(run(
            api::<VirtualMachineMigration>(client, scope),
            cluster,
            tx.clone(),
        )),
        tokio::spawn(run(
            api::<MigrationWave>(client, scope),
            cluster,
            tx.clone(),
        )),
        tokio::spawn(run(api::<Event>(client, scope), cluster, tx)),
    ];
    Watches { tasks }
}

/// How a failed watch is reported.
pub fn classify(err: &watcher::Error) -> Option<ConnState> {
    let status = match err {
        watcher::Error::InitialListFailed(::kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(::kube::Error::Api(s))
        | watcher::Error::WatchFailed(::kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return None,
    };
    match status.code {
        403 => Some(ConnState::Forbidden(status.message.clone())),
        404 => Some(ConnState::CrdMissing),
        _ => None,
    }
}

/// Whether `err` is an API server refusing a streaming list (`sendInitialEvents`, the WatchList
/// feature: an older server, or one with the feature off, rejects its parameters as invalid).
pub fn refuses_streaming(err: &watcher::Error) -> bool {
    let status = match err {
        watcher::Error::WatchStartFailed(::kube::Error::Api(s))
        | watcher::Error::WatchFailed(::kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return false,
    };
    matches!(status.code, 400 | 422)
}

async fn run<K: Watched>(api: Api<K>, cluster: ClusterId, tx: UnboundedSender<Action>) {
    let r = K::RESOURCE;
    let send = |a: Action| tx.send(a).is_ok();
    let mut attempt: u32 = 0;
    // The first list streams its objects one by one through the watch (WatchList): a paged
    // list's pages of 500 whole objects, parsed at once, left glibc holding 30 MiB more at
    // 10,000 migrations (issue #30: 72 MiB resident against 39). A server that refuses it
    // gets paged lists from then on.
    let mut streaming = true;
    loop {
        // A fresh watcher re-lists: after any failure the board is rebuilt from a full list,
        // so nothing missed while disconnected lingers.
        let config = if streaming {
            watcher::Config::default().streaming_lists()
        } else {
            watcher::Config::default()
        };
        let err = match watch_once(api.clone(), config, cluster, &tx, &mut attempt).await {
            Ended::Unheard => return,
            Ended::Failed(err) => err,
        };
        if streaming && err.as_ref().is_some_and(refuses_streaming) {
            tracing::info!(
                resource = r.plural(),
                "streaming lists refused; listing in pages"
            );
            streaming = false;
            continue;
        }
        attempt = attempt.saturating_add(1);
        let (state, delay) = reconnecting(r, err.as_ref(), attempt);
        if !send(Action::Connection(cluster, r, state)) {
            return;
        }
        tokio::time::sleep(delay).await;
        if !send(Action::Connection(cluster, r, ConnState::Connecting)) {
            return;
        }
    }
}

/// How one watch ended.
enum Ended {
    /// No one listens any more: the watching is over.
    Unheard,
    /// The watch failed, or (`None`) its stream ended: a new one follows.
    Failed(Option<watcher::Error>),
}

/// One watch of `api` under `config`, its events sent as actions on `tx` until it fails;
/// `attempt` starts over once a list is done.
async fn watch_once<K: Watched>(
    api: Api<K>,
    config: watcher::Config,
    cluster: ClusterId,
    tx: &UnboundedSender<Action>,
    attempt: &mut u32,
) -> Ended {
    let r = K::RESOURCE;
    let send = |a: Action| tx.send(a).is_ok();
    let mut stream = watcher(api, config).boxed();
    let mut buf: Vec<K::Kept> = vec![];
    loop {
        let heard = match stream.next().await {
            None => return Ended::Failed(None),
            Some(Err(e)) => return Ended::Failed(Some(e)),
            Some(Ok(watcher::Event::Init)) => {
                buf.clear();
                send(Action::Connection(cluster, r, ConnState::Listing))
            }
            Some(Ok(watcher::Event::InitApply(o))) => {
                let before = buf.len();
                buf.extend(o.keep(cluster));
                let first_rows = before < FIRST_ROWS && buf.len() == FIRST_ROWS;
                !first_rows || K::arriving(cluster, &buf).is_none_or(send)
            }
            Some(Ok(watcher::Event::InitDone)) => {
                *attempt = 0;
                send(K::listed(cluster, std::mem::take(&mut buf)))
                    && send(Action::Connection(cluster, r, ConnState::Live))
            }
            Some(Ok(watcher::Event::Apply(o))) => o.applied(cluster).is_none_or(send),
            Some(Ok(watcher::Event::Delete(o))) => o.deleted(cluster).is_none_or(send),
        };
        if !heard {
            return Ended::Unheard;
        }
    }
}

/// After the `attempt`th failure in a row (`err`, or none: the stream ended), what the
/// connection says, and how long until the next try: a backoff doubling up to
/// [`MAX_BACKOFF`].
fn reconnecting(r: Resource, err: Option<&watcher::Error>, attempt: u32) -> (ConnState, Duration) {
    let delay = Duration::from_secs(1u64 << attempt.min(5).saturating_sub(1)).min(MAX_BACKOFF);
    let retry_at = Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::try_from(delay).unwrap_or_default())
        .unwrap_or_else(|_| Timestamp::now());
    let state = match err {
        Some(e) => {
            tracing::warn!(resource = r.plural(), error = %e, "watch failed");
            classify(e).unwrap_or_else(|| ConnState::Reconnecting {
                retry_at,
                attempt,
                error: super::one_line(e),
            })
        }
        None => ConnState::Reconnecting {
            retry_at,
            attempt,
            error: strings::WATCH_ENDED.into(),
        },
    };
    (state, delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> ::kube::Error {
        ::kube::Error::Api(Box::new(::kube::core::Status {
            code,
            ..::kube::core::Status::default()
        }))
    }

    #[test]
    fn only_a_watch_refused_as_invalid_falls_back_to_paged_lists() {
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(api(
            422
        ))));
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(api(
            400
        ))));
        // Forbidden, a missing CRD or a server in trouble are not about the list's kind.
        for code in [403, 404, 500, 503] {
            assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(api(
                code
            ))));
        }
        // A paged list's own failure is never a reason to stop streaming.
        assert!(!refuses_streaming(&watcher::Error::InitialListFailed(api(
            422
        ))));
    }
}
