//! Prometheus metrics of the controller (prometheus-client), served on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set with one `controller` label (`migration` or `wave`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// Which controller.
    pub controller: String,
}

/// Label set of a failed reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Which controller.
    pub controller: String,
    /// `Error::metric_label()`.
    pub error: String,
}

/// Label set of an API write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `status`, `create`, `delete`, `patch`, `event`, `finalizer`.
    pub verb: String,
    /// Kind written.
    pub kind: String,
}

/// Label set of a read of a child through the watch caches.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheReadLabels {
    /// Kind read.
    pub kind: String,
    /// [`CacheRead::label`].
    pub result: String,
}

/// How a read by name was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheRead {
    /// By the watch cache.
    Hit,
    /// By the API: the cache did not show the object (a stub, or one the migration recorded).
    Miss,
    /// Absent by the watch cache: not shown, and never made by the migration.
    Absent,
    /// By the API: the kind has no cache (Secrets, ConfigMaps, claims).
    Uncached,
}

impl CacheRead {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            CacheRead::Hit => "hit",
            CacheRead::Miss => "miss",
            CacheRead::Absent => "absent",
            CacheRead::Uncached => "uncached",
        }
    }
}

/// Label set of the children a watch cache holds, by how much of each it keeps.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CachedLabels {
    /// Kind held.
    pub kind: String,
    /// `whole` (a child in flight, as decisions read it), `metadata` (a released child of a
    /// migration handed over) or `stub` (no migration the controller holds).
    pub form: String,
}

/// Label set of the migrations the watch cache holds, by form.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FormLabel {
    /// `whole` or `settled`.
    pub form: String,
}

/// Label set of a phase duration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// The phase left.
    pub phase: String,
}

/// Every metric of the controller.
#[derive(Debug)]
pub struct Metrics {
    /// Reconciles run.
    pub reconciles: Family<ControllerLabel, Counter>,
    /// Reconciles that failed, by error label.
    pub errors: Family<ErrorLabels, Counter>,
    /// Writes to the Kubernetes API, by verb and kind.
    pub writes: Family<WriteLabels, Counter>,
    /// Seconds spent in each phase, observed when it is left.
    pub phase_seconds: Family<PhaseLabel, Histogram>,
    /// Seconds per reconcile.
    pub reconcile_seconds: Histogram,
    /// Seconds per wave reconcile.
    pub wave_reconcile_seconds: Histogram,
    /// 1 while this instance leads (always 1 without leader election), 0 as a standby.
    pub leader: Gauge,
    /// 1 while ferry's admission policies are in force, 0 while they are not (work held back),
    /// -1 when they are not required (`--admission-policies not-required`) or not looked at yet.
    pub admission_policies_in_force: Gauge,
    /// Writes the fence refused because leadership was not surely held.
    pub fenced_writes: Counter,
    /// Requests to the Kubernetes API, by verb (under leader election, where the client is
    /// built by the controller).
    pub requests: Family<crate::client::RequestLabels, Counter>,
    /// Reads of children by name, answered by a watch cache or not.
    pub cache_reads: Family<CacheReadLabels, Counter>,
    /// Reconciles of a migration that used the cached object (it was the version last known
    /// current) or read it fresh.
    pub migration_reads: Family<CacheReadLabels, Counter>,
    /// Lists of the vCenter inventory made to resolve a wave's `spec.selector`.
    pub wave_inventory_lists: Counter,
    /// Calls to vSphere (a login, a look at a VM, a power operation, a snapshot: each one or a
    /// few requests to vCenter), by every migration and wave.
    pub vsphere_calls: Counter,
    /// Children the watch caches hold, by kind and form (refreshed every few seconds).
    pub cached_children: Family<CachedLabels, Gauge>,
    /// Migrations the watch cache holds, by form: `whole` or `settled` (cut down, see
    /// `reconcile::settled`).
    pub cached_migrations: Family<FormLabel, Gauge>,
    registry: Registry,
}

fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let admission_policies_in_force = Gauge::default();
        // Not looked at yet.
        admission_policies_in_force.set(-1);
        let mut metrics = Self {
            reconciles: Family::default(),
            errors: Family::default(),
            writes: Family::default(),
            phase_seconds: Family::new_with_constructor(phase_histogram as fn() -> Histogram),
            reconcile_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            wave_reconcile_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            leader: Gauge::default(),
            admission_policies_in_force,
            fenced_writes: Counter::default(),
            requests: Family::default(),
            cache_reads: Family::default(),
            migration_reads: Family::default(),
            wave_inventory_lists: Counter::default(),
            vsphere_calls: Counter::default(),
            cached_children: Family::default(),
            cached_migrations: Family::default(),
            registry: Registry::with_prefix("ferry_controller"),
        };
        // In this order in the exposition.
        metrics.register_reconciles();
        metrics.register_leadership();
        metrics.register_reads_and_caches();
        metrics
    }
}

impl Metrics {
    /// The reconciles: how many, their errors and writes, how long they and the phases took.
    fn register_reconciles(&mut self) {
        let registry = &mut self.registry;
        registry.register("reconciles", "Reconciles run", self.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by error",
            self.errors.clone(),
        );
        registry.register(
            "api_writes",
            "Writes to the Kubernetes API, by verb and kind",
            self.writes.clone(),
        );
        registry.register(
            "phase_duration_seconds",
            "Seconds a migration spent in a phase",
            self.phase_seconds.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Seconds per reconcile",
            self.reconcile_seconds.clone(),
        );
        registry.register(
            "wave_reconcile_duration_seconds",
            "Seconds per wave reconcile",
            self.wave_reconcile_seconds.clone(),
        );
    }

    /// Who may write: the admission policies, the leadership, the fence and the requests
    /// through it.
    fn register_leadership(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "admission_policies_in_force",
            "1 while ferry's admission policies are in force, 0 while not (work held back), -1 not required or not looked at yet",
            self.admission_policies_in_force.clone(),
        );
        registry.register(
            "leader",
            "1 while this instance is the leader, 0 as a standby",
            self.leader.clone(),
        );
        registry.register(
            "fenced_writes",
            "Writes refused because leadership was not surely held",
            self.fenced_writes.clone(),
        );
        registry.register(
            "api_requests",
            "Requests to the Kubernetes API, by verb",
            self.requests.clone(),
        );
    }

    /// What is read (the caches, the migrations, vSphere) and what the caches hold.
    fn register_reads_and_caches(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "cache_reads",
            "Reads by name: hit (watch cache), miss (not in it: read from the API), uncached",
            self.cache_reads.clone(),
        );
        registry.register(
            "migration_reads",
            "Reconciles that took the migration from the cache (hit) or read it fresh (miss)",
            self.migration_reads.clone(),
        );
        registry.register(
            "wave_inventory_lists",
            "Lists of the vCenter inventory made to resolve a wave's spec.selector",
            self.wave_inventory_lists.clone(),
        );
        registry.register(
            "vsphere_calls",
            "Calls to vSphere: logins, looks at VMs, power operations, snapshots",
            self.vsphere_calls.clone(),
        );
        registry.register(
            "cached_children",
            "Children the watch caches hold: whole (in flight), metadata (released) or stub",
            self.cached_children.clone(),
        );
        registry.register(
            "cached_migrations",
            "Migrations the controller holds: whole, settled (cut down in the watch cache), or record (succeeded and settled: what a wave counts)",
            self.cached_migrations.clone(),
        );
    }

    /// Counts one write.
    pub fn write(&self, verb: &str, kind: &str) {
        self.writes
            .get_or_create(&WriteLabels {
                verb: verb.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts one reconcile of `controller`.
    pub fn reconcile(&self, controller: &str) {
        self.reconciles
            .get_or_create(&ControllerLabel {
                controller: controller.to_owned(),
            })
            .inc();
    }

    /// Counts one failed reconcile.
    pub fn error(&self, controller: &str, label: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                error: label.to_owned(),
            })
            .inc();
    }

    /// Counts one read of a `kind` object by name, and how it was answered.
    pub fn cache_read(&self, kind: &str, read: CacheRead) {
        Self::count_read(&self.cache_reads, kind, read);
    }

    /// Counts how one reconcile took its migration: from the cache (`hit`) or fresh (`miss`).
    pub fn migration_read(&self, hit: bool) {
        let read = if hit { CacheRead::Hit } else { CacheRead::Miss };
        Self::count_read(&self.migration_reads, "VirtualMachineMigration", read);
    }

    fn count_read(family: &Family<CacheReadLabels, Counter>, kind: &str, read: CacheRead) {
        family
            .get_or_create(&CacheReadLabels {
                kind: kind.to_owned(),
                result: read.label().to_owned(),
            })
            .inc();
    }

    /// Observes the time spent in `phase`.
    pub fn phase_left(&self, phase: &str, seconds: f64) {
        self.phase_seconds
            .get_or_create(&PhaseLabel {
                phase: phase.to_owned(),
            })
            .observe(seconds);
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_errors_show_up_in_the_exposition() {
        let m = Metrics::default();
        m.write("status", "VirtualMachineMigration");
        m.write("status", "VirtualMachineMigration");
        m.error("migration", "kube_api");
        m.phase_left("Importing", 3.0);
        let text = m.encode();
        assert!(text.contains("ferry_controller_api_writes_total{verb=\"status\",kind=\"VirtualMachineMigration\"} 2"), "{text}");
        assert!(text.contains(
            "ferry_controller_reconcile_errors_total{controller=\"migration\",error=\"kube_api\"} 1"
        ));
        assert!(
            text.contains("ferry_controller_phase_duration_seconds_count{phase=\"Importing\"} 1")
        );
    }
}
