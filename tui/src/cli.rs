//! The plain commands for scripts: `ferry board --once` and `ferry cancel|retry|pause|resume|
//! delete`. They reuse the state's rules, so a script and a key press do the same thing.

use ::kube::{Api, api::ListParams};
use ferry_crds::{ConditionType, MigrationWave, VirtualMachineMigration};
use serde_json::json;

use crate::{
    error::Result,
    kube::{Cluster, actions},
    state::{Action, Outcome, Scope, State, Target, TargetKind, Verb, execute, plan, update},
    strings::{self, column, skip},
    ui::format,
};

fn api<K>(cluster: &Cluster, scope: &Scope) -> Api<K>
where
    K: ::kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match scope {
        Scope::All => Api::all(cluster.client.clone()),
        Scope::Namespace(ns) => Api::namespaced(cluster.client.clone(), ns),
    }
}

/// Lists migrations and waves of `scope` into a fresh state (as the watches would).
///
/// # Errors
/// Listing failed (RBAC, missing CRDs, no cluster).
pub async fn load(cluster: &Cluster, scope: Scope, wave: Option<String>) -> Result<State> {
    let mut state = State::new(
        cluster.context.clone(),
        scope.clone(),
        false,
        k8s_openapi::jiff::Timestamp::now(),
    );
    let vmms = api::<VirtualMachineMigration>(cluster, &scope)
        .list(&ListParams::default())
        .await?;
    let waves = api::<MigrationWave>(cluster, &scope)
        .list(&ListParams::default())
        .await?;
    update(&mut state, Action::MigrationsListed(vmms.items));
    update(&mut state, Action::WavesListed(waves.items));
    if let Some(w) = wave {
        update(&mut state, Action::Command(format!("wave {w}")));
    }
    Ok(state)
}

/// The board as plain text, one line per visible migration.
pub fn board_text(state: &State) -> String {
    let all_ns = state.all_namespaces();
    let mut rows: Vec<Vec<String>> = vec![];
    let mut head = vec![column::NAME];
    if all_ns {
        head.push(column::NAMESPACE);
    }
    head.extend([
        column::WAVE,
        column::PHASE,
        column::PROGRESS,
        column::CONDITIONS,
        column::ATTEMPT,
        column::IN_PHASE,
        column::MESSAGE,
    ]);
    rows.push(head.into_iter().map(str::to_owned).collect());
    for r in state.index.visible_range(0, state.index.visible_len()) {
        let mut cells = vec![r.key.name.clone()];
        if all_ns {
            cells.push(r.key.namespace.clone());
        }
        let pips: String = r
            .pips
            .iter()
            .map(|s| match s {
                ferry_crds::ConditionStatus::True => 'T',
                ferry_crds::ConditionStatus::False => 'F',
                ferry_crds::ConditionStatus::Unknown => '-',
            })
            .collect();
        cells.extend([
            r.wave.clone().unwrap_or_else(|| strings::NONE.into()),
            r.phase.as_str().to_owned(),
            r.percent.map_or(strings::NONE.into(), format::percent),
            pips,
            r.attempt.to_string(),
            format::age(r.phase_since, state.now),
            r.message.clone(),
        ]);
        rows.push(cells);
    }
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == cols {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The board as JSON: an array of migrations with the board's columns.
pub fn board_json(state: &State) -> serde_json::Value {
    let items: Vec<serde_json::Value> = state
        .index
        .visible_range(0, state.index.visible_len())
        .map(|r| {
            let conditions: serde_json::Map<String, serde_json::Value> = ConditionType::ALL
                .iter()
                .zip(r.pips.iter())
                .map(|(t, s)| (t.as_str().to_owned(), json!(s.as_str())))
                .collect();
            json!({
                "namespace": r.key.namespace,
                "name": r.key.name,
                "wave": r.wave,
                "phase": r.phase.as_str(),
                "percent": r.percent,
                "rateBytesPerSecond": r.rate,
                "conditions": conditions,
                "attempt": r.attempt,
                "inPhaseSeconds": r.phase_since.map(|t| format::secs_between(t, state.now)),
                "message": r.message,
                "cancel": r.cancel,
                "paused": r.paused,
                "retry": r.retry,
            })
        })
        .collect();
    json!(items)
}

/// What happened to one named object.
#[derive(Debug)]
pub struct ActResult {
    /// The object.
    pub target: Target,
    /// The API server's answer, or why it was skipped.
    pub result: Result<Outcome, String>,
}

/// Applies `verb` to the named migrations of `ns` (or, with only `wave`, to that MigrationWave).
///
/// # Errors
/// Listing the objects failed.
pub async fn act(
    cluster: &Cluster,
    ns: &str,
    verb: Verb,
    names: &[String],
    wave: Option<&str>,
) -> Result<Vec<ActResult>> {
    let mut state = load(cluster, Scope::Namespace(ns.to_owned()), None).await?;
    let targets: Vec<Target> = if names.is_empty() {
        wave.map(|w| Target {
            kind: TargetKind::Wave,
            key: crate::state::ObjKey::new(ns, w),
        })
        .into_iter()
        .collect()
    } else {
        names
            .iter()
            .map(|n| Target {
                kind: TargetKind::Migration,
                key: crate::state::ObjKey::new(ns, n),
            })
            .collect()
    };
    let mut out = vec![];
    let mut keep = vec![];
    for t in targets {
        let in_wave = match (wave, t.kind) {
            (Some(w), TargetKind::Migration) => state
                .index
                .get(&t.key)
                .is_none_or(|r| r.wave.as_deref() == Some(w)),
            _ => true,
        };
        if in_wave {
            keep.push(t);
        } else {
            out.push(ActResult {
                target: t,
                result: Err(strings::not_in_wave(wave.unwrap_or(""))),
            });
        }
    }
    let c = plan(&state, verb, keep);
    for (t, why) in &c.skipped {
        let result = if [skip::NOT_ON_THE_BOARD, skip::NOT_IN_THE_WAVE_STRIP].contains(why) {
            Ok(Outcome::NotFound)
        } else {
            Err(strings::skipped(why))
        };
        out.push(ActResult {
            target: t.clone(),
            result,
        });
    }
    for fx in execute(&mut state, c) {
        if let Some(Action::Outcome {
            target, outcome, ..
        }) = actions::run(cluster.client.clone(), fx).await
        {
            out.push(ActResult {
                target,
                result: Ok(outcome),
            });
        }
    }
    Ok(out)
}
