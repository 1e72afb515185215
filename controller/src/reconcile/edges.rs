//! The two outside systems a reconcile talks to besides Kubernetes, behind small traits so that
//! decisions and tests do not need them: the vSphere source and the S3 staging store. Errors
//! come back already classified as a [`Problem`] (reason, message, transient or not).

use ferry_crds::{
    DiscoveredDisk, DiscoveredNic, DiscoveredSource, Firmware, PowerState, Reason, VmLookup,
};
use futures::future::BoxFuture;

use super::scope::{Problem, StagedObject};
use crate::{staging, vsphere};

/// How to log in to vSphere, with the Secret's credentials resolved.
#[derive(Clone)]
pub struct SourceLogin {
    /// SDK URL.
    pub url: String,
    /// User.
    pub username: String,
    /// Password.
    pub password: String,
    /// Pinned thumbprint.
    pub thumbprint: Option<String>,
    /// Skip TLS verification.
    pub insecure: bool,
}

impl std::fmt::Debug for SourceLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceLogin")
            .field("url", &self.url)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// What the source said about a VM.
#[derive(Clone, Debug, PartialEq)]
pub struct Discovered {
    /// Inventory, with the current power state.
    pub source: DiscoveredSource,
    /// Why its disks cannot be migrated, if they cannot.
    pub layout_problems: Vec<String>,
}

/// The vSphere source.
pub trait SourceApi: Send + Sync + 'static {
    /// Logs in, finds the VM, reads its inventory and validates its disk layout.
    fn discover<'a>(
        &'a self,
        login: &'a SourceLogin,
        vm: VmLookup<'a>,
    ) -> BoxFuture<'a, Result<Discovered, Problem>>;
    /// Powers the VM off; idempotent.
    fn power_off<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>>;
    /// Powers the VM on unless it runs; idempotent.
    fn power_on<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>>;
}

/// Where staging is, with the Secret's credentials resolved.
#[derive(Clone)]
pub struct StagingLogin {
    /// S3 endpoint URL.
    pub endpoint: String,
    /// Bucket.
    pub bucket: String,
    /// Region.
    pub region: String,
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
}

impl std::fmt::Debug for StagingLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingLogin")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

/// The S3 staging store.
pub trait StagingApi: Send + Sync + 'static {
    /// Checks that the bucket exists and the credentials are accepted.
    fn check_bucket<'a>(&'a self, login: &'a StagingLogin) -> BoxFuture<'a, Result<(), Problem>>;
    /// Size and recorded SHA-256 of an object; `None` when absent.
    fn head<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<StagedObject>, Problem>>;
    /// Deletes an object; absent is fine.
    fn delete<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>>;
}

// ---------------------------------------------------------------------------------------------
// vSphere through `crate::vsphere` (vim_rs).

/// [`SourceApi`] on vim_rs, one session per call (Preparing runs a handful of times per
/// migration; a long-lived session would need keep-alive and re-login handling for little gain).
#[derive(Debug, Default)]
pub struct VsphereSource;

fn problem_of(e: &vsphere::Error) -> Problem {
    use vsphere::Error as E;
    let msg = e.to_string();
    match e {
        E::Unreachable { .. } => Problem::transient(
            Reason::EndpointUnreachable,
            format!("{msg}; check spec.source.url and the network"),
        ),
        E::ThumbprintMismatch { .. } | E::TlsUntrusted { .. } => {
            Problem::permanent(Reason::ThumbprintMismatch, msg)
        }
        E::BadCredentials { .. } => Problem::permanent(
            Reason::LoginFailed,
            format!(
                "{msg}; fix the username/password in the spec.source.credentialsSecretRef Secret, then raise spec.retry"
            ),
        ),
        E::NotFound(_) => Problem::permanent(Reason::VMNotFound, msg),
        E::Ambiguous { .. } => Problem::permanent(Reason::VMAmbiguous, msg),
        E::Invalid(_) => Problem::permanent(
            Reason::EndpointUnreachable,
            format!("{msg}; check spec.source.url"),
        ),
        _ if e.is_transient() => Problem::transient(Reason::TransientError, msg),
        _ => Problem::permanent(Reason::TransientError, msg),
    }
}

fn endpoint(login: &SourceLogin) -> Result<vsphere::Endpoint, Problem> {
    let tls = if let Some(t) = &login.thumbprint {
        let t = vsphere::Thumbprint::parse(t).map_err(|e| {
            Problem::permanent(
                Reason::ThumbprintMismatch,
                format!("spec.source.thumbprint: {e}"),
            )
        })?;
        vsphere::TlsPolicy::Thumbprint(t)
    } else if login.insecure {
        vsphere::TlsPolicy::Insecure
    } else {
        vsphere::TlsPolicy::SystemRoots
    };
    Ok(vsphere::Endpoint {
        url: login.url.clone(),
        username: login.username.clone(),
        password: login.password.clone(),
        tls,
    })
}

fn to_discovered(vm: &vsphere::VmInfo) -> DiscoveredSource {
    DiscoveredSource {
        name: Some(vm.name.clone()),
        moref: Some(vm.moref.clone()),
        uuid: Some(vm.uuid.clone()).filter(|s| !s.is_empty()),
        instance_uuid: Some(vm.instance_uuid.clone()).filter(|s| !s.is_empty()),
        power_state: Some(match vm.power_state {
            vsphere::PowerState::PoweredOn => PowerState::PoweredOn,
            vsphere::PowerState::PoweredOff => PowerState::PoweredOff,
            vsphere::PowerState::Suspended => PowerState::Suspended,
        }),
        guest_id: Some(vm.guest_id.clone()).filter(|s| !s.is_empty()),
        firmware: Some(match vm.firmware {
            vsphere::Firmware::Bios => Firmware::Bios,
            vsphere::Firmware::Efi => Firmware::Efi,
        }),
        num_cpu: i32::try_from(vm.num_cpu).ok(),
        memory_mib: i64::try_from(vm.memory_mib).ok(),
        disks: vm
            .disks
            .iter()
            .map(|d| DiscoveredDisk {
                key: d.key,
                label: d.label.clone(),
                datastore_path: d.datastore_path.clone(),
                capacity_bytes: i64::try_from(d.capacity_bytes).unwrap_or(i64::MAX),
            })
            .collect(),
        nics: vm
            .nics
            .iter()
            .map(|n| DiscoveredNic {
                mac: n.mac.clone(),
                network: n.network.clone(),
            })
            .collect(),
    }
}

async fn session(login: &SourceLogin) -> Result<vsphere::Session, Problem> {
    let ep = endpoint(login)?;
    vsphere::Session::connect(&ep)
        .await
        .map_err(|e| problem_of(&e))
}

impl SourceApi for VsphereSource {
    fn discover<'a>(
        &'a self,
        login: &'a SourceLogin,
        vm: VmLookup<'a>,
    ) -> BoxFuture<'a, Result<Discovered, Problem>> {
        Box::pin(async move {
            let s = session(login).await?;
            let selector = match vm {
                VmLookup::Name(n) => vsphere::VmSelector::Name(n.to_owned()),
                VmLookup::Id(i) => vsphere::VmSelector::Id(i.to_owned()),
                VmLookup::Uuid(u) => vsphere::VmSelector::Uuid(u.to_owned()),
            };
            let found = s.find_vm(&selector).await;
            let _ = s.logout().await;
            let info = match found {
                Ok(Some(info)) => info,
                Ok(None) | Err(vsphere::Error::NotFound(_)) => {
                    return Err(Problem::permanent(
                        Reason::VMNotFound,
                        format!("no VM with {selector} on {}; check spec.source", login.url),
                    ));
                }
                Err(e) => return Err(problem_of(&e)),
            };
            let layout_problems = match vsphere::validate_layout(&info) {
                Ok(()) => vec![],
                Err(p) => p.iter().map(ToString::to_string).collect(),
            };
            Ok(Discovered {
                source: to_discovered(&info),
                layout_problems,
            })
        })
    }

    fn power_off<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async move {
            let s = session(login).await?;
            let r = s.power_off(moref).await;
            let _ = s.logout().await;
            r.map_err(|e| {
                let p = problem_of(&e);
                if p.transient {
                    p
                } else {
                    Problem::permanent(Reason::PowerOffFailed, format!("powering {moref} off: {e}"))
                }
            })
        })
    }

    fn power_on<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async move {
            let s = session(login).await?;
            let r = s.power_on(moref).await;
            let _ = s.logout().await;
            r.map_err(|e| problem_of(&e))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// S3 through `crate::staging`.

/// [`StagingApi`] on [`crate::staging`] (object_store, path-style, SigV4), with full keys (the
/// migration's keys already carry `spec.staging.prefix`).
#[derive(Debug, Default)]
pub struct S3Staging;

fn store(login: &StagingLogin) -> Result<staging::Staging, Problem> {
    staging::Staging::new(staging::StagingConfig {
        endpoint: login.endpoint.clone(),
        bucket: login.bucket.clone(),
        region: login.region.clone(),
        access_key: login.access_key_id.clone(),
        secret_key: login.secret_access_key.clone(),
        prefix: String::new(),
    })
    .map_err(|e| Problem::permanent(Reason::StagingUnavailable, format!("spec.staging: {e}")))
}

fn s3_problem(e: &staging::Error) -> Problem {
    use staging::Error as E;
    match e {
        E::NoSuchBucket { .. } => Problem::permanent(Reason::BucketNotFound, e.to_string()),
        E::AccessDenied { .. } => Problem::permanent(
            Reason::StagingUnavailable,
            format!("{e}; fix the spec.staging.credentialsSecretRef Secret"),
        ),
        _ if e.is_transient() => Problem::transient(Reason::StagingUnavailable, e.to_string()),
        _ => Problem::permanent(Reason::StagingUnavailable, e.to_string()),
    }
}

impl StagingApi for S3Staging {
    fn check_bucket<'a>(&'a self, login: &'a StagingLogin) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async move {
            match store(login)?.bucket_exists().await {
                Ok(true) => Ok(()),
                Ok(false) => Err(s3_problem(&staging::Error::NoSuchBucket {
                    bucket: login.bucket.clone(),
                    endpoint: login.endpoint.clone(),
                })),
                Err(e) => Err(s3_problem(&e)),
            }
        })
    }

    fn head<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<StagedObject>, Problem>> {
        Box::pin(async move {
            match store(login)?.head(key).await {
                Ok(Some(o)) => Ok(Some(StagedObject {
                    size: i64::try_from(o.size).unwrap_or(i64::MAX),
                    sha256: o
                        .sha256
                        .map(|s| s.trim().to_ascii_lowercase())
                        .filter(|s| s.len() == 64),
                })),
                Ok(None) => Ok(None),
                Err(e) => Err(s3_problem(&e)),
            }
        })
    }

    fn delete<'a>(
        &'a self,
        login: &'a StagingLogin,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(async move {
            match store(login)?.delete(key).await {
                Ok(())
                | Err(staging::Error::NotFound { .. } | staging::Error::NoSuchBucket { .. }) => {
                    Ok(())
                }
                Err(e) => Err(s3_problem(&e)),
            }
        })
    }
}
