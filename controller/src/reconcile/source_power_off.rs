//! The source's power-off, as Preparing takes it for a cold copy and CuttingOver at a warm
//! migration's cutover: the guest asked to shut down through VMware Tools first, powered off
//! hard after its grace. Pure; each checkpoint says it in its own words and acts through its
//! own `execute`.

use ferry_crds::{PowerState, SourcePowerOff, ToolsState};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A step of the source's power-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    /// Ask the guest to shut down through VMware Tools (ShutdownGuest).
    ShutdownGuest,
    /// Power the source VM off hard.
    PowerOff,
}

/// How the source gets (or got) powered off: the next action and what to record, or why it is
/// waiting. Pure.
///
/// # Guarantees
/// * A guest with VMware Tools running is asked to shut down first (once); it is powered off
///   hard only once `shutdownGracePeriodSeconds` passed since that request.
/// * Without running Tools, suspended, or with a grace of 0, it is powered off hard at once.
/// * Every request is recorded (with its time) in the same reconcile's status write.
pub fn power_off_step(
    vmm: &ferry_crds::VirtualMachineMigration,
    at: k8s_openapi::jiff::Timestamp,
    power: Option<PowerState>,
    tools: Option<ToolsState>,
) -> PowerOffStep {
    let done = vmm
        .status
        .as_ref()
        .and_then(|s| s.source_power_off.clone())
        .unwrap_or_default();
    let grace = vmm.spec.source.power.shutdown_grace_period_seconds.max(0);
    let now = Time(crate::context::whole_seconds(at));
    if done.hard_power_off_at.is_some() {
        // Asked before; the VM is still on (a crash or a slow task): ask again, idempotently.
        return PowerOffStep::Act(PowerAction::PowerOff, done);
    }
    let guest_can_shut_down =
        power == Some(PowerState::PoweredOn) && tools == Some(ToolsState::Running) && grace > 0;
    match &done.shutdown_guest_at {
        None if guest_can_shut_down => PowerOffStep::Act(
            PowerAction::ShutdownGuest,
            SourcePowerOff {
                shutdown_guest_at: Some(now),
                ..done
            },
        ),
        None => PowerOffStep::Act(
            PowerAction::PowerOff,
            SourcePowerOff {
                hard_power_off_at: Some(now),
                ..done
            },
        ),
        Some(asked) => {
            let waited = at.duration_since(asked.0).as_secs();
            if waited >= grace {
                PowerOffStep::Act(
                    PowerAction::PowerOff,
                    SourcePowerOff {
                        hard_power_off_at: Some(now),
                        ..done
                    },
                )
            } else {
                PowerOffStep::Wait {
                    left: std::time::Duration::from_secs(
                        u64::try_from(grace - waited).unwrap_or(0),
                    ),
                }
            }
        }
    }
}

/// The next power-off step.
#[derive(Clone, Debug, PartialEq)]
pub enum PowerOffStep {
    /// Take the action, recording the power-off as given.
    Act(PowerAction, SourcePowerOff),
    /// The guest was asked to shut down; a hard power-off follows after `left`.
    Wait { left: std::time::Duration },
}
