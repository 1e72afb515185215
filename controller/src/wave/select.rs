//! A wave declared with `spec.selector`: its VMs are chosen once from the vCenter inventory and
//! recorded in `status.selectedVms`, which the wave follows from then on.

use ferry_crds::condition::{self, WaveConditionType};
use std::collections::BTreeSet;

use ferry_crds::wave::MAX_WAVE_VMS;
use ferry_crds::{
    ConditionStatus, EventAction, EventReason, MigrationWave, MigrationWaveStatus, Reason,
    WavePhase, WaveSelector, WaveTagSelector,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::binding::{SecretData, bind_source};
use crate::context::Context;
use crate::events::Note;
use crate::pacing::backoff;
use crate::ports::SourceLogin;
use crate::problem::Problem;
use crate::{Error, Result};
use ferry_vsphere::tags::{self, TagRef};

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
    let limit = ctx.policy.wave_selector_limit.min(MAX_WAVE_VMS);
    let (status, note, next) = after_selection(wave, chosen, limit, &now);
    let requeue = match next {
        Next::Go => Requeue::requeue(std::time::Duration::ZERO),
        Next::AwaitSpec => Requeue::await_change(),
        Next::Retry => {
            let uid = wave.uid().unwrap_or_default();
            Requeue::requeue(backoff(
                ctx.note_failure(&uid),
                ctx.policy.backoff_base,
                ctx.policy.backoff_cap,
                &uid,
            ))
        }
    };
    super::write::status(ctx, wave, &status, note.as_slice()).await?;
    Ok(requeue)
}

/// What follows a selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The VMs are chosen: go on with them at once.
    Go,
    /// Refused for this spec: nothing changes until the spec does.
    AwaitSpec,
    /// vCenter could not be asked: again after the wave's backoff.
    Retry,
}

/// The wave's status after resolving its selector to `chosen` (or failing to), with at most
/// `limit` VMs, and the Event to publish. Pure.
pub fn after_selection(
    wave: &MigrationWave,
    chosen: Result<Vec<String>, Problem>,
    limit: usize,
    now: &Time,
) -> (ferry_crds::MigrationWaveStatus, Option<Note>, Next) {
    let mut status = wave.status.clone().unwrap_or_default();
    // A refusal of an earlier spec is over: this one is judged afresh.
    status.phase = WavePhase::Pending;
    status
        .conditions
        .retain(|c| c.reason != Reason::SelectorTooBroad);
    match chosen {
        Ok(vms) => match too_broad(vms.len(), limit) {
            Some(message) => {
                warn!(wave = %wave.name_any(), count = vms.len(), limit, "selector too broad");
                let status = refusal(status, wave.metadata.generation, &message, now);
                let note = Note {
                    warning: true,
                    reason: EventReason::Condition(Reason::SelectorTooBroad),
                    action: EventAction::Fail,
                    note: message,
                };
                (status, Some(note), Next::AwaitSpec)
            }
            None => {
                info!(wave = %wave.name_any(), count = vms.len(), "selector resolved");
                status.total = i32::try_from(vms.len()).unwrap_or(i32::MAX);
                status.selected_vms = Some(vms);
                (status, None, Next::Go)
            }
        },
        Err(problem) => {
            warn!(wave = %wave.name_any(), reason = %problem.reason, message = %problem.message, "resolving the selector");
            condition::init_conditions(&mut status.conditions, wave.metadata.generation, now);
            condition::set_condition(
                &mut status.conditions,
                WaveConditionType::Progressing,
                ConditionStatus::False,
                problem.reason,
                format!("resolving spec.selector: {}", problem.message),
                wave.metadata.generation,
                now,
            );
            (status, None, Next::Retry)
        }
    }
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
    fn a_selection_is_kept_refused_past_the_limit_or_retried_when_vcenter_cannot_answer() {
        use ferry_crds::fixtures::{t0, wave};
        let mut w = wave("w", 0);
        w.spec.selector = Some(WaveSelector::default());
        let vms = |n: usize| Ok((0..n).map(|i| format!("vm{i}")).collect::<Vec<_>>());
        let (s, note, next) = after_selection(&w, vms(3), 5, &t0());
        assert_eq!((next, note, s.total), (Next::Go, None, 3));
        assert_eq!(s.selected_vms.as_ref().map(Vec::len), Some(3));
        let (s, note, next) = after_selection(&w, vms(6), 5, &t0());
        assert_eq!(next, Next::AwaitSpec);
        assert_eq!(s.phase, WavePhase::Failed);
        let note = note.unwrap();
        assert_eq!(
            (note.reason, note.warning),
            (EventReason::Condition(Reason::SelectorTooBroad), true)
        );
        assert_eq!(s.selected_vms, None);
        let down = Problem::transient(Reason::EndpointUnreachable, "vcenter: connection refused");
        let (s, note, next) = after_selection(&w, Err(down), 5, &t0());
        assert_eq!((next, note.is_none()), (Next::Retry, true));
        let c = s.condition(WaveConditionType::Progressing).unwrap();
        assert_eq!(
            (c.status, c.reason, c.message.as_str()),
            (
                ConditionStatus::False,
                Reason::EndpointUnreachable,
                "resolving spec.selector: vcenter: connection refused"
            )
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
