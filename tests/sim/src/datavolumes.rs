//! CDI's part: a DataVolume (`cdi.kubevirt.io/v1beta1`) with `source.s3` gets its PVC and an
//! "importer" that copies the object into the volume file, walking `status.phase`
//! `Pending` → `ImportScheduled` → `ImportInProgress` (`progress` "45.23%") → `Succeeded`,
//! with CDI's `Bound`/`Running`/`Ready` conditions, `claimName` and `restartCount`
//! (after `pkg/controller/datavolume` in containerized-data-importer).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{CustomResource, Resource, ResourceExt};
use object_store::ObjectStore;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::conditions::{self, Condition, Flavour};
use crate::context::Sim;
use crate::faults::{Fault, Step};
use crate::migration::{Child, Faults};
use crate::pvcs::Pvcs;
use crate::s3::{self, Copied, Credentials};
use crate::{Error, Result, clock, quantity, storage, volumes};

/// `DataVolume.spec`: the source and the claim to create.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "DataVolume",
    namespaced,
    status = "DataVolumeStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<DataVolumeSource>,
    /// A `PersistentVolumeClaimSpec`, used as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<Value>,
    /// CDI's `StorageSpec`: a claim spec whose blanks CDI fills in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Value>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.source`: exactly one kind of source.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct DataVolumeSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blank: Option<Value>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `spec.source.s3`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct S3Source {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config_map: Option<String>,
}

/// `DataVolume.status`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    #[serde(default)]
    pub restart_count: i32,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// DataVolume phases (`DataVolumePhase`).
pub mod phase {
    pub const PENDING: &str = "Pending";
    pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
    pub const PENDING_POPULATION: &str = "PendingPopulation";
    pub const IMPORT_SCHEDULED: &str = "ImportScheduled";
    pub const IMPORT_IN_PROGRESS: &str = "ImportInProgress";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
}

/// Where an import stands, as the DataVolume controller would derive it from the claim and
/// the importer pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// The claim is not bound yet.
    Pending,
    /// The claim's class binds on first consumer and no pod uses it yet (CDI's
    /// `WaitForFirstConsumer`, or `PendingPopulation` with populators).
    AwaitingConsumer {
        populator: bool,
    },
    /// Claim bound, importer pod not running yet.
    Scheduled,
    /// The importer pod cannot start (e.g. `CreateContainerConfigError`: its Secret is missing).
    Waiting {
        reason: String,
        message: String,
    },
    /// Importer running; `done` of `total` bytes copied (`total` 0 = not known yet).
    Running {
        done: u64,
        total: u64,
    },
    /// The importer failed and will be restarted (`restartCount` +1).
    Restarting {
        message: String,
    },
    Succeeded,
    /// A fatal importer error, or a source the sim cannot import.
    Failed {
        message: String,
    },
}

/// CDI's progress string: `"45.23%"`, `"N/A"` when the total is unknown.
pub fn progress_string(done: u64, total: u64) -> String {
    if total == 0 {
        return "N/A".to_string();
    }
    let pct = (done as f64 * 100.0 / total as f64).min(100.0);
    format!("{pct:.2}%")
}

const REASON_POD_RUNNING: &str = "Pod is running";
const REASON_TRANSFER_RUNNING: &str = "TransferRunning";

/// (status, reason, message) of `Ready` and of `Running`, as CDI derives them from the pod.
type Cond<'a> = (bool, &'a str, String);

/// The phase of `stage` and its `Ready` and `Running` conditions. Pure.
fn phase_and_conditions(stage: &Stage) -> (&'static str, Cond<'_>, Cond<'_>) {
    match stage {
        Stage::Pending => (
            phase::PENDING,
            (false, "", String::new()),
            (false, "", String::new()),
        ),
        Stage::AwaitingConsumer { populator } => (
            if *populator {
                phase::PENDING_POPULATION
            } else {
                phase::WAIT_FOR_FIRST_CONSUMER
            },
            (false, "", String::new()),
            (false, "", String::new()),
        ),
        Stage::Scheduled => (
            phase::IMPORT_SCHEDULED,
            (false, "", String::new()),
            (false, "", String::new()),
        ),
        Stage::Waiting { reason, message } => (
            phase::IMPORT_SCHEDULED,
            (false, "", String::new()),
            (false, reason.as_str(), message.clone()),
        ),
        Stage::Running { .. } => (
            phase::IMPORT_IN_PROGRESS,
            (false, REASON_TRANSFER_RUNNING, String::new()),
            (true, REASON_POD_RUNNING, String::new()),
        ),
        Stage::Restarting { message } => (
            phase::IMPORT_IN_PROGRESS,
            (false, "", String::new()),
            (false, "Error", message.clone()),
        ),
        Stage::Succeeded => (
            phase::SUCCEEDED,
            (true, "", String::new()),
            (false, "Completed", "Import Complete".to_string()),
        ),
        Stage::Failed { message } => (
            phase::FAILED,
            (false, "", String::new()),
            (false, "Error", message.clone()),
        ),
    }
}

/// The status CDI would show for `stage`, from the previous status. Pure.
///
/// Guarantees: `restartCount` grows by one exactly for `Restarting`; `progress` is "100.0%"
/// once `Succeeded`; `Ready` is `True` only when `Succeeded`; condition transition times move
/// only on status changes.
pub fn next_status(
    old: &DataVolumeStatus,
    claim: &str,
    stage: &Stage,
    now: &str,
) -> DataVolumeStatus {
    let mut s = old.clone();
    s.claim_name = Some(claim.to_string());
    let c = &mut s.conditions;
    let bound = !matches!(stage, Stage::Pending | Stage::AwaitingConsumer { .. });
    if bound {
        conditions::set(
            c,
            Flavour::Cdi,
            "Bound",
            true,
            "Bound",
            &format!("PVC {claim} Bound"),
            now,
        );
    } else {
        conditions::set(
            c,
            Flavour::Cdi,
            "Bound",
            false,
            "Pending",
            &format!("PVC {claim} Pending"),
            now,
        );
    }
    let (phase, ready, running) = phase_and_conditions(stage);
    conditions::set(c, Flavour::Cdi, "Ready", ready.0, ready.1, &ready.2, now);
    conditions::set(
        c,
        Flavour::Cdi,
        "Running",
        running.0,
        running.1,
        &running.2,
        now,
    );
    s.phase = Some(phase.to_string());
    match stage {
        Stage::Pending
        | Stage::AwaitingConsumer { .. }
        | Stage::Scheduled
        | Stage::Waiting { .. } => {
            s.progress = Some("N/A".to_string());
        }
        Stage::Running { done, total } => s.progress = Some(progress_string(*done, *total)),
        Stage::Restarting { .. } => s.restart_count += 1,
        Stage::Succeeded => s.progress = Some("100.0%".to_string()),
        Stage::Failed { .. } => {}
    }
    s
}

/// What kind of source a DataVolume asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceKind<'a> {
    S3(&'a S3Source),
    Blank,
    /// A source CDI knows and the sim does not simulate (`http`, `registry`, ...).
    Unsupported(String),
    /// No `spec.source` (e.g. `sourceRef`): nothing the sim can do.
    Missing,
}

/// Classifies `spec.source`. Pure.
pub fn classify(spec: &DataVolumeSpec) -> SourceKind<'_> {
    let Some(src) = &spec.source else {
        return SourceKind::Missing;
    };
    if let Some(s3) = &src.s3 {
        return SourceKind::S3(s3);
    }
    if src.blank.is_some() {
        return SourceKind::Blank;
    }
    match src.other.keys().next() {
        Some(k) => SourceKind::Unsupported(k.clone()),
        None => SourceKind::Missing,
    }
}

/// The claim CDI creates for a DataVolume: same name and namespace, owned (controller) by it,
/// its spec from `spec.pvc`, or from `spec.storage` with CDI's defaults filled in
/// (`ReadWriteOnce`, `Filesystem`, and `size_hint` bytes when no size is requested). Pure.
///
/// Errors: neither `spec.pvc` nor `spec.storage`, or a spec that is not an object.
pub fn claim_for(
    dv: &DataVolume,
    size_hint: u64,
) -> std::result::Result<PersistentVolumeClaim, String> {
    let mut spec = match (&dv.spec.pvc, &dv.spec.storage) {
        (Some(p), _) => p.clone(),
        (None, Some(s)) => s.clone(),
        (None, None) => {
            return Err("the DataVolume has neither spec.pvc nor spec.storage".to_string());
        }
    };
    let obj = spec
        .as_object_mut()
        .ok_or("spec.pvc/spec.storage is not an object")?;
    let is_storage = dv.spec.pvc.is_none();
    if is_storage {
        if obj
            .get("accessModes")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            obj.insert("accessModes".into(), serde_json::json!(["ReadWriteOnce"]));
        }
        if !obj.contains_key("volumeMode") {
            obj.insert("volumeMode".into(), "Filesystem".into());
        }
    }
    let has_size = obj
        .get("resources")
        .and_then(|r| r.get("requests"))
        .and_then(|r| r.get("storage"))
        .is_some();
    if !has_size {
        let resources = obj
            .entry("resources")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(r) = resources.as_object_mut() {
            let requests = r.entry("requests").or_insert_with(|| serde_json::json!({}));
            if let Some(req) = requests.as_object_mut() {
                req.insert("storage".into(), quantity::format_bytes(size_hint).into());
            }
        }
    }
    let pvc_spec = serde_json::from_value(spec).map_err(|e| format!("claim spec: {e}"))?;
    let mut annotations = BTreeMap::new();
    if let SourceKind::S3(s3) = classify(&dv.spec) {
        annotations.insert(
            "cdi.kubevirt.io/storage.import.endpoint".to_string(),
            s3.url.clone(),
        );
        annotations.insert(
            "cdi.kubevirt.io/storage.import.source".to_string(),
            "s3".to_string(),
        );
    }
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(dv.name_any()),
            namespace: dv.namespace(),
            labels: Some(BTreeMap::from([
                ("app".to_string(), "containerized-data-importer".to_string()),
                (
                    "app.kubernetes.io/component".to_string(),
                    "storage".to_string(),
                ),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "cdi-controller".to_string(),
                ),
            ])),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_ref(dv)]),
            ..ObjectMeta::default()
        },
        spec: Some(pvc_spec),
        status: None,
    })
}

fn owner_ref(dv: &DataVolume) -> OwnerReference {
    OwnerReference {
        api_version: DataVolume::api_version(&()).to_string(),
        kind: DataVolume::kind(&()).to_string(),
        name: dv.name_any(),
        uid: dv.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The importer's restart delay after `restarts` failures (the kubelet's crash-loop backoff:
/// 10 s doubling to 5 min), before speed scaling.
pub fn restart_backoff(restarts: i32) -> Duration {
    let exp = u32::try_from(restarts.clamp(0, 5)).unwrap_or(0);
    Duration::from_secs(10 * 2u64.pow(exp)).min(Duration::from_secs(300))
}

struct Ctx {
    sim: Arc<Sim>,
    pvcs: Arc<Pvcs>,
    dvs: Store<DataVolume>,
}

/// Runs the DataVolume controller and the volume-file sweep until the watch ends.
pub async fn run(sim: Arc<Sim>, pvcs: Arc<Pvcs>) {
    let api = sim.scoped::<DataVolume>();
    let controller = Controller::new(api, watcher::Config::default());
    let ctx = Arc::new(Ctx {
        sim: sim.clone(),
        pvcs,
        dvs: controller.store(),
    });
    let sweeper = tokio::spawn(sweep(ctx.clone()));
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "datavolume reconcile");
            }
        })
        .await;
    sweeper.abort();
}

fn error_policy(_dv: Arc<DataVolume>, e: &Error, _ctx: Arc<Ctx>) -> Action {
    warn!(error = %e, label = e.metric_label(), "datavolume");
    Action::requeue(Duration::from_secs(2))
}

fn finished(dv: &DataVolume) -> bool {
    let phase = dv.status.as_ref().and_then(|s| s.phase.as_deref());
    phase == Some(phase::SUCCEEDED) || phase == Some(phase::FAILED)
}

async fn reconcile(dv: Arc<DataVolume>, ctx: Arc<Ctx>) -> Result<Action> {
    if dv.meta().deletion_timestamp.is_some() || finished(&dv) {
        return Ok(Action::await_change());
    }
    let Some(uid) = dv.uid() else {
        return Ok(Action::await_change());
    };
    let c = ctx.clone();
    let obj = dv.clone();
    if ctx.sim.tasks.spawn_unique(format!("dv/{uid}"), async move {
        let key = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
        if let Err(e) = import(&c, &obj).await {
            warn!(dv = %key, error = %e, "import stopped; it restarts on the next reconcile");
        }
    }) {
        debug!(dv = %dv.name_any(), "import started");
    }
    // A periodic look restarts an import whose task ended on an error.
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// Whether the DataVolume the task works for is still there (same UID, not deleting).
fn alive(ctx: &Ctx, ns: &str, name: &str, uid: &str) -> bool {
    ctx.dvs
        .get(&ObjectRef::new(name).within(ns))
        .is_some_and(|d| d.uid().as_deref() == Some(uid) && d.meta().deletion_timestamp.is_none())
}

struct Importer<'a> {
    ctx: &'a Ctx,
    ns: String,
    name: String,
    uid: String,
    status: DataVolumeStatus,
}

impl Importer<'_> {
    async fn write(&mut self, stage: &Stage) -> Result<()> {
        let next = next_status(
            &self.status,
            &self.name,
            stage,
            &clock::format(clock::now()),
        );
        if next == self.status {
            return Ok(());
        }
        let api = self.ctx.sim.api::<DataVolume>(&self.ns);
        let patch = serde_json::json!({"status": next});
        api.patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if next.phase != self.status.phase {
            info!(dv = %format!("{}/{}", self.ns, self.name), phase = next.phase.as_deref().unwrap_or(""), "datavolume phase");
        }
        self.status = next;
        Ok(())
    }

    fn alive(&self) -> bool {
        alive(self.ctx, &self.ns, &self.name, &self.uid)
    }

    async fn sleep(&self, real: Duration) -> bool {
        let d = self.ctx.sim.settings.speed.delay(real);
        let step = Duration::from_millis(200);
        let deadline = tokio::time::Instant::now() + d;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(step.min(deadline - tokio::time::Instant::now())).await;
            if !self.alive() {
                return false;
            }
        }
        self.alive()
    }
}

async fn credentials(
    sim: &Sim,
    ns: &str,
    secret: Option<&str>,
) -> std::result::Result<Option<Credentials>, String> {
    let Some(name) = secret.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let secret = sim
        .api::<Secret>(ns)
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?;
    let Some(secret) = secret else {
        return Err(format!("secret \"{name}\" not found"));
    };
    let data = secret.data.unwrap_or_default();
    let get = |k: &str| {
        data.get(k)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .ok_or_else(|| format!("couldn't find key {k} in Secret {ns}/{name}"))
    };
    Ok(Some(Credentials {
        access_key_id: get("accessKeyId")?,
        secret_key: get("secretKey")?,
    }))
}

/// The CA certificates of a `certConfigMap`: every value of the ConfigMap, as CDI mounts each
/// key as a file and appends every PEM in the directory to the system pool.
async fn cert_config_map(
    sim: &Sim,
    ns: &str,
    name: Option<&str>,
) -> std::result::Result<Vec<String>, String> {
    let Some(name) = name.filter(|s| !s.is_empty()) else {
        return Ok(vec![]);
    };
    let map = sim
        .api::<ConfigMap>(ns)
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?;
    let Some(map) = map else {
        return Err(format!("configmap \"{name}\" not found"));
    };
    Ok(map.data.unwrap_or_default().into_values().collect())
}

/// Creates the DataVolume's claim if missing; binds it unless `bind` is false (a claim on a
/// first-consumer class, bound later).
async fn ensure_claim(ctx: &Ctx, dv: &DataVolume, size_hint: u64, bind: bool) -> Result<()> {
    let ns = dv.namespace().unwrap_or_default();
    let name = dv.name_any();
    let api = ctx.sim.api::<PersistentVolumeClaim>(&ns);
    let existing = api.get_opt(&name).await?;
    let pvc = match existing {
        Some(p) => p,
        None => {
            let want = claim_for(dv, size_hint).map_err(Error::Invalid)?;
            match api.create(&PostParams::default(), &want).await {
                Ok(p) => p,
                Err(kube::Error::Api(s)) if s.code == 409 => api.get(&name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if bind {
        bind_claim(ctx, &pvc, size_hint).await?;
    }
    Ok(())
}

/// How the DataVolume's claim binds: at once, or on first consumer (CDI's immediate-binding
/// annotation on the DataVolume overrides the class).
async fn binding_of(ctx: &Ctx, dv: &DataVolume) -> Result<storage::Binding> {
    let class = dv
        .spec
        .storage
        .as_ref()
        .or(dv.spec.pvc.as_ref())
        .and_then(|s| s.get("storageClassName"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let immediate = dv.annotations().contains_key(storage::BIND_IMMEDIATE);
    storage::claim_binding(&ctx.sim, class.as_deref(), immediate).await
}

/// Waits until a pod that uses the claim was scheduled (the scheduler wrote its node into the
/// claim); `false` when the DataVolume went away meanwhile.
async fn consumer_scheduled(imp: &Importer<'_>) -> Result<bool> {
    let api = imp.ctx.sim.api::<PersistentVolumeClaim>(&imp.ns);
    loop {
        if let Some(pvc) = api.get_opt(&imp.name).await?
            && pvc.annotations().contains_key(storage::SELECTED_NODE)
        {
            return Ok(true);
        }
        if !imp.sleep(Duration::from_millis(500)).await {
            return Ok(false);
        }
    }
}

async fn bind_claim(ctx: &Ctx, pvc: &PersistentVolumeClaim, size_hint: u64) -> Result<()> {
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let api = ctx.sim.api::<PersistentVolumeClaim>(&ns);
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        let spec = pvc.spec.clone().unwrap_or_default();
        let size = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| quantity::format_bytes(size_hint));
        let patch = serde_json::json!({"status": {
            "phase": "Bound",
            "accessModes": spec.access_modes.unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "capacity": {"storage": size},
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Where one step of an import leaves it.
enum Then<T> {
    /// Go on, with what the step found.
    Go(T),
    /// The importer pod starts over: it waited for something it mounts.
    Again,
    /// The import is over: it succeeded or failed for good (the status says which), or its
    /// DataVolume is gone.
    Over,
}

/// One DataVolume's import, from whatever its status says to `Succeeded` or `Failed`. Each
/// turn of the loop is one importer pod: its mounts, its claim and scheduling, then the copy;
/// a pod that waited for a mount or failed on the way is started over, as CDI restarts it.
async fn import(ctx: &Ctx, dv: &DataVolume) -> Result<()> {
    let ns = dv.namespace().unwrap_or_default();
    let name = dv.name_any();
    let uid = dv.uid().unwrap_or_default();
    let Some(dv) = still_to_import(ctx, &ns, &name, &uid).await? else {
        return Ok(());
    };
    let dv = &dv;
    let mut imp = Importer {
        ctx,
        ns,
        name,
        uid,
        status: dv.status.clone().unwrap_or_default(),
    };

    if imp.status.phase.is_none() {
        imp.write(&Stage::Pending).await?;
    }
    let Then::Go((s3src, location)) = source(&mut imp, dv).await? else {
        return Ok(());
    };

    let binding = binding_of(ctx, dv).await?;
    loop {
        if !imp.alive() {
            return Ok(());
        }
        let (creds, certs) = match mounts(&mut imp, dv, s3src.as_ref(), binding).await? {
            Then::Go(mounted) => mounted,
            Then::Again => continue,
            Then::Over => return Ok(()),
        };
        let store = location
            .as_ref()
            .map(|l| s3::store(l, creds.as_ref(), &certs))
            .transpose();
        let store = match store {
            Ok(s) => s,
            Err(e) => {
                return imp
                    .write(&Stage::Failed {
                        message: e.to_string(),
                    })
                    .await;
            }
        };
        let Then::Go(size_hint) =
            scheduled(&mut imp, dv, store.as_deref(), location.as_ref(), binding).await?
        else {
            return Ok(());
        };

        let vols = &ctx.sim.settings.volumes;
        let dir = vols.root().join(&imp.ns);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| Error::io(&dir, e))?;
        let (Some(store), Some(location)) = (store, &location) else {
            return fill_blank(&mut imp, binding, size_hint).await;
        };

        let Then::Go(fault) = fault_for(&imp).await? else {
            return Ok(());
        };
        let part = vols.partial(&imp.ns, &imp.name);
        let Then::Go((outcome, total)) =
            transfer(&mut imp, store.as_ref(), location, fault, &part).await?
        else {
            return Ok(());
        };
        if !settle(&mut imp, outcome, total, fault, &part, binding).await? {
            return Ok(());
        }
        if !imp
            .sleep(restart_backoff(imp.status.restart_count - 1))
            .await
        {
            return Ok(());
        }
    }
}

/// The DataVolume as it is now, if it still has an import to do.
async fn still_to_import(ctx: &Ctx, ns: &str, name: &str, uid: &str) -> Result<Option<DataVolume>> {
    // The event that started this task may be older than the import that just finished: only
    // the object as it is now says whether there is work left.
    let Some(dv) = ctx.sim.api::<DataVolume>(ns).get_opt(name).await? else {
        return Ok(None);
    };
    if dv.uid().as_deref() != Some(uid) || finished(&dv) || dv.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    Ok(Some(dv))
}

/// The S3 source and its location (`None` for a blank volume); a source the sim cannot
/// import fails the DataVolume at once.
async fn source(
    imp: &mut Importer<'_>,
    dv: &DataVolume,
) -> Result<Then<(Option<S3Source>, Option<s3::S3Location>)>> {
    let s3src = match classify(&dv.spec) {
        SourceKind::S3(s) => Some(s.clone()),
        SourceKind::Blank => None,
        SourceKind::Unsupported(kind) => {
            let message =
                format!("ferry-sim cannot import source {kind:?}: only s3 and blank are simulated");
            imp.write(&Stage::Failed { message }).await?;
            return Ok(Then::Over);
        }
        SourceKind::Missing => {
            imp.write(&Stage::Failed {
                message: "the DataVolume has no spec.source".into(),
            })
            .await?;
            return Ok(Then::Over);
        }
    };
    match s3src.as_ref().map(|s| s3::parse_url(&s.url)).transpose() {
        Ok(location) => Ok(Then::Go((s3src, location))),
        Err(e) => {
            imp.write(&Stage::Failed {
                message: e.to_string(),
            })
            .await?;
            Ok(Then::Over)
        }
    }
}

/// The Secret and the ConfigMap the importer pod mounts; while one is missing the pod cannot
/// start (`CreateContainerConfigError`) and is tried again.
async fn mounts(
    imp: &mut Importer<'_>,
    dv: &DataVolume,
    s3src: Option<&S3Source>,
    binding: storage::Binding,
) -> Result<Then<(Option<Credentials>, Vec<String>)>> {
    let sim = &imp.ctx.sim;
    let creds = match credentials(sim, &imp.ns, s3src.and_then(|s| s.secret_ref.as_deref())).await {
        Ok(c) => c,
        Err(message) => return unmountable(imp, dv, binding, message).await,
    };
    let certs = match cert_config_map(
        sim,
        &imp.ns,
        s3src.and_then(|s| s.cert_config_map.as_deref()),
    )
    .await
    {
        Ok(c) => c,
        // The importer pod cannot mount a missing ConfigMap: it waits, like the Secret.
        Err(message) => return unmountable(imp, dv, binding, message).await,
    };
    Ok(Then::Go((creds, certs)))
}

/// An importer pod that cannot mount what it needs: its claim is made anyway, it waits, and
/// it is tried again in two seconds.
async fn unmountable<T>(
    imp: &mut Importer<'_>,
    dv: &DataVolume,
    binding: storage::Binding,
    message: String,
) -> Result<Then<T>> {
    ensure_claim(imp.ctx, dv, 1 << 30, binding == storage::Binding::Immediate).await?;
    imp.write(&Stage::Waiting {
        reason: "CreateContainerConfigError".into(),
        message,
    })
    .await?;
    if !imp.sleep(Duration::from_secs(2)).await {
        return Ok(Then::Over);
    }
    Ok(Then::Again)
}

/// The claim made (sized from the object when the DataVolume names no size), a consumer
/// awaited when it binds on first consumer, and the importer pod scheduled; gives the size.
async fn scheduled(
    imp: &mut Importer<'_>,
    dv: &DataVolume,
    store: Option<&dyn ObjectStore>,
    location: Option<&s3::S3Location>,
    binding: storage::Binding,
) -> Result<Then<u64>> {
    let ctx = imp.ctx;
    let sim = &ctx.sim;
    // The claim is sized from the object when the DataVolume names no size.
    let size_hint = match (store, location) {
        (Some(st), Some(l)) => s3::size(st, &l.key).await.unwrap_or(1 << 30),
        _ => 1 << 30,
    };
    ensure_claim(ctx, dv, size_hint, binding == storage::Binding::Immediate).await?;
    if let storage::Binding::FirstConsumer { populator } = binding {
        imp.write(&Stage::AwaitingConsumer { populator }).await?;
        if !consumer_scheduled(imp).await? {
            return Ok(Then::Over);
        }
        // Without populators CDI's importer starts once the consumer bound the claim;
        // with them the claim binds only once populated (below).
        if !populator
            && let Some(pvc) = sim
                .api::<PersistentVolumeClaim>(&imp.ns)
                .get_opt(&imp.name)
                .await?
        {
            bind_claim(ctx, &pvc, size_hint).await?;
        }
    }
    imp.write(&Stage::Scheduled).await?;
    if !imp.sleep(Duration::from_millis(500)).await {
        return Ok(Then::Over);
    }
    Ok(Then::Go(size_hint))
}

/// A blank volume: a sparse file of the claim's size, handed to a populated claim only now.
async fn fill_blank(
    imp: &mut Importer<'_>,
    binding: storage::Binding,
    size_hint: u64,
) -> Result<()> {
    let ctx = imp.ctx;
    let sim = &ctx.sim;
    let (ns, name) = (imp.ns.as_str(), imp.name.as_str());
    let size = quantity::parse_bytes(&claim_size(ctx, ns, name).await).unwrap_or(size_hint);
    blank(&sim.settings.volumes, ns, name, size).await?;
    if binding == (storage::Binding::FirstConsumer { populator: true })
        && let Some(pvc) = sim.api::<PersistentVolumeClaim>(ns).get_opt(name).await?
    {
        bind_claim(ctx, &pvc, size).await?;
    }
    imp.write(&Stage::Succeeded).await
}

/// The fault injected into this attempt, if any.
async fn fault_for(imp: &Importer<'_>) -> Result<Then<Option<Fault>>> {
    let sim = &imp.ctx.sim;
    // Fresh annotations: a `once` fault recorded on the DataVolume by the previous attempt counts.
    let Some(fresh) = sim.api::<DataVolume>(&imp.ns).get_opt(&imp.name).await? else {
        return Ok(Then::Over);
    };
    let mut faults = match Faults::load(&sim.client, &child_of(&fresh)).await {
        Ok(f) => f,
        Err(e) => {
            warn!(dv = %imp.name, error = %e, "reading faults; importing without");
            Faults::none(&imp.ns, &imp.name)
        }
    };
    let fault = faults
        .take(&sim.client, &sim.settings.rates, Step::Import)
        .await?;
    Ok(Then::Go(fault))
}

/// The copy into `part`, its progress written as it goes; gives the copy's outcome and the
/// object's size as last seen. Over, the partial file removed, once the DataVolume is gone.
async fn transfer(
    imp: &mut Importer<'_>,
    store: &dyn ObjectStore,
    location: &s3::S3Location,
    fault: Option<Fault>,
    part: &std::path::Path,
) -> Result<Then<(Result<Copied>, u64)>> {
    let sim = &imp.ctx.sim;
    imp.write(&Stage::Running { done: 0, total: 0 }).await?;
    let (tx, mut rx) = watch::channel((0u64, 0u64));
    let rate = sim.settings.throughput * sim.settings.speed.factor();
    let copy = s3::copy(
        store,
        &location.key,
        part,
        rate,
        fault.map(|f| f.at_percent),
        &tx,
    );
    let mut copy = std::pin::pin!(copy);
    // CDI refreshes progress about every 500 ms; at high speeds a floor keeps the apiserver calm.
    let tick = sim.settings.speed.ms(500).max(Duration::from_millis(100));
    let outcome = loop {
        tokio::select! {
            r = &mut copy => break Some(r),
            () = tokio::time::sleep(tick) => {
                if !imp.alive() { break None; }
                let (done, total) = *rx.borrow_and_update();
                imp.write(&Stage::Running { done, total }).await?;
            }
        }
    };
    let Some(outcome) = outcome else {
        let _ = tokio::fs::remove_file(part).await;
        return Ok(Then::Over);
    };
    let (_, total) = *rx.borrow();
    Ok(Then::Go((outcome, total)))
}

/// What the copy's outcome makes of the import: installed and `Succeeded`, `Failed` for good,
/// or the importer pod restarted (`true`).
async fn settle(
    imp: &mut Importer<'_>,
    outcome: Result<Copied>,
    total: u64,
    fault: Option<Fault>,
    part: &std::path::Path,
    binding: storage::Binding,
) -> Result<bool> {
    let ctx = imp.ctx;
    let sim = &ctx.sim;
    let vols = &sim.settings.volumes;
    match outcome {
        Ok(Copied::Stopped { bytes }) => {
            imp.write(&Stage::Running { done: bytes, total }).await?;
            let terminal = fault.is_some_and(|f| f.terminal);
            let message = format!(
                "Unable to process data: injected {} import fault at {}% (ferry-sim)",
                if terminal { "permanent" } else { "transient" },
                fault.map_or(0.0, |f| f.at_percent)
            );
            let _ = tokio::fs::remove_file(part).await;
            if terminal {
                imp.write(&Stage::Failed { message }).await?;
                return Ok(false);
            }
            imp.write(&Stage::Restarting { message }).await?;
            Ok(true)
        }
        // CDI does not check an S3 object against anything (its checksum field exists for
        // http sources only): whatever bytes arrive are imported.
        Ok(Copied::Done { bytes, .. }) => {
            let img = vols.image(&imp.ns, &imp.name);
            // A new volume: nothing a pod wrote beside an earlier one of this name.
            let _ = tokio::fs::remove_dir_all(vols.files(&imp.ns, &imp.name)).await;
            if let Err(e) = crate::image::install_raw(part, &img).await {
                let _ = tokio::fs::remove_file(part).await;
                let message = format!("Unable to convert the image to raw: {e}");
                imp.write(&Stage::Failed { message }).await?;
                return Ok(false);
            }
            imp.write(&Stage::Running {
                done: bytes,
                total: bytes,
            })
            .await?;
            if binding == (storage::Binding::FirstConsumer { populator: true })
                && let Some(pvc) = sim
                    .api::<PersistentVolumeClaim>(&imp.ns)
                    .get_opt(&imp.name)
                    .await?
            {
                // The populated volume is handed to the claim only now.
                bind_claim(ctx, &pvc, bytes).await?;
            }
            imp.write(&Stage::Succeeded).await?;
            Ok(false)
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(part).await;
            let message = format!("Unable to connect to s3 data source: {e}");
            imp.write(&Stage::Restarting { message }).await?;
            Ok(true)
        }
    }
}

async fn claim_size(ctx: &Ctx, ns: &str, name: &str) -> String {
    ctx.sim
        .api::<PersistentVolumeClaim>(ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|p| p.spec)
        .and_then(|s| s.resources)
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").map(|q| q.0.clone()))
        .unwrap_or_default()
}

async fn blank(vols: &volumes::Volumes, ns: &str, name: &str, size: u64) -> Result<()> {
    let img = vols.image(ns, name);
    let f = tokio::fs::File::create(&img)
        .await
        .map_err(|e| Error::io(&img, e))?;
    f.set_len(size).await.map_err(|e| Error::io(&img, e))?;
    Ok(())
}

fn child_of(dv: &DataVolume) -> Child<'_> {
    Child {
        api_version: "cdi.kubevirt.io/v1beta1",
        kind: "DataVolume",
        plural: "datavolumes",
        namespace: dv.metadata.namespace.as_deref().unwrap_or(""),
        name: dv.metadata.name.as_deref().unwrap_or(""),
        annotations: dv.metadata.annotations.as_ref(),
        owners: dv.metadata.owner_references.as_deref().unwrap_or(&[]),
    }
}

/// Deletes volume files whose DataVolume and claim are both gone, every few seconds.
async fn sweep(ctx: Arc<Ctx>) {
    crate::pvcs::until_ready(&ctx.dvs).await;
    ctx.pvcs.ready().await;
    debug!("volume sweep running");
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut live: HashSet<String> = ctx.pvcs.keys().into_iter().collect();
        for dv in ctx.dvs.state() {
            live.insert(format!(
                "{}/{}",
                dv.namespace().unwrap_or_default(),
                dv.name_any()
            ));
        }
        let files = ctx.sim.settings.volumes.list();
        for path in volumes::orphans(&files, &live, ctx.sim.settings.namespace.as_deref()) {
            // A DataVolume created after the snapshot above would be in the store by now.
            let _ = std::fs::remove_dir_all(volumes::files_of(&path));
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    info!(path = %path.display(), "removed the volume of a deleted DataVolume")
                }
                Err(e) => debug!(path = %path.display(), error = %e, "removing a volume file"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const T: &str = "2026-01-01T00:00:00Z";

    fn cond<'a>(s: &'a DataVolumeStatus, t: &str) -> (&'a str, &'a str, &'a str) {
        let c = conditions::find(&s.conditions, t).unwrap();
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn progress_strings_look_like_cdi() {
        assert_eq!(progress_string(0, 0), "N/A");
        assert_eq!(progress_string(4523, 10000), "45.23%");
        assert_eq!(progress_string(1, 3), "33.33%");
        assert_eq!(progress_string(10, 10), "100.00%");
        assert_eq!(progress_string(11, 10), "100.00%");
    }

    #[test]
    fn walks_the_happy_path_with_cdi_conditions() {
        let s0 = DataVolumeStatus::default();
        let p = next_status(&s0, "dv", &Stage::Pending, T);
        assert_eq!(p.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&p, "Bound"), ("False", "Pending", "PVC dv Pending"));
        let s = next_status(&p, "dv", &Stage::Scheduled, T);
        assert_eq!(
            (s.phase.as_deref(), s.claim_name.as_deref()),
            (Some("ImportScheduled"), Some("dv"))
        );
        assert_eq!(cond(&s, "Bound"), ("True", "Bound", "PVC dv Bound"));
        let r = next_status(
            &s,
            "dv",
            &Stage::Running {
                done: 50,
                total: 200,
            },
            T,
        );
        assert_eq!(
            (r.phase.as_deref(), r.progress.as_deref()),
            (Some("ImportInProgress"), Some("25.00%"))
        );
        assert_eq!(cond(&r, "Running"), ("True", "Pod is running", ""));
        assert_eq!(cond(&r, "Ready"), ("False", "TransferRunning", ""));
        let d = next_status(&r, "dv", &Stage::Succeeded, T);
        assert_eq!(
            (d.phase.as_deref(), d.progress.as_deref()),
            (Some("Succeeded"), Some("100.0%"))
        );
        assert_eq!(cond(&d, "Ready"), ("True", "", ""));
        assert_eq!(
            cond(&d, "Running"),
            ("False", "Completed", "Import Complete")
        );
        assert_eq!(d.restart_count, 0);
    }

    #[test]
    fn a_transient_failure_restarts_in_place() {
        let r = next_status(
            &DataVolumeStatus::default(),
            "dv",
            &Stage::Running {
                done: 40,
                total: 100,
            },
            T,
        );
        let f = next_status(
            &r,
            "dv",
            &Stage::Restarting {
                message: "boom".into(),
            },
            T,
        );
        assert_eq!(f.phase.as_deref(), Some("ImportInProgress"));
        assert_eq!(f.restart_count, 1);
        assert_eq!(f.progress.as_deref(), Some("40.00%"));
        assert_eq!(cond(&f, "Running"), ("False", "Error", "boom"));
        let again = next_status(
            &f,
            "dv",
            &Stage::Running {
                done: 0,
                total: 100,
            },
            T,
        );
        assert_eq!(
            (again.restart_count, cond(&again, "Running").0),
            (1, "True")
        );
    }

    #[test]
    fn a_fatal_failure_ends_the_import() {
        let f = next_status(
            &DataVolumeStatus::default(),
            "dv",
            &Stage::Failed {
                message: "checksum".into(),
            },
            T,
        );
        assert_eq!(f.phase.as_deref(), Some("Failed"));
        assert_eq!(cond(&f, "Running"), ("False", "Error", "checksum"));
        assert_eq!(cond(&f, "Ready").0, "False");
    }

    #[test]
    fn a_missing_secret_waits_scheduled() {
        let w = next_status(
            &DataVolumeStatus::default(),
            "dv",
            &Stage::Waiting {
                reason: "CreateContainerConfigError".into(),
                message: "secret \"s\" not found".into(),
            },
            T,
        );
        assert_eq!(w.phase.as_deref(), Some("ImportScheduled"));
        assert_eq!(
            cond(&w, "Running"),
            (
                "False",
                "CreateContainerConfigError",
                "secret \"s\" not found"
            )
        );
    }

    #[test]
    fn the_same_stage_twice_changes_nothing() {
        let a = next_status(&DataVolumeStatus::default(), "dv", &Stage::Scheduled, T);
        let b = next_status(&a, "dv", &Stage::Scheduled, "2026-01-01T00:00:09Z");
        assert_eq!(a, b);
    }

    fn dv(spec: Value) -> DataVolume {
        let mut d = DataVolume::new("disk-0", serde_json::from_value(spec).unwrap());
        d.metadata.namespace = Some("ns".into());
        d.metadata.uid = Some("u-1".into());
        d
    }

    #[test]
    fn classifies_sources() {
        let s3 = dv(
            serde_json::json!({"source": {"s3": {"url": "http://h/b/k", "secretRef": "s"}}, "storage": {}}),
        );
        assert!(
            matches!(classify(&s3.spec), SourceKind::S3(s) if s.secret_ref.as_deref() == Some("s"))
        );
        assert_eq!(
            classify(&dv(serde_json::json!({"source": {"blank": {}}})).spec),
            SourceKind::Blank
        );
        assert_eq!(
            classify(&dv(serde_json::json!({"source": {"http": {"url": "x"}}})).spec),
            SourceKind::Unsupported("http".into())
        );
        assert_eq!(
            classify(
                &dv(serde_json::json!({"sourceRef": {"kind": "DataSource", "name": "x"}})).spec
            ),
            SourceKind::Missing
        );
    }

    #[test]
    fn the_claim_is_owned_by_the_datavolume_and_defaults_like_cdi() {
        let d = dv(
            serde_json::json!({"source": {"s3": {"url": "http://h/b/k"}}, "storage": {"storageClassName": "fast"}}),
        );
        let pvc = claim_for(&d, 64 * 1024 * 1024).unwrap();
        let owner = &pvc.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("DataVolume", "u-1", Some(true))
        );
        let spec = pvc.spec.unwrap();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"].0,
            "64Mi"
        );
        let p = dv(
            serde_json::json!({"pvc": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}}}),
        );
        let spec = claim_for(&p, 1).unwrap().spec.unwrap();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteMany".to_string()]));
        assert_eq!(spec.volume_mode, None);
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"].0,
            "2Gi"
        );
        assert!(claim_for(&dv(serde_json::json!({})), 1).is_err());
    }

    #[test]
    fn restart_backoff_doubles_to_five_minutes() {
        assert_eq!(restart_backoff(0), Duration::from_secs(10));
        assert_eq!(restart_backoff(2), Duration::from_secs(40));
        assert_eq!(restart_backoff(10), Duration::from_secs(300));
        assert_eq!(restart_backoff(-1), Duration::from_secs(10));
    }
}
