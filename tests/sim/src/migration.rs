//! Where faults come from and where fired `once` faults are recorded: the owning
//! VirtualMachineMigration (group `migration.platform.example`) when there is one, else the
//! child itself.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use tracing::warn;

use crate::faults::{self, FAULT_ANNOTATION, FIRED_ANNOTATION, FaultSpec, Fired, Rates, Step};
use crate::{Error, Result};

/// The API group of the migration resources.
pub const MIGRATION_GROUP: &str = "migration.platform.example";
/// The kind that owns the children the sim acts on.
pub const MIGRATION_KIND: &str = "VirtualMachineMigration";

/// The faults that apply to one child, and where to record fired ones.
#[derive(Clone, Debug)]
pub struct Faults {
    pub spec: FaultSpec,
    pub fired: Fired,
    /// `namespace/name` of the child, the key of rate draws.
    pub key: String,
    record_on: Target,
    enabled: bool,
}

#[derive(Clone, Debug)]
struct Target {
    resource: ApiResource,
    namespace: String,
    name: String,
}

/// The owner reference to a VirtualMachineMigration, if any.
pub fn migration_owner(refs: &[OwnerReference]) -> Option<&OwnerReference> {
    refs.iter().find(|r| {
        r.kind == MIGRATION_KIND && r.api_version.split('/').next() == Some(MIGRATION_GROUP)
    })
}

fn resource_of(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn parse_spec(owner: &str, value: Option<&String>) -> FaultSpec {
    match value.map(|v| FaultSpec::parse(v)) {
        None => FaultSpec::default(),
        Some(Ok(spec)) => spec,
        Some(Err(e)) => {
            warn!(%owner, error = %e, "ignoring an invalid {FAULT_ANNOTATION} annotation");
            FaultSpec::default()
        }
    }
}

/// Describes the child the faults are looked up for.
#[derive(Debug)]
pub struct Child<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub plural: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub annotations: Option<&'a BTreeMap<String, String>>,
    pub owners: &'a [OwnerReference],
}

impl Faults {
    /// No faults (when they could not be read), recorded on nothing.
    pub fn none(namespace: &str, name: &str) -> Faults {
        Faults {
            spec: FaultSpec::default(),
            fired: Fired::default(),
            key: format!("{namespace}/{name}"),
            record_on: Target {
                resource: resource_of("v1", "ConfigMap", "configmaps"),
                namespace: namespace.into(),
                name: name.into(),
            },
            enabled: false,
        }
    }

    /// Reads the fault spec of `child`: its owning migration's annotation, with the child's own
    /// annotation taking precedence step by step.
    ///
    /// Errors: the migration could not be read (other than not found: then there is none).
    pub async fn load(client: &kube::Client, child: &Child<'_>) -> Result<Faults> {
        let empty = BTreeMap::new();
        let own = child.annotations.unwrap_or(&empty);
        let key = format!("{}/{}", child.namespace, child.name);
        let mut spec = parse_spec(&key, own.get(FAULT_ANNOTATION));
        let mut fired = Fired::parse(own.get(FIRED_ANNOTATION).map(String::as_str));
        let mut record_on = Target {
            resource: resource_of(child.api_version, child.kind, child.plural),
            namespace: child.namespace.to_string(),
            name: child.name.to_string(),
        };
        if let Some(owner) = migration_owner(child.owners) {
            let resource = resource_of(
                &owner.api_version,
                MIGRATION_KIND,
                "virtualmachinemigrations",
            );
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), child.namespace, &resource);
            if let Some(vmm) = api.get_opt(&owner.name).await? {
                let anns = vmm.metadata.annotations.unwrap_or_default();
                let from_vmm = parse_spec(&owner.name, anns.get(FAULT_ANNOTATION));
                for rule in from_vmm.rules {
                    if spec.rule(rule.step).is_none() {
                        spec.rules.push(rule);
                    }
                }
                fired = Fired::parse(anns.get(FIRED_ANNOTATION).map(String::as_str));
                record_on = Target {
                    resource,
                    namespace: child.namespace.to_string(),
                    name: owner.name.clone(),
                };
            }
        }
        Ok(Faults {
            spec,
            fired,
            key,
            record_on,
            enabled: true,
        })
    }

    /// The fault for this attempt of `step`, if any; a `once` fault is recorded before it is
    /// returned, so that a sim restarted right after does not fire it again.
    ///
    /// Errors: the record could not be written (then the fault is not fired either).
    pub async fn take(
        &mut self,
        client: &kube::Client,
        rates: &Rates,
        step: Step,
    ) -> Result<Option<faults::Fault>> {
        if !self.enabled {
            return Ok(None);
        }
        let Some(fault) = faults::decide(step, &self.spec, rates, &self.key, &self.fired) else {
            return Ok(None);
        };
        if fault.record {
            let value = self.fired.with(step);
            let t = &self.record_on;
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &t.namespace, &t.resource);
            let patch = serde_json::json!({"metadata": {"annotations": {FIRED_ANNOTATION: value}}});
            api.patch(&t.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::Kube)?;
            self.fired = Fired::parse(Some(&value));
        }
        Ok(Some(fault))
    }
}
