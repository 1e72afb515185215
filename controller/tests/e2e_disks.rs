//! No disk silently dropped, end to end against the lab: a source VM with a disk ferry cannot
//! read (`ferry-lab shape --add-disk unreadable`: vcsim answers it without a value the API
//! requires, as a vCenter may answer a device ferry's vim_rs does not know) is read as far as it
//! can be, the disk is named, and preflight holds the migration in Pending (a Critical
//! concern) with the source untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_controller::apis::cdi::DataVolume;
use ferry_crds::{ConcernCode, ConditionStatus, ConditionType, Phase, Reason};
use ferry_vsphere::{Endpoint, Session, TlsPolicy, Unread};
use k8s_openapi::api::batch::v1::Job;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_ferry_cannot_read_holds_the_migration_in_preflight_naming_it_and_the_source_stays_on()
 {
    let mut env = Env::new("disks-unread", 4).await;
    env.shape(&env.vm.name, &["--add-disk", "unreadable"]);
    assert_eq!(env.power_state().await, "poweredOn");

    // What ferry's own vSphere client reads of vcsim's answer: one disk of the two vSphere
    // counts, and the other one named.
    let info = &env.lab.info.vcenter;
    ferry_vsphere::tls::install_default_provider();
    let session = Session::connect(&Endpoint {
        url: info.url.clone(),
        username: info.username.clone(),
        password: info.password.clone().into(),
        tls: TlsPolicy::Insecure,
    })
    .await
    .unwrap();
    let vm = session.vm_info(&env.vm.moref).await.unwrap().unwrap();
    let _ = session.logout().await;
    assert_eq!((vm.disks.len(), vm.disks_reported), (1, Some(2)), "{vm:?}");
    let disk_file = format!("[LocalDS_0] {}/disk2.vmdk", env.vm.name);
    let [Unread::Device(unread)] = vm.unread.as_slice() else {
        panic!("unread: {:?}", vm.unread)
    };
    assert!(
        unread.is_disk()
            && unread.key.is_some()
            && unread.label.as_deref() == Some("Hard disk 2")
            && unread.file.as_deref() == Some(disk_file.as_str()),
        "{unread:?}"
    );

    env.start_sim();
    env.start_controller();
    env.create(&env.migration("unread")).await;
    let held = env
        .wait_for("unread", "preflight to hold it", 120, |v| {
            v.held_by_preflight()
        })
        .await;
    let st = held.status.clone().unwrap();
    assert_eq!(held.phase(), Phase::Pending, "{}", serde_yaml_status(&held));
    let preflight = st.preflight.clone().unwrap();
    let blocking: Vec<_> = preflight.blocking().collect();
    let [concern] = blocking.as_slice() else {
        panic!("one Critical concern: {}", serde_yaml_status(&held))
    };
    assert_eq!(concern.code, ConcernCode::IncompleteInventory);
    for says in [
        format!(
            "ferry could not read device {} \"Hard disk 2\" (VirtualDisk",
            unread.key.unwrap()
        ),
        disk_file.clone(),
        "vSphere reports 2 virtual disk(s), ferry read 1".to_owned(),
    ] {
        assert!(
            concern.message.contains(&says),
            "{:?} lacks {says:?}",
            concern.message
        );
    }
    let validated = held.condition(ConditionType::Validated).unwrap();
    assert_eq!(
        (validated.status, validated.reason),
        (ConditionStatus::False, Reason::PreflightFailed)
    );
    assert!(
        validated.message.contains("IncompleteInventory"),
        "{}",
        validated.message
    );
    let done = held;

    // Nothing was touched: the source was never asked to power off and still runs, and no
    // conversion or import began.
    assert_eq!(st.source_power_off, None, "{}", serde_yaml_status(&done));
    assert_eq!(env.power_state().await, "poweredOn");
    assert!(
        env.ns
            .api::<Job>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no Job"
    );
    assert!(
        env.ns
            .api::<DataVolume>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no DataVolume"
    );
}
