//! What the user may do in a namespace, asked of the API server: one `SelfSubjectAccessReview`
//! per [`Check`], all at once. The review is made by the cockpit's client, so with `--as` (or a
//! kubeconfig's `as:`) it carries the same Impersonate-User and Impersonate-Group headers as
//! every other request and answers for the impersonated user. Every authenticated user may
//! create these reviews (`system:basic-user`).

use ::kube::{Api, Client, api::PostParams};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};

use crate::state::{Action, Check, ClusterId};

/// The review of `check` in `namespace`.
pub fn review_of(check: Check, namespace: &str) -> SelfSubjectAccessReview {
    SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some(check.verb().to_owned()),
                group: Some(check.group().to_owned()),
                resource: Some(check.resource().to_owned()),
                subresource: check.subresource().map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    }
}

/// Whether the API server allows `check` in `namespace` to the client's user, or why the
/// review failed (then the state treats it as unknown, and the API server decides).
async fn ask(
    api: &Api<SelfSubjectAccessReview>,
    namespace: &str,
    check: Check,
) -> Result<bool, String> {
    let answer = api
        .create(&PostParams::default(), &review_of(check, namespace))
        .await
        .map_err(|e| super::one_line(&e))?;
    // `allowed` false is a refusal whether an authorizer denied it or none allowed it.
    answer
        .status
        .map(|s| s.allowed)
        .ok_or_else(|| "the review came back without a status".to_owned())
}

/// Every [`Check`] in `namespace`, as the action that carries the answers to the state.
pub async fn review(
    client: Client,
    cluster: ClusterId,
    namespace: String,
    generation: u64,
) -> Action {
    let api: Api<SelfSubjectAccessReview> = Api::all(client);
    let answers = futures::future::join_all(Check::ALL.map(|c| {
        let api = &api;
        let ns = namespace.as_str();
        async move { (c, ask(api, ns, c).await) }
    }))
    .await;
    for (c, a) in &answers {
        match a {
            Ok(allowed) => tracing::debug!(%namespace, check = ?c, allowed, "access review"),
            Err(e) => {
                tracing::warn!(%namespace, check = ?c, error = %e, "access review failed; the API server decides")
            }
        }
    }
    Action::AccessReviewed {
        cluster,
        namespace,
        generation,
        answers,
    }
}
