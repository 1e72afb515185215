//! Proof that the lab is a real cluster: the apiserver's own behaviours, RBAC and the garbage
//! collector, each observed through the public API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use kube::config::KubeConfigOptions;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;

use ferry_harness::{eventually, lab};

const WAIT: Duration = Duration::from_secs(60);

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[tokio::test]
async fn apiserver_reports_kubernetes_1_37() {
    let client = lab().client().await.unwrap();
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(
        (info.major.as_str(), info.minor.as_str()),
        ("1", "37"),
        "{info:?}"
    );
    assert!(
        info.git_version.starts_with("v1.37."),
        "{}",
        info.git_version
    );
}

#[tokio::test]
async fn crd_schema_rejects_an_invalid_object() {
    let client = lab().client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.lab.ferry.test"},
        "spec": {
            "group": "lab.ferry.test",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1}
                    }}
                }}}
            }]
        }
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(e) if status_code(&e) == Some(409) => {}
        Err(e) => panic!("creating the CRD: {e}"),
    }
    eventually("widgets CRD to be established", WAIT, || async {
        let crd = crds.get("widgets.lab.ferry.test").await.ok()?;
        let established = crd
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await
    .unwrap();

    let ns = lab().namespace("crd-schema").await.unwrap();
    let gvk = GroupVersionKind::gvk("lab.ferry.test", "v1", "Widget");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    );
    let mut bad = DynamicObject::new(
        "too-small",
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    );
    bad.data = serde_json::json!({"spec": {"size": 0}});
    // The object may race the discovery of the new type for a moment; a 404 is retried.
    let err = eventually("the apiserver to judge the widget", WAIT, || async {
        match api.create(&PostParams::default(), &bad).await {
            Err(e) if status_code(&e) == Some(404) => None,
            other => Some(other),
        }
    })
    .await
    .unwrap()
    .expect_err("a widget with size 0 must be rejected");
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.size"),
        "message must name the field: {}",
        status.message
    );

    let mut good = bad.clone();
    good.metadata.name = Some("just-right".into());
    good.data = serde_json::json!({"spec": {"size": 3}});
    api.create(&PostParams::default(), &good).await.unwrap();
}

#[tokio::test]
async fn watch_delivers_an_update() {
    let ns = lab().namespace("watch").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    api.create(&PostParams::default(), &configmap("watched", "one"))
        .await
        .unwrap();

    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields("metadata.name=watched"),
    );
    let mut stream = std::pin::pin!(stream);
    // Wait until the initial list is through, so the update below can only arrive as an event.
    loop {
        match stream.try_next().await.unwrap() {
            Some(watcher::Event::InitDone) => break,
            Some(_) => continue,
            None => panic!("watch ended before its initial list"),
        }
    }
    let mut cm = api.get("watched").await.unwrap();
    cm.data = Some([("k".to_string(), "two".to_string())].into());
    api.replace("watched", &PostParams::default(), &cm)
        .await
        .unwrap();

    let seen = tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(cm)) = event
                && cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("k"))
                    .map(String::as_str)
                    == Some("two")
            {
                return true;
            }
        }
        false
    })
    .await
    .expect("no update event within the deadline");
    assert!(seen, "the watch ended without delivering the update");
}

#[tokio::test]
async fn stale_resource_version_gets_409_conflict() {
    let ns = lab().namespace("conflict").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    api.create(&PostParams::default(), &configmap("contended", "a"))
        .await
        .unwrap();
    let stale = api.get("contended").await.unwrap();

    let mut first = stale.clone();
    first.data = Some([("k".to_string(), "b".to_string())].into());
    api.replace("contended", &PostParams::default(), &first)
        .await
        .unwrap();

    let mut second = stale;
    second.data = Some([("k".to_string(), "c".to_string())].into());
    let err = api
        .replace("contended", &PostParams::default(), &second)
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(409), "{err}");
    let now = api.get("contended").await.unwrap();
    assert_eq!(
        now.data.unwrap()["k"],
        "b",
        "the losing write must not have landed"
    );
}

#[tokio::test]
async fn rbac_denies_a_service_account_without_a_role_and_allows_it_with_one() {
    let ns = lab().namespace("rbac").await.unwrap();
    let sa: Api<ServiceAccount> = ns.api();
    sa.create(
        &PostParams::default(),
        &ServiceAccount {
            metadata: ObjectMeta {
                name: Some("reader".into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        },
    )
    .await
    .unwrap();
    let ns_cms: Api<ConfigMap> = ns.api();
    ns_cms
        .create(&PostParams::default(), &configmap("secretive", "x"))
        .await
        .unwrap();

    let mut config = lab().config(KubeConfigOptions::default()).await.unwrap();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{}:reader", ns.name));
    let as_reader = kube::Client::try_from(config).unwrap();
    let reader_cms: Api<ConfigMap> = Api::namespaced(as_reader, &ns.name);

    let err = reader_cms.get("secretive").await.unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");

    let roles: Api<Role> = ns.api();
    roles
        .create(
            &PostParams::default(),
            &Role {
                metadata: ObjectMeta {
                    name: Some("read-configmaps".into()),
                    ..ObjectMeta::default()
                },
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["configmaps".into()]),
                    verbs: vec!["get".into(), "list".into()],
                    ..PolicyRule::default()
                }]),
            },
        )
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = ns.api();
    bindings
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: ObjectMeta {
                    name: Some("reader-reads".into()),
                    ..ObjectMeta::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "read-configmaps".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "reader".into(),
                    namespace: Some(ns.name.clone()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .unwrap();
    // The authorizer's cache follows the new binding within moments.
    let cm = eventually("the reader to be allowed", WAIT, || async {
        reader_cms.get("secretive").await.ok()
    })
    .await
    .unwrap();
    assert_eq!(cm.data.unwrap()["k"], "x");
    // Still only what the Role grants.
    let err = reader_cms
        .delete("secretive", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");
}

#[tokio::test]
async fn deleting_an_owner_deletes_its_dependents() {
    let ns = lab().namespace("gc").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    let owner = api
        .create(&PostParams::default(), &configmap("owner", "o"))
        .await
        .unwrap();
    let mut dependent = configmap("dependent", "d");
    dependent.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().unwrap(),
        ..OwnerReference::default()
    }]);
    api.create(&PostParams::default(), &dependent)
        .await
        .unwrap();

    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "the garbage collector to delete the dependent",
        WAIT,
        || async {
            match api.get_opt("dependent").await {
                Ok(None) => Some(()),
                _ => None,
            }
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_namespace_deletion_completes() {
    let client = lab().client().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let name = "ferry-ns-deletion-test";
    // A previous aborted run may have left it terminating; wait for that first.
    eventually("an old test namespace to be gone", WAIT, || async {
        matches!(namespaces.get_opt(name).await, Ok(None)).then_some(())
    })
    .await
    .unwrap();
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), name);
    cms.create(&PostParams::default(), &configmap("content", "c"))
        .await
        .unwrap();

    namespaces
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the namespace controller to finish the deletion",
        WAIT,
        || async { matches!(namespaces.get_opt(name).await, Ok(None)).then_some(()) },
    )
    .await
    .unwrap();
}
