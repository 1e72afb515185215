//! The plain commands for scripts: `ferry board --once` and `ferry cancel|retry|pause|resume|
//! delete`. They reuse the state's rules, so a script and a key press do the same thing.

use ::kube::{Api, ResourceExt, api::ListParams};
use ferry_crds::{ConditionType, MigrationWave, Severity, VirtualMachineMigration};
use serde_json::json;

use crate::{
    error::Result,
    kube::{Cluster, actions},
    state::{
        Action, ClusterId, ClusterView, ConnState, ObjKey, Outcome, Resource, Row, Scope, State,
        Target, TargetKind, Verb, execute, plan, update,
    },
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

/// How long `ferry board --once` waits for one cluster's lists.
const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What listing one cluster failed with, as the board's connection state says it.
fn list_failed(e: &::kube::Error) -> ConnState {
    match e {
        ::kube::Error::Api(s) if s.code == 403 => ConnState::Forbidden(s.message.clone()),
        ::kube::Error::Api(s) if s.code == 404 => ConnState::CrdMissing,
        e => ConnState::Reconnecting {
            retry_at: k8s_openapi::jiff::Timestamp::now(),
            attempt: 1,
            error: crate::kube::one_line(e),
        },
    }
}

async fn list_one(
    cluster: &Cluster,
    scope: &Scope,
) -> std::result::Result<(Vec<VirtualMachineMigration>, Vec<MigrationWave>), ConnState> {
    let lists = async {
        let vmms = api::<VirtualMachineMigration>(cluster, scope)
            .list(&ListParams::default())
            .await?;
        let waves = api::<MigrationWave>(cluster, scope)
            .list(&ListParams::default())
            .await?;
        Ok::<_, ::kube::Error>((vmms.items, waves.items))
    };
    match tokio::time::timeout(LIST_TIMEOUT, lists).await {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(e)) => Err(list_failed(&e)),
        Err(_) => Err(ConnState::Reconnecting {
            retry_at: k8s_openapi::jiff::Timestamp::now(),
            attempt: 1,
            error: strings::timed_out(LIST_TIMEOUT.as_secs()),
        }),
    }
}

/// Lists migrations and waves of every cluster (each on `scope`, else its context's
/// namespace) into a fresh state, as the watches would; a cluster that cannot be listed keeps
/// no rows and says why in its connection state.
pub async fn load_all(clusters: &[Cluster], scope: Option<Scope>, wave: Option<String>) -> State {
    load_all_keeping(clusters, scope, wave, false).await.0
}

/// As [`load_all`], and the listed migrations with their clusters: what `ferry report` reads,
/// which the state's rows do not keep.
pub async fn load_all_with_objects(
    clusters: &[Cluster],
    scope: Option<Scope>,
    wave: Option<String>,
) -> (State, Vec<(ClusterId, VirtualMachineMigration)>) {
    load_all_keeping(clusters, scope, wave, true).await
}

async fn load_all_keeping(
    clusters: &[Cluster],
    scope: Option<Scope>,
    wave: Option<String>,
    keep: bool,
) -> (State, Vec<(ClusterId, VirtualMachineMigration)>) {
    let views = clusters
        .iter()
        .map(|c| {
            let s = scope
                .clone()
                .unwrap_or_else(|| Scope::Namespace(c.namespace.clone()));
            ClusterView::new(&c.context, s)
        })
        .collect();
    let mut state = State::with_clusters(views, false, k8s_openapi::jiff::Timestamp::now());
    let lists = futures::future::join_all(
        clusters
            .iter()
            .zip(state.clusters.iter())
            .map(|(c, v)| list_one(c, &v.scope)),
    )
    .await;
    let mut kept = vec![];
    for (i, listed) in lists.into_iter().enumerate() {
        let c = ClusterId(u16::try_from(i).unwrap_or(u16::MAX));
        match listed {
            Ok((vmms, waves)) => {
                // Rows are made from borrowed objects: the report keeps them, none is copied.
                let rows = vmms.iter().map(|o| Row::of(c, o)).collect();
                update(&mut state, Action::MigrationsListed(c, rows));
                if keep {
                    kept.extend(vmms.into_iter().map(|o| (c, o)));
                }
                update(&mut state, Action::WavesListed(c, waves));
                for r in [Resource::Migrations, Resource::Waves] {
                    update(&mut state, Action::Connection(c, r, ConnState::Live));
                }
            }
            Err(why) => {
                update(&mut state, Action::Connection(c, Resource::Migrations, why));
            }
        }
    }
    if let Some(w) = wave {
        update(&mut state, Action::Command(format!("wave {w}")));
    }
    (state, kept)
}

/// Lists migrations and waves of `scope` in one cluster into a fresh state.
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
    let c = ClusterId::default();
    update(&mut state, Action::migrations_listed(c, vmms.items));
    update(&mut state, Action::WavesListed(c, waves.items));
    if let Some(w) = wave {
        update(&mut state, Action::Command(format!("wave {w}")));
    }
    Ok(state)
}

/// A cluster's state for scripts: a word, and the error or refusal when there is one.
pub fn state_word(s: &ConnState) -> (&'static str, Option<&str>) {
    match s {
        ConnState::Live => ("live", None),
        ConnState::Connecting | ConnState::Listing => ("connecting", None),
        ConnState::Reconnecting { error, .. } => ("unreachable", Some(error.as_str())),
        ConnState::Forbidden(m) => ("forbidden", Some(m.as_str())),
        ConnState::CrdMissing => ("crd-missing", Some(strings::CRD_HINT)),
    }
}

/// Whether every cluster of a loaded state was listed.
pub fn all_listed(state: &State) -> bool {
    state.clusters.iter().all(|c| c.conn.migrations.is_live())
}

fn table(rows: Vec<Vec<String>>) -> String {
    let cols = rows.first().map_or(0, Vec::len);
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

/// The board as plain text, one line per visible migration; with several clusters, their
/// states first, then a CLUSTER column; then preflight's concerns of the migrations that have
/// any.
pub fn board_text(state: &State) -> String {
    let all_ns = state.all_namespaces();
    let multi = state.multi_cluster();
    let mut out = String::new();
    if multi {
        let mut rows = vec![vec![
            column::CONTEXT.to_owned(),
            column::STATE.to_owned(),
            column::ERROR.to_owned(),
        ]];
        for c in &state.clusters {
            let (word, why) = state_word(&c.conn.migrations);
            rows.push(vec![
                c.context.clone(),
                word.to_owned(),
                why.unwrap_or("").to_owned(),
            ]);
        }
        out.push_str(&table(rows));
        out.push('\n');
    }
    let mut rows: Vec<Vec<String>> = vec![];
    let mut head = vec![];
    if multi {
        head.push(column::CLUSTER);
    }
    head.push(column::NAME);
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
        let mut cells = vec![];
        if multi {
            cells.push(state.context_of(r.key.cluster).to_owned());
        }
        cells.push(r.key.name.clone());
        if all_ns {
            cells.push(r.key.namespace.clone());
        }
        let pips: String = r.pips.iter().map(|p| p.letter()).collect();
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
    out.push_str(&table(rows));
    out.push_str(&concerns_text(state));
    out
}

/// Preflight's concerns of each visible migration that has any, after the board: the migration
/// (and whether preflight holds it), then one line per concern — severity, code, message — to
/// paste into a change ticket. Empty when no migration has a concern.
fn concerns_text(state: &State) -> String {
    let multi = state.multi_cluster();
    let rows: Vec<_> = state
        .index
        .visible_range(0, state.index.visible_len())
        .filter_map(|r| Some((r, r.preflight().filter(|p| !p.concerns.is_empty())?)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let code_w = rows
        .iter()
        .flat_map(|(_, p)| &p.concerns)
        .map(|c| c.code.as_str().len())
        .max()
        .unwrap_or(0);
    let mut out = format!("\n{}\n", column::PREFLIGHT);
    for (r, p) in rows {
        let mut head = if multi {
            format!("{}/{}", state.context_of(r.key.cluster), r.key)
        } else {
            r.key.to_string()
        };
        if r.held_by.is_some() {
            head.push_str(&format!("  {}", strings::preflight::HELD));
        }
        out.push_str(&head);
        out.push('\n');
        for c in &p.concerns {
            let mut line = format!(
                "  {:<8}  {:<code_w$}  {}",
                c.severity.as_str(),
                c.code.as_str(),
                c.message.split_whitespace().collect::<Vec<_>>().join(" ")
            );
            if c.severity == Severity::Critical && p.accepted.contains(&c.code) {
                line.push_str(&format!(" ({})", strings::preflight::ACCEPTED));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// The board as JSON: the clusters with their states, and the migrations with the board's
/// columns, their cluster and their last preflight (`status.preflight` as the API has it).
pub fn board_json(state: &State) -> serde_json::Value {
    let clusters: Vec<serde_json::Value> = state
        .clusters
        .iter()
        .map(|c| {
            let (word, why) = state_word(&c.conn.migrations);
            json!({
                "context": c.context,
                "namespace": c.scope.namespace(),
                "state": word,
                "error": why,
            })
        })
        .collect();
    let items: Vec<serde_json::Value> = state
        .index
        .visible_range(0, state.index.visible_len())
        .map(|r| {
            let conditions: serde_json::Map<String, serde_json::Value> = ConditionType::ALL
                .iter()
                .filter(|t| t.on_the_board())
                .zip(r.conditions.iter())
                .map(|(t, s)| (t.as_str().to_owned(), json!(s.as_str())))
                .collect();
            json!({
                "cluster": state.context_of(r.key.cluster),
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
                "heldByPreflight": r.held_by.is_some(),
                "preflight": r.preflight(),
                "cancel": r.cancel,
                "paused": r.paused,
                "retry": r.retry,
            })
        })
        .collect();
    json!({ "clusters": clusters, "migrations": items })
}

/// `ferry report`: the report of the `listed` migrations (each with its cluster) that a loaded
/// state shows (its wave scope, its namespaces), at the state's clock. The state's rows keep no
/// object ([`crate::state::Row`]), so the command keeps its list for this.
pub fn report<'a>(
    state: &State,
    listed: impl IntoIterator<Item = (ClusterId, &'a VirtualMachineMigration)>,
) -> crate::report::Report {
    let wave = state.index.wave_scope().map(|w| w.name.clone());
    let shown = listed.into_iter().filter_map(|(c, o)| {
        let key = ObjKey::at(c, o.namespace().unwrap_or_default(), o.name_any());
        state.index.position(&key).map(|_| o)
    });
    // Each wave's first forecast of its end, from the waves the state holds.
    let forecasts = state
        .waves
        .iter()
        .filter_map(|w| Some((w.key.name.clone(), crate::report::first_forecast(&w.obj)?)))
        .collect();
    crate::report::build(shown, &forecasts, wave.as_deref(), state.now)
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
