//! The kustomize base in `deploy/controller`: it applies to a real API server, and its
//! ClusterRole is enough for a whole migration (the controller runs as its ServiceAccount).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_crds::Phase;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_base_applies_and_its_role_suffices_for_a_migration() {
    let mut env = Env::new("e2e-deploy", 16).await;
    // The admission policies too, their bindings narrowed to this namespace (a shared lab).
    let deployed = install_deploy(&env).await;
    let out = &deployed.applied;
    for kind in [
        "serviceaccount/ferry-controller",
        "clusterrole.rbac.authorization.k8s.io/ferry-controller",
        "role.rbac.authorization.k8s.io/ferry-controller-leader",
        "deployment.apps/ferry-controller",
        "poddisruptionbudget.policy/ferry-controller",
        "validatingadmissionpolicy.admissionregistration.k8s.io/ferry-authoring",
        "validatingadmissionpolicy.admissionregistration.k8s.io/ferry-controller-blast-radius",
        "configmap/ferry-controller-policy",
    ] {
        assert!(out.contains(kind), "{kind} applied:\n{out}");
    }
    env.impersonate(CONTROLLER_SA, &CONTROLLER_SA_GROUPS);
    // Under leader election, as deployed: the Lease in ferry-system (a name of this test's own).
    let lease = format!("ferry-controller-{}", env.ns.name);
    env.extra_controller_args = ["--leader-elect", "--leader-elect-namespace", "ferry-system"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain(["--leader-elect-lease-name".to_owned(), lease])
        .chain(deployed.controller_args())
        .collect();
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("rbac")).await;
    let v = env.wait_terminal("rbac", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert!(all_conditions_true(&v));
    env.wait_event("rbac", "Succeeded").await;
    let log = std::fs::read_to_string(env.scratch.join("controller.log")).unwrap_or_default();
    assert!(
        !log.contains("forbidden"),
        "no RBAC denial in the controller's log:\n{}",
        log.lines()
            .filter(|l| l.contains("forbidden"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Secret reads are each namespace's to allow: without the RoleBinding of
/// `ferry-credentials-reader` the controller's account cannot read the migration's credentials
/// and the migration waits with `CredentialsNotAllowed`, naming the RoleBinding to make; once
/// the namespace's admin makes it, the migration goes on by itself and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_has_not_allowed_secret_reads_waits_until_it_does() {
    let mut env = Env::new("e2e-deploy-optin", 16).await;
    let deployed = install_deploy(&env).await;
    env.lab
        .kubectl_ok(&[
            "-n",
            &env.ns.name,
            "delete",
            "rolebinding",
            "ferry-credentials-reader",
        ])
        .unwrap();
    env.impersonate(CONTROLLER_SA, &CONTROLLER_SA_GROUPS);
    env.extra_controller_args = deployed.controller_args();
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("optin")).await;
    let waiting = env
        .wait_for(
            "optin",
            "the migration to wait for the RoleBinding",
            120,
            |v| {
                v.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.reason == ferry_crds::Reason::CredentialsNotAllowed)
                })
            },
        )
        .await;
    let said = serde_yaml_status(&waiting);
    assert!(
        said.contains("create rolebinding ferry-credentials-reader"),
        "{said}"
    );
    assert!(!waiting.phase().is_terminal(), "{said}");
    env.lab
        .kubectl_ok(&[
            "-n",
            &env.ns.name,
            "create",
            "rolebinding",
            "ferry-credentials-reader",
            "--clusterrole=ferry-credentials-reader",
            "--serviceaccount=ferry-system:ferry-controller",
        ])
        .unwrap();
    let v = env.wait_terminal("optin", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
}
