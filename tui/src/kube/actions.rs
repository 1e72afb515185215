//! Mutations as the state asked for them: JSON merge patches on `spec`, and deletes, each with
//! its outcome.

use ::kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
};
use ferry_crds::{MigrationWave, VirtualMachineMigration, names::COCKPIT_FIELD_MANAGER};

use crate::state::{Action, Effect, Outcome, Target, TargetKind};

/// The outcome of a request.
pub fn outcome_of<T>(res: Result<T, ::kube::Error>) -> Outcome {
    match res {
        Ok(_) => Outcome::Applied,
        Err(::kube::Error::Api(s)) => match s.code {
            403 => Outcome::Forbidden(s.message.clone()),
            404 => Outcome::NotFound,
            409 => Outcome::Conflict,
            _ => Outcome::Failed(s.message.clone()),
        },
        Err(e) => Outcome::Failed(super::one_line(&e)),
    }
}

async fn patch<K>(api: Api<K>, name: &str, body: &serde_json::Value) -> Outcome
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let pp = PatchParams {
        field_manager: Some(COCKPIT_FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    outcome_of(api.patch(name, &pp, &Patch::Merge(body)).await)
}

async fn delete<K>(api: Api<K>, name: &str) -> Outcome
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    outcome_of(api.delete(name, &DeleteParams::default()).await)
}

/// Runs a `Patch` or `Delete` effect; returns the outcome action (`None` for other effects).
pub async fn run(client: Client, effect: Effect) -> Option<Action> {
    let (id, target, body) = match effect {
        Effect::Patch { id, target, patch } => (id, target, Some(patch)),
        Effect::Delete { id, target } => (id, target, None),
        _ => return None,
    };
    let Target { kind, key } = &target;
    let outcome = match (kind, &body) {
        (TargetKind::Migration, Some(b)) => {
            patch(
                Api::<VirtualMachineMigration>::namespaced(client, &key.namespace),
                &key.name,
                b,
            )
            .await
        }
        (TargetKind::Migration, None) => {
            delete(
                Api::<VirtualMachineMigration>::namespaced(client, &key.namespace),
                &key.name,
            )
            .await
        }
        (TargetKind::Wave, Some(b)) => {
            patch(
                Api::<MigrationWave>::namespaced(client, &key.namespace),
                &key.name,
                b,
            )
            .await
        }
        (TargetKind::Wave, None) => {
            delete(
                Api::<MigrationWave>::namespaced(client, &key.namespace),
                &key.name,
            )
            .await
        }
    };
    tracing::info!(verb = ?body.as_ref().map(|_| "patch").unwrap_or("delete"), object = %key, ?outcome, "action");
    Some(Action::Outcome {
        id,
        target,
        outcome,
    })
}
