//! The credentials a migration names, read from their Secrets once per reconcile and handed to
//! whatever acts with them.

use ferry_crds::{Reason, secret as keys};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use secrecy::SecretString;

use super::checkpoint::Io;
use crate::Result;
use crate::ports::{SourceLogin, StagingLogin};
use crate::problem::Problem;

async fn secret_data(
    io: Io<'_>,
    name: &str,
    wanted: &[&str],
    what: &str,
) -> Result<Result<Vec<String>, Problem>> {
    let Some(s) = io.api::<Secret>().get_opt(name).await? else {
        return Ok(Err(Problem::transient(
            Reason::SecretNotFound,
            format!(
                "Secret {name} ({what}) not found in namespace {}; create it",
                io.vmm.namespace().unwrap_or_default()
            ),
        )));
    };
    let data = s.data.unwrap_or_default();
    let mut out = Vec::with_capacity(wanted.len());
    for k in wanted {
        match data
            .get(*k)
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_owned())
            .filter(|v| !v.is_empty())
        {
            Some(v) => out.push(v),
            None => {
                return Ok(Err(Problem::transient(
                    Reason::SecretNotFound,
                    format!("Secret {name} ({what}) has no key {k:?}; add it"),
                )));
            }
        }
    }
    Ok(Ok(out))
}

/// The vSphere login from `spec.source` and its Secret.
///
/// # Errors
/// Kubernetes API errors; a missing Secret or key is a [`Problem`].
pub async fn source_login(io: Io<'_>) -> Result<Result<SourceLogin, Problem>> {
    let ep = &io.vmm.spec.source.endpoint;
    let data = secret_data(
        io,
        &ep.credentials_secret_ref.name,
        &[keys::VSPHERE_USERNAME_KEY, keys::VSPHERE_PASSWORD_KEY],
        "vSphere credentials",
    )
    .await?;
    Ok(data.map(|mut v| {
        let password = v.pop().unwrap_or_default();
        let username = v.pop().unwrap_or_default();
        SourceLogin {
            url: ep.url.clone(),
            username,
            password: SecretString::from(password),
            thumbprint: ep.thumbprint.clone(),
            insecure: ep.insecure_skip_tls_verify,
        }
    }))
}

/// The staging login from `spec.staging` and its Secret.
///
/// # Errors
/// Kubernetes API errors; a missing Secret or key is a [`Problem`].
pub async fn staging_login(io: Io<'_>) -> Result<Result<StagingLogin, Problem>> {
    let st = &io.vmm.spec.staging;
    let data = secret_data(
        io,
        &st.credentials_secret_ref.name,
        &[keys::S3_ACCESS_KEY_ID_KEY, keys::S3_SECRET_ACCESS_KEY_KEY],
        "staging credentials",
    )
    .await?;
    Ok(data.map(|mut v| {
        let secret_access_key = v.pop().unwrap_or_default();
        let access_key_id = v.pop().unwrap_or_default();
        StagingLogin {
            endpoint: st.endpoint.clone(),
            bucket: st.bucket.clone(),
            region: st.region.clone(),
            access_key_id,
            secret_access_key: SecretString::from(secret_access_key),
        }
    }))
}
