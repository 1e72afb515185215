//! Multus' NetworkAttachmentDefinition (the Network Plumbing Working Group's de-facto standard,
//! `k8s.cni.cncf.io/v1`): ferry only asks whether one exists, so it is read as a dynamic
//! object, by name.

use kube::api::ApiResource;

/// The API resource of NetworkAttachmentDefinitions.
pub fn network_attachment_definition() -> ApiResource {
    ApiResource {
        group: "k8s.cni.cncf.io".into(),
        version: "v1".into(),
        api_version: "k8s.cni.cncf.io/v1".into(),
        kind: "NetworkAttachmentDefinition".into(),
        plural: "network-attachment-definitions".into(),
    }
}
