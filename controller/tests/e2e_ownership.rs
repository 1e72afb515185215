//! Children are never adopted across migrations: every child carries the uid of the migration
//! that made it, and an object under a child's name with another uid (the released leftovers of
//! an earlier migration of the same name, or anyone's hand-made object) is a conflict with a
//! precise reason — never progress. Deleting the leftover and retrying imports the new bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_controller::apis::cdi::DataVolume;
use ferry_controller::apis::kubevirt::VirtualMachine;
use ferry_crds::{ConditionStatus, ConditionType, Phase, names};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

fn never_imported(v: &ferry_crds::VirtualMachineMigration) -> bool {
    v.condition(ConditionType::DiskImported)
        .is_none_or(|c| c.status != ConditionStatus::True)
        && v.status.as_ref().is_none_or(|s| {
            s.disks
                .iter()
                .all(|d| d.import_phase.as_deref() != Some("Succeeded"))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_created_again_under_the_same_name_never_takes_the_old_disk_as_imported() {
    let mut env = Env::new("e2e-own-again", 16).await;
    env.start_sim();
    env.start_controller();
    let mut first = env.migration("again");
    first.spec.target.name = Some("again-1".into());
    let first_uid = env.create(&first).await.uid().unwrap();
    let v = env.wait_terminal("again", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let old_bytes = env.disk.raw.clone();
    env.api()
        .delete("again", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone("again", 120).await;
    // What the first one left, released to the user: its VM and DataVolume, with its uid.
    let dvs: Api<DataVolume> = env.ns.api();
    let leftover = dvs.get("again-disk-0").await.unwrap();
    assert_eq!(leftover.labels()[names::MIGRATION_UID_LABEL], first_uid);

    // The source disk changes; the same name is migrated again.
    let new_disk =
        ferry_harness::put_vmdk(&env.vm, &env.scratch.join("second"), 16, 0xbeef).unwrap();
    assert!(!same_file(&new_disk.raw, &old_bytes));
    // Same target name: the released VM is the first migration's, not this one's.
    let second = env.create(&first).await;
    let v = env.wait_phase("again", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "TargetNameTaken", "{message}");
    assert!(message.contains("again-1"), "{message}");
    assert!(never_imported(&v));
    assert_ne!(second.uid(), Some(first_uid.clone()));
    env.api()
        .delete("again", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone("again", 120).await;

    // Another target name: now the first one's DataVolume stands in the way.
    let mut third = env.migration("again");
    third.spec.target.name = Some("again-2".into());
    env.create(&third).await;
    let v = env.wait_phase("again", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "TargetConflict", "{message}");
    assert!(
        message.contains("DataVolume again-disk-0") && message.contains(&first_uid),
        "names the object and who made it: {message}"
    );
    assert!(never_imported(&v));
    assert_eq!(
        dvs.get("again-disk-0").await.unwrap().uid(),
        leftover.uid(),
        "left alone"
    );

    // The user deletes the leftover and retries: the new bytes are imported.
    dvs.delete("again-disk-0", &DeleteParams::default())
        .await
        .unwrap();
    ferry_harness::eventually(
        "the leftover DataVolume gone",
        std::time::Duration::from_secs(60),
        || async { matches!(dvs.get_opt("again-disk-0").await, Ok(None)).then_some(()) },
    )
    .await
    .unwrap();
    env.patch_spec("again", serde_json::json!({"retry": 1}))
        .await;
    let v = env
        .wait_for("again", "the retried migration to finish", 300, |v| {
            v.phase() == Phase::Succeeded
        })
        .await;
    assert!(
        same_file(&env.volume("again-disk-0"), &new_disk.raw),
        "the volume holds the new disk's bytes: {}",
        serde_yaml_status(&v)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_datavolume_on_a_child_name_is_a_conflict_and_left_alone() {
    let mut env = Env::new("e2e-own-dv", 16).await;
    let dvs: Api<DataVolume> = env.ns.api();
    // Someone's DataVolume, already "Succeeded", under the name the migration would use.
    let squatter: DataVolume = serde_json::from_value(serde_json::json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "squat-disk-0", "labels": {names::MIGRATION_LABEL: "squat"}},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "16Mi"}}}},
    }))
    .unwrap();
    let made = dvs.create(&PostParams::default(), &squatter).await.unwrap();
    dvs.patch_status(
        "squat-disk-0",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"phase": "Succeeded", "progress": "100.0%"}})),
    )
    .await
    .unwrap();
    env.start_controller();
    env.create(&env.migration("squat")).await;
    let v = env.wait_phase("squat", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "TargetConflict", "{message}");
    assert!(
        message.contains("DataVolume squat-disk-0") && message.contains("not made by ferry"),
        "{message}"
    );
    assert!(never_imported(&v));
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "refused before the power-off"
    );
    let still = dvs.get("squat-disk-0").await.unwrap();
    assert_eq!(still.uid(), made.uid());
    assert!(still.owner_references().is_empty(), "not adopted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_carrying_the_migrations_name_but_not_its_uid_is_not_its_own() {
    let mut env = Env::new("e2e-own-vm", 16).await;
    let vms: Api<VirtualMachine> = env.ns.api();
    // What a released VM of an earlier migration "squat2" looks like: the name label, no owner.
    let vm: VirtualMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "squat2-vm", "labels": {names::MIGRATION_LABEL: "squat2"}},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
    }))
    .unwrap();
    let made = vms.create(&PostParams::default(), &vm).await.unwrap();
    env.start_controller();
    let mut vmm = env.migration("squat2");
    vmm.spec.target.name = Some("squat2-vm".into());
    env.create(&vmm).await;
    let v = env.wait_phase("squat2", Phase::Failed, 120).await;
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "TargetNameTaken", "{message}");
    assert!(message.contains("squat2-vm"), "{message}");
    assert_eq!(vms.get("squat2-vm").await.unwrap().uid(), made.uid());
}
