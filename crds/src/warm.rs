//! Warm migration: the disks copied while the source runs (a snapshot, its disks read; changed
//! block tracking tells what changed since), then the source powered off for the last changes
//! only — the cutover.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a migration copies the source's disks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MigrationMode {
    /// The source is powered off for the whole copy.
    #[default]
    Cold,
    /// The disks are copied while the source runs (a snapshot of it, changed block tracking
    /// on); at the cutover the source is powered off and only what changed since is copied.
    Warm,
}

/// When a warm migration cuts over: the source powered off, the last changes copied, the VM
/// created and started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmSpec {
    /// Cut over at this time (RFC 3339), once the first copy is imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::target::bounded::<Time>")]
    pub cutover_at: Option<Time>,
    /// Set to true to cut over now (once the first copy is imported). Cannot be taken back once
    /// the cutover has begun: the source is then powered off.
    #[serde(default)]
    pub cutover: bool,
    /// Seconds between precopy rounds while the migration waits for its cutover: each round
    /// snapshots the running source and copies only what changed since the round before, so
    /// that the cutover's own copy stays small. Default 3600 (Forklift's default precopy
    /// interval is 60 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 86400))]
    pub precopy_interval_seconds: Option<i32>,
}

/// Seconds between precopy rounds when `precopyIntervalSeconds` is not set.
pub const DEFAULT_PRECOPY_INTERVAL_SECONDS: i32 = 3600;

impl WarmSpec {
    /// Seconds between precopy rounds.
    pub fn precopy_interval(&self) -> std::time::Duration {
        let secs = self
            .precopy_interval_seconds
            .unwrap_or(DEFAULT_PRECOPY_INTERVAL_SECONDS)
            .max(1);
        std::time::Duration::from_secs(u64::from(secs.unsigned_abs()))
    }

    /// Whether the cutover is due at `now`.
    pub fn cutover_due(&self, now: &Time) -> bool {
        self.cutover || self.cutover_at.as_ref().is_some_and(|at| at.0 <= now.0)
    }
}

/// A snapshot ferry took of the source, by the name it gave it (which carries the migration's
/// uid and the round) and, once known, its moref.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// The name ferry gave it: ferry's prefix, the migration's uid and the attempt.
    pub name: String,
    /// Its managed object reference in vSphere, once taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moref: Option<String>,
    /// When ferry set out to take it (a precopy round's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
}

/// Where a warm migration stands.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmStatus {
    /// Copies done while the source ran (the first, whole, is round 1).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub rounds: i32,
    /// The snapshot ferry took and has not removed yet; cleanup removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRecord>,
    /// When the last round's snapshot was taken: changes since are the next copy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_round_at: Option<Time>,
    /// When ferry began the cutover (it powers the source off from then on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutover_started_at: Option<Time>,
    /// Bytes the cutover copied: what changed since the last round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutover_bytes: Option<i64>,
    /// Bytes the last precopy round after the first copied: what changed between two rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delta_bytes: Option<i64>,
    /// How fast the guest changes its disks: the last delta's bytes over the time between the
    /// two snapshots it lies between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_rate_bytes_per_second: Option<i64>,
    /// When the next precopy round starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_round_at: Option<Time>,
    /// The cutover's copy, predicted from the last round: the changes expected by then (at the
    /// measured rate) at the last round's measured speed, Job start included. The guest's
    /// shutdown and the VM's boot come on top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_cutover_copy_seconds: Option<i64>,
    /// The cutover's downtime up to the VM's boot, predicted with the guest's shutdown at its
    /// longest: the grace ferry gives a guest whose VMware Tools ran before it powers it off
    /// hard (`spec.source.power.shutdownGracePeriodSeconds`; none without Tools or with a grace
    /// of 0), then the predicted copy. The VM's boot to VirtualMachineInstance Running comes on
    /// top; the migration's report shows the downtime measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_downtime_seconds: Option<i64>,
    /// Why the last precopy round failed, when it did (the next round copies its changes
    /// again: the change ids move on only with a round that completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_round_failure: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn the_cutover_is_due_on_the_intent_or_at_its_time() {
        let now = at(1_000);
        assert!(!WarmSpec::default().cutover_due(&now));
        let asked = WarmSpec {
            cutover: true,
            ..WarmSpec::default()
        };
        assert!(asked.cutover_due(&now));
        let later = WarmSpec {
            cutover_at: Some(at(2_000)),
            ..WarmSpec::default()
        };
        assert!(!later.cutover_due(&now));
        assert!(later.cutover_due(&at(2_000)));
    }
}
