//! What a namespace's ResourceQuotas have left, as preflight weighs the disks' claims against
//! them (read from the controller's watch of quotas, or listed). Pure.

use std::collections::BTreeMap;

/// What one ResourceQuota has left of each resource it limits: `status.hard − status.used`
/// (bytes for storage, a count for claims), as its quota controller last computed them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuotaLeft {
    /// The ResourceQuota's name.
    pub name: String,
    /// Resource name (e.g. `requests.storage`) → what is left of it.
    pub left: BTreeMap<String, u64>,
}

impl QuotaLeft {
    /// From a ResourceQuota: its status where the quota controller computed one, else its
    /// spec with nothing used yet. A quantity that does not parse limits nothing here.
    pub fn of(q: &k8s_openapi::api::core::v1::ResourceQuota) -> Self {
        use ferry_crds::quantity::parse_bytes;
        let status = q.status.as_ref();
        let hard = status
            .and_then(|s| s.hard.as_ref())
            .or_else(|| q.spec.as_ref().and_then(|s| s.hard.as_ref()));
        let used = status.and_then(|s| s.used.as_ref());
        let left = hard
            .into_iter()
            .flatten()
            .filter_map(|(resource, h)| {
                let used = used
                    .and_then(|u| u.get(resource))
                    .map_or(Some(0), |u| parse_bytes(&u.0));
                Some((resource.clone(), parse_bytes(&h.0)?.saturating_sub(used?)))
            })
            .collect();
        Self {
            name: q.metadata.name.clone().unwrap_or_default(),
            left,
        }
    }
}
