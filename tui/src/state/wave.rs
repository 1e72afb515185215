//! A wave as the wave strip sees it.

use std::sync::Arc;

use ferry_crds::{MigrationWave, WaveCounts, WavePhase};
use kube::ResourceExt;

use super::{ClusterId, ObjKey, Timestamp};

/// One line of the wave strip.
#[derive(Clone, Debug)]
pub struct WaveRow {
    /// Namespace and name.
    pub key: ObjKey,
    /// `status.phase`.
    pub phase: WavePhase,
    /// `status.total`, else the number of VMs in the spec.
    pub total: i32,
    /// `status.counts`.
    pub counts: WaveCounts,
    /// `status.inFlight`.
    pub in_flight: i32,
    /// `spec.maxInFlight`.
    pub max_in_flight: i32,
    /// `status.throughputPerHour`.
    pub throughput_per_hour: Option<f64>,
    /// `status.etaSeconds`.
    pub eta_seconds: Option<i64>,
    /// `status.startedAt`.
    pub started_at: Option<Timestamp>,
    /// `spec.paused`.
    pub paused: bool,
    /// `spec.cancel`.
    pub cancel: bool,
    /// `spec.retry`.
    pub retry: i64,
    /// Being deleted.
    pub deleting: bool,
    /// The trimmed object.
    pub obj: Arc<MigrationWave>,
}

impl WaveRow {
    /// The row of a (trimmed) wave of `cluster`.
    pub fn from_object(cluster: ClusterId, obj: MigrationWave) -> WaveRow {
        let status = obj.status.clone().unwrap_or_default();
        let total = if status.total > 0 {
            status.total
        } else {
            obj.spec.vms.len() as i32
        };
        WaveRow {
            key: ObjKey::at(cluster, obj.namespace().unwrap_or_default(), obj.name_any()),
            phase: status.phase,
            total,
            counts: status.counts,
            in_flight: status.in_flight,
            max_in_flight: obj.spec.max_in_flight,
            throughput_per_hour: status.throughput_per_hour,
            eta_seconds: status.eta_seconds,
            started_at: status.started_at.map(|t| t.0),
            paused: obj.spec.paused,
            cancel: obj.spec.cancel,
            retry: obj.spec.retry,
            deleting: obj.metadata.deletion_timestamp.is_some(),
            obj: Arc::new(obj),
        }
    }

    /// Migrations finished (succeeded, failed or cancelled).
    pub fn done(&self) -> i32 {
        self.counts.finished()
    }

    /// Finished share in percent (0 for an empty wave).
    pub fn percent_done(&self) -> f64 {
        if self.total > 0 {
            f64::from(self.done()) * 100.0 / f64::from(self.total)
        } else {
            0.0
        }
    }
}
