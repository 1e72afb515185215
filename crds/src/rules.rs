//! The validation the API server enforces: OpenAPI patterns and the CEL rules
//! (`x-kubernetes-validations`), in one place so that they can be read, tested and reported
//! together. Every message names the field it is about.

use kube::core::Rule;

/// A DNS-1123 label (used with `maxLength: 63`): lowercase letters, digits and `-`, starting and
/// ending with a letter or digit.
pub const DNS1123_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 subdomain (used with `maxLength: 253`), the rule for most Kubernetes object names.
pub const DNS1123_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A certificate thumbprint: SHA-1 (20 bytes) or SHA-256 (32 bytes) as colon-separated hex pairs.
pub const THUMBPRINT: &str =
    r"^([0-9A-Fa-f]{2}:){19}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$";
/// A UUID in its canonical 8-4-4-4-12 form.
pub const UUID: &str =
    r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$";
/// A VirtualMachine managed object reference: `vm-42` on vCenter, a bare number on ESXi.
pub const MOREF: &str = r"^(vm-)?[0-9]+$";
/// An S3 bucket name's characters and length (3 to 63); [`bucket_name`] adds the rest.
pub const BUCKET: &str = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$";
/// An S3 key prefix: `/`-separated segments of safe characters, no leading `/`, no empty segment.
pub const KEY_PREFIX: &str = r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?$";
/// An S3 region name.
pub const REGION: &str = r"^[A-Za-z0-9_-]+$";
/// A Multus NetworkAttachmentDefinition reference: `name` or `namespace/name`.
pub const NETWORK_ATTACHMENT: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$";
/// A container image reference: no whitespace.
pub const IMAGE: &str = r"^\S+$";
/// A QEMU machine type, e.g. `q35`, `pc-q35-rhel9.4.0`.
pub const MACHINE_TYPE: &str = r"^[a-z0-9][a-z0-9._-]*$";
/// A lowercase SHA-256 digest in hex.
pub const SHA256_HEX: &str = r"^[0-9a-f]{64}$";

/// `metadata.name` at most 63 characters: ferry writes the names of migrations and waves into
/// label values and derives child names from them.
pub fn name_fits_label() -> Rule {
    Rule::new("self.metadata.name.size() <= 63")
        .message("metadata.name must be at most 63 characters (it is used as a label value)")
        .reason(kube::core::Reason::FieldValueInvalid)
}

/// Exactly one of `name`, `id`, `uuid` selects the source VM.
pub fn exactly_one_vm_selector() -> Rule {
    Rule::new("(has(self.name) ? 1 : 0) + (has(self.id) ? 1 : 0) + (has(self.uuid) ? 1 : 0) == 1")
        .message("exactly one of name, id or uuid must be set to select the VM")
        .reason(kube::core::Reason::FieldValueInvalid)
}

/// A wave lists its VMs or selects them, not both, not neither.
pub fn vms_or_selector() -> Rule {
    Rule::new("size(self.vms) > 0 != has(self.selector)")
        .message("set exactly one of spec.vms (at least one VM) and spec.selector")
        .reason(kube::core::Reason::FieldValueInvalid)
}

/// At most one of `thumbprint` and `insecureSkipTLSVerify: true` (the credentials Secret decides
/// the trust; these may only repeat it).
pub fn tls_verification() -> Rule {
    Rule::new(
        "!(has(self.thumbprint) && has(self.insecureSkipTLSVerify) && self.insecureSkipTLSVerify)",
    )
    .message("at most one of thumbprint or insecureSkipTLSVerify: true may be set")
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// The vSphere `url` is an https URL with a host.
pub fn vsphere_url() -> Rule {
    Rule::new("isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''")
        .message("url must be an https URL, e.g. https://vcenter.example.com/sdk")
}

/// The S3 `endpoint` is an http or https URL with a host.
pub fn s3_endpoint() -> Rule {
    Rule::new(
        "isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",
    )
    .message("endpoint must be an http or https URL, e.g. https://s3.example.com")
}

/// The S3 bucket name rules that a pattern cannot say.
pub fn bucket_name() -> Rule {
    Rule::new(
        "!self.contains('..') && !self.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$') \
         && !self.startsWith('xn--') && !self.endsWith('-s3alias')",
    )
    .message(
        "bucket must be a valid S3 bucket name: no '..', not an IP address, \
         no 'xn--' prefix or '-s3alias' suffix",
    )
}

/// `spec.source` cannot change after creation.
pub fn source_immutable() -> Rule {
    Rule::new("self == oldSelf")
        .message("source is immutable: create a new VirtualMachineMigration to migrate another VM")
}

/// `spec.target` cannot change after creation.
pub fn target_immutable() -> Rule {
    Rule::new("self == oldSelf")
        .message("target is immutable: create a new VirtualMachineMigration to change the target")
}

/// `spec.staging` and `spec.conversion` are fixed once the migration has started, until it is
/// settled as `Failed` or `Cancelled` (a retry then starts over on the new values): what it
/// stages on and where cleanup looks must not move under it. At the root: it reads the status.
pub fn staging_fixed_while_running() -> Rule {
    Rule::new(
        "!has(oldSelf.status) || !has(oldSelf.status.phase) \
         || oldSelf.status.phase in ['Pending', 'Queued', 'Failed', 'Cancelled'] \
         || (self.spec.staging == oldSelf.spec.staging \
             && has(self.spec.conversion) == has(oldSelf.spec.conversion) \
             && (!has(self.spec.conversion) || self.spec.conversion == oldSelf.spec.conversion))",
    )
    .message(
        "spec.staging and spec.conversion cannot change once the migration has started (they \
         fix where its disks are staged and cleaned up): cancel it, or wait until it is Failed, \
         then change them and raise spec.retry (the retry starts over)",
    )
    .reason(kube::core::Reason::FieldValueForbidden)
}

/// `spec.mode` is fixed once the migration has started, until it is settled as `Failed` or
/// `Cancelled`: a warm migration's snapshot and first copy are not a cold one's. At the root: it
/// reads the status.
pub fn mode_fixed_while_running() -> Rule {
    Rule::new(
        "!has(oldSelf.status) || !has(oldSelf.status.phase) \
         || oldSelf.status.phase in ['Pending', 'Queued', 'Failed', 'Cancelled'] \
         || self.spec.mode == oldSelf.spec.mode",
    )
    .message(
        "spec.mode cannot change once the migration has started: cancel it, or wait until it is \
         Failed, then change it and raise spec.retry (the retry starts over)",
    )
    .reason(kube::core::Reason::FieldValueForbidden)
}

/// `spec.retry` is a token that only grows.
pub fn retry_only_grows() -> Rule {
    Rule::new("self >= oldSelf")
        .message("retry may not decrease: it is a token, raise it to ask for a retry")
}

/// A network mapping sets exactly one of `pod` and `multus`.
pub fn exactly_one_network_binding() -> Rule {
    Rule::new("has(self.pod) != has(self.multus)")
        .message("exactly one of pod or multus must be set for each network")
}

/// At most one source network goes to the pod network (KubeVirt allows one pod interface).
pub fn at_most_one_pod_network() -> Rule {
    Rule::new("self.filter(n, has(n.pod)).size() <= 1")
        .message("networks may map at most one source network to pod")
}

/// A readiness that waits for the guest needs a run strategy that starts the VM: ferry does not
/// start a Manual VM (KubeVirt's `start` subresource is served by virt-api) nor a Halted one.
pub fn readiness_needs_a_start() -> Rule {
    Rule::new(
        "!has(self.readiness) || self.readiness == 'None' \
         || !has(self.runStrategy) || !(self.runStrategy in ['Halted', 'Manual'])",
    )
    .message(
        "readiness Running or AgentConnected needs a runStrategy that starts the VM (Always, \
         RerunOnFailure or Once): with Halted or Manual ferry leaves it stopped; set readiness: \
         None or leave it unset",
    )
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// A health check probes one way.
pub fn one_health_probe() -> Rule {
    Rule::new("has(self.tcp) != has(self.http)")
        .message("healthCheck takes exactly one of tcp and http")
        .reason(kube::core::Reason::FieldValueInvalid)
}

/// A health check probes a running guest: ferry must start the VM and wait for it to be ready.
pub fn health_check_needs_a_start() -> Rule {
    Rule::new(
        "!has(self.healthCheck) || ((!has(self.runStrategy) || !(self.runStrategy in ['Halted', 'Manual'])) \
         && (!has(self.readiness) || self.readiness != 'None') \
         && (!has(self.powerState) || self.powerState != 'PoweredOff'))",
    )
    .message(
        "healthCheck probes the running guest: it needs a runStrategy that starts the VM (Always, \
         RerunOnFailure or Once), readiness Running or AgentConnected, and a powerState other than \
         PoweredOff (with Auto, a source found powered off gets no check)",
    )
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// powerState PoweredOn asks ferry to start the VM, which a Halted or Manual run strategy never does.
pub fn power_on_needs_a_start() -> Rule {
    Rule::new(
        "!has(self.powerState) || self.powerState != 'PoweredOn' \
         || !has(self.runStrategy) || !(self.runStrategy in ['Halted', 'Manual'])",
    )
    .message(
        "powerState PoweredOn needs a runStrategy that starts the VM (Always, RerunOnFailure or Once); \
         for a VM left stopped use powerState PoweredOff",
    )
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// A wave's VM may not ask for powerState PoweredOn when the template's run strategy never
/// starts the VM: its migration would be refused by the API server, the wave's others made.
pub fn wave_power_on_needs_a_start() -> Rule {
    Rule::new(
        "!has(self.template.target.runStrategy) \
         || !(self.template.target.runStrategy in ['Halted', 'Manual']) \
         || self.vms.all(v, !has(v.powerState) || v.powerState != 'PoweredOn')",
    )
    .message(
        "a VM's powerState PoweredOn needs a template runStrategy that starts the VM (Always, \
         RerunOnFailure or Once); with Halted or Manual use powerState PoweredOff or leave it unset",
    )
    .field_path(".vms")
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// Ferry's own labels are how it finds its children (with its creation proof); a placement
/// that set them would make a VM look like another migration's.
pub fn placement_labels_not_ferrys() -> Rule {
    Rule::new(
        "!has(self.labels) || self.labels.all(k, !k.startsWith('migration.platform.example/'))",
    )
    .message("placement.labels may not set ferry's own labels (migration.platform.example/...)")
    .reason(kube::core::Reason::FieldValueForbidden)
}

/// Every CEL rule this crate puts into the CRDs, for tests and documentation.
pub fn all() -> Vec<Rule> {
    vec![
        name_fits_label(),
        exactly_one_vm_selector(),
        tls_verification(),
        vsphere_url(),
        s3_endpoint(),
        bucket_name(),
        source_immutable(),
        target_immutable(),
        staging_fixed_while_running(),
        mode_fixed_while_running(),
        retry_only_grows(),
        exactly_one_network_binding(),
        at_most_one_pod_network(),
        vms_or_selector(),
        readiness_needs_a_start(),
        power_on_needs_a_start(),
        wave_power_on_needs_a_start(),
        placement_labels_not_ferrys(),
    ]
}
