//! The status is written at most once per reconcile, in the failure paths too. Reconciles run
//! one at a time, in process, against the lab's API server, with vSphere and S3 ports that fail
//! on demand; the controller's own write metrics count what each reconcile wrote.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::Env;
use ferry_controller::context::{Context, Ports, SystemClock};
use ferry_controller::metrics::{Metrics, WriteLabels};
use ferry_controller::policy::Policy;
use ferry_controller::ports::{
    Discovered, SourceApi, SourceLogin, StagedObject, StagingApi, StagingLogin,
};
use ferry_controller::problem::Problem;
use ferry_controller::reconcile;
use ferry_crds::{
    DiscoveredDisk, DiscoveredSource, Phase, PowerState, Reason, ToolsState,
    VirtualMachineMigration, VmLookup,
};
use futures::future::BoxFuture;

/// A vSphere that finds one VM in `power` and answers a power-off with `power_off`.
struct Source {
    found: Result<PowerState, Problem>,
    power_off: Result<(), Problem>,
}

impl SourceApi for Source {
    fn discover<'a>(
        &'a self,
        _: &'a SourceLogin,
        _: VmLookup<'a>,
    ) -> BoxFuture<'a, Result<Discovered, Problem>> {
        let found = self.found.clone().map(|power| Discovered {
            source: DiscoveredSource {
                name: Some("vm".into()),
                moref: Some("vm-1".into()),
                power_state: Some(power),
                disks: vec![DiscoveredDisk {
                    key: 2000,
                    datastore_path: "[ds] vm/vm.vmdk".into(),
                    capacity_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            },
            layout_problems: vec![],
            disks_reported: None,
            unread: vec![],
            state: None,
        });
        Box::pin(async move { found })
    }

    fn power<'a>(
        &'a self,
        _: &'a SourceLogin,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(PowerState, ToolsState), Problem>> {
        let r = self
            .found
            .clone()
            .map(|power| (power, ToolsState::NotInstalled));
        Box::pin(async move { r })
    }

    fn shutdown_guest<'a>(
        &'a self,
        _: &'a SourceLogin,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        // Tools never run here: the decision never asks the guest.
        Box::pin(async {
            Err(Problem::permanent(
                Reason::PowerOffFailed,
                "ToolsUnavailable",
            ))
        })
    }

    fn power_off<'a>(
        &'a self,
        _: &'a SourceLogin,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        let r = self.power_off.clone();
        Box::pin(async move { r })
    }

    fn power_on<'a>(
        &'a self,
        _: &'a SourceLogin,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async { Ok(()) })
    }
}

/// An S3 whose bucket is there and whose HEAD answers `head`.
struct Staging {
    head: Result<Option<StagedObject>, Problem>,
}

impl StagingApi for Staging {
    fn check_bucket<'a>(&'a self, _: &'a StagingLogin) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async { Ok(()) })
    }

    fn head<'a>(
        &'a self,
        _: &'a StagingLogin,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<StagedObject>, Problem>> {
        let r = self.head.clone();
        Box::pin(async move { r })
    }

    fn delete<'a>(&'a self, _: &'a StagingLogin, _: &'a str) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async { Ok(()) })
    }
}

fn status_writes(m: &Metrics) -> u64 {
    m.writes
        .get_or_create(&WriteLabels {
            verb: "status".into(),
            kind: "VirtualMachineMigration".into(),
        })
        .get()
}

struct Driver {
    env: Env,
    ctx: Arc<Context>,
    /// Status writes of every reconcile so far.
    writes: Vec<u64>,
}

impl Driver {
    async fn new(prefix: &str, source: Source, staging: Staging) -> Driver {
        let env = Env::new(prefix, 1).await;
        let client = env.lab.client().await.unwrap();
        let policy = Policy {
            converter_image: ferry_harness::LAB_CONVERTER_IMAGE.to_owned(),
            max_transient_retries: 2,
            ..Policy::default()
        };
        let proof = ferry_controller::children::proof::ProofKey::from_bytes(&[5; 32]).unwrap();
        let ctx = Arc::new(Context::with_ports(
            client,
            policy,
            Arc::new(Metrics::default()),
            Ports {
                source: Arc::new(source),
                staging: Arc::new(staging),
                clock: Arc::new(SystemClock),
                proof,
            },
        ));
        Driver {
            env,
            ctx,
            writes: vec![],
        }
    }

    /// One reconcile of `name`, as the work queue would run it; returns the migration after it.
    async fn reconcile(&mut self, name: &str) -> VirtualMachineMigration {
        let before = status_writes(&self.ctx.metrics);
        let obj = self.env.get(name).await;
        // Errors (a conflict) are the work queue's business; the count is what matters here.
        let _ = reconcile::reconcile(Arc::new(obj), self.ctx.clone()).await;
        self.writes.push(status_writes(&self.ctx.metrics) - before);
        self.env.get(name).await
    }

    /// Reconciles until `done` holds (at most `max` times).
    async fn until(
        &mut self,
        name: &str,
        max: usize,
        done: impl Fn(&VirtualMachineMigration) -> bool,
    ) -> VirtualMachineMigration {
        for _ in 0..max {
            let v = self.reconcile(name).await;
            if done(&v) {
                return v;
            }
        }
        panic!(
            "{name}: not done after {max} reconciles; writes per reconcile {:?}",
            self.writes
        );
    }

    fn assert_at_most_one_write_each(&self, what: &str) {
        assert!(
            self.writes.iter().all(|w| *w <= 1),
            "{what}: status writes per reconcile {:?}",
            self.writes
        );
    }
}

fn failed_with(v: &VirtualMachineMigration) -> Option<Reason> {
    (v.phase() == Phase::Failed)
        .then(|| v.status.as_ref()?.last_failure.as_ref().map(|f| f.reason))
        .flatten()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transient_source_failure_is_retried_then_fails_with_one_write_per_reconcile() {
    let down = Problem::transient(Reason::EndpointUnreachable, "connection refused");
    let mut d = Driver::new(
        "writes-transient",
        Source {
            found: Err(down),
            power_off: Ok(()),
        },
        Staging { head: Ok(None) },
    )
    .await;
    d.env.create(&d.env.migration("m")).await;
    let v = d.until("m", 12, |v| v.phase() == Phase::Failed).await;
    assert_eq!(failed_with(&v), Some(Reason::EndpointUnreachable));
    d.assert_at_most_one_write_each("transient source");
    // The start with its first try's retry (one reconcile: Preparing begins as the migration
    // starts), the second retry, then the failure: each a write of its own.
    assert_eq!(d.writes.iter().sum::<u64>(), 3, "{:?}", d.writes);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_power_off_is_decided_purely_and_written_once() {
    let refused = Problem::permanent(Reason::PowerOffFailed, "the host refused");
    let mut d = Driver::new(
        "writes-poweroff",
        Source {
            found: Ok(PowerState::PoweredOn),
            power_off: Err(refused),
        },
        Staging { head: Ok(None) },
    )
    .await;
    d.env.create(&d.env.migration("m")).await;
    let v = d.until("m", 8, |v| v.phase() == Phase::Failed).await;
    assert_eq!(failed_with(&v), Some(Reason::PowerOffFailed));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!((f.phase, f.retriable), (Phase::Preparing, false));
    assert_eq!(
        v.status
            .as_ref()
            .unwrap()
            .source
            .as_ref()
            .unwrap()
            .power_state,
        Some(PowerState::PoweredOn),
        "the original power state was recorded before the power-off was tried"
    );
    d.assert_at_most_one_write_each("failed power-off");
    assert_eq!(
        *d.writes.last().unwrap(),
        1,
        "the failing reconcile writes its outcome"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn staging_down_in_converting_and_a_cancel_each_write_once() {
    let down = Problem::transient(Reason::StagingUnavailable, "503 Slow Down");
    let mut d = Driver::new(
        "writes-staging",
        Source {
            found: Ok(PowerState::PoweredOff),
            power_off: Ok(()),
        },
        Staging { head: Err(down) },
    )
    .await;
    d.env.create(&d.env.migration("m")).await;
    let v = d
        .until("m", 8, |v| {
            v.phase() == Phase::Converting && v.status.as_ref().is_some_and(|s| s.retries >= 2)
        })
        .await;
    assert_eq!(v.phase(), Phase::Converting);
    d.env
        .patch_spec("m", serde_json::json!({"cancel": true}))
        .await;
    let v = d.until("m", 4, |v| v.phase() == Phase::Cancelled).await;
    assert_eq!(v.phase(), Phase::Cancelled);
    d.assert_at_most_one_write_each("staging down, then cancel");
    // A settled migration costs nothing more.
    let before = d.writes.len();
    d.reconcile("m").await;
    assert_eq!(d.writes[before..], [0]);
}
