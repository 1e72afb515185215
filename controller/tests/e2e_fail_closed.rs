//! Fail closed: the controller's own rules rest on the admission policies of `deploy/controller`
//! (who may change what of a migration, what shapes its account may make), so it checks that
//! they are in force and holds back while they are not.
//!
//! Deployed as `deploy/controller` ships it (the bindings narrowed to the test's namespace), run
//! as its ServiceAccount with the policies required, with the `ferry-authoring` binding deleted
//! (as on a cluster where an apply refused the policy kinds): a wave makes none of its
//! migrations and says why in `Degraded` (`PoliciesNotInForce`, naming the missing binding) and
//! an Event; a lone migration is not started (`Ready` False, the same reason); the metric says
//! 0. Once the binding is back, the wave makes and runs its migrations and the lone one starts,
//! by themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ferry_crds::condition::WaveConditionType;
use ferry_crds::{
    MigrationWave, MigrationWaveSpec, Phase, Reason, VirtualMachineMigration, WaveVm,
};
use kube::Api;
use kube::api::PostParams;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_policies_in_force_the_controller_makes_and_starts_nothing_until_they_are() {
    let mut env = Env::new("e2e-fail-closed", 8).await;
    let second = env.lab.claim_vm().unwrap();
    ferry_harness::put_vmdk(&second, &env.scratch.join("second"), 8, 91).unwrap();
    let deployed = install_deploy(&env).await;
    let authoring = deployed
        .bindings
        .iter()
        .find(|b| b.starts_with("ferry-authoring-"))
        .expect("the authoring binding")
        .clone();
    env.lab
        .kubectl_ok(&["delete", "validatingadmissionpolicybinding", &authoring])
        .unwrap();
    env.impersonate(CONTROLLER_SA, &CONTROLLER_SA_GROUPS);
    env.extra_controller_args = deployed.controller_args();
    env.start_sim();
    env.start_controller();

    let waves: Api<MigrationWave> = env.ns.api();
    let spec = MigrationWaveSpec {
        template: env.wave_template(),
        vms: vec![WaveVm::by_name(second.name.clone())],
        max_in_flight: 2,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    waves
        .create(&PostParams::default(), &MigrationWave::new("held", spec))
        .await
        .unwrap();
    let lone = env.create(&env.migration("lone")).await;

    let held = ferry_harness::eventually(
        "the wave to say the policies are not in force",
        Duration::from_secs(120),
        || async {
            let w = waves.get("held").await.ok()?;
            let d = w
                .status
                .as_ref()?
                .condition(WaveConditionType::Degraded)?
                .clone();
            // The first look may not have been taken yet ("not looked at yet"): wait for its words.
            (d.reason == Reason::PoliciesNotInForce && d.message.contains("ferry-authoring"))
                .then_some(d)
        },
    )
    .await
    .unwrap();
    assert!(
        held.message
            .contains("no ValidatingAdmissionPolicyBinding denies by ferry-authoring"),
        "{}",
        held.message
    );
    let vmms: Api<VirtualMachineMigration> = env.ns.api();
    let names: Vec<String> = vmms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    assert_eq!(names, vec!["lone".to_owned()], "the wave made no migration");
    let waiting = env
        .wait_for("lone", "the lone migration held", 120, |v| {
            v.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.reason == Reason::PoliciesNotInForce)
            })
        })
        .await;
    assert_eq!(
        waiting.phase(),
        Phase::Pending,
        "{}",
        serde_yaml_status(&waiting)
    );
    assert_eq!(
        env.metric("ferry_controller_admission_policies_in_force"),
        0
    );
    // Its Event (published after the status write that carries the condition).
    env.wait_event("lone", "PoliciesNotInForce").await;

    // The binding back: within the guard's next look, everything goes on by itself.
    // (Kept until the end: its drop removes the bindings it applied.)
    let _again = install_deploy(&env).await;
    let done = env.wait_terminal("lone", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    assert_eq!(lone.metadata.uid, done.metadata.uid);
    let w = ferry_harness::eventually("the wave to finish", Duration::from_secs(300), || async {
        let w = waves.get("held").await.ok()?;
        w.status
            .as_ref()
            .is_some_and(|s| s.phase.is_terminal())
            .then_some(w)
    })
    .await
    .unwrap();
    let s = w.status.unwrap();
    assert_eq!(s.counts.succeeded, 1, "{s:?}");
    assert_eq!(
        env.metric("ferry_controller_admission_policies_in_force"),
        1
    );
}
