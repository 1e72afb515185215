//! The converter end to end against the lab: a real VMDK behind a vcsim VM, real qemu-img,
//! real S3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use std::collections::BTreeMap;
use std::ffi::OsString;

use ferry_convert::job_contract::{PERMANENT_EXIT_CODE, env};
use ferry_convert::{
    self as convert, ConvertArgs, Credentials, DataPath, DiskFormat, DiskSpec, DiskStatus,
    TRANSIENT_EXIT_CODE,
};
use ferry_harness::{DiskKind, InventoryVm, lab};
use ferry_staging::{RecordState, Staging, StagingConfig, sha256_file};

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

fn args(vm: &InventoryVm, disks: Vec<DiskSpec>, format: DiskFormat, work: &Path) -> ConvertArgs {
    let info = &lab().info;
    ConvertArgs {
        // The datacenter is found from the VM, as in the Job.
        vm_moref: Some(vm.moref.clone()),
        datacenter: None,
        disks,
        format,
        s3_region: info.s3.region.clone(),
        s3_prefix: String::new(),
        work_dir: work.to_owned(),
        qemu_img: "qemu-img".into(),
        max_read_rate: None,
        job_uid: None,
        snapshot: None,
    }
}

/// The lab's credentials as the conversion Job's environment carries them, `changes` applied
/// (`None` unsets a variable), read by the reader the Job uses.
fn creds(changes: &[(&str, Option<&str>)]) -> Credentials {
    let info = &lab().info;
    let (vc, s3) = (&info.vcenter, &info.s3);
    let mut vars: BTreeMap<&str, &str> = BTreeMap::from([
        (env::VSPHERE_URL, vc.url.as_str()),
        (env::VSPHERE_USERNAME, vc.username.as_str()),
        (env::VSPHERE_PASSWORD, vc.password.as_str()),
        (env::VSPHERE_THUMBPRINT, vc.thumbprint_sha256.as_str()),
        (env::S3_ENDPOINT, s3.endpoint.as_str()),
        (env::S3_BUCKET, s3.bucket.as_str()),
        (env::S3_ACCESS_KEY_ID, s3.access_key.as_str()),
        (env::S3_SECRET_ACCESS_KEY, s3.secret_key.as_str()),
    ]);
    for (k, v) in changes {
        match v {
            Some(v) => vars.insert(k, v),
            None => vars.remove(k),
        };
    }
    Credentials::read(|name| vars.get(name).map(OsString::from)).unwrap()
}

/// Powers a lab VM off: vSphere tells a disk's allocated areas only for a powered-off VM.
async fn power_off(vm: &InventoryVm) {
    let info = &lab().info;
    ferry_vsphere::tls::install_default_provider();
    let ep = ferry_vsphere::Endpoint {
        url: info.vcenter.url.clone(),
        username: info.vcenter.username.clone(),
        password: info.vcenter.password.clone().into(),
        tls: ferry_vsphere::TlsPolicy::Insecure,
    };
    let s = ferry_vsphere::Session::connect(&ep).await.unwrap();
    s.power_off(&vm.moref).await.unwrap();
    let _ = s.logout().await;
}

/// A claimed lab VM, powered off: the converter reads only the disks of a VM that is off.
async fn claimed_off() -> InventoryVm {
    let vm = lab().claim_vm().unwrap();
    power_off(&vm).await;
    vm
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

/// Runs qemu-img, which must succeed; its standard output.
fn qemu_img(args: &[&str]) -> String {
    ferry_harness::qemu_img(args).unwrap_or_else(|e| panic!("{e}"))
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_64_mib_vmdk_becomes_a_staged_raw_image_and_a_rerun_skips_it() {
    let vm = claimed_off().await;
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

    let report = convert::run(
        args(&vm, vec![spec.clone()], DiskFormat::Raw, &work),
        creds(&[]),
    )
    .await
    .unwrap();
    assert_eq!(report.disks.len(), 1);
    let d = &report.disks[0];
    assert_eq!(d.status, DiskStatus::Converted);
    assert_eq!(d.size, 64 << 20);
    assert_eq!(d.virtual_size, Some(64 << 20));
    assert_eq!(
        d.path,
        DataPath::QemuSink,
        "a sparse VMDK to raw: qemu-img into the sink"
    );
    assert!(d.downloaded <= std::fs::metadata(&disk.vmdk).unwrap().len());
    assert_eq!(d.sha256, sha256_file(&expected).await.unwrap());
    assert!(is_empty_dir(&work), "work dir left behind");

    let st = staging();
    let obj = st.head(&key).await.unwrap().expect("staged");
    assert_eq!(obj.size, 64 << 20);
    let rec = st.record(&key).await.unwrap().expect("a record");
    assert_eq!(rec.state, RecordState::Staged);
    assert_eq!(rec.sha256.as_deref(), Some(d.sha256.as_str()));
    assert_eq!(rec.upload_id, None, "no upload left open");
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
    let again = args(&vm, vec![spec], DiskFormat::Raw, &work);
    let wrong = creds(&[(env::VSPHERE_PASSWORD, Some("wrong"))]);
    let report = convert::run(again, wrong).await.unwrap();
    assert_eq!(report.disks[0].status, DiskStatus::Skipped);
    assert_eq!(report.disks[0].sha256, d.sha256);
    assert_eq!(report.disks[0].downloaded, 0);

    st.delete_prefix(&prefix("raw")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn qcow2_output_converts_back_to_the_original_bytes() {
    let vm = claimed_off().await;
    let dir = scratch("convert-qcow2");
    let disk = ferry_harness::put_vmdk(&vm, &dir, 16, 9).unwrap();
    let key = format!("{}/disk-0.qcow2", prefix("qcow2"));
    let spec = DiskSpec {
        index: None,
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: key.clone(),
    };
    let mut a = args(&vm, vec![spec], DiskFormat::Qcow2, &dir.join("work"));
    // Insecure mode and an explicit datacenter take the other paths through the arguments.
    let insecure = creds(&[
        (env::VSPHERE_THUMBPRINT, None),
        (env::VSPHERE_INSECURE, Some("true")),
    ]);
    a.vm_moref = None;
    a.datacenter = Some(lab().info.vcenter.datacenter.clone());
    let report = convert::run(a, insecure).await.unwrap();
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
    // What the verification compares the imported (raw) volume with: the raw contents' SHA-256.
    let raw_sum = sha256_file(&disk.raw).await.unwrap();
    assert_eq!(
        report.disks[0].raw_sha256.as_deref(),
        Some(raw_sum.as_str())
    );
    let record = st.record(&key).await.unwrap().unwrap();
    assert_eq!(
        record.raw_contents_sha256(),
        Some(raw_sum),
        "recorded with the staged image"
    );
    st.delete_prefix(&prefix("qcow2")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_exit_permanent_or_transient() {
    let vm = claimed_off().await;
    let dir = scratch("convert-fail");
    let work = dir.join("work");
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: format!("{}/disk-0.raw", prefix("fail")),
    };

    let bad_password = creds(&[(env::VSPHERE_PASSWORD, Some("wrong"))]);
    let a = args(&vm, vec![spec.clone()], DiskFormat::Raw, &work);
    let err = convert::run(a, bad_password).await.unwrap_err();
    assert_eq!(err.reason(), "BadCredentials", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);

    let no_bucket = creds(&[(env::S3_BUCKET, Some("no-such-bucket"))]);
    let a = args(&vm, vec![spec.clone()], DiskFormat::Raw, &work);
    let err = convert::run(a, no_bucket).await.unwrap_err();
    assert_eq!(err.reason(), "NoSuchBucket", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);
    assert!(err.to_string().contains("no-such-bucket"), "{err}");

    let zeros = "00".repeat(32);
    let wrong_pin = creds(&[(env::VSPHERE_THUMBPRINT, Some(zeros.as_str()))]);
    let a = args(&vm, vec![spec.clone()], DiskFormat::Raw, &work);
    let err = convert::run(a, wrong_pin).await.unwrap_err();
    assert_eq!(err.reason(), "ThumbprintMismatch", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("https://127.0.0.1:{port}/sdk");
    let closed = creds(&[(env::VSPHERE_URL, Some(url.as_str()))]);
    let a = args(&vm, vec![spec.clone()], DiskFormat::Raw, &work);
    let err = convert::run(a, closed).await.unwrap_err();
    assert_eq!(err.reason(), "Unreachable", "{err}");
    assert_eq!(err.exit_code(), TRANSIENT_EXIT_CODE);

    let missing_disk = DiskSpec {
        datastore_path: "[LocalDS_0] no-such-vm/disk.vmdk".into(),
        ..spec.clone()
    };
    let err = convert::run(
        args(&vm, vec![missing_disk], DiskFormat::Raw, &work),
        creds(&[]),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "NotFound", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);

    assert!(is_empty_dir(&work), "work dir left behind after failures");
    // No image; only the record of the disk that failed, saying why.
    let keys: Vec<String> = staging()
        .list(&prefix("fail"))
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(
        keys,
        vec![format!("{}.state.json", spec.key)],
        "nothing staged by failed runs"
    );
    let rec = staging().record(&spec.key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Failed);
    assert!(rec.error.unwrap().contains("no-such-vm"));
    staging().delete_prefix(&prefix("fail")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_esxi_style_descriptor_is_followed_to_its_flat_extent() {
    let vm = claimed_off().await;
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
    let report = convert::run(
        args(&vm, vec![spec], DiskFormat::Raw, &dir.join("work")),
        creds(&[]),
    )
    .await
    .unwrap();
    let d = &report.disks[0];
    assert_eq!(d.status, DiskStatus::Converted);
    assert_eq!(d.size, 8 << 20);
    assert_eq!(d.path, DataPath::FlatStream);
    assert_eq!(d.downloaded, 8 << 20, "the flat extent, read once");
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
    let vm = claimed_off().await;
    let dir = scratch("convert-short");
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: format!("{}/disk-0.raw", prefix("short")),
    };
    let err = convert::run(
        args(&vm, vec![spec], DiskFormat::Raw, &dir.join("work")),
        creds(&[]),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "BadDisk", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);
    assert!(err.to_string().contains("disk1-flat.vmdk"), "{err}");
    let key = format!("{}/disk-0.raw", prefix("short"));
    assert!(staging().head(&key).await.unwrap().is_none(), "no image");
    assert_eq!(
        staging().record(&key).await.unwrap().unwrap().state,
        RecordState::Failed
    );
    staging().delete_prefix(&prefix("short")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `qemu-img convert -O raw` of `src` into `out`.
fn to_raw(src: &Path, out: &Path) {
    qemu_img(&[
        "convert",
        "-O",
        "raw",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
}

fn same(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_input_and_output_pair_stages_what_qemu_img_makes_of_the_source() {
    let cases = [
        (DiskKind::Flat, DiskFormat::Raw, DataPath::FlatStream),
        (DiskKind::Flat, DiskFormat::Qcow2, DataPath::FlatQcow2),
        (DiskKind::Sparse, DiskFormat::Raw, DataPath::QemuSink),
        (DiskKind::Sparse, DiskFormat::Qcow2, DataPath::QemuSinkQcow2),
        (
            DiskKind::StreamOptimized,
            DiskFormat::Raw,
            DataPath::QemuSink,
        ),
        (
            DiskKind::StreamOptimized,
            DiskFormat::Qcow2,
            DataPath::QemuSinkQcow2,
        ),
    ];
    let st = staging();
    for (i, (kind, format, path)) in cases.into_iter().enumerate() {
        let name = format!("{kind:?}-{}", format.as_str());
        let vm = lab().claim_vm().unwrap();
        power_off(&vm).await;
        let dir = scratch(&format!("pair-{i}"));
        // 40 MiB, every other MiB zero: parts of 16 MiB, holes to skip, a short last part.
        let disk = ferry_harness::put_disk(&vm, &dir, 40, 7 + i as u64, kind, 2).unwrap();
        let expected = dir.join("expected.raw");
        to_raw(&disk.vmdk, &expected);
        assert!(
            same(&expected, &disk.raw),
            "{name}: the lab disk holds the pattern"
        );
        let key = format!("{}/disk-0.{}", prefix(&format!("pair{i}")), format.as_str());
        let spec = DiskSpec {
            index: Some(0),
            datastore_path: vm.disks[0].datastore_path.clone(),
            key: key.clone(),
        };
        // A work directory that cannot even be made (its parent is a file; root or not): no
        // data path may keep a local copy, qcow2 included.
        let blocker = dir.join("not-a-dir");
        std::fs::write(&blocker, b"x").unwrap();
        let report = convert::run(
            args(&vm, vec![spec], format, &blocker.join("work")),
            creds(&[]),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let d = &report.disks[0];
        assert_eq!(d.path, path, "{name}");
        assert_eq!(d.virtual_size, Some(40 << 20), "{name}");
        let staged = dir.join("staged");
        st.get_to_file(&key, &staged).await.unwrap();
        assert_eq!(
            sha256_file(&staged).await.unwrap(),
            d.sha256,
            "{name}: checksum"
        );
        assert_eq!(
            d.sent,
            std::fs::metadata(&staged).unwrap().len(),
            "{name}: sent once"
        );
        assert_eq!(
            d.raw_sha256,
            Some(sha256_file(&expected).await.unwrap()),
            "{name}: the raw contents' checksum, which the verification Job compares"
        );
        let back = dir.join("back.raw");
        to_raw(&staged, &back);
        assert!(
            same(&back, &expected),
            "{name}: staged image differs from qemu-img convert"
        );
        match kind {
            // vSphere said where the data is: the holes were never downloaded.
            DiskKind::Flat => {
                assert!(d.allocation_known, "{name}");
                assert_eq!(d.downloaded, 20 << 20, "{name}: only the data MiBs");
            }
            // qemu-img reads only allocated grains of the VMDK (plus its tables). For qcow2,
            // `qemu-img map` opens it once more through small blocks: the 1 MiB qemu's VMDK
            // driver reads for the embedded descriptor, and one 64 KiB block per grain table
            // (each maps 32 MiB of disk).
            DiskKind::Sparse | DiskKind::StreamOptimized => assert!(
                d.downloaded
                    <= std::fs::metadata(&disk.vmdk).unwrap().len()
                        + match format {
                            DiskFormat::Raw => 0,
                            DiskFormat::Qcow2 => (1 << 20) + 2 * (64 << 10),
                        },
                "{name}: {} downloaded of a file of {}",
                d.downloaded,
                std::fs::metadata(&disk.vmdk).unwrap().len()
            ),
        }
        if format == DiskFormat::Qcow2 {
            let check = qemu_img(&["check", "-f", "qcow2", staged.to_str().unwrap()]);
            assert!(check.contains("No errors were found"), "{name}: {check}");
            // The zero MiBs are not stored: 20 MiB of data and a few clusters of metadata.
            assert!(
                d.size <= (20 << 20) + (1 << 20),
                "{name}: an image of {} bytes",
                d.size
            );
        }
        st.delete_prefix(&prefix(&format!("pair{i}")))
            .await
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Whether the lab's S3 still holds upload `id` (its parts live in
/// `.ferry-s3/uploads/<id>/` of the data directory until it is completed or aborted).
fn open_upload(id: &str) -> bool {
    let dir = lab().info.s3.data_dir.join(".ferry-s3/uploads").join(id);
    dir.join("upload.json").exists() || dir.exists()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_converter_killed_mid_upload_leaves_no_complete_looking_object_and_a_rerun_cleans_up() {
    let vm = lab().claim_vm().unwrap();
    power_off(&vm).await;
    let dir = scratch("sigkill");
    let disk = ferry_harness::put_disk(&vm, &dir, 96, 11, DiskKind::Flat, 8).unwrap();
    let key = format!("{}/disk-0.raw", prefix("sigkill"));
    let info = &lab().info;
    // The converter as the Job runs it, slowed so that it is surely mid-upload when killed.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry-controller"))
        .arg("convert")
        .env("FERRY_VSPHERE_URL", &info.vcenter.url)
        .env("FERRY_VSPHERE_USERNAME", &info.vcenter.username)
        .env("FERRY_VSPHERE_PASSWORD", &info.vcenter.password)
        .env("FERRY_VSPHERE_THUMBPRINT", &info.vcenter.thumbprint_sha256)
        .env("FERRY_VM_MOREF", &vm.moref)
        .env("FERRY_S3_ENDPOINT", &info.s3.endpoint)
        .env("FERRY_S3_BUCKET", &info.s3.bucket)
        .env("FERRY_S3_ACCESS_KEY_ID", &info.s3.access_key)
        .env("FERRY_S3_SECRET_ACCESS_KEY", &info.s3.secret_key)
        .env(
            "FERRY_DISKS",
            format!("0={}={key}", vm.disks[0].datastore_path),
        )
        .env("FERRY_MAX_READ_RATE", (16u64 << 20).to_string())
        .env("FERRY_WORK_DIR", dir.join("work"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let st = staging();
    // Wait until its record names an open upload with parts on their way.
    let upload = ferry_harness::eventually(
        "the converter to be mid-upload",
        std::time::Duration::from_secs(60),
        || async {
            let r = st.record(&key).await.ok().flatten()?;
            (r.state == RecordState::Converting && r.bytes_done >= 32 << 20)
                .then_some(r.upload_id)
                .flatten()
        },
    )
    .await
    .unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(open_upload(&upload), "the killed run left its upload open");
    assert!(
        st.head(&key).await.unwrap().is_none(),
        "no object appears from an unfinished upload"
    );
    let rec = st.record(&key).await.unwrap().unwrap();
    assert_ne!(rec.state, RecordState::Staged);

    // The Job's next pod: the same disk again.
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: key.clone(),
    };
    let report = convert::run(
        args(&vm, vec![spec], DiskFormat::Raw, &dir.join("work")),
        creds(&[]),
    )
    .await
    .unwrap();
    assert_eq!(report.disks[0].status, DiskStatus::Converted);
    assert!(!open_upload(&upload), "the stale upload was aborted");
    let staged = dir.join("staged.raw");
    st.get_to_file(&key, &staged).await.unwrap();
    assert!(same(&staged, &disk.raw), "the object is the disk");
    let rec = st.record(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Staged);
    assert_eq!(rec.upload_id, None);
    st.delete_prefix(&prefix("sigkill")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The converter looks at the source's power before reading a disk: a VM that is on (someone
/// started it again) is refused, permanently, and nothing is staged.
#[tokio::test(flavor = "multi_thread")]
async fn a_powered_on_source_is_refused_before_its_disks_are_read() {
    let vm = lab().claim_vm().unwrap();
    assert_eq!(vm.power_state, "poweredOn", "lab VMs start powered on");
    let dir = scratch("convert-on");
    ferry_harness::put_vmdk(&vm, &dir, 4, 7).unwrap();
    let work = dir.join("work");
    let spec = DiskSpec {
        index: Some(0),
        datastore_path: vm.disks[0].datastore_path.clone(),
        key: format!("{}/disk-0.raw", prefix("on")),
    };
    let err = convert::run(args(&vm, vec![spec], DiskFormat::Raw, &work), creds(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SourcePoweredOn", "{err}");
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE);
    assert!(err.to_string().contains(&vm.moref), "{err}");
    assert_eq!(staging().list(&prefix("on")).await.unwrap(), vec![]);
    assert!(is_empty_dir(&work));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_vms_snapshot_is_staged_as_it_froze_the_disk() {
    // A warm migration's first round: the VM runs and writes; the converter reads the disk
    // its snapshot froze.
    let vm = lab().claim_vm().unwrap();
    let dir = scratch("convert-snapshot");
    let descriptor = &vm.disks[0].local_path;
    let flat = descriptor.with_file_name("disk1-flat.vmdk");
    let data: Vec<u8> = (0..(8u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&flat, &data).unwrap();
    std::fs::write(
        descriptor,
        "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"vmfs\"\n\n\
         # Extent description\nRW 16384 VMFS \"disk1-flat.vmdk\"\n\n# The Disk Data Base\n#DDB\nddb.adapterType = \"lsilogic\"\n",
    )
    .unwrap();
    let info = &lab().info;
    ferry_vsphere::tls::install_default_provider();
    let s = ferry_vsphere::Session::connect(&ferry_vsphere::Endpoint {
        url: info.vcenter.url.clone(),
        username: info.vcenter.username.clone(),
        password: info.vcenter.password.clone().into(),
        tls: ferry_vsphere::TlsPolicy::Insecure,
    })
    .await
    .unwrap();
    s.power_on(&vm.moref).await.unwrap();
    let snap = s
        .create_snapshot(&vm.moref, "ferry-convert-lab", "convert_lab")
        .await
        .unwrap();
    let frozen = s.snapshot_disks(&snap).await.unwrap().remove(0);
    // The guest writes after the snapshot.
    let out = Command::new(ferry_harness::repo_root().join("target/lab/bin/ferry-lab"))
        .arg("guest-write")
        .arg("--state-dir")
        .arg(&info.state_dir)
        .args(["--vm", &vm.name, "--percent", "50", "--seed", "11"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(std::fs::read(&flat).unwrap(), data, "the guest wrote");
    let key = format!("{}/disk-0.raw", prefix("snapshot"));
    let spec = |path: &str| DiskSpec {
        index: Some(0),
        datastore_path: path.to_owned(),
        key: key.clone(),
    };
    let mut a = args(
        &vm,
        vec![spec(&frozen.datastore_path)],
        DiskFormat::Raw,
        &dir.join("work"),
    );
    a.snapshot = Some(snap.clone());
    let report = convert::run(a.clone(), creds(&[])).await.unwrap();
    assert_eq!(report.disks[0].status, DiskStatus::Converted);
    let staged = dir.join("staged.raw");
    staging().get_to_file(&key, &staged).await.unwrap();
    assert!(
        std::fs::read(&staged).unwrap() == data,
        "the staged image is the disk as the snapshot froze it, not as the guest wrote on"
    );
    staging().delete_prefix(&prefix("snapshot")).await.unwrap();

    // Without a snapshot, the running VM is refused; with one removed, so is the copy.
    let mut live = args(
        &vm,
        vec![spec(&vm.disks[0].datastore_path)],
        DiskFormat::Raw,
        &dir.join("work"),
    );
    live.snapshot = None;
    let err = convert::run(live, creds(&[])).await.unwrap_err();
    assert_eq!(err.reason(), "SourcePoweredOn", "{err}");
    s.remove_snapshot(&snap).await.unwrap();
    let err = convert::run(a, creds(&[])).await.unwrap_err();
    assert_eq!(err.exit_code(), PERMANENT_EXIT_CODE, "{err}");
    assert!(err.to_string().contains(&snap), "{err}");
    assert_eq!(staging().list(&prefix("snapshot")).await.unwrap(), vec![]);
    let _ = s.logout().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
