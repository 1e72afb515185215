//! The election's I/O: read the Lease, act on [`decide`]'s answer with an optimistic-concurrency
//! update, extend the fence on success; wait as a standby, renew as the leader, release on a
//! graceful stop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::decide::{Decision, Observed, Record, decide};
use super::fence::Fence;
use crate::Result;

/// Where the Lease is and how it is held.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// Name of the Lease.
    pub lease_name: String,
    /// Its namespace.
    pub namespace: String,
    /// This candidate's identity (the pod name in a cluster).
    pub identity: String,
    /// How long a lease that stopped being renewed keeps others waiting.
    pub lease_duration: Duration,
    /// How long after sending a renewal the leader may still write without a newer one; below
    /// `lease_duration`, so a leader stops writing before anyone else may take over.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby looks again (a standby also looks at once
    /// when the Lease changes).
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// Checks the timings' order: `retry_period < renew_deadline < lease_duration`.
    ///
    /// # Errors
    /// A message naming the flags out of order.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.lease_duration.as_secs() < 1 {
            return Err("--leader-elect-lease-duration must be at least 1s".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "--leader-elect-renew-deadline ({:?}) must be shorter than --leader-elect-lease-duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(format!(
                "--leader-elect-retry-period ({:?}) must be shorter than --leader-elect-renew-deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}

/// Why leadership ended without being given up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// No renewal succeeded within the renew deadline (frozen, or cut off from the apiserver).
    #[error("no renewal of the lease succeeded within the renew deadline")]
    Expired,
    /// Another candidate holds the lease.
    #[error("the lease is held by {0}")]
    TakenBy(String),
}

/// One candidate.
pub struct Elector {
    cfg: ElectionConfig,
    api: Api<Lease>,
    fence: Fence,
    observed: Observed,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn micro_now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Elector {
    /// A candidate writing the Lease through `client`, which must not be behind `fence` (a
    /// leader must be able to renew, and to release after it stopped writing).
    pub fn new(client: Client, cfg: ElectionConfig, fence: Fence) -> Self {
        let api = Api::namespaced(client, &cfg.namespace);
        Self {
            cfg,
            api,
            fence,
            observed: Observed::default(),
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    /// One round: read the Lease, take or renew it when [`decide`] says so. Returns whether we
    /// hold it; on success the fence is extended to the renew deadline counted from before the
    /// read.
    ///
    /// # Errors
    /// Kubernetes API failures other than a lost race (a conflict is `Ok(false)`).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool> {
        let sent = Instant::now();
        let me = self.cfg.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.cfg.lease_name).await? else {
            let spec = self.spec(None, 0);
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => Ok(self.won(&l, sent)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observed.note(Record::of(&spec), Instant::now());
        let transitions = match decide(&self.observed, &me, Instant::now()) {
            Decision::Wait { holder, expires_in } => {
                debug!(%holder, ?expires_in, "lease held by another");
                return Ok(false);
            }
            Decision::Renew => spec.lease_transitions.unwrap_or(0),
            Decision::Take { transitions } => {
                info!(previous = ?spec.holder_identity, "taking the lease");
                transitions
            }
        };
        let acquired = (spec.holder_identity.as_deref() == Some(me.as_str()))
            .then(|| spec.acquire_time.clone())
            .flatten();
        lease.spec = Some(self.spec(acquired, transitions));
        // The update carries the resourceVersion read: a candidate racing us gets a conflict.
        match self
            .api
            .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => Ok(self.won(&l, sent)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn spec(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired.unwrap_or_else(micro_now)),
            renew_time: Some(micro_now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn won(&mut self, lease: &Lease, sent: Instant) -> bool {
        if let Some(spec) = &lease.spec {
            self.observed.note(Record::of(spec), Instant::now());
        }
        self.fence.extend(sent + self.cfg.renew_deadline);
        true
    }

    /// Waits until this candidate holds the lease: looks every retry period and whenever the
    /// Lease changes (a released lease is taken at once).
    pub async fn acquire(&mut self) {
        let changed = Arc::new(Notify::new());
        let watch = tokio::spawn(notify_changes(
            self.api.clone(),
            self.cfg.lease_name.clone(),
            changed.clone(),
        ));
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => warn!(error = %e, "reading the lease"),
            }
            tokio::select! {
                () = changed.notified() => {},
                () = tokio::time::sleep(self.cfg.retry_period) => {},
            }
        }
        watch.abort();
        info!(identity = %self.cfg.identity, lease = %self.cfg.lease_name, "leading");
    }

    /// Renews every retry period while leading; returns when leadership is lost. The fence is
    /// closed by then (it closes by itself at the renew deadline in any case).
    pub async fn hold(&mut self) -> Lost {
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            let remaining = self
                .fence_limit()
                .and_then(|u| u.checked_duration_since(Instant::now()))
                .filter(|d| !d.is_zero());
            let Some(remaining) = remaining else {
                self.fence.close();
                return Lost::Expired;
            };
            match tokio::time::timeout(remaining, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    self.fence.close();
                    let holder = self
                        .observed
                        .record
                        .as_ref()
                        .map(|r| r.holder.clone())
                        .unwrap_or_default();
                    return Lost::TakenBy(holder);
                }
                Ok(Err(e)) => warn!(error = %e, "renewing the lease"),
                Err(_) => {
                    self.fence.close();
                    return Lost::Expired;
                }
            }
        }
    }

    fn fence_limit(&self) -> Option<Instant> {
        // The fence is the one place the limit lives.
        self.fence.limit()
    }

    /// Gives the lease up (after every writer stopped): the fence closes, then the Lease is
    /// written with no holder so a standby takes it at once.
    pub async fn release(&mut self) {
        self.fence.close();
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.lease_name).await else {
            return;
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(micro_now());
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.cfg.lease_name, "lease released"),
            Err(e) => warn!(error = %e, "releasing the lease"),
        }
    }
}

/// Notifies on every change of the Lease `name` (a standby's cue to look again at once).
async fn notify_changes(api: Api<Lease>, name: String, changed: Arc<Notify>) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api, cfg));
    while let Some(ev) = events.next().await {
        if ev.is_ok() {
            changed.notify_one();
        }
    }
}
