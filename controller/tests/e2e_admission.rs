//! The admission policies of `deploy/controller`, as the lab's API server enforces them.
//!
//! * `ferry-authoring`: a user bound to `ferry-operate` (impersonated with `--as`) may change
//!   the intents and nothing else; every other change and every create is refused with a message
//!   naming the field and `ferry-edit`; a user bound to `ferry-edit` makes the same changes.
//! * `ferry-controller-blast-radius`: the controller's ServiceAccount (impersonated) is refused
//!   what ferry never makes — a privileged Job, a service-account-token Secret, a Job of another
//!   image, a hostPath, a mounted token, unlabelled ConfigMaps — by the policy's own message (it
//!   holds the RBAC rights to create all of them), and is let through with what ferry makes.
//!
//! The policies are applied as `deploy/controller` ships them; their bindings are narrowed to
//! the test's namespace ([`install_deploy`]): the lab is shared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ferry_crds::names::{HOLD_ANNOTATION, MIGRATION_LABEL, MIGRATION_UID_LABEL, WAVE_LABEL};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use serde_json::{Value, json};

/// Who a request is made as: `None` is the lab's admin.
type As<'a> = Option<(&'a str, &'a [&'a str])>;

/// `kubectl ARGS` in the test's namespace as `who`: Ok(stdout) or Err(stdout + stderr).
fn kubectl_as(env: &Env, who: As<'_>, args: &[&str]) -> Result<String, String> {
    let mut cmd = env.lab.kubectl();
    cmd.args(["-n", &env.ns.name]);
    if let Some((user, groups)) = who {
        cmd.args(["--as", user]);
        for g in groups {
            cmd.args(["--as-group", g]);
        }
    }
    let out = cmd.args(args).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(said)
    } else {
        Err(said + &String::from_utf8_lossy(&out.stderr))
    }
}

/// Patches `kind/name` as `who` (`ty`: merge or json).
fn patch_as(
    env: &Env,
    who: As<'_>,
    kind: &str,
    name: &str,
    ty: &str,
    patch: &Value,
) -> Result<String, String> {
    kubectl_as(
        env,
        who,
        &["patch", kind, name, "--type", ty, "-p", &patch.to_string()],
    )
}

/// Creates `obj` as `who` (server-side dry run when `dry`: admission runs, nothing is stored).
fn create_as(env: &Env, who: As<'_>, obj: &Value, dry: bool) -> Result<String, String> {
    let file = env.scratch.join(format!(
        "obj-{}.json",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::write(&file, serde_json::to_vec(obj).unwrap()).unwrap();
    let mut args = vec!["create", "-f", file.to_str().unwrap()];
    if dry {
        args.push("--dry-run=server");
    }
    kubectl_as(env, who, &args)
}

fn bind(env: &Env, user: &str, role: &str) {
    env.lab
        .kubectl_ok(&[
            "create",
            "rolebinding",
            user,
            "-n",
            &env.ns.name,
            "--clusterrole",
            role,
            "--user",
            user,
        ])
        .unwrap();
}

/// Waits until the aggregation controller gave `role` a rule with `verb`.
async fn aggregated(env: &Env, role: &str, verb: &str) {
    let kc = kube::config::Kubeconfig::read_from(&env.lab.info.kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let roles: Api<ClusterRole> = Api::all(kube::Client::try_from(cfg).unwrap());
    ferry_harness::eventually(
        &format!("{role} aggregated with {verb}"),
        Duration::from_secs(60),
        || async {
            roles
                .get(role)
                .await
                .ok()
                .and_then(|c| c.rules)
                .filter(|r| r.iter().any(|r| r.verbs.iter().any(|v| v == verb)))
        },
    )
    .await
    .unwrap();
}

fn wave(env: &Env, name: &str) -> Value {
    json!({
        "apiVersion": "migration.platform.example/v1alpha1",
        "kind": "MigrationWave",
        "metadata": {"name": name, "namespace": env.ns.name},
        "spec": {
            "maxInFlight": 1,
            "template": serde_json::to_value(env.wave_template()).unwrap(),
            "vms": [{"name": "vm-a"}],
        },
    })
}

fn migration_json(env: &Env, name: &str) -> Value {
    let mut v = serde_json::to_value(env.migration(name)).unwrap();
    v["metadata"]["namespace"] = env.ns.name.clone().into();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_steers_and_only_an_editor_authors() {
    let env = Env::new("e2e-admission", 1).await;
    let _deployed = install_deploy(&env).await;
    let (operator, editor) = (
        format!("operator-{}", env.ns.name),
        format!("editor-{}", env.ns.name),
    );
    bind(&env, &operator, "ferry-operate");
    bind(&env, &editor, "ferry-edit");
    aggregated(&env, "ferry-operate", "patch").await;
    aggregated(&env, "ferry-edit", "author").await;
    let op: As<'_> = Some((&operator, &[]));
    let ed: As<'_> = Some((&editor, &[]));

    // Made by the admin (who holds every right); no controller runs: both stay Pending, where
    // the CRDs' own rules let staging and conversion change, so only the policy decides.
    create_as(&env, None, &migration_json(&env, "m"), false).unwrap();
    create_as(&env, None, &wave(&env, "w"), false).unwrap();

    // The binding takes effect when the API server's policy informer has it.
    let staging = json!({"spec": {"staging": {"prefix": "elsewhere"}}});
    let said = ferry_harness::eventually(
        "the authoring policy to refuse the operator",
        Duration::from_secs(60),
        || async {
            patch_as(&env, op, "virtualmachinemigration", "m", "merge", &staging)
                .err()
                .filter(|e| e.contains("ferry-edit"))
        },
    )
    .await
    .unwrap();
    assert!(said.contains("spec.staging"), "{said}");

    // The operator steers: every intent passes.
    for (kind, name, patch) in [
        (
            "virtualmachinemigration",
            "m",
            json!({"spec": {"paused": true}}),
        ),
        (
            "virtualmachinemigration",
            "m",
            json!({"spec": {"retry": 1}}),
        ),
        (
            "virtualmachinemigration",
            "m",
            json!({"spec": {"cancel": true}}),
        ),
        (
            "virtualmachinemigration",
            "m",
            json!({"metadata": {"annotations": {"migration.platform.example/abandon-cleanup": "true"}}}),
        ),
        ("migrationwave", "w", json!({"spec": {"paused": true}})),
        ("migrationwave", "w", json!({"spec": {"maxInFlight": 3}})),
        ("migrationwave", "w", json!({"spec": {"retry": 1}})),
        ("migrationwave", "w", json!({"spec": {"cancel": true}})),
    ] {
        patch_as(&env, op, kind, name, "merge", &patch)
            .unwrap_or_else(|e| panic!("the operator's {patch} on {kind}/{name}: {e}"));
    }
    // A warm migration's cutover is the operator's act too; the rest of spec.warm is not.
    let mut warm = migration_json(&env, "mw");
    warm["spec"]["mode"] = json!("Warm");
    warm["spec"]["warm"] = json!({"precopyIntervalSeconds": 3600});
    create_as(&env, None, &warm, false).unwrap();
    patch_as(
        &env,
        op,
        "virtualmachinemigration",
        "mw",
        "merge",
        &json!({"spec": {"warm": {"cutover": true}}}),
    )
    .unwrap_or_else(|e| panic!("the operator's cutover: {e}"));
    assert!(
        env.get("mw").await.spec.warm.is_some_and(|w| w.cutover),
        "cut over"
    );
    let err = patch_as(
        &env,
        op,
        "virtualmachinemigration",
        "mw",
        "merge",
        &json!({"spec": {"warm": {"precopyIntervalSeconds": 60}}}),
    )
    .unwrap_err();
    assert!(
        err.contains("spec.warm.precopyIntervalSeconds") && err.contains("ferry-edit"),
        "{err}"
    );
    // Who owns a migration, and what its deletion waits for, are not intents: an owner
    // reference would move the lone migration into the wave, which then steers it.
    let wave_uid = kubectl_as(
        &env,
        None,
        &[
            "get",
            "migrationwave",
            "w",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    )
    .unwrap();
    let adopt = json!([{"op": "add", "path": "/metadata/ownerReferences", "value": [{
        "apiVersion": ferry_crds::API_VERSION, "kind": "MigrationWave", "name": "w",
        "uid": wave_uid.trim(),
    }]}]);
    let err = patch_as(&env, op, "virtualmachinemigration", "m", "json", &adopt).unwrap_err();
    assert!(
        err.contains("metadata.ownerReferences") && err.contains("ferry-edit"),
        "{err}"
    );
    let finalize = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    let err = patch_as(&env, op, "virtualmachinemigration", "m", "merge", &finalize).unwrap_err();
    assert!(
        err.contains("metadata.finalizers") && err.contains("ferry-edit"),
        "{err}"
    );
    assert!(env.get("m").await.metadata.owner_references.is_none());
    let m = env.get("m").await;
    assert!(
        m.spec.paused && m.spec.cancel && m.spec.retry == 1,
        "{:?}",
        m.spec
    );
    let w: Value = serde_json::from_str(
        &kubectl_as(&env, None, &["get", "migrationwave", "w", "-o", "json"]).unwrap(),
    )
    .unwrap();
    assert_eq!(w["spec"]["maxInFlight"], 3);
    assert_eq!(w["spec"]["paused"], true);

    // Everything else is authoring: refused to the operator, naming the field and ferry-edit.
    let add_vm = json!([{"op": "add", "path": "/spec/vms/-", "value": {"name": "vm-b"}}]);
    let authoring: Vec<(&str, &str, &str, Value, String)> = vec![
        ("migrationwave", "w", "json", add_vm, "spec.vms".to_owned()),
        (
            "virtualmachinemigration",
            "m",
            "merge",
            staging.clone(),
            "spec.staging".to_owned(),
        ),
        (
            "virtualmachinemigration",
            "m",
            "merge",
            json!({"spec": {"conversion": {"format": "qcow2"}}}),
            "spec.conversion".to_owned(),
        ),
        (
            "migrationwave",
            "w",
            "merge",
            json!({"spec": {"template": {"staging": {"prefix": "elsewhere"}}}}),
            "spec.template.staging".to_owned(),
        ),
        (
            "migrationwave",
            "w",
            "merge",
            json!({"spec": {"template": {"conversion": {"format": "qcow2"}}}}),
            "spec.template.conversion".to_owned(),
        ),
        (
            "migrationwave",
            "w",
            "merge",
            json!({"spec": {"template": {"source": {"credentialsSecretRef": {"name": "other"}}}}}),
            "spec.template.source".to_owned(),
        ),
        (
            "migrationwave",
            "w",
            "merge",
            json!({"spec": {"template": {"target": {"storageClassName": "other"}}}}),
            "spec.template.target".to_owned(),
        ),
        (
            "virtualmachinemigration",
            "m",
            "merge",
            json!({"metadata": {"labels": {WAVE_LABEL: "w"}}}),
            format!("metadata.labels[{WAVE_LABEL}]"),
        ),
        (
            "virtualmachinemigration",
            "m",
            "merge",
            json!({"metadata": {"annotations": {HOLD_ANNOTATION: "wave"}}}),
            format!("metadata.annotations[{HOLD_ANNOTATION}]"),
        ),
    ];
    let before_m = env.get("m").await;
    for (kind, name, ty, patch, field) in &authoring {
        let err = patch_as(&env, op, kind, name, ty, patch).expect_err(&format!(
            "the operator may not change {field} of {kind}/{name}"
        ));
        assert!(
            err.contains(field.as_str()) && err.contains("needs the ferry-edit role"),
            "{kind}/{name} {field}: {err}"
        );
    }
    let after_m = env.get("m").await;
    assert_eq!(
        serde_json::to_value(&before_m.spec).unwrap(),
        serde_json::to_value(&after_m.spec).unwrap()
    );
    assert_eq!(before_m.metadata.labels, after_m.metadata.labels);
    let w: Value = serde_json::from_str(
        &kubectl_as(&env, None, &["get", "migrationwave", "w", "-o", "json"]).unwrap(),
    )
    .unwrap();
    assert_eq!(
        w["spec"]["vms"].as_array().map(Vec::len),
        Some(1),
        "no VM added"
    );

    // A migration's source and target: the CRD's own rule refuses a change to anyone (before
    // admission), so the operator is refused either way.
    for p in [
        json!({"spec": {"source": {"name": "other-vm"}}}),
        json!({"spec": {"target": {"name": "other"}}}),
    ] {
        for who in [op, ed] {
            let err = patch_as(&env, who, "virtualmachinemigration", "m", "merge", &p).unwrap_err();
            assert!(err.contains("is immutable"), "{p}: {err}");
        }
    }

    // Creating is authoring. ferry-operate has no RBAC `create` at all; a role of the
    // platform team's own that grants `create` without `author` meets the policy.
    let err = create_as(&env, op, &migration_json(&env, "m2"), false).unwrap_err();
    assert!(err.contains("cannot create resource"), "{err}");
    let creator = format!("creator-{}", env.ns.name);
    env.lab
        .kubectl_ok(&[
            "create",
            "role",
            &creator,
            "-n",
            &env.ns.name,
            "--verb=create",
            "--resource=virtualmachinemigrations.migration.platform.example,migrationwaves.migration.platform.example",
        ])
        .unwrap();
    env.lab
        .kubectl_ok(&[
            "create",
            "rolebinding",
            &creator,
            "-n",
            &env.ns.name,
            "--role",
            &creator,
            "--user",
            &creator,
        ])
        .unwrap();
    let cr: As<'_> = Some((&creator, &[]));
    let err = ferry_harness::eventually(
        "the creator's binding to take effect",
        Duration::from_secs(60),
        || async {
            create_as(&env, cr, &migration_json(&env, "m2"), false)
                .err()
                .filter(|e| !e.contains("cannot create resource"))
        },
    )
    .await
    .unwrap();
    assert!(
        err.contains("creating a VirtualMachineMigration needs the ferry-edit role"),
        "{err}"
    );
    let err = create_as(&env, cr, &wave(&env, "w2"), false).unwrap_err();
    assert!(
        err.contains("creating a MigrationWave needs the ferry-edit role"),
        "{err}"
    );

    // The editor authors: the same changes and creates pass.
    for (kind, name, ty, patch, field) in &authoring {
        patch_as(&env, ed, kind, name, ty, patch)
            .unwrap_or_else(|e| panic!("the editor's change of {field} of {kind}/{name}: {e}"));
    }
    let m = env.get("m").await;
    assert_eq!(m.spec.staging.prefix.as_deref(), Some("elsewhere"));
    assert_eq!(m.spec.conversion.format.as_str(), "qcow2");
    let w: Value = serde_json::from_str(
        &kubectl_as(&env, None, &["get", "migrationwave", "w", "-o", "json"]).unwrap(),
    )
    .unwrap();
    assert_eq!(w["spec"]["vms"].as_array().map(Vec::len), Some(2), "{w}");
    create_as(&env, ed, &migration_json(&env, "m2"), false).unwrap();
    create_as(&env, ed, &wave(&env, "w2"), false).unwrap();
}

/// A Job as the controller makes one (labels, image, Pod Security restricted), changed by `f`.
fn job(env: &Env, image: &str, f: impl FnOnce(&mut Value)) -> Value {
    let mut j = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "m-convert",
            "namespace": env.ns.name,
            "labels": ferry_labels(),
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "containers": [{
                        "name": "convert",
                        "image": image,
                        "command": ["ferry-controller"],
                        "args": ["convert", "--format", "raw"],
                        "env": [{"name": "FERRY_VSPHERE_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "vsphere", "key": "password"}}}],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        },
    });
    f(&mut j);
    j
}

fn ferry_labels() -> Value {
    json!({
        "app.kubernetes.io/managed-by": "ferry-controller",
        MIGRATION_LABEL: "m",
        MIGRATION_UID_LABEL: "00000000-0000-0000-0000-000000000001",
    })
}

fn secret(env: &Env, name: &str, ty: &str, labels: Value, keys: &[&str]) -> Value {
    let data: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), Value::from("eA==")))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": env.ns.name, "labels": labels},
        "type": ty,
        "data": data,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_service_account_may_make_only_ferrys_children() {
    let env = Env::new("e2e-admission-sa", 1).await;
    let deployed = install_deploy(&env).await;
    let image = deployed.converter_image.clone();
    let sa: As<'_> = Some((CONTROLLER_SA, &CONTROLLER_SA_GROUPS));

    // A privileged Job: the ServiceAccount may create Jobs (RBAC), the policy refuses this one.
    let privileged = job(&env, &image, |j| {
        j["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"privileged": true});
    });
    let err = ferry_harness::eventually(
        "the blast-radius policy to refuse a privileged Job",
        Duration::from_secs(60),
        || async {
            create_as(&env, sa, &privileged, true)
                .err()
                .filter(|e| e.contains("ferry-controller-blast-radius"))
        },
    )
    .await
    .unwrap();
    assert!(err.contains("must run as Pod Security restricted"), "{err}");
    // The same Job from a user the policy does not match passes admission: the refusal above
    // is the policy's, not an RBAC denial or the API's validation.
    create_as(&env, None, &privileged, true).unwrap();

    // A service-account-token Secret (with ferry's labels, and the annotation the API requires).
    let mut token = secret(
        &env,
        "stolen-token",
        "kubernetes.io/service-account-token",
        ferry_labels(),
        &[],
    );
    token["metadata"]["annotations"] = json!({"kubernetes.io/service-account.name": "default"});
    let err = create_as(&env, sa, &token, true).unwrap_err();
    assert!(
        err.contains("ferry-controller may write only Opaque Secrets"),
        "{err}"
    );
    create_as(&env, None, &token, true).unwrap();

    // Other shapes ferry never makes.
    let refused: Vec<(&str, Value, &str)> = vec![
        (
            "a Job of another image",
            job(&env, "docker.io/library/busybox:latest", |_| {}),
            "may run only the converter images",
        ),
        (
            "a Job mounting a token",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["automountServiceAccountToken"] = true.into();
            }),
            "must not mount a service account token",
        ),
        (
            "a Job with a hostPath",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["volumes"] =
                    json!([{"name": "root", "hostPath": {"path": "/"}}]);
            }),
            "mount only emptyDirs and the migration's own claims",
        ),
        (
            "a Job running as root",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] = false.into();
                j["spec"]["template"]["spec"]["containers"][0]["securityContext"]
                    .as_object_mut()
                    .unwrap()
                    .remove("runAsNonRoot");
            }),
            "must run as Pod Security restricted",
        ),
        (
            "a Job without seccomp",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["securityContext"]
                    .as_object_mut()
                    .unwrap()
                    .remove("seccompProfile");
            }),
            "seccomp RuntimeDefault",
        ),
        (
            "a Job without ferry's labels",
            job(&env, &image, |j| {
                j["metadata"]["labels"] = json!({});
            }),
            "only Jobs with a migration's labels",
        ),
        (
            "a Job running a shell",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["containers"][0]["command"] = json!(["/bin/sh"]);
                j["spec"]["template"]["spec"]["containers"][0]["args"] =
                    json!(["-c", "cat /var/run/secrets/*"]);
            }),
            "must run ferry's program",
        ),
        (
            "a Job running another subcommand of ferry's program",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["run"]);
            }),
            "must run ferry's program",
        ),
        (
            "a Job as another ServiceAccount",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["serviceAccountName"] = "builder".into();
            }),
            "no ServiceAccount but the namespace's default",
        ),
        (
            "a Job with a projected token",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["volumes"] = json!([{"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "https://kubernetes.default.svc"}}]}}]);
            }),
            "mount only emptyDirs and the migration's own claims",
        ),
        (
            "a Job mounting a Secret",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["volumes"] =
                    json!([{"name": "s", "secret": {"secretName": "tenant-db"}}]);
            }),
            "mount only emptyDirs and the migration's own claims",
        ),
        (
            "a Job mounting another migration's claim",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["volumes"] =
                    json!([{"name": "d", "persistentVolumeClaim": {"claimName": "other-disk-0"}}]);
            }),
            "mount only emptyDirs and the migration's own claims",
        ),
        (
            "a Job with envFrom",
            job(&env, &image, |j| {
                j["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
                    json!([{"secretRef": {"name": "tenant-db"}}]);
            }),
            "take their environment only as values",
        ),
        (
            "a CDI Secret with another key",
            secret(
                &env,
                "m-staging-s3",
                "Opaque",
                ferry_labels(),
                &["accessKeyId", "password"],
            ),
            "ferry-controller may write only Opaque Secrets",
        ),
        (
            "an unlabelled Secret",
            secret(
                &env,
                "m-staging-s3",
                "Opaque",
                json!({}),
                &["accessKeyId", "secretKey"],
            ),
            "ferry-controller may write only Opaque Secrets",
        ),
        (
            "an unlabelled ConfigMap",
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "m-staging-ca", "namespace": env.ns.name},
                "data": {"ca.pem": "PEM"},
            }),
            "may write only ConfigMaps with a migration's labels",
        ),
    ];
    for (what, obj, message) in &refused {
        let err = create_as(&env, sa, obj, true).expect_err(what);
        assert!(
            err.contains("ferry-controller-blast-radius") && err.contains(message),
            "{what}: {err}"
        );
    }

    // What ferry makes passes: the conversion Job, the CDI S3 Secret, the CA ConfigMap, the
    // proof key.
    let allowed: Vec<(&str, Value)> = vec![
        ("the conversion Job", job(&env, &image, |_| {})),
        (
            "the CDI S3 Secret",
            secret(
                &env,
                "m-staging-s3",
                "Opaque",
                ferry_labels(),
                &["accessKeyId", "secretKey"],
            ),
        ),
        (
            "the CA ConfigMap",
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "m-staging-ca", "namespace": env.ns.name, "labels": ferry_labels()},
                "data": {"ca.pem": "PEM"},
            }),
        ),
        (
            "the proof key",
            secret(
                &env,
                "ferry-controller-proof-key",
                "Opaque",
                json!({"app.kubernetes.io/managed-by": "ferry-controller"}),
                &["key"],
            ),
        ),
    ];
    for (what, obj) in &allowed {
        create_as(&env, sa, obj, true).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    let verify = job(&env, &image, |j| {
        j["metadata"]["name"] = "m-verify".into();
        let pod = &mut j["spec"]["template"]["spec"];
        pod["containers"][0]["args"] = json!(["verify", "--volume", "0=/disks/0=1=x"]);
        pod["volumes"] = json!([{"name": "disk-0", "persistentVolumeClaim": {"claimName": "m-disk-0", "readOnly": true}}]);
        pod["containers"][0]["volumeMounts"] =
            json!([{"name": "disk-0", "mountPath": "/disks/0", "readOnly": true}]);
    });
    create_as(&env, sa, &verify, true).unwrap_or_else(|e| panic!("the verification Job: {e}"));

    // Every child as ferry's own builders make it passes: conversion, verification, cutover
    // and precopy Jobs, the DataVolumes, the VirtualMachine.
    {
        use ferry_controller::children::{
            cutover_job, datavolume, job, verify_job, virtual_machine,
        };
        let mut vmm = ferry_crds::fixtures::migration("m").with_disks(2);
        vmm.metadata.namespace = Some(env.ns.name.clone());
        if let Some(s) = vmm.status.as_mut().and_then(|s| s.source.as_mut()) {
            s.moref = Some("vm-42".into());
        }
        let verify: Vec<verify_job::VerifyVolume> = (0..2)
            .map(|i| verify_job::VerifyVolume {
                index: i,
                claim: ferry_crds::names::datavolume_name(&vmm, i),
                data_volume_uid: format!("00000000-0000-0000-0000-00000000000{i}"),
                block: i == 1,
                size: 1 << 20,
                sha256: "0".repeat(64),
            })
            .collect();
        let delta: Vec<cutover_job::CutoverVolume> = (0..2)
            .map(|i| cutover_job::CutoverVolume {
                index: i,
                claim: ferry_crds::names::datavolume_name(&vmm, i),
                block: i == 1,
                device_key: 2000 + i as i32,
                change_id: "52 1a/3".into(),
                datastore_path: format!("[LocalDS_0] DC0_H0_VM0/disk{i}.vmdk"),
            })
            .collect();
        let ours: Vec<(&str, Value)> = vec![
            (
                "ferry's conversion Job",
                serde_json::to_value(job::conversion_job(&vmm, &image).unwrap()).unwrap(),
            ),
            (
                "ferry's verification Job",
                serde_json::to_value(
                    verify_job::verification_job(&vmm, &verify, verify_job::Role::Verify, &image)
                        .unwrap(),
                )
                .unwrap(),
            ),
            (
                "ferry's cutover Job",
                serde_json::to_value(cutover_job::cutover_job(&vmm, &delta, &image).unwrap())
                    .unwrap(),
            ),
            (
                "ferry's precopy Job",
                serde_json::to_value(
                    cutover_job::precopy_job(&vmm, &delta, &image, "snapshot-1").unwrap(),
                )
                .unwrap(),
            ),
            (
                "ferry's DataVolume",
                serde_json::to_value(
                    datavolume::data_volume(
                        &vmm,
                        0,
                        1 << 30,
                        &ferry_controller::children::secret::s3_secret_name(&vmm),
                        Some("m-staging-ca"),
                    )
                    .unwrap(),
                )
                .unwrap(),
            ),
            (
                "ferry's VirtualMachine",
                serde_json::to_value(virtual_machine::virtual_machine(&vmm).unwrap()).unwrap(),
            ),
        ];
        for (what, obj) in &ours {
            create_as(&env, sa, obj, true).unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }

    // DataVolumes and VirtualMachines: only in ferry's shapes.
    let dv = |f: &dyn Fn(&mut Value)| {
        let mut d = json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "m-disk-0", "namespace": env.ns.name, "labels": ferry_labels()},
            "spec": {
                "source": {"s3": {"url": "http://s3.example/b/k", "secretRef": "m-staging-s3"}},
                "storage": {"resources": {"requests": {"storage": "1Gi"}}},
            },
        });
        f(&mut d);
        d
    };
    let vm = |f: &dyn Fn(&mut Value)| {
        let mut v = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "m-vm", "namespace": env.ns.name, "labels": ferry_labels()},
            "spec": {
                "runStrategy": "Halted",
                "template": {
                    "metadata": {"labels": ferry_labels()},
                    "spec": {
                        "domain": {"devices": {"disks": [{"name": "disk-0", "disk": {"bus": "virtio"}}]},
                                   "memory": {"guest": "128Mi"}},
                        "volumes": [{"name": "disk-0", "dataVolume": {"name": "m-disk-0"}}],
                    },
                },
            },
        });
        f(&mut v);
        v
    };
    let refused: Vec<(&str, Value, &str)> = vec![
        (
            "a DataVolume cloning another claim",
            dv(&|d| {
                d["spec"]["source"] =
                    json!({"pvc": {"namespace": "kube-system", "name": "etcd-data"}})
            }),
            "import from S3 only",
        ),
        (
            "a DataVolume with a tenant's Secret",
            dv(&|d| d["spec"]["source"]["s3"]["secretRef"] = "tenant-db".into()),
            "import from S3 only",
        ),
        (
            "an unlabelled DataVolume",
            dv(&|d| d["metadata"]["labels"] = json!({})),
            "only DataVolumes and VirtualMachines with a migration's labels",
        ),
        (
            "a VirtualMachine booting a container disk with a ServiceAccount volume",
            vm(&|v| {
                v["spec"]["template"]["spec"]["domain"]["devices"]["disks"] = json!([
                    {"name": "root", "disk": {"bus": "virtio"}}, {"name": "sa", "disk": {"bus": "virtio"}}]);
                v["spec"]["template"]["spec"]["volumes"] = json!([
                    {"name": "root", "containerDisk": {"image": "docker.io/library/alpine:latest"}},
                    {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}}]);
            }),
            "boot only the migration's DataVolumes",
        ),
        (
            "a VirtualMachine on another migration's DataVolume",
            vm(&|v| {
                v["spec"]["template"]["spec"]["volumes"][0]["dataVolume"]["name"] =
                    "other-disk-0".into()
            }),
            "boot only the migration's DataVolumes",
        ),
        (
            "a VirtualMachine with dataVolumeTemplates",
            vm(&|v| {
                v["spec"]["dataVolumeTemplates"] = json!([{"metadata": {"name": "m-disk-0"},
                "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}}}])
            }),
            "boot only the migration's DataVolumes",
        ),
    ];
    for (what, obj, message) in &refused {
        let err = create_as(&env, sa, obj, true).expect_err(what);
        assert!(
            err.contains("ferry-controller-kubevirt") && err.contains(message),
            "{what}: {err}"
        );
        create_as(&env, None, obj, true).unwrap_or_else(|e| panic!("{what} as the admin: {e}"));
    }
    create_as(&env, sa, &dv(&|_| {}), true).unwrap_or_else(|e| panic!("ferry's DataVolume: {e}"));
    create_as(&env, sa, &vm(&|_| {}), true).unwrap_or_else(|e| panic!("ferry's VM: {e}"));

    // Deletes: only of what carries ferry's labels. A tenant's Secret and a DataVolume ferry
    // never made stay (a server-side dry run of each delete, as the ServiceAccount).
    create_as(
        &env,
        None,
        &secret(&env, "tenant-db", "Opaque", json!({}), &["password"]),
        false,
    )
    .unwrap();
    create_as(
        &env,
        None,
        &dv(&|d| d["metadata"]["labels"] = json!({"app": "tenant"})),
        false,
    )
    .unwrap();
    for (kind, name) in [("secret", "tenant-db"), ("datavolume", "m-disk-0")] {
        let err =
            kubectl_as(&env, sa, &["delete", kind, name, "--dry-run=server"]).expect_err(kind);
        assert!(
            err.contains("ferry-controller-deletes")
                && err.contains("may delete only objects it made"),
            "{kind}: {err}"
        );
        kubectl_as(&env, None, &["delete", kind, name, "--dry-run=server"])
            .unwrap_or_else(|e| panic!("{kind} as the admin: {e}"));
    }
    create_as(
        &env,
        None,
        &secret(
            &env,
            "m-staging-s3",
            "Opaque",
            ferry_labels(),
            &["accessKeyId", "secretKey"],
        ),
        false,
    )
    .unwrap();
    kubectl_as(
        &env,
        sa,
        &["delete", "secret", "m-staging-s3", "--dry-run=server"],
    )
    .unwrap_or_else(|e| panic!("ferry's own Secret: {e}"));
}
