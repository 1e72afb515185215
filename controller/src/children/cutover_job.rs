//! The cutover Job of a warm migration: one pod running `ferry-controller delta` from the
//! converter image, with every imported claim mounted writable, that copies the areas of each
//! disk changed since the first copy's change id — read from the powered-off source's own
//! disks — into the volume, then reads them back (see `ferry_convert::delta`). The verification
//! Job's shape (Pod Security `restricted`, the image's user, the result in the termination
//! message), writable, with the vSphere credentials by `secretKeyRef` as the converter's.

use ferry_crds::{VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Container;

use super::verify_job::{Claims, RESULT_PATH, device_path, mount_path};
use crate::Result;

/// The container's name.
pub const CONTAINER: &str = "cutover";
/// The container's name in a precopy round's Job.
pub const PRECOPY_CONTAINER: &str = "precopy";
/// Pod attempts after the first (a round run again writes the same bytes).
pub const BACKOFF_LIMIT: i32 = 2;
/// The last changes of a busy VM's disks; past this the Job is stopped (6 h).
pub const ACTIVE_DEADLINE_SECONDS: i64 = 6 * 3600;

/// One volume the cutover writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutoverVolume {
    /// Disk index.
    pub index: usize,
    /// The claim (the DataVolume's name).
    pub claim: String,
    /// `volumeMode: Block`, else Filesystem (CDI's `disk.img` at the volume's root).
    pub block: bool,
    /// The disk's device key in vSphere.
    pub device_key: i32,
    /// Its change id at the first copy.
    pub change_id: String,
    /// The file to read: the VM's own disk at the cutover (it is powered off), the disk as
    /// the round's snapshot froze it in a precopy round (it runs).
    pub datastore_path: String,
}

/// The delta program's `--disk` for one volume. Pure.
pub fn disk_arg(v: &CutoverVolume) -> String {
    let target = if v.block {
        device_path(v.index)
    } else {
        format!("{}/disk.img", mount_path(v.index))
    };
    format!(
        "{}:{}:{target}:{}:{}",
        v.index, v.device_key, v.change_id, v.datastore_path
    )
}

/// The cutover Job of `vmm` ([`names::cutover_job_name`]), running `image`.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn cutover_job(
    vmm: &VirtualMachineMigration,
    volumes: &[CutoverVolume],
    image: &str,
) -> Result<Job> {
    delta_job(
        vmm,
        names::cutover_job_name(vmm),
        CONTAINER,
        volumes,
        image,
        None,
    )
}

/// The Job of a precopy round of `vmm` ([`names::precopy_job_name`]), running `image`: the
/// same copy as the cutover's, read from the round's `snapshot` of the running source.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn precopy_job(
    vmm: &VirtualMachineMigration,
    volumes: &[CutoverVolume],
    image: &str,
    snapshot: &str,
) -> Result<Job> {
    delta_job(
        vmm,
        names::precopy_job_name(vmm),
        PRECOPY_CONTAINER,
        volumes,
        image,
        Some(snapshot),
    )
}

fn delta_job(
    vmm: &VirtualMachineMigration,
    name: String,
    container: &str,
    volumes: &[CutoverVolume],
    image: &str,
    snapshot: Option<&str>,
) -> Result<Job> {
    let meta = super::child_meta(vmm, name)?;
    let moref = vmm.source_moref().unwrap_or_default().to_owned();
    let mut args = vec![
        "delta".to_owned(),
        "--result-file".to_owned(),
        RESULT_PATH.to_owned(),
    ];
    if let Some(snapshot) = snapshot {
        args.push("--snapshot".to_owned());
        args.push(snapshot.to_owned());
    }
    let mut claims = Claims::default();
    for v in volumes {
        args.push("--disk".to_owned());
        args.push(disk_arg(v));
        claims.attach(v.index, &v.claim, v.block, false);
    }
    let container = Container {
        name: container.to_owned(),
        image: Some(image.to_owned()),
        args: Some(args),
        env: Some(super::job::vsphere_env(
            &vmm.spec.source.endpoint.credentials_secret_ref.name,
            &moref,
        )),
        ..Container::default()
    };
    Ok(claims.job(vmm, meta, container, BACKOFF_LIMIT, ACTIVE_DEADLINE_SECONDS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::verify_job::QEMU_ID;
    use ferry_crds::fixtures::migration;

    fn vol(index: usize, block: bool) -> CutoverVolume {
        CutoverVolume {
            index,
            claim: format!("web-1-disk-{index}"),
            block,
            device_key: 2000 + index as i32,
            change_id: "52 aa bb/1".into(),
            datastore_path: format!("[ds] web/disk{index}.vmdk"),
        }
    }

    #[test]
    fn the_job_mounts_every_claim_writable_and_names_each_disks_change_id() {
        let job = cutover_job(&migration("web-1"), &[vol(0, false), vol(1, true)], "img").unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("web-1-cutover"));
        let pod = job.spec.unwrap().template.spec.unwrap();
        let c = &pod.containers[0];
        let args = c.args.clone().unwrap();
        assert_eq!(args[0], "delta");
        assert!(args.contains(
            &"0:2000:/var/run/ferry/disk-0/disk.img:52 aa bb/1:[ds] web/disk0.vmdk".to_owned()
        ));
        assert!(
            args.contains(&"1:2001:/dev/ferry-disk-1:52 aa bb/1:[ds] web/disk1.vmdk".to_owned())
        );
        let mounts = c.volume_mounts.clone().unwrap();
        assert_eq!(mounts.len(), 1);
        assert_ne!(
            mounts[0].read_only,
            Some(true),
            "the cutover writes the volume"
        );
        assert_eq!(c.volume_devices.clone().unwrap().len(), 1);
        for v in pod.volumes.unwrap() {
            let pvc = v.persistent_volume_claim.unwrap();
            assert_ne!(pvc.read_only, Some(true));
        }
        let env = c.env.clone().unwrap();
        let password = env
            .iter()
            .find(|e| e.name == ferry_convert::job_contract::env::VSPHERE_PASSWORD)
            .unwrap();
        assert!(password.value.is_none(), "credentials only by secretKeyRef");
        assert!(
            password
                .value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .is_some()
        );
        let sc = pod.security_context.unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.run_as_user, Some(QEMU_ID));
    }

    #[test]
    fn a_precopy_round_reads_its_snapshot_of_the_running_source() {
        let job = precopy_job(&migration("web-1"), &[vol(0, false)], "img", "snapshot-7").unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("web-1-precopy"));
        let pod = job.spec.unwrap().template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.name, PRECOPY_CONTAINER);
        let args = c.args.clone().unwrap();
        let at = args.iter().position(|a| a == "--snapshot").unwrap();
        assert_eq!(args[at + 1], "snapshot-7");
        #[derive(clap::Parser)]
        struct Delta {
            #[command(flatten)]
            args: ferry_convert::delta::DeltaArgs,
        }
        let parsed = <Delta as clap::Parser>::try_parse_from(
            std::iter::once("delta".to_owned())
                .chain(args.into_iter().skip(1))
                .chain(["--vm-moref".to_owned(), "vm-1".to_owned()]),
        )
        .unwrap()
        .args;
        assert_eq!(parsed.snapshot.as_deref(), Some("snapshot-7"));
        assert_eq!(parsed.disks.len(), 1);
    }

    #[test]
    fn a_disk_arg_reads_back_as_the_delta_program_parses_it() {
        for block in [false, true] {
            let parsed = ferry_convert::delta::DeltaDisk::parse(&disk_arg(&vol(3, block))).unwrap();
            assert_eq!(parsed.index, 3);
            assert_eq!(parsed.device_key, 2003);
            assert_eq!(parsed.change_id, "52 aa bb/1");
            assert_eq!(parsed.datastore_path, "[ds] web/disk3.vmdk");
        }
    }
}
