//! The health gate: a probe of the migrated guest's own service after it passed its readiness
//! check, and what ferry does when it never answers (roll back to the source, or keep the
//! target and fail).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.target.healthCheck`: once the guest is ready, ferry probes a port of the migrated VM at
/// its pod network address (the first interface of the VirtualMachineInstance's status, as
/// KubeVirt reports it) from the controller, every `periodSeconds`, until `successThreshold`
/// probes in a row answered or `timeoutSeconds` passed. Exactly one of `tcp` and `http`.
///
/// KubeVirt offers no API to run a command through the guest agent, so there is no `exec`
/// probe; a NetworkPolicy of the VM's namespace must let the controller in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::rules::one_health_probe())]
pub struct HealthCheck {
    /// A TCP connection to the port is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpProbe>,
    /// An HTTP GET of the path answers 200–399.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpProbe>,
    /// How long after the guest was ready the probes may keep failing before the check fails
    /// (default 300).
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 5, max = 86400))]
    pub timeout_seconds: u32,
    /// Seconds between two probes (default 10).
    #[serde(default = "default_period")]
    #[schemars(range(min = 1, max = 3600))]
    pub period_seconds: u32,
    /// Probes in a row that must answer for the check to pass (default 1).
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 1, max = 100))]
    pub success_threshold: u32,
}

fn default_timeout() -> u32 {
    300
}
fn default_period() -> u32 {
    10
}
fn default_threshold() -> u32 {
    1
}

/// A TCP probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpProbe {
    /// The guest's port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
}

/// An HTTP probe (plain HTTP).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpProbe {
    /// The guest's port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// The path asked for (default `/`).
    #[serde(default = "default_path")]
    #[schemars(length(min = 1, max = 2048), pattern(r"^/[!-~]*$"))]
    pub path: String,
}

fn default_path() -> String {
    "/".into()
}

/// `spec.target.onHealthCheckFailure`: what a failed health check does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OnHealthCheckFailure {
    /// Stop the target, prove it not running, power the source back on (when ferry powered it
    /// off) and end `RolledBack`; the migrated volumes and the halted VM stay for inspection.
    #[default]
    RollBack,
    /// Leave the target running and fail.
    Keep,
}

/// `status.healthCheck`: how the health check went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// When the first probe was made (the guest was ready): the timeout counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the last probe was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_at: Option<Time>,
    /// Probes in a row that answered, up to the last one.
    #[serde(default)]
    pub successes: u32,
    /// Probes made.
    #[serde(default)]
    pub probes: u32,
    /// What the last probe found (`tcp 10.0.0.7:8080: connection refused`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_result: String,
    /// The check passed.
    #[serde(default)]
    pub passed: bool,
}

impl HealthCheck {
    /// The probed port.
    pub fn port(&self) -> u16 {
        match (&self.tcp, &self.http) {
            (Some(t), _) => t.port,
            (None, Some(h)) => h.port,
            (None, None) => 0,
        }
    }

    /// How it is probed, in a few words (`tcp 8080`, `http 8080 /healthz`).
    pub fn describe(&self) -> String {
        match (&self.tcp, &self.http) {
            (Some(t), _) => format!("tcp {}", t.port),
            (None, Some(h)) => format!("http {} {}", h.port, h.path),
            (None, None) => "nothing".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_the_author_left_out() {
        let h: HealthCheck =
            serde_json::from_value(serde_json::json!({"http": {"port": 80}})).expect("parses");
        assert_eq!(
            (h.timeout_seconds, h.period_seconds, h.success_threshold),
            (300, 10, 1)
        );
        assert_eq!(h.describe(), "http 80 /");
        assert_eq!(h.port(), 80);
        assert_eq!(
            OnHealthCheckFailure::default(),
            OnHealthCheckFailure::RollBack
        );
    }
}
