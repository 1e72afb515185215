//! A wave as the wave strip sees it.

use std::sync::Arc;

use ferry_crds::condition::WaveConditionType;
use ferry_crds::{MigrationMode, MigrationWave, Reason, WaveCounts, WavePhase, WavePreflight};
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
    /// `status.forecast.outsideWindow`: held migrations its `spec.window` keeps from starting.
    pub outside_window: i32,
    /// `status.forecast.atRisk`: migrations the forecast ends past the window's end.
    pub at_risk: i32,
    /// `status.forecast.windowShort` is said: before its window opens, the wave does not fit it.
    pub does_not_fit: bool,
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
    /// A warm wave's (`spec.template.mode: Warm`) cutover; `None` for a cold wave.
    pub warm: Option<WarmWave>,
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

/// A warm wave's cutover as its status and spec say: how many of its migrations are precopied
/// and waiting for it, and when it comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmWave {
    /// `status.waitingForCutover`: migrations copied while their VMs run, waiting for the
    /// wave's cutover.
    pub waiting: i32,
    /// `spec.warm.cutover`: the operator asked for the cutover now.
    pub asked: bool,
    /// `spec.warm.cutoverAt`: the cutover planned at this time.
    pub at: Option<Timestamp>,
}

/// When a warm wave cuts over, seen at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaveCutover {
    /// Neither asked for nor planned.
    NotSet,
    /// Planned at `at`, `in_secs` seconds from now.
    At {
        /// `spec.warm.cutoverAt`.
        at: Timestamp,
        /// Seconds left (more than 0).
        in_secs: i64,
    },
    /// Asked for, or its time has come: the wave cuts its waiting migrations over.
    Now,
}

impl WarmWave {
    fn of(obj: &MigrationWave) -> Option<WarmWave> {
        if obj.spec.template.mode != MigrationMode::Warm {
            return None;
        }
        let spec = obj.spec.warm.clone().unwrap_or_default();
        Some(WarmWave {
            waiting: obj.status.as_ref().map_or(0, |s| s.waiting_for_cutover),
            asked: spec.cutover,
            at: spec.cutover_at.map(|t| t.0),
        })
    }

    /// The cutover at `now`: due as the wave controller sees it (`WarmSpec::cutover_due`), else
    /// planned with the time left, else not set. Pure.
    pub fn cutover(&self, now: Timestamp) -> WaveCutover {
        if self.asked {
            return WaveCutover::Now;
        }
        match self.at {
            Some(at) if at > now => WaveCutover::At {
                at,
                in_secs: at.as_second().saturating_sub(now.as_second()).max(1),
            },
            Some(_) => WaveCutover::Now,
            None => WaveCutover::NotSet,
        }
    }
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
            outside_window: status.forecast.as_ref().map_or(0, |f| f.outside_window),
            at_risk: status.forecast.as_ref().map_or(0, |f| f.at_risk),
            does_not_fit: status
                .forecast
                .as_ref()
                .is_some_and(|f| !f.window_short.is_empty()),
            paused: obj.spec.paused,
            cancel: obj.spec.cancel,
            retry: obj.spec.retry,
            deleting: obj.metadata.deletion_timestamp.is_some(),
            refused: Refused::of(&obj),
            preflight: status.preflight,
            warm: WarmWave::of(&obj),
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
    use ferry_crds::fixtures::{t0, ts, wave};
    use ferry_crds::{ConditionStatus, MigrationWaveStatus, WaveCollision, condition};

    #[test]
    fn a_warm_wave_cuts_over_when_asked_or_due_and_counts_down_until_then() {
        let mut w = wave("w", 2);
        assert_eq!(
            WaveRow::from_object(ClusterId(0), w.clone()).warm,
            None,
            "cold"
        );
        w.spec.template.mode = MigrationMode::Warm;
        let row = |w: &MigrationWave| WaveRow::from_object(ClusterId(0), w.clone()).warm.unwrap();
        let now = ts(3600).0;
        assert_eq!(row(&w).waiting, 0, "no status yet");
        assert_eq!(row(&w).cutover(now), WaveCutover::NotSet);
        w.status = Some(MigrationWaveStatus {
            waiting_for_cutover: 2,
            ..MigrationWaveStatus::default()
        });
        w.spec.warm = Some(ferry_crds::WarmSpec {
            cutover_at: Some(ts(3600 + 7980)),
            ..Default::default()
        });
        assert_eq!(row(&w).waiting, 2);
        let cases = [
            (
                now,
                WaveCutover::At {
                    at: ts(3600 + 7980).0,
                    in_secs: 7980,
                },
            ),
            (
                ts(3600 + 7979).0,
                WaveCutover::At {
                    at: ts(3600 + 7980).0,
                    in_secs: 1,
                },
            ),
            (ts(3600 + 7980).0, WaveCutover::Now),
            (ts(3600 + 9000).0, WaveCutover::Now),
        ];
        for (at, want) in cases {
            assert_eq!(row(&w).cutover(at), want, "{at}");
        }
        w.spec.warm.as_mut().unwrap().cutover = true;
        assert_eq!(
            row(&w).cutover(now),
            WaveCutover::Now,
            "asked before its time"
        );
        // Each answer is the controller's own rule.
        for (at, _) in cases {
            let spec = w.spec.warm.clone().unwrap();
            for asked in [false, true] {
                let spec = ferry_crds::WarmSpec {
                    cutover: asked,
                    ..spec.clone()
                };
                let mut o = w.clone();
                o.spec.warm = Some(spec.clone());
                let due =
                    spec.cutover_due(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
                assert_eq!(
                    row(&o).cutover(at) == WaveCutover::Now,
                    due,
                    "{at} asked {asked}"
                );
            }
        }
    }

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
