//! Conditions as CDI and KubeVirt write them: a list keyed by `type`, where
//! `lastTransitionTime` moves only when `status` changes.

use serde::{Deserialize, Serialize};

/// One condition of a DataVolume, VirtualMachine or VirtualMachineInstance. CDI uses
/// `lastHeartbeatTime`, KubeVirt `lastProbeTime`; each side leaves the other's empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `"True"` / `"False"`.
pub fn status_str(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Which timestamp flavour to maintain besides `lastTransitionTime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// CDI: `lastHeartbeatTime` moves whenever status, reason or message change.
    Cdi,
    /// KubeVirt: no heartbeat.
    KubeVirt,
}

/// Sets condition `type_` in `conds`, keeping `lastTransitionTime` unless the status changes.
pub fn set(
    conds: &mut Vec<Condition>,
    flavour: Flavour,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
) {
    let status = status_str(status);
    let idx = match conds.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conds.push(Condition {
                type_: type_.to_string(),
                ..Condition::default()
            });
            conds.len() - 1
        }
    };
    let c = &mut conds[idx];
    let changed = c.status != status;
    let text_changed = c.reason != reason || c.message != message;
    if changed {
        c.last_transition_time = Some(now.to_string());
    }
    if flavour == Flavour::Cdi && (changed || text_changed) {
        c.last_heartbeat_time = Some(now.to_string());
    }
    c.status = status.to_string();
    c.reason = reason.to_string();
    c.message = message.to_string();
}

/// Removes condition `type_` (KubeVirt drops `AgentConnected` when the agent goes away).
pub fn remove(conds: &mut Vec<Condition>, type_: &str) {
    conds.retain(|c| c.type_ != type_);
}

/// The condition `type_`, if present.
pub fn find<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// Whether condition `type_` is present with status `True`.
pub fn is_true(conds: &[Condition], type_: &str) -> bool {
    find(conds, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut c = Vec::new();
        set(
            &mut c,
            Flavour::Cdi,
            "Running",
            true,
            "Pod is running",
            "",
            "t1",
        );
        set(
            &mut c,
            Flavour::Cdi,
            "Running",
            true,
            "Pod is running",
            "",
            "t2",
        );
        assert_eq!(c[0].last_transition_time.as_deref(), Some("t1"));
        assert_eq!(c[0].last_heartbeat_time.as_deref(), Some("t1"));
        set(&mut c, Flavour::Cdi, "Running", true, "Other", "", "t3");
        assert_eq!(c[0].last_transition_time.as_deref(), Some("t1"));
        assert_eq!(c[0].last_heartbeat_time.as_deref(), Some("t3"));
        set(
            &mut c,
            Flavour::Cdi,
            "Running",
            false,
            "Error",
            "boom",
            "t4",
        );
        assert_eq!(c[0].last_transition_time.as_deref(), Some("t4"));
        assert_eq!(
            (
                c[0].status.as_str(),
                c[0].reason.as_str(),
                c[0].message.as_str()
            ),
            ("False", "Error", "boom")
        );
    }

    #[test]
    fn kubevirt_flavour_has_no_heartbeat_and_conditions_can_go() {
        let mut c = Vec::new();
        set(&mut c, Flavour::KubeVirt, "Ready", true, "", "", "t1");
        set(
            &mut c,
            Flavour::KubeVirt,
            "AgentConnected",
            true,
            "",
            "",
            "t2",
        );
        assert!(c.iter().all(|c| c.last_heartbeat_time.is_none()));
        assert!(is_true(&c, "AgentConnected"));
        remove(&mut c, "AgentConnected");
        assert!(!is_true(&c, "AgentConnected") && is_true(&c, "Ready"));
    }

    #[test]
    fn serializes_like_the_go_types() {
        let mut c = Vec::new();
        set(
            &mut c,
            Flavour::KubeVirt,
            "Ready",
            false,
            "GuestNotRunning",
            "",
            "2026-01-01T00:00:00Z",
        );
        let v = serde_json::to_value(&c[0]).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "Ready", "status": "False", "reason": "GuestNotRunning",
                "lastTransitionTime": "2026-01-01T00:00:00Z"})
        );
        let back: Condition = serde_json::from_value(serde_json::json!(
            {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": null}))
        .unwrap();
        assert_eq!(back.last_probe_time, None);
    }
}
