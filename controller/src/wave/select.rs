//! A wave declared with `spec.selector`: its VMs are chosen once from the vCenter inventory and
//! recorded in `status.selectedVms`, which the wave follows from then on.

use ferry_crds::condition::{self, WaveConditionType};
use ferry_crds::{ConditionStatus, MigrationWave, Reason, WaveSelector, names};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::context::Context;
use crate::ports::SourceLogin;
use crate::problem::Problem;
use crate::reconcile::credentials::{SecretData, bind_source};
use crate::reconcile::outcome::backoff;
use crate::{Error, Result};

/// The VMs `selector` chooses from `names`: those matching, by name, in name order. Pure.
pub fn choose(selector: &WaveSelector, names: Vec<String>) -> Vec<String> {
    let mut chosen: Vec<String> = names
        .into_iter()
        .filter(|n| selector.matches_name(n))
        .collect();
    chosen.sort();
    chosen.dedup();
    chosen
}

/// The vSphere login of the wave's template, bound exactly as a migration's is
/// ([`bind_source`]): an unlabelled Secret, or a template naming another endpoint than the
/// Secret's, sends nothing.
async fn login(
    wave: &MigrationWave,
    ctx: &Context,
    ns: &str,
) -> Result<Result<SourceLogin, Problem>> {
    let ep = &wave.spec.template.source.endpoint;
    let name = &ep.credentials_secret_ref.name;
    let Some(secret) = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?
    else {
        return Ok(Err(Problem::transient(
            Reason::SecretNotFound,
            format!("Secret {name} (vSphere credentials) not found in namespace {ns}; create it"),
        )));
    };
    Ok(bind_source(ep, &SecretData::of(&secret)))
}

/// Resolves `selector` for `wave` and records the choice; on a problem, records why in the
/// `Progressing` condition and looks again with the policy's backoff.
///
/// # Errors
/// Kubernetes API failures.
pub async fn resolve(
    wave: &MigrationWave,
    selector: &WaveSelector,
    ctx: &Context,
) -> Result<Requeue> {
    let ns = wave.namespace().ok_or(Error::MissingField {
        kind: "MigrationWave",
        field: "metadata.namespace",
    })?;
    let chosen = match login(wave, ctx, &ns).await? {
        Ok(login) => ctx
            .source
            .list_vms(&login, selector.folder.as_deref())
            .await
            .map(|names| choose(selector, names))
            .and_then(|c| {
                if c.is_empty() {
                    Err(Problem::transient(
                        Reason::VMNotFound,
                        "spec.selector matches no VM; check its folder and namePattern",
                    ))
                } else {
                    Ok(c)
                }
            }),
        Err(p) => Err(p),
    };
    let now = Time(crate::context::whole_seconds(ctx.clock.now()));
    let mut status = wave.status.clone().unwrap_or_default();
    let requeue = match chosen {
        Ok(vms) => {
            info!(wave = %wave.name_any(), count = vms.len(), "selector resolved");
            status.total = i32::try_from(vms.len()).unwrap_or(i32::MAX);
            status.selected_vms = Some(vms);
            Requeue::requeue(std::time::Duration::ZERO)
        }
        Err(problem) => {
            warn!(wave = %wave.name_any(), reason = %problem.reason, message = %problem.message, "resolving the selector");
            condition::init_conditions(&mut status.conditions, wave.metadata.generation, &now);
            condition::set_condition(
                &mut status.conditions,
                WaveConditionType::Progressing,
                ConditionStatus::False,
                problem.reason,
                format!("resolving spec.selector: {}", problem.message),
                wave.metadata.generation,
                &now,
            );
            let uid = wave.uid().unwrap_or_default();
            let failures = ctx.note_failure(&uid);
            Requeue::requeue(backoff(
                failures,
                ctx.policy.backoff_base,
                ctx.policy.backoff_cap,
                &uid,
            ))
        }
    };
    let patch = serde_json::json!({
        "apiVersion": ferry_crds::API_VERSION,
        "kind": "MigrationWave",
        "status": status,
    });
    Api::<MigrationWave>::namespaced(ctx.client.clone(), &ns)
        .patch_status(
            &wave.name_any(),
            &PatchParams::apply(names::WAVE_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.metrics.write("status", "MigrationWave");
    Ok(requeue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_is_the_matching_names_in_name_order() {
        let sel = WaveSelector {
            name_pattern: Some("web-*".into()),
            ..WaveSelector::default()
        };
        let names = ["web-2", "db-1", "web-10", "web-1", "web-2"]
            .map(String::from)
            .to_vec();
        assert_eq!(choose(&sel, names), ["web-1", "web-10", "web-2"]);
        assert_eq!(
            choose(&WaveSelector::default(), vec!["b".into(), "a".into()]),
            ["a", "b"]
        );
    }
}
