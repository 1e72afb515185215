//! End to end, a wave declared by vSphere tag (`spec.selector.tag`): the tags are made in the
//! lab's vcsim through vCenter's REST API (`ferry-lab tag`, as an operator would), and the
//! controller reads them back over the same API with the wave's bound Secret, trusting the
//! endpoint as for SOAP (pinned thumbprint here, the CA bundle on the CA-signed vCenter). The
//! waves are paused: their children are made and held, nothing of the shared VMs is touched. A
//! selector choosing more VMs than a wave may hold fails the wave once, without listing again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use ferry_crds::condition::WaveConditionType;
use ferry_crds::{
    ConditionStatus, MigrationWave, MigrationWaveSpec, Reason, WavePhase, WaveSelector,
    WaveTagSelector,
};
use ferry_harness::eventually;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

/// Attaches tag `tag` of `category` (both made when missing) to `vms` on the lab's vCenter
/// `vcenter` ("main" or "ca"), through `ferry-lab tag`.
fn tag_vms(env: &Env, vcenter: &str, category: &str, tag: &str, vms: &[&str]) {
    let mut cmd = Command::new(ferry_harness::repo_root().join("target/lab/bin/ferry-lab"));
    cmd.arg("tag")
        .arg("--state-dir")
        .arg(&env.lab.info.state_dir)
        .args(["--vcenter", vcenter, "--category", category, "--tag", tag]);
    for vm in vms {
        cmd.args(["--vm", vm]);
    }
    let out = cmd.output().expect("ferry-lab tag");
    assert!(
        out.status.success(),
        "ferry-lab tag {category}/{tag} {vms:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A paused wave of the test's template choosing its VMs with `selector`.
fn spec(env: &Env, selector: WaveSelector) -> MigrationWaveSpec {
    MigrationWaveSpec {
        template: env.wave_template(),
        vms: vec![],
        max_in_flight: 2,
        selector: Some(selector),
        paused: true,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    }
}

fn by_tag(name: &str, category: Option<&str>) -> WaveSelector {
    WaveSelector {
        tag: Some(WaveTagSelector {
            name: name.to_owned(),
            category: category.map(str::to_owned),
        }),
        ..WaveSelector::default()
    }
}

async fn create(env: &Env, name: &str, selector: WaveSelector) {
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(
            &PostParams::default(),
            &MigrationWave::new(name, spec(env, selector)),
        )
        .await
        .unwrap();
}

/// The wave's VMs once its selector is resolved and its children made.
async fn selected(env: &Env, name: &str, want: usize) -> Vec<String> {
    let w = wait_wave(env, name, "the selector to be resolved", |w| {
        w.status
            .as_ref()
            .is_some_and(|s| s.selected_vms.is_some() && s.counts.queued == want as i32)
    })
    .await;
    w.status.unwrap().selected_vms.unwrap()
}

/// The `Progressing` message of a wave whose selector cannot be resolved; nothing is chosen.
async fn refused(env: &Env, name: &str) -> String {
    let w = wait_wave(env, name, "the selector's problem to be reported", |w| {
        w.status
            .as_ref()
            .and_then(|s| s.condition(WaveConditionType::Progressing))
            .is_some_and(|c| c.reason == Reason::VMNotFound)
    })
    .await;
    let st = w.status.unwrap();
    assert!(st.selected_vms.is_none(), "nothing chosen");
    let c = st.condition(WaveConditionType::Progressing).unwrap();
    assert_eq!(c.status, ConditionStatus::False);
    c.message.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_selected_by_tag_takes_exactly_the_tagged_vms() {
    let mut env = Env::new("e2e-wave-tag", 1).await;
    env.start_controller();
    // Names of this run only: the lab's vCenter is shared, and may be reused.
    let (tier, other, gold) = (
        format!("tier-{}", env.ns.name),
        format!("env-{}", env.ns.name),
        format!("gold-{}", env.ns.name),
    );
    let claimed: Vec<String> = (0..4).map(|_| env.lab.claim_vm().unwrap().name).collect();
    let mut tagged = vec![env.vm.name.clone(), claimed[0].clone(), claimed[1].clone()];
    tagged.sort();
    let refs: Vec<&str> = tagged.iter().map(String::as_str).collect();
    tag_vms(&env, "main", &tier, &gold, &refs);
    // The same tag name in another category, on another VM; claimed[3] carries no tag.
    tag_vms(&env, "main", &other, &gold, &[&claimed[2]]);

    // Exactly the VMs carrying tier/gold.
    create(&env, "gold", by_tag(&gold, Some(&tier))).await;
    assert_eq!(selected(&env, "gold", 3).await, tagged);
    for vm in &tagged {
        let c = env.get(&wave_child("gold", vm)).await;
        assert!(c.is_held(), "{vm} held while the wave is paused");
    }

    // Folder, name pattern and tag all hold (AND): one tagged VM by its exact name.
    let mut and = by_tag(&gold, Some(&tier));
    and.folder = Some("DC0/vm".into());
    and.name_pattern = Some(claimed[1].clone());
    create(&env, "gold-one", and).await;
    assert_eq!(
        selected(&env, "gold-one", 1).await,
        vec![claimed[1].clone()]
    );
    // A name pattern no tagged VM matches: nothing chosen, said so.
    let mut none = by_tag(&gold, Some(&tier));
    none.name_pattern = Some(claimed[3].clone());
    create(&env, "gold-none", none).await;
    let msg = refused(&env, "gold-none").await;
    assert!(
        msg.contains("spec.selector matches no VM") && msg.contains(&gold),
        "{msg}"
    );

    // Bad input, each named precisely.
    create(&env, "no-tag", by_tag("platinum", Some(&tier))).await;
    let msg = refused(&env, "no-tag").await;
    assert!(
        msg.contains(&format!(
            "spec.selector.tag: no tag named \"platinum\" in category \"{tier}\""
        )),
        "{msg}"
    );
    create(&env, "no-category", by_tag(&gold, Some("no-such-category"))).await;
    let msg = refused(&env, "no-category").await;
    assert!(
        msg.contains("spec.selector.tag: no tag category named \"no-such-category\""),
        "{msg}"
    );
    create(&env, "ambiguous", by_tag(&gold, None)).await;
    let msg = refused(&env, "ambiguous").await;
    let mut cats = [tier.clone(), other.clone()];
    cats.sort();
    assert!(
        msg.contains(&format!(
            "a tag named \"{gold}\" exists in categories \"{}\", \"{}\"; name one in \
             spec.selector.tag.category",
            cats[0], cats[1]
        )),
        "{msg}"
    );

    // The credentials went nowhere they should not: not in the log, not in any wave's status.
    let password = &env.lab.info.vcenter.password;
    let log = std::fs::read_to_string(env.scratch.join("controller.log")).unwrap();
    assert!(!log.contains(password.as_str()), "password in the log");
    let waves: Api<MigrationWave> = env.ns.api();
    for w in waves.list(&Default::default()).await.unwrap() {
        let text = serde_json::to_string(&w).unwrap();
        assert!(!text.contains(password.as_str()), "password in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_is_read_over_the_ca_trusted_endpoint_too() {
    let mut env = Env::new_ca("e2e-wave-tag-ca", 1).await;
    env.start_controller();
    let (tier, gold) = (
        format!("tier-{}", env.ns.name),
        format!("gold-{}", env.ns.name),
    );
    tag_vms(&env, "ca", &tier, &gold, &[&env.vm.name]);
    // Nothing in the spec about the endpoint or its trust: the Secret names both (its CA).
    let mut s = spec(&env, by_tag(&gold, Some(&tier)));
    s.template.source.endpoint.url = None;
    s.template.source.endpoint.thumbprint = None;
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("gold", s))
        .await
        .unwrap();
    assert_eq!(selected(&env, "gold", 1).await, vec![env.vm.name.clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_choosing_more_vms_than_a_wave_may_hold_fails_it_once() {
    let mut env = Env::new("e2e-wave-broad", 1).await;
    // The real bound is what status.selectedVms holds (5,000); the lab has fewer VMs, so the
    // controller is given a lower one, as a platform team may.
    env.extra_controller_args = vec!["--wave-selector-limit".into(), "2".into()];
    env.start_controller();
    let (tier, gold) = (
        format!("tier-{}", env.ns.name),
        format!("gold-{}", env.ns.name),
    );
    let mut vms = vec![env.vm.name.clone()];
    vms.extend((0..2).map(|_| env.lab.claim_vm().unwrap().name));
    let refs: Vec<&str> = vms.iter().map(String::as_str).collect();
    tag_vms(&env, "main", &tier, &gold, &refs);
    create(&env, "broad", by_tag(&gold, Some(&tier))).await;
    let w = wait_wave(&env, "broad", "the wave to fail", |w| {
        w.status
            .as_ref()
            .and_then(|s| s.condition(WaveConditionType::Progressing))
            .is_some_and(|c| c.reason == Reason::SelectorTooBroad)
    })
    .await;
    let st = w.status.unwrap();
    assert_eq!(st.phase, WavePhase::Failed);
    assert!(st.selected_vms.is_none(), "nothing chosen");
    let c = st.condition(WaveConditionType::Progressing).unwrap();
    assert_eq!(
        c.message,
        "spec.selector matches 3 VMs, more than the 2 one wave may hold; nothing was created: \
         narrow spec.selector (folder, namePattern, tag) or split the VMs into several waves"
    );
    let d = st.condition(WaveConditionType::Degraded).unwrap();
    assert_eq!(
        (d.status, d.reason),
        (ConditionStatus::True, Reason::SelectorTooBroad)
    );
    assert!(
        env.api()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    env.wait_event("broad", "SelectorTooBroad").await;

    // Listed once; whatever wakes the wave, its spec unchanged, the inventory is not listed again.
    let lists = || env.metric("ferry_controller_wave_inventory_lists_total");
    let reconciles = || env.metric("ferry_controller_reconciles_total{controller=\"wave\"}");
    assert_eq!(lists(), 1);
    let waves: Api<MigrationWave> = env.ns.api();
    for i in 0..3 {
        let before = reconciles();
        let poke = serde_json::json!({"metadata": {"annotations": {"poke": i.to_string()}}});
        waves
            .patch("broad", &PatchParams::default(), &Patch::Merge(&poke))
            .await
            .unwrap();
        eventually("a wave reconcile", Duration::from_secs(30), || async {
            (reconciles() > before).then_some(())
        })
        .await
        .unwrap();
    }
    assert_eq!(lists(), 1, "the inventory listed again for a refused spec");
    assert_eq!(
        env.metric("ferry_controller_api_writes_total{verb=\"status\",kind=\"MigrationWave\"}"),
        1,
        "the failure written once"
    );

    // Narrowed (a new spec), the selector is resolved again.
    let narrow = serde_json::json!({"spec": {"selector": {"namePattern": env.vm.name}}});
    waves
        .patch("broad", &PatchParams::default(), &Patch::Merge(&narrow))
        .await
        .unwrap();
    assert_eq!(selected(&env, "broad", 1).await, vec![env.vm.name.clone()]);
    assert_eq!(lists(), 2);
}
