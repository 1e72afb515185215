//! The vSphere source: the trait decisions and tests see, and its implementation on
//! `ferry_vsphere` (vim_rs). Errors come back classified as a [`Problem`].

use ferry_crds::{
    DiscoveredDisk, DiscoveredNic, DiscoveredSource, Firmware, PowerState, Reason, SourceDiskState,
    SourceState, ToolsState, VmLookup,
};
use std::sync::Arc;

use futures::future::BoxFuture;
use secrecy::{ExposeSecret, SecretString};

use crate::problem::Problem;
use ferry_vsphere as vsphere;

/// How the vSphere endpoint's certificate is trusted, as its credentials Secret says.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SourceTrust {
    /// The certificate with this thumbprint.
    Thumbprint(String),
    /// Certificates these CAs (PEM) signed, for the URL's host.
    CaBundle(String),
    /// Any certificate (the Secret's owner allowed it).
    Insecure,
    /// The platform trust store, for the URL's host.
    SystemRoots,
}

/// How to log in to vSphere: the endpoint and trust its credentials Secret is bound to, and the
/// credentials.
#[derive(Clone, Debug)]
pub struct SourceLogin {
    /// The Secret it comes from (for messages).
    pub secret: String,
    /// That Secret's uid: a logged-in session serves the logins of one Secret only.
    pub secret_uid: String,
    /// SDK URL.
    pub url: String,
    /// User.
    pub username: String,
    /// Password.
    pub password: SecretString,
    /// How the endpoint is trusted.
    pub trust: SourceTrust,
}

/// What the source said about a VM.
#[derive(Clone, Debug, PartialEq)]
pub struct Discovered {
    /// Inventory, with the current power state.
    pub source: DiscoveredSource,
    /// Why its disks cannot be migrated, if they cannot.
    pub layout_problems: Vec<vsphere::LayoutProblem>,
    /// How many virtual disks vSphere counts (`summary.config.numVirtualDisks`), when it says.
    pub disks_reported: Option<u32>,
    /// What of vSphere's answer ferry could not read, each named (devices by key, label, type,
    /// backing); empty when it read all of it.
    pub unread: Vec<String>,
    /// What defines a copy of it as found (read after vCenter's clock), for the record a cold
    /// migration keeps of its source as it powered it off; `None` from a source that cannot
    /// tell.
    pub state: Option<SourceState>,
}

/// A VM's marks now: what defines a copy of it ([`SourceState`], its `recordedIn` and attempt
/// left for the recorder to set), and its power state.
#[derive(Clone, Debug, PartialEq)]
pub struct Marks {
    /// Its disks, their change ids and count, its configuration's version, and vCenter's clock
    /// when read.
    pub state: SourceState,
    /// Its power state.
    pub power: PowerState,
}

/// The vSphere source.
pub trait SourceApi: Send + Sync + 'static {
    /// Logs in, finds the VM, reads its inventory and validates its disk layout.
    fn discover<'a>(
        &'a self,
        login: &'a SourceLogin,
        vm: VmLookup<'a>,
    ) -> BoxFuture<'a, Result<Discovered, Problem>>;
    /// The VM's power state now, and whether VMware Tools run in it.
    fn power<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(PowerState, ToolsState), Problem>>;
    /// The VM's marks now (see [`Marks`]).
    fn marks<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<Marks, Problem>> {
        let _ = (login, moref);
        Box::pin(async { Err(no_marks()) })
    }
    /// When the VM was powered on from `since` on (vCenter's clock, as [`SourceState::read_at`]),
    /// by vCenter's events: each power-on's time.
    fn powered_on_since<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
        since: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, Problem>> {
        let _ = (login, moref, since);
        Box::pin(async { Err(no_marks()) })
    }
    /// Asks the guest to shut down through VMware Tools; returns at once (the guest takes its
    /// time, or ignores it). A VM already off is fine.
    fn shutdown_guest<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>>;
    /// Powers the VM off hard; idempotent.
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
    /// Takes a snapshot named `name` described by `description` of the running VM; its moref.
    /// Not idempotent: the caller looks for its own first ([`crate::reconcile::warm`]).
    fn take_snapshot<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
        name: &'a str,
        description: &'a str,
    ) -> BoxFuture<'a, Result<String, Problem>> {
        let _ = (login, moref, name, description);
        Box::pin(async { Err(no_snapshots()) })
    }
    /// The disks as snapshot `snapshot` froze them (read only).
    fn snapshot_disks<'a>(
        &'a self,
        login: &'a SourceLogin,
        snapshot: &'a str,
    ) -> BoxFuture<'a, Result<Vec<vsphere::SnapshotDisk>, Problem>> {
        let _ = (login, snapshot);
        Box::pin(async { Err(no_snapshots()) })
    }
    /// The VM's snapshots, parents first.
    fn snapshots<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<Vec<vsphere::Snapshot>, Problem>> {
        let _ = (login, moref);
        Box::pin(async { Err(no_snapshots()) })
    }
    /// Removes one snapshot (its changes merged into the VM's disks); gone already is fine.
    fn remove_snapshot<'a>(
        &'a self,
        login: &'a SourceLogin,
        snapshot: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        let _ = (login, snapshot);
        Box::pin(async { Err(no_snapshots()) })
    }
    /// Logs out of every session this source keeps, each within `within`: what a controller
    /// that stops does while its runtime still runs (a session dropped later logs out in its
    /// destructor, which blocks on a runtime that no longer drives its I/O).
    fn close(&self, within: std::time::Duration) -> BoxFuture<'_, ()> {
        let _ = within;
        Box::pin(async {})
    }
    /// The names of the VMs under the folder at inventory path `folder` (any depth), or of all.
    fn list_vms<'a>(
        &'a self,
        login: &'a SourceLogin,
        folder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, Problem>> {
        let _ = (login, folder);
        Box::pin(async {
            Err(Problem::permanent(
                Reason::VMNotFound,
                "this source cannot list its VMs; list them in spec.vms",
            ))
        })
    }
}

/// [`SourceApi`] on vim_rs, on logged-in sessions kept in a [`SessionCache`]: a wave of hundreds
/// of migrations observes its sources in every reconcile, and a login per call made vCenter (and
/// vcsim's single lock) the bottleneck.
#[derive(Debug, Default)]
pub struct VsphereSource {
    sessions: SessionCache,
}

impl VsphereSource {
    /// A source whose calls to vSphere (each login and each call on a session) count in
    /// `calls`.
    pub fn counted(calls: prometheus_client::metrics::counter::Counter) -> Self {
        Self {
            sessions: SessionCache {
                calls,
                ..SessionCache::default()
            },
        }
    }
}

/// What identifies a session: the Secret it logged in with, and everything of that Secret the
/// login used. A changed password or trust is another key, so a rotated Secret logs in anew.
#[derive(Clone)]
struct SessionKey {
    secret_uid: String,
    url: String,
    username: String,
    password: SecretString,
    trust: SourceTrust,
}

impl SessionKey {
    fn of(login: &SourceLogin) -> Self {
        Self {
            secret_uid: login.secret_uid.clone(),
            url: login.url.clone(),
            username: login.username.clone(),
            password: login.password.clone(),
            trust: login.trust.clone(),
        }
    }

    /// The same Secret, endpoint, user and trust (the password may differ).
    fn same_binding(&self, other: &Self) -> bool {
        self.secret_uid == other.secret_uid
            && self.url == other.url
            && self.username == other.username
            && self.trust == other.trust
    }

    fn same(&self, other: &Self) -> bool {
        self.same_binding(other) && self.password.expose_secret() == other.password.expose_secret()
    }
}

/// One slot: the session of one key, logged in at most once at a time.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<vsphere::Session>>>>;

/// Logged-in vSphere sessions, one per Secret binding (Secret uid, URL, user, password, trust),
/// reused across reconciles.
///
/// # Guarantees
/// * A session is handed only to logins of the Secret (uid) and credentials it logged in with;
///   never across Secrets.
/// * Concurrent callers of one key wait for a single login.
/// * A session the server no longer knows (`NotAuthenticated`, expired or logged out) is
///   dropped, and the call is made once more on a fresh login.
#[derive(Default)]
pub struct SessionCache {
    slots: std::sync::Mutex<Vec<(SessionKey, Slot)>>,
    /// Logins and calls made (the metric `vsphere_calls`).
    calls: prometheus_client::metrics::counter::Counter,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.slots.lock().map_or(0, |s| s.len());
        f.debug_struct("SessionCache")
            .field("sessions", &n)
            .finish()
    }
}

/// Whether `e` says the session is not (or no longer) logged in.
fn not_authenticated(e: &vsphere::Error) -> bool {
    matches!(e, vsphere::Error::Fault { name, .. } if name == "NotAuthenticated")
}

impl SessionCache {
    /// The slot of `login`'s key; a slot of the same binding with another password (the Secret
    /// was rotated) is replaced.
    fn slot(&self, login: &SourceLogin) -> Slot {
        let key = SessionKey::of(login);
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, slot)) = slots.iter().find(|(k, _)| k.same(&key)) {
            return slot.clone();
        }
        slots.retain(|(k, _)| !k.same_binding(&key));
        let slot = Slot::default();
        slots.push((key, slot.clone()));
        slot
    }

    /// A logged-in session for `login`: the cached one, or a new login.
    async fn session(&self, login: &SourceLogin) -> Result<Arc<vsphere::Session>, Problem> {
        let ep = endpoint(login)?;
        let slot = self.slot(login);
        let mut held = slot.lock().await;
        if let Some(s) = held.as_ref() {
            return Ok(s.clone());
        }
        self.calls.inc();
        let s = Arc::new(
            vsphere::Session::connect(&ep)
                .await
                .map_err(|e| problem_of(&e))?,
        );
        *held = Some(s.clone());
        Ok(s)
    }

    /// Takes every session out of the cache and logs them out, all at once and within `within`
    /// (a session whose logout times out is marked ended all the same: vim_rs marks it before
    /// it asks). Returns how many it logged out.
    async fn close_all(&self, within: std::time::Duration) -> usize {
        let slots: Vec<Slot> = std::mem::take(
            &mut *self
                .slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_iter()
        .map(|(_, slot)| slot)
        .collect();
        let logouts = slots.into_iter().map(|slot| async move {
            let session = slot.lock().await.take()?;
            tokio::time::timeout(within, session.logout())
                .await
                .ok()?
                .ok()
        });
        futures::future::join_all(logouts)
            .await
            .into_iter()
            .flatten()
            .count()
    }

    /// Forgets `stale` (only if it is still the cached session of `login`).
    async fn drop_session(&self, login: &SourceLogin, stale: &Arc<vsphere::Session>) {
        let slot = self.slot(login);
        let mut held = slot.lock().await;
        if held.as_ref().is_some_and(|s| Arc::ptr_eq(s, stale)) {
            *held = None;
        }
    }

    /// Runs `call` on a session of `login`; once more on a fresh login when the session was
    /// not authenticated any more. The outer `Err` is the login's problem (classified), the
    /// inner one the call's.
    async fn with<T, F, Fut>(
        &self,
        login: &SourceLogin,
        call: F,
    ) -> Result<Result<T, vsphere::Error>, Problem>
    where
        F: Fn(Arc<vsphere::Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, vsphere::Error>>,
    {
        let s = self.session(login).await?;
        self.calls.inc();
        Ok(match call(s.clone()).await {
            Err(e) if not_authenticated(&e) => {
                self.drop_session(login, &s).await;
                let s = self.session(login).await?;
                self.calls.inc();
                call(s).await
            }
            other => other,
        })
    }

    /// [`Self::with`], the call's vSphere error made a problem by `problem`.
    async fn call<T, F, Fut>(
        &self,
        login: &SourceLogin,
        op: F,
        problem: impl FnOnce(&vsphere::Error) -> Problem,
    ) -> Result<T, Problem>
    where
        F: Fn(Arc<vsphere::Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, vsphere::Error>>,
    {
        self.with(login, op).await?.map_err(|e| problem(&e))
    }
}

pub(crate) fn problem_of(e: &vsphere::Error) -> Problem {
    use vsphere::Error as E;
    let msg = e.to_string();
    match e {
        E::Unreachable { .. } => Problem::transient(
            Reason::EndpointUnreachable,
            format!("{msg}; check the vSphere URL and the network"),
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
            format!("{msg}; check the vSphere URL"),
        ),
        // Not a disk layout ferry refuses, but the same outcome: no migration of a VM ferry
        // cannot read whole, before anything is touched.
        E::Unreadable(_) => Problem::permanent(Reason::UnsupportedDiskLayout, msg),
        _ if e.is_transient() => Problem::transient(Reason::TransientError, msg),
        _ => Problem::permanent(Reason::TransientError, msg),
    }
}

pub(crate) fn endpoint(login: &SourceLogin) -> Result<vsphere::Endpoint, Problem> {
    let tls = match &login.trust {
        SourceTrust::Thumbprint(t) => {
            vsphere::TlsPolicy::Thumbprint(vsphere::Thumbprint::parse(t).map_err(|e| {
                Problem::permanent(
                    Reason::ThumbprintMismatch,
                    format!("the thumbprint of Secret {}: {e}", login.secret),
                )
            })?)
        }
        SourceTrust::CaBundle(pem) => {
            vsphere::TlsPolicy::CaBundle(vsphere::tls::CaBundle::from_pem(pem).map_err(|e| {
                Problem::permanent(
                    Reason::ThumbprintMismatch,
                    format!("the cacert of Secret {}: {e}", login.secret),
                )
            })?)
        }
        SourceTrust::Insecure => vsphere::TlsPolicy::Insecure,
        SourceTrust::SystemRoots => vsphere::TlsPolicy::SystemRoots,
    };
    Ok(vsphere::Endpoint {
        url: login.url.clone(),
        username: login.username.clone(),
        password: login.password.clone(),
        tls,
    })
}

fn power_state(p: vsphere::PowerState) -> PowerState {
    match p {
        vsphere::PowerState::PoweredOn => PowerState::PoweredOn,
        vsphere::PowerState::PoweredOff => PowerState::PoweredOff,
        vsphere::PowerState::Suspended => PowerState::Suspended,
    }
}

/// What defines a copy of a VM with `disks`, read at `at` (vCenter's clock).
fn state_of(
    at: String,
    change_version: Option<String>,
    disks: &[vsphere::DiskInfo],
    counted: Option<u32>,
) -> SourceState {
    SourceState {
        read_at: at,
        change_version,
        num_virtual_disks: counted.and_then(|n| i32::try_from(n).ok()),
        disks: disks
            .iter()
            .map(|d| SourceDiskState {
                key: d.key,
                file: d.datastore_path.clone(),
                capacity_bytes: i64::try_from(d.capacity_bytes).unwrap_or(i64::MAX),
                change_id: d.change_id.clone(),
            })
            .collect(),
        ..SourceState::default()
    }
}

/// The source VM is gone.
fn gone(moref: &str, login: &SourceLogin) -> Problem {
    Problem::permanent(
        Reason::VMNotFound,
        format!("the source VM {moref} is gone from {}", login.url),
    )
}

/// A source port that cannot read what defines a copy of a VM.
fn no_marks() -> Problem {
    Problem::permanent(
        Reason::SourceChanged,
        "this source cannot tell what defines a copy of the VM, so ferry cannot prove the copy is its final state",
    )
}

fn to_discovered(vm: &vsphere::VmInfo) -> DiscoveredSource {
    let cpus = i32::try_from(vm.num_cpu).ok();
    DiscoveredSource {
        name: Some(vm.name.clone()),
        moref: Some(vm.moref.clone()),
        uuid: Some(vm.uuid.clone()).filter(|s| !s.is_empty()),
        instance_uuid: Some(vm.instance_uuid.clone()).filter(|s| !s.is_empty()),
        power_state: Some(power_state(vm.power_state)),
        guest_id: Some(vm.guest_id.clone()).filter(|s| !s.is_empty()),
        guest_os_family: Some(vm.guest_family),
        guest_full_name: Some(vm.guest_full_name.clone()).filter(|s| !s.is_empty()),
        vmware_tools: Some(vm.tools),
        firmware: Some(match vm.firmware {
            vsphere::Firmware::Bios => Firmware::Bios,
            vsphere::Firmware::Efi => Firmware::Efi,
        }),
        secure_boot: Some(vm.firmware == vsphere::Firmware::Efi && vm.secure_boot),
        change_tracking: vm.change_tracking,
        num_cpu: cpus,
        // Only a whole number of sockets is a topology; anything else reads as one core each.
        cores_per_socket: i32::try_from(vm.cores_per_socket)
            .ok()
            .filter(|c| *c > 0 && cpus.is_some_and(|n| n % c == 0)),
        memory_mib: i64::try_from(vm.memory_mib).ok(),
        disks: vm
            .disks
            .iter()
            .map(|d| DiscoveredDisk {
                key: d.key,
                label: d.label.clone(),
                datastore_path: d.datastore_path.clone(),
                capacity_bytes: i64::try_from(d.capacity_bytes).unwrap_or(i64::MAX),
                controller: d.controller,
            })
            .collect(),
        nics: vm
            .nics
            .iter()
            .map(|n| DiscoveredNic {
                mac: n.mac.clone(),
                network: n.network.clone(),
                device_type: Some(n.device_type),
                pci_slot_number: n.pci_slot,
            })
            .collect(),
        host: vm.host.clone(),
    }
}

impl SourceApi for VsphereSource {
    fn close(&self, within: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let closed = self.sessions.close_all(within).await;
            tracing::info!(sessions = closed, "logged out of vSphere");
        })
    }

    fn list_vms<'a>(
        &'a self,
        login: &'a SourceLogin,
        folder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, Problem>> {
        Box::pin(async move {
            let names = self
                .sessions
                .with(login, |s| async move { s.vm_names_under(folder).await })
                .await?;
            match names {
                Ok(n) => Ok(n),
                Err(vsphere::Error::NotFound(what)) => Err(Problem::permanent(
                    Reason::VMNotFound,
                    format!("no {what} on {}; check spec.selector.folder", login.url),
                )),
                Err(e) => Err(problem_of(&e)),
            }
        })
    }

    fn discover<'a>(
        &'a self,
        login: &'a SourceLogin,
        vm: VmLookup<'a>,
    ) -> BoxFuture<'a, Result<Discovered, Problem>> {
        Box::pin(async move {
            let selector = match vm {
                VmLookup::Name(n) => vsphere::VmSelector::Name(n.to_owned()),
                VmLookup::Id(i) => vsphere::VmSelector::Id(i.to_owned()),
                VmLookup::Uuid(u) => vsphere::VmSelector::Uuid(u.to_owned()),
            };
            let sel = &selector;
            // vCenter's clock first: a power-on after it is one this answer does not show.
            let found = self
                .sessions
                .with(login, |s| async move {
                    let at = s.current_time().await?;
                    Ok(s.find_vm(sel).await?.map(|info| (at, info)))
                })
                .await?;
            let (at, info) = match found {
                Ok(Some(found)) => found,
                Ok(None) | Err(vsphere::Error::NotFound(_)) => {
                    return Err(Problem::permanent(
                        Reason::VMNotFound,
                        format!("no VM with {selector} on {}; check spec.source", login.url),
                    ));
                }
                Err(e) => return Err(problem_of(&e)),
            };
            let layout_problems = vsphere::validate_layout(&info).err().unwrap_or_default();
            Ok(Discovered {
                source: to_discovered(&info),
                layout_problems,
                disks_reported: info.disks_reported,
                unread: info.unread.iter().map(ToString::to_string).collect(),
                state: Some(state_of(
                    at,
                    info.change_version.clone(),
                    &info.disks,
                    info.disks_reported,
                )),
            })
        })
    }

    fn marks<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<Marks, Problem>> {
        Box::pin(async move {
            let r = self
                .sessions
                .with(login, |s| async move { s.marks(moref).await })
                .await?;
            match r {
                Ok(m) => Ok(Marks {
                    power: power_state(m.power_state),
                    state: state_of(m.at, m.change_version, &m.disks, m.disks_reported),
                }),
                Err(vsphere::Error::NotFound(_)) => Err(gone(moref, login)),
                Err(e) => Err(problem_of(&e)),
            }
        })
    }

    fn powered_on_since<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
        since: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.powered_on_since(moref, since).await },
            problem_of,
        ))
    }

    fn power<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(PowerState, ToolsState), Problem>> {
        Box::pin(async move {
            let r = self
                .sessions
                .with(login, |s| async move { s.power(moref).await })
                .await?;
            match r {
                Ok((p, tools)) => Ok((power_state(p), tools)),
                Err(vsphere::Error::NotFound(_)) => Err(Problem::permanent(
                    Reason::VMNotFound,
                    format!("the source VM {moref} is gone from {}", login.url),
                )),
                Err(e) => Err(problem_of(&e)),
            }
        })
    }

    fn shutdown_guest<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.shutdown_guest(moref).await },
            move |e| power_problem(e, &format!("asking the guest of {moref} to shut down")),
        ))
    }

    fn power_off<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.power_off(moref).await },
            move |e| power_problem(e, &format!("powering {moref} off")),
        ))
    }

    fn power_on<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.power_on(moref).await },
            problem_of,
        ))
    }

    fn take_snapshot<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
        name: &'a str,
        description: &'a str,
    ) -> BoxFuture<'a, Result<String, Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.create_snapshot(moref, name, description).await },
            move |e| snapshot_problem(e, &format!("taking snapshot {name:?} of {moref}")),
        ))
    }

    fn snapshot_disks<'a>(
        &'a self,
        login: &'a SourceLogin,
        snapshot: &'a str,
    ) -> BoxFuture<'a, Result<Vec<vsphere::SnapshotDisk>, Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.snapshot_disks(snapshot).await },
            move |e| snapshot_problem(e, &format!("reading snapshot {snapshot}")),
        ))
    }

    fn snapshots<'a>(
        &'a self,
        login: &'a SourceLogin,
        moref: &'a str,
    ) -> BoxFuture<'a, Result<Vec<vsphere::Snapshot>, Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.snapshots(moref).await },
            problem_of,
        ))
    }

    fn remove_snapshot<'a>(
        &'a self,
        login: &'a SourceLogin,
        snapshot: &'a str,
    ) -> BoxFuture<'a, Result<(), Problem>> {
        Box::pin(self.sessions.call(
            login,
            move |s| async move { s.remove_snapshot(snapshot).await },
            move |e| snapshot_problem(e, &format!("removing snapshot {snapshot}")),
        ))
    }
}

/// What a source without snapshots answers to a warm migration.
fn no_snapshots() -> Problem {
    Problem::permanent(
        Reason::SnapshotFailed,
        "this source takes no snapshots: migrate cold (spec.mode: Cold)",
    )
}

/// A failed snapshot operation: a transient error as classified, anything else
/// `SnapshotFailed` saying what was being `doing`.
fn snapshot_problem(e: &vsphere::Error, doing: &str) -> Problem {
    let p = problem_of(e);
    if p.transient {
        p
    } else {
        Problem::permanent(Reason::SnapshotFailed, format!("{doing}: {e}"))
    }
}

/// A failed power operation: a transient error as classified, anything else `PowerOffFailed`
/// saying what was being `doing`.
fn power_problem(e: &vsphere::Error, doing: &str) -> Problem {
    let p = problem_of(e);
    if p.transient {
        p
    } else {
        Problem::permanent(Reason::PowerOffFailed, format!("{doing}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(secret_uid: &str, password: &str) -> SourceLogin {
        SourceLogin {
            secret: "vc".into(),
            secret_uid: secret_uid.into(),
            url: "https://vc.example/sdk".into(),
            username: "u".into(),
            password: SecretString::from(password.to_owned()),
            trust: SourceTrust::Insecure,
        }
    }

    #[test]
    fn a_session_serves_one_secret_and_its_credentials_only() {
        let cache = SessionCache::default();
        let a = cache.slot(&login("uid-a", "p1"));
        assert!(
            Arc::ptr_eq(&a, &cache.slot(&login("uid-a", "p1"))),
            "the same Secret and credentials share one session"
        );
        let b = cache.slot(&login("uid-b", "p1"));
        assert!(
            !Arc::ptr_eq(&a, &b),
            "another Secret with the same credentials logs in on its own"
        );
        let mut other_user = login("uid-a", "p1");
        other_user.username = "v".into();
        assert!(!Arc::ptr_eq(&a, &cache.slot(&other_user)));
        let mut other_trust = login("uid-a", "p1");
        other_trust.trust = SourceTrust::SystemRoots;
        assert!(!Arc::ptr_eq(&a, &cache.slot(&other_trust)));
        let rotated = cache.slot(&login("uid-a", "p2"));
        assert!(
            !Arc::ptr_eq(&a, &rotated),
            "a rotated password logs in anew"
        );
        assert!(
            !Arc::ptr_eq(&a, &cache.slot(&login("uid-a", "p1"))),
            "the session of the old password is forgotten"
        );
    }

    #[test]
    fn only_not_authenticated_drops_a_session() {
        let fault = |name: &str| vsphere::Error::Fault {
            name: name.into(),
            message: String::new(),
        };
        assert!(not_authenticated(&fault("NotAuthenticated")));
        assert!(!not_authenticated(&fault("InvalidState")));
        assert!(!not_authenticated(&vsphere::Error::NotFound("vm-1".into())));
    }
}
