//! The scheduler's node filter for a VMI's launcher pod, on the sim's one node: its
//! `nodeSelector` and the required node affinity must match the node's labels (kube-scheduler's
//! NodeAffinity plugin, `pkg/scheduler/framework/plugins/nodeaffinity` and
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`). The node has no taints, so
//! tolerations change nothing; preferred terms only rank nodes and there is one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, NodeSelectorRequirement, NodeSelectorTerm};

use crate::kubevirt::VirtualMachineInstanceSpec;

/// kube-scheduler's reason when no node passes the filter (`ErrReasonPod`), as a pod's
/// `PodScheduled` condition carries it for one node.
pub const NO_NODE_MATCHES: &str =
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.";

/// The labels the sim's node carries: the kubelet's well-known ones and virt-handler's
/// `kubevirt.io/schedulable` (KubeVirt selects launcher pods on it).
pub fn node_labels(node: &str) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", node),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("kubevirt.io/schedulable", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Whether the VMI's pod may run on `node`. Pure.
pub fn fits(spec: &VirtualMachineInstanceSpec, node: &str) -> bool {
    fits_labels(spec, node, &node_labels(node))
}

/// Whether a pod of `spec`'s `nodeSelector` and `affinity` may run on `node` labelled `labels`.
/// Pure.
pub fn fits_labels(
    spec: &VirtualMachineInstanceSpec,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let selector: BTreeMap<String, String> = spec
        .rest
        .get("nodeSelector")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return false;
    }
    let affinity: Option<Affinity> = spec
        .rest
        .get("affinity")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let required = affinity
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution);
    // Terms are ORed; an empty list of terms matches no node.
    required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term(t, node, labels)))
}

/// One term: its expressions and fields all hold; a term with neither matches nothing.
fn term(t: &NodeSelectorTerm, node: &str, labels: &BTreeMap<String, String>) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let name = BTreeMap::from([("metadata.name".to_owned(), node.to_owned())]);
    exprs.iter().all(|r| requirement(r, labels)) && fields.iter().all(|r| requirement(r, &name))
}

fn requirement(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (value.and_then(|v| number(v)), values.first()) else {
                return false;
            };
            let Some(bound) = number(bound) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        // The API server refuses other operators; a term that names one matches nothing.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> VirtualMachineInstanceSpec {
        serde_json::from_value(v).unwrap()
    }

    fn affinity(terms: serde_json::Value) -> VirtualMachineInstanceSpec {
        spec(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}))
    }

    #[test]
    fn node_selector_and_required_affinity_filter_the_node() {
        assert!(fits(&spec(json!({})), "n"));
        assert!(fits(
            &spec(json!({"nodeSelector": {"kubernetes.io/os": "linux"}})),
            "n"
        ));
        assert!(!fits(&spec(json!({"nodeSelector": {"zone": "b"}})), "n"));
        // Preferred terms and tolerations never keep a pod off the node.
        assert!(fits(
            &spec(json!({"tolerations": [{"key": "x", "operator": "Exists"}],
                "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                    [{"weight": 1, "preference": {"matchExpressions":
                        [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}}})),
            "n"
        ));
        let e = |k: &str, op: &str, v: &[&str]| json!({"key": k, "operator": op, "values": v});
        assert!(fits(
            &affinity(json!([{"matchExpressions": [e("kubernetes.io/arch", "In", &["amd64"])]}])),
            "n"
        ));
        assert!(!fits(
            &affinity(json!([{"matchExpressions": [e("kubernetes.io/arch", "In", &["arm64"])]}])),
            "n"
        ));
        assert!(fits(
            &affinity(json!([{"matchExpressions": [e("zone", "NotIn", &["b"])]}])),
            "n"
        ));
        assert!(!fits(
            &affinity(json!([{"matchExpressions": [e("zone", "Exists", &[])]}])),
            "n"
        ));
        assert!(fits(
            &affinity(json!([{"matchExpressions": [e("zone", "DoesNotExist", &[])]}])),
            "n"
        ));
        // Terms are ORed, expressions in a term ANDed; fields match the node's name.
        assert!(fits(
            &affinity(json!([
            {"matchExpressions": [e("zone", "In", &["b"])]},
            {"matchFields": [e("metadata.name", "In", &["n"])]}])),
            "n"
        ));
        assert!(!fits(
            &affinity(json!([{"matchExpressions": [
            e("kubernetes.io/os", "In", &["linux"]), e("zone", "In", &["b"])]}])),
            "n"
        ));
        assert!(!fits(&affinity(json!([])), "n"), "no term matches no node");
        assert!(
            !fits(&affinity(json!([{}])), "n"),
            "an empty term matches no node"
        );
    }
}
