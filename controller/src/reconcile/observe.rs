//! Reading the world for the current checkpoint, fresh in every reconcile (no cache), and the
//! Secrets behind the credentials.

use ferry_crds::{Phase, Reason, VirtualMachineMigration, names, secret as keys};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

use super::edges::{SourceLogin, StagingLogin};
use super::scope::{Problem, SourceFacts, VmState, VmiState, World};
use crate::Result;
use crate::children::cdi::{self, DataVolume};
use crate::children::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::children::{is_owned_by, job, secret};
use crate::context::Context;

/// The namespaced API of `K` in the migration's namespace.
pub fn api<K>(ctx: &Context, vmm: &VirtualMachineMigration) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    Api::namespaced(ctx.client.clone(), &vmm.namespace().unwrap_or_default())
}

async fn secret_data(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
    name: &str,
    wanted: &[&str],
    what: &str,
) -> Result<Result<Vec<String>, Problem>> {
    let Some(s) = api::<Secret>(ctx, vmm).get_opt(name).await? else {
        return Ok(Err(Problem::transient(
            Reason::SecretNotFound,
            format!(
                "Secret {name} ({what}) not found in namespace {}; create it",
                vmm.namespace().unwrap_or_default()
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
pub async fn source_login(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
) -> Result<Result<SourceLogin, Problem>> {
    let ep = &vmm.spec.source.endpoint;
    let data = secret_data(
        ctx,
        vmm,
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
            password,
            thumbprint: ep.thumbprint.clone(),
            insecure: ep.insecure_skip_tls_verify,
        }
    }))
}

/// The staging login from `spec.staging` and its Secret.
///
/// # Errors
/// Kubernetes API errors; a missing Secret or key is a [`Problem`].
pub async fn staging_login(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
) -> Result<Result<StagingLogin, Problem>> {
    let st = &vmm.spec.staging;
    let data = secret_data(
        ctx,
        vmm,
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
            secret_access_key,
        }
    }))
}

/// The target VirtualMachine, classified.
///
/// # Errors
/// Kubernetes API errors.
pub async fn vm_state(ctx: &Context, vmm: &VirtualMachineMigration) -> Result<VmState> {
    let vm = api::<VirtualMachine>(ctx, vmm)
        .get_opt(&names::vm_name(vmm))
        .await?;
    Ok(match vm {
        None => VmState::Absent,
        // A VM we released at the end of a successful attempt still carries our label.
        Some(vm)
            if is_owned_by(&vm.metadata, vmm)
                || vm.labels().get(names::MIGRATION_LABEL) == Some(&vmm.name_any())
                    && vm.owner_references().is_empty() =>
        {
            VmState::Ours {
                run_strategy: vm.spec.run_strategy.clone(),
            }
        }
        Some(_) => VmState::Foreign,
    })
}

/// The target VMI, classified (only one carrying our label counts).
///
/// # Errors
/// Kubernetes API errors.
pub async fn vmi_state(ctx: &Context, vmm: &VirtualMachineMigration) -> Result<VmiState> {
    let vmi = api::<VirtualMachineInstance>(ctx, vmm)
        .get_opt(&names::vm_name(vmm))
        .await?;
    Ok(match vmi {
        Some(v) if v.metadata.deletion_timestamp.is_none() => {
            let s = v.status.clone().unwrap_or_default();
            VmiState::Present {
                phase: s.phase.clone().unwrap_or_else(|| "Pending".to_owned()),
                agent_connected: s.condition_true("AgentConnected"),
                reason: s.reason.clone(),
            }
        }
        _ => VmiState::Absent,
    })
}

/// Keys of the staged objects, one per discovered disk.
pub fn staged_keys(vmm: &VirtualMachineMigration) -> Vec<String> {
    let n = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map_or(0, |s| s.disks.len());
    (0..n).map(|i| names::staging_key(vmm, i)).collect()
}

/// Reads what the current phase needs.
///
/// # Errors
/// Kubernetes API errors (problems of vSphere and S3 are part of the world, not errors).
pub async fn world(ctx: &Context, vmm: &VirtualMachineMigration) -> Result<World> {
    Ok(match vmm.phase() {
        Phase::Preparing => World::Preparing(preparing(ctx, vmm).await?),
        Phase::Converting => {
            let job = job::observe(
                api::<Job>(ctx, vmm)
                    .get_opt(&names::job_name(vmm))
                    .await?
                    .as_ref(),
            );
            let keys = staged_keys(vmm);
            let staged = match staging_login(ctx, vmm).await? {
                Err(p) => keys.iter().map(|_| Err(p.clone())).collect(),
                Ok(login) => {
                    let mut v = Vec::with_capacity(keys.len());
                    for k in &keys {
                        v.push(ctx.staging.head(&login, k).await);
                    }
                    v
                }
            };
            World::Converting { job, staged }
        }
        Phase::Importing => {
            let secret_present = api::<Secret>(ctx, vmm)
                .get_opt(&secret::s3_secret_name(vmm))
                .await?
                .is_some();
            let credentials = if secret_present {
                Ok(())
            } else {
                staging_login(ctx, vmm).await?.map(|_| ())
            };
            let dv_api = api::<DataVolume>(ctx, vmm);
            let mut dvs = vec![];
            for i in 0..staged_keys(vmm).len() {
                dvs.push(cdi::observe(
                    dv_api
                        .get_opt(&names::datavolume_name(vmm, i))
                        .await?
                        .as_ref(),
                ));
            }
            World::Importing {
                credentials,
                secret_present,
                dvs,
            }
        }
        Phase::CreatingVM => World::CreatingVM(vm_state(ctx, vmm).await?),
        Phase::Starting => World::Starting(vm_state(ctx, vmm).await?, vmi_state(ctx, vmm).await?),
        Phase::Validating => {
            let vm = vm_state(ctx, vmm).await?;
            let vmi = vmi_state(ctx, vmm).await?;
            let leftovers = leftovers(ctx, vmm).await?;
            World::Validating { vm, vmi, leftovers }
        }
        _ => World::Nothing,
    })
}

async fn preparing(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
) -> Result<Result<SourceFacts, Problem>> {
    let login = match source_login(ctx, vmm).await? {
        Ok(l) => l,
        Err(p) => return Ok(Err(p)),
    };
    let lookup = match vmm.spec.source.vm.lookup() {
        Ok(l) => l,
        Err(e) => return Ok(Err(Problem::permanent(Reason::VMNotFound, e.to_string()))),
    };
    let discovered = match ctx.source.discover(&login, lookup).await {
        Ok(d) => d,
        Err(p) => return Ok(Err(p)),
    };
    let bucket = match staging_login(ctx, vmm).await? {
        Ok(s) => ctx.staging.check_bucket(&s).await,
        Err(p) => Err(p),
    };
    // The target name is derived from the discovered name when the spec gives none.
    let mut probe = vmm.clone();
    probe.status.get_or_insert_with(Default::default).source = Some(discovered.source.clone());
    let target_taken = vm_state(ctx, &probe).await? == VmState::Foreign;
    Ok(Ok(SourceFacts {
        vm: discovered.source,
        layout_problems: discovered.layout_problems,
        bucket,
        target_taken,
    }))
}

/// Whether staging objects, the CDI Secret, or owner references on the VM and DataVolumes
/// remain (what [`super::decision::Action::Finish`] removes).
///
/// # Errors
/// Kubernetes API errors; S3 problems are returned as the inner `Err`.
pub async fn leftovers(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
) -> Result<Result<bool, Problem>> {
    if api::<Secret>(ctx, vmm)
        .get_opt(&secret::s3_secret_name(vmm))
        .await?
        .is_some()
    {
        return Ok(Ok(true));
    }
    if let Some(vm) = api::<VirtualMachine>(ctx, vmm)
        .get_opt(&names::vm_name(vmm))
        .await?
        && is_owned_by(&vm.metadata, vmm)
    {
        return Ok(Ok(true));
    }
    let dv_api = api::<DataVolume>(ctx, vmm);
    let keys = staged_keys(vmm);
    for i in 0..keys.len() {
        if let Some(dv) = dv_api.get_opt(&names::datavolume_name(vmm, i)).await?
            && is_owned_by(&dv.metadata, vmm)
        {
            return Ok(Ok(true));
        }
    }
    let login = match staging_login(ctx, vmm).await? {
        Ok(l) => l,
        Err(p) => return Ok(Err(p)),
    };
    for k in &keys {
        match ctx.staging.head(&login, k).await {
            Ok(Some(_)) => return Ok(Ok(true)),
            Ok(None) => {}
            Err(p) if p.reason == Reason::BucketNotFound => {}
            Err(p) => return Ok(Err(p)),
        }
    }
    Ok(Ok(false))
}
