//! The cutover Job of a warm migration: one pod running `ferry-controller delta` from the
//! converter image, with every imported claim mounted writable, that copies the areas of each
//! disk changed since the first copy's change id — read from the powered-off source's own
//! disks — into the volume, then reads them back (see `convert/delta.rs`). The verification
//! Job's shape (Pod Security `restricted`, the image's user, the result in the termination
//! message), writable, with the vSphere credentials by `secretKeyRef` as the converter's.

use ferry_crds::{VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Container;

use super::verify_job::{Claims, QEMU_ID, RESULT_PATH, device_path, mount_path};
use crate::Result;
use crate::job_contract::CONVERTER_PROGRAM;

/// The container's name.
pub const CONTAINER: &str = "cutover";
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
    /// The source disk's datastore path (the VM's own: it is powered off).
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
    let meta = super::child_meta(vmm, names::cutover_job_name(vmm))?;
    let moref = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.moref.clone())
        .unwrap_or_default();
    let mut args = vec![
        "delta".to_owned(),
        "--result-file".to_owned(),
        RESULT_PATH.to_owned(),
    ];
    let mut claims = Claims::default();
    for v in volumes {
        args.push("--disk".to_owned());
        args.push(disk_arg(v));
        claims.attach(v.index, &v.claim, v.block, false);
    }
    let Claims {
        mounts,
        devices,
        volumes: pod_volumes,
    } = claims;
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        command: Some(vec![CONVERTER_PROGRAM.to_owned()]),
        args: Some(args),
        env: Some(super::job::vsphere_env(
            &vmm.spec.source.endpoint.credentials_secret_ref.name,
            &moref,
        )),
        volume_mounts: Some(mounts).filter(|m| !m.is_empty()),
        volume_devices: Some(devices).filter(|d| !d.is_empty()),
        termination_message_path: Some(RESULT_PATH.to_owned()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    Ok(super::restricted_job(
        vmm,
        meta,
        container,
        pod_volumes,
        QEMU_ID,
        BACKOFF_LIMIT,
        ACTIVE_DEADLINE_SECONDS,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
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
            .find(|e| e.name == crate::job_contract::env::VSPHERE_PASSWORD)
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
    fn a_disk_arg_reads_back_as_the_delta_program_parses_it() {
        for block in [false, true] {
            let parsed =
                crate::convert::delta::DeltaDisk::parse(&disk_arg(&vol(3, block))).unwrap();
            assert_eq!(parsed.index, 3);
            assert_eq!(parsed.device_key, 2003);
            assert_eq!(parsed.change_id, "52 aa bb/1");
            assert_eq!(parsed.datastore_path, "[ds] web/disk3.vmdk");
        }
    }
}
