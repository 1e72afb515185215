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
    Ok(match io.api::<Secret>().get_opt(name).await? {
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
