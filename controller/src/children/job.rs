//! The conversion Job: one pod running `ferry-controller convert`, which downloads each disk
//! from the datastore, converts it with `qemu-img` and uploads it to staging with its SHA-256.
//!
//! The contract with the converter is the environment below plus one
//! `--disk INDEX=DATASTORE_PATH=STAGING_KEY` argument per disk. Credentials *and the endpoints
//! they are bound to* come by `secretKeyRef` from the credentials Secrets themselves (vSphere
//! `url`, `thumbprint`/`cacert`/`insecureSkipTLSVerify`; S3 `endpoint`, `bucket`, `cacert`),
//! never from the spec: the converter can only send a credential where its Secret says.
//!
//! The pod passes Pod Security `restricted`: non-root (65532, the image's user), no privilege
//! escalation, every capability dropped, seccomp `RuntimeDefault`, a read-only root file
//! system with an `emptyDir` work directory at `/tmp`, requests and limits, no service account
//! token, and a deadline.

use ferry_crds::{VirtualMachineMigration, names, secret as keys};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, ResourceRequirements, SecretKeySelector,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::Result;
use ferry_convert::job_contract::{CONVERTER_PROGRAM, WORK_BYTES, env, extra_env};

/// Pod attempts after the first; the controller retries on top of that with `spec.retry`.
pub const BACKOFF_LIMIT: i32 = 2;
/// A conversion that runs longer than this is stopped (6 h).
pub const ACTIVE_DEADLINE_SECONDS: i64 = 6 * 3600;
/// The non-root user (and group) the converter runs as: the image's own user.
pub const RUN_AS_USER: i64 = 65532;
/// Where the work directory (`emptyDir`) is mounted; the converter's default work dir is in it.
pub const WORK_MOUNT: &str = "/tmp";
/// CPU and memory the converter asks for (qemu-img streams; memory stays small).
pub const REQUESTS: [(&str, &str); 2] = [("cpu", "250m"), ("memory", "256Mi")];
/// What the converter may use at most.
pub const LIMITS: [(&str, &str); 2] = [("cpu", "2"), ("memory", "1Gi")];

fn plain(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The vSphere endpoint and credentials, each by `secretKeyRef` from the migration's Secret
/// `secret`, and the VM's moref: what a Job reading the source needs.
pub(super) fn vsphere_env(secret: &str, moref: &str) -> Vec<EnvVar> {
    vec![
        from_secret(env::VSPHERE_URL, secret, keys::VSPHERE_URL_KEY),
        from_secret(env::VSPHERE_USERNAME, secret, keys::VSPHERE_USERNAME_KEY),
        from_secret(env::VSPHERE_PASSWORD, secret, keys::VSPHERE_PASSWORD_KEY),
        from_secret_if_set(
            env::VSPHERE_THUMBPRINT,
            secret,
            keys::VSPHERE_THUMBPRINT_KEY,
        ),
        from_secret_if_set(env::VSPHERE_CACERT, secret, keys::CA_CERT_KEY),
        from_secret_if_set(env::VSPHERE_INSECURE, secret, keys::INSECURE_KEY),
        plain(env::VM_MOREF, moref),
    ]
}

fn from_pod_label(name: &str, label: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(k8s_openapi::api::core::v1::ObjectFieldSelector {
                api_version: None,
                field_path: format!("metadata.labels['{label}']"),
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn from_secret(name: &str, secret: &str, key: &str) -> EnvVar {
    secret_ref(name, secret, key, false)
}

fn from_secret_if_set(name: &str, secret: &str, key: &str) -> EnvVar {
    secret_ref(name, secret, key, true)
}

fn secret_ref(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: Some(optional),
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn quantities(q: &[(&str, &str)]) -> std::collections::BTreeMap<String, Quantity> {
    q.iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// The converter's arguments: `convert --disk INDEX=DATASTORE_PATH=STAGING_KEY ...`, one per
/// discovered disk in device order. Pure.
pub fn converter_args(vmm: &VirtualMachineMigration) -> Vec<String> {
    let mut args = vec!["convert".to_owned()];
    if let Some(m) = snapshot_moref(vmm) {
        args.push("--snapshot".to_owned());
        args.push(m);
    }
    for (i, path) in source_paths(vmm).into_iter().enumerate() {
        args.push("--disk".to_owned());
        args.push(format!("{i}={path}={}", names::staging_key(vmm, i)));
    }
    args
}

/// The snapshot a warm migration's converter reads (recorded in Converting).
fn snapshot_moref(vmm: &VirtualMachineMigration) -> Option<String> {
    vmm.status
        .as_ref()
        .and_then(|s| s.warm.as_ref())
        .and_then(|w| w.snapshot.as_ref())
        .and_then(|s| s.moref.clone())
}

/// The datastore path the converter reads each discovered disk from, in device order: a warm
/// migration's as its snapshot froze it. What the converter records its image to be of. Pure.
pub(crate) fn source_paths(vmm: &VirtualMachineMigration) -> Vec<String> {
    let status = vmm.status.as_ref();
    let disks = status
        .and_then(|s| s.source.as_ref())
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let frozen = |i: usize| {
        status
            .and_then(|s| s.disks.get(i))
            .and_then(|d| d.snapshot_path.clone())
    };
    let warm = snapshot_moref(vmm).is_some();
    disks
        .iter()
        .enumerate()
        .map(|(i, d)| match warm {
            true => frozen(i).unwrap_or_else(|| d.datastore_path.clone()),
            false => d.datastore_path.clone(),
        })
        .collect()
}

/// The conversion Job of `vmm` ([`names::job_name`]), running `image`.
///
/// # Guarantees
/// Owned by and labelled with the migration (pod template too); the converter's endpoints and
/// credentials only by `secretKeyRef` from the migration's credentials Secrets;
/// `backoffLimit` [`BACKOFF_LIMIT`]; exit code [`PERMANENT_EXIT_CODE`] fails the Job at once;
/// Pod Security `restricted` with a read-only root, an `emptyDir` at [`WORK_MOUNT`],
/// [`REQUESTS`] and [`LIMITS`]; no service account token; [`ACTIVE_DEADLINE_SECONDS`].
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn conversion_job(vmm: &VirtualMachineMigration, image: &str) -> Result<Job> {
    let meta = super::child_meta(vmm, names::job_name(vmm))?;
    let src = &vmm.spec.source.endpoint;
    let staging = &vmm.spec.staging;
    let moref = vmm.source_moref().unwrap_or_default().to_owned();
    let s3_secret = &staging.credentials_secret_ref.name;
    let mut env_vars = vsphere_env(&src.credentials_secret_ref.name, &moref);
    env_vars.extend([
        plain(env::FORMAT, vmm.spec.conversion.format.as_str()),
        from_secret(env::S3_ENDPOINT, s3_secret, keys::S3_ENDPOINT_KEY),
        from_secret(env::S3_BUCKET, s3_secret, keys::S3_BUCKET_KEY),
        plain(env::S3_REGION, staging.region.clone()),
        from_secret(env::S3_ACCESS_KEY_ID, s3_secret, keys::S3_ACCESS_KEY_ID_KEY),
        from_secret(
            env::S3_SECRET_ACCESS_KEY,
            s3_secret,
            keys::S3_SECRET_ACCESS_KEY_KEY,
        ),
        from_secret_if_set(env::S3_CACERT, s3_secret, keys::CA_CERT_KEY),
        from_pod_label(env::JOB_UID, crate::apis::job::CONTROLLER_UID_LABEL),
    ]);
    let container = Container {
        name: "convert".to_owned(),
        image: Some(image.to_owned()),
        command: Some(vec![CONVERTER_PROGRAM.to_owned()]),
        args: Some(converter_args(vmm)),
        env: Some(env_vars),
        volume_mounts: Some(vec![VolumeMount {
            name: "scratch".to_owned(),
            mount_path: WORK_MOUNT.to_owned(),
            ..VolumeMount::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&REQUESTS)),
            limits: Some(quantities(&LIMITS)),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    let scratch = Volume {
        name: "scratch".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(WORK_BYTES.to_string())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    };
    Ok(super::restricted_job(
        vmm,
        meta,
        container,
        vec![scratch],
        RUN_AS_USER,
        BACKOFF_LIMIT,
        ACTIVE_DEADLINE_SECONDS,
    ))
}

/// Tells the converter of a conversion Job the controller's cap on its datastore read rate.
/// Pure.
pub fn apply_read_limit(job: &mut Job, read_limit: Option<u64>) {
    let Some(r) = read_limit else {
        return;
    };
    let Some(pod) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) else {
        return;
    };
    for c in pod.containers.iter_mut().filter(|c| c.name == "convert") {
        c.env
            .get_or_insert_with(Vec::new)
            .push(plain(extra_env::MAX_READ_RATE, r.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    fn discovered() -> VirtualMachineMigration {
        let mut vmm = migration("web-1").with_disks(2);
        if let Some(s) = vmm.status.as_mut().and_then(|s| s.source.as_mut()) {
            s.moref = Some("vm-42".into());
        }
        vmm
    }

    #[test]
    fn the_job_runs_the_converter_with_secrets_by_reference() {
        let job = conversion_job(&discovered(), "reg.example/ferry:1").unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("web-1-convert"));
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(BACKOFF_LIMIT));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("reg.example/ferry:1"));
        assert_eq!(
            c.command.as_deref(),
            Some(&["ferry-controller".to_owned()][..])
        );
        let args = c.args.clone().unwrap();
        assert_eq!(args[0], "convert");
        assert_eq!(
            args[1..],
            [
                "--disk".to_owned(),
                "0=[LocalDS_0] DC0_H0_VM0/disk0.vmdk=ferry/default/web-1/00000000-0000-0000-0000-000000000001/disk-0.raw".to_owned(),
                "--disk".to_owned(),
                "1=[LocalDS_0] DC0_H0_VM0/disk1.vmdk=ferry/default/web-1/00000000-0000-0000-0000-000000000001/disk-1.raw".to_owned(),
            ]
        );
        let env = c.env.clone().unwrap();
        let get = |n: &str| env.iter().find(|e| e.name == n).cloned().unwrap();
        assert_eq!(get(env::VM_MOREF).value.as_deref(), Some("vm-42"));
        let from = |n: &str| {
            let r = get(n).value_from.unwrap().secret_key_ref.unwrap();
            (r.name, r.key, r.optional)
        };
        // The endpoints come from the Secrets, like the credentials: never from the spec.
        for (var, secret, key, optional) in [
            (env::VSPHERE_URL, "vsphere-credentials", "url", false),
            (
                env::VSPHERE_PASSWORD,
                "vsphere-credentials",
                "password",
                false,
            ),
            (
                env::VSPHERE_THUMBPRINT,
                "vsphere-credentials",
                "thumbprint",
                true,
            ),
            (env::VSPHERE_CACERT, "vsphere-credentials", "cacert", true),
            (
                env::VSPHERE_INSECURE,
                "vsphere-credentials",
                "insecureSkipTLSVerify",
                true,
            ),
            (env::S3_ENDPOINT, "s3-credentials", "endpoint", false),
            (env::S3_BUCKET, "s3-credentials", "bucket", false),
            (
                env::S3_SECRET_ACCESS_KEY,
                "s3-credentials",
                "secretAccessKey",
                false,
            ),
            (env::S3_CACERT, "s3-credentials", "cacert", true),
        ] {
            assert_eq!(
                from(var),
                (secret.into(), key.into(), Some(optional)),
                "{var}"
            );
        }
        assert!(
            env.iter().all(|e| e
                .value
                .as_deref()
                .is_none_or(|v| !v.contains("secret") && !v.contains("://"))),
            "no credential and no endpoint in plain values"
        );
        let scratch = pod.volumes.as_ref().unwrap()[0].empty_dir.clone().unwrap();
        assert_eq!(
            scratch.size_limit,
            Some(Quantity(WORK_BYTES.to_string())),
            "raw output keeps nothing on disk"
        );
    }

    #[test]
    fn the_work_volume_holds_sockets_only_and_the_read_cap_reaches_the_converter() {
        let mut vmm = discovered();
        vmm.spec.conversion.format = ferry_crds::DiskFormat::Qcow2;
        let mut job = conversion_job(&vmm, "img").unwrap();
        let seen = |job: &Job| {
            let pod = job.spec.clone().unwrap().template.spec.unwrap();
            let v = pod.volumes.unwrap()[0].empty_dir.clone().unwrap();
            let env = pod.containers[0].env.clone().unwrap();
            let rate = env
                .iter()
                .find(|e| e.name == extra_env::MAX_READ_RATE)
                .and_then(|e| e.value.clone());
            (v.size_limit.unwrap().0, rate)
        };
        // qcow2 is written as it is uploaded, as raw is: no disk lands on the work volume.
        assert_eq!(seen(&job), (WORK_BYTES.to_string(), None));
        apply_read_limit(&mut job, Some(1 << 20));
        assert_eq!(
            seen(&job),
            (WORK_BYTES.to_string(), Some((1u64 << 20).to_string()))
        );
    }

    #[test]
    fn the_pod_is_restricted_with_a_read_only_root_limits_and_a_deadline() {
        let job = conversion_job(&discovered(), "img").unwrap();
        let spec = job.spec.unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(ACTIVE_DEADLINE_SECONDS));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        let psc = pod.security_context.unwrap();
        assert_eq!(
            (psc.run_as_non_root, psc.run_as_user),
            (Some(true), Some(RUN_AS_USER))
        );
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let c = &pod.containers[0];
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_owned()]));
        let r = c.resources.clone().unwrap();
        assert_eq!(r.requests.unwrap()["memory"].0, "256Mi");
        assert_eq!(r.limits.unwrap()["memory"].0, "1Gi");
        let mount = &c.volume_mounts.clone().unwrap()[0];
        assert_eq!(mount.mount_path, WORK_MOUNT);
        let vol = &pod.volumes.unwrap()[0];
        assert_eq!(vol.name, mount.name);
        assert!(
            vol.empty_dir.is_some(),
            "the only writable place is an emptyDir"
        );
    }
}
