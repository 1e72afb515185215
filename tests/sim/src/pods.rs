//! A Job's pod as the Job controller and the kubelet make it: the Pod object (labels, owner,
//! status through the phases, the container's termination with its message), the volumes it
//! mounts, and how a host process stands in for the container's view of them.
//!
//! The process runs on the host, so a mount path (say `/var/run/ferry/disk-0`) cannot exist
//! where the program looks. Each attempt gets a root directory; every mount becomes a directory
//! under it (a claim's own directory, kept as long as its volume, with the volume file linked in
//! as `disk.img`, as CDI lays out a Filesystem volume; a block device as the link itself), and every argument and environment value that names a
//! path under a mount is rewritten to the host directory that stands for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::ResourceExt;
use kube::api::ObjectMeta;

use crate::volumes::Volumes;

/// The Job controller's labels on its pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";

/// One path a container sees, and what stands for it on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The path in the container (`mountPath` or `devicePath`).
    pub container_path: String,
    /// The host path that stands for it.
    pub host_path: PathBuf,
    /// What to make there.
    pub kind: MountKind,
}

/// What a mount is on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountKind {
    /// An empty directory (`emptyDir`).
    Dir,
    /// A link to the claim's own directory (`files`, kept as long as the volume: what a pod
    /// writes there outlives the pod, as on a real volume), which holds `disk.img`, a link to
    /// the claim's volume file (Filesystem claim).
    ClaimDir { image: PathBuf, files: PathBuf },
    /// A link to the claim's volume file (a block device).
    Device { image: PathBuf },
    /// An empty file the container may write: its termination message file
    /// (`terminationMessagePath`, which the kubelet mounts into every container).
    File,
    /// A directory of files the kubelet writes before the container starts (a `downwardAPI`
    /// volume): each path in it with its content.
    Files(Vec<(String, String)>),
}

/// Where the kubelet mounts a container's termination message file when its spec names none
/// (`TerminationMessagePathDefault` in `k8s.io/api/core/v1`).
pub const DEFAULT_TERMINATION_PATH: &str = "/dev/termination-log";

/// The claims a pod's volumes name.
pub fn claims(spec: &PodSpec) -> Vec<String> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

/// The files of a `downwardAPI` volume, as the kubelet writes them (`pkg/volume/downwardapi`
/// in Kubernetes: each item's `fieldRef` through `fieldpath.ExtractFieldPathAsString`, the
/// whole `metadata.labels` or `metadata.annotations` as sorted `key="value"` lines). Pure.
///
/// Errors: a `resourceFieldRef` (the sim's pods have no resources to report), a field the
/// downward API does not offer, or a path that climbs out of the volume.
pub fn downward_files(
    d: &k8s_openapi::api::core::v1::DownwardAPIVolumeSource,
    pod: &crate::process::PodFacts,
) -> Result<Vec<(String, String)>, String> {
    let map = |m: &BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v:?}\n"))
            .collect::<String>()
    };
    let mut out = vec![];
    for item in d.items.iter().flatten() {
        if item.path.starts_with('/') || item.path.split('/').any(|p| p == "..") {
            return Err(format!(
                "path {:?} must be relative and stay in the volume",
                item.path
            ));
        }
        let content = match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), None) => match f.field_path.as_str() {
                "metadata.labels" => map(&pod.labels),
                "metadata.annotations" => map(&pod.annotations),
                path => crate::process::field(path, pod)?,
            },
            (None, Some(_)) => return Err("ferry-sim does not provide resourceFieldRef".into()),
            _ => {
                return Err(format!(
                    "item {:?} needs exactly one of fieldRef and resourceFieldRef",
                    item.path
                ));
            }
        };
        out.push((item.path.clone(), content));
    }
    Ok(out)
}

/// Where each of the container's mounts and devices stands on the host under `root`. Pure.
///
/// Errors: a mount of a volume the pod does not have, or of a kind the sim does not provide
/// (anything but `persistentVolumeClaim`, `emptyDir` and `downwardAPI` with `fieldRef`s).
pub fn plan(
    spec: &PodSpec,
    container: &Container,
    ns: &str,
    vols: &Volumes,
    root: &Path,
    pod: &crate::process::PodFacts,
) -> Result<Vec<Mount>, String> {
    let volume = |name: &str| {
        spec.volumes
            .iter()
            .flatten()
            .find(|v| v.name == name)
            .ok_or_else(|| format!("volume {name:?} is mounted but not in the pod's volumes"))
    };
    let host = |p: &str| root.join(p.trim_start_matches('/'));
    let mut out = vec![];
    for m in container.volume_mounts.iter().flatten() {
        let v = volume(&m.name)?;
        let kind = if let Some(c) = &v.persistent_volume_claim {
            MountKind::ClaimDir {
                image: vols.image(ns, &c.claim_name),
                files: vols.files(ns, &c.claim_name),
            }
        } else if v.empty_dir.is_some() {
            MountKind::Dir
        } else if let Some(d) = &v.downward_api {
            MountKind::Files(
                downward_files(d, pod).map_err(|e| format!("volume {:?}: {e}", m.name))?,
            )
        } else {
            return Err(format!(
                "volume {:?}: ferry-sim mounts only persistentVolumeClaim, emptyDir and downwardAPI volumes",
                m.name
            ));
        };
        out.push(Mount {
            container_path: m.mount_path.clone(),
            host_path: host(&m.mount_path),
            kind,
        });
    }
    for d in container.volume_devices.iter().flatten() {
        let v = volume(&d.name)?;
        let Some(c) = &v.persistent_volume_claim else {
            return Err(format!(
                "volume device {:?} is not a persistentVolumeClaim",
                d.name
            ));
        };
        out.push(Mount {
            container_path: d.device_path.clone(),
            host_path: host(&d.device_path),
            kind: MountKind::Device {
                image: vols.image(ns, &c.claim_name),
            },
        });
    }
    let message = container
        .termination_message_path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_TERMINATION_PATH.to_owned());
    out.push(Mount {
        host_path: host(&message),
        container_path: message,
        kind: MountKind::File,
    });
    Ok(out)
}

/// The host file standing for the container's termination message file.
pub fn termination_file(mounts: &[Mount]) -> Option<&Path> {
    mounts
        .iter()
        .find(|m| m.kind == MountKind::File)
        .map(|m| m.host_path.as_path())
}

/// Makes the mounts on the host.
///
/// Errors: the filesystem's.
pub fn make(mounts: &[Mount]) -> std::io::Result<()> {
    for m in mounts {
        match &m.kind {
            MountKind::Dir => std::fs::create_dir_all(&m.host_path)?,
            MountKind::ClaimDir { image, files } => {
                std::fs::create_dir_all(files)?;
                let disk = files.join("disk.img");
                if std::fs::symlink_metadata(&disk).is_err() {
                    std::os::unix::fs::symlink(image, &disk)?;
                }
                if let Some(parent) = m.host_path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::os::unix::fs::symlink(files, &m.host_path)?;
            }
            MountKind::Device { image } => {
                if let Some(parent) = m.host_path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::os::unix::fs::symlink(image, &m.host_path)?;
            }
            MountKind::File => {
                if let Some(parent) = m.host_path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&m.host_path, b"")?;
            }
            MountKind::Files(files) => {
                std::fs::create_dir_all(&m.host_path)?;
                for (path, content) in files {
                    let file = m.host_path.join(path);
                    if let Some(parent) = file.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&file, content)?;
                }
            }
        }
    }
    Ok(())
}

fn boundary_before(c: Option<char>) -> bool {
    c.is_none_or(|c| matches!(c, '=' | ':' | ',' | ' '))
}

fn boundary_after(c: Option<char>) -> bool {
    c.is_none_or(|c| matches!(c, '/' | '=' | ':' | ',' | ' '))
}

/// `value` with every path under a mount (the whole value, or after `=`, `:`, `,` or a space;
/// up to `/`, one of those, or the end) replaced by its host path; the longest mount path wins.
/// Pure.
pub fn rewrite(value: &str, mounts: &[Mount]) -> String {
    let mut sorted: Vec<&Mount> = mounts.iter().collect();
    sorted.sort_by_key(|m| std::cmp::Reverse(m.container_path.len()));
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    'scan: while i < value.len() {
        let before = value[..i].chars().next_back();
        if boundary_before(before) {
            for m in &sorted {
                let p = m.container_path.trim_end_matches('/');
                if !p.is_empty() && value[i..].starts_with(p) {
                    let after = value[i + p.len()..].chars().next();
                    if boundary_after(after) {
                        out.push_str(&m.host_path.display().to_string());
                        i += p.len();
                        continue 'scan;
                    }
                }
            }
        }
        let Some(c) = value[i..].chars().next() else {
            break;
        };
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Most bytes of a termination message file the kubelet keeps
/// (`MaxContainerTerminationMessageLength` in `pkg/kubelet/container`).
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// The termination message the kubelet reports for a container that ended
/// (`getTerminationMessage` in `pkg/kubelet/kuberuntime/kuberuntime_container.go`): what the
/// container wrote to its termination message file (`file`, at most the last 4096 bytes),
/// whether it succeeded or failed; with `FallbackToLogsOnError`, a failure and an empty file, the
/// log's last 80 lines or 2048 bytes, whichever is less. Pure.
pub fn termination_message(
    file: &str,
    log: &str,
    failed: bool,
    policy: Option<&str>,
) -> Option<String> {
    if !file.is_empty() {
        let mut cut = file.len().saturating_sub(MAX_MESSAGE_BYTES);
        while !file.is_char_boundary(cut) {
            cut += 1;
        }
        return Some(file[cut..].to_owned());
    }
    if !failed || policy != Some("FallbackToLogsOnError") {
        return None;
    }
    let lines: Vec<&str> = log.lines().collect();
    let mut text = lines[lines.len().saturating_sub(80)..].join("\n");
    if text.len() > 2048 {
        let mut cut = text.len() - 2048;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = text[cut..].to_string();
    }
    Some(text).filter(|t| !t.trim().is_empty())
}

/// Where the pod's container log lives on the host, as the container runtime reports a
/// container's `LogPath` to the kubelet. Any sim on the host can then answer the node's
/// `containerLogs` for a pod another sim runs (several sims share a node name in the tests).
pub const LOG_ANNOTATION: &str = "sim.ferry.example/container-log";

/// The log of a Job pod's container: the file its [`LOG_ANNOTATION`] names when that is the log
/// of this pod's Job and attempt (`…/_jobs/<namespace>/<job>/attempt-<n>.log`, an absolute path
/// without `..`: a pod cannot point the node at any other file), else where `own` volumes keep
/// it. `None` for a pod no sim runs (not controlled by a Job, or not named `…-sim<n>`). Pure.
pub fn container_log(pod: &Pod, own: &Volumes) -> Option<PathBuf> {
    let ns = pod.namespace()?;
    let job = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Job")?
        .name
        .clone();
    let attempt: i32 = pod.name_any().rsplit_once("-sim")?.1.parse().ok()?;
    let mine = own.job_log(&ns, &job, attempt);
    let Some(named) = pod.annotations().get(LOG_ANNOTATION).map(PathBuf::from) else {
        return Some(mine);
    };
    let tail = Path::new("_jobs")
        .join(&ns)
        .join(&job)
        .join(format!("attempt-{attempt}.log"));
    Some(named_if_its(named, &tail, mine))
}

/// `named` when it is an absolute path without `..` ending in `tail` (the file a pod may point
/// the node at), else `mine`. Pure.
fn named_if_its(named: PathBuf, tail: &Path, mine: PathBuf) -> PathBuf {
    let plain = named.components().all(|c| {
        matches!(
            c,
            std::path::Component::RootDir | std::path::Component::Normal(_)
        )
    });
    if named.is_absolute() && plain && named.ends_with(tail) {
        named
    } else {
        mine
    }
}

/// Where a launcher pod's serial console log lives on the host (`guest-console-log`), written
/// by the node that runs its VMI (see `qemu::console_log`).
pub const CONSOLE_LOG_ANNOTATION: &str = "sim.ferry.example/console-log";

/// virt-controller's name for the launcher's container that tails the serial console
/// (`generateSerialConsoleLogContainer`, `pkg/virt-controller/services/serialconsolelog.go`).
pub const GUEST_CONSOLE_LOG: &str = "guest-console-log";

/// The serial console log of a launcher pod's `guest-console-log` container: the file its
/// [`CONSOLE_LOG_ANNOTATION`] names when that is the log of this pod's VMI
/// (`…/_guests/<namespace>/<vmi uid>/console.log`, absolute, without `..`), else where `own`
/// volumes keep it. `None` for any other container or pod. Pure.
pub fn console_log(pod: &Pod, container: &str, own: &Volumes) -> Option<PathBuf> {
    if container != GUEST_CONSOLE_LOG {
        return None;
    }
    let ns = pod.namespace()?;
    let uid = pod.labels().get("kubevirt.io/created-by")?.clone();
    let tail = Path::new("_guests")
        .join(&ns)
        .join(&uid)
        .join("console.log");
    let mine = own.root().join(&tail);
    let Some(named) = pod
        .annotations()
        .get(CONSOLE_LOG_ANNOTATION)
        .map(PathBuf::from)
    else {
        return Some(mine);
    };
    Some(named_if_its(named, &tail, mine))
}

/// The container's id in its status (`<runtime>://<id>`, as the kubelet writes it): the kubelet
/// refuses the logs of a terminated container that has none (`validateContainerLogStatus`).
pub fn container_id(pod: &Pod) -> String {
    let uid: String = pod
        .uid()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    format!("ferry-sim://{uid}")
}

/// The pod of `attempt` of `job`, as the Job controller creates it: the template's labels plus
/// the Job's, owned by the Job, bound to `node`, its container's log at `log`. Its name carries a
/// piece of the Job's uid: the real Job controller names pods `<job>-<random>` (generateName), so
/// a Job never meets the pod of an earlier Job of the same name that the garbage collector has
/// not removed yet. Pure.
pub fn pod_for(job: &Job, attempt: i32, node: &str, log: &Path) -> Pod {
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    labels.insert(JOB_NAME_LABEL.into(), job.name_any());
    labels.insert("job-name".into(), job.name_any());
    labels.insert(CONTROLLER_UID_LABEL.into(), uid.clone());
    labels.insert("controller-uid".into(), uid.clone());
    let mut spec = template.spec.unwrap_or_default();
    spec.node_name = Some(node.to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}-{}-sim{attempt}",
                job.name_any(),
                uid.chars()
                    .filter(char::is_ascii_alphanumeric)
                    .take(5)
                    .collect::<String>()
                    .to_ascii_lowercase()
            )),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: Some({
                let mut a = meta.annotations.unwrap_or_default();
                a.insert(LOG_ANNOTATION.into(), log.display().to_string());
                a
            }),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: job.name_any(),
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// A container's status as the kubelet reports it; `started` follows `ready` (a running
/// container here is ready at once: no probes). Pure.
pub(crate) fn container_status(
    c: &Container,
    id: Option<&str>,
    state: ContainerState,
    ready: bool,
) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        container_id: id.map(str::to_owned),
        image: c.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready,
        restart_count: 0,
        started: Some(ready),
        state: Some(state),
        ..ContainerStatus::default()
    }
}

/// A pod waiting to start: `Pending`, its container `ContainerCreating` (`why` says on what).
/// Pure.
pub fn status_pending(c: &Container, why: &str) -> PodStatus {
    PodStatus {
        phase: Some("Pending".into()),
        container_statuses: Some(vec![container_status(
            c,
            None,
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    message: Some(why.to_string()).filter(|w| !w.is_empty()),
                }),
                ..ContainerState::default()
            },
            false,
        )]),
        ..PodStatus::default()
    }
}

/// A pod whose container (`id`) runs. Pure.
pub fn status_running(c: &Container, id: &str, node_ip: &str, started: &Time) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        host_ip: Some(node_ip.into()),
        start_time: Some(started.clone()),
        container_statuses: Some(vec![container_status(
            c,
            Some(id),
            state_running(started),
            true,
        )]),
        ..PodStatus::default()
    }
}

/// A pod whose container (`id`) ended with `code` (restartPolicy Never: the pod ends with it).
/// Pure.
pub fn status_terminated(
    c: &Container,
    id: &str,
    node_ip: &str,
    started: &Time,
    finished: &Time,
    code: i32,
    message: Option<String>,
) -> PodStatus {
    PodStatus {
        phase: Some(if code == 0 { "Succeeded" } else { "Failed" }.into()),
        host_ip: Some(node_ip.into()),
        start_time: Some(started.clone()),
        container_statuses: Some(vec![container_status(
            c,
            Some(id),
            state_terminated(id, code, Some(started), finished, message),
            false,
        )]),
        ..PodStatus::default()
    }
}

/// A container's state while it runs (since `started`). Pure.
pub(crate) fn state_running(started: &Time) -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(started.clone()),
        }),
        ..ContainerState::default()
    }
}

/// A container's state once it exited with `code` (`Completed` on 0, else `Error`, as the
/// kubelet names them). Pure.
pub(crate) fn state_terminated(
    id: &str,
    code: i32,
    started: Option<&Time>,
    finished: &Time,
    message: Option<String>,
) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            container_id: Some(id.to_owned()),
            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
            message,
            started_at: started.cloned(),
            finished_at: Some(finished.clone()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

/// The labels as a selector string, for tests and lookups.
pub fn selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{
        EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, Volume, VolumeDevice, VolumeMount,
    };

    fn spec() -> (PodSpec, Container) {
        let c = Container {
            name: "verify".into(),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "disk-0".into(),
                    mount_path: "/var/run/ferry/disk-0".into(),
                    read_only: Some(true),
                    ..Default::default()
                },
                VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/tmp".into(),
                    ..Default::default()
                },
            ]),
            volume_devices: Some(vec![VolumeDevice {
                name: "disk-1".into(),
                device_path: "/dev/ferry-disk-1".into(),
            }]),
            ..Default::default()
        };
        let claim = |n: &str| Volume {
            name: n.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: format!("m-{n}"),
                read_only: Some(true),
            }),
            ..Default::default()
        };
        let spec = PodSpec {
            containers: vec![c.clone()],
            volumes: Some(vec![
                claim("disk-0"),
                claim("disk-1"),
                Volume {
                    name: "scratch".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        (spec, c)
    }

    #[test]
    fn what_a_pod_writes_on_a_claim_outlives_the_pod() {
        let dir = std::env::temp_dir().join(format!("ferry-sim-claimdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let vols = Volumes::new(dir.join("v"));
        std::fs::create_dir_all(dir.join("v/ns")).unwrap();
        std::fs::write(vols.image("ns", "c"), b"bytes").unwrap();
        let (spec, c) = spec();
        for attempt in 0..2 {
            let root = dir.join(format!("attempt-{attempt}"));
            let m = plan(&spec, &c, "ns", &vols, &root, &Default::default()).unwrap();
            let m: Vec<Mount> = m
                .into_iter()
                .map(|mut m| {
                    if let MountKind::ClaimDir { image, files } = &mut m.kind {
                        *image = vols.image("ns", "c");
                        *files = vols.files("ns", "c");
                    }
                    m
                })
                .collect();
            make(&m).unwrap();
            let mount = root.join("var/run/ferry/disk-0");
            assert_eq!(std::fs::read(mount.join("disk.img")).unwrap(), b"bytes");
            if attempt == 0 {
                std::fs::write(mount.join("journal"), b"kept").unwrap();
            } else {
                assert_eq!(std::fs::read(mount.join("journal")).unwrap(), b"kept");
            }
            std::fs::remove_dir_all(&root).unwrap();
        }
        assert!(vols.files("ns", "c").join("journal").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mounts_stand_on_the_host_under_the_attempts_root() {
        let (spec, c) = spec();
        let vols = Volumes::new("/v");
        let m = plan(&spec, &c, "ns", &vols, Path::new("/r"), &Default::default()).unwrap();
        assert_eq!(
            m,
            vec![
                Mount {
                    container_path: "/var/run/ferry/disk-0".into(),
                    host_path: "/r/var/run/ferry/disk-0".into(),
                    kind: MountKind::ClaimDir {
                        image: "/v/ns/m-disk-0.img".into(),
                        files: "/v/ns/m-disk-0.files".into(),
                    },
                },
                Mount {
                    container_path: "/tmp".into(),
                    host_path: "/r/tmp".into(),
                    kind: MountKind::Dir,
                },
                Mount {
                    container_path: "/dev/ferry-disk-1".into(),
                    host_path: "/r/dev/ferry-disk-1".into(),
                    kind: MountKind::Device {
                        image: "/v/ns/m-disk-1.img".into()
                    },
                },
                Mount {
                    container_path: DEFAULT_TERMINATION_PATH.into(),
                    host_path: "/r/dev/termination-log".into(),
                    kind: MountKind::File,
                },
            ]
        );
        assert_eq!(
            termination_file(&m),
            Some(Path::new("/r/dev/termination-log"))
        );
        assert_eq!(claims(&spec), vec!["m-disk-0", "m-disk-1"]);
        let mut bad = c.clone();
        bad.volume_mounts.as_mut().unwrap()[0].name = "nope".into();
        assert!(
            plan(
                &spec,
                &bad,
                "ns",
                &vols,
                Path::new("/r"),
                &Default::default()
            )
            .is_err()
        );
    }

    #[test]
    fn a_downward_api_volume_holds_the_pods_fields_as_the_kubelet_writes_them() {
        use k8s_openapi::api::core::v1::{
            DownwardAPIVolumeFile, DownwardAPIVolumeSource, ObjectFieldSelector,
            ResourceFieldSelector,
        };
        let item = |path: &str, field: &str| DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: field.into(),
            }),
            ..Default::default()
        };
        let pod = crate::process::PodFacts {
            name: "p".into(),
            labels: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "1".into())]),
            annotations: BTreeMap::from([("ctx".into(), "{\"x\":1}".into())]),
            ..Default::default()
        };
        let d = DownwardAPIVolumeSource {
            items: Some(vec![
                item("context.json", "metadata.annotations['ctx']"),
                item("sub/labels", "metadata.labels"),
                item("name", "metadata.name"),
            ]),
            ..Default::default()
        };
        assert_eq!(
            downward_files(&d, &pod).unwrap(),
            [
                ("context.json".to_owned(), "{\"x\":1}".to_owned()),
                ("sub/labels".to_owned(), "a=\"1\"\nb=\"2\"\n".to_owned()),
                ("name".to_owned(), "p".to_owned()),
            ]
        );
        let climbs = DownwardAPIVolumeSource {
            items: Some(vec![item("../x", "metadata.name")]),
            ..Default::default()
        };
        assert!(downward_files(&climbs, &pod).is_err());
        let resources = DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "cpu".into(),
                resource_field_ref: Some(ResourceFieldSelector {
                    resource: "limits.cpu".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(downward_files(&resources, &pod).is_err());
    }

    #[test]
    fn paths_under_mounts_are_rewritten_where_a_path_can_start() {
        let (spec, c) = spec();
        let m = plan(
            &spec,
            &c,
            "ns",
            &Volumes::new("/v"),
            Path::new("/r"),
            &Default::default(),
        )
        .unwrap();
        let cases = [
            (
                "/var/run/ferry/disk-0/disk.img",
                "/r/var/run/ferry/disk-0/disk.img",
            ),
            (
                "0=/var/run/ferry/disk-0/disk.img=67108864=ab",
                "0=/r/var/run/ferry/disk-0/disk.img=67108864=ab",
            ),
            ("1=/dev/ferry-disk-1=5=ab", "1=/r/dev/ferry-disk-1=5=ab"),
            ("/tmp", "/r/tmp"),
            ("/tmpfoo", "/tmpfoo"),
            ("x/tmp/y", "x/tmp/y"),
            ("a:/tmp/x,/tmp", "a:/r/tmp/x,/r/tmp"),
            ("--work=/tmp/w", "--work=/r/tmp/w"),
            ("/dev/termination-log", "/r/dev/termination-log"),
            ("plain", "plain"),
        ];
        for (input, want) in cases {
            assert_eq!(rewrite(input, &m), want, "{input}");
        }
    }

    #[test]
    fn the_termination_message_is_the_file_else_the_logs_tail_on_failure_only() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let fallback = Some("FallbackToLogsOnError");
        let msg = termination_message("", &log, true, fallback).unwrap();
        assert_eq!(msg.lines().count(), 80);
        assert!(msg.ends_with("line 99"));
        assert_eq!(termination_message("", &log, false, fallback), None);
        assert_eq!(termination_message("", &log, true, Some("File")), None);
        assert_eq!(termination_message("", &log, true, None), None);
        let long = "x".repeat(5000);
        assert_eq!(
            termination_message("", &long, true, fallback)
                .unwrap()
                .len(),
            2048
        );
        // What the container wrote wins, on success and on failure, cut to its last 4096 bytes.
        for failed in [false, true] {
            assert_eq!(
                termination_message("result\n", &log, failed, fallback).as_deref(),
                Some("result\n")
            );
        }
        let big = format!("{}end", "y".repeat(5000));
        let kept = termination_message(&big, "", false, None).unwrap();
        assert_eq!(kept.len(), MAX_MESSAGE_BYTES);
        assert!(kept.ends_with("end"));
    }

    #[test]
    fn the_pod_is_the_jobs() {
        let mut job = Job::default();
        job.metadata.name = Some("m-verify".into());
        job.metadata.namespace = Some("ns".into());
        job.metadata.uid = Some("job-uid".into());
        let log = Path::new("/v/_jobs/ns/m-verify/attempt-2.log");
        let p = pod_for(&job, 2, "sim-node", log);
        assert_eq!(p.metadata.name.as_deref(), Some("m-verify-jobui-sim2"));
        let mut next = job.clone();
        next.metadata.uid = Some("f00d-2".into());
        assert_ne!(
            pod_for(&next, 2, "sim-node", log).metadata.name,
            p.metadata.name,
            "a later Job of the same name never meets this one's pod"
        );
        let labels = p.metadata.labels.clone().unwrap();
        assert_eq!(labels[JOB_NAME_LABEL], "m-verify");
        assert_eq!(labels[CONTROLLER_UID_LABEL], "job-uid");
        let o = &p.metadata.owner_references.unwrap()[0];
        assert_eq!((o.kind.as_str(), o.controller), ("Job", Some(true)));
        assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("sim-node"));
        assert!(selector(&labels).contains("batch.kubernetes.io/job-name=m-verify"));
        assert_eq!(
            p.metadata.annotations.clone().unwrap()[LOG_ANNOTATION],
            "/v/_jobs/ns/m-verify/attempt-2.log"
        );
    }

    #[test]
    fn the_log_is_the_one_the_pod_names_only_when_it_is_its_attempts() {
        let mut job = Job::default();
        job.metadata.name = Some("j".into());
        job.metadata.namespace = Some("ns".into());
        job.metadata.uid = Some("abcde-1".into());
        let own = Volumes::new("/mine");
        let at = |path: &str| {
            let mut p = pod_for(&job, 3, "n", Path::new(path));
            p.metadata.uid = Some("p-1".into());
            container_log(&p, &own).unwrap()
        };
        assert_eq!(
            at("/other/sim/_jobs/ns/j/attempt-3.log"),
            PathBuf::from("/other/sim/_jobs/ns/j/attempt-3.log"),
            "another sim's volumes"
        );
        for bad in [
            "/etc/passwd",
            "/x/_jobs/ns/j/attempt-2.log",
            "/x/_jobs/other/j/attempt-3.log",
            "/x/../_jobs/ns/j/attempt-3.log",
            "relative/_jobs/ns/j/attempt-3.log",
        ] {
            assert_eq!(
                at(bad),
                PathBuf::from("/mine/_jobs/ns/j/attempt-3.log"),
                "{bad}"
            );
        }
        let mut foreign = pod_for(&job, 3, "n", Path::new("/x"));
        foreign.metadata.owner_references = None;
        assert_eq!(container_log(&foreign, &own), None);
        let p = Pod {
            metadata: ObjectMeta {
                uid: Some("0f-3a".into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        assert_eq!(container_id(&p), "ferry-sim://0f3a");
    }

    #[test]
    fn a_launchers_console_log_is_its_vmis_only() {
        let own = Volumes::new("/mine");
        let pod = |named: Option<&str>| {
            let mut p = Pod::default();
            p.metadata.namespace = Some("ns".into());
            p.metadata.labels =
                Some([("kubevirt.io/created-by".to_owned(), "u-1".to_owned())].into());
            p.metadata.annotations =
                named.map(|n| [(CONSOLE_LOG_ANNOTATION.to_owned(), n.to_owned())].into());
            p
        };
        let mine = PathBuf::from("/mine/_guests/ns/u-1/console.log");
        assert_eq!(
            console_log(&pod(None), GUEST_CONSOLE_LOG, &own),
            Some(mine.clone())
        );
        assert_eq!(
            console_log(
                &pod(Some("/other/_guests/ns/u-1/console.log")),
                GUEST_CONSOLE_LOG,
                &own
            ),
            Some(PathBuf::from("/other/_guests/ns/u-1/console.log")),
            "another sim's node"
        );
        for bad in [
            "/etc/shadow",
            "/x/_guests/ns/u-2/console.log",
            "/x/../_guests/ns/u-1/console.log",
        ] {
            assert_eq!(
                console_log(&pod(Some(bad)), GUEST_CONSOLE_LOG, &own),
                Some(mine.clone()),
                "{bad}"
            );
        }
        assert_eq!(console_log(&pod(None), "compute", &own), None);
    }
}
