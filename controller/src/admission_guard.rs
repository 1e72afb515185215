//! Whether ferry's admission policies are in force — and, while they are not, what the
//! controller holds back.
//!
//! RBAC cannot say which fields of a migration an operator may change, nor which shapes of
//! Jobs, DataVolumes and VirtualMachines the controller's own account may make: the admission
//! policies of `deploy/controller` do. Where they are missing (an older cluster, an apply that
//! refused the policy kinds, a binding deleted), those rules are open. So the controller looks
//! at them when it starts and every [`RECHECK`], read-only (`get` on the policies, `list` on
//! the bindings), and while they are not all in force it makes no wave's migration, releases and
//! retries none, and starts or retries no migration — saying why in the wave's `Degraded`
//! condition, the migration's `Ready` condition, Events, `/readyz` and the metric
//! `ferry_controller_admission_policies_in_force`. A cancel or a delete is always carried out:
//! they only stop work. Labs without the policies run with `--admission-policies not-required`.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::{Api, Client};

/// The policies ferry's rules rest on (`deploy/controller/admission-*.yaml`).
pub const POLICIES: [&str; 4] = [
    "ferry-authoring",
    "ferry-controller-blast-radius",
    "ferry-controller-kubevirt",
    "ferry-controller-deletes",
];

/// `--admission-policies`: whether the controller requires its policies in force.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Requirement {
    /// Make, start and retry no migration while they are not (the default; what deploy/ runs).
    #[default]
    Required,
    /// Never look (a lab or a test cluster without `deploy/controller`'s policies).
    NotRequired,
}

/// How often the policies are looked at again.
pub const RECHECK: Duration = Duration::from_secs(30);

/// The label every namespace carries with its own name (Kubernetes 1.22+): what a binding
/// narrowed to one namespace selects it by.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What a look at the policies found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every policy exists, fails closed, and a binding denies by it over the controller's scope.
    InForce,
    /// What is missing, in words.
    Missing(Vec<String>),
    /// They could not be read (and so are not known to be in force).
    Unreadable(String),
}

impl Verdict {
    /// Why they are not in force; `None` when they are.
    pub fn why_not(&self) -> Option<String> {
        match self {
            Verdict::InForce => None,
            Verdict::Missing(what) => Some(what.join("; ")),
            Verdict::Unreadable(why) => Some(why.clone()),
        }
    }
}

/// Judges the policies and bindings found against [`POLICIES`], for a controller watching
/// `scope` (one namespace) or every namespace (`None`). A binding counts when it names the
/// policy, denies (`validationActions` has `Deny`), and covers the scope: no object selector,
/// no excluded resources, and a namespace selector that is empty (every namespace) or, for a
/// controller of one namespace, selects exactly that one by its name label. Pure.
pub fn judge(
    policies: &[ValidatingAdmissionPolicy],
    bindings: &[ValidatingAdmissionPolicyBinding],
    scope: Option<&str>,
) -> Verdict {
    let mut missing = vec![];
    for name in POLICIES {
        let policy = policies
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name));
        let Some(policy) = policy else {
            missing.push(format!("ValidatingAdmissionPolicy {name} is missing"));
            continue;
        };
        let failure = policy
            .spec
            .as_ref()
            .and_then(|s| s.failure_policy.as_deref())
            .unwrap_or("Fail");
        if failure != "Fail" {
            missing.push(format!(
                "ValidatingAdmissionPolicy {name} has failurePolicy {failure} (it must be Fail)"
            ));
        }
        if !bindings.iter().any(|b| binds(b, name, scope)) {
            let over = scope.map_or("every namespace".to_owned(), |ns| format!("namespace {ns}"));
            missing.push(format!(
                "no ValidatingAdmissionPolicyBinding denies by {name} over {over}"
            ));
        }
    }
    if missing.is_empty() {
        Verdict::InForce
    } else {
        Verdict::Missing(missing)
    }
}

/// Whether `b` binds `policy` with `Deny` over `scope`. Pure.
fn binds(b: &ValidatingAdmissionPolicyBinding, policy: &str, scope: Option<&str>) -> bool {
    let spec = &b.spec;
    if spec.policy_name != policy || !spec.validation_actions.iter().any(|a| a == "Deny") {
        return false;
    }
    let Some(m) = spec.match_resources.as_ref() else {
        return true;
    };
    let empty = |s: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>| {
        s.as_ref().is_none_or(|s| {
            s.match_labels.as_ref().is_none_or(|l| l.is_empty())
                && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
        })
    };
    if !empty(&m.object_selector)
        || m.exclude_resource_rules
            .as_ref()
            .is_some_and(|r| !r.is_empty())
    {
        return false;
    }
    if empty(&m.namespace_selector) {
        return true;
    }
    let Some(ns) = scope else {
        return false;
    };
    m.namespace_selector.as_ref().is_some_and(|s| {
        s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
            && s.match_labels.as_ref().is_some_and(|l| {
                l.len() == 1 && l.get(NAMESPACE_NAME_LABEL).map(String::as_str) == Some(ns)
            })
    })
}

/// Reads the policies (by name) and the bindings, and judges them.
pub async fn look(client: &Client, scope: Option<&str>) -> Verdict {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let mut found = vec![];
    for name in POLICIES {
        match policies.get_opt(name).await {
            Ok(Some(p)) => found.push(p),
            Ok(None) => {}
            Err(e) => {
                return Verdict::Unreadable(format!(
                    "cannot read ValidatingAdmissionPolicy {name}: {e}"
                ));
            }
        }
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    match bindings.list(&Default::default()).await {
        Ok(list) => judge(&found, &list.items, scope),
        Err(e) => Verdict::Unreadable(format!(
            "cannot list ValidatingAdmissionPolicyBindings: {e}"
        )),
    }
}

/// What the controller knows of the policies, shared by its reconciles.
#[derive(Debug)]
pub struct Guard {
    required: bool,
    verdict: Mutex<Option<Verdict>>,
}

impl Guard {
    /// Policies required: nothing is held back only once a look found them in force.
    pub fn required() -> Self {
        Self {
            required: true,
            verdict: Mutex::new(None),
        }
    }

    /// Policies not required (a lab without them): nothing is ever held back.
    pub fn not_required() -> Self {
        Self {
            required: false,
            verdict: Mutex::new(None),
        }
    }

    /// Whether the policies are looked at.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// Why work is held back now; `None` when it is not.
    pub fn why_not(&self) -> Option<String> {
        if !self.required {
            return None;
        }
        match &*self
            .verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            None => Some("ferry's admission policies have not been looked at yet".to_owned()),
            Some(v) => v.why_not(),
        }
    }

    /// Records a look's verdict; whether it changed what is held back.
    pub fn set(&self, v: Verdict) -> bool {
        let mut held = self
            .verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = held.as_ref().map(Verdict::why_not) != Some(v.why_not());
        *held = Some(v);
        changed
    }
}

/// The words an operator reads when work is held back: what is missing, and what ferry does.
pub fn held_back(why: &str) -> String {
    format!(
        "ferry's admission policies are not in force ({why}); ferry makes, starts and retries no migration until they are: apply deploy/controller"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::admissionregistration::v1::{
        MatchResources, ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kube::api::ObjectMeta;

    fn policy(name: &str, failure: Option<&str>) -> ValidatingAdmissionPolicy {
        ValidatingAdmissionPolicy {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(ValidatingAdmissionPolicySpec {
                failure_policy: failure.map(str::to_owned),
                ..ValidatingAdmissionPolicySpec::default()
            }),
            status: None,
        }
    }

    fn binding(
        policy: &str,
        actions: &[&str],
        ns: Option<LabelSelector>,
    ) -> ValidatingAdmissionPolicyBinding {
        ValidatingAdmissionPolicyBinding {
            metadata: ObjectMeta {
                name: Some(format!("{policy}-binding")),
                ..ObjectMeta::default()
            },
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: policy.into(),
                validation_actions: actions.iter().map(|a| (*a).to_owned()).collect(),
                match_resources: Some(MatchResources {
                    namespace_selector: ns,
                    ..MatchResources::default()
                }),
                ..ValidatingAdmissionPolicyBindingSpec::default()
            },
        }
    }

    fn shipped() -> (
        Vec<ValidatingAdmissionPolicy>,
        Vec<ValidatingAdmissionPolicyBinding>,
    ) {
        (
            POLICIES.iter().map(|p| policy(p, Some("Fail"))).collect(),
            POLICIES
                .iter()
                .map(|p| binding(p, &["Deny"], Some(LabelSelector::default())))
                .collect(),
        )
    }

    fn only(ns: &str) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some([(NAMESPACE_NAME_LABEL.to_owned(), ns.to_owned())].into()),
            match_expressions: None,
        })
    }

    #[test]
    fn the_shipped_policies_are_in_force_everywhere() {
        let (p, b) = shipped();
        assert_eq!(judge(&p, &b, None), Verdict::InForce);
        assert_eq!(judge(&p, &b, Some("team-a")), Verdict::InForce);
    }

    #[test]
    fn a_missing_policy_or_binding_a_warning_binding_or_ignore_is_not_in_force() {
        let (p, b) = shipped();
        let without_authoring: Vec<_> = b
            .iter()
            .filter(|b| b.spec.policy_name != "ferry-authoring")
            .cloned()
            .collect();
        let why = judge(&p, &without_authoring, None).why_not().unwrap();
        assert!(
            why.contains(
                "no ValidatingAdmissionPolicyBinding denies by ferry-authoring over every namespace"
            ),
            "{why}"
        );
        let mut warn_only = b.clone();
        warn_only[1] = binding(
            POLICIES[1],
            &["Warn", "Audit"],
            Some(LabelSelector::default()),
        );
        assert!(
            judge(&p, &warn_only, None)
                .why_not()
                .unwrap()
                .contains(POLICIES[1])
        );
        let mut ignoring = p.clone();
        ignoring[2] = policy(POLICIES[2], Some("Ignore"));
        assert!(
            judge(&ignoring, &b, None)
                .why_not()
                .unwrap()
                .contains("failurePolicy Ignore")
        );
        let gone: Vec<_> = p[1..].to_vec();
        assert!(
            judge(&gone, &b, None)
                .why_not()
                .unwrap()
                .contains("ValidatingAdmissionPolicy ferry-authoring is missing")
        );
    }

    #[test]
    fn a_binding_narrowed_to_one_namespace_covers_only_a_controller_of_that_namespace() {
        let (p, _) = shipped();
        let b: Vec<_> = POLICIES
            .iter()
            .map(|n| binding(n, &["Deny"], only("team-a")))
            .collect();
        assert_eq!(judge(&p, &b, Some("team-a")), Verdict::InForce);
        assert!(judge(&p, &b, Some("team-b")).why_not().is_some());
        assert!(judge(&p, &b, None).why_not().is_some());
    }

    #[test]
    fn the_guard_holds_back_until_a_look_finds_them_and_not_at_all_when_not_required() {
        let g = Guard::required();
        assert!(g.why_not().unwrap().contains("not been looked at"));
        assert!(g.set(Verdict::Missing(vec!["x".into()])));
        assert!(!g.set(Verdict::Missing(vec!["x".into()])), "no change");
        assert_eq!(g.why_not().as_deref(), Some("x"));
        assert!(g.set(Verdict::InForce));
        assert_eq!(g.why_not(), None);
        let lab = Guard::not_required();
        assert_eq!(lab.why_not(), None);
    }
}
