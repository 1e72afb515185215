//! The children of one migration, read on demand: conversion Job, DataVolumes, VirtualMachine
//! and VirtualMachineInstance.

use ::kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use ferry_crds::{VirtualMachineMigration, names};
use kube::ResourceExt;
use serde_json::Value;

use crate::{
    state::{Child, ObjKey},
    strings::{self, details},
};

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// A Job's state as its conditions say it: `Failed` only once the Job controller gave up (its
/// `Failed` condition); a failed pod with retries left is `Retrying`, not a failure.
fn job_state(status: &Value) -> String {
    let n = |p: &str| status.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let condition = |t: &str| {
        status
            .pointer("/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    let failed = n("/failed");
    if condition("Complete") || (n("/succeeded") > 0 && !condition("Failed")) {
        "Complete".into()
    } else if condition("Failed") {
        details::with_failed_pods("Failed", failed)
    } else if n("/active") > 0 && failed > 0 {
        details::with_failed_pods("Running", failed)
    } else if n("/active") > 0 {
        "Running".into()
    } else if failed > 0 {
        details::with_failed_pods(details::RETRYING, failed)
    } else {
        "Pending".into()
    }
}

fn describe(kind: &str, status: &Value) -> String {
    let s = |p: &str| status.pointer(p).and_then(Value::as_str).map(str::to_owned);
    match kind {
        "Job" => job_state(status),
        "DataVolume" => {
            let phase = s("/phase").unwrap_or_else(|| strings::NONE.into());
            match s("/progress") {
                Some(p) => format!("{phase} {p}"),
                None => phase,
            }
        }
        "VirtualMachine" => s("/printableStatus").unwrap_or_else(|| {
            if status.pointer("/ready").and_then(Value::as_bool) == Some(true) {
                "Ready".into()
            } else {
                strings::NONE.into()
            }
        }),
        "VirtualMachineInstance" => {
            let phase = s("/phase").unwrap_or_else(|| strings::NONE.into());
            let agent = status
                .pointer("/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "AgentConnected" && c["status"] == "True")
                });
            if agent {
                details::agent_connected(&phase)
            } else {
                phase
            }
        }
        _ => String::new(),
    }
}

async fn one(client: &Client, ns: &str, res: &ApiResource, name: String) -> Child {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, res);
    let state = match api.get_opt(&name).await {
        Ok(Some(o)) => describe(&res.kind, o.data.get("status").unwrap_or(&Value::Null)),
        Ok(None) => details::ABSENT.into(),
        Err(::kube::Error::Api(s)) if s.code == 404 => details::ABSENT.into(),
        Err(::kube::Error::Api(s)) if s.code == 403 => details::FORBIDDEN.into(),
        Err(e) => super::one_line(&e),
    };
    Child {
        kind: res.kind.clone(),
        name,
        state,
    }
}

/// Reads the children of `vmm`; never fails as a whole, each child says what became of it.
pub async fn read(
    client: Client,
    vmm: &VirtualMachineMigration,
) -> (ObjKey, Result<Vec<Child>, String>) {
    let ns = vmm.namespace().unwrap_or_default();
    let key = ObjKey::new(ns.clone(), vmm.name_any());
    let mut out = vec![];
    out.push(
        one(
            &client,
            &ns,
            &ar("batch", "v1", "Job", "jobs"),
            names::job_name(vmm),
        )
        .await,
    );
    let disks = vmm.status.as_ref().map_or(0, |s| s.disks.len()).max(1);
    let dv = ar("cdi.kubevirt.io", "v1beta1", "DataVolume", "datavolumes");
    for i in 0..disks {
        let name = vmm
            .status
            .as_ref()
            .and_then(|s| s.disks.get(i))
            .and_then(|d| d.data_volume.clone())
            .unwrap_or_else(|| names::datavolume_name(vmm, i));
        out.push(one(&client, &ns, &dv, name).await);
    }
    let vm = names::vm_name(vmm);
    out.push(
        one(
            &client,
            &ns,
            &ar("kubevirt.io", "v1", "VirtualMachine", "virtualmachines"),
            vm.clone(),
        )
        .await,
    );
    out.push(
        one(
            &client,
            &ns,
            &ar(
                "kubevirt.io",
                "v1",
                "VirtualMachineInstance",
                "virtualmachineinstances",
            ),
            vm,
        )
        .await,
    );
    (key, Ok(out))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_job_between_pod_retries_is_retrying_and_failed_only_when_the_job_controller_says_so() {
        let cases = [
            (json!({}), "Pending"),
            (json!({"active": 1}), "Running"),
            (
                json!({"active": 1, "failed": 1}),
                "Running (failed pods: 1)",
            ),
            // Between two pods: no pod active, one failed, no Failed condition yet.
            (json!({"failed": 2}), "Retrying (failed pods: 2)"),
            (
                json!({"failed": 7, "conditions": [{"type": "Failed", "status": "True"}]}),
                "Failed (failed pods: 7)",
            ),
            (
                json!({"succeeded": 1, "failed": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
                "Complete",
            ),
        ];
        for (status, want) in cases {
            assert_eq!(describe("Job", &status), want, "{status}");
        }
    }
}
