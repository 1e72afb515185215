//! The pod logs view's I/O: the pods of a migration's Jobs and importers, listed, and one
//! container's log read through `pods/log` — its last lines, then followed.
//!
//! A Job's pods are found by the uid its record in the migration's `status.children` holds
//! (the label the Job controller writes, `batch.kubernetes.io/controller-uid`), never by name:
//! a Job of a similar name, or an earlier Job of the same name whose pods wait for the garbage
//! collector, has another uid. Reading the record takes only `get` on the migration (which
//! `ferry-view` has), not `get` on Jobs.
//!
//! The migrated VM's launcher pod is listed too, its serial console (`guest-console-log`, the
//! sidecar KubeVirt keeps it in) first: the pod its instance's `status.activePods` names and
//! the instance controls, as the controller reads it for `GuestNotReady`
//! (`ferry_controller::reconcile::console::launcher`).

use ::kube::{
    Api, Client, ResourceExt,
    api::{ListParams, LogParams},
};
use ferry_crds::VirtualMachineMigration;
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc::UnboundedSender;

use crate::{
    state::{
        Action, ObjKey,
        podlogs::{JOB_UID_LABEL, JobRef, PodInfo, TAIL_LINES},
    },
    strings::podlogs as say,
};

/// Most lines sent to the loop in one action: a tail of 500 arrives in a few batches, not 500
/// actions.
const BATCH: usize = 256;

fn info(p: Pod, owner: String) -> PodInfo {
    let job_uid = p.labels().get(JOB_UID_LABEL).cloned();
    let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let containers = p
        .spec
        .map(|s| s.containers.into_iter().map(|c| c.name).collect())
        .unwrap_or_default();
    let phase = p
        .status
        .and_then(|s| s.phase)
        .unwrap_or_else(|| crate::strings::NONE.into());
    PodInfo {
        name: p.metadata.name.unwrap_or_default(),
        owner,
        job_uid,
        containers,
        phase,
        created,
    }
}

/// The migrated VM's launcher pod `p`, its serial console's container first (the one the view
/// follows) when it has one.
fn launcher_info(p: Pod, vm: &str) -> PodInfo {
    use ferry_controller::reconcile::console::CONTAINER;
    let console = p
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == CONTAINER));
    let mut i = info(p, say::launcher_owner(vm));
    // A launcher is virt-controller's, never a Job's, whatever its labels say.
    i.job_uid = None;
    if console {
        i.containers.insert(0, CONTAINER.to_owned());
    }
    i
}

/// The migrated VM's launcher pod, when its instance runs (optional: KubeVirt's API may be
/// absent, the instance gone, or reading it not allowed).
async fn launcher(client: Client, vmm: &VirtualMachineMigration) -> Option<PodInfo> {
    use ferry_controller::apis::kubevirt::VirtualMachineInstance;
    let ns = vmm.metadata.namespace.as_deref()?;
    let vm = ferry_crds::names::vm_name(vmm);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi = vmis.get_opt(&vm).await.ok()??;
    let uid = vmi.metadata.uid.clone()?;
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let lp = ListParams::default().labels(&format!("kubevirt.io/created-by={uid}"));
    let list = pods.list(&lp).await.ok()?;
    let p = ferry_controller::reconcile::console::launcher(&vmi, &list.items)?;
    Some(launcher_info(p.clone(), &vm))
}

fn list_error(e: &::kube::Error, ns: &str) -> String {
    match e {
        ::kube::Error::Api(s) if s.code == 403 => say::list_forbidden(ns),
        e => super::one_line(e),
    }
}

/// The migration's Jobs (from its `status.children`) and the pods found for them and its
/// DataVolumes' importers (CDI names one `importer-<datavolume>`).
pub async fn find(client: Client, key: &ObjKey) -> Result<(Vec<JobRef>, Vec<PodInfo>), String> {
    let ns = &key.namespace;
    let vmms: Api<VirtualMachineMigration> = Api::namespaced(client.clone(), ns);
    let vmm = vmms
        .get(&key.name)
        .await
        .map_err(|e| say::cannot_read_migration(&super::one_line(&e)))?;
    let records = vmm
        .status
        .as_ref()
        .map(|s| s.children.clone())
        .unwrap_or_default();
    let jobs: Vec<JobRef> = records
        .iter()
        .filter(|c| c.kind == "Job" && !c.uid.is_empty())
        .map(|c| JobRef {
            name: c.name.clone(),
            uid: c.uid.clone(),
        })
        .collect();
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let mut found = vec![];
    if !jobs.is_empty() {
        let uids: Vec<&str> = jobs.iter().map(|j| j.uid.as_str()).collect();
        let lp = ListParams::default().labels(&format!("{JOB_UID_LABEL} in ({})", uids.join(",")));
        for p in pods.list(&lp).await.map_err(|e| list_error(&e, ns))? {
            let uid = p.labels().get(JOB_UID_LABEL).cloned();
            let owner = jobs
                .iter()
                .find(|j| Some(&j.uid) == uid.as_ref())
                .map(|j| j.name.clone())
                .unwrap_or_default();
            found.push(info(p, owner));
        }
    }
    for dv in records.iter().filter(|c| c.kind == "DataVolume") {
        // Optional: CDI's importer exists only while it imports (and only with CDI).
        let lp = ListParams::default().fields(&format!("metadata.name=importer-{}", dv.name));
        if let Ok(list) = pods.list(&lp).await {
            found.extend(list.into_iter().map(|p| {
                let mut i = info(p, dv.name.clone());
                // An importer is CDI's, never a Job's, whatever its labels say.
                i.job_uid = None;
                i
            }));
        }
    }
    found.extend(launcher(pods.into_client(), &vmm).await);
    Ok((jobs, found))
}

/// Why a log cannot be read, in the operator's words: a 403 names the permission and the role
/// that grants it; a 400/404 carries the kubelet's or API server's own sentence (e.g.
/// `container "convert" in pod "…" is waiting to start: ContainerCreating`).
fn log_error(e: &::kube::Error, ns: &str) -> String {
    match e {
        ::kube::Error::Api(s) if s.code == 403 => say::log_forbidden(ns),
        ::kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        e => super::one_line(e),
    }
}

/// Reads container `container` of pod `pod` in `key`'s namespace: the last
/// [`TAIL_LINES`] lines, then each line as it is written, until the container ends (the API
/// server closes the stream) or the task is aborted. Lines and the end go to `tx` tagged with
/// `session`; nothing here can end the cockpit.
pub async fn follow(
    client: Client,
    key: ObjKey,
    pod: String,
    container: String,
    session: u64,
    tx: UnboundedSender<Action>,
) {
    let api: Api<Pod> = Api::namespaced(client, &key.namespace);
    let lp = LogParams {
        container: Some(container),
        follow: true,
        tail_lines: Some(TAIL_LINES),
        ..LogParams::default()
    };
    let reader = match api.log_stream(&pod, &lp).await {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Action::LogEnded {
                session,
                result: Err(log_error(&e, &key.namespace)),
            });
            return;
        }
    };
    // Lines read as bytes and decoded leniently: a converter may print a byte that is not
    // UTF-8, and `lines()` would end the stream on it.
    let lines = futures::stream::unfold(Box::pin(reader), |mut r| async move {
        let mut buf = vec![];
        match r.read_until(b'\n', &mut buf).await {
            Ok(0) => None,
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                Some((Ok(String::from_utf8_lossy(&buf).into_owned()), r))
            }
            Err(e) => Some((Err(e), r)),
        }
    });
    let mut chunks = Box::pin(lines.ready_chunks(BATCH));
    while let Some(chunk) = chunks.next().await {
        let mut lines = Vec::with_capacity(chunk.len());
        let mut failed = None;
        for l in chunk {
            match l {
                Ok(l) => lines.push(l),
                Err(e) => {
                    failed = Some(super::one_line(&e));
                    break;
                }
            }
        }
        if !lines.is_empty() && tx.send(Action::LogLines { session, lines }).is_err() {
            return;
        }
        if let Some(why) = failed {
            let _ = tx.send(Action::LogEnded {
                session,
                result: Err(why),
            });
            return;
        }
    }
    let _ = tx.send(Action::LogEnded {
        session,
        result: Ok(()),
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    #[test]
    fn a_launchers_console_comes_first_and_it_is_no_jobs() {
        let mut p = Pod::default();
        p.metadata.name = Some("virt-launcher-web-1-abcde".into());
        p.metadata.labels = Some([(JOB_UID_LABEL.to_owned(), "forged".to_owned())].into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "compute".into(),
                ..Container::default()
            }],
            init_containers: Some(vec![Container {
                name: "guest-console-log".into(),
                ..Container::default()
            }]),
            ..PodSpec::default()
        });
        let i = launcher_info(p.clone(), "web-1");
        assert_eq!(i.containers, ["guest-console-log", "compute"]);
        assert_eq!(i.job_uid, None);
        assert_eq!(i.owner, "VM web-1 (console)");
        p.spec.as_mut().unwrap().init_containers = None;
        assert_eq!(launcher_info(p, "web-1").containers, ["compute"]);
    }
}
