//! The vSphere edge against the lab's real vcsim over TLS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_harness::{InventoryVm, lab};
use ferry_vsphere::{
    DiskBacking, Endpoint, Error, Firmware, PowerState, Session, Thumbprint, TlsPolicy, VmSelector,
    validate_layout,
};

fn endpoint(tls: TlsPolicy) -> Endpoint {
    let vc = &lab().info.vcenter;
    Endpoint {
        url: vc.url.clone(),
        username: vc.username.clone(),
        password: vc.password.clone().into(),
        tls,
    }
}

fn pinned_sha1() -> Endpoint {
    endpoint(TlsPolicy::Thumbprint(
        Thumbprint::parse(&lab().info.vcenter.thumbprint_sha1).unwrap(),
    ))
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = ferry_harness::repo_root()
        .join("target/test-scratch")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn power(inv: &InventoryVm) -> PowerState {
    match inv.power_state.as_str() {
        "poweredOn" => PowerState::PoweredOn,
        "poweredOff" => PowerState::PoweredOff,
        _ => PowerState::Suspended,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn login_with_either_thumbprint_finds_a_vm_by_name_moref_and_uuid() {
    let vm = lab().claim_vm().unwrap();
    for t in [
        &lab().info.vcenter.thumbprint_sha1,
        &lab().info.vcenter.thumbprint_sha256,
    ] {
        // Lower case without colons must work as well as vSphere's own spelling.
        let loose = t.replace(':', "").to_lowercase();
        for text in [t.as_str(), loose.as_str()] {
            let s = Session::connect(&endpoint(TlsPolicy::Thumbprint(
                Thumbprint::parse(text).unwrap(),
            )))
            .await
            .unwrap();
            s.logout().await.unwrap();
        }
    }

    let s = Session::connect(&pinned_sha1()).await.unwrap();
    let by_name = s
        .find_vm(&VmSelector::Name(vm.name.clone()))
        .await
        .unwrap()
        .expect("found by name");
    assert_eq!(by_name.moref, vm.moref);
    assert_eq!(by_name.name, vm.name);
    assert_eq!(by_name.uuid, vm.uuid);
    assert_eq!(by_name.instance_uuid, vm.instance_uuid);
    assert_eq!(by_name.power_state, power(&vm));
    assert_eq!(by_name.guest_id, vm.guest_id);
    assert_eq!(by_name.num_cpu as i64, vm.num_cpu);
    assert_eq!(by_name.memory_mib as i64, vm.memory_mib);
    assert_eq!(
        by_name.firmware,
        if vm.firmware == "efi" {
            Firmware::Efi
        } else {
            Firmware::Bios
        }
    );
    assert_eq!(by_name.datacenter, lab().info.vcenter.datacenter);
    let disks: Vec<_> = by_name
        .disks
        .iter()
        .map(|d| {
            (
                d.key as i64,
                d.datastore_path.clone(),
                d.capacity_bytes as i64,
            )
        })
        .collect();
    let want: Vec<_> = vm
        .disks
        .iter()
        .map(|d| (d.key, d.datastore_path.clone(), d.capacity_bytes))
        .collect();
    assert_eq!(disks, want);
    assert!(
        by_name
            .disks
            .iter()
            .all(|d| d.backing == DiskBacking::Flat && !d.has_parent),
        "{:?}",
        by_name.disks
    );
    let nics: Vec<_> = by_name
        .nics
        .iter()
        .map(|n| (n.mac.clone(), n.network.clone()))
        .collect();
    let want: Vec<_> = vm
        .nics
        .iter()
        .map(|n| (n.mac.clone(), n.network.clone()))
        .collect();
    assert_eq!(nics, want);
    assert_eq!(validate_layout(&by_name), Ok(()));

    let by_id = s
        .find_vm(&VmSelector::Id(vm.moref.clone()))
        .await
        .unwrap()
        .expect("found by moref");
    assert_eq!(by_id, by_name);
    let by_uuid = s
        .find_vm(&VmSelector::Uuid(vm.uuid.clone()))
        .await
        .unwrap()
        .expect("found by bios uuid");
    assert_eq!(by_uuid.moref, vm.moref);
    let by_instance = s
        .find_vm(&VmSelector::Uuid(vm.instance_uuid.clone()))
        .await
        .unwrap()
        .expect("found by instance uuid");
    assert_eq!(by_instance.moref, vm.moref);
    assert_eq!(s.power_state(&vm.moref).await.unwrap(), power(&vm));
    s.logout().await.unwrap();
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_vm_is_none_by_every_selector() {
    let s = Session::connect(&pinned_sha1()).await.unwrap();
    for sel in [
        VmSelector::Name("no-such-vm".into()),
        VmSelector::Id("vm-999999".into()),
        VmSelector::Uuid("00000000-0000-0000-0000-000000000000".into()),
    ] {
        assert_eq!(s.find_vm(&sel).await.unwrap(), None, "{sel}");
    }
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn power_off_and_on_wait_for_the_task_and_are_idempotent() {
    let vm = lab().claim_vm().unwrap();
    let s = Session::connect(&pinned_sha1()).await.unwrap();
    s.power_on(&vm.moref).await.unwrap();
    assert_eq!(
        s.power_state(&vm.moref).await.unwrap(),
        PowerState::PoweredOn
    );
    s.power_off(&vm.moref).await.unwrap();
    assert_eq!(
        s.power_state(&vm.moref).await.unwrap(),
        PowerState::PoweredOff
    );
    s.power_off(&vm.moref).await.unwrap();
    assert_eq!(
        s.power_state(&vm.moref).await.unwrap(),
        PowerState::PoweredOff
    );
    s.power_on(&vm.moref).await.unwrap();
    s.power_on(&vm.moref).await.unwrap();
    assert_eq!(
        s.power_state(&vm.moref).await.unwrap(),
        PowerState::PoweredOn
    );
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_is_bad_credentials() {
    let mut ep = pinned_sha1();
    ep.password = format!("{}-wrong", lab().info.vcenter.password).into();
    let err = Session::connect(&ep).await.unwrap_err();
    assert!(
        matches!(&err, Error::BadCredentials { user } if *user == ep.username),
        "{err:?}"
    );
    assert!(!err.is_transient());
    assert_eq!(err.reason(), "BadCredentials");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_thumbprint_is_a_mismatch_naming_both_digests() {
    let wrong = "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33";
    let err = Session::connect(&endpoint(TlsPolicy::Thumbprint(
        Thumbprint::parse(wrong).unwrap(),
    )))
    .await
    .unwrap_err();
    match &err {
        Error::ThumbprintMismatch { expected, actual } => {
            assert_eq!(expected, wrong);
            assert_eq!(actual, &lab().info.vcenter.thumbprint_sha1);
        }
        other => panic!("expected ThumbprintMismatch, got {other:?}"),
    }
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(
        msg.contains(wrong) && msg.contains(&lab().info.vcenter.thumbprint_sha1),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_self_signed_endpoint_without_thumbprint_is_untrusted() {
    let err = Session::connect(&endpoint(TlsPolicy::SystemRoots))
        .await
        .unwrap_err();
    match &err {
        Error::TlsUntrusted { sha256, .. } => {
            assert_eq!(sha256, &lab().info.vcenter.thumbprint_sha256)
        }
        other => panic!("expected TlsUntrusted, got {other:?}"),
    }
    assert!(!err.is_transient());
}

#[tokio::test(flavor = "multi_thread")]
async fn insecure_mode_logs_in_without_a_thumbprint() {
    let s = Session::connect(&endpoint(TlsPolicy::Insecure))
        .await
        .unwrap();
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_port_is_unreachable_and_transient() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut ep = pinned_sha1();
    ep.url = format!("https://127.0.0.1:{port}/sdk");
    let err = Session::connect(&ep).await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(err.is_transient());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_placed_by_put_vmdk_downloads_byte_identical() {
    let vm = lab().claim_vm().unwrap();
    let dir = scratch("download");
    let disk = ferry_harness::put_vmdk(&vm, &dir, 8, 7).unwrap();
    let s = Session::connect(&pinned_sha1()).await.unwrap();
    let info = s
        .find_vm(&VmSelector::Id(vm.moref.clone()))
        .await
        .unwrap()
        .unwrap();
    let dest = dir.join("downloaded.vmdk");
    let mut calls = 0u32;
    let mut last = (0, None);
    let n = s
        .download(
            &info.disks[0].datastore_path,
            &info.datacenter,
            &dest,
            |done, total| {
                calls += 1;
                last = (done, total);
            },
        )
        .await
        .unwrap();
    let original = std::fs::read(&disk.vmdk).unwrap();
    assert_eq!(n, original.len() as u64);
    assert!(
        std::fs::read(&dest).unwrap() == original,
        "downloaded bytes differ from the datastore file"
    );
    assert!(calls >= 2);
    assert_eq!(last, (n, Some(n)));
    assert!(!dir.join("downloaded.vmdk.part").exists());
    s.logout().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_folder_service_wants_the_session_cookie() {
    let vm = lab().claim_vm().unwrap();
    let s = Session::connect(&pinned_sha1()).await.unwrap();
    let url = s
        .download_url(&vm.disks[0].datastore_path, &lab().info.vcenter.datacenter)
        .unwrap();
    let cookie = s
        .session_cookie()
        .expect("a vmware_soap_session cookie after login");
    // A client with neither cookie nor credentials is turned away; the session cookie alone is enough.
    let (config, _) = ferry_vsphere::tls::client_config(&TlsPolicy::Insecure).unwrap();
    let bare = reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .build()
        .unwrap();
    assert_eq!(
        bare.head(url.clone()).send().await.unwrap().status(),
        reqwest::StatusCode::UNAUTHORIZED
    );
    let ok = bare
        .head(url)
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert!(ok.status().is_success(), "{}", ok.status());
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_datastore_file_is_not_found() {
    let s = Session::connect(&pinned_sha1()).await.unwrap();
    let dir = scratch("missing");
    let err = s
        .download(
            "[LocalDS_0] no-such-vm/none.vmdk",
            &lab().info.vcenter.datacenter,
            &dir.join("x"),
            |_, _| {},
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    s.logout().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lab's second vCenter, whose certificate a private CA signed.
fn ca_endpoint(tls: TlsPolicy) -> Endpoint {
    let vc = &lab().info.vcenter_ca;
    Endpoint {
        url: vc.url.clone(),
        username: vc.username.clone(),
        password: vc.password.clone().into(),
        tls,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ca_signed_vcenter_is_trusted_with_its_ca_bundle_and_refused_without() {
    ferry_vsphere::tls::install_default_provider();
    let pem = std::fs::read_to_string(&lab().info.vcenter_ca.ca_file).unwrap();
    let bundle = ferry_vsphere::tls::CaBundle::from_pem(&pem).unwrap();
    let s = Session::connect(&ca_endpoint(TlsPolicy::CaBundle(bundle)))
        .await
        .unwrap();
    let vm = &lab().info.inventory_ca().unwrap()[0];
    let found = s
        .find_vm(&VmSelector::Name(vm.name.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.moref, vm.moref);
    s.logout().await.unwrap();

    // The platform's trust store does not know the lab's CA; another CA is no better.
    for tls in [
        TlsPolicy::SystemRoots,
        TlsPolicy::CaBundle(
            ferry_vsphere::tls::CaBundle::from_pem(include_str!(
                "../../vsphere/src/testdata/test-ca.pem"
            ))
            .unwrap(),
        ),
    ] {
        let err = Session::connect(&ca_endpoint(tls.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::TlsUntrusted { .. }),
            "{tls:?}: {err:?}"
        );
    }
    // The bundle checks the host name too: the main vcsim's self-signed certificate is no CA's.
    let pem_bundle = ferry_vsphere::tls::CaBundle::from_pem(&pem).unwrap();
    let err = Session::connect(&endpoint(TlsPolicy::CaBundle(pem_bundle)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TlsUntrusted { .. }), "{err:?}");
}

fn shape(vm: &str, args: &[&str]) {
    let out =
        std::process::Command::new(ferry_harness::repo_root().join("target/lab/bin/ferry-lab"))
            .arg("shape")
            .arg("--state-dir")
            .arg(&lab().info.state_dir)
            .args(["--vm", vm])
            .args(args)
            .output()
            .expect("ferry-lab shape");
    assert!(
        out.status.success(),
        "ferry-lab shape {vm} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A VM's marks (what defines a copy of it) and the power-ons vCenter recorded since: a power
/// cycle shows as an event after the marks' time, a disk added and the reconfiguration in the
/// marks themselves.
#[tokio::test(flavor = "multi_thread")]
async fn marks_and_power_on_events_tell_a_power_cycle_and_a_disk_added() {
    let vm = lab().claim_vm().unwrap();
    shape(&vm.name, &["--power", "off"]);
    let s = Session::connect(&pinned_sha1()).await.unwrap();
    let before = s.marks(&vm.moref).await.unwrap();
    assert_eq!(before.power_state, PowerState::PoweredOff);
    assert_eq!(before.disks.len(), 1);
    assert_eq!(before.disks_reported, Some(1));
    assert!(before.unread.is_empty(), "{:?}", before.unread);
    assert_eq!(
        s.powered_on_since(&vm.moref, &before.at).await.unwrap(),
        Vec::<String>::new(),
        "nothing since the marks were read"
    );

    shape(&vm.name, &["--power", "on"]);
    shape(&vm.name, &["--power", "off"]);
    let ons = s.powered_on_since(&vm.moref, &before.at).await.unwrap();
    assert_eq!(ons.len(), 1, "one power-on since: {ons:?}");
    let again = s.marks(&vm.moref).await.unwrap();
    assert_eq!(again.power_state, PowerState::PoweredOff, "off again");
    assert!(
        s.powered_on_since(&vm.moref, &again.at)
            .await
            .unwrap()
            .is_empty(),
        "the marks read after it see no power-on since"
    );

    shape(&vm.name, &["--add-disk", "plain"]);
    let grown = s.marks(&vm.moref).await.unwrap();
    assert_eq!(grown.disks.len(), 2, "{:?}", grown.disks);
    assert_eq!(grown.disks_reported, Some(2));
    assert_eq!(grown.disks[1].capacity_bytes, 16 << 20);
    assert_ne!(
        grown.change_version, before.change_version,
        "a reconfiguration moves config.changeVersion"
    );
    assert!(grown.change_version.is_some());
    s.logout().await.unwrap();
}
