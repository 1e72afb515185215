//! A wave declared with `spec.selector`: its VMs are chosen once from the vCenter inventory and
//! recorded in `status.selectedVms`, which the wave follows from then on.

use ferry_crds::condition::{self, WaveConditionType};
use std::collections::BTreeSet;

use ferry_crds::wave::MAX_WAVE_VMS;
use ferry_crds::{
    ConditionStatus, EventAction, EventReason, MigrationWave, MigrationWaveStatus, Reason,
    WavePhase, WaveSelector, WaveTagSelector, names,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::binding::{SecretData, bind_source};
use crate::context::Context;
use crate::events::Note;
use crate::pacing::backoff;
use crate::ports::SourceLogin;
use crate::problem::Problem;
use crate::vsphere::tags::{self, TagRef};
use crate::{Error, Result};

/// The VMs `selector` chooses from `names` (those under its folder): those matching its name
/// pattern and, with a tag, among `tagged` (the names of the VMs carrying it), in name order. Pure.
pub fn choose(
    selector: &WaveSelector,
    names: Vec<String>,
    tagged: Option<&BTreeSet<String>>,
) -> Vec<String> {
    let mut chosen: Vec<String> = names
        .into_iter()
        .filter(|n| selector.matches_name(n))
        .filter(|n| tagged.is_none_or(|t| t.contains(n)))
        .collect();
    chosen.sort();
    chosen.dedup();
    chosen
}

/// Why nothing was chosen, naming every condition of the selector.
fn nothing_chosen(selector: &WaveSelector) -> String {
    let mut parts = Vec::new();
    if let Some(f) = &selector.folder {
        parts.push(format!("folder {f:?}"));
    }
    if let Some(p) = &selector.name_pattern {
        parts.push(format!("namePattern {p:?}"));
    }
    if let Some(t) = &selector.tag {
        parts.push(tag_ref(t).to_string());
    }
    if parts.is_empty() {
        "spec.selector matches no VM: the inventory has none".to_owned()
    } else {
        format!(
            "spec.selector matches no VM ({}); check them",
            parts.join(", ")
        )
    }
}

/// Why `count` VMs are too many for one wave of at most `limit`, and what to do; `None` when they
/// are not. Pure.
pub fn too_broad(count: usize, limit: usize) -> Option<String> {
    (count > limit).then(|| {
        format!(
            "spec.selector matches {count} VMs, more than the {limit} one wave may hold; nothing \
             was created: narrow spec.selector (folder, namePattern, tag) or split the VMs into \
             several waves"
        )
    })
}

/// `old` as the status of a wave whose selector chose too many VMs (`message`): `Failed`, the
/// reason `SelectorTooBroad` on every condition, for `generation`. Pure.
pub fn refusal(
    old: MigrationWaveStatus,
    generation: Option<i64>,
    message: &str,
    now: &Time,
) -> MigrationWaveStatus {
    let mut status = old;
    status.phase = WavePhase::Failed;
    status.total = 0;
    status.observed_generation = generation;
    condition::init_conditions(&mut status.conditions, generation, now);
    for (t, s) in [
        (WaveConditionType::Progressing, ConditionStatus::False),
        (WaveConditionType::Completed, ConditionStatus::True),
        (WaveConditionType::Degraded, ConditionStatus::True),
        (WaveConditionType::Ready, ConditionStatus::False),
    ] {
        condition::set_condition(
            &mut status.conditions,
            t,
            s,
            Reason::SelectorTooBroad,
            message,
            generation,
            now,
        );
    }
    status
}

/// Whether the wave's selector was refused as too broad for its current spec: it is not resolved
/// again (no inventory list) until the spec changes. Pure.
pub fn refused(wave: &MigrationWave) -> bool {
    wave.status
        .as_ref()
        .filter(|s| s.phase == WavePhase::Failed)
        .and_then(|s| s.condition(WaveConditionType::Progressing))
        .is_some_and(|c| {
            c.reason == Reason::SelectorTooBroad
                && c.observed_generation == wave.metadata.generation
        })
}

fn tag_ref(t: &WaveTagSelector) -> TagRef<'_> {
    TagRef {
        name: &t.name,
        category: t.category.as_deref(),
    }
}

/// The names of the VMs carrying `tag`, read from vCenter's tagging service with the same login
/// and trust as the inventory.
async fn tagged(login: &SourceLogin, tag: &WaveTagSelector) -> Result<BTreeSet<String>, Problem> {
    let endpoint = crate::ports::source::endpoint(login)?;
    match tags::vms_tagged(&endpoint, tag_ref(tag)).await {
        Ok(Ok(names)) => Ok(names.into_iter().collect()),
        Ok(Err(miss)) => Err(Problem::permanent(
            Reason::VMNotFound,
            format!("spec.selector.tag: {miss} on {}", login.url),
        )),
        Err(e) => Err(crate::ports::source::problem_of(&e)),
    }
}

/// The VMs `selector` chooses, asking vSphere.
async fn select(
    ctx: &Context,
    login: &SourceLogin,
    selector: &WaveSelector,
) -> Result<Vec<String>, Problem> {
    ctx.metrics.wave_inventory_lists.inc();
    let names = ctx
        .source
        .list_vms(login, selector.folder.as_deref())
        .await?;
    let tagged = match &selector.tag {
        Some(t) => Some(tagged(login, t).await?),
        None => None,
    };
    let chosen = choose(selector, names, tagged.as_ref());
    if chosen.is_empty() {
        Err(Problem::transient(
            Reason::VMNotFound,
            nothing_chosen(selector),
        ))
    } else {
        Ok(chosen)
    }
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
/// `Progressing` condition and looks again with the policy's backoff. A choice of more VMs than
/// a wave may hold ([`too_broad`]) fails the wave once, with an Event, until its spec changes.
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
        Ok(login) => select(ctx, &login, selector).await,
        Err(p) => Err(p),
    };
    let now = Time(crate::context::whole_seconds(ctx.clock.now()));
    let mut status = wave.status.clone().unwrap_or_default();
    // A refusal of an earlier spec is over: this one is judged afresh.
    status.phase = WavePhase::Pending;
    status
        .conditions
        .retain(|c| c.reason != Reason::SelectorTooBroad);
    let limit = ctx.policy.wave_selector_limit.min(MAX_WAVE_VMS);
    let mut note = None;
    let requeue = match chosen {
        Ok(vms) => match too_broad(vms.len(), limit) {
            Some(message) => {
                warn!(wave = %wave.name_any(), count = vms.len(), limit, "selector too broad");
                status = refusal(status, wave.metadata.generation, &message, &now);
                note = Some(Note {
                    warning: true,
                    reason: EventReason::Condition(Reason::SelectorTooBroad),
                    action: EventAction::Fail,
                    note: message,
                });
                Requeue::await_change()
            }
            None => {
                info!(wave = %wave.name_any(), count = vms.len(), "selector resolved");
                status.total = i32::try_from(vms.len()).unwrap_or(i32::MAX);
                status.selected_vms = Some(vms);
                Requeue::requeue(std::time::Duration::ZERO)
            }
        },
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
    if let Some(note) = note {
        super::publish(ctx, wave, &note).await;
    }
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
        assert_eq!(choose(&sel, names, None), ["web-1", "web-10", "web-2"]);
        assert_eq!(
            choose(&WaveSelector::default(), vec!["b".into(), "a".into()], None),
            ["a", "b"]
        );
    }

    #[test]
    fn more_vms_than_a_wave_holds_are_refused_with_the_count_the_limit_and_what_to_do() {
        assert_eq!(too_broad(MAX_WAVE_VMS, MAX_WAVE_VMS), None);
        let msg = too_broad(MAX_WAVE_VMS + 3, MAX_WAVE_VMS).unwrap();
        assert_eq!(
            msg,
            "spec.selector matches 5003 VMs, more than the 5000 one wave may hold; nothing was \
             created: narrow spec.selector (folder, namePattern, tag) or split the VMs into \
             several waves"
        );
    }

    #[test]
    fn a_refused_selector_fails_the_wave_for_its_generation_only() {
        use ferry_crds::fixtures::{t0, wave};
        let mut w = wave("w", 0);
        w.spec.selector = Some(WaveSelector::default());
        assert!(!refused(&w), "never resolved");
        let msg = too_broad(7, 5).unwrap();
        w.status = Some(refusal(
            MigrationWaveStatus::default(),
            w.metadata.generation,
            &msg,
            &t0(),
        ));
        let s = w.status.as_ref().unwrap();
        assert_eq!(s.phase, WavePhase::Failed);
        for t in WaveConditionType::ALL {
            let c = s.condition(t).unwrap();
            assert_eq!(
                (c.reason, c.message.as_str()),
                (Reason::SelectorTooBroad, msg.as_str())
            );
        }
        assert!(refused(&w), "not listed again for this spec");
        w.metadata.generation = Some(2);
        assert!(!refused(&w), "a changed spec is resolved again");
    }

    #[test]
    fn a_tag_narrows_the_choice_to_the_vms_carrying_it() {
        let sel = WaveSelector {
            name_pattern: Some("web-*".into()),
            tag: Some(WaveTagSelector {
                name: "gold".into(),
                category: Some("tier".into()),
            }),
            ..WaveSelector::default()
        };
        let names = ["web-1", "web-2", "db-1", "web-3"]
            .map(String::from)
            .to_vec();
        let tagged: BTreeSet<String> = ["web-2", "db-1", "web-3", "elsewhere"]
            .map(String::from)
            .into();
        assert_eq!(
            choose(&sel, names.clone(), Some(&tagged)),
            ["web-2", "web-3"]
        );
        assert!(choose(&sel, names, Some(&BTreeSet::new())).is_empty());
        assert_eq!(
            nothing_chosen(&sel),
            "spec.selector matches no VM (namePattern \"web-*\", tag \"gold\" of category \
             \"tier\"); check them"
        );
    }
}
