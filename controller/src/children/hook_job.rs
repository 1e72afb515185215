//! A hook's Job: the author's image and command (`spec.hooks`), run once, with the migration's
//! context as a file.
//!
//! What it is given and what it is not: the context (which migration, attempt, hook and phase,
//! the source VM's name and ids, the target VM's name) comes through the downward API from an
//! annotation of its own pod (no object to make and clean up, nothing another pod can read);
//! no Secret, no ServiceAccount token, no service links: a hook acts with what its image holds,
//! never with ferry's credentials nor the migration's vSphere or S3 ones. Pod Security
//! `restricted` as every pod ferry makes (user 65532, a read-only root, `/tmp` writable).

use ferry_crds::{Hook, HookPoint, VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource, EnvVar,
    ObjectFieldSelector, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::Result;

/// The container's name.
pub const CONTAINER: &str = "hook";
/// The pod annotation carrying the context, which the downward API writes into the file.
pub const CONTEXT_ANNOTATION: &str = "migration.platform.example/hook-context";
/// Where the context's volume is mounted.
pub const CONTEXT_DIR: &str = "/var/run/ferry/hook";
/// The context file's name in it.
pub const CONTEXT_FILE: &str = "context.json";
/// The environment variable naming the context file.
pub const CONTEXT_ENV: &str = "FERRY_HOOK_CONTEXT";
/// The environment variable naming the hook (`preCutover`, `postCutover`).
pub const HOOK_ENV: &str = "FERRY_HOOK";
/// The user the hook runs as (non-root, as `restricted` asks; the image's files must allow it).
pub const RUN_AS_USER: i64 = 65532;
/// A hook runs once: its author's retry is `spec.retry`.
pub const BACKOFF_LIMIT: i32 = 0;
/// What a hook asks for and may use.
const REQUESTS: [(&str, &str); 2] = [("cpu", "100m"), ("memory", "64Mi")];
const LIMITS: [(&str, &str); 1] = [("memory", "512Mi")];

/// The context a hook reads, as JSON: the migration, attempt, hook and phase, the source VM's
/// name, moref and UUIDs as discovered, and the target VM's name and namespace. Never an
/// endpoint nor a credential. Pure.
pub fn context(vmm: &VirtualMachineMigration, point: HookPoint) -> serde_json::Value {
    let status = vmm.status.as_ref();
    let source = status.and_then(|s| s.source.as_deref());
    serde_json::json!({
        "hook": point.field(),
        "migration": {
            "name": vmm.metadata.name,
            "namespace": vmm.metadata.namespace,
            "uid": vmm.metadata.uid,
            "attempt": status.map_or(0, |s| s.attempts),
            "phase": vmm.phase(),
            "mode": vmm.spec.mode,
        },
        "source": {
            "name": source.and_then(|s| s.name.clone()),
            "moref": source.and_then(|s| s.moref.clone()),
            "uuid": source.and_then(|s| s.uuid.clone()),
            "instanceUuid": source.and_then(|s| s.instance_uuid.clone()),
        },
        "target": {
            "name": names::vm_name(vmm),
            "namespace": vmm.metadata.namespace,
        },
    })
}

/// The Job of the hook at `point` ([`names::hook_job_name`]).
///
/// # Guarantees
/// Owned by and labelled with the migration; the author's image, command and args; the context
/// file at [`CONTEXT_DIR`]/[`CONTEXT_FILE`] (named by `$FERRY_HOOK_CONTEXT`); no Secret, no
/// ServiceAccount token; Pod Security `restricted`; one pod, stopped after the hook's timeout.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn hook_job(vmm: &VirtualMachineMigration, point: HookPoint, hook: &Hook) -> Result<Job> {
    let meta = super::child_meta(vmm, names::hook_job_name(vmm, point))?;
    let quantities = |q: &[(&str, &str)]| {
        q.iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    };
    let plain = |name: &str, value: String| EnvVar {
        name: name.to_owned(),
        value: Some(value),
        value_from: None,
    };
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(hook.image.clone()),
        command: Some(hook.command.clone()),
        args: Some(hook.args.clone()).filter(|a| !a.is_empty()),
        env: Some(vec![
            plain(CONTEXT_ENV, format!("{CONTEXT_DIR}/{CONTEXT_FILE}")),
            plain(HOOK_ENV, point.field().to_owned()),
        ]),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "context".to_owned(),
                mount_path: CONTEXT_DIR.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "tmp".to_owned(),
                mount_path: "/tmp".to_owned(),
                ..VolumeMount::default()
            },
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&REQUESTS)),
            limits: Some(quantities(&LIMITS)),
            ..ResourceRequirements::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    let volumes = volumes();
    let mut job = super::restricted_job(
        vmm,
        meta,
        container,
        volumes,
        RUN_AS_USER,
        BACKOFF_LIMIT,
        i64::from(hook.timeout_seconds),
    );
    if let Some(template) = job.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
        template.annotations = Some(std::collections::BTreeMap::from([(
            CONTEXT_ANNOTATION.to_owned(),
            context(vmm, point).to_string(),
        )]));
    }
    Ok(job)
}

/// The hook's volumes: the context file through the downward API, and `/tmp`.
fn volumes() -> Vec<Volume> {
    vec![
        Volume {
            name: "context".to_owned(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: CONTEXT_FILE.to_owned(),
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: format!("metadata.annotations['{CONTEXT_ANNOTATION}']"),
                    }),
                    ..DownwardAPIVolumeFile::default()
                }]),
                ..DownwardAPIVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "tmp".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("256Mi".to_owned())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    fn hook() -> Hook {
        Hook {
            image: "registry.example/app-quiesce:1".into(),
            command: vec!["/bin/quiesce".into()],
            args: vec!["--all".into()],
            timeout_seconds: 120,
        }
    }

    #[test]
    fn a_hook_job_runs_the_authors_command_with_its_context_and_no_credentials() {
        let mut vmm = migration("web-1");
        vmm.status.get_or_insert_with(Default::default).source =
            Some(Box::new(ferry_crds::fixtures::discovered_source()));
        let job = hook_job(&vmm, HookPoint::PreCutover, &hook()).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("web-1-pre-cutover"));
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(120));
        let annotations = spec.template.metadata.unwrap().annotations.unwrap();
        let ctx: serde_json::Value =
            serde_json::from_str(&annotations[CONTEXT_ANNOTATION]).unwrap();
        assert_eq!(ctx["hook"], "preCutover");
        assert_eq!(ctx["migration"]["name"], "web-1");
        assert_eq!(ctx["target"]["name"], names::vm_name(&vmm));
        assert_eq!(ctx["source"]["name"], "DC0_H0_VM0", "{ctx}");
        let text = ctx.to_string();
        for secretish in ["password", "secret", "url", "endpoint", "credential"] {
            assert!(
                !text.to_lowercase().contains(secretish),
                "{secretish}: {text}"
            );
        }
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.service_account_name, None);
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("registry.example/app-quiesce:1"));
        assert_eq!(c.command.clone().unwrap(), ["/bin/quiesce"]);
        assert_eq!(c.args.clone().unwrap(), ["--all"]);
        let env = c.env.clone().unwrap();
        assert!(env.iter().all(|e| e.value_from.is_none()), "{env:?}");
        assert!(c.env_from.is_none());
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.run_as_non_root, Some(true));
        let vols = pod.volumes.unwrap();
        let downward = vols[0].downward_api.clone().unwrap().items.unwrap();
        assert_eq!(downward[0].path, CONTEXT_FILE);
        assert!(
            vols.iter()
                .all(|v| v.secret.is_none() && v.projected.is_none())
        );
    }
}
