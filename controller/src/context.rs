//! What every reconcile shares: the client, the ports (vSphere, S3), the injected clock, the
//! policy knobs, metrics, the event recorder, and a little per-object memory that only saves
//! work (losing it on a restart is harmless).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;

use crate::caches::Caches;
use crate::children::proof::ProofKey;
use crate::freshness::{self, Cached};
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::ports::{S3Staging, SourceApi, StagingApi, VsphereSource};

/// The source of "now" for decisions, so that tests can fix it.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// `now` cut to whole seconds: what the API server keeps of a `metav1.Time`, so that a status
/// computed now compares equal to the same status read back.
pub fn whole_seconds(now: Timestamp) -> Timestamp {
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// What a wave gave its children that its cache may not show yet, by child uid: each still
/// takes its slot of `maxInFlight` until the cache shows it ([`crate::wave::decide::with_releases`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Given {
    /// Children released (their hold removed).
    pub released: HashSet<String>,
    /// Warm children given their cutover (`spec.warm.cutover: true`).
    pub cut_over: HashSet<String>,
}

#[derive(Debug, Default, Clone)]
struct Memo {
    /// When progress was last written.
    status_written: Option<Instant>,
    /// Reconciles failed in a row (a Kubernetes API error, a cleanup that could not finish).
    failures: u32,
    /// When a wave last read its children.
    looked: Option<Instant>,
    /// Releases and cutovers a wave gave that its cache did not show yet.
    given: Given,
    /// Children (names) a wave created that its cache did not show yet, and when.
    created: HashMap<String, Instant>,
    /// The migration's resourceVersion as last known current: returned by our own status write
    /// or by a fresh read. A cached copy at this version needs no fresh read.
    current_version: Option<String>,
    /// The credentials Secrets this attempt of the migration read, by name (read once per
    /// attempt: forgotten on any failure, retry, cancel or end, so a rotated or revoked Secret
    /// counts from the next attempt on).
    secrets: HashMap<String, Arc<Secret>>,
    /// This attempt found every name it will create free (Preparing's check, once per attempt:
    /// a name taken later is found by its create).
    names_free: bool,
    /// When this process last looked at the source for the migration's preflight, and for which
    /// spec generation: findings unchanged since keep `status.preflight.checkedAt` (nothing to
    /// write), so the schedule of the next look is timed from here.
    preflight_ran: Option<(
        Option<i64>,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    )>,
}

/// Shared state of the controllers.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The vSphere source.
    pub source: Arc<dyn SourceApi>,
    /// The S3 staging store.
    pub staging: Arc<dyn StagingApi>,
    /// Now.
    pub clock: Arc<dyn Clock>,
    /// Decision knobs.
    pub policy: Policy,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Kubernetes Events.
    pub recorder: Recorder,
    /// The key of the creation stamps on the children ferry makes (see [`crate::children::proof`]).
    pub proof: ProofKey,
    /// What the migration controller holds of every migration it watches: where a wave reads
    /// its children (no list of megabytes per reconcile).
    pub migrations: Option<crate::migrations::Migrations>,
    /// The watch caches of the migrations' children, where checkpoints observe them; `None`
    /// reads every child from the API.
    pub children: Option<Caches>,
    /// A watch cache of the ResourceQuotas where migrations run, which preflight weighs the
    /// disks' claims against (no list per migration); `None` lists them from the API.
    pub quotas: Option<Store<k8s_openapi::api::core::v1::ResourceQuota>>,
    /// Whether ferry's admission policies are in force, and what is held back while they are
    /// not ([`crate::admission_guard`]); not required unless [`Context::with_guard`] says so.
    pub guard: Arc<crate::admission_guard::Guard>,
    /// The copy slots granted and not yet shown by a status ([`crate::copy_slots`]).
    pub slots: crate::copy_slots::Slots,
    /// The migrations the watch last showed holding a copy slot, and when they were read.
    holders: Mutex<Option<(std::time::Instant, Holders)>>,
    memory: Mutex<HashMap<String, Memo>>,
}

/// The migrations holding a copy slot, by uid, with where they copy from.
type Holders = Arc<Vec<(String, crate::copy_slots::Place)>>;

/// How long the holders read from the migrations' store serve every copy-slot check: one walk
/// of the store per second, not one per waiting migration every few seconds (10,000
/// migrations with 1,000 waiting would walk 10 million objects every 5 s). Reading them late
/// never under-counts: a grant is forgotten only once the holders read show it, and a holder
/// that stopped is counted a second longer at most.
const HOLDERS_FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(1);

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// What a [`Context`] talks to beyond the Kubernetes API, and what it keys its proofs with.
pub struct Ports {
    /// The vSphere source.
    pub source: Arc<dyn SourceApi>,
    /// The S3 staging store.
    pub staging: Arc<dyn StagingApi>,
    /// Now.
    pub clock: Arc<dyn Clock>,
    /// The creation-stamp key.
    pub proof: ProofKey,
}

/// The reporting controller name on Events.
pub const REPORTER: &str = "ferry-controller";

impl Context {
    /// A context on the real ports and the system clock.
    pub fn new(
        client: kube::Client,
        policy: Policy,
        metrics: Arc<Metrics>,
        proof: ProofKey,
    ) -> Self {
        let source = Arc::new(VsphereSource::counted(metrics.vsphere_calls.clone()));
        Self::with_ports(
            client,
            policy,
            metrics,
            Ports {
                source,
                staging: Arc::new(S3Staging),
                clock: Arc::new(SystemClock),
                proof,
            },
        )
    }

    /// A context on the given ports and clock.
    pub fn with_ports(
        client: kube::Client,
        policy: Policy,
        metrics: Arc<Metrics>,
        ports: Ports,
    ) -> Self {
        let Ports {
            source,
            staging,
            clock,
            proof,
        } = ports;
        let reporter = Reporter {
            controller: REPORTER.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            source,
            staging,
            clock,
            policy,
            metrics,
            recorder,
            proof,
            migrations: None,
            children: None,
            quotas: None,
            guard: Arc::new(crate::admission_guard::Guard::not_required()),
            slots: crate::copy_slots::Slots::default(),
            holders: Mutex::default(),
            memory: Mutex::default(),
        }
    }

    /// Whether migration `vmm` may copy from `mine` now, under the policy's copy limits
    /// (lowered by its own `spec.conversion.copyLimits`), counting the migrations the watch shows copying and the grants not shown yet; a grant is
    /// taken when it may ([`crate::copy_slots`]). Without the migrations' watch (a context of
    /// the unit tests), or before it listed, nothing is counted but the grants.
    pub fn copy_slot(
        &self,
        vmm: &ferry_crds::VirtualMachineMigration,
        mine: &crate::copy_slots::Place,
    ) -> crate::copy_slots::Verdict {
        use crate::copy_slots::{Place, holds};
        let own = vmm.spec.conversion.copy_limits.as_ref();
        let limits = self.policy.copy_limits;
        if !limits.within(own).0.any() {
            return crate::copy_slots::Verdict::Free;
        }
        let uid = vmm.metadata.uid.as_deref().unwrap_or_default();
        let now = std::time::Instant::now();
        let holders = {
            let mut seen = self.holders.lock().unwrap_or_else(|p| p.into_inner());
            match seen.as_ref() {
                Some((at, h)) if now.duration_since(*at) < HOLDERS_FRESH_FOR => h.clone(),
                _ => {
                    let h: Holders = Arc::new(
                        self.migrations
                            .as_ref()
                            .map(|m| {
                                m.store
                                    .state()
                                    .iter()
                                    .filter(|v| holds(v))
                                    .filter_map(|v| Some((v.metadata.uid.clone()?, Place::of(v)?)))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    );
                    *seen = Some((now, h.clone()));
                    h
                }
            }
        };
        self.slots.take(uid, mine, &holders, (limits, own), now)
    }

    /// This context, reading waves' children from `migrations` (what the migration controller
    /// holds).
    #[must_use]
    pub fn with_migrations(mut self, migrations: crate::migrations::Migrations) -> Self {
        self.migrations = Some(migrations);
        self
    }

    /// This context, observing children through `caches` (the migration controller's watches).
    #[must_use]
    pub fn with_child_caches(mut self, caches: Caches) -> Self {
        self.children = Some(caches);
        self
    }

    /// What the ResourceQuotas of `ns` have left, from the watch of them once it has listed;
    /// `None` without that watch or before its first list.
    pub fn cached_quotas(&self, ns: &str) -> Option<Vec<crate::quota::QuotaLeft>> {
        let store = self
            .quotas
            .as_ref()
            .filter(|s| crate::caches::is_ready(s))?;
        let quotas = store.state();
        let here = quotas
            .iter()
            .filter(|q| q.metadata.namespace.as_deref() == Some(ns));
        Some(here.map(|q| crate::quota::QuotaLeft::of(q)).collect())
    }

    /// This context, reading ResourceQuotas from `store` (a watch of them).
    #[must_use]
    /// The guard of the admission policies the controller runs under.
    pub fn with_guard(mut self, guard: Arc<crate::admission_guard::Guard>) -> Self {
        self.guard = guard;
        self
    }

    pub fn with_quota_store(
        mut self,
        store: Store<k8s_openapi::api::core::v1::ResourceQuota>,
    ) -> Self {
        self.quotas = Some(store);
        self
    }

    /// The cached copy at `version` of the object `uid` (a migration or a wave) against the
    /// version last known current (by our own write or a fresh read): see [`Cached`].
    pub fn cached(&self, uid: &str, version: Option<&str>) -> Cached {
        self.peek(uid, |m| {
            freshness::compare(version, m.current_version.as_deref())
        })
    }

    /// Whether this process wrote or read the migration `uid` (a version of it is noted): a
    /// cached copy without a status may then be one that lags behind our own write.
    pub fn knows_version(&self, uid: &str) -> bool {
        self.peek(uid, |m| m.current_version.is_some())
    }

    /// Notes `version` as the migration `uid`'s current resourceVersion (`None` forgets it: the
    /// next reconcile reads fresh).
    pub fn note_version(&self, uid: &str, version: Option<String>) {
        self.memo(uid, |m| m.current_version = version);
    }

    /// The releases and cutovers the wave `uid` gave that its cache may not show yet.
    pub fn given(&self, uid: &str) -> Given {
        self.memo(uid, |m| m.given.clone())
    }

    /// The children (names) the wave `uid` created that its cache may not show yet, and when.
    pub fn created(&self, uid: &str) -> HashMap<String, Instant> {
        self.memo(uid, |m| m.created.clone())
    }

    /// Sets what [`Self::created`] answers for the wave `uid`.
    pub fn set_created(&self, uid: &str, created: HashMap<String, Instant>) {
        self.memo(uid, |m| m.created = created);
    }

    /// Sets what [`Self::given`] answers for the wave `uid`.
    pub fn set_given(&self, uid: &str, given: Given) {
        self.memo(uid, |m| m.given = given);
    }

    fn memo<T>(&self, uid: &str, f: impl FnOnce(&mut Memo) -> T) -> T {
        let mut map = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(map.entry(uid.to_owned()).or_default())
    }

    /// Reads the memo of `uid`, a default one when there is none (never makes one: asking
    /// about a settled migration must not grow the memory).
    fn peek<T>(&self, uid: &str, f: impl FnOnce(&Memo) -> T) -> T {
        let map = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match map.get(uid) {
            Some(m) => f(m),
            None => f(&Memo::default()),
        }
    }

    /// Changes the memo of `uid` if there is one (never makes one: a settled migration's
    /// reconciles must not grow the memory).
    fn memo_if_known(&self, uid: &str, f: impl FnOnce(&mut Memo)) {
        let mut map = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(m) = map.get_mut(uid) {
            f(m);
        }
    }

    /// How long ago this controller last wrote the status of `uid`.
    pub fn since_status_write(&self, uid: &str) -> Option<Duration> {
        self.memo(uid, |m| m.status_written.map(|t| t.elapsed()))
    }

    /// Notes a status write for `uid`.
    pub fn note_write(&self, uid: &str) {
        self.memo(uid, |m| m.status_written = Some(Instant::now()));
    }

    /// Counts a failed reconcile of `uid`; returns how many failed in a row before this one.
    pub fn note_failure(&self, uid: &str) -> u32 {
        self.memo(uid, |m| {
            let before = m.failures;
            m.failures = m.failures.saturating_add(1);
            before
        })
    }

    /// A reconcile of `uid` succeeded: the next failure starts the backoff over.
    pub fn note_success(&self, uid: &str) {
        self.memo_if_known(uid, |m| m.failures = 0);
    }

    /// When the wave `uid` last read its children; notes `now` as the new time when `take`.
    pub fn last_looked(&self, uid: &str, take: Option<Instant>) -> Option<Instant> {
        self.memo(uid, |m| {
            let before = m.looked;
            if take.is_some() {
                m.looked = take;
            }
            before
        })
    }

    /// The credentials Secret `name` as this attempt of the migration `uid` read it.
    pub fn remembered_secret(&self, uid: &str, name: &str) -> Option<Arc<Secret>> {
        self.memo(uid, |m| m.secrets.get(name).cloned())
    }

    /// Keeps `secret` (its name, labels and data only) for the rest of the attempt of `uid`.
    pub fn remember_secret(&self, uid: &str, secret: &Secret) {
        let kept = Secret {
            metadata: kube::api::ObjectMeta {
                name: secret.metadata.name.clone(),
                uid: secret.metadata.uid.clone(),
                labels: secret.metadata.labels.clone(),
                ..Default::default()
            },
            data: secret.data.clone(),
            type_: secret.type_.clone(),
            ..Default::default()
        };
        let name = kept.metadata.name.clone().unwrap_or_default();
        self.memo(uid, |m| m.secrets.insert(name, Arc::new(kept)));
    }

    /// Whether this attempt of `uid` found every name it will create free.
    pub fn names_found_free(&self, uid: &str) -> bool {
        self.memo(uid, |m| m.names_free)
    }

    /// Notes that this attempt of `uid` found every name it will create free.
    pub fn note_names_free(&self, uid: &str) {
        self.memo(uid, |m| m.names_free = true);
    }

    /// When this process last looked at the source for the preflight of `uid` at spec
    /// `generation` (none for another generation).
    pub fn preflight_ran(
        &self,
        uid: &str,
        generation: Option<i64>,
    ) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
        self.peek(uid, |m| {
            m.preflight_ran
                .as_ref()
                .filter(|(g, _)| *g == generation)
                .map(|(_, at)| at.clone())
        })
    }

    /// Notes that the preflight of `uid` at spec `generation` looks at the source `now`.
    pub fn note_preflight(
        &self,
        uid: &str,
        generation: Option<i64>,
        now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) {
        self.memo(uid, |m| m.preflight_ran = Some((generation, now)));
    }

    /// Ends what the attempt of `uid` read once: its credentials and its check of the names
    /// (the next use reads them again).
    pub fn forget_attempt(&self, uid: &str) {
        self.memo_if_known(uid, |m| {
            m.secrets.clear();
            m.names_free = false;
        });
    }

    /// Forgets each migration and wave whose uid neither `cached` (taken now) nor the sweep
    /// before has (`uncached` is what that sweep found uncached; this one's replaces it): they
    /// are gone, or settled with nothing left to reconcile. Two sweeps, so that one that entered
    /// a cache and noted something here after `cached` was taken is not forgotten.
    pub fn sweep(
        &self,
        cached: &std::collections::HashSet<String>,
        uncached: &mut std::collections::HashSet<String>,
    ) {
        let mut map = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|uid, _| cached.contains(uid) || !uncached.contains(uid));
        *uncached = map
            .keys()
            .filter(|uid| !cached.contains(*uid))
            .cloned()
            .collect();
    }

    /// Forgets `uid` (its migration is gone).
    pub fn forget(&self, uid: &str) {
        let mut map = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context on a client that reaches nothing (these tests touch only its memory).
    fn offline() -> Context {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let key = ProofKey::from_bytes(&[1; crate::children::proof::KEY_BYTES]).unwrap();
        Context::new(client, Policy::default(), Arc::new(Metrics::default()), key)
    }

    #[tokio::test]
    async fn an_attempts_secret_is_kept_trimmed_per_migration_until_forgotten() {
        let ctx = offline();
        let mut secret = Secret::default();
        secret.metadata.name = Some("creds".into());
        secret.metadata.annotations = Some([("big".to_owned(), "x".repeat(4096))].into());
        secret.data = Some(
            [(
                "password".to_owned(),
                k8s_openapi::ByteString(b"pw".to_vec()),
            )]
            .into(),
        );
        assert!(ctx.remembered_secret("u", "creds").is_none());
        ctx.remember_secret("u", &secret);
        let kept = ctx.remembered_secret("u", "creds").unwrap();
        assert_eq!(kept.data, secret.data);
        assert!(
            kept.metadata.annotations.is_none(),
            "only what binding reads"
        );
        assert!(
            ctx.remembered_secret("v", "creds").is_none(),
            "per migration"
        );
        ctx.forget_attempt("u");
        assert!(
            ctx.remembered_secret("u", "creds").is_none(),
            "read again next attempt"
        );
        ctx.forget_attempt("never-seen");
        assert!(
            ctx.memory.lock().unwrap().get("never-seen").is_none(),
            "forgetting makes no entry"
        );
    }

    #[tokio::test]
    async fn a_cached_copy_is_placed_against_the_version_last_written_or_read() {
        let ctx = offline();
        assert_eq!(
            ctx.cached("u", Some("7")),
            Cached::Unknown,
            "nothing known after a start"
        );
        ctx.note_version("u", Some("7".to_owned()));
        assert_eq!(ctx.cached("u", Some("7")), Cached::Current);
        assert_eq!(
            ctx.cached("u", Some("6")),
            Cached::Behind,
            "a cache behind our write"
        );
        assert_eq!(
            ctx.cached("u", Some("8")),
            Cached::Ahead,
            "someone else wrote"
        );
        assert_eq!(ctx.cached("u", None), Cached::Unknown);
        assert_eq!(ctx.cached("v", Some("7")), Cached::Unknown, "per object");
        ctx.note_version("u", None);
        assert_eq!(
            ctx.cached("u", Some("7")),
            Cached::Unknown,
            "forgotten after a conflict"
        );
        ctx.note_version("u", Some("9".to_owned()));
        ctx.forget("u");
        assert_eq!(
            ctx.cached("u", Some("9")),
            Cached::Unknown,
            "forgotten with the object"
        );
    }

    #[tokio::test]
    async fn a_sweep_forgets_what_two_sweeps_in_a_row_found_uncached() {
        let ctx = offline();
        for uid in ["in-flight", "settled", "new"] {
            ctx.note_version(uid, Some("1".into()));
        }
        let mut uncached = std::collections::HashSet::new();
        let cached: std::collections::HashSet<String> = ["in-flight".to_owned()].into();
        ctx.sweep(&cached, &mut uncached);
        assert!(
            ctx.knows_version("settled") && ctx.knows_version("new"),
            "one sweep forgets nothing: it may have been taken before they were cached"
        );
        let cached: std::collections::HashSet<String> =
            ["in-flight".to_owned(), "new".to_owned()].into();
        ctx.sweep(&cached, &mut uncached);
        assert!(!ctx.knows_version("settled"), "uncached twice: forgotten");
        assert!(ctx.knows_version("in-flight") && ctx.knows_version("new"));
    }
}
