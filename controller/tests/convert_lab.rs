//! The converter end to end against the lab: a real VMDK behind a vcsim VM, real qemu-img,
//! real S3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_controller::children::job::PERMANENT_EXIT_CODE;
use ferry_controller::convert::{
    self, ConvertArgs, DiskSpec, DiskStatus, OutputFormat, TRANSIENT_EXIT_CODE,
};
use ferry_controller::staging::{Staging, StagingConfig, sha256_file};
use ferry_harness::{InventoryVm, lab};

fn scratch(name: &str) -> PathBuf {
    let dir = ferry_harness::repo_root()
        .join("target/test-scratch")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn prefix(test: &str) -> String {
    format!("tests/convert-{test}-{}", std::process::id())
}

fn args(vm: &InventoryVm, disks: Vec<DiskSpec>, format: OutputFormat, work: &Path) -> ConvertArgs {
    let info = &lab().info;
    ConvertArgs {
        vsphere_url: info.vcenter.url.clone(),
        username: info.vcenter.username.clone(),
        password: info.vcenter.password.clone().into(),
        thumbprint: Some(info.vcenter.thumbprint_sha256.clone()),
        cacert: None,
        insecure: false,
        // The datacenter is found from the VM, as in the Job.
        vm_moref: Some(vm.moref.clone()),
        datacenter: None,
        disks,
        format,
        s3_endpoint: info.s3.endpoint.clone(),
        s3_bucket: info.s3.bucket.clone(),
        s3_region: info.s3.region.clone(),
        s3_access_key: info.s3.access_key.clone(),
        s3_secret_key: info.s3.secret_key.clone().into(),
        s3_prefix: String::new(),
        s3_cacert: None,
        work_dir: work.to_owned(),
        qemu_img: "qemu-img".into(),
    }
}

fn staging() -> Staging {
    let s3 = &lab().info.s3;
    Staging::new(StagingConfig {
        endpoint: s3.endpoint.clone(),
        bucket: s3.bucket.clone(),
        region: s3.region.clone(),
        access_key: s3.access_key.clone(),
        secret_key: s3.secret_key.clone().into(),
        prefix: String::new(),
        ca_bundle: None,
    })
    .unwrap()
}

fn qemu_img(args: &[&str]) {
    let out = Command::new("qemu-img").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "qemu-img {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_64_mib_vmdk_becomes_a_staged_raw_image_and_a_rerun_skips_it() {
    let vm = lab().claim_vm().unwrap();
    let dir = scratch("convert-raw");
    let disk = ferry_harness::put_vmdk(&vm, &dir, 64, 42).unwrap();
    let expected = dir.join("expected.raw");
    qemu_img(&[
        "convert",
        "-f",
        "vmdk",
        "-O",
        "raw",
        disk.vmdk.to_str().unwrap(),
        expected.to_str().unwrap(),
    ]);
    let work = dir.join("work");
    let key = format!("{}/disk-0.raw", prefix("raw"));
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: key.clone(),
    };

    let report = convert::run(args(&vm, vec![spec.clone()], OutputFormat::Raw, &work))
        .await
        .unwrap();
    assert_eq!(report.disks.len(), 1);
    let d = &report.disks[0];
    assert_eq!(d.status, DiskStatus::Converted);
    assert_eq!(d.size, 64 << 20);
    assert_eq!(d.virtual_size, Some(64 << 20));
    assert_eq!(d.downloaded, std::fs::metadata(&disk.vmdk).unwrap().len());
    assert_eq!(d.sha256, sha256_file(&expected).await.unwrap());
    assert!(is_empty_dir(&work), "work dir left behind");

    let st = staging();
    let obj = st.head(&key).await.unwrap().expect("staged");
    assert_eq!(obj.size, 64 << 20);
    assert_eq!(obj.sha256.as_deref(), Some(d.sha256.as_str()));
    assert_eq!(
        obj.metadata.get("source-path"),
        Some(&vm.disks[0].datastore_path)
    );
    assert_eq!(obj.metadata.get("format").map(String::as_str), Some("raw"));
    assert_eq!(
        obj.metadata.get("virtual-size").map(String::as_str),
        Some("67108864")
    );
    let staged = dir.join("staged.raw");
    st.get_to_file(&key, &staged).await.unwrap();
    assert!(
        std::fs::read(&staged).unwrap() == std::fs::read(&expected).unwrap(),
        "staged bytes differ from qemu-img convert"
    );
    assert!(
        std::fs::read(&staged).unwrap() == std::fs::read(&disk.raw).unwrap(),
        "staged bytes differ from the original disk"
    );

    // The re-run finds the object staged and never logs in: a wrong password cannot hurt it.
    let mut again = args(&vm, vec![spec], OutputFormat::Raw, &work);
    again.password = "wrong".into();
    let report = convert::run(again).await.unwrap();
    assert_eq!(report.disks[0].status, DiskStatus::Skipped);
    assert_eq!(report.disks[0].sha256, d.sha256);
    assert_eq!(report.disks[0].downloaded, 0);

    st.delete_prefix(&prefix("raw")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn qcow2_output_converts_back_to_the_original_bytes() {
    let vm = lab().claim_vm().unwrap();
    let dir = scratch("convert-qcow2");
    let disk = ferry_harness::put_vmdk(&vm, &dir, 16, 9).unwrap();
    let key = format!("{}/disk-0.qcow2", prefix("qcow2"));
    let spec = DiskSpec {
        index: None,
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: key.clone(),
    };
    let mut a = args(&vm, vec![spec], OutputFormat::Qcow2, &dir.join("work"));
    // Insecure mode and an explicit datacenter take the other paths through the arguments.
    a.thumbprint = None;
    a.insecure = true;
    a.vm_moref = None;
    a.datacenter = Some(lab().info.vcenter.datacenter.clone());
    let report = convert::run(a).await.unwrap();
    assert_eq!(report.disks[0].status, DiskStatus::Converted);
    assert_eq!(report.disks[0].virtual_size, Some(16 << 20));

    let st = staging();
    let staged = dir.join("staged.qcow2");
    st.get_to_file(&key, &staged).await.unwrap();
    assert_eq!(sha256_file(&staged).await.unwrap(), report.disks[0].sha256);
    let back = dir.join("back.raw");
    qemu_img(&[
        "convert",
        "-f",
        "qcow2",
        "-O",
        "raw",
        staged.to_str().unwrap(),
        back.to_str().unwrap(),
    ]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&disk.raw).unwrap());
    st.delete_prefix(&prefix("qcow2")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_exit_permanent_or_transient() {
    let vm = lab().claim_vm().unwrap();
    let dir = scratch("convert-fail");
    let work = dir.join("work");
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: format!("{}/disk-0.raw", prefix("fail")),
    };

    let mut bad_password = args(&vm, vec![spec.clone()], OutputFormat::Raw, &work);
    bad_password.password = "wrong".into();
    let err = convert::run(bad_password).await.unwrap_err();
    assert_eq!(err.reason(), "BadCredentials", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);

    let mut no_bucket = args(&vm, vec![spec.clone()], OutputFormat::Raw, &work);
    no_bucket.s3_bucket = "no-such-bucket".into();
    let err = convert::run(no_bucket).await.unwrap_err();
    assert_eq!(err.reason(), "NoSuchBucket", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);
    assert!(err.to_string().contains("no-such-bucket"), "{err}");

    let mut wrong_pin = args(&vm, vec![spec.clone()], OutputFormat::Raw, &work);
    wrong_pin.thumbprint = Some("00".repeat(32));
    let err = convert::run(wrong_pin).await.unwrap_err();
    assert_eq!(err.reason(), "ThumbprintMismatch", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut closed = args(&vm, vec![spec.clone()], OutputFormat::Raw, &work);
    closed.vsphere_url = format!("https://127.0.0.1:{port}/sdk");
    let err = convert::run(closed).await.unwrap_err();
    assert_eq!(err.reason(), "Unreachable", "{err}");
    assert_eq!(err.exit_code(), TRANSIENT_EXIT_CODE);

    let missing_disk = DiskSpec {
        datastore_path: "[LocalDS_0] no-such-vm/disk.vmdk".into(),
        ..spec.clone()
    };
    let err = convert::run(args(&vm, vec![missing_disk], OutputFormat::Raw, &work))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "NotFound", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);

    assert!(is_empty_dir(&work), "work dir left behind after failures");
    assert_eq!(
        staging().list(&prefix("fail")).await.unwrap(),
        vec![],
        "nothing staged by failed runs"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_esxi_style_descriptor_is_followed_to_its_flat_extent() {
    let vm = lab().claim_vm().unwrap();
    let dir = scratch("convert-descriptor");
    // What ESXi keeps on a datastore: a text descriptor beside the data in "-flat.vmdk".
    let descriptor = &vm.disks[0].local_path;
    let flat = descriptor.with_file_name("disk1-flat.vmdk");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..(8 << 20) / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    std::fs::write(&flat, &data).unwrap();
    std::fs::write(
        descriptor,
        "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"vmfs\"\n\n\
         # Extent description\nRW 16384 VMFS \"disk1-flat.vmdk\"\n\n# The Disk Data Base\n#DDB\nddb.adapterType = \"lsilogic\"\n",
    )
    .unwrap();
    let key = format!("{}/disk-0.raw", prefix("descriptor"));
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: key.clone(),
    };
    let report = convert::run(args(&vm, vec![spec], OutputFormat::Raw, &dir.join("work")))
        .await
        .unwrap();
    let d = &report.disks[0];
    assert_eq!(d.status, DiskStatus::Converted);
    assert_eq!(d.size, 8 << 20);
    assert_eq!(
        d.downloaded,
        std::fs::metadata(descriptor).unwrap().len() + (8 << 20)
    );
    let staged = dir.join("staged.raw");
    staging().get_to_file(&key, &staged).await.unwrap();
    assert!(
        std::fs::read(&staged).unwrap() == data,
        "staged bytes differ from the flat extent"
    );
    staging()
        .delete_prefix(&prefix("descriptor"))
        .await
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_descriptor_whose_flat_extent_is_short_is_refused_not_copied_as_zeros() {
    // vcsim's own disks are a 10 GiB descriptor over an empty flat file.
    let vm = lab().claim_vm().unwrap();
    let dir = scratch("convert-short");
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: format!("{}/disk-0.raw", prefix("short")),
    };
    let err = convert::run(args(&vm, vec![spec], OutputFormat::Raw, &dir.join("work")))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "BadDisk", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);
    assert!(err.to_string().contains("disk1-flat.vmdk"), "{err}");
    assert_eq!(staging().list(&prefix("short")).await.unwrap(), vec![]);
    std::fs::remove_dir_all(&dir).unwrap();
}
