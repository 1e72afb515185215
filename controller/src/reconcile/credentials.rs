//! The credentials a migration names, read from their Secrets once per attempt and handed to
//! whatever acts with them, bound by [`crate::binding`] to what their owner allowed.

use ferry_crds::{Reason, StagingSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::io::Io;
use crate::Result;
use crate::binding::{SecretData, bind_source, bind_staging};
use crate::ports::{SourceLogin, StagingLogin};
use crate::problem::Problem;

/// Reads the Secret `name` of the migration's namespace, once per attempt (see
/// [`crate::context::Context::remember_secret`]); by name only, never a list or a watch.
async fn read(io: Io<'_>, name: &str, what: &str) -> Result<Result<SecretData, Problem>> {
    let uid = io.vmm.uid().unwrap_or_default();
    if let Some(s) = io.ctx.remembered_secret(&uid, name) {
        return Ok(Ok(SecretData::of(&s)));
    }
    let found = match io.api::<Secret>().get_opt(name).await {
        // Secret reads are the namespace's to allow (docs/operations-and-security.md, "Install"): without
        // the RoleBinding, say so, and go on by itself once it is made. Its admin's act is what
        // it waits for, as a quota's raise: no budget of retries runs out meanwhile.
        Err(kube::Error::Api(s)) if s.code == 403 => {
            let ns = io.vmm.namespace().unwrap_or_default();
            return Ok(Err(Problem::transient(
                Reason::CredentialsNotAllowed,
                say::not_readable(name, what, &ns),
            )
            .tried(crate::problem::Tries::Unbounded)));
        }
        other => other?,
    };
    Ok(match found {
        Some(s) => {
            io.ctx.remember_secret(&uid, &s);
            Ok(SecretData::of(&s))
        }
        None => Err(Problem::transient(
            Reason::SecretNotFound,
            format!(
                "Secret {name} ({what}) not found in namespace {}; create it",
                io.vmm.namespace().unwrap_or_default()
            ),
        )),
    })
}

/// The vSphere login from `spec.source` and its Secret, bound by [`bind_source`].
///
/// # Errors
/// Kubernetes API errors; a missing, unlabelled or mismatched Secret is a [`Problem`].
pub async fn source_login(io: Io<'_>) -> Result<Result<SourceLogin, Problem>> {
    let ep = &io.vmm.spec.source.endpoint;
    Ok(
        read(io, &ep.credentials_secret_ref.name, "vSphere credentials")
            .await?
            .and_then(|s| bind_source(ep, &s)),
    )
}

/// The staging login from `spec.staging` and its Secret, bound by [`bind_staging`].
///
/// # Errors
/// Kubernetes API errors; a missing, unlabelled or mismatched Secret is a [`Problem`].
pub async fn staging_login(io: Io<'_>) -> Result<Result<StagingLogin, Problem>> {
    staging_login_at(io, &io.vmm.spec.staging).await
}

/// The staging login of `st` (a migration's recorded staging, for cleanup) and its Secret.
///
/// # Errors
/// As [`staging_login`].
pub async fn staging_login_at(
    io: Io<'_>,
    st: &StagingSpec,
) -> Result<Result<StagingLogin, Problem>> {
    Ok(
        read(io, &st.credentials_secret_ref.name, "staging credentials")
            .await?
            .and_then(|s| bind_staging(st, &s)),
    )
}

mod say {
    /// The namespace has not allowed ferry to read its Secrets.
    pub fn not_readable(name: &str, what: &str, ns: &str) -> String {
        format!(
            "ferry-controller may not read Secret {name} ({what}): namespace {ns} has not allowed it to read its Secrets; its admin allows that with a RoleBinding of the ClusterRole ferry-credentials-reader to ferry's ServiceAccount: kubectl -n {ns} create rolebinding ferry-credentials-reader --clusterrole=ferry-credentials-reader --serviceaccount={}:ferry-controller",
            crate::children::proof::CONTROLLER_NAMESPACE
        )
    }
}
