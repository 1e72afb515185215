//! The two idempotent writes every controller of ferry makes on its children: create-if-absent
//! under a deterministic name, and delete-if-present. Each counts itself in the write metrics.

use std::fmt::Debug;

use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use crate::Result;
use crate::error::{is_already_exists, is_not_found};
use crate::metrics::Metrics;

/// Creates `obj` under `field_manager` unless an object of that name exists; returns whether it
/// created it. An existing object is *not* checked here: who owns it is the caller's question.
///
/// # Errors
/// Kubernetes API errors other than "already exists".
pub async fn create_if_absent<K>(
    metrics: &Metrics,
    api: &Api<K>,
    obj: &K,
    field_manager: &str,
) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    Ok(create_as(metrics, api, obj, field_manager).await?.is_some())
}

/// Creates `obj` under the controller's field manager; returns the uid the API server gave it,
/// or `None` when an object of that name exists (never taken as the one asked for).
///
/// # Errors
/// Kubernetes API errors other than "already exists".
pub async fn create<K>(metrics: &Metrics, api: &Api<K>, obj: &K) -> Result<Option<String>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    create_as(
        metrics,
        api,
        obj,
        ferry_crds::names::CONTROLLER_FIELD_MANAGER,
    )
    .await
}

async fn create_as<K>(
    metrics: &Metrics,
    api: &Api<K>,
    obj: &K,
    field_manager: &str,
) -> Result<Option<String>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let params = PostParams {
        field_manager: Some(field_manager.to_owned()),
        ..PostParams::default()
    };
    match api.create(&params, obj).await {
        Ok(made) => {
            metrics.write("create", &K::kind(&()));
            info!(kind = %K::kind(&()), name = %obj.name_any(), "created");
            Ok(Some(made.uid().unwrap_or_default()))
        }
        Err(e) if is_already_exists(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Deletes `name` (background propagation) if it exists; returns whether it asked.
///
/// # Errors
/// Kubernetes API errors other than "not found".
pub async fn delete_if_present<K>(metrics: &Metrics, api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            metrics.write("delete", &K::kind(&()));
            info!(kind = %K::kind(&()), %name, "deleted");
            Ok(true)
        }
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the object `name` only if it is still the one with `uid` (a precondition the API
/// server checks): an object of the same name made meanwhile by someone else is never touched.
/// Returns whether it asked.
///
/// # Errors
/// Kubernetes API errors other than "not found" and a failed precondition (the object is gone or
/// is another one: nothing of ours to delete).
pub async fn delete_exact<K>(metrics: &Metrics, api: &Api<K>, name: &str, uid: &str) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    delete_exact_as(metrics, api, name, uid, DeleteParams::background()).await
}

/// [`delete_exact`] in the foreground: the object stays (with its deletion timestamp) until
/// the garbage collector has removed its dependents — a Job's pods, so no writer is left once
/// it is gone.
///
/// # Errors
/// Kubernetes API errors other than not-found and a changed uid.
pub async fn delete_exact_foreground<K>(
    metrics: &Metrics,
    api: &Api<K>,
    name: &str,
    uid: &str,
) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    delete_exact_as(metrics, api, name, uid, DeleteParams::foreground()).await
}

async fn delete_exact_as<K>(
    metrics: &Metrics,
    api: &Api<K>,
    name: &str,
    uid: &str,
    how: DeleteParams,
) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..how
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            metrics.write("delete", &K::kind(&()));
            info!(kind = %K::kind(&()), %name, "deleted");
            Ok(true)
        }
        Err(e) if is_not_found(&e) => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
