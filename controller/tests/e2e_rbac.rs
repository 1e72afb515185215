//! RBAC, proven rule by rule.
//!
//! The controller runs with a real token of the `ferry-controller` ServiceAccount bound to the
//! ClusterRole of `deploy/controller`, through named scenarios (a migration over https staging
//! with a private CA, a cancel in Validating, a wave). The lab's apiserver logs every request of
//! a ServiceAccount (its audit log). The proof, for every verb of every rule:
//! * used: a request of some scenario needed it (no verb that is not used), and none was denied;
//! * needed: the same request, asked of the real authorizer for a user bound to the ClusterRole
//!   without that verb (SubjectAccessReview), is denied — remove it and that scenario breaks.
//!
//! A right that no request uses but an admission plugin checks (`update` on the waves' finalizers,
//! which OwnerReferencesPermissionEnforcement asks of whoever creates a wave's migration with
//! `blockOwnerDeletion`; the lab runs the plugin) is proven on the request it admits: that
//! object made again as a server-side dry run passes as the controller and is refused, by that
//! plugin, for a user bound to the ClusterRole without the right.
//!
//! The admission policies of `deploy/controller` are bound (to the test's namespace) while the
//! scenarios run: `ferry-controller-blast-radius` checks every Secret, ConfigMap and Job the
//! controller makes, and `ferry-authoring` the migration its wave creates — which needs the
//! `author` right of the ClusterRole `ferry-controller-author` (a verb no request uses, so it
//! is not in the ClusterRole proven below; the wave scenario fails without it).
//!
//! And the cockpit users' roles: `ferry-view` watches but cannot patch, `ferry-operate` can
//! cancel and retry but reads no Secret — through the cockpit's own `--as`. What else
//! `ferry-operate` may not change, and what `ferry-edit` may, is e2e_admission's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use common::*;
use ferry_crds::{Phase, VirtualMachineMigration};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

const SA: &str = CONTROLLER_SA;

fn rule_verbs(role: &ClusterRole) -> Vec<(String, String, String)> {
    let mut out = vec![];
    for r in role.rules.iter().flatten() {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.push((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

/// The ClusterRole's rules without `verb` on `group`/`resource`.
fn without(role: &ClusterRole, group: &str, resource: &str, verb: &str) -> Vec<PolicyRule> {
    let mut out = vec![];
    for r in role.rules.iter().flatten() {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                let verbs: Vec<String> = r
                    .verbs
                    .iter()
                    .filter(|v| !(g == group && res == resource && *v == verb))
                    .cloned()
                    .collect();
                if !verbs.is_empty() {
                    out.push(PolicyRule {
                        api_groups: Some(vec![g.clone()]),
                        resources: Some(vec![res.clone()]),
                        verbs,
                        ..PolicyRule::default()
                    });
                }
            }
        }
    }
    out
}

async fn allowed(client: &kube::Client, user: &str, r: &Request) -> bool {
    let (resource, subresource) = match r.resource.split_once('/') {
        Some((a, b)) => (a.to_owned(), Some(b.to_owned())),
        None => (r.resource.clone(), None),
    };
    let sar = SubjectAccessReview {
        metadata: ObjectMeta::default(),
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(ResourceAttributes {
                namespace: r.namespace.clone(),
                verb: Some(r.verb.clone()),
                group: Some(r.group.clone()),
                resource: Some(resource),
                subresource,
                name: r.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        status: None,
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let got = api.create(&PostParams::default(), &sar).await.unwrap();
    got.status.is_some_and(|s| s.allowed)
}

/// The proof's second part: each admission policy of `deploy/controller` bound while the
/// scenarios ran (`bindings`, narrowed to the test's namespace), what it judges and how, under
/// which every request of the controller above passed.
fn admission_policies(env: &Env, bindings: &[String]) -> Vec<String> {
    let get = |kind: &str| -> Vec<serde_json::Value> {
        let text = env.lab.kubectl_ok(&["get", kind, "-o", "json"]).unwrap();
        let list: serde_json::Value = serde_json::from_str(&text).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    };
    let policies = get("validatingadmissionpolicies");
    let mut lines = vec![
        String::new(),
        "admission policies bound while the scenarios ran (no request above was refused):"
            .to_owned(),
    ];
    for b in get("validatingadmissionpolicybindings") {
        let name = b["metadata"]["name"].as_str().unwrap_or_default();
        if !bindings.iter().any(|n| n == name) {
            continue;
        }
        let policy = b["spec"]["policyName"].as_str().unwrap_or_default();
        let p = policies
            .iter()
            .find(|p| p["metadata"]["name"] == policy)
            .expect("the bound policy");
        let judged: Vec<String> = p["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let list = |k: &str| {
                    r[k].as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                format!("{} {}", list("operations"), list("resources"))
            })
            .collect();
        lines.push(format!(
            "{policy:<32} {:<12} {:>2} validations  on {}  ({})",
            b["spec"]["validationActions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(","),
            p["spec"]["validations"].as_array().map_or(0, Vec::len),
            judged.join("; "),
            p["spec"]["matchConstraints"]["matchPolicy"]
                .as_str()
                .unwrap_or("Equivalent"),
        ));
    }
    assert!(lines.len() > 2, "no admission policy was bound");
    lines
}

/// A right that no request uses but an admission plugin checks on one the controller makes.
struct AdmissionChecked {
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    /// The request it admits: (group, resource, verb).
    admits: (&'static str, &'static str, &'static str),
    plugin: &'static str,
    /// What the plugin's refusal says.
    refusal: &'static str,
}

/// The wave's migrations carry `blockOwnerDeletion`: OwnerReferencesPermissionEnforcement lets
/// only who may update the wave's finalizers create them (`gc_admission.go` in kube-apiserver).
const ADMISSION_CHECKED: &[AdmissionChecked] = &[AdmissionChecked {
    group: "migration.platform.example",
    resource: "migrationwaves/finalizers",
    verb: "update",
    admits: (
        "migration.platform.example",
        "virtualmachinemigrations",
        "create",
    ),
    plugin: "OwnerReferencesPermissionEnforcement",
    refusal: "blockOwnerDeletion",
}];

/// The object `r` created (read back), made again under a new name as a server-side dry run by
/// `with` and by `without`: whether each was admitted. A refusal of `without` must say `refusal`
/// (an unrelated refusal proves nothing).
async fn admitted(
    env: &Env,
    r: &Request,
    with: &str,
    without: &str,
    refusal: &str,
) -> (bool, bool) {
    // The audit log may leave a create's name out: the namespace's one migration with an owner.
    let made = match r.name.clone() {
        Some(n) => n,
        None => env
            .ns
            .api::<VirtualMachineMigration>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|m| !m.owner_references().is_empty())
            .map(|m| m.name_any())
            .expect("the wave's migration"),
    };
    let v: VirtualMachineMigration = env.ns.api().get(&made).await.unwrap();
    let again = serde_json::json!({
        "apiVersion": ferry_crds::API_VERSION,
        "kind": "VirtualMachineMigration",
        "metadata": {
            "name": format!("{made}-again"),
            "namespace": env.ns.name,
            "labels": v.metadata.labels,
            "ownerReferences": v.metadata.owner_references,
        },
        "spec": v.spec,
    });
    let file = env.scratch.join(format!("{made}-again.json"));
    std::fs::write(&file, serde_json::to_vec(&again).unwrap()).unwrap();
    let run = |user: &str| {
        env.lab
            .kubectl()
            .args(["create", "--dry-run=server", "--as", user, "-f"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let ok = run(with);
    assert!(
        ok.status.success(),
        "{with}: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = run(without);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        refused.status.success() || said.contains(refusal),
        "{without} refused for another reason: {said}"
    );
    (ok.status.success(), refused.status.success())
}

/// A migration as the in-cluster controller runs it: the vCenter URL and trust come from the
/// bound Secret, staging is the lab's https S3 (private CA), the VM is named `NAME-vm`, and
/// `fault` (a ferry-sim fault annotation) is injected when given.
fn in_cluster_migration(env: &Env, name: &str, fault: Option<&str>) -> VirtualMachineMigration {
    let mut vmm = env.migration(name);
    vmm.spec.source.endpoint.url = None;
    vmm.spec.source.endpoint.thumbprint = None;
    vmm.spec.staging.endpoint = env.lab.info.s3_tls.endpoint.clone();
    vmm.spec.target.name = Some(format!("{name}-vm"));
    match fault {
        Some(fault) => with_fault(vmm, fault),
        None => vmm,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_of_the_controllers_cluster_role_is_used_and_needed() {
    let mut env = Env::new_ca("e2e-rbac", 16).await;
    // With the admission policies bound to this namespace: the controller's requests must pass
    // them too (its children's shape, the author right its wave uses to create a migration).
    let deployed = install_deploy(&env).await;
    // The policies required, as deployed: the controller looks at them (get, list) and finds
    // them in force (bound to this namespace).
    env.extra_controller_args = deployed.controller_args();
    // Long enough for scenario 2 to cancel a guest that waits, short for 2b's to fail.
    env.extra_controller_args
        .extend(["--agent-timeout".into(), "20s".into()]);
    env.use_controller_token();
    env.start_sim();
    let started = SystemTime::now();
    env.start_controller();
    let mut scenarios: Vec<(&str, SystemTime, SystemTime)> = vec![];

    // 1. A whole migration, over https staging with a private CA (the CA ConfigMap for CDI).
    let t = SystemTime::now();
    let vmm = in_cluster_migration(&env, "whole", None);
    env.create(&vmm).await;
    let v = env.wait_terminal("whole", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    scenarios.push((
        "a whole migration (https staging, private CA)",
        t,
        SystemTime::now(),
    ));

    // 2. Cancelled in Validating (its guest agent never connects): the VM, its instance, the
    //    DataVolume, the Job and the CDI objects are deleted.
    let t = SystemTime::now();
    let mut vmm = in_cluster_migration(&env, "cancelled", Some("agent=always"));
    // Validating waits for a guest agent only when asked to (the default needs none).
    vmm.spec.target.template.readiness = Some(ferry_crds::Readiness::AgentConnected);
    env.create(&vmm).await;
    env.wait_phase("cancelled", Phase::Validating, 300).await;
    env.wait_for("cancelled", "the VMI to run", 120, |v| {
        v.status.as_ref().and_then(|s| s.message.as_deref()) == Some("waiting for the guest agent")
    })
    .await;
    env.patch_spec("cancelled", serde_json::json!({"cancel": true}))
        .await;
    env.wait_phase("cancelled", Phase::Cancelled, 120).await;
    // Retried and cancelled again: the same Events again, patched as a series.
    env.patch_spec(
        "cancelled",
        serde_json::json!({"cancel": false, "retry": 1}),
    )
    .await;
    env.wait_for("cancelled", "the retry to start", 60, |v| {
        v.phase() != Phase::Cancelled
    })
    .await;
    env.patch_spec("cancelled", serde_json::json!({"cancel": true}))
        .await;
    env.wait_phase("cancelled", Phase::Cancelled, 120).await;
    scenarios.push((
        "a cancel in Validating, retried and cancelled again",
        t,
        SystemTime::now(),
    ));

    // 2b. A guest that never gets ready: it fails GuestNotReady with its serial console's last
    //     lines, read from its launcher pod's guest-console-log container (pods/log).
    let t = SystemTime::now();
    let mut vmm = in_cluster_migration(&env, "unready", Some("agent=always"));
    vmm.spec.target.template.readiness = Some(ferry_crds::Readiness::AgentConnected);
    env.create(&vmm).await;
    let v = env.wait_terminal("unready", 300).await;
    let f = v
        .status
        .as_ref()
        .and_then(|s| s.last_failure.clone())
        .unwrap();
    assert_eq!(f.reason, ferry_crds::Reason::GuestNotReady, "{}", f.message);
    assert!(
        f.message.contains("serial console is empty"),
        "{}",
        f.message
    );
    scenarios.push((
        "a guest that never gets ready (its console read)",
        t,
        SystemTime::now(),
    ));

    // 3. A wave: it creates its migration, releases it from the hold, writes its status.
    let t = SystemTime::now();
    let wave = serde_json::json!({
        "apiVersion": "migration.platform.example/v1alpha1",
        "kind": "MigrationWave",
        "metadata": {"name": "w", "namespace": env.ns.name},
        "spec": {
            "maxInFlight": 1,
            "template": {
                "source": {"credentialsSecretRef": {"name": VSPHERE_SECRET}, "powerOff": true},
                "staging": {
                    "endpoint": env.lab.info.s3_tls.endpoint,
                    "bucket": env.lab.info.s3.bucket,
                    "credentialsSecretRef": {"name": S3_SECRET},
                },
            },
            "vms": [{"name": "no-such-vm"}],
        },
    });
    let file = env.scratch.join("wave.json");
    std::fs::write(&file, serde_json::to_vec(&wave).unwrap()).unwrap();
    env.lab
        .kubectl_ok(&["apply", "-f", file.to_str().unwrap()])
        .unwrap();
    env.wait_for("w-no-such-vm", "the wave's migration to fail", 120, |v| {
        v.phase() == Phase::Failed
    })
    .await;
    let waves: Api<ferry_crds::MigrationWave> = env.ns.api();
    ferry_harness::eventually("the wave's status", Duration::from_secs(60), || async {
        waves
            .get("w")
            .await
            .ok()
            .and_then(|w| w.status)
            .filter(|s| s.counts.failed == 1)
    })
    .await
    .unwrap();
    scenarios.push(("a wave", t, SystemTime::now()));

    // 4. A damaged import: CDI imports it as it is, the verification Job fails, and the
    //    controller reads the failed pod's message (both checksums).
    let t = SystemTime::now();
    // One converter attempt fails: its back-off is the window to pause the migration in.
    let vmm = in_cluster_migration(&env, "damaged", Some("convert=once"));
    env.create(&vmm).await;
    env.wait_phase("damaged", Phase::Converting, 120).await;
    env.patch_spec("damaged", serde_json::json!({"paused": true}))
        .await;
    let jobs = env.ns.api::<k8s_openapi::api::batch::v1::Job>();
    ferry_harness::eventually(
        "the conversion Job to complete",
        Duration::from_secs(120),
        || async {
            jobs.get_opt("damaged-convert")
                .await
                .ok()
                .flatten()
                .filter(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1))
        },
    )
    .await
    .unwrap();
    let staged: Vec<_> = env
        .staged_files()
        .into_iter()
        .filter(|p| {
            let p = p.to_string_lossy();
            p.contains("/damaged/") && p.ends_with("disk-0.raw")
        })
        .collect();
    assert_eq!(staged.len(), 1, "{staged:?}");
    let mut bytes = std::fs::read(&staged[0]).unwrap();
    bytes[4096] ^= 0xff;
    std::fs::write(&staged[0], &bytes).unwrap();
    env.patch_spec("damaged", serde_json::json!({"paused": false}))
        .await;
    let v = env
        .wait_for("damaged", "damaged to fail", 300, |v| {
            v.phase().is_terminal()
        })
        .await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    assert_eq!(
        last_failure(&v).0,
        "ChecksumMismatch",
        "{}",
        serde_yaml_status(&v)
    );
    scenarios.push((
        "a damaged import caught by the verification Job",
        t,
        SystemTime::now(),
    ));

    // 5. A VM that cannot be scheduled fails Starting; a retry deletes its instance first.
    let t = SystemTime::now();
    let vmm = in_cluster_migration(&env, "unsched", Some("vmi=permanent"));
    env.create(&vmm).await;
    let v = env
        .wait_for("unsched", "unsched to fail", 300, |v| {
            v.phase().is_terminal()
        })
        .await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    assert_eq!(
        last_failure(&v).0,
        "ErrorUnschedulable",
        "{}",
        serde_yaml_status(&v)
    );
    let before = live_vmi_uid(&env, "unsched-vm")
        .await
        .expect("the unschedulable VMI is still there");
    env.patch_spec("unsched", serde_json::json!({"retry": 1}))
        .await;
    // KubeVirt may start a new instance at once: the old one's uid is what must go.
    ferry_harness::eventually(
        "the retry to delete the VMI",
        Duration::from_secs(120),
        || async { (live_vmi_uid(&env, "unsched-vm").await != Some(before.clone())).then_some(()) },
    )
    .await
    .unwrap();
    scenarios.push(("a failure in Starting, retried", t, SystemTime::now()));

    // 5. Preflight of paused migrations naming a StorageClass, a Multus network, and an
    //    instancetype and a preference of each kind, none of which exists: each is looked for
    //    by name, and the migrations are held, untouched.
    let t = SystemTime::now();
    use ferry_crds::{InstancetypeKind, InstancetypeRef, PreferenceKind, PreferenceRef};
    let sized = |name: &str, it: InstancetypeKind, pref: PreferenceKind| {
        let mut vmm = in_cluster_migration(&env, name, None);
        vmm.spec.paused = true;
        vmm.spec.target.template.placement.instancetype = Some(InstancetypeRef {
            name: format!("{}-none", env.ns.name),
            kind: it,
        });
        vmm.spec.target.template.placement.preference = Some(PreferenceRef {
            name: format!("{}-none", env.ns.name),
            kind: pref,
        });
        vmm
    };
    let mut vmm = sized(
        "preflight",
        InstancetypeKind::VirtualMachineClusterInstancetype,
        PreferenceKind::VirtualMachinePreference,
    );
    let other_kinds = sized(
        "preflight-kinds",
        InstancetypeKind::VirtualMachineInstancetype,
        PreferenceKind::VirtualMachineClusterPreference,
    );
    env.create(&other_kinds).await;
    vmm.spec.target.template.storage_class_name = Some(format!("{}-nowhere", env.ns.name));
    vmm.spec.target.template.networks = vec![ferry_crds::NetworkMapping {
        source: "VM Network".into(),
        pod: None,
        multus: Some(ferry_crds::MultusNetwork {
            network_name: "no-such-net".into(),
        }),
    }];
    env.create(&vmm).await;
    env.wait_for("preflight", "its preflight", 120, |v| {
        v.status
            .as_ref()
            .and_then(|s| s.preflight.as_ref())
            .is_some_and(|p| {
                let codes: Vec<_> = p.concerns.iter().map(|c| c.code).collect();
                codes.contains(&ferry_crds::ConcernCode::StorageClassMissing)
                    && codes.contains(&ferry_crds::ConcernCode::NetworkAttachmentMissing)
                    && codes.contains(&ferry_crds::ConcernCode::InstancetypeMissing)
            })
    })
    .await;
    env.wait_for("preflight-kinds", "its preflight", 120, |v| {
        v.status
            .as_ref()
            .and_then(|s| s.preflight.as_ref())
            .is_some_and(|p| {
                p.concerns
                    .iter()
                    .filter(|c| c.code == ferry_crds::ConcernCode::InstancetypeMissing)
                    .count()
                    == 2
            })
    })
    .await;
    scenarios.push((
        "paused migrations preflighted (a StorageClass, a network, instancetypes and preferences looked for)",
        t,
        SystemTime::now(),
    ));

    // The record.
    let requests: Vec<Request> = audit(env.lab, SA)
        .into_iter()
        .filter(|r| r.when >= started)
        .filter(|r| r.namespace.as_deref().is_none_or(|n| n == env.ns.name))
        .collect();
    let denied: Vec<&Request> = requests.iter().filter(|r| r.code == 403).collect();
    assert!(denied.is_empty(), "denied: {denied:#?}");
    let scenario_of = |r: &Request| {
        scenarios
            .iter()
            .find(|(_, a, b)| r.when >= *a && r.when <= *b)
            .map_or("the controller's start (its watches)", |(n, ..)| *n)
    };

    let admin = admin_client(&env).await;
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    // The ClusterRole, and what each namespace grants by its RoleBinding (reading its Secrets):
    // proven together, as the controller used them here.
    let mut role = roles.get("ferry-controller").await.unwrap();
    let reader = roles.get("ferry-credentials-reader").await.unwrap();
    role.rules
        .get_or_insert_with(Vec::new)
        .extend(reader.rules.unwrap_or_default());
    let mut report = vec![];
    let mut unused = vec![];
    let mut not_needed = vec![];
    let mut made = BTreeSet::new();
    for (i, (group, resource, verb)) in rule_verbs(&role).into_iter().enumerate() {
        // A right an admission plugin checks is used by the request it admits.
        let checked = ADMISSION_CHECKED
            .iter()
            .find(|c| (c.group, c.resource, c.verb) == (&*group, &*resource, &*verb));
        let wanted = checked.map_or((&*group, &*resource, &*verb), |c| c.admits);
        let Some(r) = requests
            .iter()
            .find(|r| (&*r.group, &*r.resource, &*r.verb) == wanted)
        else {
            unused.push(format!("{group}/{resource} {verb}"));
            continue;
        };
        // A user bound to the ClusterRole without this verb, asked for the same request.
        let probe = format!("ferry-rbac-probe-{}-{i}", env.ns.name);
        let reduced = ClusterRole {
            metadata: ObjectMeta {
                name: Some(probe.clone()),
                ..ObjectMeta::default()
            },
            rules: Some(without(&role, &group, &resource, &verb)),
            aggregation_rule: None,
        };
        roles
            .create(&PostParams::default(), &reduced)
            .await
            .unwrap();
        bindings
            .create(
                &PostParams::default(),
                &ClusterRoleBinding {
                    metadata: ObjectMeta {
                        name: Some(probe.clone()),
                        ..ObjectMeta::default()
                    },
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: probe.clone(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "User".into(),
                        name: probe.clone(),
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        namespace: None,
                    }]),
                },
            )
            .await
            .unwrap();
        made.insert(probe.clone());
        let (with_all, without_it) = match checked {
            None => (
                allowed(&admin, SA, r).await,
                allowed(&admin, &probe, r).await,
            ),
            Some(c) => admitted(&env, r, SA, &probe, c.refusal).await,
        };
        if !with_all || without_it {
            not_needed.push(format!("{group}/{resource} {verb}: {} {}", r.verb, r.uri));
        }
        report.push(format!(
            "{:<22} {:<40} {:<6} needed by {:<55} {} {}{}",
            if group.is_empty() { "core" } else { &group },
            resource,
            verb,
            scenario_of(r),
            r.verb,
            r.uri,
            checked.map_or(String::new(), |c| format!(" (checked by {})", c.plugin))
        ));
    }
    for name in &made {
        let _ = bindings.delete(name, &Default::default()).await;
        let _ = roles.delete(name, &Default::default()).await;
    }
    report.extend(admission_policies(&env, &deployed.bindings));
    let out = workspace().join("target/rbac");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("controller-role-proof.txt"),
        report.join("\n") + "\n",
    )
    .unwrap();
    eprintln!("{}", report.join("\n"));
    assert!(unused.is_empty(), "verbs no scenario used: {unused:?}");
    assert!(
        not_needed.is_empty(),
        "verbs whose removal breaks nothing: {not_needed:?}"
    );
}

/// The uid of the VMI of that name, unless it is absent or being deleted.
async fn live_vmi_uid(env: &Env, name: &str) -> Option<String> {
    env.ns
        .api::<ferry_controller::apis::kubevirt::VirtualMachineInstance>()
        .get_opt(name)
        .await
        .unwrap()
        .filter(|i| i.metadata.deletion_timestamp.is_none())
        .and_then(|i| i.metadata.uid)
}

/// A client with the lab's admin identity.
async fn admin_client(env: &Env) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&env.lab.info.kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// `ferry --as USER ...` against the lab, in the test's namespace.
fn cockpit(env: &Env, user: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin_dir().join("ferry"))
        .arg("--kubeconfig")
        .arg(&env.lab.info.kubeconfig)
        .args(["-n", &env.ns.name, "--as", user])
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferry_view_watches_and_ferry_operate_steers_but_neither_reads_secrets() {
    let env = Env::new("e2e-roles", 16).await;
    // The operator's cancel and retry meet the authoring policy (they are intents: allowed).
    let _deployed = install_deploy(&env).await;
    let (viewer, operator) = (
        format!("viewer-{}", env.ns.name),
        format!("operator-{}", env.ns.name),
    );
    for (user, role) in [(&viewer, "ferry-view"), (&operator, "ferry-operate")] {
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
    // The aggregated roles get their rules from the labelled ones (the aggregation controller).
    let roles: Api<ClusterRole> = Api::all(admin_client(&env).await);
    for r in ["ferry-view", "ferry-operate"] {
        ferry_harness::eventually(
            &format!("{r} aggregated"),
            Duration::from_secs(60),
            || async {
                roles
                    .get(r)
                    .await
                    .ok()
                    .and_then(|c| c.rules)
                    .filter(|r| !r.is_empty())
            },
        )
        .await
        .unwrap();
    }
    env.create(&env.migration("steer")).await;
    env.create(&env.migration("failed-one")).await;
    // As the controller would have left it (no controller runs here).
    env.api()
        .patch_status(
            "failed-one",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();

    // The viewer sees the board but cannot cancel.
    let out = cockpit(&env, &viewer, &["board", "--once", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"steer\""));
    let out = cockpit(&env, &viewer, &["cancel", "steer"]);
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.to_lowercase().contains("forbidden"), "{said}");
    assert!(
        !env.get("steer").await.spec.cancel,
        "the viewer changed nothing"
    );

    // The operator cancels and retries.
    let out = cockpit(&env, &operator, &["cancel", "steer"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(env.get("steer").await.spec.cancel);
    let out = cockpit(&env, &operator, &["retry", "failed-one"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.get("failed-one").await.spec.retry, 1);

    // The cockpit's pod logs view (`L`): ferry-view lists pods and reads their logs in its
    // namespace — the rule is what grants it (a user with no binding may not) — and no more:
    // not in another namespace, no exec, no get of a pod by name.
    let client = admin_client(&env).await;
    let ask = |verb: &str, resource: &str, ns: &str| Request {
        when: SystemTime::now(),
        verb: verb.into(),
        group: String::new(),
        resource: resource.into(),
        namespace: Some(ns.to_owned()),
        name: (resource != "pods" || verb == "get").then(|| "some-convert-x2k4q".to_owned()),
        code: 0,
        uri: String::new(),
    };
    let ns = env.ns.name.clone();
    for (verb, resource) in [("list", "pods"), ("get", "pods/log")] {
        assert!(
            allowed(&client, &viewer, &ask(verb, resource, &ns)).await,
            "ferry-view may {verb} {resource}"
        );
        assert!(
            !allowed(&client, &format!("nobody-{ns}"), &ask(verb, resource, &ns)).await,
            "without ferry-view no one may {verb} {resource}: the rule is needed"
        );
        assert!(
            !allowed(&client, &viewer, &ask(verb, resource, "default")).await,
            "ferry-view is bound in its namespace only"
        );
    }
    // Its launcher pod's console: the one VirtualMachineInstance is read, not listed.
    let vmi = |verb: &str| Request {
        group: "kubevirt.io".into(),
        resource: "virtualmachineinstances".into(),
        name: (verb == "get").then(|| "web-1".to_owned()),
        ..ask(verb, "virtualmachineinstances", &ns)
    };
    assert!(
        allowed(&client, &viewer, &vmi("get")).await,
        "ferry-view may get the migrated VM's instance"
    );
    assert!(
        !allowed(&client, &format!("nobody-{ns}"), &vmi("get")).await,
        "without ferry-view no one may: the rule is needed"
    );
    for (verb, resource) in [("create", "pods/exec"), ("get", "pods"), ("watch", "pods")] {
        assert!(
            !allowed(&client, &viewer, &ask(verb, resource, &ns)).await,
            "ferry-view may not {verb} {resource}"
        );
    }

    // Neither reads a Secret.
    for user in [&viewer, &operator] {
        let out = env
            .lab
            .kubectl()
            .args([
                "get",
                "secret",
                VSPHERE_SECRET,
                "-n",
                &env.ns.name,
                "--as",
                user,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("forbidden"),
            "{user}: {err}"
        );
    }
}
