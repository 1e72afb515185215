//! The verification Job: one pod running `ferry-controller verify` from the converter image, with
//! every imported claim mounted read-only, that hashes each volume's first virtual-size bytes
//! and compares them with the raw-contents checksum the converter recorded. It runs before the
//! VirtualMachine is created, and on a StorageClass that binds on first consumer it is that
//! consumer (see docs/real-guests.md).

use std::collections::BTreeMap;

use ferry_crds::{VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaimVolumeSource, Volume, VolumeDevice, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::Result;
use ferry_convert::job_contract::CONVERTER_PROGRAM;
use ferry_convert::verify::VolumeSpec;

/// Annotation on the Job saying what its result is worth: [`Role::Verify`] or [`Role::Bind`].
pub const ROLE_ANNOTATION: &str = "migration.platform.example/verify-role";
/// Annotation on the Job naming, in disk order and comma-separated, the uids of the DataVolumes
/// it was made to check: a Job whose DataVolumes were since replaced (deleted, then made again
/// under the same names) read bytes that are gone, whatever it reports.
pub const VOLUMES_ANNOTATION: &str = "migration.platform.example/verify-volumes";
/// The container's name.
pub const CONTAINER: &str = "verify";
/// Pod attempts after the first (an I/O error may pass).
pub const BACKOFF_LIMIT: i32 = 2;
/// Reading a few TiB takes hours; past this the Job is stopped (6 h).
pub const ACTIVE_DEADLINE_SECONDS: i64 = 6 * 3600;
/// Where the verify program writes its result: the container's termination message file,
/// which the kubelet reads into the pod's status when the container ends (up to 4096 bytes).
pub const RESULT_PATH: &str = "/dev/termination-log";
/// The user and group KubeVirt's virt-launcher (and CDI's importer) run as: the imported image
/// belongs to them.
pub const QEMU_ID: i64 = 107;

/// What the Job's result means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Created once every claim is populated: its result is the verification.
    Verify,
    /// Created while a claim waited for its first consumer without populators: its pod binds
    /// the claim and CDI imports alongside it, so what it reads proves nothing. It is replaced
    /// by a [`Role::Verify`] Job once the imports are done.
    Bind,
}

impl Role {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Verify => "verify",
            Role::Bind => "bind",
        }
    }

    /// Reads the annotation value (a Job without it is a verification).
    pub fn parse(s: Option<&str>) -> Role {
        match s {
            Some("bind") => Role::Bind,
            _ => Role::Verify,
        }
    }
}

/// Imported claims as a pod sees them: a Filesystem claim mounted at [`mount_path`] (CDI's
/// `disk.img` at its root), a Block claim as the device [`device_path`].
#[derive(Default)]
pub(super) struct Claims {
    pub mounts: Vec<VolumeMount>,
    pub devices: Vec<VolumeDevice>,
    pub volumes: Vec<Volume>,
}

impl Claims {
    /// Disk `index`'s claim, read-only or writable.
    pub fn attach(&mut self, index: usize, claim: &str, block: bool, read_only: bool) {
        let name = format!("disk-{index}");
        if block {
            self.devices.push(VolumeDevice {
                name: name.clone(),
                device_path: device_path(index),
            });
        } else {
            self.mounts.push(VolumeMount {
                name: name.clone(),
                mount_path: mount_path(index),
                read_only: read_only.then_some(true),
                ..VolumeMount::default()
            });
        }
        self.volumes.push(Volume {
            name,
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.to_owned(),
                read_only: read_only.then_some(true),
            }),
            ..Volume::default()
        });
    }

    /// A Job running the converter's program over these claims in `container` (its name,
    /// image, arguments and environment): as [`QEMU_ID`], its result in the termination
    /// message, in the restricted pod of every Job ferry makes.
    pub fn job(
        self,
        vmm: &VirtualMachineMigration,
        meta: ObjectMeta,
        container: Container,
        backoff_limit: i32,
        active_deadline_seconds: i64,
    ) -> Job {
        let container = Container {
            command: Some(vec![CONVERTER_PROGRAM.to_owned()]),
            volume_mounts: Some(self.mounts).filter(|m| !m.is_empty()),
            volume_devices: Some(self.devices).filter(|d| !d.is_empty()),
            termination_message_path: Some(RESULT_PATH.to_owned()),
            termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
            ..container
        };
        super::restricted_job(
            vmm,
            meta,
            container,
            self.volumes,
            QEMU_ID,
            backoff_limit,
            active_deadline_seconds,
        )
    }
}

/// The uids of the DataVolumes a verification Job was made to check, in disk order, from its
/// annotation (`None`: it has none, made by an older ferry). Pure.
pub fn made_for(job: &Job) -> Option<Vec<String>> {
    let v = job.metadata.annotations.as_ref()?.get(VOLUMES_ANNOTATION)?;
    Some(v.split(',').map(str::to_owned).collect())
}

/// Whether a Job made for the DataVolumes `made_for` (its annotation, [`made_for`]) was made for
/// exactly the ones there now, `uids` in disk order (`None`: absent or going). A Job without the
/// annotation was made for none known. Pure.
pub fn made_for_these<'a>(
    made_for: Option<&[String]>,
    uids: impl IntoIterator<Item = Option<&'a str>>,
) -> bool {
    let now: Option<Vec<&str>> = uids.into_iter().collect();
    let then: Option<Vec<&str>> = made_for.map(|v| v.iter().map(String::as_str).collect());
    now.is_some() && now == then
}

/// One imported volume to verify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyVolume {
    /// Disk index.
    pub index: usize,
    /// The claim (the DataVolume's name).
    pub claim: String,
    /// The DataVolume's uid: which one of that name the Job checks.
    pub data_volume_uid: String,
    /// `volumeMode: Block` (a device), else Filesystem (CDI's `disk.img` at the volume's root).
    pub block: bool,
    /// Bytes to hash: the staged image's virtual size.
    pub size: i64,
    /// Expected SHA-256 of them.
    pub sha256: String,
}

/// Where disk `i`'s Filesystem volume is mounted.
pub fn mount_path(index: usize) -> String {
    format!("/var/run/ferry/disk-{index}")
}

/// Where disk `i`'s Block volume appears.
pub fn device_path(index: usize) -> String {
    format!("/dev/ferry-disk-{index}")
}

/// The verify program's argument for one volume. Pure.
pub fn volume_arg(v: &VerifyVolume) -> String {
    let path = if v.block {
        device_path(v.index)
    } else {
        // CDI writes a Filesystem volume's image as disk.img at its root.
        format!("{}/disk.img", mount_path(v.index))
    };
    VolumeSpec {
        index: v.index,
        path: path.into(),
        size: u64::try_from(v.size).unwrap_or(0),
        sha256: v.sha256.clone(),
    }
    .arg()
}

/// The verification Job of `vmm` ([`names::verify_job_name`]) over `volumes`.
///
/// # Guarantees
/// Owned by and labelled with the migration (pod template too); `image`: the converter's (the
/// controller's own or an allowed one, as the conversion Job ran); every claim mounted read-only; no service account token; Pod
/// Security `restricted`; exit code [`ferry_convert::job_contract::PERMANENT_EXIT_CODE`] (a mismatch) fails the Job at once;
/// on success the termination message is the program's result (every volume's checksum, see
/// [`ferry_convert::verify::render_result`]), on failure it falls back to the log's tail, where the
/// program writes both sums.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn verification_job(
    vmm: &VirtualMachineMigration,
    volumes: &[VerifyVolume],
    role: Role,
    image: &str,
) -> Result<Job> {
    let mut meta = super::child_meta(vmm, names::verify_job_name(vmm))?;
    let made_for: Vec<&str> = volumes.iter().map(|v| v.data_volume_uid.as_str()).collect();
    meta.annotations = Some(BTreeMap::from([
        (ROLE_ANNOTATION.to_owned(), role.as_str().to_owned()),
        (VOLUMES_ANNOTATION.to_owned(), made_for.join(",")),
    ]));
    let mut args = vec![
        "verify".to_owned(),
        "--result-file".to_owned(),
        RESULT_PATH.to_owned(),
    ];
    let mut claims = Claims::default();
    for v in volumes {
        args.push("--volume".to_owned());
        args.push(volume_arg(v));
        claims.attach(v.index, &v.claim, v.block, true);
    }
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        args: Some(args),
        ..Container::default()
    };
    Ok(claims.job(vmm, meta, container, BACKOFF_LIMIT, ACTIVE_DEADLINE_SECONDS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    #[test]
    fn the_job_mounts_every_claim_read_only_and_names_each_checksum() {
        let sha = "ab".repeat(32);
        let vols = [
            VerifyVolume {
                index: 0,
                claim: "web-1-disk-0".into(),
                data_volume_uid: "uid-0".into(),
                block: false,
                size: 64 << 20,
                sha256: sha.clone(),
            },
            VerifyVolume {
                index: 1,
                claim: "web-1-disk-1".into(),
                data_volume_uid: "uid-1".into(),
                block: true,
                size: 1 << 30,
                sha256: sha.clone(),
            },
        ];
        let job = verification_job(&migration("web-1"), &vols, Role::Verify, "img").unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("web-1-verify"));
        assert_eq!(
            job.metadata.annotations.as_ref().unwrap()[ROLE_ANNOTATION],
            "verify"
        );
        let spec = job.spec.unwrap();
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(
            c.args.clone().unwrap(),
            vec![
                "verify".to_owned(),
                "--result-file".into(),
                RESULT_PATH.into(),
                "--volume".into(),
                format!("0=/var/run/ferry/disk-0/disk.img=67108864={sha}"),
                "--volume".into(),
                format!("1=/dev/ferry-disk-1=1073741824={sha}"),
            ]
        );
        let mounts = c.volume_mounts.clone().unwrap();
        assert_eq!(
            (
                mounts.len(),
                mounts[0].mount_path.as_str(),
                mounts[0].read_only
            ),
            (1, "/var/run/ferry/disk-0", Some(true))
        );
        assert_eq!(
            c.volume_devices.clone().unwrap()[0].device_path,
            "/dev/ferry-disk-1"
        );
        let claims: Vec<_> = pod
            .volumes
            .unwrap()
            .into_iter()
            .map(|v| v.persistent_volume_claim.unwrap())
            .collect();
        assert!(claims.iter().all(|c| c.read_only == Some(true)));
        assert_eq!(claims[1].claim_name, "web-1-disk-1");
        assert_eq!(
            c.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
        assert_eq!(pod.automount_service_account_token, Some(false));
        let psc = pod.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(
            psc.seccomp_profile.unwrap().type_,
            "RuntimeDefault",
            "Pod Security restricted"
        );
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_owned()]));
        let rule = &spec.pod_failure_policy.unwrap().rules[0];
        assert_eq!(rule.action, "FailJob");
        assert_eq!(
            rule.on_exit_codes.as_ref().unwrap().values,
            vec![ferry_convert::job_contract::PERMANENT_EXIT_CODE]
        );
        let bind = verification_job(&migration("web-1"), &vols, Role::Bind, "img").unwrap();
        assert_eq!(
            Role::parse(
                bind.metadata
                    .annotations
                    .as_ref()
                    .unwrap()
                    .get(ROLE_ANNOTATION)
                    .map(String::as_str)
            ),
            Role::Bind
        );
        assert_eq!(Role::parse(None), Role::Verify);
        // Both roles name the DataVolumes they were made for; a Job without the record has none.
        let uids = Some(vec!["uid-0".to_owned(), "uid-1".to_owned()]);
        let verify = verification_job(&migration("web-1"), &vols, Role::Verify, "img").unwrap();
        assert_eq!((made_for(&verify), made_for(&bind)), (uids.clone(), uids));
        assert_eq!(made_for(&Job::default()), None);
    }
}
