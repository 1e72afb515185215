//! Validating: the guest agent connected; then the staging objects and the CDI Secret are
//! removed and the VM and its volumes released from the migration; only then does it succeed.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, GuestReady},
    Phase, Reason, RunStrategy, VirtualMachineMigration, names,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use tracing::info;

use super::checkpoint::{Checkpoint, Io};
use super::credentials;
use super::intents::Cleanup;
use super::outcome::{Outcome, Step};
use super::scope::Scope;
use super::world::{self, VmState, VmiState, staged_keys};
use crate::Result;
use crate::apis::cdi::DataVolume;
use crate::apis::kubevirt::{VirtualMachine, VmiPhase};
use crate::children::{is_owned_by, secret};
use crate::ports::StagingLogin;
use crate::problem::Problem;

/// The Validating checkpoint.
#[derive(Debug)]
pub struct Validating;

/// What remains of ferry's own work once the guest is ready: what [`Action::Finish`] removes
/// or releases.
#[derive(Clone, Debug, Default)]
pub struct Leftovers {
    /// Keys of staged objects that still exist.
    pub staged: Vec<String>,
    /// The CDI S3 Secret (or the staging CA ConfigMap) of this migration still exists.
    pub cdi_secret: bool,
    /// Names of DataVolumes that still carry the migration's owner reference.
    pub owned_dvs: Vec<String>,
    /// The staging login the staged objects are deleted with.
    pub login: Option<StagingLogin>,
}

impl Leftovers {
    /// Nothing left to do.
    fn is_empty(&self, vm: &VmState) -> bool {
        self.staged.is_empty()
            && !self.cdi_secret
            && self.owned_dvs.is_empty()
            && !matches!(vm, VmState::Ours { owned: true, .. })
    }
}

/// What Validating observes.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The VirtualMachine.
    pub vm: VmState,
    /// Its instance.
    pub vmi: VmiState,
    /// What remains to clean and release; only looked at once the guest is ready (`None`
    /// before), so that waiting for a guest costs two reads.
    pub leftovers: Option<Result<Leftovers, Problem>>,
}

/// What Validating does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Finish up: delete the staged objects and the CDI S3 Secret, and release the VirtualMachine
    /// and its DataVolumes from the migration's ownership (deleting the migration record later
    /// must not delete the migrated VM).
    Finish,
}

/// Whether the guest counts as ready for `vmm`: its agent connected on a running instance, or
/// the VM is meant to stay halted. Pure.
fn guest_ready(vmm: &VirtualMachineMigration, vmi: &VmiState) -> bool {
    vmm.spec.target.template.run_strategy == RunStrategy::Halted
        || matches!(
            vmi,
            VmiState::Present {
                phase: VmiPhase::Running,
                agent_connected: true,
                ..
            }
        )
}

impl Checkpoint for Validating {
    const PHASE: Phase = Phase::Validating;
    const CONDITIONS: &'static [ConditionType] = &[GuestReady];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::Vmi];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let vm = world::vm_state(io).await?;
        let vmi = world::vmi_state(io).await?;
        let leftovers = if guest_ready(io.vmm, &vmi) {
            Some(leftovers(io).await?)
        } else {
            None
        };
        Ok(Observed { vm, vmi, leftovers })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::Finish => finish(io, observed).await,
        }
    }
}

async fn leftovers(io: Io<'_>) -> Result<Result<Leftovers, Problem>> {
    let ours = |m: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>| {
        m.is_some_and(|m| is_owned_by(m, io.vmm))
    };
    let cdi_secret = ours(
        io.api::<Secret>()
            .get_opt(&secret::s3_secret_name(io.vmm))
            .await?
            .as_ref()
            .map(|s| &s.metadata),
    ) || ours(
        io.api::<ConfigMap>()
            .get_opt(&secret::s3_ca_config_map_name(io.vmm))
            .await?
            .as_ref()
            .map(|c| &c.metadata),
    );
    let dv_api = io.api::<DataVolume>();
    let keys = staged_keys(io.vmm);
    let mut owned_dvs = vec![];
    for i in 0..keys.len() {
        let name = names::datavolume_name(io.vmm, i);
        if let Some(dv) = dv_api.get_opt(&name).await?
            && is_owned_by(&dv.metadata, io.vmm)
        {
            owned_dvs.push(name);
        }
    }
    let login = match credentials::staging_login(io).await? {
        Ok(l) => l,
        Err(p) => return Ok(Err(p)),
    };
    let mut staged = vec![];
    for k in keys {
        match io.ctx.staging.head(&login, &k).await {
            Ok(Some(_)) => staged.push(k),
            Ok(None) => {}
            Err(p) if p.reason == Reason::BucketNotFound => {}
            Err(p) => return Ok(Err(p)),
        }
    }
    Ok(Ok(Leftovers {
        staged,
        cdi_secret,
        owned_dvs,
        login: Some(login),
    }))
}

/// Deletes the staged objects and the CDI Secret, and releases the VM and DataVolumes: exactly
/// what the observation found.
async fn finish(io: Io<'_>, observed: &Observed) -> Result<Option<Problem>> {
    let Some(Ok(left)) = &observed.leftovers else {
        return Ok(None);
    };
    let ctx = io.ctx;
    if let Some(login) = &left.login {
        for k in &left.staged {
            if let Err(p) = ctx.staging.delete(login, k).await {
                return Ok(Some(p));
            }
        }
    }
    if left.cdi_secret {
        super::cleanup::delete_cdi_objects(io).await?;
    }
    let release = serde_json::json!({"metadata": {"ownerReferences": null}});
    if matches!(observed.vm, VmState::Ours { owned: true, .. }) {
        io.api::<VirtualMachine>()
            .patch(
                &names::vm_name(io.vmm),
                &PatchParams::default(),
                &Patch::Merge(&release),
            )
            .await?;
        ctx.metrics.write("patch", "VirtualMachine");
    }
    for name in &left.owned_dvs {
        io.api::<DataVolume>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&release))
            .await?;
        ctx.metrics.write("patch", "DataVolume");
    }
    info!(migration = %io.vmm.metadata.name.as_deref().unwrap_or_default(), staged = left.staged.len(), "staging cleaned; VM and volumes released");
    Ok(None)
}

/// Decides the Validating step. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let Observed { vm, vmi, leftovers } = &scope.world;
    let halted = scope.vmm.spec.target.template.run_strategy == RunStrategy::Halted;
    if !guest_ready(&scope.vmm, vmi) {
        if matches!(vm, VmState::Absent | VmState::Foreign) {
            let msg = "the VirtualMachine is gone; raise spec.retry to create it again".to_owned();
            return Outcome::failure(
                Reason::GuestAgentTimeout,
                msg,
                true,
                Phase::CreatingVM,
                GuestReady,
            );
        }
        let waited = scope.in_phase_for();
        if waited > scope.policy.agent_timeout {
            let msg = format!(
                "the guest agent did not connect within {}s; check that the guest boots and runs qemu-guest-agent, then raise spec.retry",
                waited.as_secs()
            );
            return Outcome::failure(
                Reason::GuestAgentTimeout,
                msg,
                true,
                Phase::Validating,
                GuestReady,
            );
        }
        let msg = match vmi {
            VmiState::Present {
                phase: VmiPhase::Running,
                ..
            } => "waiting for the guest agent".to_owned(),
            VmiState::Present { phase, .. } => {
                format!("waiting for the guest: the VirtualMachineInstance is {phase}")
            }
            VmiState::Absent => "waiting for the guest: no VirtualMachineInstance".to_owned(),
        };
        return Outcome::new(
            Step::Wait {
                requeue: scope.requeue_within(scope.policy.agent_timeout),
            },
            msg.clone(),
        )
        .with(GuestReady, Unknown, Reason::InProgress, msg);
    }
    let (status, reason, msg) = if halted {
        (
            True,
            Reason::Validated,
            "runStrategy Halted: boot validation skipped",
        )
    } else {
        (
            True,
            Reason::GuestAgentConnected,
            "the guest agent connected",
        )
    };
    match leftovers {
        None => Outcome::new(
            Step::Wait {
                requeue: std::time::Duration::ZERO,
            },
            "looking at what is left to clean up",
        )
        .with(GuestReady, status, reason, msg),
        Some(Err(p)) => Outcome::from_problem(scope, p, None).with(GuestReady, status, reason, msg),
        Some(Ok(left)) if !left.is_empty(vm) => Outcome::new(
            Step::Act(vec![Action::Finish]),
            "removing the staged images and releasing the VM",
        )
        .with(GuestReady, status, reason, msg),
        Some(Ok(_)) => Outcome::new(
            Step::Advance {
                to: Phase::Succeeded,
            },
            "migrated",
        )
        .with(GuestReady, status, reason, msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn ours() -> VmState {
        VmState::Ours {
            run_strategy: Some("Always".into()),
            owned: false,
        }
    }

    fn vmi(phase: &str, agent: bool) -> VmiState {
        VmiState::Present {
            phase: serde_json::from_value(serde_json::json!(phase)).unwrap(),
            agent_connected: agent,
            reason: None,
        }
    }

    fn step_with(
        strategy: RunStrategy,
        vm: VmState,
        vmi: VmiState,
        leftovers: Result<bool, Problem>,
        elapsed: i64,
    ) -> Step<Action> {
        let mut vmm = migration("m").with_phase(Phase::Validating);
        vmm.spec.target.template.run_strategy = strategy;
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Validating, 1, &ts(0));
        }
        let world = Observed {
            leftovers: guest_ready(&vmm, &vmi).then(|| {
                leftovers.map(|left| Leftovers {
                    cdi_secret: left,
                    ..Leftovers::default()
                })
            }),
            vm,
            vmi,
        };
        decide(&Scope {
            vmm,
            now: ts(elapsed).0,
            policy: Policy::default(),
            retries: 0,
            world,
        })
        .step
    }

    fn step(vmi: VmiState, leftovers: Result<bool, Problem>) -> Step<Action> {
        step_with(RunStrategy::Always, ours(), vmi, leftovers, 5)
    }

    #[test]
    fn table() {
        assert!(matches!(
            step(vmi("Running", false), Ok(true)),
            Step::Wait { .. }
        ));
        assert!(matches!(
            step(VmiState::Absent, Ok(true)),
            Step::Wait { .. }
        ));
        assert_eq!(
            step(vmi("Running", true), Ok(true)),
            Step::Act(vec![Action::Finish])
        );
        assert_eq!(
            step(vmi("Running", true), Ok(false)),
            Step::Advance {
                to: Phase::Succeeded
            }
        );
        assert!(matches!(
            step(
                vmi("Running", true),
                Err(Problem::transient(Reason::StagingUnavailable, "x"))
            ),
            Step::Retry { .. }
        ));
        let late = Policy::default().agent_timeout.as_secs() as i64 + 1;
        assert!(matches!(
            step_with(
                RunStrategy::Always,
                ours(),
                vmi("Running", false),
                Ok(true),
                late
            ),
            Step::Fail {
                reason: Reason::GuestAgentTimeout,
                resume: Phase::Validating,
                ..
            }
        ));
        assert_eq!(
            step_with(RunStrategy::Halted, ours(), VmiState::Absent, Ok(false), 5),
            Step::Advance {
                to: Phase::Succeeded
            }
        );
        assert!(matches!(
            step_with(
                RunStrategy::Always,
                VmState::Absent,
                VmiState::Absent,
                Ok(false),
                5
            ),
            Step::Fail {
                resume: Phase::CreatingVM,
                ..
            }
        ));
    }
}
