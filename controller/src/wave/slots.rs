//! What a child's state means for its wave, pure: whether it takes a slot of `maxInFlight`,
//! whether it waits for the wave's cutover, and whether that cutover is due. Both the plan
//! (`decide`) and the status (`status`) count with these.

use ferry_crds::{MigrationMode, MigrationWave, Phase, VirtualMachineMigration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Whether a child takes a slot of `maxInFlight`: released, not finished, not held in
/// Pending by preflight (the wave goes on with the rest) and not waiting for a cutover.
pub fn occupies_slot(vmm: &VirtualMachineMigration, now: &Time) -> bool {
    !vmm.is_held()
        && !vmm.phase().is_terminal()
        && !vmm.held_by_preflight()
        && !waits_for_cutover(vmm, now)
}

/// Whether a warm child copied while its VM runs and waits for a cutover nobody gave it yet.
/// Such a child takes no slot (its precopy rounds copy only what changed), so that every VM of
/// a warm wave is precopied before the window; its cutover takes one again. Pure.
pub fn waits_for_cutover(vmm: &VirtualMachineMigration, now: &Time) -> bool {
    vmm.spec.mode == MigrationMode::Warm
        && vmm.phase() == Phase::CuttingOver
        && !vmm.spec.cancel
        && !vmm.spec.warm.as_ref().is_some_and(|w| w.cutover_due(now))
        && vmm
            .status
            .as_ref()
            .and_then(|s| s.warm.as_ref())
            .is_none_or(|w| w.cutover_started_at.is_none())
}

/// What the wave's precopied migrations wait for, in words.
pub(super) fn waiting_note(wave: &MigrationWave) -> String {
    match wave.spec.warm.as_ref().and_then(|w| w.cutover_at.as_ref()) {
        Some(at) => format!("precopied, waiting for the wave's cutover at {}", at.0),
        None => "precopied, waiting for the wave's cutover (set spec.warm.cutover: true, or \
                 spec.warm.cutoverAt)"
            .to_owned(),
    }
}

/// Whether the wave's cutover is due: a warm wave whose `spec.warm` asks for it now or whose
/// time has come.
pub fn cutover_due(wave: &MigrationWave, now: &Time) -> bool {
    wave.spec.template.mode == MigrationMode::Warm
        && wave.spec.warm.as_ref().is_some_and(|w| w.cutover_due(now))
}
