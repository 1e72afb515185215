//! A logged-in SOAP session: inventory reads, power operations, datastore downloads.

use secrecy::ExposeSecret;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;
use reqwest::cookie::{CookieStore, Jar};
use tokio::io::AsyncWriteExt;
use vim_rs::core::client::{Client, ClientBuilder, TransportMode, VimClient};
use vim_rs::core::pc_helpers::Queriable;
use vim_rs::mo;
use vim_rs::types::enums::{MoTypesEnum, TaskInfoStateEnum};
use vim_rs::types::structs::{
    ManagedObjectReference, ObjectContent, ObjectSpec, PropertyFilterSpec, RetrieveOptions,
    SelectionSpec, TraversalSpec,
};

use super::answer::{self, RetrieveRequest};
use super::error::chain;
use super::inventory::{self, TaskState, VmName, VmPower, VmProps};
use super::url::{download_url, sdk_url, server_address};
use super::{Endpoint, Error, PowerState, Result, ToolsState, Unread, VmInfo, VmSelector};
use crate::tls::{self, TlsObserver};

/// How long to wait for a power task; vCenter answers in seconds unless something is wrong.
const TASK_TIMEOUT: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// A stall this long on a download or a SOAP call counts as the endpoint being gone.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// A logged-in vSphere session. The same HTTP client (TLS policy and session cookie) serves SOAP
/// calls and datastore downloads.
pub struct Session {
    client: Arc<Client>,
    http: reqwest::Client,
    jar: Arc<Jar>,
    tls: TlsObserver,
    sdk: Url,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("sdk", &self.sdk.as_str())
            .finish_non_exhaustive()
    }
}

pub(crate) fn vm_ref(moref: &str) -> ManagedObjectReference {
    ManagedObjectReference {
        r#type: MoTypesEnum::VirtualMachine,
        value: moref.to_owned(),
    }
}

impl Session {
    /// Logs in over SOAP (works against ESXi, vCenter and vcsim).
    ///
    /// Guarantees: the server certificate passed `endpoint.tls` before any credential was sent.
    ///
    /// Errors: [`Error::Invalid`] (URL), [`Error::Unreachable`], [`Error::ThumbprintMismatch`],
    /// [`Error::TlsUntrusted`], [`Error::BadCredentials`], other faults.
    pub async fn connect(endpoint: &Endpoint) -> Result<Session> {
        let sdk = sdk_url(&endpoint.url)?;
        let (config, tls) = tls::client_config(&endpoint.tls)
            .map_err(|e| Error::Invalid(format!("TLS configuration: {e}")))?;
        let jar = Arc::new(Jar::default());
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(config)
            .cookie_provider(jar.clone())
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|e| Error::Invalid(format!("HTTP client: {}", chain(&e))))?;
        let client = ClientBuilder::new(&server_address(&sdk), http.clone())
            .basic_authn(&endpoint.username, endpoint.password.expose_secret())
            .app_details("ferry", env!("CARGO_PKG_VERSION"))
            .transport(TransportMode::Soap)
            .build()
            .await
            .map_err(|e| Error::from_vim(sdk.as_str(), &e, &tls).for_user(&endpoint.username))?;
        Ok(Session {
            client,
            http,
            jar,
            tls,
            sdk,
        })
    }

    /// The normalized SDK URL, `https://HOST[:PORT]/sdk`.
    pub fn sdk_url(&self) -> &Url {
        &self.sdk
    }

    /// `vmware_soap_session=...`: what the `/folder` file service wants, for a client that
    /// cannot share this session's HTTP client.
    pub fn session_cookie(&self) -> Option<String> {
        let header = self.jar.cookies(&self.sdk)?;
        let text = header.to_str().ok()?;
        text.split(';')
            .map(str::trim)
            .find(|c| c.starts_with("vmware_soap_session="))
            .map(str::to_owned)
    }

    pub(super) fn vim(&self, err: &vim_rs::core::client::Error) -> Error {
        Error::from_vim(self.sdk.as_str(), err, &self.tls)
    }

    /// The session's HTTP client (TLS policy, session cookie), its TLS observer and SOAP client,
    /// for the datastore reads and disk queries in `datastore.rs`.
    pub(super) fn parts(&self) -> (&reqwest::Client, &TlsObserver, &Arc<Client>) {
        (&self.http, &self.tls, &self.client)
    }

    /// Properties of one object; `None` when it does not exist.
    ///
    /// Not vim_rs' `retrieve_object`: that asks for missing objects to be reported in the
    /// result, which vcsim answers with an empty `returnval` that does not parse. Without the
    /// flag vCenter, ESXi and vcsim all answer a missing object with ManagedObjectNotFound.
    async fn retrieve_one<T>(&self, obj: &ManagedObjectReference) -> Result<Option<T>>
    where
        T: Queriable + TryFrom<ObjectContent>,
        <T as TryFrom<ObjectContent>>::Error: std::fmt::Display,
    {
        let pc = mo::PropertyCollector::new(
            self.client.clone(),
            &self.client.service_content().property_collector.value,
        );
        let spec = PropertyFilterSpec {
            object_set: vec![ObjectSpec {
                obj: obj.clone(),
                skip: Some(false),
                select_set: None,
            }],
            prop_set: vec![T::prop_spec()],
            report_missing_objects_in_results: None,
        };
        let result = match pc
            .retrieve_properties_ex(
                &[spec],
                &RetrieveOptions {
                    max_objects: Some(1),
                },
            )
            .await
        {
            Ok(r) => r,
            Err(e) => {
                return match self.vim(&e) {
                    Error::NotFound(_) => Ok(None),
                    other => Err(other),
                };
            }
        };
        match result.and_then(|r| r.objects.into_iter().next()) {
            Some(content) => T::try_from(content).map(Some).map_err(|e| {
                Error::Protocol(format!("{} {}: {e}", obj.r#type.as_str(), obj.value))
            }),
            None => Ok(None),
        }
    }

    /// The properties of one VM and what of vSphere's answer could not be read (see
    /// [`answer::read`]); `None` when the VM does not exist.
    ///
    /// Not [`Session::retrieve_one`]: that leaves the reading to vim_rs, which fails the whole
    /// read on one device it cannot build and says nothing about which.
    pub(crate) async fn vm_props(&self, moref: &str) -> Result<Option<(VmProps, Vec<Unread>)>> {
        let pc = &self.client.service_content().property_collector.value;
        let spec = PropertyFilterSpec {
            object_set: vec![ObjectSpec {
                obj: vm_ref(moref),
                skip: Some(false),
                select_set: None,
            }],
            prop_set: vec![VmProps::prop_spec()],
            report_missing_objects_in_results: None,
        };
        let options = RetrieveOptions {
            max_objects: Some(1),
        };
        let request = RetrieveRequest {
            spec_set: std::slice::from_ref(&spec),
            options: &options,
        };
        let body = match self
            .client
            .invoke_optional(
                "",
                "PropertyCollector",
                pc,
                "RetrievePropertiesEx",
                Some(&request),
            )
            .await
        {
            Ok(Some(body)) => body,
            Ok(None) => return Ok(None),
            Err(e) => {
                return match self.vim(&e) {
                    Error::NotFound(_) => Ok(None),
                    other => Err(other),
                };
            }
        };
        let text = std::str::from_utf8(&body)
            .map_err(|e| Error::Protocol(format!("VirtualMachine {moref}: {e}")))?;
        let read =
            answer::read(text).map_err(|why| Error::Unreadable(format!("VM {moref}: {why}")))?;
        match read.content {
            Some(content) => VmProps::try_from(content)
                .map(|p| Some((p, read.unread)))
                .map_err(|e| Error::Protocol(format!("VirtualMachine {moref}: {e}"))),
            None => Ok(None),
        }
    }

    /// Finds a VM and reads what a migration needs to know about it.
    ///
    /// Guarantees: `Ok(None)` only when no VM matches; by name, more than one match is
    /// [`Error::Ambiguous`]. By uuid, the BIOS UUID is tried first, then the instance UUID.
    pub async fn find_vm(&self, selector: &VmSelector) -> Result<Option<VmInfo>> {
        let moref = match selector {
            VmSelector::Id(id) => Some(id.clone()),
            VmSelector::Name(name) => self.find_by_name(name).await?,
            VmSelector::Uuid(uuid) => self.find_by_uuid(uuid).await?,
        };
        match moref {
            Some(m) => self.vm_info(&m).await,
            None => Ok(None),
        }
    }

    async fn find_by_name(&self, name: &str) -> Result<Option<String>> {
        let mut hits = self
            .vm_names()
            .await?
            .into_iter()
            .filter(|v| v.name.as_deref() == Some(name));
        match (hits.next(), hits.next()) {
            (None, _) => Ok(None),
            (Some(one), None) => Ok(Some(one.id.value)),
            (Some(_), Some(_)) => Err(Error::Ambiguous {
                name: name.to_owned(),
                count: 2 + hits.count(),
            }),
        }
    }

    /// The names of the VMs under the folder at inventory path `folder` (any depth), or of
    /// every VM; [`Error::NotFound`] when there is no such folder.
    pub async fn vm_names_under(&self, folder: Option<&str>) -> Result<Vec<String>> {
        let root = match folder {
            None => self.client.service_content().root_folder.clone(),
            Some(path) => {
                let Some(si) = self.client.service_content().search_index.as_ref() else {
                    return Err(Error::Protocol("the endpoint has no SearchIndex".into()));
                };
                mo::SearchIndex::new(self.client.clone(), &si.value)
                    .find_by_inventory_path(path)
                    .await
                    .map_err(|e| self.vim(&e))?
                    .ok_or_else(|| Error::NotFound(format!("folder {path}")))?
            }
        };
        Ok(self
            .vm_names_in(&root)
            .await?
            .into_iter()
            .filter_map(|v| v.name)
            .collect())
    }

    /// The name of every VM.
    async fn vm_names(&self) -> Result<Vec<VmName>> {
        let root = self.client.service_content().root_folder.clone();
        self.vm_names_in(&root).await
    }

    /// The name of every VM under `root`, through a container view in pages of up to 5,000
    /// (vim_rs' retriever asks for 100 a page: 100 round trips for a 10,000-VM inventory).
    async fn vm_names_in(&self, root: &ManagedObjectReference) -> Result<Vec<VmName>> {
        let content = self.client.service_content();
        let vm_mgr = content
            .view_manager
            .as_ref()
            .ok_or_else(|| Error::Protocol("no ViewManager".into()))?;
        let views = mo::ViewManager::new(self.client.clone(), &vm_mgr.value);
        let types = [MoTypesEnum::VirtualMachine.as_str().to_owned()];
        let view = views
            .create_container_view(root, Some(&types), true)
            .await
            .map_err(|e| self.vim(&e))?;
        let pc = mo::PropertyCollector::new(self.client.clone(), &content.property_collector.value);
        let spec = PropertyFilterSpec {
            object_set: vec![ObjectSpec {
                obj: view.clone(),
                skip: Some(true),
                select_set: Some(vec![Box::new(TraversalSpec {
                    selection_spec_: SelectionSpec {
                        name: Some("view".into()),
                    },
                    r#type: view.r#type.as_str().to_owned(),
                    path: "view".into(),
                    skip: Some(false),
                    select_set: None,
                })]),
            }],
            prop_set: vec![VmName::prop_spec()],
            report_missing_objects_in_results: None,
        };
        let result: Result<Vec<VmName>> = async {
            let mut out = Vec::new();
            let mut page = pc
                .retrieve_properties_ex(
                    &[spec],
                    &RetrieveOptions {
                        max_objects: Some(5000),
                    },
                )
                .await
                .map_err(|e| self.vim(&e))?;
            while let Some(p) = page {
                for content in p.objects {
                    out.push(
                        VmName::try_from(content)
                            .map_err(|e| Error::Protocol(format!("VM name: {e}")))?,
                    );
                }
                page = match p.token {
                    Some(token) => Some(
                        pc.continue_retrieve_properties_ex(&token)
                            .await
                            .map_err(|e| self.vim(&e))?,
                    ),
                    None => None,
                };
            }
            Ok(out)
        }
        .await;
        let _ = mo::ContainerView::new(self.client.clone(), &view.value)
            .destroy_view()
            .await;
        result
    }

    async fn find_by_uuid(&self, uuid: &str) -> Result<Option<String>> {
        let Some(si) = self.client.service_content().search_index.as_ref() else {
            return Err(Error::Protocol("the endpoint has no SearchIndex".into()));
        };
        let index = mo::SearchIndex::new(self.client.clone(), &si.value);
        for instance in [false, true] {
            let found = index
                .find_by_uuid(None, uuid, true, Some(instance))
                .await
                .map_err(|e| self.vim(&e))?;
            if let Some(m) = found {
                return Ok(Some(m.value));
            }
        }
        Ok(None)
    }

    /// Everything about one VM by moref; `None` when it does not exist.
    pub async fn vm_info(&self, moref: &str) -> Result<Option<VmInfo>> {
        let Some((p, unread)) = self.vm_props(moref).await? else {
            return Ok(None);
        };
        let devices = p.devices.unwrap_or_default();
        let power_state = p
            .power_state
            .as_ref()
            .and_then(inventory::power_state)
            .ok_or_else(|| Error::Protocol(format!("VM {moref} reports no known power state")))?;
        let parent = p.parent.or(p.parent_v_app);
        let datacenter = match parent {
            Some(parent) => self.datacenter_path(parent).await?,
            None => String::new(),
        };
        let mut nics = inventory::nics(&devices);
        // A distributed port group is named by its key in the NIC backing; in vCenter the key is
        // also the port group's moref, so the VM's network list gives its name.
        for net in p.networks.iter().flatten() {
            if nics.iter().any(|n| n.network == net.value) {
                let name = self.name_of(net).await?;
                for n in nics.iter_mut().filter(|n| n.network == net.value) {
                    n.network = name.clone();
                }
            }
        }
        let host = match &p.host {
            Some(h) => Some(self.name_of(h).await?),
            None => None,
        };
        let guest_id = p.guest_id.unwrap_or_default();
        let tools = inventory::tools(p.tools_running.as_deref(), p.tools_status.as_ref());
        // guest.guestFamily is what running Tools report; without them it is stale or a guess.
        let reported_family = p.guest_family.filter(|_| tools == ToolsState::Running);
        Ok(Some(VmInfo {
            moref: p.id.value,
            name: p.name.unwrap_or_default(),
            uuid: p.uuid.unwrap_or_default(),
            instance_uuid: p.instance_uuid.unwrap_or_default(),
            power_state,
            guest_family: inventory::guest_family(reported_family.as_deref(), &guest_id),
            guest_id,
            guest_full_name: p.guest_full_name.unwrap_or_default(),
            tools,
            firmware: inventory::firmware(p.firmware.as_deref()),
            secure_boot: p.secure_boot.unwrap_or(false),
            change_tracking: p.change_tracking,
            change_version: p.change_version,
            num_cpu: p.num_cpu.unwrap_or_default().max(0) as u32,
            cores_per_socket: p.cores_per_socket.unwrap_or(1).max(1) as u32,
            memory_mib: p.memory_mb.unwrap_or_default().max(0) as u64,
            disks: inventory::disks(&devices),
            passthrough: inventory::passthrough(&devices),
            snapshots: p.root_snapshots.as_ref().map_or(0, Vec::len),
            disks_reported: p.num_virtual_disks.and_then(|n| u32::try_from(n).ok()),
            unread,
            nics,
            host,
            datacenter,
        }))
    }

    /// Walks up from `start` to the datacenter, then on to the root folder, collecting the
    /// datacenter's inventory path (`dcPath` of the `/folder` service).
    async fn datacenter_path(&self, start: ManagedObjectReference) -> Result<String> {
        let mut cur = start;
        let mut dc: Option<Vec<String>> = None;
        for _ in 0..64 {
            let parent = self.parent_of(&cur).await?;
            if cur.r#type == MoTypesEnum::Datacenter {
                dc = Some(vec![self.name_of(&cur).await?]);
            } else if let Some(path) = dc.as_mut() {
                // A folder above the datacenter; the root folder (no parent) is not named in paths.
                if parent.is_some() {
                    path.insert(0, self.name_of(&cur).await?);
                }
            }
            match parent {
                Some(p) => cur = p,
                None => break,
            }
        }
        dc.map(|p| p.join("/"))
            .ok_or_else(|| Error::Protocol("the VM is not inside a datacenter".into()))
    }

    async fn parent_of(
        &self,
        obj: &ManagedObjectReference,
    ) -> Result<Option<ManagedObjectReference>> {
        match self
            .client
            .fetch_property_raw("", obj.r#type.as_str(), &obj.value, "parent")
            .await
        {
            Ok(None) => Ok(None),
            Ok(Some(v)) => vim_rs::core::client::extract_property::<ManagedObjectReference>(v)
                .map(Some)
                .map_err(|e| self.vim(&e)),
            Err(e) => Err(self.vim(&e)),
        }
    }

    async fn name_of(&self, obj: &ManagedObjectReference) -> Result<String> {
        self.client
            .fetch_property::<String>(obj.clone(), "name")
            .await
            .map_err(|e| self.vim(&e))
    }

    /// The VM's current power state.
    pub async fn power_state(&self, moref: &str) -> Result<PowerState> {
        Ok(self.power(moref).await?.0)
    }

    /// The VM's current power state and whether VMware Tools run in it.
    pub async fn power(&self, moref: &str) -> Result<(PowerState, ToolsState)> {
        let p: Option<VmPower> = self.retrieve_one(&vm_ref(moref)).await?;
        let p = p.ok_or_else(|| Error::NotFound(format!("VM {moref}")))?;
        let state = p
            .power_state
            .as_ref()
            .and_then(inventory::power_state)
            .ok_or_else(|| Error::NotFound(format!("VM {moref}")))?;
        Ok((
            state,
            inventory::tools(p.tools_running.as_deref(), p.tools_status.as_ref()),
        ))
    }

    /// Asks the guest to shut down through VMware Tools (`ShutdownGuest`). Returns at once: the
    /// guest shuts down on its own time, or not at all; watch the power state.
    ///
    /// Guarantees: a VM already off is `Ok` without a call.
    ///
    /// Errors: `ToolsUnavailable` and other faults as [`Error::Fault`].
    pub async fn shutdown_guest(&self, moref: &str) -> Result<()> {
        if self.power_state(moref).await? == PowerState::PoweredOff {
            return Ok(());
        }
        let vm = mo::VirtualMachine::new(self.client.clone(), moref);
        match vm.shutdown_guest().await {
            Ok(()) => Ok(()),
            Err(e) => match self.vim(&e) {
                // Off by now (a shutdown already under way finished).
                Error::Fault { name, .. }
                    if name == "InvalidPowerState"
                        && self.power_state(moref).await? == PowerState::PoweredOff =>
                {
                    Ok(())
                }
                other => Err(other),
            },
        }
    }

    /// Powers the VM off (hard power-off, as a migration's consistent copy needs) and waits.
    ///
    /// Guarantees: idempotent; a VM already off is `Ok` without a task.
    pub async fn power_off(&self, moref: &str) -> Result<()> {
        self.set_power(moref, PowerState::PoweredOff).await
    }

    /// Powers the VM on and waits. Idempotent.
    pub async fn power_on(&self, moref: &str) -> Result<()> {
        self.set_power(moref, PowerState::PoweredOn).await
    }

    async fn set_power(&self, moref: &str, want: PowerState) -> Result<()> {
        if self.power_state(moref).await? == want {
            return Ok(());
        }
        let vm = mo::VirtualMachine::new(self.client.clone(), moref);
        let task = match want {
            PowerState::PoweredOff => vm.power_off_vm_task().await,
            _ => vm.power_on_vm_task(None).await,
        };
        let outcome = match task {
            Ok(task) => self.wait_task(&task).await,
            Err(e) => Err(self.vim(&e)),
        };
        match outcome {
            // Someone else (or a retried call) got there first.
            Err(Error::Fault { name, .. })
                if name == "InvalidPowerState" && self.power_state(moref).await? == want =>
            {
                Ok(())
            }
            other => other,
        }
    }

    pub(super) async fn wait_task(&self, task: &ManagedObjectReference) -> Result<()> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            let t: Option<TaskState> = self.retrieve_one(task).await?;
            let t = t.ok_or_else(|| Error::NotFound(format!("task {}", task.value)))?;
            match t.state {
                Some(TaskInfoStateEnum::Success) => return Ok(()),
                Some(TaskInfoStateEnum::Error) => {
                    return Err(t.error.as_ref().map_or_else(
                        || Error::Fault {
                            name: "TaskFailed".into(),
                            message: task.value.clone(),
                        },
                        Error::from_fault,
                    ));
                }
                _ => {}
            }
            if started.elapsed() > TASK_TIMEOUT {
                return Err(Error::Fault {
                    name: "Timedout".into(),
                    message: format!(
                        "task {} unfinished after {}s",
                        task.value,
                        TASK_TIMEOUT.as_secs()
                    ),
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// The `/folder` URL of a datastore file on this endpoint. See [`super::download_url`].
    pub fn download_url(&self, datastore_path: &str, datacenter: &str) -> Result<Url> {
        download_url(self.sdk.as_str(), datastore_path, datacenter)
    }

    /// Streams a datastore file to `dest`, calling `progress(bytes_done, total)` as it goes.
    ///
    /// Guarantees: `dest` appears only complete (written as `dest.part`, then renamed); the
    /// session cookie authenticates the request and the session's TLS policy applies.
    ///
    /// Errors: [`Error::NotFound`] for a missing file, [`Error::Http`], network errors as for
    /// [`Session::connect`], [`Error::Io`] writing `dest`.
    pub async fn download(
        &self,
        datastore_path: &str,
        datacenter: &str,
        dest: &Path,
        mut progress: impl FnMut(u64, Option<u64>),
    ) -> Result<u64> {
        let url = self.download_url(datastore_path, datacenter)?;
        let net = |e: reqwest::Error| Error::from_reqwest(url.as_str(), &e, &self.tls);
        let resp = self.http.get(url.clone()).send().await.map_err(net)?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(Error::NotFound(format!(
                "datastore file {datastore_path} (datacenter {datacenter:?})"
            )));
        }
        if !status.is_success() {
            return Err(Error::Http {
                status: status.as_u16(),
                url: url.to_string(),
            });
        }
        let total = resp.content_length();
        let part = dest.with_extension(match dest.extension() {
            Some(ext) => format!("{}.part", ext.to_string_lossy()),
            None => "part".into(),
        });
        let io = |source| Error::Io {
            path: part.clone(),
            source,
        };
        let file = tokio::fs::File::create(&part).await.map_err(io)?;
        let mut out = tokio::io::BufWriter::with_capacity(1 << 20, file);
        let mut resp = resp;
        let mut done = 0u64;
        progress(0, total);
        while let Some(chunk) = resp.chunk().await.map_err(net)? {
            out.write_all(&chunk).await.map_err(io)?;
            done += chunk.len() as u64;
            progress(done, total);
        }
        out.flush().await.map_err(io)?;
        out.into_inner().sync_all().await.map_err(io)?;
        if let Some(t) = total.filter(|t| *t != done) {
            return Err(Error::Unreachable {
                url: url.to_string(),
                detail: format!("download ended after {done} of {t} bytes"),
            });
        }
        tokio::fs::rename(&part, dest)
            .await
            .map_err(|source| Error::Io {
                path: dest.to_owned(),
                source,
            })?;
        Ok(done)
    }

    /// Ends the session. Idempotent.
    pub async fn logout(&self) -> Result<()> {
        self.client.close().await.map_err(|e| self.vim(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::super::error::fault_name;

    #[test]
    fn invalid_power_state_is_recognized_by_name() {
        let f = vim_rs::types::structs::MethodFault {
            fault_cause: None,
            fault_message: None,
            type_: vim_rs::types::struct_enum::StructType::from_str("InvalidPowerState"),
            extra_fields_: Default::default(),
        };
        assert_eq!(fault_name(&f), "InvalidPowerState");
    }
}
