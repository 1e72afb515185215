//! Volume binding, as the scheduler, the PV controller and CDI decide it: a claim on a
//! StorageClass with `volumeBindingMode: WaitForFirstConsumer` stays `Pending` until a pod that
//! uses it is scheduled (the scheduler writes the node it picked into the claim's
//! `volume.kubernetes.io/selected-node`), unless CDI was asked to bind at once; CDI imports
//! through a populator (the claim binds only once populated) when the class's provisioner is a
//! CSI driver, else with its legacy importer (which starts once the claim is bound).

use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::Api;

use crate::Result;
use crate::context::Sim;

/// The annotation the scheduler sets on a delayed-binding claim once it picked a node.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The annotation that marks the cluster's default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// CDI's annotation asking to bind at once whatever the class says.
pub const BIND_IMMEDIATE: &str = "cdi.kubevirt.io/storage.bind.immediate.requested";

/// How a claim gets bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// At once.
    Immediate,
    /// When a consumer pod is scheduled; `populator`: CDI populates it first and binds it after.
    FirstConsumer { populator: bool },
}

/// The class a claim uses: the one it names, else the default class (none without either). Pure.
pub fn class_of<'a>(named: Option<&str>, classes: &'a [StorageClass]) -> Option<&'a StorageClass> {
    match named {
        Some(n) => classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(n)),
        None => classes.iter().find(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS))
                .is_some_and(|v| v == "true")
        }),
    }
}

/// How a claim of `class` binds: delayed only for `WaitForFirstConsumer` without an immediate
/// request; with a populator when a CSIDriver is named as the class's provisioner (CDI's
/// `shouldUseCDIPopulator`). Pure.
pub fn binding(class: Option<&StorageClass>, csi_drivers: &[String], immediate: bool) -> Binding {
    let Some(class) = class else {
        return Binding::Immediate;
    };
    if immediate || class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
        return Binding::Immediate;
    }
    Binding::FirstConsumer {
        populator: csi_drivers.contains(&class.provisioner),
    }
}

/// How a claim naming `class` (or none) binds in the cluster now.
///
/// Errors: the apiserver's.
pub async fn claim_binding(sim: &Sim, class: Option<&str>, immediate: bool) -> Result<Binding> {
    let classes = Api::<StorageClass>::all(sim.client.clone())
        .list(&Default::default())
        .await?
        .items;
    let drivers: Vec<String> = Api::<CSIDriver>::all(sim.client.clone())
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    Ok(binding(class_of(class, &classes), &drivers, immediate))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn class(name: &str, mode: &str, default: bool) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: default
                    .then(|| BTreeMap::from([(DEFAULT_CLASS.to_string(), "true".to_string())])),
                ..ObjectMeta::default()
            },
            provisioner: format!("{name}.example.com"),
            volume_binding_mode: Some(mode.into()),
            ..StorageClass::default()
        }
    }

    #[test]
    fn delayed_binding_needs_the_class_and_no_immediate_request() {
        let classes = [
            class("fast", "Immediate", true),
            class("local", "WaitForFirstConsumer", false),
        ];
        let csi = ["local.example.com".to_string()];
        assert_eq!(
            binding(class_of(Some("local"), &classes), &[], false),
            Binding::FirstConsumer { populator: false }
        );
        assert_eq!(
            binding(class_of(Some("local"), &classes), &csi, false),
            Binding::FirstConsumer { populator: true }
        );
        assert_eq!(
            binding(class_of(Some("local"), &classes), &csi, true),
            Binding::Immediate
        );
        assert_eq!(
            binding(class_of(None, &classes), &csi, false),
            Binding::Immediate,
            "the default class binds at once"
        );
        assert_eq!(
            binding(class_of(Some("gone"), &classes), &csi, false),
            Binding::Immediate
        );
        let wffc_default = [class("local", "WaitForFirstConsumer", true)];
        assert_eq!(
            binding(class_of(None, &wffc_default), &[], false),
            Binding::FirstConsumer { populator: false }
        );
    }
}
