//! KubeVirt's instancetypes and preferences (`instancetype.kubevirt.io/v1beta1`, KubeVirt's
//! `api/instancetype/v1beta1`): ferry only asks whether the one a migration names exists, so
//! each is read as a dynamic object, by name.

use ferry_crds::{InstancetypeKind, PreferenceKind};
use kube::api::ApiResource;

/// The API group and version of instancetypes and preferences.
const GROUP: &str = "instancetype.kubevirt.io";
const VERSION: &str = "v1beta1";

/// The API resource of `kind` (its plural is KubeVirt's).
fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The API resource of an instancetype of `kind`, and whether it is cluster-wide.
pub fn instancetype(kind: InstancetypeKind) -> (ApiResource, bool) {
    match kind {
        InstancetypeKind::VirtualMachineClusterInstancetype => (
            resource(
                "VirtualMachineClusterInstancetype",
                "virtualmachineclusterinstancetypes",
            ),
            true,
        ),
        InstancetypeKind::VirtualMachineInstancetype => (
            resource("VirtualMachineInstancetype", "virtualmachineinstancetypes"),
            false,
        ),
    }
}

/// The API resource of a preference of `kind`, and whether it is cluster-wide.
pub fn preference(kind: PreferenceKind) -> (ApiResource, bool) {
    match kind {
        PreferenceKind::VirtualMachineClusterPreference => (
            resource(
                "VirtualMachineClusterPreference",
                "virtualmachineclusterpreferences",
            ),
            true,
        ),
        PreferenceKind::VirtualMachinePreference => (
            resource("VirtualMachinePreference", "virtualmachinepreferences"),
            false,
        ),
    }
}
