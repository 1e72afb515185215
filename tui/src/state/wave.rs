//! A wave as the wave strip sees it.

use std::sync::Arc;

use ferry_crds::condition::WaveConditionType;
use ferry_crds::{MigrationWave, Reason, WaveCounts, WavePhase, WavePreflight};
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
    /// Why VMs of the wave get no migration, if any.
    pub refused: Option<Refused>,
    /// `status.preflight`: how many of its migrations are ready, blocked or carry warnings
    /// (absent until one was preflighted; a paused wave preflights before it starts).
    pub preflight: Option<WavePreflight>,
    /// The trimmed object.
    pub obj: Arc<MigrationWave>,
}

/// Why VMs of a wave get no migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// This many VMs (as `status.collisions` lists them) collide on a migration name.
    Collisions(usize),
    /// `spec.selector` chose more VMs than one wave may hold.
    SelectorTooBroad,
}

impl Refused {
    fn of(obj: &MigrationWave) -> Option<Refused> {
        let status = obj.status.as_ref()?;
        let degraded = status.condition(WaveConditionType::Degraded);
        if degraded.is_some_and(|c| c.reason == Reason::SelectorTooBroad) {
            return Some(Refused::SelectorTooBroad);
        }
        (!status.collisions.is_empty()).then_some(Refused::Collisions(status.collisions.len()))
    }
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
            refused: Refused::of(&obj),
            preflight: status.preflight,
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::{t0, wave};
    use ferry_crds::{ConditionStatus, MigrationWaveStatus, WaveCollision, condition};

    #[test]
    fn a_wave_shows_why_vms_get_no_migration() {
        let mut w = wave("w", 2);
        assert_eq!(WaveRow::from_object(ClusterId(0), w.clone()).refused, None);
        w.status = Some(MigrationWaveStatus {
            collisions: vec![WaveCollision::default(); 2],
            ..MigrationWaveStatus::default()
        });
        assert_eq!(
            WaveRow::from_object(ClusterId(0), w.clone()).refused,
            Some(Refused::Collisions(2))
        );
        let status = w.status.as_mut().unwrap();
        condition::set_condition(
            &mut status.conditions,
            WaveConditionType::Degraded,
            ConditionStatus::True,
            Reason::SelectorTooBroad,
            "",
            None,
            &t0(),
        );
        assert_eq!(
            WaveRow::from_object(ClusterId(0), w).refused,
            Some(Refused::SelectorTooBroad)
        );
    }
}
